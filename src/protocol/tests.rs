//! Unit tests of the codec's interface: decode, encode, peek.

use super::*;
use kafka_protocol::messages::{
    metadata_request::MetadataRequestTopic, ApiVersionsResponse, MetadataRequest, TopicName,
};

fn request_frame(api_key: ApiKey, version: i16, correlation_id: i32, body: &RequestKind) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("test-client")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api_key.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.freeze()
}

#[test]
fn decodes_metadata_request() {
    let body = RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str("t")))),
    ])));
    for version in [0, 4, 9, 12] {
        let frame = request_frame(ApiKey::Metadata, version, 7, &body);
        let request = decode_request(frame).unwrap();
        assert_eq!(request.api_key, ApiKey::Metadata);
        assert_eq!(request.api_version, version);
        assert_eq!(request.correlation_id(), 7);
        assert_eq!(request.header.client_id.as_deref(), Some("test-client"));
        assert_eq!(request.body, body);
    }
}

#[test]
fn refuses_unknown_and_unsupported() {
    let frame = Bytes::from_static(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1]);
    assert!(matches!(
        decode_request(frame),
        Err(DecodeError::UnknownApiKey(0x7f00))
    ));
    // FetchSnapshot (59) is a valid Kafka API but not one this broker decodes.
    let frame = Bytes::from_static(&[0, 59, 0, 0, 0, 0, 0, 1]);
    assert!(matches!(
        decode_request(frame),
        Err(DecodeError::UnknownApiKey(59))
    ));
    let frame = Bytes::from_static(&[0, 18, 0, 99, 0, 0, 0, 5, 0, 0]);
    assert!(matches!(
        decode_request(frame),
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            version: 99,
            correlation_id: 5
        })
    ));
    assert!(matches!(
        decode_request(Bytes::from_static(&[0, 3, 0])),
        Err(DecodeError::Truncated { len: 3 })
    ));
}

#[test]
fn peeks_header_fields() {
    assert_eq!(
        peek_header(&[0, 18, 0, 4, 0, 0, 1, 2, 9]),
        Some((18, 4, 258))
    );
    assert_eq!(peek_header(&[0, 18, 0, 4, 0, 0, 1]), None);
}

#[test]
fn api_versions_response_uses_v0_header_at_every_version() {
    let body = ResponseKind::ApiVersions(ApiVersionsResponse::default());
    for version in 0..=4 {
        let frame = encode_response(ApiKey::ApiVersions, version, 42, &body).unwrap();
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        assert_eq!(&frame[4..8], &42i32.to_be_bytes());
        // error_code 0 follows the correlation id directly: no tagged-field byte in the header.
        assert_eq!(&frame[8..10], &[0, 0]);
    }
}

#[test]
fn flexible_response_header_has_tag_buffer() {
    let body = ResponseKind::Metadata(Default::default());
    let frame = encode_response(ApiKey::Metadata, 12, 42, &body).unwrap();
    // v12 is flexible: correlation id, then an empty tagged-field section, then throttle_time_ms.
    assert_eq!(&frame[4..9], &[0, 0, 0, 42, 0]);
    let frame = encode_response(ApiKey::Metadata, 8, 42, &body).unwrap();
    assert_eq!(&frame[4..12], &[0, 0, 0, 42, 0, 0, 0, 0]);
}

#[test]
fn encode_refuses_mismatched_body() {
    let body = ResponseKind::ApiVersions(ApiVersionsResponse::default());
    assert!(matches!(
        encode_response(ApiKey::Metadata, 1, 1, &body),
        Err(EncodeError::WrongBody { .. })
    ));
}

#[test]
fn versions_follow_the_request_schema_not_the_response_schema() {
    // ApiKey::valid_versions says 2..=10 (the response schema); the request decodes 2..=9.
    assert_eq!(decodable_versions(ApiKey::OffsetCommit), Some(2..=9));
    assert_eq!(decodable_versions(ApiKey::Produce), Some(3..=13));
    assert_eq!(decodable_versions(ApiKey::FetchSnapshot), None);
    let frame = Bytes::from_static(&[0, 8, 0, 10, 0, 0, 0, 3, 0xff, 0xff, 0]);
    assert!(matches!(
        decode_request(frame),
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::OffsetCommit,
            version: 10,
            correlation_id: 3
        })
    ));
}
