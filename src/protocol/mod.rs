//! # Kafka wire codec
//!
//! The only place that turns request bytes into typed Kafka messages and responses back into
//! bytes. Callers are the connection layer (one frame in, one frame out) and tests. This module
//! does no I/O, keeps no state and knows nothing about topics or partitions.
//!
//! Typed messages come from the `kafka-protocol` crate. That crate sizes allocations from wire
//! lengths before checking the bytes exist, so every frame is first walked by [`guard`], a
//! schema-driven validator that rejects any length prefix larger than the bytes that remain. Only
//! then is the crate allowed to decode.
//!
//! ## Interface
//! - [`decode_request`]: one request frame *without* its 4-byte size prefix → [`Request`].
//! - [`encode_response`]: a [`ResponseKind`] → a frame *with* its 4-byte size prefix. ApiVersions
//!   always gets a v0 response header, as Kafka does, even for flexible v3+.
//!   [`frame::encode_response_frame`]: the same as chunks, a Fetch answer's large record sets
//!   referenced instead of copied.
//! - [`peek_header`]: api key, api version and correlation id of a frame that failed to decode, so
//!   the server can answer a too-new ApiVersions with UNSUPPORTED_VERSION (KIP-511) or close the
//!   connection.
//! - [`SUPPORTED_API_KEYS`]: the APIs [`decode_request`] accepts; any other key is refused with
//!   [`DecodeError::UnknownApiKey`]. [`decodable_versions`]: the versions it accepts per API.
//!
//! ## Guarantees
//! No frame makes [`decode_request`] panic, and none makes it allocate more than a small multiple
//! of the frame's own size: an array's reserved capacity is at most the remaining bytes divided
//! by its element's smallest wire size, and strings and record sets are zero-copy slices of the
//! frame. `tests/hostile_frames.rs` measures this with a counting allocator (worst seen: ~29
//! bytes allocated per frame byte, asserted below 64) and `fuzz/` fuzzes it. The layouts the
//! guard walks are in [`layouts`].

pub mod envelope;
pub mod frame;
pub mod guard;
pub mod layouts;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};

pub use kafka_protocol::messages::{
    ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
pub use kafka_protocol::protocol::StrBytes;

/// The APIs this broker decodes. A request for any other API key is refused before
/// `kafka-protocol` sees its body, because [`guard`] only knows these layouts.
pub const SUPPORTED_API_KEYS: &[ApiKey] = &[
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::Metadata,
    ApiKey::OffsetCommit,
    ApiKey::OffsetFetch,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SyncGroup,
    ApiKey::DescribeGroups,
    ApiKey::ListGroups,
    ApiKey::SaslHandshake,
    ApiKey::ApiVersions,
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::OffsetForLeaderEpoch,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::WriteTxnMarkers,
    ApiKey::TxnOffsetCommit,
    ApiKey::DescribeAcls,
    ApiKey::CreateAcls,
    ApiKey::DeleteAcls,
    ApiKey::DescribeConfigs,
    ApiKey::AlterConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::CreatePartitions,
    ApiKey::DeleteGroups,
    ApiKey::ElectLeaders,
    ApiKey::AlterPartitionReassignments,
    ApiKey::ListPartitionReassignments,
    ApiKey::OffsetDelete,
    ApiKey::DescribeCluster,
    ApiKey::DescribeProducers,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::AlterPartition,
    ApiKey::AlterReplicaLogDirs,
    ApiKey::DescribeLogDirs,
    ApiKey::DescribeTopicPartitions,
    ApiKey::ListConfigResources,
    ApiKey::BrokerRegistration,
    ApiKey::BrokerHeartbeat,
    ApiKey::AllocateProducerIds,
    ApiKey::DescribeQuorum,
    ApiKey::SaslAuthenticate,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::ConsumerGroupDescribe,
    ApiKey::DescribeUserScramCredentials,
    ApiKey::DescribeClientQuotas,
    ApiKey::AlterUserScramCredentials,
    ApiKey::Envelope,
];

/// Bytes of the fixed part of every request header: api key, api version, correlation id.
const HEADER_FIXED_BYTES: usize = 8;

/// Bytes of the size prefix in front of every frame.
const SIZE_PREFIX_BYTES: usize = 4;

/// One decoded request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub api_version: i16,
    pub body: RequestKind,
}

impl Request {
    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Why a frame could not be decoded. Every variant means the frame is dropped; which answer (if
/// any) the client gets is the server's decision.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {len} bytes is too short for a request header")]
    Truncated { len: usize },
    #[error("unknown or unsupported api key {0}")]
    UnknownApiKey(i16),
    #[error("{api_key:?} v{version} is not supported (correlation id {correlation_id})")]
    UnsupportedVersion {
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    /// The frame failed structural validation before decoding: a length prefix larger than the
    /// bytes that remain, a negative length, or a truncated field.
    #[error("{api_key:?} v{version} request rejected: {reason}")]
    Hostile {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    /// The frame passed validation but `kafka-protocol` could not decode it (bad UTF-8, a null
    /// where one is not allowed, a tag invalid for the version, ...).
    #[error("{api_key:?} v{version} request malformed: {reason}")]
    Malformed {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
}

/// Why a response could not be encoded. This is a programming error in a handler (a field set
/// outside its version range, a body that does not match the api key), never a client's fault.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("response body does not match {api_key:?}")]
    WrongBody { api_key: ApiKey },
    #[error("cannot encode {api_key:?} v{version} response: {reason}")]
    Encode {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("response of {len} bytes does not fit a frame")]
    TooLarge { len: usize },
}

/// The request versions of `api_key` that [`decode_request`] accepts: those `kafka-protocol`
/// decodes. `None` for an API this broker does not decode. Note that `ApiKey::valid_versions`
/// can be wider (it follows the response schema: OffsetCommit/OffsetFetch v10, InitProducerId
/// v6), so advertise from this, not from that.
pub fn decodable_versions(api_key: ApiKey) -> Option<std::ops::RangeInclusive<i16>> {
    layouts::layout_of(api_key).map(|layout| layout.versions.min..=layout.versions.max)
}

/// Api key, api version and correlation id from the first 8 bytes of a frame (without its size
/// prefix), or `None` if the frame is shorter than that.
pub fn peek_header(frame: &[u8]) -> Option<(i16, i16, i32)> {
    let fixed: &[u8; HEADER_FIXED_BYTES] = frame.get(..HEADER_FIXED_BYTES)?.try_into().ok()?;
    let api_key = i16::from_be_bytes([fixed[0], fixed[1]]);
    let api_version = i16::from_be_bytes([fixed[2], fixed[3]]);
    let correlation_id = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    Some((api_key, api_version, correlation_id))
}

/// Decodes one request frame (without its size prefix). Decoding is zero-copy: strings and record
/// batches in the result share `frame`'s buffer.
pub fn decode_request(frame: Bytes) -> Result<Request, DecodeError> {
    let (raw_key, api_version, correlation_id) =
        peek_header(&frame).ok_or(DecodeError::Truncated { len: frame.len() })?;
    let api_key = ApiKey::try_from(raw_key)
        .ok()
        .filter(|key| SUPPORTED_API_KEYS.contains(key))
        .ok_or(DecodeError::UnknownApiKey(raw_key))?;
    if !decodable_versions(api_key).is_some_and(|versions| versions.contains(&api_version)) {
        return Err(DecodeError::UnsupportedVersion {
            api_key,
            version: api_version,
            correlation_id,
        });
    }
    let header_version = api_key.request_header_version(api_version);

    guard::check_request(&frame, api_key, api_version, header_version).map_err(|err| {
        DecodeError::Hostile {
            api_key,
            version: api_version,
            reason: err.to_string(),
        }
    })?;

    let malformed = |err: anyhow::Error| DecodeError::Malformed {
        api_key,
        version: api_version,
        reason: format!("{err:#}"),
    };
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, header_version).map_err(malformed)?;
    let body = RequestKind::decode(api_key, &mut buf, api_version).map_err(malformed)?;
    Ok(Request {
        header,
        api_key,
        api_version,
        body,
    })
}

/// Encodes a response frame, size prefix included.
pub fn encode_response(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, EncodeError> {
    if response_api_key(body) != Some(api_key) {
        return Err(EncodeError::WrongBody { api_key });
    }
    let header_version = header_version(api_key, api_version);
    let encode_err = |err: anyhow::Error| EncodeError::Encode {
        api_key,
        version: api_version,
        reason: format!("{err:#}"),
    };
    let mut buf = BytesMut::with_capacity(
        SIZE_PREFIX_BYTES + RESPONSE_HEADER_BYTES_MAX + body_size(body, api_version),
    );
    buf.put_i32(0); // size, patched below
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, header_version)
        .map_err(encode_err)?;
    body.encode(&mut buf, api_version).map_err(encode_err)?;
    let len = buf.len() - SIZE_PREFIX_BYTES;
    let size = i32::try_from(len).map_err(|_| EncodeError::TooLarge { len })?;
    buf[..SIZE_PREFIX_BYTES].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// The response header version of an answer at `api_version`.
fn header_version(api_key: ApiKey, api_version: i16) -> i16 {
    // ApiVersionsResponse.json: "tagged fields are only supported in the body but not in the
    // header", so the header stays v0 for every version; clients parse it that way.
    if api_key == ApiKey::ApiVersions {
        0
    } else {
        api_key.response_header_version(api_version)
    }
}

/// The most a response header takes: a correlation id and an empty tagged-field section.
const RESPONSE_HEADER_BYTES_MAX: usize = 5;

/// The encoded size of a Fetch answer's body, whose record sets make it large (up to
/// `fetch.max.bytes`): its buffer is then allocated once at its final size instead of being
/// grown, and copied, by doubling. Other answers are small; 0 lets the buffer grow as usual.
fn body_size(body: &ResponseKind, version: i16) -> usize {
    match body {
        ResponseKind::Fetch(fetch) => fetch.compute_size(version).unwrap_or(0),
        _ => 0,
    }
}

/// The api key a response body belongs to, for the APIs this broker serves.
fn response_api_key(body: &ResponseKind) -> Option<ApiKey> {
    Some(match body {
        ResponseKind::Produce(_) => ApiKey::Produce,
        ResponseKind::Fetch(_) => ApiKey::Fetch,
        ResponseKind::ListOffsets(_) => ApiKey::ListOffsets,
        ResponseKind::Metadata(_) => ApiKey::Metadata,
        ResponseKind::OffsetCommit(_) => ApiKey::OffsetCommit,
        ResponseKind::OffsetFetch(_) => ApiKey::OffsetFetch,
        ResponseKind::FindCoordinator(_) => ApiKey::FindCoordinator,
        ResponseKind::JoinGroup(_) => ApiKey::JoinGroup,
        ResponseKind::Heartbeat(_) => ApiKey::Heartbeat,
        ResponseKind::LeaveGroup(_) => ApiKey::LeaveGroup,
        ResponseKind::SyncGroup(_) => ApiKey::SyncGroup,
        ResponseKind::DescribeGroups(_) => ApiKey::DescribeGroups,
        ResponseKind::ListGroups(_) => ApiKey::ListGroups,
        ResponseKind::SaslHandshake(_) => ApiKey::SaslHandshake,
        ResponseKind::SaslAuthenticate(_) => ApiKey::SaslAuthenticate,
        ResponseKind::ApiVersions(_) => ApiKey::ApiVersions,
        ResponseKind::CreateTopics(_) => ApiKey::CreateTopics,
        ResponseKind::DeleteTopics(_) => ApiKey::DeleteTopics,
        ResponseKind::DeleteRecords(_) => ApiKey::DeleteRecords,
        ResponseKind::InitProducerId(_) => ApiKey::InitProducerId,
        ResponseKind::OffsetForLeaderEpoch(_) => ApiKey::OffsetForLeaderEpoch,
        ResponseKind::DescribeAcls(_) => ApiKey::DescribeAcls,
        ResponseKind::CreateAcls(_) => ApiKey::CreateAcls,
        ResponseKind::DeleteAcls(_) => ApiKey::DeleteAcls,
        ResponseKind::DescribeUserScramCredentials(_) => ApiKey::DescribeUserScramCredentials,
        ResponseKind::DescribeClientQuotas(_) => ApiKey::DescribeClientQuotas,
        ResponseKind::AlterUserScramCredentials(_) => ApiKey::AlterUserScramCredentials,
        ResponseKind::DescribeConfigs(_) => ApiKey::DescribeConfigs,
        ResponseKind::AlterConfigs(_) => ApiKey::AlterConfigs,
        ResponseKind::IncrementalAlterConfigs(_) => ApiKey::IncrementalAlterConfigs,
        ResponseKind::CreatePartitions(_) => ApiKey::CreatePartitions,
        ResponseKind::DeleteGroups(_) => ApiKey::DeleteGroups,
        ResponseKind::ElectLeaders(_) => ApiKey::ElectLeaders,
        ResponseKind::AlterPartitionReassignments(_) => ApiKey::AlterPartitionReassignments,
        ResponseKind::ListPartitionReassignments(_) => ApiKey::ListPartitionReassignments,
        ResponseKind::OffsetDelete(_) => ApiKey::OffsetDelete,
        ResponseKind::DescribeCluster(_) => ApiKey::DescribeCluster,
        ResponseKind::DescribeProducers(_) => ApiKey::DescribeProducers,
        ResponseKind::AddPartitionsToTxn(_) => ApiKey::AddPartitionsToTxn,
        ResponseKind::AddOffsetsToTxn(_) => ApiKey::AddOffsetsToTxn,
        ResponseKind::EndTxn(_) => ApiKey::EndTxn,
        ResponseKind::WriteTxnMarkers(_) => ApiKey::WriteTxnMarkers,
        ResponseKind::TxnOffsetCommit(_) => ApiKey::TxnOffsetCommit,
        ResponseKind::DescribeTransactions(_) => ApiKey::DescribeTransactions,
        ResponseKind::ListTransactions(_) => ApiKey::ListTransactions,
        ResponseKind::AlterPartition(_) => ApiKey::AlterPartition,
        ResponseKind::AlterReplicaLogDirs(_) => ApiKey::AlterReplicaLogDirs,
        ResponseKind::DescribeLogDirs(_) => ApiKey::DescribeLogDirs,
        ResponseKind::DescribeTopicPartitions(_) => ApiKey::DescribeTopicPartitions,
        ResponseKind::ListConfigResources(_) => ApiKey::ListConfigResources,
        ResponseKind::BrokerRegistration(_) => ApiKey::BrokerRegistration,
        ResponseKind::BrokerHeartbeat(_) => ApiKey::BrokerHeartbeat,
        ResponseKind::AllocateProducerIds(_) => ApiKey::AllocateProducerIds,
        ResponseKind::DescribeQuorum(_) => ApiKey::DescribeQuorum,
        ResponseKind::ConsumerGroupHeartbeat(_) => ApiKey::ConsumerGroupHeartbeat,
        ResponseKind::ConsumerGroupDescribe(_) => ApiKey::ConsumerGroupDescribe,
        ResponseKind::Envelope(_) => ApiKey::Envelope,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
