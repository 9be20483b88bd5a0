//! Pure leadership decisions: high watermark, ISR membership, leader-epoch fencing.
//!
//! Each function is a function of state and `now` only, with no I/O and no locks, so the rules
//! can be checked against tables of cases taken from Kafka's behaviour
//! (`reference/leadership-semantics.md`, sections 2-5). Callers (`Partition`) gather the state,
//! call these, and apply the result.

use crate::errors::ApiError;

/// `min(min.insync.replicas, replication factor)` (Kafka's `Partition#effectiveMinIsr`).
pub fn effective_min_isr(min_insync_replicas: i32, replication_factor: usize) -> usize {
    (min_insync_replicas.max(1) as usize).min(replication_factor.max(1))
}

/// What the leader knows about one remote replica when computing the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteReplica {
    pub log_end_offset: i64,
    /// In the maximal ISR (committed ISR plus members of a pending expansion), or caught up and
    /// about to join: either way the high watermark waits for it.
    pub counts_for_high_watermark: bool,
}

/// The leader's new high watermark (Kafka's `maybeIncrementLeaderHW`, with KAFKA-15583):
/// the minimum LEO over the leader and every counted remote replica, never below the current
/// value, never above the leader's LEO, and unchanged while the ISR is below the effective
/// min ISR.
pub fn leader_high_watermark(
    current_high_watermark: i64,
    leader_log_end_offset: i64,
    remotes: &[RemoteReplica],
    isr_size: usize,
    effective_min_isr: usize,
) -> i64 {
    if isr_size < effective_min_isr {
        return current_high_watermark;
    }
    let candidate = remotes
        .iter()
        .filter(|r| r.counts_for_high_watermark)
        .map(|r| r.log_end_offset)
        .fold(leader_log_end_offset, i64::min);
    candidate.max(current_high_watermark)
}

/// A follower's high watermark: the leader's, clamped to what the follower holds.
pub fn follower_high_watermark(
    leader_high_watermark: i64,
    log_start_offset: i64,
    log_end_offset: i64,
) -> i64 {
    leader_high_watermark.clamp(log_start_offset, log_end_offset.max(log_start_offset))
}

/// Kafka's `Replica#isCaughtUp`.
pub fn is_caught_up(
    leader_log_end_offset: i64,
    follower_log_end_offset: i64,
    last_caught_up_ms: i64,
    now_ms: i64,
    replica_lag_time_max_ms: i64,
) -> bool {
    leader_log_end_offset == follower_log_end_offset
        || now_ms - last_caught_up_ms <= replica_lag_time_max_ms
}

/// Kafka's `Replica#updateFetchStateOrThrow` rule for `lastCaughtUpTimeMs`.
pub fn next_last_caught_up_ms(
    previous_last_caught_up_ms: i64,
    fetch_offset: i64,
    leader_log_end_offset_now: i64,
    fetch_time_ms: i64,
    leader_log_end_offset_at_previous_fetch: i64,
    previous_fetch_time_ms: i64,
) -> i64 {
    if fetch_offset >= leader_log_end_offset_now {
        previous_last_caught_up_ms.max(fetch_time_ms)
    } else if fetch_offset >= leader_log_end_offset_at_previous_fetch {
        previous_last_caught_up_ms.max(previous_fetch_time_ms)
    } else {
        previous_last_caught_up_ms
    }
}

/// Kafka's `Partition#checkCurrentLeaderEpoch` for Fetch, ListOffsets and
/// OffsetForLeaderEpoch: -1 skips the check.
pub fn check_current_leader_epoch(local_epoch: i32, requested_epoch: i32) -> Result<(), ApiError> {
    if requested_epoch == -1 || requested_epoch == local_epoch {
        Ok(())
    } else if requested_epoch < local_epoch {
        Err(ApiError::FencedLeaderEpoch)
    } else {
        Err(ApiError::UnknownLeaderEpoch)
    }
}

/// The acks=all outcome once the high watermark has reached the batch (Kafka's
/// `checkEnoughReplicasReachOffset`): written and acknowledged, or written but the ISR shrank
/// below min ISR meanwhile.
pub fn acks_all_outcome(
    high_watermark: i64,
    required_offset: i64,
    maximal_isr_size: usize,
    effective_min_isr: usize,
) -> Option<Result<(), ApiError>> {
    if high_watermark < required_offset {
        None
    } else if maximal_isr_size >= effective_min_isr {
        Some(Ok(()))
    } else {
        Some(Err(ApiError::NotEnoughReplicasAfterAppend))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(leo: i64, counts: bool) -> RemoteReplica {
        RemoteReplica {
            log_end_offset: leo,
            counts_for_high_watermark: counts,
        }
    }

    #[test]
    fn high_watermark_table() {
        // (current hw, leader leo, remotes, isr size, effective min isr) -> new hw
        let cases: Vec<(i64, i64, Vec<RemoteReplica>, usize, usize, i64)> = vec![
            // Single replica: HW follows the leader's LEO.
            (0, 10, vec![], 1, 1, 10),
            // Slowest ISR member bounds the HW.
            (0, 10, vec![r(7, true), r(9, true)], 3, 2, 7),
            // Out-of-sync replicas do not hold the HW back.
            (0, 10, vec![r(2, false), r(9, true)], 2, 2, 9),
            // The HW never goes backwards, even if a counted replica is behind it.
            (8, 10, vec![r(5, true)], 2, 1, 8),
            // Below min ISR the HW does not advance (KAFKA-15583), even for acks=1 writes.
            (3, 10, vec![], 1, 2, 3),
            // Exactly at min ISR it advances.
            (3, 10, vec![r(10, true)], 2, 2, 10),
        ];
        for (hw, leo, remotes, isr, min_isr, expected) in cases {
            assert_eq!(
                leader_high_watermark(hw, leo, &remotes, isr, min_isr),
                expected,
                "hw={hw} leo={leo} remotes={remotes:?} isr={isr} min={min_isr}"
            );
        }
    }

    #[test]
    fn effective_min_isr_is_capped_by_replication_factor() {
        assert_eq!(effective_min_isr(2, 1), 1);
        assert_eq!(effective_min_isr(2, 3), 2);
        assert_eq!(effective_min_isr(1, 3), 1);
    }

    #[test]
    fn follower_high_watermark_is_clamped() {
        assert_eq!(follower_high_watermark(100, 0, 40), 40);
        assert_eq!(follower_high_watermark(10, 20, 40), 20);
        assert_eq!(follower_high_watermark(30, 0, 40), 30);
    }

    #[test]
    fn caught_up_table() {
        // (leader leo, follower leo, last caught up, now, lag max) -> caught up
        let cases = [
            (10, 10, 0, 100_000, 30_000, true),
            (10, 9, 80_000, 100_000, 30_000, true),
            (10, 9, 70_000, 100_000, 30_000, true),
            (10, 9, 69_999, 100_000, 30_000, false),
        ];
        for (leader, follower, last, now, lag, expected) in cases {
            assert_eq!(is_caught_up(leader, follower, last, now, lag), expected);
        }
    }

    #[test]
    fn last_caught_up_table() {
        // fetch at the current LEO: caught up now.
        assert_eq!(next_last_caught_up_ms(5, 10, 10, 100, 8, 90), 100);
        // behind the current LEO but at the LEO of the previous fetch: caught up then.
        assert_eq!(next_last_caught_up_ms(5, 8, 10, 100, 8, 90), 90);
        // behind both: unchanged.
        assert_eq!(next_last_caught_up_ms(5, 7, 10, 100, 8, 90), 5);
        // never moves backwards.
        assert_eq!(next_last_caught_up_ms(200, 10, 10, 100, 8, 90), 200);
    }

    #[test]
    fn leader_epoch_fencing_table() {
        assert_eq!(check_current_leader_epoch(3, -1), Ok(()));
        assert_eq!(check_current_leader_epoch(3, 3), Ok(()));
        assert_eq!(
            check_current_leader_epoch(3, 2),
            Err(ApiError::FencedLeaderEpoch)
        );
        assert_eq!(
            check_current_leader_epoch(3, 4),
            Err(ApiError::UnknownLeaderEpoch)
        );
    }

    #[test]
    fn acks_all_table() {
        assert_eq!(acks_all_outcome(5, 6, 1, 1), None);
        assert_eq!(acks_all_outcome(6, 6, 1, 1), Some(Ok(())));
        assert_eq!(
            acks_all_outcome(6, 6, 1, 2),
            Some(Err(ApiError::NotEnoughReplicasAfterAppend))
        );
    }
}
