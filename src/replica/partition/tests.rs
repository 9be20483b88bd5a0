//! The shapes a partition has as leader of several replicas and as follower, driven directly
//! (no fetcher exists yet, so these are the only callers of the follower paths).

use kafkaiq_storage::batch::builder::{batch, simple, Spec};
use kafkaiq_storage::LogConfig;

use super::*;
use crate::replica::fetch_params::{FetchIsolation, CONSUMER_REPLICA_ID};

const ME: i32 = 1;
const LAG_MS: i64 = 30_000;
/// A realistic wall clock, so that "caught up at time 0" is long ago.
const T0: i64 = 1_700_000_000_000;

fn partition(dir: &std::path::Path, min_isr: i32) -> Partition {
    let log = Arc::new(Log::open(dir, LogConfig::default(), 0, false, 0).unwrap());
    Partition::new(
        TopicPartition::new("t", 0),
        Uuid::from_u128(1),
        log,
        ME,
        0,
        min_isr,
        LAG_MS,
    )
}

fn reg(replicas: &[i32], isr: &[i32], leader: i32, epochs: (i32, i32)) -> PartitionRegistration {
    PartitionRegistration {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: epochs.0,
        partition_epoch: epochs.1,
        leader_recovery_state: Default::default(),
        adding_replicas: vec![],
        removing_replicas: vec![],
    }
}

fn consumer(max_bytes: usize) -> FetchParams {
    FetchParams {
        fetch_only_leader: false,
        ..FetchParams::leader_committed(max_bytes)
    }
}

fn follower(replica_id: i32, leader_epoch: Option<i32>) -> FetchParams {
    FetchParams {
        replica_id,
        replica_epoch: -1,
        isolation: FetchIsolation::LogEnd,
        fetch_only_leader: true,
        current_leader_epoch: leader_epoch,
        last_fetched_epoch: None,
        max_bytes: 1 << 20,
        min_one_message: true,
    }
}

fn fetched(replica_id: i32, p: &Partition, offset: i64, now_ms: i64) -> bool {
    p.update_follower_fetch_state(
        replica_id,
        &FollowerFetch {
            fetch_offset: offset,
            log_start_offset: 0,
            fetch_time_ms: now_ms,
            leader_log_end_offset: p.log.log_end_offset(),
            broker_epoch: -1,
        },
    )
    .unwrap()
}

/// (first offset, last offset) of each batch.
fn batches(records: &[u8]) -> Vec<(i64, i64)> {
    kafkaiq_storage::batch::BatchIter::new(records)
        .map(|(_, h)| (h.base_offset, h.last_offset()))
        .collect()
}

#[test]
fn leader_high_watermark_waits_for_the_maximal_isr_and_for_replicas_about_to_join() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    // Replicas 1 (us), 2 (in the ISR) and 3 (out of it).
    assert!(p
        .make_leader(&reg(&[1, 2, 3], &[1, 2], ME, (0, 0)), T0)
        .unwrap());
    assert_eq!(p.remote_replica(ME), None);
    assert_eq!(
        p.remote_replica(2),
        Some(ReplicaState {
            last_fetch_leader_log_end_offset: -1,
            last_caught_up_time_ms: T0,
            ..ReplicaState::UNKNOWN
        })
    );
    assert_eq!(p.remote_replica(3).unwrap().last_caught_up_time_ms, 0);

    // The ISR member has not fetched: the high watermark waits for it.
    p.append_records_to_leader(&simple(3, 10, 0), 1, T0)
        .unwrap();
    assert_eq!(p.high_watermark(), 0);
    assert!(fetched(2, &p, 3, T0 + 10));
    assert_eq!(p.high_watermark(), 3);
    assert_eq!(p.remote_replica(2).unwrap().last_caught_up_time_ms, T0 + 10);

    // Replica 3 catches up: not in the ISR, but caught up and eligible, so from now on the
    // high watermark waits for it too rather than running away from it.
    assert!(!fetched(3, &p, 3, T0 + 20));
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0 + 30)
        .unwrap();
    assert!(!fetched(2, &p, 5, T0 + 40));
    assert_eq!(p.high_watermark(), 3);
    // A fetch that does not move the replica's log end offset recomputes nothing, as in Kafka.
    assert!(!fetched(2, &p, 5, T0 + 20 + LAG_MS + 1));
    // Once replica 3 has lagged for longer than replica.lag.time.max.ms it no longer counts:
    // the next append moves the high watermark to replica 2's log end offset.
    p.append_records_to_leader(&simple(1, 10, 0), 1, T0 + 20 + LAG_MS + 1)
        .unwrap();
    assert_eq!(p.high_watermark(), 5);

    // A follower's fetch reads to the log end offset; a consumer's to the high watermark.
    let read = p.read(0, &follower(2, Some(0))).unwrap();
    assert_eq!(batches(&read.records), vec![(0, 2), (3, 4), (5, 5)]);
    let read = p.read(0, &consumer(1 << 20)).unwrap();
    assert_eq!(batches(&read.records), vec![(0, 2), (3, 4)]);
    assert_eq!(
        (read.offsets.high_watermark, read.offsets.log_end_offset),
        (5, 6)
    );
}

#[test]
fn a_fetch_from_an_unassigned_replica_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2], &[1, 2], ME, (3, 3)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0)
        .unwrap();
    assert!(p.read(0, &follower(2, Some(3))).is_ok());
    // Not assigned (4), or this node itself: refused, with the error depending on whether the
    // request carried a leader epoch.
    for id in [4, ME] {
        assert_eq!(
            p.read(0, &follower(id, Some(3))).unwrap_err(),
            ApiError::UnknownLeaderEpoch
        );
        assert_eq!(
            p.read(0, &follower(id, None)).unwrap_err(),
            ApiError::NotLeaderOrFollower
        );
    }
    // Epoch fencing is checked first.
    assert_eq!(
        p.read(0, &follower(4, Some(2))).unwrap_err(),
        ApiError::FencedLeaderEpoch
    );
    assert_eq!(
        p.update_follower_fetch_state(
            4,
            &FollowerFetch {
                fetch_offset: 0,
                log_start_offset: 0,
                fetch_time_ms: T0,
                leader_log_end_offset: 2,
                broker_epoch: -1,
            }
        ),
        Err(ApiError::NotLeaderOrFollower)
    );
    // A replica removed by a reassignment is forgotten, and then refused.
    p.make_leader(&reg(&[1, 4], &[1], ME, (3, 4)), T0).unwrap();
    assert_eq!(p.remote_replica(2), None);
    assert!(p.read(0, &follower(4, Some(3))).is_ok());
    assert_eq!(
        p.read(0, &follower(2, None)).unwrap_err(),
        ApiError::NotLeaderOrFollower
    );
}

#[test]
fn a_follower_refuses_produce_and_leader_only_reads() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2], &[1, 2], ME, (0, 0)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0)
        .unwrap();
    fetched(2, &p, 2, T0);
    assert_eq!(p.high_watermark(), 2);

    // Leadership moves to replica 2.
    assert!(p.make_follower(&reg(&[1, 2], &[1, 2], 2, (1, 1))).unwrap());
    let state = p.state();
    assert_eq!(
        (state.role, state.leader, state.leader_epoch),
        (Role::Follower, 2, 1)
    );
    assert!(state.isr.is_empty() && state.remote_replicas.is_empty());
    assert_eq!(state.leader_epoch_start_offset, None);
    assert_eq!(
        p.append_records_to_leader(&simple(1, 10, 0), 1, T0),
        Err(ApiError::NotLeaderOrFollower)
    );
    assert_eq!(
        p.acks_all_outcome(2),
        Some(Err(ApiError::NotLeaderOrFollower))
    );
    assert_eq!(
        p.read(0, &FetchParams::leader_committed(1 << 20))
            .unwrap_err(),
        ApiError::NotLeaderOrFollower
    );
    assert_eq!(
        p.read(0, &follower(2, None)).unwrap_err(),
        ApiError::NotLeaderOrFollower
    );
    assert_eq!(
        p.check_leader_and_epoch(-1, true),
        Err(ApiError::NotLeaderOrFollower)
    );
    // A consumer that may read from followers (Fetch v11+) reads up to the high watermark.
    let read = p.read(0, &consumer(1 << 20)).unwrap();
    assert_eq!(batches(&read.records), vec![(0, 1)]);
    // A consumer of another id is still a consumer.
    assert_eq!(
        p.read(
            0,
            &FetchParams {
                replica_id: CONSUMER_REPLICA_ID - 1,
                ..consumer(1 << 20)
            }
        )
        .unwrap()
        .records
        .len(),
        read.records.len()
    );
    // The same leader epoch again is no restart for a fetcher.
    assert!(!p.make_follower(&reg(&[1, 2], &[1], 2, (1, 2))).unwrap());
}

#[test]
fn a_follower_appends_the_leaders_batches_as_they_are_and_truncates() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_follower(&reg(&[2, 1], &[2, 1], 2, (4, 4))).unwrap();
    let leader_batch = |base_offset, epoch, count| {
        let value = [b'v'; 8];
        let values: Vec<&[u8]> = (0..count).map(|_| value.as_slice()).collect();
        batch(
            &Spec {
                base_offset,
                partition_leader_epoch: epoch,
                ..Spec::default()
            },
            &values,
        )
    };
    let mut records = leader_batch(0, 3, 2);
    records.extend_from_slice(&leader_batch(2, 4, 3));
    let info = p.append_as_follower(&records).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 4));
    // Offsets and epochs are the leader's.
    assert_eq!(p.log.epoch_for_offset(1), Some(3));
    assert_eq!(p.log.epoch_for_offset(3), Some(4));
    assert!(matches!(
        p.append_as_follower(&leader_batch(7, 4, 1)),
        Err(ApiError::UnknownServerError(_))
    ));

    // The high watermark is the leader's, clamped to what this log holds.
    assert!(p.update_follower_high_watermark(100).unwrap());
    assert_eq!(p.high_watermark(), 5);
    assert!(p.update_follower_high_watermark(3).unwrap());
    assert_eq!(p.high_watermark(), 3);
    assert!(!p.update_follower_high_watermark(3).unwrap());
    p.update_follower_high_watermark(5).unwrap();

    // Truncation (a diverged log) takes the high watermark down with the log end offset.
    p.truncate_to(2).unwrap();
    assert_eq!((p.log.log_end_offset(), p.high_watermark()), (2, 2));
    assert_eq!(p.log.latest_epoch(), Some(3));
    p.truncate_fully_and_start_at(10).unwrap();
    assert_eq!(
        (
            p.log.log_start_offset(),
            p.log.log_end_offset(),
            p.high_watermark()
        ),
        (10, 10, 10)
    );

    // The leader's log start moved inside a batch: an empty follower log restarts at it.
    let info = p.append_as_follower(&leader_batch(8, 4, 4)).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (8, 11));
    assert_eq!((p.log.log_start_offset(), p.log.log_end_offset()), (8, 12));

    // Becoming leader registers the new epoch at the log end before any write.
    p.make_leader(&reg(&[2, 1], &[1], ME, (5, 5)), T0).unwrap();
    assert_eq!(p.state().leader_epoch_start_offset, Some(12));
    assert_eq!(p.log.end_offset_for_epoch(4).end_offset, 12);
    assert_eq!(p.log.latest_epoch(), Some(5));
    // A leader takes no follower writes.
    assert_eq!(
        p.append_as_follower(&leader_batch(12, 5, 1)),
        Err(ApiError::NotLeaderOrFollower)
    );
    assert_eq!(p.truncate_to(0), Err(ApiError::NotLeaderOrFollower));
    assert_eq!(
        p.update_follower_high_watermark(12),
        Err(ApiError::NotLeaderOrFollower)
    );
}

#[test]
fn leader_transitions_reset_replicas_and_skip_stale_registrations() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2], &[1, 2], ME, (0, 0)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(4, 10, 0), 1, T0)
        .unwrap();
    fetched(2, &p, 4, T0 + 5);
    let known = p.remote_replica(2).unwrap();
    assert_eq!(known.log_end_offset, 4);

    // An ISR change under the same leader epoch keeps what is known of the replica.
    assert!(!p
        .make_leader(&reg(&[1, 2], &[1], ME, (0, 1)), T0 + 10)
        .unwrap());
    assert_eq!(p.remote_replica(2), Some(known));
    // Re-elected with a new epoch: offsets kept, timers reset (out of the ISR now).
    p.make_leader(&reg(&[1, 2], &[1], ME, (1, 2)), T0 + 20)
        .unwrap();
    let reset = p.remote_replica(2).unwrap();
    assert_eq!(
        (
            reset.log_end_offset,
            reset.last_caught_up_time_ms,
            reset.last_fetch_leader_log_end_offset
        ),
        (4, 0, 4)
    );
    assert_eq!(p.state().leader_epoch_start_offset, Some(4));
    // A registration older than the one applied is skipped.
    assert!(!p.make_follower(&reg(&[1, 2], &[2], 2, (2, 1))).unwrap());
    assert_eq!(p.state().role, Role::Leader);

    // Stopped (deleted or moved away): parked produces learn it at once.
    p.stop();
    assert_eq!(
        p.acks_all_outcome(4),
        Some(Err(ApiError::NotLeaderOrFollower))
    );
    assert_eq!(p.state().leader, -1);
}

#[test]
#[should_panic(expected = "leader epoch of t-0 went backwards")]
fn a_leader_epoch_never_goes_backwards() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1], &[1], ME, (5, 5)), T0).unwrap();
    p.make_leader(&reg(&[1], &[1], ME, (4, 6)), T0).unwrap();
}

#[test]
fn below_min_isr_the_high_watermark_stays_and_acks_all_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 2);
    p.make_leader(&reg(&[1, 2], &[1], ME, (0, 0)), T0).unwrap();
    assert_eq!(
        p.append_records_to_leader(&simple(1, 10, 0), -1, T0),
        Err(ApiError::NotEnoughReplicas)
    );
    p.append_records_to_leader(&simple(1, 10, 0), 1, T0)
        .unwrap();
    // Replica 2 is caught up but the ISR is below min.insync.replicas (KAFKA-15583).
    fetched(2, &p, 1, T0);
    assert_eq!(p.high_watermark(), 0);
}

#[test]
fn bytes_available_counts_up_to_the_reads_bound_and_ends_the_wait_on_changes() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2], &[1, 2], ME, (0, 0)), T0)
        .unwrap();
    let one = simple(1, 10, 0);
    p.append_records_to_leader(&one, 1, T0).unwrap();
    fetched(2, &p, 1, T0);
    p.append_records_to_leader(&one, 1, T0).unwrap();
    let start = p.log.position_of(0).unwrap();
    // High watermark 1, log end 2: a consumer sees one batch, a follower two.
    let size = one.len() as u64;
    assert_eq!(p.bytes_available(0, &start, &consumer(100)), Some(size));
    assert_eq!(
        p.bytes_available(0, &start, &follower(2, Some(0))),
        Some(2 * size)
    );
    // Answer now: an unassigned "follower", a fetch offset past the end, a new leader epoch.
    assert_eq!(p.bytes_available(0, &start, &follower(3, None)), None);
    let tail = p.log.position_of(2).unwrap();
    assert_eq!(p.bytes_available(2, &tail, &consumer(100)), Some(0));
    assert_eq!(p.bytes_available(3, &tail, &consumer(100)), None);
    let fenced = FetchParams {
        current_leader_epoch: Some(0),
        ..consumer(100)
    };
    assert_eq!(p.bytes_available(0, &start, &fenced), Some(size));
    p.make_leader(&reg(&[1, 2], &[1, 2], ME, (1, 1)), T0)
        .unwrap();
    assert_eq!(p.bytes_available(0, &start, &fenced), None);
}
