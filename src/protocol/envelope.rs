//! The parts of Kafka's Envelope (KIP-590) that are not a message of their own: a broker
//! forwarding a client's request to the active controller wraps it whole (its header and body)
//! in an EnvelopeRequest, with the client's principal and address, and the controller handles
//! it as that client's and wraps its answer (header and body) in the EnvelopeResponse.
//!
//! - The principal is Kafka's `DefaultPrincipalData` (`DefaultKafkaPrincipalBuilder#serialize`):
//!   a version (int16, 0), then the principal type and name as compact strings, whether it was
//!   authenticated by a delegation token (bool), and an empty tag section.
//! - The client's address is its IP address's bytes (`InetAddress#getAddress`: 4 or 16).

use std::net::IpAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// The `DefaultPrincipalData` version written.
const PRINCIPAL_DATA_VERSION: i16 = 0;

/// The longest principal type or name read back (a principal is a short name).
const PRINCIPAL_PART_MAX: usize = 32 * 1024;

/// `principal` (`<type>:<name>`, as KafkaIQ keeps it) as Kafka serializes a `KafkaPrincipal`.
pub fn encode_principal(principal: &str) -> Bytes {
    let (kind, name) = principal.split_once(':').unwrap_or(("User", principal));
    let mut buf = BytesMut::new();
    buf.put_i16(PRINCIPAL_DATA_VERSION);
    for part in [kind, name] {
        put_unsigned_varint(&mut buf, part.len() as u32 + 1);
        buf.put_slice(part.as_bytes());
    }
    buf.put_u8(0); // not token-authenticated
    put_unsigned_varint(&mut buf, 0); // no tagged fields
    buf.freeze()
}

/// The principal (`<type>:<name>`) in Kafka's serialized form; `None` if it is not one.
pub fn decode_principal(bytes: &[u8]) -> Option<String> {
    let mut buf = bytes;
    if buf.remaining() < 2 || buf.get_i16() != PRINCIPAL_DATA_VERSION {
        return None;
    }
    let mut part = || -> Option<String> {
        let len = get_unsigned_varint(&mut buf)?.checked_sub(1)? as usize;
        if len > PRINCIPAL_PART_MAX || buf.remaining() < len {
            return None;
        }
        let text = std::str::from_utf8(&buf[..len]).ok()?.to_owned();
        buf.advance(len);
        Some(text)
    };
    let kind = part()?;
    let name = part()?;
    if kind.is_empty() || buf.remaining() < 1 {
        return None;
    }
    buf.advance(1); // token-authenticated: delegation tokens are not issued here
                    // Tagged fields: none are defined; skip any.
    let tags = get_unsigned_varint(&mut buf)?;
    for _ in 0..tags {
        get_unsigned_varint(&mut buf)?;
        let size = get_unsigned_varint(&mut buf)? as usize;
        if buf.remaining() < size {
            return None;
        }
        buf.advance(size);
    }
    buf.is_empty().then(|| format!("{kind}:{name}"))
}

/// The client's address as the envelope carries it.
pub fn encode_address(address: IpAddr) -> Bytes {
    match address {
        IpAddr::V4(a) => Bytes::copy_from_slice(&a.octets()),
        IpAddr::V6(a) => Bytes::copy_from_slice(&a.octets()),
    }
}

/// The client's address from the envelope; `None` unless 4 or 16 bytes.
pub fn decode_address(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

/// A request as an envelope carries it: its header and body, without a size prefix.
pub fn request_data(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
    body: &RequestKind,
) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id.map(|c| StrBytes::from_string(c.to_owned())))
        .encode(&mut buf, api_key.request_header_version(version))?;
    body.encode(&mut buf, version)?;
    Ok(buf.freeze())
}

fn put_unsigned_varint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn get_unsigned_varint(buf: &mut &[u8]) -> Option<u32> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        if buf.is_empty() {
            return None;
        }
        let byte = buf.get_u8();
        value |= u32::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::ResponseKind;
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn principals_round_trip_in_kafkas_form() {
        let bytes = encode_principal("User:alice");
        // Version 0, "User" (length 4 + 1), "alice" (5 + 1), not token-authenticated, no tags:
        // what DefaultKafkaPrincipalBuilder#serialize writes for User:alice.
        assert_eq!(
            &bytes[..],
            &[0, 0, 5, b'U', b's', b'e', b'r', 6, b'a', b'l', b'i', b'c', b'e', 0, 0]
        );
        assert_eq!(decode_principal(&bytes).as_deref(), Some("User:alice"));
        let odd = "User:CN=broker,O=Kafka:IQ";
        assert_eq!(
            decode_principal(&encode_principal(odd)).as_deref(),
            Some(odd)
        );
        for bad in [
            &b""[..],
            &[0, 1, 1, 1, 0, 0],
            &[0, 0, 5, b'U'],
            &[0, 0, 1, 1, 0, 0],
        ] {
            assert_eq!(decode_principal(bad), None, "{bad:?}");
        }
        let mut trailing = bytes.to_vec();
        trailing.push(9);
        assert_eq!(decode_principal(&trailing), None);
    }

    #[test]
    fn addresses_round_trip() {
        for a in ["127.0.0.1", "::1", "2001:db8::7"] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(decode_address(&encode_address(ip)), Some(ip));
        }
        assert_eq!(decode_address(&[1, 2, 3]), None);
    }

    #[test]
    fn an_enveloped_request_decodes_as_the_request() {
        use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
        let body = RequestKind::CreateTopics(CreateTopicsRequest::default().with_timeout_ms(5));
        let data = request_data(ApiKey::CreateTopics, 7, 42, Some("admin-1"), &body).unwrap();
        let request = super::super::decode_request(data).unwrap();
        assert_eq!(request.api_key, ApiKey::CreateTopics);
        assert_eq!(request.correlation_id(), 42);
        assert_eq!(request.header.client_id.as_deref(), Some("admin-1"));
        assert_eq!(request.body, body);
        let frame = super::super::encode_response(
            ApiKey::CreateTopics,
            7,
            42,
            &ResponseKind::CreateTopics(CreateTopicsResponse::default().with_throttle_time_ms(3)),
        )
        .unwrap();
        // What the envelope's response carries: the header and body, no size prefix.
        let mut data = frame.slice(4..);
        let header = kafka_protocol::messages::ResponseHeader::decode(
            &mut data,
            ApiKey::CreateTopics.response_header_version(7),
        )
        .unwrap();
        assert_eq!(header.correlation_id, 42);
        let r = CreateTopicsResponse::decode(&mut data, 7).unwrap();
        assert_eq!(r.throttle_time_ms, 3);
    }
}
