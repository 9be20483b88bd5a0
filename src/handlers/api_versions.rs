//! ApiVersions (key 18): the table of APIs and versions this broker serves.
//!
//! [`SUPPORTED`] is the single source of truth: dispatch refuses anything outside it, and this
//! handler advertises exactly it. Minimums follow Apache Kafka 4.x (Produce 0, Fetch 4,
//! ListOffsets 1, InitProducerId 0) so that older librdkafka builds, which enable features only
//! when specific versions are advertised, turn on MsgVer2, idempotence, zstd and offsets by time
//! (reference/client-compat.md). Produce v0-2 are advertised like Kafka 4 does and refused at
//! request time (the connection is closed). Maxima are capped at what is implemented: Fetch
//! stops at 17 (v18's follower high watermark is not used yet).

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::errors::ApiError;
use crate::protocol;

/// (api, min version, max version) this broker serves.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    // No authorizer runs yet: every ACL request is answered SECURITY_DISABLED, as Kafka does
    // without one.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // No client quotas exist: every filter matches nothing (handlers::describe_client_quotas).
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::ListConfigResources, 0, 1),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::ListGroups, 0, 5),
    // Advertised on every listener, as Kafka does; outside a SASL listener's authentication
    // they are answered ILLEGAL_SASL_STATE.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // KIP-848; left out of ApiVersions when `group.coordinator.rebalance.protocols` does not
    // list `consumer` (see [`KIP_848_APIS`]).
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

/// The APIs of the KIP-848 consumer group protocol.
const KIP_848_APIS: &[ApiKey] = &[
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
];

/// What the controller listener serves: the APIs of a KRaft controller that exist here (the SASL
/// exchange of a SASL controller listener included, as Kafka's controller lists it).
pub const CONTROLLER_SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::AlterPartition, 2, 3),
    (ApiKey::BrokerRegistration, 0, 4),
    (ApiKey::BrokerHeartbeat, 0, 1),
    (ApiKey::AllocateProducerIds, 0, 0),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::Envelope, 0, 0),
];

/// Whether a request version is served. Produce v0-2 are advertised but not served.
pub fn is_supported(api_key: ApiKey, version: i16) -> bool {
    if api_key == ApiKey::Produce && version < 3 {
        return false;
    }
    SUPPORTED
        .iter()
        .any(|(k, min, max)| *k == api_key && (*min..=*max).contains(&version))
}

fn api_keys_of(table: &[(ApiKey, i16, i16)]) -> Vec<ApiVersion> {
    table
        .iter()
        .map(|(key, min, max)| {
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

/// Feature levels (KIP-584) this node implements, as `(name, min, max, finalized)`. `metadata.version` 27
/// is Kafka's `4.1-IV1`, the protocol level of the API table above; only that level is
/// implemented, so it is both the minimum and the maximum. `transaction.version` 2 (KIP-890
/// part 2: an epoch bump per transaction, partitions added by their leaders) is finalized, as
/// in a Kafka 4.1 cluster formatted with its defaults; clients of versions 0 and 1 are served
/// too. `group.version` 1 (KIP-848's consumer group protocol) is finalized unless
/// `group.coordinator.rebalance.protocols` leaves out `consumer`.
const SUPPORTED_FEATURES: &[(&str, i16, i16, i16)] = &[
    (
        "metadata.version",
        METADATA_VERSION_LEVEL,
        METADATA_VERSION_LEVEL,
        METADATA_VERSION_LEVEL,
    ),
    ("kraft.version", 0, 0, 0),
    ("group.version", 0, 1, 1),
    ("transaction.version", 0, 2, 2),
];

/// Kafka's `MetadataVersion.IBP_4_1_IV1.featureLevel()`.
pub const METADATA_VERSION_LEVEL: i16 = 27;

/// The epoch of the finalized features: they are fixed when the cluster is created and never
/// updated (no UpdateFeatures), so the epoch is that of the first metadata record.
const FINALIZED_FEATURES_EPOCH: i64 = 0;

pub fn handle(version: i16, request: ApiVersionsRequest, consumer_protocol: bool) -> ResponseKind {
    if consumer_protocol {
        return handle_of(SUPPORTED, version, request);
    }
    let table: Vec<(ApiKey, i16, i16)> = SUPPORTED
        .iter()
        .filter(|(k, _, _)| !KIP_848_APIS.contains(k))
        .copied()
        .collect();
    let mut response = handle_of(&table, version, request);
    if let ResponseKind::ApiVersions(r) = &mut response {
        r.finalized_features
            .retain(|f| f.name.as_str() != "group.version");
        for f in r.supported_features.iter_mut() {
            if f.name.as_str() == "group.version" {
                f.max_version = 0;
            }
        }
    }
    response
}

/// Kafka's `ApiVersionsRequest#isValid`: from version 3 the client's software name and version
/// must each be letters and digits, with `-` and `.` allowed inside
/// (`[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`).
pub fn is_valid(version: i16, request: &ApiVersionsRequest) -> bool {
    fn word(s: &str) -> bool {
        let b = s.as_bytes();
        let edge = |c: &u8| c.is_ascii_alphanumeric();
        b.first().is_some_and(edge)
            && b.last().is_some_and(edge)
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
    }
    version < 3
        || (word(request.client_software_name.as_str())
            && word(request.client_software_version.as_str()))
}

/// ApiVersions advertising `table` (the client or the controller listener's). An invalid
/// request ([`is_valid`]) is answered INVALID_REQUEST with no versions, as Kafka answers it.
pub fn handle_of(
    table: &[(ApiKey, i16, i16)],
    version: i16,
    request: ApiVersionsRequest,
) -> ResponseKind {
    if !is_valid(version, &request) {
        return ResponseKind::ApiVersions(
            ApiVersionsResponse::default()
                .with_error_code(ApiError::InvalidRequest(String::new()).code()),
        );
    }
    let mut response = ApiVersionsResponse::default().with_api_keys(api_keys_of(table));
    if version >= 3 {
        response.supported_features = SUPPORTED_FEATURES
            .iter()
            .map(|(name, min, max, _)| {
                SupportedFeatureKey::default()
                    .with_name(StrBytes::from_static_str(name))
                    .with_min_version(*min)
                    .with_max_version(*max)
            })
            .collect();
        response.finalized_features_epoch = FINALIZED_FEATURES_EPOCH;
        // Kafka lists only features finalized above level 0.
        response.finalized_features = SUPPORTED_FEATURES
            .iter()
            .filter(|(_, _, _, finalized)| *finalized > 0)
            .map(|(name, _, _, finalized)| {
                FinalizedFeatureKey::default()
                    .with_name(StrBytes::from_static_str(name))
                    .with_min_version_level(*finalized)
                    .with_max_version_level(*finalized)
            })
            .collect();
    }
    ResponseKind::ApiVersions(response)
}

/// KIP-511: a too-new ApiVersions request is answered with a v0 body carrying
/// UNSUPPORTED_VERSION and our ranges; the client retries with a version we know.
pub fn unsupported_version_response(correlation_id: i32) -> Result<Bytes, protocol::EncodeError> {
    unsupported_version_response_of(SUPPORTED, correlation_id)
}

/// [`unsupported_version_response`] advertising `table`.
pub fn unsupported_version_response_of(
    table: &[(ApiKey, i16, i16)],
    correlation_id: i32,
) -> Result<Bytes, protocol::EncodeError> {
    let body = ApiVersionsResponse::default()
        .with_error_code(ApiError::UnsupportedVersion.code())
        .with_api_keys(api_keys_of(table));
    protocol::encode_response(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &ResponseKind::ApiVersions(body),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_client_software_name_is_answered_invalid_request() {
        let req = |name: &str, ver: &str| {
            ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_string(name.to_owned()))
                .with_client_software_version(StrBytes::from_string(ver.to_owned()))
        };
        for (name, ver) in [
            ("librdkafka", "2.6.1"),
            ("apache-kafka-java", "4.1.1"),
            ("a", "1"),
        ] {
            assert!(is_valid(3, &req(name, ver)), "{name} {ver}");
        }
        for (name, ver) in [
            ("", "1"),
            ("kcat", ""),
            ("-x", "1"),
            ("x.", "1"),
            ("a b", "1"),
            ("x", "1_0"),
        ] {
            assert!(!is_valid(3, &req(name, ver)), "{name:?} {ver:?}");
            assert!(is_valid(2, &req(name, ver)), "v2 carries no names");
            let ResponseKind::ApiVersions(r) = handle(3, req(name, ver), true) else {
                panic!()
            };
            assert_eq!(r.error_code, 42);
            assert!(r.api_keys.is_empty());
        }
        let ResponseKind::ApiVersions(r) = handle(3, req("kcat", "1.7.1"), true) else {
            panic!()
        };
        assert_eq!(r.error_code, 0);
        assert!(!r.api_keys.is_empty());
    }

    #[test]
    fn advertised_ranges_are_decodable_and_produce_v0_to_2_are_refused() {
        for (key, min, max) in SUPPORTED {
            let valid = key.valid_versions();
            // Produce 0-2 are advertised below what can be decoded, on purpose (Kafka 4.x).
            if *key != ApiKey::Produce {
                assert!(*min >= valid.min, "{key:?}");
            }
            assert!(*max <= valid.max, "{key:?}");
        }
        assert!(!is_supported(ApiKey::Produce, 2));
        assert!(is_supported(ApiKey::Produce, 3));
        assert!(!is_supported(ApiKey::Fetch, 18));
        assert!(is_supported(ApiKey::Fetch, 4));
    }
}
