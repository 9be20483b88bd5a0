//! The leader epoch cache of one partition: which leader epoch began at which offset.
//!
//! Each entry `(epoch, start_offset)` says that the records from `start_offset` up to the next
//! entry's start offset were written by the leader of `epoch`. Followers use it (through
//! OffsetForLeaderEpoch and the fetch's diverging-epoch check) to find where their log diverges
//! from the leader's, and consumers to validate their position after a leader change.
//!
//! The rules are Kafka's `LeaderEpochFileCache`: entries are strictly increasing in epoch and
//! non-decreasing in start offset; [`assign`](LeaderEpochCache::assign) drops trailing entries that
//! would break that; `end_offset_for` answers OffsetForLeaderEpoch exactly as Kafka does.
//!
//! The cache is persisted in `<partition dir>/leader-epoch-checkpoint`, Kafka's checkpoint format
//! version 0 with `epoch start_offset` lines (see [`crate::checkpoint`]). Unlike Kafka, which
//! flushes truncations asynchronously, every change here is written before the call returns:
//! truncations are rare (leader changes, retention) and a synchronous write leaves nothing to
//! reconcile after a crash.
//!
//! This type is not internally synchronised: the owning log serialises mutations and decides
//! when to call them (appends, leader changes, truncation, retention). It knows nothing of
//! segments or the log end offset beyond what the caller passes in.

use std::path::{Path, PathBuf};

use crate::checkpoint::{CheckpointEntry, CheckpointError, CheckpointFile};

/// File name of the leader epoch checkpoint inside a partition directory.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";

/// Kafka's `UNDEFINED_EPOCH` (OffsetsForLeaderEpochResponse).
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET` (OffsetsForLeaderEpochResponse).
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

#[derive(Debug, thiserror::Error)]
pub enum EpochError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Kafka rejects these with IllegalArgumentException; they would mean a caller bug or a
    /// batch without a partition leader epoch.
    #[error("invalid leader epoch entry: epoch {epoch}, start offset {start_offset} (both must be >= 0)")]
    InvalidEntry { epoch: i32, start_offset: i64 },
}

/// One line of `leader-epoch-checkpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

impl EpochEntry {
    pub fn new(epoch: i32, start_offset: i64) -> Self {
        EpochEntry {
            epoch,
            start_offset,
        }
    }
}

impl CheckpointEntry for EpochEntry {
    fn to_line(&self) -> String {
        format!("{} {}", self.epoch, self.start_offset)
    }

    fn parse_line(line: &str) -> Result<Self, String> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [epoch, start_offset] = fields[..] else {
            return Err(format!(
                "expected 2 fields `epoch start_offset`, found {}",
                fields.len()
            ));
        };
        let epoch = epoch
            .parse::<i32>()
            .map_err(|e| format!("epoch {epoch:?} is not an int32: {e}"))?;
        let start_offset = start_offset
            .parse::<i64>()
            .map_err(|e| format!("start offset {start_offset:?} is not an int64: {e}"))?;
        Ok(EpochEntry {
            epoch,
            start_offset,
        })
    }
}

/// A partition's leader epoch cache, backed by its `leader-epoch-checkpoint` file.
#[derive(Debug)]
pub struct LeaderEpochCache {
    checkpoint: CheckpointFile<EpochEntry>,
    /// Sorted by epoch (strictly increasing); start offsets are non-decreasing.
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// Opens the cache of the partition in `partition_dir`, reading its checkpoint if there is
    /// one. As in Kafka, the stored entries are replayed through `assign`, so a file whose
    /// entries are out of order loads as the monotonic cache they imply. The caller should then
    /// `truncate_from_end(log_end_offset)` and `truncate_from_start(log_start_offset)`, because the
    /// file may predate a truncation.
    pub fn open(partition_dir: &Path) -> Result<LeaderEpochCache, EpochError> {
        let checkpoint = CheckpointFile::new(partition_dir.join(LEADER_EPOCH_CHECKPOINT_FILE));
        let stored = checkpoint.read()?;
        let mut cache = LeaderEpochCache {
            checkpoint,
            entries: Vec::with_capacity(stored.len()),
        };
        for entry in stored {
            cache.assign_in_memory(entry)?;
        }
        Ok(cache)
    }

    pub fn path(&self) -> &Path {
        self.checkpoint.path()
    }

    /// Records that `epoch` began at `start_offset`, and persists the cache if that changed it.
    ///
    /// Kafka's rule: nothing happens if `epoch` is the latest epoch and `start_offset` is not
    /// below its start (re-registering the current epoch, e.g. every append of the leader).
    /// Otherwise every trailing entry with `epoch >= new epoch` or `start_offset >= new start` is
    /// removed (it conflicts with the new one: a higher epoch cannot precede it, and a later
    /// start offset means the log was truncated below it) and the new entry is appended.
    /// Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool, EpochError> {
        let changed = self.assign_in_memory(EpochEntry::new(epoch, start_offset))?;
        if changed {
            self.persist()?;
        }
        Ok(changed)
    }

    fn assign_in_memory(&mut self, entry: EpochEntry) -> Result<bool, EpochError> {
        if entry.epoch < 0 || entry.start_offset < 0 {
            return Err(EpochError::InvalidEntry {
                epoch: entry.epoch,
                start_offset: entry.start_offset,
            });
        }
        let update_needed = match self.entries.last() {
            None => true,
            Some(latest) => entry.epoch != latest.epoch || entry.start_offset < latest.start_offset,
        };
        if !update_needed {
            return Ok(false);
        }
        while let Some(last) = self.entries.last() {
            if last.epoch >= entry.epoch || last.start_offset >= entry.start_offset {
                let removed = self.entries.pop();
                // Kafka warns only when data was actually lost: more than one entry, or one that
                // did not start exactly where the new one does.
                if let Some(removed) = removed {
                    if removed.start_offset != entry.start_offset {
                        tracing::warn!(
                            path = %self.checkpoint.path().display(),
                            ?removed,
                            new = ?entry,
                            "new leader epoch entry truncated a conflicting entry"
                        );
                    }
                }
            } else {
                break;
            }
        }
        self.entries.push(entry);
        Ok(true)
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn latest_entry(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn earliest_entry(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// The epoch of the latest leader that has an entry (Kafka's `latestEpoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The largest epoch below `epoch` that has an entry.
    pub fn previous_epoch(&self, epoch: i32) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.epoch < epoch)
            .map(|e| e.epoch)
    }

    /// Kafka's `endOffsetFor(requestedEpoch, logEndOffset)`: `(epoch, end_offset)` where epoch is
    /// the largest known epoch `<= requested_epoch` and end_offset is where the next higher epoch
    /// starts (or `log_end_offset` for the latest epoch). Cases, in Kafka's order:
    /// - requested is UNDEFINED (-1) -> `(-1, -1)`;
    /// - requested is the latest epoch -> `(requested, log_end_offset)`;
    /// - no epoch above requested (requested above all, or the cache is empty) -> `(-1, -1)`;
    /// - no epoch at or below requested -> `(requested, first entry's start offset)`: the data
    ///   of older epochs is gone, so the follower should start from the leader's first epoch;
    /// - otherwise -> `(floor epoch, start offset of the next higher epoch)`.
    pub fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> (i32, i64) {
        if requested_epoch == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested_epoch) {
            return (requested_epoch, log_end_offset);
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > requested_epoch) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        match self
            .entries
            .iter()
            .rev()
            .find(|e| e.epoch <= requested_epoch)
        {
            None => (requested_epoch, higher.start_offset),
            Some(floor) => (floor.epoch, higher.start_offset),
        }
    }

    /// The epoch of the leader that wrote `offset`: the entry starting exactly at `offset`, else
    /// the last entry starting below it; None if the offset precedes every entry.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        // When several epochs start at the same offset (leaders that wrote nothing), Kafka
        // returns the first one in epoch order that starts exactly there.
        let mut previous = None;
        for entry in &self.entries {
            if entry.start_offset == offset {
                return Some(entry.epoch);
            }
            if entry.start_offset > offset {
                return previous;
            }
            previous = Some(entry.epoch);
        }
        previous
    }

    /// Removes every entry with `start_offset >= end_offset` (the log was truncated to
    /// `end_offset`, so those epochs' first records are gone). Kafka does nothing for a negative
    /// offset or when the latest entry starts below `end_offset`. Returns whether it changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<bool, EpochError> {
        let removes_any = end_offset >= 0
            && self
                .entries
                .last()
                .is_some_and(|latest| latest.start_offset >= end_offset);
        if !removes_any {
            return Ok(false);
        }
        while self
            .entries
            .last()
            .is_some_and(|e| e.start_offset >= end_offset)
        {
            self.entries.pop();
        }
        self.persist()?;
        Ok(true)
    }

    /// The log start moved up to `start_offset` (retention, DeleteRecords): removes the entries
    /// starting at or below it and re-inserts the last of them with its start moved up to
    /// `start_offset`, so the epoch of the first retained record is still known. An entry that
    /// starts exactly at `start_offset` therefore stays as it is. Returns whether it changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<bool, EpochError> {
        let removed = self
            .entries
            .iter()
            .take_while(|e| e.start_offset <= start_offset)
            .count();
        if removed == 0 {
            return Ok(false);
        }
        let first_retained = EpochEntry::new(self.entries[removed - 1].epoch, start_offset);
        let changed = removed > 1 || self.entries[0] != first_retained;
        self.entries.drain(..removed - 1);
        self.entries[0] = first_retained;
        if changed {
            self.persist()?;
        }
        Ok(changed)
    }

    /// Removes every entry and persists the empty cache (the log was emptied and restarts
    /// elsewhere, e.g. `truncate_fully_and_start_at`).
    pub fn clear(&mut self) -> Result<(), EpochError> {
        self.entries.clear();
        self.persist()
    }

    /// Writes the current entries to the checkpoint file, durably.
    pub fn persist(&self) -> Result<(), EpochError> {
        self.checkpoint.write(&self.entries)?;
        Ok(())
    }

    /// The partition directory moved (e.g. a rename on delete): later writes go to the new one.
    pub fn set_partition_dir(&mut self, partition_dir: &Path) {
        self.checkpoint = CheckpointFile::new(partition_dir.join(LEADER_EPOCH_CHECKPOINT_FILE));
    }

    /// The checkpoint path a partition directory would use.
    pub fn checkpoint_path(partition_dir: &Path) -> PathBuf {
        partition_dir.join(LEADER_EPOCH_CHECKPOINT_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_dir::TestDir;
    use std::fs;

    fn cache_with(dir: &TestDir, entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::open(dir.path()).unwrap();
        for &(epoch, start) in entries {
            cache.assign(epoch, start).unwrap();
        }
        cache
    }

    fn pairs(cache: &LeaderEpochCache) -> Vec<(i32, i64)> {
        cache
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    /// (epoch, start offset) entries of a cache.
    type Entries = &'static [(i32, i64)];

    #[test]
    fn assign_follows_kafkas_rules() {
        // (initial entries, assign, expected entries, expected "changed")
        let cases: &[(Entries, (i32, i64), Entries, bool)] = &[
            // first entry
            (&[], (0, 0), &[(0, 0)], true),
            // new epoch at a later offset: appended
            (&[(0, 0)], (1, 10), &[(0, 0), (1, 10)], true),
            // same epoch, later offset (every append of the leader): ignored
            (&[(0, 0), (1, 10)], (1, 15), &[(0, 0), (1, 10)], false),
            // same epoch, same offset: ignored
            (&[(0, 0), (1, 10)], (1, 10), &[(0, 0), (1, 10)], false),
            // same epoch, earlier offset: replaces the entry (truncated and rewritten)
            (&[(0, 0), (1, 10)], (1, 5), &[(0, 0), (1, 5)], true),
            // lower epoch than latest: the later entries conflict and are dropped
            (
                &[(0, 0), (2, 10), (3, 20)],
                (1, 15),
                &[(0, 0), (1, 15)],
                true,
            ),
            // higher epoch at an earlier offset: trailing entries at/after it are dropped
            (
                &[(0, 0), (1, 10), (2, 20)],
                (3, 15),
                &[(0, 0), (1, 10), (3, 15)],
                true,
            ),
            // higher epoch at the same start as the latest (a leader that wrote nothing)
            (&[(0, 0), (1, 10)], (2, 10), &[(0, 0), (2, 10)], true),
            // epochs may skip numbers
            (&[(0, 0)], (7, 3), &[(0, 0), (7, 3)], true),
            // new epoch at offset 0 wipes everything
            (&[(1, 0), (2, 10)], (3, 0), &[(3, 0)], true),
            // lower epoch at a higher offset than all: entries with higher epoch dropped
            (&[(5, 0), (6, 10)], (4, 20), &[(4, 20)], true),
        ];
        for (initial, (epoch, start), want, want_changed) in cases {
            let dir = TestDir::new("epoch-assign");
            let mut cache = cache_with(&dir, initial);
            assert_eq!(pairs(&cache), initial.to_vec(), "setup {initial:?}");
            let changed = cache.assign(*epoch, *start).unwrap();
            assert_eq!(
                pairs(&cache),
                want.to_vec(),
                "{initial:?} + ({epoch}, {start})"
            );
            assert_eq!(changed, *want_changed, "{initial:?} + ({epoch}, {start})");
            // The file always matches memory.
            let reopened = LeaderEpochCache::open(dir.path()).unwrap();
            assert_eq!(pairs(&reopened), want.to_vec(), "reopened {initial:?}");
        }
    }

    #[test]
    fn assign_rejects_negative_values() {
        let dir = TestDir::new("epoch-neg");
        let mut cache = cache_with(&dir, &[(0, 0)]);
        for (epoch, start) in [(-1, 5), (1, -1)] {
            let err = cache.assign(epoch, start).unwrap_err();
            assert!(matches!(err, EpochError::InvalidEntry { .. }), "{err:?}");
        }
        assert_eq!(pairs(&cache), vec![(0, 0)]);
    }

    #[test]
    fn end_offset_for_matches_kafka() {
        let dir = TestDir::new("epoch-eof");
        let log_end_offset = 100;
        let cache = cache_with(&dir, &[(1, 0), (3, 20), (5, 50), (6, 70)]);
        assert_eq!(pairs(&cache), vec![(1, 0), (3, 20), (5, 50), (6, 70)]);
        // (requested, expected)
        let cases: &[(i32, (i32, i64))] = &[
            (UNDEFINED_EPOCH, (-1, -1)),
            (6, (6, log_end_offset)), // latest epoch: the LEO
            (7, (-1, -1)),            // above all known epochs
            (i32::MAX, (-1, -1)),
            (0, (0, 0)),   // below all: requested epoch, first entry's start
            (1, (1, 20)),  // exact, ends where 3 starts
            (2, (1, 20)),  // unknown epoch between: floor epoch 1, next start
            (3, (3, 50)),  // exact
            (4, (3, 50)),  // floor 3, next is 5
            (5, (5, 70)),  // exact, ends where the latest starts
            (-2, (-2, 0)), // Kafka only special-cases -1
        ];
        for &(requested, want) in cases {
            assert_eq!(
                cache.end_offset_for(requested, log_end_offset),
                want,
                "requested epoch {requested}"
            );
        }
    }

    #[test]
    fn end_offset_for_empty_cache_is_undefined() {
        let dir = TestDir::new("epoch-eof-empty");
        let cache = LeaderEpochCache::open(dir.path()).unwrap();
        for requested in [-1, 0, 1, 99] {
            assert_eq!(cache.end_offset_for(requested, 42), (-1, -1), "{requested}");
        }
        assert_eq!(cache.latest_epoch(), None);
    }

    #[test]
    fn epoch_for_offset_cases() {
        let dir = TestDir::new("epoch-for-offset");
        let cache = cache_with(&dir, &[(1, 10), (2, 20), (4, 20), (5, 30)]);
        // Note assign(4, 20) removed (2, 20): equal start offsets conflict.
        assert_eq!(pairs(&cache), vec![(1, 10), (4, 20), (5, 30)]);
        let cases: &[(i64, Option<i32>)] = &[
            (0, None),
            (9, None),
            (10, Some(1)),
            (19, Some(1)),
            (20, Some(4)),
            (29, Some(4)),
            (30, Some(5)),
            (1_000, Some(5)),
        ];
        for &(offset, want) in cases {
            assert_eq!(cache.epoch_for_offset(offset), want, "offset {offset}");
        }
    }

    #[test]
    fn truncate_from_end_cases() {
        let initial: &[(i32, i64)] = &[(0, 0), (1, 10), (2, 20), (3, 30)];
        let cases: &[(i64, Entries, bool)] = &[
            (31, &[(0, 0), (1, 10), (2, 20), (3, 30)], false),
            (30, &[(0, 0), (1, 10), (2, 20)], true), // start_offset >= end_offset is dropped
            (25, &[(0, 0), (1, 10), (2, 20)], true),
            (11, &[(0, 0), (1, 10)], true),
            (1, &[(0, 0)], true),
            (0, &[], true),
            (-1, &[(0, 0), (1, 10), (2, 20), (3, 30)], false), // Kafka ignores negative offsets
        ];
        for &(end_offset, want, want_changed) in cases {
            let dir = TestDir::new("epoch-tfe");
            let mut cache = cache_with(&dir, initial);
            let changed = cache.truncate_from_end(end_offset).unwrap();
            assert_eq!(
                pairs(&cache),
                want.to_vec(),
                "truncate_from_end({end_offset})"
            );
            assert_eq!(changed, want_changed, "truncate_from_end({end_offset})");
            let reopened = LeaderEpochCache::open(dir.path()).unwrap();
            assert_eq!(pairs(&reopened), want.to_vec(), "persisted ({end_offset})");
        }
    }

    #[test]
    fn truncate_from_start_cases() {
        let initial: &[(i32, i64)] = &[(0, 0), (1, 10), (2, 20), (3, 30)];
        let cases: &[(i64, Entries, bool)] = &[
            (0, &[(0, 0), (1, 10), (2, 20), (3, 30)], false), // first entry starts exactly there
            (5, &[(0, 5), (1, 10), (2, 20), (3, 30)], true),  // first entry's start moves up
            (10, &[(1, 10), (2, 20), (3, 30)], true),         // exclusive: entry at 10 kept as is
            (15, &[(1, 15), (2, 20), (3, 30)], true),
            (30, &[(3, 30)], true),
            (45, &[(3, 45)], true), // beyond the last start: the latest epoch moves up
        ];
        for &(start_offset, want, want_changed) in cases {
            let dir = TestDir::new("epoch-tfs");
            let mut cache = cache_with(&dir, initial);
            let changed = cache.truncate_from_start(start_offset).unwrap();
            assert_eq!(
                pairs(&cache),
                want.to_vec(),
                "truncate_from_start({start_offset})"
            );
            assert_eq!(changed, want_changed, "truncate_from_start({start_offset})");
            let reopened = LeaderEpochCache::open(dir.path()).unwrap();
            assert_eq!(
                pairs(&reopened),
                want.to_vec(),
                "persisted ({start_offset})"
            );
        }
        // Nothing below the first entry: no change.
        let dir = TestDir::new("epoch-tfs2");
        let mut cache = cache_with(&dir, &[(4, 100)]);
        assert!(!cache.truncate_from_start(50).unwrap());
        assert_eq!(pairs(&cache), vec![(4, 100)]);
    }

    #[test]
    fn file_is_kafkas_format() {
        let dir = TestDir::new("epoch-file");
        let cache = cache_with(&dir, &[(0, 0), (3, 1234)]);
        assert_eq!(
            fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap(),
            "0\n2\n0 0\n3 1234\n"
        );
        assert_eq!(cache.path(), dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE));
    }

    #[test]
    fn reads_file_written_by_kafka_and_replays_through_assign() {
        let dir = TestDir::new("epoch-kafka-file");
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE);
        fs::write(&path, "0\n3\n0 0\n2 57\n5 100\n").unwrap();
        let cache = LeaderEpochCache::open(dir.path()).unwrap();
        assert_eq!(pairs(&cache), vec![(0, 0), (2, 57), (5, 100)]);
        assert_eq!(cache.latest_epoch(), Some(5));
        assert_eq!(cache.previous_epoch(5), Some(2));
        assert_eq!(cache.previous_epoch(0), None);

        // Out-of-order entries load as the monotonic cache `assign` makes of them.
        fs::write(&path, "0\n3\n0 0\n5 100\n2 57\n").unwrap();
        let cache = LeaderEpochCache::open(dir.path()).unwrap();
        assert_eq!(pairs(&cache), vec![(0, 0), (2, 57)]);
    }

    #[test]
    fn malformed_files_are_clear_errors() {
        let dir = TestDir::new("epoch-bad");
        let path = dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE);
        let cases: &[(&str, &str)] = &[
            ("0\n1\n3\n", "expected 2 fields"),
            ("0\n1\n3 x\n", "start offset \"x\" is not an int64"),
            ("0\n1\nx 3\n", "epoch \"x\" is not an int32"),
            ("0\n2\n3 4\n", "expected 2 entries"),
            ("1\n0\n", "unrecognised version 1"),
            ("0\n1\n-1 4\n", "invalid leader epoch entry"),
        ];
        for (text, fragment) in cases {
            fs::write(&path, text).unwrap();
            let err = LeaderEpochCache::open(dir.path()).unwrap_err().to_string();
            assert!(
                err.contains(fragment),
                "{text:?}: {err:?} lacks {fragment:?}"
            );
        }
        let malformed = {
            fs::write(&path, "0\n1\n3\n").unwrap();
            LeaderEpochCache::open(dir.path()).unwrap_err()
        };
        assert!(malformed.to_string().contains(LEADER_EPOCH_CHECKPOINT_FILE));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Assign(i32, i64),
        TruncateFromEnd(i64),
        TruncateFromStart(i64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..12i32, 0..200i64).prop_map(|(e, o)| Op::Assign(e, o)),
            1 => (-1..220i64).prop_map(Op::TruncateFromEnd),
            1 => (0..220i64).prop_map(Op::TruncateFromStart),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// Whatever the sequence of operations: epochs strictly increase, start offsets never
        /// decrease, the latest assigned entry is present right after its assign, and the file
        /// always reopens to the same cache.
        #[test]
        fn invariants_hold_under_random_operations(ops in proptest::collection::vec(op(), 1..40)) {
            let dir = TestDir::new("epoch-prop");
            let mut cache = LeaderEpochCache::open(dir.path()).unwrap();
            for op in &ops {
                match *op {
                    Op::Assign(epoch, start) => {
                        cache.assign(epoch, start).unwrap();
                        let latest = cache.latest_entry().unwrap();
                        // Either it was appended, or it re-registered the latest epoch at or
                        // after its start.
                        proptest::prop_assert!(
                            latest == EpochEntry::new(epoch, start)
                                || (latest.epoch == epoch && latest.start_offset <= start),
                            "after {:?}: {:?}", op, cache.entries()
                        );
                    }
                    Op::TruncateFromEnd(end) => {
                        cache.truncate_from_end(end).unwrap();
                        if end >= 0 {
                            proptest::prop_assert!(cache.entries().iter().all(|e| e.start_offset < end));
                        }
                    }
                    Op::TruncateFromStart(start) => {
                        let epoch_before = cache.epoch_for_offset(start);
                        cache.truncate_from_start(start).unwrap();
                        proptest::prop_assert!(cache.entries().iter().all(|e| e.start_offset >= start));
                        proptest::prop_assert_eq!(cache.epoch_for_offset(start), epoch_before);
                    }
                }
                for pair in cache.entries().windows(2) {
                    proptest::prop_assert!(pair[0].epoch < pair[1].epoch, "{:?}", cache.entries());
                    proptest::prop_assert!(pair[0].start_offset <= pair[1].start_offset, "{:?}", cache.entries());
                }
                let reopened = LeaderEpochCache::open(dir.path()).unwrap();
                proptest::prop_assert_eq!(reopened.entries(), cache.entries());
            }
        }
    }

    #[test]
    fn clear_persists_an_empty_cache() {
        let dir = TestDir::new("epoch-clear");
        let mut cache = cache_with(&dir, &[(0, 0), (1, 5)]);
        cache.clear().unwrap();
        assert!(cache.is_empty());
        assert_eq!(
            fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap(),
            "0\n0\n"
        );
        assert!(LeaderEpochCache::open(dir.path()).unwrap().is_empty());
    }
}
