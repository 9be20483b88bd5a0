//! What the workloads saw, as plain data: every write sent and what became of it, every record
//! a consumer polled, the final read after the faults healed and every replica's log after the
//! cluster stopped. The workloads append to a [`Recorder`]; the checker reads a [`History`].
//!
//! Values are unique: each write carries `v<id>` with an id no other write has, so a value names
//! its write wherever it is read.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A write's id (its value is `v<id>`).
pub type WriteId = u64;

/// What the client was told about a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged (acks=all) at this offset of its partition; a negative offset when the
    /// acknowledgement named none (librdkafka reports -1001 for a retry the broker recognised
    /// as a duplicate of a write it already had: acknowledged, offset not told).
    Ack { offset: i64 },
    /// Refused before anything reached a broker (full local queue, a record too large): the
    /// write cannot be in any log.
    DefinitelyFailed,
    /// A timeout, a lost connection, a retriable error given up on: it may or may not be in the
    /// log. The checker accepts it either way.
    Unknown,
}

/// One write a producer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub id: WriteId,
    /// Which workload sent it (`rdkafka-1`, `java-1`, ...).
    pub producer: String,
    pub partition: i32,
    /// Milliseconds since the run started, when sent and when its outcome was known.
    pub sent_ms: u64,
    pub outcome: Outcome,
    pub outcome_ms: u64,
}

/// One record a consumer polled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poll {
    /// Which consumer (`assign-1`, `group-1`, ...).
    pub consumer: String,
    /// The consumer's assignment generation: a group consumer starts a new one at every
    /// rebalance (it may legitimately go back to the committed offset then); a consumer with a
    /// manual assignment has one generation for the whole run.
    pub generation: u64,
    pub partition: i32,
    pub offset: i64,
    /// `None` for a value that is not one of ours.
    pub id: Option<WriteId>,
    pub at_ms: u64,
}

/// A record in a log read once the run was over: by a fresh consumer up to the high
/// watermark, or from a replica's segment files after the nodes stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub partition: i32,
    pub offset: i64,
    pub id: Option<WriteId>,
    /// From a replica's segment files: the batch's producer id, producer epoch and the
    /// record's sequence (what tells a broker's duplicate from a client's re-send).
    pub producer: Option<(i64, i16, i32)>,
}

/// Everything the checker needs.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub writes: Vec<Write>,
    pub polls: Vec<Poll>,
    /// The final read (a fresh consumer, every partition from its start to its high watermark,
    /// after the faults healed and every ISR was full again).
    pub final_read: Vec<LogRecord>,
    /// Per partition, the offset the final read reached (its high watermark then).
    pub final_end: std::collections::BTreeMap<i32, i64>,
    /// Each replica's log below the final high watermark: (node, record).
    pub replica_logs: Vec<(i32, LogRecord)>,
}

/// The value of write `id`.
pub fn value_of(id: WriteId) -> String {
    format!("v{id}")
}

/// The write id a value names, if it is one of ours.
pub fn id_of(value: &[u8]) -> Option<WriteId> {
    std::str::from_utf8(value)
        .ok()?
        .strip_prefix('v')?
        .parse()
        .ok()
}

/// Shared, append-only recording of a running history (writes are filled in as their
/// outcomes arrive).
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    inner: Arc<Mutex<Recording>>,
}

#[derive(Default)]
struct Recording {
    writes: Vec<Write>,
    index: std::collections::HashMap<WriteId, usize>,
    polls: Vec<Poll>,
}

impl Recorder {
    pub fn new(start: Instant) -> Recorder {
        Recorder {
            start,
            inner: Arc::default(),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Records a write about to be sent; its outcome stays Unknown until [`Recorder::outcome`].
    pub fn sent(&self, id: WriteId, producer: &str, partition: i32) {
        let sent_ms = self.now_ms();
        let mut r = self.inner.lock().unwrap();
        let at = r.writes.len();
        r.index.insert(id, at);
        r.writes.push(Write {
            id,
            producer: producer.to_owned(),
            partition,
            sent_ms,
            outcome: Outcome::Unknown,
            outcome_ms: sent_ms,
        });
    }

    /// Records what a producer was told about write `id`.
    pub fn outcome(&self, id: WriteId, outcome: Outcome) {
        let at = self.now_ms();
        let mut r = self.inner.lock().unwrap();
        if let Some(i) = r.index.get(&id).copied() {
            let w = &mut r.writes[i];
            w.outcome = outcome;
            w.outcome_ms = at;
        }
    }

    pub fn poll(
        &self,
        consumer: &str,
        generation: u64,
        partition: i32,
        offset: i64,
        id: Option<WriteId>,
    ) {
        let at_ms = self.now_ms();
        self.inner.lock().unwrap().polls.push(Poll {
            consumer: consumer.to_owned(),
            generation,
            partition,
            offset,
            id,
            at_ms,
        });
    }

    /// (partition, acknowledgement time) of every acknowledged write so far.
    pub fn ack_times(&self) -> Vec<(i32, u64)> {
        self.inner
            .lock()
            .unwrap()
            .writes
            .iter()
            .filter(|w| matches!(w.outcome, Outcome::Ack { .. }))
            .map(|w| (w.partition, w.outcome_ms))
            .collect()
    }

    pub fn acknowledged(&self) -> usize {
        self.inner
            .lock()
            .unwrap()
            .writes
            .iter()
            .filter(|w| matches!(w.outcome, Outcome::Ack { .. }))
            .count()
    }

    /// The highest offset polled on each partition by `consumer`.
    pub fn polled_up_to(&self, consumer: &str) -> std::collections::BTreeMap<i32, i64> {
        let mut m = std::collections::BTreeMap::new();
        for p in self.inner.lock().unwrap().polls.iter() {
            if p.consumer == consumer {
                let e = m.entry(p.partition).or_insert(p.offset);
                *e = (*e).max(p.offset);
            }
        }
        m
    }

    /// The recorded writes and polls (the final read and replica logs are added by the caller).
    pub fn snapshot(&self) -> History {
        let r = self.inner.lock().unwrap();
        History {
            writes: r.writes.clone(),
            polls: r.polls.clone(),
            ..History::default()
        }
    }
}
