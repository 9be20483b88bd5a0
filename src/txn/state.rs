//! One transactional id's state and the transitions the coordinator's APIs make of it (Kafka's
//! `TransactionMetadata`): each decision validates the request against the current state and
//! returns the state to write (a [`Transit`]); the state changes only once that write is
//! durable ([`TxnMetadata::complete`]). While a write is in flight the id has a *pending*
//! state and other operations on it get CONCURRENT_TRANSACTIONS.
//!
//! Pure: no I/O, no clock (time comes in as `now_ms`), no producer id allocation (a decision
//! that needs a fresh producer id says so, and is made again with one).

use std::collections::{BTreeMap, BTreeSet};

use super::records::TxnLogValue;
use crate::errors::ApiError;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Kafka's `TransactionState`, with its ids as written in `__transaction_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The name DescribeTransactions and ListTransactions answer (Kafka's `TransactionState.name`).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states a transition to `self` may start from (Kafka's `validPreviousStates`).
    fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            // From a completed or empty state: a version-2 abort with nothing added (Kafka's
            // `allowedEmptyAbort`).
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// No transaction is open or ending: the id is between transactions.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    /// A transaction is open: its partitions may hold records not yet committed or aborted.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
        )
    }
}

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnResult {
    Commit,
    Abort,
}

/// A topic partition in a transaction.
pub type TxnPartition = (String, i32);

/// The state a decision writes. It becomes the id's state once durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub client_transaction_version: i16,
}

impl Transit {
    /// The producer id and epoch a client continues with once this transit is durable: the
    /// next producer id at epoch 0 when an exhausted epoch moves the id on.
    pub fn continues_as(&self) -> (i64, i16) {
        if self.next_producer_id != NO_PRODUCER_ID {
            (self.next_producer_id, 0)
        } else {
            (self.producer_id, self.producer_epoch)
        }
    }

    /// The record value this transit is written as.
    pub fn log_value(&self) -> TxnLogValue {
        let mut partitions: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (topic, p) in &self.partitions {
            partitions.entry(topic.clone()).or_default().push(*p);
        }
        TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions,
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }
}

/// One transactional id's state (Kafka's `TransactionMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub client_transaction_version: i16,
    /// The state of the write in flight, if any.
    pub pending: Option<TxnState>,
}

/// Transaction version 2 (KIP-890 part 2): the producer epoch is bumped at the end of every
/// transaction, and partitions join a transaction through their leader's first write.
pub const TRANSACTION_VERSION_2: i16 = 2;

/// Whether a transaction of `transaction_version` bumps the epoch at its end (Kafka's
/// `TransactionVersion.supportsEpochBump`).
pub fn bumps_epoch(transaction_version: i16) -> bool {
    transaction_version >= TRANSACTION_VERSION_2
}

/// Who ends a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndTxnBy {
    /// A client's EndTxn, speaking `transaction_version` (2 from EndTxn v5). `next_producer_id`
    /// is a fresh id for a version-2 end whose epoch is exhausted
    /// ([`TxnMetadata::end_needs_producer_id`]).
    Client {
        transaction_version: i16,
        next_producer_id: Option<i64>,
    },
    /// The coordinator, aborting a transaction it fenced (InitProducerId) or that timed out.
    Coordinator,
}

/// An epoch may be handed out to a producer only below this, so the coordinator can always
/// fence one more time (Kafka's `isEpochExhausted`).
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// What InitProducerId decided.
#[derive(Debug, PartialEq, Eq)]
pub enum InitDecision {
    /// Write this transit, then answer its producer id and epoch.
    Write(Transit),
    /// An open transaction must be aborted first (with this fencing transit's epoch); the
    /// client is answered CONCURRENT_TRANSACTIONS and retries.
    FenceAndAbort(Transit),
    /// Decide again with a fresh producer id.
    NeedProducerId,
}

impl TxnMetadata {
    /// A transactional id seen for the first time: `producer_id` freshly allocated, no epoch yet.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            client_transaction_version: 0,
            pending: None,
        }
    }

    /// The state a `__transaction_state` value describes (a load).
    pub fn from_log(transactional_id: &str, v: &TxnLogValue) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_owned(),
            producer_id: v.producer_id,
            previous_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: v.timeout_ms,
            state: v.state,
            partitions: v
                .partitions
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
                .collect(),
            start_ms: v.start_ms,
            last_update_ms: v.last_update_ms,
            client_transaction_version: v.client_transaction_version,
            pending: None,
        }
    }

    fn transit(&self) -> Transit {
        Transit {
            producer_id: self.producer_id,
            previous_producer_id: self.producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: self.partitions.clone(),
            start_ms: self.start_ms,
            last_update_ms: self.last_update_ms,
            client_transaction_version: 0,
        }
    }

    /// Marks `t` pending (Kafka's `prepareTransitionTo`). Panics on a transition the state
    /// machine does not allow: every caller checked the state first.
    fn prepare(&mut self, t: Transit) -> Transit {
        assert!(
            self.pending.is_none(),
            "{}: a transition to {:?} while one to {:?} is pending",
            self.transactional_id,
            t.state,
            self.pending
        );
        assert!(
            t.state.valid_previous().contains(&self.state),
            "{}: no transition from {:?} to {:?}",
            self.transactional_id,
            self.state,
            t.state
        );
        self.pending = Some(t.state);
        t
    }

    /// The write of `t` is durable: it becomes the state.
    pub fn complete(&mut self, t: &Transit) {
        self.pending = None;
        self.producer_id = t.producer_id;
        self.previous_producer_id = t.previous_producer_id;
        self.next_producer_id = t.next_producer_id;
        self.producer_epoch = t.producer_epoch;
        self.last_producer_epoch = t.last_producer_epoch;
        self.timeout_ms = t.timeout_ms;
        self.state = t.state;
        self.partitions = t.partitions.clone();
        self.start_ms = t.start_ms;
        self.last_update_ms = t.last_update_ms;
        self.client_transaction_version = t.client_transaction_version;
    }

    /// The write failed: nothing changes.
    pub fn abandon(&mut self) {
        self.pending = None;
    }

    /// InitProducerId (Kafka's `prepareInitProducerIdTransit`). `expected` is the KIP-360
    /// producer id and epoch a client recovering from an error sends; `fresh_id` a producer id
    /// allocated because a previous call answered [`InitDecision::NeedProducerId`].
    pub fn init_producer_id(
        &mut self,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        fresh_id: Option<i64>,
        now_ms: i64,
    ) -> Result<InitDecision, ApiError> {
        if self.pending.is_some() {
            return Err(ApiError::ConcurrentTransactions);
        }
        if let Some((id, epoch)) = expected {
            let valid = self.producer_epoch == NO_PRODUCER_EPOCH
                || id == self.producer_id
                || (id == self.previous_producer_id && is_epoch_exhausted(epoch));
            if !valid {
                return Err(ApiError::ProducerFenced);
            }
        }
        match self.state {
            TxnState::PrepareAbort | TxnState::PrepareCommit => {
                Err(ApiError::ConcurrentTransactions)
            }
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => {
                let rotate = is_epoch_exhausted(self.producer_epoch)
                    && expected.is_none_or(|(_, e)| e == self.producer_epoch);
                if rotate {
                    let Some(id) = fresh_id else {
                        return Ok(InitDecision::NeedProducerId);
                    };
                    let mut t = self.transit();
                    t.producer_id = id;
                    t.producer_epoch = 0;
                    t.last_producer_epoch = if expected.is_some() {
                        self.producer_epoch
                    } else {
                        NO_PRODUCER_EPOCH
                    };
                    t.timeout_ms = timeout_ms;
                    t.state = TxnState::Empty;
                    t.partitions.clear();
                    t.start_ms = -1;
                    t.last_update_ms = now_ms;
                    return Ok(InitDecision::Write(self.prepare(t)));
                }
                let bumped = self.producer_epoch.wrapping_add(1).max(0);
                let (epoch, last) = match expected {
                    None => (bumped, NO_PRODUCER_EPOCH),
                    Some((_, e))
                        if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch =>
                    {
                        (bumped, self.producer_epoch)
                    }
                    // A retry of a bump whose answer was lost: answer the same epoch again.
                    Some((_, e)) if e == self.last_producer_epoch => {
                        (self.producer_epoch, self.last_producer_epoch)
                    }
                    Some(_) => return Err(ApiError::ProducerFenced),
                };
                let mut t = self.transit();
                t.previous_producer_id = self.previous_producer_id;
                t.producer_epoch = epoch;
                t.last_producer_epoch = last;
                t.timeout_ms = timeout_ms;
                t.state = TxnState::Empty;
                t.partitions.clear();
                t.start_ms = -1;
                t.last_update_ms = now_ms;
                Ok(InitDecision::Write(self.prepare(t)))
            }
            TxnState::Ongoing => Ok(InitDecision::FenceAndAbort(self.fence_epoch())),
            TxnState::Dead | TxnState::PrepareEpochFence => Err(ApiError::UnknownServerError(
                format!("transactional id in state {:?}", self.state),
            )),
        }
    }

    /// Bumps the epoch to fence the current producer of an ongoing transaction before aborting
    /// it (Kafka's `prepareFenceProducerEpoch`), for InitProducerId and the timeout. The bumped
    /// epoch is kept only in the abort that follows; it is never answered to a client. The
    /// epoch in memory changes only once that abort is durable, so a fence whose write failed
    /// left nothing behind, and the next fence bumps again from the same epoch: always above
    /// the producer's (Kafka bumps its in-memory epoch before the write and so must reuse it
    /// after a failure, `hasFailedEpochFence`).
    fn fence_epoch(&mut self) -> Transit {
        let epoch = self.producer_epoch.saturating_add(1);
        let mut t = self.transit();
        t.previous_producer_id = self.previous_producer_id;
        t.producer_epoch = epoch;
        t.last_producer_epoch = NO_PRODUCER_EPOCH;
        t.state = TxnState::PrepareEpochFence;
        self.prepare(t)
    }

    /// The producer id and epoch an end that moved to the next producer id answered, while its
    /// markers are still being written: that client is early, not wrong.
    fn is_next_producer_early(&self, producer_id: i64, producer_epoch: i16) -> bool {
        matches!(self.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            && self.next_producer_id != NO_PRODUCER_ID
            && self.next_producer_id == producer_id
            && producer_epoch == 0
    }

    fn check_producer(&self, producer_id: i64, producer_epoch: i16) -> Result<(), ApiError> {
        if self.is_next_producer_early(producer_id, producer_epoch) {
            Err(ApiError::ConcurrentTransactions)
        } else if self.producer_id != producer_id {
            Err(ApiError::InvalidProducerIdMapping)
        } else if self.producer_epoch != producer_epoch {
            Err(ApiError::ProducerFenced)
        } else {
            Ok(())
        }
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, which adds the group's offsets partition).
    /// `Ok(None)`: every partition is already in the ongoing transaction, nothing to write.
    /// `transaction_version` is the version the request speaks: 2 for a partition leader's or
    /// group coordinator's implicit add (AddPartitionsToTxn v4+, KIP-890 part 2), 0 for a
    /// client's AddPartitionsToTxn v0-3 and AddOffsetsToTxn. The transaction keeps it, and
    /// it decides how its end treats the epoch.
    pub fn add_partitions(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &BTreeSet<TxnPartition>,
        transaction_version: i16,
        now_ms: i64,
    ) -> Result<Option<Transit>, ApiError> {
        self.check_producer(producer_id, producer_epoch)?;
        if self.pending.is_some()
            || matches!(self.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        {
            return Err(ApiError::ConcurrentTransactions);
        }
        if self.state == TxnState::Ongoing && partitions.is_subset(&self.partitions) {
            return Ok(None);
        }
        let mut t = self.transit();
        t.previous_producer_id = self.previous_producer_id;
        t.client_transaction_version = transaction_version;
        if matches!(
            self.state,
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit
        ) {
            t.start_ms = now_ms;
        }
        t.partitions.extend(partitions.iter().cloned());
        t.state = TxnState::Ongoing;
        t.last_update_ms = now_ms;
        Ok(Some(self.prepare(t)))
    }

    /// Whether a transactional produce to `partition` belongs to the ongoing transaction
    /// (KIP-890's verification): Kafka's `handleVerifyPartitionsInTransaction`.
    pub fn verify_partition(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        partition: &TxnPartition,
    ) -> Result<(), ApiError> {
        self.check_producer(producer_id, producer_epoch)?;
        if matches!(self.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ApiError::ConcurrentTransactions);
        }
        if self.partitions.contains(partition) {
            Ok(())
        } else {
            Err(ApiError::TransactionAbortable)
        }
    }

    /// Whether a client's EndTxn must bring a fresh producer id: with transaction version 2
    /// each end bumps the epoch, and an exhausted epoch moves the id to a new producer id
    /// instead (Kafka's `isProducerEpochExhausted` in `endTransaction`).
    pub fn end_needs_producer_id(
        &self,
        producer_epoch: i16,
        result: TxnResult,
        transaction_version: i16,
    ) -> bool {
        let ends =
            self.state == TxnState::Ongoing || (result == TxnResult::Abort && self.state.is_idle());
        bumps_epoch(transaction_version)
            && self.pending.is_none()
            && ends
            && self.producer_epoch == producer_epoch
            && is_epoch_exhausted(self.producer_epoch)
    }

    /// EndTxn, from a client or from the coordinator aborting an expired or fenced transaction.
    /// `Ok(None)`: a retry of an EndTxn that already completed, answered without a write.
    ///
    /// With transaction version 2 (the transaction's, Kafka's
    /// `currentTxnMetadataIsAtLeastTransactionsV2`) every end bumps the producer epoch: the
    /// markers carry the bumped epoch, and the client continues with it. A retry is then
    /// recognized by the epoch one below the current one (or, after an exhausted epoch moved
    /// the id to a new producer id, by the previous producer id at the last epoch); the same
    /// epoch in a completed state is the next transaction's end, refused as fenced.
    pub fn end_transaction(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        result: TxnResult,
        by: EndTxnBy,
        now_ms: i64,
    ) -> Result<Option<Transit>, ApiError> {
        let fencing = self.pending == Some(TxnState::PrepareEpochFence);
        if self.is_next_producer_early(producer_id, producer_epoch) {
            return Err(ApiError::ConcurrentTransactions);
        }
        // The rules of the request's version (Kafka 4.x's `endTransaction` against
        // `endTransactionWithTV1`); the coordinator's own aborts follow the transaction's.
        let tv2 = !fencing
            && match by {
                EndTxnBy::Client {
                    transaction_version,
                    ..
                } => bumps_epoch(transaction_version),
                EndTxnBy::Coordinator => bumps_epoch(self.client_transaction_version),
            };
        // The last epoch, i16::MAX, is never a client's: a client's end from the epoch below
        // it moves on to the next producer id, so only a coordinator's fence or abort reaches
        // it, and a client one below is the fenced producer, not a retry.
        let retry_after_bump = tv2
            && self.producer_epoch != i16::MAX
            && i32::from(self.producer_epoch) == i32::from(producer_epoch) + 1;
        let retry_after_overflow = tv2
            && self.previous_producer_id == producer_id
            && producer_epoch == i16::MAX - 1
            && self.producer_epoch == 0;
        if self.producer_id != producer_id && !retry_after_overflow {
            return Err(ApiError::InvalidProducerIdMapping);
        }
        let valid_epoch = if tv2 {
            match self.state {
                TxnState::Ongoing
                | TxnState::Empty
                | TxnState::Dead
                | TxnState::PrepareEpochFence => producer_epoch == self.producer_epoch,
                TxnState::PrepareCommit | TxnState::PrepareAbort => retry_after_bump,
                // The current epoch in a completed state: the end of a transaction that added
                // nothing (an abort of it is written; see below).
                TxnState::CompleteCommit | TxnState::CompleteAbort => {
                    retry_after_bump
                        || retry_after_overflow
                        || producer_epoch == self.producer_epoch
                }
            }
        } else {
            let from_client = matches!(by, EndTxnBy::Client { .. });
            (!from_client || producer_epoch == self.producer_epoch)
                && producer_epoch >= self.producer_epoch
        };
        if !valid_epoch && !fencing {
            return Err(ApiError::ProducerFenced);
        }
        if self.pending.is_some() && !fencing {
            return Err(ApiError::ConcurrentTransactions);
        }
        let invalid = || {
            Err(ApiError::InvalidTxnState(format!(
                "the transaction is {:?}, it cannot be ended with {result:?}",
                self.state
            )))
        };
        let empty_abort = tv2
            && result == TxnResult::Abort
            && self.state.is_idle()
            && producer_epoch == self.producer_epoch
            && self.producer_id == producer_id;
        match (self.state, result) {
            (TxnState::Ongoing, _) => self.prepare_end(producer_epoch, result, by, fencing, now_ms),
            // A version-2 client marks its transaction begun at its first send, before any
            // partition joins it; if none did (the batch never reached its leader) its abort
            // finds no transaction. Kafka 4.x writes the abort anyway, with no partitions and
            // so no markers, and bumps the epoch as for any end.
            _ if empty_abort => self.prepare_end(producer_epoch, result, by, fencing, now_ms),
            // A retry of an end that completed: answered without a write.
            (TxnState::CompleteCommit, TxnResult::Commit)
            | (TxnState::CompleteAbort, TxnResult::Abort)
                if !tv2 || retry_after_bump || retry_after_overflow =>
            {
                Ok(None)
            }
            (TxnState::PrepareCommit, TxnResult::Commit)
            | (TxnState::PrepareAbort, TxnResult::Abort) => Err(ApiError::ConcurrentTransactions),
            _ => invalid(),
        }
    }

    /// The PrepareCommit or PrepareAbort of an end (Kafka's `prepareAbortOrCommit`).
    fn prepare_end(
        &mut self,
        producer_epoch: i16,
        result: TxnResult,
        by: EndTxnBy,
        fencing: bool,
        now_ms: i64,
    ) -> Result<Option<Transit>, ApiError> {
        let mut t = self.transit();
        t.previous_producer_id = self.previous_producer_id;
        t.client_transaction_version = self.client_transaction_version;
        // The epoch this end starts from: the fence's, which goes into the abort.
        let mut epoch = self.producer_epoch;
        if fencing {
            if result != TxnResult::Abort {
                return Err(ApiError::InvalidTxnState(
                    "a fenced transaction can only be aborted".into(),
                ));
            }
            self.pending = None;
            epoch = producer_epoch;
            t.producer_epoch = epoch;
            t.last_producer_epoch = NO_PRODUCER_EPOCH;
        }
        // Kafka's `prepareAbortOrCommit`: with transaction version 2 the end bumps the
        // epoch (a coordinator's abort too, above its fence, as Kafka's server-side
        // version 2 does), and an exhausted epoch takes the next producer id with it.
        let bump = match by {
            EndTxnBy::Client {
                transaction_version,
                next_producer_id,
            } => {
                t.client_transaction_version = transaction_version;
                if bumps_epoch(transaction_version) && is_epoch_exhausted(epoch) {
                    t.next_producer_id = next_producer_id.ok_or_else(|| {
                        ApiError::UnknownServerError(
                            "an exhausted epoch needs a fresh producer id".into(),
                        )
                    })?;
                }
                bumps_epoch(transaction_version)
            }
            EndTxnBy::Coordinator => bumps_epoch(self.client_transaction_version),
        };
        if bump {
            t.producer_epoch = epoch.saturating_add(1);
            t.last_producer_epoch = epoch;
        }
        t.state = match result {
            TxnResult::Commit => TxnState::PrepareCommit,
            TxnResult::Abort => TxnState::PrepareAbort,
        };
        t.last_update_ms = now_ms;
        Ok(Some(self.prepare(t)))
    }

    /// The markers of a prepared transaction are all written: its completion to write.
    pub fn complete_transaction(&mut self, now_ms: i64) -> Option<Transit> {
        if self.pending.is_some() {
            return None;
        }
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        let mut t = self.transit();
        t.previous_producer_id = self.previous_producer_id;
        t.client_transaction_version = self.client_transaction_version;
        t.state = state;
        t.partitions.clear();
        t.last_producer_epoch = self.producer_epoch;
        t.last_update_ms = now_ms;
        // The markers carried the last epoch of the old producer id; the id continues with the
        // next one (Kafka's `prepareComplete` after an epoch overflow).
        if bumps_epoch(self.client_transaction_version) && self.next_producer_id != NO_PRODUCER_ID {
            t.previous_producer_id = self.producer_id;
            t.producer_id = self.next_producer_id;
            t.producer_epoch = 0;
        }
        Some(self.prepare(t))
    }

    /// An ongoing transaction past its timeout, to be aborted by the coordinator: the fencing
    /// transit that starts the abort (Kafka's `abortTimedOutTransactions`).
    pub fn expire(&mut self, now_ms: i64) -> Option<Transit> {
        let expired = self.state == TxnState::Ongoing
            && self.pending.is_none()
            && self.start_ms + i64::from(self.timeout_ms) < now_ms;
        expired.then(|| self.fence_epoch())
    }

    /// An id idle past `transactional.id.expiration.ms` with no open transaction is removed
    /// (Kafka writes a tombstone after a transition to Dead).
    pub fn is_expired_id(&self, expiration_ms: i64, now_ms: i64) -> bool {
        self.pending.is_none()
            && matches!(
                self.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            )
            && self.last_update_ms + expiration_ms <= now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's EndTxn below v5 (transaction version 0).
    const V0: EndTxnBy = EndTxnBy::Client {
        transaction_version: 0,
        next_producer_id: None,
    };

    fn parts(list: &[(&str, i32)]) -> BTreeSet<TxnPartition> {
        list.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect()
    }

    fn init(m: &mut TxnMetadata, now: i64) -> Transit {
        match m.init_producer_id(m.timeout_ms, None, None, now).unwrap() {
            InitDecision::Write(t) => {
                m.complete(&t);
                t
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_new_id_gets_epoch_0_and_each_init_bumps_it() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        assert_eq!(init(&mut m, 1).producer_epoch, 0);
        assert_eq!(init(&mut m, 2).producer_epoch, 1);
        assert_eq!((m.producer_id, m.state), (7, TxnState::Empty));
    }

    #[test]
    fn commit_goes_through_prepare_and_complete() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        let t = m
            .add_partitions(7, 0, &parts(&[("a", 0), ("b", 1)]), 0, 10)
            .unwrap()
            .unwrap();
        assert_eq!(
            m.add_partitions(7, 0, &parts(&[("a", 0)]), 0, 11),
            Err(ApiError::ConcurrentTransactions)
        );
        m.complete(&t);
        assert_eq!((m.state, m.start_ms), (TxnState::Ongoing, 10));
        assert_eq!(m.add_partitions(7, 0, &parts(&[("a", 0)]), 0, 11), Ok(None));
        assert!(m.verify_partition(7, 0, &("a".into(), 0)).is_ok());
        assert_eq!(
            m.verify_partition(7, 0, &("c".into(), 0)),
            Err(ApiError::TransactionAbortable)
        );
        let t = m
            .end_transaction(7, 0, TxnResult::Commit, V0, 20)
            .unwrap()
            .unwrap();
        m.complete(&t);
        assert_eq!(m.state, TxnState::PrepareCommit);
        assert_eq!(
            m.end_transaction(7, 0, TxnResult::Commit, V0, 21),
            Err(ApiError::ConcurrentTransactions)
        );
        assert!(matches!(
            m.end_transaction(7, 0, TxnResult::Abort, V0, 21),
            Err(ApiError::InvalidTxnState(_))
        ));
        let t = m.complete_transaction(22).unwrap();
        m.complete(&t);
        assert_eq!(m.state, TxnState::CompleteCommit);
        assert!(m.partitions.is_empty());
        // A retried commit is answered without a write.
        assert_eq!(m.end_transaction(7, 0, TxnResult::Commit, V0, 23), Ok(None));
    }

    #[test]
    fn wrong_producer_or_epoch_is_refused() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        init(&mut m, 2);
        let p = parts(&[("a", 0)]);
        assert_eq!(
            m.add_partitions(8, 1, &p, 0, 3),
            Err(ApiError::InvalidProducerIdMapping)
        );
        assert_eq!(
            m.add_partitions(7, 0, &p, 0, 3),
            Err(ApiError::ProducerFenced)
        );
        assert!(matches!(
            m.end_transaction(7, 1, TxnResult::Commit, V0, 3),
            Err(ApiError::InvalidTxnState(_))
        ));
        assert_eq!(
            m.end_transaction(7, 0, TxnResult::Commit, V0, 3),
            Err(ApiError::ProducerFenced)
        );
    }

    #[test]
    fn init_during_a_transaction_fences_and_aborts_it() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        let t = m
            .add_partitions(7, 0, &parts(&[("a", 0)]), 0, 2)
            .unwrap()
            .unwrap();
        m.complete(&t);
        let fence = match m.init_producer_id(60_000, None, None, 3).unwrap() {
            InitDecision::FenceAndAbort(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(fence.producer_epoch, 1);
        let abort = m
            .end_transaction(
                7,
                fence.producer_epoch,
                TxnResult::Abort,
                EndTxnBy::Coordinator,
                3,
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            (abort.state, abort.producer_epoch),
            (TxnState::PrepareAbort, 1)
        );
        m.complete(&abort);
        // The old producer is fenced; the new one is told to retry until the abort completes.
        assert_eq!(
            m.add_partitions(7, 0, &parts(&[("a", 0)]), 0, 4),
            Err(ApiError::ProducerFenced)
        );
        assert_eq!(
            m.init_producer_id(60_000, None, None, 4),
            Err(ApiError::ConcurrentTransactions)
        );
        let done = m.complete_transaction(5).unwrap();
        m.complete(&done);
        assert_eq!(init(&mut m, 6).producer_epoch, 2);
    }

    #[test]
    fn a_fence_whose_write_failed_is_followed_by_one_above_the_producers_epoch() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        let t = m
            .add_partitions(7, 0, &parts(&[("a", 0)]), 0, 2)
            .unwrap()
            .unwrap();
        m.complete(&t);
        for attempt in 0..2 {
            let fence = match m.init_producer_id(60_000, None, None, 3).unwrap() {
                InitDecision::FenceAndAbort(t) => t,
                other => panic!("{other:?}"),
            };
            let abort = m
                .end_transaction(
                    7,
                    fence.producer_epoch,
                    TxnResult::Abort,
                    EndTxnBy::Coordinator,
                    3,
                )
                .unwrap()
                .unwrap();
            // Above the producer's epoch 0, so its delayed writes are refused at the partitions.
            assert_eq!(abort.producer_epoch, 1, "attempt {attempt}");
            // The write of the abort failed: nothing changed.
            m.abandon();
            assert_eq!((m.state, m.producer_epoch), (TxnState::Ongoing, 0));
        }
    }

    #[test]
    fn an_exhausted_epoch_rotates_the_producer_id() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        m.producer_epoch = i16::MAX - 1;
        assert_eq!(
            m.init_producer_id(60_000, None, None, 2),
            Ok(InitDecision::NeedProducerId)
        );
        let t = match m.init_producer_id(60_000, None, Some(99), 2).unwrap() {
            InitDecision::Write(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            (t.producer_id, t.producer_epoch, t.previous_producer_id),
            (99, 0, 7)
        );
    }

    #[test]
    fn kip_360_recovery_keeps_the_id_and_refuses_strangers() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        let t = match m.init_producer_id(60_000, Some((7, 0)), None, 2).unwrap() {
            InitDecision::Write(t) => t,
            other => panic!("{other:?}"),
        };
        m.complete(&t);
        assert_eq!((m.producer_epoch, m.last_producer_epoch), (1, 0));
        // The answer was lost and the client retries with the epoch it had.
        let t = match m.init_producer_id(60_000, Some((7, 0)), None, 3).unwrap() {
            InitDecision::Write(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(t.producer_epoch, 1);
        m.abandon();
        assert_eq!(
            m.init_producer_id(60_000, Some((5, 0)), None, 3),
            Err(ApiError::ProducerFenced)
        );
    }

    #[test]
    fn a_transaction_past_its_timeout_expires() {
        let mut m = TxnMetadata::new("tx", 7, 1_000, 0);
        init(&mut m, 1);
        let t = m
            .add_partitions(7, 0, &parts(&[("a", 0)]), 0, 100)
            .unwrap()
            .unwrap();
        m.complete(&t);
        assert!(m.expire(1_100).is_none());
        let fence = m.expire(1_101).unwrap();
        assert_eq!(fence.state, TxnState::PrepareEpochFence);
    }

    /// A client's EndTxn v5 (transaction version 2).
    const V2: EndTxnBy = EndTxnBy::Client {
        transaction_version: 2,
        next_producer_id: None,
    };

    /// A transaction whose partition joined through its leader (transaction version 2).
    fn begin_v2(m: &mut TxnMetadata, producer_id: i64, epoch: i16, now: i64) {
        let t = m
            .add_partitions(producer_id, epoch, &parts(&[("a", 0)]), 2, now)
            .unwrap()
            .unwrap();
        m.complete(&t);
    }

    fn finish(m: &mut TxnMetadata, t: &Transit, now: i64) {
        m.complete(t);
        let done = m.complete_transaction(now).unwrap();
        m.complete(&done);
    }

    #[test]
    fn with_transaction_version_2_every_end_bumps_the_epoch() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        begin_v2(&mut m, 7, 0, 2);
        let t = m
            .end_transaction(7, 0, TxnResult::Commit, V2, 3)
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.state, t.producer_epoch, t.last_producer_epoch),
            (TxnState::PrepareCommit, 1, 0)
        );
        // The markers carry epoch 1 and the client continues with it.
        assert_eq!(t.continues_as(), (7, 1));
        m.complete(&t);
        // A retry at the old epoch while the markers are written is not fenced.
        assert_eq!(
            m.end_transaction(7, 0, TxnResult::Commit, V2, 4),
            Err(ApiError::ConcurrentTransactions)
        );
        let done = m.complete_transaction(5).unwrap();
        m.complete(&done);
        assert_eq!((m.state, m.producer_epoch), (TxnState::CompleteCommit, 1));
        // A retry after the completion is answered without a write (with epoch 1).
        assert_eq!(m.end_transaction(7, 0, TxnResult::Commit, V2, 6), Ok(None));
        // The bumped epoch committing a transaction it never began: no transaction.
        assert!(matches!(
            m.end_transaction(7, 1, TxnResult::Commit, V2, 6),
            Err(ApiError::InvalidTxnState(_))
        ));
        // The next transaction runs at the bumped epoch; the old one is fenced from it.
        assert_eq!(
            m.add_partitions(7, 0, &parts(&[("a", 0)]), 2, 7),
            Err(ApiError::ProducerFenced)
        );
        begin_v2(&mut m, 7, 1, 7);
        let t = m
            .end_transaction(7, 1, TxnResult::Abort, V2, 8)
            .unwrap()
            .unwrap();
        assert_eq!((t.state, t.producer_epoch), (TxnState::PrepareAbort, 2));
    }

    #[test]
    fn with_transaction_version_2_an_exhausted_epoch_moves_to_the_next_producer_id() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        m.producer_epoch = i16::MAX - 1;
        begin_v2(&mut m, 7, i16::MAX - 1, 2);
        assert!(m.end_needs_producer_id(i16::MAX - 1, TxnResult::Commit, 2));
        assert!(!m.end_needs_producer_id(i16::MAX - 1, TxnResult::Commit, 0));
        assert!(matches!(
            m.end_transaction(7, i16::MAX - 1, TxnResult::Commit, V2, 3),
            Err(ApiError::UnknownServerError(_))
        ));
        let with_id = EndTxnBy::Client {
            transaction_version: 2,
            next_producer_id: Some(99),
        };
        let t = m
            .end_transaction(7, i16::MAX - 1, TxnResult::Commit, with_id, 3)
            .unwrap()
            .unwrap();
        // The markers use the old id's last epoch; the client continues as the new id.
        assert_eq!((t.producer_id, t.producer_epoch), (7, i16::MAX));
        assert_eq!(t.continues_as(), (99, 0));
        finish(&mut m, &t, 4);
        assert_eq!(
            (m.producer_id, m.producer_epoch, m.previous_producer_id),
            (99, 0, 7)
        );
        // A retry with the old id is recognized and answered with the new one.
        assert_eq!(
            m.end_transaction(7, i16::MAX - 1, TxnResult::Commit, V2, 5),
            Ok(None)
        );
        begin_v2(&mut m, 99, 0, 6);
    }

    #[test]
    fn with_transaction_version_2_a_fenced_transaction_is_aborted_above_the_fence() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        begin_v2(&mut m, 7, 0, 2);
        let fence = match m.init_producer_id(60_000, None, None, 3).unwrap() {
            InitDecision::FenceAndAbort(t) => t,
            other => panic!("{other:?}"),
        };
        let abort = m
            .end_transaction(
                7,
                fence.producer_epoch,
                TxnResult::Abort,
                EndTxnBy::Coordinator,
                3,
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            (abort.producer_epoch, fence.producer_epoch),
            (2, 1),
            "the abort bumps above the fence, as every version-2 end does"
        );
        finish(&mut m, &abort, 4);
        // The old producer, at epoch 0, is not mistaken for a retry of the abort.
        assert_eq!(
            m.end_transaction(7, 0, TxnResult::Abort, V2, 5),
            Err(ApiError::ProducerFenced)
        );
        assert_eq!(init(&mut m, 6).producer_epoch, 3);
    }

    #[test]
    fn with_transaction_version_2_an_abort_with_nothing_added_is_written_and_bumps() {
        // A version-2 client begins at its first send; if no partition joined, its abort finds
        // the id Empty (right after InitProducerId) or completed (after an earlier transaction).
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        let t = m
            .end_transaction(7, 0, TxnResult::Abort, V2, 2)
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.state, t.producer_epoch, t.partitions.len()),
            (TxnState::PrepareAbort, 1, 0)
        );
        finish(&mut m, &t, 3);
        assert_eq!((m.state, m.producer_epoch), (TxnState::CompleteAbort, 1));
        // Its retry is answered; the next empty abort at the new epoch is written again.
        assert_eq!(m.end_transaction(7, 0, TxnResult::Abort, V2, 4), Ok(None));
        let t = m
            .end_transaction(7, 1, TxnResult::Abort, V2, 5)
            .unwrap()
            .unwrap();
        assert_eq!(t.producer_epoch, 2);
        finish(&mut m, &t, 6);
        // A version-1 client (EndTxn v4) keeps the old answer: no transaction to abort.
        assert!(matches!(
            m.end_transaction(7, 2, TxnResult::Commit, V0, 7),
            Err(ApiError::InvalidTxnState(_))
        ));
    }

    #[test]
    fn a_client_early_with_the_next_producer_id_is_told_to_retry() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        m.producer_epoch = i16::MAX - 1;
        begin_v2(&mut m, 7, i16::MAX - 1, 2);
        let with_id = EndTxnBy::Client {
            transaction_version: 2,
            next_producer_id: Some(99),
        };
        let t = m
            .end_transaction(7, i16::MAX - 1, TxnResult::Commit, with_id, 3)
            .unwrap()
            .unwrap();
        m.complete(&t);
        // The answer (99, 0) reached the client before the markers: its next transaction is
        // retried, not refused.
        assert_eq!(
            m.add_partitions(99, 0, &parts(&[("a", 0)]), 2, 4),
            Err(ApiError::ConcurrentTransactions)
        );
        assert_eq!(
            m.end_transaction(99, 0, TxnResult::Abort, V2, 4),
            Err(ApiError::ConcurrentTransactions)
        );
        let done = m.complete_transaction(5).unwrap();
        m.complete(&done);
        begin_v2(&mut m, 99, 0, 6);
    }

    #[test]
    fn a_producer_fenced_at_the_last_epoch_is_not_taken_for_a_retry() {
        let mut m = TxnMetadata::new("tx", 7, 60_000, 0);
        init(&mut m, 1);
        m.producer_epoch = i16::MAX - 1;
        begin_v2(&mut m, 7, i16::MAX - 1, 2);
        let fence = match m.init_producer_id(60_000, None, None, 3).unwrap() {
            InitDecision::FenceAndAbort(t) => t,
            other => panic!("{other:?}"),
        };
        let abort = m
            .end_transaction(
                7,
                fence.producer_epoch,
                TxnResult::Abort,
                EndTxnBy::Coordinator,
                3,
            )
            .unwrap()
            .unwrap();
        finish(&mut m, &abort, 4);
        assert_eq!(m.producer_epoch, i16::MAX);
        // The zombie at the epoch below is fenced, never handed the last epoch.
        for result in [TxnResult::Abort, TxnResult::Commit] {
            assert_eq!(
                m.end_transaction(7, i16::MAX - 1, result, V2, 5),
                Err(ApiError::ProducerFenced)
            );
        }
    }
}
