//! Read from follower (KIP-392) across three `kafkaiq` processes in racks `rack-1`..`rack-3`
//! (the [`common::cluster`] harness gives node N `broker.rack=rack-N`), with stock clients:
//! librdkafka (the `rdkafka` crate), kcat and the Java KafkaConsumer
//! (`integration/programs/RackConsumer.java`, run as a source file on Kafka 4.1.1's jars).
//!
//! - With `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`,
//!   consumers with `client.rack=rack-2` on partitions led by brokers 1 and 3 read every record,
//!   and broker 2's counters show it served them as a follower while the leaders sent no record
//!   bytes to consumers; the Java consumer's own `preferred-read-replica` metric names broker 2.
//! - Without the selector the leaders serve the same consumers and broker 2 serves nothing.
//! - Raw frames: the leader's answer names the preferred replica at once (no long poll) with
//!   empty records and the offsets; ListOffsets and OffsetForLeaderEpoch are refused by the
//!   follower. Broker 2 stopped with SIGSTOP leaves the ISR, the next fetch to the leader is
//!   served by the leader, and a Java consumer that was reading from broker 2 reads on from the
//!   leader; after SIGCONT broker 2 rejoins the ISR and is named again.
//! - A fetch past a follower's log end gets OFFSET_OUT_OF_RANGE from the follower, and a
//!   librdkafka consumer and a Java consumer sent there by a seek go back to the leader
//!   (librdkafka's statistics, the Java `preferred-read-replica` metric cleared to -1) and read
//!   on from that offset, with no offset reset.
//!
//! - Under a steady acks=all load, produce → consume latency reading from the leader and from a
//!   follower, and the follower's high-watermark lag.
//!
//! Figures are printed as `rff:` lines (`--nocapture`). Every wait has a deadline.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::cluster::{Cluster, ClusterKind, NodePorts, PartitionState};
use common::RawClient;

const NODES: i32 = 3;
const DEADLINE: Duration = Duration::from_secs(60);
const SELECTOR: &str =
    "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector";
/// The rack of broker 2, where the consumers of these tests live.
const RACK: &str = "rack-2";
const FOLLOWER: i32 = 2;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

fn start(name: &str, settings: &[&str], node: impl Fn(&NodePorts) -> Vec<String>) -> Cluster {
    let mut all = vec!["offsets.topic.num.partitions=1"];
    all.extend_from_slice(settings);
    // KafkaIQ only: the counters checked here are KafkaIQ's.
    let mut cluster = Cluster::start_with(ClusterKind::KafkaIq, name, NODES, &all, node);
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    cluster
}

async fn partitions_seen_by_leaders(
    cluster: &Cluster,
    topic: &str,
    what: &str,
    via: i32,
    condition: impl Fn(&BTreeMap<i32, PartitionState>) -> bool,
) -> BTreeMap<i32, PartitionState> {
    let condition = &condition;
    cluster
        .wait_for(what, DEADLINE, || async move {
            cluster
                .partitions_seen_by(via, topic)
                .await
                .filter(condition)
        })
        .await
}

/// A replication factor 3 topic with full ISRs; returns its partitions.
async fn create_topic(
    cluster: &Cluster,
    name: &str,
    partitions: i32,
) -> BTreeMap<i32, PartitionState> {
    cluster
        .wait_for(&format!("topic {name} created"), DEADLINE, || async {
            for id in cluster.running() {
                if let Some(0 | 36) = cluster
                    .create_topic_configured(id, name, partitions, 3, &[])
                    .await
                {
                    return Some(());
                }
            }
            None
        })
        .await;
    partitions_seen_by_leaders(cluster, name, &format!("{name} has full ISRs"), 1, |p| {
        p.len() == partitions as usize && p.values().all(|p| p.leader > 0 && p.isr.len() == 3)
    })
    .await
}

/// The partitions of `topic` that broker 2 follows (led by another broker).
fn led_elsewhere(partitions: &BTreeMap<i32, PartitionState>) -> Vec<i32> {
    let p: Vec<i32> = partitions
        .iter()
        .filter(|(_, s)| s.leader != FOLLOWER)
        .map(|(p, _)| *p)
        .collect();
    assert!(
        !p.is_empty(),
        "every partition is led by broker 2: {partitions:?}"
    );
    p
}

fn producer(cluster: &Cluster, acks: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("acks", acks)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap()
}

/// `count` records of about 100 bytes to each of `partitions`, each acknowledged.
async fn produce(
    cluster: &Cluster,
    topic: &str,
    partitions: &[i32],
    from: usize,
    count: usize,
    acks: &str,
) {
    let producer = producer(cluster, acks);
    let mut pending = Vec::new();
    for &p in partitions {
        for i in from..from + count {
            let value = format!("p{p}-{i:06}-{}", "x".repeat(90));
            let key = format!("k{i}");
            pending.push(
                producer
                    .send_result(
                        FutureRecord::to(topic)
                            .partition(p)
                            .key(&key)
                            .payload(&value),
                    )
                    .map_err(|(e, _)| e)
                    .unwrap(),
            );
        }
    }
    for f in pending {
        f.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
}

/// `GET /metrics` of node `id`.
async fn scrape(cluster: &Cluster, id: i32) -> String {
    let addr: SocketAddr = cluster.nodes[&id].http_addr();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out))
        .await
        .expect("a /metrics answer in 5 s")
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// What node `id` served by Fetch, from its `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Served {
    consumers_as_leader: u64,
    consumers_as_follower: u64,
    followers: u64,
}

impl Served {
    fn minus(self, before: Served) -> Served {
        Served {
            consumers_as_leader: self.consumers_as_leader - before.consumers_as_leader,
            consumers_as_follower: self.consumers_as_follower - before.consumers_as_follower,
            followers: self.followers - before.followers,
        }
    }
}

async fn served(cluster: &Cluster, id: i32) -> Served {
    let text = scrape(cluster, id).await;
    let sample = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| {
                let (s, v) = l.rsplit_once(' ')?;
                (s == series).then(|| v.parse::<f64>().unwrap() as u64)
            })
            .unwrap_or_else(|| panic!("node {id}: no {series} in /metrics"))
    };
    Served {
        consumers_as_leader: sample("kafkaiq_fetch_consumer_bytes_total{role=\"leader\"}"),
        consumers_as_follower: sample("kafkaiq_fetch_consumer_bytes_total{role=\"follower\"}"),
        followers: sample("kafka_server_brokertopicmetrics_replicationbytesout_total"),
    }
}

async fn served_all(cluster: &Cluster) -> BTreeMap<i32, Served> {
    let mut out = BTreeMap::new();
    for id in 1..=NODES {
        out.insert(id, served(cluster, id).await);
    }
    out
}

fn delta(after: &BTreeMap<i32, Served>, before: &BTreeMap<i32, Served>) -> BTreeMap<i32, Served> {
    after
        .iter()
        .map(|(id, a)| (*id, a.minus(before[id])))
        .collect()
}

/// The record bytes of `partitions` as broker 2 holds them on disk (what a full read serves).
fn log_bytes(cluster: &Cluster, topic: &str, partitions: &[i32]) -> u64 {
    partitions
        .iter()
        .map(|p| cluster.log_bytes(FOLLOWER, topic, *p).len() as u64)
        .sum()
}

/// Waits until every replica of `partitions` holds `records` records with a high watermark
/// covering them, so a follower can serve all of them.
async fn wait_replicated(cluster: &Cluster, topic: &str, partitions: &[i32], records: i64) {
    for &p in partitions {
        for id in cluster.running() {
            cluster
                .wait_for(
                    &format!("{topic}-{p} high watermark {records} on node {id}"),
                    DEADLINE,
                    || async move {
                        let hw = consumer_fetch(cluster, id, topic, p, records, "", 0)
                            .await?
                            .high_watermark;
                        (hw >= records).then_some(())
                    },
                )
                .await;
        }
    }
}

/// One partition's answer to a raw Fetch (v12) as a consumer in `rack`.
struct Answer {
    error_code: i16,
    high_watermark: i64,
    log_start_offset: i64,
    last_stable_offset: i64,
    preferred_read_replica: i32,
    records: usize,
}

async fn consumer_fetch(
    cluster: &Cluster,
    id: i32,
    topic: &str,
    partition: i32,
    offset: i64,
    rack: &str,
    max_wait_ms: i32,
) -> Option<Answer> {
    consumer_fetch_at(12, cluster, id, topic, partition, offset, rack, max_wait_ms).await
}

/// [`consumer_fetch`] at Fetch `version` (the rack is sent from v11 only).
#[allow(clippy::too_many_arguments)]
async fn consumer_fetch_at(
    version: i16,
    cluster: &Cluster,
    id: i32,
    topic: &str,
    partition: i32,
    offset: i64,
    rack: &str,
    max_wait_ms: i32,
) -> Option<Answer> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_rack_id(StrBytes::from_string(rack.to_owned()))
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(1 << 20)])]);
    let r: FetchResponse = client
        .try_call(
            version,
            &request,
            Duration::from_millis(max_wait_ms as u64 + 2_000),
        )
        .await?;
    let p = r.responses.first()?.partitions.first()?;
    Some(Answer {
        error_code: p.error_code,
        high_watermark: p.high_watermark,
        log_start_offset: p.log_start_offset,
        last_stable_offset: p.last_stable_offset,
        preferred_read_replica: p.preferred_read_replica.0,
        records: p.records.as_ref().map_or(0, |r| r.len()),
    })
}

/// Which broker librdkafka says it fetches each partition from, as its statistics report it,
/// with consecutive repeats dropped.
#[derive(Default)]
struct FetchingFrom(std::sync::Mutex<BTreeMap<i32, Vec<i32>>>);

impl ClientContext for FetchingFrom {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut seen = self.0.lock().unwrap();
        for topic in statistics.topics.values() {
            for (p, s) in &topic.partitions {
                let v = seen.entry(*p).or_default();
                if *p >= 0 && s.broker >= 0 && v.last() != Some(&s.broker) {
                    v.push(s.broker);
                }
            }
        }
    }
}

impl ConsumerContext for FetchingFrom {}

fn rdkafka_config(cluster: &Cluster, rack: &str) -> ClientConfig {
    ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("group.id", format!("rff-{rack}"))
        .set("client.rack", rack)
        .set("enable.auto.commit", "false")
        // An offset reset is an error here, never a silent jump.
        .set("auto.offset.reset", "error")
        .set("fetch.wait.max.ms", "100")
        .clone()
}

fn rdkafka_consumer(cluster: &Cluster, rack: &str) -> BaseConsumer {
    rdkafka_config(cluster, rack).create().unwrap()
}

/// librdkafka with `client.rack`: reads `partitions` from `from` until each has `until`,
/// checking offsets are contiguous; returns the records read.
fn rdkafka_read(
    cluster: &Cluster,
    topic: &str,
    partitions: &[i32],
    rack: &str,
    until: i64,
) -> usize {
    tokio::task::block_in_place(|| {
        let consumer = rdkafka_consumer(cluster, rack);
        let mut tpl = TopicPartitionList::new();
        for &p in partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        let mut next: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
        let deadline = Instant::now() + DEADLINE;
        let mut read = 0;
        while next.values().any(|n| *n < until) {
            assert!(
                Instant::now() < deadline,
                "librdkafka read only {next:?} of {until}"
            );
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    assert_eq!(
                        m.offset(),
                        next[&m.partition()],
                        "partition {}",
                        m.partition()
                    );
                    next.insert(m.partition(), m.offset() + 1);
                    read += 1;
                }
                Some(Err(e)) => panic!("librdkafka consumer error: {e}"),
                None => {}
            }
        }
        drop_consumer(consumer);
        read
    })
}

/// Dropping a librdkafka consumer can hang: drop it on a thread, bounded.
fn drop_consumer<C: ConsumerContext + 'static>(consumer: BaseConsumer<C>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(consumer);
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(10));
}

/// kcat (Debian's, librdkafka 2.0.2) with `-X client.rack=RACK`: every record of `partition`
/// up to the end; returns the offsets printed.
fn kcat_read(cluster: &Cluster, topic: &str, partition: i32, rack: &str) -> Vec<i64> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let kcat = Command::new("bash")
        .arg(root.join("integration/kcat.sh"))
        .output()
        .expect("integration/kcat.sh");
    assert!(
        kcat.status.success(),
        "kcat.sh: kcat is missing and could not be installed"
    );
    let kcat = String::from_utf8_lossy(&kcat.stdout).trim().to_owned();
    let out = Command::new(kcat)
        .args(["-C", "-b", &cluster.bootstrap(), "-t", topic])
        .args([
            "-p",
            &partition.to_string(),
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o\\n",
        ])
        .args(["-X", &format!("client.rack={rack}")])
        .output()
        .expect("run kcat");
    assert!(
        out.status.success(),
        "kcat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// The Java consumer (`integration/programs/RackConsumer.java`) as a command: reads
/// `partitions` until `expect` records each, with further consumer properties `extra`.
fn java_command(
    cluster: &Cluster,
    topic: &str,
    partitions: &[i32],
    rack: &str,
    expect: i64,
    extra: &[&str],
) -> Command {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let libs = Command::new("bash")
        .arg(root.join("integration/kafka-libs.sh"))
        .output()
        .expect("integration/kafka-libs.sh");
    assert!(libs.status.success(), "kafka-libs.sh failed");
    let libs = String::from_utf8_lossy(&libs.stdout)
        .trim()
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let list: Vec<String> = partitions.iter().map(i32::to_string).collect();
    let mut c = Command::new("java");
    c.args([
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        &format!("{libs}/*"),
    ])
    .arg(root.join("integration/programs/RackConsumer.java"))
    .args([&cluster.bootstrap(), topic, &list.join(","), rack])
    .args([&expect.to_string(), "60000"])
    .args(extra);
    c
}

/// Per partition, the records the Java consumer read and its `preferred-read-replica` metric.
fn java_results(out: std::process::Output) -> BTreeMap<i32, (i64, String)> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "RackConsumer failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 6 && w[0] == "partition").then(|| {
                (
                    w[1].parse().unwrap(),
                    (w[3].parse().unwrap(), w[5].to_owned()),
                )
            })
        })
        .collect()
}

fn java_read(
    cluster: &Cluster,
    topic: &str,
    partitions: &[i32],
    rack: &str,
    expect: i64,
) -> BTreeMap<i32, (i64, String)> {
    let out = java_command(cluster, topic, partitions, rack, expect, &[])
        .output()
        .expect("run java");
    java_results(out)
}

const RECORDS: i64 = 300;

/// A stock client reading the partitions of a test.
type ClientRead<'a> = Box<dyn Fn(&Cluster) + 'a>;

/// ListOffsets (v7, latest) and OffsetForLeaderEpoch (v4, as a consumer) of one partition
/// through node `id`: the two error codes.
async fn leader_only_answers(
    cluster: &Cluster,
    id: i32,
    topic: &str,
    partition: i32,
) -> (i16, i16) {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::{ListOffsetsRequest, OffsetForLeaderEpochRequest};
    let name = || TopicName(StrBytes::from_string(topic.to_owned()));
    let mut client = RawClient::connect(cluster.nodes[&id].client_addr()).await;
    let list = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name())
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(-1)])]);
    let list = client.call(7, &list).await.topics[0].partitions[0].error_code;
    let epochs = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(name())
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(0)])]);
    let epochs = client.call(4, &epochs).await.topics[0].partitions[0].error_code;
    (list, epochs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rack_2_consumers_read_from_broker_2_with_the_selector_and_from_leaders_without() {
    // With the selector.
    let mut cluster = start("rff-selector", &[SELECTOR], |_| Vec::new());
    let topic = "rff";
    let partitions = create_topic(&cluster, topic, 3).await;
    let elsewhere = led_elsewhere(&partitions);
    produce(&cluster, topic, &elsewhere, 0, RECORDS as usize, "all").await;
    wait_replicated(&cluster, topic, &elsewhere, RECORDS).await;
    let bytes = log_bytes(&cluster, topic, &elsewhere);

    // The leader names broker 2 at once, with no records and the offsets, even with a long
    // max_wait_ms (no long poll before the redirect).
    for &p in &elsewhere {
        let leader = partitions[&p].leader;
        let started = Instant::now();
        let a = consumer_fetch(&cluster, leader, topic, p, 0, RACK, 10_000)
            .await
            .unwrap();
        let took = started.elapsed();
        assert_eq!(
            (a.error_code, a.preferred_read_replica, a.records),
            (0, FOLLOWER, 0),
            "partition {p}"
        );
        assert_eq!(
            (a.high_watermark, a.last_stable_offset, a.log_start_offset),
            (RECORDS, RECORDS, 0)
        );
        assert!(took < Duration::from_secs(5), "redirect took {took:?}");
        // No client rack, or the leader's own rack: the leader serves.
        let a = consumer_fetch(&cluster, leader, topic, p, 0, "", 0)
            .await
            .unwrap();
        assert_eq!((a.preferred_read_replica, a.records > 0), (-1, true));
        let own = format!("rack-{leader}");
        let a = consumer_fetch(&cluster, leader, topic, p, 0, &own, 0)
            .await
            .unwrap();
        assert_eq!((a.preferred_read_replica, a.records > 0), (-1, true));
        // Before v11 a fetch carries no client metadata: the leader serves it, and a follower
        // refuses it (Kafka's fetchOnlyLeader).
        let a = consumer_fetch_at(10, &cluster, leader, topic, p, 0, RACK, 0)
            .await
            .unwrap();
        assert_eq!(
            (a.error_code, a.preferred_read_replica, a.records > 0),
            (0, -1, true)
        );
        let a = consumer_fetch_at(10, &cluster, FOLLOWER, topic, p, 0, RACK, 0)
            .await
            .unwrap();
        assert_eq!(a.error_code, NOT_LEADER_OR_FOLLOWER);
        // ListOffsets and OffsetForLeaderEpoch stay leader-only, as in Kafka.
        assert_eq!(
            leader_only_answers(&cluster, FOLLOWER, topic, p).await,
            (NOT_LEADER_OR_FOLLOWER, NOT_LEADER_OR_FOLLOWER)
        );
        assert_eq!(
            leader_only_answers(&cluster, leader, topic, p).await,
            (0, 0)
        );
        // A follower never redirects; it serves.
        let a = consumer_fetch(&cluster, FOLLOWER, topic, p, 0, "rack-1", 0)
            .await
            .unwrap();
        assert_eq!(
            (a.error_code, a.preferred_read_replica, a.records > 0),
            (0, -1, true)
        );
    }

    let clients: [(&str, ClientRead); 3] = [
        (
            "librdkafka",
            Box::new(|c: &Cluster| {
                let n = rdkafka_read(c, topic, &elsewhere, RACK, RECORDS);
                assert_eq!(n as i64, RECORDS * elsewhere.len() as i64);
            }),
        ),
        (
            "kcat",
            Box::new(|c: &Cluster| {
                for &p in &elsewhere {
                    assert_eq!(
                        kcat_read(c, topic, p, RACK),
                        (0..RECORDS).collect::<Vec<_>>()
                    );
                }
            }),
        ),
        (
            "java",
            Box::new(|c: &Cluster| {
                let got = java_read(c, topic, &elsewhere, RACK, RECORDS);
                for &p in &elsewhere {
                    assert_eq!(
                        got[&p],
                        (RECORDS, FOLLOWER.to_string()),
                        "partition {p}: {got:?}"
                    );
                }
            }),
        ),
    ];
    for (name, read) in &clients {
        let before = served_all(&cluster).await;
        read(&cluster);
        let d = delta(&served_all(&cluster).await, &before);
        println!("rff: selector set, {name} in {RACK}: {bytes} record bytes; served {d:?}");
        assert!(
            d[&FOLLOWER].consumers_as_follower >= bytes,
            "{name}: broker 2 served {} of {bytes} bytes: {d:?}",
            d[&FOLLOWER].consumers_as_follower
        );
        for &p in &elsewhere {
            let leader = partitions[&p].leader;
            assert_eq!(
                d[&leader].consumers_as_leader, 0,
                "{name}: leader {leader} served records: {d:?}"
            );
        }
        let crossing: u64 = d
            .iter()
            .filter(|(id, _)| **id != FOLLOWER)
            .map(|(_, s)| s.consumers_as_leader + s.consumers_as_follower)
            .sum();
        println!(
            "rff: selector set, {name}: consumer bytes crossing racks {crossing}, within {RACK} {}",
            d[&FOLLOWER].consumers_as_follower + d[&FOLLOWER].consumers_as_leader
        );
    }
    // A consumer long-polling broker 2 at its high watermark is answered with the next write,
    // long before max_wait_ms: the leader's high watermark reaches broker 2 in one round trip
    // and wakes the parked fetch.
    let p = elsewhere[0];
    let parked = {
        let cluster = &cluster;
        async move {
            let started = Instant::now();
            let a = consumer_fetch(cluster, FOLLOWER, topic, p, RECORDS, RACK, 20_000)
                .await
                .unwrap();
            (a, started.elapsed())
        }
    };
    // Whether the write lands before the fetch parks or after, the answer carries it.
    let one = [p];
    let write = produce(&cluster, topic, &one, RECORDS as usize, 1, "all");
    let ((a, took), ()) = tokio::join!(parked, write);
    println!("rff: a fetch parked on broker 2 at its high watermark answered after {took:?}");
    assert_eq!((a.error_code, a.high_watermark), (0, RECORDS + 1));
    assert!(a.records > 0 && took < Duration::from_secs(15), "{took:?}");
    cluster.stop_all();

    // Without the selector: the leaders serve, broker 2 serves nothing to these consumers.
    let mut cluster = start("rff-leader", &[], |_| Vec::new());
    let partitions = create_topic(&cluster, topic, 3).await;
    let elsewhere = led_elsewhere(&partitions);
    produce(&cluster, topic, &elsewhere, 0, RECORDS as usize, "all").await;
    wait_replicated(&cluster, topic, &elsewhere, RECORDS).await;
    let bytes = log_bytes(&cluster, topic, &elsewhere);
    for &p in &elsewhere {
        let a = consumer_fetch(&cluster, partitions[&p].leader, topic, p, 0, RACK, 0)
            .await
            .unwrap();
        assert_eq!(
            (a.error_code, a.preferred_read_replica, a.records > 0),
            (0, -1, true)
        );
    }
    let before = served_all(&cluster).await;
    assert_eq!(
        rdkafka_read(&cluster, topic, &elsewhere, RACK, RECORDS) as i64,
        RECORDS * elsewhere.len() as i64
    );
    let got = java_read(&cluster, topic, &elsewhere, RACK, RECORDS);
    for &p in &elsewhere {
        assert_eq!(
            got[&p],
            (RECORDS, "-1".to_owned()),
            "partition {p}: {got:?}"
        );
    }
    let d = delta(&served_all(&cluster).await, &before);
    println!(
        "rff: no selector, librdkafka and java in {RACK}: 2 x {bytes} record bytes; served {d:?}"
    );
    assert_eq!(d[&FOLLOWER].consumers_as_follower, 0, "{d:?}");
    let from_leaders: u64 = d.values().map(|s| s.consumers_as_leader).sum();
    assert!(from_leaders >= 2 * bytes, "{d:?}");
    println!("rff: no selector: consumer bytes crossing racks {from_leaders}, within {RACK} 0");
    cluster.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_leaves_the_isr_and_is_no_longer_chosen_then_is_again() {
    let mut cluster = start(
        "rff-sigstop",
        &[
            SELECTOR,
            "replica.lag.time.max.ms=2000",
            "broker.session.timeout.ms=6000",
            "broker.heartbeat.interval.ms=1000",
        ],
        |_| Vec::new(),
    );
    let topic = "rff-stop";
    let partitions = create_topic(&cluster, topic, 3).await;
    let p = led_elsewhere(&partitions)[0];
    let leader = partitions[&p].leader;
    produce(&cluster, topic, &[p], 0, 50, "all").await;
    wait_replicated(&cluster, topic, &[p], 50).await;
    let a = consumer_fetch(&cluster, leader, topic, p, 0, RACK, 0)
        .await
        .unwrap();
    assert_eq!(a.preferred_read_replica, FOLLOWER);

    // A Java consumer in rack-2 reads through broker 2 while it runs.
    let java = java_command(
        &cluster,
        topic,
        &[p],
        RACK,
        100,
        &["request.timeout.ms=3000"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("run java");
    let bytes = log_bytes(&cluster, topic, &[p]);
    cluster
        .wait_for(
            "the Java consumer reading from broker 2",
            DEADLINE,
            || async {
                (served(&cluster, FOLLOWER).await.consumers_as_follower >= bytes).then_some(())
            },
        )
        .await;
    let leader_before = served(&cluster, leader).await;

    // Stopped with nothing being written, broker 2 is still caught up (its log end is the
    // leader's, as Kafka counts it), so it leaves the ISR when the controller fences it after
    // broker.session.timeout.ms.
    cluster.signal(FOLLOWER, libc::SIGSTOP);
    let stopped = Instant::now();
    partitions_seen_by_leaders(&cluster, topic, "broker 2 out of the ISR", leader, |ps| {
        !ps[&p].isr.contains(&FOLLOWER)
    })
    .await;
    println!(
        "rff: stopped follower left the ISR after {:?}",
        stopped.elapsed()
    );
    // The next fetch to the leader is served by the leader (no same-rack ISR replica).
    let a = consumer_fetch(&cluster, leader, topic, p, 0, RACK, 0)
        .await
        .unwrap();
    assert_eq!(
        (a.error_code, a.preferred_read_replica, a.records > 0),
        (0, -1, true)
    );
    // Writes go on without it; the Java consumer moves off broker 2 and reads them from the
    // leader (it gives up on the silent broker after request.timeout.ms and, once broker 2 is
    // fenced and gone from the metadata, fetches from the leader).
    produce(&cluster, topic, &[p], 50, 50, "all").await;
    let moved = Instant::now();
    let out = tokio::task::block_in_place(|| java.wait_with_output()).expect("java");
    let got = java_results(out);
    println!(
        "rff: the Java consumer read on from the leader {:?} after the last write: {got:?}",
        moved.elapsed()
    );
    assert_eq!(got[&p].0, 100, "{got:?}");
    let d = served(&cluster, leader).await.minus(leader_before);
    assert!(
        d.consumers_as_leader > 0,
        "the leader served the Java consumer: {d:?}"
    );
    // A new rack-2 consumer reads everything from the leader.
    let before = served(&cluster, leader).await;
    assert_eq!(rdkafka_read(&cluster, topic, &[p], RACK, 100), 100);
    let d = served(&cluster, leader).await.minus(before);
    assert!(d.consumers_as_leader > 0, "{d:?}");

    cluster.signal(FOLLOWER, libc::SIGCONT);
    partitions_seen_by_leaders(&cluster, topic, "broker 2 back in the ISR", leader, |ps| {
        ps[&p].isr.contains(&FOLLOWER)
    })
    .await;
    // Back in the ISR and holding the offset: chosen again on the next fetch.
    cluster
        .wait_for("broker 2 preferred again", DEADLINE, || async {
            let a = consumer_fetch(&cluster, leader, topic, p, 100, RACK, 0).await?;
            (a.preferred_read_replica == FOLLOWER).then_some(())
        })
        .await;
    cluster.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_past_the_follower_log_end_sends_the_consumer_back_to_the_leader_without_reset() {
    // Broker 2's fetches wait at the leader for 10 s unless 100 MB arrive: after it has just
    // fetched, its log lags the leader's through the next acks=1 write for that long, which is
    // the window this test works in.
    let mut cluster = start("rff-oor", &[SELECTOR], |n| {
        if n.id == FOLLOWER {
            vec![
                "replica.fetch.min.bytes=100000000".into(),
                "replica.fetch.wait.max.ms=10000".into(),
            ]
        } else {
            Vec::new()
        }
    });
    let topic = "rff-oor";
    let partitions = create_topic(&cluster, topic, 3).await;
    let p = led_elsewhere(&partitions)[0];
    let leader = partitions[&p].leader;
    let rt = tokio::runtime::Handle::current();
    let cluster_ref = &cluster;
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + 3 * DEADLINE;
        let consumer: BaseConsumer<FetchingFrom> = rdkafka_config(cluster_ref, RACK)
            .set("statistics.interval.ms", "100")
            .create_with_context(FetchingFrom::default())
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let mut next = 0i64;
        let read_to = |until: i64, next: &mut i64| {
            while *next < until {
                assert!(Instant::now() < deadline, "read to {next} of {until}");
                match consumer.poll(Duration::from_millis(200)) {
                    Some(Ok(m)) => {
                        assert_eq!(m.offset(), *next, "contiguous offsets");
                        *next += 1;
                    }
                    Some(Err(e)) => panic!("consumer error (an offset reset?): {e}"),
                    None => {}
                }
            }
        };
        // Twenty records, read through broker 2 (it is in the ISR and holds them).
        rt.block_on(produce(cluster_ref, topic, &[p], 0, 20, "1"));
        read_to(20, &mut next);
        let s = rt.block_on(served(cluster_ref, FOLLOWER));
        assert!(
            s.consumers_as_follower > 0,
            "broker 2 served the first read: {s:?}"
        );

        // Five more: read once broker 2 has them and knows the high watermark covers them,
        // which means it has just fetched and its next fetch waits at the leader.
        rt.block_on(produce(cluster_ref, topic, &[p], 20, 5, "1"));
        read_to(25, &mut next);
        // Five the leader has and broker 2 does not, for the next 10 s.
        rt.block_on(produce(cluster_ref, topic, &[p], 25, 5, "1"));
        let a = rt
            .block_on(consumer_fetch(cluster_ref, FOLLOWER, topic, p, 30, RACK, 0))
            .unwrap();
        assert_eq!(
            a.error_code, OFFSET_OUT_OF_RANGE,
            "offset 30 is past broker 2's log end"
        );
        let before = rt.block_on(served(cluster_ref, leader));
        // The consumer's preferred replica is broker 2; offset 30 there is out of range.
        consumer
            .seek(topic, p, Offset::Offset(30), Duration::from_secs(5))
            .unwrap();
        rt.block_on(produce(cluster_ref, topic, &[p], 30, 5, "1"));
        next = 30;
        read_to(35, &mut next);
        let d = rt.block_on(served(cluster_ref, leader)).minus(before);
        let fetching_from = consumer
            .context()
            .0
            .lock()
            .unwrap()
            .get(&p)
            .cloned()
            .unwrap_or_default();
        println!("rff: after the seek past broker 2's log end, leader {leader} served {d:?}; librdkafka fetched from {fetching_from:?}");
        // From broker 2, then (OFFSET_OUT_OF_RANGE) from the leader.
        let on_follower = fetching_from.iter().position(|b| *b == FOLLOWER);
        assert!(
            on_follower.is_some_and(|i| fetching_from[i..].contains(&leader)),
            "librdkafka went from broker 2 back to leader {leader}: {fetching_from:?}"
        );
        drop_consumer(consumer);
    });

    // The same with the Java consumer: on OFFSET_OUT_OF_RANGE from broker 2 it clears its
    // preferred read replica (its metric shows -1), fetches from the leader and reads on from
    // the offset it sought, no reset (auto.offset.reset=none would make a reset an error).
    tokio::task::block_in_place(|| {
        use std::io::{BufRead, Write};
        use std::process::Stdio;
        let mut java = java_command(cluster_ref, topic, &[p], RACK, 35, &["--seek-from-stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run java");
        let stdout = java.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let reached = rx
            .recv_timeout(DEADLINE)
            .expect("the Java consumer read to 35");
        // Read through broker 2, its preferred read replica.
        assert_eq!(reached, "reached 35 preferred-read-replica 2");
        // Five records broker 2 gets along with the high watermark covering them, so it has
        // just fetched; then five it will not have for the next 10 s.
        rt.block_on(produce(cluster_ref, topic, &[p], 35, 5, "1"));
        rt.block_on(cluster_ref.wait_for(
            "broker 2's high watermark at 40",
            3 * DEADLINE,
            || async {
                let a = consumer_fetch(cluster_ref, FOLLOWER, topic, p, 40, RACK, 0).await?;
                (a.error_code == 0 && a.high_watermark >= 40).then_some(())
            },
        ));
        rt.block_on(produce(cluster_ref, topic, &[p], 40, 5, "1"));
        let a = rt
            .block_on(consumer_fetch(cluster_ref, FOLLOWER, topic, p, 45, RACK, 0))
            .unwrap();
        assert_eq!(
            a.error_code, OFFSET_OUT_OF_RANGE,
            "offset 45 is past broker 2's log end"
        );
        writeln!(java.stdin.as_mut().unwrap(), "seek 45 50").unwrap();
        rt.block_on(produce(cluster_ref, topic, &[p], 45, 5, "1"));
        let status = java.wait().unwrap();
        let lines: Vec<String> = rx.try_iter().collect();
        println!("rff: the Java consumer after its seek past broker 2's log end: {lines:?}");
        assert!(status.success(), "RackConsumer: {lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("partition {p} records 50 "))),
            "{lines:?}"
        );
        let seen = lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("preferred-read-replica-seen {p} ")))
            .expect("the metric values after the seek");
        let seen: Vec<&str> = seen.split(',').collect();
        // Cleared by the out-of-range answer (by the first sample after the seek, or later).
        assert!(seen.contains(&"-1"), "preferred replica cleared: {seen:?}");
    });
    cluster.stop_all();
}

/// Percentile `q` (0..=1) of sorted `v`.
fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// One steady-load run: a producer (acks=all, no linger) sends `rate` records a second to one
/// partition led by broker 1 for `duration`; a consumer in rack-1 reads from the leader, one
/// in rack-2 from follower 2. Each record carries its send time; returns the produce → consume
/// latencies (ms) of each consumer and the follower's high-watermark lag behind the leader's
/// in records, sampled every 20 ms.
async fn steady_load(
    cluster: &Cluster,
    topic: &str,
    p: i32,
    rate: u32,
    duration: Duration,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let base = Instant::now();
    let total = (rate as f64 * duration.as_secs_f64()) as usize;
    let start_offset = cluster
        .wait_for("the leader's high watermark", DEADLINE, || async {
            let a = consumer_fetch(cluster, 1, topic, p, 0, "", 0).await?;
            (a.error_code == 0).then_some(a.high_watermark)
        })
        .await;
    let warm = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let readers: Vec<_> = ["rack-1", RACK]
        .into_iter()
        .map(|rack| {
            let c = rdkafka_consumer(cluster, rack);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, p, Offset::Offset(start_offset))
                .unwrap();
            c.assign(&tpl).unwrap();
            let warm = warm.clone();
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut warmed = false;
                let deadline = Instant::now() + duration + DEADLINE;
                while latencies.len() < total && Instant::now() < deadline {
                    if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                        let payload = std::str::from_utf8(m.payload().unwrap()).unwrap();
                        // Warm-up records (connections, metadata, the redirect) do not count.
                        match payload.parse::<u64>() {
                            Ok(sent) => latencies
                                .push((base.elapsed().as_micros() as u64 - sent) as f64 / 1000.0),
                            Err(_) if !warmed => {
                                warmed = true;
                                warm.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            }
                            Err(_) => {}
                        }
                    }
                }
                drop_consumer(c);
                latencies
            })
        })
        .collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("acks", "all")
        .set("linger.ms", "0")
        .create()
        .unwrap();
    // Warm up until both consumers have read a record.
    let warm_deadline = Instant::now() + DEADLINE;
    while warm.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(Instant::now() < warm_deadline, "consumers never warmed up");
        producer
            .send(
                FutureRecord::<(), _>::to(topic)
                    .partition(p)
                    .payload("warm-up"),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut lag = Vec::new();
    let first = Instant::now();
    let mut next_sample = first;
    let mut pending = Vec::new();
    for i in 0..total {
        let at = first + interval * i as u32;
        while Instant::now() < at {
            if Instant::now() >= next_sample {
                let f = consumer_fetch(cluster, FOLLOWER, topic, p, 0, "rack-1", 0)
                    .await
                    .unwrap()
                    .high_watermark;
                let l = consumer_fetch(cluster, 1, topic, p, 0, "", 0)
                    .await
                    .unwrap()
                    .high_watermark;
                lag.push((l - f).max(0) as f64);
                next_sample += Duration::from_millis(20);
            }
            tokio::time::sleep_until((at.min(next_sample)).into()).await;
        }
        let value = base.elapsed().as_micros().to_string();
        pending.push(
            producer
                .send_result(
                    FutureRecord::<(), _>::to(topic)
                        .partition(p)
                        .payload(&value),
                )
                .map_err(|(e, _)| e)
                .unwrap(),
        );
    }
    for f in pending {
        f.await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    let mut out: Vec<Vec<f64>> = Vec::new();
    for r in readers {
        let mut v = tokio::task::block_in_place(|| r.join().unwrap());
        assert_eq!(v.len(), total, "a consumer missed records");
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        out.push(v);
    }
    lag.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let follower = out.pop().unwrap();
    let leader = out.pop().unwrap();
    (leader, follower, lag)
}

/// The figures of the report: produce → consume latency reading from the leader and from a
/// follower, and the follower's high-watermark lag, at a steady 200 and 20 records a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_reads_under_steady_load_latency_and_high_watermark_lag() {
    let mut cluster = start("rff-latency", &[SELECTOR], |_| Vec::new());
    let topic = "rff-latency";
    let partitions = create_topic(&cluster, topic, 3).await;
    let Some((&p, _)) = partitions.iter().find(|(_, s)| s.leader == 1) else {
        panic!("no partition led by broker 1: {partitions:?}");
    };
    let before = served(&cluster, FOLLOWER).await;
    for rate in [200, 20] {
        let (leader, follower, lag) =
            steady_load(&cluster, topic, p, rate, Duration::from_secs(8)).await;
        println!(
            "rff: {rate}/s: e2e latency ms leader read p50 {:.1} p99 {:.1}, follower read p50 {:.1} p99 {:.1}; follower hw lag records p50 {} p99 {} max {}",
            percentile(&leader, 0.5),
            percentile(&leader, 0.99),
            percentile(&follower, 0.5),
            percentile(&follower, 0.99),
            percentile(&lag, 0.5),
            percentile(&lag, 0.99),
            lag.last().copied().unwrap_or(0.0),
        );
        // The follower serves within a replica fetch round of the leader.
        assert!(
            percentile(&follower, 0.5) < percentile(&leader, 0.5) + 500.0,
            "follower reads lag leader reads by more than replica.fetch.wait.max.ms"
        );
    }
    let d = served(&cluster, FOLLOWER).await.minus(before);
    assert!(d.consumers_as_follower > 0, "{d:?}");
    cluster.stop_all();
}
