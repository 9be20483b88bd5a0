//! The shapes a partition has as leader of several replicas and as follower, driven directly:
//! follower fetches, ISR changes and their answers, the follower paths a fetcher calls.

use kafkaiq_storage::batch::builder::{batch, simple, Spec};
use kafkaiq_storage::LogConfig;

use super::*;
use crate::replica::fetch_params::{FetchIsolation, CONSUMER_REPLICA_ID};
use crate::replica::isr::{AlterPartitionOutcome, CommittedPartition};

const ME: i32 = 1;
const LAG_MS: i64 = 30_000;
/// A realistic wall clock, so that "caught up at time 0" is long ago.
const T0: i64 = 1_700_000_000_000;

/// Brokers 1-4 registered and unfenced, broker n at broker epoch 100 + n.
fn brokers() -> Arc<BrokerView> {
    use crate::metadata::{BrokerRegistration, MetadataImage, MetadataRecord};
    let mut image = MetadataImage::empty("c".into(), ME);
    image.apply_in_place(
        &(1..=4)
            .map(|id| {
                MetadataRecord::RegisterBroker(BrokerRegistration {
                    broker_epoch: 100 + i64::from(id),
                    fenced: false,
                    ..BrokerRegistration::new(id, Uuid::from_u128(id as u128), None)
                })
            })
            .collect::<Vec<_>>(),
    );
    let view = Arc::new(BrokerView::default());
    view.update(&image);
    view
}

fn partition(dir: &std::path::Path, min_isr: i32) -> Partition {
    partition_with(dir, min_isr, brokers())
}

fn partition_with(dir: &std::path::Path, min_isr: i32, brokers: Arc<BrokerView>) -> Partition {
    let log = Arc::new(Log::open(dir, LogConfig::default(), 0, false, 0).unwrap());
    Partition::new(
        TopicPartition::new("t", 0),
        Uuid::from_u128(1),
        log,
        ME,
        0,
        min_isr,
        LAG_MS,
        brokers,
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
    fetched_at_epoch(replica_id, p, offset, now_ms, -1)
        .unwrap()
        .high_watermark_moved
}

fn fetched_at_epoch(
    replica_id: i32,
    p: &Partition,
    offset: i64,
    now_ms: i64,
    broker_epoch: i64,
) -> Result<FollowerFetchResult, ApiError> {
    p.update_follower_fetch_state(
        replica_id,
        &FollowerFetch {
            fetch_offset: offset,
            log_start_offset: 0,
            fetch_time_ms: now_ms,
            leader_log_end_offset: p.log().log_end_offset(),
            broker_epoch,
        },
    )
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

    // Replica 3 catches up: in sync, so it is proposed for the ISR and the high watermark
    // waits for it as a member of the maximal ISR.
    assert!(!fetched(3, &p, 3, T0 + 20));
    let proposal = p.pending_isr_proposal().unwrap();
    assert_eq!(proposal.isr(), vec![1, 2, 3]);
    assert_eq!(p.state().maximal_isr(), vec![1, 2, 3]);
    // The controller refuses it: back to the committed ISR. Replica 3 is still caught up and
    // eligible, so the high watermark keeps waiting for it rather than running away from it.
    assert_eq!(
        p.on_alter_partition_answer(proposal.id, &Err(ApiError::IneligibleReplica), T0 + 25),
        AlterPartitionOutcome::Reset
    );
    assert_eq!(p.state().maximal_isr(), vec![1, 2]);
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
    assert!(state.isr().is_empty() && state.remote_replicas.is_empty());
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
    let info = p.append_as_follower(&records, 4).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 4));
    // Offsets and epochs are the leader's.
    assert_eq!(p.log().epoch_for_offset(1), Some(3));
    assert_eq!(p.log().epoch_for_offset(3), Some(4));
    // Offsets that go back are refused (a gap, a compacted leader's, would be kept).
    assert!(matches!(
        p.append_as_follower(&leader_batch(3, 4, 1), 4),
        Err(ApiError::UnknownServerError(_))
    ));
    // A fetcher of another leader epoch writes nothing.
    assert_eq!(
        p.append_as_follower(&leader_batch(5, 4, 1), 3),
        Err(ApiError::FencedLeaderEpoch)
    );
    assert_eq!(p.truncate_to(0, 5), Err(ApiError::FencedLeaderEpoch));

    // The high watermark is the leader's, clamped to what this log holds.
    assert!(p.update_follower_high_watermark(100, 4).unwrap());
    assert_eq!(p.high_watermark(), 5);
    assert!(p.update_follower_high_watermark(3, 4).unwrap());
    assert_eq!(p.high_watermark(), 3);
    assert!(!p.update_follower_high_watermark(3, 4).unwrap());
    p.update_follower_high_watermark(5, 4).unwrap();

    // Truncation (a diverged log) takes the high watermark down with the log end offset.
    p.truncate_to(2, 4).unwrap();
    assert_eq!((p.log().log_end_offset(), p.high_watermark()), (2, 2));
    assert_eq!(p.log().latest_epoch(), Some(3));
    p.truncate_fully_and_start_at(10, 4).unwrap();
    assert_eq!(
        (
            p.log().log_start_offset(),
            p.log().log_end_offset(),
            p.high_watermark()
        ),
        (10, 10, 10)
    );

    // The leader's log start moved inside a batch: an empty follower log restarts at it.
    let info = p.append_as_follower(&leader_batch(8, 4, 4), 4).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (8, 11));
    assert_eq!(
        (p.log().log_start_offset(), p.log().log_end_offset()),
        (8, 12)
    );
    // The leader's log start offset is followed, up to the high watermark.
    p.update_follower_high_watermark(12, 4).unwrap();
    p.maybe_increment_follower_log_start_offset(20, 4).unwrap();
    assert_eq!(p.log().log_start_offset(), 8);
    p.maybe_increment_follower_log_start_offset(11, 4).unwrap();
    assert_eq!(p.log().log_start_offset(), 11);

    // Becoming leader registers the new epoch at the log end before any write.
    p.make_leader(&reg(&[2, 1], &[1], ME, (5, 5)), T0).unwrap();
    assert_eq!(p.state().leader_epoch_start_offset, Some(12));
    assert_eq!(p.log().end_offset_for_epoch(4).end_offset, 12);
    assert_eq!(p.log().latest_epoch(), Some(5));
    // A leader takes no follower writes.
    assert_eq!(
        p.append_as_follower(&leader_batch(12, 5, 1), 5),
        Err(ApiError::NotLeaderOrFollower)
    );
    assert_eq!(p.truncate_to(0, 5), Err(ApiError::NotLeaderOrFollower));
    assert_eq!(
        p.update_follower_high_watermark(12, 5),
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
    let start = p.log().position_of(0).unwrap();
    // High watermark 1, log end 2: a consumer sees one batch, a follower two.
    let size = one.len() as u64;
    assert_eq!(p.bytes_available(0, &start, &consumer(100)), Some(size));
    assert_eq!(
        p.bytes_available(0, &start, &follower(2, Some(0))),
        Some(2 * size)
    );
    // Answer now: an unassigned "follower", a fetch offset past the end, a new leader epoch.
    assert_eq!(p.bytes_available(0, &start, &follower(3, None)), None);
    let tail = p.log().position_of(2).unwrap();
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

fn committed(
    isr: &[i32],
    leader_epoch: i32,
    partition_epoch: i32,
) -> Result<CommittedPartition, ApiError> {
    Ok(CommittedPartition {
        leader_id: ME,
        leader_epoch,
        isr: isr.to_vec(),
        leader_recovery_state: LeaderRecoveryState::Recovered,
        partition_epoch,
    })
}

#[test]
fn a_follower_that_catches_up_is_proposed_and_committed_into_the_isr() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 2);
    // Replicas [1, 2, 3], ISR [1, 2], min ISR 2.
    p.make_leader(&reg(&[1, 2, 3], &[1, 2], ME, (3, 7)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(4, 10, 0), -1, T0)
        .unwrap();
    assert!(fetched(2, &p, 4, T0 + 1));
    assert_eq!(p.high_watermark(), 4);
    // Replica 3 is behind the high watermark: not in sync, no proposal.
    let r = fetched_at_epoch(3, &p, 2, T0 + 2, 103).unwrap();
    assert_eq!(r.expand, None);
    // Caught up: proposed, with the broker epochs each member fetched with (ours from the
    // image, 2's unknown since it sent -1).
    let r = fetched_at_epoch(3, &p, 4, T0 + 3, 103).unwrap();
    let proposal = r.expand.unwrap();
    assert_eq!((proposal.leader_epoch, proposal.partition_epoch), (3, 7));
    assert_eq!(proposal.isr_with_epochs, vec![(1, 101), (2, -1), (3, 103)]);
    // Nothing else is proposed while it is in flight; the shrink check finds nothing either.
    assert_eq!(
        fetched_at_epoch(3, &p, 4, T0 + 4, 103).unwrap().expand,
        None
    );
    assert_eq!(p.maybe_shrink_isr(T0 + 10 * LAG_MS), None);
    // The high watermark waits for the joining replica.
    p.append_records_to_leader(&simple(1, 10, 0), 1, T0 + 5)
        .unwrap();
    fetched(2, &p, 5, T0 + 6);
    assert_eq!(p.high_watermark(), 4);
    // An answer to another proposal changes nothing; the real one commits, partition epoch 8.
    assert_eq!(
        p.on_alter_partition_answer(proposal.id + 100, &committed(&[1, 2, 3], 3, 8), T0 + 7),
        AlterPartitionOutcome::Ignore
    );
    assert!(matches!(
        p.on_alter_partition_answer(proposal.id, &committed(&[1, 2, 3], 3, 8), T0 + 7),
        AlterPartitionOutcome::Commit(_, 8)
    ));
    let state = p.state();
    assert_eq!((state.isr(), state.partition_epoch), (&[1, 2, 3][..], 8));
    assert!(!state.isr_state.is_inflight());
    // The image then brings the same registration: nothing moves backwards.
    p.make_leader(&reg(&[1, 2, 3], &[1, 2, 3], ME, (3, 8)), T0 + 8)
        .unwrap();
    assert_eq!(p.state().isr(), &[1, 2, 3]);
}

#[test]
fn a_lagging_follower_is_shrunk_out_but_counted_until_the_controller_commits() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2, 3], &[1, 2, 3], ME, (0, 0)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(2, 10, 0), -1, T0)
        .unwrap();
    fetched(2, &p, 2, T0 + 1);
    fetched(3, &p, 2, T0 + 1);
    assert_eq!(p.high_watermark(), 2);
    // Replica 3 stops fetching; 2 keeps up.
    p.append_records_to_leader(&simple(2, 10, 0), -1, T0 + 2)
        .unwrap();
    fetched(2, &p, 4, T0 + 3);
    assert_eq!(
        p.maybe_shrink_isr(T0 + 1 + LAG_MS),
        None,
        "not yet past the lag"
    );
    let proposal = p.maybe_shrink_isr(T0 + 2 + LAG_MS).unwrap();
    assert_eq!(proposal.isr(), vec![1, 2]);
    // Pending: the maximal ISR still holds 3, so the high watermark waits for it.
    assert_eq!(p.state().maximal_isr(), vec![1, 2, 3]);
    assert_eq!(p.high_watermark(), 2);
    // A retryable failure keeps it pending; a stale partition epoch waits for metadata.
    assert_eq!(
        p.on_alter_partition_answer(
            proposal.id,
            &Err(ApiError::RequestTimedOut),
            T0 + 3 + LAG_MS
        ),
        AlterPartitionOutcome::Retry
    );
    assert_eq!(p.pending_isr_proposal(), Some(proposal.clone()));
    // Committed: 3 no longer counts, the high watermark moves to what 1 and 2 have, and a
    // parked acks=all produce for it completes.
    assert!(matches!(
        p.on_alter_partition_answer(proposal.id, &committed(&[1, 2], 0, 1), T0 + 4 + LAG_MS),
        AlterPartitionOutcome::Commit(_, 1)
    ));
    assert_eq!(p.high_watermark(), 4);
    assert_eq!(p.acks_all_outcome(4), Some(Ok(())));
    let status = p.replication_status();
    assert!(status.under_replicated && !status.under_min_isr && !status.offline);
}

#[test]
fn an_invalid_update_version_waits_for_the_metadata_then_proposes_again() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2], &[1], ME, (2, 5)), T0).unwrap();
    let proposal = fetched_at_epoch(2, &p, 0, T0, 102).unwrap().expand.unwrap();
    assert_eq!(
        p.on_alter_partition_answer(proposal.id, &Err(ApiError::InvalidUpdateVersion), T0),
        AlterPartitionOutcome::AwaitMetadata
    );
    // Still pending: nothing new is proposed until the image catches up.
    assert!(p.state().isr_state.is_inflight());
    assert_eq!(
        fetched_at_epoch(2, &p, 0, T0 + 1, 102).unwrap().expand,
        None
    );
    // The image brings partition epoch 6 (someone else's change): committed state again, and
    // the next fetch proposes on top of it.
    p.make_leader(&reg(&[1, 2], &[1], ME, (2, 6)), T0 + 2)
        .unwrap();
    assert!(!p.state().isr_state.is_inflight());
    assert_eq!(
        p.on_alter_partition_answer(proposal.id, &committed(&[1, 2], 2, 6), T0 + 3),
        AlterPartitionOutcome::Ignore,
        "the old answer is for a state that is gone"
    );
    let again = fetched_at_epoch(2, &p, 0, T0 + 4, 102)
        .unwrap()
        .expand
        .unwrap();
    assert_eq!(again.partition_epoch, 6);
}

#[test]
fn kip_841_fences_fetches_from_an_older_broker_epoch_and_ineligible_replicas_never_join() {
    use crate::metadata::{BrokerRegistration, MetadataImage, MetadataRecord};
    let dir = tempfile::tempdir().unwrap();
    let view = brokers();
    let p = partition_with(dir.path(), 1, view.clone());
    p.make_leader(&reg(&[1, 2, 3], &[1], ME, (0, 0)), T0)
        .unwrap();
    // Broker 2 restarted at epoch 102; a fetch still carrying 90 is refused.
    assert_eq!(
        fetched_at_epoch(2, &p, 0, T0, 90),
        Err(ApiError::NotLeaderOrFollower)
    );
    // A newer epoch than the image knows is not stale: accepted (the image lags).
    assert!(fetched_at_epoch(2, &p, 0, T0, 150).is_ok());
    // ... but it does not match the registration, so it cannot join the ISR yet.
    assert!(p.pending_isr_proposal().is_none());
    // Broker 3 is fenced: caught up, never proposed, and not waited for.
    let mut image = MetadataImage::empty("c".into(), ME);
    image.apply_in_place(&[
        MetadataRecord::RegisterBroker(BrokerRegistration {
            broker_epoch: 101,
            fenced: false,
            ..BrokerRegistration::new(1, Uuid::from_u128(1), None)
        }),
        MetadataRecord::RegisterBroker(BrokerRegistration {
            broker_epoch: 150,
            fenced: false,
            ..BrokerRegistration::new(2, Uuid::from_u128(2), None)
        }),
        MetadataRecord::RegisterBroker(BrokerRegistration {
            broker_epoch: 103,
            fenced: true,
            ..BrokerRegistration::new(3, Uuid::from_u128(3), None)
        }),
    ]);
    view.update(&image);
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0)
        .unwrap();
    // Caught up, but fenced: never proposed.
    assert_eq!(fetched_at_epoch(3, &p, 2, T0, 103).unwrap().expand, None);
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0)
        .unwrap();
    // Broker 2 at its registered epoch now: it joins, and the high watermark moves to what 1
    // and 2 hold without waiting for the fenced replica.
    assert!(fetched_at_epoch(2, &p, 4, T0, 150)
        .unwrap()
        .expand
        .is_some());
    assert_eq!(p.high_watermark(), 4);
}

#[test]
fn acks_all_answers_by_the_maximal_isr_and_by_the_epoch_it_was_written_in() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 2);
    p.make_leader(&reg(&[1, 2, 3], &[1, 2, 3], ME, (0, 0)), T0)
        .unwrap();
    let (info, epoch) = p
        .append_records_to_leader_in_epoch(
            &simple(2, 10, 0),
            -1,
            T0,
            kafkaiq_storage::TxnVerification::Unchecked,
        )
        .unwrap();
    assert_eq!((info.last_offset, epoch), (1, 0));
    assert_eq!(p.acks_all_outcome_in_epoch(2, 0), None);
    fetched(2, &p, 2, T0);
    fetched(3, &p, 2, T0);
    assert_eq!(p.acks_all_outcome_in_epoch(2, 0), Some(Ok(())));
    // Lost and regained leadership meanwhile: the records may be gone.
    p.make_follower(&reg(&[1, 2, 3], &[2, 3], 2, (1, 1)))
        .unwrap();
    p.make_leader(&reg(&[1, 2, 3], &[1, 2, 3], ME, (2, 2)), T0)
        .unwrap();
    assert_eq!(
        p.acks_all_outcome_in_epoch(2, 0),
        Some(Err(ApiError::NotLeaderOrFollower))
    );
    // The ISR shrank below min ISR after the append: written, but not enough replicas.
    p.make_leader(&reg(&[1, 2, 3], &[1], ME, (2, 3)), T0)
        .unwrap();
    assert_eq!(
        p.acks_all_outcome_in_epoch(2, 2),
        Some(Err(ApiError::NotEnoughReplicasAfterAppend))
    );
    assert_eq!(
        p.append_records_to_leader(&simple(1, 10, 0), -1, T0),
        Err(ApiError::NotEnoughReplicas)
    );
    let status = p.replication_status();
    assert!(status.under_min_isr && status.under_replicated);
}

#[test]
fn a_new_leaders_read_of_an_unknown_epoch_is_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2], &[1, 2], ME, (3, 3)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0)
        .unwrap();
    let with_epoch = |last_fetched_epoch| FetchParams {
        last_fetched_epoch: Some(last_fetched_epoch),
        ..follower(2, Some(3))
    };
    // An epoch newer than any here: OFFSET_OUT_OF_RANGE (Kafka), not DivergingEpoch(-1, -1).
    assert_eq!(
        p.read(2, &with_epoch(9)).unwrap_err(),
        ApiError::OffsetOutOfRange
    );
    // An epoch older than any here: it ends where this log's epochs start (0).
    let read = p.read(0, &with_epoch(1)).unwrap();
    assert_eq!(
        (read.diverging_epoch, batches(&read.records)),
        (None, vec![(0, 1)])
    );
    // ... so a follower holding offsets of it past 0 diverged: truncate to 0.
    let read = p.read(1, &with_epoch(1)).unwrap();
    assert_eq!(
        read.diverging_epoch,
        Some(EpochEndOffset {
            epoch: 1,
            end_offset: 0
        })
    );
    assert!(read.records.is_empty());
    // The current epoch up to the log end: no divergence, nothing to read yet.
    let read = p.read(2, &with_epoch(3)).unwrap();
    assert_eq!((read.diverging_epoch, read.records.len()), (None, 0));
}

#[test]
fn idempotent_producer_state_is_rebuilt_from_the_leaders_batches_on_a_follower() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_follower(&reg(&[2, 1], &[2, 1], 2, (4, 4))).unwrap();
    let producer_batch = |base_offset, epoch, base_sequence, count| {
        let value = [b'p'; 8];
        let values: Vec<&[u8]> = (0..count).map(|_| value.as_slice()).collect();
        batch(
            &Spec {
                base_offset,
                partition_leader_epoch: epoch,
                producer_id: 7,
                producer_epoch: 0,
                base_sequence,
                ..Spec::default()
            },
            &values,
        )
    };
    // The old leader wrote sequences 0-2 and 3-4; this replica copied them.
    let mut copied = producer_batch(0, 4, 0, 3);
    copied.extend_from_slice(&producer_batch(3, 4, 3, 2));
    p.append_as_follower(&copied, 4).unwrap();

    // Elected: the producer retries its last batch, whose answer it never saw.
    p.make_leader(&reg(&[2, 1], &[1], ME, (5, 5)), T0).unwrap();
    let retry = producer_batch(0, -1, 3, 2);
    let info = p.append_records_to_leader(&retry, -1, T0).unwrap();
    assert!(info.duplicate, "a retry of a copied batch is a duplicate");
    assert_eq!(
        info.first_offset, 3,
        "answered with the offset it was written at"
    );
    assert_eq!(
        p.log().log_end_offset(),
        5,
        "nothing appended for the retry"
    );
    // A gap after the copied sequences is out of order, as it would be on the old leader.
    assert!(matches!(
        p.append_records_to_leader(&producer_batch(0, -1, 6, 1), -1, T0),
        Err(ApiError::OutOfOrderSequenceNumber(_))
    ));
    // The next sequence continues the log.
    let next = p
        .append_records_to_leader(&producer_batch(0, -1, 5, 1), -1, T0)
        .unwrap();
    assert_eq!((next.first_offset, next.duplicate), (5, false));
}

/// KIP-392 on a follower, as the Fetch handler drives it: a consumer reads up to the
/// follower's own high watermark; between it and the log end the read is empty and a parked
/// fetch has no bytes until the high watermark covers them (decision 4: wait, not an error);
/// past the log end it is OFFSET_OUT_OF_RANGE (the Java client goes back to the leader); the
/// reader's leader epoch is checked as on a leader.
#[test]
fn a_follower_serves_consumers_up_to_its_high_watermark_with_epoch_fencing() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_follower(&reg(&[2, 1], &[2, 1], 2, (4, 4))).unwrap();
    let leader_batch = |base_offset, count| {
        let value = [b'v'; 8];
        let values: Vec<&[u8]> = (0..count).map(|_| value.as_slice()).collect();
        batch(
            &Spec {
                base_offset,
                partition_leader_epoch: 4,
                ..Spec::default()
            },
            &values,
        )
    };
    p.append_as_follower(&leader_batch(0, 3), 4).unwrap();
    p.append_as_follower(&leader_batch(3, 3), 4).unwrap();
    p.update_follower_high_watermark(3, 4).unwrap();
    let at_epoch = |epoch| FetchParams {
        current_leader_epoch: Some(epoch),
        ..consumer(1 << 20)
    };

    // Up to the high watermark, never past it.
    let read = p.read(0, &at_epoch(4)).unwrap();
    assert_eq!(batches(&read.records), vec![(0, 2)]);
    assert!(!read.as_leader);
    assert_eq!(
        (read.offsets.high_watermark, read.offsets.log_end_offset),
        (3, 6)
    );
    // Between the high watermark and the log end: empty, and a parked fetch waits.
    for offset in [3, 4, 6] {
        let read = p.read(offset, &at_epoch(4)).unwrap();
        assert!(read.records.is_empty(), "offset {offset}");
    }
    let start = p.log().position_of(4).unwrap();
    assert_eq!(p.bytes_available(4, &start, &at_epoch(4)), Some(0));
    // The leader's high watermark arrives: the parked fetch has bytes to read.
    p.update_follower_high_watermark(6, 4).unwrap();
    assert!(p.bytes_available(4, &start, &at_epoch(4)).unwrap() > 0);
    assert_eq!(
        batches(&p.read(4, &at_epoch(4)).unwrap().records),
        vec![(3, 5)]
    );
    // Past the log end.
    assert_eq!(
        p.read(7, &at_epoch(4)).unwrap_err(),
        ApiError::OffsetOutOfRange
    );
    // Leader-epoch fencing, as on the leader.
    assert_eq!(
        p.read(0, &at_epoch(3)).unwrap_err(),
        ApiError::FencedLeaderEpoch
    );
    assert_eq!(
        p.read(0, &at_epoch(5)).unwrap_err(),
        ApiError::UnknownLeaderEpoch
    );
    // A follower never picks a read replica.
    assert!(p.leader_read_view(Some(4)).unwrap().is_none());
    assert_eq!(
        p.leader_read_view(Some(3)).unwrap_err(),
        ApiError::FencedLeaderEpoch
    );
}

/// A follower's fetch parked at the leader is answered as soon as the high watermark passes
/// the one its last answer carried, so followers serving consumers learn it in one round trip.
#[test]
fn a_parked_follower_fetch_is_answered_when_the_high_watermark_moves() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition(dir.path(), 1);
    p.make_leader(&reg(&[1, 2, 3], &[1, 2, 3], ME, (0, 0)), T0)
        .unwrap();
    p.append_records_to_leader(&simple(2, 10, 0), 1, T0)
        .unwrap();
    // Follower 2 reads everything (the answer carries high watermark 0) and fetches at 2.
    assert_eq!(
        p.read(0, &follower(2, Some(0)))
            .unwrap()
            .offsets
            .high_watermark,
        0
    );
    fetched(2, &p, 2, T0);
    let start = p.log().position_of(2).unwrap();
    assert_eq!(
        p.read(2, &follower(2, Some(0)))
            .unwrap()
            .offsets
            .high_watermark,
        0
    );
    // Parked: nothing new for it, the high watermark still waits for follower 3.
    assert_eq!(p.bytes_available(2, &start, &follower(2, Some(0))), Some(0));
    // Follower 3 catches up: the high watermark moves to 2, and 2's parked fetch is answered.
    fetched(3, &p, 2, T0);
    assert_eq!(p.high_watermark(), 2);
    assert_eq!(p.bytes_available(2, &start, &follower(2, Some(0))), None);
    // Once the answer carried it, the next fetch waits again.
    assert_eq!(
        p.read(2, &follower(2, Some(0)))
            .unwrap()
            .offsets
            .high_watermark,
        2
    );
    assert_eq!(p.bytes_available(2, &start, &follower(2, Some(0))), Some(0));

    // The leader's view for a preferred read replica: its ISR and the followers' states.
    let view = p.leader_read_view(Some(0)).unwrap().unwrap();
    assert_eq!(view.isr, vec![1, 2, 3]);
    assert_eq!(
        view.followers
            .iter()
            .map(|(id, r)| (*id, r.log_end_offset))
            .collect::<Vec<_>>(),
        vec![(2, 2), (3, 2)]
    );
    assert_eq!(view.offsets.high_watermark, 2);
}

/// A move to another log dir: copy steps of one batch, a follower truncation in the middle
/// (mirrored, so the future log never keeps batches the current log dropped), the swap once
/// caught up (the partition reads and writes the new log, in the other dir, with its high
/// watermark), and a cancelled future log answered as abandoned.
#[test]
fn a_move_to_another_log_dir_copies_mirrors_truncations_and_swaps_once_caught_up() {
    use kafkaiq_storage::LogManager;
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("d1"), root.path().join("d2")];
    let manager = Arc::new(LogManager::open(&dirs, LogConfig::default(), 0).unwrap());
    let tp = TopicPartition::new("t", 0);
    let log = manager.get_or_create(&tp, LogConfig::default(), 0).unwrap();
    let p = Partition::new(
        tp.clone(),
        Uuid::from_u128(1),
        log,
        ME,
        0,
        1,
        LAG_MS,
        brokers(),
    );
    p.make_follower(&reg(&[2, 1], &[2, 1], 2, (4, 4))).unwrap();
    let leader_batch = |base_offset, epoch, count, byte| {
        let value = [byte; 8];
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
    p.append_as_follower(&leader_batch(0, 3, 2, b'a'), 4)
        .unwrap();
    p.append_as_follower(&leader_batch(2, 4, 3, b'b'), 4)
        .unwrap();
    p.update_follower_high_watermark(5, 4).unwrap();

    let future = manager
        .create_future(&tp, 1, LogConfig::default(), 0, 0)
        .unwrap();
    p.set_future_log(Some(future.clone()));
    let step = |p: &Partition| {
        p.copy_to_future(&future, 1, |hw| {
            manager.replace_current_with_future(&tp, hw, 0)
        })
        .unwrap()
    };
    assert!(matches!(step(&p), FutureCopy::Copied { lag: 3, .. }));
    assert!(matches!(step(&p), FutureCopy::Copied { lag: 0, .. }));
    // The leader's log diverged at 2: both logs lose what follows.
    p.truncate_to(2, 4).unwrap();
    assert_eq!(future.log_end_offset(), 2);
    let replacement = leader_batch(2, 4, 1, b'c');
    p.append_as_follower(&replacement, 4).unwrap();
    p.update_follower_high_watermark(3, 4).unwrap();
    assert!(matches!(step(&p), FutureCopy::Copied { lag: 0, .. }));
    assert_eq!(step(&p), FutureCopy::Replaced);

    assert_eq!(p.log().dir(), dirs[1].join("t-0"));
    assert!(p.future_log().is_none() && manager.future(&tp).is_none());
    assert_eq!(p.log().log_end_offset(), 3);
    assert_eq!(p.high_watermark(), 3);
    assert_eq!(
        p.log().read(2, 1 << 20, i64::MAX, true).unwrap().records,
        replacement
    );
    assert_eq!(p.log().epoch_for_offset(1), Some(3));
    p.append_as_follower(&leader_batch(3, 4, 1, b'd'), 4)
        .unwrap();
    assert_eq!(manager.get(&tp).unwrap().log_end_offset(), 4);

    // A future log the partition no longer has (cancelled) is not copied into.
    let other = manager
        .create_future(&tp, 0, LogConfig::default(), 0, 0)
        .unwrap();
    assert_eq!(
        p.copy_to_future(&other, 1, |_| unreachable!("no swap")),
        Ok(FutureCopy::Abandoned)
    );
    assert_eq!(other.log_end_offset(), 0);
}

/// An acks=all produce parked in the purgatory is answered when the follower's fetch moves the
/// high watermark, not at a tick or at its time-out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_acks_all_wait_ends_when_the_high_watermark_moves() {
    use crate::replica::purgatory::Purgatory;
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(partition(dir.path(), 1));
    assert!(p
        .make_leader(&reg(&[1, 2], &[1, 2], ME, (0, 0)), T0)
        .unwrap());
    let (info, epoch) = p
        .append_records_to_leader_in_epoch(
            &simple(3, 10, 0),
            -1,
            T0,
            kafkaiq_storage::TxnVerification::Unchecked,
        )
        .unwrap();
    let end = info.last_offset + 1;
    assert!(p.acks_all_outcome_in_epoch(end, epoch).is_none());
    let follower = p.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(fetched(2, &follower, end, T0 + 10));
    });
    let purgatory = Purgatory::default();
    let started = std::time::Instant::now();
    let done = purgatory
        .wait_until(
            std::slice::from_ref(&p),
            std::time::Duration::from_secs(30),
            || {
                let done = p.acks_all_outcome_in_epoch(end, epoch).is_some();
                async move { done.then_some(()) }
            },
        )
        .await;
    assert_eq!(done, Some(()));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "woken {:?} after the append",
        started.elapsed()
    );
    assert_eq!(purgatory.parked(), 0);
}

/// A restarted node given a stale registration (leader epoch 2 after its log saw epoch 3)
/// refuses to lead at it: the epoch cache keeps its entries, and a current registration is
/// taken afterwards.
#[test]
fn leading_at_an_epoch_below_the_logs_latest_is_refused_and_leaves_the_epoch_cache() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let p = partition(dir.path(), 1);
        p.make_leader(&reg(&[1], &[1], ME, (2, 2)), T0).unwrap();
        p.append_records_to_leader(&simple(5, 5, 0), 1, T0).unwrap();
        p.make_leader(&reg(&[1], &[1], ME, (3, 3)), T0).unwrap();
        p.append_records_to_leader(&simple(5, 5, 0), 1, T0).unwrap();
        p.log().epoch_entries()
    };
    assert_eq!(before, vec![(2, 0), (3, 5)]);
    // The same log, opened again as after a restart.
    let p = partition(dir.path(), 1);
    assert!(!p.make_leader(&reg(&[1], &[1], ME, (2, 2)), T0).unwrap());
    assert_eq!(p.log().epoch_entries(), before);
    assert_ne!(p.state().role, Role::Leader);
    assert!(p.make_leader(&reg(&[1], &[1], ME, (4, 4)), T0).unwrap());
    assert_eq!(p.log().epoch_entries(), vec![(2, 0), (3, 5), (4, 10)]);
}
