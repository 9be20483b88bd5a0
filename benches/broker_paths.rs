//! Micro-benchmarks of the broker's two hot paths, from request frame to response frame, without
//! the socket: `server::dispatch::handle_frame` on an in-process node started without a listener
//! (it binds no port), with its data in a temp dir.
//!
//! - produce: one 16 KiB batch of 100-byte records (the Java producer's default `batch.size`) →
//!   decode → partition lookup → v2 batch validation and offset assignment → append to the active
//!   segment (page cache, no fsync: Kafka's default flush policy) → encoded answer. acks=1 and
//!   acks=all (which on one node waits for the high watermark through the purgatory).
//! - fetch: a consumer's sessionless Fetch of up to 1 MiB (`max.partition.fetch.bytes`) from a
//!   32 MiB log already in the page cache → read whole batches → encoded answer, cycling through
//!   the log so successive fetches read different bytes.
//! - fetch session: an incremental Fetch (KIP-227) of a consumer's session over 100 partitions
//!   with nothing new and no partition named, as a caught-up Java consumer sends it with
//!   `fetch.max.wait.ms=0`: the session's plan, a read of each partition at its log end, and
//!   an answer that lists none of them.
//!
//! Not measured: TCP, the connection task, pipelining, the disk itself.
//!
//! Run: `cargo bench --bench broker_paths`.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{
    record_batch, records_per_batch, request_frame, FETCH_PARTITION_BYTES, PRODUCER_BATCH_BYTES,
};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::{
    create_topics_request::CreatableTopic,
    fetch_request::{FetchPartition, FetchTopic},
    produce_request::{PartitionProduceData, TopicProduceData},
    BrokerId, CreateTopicsRequest, FetchRequest, ProduceRequest, TopicName,
};
use kafkaiq::config::{BrokerConfig, RawConfig};
use kafkaiq::context::Context;
use kafkaiq::node::Node;
use kafkaiq::protocol::{ApiKey, RequestKind, StrBytes};
use kafkaiq::server::dispatch::handle_frame;
use tokio::runtime::Runtime;

const PRODUCE_VERSION: i16 = 11;
const FETCH_VERSION: i16 = 12;
const CREATE_TOPICS_VERSION: i16 = 7;
/// Size of the log the fetch benchmark reads from: large enough that reads move around, small
/// enough to stay in the page cache.
const FETCH_LOG_BYTES: usize = 32 * 1024 * 1024;
/// The produce benchmark appends gigabytes; retention keeps the partition under this.
const PRODUCE_RETENTION_BYTES: &str = "268435456";

struct Bench {
    runtime: Runtime,
    running: Option<Node>,
    broker: Arc<Context>,
    /// The client address handlers see (group members are keyed by it).
    peer: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn start() -> Bench {
        // As the `kafkaiq` binary does at startup.
        kafkaiq::allocator::retain_freed_memory();
        // One worker for the broker's own tasks (retention, checkpoints); handle_frame runs on
        // the benchmark's thread through block_on.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut raw = RawConfig::default();
        raw.set("log.dirs", dir.path().to_str().expect("utf-8 temp dir"));
        raw.set("log.segment.bytes", "67108864");
        raw.set("log.retention.bytes", PRODUCE_RETENTION_BYTES);
        // Retention must keep up with the appends, not wait Kafka's default 5 minutes.
        raw.set("log.retention.check.interval.ms", "1000");
        let config = BrokerConfig::from_raw(raw).expect("valid config").config;
        // No listener: frames go straight to dispatch, so the benchmark binds no port.
        let running = runtime
            .block_on(Node::start_without_listener(
                config,
                Arc::new(kafkaiq::clock::SystemClock),
            ))
            .expect("broker starts");
        let broker = running.context.clone();
        Bench {
            runtime,
            running: Some(running),
            broker,
            peer: "127.0.0.1:50000".parse().expect("socket address"),
            _dir: dir,
        }
    }

    fn call(&self, frame: Bytes) -> Bytes {
        self.call_frame(frame).into_bytes()
    }

    /// The answer as the connection writes it: a Fetch answer's large record sets are chunks
    /// of their own, not copied into one buffer.
    fn call_frame(&self, frame: Bytes) -> kafkaiq::protocol::frame::ResponseFrame {
        self.runtime
            .block_on(handle_frame(
                &self.broker,
                frame,
                self.peer,
                "User:ANONYMOUS",
                "PLAINTEXT",
            ))
            .expect("handled")
            .expect("answered")
    }

    fn create_topic(&self, name: &'static str) {
        self.create_topic_with(name, 1)
    }

    fn create_topic_with(&self, name: &'static str, partitions: i32) {
        let body = RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(topic(name))
                    .with_num_partitions(partitions)
                    .with_replication_factor(1)]),
        );
        let frame = request_frame(ApiKey::CreateTopics, CREATE_TOPICS_VERSION, 1, &body);
        let answer = self.call(frame);
        // CreateTopics v7 answer: size, correlation id, tagged fields, throttle, topics[...]; the
        // error code is checked by the first produce instead, which fails on a missing topic.
        assert!(answer.len() > 8, "CreateTopics answered");
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = self.runtime.block_on(running.shutdown());
        }
    }
}

fn topic(name: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(name))
}

fn produce_frame(name: &'static str, acks: i16) -> Bytes {
    produce_frame_to(name, 0, acks)
}

fn produce_frame_to(name: &'static str, partition: i32, acks: i16) -> Bytes {
    let body = RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic(name))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(record_batch(PRODUCER_BATCH_BYTES, 0, None)))])]),
    );
    request_frame(ApiKey::Produce, PRODUCE_VERSION, 2, &body)
}

fn fetch_frame(name: &'static str, offset: i64) -> Bytes {
    let body = RequestKind::Fetch(
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(50 * 1024 * 1024)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic(name))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(FETCH_PARTITION_BYTES as i32)])]),
    );
    request_frame(ApiKey::Fetch, FETCH_VERSION, 3, &body)
}

/// The body of an answer frame (size prefix included) to `key` at `version`.
fn decode_answer<R: kafka_protocol::protocol::Decodable>(
    answer: &Bytes,
    key: ApiKey,
    version: i16,
) -> R {
    use kafka_protocol::messages::ResponseHeader;
    use kafka_protocol::protocol::Decodable;
    let mut buf = answer.slice(4..);
    ResponseHeader::decode(&mut buf, key.response_header_version(version)).expect("header");
    R::decode(&mut buf, version).expect("body")
}

/// The error code of the only partition of a v11 Produce answer.
fn produce_error_code(answer: &Bytes) -> i16 {
    let response: kafka_protocol::messages::ProduceResponse =
        decode_answer(answer, ApiKey::Produce, PRODUCE_VERSION);
    response.responses[0].partition_responses[0].error_code
}

fn bench_produce(c: &mut Criterion) {
    let bench = Bench::start();
    let mut group = c.benchmark_group("produce_path");
    group.sample_size(30);
    for (name, acks) in [("bench-acks1", 1), ("bench-acksall", -1)] {
        bench.create_topic(name);
        let frame = produce_frame(name, acks);
        let answer = bench.call(frame.clone());
        assert_eq!(produce_error_code(&answer), 0, "produce to {name} succeeds");
        group.throughput(Throughput::Bytes(frame.len() as u64));
        let label = if acks == 1 {
            "acks1_16KiB"
        } else {
            "acksall_16KiB"
        };
        group.bench_function(label, |b| b.iter(|| bench.call(black_box(frame.clone()))));
    }
    group.finish();
}

fn bench_fetch(c: &mut Criterion) {
    let bench = Bench::start();
    let name = "bench-fetch";
    bench.create_topic(name);
    let batch = produce_frame(name, 1);
    for _ in 0..FETCH_LOG_BYTES / PRODUCER_BATCH_BYTES {
        assert_eq!(produce_error_code(&bench.call(batch.clone())), 0);
    }
    let records_per_mib = (FETCH_PARTITION_BYTES / PRODUCER_BATCH_BYTES
        * records_per_batch(PRODUCER_BATCH_BYTES)) as i64;
    // Fetch positions 1 MiB apart over the whole log (the last MiB would answer short).
    let frames: Vec<Bytes> = (0..(FETCH_LOG_BYTES / FETCH_PARTITION_BYTES - 1) as i64)
        .map(|i| fetch_frame(name, i * records_per_mib))
        .collect();
    let answer_len = bench.call(frames[0].clone()).len();
    for frame in &frames {
        let len = bench.call(frame.clone()).len();
        assert!(
            len > FETCH_PARTITION_BYTES / 2,
            "fetch answers with records ({len} bytes)"
        );
    }
    let mut group = c.benchmark_group("fetch_path");
    group.throughput(Throughput::Bytes(answer_len as u64));
    group.bench_function("consumer_1MiB", |b| {
        let mut next = 0;
        b.iter(|| {
            next = (next + 1) % frames.len();
            bench.call_frame(black_box(frames[next].clone()))
        })
    });
    group.finish();
    // Still reading records, not errors: retention or a roll must not have emptied the log.
    let len = bench.call(frames[frames.len() - 1].clone()).len();
    assert!(
        len > FETCH_PARTITION_BYTES / 2,
        "fetch still answers with records ({len} bytes)"
    );
}

const SESSION_PARTITIONS: i32 = 100;

/// A consumer's fetch in a session: `epoch` 0 names every partition at `offset`, later epochs
/// name none.
fn session_fetch_frame(name: &'static str, session_id: i32, epoch: i32, offset: i64) -> Bytes {
    let partitions = if epoch == 0 {
        (0..SESSION_PARTITIONS)
            .map(|p| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(FETCH_PARTITION_BYTES as i32)
            })
            .collect()
    } else {
        Vec::new()
    };
    let topics = if partitions.is_empty() {
        Vec::new()
    } else {
        vec![FetchTopic::default()
            .with_topic(topic(name))
            .with_partitions(partitions)]
    };
    let body = RequestKind::Fetch(
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(50 * 1024 * 1024)
            .with_session_id(session_id)
            .with_session_epoch(epoch)
            .with_topics(topics),
    );
    request_frame(ApiKey::Fetch, FETCH_VERSION, 4, &body)
}

/// (top-level error, session id, partitions answered) of a Fetch answer.
fn fetch_session_answer(answer: &Bytes) -> (i16, i32, usize) {
    let response: kafka_protocol::messages::FetchResponse =
        decode_answer(answer, ApiKey::Fetch, FETCH_VERSION);
    let partitions = response.responses.iter().map(|t| t.partitions.len()).sum();
    (response.error_code, response.session_id, partitions)
}

fn bench_fetch_session(c: &mut Criterion) {
    let bench = Bench::start();
    let name = "bench-session";
    bench.create_topic_with(name, SESSION_PARTITIONS);
    // One record batch in each partition; the session is opened at the log end (offset
    // `records`), so incremental fetches find nothing new.
    let records = records_per_batch(PRODUCER_BATCH_BYTES) as i64;
    for p in 0..SESSION_PARTITIONS {
        let answer = bench.call(produce_frame_to(name, p, 1));
        assert_eq!(produce_error_code(&answer), 0);
    }
    let opened = bench.call(session_fetch_frame(name, 0, 0, records));
    let (error, session_id, partitions) = fetch_session_answer(&opened);
    assert_eq!((error, partitions), (0, SESSION_PARTITIONS as usize));
    assert!(session_id > 0, "a session was created");
    let mut epoch = 1;
    let mut group = c.benchmark_group("fetch_path");
    group.bench_function("session_incremental_100_partitions_idle", |b| {
        b.iter(|| {
            let answer = bench.call(session_fetch_frame(name, session_id, epoch, records));
            epoch += 1;
            black_box(answer)
        })
    });
    group.finish();
    // Still in the session, still answering nothing new.
    let answer = bench.call(session_fetch_frame(name, session_id, epoch, records));
    assert_eq!(fetch_session_answer(&answer), (0, session_id, 0));
}

criterion_group!(benches, bench_produce, bench_fetch, bench_fetch_session);
criterion_main!(benches);
