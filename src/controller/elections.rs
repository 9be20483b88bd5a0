//! Which leaders a committed metadata change elected, and why: read from the images before and
//! after, the reason being the cause the deciding request recorded in the partition's history
//! (`metadata::history`), so it reads the same whichever decision (ElectLeaders, fencing,
//! controlled shutdown, a returning broker, the preferred-leader rebalance) wrote the records.
//!
//! The active controller counts what it finds in `ControllerStats` (Kafka's
//! `LeaderElectionRateAndTimeMs`, `UncleanLeaderElectionsPerSec`). A new partition's first
//! leader is not an election, as in Kafka.

use crate::metadata::{CauseKind, MetadataImage};
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
/// with the reason its history gives.
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
            // The change that produced this leader: the history's latest, at its epoch.
            let cause = topic
                .history
                .get(&index)
                .and_then(|h| h.back())
                .filter(|c| c.leader == p.leader && c.leader_epoch == p.leader_epoch)
                .map_or(CauseKind::Unknown, |c| c.cause.kind);
            let unclean = old.leader >= 0 && !old.isr.contains(&p.leader);
            out.push(Election {
                topic: name.clone(),
                partition: index,
                previous_leader: old.leader,
                leader: p.leader,
                reason: reason(cause, unclean),
            });
        }
    }
    out
}

fn reason(cause: CauseKind, unclean: bool) -> ElectionReason {
    if unclean {
        return ElectionReason::Unclean;
    }
    match cause {
        CauseKind::BrokerFenced | CauseKind::ControllerFailover | CauseKind::BrokerRestarted => {
            ElectionReason::BrokerFenced
        }
        CauseKind::ControlledShutdown => ElectionReason::ControlledShutdown,
        CauseKind::PreferredElection => ElectionReason::Preferred,
        CauseKind::AutoRebalance | CauseKind::LoadBalance => ElectionReason::AutoRebalance,
        CauseKind::UncleanElection => ElectionReason::Unclean,
        CauseKind::Unknown
        | CauseKind::Created
        | CauseKind::BrokerUnfenced
        | CauseKind::AlterPartition
        | CauseKind::Reassignment => ElectionReason::Other,
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::metadata::{
        ChangeCause, LeaderRecoveryState, MetadataRecord, PartitionRegistration,
    };

    const TOPIC: Uuid = Uuid::from_u128(7);

    fn partition(leader: i32, epoch: i32, isr: &[i32]) -> MetadataRecord {
        MetadataRecord::Partition {
            topic_id: TOPIC,
            partition: 0,
            registration: PartitionRegistration {
                replicas: vec![1, 2, 3],
                isr: isr.to_vec(),
                leader,
                leader_epoch: epoch,
                partition_epoch: epoch,
                leader_recovery_state: LeaderRecoveryState::Recovered,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            },
        }
    }

    /// A topic whose partition 0 has `leader` and `isr` at epoch 0.
    fn image(leader: i32, isr: &[i32]) -> MetadataImage {
        MetadataImage::default().apply(&[
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: TOPIC,
            },
            partition(leader, 0, isr),
        ])
    }

    /// `before` after a decision with cause `kind` moved the partition to `leader` and `isr`.
    fn decided(before: &MetadataImage, kind: CauseKind, leader: i32, isr: &[i32]) -> MetadataImage {
        before.apply(&[
            MetadataRecord::ChangeCause(ChangeCause {
                kind,
                broker_id: 1,
                time_ms: 1,
            }),
            partition(leader, 1, isr),
        ])
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn reasons_are_the_recorded_causes() {
        let cases: &[(
            &str,
            i32,
            &[i32],
            CauseKind,
            i32,
            &[i32],
            Option<ElectionReason>,
        )] = &[
            (
                "leader fenced",
                1,
                &[1, 2, 3],
                CauseKind::BrokerFenced,
                2,
                &[2, 3],
                Some(ElectionReason::BrokerFenced),
            ),
            (
                "failover",
                1,
                &[1, 2, 3],
                CauseKind::ControllerFailover,
                2,
                &[2, 3],
                Some(ElectionReason::BrokerFenced),
            ),
            (
                "restart",
                1,
                &[1, 2, 3],
                CauseKind::BrokerRestarted,
                2,
                &[2, 3],
                Some(ElectionReason::BrokerFenced),
            ),
            (
                "controlled shutdown",
                1,
                &[1, 2, 3],
                CauseKind::ControlledShutdown,
                2,
                &[2, 3],
                Some(ElectionReason::ControlledShutdown),
            ),
            (
                "ElectLeaders preferred",
                2,
                &[1, 2, 3],
                CauseKind::PreferredElection,
                1,
                &[1, 2, 3],
                Some(ElectionReason::Preferred),
            ),
            (
                "rebalance",
                2,
                &[1, 2, 3],
                CauseKind::AutoRebalance,
                1,
                &[1, 2, 3],
                Some(ElectionReason::AutoRebalance),
            ),
            (
                "outside the ISR",
                1,
                &[1],
                CauseKind::BrokerFenced,
                2,
                &[2],
                Some(ElectionReason::Unclean),
            ),
            (
                "offline partition gets a leader",
                -1,
                &[1],
                CauseKind::BrokerUnfenced,
                1,
                &[1],
                Some(ElectionReason::Other),
            ),
            (
                "leader lost, none elected",
                1,
                &[1],
                CauseKind::BrokerFenced,
                -1,
                &[1],
                None,
            ),
            (
                "ISR change only",
                1,
                &[1, 2, 3],
                CauseKind::AlterPartition,
                1,
                &[1, 2],
                None,
            ),
        ];
        for (what, from, isr_before, kind, to, isr, want) in cases {
            let before = image(*from, isr_before);
            let after = decided(&before, *kind, *to, isr);
            let got = elections(&before, &after).first().map(|e| e.reason);
            assert_eq!(got, *want, "{what}");
        }
    }

    #[test]
    fn a_leader_without_a_recorded_cause_is_other() {
        let before = image(2, &[1, 2, 3]);
        let after = before.apply(&[partition(1, 1, &[1, 2, 3])]);
        let got = elections(&before, &after).first().map(|e| e.reason);
        assert_eq!(got, Some(ElectionReason::Other));
    }

    #[test]
    fn a_new_partition_is_not_an_election() {
        assert!(elections(&MetadataImage::default(), &image(1, &[1])).is_empty());
    }
}
