//! The checker: a pure function of a [`History`] that names the anomalies of `cluster.md` §4,
//! as Jepsen's Kafka checker does.
//!
//! - **lost**: an acknowledged write absent from the final read although the final read got
//!   past the offset it was acknowledged at;
//! - **unseen**: an acknowledged write absent from the final read, which ended before its
//!   offset (after the heal every acknowledged write must be readable: unseen is an anomaly too);
//! - **duplicate**: one write at two offsets (anywhere: acknowledgements, polls, the final read,
//!   replica logs);
//! - **inconsistent offset**: one (partition, offset) holding two writes, compared across the
//!   acknowledgements, every consumer's polls, the final read and every replica's log;
//! - **skipped poll**: a consumer on an assigned partition polled offset a then b > a + 1 while a
//!   record is known between them; **non-monotonic poll**: b <= a, in one assignment generation;
//! - **failed read**: a write that definitely failed, read anywhere;
//! - **unknown value**: a record that is not one of the workloads' writes.
//!
//! Writes whose outcome is unknown (timeouts) may be present or absent, once.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::history::{History, Outcome, WriteId};

/// How many examples of each anomaly a report keeps for printing.
const EXAMPLES_MAX: usize = 5;

/// The checker's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub acknowledged: usize,
    pub unknown: usize,
    pub definitely_failed: usize,
    pub lost: usize,
    pub duplicates: usize,
    pub inconsistent_offsets: usize,
    pub skipped_polls: usize,
    pub nonmonotonic_polls: usize,
    pub unseen: usize,
    pub failed_reads: usize,
    pub unknown_values: usize,
    /// Of the duplicates, those whose copies in the replica logs carry one producer id under
    /// two producer epochs: the client bumped its epoch and sent the write again (the broker
    /// cannot recognise a re-send across epochs).
    pub duplicates_across_epochs: usize,
    /// A few lines per anomaly kind, for the log.
    pub examples: Vec<String>,
}

impl Report {
    pub fn valid(&self) -> bool {
        self.lost == 0
            && self.duplicates == 0
            && self.inconsistent_offsets == 0
            && self.skipped_polls == 0
            && self.nonmonotonic_polls == 0
            && self.unseen == 0
            && self.failed_reads == 0
            && self.unknown_values == 0
    }

    /// The suite's last line (`S` counts skipped and non-monotonic polls together: both are
    /// a consumer not reading its partition in order).
    pub fn summary_line(&self, faults: usize, seed: u64) -> String {
        format!(
            "faults: {faults} injected, {} acknowledged, {} lost, {} duplicates, {} inconsistent offsets, {} skipped polls, {} unseen, seed {seed}: {}",
            self.acknowledged,
            self.lost,
            self.duplicates,
            self.inconsistent_offsets,
            self.skipped_polls + self.nonmonotonic_polls,
            self.unseen,
            if self.valid() { "valid" } else { "invalid" }
        )
    }
}

struct Examples<'a>(&'a mut Vec<String>, HashMap<&'static str, usize>);

impl Examples<'_> {
    fn add(&mut self, kind: &'static str, line: impl FnOnce() -> String) {
        let n = self.1.entry(kind).or_default();
        *n += 1;
        if *n <= EXAMPLES_MAX {
            self.0.push(format!("{kind}: {}", line()));
        }
    }
}

/// Checks `h`.
pub fn check(h: &History) -> Report {
    let mut report = Report::default();
    let mut examples = Vec::new();
    let mut ex = Examples(&mut examples, HashMap::new());

    let mut outcome: HashMap<WriteId, (&Outcome, i32)> = HashMap::new();
    for w in &h.writes {
        outcome.insert(w.id, (&w.outcome, w.partition));
        match w.outcome {
            Outcome::Ack { .. } => report.acknowledged += 1,
            Outcome::Unknown => report.unknown += 1,
            Outcome::DefinitelyFailed => report.definitely_failed += 1,
        }
    }

    // Every (partition, offset) → the writes seen there, and every write → where it was seen,
    // from every source.
    let mut at: BTreeMap<(i32, i64), BTreeSet<WriteId>> = BTreeMap::new();
    let mut seen_at: HashMap<WriteId, BTreeSet<(i32, i64)>> = HashMap::new();
    let mut unknown_values: BTreeSet<(i32, i64)> = BTreeSet::new();
    let mut note = |partition: i32, offset: i64, id: Option<WriteId>| match id {
        Some(id) => {
            at.entry((partition, offset)).or_default().insert(id);
            seen_at.entry(id).or_default().insert((partition, offset));
        }
        None => {
            unknown_values.insert((partition, offset));
        }
    };
    for w in &h.writes {
        match w.outcome {
            Outcome::Ack { offset } if offset >= 0 => note(w.partition, offset, Some(w.id)),
            _ => {}
        }
    }
    for p in &h.polls {
        note(p.partition, p.offset, p.id);
    }
    for r in &h.final_read {
        note(r.partition, r.offset, r.id);
    }
    for (_, r) in &h.replica_logs {
        note(r.partition, r.offset, r.id);
    }
    // Only the reads: what a log or consumer actually showed (not what a producer was told).
    let mut read: HashSet<WriteId> = HashSet::new();
    read.extend(h.polls.iter().filter_map(|p| p.id));
    read.extend(h.final_read.iter().filter_map(|r| r.id));
    read.extend(h.replica_logs.iter().filter_map(|(_, r)| r.id));

    for ((partition, offset), ids) in &at {
        if ids.len() > 1 {
            report.inconsistent_offsets += 1;
            ex.add("inconsistent offset", || {
                format!("{partition}@{offset} holds writes {ids:?}")
            });
        }
    }
    let mut batches: HashMap<WriteId, BTreeSet<(i64, i16, i32)>> = HashMap::new();
    for (_, r) in &h.replica_logs {
        if let (Some(id), Some(p)) = (r.id, r.producer) {
            batches.entry(id).or_default().insert(p);
        }
    }
    for (id, places) in &seen_at {
        if places.len() > 1 {
            report.duplicates += 1;
            let producers = batches.get(id).cloned().unwrap_or_default();
            let epochs: BTreeSet<(i64, i16)> = producers.iter().map(|(p, e, _)| (*p, *e)).collect();
            let ids: BTreeSet<i64> = producers.iter().map(|(p, _, _)| *p).collect();
            if ids.len() == 1 && epochs.len() > 1 {
                report.duplicates_across_epochs += 1;
            }
            ex.add("duplicate", || {
                format!("write {id} at {places:?}, in the replica logs as (producer id, epoch, sequence) {producers:?}")
            });
        }
        if let Some((Outcome::DefinitelyFailed, _)) = outcome.get(id) {
            if read.contains(id) {
                report.failed_reads += 1;
                ex.add("failed read", || {
                    format!("write {id} failed, read at {places:?}")
                });
            }
        }
    }
    for (partition, offset) in &unknown_values {
        report.unknown_values += 1;
        ex.add("unknown value", || {
            format!("{partition}@{offset} is no write of this run")
        });
    }

    // Lost and unseen: against the final read only, the state after the heal.
    let final_ids: HashSet<WriteId> = h.final_read.iter().filter_map(|r| r.id).collect();
    for w in &h.writes {
        let Outcome::Ack { offset } = w.outcome else {
            continue;
        };
        if final_ids.contains(&w.id) {
            continue;
        }
        let end = h.final_end.get(&w.partition).copied().unwrap_or(0);
        // An acknowledgement without an offset is below the high watermark like any other:
        // the final read, which reads up to it, must hold it.
        if offset < end {
            report.lost += 1;
            ex.add("lost", || {
                format!(
                    "write {} acknowledged at {}@{offset}, final read up to {end} lacks it",
                    w.id, w.partition
                )
            });
        } else {
            report.unseen += 1;
            ex.add("unseen", || {
                format!(
                    "write {} acknowledged at {}@{offset}, final read ended at {end}",
                    w.id, w.partition
                )
            });
        }
    }

    // Polls, per consumer, generation and partition, in the order polled.
    let mut streams: BTreeMap<(&str, u64, i32), Vec<i64>> = BTreeMap::new();
    for p in &h.polls {
        streams
            .entry((p.consumer.as_str(), p.generation, p.partition))
            .or_default()
            .push(p.offset);
    }
    for ((consumer, generation, partition), offsets) in &streams {
        for pair in offsets.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b <= a {
                report.nonmonotonic_polls += 1;
                ex.add("non-monotonic poll", || {
                    format!("{consumer} (generation {generation}) polled {partition}@{a} then @{b}")
                });
            } else if b > a + 1
                && at
                    .range((*partition, a + 1)..(*partition, b))
                    .next()
                    .is_some()
            {
                report.skipped_polls += 1;
                ex.add("skipped poll", || {
                    format!("{consumer} (generation {generation}) polled {partition}@{a} then @{b}, records lie between")
                });
            }
        }
    }

    report.examples = examples;
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{LogRecord, Poll, Write};

    fn ack(id: WriteId, partition: i32, offset: i64) -> Write {
        Write {
            id,
            producer: "p".into(),
            partition,
            sent_ms: id,
            outcome: Outcome::Ack { offset },
            outcome_ms: id + 1,
        }
    }

    fn with(outcome: Outcome, id: WriteId, partition: i32) -> Write {
        Write {
            outcome,
            ..ack(id, partition, 0)
        }
    }

    fn poll(consumer: &str, generation: u64, partition: i32, offset: i64, id: WriteId) -> Poll {
        Poll {
            consumer: consumer.into(),
            generation,
            partition,
            offset,
            id: Some(id),
            at_ms: 0,
        }
    }

    fn rec(partition: i32, offset: i64, id: WriteId) -> LogRecord {
        LogRecord {
            partition,
            offset,
            id: Some(id),
            producer: None,
        }
    }

    /// Writes 0..n acknowledged at offsets 0..n of partition 0, polled in order by one
    /// consumer, read back by the final read and present on two replicas.
    fn clean(n: u64) -> History {
        let mut h = History::default();
        for i in 0..n {
            h.writes.push(ack(i, 0, i as i64));
            h.polls.push(poll("assign-1", 0, 0, i as i64, i));
            h.final_read.push(rec(0, i as i64, i));
            h.replica_logs.push((1, rec(0, i as i64, i)));
            h.replica_logs.push((2, rec(0, i as i64, i)));
        }
        h.final_end.insert(0, n as i64);
        h
    }

    #[test]
    fn a_clean_history_is_valid() {
        let r = check(&clean(10));
        assert!(r.valid(), "{r:?}");
        assert_eq!(r.acknowledged, 10);
        assert_eq!(
            r.summary_line(12, 7),
            "faults: 12 injected, 10 acknowledged, 0 lost, 0 duplicates, 0 inconsistent offsets, 0 skipped polls, 0 unseen, seed 7: valid"
        );
    }

    #[test]
    fn unknown_writes_may_be_present_or_absent() {
        let mut h = clean(4);
        // 10 timed out and is in the log; 11 timed out and is not.
        h.writes.push(with(Outcome::Unknown, 10, 0));
        h.writes.push(with(Outcome::Unknown, 11, 0));
        h.final_read.push(rec(0, 4, 10));
        h.final_end.insert(0, 5);
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
        assert_eq!(r.unknown, 2);
    }

    #[test]
    fn an_acknowledged_write_missing_below_the_final_end_is_lost() {
        let mut h = clean(5);
        h.final_read.retain(|r| r.id != Some(2));
        let r = check(&h);
        assert_eq!(r.lost, 1, "{r:?}");
        assert!(!r.valid());
        assert!(r.summary_line(1, 1).ends_with(": invalid"));
    }

    #[test]
    fn an_acknowledged_write_beyond_the_final_end_is_unseen() {
        let mut h = clean(5);
        h.final_read.retain(|r| r.offset < 3);
        h.final_end.insert(0, 3);
        let r = check(&h);
        assert_eq!((r.lost, r.unseen), (0, 2), "{r:?}");
        assert!(!r.valid());
    }

    #[test]
    fn one_write_at_two_offsets_is_a_duplicate() {
        let mut h = clean(5);
        // A retry appended write 3 a second time.
        h.writes.push(with(Outcome::Unknown, 9, 0));
        h.final_read.push(rec(0, 5, 3));
        h.final_end.insert(0, 6);
        let r = check(&h);
        assert_eq!(r.duplicates, 1, "{r:?}");
        assert_eq!(r.inconsistent_offsets, 0);
        assert_eq!(r.duplicates_across_epochs, 0);

        // The replica logs show the second copy under a bumped producer epoch.
        h.replica_logs.push((
            1,
            LogRecord {
                producer: Some((7, 0, 3)),
                ..rec(0, 3, 3)
            },
        ));
        h.replica_logs.push((
            1,
            LogRecord {
                producer: Some((7, 1, 0)),
                ..rec(0, 5, 3)
            },
        ));
        let r = check(&h);
        assert_eq!((r.duplicates, r.duplicates_across_epochs), (1, 1), "{r:?}");
    }

    #[test]
    fn two_writes_at_one_offset_are_inconsistent_across_sources() {
        // The replica on node 2 holds write 7 where everyone else read write 3.
        let mut h = clean(5);
        h.writes.push(with(Outcome::Unknown, 7, 0));
        for (node, r) in h.replica_logs.iter_mut() {
            if *node == 2 && r.offset == 3 {
                r.id = Some(7);
            }
        }
        let r = check(&h);
        assert_eq!(r.inconsistent_offsets, 1, "{r:?}");
        // Acknowledged at 3 and polled at 3, write 3 is not lost; write 7 is in one place only.
        assert_eq!((r.lost, r.duplicates), (0, 0));

        // An acknowledgement naming an offset the log gives another write.
        let mut h = clean(5);
        h.writes[1].outcome = Outcome::Ack { offset: 2 };
        let r = check(&h);
        assert!(r.inconsistent_offsets >= 1, "{r:?}");
    }

    #[test]
    fn a_consumer_skipping_records_is_caught_but_a_gap_without_records_is_not() {
        let mut h = clean(6);
        h.polls.retain(|p| p.offset != 3);
        let r = check(&h);
        assert_eq!(r.skipped_polls, 1, "{r:?}");

        // Offsets 3 and 4 hold nothing any source knows of (a control batch, say).
        let mut h = clean(6);
        h.writes.retain(|w| w.id != 3 && w.id != 4);
        h.polls.retain(|p| p.offset != 3 && p.offset != 4);
        h.final_read.retain(|r| r.offset != 3 && r.offset != 4);
        h.replica_logs
            .retain(|(_, r)| r.offset != 3 && r.offset != 4);
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
    }

    #[test]
    fn a_consumer_going_back_is_caught_within_a_generation_only() {
        let mut h = clean(4);
        h.polls.push(poll("assign-1", 0, 0, 1, 1));
        let r = check(&h);
        assert_eq!(r.nonmonotonic_polls, 1, "{r:?}");
        assert!(r.summary_line(0, 0).contains("1 skipped polls"));

        // A group consumer starting over from its committed offset after a rebalance.
        let mut h = clean(4);
        h.polls.push(poll("group-1", 0, 0, 2, 2));
        h.polls.push(poll("group-1", 0, 0, 3, 3));
        h.polls.push(poll("group-1", 1, 0, 2, 2));
        h.polls.push(poll("group-1", 1, 0, 3, 3));
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
    }

    #[test]
    fn each_consumer_is_checked_on_its_own_and_against_the_others() {
        // The Java consumers read the same records as the librdkafka one: valid.
        let mut h = clean(5);
        for c in ["java-assign-1", "java-group-1"] {
            for i in 0..5 {
                h.polls
                    .push(poll(c, u64::from(c.contains("group")), 0, i, i as u64));
            }
        }
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
        // One of them skips offset 2 while the others read it: a skipped poll of that consumer.
        let mut skipping = h.clone();
        skipping
            .polls
            .retain(|p| !(p.consumer == "java-assign-1" && p.offset == 2));
        let r = check(&skipping);
        assert_eq!(r.skipped_polls, 1, "{r:?}");
        // One of them sees another write at offset 3: an inconsistent offset.
        let mut other = h.clone();
        other.writes.push(with(Outcome::Unknown, 30, 0));
        for p in other.polls.iter_mut() {
            if p.consumer == "java-group-1" && p.offset == 3 {
                p.id = Some(30);
            }
        }
        let r = check(&other);
        assert_eq!(r.inconsistent_offsets, 1, "{r:?}");
    }

    #[test]
    fn a_definitely_failed_write_that_is_read_is_caught() {
        let mut h = clean(3);
        h.writes.push(with(Outcome::DefinitelyFailed, 20, 0));
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
        h.polls.push(poll("assign-1", 0, 0, 3, 20));
        let r = check(&h);
        assert_eq!(r.failed_reads, 1, "{r:?}");
        assert!(!r.valid());
    }

    #[test]
    fn an_acknowledgement_without_an_offset_is_checked_by_its_presence() {
        // Write 3 acknowledged as a recognised duplicate (offset -1001): present once, valid.
        let mut h = clean(5);
        h.writes[3].outcome = Outcome::Ack { offset: -1001 };
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
        // Absent from the final read: lost.
        h.final_read.retain(|r| r.id != Some(3));
        let r = check(&h);
        assert_eq!(r.lost, 1, "{r:?}");
    }

    #[test]
    fn a_record_that_is_no_write_is_caught() {
        let mut h = clean(3);
        h.final_read.push(LogRecord {
            partition: 0,
            offset: 3,
            id: None,
            producer: None,
        });
        let r = check(&h);
        assert_eq!(r.unknown_values, 1, "{r:?}");
    }

    #[test]
    fn anomalies_on_one_partition_leave_another_alone() {
        let mut h = clean(3);
        for i in 0..3 {
            h.writes.push(ack(100 + i, 1, i as i64));
            h.final_read.push(rec(1, i as i64, 100 + i));
        }
        h.final_end.insert(1, 3);
        // Partition 1 offset 1 vs partition 0 offset 1: different partitions, no conflict.
        let r = check(&h);
        assert!(r.valid(), "{r:?}");
        assert_eq!(r.acknowledged, 6);
    }
}
