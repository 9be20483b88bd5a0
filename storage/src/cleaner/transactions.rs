//! What a cleaning does with transactions (Kafka's `CleanedTransactionMetadata`).
//!
//! - While the offset map is built, batches of aborted transactions are left out of it
//!   ([`Aborted`]): an aborted write never replaces a committed value.
//! - While segments are rewritten, [`CleanedTransactions`] follows the batches in offset order:
//!   - An aborted transaction's data batches go, records and all (a producer's last batch
//!     stays, empty, for its sequence).
//!   - Its ABORT marker stays while a batch of the transaction was still met in this cleaning,
//!     and so does its transaction index entry, which goes to the cleaned segment holding the
//!     marker.
//!   - A COMMIT marker stays while a data batch of its transaction was met.
//!   - A marker with nothing of its transaction left is stamped with a delete horizon
//!     (`now + delete.retention.ms`, as a tombstone's batch) and removed by a cleaning after it,
//!     unless it is the last batch of an active producer (its epoch fences zombies).
//!   - The index of a cleaned segment keeps only the entries of markers that stay: a reader
//!     never meets an aborted transaction without the marker that ends it.

use std::collections::{HashMap, HashSet};

use crate::batch::{BatchHeader, ControlRecordType, EndTxnMarker};
use crate::txn_index::AbortedTxn;

/// The aborted transactions of a cleaned range, by producer: whether a transactional batch
/// belongs to one of them.
pub(super) struct Aborted {
    by_producer: HashMap<i64, Vec<(i64, i64)>>,
}

impl Aborted {
    pub(super) fn new(list: Vec<AbortedTxn>) -> Aborted {
        let mut by_producer: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for a in list {
            by_producer
                .entry(a.producer_id)
                .or_default()
                .push((a.first_offset, a.last_offset));
        }
        Aborted { by_producer }
    }

    /// `h` is a transactional batch inside one of its producer's aborted transactions (from the
    /// transaction's first offset to its ABORT marker).
    pub(super) fn holds(&self, h: &BatchHeader) -> bool {
        h.is_transactional()
            && self.by_producer.get(&h.producer_id).is_some_and(|ranges| {
                ranges
                    .iter()
                    .any(|&(first, last)| first <= h.base_offset && h.base_offset <= last)
            })
    }
}

/// The transactions met so far by a cleaning's rewrite, which reads batches in offset order.
#[derive(Debug, Default)]
pub(super) struct CleanedTransactions {
    /// Aborted transactions not reached yet, the earliest first offset last.
    upcoming: Vec<AbortedTxn>,
    /// Aborted transactions reached and not ended yet, by producer, with whether a batch of
    /// theirs was met.
    ongoing_aborted: HashMap<i64, (AbortedTxn, bool)>,
    /// Producers with a data batch of a not-aborted transaction met and its marker not yet.
    ongoing_committed: HashSet<i64>,
    /// Aborted transactions whose marker stays: the cleaned segments' index entries.
    retained: Vec<AbortedTxn>,
}

impl CleanedTransactions {
    /// Starts with the aborted transactions of the range to rewrite.
    pub(super) fn new(mut aborted: Vec<AbortedTxn>) -> CleanedTransactions {
        aborted.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
        CleanedTransactions {
            upcoming: aborted,
            ..CleanedTransactions::default()
        }
    }

    fn reach(&mut self, offset: i64) {
        while self
            .upcoming
            .last()
            .is_some_and(|a| a.first_offset <= offset)
        {
            let a = self.upcoming.pop().expect("checked");
            self.ongoing_aborted
                .entry(a.producer_id)
                .or_insert((a, false));
        }
    }

    /// A data batch: true if it belongs to an aborted transaction (its records go).
    pub(super) fn on_batch(&mut self, h: &BatchHeader) -> bool {
        self.reach(h.last_offset());
        if !h.is_transactional() {
            return false;
        }
        match self.ongoing_aborted.get_mut(&h.producer_id) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.ongoing_committed.insert(h.producer_id);
                false
            }
        }
    }

    /// A control batch with its marker (`None`: no record, or not a transaction marker):
    /// true if nothing of its transaction is left, so the marker may go once its delete horizon
    /// has passed.
    pub(super) fn on_control(&mut self, h: &BatchHeader, marker: Option<EndTxnMarker>) -> bool {
        self.reach(h.last_offset());
        if h.records_count == 0 {
            // Emptied by an earlier cleaning.
            return true;
        }
        match marker.map(|m| m.control_type) {
            Some(ControlRecordType::Abort) => match self.ongoing_aborted.remove(&h.producer_id) {
                Some((txn, true)) => {
                    self.retained.push(txn);
                    false
                }
                _ => true,
            },
            Some(ControlRecordType::Commit) => !self.ongoing_committed.remove(&h.producer_id),
            None => false,
        }
    }

    /// The index entries of retained markers in `[from, to)`: those of one cleaned segment.
    pub(super) fn retained_in(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        self.retained
            .iter()
            .filter(|a| from <= a.last_offset && a.last_offset < to)
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(base: i64, producer_id: i64, transactional: bool, control: bool) -> BatchHeader {
        let mut attributes = 0i16;
        if transactional {
            attributes |= crate::batch::TRANSACTIONAL_FLAG_MASK;
        }
        if control {
            attributes |= crate::batch::CONTROL_FLAG_MASK;
        }
        BatchHeader {
            base_offset: base,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: 0,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: 0,
            base_sequence: 0,
            records_count: 1,
        }
    }

    fn marker(control_type: ControlRecordType) -> Option<EndTxnMarker> {
        Some(EndTxnMarker {
            control_type,
            coordinator_epoch: 0,
        })
    }

    fn aborted(producer_id: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    #[test]
    fn markers_stay_while_their_transactions_have_batches_and_aborted_data_goes() {
        // Producer 1: aborted [0, 3]; producer 2: committed data at 1, marker at 4;
        // producer 3: an aborted transaction whose data an earlier cleaning removed (marker 5);
        // producer 4: a commit marker whose data is gone (6).
        let mut t = CleanedTransactions::new(vec![aborted(3, 2, 5), aborted(1, 0, 3)]);
        assert!(t.on_batch(&header(0, 1, true, false)), "aborted data goes");
        assert!(
            !t.on_batch(&header(1, 2, true, false)),
            "committed data stays"
        );
        assert!(!t.on_batch(&header(2, 9, false, false)), "plain data stays");
        assert!(
            !t.on_control(&header(3, 1, true, true), marker(ControlRecordType::Abort)),
            "a batch of it was met: the ABORT marker stays"
        );
        assert!(!t.on_control(&header(4, 2, true, true), marker(ControlRecordType::Commit)));
        assert!(t.on_control(&header(5, 3, true, true), marker(ControlRecordType::Abort)));
        assert!(t.on_control(&header(6, 4, true, true), marker(ControlRecordType::Commit)));
        assert_eq!(t.retained_in(0, 10), vec![aborted(1, 0, 3)]);
        assert!(t.retained_in(4, 10).is_empty(), "by the marker's offset");
        let mut empty = header(7, 5, true, true);
        empty.records_count = 0;
        assert!(t.on_control(&empty, None), "an emptied control batch goes");
    }
}
