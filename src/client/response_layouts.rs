//! Wire layouts of the response bodies the client decodes, for [`crate::protocol::guard`] to walk
//! before `kafka-protocol` decodes them.
//!
//! `protocol::layouts` describes requests only: a response has its own schema. A peer broker is
//! less hostile than an arbitrary client, but a corrupt or truncated frame must still not make
//! `kafka-protocol` reserve memory from an unchecked array count and abort the process. So every
//! API the client sends has its response layout here, in the same DSL, transcribed from the
//! response decoders of `kafka-protocol` 0.18 (Kafka 4.1.0 schemas) in the order the crate reads
//! fields; the client refuses to send a request whose response it has no layout for.
//!
//! `tests/client_responses.rs` builds a populated response from each layout at every version,
//! has `kafka-protocol` decode and re-encode it byte for byte, and checks that hostile counts and
//! lengths are refused with bounded allocation. Adding an API means adding its layout here and
//! its key to that test.

use crate::protocol::layouts::{
    array, Field, Layout, Ty, Versions, BOOL, BYTES, I16, I32, I64, I8, MAX, NEVER, STRING, UUID,
};
use crate::protocol::ApiKey;

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

/// The response header: a correlation id, then in header v1 (flexible) a tag section. Walked at
/// "version" = header version, so v1 is the flexible one. The api key is only a label.
pub const RESPONSE_HEADER: Layout = layout(ApiKey::ApiVersions, 0, 1, 1, Ty::Struct(&[all(I32)]));

/// The layout of `api_key`'s responses, if the client decodes that API.
pub fn response_layout_of(api_key: ApiKey) -> Option<&'static Layout> {
    RESPONSE_LAYOUTS
        .iter()
        .find(|layout| layout.api_key == api_key)
}

/// Every API the client can send, with the response versions `kafka-protocol` decodes.
#[rustfmt::skip]
pub const RESPONSE_LAYOUTS: &[Layout] = &[
    //     api key                               min max  flex  body
    layout(ApiKey::Produce,                        3, 13,     9, PRODUCE_RESPONSE),
    layout(ApiKey::Fetch,                          4, 18,    12, FETCH_RESPONSE),
    layout(ApiKey::ListOffsets,                    1, 10,     6, LIST_OFFSETS_RESPONSE),
    layout(ApiKey::Metadata,                       0, 13,     9, METADATA_RESPONSE),
    layout(ApiKey::ApiVersions,                    0,  4,     3, API_VERSIONS_RESPONSE),
    layout(ApiKey::CreateTopics,                   2,  7,     5, CREATE_TOPICS_RESPONSE),
    layout(ApiKey::DeleteTopics,                   1,  6,     4, DELETE_TOPICS_RESPONSE),
    layout(ApiKey::OffsetForLeaderEpoch,           2,  4,     4, OFFSET_FOR_LEADER_EPOCH_RESPONSE),
    layout(ApiKey::CreatePartitions,               0,  3,     2, CREATE_PARTITIONS_RESPONSE),
    layout(ApiKey::DescribeConfigs,                1,  4,     4, DESCRIBE_CONFIGS_RESPONSE),
    layout(ApiKey::IncrementalAlterConfigs,        0,  1,     1, INCREMENTAL_ALTER_CONFIGS_RESPONSE),
    layout(ApiKey::ElectLeaders,                   0,  2,     2, ELECT_LEADERS_RESPONSE),
    layout(ApiKey::AlterPartitionReassignments,    0,  1,     0, ALTER_PARTITION_REASSIGNMENTS_RESPONSE),
    layout(ApiKey::DescribeCluster,                0,  2,     0, DESCRIBE_CLUSTER_RESPONSE),
    layout(ApiKey::AlterPartition,                 2,  3,     0, ALTER_PARTITION_RESPONSE),
    layout(ApiKey::BrokerRegistration,             0,  4,     0, BROKER_REGISTRATION_RESPONSE),
    layout(ApiKey::BrokerHeartbeat,                0,  1,     0, BROKER_HEARTBEAT_RESPONSE),
    layout(ApiKey::UnregisterBroker,               0,  0,     0, UNREGISTER_BROKER_RESPONSE),
    layout(ApiKey::AllocateProducerIds,            0,  0,     0, ALLOCATE_PRODUCER_IDS_RESPONSE),
    layout(ApiKey::WriteTxnMarkers,                1,  1,     1, WRITE_TXN_MARKERS_RESPONSE),
    layout(ApiKey::AddPartitionsToTxn,             0,  5,     3, ADD_PARTITIONS_TO_TXN_RESPONSE),
    layout(ApiKey::DescribeQuorum,                 0,  2,     0, DESCRIBE_QUORUM_RESPONSE),
    layout(ApiKey::CreateAcls,                     1,  3,     2, CREATE_ACLS_RESPONSE),
    layout(ApiKey::DeleteAcls,                     1,  3,     2, DELETE_ACLS_RESPONSE),
    layout(ApiKey::AlterUserScramCredentials,      0,  0,     0, ALTER_USER_SCRAM_CREDENTIALS_RESPONSE),
    layout(ApiKey::SaslHandshake,                  0,  1, NEVER, SASL_HANDSHAKE_RESPONSE),
    layout(ApiKey::SaslAuthenticate,               0,  2,     2, SASL_AUTHENTICATE_RESPONSE),
    layout(ApiKey::AlterConfigs,                   0,  2,     2, ALTER_CONFIGS_RESPONSE),
    layout(ApiKey::Envelope,                       0,  0,     0, ENVELOPE_RESPONSE),
];

// ---- AlterConfigs (key 33): v0-v2, flexible from v2 (forwarded to the active controller) ----

/// `AlterConfigsResponse`
const ALTER_CONFIGS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                     // throttle_time_ms
    all(array(&ALTER_CONFIGS_RESOURCE_RESPONSE)), // responses
]);

// ---- Envelope (key 58): v0, flexible (a client's request forwarded to the active controller)

/// `EnvelopeResponse`
const ENVELOPE_RESPONSE: Ty = Ty::Struct(&[
    all(BYTES), // response_data (nullable)
    all(I16),   // error_code
]);

// ---- SaslHandshake (key 17): v0-v1, never flexible (authenticating to a SASL listener) ----

/// `SaslHandshakeResponse`
const SASL_HANDSHAKE_RESPONSE: Ty = Ty::Struct(&[
    all(I16),            // error_code
    all(array(&STRING)), // mechanisms
]);

// ---- SaslAuthenticate (key 36): v0-v2, flexible from v2 ----

/// `SaslAuthenticateResponse`
const SASL_AUTHENTICATE_RESPONSE: Ty = Ty::Struct(&[
    all(I16),      // error_code
    all(STRING),   // error_message
    all(BYTES),    // auth_bytes
    since(1, I64), // session_lifetime_ms
]);

// ---- AlterUserScramCredentials (key 51): v0, flexible (forwarded to the active controller) ----

/// `AlterUserScramCredentialsResponse`
const ALTER_USER_SCRAM_CREDENTIALS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                         // throttle_time_ms
    all(array(&ALTER_USER_SCRAM_CREDENTIALS_RESULT)), // results
]);
/// `AlterUserScramCredentialsResult`
const ALTER_USER_SCRAM_CREDENTIALS_RESULT: Ty = Ty::Struct(&[
    all(STRING), // user
    all(I16),    // error_code
    all(STRING), // error_message
]);

// ---- CreateAcls (key 30): v1-v3, flexible from v2 (forwarded to the active controller) ----

/// `CreateAclsResponse`
const CREATE_ACLS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                 // throttle_time_ms
    all(array(&CREATE_ACLS_CREATION_RESULT)), // results
]);
/// `AclCreationResult`
const CREATE_ACLS_CREATION_RESULT: Ty = Ty::Struct(&[
    all(I16),    // error_code
    all(STRING), // error_message
]);

// ---- DeleteAcls (key 31): v1-v3, flexible from v2 (forwarded to the active controller) ----

/// `DeleteAclsResponse`
const DELETE_ACLS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                               // throttle_time_ms
    all(array(&DELETE_ACLS_FILTER_RESULT)), // filter_results
]);
/// `DeleteAclsFilterResult`
const DELETE_ACLS_FILTER_RESULT: Ty = Ty::Struct(&[
    all(I16),                              // error_code
    all(STRING),                           // error_message
    all(array(&DELETE_ACLS_MATCHING_ACL)), // matching_acls
]);
/// `DeleteAclsMatchingAcl`
const DELETE_ACLS_MATCHING_ACL: Ty = Ty::Struct(&[
    all(I16),    // error_code
    all(STRING), // error_message
    all(I8),     // resource_type
    all(STRING), // resource_name
    all(I8),     // pattern_type
    all(STRING), // principal
    all(STRING), // host
    all(I8),     // operation
    all(I8),     // permission_type
]);

// ---- Produce (key 0): v3-v13, flexible from v9 ----

/// `BatchIndexAndErrorMessage`
const PRODUCE_BATCH_INDEX_ERROR: Ty = Ty::Struct(&[
    since(8, I32),    // batch_index
    since(8, STRING), // batch_index_error_message
]);
/// `LeaderIdAndEpoch`
const PRODUCE_LEADER_ID_AND_EPOCH: Ty = Ty::Struct(&[
    since(10, I32), // leader_id
    since(10, I32), // leader_epoch
]);
/// `NodeEndpoint`
const PRODUCE_NODE_ENDPOINT: Ty = Ty::Struct(&[
    since(10, I32),    // node_id
    since(10, STRING), // host
    since(10, I32),    // port
    since(10, STRING), // rack
]);
/// `PartitionProduceResponse`
const PARTITION_PRODUCE_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                         // index
    all(I16),                                         // error_code
    all(I64),                                         // base_offset
    all(I64),                                         // log_append_time_ms
    since(5, I64),                                    // log_start_offset
    since(8, array(&PRODUCE_BATCH_INDEX_ERROR)),      // record_errors
    since(8, STRING),                                 // error_message
    tagged_since(0, 10, PRODUCE_LEADER_ID_AND_EPOCH), // current_leader
]);
/// `ProduceResponse`
const PRODUCE_RESPONSE: Ty = Ty::Struct(&[
    all(array(&TOPIC_PRODUCE_RESPONSE)),                // responses
    all(I32),                                           // throttle_time_ms
    tagged_since(0, 10, array(&PRODUCE_NODE_ENDPOINT)), // node_endpoints
]);
/// `TopicProduceResponse`
const TOPIC_PRODUCE_RESPONSE: Ty = Ty::Struct(&[
    until(12, STRING),                       // name
    since(13, UUID),                         // topic_id
    all(array(&PARTITION_PRODUCE_RESPONSE)), // partition_responses
]);

// ---- Fetch (key 1): v4-v18, flexible from v12 ----

/// `AbortedTransaction`
const FETCH_ABORTED_TRANSACTION: Ty = Ty::Struct(&[
    all(I64), // producer_id
    all(I64), // first_offset
]);
/// `EpochEndOffset`
const FETCH_EPOCH_END_OFFSET: Ty = Ty::Struct(&[
    since(12, I32), // epoch
    since(12, I64), // end_offset
]);
/// `FetchResponse`
const FETCH_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                         // throttle_time_ms
    since(7, I16),                                    // error_code
    since(7, I32),                                    // session_id
    all(array(&FETCHABLE_TOPIC_RESPONSE)),            // responses
    tagged_since(0, 16, array(&FETCH_NODE_ENDPOINT)), // node_endpoints
]);
/// `FetchableTopicResponse`
const FETCHABLE_TOPIC_RESPONSE: Ty = Ty::Struct(&[
    until(12, STRING),                 // topic
    since(13, UUID),                   // topic_id
    all(array(&FETCH_PARTITION_DATA)), // partitions
]);
/// `LeaderIdAndEpoch`
const FETCH_LEADER_ID_AND_EPOCH: Ty = Ty::Struct(&[
    since(12, I32), // leader_id
    since(12, I32), // leader_epoch
]);
/// `NodeEndpoint`
const FETCH_NODE_ENDPOINT: Ty = Ty::Struct(&[
    since(16, I32),    // node_id
    since(16, STRING), // host
    since(16, I32),    // port
    since(16, STRING), // rack
]);
/// `PartitionData`
const FETCH_PARTITION_DATA: Ty = Ty::Struct(&[
    all(I32),                               // partition_index
    all(I16),                               // error_code
    all(I64),                               // high_watermark
    all(I64),                               // last_stable_offset
    since(5, I64),                          // log_start_offset
    all(array(&FETCH_ABORTED_TRANSACTION)), // aborted_transactions
    since(11, I32),                         // preferred_read_replica
    all(BYTES),                             // records
    tagged(0, FETCH_EPOCH_END_OFFSET),      // diverging_epoch
    tagged(1, FETCH_LEADER_ID_AND_EPOCH),   // current_leader
    tagged(2, FETCH_SNAPSHOT_ID),           // snapshot_id
]);
/// `SnapshotId`
const FETCH_SNAPSHOT_ID: Ty = Ty::Struct(&[
    all(I64), // end_offset
    all(I32), // epoch
]);

// ---- ListOffsets (key 2): v1-v10, flexible from v6 ----

/// `ListOffsetsPartitionResponse`
const LIST_OFFSETS_PARTITION_RESPONSE: Ty = Ty::Struct(&[
    all(I32),      // partition_index
    all(I16),      // error_code
    all(I64),      // timestamp
    all(I64),      // offset
    since(4, I32), // leader_epoch
]);
/// `ListOffsetsResponse`
const LIST_OFFSETS_RESPONSE: Ty = Ty::Struct(&[
    since(2, I32),                            // throttle_time_ms
    all(array(&LIST_OFFSETS_TOPIC_RESPONSE)), // topics
]);
/// `ListOffsetsTopicResponse`
const LIST_OFFSETS_TOPIC_RESPONSE: Ty = Ty::Struct(&[
    all(STRING),                                  // name
    all(array(&LIST_OFFSETS_PARTITION_RESPONSE)), // partitions
]);

// ---- Metadata (key 3): v0-v13, flexible from v9 ----

/// `MetadataResponse`
const METADATA_RESPONSE: Ty = Ty::Struct(&[
    since(3, I32),                         // throttle_time_ms
    all(array(&METADATA_RESPONSE_BROKER)), // brokers
    since(2, STRING),                      // cluster_id
    since(1, I32),                         // controller_id
    all(array(&METADATA_RESPONSE_TOPIC)),  // topics
    between(8, 10, I32),                   // cluster_authorized_operations
    since(13, I16),                        // error_code
]);
/// `MetadataResponseBroker`
const METADATA_RESPONSE_BROKER: Ty = Ty::Struct(&[
    all(I32),         // node_id
    all(STRING),      // host
    all(I32),         // port
    since(1, STRING), // rack
]);
/// `MetadataResponsePartition`
const METADATA_RESPONSE_PARTITION: Ty = Ty::Struct(&[
    all(I16),              // error_code
    all(I32),              // partition_index
    all(I32),              // leader_id
    since(7, I32),         // leader_epoch
    all(array(&I32)),      // replica_nodes
    all(array(&I32)),      // isr_nodes
    since(5, array(&I32)), // offline_replicas
]);
/// `MetadataResponseTopic`
const METADATA_RESPONSE_TOPIC: Ty = Ty::Struct(&[
    all(I16),                                 // error_code
    all(STRING),                              // name
    since(10, UUID),                          // topic_id
    since(1, BOOL),                           // is_internal
    all(array(&METADATA_RESPONSE_PARTITION)), // partitions
    since(8, I32),                            // topic_authorized_operations
]);

// ---- ApiVersions (key 18): v0-v4, flexible from v3 ----

/// `ApiVersion`
const API_VERSIONS_API_VERSION: Ty = Ty::Struct(&[
    all(I16), // api_key
    all(I16), // min_version
    all(I16), // max_version
]);
/// `ApiVersionsResponse`
const API_VERSIONS_RESPONSE: Ty = Ty::Struct(&[
    all(I16),                                 // error_code
    all(array(&API_VERSIONS_API_VERSION)),    // api_keys
    since(1, I32),                            // throttle_time_ms
    tagged(0, array(&SUPPORTED_FEATURE_KEY)), // supported_features
    tagged(1, I64),                           // finalized_features_epoch
    tagged(2, array(&FINALIZED_FEATURE_KEY)), // finalized_features
    tagged(3, BOOL),                          // zk_migration_ready
]);
/// `FinalizedFeatureKey`
const FINALIZED_FEATURE_KEY: Ty = Ty::Struct(&[
    since(3, STRING), // name
    since(3, I16),    // max_version_level
    since(3, I16),    // min_version_level
]);
/// `SupportedFeatureKey`
const SUPPORTED_FEATURE_KEY: Ty = Ty::Struct(&[
    since(3, STRING), // name
    since(3, I16),    // min_version
    since(3, I16),    // max_version
]);

// ---- CreateTopics (key 19): v2-v7, flexible from v5 ----

/// `CreatableTopicConfigs`
const CREATABLE_TOPIC_CONFIGS: Ty = Ty::Struct(&[
    since(5, STRING), // name
    since(5, STRING), // value
    since(5, BOOL),   // read_only
    since(5, I8),     // config_source
    since(5, BOOL),   // is_sensitive
]);
/// `CreatableTopicResult`
const CREATABLE_TOPIC_RESULT: Ty = Ty::Struct(&[
    all(STRING),                               // name
    since(7, UUID),                            // topic_id
    all(I16),                                  // error_code
    all(STRING),                               // error_message
    since(5, I32),                             // num_partitions
    since(5, I16),                             // replication_factor
    since(5, array(&CREATABLE_TOPIC_CONFIGS)), // configs
    tagged(0, I16),                            // topic_config_error_code
]);
/// `CreateTopicsResponse`
const CREATE_TOPICS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                            // throttle_time_ms
    all(array(&CREATABLE_TOPIC_RESULT)), // topics
]);

// ---- DeleteTopics (key 20): v1-v6, flexible from v4 ----

/// `DeletableTopicResult`
const DELETABLE_TOPIC_RESULT: Ty = Ty::Struct(&[
    all(STRING),      // name
    since(6, UUID),   // topic_id
    all(I16),         // error_code
    since(5, STRING), // error_message
]);
/// `DeleteTopicsResponse`
const DELETE_TOPICS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                            // throttle_time_ms
    all(array(&DELETABLE_TOPIC_RESULT)), // responses
]);

// ---- OffsetForLeaderEpoch (key 23): v2-v4, flexible from v4 ----

/// `EpochEndOffset`
const OFFSET_FOR_LEADER_EPOCH_END_OFFSET: Ty = Ty::Struct(&[
    all(I16), // error_code
    all(I32), // partition
    all(I32), // leader_epoch
    all(I64), // end_offset
]);
/// `OffsetForLeaderEpochResponse`
const OFFSET_FOR_LEADER_EPOCH_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                    // throttle_time_ms
    all(array(&OFFSET_FOR_LEADER_TOPIC_RESULT)), // topics
]);
/// `OffsetForLeaderTopicResult`
const OFFSET_FOR_LEADER_TOPIC_RESULT: Ty = Ty::Struct(&[
    all(STRING),                                     // topic
    all(array(&OFFSET_FOR_LEADER_EPOCH_END_OFFSET)), // partitions
]);

// ---- CreatePartitions (key 37): v0-v3, flexible from v2 ----

/// `CreatePartitionsResponse`
const CREATE_PARTITIONS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                    // throttle_time_ms
    all(array(&CREATE_PARTITIONS_TOPIC_RESULT)), // results
]);
/// `CreatePartitionsTopicResult`
const CREATE_PARTITIONS_TOPIC_RESULT: Ty = Ty::Struct(&[
    all(STRING), // name
    all(I16),    // error_code
    all(STRING), // error_message
]);

// ---- DescribeConfigs (key 32): v1-v4, flexible from v4 ----

/// `DescribeConfigsSynonym`
const DESCRIBE_CONFIGS_SYNONYM: Ty = Ty::Struct(&[
    all(STRING), // name
    all(STRING), // value
    all(I8),     // source
]);
/// `DescribeConfigsResourceResult`
const DESCRIBE_CONFIGS_RESOURCE_RESULT: Ty = Ty::Struct(&[
    all(STRING),                           // name
    all(STRING),                           // value
    all(BOOL),                             // read_only
    all(I8),                               // config_source
    all(BOOL),                             // is_sensitive
    all(array(&DESCRIBE_CONFIGS_SYNONYM)), // synonyms
    since(3, I8),                          // config_type
    since(3, STRING),                      // documentation
]);
/// `DescribeConfigsResult`
const DESCRIBE_CONFIGS_RESULT: Ty = Ty::Struct(&[
    all(I16),                                      // error_code
    all(STRING),                                   // error_message
    all(I8),                                       // resource_type
    all(STRING),                                   // resource_name
    all(array(&DESCRIBE_CONFIGS_RESOURCE_RESULT)), // configs
]);
/// `DescribeConfigsResponse`
const DESCRIBE_CONFIGS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                             // throttle_time_ms
    all(array(&DESCRIBE_CONFIGS_RESULT)), // results
]);

// ---- IncrementalAlterConfigs (key 44): v0-v1, flexible from v1 ----

/// `AlterConfigsResourceResponse`
const ALTER_CONFIGS_RESOURCE_RESPONSE: Ty = Ty::Struct(&[
    all(I16),    // error_code
    all(STRING), // error_message
    all(I8),     // resource_type
    all(STRING), // resource_name
]);
/// `IncrementalAlterConfigsResponse`
const INCREMENTAL_ALTER_CONFIGS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                     // throttle_time_ms
    all(array(&ALTER_CONFIGS_RESOURCE_RESPONSE)), // responses
]);

// ---- ElectLeaders (key 43): v0-v2, flexible from v2 ----

/// `ElectLeadersResponse`
const ELECT_LEADERS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                             // throttle_time_ms
    since(1, I16),                        // error_code
    all(array(&REPLICA_ELECTION_RESULT)), // replica_election_results
]);
/// `PartitionResult`
const ELECT_LEADERS_PARTITION_RESULT: Ty = Ty::Struct(&[
    all(I32),    // partition_id
    all(I16),    // error_code
    all(STRING), // error_message
]);
/// `ReplicaElectionResult`
const REPLICA_ELECTION_RESULT: Ty = Ty::Struct(&[
    all(STRING),                                 // topic
    all(array(&ELECT_LEADERS_PARTITION_RESULT)), // partition_result
]);

// ---- AlterPartitionReassignments (key 45): v0-v1, flexible from v0 ----

/// `AlterPartitionReassignmentsResponse`
const ALTER_PARTITION_REASSIGNMENTS_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                 // throttle_time_ms
    since(1, BOOL),                           // allow_replication_factor_change
    all(I16),                                 // error_code
    all(STRING),                              // error_message
    all(array(&REASSIGNABLE_TOPIC_RESPONSE)), // responses
]);
/// `ReassignablePartitionResponse`
const REASSIGNABLE_PARTITION_RESPONSE: Ty = Ty::Struct(&[
    all(I32),    // partition_index
    all(I16),    // error_code
    all(STRING), // error_message
]);
/// `ReassignableTopicResponse`
const REASSIGNABLE_TOPIC_RESPONSE: Ty = Ty::Struct(&[
    all(STRING),                                  // name
    all(array(&REASSIGNABLE_PARTITION_RESPONSE)), // partitions
]);

// ---- DescribeCluster (key 60): v0-v2, flexible from v0 ----

/// `DescribeClusterBroker`
const DESCRIBE_CLUSTER_BROKER: Ty = Ty::Struct(&[
    all(I32),       // broker_id
    all(STRING),    // host
    all(I32),       // port
    all(STRING),    // rack
    since(2, BOOL), // is_fenced
]);
/// `DescribeClusterResponse`
const DESCRIBE_CLUSTER_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                             // throttle_time_ms
    all(I16),                             // error_code
    all(STRING),                          // error_message
    since(1, I8),                         // endpoint_type
    all(STRING),                          // cluster_id
    all(I32),                             // controller_id
    all(array(&DESCRIBE_CLUSTER_BROKER)), // brokers
    all(I32),                             // cluster_authorized_operations
]);

// ---- AlterPartition (key 56): v2-v3, flexible from v0 ----

/// `AlterPartitionResponse`
const ALTER_PARTITION_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                // throttle_time_ms
    all(I16),                                // error_code
    all(array(&ALTER_PARTITION_TOPIC_DATA)), // topics
]);
/// `PartitionData`
const ALTER_PARTITION_PARTITION_DATA: Ty = Ty::Struct(&[
    all(I32),         // partition_index
    all(I16),         // error_code
    all(I32),         // leader_id
    all(I32),         // leader_epoch
    all(array(&I32)), // isr
    all(I8),          // leader_recovery_state
    all(I32),         // partition_epoch
]);
/// `TopicData`
const ALTER_PARTITION_TOPIC_DATA: Ty = Ty::Struct(&[
    all(UUID),                                   // topic_id
    all(array(&ALTER_PARTITION_PARTITION_DATA)), // partitions
]);

// ---- BrokerRegistration (key 62): v0-v4, flexible from v0 ----

/// `BrokerRegistrationResponse`
const BROKER_REGISTRATION_RESPONSE: Ty = Ty::Struct(&[
    all(I32), // throttle_time_ms
    all(I16), // error_code
    all(I64), // broker_epoch
]);

// ---- BrokerHeartbeat (key 63): v0-v1, flexible from v0 ----

/// `BrokerHeartbeatResponse`
const BROKER_HEARTBEAT_RESPONSE: Ty = Ty::Struct(&[
    all(I32),  // throttle_time_ms
    all(I16),  // error_code
    all(BOOL), // is_caught_up
    all(BOOL), // is_fenced
    all(BOOL), // should_shut_down
]);

// ---- UnregisterBroker (key 64): v0, flexible from v0 ----

/// `UnregisterBrokerResponse`
const UNREGISTER_BROKER_RESPONSE: Ty = Ty::Struct(&[
    all(I32),    // throttle_time_ms
    all(I16),    // error_code
    all(STRING), // error_message
]);

// ---- AllocateProducerIds (key 67): v0, flexible from v0 ----

/// `AllocateProducerIdsResponse`
const ALLOCATE_PRODUCER_IDS_RESPONSE: Ty = Ty::Struct(&[
    all(I32), // throttle_time_ms
    all(I16), // error_code
    all(I64), // producer_id_start
    all(I32), // producer_id_len
]);

// ---- WriteTxnMarkers (key 27): v1, flexible ----

/// `WritableTxnMarkerPartitionResult`
const WRITABLE_TXN_MARKER_PARTITION_RESULT: Ty = Ty::Struct(&[
    all(I32), // partition_index
    all(I16), // error_code
]);
/// `WritableTxnMarkerTopicResult`
const WRITABLE_TXN_MARKER_TOPIC_RESULT: Ty = Ty::Struct(&[
    all(STRING),                                       // name
    all(array(&WRITABLE_TXN_MARKER_PARTITION_RESULT)), // partitions
]);
/// `WritableTxnMarkerResult`
const WRITABLE_TXN_MARKER_RESULT: Ty = Ty::Struct(&[
    all(I64),                                      // producer_id
    all(array(&WRITABLE_TXN_MARKER_TOPIC_RESULT)), // topics
]);
/// `WriteTxnMarkersResponse`
const WRITE_TXN_MARKERS_RESPONSE: Ty = Ty::Struct(&[
    all(array(&WRITABLE_TXN_MARKER_RESULT)), // markers
]);

// ---- AddPartitionsToTxn (key 24): v0-v5, flexible from v3 (a partition leader sends v4-v5 to verify) ----

/// `AddPartitionsToTxnPartitionResult`
const ADD_PARTITIONS_TO_TXN_PARTITION_RESULT: Ty = Ty::Struct(&[
    all(I32), // partition_index
    all(I16), // partition_error_code
]);
/// `AddPartitionsToTxnTopicResult`
const ADD_PARTITIONS_TO_TXN_TOPIC_RESULT: Ty = Ty::Struct(&[
    all(STRING),                                         // name
    all(array(&ADD_PARTITIONS_TO_TXN_PARTITION_RESULT)), // results_by_partition
]);
/// `AddPartitionsToTxnResult`
const ADD_PARTITIONS_TO_TXN_RESULT: Ty = Ty::Struct(&[
    since(4, STRING),                                     // transactional_id
    since(4, array(&ADD_PARTITIONS_TO_TXN_TOPIC_RESULT)), // topic_results
]);
/// `AddPartitionsToTxnResponse`
const ADD_PARTITIONS_TO_TXN_RESPONSE: Ty = Ty::Struct(&[
    all(I32),                                             // throttle_time_ms
    since(4, I16),                                        // error_code
    since(4, array(&ADD_PARTITIONS_TO_TXN_RESULT)),       // results_by_transaction
    until(3, array(&ADD_PARTITIONS_TO_TXN_TOPIC_RESULT)), // results_by_topic_v3_and_below
]);

// ---- DescribeQuorum (key 55): v0-v2, flexible from v0 ----

/// `ReplicaState`
const DESCRIBE_QUORUM_REPLICA_STATE: Ty = Ty::Struct(&[
    all(I32),       // replica_id
    since(2, UUID), // replica_directory_id
    all(I64),       // log_end_offset
    since(1, I64),  // last_fetch_timestamp
    since(1, I64),  // last_caught_up_timestamp
]);
/// `PartitionData`
const DESCRIBE_QUORUM_PARTITION: Ty = Ty::Struct(&[
    all(I32),                                   // partition_index
    all(I16),                                   // error_code
    since(2, STRING),                           // error_message
    all(I32),                                   // leader_id
    all(I32),                                   // leader_epoch
    all(I64),                                   // high_watermark
    all(array(&DESCRIBE_QUORUM_REPLICA_STATE)), // current_voters
    all(array(&DESCRIBE_QUORUM_REPLICA_STATE)), // observers
]);
/// `TopicData`
const DESCRIBE_QUORUM_TOPIC: Ty = Ty::Struct(&[
    all(STRING),                            // topic_name
    all(array(&DESCRIBE_QUORUM_PARTITION)), // partitions
]);
/// `Listener`
const DESCRIBE_QUORUM_LISTENER: Ty = Ty::Struct(&[
    all(STRING), // name
    all(STRING), // host
    all(I16),    // port (uint16)
]);
/// `Node`
const DESCRIBE_QUORUM_NODE: Ty = Ty::Struct(&[
    all(I32),                              // node_id
    all(array(&DESCRIBE_QUORUM_LISTENER)), // listeners
]);
/// `DescribeQuorumResponse`
const DESCRIBE_QUORUM_RESPONSE: Ty = Ty::Struct(&[
    all(I16),                               // error_code
    since(2, STRING),                       // error_message
    all(array(&DESCRIBE_QUORUM_TOPIC)),     // topics
    since(2, array(&DESCRIBE_QUORUM_NODE)), // nodes
]);
