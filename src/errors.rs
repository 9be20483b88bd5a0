//! Kafka error codes: the one place where broker outcomes become wire error codes.
//!
//! Every layer below the handlers reports failures as [`ApiError`] (or a storage error converted
//! here); handlers call [`ApiError::code`] and never write a numeric code themselves. Connection
//! level failures (bad frames) are not API errors: they close the connection (see `server`).

use kafka_protocol::ResponseError;
use kafkaiq_storage::StorageError;

/// An outcome a client is told about through an error code (DESIGN.md's "API errors" tier).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("offset out of range")]
    OffsetOutOfRange,
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("message too large: {0}")]
    MessageTooLarge(String),
    #[error("not leader or follower")]
    NotLeaderOrFollower,
    #[error("request timed out")]
    RequestTimedOut,
    #[error("invalid topic: {0}")]
    InvalidTopic(String),
    #[error("not enough replicas")]
    NotEnoughReplicas,
    #[error("not enough replicas after append")]
    NotEnoughReplicasAfterAppend,
    #[error("invalid required acks")]
    InvalidRequiredAcks,
    #[error("topic already exists: {0}")]
    TopicAlreadyExists(String),
    #[error("invalid partitions: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unsupported version")]
    UnsupportedVersion,
    #[error("unsupported endpoint type: {0}")]
    UnsupportedEndpointType(String),
    #[error("out of order sequence number: {0}")]
    OutOfOrderSequenceNumber(String),
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    #[error("transaction coordinator fenced: {0}")]
    TransactionCoordinatorFenced(String),
    #[error("kafka storage error: {0}")]
    KafkaStorageError(String),
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    #[error("unknown leader epoch")]
    UnknownLeaderEpoch,
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// INVALID_RECORD, or INVALID_TIMESTAMP when a timestamp is among the reasons, naming the
    /// refused records: (index in the batch, why) for a Produce response's `record_errors`, and
    /// `message` for its `error_message` (Kafka's `RecordValidationException`).
    #[error("invalid record: {message}")]
    RecordErrors {
        message: String,
        record_errors: Vec<(i32, String)>,
        invalid_timestamp: bool,
    },
    #[error("unknown topic id")]
    UnknownTopicId,
    /// INVALID_TIMESTAMP: a record's timestamp out of the topic's range, or a producer that set
    /// LogAppendTime (Kafka's `LogValidator#validateTimestamp`).
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    #[error("the topic id in the request does not match the topic's")]
    InconsistentTopicId,
    #[error("fetch session id not found")]
    FetchSessionIdNotFound,
    #[error("invalid fetch session epoch")]
    InvalidFetchSessionEpoch,
    #[error("topic deletion disabled")]
    TopicDeletionDisabled,
    #[error("policy violation: {0}")]
    PolicyViolation(String),
    #[error("offset not available")]
    OffsetNotAvailable,
    #[error("unknown server error: {0}")]
    UnknownServerError(String),
    #[error("not controller")]
    NotController,
    #[error("cluster authorization failed")]
    ClusterAuthorizationFailed,
    #[error("topic authorization failed")]
    TopicAuthorizationFailed,
    #[error("group authorization failed")]
    GroupAuthorizationFailed,
    #[error("transactional id authorization failed")]
    TransactionalIdAuthorizationFailed,
    #[error("invalid transaction timeout")]
    InvalidTransactionTimeout,
    #[error("concurrent transactions")]
    ConcurrentTransactions,
    #[error("producer fenced")]
    ProducerFenced,
    #[error("invalid producer id mapping")]
    InvalidProducerIdMapping,
    #[error("not coordinator")]
    NotCoordinator,
    #[error("coordinator load in progress")]
    CoordinatorLoadInProgress,
    #[error("coordinator not available")]
    CoordinatorNotAvailable,
    #[error("transactional id not found")]
    TransactionalIdNotFound,
    #[error("transaction abortable")]
    TransactionAbortable,
    #[error("unsupported for message format")]
    UnsupportedForMessageFormat,
    #[error("unknown producer id")]
    UnknownProducerId,
    #[error("Leader election not needed for topic partition.")]
    ElectionNotNeeded,
    #[error("The preferred leader was not available.")]
    PreferredLeaderNotAvailable,
    #[error("Eligible topic partition leaders are not available.")]
    EligibleLeadersNotAvailable,
    #[error("leader not available")]
    LeaderNotAvailable,
    #[error("replica not available")]
    ReplicaNotAvailable,
    #[error("log dir not found: {0}")]
    LogDirNotFound(String),
    #[error("listener not found")]
    ListenerNotFound,
    #[error("operation not attempted")]
    OperationNotAttempted,
    #[error("stale broker epoch")]
    StaleBrokerEpoch,
    #[error("invalid update version")]
    InvalidUpdateVersion,
    #[error("broker id not registered")]
    BrokerIdNotRegistered,
    #[error("this broker id is already in use by a live incarnation")]
    DuplicateBrokerRegistration,
    #[error("inconsistent cluster id: {0}")]
    InconsistentClusterId(String),
    #[error("ineligible replica")]
    IneligibleReplica,
    #[error("new leader elected")]
    NewLeaderElected,
    #[error("No partition reassignment is in progress.")]
    NoReassignmentInProgress,
    #[error("The broker does not support the requested SASL mechanism.")]
    UnsupportedSaslMechanism,
    #[error("A request illegally referred to a resource that does not exist.")]
    ResourceNotFound,
    #[error("A request illegally referred to the same resource twice.")]
    DuplicateResource,
    #[error("Requested credential would not meet criteria for acceptability.")]
    UnacceptableCredential,
    /// `error` with the message Kafka sends for it in this case (its code is `error`'s), for
    /// errors whose message depends on where they arise ("No such topic as t").
    #[error("{message}")]
    Described {
        error: Box<ApiError>,
        message: String,
    },
}

impl ApiError {
    fn response_error(&self) -> ResponseError {
        use ApiError::*;
        match self {
            OffsetOutOfRange => ResponseError::OffsetOutOfRange,
            CorruptMessage(_) => ResponseError::CorruptMessage,
            UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
            MessageTooLarge(_) => ResponseError::MessageTooLarge,
            NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
            RequestTimedOut => ResponseError::RequestTimedOut,
            InvalidTopic(_) => ResponseError::InvalidTopicException,
            NotEnoughReplicas => ResponseError::NotEnoughReplicas,
            NotEnoughReplicasAfterAppend => ResponseError::NotEnoughReplicasAfterAppend,
            InvalidRequiredAcks => ResponseError::InvalidRequiredAcks,
            TopicAlreadyExists(_) => ResponseError::TopicAlreadyExists,
            InvalidPartitions(_) => ResponseError::InvalidPartitions,
            InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            InvalidConfig(_) => ResponseError::InvalidConfig,
            InvalidRequest(_) => ResponseError::InvalidRequest,
            UnsupportedVersion => ResponseError::UnsupportedVersion,
            UnsupportedEndpointType(_) => ResponseError::UnsupportedEndpointType,
            OutOfOrderSequenceNumber(_) => ResponseError::OutOfOrderSequenceNumber,
            InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch,
            InvalidTxnState(_) => ResponseError::InvalidTxnState,
            TransactionCoordinatorFenced(_) => ResponseError::TransactionCoordinatorFenced,
            KafkaStorageError(_) => ResponseError::KafkaStorageError,
            FencedLeaderEpoch => ResponseError::FencedLeaderEpoch,
            UnknownLeaderEpoch => ResponseError::UnknownLeaderEpoch,
            RecordErrors {
                invalid_timestamp: true,
                ..
            } => ResponseError::InvalidTimestamp,
            InvalidRecord(_) | RecordErrors { .. } => ResponseError::InvalidRecord,
            UnknownTopicId => ResponseError::UnknownTopicId,
            InvalidTimestamp(_) => ResponseError::InvalidTimestamp,
            InconsistentTopicId => ResponseError::InconsistentTopicId,
            FetchSessionIdNotFound => ResponseError::FetchSessionIdNotFound,
            InvalidFetchSessionEpoch => ResponseError::InvalidFetchSessionEpoch,
            TopicDeletionDisabled => ResponseError::TopicDeletionDisabled,
            PolicyViolation(_) => ResponseError::PolicyViolation,
            OffsetNotAvailable => ResponseError::OffsetNotAvailable,
            UnknownServerError(_) => ResponseError::UnknownServerError,
            NotController => ResponseError::NotController,
            ClusterAuthorizationFailed => ResponseError::ClusterAuthorizationFailed,
            TopicAuthorizationFailed => ResponseError::TopicAuthorizationFailed,
            GroupAuthorizationFailed => ResponseError::GroupAuthorizationFailed,
            TransactionalIdAuthorizationFailed => ResponseError::TransactionalIdAuthorizationFailed,
            InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
            ConcurrentTransactions => ResponseError::ConcurrentTransactions,
            ProducerFenced => ResponseError::ProducerFenced,
            InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
            NotCoordinator => ResponseError::NotCoordinator,
            CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
            CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
            TransactionalIdNotFound => ResponseError::TransactionalIdNotFound,
            TransactionAbortable => ResponseError::TransactionAbortable,
            UnsupportedForMessageFormat => ResponseError::UnsupportedForMessageFormat,
            UnknownProducerId => ResponseError::UnknownProducerId,
            ElectionNotNeeded => ResponseError::ElectionNotNeeded,
            PreferredLeaderNotAvailable => ResponseError::PreferredLeaderNotAvailable,
            EligibleLeadersNotAvailable => ResponseError::EligibleLeadersNotAvailable,
            LeaderNotAvailable => ResponseError::LeaderNotAvailable,
            ReplicaNotAvailable => ResponseError::ReplicaNotAvailable,
            LogDirNotFound(_) => ResponseError::LogDirNotFound,
            ListenerNotFound => ResponseError::ListenerNotFound,
            OperationNotAttempted => ResponseError::OperationNotAttempted,
            StaleBrokerEpoch => ResponseError::StaleBrokerEpoch,
            InvalidUpdateVersion => ResponseError::InvalidUpdateVersion,
            BrokerIdNotRegistered => ResponseError::BrokerIdNotRegistered,
            DuplicateBrokerRegistration => ResponseError::DuplicateBrokerRegistration,
            InconsistentClusterId(_) => ResponseError::InconsistentClusterId,
            IneligibleReplica => ResponseError::IneligibleReplica,
            NewLeaderElected => ResponseError::NewLeaderElected,
            NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
            UnsupportedSaslMechanism => ResponseError::UnsupportedSaslMechanism,
            ResourceNotFound => ResponseError::ResourceNotFound,
            DuplicateResource => ResponseError::DuplicateResource,
            UnacceptableCredential => ResponseError::UnacceptableCredential,
            Described { error, .. } => error.response_error(),
        }
    }

    /// This error with the message `message` (see [`ApiError::Described`]).
    pub fn with_message(self, message: impl Into<String>) -> ApiError {
        ApiError::Described {
            error: Box::new(self.kind().clone()),
            message: message.into(),
        }
    }

    /// The error without a message given by [`ApiError::with_message`].
    pub fn kind(&self) -> &ApiError {
        match self {
            ApiError::Described { error, .. } => error,
            other => other,
        }
    }

    /// The wire error code.
    pub fn code(&self) -> i16 {
        self.response_error().code()
    }

    /// The human-readable message some responses carry next to the code (CreateTopics,
    /// DescribeConfigs, ...): Kafka sends the exception message.
    pub fn message(&self) -> String {
        use ApiError::*;
        match self {
            CorruptMessage(m)
            | MessageTooLarge(m)
            | InvalidTopic(m)
            | TopicAlreadyExists(m)
            | InvalidPartitions(m)
            | InvalidReplicationFactor(m)
            | InvalidReplicaAssignment(m)
            | InvalidConfig(m)
            | InvalidRequest(m)
            | OutOfOrderSequenceNumber(m)
            | InvalidProducerEpoch(m)
            | InvalidTxnState(m)
            | TransactionCoordinatorFenced(m)
            | KafkaStorageError(m)
            | LogDirNotFound(m)
            | InvalidRecord(m)
            | InvalidTimestamp(m)
            | PolicyViolation(m)
            | InconsistentClusterId(m)
            | UnknownServerError(m)
            | RecordErrors { message: m, .. } => m.clone(),
            Described { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

impl ApiError {
    /// The outcome a wire error code from another node means, for the inter-broker client's
    /// callers (the replica fetcher, AlterPartition): `None` for 0, and a code this broker has
    /// no variant for comes back as UNKNOWN_SERVER_ERROR naming it (callers retry those).
    pub fn from_code(code: i16) -> Option<ApiError> {
        use ApiError::*;
        if code == NONE {
            return None;
        }
        let known = [
            OffsetOutOfRange,
            UnknownTopicOrPartition,
            NotLeaderOrFollower,
            RequestTimedOut,
            NotEnoughReplicas,
            NotEnoughReplicasAfterAppend,
            UnsupportedVersion,
            KafkaStorageError(String::new()),
            FencedLeaderEpoch,
            UnknownLeaderEpoch,
            UnknownTopicId,
            OffsetNotAvailable,
            NotController,
            ClusterAuthorizationFailed,
            LeaderNotAvailable,
            ReplicaNotAvailable,
            OperationNotAttempted,
            StaleBrokerEpoch,
            InvalidUpdateVersion,
            BrokerIdNotRegistered,
            IneligibleReplica,
            NewLeaderElected,
            InvalidRequest(String::new()),
            CorruptMessage(String::new()),
            InvalidRecord(String::new()),
            // AddPartitionsToTxn's answers to a partition leader's verification (KIP-890).
            ConcurrentTransactions,
            ProducerFenced,
            NotCoordinator,
            CoordinatorLoadInProgress,
            CoordinatorNotAvailable,
            TransactionAbortable,
            InvalidProducerIdMapping,
            InvalidProducerEpoch(String::new()),
            InvalidTxnState(String::new()),
        ];
        Some(
            known
                .into_iter()
                .find(|e| e.code() == code)
                .unwrap_or_else(|| UnknownServerError(format!("error code {code}"))),
        )
    }
}

/// The code of a result: 0 on success.
pub fn code_of<T>(result: &Result<T, ApiError>) -> i16 {
    match result {
        Ok(_) => NONE,
        Err(e) => e.code(),
    }
}

/// "No error".
pub const NONE: i16 = 0;

impl From<StorageError> for ApiError {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::CorruptRecord(m) => ApiError::CorruptMessage(m),
            StorageError::InvalidRecord(m) => ApiError::InvalidRecord(m),
            StorageError::RecordErrors {
                message,
                record_errors,
                invalid_timestamp,
            } => ApiError::RecordErrors {
                message,
                record_errors,
                invalid_timestamp,
            },
            e @ StorageError::Undecompressable(_) => ApiError::UnknownServerError(e.to_string()),
            StorageError::RecordTooLarge { size, max } => {
                ApiError::MessageTooLarge(format!("batch of {size} bytes exceeds {max}"))
            }
            StorageError::OffsetOutOfRange { .. } => ApiError::OffsetOutOfRange,
            StorageError::OutOfOrderSequence(m) => ApiError::OutOfOrderSequenceNumber(m),
            StorageError::InvalidProducerEpoch(m) => ApiError::InvalidProducerEpoch(m),
            StorageError::InvalidTxnState(m) => ApiError::InvalidTxnState(m),
            StorageError::TransactionCoordinatorFenced(m) => {
                ApiError::TransactionCoordinatorFenced(m)
            }
            // A leader never appends as a follower; a non-monotonic append here is a bug in
            // the caller, reported as a server error rather than a client mistake.
            StorageError::NonMonotonicAppend(m) => ApiError::UnknownServerError(m),
            other => ApiError::KafkaStorageError(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka() {
        let cases = [
            (ApiError::OffsetOutOfRange, 1),
            (ApiError::CorruptMessage(String::new()), 2),
            (ApiError::UnknownTopicOrPartition, 3),
            (ApiError::MessageTooLarge(String::new()), 10),
            (ApiError::NotLeaderOrFollower, 6),
            (ApiError::InvalidTopic(String::new()), 17),
            (ApiError::InvalidRequiredAcks, 21),
            (ApiError::TopicAlreadyExists(String::new()), 36),
            (ApiError::InvalidPartitions(String::new()), 37),
            (ApiError::InvalidReplicationFactor(String::new()), 38),
            (ApiError::InvalidConfig(String::new()), 40),
            (ApiError::UnsupportedVersion, 35),
            (ApiError::TopicAuthorizationFailed, 29),
            (ApiError::GroupAuthorizationFailed, 30),
            (ApiError::ClusterAuthorizationFailed, 31),
            (ApiError::UnsupportedSaslMechanism, 33),
            (ApiError::ResourceNotFound, 91),
            (ApiError::DuplicateResource, 92),
            (ApiError::UnacceptableCredential, 93),
            (ApiError::UnsupportedEndpointType(String::new()), 115),
            (ApiError::OutOfOrderSequenceNumber(String::new()), 45),
            (ApiError::InvalidProducerEpoch(String::new()), 47),
            (ApiError::InvalidTxnState(String::new()), 48),
            (ApiError::TransactionCoordinatorFenced(String::new()), 52),
            (ApiError::KafkaStorageError(String::new()), 56),
            (ApiError::FencedLeaderEpoch, 74),
            (ApiError::UnknownLeaderEpoch, 75),
            (ApiError::InvalidRecord(String::new()), 87),
            (
                ApiError::RecordErrors {
                    message: String::new(),
                    record_errors: Vec::new(),
                    invalid_timestamp: false,
                },
                87,
            ),
            (
                ApiError::RecordErrors {
                    message: String::new(),
                    record_errors: Vec::new(),
                    invalid_timestamp: true,
                },
                32,
            ),
            (ApiError::UnknownServerError(String::new()), -1),
            (ApiError::UnknownTopicId, 100),
            (ApiError::InvalidTimestamp(String::new()), 32),
            (ApiError::InconsistentTopicId, 103),
            (ApiError::PreferredLeaderNotAvailable, 80),
            (ApiError::EligibleLeadersNotAvailable, 83),
            (ApiError::ElectionNotNeeded, 84),
            (ApiError::LeaderNotAvailable, 5),
            (ApiError::ReplicaNotAvailable, 9),
            (ApiError::LogDirNotFound(String::new()), 57),
            (ApiError::ListenerNotFound, 72),
            (ApiError::OperationNotAttempted, 55),
            (ApiError::StaleBrokerEpoch, 77),
            (ApiError::InvalidUpdateVersion, 95),
            (ApiError::BrokerIdNotRegistered, 102),
            (ApiError::DuplicateBrokerRegistration, 101),
            (ApiError::InconsistentClusterId(String::new()), 104),
            (ApiError::IneligibleReplica, 107),
            (ApiError::NewLeaderElected, 108),
            (ApiError::NoReassignmentInProgress, 85),
            (
                ApiError::UnknownTopicOrPartition.with_message("No such topic as t"),
                3,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code, "{error:?}");
        }
    }

    #[test]
    fn codes_from_other_nodes_map_back() {
        assert_eq!(ApiError::from_code(0), None);
        for e in [
            ApiError::NotController,
            ApiError::InvalidUpdateVersion,
            ApiError::FencedLeaderEpoch,
            ApiError::OffsetOutOfRange,
        ] {
            assert_eq!(ApiError::from_code(e.code()), Some(e));
        }
        assert_eq!(
            ApiError::from_code(9999),
            Some(ApiError::UnknownServerError("error code 9999".into()))
        );
    }
}
