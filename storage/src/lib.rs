//! # kafkaiq-storage
//!
//! Kafka-format segment logs for one broker's partitions. This crate knows nothing of brokers,
//! the wire protocol, ISR or consumer groups: it stores opaque v2 record batches in Apache
//! Kafka's on-disk layout so that Kafka's own tools can read what it writes.
//!
//! # Layout
//! * [`batch`]: the v2 batch header — parse, validate, rewrite offsets/epoch/LogAppendTime.
//! * [`compression`]: decompresses a batch's records for ListOffsets only (never on append/read).
//! * [`handles`]: the bounded pool of open `.log` descriptors and index maps shared by every log.
//! * [`index`]: `.index` and `.timeindex`, memory-mapped when used (all `unsafe` is in `mmap`).
//! * [`segment`]: one `.log` file with its two indexes.
//! * [`log`]: a partition's log — append, read, roll, retention, truncation, recovery.
//! * [`manager`]: every log of the broker, the per-dir checkpoint files, the clean-shutdown marker.
//! * [`cleaner`]: log compaction — the key → offset map, one cleaning of a log, the batch filter.
//! * [`deleter`]: removes deleted logs' renamed `-delete` directories in the background.
//! * [`parallel`]: filesystem work for many partitions on a few threads at once.
//! * [`epoch`]: the leader epoch cache (`leader-epoch-checkpoint`).
//! * [`producer_state`]: producers' sequence state, open transactions and their snapshots.
//! * [`txn_index`]: a segment's `.txnindex`, the aborted transactions read_committed fetches skip.
//! * [`checkpoint`]: Kafka's offset checkpoint files.
//! * [`error`]: the typed errors.
//!
//! See `storage/DESIGN.md` for file formats, the recovery algorithm and the threading rules.

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod compression;
pub mod config;
pub mod deleter;
pub mod epoch;
pub mod error;
pub mod flusher;
pub mod handles;
pub mod index;
pub mod log;
pub mod manager;
mod mmap;
pub mod parallel;
pub mod partition_metadata;
pub mod producer_state;
pub mod segment;
pub mod txn_index;

pub use config::{LogConfig, TimestampType, TopicPartition};
pub use error::{Result, StorageError};
pub use flusher::Flusher;
pub use handles::{HandleLimits, HandlePool, HandleStats};
pub use log::{
    ActiveProducer, EpochEndOffset, FetchDataInfo, Log, LogAppendInfo, LogPosition,
    TimestampAndOffset, TxnVerification, VerificationGuard,
};
pub use manager::LogManager;
