//! Exactly-once copying, in the shape of Apache Kafka's `transactions_test.py`: Kafka's own
//! `TransactionalMessageCopier` (kafka-tools 4.1.1, the Java client) copies an input topic to
//! an output topic, one copier per input partition, each consuming at read_committed and
//! committing its consumed offsets in the transaction of its output (random aborts on), while
//! copiers are killed with SIGKILL and restarted and nodes are killed and restarted. Once every
//! copier has copied its partition to the end, a read_committed reader must find every input
//! value in the output exactly once: none lost, none twice, nothing else.
//!
//! With `KAFKAIQ_CLUSTER_BROKER=kafka` the same test runs against Apache Kafka.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::cluster::{kafka_libs, Cluster, ClusterKind};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const INPUT: &str = "copy-in";
const OUTPUT: &str = "copy-out";
const INPUT_PARTITIONS: i32 = 2;
const OUTPUT_PARTITIONS: i32 = 3;
const RECORDS_PER_PARTITION: usize = 4_000;
/// Records copied (by all copiers) between two bounces.
const PROGRESS_PER_STEP: i64 = 400;
const DEADLINE: Duration = Duration::from_secs(120);

/// One running `TransactionalMessageCopier` and what it last reported.
struct Copier {
    partition: i32,
    child: Child,
    /// Its input partition's records left to copy (-1 before its first report).
    remaining: Arc<AtomicI64>,
    starts: u32,
}

fn spawn_copier(cluster: &Cluster, partition: i32, starts: u32) -> Copier {
    let log = std::fs::File::create(
        cluster
            .root
            .join(format!("copier-{partition}-{starts}.log")),
    )
    .expect("copier log");
    let mut child = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(format!("{}/*", kafka_libs().display()))
        .arg("org.apache.kafka.tools.TransactionalMessageCopier")
        .args(["--broker-list", &cluster.bootstrap()])
        .args(["--input-topic", INPUT, "--output-topic", OUTPUT])
        .args(["--input-partition", &partition.to_string()])
        .args(["--transactional-id", &format!("copier-{partition}")])
        .args(["--consumer-group", &format!("copier-{partition}")])
        .args(["--transaction-size", "20", "--enable-random-aborts"])
        // As transactions_test.py sets it: a copier killed between sending its offsets to the
        // transaction and committing leaves pending offsets, and its successor's consumer
        // cannot learn its position (OffsetFetch answers UNSTABLE_OFFSET_COMMIT, KIP-447)
        // until the dead transaction is aborted at its timeout. At the default 60 s that
        // outlasts the consumer's own 60 s position timeout, and the successor gives up.
        .args(["--transaction-timeout", "40000"])
        .stdout(Stdio::piped())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the copier");
    let remaining = Arc::new(AtomicI64::new(-1));
    let stdout = child.stdout.take().expect("piped");
    let seen = remaining.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // {"transactionalId":...,"stage":"ProcessLoop",...,"remaining":N}
            if let Some(n) = line
                .split("\"remaining\":")
                .nth(1)
                .and_then(|rest| rest.trim_end_matches('}').split(',').next())
                .and_then(|n| n.trim().parse::<i64>().ok())
            {
                seen.store(n, Ordering::SeqCst);
            }
        }
    });
    Copier {
        partition,
        child,
        remaining,
        starts,
    }
}

impl Copier {
    fn remaining(&self) -> i64 {
        self.remaining.load(Ordering::SeqCst)
    }

    /// kill -9 and a new copier with the same transactional id: it fences the dead one and
    /// aborts what it left open.
    fn hard_bounce(&mut self, cluster: &Cluster) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = spawn_copier(cluster, self.partition, self.starts + 1);
    }
}

/// Writes the input: `p<partition>-<i>` values, idempotent, acks=all.
fn seed(bootstrap: &str) -> Vec<String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("create producer");
    let mut values = Vec::new();
    for p in 0..INPUT_PARTITIONS {
        for i in 0..RECORDS_PER_PARTITION {
            let value = format!("p{p}-{i}");
            loop {
                match producer.send(BaseRecord::<(), _>::to(INPUT).payload(&value).partition(p)) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(_), _)) => {
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => panic!("send: {e}"),
                }
            }
            values.push(value);
        }
    }
    producer.flush(DEADLINE).expect("flush the input");
    values
}

/// Every value of the output at read_committed, to each partition's end.
fn read_output(bootstrap: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "copy-out-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..OUTPUT_PARTITIONS {
        tpl.add_partition_offset(OUTPUT, p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&tpl).expect("assign");
    let mut values = Vec::new();
    let mut at_end = std::collections::BTreeSet::new();
    let deadline = Instant::now() + DEADLINE;
    while at_end.len() < OUTPUT_PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "the output not read to its end within {DEADLINE:?}"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned())
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            _ => {}
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copiers_copy_exactly_once_through_copier_and_node_kills() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "copier",
        3,
        &[
            "replica.lag.time.max.ms=4000",
            "transaction.state.log.num.partitions=3",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
        ],
    );
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    for (topic, partitions) in [(INPUT, INPUT_PARTITIONS), (OUTPUT, OUTPUT_PARTITIONS)] {
        assert_eq!(
            cluster
                .create_topic_configured(1, topic, partitions, 3, &[("min.insync.replicas", "2")])
                .await,
            Some(0)
        );
    }
    let bootstrap = cluster.bootstrap();
    let input = tokio::task::spawn_blocking(move || seed(&bootstrap))
        .await
        .expect("seed");

    let mut copiers: Vec<Copier> = (0..INPUT_PARTITIONS)
        .map(|p| spawn_copier(&cluster, p, 1))
        .collect();
    let left = |copiers: &[Copier]| -> i64 {
        copiers
            .iter()
            .map(|c| match c.remaining() {
                -1 => RECORDS_PER_PARTITION as i64,
                n => n,
            })
            .sum()
    };
    // Bounces while the copiers run: a copier, a node, the other copier, another node.
    let mut bounces = Vec::new();
    for step in 0..4 {
        let before = left(&copiers);
        if before == 0 {
            break;
        }
        cluster
            .wait_for("the copiers making progress", DEADLINE, || {
                let now = left(&copiers);
                let done = now == 0 || before - now >= PROGRESS_PER_STEP;
                async move { done.then_some(()) }
            })
            .await;
        match step {
            0 | 2 => {
                let c = &mut copiers[step / 2];
                if c.remaining() != 0 {
                    c.hard_bounce(&cluster);
                    bounces.push(format!("copier {} killed", c.partition));
                }
            }
            _ => {
                let victim = 1 + (step as i32 / 2);
                cluster.kill(victim);
                bounces.push(format!("node {victim} killed"));
                cluster.spawn(victim);
                cluster.await_listening(victim);
            }
        }
    }
    // Each copier ends once its partition is copied to the end; one that died of an error is
    // started again, as the Kafka test's copiers are after a bounce.
    let deadline = Instant::now() + DEADLINE;
    let mut restarts: BTreeMap<i32, u32> = BTreeMap::new();
    for c in &mut copiers {
        loop {
            match c.child.try_wait().expect("copier status") {
                Some(status) if status.success() => break,
                Some(status) => {
                    *restarts.entry(c.partition).or_default() += 1;
                    eprintln!(
                        "copier {} exited with {status}; starting it again",
                        c.partition
                    );
                    assert!(
                        restarts[&c.partition] <= 5,
                        "copier {} keeps failing",
                        c.partition
                    );
                    c.hard_bounce(&cluster);
                }
                None => {
                    assert!(
                        Instant::now() < deadline,
                        "copier {} not done within {DEADLINE:?} ({} left)",
                        c.partition,
                        c.remaining()
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    let bootstrap = cluster.bootstrap();
    let output = tokio::task::spawn_blocking(move || read_output(&bootstrap))
        .await
        .expect("reader");
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in &output {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    let missing: Vec<&String> = input
        .iter()
        .filter(|v| !counts.contains_key(v.as_str()))
        .collect();
    let twice: Vec<(&&str, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let written: std::collections::HashSet<&str> = input.iter().map(String::as_str).collect();
    let foreign: Vec<&&str> = counts.keys().filter(|v| !written.contains(**v)).collect();
    eprintln!(
        "copier: {} input records, {} read from the output; bounces: {bounces:?}; restarts after errors: {restarts:?}",
        input.len(),
        output.len()
    );
    assert!(
        missing.is_empty() && twice.is_empty() && foreign.is_empty(),
        "missing {} (first {:?}), twice {} (first {:?}), foreign {:?}",
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        foreign.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(output.len(), input.len());
    cluster.stop_all();
}
