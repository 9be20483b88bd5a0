//! What a fetcher knows of each partition it fetches, and the pure rules that move it (Kafka's
//! `PartitionFetchState` and the decisions of `AbstractFetcherThread`): where fetching starts,
//! what a partition's answer in a fetch response means, where to truncate a diverged log, and
//! what to do when the leader says the fetch offset is out of range. Table tested below; the
//! fetcher task applies the results to the [`super::super::Partition`].

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::errors::ApiError;

/// A partition's phase (Kafka's `ReplicaState`: `Fetching`, `Truncating`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Fetching from `fetch_offset`, with `last_fetched_epoch` so the leader can tell whether
    /// this log diverged from its own (Fetch v12+).
    Fetching,
    /// This log has no leader epochs to compare: it truncates to its high watermark first
    /// (Kafka's path for partitions without epochs), then fetches from there.
    Truncating,
}

/// One partition of a fetcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFetchState {
    pub topic_id: Uuid,
    pub fetch_offset: i64,
    /// The leader's high watermark minus this log's end, as of the last answer.
    pub lag: Option<i64>,
    /// The leader epoch this fetcher fetches in; an answer is applied only in this epoch.
    pub current_leader_epoch: i32,
    /// Set after an error: not fetched before then (`replica.fetch.backoff.ms`).
    pub delayed_until: Option<Instant>,
    pub phase: Phase,
    pub last_fetched_epoch: Option<i32>,
}

impl PartitionFetchState {
    /// Kafka's `partitionFetchState` for a partition added to a fetcher: a log with leader
    /// epochs fetches from its log end offset with its latest epoch; one without truncates to
    /// its high watermark first.
    pub fn initial(
        topic_id: Uuid,
        leader_epoch: i32,
        log_end_offset: i64,
        high_watermark: i64,
        latest_epoch: Option<i32>,
    ) -> PartitionFetchState {
        let (fetch_offset, phase) = match latest_epoch {
            Some(_) => (log_end_offset, Phase::Fetching),
            None => (high_watermark, Phase::Truncating),
        };
        PartitionFetchState {
            topic_id,
            fetch_offset,
            lag: None,
            current_leader_epoch: leader_epoch,
            delayed_until: None,
            phase,
            last_fetched_epoch: latest_epoch,
        }
    }

    /// Fetching and not delayed (Kafka's `isReadyForFetch`).
    pub fn is_ready_for_fetch(&self, now: Instant) -> bool {
        self.phase == Phase::Fetching && self.delayed_until.is_none_or(|at| at <= now)
    }

    pub fn is_delayed(&self, now: Instant) -> bool {
        self.delayed_until.is_some_and(|at| at > now)
    }

    /// Kafka's `delayPartitions`: the state, not fetched for `backoff`.
    pub fn delayed(&self, now: Instant, backoff: Duration) -> PartitionFetchState {
        PartitionFetchState {
            delayed_until: Some(now + backoff),
            ..self.clone()
        }
    }

    /// Fetching again from `offset` with `last_fetched_epoch` (after an append or a truncation).
    pub fn fetching_at(&self, offset: i64, last_fetched_epoch: Option<i32>) -> PartitionFetchState {
        PartitionFetchState {
            fetch_offset: offset,
            delayed_until: None,
            phase: Phase::Fetching,
            last_fetched_epoch,
            ..self.clone()
        }
    }
}

/// One partition of a fetch response, as the fetcher reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionAnswer {
    pub error: Option<ApiError>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: bytes::Bytes,
    /// The leader's end of our last fetched epoch, when this log diverged from its own.
    pub diverging_epoch: Option<(i32, i64)>,
}

/// What an answer asks of the fetcher (Kafka's `processFetchRequest`, by error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerAction {
    /// Append the records (if any), take the leader's high watermark and log start offset.
    Append,
    /// Truncate to where the leader says our last fetched epoch ends, then fetch again.
    Truncate { epoch: i32, end_offset: i64 },
    /// The leader does not have our fetch offset: ask its offsets and start where they say.
    ResetOffset,
    /// Our leader epoch is stale (FENCED_LEADER_EPOCH): stop fetching this partition until the
    /// metadata brings the new epoch, which adds it again.
    Remove,
    /// Try again after `replica.fetch.backoff.ms`: the leader moved or is not there yet
    /// (NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION, ...), or any
    /// other error.
    Backoff,
}

pub fn answer_action(answer: &PartitionAnswer) -> AnswerAction {
    match &answer.error {
        None => match answer.diverging_epoch {
            Some((epoch, end_offset)) => AnswerAction::Truncate { epoch, end_offset },
            None => AnswerAction::Append,
        },
        Some(ApiError::OffsetOutOfRange) => AnswerAction::ResetOffset,
        Some(ApiError::FencedLeaderEpoch) => AnswerAction::Remove,
        Some(_) => AnswerAction::Backoff,
    }
}

/// Kafka's `OffsetTruncationState`: where to truncate, and whether that settles it (otherwise
/// the follower truncated to an intermediate point and the next fetch, with its new latest
/// epoch, asks again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncation {
    pub offset: i64,
    pub completed: bool,
}

/// Kafka's `getOffsetTruncationState`, for the leader's `(epoch, end_offset)` of our last
/// fetched epoch (§6):
/// - an undefined end offset: truncate to the current fetch offset;
/// - an undefined epoch (a leader without epochs): to `min(leader end, LEO)`;
/// - our own end of the leader's epoch, `follower_end_for_epoch` (`None` when this log cannot
///   place that epoch): if we know the epoch, to `min(our end, leader end, LEO)`, done; if our
///   floor epoch is older, to `min(our end, LEO)` and ask again; if we know nothing of it, to
///   `min(leader end, LEO)`.
pub fn truncation_offset(
    leader_epoch: i32,
    leader_end_offset: i64,
    follower_end_for_epoch: Option<(i32, i64)>,
    log_end_offset: i64,
    fetch_offset: i64,
) -> Truncation {
    if leader_end_offset == -1 {
        return Truncation {
            offset: fetch_offset,
            completed: true,
        };
    }
    if leader_epoch == -1 {
        return Truncation {
            offset: leader_end_offset.min(log_end_offset),
            completed: true,
        };
    }
    match follower_end_for_epoch {
        Some((epoch, end)) if epoch != leader_epoch => Truncation {
            offset: end.min(log_end_offset),
            completed: false,
        },
        Some((_, end)) => Truncation {
            offset: end.min(leader_end_offset).min(log_end_offset),
            completed: true,
        },
        None => Truncation {
            offset: leader_end_offset.min(log_end_offset),
            completed: true,
        },
    }
}

/// What a follower does after OFFSET_OUT_OF_RANGE, once it knows the leader's log start and
/// end offsets (Kafka's `fetchOffsetAndTruncate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfRangePlan {
    /// The leader ends before us (an unclean election): truncate to its end, fetch from there.
    TruncateTo(i64),
    /// The leader no longer has our end (retention moved its start past it): start again,
    /// empty, at its log start offset.
    StartAt(i64),
    /// Our end is within the leader's log: fetch from it.
    FetchFrom(i64),
}

pub fn out_of_range_plan(
    log_end_offset: i64,
    leader_log_start_offset: i64,
    leader_log_end_offset: i64,
) -> OutOfRangePlan {
    if leader_log_end_offset < log_end_offset {
        OutOfRangePlan::TruncateTo(leader_log_end_offset)
    } else if leader_log_start_offset > log_end_offset {
        OutOfRangePlan::StartAt(leader_log_start_offset)
    } else {
        OutOfRangePlan::FetchFrom(log_end_offset)
    }
}

/// Kafka's `AbstractFetcherManager#getFetcherId`: `abs(31 * topic.hashCode + partition) %
/// num.replica.fetchers`, with Java's `String.hashCode`, so a partition goes to the same
/// fetcher as on Kafka.
pub fn fetcher_id(topic: &str, partition: i32, num_fetchers: usize) -> usize {
    let hash = topic
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let mixed = hash.wrapping_mul(31).wrapping_add(partition);
    // Kafka's `Utils.abs` maps i32::MIN to 0.
    let abs = if mixed == i32::MIN { 0 } else { mixed.abs() };
    abs as usize % num_fetchers.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_state_depends_on_whether_the_log_has_epochs() {
        let with = PartitionFetchState::initial(Uuid::nil(), 5, 40, 30, Some(4));
        assert_eq!(
            (with.fetch_offset, with.phase, with.last_fetched_epoch),
            (40, Phase::Fetching, Some(4))
        );
        let without = PartitionFetchState::initial(Uuid::nil(), 5, 40, 30, None);
        assert_eq!(
            (without.fetch_offset, without.phase),
            (30, Phase::Truncating)
        );
        let now = Instant::now();
        assert!(with.is_ready_for_fetch(now));
        assert!(!without.is_ready_for_fetch(now));
        let delayed = with.delayed(now, Duration::from_millis(1000));
        assert!(!delayed.is_ready_for_fetch(now));
        assert!(delayed.is_ready_for_fetch(now + Duration::from_millis(1000)));
        assert!(delayed.fetching_at(41, Some(5)).is_ready_for_fetch(now));
    }

    fn answer(error: Option<ApiError>, diverging: Option<(i32, i64)>) -> PartitionAnswer {
        PartitionAnswer {
            error,
            high_watermark: 10,
            log_start_offset: 0,
            records: bytes::Bytes::new(),
            diverging_epoch: diverging,
        }
    }

    #[test]
    fn answer_action_table() {
        use AnswerAction::*;
        let cases = [
            (answer(None, None), Append),
            (
                answer(None, Some((3, 12))),
                Truncate {
                    epoch: 3,
                    end_offset: 12,
                },
            ),
            (answer(Some(ApiError::OffsetOutOfRange), None), ResetOffset),
            (answer(Some(ApiError::FencedLeaderEpoch), None), Remove),
            (answer(Some(ApiError::UnknownLeaderEpoch), None), Backoff),
            (answer(Some(ApiError::NotLeaderOrFollower), None), Backoff),
            (
                answer(Some(ApiError::UnknownTopicOrPartition), None),
                Backoff,
            ),
            (answer(Some(ApiError::UnknownTopicId), None), Backoff),
            (
                answer(Some(ApiError::KafkaStorageError(String::new())), None),
                Backoff,
            ),
            (
                answer(Some(ApiError::UnknownServerError(String::new())), None),
                Backoff,
            ),
        ];
        for (a, expected) in cases {
            assert_eq!(answer_action(&a), expected, "{a:?}");
        }
    }

    #[test]
    fn truncation_point_table() {
        // (leader epoch, leader end, follower's end for that epoch, follower LEO, fetch offset)
        // -> (offset, completed)
        let cases = [
            // We know the leader's epoch: the smaller of the two ends, done.
            (5, 100, Some((5, 120)), 130, 130, (100, true)),
            (5, 100, Some((5, 90)), 130, 130, (90, true)),
            // Never past our own end.
            (5, 200, Some((5, 150)), 130, 130, (130, true)),
            // Our floor of that epoch is older: truncate to our end of it and ask again.
            (5, 100, Some((3, 80)), 130, 130, (80, false)),
            // We cannot place the epoch at all: the leader's end.
            (5, 100, None, 130, 130, (100, true)),
            (5, 100, None, 60, 60, (60, true)),
            // A leader without epochs, and an undefined end.
            (-1, 100, None, 130, 130, (100, true)),
            (5, -1, Some((5, 120)), 130, 125, (125, true)),
        ];
        for (epoch, end, ours, leo, fetch, (offset, completed)) in cases {
            assert_eq!(
                truncation_offset(epoch, end, ours, leo, fetch),
                Truncation { offset, completed },
                "{epoch} {end} {ours:?} {leo} {fetch}"
            );
        }
    }

    #[test]
    fn out_of_range_table() {
        use OutOfRangePlan::*;
        // (our LEO, leader log start, leader log end) -> plan
        let cases = [
            (100, 0, 80, TruncateTo(80)),
            (100, 150, 200, StartAt(150)),
            (100, 50, 200, FetchFrom(100)),
            (100, 100, 100, FetchFrom(100)),
        ];
        for (leo, start, end, expected) in cases {
            assert_eq!(out_of_range_plan(leo, start, end), expected);
        }
    }

    #[test]
    fn fetcher_ids_are_kafkas() {
        // Java: Math.abs(31 * "t".hashCode() + 0) % 3 == (31 * 116) % 3 == 3596 % 3 == 2.
        assert_eq!(fetcher_id("t", 0, 3), 2);
        assert_eq!(fetcher_id("t", 1, 3), 0);
        assert_eq!(fetcher_id("anything", 7, 1), 0);
        // "polygenelubricants".hashCode() is i32::MIN; times 31 plus 0 wraps to i32::MIN again.
        assert_eq!(fetcher_id("polygenelubricants", 0, 5), 0);
    }
}
