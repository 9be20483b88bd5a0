//! Where the replicas of new partitions go (Kafka's `StripedReplicaPlacer`), deterministically.
//!
//! Racks take turns: partition `g` (the `g`-th partition of the cluster, so successive topics
//! start where the last one ended) draws its leader from rack `g % R`, its next replicas from the
//! racks after it, one per rack, and only once every rack holds a replica of it does a rack give
//! a second one. Inside a rack, brokers take turns too: on the rack's `lap`-th turn as leader
//! rack (`lap = g / R`) it gives broker `lap`, so every broker of a rack leads as often as the
//! others; a follower slot at position `j` of the partition's rack order starts at broker
//! `lap + j`, which spreads followers the same way. Without racks every broker is in one rack
//! and partition `g` gets brokers `g, g+1, …` — Kafka's stripes.
//!
//! Kafka draws random start offsets and reshuffles after each round; this placer derives
//! everything from `g` instead, so a placement is a pure function of the image (no RNG, replayable
//! in tests) and the preferred leaders stay evenly spread across every round, which Kafka's
//! random reshuffles only approximate. Unlike Kafka it places replicas only on unfenced brokers
//! that are not shutting down (the caller passes only those): a replica on a fenced broker would
//! start out of the ISR.

use std::collections::BTreeMap;

use crate::errors::ApiError;

/// `count` partitions of `replication_factor` replicas each, the first being the `start`-th
/// partition of the cluster. `brokers` are the usable brokers with their racks.
pub(crate) fn place_replicas(
    brokers: &[(i32, Option<&str>)],
    start: usize,
    count: usize,
    replication_factor: usize,
) -> Result<Vec<Vec<i32>>, ApiError> {
    if brokers.is_empty() {
        return Err(unable(
            replication_factor,
            "All brokers are currently fenced.".into(),
        ));
    }
    if replication_factor > brokers.len() {
        return Err(unable(
            replication_factor,
            format!(
                "The target replication factor of {replication_factor} cannot be reached because only {} broker(s) are registered and unfenced.",
                brokers.len()
            ),
        ));
    }
    // Racks in name order (brokers without a rack form one rack, first), brokers in id order.
    let mut by_rack: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for &(id, rack) in brokers {
        by_rack.entry(rack).or_default().push(id);
    }
    let racks: Vec<Vec<i32>> = by_rack
        .into_values()
        .map(|mut ids| {
            ids.sort_unstable();
            ids
        })
        .collect();
    Ok((0..count)
        .map(|i| place_one(&racks, start.wrapping_add(i), replication_factor))
        .collect())
}

fn unable(replication_factor: usize, why: String) -> ApiError {
    ApiError::InvalidReplicationFactor(format!(
        "Unable to replicate the partition {replication_factor} time(s): {why}"
    ))
}

/// The replicas of the `g`-th partition of the cluster.
fn place_one(racks: &[Vec<i32>], g: usize, replication_factor: usize) -> Vec<i32> {
    let rack_count = racks.len();
    let first = g % rack_count;
    let lap = g / rack_count;
    // How many brokers each rack (by position in this partition's order) has given so far.
    let mut given = vec![0usize; rack_count];
    let mut replicas = Vec::with_capacity(replication_factor);
    let mut position = 0;
    while replicas.len() < replication_factor {
        let j = position % rack_count;
        position += 1;
        let rack = &racks[(first + j) % rack_count];
        if given[j] == rack.len() {
            // This rack has given all it has; the next rack takes its turn.
            continue;
        }
        // Consecutive indices from the rack's start for this slot: distinct within the rack.
        replicas.push(rack[(lap + j + given[j]) % rack.len()]);
        given[j] += 1;
    }
    replicas
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn leaders(placement: &[Vec<i32>]) -> BTreeMap<i32, usize> {
        let mut counts = BTreeMap::new();
        for replicas in placement {
            *counts.entry(replicas[0]).or_default() += 1;
        }
        counts
    }

    fn replica_counts(placement: &[Vec<i32>]) -> BTreeMap<i32, usize> {
        let mut counts = BTreeMap::new();
        for r in placement.iter().flatten() {
            *counts.entry(*r).or_default() += 1;
        }
        counts
    }

    #[test]
    fn without_racks_partitions_are_stripes_and_leaders_are_even() {
        let brokers = [(1, None), (2, None), (3, None)];
        let placed = place_replicas(&brokers, 0, 6, 3).unwrap();
        assert_eq!(
            placed,
            vec![
                vec![1, 2, 3],
                vec![2, 3, 1],
                vec![3, 1, 2],
                vec![1, 2, 3],
                vec![2, 3, 1],
                vec![3, 1, 2]
            ]
        );
        assert_eq!(leaders(&placed), BTreeMap::from([(1, 2), (2, 2), (3, 2)]));
        // The start offset shifts the stripes (the next topic starts where the last ended).
        assert_eq!(place_replicas(&brokers, 4, 1, 2).unwrap(), vec![vec![2, 3]]);
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn racks_hold_one_replica_each_while_there_are_enough() {
        // (brokers, partitions, replication factor)
        let cases: Vec<(Vec<(i32, Option<&str>)>, usize, usize)> = vec![
            (
                vec![
                    (1, Some("a")),
                    (4, Some("a")),
                    (2, Some("b")),
                    (5, Some("b")),
                    (3, Some("c")),
                    (6, Some("c")),
                ],
                12,
                3,
            ),
            (
                vec![
                    (1, Some("a")),
                    (2, Some("a")),
                    (3, Some("b")),
                    (4, Some("b")),
                ],
                8,
                2,
            ),
            (
                vec![
                    (1, Some("a")),
                    (2, Some("a")),
                    (3, Some("b")),
                    (4, Some("b")),
                ],
                8,
                3,
            ),
        ];
        for (brokers, partitions, rf) in cases {
            let rack_of: BTreeMap<i32, &str> =
                brokers.iter().map(|(id, r)| (*id, r.unwrap())).collect();
            let rack_count = rack_of.values().collect::<BTreeSet<_>>().len();
            let placed = place_replicas(&brokers, 0, partitions, rf).unwrap();
            for replicas in &placed {
                assert_eq!(replicas.len(), rf);
                let distinct: BTreeSet<_> = replicas.iter().collect();
                assert_eq!(distinct.len(), rf, "{replicas:?}: a broker twice");
                let racks: BTreeSet<_> = replicas.iter().map(|r| rack_of[r]).collect();
                assert_eq!(racks.len(), rf.min(rack_count), "{replicas:?}");
            }
            // Every broker is preferred leader equally often, and holds as many replicas.
            let per_broker = partitions / brokers.len();
            assert!(
                leaders(&placed).values().all(|&n| n == per_broker),
                "{brokers:?}: leaders {:?}",
                leaders(&placed)
            );
            assert!(
                replica_counts(&placed)
                    .values()
                    .all(|&n| n == per_broker * rf),
                "{brokers:?}: replicas {:?}",
                replica_counts(&placed)
            );
        }
    }

    #[test]
    fn a_small_rack_gives_what_it_has_and_the_others_fill_in() {
        let brokers = [
            (1, Some("a")),
            (2, Some("b")),
            (3, Some("b")),
            (4, Some("b")),
        ];
        for replicas in place_replicas(&brokers, 0, 8, 3).unwrap() {
            assert_eq!(
                replicas.iter().filter(|&&r| r == 1).count(),
                1,
                "{replicas:?}"
            );
            assert_eq!(replicas.iter().collect::<BTreeSet<_>>().len(), 3);
        }
    }

    #[test]
    fn too_few_usable_brokers_is_an_invalid_replication_factor() {
        let err = place_replicas(&[(1, None), (2, None)], 0, 1, 3).unwrap_err();
        assert_eq!(err.code(), 38);
        assert!(err.message().contains("only 2 broker(s)"), "{err}");
        assert_eq!(place_replicas(&[], 0, 1, 1).unwrap_err().code(), 38);
    }
}
