//! The crate's error type. Every variant names its cause; the broker maps each one to exactly
//! one Kafka error code (see the doc comment of each variant).
//!
//! I/O errors are special: the first one takes the log offline (see `Log`), and every later
//! call on that log returns [`StorageError::Offline`] instead of touching the files again.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, StorageError>;

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Bad CRC, bad length or unsupported magic: Kafka's CORRUPT_MESSAGE (2).
    #[error("corrupt record batch: {0}")]
    CorruptRecord(String),
    /// A structurally sound batch whose contents break a rule (record count vs last offset
    /// delta, ...): Kafka's INVALID_RECORD (87).
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    /// Records `LogValidator` refuses (Kafka's `RecordValidationException`): INVALID_TIMESTAMP
    /// (32) if any timestamp is refused, else INVALID_RECORD (87), with `message` as the
    /// response's error message and one (index of the record in its batch, message) per refused
    /// record as its `record_errors`.
    #[error("{message}")]
    RecordErrors {
        message: String,
        record_errors: Vec<(i32, String)>,
        invalid_timestamp: bool,
    },
    /// A compressed batch whose records do not decompress, found where the records must be read
    /// (a compacted topic's append): Kafka's "Failed to decompress record stream", which it
    /// answers UNKNOWN_SERVER_ERROR (-1).
    #[error("Failed to decompress record stream: {0}")]
    Undecompressable(String),
    /// A batch larger than `max.message.bytes`: Kafka's MESSAGE_TOO_LARGE (10).
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    RecordTooLarge { size: usize, max: usize },
    /// Kafka's OFFSET_OUT_OF_RANGE (1).
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    #[error("out of order sequence: {0}")]
    OutOfOrderSequence(String),
    /// Kafka's INVALID_PRODUCER_EPOCH (47).
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// Kafka's INVALID_TXN_STATE (48): a producer with an open transaction wrote a
    /// non-transactional batch.
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// Kafka's TRANSACTION_COORDINATOR_FENCED (52): a marker from an older coordinator.
    #[error("transaction coordinator fenced: {0}")]
    TransactionCoordinatorFenced(String),
    /// A follower append that would leave a gap or overlap existing offsets.
    #[error("non-monotonic append: {0}")]
    NonMonotonicAppend(String),
    /// An I/O error; it takes the log offline (Kafka's KAFKA_STORAGE_ERROR (56)).
    #[error("I/O error on {path:?}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The log went offline after an earlier I/O error: KAFKA_STORAGE_ERROR (56).
    #[error("log is offline after a previous I/O error: {0}")]
    Offline(String),
}

impl StorageError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> StorageError {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }

    /// True for the variants that mean the disk, not the caller, is at fault.
    pub fn is_storage_error(&self) -> bool {
        matches!(self, StorageError::Io { .. } | StorageError::Offline(_))
    }
}

/// Attaches a path to an `std::io::Result`.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| StorageError::io(path, e))
    }
}

fn invalid_data(path: PathBuf, message: String) -> StorageError {
    StorageError::Io {
        path,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, message),
    }
}

impl From<crate::checkpoint::CheckpointError> for StorageError {
    /// A checkpoint that cannot be read or written is an environment failure: the log (or log
    /// dir) goes offline, as Kafka does with a KafkaStorageException.
    fn from(e: crate::checkpoint::CheckpointError) -> StorageError {
        use crate::checkpoint::CheckpointError as C;
        match e {
            C::Io { path, source } => StorageError::Io { path, source },
            C::Malformed { ref path, .. }
            | C::UnsupportedVersion { ref path, .. }
            | C::CountMismatch { ref path, .. } => invalid_data(path.clone(), e.to_string()),
        }
    }
}

impl From<crate::epoch::EpochError> for StorageError {
    fn from(e: crate::epoch::EpochError) -> StorageError {
        match e {
            crate::epoch::EpochError::Checkpoint(c) => c.into(),
            crate::epoch::EpochError::InvalidEntry { .. } => {
                StorageError::InvalidRecord(e.to_string())
            }
        }
    }
}

impl From<crate::producer_state::ProducerStateError> for StorageError {
    fn from(e: crate::producer_state::ProducerStateError) -> StorageError {
        use crate::producer_state::ProducerStateError as P;
        match e {
            P::OutOfOrderSequence(m) => StorageError::OutOfOrderSequence(m),
            P::InvalidProducerEpoch(m) => StorageError::InvalidProducerEpoch(m),
            P::InvalidTxnState(m) => StorageError::InvalidTxnState(m),
            P::TransactionCoordinatorFenced(m) => StorageError::TransactionCoordinatorFenced(m),
            P::Io { path, source } => StorageError::Io { path, source },
            P::CorruptSnapshot { ref path, .. } => invalid_data(path.clone(), e.to_string()),
        }
    }
}
