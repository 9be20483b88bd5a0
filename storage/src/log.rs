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
//! `flush` fsyncs outside the writer lock so appends are not held up by the disk, and a roll
//! leaves the fsync of the segment it closed to the manager's background flusher
//! ([`crate::flusher`]).
//!
//! After an I/O error the log is offline: every later call fails with
//! [`StorageError::Offline`] and nothing more is written.
//!
//! The log does not know about replicas, the high watermark's meaning or the wire protocol; the
//! caller passes the time (`now_ms`) and, for retention, the high watermark.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::batch::{self, BatchHeader, EndTxnMarker, Validation, RECORD_BATCH_OVERHEAD};
use crate::config::{LogConfig, TimestampType};
use crate::epoch::LeaderEpochCache;
use crate::error::{IoContext, Result, StorageError};
use crate::flusher::{Flusher, RollFlush};
use crate::handles::HandlePool;
use crate::producer_state::{
    batch_last_sequence, LeaderAppendCheck, ProducerBatch, ProducerStateManager,
};
use crate::segment::{remove_segment_files, LogSegment, RecoveryOutcome};
use crate::txn_index::{AbortedTxn, TransactionIndex, TXN_INDEX_FILE_SUFFIX};

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

/// Where the batch holding an offset starts (Kafka's `LogOffsetMetadata`): its segment and
/// byte position. Valid until the log is truncated; [`Log::bytes_between`] says when it no
/// longer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPosition {
    pub offset: i64,
    pub segment_base_offset: i64,
    /// Bytes from the start of the segment to the first batch whose last offset is >= `offset`
    /// (the segment's size when `offset` is the segment's next offset).
    pub position: u64,
    truncation_generation: u64,
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
    /// Counts and bounds the segments' descriptors and index maps, shared with other logs.
    pool: Arc<HandlePool>,
    config: RwLock<LogConfig>,
    writer: Mutex<Writer>,
    segments: RwLock<SegmentList>,
    /// Changed under the writer lock; read briefly by anyone.
    epochs: Mutex<LeaderEpochCache>,
    /// Changed under the writer lock; read briefly by anyone.
    producers: Mutex<ProducerStateManager>,
    /// The transaction indexes of the segments holding aborted transactions. Changed under the
    /// writer lock; read briefly by read_committed fetches.
    txn_indexes: Mutex<TxnIndexes>,
    /// KIP-890: the producers whose next transaction on this partition the coordinator is
    /// being asked about, with the epoch asked for ([`Log::start_transaction_verification`]).
    /// Taken after the producer-state lock; a marker removes its producer's.
    verification_guards: Mutex<HashMap<i64, (i16, VerificationGuard)>>,
    /// False only while the producer state holds no open or unstable transaction, so that
    /// every read's last stable offset of a log without transactions takes no lock. Stored
    /// under the producer-state lock, after each change that may add a transaction and by
    /// [`Log::first_unstable_offset`] when it finds none.
    maybe_unstable: AtomicBool,
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
    recovery_point: AtomicI64,
    /// The cleaner checkpoint: offsets below it were cleaned (-1 when never cleaned). A
    /// truncation below it pulls it down, as Kafka's `maybeTruncateCheckpoint` does.
    cleaned_up_to: AtomicI64,
    /// Upper bound for retention and DeleteRecords (Kafka never deletes at or past the high
    /// watermark); `i64::MAX` until the caller sets one.
    high_watermark: AtomicI64,
    /// Odd while a truncation rewrites bytes in place; readers retry when it moved.
    truncation_generation: AtomicU64,
    /// Truncations only (a cleaning's swap moves `truncation_generation` but loses no byte
    /// above the recovery point): a flush that raced one does not move the recovery point.
    truncations: AtomicU64,
    /// Moved when a cleaning under way must stop (`cleanup.policy` no longer compact): a
    /// cleaning checks it between batches and before each swap (Kafka's `abortCleaning`).
    cleaning_aborts: AtomicU64,
    offline: AtomicBool,
    offline_reason: Mutex<String>,
    /// Set once the log was replaced by a copy in another log dir: it refuses every write
    /// (readers that already hold it still read), without counting as an I/O failure.
    retired: AtomicBool,
    /// Told once, when an I/O error takes this log offline: the log dir holding it and the
    /// error (the [`crate::LogManager`] installs it; a log opened on its own has none).
    failure_hook: OnceLock<(PathBuf, LogDirFailureHook)>,
    /// Where a roll sends the fsyncs of the segment it closed (the [`crate::LogManager`]
    /// installs it, with this log's own weak reference); without one a roll fsyncs inline.
    background: OnceLock<(Weak<Log>, Arc<Flusher>)>,
    /// Called after a truncation moved the recovery point: writes the log dir's
    /// recovery-point checkpoint (the [`crate::LogManager`] installs it).
    truncation_hook: OnceLock<TruncationHook>,
}

/// Writes the recovery points of a log's dir after a truncation (Kafka's `LogManager.truncateTo`
/// checkpoints them at once: a checkpointed recovery point above the truncated log end would,
/// after a power loss, skip the CRC recovery of batches written there since).
pub type TruncationHook = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// Called with a log dir and the error when a log in that dir goes offline after an I/O error
/// (Kafka's `LogDirFailureChannel#maybeAddOfflineLogDir`). It runs on the failing call's
/// thread, possibly under a partition's lock: it must only record and wake, never block.
pub type LogDirFailureHook = Arc<dyn Fn(&Path, &str) + Send + Sync>;

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
    ///
    /// The segments' descriptors and maps count against the process-wide default pool; see
    /// [`Log::open_in`].
    pub fn open(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        had_clean_shutdown: bool,
        now_ms: i64,
    ) -> Result<Log> {
        Self::open_in(
            &HandlePool::shared_default(),
            dir,
            config,
            recovery_point,
            had_clean_shutdown,
            now_ms,
        )
    }

    /// [`Log::open`] with the segments' descriptors and maps counted by `pool`. Opening maps
    /// no index and holds a descriptor only for segments it had to read.
    pub fn open_in(
        pool: &Arc<HandlePool>,
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        had_clean_shutdown: bool,
        now_ms: i64,
    ) -> Result<Log> {
        std::fs::create_dir_all(dir).at(dir)?;
        let swapped = cleaning::recover_swaps(dir)?;
        let mut bases = Vec::new();
        let mut txn_index_bases = Vec::new();
        for entry in std::fs::read_dir(dir).at(dir)? {
            let entry = entry.at(dir)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Some(base) = parse_segment_base(name) {
                bases.push(base);
            } else if let Some(base) = parse_txn_index_base(name) {
                txn_index_bases.push(base);
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
            let seg = LogSegment::open(dir, base, index_bytes, now_ms, pool)?;
            let must_recover = recovered_from.is_some()
                || swapped.contains(&base)
                || (!had_clean_shutdown && i >= first_unflushed)
                || !seg.load_clean(interval)?;
            let mut truncated = false;
            if must_recover {
                // Kafka's `LogSegment#recover`: a batch registers its epoch only when it is
                // newer than the cache's latest. Recovery may start mid-log, after the entries
                // of the epochs it replays; `assign` of an older epoch would drop them and
                // move where those epochs start (a follower would then find no divergence).
                let mut on_batch = |h: &BatchHeader| {
                    let newer = epochs
                        .latest_epoch()
                        .is_none_or(|latest| h.partition_leader_epoch > latest);
                    if h.partition_leader_epoch >= 0 && newer && epoch_error.is_none() {
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
                    remove_segment_files(dir, later)?;
                }
                break;
            }
            segments.push(Arc::new(seg));
            if truncated {
                for &later in &bases[i + 1..] {
                    tracing::warn!(dir = %dir.display(), segment = later, "deleting segment after a truncated one");
                    remove_segment_files(dir, later)?;
                }
                break;
            }
        }
        if segments.is_empty() {
            segments.push(Arc::new(LogSegment::create(
                dir,
                0,
                index_bytes,
                now_ms,
                pool,
            )?));
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
        let mut txn_indexes = TxnIndexes::load(dir, &segments, &txn_index_bases)?;
        let mut producers = ProducerStateManager::new(dir, config.producer_id_expiration_ms)?;
        producers.truncate_and_reload(log_start_offset, log_end_offset, now_ms)?;
        // Recovered segments get their transaction indexes rebuilt from their markers, by a
        // replay from a producer state at or below the first of them.
        let rebuild_from = recovered_from.map(|r| segments[r].base_offset());
        if let Some(from) = rebuild_from {
            txn_indexes.reset_from(from)?;
            if producers.map_end_offset() > from {
                producers.reload_at_or_below(log_start_offset, from, now_ms)?;
            }
        }
        let rebuild = rebuild_from.map(|from| (from, &mut txn_indexes));
        replay_producer_state(dir, &segments, &mut producers, log_end_offset, rebuild)?;
        let maybe_unstable = producers.first_unstable_offset().is_some();
        sync_dir(dir)?;
        Ok(Log {
            dir: dir.to_owned(),
            pool: pool.clone(),
            config: RwLock::new(config),
            writer: Mutex::new(Writer {
                last_flush_ms: now_ms,
                last_now_ms: now_ms,
            }),
            segments: RwLock::new(Arc::new(segments)),
            epochs: Mutex::new(epochs),
            producers: Mutex::new(producers),
            txn_indexes: Mutex::new(txn_indexes),
            verification_guards: Mutex::new(HashMap::new()),
            maybe_unstable: AtomicBool::new(maybe_unstable),
            log_start_offset: AtomicI64::new(log_start_offset),
            log_end_offset: AtomicI64::new(log_end_offset),
            recovery_point: AtomicI64::new(recovery_point),
            cleaned_up_to: AtomicI64::new(-1),
            high_watermark: AtomicI64::new(i64::MAX),
            truncation_generation: AtomicU64::new(0),
            truncations: AtomicU64::new(0),
            cleaning_aborts: AtomicU64::new(0),
            offline: AtomicBool::new(false),
            offline_reason: Mutex::new(String::new()),
            retired: AtomicBool::new(false),
            failure_hook: OnceLock::new(),
            background: OnceLock::new(),
            truncation_hook: OnceLock::new(),
        })
    }

    /// Installs the hook told when this log goes offline; `log_dir` is the dir holding it.
    /// The first installed hook stays.
    pub(crate) fn set_failure_hook(&self, log_dir: PathBuf, hook: LogDirFailureHook) {
        let _ = self.failure_hook.set((log_dir, hook));
    }

    /// Installs the hook called after a truncation moved the recovery point. The first stays.
    pub(crate) fn set_truncation_hook(&self, hook: TruncationHook) {
        let _ = self.truncation_hook.set(hook);
    }

    /// Runs the truncation hook if the recovery point is no longer `before`.
    /// Tells the hook (which checkpoints the dir) when a truncation moved the recovery point or
    /// the cleaner checkpoint (`before`: both, as they were).
    fn after_truncation(&self, before: (i64, i64)) -> Result<()> {
        match self.truncation_hook.get() {
            Some(hook) if (self.recovery_point(), self.cleaned_up_to()) != before => hook(),
            _ => Ok(()),
        }
    }

    /// Rolls from now on leave their fsyncs to `flusher`. The first installed flusher stays.
    pub(crate) fn set_flusher(self: &Arc<Self>, flusher: Arc<Flusher>) {
        let _ = self.background.set((Arc::downgrade(self), flusher));
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> LogConfig {
        self.config.read().clone()
    }
    /// New settings apply from the next append/roll/retention pass; index sizes from the next
    /// segment.
    /// Turning `compact` off aborts a cleaning under way: once this returns, it swaps nothing
    /// more in (a swap in progress holds the writer lock, which this waits for).
    pub fn update_config(&self, config: LogConfig) {
        self.producers
            .lock()
            .set_producer_id_expiration_ms(config.producer_id_expiration_ms);
        let stops_compaction = {
            let mut current = self.config.write();
            let stops = current.compact && !config.compact;
            *current = config;
            stops
        };
        if stops_compaction {
            // A log that takes no writes takes no swap either: no lock needed then.
            let _w = self.lock_writer();
            self.cleaning_aborts.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.load(Ordering::Acquire)
    }
    /// The cleaner checkpoint: where the last cleaning ended (-1 when never cleaned).
    pub fn cleaned_up_to(&self) -> i64 {
        self.cleaned_up_to.load(Ordering::Acquire)
    }
    /// Sets the cleaner checkpoint read at startup.
    pub fn set_cleaned_up_to(&self, offset: i64) {
        self.cleaned_up_to.store(offset, Ordering::Release);
    }
    /// The high watermark the caller last set (`i64::MAX` when none).
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
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
        self.producers
            .lock()
            .on_high_watermark_updated(high_watermark);
    }

    /// Kafka's `firstUnstableOffset`: the first offset of the earliest transaction that is open
    /// or whose marker the high watermark has not passed, never below the log start offset.
    /// Without a high watermark set (a log used on its own) the log end offset stands in for it.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        if !self.maybe_unstable.load(Ordering::Acquire) {
            return None;
        }
        let high_watermark = self
            .high_watermark
            .load(Ordering::Acquire)
            .min(self.log_end_offset());
        let mut producers = self.producers.lock();
        producers.on_high_watermark_updated(high_watermark);
        let first = producers.first_unstable_offset();
        self.maybe_unstable
            .store(first.is_some(), Ordering::Release);
        Some(first?.max(self.log_start_offset()))
    }

    /// Kafka's `lastStableOffset`: the high watermark, or the first unstable offset when that
    /// is lower. A read_committed consumer reads below it. Without a high watermark set (a log
    /// used on its own) the log end offset stands in for it.
    pub fn last_stable_offset(&self) -> i64 {
        let high_watermark = self
            .high_watermark
            .load(Ordering::Acquire)
            .min(self.log_end_offset());
        self.first_unstable_offset()
            .map_or(high_watermark, |first| first.min(high_watermark))
    }

    /// The open transactions: (first offset, producer id), oldest first.
    pub fn ongoing_transactions(&self) -> Vec<(i64, i64)> {
        self.producers.lock().ongoing_txns().collect()
    }

    /// Kafka's `collectAbortedTransactions`: the aborted transactions that overlap
    /// `[start_offset, upper_bound_offset)`, from the transaction indexes of the segment holding
    /// `start_offset` onwards, stopping at the first entry whose last stable offset reaches the
    /// upper bound.
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Vec<AbortedTxn> {
        let segments = self.segments();
        let holder = segments
            .partition_point(|s| s.base_offset() <= start_offset)
            .saturating_sub(1);
        let from = segments[holder].base_offset();
        self.txn_indexes
            .lock()
            .collect(from, start_offset, upper_bound_offset)
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
                drop(reason);
                if let Some((log_dir, hook)) = self.failure_hook.get() {
                    hook(log_dir, &e.to_string());
                }
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
        self.check_writable()?;
        let w = self.writer.lock();
        self.check_writable()?;
        Ok(w)
    }

    fn check_writable(&self) -> Result<()> {
        self.check_online()?;
        if self.retired.load(Ordering::Acquire) {
            return Err(StorageError::Offline(
                "the log was replaced by its copy in another log dir".into(),
            ));
        }
        Ok(())
    }

    /// Refuses every later write, after the one in progress: the log was replaced by its copy
    /// in another log dir ([`crate::LogManager::replace_current_with_future`]). Reads keep
    /// working on the files already open, so a fetch that took the log before the swap ends
    /// normally.
    pub(crate) fn retire(&self) {
        let _w = self.writer.lock();
        self.retired.store(true, Ordering::Release);
        // Its files are renamed away next: readers keep what is pinned now.
        for seg in self.segments().iter() {
            seg.try_pin_files();
        }
    }

    /// The pool counting this log's descriptors and maps.
    pub fn handle_pool(&self) -> &Arc<HandlePool> {
        &self.pool
    }

    /// The leader epoch cache's entries, oldest first: (epoch, start offset).
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        self.epochs
            .lock()
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    // ---------------------------------------------------------------- writes

    /// Checks each record of a produce request's batches as Kafka's `LogValidator` does (see
    /// [`batch::check_records`]): on a compacted log every record has a key; on a CreateTime
    /// log every timestamp lies within `message.timestamp.before.max.ms` /
    /// `message.timestamp.after.max.ms` of `now_ms`. Returns each batch's max timestamp as its
    /// header must be stored. The first batch with refused records fails the append, naming
    /// each (its index in the batch), and nothing is written: INVALID_TIMESTAMP if any
    /// timestamp is refused, INVALID_RECORD otherwise.
    ///
    /// On a LogAppendTime log the records are read for their structure only: every timestamp
    /// is replaced, and a producer's own LogAppendTime is refused from the header before this.
    fn check_records(
        &self,
        records: &[u8],
        batches: &[BatchHeader],
        config: &LogConfig,
        now_ms: i64,
    ) -> Result<Vec<batch::MaxTimestamp>> {
        let rules = batch::RecordRules {
            require_key: config.compact,
            timestamp_range: (config.message_timestamp_type == TimestampType::CreateTime).then(
                || {
                    (
                        now_ms.saturating_sub(config.message_timestamp_before_max_ms),
                        now_ms.saturating_add(config.message_timestamp_after_max_ms),
                    )
                },
            ),
        };
        let mut position = 0usize;
        let mut max_timestamps = Vec::with_capacity(batches.len());
        for h in batches {
            let b = &records[position..position + h.size_in_bytes()];
            position += h.size_in_bytes();
            let checked = batch::check_records(b, &rules)?;
            if checked.refused_total > 0 {
                return Err(self.refusal(&checked, &rules));
            }
            max_timestamps.push(match rules.timestamp_range {
                Some(_) => batch::MaxTimestamp::CreateTime(checked.max_timestamp),
                None => batch::MaxTimestamp::LogAppendTime(now_ms),
            });
        }
        Ok(max_timestamps)
    }

    /// Kafka's `RecordValidationException` for the refused records of one batch.
    fn refusal(&self, checked: &batch::CheckedRecords, rules: &batch::RecordRules) -> StorageError {
        // Kafka names the partition as `TopicPartition.toString`: the directory's name.
        let tp = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let record_errors: Vec<(i32, String)> = checked
            .refused
            .iter()
            .map(|r| (r.index, refusal_message(r.why, &tp, rules)))
            .collect();
        let shown: Vec<String> = record_errors
            .iter()
            .take(3)
            .map(|(index, message)| format!("RecordError(batchIndex={index}, message='{message}')"))
            .collect();
        // Kafka's `LogValidator.processRecordErrors` words the two cases differently.
        let message = if checked.timestamp_refused {
            "One or more records have been rejected due to invalid timestamp".to_owned()
        } else {
            format!(
                "One or more records have been rejected due to {} record errors in total, and only showing the first three errors at most: [{}]",
                checked.refused_total,
                shown.join(", ")
            )
        };
        StorageError::RecordErrors {
            message,
            record_errors,
            invalid_timestamp: checked.timestamp_refused,
        }
    }

    pub fn append_as_leader(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        self.append_as_leader_checked(records, leader_epoch, now_ms, TxnVerification::Unchecked)
    }

    /// KIP-890, before a transactional produce: `None` if the producer's transaction at
    /// `producer_epoch` is already open on this partition (nothing to verify), else a new guard
    /// that the append must show once the coordinator has confirmed the partition is in the
    /// transaction. A marker in between voids the guard (Kafka's `VerificationGuard`), so a
    /// transaction that ended while the coordinator was asked is not reopened.
    pub fn start_transaction_verification(
        &self,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Option<VerificationGuard> {
        let producers = self.producers.lock();
        if transaction_open(&producers, producer_id, producer_epoch) {
            return None;
        }
        let guard = VerificationGuard::new();
        self.verification_guards
            .lock()
            .insert(producer_id, (producer_epoch, guard));
        Some(guard)
    }

    /// [`Log::append_as_leader`] of a client's batches, with KIP-890's check
    /// ([`TxnVerification`]).
    pub fn append_as_leader_checked(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
        verification: TxnVerification,
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
        let max_timestamps = self.check_records(records, &valid, &config, now_ms)?;
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
        let markers = markers_of(records, &valid)?;
        for ((h, &max_timestamp), marker) in valid.iter().zip(&max_timestamps).zip(&markers) {
            if h.has_producer_id() && h.is_control() {
                producers.validate_end_txn_marker(
                    h.producer_id,
                    h.producer_epoch,
                    marker.map(|m| m.coordinator_epoch),
                )?;
            } else if h.has_producer_id() {
                if h.is_transactional() {
                    if let TxnVerification::Verified(guard) = verification {
                        let open = transaction_open(&producers, h.producer_id, h.producer_epoch)
                            || pending.staged_transactional(h.producer_id);
                        let guarded = guard.is_some_and(|g| {
                            self.verification_guards.lock().get(&h.producer_id)
                                == Some(&(h.producer_epoch, g))
                        });
                        if !open && !guarded {
                            return Err(StorageError::InvalidTxnState(format!(
                                "producer {} wrote to a partition of no ongoing transaction \
                                 (it ended while the partition was verified, or it was never added)",
                                h.producer_id
                            )));
                        }
                    }
                }
                let last_sequence = batch_last_sequence(h.base_sequence, h.last_offset_delta);
                let check = pending.validate_leader_batch(
                    h.producer_id,
                    h.producer_epoch,
                    (h.base_sequence, last_sequence),
                    h.is_transactional(),
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
            let header = batch::leader_header(b, next, leader_epoch, max_timestamp);
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
        let info = self.append_locked(w, &parts, &stamped, &markers, log_append_time, now_ms)?;
        // A marker ends its producer's transaction: a verification begun before it is void.
        for h in stamped
            .iter()
            .filter(|h| h.is_control() && h.has_producer_id())
        {
            self.verification_guards.lock().remove(&h.producer_id);
        }
        self.maybe_flush_by_messages()?;
        Ok(info)
    }

    /// Writes a transaction marker for `producer_id` as leader (what the transaction
    /// coordinator's WriteTxnMarkers asks of a partition leader): one control batch stamped
    /// `now_ms`. A marker of an epoch below the producer's is INVALID_PRODUCER_EPOCH, one from a
    /// coordinator epoch below that of the producer's last marker TRANSACTION_COORDINATOR_FENCED.
    pub fn append_end_txn_marker_as_leader(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo> {
        let batch =
            batch::end_txn_marker_batch(producer_id, producer_epoch, leader_epoch, now_ms, marker);
        self.append_as_leader(&batch, leader_epoch, now_ms)
    }

    /// Appends a leader's batches as they are (offsets and epochs kept). Each batch must start
    /// at or after the log end offset, or where the previous one ended: a compacted leader's
    /// log has gaps, which the copy keeps (Kafka refuses only offsets that go back).
    pub fn append_as_follower(&self, records: &[u8]) -> Result<LogAppendInfo> {
        self.check_online()?;
        let (headers, used) = batch::validate_batches(records, Validation::Follower)?;
        let w = self.lock_writer()?;
        let mut expected = self.log_end_offset();
        for h in &headers {
            if h.base_offset < expected {
                return Err(StorageError::NonMonotonicAppend(format!(
                    "batch at offset {} but the log is already at {expected} (last offset {})",
                    h.base_offset,
                    h.last_offset()
                )));
            }
            expected = h.next_offset();
        }
        let markers = markers_of(records, &headers)?;
        let info = self.append_locked(w, &[&records[..used]], &headers, &markers, -1, 0)?;
        self.maybe_flush_by_messages()?;
        Ok(info)
    }

    fn append_locked(
        &self,
        w: MutexGuard<'_, Writer>,
        parts: &[&[u8]],
        headers: &[BatchHeader],
        markers: &[Option<EndTxnMarker>],
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
                (first.base_offset, last.last_offset()),
                now_ms,
            )?;
            active.append(parts, headers, config.index_interval_bytes as usize)
        })();
        self.guard(result)?;
        self.log_end_offset
            .store(last.next_offset(), Ordering::Release);
        let r = self.after_append(headers, markers);
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

    /// Registers the appended batches with the epoch cache and the producer state, and indexes
    /// the transactions their ABORT markers closed. `markers` holds, for each control batch,
    /// its marker (None for other batches).
    fn after_append(
        &self,
        headers: &[BatchHeader],
        markers: &[Option<EndTxnMarker>],
    ) -> Result<()> {
        {
            let mut epochs = self.epochs.lock();
            for h in headers {
                if h.partition_leader_epoch >= 0 {
                    epochs.assign(h.partition_leader_epoch, h.base_offset)?;
                }
            }
        }
        let mut producers = self.producers.lock();
        let mut txn_indexes = None;
        for (h, marker) in headers.iter().zip(markers) {
            apply_batch(&mut producers, h, *marker, &mut |txn| {
                let indexes = txn_indexes.get_or_insert_with(|| self.txn_indexes.lock());
                indexes.append(&self.dir, &self.segments(), txn)
            })?;
        }
        producers.update_map_end_offset(self.log_end_offset());
        if producers.first_unstable_offset().is_some() {
            self.maybe_unstable.store(true, Ordering::Release);
        }
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
        (first_offset, max_offset): (i64, i64),
        now_ms: i64,
    ) -> Result<Arc<LogSegment>> {
        let active = self.active();
        let size = active.size();
        // The offset check holds for an empty segment too: a follower copying a compacted
        // leader's log may jump more than 2^31 offsets; the new segment then starts at the
        // batch's first offset (Kafka's `maybeRoll`).
        let should_roll = (size > 0
            && (size + messages_bytes as u64 > config.segment_bytes as u64
                || active.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                    > config.segment_ms
                || active.indexes_full()))
            || !active.can_convert_to_relative_offset(max_offset);
        if should_roll {
            return self.roll_locked(w, now_ms, first_offset);
        }
        Ok(active)
    }

    /// Rolls a new segment at the log end offset, or at `at_least` when that is beyond it.
    fn roll_locked(
        &self,
        _w: &MutexGuard<'_, Writer>,
        now_ms: i64,
        at_least: i64,
    ) -> Result<Arc<LogSegment>> {
        let active = self.active();
        let new_base = self.log_end_offset().max(at_least);
        if active.size() == 0 && active.base_offset() == new_base {
            return Ok(active);
        }
        active.on_become_inactive()?;
        let config = self.config();
        let segment = Arc::new(LogSegment::create(
            &self.dir,
            new_base,
            config.segment_index_bytes as usize,
            now_ms,
            &self.pool,
        )?);
        let mut list: Vec<Arc<LogSegment>> = self.segments().as_ref().clone();
        list.push(segment.clone());
        self.set_segments(list);
        // Kafka snapshots the producer state at every new segment so a restart replays little.
        let snapshot = self.producers.lock().take_snapshot_unsynced()?;
        tracing::debug!(dir = %self.dir.display(), base_offset = new_base, "rolled a new segment");
        // Nothing is fsynced yet: the recovery point moves to the new base once it is.
        match self.background.get() {
            Some((me, flusher)) => flusher.submit(RollFlush {
                log: me.clone(),
                upto: new_base,
                snapshot,
            }),
            None => {
                let segments = self.segments();
                if self.fsync_rolled(&segments, new_base, snapshot.as_deref())? {
                    self.recovery_point.fetch_max(new_base, Ordering::AcqRel);
                }
            }
        }
        Ok(segment)
    }

    /// Starts a new segment at the log end offset (unless the active one is empty).
    pub fn roll(&self, now_ms: i64) -> Result<()> {
        let mut w = self.lock_writer()?;
        w.last_now_ms = now_ms;
        let r = self.roll_locked(&w, now_ms, i64::MIN).map(|_| ());
        self.guard(r)
    }

    /// Kafka's follower truncation: removes every batch whose last offset is >= `offset`. Later
    /// segments are deleted and the one holding `offset` is cut at a batch boundary. Below the
    /// log start offset this empties the log and restarts it at `offset`.
    ///
    /// At or past the log end offset no batch goes, but the epoch cache still drops entries
    /// starting at or past the log end (Kafka's `UnifiedLog#truncateTo`): a node that became
    /// leader, registered `(epoch, LEO)` and lost leadership before writing anything must not
    /// keep claiming that epoch, or its fetches would diverge from the new leader forever.
    pub fn truncate_to(&self, offset: i64) -> Result<()> {
        let before = (self.recovery_point(), self.cleaned_up_to());
        self.truncate_batches_to(offset)?;
        self.after_truncation(before)
    }

    fn truncate_batches_to(&self, offset: i64) -> Result<()> {
        let w = self.lock_writer()?;
        self.check_not_negative(offset)?;
        if offset >= self.log_end_offset() {
            let r = self
                .epochs
                .lock()
                .truncate_from_end(self.log_end_offset())
                .map(|_| ())
                .map_err(StorageError::from);
            drop(w);
            return self.guard(r);
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
        self.truncations.fetch_add(1, Ordering::SeqCst);
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
            self.txn_indexes.lock().truncate_to(leo)?;
            self.log_end_offset.store(leo, Ordering::Release);
            self.recovery_point.fetch_min(leo, Ordering::AcqRel);
            self.cleaned_up_to.fetch_min(leo, Ordering::AcqRel);
            self.epochs.lock().truncate_from_end(leo)?;
            let mut producers = self.producers.lock();
            producers.delete_snapshots_after(leo)?;
            producers.truncate_and_reload(self.log_start_offset(), leo, w.last_now_ms)?;
            replay_producer_state(&self.dir, &self.segments(), &mut producers, leo, None)?;
            self.maybe_unstable.store(
                producers.first_unstable_offset().is_some(),
                Ordering::Release,
            );
            Ok(())
        })();
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        self.truncations.fetch_add(1, Ordering::SeqCst);
        drop(w);
        self.guard(r)
    }

    /// Deletes every segment and restarts the log, empty, at `offset` (a follower whose leader
    /// no longer has the offsets it needs).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        let before = (self.recovery_point(), self.cleaned_up_to());
        let w = self.lock_writer()?;
        self.check_not_negative(offset)?;
        let r = self.truncate_fully_locked(&w, offset);
        drop(w);
        self.guard(r)?;
        self.after_truncation(before)
    }

    fn truncate_fully_locked(&self, _w: &MutexGuard<'_, Writer>, offset: i64) -> Result<()> {
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        self.truncations.fetch_add(1, Ordering::SeqCst);
        let r = (|| {
            let config = self.config();
            let old = self.segments();
            for s in old.iter() {
                s.delete_files()?;
            }
            let seg = LogSegment::create(
                &self.dir,
                offset,
                config.segment_index_bytes as usize,
                0,
                &self.pool,
            )?;
            sync_dir(&self.dir)?;
            self.set_segments(vec![Arc::new(seg)]);
            self.log_start_offset.store(offset, Ordering::Release);
            self.log_end_offset.store(offset, Ordering::Release);
            self.recovery_point.store(offset, Ordering::Release);
            self.cleaned_up_to.store(-1, Ordering::Release);
            self.epochs.lock().clear()?;
            self.producers.lock().truncate_fully_and_start_at(offset)?;
            self.txn_indexes.lock().clear();
            Ok(())
        })();
        self.truncation_generation.fetch_add(1, Ordering::SeqCst);
        self.truncations.fetch_add(1, Ordering::SeqCst);
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
            self.roll_locked(w, now_ms, i64::MIN)?;
        }
        let all = self.segments();
        let (gone, keep) = all.split_at(count);
        let new_start = keep[0].base_offset();
        self.set_segments(keep.to_vec());
        self.log_start_offset.fetch_max(new_start, Ordering::AcqRel);
        for seg in gone {
            seg.delete_files()?;
            self.txn_indexes.lock().forget(seg.base_offset());
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
                self.truncations.load(Ordering::SeqCst),
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
        if self.truncations.load(Ordering::SeqCst) == generation {
            self.recovery_point
                .fetch_max(target.min(self.log_end_offset()), Ordering::AcqRel);
        }
        Ok(())
    }

    /// The fsyncs a roll at `upto` left: every segment below `upto` not known durable (data and
    /// indexes), the log's directory (the new segment's names), the producer snapshot written
    /// at the roll; then the recovery point moves to `upto`, unless a truncation came between.
    /// A file removed meanwhile (retention, truncation, deletion of the log) needs no fsync.
    pub(crate) fn flush_rolled(&self, upto: i64, snapshot: Option<&Path>) -> Result<()> {
        let (segments, generation) = {
            let _w = self.lock_writer()?;
            (self.segments(), self.truncations.load(Ordering::SeqCst))
        };
        if !self.fsync_rolled(&segments, upto, snapshot)? {
            return Ok(());
        }
        let _w = self.writer.lock();
        if self.truncations.load(Ordering::SeqCst) == generation {
            self.recovery_point
                .fetch_max(upto.min(self.log_end_offset()), Ordering::AcqRel);
        }
        Ok(())
    }

    /// The fsyncs of [`Self::flush_rolled`]; false when a file was gone.
    fn fsync_rolled(
        &self,
        segments: &[Arc<LogSegment>],
        upto: i64,
        snapshot: Option<&Path>,
    ) -> Result<bool> {
        let recovery_point = self.recovery_point();
        let r = (|| {
            for (i, seg) in segments.iter().enumerate() {
                let upper = segments.get(i + 1).map_or(i64::MAX, |n| n.base_offset());
                if seg.base_offset() >= upto {
                    break;
                }
                if upper > recovery_point {
                    seg.flush()?;
                }
            }
            sync_dir(&self.dir)?;
            if let Some(path) = snapshot {
                std::fs::File::open(path)
                    .and_then(|f| f.sync_all())
                    .at(path)?;
            }
            Ok(())
        })();
        match r {
            Err(StorageError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                tracing::debug!(dir = %self.dir.display(), upto, "rolled files gone before their flush");
                Ok(false)
            }
            r => self.guard(r).map(|()| true),
        }
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

    /// The producers the log holds state for (DescribeProducers), by producer id.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let mut producers: Vec<ActiveProducer> = self
            .producers
            .lock()
            .producers()
            .map(|e| ActiveProducer {
                producer_id: e.producer_id,
                producer_epoch: e.producer_epoch,
                last_sequence: e.last_sequence(),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
            })
            .collect();
        producers.sort_by_key(|p| p.producer_id);
        producers
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

    /// DeleteTopics: takes the log offline and renames its directory to `dest` (a `-delete`
    /// name in the same log dir), fsyncing the log dir, so that from here on no open finds the
    /// log whatever becomes of the removal ([`crate::LogManager::delete`] queues it). A log
    /// offline after an I/O error is renamed the same way; one whose directory is already gone
    /// has nothing to rename.
    pub(crate) fn rename_for_deletion(&self, dest: &Path) -> Result<bool> {
        let _w = self.writer.lock();
        *self.offline_reason.lock() = "the log was deleted".into();
        self.offline.store(true, Ordering::Release);
        match std::fs::rename(&self.dir, dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(StorageError::io(&self.dir, e)),
        }
        if let Some(parent) = dest.parent() {
            sync_dir(parent)?;
        }
        Ok(true)
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

    /// The position of the batch holding `offset`, found through the offset index and batch
    /// headers only. `Err(OffsetOutOfRange)` outside `[log start offset, log end offset]`.
    pub fn position_of(&self, offset: i64) -> Result<LogPosition> {
        loop {
            self.check_online()?;
            let generation = self.truncation_generation.load(Ordering::SeqCst);
            if generation % 2 == 1 {
                drop(self.writer.lock());
                continue;
            }
            let (log_start_offset, log_end_offset) =
                (self.log_start_offset(), self.log_end_offset());
            if offset < log_start_offset || offset > log_end_offset {
                return Err(StorageError::OffsetOutOfRange {
                    offset,
                    log_start_offset,
                    log_end_offset,
                });
            }
            let segments = self.segments();
            let result = Self::locate(&segments, offset);
            if self.truncation_generation.load(Ordering::SeqCst) != generation {
                continue;
            }
            let (segment_base_offset, position) = self.guard(result)?;
            return Ok(LogPosition {
                offset,
                segment_base_offset,
                position,
                truncation_generation: generation,
            });
        }
    }

    /// (segment base offset, byte position) of the batch holding `offset`.
    fn locate(segments: &[Arc<LogSegment>], offset: i64) -> Result<(i64, u64)> {
        let holder = &segments[segments
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1)];
        let size = holder.size();
        let position = holder
            .find_batch(offset, size)?
            .map_or(size, |(position, _)| position);
        Ok((holder.base_offset(), position))
    }

    /// Bytes of the whole batches from `start` up to the batch holding `end_offset` (the log end
    /// offset when beyond it), without reading them: what a parked fetch checks against its
    /// `min_bytes` on every wake-up (Kafka's `DelayedFetch#tryComplete`). Counting up to the log
    /// end offset costs no I/O; up to another offset, one index lookup and one read of batch
    /// headers. `None` when `start` is no longer valid — the log was truncated or its segment
    /// deleted since — so the caller reads to find out what happened.
    pub fn bytes_between(&self, start: &LogPosition, end_offset: i64) -> Result<Option<u64>> {
        self.check_online()?;
        let generation = self.truncation_generation.load(Ordering::SeqCst);
        if generation != start.truncation_generation {
            return Ok(None);
        }
        let segments = self.segments();
        let Ok(first) =
            segments.binary_search_by_key(&start.segment_base_offset, |s| s.base_offset())
        else {
            return Ok(None);
        };
        let end = if end_offset >= self.log_end_offset() {
            let active = segments.last().expect("a log always has a segment");
            Ok((active.base_offset(), active.size()))
        } else if end_offset <= start.offset {
            return Ok(Some(0));
        } else {
            Self::locate(&segments, end_offset)
        };
        if self.truncation_generation.load(Ordering::SeqCst) != generation {
            return Ok(None);
        }
        let (end_segment, end_position) = self.guard(end)?;
        let mut bytes = 0u64;
        let mut from = start.position;
        for seg in &segments[first..] {
            if seg.base_offset() == end_segment {
                return Ok(Some(bytes + end_position.saturating_sub(from)));
            }
            bytes += seg.size().saturating_sub(from);
            from = 0;
        }
        Ok(Some(bytes))
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
                let position = seg.time_lookup_position(timestamp)?;
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
        last_sequence: batch_last_sequence(h.base_sequence, h.last_offset_delta),
        first_offset: h.base_offset,
        last_offset: h.last_offset(),
        max_timestamp: h.max_timestamp,
        is_transactional: h.is_transactional(),
    }
}

/// Applies one batch of the log to the producer state: a data batch through `update`, a
/// transaction marker through `append_end_txn_marker`, handing an aborted transaction it closed
/// to `index_aborted` before completing it (Kafka's `UnifiedLog#updateProducers` and
/// `LogSegment#updateProducerState`).
fn apply_batch(
    producers: &mut ProducerStateManager,
    h: &BatchHeader,
    marker: Option<EndTxnMarker>,
    index_aborted: &mut dyn FnMut(AbortedTxn) -> Result<()>,
) -> Result<()> {
    if !h.has_producer_id() {
        return Ok(());
    }
    if !h.is_control() {
        producers.update(&producer_batch(h));
        return Ok(());
    }
    let Some(marker) = marker else {
        return Ok(());
    };
    let completed = producers.append_end_txn_marker(
        h.producer_id,
        h.producer_epoch,
        marker,
        h.base_offset,
        h.max_timestamp,
    );
    if let Some(completed) = completed {
        if completed.is_aborted {
            index_aborted(AbortedTxn {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: completed.last_offset,
                last_stable_offset: producers.last_stable_offset(&completed),
            })?;
        }
        producers.complete_txn(completed);
    }
    Ok(())
}

/// For each of `headers` (batches at their positions in `records`), the marker of a control
/// batch, None for others.
fn markers_of(records: &[u8], headers: &[BatchHeader]) -> Result<Vec<Option<EndTxnMarker>>> {
    let mut markers = Vec::with_capacity(headers.len());
    let mut position = 0usize;
    for h in headers {
        let size = h.size_in_bytes();
        markers.push(if h.is_control() {
            batch::end_txn_marker(&records[position..position + size])?
        } else {
            None
        });
        position += size;
    }
    Ok(markers)
}

/// Whether `producer_id` has a transaction open on the log at `producer_epoch` (Kafka's
/// `hasOngoingTransaction`): its batches need no verification.
fn transaction_open(
    producers: &ProducerStateManager,
    producer_id: i64,
    producer_epoch: i16,
) -> bool {
    producers
        .last_entry(producer_id)
        .is_some_and(|e| e.producer_epoch == producer_epoch && e.current_txn_first_offset.is_some())
}

/// KIP-890's proof that the transaction coordinator was asked about a producer's transaction
/// on a partition (Kafka's `VerificationGuard`): unique per verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

impl VerificationGuard {
    fn new() -> VerificationGuard {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        VerificationGuard(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// What a leader append knows of its transactional batches' verification (KIP-890).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnVerification {
    /// No check: the coordinators' own appends, and clients with verification off.
    Unchecked,
    /// The client's batches were verified: a transactional batch is appended only into its
    /// producer's open transaction, or with the guard of a verification no marker voided since
    /// (`None`: the transaction was open when the produce began).
    Verified(Option<VerificationGuard>),
}

/// The transaction indexes of a log's segments that hold entries, by segment base offset.
#[derive(Debug, Default)]
struct TxnIndexes(std::collections::BTreeMap<i64, TransactionIndex>);

impl TxnIndexes {
    /// The indexes of `segments` among the `.txnindex` files found (`bases`); files that match no
    /// segment (left by an interrupted cleaning or recovery) are removed.
    fn load(dir: &Path, segments: &[Arc<LogSegment>], bases: &[i64]) -> Result<TxnIndexes> {
        let mut indexes = TxnIndexes::default();
        for &base in bases {
            let path = dir.join(crate::txn_index::txn_index_file_name(base));
            if segments.iter().any(|s| s.base_offset() == base) {
                let index = TransactionIndex::open(dir, base).at(&path)?;
                if !index.is_empty() {
                    indexes.0.insert(base, index);
                }
            } else {
                crate::txn_index::remove_txn_index(dir, base).at(&path)?;
            }
        }
        Ok(indexes)
    }

    /// Indexes `txn` in the segment holding its marker.
    fn append(&mut self, dir: &Path, segments: &[Arc<LogSegment>], txn: AbortedTxn) -> Result<()> {
        let holder = segments
            .partition_point(|s| s.base_offset() <= txn.last_offset)
            .saturating_sub(1);
        let base = segments[holder].base_offset();
        let index = match self.0.entry(base) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(TransactionIndex::open(dir, base).at(dir)?)
            }
        };
        let path = index.path().to_path_buf();
        index.append(txn).at(&path)
    }

    /// Drops the entries whose marker is at or after `offset`.
    fn truncate_to(&mut self, offset: i64) -> Result<()> {
        for index in self.0.values_mut() {
            let path = index.path().to_path_buf();
            index.truncate_to(offset).at(&path)?;
        }
        self.0.retain(|_, index| !index.is_empty());
        Ok(())
    }

    /// Removes the indexes of the segments from `base` on, before recovery rebuilds them.
    fn reset_from(&mut self, base: i64) -> Result<()> {
        for index in self.0.range_mut(base..).map(|(_, i)| i) {
            let path = index.path().to_path_buf();
            index.reset().at(&path)?;
        }
        self.0.retain(|_, index| !index.is_empty());
        Ok(())
    }

    /// A cleaned segment at `base` replaced the segments at `old_bases`: its index holds
    /// `entries`, those of the markers the cleaning kept, and their files go.
    fn replace(
        &mut self,
        dir: &Path,
        base: i64,
        old_bases: &[i64],
        entries: Vec<AbortedTxn>,
    ) -> Result<()> {
        for old in old_bases {
            self.0.remove(old);
            if *old != base {
                let path = dir.join(crate::txn_index::txn_index_file_name(*old));
                crate::txn_index::remove_txn_index(dir, *old).at(&path)?;
            }
        }
        if entries.is_empty() {
            // The replaced first segment's index, if it had one, names the cleaned segment's base.
            let path = dir.join(crate::txn_index::txn_index_file_name(base));
            return crate::txn_index::remove_txn_index(dir, base).at(&path);
        }
        let mut index = TransactionIndex::open(dir, base).at(dir)?;
        let path = index.path().to_path_buf();
        index.rewrite(entries).at(&path)?;
        self.0.insert(base, index);
        Ok(())
    }

    /// Forgets the index of a deleted segment (its file went with the segment's).
    fn forget(&mut self, base: i64) {
        self.0.remove(&base);
    }

    fn clear(&mut self) {
        self.0.clear();
    }

    fn collect(
        &self,
        from_base: i64,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Vec<AbortedTxn> {
        let mut aborted = Vec::new();
        for index in self.0.range(from_base..).map(|(_, i)| i) {
            let found = index.collect_aborted_txns(start_offset, upper_bound_offset);
            aborted.extend(found.aborted);
            if found.complete {
                break;
            }
        }
        aborted
    }
}

fn parse_txn_index_base(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(TXN_INDEX_FILE_SUFFIX)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Rebuilds producer state from the log, from the state's map end offset (a snapshot or the log
/// start) to the log end offset: batch headers, and the record of each transaction marker.
/// With `rebuild`, the aborted transactions whose marker is at or after its offset are
/// indexed again (recovery); the others are already in the indexes.
fn replay_producer_state(
    dir: &Path,
    segments: &[Arc<LogSegment>],
    producers: &mut ProducerStateManager,
    log_end_offset: i64,
    mut rebuild: Option<(i64, &mut TxnIndexes)>,
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
            for (position, h) in seg.headers_from(start)? {
                if h.base_offset < from || !h.has_producer_id() {
                    continue;
                }
                let marker = if h.is_control() {
                    batch::end_txn_marker(&seg.read_batch(position, &h)?)?
                } else {
                    None
                };
                apply_batch(producers, &h, marker, &mut |txn| match rebuild.as_mut() {
                    Some((rebuild_from, indexes)) if txn.last_offset >= *rebuild_from => {
                        indexes.append(dir, segments, txn)
                    }
                    _ => Ok(()),
                })?;
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

mod cleaning;
pub use cleaning::{
    CleaningView, LastRecord, CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_END_SUFFIX, SWAP_SUFFIX,
};

#[cfg(test)]
mod tests;

/// The message Kafka's `LogValidator` gives a refused record in `tp`.
fn refusal_message(why: batch::RecordRefusal, tp: &str, rules: &batch::RecordRules) -> String {
    match why {
        batch::RecordRefusal::NoKey => {
            format!("Compacted topic cannot accept message without key in topic partition {tp}")
        }
        batch::RecordRefusal::TimestampOutOfRange { timestamp, offset } => {
            let (earliest, latest) = rules.timestamp_range.unwrap_or_default();
            format!(
                "Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp should be within [{earliest}, {latest}]"
            )
        }
        batch::RecordRefusal::LogAppendTimeFromProducer => format!(
            "Invalid timestamp type in topic partition {tp}. Producer should not set timestamp type to LogAppendTime."
        ),
    }
}

/// One producer a log holds state for, as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The coordinator epoch of its last transaction marker, -1 before any.
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction, -1 without one.
    pub current_txn_start_offset: i64,
}
