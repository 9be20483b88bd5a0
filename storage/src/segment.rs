//! One segment of a log: `{base_offset:020}.log` holding v2 batches back to back, exactly as on
//! the wire, with its `.index` and `.timeindex`.
//!
//! Threading: one writer (the owning `Log`, under its writer lock) appends, truncates, rolls and
//! deletes; any number of readers read concurrently through `&self`. The byte count readers may
//! see is published in `size` (release/acquire) only after the bytes are written, so a reader
//! never sees a batch before it is complete. Reads use `pread` into a fresh buffer — the one
//! copy of record bytes — so they stay valid even if the writer later truncates the file; the
//! `Log` detects that case with its truncation generation. A deleted segment's files are
//! unlinked but stay readable through the descriptor and maps pinned before the unlink, until
//! the last reader drops the segment.
//!
//! The `.log` descriptor and both index maps are pooled ([`crate::handles`]): opened on first
//! use, closed by the broker's pool when too many are open, and opened again by path when used
//! next. A segment opened at startup holds nothing until it is read or written.
//!
//! A segment does not decide when to roll or what to retain: that is the `Log`'s job.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::batch::{self, BatchHeader, BatchIter, RECORD_BATCH_OVERHEAD};
use crate::error::{IoContext, Result, StorageError};
use crate::handles::{HandlePool, Kind, Pooled, Resource};
use crate::index::{OffsetIndex, TimeIndex, TimestampOffset};

/// Bytes read at a time while looking for the batch that holds an offset: a little more than
/// `index.interval.bytes`' default, so one read usually covers the scan from an index entry.
const SCAN_CHUNK_BYTES: usize = 8 * 1024;

/// Bytes read at a time while recovering a segment.
const RECOVERY_CHUNK_BYTES: usize = 1 << 20;

pub fn log_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.log")
}
pub fn index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.index")
}
pub fn time_index_file_name(base_offset: i64) -> String {
    format!("{base_offset:020}.timeindex")
}

/// A segment's `.log` file as a pooled resource: its descriptor while open.
struct LogFile {
    path: PathBuf,
    file: Option<Arc<File>>,
}

impl Resource for LogFile {
    fn is_open(&self) -> bool {
        self.file.is_some()
    }
    fn open(&mut self) -> Result<()> {
        // O_APPEND: every write lands at the end of the file; `append` relies on it.
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .at(&self.path)?;
        self.file = Some(Arc::new(file));
        Ok(())
    }
    fn close(&mut self) {
        // Readers still holding a clone keep the descriptor until their read returns.
        self.file = None;
    }
}

/// Removes a segment's files by name, its transaction index included (segments never opened,
/// at recovery).
pub(crate) fn remove_segment_files(dir: &Path, base_offset: i64) -> Result<()> {
    for name in [
        log_file_name(base_offset),
        index_file_name(base_offset),
        time_index_file_name(base_offset),
        crate::txn_index::txn_index_file_name(base_offset),
    ] {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&path, e)),
        }
    }
    Ok(())
}

/// State only the writer touches (behind a mutex so `&self` suffices).
struct WriterState {
    /// Offset after the last batch.
    next_offset: i64,
    bytes_since_last_index_entry: usize,
    /// Largest batch max timestamp so far and the last offset of that batch (Kafka's
    /// `maxTimestampAndOffsetSoFar`), (-1, -1) when none.
    max_timestamp_so_far: TimestampOffset,
    /// Max timestamp of the first batch, the basis of `segment.ms` rolls.
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
}

/// What recovery of one segment found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryOutcome {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
    pub batches: usize,
}

pub struct LogSegment {
    base_offset: i64,
    log_path: PathBuf,
    index_path: PathBuf,
    time_index_path: PathBuf,
    file: Arc<Pooled<LogFile>>,
    /// Bytes of complete, validated batches; readers read below it only.
    size: AtomicU64,
    /// Copy of `max_timestamp_so_far.timestamp` readable without the writer mutex.
    max_timestamp: AtomicI64,
    offset_index: Arc<Pooled<OffsetIndex>>,
    time_index: Arc<Pooled<TimeIndex>>,
    writer: Mutex<WriterState>,
}

impl std::fmt::Debug for LogSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSegment")
            .field("base_offset", &self.base_offset)
            .field("size", &self.size())
            .finish()
    }
}

impl LogSegment {
    /// Creates an empty segment, replacing any files of the same name.
    /// The descriptor and maps count against `pool`.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        index_bytes: usize,
        now_ms: i64,
        pool: &Arc<HandlePool>,
    ) -> Result<LogSegment> {
        Self::create_with_suffix(dir, base_offset, "", index_bytes, now_ms, pool)
    }

    /// [`Self::create`] with `suffix` after each file's name: the cleaner writes a segment as
    /// `.cleaned` files before it swaps them in.
    pub fn create_with_suffix(
        dir: &Path,
        base_offset: i64,
        suffix: &str,
        index_bytes: usize,
        now_ms: i64,
        pool: &Arc<HandlePool>,
    ) -> Result<LogSegment> {
        let log_path = dir.join(log_file_name(base_offset) + suffix);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&log_path)
            .at(&log_path)?;
        file.set_len(0).at(&log_path)?;
        // Kept open: a new segment is appended to next.
        Self::with_file(
            dir,
            base_offset,
            suffix,
            Some(file),
            0,
            index_bytes,
            true,
            now_ms,
            pool,
        )
    }

    /// Opens an existing segment without checking it and without opening its files (they open
    /// when first used); follow with [`Self::recover`] or [`Self::load_clean`].
    pub fn open(
        dir: &Path,
        base_offset: i64,
        index_bytes: usize,
        now_ms: i64,
        pool: &Arc<HandlePool>,
    ) -> Result<LogSegment> {
        let log_path = dir.join(log_file_name(base_offset));
        let size = std::fs::metadata(&log_path).at(&log_path)?.len();
        Self::with_file(
            dir,
            base_offset,
            "",
            None,
            size,
            index_bytes,
            false,
            now_ms,
            pool,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn with_file(
        dir: &Path,
        base_offset: i64,
        suffix: &str,
        file: Option<File>,
        size: u64,
        index_bytes: usize,
        fresh: bool,
        now_ms: i64,
        pool: &Arc<HandlePool>,
    ) -> Result<LogSegment> {
        let log_path = dir.join(log_file_name(base_offset) + suffix);
        let index_path = dir.join(index_file_name(base_offset) + suffix);
        let time_index_path = dir.join(time_index_file_name(base_offset) + suffix);
        let offset_index = OffsetIndex::open(&index_path, base_offset, index_bytes, fresh)?;
        let time_index = TimeIndex::open(&time_index_path, base_offset, index_bytes, fresh)?;
        let file = LogFile {
            path: log_path.clone(),
            file: file.map(Arc::new),
        };
        Ok(LogSegment {
            base_offset,
            log_path,
            index_path,
            time_index_path,
            file: Pooled::new(pool, Kind::LogFile, file),
            size: AtomicU64::new(size),
            max_timestamp: AtomicI64::new(-1),
            offset_index: Pooled::new(pool, Kind::IndexMap, offset_index),
            time_index: Pooled::new(pool, Kind::IndexMap, time_index),
            writer: Mutex::new(WriterState {
                next_offset: base_offset,
                bytes_since_last_index_entry: 0,
                max_timestamp_so_far: TimestampOffset {
                    timestamp: -1,
                    offset: -1,
                },
                rolling_based_timestamp: None,
                created_ms: now_ms,
            }),
        })
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The `.log` descriptor, opened (and counted by the pool) if it was closed.
    fn handle(&self) -> Result<Arc<File>> {
        self.file
            .with_open(|f| f.file.clone().expect("opened by with_open"))
    }

    /// Whether the `.log` descriptor is open, and whether each index is mapped (tests, tools).
    pub fn open_resources(&self) -> (bool, bool, bool) {
        (
            self.file.with(|f| f.is_open()),
            self.offset_index.with(|i| i.is_mapped()),
            self.time_index.with(|i| i.is_mapped()),
        )
    }
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    /// Offset after the last batch (writer's view).
    pub fn next_offset(&self) -> i64 {
        self.writer.lock().next_offset
    }
    /// Largest batch max timestamp in the segment, -1 if none.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
    }
    /// Max timestamp and the offset of the batch that carried it.
    pub fn max_timestamp_and_offset(&self) -> TimestampOffset {
        self.writer.lock().max_timestamp_so_far
    }

    /// The timestamp retention.ms compares against: the largest record timestamp, or the file's
    /// modification time when no batch carries one (Kafka's `largestTimestamp`).
    pub fn largest_timestamp(&self) -> Result<i64> {
        let ts = self.max_timestamp();
        if ts >= 0 {
            return Ok(ts);
        }
        // By path: no descriptor needed for a segment that may be closed.
        let modified = std::fs::metadata(&self.log_path)
            .at(&self.log_path)?
            .modified()
            .at(&self.log_path)?;
        Ok(modified
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0))
    }

    /// Kafka's `timeWaitedForRoll`: from the first batch's timestamp to the new batches'
    /// timestamp, or from creation to now when the first batch has no timestamp.
    pub fn time_waited_for_roll(&self, now_ms: i64, max_timestamp_in_messages: i64) -> i64 {
        let w = self.writer.lock();
        match w.rolling_based_timestamp {
            Some(ts) if ts >= 0 => max_timestamp_in_messages - ts,
            _ => now_ms - w.created_ms,
        }
    }

    /// The max timestamp of the segment's first batch (Kafka's `getFirstBatchTimestamp`), `None`
    /// when it holds no batch.
    pub fn first_batch_timestamp(&self) -> Result<Option<i64>> {
        Ok(self.headers_from_first()?.map(|(_, h)| h.max_timestamp))
    }

    /// Entries in the offset index and in the time index.
    pub fn index_entries(&self) -> (usize, usize) {
        (
            self.offset_index.with(|i| i.entries()),
            self.time_index.with(|i| i.entries()),
        )
    }

    /// The `.log` file's modification time, in ms since the epoch (0 when unknown).
    pub fn last_modified_ms(&self) -> i64 {
        std::fs::metadata(&self.log_path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// Sets the `.log` file's modification time (a cleaned segment keeps the time of the last
    /// segment it replaces, as in Kafka).
    pub fn set_last_modified_ms(&self, ms: i64) -> Result<()> {
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
        self.handle()?.set_modified(time).at(&self.log_path)
    }

    /// The paths of the segment's `.log`, `.index` and `.timeindex` files.
    pub fn paths(&self) -> [&Path; 3] {
        [&self.log_path, &self.index_path, &self.time_index_path]
    }

    pub fn indexes_full(&self) -> bool {
        self.offset_index.with(|i| i.is_full()) || self.time_index.with(|i| i.is_full())
    }

    pub fn can_convert_to_relative_offset(&self, offset: i64) -> bool {
        let delta = offset - self.base_offset;
        (0..=i32::MAX as i64).contains(&delta)
    }

    /// Appends whole, validated batches (`headers` describe `bytes` in order) at the end.
    /// Appends whole, validated batches whose bytes are the concatenation of `parts` (e.g. a
    /// rewritten header followed by the producer's records, per batch), with one `writev`.
    pub fn append(
        &self,
        parts: &[&[u8]],
        headers: &[BatchHeader],
        index_interval_bytes: usize,
    ) -> Result<()> {
        let start = self.size();
        write_all_vectored(&*self.handle()?, parts).at(&self.log_path)?;
        let mut w = self.writer.lock();
        let mut position = start;
        for h in headers {
            self.index_batch(&mut w, h, position, index_interval_bytes)?;
            position += h.size_in_bytes() as u64;
        }
        debug_assert_eq!(
            position,
            start + parts.iter().map(|p| p.len() as u64).sum::<u64>()
        );
        self.size.store(position, Ordering::Release);
        Ok(())
    }

    /// Kafka's per-batch index bookkeeping, shared by append and recovery.
    /// Rebuilds the writer state from the batches at and after the last index entry (at byte
    /// `start`), as on a clean load or after truncation. The batch that entry points at is
    /// already indexed, so it is only accounted for; the ones after it are indexed again.
    fn replay_after_last_index_entry(
        &self,
        w: &mut WriterState,
        headers: &[(u64, BatchHeader)],
        start: u64,
        index_interval_bytes: usize,
    ) -> Result<()> {
        for (i, (position, h)) in headers.iter().enumerate() {
            if i == 0 && start > 0 {
                w.next_offset = h.next_offset();
                if h.max_timestamp > w.max_timestamp_so_far.timestamp {
                    w.max_timestamp_so_far = TimestampOffset {
                        timestamp: h.max_timestamp,
                        offset: h.last_offset(),
                    };
                    self.max_timestamp.store(h.max_timestamp, Ordering::Release);
                }
                w.bytes_since_last_index_entry = h.size_in_bytes();
                continue;
            }
            self.index_batch(w, h, *position, index_interval_bytes)?;
        }
        Ok(())
    }

    fn index_batch(
        &self,
        w: &mut WriterState,
        h: &BatchHeader,
        position: u64,
        interval: usize,
    ) -> Result<()> {
        if w.rolling_based_timestamp.is_none() {
            w.rolling_based_timestamp = Some(h.max_timestamp);
        }
        if h.max_timestamp > w.max_timestamp_so_far.timestamp {
            w.max_timestamp_so_far = TimestampOffset {
                timestamp: h.max_timestamp,
                offset: h.last_offset(),
            };
            self.max_timestamp.store(h.max_timestamp, Ordering::Release);
        }
        if w.bytes_since_last_index_entry > interval {
            self.offset_index
                .with(|i| i.append(h.last_offset(), position as u32))?;
            let m = w.max_timestamp_so_far;
            self.time_index
                .with(|i| i.maybe_append(m.timestamp, m.offset, false))?;
            w.bytes_since_last_index_entry = 0;
        }
        w.bytes_since_last_index_entry += h.size_in_bytes();
        w.next_offset = h.next_offset();
        Ok(())
    }

    pub(crate) fn read_exact(&self, position: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.handle()?
            .read_exact_at(&mut buf, position)
            .at(&self.log_path)?;
        Ok(buf)
    }

    /// The header at `position`, if a whole header lies below `limit`.
    fn header_at(&self, position: u64, limit: u64) -> Result<Option<BatchHeader>> {
        if position + RECORD_BATCH_OVERHEAD as u64 > limit {
            return Ok(None);
        }
        let mut buf = [0u8; RECORD_BATCH_OVERHEAD];
        match self.handle()?.read_exact_at(&mut buf, position) {
            Ok(()) => {}
            // The writer truncated under us; the caller's generation check retries.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(StorageError::io(&self.log_path, e)),
        }
        Ok(BatchHeader::parse(&buf)
            .ok()
            .filter(|h| position + h.size_in_bytes() as u64 <= limit))
    }

    /// Position and header of the first batch below `limit` whose last offset is >= `offset`.
    pub fn find_batch(&self, offset: i64, limit: u64) -> Result<Option<(u64, BatchHeader)>> {
        let position = self.offset_index.with(|i| i.lookup(offset))?.position as u64;
        let mut found = None;
        self.scan_headers(position, limit, &mut |p, h| {
            if h.last_offset() >= offset {
                found = Some((p, *h));
                false
            } else {
                true
            }
        })?;
        Ok(found)
    }

    /// Calls `visit(position, header)` for each whole batch from `position` up to `limit`, in
    /// order, until it returns false or a header does not parse. Headers are read in chunks of
    /// [`SCAN_CHUNK_BYTES`], so small batches cost one `pread` per chunk rather than one per
    /// batch (Kafka reads each header separately).
    fn scan_headers(
        &self,
        mut position: u64,
        limit: u64,
        visit: &mut dyn FnMut(u64, &BatchHeader) -> bool,
    ) -> Result<()> {
        let mut chunk = Vec::new();
        let mut file = None;
        loop {
            if position + RECORD_BATCH_OVERHEAD as u64 > limit {
                return Ok(());
            }
            let file = match &file {
                Some(f) => f,
                None => file.insert(self.handle()?),
            };
            let len = ((limit - position) as usize).min(SCAN_CHUNK_BYTES);
            chunk.clear();
            chunk.resize(len, 0);
            let n = read_up_to(file, &mut chunk, position).at(&self.log_path)?;
            chunk.truncate(n);
            let mut at = 0usize;
            // Headers wholly inside the chunk; the batch bodies may run past it.
            while at + RECORD_BATCH_OVERHEAD <= chunk.len() {
                let Ok(h) = BatchHeader::parse(&chunk[at..]) else {
                    return Ok(());
                };
                if position + (at + h.size_in_bytes()) as u64 > limit {
                    return Ok(());
                }
                if !visit(position + at as u64, &h) {
                    return Ok(());
                }
                at += h.size_in_bytes();
            }
            if at == 0 {
                // A short read: the writer truncated under us; the caller's generation check
                // makes it retry.
                return Ok(());
            }
            position += at as u64;
        }
    }

    /// Whole batches from the one containing `start_offset`: each with last offset below
    /// `max_offset`, at most `max_bytes` in all unless `min_one_batch` lets the first exceed it.
    /// `None` when no batch of this segment has a last offset >= `start_offset`.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<Option<(Bytes, Option<i64>)>> {
        let limit = self.size();
        let Some((position, first)) = self.find_batch(start_offset, limit)? else {
            return Ok(None);
        };
        if first.last_offset() >= max_offset {
            return Ok(Some((Bytes::new(), None)));
        }
        let first_size = first.size_in_bytes();
        if first_size > max_bytes {
            if !min_one_batch {
                return Ok(Some((Bytes::new(), None)));
            }
            let buf = self.read_exact(position, first_size)?;
            return Ok(Some((Bytes::from(buf), Some(first.base_offset))));
        }
        let len = (limit - position).min(max_bytes as u64) as usize;
        let mut buf = Vec::with_capacity(len);
        read_into_spare_capacity(&*self.handle()?, &mut buf, len, position).at(&self.log_path)?;
        let mut end = 0;
        for (at, h) in BatchIter::new(&buf) {
            if h.last_offset() >= max_offset {
                break;
            }
            end = at + h.size_in_bytes();
        }
        buf.truncate(end);
        if buf.capacity() - end > end {
            // The answer holds these bytes until a client has read them all: not twice as many.
            buf.shrink_to_fit();
        }
        let first_offset = if end > 0 {
            Some(first.base_offset)
        } else {
            None
        };
        Ok(Some((Bytes::from(buf), first_offset)))
    }

    /// Reads the batch headers from `position` to the end, in order (for scans and checks).
    pub fn headers_from(&self, position: u64) -> Result<Vec<(u64, BatchHeader)>> {
        let mut out = Vec::new();
        self.scan_headers(position, self.size(), &mut |p, h| {
            out.push((p, *h));
            true
        })?;
        Ok(out)
    }

    /// Reads one whole batch at `position` (for ListOffsets by timestamp).
    pub fn read_batch(&self, position: u64, header: &BatchHeader) -> Result<Vec<u8>> {
        self.read_exact(position, header.size_in_bytes())
    }

    /// Validates every batch from the start, rebuilding both indexes and the writer state, and
    /// cuts the file after the last valid batch (a torn or corrupt tail). `on_batch` sees each
    /// valid batch header (epoch cache and producer state rebuilds).
    pub fn recover(
        &self,
        index_interval_bytes: usize,
        index_bytes: usize,
        on_batch: &mut dyn FnMut(&BatchHeader),
    ) -> Result<RecoveryOutcome> {
        self.offset_index.with(|i| {
            i.reset();
            i.resize(index_bytes)
        })?;
        self.time_index.with(|i| {
            i.reset();
            i.resize(index_bytes)
        })?;
        let file = self.handle()?;
        let file_len = file.metadata().at(&self.log_path)?.len();
        let mut w = self.writer.lock();
        w.next_offset = self.base_offset;
        w.bytes_since_last_index_entry = 0;
        w.max_timestamp_so_far = TimestampOffset {
            timestamp: -1,
            offset: -1,
        };
        w.rolling_based_timestamp = None;
        self.max_timestamp.store(-1, Ordering::Release);

        let mut valid: u64 = 0;
        let mut batches = 0usize;
        let mut chunk: Vec<u8> = Vec::new();
        let mut chunk_start: u64 = 0;
        'scan: loop {
            // make sure the header at `valid` is in `chunk`
            let mut need = RECORD_BATCH_OVERHEAD;
            loop {
                let have = (chunk_start + chunk.len() as u64).saturating_sub(valid) as usize;
                if valid < chunk_start || have < need {
                    if valid + need as u64 > file_len {
                        break 'scan;
                    }
                    let len = ((file_len - valid) as usize).min(RECOVERY_CHUNK_BYTES.max(need));
                    chunk = self.read_exact(valid, len)?;
                    chunk_start = valid;
                    continue;
                }
                let at = (valid - chunk_start) as usize;
                let Ok(h) = BatchHeader::parse(&chunk[at..]) else {
                    break 'scan;
                };
                if need < h.size_in_bytes() {
                    need = h.size_in_bytes();
                    continue;
                }
                let bytes = &chunk[at..at + h.size_in_bytes()];
                let monotonic = h.base_offset >= w.next_offset && h.last_offset_delta >= 0;
                if !monotonic
                    || !batch::crc_valid(bytes)
                    || !self.can_convert_to_relative_offset(h.last_offset())
                {
                    break 'scan;
                }
                on_batch(&h);
                self.index_batch(&mut w, &h, valid, index_interval_bytes)?;
                valid += h.size_in_bytes() as u64;
                batches += 1;
                break;
            }
        }
        drop(w);
        let truncated = file_len - valid;
        if truncated > 0 {
            file.set_len(valid).at(&self.log_path)?;
        }
        self.size.store(valid, Ordering::Release);
        Ok(RecoveryOutcome {
            valid_bytes: valid,
            truncated_bytes: truncated,
            batches,
        })
    }

    /// Loads a segment written before a clean shutdown: checks the indexes (as Kafka's sanity
    /// check does), then finds the next offset and max timestamp by scanning from the last
    /// index entry. Returns false when something does not add up; the caller then recovers it.
    pub fn load_clean(&self, index_interval_bytes: usize) -> Result<bool> {
        let size = self.size();
        // Indexes without entries (the usual case for small segments) are not even mapped.
        let Some(start) = self.offset_index.with(|i| -> Result<Option<u64>> {
            Ok(i.sanity_check(size)?
                .then(|| i.last_entry())
                .transpose()?
                .map(|e| e.map_or(0, |e| e.position as u64)))
        })?
        else {
            return Ok(false);
        };
        let Some(last_ts) = self.time_index.with(|i| -> Result<Option<_>> {
            i.sanity_check()?.then(|| i.last_entry()).transpose()
        })?
        else {
            return Ok(false);
        };
        let headers = self.headers_from(start)?;
        let end = headers
            .last()
            .map_or(start, |(p, h)| p + h.size_in_bytes() as u64);
        if end != size {
            return Ok(false);
        }
        let mut w = self.writer.lock();
        if let Some(t) = last_ts {
            w.max_timestamp_so_far = t;
            self.max_timestamp.store(t.timestamp, Ordering::Release);
        }
        w.bytes_since_last_index_entry = 0;
        self.replay_after_last_index_entry(&mut w, &headers, start, index_interval_bytes)?;
        if headers.is_empty() {
            w.next_offset = self.base_offset;
        }
        drop(w);
        if let Some((_, first)) = self.headers_from_first()? {
            self.writer.lock().rolling_based_timestamp = Some(first.max_timestamp);
        }
        Ok(true)
    }

    fn headers_from_first(&self) -> Result<Option<(u64, BatchHeader)>> {
        Ok(self.header_at(0, self.size())?.map(|h| (0, h)))
    }

    /// Cuts the segment before the first batch whose last offset is >= `offset` and drops the
    /// index entries past it. Returns the number of bytes removed.
    pub fn truncate_to(&self, offset: i64, index_interval_bytes: usize) -> Result<u64> {
        let size = self.size();
        let position = match self.find_batch(offset, size)? {
            Some((position, _)) => position,
            None => return Ok(0),
        };
        self.offset_index.with(|i| i.truncate_to(offset))?;
        self.time_index.with(|i| i.truncate_to(offset))?;
        self.size.store(position, Ordering::Release);
        self.handle()?.set_len(position).at(&self.log_path)?;
        // Rebuild the writer state from the last index entry, as on a clean load.
        let last_entry = self.offset_index.with(|i| i.last_entry())?;
        let last_ts = self.time_index.with(|i| i.last_entry())?;
        let start = last_entry.map_or(0, |e| e.position as u64);
        let headers = self.headers_from(start)?;
        let mut w = self.writer.lock();
        w.max_timestamp_so_far = last_ts.unwrap_or(TimestampOffset {
            timestamp: -1,
            offset: -1,
        });
        self.max_timestamp
            .store(w.max_timestamp_so_far.timestamp, Ordering::Release);
        w.next_offset = self.base_offset;
        w.bytes_since_last_index_entry = 0;
        if position == 0 {
            w.rolling_based_timestamp = None;
        }
        self.replay_after_last_index_entry(&mut w, &headers, start, index_interval_bytes)?;
        Ok(size - position)
    }

    /// Makes the segment active again after a truncation into it: indexes back to full size.
    pub fn resize_indexes(&self, index_bytes: usize) -> Result<()> {
        self.offset_index.with(|i| i.resize(index_bytes))?;
        self.time_index.with(|i| i.resize(index_bytes))
    }

    /// The segment stops being active and is made durable: [`Self::on_become_inactive`], then
    /// [`Self::flush`].
    pub fn on_roll(&self) -> Result<()> {
        self.on_become_inactive()?;
        self.flush()
    }

    /// The segment stops being active: final time index entry, trimmed indexes. Nothing is
    /// fsynced here (Kafka's `onBecomeInactiveSegment`); a roll leaves that to the background.
    pub fn on_become_inactive(&self) -> Result<()> {
        let m = self.writer.lock().max_timestamp_so_far;
        self.time_index.with(|ti| {
            if m.timestamp >= 0 {
                ti.maybe_append(m.timestamp, m.offset, true)?;
            }
            ti.trim()
        })?;
        self.offset_index.with(|oi| oi.trim())
    }

    /// fsync of both indexes and the log data.
    pub fn flush(&self) -> Result<()> {
        self.time_index.with(|ti| ti.flush())?;
        self.offset_index.with(|oi| oi.flush())?;
        self.flush_log()
    }

    /// fsync of the log data.
    pub fn flush_log(&self) -> Result<()> {
        self.handle()?.sync_data().at(&self.log_path)
    }

    /// Keeps the descriptor and maps open until the segment is dropped, outside the pool's
    /// count, so readers still holding the segment can read it once its files are gone (deleted,
    /// or renamed away with their log). An index with no entries has nothing to map and is
    /// pinned as it is. An error (out of descriptors) leaves what could not be opened closed:
    /// a later use would reopen it by path.
    pub fn pin_files(&self) -> Result<()> {
        self.file
            .pin(|f| if f.is_open() { Ok(()) } else { f.open() })
            .and_then(|()| self.offset_index.pin(|i| i.open()))
            .and_then(|()| self.time_index.pin(|i| i.open()))
    }

    /// [`Self::pin_files`] where a failure costs nothing but a reopen by path (the files are
    /// deleted: a reader gets an error, never another file's bytes).
    pub fn try_pin_files(&self) {
        if let Err(e) = self.pin_files() {
            tracing::debug!(segment = self.base_offset, error = %e, "cannot pin a segment's files");
        }
    }

    /// Removes the segment's files, its transaction index included. Readers holding the
    /// segment can still read it.
    pub fn delete_files(&self) -> Result<()> {
        self.try_pin_files();
        // A segment written under a suffix (a cleaning's `.cleaned`) has no transaction index
        // of its own: the one named after its base belongs to the live segment.
        let live = self.log_path.file_name() == Some(log_file_name(self.base_offset).as_ref());
        let txn_index_path = live.then(|| {
            self.log_path
                .with_file_name(crate::txn_index::txn_index_file_name(self.base_offset))
        });
        let paths = [&self.log_path, &self.index_path, &self.time_index_path];
        for path in paths.into_iter().chain(txn_index_path.as_ref()) {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io(path, e)),
            }
        }
        Ok(())
    }

    /// Checks that every index entry points at a batch start and that its offset is that
    /// batch's last offset (what Kafka's `DumpLogSegments --verify-index-only` checks), and that
    /// time index entries name offsets of batches in the segment. For tests and tools.
    pub fn verify_indexes(&self) -> std::result::Result<(), String> {
        let headers = self.headers_from(0).map_err(|e| e.to_string())?;
        let by_position: std::collections::HashMap<u64, &BatchHeader> =
            headers.iter().map(|(p, h)| (*p, h)).collect();
        let offsets = self
            .offset_index
            .with(|oi| {
                (0..oi.entries())
                    .map(|n| oi.entry(n))
                    .collect::<Result<Vec<_>>>()
            })
            .map_err(|e| e.to_string())?;
        for (n, e) in offsets.into_iter().enumerate() {
            match by_position.get(&(e.position as u64)) {
                Some(h) if h.last_offset() == e.offset => {}
                other => {
                    return Err(format!(
                        "segment {}: offset index entry {n} {e:?} does not match batch {other:?}",
                        self.base_offset
                    ))
                }
            }
        }
        let last_offsets: std::collections::HashSet<i64> =
            headers.iter().map(|(_, h)| h.last_offset()).collect();
        let times = self
            .time_index
            .with(|ti| {
                (0..ti.entries())
                    .map(|n| ti.entry(n))
                    .collect::<Result<Vec<_>>>()
            })
            .map_err(|e| e.to_string())?;
        for (n, e) in times.into_iter().enumerate() {
            if !last_offsets.contains(&e.offset) {
                return Err(format!(
                    "segment {}: time index entry {n} {e:?} names no batch",
                    self.base_offset
                ));
            }
        }
        Ok(())
    }

    /// Time index lookup: the position to start scanning for the first batch with max
    /// timestamp >= `timestamp`.
    pub fn time_lookup_position(&self, timestamp: i64) -> Result<u32> {
        let entry = self.time_index.with(|i| i.lookup(timestamp))?;
        Ok(self.offset_index.with(|i| i.lookup(entry.offset))?.position)
    }
}

/// Largest number of buffers one `writev` takes (Linux IOV_MAX).
const IOV_MAX: usize = 1024;

/// writev of all of `parts` at the end of an O_APPEND file.
fn write_all_vectored(mut file: &File, parts: &[&[u8]]) -> std::io::Result<()> {
    use std::io::{IoSlice, Write};
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut bufs = &mut slices[..];
    while !bufs.is_empty() {
        let n = bufs.len().min(IOV_MAX);
        match file.write_vectored(&bufs[..n]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(written) => IoSlice::advance_slices(&mut bufs, written),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// pread until `buf` is full or end of file; returns the bytes read.
fn read_up_to(file: &File, buf: &mut [u8], position: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], position + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads up to `len` bytes from `position` into the empty `buf`, through its spare capacity
/// (at least `len`), without initializing that capacity first. Fewer at the end of the file.
fn read_into_spare_capacity(
    file: &File,
    buf: &mut Vec<u8>,
    len: usize,
    position: u64,
) -> std::io::Result<()> {
    debug_assert!(buf.is_empty() && buf.capacity() >= len);
    while buf.len() < len {
        let at = position + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(buf), at) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The capacity may exceed `len`, and a read may have filled it.
    buf.truncate(len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::builder::simple;
    use crate::batch::{set_base_offset, validate_batches, Validation};

    const INDEX_BYTES: usize = 1024;

    fn pool() -> Arc<HandlePool> {
        HandlePool::shared_default()
    }

    fn append(seg: &LogSegment, offset: i64, count: usize, value_len: usize, ts: i64) -> i64 {
        let mut b = simple(count, value_len, ts);
        set_base_offset(&mut b, offset);
        let (headers, _) = validate_batches(&b, Validation::Follower).unwrap();
        seg.append(&[&b], &headers, 100).unwrap();
        offset + count as i64
    }

    #[test]
    fn names_are_twenty_digits() {
        assert_eq!(log_file_name(42), "00000000000000000042.log");
        assert_eq!(index_file_name(0), "00000000000000000000.index");
        assert_eq!(time_index_file_name(7), "00000000000000000007.timeindex");
    }

    #[test]
    fn append_read_and_index() {
        let dir = tempfile::tempdir().unwrap();
        let seg = LogSegment::create(dir.path(), 10, INDEX_BYTES, 0, &pool()).unwrap();
        let mut next = 10;
        for i in 0..20 {
            next = append(&seg, next, 3, 50, 1000 + i);
        }
        assert_eq!(seg.next_offset(), 70);
        assert!(seg.offset_index.with(|i| i.entries()) > 3);
        seg.verify_indexes().unwrap();
        // offset 35 lives in the batch 34..=36
        let (bytes, first) = seg.read(35, 1 << 20, i64::MAX, false).unwrap().unwrap();
        assert_eq!(first, Some(34));
        let offsets: Vec<i64> = BatchIter::new(&bytes).map(|(_, h)| h.base_offset).collect();
        assert_eq!(offsets.first(), Some(&34));
        assert_eq!(offsets.last(), Some(&67));
        // max offset excludes batches reaching it
        let (bytes, _) = seg.read(35, 1 << 20, 43, false).unwrap().unwrap();
        let last: Vec<i64> = BatchIter::new(&bytes)
            .map(|(_, h)| h.last_offset())
            .collect();
        assert_eq!(last, vec![36, 39, 42]);
        // byte limit gives whole batches only
        let one = simple(3, 50, 0).len();
        let (bytes, _) = seg.read(10, one * 2 + 5, i64::MAX, false).unwrap().unwrap();
        assert_eq!(bytes.len(), one * 2);
        let (bytes, first) = seg.read(10, 5, i64::MAX, false).unwrap().unwrap();
        assert_eq!((bytes.len(), first), (0, None));
        let (bytes, _) = seg.read(10, 5, i64::MAX, true).unwrap().unwrap();
        assert_eq!(bytes.len(), one);
        assert!(seg.read(70, 100, i64::MAX, true).unwrap().is_none());
    }

    #[test]
    fn recover_cuts_torn_tail_and_rebuilds_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let seg = LogSegment::create(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        let mut next = 0;
        for i in 0..30 {
            next = append(&seg, next, 2, 40, i);
        }
        let good = seg.size();
        let entries = seg.offset_index.with(|i| i.entries());
        drop(seg);
        // torn tail: half a batch
        let path = dir.path().join(log_file_name(0));
        let mut bytes = std::fs::read(&path).unwrap();
        let mut extra = simple(2, 40, 99);
        set_base_offset(&mut extra, next);
        bytes.extend_from_slice(&extra[..extra.len() / 2]);
        std::fs::write(&path, &bytes).unwrap();
        let seg = LogSegment::open(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        let mut seen = 0;
        let out = seg.recover(100, INDEX_BYTES, &mut |_| seen += 1).unwrap();
        assert_eq!(out.valid_bytes, good);
        assert_eq!(out.truncated_bytes, (extra.len() / 2) as u64);
        assert_eq!((out.batches, seen), (30, 30));
        assert_eq!(seg.next_offset(), 60);
        assert_eq!(seg.offset_index.with(|i| i.entries()), entries);
        assert_eq!(seg.max_timestamp(), 30);
        seg.verify_indexes().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
    }

    #[test]
    fn recover_stops_at_bad_crc() {
        let dir = tempfile::tempdir().unwrap();
        let seg = LogSegment::create(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        let mut next = 0;
        let mut sizes = vec![];
        for i in 0..5 {
            next = append(&seg, next, 2, 40, i);
            sizes.push(seg.size());
        }
        drop(seg);
        let path = dir.path().join(log_file_name(0));
        let mut bytes = std::fs::read(&path).unwrap();
        let at = sizes[2] as usize + 70; // inside batch 3's records
        bytes[at] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let seg = LogSegment::open(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        let out = seg.recover(100, INDEX_BYTES, &mut |_| {}).unwrap();
        assert_eq!(out.valid_bytes, sizes[2]);
        assert_eq!(seg.next_offset(), 6);
    }

    #[test]
    fn roll_trims_and_clean_load_agrees() {
        let dir = tempfile::tempdir().unwrap();
        let seg = LogSegment::create(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        let mut next = 0;
        for i in 0..25 {
            next = append(&seg, next, 2, 40, 100 + i);
        }
        seg.on_roll().unwrap();
        let entries = seg.offset_index.with(|i| i.entries());
        drop(seg);
        let idx_len = std::fs::metadata(dir.path().join(index_file_name(0)))
            .unwrap()
            .len();
        assert_eq!(idx_len as usize, entries * 8);
        let seg = LogSegment::open(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        assert!(seg.load_clean(100).unwrap());
        assert_eq!(seg.next_offset(), next);
        assert_eq!(seg.max_timestamp(), 125);
        assert_eq!(
            seg.max_timestamp_and_offset(),
            TimestampOffset {
                timestamp: 125,
                offset: 49
            }
        );
        seg.verify_indexes().unwrap();
    }

    #[test]
    fn truncate_cuts_at_batch_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let seg = LogSegment::create(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        let mut next = 0;
        for i in 0..20 {
            next = append(&seg, next, 3, 40, 100 + i);
        }
        assert_eq!(next, 60);
        seg.truncate_to(31, 100).unwrap(); // batch 30..=32 goes
        assert_eq!(seg.next_offset(), 30);
        assert_eq!(seg.max_timestamp(), 109 + 2);
        seg.verify_indexes().unwrap();
        assert!(seg.read(30, 1000, i64::MAX, true).unwrap().is_none());
        append(&seg, 30, 3, 40, 500);
        seg.verify_indexes().unwrap();
        assert_eq!(seg.next_offset(), 33);
        seg.truncate_to(0, 100).unwrap();
        assert_eq!(
            (seg.size(), seg.next_offset(), seg.max_timestamp()),
            (0, 0, -1)
        );
    }

    /// More segments than the pool's bounds: every one is written (enough for index entries)
    /// and read back whole, the open descriptors and maps never exceed the bounds, an evicted
    /// segment holds nothing until it is used again, and reopening it by path loses nothing.
    #[test]
    fn evicted_descriptors_and_maps_reopen_by_path_with_data_intact() {
        use crate::handles::HandleLimits;
        let dir = tempfile::tempdir().unwrap();
        let pool = HandlePool::new(HandleLimits {
            open_log_files_max: 16,
            index_maps_max: 16,
        });
        let segs: Vec<LogSegment> = (0..40)
            .map(|i| LogSegment::create(dir.path(), i * 1000, INDEX_BYTES, 0, &pool).unwrap())
            .collect();
        let mut expected = Vec::new();
        for round in 0..5 {
            for seg in &segs {
                let next = seg.next_offset();
                append(seg, next, 3, 50, 100 + round);
                let stats = pool.stats();
                assert!(stats.open_log_files <= 16, "{stats:?}");
                assert!(stats.index_maps <= 16, "{stats:?}");
            }
        }
        for seg in &segs {
            let (bytes, _) = seg
                .read(seg.base_offset(), 1 << 20, i64::MAX, false)
                .unwrap()
                .unwrap();
            expected.push(bytes);
        }
        let stats = pool.stats();
        assert!(stats.evictions > 0, "{stats:?}");
        assert!(
            stats.log_file_opens > 40,
            "segments were reopened: {stats:?}"
        );
        let closed = segs
            .iter()
            .position(|s| s.open_resources() == (false, false, false))
            .expect("some segment holds nothing now");
        let seg = &segs[closed];
        assert!(seg.offset_index.with(|i| i.entries()) > 0, "indexed");
        // Through the index (offset in the middle), then appends and the indexes again.
        let (bytes, first) = seg
            .read(seg.base_offset() + 7, 1 << 20, i64::MAX, false)
            .unwrap()
            .unwrap();
        assert_eq!(first, Some(seg.base_offset() + 6));
        assert!(expected[closed].ends_with(&bytes));
        assert!(seg.open_resources().0);
        seg.verify_indexes().unwrap();
        for (seg, bytes) in segs.iter().zip(&expected) {
            seg.verify_indexes().unwrap();
            let (again, _) = seg
                .read(seg.base_offset(), 1 << 20, i64::MAX, false)
                .unwrap()
                .unwrap();
            assert_eq!(&again, bytes);
            assert_eq!(seg.next_offset(), seg.base_offset() + 15);
        }
        assert!(pool.stats().open_log_files <= 16);
        // A deleted segment stays readable through what it pinned, outside the count.
        let gone = &segs[closed];
        gone.delete_files().unwrap();
        assert!(!gone.log_path().exists());
        for seg in &segs {
            seg.read(seg.base_offset(), 100, i64::MAX, true).unwrap();
        }
        let (bytes, _) = gone
            .read(gone.base_offset(), 1 << 20, i64::MAX, false)
            .unwrap()
            .unwrap();
        assert_eq!(bytes, expected[closed]);
        assert_eq!(pool.stats().pinned, 3);
        drop(segs);
        let stats = pool.stats();
        assert_eq!(
            (stats.open_log_files, stats.index_maps, stats.pinned),
            (0, 0, 0)
        );
    }

    /// Opening an existing segment maps nothing and opens no descriptor; a clean load maps
    /// only an index that has entries (here the time index, with the entry written at roll).
    #[test]
    fn opening_a_segment_holds_nothing_until_it_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let seg = LogSegment::create(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        append(&seg, 0, 1, 10, 5);
        seg.on_roll().unwrap();
        drop(seg);
        let seg = LogSegment::open(dir.path(), 0, INDEX_BYTES, 0, &pool()).unwrap();
        assert_eq!(seg.open_resources(), (false, false, false));
        assert!(seg.load_clean(100).unwrap());
        assert_eq!(seg.open_resources(), (true, false, true));
        assert_eq!(seg.next_offset(), 1);
    }
}
