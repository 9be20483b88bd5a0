//! Transactions on three nodes while nodes are killed (SIGKILL) and restarted: librdkafka's
//! transactional producer writes transactions of `RECORDS_PER_TXN` records over three
//! partitions (replication factor 3, `min.insync.replicas=2`), committing two in three and
//! aborting the third, while one node at a time (the transaction coordinator among them) is
//! killed and brought back.
//!
//! What the producer learnt is a ledger: committed (commit returned), aborted (abort returned)
//! or unknown (the producer failed in between). A read_committed consumer then reads the topic
//! and must find every committed transaction whole, no record of an aborted one, no transaction
//! in part (torn) and no record twice. With `KAFKAIQ_CLUSTER_BROKER=kafka` the same test runs
//! against Apache Kafka.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::common::cluster::{Cluster, ClusterKind};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const TOPIC: &str = "txn-cluster";
const PARTITIONS: i32 = 3;
const RECORDS_PER_TXN: usize = 12;
/// Transactions between two kills.
const TXNS_PER_STEP: usize = 6;
/// Nodes killed, one after the other.
const KILLS: i32 = 3;
const DEADLINE: Duration = Duration::from_secs(90);
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

struct Ctx;

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            eprintln!("librdkafka {level:?} {fac}: {log_message}");
        }
    }
}

impl ConsumerContext for Ctx {}

impl rdkafka::producer::ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Committed,
    Aborted,
    Unknown,
}

struct Writer {
    bootstrap: String,
    producer: Option<BaseProducer<Ctx>>,
    next: usize,
    ledger: BTreeMap<usize, Fate>,
}

impl Writer {
    fn producer(&mut self) -> &BaseProducer<Ctx> {
        if self.producer.is_none() {
            let p: BaseProducer<Ctx> = ClientConfig::new()
                .set("bootstrap.servers", &self.bootstrap)
                .set("transactional.id", "cluster-writer")
                .set("transaction.timeout.ms", "30000")
                .set("message.timeout.ms", "30000")
                .set("linger.ms", "2")
                .create_with_context(Ctx)
                .expect("create producer");
            // A new instance fences the previous one and aborts what it left open.
            let deadline = Instant::now() + DEADLINE;
            loop {
                match p.init_transactions(CALL_TIMEOUT) {
                    Ok(()) => break,
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("init_transactions: {e}; retrying");
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    Err(e) => panic!("init_transactions: {e}"),
                }
            }
            self.producer = Some(p);
        }
        self.producer.as_ref().expect("created")
    }

    /// One transaction: its records, then commit (or abort, every third).
    fn transaction(&mut self) {
        let n = self.next;
        self.next += 1;
        let abort = n % 3 == 2;
        let result = (|| {
            let p = self.producer();
            p.begin_transaction()?;
            for i in 0..RECORDS_PER_TXN {
                let value = format!("t{n}-{i}");
                let partition = (i % PARTITIONS as usize) as i32;
                p.send(
                    BaseRecord::to(TOPIC)
                        .payload(&value)
                        .key(&value)
                        .partition(partition),
                )
                .map_err(|(e, _)| e)?;
            }
            // A BaseProducer's delivery reports are served by polling: flush first.
            p.flush(CALL_TIMEOUT)?;
            if abort {
                p.abort_transaction(CALL_TIMEOUT)
            } else {
                p.commit_transaction(CALL_TIMEOUT)
            }
        })();
        match result {
            Ok(()) => {
                self.ledger.insert(
                    n,
                    if abort {
                        Fate::Aborted
                    } else {
                        Fate::Committed
                    },
                );
            }
            Err(e) => {
                eprintln!("transaction {n}: {e}");
                // Whether it committed is unknown; a new instance aborts it if it is open.
                self.ledger.insert(n, Fate::Unknown);
                if let Some(p) = self.producer.take() {
                    let _ = p.abort_transaction(Duration::from_secs(5));
                    std::thread::spawn(move || drop(p));
                }
            }
        }
    }
}

fn read_committed(bootstrap: &str, expected_at_least: usize) -> Vec<String> {
    let consumer: BaseConsumer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "txn-cluster-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create_with_context(Ctx)
        .expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&tpl).expect("assign");
    let mut values = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
                quiet_since = Instant::now();
            }
            Some(Err(e)) => eprintln!("poll: {e}"),
            None => {
                if values.len() >= expected_at_least
                    && quiet_since.elapsed() > Duration::from_secs(3)
                {
                    break;
                }
            }
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_stay_whole_across_node_kills() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "transactions",
        3,
        &[
            "replica.lag.time.max.ms=4000",
            "transaction.state.log.num.partitions=3",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=2000",
        ],
    );
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    assert_eq!(
        cluster
            .create_topic_configured(1, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")])
            .await,
        Some(0)
    );
    let bootstrap = cluster.bootstrap();
    let mut writer = tokio::task::spawn_blocking(move || {
        let mut w = Writer {
            bootstrap,
            producer: None,
            next: 0,
            ledger: BTreeMap::new(),
        };
        for _ in 0..TXNS_PER_STEP {
            w.transaction();
        }
        w
    })
    .await
    .expect("writer");
    for kill in 0..KILLS {
        let victim = 1 + kill % 3;
        cluster.kill(victim);
        writer = tokio::task::spawn_blocking(move || {
            for _ in 0..TXNS_PER_STEP {
                writer.transaction();
            }
            writer
        })
        .await
        .expect("writer");
        cluster.spawn(victim);
        cluster.await_listening(victim);
        cluster
            .wait_for("every partition in sync again", DEADLINE, || async {
                let p = cluster.partitions_anywhere(TOPIC).await?;
                p.values().all(|s| s.isr.len() == 3).then_some(())
            })
            .await;
    }
    let ledger = writer.ledger.clone();
    tokio::task::spawn_blocking(move || drop(writer))
        .await
        .expect("drop");

    let committed: BTreeSet<usize> = ledger
        .iter()
        .filter(|(_, f)| **f == Fate::Committed)
        .map(|(n, _)| *n)
        .collect();
    assert!(
        committed.len() >= ledger.len() / 3,
        "too few transactions committed to tell anything: {ledger:?}"
    );
    let bootstrap = cluster.bootstrap();
    let values = tokio::task::spawn_blocking(move || {
        read_committed(&bootstrap, committed.len() * RECORDS_PER_TXN)
    })
    .await
    .expect("reader");

    let mut seen: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut problems = Vec::new();
    for v in &values {
        let (n, i) = v[1..]
            .split_once('-')
            .map(|(n, i)| (n.parse::<usize>().unwrap(), i.parse::<usize>().unwrap()))
            .unwrap_or_else(|| panic!("unexpected record {v}"));
        if !seen.entry(n).or_default().insert(i) {
            problems.push(format!("duplicate {v}"));
        }
    }
    for (n, fate) in &ledger {
        let got = seen.get(n).map_or(0, BTreeSet::len);
        match fate {
            Fate::Committed if got != RECORDS_PER_TXN => problems.push(format!(
                "committed transaction {n}: {got} of {RECORDS_PER_TXN} records"
            )),
            Fate::Aborted if got != 0 => {
                problems.push(format!("aborted transaction {n}: {got} records read"))
            }
            Fate::Unknown if got != 0 && got != RECORDS_PER_TXN => problems.push(format!(
                "transaction {n} torn: {got} of {RECORDS_PER_TXN} records"
            )),
            _ => {}
        }
    }
    let fates: BTreeMap<String, usize> = ledger.values().fold(BTreeMap::new(), |mut m, f| {
        *m.entry(format!("{f:?}")).or_default() += 1;
        m
    });
    eprintln!("transactions: {fates:?}; records read: {}", values.len());
    assert!(problems.is_empty(), "{problems:#?}");
    if kind == ClusterKind::KafkaIq {
        open_transactions_show_in_metrics(&cluster).await;
    }
    cluster.stop_all();
}

/// Every node's `/metrics` text.
async fn scrape_all(cluster: &Cluster) -> Vec<String> {
    let mut texts = Vec::new();
    for node in cluster.nodes.values() {
        let (status, _, body) = crate::common::http::get(node.http_addr(), "/metrics").await;
        assert_eq!(status, 200, "node {}: /metrics", node.id);
        texts.push(body);
    }
    texts
}

/// The largest value of `series` over the nodes, and its sum.
fn max_and_sum(texts: &[String], series: &str) -> (f64, f64) {
    texts
        .iter()
        .filter_map(|t| crate::common::http::sample(t, series))
        .fold((0.0, 0.0), |(m, s), v| (f64::max(m, v), s + v))
}

/// A transaction left open shows in the metrics: its partition's last stable offset lags the
/// high watermark, the partition counts one open transaction, and the coordinator counts its id
/// Ongoing; once it commits, the lag is gone and the id is CompleteCommit.
async fn open_transactions_show_in_metrics(cluster: &Cluster) {
    let bootstrap = cluster.bootstrap();
    let producer = tokio::task::spawn_blocking(move || {
        let p: BaseProducer<Ctx> = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("transactional.id", "metrics-writer")
            .create_with_context(Ctx)
            .expect("create producer");
        p.init_transactions(CALL_TIMEOUT).expect("init");
        p.begin_transaction().expect("begin");
        for i in 0..5 {
            let value = format!("open-{i}");
            p.send(
                BaseRecord::to(TOPIC)
                    .payload(&value)
                    .key(&value)
                    .partition(0),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        }
        p.flush(CALL_TIMEOUT).expect("flush");
        p
    })
    .await
    .expect("producer");
    let partition = format!("{{topic=\"{TOPIC}\",partition=\"0\"}}");
    let lag = format!("kafka_cluster_partition_laststableoffsetlag{partition}");
    let open = format!("kafkaiq_partition_open_transactions{partition}");
    let ids = |state: &str| {
        format!("kafkaiq_transaction_coordinator_transactional_ids{{state=\"{state}\"}}")
    };
    cluster
        .wait_for("the open transaction in the metrics", DEADLINE, || async {
            let texts = scrape_all(cluster).await;
            let (max_lag, _) = max_and_sum(&texts, &lag);
            let (max_open, _) = max_and_sum(&texts, &open);
            let (_, ongoing) = max_and_sum(&texts, &ids("Ongoing"));
            (max_lag >= 5.0 && max_open == 1.0 && ongoing == 1.0).then_some(())
        })
        .await;
    let producer = tokio::task::spawn_blocking(move || {
        producer.commit_transaction(CALL_TIMEOUT).expect("commit");
        producer
    })
    .await
    .expect("commit");
    cluster
        .wait_for(
            "the committed transaction in the metrics",
            DEADLINE,
            || async {
                let texts = scrape_all(cluster).await;
                let (max_lag, _) = max_and_sum(&texts, &lag);
                let (max_open, _) = max_and_sum(&texts, &open);
                let (_, ongoing) = max_and_sum(&texts, &ids("Ongoing"));
                let (_, complete) = max_and_sum(&texts, &ids("CompleteCommit"));
                (max_lag == 0.0 && max_open == 0.0 && ongoing == 0.0 && complete >= 1.0)
                    .then_some(())
            },
        )
        .await;
    let texts = scrape_all(cluster).await;
    for name in [
        "kafka_server_transaction_coordinator_metrics_partition_load_time_max",
        "kafka_server_transaction_coordinator_metrics_partition_load_time_avg",
    ] {
        assert!(
            texts
                .iter()
                .all(|t| crate::common::http::sample(t, name).is_some()),
            "{name} on every node"
        );
    }
    tokio::task::spawn_blocking(move || drop(producer))
        .await
        .expect("drop");
}
