//! The transactional workload: a librdkafka transactional producer writing transactions of
//! [`RECORDS_PER_TXN`] records over every partition of its own topic through the faults,
//! committing two in three and aborting the third, and the check of what a read_committed
//! reader finds once the faults healed.
//!
//! What the producer learnt is a ledger: committed (commit returned), aborted (abort returned:
//! the transaction definitely ended aborted) or unknown (a call failed and the abort did not
//! complete; the producer is replaced, and its successor fences it and aborts what it left
//! open). The check: every committed transaction whole, no record of an aborted one, an unknown
//! one whole or absent (never torn), no record twice, nothing that was not written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::workload::Worker;

pub const TOPIC: &str = "faults-txn";
pub const PARTITIONS: i32 = 3;
pub const RECORDS_PER_TXN: usize = 6;
/// How long one producer call (init, commit, abort) may take: longer than any fault is held.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the final read may take.
const READ_DEADLINE: Duration = Duration::from_secs(90);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Committed,
    Aborted,
    Unknown,
}

/// Transaction number → what the producer learnt of it.
pub type Ledger = Arc<Mutex<BTreeMap<usize, Fate>>>;

fn new_producer(bootstrap: &str, running: &AtomicBool) -> Option<BaseProducer> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "txn-1")
        .set("transactional.id", "faults-txn-writer")
        .set("transaction.timeout.ms", "60000")
        .set("message.timeout.ms", "60000")
        .set("linger.ms", "5")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create()
        .ok()?;
    // A new instance fences the previous one and aborts what it left open; through a fault
    // this can take a while.
    while running.load(Ordering::SeqCst) {
        if p.init_transactions(CALL_TIMEOUT).is_ok() {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

/// One transaction numbered `n`: its records, then commit (abort every third).
fn transaction(p: &BaseProducer, n: usize) -> Result<Fate, rdkafka::error::KafkaError> {
    let abort = n % 3 == 2;
    p.begin_transaction()?;
    for i in 0..RECORDS_PER_TXN {
        let value = format!("t{n}-{i}");
        let partition = (i % PARTITIONS as usize) as i32;
        p.send(
            BaseRecord::<(), _>::to(TOPIC)
                .payload(&value)
                .partition(partition),
        )
        .map_err(|(e, _)| e)?;
    }
    // A BaseProducer's delivery reports are served by polling: flush first.
    p.flush(CALL_TIMEOUT)?;
    if abort {
        p.abort_transaction(CALL_TIMEOUT)?;
        Ok(Fate::Aborted)
    } else {
        p.commit_transaction(CALL_TIMEOUT)?;
        Ok(Fate::Committed)
    }
}

/// Runs transactions until `running` is cleared.
pub fn producer(
    bootstrap: &str,
    running: Arc<AtomicBool>,
    ledger: Ledger,
) -> anyhow::Result<Worker> {
    let bootstrap = bootstrap.to_owned();
    Worker::spawn("txn-1", move || {
        let mut notes = Vec::new();
        let mut producer: Option<BaseProducer> = None;
        let mut n = 0usize;
        while running.load(Ordering::SeqCst) {
            if producer.is_none() {
                producer = new_producer(&bootstrap, &running);
            }
            let Some(p) = producer.as_ref() else { break };
            let fate = match transaction(p, n) {
                Ok(fate) => fate,
                Err(e) => {
                    if notes.len() < 5 {
                        notes.push(format!("txn-1: transaction {n}: {e}"));
                    }
                    // An abort that completes ends the transaction aborted; otherwise its fate
                    // is unknown and the producer is replaced.
                    match p.abort_transaction(CALL_TIMEOUT) {
                        Ok(()) => Fate::Aborted,
                        Err(_) => {
                            if let Some(p) = producer.take() {
                                std::thread::spawn(move || drop(p));
                            }
                            Fate::Unknown
                        }
                    }
                }
            };
            ledger.lock().unwrap().insert(n, fate);
            n += 1;
        }
        if let Some(p) = producer.take() {
            std::thread::spawn(move || drop(p));
        }
        notes
    })
}

/// Every committed value of the topic, read at read_committed from the start of each partition
/// to its last stable offset.
pub fn read_committed(bootstrap: &str) -> anyhow::Result<Vec<String>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "faults-txn-read")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut values = Vec::new();
    let mut at_end = BTreeSet::new();
    let deadline = Instant::now() + READ_DEADLINE;
    // The end of each partition for a read_committed consumer is its last stable offset, which
    // librdkafka reports as the partition's end: a partition is done at its EOF.
    while at_end.len() < PARTITIONS as usize {
        if Instant::now() > deadline {
            anyhow::bail!("read_committed of {TOPIC}: {} of {PARTITIONS} partitions read to their end after {READ_DEADLINE:?}", at_end.len());
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if let Some(v) = m.payload() {
                    values.push(String::from_utf8_lossy(v).into_owned());
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            _ => {}
        }
    }
    Ok(values)
}

/// The ledger against what was read: a summary line and the problems found.
pub fn check(ledger: &BTreeMap<usize, Fate>, values: &[String]) -> (String, Vec<String>) {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for v in values {
        let parsed = v
            .strip_prefix('t')
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(n, i)| Some((n.parse::<usize>().ok()?, i.parse::<usize>().ok()?)));
        match parsed {
            Some((n, i)) if i < RECORDS_PER_TXN => {
                if !seen.entry(n).or_default().insert(i) {
                    problems.push(format!("transactions: {v} read twice"));
                }
            }
            _ => problems.push(format!("transactions: {v} was never written")),
        }
    }
    for n in seen.keys() {
        if !ledger.contains_key(n) {
            problems.push(format!(
                "transactions: transaction {n} read but never begun"
            ));
        }
    }
    for (n, fate) in ledger {
        let got = seen.get(n).map_or(0, BTreeSet::len);
        match fate {
            Fate::Committed if got != RECORDS_PER_TXN => problems.push(format!(
                "transactions: committed transaction {n} has {got} of {RECORDS_PER_TXN} records"
            )),
            Fate::Aborted if got != 0 => problems.push(format!(
                "transactions: aborted transaction {n} has {got} records read"
            )),
            Fate::Unknown if got != 0 && got != RECORDS_PER_TXN => problems.push(format!(
                "transactions: transaction {n} torn: {got} of {RECORDS_PER_TXN} records"
            )),
            _ => {}
        }
    }
    let count = |f: Fate| ledger.values().filter(|x| **x == f).count();
    let summary = format!(
        "transactions: {} committed, {} aborted, {} unknown; {} records read",
        count(Fate::Committed),
        count(Fate::Aborted),
        count(Fate::Unknown),
        values.len()
    );
    (summary, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, records: std::ops::Range<usize>) -> Vec<String> {
        records.map(|i| format!("t{n}-{i}")).collect()
    }

    #[test]
    fn whole_committed_absent_aborted_and_never_torn() {
        let ledger = BTreeMap::from([
            (0, Fate::Committed),
            (1, Fate::Aborted),
            (2, Fate::Unknown),
            (3, Fate::Unknown),
        ]);
        let mut read = values(0, 0..RECORDS_PER_TXN);
        read.extend(values(3, 0..RECORDS_PER_TXN));
        let (_, problems) = check(&ledger, &read);
        assert!(problems.is_empty(), "{problems:?}");
        // Each anomaly is named.
        let bad = [
            values(0, 0..RECORDS_PER_TXN - 1), // committed, a record missing
            values(1, 0..1),                   // aborted, read
            values(2, 0..2),                   // unknown, torn
            [values(0, 0..RECORDS_PER_TXN), values(0, 0..1)].concat(), // twice
            vec!["t9-0".to_owned()],           // never begun
            vec!["garbage".to_owned()],        // never written
        ];
        for read in bad {
            let mut with_committed = read.clone();
            if !read.iter().any(|v| v.starts_with("t0-")) {
                with_committed.extend(values(0, 0..RECORDS_PER_TXN));
            }
            let (_, problems) = check(&ledger, &with_committed);
            assert!(!problems.is_empty(), "{read:?} passed");
        }
    }
}
