//! One partition's log: an ordered list of segments, the offsets that describe it
//! (log start offset, log end offset, recovery point) and the rules of Kafka's `UnifiedLog` /
//! `LocalLog` for appending, reading, rolling, retention, truncation, flushing and recovery.
//!
//! Threading: a `Log` is shared as `Arc<Log>`. Every write (append, truncation, retention, roll,
//! close) takes the writer mutex, so there is one writer at a time. Readers take no lock for
//! longer than cloning an `Arc`: the segment list is an immutable `Arc<Vec<Arc<LogSegment>>>`
//! swapped by the writer on roll/delete/truncate, and each segment publishes its size only after
//! its bytes are written. A reader that raced with a truncation (which rewrites bytes in place)
//! notices through the truncation generation (a seqlock-style counter) and reads again.
//! `flush` fsyncs outside the writer lock so appends are not held up by the disk.
//!
//! After an I/O error the log is offline: every later call fails with
//! [`StorageError::Offline`] and nothing more is written.
//!
//! The log does not know about replicas, the high watermark's meaning or the wire protocol; the
//! caller passes the time (`now_ms`) and, for retention, the high watermark.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::batch::{self, BatchHeader, Validation, RECORD_BATCH_OVERHEAD};
use crate::config::{LogConfig, TimestampType};
use crate::epoch::LeaderEpochCache;
use crate::error::{IoContext, Result, StorageError};
use crate::producer_state::{
    increment_sequence, LeaderAppendCheck, ProducerBatch, ProducerStateManager,
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
};
use crate::segment::{LogSegment, RecoveryOutcome};

/// What an append did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogAppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The time stamped into the batches, -1 unless the log uses LogAppendTime.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    pub max_timestamp: i64,
    /// An idempotent producer's retry of a batch already in the log: nothing was written and
    /// the offsets are those of the original batch.
    pub duplicate: bool,
    pub batch_count: usize,
    pub record_count: u64,
    pub size_bytes: usize,
}

/// What a read returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchDataInfo {
    /// Whole batches, starting with the batch that contains the requested offset.
    pub records: Bytes,
    /// Base offset of the first batch in `records`, `None` when `records` is empty.
    pub first_batch_offset: Option<i64>,
}

/// Answer to ListOffsets by timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: Option<i32>,
}

/// Answer to OffsetForLeaderEpoch; (-1, -1) when undefined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: i64,
}

type SegmentList = Arc<Vec<Arc<LogSegment>>>;

/// State only the writer touches.
struct Writer {
    last_flush_ms: i64,
    /// The latest `now_ms` a caller passed in; the clock for calls that take none (producer
    /// expiry while reloading after a truncation).
    last_now_ms: i64,
}

pub struct Log {
    dir: PathBuf,
    config: RwLock<LogConfig>,
    writer: Mutex<Writer>,
    segments: RwLock<SegmentList>,
    /// Changed under the writer lock; read briefly by anyone.
    epochs: Mutex<LeaderEpochCache>,
    /// Changed under the writer lock; read briefly by anyone.
    producers: Mutex<ProducerStateManager>,
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
    recovery_point: AtomicI64,
    /// Upper bound for retention and DeleteRecords (Kafka never deletes at or past the high
    /// watermark); `i64::MAX` until the caller sets one.
    high_watermark: AtomicI64,
    /// Odd while a truncation rewrites bytes in place; readers retry when it moved.
    truncation_generation: AtomicU64,
    offline: AtomicBool,
    offline_reason: Mutex<String>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("log_start_offset", &self.log_start_offset())
            .field("log_end_offset", &self.log_end_offset())
            .finish()
    }
}

fn parse_segment_base(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

impl Log {
    /// Opens (creating if needed) the log in `dir`. After an unclean shutdown every segment from
    /// the one holding `recovery_point` onwards is recovered: each batch's CRC is checked, a
    /// torn or corrupt tail is cut and the segments after it are deleted, and the indexes are
    /// rebuilt. Segments before it, and all segments after a clean shutdown, are checked the way
    /// Kafka does (index sanity, a scan from the last index entry) and recovered if that fails.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        had_clean_shutdown: bool,
        now_ms: i64,
    ) -> Result<Log> {
        std::fs::create_dir_all(dir).at(dir)?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir).at(dir)? {
            let entry = entry.at(dir)?;
            if let Some(base) = entry.file_name().to_str().and_then(parse_segment_base) {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        let mut epochs = LeaderEpochCache::open(dir)?;
        let mut epoch_error = None;
        let index_bytes = config.segment_index_bytes as usize;
        let interval = config.index_interval_bytes as usize;
        let mut segments: Vec<Arc<LogSegment>> = Vec::new();
        let mut recovered_from: Option<usize> = None;
        let first_unflushed = bases
            .iter()
            .rposition(|&b| b <= recovery_point.max(0))
            .unwrap_or(0);
        for (i, &base) in bases.iter().enumerate() {
            let seg = LogSegment::open(dir, base, index_bytes, now_ms)?;
            let must_recover = recovered_from.is_some()
                || (!had_clean_shutdown && i >= first_unflushed)
                || !seg.load_clean(interval)?;
            let mut truncated = false;
            if must_recover {
                let mut on_batch = |h: &BatchHeader| {
                    if h.partition_leader_epoch >= 0 && epoch_error.is_none() {
                        if let Err(e) = epochs.assign(h.partition_leader_epoch, h.base_offset) {
                            epoch_error = Some(e);
                        }
                    }
                };
                let out: RecoveryOutcome = seg.recover(interval, index_bytes, &mut on_batch)?;
                if let Some(e) = epoch_error.take() {
                    return Err(e.into());
                }
                if out.truncated_bytes > 0 {
                    tracing::warn!(
                        dir = %dir.display(),
                        segment = base,
                        truncated_bytes = out.truncated_bytes,
                        "cut an invalid tail during recovery"
                    );
                    truncated = true;
                }
                recovered_from.get_or_insert(i);
            }
            let overlaps = segments.last().is_some_and(|p| p.next_offset() > base);
            if overlaps {
                tracing::warn!(dir = %dir.display(), segment = base, "segment overlaps its predecessor; deleting it and later ones");
                seg.delete_files()?;
                for &later in &bases[i + 1..] {
                    LogSegment::open(dir, later, index_bytes, now_ms)?.delete_files()?;
                }
                break;
            }
            segments.push(Arc::new(seg));
            if truncated {
                for &later in &bases[i + 1..] {
                    tracing::warn!(dir = %dir.display(), segment = later, "deleting segment after a truncated one");
                    LogSegment::open(dir, later, index_bytes, now_ms)?.delete_files()?;
                }
                break;
            }
        }
        if segments.is_empty() {
            segments.push(Arc::new(LogSegment::create(dir, 0, index_bytes, now_ms)?));
        }
        // Inactive segments keep trimmed, synced indexes; the active one gets its full size.
        let last = segments.len() - 1;
        for (i, seg) in segments.iter().enumerate() {
            if i == last {
                seg.resize_indexes(index_bytes)?;
            } else if recovered_from.is_some_and(|r| i >= r) {
                seg.on_roll()?;
            }
        }
        if let Some(r) = recovered_from {
            for seg in &segments[r..] {
                seg.flush_log()?;
            }
        }
        let log_start_offset = segments[0].base_offset();
        let log_end_offset = segments[last].next_offset();
        let recovery_point = if recovered_from.is_some() || had_clean_shutdown {
            log_end_offset
        } else {
            recovery_point.clamp(log_start_offset, log_end_offset)
        };
        epochs.truncate_from_end(log_end_offset)?;
        epochs.truncate_from_start(log_start_offset)?;
        let mut producers = ProducerStateManager::new(dir, PRODUCER_ID_EXPIRATION_MS_DEFAULT)?;
        producers.truncate_and_reload(log_start_offset, log_end_offset, now_ms)?;
        replay_producer_state(&segments, &mut producers, log_end_offset)?;
        sync_dir(dir)?;
        Ok(Log {
            dir: dir.to_owned(),
            config: RwLock::new(config),
            writer: Mutex::new(Writer {
                last_flush_ms: now_ms,
                last_now_ms: now_ms,
            }),
            segments: RwLock::new(Arc::new(segments)),
            epochs: Mutex::new(epochs),
            producers: Mutex::new(producers),
            log_start_offset: AtomicI64::new(log_start_offset),
            log_end_offset: AtomicI64::new(log_end_offset),
            recovery_point: AtomicI64::new(recovery_point),
            high_watermark: AtomicI64::new(i64::MAX),
            truncation_generation: AtomicU64::new(0),
            offline: AtomicBool::new(false),
            offline_reason: Mutex::new(String::new()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> LogConfig {
        self.config.read().clone()
    }
    /// New settings apply from the next append/roll/retention pass; index sizes from the next
    /// segment.
    pub fn update_config(&self, config: LogConfig) {
        *self.config.write() = config;
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point.load(Ordering::Acquire)
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments().iter().map(|s| s.size()).sum()
    }
    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }
    /// Number of segments (for tests and metrics).
    pub fn segment_count(&self) -> usize {
        self.segments().len()
    }
    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments().iter().map(|s| s.base_offset()).collect()
    }

    /// Tells the log the partition's high watermark: retention and DeleteRecords never remove
    /// offsets at or past it, as in Kafka.
    pub fn update_high_watermark(&self, high_watermark: i64) {
        self.high_watermark.store(high_watermark, Ordering::Release);
    }

    fn segments(&self) -> SegmentList {
        self.segments.read().clone()
    }
    fn set_segments(&self, list: Vec<Arc<LogSegment>>) {
        *self.segments.write() = Arc::new(list);
    }
    fn active(&self) -> Arc<LogSegment> {
        self.segments()
            .last()
            .expect("a log always has a segment")
            .clone()
    }

    fn check_online(&self) -> Result<()> {
        if self.is_offline() {
            return Err(StorageError::Offline(self.offline_reason.lock().clone()));
        }
        Ok(())
    }

    /// Takes the log offline on an I/O error.
    fn guard<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e @ StorageError::Io { .. }) = &result {
            let mut reason = self.offline_reason.lock();
            if !self.offline.swap(true, Ordering::AcqRel) {
                *reason = e.to_string();
                tracing::error!(dir = %self.dir.display(), error = %e, "log goes offline after an I/O error");
            }
        }
        result
    }

    fn check_not_negative(&self, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.log_end_offset(),
            });
        }
        Ok(())
    }

    fn lock_writer(&self) -> Result<MutexGuard<'_, Writer>> {
        self.check_online()?;
        let w = self.writer.lock();
        self.check_online()?;
        Ok(w)
    }

    // ---------------------------------------------------------------- writes

    /// Appends a produce request's batches: validates them, assigns offsets from the log end
    /// offset, stamps `leader_epoch` and, with LogAppendTime, `now_ms`.
    pub fn append_as_leader(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        self.check_online()?;
        let config = self.config();
        let (valid, _) = batch::validate_batches(
            records,
            Validation::Leader {
                max_message_bytes: config.max_message_bytes as usize,
            },
        )?;
        if records.len() > config.segment_bytes as usize {
            return Err(StorageError::RecordTooLarge {
                size: records.len(),
                max: config.segment_bytes as usize,
            });
        }
        let mut w = self.lock_writer()?;
        w.last_now_ms = now_ms;
        let log_append_time = match config.message_timestamp_type {
            TimestampType::LogAppendTime => now_ms,
            TimestampType::CreateTime => -1,
        };
        let mut next = self.log_end_offset();
        let mut position = 0usize;
        let mut stamped = Vec::with_capacity(valid.len());
        // Only headers change: each batch is written as its new header followed by the
        // producer's record bytes, so the records are never copied in user space.
        let mut new_headers = Vec::with_capacity(valid.len());
        let producers = self.producers.lock();
        let mut pending = producers.prepare_append();
        for h in &valid {
            if h.has_producer_id() && !h.is_control() {
                let last_sequence = increment_sequence(h.base_sequence, h.last_offset_delta);
                let check = pending.validate_leader_append(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    last_sequence,
                )?;
                if let LeaderAppendCheck::Duplicate {
                    first_offset,
                    last_offset,
                } = check
                {
                    // Kafka answers the whole request with the original batch's offsets and
                    // writes nothing.
                    return Ok(LogAppendInfo {
                        first_offset,
                        last_offset,
                        log_append_time,
                        log_start_offset: self.log_start_offset(),
                        max_timestamp: h.max_timestamp,
                        duplicate: true,
                        batch_count: 0,
                        record_count: 0,
                        size_bytes: 0,
                    });
                }
                let mut staged = producer_batch(h);
                staged.first_offset = next;
                staged.last_offset = next + h.last_offset_delta as i64;
                pending.stage(staged);
            }
            let b = &records[position..position + h.size_in_bytes()];
            let header = batch::leader_header(
                b,
                next,
                leader_epoch,
                (log_append_time >= 0).then_some(log_append_time),
            );
            let h = BatchHeader::parse(&header).expect("rewritten header parses");
            next = h.next_offset();
            position += h.size_in_bytes();
            stamped.push(h);
            new_headers.push(header);
        }
        drop(pending);
        drop(producers);
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * valid.len());
        let mut position = 0usize;
        for (header, h) in new_headers.iter().zip(&stamped) {
            parts.push(header);
            parts.push(&records[position + RECORD_BATCH_OVERHEAD..position + h.size_in_bytes()]);
            position += h.size_in_bytes();
        }
        let info = self.append_locked(w, &parts, &stamped, log_append_time, now_ms)?;
        self.maybe_flush_by_messages()?;
        Ok(info)
    }

    /// Appends a leader's batches as they are (offsets and epochs kept). The first batch must
    /// start at the log end offset and each next batch where the previous one ended.
    pub fn append_as_follower(&self, records: &[u8]) -> Result<LogAppendInfo> {
        self.check_online()?;
        let (headers, used) = batch::validate_batches(records, Validation::Follower)?;
        let w = self.lock_writer()?;
        let mut expected = self.log_end_offset();
        for h in &headers {
            if h.base_offset != expected {
                return Err(StorageError::NonMonotonicAppend(format!(
                    "batch at offset {} but the log expects {expected} (last offset {})",
                    h.base_offset,
                    h.last_offset()
                )));
            }
            expected = h.next_offset();
        }
        let info = self.append_locked(w, &[&records[..used]], &headers, -1, 0)?;
        self.maybe_flush_by_messages()?;
        Ok(info)
    }

    fn append_locked(
        &self,
        w: MutexGuard<'_, Writer>,
        parts: &[&[u8]],
        headers: &[BatchHeader],
        log_append_time: i64,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        let size_bytes: usize = parts.iter().map(|p| p.len()).sum();
        let first = headers.first().expect("validated appends have a batch");
        let last = headers.last().expect("validated appends have a batch");
        let max_timestamp = headers.iter().map(|h| h.max_timestamp).max().unwrap_or(-1);
        let config = self.config();
        let result = (|| {
            let active = self.maybe_roll(
                &w,
                &config,
                size_bytes,
                max_timestamp,
                last.last_offset(),
                now_ms,
            )?;
            active.append(parts, headers, config.index_interval_bytes as usize)
        })();
        self.guard(result)?;
        self.log_end_offset
            .store(last.next_offset(), Ordering::Release);
        let r = self.after_append(headers);
        self.guard(r)?;
        drop(w);
        Ok(LogAppendInfo {
            first_offset: first.base_offset,
            last_offset: last.last_offset(),
            log_append_time,
            log_start_offset: self.log_start_offset(),
            max_timestamp,
            duplicate: false,
            batch_count: headers.len(),
            record_count: headers.iter().map(|h| h.records_count as u64).sum(),
            size_bytes,
        })
    }

    /// Registers the appended batches with the epoch cache and the producer state.
    fn after_append(&self, headers: &[BatchHeader]) -> Result<()> {
        {
            let mut epochs = self.epochs.lock();
            for h in headers {
                if h.partition_leader_epoch >= 0 {
                    epochs.assign(h.partition_leader_epoch, h.base_offset)?;
                }
            }
        }
        let mut producers = self.producers.lock();
        for h in headers {
            if h.has_producer_id() && !h.is_control() {
                producers.update(&producer_batch(h));
            }
        }
        producers.update_map_end_offset(self.log_end_offset());
        Ok(())
    }

    /// Kafka's `maybeRoll`: a new segment when the active one would pass `segment.bytes`, has
    /// waited `segment.ms` since its first batch, has a full index, or cannot express the new
    /// offsets relative to its base.
    fn maybe_roll(
        &self,
        w: &MutexGuard<'_, Writer>,
        config: &LogConfig,
        messages_bytes: usize,
        max_timestamp_in_messages: i64,
        max_offset_in_messages: i64,
        now_ms: i64,
    ) -> Result<Arc<LogSegment>> {
        let active = self.active();
        let size = active.size();
        let should_roll = size > 0
            && (size + messages_bytes as u64 > config.segment_bytes as u64
                || active.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                    > config.segment_ms
                || active.indexes_full()
                || !active.can_convert_to_relative_offset(max_offset_in_messages));
        if should_roll {
            return self.roll_locked(w, now_ms);
        }
        Ok(active)
    }

    fn roll_locked(&self, _w: &MutexGuard<'_, Writer>, now_ms: i64) -> Result<Arc<LogSegment>> {
        let active = self.active();
        let new_base = self.log_end_offset();
        if active.size() == 0 && active.base_offset() == new_base {
            return Ok(active);
        }
        active.on_roll()?;
        let config = self.config();
        let segment = Arc::new(LogSegment::create(
            &self.dir,
            new_base,
            config.segment_index_bytes as usize,
            now_ms,
        )?);
        sync_dir(&self.dir)?;
        let mut list: Vec<Arc<LogSegment>> = self.segments().as_ref().clone();
        list.push(segment.clone());
        self.set_segments(list);
        // on_roll synced the old segment: everything below the new base is durable.
        self.recovery_point.fetch_max(new_base, Ordering::AcqRel);
        // Kafka snapshots the producer state at every new segment so a restart replays little.
        self.producers.lock().take_snapshot()?;
        tracing::debug!(dir = %self.dir.display(), base_offset = new_base, "rolled a new segment");
        Ok(segment)
    }

    /// Starts a new segment at the log end offset (unless the active one is empty).
    pub fn roll(&self, now_ms: i64) -> Result<()> {
        let mut w = self.lock_writer()?;
        w.last_now_ms = now_ms;
        let r = self.roll_locked(&w, now_ms).map(|_| ());
        self.guard(r)
    }

    /// Kafka's follower truncation: removes every batch whose last offset is >= `offset`. Later
    /// segments are deleted and the one holding `offset` is cut at a batch boundary. Below the
    /// log start offset this empties the log and restarts it at `offset`.
    pub fn truncate_to(&self, offset: i64) -> Result<()> {
        let w = self.lock_writer()?;
        self.check_not_negative(offset)?;
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        if offset < self.log_start_offset() {
            let r = self.truncate_fully_locked(&w, offset);
            return self.guard(r);
        }
        // Batches are removed whole. If the batch holding `offset` also holds the log start
        // offset, nothing visible would remain and the log end would fall below its start:
        // restart the log, empty, at its start offset instead.
        let lso = self.log_start_offset();
        let segments = self.segments();
        let holder = segments
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1);
        let cut = self.guard(segments[holder].find_batch(offset, segments[holder].size()))?;
        if cut.is_some_and(|(_, h)| h.base_offset < lso) {
            let r = self.truncate_fully_locked(&w, lso);
            return self.guard(r);
        }
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        let r = (|| {
            let config = self.config();
            let segments = self.segments();
            let (keep, drop_list): (Vec<_>, Vec<_>) = segments
                .iter()
                .cloned()
                .partition(|s| s.base_offset() <= offset);
            let active = keep
                .last()
                .expect("the first segment starts at or below the log start offset")
                .clone();
            active.truncate_to(offset, config.index_interval_bytes as usize)?;
            active.resize_indexes(config.segment_index_bytes as usize)?;
            self.set_segments(keep);
            for s in &drop_list {
                s.delete_files()?;
            }
            let leo = active.next_offset();
            self.log_end_offset.store(leo, Ordering::Release);
            self.recovery_point.fetch_min(leo, Ordering::AcqRel);
            self.epochs.lock().truncate_from_end(leo)?;
            let mut producers = self.producers.lock();
            producers.delete_snapshots_after(leo)?;
            producers.truncate_and_reload(self.log_start_offset(), leo, w.last_now_ms)?;
            replay_producer_state(&self.segments(), &mut producers, leo)?;
            Ok(())
        })();
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        drop(w);
        self.guard(r)
    }

    /// Deletes every segment and restarts the log, empty, at `offset` (a follower whose leader
    /// no longer has the offsets it needs).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        let w = self.lock_writer()?;
        self.check_not_negative(offset)?;
        let r = self.truncate_fully_locked(&w, offset);
        self.guard(r)
    }

    fn truncate_fully_locked(&self, _w: &MutexGuard<'_, Writer>, offset: i64) -> Result<()> {
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        let r = (|| {
            let config = self.config();
            let old = self.segments();
            for s in old.iter() {
                s.delete_files()?;
            }
            let seg =
                LogSegment::create(&self.dir, offset, config.segment_index_bytes as usize, 0)?;
            sync_dir(&self.dir)?;
            self.set_segments(vec![Arc::new(seg)]);
            self.log_start_offset.store(offset, Ordering::Release);
            self.log_end_offset.store(offset, Ordering::Release);
            self.recovery_point.store(offset, Ordering::Release);
            self.epochs.lock().clear()?;
            self.producers.lock().truncate_fully_and_start_at(offset)?;
            Ok(())
        })();
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        r
    }

    /// DeleteRecords: moves the log start offset up to `offset` (not past the high watermark or
    /// the log end offset) and deletes the segments entirely below it. Returns the new log
    /// start offset.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64> {
        let w = self.lock_writer()?;
        let limit = self
            .log_end_offset()
            .min(self.high_watermark.load(Ordering::Acquire));
        if offset > limit || offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.log_end_offset(),
            });
        }
        self.log_start_offset.fetch_max(offset, Ordering::AcqRel);
        let r = self.delete_log_start_offset_breached(&w);
        self.guard(r)?;
        Ok(self.log_start_offset())
    }

    /// Moves the log start offset up (checkpointed value at startup); deletes what lies below.
    pub(crate) fn maybe_increment_log_start_offset(&self, offset: i64) -> Result<()> {
        let w = self.lock_writer()?;
        if offset > self.log_end_offset() {
            let r = self.truncate_fully_locked(&w, offset);
            return self.guard(r);
        }
        self.log_start_offset.fetch_max(offset, Ordering::AcqRel);
        let r = self.delete_log_start_offset_breached(&w);
        self.guard(r).map(|_| ())
    }

    fn delete_log_start_offset_breached(&self, w: &MutexGuard<'_, Writer>) -> Result<usize> {
        let lso = self.log_start_offset();
        let deleted = self.delete_segments_while(w, 0, &mut |_, next| {
            next.is_some_and(|n| n.base_offset() <= lso)
        })?;
        self.after_log_start_offset_moved()?;
        Ok(deleted)
    }

    /// The epoch cache and producer state follow the log start offset up.
    fn after_log_start_offset_moved(&self) -> Result<()> {
        let lso = self.log_start_offset();
        self.epochs.lock().truncate_from_start(lso)?;
        let first_base = self.segments()[0].base_offset();
        let mut producers = self.producers.lock();
        producers.on_log_start_offset_incremented(lso);
        producers.delete_snapshots_before(first_base)?;
        Ok(())
    }

    /// Retention: deletes whole segments, oldest first, whose newest record is older than
    /// `retention.ms`, then while the log exceeds `retention.bytes`, and those below the log
    /// start offset. Never deletes at or past the high watermark. Returns segments deleted.
    pub fn delete_old_segments(&self, now_ms: i64) -> Result<usize> {
        let mut w = self.lock_writer()?;
        w.last_now_ms = now_ms;
        let config = self.config();
        let r = (|| {
            let mut deleted = self.delete_log_start_offset_breached(&w)?;
            if config.retention_ms >= 0 {
                let mut pred = |seg: &LogSegment, _: Option<&LogSegment>| {
                    seg.largest_timestamp()
                        .map(|ts| now_ms - ts > config.retention_ms)
                        .unwrap_or(false)
                };
                deleted += self.delete_segments_while(&w, now_ms, &mut pred)?;
            }
            if config.retention_bytes >= 0 {
                let mut diff = self.size_bytes() as i64 - config.retention_bytes;
                let mut pred = |seg: &LogSegment, _: Option<&LogSegment>| {
                    if diff - seg.size() as i64 >= 0 {
                        diff -= seg.size() as i64;
                        true
                    } else {
                        false
                    }
                };
                deleted += self.delete_segments_while(&w, now_ms, &mut pred)?;
            }
            Ok(deleted)
        })();
        self.guard(r)
    }

    /// Kafka's `deletableSegments` + `deleteSegments`: the leading run of segments for which
    /// `predicate(segment, next)` holds and whose offsets all lie below the high watermark. If
    /// that is every segment, a new empty one is rolled first: a log always has one.
    fn delete_segments_while(
        &self,
        w: &MutexGuard<'_, Writer>,
        now_ms: i64,
        predicate: &mut dyn FnMut(&LogSegment, Option<&LogSegment>) -> bool,
    ) -> Result<usize> {
        let segments = self.segments();
        let high_watermark = self.high_watermark.load(Ordering::Acquire);
        let leo = self.log_end_offset();
        let mut count = 0;
        for (i, seg) in segments.iter().enumerate() {
            let next = segments.get(i + 1).map(|s| s.as_ref());
            let upper = next.map_or(leo, |n| n.base_offset());
            let last_and_empty = next.is_none() && seg.size() == 0;
            if !last_and_empty && high_watermark >= upper && predicate(seg, next) {
                count += 1;
            } else {
                break;
            }
        }
        if count == 0 {
            return Ok(0);
        }
        if count == segments.len() {
            self.roll_locked(w, now_ms)?;
        }
        let all = self.segments();
        let (gone, keep) = all.split_at(count);
        let new_start = keep[0].base_offset();
        self.set_segments(keep.to_vec());
        self.log_start_offset.fetch_max(new_start, Ordering::AcqRel);
        for seg in gone {
            seg.delete_files()?;
            tracing::info!(dir = %self.dir.display(), segment = seg.base_offset(), "deleted segment");
        }
        self.after_log_start_offset_moved()?;
        Ok(count)
    }

    /// fsyncs every segment that may hold unflushed data and moves the recovery point to the
    /// log end offset seen at the start. The fsync runs outside the writer lock.
    pub fn flush(&self) -> Result<()> {
        let (target, segments, generation) = {
            let _w = self.lock_writer()?;
            (
                self.log_end_offset(),
                self.segments(),
                self.truncation_generation.load(Ordering::SeqCst),
            )
        };
        let recovery_point = self.recovery_point();
        if target <= recovery_point {
            return Ok(());
        }
        let r = (|| {
            for (i, seg) in segments.iter().enumerate() {
                let upper = segments.get(i + 1).map_or(i64::MAX, |n| n.base_offset());
                if upper > recovery_point {
                    seg.flush_log()?;
                }
            }
            Ok(())
        })();
        self.guard(r)?;
        let _w = self.writer.lock();
        if self.truncation_generation.load(Ordering::SeqCst) == generation {
            self.recovery_point
                .fetch_max(target.min(self.log_end_offset()), Ordering::AcqRel);
        }
        Ok(())
    }

    fn maybe_flush_by_messages(&self) -> Result<()> {
        let unflushed = self.log_end_offset() - self.recovery_point();
        if unflushed >= self.config.read().flush_messages {
            self.flush()?;
        }
        Ok(())
    }

    /// `flush.ms`: flushes when that long has passed since the last flush.
    pub fn flush_if_due(&self, now_ms: i64) -> Result<()> {
        let flush_ms = self.config.read().flush_ms;
        let due = {
            let w = self.writer.lock();
            now_ms.saturating_sub(w.last_flush_ms) >= flush_ms
        };
        if due {
            self.flush()?;
            self.writer.lock().last_flush_ms = now_ms;
        }
        Ok(())
    }

    /// Clean close: fsync, final time index entry, trimmed indexes. Further appends reopen the
    /// active segment's indexes as needed; normally the log is dropped after this.
    pub fn close(&self) -> Result<()> {
        let _w = self.lock_writer()?;
        let r = self.active().on_roll().and_then(|_| {
            self.producers.lock().take_snapshot()?;
            Ok(())
        });
        self.guard(r)?;
        self.recovery_point
            .store(self.log_end_offset(), Ordering::Release);
        Ok(())
    }

    // ---------------------------------------------------------------- leader epochs, producers

    /// Registers that `epoch` starts at `start_offset` (a new leader registers (epoch, LEO)
    /// before it writes anything). Kafka's `assign` rules, persisted in leader-epoch-checkpoint.
    pub fn assign_epoch_start_offset(&self, epoch: i32, start_offset: i64) -> Result<()> {
        self.check_online()?;
        let r = self.epochs.lock().assign(epoch, start_offset);
        self.guard(r.map(|_| ()).map_err(StorageError::from))
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.lock().latest_epoch()
    }

    /// Kafka's `endOffsetFor(epoch)` against the current log end offset.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset {
        let epochs = self.epochs.lock();
        let (epoch, end_offset) = epochs.end_offset_for(epoch, self.log_end_offset());
        EpochEndOffset { epoch, end_offset }
    }

    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.epochs.lock().epoch_for_offset(offset)
    }

    /// The current epoch of an idempotent producer, if the log holds state for it.
    pub fn last_producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.lock().last_producer_epoch(producer_id)
    }

    /// Forgets producers idle for `producer.id.expiration.ms`; returns how many.
    pub fn remove_expired_producers(&self, now_ms: i64) -> usize {
        let _w = self.writer.lock();
        self.producers.lock().remove_expired_producers(now_ms)
    }

    /// DeleteTopics: removes the log's directory. The log is unusable afterwards.
    pub fn delete(&self) -> Result<()> {
        let _w = self.lock_writer()?;
        *self.offline_reason.lock() = "the log was deleted".into();
        self.offline.store(true, Ordering::Release);
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&self.dir, e)),
        }
        if let Some(parent) = self.dir.parent() {
            sync_dir(parent)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- reads

    /// Whole batches from the one containing `start_offset`, each with its last offset below
    /// `max_offset` (exclusive, e.g. the high watermark) and the log end offset, at most
    /// `max_bytes` in all — unless `min_one_batch`, which returns the first batch even if it is
    /// larger. `Err(OffsetOutOfRange)` below the log start offset or past the log end offset.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<FetchDataInfo> {
        loop {
            self.check_online()?;
            let generation = self.truncation_generation.load(Ordering::SeqCst);
            if generation % 2 == 1 {
                // A truncation is rewriting bytes: wait for it to finish.
                drop(self.writer.lock());
                continue;
            }
            let result = self.read_once(start_offset, max_bytes, max_offset, min_one_batch);
            if self.truncation_generation.load(Ordering::SeqCst) != generation {
                continue;
            }
            return self.guard(result);
        }
    }

    fn read_once(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<FetchDataInfo> {
        let log_start_offset = self.log_start_offset();
        let log_end_offset = self.log_end_offset();
        if start_offset < log_start_offset || start_offset > log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset: start_offset,
                log_start_offset,
                log_end_offset,
            });
        }
        let bound = max_offset.min(log_end_offset);
        let segments = self.segments();
        if start_offset >= bound {
            return Ok(FetchDataInfo::default());
        }
        let first = segments
            .partition_point(|s| s.base_offset() <= start_offset)
            .saturating_sub(1);
        for seg in &segments[first..] {
            if seg.base_offset() >= bound {
                break;
            }
            if let Some((records, first_batch_offset)) =
                seg.read(start_offset, max_bytes, bound, min_one_batch)?
            {
                return Ok(FetchDataInfo {
                    records,
                    first_batch_offset,
                });
            }
        }
        Ok(FetchDataInfo::default())
    }

    /// ListOffsets by timestamp: the first offset at or after the log start offset whose record
    /// timestamp is >= `timestamp`, looking inside compressed batches as Kafka does (see
    /// `batch::first_record_timestamp_at_least`), or `None` if every record is older.
    pub fn fetch_offset_by_timestamp(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        self.check_online()?;
        let r = (|| {
            let lso = self.log_start_offset();
            for seg in self.segments().iter() {
                if seg.max_timestamp() < timestamp {
                    continue;
                }
                let position = seg.time_lookup_position(timestamp);
                for (pos, h) in seg.headers_from(position as u64)? {
                    if h.last_offset() < lso || h.max_timestamp < timestamp {
                        continue;
                    }
                    let bytes = seg.read_batch(pos, &h)?;
                    if let Some((ts, offset)) =
                        batch::first_record_timestamp_at_least(&bytes, timestamp, lso)
                    {
                        return Ok(Some(TimestampAndOffset {
                            timestamp: ts,
                            offset: offset.max(lso),
                            leader_epoch: (h.partition_leader_epoch >= 0)
                                .then_some(h.partition_leader_epoch),
                        }));
                    }
                }
            }
            Ok(None)
        })();
        self.guard(r)
    }

    /// ListOffsets MAX_TIMESTAMP (-3): the largest timestamp and the offset of the first record
    /// carrying it (inside a compressed batch too; the batch's base offset under LogAppendTime),
    /// as Kafka's `UnifiedLog.fetchOffsetByTimestamp` answers it.
    pub fn max_timestamp_and_offset(&self) -> Result<Option<TimestampAndOffset>> {
        self.check_online()?;
        let r = (|| {
            let segments = self.segments();
            let Some(seg) = segments
                .iter()
                .filter(|s| s.max_timestamp() >= 0)
                .max_by_key(|s| s.max_timestamp())
            else {
                return Ok(None);
            };
            let m = seg.max_timestamp_and_offset();
            let Some((pos, h)) = seg.find_batch(m.offset, seg.size())? else {
                return Ok(None);
            };
            let bytes = seg.read_batch(pos, &h)?;
            // As Kafka: no record carrying the header's max timestamp means no answer.
            let Some(offset) = batch::offset_of_max_timestamp(&bytes) else {
                return Ok(None);
            };
            Ok(Some(TimestampAndOffset {
                timestamp: m.timestamp,
                offset,
                leader_epoch: (h.partition_leader_epoch >= 0).then_some(h.partition_leader_epoch),
            }))
        })();
        self.guard(r)
    }

    /// Checks that every segment's indexes point at the batches they name (tests, tools).
    pub fn verify_indexes(&self) -> std::result::Result<(), String> {
        self.segments().iter().try_for_each(|s| s.verify_indexes())
    }
}

fn producer_batch(h: &BatchHeader) -> ProducerBatch {
    ProducerBatch {
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        first_sequence: h.base_sequence,
        last_sequence: increment_sequence(h.base_sequence, h.last_offset_delta),
        first_offset: h.base_offset,
        last_offset: h.last_offset(),
        max_timestamp: h.max_timestamp,
    }
}

/// Rebuilds producer state from batch headers, from the state's map end offset (a snapshot or
/// the log start) to the log end offset.
fn replay_producer_state(
    segments: &[Arc<LogSegment>],
    producers: &mut ProducerStateManager,
    log_end_offset: i64,
) -> Result<()> {
    let from = producers.map_end_offset();
    if from < log_end_offset {
        let first = segments
            .partition_point(|s| s.base_offset() <= from)
            .saturating_sub(1);
        for seg in &segments[first..] {
            let Some((start, _)) = seg.find_batch(from, seg.size())? else {
                continue;
            };
            for (_, h) in seg.headers_from(start)? {
                if h.base_offset >= from && h.has_producer_id() && !h.is_control() {
                    producers.update(&producer_batch(&h));
                }
            }
        }
    }
    producers.update_map_end_offset(log_end_offset);
    Ok(())
}

/// fsync of a directory, so created/renamed/deleted names are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).at(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::builder::simple;
    use crate::batch::BatchIter;

    fn small_config() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            segment_index_bytes: 4096,
            index_interval_bytes: 128,
            ..LogConfig::default()
        }
    }

    fn offsets(info: &FetchDataInfo) -> Vec<(i64, i64)> {
        BatchIter::new(&info.records)
            .map(|(_, h)| (h.base_offset, h.last_offset()))
            .collect()
    }

    #[test]
    fn leader_append_assigns_offsets_and_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap();
        let mut two = simple(3, 10, 100);
        two.extend_from_slice(&simple(2, 10, 200));
        let info = log.append_as_leader(&two, 5, 1_000).unwrap();
        assert_eq!(
            (
                info.first_offset,
                info.last_offset,
                info.batch_count,
                info.record_count
            ),
            (0, 4, 2, 5)
        );
        assert_eq!((info.log_append_time, info.max_timestamp), (-1, 201));
        assert_eq!(log.log_end_offset(), 5);
        let info = log.append_as_leader(&simple(1, 10, 300), 6, 1_000).unwrap();
        assert_eq!(info.first_offset, 5);
        let read = log.read(1, 1 << 20, i64::MAX, false).unwrap();
        assert_eq!(read.first_batch_offset, Some(0));
        assert_eq!(offsets(&read), vec![(0, 2), (3, 4), (5, 5)]);
        let epochs: Vec<i32> = BatchIter::new(&read.records)
            .map(|(_, h)| h.partition_leader_epoch)
            .collect();
        assert_eq!(epochs, vec![5, 5, 6]);
        for (at, h) in BatchIter::new(&read.records) {
            assert!(batch::crc_valid(&read.records[at..at + h.size_in_bytes()]));
        }
        // the high watermark bounds the read
        assert_eq!(
            offsets(&log.read(0, 1 << 20, 5, false).unwrap()),
            vec![(0, 2), (3, 4)]
        );
        assert_eq!(
            log.read(6, 100, i64::MAX, true).unwrap(),
            FetchDataInfo::default()
        );
        assert!(matches!(
            log.read(7, 100, i64::MAX, true),
            Err(StorageError::OffsetOutOfRange { offset: 7, .. })
        ));
    }

    #[test]
    fn log_append_time_is_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..LogConfig::default()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        let info = log
            .append_as_leader(&simple(2, 10, 100), 0, 77_000)
            .unwrap();
        assert_eq!((info.log_append_time, info.max_timestamp), (77_000, 77_000));
        let read = log.read(0, 1 << 20, i64::MAX, false).unwrap();
        let (_, h) = BatchIter::new(&read.records).next().unwrap();
        assert_eq!(
            (h.timestamp_type(), h.max_timestamp),
            (TimestampType::LogAppendTime, 77_000)
        );
    }

    #[test]
    fn rejects_bad_batches_with_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            max_message_bytes: 200,
            ..LogConfig::default()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        let mut b = simple(1, 10, 0);
        let n = b.len();
        b[n - 1] ^= 1;
        assert!(matches!(
            log.append_as_leader(&b, 0, 0),
            Err(StorageError::CorruptRecord(_))
        ));
        assert!(matches!(
            log.append_as_leader(&simple(1, 300, 0), 0, 0),
            Err(StorageError::RecordTooLarge { .. })
        ));
        assert_eq!(log.log_end_offset(), 0);
    }

    #[test]
    fn follower_append_keeps_offsets_and_rejects_gaps_and_overlaps() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap();
        let mut b = simple(3, 10, 0);
        batch::set_partition_leader_epoch(&mut b, 4);
        let info = log.append_as_follower(&b).unwrap();
        assert_eq!((info.first_offset, info.last_offset), (0, 2));
        assert!(matches!(
            log.append_as_follower(&b),
            Err(StorageError::NonMonotonicAppend(_))
        ));
        batch::set_base_offset(&mut b, 5);
        assert!(matches!(
            log.append_as_follower(&b),
            Err(StorageError::NonMonotonicAppend(_))
        ));
        batch::set_base_offset(&mut b, 3);
        log.append_as_follower(&b).unwrap();
        assert_eq!(log.log_end_offset(), 6);
        let read = log.read(3, 1 << 20, i64::MAX, false).unwrap();
        let (_, h) = BatchIter::new(&read.records).next().unwrap();
        assert_eq!((h.base_offset, h.partition_leader_epoch), (3, 4));
    }

    #[test]
    fn rolls_by_size_and_reads_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        for i in 0..40 {
            log.append_as_leader(&simple(2, 60, i), 0, i).unwrap();
        }
        assert!(log.segment_count() > 5, "{}", log.segment_count());
        for seg in log.segments().iter() {
            assert!(seg.size() <= 1024);
        }
        assert_eq!(
            log.recovery_point(),
            *log.segment_base_offsets().last().unwrap()
        );
        let mut next = 0;
        let mut seen = 0;
        while next < log.log_end_offset() {
            let r = log.read(next, 300, i64::MAX, true).unwrap();
            let o = offsets(&r);
            assert!(!o.is_empty());
            assert_eq!(o[0].0, next);
            next = o.last().unwrap().1 + 1;
            seen += o.len();
        }
        assert_eq!(seen, 40);
        log.verify_indexes().unwrap();
        // rolled segments have trimmed indexes on disk
        let first = log.segments()[0].clone();
        let idx = std::fs::metadata(
            dir.path()
                .join(crate::segment::index_file_name(first.base_offset())),
        )
        .unwrap();
        assert!(idx.len() < 4096);
    }

    #[test]
    fn rolls_by_segment_ms() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_ms: 1000,
            ..LogConfig::default()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        log.append_as_leader(&simple(1, 10, 10_000), 0, 10_000)
            .unwrap();
        log.append_as_leader(&simple(1, 10, 10_500), 0, 10_500)
            .unwrap();
        assert_eq!(log.segment_count(), 1);
        log.append_as_leader(&simple(1, 10, 11_001), 0, 11_001)
            .unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 2]);
    }

    #[test]
    fn retention_by_time_and_bytes_and_delete_records() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        for i in 0..40 {
            log.append_as_leader(&simple(2, 60, 1_000 + i * 100), 0, 0)
                .unwrap();
        }
        let bases = log.segment_base_offsets();
        // nothing is old enough
        assert_eq!(log.delete_old_segments(1_000).unwrap(), 0);
        // retention.ms: segments whose newest record is older than now - retention.ms
        log.update_config(LogConfig {
            retention_ms: 1_000,
            ..small_config()
        });
        let now = 1_000 + 10 * 100 + 1_000 + 1; // records up to ts 2_000 have expired
        let deleted = log.delete_old_segments(now).unwrap();
        assert!(deleted > 0);
        assert_eq!(log.log_start_offset(), bases[deleted]);
        for seg in log.segments().iter() {
            assert!(
                now - seg.max_timestamp() <= 1_000 || seg.base_offset() == log.log_start_offset()
            );
        }
        assert!(matches!(
            log.read(0, 100, i64::MAX, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // retention.bytes
        log.update_config(LogConfig {
            retention_bytes: 2048,
            retention_ms: -1,
            ..small_config()
        });
        log.delete_old_segments(now).unwrap();
        // Kafka keeps at least retention.bytes: a segment goes only if the rest still has them
        let first = log.segments()[0].size();
        assert!(
            log.size_bytes() >= 2048 && log.size_bytes() - first < 2048,
            "{}",
            log.size_bytes()
        );
        // DeleteRecords inside a segment moves the start offset but keeps the segment
        let lso = log.log_start_offset();
        assert_eq!(log.delete_records_before(lso + 1).unwrap(), lso + 1);
        let r = log.read(lso + 1, 1 << 20, i64::MAX, false).unwrap();
        assert!(!r.records.is_empty());
        assert!(matches!(
            log.read(lso, 100, i64::MAX, true),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // not past the high watermark
        log.update_high_watermark(70);
        assert!(matches!(
            log.delete_records_before(71),
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert_eq!(log.delete_records_before(70).unwrap(), 70);
        assert!(log.segment_base_offsets()[0] <= 70);
        assert!(log.segment_base_offsets().get(1).is_none_or(|&b| b > 70));
    }

    #[test]
    fn retention_of_everything_leaves_an_empty_active_segment() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            retention_ms: 10,
            ..small_config()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        for i in 0..10 {
            log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap();
        }
        log.delete_old_segments(1_000_000).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![20]);
        assert_eq!(
            (
                log.log_start_offset(),
                log.log_end_offset(),
                log.size_bytes()
            ),
            (20, 20, 0)
        );
        let info = log.append_as_leader(&simple(1, 1, 0), 0, 0).unwrap();
        assert_eq!(info.first_offset, 20);
    }

    #[test]
    fn truncate_to_cuts_and_deletes_later_segments() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        for i in 0..40 {
            log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap();
        }
        log.flush().unwrap();
        log.truncate_to(31).unwrap(); // batch 30..=31 goes
        assert_eq!(log.log_end_offset(), 30);
        assert_eq!(log.recovery_point(), 30);
        assert!(log.segment_base_offsets().iter().all(|&b| b <= 30));
        log.verify_indexes().unwrap();
        let info = log.append_as_leader(&simple(1, 60, 0), 1, 0).unwrap();
        assert_eq!(info.first_offset, 30);
        let r = log.read(28, 1 << 20, i64::MAX, false).unwrap();
        assert_eq!(offsets(&r)[0], (28, 29));
        let r = log.read(30, 1 << 20, i64::MAX, false).unwrap();
        assert_eq!(offsets(&r), vec![(30, 30)]);
        log.truncate_fully_and_start_at(100).unwrap();
        assert_eq!(
            (
                log.log_start_offset(),
                log.log_end_offset(),
                log.segment_base_offsets()
            ),
            (100, 100, vec![100])
        );
        assert_eq!(
            log.append_as_leader(&simple(1, 1, 0), 0, 0)
                .unwrap()
                .first_offset,
            100
        );
    }

    #[test]
    fn clean_reopen_and_unclean_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        for i in 0..25 {
            log.append_as_leader(&simple(2, 60, 100 + i), 0, 0).unwrap();
        }
        let before = log.read(0, 1 << 20, i64::MAX, false).unwrap();
        log.close().unwrap();
        drop(log);
        let log = Log::open(dir.path(), small_config(), 50, true, 0).unwrap();
        assert_eq!(log.log_end_offset(), 50);
        assert_eq!(log.read(0, 1 << 20, i64::MAX, false).unwrap(), before);
        log.verify_indexes().unwrap();
        assert_eq!(
            log.max_timestamp_and_offset().unwrap().unwrap().timestamp,
            125
        );
        log.append_as_leader(&simple(2, 60, 200), 0, 0).unwrap();
        let active = log.active();
        drop(log); // no close: unclean
                   // tear the active segment's last batch
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(active.log_path())
            .unwrap();
        f.set_len(active.size() - 5).unwrap();
        drop(active);
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        assert_eq!(log.log_end_offset(), 50);
        assert_eq!(log.read(0, 1 << 20, i64::MAX, false).unwrap(), before);
        log.verify_indexes().unwrap();
    }

    #[test]
    fn corruption_in_an_old_segment_deletes_later_ones_on_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        for i in 0..30 {
            log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap();
        }
        let bases = log.segment_base_offsets();
        drop(log);
        let second = dir.path().join(crate::segment::log_file_name(bases[1]));
        let mut bytes = std::fs::read(&second).unwrap();
        bytes[80] ^= 0xff;
        std::fs::write(&second, bytes).unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        assert_eq!(log.segment_base_offsets(), vec![bases[0], bases[1]]);
        assert_eq!(log.log_end_offset(), bases[1]);
        for b in &bases[2..] {
            assert!(!dir.path().join(crate::segment::log_file_name(*b)).exists());
        }
    }

    #[test]
    fn offset_by_timestamp() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        for i in 0..30 {
            log.append_as_leader(&simple(3, 60, 1_000 + i * 10), 2, 0)
                .unwrap(); // ts 1000+10i ..+2
        }
        let t = log.fetch_offset_by_timestamp(1_101).unwrap().unwrap();
        assert_eq!(
            (t.timestamp, t.offset, t.leader_epoch),
            (1_101, 31, Some(2))
        );
        let t = log.fetch_offset_by_timestamp(1_103).unwrap().unwrap();
        assert_eq!((t.timestamp, t.offset), (1_110, 33));
        assert_eq!(log.fetch_offset_by_timestamp(0).unwrap().unwrap().offset, 0);
        assert_eq!(log.fetch_offset_by_timestamp(5_000).unwrap(), None);
        let m = log.max_timestamp_and_offset().unwrap().unwrap();
        assert_eq!((m.timestamp, m.offset), (1_292, 89));
        // below the log start offset nothing is answered, even inside its batch
        log.delete_records_before(31).unwrap();
        let t = log.fetch_offset_by_timestamp(1_100).unwrap().unwrap();
        assert_eq!((t.timestamp, t.offset), (1_101, 31));
    }

    #[test]
    fn offset_by_timestamp_inside_compressed_batches() {
        use crate::batch::builder::{batch_with_timestamp_deltas, compressed, Spec};
        use crate::compression::*;
        for (codec, xerial) in [
            (CODEC_GZIP, false),
            (CODEC_SNAPPY, false),
            (CODEC_SNAPPY, true),
            (CODEC_LZ4, false),
            (CODEC_ZSTD, false),
        ] {
            let what = format!("{} (xerial {xerial})", codec_name(codec));
            let dir = tempfile::tempdir().unwrap();
            let config = LogConfig {
                segment_bytes: 300,
                ..small_config()
            };
            let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
            let values: Vec<Vec<u8>> = (0..5).map(|j| vec![b'a' + j; 40]).collect();
            let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
            // Batch i holds offsets 5i..5i+4 at 10_000 + 100 i + [0, 40, 10, 20, 30]; record
            // 2 of batch 5 (offset 27) jumps to 50_000, the log's max.
            for i in 0..12i64 {
                let mut deltas = [0, 40, 10, 20, 30];
                if i == 5 {
                    deltas[2] = 50_000 - 10_000 - 500;
                }
                let spec = Spec {
                    base_timestamp: 10_000 + 100 * i,
                    ..Spec::default()
                };
                let b = compressed(
                    &batch_with_timestamp_deltas(&spec, &values, &deltas),
                    codec,
                    xerial,
                );
                log.append_as_leader(&b, 3, 0).unwrap();
            }
            assert!(log.segment_count() > 2, "{what}: spans segments");
            let at = |ts| {
                log.fetch_offset_by_timestamp(ts)
                    .unwrap()
                    .map(|t| (t.timestamp, t.offset, t.leader_epoch))
            };
            assert_eq!(at(0), Some((10_000, 0, Some(3))), "{what}");
            assert_eq!(at(10_325), Some((10_340, 16, Some(3))), "{what}");
            assert_eq!(at(10_310), Some((10_340, 16, Some(3))), "{what}");
            assert_eq!(at(10_341), Some((10_400, 20, Some(3))), "{what}");
            assert_eq!(at(10_402), Some((10_440, 21, Some(3))), "{what}");
            // Batch 5's outlier is the first record at or after 11_141.
            assert_eq!(at(11_141), Some((50_000, 27, Some(3))), "{what}");
            assert_eq!(at(50_001), None, "{what}");
            let m = log.max_timestamp_and_offset().unwrap().unwrap();
            assert_eq!((m.timestamp, m.offset), (50_000, 27), "{what}");
            // Below the log start offset nothing is answered, even inside its batch.
            log.delete_records_before(17).unwrap();
            assert_eq!(at(10_305), Some((10_310, 17, Some(3))), "{what}");
            assert_eq!(at(10_325), Some((10_330, 19, Some(3))), "{what}");
        }
    }

    #[test]
    fn io_error_takes_the_log_offline() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("t-0");
        let log = Log::open(&log_dir, LogConfig::default(), 0, false, 0).unwrap();
        log.append_as_leader(&simple(1, 10, 0), 0, 0).unwrap();
        std::fs::remove_dir_all(&log_dir).unwrap();
        std::fs::write(&log_dir, b"not a directory").unwrap();
        let e = log.roll(0).unwrap_err();
        assert!(matches!(e, StorageError::Io { .. }), "{e}");
        assert!(log.is_offline());
        for e in [
            log.append_as_leader(&simple(1, 10, 0), 0, 0).unwrap_err(),
            log.read(0, 100, i64::MAX, true).unwrap_err(),
            log.flush().unwrap_err(),
        ] {
            assert!(
                matches!(e, StorageError::Offline(ref m) if m.contains("I/O error")),
                "{e}"
            );
        }
    }

    #[test]
    fn readers_stay_valid_while_the_writer_rolls_and_deletes() {
        // In memory when possible: this checks concurrency, and thousands of rolls fsync.
        let dir = match tempfile::tempdir_in("/dev/shm") {
            Ok(dir) => dir,
            Err(_) => tempfile::tempdir().unwrap(),
        };
        let config = LogConfig {
            retention_bytes: 4096,
            ..small_config()
        };
        let log = Arc::new(Log::open(dir.path(), config, 0, false, 0).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        // Readers read at the start (segments being deleted) and at the tail (being truncated
        // and rewritten with batches of other sizes, so old and new batch boundaries differ):
        // every batch they get must be whole, valid and hold the offset asked for.
        let readers: Vec<_> = (0..3)
            .map(|n| {
                let (log, stop) = (log.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut reads = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let start = if n == 0 {
                            log.log_start_offset()
                        } else {
                            (log.log_end_offset() - 1 - n as i64).max(log.log_start_offset())
                        };
                        match log.read(start, 2048, i64::MAX, true) {
                            Ok(r) => {
                                let batches: Vec<_> = BatchIter::new(&r.records).collect();
                                let covered: usize =
                                    batches.iter().map(|(_, h)| h.size_in_bytes()).sum();
                                assert_eq!(covered, r.records.len(), "whole batches only");
                                for (at, h) in &batches {
                                    assert!(batch::crc_valid(
                                        &r.records[*at..*at + h.size_in_bytes()]
                                    ));
                                }
                                if let Some((_, first)) = batches.first() {
                                    assert!(
                                        first.base_offset <= start
                                            || first.base_offset == r.first_batch_offset.unwrap()
                                    );
                                    assert!(
                                        first.last_offset() >= start,
                                        "batch {first:?} for {start}"
                                    );
                                }
                                reads += 1;
                            }
                            Err(StorageError::OffsetOutOfRange { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    reads
                })
            })
            .collect();
        for i in 0..10_000i64 {
            let records = 1 + (i % 3) as usize;
            let value_bytes = 20 + ((i * 37) % 150) as usize;
            log.append_as_leader(&simple(records, value_bytes, i), 0, 0)
                .unwrap();
            if i % 50 == 0 {
                log.delete_old_segments(0).unwrap();
            }
            if i % 7 == 0 {
                let leo = log.log_end_offset();
                log.truncate_to((leo - 1 - i % 4).max(0)).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    }

    fn idempotent(pid: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
        use crate::batch::builder::{batch, Spec};
        let values: Vec<&[u8]> = (0..count).map(|_| b"v".as_slice()).collect();
        batch(
            &Spec {
                producer_id: pid,
                producer_epoch: epoch,
                base_sequence: seq,
                ..Spec::default()
            },
            &values,
        )
    }

    #[test]
    fn leader_epochs_follow_appends_truncation_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        assert_eq!(log.latest_epoch(), None);
        assert_eq!(
            log.end_offset_for_epoch(0),
            EpochEndOffset {
                epoch: -1,
                end_offset: -1
            }
        );
        for epoch in [1, 1, 2, 2, 4] {
            log.append_as_leader(&simple(2, 10, 0), epoch, 0).unwrap();
        }
        assert_eq!(log.latest_epoch(), Some(4));
        assert_eq!(
            log.end_offset_for_epoch(1),
            EpochEndOffset {
                epoch: 1,
                end_offset: 4
            }
        );
        assert_eq!(
            log.end_offset_for_epoch(3),
            EpochEndOffset {
                epoch: 2,
                end_offset: 8
            }
        );
        assert_eq!(
            log.end_offset_for_epoch(4),
            EpochEndOffset {
                epoch: 4,
                end_offset: 10
            }
        );
        assert_eq!(log.epoch_for_offset(5), Some(2));
        let file = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(file, "0\n3\n1 0\n2 4\n4 8\n");
        log.truncate_to(8).unwrap();
        assert_eq!(log.latest_epoch(), Some(2));
        log.assign_epoch_start_offset(5, log.log_end_offset())
            .unwrap();
        assert_eq!(
            log.end_offset_for_epoch(2),
            EpochEndOffset {
                epoch: 2,
                end_offset: 8
            }
        );
        drop(log);
        // reopen: like Kafka, entries starting at or past the log end offset are dropped (a new
        // leader registers its epoch again when it takes over)
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        assert_eq!(log.latest_epoch(), Some(2));
        assert_eq!(
            log.end_offset_for_epoch(1),
            EpochEndOffset {
                epoch: 1,
                end_offset: 4
            }
        );
        // the file lost: recovery rebuilds it from the batches' partition leader epochs
        drop(log);
        std::fs::remove_file(dir.path().join("leader-epoch-checkpoint")).unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        assert_eq!(log.latest_epoch(), Some(2));
        assert_eq!(
            log.end_offset_for_epoch(1),
            EpochEndOffset {
                epoch: 1,
                end_offset: 4
            }
        );
        // retention moves the first entry up
        log.update_high_watermark(8);
        log.delete_records_before(5).unwrap();
        assert_eq!(
            log.end_offset_for_epoch(0),
            EpochEndOffset {
                epoch: 0,
                end_offset: 5
            }
        );
    }

    #[test]
    fn idempotent_producers_duplicates_sequences_and_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        let first = log.append_as_leader(&idempotent(7, 0, 0, 3), 0, 0).unwrap();
        assert_eq!(
            (first.first_offset, first.last_offset, first.duplicate),
            (0, 2, false)
        );
        log.append_as_leader(&simple(1, 10, 0), 0, 0).unwrap();
        log.append_as_leader(&idempotent(7, 0, 3, 2), 0, 0).unwrap();
        let retry = log.append_as_leader(&idempotent(7, 0, 0, 3), 0, 0).unwrap();
        assert_eq!(
            (retry.first_offset, retry.last_offset, retry.duplicate),
            (0, 2, true)
        );
        assert_eq!(log.log_end_offset(), 6);
        assert!(matches!(
            log.append_as_leader(&idempotent(7, 0, 9, 1), 0, 0),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        assert!(matches!(
            log.append_as_leader(&idempotent(7, 1, 5, 1), 0, 0),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        log.append_as_leader(&idempotent(7, 1, 0, 1), 0, 0).unwrap();
        assert_eq!(log.last_producer_epoch(7), Some(1));
        assert!(matches!(
            log.append_as_leader(&idempotent(7, 0, 5, 1), 0, 0),
            Err(StorageError::InvalidProducerEpoch(_))
        ));
        // two batches of one producer in one request are checked in order
        let mut two = idempotent(7, 1, 1, 1);
        two.extend_from_slice(&idempotent(7, 1, 2, 2));
        assert_eq!(log.append_as_leader(&two, 0, 0).unwrap().last_offset, 9);
        let leo = log.log_end_offset();
        drop(log);
        // unclean reopen without a snapshot: state rebuilt from batch headers
        let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
        assert_eq!(log.log_end_offset(), leo);
        assert_eq!(log.last_producer_epoch(7), Some(1));
        assert!(
            log.append_as_leader(&idempotent(7, 1, 2, 2), 0, 0)
                .unwrap()
                .duplicate
        );
        assert!(matches!(
            log.append_as_leader(&idempotent(7, 1, 7, 1), 0, 0),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        // truncation forgets the producer's later batches
        log.truncate_to(6).unwrap();
        assert_eq!(log.last_producer_epoch(7), Some(0));
        log.append_as_leader(&idempotent(7, 0, 5, 1), 0, 0).unwrap();
        log.close().unwrap();
        drop(log);
        assert!(std::fs::read_dir(dir.path()).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".snapshot")));
        let log = Log::open(dir.path(), small_config(), 7, true, 0).unwrap();
        assert!(matches!(
            log.append_as_leader(&idempotent(7, 0, 7, 1), 0, 0),
            Err(StorageError::OutOfOrderSequence(_))
        ));
        assert!(
            !log.append_as_leader(&idempotent(7, 0, 6, 1), 0, 0)
                .unwrap()
                .duplicate
        );
    }

    #[test]
    fn flush_messages_moves_the_recovery_point() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            flush_messages: 10,
            ..LogConfig::default()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
        log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
        assert_eq!(log.recovery_point(), 0);
        log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap(); // 12 unflushed >= 10
        assert_eq!(log.recovery_point(), 12);
    }

    #[test]
    fn rolls_when_an_index_is_full() {
        let dir = tempfile::tempdir().unwrap();
        // 3 offset-index entries (24 bytes) and 2 time-index entries; an entry every batch
        let config = LogConfig {
            segment_index_bytes: 24,
            index_interval_bytes: 1,
            ..LogConfig::default()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        for i in 0..10 {
            log.append_as_leader(&simple(1, 10, i), 0, 0).unwrap();
        }
        assert!(log.segment_count() >= 3, "{:?}", log.segment_base_offsets());
        log.verify_indexes().unwrap();
        for seg in log.segments().iter() {
            assert!(seg.size() > 0);
        }
    }

    #[test]
    fn a_read_waits_while_a_truncation_rewrites_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap());
        for i in 0..10 {
            log.append_as_leader(&simple(1, 10, i), 0, 0).unwrap();
        }
        // What truncate_to does first: take the writer lock, make the generation odd.
        let w = log.writer.lock();
        log.truncation_generation.fetch_add(1, Ordering::SeqCst);
        let reader = {
            let log = log.clone();
            std::thread::spawn(move || log.read(0, 1 << 20, i64::MAX, true).unwrap())
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !reader.is_finished(),
            "a read must not run during a truncation"
        );
        log.truncation_generation.fetch_add(1, Ordering::SeqCst);
        drop(w);
        let r = reader.join().unwrap();
        assert_eq!(BatchIter::new(&r.records).count(), 10);
    }
}
