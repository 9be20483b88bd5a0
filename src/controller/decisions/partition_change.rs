//! How one partition's registration changes (Kafka's `PartitionChangeBuilder`), and the changes
//! a broker leaving or joining makes to every partition it touches
//! (`ReplicationControlManager#generateLeaderAndIsrUpdates`).
//!
//! Without eligible leader replicas (KIP-966), a change is: a target ISR, target replicas with
//! the replicas a reassignment adds and removes, a target leader recovery state, an election type
//! and which brokers may lead. As in Kafka, every change first completes a reassignment whose
//! target replicas are all in the target ISR ([`super::reassignment::complete_reassignment`]),
//! then elects. The leader epoch is bumped when the leader changes or replicas are removed (an
//! ISR shrink alone bumps only the partition epoch, as for `metadata.version` ≥ 3.6,
//! KAFKA-15021); the partition epoch on every change.

use std::collections::HashMap;

use uuid::Uuid;

use super::reassignment::complete_reassignment;
use super::ControllerSettings;
use crate::metadata::{
    LeaderRecoveryState, MetadataImage, MetadataRecord, PartitionRegistration, TopicImage,
};

/// The leader of a partition that has none.
pub(crate) const NO_LEADER: i32 = -1;

/// How a leader is chosen when the current one may not stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Election {
    /// The current leader if it may stay, else the first replica in the ISR that may lead.
    Online,
    /// `replicas[0]` if it is in the ISR and may lead, else as [`Election::Online`].
    Preferred,
    /// As [`Election::Online`], and if no ISR member may lead, the first replica that may: it
    /// becomes the only ISR member, RECOVERING (this can lose acknowledged writes).
    Unclean,
}

/// What a change aims for; fields left as the registration has them change nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) isr: Vec<i32>,
    pub(crate) replicas: Vec<i32>,
    pub(crate) adding: Vec<i32>,
    pub(crate) removing: Vec<i32>,
    pub(crate) recovery: LeaderRecoveryState,
}

impl Target {
    /// Everything as `reg` has it.
    pub(crate) fn of(reg: &PartitionRegistration) -> Target {
        Target {
            isr: reg.isr.clone(),
            replicas: reg.replicas.clone(),
            adding: reg.adding_replicas.clone(),
            removing: reg.removing_replicas.clone(),
            recovery: reg.leader_recovery_state,
        }
    }
}

/// The leader an election picks among `replicas` (the target replicas, in order), and whether
/// it was picked from outside the ISR.
pub(crate) fn elect(
    reg: &PartitionRegistration,
    replicas: &[i32],
    target_isr: &[i32],
    election: Election,
    acceptable: &dyn Fn(i32) -> bool,
) -> (i32, bool) {
    let valid = |r: i32| target_isr.contains(&r) && acceptable(r);
    if election == Election::Preferred {
        if let Some(&preferred) = replicas.first() {
            if valid(preferred) {
                return (preferred, false);
            }
        }
    }
    if valid(reg.leader) {
        return (reg.leader, false);
    }
    if let Some(&r) = replicas.iter().find(|&&r| valid(r)) {
        return (r, false);
    }
    if election == Election::Unclean {
        if let Some(&r) = replicas.iter().find(|&&r| acceptable(r)) {
            return (r, true);
        }
    }
    (NO_LEADER, false)
}

/// What `reg` becomes, or `None` if nothing changes: only the ISR and the recovery state aimed
/// for, replicas as they are (a reassignment may still complete).
///
/// An empty target ISR leaves the ISR as it is: without eligible leader replicas KRaft never
/// empties an ISR, so the last member stays in it (and the partition has no leader until that
/// member returns).
pub(crate) fn change_partition(
    reg: &PartitionRegistration,
    target_isr: &[i32],
    target_recovery: LeaderRecoveryState,
    election: Election,
    acceptable: &dyn Fn(i32) -> bool,
) -> Option<PartitionRegistration> {
    let target = Target {
        isr: target_isr.to_vec(),
        recovery: target_recovery,
        ..Target::of(reg)
    };
    build(reg, target, election, acceptable)
}

/// What `reg` becomes under `target`, or `None` if nothing changes (Kafka's
/// `PartitionChangeBuilder#build`): a reassignment whose target replicas are all in the target
/// ISR completes first, then the election runs over the target replicas and ISR; replicas,
/// adding and removing replicas are set as aimed for (empty target replicas keep them).
pub(crate) fn build(
    reg: &PartitionRegistration,
    mut target: Target,
    election: Election,
    acceptable: &dyn Fn(i32) -> bool,
) -> Option<PartitionRegistration> {
    if let Some(done) = complete_reassignment(
        &target.replicas,
        &target.adding,
        &target.removing,
        &target.isr,
    ) {
        target.isr = done.isr;
        target.replicas = done.replicas;
        target.adding.clear();
        target.removing.clear();
    }
    if target.replicas.is_empty() {
        target.replicas = reg.replicas.clone();
    }
    let (leader, unclean) = elect(reg, &target.replicas, &target.isr, election, acceptable);
    let mut next = reg.clone();
    let leader_changed = leader != reg.leader;
    if leader_changed {
        next.leader = leader;
        if unclean {
            next.isr = vec![leader];
            next.leader_recovery_state = LeaderRecoveryState::Recovering;
        }
    }
    let isr_set_by_election = leader_changed && unclean;
    if !isr_set_by_election && !target.isr.is_empty() && target.isr != reg.isr {
        next.isr = target.isr;
    }
    next.replicas = target.replicas;
    next.adding_replicas = target.adding;
    next.removing_replicas = target.removing;
    if target.recovery != reg.leader_recovery_state {
        next.leader_recovery_state = target.recovery;
    }
    if next == *reg {
        return None;
    }
    // Removing a replica bumps the leader epoch even when the leader stays, so a removed replica
    // still fetching is fenced (Kafka's `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`).
    let replicas_removed = reg.replicas.iter().any(|r| !next.replicas.contains(r));
    if leader_changed || replicas_removed {
        next.leader_epoch += 1;
    }
    next.partition_epoch += 1;
    Some(next)
}

/// Whether unclean leader election is on for `topic`: its own config, else the cluster-wide
/// dynamic default, else the broker setting (Kafka's `uncleanLeaderElectionEnabledForTopic`).
pub(crate) fn unclean_enabled(
    image: &MetadataImage,
    settings: &ControllerSettings,
    topic: &TopicImage,
) -> bool {
    const KEY: &str = "unclean.leader.election.enable";
    topic
        .configs
        .get(KEY)
        .or_else(|| image.broker_configs.get("").and_then(|c| c.get(KEY)))
        .map_or(settings.unclean_leader_election_enable, |v| {
            v.trim().eq_ignore_ascii_case("true")
        })
}

/// The changes to every partition `select` picks when broker `remove` leaves (it leaves every
/// ISR and may not lead) or broker `add` joins (it may lead even though the image still shows
/// it fenced). Pass [`NO_LEADER`] for the one that does not apply. Elections are online, or
/// unclean where the topic allows it.
pub(crate) fn leader_and_isr_updates(
    image: &MetadataImage,
    settings: &ControllerSettings,
    remove: i32,
    add: i32,
    select: impl Fn(&PartitionRegistration) -> bool,
) -> Vec<MetadataRecord> {
    let acceptable = |r: i32| r != remove && (r == add || image.is_broker_active(r));
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let election = if unclean_enabled(image, settings, topic) {
            Election::Unclean
        } else {
            Election::Online
        };
        for (&partition, reg) in &topic.partitions {
            if !select(reg) {
                continue;
            }
            let target_isr: Vec<i32> = reg.isr.iter().copied().filter(|&r| r != remove).collect();
            if let Some(next) = change_partition(
                reg,
                &target_isr,
                reg.leader_recovery_state,
                election,
                &acceptable,
            ) {
                if next.leader == NO_LEADER && reg.leader != NO_LEADER {
                    tracing::info!(topic = %topic.name, partition, "partition has no eligible leader");
                } else if next.leader_recovery_state == LeaderRecoveryState::Recovering
                    && reg.leader_recovery_state == LeaderRecoveryState::Recovered
                {
                    tracing::warn!(topic = %topic.name, partition, leader = next.leader, "unclean leader election");
                }
                records.push(MetadataRecord::Partition {
                    topic_id: topic.id,
                    partition,
                    registration: next,
                });
            }
        }
    }
    records
}

/// Merges the records of one decision so each partition is written once, with its epochs bumped
/// at most once from `image`'s: a decision that takes a leadership away and gives it back (a
/// restarted broker fenced and unfenced in one go) changes leader epoch and partition epoch by
/// one, which is all the fencing needs. Other records keep their order; a partition's merged
/// record stands where its first one stood.
pub(crate) fn coalesce(image: &MetadataImage, records: Vec<MetadataRecord>) -> Vec<MetadataRecord> {
    let mut out: Vec<MetadataRecord> = Vec::with_capacity(records.len());
    let mut at: HashMap<(Uuid, i32), usize> = HashMap::new();
    for record in records {
        let MetadataRecord::Partition {
            topic_id,
            partition,
            mut registration,
        } = record
        else {
            out.push(record);
            continue;
        };
        if let Some(before) = image
            .topic_by_id(&topic_id)
            .and_then(|t| t.partitions.get(&partition))
        {
            registration.leader_epoch =
                before.leader_epoch + i32::from(registration.leader_epoch > before.leader_epoch);
            registration.partition_epoch = before.partition_epoch
                + i32::from(registration.partition_epoch > before.partition_epoch);
        }
        let merged = MetadataRecord::Partition {
            topic_id,
            partition,
            registration,
        };
        match at.get(&(topic_id, partition)) {
            Some(&i) => out[i] = merged,
            None => {
                at.insert((topic_id, partition), out.len());
                out.push(merged);
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use LeaderRecoveryState::{Recovered, Recovering};

    fn reg(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 5,
            partition_epoch: 10,
            leader_recovery_state: Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    #[test]
    fn elections_follow_the_partition_change_builder() {
        use Election::*;
        let all = |_: i32| true;
        let not_1 = |r: i32| r != 1;
        let not_1_2 = |r: i32| r != 1 && r != 2;
        // (case, partition, target isr, election, acceptable, expected (leader, unclean))
        let cases: Vec<(
            &str,
            PartitionRegistration,
            Vec<i32>,
            Election,
            &dyn Fn(i32) -> bool,
            (i32, bool),
        )> = vec![
            (
                "leader stays",
                reg(&[1, 2, 3], &[1, 2, 3], 2),
                vec![1, 2, 3],
                Online,
                &all,
                (2, false),
            ),
            (
                "first acceptable ISR member in replica order",
                reg(&[3, 1, 2], &[1, 2, 3], 1),
                vec![2, 3],
                Online,
                &not_1,
                (3, false),
            ),
            (
                "no ISR member: no leader",
                reg(&[1, 2], &[1], 1),
                vec![1],
                Online,
                &not_1,
                (NO_LEADER, false),
            ),
            (
                "no ISR member, unclean: first acceptable replica",
                reg(&[1, 2, 3], &[1], 1),
                vec![],
                Unclean,
                &not_1,
                (2, true),
            ),
            (
                "unclean but an ISR member can lead: clean",
                reg(&[1, 2, 3], &[1, 3], 1),
                vec![3],
                Unclean,
                &not_1,
                (3, false),
            ),
            (
                "unclean, nothing acceptable",
                reg(&[1, 2], &[1], 1),
                vec![],
                Unclean,
                &not_1_2,
                (NO_LEADER, false),
            ),
            (
                "preferred",
                reg(&[1, 2], &[1, 2], 2),
                vec![1, 2],
                Preferred,
                &all,
                (1, false),
            ),
            (
                "preferred unavailable: current stays",
                reg(&[1, 2, 3], &[1, 2, 3], 3),
                vec![1, 2, 3],
                Preferred,
                &not_1,
                (3, false),
            ),
        ];
        for (case, r, isr, election, acceptable, expected) in cases {
            assert_eq!(
                elect(&r, &r.replicas, &isr, election, acceptable),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn changes_bump_leader_epoch_only_on_leader_change() {
        let all = |_: i32| true;
        let not_1 = |r: i32| r != 1;
        let base = reg(&[1, 2, 3], &[1, 2, 3], 1);
        // ISR shrink under the same leader: partition epoch only.
        let shrunk = change_partition(&base, &[1, 2], Recovered, Election::Online, &all).unwrap();
        assert_eq!(
            (
                shrunk.isr.clone(),
                shrunk.leader_epoch,
                shrunk.partition_epoch
            ),
            (vec![1, 2], 5, 11)
        );
        // Nothing to change.
        assert_eq!(
            change_partition(&base, &[1, 2, 3], Recovered, Election::Online, &all),
            None
        );
        // Leader leaves: new leader, both epochs.
        let moved = change_partition(&base, &[2, 3], Recovered, Election::Online, &not_1).unwrap();
        assert_eq!(
            (
                moved.leader,
                moved.isr.clone(),
                moved.leader_epoch,
                moved.partition_epoch
            ),
            (2, vec![2, 3], 6, 11)
        );
        // The last member stays in the ISR; the partition has no leader.
        let last = reg(&[1, 2], &[1], 1);
        let leaderless = change_partition(&last, &[], Recovered, Election::Online, &not_1).unwrap();
        assert_eq!(
            (
                leaderless.leader,
                leaderless.isr.clone(),
                leaderless.leader_epoch
            ),
            (NO_LEADER, vec![1], 6)
        );
        // Unclean: ISR [new leader], RECOVERING.
        let unclean = change_partition(&last, &[], Recovered, Election::Unclean, &not_1).unwrap();
        assert_eq!(
            (
                unclean.leader,
                unclean.isr.clone(),
                unclean.leader_recovery_state
            ),
            (2, vec![2], Recovering)
        );
        // RECOVERING → RECOVERED is a change of its own (partition epoch only).
        let recovered =
            change_partition(&unclean, &[2], Recovered, Election::Online, &not_1).unwrap();
        assert_eq!(
            (
                recovered.leader_recovery_state,
                recovered.leader_epoch,
                recovered.partition_epoch
            ),
            (Recovered, unclean.leader_epoch, unclean.partition_epoch + 1)
        );
    }

    #[test]
    fn coalesce_writes_each_partition_once_with_one_bump() {
        let topic_id = Uuid::from_u128(1);
        let image = MetadataImage::default().apply(&[
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id,
            },
            MetadataRecord::Partition {
                topic_id,
                partition: 0,
                registration: reg(&[1], &[1], 1),
            },
        ]);
        let step = |leader, le, pe| MetadataRecord::Partition {
            topic_id,
            partition: 0,
            registration: PartitionRegistration {
                leader,
                leader_epoch: le,
                partition_epoch: pe,
                ..reg(&[1], &[1], 1)
            },
        };
        let change = MetadataRecord::BrokerRegistrationChange {
            node_id: 1,
            broker_epoch: 1,
            fenced: Some(false),
            in_controlled_shutdown: None,
        };
        let merged = coalesce(
            &image,
            vec![step(NO_LEADER, 6, 11), change.clone(), step(1, 7, 12)],
        );
        assert_eq!(merged, vec![step(1, 6, 11), change]);
    }
}
