//! The fetch rules of [`ReplicaManager::fetch_messages`] on real logs in a temporary directory:
//! parking below `min_bytes` and waking on an append or at `max_wait_ms`, the bound each
//! isolation reads to, `max_bytes` with the first-batch rule, and a follower's diverging epoch.
//! Time is tokio's paused clock, so waits are exact and nothing sleeps.

use std::sync::Arc;

use kafkaiq_storage::batch::builder::simple;
use kafkaiq_storage::{LogManager, TopicPartition};
use uuid::Uuid;

use super::fetch::{FetchRequestParams, PartitionRead};
use super::fetch_params::CONSUMER_REPLICA_ID;
use super::partition::AbortedTransaction;
use super::*;
use crate::clock::ManualClock;
use crate::fetch_session::{FetchPartitionSpec, SessionPlan};
use crate::metadata::{MetadataCache, MetadataRecord, PartitionRegistration};

const TOPIC_ID: u128 = 7;

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) manager: ReplicaManager,
    pub(super) cache: MetadataCache,
}

impl Fixture {
    /// This node (1) leads topic `t`, one partition per entry of `replicas`, in epoch 0.
    pub(super) fn new(replicas: &[&[i32]]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(BrokerConfig::default_single_node());
        let logs = Arc::new(
            LogManager::open(&[dir.path().to_path_buf()], config.default_log_config(), 0).unwrap(),
        );
        let manager = ReplicaManager::new(config, logs, Arc::new(ManualClock::new(1_000_000)));
        let f = Fixture {
            _dir: dir,
            manager,
            cache: MetadataCache::new(MetadataImage::empty("c".into(), 1)),
        };
        let mut records = vec![MetadataRecord::Topic {
            name: "t".into(),
            topic_id: Uuid::from_u128(TOPIC_ID),
        }];
        for (i, r) in replicas.iter().enumerate() {
            records.push(partition(i as i32, r, 0));
        }
        f.publish(records);
        f
    }

    pub(super) fn publish(&self, records: Vec<MetadataRecord>) {
        let previous = self.cache.image();
        let next = previous.apply(&records);
        self.manager.on_image(&previous, &next);
        self.cache.publish(Arc::new(next));
    }

    pub(super) fn get(&self, index: i32) -> Arc<Partition> {
        self.manager
            .partition_or_error(&self.cache.image(), &TopicPartition::new("t", index))
            .unwrap()
    }

    pub(super) async fn fetch(
        &self,
        specs: Vec<FetchPartitionSpec>,
        request: FetchRequestParams<'_>,
    ) -> Vec<PartitionRead> {
        let plan = SessionPlan {
            session_id: 0,
            incremental: false,
            partitions: specs,
        };
        self.manager
            .fetch_messages(&self.cache, &plan, &request)
            .await
    }
}

fn partition(index: i32, replicas: &[i32], leader_epoch: i32) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id: Uuid::from_u128(TOPIC_ID),
        partition: index,
        registration: PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
            leader: 1,
            leader_epoch,
            partition_epoch: leader_epoch,
            leader_recovery_state: Default::default(),
            adding_replicas: vec![],
            removing_replicas: vec![],
        },
    }
}

pub(super) fn spec(index: i32, fetch_offset: i64) -> FetchPartitionSpec {
    FetchPartitionSpec {
        topic: "t".into(),
        topic_id: Uuid::nil(),
        partition: index,
        fetch_offset,
        partition_max_bytes: 1 << 20,
        current_leader_epoch: -1,
        log_start_offset: -1,
        last_fetched_epoch: -1,
    }
}

pub(super) fn request(
    replica_id: i32,
    min_bytes: usize,
    max_wait_ms: u64,
) -> FetchRequestParams<'static> {
    FetchRequestParams {
        base: FetchParams {
            replica_id,
            replica_epoch: -1,
            isolation: FetchIsolation::of(replica_id, 0),
            fetch_only_leader: FetchParams::fetch_only_leader(replica_id, true),
            current_leader_epoch: None,
            last_fetched_epoch: None,
            max_bytes: 0,
            min_one_message: false,
        },
        client_rack: None,
        client_listener: "PLAINTEXT",
        max_bytes: 1 << 20,
        min_bytes,
        max_wait_ms,
    }
}

fn records(read: &PartitionRead) -> &[u8] {
    &read.result.as_ref().expect("read without error").0
}

#[tokio::test(start_paused = true)]
async fn a_fetch_below_min_bytes_parks_until_an_append_reaches_it() {
    let f = Fixture::new(&[&[1]]);
    let p = f.get(0);
    let started = tokio::time::Instant::now();
    let append = async {
        while f.manager.purgatory.parked() == 0 {
            tokio::task::yield_now().await;
        }
        p.append_records_to_leader(&simple(2, 10, 0), 1, 0).unwrap();
    };
    let (reads, ()) = tokio::join!(
        f.fetch(vec![spec(0, 0)], request(CONSUMER_REPLICA_ID, 1, 30_000)),
        append
    );
    assert!(
        !records(&reads[0]).is_empty(),
        "woken by the append and read"
    );
    assert!(started.elapsed() < std::time::Duration::from_millis(30_000));
    assert_eq!(f.manager.purgatory.parked(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_parked_fetch_is_answered_empty_at_max_wait() {
    let f = Fixture::new(&[&[1]]);
    let started = tokio::time::Instant::now();
    let reads = f
        .fetch(vec![spec(0, 0)], request(CONSUMER_REPLICA_ID, 1, 500))
        .await;
    assert_eq!(started.elapsed(), std::time::Duration::from_millis(500));
    assert!(records(&reads[0]).is_empty());
    // Without max_wait it is not parked at all.
    let started = tokio::time::Instant::now();
    f.fetch(vec![spec(0, 0)], request(CONSUMER_REPLICA_ID, 1, 0))
        .await;
    assert_eq!(started.elapsed(), std::time::Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_consumer_reads_to_the_high_watermark_and_a_follower_to_the_log_end() {
    let f = Fixture::new(&[&[1, 2]]);
    f.get(0)
        .append_records_to_leader(&simple(3, 10, 0), 1, 0)
        .unwrap();
    let consumer = f
        .fetch(vec![spec(0, 0)], request(CONSUMER_REPLICA_ID, 0, 0))
        .await;
    let (bytes, offsets) = consumer[0].result.as_ref().unwrap();
    assert!(bytes.is_empty(), "nothing committed yet");
    assert_eq!((offsets.high_watermark, offsets.log_end_offset), (0, 3));
    let follower = f.fetch(vec![spec(0, 0)], request(2, 0, 0)).await;
    assert!(
        !records(&follower[0]).is_empty(),
        "a follower reads to the log end"
    );
    assert!(follower[0].as_leader);
}

#[tokio::test(start_paused = true)]
async fn max_bytes_bounds_the_response_but_the_first_batch_comes_whole() {
    let f = Fixture::new(&[&[1], &[1]]);
    for i in 0..2 {
        f.get(i)
            .append_records_to_leader(&simple(1, 1_000, 0), 1, 0)
            .unwrap();
    }
    let mut small = request(CONSUMER_REPLICA_ID, 0, 0);
    small.max_bytes = 100;
    let reads = f.fetch(vec![spec(0, 0), spec(1, 0)], small).await;
    assert!(records(&reads[0]).len() > 1_000, "the first batch, whole");
    assert!(records(&reads[1]).is_empty(), "no room left for the second");
    let mut per_partition = spec(0, 0);
    per_partition.partition_max_bytes = 100;
    let reads = f
        .fetch(
            vec![spec(1, 1), per_partition],
            request(CONSUMER_REPLICA_ID, 0, 0),
        )
        .await;
    assert!(
        records(&reads[1]).len() > 1_000,
        "the first partition with data gets its first batch whole"
    );
}

#[tokio::test(start_paused = true)]
async fn a_follower_behind_a_diverging_epoch_is_told_at_once() {
    let f = Fixture::new(&[&[1, 2]]);
    f.get(0)
        .append_records_to_leader(&simple(2, 10, 0), 1, 0)
        .unwrap();
    // A new leader epoch (this node still leads) starts at offset 2.
    f.publish(vec![partition(0, &[1, 2], 2)]);
    f.get(0)
        .append_records_to_leader(&simple(1, 10, 0), 1, 0)
        .unwrap();
    let mut diverged = spec(0, 3);
    diverged.last_fetched_epoch = 1;
    let started = tokio::time::Instant::now();
    let reads = f.fetch(vec![diverged], request(2, 1 << 20, 30_000)).await;
    assert_eq!(reads[0].diverging, Some((0, 2)), "epoch 0 ends at offset 2");
    assert!(reads[0].answers_now());
    assert_eq!(started.elapsed(), std::time::Duration::ZERO, "not parked");
}

/// A transactional batch of `count` records from `producer_id` (epoch 0) at `sequence`.
fn transactional(producer_id: i64, sequence: i32, count: usize) -> Vec<u8> {
    use kafkaiq_storage::batch::builder::{batch, transactional, Spec};
    let values: Vec<&[u8]> = (0..count).map(|_| b"v".as_slice()).collect();
    let spec = Spec {
        producer_id,
        producer_epoch: 0,
        base_sequence: sequence,
        ..Spec::default()
    };
    transactional(&batch(&spec, &values))
}

fn end_txn(producer_id: i64, commit: bool) -> Vec<u8> {
    use kafkaiq_storage::batch::{end_txn_marker_batch, ControlRecordType, EndTxnMarker};
    let control_type = if commit {
        ControlRecordType::Commit
    } else {
        ControlRecordType::Abort
    };
    let marker = EndTxnMarker {
        control_type,
        coordinator_epoch: 0,
    };
    end_txn_marker_batch(producer_id, 0, 0, 0, marker)
}

fn batch_ranges(bytes: &[u8]) -> Vec<(i64, i64)> {
    kafkaiq_storage::batch::BatchIter::new(bytes)
        .map(|(_, h)| (h.base_offset, h.last_offset()))
        .collect()
}

fn read_committed(replica_id: i32) -> FetchRequestParams<'static> {
    let mut r = request(replica_id, 0, 0);
    r.base.isolation = FetchIsolation::of(replica_id, fetch_params::READ_COMMITTED);
    r
}

#[tokio::test(start_paused = true)]
async fn read_committed_stops_at_the_last_stable_offset_and_names_aborted_transactions() {
    let f = Fixture::new(&[&[1]]);
    let p = f.get(0);
    p.append_records_to_leader(&simple(2, 10, 0), 1, 0).unwrap(); // 0-1
    p.append_records_to_leader(&transactional(10, 0, 2), 1, 0)
        .unwrap(); // 2-3
    p.append_records_to_leader(&transactional(11, 0, 1), 1, 0)
        .unwrap(); // 4
    p.append_records_to_leader(&end_txn(10, false), 1, 0)
        .unwrap(); // 5: abort 10
    let offsets = p.offsets();
    assert_eq!(
        (offsets.high_watermark, offsets.last_stable_offset),
        (6, 4),
        "producer 11's open transaction holds the last stable offset"
    );

    let reads = f
        .fetch(vec![spec(0, 0)], read_committed(CONSUMER_REPLICA_ID))
        .await;
    let (bytes, offsets) = reads[0].result.as_ref().unwrap();
    assert_eq!(batch_ranges(bytes), vec![(0, 1), (2, 3)]);
    assert_eq!(offsets.last_stable_offset, 4);
    assert_eq!(
        reads[0].aborted_transactions,
        Some(vec![AbortedTransaction {
            producer_id: 10,
            first_offset: 2
        }])
    );
    // read_uncommitted reads to the high watermark and is told of no aborted transaction.
    let reads = f
        .fetch(vec![spec(0, 0)], request(CONSUMER_REPLICA_ID, 0, 0))
        .await;
    assert_eq!(
        batch_ranges(records(&reads[0])),
        vec![(0, 1), (2, 3), (4, 4), (5, 5)]
    );
    assert_eq!(reads[0].aborted_transactions, None);
    // At the last stable offset a read_committed fetch gets nothing, and an empty list.
    let reads = f
        .fetch(vec![spec(0, 4)], read_committed(CONSUMER_REPLICA_ID))
        .await;
    assert!(records(&reads[0]).is_empty());
    assert_eq!(reads[0].aborted_transactions, Some(vec![]));

    // ListOffsets LATEST answers the last stable offset at read_committed.
    let tp = TopicPartition::new("t", 0);
    let latest = |isolation| {
        f.manager
            .fetch_offset_for_timestamp(&f.cache.image(), &tp, -1, -1, isolation)
            .unwrap()
            .unwrap()
            .offset
    };
    assert_eq!(latest(FetchIsolation::TxnCommitted), 4);
    assert_eq!(latest(FetchIsolation::HighWatermark), 6);

    p.append_records_to_leader(&end_txn(11, true), 1, 0)
        .unwrap(); // 6: commit 11
    assert_eq!(latest(FetchIsolation::TxnCommitted), 7);
    let reads = f
        .fetch(vec![spec(0, 4)], read_committed(CONSUMER_REPLICA_ID))
        .await;
    assert_eq!(
        batch_ranges(records(&reads[0])),
        vec![(4, 4), (5, 5), (6, 6)]
    );
    // Producer 10's abort marker is in the range read: the consumer is told of it.
    assert_eq!(
        reads[0].aborted_transactions,
        Some(vec![AbortedTransaction {
            producer_id: 10,
            first_offset: 2
        }])
    );
    let reads = f
        .fetch(vec![spec(0, 6)], read_committed(CONSUMER_REPLICA_ID))
        .await;
    assert_eq!(reads[0].aborted_transactions, Some(vec![]));
}

#[tokio::test(start_paused = true)]
async fn a_follower_marker_beyond_the_high_watermark_holds_the_last_stable_offset() {
    // Two replicas: the high watermark waits for the follower, and so does the last stable
    // offset of a transaction whose marker the follower has not fetched.
    let f = Fixture::new(&[&[1, 2]]);
    let p = f.get(0);
    p.append_records_to_leader(&transactional(10, 0, 2), 1, 0)
        .unwrap(); // 0-1
    p.append_records_to_leader(&end_txn(10, true), 1, 0)
        .unwrap(); // 2
                   // The follower fetches from 2: it has 0-1, the high watermark moves to 2.
    f.fetch(vec![spec(0, 2)], request(2, 0, 0)).await;
    let offsets = p.offsets();
    assert_eq!((offsets.high_watermark, offsets.last_stable_offset), (2, 0));
    f.fetch(vec![spec(0, 3)], request(2, 0, 0)).await;
    let offsets = p.offsets();
    assert_eq!((offsets.high_watermark, offsets.last_stable_offset), (3, 3));
}
