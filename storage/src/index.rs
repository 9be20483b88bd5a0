//! Kafka's sparse segment indexes, memory-mapped.
//!
//! * [`OffsetIndex`] (`.index`): 8-byte entries `relative offset u32, position u32`, big-endian;
//!   maps the last offset of a batch to the byte position of that batch in the `.log` file.
//! * [`TimeIndex`] (`.timeindex`): 12-byte entries `timestamp i64, relative offset u32`; the
//!   largest timestamp seen so far in the segment and the offset it was first seen at.
//!
//! Entries are added every `index.interval.bytes` of log data, so a lookup gives a position at
//! or before the wanted batch and the caller scans forward. Files are preallocated to
//! `segment.index.bytes` (rounded down to whole entries) while the segment is active and trimmed
//! to the entries present when it rolls or the log closes, exactly like Kafka, so Kafka's
//! `DumpLogSegments` reads them. An index is not thread-safe by itself: the segment wraps each in
//! a mutex. It knows nothing about the `.log` file; rebuilding from the log is the segment's job.
//!
//! An index holds no file descriptor, and no map until it is needed: the file is mapped the
//! first time an entry is read or written (Kafka's `LazyIndex`), the descriptor closed as soon
//! as it is mapped (a shared map stays valid after its descriptor closes), and reopened by path
//! only for the rare calls that need one (resize, fsync). The segment counts each map in the
//! broker's [`crate::handles::HandlePool`], which unmaps idle ones ([`OffsetIndex`] and
//! [`TimeIndex`] are pooled resources); an unmapped index keeps its entry count and maps again
//! on its next use. An index with no entries (most segments of a broker with many small
//! partitions) is never mapped at all.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};
use crate::handles::Resource;
use crate::mmap::FileMap;

pub const OFFSET_INDEX_ENTRY_BYTES: usize = 8;
pub const TIME_INDEX_ENTRY_BYTES: usize = 12;
/// Kafka's warm section of an index: the tail searched first (8 KiB, two pages).
const WARM_SECTION_BYTES: usize = 8192;

/// The file, its map (while mapped) and entry count shared by both index kinds.
struct IndexFile {
    path: PathBuf,
    map: Option<FileMap>,
    entry_bytes: usize,
    entries: usize,
    /// Current file length in bytes (a multiple of `entry_bytes`).
    len: usize,
}

impl IndexFile {
    /// Opens or creates the index at `path`, without mapping it. A new file is preallocated to
    /// `max_bytes`; an existing one keeps its length and its entry count is derived from it (a
    /// trimmed file; an empty one stays empty: it is an inactive segment's index without
    /// entries, and a preallocated file of zeros would look corrupt after a crash), unless
    /// `fresh`, which empties it (for a rebuild). The active segment's indexes are resized to
    /// full size by their log.
    fn open(path: &Path, entry_bytes: usize, max_bytes: usize, fresh: bool) -> Result<IndexFile> {
        let max_bytes = max_bytes / entry_bytes * entry_bytes;
        let existing = match std::fs::metadata(path) {
            Ok(m) => Some(m.len() as usize),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(crate::StorageError::io(path, e)),
        };
        let (entries, len) = match existing {
            Some(file_len) if !fresh => {
                let len = file_len / entry_bytes * entry_bytes;
                if len != file_len {
                    Self::reopen_path(path, false)?
                        .set_len(len as u64)
                        .at(path)?;
                }
                (len / entry_bytes, len)
            }
            _ => {
                Self::reopen_path(path, true)?
                    .set_len(max_bytes as u64)
                    .at(path)?;
                (0, max_bytes)
            }
        };
        Ok(IndexFile {
            path: path.to_owned(),
            map: None,
            entry_bytes,
            entries,
            len,
        })
    }

    fn max_entries(&self) -> usize {
        self.len / self.entry_bytes
    }

    /// Maps the file if it is not mapped (and not empty).
    fn ensure_mapped(&mut self) -> Result<()> {
        if self.map.is_none() && self.len > 0 {
            let file = self.reopen()?;
            // The map outlives the descriptor; see the module docs.
            self.map = Some(FileMap::map(&file, self.len).at(&self.path)?);
        }
        Ok(())
    }

    /// Entry `n` (< `entries`); the index must be mapped.
    fn entry(&self, n: usize) -> &[u8] {
        let map = self
            .map
            .as_ref()
            .expect("an index with entries is mapped before they are read");
        &map.as_slice()[n * self.entry_bytes..(n + 1) * self.entry_bytes]
    }

    fn push(&mut self, bytes: &[u8]) -> Result<()> {
        debug_assert!(self.entries < self.max_entries());
        self.ensure_mapped()?;
        let at = self.entries * self.entry_bytes;
        let map = self.map.as_mut().expect("mapped above");
        map.as_mut()[at..at + self.entry_bytes].copy_from_slice(bytes);
        self.entries += 1;
        Ok(())
    }

    /// Changes the file length (whole entries); keeps the entries that fit. The index is left
    /// unmapped (dirty pages of the old map stay in the page cache) and maps again when used.
    fn resize(&mut self, bytes: usize) -> Result<()> {
        let bytes = bytes / self.entry_bytes * self.entry_bytes;
        if bytes == self.len {
            return Ok(());
        }
        // No map may cover the file while it shrinks.
        self.map = None;
        self.reopen()?.set_len(bytes as u64).at(&self.path)?;
        self.len = bytes;
        self.entries = self.entries.min(bytes / self.entry_bytes);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        if let Some(map) = &self.map {
            map.flush().at(&self.path)?;
        }
        // fsync writes the file's dirty pages, those of an earlier map included.
        self.reopen()?.sync_all().at(&self.path)
    }

    /// A short-lived descriptor for the file (map, resize, fsync); closed when dropped.
    fn reopen(&self) -> Result<File> {
        Self::reopen_path(&self.path, false)
    }

    fn reopen_path(path: &Path, create: bool) -> Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)
            .at(path)
    }

    /// Index of the last entry whose key (from `key`) is <= `target`, by binary search.
    ///
    /// Like Kafka's `AbstractIndex`, the search first tries the last [`WARM_SECTION_BYTES`] of
    /// entries: most lookups (consumers and followers near the end of the log) land there, so
    /// they touch the same few pages instead of a fresh path through the whole index.
    fn floor_slot(&mut self, target: i64, key: impl Fn(&[u8]) -> i64) -> Result<Option<usize>> {
        if self.entries == 0 {
            return Ok(None);
        }
        self.ensure_mapped()?;
        if key(self.entry(0)) > target {
            return Ok(None);
        }
        let warm_entries = WARM_SECTION_BYTES / self.entry_bytes;
        let first_warm = self.entries.saturating_sub(1 + warm_entries);
        let (mut lo, mut hi) = if key(self.entry(first_warm)) <= target {
            (first_warm, self.entries - 1)
        } else {
            (0, first_warm)
        };
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if key(self.entry(mid)) <= target {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Ok(Some(lo))
    }

    /// Entry `n`, mapping the file if needed.
    fn entry_mapped(&mut self, n: usize) -> Result<&[u8]> {
        self.ensure_mapped()?;
        Ok(self.entry(n))
    }
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// An (offset, byte position) pair from the offset index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A (timestamp, offset) pair from the time index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// `.index`: last offset of a batch -> position of that batch in the segment's log file.
pub struct OffsetIndex {
    base_offset: i64,
    file: IndexFile,
}

impl OffsetIndex {
    pub fn open(
        path: &Path,
        base_offset: i64,
        max_bytes: usize,
        fresh: bool,
    ) -> Result<OffsetIndex> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::open(path, OFFSET_INDEX_ENTRY_BYTES, max_bytes, fresh)?,
        })
    }

    pub fn entries(&self) -> usize {
        self.file.entries
    }
    pub fn is_full(&self) -> bool {
        self.file.entries >= self.file.max_entries()
    }
    pub fn file_bytes(&self) -> usize {
        self.file.len
    }
    /// Whether the file is mapped now.
    pub fn is_mapped(&self) -> bool {
        self.file.map.is_some()
    }

    fn decode(&self, e: &[u8]) -> OffsetPosition {
        OffsetPosition {
            offset: self.base_offset + be_u32(e, 0) as i64,
            position: be_u32(e, 4),
        }
    }

    pub fn entry(&mut self, n: usize) -> Result<OffsetPosition> {
        let base = self.base_offset;
        let e = self.file.entry_mapped(n)?;
        Ok(OffsetPosition {
            offset: base + be_u32(e, 0) as i64,
            position: be_u32(e, 4),
        })
    }

    pub fn last_entry(&mut self) -> Result<Option<OffsetPosition>> {
        match self.file.entries.checked_sub(1) {
            Some(n) => self.entry(n).map(Some),
            None => Ok(None),
        }
    }

    /// Adds an entry; `offset` must be above the last entry's and fit in a relative u32.
    /// Returns false (and adds nothing) when the index is full.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<bool> {
        if self.is_full() {
            return Ok(false);
        }
        let last = self.last_entry()?;
        assert!(
            last.is_none_or(|e| offset > e.offset),
            "offset index entries must increase: {offset} after {last:?}"
        );
        let relative = u32::try_from(offset - self.base_offset).expect("relative offset fits u32");
        let mut bytes = [0u8; OFFSET_INDEX_ENTRY_BYTES];
        bytes[..4].copy_from_slice(&relative.to_be_bytes());
        bytes[4..].copy_from_slice(&position.to_be_bytes());
        self.file.push(&bytes)?;
        Ok(true)
    }

    /// The last entry with offset <= `target`, or (base offset, 0).
    pub fn lookup(&mut self, target: i64) -> Result<OffsetPosition> {
        let base = self.base_offset;
        Ok(
            match self
                .file
                .floor_slot(target, |e| base + be_u32(e, 0) as i64)?
            {
                Some(slot) => self.decode(self.file.entry(slot)),
                None => OffsetPosition {
                    offset: base,
                    position: 0,
                },
            },
        )
    }

    /// Removes every entry (before a rebuild).
    pub fn reset(&mut self) {
        self.file.entries = 0;
    }

    /// Removes every entry with offset >= `offset`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let base = self.base_offset;
        self.file.entries = match self
            .file
            .floor_slot(offset, |e| base + be_u32(e, 0) as i64)?
        {
            None => 0,
            Some(slot) if self.decode(self.file.entry(slot)).offset == offset => slot,
            Some(slot) => slot + 1,
        };
        Ok(())
    }

    /// Entries present and plausible for a log of `log_bytes`: increasing offsets at or above
    /// the base offset, increasing positions inside the log (Kafka's sanity check, and more).
    pub fn sanity_check(&mut self, log_bytes: u64) -> Result<bool> {
        let mut prev: Option<OffsetPosition> = None;
        for n in 0..self.entries() {
            let e = self.entry(n)?;
            if e.offset < self.base_offset || e.position as u64 >= log_bytes.max(1) {
                return Ok(false);
            }
            if prev.is_some_and(|p| e.offset <= p.offset || e.position <= p.position) {
                return Ok(false);
            }
            prev = Some(e);
        }
        Ok(true)
    }

    pub fn resize(&mut self, max_bytes: usize) -> Result<()> {
        self.file.resize(max_bytes)
    }
    /// Cuts the file to the entries present (on roll and close).
    pub fn trim(&mut self) -> Result<()> {
        self.file
            .resize(self.file.entries * OFFSET_INDEX_ENTRY_BYTES)
    }
    pub fn flush(&self) -> Result<()> {
        self.file.flush()
    }
}

/// `.timeindex`: max timestamp so far -> the offset where it was seen.
pub struct TimeIndex {
    base_offset: i64,
    file: IndexFile,
}

impl TimeIndex {
    pub fn open(path: &Path, base_offset: i64, max_bytes: usize, fresh: bool) -> Result<TimeIndex> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::open(path, TIME_INDEX_ENTRY_BYTES, max_bytes, fresh)?,
        })
    }

    pub fn entries(&self) -> usize {
        self.file.entries
    }
    /// Like Kafka, the last slot is kept for the entry written when the segment rolls.
    pub fn is_full(&self) -> bool {
        self.file.entries + 1 >= self.file.max_entries()
    }
    pub fn file_bytes(&self) -> usize {
        self.file.len
    }
    /// Whether the file is mapped now.
    pub fn is_mapped(&self) -> bool {
        self.file.map.is_some()
    }

    fn decode(&self, e: &[u8]) -> TimestampOffset {
        TimestampOffset {
            timestamp: i64::from_be_bytes(e[..8].try_into().expect("8 bytes")),
            offset: self.base_offset + be_u32(e, 8) as i64,
        }
    }

    pub fn entry(&mut self, n: usize) -> Result<TimestampOffset> {
        self.file.ensure_mapped()?;
        Ok(self.decode(self.file.entry(n)))
    }

    pub fn last_entry(&mut self) -> Result<Option<TimestampOffset>> {
        match self.file.entries.checked_sub(1) {
            Some(n) => self.entry(n).map(Some),
            None => Ok(None),
        }
    }

    /// Adds (timestamp, offset) if the timestamp is above the last entry's (Kafka's
    /// `maybeAppend`). `on_roll` may use the reserved last slot.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64, on_roll: bool) -> Result<()> {
        let last = self.last_entry()?;
        if last.is_some_and(|l| timestamp <= l.timestamp || offset < l.offset) {
            return Ok(());
        }
        let has_room = if on_roll {
            self.file.entries < self.file.max_entries()
        } else {
            !self.is_full()
        };
        if !has_room {
            return Ok(());
        }
        let relative = u32::try_from(offset - self.base_offset).expect("relative offset fits u32");
        let mut bytes = [0u8; TIME_INDEX_ENTRY_BYTES];
        bytes[..8].copy_from_slice(&timestamp.to_be_bytes());
        bytes[8..].copy_from_slice(&relative.to_be_bytes());
        self.file.push(&bytes)
    }

    /// The last entry with timestamp <= `target`, or (-1, base offset).
    pub fn lookup(&mut self, target: i64) -> Result<TimestampOffset> {
        let slot = self.file.floor_slot(target, |e| {
            i64::from_be_bytes(e[..8].try_into().expect("8 bytes"))
        })?;
        Ok(match slot {
            Some(slot) => self.decode(self.file.entry(slot)),
            None => TimestampOffset {
                timestamp: -1,
                offset: self.base_offset,
            },
        })
    }

    /// Removes every entry (before a rebuild).
    pub fn reset(&mut self) {
        self.file.entries = 0;
    }

    /// Removes every entry with offset >= `offset` (entries' offsets are non-decreasing).
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        let base = self.base_offset;
        let keep = self
            .file
            .floor_slot(offset - 1, |e| base + be_u32(e, 8) as i64)?;
        self.file.entries = keep.map_or(0, |slot| slot + 1);
        Ok(())
    }

    pub fn sanity_check(&mut self) -> Result<bool> {
        let mut prev: Option<TimestampOffset> = None;
        for n in 0..self.entries() {
            let e = self.entry(n)?;
            if e.offset < self.base_offset {
                return Ok(false);
            }
            if prev.is_some_and(|p| e.timestamp <= p.timestamp || e.offset < p.offset) {
                return Ok(false);
            }
            prev = Some(e);
        }
        Ok(true)
    }

    pub fn resize(&mut self, max_bytes: usize) -> Result<()> {
        self.file.resize(max_bytes)
    }
    pub fn trim(&mut self) -> Result<()> {
        self.file.resize(self.file.entries * TIME_INDEX_ENTRY_BYTES)
    }
    pub fn flush(&self) -> Result<()> {
        self.file.flush()
    }
}

/// Both indexes are pooled maps: open means mapped, and they map themselves when first used.
macro_rules! pooled_map {
    ($index:ty) => {
        impl Resource for $index {
            fn is_open(&self) -> bool {
                self.is_mapped()
            }
            fn open(&mut self) -> Result<()> {
                self.file.ensure_mapped()
            }
            fn close(&mut self) {
                self.file.map = None;
            }
        }
    };
}
pooled_map!(OffsetIndex);
pooled_map!(TimeIndex);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_append_lookup_truncate_trim_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::open(&path, 100, 80, false).unwrap();
        assert_eq!(idx.file_bytes(), 80);
        assert_eq!(
            idx.lookup(150).unwrap(),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        for i in 0..5 {
            assert!(idx.append(110 + i * 10, (i * 1000) as u32).unwrap());
        }
        assert_eq!(
            idx.lookup(109).unwrap(),
            OffsetPosition {
                offset: 100,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(110).unwrap(),
            OffsetPosition {
                offset: 110,
                position: 0
            }
        );
        assert_eq!(
            idx.lookup(135).unwrap(),
            OffsetPosition {
                offset: 130,
                position: 2000
            }
        );
        assert_eq!(
            idx.lookup(10_000).unwrap(),
            OffsetPosition {
                offset: 150,
                position: 4000
            }
        );
        idx.truncate_to(130).unwrap();
        assert_eq!(idx.entries(), 2);
        idx.truncate_to(125).unwrap();
        assert_eq!(idx.entries(), 2);
        idx.trim().unwrap();
        drop(idx);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], &[0, 0, 0, 10, 0, 0, 0, 0]);
        assert_eq!(&bytes[8..], &[0, 0, 0, 20, 0, 0, 0x03, 0xe8]);
        let mut idx = OffsetIndex::open(&path, 100, 80, false).unwrap();
        assert_eq!(idx.entries(), 2);
        assert!(idx.sanity_check(5000).unwrap());
        assert!(!idx.sanity_check(500).unwrap());
        idx.resize(80).unwrap();
        assert_eq!(idx.entries(), 2);
        assert!(idx.append(200, 5000).unwrap());
        assert_eq!(idx.lookup(300).unwrap().offset, 200);
    }

    #[test]
    fn lookups_agree_inside_and_outside_the_warm_section() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::open(&dir.path().join("0.index"), 0, 80_000, false).unwrap();
        for i in 0..5_000i64 {
            assert!(idx.append(i * 3 + 2, (i * 100) as u32).unwrap());
        }
        for target in [
            0, 1, 2, 3, 100, 7_000, 13_000, 14_000, 14_995, 14_997, 14_998, 99_999,
        ] {
            let expected = (0..5_000i64).map(|i| i * 3 + 2).rfind(|&o| o <= target);
            assert_eq!(
                idx.lookup(target).unwrap().offset,
                expected.unwrap_or(0),
                "target {target}"
            );
        }
    }

    #[test]
    fn offset_index_fills_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::open(&dir.path().join("0.index"), 0, 20, false).unwrap();
        assert!(idx.append(1, 1).unwrap());
        assert!(idx.append(2, 2).unwrap());
        assert!(idx.is_full());
        assert!(!idx.append(3, 3).unwrap());
    }

    #[test]
    fn time_index_keeps_increasing_timestamps_and_reserves_a_slot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.timeindex");
        let mut idx = TimeIndex::open(&path, 0, 36, false).unwrap();
        idx.maybe_append(1000, 5, false).unwrap();
        idx.maybe_append(1000, 6, false).unwrap(); // not above the last timestamp
        assert_eq!(idx.entries(), 1);
        idx.maybe_append(2000, 9, false).unwrap();
        assert!(idx.is_full());
        idx.maybe_append(3000, 12, false).unwrap();
        assert_eq!(idx.entries(), 2);
        idx.maybe_append(3000, 12, true).unwrap();
        assert_eq!(idx.entries(), 3);
        assert_eq!(
            idx.lookup(999).unwrap(),
            TimestampOffset {
                timestamp: -1,
                offset: 0
            }
        );
        assert_eq!(
            idx.lookup(2500).unwrap(),
            TimestampOffset {
                timestamp: 2000,
                offset: 9
            }
        );
        idx.truncate_to(9).unwrap();
        assert_eq!(idx.entries(), 1);
        idx.trim().unwrap();
        drop(idx);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 12);
        assert_eq!(&bytes[..8], &1000i64.to_be_bytes());
        assert_eq!(&bytes[8..], &5u32.to_be_bytes());
        assert!(TimeIndex::open(&path, 0, 36, false)
            .unwrap()
            .sanity_check()
            .unwrap());
    }

    #[test]
    fn fresh_open_discards_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.index");
        let mut idx = OffsetIndex::open(&path, 0, 80, false).unwrap();
        idx.append(3, 3).unwrap();
        idx.trim().unwrap();
        drop(idx);
        let idx = OffsetIndex::open(&path, 0, 80, true).unwrap();
        assert_eq!((idx.entries(), idx.file_bytes()), (0, 80));
    }

    /// An index maps its file only when an entry is read or written; an unmapped index (a
    /// resize, or the pool closing it) keeps its entries and maps again when used.
    #[test]
    fn an_index_maps_only_when_entries_are_used_and_survives_unmapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut idx = OffsetIndex::open(&path, 0, 80, false).unwrap();
        assert!(!idx.is_mapped());
        assert_eq!(idx.lookup(5).unwrap().position, 0);
        assert!(idx.sanity_check(100).unwrap());
        assert_eq!(idx.last_entry().unwrap(), None);
        assert!(!idx.is_mapped(), "an empty index is never mapped");
        assert!(idx.append(3, 30).unwrap());
        assert!(idx.is_mapped());
        Resource::close(&mut idx);
        assert!(!idx.is_mapped());
        assert!(idx.append(7, 70).unwrap());
        Resource::close(&mut idx);
        assert_eq!(idx.lookup(8).unwrap().position, 70);
        idx.trim().unwrap();
        assert!(!idx.is_mapped());
        assert_eq!(idx.entries(), 2);
        assert_eq!(std::fs::read(&path).unwrap().len(), 16);
        let mut ti = TimeIndex::open(&dir.path().join("0.timeindex"), 0, 36, false).unwrap();
        ti.maybe_append(100, 1, false).unwrap();
        Resource::close(&mut ti);
        ti.maybe_append(200, 2, false).unwrap();
        assert_eq!(ti.lookup(150).unwrap().offset, 1);
    }
}
