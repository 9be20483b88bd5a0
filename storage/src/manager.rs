//! Every log of one broker: the log directories (`log.dirs`), the partition directories
//! `<topic>-<partition>` in them, the per-directory checkpoint files and the clean-shutdown
//! marker, as Kafka's `LogManager` keeps them.
//!
//! * Opening reads `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` of each
//!   directory and opens every log found, recovering past its recovery point unless the
//!   directory holds `.kafka_cleanshutdown`, which is then removed so that a later crash is seen
//!   as unclean.
//! * `shutdown` closes every log, writes the checkpoints and then the marker.
//! * `run_periodic` is the broker's background pass: retention, `flush.ms`, producer id expiry,
//!   and the recovery-point / log-start-offset checkpoints every
//!   [`OFFSET_CHECKPOINT_INTERVAL_MS`].
//!
//! Thread-safety: all methods take `&self`; share it as `Arc<LogManager>`. The map of logs is
//! behind a read-write lock held only to look up, insert or remove an `Arc<Log>`; the work on a
//! log happens on the log itself. Checkpoint writes are serialised by a mutex.
//!
//! * Moving a log to another log dir (AlterReplicaLogDirs) is Kafka's future log: an empty log
//!   `<topic>-<partition>.<unique id>-future` is created in the destination dir
//!   ([`LogManager::create_future`]), the caller fills it with the current log's batches, and
//!   [`LogManager::replace_current_with_future`] swaps them once it has caught up. A future log
//!   found when opening (a move cut short by a crash or a stop) is dropped, keeping the current
//!   log, and so is a `<topic>-<partition>.<unique id>-delete` dir (a replaced log not yet
//!   removed). Should a crash fall between the two renames of a swap, the partition is found in
//!   two dirs holding the same offsets; the one with the higher log end offset is kept.
//!
//! Not here: `meta.properties` (the broker's), per-topic config storage (the caller passes a
//! config when it creates a log and updates it with `Log::update_config`), copying batches into
//! a future log (the replica layer does, under the partition's lock).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::checkpoint::{
    CheckpointFile, OffsetCheckpointEntry, CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use crate::config::{LogConfig, TopicPartition};
use crate::deleter::Deleter;
use crate::error::{IoContext, Result, StorageError};
use crate::flusher::Flusher;
use crate::handles::{HandleLimits, HandlePool, HandleStats};
use crate::log::{sync_dir, Log, LogDirFailureHook, TruncationHook};
use crate::parallel;

/// Kafka's clean-shutdown marker file in each log directory.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// `log.flush.offset.checkpoint.interval.ms` and `log.flush.start.offset.checkpoint.interval.ms`
/// defaults: how often `run_periodic` writes the recovery-point and log-start-offset checkpoints.
pub const OFFSET_CHECKPOINT_INTERVAL_MS: i64 = 60_000;

/// Threads per log dir loading the logs at startup when not configured: Kafka's default of
/// `num.recovery.threads.per.data.dir`.
pub const RECOVERY_THREADS_PER_DIR_DEFAULT: usize = 2;

struct Entry {
    dir_index: usize,
    log: Arc<Log>,
}

/// The logs of `entries` in partition order.
fn by_partition(entries: &HashMap<TopicPartition, Entry>) -> Vec<(TopicPartition, Arc<Log>)> {
    let mut all: Vec<_> = entries
        .iter()
        .map(|(tp, e)| (tp.clone(), e.log.clone()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

pub struct LogManager {
    log_dirs: Vec<PathBuf>,
    /// The one pool bounding every log's open descriptors and index maps.
    pool: Arc<HandlePool>,
    /// Where every log's rolls send their fsyncs.
    flusher: Arc<Flusher>,
    /// Removes deleted logs' renamed directories in the background.
    deleter: Arc<Deleter>,
    default_config: LogConfig,
    logs: Arc<RwLock<HashMap<TopicPartition, Entry>>>,
    /// Serialises log creation, deletion and checkpoint writes.
    admin: Arc<Mutex<()>>,
    last_checkpoint_ms: Mutex<i64>,
    /// Told when a log goes offline after an I/O error ([`LogManager::on_log_dir_failure`]).
    failure_hook: Mutex<Option<LogDirFailureHook>>,
    /// Logs being filled in another log dir to replace the current one (Kafka's `futureLogs`).
    future_logs: RwLock<HashMap<TopicPartition, Entry>>,
    /// Where a partition not hosted yet is to be created (an AlterReplicaLogDirs that came
    /// before the partition, Kafka's `preferredLogDirs`).
    preferred_dirs: Mutex<HashMap<TopicPartition, usize>>,
    /// Indexes of the log dirs where a log had an I/O error.
    offline_dirs: Arc<Mutex<HashSet<PathBuf>>>,
    /// Compacted logs a cleaner thread is cleaning now, and those a cleaning failed on (Kafka's
    /// `uncleanablePartitions`: skipped until the broker restarts or the log is recreated).
    cleaning: Mutex<CleaningState>,
}

#[derive(Default)]
struct CleaningState {
    in_progress: HashSet<TopicPartition>,
    uncleanable: HashMap<TopicPartition, Weak<Log>>,
}

/// What one call of [`LogManager::clean_filthiest`] did.
#[derive(Debug, Clone)]
pub struct CleanReport {
    pub tp: TopicPartition,
    /// The log's dirty ratio when it was chosen.
    pub dirty_ratio: f64,
    pub range: crate::cleaner::CleanableRange,
    pub outcome: crate::cleaner::CleanOutcome,
}

/// Suffix of a future log's directory name.
const FUTURE_DIR_SUFFIX: &str = "-future";
/// Suffix of a replaced log's directory name, removed right after the swap or at the next open.
const DELETE_DIR_SUFFIX: &str = "-delete";

/// Longest file name the log dirs' filesystems take (Kafka caps its renamed directories' names
/// at this).
const DIR_NAME_BYTES_MAX: usize = 255;

/// `<topic>-<partition>.<32 hex digits><suffix>`, unique per process and time, as Kafka's
/// `LocalLog.logFutureDirName` / `logDeleteDirName` are; the topic is cut so the name stays
/// within [`DIR_NAME_BYTES_MAX`] (a 249-character topic would not fit otherwise). Nothing reads
/// the topic back from such a name: these directories are only ever removed.
fn unique_dir_name(tp: &TopicPartition, suffix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let full_suffix = format!(
        "-{}.{:016x}{:08x}{:08x}{suffix}",
        tp.partition,
        nanos,
        std::process::id(),
        n as u32
    );
    let mut topic_len = tp.topic.len().min(DIR_NAME_BYTES_MAX - full_suffix.len());
    while !tp.topic.is_char_boundary(topic_len) {
        topic_len -= 1;
    }
    format!("{}{full_suffix}", &tp.topic[..topic_len])
}

fn checkpoint(dir: &Path, name: &str) -> CheckpointFile<OffsetCheckpointEntry> {
    CheckpointFile::new(dir.join(name))
}

/// Reads an offset checkpoint; a malformed one is ignored with a warning, as Kafka does for the
/// recovery point (every log is then recovered from its start, which is safe).
fn read_offsets(dir: &Path, name: &str) -> Result<HashMap<TopicPartition, i64>> {
    match checkpoint(dir, name).read() {
        Ok(entries) => Ok(entries
            .into_iter()
            .map(|e| (TopicPartition::new(e.topic, e.partition), e.offset))
            .collect()),
        Err(crate::checkpoint::CheckpointError::Io { path, source }) => {
            Err(StorageError::Io { path, source })
        }
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "ignoring an unreadable checkpoint file");
            Ok(HashMap::new())
        }
    }
}

impl LogManager {
    /// Opens every log found in `log_dirs` (creating missing directories), with a handle pool
    /// of the default bounds.
    pub fn open(
        log_dirs: &[PathBuf],
        default_config: LogConfig,
        now_ms: i64,
    ) -> Result<LogManager> {
        Self::open_with_limits(
            log_dirs,
            default_config,
            now_ms,
            HandleLimits::default(),
            RECOVERY_THREADS_PER_DIR_DEFAULT,
        )
    }

    /// Opens every log found in `log_dirs`; all of them share one [`HandlePool`] with these
    /// bounds on open `.log` descriptors and index maps. Opening maps no index and keeps at
    /// most the bound of descriptors open, however many logs there are. The logs of each dir
    /// are loaded (and recovered) on `recovery_threads_per_dir` threads, Kafka's
    /// `num.recovery.threads.per.data.dir`.
    pub fn open_with_limits(
        log_dirs: &[PathBuf],
        default_config: LogConfig,
        now_ms: i64,
        limits: HandleLimits,
        recovery_threads_per_dir: usize,
    ) -> Result<LogManager> {
        let pool = HandlePool::new(limits);
        let flusher = Flusher::start().at(Path::new("log-flusher thread"))?;
        let deleter = Deleter::start().at(Path::new("log-deleter thread"))?;
        let mut logs = HashMap::new();
        for (dir_index, dir) in log_dirs.iter().enumerate() {
            std::fs::create_dir_all(dir).at(dir)?;
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            let clean = marker.exists();
            let recovery_points = read_offsets(dir, RECOVERY_POINT_CHECKPOINT_FILE)?;
            let log_start_offsets = read_offsets(dir, LOG_START_OFFSET_CHECKPOINT_FILE)?;
            let cleaned_up_to = read_offsets(dir, CLEANER_OFFSET_CHECKPOINT_FILE)?;
            let mut found = Vec::new();
            for entry in std::fs::read_dir(dir).at(dir)? {
                let entry = entry.at(dir)?;
                if !entry.file_type().at(&entry.path())?.is_dir() {
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(DELETE_DIR_SUFFIX) {
                    // Never loaded: a deleted or replaced log whose removal a crash cut short.
                    // Its name is unique, so it is removed in the background, as Kafka does
                    // with the `-delete` dirs it finds at startup.
                    tracing::info!(dir = %entry.path().display(), "removing a deleted or replaced log in the background");
                    deleter.submit(entry.path());
                    continue;
                }
                if name.ends_with(FUTURE_DIR_SUFFIX) {
                    // Never loaded: an unfinished move between log dirs. Removed before any
                    // log loads, since a new move of the partition reuses the name.
                    tracing::warn!(dir = %entry.path().display(), "removing the log of an unfinished move between log dirs");
                    std::fs::remove_dir_all(entry.path()).at(&entry.path())?;
                    sync_dir(dir)?;
                    continue;
                }
                let Some(tp) = TopicPartition::parse_dir_name(&name) else {
                    continue;
                };
                found.push((tp, entry.path()));
            }
            let loaded = parallel::map(&found, recovery_threads_per_dir, |(tp, path)| {
                let recovery_point = recovery_points.get(tp).copied().unwrap_or(0);
                Log::open_in(
                    &pool,
                    path,
                    default_config.clone(),
                    recovery_point,
                    clean,
                    now_ms,
                )
            });
            for ((tp, path), log) in found.into_iter().zip(loaded) {
                let log = log?;
                if let Some(&lso) = log_start_offsets.get(&tp) {
                    if lso > log.log_start_offset() {
                        log.maybe_increment_log_start_offset(lso)?;
                    }
                }
                if let Some(&offset) = cleaned_up_to.get(&tp) {
                    log.set_cleaned_up_to(offset);
                }
                tracing::info!(partition = %tp, log_end_offset = log.log_end_offset(), clean, "loaded log");
                if let Some(other) = logs.get(&tp) {
                    // A crash between the two renames of a move: both copies hold the same
                    // offsets (writes pause during the swap); keep the longer to be safe.
                    let other: &Entry = other;
                    let keep_new = log.log_end_offset() > other.log.log_end_offset();
                    let drop_dir = if keep_new {
                        other.log.dir().to_path_buf()
                    } else {
                        path.clone()
                    };
                    tracing::warn!(partition = %tp, kept = %if keep_new { path.clone() } else { other.log.dir().to_path_buf() }.display(), removed = %drop_dir.display(), "partition found in two log dirs after an interrupted move");
                    if !keep_new {
                        drop(log);
                        std::fs::remove_dir_all(&drop_dir).at(&drop_dir)?;
                        continue;
                    }
                    std::fs::remove_dir_all(&drop_dir).at(&drop_dir)?;
                }
                let log = Arc::new(log);
                log.set_flusher(flusher.clone());
                logs.insert(tp.clone(), Entry { dir_index, log });
            }
            if clean {
                std::fs::remove_file(&marker).at(&marker)?;
                sync_dir(dir)?;
            }
        }
        let manager = LogManager {
            log_dirs: log_dirs.to_vec(),
            pool,
            flusher,
            deleter,
            default_config,
            logs: Arc::new(RwLock::new(logs)),
            admin: Arc::default(),
            last_checkpoint_ms: Mutex::new(now_ms),
            failure_hook: Mutex::new(None),
            future_logs: RwLock::new(HashMap::new()),
            preferred_dirs: Mutex::new(HashMap::new()),
            offline_dirs: Arc::default(),
            cleaning: Mutex::default(),
        };
        for entry in manager.logs.read().values() {
            entry
                .log
                .set_truncation_hook(manager.truncation_hook(entry.dir_index));
        }
        Ok(manager)
    }

    /// What a log of dir `dir_index` calls after a truncation: that dir's recovery points are
    /// checkpointed at once, as Kafka's `LogManager.truncateTo` does. Holds the manager's
    /// state weakly (the logs hold the hook).
    fn truncation_hook(&self, dir_index: usize) -> TruncationHook {
        let logs = Arc::downgrade(&self.logs);
        let admin = Arc::downgrade(&self.admin);
        let dir = self.log_dirs[dir_index].clone();
        Arc::new(move || {
            let (Some(logs), Some(admin)) = (logs.upgrade(), admin.upgrade()) else {
                return Ok(());
            };
            let _admin = admin.lock();
            let mut in_dir: Vec<_> = logs
                .read()
                .iter()
                .filter(|(_, e)| e.dir_index == dir_index)
                .map(|(tp, e)| (tp.clone(), e.log.clone()))
                .collect();
            in_dir.sort_by(|a, b| a.0.cmp(&b.0));
            write_recovery_points(&dir, &in_dir)?;
            // A truncation may have pulled a cleaner checkpoint down (Kafka's
            // `maybeTruncateCleanerCheckpointToActiveSegmentBaseOffset`).
            write_cleaner_offsets(&dir, &in_dir)
        })
    }

    /// Installs `hook`, told (log dir, error) whenever a log — open now or created later — goes
    /// offline after an I/O error, as Kafka's logs report to its `LogDirFailureChannel`. The
    /// caller decides what a failed dir means (the broker halts once every dir has failed).
    pub fn on_log_dir_failure(&self, hook: LogDirFailureHook) {
        let _admin = self.admin.lock();
        let offline_dirs = self.offline_dirs.clone();
        let hook: LogDirFailureHook = Arc::new(move |dir: &Path, error: &str| {
            offline_dirs.lock().insert(dir.to_path_buf());
            hook(dir, error)
        });
        *self.failure_hook.lock() = Some(hook.clone());
        for e in self.logs.read().values() {
            e.log
                .set_failure_hook(self.log_dirs[e.dir_index].clone(), hook.clone());
        }
    }

    pub fn log_dirs(&self) -> &[PathBuf] {
        &self.log_dirs
    }

    /// The bounds on open `.log` descriptors and index maps every log here shares.
    pub fn handle_limits(&self) -> HandleLimits {
        self.pool.limits()
    }

    /// What the logs hold open now (descriptors, maps) and how often the pool reopened them.
    pub fn handle_stats(&self) -> HandleStats {
        self.pool.stats()
    }

    /// Closes up to `count` idle `.log` descriptors at once: what the broker calls when the
    /// process ran out of descriptors (an `accept` failed with EMFILE). Returns how many.
    pub fn release_idle_descriptors(&self, count: usize) -> usize {
        self.pool.release_idle_log_files(count)
    }
    pub fn default_config(&self) -> &LogConfig {
        &self.default_config
    }

    /// The index of the configured log dir whose absolute path is `path` (AlterReplicaLogDirs
    /// names dirs by absolute path, as Kafka's `isLogDirOnline` compares them).
    pub fn log_dir_index(&self, path: &str) -> Option<usize> {
        let wanted = Path::new(path);
        if !wanted.is_absolute() {
            return None;
        }
        self.log_dirs.iter().position(|d| {
            d.as_path() == wanted || std::path::absolute(d).is_ok_and(|a| a.as_path() == wanted)
        })
    }

    /// Whether no log in log dir `index` has had an I/O error (as far as the failure hook was
    /// told: without one installed every dir counts as online).
    pub fn is_log_dir_online(&self, index: usize) -> bool {
        !self.offline_dirs.lock().contains(&self.log_dirs[index])
    }

    /// The log dir holding the current log of `tp`.
    pub fn dir_index_of(&self, tp: &TopicPartition) -> Option<usize> {
        self.logs.read().get(tp).map(|e| e.dir_index)
    }

    /// The future log of `tp` and the log dir it is in.
    pub fn future(&self, tp: &TopicPartition) -> Option<(usize, Arc<Log>)> {
        self.future_logs
            .read()
            .get(tp)
            .map(|e| (e.dir_index, e.log.clone()))
    }

    /// Every future log, by partition.
    pub fn future_logs(&self) -> Vec<(TopicPartition, Arc<Log>)> {
        by_partition(&self.future_logs.read())
    }

    /// Creates `tp` in log dir `index` when it is created later (unless its log or future log is
    /// already there).
    pub fn set_preferred_dir(&self, tp: &TopicPartition, index: usize) {
        if self.dir_index_of(tp) == Some(index) || self.future(tp).is_some_and(|f| f.0 == index) {
            return;
        }
        self.preferred_dirs.lock().insert(tp.clone(), index);
    }

    /// Creates an empty future log of `tp` in log dir `index`, starting at `start_offset` (the
    /// current log's start). An existing future log in that dir is returned as it is.
    pub fn create_future(
        &self,
        tp: &TopicPartition,
        index: usize,
        config: LogConfig,
        start_offset: i64,
        now_ms: i64,
    ) -> Result<Arc<Log>> {
        let _admin = self.admin.lock();
        if let Some(e) = self.future_logs.read().get(tp) {
            if e.dir_index == index {
                return Ok(e.log.clone());
            }
        }
        let dir = self.log_dirs[index].join(unique_dir_name(tp, FUTURE_DIR_SUFFIX));
        let log = Arc::new(Log::open_in(&self.pool, &dir, config, 0, true, now_ms)?);
        log.set_flusher(self.flusher.clone());
        if start_offset > 0 {
            log.truncate_fully_and_start_at(start_offset)?;
        }
        if let Some(hook) = self.failure_hook.lock().clone() {
            log.set_failure_hook(self.log_dirs[index].clone(), hook);
        }
        sync_dir(&self.log_dirs[index])?;
        let replaced = self.future_logs.write().insert(
            tp.clone(),
            Entry {
                dir_index: index,
                log: log.clone(),
            },
        );
        if let Some(old) = replaced {
            self.delete_dir_of(tp, &old.log)?;
        }
        Ok(log)
    }

    /// Drops the future log of `tp`, if any (the move was cancelled or its partition removed).
    pub fn delete_future(&self, tp: &TopicPartition) -> Result<()> {
        let _admin = self.admin.lock();
        let Some(entry) = self.future_logs.write().remove(tp) else {
            return Ok(());
        };
        self.delete_dir_of(tp, &entry.log)
    }

    /// Renames `log`'s directory (of `tp`) to a `-delete` name and queues its removal.
    fn delete_dir_of(&self, tp: &TopicPartition, log: &Log) -> Result<()> {
        let parent = log.dir().parent().unwrap_or(Path::new("."));
        let dest = parent.join(unique_dir_name(tp, DELETE_DIR_SUFFIX));
        if log.rename_for_deletion(&dest)? {
            self.deleter.submit(dest);
        }
        Ok(())
    }

    /// Kafka's `replaceCurrentWithFutureLog`: the future log of `tp`, which the caller has
    /// filled up to the current log's end and keeps from moving (no writes to either log until
    /// this returns), becomes the current log. It takes the current log's leader epochs it lacks
    /// (a leader registers an epoch before writing in it), its log start offset and high
    /// watermark; it is closed, its dir renamed to `<topic>-<partition>`, and opened again there
    /// (clean, so nothing is recovered) before it takes them. The old log refuses writes from then on, its dir is
    /// renamed to `...-delete` and removed. Returns the new current log.
    pub fn replace_current_with_future(
        &self,
        tp: &TopicPartition,
        high_watermark: i64,
        now_ms: i64,
    ) -> Result<Arc<Log>> {
        let _admin = self.admin.lock();
        let (current, future) = {
            let logs = self.logs.read();
            let futures = self.future_logs.read();
            match (logs.get(tp), futures.get(tp)) {
                (Some(c), Some(f)) => ((c.dir_index, c.log.clone()), (f.dir_index, f.log.clone())),
                _ => {
                    return Err(StorageError::Offline(format!(
                        "{tp} has no current or no future log to swap"
                    )))
                }
            }
        };
        let (dir_index, future) = future;
        let (current_dir, current) = current;
        assert_eq!(
            future.log_end_offset(),
            current.log_end_offset(),
            "a future log replaces the current one only once caught up"
        );
        future.close()?;
        future.retire();
        let dest = self.log_dirs[dir_index].join(tp.dir_name());
        std::fs::rename(future.dir(), &dest).at(&dest)?;
        sync_dir(&self.log_dirs[dir_index])?;
        // The current log's config is the topic's latest: a change during the move is kept.
        let log = Arc::new(Log::open_in(
            &self.pool,
            &dest,
            current.config(),
            future.log_end_offset(),
            true,
            now_ms,
        )?);
        // After the batches' epochs, those registered with no batch yet (opening drops
        // entries at the log end, so this comes after it).
        let latest = log.latest_epoch();
        for (epoch, start_offset) in current.epoch_entries() {
            if latest.is_none_or(|l| epoch > l) {
                log.assign_epoch_start_offset(epoch, start_offset)?;
            }
        }
        if current.log_start_offset() > log.log_start_offset() {
            log.maybe_increment_log_start_offset(current.log_start_offset())?;
        }
        log.update_high_watermark(high_watermark);
        log.set_flusher(self.flusher.clone());
        if let Some(hook) = self.failure_hook.lock().clone() {
            log.set_failure_hook(self.log_dirs[dir_index].clone(), hook);
        }
        log.set_truncation_hook(self.truncation_hook(dir_index));
        current.retire();
        let source_parent = current.dir().parent().map(Path::to_path_buf);
        let deleted = source_parent
            .as_deref()
            .unwrap_or(Path::new("."))
            .join(unique_dir_name(tp, DELETE_DIR_SUFFIX));
        let renamed = std::fs::rename(current.dir(), &deleted).at(&deleted);
        self.logs.write().insert(
            tp.clone(),
            Entry {
                dir_index,
                log: log.clone(),
            },
        );
        self.future_logs.write().remove(tp);
        self.preferred_dirs.lock().remove(tp);
        // The old dir's cleaner checkpoint must not name the log that left it.
        if current.cleaned_up_to() >= 0 {
            self.write_cleaner_offsets_of(current_dir)?;
        }
        // The new log is in place; what is left of the old one is removed in the background
        // or, if that is cut short, at the next open.
        match renamed {
            Ok(()) => self.deleter.submit(deleted),
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "could not rename the replaced log")
            }
        }
        Ok(log)
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Log>> {
        self.logs.read().get(tp).map(|e| e.log.clone())
    }

    /// The log of `tp`, created empty in the log dir with the fewest logs if it does not exist.
    pub fn get_or_create(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<Arc<Log>> {
        self.get_or_create_many(vec![(tp.clone(), config)], now_ms)
            .pop()
            .expect("one answer per partition")
    }

    /// [`Self::get_or_create`] for many partitions at once (a metadata image that adds
    /// thousands): the logs are created on [`parallel::PARTITION_IO_THREADS`] threads, and each
    /// log dir that got new partitions is fsynced once, after all of them, instead of once per
    /// partition. Answers in the order asked.
    pub fn get_or_create_many(
        &self,
        partitions: Vec<(TopicPartition, LogConfig)>,
        now_ms: i64,
    ) -> Vec<Result<Arc<Log>>> {
        let mut out: Vec<Option<Result<Arc<Log>>>> = Vec::with_capacity(partitions.len());
        let mut missing = Vec::new();
        for (i, (tp, config)) in partitions.into_iter().enumerate() {
            match self.get(&tp) {
                Some(log) => out.push(Some(Ok(log))),
                None => {
                    out.push(None);
                    missing.push((i, tp, config));
                }
            }
        }
        if missing.is_empty() {
            return out.into_iter().map(|o| o.expect("answered")).collect();
        }
        let _admin = self.admin.lock();
        // Partitions per log dir, counted once for the batch (a new partition goes to the dir
        // holding the fewest).
        let mut counts = vec![0usize; self.log_dirs.len()];
        if self.log_dirs.len() > 1 {
            for e in self.logs.read().values() {
                counts[e.dir_index] += 1;
            }
        }
        // Where each new log goes, decided in order (a partition asked twice is created once);
        // then the logs are created on a few threads at once (each creation fsyncs its own
        // directory, and the filesystem commits concurrent fsyncs together).
        let mut planned: Vec<(usize, TopicPartition, LogConfig, usize)> = Vec::new();
        let mut duplicates: Vec<(usize, usize)> = Vec::new();
        let mut first_ask: HashMap<TopicPartition, usize> = HashMap::new();
        for (i, tp, config) in missing {
            if let Some(log) = self.get(&tp) {
                out[i] = Some(Ok(log));
                continue;
            }
            if let Some(&p) = first_ask.get(&tp) {
                duplicates.push((i, p));
                continue;
            }
            let preferred = self.preferred_dirs.lock().remove(&tp);
            let dir_index = preferred.unwrap_or_else(|| {
                (0..self.log_dirs.len())
                    .min_by_key(|&i| counts[i])
                    .expect("at least one log dir")
            });
            counts[dir_index] += 1;
            first_ask.insert(tp.clone(), i);
            planned.push((i, tp, config, dir_index));
        }
        let opened = parallel::map(
            &planned,
            parallel::PARTITION_IO_THREADS,
            |(_, tp, config, dir_index)| {
                let dir = self.log_dirs[*dir_index].join(tp.dir_name());
                Log::open_in(&self.pool, &dir, config.clone(), 0, true, now_ms)
            },
        );
        // Created logs, by dir, not yet visible: published once their dir is synced.
        let mut created: Vec<Vec<(usize, TopicPartition, Arc<Log>)>> =
            vec![Vec::new(); self.log_dirs.len()];
        let mut failed: HashMap<usize, String> = HashMap::new();
        for ((i, tp, _, dir_index), result) in planned.into_iter().zip(opened) {
            match result {
                Ok(log) => {
                    let log = Arc::new(log);
                    log.set_flusher(self.flusher.clone());
                    if let Some(hook) = self.failure_hook.lock().clone() {
                        log.set_failure_hook(self.log_dirs[dir_index].clone(), hook);
                    }
                    log.set_truncation_hook(self.truncation_hook(dir_index));
                    created[dir_index].push((i, tp, log));
                }
                Err(e) => {
                    failed.insert(i, e.to_string());
                    out[i] = Some(Err(e));
                }
            }
        }
        for (dir_index, logs) in created.into_iter().enumerate() {
            if logs.is_empty() {
                continue;
            }
            match sync_dir(&self.log_dirs[dir_index]) {
                Ok(()) => {
                    let mut all = self.logs.write();
                    for (i, tp, log) in logs {
                        all.insert(
                            tp,
                            Entry {
                                dir_index,
                                log: log.clone(),
                            },
                        );
                        out[i] = Some(Ok(log));
                    }
                }
                Err(e) => {
                    for (i, _, _) in logs {
                        out[i] = Some(Err(StorageError::Offline(format!(
                            "cannot sync log dir {}: {e}",
                            self.log_dirs[dir_index].display()
                        ))));
                    }
                }
            }
        }
        for (i, first) in duplicates {
            out[i] = Some(match &out[first] {
                Some(Ok(log)) => Ok(log.clone()),
                _ => Err(StorageError::Offline(
                    failed
                        .get(&first)
                        .cloned()
                        .unwrap_or_else(|| "the log could not be created".to_string()),
                )),
            });
        }
        out.into_iter().map(|o| o.expect("answered")).collect()
    }

    pub fn logs(&self) -> Vec<(TopicPartition, Arc<Log>)> {
        by_partition(&self.logs.read())
    }

    /// Removes the log (DeleteTopics, or a replica moved away): its directory is renamed to
    /// `<topic>-<partition>.<unique id>-delete` at once and removed in the background, so a
    /// crash at any point leaves either the whole log under its own name, for the next first
    /// image to judge, or a `-delete` directory, which the next open removes unread.
    pub fn delete(&self, tp: &TopicPartition) -> Result<()> {
        let _admin = self.admin.lock();
        self.preferred_dirs.lock().remove(tp);
        if let Some(future) = self.future_logs.write().remove(tp) {
            self.delete_dir_of(tp, &future.log)?;
        }
        let Some(entry) = self.logs.write().remove(tp) else {
            return Ok(());
        };
        self.delete_dir_of(tp, &entry.log)?;
        // A topic created again under the name must not inherit the deleted log's checkpoint.
        if entry.log.cleaned_up_to() >= 0 {
            self.write_cleaner_offsets_of(entry.dir_index)?;
        }
        Ok(())
    }

    fn logs_by_dir(&self) -> Vec<Vec<(TopicPartition, Arc<Log>)>> {
        let mut by_dir = vec![Vec::new(); self.log_dirs.len()];
        for (tp, e) in self.logs.read().iter() {
            by_dir[e.dir_index].push((tp.clone(), e.log.clone()));
        }
        for logs in &mut by_dir {
            logs.sort_by(|a, b| a.0.cmp(&b.0));
        }
        by_dir
    }

    /// Writes `replication-offset-checkpoint` in every log dir with the high watermarks of the
    /// logs it holds.
    pub fn checkpoint_high_watermarks(&self, hws: &HashMap<TopicPartition, i64>) -> Result<()> {
        let _admin = self.admin.lock();
        for (dir, logs) in self.log_dirs.iter().zip(self.logs_by_dir()) {
            let entries: Vec<OffsetCheckpointEntry> = logs
                .iter()
                .filter_map(|(tp, _)| hws.get(tp).map(|&offset| entry(tp, offset)))
                .collect();
            checkpoint(dir, REPLICATION_OFFSET_CHECKPOINT_FILE).write(&entries)?;
        }
        Ok(())
    }

    /// The high watermarks of every log dir's `replication-offset-checkpoint`.
    pub fn read_high_watermarks(&self) -> Result<HashMap<TopicPartition, i64>> {
        let mut all = HashMap::new();
        for dir in &self.log_dirs {
            for e in checkpoint(dir, REPLICATION_OFFSET_CHECKPOINT_FILE).read()? {
                all.insert(TopicPartition::new(e.topic, e.partition), e.offset);
            }
        }
        Ok(all)
    }

    /// Writes `cleaner-offset-checkpoint` in log dir `dir_index` with the cleaner checkpoint of
    /// each of its logs that has one.
    fn checkpoint_cleaner_offsets(&self, dir_index: usize) -> Result<()> {
        let _admin = self.admin.lock();
        self.write_cleaner_offsets_of(dir_index)
    }

    /// [`write_cleaner_offsets`] for dir `dir_index`; the caller holds the admin lock.
    fn write_cleaner_offsets_of(&self, dir_index: usize) -> Result<()> {
        write_cleaner_offsets(&self.log_dirs[dir_index], &self.logs_by_dir()[dir_index])
    }

    /// Compacted logs a cleaning failed on (Kafka's `uncleanable-partitions-count`).
    pub fn uncleanable_partitions(&self) -> Vec<TopicPartition> {
        let mut all: Vec<_> = self.cleaning.lock().uncleanable.keys().cloned().collect();
        all.sort();
        all
    }

    /// Every compacted log with its cleanable part measured (the leadership page's dirty
    /// ratios, the cleaner's choice).
    pub fn compacted_logs(&self, now_ms: i64) -> Vec<crate::cleaner::manager::LogToClean> {
        self.logs()
            .into_iter()
            .filter(|(_, log)| log.config().compact && !log.is_offline())
            .filter_map(|(tp, log)| crate::cleaner::manager::measure(&tp, &log, now_ms).ok())
            .collect()
    }

    /// One cleaner pass (Kafka's `CleanerThread.cleanFilthiestLog`): cleans the filthiest due
    /// compacted log that no other thread is cleaning, with `map`, and checkpoints where it
    /// got to. `None` when no log is due. A cleaning that fails marks its log uncleanable;
    /// one whose log was deleted or replaced meanwhile is simply dropped.
    pub fn clean_filthiest(
        &self,
        map: &mut crate::cleaner::OffsetMap,
        load_factor: f64,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<Option<CleanReport>> {
        self.clean_filthiest_until(map, load_factor, now_ms, throttle, &|| false)
    }

    /// [`Self::clean_filthiest`], the cleaning checking `should_stop` between batches: once
    /// it is true the cleaning ends [`crate::cleaner::CleanOutcome::Stopped`] (Kafka's
    /// `checkDone`), which is no failure.
    pub fn clean_filthiest_until(
        &self,
        map: &mut crate::cleaner::OffsetMap,
        load_factor: f64,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
        should_stop: &dyn Fn() -> bool,
    ) -> Result<Option<CleanReport>> {
        let chosen = {
            let mut state = self.cleaning.lock();
            state.uncleanable.retain(|_, log| log.strong_count() > 0);
            let candidates: Vec<_> = self
                .compacted_logs(now_ms)
                .into_iter()
                .filter(|c| {
                    let uncleanable = state
                        .uncleanable
                        .get(&c.tp)
                        .is_some_and(|w| w.as_ptr() == Arc::as_ptr(&c.log));
                    !(uncleanable || state.in_progress.contains(&c.tp))
                })
                .collect();
            let Some(chosen) = crate::cleaner::manager::filthiest(candidates) else {
                return Ok(None);
            };
            state.in_progress.insert(chosen.tp.clone());
            chosen
        };
        /// Takes the log off the in-progress set however the cleaning ends (a panic included).
        struct InProgress<'a>(&'a Mutex<CleaningState>, TopicPartition);
        impl Drop for InProgress<'_> {
            fn drop(&mut self) {
                self.0.lock().in_progress.remove(&self.1);
            }
        }
        let in_progress = InProgress(&self.cleaning, chosen.tp.clone());
        let settings = crate::cleaner::CleanSettings {
            delete_retention_ms: chosen.log.config().delete_retention_ms,
            now_ms,
            load_factor,
        };
        // The cleaning's own swaps move the truncation generation: only truncations count here.
        let truncations = chosen.log.truncation_count();
        let result = crate::cleaner::clean_until(
            &chosen.log,
            chosen.range,
            map,
            &settings,
            throttle,
            should_stop,
        );
        let still_ours = self
            .get(&chosen.tp)
            .is_some_and(|l| Arc::ptr_eq(&l, &chosen.log));
        drop(in_progress);
        // A failure while the log changed under the cleaning (a truncation read half-way, a
        // deletion) is the change's doing, not the log's: the next pass tries again.
        let moved_on =
            !still_ours || chosen.log.is_offline() || chosen.log.truncation_count() != truncations;
        let mut state = self.cleaning.lock();
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(_) if moved_on => crate::cleaner::CleanOutcome::Abandoned {
                stats: Default::default(),
            },
            Err(e) => {
                tracing::error!(partition = %chosen.tp, error = %e,
                    "cleaning failed; the partition is uncleanable until it is recreated or the broker restarts");
                state
                    .uncleanable
                    .insert(chosen.tp.clone(), Arc::downgrade(&chosen.log));
                return Err(e);
            }
        };
        drop(state);
        if let crate::cleaner::CleanOutcome::Cleaned { .. } = outcome {
            if let Some(dir_index) = self.dir_index_of(&chosen.tp).filter(|_| still_ours) {
                self.checkpoint_cleaner_offsets(dir_index)?;
            }
        }
        Ok(Some(CleanReport {
            tp: chosen.tp.clone(),
            dirty_ratio: chosen.dirty_ratio(),
            range: chosen.range,
            outcome,
        }))
    }

    /// Writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` in every
    /// log dir. Offline logs are left out (they are recovered from scratch next time).
    pub fn checkpoint_recovery_points_and_log_start_offsets(&self) -> Result<()> {
        let _admin = self.admin.lock();
        for (dir, logs) in self.log_dirs.iter().zip(self.logs_by_dir()) {
            write_recovery_points(dir, &logs)?;
            let online: Vec<_> = logs.iter().filter(|(_, log)| !log.is_offline()).collect();
            // Like Kafka, only where the start offset is not implied by the first segment.
            let starts: Vec<OffsetCheckpointEntry> = online
                .iter()
                .filter(|(_, log)| {
                    log.segment_base_offsets()
                        .first()
                        .is_some_and(|&b| log.log_start_offset() > b)
                })
                .map(|(tp, log)| entry(tp, log.log_start_offset()))
                .collect();
            checkpoint(dir, LOG_START_OFFSET_CHECKPOINT_FILE).write(&starts)?;
        }
        Ok(())
    }

    /// The background pass: retention (`retention.ms`, `retention.bytes`, log start offset) when
    /// `retention_due` (the caller keeps Kafka's `log.retention.check.interval.ms`), `flush.ms`,
    /// producer id expiry, and the offset checkpoints every [`OFFSET_CHECKPOINT_INTERVAL_MS`].
    /// Rolls by `segment.ms` happen on append, as in Kafka. Every log is visited even if one
    /// fails; the first error is returned.
    pub fn run_periodic(&self, now_ms: i64, retention_due: bool) -> Result<()> {
        let mut first_error = None;
        for (tp, log) in self.logs() {
            if log.is_offline() {
                continue;
            }
            let r = if retention_due {
                log.delete_old_segments(now_ms).map(drop)
            } else {
                Ok(())
            }
            .and_then(|_| log.flush_if_due(now_ms));
            log.remove_expired_producers(now_ms);
            if let Err(e) = r {
                tracing::error!(partition = %tp, error = %e, "periodic log maintenance failed");
                first_error.get_or_insert(e);
            }
        }
        let due = {
            let mut last = self.last_checkpoint_ms.lock();
            let due = now_ms - *last >= OFFSET_CHECKPOINT_INTERVAL_MS;
            if due {
                *last = now_ms;
            }
            due
        };
        if due {
            if let Err(e) = self.checkpoint_recovery_points_and_log_start_offsets() {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Clean shutdown: closes every log (fsync, trimmed indexes, producer snapshots), writes the
    /// checkpoints and then `.kafka_cleanshutdown` in each dir whose logs all closed cleanly.
    pub fn shutdown(&self) -> Result<()> {
        let mut first_error = None;
        let mut dir_clean = vec![true; self.log_dirs.len()];
        for (i, logs) in self.logs_by_dir().into_iter().enumerate() {
            for (tp, log) in logs {
                if let Err(e) = log.close() {
                    tracing::error!(partition = %tp, error = %e, "log did not close cleanly");
                    dir_clean[i] = false;
                    first_error.get_or_insert(e);
                }
            }
        }
        self.checkpoint_recovery_points_and_log_start_offsets()?;
        for (dir, clean) in self.log_dirs.iter().zip(dir_clean) {
            if clean {
                let marker = dir.join(CLEAN_SHUTDOWN_FILE);
                std::fs::File::create(&marker)
                    .and_then(|f| f.sync_all())
                    .at(&marker)?;
                sync_dir(dir)?;
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Writes `recovery-point-offset-checkpoint` of log dir `dir` holding `logs`. Offline logs are
/// left out (they are recovered from scratch next time).
fn write_recovery_points(dir: &Path, logs: &[(TopicPartition, Arc<Log>)]) -> Result<()> {
    let recovery: Vec<OffsetCheckpointEntry> = logs
        .iter()
        .filter(|(_, log)| !log.is_offline())
        .map(|(tp, log)| entry(tp, log.recovery_point()))
        .collect();
    checkpoint(dir, RECOVERY_POINT_CHECKPOINT_FILE).write(&recovery)?;
    Ok(())
}

/// Writes `cleaner-offset-checkpoint` in `dir` with the cleaner checkpoint of each of `logs`
/// that has one: a log deleted, moved away or never cleaned leaves no entry behind.
fn write_cleaner_offsets(dir: &Path, logs: &[(TopicPartition, Arc<Log>)]) -> Result<()> {
    let entries: Vec<OffsetCheckpointEntry> = logs
        .iter()
        .filter(|(_, log)| log.cleaned_up_to() >= 0)
        .map(|(tp, log)| entry(tp, log.cleaned_up_to()))
        .collect();
    checkpoint(dir, CLEANER_OFFSET_CHECKPOINT_FILE).write(&entries)?;
    Ok(())
}

fn entry(tp: &TopicPartition, offset: i64) -> OffsetCheckpointEntry {
    OffsetCheckpointEntry {
        topic: tp.topic.clone(),
        partition: tp.partition,
        offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::builder::simple;

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 2048,
            segment_index_bytes: 4096,
            index_interval_bytes: 256,
            ..LogConfig::default()
        }
    }

    /// Many partitions at once are created on several threads: every one answered in order
    /// (a partition asked twice gets the same log), spread evenly over the log dirs, and all of
    /// them loaded again, with their data, by a manager opened on several recovery threads.
    #[test]
    fn many_logs_created_at_once_and_loaded_again_in_parallel() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let mut asked: Vec<(TopicPartition, LogConfig)> = (0..200)
            .map(|p| (TopicPartition::new("many", p), config()))
            .collect();
        asked.push((TopicPartition::new("many", 7), config()));
        let logs: Vec<Arc<Log>> = manager
            .get_or_create_many(asked.clone(), 0)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(logs.len(), 201);
        for (log, (tp, _)) in logs.iter().zip(&asked) {
            assert!(
                log.dir().ends_with(tp.dir_name()),
                "{}",
                log.dir().display()
            );
        }
        assert!(
            Arc::ptr_eq(&logs[7], &logs[200]),
            "asked twice, created once"
        );
        let in_first = logs
            .iter()
            .filter(|l| l.dir().starts_with(&dirs[0]))
            .count();
        assert_eq!(in_first, 100, "spread over both dirs");
        for (i, log) in logs.iter().take(200).enumerate() {
            log.append_as_leader(&simple(1 + i % 3, 10, 0), 0, 0)
                .unwrap();
        }
        manager.shutdown().unwrap();
        drop(logs);
        drop(manager);

        let reopened =
            LogManager::open_with_limits(&dirs, config(), 0, HandleLimits::default(), 4).unwrap();
        assert_eq!(reopened.logs().len(), 200);
        for p in 0..200 {
            let log = reopened.get(&TopicPartition::new("many", p)).unwrap();
            assert_eq!(log.log_end_offset(), 1 + (p as i64) % 3, "partition {p}");
        }
    }

    /// A log dir that fails (here: a partition directory gone, so the next segment cannot be
    /// created) takes the log offline and tells the hook which log dir failed, once; the logs
    /// of the other dir are not reported. Both a log open before the hook and one created
    /// after it report.
    #[test]
    fn a_log_going_offline_after_an_io_error_reports_its_log_dir() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let before = manager
            .get_or_create(&TopicPartition::new("t", 0), config(), 0)
            .unwrap();
        let reports: Arc<Mutex<Vec<(PathBuf, String)>>> = Arc::default();
        let seen = reports.clone();
        manager.on_log_dir_failure(Arc::new(move |dir: &Path, error: &str| {
            seen.lock().push((dir.to_path_buf(), error.to_owned()));
        }));
        let after = manager
            .get_or_create(&TopicPartition::new("t", 1), config(), 0)
            .unwrap();
        assert_ne!(
            before.dir().parent(),
            after.dir().parent(),
            "one log per dir"
        );

        for (log, dir_index) in [(&before, 0), (&after, 1)] {
            std::fs::remove_dir_all(log.dir()).unwrap();
            // Appends go to the open segment until it is full; the roll then fails.
            let mut failed = None;
            for i in 0..100 {
                if let Err(e) = log.append_as_leader(&simple(2, 100, i), 1, 0) {
                    failed = Some(e);
                    break;
                }
            }
            let e = failed.expect("an append fails once the segment must roll");
            assert!(e.is_storage_error(), "{e}");
            assert!(log.is_offline());
            assert!(log.append_as_leader(&simple(2, 100, 0), 1, 0).is_err());
            let r = reports.lock();
            assert_eq!(
                r.len(),
                dir_index + 1,
                "reported once per failing log: {r:?}"
            );
            assert_eq!(r[dir_index].0, dirs[log_dir_of(&dirs, log)]);
        }
    }

    fn log_dir_of(dirs: &[PathBuf], log: &Log) -> usize {
        dirs.iter()
            .position(|d| Some(d.as_path()) == log.dir().parent())
            .unwrap()
    }

    #[test]
    fn creates_logs_across_dirs_and_reopens_cleanly() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let tps: Vec<_> = (0..4).map(|p| TopicPartition::new("orders", p)).collect();
        for tp in &tps {
            let log = manager.get_or_create(tp, config(), 0).unwrap();
            for i in 0..(10 + tp.partition) {
                log.append_as_leader(&simple(2, 100, i as i64), 1, 0)
                    .unwrap();
            }
        }
        assert!(dirs[0].join("orders-0").is_dir());
        assert!(dirs[1].join("orders-1").is_dir());
        let mut hws = HashMap::new();
        hws.insert(tps[0].clone(), 7);
        hws.insert(tps[1].clone(), 9);
        manager.checkpoint_high_watermarks(&hws).unwrap();
        assert_eq!(manager.read_high_watermarks().unwrap(), hws);
        assert_eq!(
            std::fs::read_to_string(dirs[0].join(REPLICATION_OFFSET_CHECKPOINT_FILE)).unwrap(),
            "0\n1\norders 0 7\n"
        );
        manager.get(&tps[2]).unwrap().update_high_watermark(20);
        manager
            .get(&tps[2])
            .unwrap()
            .delete_records_before(5)
            .unwrap();
        manager.shutdown().unwrap();
        assert!(dirs[0].join(CLEAN_SHUTDOWN_FILE).exists());
        let rp = std::fs::read_to_string(dirs[0].join(RECOVERY_POINT_CHECKPOINT_FILE)).unwrap();
        assert_eq!(rp, "0\n2\norders 0 20\norders 2 24\n");
        drop(manager);

        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        assert!(!dirs[0].join(CLEAN_SHUTDOWN_FILE).exists());
        assert_eq!(manager.logs().len(), 4);
        for tp in &tps {
            let log = manager.get(tp).unwrap();
            assert_eq!(log.log_end_offset(), 2 * (10 + tp.partition as i64));
            assert_eq!(log.latest_epoch(), Some(1));
            log.verify_indexes().unwrap();
        }
        assert_eq!(manager.get(&tps[2]).unwrap().log_start_offset(), 5);
        manager.delete(&tps[3]).unwrap();
        assert!(manager.get(&tps[3]).is_none());
        assert!(!dirs[1].join("orders-3").exists());
        wait_until_no_delete_dirs(&dirs[1]);
    }

    /// A truncation writes the recovery-point checkpoint at once (Kafka's
    /// `LogManager.truncateTo`): left at the old recovery point, the checkpoint would let a
    /// recovery after a power loss skip the batches appended past the truncation point.
    #[test]
    fn a_truncation_checkpoints_the_recovery_point_at_once() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let tps: Vec<_> = (0..2).map(|p| TopicPartition::new("t", p)).collect();
        for tp in &tps {
            let log = manager.get_or_create(tp, config(), 0).unwrap();
            for i in 0..50 {
                log.append_as_leader(&simple(2, 100, i), 1, 0).unwrap();
            }
            log.flush().unwrap();
        }
        manager
            .checkpoint_recovery_points_and_log_start_offsets()
            .unwrap();
        let log = manager.get(&tps[0]).unwrap();
        let dir = &dirs[log_dir_of(&dirs, &log)];
        let recovery_points = || read_offsets(dir, RECOVERY_POINT_CHECKPOINT_FILE).unwrap();
        assert_eq!(recovery_points().get(&tps[0]), Some(&100));

        log.truncate_to(40).unwrap();
        assert_eq!(log.recovery_point(), 40);
        assert_eq!(recovery_points().get(&tps[0]), Some(&40));
        log.truncate_fully_and_start_at(7).unwrap();
        assert_eq!(recovery_points().get(&tps[0]), Some(&7));
        let other = manager.get(&tps[1]).unwrap();
        let other_dir = &dirs[log_dir_of(&dirs, &other)];
        assert_eq!(
            read_offsets(other_dir, RECOVERY_POINT_CHECKPOINT_FILE)
                .unwrap()
                .get(&tps[1]),
            Some(&100),
            "the other log keeps its recovery point"
        );
    }

    /// The background removal of deleted logs ends within a deadline.
    fn wait_until_no_subdirs(dir: &Path) {
        wait_until(dir, |names| names.is_empty());
    }

    fn wait_until_no_delete_dirs(dir: &Path) {
        wait_until(dir, |names| !names.iter().any(|n| n.ends_with("-delete")));
    }

    fn wait_until(dir: &Path, done: impl Fn(&[String]) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done(&subdirs(dir)) {
            assert!(
                std::time::Instant::now() < deadline,
                "still there: {:?}",
                subdirs(dir)
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Deletion renames the log to `<topic>-<partition>.<32 hex>-delete` before anything is
    /// removed; a crash before the background removal ends (here: it never runs, and part of
    /// the renamed log is already gone) leaves a directory the next open never loads and
    /// removes in the background, so the partition created again starts empty.
    #[test]
    fn a_deleted_log_is_renamed_first_and_never_loaded_after_a_crash() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        let mut manager = LogManager::open(std::slice::from_ref(&dir), config(), 0).unwrap();
        let (paused, queue) = Deleter::manual();
        manager.deleter = paused;
        let tp = TopicPartition::new("t", 0);
        let log = manager.get_or_create(&tp, config(), 0).unwrap();
        for i in 0..40 {
            log.append_as_leader(&simple(2, 100, i), 1, 0).unwrap();
        }
        drop(log);
        manager.delete(&tp).unwrap();
        assert!(manager.get(&tp).is_none());
        let names = subdirs(&dir);
        assert_eq!(names.len(), 1, "{names:?}");
        let id = names[0]
            .strip_prefix("t-0.")
            .and_then(|n| n.strip_suffix("-delete"))
            .unwrap_or_else(|| panic!("not a delete dir name: {}", names[0]));
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        let renamed = queue.try_recv().expect("the removal was queued");
        assert_eq!(renamed, dir.join(&names[0]));
        std::fs::remove_file(renamed.join("leader-epoch-checkpoint")).unwrap();
        drop(manager);

        let manager = LogManager::open(std::slice::from_ref(&dir), config(), 0).unwrap();
        assert!(manager.logs().is_empty());
        wait_until_no_delete_dirs(&dir);
        let again = manager.get_or_create(&tp, config(), 0).unwrap();
        assert_eq!(again.log_end_offset(), 0);
        assert_eq!(again.latest_epoch(), None);
    }

    /// Renamed directories' names keep within 255 bytes as Kafka's do, cutting the topic: a
    /// topic of Kafka's longest name (249 characters) can be moved and deleted.
    #[test]
    fn a_topic_of_the_longest_name_is_moved_and_deleted() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let tp = TopicPartition::new("x".repeat(249), 12);
        let name = unique_dir_name(&tp, DELETE_DIR_SUFFIX);
        assert_eq!(name.len(), DIR_NAME_BYTES_MAX);
        assert!(name.starts_with("xxx") && name.contains("x-12.") && name.ends_with("-delete"));
        let current = manager.get_or_create(&tp, config(), 0).unwrap();
        let from = log_dir_of(&dirs, &current);
        current.append_as_leader(&simple(2, 100, 0), 1, 0).unwrap();
        let future = manager
            .create_future(&tp, 1 - from, config(), 0, 0)
            .unwrap();
        copy_all(&current, &future);
        manager.replace_current_with_future(&tp, 2, 0).unwrap();
        drop((current, future));
        wait_until_no_subdirs(&dirs[from]);
        manager.delete(&tp).unwrap();
        wait_until_no_subdirs(&dirs[1 - from]);
    }

    #[test]
    fn unclean_reopen_recovers_and_periodic_work_runs() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let tp = TopicPartition::new("t", 0);
        let retention = LogConfig {
            retention_ms: 1_000,
            flush_ms: 100,
            ..config()
        };
        let log = manager.get_or_create(&tp, retention.clone(), 0).unwrap();
        for i in 0..30 {
            log.append_as_leader(&simple(2, 100, i), 0, 0).unwrap();
        }
        let leo = log.log_end_offset();
        let active = *log.segment_base_offsets().last().unwrap();
        // The rolls' fsyncs run on the manager's flusher thread; the recovery point follows.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while log.recovery_point() < active {
            assert!(
                std::time::Instant::now() < deadline,
                "the rolled segments were never flushed"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(log.recovery_point(), active);
        manager.run_periodic(50, true).unwrap();
        assert_eq!(log.recovery_point(), active);
        manager.run_periodic(150, false).unwrap(); // flush.ms elapsed
        assert_eq!(log.recovery_point(), leo);
        manager.run_periodic(60_150, false).unwrap(); // retention not due: nothing deleted
        assert_eq!(log.log_start_offset(), 0);
        manager.run_periodic(60_150, true).unwrap(); // retention: everything is older than 1 s
        assert_eq!(log.log_start_offset(), leo);
        assert_eq!(
            std::fs::read_to_string(dirs[0].join(LOG_START_OFFSET_CHECKPOINT_FILE)).unwrap(),
            format!("0\n0\n")
        );
        drop(log);
        drop(manager); // no shutdown
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let log = manager.get(&tp).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (leo, leo));
    }

    fn copy_all(from: &Log, to: &Log) {
        while to.log_end_offset() < from.log_end_offset() {
            let data = from
                .read(to.log_end_offset(), 1000, i64::MAX, true)
                .unwrap();
            to.append_as_follower(&data.records).unwrap();
        }
    }

    fn subdirs(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A future log in the other dir, filled from the current one, replaces it: same offsets,
    /// epochs (one registered without batches too), log start offset and high watermark; the
    /// old dir is gone, the old log refuses writes but still reads, and a reopen finds the log
    /// in its new dir.
    #[test]
    fn a_caught_up_future_log_replaces_the_current_one() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let tp = TopicPartition::new("t", 0);
        let current = manager.get_or_create(&tp, config(), 0).unwrap();
        for i in 0..40 {
            current.append_as_leader(&simple(2, 100, i), 1, 0).unwrap();
        }
        current.update_high_watermark(80);
        current.delete_records_before(10).unwrap();
        current.assign_epoch_start_offset(2, 80).unwrap();
        assert_eq!(manager.dir_index_of(&tp), Some(0));
        assert_eq!(manager.log_dir_index(dirs[1].to_str().unwrap()), Some(1));
        assert_eq!(
            manager.log_dir_index("d2"),
            None,
            "relative paths are not log dirs"
        );

        let future = manager
            .create_future(&tp, 1, config(), current.log_start_offset(), 0)
            .unwrap();
        let names = subdirs(&dirs[1]);
        assert!(
            names[0].starts_with("t-0.") && names[0].ends_with("-future"),
            "{names:?}"
        );
        assert!(Arc::ptr_eq(
            &manager.create_future(&tp, 1, config(), 0, 0).unwrap(),
            &future
        ));
        copy_all(&current, &future);
        let log = manager.replace_current_with_future(&tp, 80, 0).unwrap();
        assert_eq!(manager.dir_index_of(&tp), Some(1));
        assert!(manager.future(&tp).is_none());
        assert_eq!(log.dir(), dirs[1].join("t-0"));
        wait_until_no_subdirs(&dirs[0]);
        assert_eq!(subdirs(&dirs[1]), vec!["t-0".to_string()]);
        assert_eq!(
            (
                log.log_start_offset(),
                log.log_end_offset(),
                log.latest_epoch()
            ),
            (10, 80, Some(2))
        );
        assert_eq!(log.epoch_for_offset(20), Some(1));
        assert!(current.append_as_leader(&simple(1, 10, 0), 2, 0).is_err());
        assert_eq!(
            current.read(70, 1, i64::MAX, true).unwrap().records,
            log.read(70, 1, i64::MAX, true).unwrap().records,
            "the replaced log still reads what it held"
        );
        log.append_as_leader(&simple(2, 100, 0), 2, 0).unwrap();
        manager.shutdown().unwrap();
        drop((manager, log, current, future));

        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        assert_eq!(manager.dir_index_of(&tp), Some(1));
        let log = manager.get(&tp).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (10, 82));
        log.verify_indexes().unwrap();
    }

    /// Opening drops a future log and a replaced log left behind, and of a partition found in
    /// two dirs keeps the longer copy.
    #[test]
    fn opening_drops_unfinished_moves_and_resolves_a_partition_in_two_dirs() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let moving = TopicPartition::new("m", 0);
        let current = manager.get_or_create(&moving, config(), 0).unwrap();
        for i in 0..5 {
            current.append_as_leader(&simple(1, 10, i), 0, 0).unwrap();
        }
        let future = manager.create_future(&moving, 1, config(), 0, 0).unwrap();
        copy_all(&current, &future);
        manager.shutdown().unwrap();
        drop((manager, current, future));
        std::fs::create_dir_all(dirs[0].join("x-0.0123abcd-delete")).unwrap();
        // The same partition in both dirs, the copy in d2 one batch shorter.
        let twice = TopicPartition::new("twice", 0);
        for (dir, batches) in [(&dirs[0], 3), (&dirs[1], 2)] {
            let log = Log::open(&dir.join("twice-0"), config(), 0, true, 0).unwrap();
            for i in 0..batches {
                log.append_as_leader(&simple(1, 10, i), 0, 0).unwrap();
            }
            log.close().unwrap();
        }

        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        // The `-delete` dir is never loaded; the log-deleter thread removes it.
        wait_until_no_delete_dirs(&dirs[0]);
        assert_eq!(
            subdirs(&dirs[0]),
            vec!["m-0".to_string(), "twice-0".to_string()]
        );
        assert_eq!(subdirs(&dirs[1]), Vec::<String>::new());
        assert_eq!(manager.get(&moving).unwrap().log_end_offset(), 5);
        assert!(manager.future_logs().is_empty());
        assert_eq!(manager.dir_index_of(&twice), Some(0));
        assert_eq!(manager.get(&twice).unwrap().log_end_offset(), 3);
    }

    /// A dir where a log had an I/O error is offline for moves; a cancelled future log is
    /// removed with its dir; a preferred dir places a partition created later.
    #[test]
    fn offline_dirs_cancelled_futures_and_preferred_dirs() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d1"), root.path().join("d2")];
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        manager.on_log_dir_failure(Arc::new(|_: &Path, _: &str| {}));
        let a = TopicPartition::new("a", 0);
        let later = TopicPartition::new("later", 0);
        manager.get_or_create(&a, config(), 0).unwrap();
        manager.set_preferred_dir(&later, 0);
        manager.get_or_create(&later, config(), 0).unwrap();
        assert_eq!(
            manager.dir_index_of(&later),
            Some(0),
            "preferred over the emptier dir"
        );

        manager.create_future(&a, 1, config(), 0, 0).unwrap();
        assert_eq!(subdirs(&dirs[1]).len(), 1);
        manager.delete_future(&a).unwrap();
        wait_until_no_subdirs(&dirs[1]);

        assert!(manager.is_log_dir_online(0) && manager.is_log_dir_online(1));
        let log = manager.get(&later).unwrap();
        std::fs::remove_dir_all(log.dir()).unwrap();
        let failed = (0..100).any(|i| log.append_as_leader(&simple(2, 100, i), 1, 0).is_err());
        assert!(failed);
        assert!(!manager.is_log_dir_online(0));
        assert!(manager.is_log_dir_online(1));
    }

    #[test]
    fn dir_names_that_are_not_logs_are_ignored() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        std::fs::create_dir_all(dir.join("t-0.abcdef-delete")).unwrap();
        std::fs::create_dir_all(dir.join("not_a_log")).unwrap();
        std::fs::write(dir.join("meta.properties"), "node.id=1\n").unwrap();
        let manager = LogManager::open(&[dir], config(), 0).unwrap();
        assert!(manager.logs().is_empty());
    }

    /// Far more logs than the pool keeps open: each is written (enough for index entries) and
    /// read back, the descriptors and maps stay within the bounds throughout (reopening after
    /// a clean shutdown too, which checks every index), and every log still holds its records.
    #[test]
    fn more_logs_than_the_handle_bounds_are_written_read_and_reopened() {
        let root = tempfile::tempdir().unwrap();
        let dirs = vec![root.path().join("d")];
        let limits = HandleLimits {
            open_log_files_max: 16,
            index_maps_max: 16,
        };
        let manager = LogManager::open_with_limits(
            &dirs,
            config(),
            0,
            limits,
            RECOVERY_THREADS_PER_DIR_DEFAULT,
        )
        .unwrap();
        let tps: Vec<_> = (0..100).map(|p| TopicPartition::new("wide", p)).collect();
        for round in 0..3 {
            for tp in &tps {
                let log = manager.get_or_create(tp, config(), 0).unwrap();
                log.append_as_leader(&simple(2, 100, round), 1, 0).unwrap();
                let stats = manager.handle_stats();
                assert!(
                    stats.open_log_files <= 16 && stats.index_maps <= 16,
                    "{stats:?}"
                );
            }
        }
        for tp in &tps {
            let log = manager.get(tp).unwrap();
            let read = log.read(2, 1 << 20, i64::MAX, false).unwrap();
            assert_eq!(read.first_batch_offset, Some(2), "{tp}");
            log.verify_indexes().unwrap();
        }
        assert!(manager.handle_stats().evictions > 100);
        manager.shutdown().unwrap();
        drop(manager);

        let manager = LogManager::open_with_limits(
            &dirs,
            config(),
            0,
            limits,
            RECOVERY_THREADS_PER_DIR_DEFAULT,
        )
        .unwrap();
        let stats = manager.handle_stats();
        assert!(
            stats.open_log_files <= 16 && stats.index_maps <= 16,
            "{stats:?}"
        );
        assert!(stats.index_map_opens >= 100, "{stats:?}");
        for tp in &tps {
            let log = manager.get(tp).unwrap();
            assert_eq!(log.log_end_offset(), 6);
            let read = log.read(0, 1 << 20, i64::MAX, false).unwrap();
            assert_eq!(crate::batch::BatchIter::new(&read.records).count(), 3);
        }
        let stats = manager.handle_stats();
        assert!(
            stats.open_log_files <= 16 && stats.index_maps <= 16,
            "{stats:?}"
        );
    }
}
