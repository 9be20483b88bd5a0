//! Temporary bridge to the parts of the `kafkaiq-storage` public API (storage/DESIGN.md) that
//! the crate does not export yet: `LogManager` and the leader-epoch methods of `Log`.
//!
//! Built only from the storage crate's own pieces (`Log`, `LeaderEpochCache`,
//! `CheckpointFile`), with the same names and signatures as the documented API, so that the
//! broker switches to the real ones by changing imports. Delete this module when the storage
//! crate exports `LogManager` and `Log::{assign_epoch_start_offset, end_offset_for_epoch,
//! epoch_for_offset}`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use kafkaiq_storage::checkpoint::{CheckpointFile, OffsetCheckpointEntry};
use kafkaiq_storage::epoch::LeaderEpochCache;
use kafkaiq_storage::{Log, LogConfig, Result, StorageError, TopicPartition};

/// `(epoch, end offset)`; `(-1, -1)` = undefined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: i64,
}

const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";

fn epoch_caches() -> &'static Mutex<HashMap<PathBuf, LeaderEpochCache>> {
    static CACHES: std::sync::OnceLock<Mutex<HashMap<PathBuf, LeaderEpochCache>>> =
        std::sync::OnceLock::new();
    CACHES.get_or_init(|| Mutex::new(HashMap::new()))
}

fn with_cache<T>(log: &Log, f: impl FnOnce(&mut LeaderEpochCache) -> T) -> Result<T> {
    let mut caches = epoch_caches().lock().unwrap_or_else(|e| e.into_inner());
    let dir = log.dir().to_path_buf();
    if !caches.contains_key(&dir) {
        let mut cache = LeaderEpochCache::open(&dir).map_err(|e| StorageError::Io {
            path: dir.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let _ = cache.truncate_from_end(log.log_end_offset());
        caches.insert(dir.clone(), cache);
    }
    Ok(f(caches.get_mut(&dir).expect("inserted above")))
}

/// The leader-epoch methods of the documented `Log` API.
pub trait LogEpochs {
    fn assign_epoch_start_offset(&self, epoch: i32, start_offset: i64) -> Result<()>;
    fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset;
    fn epoch_for_offset(&self, offset: i64) -> Option<i32>;
    fn latest_epoch(&self) -> Option<i32>;
}

impl LogEpochs for Log {
    fn assign_epoch_start_offset(&self, epoch: i32, start_offset: i64) -> Result<()> {
        with_cache(self, |c| c.assign(epoch, start_offset))?.map_err(|e| StorageError::Io {
            path: self.dir().to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(())
    }

    fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset {
        let leo = self.log_end_offset();
        with_cache(self, |c| {
            let (epoch, end_offset) = c.end_offset_for(epoch, leo);
            EpochEndOffset { epoch, end_offset }
        })
        .unwrap_or(EpochEndOffset {
            epoch: -1,
            end_offset: -1,
        })
    }

    fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        with_cache(self, |c| c.epoch_for_offset(offset))
            .ok()
            .flatten()
    }

    fn latest_epoch(&self) -> Option<i32> {
        with_cache(self, |c| c.latest_epoch()).ok().flatten()
    }
}

fn parse_partition_dir(name: &str) -> Option<TopicPartition> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(TopicPartition::new(topic, partition.parse().ok()?))
}

fn checkpoint_err(path: &Path, e: impl std::fmt::Display) -> StorageError {
    StorageError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Every log of one broker (the documented `LogManager`).
pub struct LogManager {
    dirs: Vec<PathBuf>,
    default_config: LogConfig,
    logs: RwLock<HashMap<TopicPartition, (Arc<Log>, usize)>>,
    next_dir: Mutex<usize>,
}

impl LogManager {
    pub fn open(
        log_dirs: &[PathBuf],
        default_config: LogConfig,
        now_ms: i64,
    ) -> Result<LogManager> {
        let mut logs = HashMap::new();
        for (i, dir) in log_dirs.iter().enumerate() {
            std::fs::create_dir_all(dir).map_err(|e| StorageError::Io {
                path: dir.clone(),
                source: e,
            })?;
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            let clean = marker.exists();
            let recovery: HashMap<TopicPartition, i64> =
                CheckpointFile::<OffsetCheckpointEntry>::new(dir.join(RECOVERY_POINT_CHECKPOINT))
                    .read()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|e| (TopicPartition::new(e.topic, e.partition), e.offset))
                    .collect();
            for entry in std::fs::read_dir(dir).map_err(|e| StorageError::Io {
                path: dir.clone(),
                source: e,
            })? {
                let entry = entry.map_err(|e| StorageError::Io {
                    path: dir.clone(),
                    source: e,
                })?;
                if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    continue;
                }
                let Some(tp) = entry.file_name().to_str().and_then(parse_partition_dir) else {
                    continue;
                };
                let rp = recovery.get(&tp).copied().unwrap_or(0);
                let log = Log::open(&entry.path(), default_config.clone(), rp, clean, now_ms)?;
                logs.insert(tp, (Arc::new(log), i));
            }
            if clean {
                let _ = std::fs::remove_file(&marker);
            }
        }
        Ok(LogManager {
            dirs: log_dirs.to_vec(),
            default_config,
            logs: RwLock::new(logs),
            next_dir: Mutex::new(0),
        })
    }

    pub fn default_config(&self) -> &LogConfig {
        &self.default_config
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Log>> {
        self.logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tp)
            .map(|(l, _)| l.clone())
    }

    pub fn get_or_create(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<Arc<Log>> {
        if let Some(log) = self.get(tp) {
            log.update_config(config);
            return Ok(log);
        }
        let mut logs = self.logs.write().unwrap_or_else(|e| e.into_inner());
        if let Some((log, _)) = logs.get(tp) {
            return Ok(log.clone());
        }
        let index = {
            let mut next = self.next_dir.lock().unwrap_or_else(|e| e.into_inner());
            *next = (*next + 1) % self.dirs.len();
            *next
        };
        let dir = self.dirs[index].join(format!("{}-{}", tp.topic, tp.partition));
        let log = Arc::new(Log::open(&dir, config, 0, true, now_ms)?);
        logs.insert(tp.clone(), (log.clone(), index));
        Ok(log)
    }

    pub fn logs(&self) -> Vec<(TopicPartition, Arc<Log>)> {
        self.logs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(tp, (l, _))| (tp.clone(), l.clone()))
            .collect()
    }

    pub fn delete(&self, tp: &TopicPartition) -> Result<()> {
        let removed = self
            .logs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp);
        if let Some((log, _)) = removed {
            epoch_caches()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(log.dir());
            log.delete()?;
        }
        Ok(())
    }

    fn per_dir<F: Fn(&TopicPartition, &Log) -> Option<i64>>(
        &self,
        file: &str,
        value: F,
    ) -> Result<()> {
        let logs = self.logs.read().unwrap_or_else(|e| e.into_inner());
        for (i, dir) in self.dirs.iter().enumerate() {
            let entries: Vec<OffsetCheckpointEntry> = logs
                .iter()
                .filter(|(_, (_, d))| *d == i)
                .filter_map(|(tp, (log, _))| {
                    value(tp, log).map(|offset| OffsetCheckpointEntry {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        offset,
                    })
                })
                .collect();
            let path = dir.join(file);
            CheckpointFile::new(&path)
                .write(entries.iter())
                .map_err(|e| checkpoint_err(&path, e))?;
        }
        Ok(())
    }

    pub fn checkpoint_high_watermarks(&self, hws: &HashMap<TopicPartition, i64>) -> Result<()> {
        self.per_dir(REPLICATION_OFFSET_CHECKPOINT, |tp, _| hws.get(tp).copied())
    }

    pub fn read_high_watermarks(&self) -> Result<HashMap<TopicPartition, i64>> {
        let mut out = HashMap::new();
        for dir in &self.dirs {
            let path = dir.join(REPLICATION_OFFSET_CHECKPOINT);
            for e in CheckpointFile::<OffsetCheckpointEntry>::new(&path)
                .read()
                .map_err(|e| checkpoint_err(&path, e))?
            {
                out.insert(TopicPartition::new(e.topic, e.partition), e.offset);
            }
        }
        Ok(out)
    }

    pub fn checkpoint_recovery_points_and_log_start_offsets(&self) -> Result<()> {
        self.per_dir(RECOVERY_POINT_CHECKPOINT, |_, log| {
            Some(log.recovery_point())
        })?;
        self.per_dir(LOG_START_OFFSET_CHECKPOINT, |_, log| {
            Some(log.log_start_offset())
        })
    }

    pub fn run_periodic(&self, now_ms: i64) -> Result<()> {
        for (_, log) in self.logs() {
            log.delete_old_segments(now_ms)?;
            log.flush_if_due(now_ms)?;
        }
        Ok(())
    }

    pub fn shutdown(&self) -> Result<()> {
        for (_, log) in self.logs() {
            log.close()?;
        }
        self.checkpoint_recovery_points_and_log_start_offsets()?;
        for dir in &self.dirs {
            let marker = dir.join(CLEAN_SHUTDOWN_FILE);
            std::fs::write(&marker, b"").map_err(|e| StorageError::Io {
                path: marker.clone(),
                source: e,
            })?;
        }
        Ok(())
    }
}
