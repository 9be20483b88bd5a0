//! Version negotiation: what a peer serves (its ApiVersions response), what the client can send
//! and decode, and the version a request goes out at.
//!
//! As Kafka's clients do, a connection opens with an ApiVersions request at the newest version
//! the client knows. A peer that does not know that version answers with a v0 body carrying
//! UNSUPPORTED_VERSION and (KIP-511) its own ApiVersions range; the client then asks again at the
//! newest version both know, or v0. Each request then goes out at min(our max, their max), which
//! must be at least both minimums.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Message, StrBytes};
use kafka_protocol::ResponseError;

use super::response_layouts::response_layout_of;
use super::wire::decode_body;
use crate::protocol::ApiKey;

/// An inclusive `(min, max)` version range.
pub type VersionRange = (i16, i16);

/// The versions a peer advertised, per API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerVersions {
    ranges: BTreeMap<i16, VersionRange>,
    /// The ApiVersions version the peer answered.
    pub api_versions_version: i16,
}

impl PeerVersions {
    pub fn from_response(response: &ApiVersionsResponse, api_versions_version: i16) -> Self {
        let ranges = response
            .api_keys
            .iter()
            .filter(|api| api.min_version <= api.max_version)
            .map(|api| (api.api_key, (api.min_version, api.max_version)))
            .collect();
        PeerVersions {
            ranges,
            api_versions_version,
        }
    }

    /// The peer's range for `api_key`, if it serves the API.
    pub fn get(&self, api_key: ApiKey) -> Option<VersionRange> {
        self.ranges.get(&(api_key as i16)).copied()
    }

    /// Every advertised (api key, range), by api key.
    pub fn iter(&self) -> impl Iterator<Item = (i16, VersionRange)> + '_ {
        self.ranges.iter().map(|(key, range)| (*key, *range))
    }
}

/// The version to send: min(our max, their max), if that is at least both minimums.
pub fn pick_version(ours: VersionRange, theirs: Option<VersionRange>) -> Option<i16> {
    let (their_min, their_max) = theirs?;
    let version = ours.1.min(their_max);
    (version >= ours.0.max(their_min)).then_some(version)
}

/// The versions of `api_key` the client can send: those of the request type (`request`), for
/// which a response layout exists, narrowed by the caller (`wanted`). `None` if the client has
/// no response layout for the API.
pub fn our_versions(
    api_key: ApiKey,
    request: VersionRange,
    wanted: Option<VersionRange>,
) -> Option<VersionRange> {
    let layout = response_layout_of(api_key)?;
    let (mut min, mut max) = (
        request.0.max(layout.versions.min),
        request.1.min(layout.versions.max),
    );
    if let Some((wanted_min, wanted_max)) = wanted {
        min = min.max(wanted_min);
        max = max.min(wanted_max);
    }
    Some((min, max))
}

/// The newest ApiVersions version the client sends first.
pub const API_VERSIONS_VERSION_MAX: i16 = ApiVersionsRequest::VERSIONS.max;

/// The ApiVersions request at `version`; v3+ names the client software (KIP-511).
pub fn api_versions_request(version: i16) -> ApiVersionsRequest {
    let request = ApiVersionsRequest::default();
    if version < 3 {
        return request;
    }
    request
        .with_client_software_name(StrBytes::from_static_str("kafkaiq"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")))
}

/// What to do after an ApiVersions response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Negotiation {
    Done(PeerVersions),
    /// Ask again at this version.
    Retry(i16),
    Failed(String),
}

/// Reads the body of the answer to an ApiVersions request sent at `sent`. A peer that does not
/// know `sent` answers with a v0 body, so a body that does not decode at `sent` is read as v0.
pub fn after_api_versions(sent: i16, body: Bytes) -> Negotiation {
    let decoded = decode_body::<ApiVersionsResponse>(ApiKey::ApiVersions, sent, body.clone())
        .map(|response| (response, sent))
        .or_else(|first| {
            decode_body::<ApiVersionsResponse>(ApiKey::ApiVersions, 0, body)
                .map(|response| (response, 0))
                .map_err(|_| first)
        });
    let (response, version) = match decoded {
        Ok(decoded) => decoded,
        Err(reason) => return Negotiation::Failed(format!("ApiVersions v{sent}: {reason}")),
    };
    let unsupported = ResponseError::UnsupportedVersion.code();
    if response.error_code == unsupported && sent > 0 {
        let theirs = response
            .api_keys
            .iter()
            .find(|api| api.api_key == ApiKey::ApiVersions as i16)
            .map(|api| api.max_version);
        return Negotiation::Retry(theirs.map_or(0, |max| max.clamp(0, sent - 1)));
    }
    if response.error_code != 0 {
        return Negotiation::Failed(format!(
            "ApiVersions v{sent} answered with error code {}",
            response.error_code
        ));
    }
    Negotiation::Done(PeerVersions::from_response(&response, version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn picks_the_lower_maximum_if_both_minimums_allow_it() {
        // (ours, theirs, picked)
        let cases: &[(VersionRange, Option<VersionRange>, Option<i16>)] = &[
            ((4, 17), Some((4, 17)), Some(17)),
            ((4, 18), Some((4, 12)), Some(12)),
            ((4, 12), Some((0, 17)), Some(12)),
            ((3, 13), Some((0, 13)), Some(13)),
            ((2, 3), Some((0, 1)), None),
            ((0, 1), Some((2, 3)), None),
            ((0, 4), None, None),
            ((5, 4), Some((0, 10)), None),
            ((7, 7), Some((7, 7)), Some(7)),
        ];
        for &(ours, theirs, picked) in cases {
            assert_eq!(pick_version(ours, theirs), picked, "{ours:?} {theirs:?}");
        }
    }

    #[test]
    fn our_versions_need_a_response_layout_and_follow_the_caller() {
        assert_eq!(our_versions(ApiKey::Fetch, (4, 18), None), Some((4, 18)));
        assert_eq!(
            our_versions(ApiKey::Fetch, (4, 18), Some((0, 12))),
            Some((4, 12))
        );
        assert_eq!(our_versions(ApiKey::JoinGroup, (0, 9), None), None);
    }

    fn body(response: &ApiVersionsResponse, version: i16) -> Bytes {
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn advertising(ranges: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
        ApiVersionsResponse::default().with_api_keys(
            ranges
                .iter()
                .map(|&(key, min, max)| {
                    ApiVersion::default()
                        .with_api_key(key as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        )
    }

    #[test]
    fn a_peer_that_knows_the_version_answers_at_it() {
        let response = advertising(&[(ApiKey::ApiVersions, 0, 4), (ApiKey::Fetch, 4, 12)]);
        let Negotiation::Done(peer) = after_api_versions(4, body(&response, 4)) else {
            panic!("not done")
        };
        assert_eq!(peer.get(ApiKey::Fetch), Some((4, 12)));
        assert_eq!(peer.get(ApiKey::Produce), None);
        assert_eq!(peer.api_versions_version, 4);
    }

    #[test]
    fn unsupported_version_retries_at_the_peers_maximum_or_v0() {
        let unsupported = ResponseError::UnsupportedVersion.code();
        let older = advertising(&[(ApiKey::ApiVersions, 0, 2)]).with_error_code(unsupported);
        assert_eq!(
            after_api_versions(4, body(&older, 0)),
            Negotiation::Retry(2)
        );
        let silent = ApiVersionsResponse::default().with_error_code(unsupported);
        assert_eq!(
            after_api_versions(4, body(&silent, 0)),
            Negotiation::Retry(0)
        );
        assert!(matches!(
            after_api_versions(0, body(&silent, 0)),
            Negotiation::Failed(_)
        ));
        let other = ApiVersionsResponse::default().with_error_code(-1);
        assert!(matches!(
            after_api_versions(4, body(&other, 4)),
            Negotiation::Failed(_)
        ));
    }

    #[test]
    fn garbage_fails_the_negotiation() {
        assert!(matches!(
            after_api_versions(4, Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff])),
            Negotiation::Failed(_)
        ));
    }
}
