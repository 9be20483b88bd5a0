//! Consumer groups with librdkafka (the `rdkafka` crate) against an in-process broker: two
//! balanced consumers split a topic, every record is read exactly once, offsets are committed,
//! and a later member of the group resumes from them, also across a broker restart. Plus raw
//! FindCoordinator checks (v0 and batched v4).

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::TopicPartitionList;

const PARTITIONS: i32 = 4;
const GROUP_WAIT: Duration = Duration::from_secs(60);

fn consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "10000")
        .create()
        .expect("consumer")
}

async fn create_topic(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    for r in results {
        r.unwrap();
    }
}

async fn produce(bootstrap: &str, topic: &str, values: impl Iterator<Item = String>) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for v in values {
        producer
            .send(
                FutureRecord::to(topic).key(&v).payload(&v),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
}

/// A balanced consumer polling on its own thread, recording what it reads and owns.
struct Member {
    seen: Arc<Mutex<Vec<String>>>,
    owned: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Member {
    fn start(bootstrap: &str, group: &str, topic: &str) -> Member {
        let c = consumer(bootstrap, group);
        c.subscribe(&[topic]).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let owned = Arc::new(Mutex::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, o, st) = (seen.clone(), owned.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                    let v = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
                    s.lock().unwrap().push(v);
                    c.commit_message(&m, CommitMode::Async).unwrap();
                }
                *o.lock().unwrap() = c.assignment().map(|a| a.count()).unwrap_or(0);
            }
            c.commit_consumer_state(CommitMode::Sync).ok();
        });
        Member {
            seen,
            owned,
            stop,
            thread: Some(thread),
        }
    }

    fn owned(&self) -> usize {
        *self.owned.lock().unwrap()
    }

    fn stop(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + GROUP_WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Produces one marker record to every partition, after everything produced so far.
async fn produce_markers(bootstrap: &str, topic: &str, stage: &str) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    for p in 0..PARTITIONS {
        let v = marker(stage, p);
        producer
            .send(
                FutureRecord::to(topic).partition(p).key(&v).payload(&v),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
}

fn marker(stage: &str, partition: i32) -> String {
    format!("marker-{stage}-{partition}")
}

/// Waits until the members have read the marker of every partition of `stage`. A partition is
/// read in offset order, so anything read twice or left to read before its marker has come by
/// then: stopping earlier could miss a duplicate that was still on its way.
async fn wait_for_markers(stage: &str, seen: &[Arc<Mutex<Vec<String>>>]) {
    let want: HashSet<String> = (0..PARTITIONS).map(|p| marker(stage, p)).collect();
    wait_until(
        &format!("every partition's {stage} marker was read"),
        || {
            let got: HashSet<String> = seen
                .iter()
                .flat_map(|s| s.lock().unwrap().clone())
                .filter(|v| want.contains(v))
                .collect();
            got.len() == want.len()
        },
    )
    .await;
}

fn without_markers(values: Vec<String>) -> Vec<String> {
    values
        .into_iter()
        .filter(|v| !v.starts_with("marker-"))
        .collect()
}

/// Reads with a fresh member of `group` until `expected` records came and then every
/// partition's marker (produced here, after them); returns everything read but the markers.
async fn read_all(
    bootstrap: &str,
    group: &str,
    topic: &str,
    expected: usize,
    stage: &str,
) -> Vec<String> {
    let m = Member::start(bootstrap, group, topic);
    let seen = m.seen.clone();
    wait_until("the resuming member read what was new", || {
        seen.lock().unwrap().len() >= expected
    })
    .await;
    produce_markers(bootstrap, topic, stage).await;
    wait_for_markers(stage, &[seen]).await;
    without_markers(m.stop())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_librdkafka_members_split_a_topic_and_offsets_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let overrides = ["group.initial.rebalance.delay.ms=0", "node.id=1"];
    let broker = common::start_broker(dir.path(), &overrides).await;
    let bootstrap = broker.local_addr.to_string();
    let topic = "rdkafka-groups";
    let group = "rdkafka-group";
    create_topic(&bootstrap, topic).await;

    let a = Member::start(&bootstrap, group, topic);
    let b = Member::start(&bootstrap, group, topic);
    wait_until("both members own 2 of 4 partitions", || {
        a.owned() == 2 && b.owned() == 2
    })
    .await;
    produce(&bootstrap, topic, (0..400).map(|i| format!("first-{i}"))).await;
    let (sa, sb) = (a.seen.clone(), b.seen.clone());
    wait_until("400 records read", || {
        sa.lock().unwrap().len() + sb.lock().unwrap().len() >= 400
    })
    .await;
    produce_markers(&bootstrap, topic, "first").await;
    wait_for_markers("first", &[sa, sb]).await;
    let (ra, rb) = (without_markers(a.stop()), without_markers(b.stop()));
    assert!(!ra.is_empty() && !rb.is_empty(), "both members consumed");
    let all: Vec<&String> = ra.iter().chain(rb.iter()).collect();
    let distinct: HashSet<&&String> = all.iter().collect();
    assert_eq!(
        (all.len(), distinct.len()),
        (400, 400),
        "each record read once"
    );

    // The committed offsets are the log end offsets (the 400 records and the markers).
    let c = consumer(&bootstrap, group);
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let committed = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    let sum: i64 = committed
        .elements()
        .iter()
        .map(|e| e.offset().to_raw().unwrap())
        .sum();
    assert_eq!(sum, 400 + PARTITIONS as i64);
    drop(c);

    // A new member resumes where the group left off.
    produce(&bootstrap, topic, (0..50).map(|i| format!("second-{i}"))).await;
    let second = read_all(&bootstrap, group, topic, 50, "second").await;
    let expected: HashSet<String> = (0..50).map(|i| format!("second-{i}")).collect();
    assert_eq!(second.len(), 50, "{second:?}");
    assert_eq!(second.into_iter().collect::<HashSet<_>>(), expected);

    // Restart: the offsets are replayed from __consumer_offsets.
    broker.shutdown().await.unwrap();
    let broker = common::start_broker(dir.path(), &overrides).await;
    let bootstrap = broker.local_addr.to_string();
    produce(&bootstrap, topic, (0..30).map(|i| format!("third-{i}"))).await;
    let third = read_all(&bootstrap, group, topic, 30, "third").await;
    let expected: HashSet<String> = (0..30).map(|i| format!("third-{i}")).collect();
    assert_eq!(third.len(), 30, "{third:?}");
    assert_eq!(third.into_iter().collect::<HashSet<_>>(), expected);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn find_coordinator_single_and_batched() {
    let dir = tempfile::tempdir().unwrap();
    let broker = common::start_broker(dir.path(), &["offsets.topic.num.partitions=5"]).await;
    let mut client = common::RawClient::connect(broker.local_addr).await;
    let v0: FindCoordinatorResponse = client
        .call(
            0,
            &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g")),
        )
        .await;
    assert_eq!(v0.error_code, 0);
    assert_eq!(v0.node_id.0, broker.context.node_id);
    assert_eq!(v0.port, i32::from(broker.local_addr.port()));
    let keys = ["a", "b", "c"].map(StrBytes::from_static_str).to_vec();
    let v4: FindCoordinatorResponse = client
        .call(
            4,
            &FindCoordinatorRequest::default().with_coordinator_keys(keys),
        )
        .await;
    let found: HashMap<String, (i16, i32)> = v4
        .coordinators
        .iter()
        .map(|c| (c.key.to_string(), (c.error_code, c.node_id.0)))
        .collect();
    assert_eq!(found.len(), 3);
    for (_, (err, node)) in found {
        assert_eq!((err, node), (0, broker.context.node_id));
    }
    // A transactional id's coordinator is the leader of its __transaction_state partition:
    // this node.
    let txn: FindCoordinatorResponse = client
        .call(
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_static_str("t"))
                .with_key_type(1),
        )
        .await;
    assert_eq!((txn.error_code, txn.node_id.0), (0, broker.context.node_id));
    // The internal topic was created with offsets.topic.num.partitions partitions.
    let image = broker.context.image();
    let offsets = image.topic("__consumer_offsets").expect("created");
    assert_eq!(offsets.partitions.len(), 5);
    broker.shutdown().await.unwrap();
}
