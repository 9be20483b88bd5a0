//! Partition reassignment (AlterPartitionReassignments, API 45; ListPartitionReassignments,
//! API 46), as Kafka's `ReplicationControlManager#alterPartitionReassignments`,
//! `PartitionReassignmentReplicas` and `PartitionReassignmentRevert` do it.
//!
//! A reassignment goes through three stages:
//! 1. The request writes the target replicas followed by the replicas being removed into
//!    `replicas`, and sets `adding_replicas` and `removing_replicas`. The adding replicas start
//!    as followers outside the ISR.
//! 2. They fetch, catch up and join the ISR through the leader's AlterPartition, as any
//!    follower does.
//! 3. The first partition change whose target ISR holds every target replica (after dropping
//!    the removed ones) completes it ([`complete_reassignment`], run by every change in
//!    `partition_change::build`, AlterPartition's included): `replicas` becomes the target, the
//!    removed replicas leave the ISR, the leader moves if it was removed, and the leader epoch is
//!    bumped because replicas were removed.
//!
//! A reassignment that only reorders replicas, or whose target replicas are already in the ISR,
//! completes at once, in the request's own record. Cancelling (null replicas) reverts to the
//! original replicas: the adding ones leave `replicas` and the ISR.
//!
//! What is not here: moving replicas between log directories (AlterReplicaLogDirs) and the
//! replication throttles the tools set (topic and broker configs, not decisions).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use super::partition_change::{build, unclean_enabled, Election, Target};
use super::ControllerSettings;
use crate::errors::ApiError;
use crate::metadata::{MetadataImage, MetadataRecord, PartitionRegistration};

/// One partition of an AlterPartitionReassignments request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentItem {
    pub topic: String,
    pub partition: i32,
    /// The target replicas, the first the preferred leader; `None` cancels the reassignment in
    /// progress.
    pub replicas: Option<Vec<i32>>,
}

/// The answer for one [`ReassignmentItem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentResult {
    pub topic: String,
    pub partition: i32,
    pub result: Result<(), ApiError>,
}

/// A partition being reassigned, as ListPartitionReassignments shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

/// What a completed reassignment leaves: the target replicas and the ISR without the removed
/// replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CompletedReassignment {
    pub(crate) replicas: Vec<i32>,
    pub(crate) isr: Vec<i32>,
}

/// Whether a change to `target_isr` completes the reassignment of a partition with `replicas`,
/// `adding` and `removing` (Kafka's `PartitionReassignmentReplicas#maybeCompleteReassignment`):
/// only if one is in progress, and once the ISR without the removed replicas holds every replica
/// that stays, and neither that ISR nor the remaining replicas are empty.
pub(crate) fn complete_reassignment(
    replicas: &[i32],
    adding: &[i32],
    removing: &[i32],
    target_isr: &[i32],
) -> Option<CompletedReassignment> {
    if adding.is_empty() && removing.is_empty() {
        return None;
    }
    let isr: Vec<i32> = target_isr
        .iter()
        .copied()
        .filter(|r| !removing.contains(r))
        .collect();
    let replicas: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|r| !removing.contains(r))
        .collect();
    if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
        return None;
    }
    Some(CompletedReassignment { replicas, isr })
}

/// AlterPartitionReassignments: each item starts, changes or cancels the reassignment of one
/// partition, checked in order (an item naming a partition an earlier one changed sees that
/// change). Per item, as Kafka answers:
/// - UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or partition;
/// - cancelling: NO_REASSIGNMENT_IN_PROGRESS when none is; INVALID_REPLICA_ASSIGNMENT when
///   reverting would need an unclean election the topic does not allow (every ISR member is a
///   replica being added);
/// - a target: INVALID_REPLICA_ASSIGNMENT for an empty list, an unregistered broker or a broker
///   named twice (brokers checked in id order, as Kafka does); INVALID_REPLICATION_FACTOR when
///   `allow_replication_factor_change` is off (request v1) and the replica count would change.
///
/// The records are those of the items that succeeded; an item that changes nothing (the target
/// is the current assignment) succeeds without one.
pub fn alter_reassignments(
    image: &MetadataImage,
    settings: &ControllerSettings,
    allow_replication_factor_change: bool,
    items: &[ReassignmentItem],
) -> (Vec<MetadataRecord>, Vec<ReassignmentResult>) {
    let mut records = Vec::new();
    let mut decided: HashMap<(Uuid, i32), PartitionRegistration> = HashMap::new();
    let mut results = Vec::with_capacity(items.len());
    for item in items {
        let result = alter_one(
            image,
            settings,
            allow_replication_factor_change,
            item,
            &decided,
        )
        .map(|change| {
            if let Some((topic_id, next)) = change {
                decided.insert((topic_id, item.partition), next.clone());
                records.push(MetadataRecord::Partition {
                    topic_id,
                    partition: item.partition,
                    registration: next,
                });
            }
        });
        results.push(ReassignmentResult {
            topic: item.topic.clone(),
            partition: item.partition,
            result,
        });
    }
    (records, results)
}

/// The change one item makes (its topic id and the new registration), or none.
fn alter_one(
    image: &MetadataImage,
    settings: &ControllerSettings,
    allow_replication_factor_change: bool,
    item: &ReassignmentItem,
    decided: &HashMap<(Uuid, i32), PartitionRegistration>,
) -> Result<Option<(Uuid, PartitionRegistration)>, ApiError> {
    let topic = image.topic(&item.topic).ok_or_else(|| {
        ApiError::UnknownTopicOrPartition
            .with_message(format!("Unable to find a topic named {}.", item.topic))
    })?;
    let current = decided
        .get(&(topic.id, item.partition))
        .or_else(|| topic.partitions.get(&item.partition))
        .ok_or_else(|| {
            ApiError::UnknownTopicOrPartition.with_message(format!(
                "Unable to find partition {}:{}.",
                item.topic, item.partition
            ))
        })?;
    let acceptable = |r: i32| image.is_broker_active(r);
    let next = match &item.replicas {
        None => {
            if !current.is_reassigning() {
                return Err(ApiError::NoReassignmentInProgress);
            }
            let unclean = unclean_enabled(image, settings, topic);
            let target = revert(current, unclean).map_err(|()| {
                ApiError::InvalidReplicaAssignment(format!(
                    "Unable to revert partition assignment for {}:{} because it would require an unclean leader election.",
                    item.topic, item.partition
                ))
            })?;
            let election = if unclean {
                Election::Unclean
            } else {
                Election::Online
            };
            build(current, target, election, &acceptable)
        }
        Some(replicas) => {
            check_target(image, replicas)?;
            if !allow_replication_factor_change {
                check_replication_factor(current, replicas.len())?;
            }
            build(
                current,
                start(current, replicas),
                Election::Online,
                &acceptable,
            )
        }
    };
    Ok(next.map(|n| (topic.id, n)))
}

/// The target of a reassignment to `target` from `current` (Kafka's
/// `PartitionReassignmentReplicas`): the target replicas then the ones being removed (in id
/// order), and the adding and removing sets in id order. As in Kafka, an empty set leaves the one
/// of a reassignment in progress as it is.
fn start(current: &PartitionRegistration, target: &[i32]) -> Target {
    let removing: BTreeSet<i32> = current
        .replicas
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let adding: BTreeSet<i32> = target
        .iter()
        .copied()
        .filter(|r| !current.replicas.contains(r))
        .collect();
    let mut aim = Target::of(current);
    aim.replicas = target
        .iter()
        .copied()
        .chain(removing.iter().copied())
        .collect();
    if !removing.is_empty() {
        aim.removing = removing.into_iter().collect();
    }
    if !adding.is_empty() {
        aim.adding = adding.into_iter().collect();
    }
    aim
}

/// The target that cancels a reassignment in progress (Kafka's `PartitionReassignmentRevert`):
/// the original replicas (without the adding ones) and the ISR without them. When every ISR
/// member was being added, the first original replica becomes the ISR, which is an unclean
/// election: refused unless `unclean_allowed`.
fn revert(current: &PartitionRegistration, unclean_allowed: bool) -> Result<Target, ()> {
    let adding = &current.adding_replicas;
    let replicas: Vec<i32> = current
        .replicas
        .iter()
        .copied()
        .filter(|r| !adding.contains(r))
        .collect();
    let mut isr: Vec<i32> = current
        .isr
        .iter()
        .copied()
        .filter(|r| !adding.contains(r))
        .collect();
    if isr.is_empty() {
        // Not reachable from a valid registration: a partition always keeps a replica that was
        // not being added.
        let &first = replicas.first().ok_or(())?;
        if !unclean_allowed {
            return Err(());
        }
        isr.push(first);
    }
    Ok(Target {
        isr,
        replicas,
        adding: Vec::new(),
        removing: Vec::new(),
        recovery: current.leader_recovery_state,
    })
}

/// Kafka's `validateManualPartitionAssignment` without a replication factor: a non-empty list
/// of registered brokers, each once, checked in id order.
fn check_target(image: &MetadataImage, replicas: &[i32]) -> Result<(), ApiError> {
    if replicas.is_empty() {
        return Err(ApiError::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    let mut previous = None;
    for id in sorted {
        if image.broker(id).is_none() {
            return Err(ApiError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {id}, but no such broker is registered."
            )));
        }
        if previous == Some(id) {
            return Err(ApiError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {id} more than once."
            )));
        }
        previous = Some(id);
    }
    Ok(())
}

/// KIP-860's check when the request does not allow a replication factor change: the target has
/// as many replicas as the partition has, or as the reassignment in progress aims for.
fn check_replication_factor(
    current: &PartitionRegistration,
    target_len: usize,
) -> Result<(), ApiError> {
    let now = current
        .replicas
        .iter()
        .filter(|r| !current.removing_replicas.contains(r))
        .count();
    if now == target_len {
        Ok(())
    } else {
        Err(ApiError::InvalidReplicationFactor(format!(
            "The replication factor is changed from {now} to {target_len}"
        )))
    }
}

/// ListPartitionReassignments: the partitions being reassigned, by topic name. `None` lists every
/// topic; named topics that do not exist, and named partitions that are not being reassigned, are
/// left out (Kafka's `listPartitionReassignments`), as are topics with nothing to show.
pub fn list_reassignments(
    image: &MetadataImage,
    topics: Option<&[(String, Vec<i32>)]>,
) -> Vec<(String, Vec<OngoingReassignment>)> {
    let ongoing = |reg: &PartitionRegistration, partition: i32| {
        reg.is_reassigning().then(|| OngoingReassignment {
            partition,
            replicas: reg.replicas.clone(),
            adding_replicas: reg.adding_replicas.clone(),
            removing_replicas: reg.removing_replicas.clone(),
        })
    };
    let listed: Vec<(String, Vec<OngoingReassignment>)> = match topics {
        None => image
            .topics
            .values()
            .map(|t| {
                let parts = t
                    .partitions
                    .iter()
                    .filter_map(|(&p, reg)| ongoing(reg, p))
                    .collect();
                (t.name.clone(), parts)
            })
            .collect(),
        Some(named) => {
            // A topic named twice is answered once, its partitions merged, as a map would.
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            let mut order = Vec::new();
            for (name, partitions) in named {
                if !by_topic.contains_key(name.as_str()) {
                    order.push(name.as_str());
                }
                by_topic.entry(name).or_default().extend(partitions);
            }
            order
                .into_iter()
                .filter_map(|name| {
                    let t = image.topic(name)?;
                    let parts = by_topic[name]
                        .iter()
                        .filter_map(|p| t.partitions.get(p).and_then(|reg| ongoing(reg, *p)))
                        .collect();
                    Some((t.name.clone(), parts))
                })
                .collect()
        }
    };
    listed
        .into_iter()
        .filter(|(_, parts)| !parts.is_empty())
        .collect()
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::controller::decisions::tests::{
        cluster, partition, set_partition, settings, spec, with_topic,
    };
    use crate::controller::decisions::{alter_partition, AlterPartitionItem};
    use crate::metadata::LeaderRecoveryState;

    fn reg(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 5,
            partition_epoch: 10,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    fn moving(
        replicas: &[i32],
        isr: &[i32],
        leader: i32,
        adding: &[i32],
        removing: &[i32],
    ) -> PartitionRegistration {
        PartitionRegistration {
            adding_replicas: adding.to_vec(),
            removing_replicas: removing.to_vec(),
            ..reg(replicas, isr, leader)
        }
    }

    /// Four brokers, "t" with one partition set to `p`.
    fn image_with(p: PartitionRegistration) -> MetadataImage {
        let image = with_topic(&cluster(4), &spec("t", 1, 2), 1);
        set_partition(&image, "t", 0, p)
    }

    fn item(replicas: Option<&[i32]>) -> ReassignmentItem {
        ReassignmentItem {
            topic: "t".into(),
            partition: 0,
            replicas: replicas.map(<[i32]>::to_vec),
        }
    }

    #[test]
    fn completion_table() {
        // (case, replicas, adding, removing, target isr, expected (replicas, isr))
        let cases: Vec<(
            &str,
            &[i32],
            &[i32],
            &[i32],
            &[i32],
            Option<(Vec<i32>, Vec<i32>)>,
        )> = vec![
            ("nothing in progress", &[1, 2], &[], &[], &[1, 2], None),
            (
                "adding not yet in the ISR",
                &[2, 3, 1],
                &[3],
                &[1],
                &[1, 2],
                None,
            ),
            (
                "adding caught up: removed ones leave",
                &[2, 3, 1],
                &[3],
                &[1],
                &[1, 2, 3],
                Some((vec![2, 3], vec![2, 3])),
            ),
            (
                "only adding",
                &[1, 2, 3],
                &[3],
                &[],
                &[1, 2, 3],
                Some((vec![1, 2, 3], vec![1, 2, 3])),
            ),
            (
                "only removing, a staying replica in the ISR",
                &[1, 2],
                &[],
                &[2],
                &[1, 2],
                Some((vec![1], vec![1])),
            ),
            (
                "only removing, no staying replica in the ISR",
                &[1, 2],
                &[],
                &[1],
                &[1],
                None,
            ),
        ];
        for (case, replicas, adding, removing, isr, expected) in cases {
            let got =
                complete_reassignment(replicas, adding, removing, isr).map(|c| (c.replicas, c.isr));
            assert_eq!(got, expected, "{case}");
        }
    }

    #[test]
    fn alter_reassignments_table() {
        let base = reg(&[1, 2], &[1, 2], 1);
        // (case, partition before, item, allow RF change, expected partition after or error code)
        let cases: Vec<(
            &str,
            PartitionRegistration,
            ReassignmentItem,
            bool,
            Result<Option<PartitionRegistration>, i16>,
        )> = vec![
            (
                "the current assignment: nothing to do",
                base.clone(),
                item(Some(&[1, 2])),
                true,
                Ok(None),
            ),
            (
                "a reorder completes at once; the leader stays until a preferred election",
                base.clone(),
                item(Some(&[2, 1])),
                true,
                Ok(Some(PartitionRegistration {
                    replicas: vec![2, 1],
                    partition_epoch: 11,
                    ..base.clone()
                })),
            ),
            (
                "move one replica: adding joins as a follower, removing stays for now",
                base.clone(),
                item(Some(&[2, 3])),
                true,
                Ok(Some(PartitionRegistration {
                    partition_epoch: 11,
                    ..moving(&[2, 3, 1], &[1, 2], 1, &[3], &[1])
                })),
            ),
            (
                "shrink to replicas in the ISR completes at once, the leader moves",
                base.clone(),
                item(Some(&[2])),
                true,
                Ok(Some(PartitionRegistration {
                    leader_epoch: 6,
                    partition_epoch: 11,
                    ..reg(&[2], &[2], 2)
                })),
            ),
            (
                "shrink keeping the leader still bumps the leader epoch",
                base.clone(),
                item(Some(&[1])),
                true,
                Ok(Some(PartitionRegistration {
                    leader_epoch: 6,
                    partition_epoch: 11,
                    ..reg(&[1], &[1], 1)
                })),
            ),
            (
                "grow",
                base.clone(),
                item(Some(&[1, 2, 3])),
                true,
                Ok(Some(PartitionRegistration {
                    partition_epoch: 11,
                    ..moving(&[1, 2, 3], &[1, 2], 1, &[3], &[])
                })),
            ),
            (
                "grow refused without an RF change",
                base.clone(),
                item(Some(&[1, 2, 3])),
                false,
                Err(38),
            ),
            (
                "move allowed without an RF change",
                base.clone(),
                item(Some(&[3, 4])),
                false,
                Ok(Some(PartitionRegistration {
                    partition_epoch: 11,
                    ..moving(&[3, 4, 1, 2], &[1, 2], 1, &[3, 4], &[1, 2])
                })),
            ),
            ("empty", base.clone(), item(Some(&[])), true, Err(39)),
            (
                "unregistered broker",
                base.clone(),
                item(Some(&[1, 9])),
                true,
                Err(39),
            ),
            (
                "a broker twice",
                base.clone(),
                item(Some(&[2, 2])),
                true,
                Err(39),
            ),
            (
                "cancel without a reassignment",
                base.clone(),
                item(None),
                true,
                Err(85),
            ),
            (
                "cancel reverts to the original replicas",
                moving(&[2, 3, 1], &[1, 2, 3], 1, &[3], &[1]),
                item(None),
                true,
                Ok(Some(PartitionRegistration {
                    leader_epoch: 6,
                    partition_epoch: 11,
                    ..reg(&[2, 1], &[1, 2], 1)
                })),
            ),
            (
                "cancel when only added replicas are in sync needs an unclean election",
                moving(&[3, 1], &[3], 3, &[3], &[1]),
                item(None),
                true,
                Err(39),
            ),
            (
                "a new target during a reassignment starts from its replicas",
                moving(&[2, 3, 1], &[1, 2], 1, &[3], &[1]),
                item(Some(&[2, 4])),
                true,
                Ok(Some(PartitionRegistration {
                    partition_epoch: 11,
                    ..moving(&[2, 4, 1, 3], &[1, 2], 1, &[4], &[1, 3])
                })),
            ),
        ];
        for (case, before, item, allow_rf_change, expected) in cases {
            let image = image_with(before.clone());
            let (records, results) =
                alter_reassignments(&image, &settings(), allow_rf_change, &[item]);
            match expected {
                Ok(after) => {
                    assert_eq!(results[0].result, Ok(()), "{case}");
                    assert_eq!(records.len(), usize::from(after.is_some()), "{case}");
                    let got = partition(&image.apply(&records), "t", 0);
                    assert_eq!(got, after.unwrap_or(before), "{case}");
                }
                Err(code) => {
                    assert!(records.is_empty(), "{case}");
                    let err = results[0].result.as_ref().unwrap_err();
                    assert_eq!(err.code(), code, "{case}: {err}");
                }
            }
        }
    }

    #[test]
    fn errors_carry_kafkas_messages() {
        let image = image_with(reg(&[1, 2], &[1, 2], 1));
        let items = [
            ReassignmentItem {
                topic: "u".into(),
                partition: 0,
                replicas: Some(vec![1]),
            },
            ReassignmentItem {
                topic: "t".into(),
                partition: 7,
                replicas: Some(vec![1]),
            },
            item(Some(&[9, 1])),
            item(Some(&[3, 3])),
            item(Some(&[])),
            item(None),
        ];
        let (_, results) = alter_reassignments(&image, &settings(), true, &items);
        let messages: Vec<(i16, String)> = results
            .iter()
            .map(|r| {
                let e = r.result.as_ref().unwrap_err();
                (e.code(), e.message())
            })
            .collect();
        assert_eq!(
            messages,
            vec![
                (3, "Unable to find a topic named u.".to_owned()),
                (3, "Unable to find partition t:7.".to_owned()),
                (
                    39,
                    "The manual partition assignment includes broker 9, but no such broker is registered.".to_owned()
                ),
                (
                    39,
                    "The manual partition assignment includes the broker 3 more than once.".to_owned()
                ),
                (
                    39,
                    "The manual partition assignment includes an empty replica list.".to_owned()
                ),
                (85, "No partition reassignment is in progress.".to_owned()),
            ]
        );
        let (_, results) =
            alter_reassignments(&image, &settings(), false, &[item(Some(&[1, 2, 3]))]);
        assert_eq!(
            results[0].result.as_ref().unwrap_err().message(),
            "The replication factor is changed from 2 to 3"
        );
    }

    /// A reassignment through its stages: start, the adding replica joins through the leader's
    /// AlterPartition, which completes it and moves the leadership away from the removed
    /// replica, to the first target replica in the ISR (Kafka's election order: target
    /// replicas, not ISR order).
    #[test]
    fn a_move_completes_when_the_new_replica_joins_the_isr() {
        let image = image_with(reg(&[1, 2], &[1, 2], 1));
        let (records, results) =
            alter_reassignments(&image, &settings(), true, &[item(Some(&[3, 2]))]);
        assert_eq!(results[0].result, Ok(()));
        let image = image.apply(&records);
        let p = partition(&image, "t", 0);
        assert_eq!(
            (
                p.replicas.clone(),
                p.adding_replicas.clone(),
                p.removing_replicas.clone()
            ),
            (vec![3, 2, 1], vec![3], vec![1])
        );
        assert_eq!(
            list_reassignments(&image, None),
            vec![(
                "t".to_owned(),
                vec![OngoingReassignment {
                    partition: 0,
                    replicas: vec![3, 2, 1],
                    adding_replicas: vec![3],
                    removing_replicas: vec![1],
                }]
            )]
        );
        // Broker 3 caught up: the leader (1) asks to add it to the ISR.
        let topic_id = image.topic("t").unwrap().id;
        let join = AlterPartitionItem {
            topic_id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: vec![(1, -1), (2, -1), (3, -1)],
            leader_recovery_state: 0,
        };
        let (records, results) =
            alter_partition(&image, 1, image.brokers[&1].broker_epoch, 3, &[join]).unwrap();
        assert_eq!(
            results[0].result,
            Err(ApiError::NewLeaderElected),
            "the leader was removed: it learns of its successor"
        );
        let after = partition(&image.apply(&records), "t", 0);
        assert_eq!(
            after,
            PartitionRegistration {
                leader_epoch: p.leader_epoch + 1,
                partition_epoch: p.partition_epoch + 1,
                ..reg(&[3, 2], &[2, 3], 3)
            }
        );
        assert!(list_reassignments(&image.apply(&records), None).is_empty());
    }

    #[test]
    fn an_isr_change_that_does_not_complete_keeps_the_reassignment() {
        let image = image_with(moving(&[3, 2, 1], &[1, 2], 1, &[3], &[1]));
        let p = partition(&image, "t", 0);
        let shrink = AlterPartitionItem {
            topic_id: image.topic("t").unwrap().id,
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: vec![(1, -1)],
            leader_recovery_state: 0,
        };
        let (records, results) =
            alter_partition(&image, 1, image.brokers[&1].broker_epoch, 3, &[shrink]).unwrap();
        let after = results[0].result.clone().unwrap();
        assert_eq!(after.isr, vec![1]);
        assert_eq!(
            (after.adding_replicas, after.removing_replicas),
            (vec![3], vec![1])
        );
        assert_eq!(after.leader_epoch, p.leader_epoch);
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn listing_follows_kafka() {
        let image = image_with(moving(&[3, 2, 1], &[1, 2], 1, &[3], &[1]));
        let named = |topics: &[(&str, &[i32])]| -> Vec<(String, Vec<i32>)> {
            topics
                .iter()
                .map(|(t, ps)| ((*t).to_owned(), ps.to_vec()))
                .collect()
        };
        let listed = |topics: &[(String, Vec<i32>)]| -> Vec<(String, Vec<i32>)> {
            list_reassignments(&image, Some(topics))
                .into_iter()
                .map(|(t, ps)| (t, ps.into_iter().map(|p| p.partition).collect()))
                .collect()
        };
        assert_eq!(listed(&named(&[("t", &[0])])), named(&[("t", &[0])]));
        // Unknown topics, unknown partitions and partitions not moving are left out.
        assert!(listed(&named(&[("u", &[0]), ("t", &[5])])).is_empty());
        let still = with_topic(&image, &spec("s", 1, 1), 2);
        assert_eq!(list_reassignments(&still, None).len(), 1);
    }
}
