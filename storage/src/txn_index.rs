//! The transaction index of one segment: Kafka's `.txnindex`, the aborted transactions whose
//! ABORT marker lies in that segment, oldest marker first. A read_committed fetch asks it which
//! aborted transactions overlap the records it returns (Kafka's `collectAbortedTxns`), so the
//! consumer can drop their records.
//!
//! File format (Kafka's `AbortedTxn`, version 0, big-endian), `{base_offset:020}.txnindex` beside
//! the segment, a sequence of 34-byte entries:
//!
//! ```text
//! version i16 (0), producer_id i64, first_offset i64, last_offset i64 (the marker's offset),
//! last_stable_offset i64
//! ```
//!
//! The file exists only once a segment holds an ABORT marker of a non-empty transaction (Kafka
//! opens it lazily too), so logs without transactions have none. Entries are kept in memory as
//! well; an append writes and fsyncs its entry before the log's recovery point can pass the
//! marker, so a segment below the recovery point always has its complete index. Segments that
//! recovery reads again get theirs rebuilt from their markers. A partial trailing entry (a torn
//! write) is ignored when loading.
//!
//! Not here: locking. The owning log changes an index only under its writer lock and swaps a
//! changed one in whole.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Kafka's `AbortedTxn.CURRENT_VERSION`.
pub const ABORTED_TXN_VERSION: i16 = 0;
/// Kafka's `AbortedTxn.TOTAL_SIZE`.
pub const ABORTED_TXN_BYTES: usize = 2 + 8 + 8 + 8 + 8;
/// Suffix of transaction index files (`LogFileUtils.TXN_INDEX_FILE_SUFFIX`).
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";

/// `{base_offset:020}.txnindex`.
pub fn txn_index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}{TXN_INDEX_FILE_SUFFIX}")
}

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of the ABORT marker.
    pub last_offset: i64,
    /// The last stable offset when the marker was written: every transaction that began below
    /// it had completed (see `ProducerStateManager::last_stable_offset`).
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    fn encode(&self) -> [u8; ABORTED_TXN_BYTES] {
        let mut b = [0u8; ABORTED_TXN_BYTES];
        b[0..2].copy_from_slice(&ABORTED_TXN_VERSION.to_be_bytes());
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<AbortedTxn, String> {
        let version = i16::from_be_bytes([b[0], b[1]]);
        if version != ABORTED_TXN_VERSION {
            return Err(format!("unknown aborted transaction version {version}"));
        }
        let i64_at = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Ok(AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        })
    }
}

/// What a search of one index found (Kafka's `TxnIndexSearchResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnIndexSearch {
    pub aborted: Vec<AbortedTxn>,
    /// An entry's last stable offset reached the upper bound: no later segment can hold a
    /// transaction that started below it, so the search may stop.
    pub complete: bool,
}

/// The aborted transactions of one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionIndex {
    path: PathBuf,
    entries: Vec<AbortedTxn>,
}

impl TransactionIndex {
    /// The index of the segment at `base_offset` in `dir`, read from its file if there is one.
    pub fn open(dir: &Path, base_offset: i64) -> io::Result<TransactionIndex> {
        let path = dir.join(txn_index_file_name(base_offset));
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut entries = Vec::with_capacity(bytes.len() / ABORTED_TXN_BYTES);
        for chunk in bytes.chunks_exact(ABORTED_TXN_BYTES) {
            let entry = AbortedTxn::decode(chunk).map_err(|reason| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {reason}", path.display()),
                )
            })?;
            entries.push(entry);
        }
        Ok(TransactionIndex { path, entries })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `txn` to the file (created on the first entry) and fsyncs it. Markers come in
    /// offset order: an entry whose marker is not after the last one is a caller's bug.
    pub fn append(&mut self, txn: AbortedTxn) -> io::Result<()> {
        if let Some(last) = self.entries.last() {
            assert!(
                txn.last_offset > last.last_offset,
                "aborted transaction at {} appended after one at {} in {}",
                txn.last_offset,
                last.last_offset,
                self.path.display()
            );
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        // A torn earlier append left a partial entry: start at the last whole one.
        let whole = (self.entries.len() * ABORTED_TXN_BYTES) as u64;
        if file.metadata()?.len() != whole {
            file.set_len(whole)?;
        }
        file.write_all(&txn.encode())?;
        file.sync_data()?;
        self.entries.push(txn);
        Ok(())
    }

    /// Drops the entries whose marker is at or after `offset` (Kafka's `truncateTo`), shortening
    /// the file.
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<()> {
        let keep = self.entries.partition_point(|t| t.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        if keep == 0 {
            return self.remove_file();
        }
        let file = OpenOptions::new().write(true).open(&self.path)?;
        file.set_len((keep * ABORTED_TXN_BYTES) as u64)?;
        file.sync_data()
    }

    /// Forgets every entry and removes the file (before recovery rebuilds the index).
    pub fn reset(&mut self) -> io::Result<()> {
        self.entries.clear();
        self.remove_file()
    }

    fn remove_file(&self) -> io::Result<()> {
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Kafka's `collectAbortedTxns`: the entries overlapping `[fetch_offset, upper_bound_offset)`.
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> TxnIndexSearch {
        let mut found = TxnIndexSearch::default();
        for txn in &self.entries {
            if txn.last_offset >= fetch_offset && txn.first_offset < upper_bound_offset {
                found.aborted.push(*txn);
            }
            if txn.last_stable_offset >= upper_bound_offset {
                found.complete = true;
                return found;
            }
        }
        found
    }

    /// Writes `entries` as this index's whole content (a cleaned segment taking the entries of
    /// the segments it replaces), replacing the file atomically, or removing it when empty.
    pub fn rewrite(&mut self, entries: Vec<AbortedTxn>) -> io::Result<()> {
        if entries.is_empty() {
            self.entries.clear();
            return self.remove_file();
        }
        let mut bytes = Vec::with_capacity(entries.len() * ABORTED_TXN_BYTES);
        for e in &entries {
            bytes.extend_from_slice(&e.encode());
        }
        crate::checkpoint::write_atomically(&self.path, &bytes)?;
        self.entries = entries;
        Ok(())
    }
}

/// Removes the `.txnindex` of the segment at `base_offset` in `dir`, if present.
pub(crate) fn remove_txn_index(dir: &Path, base_offset: i64) -> io::Result<()> {
    match fs::remove_file(dir.join(txn_index_file_name(base_offset))) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_dir::TestDir;

    fn txn(producer_id: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn entries_are_kafkas_34_byte_layout() {
        let dir = TestDir::new("txnindex-layout");
        let mut index = TransactionIndex::open(dir.path(), 100).unwrap();
        assert!(!index.path().exists(), "no file until an entry");
        index.append(txn(7, 100, 105, 106)).unwrap();
        let bytes = fs::read(dir.path().join("00000000000000000100.txnindex")).unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&0i16.to_be_bytes());
        for v in [7i64, 100, 105, 106] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(bytes, want);
        assert_eq!(
            TransactionIndex::open(dir.path(), 100).unwrap().entries(),
            &[txn(7, 100, 105, 106)]
        );
    }

    #[test]
    fn collect_truncate_and_reload() {
        let dir = TestDir::new("txnindex-ops");
        let mut index = TransactionIndex::open(dir.path(), 0).unwrap();
        index.append(txn(1, 0, 10, 5)).unwrap();
        index.append(txn(2, 5, 20, 21)).unwrap();
        index.append(txn(3, 30, 40, 41)).unwrap();
        // (fetch offset, upper bound) -> (producer ids, complete)
        let cases: &[((i64, i64), &[i64], bool)] = &[
            ((0, 5), &[1], true),
            ((11, 21), &[2], true),
            ((11, 30), &[2], true),
            ((21, 50), &[3], false),
            ((0, 100), &[1, 2, 3], false),
            ((41, 100), &[], false),
        ];
        for &((from, upper), pids, complete) in cases {
            let found = index.collect_aborted_txns(from, upper);
            let got: Vec<i64> = found.aborted.iter().map(|t| t.producer_id).collect();
            assert_eq!(
                (got.as_slice(), found.complete),
                (pids, complete),
                "{from}..{upper}"
            );
        }
        index.truncate_to(20).unwrap();
        assert_eq!(index.entries(), &[txn(1, 0, 10, 5)]);
        assert_eq!(
            TransactionIndex::open(dir.path(), 0).unwrap().entries(),
            &[txn(1, 0, 10, 5)]
        );
        index.append(txn(4, 12, 15, 16)).unwrap();
        index.truncate_to(0).unwrap();
        assert!(index.is_empty() && !index.path().exists());
    }

    #[test]
    fn a_torn_trailing_entry_is_ignored_and_overwritten() {
        let dir = TestDir::new("txnindex-torn");
        let mut index = TransactionIndex::open(dir.path(), 0).unwrap();
        index.append(txn(1, 0, 10, 11)).unwrap();
        let mut f = OpenOptions::new().append(true).open(index.path()).unwrap();
        f.write_all(&[0, 0, 0, 0, 0]).unwrap();
        drop(f);
        let mut index = TransactionIndex::open(dir.path(), 0).unwrap();
        assert_eq!(index.entries().len(), 1);
        index.append(txn(2, 11, 12, 13)).unwrap();
        let reopened = TransactionIndex::open(dir.path(), 0).unwrap();
        assert_eq!(reopened.entries(), &[txn(1, 0, 10, 11), txn(2, 11, 12, 13)]);
        assert_eq!(
            fs::read(reopened.path()).unwrap().len(),
            2 * ABORTED_TXN_BYTES
        );
    }

    #[test]
    fn rewrite_replaces_the_content() {
        let dir = TestDir::new("txnindex-rewrite");
        let mut index = TransactionIndex::open(dir.path(), 0).unwrap();
        index
            .rewrite(vec![txn(1, 0, 1, 2), txn(2, 3, 4, 5)])
            .unwrap();
        assert_eq!(
            TransactionIndex::open(dir.path(), 0)
                .unwrap()
                .entries()
                .len(),
            2
        );
        index.rewrite(Vec::new()).unwrap();
        assert!(!index.path().exists());
    }
}
