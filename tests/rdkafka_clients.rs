//! librdkafka (the `rdkafka` crate, bundling librdkafka 2.12) against the broker binary.
//!
//! Each test starts its own broker: the `kafkaiq` binary of this build on a free 127.0.0.1 port
//! with a temporary data directory and `num.partitions=3`. The same tests run against Apache
//! Kafka 4.1.1 with `BROKER_UNDER_TEST=apache-kafka` (it needs Java and Maven; run them with
//! `--test-threads=1` to keep to one JVM at a time), which is how the expectations here are
//! checked to be Kafka's. `KAFKA_BOOTSTRAP=host:port` points them at a running broker instead.
//! A started broker that panics, exits uncleanly or does not obey SIGTERM in time fails the test
//! that ran it (`common::broker_process`).
//!
//! Covered: every compression codec round trip; keys, headers and null values; the idempotent
//! producer's exactly-once in-order delivery; ListOffsets by time and MAX_TIMESTAMP
//! (`offsets_for_times`), inside compressed batches too;
//! Metadata fields; LogAppendTime topics; max.message.bytes. KIP-848 consumer groups of
//! librdkafka (`consumer_protocol`) and of franz-go (`franz_group`, members run as processes of
//! `integration/programs/group-member-go`; needs go); classic groups are the Java suite's and
//! the groups suite's. Two more files of tests that also run against Apache Kafka are modules
//! here, so the binary is compiled and linked once: `hostile_frames_tcp` (hostile frames over
//! TCP) and `acl_enforcement` (ACLs on a SASL_PLAINTEXT listener with Kafka's `kafka-acls`); run
//! one with `cargo test --test rdkafka_clients hostile_frames_tcp::`.

#[path = "rdkafka_clients/acl_enforcement.rs"]
mod acl_enforcement;
mod common;
#[path = "rdkafka_clients/consumer_protocol.rs"]
mod consumer_protocol;
mod frames;
#[path = "rdkafka_clients/franz_group.rs"]
mod franz_group;
#[path = "rdkafka_clients/hostile_frames_tcp.rs"]
mod hostile_frames_tcp;
#[path = "rdkafka_clients/transactions.rs"]
mod transactions;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, Timestamp};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use common::broker_process::{start_selected, SelectedBroker};

/// Partitions of auto-created topics (`num.partitions` given to the broker).
const PARTITIONS: usize = 3;
/// How long a started broker gets to serve Metadata once it listens.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);
/// Timeout for every single client call (metadata, offsets, flush).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a test polls for records it expects before failing.
const POLL_DEADLINE: Duration = Duration::from_secs(60);
/// How long dropping a client may take before the test moves on and leaves it behind.
const DROP_TIMEOUT: Duration = Duration::from_secs(10);

/// Client context printing librdkafka's log lines to stderr (shown for failing tests); set
/// `RDKAFKA_DEBUG` (e.g. `broker,metadata,protocol`) for its debug contexts.
struct Ctx;

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        eprintln!("librdkafka {level:?} {fac}: {log_message}");
    }
}

impl ConsumerContext for Ctx {}

type TestConsumer = BaseConsumer<Ctx>;
type TestProducer = FutureProducer<Ctx>;

/// A running broker under test, stopped (checked, and its data removed) when dropped: a panic
/// in its output, an unclean exit or a SIGTERM not obeyed in time fails the test.
struct Broker {
    bootstrap: String,
    kind: String,
    selected: SelectedBroker,
}

impl Broker {
    fn start() -> Broker {
        let partitions = format!("num.partitions={PARTITIONS}");
        let selected = start_selected("rdkafka-clients", &[&partitions]);
        let broker = Broker {
            bootstrap: selected.bootstrap.clone(),
            kind: selected.kind.clone(),
            selected,
        };
        broker.await_metadata();
        broker
    }

    /// Listening is not serving (Apache Kafka binds before its metadata is loaded).
    fn await_metadata(&self) {
        let consumer = self.consumer();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match consumer.fetch_metadata(None, Duration::from_secs(5)) {
                Ok(md) if !md.brokers().is_empty() => break,
                other => assert!(
                    Instant::now() < deadline,
                    "{} at {} never answered Metadata: {:?}",
                    self.kind,
                    self.bootstrap,
                    other.map(|m| m.brokers().len())
                ),
            }
            thread::sleep(Duration::from_millis(200));
        }
        drop_off_thread(consumer);
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("socket.timeout.ms", "30000")
            .set("log_level", "4");
        if let Ok(d) = std::env::var("RDKAFKA_DEBUG") {
            c.set("debug", d).set("log_level", "7");
        }
        c
    }

    /// A consumer for assign/poll use only. librdkafka refuses assign() without a group.id,
    /// but nothing is subscribed or committed, so the group is never joined.
    fn consumer(&self) -> TestConsumer {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let group = format!("rdkafka-clients-{}", SEQ.fetch_add(1, Ordering::Relaxed));
        self.config()
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("allow.auto.create.topics", "false")
            .set("auto.offset.reset", "error")
            .create_with_context(Ctx)
            .expect("create consumer")
    }

    fn producer(&self, extra: &[(&str, &str)]) -> TestProducer {
        let mut c = self.config();
        c.set("message.timeout.ms", "60000").set("linger.ms", "5");
        for (k, v) in extra {
            c.set(*k, *v);
        }
        c.create_with_context(Ctx).expect("create producer")
    }

    /// Creates one single-replica topic with the given configs (CreateTopics), failing the test
    /// on any error.
    fn create_topic(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        let admin: AdminClient<Ctx> = self
            .config()
            .create_with_context(Ctx)
            .expect("create admin client");
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
        let res = runtime()
            .block_on(admin.create_topics([&topic], &opts))
            .expect("CreateTopics");
        assert_eq!(res, vec![Ok(name.to_string())], "CreateTopics {name}");
        drop_off_thread(admin);
        // Apache Kafka's broker learns of the topic a moment after the controller commits it.
        let consumer = self.consumer();
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let md = consumer
                .fetch_metadata(Some(name), CALL_TIMEOUT)
                .expect("metadata");
            if md
                .topics()
                .first()
                .is_some_and(|t| t.error().is_none() && t.partitions().len() == partitions as usize)
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never appeared in metadata"
            );
            thread::sleep(Duration::from_millis(100));
        }
        drop_off_thread(consumer);
    }

    fn log_tail(&self) -> String {
        self.selected.log_tail(40)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "---- last lines of {} output ({}) ----\n{}",
                self.kind,
                self.bootstrap,
                self.log_tail()
            );
        }
        // Then `selected` drops: SIGTERM, the exit and panic checks, the temp dir removed.
    }
}

/// Drops a librdkafka client on its own thread, waiting at most DROP_TIMEOUT: a consumer's
/// destructor can block on broker round trips, and a hang there must not hang the test.
fn drop_off_thread<T: Send + 'static>(client: T) {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        drop(client);
        let _ = tx.send(());
    });
    if rx.recv_timeout(DROP_TIMEOUT).is_err() {
        eprintln!("a client did not close within {DROP_TIMEOUT:?}; leaving it behind");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A record as produced and as read back: everything a consumer can observe.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: i64,
}

impl Rec {
    fn owned_headers(&self) -> Option<OwnedHeaders> {
        if self.headers.is_empty() {
            return None;
        }
        let mut h = OwnedHeaders::new_with_capacity(self.headers.len());
        for (k, v) in &self.headers {
            h = h.insert(Header {
                key: k,
                value: v.as_ref(),
            });
        }
        Some(h)
    }

    fn of<M: Message>(m: &M) -> Rec {
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        let timestamp = match m.timestamp() {
            Timestamp::CreateTime(t) => t,
            other => panic!("expected a CreateTime timestamp, got {other:?}"),
        };
        Rec {
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
            timestamp,
        }
    }
}

/// Produces `recs` to `topic` (to `partition`, or by key when None) with all sends in flight at
/// once; returns (partition, offset) of each, in send order. Panics on any delivery error.
fn produce(
    producer: &TestProducer,
    topic: &str,
    partition: Option<i32>,
    recs: &[Rec],
) -> Vec<(i32, i64)> {
    let rt = runtime();
    let out = rt.block_on(async {
        let mut futures = Vec::with_capacity(recs.len());
        for r in recs {
            let mut fr: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(topic).timestamp(r.timestamp);
            if let Some(k) = &r.key {
                fr = fr.key(k.as_slice());
            }
            if let Some(v) = &r.value {
                fr = fr.payload(v.as_slice());
            }
            if let Some(p) = partition {
                fr = fr.partition(p);
            }
            if let Some(h) = r.owned_headers() {
                fr = fr.headers(h);
            }
            // send_result enqueues now (send() would only enqueue when awaited, one at a
            // time); the test's records fit librdkafka's queue (100,000 messages by default).
            match producer.send_result(fr) {
                Ok(f) => futures.push(f),
                Err((e, _)) => panic!("enqueue to {topic}: {e}"),
            }
        }
        let mut out = Vec::with_capacity(futures.len());
        for (i, f) in futures.into_iter().enumerate() {
            match f.await.expect("delivery report") {
                Ok(d) => out.push((d.partition, d.offset)),
                Err((e, _)) => panic!("record {i} to {topic} not delivered: {e}"),
            }
        }
        out
    });
    producer.flush(CALL_TIMEOUT).expect("flush");
    out
}

/// Reads partitions of `topic` from offset 0 until `want[p]` records of each arrived; returns
/// them by partition and offset.
fn consume(broker: &Broker, topic: &str, want: &BTreeMap<i32, usize>) -> BTreeMap<(i32, i64), Rec> {
    let consumer = broker.consumer();
    let mut tpl = TopicPartitionList::new();
    for p in want.keys() {
        tpl.add_partition_offset(topic, *p, Offset::Offset(0))
            .expect("add partition");
    }
    consumer.assign(&tpl).expect("assign");
    let mut got: BTreeMap<(i32, i64), Rec> = BTreeMap::new();
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    let deadline = Instant::now() + POLL_DEADLINE;
    while want
        .iter()
        .any(|(p, n)| counts.get(p).copied().unwrap_or(0) < *n)
    {
        assert!(
            Instant::now() < deadline,
            "timed out consuming {topic}: got {counts:?}, want {want:?}"
        );
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Ok(m)) => {
                let prev = got.insert((m.partition(), m.offset()), Rec::of(&m));
                assert!(
                    prev.is_none(),
                    "offset {} of partition {} read twice",
                    m.offset(),
                    m.partition()
                );
                *counts.entry(m.partition()).or_default() += 1;
            }
            Some(Err(e)) => panic!("consuming {topic}: {e}"),
        }
    }
    drop_off_thread(consumer);
    got
}

/// Sends and reads back `recs`, checking offsets are 0.. per partition and every record
/// (key, value, headers, timestamp) reads back unchanged at the offset it was acknowledged at.
fn round_trip(broker: &Broker, producer: &TestProducer, topic: &str, recs: &[Rec]) {
    let acked = produce(producer, topic, None, recs);
    let mut want: BTreeMap<i32, usize> = BTreeMap::new();
    for (p, _) in &acked {
        *want.entry(*p).or_default() += 1;
    }
    for (p, n) in &want {
        let mut offsets: Vec<i64> = acked
            .iter()
            .filter(|(q, _)| q == p)
            .map(|(_, o)| *o)
            .collect();
        offsets.sort_unstable();
        assert_eq!(
            offsets,
            (0..*n as i64).collect::<Vec<_>>(),
            "{topic} partition {p} offsets"
        );
    }
    let got = consume(broker, topic, &want);
    assert_eq!(got.len(), recs.len(), "{topic}: records read back");
    for (i, (at, rec)) in acked.iter().zip(recs).enumerate() {
        assert_eq!(got.get(at), Some(rec), "{topic}: record {i} at {at:?}");
    }
}

#[test]
fn every_compression_codec_round_trips() {
    let broker = Broker::start();
    let t0 = now_ms() - 60_000;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let producer =
            broker.producer(&[("compression.codec", codec), ("batch.num.messages", "500")]);
        let topic = format!("rdkafka-codec-{codec}");
        let recs: Vec<Rec> = (0..5000)
            .map(|i| Rec {
                key: Some(format!("key-{i}").into_bytes()),
                value: Some(
                    format!("{codec} value {i} {}", "abcdefgh".repeat(i % 40)).into_bytes(),
                ),
                headers: vec![],
                timestamp: t0 + i as i64,
            })
            .collect();
        round_trip(&broker, &producer, &topic, &recs);
        drop_off_thread(producer);
    }
}

#[test]
fn keys_headers_and_null_values_round_trip() {
    let broker = Broker::start();
    let producer = broker.producer(&[]);
    let t0 = now_ms() - 60_000;
    let recs: Vec<Rec> = (0..600)
        .map(|i| {
            let key = match i % 5 {
                0 => None,
                1 => Some(vec![]),
                _ => Some(format!("k{i}").into_bytes()),
            };
            let value = match i % 4 {
                0 => None,
                1 => Some(vec![]),
                _ => Some(vec![(i % 256) as u8; i % 300]),
            };
            let headers = match i % 3 {
                0 => vec![],
                1 => vec![("only".to_string(), Some(b"one".to_vec()))],
                _ => vec![
                    ("dup".to_string(), Some(format!("first {i}").into_bytes())),
                    ("null-value".to_string(), None),
                    ("empty".to_string(), Some(vec![])),
                    ("dup".to_string(), Some(vec![0, 255, i as u8])),
                ],
            };
            Rec {
                key,
                value,
                headers,
                timestamp: t0 + i as i64,
            }
        })
        .collect();
    round_trip(&broker, &producer, "rdkafka-keys-headers-nulls", &recs);
    drop_off_thread(producer);
}

#[test]
fn idempotent_producer_delivers_exactly_once_in_order() {
    const N: usize = 20_000;
    let broker = Broker::start();
    let producer = broker.producer(&[
        ("enable.idempotence", "true"),
        ("acks", "all"),
        ("max.in.flight.requests.per.connection", "5"),
        // Small batches keep several produce requests in flight at once.
        ("batch.num.messages", "200"),
        ("linger.ms", "1"),
    ]);
    let topic = "rdkafka-idempotent";
    let t0 = now_ms() - 60_000;
    let recs: Vec<Rec> = (0..N)
        .map(|i| Rec {
            key: Some(format!("seq-{i}").into_bytes()),
            value: Some(format!("{i:08}").into_bytes()),
            headers: vec![],
            timestamp: t0 + i as i64,
        })
        .collect();
    let acked = produce(&producer, topic, Some(1), &recs);
    assert!(
        producer.client().fatal_error().is_none(),
        "idempotent producer hit a fatal error: {:?}",
        producer.client().fatal_error()
    );
    // In send order, the acknowledged offsets are exactly 0, 1, 2, ... on the one partition.
    let expected: Vec<(i32, i64)> = (0..N as i64).map(|o| (1, o)).collect();
    assert_eq!(acked, expected, "acknowledged offsets in send order");
    drop_off_thread(producer);

    let got = consume(&broker, topic, &BTreeMap::from([(1, N)]));
    let values: Vec<Vec<u8>> = got
        .values()
        .map(|r| r.value.clone().unwrap_or_default())
        .collect();
    let sent: Vec<Vec<u8>> = recs.iter().map(|r| r.value.clone().unwrap()).collect();
    assert_eq!(values.len(), N, "no record lost or duplicated");
    assert!(
        values == sent,
        "records read back in exactly the order they were sent"
    );
}

#[test]
fn offsets_for_times_finds_first_offset_at_or_after_a_timestamp() {
    let broker = Broker::start();
    let producer = broker.producer(&[]);
    let topic = "rdkafka-offsets-for-times";
    let t = now_ms() - 3_600_000;
    // Timestamps one second apart: offset i has t + 1000 i.
    let recs: Vec<Rec> = (0..10)
        .map(|i| Rec {
            key: None,
            value: Some(format!("v{i}").into_bytes()),
            headers: vec![],
            timestamp: t + 1000 * i,
        })
        .collect();
    let acked = produce(&producer, topic, Some(0), &recs);
    assert_eq!(acked, (0..10).map(|o| (0, o)).collect::<Vec<_>>());
    drop_off_thread(producer);

    let consumer = broker.consumer();
    let query = |ts: i64| -> Offset {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(ts))
            .expect("add partition");
        let res = consumer
            .offsets_for_times(tpl, CALL_TIMEOUT)
            .unwrap_or_else(|e| panic!("offsets_for_times({ts}): {e}"));
        let elem = res
            .find_partition(topic, 0)
            .expect("partition 0 in the answer");
        assert!(
            elem.error().is_ok(),
            "offsets_for_times({ts}): {:?}",
            elem.error()
        );
        elem.offset()
    };
    assert_eq!(
        query(t),
        Offset::Offset(0),
        "exact timestamp of the first record"
    );
    assert_eq!(query(t - 100_000), Offset::Offset(0), "before everything");
    assert_eq!(
        query(t + 3000),
        Offset::Offset(3),
        "exact timestamp of offset 3"
    );
    assert_eq!(
        query(t + 3001),
        Offset::Offset(4),
        "between offsets 3 and 4"
    );
    assert_eq!(query(t + 9000), Offset::Offset(9), "the last record");
    assert_eq!(
        query(t + 9001),
        Offset::End,
        "after every record: no offset (-1)"
    );

    let (low, high) = consumer
        .fetch_watermarks(topic, 0, CALL_TIMEOUT)
        .expect("fetch_watermarks");
    assert_eq!((low, high), (0, 10), "log start offset and high watermark");
    drop_off_thread(consumer);
}

/// ListOffsets of `topic` partition 0 at `ts` (a timestamp, or -3 for MAX_TIMESTAMP) through
/// `offsets_for_times`.
fn offset_for_time(consumer: &TestConsumer, topic: &str, ts: i64) -> Offset {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    // The rdkafka crate's `Offset` has no spelling for a negative timestamp such as -3, which
    // librdkafka passes on as is: set the raw value.
    let c_topic = std::ffi::CString::new(topic).expect("topic name without NUL");
    // SAFETY: `tpl` owns a valid list holding (topic, 0); the C string outlives the call.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_topic_partition_list_set_offset(
            tpl.ptr(),
            c_topic.as_ptr(),
            0,
            ts,
        )
    };
    assert_eq!(
        err,
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    );
    let res = consumer
        .offsets_for_times(tpl, CALL_TIMEOUT)
        .unwrap_or_else(|e| panic!("{topic}: offsets_for_times({ts}): {e}"));
    let elem = res
        .find_partition(topic, 0)
        .expect("partition 0 in the answer");
    assert!(
        elem.error().is_ok(),
        "{topic}: offsets_for_times({ts}): {:?}",
        elem.error()
    );
    elem.offset()
}

/// MAX_TIMESTAMP as ListOffsets spells it (KIP-734).
const MAX_TIMESTAMP: i64 = -3;

#[test]
fn offsets_for_times_finds_the_exact_record_inside_compressed_batches() {
    let broker = Broker::start();
    let t = now_ms() - 3_600_000;
    // Out of order on purpose: offset 6 holds the largest timestamp, so the first record at or
    // after t + 6500 is offset 6, and MAX_TIMESTAMP is offset 6, not the batch's last offset.
    let seconds = [0, 1, 2, 3, 4, 5, 20, 7, 8, 9];
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("rdkafka-offsets-for-times-{codec}");
        broker.create_topic(&topic, 1, &[]);
        // One batch: every record is enqueued well within linger.ms.
        let producer = broker.producer(&[("compression.codec", codec), ("linger.ms", "500")]);
        let recs: Vec<Rec> = seconds
            .iter()
            .enumerate()
            .map(|(i, s)| Rec {
                key: None,
                value: Some(format!("{codec} value {i} {}", "z".repeat(100)).into_bytes()),
                headers: vec![],
                timestamp: t + 1000 * s,
            })
            .collect();
        let acked = produce(&producer, &topic, Some(0), &recs);
        assert_eq!(acked, (0..10).map(|o| (0, o)).collect::<Vec<_>>());
        drop_off_thread(producer);

        let consumer = broker.consumer();
        let at = |ts: i64| offset_for_time(&consumer, &topic, ts);
        assert_eq!(
            at(t - 100_000),
            Offset::Offset(0),
            "{codec}: before everything"
        );
        assert_eq!(
            at(t + 3000),
            Offset::Offset(3),
            "{codec}: exact timestamp of offset 3"
        );
        assert_eq!(
            at(t + 3001),
            Offset::Offset(4),
            "{codec}: between offsets 3 and 4"
        );
        assert_eq!(
            at(t + 6500),
            Offset::Offset(6),
            "{codec}: the outlier comes first"
        );
        assert_eq!(
            at(t + 20_000),
            Offset::Offset(6),
            "{codec}: the max timestamp"
        );
        assert_eq!(at(t + 20_001), Offset::End, "{codec}: after every record");
        assert_eq!(
            at(MAX_TIMESTAMP),
            Offset::Offset(6),
            "{codec}: MAX_TIMESTAMP"
        );
        drop_off_thread(consumer);
    }

    // LogAppendTime: every record of the batch has the broker's append time, so the first
    // record of the batch answers both by-time and MAX_TIMESTAMP lookups.
    let topic = "rdkafka-offsets-for-times-gzip-log-append-time";
    broker.create_topic(topic, 1, &[("message.timestamp.type", "LogAppendTime")]);
    let producer = broker.producer(&[("compression.codec", "gzip"), ("linger.ms", "500")]);
    let recs: Vec<Rec> = seconds
        .iter()
        .map(|s| Rec {
            key: None,
            value: Some(format!("value {s}").into_bytes()),
            headers: vec![],
            timestamp: t + 1000 * s,
        })
        .collect();
    let before = now_ms();
    let acked = produce(&producer, topic, Some(0), &recs);
    assert_eq!(acked, (0..10).map(|o| (0, o)).collect::<Vec<_>>());
    drop_off_thread(producer);
    let consumer = broker.consumer();
    assert_eq!(
        offset_for_time(&consumer, topic, t + 6500),
        Offset::Offset(0)
    );
    assert_eq!(
        offset_for_time(&consumer, topic, before - 1000),
        Offset::Offset(0)
    );
    assert_eq!(
        offset_for_time(&consumer, topic, MAX_TIMESTAMP),
        Offset::Offset(0)
    );
    drop_off_thread(consumer);
}

#[test]
fn metadata_fields() {
    let broker = Broker::start();
    // Create a topic the way a producer does: by writing to it (auto.create.topics.enable).
    let producer = broker.producer(&[]);
    let recs = [Rec {
        key: None,
        value: Some(b"hello".to_vec()),
        headers: vec![],
        timestamp: now_ms(),
    }];
    produce(&producer, "rdkafka-metadata", None, &recs);
    drop_off_thread(producer);

    let consumer = broker.consumer();
    let md = consumer
        .fetch_metadata(None, CALL_TIMEOUT)
        .expect("fetch_metadata");
    assert_eq!(md.brokers().len(), 1, "one broker");
    let b = &md.brokers()[0];
    assert!(b.id() >= 0, "broker id {}", b.id());
    if broker.kind != "external" {
        assert_eq!(
            format!("{}:{}", b.host(), b.port()),
            broker.bootstrap,
            "advertised listener"
        );
    }

    let topic = md
        .topics()
        .iter()
        .find(|t| t.name() == "rdkafka-metadata")
        .expect("the auto-created topic is listed");
    assert_eq!(topic.error(), None, "topic error");
    assert_eq!(topic.partitions().len(), PARTITIONS, "num.partitions");
    for (i, p) in topic.partitions().iter().enumerate() {
        assert_eq!(p.id(), i as i32, "partition ids are 0..n in order");
        assert_eq!(p.error(), None, "partition {i} error");
        assert_eq!(p.leader(), b.id(), "partition {i} leader");
        assert_eq!(p.replicas(), &[b.id()], "partition {i} replicas");
        assert_eq!(p.isr(), &[b.id()], "partition {i} ISR");
    }

    // A topic that does not exist, asked for without auto-creation, comes back with an error.
    let missing = consumer
        .fetch_metadata(Some("rdkafka-no-such-topic"), CALL_TIMEOUT)
        .expect("fetch_metadata for one topic");
    assert_eq!(missing.topics().len(), 1);
    assert_eq!(
        missing.topics()[0].error().map(RDKafkaErrorCode::from),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition),
        "unknown topic without auto-creation"
    );
    drop_off_thread(consumer);
}

#[test]
fn log_append_time_topic_stamps_records_with_the_broker_clock() {
    let broker = Broker::start();
    let topic = "rdkafka-log-append-time";
    broker.create_topic(topic, 1, &[("message.timestamp.type", "LogAppendTime")]);
    let producer = broker.producer(&[]);
    let created = now_ms() - 3_600_000;
    let recs: Vec<Rec> = (0..20)
        .map(|i| Rec {
            key: None,
            value: Some(format!("v{i}").into_bytes()),
            headers: vec![],
            timestamp: created,
        })
        .collect();
    let before = now_ms();
    let acked = produce(&producer, topic, Some(0), &recs);
    let after = now_ms();
    assert_eq!(acked, (0..20).map(|o| (0, o)).collect::<Vec<_>>());
    drop_off_thread(producer);

    let consumer = broker.consumer();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(0))
        .expect("add partition");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + POLL_DEADLINE;
    let mut seen = 0;
    while seen < recs.len() {
        assert!(Instant::now() < deadline, "timed out; read {seen} records");
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Ok(m)) => {
                match m.timestamp() {
                    // The broker's clock at append, not the producer's hour-old CreateTime.
                    Timestamp::LogAppendTime(t) => assert!(
                        (before - 1000..=after + 1000).contains(&t),
                        "offset {}: log append time {t} outside [{before}, {after}]",
                        m.offset()
                    ),
                    other => panic!(
                        "offset {}: expected LogAppendTime, got {other:?}",
                        m.offset()
                    ),
                }
                seen += 1;
            }
            Some(Err(e)) => panic!("consuming {topic}: {e}"),
        }
    }
    drop_off_thread(consumer);
}

#[test]
fn max_message_bytes_rejects_larger_batches_with_message_too_large() {
    let broker = Broker::start();
    let topic = "rdkafka-max-message-bytes";
    broker.create_topic(topic, 1, &[("max.message.bytes", "1024")]);
    let producer = broker.producer(&[("compression.codec", "none"), ("linger.ms", "0")]);
    let rt = runtime();
    let big = vec![b'x'; 4000];
    let res = rt.block_on(async {
        producer
            .send_result(
                FutureRecord::<[u8], [u8]>::to(topic)
                    .partition(0)
                    .payload(&big[..]),
            )
            .map_err(|(e, _)| e)
            .expect("enqueue")
            .await
            .expect("delivery report")
    });
    match res {
        Err((e, _)) => assert_eq!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge),
            "a batch over max.message.bytes: {e}"
        ),
        Ok(d) => panic!(
            "a 4000-byte record was accepted at offset {} despite max.message.bytes=1024",
            d.offset
        ),
    }
    // A record that fits is still accepted, at offset 0: nothing of the rejected one was kept.
    let small = [b'y'; 100];
    let res = rt.block_on(async {
        producer
            .send_result(
                FutureRecord::<[u8], [u8]>::to(topic)
                    .partition(0)
                    .payload(&small[..]),
            )
            .map_err(|(e, _)| e)
            .expect("enqueue")
            .await
            .expect("delivery report")
    });
    match res {
        Ok(d) => assert_eq!((d.partition, d.offset), (0, 0)),
        Err((e, _)) => panic!("a 100-byte record was rejected: {e}"),
    }
    drop_off_thread(producer);
}
