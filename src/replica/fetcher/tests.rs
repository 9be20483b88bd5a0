//! The fetcher against a leader made of a real leading [`Partition`] on its own log, behind the
//! [`LeaderEndPoint`] trait: the leader's side of each fetch is the code the Fetch handler runs
//! (`Partition::read` with a follower's parameters, then `update_follower_fetch_state`), so
//! copying, divergence, truncation and out-of-range recovery run on real logs end to end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafkaiq_storage::batch::builder::{batch, Spec};
use kafkaiq_storage::{Log, LogConfig, TopicPartition};
use tokio::sync::watch;
use uuid::Uuid;

use super::leader::{BoxFuture, FetchPartitionSpec, LeaderEndPoint, LeaderEndPointFactory};
use super::state::{PartitionAnswer, Phase};
use super::*;
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::metadata::{
    BrokerRegistration, LeaderRecoveryState, MetadataImage, MetadataRecord, PartitionRegistration,
};
use crate::replica::decisions::FollowerFetch;
use crate::replica::fetch_params::{FetchIsolation, FetchParams};

const LEADER: i32 = 1;
const FOLLOWER: i32 = 2;
const T0: i64 = 1_700_000_000_000;

fn brokers() -> Arc<BrokerView> {
    let mut image = MetadataImage::empty("c".into(), LEADER);
    image.apply_in_place(
        &[LEADER, FOLLOWER]
            .iter()
            .map(|&id| {
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

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn partition(dir: &std::path::Path, node_id: i32, view: &Arc<BrokerView>) -> Arc<Partition> {
    partition_of(tp(), dir, node_id, view)
}

fn partition_of(
    tp: TopicPartition,
    dir: &std::path::Path,
    node_id: i32,
    view: &Arc<BrokerView>,
) -> Arc<Partition> {
    partition_of_topic(tp, 7, dir, node_id, view)
}

/// A partition of the topic incarnation `topic_id`.
fn partition_of_topic(
    tp: TopicPartition,
    topic_id: u128,
    dir: &std::path::Path,
    node_id: i32,
    view: &Arc<BrokerView>,
) -> Arc<Partition> {
    let log = Arc::new(Log::open(dir, LogConfig::default(), 0, false, 0).unwrap());
    Arc::new(Partition::new(
        tp,
        Uuid::from_u128(topic_id),
        log,
        node_id,
        0,
        1,
        30_000,
        view.clone(),
    ))
}

fn reg(leader: i32, epoch: i32, partition_epoch: i32) -> PartitionRegistration {
    PartitionRegistration {
        replicas: vec![LEADER, FOLLOWER],
        isr: vec![LEADER, FOLLOWER],
        leader,
        leader_epoch: epoch,
        partition_epoch,
        leader_recovery_state: LeaderRecoveryState::Recovered,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}

fn records(count: usize) -> Vec<u8> {
    let values: Vec<&[u8]> = (0..count).map(|_| b"value".as_slice()).collect();
    batch(&Spec::default(), &values)
}

/// A leader over real partitions; `failures` makes the next fetches fail as a whole. A fetch
/// with nothing new is parked for `park_ms` (5 ms unless set), or until it is abandoned.
#[derive(Default)]
struct FakeLeader {
    partitions: Mutex<BTreeMap<TopicPartition, Arc<Partition>>>,
    failures: AtomicUsize,
    fetches: AtomicUsize,
    park_ms: AtomicU64,
    abandoned: Arc<tokio::sync::Notify>,
    abandons: AtomicUsize,
    /// The next fetch is answered only once `release` is notified (or it is abandoned).
    hold_next: AtomicBool,
    held: AtomicUsize,
    release: Arc<tokio::sync::Notify>,
}

impl FakeLeader {
    fn with(partition: &Arc<Partition>) -> Arc<FakeLeader> {
        let leader = Arc::new(FakeLeader::default());
        leader
            .partitions
            .lock()
            .unwrap()
            .insert(partition.tp.clone(), partition.clone());
        leader
    }

    fn answer(&self, replica_epoch: i64, spec: &FetchPartitionSpec) -> PartitionAnswer {
        let Some(p) = self.partitions.lock().unwrap().get(&spec.tp).cloned() else {
            return error(ApiError::UnknownTopicOrPartition);
        };
        let params = FetchParams {
            replica_id: FOLLOWER,
            replica_epoch,
            isolation: FetchIsolation::LogEnd,
            fetch_only_leader: true,
            current_leader_epoch: Some(spec.current_leader_epoch),
            last_fetched_epoch: spec.last_fetched_epoch,
            max_bytes: 1 << 20,
            min_one_message: true,
        };
        let read = match p.read(spec.fetch_offset, &params) {
            Ok(read) => read,
            Err(e) => return error(e),
        };
        if read.diverging_epoch.is_none() {
            if let Err(e) = p.update_follower_fetch_state(
                FOLLOWER,
                &FollowerFetch {
                    fetch_offset: spec.fetch_offset,
                    log_start_offset: spec.log_start_offset,
                    fetch_time_ms: T0,
                    leader_log_end_offset: read.offsets.log_end_offset,
                    broker_epoch: replica_epoch,
                },
            ) {
                return error(e);
            }
        }
        PartitionAnswer {
            error: None,
            high_watermark: read.offsets.high_watermark,
            log_start_offset: read.offsets.log_start_offset,
            records: read.records,
            diverging_epoch: read.diverging_epoch.map(|e| (e.epoch, e.end_offset)),
        }
    }
}

fn error(e: ApiError) -> PartitionAnswer {
    PartitionAnswer {
        error: Some(e),
        high_watermark: -1,
        log_start_offset: -1,
        records: bytes::Bytes::new(),
        diverging_epoch: None,
    }
}

impl LeaderEndPoint for FakeLeader {
    fn fetch(
        &self,
        _leader: i32,
        replica_epoch: i64,
        partitions: Vec<FetchPartitionSpec>,
    ) -> BoxFuture<Result<Vec<(TopicPartition, PartitionAnswer)>, ApiError>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let failed = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let answers: Vec<(TopicPartition, PartitionAnswer)> = partitions
            .iter()
            .map(|spec| (spec.tp.clone(), self.answer(replica_epoch, spec)))
            .collect();
        let park = Duration::from_millis(match self.park_ms.load(Ordering::SeqCst) {
            0 => 5,
            ms => ms,
        });
        let abandoned = self.abandoned.clone();
        let hold = self.hold_next.swap(false, Ordering::SeqCst);
        if hold {
            self.held.fetch_add(1, Ordering::SeqCst);
        }
        let release = self.release.clone();
        Box::pin(async move {
            if hold {
                tokio::select! {
                    _ = release.notified() => {}
                    _ = abandoned.notified() => return Err(ApiError::RequestTimedOut),
                }
            }
            // A leader with nothing new parks the fetch (`replica.fetch.wait.max.ms`); closing
            // the connection ends it.
            if answers.iter().all(|(_, a)| a.records.is_empty()) {
                tokio::select! {
                    _ = tokio::time::sleep(park) => {}
                    _ = abandoned.notified() => return Err(ApiError::RequestTimedOut),
                }
            }
            if failed {
                Err(ApiError::RequestTimedOut)
            } else {
                Ok(answers)
            }
        })
    }

    fn abandon(&self, _leader: i32) {
        self.abandons.fetch_add(1, Ordering::SeqCst);
        self.abandoned.notify_waiters();
    }

    fn log_start_and_end(
        &self,
        _leader: i32,
        tp: TopicPartition,
        current_leader_epoch: i32,
    ) -> BoxFuture<Result<(i64, i64), ApiError>> {
        let p = self.partitions.lock().unwrap().get(&tp).cloned();
        Box::pin(async move {
            let p = p.ok_or(ApiError::UnknownTopicOrPartition)?;
            let (offsets, _) = p.leader_offsets(current_leader_epoch)?;
            Ok((offsets.log_start_offset, offsets.log_end_offset))
        })
    }
}

struct Harness {
    manager: ReplicaFetcherManager,
    _shutdown: watch::Sender<bool>,
}

fn fetchers(leader: Arc<FakeLeader>, view: &Arc<BrokerView>) -> Harness {
    let config = ReplicaFetcherConfig {
        backoff_ms: 20,
        ..BrokerConfig::default_single_node().replica.fetcher
    };
    let endpoints: LeaderEndPointFactory =
        Arc::new(move |_, _| leader.clone() as Arc<dyn LeaderEndPoint>);
    let manager = ReplicaFetcherManager::with_endpoints(FOLLOWER, config, view.clone(), endpoints);
    let (tx, rx) = watch::channel(false);
    manager.start(rx);
    Harness {
        manager,
        _shutdown: tx,
    }
}

fn target(partition: &Arc<Partition>, epoch: i32) -> FetchTarget {
    FetchTarget {
        tp: tp(),
        partition: partition.clone(),
        leader: LEADER,
        leader_epoch: epoch,
    }
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every batch of a log, as bytes.
fn log_bytes(p: &Partition) -> Vec<u8> {
    p.log()
        .read(p.log().log_start_offset(), usize::MAX, i64::MAX, true)
        .unwrap()
        .records
        .to_vec()
}

#[tokio::test]
async fn a_follower_copies_the_leaders_batches_and_high_watermark() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let view = brokers();
    let leader = partition(ld.path(), LEADER, &view);
    leader.make_leader(&reg(LEADER, 1, 1), T0).unwrap();
    for n in 1..=3 {
        leader.append_records_to_leader(&records(n), 1, T0).unwrap();
    }
    let follower = partition(fd.path(), FOLLOWER, &view);
    follower.make_follower(&reg(LEADER, 1, 1)).unwrap();
    let h = fetchers(FakeLeader::with(&leader), &view);
    h.manager.add_partitions(vec![target(&follower, 1)]);
    eventually("the follower has the leader's log", || {
        follower.log().log_end_offset() == 6
    })
    .await;
    assert_eq!(
        log_bytes(&follower),
        log_bytes(&leader),
        "the leader's bytes, as they are"
    );
    // The leader saw the follower reach its end: the high watermark moved, and the follower
    // takes it on its next fetch.
    eventually("the follower's high watermark follows", || {
        leader.high_watermark() == 6 && follower.high_watermark() == 6
    })
    .await;
    assert_eq!(follower.log().latest_epoch(), Some(1));
    // More writes keep flowing.
    leader
        .append_records_to_leader(&records(2), -1, T0)
        .unwrap();
    eventually("new writes arrive", || follower.high_watermark() == 8).await;
    let (_, state) = h.manager.fetch_state(&tp()).unwrap();
    assert_eq!(
        (state.fetch_offset, state.phase, state.lag),
        (8, Phase::Fetching, Some(0))
    );
    // Becoming leader stops the fetcher; an idle fetcher goes away.
    h.manager.remove_partitions(&[tp()]);
    assert!(h.manager.fetchers().is_empty());
    h.manager.shutdown().await;
}

#[tokio::test]
async fn a_diverged_follower_truncates_to_the_end_of_its_epoch_on_the_leader_then_catches_up() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let view = brokers();
    // The follower led epoch 1 and wrote offsets 0..6; only 0..3 reached the node that now
    // leads epoch 2 and wrote 3 more records there.
    let follower = partition(fd.path(), FOLLOWER, &view);
    follower
        .make_leader(
            &PartitionRegistration {
                leader: FOLLOWER,
                ..reg(FOLLOWER, 1, 1)
            },
            T0,
        )
        .unwrap();
    follower
        .append_records_to_leader(&records(3), 1, T0)
        .unwrap();
    follower
        .append_records_to_leader(&records(3), 1, T0)
        .unwrap();
    let replicated = follower.log().read(0, 1, i64::MAX, true).unwrap().records;
    let leader = partition(ld.path(), LEADER, &view);
    leader.make_follower(&reg(FOLLOWER, 1, 1)).unwrap();
    leader.append_as_follower(&replicated, 1).unwrap();
    assert_eq!(leader.log().log_end_offset(), 3);
    leader.make_leader(&reg(LEADER, 2, 2), T0).unwrap();
    leader.append_records_to_leader(&records(3), 1, T0).unwrap();

    follower.make_follower(&reg(LEADER, 2, 2)).unwrap();
    let h = fetchers(FakeLeader::with(&leader), &view);
    h.manager.add_partitions(vec![target(&follower, 2)]);
    eventually("the follower matches the leader", || {
        follower.log().log_end_offset() == 6 && follower.log().latest_epoch() == Some(2)
    })
    .await;
    assert_eq!(log_bytes(&follower), log_bytes(&leader));
    assert_eq!(follower.log().epoch_for_offset(2), Some(1));
    assert_eq!(follower.log().epoch_for_offset(3), Some(2));
    h.manager.shutdown().await;
}

#[tokio::test]
async fn out_of_range_follows_the_leaders_offsets() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let view = brokers();
    // The leader's log starts at 10 (retention moved it); the follower's is empty at 0.
    let leader = partition(ld.path(), LEADER, &view);
    leader.make_leader(&reg(LEADER, 3, 3), T0).unwrap();
    leader
        .append_records_to_leader(&records(12), 1, T0)
        .unwrap();
    leader
        .update_follower_fetch_state(
            FOLLOWER,
            &FollowerFetch {
                fetch_offset: 12,
                log_start_offset: 0,
                fetch_time_ms: T0,
                leader_log_end_offset: 12,
                broker_epoch: -1,
            },
        )
        .unwrap();
    leader.delete_records_before(10).unwrap();
    leader.append_records_to_leader(&records(1), 1, T0).unwrap();
    let follower = partition(fd.path(), FOLLOWER, &view);
    follower.make_follower(&reg(LEADER, 3, 3)).unwrap();
    // The leader's batch 0..12 straddles its start offset 10: the follower restarts at 10,
    // then takes that batch whole (its start moves to the batch's base) and what follows.
    let h = fetchers(FakeLeader::with(&leader), &view);
    h.manager.add_partitions(vec![target(&follower, 3)]);
    eventually("the follower starts where the leader's log starts", || {
        follower.log().log_end_offset() == 13 && follower.high_watermark() == 13
    })
    .await;
    // ... and then follows the leader's log start offset.
    eventually("the log start follows", || {
        follower.log().log_start_offset() == 10
    })
    .await;
    h.manager.shutdown().await;
}

#[tokio::test]
async fn a_follower_ahead_of_a_leader_that_cannot_place_its_epoch_truncates_to_the_leaders_end() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let view = brokers();
    let leader = partition(ld.path(), LEADER, &view);
    leader.make_leader(&reg(LEADER, 4, 4), T0).unwrap();
    leader.append_records_to_leader(&records(2), 1, T0).unwrap();
    // The follower holds 5 records of an epoch (7) the leader never had (an unclean history).
    let follower = partition(fd.path(), FOLLOWER, &view);
    follower.make_follower(&reg(LEADER, 4, 4)).unwrap();
    let alien = batch(
        &Spec {
            partition_leader_epoch: 7,
            ..Spec::default()
        },
        &[b"a".as_slice(); 5],
    );
    follower.append_as_follower(&alien, 4).unwrap();
    let fake = FakeLeader::with(&leader);
    let h = fetchers(fake.clone(), &view);
    h.manager.add_partitions(vec![target(&follower, 4)]);
    // OFFSET_OUT_OF_RANGE → the leader's end is 2 < 5: truncate to 2 (whole batches, so to 0
    // here), then copy the leader.
    eventually("the follower copies the leader", || {
        follower.log().log_end_offset() == 2 && follower.log().latest_epoch() == Some(4)
    })
    .await;
    assert_eq!(log_bytes(&follower), log_bytes(&leader));
    h.manager.shutdown().await;
}

#[tokio::test]
async fn failures_back_off_and_a_fenced_epoch_stops_fetching() {
    let (ld, fd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let view = brokers();
    let leader = partition(ld.path(), LEADER, &view);
    leader.make_leader(&reg(LEADER, 5, 5), T0).unwrap();
    leader.append_records_to_leader(&records(1), 1, T0).unwrap();
    let follower = partition(fd.path(), FOLLOWER, &view);
    follower.make_follower(&reg(LEADER, 5, 5)).unwrap();
    let fake = FakeLeader::with(&leader);
    fake.failures.store(3, Ordering::SeqCst);
    let h = fetchers(fake.clone(), &view);
    h.manager.add_partitions(vec![target(&follower, 5)]);
    eventually("fetching resumes after the failures", || {
        follower.log().log_end_offset() == 1
    })
    .await;
    assert!(fake.fetches.load(Ordering::SeqCst) >= 4);
    // The leader moves on to epoch 6 while this follower still fetches in 5: fenced, removed,
    // waiting for the metadata to bring the new epoch.
    leader.make_leader(&reg(LEADER, 6, 6), T0).unwrap();
    eventually("the fenced partition is dropped", || {
        h.manager.fetch_state(&tp()).is_none()
    })
    .await;
    follower.make_follower(&reg(LEADER, 6, 6)).unwrap();
    leader.append_records_to_leader(&records(1), 1, T0).unwrap();
    h.manager.add_partitions(vec![target(&follower, 6)]);
    eventually("fetching in the new epoch", || {
        follower.log().log_end_offset() == 2
    })
    .await;
    h.manager.shutdown().await;
}

#[tokio::test]
async fn partitions_hash_to_fetchers_per_leader_and_nothing_fetches_before_start() {
    let view = brokers();
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let config = ReplicaFetcherConfig {
        num_replica_fetchers: 3,
        ..BrokerConfig::default_single_node().replica.fetcher
    };
    let fake = Arc::new(FakeLeader::default());
    let endpoints: LeaderEndPointFactory = {
        let fake = fake.clone();
        Arc::new(move |_, _| fake.clone() as Arc<dyn LeaderEndPoint>)
    };
    let manager = ReplicaFetcherManager::with_endpoints(FOLLOWER, config, view.clone(), endpoints);
    let targets: Vec<FetchTarget> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let log = Arc::new(Log::open(d.path(), LogConfig::default(), 0, false, 0).unwrap());
            let p = Arc::new(Partition::new(
                TopicPartition::new("t", i as i32),
                Uuid::from_u128(7),
                log,
                FOLLOWER,
                0,
                1,
                30_000,
                view.clone(),
            ));
            FetchTarget {
                tp: p.tp.clone(),
                partition: p,
                leader: LEADER,
                leader_epoch: 0,
            }
        })
        .collect();
    manager.add_partitions(targets);
    // "t" hashes to 116: partitions 0..4 go to fetchers (3596 + i) % 3 = 2, 0, 1, 2.
    assert_eq!(
        manager.fetchers(),
        vec![(LEADER, 0), (LEADER, 1), (LEADER, 2)]
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 0, "not started");
    manager.remove_partitions(&[TopicPartition::new("t", 1)]);
    assert_eq!(manager.fetchers(), vec![(LEADER, 1), (LEADER, 2)]);
    manager.shutdown().await;
}

/// A leader moved here while this follower's fetch to it was parked: the new partition must not
/// wait out the park (`replica.fetch.wait.max.ms`) for its first fetch, or an acks=all produce
/// to the new leader would wait with it.
#[tokio::test]
async fn a_partition_added_while_a_fetch_is_parked_is_fetched_at_once() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let view = brokers();
    let (tp0, tp1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let leader0 = partition_of(tp0.clone(), dirs[0].path(), LEADER, &view);
    let leader1 = partition_of(tp1.clone(), dirs[1].path(), LEADER, &view);
    for p in [&leader0, &leader1] {
        p.make_leader(&reg(LEADER, 1, 1), T0).unwrap();
    }
    leader1
        .append_records_to_leader(&records(3), 1, T0)
        .unwrap();
    let follower0 = partition_of(tp0.clone(), dirs[2].path(), FOLLOWER, &view);
    let follower1 = partition_of(tp1.clone(), dirs[3].path(), FOLLOWER, &view);
    for p in [&follower0, &follower1] {
        p.make_follower(&reg(LEADER, 1, 1)).unwrap();
    }
    let fake = FakeLeader::with(&leader0);
    fake.partitions
        .lock()
        .unwrap()
        .insert(tp1.clone(), leader1.clone());
    // Far longer than the deadline of `eventually` below.
    fake.park_ms.store(60_000, Ordering::SeqCst);
    let h = fetchers(fake.clone(), &view);
    let to = |tp: &TopicPartition, p: &Arc<Partition>| FetchTarget {
        tp: tp.clone(),
        partition: p.clone(),
        leader: LEADER,
        leader_epoch: 1,
    };
    h.manager.add_partitions(vec![to(&tp0, &follower0)]);
    eventually("the follower's fetch of t-0 is parked", || {
        fake.fetches.load(Ordering::SeqCst) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        fake.fetches.load(Ordering::SeqCst),
        1,
        "the fetch is parked"
    );
    h.manager.add_partitions(vec![to(&tp1, &follower1)]);
    eventually("t-1 is copied without waiting out the parked fetch", || {
        follower1.log().log_end_offset() == 3
    })
    .await;
    assert_eq!(
        fake.abandons.load(Ordering::SeqCst),
        1,
        "one fetch given up"
    );
    assert_eq!(log_bytes(&follower1), log_bytes(&leader1));
    // Adding a partition the fetch in flight already asks for gives nothing up.
    h.manager.add_partitions(vec![to(&tp1, &follower1)]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(fake.abandons.load(Ordering::SeqCst), 1);
    h.manager.shutdown().await;
}

/// Records whose values are all `value`.
fn records_of(count: usize, value: &[u8]) -> Vec<u8> {
    batch(&Spec::default(), &vec![value; count])
}

/// A leader of topic incarnation `topic_id` with `first` then `second` appended in epoch 1,
/// and a follower in epoch 1 that already holds `first` (copied as it is), so it fetches at
/// the end of `first` in the Fetching phase.
fn incarnation(
    topic_id: u128,
    dirs: (&std::path::Path, &std::path::Path),
    first: &[u8],
    second: &[u8],
    view: &Arc<BrokerView>,
) -> (Arc<Partition>, Arc<Partition>) {
    let leader = partition_of_topic(tp(), topic_id, dirs.0, LEADER, view);
    leader.make_leader(&reg(LEADER, 1, 1), T0).unwrap();
    leader.append_records_to_leader(first, 1, T0).unwrap();
    let follower = partition_of_topic(tp(), topic_id, dirs.1, FOLLOWER, view);
    follower.make_follower(&reg(LEADER, 1, 1)).unwrap();
    follower.append_as_follower(&log_bytes(&leader), 1).unwrap();
    leader.append_records_to_leader(second, 1, T0).unwrap();
    (leader, follower)
}

/// A topic deleted and created again while a fetch of it was in flight. The new incarnation's
/// follower is fetching in the same leader epoch from the same offset as the old one was when
/// the old leader answered; that answer, released only then, is about the old topic id and is
/// never appended to the new topic's log (the fetch is given up and asked again of the new
/// topic).
#[tokio::test]
async fn an_answer_about_a_deleted_topic_never_reaches_the_topic_created_again() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let view = brokers();
    let (old_leader, old_follower) = incarnation(
        7,
        (dirs[0].path(), dirs[1].path()),
        &records_of(3, b"old"),
        &records_of(2, b"old"),
        &view,
    );
    let fake = FakeLeader::with(&old_leader);
    fake.hold_next.store(true, Ordering::SeqCst);
    // A second partition keeps the fetcher (and its fetch in flight) alive across the removal.
    let other = TopicPartition::new("u", 0);
    let other_dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let other_leader = partition_of(other.clone(), other_dirs.0.path(), LEADER, &view);
    other_leader.make_leader(&reg(LEADER, 1, 1), T0).unwrap();
    let other_follower = partition_of(other.clone(), other_dirs.1.path(), FOLLOWER, &view);
    other_follower.make_follower(&reg(LEADER, 1, 1)).unwrap();
    fake.partitions
        .lock()
        .unwrap()
        .insert(other.clone(), other_leader);
    let h = fetchers(fake.clone(), &view);
    h.manager.add_partitions(vec![
        target(&old_follower, 1),
        FetchTarget {
            tp: other,
            partition: other_follower,
            leader: LEADER,
            leader_epoch: 1,
        },
    ]);
    eventually("the old topic's fetch at offset 3 is held", || {
        fake.held.load(Ordering::SeqCst) == 1
    })
    .await;

    // Deleted, and created again under topic id 8 with three records of its own.
    h.manager.remove_partitions(&[tp()]);
    let (new_leader, new_follower) = incarnation(
        8,
        (dirs[2].path(), dirs[3].path()),
        &records_of(3, b"new"),
        &records_of(1, b"new"),
        &view,
    );
    fake.partitions
        .lock()
        .unwrap()
        .insert(tp(), new_leader.clone());
    h.manager.add_partitions(vec![target(&new_follower, 1)]);
    let state = h.manager.fetch_state(&tp()).unwrap().1;
    assert_eq!(
        (
            state.topic_id,
            state.phase,
            state.current_leader_epoch,
            state.fetch_offset
        ),
        (Uuid::from_u128(8), Phase::Fetching, 1, 3),
        "the new topic fetches in the epoch and from the offset the held answer was asked at"
    );
    fake.release.notify_one();

    eventually("the new follower has records past offset 3", || {
        new_follower.log().log_end_offset() > 3
    })
    .await;
    let copied = log_bytes(&new_follower);
    assert!(
        !copied.windows(3).any(|w| w == b"old"),
        "a record of the deleted topic reached the new one"
    );
    assert_eq!(
        copied,
        log_bytes(&new_leader),
        "only the new topic's records"
    );
    h.manager.shutdown().await;
}

/// A topic created again under its name and handed to the fetcher in the leader epoch the
/// deleted one was fetched in, without being removed first: the fetcher drops the old topic's
/// partition and fetches the new one.
#[tokio::test]
async fn a_topic_created_again_in_the_same_leader_epoch_replaces_the_deleted_one() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let view = brokers();
    let (old_leader, old_follower) = incarnation(
        7,
        (dirs[0].path(), dirs[1].path()),
        &records_of(1, b"old"),
        &records_of(1, b"old"),
        &view,
    );
    let fake = FakeLeader::with(&old_leader);
    let h = fetchers(fake.clone(), &view);
    h.manager.add_partitions(vec![target(&old_follower, 1)]);
    eventually("the old topic is copied", || {
        old_follower.log().log_end_offset() == 2
    })
    .await;

    let (new_leader, new_follower) = incarnation(
        8,
        (dirs[2].path(), dirs[3].path()),
        &records_of(1, b"new"),
        &records_of(2, b"new"),
        &view,
    );
    fake.partitions
        .lock()
        .unwrap()
        .insert(tp(), new_leader.clone());
    h.manager.add_partitions(vec![target(&new_follower, 1)]);
    eventually("the new topic is copied", || {
        new_follower.log().log_end_offset() == 3
    })
    .await;
    assert_eq!(log_bytes(&new_follower), log_bytes(&new_leader));
    assert_eq!(
        h.manager.fetch_state(&tp()).unwrap().1.topic_id,
        Uuid::from_u128(8)
    );
    h.manager.shutdown().await;
}

/// KIP-73 on the follower: a throttled partition that is not caught up is left out of the
/// fetcher's requests while the follower quota is exceeded; one in sync is always fetched.
#[tokio::test]
async fn a_throttled_follower_waits_while_its_quota_is_exceeded_unless_in_sync() {
    use crate::clock::SystemClock;
    use crate::config::QuotaWindow;
    use crate::replica::quota::{ReplicationQuota, Throttled};

    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let view = brokers();
    let other = TopicPartition::new("u", 0);
    let leader = partition(dirs[0].path(), LEADER, &view);
    let leader_other = partition_of(other.clone(), dirs[1].path(), LEADER, &view);
    for p in [&leader, &leader_other] {
        p.make_leader(&reg(LEADER, 1, 1), T0).unwrap();
        p.append_records_to_leader(&records(3), 1, T0).unwrap();
    }
    let follower = partition(dirs[2].path(), FOLLOWER, &view);
    let follower_other = partition_of(other.clone(), dirs[3].path(), FOLLOWER, &view);
    for p in [&follower, &follower_other] {
        p.make_follower(&reg(LEADER, 1, 1)).unwrap();
    }
    let fake = FakeLeader::with(&leader);
    fake.partitions
        .lock()
        .unwrap()
        .insert(other.clone(), leader_other.clone());
    let h = fetchers(fake.clone(), &view);
    let window = QuotaWindow {
        samples: 11,
        window_ms: 1_000,
    };
    let quota = Arc::new(ReplicationQuota::new(window, Arc::new(SystemClock)));
    quota.mark_throttled("t", Some(Throttled::All));
    quota.set_bound(1);
    quota.record(1_000);
    h.manager.set_quota(quota.clone());
    h.manager.add_partitions(vec![
        target(&follower, 1),
        FetchTarget {
            tp: other.clone(),
            ..target(&follower_other, 1)
        },
    ]);
    // The unthrottled partition is copied and fetched again and again meanwhile.
    eventually("the unthrottled partition is copied", || {
        follower_other.log().log_end_offset() == 3
    })
    .await;
    let fetches = fake.fetches.load(Ordering::SeqCst);
    eventually("several more fetches", || {
        fake.fetches.load(Ordering::SeqCst) >= fetches + 5
    })
    .await;
    assert_eq!(follower.log().log_end_offset(), 0, "throttled: not fetched");
    // A higher rate lets it through, and its bytes count against the quota.
    quota.set_bound(i64::MAX);
    eventually("the throttled partition catches up", || {
        h.manager
            .fetch_state(&tp())
            .is_some_and(|(_, s)| s.fetch_offset == 3 && s.lag == Some(0))
    })
    .await;
    quota.set_bound(1);
    assert!(quota.is_exceeded());
    // In sync: fetched although the quota is exceeded.
    leader
        .append_records_to_leader(&records(2), -1, T0)
        .unwrap();
    eventually("an in-sync replica keeps up", || {
        follower.log().log_end_offset() == 5
    })
    .await;
    h.manager.shutdown().await;
}
