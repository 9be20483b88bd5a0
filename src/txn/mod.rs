//! # The transaction coordinator
//!
//! Kafka's transactions (KIP-98, with KIP-360's epoch recovery and KIP-890's verification of
//! transactional produces): a transactional id's producer id and epoch, the partitions of its
//! ongoing transaction, and the two-phase end of a transaction, durable in
//! `__transaction_state` (compacted, Kafka's record formats, [`records`]).
//!
//! - [`state`]: one id's state and the transitions each API makes of it, pure.
//! - [`service`]: the async shell: the ids of the `__transaction_state` partitions this node
//!   leads, loaded when it starts leading one, every change written there before it takes
//!   effect, markers sent to partition leaders, timed-out transactions aborted.
//!
//! The coordinator of an id leads `__transaction_state` partition
//! `abs(hashCode(id)) % transaction.state.log.num.partitions`.
//!
//! The partition side (open transactions, the last stable offset, `.txnindex`, control
//! batches) is in the storage crate's producer state and log; this module only writes markers
//! through the replica layer.

pub mod records;
pub mod service;
pub mod state;

pub use service::{TxnService, TxnView};
pub use state::{TxnResult, TxnState};

/// Name of the internal topic holding the coordinator's state.
pub const TRANSACTION_STATE_TOPIC_NAME: &str = "__transaction_state";
