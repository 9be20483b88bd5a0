//! Server-side assignors of KIP-848 consumer groups (`group.consumer.assignors`): `uniform`
//! (the default) and `range`. Pure functions of the members' subscriptions, the subscribed
//! topics' partition counts and the previous target assignment.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::group::consumer_records::Assignment;

pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";

/// What an assignor knows of one member.
#[derive(Debug, Clone, Default)]
pub struct MemberSpec {
    /// Topic ids the member subscribes to that exist.
    pub subscribed: BTreeSet<Uuid>,
    /// The member's previous target assignment, kept where possible (stickiness).
    pub previous: Assignment,
    /// What the member holds now. A partition of its previous target it does not hold yet
    /// (given to it by a rebalance it has not heartbeated since) moves on, when one must, before
    /// one it holds: that move costs no revocation.
    pub owned: Assignment,
}

/// Kafka's assignor names, and the full class names of its `group.consumer.assignors`
/// default, map to ours.
pub use crate::config::consumer_assignor_name as canonical_name;

/// The target assignment of every member by `assignor` (a canonical name).
pub fn assign(
    assignor: &str,
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    match assignor {
        RANGE => range(members, partitions),
        _ => uniform(members, partitions),
    }
}

/// Per topic, its subscribers in member-id order get contiguous ranges; the first
/// `partitions % subscribers` get one more. Members subscribed to the same topics with the
/// same partition counts get the same partition numbers of each (co-partitioning).
fn range(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for (topic, count) in partitions {
        let subscribers: Vec<&String> = members
            .iter()
            .filter(|(_, s)| s.subscribed.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let n = subscribers.len() as i32;
        let (quota, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, m) in subscribers.into_iter().enumerate() {
            let take = quota + i32::from((i as i32) < extra);
            if take > 0 {
                out.get_mut(m)
                    .expect("every member has an entry")
                    .entry(*topic)
                    .or_default()
                    .extend(next..next + take);
            }
            next += take;
        }
    }
    out
}

/// Balanced and sticky: every member keeps what it had and still may have, the rest goes to
/// the eligible member with the fewest partitions, and then partitions move one at a time from
/// a member with at least two more than an eligible one until no such pair is left. With
/// every member subscribed to the same topics this ends with counts at most one apart and
/// the fewest moves from the previous assignment.
fn uniform(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let ids: Vec<&String> = members.keys().collect();
    let specs: Vec<&MemberSpec> = members.values().collect();
    let mut held: Vec<BTreeSet<(Uuid, i32)>> = vec![BTreeSet::new(); ids.len()];
    let mut taken: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    let exists = |t: &Uuid, p: i32| partitions.get(t).is_some_and(|n| p < *n);
    for (i, spec) in specs.iter().enumerate() {
        for (topic, ps) in &spec.previous {
            if !spec.subscribed.contains(topic) {
                continue;
            }
            for p in ps {
                if exists(topic, *p) && taken.insert((*topic, *p)) {
                    held[i].insert((*topic, *p));
                }
            }
        }
    }
    let eligible = |i: usize, t: &Uuid| specs[i].subscribed.contains(t);
    // Unassigned partitions to the least loaded eligible member.
    for (topic, count) in partitions {
        for p in 0..*count {
            if taken.contains(&(*topic, p)) {
                continue;
            }
            let best = (0..ids.len())
                .filter(|i| eligible(*i, topic))
                .min_by_key(|i| (held[*i].len(), *i));
            if let Some(i) = best {
                held[i].insert((*topic, p));
                taken.insert((*topic, p));
            }
        }
    }
    // Even out: a member at least two above an eligible one gives it a partition.
    loop {
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|i| (held[*i].len(), *i));
        let mut moved = false;
        'search: for hi in order.iter().rev() {
            for lo in order.iter() {
                if held[*lo].len() + 1 >= held[*hi].len() {
                    break;
                }
                // A partition the receiver may take that the giver does not hold yet, else
                // the highest: deterministic, and it leaves the giver's lowest (usually
                // longest held) partitions in place. (`min_by_key` keeps the first minimum.)
                if let Some(tp) = held[*hi]
                    .iter()
                    .rev()
                    .filter(|(t, _)| eligible(*lo, t))
                    .min_by_key(|(t, p)| specs[*hi].owned.get(t).is_some_and(|ps| ps.contains(p)))
                    .copied()
                {
                    held[*hi].remove(&tp);
                    held[*lo].insert(tp);
                    moved = true;
                    break 'search;
                }
            }
        }
        if !moved {
            break;
        }
    }
    ids.into_iter()
        .zip(held)
        .map(|(id, tps)| {
            let mut a = Assignment::new();
            for (t, p) in tps {
                a.entry(t).or_default().insert(p);
            }
            (id.clone(), a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn members(specs: &[(&str, &[u8])]) -> BTreeMap<String, MemberSpec> {
        specs
            .iter()
            .map(|(m, topics)| {
                (
                    m.to_string(),
                    MemberSpec {
                        subscribed: topics.iter().map(|n| t(*n)).collect(),
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn every_partition_once(out: &BTreeMap<String, Assignment>, partitions: &BTreeMap<Uuid, i32>) {
        let mut seen = BTreeSet::new();
        for a in out.values() {
            for (topic, ps) in a {
                for p in ps {
                    assert!(seen.insert((*topic, *p)), "{topic} {p} assigned twice");
                }
            }
        }
        let all: usize = partitions.values().map(|n| *n as usize).sum();
        assert_eq!(seen.len(), all);
    }

    #[test]
    fn uniform_balances_and_keeps_what_members_had() {
        let partitions: BTreeMap<Uuid, i32> = [(t(1), 60)].into();
        let mut ms = members(&[("a", &[1]), ("b", &[1]), ("c", &[1])]);
        let first = assign(UNIFORM, &ms, &partitions);
        every_partition_once(&first, &partitions);
        assert!(first.values().all(|a| count(a) == 20));
        // A fourth member joins: each of the others gives up 5, keeps 15.
        for (m, a) in &first {
            ms.get_mut(m).unwrap().previous = a.clone();
        }
        ms.insert(
            "d".into(),
            MemberSpec {
                subscribed: [t(1)].into(),
                ..Default::default()
            },
        );
        let second = assign(UNIFORM, &ms, &partitions);
        every_partition_once(&second, &partitions);
        for m in ["a", "b", "c"] {
            let kept = second[m][&t(1)].intersection(&first[m][&t(1)]).count();
            assert_eq!(kept, 15, "{m} keeps 15 of its 20");
        }
        assert_eq!(count(&second["d"]), 15);
    }

    #[test]
    fn uniform_moves_a_partition_not_yet_delivered_before_one_held() {
        // a's target gained partition 0 (a member that owned it left), and a has not
        // heartbeated since, so it holds 1..=3 only. b joins: a gives up two partitions. Taking
        // 0 costs nothing; only the second is a revocation.
        let partitions: BTreeMap<Uuid, i32> = [(t(1), 4)].into();
        let mut ms = members(&[("a", &[1]), ("b", &[1])]);
        let a = ms.get_mut("a").unwrap();
        a.previous = [(t(1), [0, 1, 2, 3].into())].into();
        a.owned = [(t(1), [1, 2, 3].into())].into();
        let out = assign(UNIFORM, &ms, &partitions);
        every_partition_once(&out, &partitions);
        assert_eq!(out["b"][&t(1)], [0, 3].into());
        assert_eq!(out["a"][&t(1)], [1, 2].into());
        // Without the ownership, the two highest move, as before.
        ms.get_mut("a").unwrap().owned = ms["a"].previous.clone();
        let out = assign(UNIFORM, &ms, &partitions);
        assert_eq!(out["b"][&t(1)], [2, 3].into());
    }

    #[test]
    fn uniform_respects_subscriptions() {
        let partitions: BTreeMap<Uuid, i32> = [(t(1), 4), (t(2), 4)].into();
        let ms = members(&[("a", &[1]), ("b", &[1, 2]), ("c", &[2])]);
        let out = assign(UNIFORM, &ms, &partitions);
        every_partition_once(&out, &partitions);
        assert!(!out["a"].contains_key(&t(2)));
        assert!(!out["c"].contains_key(&t(1)));
        let counts: Vec<usize> = out.values().map(count).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
    }

    #[test]
    fn uniform_drops_partitions_that_no_longer_exist_or_are_not_subscribed() {
        let partitions: BTreeMap<Uuid, i32> = [(t(1), 2)].into();
        let mut ms = members(&[("a", &[1])]);
        ms.get_mut("a").unwrap().previous = [(t(1), [0, 1, 5].into()), (t(9), [0].into())].into();
        let out = assign(UNIFORM, &ms, &partitions);
        assert_eq!(out["a"], [(t(1), [0, 1].into())].into());
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let partitions: BTreeMap<Uuid, i32> = [(t(1), 7), (t(2), 3)].into();
        let ms = members(&[("a", &[1, 2]), ("b", &[1, 2])]);
        let out = assign(RANGE, &ms, &partitions);
        every_partition_once(&out, &partitions);
        assert_eq!(out["a"][&t(1)], [0, 1, 2, 3].into());
        assert_eq!(out["b"][&t(1)], [4, 5, 6].into());
        assert_eq!(out["a"][&t(2)], [0, 1].into());
        assert_eq!(out["b"][&t(2)], [2].into());
    }

    #[test]
    fn more_members_than_partitions_leaves_some_empty() {
        let partitions: BTreeMap<Uuid, i32> = [(t(1), 2)].into();
        let ms = members(&[("a", &[1]), ("b", &[1]), ("c", &[1])]);
        for name in [UNIFORM, RANGE] {
            let out = assign(name, &ms, &partitions);
            every_partition_once(&out, &partitions);
            assert_eq!(out.values().filter(|a| count(a) == 0).count(), 1);
        }
    }

    #[test]
    fn kafkas_class_names_are_understood() {
        assert_eq!(
            canonical_name("org.apache.kafka.coordinator.group.assignor.UniformAssignor"),
            Some(UNIFORM)
        );
        assert_eq!(canonical_name("range"), Some(RANGE));
        assert_eq!(canonical_name("sticky"), None);
    }
}
