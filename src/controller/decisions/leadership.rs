//! Preferred leaders and automatic leader rebalancing.
//!
//! A partition's preferred leader is its first replica; placement spreads first replicas evenly,
//! so leadership is balanced when every partition is led by its preferred replica. Failures and
//! restarts move leaderships away; [`rebalance_pass`], run by the controller thread every
//! `leader.imbalance.check.interval`, moves them back.
//!
//! Which partitions a pass moves follows the per-broker imbalance ratio of Kafka's ZooKeeper-era
//! controller (`KafkaController#checkAndTriggerAutoLeaderRebalance`), which KRaft dropped:
//! a broker's ratio is the share of the partitions it is preferred for that another broker
//! leads (or nobody does), and only brokers above `leader.imbalance.per.broker.percentage` get
//! theirs back. 0 means every imbalanced partition, KRaft's behaviour
//! (`ReplicationControlManager#maybeBalancePartitionLeaders`).
//!
//! A partition is moved only when its preferred replica is active (unfenced, not shutting down)
//! and in the ISR. So a broker that has just restarted gets its leaderships back only once it has
//! caught up and its leaders have added it to their ISRs; not before, when it would serve reads
//! and take writes while still behind (the redpanda#18497 problem).

use std::collections::{BTreeMap, BTreeSet};

use super::partition_change::{build, unclean_enabled, Election, Target, NO_LEADER};
use super::ControllerSettings;
use crate::metadata::{MetadataImage, MetadataRecord};

/// One broker's share of leadership (for metrics and the rebalancing decision).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerLeadership {
    /// Partitions this broker leads.
    pub led: usize,
    /// Partitions whose preferred replica is this broker.
    pub preferred: usize,
    /// Of those, the ones another broker leads, or nobody.
    pub imbalanced: usize,
}

impl BrokerLeadership {
    /// `imbalanced / preferred`, 0 for a broker that is preferred for nothing.
    pub fn imbalance_ratio(&self) -> f64 {
        if self.preferred == 0 {
            0.0
        } else {
            self.imbalanced as f64 / self.preferred as f64
        }
    }

    /// Whether the ratio is above `percentage` % (exact, in integers).
    pub fn exceeds(&self, percentage: u32) -> bool {
        self.imbalanced as u128 * 100 > u128::from(percentage) * self.preferred as u128
    }
}

/// Every registered broker's leadership, by node id, plus any broker that partitions name as
/// preferred replica or leader without being registered.
pub fn leadership_summary(image: &MetadataImage) -> BTreeMap<i32, BrokerLeadership> {
    let mut summary: BTreeMap<i32, BrokerLeadership> = image
        .brokers
        .keys()
        .map(|&id| (id, BrokerLeadership::default()))
        .collect();
    for topic in image.topics.values() {
        for reg in topic.partitions.values() {
            if reg.leader != NO_LEADER {
                summary.entry(reg.leader).or_default().led += 1;
            }
            let preferred = reg.preferred_replica();
            if preferred == NO_LEADER {
                continue;
            }
            let entry = summary.entry(preferred).or_default();
            entry.preferred += 1;
            if reg.leader != preferred {
                entry.imbalanced += 1;
            }
        }
    }
    summary
}

/// One automatic rebalancing pass: a preferred election for each partition whose preferred
/// replica is a broker above the imbalance percentage, does not lead it, is active and is in
/// its ISR — in topic name and partition order, at most `max_elections` of them
/// ([`crate::limits::LEADER_ELECTIONS_PER_IMBALANCE_PASS_MAX`] from the controller thread).
///
/// Returns the records (leader and partition epochs bumped), the partitions elected, and whether
/// electable partitions were left for another pass because of the bound (the caller then runs
/// the next pass soon, [`crate::limits::LEADER_IMBALANCE_RECHECK_MS`], instead of after the
/// check interval). Nothing when `auto.leader.rebalance.enable` is off. Ratios are those of the
/// image the pass starts from.
pub fn rebalance_pass(
    image: &MetadataImage,
    settings: &ControllerSettings,
    max_elections: usize,
) -> (Vec<MetadataRecord>, Vec<(String, i32)>, bool) {
    let mut records = Vec::new();
    let mut elected = Vec::new();
    if !settings.auto_leader_rebalance_enable {
        return (records, elected, false);
    }
    let over: BTreeSet<i32> = leadership_summary(image)
        .into_iter()
        .filter(|(_, l)| l.exceeds(settings.leader_imbalance_per_broker_percentage))
        .map(|(id, _)| id)
        .collect();
    if over.is_empty() {
        return (records, elected, false);
    }
    let acceptable = |r: i32| image.is_broker_active(r);
    for topic in image.topics.values() {
        for (&partition, reg) in &topic.partitions {
            let preferred = reg.preferred_replica();
            if reg.leader == preferred
                || !over.contains(&preferred)
                || !reg.isr.contains(&preferred)
                || !image.is_broker_active(preferred)
            {
                continue;
            }
            if elected.len() == max_elections {
                return (records, elected, true);
            }
            let Some(next) = build(reg, Target::of(reg), Election::Preferred, &acceptable) else {
                continue;
            };
            debug_assert_eq!(next.leader, preferred, "the preferred replica is valid");
            records.push(MetadataRecord::Partition {
                topic_id: topic.id,
                partition,
                registration: next,
            });
            elected.push((topic.name.clone(), partition));
        }
    }
    (records, elected, false)
}

/// Whether some partition has no leader (Kafka's `areSomePartitionsLeaderless`): only then does
/// the controller schedule [`unclean_election_pass`].
pub fn has_leaderless_partitions(image: &MetadataImage) -> bool {
    image
        .topics
        .values()
        .any(|t| t.partitions.values().any(|p| p.leader == NO_LEADER))
}

/// One periodic pass over the partitions without a leader (Kafka's
/// `maybeTriggerUncleanLeaderElectionForLeaderlessPartitions`, KAFKA-12670): each whose topic
/// allows unclean election (its own config, else the broker default) gets the first active ISR
/// member, else the first active replica (alone in the ISR, RECOVERING); at most
/// `max_elections`. Without it a topic whose `unclean.leader.election.enable` is turned on after
/// its partitions lost every ISR member stays offline until a broker changes state.
/// Returns the records, the partitions elected, and whether the bound left some for another
/// pass.
pub fn unclean_election_pass(
    image: &MetadataImage,
    settings: &ControllerSettings,
    max_elections: usize,
) -> (Vec<MetadataRecord>, Vec<(String, i32)>, bool) {
    let mut records = Vec::new();
    let mut elected = Vec::new();
    let acceptable = |r: i32| image.is_broker_active(r);
    for topic in image.topics.values() {
        if !unclean_enabled(image, settings, topic) {
            continue;
        }
        for (&partition, reg) in &topic.partitions {
            if reg.leader != NO_LEADER {
                continue;
            }
            if elected.len() == max_elections {
                return (records, elected, true);
            }
            let Some(next) = build(reg, Target::of(reg), Election::Unclean, &acceptable) else {
                continue;
            };
            records.push(MetadataRecord::Partition {
                topic_id: topic.id,
                partition,
                registration: next,
            });
            elected.push((topic.name.clone(), partition));
        }
    }
    (records, elected, false)
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::controller::decisions::tests::{
        cluster, partition, set_partition, settings, spec, with_topic,
    };
    use crate::metadata::PartitionRegistration;

    fn with_percentage(percentage: u32) -> ControllerSettings {
        ControllerSettings {
            leader_imbalance_per_broker_percentage: percentage,
            ..settings()
        }
    }

    /// Three brokers and "t" with 30 partitions of RF 3: each broker is preferred for 10.
    fn balanced() -> MetadataImage {
        with_topic(&cluster(3), &spec("t", 30, 3), 1)
    }

    /// `image` with the partitions `moved` led by `leader` instead of their preferred replica.
    fn led_by(image: &MetadataImage, moved: &[i32], leader: i32) -> MetadataImage {
        let mut image = image.clone();
        for &p in moved {
            let reg = partition(&image, "t", p);
            image = set_partition(
                &image,
                "t",
                p,
                PartitionRegistration {
                    leader,
                    leader_epoch: reg.leader_epoch + 1,
                    ..reg
                },
            );
        }
        image
    }

    /// Partitions of "t" whose preferred replica is `broker`.
    fn preferred_by(image: &MetadataImage, broker: i32) -> Vec<i32> {
        image
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .filter(|(_, r)| r.replicas[0] == broker)
            .map(|(&p, _)| p)
            .collect()
    }

    #[test]
    fn unclean_election_pass_elects_only_where_the_topic_allows_it() {
        use crate::controller::decisions::fence_broker;
        // "t" and "u", two partitions each of RF 2 on brokers 1 and 2; broker 2 fenced, then
        // broker 1: every partition keeps its last ISR member and has no leader.
        let image = with_topic(&cluster(2), &spec("t", 2, 2), 1);
        let image = with_topic(&image, &spec("u", 2, 2), 2);
        let image = image.apply(&fence_broker(&image, &settings(), 2, None));
        let image = image.apply(&fence_broker(&image, &settings(), 1, None));
        assert!(has_leaderless_partitions(&image));
        // Broker 2 comes back: not in any ISR, so only an unclean election can pick it.
        let broker_epoch = image.broker(2).unwrap().broker_epoch;
        let image = image.apply(&[MetadataRecord::BrokerRegistrationChange {
            node_id: 2,
            broker_epoch,
            fenced: Some(false),
            in_controlled_shutdown: None,
        }]);
        let (records, elected, more) = unclean_election_pass(&image, &settings(), 10);
        assert!(
            records.is_empty() && elected.is_empty() && !more,
            "off by default"
        );
        let topic_id = image.topic("u").unwrap().id;
        let image = image.apply(&[MetadataRecord::TopicConfig {
            topic_id,
            name: "unclean.leader.election.enable".into(),
            value: Some("true".into()),
        }]);
        let (records, elected, more) = unclean_election_pass(&image, &settings(), 1);
        assert_eq!((elected.clone(), more), (vec![("u".to_string(), 0)], true));
        let image = image.apply(&records);
        let reg = partition(&image, "u", 0);
        assert_eq!((reg.leader, reg.isr.clone()), (2, vec![2]));
        let (records, elected, more) = unclean_election_pass(&image, &settings(), 10);
        assert_eq!((elected, more), (vec![("u".to_string(), 1)], false));
        let image = image.apply(&records);
        assert_eq!(partition(&image, "t", 0).leader, NO_LEADER, "t forbids it");
        assert!(has_leaderless_partitions(&image));
    }

    #[test]
    fn imbalance_ratio_table() {
        let image = balanced();
        let of_1 = preferred_by(&image, 1);
        assert_eq!(of_1.len(), 10);
        // (case, image, broker, expected (led, preferred, imbalanced), ratio, above 10 %)
        let one_moved = led_by(&image, &of_1[..1], 2);
        let two_moved = led_by(&image, &of_1[..2], 3);
        let leaderless = led_by(&image, &of_1[..3], -1);
        let with_4 = join4(&image);
        let cases: Vec<(&str, &MetadataImage, i32, (usize, usize, usize), f64, bool)> = vec![
            ("balanced", &image, 1, (10, 10, 0), 0.0, false),
            (
                "one of ten moved: 10 % is not above 10 %",
                &one_moved,
                1,
                (9, 10, 1),
                0.1,
                false,
            ),
            (
                "the broker that took it over",
                &one_moved,
                2,
                (11, 10, 0),
                0.0,
                false,
            ),
            ("two of ten moved", &two_moved, 1, (8, 10, 2), 0.2, true),
            (
                "leaderless partitions count as imbalanced",
                &leaderless,
                1,
                (7, 10, 3),
                0.3,
                true,
            ),
            (
                "a broker preferred for nothing",
                &with_4,
                4,
                (0, 0, 0),
                0.0,
                false,
            ),
        ];
        for (case, image, broker, (led, preferred, imbalanced), ratio, above) in cases {
            let s = leadership_summary(image)[&broker];
            assert_eq!(
                (s.led, s.preferred, s.imbalanced),
                (led, preferred, imbalanced),
                "{case}"
            );
            assert!(
                (s.imbalance_ratio() - ratio).abs() < 1e-9,
                "{case}: {}",
                s.imbalance_ratio()
            );
            assert_eq!(s.exceeds(10), above, "{case}");
        }
    }

    fn join4(image: &MetadataImage) -> MetadataImage {
        crate::controller::decisions::tests::join(
            image,
            crate::controller::decisions::tests::broker(4),
        )
    }

    #[test]
    fn which_partitions_a_pass_elects() {
        let image = balanced();
        let of_1 = preferred_by(&image, 1);
        let of_2 = preferred_by(&image, 2);
        // Broker 1 lost two of ten (20 %), broker 2 one of ten (10 %).
        let image = led_by(&led_by(&image, &of_1[..2], 3), &of_2[..1], 3);
        let t = |ps: &[i32]| ps.iter().map(|&p| ("t".to_owned(), p)).collect::<Vec<_>>();
        // (case, percentage, expected elected)
        let cases: Vec<(&str, u32, Vec<(String, i32)>)> = vec![
            ("10 %: only broker 1 is above", 10, t(&of_1[..2])),
            ("0 %: every imbalanced partition (KRaft)", 0, {
                let mut all = t(&of_1[..2]);
                all.extend(t(&of_2[..1]));
                all.sort_by_key(|(_, p)| *p);
                all
            }),
            ("20 %: nobody is above", 20, vec![]),
        ];
        for (case, percentage, expected) in cases {
            let (records, elected, more) =
                rebalance_pass(&image, &with_percentage(percentage), 1000);
            assert_eq!(elected, expected, "{case}");
            assert!(!more, "{case}");
            assert_eq!(records.len(), elected.len(), "{case}");
            let after = image.apply(&records);
            for (_, p) in &elected {
                let before = partition(&image, "t", *p);
                let now = partition(&after, "t", *p);
                assert_eq!(now.leader, now.replicas[0], "{case}: {p}");
                assert_eq!(
                    (now.leader_epoch, now.partition_epoch),
                    (before.leader_epoch + 1, before.partition_epoch + 1),
                    "{case}: {p}"
                );
            }
            // A pass over its own result has nothing left to do at that percentage.
            let (again, _, _) = rebalance_pass(&after, &with_percentage(percentage), 1000);
            assert!(again.is_empty(), "{case}");
        }
        let disabled = ControllerSettings {
            auto_leader_rebalance_enable: false,
            ..with_percentage(0)
        };
        assert_eq!(
            rebalance_pass(&image, &disabled, 1000),
            (vec![], vec![], false)
        );
    }

    #[test]
    fn a_pass_is_bounded_and_says_more_is_pending() {
        let image = balanced();
        let of_1 = preferred_by(&image, 1);
        let image = led_by(&image, &of_1, 2);
        let (records, elected, more) = rebalance_pass(&image, &with_percentage(0), 4);
        assert_eq!((records.len(), elected.len(), more), (4, 4, true));
        assert_eq!(
            elected,
            of_1[..4]
                .iter()
                .map(|&p| ("t".to_owned(), p))
                .collect::<Vec<_>>()
        );
        let image = image.apply(&records);
        let (records, elected, more) = rebalance_pass(&image, &with_percentage(0), 6);
        assert_eq!((elected.len(), more), (6, false), "exactly the rest");
        let image = image.apply(&records);
        // Nothing electable left beyond the bound: not pending.
        let (_, elected, more) = rebalance_pass(&image, &with_percentage(0), 0);
        assert_eq!((elected.len(), more), (0, false));
    }

    #[test]
    fn election_choice_table() {
        let image = balanced();
        let p = preferred_by(&image, 1)[0];
        let reg = partition(&image, "t", p);
        let b1 = image.brokers[&1].broker_epoch;
        let change = |fenced, shutting_down| MetadataRecord::BrokerRegistrationChange {
            node_id: 1,
            broker_epoch: b1,
            fenced,
            in_controlled_shutdown: shutting_down,
        };
        let others: Vec<i32> = reg.replicas[1..].to_vec();
        let moved = |isr: Vec<i32>| {
            set_partition(
                &image,
                "t",
                p,
                PartitionRegistration {
                    leader: others[0],
                    leader_epoch: reg.leader_epoch + 1,
                    isr,
                    ..reg.clone()
                },
            )
        };
        // (case, image, elected?)
        let cases: Vec<(&str, MetadataImage, bool)> = vec![
            ("preferred in the ISR", moved(reg.replicas.clone()), true),
            (
                "preferred not in the ISR (restarted, still catching up)",
                moved(others.clone()),
                false,
            ),
            (
                "preferred fenced",
                moved(reg.replicas.clone()).apply(&[change(Some(true), None)]),
                false,
            ),
            (
                "preferred shutting down",
                moved(reg.replicas.clone()).apply(&[change(None, Some(true))]),
                false,
            ),
        ];
        for (case, image, expected) in cases {
            let (_, elected, more) = rebalance_pass(&image, &with_percentage(0), 1000);
            assert_eq!(
                elected == vec![("t".to_owned(), p)],
                expected,
                "{case}: {elected:?}"
            );
            assert!(!more, "{case}");
        }
    }
}
