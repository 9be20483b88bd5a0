//! Wire layouts of every request body this broker decodes, in a small DSL that [`super::guard`]
//! walks.
//!
//! One `const` per message struct, named after `kafka-protocol`'s struct, transcribed from the
//! request message definitions of Kafka 4.1.0 (the schemas `kafka-protocol` 0.18 is generated
//! from) in the field order the crate reads them. Each [`Field`] says in which versions it is
//! present and its wire type; the walker picks the classic or the compact (flexible) encoding
//! from the API's first flexible version, as the protocol does. Nullability is not recorded: a
//! null (length -1, or 0 in compact form) never allocates, so the walker accepts it everywhere
//! and leaves "null not allowed here" to `kafka-protocol`.
//!
//! Upgrading `kafka-protocol` means revisiting this file: the round-trip test fails for any API
//! version whose layout changed, and the version-range test for any new version.
//!
//! Tagged fields sit in the tag section at the end of a struct in flexible versions; they are
//! listed with their tag number and the first version that knows them.
//!
//! `tests/hostile_frames.rs` checks every layout at every version against `kafka-protocol`'s own
//! decoder and encoder.

use super::ApiKey;

/// An inclusive version range.
#[derive(Debug, Clone, Copy)]
pub struct Versions {
    pub min: i16,
    pub max: i16,
}

impl Versions {
    pub fn contains(self, version: i16) -> bool {
        self.min <= version && version <= self.max
    }
}

/// A wire type.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    /// A fixed number of bytes: int8/16/32/64, bool, uuid, float64.
    Fixed(usize),
    /// STRING (int16 length) or COMPACT_STRING (unsigned varint length + 1), nullable or not.
    String,
    /// BYTES or RECORDS (int32 length) or their compact forms, nullable or not.
    Bytes,
    /// ARRAY (int32 count) or COMPACT_ARRAY (unsigned varint count + 1) of the element type.
    Array(&'static Ty),
    /// A nested struct; in flexible versions it ends with its own tag section.
    Struct(&'static [Field]),
    /// A nullable struct: an int8 presence marker (1 = present, anything else = null), then the
    /// struct if present.
    OptionalStruct(&'static [Field]),
}

/// One field of a struct.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub versions: Versions,
    pub ty: Ty,
    /// `Some(tag)` for a tagged field, carried in the struct's tag section.
    pub tag: Option<u32>,
}

/// The layout of one API's request body.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub api_key: ApiKey,
    /// The request versions `kafka-protocol` decodes.
    pub versions: Versions,
    /// First flexible version; [`NEVER`] if the API has none.
    pub flexible_min: i16,
    pub body: Ty,
}

impl Layout {
    pub fn is_flexible(&self, version: i16) -> bool {
        version >= self.flexible_min
    }
}

pub const MAX: i16 = i16::MAX;
/// `flexible_min` of an API that has no flexible version.
pub const NEVER: i16 = i16::MAX;

pub const I8: Ty = Ty::Fixed(1);
pub const BOOL: Ty = Ty::Fixed(1);
pub const I16: Ty = Ty::Fixed(2);
pub const I32: Ty = Ty::Fixed(4);
pub const I64: Ty = Ty::Fixed(8);
pub const UUID: Ty = Ty::Fixed(16);
pub const STRING: Ty = Ty::String;
pub const BYTES: Ty = Ty::Bytes;

pub const fn array(element: &'static Ty) -> Ty {
    Ty::Array(element)
}

const fn field(min: i16, max: i16, ty: Ty) -> Field {
    Field {
        versions: Versions { min, max },
        ty,
        tag: None,
    }
}

/// Present in every version.
const fn all(ty: Ty) -> Field {
    field(0, MAX, ty)
}

/// Present from version `min` on.
const fn since(min: i16, ty: Ty) -> Field {
    field(min, MAX, ty)
}

/// Present up to and including version `max`.
const fn until(max: i16, ty: Ty) -> Field {
    field(0, max, ty)
}

/// Present in versions `min..=max`.
const fn between(min: i16, max: i16, ty: Ty) -> Field {
    field(min, max, ty)
}

/// A tagged field known in every flexible version.
const fn tagged(tag: u32, ty: Ty) -> Field {
    tagged_since(tag, 0, ty)
}

/// A tagged field known from version `min` on.
const fn tagged_since(tag: u32, min: i16, ty: Ty) -> Field {
    Field {
        versions: Versions { min, max: MAX },
        ty,
        tag: Some(tag),
    }
}

const fn layout(api_key: ApiKey, min: i16, max: i16, flexible_min: i16, body: Ty) -> Layout {
    Layout {
        api_key,
        versions: Versions { min, max },
        flexible_min,
        body,
    }
}

/// Every API [`super::decode_request`] accepts, with the request versions `kafka-protocol`
/// decodes.
#[rustfmt::skip]
pub const LAYOUTS: &[Layout] = &[
    //     api key                               min max  flex  body
    layout(ApiKey::Produce,                       3, 13,     9, PRODUCE_REQUEST),
    layout(ApiKey::Fetch,                         4, 18,    12, FETCH_REQUEST),
    layout(ApiKey::ListOffsets,                   1, 10,     6, LIST_OFFSETS_REQUEST),
    layout(ApiKey::Metadata,                      0, 13,     9, METADATA_REQUEST),
    layout(ApiKey::OffsetCommit,                  2,  9,     8, OFFSET_COMMIT_REQUEST),
    layout(ApiKey::OffsetFetch,                   1,  9,     6, OFFSET_FETCH_REQUEST),
    layout(ApiKey::FindCoordinator,               0,  6,     3, FIND_COORDINATOR_REQUEST),
    layout(ApiKey::JoinGroup,                     0,  9,     6, JOIN_GROUP_REQUEST),
    layout(ApiKey::Heartbeat,                     0,  4,     4, HEARTBEAT_REQUEST),
    layout(ApiKey::LeaveGroup,                    0,  5,     4, LEAVE_GROUP_REQUEST),
    layout(ApiKey::SyncGroup,                     0,  5,     4, SYNC_GROUP_REQUEST),
    layout(ApiKey::DescribeGroups,                0,  6,     5, DESCRIBE_GROUPS_REQUEST),
    layout(ApiKey::ListGroups,                    0,  5,     3, LIST_GROUPS_REQUEST),
    layout(ApiKey::SaslHandshake,                 0,  1, NEVER, SASL_HANDSHAKE_REQUEST),
    layout(ApiKey::ApiVersions,                   0,  4,     3, API_VERSIONS_REQUEST),
    layout(ApiKey::CreateTopics,                  2,  7,     5, CREATE_TOPICS_REQUEST),
    layout(ApiKey::DeleteTopics,                  1,  6,     4, DELETE_TOPICS_REQUEST),
    layout(ApiKey::DeleteRecords,                 0,  2,     2, DELETE_RECORDS_REQUEST),
    layout(ApiKey::InitProducerId,                0,  5,     2, INIT_PRODUCER_ID_REQUEST),
    layout(ApiKey::OffsetForLeaderEpoch,          2,  4,     4, OFFSET_FOR_LEADER_EPOCH_REQUEST),
    layout(ApiKey::AddPartitionsToTxn,            0,  5,     3, ADD_PARTITIONS_TO_TXN_REQUEST),
    layout(ApiKey::AddOffsetsToTxn,               0,  4,     3, ADD_OFFSETS_TO_TXN_REQUEST),
    layout(ApiKey::EndTxn,                        0,  5,     3, END_TXN_REQUEST),
    layout(ApiKey::WriteTxnMarkers,               1,  1,     1, WRITE_TXN_MARKERS_REQUEST),
    layout(ApiKey::TxnOffsetCommit,               0,  5,     3, TXN_OFFSET_COMMIT_REQUEST),
    layout(ApiKey::DescribeAcls,                  1,  3,     2, DESCRIBE_ACLS_REQUEST),
    layout(ApiKey::CreateAcls,                    1,  3,     2, CREATE_ACLS_REQUEST),
    layout(ApiKey::DeleteAcls,                    1,  3,     2, DELETE_ACLS_REQUEST),
    layout(ApiKey::DescribeConfigs,               1,  4,     4, DESCRIBE_CONFIGS_REQUEST),
    layout(ApiKey::AlterConfigs,                  0,  2,     2, ALTER_CONFIGS_REQUEST),
    layout(ApiKey::IncrementalAlterConfigs,       0,  1,     1, INCREMENTAL_ALTER_CONFIGS_REQUEST),
    layout(ApiKey::CreatePartitions,              0,  3,     2, CREATE_PARTITIONS_REQUEST),
    layout(ApiKey::DeleteGroups,                  0,  2,     2, DELETE_GROUPS_REQUEST),
    layout(ApiKey::ElectLeaders,                  0,  2,     2, ELECT_LEADERS_REQUEST),
    layout(ApiKey::AlterPartitionReassignments,   0,  1,     0, ALTER_PARTITION_REASSIGNMENTS_REQUEST),
    layout(ApiKey::ListPartitionReassignments,    0,  0,     0, LIST_PARTITION_REASSIGNMENTS_REQUEST),
    layout(ApiKey::OffsetDelete,                  0,  0, NEVER, OFFSET_DELETE_REQUEST),
    layout(ApiKey::DescribeCluster,               0,  2,     0, DESCRIBE_CLUSTER_REQUEST),
    layout(ApiKey::DescribeProducers,             0,  0,     0, DESCRIBE_PRODUCERS_REQUEST),
    layout(ApiKey::DescribeTransactions,          0,  0,     0, DESCRIBE_TRANSACTIONS_REQUEST),
    layout(ApiKey::ListTransactions,              0,  2,     0, LIST_TRANSACTIONS_REQUEST),
    layout(ApiKey::AlterPartition,                2,  3,     0, ALTER_PARTITION_REQUEST),
    layout(ApiKey::AlterReplicaLogDirs,           1,  2,     2, ALTER_REPLICA_LOG_DIRS_REQUEST),
    layout(ApiKey::DescribeLogDirs,               1,  4,     2, DESCRIBE_LOG_DIRS_REQUEST),
    layout(ApiKey::DescribeTopicPartitions,       0,  0,     0, DESCRIBE_TOPIC_PARTITIONS_REQUEST),
    layout(ApiKey::ListConfigResources,           0,  1,     0, LIST_CONFIG_RESOURCES_REQUEST),
    layout(ApiKey::BrokerRegistration,            0,  4,     0, BROKER_REGISTRATION_REQUEST),
    layout(ApiKey::BrokerHeartbeat,               0,  1,     0, BROKER_HEARTBEAT_REQUEST),
    layout(ApiKey::AllocateProducerIds,           0,  0,     0, ALLOCATE_PRODUCER_IDS_REQUEST),
    layout(ApiKey::DescribeQuorum,                0,  2,     0, DESCRIBE_QUORUM_REQUEST),
    layout(ApiKey::SaslAuthenticate,              0,  2,     2, SASL_AUTHENTICATE_REQUEST),
    layout(ApiKey::ConsumerGroupHeartbeat,        0,  1,     0, CONSUMER_GROUP_HEARTBEAT_REQUEST),
    layout(ApiKey::ConsumerGroupDescribe,         0,  1,     0, CONSUMER_GROUP_DESCRIBE_REQUEST),
    layout(ApiKey::DescribeUserScramCredentials,  0,  0,     0, DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST),
    layout(ApiKey::DescribeClientQuotas,          0,  1,     1, DESCRIBE_CLIENT_QUOTAS_REQUEST),
    layout(ApiKey::AlterUserScramCredentials,     0,  0,     0, ALTER_USER_SCRAM_CREDENTIALS_REQUEST),
    layout(ApiKey::Envelope,                      0,  0,     0, ENVELOPE_REQUEST),
];

/// The layout of `api_key`'s requests, if this broker decodes that API.
pub fn layout_of(api_key: ApiKey) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|layout| layout.api_key == api_key)
}

// ---- Produce (key 0): v3-v13, flexible from v9 ----

/// `PartitionProduceData`
const PARTITION_PRODUCE_DATA: Ty = Ty::Struct(&[
    all(I32),   // index
    all(BYTES), // records
]);
/// `TopicProduceData`
const TOPIC_PRODUCE_DATA: Ty = Ty::Struct(&[
    until(12, STRING),                   // name
    since(13, UUID),                     // topic_id
    all(array(&PARTITION_PRODUCE_DATA)), // partition_data
]);
/// `ProduceRequest`
const PRODUCE_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                     // transactional_id
    all(I16),                        // acks
    all(I32),                        // timeout_ms
    all(array(&TOPIC_PRODUCE_DATA)), // topic_data
]);

// ---- Fetch (key 1): v4-v18, flexible from v12 ----

/// `FetchPartition`
const FETCH_PARTITION: Ty = Ty::Struct(&[
    all(I32),                  // partition
    since(9, I32),             // current_leader_epoch
    all(I64),                  // fetch_offset
    since(12, I32),            // last_fetched_epoch
    since(5, I64),             // log_start_offset
    all(I32),                  // partition_max_bytes
    tagged_since(0, 17, UUID), // replica_directory_id
    tagged_since(1, 18, I64),  // high_watermark
]);
/// `FetchTopic`
const FETCH_TOPIC: Ty = Ty::Struct(&[
    until(12, STRING),            // topic
    since(13, UUID),              // topic_id
    all(array(&FETCH_PARTITION)), // partitions
]);
/// `ForgottenTopic`
const FORGOTTEN_TOPIC: Ty = Ty::Struct(&[
    between(7, 12, STRING), // topic
    since(13, UUID),        // topic_id
    since(7, array(&I32)),  // partitions
]);
/// `ReplicaState`
const FETCH_REPLICA_STATE: Ty = Ty::Struct(&[
    since(15, I32), // replica_id
    since(15, I64), // replica_epoch
]);
/// `FetchRequest`
const FETCH_REQUEST: Ty = Ty::Struct(&[
    until(14, I32),                           // replica_id
    all(I32),                                 // max_wait_ms
    all(I32),                                 // min_bytes
    all(I32),                                 // max_bytes
    all(I8),                                  // isolation_level
    since(7, I32),                            // session_id
    since(7, I32),                            // session_epoch
    all(array(&FETCH_TOPIC)),                 // topics
    since(7, array(&FORGOTTEN_TOPIC)),        // forgotten_topics_data
    since(11, STRING),                        // rack_id
    tagged(0, STRING),                        // cluster_id
    tagged_since(1, 15, FETCH_REPLICA_STATE), // replica_state
]);

// ---- ListOffsets (key 2): v1-v10, flexible from v6 ----

/// `ListOffsetsPartition`
const LIST_OFFSETS_PARTITION: Ty = Ty::Struct(&[
    all(I32),      // partition_index
    since(4, I32), // current_leader_epoch
    all(I64),      // timestamp
]);
/// `ListOffsetsTopic`
const LIST_OFFSETS_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                         // name
    all(array(&LIST_OFFSETS_PARTITION)), // partitions
]);
/// `ListOffsetsRequest`
const LIST_OFFSETS_REQUEST: Ty = Ty::Struct(&[
    all(I32),                        // replica_id
    since(2, I8),                    // isolation_level
    all(array(&LIST_OFFSETS_TOPIC)), // topics
    since(10, I32),                  // timeout_ms
]);

// ---- Metadata (key 3): v0-v13, flexible from v9 ----

/// `MetadataRequestTopic`
const METADATA_REQUEST_TOPIC: Ty = Ty::Struct(&[
    since(10, UUID), // topic_id
    all(STRING),     // name
]);
/// `MetadataRequest`
const METADATA_REQUEST: Ty = Ty::Struct(&[
    all(array(&METADATA_REQUEST_TOPIC)), // topics
    since(4, BOOL),                      // allow_auto_topic_creation
    between(8, 10, BOOL),                // include_cluster_authorized_operations
    since(8, BOOL),                      // include_topic_authorized_operations
]);

// ---- OffsetCommit (key 8): v2-v9, flexible from v8 ----

/// `OffsetCommitRequestPartition`
const OFFSET_COMMIT_REQUEST_PARTITION: Ty = Ty::Struct(&[
    all(I32),      // partition_index
    all(I64),      // committed_offset
    since(6, I32), // committed_leader_epoch
    all(STRING),   // committed_metadata
]);
/// `OffsetCommitRequestTopic`
const OFFSET_COMMIT_REQUEST_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                                  // name
    all(array(&OFFSET_COMMIT_REQUEST_PARTITION)), // partitions
]);
/// `OffsetCommitRequest`
const OFFSET_COMMIT_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                              // group_id
    all(I32),                                 // generation_id_or_member_epoch
    all(STRING),                              // member_id
    since(7, STRING),                         // group_instance_id
    until(4, I64),                            // retention_time_ms
    all(array(&OFFSET_COMMIT_REQUEST_TOPIC)), // topics
]);

// ---- OffsetFetch (key 9): v1-v9, flexible from v6 ----

/// `OffsetFetchRequestTopic`
const OFFSET_FETCH_REQUEST_TOPIC: Ty = Ty::Struct(&[
    until(7, STRING),      // name
    until(7, array(&I32)), // partition_indexes
]);
/// `OffsetFetchRequestTopics`
const OFFSET_FETCH_REQUEST_TOPICS: Ty = Ty::Struct(&[
    since(8, STRING),      // name
    since(8, array(&I32)), // partition_indexes
]);
/// `OffsetFetchRequestGroup`
const OFFSET_FETCH_REQUEST_GROUP: Ty = Ty::Struct(&[
    since(8, STRING),                              // group_id
    since(9, STRING),                              // member_id
    since(9, I32),                                 // member_epoch
    since(8, array(&OFFSET_FETCH_REQUEST_TOPICS)), // topics
]);
/// `OffsetFetchRequest`
const OFFSET_FETCH_REQUEST: Ty = Ty::Struct(&[
    until(7, STRING),                             // group_id
    until(7, array(&OFFSET_FETCH_REQUEST_TOPIC)), // topics
    since(8, array(&OFFSET_FETCH_REQUEST_GROUP)), // groups
    since(7, BOOL),                               // require_stable
]);

// ---- FindCoordinator (key 10): v0-v6, flexible from v3 ----

/// `FindCoordinatorRequest`
const FIND_COORDINATOR_REQUEST: Ty = Ty::Struct(&[
    until(3, STRING),         // key
    since(1, I8),             // key_type
    since(4, array(&STRING)), // coordinator_keys
]);

// ---- JoinGroup (key 11): v0-v9, flexible from v6 ----

/// `JoinGroupRequestProtocol`
const JOIN_GROUP_REQUEST_PROTOCOL: Ty = Ty::Struct(&[
    all(STRING), // name
    all(BYTES),  // metadata
]);
/// `JoinGroupRequest`
const JOIN_GROUP_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                              // group_id
    all(I32),                                 // session_timeout_ms
    since(1, I32),                            // rebalance_timeout_ms
    all(STRING),                              // member_id
    since(5, STRING),                         // group_instance_id
    all(STRING),                              // protocol_type
    all(array(&JOIN_GROUP_REQUEST_PROTOCOL)), // protocols
    since(8, STRING),                         // reason
]);

// ---- Heartbeat (key 12): v0-v4, flexible from v4 ----

/// `HeartbeatRequest`
const HEARTBEAT_REQUEST: Ty = Ty::Struct(&[
    all(STRING),      // group_id
    all(I32),         // generation_id
    all(STRING),      // member_id
    since(3, STRING), // group_instance_id
]);

// ---- LeaveGroup (key 13): v0-v5, flexible from v4 ----

/// `MemberIdentity`
const LEAVE_GROUP_MEMBER: Ty = Ty::Struct(&[
    since(3, STRING), // member_id
    since(3, STRING), // group_instance_id
    since(5, STRING), // reason
]);
/// `LeaveGroupRequest`
const LEAVE_GROUP_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                          // group_id
    until(2, STRING),                     // member_id
    since(3, array(&LEAVE_GROUP_MEMBER)), // members
]);

// ---- SyncGroup (key 14): v0-v5, flexible from v4 ----

/// `SyncGroupRequestAssignment`
const SYNC_GROUP_REQUEST_ASSIGNMENT: Ty = Ty::Struct(&[
    all(STRING), // member_id
    all(BYTES),  // assignment
]);
/// `SyncGroupRequest`
const SYNC_GROUP_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                                // group_id
    all(I32),                                   // generation_id
    all(STRING),                                // member_id
    since(3, STRING),                           // group_instance_id
    since(5, STRING),                           // protocol_type
    since(5, STRING),                           // protocol_name
    all(array(&SYNC_GROUP_REQUEST_ASSIGNMENT)), // assignments
]);

// ---- DescribeGroups (key 15): v0-v6, flexible from v5 ----

/// `DescribeGroupsRequest`
const DESCRIBE_GROUPS_REQUEST: Ty = Ty::Struct(&[
    all(array(&STRING)), // groups
    since(3, BOOL),      // include_authorized_operations
]);

// ---- ListGroups (key 16): v0-v5, flexible from v3 ----

/// `ListGroupsRequest`
const LIST_GROUPS_REQUEST: Ty = Ty::Struct(&[
    since(4, array(&STRING)), // states_filter
    since(5, array(&STRING)), // types_filter
]);

// ---- ConsumerGroupHeartbeat (key 68): v0-v1, flexible from v0 ----

/// `TopicPartitions`
const CONSUMER_GROUP_HEARTBEAT_TOPIC: Ty = Ty::Struct(&[
    all(UUID),        // topic_id
    all(array(&I32)), // partitions
]);
/// `ConsumerGroupHeartbeatRequest`
const CONSUMER_GROUP_HEARTBEAT_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                                 // group_id
    all(STRING),                                 // member_id
    all(I32),                                    // member_epoch
    all(STRING),                                 // instance_id
    all(STRING),                                 // rack_id
    all(I32),                                    // rebalance_timeout_ms
    all(array(&STRING)),                         // subscribed_topic_names
    since(1, STRING),                            // subscribed_topic_regex
    all(STRING),                                 // server_assignor
    all(array(&CONSUMER_GROUP_HEARTBEAT_TOPIC)), // topic_partitions
]);

// ---- ConsumerGroupDescribe (key 69): v0-v1, flexible from v0 ----

/// `ConsumerGroupDescribeRequest`
const CONSUMER_GROUP_DESCRIBE_REQUEST: Ty = Ty::Struct(&[
    all(array(&STRING)), // group_ids
    all(BOOL),           // include_authorized_operations
]);

// ---- DescribeClientQuotas (key 48): v0-v1, flexible from v1 ----

/// `ComponentData`
const CLIENT_QUOTAS_COMPONENT: Ty = Ty::Struct(&[
    all(STRING), // entity_type
    all(I8),     // match_type
    all(STRING), // match
]);
/// `DescribeClientQuotasRequest`
const DESCRIBE_CLIENT_QUOTAS_REQUEST: Ty = Ty::Struct(&[
    all(array(&CLIENT_QUOTAS_COMPONENT)), // components
    all(BOOL),                            // strict
]);

// ---- DescribeUserScramCredentials (key 50): v0, flexible ----

/// `UserName`
const SCRAM_USER_NAME: Ty = Ty::Struct(&[
    all(STRING), // name
]);
/// `DescribeUserScramCredentialsRequest` (users is a nullable array)
const DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST: Ty = Ty::Struct(&[
    all(array(&SCRAM_USER_NAME)), // users
]);

// ---- AlterUserScramCredentials (key 51): v0, flexible ----

/// `ScramCredentialDeletion`
const SCRAM_CREDENTIAL_DELETION: Ty = Ty::Struct(&[
    all(STRING), // name
    all(I8),     // mechanism
]);
/// `ScramCredentialUpsertion`
const SCRAM_CREDENTIAL_UPSERTION: Ty = Ty::Struct(&[
    all(STRING), // name
    all(I8),     // mechanism
    all(I32),    // iterations
    all(BYTES),  // salt
    all(BYTES),  // salted_password
]);
/// `AlterUserScramCredentialsRequest`
const ALTER_USER_SCRAM_CREDENTIALS_REQUEST: Ty = Ty::Struct(&[
    all(array(&SCRAM_CREDENTIAL_DELETION)),  // deletions
    all(array(&SCRAM_CREDENTIAL_UPSERTION)), // upsertions
]);

// ---- Envelope (key 58): v0, flexible from v0 ----

/// `EnvelopeRequest`
const ENVELOPE_REQUEST: Ty = Ty::Struct(&[
    all(BYTES), // request_data
    all(BYTES), // request_principal (nullable)
    all(BYTES), // client_host_address
]);

// ---- SaslAuthenticate (key 36): v0-v2, flexible from v2 ----

/// `SaslAuthenticateRequest`
const SASL_AUTHENTICATE_REQUEST: Ty = Ty::Struct(&[
    all(BYTES), // auth_bytes
]);

// ---- SaslHandshake (key 17): v0-v1, never flexible ----

/// `SaslHandshakeRequest`
const SASL_HANDSHAKE_REQUEST: Ty = Ty::Struct(&[
    all(STRING), // mechanism
]);

// ---- ApiVersions (key 18): v0-v4, flexible from v3 ----

/// `ApiVersionsRequest`
const API_VERSIONS_REQUEST: Ty = Ty::Struct(&[
    since(3, STRING), // client_software_name
    since(3, STRING), // client_software_version
]);

// ---- CreateTopics (key 19): v2-v7, flexible from v5 ----

/// `CreatableReplicaAssignment`
const CREATABLE_REPLICA_ASSIGNMENT: Ty = Ty::Struct(&[
    all(I32),         // partition_index
    all(array(&I32)), // broker_ids
]);
/// `CreatableTopicConfig`
const CREATABLE_TOPIC_CONFIG: Ty = Ty::Struct(&[
    all(STRING), // name
    all(STRING), // value
]);
/// `CreatableTopic`
const CREATABLE_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                               // name
    all(I32),                                  // num_partitions
    all(I16),                                  // replication_factor
    all(array(&CREATABLE_REPLICA_ASSIGNMENT)), // assignments
    all(array(&CREATABLE_TOPIC_CONFIG)),       // configs
]);
/// `CreateTopicsRequest`
const CREATE_TOPICS_REQUEST: Ty = Ty::Struct(&[
    all(array(&CREATABLE_TOPIC)), // topics
    all(I32),                     // timeout_ms
    all(BOOL),                    // validate_only
]);

// ---- DeleteTopics (key 20): v1-v6, flexible from v4 ----

/// `DeleteTopicState`
const DELETE_TOPIC_STATE: Ty = Ty::Struct(&[
    since(6, STRING), // name
    since(6, UUID),   // topic_id
]);
/// `DeleteTopicsRequest`
const DELETE_TOPICS_REQUEST: Ty = Ty::Struct(&[
    since(6, array(&DELETE_TOPIC_STATE)), // topics
    until(5, array(&STRING)),             // topic_names
    all(I32),                             // timeout_ms
]);

// ---- DeleteRecords (key 21): v0-v2, flexible from v2 ----

/// `DeleteRecordsPartition`
const DELETE_RECORDS_PARTITION: Ty = Ty::Struct(&[
    all(I32), // partition_index
    all(I64), // offset
]);
/// `DeleteRecordsTopic`
const DELETE_RECORDS_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                           // name
    all(array(&DELETE_RECORDS_PARTITION)), // partitions
]);
/// `DeleteRecordsRequest`
const DELETE_RECORDS_REQUEST: Ty = Ty::Struct(&[
    all(array(&DELETE_RECORDS_TOPIC)), // topics
    all(I32),                          // timeout_ms
]);

// ---- InitProducerId (key 22): v0-v5, flexible from v2 ----

/// `InitProducerIdRequest`
const INIT_PRODUCER_ID_REQUEST: Ty = Ty::Struct(&[
    all(STRING),   // transactional_id
    all(I32),      // transaction_timeout_ms
    since(3, I64), // producer_id
    since(3, I16), // producer_epoch
]);

// ---- AddPartitionsToTxn (key 24): v0-v5, flexible from v3 ----

/// `AddPartitionsToTxnTopic`
const ADD_PARTITIONS_TO_TXN_TOPIC: Ty = Ty::Struct(&[
    all(STRING),      // name
    all(array(&I32)), // partitions
]);
/// `AddPartitionsToTxnTransaction` (v4+)
const ADD_PARTITIONS_TO_TXN_TRANSACTION: Ty = Ty::Struct(&[
    all(STRING),                              // transactional_id
    all(I64),                                 // producer_id
    all(I16),                                 // producer_epoch
    all(BOOL),                                // verify_only
    all(array(&ADD_PARTITIONS_TO_TXN_TOPIC)), // topics
]);
/// `AddPartitionsToTxnRequest`
const ADD_PARTITIONS_TO_TXN_REQUEST: Ty = Ty::Struct(&[
    since(4, array(&ADD_PARTITIONS_TO_TXN_TRANSACTION)), // transactions
    until(3, STRING),                                    // v3_and_below_transactional_id
    until(3, I64),                                       // v3_and_below_producer_id
    until(3, I16),                                       // v3_and_below_producer_epoch
    until(3, array(&ADD_PARTITIONS_TO_TXN_TOPIC)),       // v3_and_below_topics
]);

// ---- AddOffsetsToTxn (key 25): v0-v4, flexible from v3 ----

/// `AddOffsetsToTxnRequest`
const ADD_OFFSETS_TO_TXN_REQUEST: Ty = Ty::Struct(&[
    all(STRING), // transactional_id
    all(I64),    // producer_id
    all(I16),    // producer_epoch
    all(STRING), // group_id
]);

// ---- EndTxn (key 26): v0-v5, flexible from v3 ----

/// `EndTxnRequest`
const END_TXN_REQUEST: Ty = Ty::Struct(&[
    all(STRING), // transactional_id
    all(I64),    // producer_id
    all(I16),    // producer_epoch
    all(BOOL),   // committed
]);

// ---- WriteTxnMarkers (key 27): v1, flexible ----

/// `WritableTxnMarkerTopic`
const WRITABLE_TXN_MARKER_TOPIC: Ty = Ty::Struct(&[
    all(STRING),      // name
    all(array(&I32)), // partition_indexes
]);
/// `WritableTxnMarker`
const WRITABLE_TXN_MARKER: Ty = Ty::Struct(&[
    all(I64),                               // producer_id
    all(I16),                               // producer_epoch
    all(BOOL),                              // transaction_result
    all(array(&WRITABLE_TXN_MARKER_TOPIC)), // topics
    all(I32),                               // coordinator_epoch
]);
/// `WriteTxnMarkersRequest`
const WRITE_TXN_MARKERS_REQUEST: Ty = Ty::Struct(&[
    all(array(&WRITABLE_TXN_MARKER)), // markers
]);

// ---- TxnOffsetCommit (key 28): v0-v5, flexible from v3 ----

/// `TxnOffsetCommitRequestPartition`
const TXN_OFFSET_COMMIT_PARTITION: Ty = Ty::Struct(&[
    all(I32),      // partition_index
    all(I64),      // committed_offset
    since(2, I32), // committed_leader_epoch
    all(STRING),   // committed_metadata
]);
/// `TxnOffsetCommitRequestTopic`
const TXN_OFFSET_COMMIT_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                              // name
    all(array(&TXN_OFFSET_COMMIT_PARTITION)), // partitions
]);
/// `TxnOffsetCommitRequest`
const TXN_OFFSET_COMMIT_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                          // transactional_id
    all(STRING),                          // group_id
    all(I64),                             // producer_id
    all(I16),                             // producer_epoch
    since(3, I32),                        // generation_id
    since(3, STRING),                     // member_id
    since(3, STRING),                     // group_instance_id
    all(array(&TXN_OFFSET_COMMIT_TOPIC)), // topics
]);

// ---- OffsetForLeaderEpoch (key 23): v2-v4, flexible from v4 ----

/// `OffsetForLeaderPartition`
const OFFSET_FOR_LEADER_PARTITION: Ty = Ty::Struct(&[
    all(I32), // partition
    all(I32), // current_leader_epoch
    all(I32), // leader_epoch
]);
/// `OffsetForLeaderTopic`
const OFFSET_FOR_LEADER_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                              // topic
    all(array(&OFFSET_FOR_LEADER_PARTITION)), // partitions
]);
/// `OffsetForLeaderEpochRequest`
const OFFSET_FOR_LEADER_EPOCH_REQUEST: Ty = Ty::Struct(&[
    since(3, I32),                        // replica_id
    all(array(&OFFSET_FOR_LEADER_TOPIC)), // topics
]);

// ---- DescribeAcls (key 29): v1-v3, flexible from v2 ----

/// `DescribeAclsRequest`
const DESCRIBE_ACLS_REQUEST: Ty = Ty::Struct(&[
    all(I8),      // resource_type_filter
    all(STRING),  // resource_name_filter
    since(1, I8), // pattern_type_filter
    all(STRING),  // principal_filter
    all(STRING),  // host_filter
    all(I8),      // operation
    all(I8),      // permission_type
]);

// ---- CreateAcls (key 30): v1-v3, flexible from v2 ----

/// `AclCreation`
const ACL_CREATION: Ty = Ty::Struct(&[
    all(I8),      // resource_type
    all(STRING),  // resource_name
    since(1, I8), // resource_pattern_type
    all(STRING),  // principal
    all(STRING),  // host
    all(I8),      // operation
    all(I8),      // permission_type
]);
/// `CreateAclsRequest`
const CREATE_ACLS_REQUEST: Ty = Ty::Struct(&[
    all(array(&ACL_CREATION)), // creations
]);

// ---- DeleteAcls (key 31): v1-v3, flexible from v2 ----

/// `DeleteAclsFilter`: DescribeAcls's fields.
const DELETE_ACLS_FILTER: Ty = DESCRIBE_ACLS_REQUEST;
/// `DeleteAclsRequest`
const DELETE_ACLS_REQUEST: Ty = Ty::Struct(&[
    all(array(&DELETE_ACLS_FILTER)), // filters
]);

// ---- DescribeConfigs (key 32): v1-v4, flexible from v4 ----

/// `DescribeConfigsResource`
const DESCRIBE_CONFIGS_RESOURCE: Ty = Ty::Struct(&[
    all(I8),             // resource_type
    all(STRING),         // resource_name
    all(array(&STRING)), // configuration_keys
]);
/// `DescribeConfigsRequest`
const DESCRIBE_CONFIGS_REQUEST: Ty = Ty::Struct(&[
    all(array(&DESCRIBE_CONFIGS_RESOURCE)), // resources
    all(BOOL),                              // include_synonyms
    since(3, BOOL),                         // include_documentation
]);

// ---- AlterConfigs (key 33): v0-v2, flexible from v2 ----

/// `AlterableConfig`
const ALTERABLE_CONFIG: Ty = Ty::Struct(&[
    all(STRING), // name
    all(STRING), // value
]);
/// `AlterConfigsResource`
const ALTER_CONFIGS_RESOURCE: Ty = Ty::Struct(&[
    all(I8),                       // resource_type
    all(STRING),                   // resource_name
    all(array(&ALTERABLE_CONFIG)), // configs
]);
/// `AlterConfigsRequest`
const ALTER_CONFIGS_REQUEST: Ty = Ty::Struct(&[
    all(array(&ALTER_CONFIGS_RESOURCE)), // resources
    all(BOOL),                           // validate_only
]);

// ---- IncrementalAlterConfigs (key 44): v0-v1, flexible from v1 ----

/// `AlterableConfig`
const INCREMENTAL_ALTERABLE_CONFIG: Ty = Ty::Struct(&[
    all(STRING), // name
    all(I8),     // config_operation
    all(STRING), // value
]);
/// `AlterConfigsResource`
const INCREMENTAL_ALTER_CONFIGS_RESOURCE: Ty = Ty::Struct(&[
    all(I8),                                   // resource_type
    all(STRING),                               // resource_name
    all(array(&INCREMENTAL_ALTERABLE_CONFIG)), // configs
]);
/// `IncrementalAlterConfigsRequest`
const INCREMENTAL_ALTER_CONFIGS_REQUEST: Ty = Ty::Struct(&[
    all(array(&INCREMENTAL_ALTER_CONFIGS_RESOURCE)), // resources
    all(BOOL),                                       // validate_only
]);

// ---- CreatePartitions (key 37): v0-v3, flexible from v2 ----

/// `CreatePartitionsAssignment`
const CREATE_PARTITIONS_ASSIGNMENT: Ty = Ty::Struct(&[
    all(array(&I32)), // broker_ids
]);
/// `CreatePartitionsTopic`
const CREATE_PARTITIONS_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                               // name
    all(I32),                                  // count
    all(array(&CREATE_PARTITIONS_ASSIGNMENT)), // assignments
]);
/// `CreatePartitionsRequest`
const CREATE_PARTITIONS_REQUEST: Ty = Ty::Struct(&[
    all(array(&CREATE_PARTITIONS_TOPIC)), // topics
    all(I32),                             // timeout_ms
    all(BOOL),                            // validate_only
]);

// ---- DeleteGroups (key 42): v0-v2, flexible from v2 ----

/// `DeleteGroupsRequest`
const DELETE_GROUPS_REQUEST: Ty = Ty::Struct(&[
    all(array(&STRING)), // groups_names
]);

// ---- ElectLeaders (key 43): v0-v2, flexible from v2 ----

/// `TopicPartitions`
const ELECT_LEADERS_TOPIC: Ty = Ty::Struct(&[
    all(STRING),      // topic
    all(array(&I32)), // partitions
]);
/// `ElectLeadersRequest`
const ELECT_LEADERS_REQUEST: Ty = Ty::Struct(&[
    since(1, I8),                     // election_type
    all(array(&ELECT_LEADERS_TOPIC)), // topic_partitions
    all(I32),                         // timeout_ms
]);

// ---- AlterPartitionReassignments (key 45): v0-v1, flexible from v0 ----

/// `ReassignablePartition`
const REASSIGNABLE_PARTITION: Ty = Ty::Struct(&[
    all(I32),         // partition_index
    all(array(&I32)), // replicas
]);
/// `ReassignableTopic`
const REASSIGNABLE_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                         // name
    all(array(&REASSIGNABLE_PARTITION)), // partitions
]);
/// `AlterPartitionReassignmentsRequest`
const ALTER_PARTITION_REASSIGNMENTS_REQUEST: Ty = Ty::Struct(&[
    all(I32),                        // timeout_ms
    since(1, BOOL),                  // allow_replication_factor_change
    all(array(&REASSIGNABLE_TOPIC)), // topics
]);

// ---- ListPartitionReassignments (key 46): v0-v0, flexible from v0 ----

/// `ListPartitionReassignmentsTopics`
const LIST_PARTITION_REASSIGNMENTS_TOPICS: Ty = Ty::Struct(&[
    all(STRING),      // name
    all(array(&I32)), // partition_indexes
]);
/// `ListPartitionReassignmentsRequest`
const LIST_PARTITION_REASSIGNMENTS_REQUEST: Ty = Ty::Struct(&[
    all(I32),                                         // timeout_ms
    all(array(&LIST_PARTITION_REASSIGNMENTS_TOPICS)), // topics
]);

// ---- OffsetDelete (key 47): v0-v0, never flexible ----

/// `OffsetDeleteRequestPartition`
const OFFSET_DELETE_REQUEST_PARTITION: Ty = Ty::Struct(&[
    all(I32), // partition_index
]);
/// `OffsetDeleteRequestTopic`
const OFFSET_DELETE_REQUEST_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                                  // name
    all(array(&OFFSET_DELETE_REQUEST_PARTITION)), // partitions
]);
/// `OffsetDeleteRequest`
const OFFSET_DELETE_REQUEST: Ty = Ty::Struct(&[
    all(STRING),                              // group_id
    all(array(&OFFSET_DELETE_REQUEST_TOPIC)), // topics
]);

// ---- DescribeCluster (key 60): v0-v2, flexible from v0 ----

/// `DescribeClusterRequest`
const DESCRIBE_CLUSTER_REQUEST: Ty = Ty::Struct(&[
    all(BOOL),      // include_cluster_authorized_operations
    since(1, I8),   // endpoint_type
    since(2, BOOL), // include_fenced_brokers
]);

// ---- DescribeProducers (key 61): v0-v0, flexible from v0 ----

/// `TopicRequest`
const DESCRIBE_PRODUCERS_TOPIC: Ty = Ty::Struct(&[
    all(STRING),      // name
    all(array(&I32)), // partition_indexes
]);
/// `DescribeProducersRequest`
const DESCRIBE_PRODUCERS_REQUEST: Ty = Ty::Struct(&[
    all(array(&DESCRIBE_PRODUCERS_TOPIC)), // topics
]);

// ---- DescribeTransactions (key 65): v0, flexible ----

/// `DescribeTransactionsRequest`
const DESCRIBE_TRANSACTIONS_REQUEST: Ty = Ty::Struct(&[
    all(array(&STRING)), // transactional_ids
]);

// ---- ListTransactions (key 66): v0-v2, flexible ----

/// `ListTransactionsRequest`
const LIST_TRANSACTIONS_REQUEST: Ty = Ty::Struct(&[
    all(array(&STRING)), // state_filters
    all(array(&I64)),    // producer_id_filters
    since(1, I64),       // duration_filter
    since(2, STRING),    // transactional_id_pattern
]);

// ---- AlterPartition (key 56): v2-v3, flexible from v0 ----

/// `BrokerState`
const ALTER_PARTITION_BROKER_STATE: Ty = Ty::Struct(&[
    since(3, I32), // broker_id
    since(3, I64), // broker_epoch
]);
/// `PartitionData`
const ALTER_PARTITION_PARTITION: Ty = Ty::Struct(&[
    all(I32),                                       // partition_index
    all(I32),                                       // leader_epoch
    between(2, 2, array(&I32)),                     // new_isr
    since(3, array(&ALTER_PARTITION_BROKER_STATE)), // new_isr_with_epochs
    all(I8),                                        // leader_recovery_state
    all(I32),                                       // partition_epoch
]);
/// `TopicData`
const ALTER_PARTITION_TOPIC: Ty = Ty::Struct(&[
    all(UUID),                              // topic_id
    all(array(&ALTER_PARTITION_PARTITION)), // partitions
]);
/// `AlterPartitionRequest`
const ALTER_PARTITION_REQUEST: Ty = Ty::Struct(&[
    all(I32),                           // broker_id
    all(I64),                           // broker_epoch
    all(array(&ALTER_PARTITION_TOPIC)), // topics
]);

// ---- AlterReplicaLogDirs (key 34): v1-v2, flexible from v2 ----

/// `AlterReplicaLogDirTopic`
const ALTER_REPLICA_LOG_DIR_TOPIC: Ty = Ty::Struct(&[
    all(STRING),      // name
    all(array(&I32)), // partitions
]);
/// `AlterReplicaLogDir`
const ALTER_REPLICA_LOG_DIR: Ty = Ty::Struct(&[
    all(STRING),                              // path
    all(array(&ALTER_REPLICA_LOG_DIR_TOPIC)), // topics
]);
/// `AlterReplicaLogDirsRequest`
const ALTER_REPLICA_LOG_DIRS_REQUEST: Ty = Ty::Struct(&[
    all(array(&ALTER_REPLICA_LOG_DIR)), // dirs
]);

// ---- DescribeLogDirs (key 35): v1-v4, flexible from v2 ----

/// `DescribableLogDirTopic`
const DESCRIBABLE_LOG_DIR_TOPIC: Ty = Ty::Struct(&[
    all(STRING),      // topic
    all(array(&I32)), // partitions
]);
/// `DescribeLogDirsRequest`
const DESCRIBE_LOG_DIRS_REQUEST: Ty = Ty::Struct(&[
    all(array(&DESCRIBABLE_LOG_DIR_TOPIC)), // topics
]);

// ---- DescribeTopicPartitions (key 75): v0-v0, flexible from v0 ----

/// `TopicRequest`
const DESCRIBE_TOPIC_PARTITIONS_TOPIC: Ty = Ty::Struct(&[
    all(STRING), // name
]);
/// `Cursor`
const DESCRIBE_TOPIC_PARTITIONS_CURSOR: &[Field] = &[
    all(STRING), // topic_name
    all(I32),    // partition_index
];
/// `DescribeTopicPartitionsRequest`
const DESCRIBE_TOPIC_PARTITIONS_REQUEST: Ty = Ty::Struct(&[
    all(array(&DESCRIBE_TOPIC_PARTITIONS_TOPIC)), // topics
    all(I32),                                     // response_partition_limit
    all(Ty::OptionalStruct(DESCRIBE_TOPIC_PARTITIONS_CURSOR)), // cursor
]);

// ---- BrokerRegistration (key 62): v0-v4, flexible from v0 ----

/// `Listener`
const BROKER_REGISTRATION_LISTENER: Ty = Ty::Struct(&[
    all(STRING), // name
    all(STRING), // host
    all(I16),    // port (uint16)
    all(I16),    // security_protocol
]);
/// `Feature`
const BROKER_REGISTRATION_FEATURE: Ty = Ty::Struct(&[
    all(STRING), // name
    all(I16),    // min_supported_version
    all(I16),    // max_supported_version
]);
/// `BrokerRegistrationRequest`
const BROKER_REGISTRATION_REQUEST: Ty = Ty::Struct(&[
    all(I32),                                  // broker_id
    all(STRING),                               // cluster_id
    all(UUID),                                 // incarnation_id
    all(array(&BROKER_REGISTRATION_LISTENER)), // listeners
    all(array(&BROKER_REGISTRATION_FEATURE)),  // features
    all(STRING),                               // rack (nullable)
    since(1, BOOL),                            // is_migrating_zk_broker
    since(2, array(&UUID)),                    // log_dirs
    since(3, I64),                             // previous_broker_epoch
]);

// ---- BrokerHeartbeat (key 63): v0-v1, flexible from v0 ----

/// `BrokerHeartbeatRequest`
const BROKER_HEARTBEAT_REQUEST: Ty = Ty::Struct(&[
    all(I32),                         // broker_id
    all(I64),                         // broker_epoch
    all(I64),                         // current_metadata_offset
    all(BOOL),                        // want_fence
    all(BOOL),                        // want_shut_down
    tagged_since(0, 1, array(&UUID)), // offline_log_dirs
]);

// ---- AllocateProducerIds (key 67): v0, flexible from v0 ----

/// `AllocateProducerIdsRequest`
const ALLOCATE_PRODUCER_IDS_REQUEST: Ty = Ty::Struct(&[
    all(I32), // broker_id
    all(I64), // broker_epoch
]);

// ---- DescribeQuorum (key 55): v0-v2, flexible from v0 ----

/// `PartitionData`
const DESCRIBE_QUORUM_PARTITION: Ty = Ty::Struct(&[
    all(I32), // partition_index
]);
/// `TopicData`
const DESCRIBE_QUORUM_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                            // topic_name
    all(array(&DESCRIBE_QUORUM_PARTITION)), // partitions
]);
/// `DescribeQuorumRequest`
const DESCRIBE_QUORUM_REQUEST: Ty = Ty::Struct(&[
    all(array(&DESCRIBE_QUORUM_TOPIC)), // topics
]);

// ---- ListConfigResources (key 74): v0-v1, flexible from v0 ----

/// `ListConfigResourcesRequest`
const LIST_CONFIG_RESOURCES_REQUEST: Ty = Ty::Struct(&[
    since(1, array(&I8)), // resource_types
]);
