//! A leader's ISR and the changes it asks the controller for (Kafka's `PartitionState`,
//! `CommittedPartitionState`, `PendingExpandIsr` and `PendingShrinkIsr` in `Partition.scala`).
//!
//! The ISR a leader acts on is the *committed* one, from the metadata image or from the
//! controller's answer to an AlterPartition. An expansion or a shrink in flight is a state of its
//! own, not a flag: while one is in flight no other change is proposed, and the *maximal ISR*
//! (what the high watermark and acks=all wait for) is the larger of the two sets — a joining
//! replica is waited for at once, a leaving one until the controller has committed its removal.
//!
//! Everything here is pure: `(state, event) -> state'`, table tested below. [`super::Partition`]
//! holds the state under its lock and sends the proposals through
//! [`super::alter_partition::AlterPartitionManager`].

use crate::errors::ApiError;
use crate::metadata::{BrokerRegistration, LeaderRecoveryState};

/// What a leader sends the controller for one partition (Kafka's `sentLeaderAndIsr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    /// Tells proposals apart: an answer is applied only to the proposal it answers.
    pub id: u64,
    pub leader_epoch: i32,
    /// The partition epoch the proposal is based on.
    pub partition_epoch: i32,
    /// The proposed ISR, each member with the broker epoch it was last seen fetching with
    /// (AlterPartition v3's `new_isr_with_epochs`; -1 when unknown).
    pub isr_with_epochs: Vec<(i32, i64)>,
    pub leader_recovery_state: LeaderRecoveryState,
}

impl IsrProposal {
    pub fn isr(&self) -> Vec<i32> {
        self.isr_with_epochs.iter().map(|(id, _)| *id).collect()
    }
}

/// The ISR the controller has committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedIsr {
    pub isr: Vec<i32>,
    pub leader_recovery_state: LeaderRecoveryState,
}

/// A leader's ISR state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrState {
    Committed(CommittedIsr),
    /// `new_in_sync` caught up and was proposed for the ISR.
    PendingExpand {
        new_in_sync: i32,
        proposal: IsrProposal,
        last_committed: CommittedIsr,
    },
    /// `out_of_sync` fell behind and was proposed for removal.
    PendingShrink {
        out_of_sync: Vec<i32>,
        proposal: IsrProposal,
        last_committed: CommittedIsr,
    },
}

impl IsrState {
    pub fn committed(isr: Vec<i32>, leader_recovery_state: LeaderRecoveryState) -> IsrState {
        IsrState::Committed(CommittedIsr {
            isr,
            leader_recovery_state,
        })
    }

    fn last_committed(&self) -> &CommittedIsr {
        match self {
            IsrState::Committed(c) => c,
            IsrState::PendingExpand { last_committed, .. }
            | IsrState::PendingShrink { last_committed, .. } => last_committed,
        }
    }

    /// The committed ISR: what min ISR is checked against (acks=all before the append, the
    /// high watermark's KAFKA-15583 rule).
    pub fn isr(&self) -> &[i32] {
        &self.last_committed().isr
    }

    pub fn leader_recovery_state(&self) -> LeaderRecoveryState {
        self.last_committed().leader_recovery_state
    }

    /// Kafka's `maximalIsr`: the committed ISR plus a replica being added. A replica being
    /// removed stays in it until the controller commits the removal.
    pub fn maximal_isr(&self) -> Vec<i32> {
        match self {
            IsrState::PendingExpand {
                new_in_sync,
                last_committed,
                ..
            } => {
                let mut isr = last_committed.isr.clone();
                if !isr.contains(new_in_sync) {
                    isr.push(*new_in_sync);
                }
                isr
            }
            other => other.isr().to_vec(),
        }
    }

    pub fn is_inflight(&self) -> bool {
        !matches!(self, IsrState::Committed(_))
    }

    pub fn proposal(&self) -> Option<&IsrProposal> {
        match self {
            IsrState::Committed(_) => None,
            IsrState::PendingExpand { proposal, .. } | IsrState::PendingShrink { proposal, .. } => {
                Some(proposal)
            }
        }
    }
}

/// Kafka's `isReplicaIsrEligible` (KRaft): a replica may join the ISR (and the high watermark
/// waits for it once caught up) only if its broker is registered, unfenced, not shutting down,
/// and the broker epoch its fetches carry is the registered one (or -1, which skips the check).
/// A replica the leader has not heard from since it started leading is not eligible.
pub fn isr_eligible(
    registration: Option<&BrokerRegistration>,
    fetch_broker_epoch: Option<i64>,
) -> bool {
    match (registration, fetch_broker_epoch) {
        (Some(b), Some(fetched)) => {
            !b.fenced && !b.in_controlled_shutdown && (fetched == -1 || fetched == b.broker_epoch)
        }
        _ => false,
    }
}

/// Kafka's `isFollowerInSync`, the expansion test: the follower has everything committed and
/// everything of the current leader epoch's start. The lag timer is deliberately not used: a
/// replica that joins must not take the high watermark back.
pub fn is_follower_in_sync(
    follower_log_end_offset: i64,
    leader_high_watermark: i64,
    leader_epoch_start_offset: Option<i64>,
) -> bool {
    follower_log_end_offset >= leader_high_watermark
        && leader_epoch_start_offset.is_some_and(|start| follower_log_end_offset >= start)
}

/// The expansion a follower fetch makes (Kafka's `maybeExpandIsr` / `prepareIsrExpand`), if
/// any: only from a committed state, for a replica not yet in the ISR that is eligible and in
/// sync. An expansion also reports the leader RECOVERED: a leader of an unclean election has
/// nothing more to recover by the time a follower has caught up with it.
pub fn prepare_expand(
    state: &IsrState,
    replica_id: i32,
    eligible: bool,
    in_sync: bool,
    proposal: impl FnOnce(Vec<i32>, LeaderRecoveryState) -> IsrProposal,
) -> Option<IsrState> {
    let IsrState::Committed(committed) = state else {
        return None;
    };
    if committed.isr.contains(&replica_id) || !eligible || !in_sync {
        return None;
    }
    let mut isr = committed.isr.clone();
    isr.push(replica_id);
    Some(IsrState::PendingExpand {
        new_in_sync: replica_id,
        proposal: proposal(isr, LeaderRecoveryState::Recovered),
        last_committed: committed.clone(),
    })
}

/// Kafka's `getOutOfSyncReplicas`: ISR members other than the leader that are not caught up
/// (a member the leader has no state for counts as out of sync). Empty while a change is in
/// flight.
pub fn out_of_sync_replicas(
    state: &IsrState,
    leader_id: i32,
    caught_up: impl Fn(i32) -> Option<bool>,
) -> Vec<i32> {
    if state.is_inflight() {
        return Vec::new();
    }
    state
        .isr()
        .iter()
        .copied()
        .filter(|&id| id != leader_id && !caught_up(id).unwrap_or(false))
        .collect()
}

/// Kafka's `maybeShrinkIsr` / `prepareIsrShrink`: removes `out_of_sync` from a committed ISR.
pub fn prepare_shrink(
    state: &IsrState,
    out_of_sync: Vec<i32>,
    proposal: impl FnOnce(Vec<i32>, LeaderRecoveryState) -> IsrProposal,
) -> Option<IsrState> {
    let IsrState::Committed(committed) = state else {
        return None;
    };
    if out_of_sync.is_empty() {
        return None;
    }
    let isr: Vec<i32> = committed
        .isr
        .iter()
        .copied()
        .filter(|id| !out_of_sync.contains(id))
        .collect();
    Some(IsrState::PendingShrink {
        out_of_sync,
        proposal: proposal(isr, committed.leader_recovery_state),
        last_committed: committed.clone(),
    })
}

/// What the controller committed for a partition (AlterPartition's per-partition answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedPartition {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    pub leader_recovery_state: LeaderRecoveryState,
    pub partition_epoch: i32,
}

/// What a leader does with an AlterPartition answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterPartitionOutcome {
    /// The state moved on meanwhile (a new image, another proposal): the answer is stale.
    Ignore,
    /// Committed: the new ISR and partition epoch apply; the high watermark may move.
    Commit(CommittedIsr, i32),
    /// Refused and certainly not applied (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED): back to
    /// the last committed state, so the next fetch or expiry check may propose again.
    Reset,
    /// Refused in a way only newer metadata resolves (a stale epoch, an unknown partition, an
    /// invalid request, a new leader elected): the change stays pending until the next image
    /// for the partition replaces the state, after which it is proposed again if still needed.
    AwaitMetadata,
    /// Anything else (a server error, a timeout): send the same proposal again.
    Retry,
}

/// Kafka's `submitAlterPartition` completion: `handleAlterPartitionUpdate` for an answer,
/// `handleAlterPartitionError` for a refusal.
pub fn on_alter_partition_answer(
    state: &IsrState,
    leader_epoch: i32,
    partition_epoch: i32,
    proposal_id: u64,
    answer: &Result<CommittedPartition, ApiError>,
) -> AlterPartitionOutcome {
    if state.proposal().is_none_or(|p| p.id != proposal_id) {
        return AlterPartitionOutcome::Ignore;
    }
    match answer {
        Ok(committed) => {
            if committed.leader_epoch != leader_epoch || committed.partition_epoch < partition_epoch
            {
                // Ours is stale (a new epoch is coming in the metadata) or theirs is: either
                // way the image decides.
                AlterPartitionOutcome::AwaitMetadata
            } else {
                AlterPartitionOutcome::Commit(
                    CommittedIsr {
                        isr: committed.isr.clone(),
                        leader_recovery_state: committed.leader_recovery_state,
                    },
                    committed.partition_epoch,
                )
            }
        }
        Err(ApiError::OperationNotAttempted | ApiError::IneligibleReplica) => {
            AlterPartitionOutcome::Reset
        }
        Err(
            ApiError::UnknownTopicOrPartition
            | ApiError::UnknownTopicId
            | ApiError::FencedLeaderEpoch
            | ApiError::InvalidUpdateVersion
            | ApiError::InvalidRequest(_)
            | ApiError::NewLeaderElected,
        ) => AlterPartitionOutcome::AwaitMetadata,
        Err(_) => AlterPartitionOutcome::Retry,
    }
}

/// The state after an outcome.
pub fn apply_outcome(state: &IsrState, outcome: &AlterPartitionOutcome) -> Option<IsrState> {
    match outcome {
        AlterPartitionOutcome::Commit(committed, _) => Some(IsrState::Committed(committed.clone())),
        AlterPartitionOutcome::Reset => Some(IsrState::Committed(state.last_committed().clone())),
        AlterPartitionOutcome::Ignore
        | AlterPartitionOutcome::AwaitMetadata
        | AlterPartitionOutcome::Retry => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    const RECOVERED: LeaderRecoveryState = LeaderRecoveryState::Recovered;

    fn proposal(id: u64) -> impl FnOnce(Vec<i32>, LeaderRecoveryState) -> IsrProposal {
        move |isr, leader_recovery_state| IsrProposal {
            id,
            leader_epoch: 3,
            partition_epoch: 7,
            isr_with_epochs: isr.into_iter().map(|r| (r, 10 + i64::from(r))).collect(),
            leader_recovery_state,
        }
    }

    fn committed(isr: &[i32]) -> IsrState {
        IsrState::committed(isr.to_vec(), RECOVERED)
    }

    #[test]
    fn maximal_isr_waits_for_joining_and_leaving_replicas() {
        let base = committed(&[1, 2]);
        assert_eq!(base.maximal_isr(), vec![1, 2]);
        assert!(!base.is_inflight());
        let expanding = prepare_expand(&base, 3, true, true, proposal(1)).unwrap();
        assert_eq!(expanding.isr(), &[1, 2]);
        assert_eq!(expanding.maximal_isr(), vec![1, 2, 3]);
        assert_eq!(expanding.proposal().unwrap().isr(), vec![1, 2, 3]);
        assert!(expanding.is_inflight());
        let shrinking = prepare_shrink(&base, vec![2], proposal(2)).unwrap();
        assert_eq!(shrinking.isr(), &[1, 2]);
        assert_eq!(shrinking.maximal_isr(), vec![1, 2]);
        assert_eq!(shrinking.proposal().unwrap().isr(), vec![1]);
        assert_eq!(
            shrinking.proposal().unwrap().isr_with_epochs,
            vec![(1, 11)],
            "members carry the broker epochs they fetched with"
        );
    }

    #[test]
    fn expansion_table() {
        // (state, replica, eligible, in sync) -> expands
        let expanding = prepare_expand(&committed(&[1]), 2, true, true, proposal(1)).unwrap();
        let cases = [
            (committed(&[1]), 2, true, true, true),
            (committed(&[1]), 2, false, true, false),
            (committed(&[1]), 2, true, false, false),
            (committed(&[1, 2]), 2, true, true, false),
            // Nothing is proposed while a change is in flight.
            (expanding, 3, true, true, false),
        ];
        for (state, replica, eligible, in_sync, expected) in cases {
            assert_eq!(
                prepare_expand(&state, replica, eligible, in_sync, proposal(9)).is_some(),
                expected,
                "{state:?} {replica} eligible={eligible} in_sync={in_sync}"
            );
        }
        // An expansion out of an unclean election's RECOVERING state reports RECOVERED.
        let recovering = IsrState::committed(vec![1], LeaderRecoveryState::Recovering);
        let e = prepare_expand(&recovering, 2, true, true, proposal(1)).unwrap();
        assert_eq!(e.proposal().unwrap().leader_recovery_state, RECOVERED);
        let s = prepare_shrink(&recovering, vec![1], proposal(2)).unwrap();
        assert_eq!(
            s.proposal().unwrap().leader_recovery_state,
            LeaderRecoveryState::Recovering
        );
    }

    #[test]
    fn in_sync_table() {
        // (follower leo, leader hw, epoch start) -> in sync
        let cases = [
            (10, 10, Some(5), true),
            (12, 10, Some(5), true),
            (9, 10, Some(5), false),
            // Below the start of the leader's epoch: it has not seen this leader's first write.
            (10, 8, Some(11), false),
            (10, 10, None, false),
        ];
        for (leo, hw, start, expected) in cases {
            assert_eq!(
                is_follower_in_sync(leo, hw, start),
                expected,
                "{leo} {hw} {start:?}"
            );
        }
    }

    fn broker(epoch: i64, fenced: bool, shutting_down: bool) -> BrokerRegistration {
        BrokerRegistration {
            broker_epoch: epoch,
            fenced,
            in_controlled_shutdown: shutting_down,
            ..BrokerRegistration::new(2, Uuid::nil(), None)
        }
    }

    #[test]
    fn eligibility_table() {
        // (registration, fetch broker epoch) -> eligible (KIP-841)
        let cases = [
            (Some(broker(5, false, false)), Some(5), true),
            (Some(broker(5, false, false)), Some(-1), true),
            (Some(broker(5, false, false)), Some(4), false),
            (Some(broker(5, false, false)), None, false),
            (Some(broker(5, true, false)), Some(5), false),
            (Some(broker(5, false, true)), Some(5), false),
            (None, Some(5), false),
        ];
        for (registration, fetched, expected) in cases {
            assert_eq!(
                isr_eligible(registration.as_ref(), fetched),
                expected,
                "{registration:?} {fetched:?}"
            );
        }
    }

    #[test]
    fn out_of_sync_table() {
        let caught_up = |id: i32| match id {
            2 => Some(true),
            3 => Some(false),
            _ => None,
        };
        assert_eq!(
            out_of_sync_replicas(&committed(&[1, 2]), 1, caught_up),
            Vec::<i32>::new()
        );
        assert_eq!(
            out_of_sync_replicas(&committed(&[1, 2, 3]), 1, caught_up),
            vec![3]
        );
        // No state for a member: out of sync. The leader never is.
        assert_eq!(
            out_of_sync_replicas(&committed(&[1, 4]), 1, caught_up),
            vec![4]
        );
        let pending = prepare_shrink(&committed(&[1, 2, 3]), vec![3], proposal(1)).unwrap();
        assert!(out_of_sync_replicas(&pending, 1, caught_up).is_empty());
        assert!(prepare_shrink(&committed(&[1]), vec![], proposal(1)).is_none());
    }

    fn answer(
        isr: &[i32],
        leader_epoch: i32,
        partition_epoch: i32,
    ) -> Result<CommittedPartition, ApiError> {
        Ok(CommittedPartition {
            leader_id: 1,
            leader_epoch,
            isr: isr.to_vec(),
            leader_recovery_state: RECOVERED,
            partition_epoch,
        })
    }

    #[test]
    fn alter_partition_answer_table() {
        use AlterPartitionOutcome::*;
        let pending = prepare_expand(&committed(&[1]), 2, true, true, proposal(4)).unwrap();
        let commit = Commit(
            CommittedIsr {
                isr: vec![1, 2],
                leader_recovery_state: RECOVERED,
            },
            8,
        );
        // (answer, proposal id) -> outcome, with the partition at leader epoch 3, partition
        // epoch 7
        let cases: Vec<(
            Result<CommittedPartition, ApiError>,
            u64,
            AlterPartitionOutcome,
        )> = vec![
            (answer(&[1, 2], 3, 8), 4, commit.clone()),
            // The controller found nothing to change: same epoch, committed all the same.
            (
                answer(&[1, 2], 3, 7),
                4,
                Commit(
                    CommittedIsr {
                        isr: vec![1, 2],
                        leader_recovery_state: RECOVERED,
                    },
                    7,
                ),
            ),
            // An answer to another proposal, or after the state moved on.
            (answer(&[1, 2], 3, 8), 5, Ignore),
            // Epochs that disagree with ours: the metadata decides.
            (answer(&[1, 2], 4, 9), 4, AwaitMetadata),
            (answer(&[1, 2], 3, 6), 4, AwaitMetadata),
            (Err(ApiError::IneligibleReplica), 4, Reset),
            (Err(ApiError::OperationNotAttempted), 4, Reset),
            (Err(ApiError::InvalidUpdateVersion), 4, AwaitMetadata),
            (Err(ApiError::FencedLeaderEpoch), 4, AwaitMetadata),
            (Err(ApiError::UnknownTopicOrPartition), 4, AwaitMetadata),
            (Err(ApiError::UnknownTopicId), 4, AwaitMetadata),
            (
                Err(ApiError::InvalidRequest(String::new())),
                4,
                AwaitMetadata,
            ),
            (Err(ApiError::NewLeaderElected), 4, AwaitMetadata),
            (Err(ApiError::RequestTimedOut), 4, Retry),
            (Err(ApiError::UnknownServerError(String::new())), 4, Retry),
        ];
        for (a, id, expected) in cases {
            assert_eq!(
                on_alter_partition_answer(&pending, 3, 7, id, &a),
                expected,
                "{a:?} {id}"
            );
        }
        assert_eq!(
            on_alter_partition_answer(&committed(&[1]), 3, 7, 4, &answer(&[1, 2], 3, 8)),
            Ignore,
            "nothing in flight"
        );
        assert_eq!(apply_outcome(&pending, &commit), Some(committed(&[1, 2])));
        assert_eq!(apply_outcome(&pending, &Reset), Some(committed(&[1])));
        assert_eq!(apply_outcome(&pending, &AwaitMetadata), None);
    }
}
