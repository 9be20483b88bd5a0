//! One partition hosted by this broker: its log, its role and leadership state, and its high
//! watermark.
//!
//! A `Partition` is created and updated by the [`super::ReplicaManager`] from metadata images;
//! handlers reach it through the manager. State changes happen under one `std::sync::Mutex`
//! (held for short, non-async sections only: an append holds it so that the leader epoch stamped
//! into a batch is the epoch the partition has while appending). Decisions are delegated to
//! [`super::decisions`]. Delayed operations (long-polling fetches, acks=all produces) register
//! a `Notify` here and are woken when the high watermark or log end offset moves.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use kafkaiq_storage::{FetchDataInfo, Log, LogAppendInfo, TopicPartition};
use tokio::sync::Notify;
use uuid::Uuid;

use super::decisions;
use crate::errors::ApiError;
use crate::limits::PARTITION_WATCHERS_PRUNE_AT;
use crate::metadata::PartitionRegistration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
}

#[derive(Debug, Clone)]
pub struct PartitionState {
    pub role: Role,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub high_watermark: i64,
    pub min_insync_replicas: i32,
}

/// A snapshot of the offsets a fetch or list-offsets answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub leader_epoch: i32,
}

/// What a read returns.
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: bytes::Bytes,
    pub offsets: Offsets,
}

pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub log: Arc<Log>,
    node_id: i32,
    state: Mutex<PartitionState>,
    watchers: Mutex<Vec<Weak<Notify>>>,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("tp", &self.tp)
            .field("state", &*self.lock())
            .finish()
    }
}

impl Partition {
    pub fn new(
        tp: TopicPartition,
        topic_id: Uuid,
        log: Arc<Log>,
        node_id: i32,
        checkpointed_high_watermark: i64,
        min_insync_replicas: i32,
    ) -> Partition {
        let hw = checkpointed_high_watermark.clamp(
            log.log_start_offset(),
            log.log_end_offset().max(log.log_start_offset()),
        );
        log.update_high_watermark(hw);
        Partition {
            tp,
            topic_id,
            log,
            node_id,
            state: Mutex::new(PartitionState {
                role: Role::Follower,
                leader: -1,
                leader_epoch: -1,
                partition_epoch: -1,
                replicas: Vec::new(),
                isr: Vec::new(),
                high_watermark: hw,
                min_insync_replicas,
            }),
            watchers: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PartitionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn state(&self) -> PartitionState {
        self.lock().clone()
    }

    pub fn set_min_insync_replicas(&self, value: i32) {
        self.lock().min_insync_replicas = value;
    }

    /// Applies a registration from a new metadata image. Becoming leader (or a new leader
    /// epoch) registers `(epoch, LEO)` in the epoch cache before any write, as Kafka's
    /// `makeLeader` does, so followers can always find where the epoch starts.
    pub fn apply_registration(&self, reg: &PartitionRegistration) -> Result<(), ApiError> {
        let mut state = self.lock();
        let becomes_leader = reg.leader == self.node_id;
        let epoch_changed = reg.leader_epoch != state.leader_epoch;
        if becomes_leader && (epoch_changed || state.role != Role::Leader) {
            assert!(
                reg.leader_epoch >= state.leader_epoch,
                "leader epoch of {} went backwards: {} -> {}",
                self.tp.topic,
                state.leader_epoch,
                reg.leader_epoch
            );
            self.log
                .assign_epoch_start_offset(reg.leader_epoch, self.log.log_end_offset())?;
            tracing::info!(
                topic = %self.tp.topic,
                partition = self.tp.partition,
                leader_epoch = reg.leader_epoch,
                log_end_offset = self.log.log_end_offset(),
                "became leader"
            );
        }
        state.role = if becomes_leader {
            Role::Leader
        } else {
            Role::Follower
        };
        state.leader = reg.leader;
        state.leader_epoch = reg.leader_epoch;
        state.partition_epoch = reg.partition_epoch;
        state.replicas = reg.replicas.clone();
        state.isr = reg.isr.clone();
        if becomes_leader {
            self.maybe_increment_high_watermark(&mut state);
        }
        drop(state);
        self.wake_watchers();
        Ok(())
    }

    fn effective_min_isr(state: &PartitionState) -> usize {
        decisions::effective_min_isr(state.min_insync_replicas, state.replicas.len())
    }

    /// Recomputes the leader's high watermark. On one node the only ISR member is the leader;
    /// remote replicas join here when followers exist.
    fn maybe_increment_high_watermark(&self, state: &mut PartitionState) -> bool {
        let new_hw = decisions::leader_high_watermark(
            state.high_watermark,
            self.log.log_end_offset(),
            &[],
            state.isr.len(),
            Self::effective_min_isr(state),
        );
        assert!(
            new_hw >= state.high_watermark,
            "high watermark of {}-{} went backwards",
            self.tp.topic,
            self.tp.partition
        );
        let moved = new_hw != state.high_watermark;
        state.high_watermark = new_hw;
        // Retention and DeleteRecords never remove data above the high watermark.
        self.log.update_high_watermark(new_hw);
        moved
    }

    fn require_leader(state: &PartitionState) -> Result<(), ApiError> {
        if state.role == Role::Leader {
            Ok(())
        } else {
            Err(ApiError::NotLeaderOrFollower)
        }
    }

    /// Appends a produce request's records as leader (Kafka's `appendRecordsToLeader`).
    pub fn append_records_to_leader(
        &self,
        records: &[u8],
        required_acks: i16,
        now_ms: i64,
    ) -> Result<LogAppendInfo, ApiError> {
        let mut state = self.lock();
        Self::require_leader(&state)?;
        if required_acks == -1 && state.isr.len() < Self::effective_min_isr(&state) {
            return Err(ApiError::NotEnoughReplicas);
        }
        let info = self
            .log
            .append_as_leader(records, state.leader_epoch, now_ms)?;
        self.maybe_increment_high_watermark(&mut state);
        drop(state);
        self.wake_watchers();
        Ok(info)
    }

    /// For a parked acks=all produce: `Some(outcome)` once the high watermark covers
    /// `required_offset`, or `Some(Err)` if this broker stopped leading.
    pub fn acks_all_outcome(&self, required_offset: i64) -> Option<Result<(), ApiError>> {
        let state = self.lock();
        if state.role != Role::Leader {
            return Some(Err(ApiError::NotLeaderOrFollower));
        }
        decisions::acks_all_outcome(
            state.high_watermark,
            required_offset,
            state.isr.len(),
            Self::effective_min_isr(&state),
        )
    }

    pub fn offsets(&self) -> Offsets {
        let state = self.lock();
        Offsets {
            log_start_offset: self.log.log_start_offset(),
            high_watermark: state.high_watermark,
            log_end_offset: self.log.log_end_offset(),
            leader_epoch: state.leader_epoch,
        }
    }

    /// Checks leadership and the client's `current_leader_epoch`, returning the current offsets.
    pub fn check_leader_and_epoch(
        &self,
        current_leader_epoch: i32,
        require_leader: bool,
    ) -> Result<Offsets, ApiError> {
        let state = self.lock();
        decisions::check_current_leader_epoch(state.leader_epoch, current_leader_epoch)?;
        if require_leader {
            Self::require_leader(&state)?;
        }
        Ok(Offsets {
            log_start_offset: self.log.log_start_offset(),
            high_watermark: state.high_watermark,
            log_end_offset: self.log.log_end_offset(),
            leader_epoch: state.leader_epoch,
        })
    }

    /// Reads whole batches from `fetch_offset`, up to the high watermark for consumers or the
    /// LEO for followers. `OFFSET_OUT_OF_RANGE` only outside `[log start, LEO]`; between the
    /// high watermark and the LEO the answer is empty.
    pub fn read(
        &self,
        fetch_offset: i64,
        current_leader_epoch: i32,
        max_bytes: usize,
        min_one_batch: bool,
        up_to_log_end: bool,
    ) -> Result<ReadResult, ApiError> {
        let offsets = self.check_leader_and_epoch(current_leader_epoch, true)?;
        if fetch_offset < offsets.log_start_offset || fetch_offset > offsets.log_end_offset {
            return Err(ApiError::OffsetOutOfRange);
        }
        let max_offset = if up_to_log_end {
            offsets.log_end_offset
        } else {
            offsets.high_watermark
        };
        if fetch_offset >= max_offset {
            return Ok(ReadResult {
                records: bytes::Bytes::new(),
                offsets,
            });
        }
        let FetchDataInfo { records, .. } =
            self.log
                .read(fetch_offset, max_bytes, max_offset, min_one_batch)?;
        Ok(ReadResult { records, offsets })
    }

    /// DeleteRecords: moves the log start offset, which may not pass the high watermark.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, ApiError> {
        let state = self.lock();
        Self::require_leader(&state)?;
        let target = if offset == -1 {
            state.high_watermark
        } else {
            offset
        };
        if target < 0 || target > state.high_watermark {
            return Err(ApiError::OffsetOutOfRange);
        }
        drop(state);
        let low = self.log.delete_records_before(target)?;
        self.wake_watchers();
        Ok(low)
    }

    pub fn high_watermark(&self) -> i64 {
        self.lock().high_watermark
    }

    /// Registers a delayed operation to be woken when this partition's offsets move.
    pub fn watch(&self, notify: &Arc<Notify>) {
        let mut watchers = self.watchers.lock().unwrap_or_else(|e| e.into_inner());
        // An operation watching several partitions re-registers with all of them after each
        // wake-up; registering once is enough.
        if watchers
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(notify)))
        {
            return;
        }
        if watchers.len() >= PARTITION_WATCHERS_PRUNE_AT {
            watchers.retain(|w| w.strong_count() > 0);
        }
        watchers.push(Arc::downgrade(notify));
    }

    /// Wakes every registered operation; each re-registers if it still has to wait.
    pub fn wake_watchers(&self) {
        let watchers =
            std::mem::take(&mut *self.watchers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in watchers {
            if let Some(n) = w.upgrade() {
                n.notify_one();
            }
        }
    }
}
