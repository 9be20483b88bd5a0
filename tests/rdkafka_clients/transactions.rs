//! librdkafka's transactional producer (the `rdkafka` crate, bundling librdkafka 2.12) against
//! the broker binary: commit and abort seen by consumers at read_committed and
//! read_uncommitted, and a zombie producer fenced by a new instance with the same
//! transactional id. Each test starts its own broker (`common::broker_process`); with
//! `BROKER_UNDER_TEST=apache-kafka` the same tests run against Apache Kafka 4.1.1.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::common::broker_process::{start_selected, SelectedBroker};

const PARTITIONS: i32 = 3;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_DEADLINE: Duration = Duration::from_secs(60);

struct Ctx;

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        eprintln!("librdkafka {level:?} {fac}: {log_message}");
    }
}

impl ConsumerContext for Ctx {}

impl rdkafka::producer::ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            eprintln!("delivery failed: {e}");
        }
    }
}

struct Broker {
    bootstrap: String,
    _selected: SelectedBroker,
}

impl Broker {
    fn start(name: &str) -> Broker {
        let partitions = format!("num.partitions={PARTITIONS}");
        let selected = start_selected(
            name,
            &[
                &partitions,
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=5",
            ],
        );
        Broker {
            bootstrap: selected.bootstrap.clone(),
            _selected: selected,
        }
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c
    }

    fn producer(&self, transactional_id: &str) -> BaseProducer<Ctx> {
        let producer: BaseProducer<Ctx> = self
            .config()
            .set("transactional.id", transactional_id)
            .set("transaction.timeout.ms", "60000")
            .set("linger.ms", "5")
            .create_with_context(Ctx)
            .expect("create producer");
        producer
            .init_transactions(CALL_TIMEOUT)
            .expect("init_transactions");
        producer
    }

    /// Every record of `topic` from the beginning at `isolation`, once `expected` are read
    /// (and a further second shows nothing more); for `expected` 0, what three seconds show.
    fn read_all(&self, topic: &str, isolation: &str, expected: usize) -> Vec<String> {
        let consumer: BaseConsumer<Ctx> = self
            .config()
            .set("group.id", format!("reader-{topic}-{isolation}"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("isolation.level", isolation)
            .create_with_context(Ctx)
            .expect("create consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .expect("assign");
        }
        consumer.assign(&tpl).expect("assign");
        let mut values = Vec::new();
        let deadline = Instant::now()
            + if expected == 0 {
                Duration::from_secs(3)
            } else {
                POLL_DEADLINE
            };
        let mut quiet_until: Option<Instant> = None;
        while Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into());
                }
                Some(Err(e)) => panic!("poll at {isolation}: {e}"),
                None => {}
            }
            if values.len() >= expected {
                let until =
                    *quiet_until.get_or_insert_with(|| Instant::now() + Duration::from_secs(1));
                if Instant::now() >= until {
                    break;
                }
            }
        }
        values.sort();
        values
    }
}

fn send(producer: &BaseProducer<Ctx>, topic: &str, values: &[String]) {
    for (i, v) in values.iter().enumerate() {
        let key = i.to_string();
        producer
            .send(BaseRecord::to(topic).key(&key).payload(v))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(CALL_TIMEOUT).expect("flush");
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

#[test]
fn committed_records_are_read_and_aborted_ones_only_at_read_uncommitted() {
    let broker = Broker::start("rdkafka-txn-commit-abort");
    let topic = "txn-commit-abort";
    let producer = broker.producer("txn-commit-abort-producer");

    producer.begin_transaction().expect("begin");
    send(&producer, topic, &values("committed-1", 30));
    producer.commit_transaction(CALL_TIMEOUT).expect("commit");

    producer.begin_transaction().expect("begin");
    send(&producer, topic, &values("aborted", 20));
    producer.abort_transaction(CALL_TIMEOUT).expect("abort");

    producer.begin_transaction().expect("begin");
    send(&producer, topic, &values("committed-2", 10));
    producer.commit_transaction(CALL_TIMEOUT).expect("commit");

    let mut committed = values("committed-1", 30);
    committed.extend(values("committed-2", 10));
    committed.sort();
    assert_eq!(
        broker.read_all(topic, "read_committed", committed.len()),
        committed,
        "read_committed sees exactly the committed records"
    );
    let mut everything = committed.clone();
    everything.extend(values("aborted", 20));
    everything.sort();
    assert_eq!(
        broker.read_all(topic, "read_uncommitted", everything.len()),
        everything,
        "read_uncommitted sees aborted records too"
    );
}

#[test]
fn an_open_transaction_holds_read_committed_back_until_it_commits() {
    let broker = Broker::start("rdkafka-txn-lso");
    let topic = "txn-lso";
    let producer = broker.producer("txn-lso-producer");
    producer.begin_transaction().expect("begin");
    send(&producer, topic, &values("pending", 5));
    // Not committed: a read_committed consumer sees nothing; read_uncommitted sees them.
    assert_eq!(
        broker.read_all(topic, "read_committed", 0),
        Vec::<String>::new()
    );
    assert_eq!(
        broker.read_all(topic, "read_uncommitted", 5),
        values("pending", 5)
    );
    producer.commit_transaction(CALL_TIMEOUT).expect("commit");
    assert_eq!(
        broker.read_all(topic, "read_committed", 5),
        values("pending", 5)
    );
}

#[test]
fn a_new_instance_fences_the_zombie_and_aborts_its_transaction() {
    let broker = Broker::start("rdkafka-txn-fencing");
    let topic = "txn-fencing";
    let zombie = broker.producer("txn-fencing-producer");
    zombie.begin_transaction().expect("begin");
    send(&zombie, topic, &values("zombie", 10));

    // The same transactional id starts again: the zombie's open transaction is aborted.
    let fresh = broker.producer("txn-fencing-producer");
    let err = zombie
        .commit_transaction(CALL_TIMEOUT)
        .expect_err("the zombie cannot commit");
    eprintln!("the zombie's commit: {err:?}");

    fresh.begin_transaction().expect("begin");
    send(&fresh, topic, &values("fresh", 10));
    fresh.commit_transaction(CALL_TIMEOUT).expect("commit");

    assert_eq!(
        broker.read_all(topic, "read_committed", 10),
        values("fresh", 10)
    );
    let mut counts: BTreeMap<bool, usize> = BTreeMap::new();
    for v in broker.read_all(topic, "read_uncommitted", 20) {
        *counts.entry(v.starts_with("zombie")).or_default() += 1;
    }
    assert_eq!(counts.get(&false), Some(&10));
}

/// The committed offsets of `group` for `topic`'s partitions, as a fresh consumer reads them
/// (OffsetFetch with require_stable at read_committed: it waits out open transactions).
fn committed_offsets(broker: &Broker, group: &str, topic: &str) -> Vec<Option<i64>> {
    let consumer: BaseConsumer<Ctx> = broker
        .config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create_with_context(Ctx)
        .expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, CALL_TIMEOUT)
        .expect("committed offsets");
    (0..PARTITIONS)
        .map(
            |p| match committed.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            },
        )
        .collect()
}

#[test]
fn offsets_sent_to_a_transaction_commit_with_it_and_not_when_it_aborts() {
    let broker = Broker::start("rdkafka-txn-offsets");
    let (input, output, group) = ("txn-offsets-in", "txn-offsets-out", "txn-offsets-copier");
    let seed = broker.producer("txn-offsets-seed");
    seed.begin_transaction().expect("begin");
    for i in 0..30 {
        let key = i.to_string();
        let v = format!("in-{i:03}");
        seed.send(
            BaseRecord::to(input)
                .key(&key)
                .payload(&v)
                .partition(i % PARTITIONS),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    }
    seed.commit_transaction(CALL_TIMEOUT).expect("commit");

    let consumer: BaseConsumer<Ctx> = broker
        .config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create_with_context(Ctx)
        .expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(input, p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&tpl).expect("assign");
    let mut read = 0;
    let deadline = Instant::now() + POLL_DEADLINE;
    while read < 30 && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            m.expect("poll");
            read += 1;
        }
    }
    assert_eq!(read, 30);

    // An aborted copy leaves the group's offsets as they were (none).
    let copier = broker.producer("txn-offsets-copier");
    let positions = consumer.position().expect("position");
    let metadata = consumer.group_metadata().expect("group metadata");
    copier.begin_transaction().expect("begin");
    send(&copier, output, &values("copy-aborted", 3));
    copier
        .send_offsets_to_transaction(&positions, &metadata, CALL_TIMEOUT)
        .expect("send offsets");
    copier.abort_transaction(CALL_TIMEOUT).expect("abort");
    assert_eq!(committed_offsets(&broker, group, input), vec![None; 3]);

    // A committed copy commits the offsets with it.
    copier.begin_transaction().expect("begin");
    send(&copier, output, &values("copy", 3));
    copier
        .send_offsets_to_transaction(&positions, &metadata, CALL_TIMEOUT)
        .expect("send offsets");
    copier.commit_transaction(CALL_TIMEOUT).expect("commit");
    let expected: Vec<Option<i64>> = (0..PARTITIONS)
        .map(
            |p| match positions.find_partition(input, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                other => panic!("position of {input}-{p}: {other:?}"),
            },
        )
        .collect();
    assert_eq!(committed_offsets(&broker, group, input), expected);
    assert_eq!(
        broker.read_all(output, "read_committed", 3),
        values("copy", 3)
    );
}
