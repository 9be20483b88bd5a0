//! Which leaders a committed metadata change elected, and why: a pure function of the image
//! before and after, so it reads the same whichever decision (ElectLeaders, fencing, controlled
//! shutdown, a returning broker, the preferred-leader rebalance) wrote the records.
//!
//! The active controller counts what it finds in `ControllerStats` (Kafka's
//! `LeaderElectionRateAndTimeMs`, `UncleanLeaderElectionsPerSec`). A new partition's first
//! leader is not an election, as in Kafka.

use crate::metadata::MetadataImage;
use crate::metrics::ElectionReason;

/// One partition whose leader changed to a live one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    pub topic: String,
    pub partition: i32,
    pub previous_leader: i32,
    pub leader: i32,
    pub reason: ElectionReason,
}

/// Every partition of `before` whose leader in `after` is a different node (never -1),
/// with the reason read from the images.
pub fn elections(before: &MetadataImage, after: &MetadataImage) -> Vec<Election> {
    let mut out = Vec::new();
    for (name, topic) in &after.topics {
        let Some(old_topic) = before.topics.get(name).filter(|t| t.id == topic.id) else {
            continue;
        };
        for (&index, p) in &topic.partitions {
            let Some(old) = old_topic.partitions.get(&index) else {
                continue;
            };
            if p.leader == old.leader || p.leader < 0 {
                continue;
            }
            out.push(Election {
                topic: name.clone(),
                partition: index,
                previous_leader: old.leader,
                leader: p.leader,
                reason: reason(before, after, old.leader, &old.isr, p.leader, &p.replicas),
            });
        }
    }
    out
}

fn reason(
    before: &MetadataImage,
    after: &MetadataImage,
    old_leader: i32,
    old_isr: &[i32],
    leader: i32,
    replicas: &[i32],
) -> ElectionReason {
    if old_leader >= 0 && !old_isr.contains(&leader) {
        return ElectionReason::Unclean;
    }
    if old_leader >= 0 {
        match after.broker(old_leader) {
            None => return ElectionReason::BrokerFenced,
            Some(b) if b.fenced => return ElectionReason::BrokerFenced,
            Some(b) if b.in_controlled_shutdown => return ElectionReason::ControlledShutdown,
            Some(b)
                if before.broker(old_leader).map(|o| o.incarnation_id)
                    != Some(b.incarnation_id) =>
            {
                return ElectionReason::BrokerFenced
            }
            Some(_) => {}
        }
    }
    if old_leader >= 0 && replicas.first() == Some(&leader) {
        // ElectLeaders(PREFERRED) and the rebalance write the same records; the rebalance
        // tells its elections apart itself when it counts them.
        return ElectionReason::Preferred;
    }
    ElectionReason::Other
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use uuid::Uuid;

    use super::*;
    use crate::metadata::{
        BrokerRegistration, LeaderRecoveryState, PartitionRegistration, TopicImage,
    };

    fn image(brokers: &[(i32, bool, bool)], leader: i32, isr: &[i32]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for &(id, fenced, shutting_down) in brokers {
            let mut b = BrokerRegistration::new(id, Uuid::from_u128(id as u128), None);
            b.fenced = fenced;
            b.in_controlled_shutdown = shutting_down;
            image.brokers.insert(id, b);
        }
        let mut partitions = BTreeMap::new();
        partitions.insert(
            0,
            PartitionRegistration {
                replicas: vec![1, 2, 3],
                isr: isr.to_vec(),
                leader,
                leader_epoch: 0,
                partition_epoch: 0,
                leader_recovery_state: LeaderRecoveryState::Recovered,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            },
        );
        image.topics.insert(
            "t".into(),
            Arc::new(TopicImage {
                name: "t".into(),
                id: Uuid::from_u128(7),
                partitions,
                configs: BTreeMap::new(),
            }),
        );
        image
    }

    const UP: (bool, bool) = (false, false);

    #[test]
    fn reasons_are_read_from_the_images() {
        let all_up = [(1, false, false), (2, false, false), (3, false, false)];
        let one_fenced = [(1, true, false), (2, false, false), (3, false, false)];
        let one_stopping = [(1, false, true), (2, false, false), (3, false, false)];
        let _ = UP;
        let cases: &[(&str, MetadataImage, MetadataImage, Option<ElectionReason>)] = &[
            (
                "leader fenced",
                image(&all_up, 1, &[1, 2, 3]),
                image(&one_fenced, 2, &[2, 3]),
                Some(ElectionReason::BrokerFenced),
            ),
            (
                "controlled shutdown",
                image(&all_up, 1, &[1, 2, 3]),
                image(&one_stopping, 2, &[2, 3]),
                Some(ElectionReason::ControlledShutdown),
            ),
            (
                "back to the preferred replica",
                image(&all_up, 2, &[1, 2, 3]),
                image(&all_up, 1, &[1, 2, 3]),
                Some(ElectionReason::Preferred),
            ),
            (
                "outside the ISR",
                image(&one_fenced, 1, &[1]),
                image(&one_fenced, 2, &[2]),
                Some(ElectionReason::Unclean),
            ),
            (
                "offline partition gets a leader",
                image(&all_up, -1, &[1]),
                image(&all_up, 1, &[1]),
                Some(ElectionReason::Other),
            ),
            (
                "leader lost, none elected",
                image(&all_up, 1, &[1]),
                image(&one_fenced, -1, &[1]),
                None,
            ),
            (
                "ISR change only",
                image(&all_up, 1, &[1, 2, 3]),
                image(&all_up, 1, &[1, 2]),
                None,
            ),
        ];
        for (what, before, after, want) in cases {
            let got = elections(before, after).first().map(|e| e.reason);
            assert_eq!(got, *want, "{what}");
        }
    }

    #[test]
    fn a_new_partition_is_not_an_election() {
        let after = image(&[(1, false, false)], 1, &[1]);
        assert!(elections(&MetadataImage::default(), &after).is_empty());
    }
}
