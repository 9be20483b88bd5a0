//! One partition hosted by this broker: its log, its role and leadership state, and its high
//! watermark.
//!
//! A `Partition` is created and updated by the [`super::ReplicaManager`] from metadata images
//! ([`Partition::make_leader`], [`Partition::make_follower`], [`Partition::stop`]); handlers
//! reach it through the manager. As leader it appends produce requests, keeps what each remote
//! replica's fetches told it ([`decisions::ReplicaState`]) and moves the high watermark over the
//! maximal ISR, proposes ISR changes ([`super::isr`]: expansion on a follower's fetch, shrink
//! from the expiry check) and applies the controller's answers. As follower it refuses produce
//! and leader-only reads, and takes the leader's batches as they are, for the leader epoch the
//! fetcher fetched in only ([`Partition::append_as_follower`], [`Partition::truncate_to`],
//! [`Partition::update_follower_high_watermark`]); the replica fetcher calls these.
//!
//! State changes happen under one `std::sync::Mutex` (held for short, non-async sections only:
//! an append holds it so that the leader epoch stamped into a batch is the epoch the partition
//! has while appending; reads hold it only to check leadership and take the offsets). Lock
//! order: partition state, then the log's locks; the watcher list is taken alone. Decisions are
//! delegated to [`super::decisions`]. Delayed operations (long-polling fetches, acks=all
//! produces) register a `Notify` here and are woken when the high watermark, the log end offset
//! or the role changes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use kafkaiq_storage::batch::BatchHeader;
use kafkaiq_storage::{
    EpochEndOffset, FetchDataInfo, Log, LogAppendInfo, LogPosition, TopicPartition,
};
use tokio::sync::Notify;
use uuid::Uuid;

use super::brokers::BrokerView;
use super::decisions::{self, FollowerFetch, RemoteReplica, ReplicaState};
use super::fetch_params::{FetchIsolation, FetchParams};
use super::isr::{self, AlterPartitionOutcome, CommittedPartition, IsrProposal, IsrState};
use crate::errors::ApiError;
use crate::limits::PARTITION_WATCHERS_PRUNE_AT;
use crate::metadata::{LeaderRecoveryState, PartitionRegistration};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
}

#[derive(Debug, Clone)]
pub struct PartitionState {
    pub role: Role,
    /// The leader's node id; -1 when the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<i32>,
    /// The committed ISR and any change in flight. Only a leader keeps one; a follower's is
    /// empty, as in Kafka.
    pub isr_state: IsrState,
    pub high_watermark: i64,
    pub min_insync_replicas: i32,
    /// Where the current leader epoch starts in the log; `None` unless leading.
    pub leader_epoch_start_offset: Option<i64>,
    /// Leader only: every other assigned replica and what its fetches told us (Kafka's
    /// `remoteReplicasMap`). Empty on a follower.
    pub remote_replicas: BTreeMap<i32, ReplicaState>,
    /// Follower only: how far this log was behind the leader's high watermark at the last
    /// fetch response (Kafka's fetcher lag); `None` before the first one.
    pub follower_lag: Option<i64>,
    /// Leader only: the high watermark last read for each follower's fetch, which its answer
    /// carried. A parked follower fetch is answered as soon as the high watermark passes it
    /// ([`decisions::answer_follower_fetch_now`]). Empty on a follower.
    pub high_watermark_sent: BTreeMap<i32, i64>,
    /// When the high watermark last moved (leader or follower), for the produce stage
    /// `acks_wake`: how long a parked acks=all produce took to run after the move that
    /// completed it.
    pub high_watermark_moved_at: Option<std::time::Instant>,
}

impl PartitionState {
    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        self.isr_state.isr()
    }

    /// Kafka's `maximalIsr`: the committed ISR plus any replica an in-flight expansion adds, so
    /// the high watermark already waits for a joining replica; a replica being removed counts
    /// until the controller has committed its removal.
    pub fn maximal_isr(&self) -> Vec<i32> {
        self.isr_state.maximal_isr()
    }
}

/// What the leader made of a follower's fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerFetchResult {
    /// The high watermark moved: parked produces and fetches were woken.
    pub high_watermark_moved: bool,
    /// The follower caught up: an expansion to send to the controller.
    pub expand: Option<IsrProposal>,
}

/// A partition's replication health, as metrics report it (Kafka's `UnderReplicatedPartitions`,
/// `UnderMinIsrPartitionCount`, `AtMinIsrPartitionCount` of a leader).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicationStatus {
    pub role: Role,
    /// Leader only: fewer replicas in the ISR than assigned.
    pub under_replicated: bool,
    /// Leader only: the ISR is below the effective min ISR (acks=all refused, the high
    /// watermark stopped).
    pub under_min_isr: bool,
    /// Leader only: the ISR is exactly at the effective min ISR (one more loss stops writes).
    pub at_min_isr: bool,
    /// No leader (-1 in the metadata), or this replica's log is offline.
    pub offline: bool,
}

/// A snapshot of the offsets a fetch or list-offsets answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// The high watermark, or the first offset of the earliest transaction not yet decided
    /// below it (Kafka's `lastStableOffset`): where read_committed consumers stop.
    pub last_stable_offset: i64,
    pub log_end_offset: i64,
    pub leader_epoch: i32,
}

/// An aborted transaction a read_committed read overlaps (Fetch's `AbortedTransaction`): the
/// consumer drops that producer's records from `first_offset` up to the ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// What a read returns.
#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: bytes::Bytes,
    /// The partition's offsets as they were before the read.
    pub offsets: Offsets,
    /// Set when the reader's last fetched epoch diverges from this log (Fetch v12+): no records,
    /// and the reader truncates to `end_offset`.
    pub diverging_epoch: Option<EpochEndOffset>,
    /// This replica led the partition when it was read (a consumer read on a follower is a
    /// follower read, KIP-392).
    pub as_leader: bool,
    /// A read_committed read: the aborted transactions overlapping the records returned
    /// (Kafka's `collectAbortedTransactions`); `None` at other isolation levels.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
}

/// What a leader knows when it picks a consumer's preferred read replica
/// ([`super::read_replica`]): its offsets, its committed ISR, and every follower's state from
/// that follower's fetches.
#[derive(Debug, Clone)]
pub struct LeaderReadView {
    pub offsets: Offsets,
    pub isr: Vec<i32>,
    pub followers: Vec<(i32, ReplicaState)>,
}

/// What one step of a move to another log dir did ([`Partition::copy_to_future`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FutureCopy {
    /// Copied `bytes`; the future log is `lag` offsets behind.
    Copied { bytes: usize, lag: i64 },
    /// The future log caught up and is now the partition's log.
    Replaced,
    /// The partition has no such future log any more (cancelled, or a truncation failed).
    Abandoned,
}

pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    /// The current log. It changes only when a move to another log dir completes
    /// ([`Partition::copy_to_future`]), under the state lock; everyone else reads it through
    /// [`Partition::log`].
    log: RwLock<Arc<Log>>,
    /// The log being filled in another log dir to replace `log` (AlterReplicaLogDirs): only
    /// written under the state lock, where truncations of `log` are mirrored into it.
    future_log: RwLock<Option<Arc<Log>>>,
    node_id: i32,
    /// `replica.lag.time.max.ms`: how long a replica outside the ISR counts as caught up.
    replica_lag_time_max_ms: i64,
    /// The brokers of the latest image (ISR eligibility, broker epochs).
    brokers: Arc<BrokerView>,
    next_proposal_id: AtomicU64,
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
    // The partition's identity, its log and the settings it is born with: grouping them in a
    // struct would only move the same list of fields one level down.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tp: TopicPartition,
        topic_id: Uuid,
        log: Arc<Log>,
        node_id: i32,
        checkpointed_high_watermark: i64,
        min_insync_replicas: i32,
        replica_lag_time_max_ms: i64,
        brokers: Arc<BrokerView>,
    ) -> Partition {
        let hw = checkpointed_high_watermark.clamp(
            log.log_start_offset(),
            log.log_end_offset().max(log.log_start_offset()),
        );
        log.update_high_watermark(hw);
        Partition {
            tp,
            topic_id,
            log: RwLock::new(log),
            future_log: RwLock::new(None),
            node_id,
            replica_lag_time_max_ms,
            brokers,
            next_proposal_id: AtomicU64::new(1),
            state: Mutex::new(PartitionState {
                role: Role::Follower,
                leader: -1,
                leader_epoch: -1,
                partition_epoch: -1,
                replicas: Vec::new(),
                isr_state: IsrState::committed(Vec::new(), LeaderRecoveryState::Recovered),
                high_watermark: hw,
                min_insync_replicas,
                leader_epoch_start_offset: None,
                remote_replicas: BTreeMap::new(),
                follower_lag: None,
                high_watermark_sent: BTreeMap::new(),
                high_watermark_moved_at: None,
            }),
            watchers: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PartitionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current log (a reader that took it just before a move to another log dir completed
    /// keeps reading the old one, whose files stay open).
    pub fn log(&self) -> Arc<Log> {
        self.log.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The log a move to another log dir is filling, if one is under way.
    pub fn future_log(&self) -> Option<Arc<Log>> {
        self.future_log
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Starts (`Some`) or abandons (`None`) a move to another log dir; the log manager owns
    /// the future log's files.
    pub fn set_future_log(&self, future: Option<Arc<Log>>) {
        let _state = self.lock();
        *self.future_log.write().unwrap_or_else(|e| e.into_inner()) = future;
    }

    /// One step of a move to another log dir (Kafka's `ReplicaAlterLogDirsThread`, which
    /// fetches from the local log): under the state lock, so no append or truncation of the
    /// current log runs meanwhile, copies the current log's batches from the future log's end,
    /// at most `max_bytes` (at least one batch). Once nothing is left to copy, `replace` swaps
    /// the logs (given the high watermark) and the partition continues on the new log; writes
    /// wait for that, which is the pause of a swap. `future` must be the partition's future log.
    pub fn copy_to_future(
        &self,
        future: &Arc<Log>,
        max_bytes: usize,
        replace: impl FnOnce(i64) -> Result<Arc<Log>, kafkaiq_storage::StorageError>,
    ) -> Result<FutureCopy, ApiError> {
        let state = self.lock();
        if !self.future_log().is_some_and(|f| Arc::ptr_eq(&f, future)) {
            return Ok(FutureCopy::Abandoned);
        }
        let current = self.log();
        let mut future_end = future.log_end_offset();
        if future_end > current.log_end_offset() {
            // Cannot happen while truncations are mirrored; repaired rather than trusted.
            future.truncate_to(current.log_end_offset())?;
            future_end = future.log_end_offset();
        }
        if future_end < current.log_start_offset() {
            // Retention or DeleteRecords passed the copy: start it again where the log starts.
            future.truncate_fully_and_start_at(current.log_start_offset())?;
            future_end = future.log_end_offset();
        }
        let start = current.log_start_offset();
        let follow_start = future.log_start_offset() < start && start <= future_end;
        if follow_start {
            // The log start moved (DeleteRecords, retention) behind the copy: the future log
            // follows, as Kafka's alter-log-dirs thread takes each fetch's log start offset, so
            // the swap cannot bring deleted records back and a parked DeleteRecords completes.
            future.update_high_watermark(future_end.min(state.high_watermark));
            future.delete_records_before(start)?;
        }
        let data = current.read(future_end, max_bytes, i64::MAX, true)?;
        if data.records.is_empty() {
            let new_log = replace(state.high_watermark)?;
            *self.log.write().unwrap_or_else(|e| e.into_inner()) = new_log;
            *self.future_log.write().unwrap_or_else(|e| e.into_inner()) = None;
            drop(state);
            self.wake_watchers();
            return Ok(FutureCopy::Replaced);
        }
        if let Some(first) = data.first_batch_offset {
            if first < future_end && future_end == future.log_start_offset() {
                // The log starts inside its first batch (DeleteRecords): so does the copy.
                future.truncate_fully_and_start_at(first)?;
            }
        }
        future.append_as_follower(&data.records)?;
        drop(state);
        if follow_start {
            self.wake_watchers();
        }
        Ok(FutureCopy::Copied {
            bytes: data.records.len(),
            lag: current.log_end_offset() - future.log_end_offset(),
        })
    }

    /// A truncation of the current log, done to the future log too (called under the state
    /// lock), so the future log stays a prefix of the current one. A future log that fails it
    /// is abandoned; the move task then removes it.
    fn mirror_truncation(&self, offset: i64, fully: bool) {
        let Some(future) = self.future_log() else {
            return;
        };
        let r = if fully {
            future.truncate_fully_and_start_at(offset)
        } else if future.log_end_offset() > offset {
            future.truncate_to(offset)
        } else {
            Ok(())
        };
        if let Err(e) = r {
            tracing::warn!(topic = %self.tp.topic, partition = self.tp.partition, error = %e, "truncating the future log failed; the move to another log dir is abandoned");
            *self.future_log.write().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    pub fn state(&self) -> PartitionState {
        self.lock().clone()
    }

    /// A topic config change: applies to the current log and to a future log being filled by a
    /// move between log dirs, under the state lock so a swap cannot come between the two and
    /// leave the partition on a log with the old config.
    pub fn update_log_config(&self, config: kafkaiq_storage::LogConfig) {
        let _state = self.lock();
        if let Some(future) = self.future_log() {
            future.update_config(config.clone());
        }
        self.log().update_config(config);
    }

    pub fn set_min_insync_replicas(&self, value: i32) {
        self.lock().min_insync_replicas = value;
    }

    /// Whether `replica_id` is in the committed ISR (Kafka's `inSyncReplicaIds`).
    pub fn in_sync(&self, replica_id: i32) -> bool {
        self.lock().isr().contains(&replica_id)
    }

    /// What this leader knows of a remote replica, if it is one.
    pub fn remote_replica(&self, replica_id: i32) -> Option<ReplicaState> {
        self.lock().remote_replicas.get(&replica_id).copied()
    }

    /// Kafka's `Partition#makeLeader`: this node leads the partition under `reg`. A new leader
    /// epoch registers `(epoch, LEO)` in the epoch cache before any write, so followers can
    /// always find where the epoch starts, and resets what is known of every remote replica.
    /// A registration older than the one applied (lower partition epoch) is skipped. Returns
    /// whether this node was not leading before.
    pub fn make_leader(&self, reg: &PartitionRegistration, now_ms: i64) -> Result<bool, ApiError> {
        let mut state = self.lock();
        if reg.partition_epoch < state.partition_epoch {
            tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, partition_epoch = reg.partition_epoch, current = state.partition_epoch, "skipped a stale become-leader");
            return Ok(false);
        }
        self.assert_leader_epoch_not_backwards(&state, reg);
        if let Some(latest) = self
            .log()
            .latest_epoch()
            .filter(|&latest| reg.leader_epoch < latest)
        {
            // Leading at an epoch the log has already seen superseded would pop the newer
            // entries off the epoch cache (`assign` drops every entry at or above it), and
            // followers would then find no divergence where there is one. The metadata behind
            // such a registration is stale; a newer image follows.
            tracing::warn!(topic = %self.tp.topic, partition = self.tp.partition, leader_epoch = reg.leader_epoch, log_latest_epoch = latest, "refused to become leader at a leader epoch below the log's latest");
            return Ok(false);
        }
        let is_new_leader = state.role != Role::Leader;
        let is_new_leader_epoch = reg.leader_epoch > state.leader_epoch;
        let start_offset = self.log().log_end_offset();
        if is_new_leader_epoch {
            // First, so that a failure leaves the partition as it was.
            self.log()
                .assign_epoch_start_offset(reg.leader_epoch, start_offset)?;
        }
        Self::update_assignment(&mut state, reg, self.node_id, true);
        if is_new_leader_epoch {
            for (id, replica) in state.remote_replicas.iter_mut() {
                *replica = decisions::reset_replica_state(
                    replica,
                    now_ms,
                    start_offset,
                    is_new_leader,
                    reg.isr.contains(id),
                );
            }
            state.leader_epoch_start_offset = Some(start_offset);
            tracing::info!(
                topic = %self.tp.topic,
                partition = self.tp.partition,
                leader_epoch = reg.leader_epoch,
                log_end_offset = start_offset,
                "became leader"
            );
        }
        if is_new_leader_epoch {
            state.high_watermark_sent.clear();
        }
        state.role = Role::Leader;
        state.leader = self.node_id;
        state.leader_epoch = reg.leader_epoch;
        state.partition_epoch = reg.partition_epoch;
        self.maybe_increment_high_watermark(&mut state, now_ms);
        drop(state);
        self.wake_watchers();
        Ok(is_new_leader)
    }

    /// Kafka's `Partition#makeFollower`: another node (or none, leader -1) leads under `reg`.
    /// Produce and leader-only reads are refused from here on and parked operations are woken
    /// to find that out. A stale registration is skipped. Returns whether the leader epoch
    /// changed, which is when a fetcher must (re)start from this log.
    pub fn make_follower(&self, reg: &PartitionRegistration) -> Result<bool, ApiError> {
        let mut state = self.lock();
        if reg.partition_epoch < state.partition_epoch {
            tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, partition_epoch = reg.partition_epoch, current = state.partition_epoch, "skipped a stale become-follower");
            return Ok(false);
        }
        self.assert_leader_epoch_not_backwards(&state, reg);
        let is_new_leader_epoch = reg.leader_epoch > state.leader_epoch;
        if state.role == Role::Leader || is_new_leader_epoch {
            tracing::info!(
                topic = %self.tp.topic,
                partition = self.tp.partition,
                leader = reg.leader,
                leader_epoch = reg.leader_epoch,
                log_end_offset = self.log().log_end_offset(),
                high_watermark = state.high_watermark,
                "became follower"
            );
        }
        Self::update_assignment(&mut state, reg, self.node_id, false);
        state.role = Role::Follower;
        state.leader = reg.leader;
        state.leader_epoch = reg.leader_epoch;
        state.partition_epoch = reg.partition_epoch;
        state.leader_epoch_start_offset = None;
        state.high_watermark_sent.clear();
        if is_new_leader_epoch {
            state.follower_lag = None;
        }
        drop(state);
        self.wake_watchers();
        Ok(is_new_leader_epoch)
    }

    /// The partition is no longer hosted here (deleted, or its replica moved away): it stops
    /// leading, so whoever still holds it (a parked produce or fetch) is told
    /// NOT_LEADER_OR_FOLLOWER rather than waiting on a log about to be deleted.
    pub fn stop(&self) {
        let mut state = self.lock();
        state.role = Role::Follower;
        state.leader = -1;
        state.isr_state = IsrState::committed(Vec::new(), LeaderRecoveryState::Recovered);
        state.remote_replicas.clear();
        state.leader_epoch_start_offset = None;
        drop(state);
        self.wake_watchers();
    }

    fn assert_leader_epoch_not_backwards(
        &self,
        state: &PartitionState,
        reg: &PartitionRegistration,
    ) {
        assert!(
            reg.leader_epoch >= state.leader_epoch,
            "leader epoch of {}-{} went backwards: {} -> {}",
            self.tp.topic,
            self.tp.partition,
            state.leader_epoch,
            reg.leader_epoch
        );
    }

    /// Kafka's `updateAssignmentAndIsr`: a leader tracks every other assigned replica (keeping
    /// what it knows of those it tracked already) and the ISR; a follower tracks neither.
    fn update_assignment(
        state: &mut PartitionState,
        reg: &PartitionRegistration,
        node_id: i32,
        is_leader: bool,
    ) {
        state.replicas = reg.replicas.clone();
        if is_leader {
            state
                .remote_replicas
                .retain(|id, _| reg.replicas.contains(id));
            for &id in reg.replicas.iter().filter(|&&id| id != node_id) {
                state
                    .remote_replicas
                    .entry(id)
                    .or_insert(ReplicaState::UNKNOWN);
            }
            // A new registration replaces whatever change was in flight: its answer, if it
            // comes, is for a state that is gone (Kafka's "partitionState != proposedIsrState").
            state.isr_state = IsrState::committed(reg.isr.clone(), reg.leader_recovery_state);
        } else {
            state.remote_replicas.clear();
            state.isr_state = IsrState::committed(Vec::new(), reg.leader_recovery_state);
        }
    }

    fn effective_min_isr(state: &PartitionState) -> usize {
        decisions::effective_min_isr(state.min_insync_replicas, state.replicas.len())
    }

    /// Recomputes the leader's high watermark over its own log end offset and every remote
    /// replica that counts: those in the maximal ISR, and those caught up enough to join it and
    /// eligible to (Kafka's `shouldWaitForReplicaToJoinIsr`). Returns whether it moved.
    fn maybe_increment_high_watermark(&self, state: &mut PartitionState, now_ms: i64) -> bool {
        let leader_log_end_offset = self.log().log_end_offset();
        let maximal_isr = state.maximal_isr();
        let brokers = self.brokers.get();
        let remotes = state
            .remote_replicas
            .iter()
            .map(|(id, replica)| RemoteReplica {
                log_end_offset: replica.log_end_offset,
                counts_for_high_watermark: decisions::counts_for_high_watermark(
                    maximal_isr.contains(id),
                    isr::isr_eligible(brokers.broker(*id), replica.broker_epoch),
                    replica,
                    leader_log_end_offset,
                    now_ms,
                    self.replica_lag_time_max_ms,
                ),
            });
        let new_hw = decisions::leader_high_watermark(
            state.high_watermark,
            leader_log_end_offset,
            remotes,
            state.isr().len(),
            Self::effective_min_isr(state),
        );
        assert!(
            new_hw >= state.high_watermark,
            "high watermark of {}-{} went backwards",
            self.tp.topic,
            self.tp.partition
        );
        let moved = new_hw != state.high_watermark;
        if moved {
            state.high_watermark_moved_at = Some(std::time::Instant::now());
        }
        state.high_watermark = new_hw;
        // Retention and DeleteRecords never remove data above the high watermark.
        self.log().update_high_watermark(new_hw);
        moved
    }

    /// A proposal of `isr` in this partition's current epochs, each member with the broker
    /// epoch it fetched with (this node: its own registration's), -1 when unknown (Kafka's
    /// `addBrokerEpochToIsr`).
    fn proposal(
        &self,
        state: &PartitionState,
        isr: Vec<i32>,
        leader_recovery_state: LeaderRecoveryState,
    ) -> IsrProposal {
        let brokers = self.brokers.get();
        IsrProposal {
            id: self.next_proposal_id.fetch_add(1, Ordering::Relaxed),
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            isr_with_epochs: isr
                .into_iter()
                .map(|id| {
                    let epoch = if id == self.node_id {
                        brokers.broker_epoch(id)
                    } else {
                        state
                            .remote_replicas
                            .get(&id)
                            .and_then(|r| r.broker_epoch)
                            .unwrap_or(-1)
                    };
                    (id, epoch)
                })
                .collect(),
            leader_recovery_state,
        }
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
        self.append_records_to_leader_in_epoch(
            records,
            required_acks,
            now_ms,
            kafkaiq_storage::TxnVerification::Unchecked,
        )
        .map(|(info, _)| info)
    }

    /// [`Partition::append_records_to_leader`], also returning the leader epoch the records
    /// were written in, for [`Partition::acks_all_outcome_in_epoch`]. acks=-1 with the committed
    /// ISR below the effective min ISR is refused before anything is written.
    pub fn append_records_to_leader_in_epoch(
        &self,
        records: &[u8],
        required_acks: i16,
        now_ms: i64,
        verification: kafkaiq_storage::TxnVerification,
    ) -> Result<(LogAppendInfo, i32), ApiError> {
        let mut state = self.lock();
        Self::require_leader(&state)?;
        if required_acks == -1 && state.isr().len() < Self::effective_min_isr(&state) {
            return Err(ApiError::NotEnoughReplicas);
        }
        let info = self.log().append_as_leader_checked(
            records,
            state.leader_epoch,
            now_ms,
            verification,
        )?;
        self.maybe_increment_high_watermark(&mut state, now_ms);
        let epoch = state.leader_epoch;
        drop(state);
        self.wake_watchers();
        Ok((info, epoch))
    }

    /// Writes a transaction marker as leader (what WriteTxnMarkers asks of a partition leader),
    /// returning the offset after it and the leader epoch it was written in, for
    /// [`Partition::acks_all_outcome_in_epoch`]: markers are written with acks=all.
    pub fn append_txn_marker_as_leader(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: kafkaiq_storage::batch::EndTxnMarker,
        now_ms: i64,
    ) -> Result<(i64, i32), ApiError> {
        let mut state = self.lock();
        Self::require_leader(&state)?;
        let info = self.log().append_end_txn_marker_as_leader(
            producer_id,
            producer_epoch,
            marker,
            state.leader_epoch,
            now_ms,
        )?;
        self.maybe_increment_high_watermark(&mut state, now_ms);
        let epoch = state.leader_epoch;
        drop(state);
        self.wake_watchers();
        Ok((info.last_offset + 1, epoch))
    }

    /// A follower's log is written only by the fetcher of the current leader epoch: a fetcher
    /// racing with a leadership change must not write into a leader's log, nor one fetching in
    /// an epoch that has ended write into the next epoch's.
    fn require_follower(state: &PartitionState, leader_epoch: i32) -> Result<(), ApiError> {
        if state.role != Role::Follower {
            Err(ApiError::NotLeaderOrFollower)
        } else if state.leader_epoch != leader_epoch {
            Err(ApiError::FencedLeaderEpoch)
        } else {
            Ok(())
        }
    }

    /// Appends the leader's batches as they are, offsets and leader epochs kept (Kafka's
    /// `appendRecordsToFollowerOrFutureReplica`), if this node still follows in `leader_epoch`.
    /// If this log is empty and the leader's first batch straddles our start offset (the
    /// leader's log start moved inside a batch through DeleteRecords), the log restarts at that
    /// batch's base offset first, as in Kafka.
    pub fn append_as_follower(
        &self,
        records: &[u8],
        leader_epoch: i32,
    ) -> Result<LogAppendInfo, ApiError> {
        let state = self.lock();
        Self::require_follower(&state, leader_epoch)?;
        let log_end_offset = self.log().log_end_offset();
        if let Ok(first) = BatchHeader::parse(records) {
            if log_end_offset == self.log().log_start_offset()
                && first.base_offset < log_end_offset
                && first.last_offset() >= log_end_offset
            {
                tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, base_offset = first.base_offset, log_start_offset = log_end_offset, "first batch from the leader starts below the log start offset; restarting the log there");
                self.log().truncate_fully_and_start_at(first.base_offset)?;
                self.mirror_truncation(first.base_offset, true);
            }
        }
        let info = self.log().append_as_follower(records)?;
        drop(state);
        self.wake_watchers();
        Ok(info)
    }

    /// Kafka's `Partition#truncateTo` for a follower whose log diverged from the leader's:
    /// removes every batch at or past `offset` (and epochs starting there). The high watermark
    /// follows the log end offset down if it was above it.
    pub fn truncate_to(&self, offset: i64, leader_epoch: i32) -> Result<(), ApiError> {
        let mut state = self.lock();
        Self::require_follower(&state, leader_epoch)?;
        self.log().truncate_to(offset)?;
        self.mirror_truncation(offset, false);
        self.clamp_follower_high_watermark(&mut state);
        drop(state);
        self.wake_watchers();
        Ok(())
    }

    /// Kafka's `Partition#truncateFullyAndStartAt`: a follower whose fetch offset the leader no
    /// longer has starts again, empty, at `offset`.
    pub fn truncate_fully_and_start_at(
        &self,
        offset: i64,
        leader_epoch: i32,
    ) -> Result<(), ApiError> {
        let mut state = self.lock();
        Self::require_follower(&state, leader_epoch)?;
        self.log().truncate_fully_and_start_at(offset)?;
        self.mirror_truncation(offset, true);
        self.clamp_follower_high_watermark(&mut state);
        drop(state);
        self.wake_watchers();
        Ok(())
    }

    /// Kafka's `maybeIncrementLogStartOffset` on a follower: the leader's log start offset
    /// (moved by retention or DeleteRecords) is followed, up to this log's high watermark.
    pub fn maybe_increment_follower_log_start_offset(
        &self,
        leader_log_start_offset: i64,
        leader_epoch: i32,
    ) -> Result<(), ApiError> {
        let state = self.lock();
        Self::require_follower(&state, leader_epoch)?;
        if leader_log_start_offset <= self.log().log_start_offset()
            || leader_log_start_offset > state.high_watermark
        {
            return Ok(());
        }
        drop(state);
        self.log().delete_records_before(leader_log_start_offset)?;
        Ok(())
    }

    /// Records the fetcher's lag (the leader's high watermark minus this log's end offset).
    pub fn set_follower_lag(&self, lag: i64) {
        let mut state = self.lock();
        if state.role == Role::Follower {
            state.follower_lag = Some(lag.max(0));
        }
    }

    fn clamp_follower_high_watermark(&self, state: &mut PartitionState) {
        let hw = decisions::follower_high_watermark(
            state.high_watermark,
            self.log().log_start_offset(),
            self.log().log_end_offset(),
        );
        state.high_watermark = hw;
        self.log().update_high_watermark(hw);
    }

    /// A follower takes the high watermark a fetch response carries, clamped to what its own
    /// log holds (Kafka's `UnifiedLog#maybeUpdateHighWatermark` in the fetcher). Only the
    /// leader's high watermark is monotonic: a follower's follows its leader's, and a new leader
    /// may not yet have reached its predecessor's (Kafka logs the step back and takes it, and
    /// so do we). Returns whether it changed.
    pub fn update_follower_high_watermark(
        &self,
        leader_high_watermark: i64,
        leader_epoch: i32,
    ) -> Result<bool, ApiError> {
        let mut state = self.lock();
        Self::require_follower(&state, leader_epoch)?;
        let hw = decisions::follower_high_watermark(
            leader_high_watermark,
            self.log().log_start_offset(),
            self.log().log_end_offset(),
        );
        if hw < state.high_watermark {
            tracing::warn!(topic = %self.tp.topic, partition = self.tp.partition, from = state.high_watermark, to = hw, "follower high watermark moves back with the leader's");
        }
        let changed = hw != state.high_watermark;
        state.high_watermark = hw;
        self.log().update_high_watermark(hw);
        drop(state);
        if changed {
            self.wake_watchers();
        }
        Ok(changed)
    }

    /// The leader records a follower's fetch (Kafka's `Partition#updateFollowerFetchState`):
    /// a fetch carrying a broker epoch older than the follower's registration is refused
    /// (KIP-841); a follower now in sync is proposed for the ISR; the high watermark moves if
    /// the follower's log end offset did.
    pub fn update_follower_fetch_state(
        &self,
        replica_id: i32,
        fetch: &FollowerFetch,
    ) -> Result<FollowerFetchResult, ApiError> {
        let mut state = self.lock();
        Self::require_leader(&state)?;
        let Some(current) = state.remote_replicas.get(&replica_id).copied() else {
            return Err(ApiError::NotLeaderOrFollower);
        };
        let brokers = self.brokers.get();
        let registration = brokers.broker(replica_id);
        let next =
            decisions::update_fetch_state(&current, fetch, registration.map(|b| b.broker_epoch))?;
        state.remote_replicas.insert(replica_id, next);
        let expand = self.maybe_expand_isr(&mut state, replica_id);
        let moved = next.log_end_offset != current.log_end_offset
            && self.maybe_increment_high_watermark(&mut state, fetch.fetch_time_ms);
        drop(state);
        // A follower's log start offset moving may complete a parked DeleteRecords.
        if moved || next.log_start_offset != current.log_start_offset {
            self.wake_watchers();
        }
        Ok(FollowerFetchResult {
            high_watermark_moved: moved,
            expand,
        })
    }

    /// Kafka's `maybeExpandIsr`: the follower is eligible and in sync, and nothing is in
    /// flight: it joins the maximal ISR now and is proposed to the controller.
    fn maybe_expand_isr(&self, state: &mut PartitionState, replica_id: i32) -> Option<IsrProposal> {
        let replica = state.remote_replicas.get(&replica_id)?;
        let brokers = self.brokers.get();
        let eligible = isr::isr_eligible(brokers.broker(replica_id), replica.broker_epoch);
        let in_sync = isr::is_follower_in_sync(
            replica.log_end_offset,
            state.high_watermark,
            state.leader_epoch_start_offset,
        );
        let next = isr::prepare_expand(
            &state.isr_state,
            replica_id,
            eligible,
            in_sync,
            |isr, recovery| self.proposal(state, isr, recovery),
        )?;
        tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, replica = replica_id, isr = ?next.maximal_isr(), "expanding the ISR");
        let proposal = next.proposal().cloned();
        state.isr_state = next;
        proposal
    }

    /// Kafka's `maybeShrinkIsr`, run by the expiry check every `replica.lag.time.max.ms / 2`:
    /// ISR members that are not caught up are proposed for removal. They keep counting for the
    /// high watermark until the controller commits it.
    pub fn maybe_shrink_isr(&self, now_ms: i64) -> Option<IsrProposal> {
        let mut state = self.lock();
        if state.role != Role::Leader {
            return None;
        }
        let leader_log_end_offset = self.log().log_end_offset();
        let out_of_sync = isr::out_of_sync_replicas(&state.isr_state, self.node_id, |id| {
            state.remote_replicas.get(&id).map(|r| {
                decisions::is_caught_up(
                    leader_log_end_offset,
                    r.log_end_offset,
                    r.last_caught_up_time_ms,
                    now_ms,
                    self.replica_lag_time_max_ms,
                )
            })
        });
        let next = isr::prepare_shrink(&state.isr_state, out_of_sync.clone(), |isr, recovery| {
            self.proposal(&state, isr, recovery)
        })?;
        tracing::info!(
            topic = %self.tp.topic,
            partition = self.tp.partition,
            out_of_sync = ?out_of_sync,
            isr = ?next.proposal().map(IsrProposal::isr),
            leader_log_end_offset,
            high_watermark = state.high_watermark,
            "shrinking the ISR"
        );
        let proposal = next.proposal().cloned();
        state.isr_state = next;
        proposal
    }

    /// Applies the controller's answer to proposal `proposal_id`; returns what was made of it
    /// ([`AlterPartitionOutcome::Retry`]: the caller sends the proposal again). A committed
    /// change may move the high watermark (an ISR down to the leader alone, say), which wakes
    /// parked operations.
    pub fn on_alter_partition_answer(
        &self,
        proposal_id: u64,
        answer: &Result<CommittedPartition, ApiError>,
        now_ms: i64,
    ) -> AlterPartitionOutcome {
        let mut state = self.lock();
        let outcome = isr::on_alter_partition_answer(
            &state.isr_state,
            state.leader_epoch,
            state.partition_epoch,
            proposal_id,
            answer,
        );
        if let Some(next) = isr::apply_outcome(&state.isr_state, &outcome) {
            state.isr_state = next;
        }
        let mut moved = false;
        match &outcome {
            AlterPartitionOutcome::Commit(committed, partition_epoch) => {
                state.partition_epoch = *partition_epoch;
                tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, isr = ?committed.isr, partition_epoch, "ISR committed");
                moved = self.maybe_increment_high_watermark(&mut state, now_ms);
            }
            AlterPartitionOutcome::Ignore => {}
            other => {
                tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, answer = ?answer.as_ref().err(), outcome = ?other, "ISR change refused")
            }
        }
        drop(state);
        if moved {
            self.wake_watchers();
        }
        outcome
    }

    /// The proposal in flight, if any (sent again after a retryable failure).
    pub fn pending_isr_proposal(&self) -> Option<IsrProposal> {
        self.lock().isr_state.proposal().cloned()
    }

    /// For a parked acks=all produce: `Some(outcome)` once the high watermark covers
    /// `required_offset`, or `Some(Err)` if this broker stopped leading.
    pub fn acks_all_outcome(&self, required_offset: i64) -> Option<Result<(), ApiError>> {
        let state = self.lock();
        if state.role != Role::Leader {
            return Some(Err(ApiError::NotLeaderOrFollower));
        }
        Self::acks_all_outcome_locked(&state, required_offset)
    }

    /// [`Partition::acks_all_outcome`] for records written in `leader_epoch`: leadership lost
    /// and regained meanwhile is NOT_LEADER_OR_FOLLOWER too, since the records may have been
    /// truncated while this node followed.
    pub fn acks_all_outcome_in_epoch(
        &self,
        required_offset: i64,
        leader_epoch: i32,
    ) -> Option<Result<(), ApiError>> {
        let state = self.lock();
        if state.role != Role::Leader || state.leader_epoch != leader_epoch {
            return Some(Err(ApiError::NotLeaderOrFollower));
        }
        Self::acks_all_outcome_locked(&state, required_offset)
    }

    fn acks_all_outcome_locked(
        state: &PartitionState,
        required_offset: i64,
    ) -> Option<Result<(), ApiError>> {
        decisions::acks_all_outcome(
            state.high_watermark,
            required_offset,
            state.maximal_isr().len(),
            Self::effective_min_isr(state),
        )
    }

    /// This replica's health (see [`ReplicationStatus`]).
    pub fn replication_status(&self) -> ReplicationStatus {
        let state = self.lock();
        let leader = state.role == Role::Leader;
        let isr = state.isr().len();
        let min_isr = Self::effective_min_isr(&state);
        ReplicationStatus {
            role: state.role,
            under_replicated: leader && isr < state.replicas.len(),
            under_min_isr: leader && isr < min_isr,
            at_min_isr: leader && isr == min_isr,
            offline: state.leader == -1 || self.log().is_offline(),
        }
    }

    pub fn offsets(&self) -> Offsets {
        let state = self.lock();
        self.offsets_of(&state)
    }

    /// The offsets now, under the partition's lock. The last stable offset takes the log's
    /// producer-state lock briefly.
    fn offsets_of(&self, state: &PartitionState) -> Offsets {
        let log = self.log();
        let high_watermark = state.high_watermark;
        Offsets {
            log_start_offset: log.log_start_offset(),
            high_watermark,
            last_stable_offset: log
                .first_unstable_offset()
                .map_or(high_watermark, |first| first.min(high_watermark)),
            log_end_offset: log.log_end_offset(),
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
        Ok(self.offsets_of(&state))
    }

    /// The end offset of `leader_epoch` in this leader's log (Kafka's
    /// `Partition#lastOffsetForLeaderEpoch`), after the leadership and `current_leader_epoch`
    /// checks: OffsetForLeaderEpoch is answered by the leader only, for consumers too.
    pub fn last_offset_for_leader_epoch(
        &self,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<EpochEndOffset, ApiError> {
        self.check_leader_and_epoch(current_leader_epoch, true)?;
        Ok(self.log().end_offset_for_epoch(leader_epoch))
    }

    /// [`Partition::check_leader_and_epoch`] for a leader-only request, with where the current
    /// leader epoch starts in the log (ListOffsets answers OFFSET_NOT_AVAILABLE to clients while
    /// a new leader's high watermark is below it).
    pub fn leader_offsets(
        &self,
        current_leader_epoch: i32,
    ) -> Result<(Offsets, Option<i64>), ApiError> {
        let state = self.lock();
        decisions::check_current_leader_epoch(state.leader_epoch, current_leader_epoch)?;
        Self::require_leader(&state)?;
        Ok((self.offsets_of(&state), state.leader_epoch_start_offset))
    }

    /// The checks every read makes before touching the log (Kafka's `localLogWithEpochOrThrow`
    /// and `followerReplicaOrThrow`): the reader's leader epoch, leadership when the read is
    /// leader-only, and for a follower's fetch that the follower is an assigned replica — else
    /// any client could claim a broker id and read past the high watermark. Returns the offsets
    /// as they are now.
    fn check_read(
        &self,
        state: &PartitionState,
        params: &FetchParams,
    ) -> Result<Offsets, ApiError> {
        decisions::check_current_leader_epoch(
            state.leader_epoch,
            params.current_leader_epoch.unwrap_or(-1),
        )?;
        if params.fetch_only_leader {
            Self::require_leader(state)?;
        }
        if params.is_from_follower() {
            decisions::check_follower_replica(
                state.remote_replicas.contains_key(&params.replica_id),
                params.current_leader_epoch.is_some(),
            )?;
        }
        Ok(self.offsets_of(&state))
    }

    /// The end of the reader's last fetched epoch in this log if it diverges (Fetch v12+), or
    /// OFFSET_OUT_OF_RANGE when this log cannot place that epoch or the fetch offset is below
    /// the log start (see [`decisions::check_last_fetched_epoch`]).
    fn diverging_epoch(
        &self,
        fetch_offset: i64,
        log_start_offset: i64,
        params: &FetchParams,
    ) -> Result<Option<EpochEndOffset>, ApiError> {
        let Some(epoch) = params.last_fetched_epoch else {
            return Ok(None);
        };
        let end = self.log().end_offset_for_epoch(epoch);
        decisions::check_last_fetched_epoch(
            epoch,
            fetch_offset,
            log_start_offset,
            end.epoch,
            end.end_offset,
        )
        .map(|diverging| diverging.then_some(end))
    }

    /// Reads whole batches from `fetch_offset` below the bound `params.isolation` sets (the
    /// high watermark for consumers, the log end offset for followers), at most
    /// `params.max_bytes` unless `params.min_one_message` lets a first larger batch through.
    /// `OFFSET_OUT_OF_RANGE` only outside `[log start, LEO]`; between the bound and the LEO the
    /// answer is empty. A diverging last fetched epoch answers with no records and the epoch's
    /// end instead. The partition lock is held for the checks only, not for the read.
    pub fn read(&self, fetch_offset: i64, params: &FetchParams) -> Result<ReadResult, ApiError> {
        let (offsets, as_leader) = {
            let mut state = self.lock();
            let offsets = self.check_read(&state, params)?;
            let as_leader = state.role == Role::Leader;
            if as_leader && params.is_from_follower() {
                state
                    .high_watermark_sent
                    .insert(params.replica_id, offsets.high_watermark);
            }
            (offsets, as_leader)
        };
        let read_committed = params.isolation == FetchIsolation::TxnCommitted;
        let empty = |diverging_epoch| ReadResult {
            records: bytes::Bytes::new(),
            offsets,
            diverging_epoch,
            as_leader,
            aborted_transactions: read_committed.then(Vec::new),
        };
        if let Some(end) = self.diverging_epoch(fetch_offset, offsets.log_start_offset, params)? {
            return Ok(empty(Some(end)));
        }
        if fetch_offset < offsets.log_start_offset || fetch_offset > offsets.log_end_offset {
            return Err(ApiError::OffsetOutOfRange);
        }
        let max_offset = params.isolation.max_offset(&offsets);
        if fetch_offset >= max_offset {
            return Ok(empty(None));
        }
        let FetchDataInfo { records, .. } = self.log().read(
            fetch_offset,
            params.max_bytes,
            max_offset,
            params.min_one_message,
        )?;
        let aborted_transactions = read_committed.then(|| self.aborted_in(fetch_offset, &records));
        Ok(ReadResult {
            records,
            offsets,
            diverging_epoch: None,
            as_leader,
            aborted_transactions,
        })
    }

    /// The aborted transactions overlapping `records`, read from `fetch_offset`: those whose
    /// marker is at or after the fetch offset and which began before the end of the last batch
    /// returned (Kafka bounds the search by the index entry after the bytes read, which may
    /// add transactions the consumer never meets; this bound is the tight one).
    fn aborted_in(&self, fetch_offset: i64, records: &[u8]) -> Vec<AbortedTransaction> {
        let Some(upper_bound_offset) = last_batch_next_offset(records) else {
            return Vec::new();
        };
        self.log()
            .collect_aborted_transactions(fetch_offset, upper_bound_offset)
            .into_iter()
            .map(|t| AbortedTransaction {
                producer_id: t.producer_id,
                first_offset: t.first_offset,
            })
            .collect()
    }

    /// `Some` only while this replica leads: the offsets (after the reader's leader epoch was
    /// checked, as Kafka's `fetchOffsetSnapshot` checks it), the committed ISR and the
    /// followers' states, for choosing a consumer's preferred read replica. `None` on a
    /// follower, which never redirects a consumer (Kafka: `leaderIdIfLocal`).
    pub fn leader_read_view(
        &self,
        current_leader_epoch: Option<i32>,
    ) -> Result<Option<LeaderReadView>, ApiError> {
        let state = self.lock();
        decisions::check_current_leader_epoch(
            state.leader_epoch,
            current_leader_epoch.unwrap_or(-1),
        )?;
        if state.role != Role::Leader {
            return Ok(None);
        }
        Ok(Some(LeaderReadView {
            offsets: self.offsets_of(&state),
            isr: state.isr().to_vec(),
            followers: state
                .remote_replicas
                .iter()
                .map(|(id, r)| (*id, *r))
                .collect(),
        }))
    }

    /// What a parked fetch checks on each wake-up (Kafka's `DelayedFetch#tryComplete`): the
    /// bytes readable now from `start` (the position of the fetch offset, taken when the fetch
    /// was parked) up to the read's bound, counted from the log's positions without reading
    /// records. `None` when the fetch must be answered now without waiting for more bytes:
    /// leadership or the leader epoch changed, the fetch offset left the log, the log was
    /// truncated under the position, the reader's epoch now diverges, or (a follower's fetch
    /// to this leader) the high watermark moved past the one the follower was last sent.
    pub fn bytes_available(
        &self,
        fetch_offset: i64,
        start: &LogPosition,
        params: &FetchParams,
    ) -> Option<u64> {
        let offsets = {
            let state = self.lock();
            let offsets = self.check_read(&state, params).ok()?;
            if params.is_from_follower()
                && state.role == Role::Leader
                && decisions::answer_follower_fetch_now(
                    state.high_watermark,
                    state.high_watermark_sent.get(&params.replica_id).copied(),
                )
            {
                return None;
            }
            offsets
        };
        if fetch_offset < offsets.log_start_offset || fetch_offset > offsets.log_end_offset {
            return None;
        }
        if !matches!(
            self.diverging_epoch(fetch_offset, offsets.log_start_offset, params),
            Ok(None)
        ) {
            return None;
        }
        self.log()
            .bytes_between(start, params.isolation.max_offset(&offsets))
            .ok()
            .flatten()
    }

    /// DeleteRecords: moves the log start offset, which may not pass the high watermark.
    /// Returns the requested offset (-1 resolved to the high watermark), which the low
    /// watermark must reach even when the log already started beyond it (Kafka's
    /// `LogDeleteRecordsResult.requestedOffset`).
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
        self.log().delete_records_before(target)?;
        self.wake_watchers();
        Ok(target)
    }

    /// Kafka's `lowWatermarkIfLeader`: the lowest log start offset over this log, the remote
    /// replicas on alive (registered, unfenced) brokers — -1 for one not heard from under this
    /// leader — and a future log being filled by a move between log dirs. A DeleteRecords is
    /// done once this reaches its offset.
    pub fn low_watermark(&self) -> Result<i64, ApiError> {
        let state = self.lock();
        Self::require_leader(&state)?;
        let brokers = self.brokers.get();
        let alive = |id: &i32| brokers.broker(*id).is_some_and(|b| !b.fenced);
        let remotes = state
            .remote_replicas
            .iter()
            .filter(|(id, _)| alive(id))
            .map(|(_, r)| r.log_start_offset);
        let future = self.future_log().map(|f| f.log_start_offset());
        Ok(remotes
            .chain(future)
            .fold(self.log().log_start_offset(), i64::min))
    }

    pub fn high_watermark(&self) -> i64 {
        self.lock().high_watermark
    }

    /// When the high watermark last moved; `None` before its first move here.
    pub fn high_watermark_moved_at(&self) -> Option<std::time::Instant> {
        self.lock().high_watermark_moved_at
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

/// The offset after the last whole batch in `records`, None when there is none.
fn last_batch_next_offset(records: &[u8]) -> Option<i64> {
    kafkaiq_storage::batch::BatchIter::new(records)
        .last()
        .map(|(_, h)| h.next_offset())
}

#[cfg(test)]
mod tests;
