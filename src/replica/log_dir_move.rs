//! Moving a replica to another log dir (AlterReplicaLogDirs, Kafka's
//! `ReplicaManager#alterReplicaLogDirs` and `ReplicaAlterLogDirsThread`).
//!
//! [`ReplicaManager::alter_replica_log_dir`] checks the destination and the partition with
//! Kafka's per-partition errors, creates the future log in the destination dir through the log
//! manager and starts one task per moving partition. The task copies the current log into the
//! future log in steps of at most [`LOG_DIR_MOVE_STEP_BYTES_MAX`], each under the partition's
//! lock ([`Partition::copy_to_future`]) on a blocking thread, paced by
//! `replica.alter.log.dirs.io.max.bytes.per.second` over all moves; the step that finds nothing
//! left to copy swaps the logs. Truncations of the current log are mirrored into the future log
//! by the partition, so the copy is always a prefix of the current log.
//!
//! Not here: resuming a move after a restart. A future log found at startup is dropped and the
//! partition stays where it was (Kafka resumes it); the operator asks again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kafkaiq_storage::{Log, TopicPartition};

use super::partition::FutureCopy;
use super::{Partition, ReplicaManager};
use crate::errors::ApiError;
use crate::limits::LOG_DIR_MOVE_STEP_BYTES_MAX;
use crate::metadata::MetadataImage;

/// `.<32 hex digits>-future` after `<topic>-<partition>` in a future log's dir name.
const FUTURE_DIR_NAME_EXTRA_BYTES: usize = 1 + 32 + "-future".len();
/// The longest file name most file systems take.
const FILE_NAME_BYTES_MAX: usize = 255;

impl ReplicaManager {
    /// Asks for the replica of `tp` on this broker to live in log dir `dir` (an absolute path).
    /// Kafka's outcomes: INVALID_TOPIC_EXCEPTION for a topic name too long for a future dir,
    /// LOG_DIR_NOT_FOUND for a dir that is not one of `log.dirs`,
    /// KAFKA_STORAGE_ERROR for an offline dir or partition; a move under way to another dir is
    /// cancelled; the dir is remembered for a partition created here later, which, not hosted
    /// yet, answers REPLICA_NOT_AVAILABLE (UNKNOWN_TOPIC_OR_PARTITION for an unknown topic);
    /// `Ok` when the replica is already there, already moving there, or now moving there.
    pub fn alter_replica_log_dir(
        self: &Arc<Self>,
        image: &MetadataImage,
        tp: &TopicPartition,
        dir: &str,
    ) -> Result<(), ApiError> {
        // Kafka refuses topics whose future dir name would pass the file name limit.
        if tp.dir_name().len() + FUTURE_DIR_NAME_EXTRA_BYTES > FILE_NAME_BYTES_MAX {
            return Err(ApiError::InvalidTopic("The topic name is too long.".into()));
        }
        let lm = &self.log_manager;
        let index = lm.log_dir_index(dir).ok_or_else(|| {
            ApiError::LogDirNotFound(format!("Log dir {dir} is not found in the config."))
        })?;
        if !lm.is_log_dir_online(index) {
            return Err(ApiError::KafkaStorageError(format!(
                "Log directory {dir} is offline"
            )));
        }
        let guard = self.moves.lock().unwrap_or_else(|e| e.into_inner());
        let hosted = self.hosted(tp);
        if let Some(p) = &hosted {
            if let Some((future_index, _)) = lm.future(tp) {
                if future_index != index {
                    tracing::info!(partition = %tp, dir, "cancelling the move to another log dir for a new destination");
                    p.set_future_log(None);
                    lm.delete_future(tp)?;
                }
            }
        }
        lm.set_preferred_dir(tp, index);
        let partition = self.partition_or_error(image, tp).map_err(|e| match e {
            ApiError::NotLeaderOrFollower => ApiError::ReplicaNotAvailable,
            other => other,
        })?;
        if lm.dir_index_of(tp) == Some(index) || lm.future(tp).is_some_and(|(i, _)| i == index) {
            return Ok(());
        }
        let current = partition.log();
        let future = lm.create_future(
            tp,
            index,
            current.config(),
            current.log_start_offset(),
            self.clock.now_ms(),
        )?;
        partition.set_future_log(Some(future.clone()));
        tracing::info!(partition = %tp, from = %current.dir().display(), to = dir, "moving replica to another log dir");
        let me = self.clone();
        drop(guard);
        let task = tokio::spawn(me.clone().run_move(partition, future));
        me.moves
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|t| !t.is_finished());
        me.moves
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
        Ok(())
    }

    /// The task of one move: copy steps until the swap, the partition's removal, a
    /// cancellation, an error or the broker's shutdown.
    async fn run_move(self: Arc<Self>, partition: Arc<Partition>, future: Arc<Log>) {
        let tp = partition.tp.clone();
        loop {
            // Read at each step: a dynamic broker config change applies to running moves.
            let rate = self
                .effective_config()
                .replica
                .alter_log_dirs_io_max_bytes_per_second;
            let step_bytes = LOG_DIR_MOVE_STEP_BYTES_MAX.min(rate.clamp(1, i64::MAX) as usize);
            if self.moves_stopped.load(Ordering::Acquire) {
                return;
            }
            let (p, f, lm) = (partition.clone(), future.clone(), self.log_manager.clone());
            let (t, now_ms) = (tp.clone(), self.clock.now_ms());
            let step = tokio::task::spawn_blocking(move || {
                p.copy_to_future(&f, step_bytes, |hw| {
                    lm.replace_current_with_future(&t, hw, now_ms)
                })
            })
            .await;
            match step {
                Ok(Ok(FutureCopy::Copied { bytes, .. })) => self.pace(bytes, rate).await,
                Ok(Ok(FutureCopy::Replaced)) => {
                    tracing::info!(partition = %tp, dir = %partition.log().dir().display(), "replica moved to another log dir");
                    return;
                }
                Ok(Ok(FutureCopy::Abandoned)) => {
                    self.drop_future(&tp, &future);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::error!(partition = %tp, error = %e, "moving replica to another log dir failed; it stays where it was");
                    partition.set_future_log(None);
                    self.drop_future(&tp, &future);
                    return;
                }
                Err(e) => {
                    tracing::error!(partition = %tp, error = %e, "log dir move step did not finish");
                    return;
                }
            }
        }
    }

    fn drop_future(&self, tp: &TopicPartition, future: &Arc<Log>) {
        if self
            .log_manager
            .future(tp)
            .is_some_and(|(_, f)| Arc::ptr_eq(&f, future))
        {
            if let Err(e) = self.log_manager.delete_future(tp) {
                tracing::warn!(partition = %tp, error = %e, "deleting an abandoned future log failed");
            }
        }
    }

    /// Waits so that every move together copies at most `rate` bytes per second.
    async fn pace(&self, bytes: usize, rate: i64) {
        if rate == i64::MAX {
            tokio::task::yield_now().await;
            return;
        }
        let cost = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let until = {
            let mut next = self.move_pacing.lock().unwrap_or_else(|e| e.into_inner());
            let now = tokio::time::Instant::now();
            let start = (*next).max(now);
            *next = start + cost;
            *next
        };
        tokio::time::sleep_until(until).await;
    }

    /// Stops every move after its current step (shutdown, before the logs are closed). A
    /// future log left behind is dropped at the next start.
    pub(super) async fn stop_moves(&self) {
        self.moves_stopped.store(true, Ordering::Release);
        let tasks = std::mem::take(&mut *self.moves.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
    }
}
