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
//! Not here: `meta.properties` (the broker's), per-topic config storage (the caller passes a
//! config when it creates a log and updates it with `Log::update_config`), moving logs between
//! directories.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::checkpoint::{
    CheckpointFile, OffsetCheckpointEntry, LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use crate::config::{LogConfig, TopicPartition};
use crate::error::{IoContext, Result, StorageError};
use crate::log::{sync_dir, Log, LogDirFailureHook};

/// Kafka's clean-shutdown marker file in each log directory.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// `log.flush.offset.checkpoint.interval.ms` and `log.flush.start.offset.checkpoint.interval.ms`
/// defaults: how often `run_periodic` writes the recovery-point and log-start-offset checkpoints.
pub const OFFSET_CHECKPOINT_INTERVAL_MS: i64 = 60_000;

struct Entry {
    dir_index: usize,
    log: Arc<Log>,
}

pub struct LogManager {
    log_dirs: Vec<PathBuf>,
    default_config: LogConfig,
    logs: RwLock<HashMap<TopicPartition, Entry>>,
    /// Serialises log creation, deletion and checkpoint writes.
    admin: Mutex<()>,
    last_checkpoint_ms: Mutex<i64>,
    /// Told when a log goes offline after an I/O error ([`LogManager::on_log_dir_failure`]).
    failure_hook: Mutex<Option<LogDirFailureHook>>,
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
    /// Opens every log found in `log_dirs` (creating missing directories).
    pub fn open(
        log_dirs: &[PathBuf],
        default_config: LogConfig,
        now_ms: i64,
    ) -> Result<LogManager> {
        let mut logs = HashMap::new();
        for (dir_index, dir) in log_dirs.iter().enumerate() {
            std::fs::create_dir_all(dir).at(dir)?;
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            let clean = marker.exists();
            let recovery_points = read_offsets(dir, RECOVERY_POINT_CHECKPOINT_FILE)?;
            let log_start_offsets = read_offsets(dir, LOG_START_OFFSET_CHECKPOINT_FILE)?;
            for entry in std::fs::read_dir(dir).at(dir)? {
                let entry = entry.at(dir)?;
                if !entry.file_type().at(&entry.path())?.is_dir() {
                    continue;
                }
                let Some(tp) = entry
                    .file_name()
                    .to_str()
                    .and_then(TopicPartition::parse_dir_name)
                else {
                    continue;
                };
                let recovery_point = recovery_points.get(&tp).copied().unwrap_or(0);
                let log = Log::open(
                    &entry.path(),
                    default_config.clone(),
                    recovery_point,
                    clean,
                    now_ms,
                )?;
                if let Some(&lso) = log_start_offsets.get(&tp) {
                    if lso > log.log_start_offset() {
                        log.maybe_increment_log_start_offset(lso)?;
                    }
                }
                tracing::info!(partition = %tp, log_end_offset = log.log_end_offset(), clean, "loaded log");
                if logs
                    .insert(
                        tp.clone(),
                        Entry {
                            dir_index,
                            log: Arc::new(log),
                        },
                    )
                    .is_some()
                {
                    return Err(StorageError::io(
                        entry.path(),
                        std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            format!("{tp} is in two log dirs"),
                        ),
                    ));
                }
            }
            if clean {
                std::fs::remove_file(&marker).at(&marker)?;
                sync_dir(dir)?;
            }
        }
        Ok(LogManager {
            log_dirs: log_dirs.to_vec(),
            default_config,
            logs: RwLock::new(logs),
            admin: Mutex::new(()),
            last_checkpoint_ms: Mutex::new(now_ms),
            failure_hook: Mutex::new(None),
        })
    }

    /// Installs `hook`, told (log dir, error) whenever a log — open now or created later — goes
    /// offline after an I/O error, as Kafka's logs report to its `LogDirFailureChannel`. The
    /// caller decides what a failed dir means (the broker halts once every dir has failed).
    pub fn on_log_dir_failure(&self, hook: LogDirFailureHook) {
        let _admin = self.admin.lock();
        *self.failure_hook.lock() = Some(hook.clone());
        for e in self.logs.read().values() {
            e.log
                .set_failure_hook(self.log_dirs[e.dir_index].clone(), hook.clone());
        }
    }

    pub fn log_dirs(&self) -> &[PathBuf] {
        &self.log_dirs
    }
    pub fn default_config(&self) -> &LogConfig {
        &self.default_config
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
        if let Some(log) = self.get(tp) {
            return Ok(log);
        }
        let _admin = self.admin.lock();
        if let Some(log) = self.get(tp) {
            return Ok(log);
        }
        let dir_index = {
            let logs = self.logs.read();
            let mut counts = vec![0usize; self.log_dirs.len()];
            for e in logs.values() {
                counts[e.dir_index] += 1;
            }
            (0..self.log_dirs.len())
                .min_by_key(|&i| counts[i])
                .expect("at least one log dir")
        };
        let dir = self.log_dirs[dir_index].join(tp.dir_name());
        let log = Arc::new(Log::open(&dir, config, 0, true, now_ms)?);
        if let Some(hook) = self.failure_hook.lock().clone() {
            log.set_failure_hook(self.log_dirs[dir_index].clone(), hook);
        }
        sync_dir(&self.log_dirs[dir_index])?;
        self.logs.write().insert(
            tp.clone(),
            Entry {
                dir_index,
                log: log.clone(),
            },
        );
        Ok(log)
    }

    pub fn logs(&self) -> Vec<(TopicPartition, Arc<Log>)> {
        let mut all: Vec<_> = self
            .logs
            .read()
            .iter()
            .map(|(tp, e)| (tp.clone(), e.log.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Removes the log and its directory (DeleteTopics, or a replica moved away).
    pub fn delete(&self, tp: &TopicPartition) -> Result<()> {
        let _admin = self.admin.lock();
        let Some(entry) = self.logs.write().remove(tp) else {
            return Ok(());
        };
        entry.log.delete()
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

    /// Writes `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` in every
    /// log dir. Offline logs are left out (they are recovered from scratch next time).
    pub fn checkpoint_recovery_points_and_log_start_offsets(&self) -> Result<()> {
        let _admin = self.admin.lock();
        for (dir, logs) in self.log_dirs.iter().zip(self.logs_by_dir()) {
            let online: Vec<_> = logs.iter().filter(|(_, log)| !log.is_offline()).collect();
            let recovery: Vec<OffsetCheckpointEntry> = online
                .iter()
                .map(|(tp, log)| entry(tp, log.recovery_point()))
                .collect();
            checkpoint(dir, RECOVERY_POINT_CHECKPOINT_FILE).write(&recovery)?;
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
}
