//! AlterPartition (API 56, v2–3), the controller's side: a partition leader asks to change its
//! ISR (or to leave the RECOVERING state), and the controller checks the request against the
//! registration it holds (Kafka's `ReplicationControlManager#alterPartition` and
//! `#validateAlterPartitionData`).

use uuid::Uuid;

use super::partition_change::{change_partition, Election};
use crate::errors::ApiError;
use crate::metadata::{LeaderRecoveryState, MetadataImage, MetadataRecord, PartitionRegistration};

/// One partition of an AlterPartition request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionItem {
    pub topic_id: Uuid,
    pub partition: i32,
    /// The leader epoch the leader acts in.
    pub leader_epoch: i32,
    /// The partition epoch the leader's view is based on.
    pub partition_epoch: i32,
    /// The proposed ISR, each member with the broker epoch the leader saw it fetch with (v3's
    /// `new_isr_with_epochs`; -1 skips the check, as v2's plain `new_isr` does).
    pub new_isr: Vec<(i32, i64)>,
    /// The wire value: 0 RECOVERED, 1 RECOVERING.
    pub leader_recovery_state: i8,
}

/// The answer for one item: the registration as it now is (or will be once the records are
/// committed), or why it was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionResult {
    pub topic_id: Uuid,
    pub partition: i32,
    pub result: Result<PartitionRegistration, ApiError>,
}

/// AlterPartition from `requester_id` at `requester_epoch`. The whole request is refused with
/// STALE_BROKER_EPOCH when the requester is not registered at that epoch. Each item is checked
/// in Kafka's order:
/// - UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION;
/// - NOT_CONTROLLER when the request's leader or partition epoch is *ahead* of the controller's
///   (this controller is behind: the leader should find the current one);
/// - FENCED_LEADER_EPOCH for a stale leader epoch;
/// - INVALID_REQUEST when the requester does not lead the partition;
/// - INVALID_UPDATE_VERSION for a stale partition epoch;
/// - INVALID_REQUEST for an ISR that is not a duplicate-free subset of the replicas, that lacks
///   the leader, that has more than one member while RECOVERING, or a state going back from
///   RECOVERED to RECOVERING;
/// - INELIGIBLE_REPLICA (OPERATION_NOT_ATTEMPTED for request versions ≤ 1) when a member is not
///   registered, is fenced or shutting down, or was seen at another broker epoch.
///
/// A valid item changes the ISR and recovery state and bumps the partition epoch (not the leader
/// epoch: a shrink does not need it since `metadata.version` 3.6); a request that changes
/// nothing answers with the registration as it is. Should the change move the leadership, the
/// record is still written and the item answered NEW_LEADER_ELECTED. Items naming the same
/// partition twice are checked in order, the later against what the earlier made.
pub fn alter_partition(
    image: &MetadataImage,
    requester_id: i32,
    requester_epoch: i64,
    request_version: i16,
    items: &[AlterPartitionItem],
) -> Result<(Vec<MetadataRecord>, Vec<AlterPartitionResult>), ApiError> {
    if image
        .broker(requester_id)
        .is_none_or(|b| b.broker_epoch != requester_epoch)
    {
        return Err(ApiError::StaleBrokerEpoch);
    }
    let mut records: Vec<MetadataRecord> = Vec::new();
    let mut results = Vec::with_capacity(items.len());
    for item in items {
        let result = alter_one(image, &records, requester_id, request_version, item);
        let result = match result {
            Ok((next, changed)) => {
                if changed {
                    records.push(MetadataRecord::Partition {
                        topic_id: item.topic_id,
                        partition: item.partition,
                        registration: next.clone(),
                    });
                }
                if next.leader != requester_id {
                    Err(if request_version > 1 {
                        ApiError::NewLeaderElected
                    } else {
                        ApiError::FencedLeaderEpoch
                    })
                } else {
                    Ok(next)
                }
            }
            Err(e) => Err(e),
        };
        results.push(AlterPartitionResult {
            topic_id: item.topic_id,
            partition: item.partition,
            result,
        });
    }
    Ok((records, results))
}

/// The registration after `item` (and whether it changed), against `image` with the records
/// decided so far in this request.
fn alter_one(
    image: &MetadataImage,
    earlier: &[MetadataRecord],
    requester_id: i32,
    request_version: i16,
    item: &AlterPartitionItem,
) -> Result<(PartitionRegistration, bool), ApiError> {
    let topic = image
        .topic_by_id(&item.topic_id)
        .filter(|_| !item.topic_id.is_nil())
        .ok_or(ApiError::UnknownTopicId)?;
    let decided = earlier.iter().rev().find_map(|r| match r {
        MetadataRecord::Partition {
            topic_id,
            partition,
            registration,
        } if *topic_id == item.topic_id && *partition == item.partition => Some(registration),
        _ => None,
    });
    let current = decided
        .or_else(|| topic.partitions.get(&item.partition))
        .ok_or(ApiError::UnknownTopicOrPartition)?;
    if item.leader_epoch > current.leader_epoch || item.partition_epoch > current.partition_epoch {
        return Err(ApiError::NotController);
    }
    if item.leader_epoch < current.leader_epoch {
        return Err(ApiError::FencedLeaderEpoch);
    }
    if requester_id != current.leader {
        return Err(ApiError::InvalidRequest(format!(
            "node {requester_id} does not lead partition {} (leader {})",
            item.partition, current.leader
        )));
    }
    if item.partition_epoch < current.partition_epoch {
        return Err(ApiError::InvalidUpdateVersion);
    }
    let new_isr: Vec<i32> = item.new_isr.iter().map(|(id, _)| *id).collect();
    check_isr(current, &new_isr)?;
    let target_recovery =
        LeaderRecoveryState::from_wire(item.leader_recovery_state).ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "unknown leader recovery state {}",
                item.leader_recovery_state
            ))
        })?;
    if target_recovery == LeaderRecoveryState::Recovering && new_isr.len() > 1 {
        return Err(ApiError::InvalidRequest(
            "the ISR of a leader still recovering from an unclean election holds only the leader"
                .into(),
        ));
    }
    if current.leader_recovery_state == LeaderRecoveryState::Recovered
        && target_recovery == LeaderRecoveryState::Recovering
    {
        return Err(ApiError::InvalidRequest(
            "the leader recovery state cannot go from RECOVERED to RECOVERING".into(),
        ));
    }
    let ineligible = item.new_isr.iter().any(|&(id, epoch)| {
        image
            .broker(id)
            .is_none_or(|b| !b.is_active() || (epoch != -1 && epoch != b.broker_epoch))
    });
    if ineligible {
        return Err(if request_version > 1 {
            ApiError::IneligibleReplica
        } else {
            ApiError::OperationNotAttempted
        });
    }
    let acceptable = |r: i32| image.is_broker_active(r);
    Ok(
        match change_partition(
            current,
            &new_isr,
            target_recovery,
            Election::Online,
            &acceptable,
        ) {
            Some(next) => (next, true),
            None => (current.clone(), false),
        },
    )
}

/// The ISR is a duplicate-free subset of the replicas and holds the leader.
fn check_isr(current: &PartitionRegistration, new_isr: &[i32]) -> Result<(), ApiError> {
    let mut seen = std::collections::BTreeSet::new();
    for id in new_isr {
        if !current.replicas.contains(id) || !seen.insert(*id) {
            return Err(ApiError::InvalidRequest(format!(
                "invalid ISR {new_isr:?} for replicas {:?}",
                current.replicas
            )));
        }
    }
    if !new_isr.contains(&current.leader) {
        return Err(ApiError::InvalidRequest(format!(
            "the ISR {new_isr:?} does not hold the leader {}",
            current.leader
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::controller::decisions::tests::{
        cluster, partition, set_partition, spec, with_topic,
    };
    use crate::metadata::MetadataRecord;

    /// Three brokers, "t" with one partition: replicas [1, 2, 3], ISR [1, 2], leader 1, epochs 4
    /// and 8; broker 3 is unfenced.
    fn image() -> MetadataImage {
        let image = with_topic(&cluster(3), &spec("t", 1, 3), 1);
        set_partition(
            &image,
            "t",
            0,
            PartitionRegistration {
                isr: vec![1, 2],
                leader_epoch: 4,
                partition_epoch: 8,
                ..partition(&image, "t", 0)
            },
        )
    }

    fn item(image: &MetadataImage, isr: &[i32]) -> AlterPartitionItem {
        AlterPartitionItem {
            topic_id: image.topic("t").unwrap().id,
            partition: 0,
            leader_epoch: 4,
            partition_epoch: 8,
            new_isr: isr.iter().map(|&r| (r, -1)).collect(),
            leader_recovery_state: 0,
        }
    }

    #[test]
    fn alter_partition_table() {
        let image = image();
        let e = |id: i32| image.brokers[&id].broker_epoch;
        let fenced3 = image.apply(&[MetadataRecord::BrokerRegistrationChange {
            node_id: 3,
            broker_epoch: e(3),
            fenced: Some(true),
            in_controlled_shutdown: None,
        }]);
        let shutting3 = image.apply(&[MetadataRecord::BrokerRegistrationChange {
            node_id: 3,
            broker_epoch: e(3),
            fenced: None,
            in_controlled_shutdown: Some(true),
        }]);
        let recovering = set_partition(
            &image,
            "t",
            0,
            PartitionRegistration {
                isr: vec![1],
                leader_recovery_state: LeaderRecoveryState::Recovering,
                ..partition(&image, "t", 0)
            },
        );
        let base = item(&image, &[1, 2, 3]);
        // (case, image, version, item, expected: Ok((isr, leader epoch, partition epoch)) or the error code)
        let cases: Vec<(
            &str,
            &MetadataImage,
            i16,
            AlterPartitionItem,
            Result<(Vec<i32>, i32, i32), i16>,
        )> = vec![
            ("expand", &image, 3, base.clone(), Ok((vec![1, 2, 3], 4, 9))),
            (
                "shrink: partition epoch only",
                &image,
                3,
                item(&image, &[1]),
                Ok((vec![1], 4, 9)),
            ),
            (
                "no change",
                &image,
                3,
                item(&image, &[1, 2]),
                Ok((vec![1, 2], 4, 8)),
            ),
            (
                "stale leader epoch",
                &image,
                3,
                AlterPartitionItem {
                    leader_epoch: 3,
                    ..base.clone()
                },
                Err(74),
            ),
            (
                "leader epoch ahead: this controller is behind",
                &image,
                3,
                AlterPartitionItem {
                    leader_epoch: 5,
                    ..base.clone()
                },
                Err(41),
            ),
            (
                "stale partition epoch",
                &image,
                3,
                AlterPartitionItem {
                    partition_epoch: 7,
                    ..base.clone()
                },
                Err(95),
            ),
            (
                "ISR without the leader",
                &image,
                3,
                item(&image, &[2, 3]),
                Err(42),
            ),
            (
                "ISR not a subset of replicas",
                &image,
                3,
                item(&image, &[1, 4]),
                Err(42),
            ),
            (
                "duplicate ISR member",
                &image,
                3,
                item(&image, &[1, 2, 2]),
                Err(42),
            ),
            ("fenced member", &fenced3, 3, base.clone(), Err(107)),
            (
                "shutting-down member",
                &shutting3,
                3,
                base.clone(),
                Err(107),
            ),
            ("fenced member, v1 rule", &fenced3, 1, base.clone(), Err(55)),
            (
                "member seen at another broker epoch",
                &image,
                3,
                AlterPartitionItem {
                    new_isr: vec![(1, -1), (2, e(2) + 1)],
                    ..base.clone()
                },
                Err(107),
            ),
            (
                "member at its epoch",
                &image,
                3,
                AlterPartitionItem {
                    new_isr: vec![(1, e(1)), (2, e(2))],
                    ..base.clone()
                },
                Ok((vec![1, 2], 4, 8)),
            ),
            (
                "unknown topic id",
                &image,
                3,
                AlterPartitionItem {
                    topic_id: Uuid::from_u128(99),
                    ..base.clone()
                },
                Err(100),
            ),
            (
                "unknown partition",
                &image,
                3,
                AlterPartitionItem {
                    partition: 5,
                    ..base.clone()
                },
                Err(3),
            ),
            (
                "recovering: more than the leader",
                &recovering,
                3,
                AlterPartitionItem {
                    leader_recovery_state: 1,
                    ..base.clone()
                },
                Err(42),
            ),
            (
                "recovering → recovered and expand",
                &recovering,
                3,
                base.clone(),
                Ok((vec![1, 2, 3], 4, 9)),
            ),
            (
                "recovered → recovering refused",
                &image,
                3,
                AlterPartitionItem {
                    leader_recovery_state: 1,
                    ..item(&image, &[1])
                },
                Err(42),
            ),
            (
                "bad recovery state",
                &image,
                3,
                AlterPartitionItem {
                    leader_recovery_state: 7,
                    ..base.clone()
                },
                Err(42),
            ),
        ];
        for (case, image, version, item, expected) in cases {
            let (records, results) = alter_partition(
                image,
                1,
                image.brokers[&1].broker_epoch,
                version,
                std::slice::from_ref(&item),
            )
            .unwrap();
            let got = results[0]
                .result
                .as_ref()
                .map(|p| (p.isr.clone(), p.leader_epoch, p.partition_epoch))
                .map_err(ApiError::code);
            assert_eq!(got, expected, "{case}");
            let changed = matches!(&expected, Ok((_, _, pe)) if *pe != 8);
            assert_eq!(records.len(), usize::from(changed), "{case}: records");
            if let Ok(p) = &results[0].result {
                let after = image.apply(&records);
                assert_eq!(
                    partition(&after, "t", 0),
                    *p,
                    "{case}: the answer is what is committed"
                );
            }
        }
        let recovered = alter_partition(&recovering, 1, e(1), 3, std::slice::from_ref(&base))
            .unwrap()
            .1;
        assert_eq!(
            recovered[0].result.as_ref().unwrap().leader_recovery_state,
            LeaderRecoveryState::Recovered
        );
    }

    #[test]
    fn the_requester_must_be_registered_at_its_epoch_and_lead() {
        let image = image();
        let e = |id: i32| image.brokers[&id].broker_epoch;
        let base = item(&image, &[1, 2, 3]);
        assert_eq!(
            alter_partition(&image, 1, e(1) - 1, 3, std::slice::from_ref(&base)).unwrap_err(),
            ApiError::StaleBrokerEpoch
        );
        assert_eq!(
            alter_partition(&image, 9, 1, 3, std::slice::from_ref(&base)).unwrap_err(),
            ApiError::StaleBrokerEpoch
        );
        let (records, results) =
            alter_partition(&image, 2, e(2), 3, std::slice::from_ref(&base)).unwrap();
        assert!(records.is_empty());
        assert_eq!(
            results[0].result.as_ref().unwrap_err().code(),
            42,
            "INVALID_REQUEST from a non-leader"
        );
        // The same partition twice: the second is checked against the first.
        let (records, results) =
            alter_partition(&image, 1, e(1), 3, &[item(&image, &[1]), base]).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(results[1].result.as_ref().unwrap_err().code(), 95);
    }
}
