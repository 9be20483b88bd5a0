//! Idempotent producer state of one log: for each producer id, its epoch and the metadata of its
//! last [`NUM_BATCHES_TO_RETAIN`] batches, so that a leader can reject sequence gaps, fence old
//! epochs and answer a retried batch with the offsets it was first written at.
//!
//! This is Kafka's `ProducerStateManager` / `ProducerAppendInfo` / `ProducerStateEntry`:
//! - [`ProducerStateManager::validate_leader_append`] applies Kafka's client-append rules (see its
//!   doc); follower appends and the rebuild from the log skip validation and call
//!   [`ProducerStateManager::update`] directly, as Kafka does for the REPLICATION origin.
//! - The state is a function of the log: after truncation or at open, the owner calls
//!   [`ProducerStateManager::truncate_and_reload`], which loads the latest snapshot at or below
//!   the log end offset, and then replays the batches from
//!   [`ProducerStateManager::map_end_offset`] to the log end offset through `update`.
//! - Snapshots are Kafka's producer snapshot files `{offset:020}.snapshot` in the partition
//!   directory (format below), written when a segment rolls and when the log closes, so the
//!   replay after a restart is short. Kafka's `DumpLogSegments` reads them.
//! - Transactions, the partition side: a producer's first transactional batch opens its
//!   transaction at that batch's first offset ([`ProducerStateEntry::current_txn_first_offset`]);
//!   its control batch (a COMMIT or ABORT marker) closes it, through
//!   [`ProducerStateManager::append_end_txn_marker`], which returns the [`CompletedTxn`]. The owner
//!   writes an aborted one to the transaction index (with
//!   [`ProducerStateManager::last_stable_offset`]) and then calls
//!   [`ProducerStateManager::complete_txn`]. A completed transaction stays unstable until the high
//!   watermark passes its marker ([`ProducerStateManager::on_high_watermark_updated`]), so the
//!   first unstable offset ([`ProducerStateManager::first_unstable_offset`]) never lets a
//!   read_committed consumer past data whose outcome a truncation could still undo.
//! - Producers idle for `producer.id.expiration.ms` (by the timestamp of their last batch) are
//!   removed by [`ProducerStateManager::remove_expired_producers`].
//!
//! Snapshot format (Kafka's version 1, all integers big-endian):
//!
//! ```text
//! version: i16 (1)
//! crc:     u32  CRC32C of every byte after this field
//! count:   i32  then `count` entries of 46 bytes:
//!   producer_id i64, producer_epoch i16, last_sequence i32, last_offset i64,
//!   offset_delta i32 (last_offset - first offset of the last batch), timestamp i64,
//!   coordinator_epoch i32, current_txn_first_offset i64 (-1: none)
//! ```
//!
//! Like Kafka's, a snapshot keeps only each producer's last batch, so after a restart a retry of
//! an older in-flight batch is an out-of-order sequence rather than a duplicate.
//!
//! A snapshot carries each producer's open transaction (`current_txn_first_offset`), so loading
//! one reopens them; completed transactions awaiting the high watermark are not kept, and the
//! replay after the snapshot completes them again.
//!
//! Not here: any locking: the owning log serialises every call with its writer lock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::batch::{ControlRecordType, EndTxnMarker};
use crate::checkpoint::{write_atomically, write_replacing};

/// Kafka's `RecordBatch.NO_PRODUCER_ID`: a batch from a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Kafka's `RecordBatch.NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;
/// Kafka's `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`: a producer has at most 5 in-flight
/// requests per connection (`max.in.flight.requests.per.connection` must be <= 5 for
/// idempotence), so 5 batches are enough to recognise any retry.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// `producer.id.expiration.ms` default: one day.
pub const PRODUCER_ID_EXPIRATION_MS_DEFAULT: i64 = 86_400_000;
/// Kafka's `PRODUCER_SNAPSHOT_VERSION`.
pub const PRODUCER_SNAPSHOT_VERSION: i16 = 1;
/// Suffix of producer snapshot files (`LogFileUtils.PRODUCER_SNAPSHOT_FILE_SUFFIX`).
pub const SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";

const SNAPSHOT_CRC_OFFSET: usize = 2;
const SNAPSHOT_ENTRIES_OFFSET: usize = SNAPSHOT_CRC_OFFSET + 4;
const SNAPSHOT_HEADER_BYTES: usize = SNAPSHOT_ENTRIES_OFFSET + 4;
const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

#[derive(Debug, thiserror::Error)]
pub enum ProducerStateError {
    /// -> OUT_OF_ORDER_SEQUENCE_NUMBER (45)
    #[error("{0}")]
    OutOfOrderSequence(String),
    /// -> INVALID_PRODUCER_EPOCH (47)
    #[error("{0}")]
    InvalidProducerEpoch(String),
    /// -> INVALID_TXN_STATE (48): a producer with an open transaction wrote a
    /// non-transactional batch.
    #[error("{0}")]
    InvalidTxnState(String),
    /// -> TRANSACTION_COORDINATOR_FENCED (52): a marker from a coordinator older than the one
    /// that wrote the producer's last marker here.
    #[error("{0}")]
    TransactionCoordinatorFenced(String),
    #[error("I/O error on producer state file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Only returned by [`read_snapshot`]; loading skips (and deletes) corrupt snapshots as Kafka
    /// does, falling back to an older one or to an empty state.
    #[error("corrupt producer snapshot {path}: {reason}")]
    CorruptSnapshot { path: PathBuf, reason: String },
}

fn io_error(path: &Path, source: io::Error) -> ProducerStateError {
    ProducerStateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: sequences wrap from i32::MAX to 0.
/// The last sequence of a batch (Kafka's `DefaultRecordBatch.lastSequence`): none for a batch
/// without a base sequence.
pub fn batch_last_sequence(base_sequence: i32, last_offset_delta: i32) -> i32 {
    if base_sequence == NO_SEQUENCE {
        NO_SEQUENCE
    } else {
        increment_sequence(base_sequence, last_offset_delta)
    }
}

pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// Kafka's `DefaultRecordBatch.decrementSequence`, the inverse of [`increment_sequence`].
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

/// `next` directly follows `last`, wrapping at i32::MAX (Kafka's `ProducerAppendInfo.inSequence`).
fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// What one appended batch contributes to its producer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_sequence: i32,
    /// `increment_sequence(first_sequence, last_offset_delta)`.
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp; also what producer id expiry is measured from.
    pub max_timestamp: i64,
    /// Attributes bit 4: the batch belongs to the producer's transaction.
    pub is_transactional: bool,
}

/// A transaction a marker closed on this partition (Kafka's `CompletedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub is_aborted: bool,
}

/// Metadata of one retained batch of a producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMetadata {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

/// The state of one producer id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// Oldest first, at most [`NUM_BATCHES_TO_RETAIN`], all of `producer_epoch`.
    batches: VecDeque<BatchMetadata>,
    pub last_timestamp: i64,
    /// The coordinator epoch of the producer's last marker, -1 before any.
    pub coordinator_epoch: i32,
    /// The first offset of the producer's open transaction on this partition. Such a producer
    /// does not expire, as in Kafka: its transaction holds the last stable offset back.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerStateEntry {
    fn empty(producer_id: i64) -> Self {
        ProducerStateEntry {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::with_capacity(NUM_BATCHES_TO_RETAIN),
            last_timestamp: -1,
            coordinator_epoch: -1,
            current_txn_first_offset: None,
        }
    }

    pub fn batches(&self) -> impl Iterator<Item = &BatchMetadata> {
        self.batches.iter()
    }

    pub fn last_batch(&self) -> Option<&BatchMetadata> {
        self.batches.back()
    }

    /// The last sequence written, or NO_SEQUENCE if no batch is retained.
    pub fn last_sequence(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_sequence)
    }

    fn add_batch(&mut self, batch: &ProducerBatch) {
        // A new epoch starts a new sequence space: the old batches can no longer be retried.
        if batch.producer_epoch != self.producer_epoch {
            self.batches.clear();
            self.producer_epoch = batch.producer_epoch;
        }
        if self.batches.len() == NUM_BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
        self.batches.push_back(BatchMetadata {
            first_sequence: batch.first_sequence,
            last_sequence: batch.last_sequence,
            first_offset: batch.first_offset,
            last_offset: batch.last_offset,
            timestamp: batch.max_timestamp,
        });
        self.last_timestamp = batch.max_timestamp;
    }

    /// Kafka's `ProducerStateEntry#update` for a marker: a new epoch clears the retained
    /// batches, and the transaction is closed.
    fn end_txn(&mut self, producer_epoch: i16, coordinator_epoch: i32, timestamp: i64) {
        if producer_epoch != self.producer_epoch {
            self.batches.clear();
            self.producer_epoch = producer_epoch;
        }
        self.coordinator_epoch = coordinator_epoch;
        self.last_timestamp = timestamp;
        self.current_txn_first_offset = None;
    }

    fn duplicate_of(&self, epoch: i16, first_seq: i32, last_seq: i32) -> Option<&BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_sequence == first_seq && b.last_sequence == last_seq)
    }

    fn is_expired(&self, now_ms: i64, producer_id_expiration_ms: i64) -> bool {
        self.current_txn_first_offset.is_none()
            && now_ms.saturating_sub(self.last_timestamp) >= producer_id_expiration_ms
    }
}

/// Outcome of validating a batch a client sent to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaderAppendCheck {
    /// Write it (then call `update` with its offsets).
    New,
    /// A retry of a batch already in the log: do not write it, answer with these offsets.
    Duplicate { first_offset: i64, last_offset: i64 },
}

/// Kafka's client-origin checks for one batch. `committed` is the state before this request,
/// `updated` the state including earlier batches of the same request (None if there are none).
fn check_leader_append(
    committed: Option<&ProducerStateEntry>,
    updated: Option<&ProducerStateEntry>,
    producer_id: i64,
    epoch: i16,
    (first_seq, last_seq): (i32, i32),
    is_transactional: bool,
) -> Result<LeaderAppendCheck, ProducerStateError> {
    if producer_id == NO_PRODUCER_ID {
        return Ok(LeaderAppendCheck::New);
    }
    // A batch without a sequence is a coordinator's (the group coordinator's transactional
    // offset commits, Kafka's `AppendOrigin.COORDINATOR`): its epoch is checked, its sequence
    // is not, and it is never a duplicate. Clients cannot send one (the broker refuses a
    // producer id without a sequence before the log sees it).
    let from_coordinator = first_seq == NO_SEQUENCE;
    // Duplicates first, against what is already in the log (UnifiedLog.analyzeAndValidateProducerState).
    if let Some(dup) = committed
        .filter(|_| !from_coordinator)
        .and_then(|c| c.duplicate_of(epoch, first_seq, last_seq))
    {
        return Ok(LeaderAppendCheck::Duplicate {
            first_offset: dup.first_offset,
            last_offset: dup.last_offset,
        });
    }
    let current = updated.or(committed);
    let current_epoch = current.map_or(NO_PRODUCER_EPOCH, |e| e.producer_epoch);
    if epoch < current_epoch {
        return Err(ProducerStateError::InvalidProducerEpoch(format!(
            "epoch of producer {producer_id} is {epoch}, which is smaller than the last seen epoch {current_epoch}"
        )));
    }
    if !is_transactional && current.is_some_and(|e| e.current_txn_first_offset.is_some()) {
        return Err(ProducerStateError::InvalidTxnState(format!(
            "expected transactional write from producer {producer_id}"
        )));
    }
    if from_coordinator {
        return Ok(LeaderAppendCheck::New);
    }
    if epoch != current_epoch {
        // A bumped epoch starts at sequence 0. A producer we hold no state for (never seen, or
        // expired, or its batches all deleted by retention) may continue at any sequence: Kafka
        // stopped returning UNKNOWN_PRODUCER_ID for this case in 2.5 (KIP-360).
        if first_seq != 0 && current_epoch != NO_PRODUCER_EPOCH {
            return Err(ProducerStateError::OutOfOrderSequence(format!(
                "invalid sequence number for new epoch {epoch} of producer {producer_id}: \
                 {first_seq} (must be 0), current producer epoch {current_epoch}"
            )));
        }
        return Ok(LeaderAppendCheck::New);
    }
    let current_last_seq = current.map_or(NO_SEQUENCE, ProducerStateEntry::last_sequence);
    let committed_epoch = committed.map_or(NO_PRODUCER_EPOCH, |e| e.producer_epoch);
    if committed_epoch != NO_PRODUCER_EPOCH && !in_sequence(current_last_seq, first_seq) {
        return Err(ProducerStateError::OutOfOrderSequence(format!(
            "out of order sequence number for producer {producer_id}: {first_seq} \
             (incoming seq. number), {current_last_seq} (current end sequence number)"
        )));
    }
    Ok(LeaderAppendCheck::New)
}

/// The producer state of one log and its snapshot files.
#[derive(Debug)]
pub struct ProducerStateManager {
    dir: PathBuf,
    producer_id_expiration_ms: i64,
    producers: HashMap<i64, ProducerStateEntry>,
    /// Snapshot files present on disk, by offset.
    snapshots: BTreeMap<i64, PathBuf>,
    /// The state covers every batch below this offset.
    map_end_offset: i64,
    /// The offset of the last snapshot taken or loaded.
    last_snap_offset: i64,
    /// Open transactions: first offset -> producer id (Kafka's `ongoingTxns`).
    ongoing_txns: BTreeMap<i64, i64>,
    /// Transactions whose marker is at or above the high watermark: first offset -> (producer
    /// id, marker offset) (Kafka's `unreplicatedTxns`).
    unreplicated_txns: BTreeMap<i64, (i64, i64)>,
}

impl ProducerStateManager {
    /// An empty state for the log in `dir`, knowing the snapshot files present there. Call
    /// [`truncate_and_reload`](Self::truncate_and_reload) to load one.
    pub fn new(dir: &Path, producer_id_expiration_ms: i64) -> Result<Self, ProducerStateError> {
        Ok(ProducerStateManager {
            dir: dir.to_path_buf(),
            producer_id_expiration_ms,
            producers: HashMap::new(),
            snapshots: list_snapshots(dir)?,
            map_end_offset: 0,
            last_snap_offset: 0,
            ongoing_txns: BTreeMap::new(),
            unreplicated_txns: BTreeMap::new(),
        })
    }

    pub fn set_producer_id_expiration_ms(&mut self, producer_id_expiration_ms: i64) {
        self.producer_id_expiration_ms = producer_id_expiration_ms;
    }

    /// The state covers every batch below this offset; replay the log from here.
    pub fn map_end_offset(&self) -> i64 {
        self.map_end_offset
    }

    pub fn last_entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    pub fn last_producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.producer_epoch)
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    pub fn producers(&self) -> impl Iterator<Item = &ProducerStateEntry> {
        self.producers.values()
    }

    /// Validates one batch a client sent to the leader, against the state before it. Kafka's
    /// rules, in order:
    /// 1. same epoch and the exact first/last sequence of a retained batch: `Duplicate` with
    ///    that batch's offsets;
    /// 2. epoch below the producer's current epoch: `InvalidProducerEpoch`;
    /// 3. a new (higher) epoch must start at sequence 0, unless we hold no state for the
    ///    producer, which may start anywhere: otherwise `OutOfOrderSequence`;
    /// 4. same epoch: the first sequence must follow the last one written (i32::MAX wraps to
    ///    0): otherwise `OutOfOrderSequence`.
    ///
    /// (With [`PendingAppend`], a non-transactional batch from a producer whose transaction is
    /// open is `InvalidTxnState`, checked after the epoch.)
    ///
    /// Non-idempotent batches (`producer_id == NO_PRODUCER_ID`) are always `New`. For a request
    /// with several batches of one producer use [`prepare_append`](Self::prepare_append).
    pub fn validate_leader_append(
        &self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        last_sequence: i32,
    ) -> Result<LeaderAppendCheck, ProducerStateError> {
        check_leader_append(
            self.producers.get(&producer_id),
            None,
            producer_id,
            epoch,
            (first_sequence, last_sequence),
            false,
        )
    }

    /// Validation of several batches appended together: each is checked against the state plus
    /// the batches staged before it, and nothing changes until the caller applies the staged
    /// batches with `update` (after writing them).
    pub fn prepare_append(&self) -> PendingAppend<'_> {
        PendingAppend {
            manager: self,
            staged: HashMap::new(),
            batches: Vec::new(),
        }
    }

    /// Applies an appended batch without validation (leader after validation, follower, and
    /// rebuild from the log). Advances the map end offset past it.
    pub fn update(&mut self, batch: &ProducerBatch) {
        if batch.producer_id != NO_PRODUCER_ID {
            let entry = self
                .producers
                .entry(batch.producer_id)
                .or_insert_with(|| ProducerStateEntry::empty(batch.producer_id));
            entry.add_batch(batch);
            // Kafka's `appendDataBatch`: the first transactional batch opens the transaction.
            if batch.is_transactional && entry.current_txn_first_offset.is_none() {
                entry.current_txn_first_offset = Some(batch.first_offset);
                self.ongoing_txns
                    .insert(batch.first_offset, batch.producer_id);
            }
        }
        self.map_end_offset = self.map_end_offset.max(batch.last_offset + 1);
    }

    /// Checks a marker the leader is about to write (Kafka's `checkProducerEpoch` and
    /// `checkCoordinatorEpoch` for the coordinator's append): its producer epoch must not be
    /// below the producer's, nor its coordinator epoch (None: a control batch without a
    /// transaction marker) below that of the producer's last marker.
    pub fn validate_end_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: Option<i32>,
    ) -> Result<(), ProducerStateError> {
        let entry = self.producers.get(&producer_id);
        let current = entry.map_or(NO_PRODUCER_EPOCH, |e| e.producer_epoch);
        if producer_epoch < current {
            return Err(ProducerStateError::InvalidProducerEpoch(format!(
                "epoch of producer {producer_id} is {producer_epoch}, which is smaller than the \
                 last seen epoch {current}"
            )));
        }
        let last_coordinator_epoch = entry.map_or(-1, |e| e.coordinator_epoch);
        if let Some(epoch) = coordinator_epoch.filter(|&e| e < last_coordinator_epoch) {
            return Err(ProducerStateError::TransactionCoordinatorFenced(format!(
                "invalid coordinator epoch for producer {producer_id}: {epoch} (zombie), \
                 {last_coordinator_epoch} (current)"
            )));
        }
        Ok(())
    }

    /// Applies a marker written at `offset` (Kafka's `ProducerAppendInfo#appendEndTxnMarker`,
    /// without validation: the leader validated it, a follower copies it). Returns the transaction
    /// it closed, if the producer had one open here: a marker of an empty transaction changes
    /// no offset and needs no index entry. The caller then indexes an aborted transaction and
    /// calls [`complete_txn`](Self::complete_txn).
    pub fn append_end_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        offset: i64,
        timestamp: i64,
    ) -> Option<CompletedTxn> {
        let entry = self
            .producers
            .entry(producer_id)
            .or_insert_with(|| ProducerStateEntry::empty(producer_id));
        let completed = entry
            .current_txn_first_offset
            .map(|first_offset| CompletedTxn {
                producer_id,
                first_offset,
                last_offset: offset,
                is_aborted: marker.control_type == ControlRecordType::Abort,
            });
        entry.end_txn(producer_epoch, marker.coordinator_epoch, timestamp);
        self.map_end_offset = self.map_end_offset.max(offset + 1);
        completed
    }

    /// Kafka's `lastStableOffset(CompletedTxn)`, what an aborted transaction's index entry
    /// records: the first offset of the earliest other open transaction, or the offset after
    /// the marker. A reader that has passed it needs no earlier index entry.
    pub fn last_stable_offset(&self, completed: &CompletedTxn) -> i64 {
        self.ongoing_txns
            .iter()
            .find(|(_, &pid)| pid != completed.producer_id)
            .map_or(completed.last_offset + 1, |(&first, _)| first)
    }

    /// Moves a transaction a marker closed from the open ones to those awaiting the high
    /// watermark. A transaction this state never saw open (its start is below a snapshot that
    /// did not know it) is ignored.
    pub fn complete_txn(&mut self, completed: CompletedTxn) {
        if self.ongoing_txns.remove(&completed.first_offset).is_some() {
            self.unreplicated_txns.insert(
                completed.first_offset,
                (completed.producer_id, completed.last_offset),
            );
        }
    }

    /// Forgets the completed transactions whose marker is below `high_watermark`: they no
    /// longer hold the last stable offset back.
    pub fn on_high_watermark_updated(&mut self, high_watermark: i64) {
        self.unreplicated_txns
            .retain(|_, &mut (_, last_offset)| last_offset >= high_watermark);
    }

    /// Kafka's `firstUnstableOffset`: the first offset of the earliest transaction that is open
    /// or whose marker is not yet below the high watermark.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let ongoing = self.ongoing_txns.keys().next().copied();
        let unreplicated = self.unreplicated_txns.keys().next().copied();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Kafka's `firstUndecidedOffset`: the first offset of the earliest open transaction.
    pub fn first_undecided_offset(&self) -> Option<i64> {
        self.ongoing_txns.keys().next().copied()
    }

    /// The open transactions: (first offset, producer id), oldest first.
    pub fn ongoing_txns(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing_txns.iter().map(|(&first, &pid)| (first, pid))
    }

    /// Records that every batch below `offset` has been applied (e.g. batches without a
    /// producer id); call with the log end offset after each append.
    pub fn update_map_end_offset(&mut self, offset: i64) {
        self.map_end_offset = offset;
    }

    /// Removes producers whose last batch is at least `producer.id.expiration.ms` old.
    /// Returns how many were removed.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let expiration_ms = self.producer_id_expiration_ms;
        // A producer with an open transaction never expires, so `ongoing_txns` needs no change.
        self.producers
            .retain(|_, entry| !entry.is_expired(now_ms, expiration_ms));
        before - self.producers.len()
    }

    /// Makes the state that of the log `[log_start_offset, log_end_offset)`, for opening a log and
    /// after truncation. Deletes snapshots outside the range; if the state does not already end
    /// at `log_end_offset`, drops it and loads the latest snapshot left (skipping and deleting
    /// corrupt ones), or starts empty at `log_start_offset`. The caller must then replay the
    /// batches from [`map_end_offset`](Self::map_end_offset) up to `log_end_offset` with `update`.
    ///
    /// Kafka also deletes a snapshot taken exactly at the log start offset; we keep it: it holds
    /// the state of the producers whose batches retention removed, which the in-memory state keeps
    /// too, so a restart does not forget them.
    pub fn truncate_and_reload(
        &mut self,
        log_start_offset: i64,
        log_end_offset: i64,
        now_ms: i64,
    ) -> Result<(), ProducerStateError> {
        let out_of_range: Vec<i64> = self
            .snapshots
            .keys()
            .copied()
            .filter(|&offset| offset > log_end_offset || offset < log_start_offset)
            .collect();
        for offset in out_of_range {
            self.delete_snapshot(offset)?;
        }
        if log_end_offset != self.map_end_offset {
            self.clear();
            self.load_latest_snapshot(log_start_offset, i64::MAX, now_ms)?;
        } else {
            self.on_log_start_offset_incremented(log_start_offset);
        }
        Ok(())
    }

    /// Drops the state and loads the latest snapshot at or below `offset` (or starts empty at
    /// `log_start_offset`), keeping the snapshots above it: for a recovery that must replay the
    /// log from `offset` to rebuild what lies after it (the transaction index of recovered
    /// segments).
    pub fn reload_at_or_below(
        &mut self,
        log_start_offset: i64,
        offset: i64,
        now_ms: i64,
    ) -> Result<(), ProducerStateError> {
        self.clear();
        self.load_latest_snapshot(log_start_offset, offset, now_ms)
    }

    fn clear(&mut self) {
        self.producers.clear();
        self.ongoing_txns.clear();
        self.unreplicated_txns.clear();
    }

    fn load_latest_snapshot(
        &mut self,
        log_start_offset: i64,
        at_most: i64,
        now_ms: i64,
    ) -> Result<(), ProducerStateError> {
        while let Some((&offset, path)) = self.snapshots.range(..=at_most).next_back() {
            match read_snapshot(path) {
                Ok(entries) => {
                    for entry in entries {
                        if !entry.is_expired(now_ms, self.producer_id_expiration_ms) {
                            if let Some(first) = entry.current_txn_first_offset {
                                self.ongoing_txns.insert(first, entry.producer_id);
                            }
                            self.producers.insert(entry.producer_id, entry);
                        }
                    }
                    self.map_end_offset = offset;
                    self.last_snap_offset = offset;
                    return Ok(());
                }
                Err(ProducerStateError::CorruptSnapshot { path, reason }) => {
                    tracing::warn!(path = %path.display(), %reason, "deleting corrupt producer snapshot");
                    self.delete_snapshot(offset)?;
                }
                Err(other) => return Err(other),
            }
        }
        self.map_end_offset = log_start_offset;
        self.last_snap_offset = log_start_offset;
        Ok(())
    }

    /// The log start offset moved up (retention, DeleteRecords).
    pub fn on_log_start_offset_incremented(&mut self, log_start_offset: i64) {
        self.unreplicated_txns
            .retain(|_, &mut (_, last_offset)| last_offset >= log_start_offset);
        self.map_end_offset = self.map_end_offset.max(log_start_offset);
        self.last_snap_offset = self.latest_snapshot_offset().unwrap_or(log_start_offset);
    }

    /// Drops all state and every snapshot; the log restarts empty at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), ProducerStateError> {
        self.clear();
        let all: Vec<i64> = self.snapshots.keys().copied().collect();
        for snapshot in all {
            self.delete_snapshot(snapshot)?;
        }
        self.last_snap_offset = 0;
        self.map_end_offset = offset;
        Ok(())
    }

    /// Writes a snapshot at the map end offset unless one was already taken there (Kafka's
    /// `takeSnapshot`). Returns the offset written, if any.
    pub fn take_snapshot(&mut self) -> Result<Option<i64>, ProducerStateError> {
        Ok(self.write_snapshot(true)?.map(|(offset, _)| offset))
    }

    /// [`Self::take_snapshot`] without any fsync (Kafka's `takeSnapshot(false)` at a roll): the
    /// caller fsyncs the returned file and its directory later. A snapshot torn by a crash
    /// before that is found corrupt at the next load and deleted, and an older one is used.
    pub fn take_snapshot_unsynced(&mut self) -> Result<Option<PathBuf>, ProducerStateError> {
        Ok(self.write_snapshot(false)?.map(|(_, path)| path))
    }

    fn write_snapshot(&mut self, sync: bool) -> Result<Option<(i64, PathBuf)>, ProducerStateError> {
        if self.map_end_offset <= self.last_snap_offset {
            return Ok(None);
        }
        let offset = self.map_end_offset;
        let path = snapshot_path(&self.dir, offset);
        let mut entries: Vec<&ProducerStateEntry> = self.producers.values().collect();
        // Sorted so the file is a function of the state.
        entries.sort_by_key(|e| e.producer_id);
        let bytes = encode_snapshot(entries);
        if sync {
            write_atomically(&path, &bytes)
        } else {
            write_replacing(&path, &bytes)
        }
        .map_err(|e| io_error(&path, e))?;
        self.snapshots.insert(offset, path.clone());
        self.last_snap_offset = offset;
        Ok(Some((offset, path)))
    }

    pub fn latest_snapshot_offset(&self) -> Option<i64> {
        self.snapshots.keys().next_back().copied()
    }

    pub fn oldest_snapshot_offset(&self) -> Option<i64> {
        self.snapshots.keys().next().copied()
    }

    pub fn snapshot_offsets(&self) -> Vec<i64> {
        self.snapshots.keys().copied().collect()
    }

    /// Deletes the snapshots below `offset` (their segments were deleted).
    pub fn delete_snapshots_before(&mut self, offset: i64) -> Result<(), ProducerStateError> {
        let below: Vec<i64> = self.snapshots.range(..offset).map(|(&o, _)| o).collect();
        for snapshot in below {
            self.delete_snapshot(snapshot)?;
        }
        Ok(())
    }

    /// Deletes the snapshots above `offset` (the log was truncated to `offset`).
    pub fn delete_snapshots_after(&mut self, offset: i64) -> Result<(), ProducerStateError> {
        let above: Vec<i64> = self
            .snapshots
            .range(offset.saturating_add(1)..)
            .map(|(&o, _)| o)
            .collect();
        for snapshot in above {
            self.delete_snapshot(snapshot)?;
        }
        Ok(())
    }

    /// Forgets the snapshot at `offset` and returns its file, which the caller removes (its
    /// segment was replaced).
    pub(crate) fn forget_snapshot(&mut self, offset: i64) -> Option<std::path::PathBuf> {
        self.snapshots.remove(&offset)
    }

    /// Deletes the snapshot at `offset`, if there is one (its segment was replaced).
    pub(crate) fn delete_snapshot(&mut self, offset: i64) -> Result<(), ProducerStateError> {
        if let Some(path) = self.snapshots.remove(&offset) {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&path, e)),
            }
        }
        Ok(())
    }
}

/// Batches of one request validated in order, before any is written.
#[derive(Debug)]
pub struct PendingAppend<'a> {
    manager: &'a ProducerStateManager,
    staged: HashMap<i64, ProducerStateEntry>,
    batches: Vec<ProducerBatch>,
}

impl PendingAppend<'_> {
    /// As [`ProducerStateManager::validate_leader_append`], also counting the staged batches.
    pub fn validate_leader_append(
        &self,
        producer_id: i64,
        epoch: i16,
        first_sequence: i32,
        last_sequence: i32,
    ) -> Result<LeaderAppendCheck, ProducerStateError> {
        self.validate_leader_batch(producer_id, epoch, (first_sequence, last_sequence), false)
    }

    /// [`Self::validate_leader_append`] for a batch that may be transactional: a producer with
    /// an open transaction (in the log or staged) must keep writing transactional batches.
    pub fn validate_leader_batch(
        &self,
        producer_id: i64,
        epoch: i16,
        sequences: (i32, i32),
        is_transactional: bool,
    ) -> Result<LeaderAppendCheck, ProducerStateError> {
        check_leader_append(
            self.manager.producers.get(&producer_id),
            self.staged.get(&producer_id),
            producer_id,
            epoch,
            sequences,
            is_transactional,
        )
    }

    /// Counts `batch` (validated as `New`, offsets assigned) for the batches validated after it.
    pub fn stage(&mut self, batch: ProducerBatch) {
        if batch.producer_id != NO_PRODUCER_ID {
            let manager = self.manager;
            self.staged
                .entry(batch.producer_id)
                .or_insert_with(|| {
                    manager
                        .producers
                        .get(&batch.producer_id)
                        .cloned()
                        .unwrap_or_else(|| ProducerStateEntry::empty(batch.producer_id))
                })
                .add_batch(&batch);
            let entry = self
                .staged
                .get_mut(&batch.producer_id)
                .expect("just staged");
            if batch.is_transactional && entry.current_txn_first_offset.is_none() {
                entry.current_txn_first_offset = Some(batch.first_offset);
            }
        }
        self.batches.push(batch);
    }

    /// Whether a batch staged before opened (or continues) a transaction of `producer_id`.
    pub fn staged_transactional(&self, producer_id: i64) -> bool {
        self.staged
            .get(&producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some())
    }

    /// The staged batches, to pass to `update` once they are written.
    pub fn into_batches(self) -> Vec<ProducerBatch> {
        self.batches
    }
}

/// `{offset:020}.snapshot` in `dir`.
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_FILE_SUFFIX}"))
}

/// The producer snapshot files in `dir`, by offset. Other files are ignored.
fn list_snapshots(dir: &Path) -> Result<BTreeMap<i64, PathBuf>, ProducerStateError> {
    let mut snapshots = BTreeMap::new();
    let read_dir = match fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(snapshots),
        Err(e) => return Err(io_error(dir, e)),
    };
    for item in read_dir {
        let item = item.map_err(|e| io_error(dir, e))?;
        let name = item.file_name();
        let Some(stem) = name
            .to_str()
            .and_then(|n| n.strip_suffix(SNAPSHOT_FILE_SUFFIX))
        else {
            continue;
        };
        let Ok(offset) = stem.parse::<i64>() else {
            continue;
        };
        if item.file_type().map_err(|e| io_error(dir, e))?.is_file() {
            snapshots.insert(offset, item.path());
        }
    }
    Ok(snapshots)
}

fn encode_snapshot<'a>(entries: impl IntoIterator<Item = &'a ProducerStateEntry>) -> Vec<u8> {
    let entries: Vec<&ProducerStateEntry> = entries.into_iter().collect();
    let mut buf = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + entries.len() * SNAPSHOT_ENTRY_BYTES);
    buf.extend_from_slice(&PRODUCER_SNAPSHOT_VERSION.to_be_bytes());
    buf.extend_from_slice(&0u32.to_be_bytes()); // the CRC, filled in below
    buf.extend_from_slice(&(entries.len() as i32).to_be_bytes());
    for entry in entries {
        let last = entry.last_batch();
        buf.extend_from_slice(&entry.producer_id.to_be_bytes());
        buf.extend_from_slice(&entry.producer_epoch.to_be_bytes());
        buf.extend_from_slice(&last.map_or(NO_SEQUENCE, |b| b.last_sequence).to_be_bytes());
        buf.extend_from_slice(&last.map_or(-1i64, |b| b.last_offset).to_be_bytes());
        let offset_delta = last.map_or(0, |b| (b.last_offset - b.first_offset) as i32);
        buf.extend_from_slice(&offset_delta.to_be_bytes());
        buf.extend_from_slice(&entry.last_timestamp.to_be_bytes());
        buf.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
        buf.extend_from_slice(&entry.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
    }
    let crc = crc32c::crc32c(&buf[SNAPSHOT_ENTRIES_OFFSET..]);
    buf[SNAPSHOT_CRC_OFFSET..SNAPSHOT_ENTRIES_OFFSET].copy_from_slice(&crc.to_be_bytes());
    buf
}

/// Reads a producer snapshot file (ours or Kafka's).
pub fn read_snapshot(path: &Path) -> Result<Vec<ProducerStateEntry>, ProducerStateError> {
    let bytes = fs::read(path).map_err(|e| io_error(path, e))?;
    decode_snapshot(&bytes).map_err(|reason| ProducerStateError::CorruptSnapshot {
        path: path.to_path_buf(),
        reason,
    })
}

fn decode_snapshot(bytes: &[u8]) -> Result<Vec<ProducerStateEntry>, String> {
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err(format!(
            "{} bytes is shorter than the {SNAPSHOT_HEADER_BYTES}-byte header",
            bytes.len()
        ));
    }
    let mut r = Reader(bytes);
    let version = r.i16();
    if version != PRODUCER_SNAPSHOT_VERSION {
        return Err(format!("unknown snapshot version {version}"));
    }
    let stored_crc = r.u32();
    let computed_crc = crc32c::crc32c(&bytes[SNAPSHOT_ENTRIES_OFFSET..]);
    if stored_crc != computed_crc {
        return Err(format!(
            "CRC mismatch: stored {stored_crc}, computed {computed_crc}"
        ));
    }
    let count = r.i32();
    let expected_len = usize::try_from(count)
        .ok()
        .and_then(|n| n.checked_mul(SNAPSHOT_ENTRY_BYTES))
        .and_then(|n| n.checked_add(SNAPSHOT_HEADER_BYTES))
        .ok_or_else(|| format!("invalid entry count {count}"))?;
    if bytes.len() != expected_len {
        return Err(format!(
            "{count} entries need {expected_len} bytes, the file has {}",
            bytes.len()
        ));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let producer_id = r.i64();
        let producer_epoch = r.i16();
        let last_sequence = r.i32();
        let last_offset = r.i64();
        let offset_delta = r.i32();
        let timestamp = r.i64();
        let coordinator_epoch = r.i32();
        let current_txn_first_offset = r.i64();
        let mut entry = ProducerStateEntry::empty(producer_id);
        entry.producer_epoch = producer_epoch;
        entry.last_timestamp = timestamp;
        entry.coordinator_epoch = coordinator_epoch;
        entry.current_txn_first_offset =
            (current_txn_first_offset >= 0).then_some(current_txn_first_offset);
        if last_offset >= 0 {
            entry.batches.push_back(BatchMetadata {
                first_sequence: decrement_sequence(last_sequence, offset_delta),
                last_sequence,
                first_offset: last_offset - i64::from(offset_delta),
                last_offset,
                timestamp,
            });
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Big-endian reads from a slice whose length the caller has checked.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, tail) = self.0.split_at(N);
        self.0 = tail;
        head.try_into().expect("split_at returned N bytes")
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::test_dir::TestDir;

    const PID: i64 = 1000;

    fn batch(epoch: i16, first_seq: i32, count: i32, first_offset: i64, ts: i64) -> ProducerBatch {
        ProducerBatch {
            producer_id: PID,
            producer_epoch: epoch,
            first_sequence: first_seq,
            last_sequence: increment_sequence(first_seq, count - 1),
            first_offset,
            last_offset: first_offset + i64::from(count) - 1,
            max_timestamp: ts,
            is_transactional: false,
        }
    }

    fn manager(dir: &TestDir) -> ProducerStateManager {
        ProducerStateManager::new(dir.path(), PRODUCER_ID_EXPIRATION_MS_DEFAULT).unwrap()
    }

    #[derive(Debug, PartialEq)]
    enum Want {
        New,
        Dup(i64, i64),
        OutOfOrder,
        BadEpoch,
    }

    fn outcome(r: Result<LeaderAppendCheck, ProducerStateError>) -> Want {
        match r {
            Ok(LeaderAppendCheck::New) => Want::New,
            Ok(LeaderAppendCheck::Duplicate {
                first_offset,
                last_offset,
            }) => Want::Dup(first_offset, last_offset),
            Err(ProducerStateError::OutOfOrderSequence(_)) => Want::OutOfOrder,
            Err(ProducerStateError::InvalidProducerEpoch(_)) => Want::BadEpoch,
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    #[test]
    fn sequence_helpers_wrap_at_i32_max() {
        assert_eq!(increment_sequence(0, 4), 4);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(decrement_sequence(4, 4), 0);
        assert_eq!(decrement_sequence(0, 1), i32::MAX);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        for (s, d) in [(0, 0), (5, 3), (i32::MAX, 9), (2, 7)] {
            assert_eq!(
                decrement_sequence(increment_sequence(s, d), d),
                s,
                "{s} {d}"
            );
        }
        assert!(in_sequence(-1, 0));
        assert!(in_sequence(4, 5));
        assert!(in_sequence(i32::MAX, 0));
        assert!(!in_sequence(i32::MAX, i32::MIN)); // no i32 overflow
        assert!(!in_sequence(4, 4));
        assert!(!in_sequence(4, 6));
    }

    #[test]
    fn leader_append_validation_table() {
        // State of producer PID: epoch 3, batches seq 0-4 @ 100-104, 5-9 @ 110-114, 10-10 @ 120.
        let history = [
            batch(3, 0, 5, 100, 1),
            batch(3, 5, 5, 110, 2),
            batch(3, 10, 1, 120, 3),
        ];
        // (producer epoch, first seq, last seq, expected)
        let cases: &[(i16, i32, i32, Want)] = &[
            (3, 11, 11, Want::New),           // next in sequence
            (3, 11, 20, Want::New),           // next, multi-record
            (3, 12, 12, Want::OutOfOrder),    // gap
            (3, 10, 10, Want::Dup(120, 120)), // retry of the last batch
            (3, 0, 4, Want::Dup(100, 104)),   // retry of an older retained batch
            (3, 5, 9, Want::Dup(110, 114)),
            (3, 5, 8, Want::OutOfOrder), // overlaps, not an exact retry
            (3, 0, 0, Want::OutOfOrder),
            (3, 9, 9, Want::OutOfOrder),   // behind
            (2, 11, 11, Want::BadEpoch),   // fenced epoch
            (2, 10, 10, Want::BadEpoch),   // old epoch, even with a retained seq range
            (4, 0, 0, Want::New),          // bumped epoch starts at 0
            (4, 11, 11, Want::OutOfOrder), // bumped epoch must start at 0
            (100, 0, 9, Want::New),
            (4, 0, 4, Want::New), // same seqs as a retained batch, other epoch
        ];
        let dir = TestDir::new("ps-table");
        let mut state = manager(&dir);
        for b in &history {
            assert_eq!(
                outcome(state.validate_leader_append(
                    PID,
                    b.producer_epoch,
                    b.first_sequence,
                    b.last_sequence
                )),
                Want::New,
                "building history {b:?}"
            );
            state.update(b);
        }
        for (epoch, first, last, want) in cases {
            assert_eq!(
                &outcome(state.validate_leader_append(PID, *epoch, *first, *last)),
                want,
                "epoch {epoch} seq {first}..={last}"
            );
        }
    }

    #[test]
    fn unknown_producer_may_start_at_any_sequence() {
        let dir = TestDir::new("ps-unknown");
        let state = manager(&dir);
        for (epoch, first) in [(0, 0), (0, 42), (5, 7), (0, i32::MAX)] {
            assert_eq!(
                outcome(state.validate_leader_append(PID, epoch, first, first)),
                Want::New,
                "epoch {epoch} seq {first}"
            );
        }
        // Non-idempotent batches carry no state at all.
        assert_eq!(
            outcome(state.validate_leader_append(NO_PRODUCER_ID, -1, -1, -1)),
            Want::New
        );
    }

    #[test]
    fn only_the_last_five_batches_are_duplicates() {
        let dir = TestDir::new("ps-five");
        let mut state = manager(&dir);
        for i in 0..7 {
            state.update(&batch(0, i * 2, 2, i64::from(i) * 10, 0));
        }
        let entry = state.last_entry(PID).unwrap();
        assert_eq!(entry.batches().count(), NUM_BATCHES_TO_RETAIN);
        // Batches 0 and 1 (seq 0-1, 2-3) were evicted; 2..=6 remain.
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 0, 1)),
            Want::OutOfOrder
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 2, 3)),
            Want::OutOfOrder
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 4, 5)),
            Want::Dup(20, 21)
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 12, 13)),
            Want::Dup(60, 61)
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 14, 14)),
            Want::New
        );
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        let dir = TestDir::new("ps-wrap");
        let mut state = manager(&dir);
        // A batch of 3 records from MAX-2 ends exactly at MAX.
        state.update(&batch(0, i32::MAX - 2, 3, 0, 0));
        assert_eq!(state.last_entry(PID).unwrap().last_sequence(), i32::MAX);
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 0, 4)),
            Want::New
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 1, 4)),
            Want::OutOfOrder
        );
        // A batch that wraps inside: MAX-1, MAX, 0, 1.
        let dir2 = TestDir::new("ps-wrap2");
        let mut state2 = manager(&dir2);
        state2.update(&batch(0, i32::MAX - 1, 4, 0, 0));
        assert_eq!(state2.last_entry(PID).unwrap().last_sequence(), 1);
        assert_eq!(
            outcome(state2.validate_leader_append(PID, 0, 2, 2)),
            Want::New
        );
        assert_eq!(
            outcome(state2.validate_leader_append(PID, 0, i32::MAX - 1, 1)),
            Want::Dup(0, 3)
        );
    }

    #[test]
    fn epoch_bump_clears_retained_batches() {
        let dir = TestDir::new("ps-bump");
        let mut state = manager(&dir);
        state.update(&batch(0, 0, 5, 0, 0));
        state.update(&batch(1, 0, 2, 5, 0));
        let entry = state.last_entry(PID).unwrap();
        assert_eq!(entry.producer_epoch, 1);
        assert_eq!(entry.batches().count(), 1);
        assert_eq!(state.last_producer_epoch(PID), Some(1));
        assert_eq!(
            outcome(state.validate_leader_append(PID, 0, 0, 4)),
            Want::BadEpoch
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 1, 2, 2)),
            Want::New
        );
    }

    #[test]
    fn follower_updates_are_not_validated() {
        // A follower applies what the leader wrote, even a sequence jump.
        let dir = TestDir::new("ps-follower");
        let mut state = manager(&dir);
        state.update(&batch(0, 0, 1, 0, 0));
        state.update(&batch(0, 50, 1, 1, 0));
        assert_eq!(state.last_entry(PID).unwrap().last_sequence(), 50);
        assert_eq!(state.map_end_offset(), 2);
    }

    #[test]
    fn pending_append_validates_against_earlier_batches_of_the_request() {
        let dir = TestDir::new("ps-pending");
        let mut state = manager(&dir);
        state.update(&batch(0, 0, 2, 0, 0)); // seq 0-1
        let mut pending = state.prepare_append();
        assert_eq!(
            outcome(pending.validate_leader_append(PID, 0, 2, 3)),
            Want::New
        );
        pending.stage(batch(0, 2, 2, 2, 0));
        // The next batch must follow the staged one, not the committed state.
        assert_eq!(
            outcome(pending.validate_leader_append(PID, 0, 2, 3)),
            Want::OutOfOrder
        );
        assert_eq!(
            outcome(pending.validate_leader_append(PID, 0, 4, 4)),
            Want::New
        );
        pending.stage(batch(0, 4, 1, 4, 0));
        // Duplicates are judged against what is in the log only.
        assert_eq!(
            outcome(pending.validate_leader_append(PID, 0, 0, 1)),
            Want::Dup(0, 1)
        );
        let batches = pending.into_batches();
        // Nothing applied until update.
        assert_eq!(state.last_entry(PID).unwrap().last_sequence(), 1);
        for b in &batches {
            state.update(b);
        }
        assert_eq!(state.last_entry(PID).unwrap().last_sequence(), 4);
        assert_eq!(state.map_end_offset(), 5);
    }

    #[test]
    fn expiry_is_by_last_batch_timestamp() {
        let dir = TestDir::new("ps-expiry");
        let mut state = ProducerStateManager::new(dir.path(), 1_000).unwrap();
        state.update(&ProducerBatch {
            producer_id: 1,
            ..batch(0, 0, 1, 0, 5_000)
        });
        state.update(&ProducerBatch {
            producer_id: 2,
            ..batch(0, 0, 1, 1, 5_500)
        });
        // (now, producers left)
        for (now, left) in [(5_999, 2), (6_000, 1), (6_499, 1), (6_500, 0)] {
            state.remove_expired_producers(now);
            assert_eq!(state.producer_count(), left, "now {now}");
        }
    }

    #[test]
    fn snapshot_bytes_are_kafkas_layout() {
        let dir = TestDir::new("ps-layout");
        let mut state = manager(&dir);
        state.update(&batch(7, 10, 3, 40, 1_700_000_000_000));
        assert_eq!(state.take_snapshot().unwrap(), Some(43));
        let path = dir.path().join("00000000000000000043.snapshot");
        let bytes = fs::read(&path).unwrap();

        let mut want = Vec::new();
        want.extend_from_slice(&1i16.to_be_bytes());
        want.extend_from_slice(&[0; 4]);
        want.extend_from_slice(&1i32.to_be_bytes());
        want.extend_from_slice(&PID.to_be_bytes());
        want.extend_from_slice(&7i16.to_be_bytes());
        want.extend_from_slice(&12i32.to_be_bytes()); // last sequence
        want.extend_from_slice(&42i64.to_be_bytes()); // last offset
        want.extend_from_slice(&2i32.to_be_bytes()); // offset delta
        want.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        want.extend_from_slice(&(-1i32).to_be_bytes()); // coordinator epoch
        want.extend_from_slice(&(-1i64).to_be_bytes()); // no transaction
        let crc = crc32c::crc32c(&want[6..]);
        want[2..6].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(bytes, want);
        assert_eq!(bytes.len(), 10 + 46);
    }

    #[test]
    fn snapshot_round_trip_and_reload() {
        let dir = TestDir::new("ps-reload");
        let now = 10_000;
        let mut state = manager(&dir);
        state.update(&batch(2, 0, 5, 0, now));
        state.update(&batch(2, 5, 5, 5, now));
        state.update(&ProducerBatch {
            producer_id: 9,
            ..batch(0, 0, 1, 10, now)
        });
        assert_eq!(state.take_snapshot().unwrap(), Some(11));
        assert_eq!(
            state.take_snapshot().unwrap(),
            None,
            "no new offset, no new snapshot"
        );
        state.update(&batch(2, 10, 1, 11, now));

        let mut reopened = manager(&dir);
        reopened.truncate_and_reload(0, 12, now).unwrap();
        assert_eq!(reopened.map_end_offset(), 11, "replay from the snapshot");
        let entry = reopened.last_entry(PID).unwrap();
        assert_eq!(entry.producer_epoch, 2);
        // Only the last batch survives a snapshot, as in Kafka.
        assert_eq!(
            entry.batches().copied().collect::<Vec<_>>(),
            vec![BatchMetadata {
                first_sequence: 5,
                last_sequence: 9,
                first_offset: 5,
                last_offset: 9,
                timestamp: now,
            }]
        );
        assert_eq!(
            outcome(reopened.validate_leader_append(PID, 2, 5, 9)),
            Want::Dup(5, 9)
        );
        assert_eq!(
            outcome(reopened.validate_leader_append(PID, 2, 0, 4)),
            Want::OutOfOrder
        );
        assert_eq!(reopened.last_producer_epoch(9), Some(0));
        // Replaying the rest brings it up to date.
        reopened.update(&batch(2, 10, 1, 11, now));
        assert_eq!(
            outcome(reopened.validate_leader_append(PID, 2, 11, 11)),
            Want::New
        );
    }

    #[test]
    fn truncation_reloads_from_the_latest_snapshot_at_or_below_the_end() {
        let dir = TestDir::new("ps-truncate");
        let mut state = manager(&dir);
        for (i, offset) in [0i64, 10, 20, 30].iter().enumerate() {
            state.update(&batch(0, i as i32 * 10, 10, *offset, 0));
            state.take_snapshot().unwrap();
        }
        assert_eq!(state.snapshot_offsets(), vec![10, 20, 30, 40]);
        // Truncate the log to 25: snapshots above 25 go, the state comes from snapshot 20.
        state.truncate_and_reload(0, 25, 0).unwrap();
        assert_eq!(state.snapshot_offsets(), vec![10, 20]);
        assert_eq!(state.map_end_offset(), 20);
        assert_eq!(state.last_entry(PID).unwrap().last_sequence(), 19);
        assert!(!snapshot_path(dir.path(), 30).exists());
        assert!(!snapshot_path(dir.path(), 40).exists());
        // Log start above every snapshot: they all go, the state starts empty at the log start.
        state.truncate_and_reload(22, 25, 0).unwrap();
        assert_eq!(state.snapshot_offsets(), Vec::<i64>::new());
        assert_eq!(state.map_end_offset(), 22);
        assert_eq!(state.producer_count(), 0);
    }

    #[test]
    fn reload_skips_expired_producers() {
        let dir = TestDir::new("ps-reload-expired");
        let mut state = ProducerStateManager::new(dir.path(), 1_000).unwrap();
        state.update(&ProducerBatch {
            producer_id: 1,
            ..batch(0, 0, 1, 0, 100)
        });
        state.update(&ProducerBatch {
            producer_id: 2,
            ..batch(0, 0, 1, 1, 900)
        });
        state.take_snapshot().unwrap();
        let mut reopened = ProducerStateManager::new(dir.path(), 1_000).unwrap();
        reopened.truncate_and_reload(0, 2, 1_500).unwrap();
        assert_eq!(reopened.last_entry(1), None);
        assert!(reopened.last_entry(2).is_some());
    }

    #[test]
    fn corrupt_snapshots_are_deleted_and_an_older_one_used() {
        let dir = TestDir::new("ps-corrupt");
        let mut state = manager(&dir);
        state.update(&batch(0, 0, 5, 0, 0));
        state.take_snapshot().unwrap(); // 5
        state.update(&batch(0, 5, 5, 5, 0));
        state.take_snapshot().unwrap(); // 10
        let newest = snapshot_path(dir.path(), 10);
        let mut bytes = fs::read(&newest).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        fs::write(&newest, &bytes).unwrap();
        let err = read_snapshot(&newest).unwrap_err();
        assert!(err.to_string().contains("CRC mismatch"), "{err}");

        let mut reopened = manager(&dir);
        reopened.truncate_and_reload(0, 10, 0).unwrap();
        assert_eq!(reopened.map_end_offset(), 5);
        assert_eq!(reopened.last_entry(PID).unwrap().last_sequence(), 4);
        assert!(!newest.exists(), "the corrupt snapshot is deleted");
    }

    #[test]
    fn malformed_snapshots_are_rejected() {
        let valid = encode_snapshot([&{
            let mut e = ProducerStateEntry::empty(PID);
            e.add_batch(&batch(0, 0, 1, 0, 0));
            e
        }]);
        let mut bad_version = valid.clone();
        bad_version[1] = 2;
        let truncated = valid[..valid.len() - 1].to_vec();
        let mut trailing = valid.clone();
        trailing.push(0);
        let cases: &[(&str, Vec<u8>, &str)] = &[
            ("empty", vec![], "shorter than"),
            ("bad version", bad_version, "unknown snapshot version 2"),
            ("truncated", truncated, "CRC mismatch"),
            ("trailing byte", trailing, "CRC mismatch"),
        ];
        for (name, bytes, fragment) in cases {
            let err = decode_snapshot(bytes).unwrap_err();
            assert!(err.contains(fragment), "{name}: {err:?} lacks {fragment:?}");
        }
        // A count that disagrees with the length, with a valid CRC.
        let mut wrong_count = valid.clone();
        wrong_count[6..10].copy_from_slice(&2i32.to_be_bytes());
        let crc = crc32c::crc32c(&wrong_count[6..]);
        wrong_count[2..6].copy_from_slice(&crc.to_be_bytes());
        assert!(decode_snapshot(&wrong_count)
            .unwrap_err()
            .contains("2 entries need"));
        assert_eq!(decode_snapshot(&valid).unwrap().len(), 1);
    }

    #[test]
    fn empty_state_snapshot_and_entry_without_batches() {
        // An entry whose last offset is -1 (Kafka writes that for a producer with no retained
        // batch) loads with its epoch but no batch: the next batch of that epoch must start at 0.
        let mut e = ProducerStateEntry::empty(PID);
        e.producer_epoch = 4;
        e.last_timestamp = 0;
        let decoded = decode_snapshot(&encode_snapshot([&e])).unwrap();
        assert_eq!(decoded, vec![e.clone()]);
        let dir = TestDir::new("ps-nobatch");
        let mut state = manager(&dir);
        state.producers.insert(PID, e);
        assert_eq!(
            outcome(state.validate_leader_append(PID, 4, 0, 0)),
            Want::New
        );
        assert_eq!(
            outcome(state.validate_leader_append(PID, 4, 3, 3)),
            Want::OutOfOrder
        );
        assert_eq!(decode_snapshot(&encode_snapshot([])).unwrap(), vec![]);
    }

    #[test]
    fn snapshot_file_management() {
        let dir = TestDir::new("ps-files");
        // Unrelated files are ignored when listing.
        fs::write(dir.path().join("00000000000000000000.log"), b"").unwrap();
        fs::write(dir.path().join("leader-epoch-checkpoint"), b"").unwrap();
        fs::write(dir.path().join("junk.snapshot"), b"").unwrap();
        let mut state = manager(&dir);
        assert_eq!(state.snapshot_offsets(), Vec::<i64>::new());
        for offset in [10, 20, 30, 40] {
            state.update(&batch(0, 0, 1, offset - 1, 0));
            state.take_snapshot().unwrap();
        }
        assert_eq!(manager(&dir).snapshot_offsets(), vec![10, 20, 30, 40]);
        state.delete_snapshots_before(20).unwrap();
        state.delete_snapshots_after(30).unwrap();
        assert_eq!(state.snapshot_offsets(), vec![20, 30]);
        assert_eq!(manager(&dir).snapshot_offsets(), vec![20, 30]);
        assert_eq!(state.oldest_snapshot_offset(), Some(20));
        assert_eq!(state.latest_snapshot_offset(), Some(30));
        state.truncate_fully_and_start_at(100).unwrap();
        assert_eq!(manager(&dir).snapshot_offsets(), Vec::<i64>::new());
        assert_eq!(state.map_end_offset(), 100);
        assert_eq!(state.producer_count(), 0);
        assert!(dir.path().join("junk.snapshot").exists());
    }

    fn txn_batch(pid: i64, first_seq: i32, count: i32, first_offset: i64) -> ProducerBatch {
        ProducerBatch {
            producer_id: pid,
            is_transactional: true,
            ..batch(0, first_seq, count, first_offset, 0)
        }
    }

    fn marker(control_type: ControlRecordType) -> EndTxnMarker {
        EndTxnMarker {
            control_type,
            coordinator_epoch: 3,
        }
    }

    #[test]
    fn transactions_open_at_their_first_batch_and_close_at_their_marker() {
        let dir = TestDir::new("ps-txn");
        let mut state = manager(&dir);
        state.update(&txn_batch(1, 0, 2, 0)); // pid 1: 0-1
        state.update(&txn_batch(2, 0, 1, 2)); // pid 2: 2
        state.update(&txn_batch(1, 2, 1, 3)); // pid 1: 3, same transaction
        assert_eq!(
            state.last_entry(1).unwrap().current_txn_first_offset,
            Some(0)
        );
        assert_eq!(
            state.ongoing_txns().collect::<Vec<_>>(),
            vec![(0, 1), (2, 2)]
        );
        assert_eq!(state.first_unstable_offset(), Some(0));

        let done = state
            .append_end_txn_marker(1, 0, marker(ControlRecordType::Abort), 4, 10)
            .unwrap();
        assert_eq!(
            done,
            CompletedTxn {
                producer_id: 1,
                first_offset: 0,
                last_offset: 4,
                is_aborted: true,
            }
        );
        // The other producer's open transaction bounds what this abort's entry records.
        assert_eq!(state.last_stable_offset(&done), 2);
        state.complete_txn(done);
        let entry = state.last_entry(1).unwrap();
        assert_eq!(
            (entry.current_txn_first_offset, entry.coordinator_epoch),
            (None, 3)
        );
        assert_eq!(state.map_end_offset(), 5);
        // Until the high watermark passes the marker the transaction is still unstable.
        assert_eq!(state.first_unstable_offset(), Some(0));
        assert_eq!(state.first_undecided_offset(), Some(2));
        state.on_high_watermark_updated(4);
        assert_eq!(state.first_unstable_offset(), Some(0));
        state.on_high_watermark_updated(5);
        assert_eq!(state.first_unstable_offset(), Some(2));

        let done = state
            .append_end_txn_marker(2, 0, marker(ControlRecordType::Commit), 5, 10)
            .unwrap();
        assert!(!done.is_aborted);
        assert_eq!(state.last_stable_offset(&done), 6);
        state.complete_txn(done);
        state.on_high_watermark_updated(6);
        assert_eq!(state.first_unstable_offset(), None);
        // A marker with no open transaction closes nothing.
        assert_eq!(
            state.append_end_txn_marker(2, 0, marker(ControlRecordType::Commit), 6, 10),
            None
        );
    }

    #[test]
    fn an_open_transaction_refuses_non_transactional_batches_and_old_epochs() {
        let dir = TestDir::new("ps-txn-state");
        let mut state = manager(&dir);
        state.update(&txn_batch(PID, 0, 1, 0));
        let pending = state.prepare_append();
        assert!(matches!(
            pending.validate_leader_batch(PID, 0, (1, 1), false),
            Err(ProducerStateError::InvalidTxnState(_))
        ));
        assert_eq!(
            outcome(pending.validate_leader_batch(PID, 0, (1, 1), true)),
            Want::New
        );
        // Staged transactional batches open a transaction for the batches after them.
        let mut pending = state.prepare_append();
        pending.stage(txn_batch(7, 0, 1, 1));
        assert!(matches!(
            pending.validate_leader_batch(7, 0, (1, 1), false),
            Err(ProducerStateError::InvalidTxnState(_))
        ));
        drop(pending);
        assert!(state.validate_end_txn_marker(PID, 0, Some(0)).is_ok());
        state.append_end_txn_marker(PID, 1, marker(ControlRecordType::Abort), 1, 0);
        assert!(matches!(
            state.validate_end_txn_marker(PID, 0, Some(3)),
            Err(ProducerStateError::InvalidProducerEpoch(_))
        ));
        // The last marker came from coordinator epoch 3: an older coordinator is fenced.
        assert!(matches!(
            state.validate_end_txn_marker(PID, 1, Some(2)),
            Err(ProducerStateError::TransactionCoordinatorFenced(_))
        ));
        assert!(state.validate_end_txn_marker(PID, 1, Some(3)).is_ok());
        assert!(state.validate_end_txn_marker(PID, 1, None).is_ok());
        // After the marker (which bumped the epoch) the producer writes at its new epoch.
        assert_eq!(
            outcome(state.validate_leader_append(PID, 1, 0, 0)),
            Want::New
        );
    }

    #[test]
    fn snapshots_carry_open_transactions() {
        let dir = TestDir::new("ps-txn-snap");
        let mut state = manager(&dir);
        state.update(&txn_batch(1, 0, 2, 0));
        state.update(&txn_batch(2, 0, 2, 2));
        let done = state
            .append_end_txn_marker(2, 0, marker(ControlRecordType::Commit), 4, 0)
            .unwrap();
        state.complete_txn(done);
        assert_eq!(state.take_snapshot().unwrap(), Some(5));
        let bytes = fs::read(snapshot_path(dir.path(), 5)).unwrap();
        // Producer 1's entry (the first, sorted by id) ends with current_txn_first_offset 0.
        let first_entry_end = 10 + 46;
        assert_eq!(
            &bytes[first_entry_end - 8..first_entry_end],
            &0i64.to_be_bytes()
        );
        assert_eq!(&bytes[first_entry_end + 46 - 8..], &(-1i64).to_be_bytes());

        let mut reopened = manager(&dir);
        reopened.truncate_and_reload(0, 5, 0).unwrap();
        assert_eq!(reopened.ongoing_txns().collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(reopened.first_unstable_offset(), Some(0));
        assert_eq!(reopened.last_entry(2).unwrap().coordinator_epoch, 3);
        // Reloading below a snapshot leaves it in place.
        reopened.reload_at_or_below(0, 4, 0).unwrap();
        assert_eq!(reopened.map_end_offset(), 0);
        assert_eq!(reopened.first_unstable_offset(), None);
        assert_eq!(reopened.snapshot_offsets(), vec![5]);
    }
}
