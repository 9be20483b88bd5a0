//! Replication across three `kafkaiq` processes on loopback (the [`common::cluster`] harness),
//! with librdkafka (the `rdkafka` crate) as the client and real crashes: kill -9,
//! SIGSTOP/SIGCONT.
//!
//! - An idempotent acks=all producer under continuous load while the leader is killed with
//!   kill -9, `KAFKAIQ_FAILOVER_KILLS` times (default 3; 20 in the full run), restarted each time
//!   and waited for until it is back in every ISR: no acknowledged record missing, none twice,
//!   every acknowledged record at the offset it was acknowledged at, offsets contiguous, and
//!   after the cluster stops every replica's log holds the same bytes. The longest gap between
//!   acknowledgements around each kill and the time each restarted node took to rejoin the ISR
//!   are printed (`failover:` lines).
//! - A rolling restart under the same load: each node in turn stopped with SIGTERM (controlled
//!   shutdown), restarted and waited for until every partition is in sync and led by its
//!   preferred replica again: no send fails, nothing lost or twice, identical logs; the longest
//!   produce stall per restart is printed (`rolling restart:` lines).
//! - A follower stopped with SIGSTOP holds the high watermark back while it is in the ISR,
//!   leaves the ISR past `replica.lag.time.max.ms` (the leader's AlterPartition), after which
//!   the high watermark advances, and joins it again after SIGCONT.
//! - A leader cut off from both followers takes acks=1 writes they never see; the others elect
//!   a new leader and take writes of their own; the deposed leader, restarted, truncates its
//!   unreplicated tail at the diverging epoch and ends with the new leader's bytes.
//! - One broker of three down: a min ISR 2 topic takes acks=all writes, a min ISR 3 topic
//!   refuses them at once with NOT_ENOUGH_REPLICAS.
//! - A consumer group keeps its committed offsets across a kill -9 of its coordinator; the
//!   coordinator moves with its `__consumer_offsets` partition, and the old node, back as a
//!   follower, answers the group's Heartbeat and OffsetFetch with NOT_COORDINATOR.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, DescribeLogDirsRequest, FetchRequest, GroupId, HeartbeatRequest, OffsetFetchRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use common::cluster::{Cluster, ClusterKind, PartitionState, Settings};
use common::{batch, RawClient};

const NODES: i32 = 3;
/// How long a cluster condition may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);
const NOT_COORDINATOR: i16 = 16;

/// Three nodes with the test's settings: KafkaIQ, or Apache Kafka with
/// `KAFKAIQ_CLUSTER_BROKER=kafka` (to compare the figures on the same harness).
fn start(name: &str, settings: Settings) -> Cluster {
    let mut all = vec!["offsets.topic.num.partitions=3"];
    all.extend_from_slice(settings);
    let mut cluster = Cluster::start(ClusterKind::from_env(), name, NODES, &all);
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    cluster
}

/// Waits until `condition` holds for `topic`'s partitions (as the first node that answers
/// shows them), and returns them.
async fn wait_until(
    cluster: &Cluster,
    topic: &str,
    what: &str,
    condition: impl Fn(&BTreeMap<i32, PartitionState>) -> bool,
) -> BTreeMap<i32, PartitionState> {
    let condition = &condition;
    cluster
        .wait_for(what, DEADLINE, || async move {
            cluster.partitions_anywhere(topic).await.filter(condition)
        })
        .await
}

/// Creates a replication factor 3 topic (retrying until three brokers are registered and
/// unfenced) and waits until every partition has a leader and a full ISR.
async fn create_topic(cluster: &Cluster, name: &str, partitions: i32, min_isr: &str) {
    let configs = [("min.insync.replicas", min_isr)];
    cluster
        .wait_for(&format!("topic {name} created"), DEADLINE, || async {
            for id in cluster.running() {
                // TOPIC_ALREADY_EXISTS: an earlier attempt timed out on the client side only.
                if let Some(0 | 36) = cluster
                    .create_topic_configured(id, name, partitions, 3, &configs)
                    .await
                {
                    return Some(());
                }
            }
            None
        })
        .await;
    wait_until(
        cluster,
        name,
        &format!("{name} has leaders and full ISRs"),
        |p| p.len() == partitions as usize && p.values().all(|p| p.leader > 0 && p.isr.len() == 3),
    )
    .await;
}

fn consumer(cluster: &Cluster, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("group.id", group)
        .create()
        .unwrap()
}

/// Every record of `topic`-`partition` up to its high watermark, as (offset, value).
fn read_partition(cluster: &Cluster, topic: &str, partition: i32) -> Vec<(i64, String)> {
    tokio::task::block_in_place(|| {
        let consumer = consumer(cluster, "replication-test-reader");
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let mut records = Vec::new();
        let deadline = Instant::now() + DEADLINE;
        while records.last().map_or(high > 0, |(o, _)| *o + 1 < high) {
            assert!(
                Instant::now() < deadline,
                "{topic}-{partition}: read {} of {high}",
                records.len()
            );
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
                let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
                records.push((m.offset(), value));
            }
        }
        records
    })
}

/// The high watermark of `topic`-`partition` (ListOffsets LATEST to its leader).
fn high_watermark(cluster: &Cluster, topic: &str, partition: i32) -> i64 {
    tokio::task::block_in_place(|| {
        consumer(cluster, "replication-test-reader")
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .unwrap()
            .1
    })
}

/// After the heal and a clean stop, every node holds the same bytes for each partition.
fn assert_identical_logs(cluster: &Cluster, topic: &str, partitions: i32) {
    for partition in 0..partitions {
        let logs: Vec<Vec<u8>> = (1..=NODES)
            .map(|n| cluster.log_bytes(n, topic, partition))
            .collect();
        assert!(!logs[0].is_empty(), "{topic}-{partition} is empty");
        for (i, log) in logs.iter().enumerate().skip(1) {
            assert!(
                log == &logs[0],
                "{topic}-{partition}: node {} holds {} bytes, node 1 {} bytes, and they differ",
                i + 1,
                log.len(),
                logs[0].len()
            );
        }
    }
}

fn producer(cluster: &Cluster, extra: &[(&str, &str)]) -> FutureProducer {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", cluster.bootstrap());
    for (k, v) in extra {
        config.set(*k, *v);
    }
    config.create().unwrap()
}

/// Sends `values` one at a time to partition 0, each acknowledged before the next.
async fn send_all(producer: &FutureProducer, topic: &str, values: &[String]) {
    for v in values {
        producer
            .send(
                FutureRecord::<(), _>::to(topic).partition(0).payload(v),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("send {v}: {e}"));
    }
}

/// One acknowledged record.
#[derive(Debug, Clone, Copy)]
struct Ack {
    seq: u64,
    partition: i32,
    offset: i64,
    at: Instant,
}

/// The producer's record of what happened to every send.
#[derive(Default)]
struct Ledger {
    acks: Vec<Ack>,
    /// Sends that failed: their outcome is unknown (they may or may not be in the log).
    failed: Vec<(u64, String)>,
}

type SharedLedger = Arc<Mutex<Ledger>>;

fn median(values: &[u128]) -> u128 {
    let mut v = values.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

/// Sends `record-<seq>` as fast as about a thousand a second with up to 200 in flight, until
/// `running` is cleared, recording each outcome in the ledger.
fn start_load(
    producer: FutureProducer,
    topic: &'static str,
    ledger: SharedLedger,
    running: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let in_flight = Arc::new(tokio::sync::Semaphore::new(200));
        let mut seq = 0u64;
        let mut tasks = Vec::new();
        while running.load(Ordering::SeqCst) {
            let permit = in_flight.clone().acquire_owned().await.unwrap();
            let (producer, ledger) = (producer.clone(), ledger.clone());
            let this = seq;
            seq += 1;
            tasks.push(tokio::spawn(async move {
                let value = format!("record-{this}");
                let key = format!("k{}", this % 16);
                let record = FutureRecord::to(topic).payload(&value).key(&key);
                let outcome = producer.send(record, Duration::from_secs(300)).await;
                let mut ledger = ledger.lock().unwrap();
                match outcome {
                    Ok(d) => ledger.acks.push(Ack {
                        seq: this,
                        partition: d.partition,
                        offset: d.offset,
                        at: Instant::now(),
                    }),
                    Err((e, _)) => ledger.failed.push((this, e.to_string())),
                }
                drop(permit);
            }));
            // Steady load on a shared two-core machine.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
}

/// An idempotent acks=all producer under [`start_load`], with its ledger.
struct AcksAllLoad {
    producer: FutureProducer,
    ledger: SharedLedger,
    running: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl AcksAllLoad {
    /// Starts the load on `topic` and waits for its first 500 acknowledgements.
    async fn start(cluster: &Cluster, topic: &'static str, what: &str) -> AcksAllLoad {
        let producer = producer(
            cluster,
            &[
                ("enable.idempotence", "true"),
                ("acks", "all"),
                ("linger.ms", "2"),
                ("message.timeout.ms", "300000"),
                ("retry.backoff.ms", "20"),
                ("retry.backoff.max.ms", "200"),
            ],
        );
        let ledger = SharedLedger::default();
        let running = Arc::new(AtomicBool::new(true));
        let task = start_load(producer.clone(), topic, ledger.clone(), running.clone());
        wait_for_acks(cluster, &ledger, 500, what).await;
        AcksAllLoad {
            producer,
            ledger,
            running,
            task,
        }
    }

    /// Stops sending, waits for every send's outcome and flushes the producer.
    async fn stop(self) {
        self.running.store(false, Ordering::SeqCst);
        self.task.await.unwrap();
        tokio::task::block_in_place(|| self.producer.flush(Duration::from_secs(30))).unwrap();
    }
}

/// Once every replica of `topic` is in sync, stops the cluster and checks that every node
/// holds the same bytes for each partition; removes the files.
async fn stop_and_compare_logs(mut cluster: Cluster, topic: &str, partitions: i32) {
    wait_until(
        &cluster,
        topic,
        "every replica in sync before stopping",
        |p| p.values().all(|p| p.isr.len() == 3),
    )
    .await;
    cluster.stop_all_keeping_files();
    assert_identical_logs(&cluster, topic, partitions);
    cluster.remove_files();
}

/// Waits until `more` records beyond the current count are acknowledged.
async fn wait_for_acks(cluster: &Cluster, ledger: &SharedLedger, more: usize, what: &str) {
    let target = ledger.lock().unwrap().acks.len() + more;
    cluster
        .wait_for(what, DEADLINE, || async {
            (ledger.lock().unwrap().acks.len() >= target).then_some(())
        })
        .await;
}

/// The longest silence between acknowledgements of `partition` from just before `from` on,
/// and when it began (relative to `from`, negative if before).
fn longest_gap(ledger: &SharedLedger, partition: i32, from: Instant) -> (Duration, i128) {
    let mut times: Vec<Instant> = ledger
        .lock()
        .unwrap()
        .acks
        .iter()
        .filter(|a| a.partition == partition && a.at + Duration::from_secs(2) >= from)
        .map(|a| a.at)
        .collect();
    times.sort();
    let Some(w) = times
        .windows(2)
        .filter(|w| w[1] >= from)
        .max_by_key(|w| w[1] - w[0])
    else {
        return (Duration::ZERO, 0);
    };
    let began = if w[0] >= from {
        (w[0] - from).as_millis() as i128
    } else {
        -((from - w[0]).as_millis() as i128)
    };
    (w[1] - w[0], began)
}

/// Reads every partition of `topic` back and checks the ledger against it: offsets contiguous
/// from 0, no record twice, every acknowledged record at the partition and offset it was
/// acknowledged at. Prints `{label}: A acknowledged, F failed (unknown outcome), R read, 0
/// lost, 0 duplicated`.
fn assert_acknowledged_exactly_once(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    ledger: &SharedLedger,
    label: &str,
) {
    let mut seen: BTreeMap<u64, (i32, i64)> = BTreeMap::new();
    for partition in 0..partitions {
        let records = read_partition(cluster, topic, partition);
        let offsets: Vec<i64> = records.iter().map(|(o, _)| *o).collect();
        let expected: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(
            offsets, expected,
            "partition {partition}: offsets contiguous from 0"
        );
        for (offset, value) in records {
            let seq: u64 = value.strip_prefix("record-").unwrap().parse().unwrap();
            if let Some(first) = seen.insert(seq, (partition, offset)) {
                panic!("record {seq} twice: at {first:?} and at ({partition}, {offset})");
            }
        }
    }
    let (acks, failed) = {
        let ledger = ledger.lock().unwrap();
        (ledger.acks.clone(), ledger.failed.len())
    };
    for ack in &acks {
        assert_eq!(
            seen.get(&ack.seq),
            Some(&(ack.partition, ack.offset)),
            "acknowledged record {} at {}-{} is not where it was acknowledged",
            ack.seq,
            ack.partition,
            ack.offset
        );
    }
    println!(
        "{label}: {} acknowledged, {} failed (unknown outcome), {} read, 0 lost, 0 duplicated",
        acks.len(),
        failed,
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_writes_survive_repeated_kill_9_of_the_leader() {
    let kills: usize = std::env::var("KAFKAIQ_FAILOVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    const TOPIC: &str = "failover";
    const PARTITIONS: i32 = 2;
    let mut cluster = start("replication-kill", &[]);
    create_topic(&cluster, TOPIC, PARTITIONS, "2").await;

    let load = AcksAllLoad::start(&cluster, TOPIC, "acknowledgements before the first kill").await;
    let ledger = load.ledger.clone();

    let (mut gaps_ms, mut elections_ms, mut rejoins_ms) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=kills {
        let before = wait_until(&cluster, TOPIC, "every replica in sync", |p| {
            p.values().all(|p| p.leader > 0 && p.isr.len() == 3)
        })
        .await;
        let victim = before[&0].leader;
        let killed_at = Instant::now();
        cluster.kill(victim);
        let elected = wait_until(&cluster, TOPIC, "partition 0 has a new leader", |p| {
            p[&0].leader > 0 && p[&0].leader != victim
        })
        .await;
        let elected_at = Instant::now();
        wait_for_acks(&cluster, &ledger, 200, "acknowledgements after the kill").await;
        let restart_at = Instant::now();
        cluster.spawn(victim);
        wait_until(
            &cluster,
            TOPIC,
            "the restarted node back in every ISR",
            |p| p.values().all(|p| p.isr.contains(&victim)),
        )
        .await;
        let rejoined_at = Instant::now();
        wait_for_acks(&cluster, &ledger, 100, "acknowledgements after the restart").await;
        let (gap, began) = longest_gap(&ledger, 0, killed_at);
        println!(
            "failover: round {round}: killed leader {victim}, new leader {}, seen after {} ms, longest ack gap {} ms (from {began} ms), restarted at {} ms, rejoined the ISR {} ms after restart",
            elected[&0].leader,
            (elected_at - killed_at).as_millis(),
            gap.as_millis(),
            (restart_at - killed_at).as_millis(),
            (rejoined_at - restart_at).as_millis()
        );
        gaps_ms.push(gap.as_millis());
        elections_ms.push((elected_at - killed_at).as_millis());
        rejoins_ms.push((rejoined_at - restart_at).as_millis());
    }
    load.stop().await;
    println!(
        "failover: {kills} kills: ack gap median {} ms max {} ms; new leader seen median {} ms max {} ms; ISR rejoin median {} ms max {} ms",
        median(&gaps_ms),
        gaps_ms.iter().max().unwrap(),
        median(&elections_ms),
        elections_ms.iter().max().unwrap(),
        median(&rejoins_ms),
        rejoins_ms.iter().max().unwrap()
    );

    assert_acknowledged_exactly_once(&cluster, TOPIC, PARTITIONS, &ledger, "failover");
    stop_and_compare_logs(cluster, TOPIC, PARTITIONS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_writes_survive_a_rolling_restart() {
    const TOPIC: &str = "rolling";
    const PARTITIONS: i32 = 6;
    // As operators roll a cluster: one node at a time, each stopped with SIGTERM (a controlled
    // shutdown), restarted, and waited for until every partition is fully in sync and led by
    // its preferred replica again (the automatic rebalance, every 2 s here) before the next.
    let mut cluster = start(
        "replication-rolling",
        &["leader.imbalance.check.interval.seconds=2"],
    );
    create_topic(&cluster, TOPIC, PARTITIONS, "2").await;
    let load = AcksAllLoad::start(&cluster, TOPIC, "acknowledgements before the restarts").await;
    let ledger = load.ledger.clone();

    let mut stalls_ms = Vec::new();
    for id in 1..=NODES {
        wait_until(
            &cluster,
            TOPIC,
            "every partition in sync and led by its preferred replica",
            |p| {
                p.values()
                    .all(|p| p.isr.len() == 3 && Some(&p.leader) == p.replicas.first())
            },
        )
        .await;
        let stopping_at = Instant::now();
        tokio::task::block_in_place(|| cluster.stop(id));
        let stopped_at = Instant::now();
        cluster.spawn(id);
        wait_until(
            &cluster,
            TOPIC,
            "the restarted node back in every ISR",
            |p| p.values().all(|p| p.isr.contains(&id)),
        )
        .await;
        let rejoined_at = Instant::now();
        wait_for_acks(&cluster, &ledger, 200, "acknowledgements after the restart").await;
        let stall = (0..PARTITIONS)
            .map(|p| longest_gap(&ledger, p, stopping_at).0)
            .max()
            .unwrap();
        println!(
            "rolling restart: node {id}: stopped (SIGTERM to exit) in {} ms, back in every ISR {} ms after restart, longest produce stall {} ms",
            (stopped_at - stopping_at).as_millis(),
            (rejoined_at - stopped_at).as_millis(),
            stall.as_millis()
        );
        stalls_ms.push(stall.as_millis());
    }
    load.stop().await;
    println!(
        "rolling restart: {} nodes: longest produce stall median {} ms max {} ms",
        NODES,
        median(&stalls_ms),
        stalls_ms.iter().max().unwrap()
    );
    let failed = ledger.lock().unwrap().failed.clone();
    assert!(
        failed.is_empty(),
        "a rolling restart failed {} sends, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert_acknowledged_exactly_once(&cluster, TOPIC, PARTITIONS, &ledger, "rolling restart");
    stop_and_compare_logs(cluster, TOPIC, PARTITIONS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_holds_the_high_watermark_then_leaves_the_isr_and_rejoins() {
    const TOPIC: &str = "lagging";
    // The leader drops a follower that has not caught up for 2 s; the controller would fence
    // a broker silent for 30 s, far beyond this test.
    let mut cluster = start(
        "replication-sigstop",
        &[
            "replica.lag.time.max.ms=2000",
            "broker.session.timeout.ms=30000",
        ],
    );
    create_topic(&cluster, TOPIC, 1, "1").await;
    let leader = cluster.partitions_anywhere(TOPIC).await.unwrap()[&0].leader;
    let follower = (1..=NODES).find(|n| *n != leader).unwrap();
    let producer = producer(&cluster, &[("acks", "1")]);
    let values: Vec<String> = (0..20).map(|i| format!("v{i}")).collect();
    send_all(&producer, TOPIC, &values[..10]).await;
    wait_until(&cluster, TOPIC, "the first ten records replicated", |_| {
        high_watermark(&cluster, TOPIC, 0) == 10
    })
    .await;

    cluster.signal(follower, libc::SIGSTOP);
    let stopped_at = Instant::now();
    // Writes the stopped follower cannot fetch: acknowledged (acks=1), not yet committed.
    send_all(&producer, TOPIC, &values[10..]).await;
    // An acks=all write waits for the stopped follower until its timeout.
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let started = Instant::now();
    let timed_out = produce_with_timeout(&mut client, TOPIC, -1, "timed-out", 300).await;
    let waited = started.elapsed();
    let high = high_watermark(&cluster, TOPIC, 0);
    let isr = cluster.partitions_seen_by(leader, TOPIC).await.unwrap()[&0]
        .isr
        .clone();
    if isr.contains(&follower) {
        // The leader's ISR still held the follower when it answered both.
        assert_eq!(timed_out, 7, "REQUEST_TIMED_OUT");
        assert!(
            waited >= Duration::from_millis(300),
            "answered after {waited:?}"
        );
        assert_eq!(high, 10, "the high watermark waits for every ISR member");
    } else {
        eprintln!("the follower left the ISR before the high watermark could be checked");
    }
    wait_until(
        &cluster,
        TOPIC,
        "the stopped follower leaves the ISR",
        |p| !p[&0].isr.contains(&follower),
    )
    .await;
    let shrunk_after = stopped_at.elapsed();
    // The follower was last caught up when its last fetch arrived, which a caught-up follower
    // sends replica.fetch.wait.max.ms (500) apart, parked in between: Kafka (and the leader
    // here) counts replica.lag.time.max.ms from that arrival, up to 500 ms before the stop.
    assert!(
        shrunk_after >= Duration::from_millis(2000 - 500),
        "shrunk after {shrunk_after:?}, before replica.lag.time.max.ms"
    );
    // Without the stopped follower the high watermark covers every write.
    wait_until(
        &cluster,
        TOPIC,
        "the high watermark to advance without it",
        |_| high_watermark(&cluster, TOPIC, 0) == 21,
    )
    .await;

    let continued_at = Instant::now();
    cluster.signal(follower, libc::SIGCONT);
    wait_until(&cluster, TOPIC, "the follower joins the ISR again", |p| {
        p[&0].isr.contains(&follower)
    })
    .await;
    println!(
        "isr: follower {follower} left the ISR {} ms after SIGSTOP, rejoined {} ms after SIGCONT",
        shrunk_after.as_millis(),
        continued_at.elapsed().as_millis()
    );
    let read: Vec<String> = read_partition(&cluster, TOPIC, 0)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let written: Vec<String> = values.iter().cloned().chain(["timed-out".into()]).collect();
    assert_eq!(read, written, "a timed-out write is not undone");
    drop(producer);
    // Every replica, followers too, checkpoints the high watermark it has from its leader.
    for id in 1..=NODES {
        cluster
            .wait_for("the high watermark on every replica", DEADLINE, || async {
                (replica_high_watermark(&cluster, id, TOPIC).await? == 21).then_some(())
            })
            .await;
    }
    // DescribeLogDirs shows the partition on every replica, followers with their lag.
    for id in 1..=NODES {
        let lag = cluster
            .wait_for("the replica in DescribeLogDirs", DEADLINE, || async {
                log_dir_lag(&cluster, id, TOPIC)
                    .await
                    .filter(|lag| *lag == 0)
            })
            .await;
        assert_eq!(lag, 0, "node {id} caught up");
    }
    cluster.stop_all_keeping_files();
    for id in 1..=NODES {
        let path = cluster.nodes[&id]
            .data_dir()
            .join("replication-offset-checkpoint");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines().any(|l| l == format!("{TOPIC} 0 21")),
            "node {id}'s {} holds:\n{text}",
            path.display()
        );
    }
    assert_identical_logs(&cluster, TOPIC, 1);
    cluster.remove_files();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_truncates_its_unreplicated_tail_at_the_diverging_epoch() {
    const TOPIC: &str = "diverging";
    let mut cluster = start("replication-diverge", &[]);
    create_topic(&cluster, TOPIC, 1, "1").await;
    let old = cluster.partitions_anywhere(TOPIC).await.unwrap()[&0].clone();
    let followers: Vec<i32> = (1..=NODES).filter(|n| *n != old.leader).collect();
    let acks_one = producer(&cluster, &[("acks", "1")]);
    let committed: Vec<String> = (0..5).map(|i| format!("committed-{i}")).collect();
    send_all(&acks_one, TOPIC, &committed).await;
    wait_until(&cluster, TOPIC, "the first records replicated", |_| {
        high_watermark(&cluster, TOPIC, 0) == 5
    })
    .await;
    drop(acks_one);

    // Cut the leader off: its followers (and two of three voters) stop; the leader still
    // takes acks=1 writes that nobody else sees, and cannot shrink the ISR without a quorum.
    for f in &followers {
        cluster.signal(*f, libc::SIGSTOP);
    }
    // The first write may still reach them: it completes the fetches they had parked at the
    // leader, whose answers wait in their sockets. Those answers are read from the log when they
    // are built, so on a busy machine they may carry the next writes too (as in Kafka): a prefix
    // of the three may survive, replicated; the rest exists only on the cut-off leader.
    let cut_off = ["in-flight", "lost-1", "lost-2"];
    let mut client = RawClient::connect(cluster.nodes[&old.leader].client_addr()).await;
    for value in cut_off {
        let code = produce(&mut client, TOPIC, 1, value).await;
        assert_eq!(code, 0, "the cut-off leader appends acks=1 writes");
    }
    drop(client);
    cluster.kill(old.leader);
    for f in &followers {
        cluster.signal(*f, libc::SIGCONT);
    }
    let new = wait_until(&cluster, TOPIC, "a new leader among the survivors", |p| {
        p[&0].leader > 0 && p[&0].leader != old.leader && p[&0].leader_epoch > old.leader_epoch
    })
    .await;
    let acks_all = producer(&cluster, &[("acks", "all"), ("enable.idempotence", "true")]);
    let later: Vec<String> = (0..5).map(|i| format!("after-{i}")).collect();
    send_all(&acks_all, TOPIC, &later).await;

    // The deposed leader returns as a follower, finds its last epoch diverges, truncates.
    cluster.spawn(old.leader);
    wait_until(&cluster, TOPIC, "the deposed leader back in the ISR", |p| {
        p[&0].isr.contains(&old.leader)
    })
    .await;
    let read: Vec<String> = read_partition(&cluster, TOPIC, 0)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    // What the new leader had of the cut-off writes is a prefix of them; the others are gone.
    let survived = read.len().saturating_sub(committed.len() + later.len());
    let expected: Vec<String> = committed
        .iter()
        .cloned()
        .chain(
            cut_off[..survived.min(cut_off.len())]
                .iter()
                .map(|v| v.to_string()),
        )
        .chain(later.iter().cloned())
        .collect();
    assert_eq!(
        read, expected,
        "the cut-off leader's unreplicated writes are gone"
    );
    println!(
        "truncation: leader {} at epoch {} deposed, {} leads at epoch {}; of the cut-off writes {survived} were replicated before the cut, {} truncated",
        old.leader,
        old.leader_epoch,
        new[&0].leader,
        new[&0].leader_epoch,
        cut_off.len() - survived.min(cut_off.len())
    );
    drop(acks_all);
    cluster.stop_all_keeping_files();
    assert_identical_logs(&cluster, TOPIC, 1);
    cluster.remove_files();
}

/// A Produce of one record with `acks` over raw frames: the partition's error code.
async fn produce(client: &mut RawClient, topic: &str, acks: i16, value: &str) -> i16 {
    produce_with_timeout(client, topic, acks, value, 10_000).await
}

async fn produce_with_timeout(
    client: &mut RawClient,
    topic: &str,
    acks: i16,
    value: &str,
    timeout_ms: i32,
) -> i16 {
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[value], None)))])]);
    let response = client.call(9, &request).await;
    response.responses[0].partition_responses[0].error_code
}

/// The `offset_lag` DescribeLogDirs reports for `topic`-0 on node `id`.
async fn log_dir_lag(cluster: &Cluster, id: i32, topic: &str) -> Option<i64> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = DescribeLogDirsRequest::default().with_topics(None);
    let r = client.try_call(4, &request, Duration::from_secs(2)).await?;
    r.results
        .iter()
        .flat_map(|d| &d.topics)
        .filter(|t| t.name.0.as_str() == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == 0)
        .map(|p| p.offset_lag)
}

/// The high watermark of `topic`-0 on node `id`, leader or follower: a consumer Fetch (v12,
/// which a follower serves, KIP-392) answers with the replica's own high watermark.
async fn replica_high_watermark(cluster: &Cluster, id: i32, topic: &str) -> Option<i64> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1024)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1024)])]);
    let r = client
        .try_call(12, &request, Duration::from_secs(2))
        .await?;
    let p = r.responses.first()?.partitions.first()?;
    (p.error_code == 0).then_some(p.high_watermark)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_isr_with_one_broker_down_and_timeouts_without_a_quorum() {
    let mut cluster = start("replication-min-isr", &[]);
    create_topic(&cluster, "two", 1, "2").await;
    create_topic(&cluster, "three", 1, "3").await;
    let (two, three) = (
        cluster.partitions_anywhere("two").await.unwrap()[&0].leader,
        cluster.partitions_anywhere("three").await.unwrap()[&0].leader,
    );
    // Kill a node that leads neither partition, so the leaders stay where they are.
    let victim = (1..=NODES)
        .find(|n| *n != two && *n != three)
        .unwrap_or_else(|| (1..=NODES).find(|n| *n != two).unwrap());
    cluster.kill(victim);
    let mut leaders = BTreeMap::new();
    for topic in ["two", "three"] {
        let p = wait_until(&cluster, topic, "the dead broker out of the ISR", |p| {
            p[&0].leader > 0 && !p[&0].isr.contains(&victim)
        })
        .await;
        leaders.insert(topic, p[&0].leader);
    }
    let mut client = RawClient::connect(cluster.nodes[&leaders["two"]].client_addr()).await;
    let code = produce(&mut client, "two", -1, "x").await;
    assert_eq!(
        code, 0,
        "min ISR 2 with two replicas in sync takes acks=all writes"
    );
    let mut client = RawClient::connect(cluster.nodes[&leaders["three"]].client_addr()).await;
    let started = Instant::now();
    let code = produce(&mut client, "three", -1, "x").await;
    assert_eq!(code, 19, "NOT_ENOUGH_REPLICAS");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not after the request timeout ({:?})",
        started.elapsed()
    );
    // acks=1 is not held to min ISR, but below min ISR the high watermark stays put (Kafka
    // 3.7+, KAFKA-15583): the write is invisible until the ISR is back to three.
    assert_eq!(produce(&mut client, "three", 1, "y").await, 0);
    assert_eq!(high_watermark(&cluster, "three", 0), 0);
    cluster.spawn(victim);
    wait_until(
        &cluster,
        "three",
        "the restarted broker back in the ISR",
        |p| p[&0].isr.len() == 3,
    )
    .await;
    wait_until(
        &cluster,
        "three",
        "the high watermark past the acks=1 write",
        |_| high_watermark(&cluster, "three", 0) == 1,
    )
    .await;
    // The refused record was never written.
    let records = read_partition(&cluster, "three", 0);
    assert_eq!(records, vec![(0, "y".to_owned())]);

    // Two of three combined nodes down: the metadata quorum is lost too, so nothing can take
    // the dead replicas out of the ISR; an acks=all write waits for them and times out, as in
    // Kafka. Its outcome is unknown; nothing acknowledged is lost.
    let lead = wait_until(&cluster, "two", "a full ISR again", |p| {
        p[&0].isr.len() == 3
    })
    .await[&0]
        .leader;
    let others: Vec<i32> = (1..=NODES).filter(|n| *n != lead).collect();
    for id in &others {
        cluster.kill(*id);
    }
    let mut client = RawClient::connect(cluster.nodes[&lead].client_addr()).await;
    let code = produce_with_timeout(&mut client, "two", -1, "unknown", 1000).await;
    assert_eq!(code, 7, "REQUEST_TIMED_OUT without a quorum");
    for id in &others {
        cluster.spawn(*id);
    }
    // Healed once every node shows a leader and a full ISR (the cut-off leader's own view
    // never changed, so asking it alone proves nothing).
    cluster
        .wait_for("the cluster healed", DEADLINE, || async {
            for id in 1..=NODES {
                let p = cluster.partitions_seen_by(id, "two").await?.remove(&0)?;
                let brokers = cluster.metadata(id, &[]).await?.brokers.len();
                if p.leader <= 0 || p.isr.len() != 3 || brokers != 3 {
                    return None;
                }
            }
            Some(())
        })
        .await;
    let records = read_partition(&cluster, "two", 0);
    assert_eq!(
        records.first(),
        Some(&(0, "x".to_owned())),
        "the acknowledged write"
    );
    assert!(
        records.len() == 1 || records[1..] == [(1, "unknown".to_owned())],
        "{records:?}"
    );
    cluster.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_kill_9_of_the_group_coordinator() {
    const TOPIC: &str = "grouped";
    const GROUP: &str = "survivors";
    let mut cluster = start("replication-group", &["min.insync.replicas=2"]);
    create_topic(&cluster, TOPIC, 3, "2").await;
    let commit = |cluster: &Cluster, offsets: &[(i32, i64)]| {
        let consumer = consumer(cluster, GROUP);
        let mut tpl = TopicPartitionList::new();
        for (p, o) in offsets {
            tpl.add_partition_offset(TOPIC, *p, Offset::Offset(*o))
                .unwrap();
        }
        let deadline = Instant::now() + DEADLINE;
        tokio::task::block_in_place(|| {
            while let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
                assert!(Instant::now() < deadline, "commit failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    };
    let committed = |cluster: &Cluster| -> Option<Vec<(i32, i64)>> {
        let consumer = consumer(cluster, GROUP);
        let mut tpl = TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition(TOPIC, p);
        }
        let got =
            tokio::task::block_in_place(|| consumer.committed_offsets(tpl, Duration::from_secs(5)))
                .ok()?;
        Some(
            got.elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => (e.partition(), o),
                    _ => (e.partition(), -1),
                })
                .collect(),
        )
    };
    let first = vec![(0, 5), (1, 7), (2, 9)];
    commit(&cluster, &first);
    assert_eq!(committed(&cluster), Some(first.clone()));
    let coordinator = find_coordinator(&cluster, GROUP).await;
    // Created on the first FindCoordinator, with offsets.topic.replication.factor 3.
    wait_until(
        &cluster,
        "__consumer_offsets",
        "__consumer_offsets fully replicated",
        |p| {
            p.len() == 3
                && p.values()
                    .all(|p| p.replicas.len() == 3 && p.isr.len() == 3)
        },
    )
    .await;
    cluster.kill(coordinator);
    cluster
        .wait_for(
            "the committed offsets from the new coordinator",
            DEADLINE,
            || async { (committed(&cluster) == Some(first.clone())).then_some(()) },
        )
        .await;
    // The new coordinator takes commits, and the old one, back and leading again, serves them.
    let second = vec![(0, 6), (1, 8), (2, 10)];
    commit(&cluster, &second);
    cluster.spawn(coordinator);
    wait_until(
        &cluster,
        "__consumer_offsets",
        "the old coordinator back in sync",
        |p| p.values().all(|p| p.isr.contains(&coordinator)),
    )
    .await;
    assert_eq!(committed(&cluster), Some(second));
    // The coordinator moved with the leadership of the group's `__consumer_offsets` partition,
    // which stays where it went (no preferred election within the test): the old node, a
    // follower of that partition now, answers the group's requests with NOT_COORDINATOR, so
    // a client looks the coordinator up again.
    let now_coordinating = find_coordinator(&cluster, GROUP).await;
    assert_ne!(now_coordinating, coordinator, "the coordinator moved");
    let mut old = RawClient::connect(cluster.nodes[&coordinator].client_addr()).await;
    let heartbeat = HeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_generation_id(1)
        .with_member_id(StrBytes::from_static_str("a-member"));
    assert_eq!(
        old.call(4, &heartbeat).await.error_code,
        NOT_COORDINATOR,
        "Heartbeat to the old coordinator"
    );
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_topics(None);
    assert_eq!(
        old.call(7, &fetch).await.error_code,
        NOT_COORDINATOR,
        "OffsetFetch to the old coordinator"
    );
    cluster.stop_all();
}

/// The node that coordinates `group` (FindCoordinator over raw frames to any running node).
async fn find_coordinator(cluster: &Cluster, group: &str) -> i32 {
    cluster
        .wait_for("a coordinator for the group", DEADLINE, || async {
            let id = *cluster.running().first()?;
            let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(group.to_owned()))
                .with_key_type(0);
            let r = client.try_call(3, &request, Duration::from_secs(2)).await?;
            (r.error_code == 0).then_some(r.node_id.0)
        })
        .await
}

/// The leader epochs node `id`'s current log says it became leader at, for `topic`-0.
fn leader_epochs_logged(cluster: &Cluster, id: i32, topic: &str) -> Vec<i32> {
    let text = cluster.log_text(id);
    let plain = strip_ansi(&text);
    let topic_field = format!("topic={topic} ");
    plain
        .lines()
        .filter(|l| l.contains("became leader") && l.contains(&topic_field))
        .filter_map(|l| {
            let rest = &l[l.find("leader_epoch=")? + "leader_epoch=".len()..];
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A restarted node acts on no superseded metadata. Leadership of one partition moves three
/// times by kill -9 of its leader, with acks=all writes in every epoch; each killed leader
/// restarts while another leads under a newer epoch. A restarted node never logs leadership
/// at an epoch older than the one current when it came back, and once all are in the ISR
/// every replica holds the same `leader-epoch-checkpoint` (and the same log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_former_leader_never_leads_at_a_superseded_epoch() {
    const TOPIC: &str = "superseded";
    let mut cluster = start("replication-superseded", &[]);
    create_topic(&cluster, TOPIC, 1, "2").await;
    let acks_all = producer(&cluster, &[("acks", "all"), ("enable.idempotence", "true")]);
    let mut current = cluster.partitions_anywhere(TOPIC).await.unwrap()[&0].clone();
    // (node, the leader epoch current when it restarted)
    let mut restarts = Vec::new();
    for round in 0..3 {
        let values: Vec<String> = (0..5).map(|i| format!("r{round}-{i}")).collect();
        send_all(&acks_all, TOPIC, &values).await;
        let old = current.clone();
        cluster.kill(old.leader);
        current = wait_until(&cluster, TOPIC, "a new leader after kill -9", |p| {
            p[&0].leader > 0 && p[&0].leader != old.leader && p[&0].leader_epoch > old.leader_epoch
        })
        .await[&0]
            .clone();
        let values: Vec<String> = (0..5).map(|i| format!("r{round}-after-{i}")).collect();
        send_all(&acks_all, TOPIC, &values).await;
        cluster.spawn(old.leader);
        restarts.push((old.leader, current.leader_epoch));
        current = wait_until(&cluster, TOPIC, "the restarted node back in the ISR", |p| {
            p[&0].isr.len() == 3 && p[&0].leader > 0
        })
        .await[&0]
            .clone();
        let (node, epoch) = restarts[round];
        let logged = leader_epochs_logged(&cluster, node, TOPIC);
        assert!(
            logged.iter().all(|&e| e >= epoch),
            "node {node}, restarted while epoch {epoch} was current, logged leadership at {logged:?}"
        );
    }
    // Read while running: a clean stop hands leadership over under epochs with no writes, which
    // only the new leaders register (as in Kafka).
    let checkpoints: Vec<String> = (1..=NODES)
        .map(|n| {
            let path = cluster.nodes[&n]
                .data_dir()
                .join(format!("{TOPIC}-0/leader-epoch-checkpoint"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect();
    drop(acks_all);
    cluster.stop_all_keeping_files();
    for (i, c) in checkpoints.iter().enumerate().skip(1) {
        assert_eq!(c, &checkpoints[0], "node {} and node 1 differ", i + 1);
    }
    assert_identical_logs(&cluster, TOPIC, 1);
    cluster.remove_files();
}
