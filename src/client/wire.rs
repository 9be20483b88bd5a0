//! Frames on a client connection: requests out, responses in, responses guarded before
//! `kafka-protocol` decodes them.
//!
//! A response frame is read in two steps so that its bound is known before its body is: the size
//! prefix first (checked against the bound of the request it answers), then the body, whose
//! buffer grows only as bytes arrive. The header version depends on the api key and version,
//! except that ApiVersions responses always carry a v0 header.

use std::any::Any;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::response_layouts::{response_layout_of, RESPONSE_HEADER};
use crate::protocol::guard::check_body;
use crate::protocol::ApiKey;

/// Bytes of the size prefix in front of every frame.
const SIZE_PREFIX_BYTES: usize = 4;

/// Bytes a body buffer starts with; it grows as bytes arrive, so a peer that claims a large
/// frame and sends little costs little.
const BODY_BUFFER_BYTES_INITIAL: usize = 64 * 1024;

/// A typed response body, boxed so that one connection carries responses of every type.
pub type AnyBody = Box<dyn Any + Send>;

/// Decodes a guarded response body at a version.
pub type DecodeFn = Box<dyn FnOnce(Bytes, i16) -> Result<AnyBody, String> + Send>;

/// Encodes a request body at a version into a buffer; returns whether the server answers it
/// (Produce with acks=0 is not answered).
pub type EncodeFn = Box<dyn FnOnce(i16, &mut BytesMut) -> anyhow::Result<bool> + Send>;

/// The response header version of `api_key` at `version`.
pub fn response_header_version(api_key: ApiKey, version: i16) -> i16 {
    // ApiVersionsResponse.json: "tagged fields are only supported in the body but not in the
    // header"; Kafka writes a v0 header for every ApiVersions version.
    if api_key == ApiKey::ApiVersions {
        0
    } else {
        api_key.response_header_version(version)
    }
}

/// A request frame, size prefix included. Returns the frame and whether it will be answered.
pub fn encode_request(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
    encode_body: EncodeFn,
) -> anyhow::Result<(Bytes, bool)> {
    let mut buf = BytesMut::new();
    buf.put_i32(0); // size, patched below
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    kafka_protocol::protocol::Encodable::encode(
        &header,
        &mut buf,
        api_key.request_header_version(version),
    )?;
    let answered = encode_body(version, &mut buf)?;
    let len = buf.len() - SIZE_PREFIX_BYTES;
    let size = i32::try_from(len).map_err(|_| anyhow::anyhow!("{len} bytes do not fit a frame"))?;
    buf[..SIZE_PREFIX_BYTES].copy_from_slice(&size.to_be_bytes());
    Ok((buf.freeze(), answered))
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed inside a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads a frame's size prefix. `Ok(None)` on a clean end of stream between frames.
pub async fn read_size<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<i32>, FrameError> {
    let mut size = [0u8; SIZE_PREFIX_BYTES];
    let mut filled = 0;
    while filled < SIZE_PREFIX_BYTES {
        let n = reader.read(&mut size[filled..]).await?;
        if n == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        filled += n;
    }
    Ok(Some(i32::from_be_bytes(size)))
}

/// Reads a frame body of `size` bytes, which the caller has checked against its bound.
pub async fn read_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> Result<Bytes, FrameError> {
    let mut body = Vec::with_capacity(size.min(BODY_BUFFER_BYTES_INITIAL));
    let read = reader.take(size as u64).read_to_end(&mut body).await?;
    if read < size {
        return Err(FrameError::Truncated);
    }
    Ok(Bytes::from(body))
}

/// Splits a response frame (no size prefix) into its correlation id and its body, after the
/// guard has walked the header.
pub fn split_response(frame: Bytes, api_key: ApiKey, version: i16) -> Result<(i32, Bytes), String> {
    let header_version = response_header_version(api_key, version);
    let header_bytes = check_body(&frame, &RESPONSE_HEADER, header_version)
        .map_err(|err| format!("response header: {err}"))?;
    let mut header = frame.slice(..header_bytes);
    let header = ResponseHeader::decode(&mut header, header_version)
        .map_err(|err| format!("response header: {err:#}"))?;
    Ok((header.correlation_id, frame.slice(header_bytes..)))
}

/// Walks a response body along its layout; an error means the crate must not decode it.
pub fn check_response_body(api_key: ApiKey, version: i16, body: &[u8]) -> Result<(), String> {
    let layout = response_layout_of(api_key).ok_or_else(|| format!("no layout for {api_key:?}"))?;
    if !layout.versions.contains(version) {
        return Err(format!("{api_key:?} v{version} has no response layout"));
    }
    check_body(body, layout, version)
        .map(|_| ())
        .map_err(|err| err.to_string())
}

/// Guards and decodes a response body as `T`. Bytes after the body are ignored, as Kafka's
/// clients do. Decoding from `Bytes` is zero-copy for strings and record sets.
pub fn decode_body<T: Decodable>(api_key: ApiKey, version: i16, body: Bytes) -> Result<T, String> {
    check_response_body(api_key, version, &body)?;
    let mut buf = body;
    T::decode(&mut buf, version).map_err(|err| format!("{err:#}"))
}

/// A [`DecodeFn`] for responses of type `T`.
pub fn decoder_of<T: Decodable + Send + 'static>(api_key: ApiKey) -> DecodeFn {
    Box::new(move |body, version| {
        decode_body::<T>(api_key, version, body).map(|body| Box::new(body) as AnyBody)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn requests_carry_size_header_and_body() {
        let client_id = StrBytes::from_static_str("c");
        let (frame, answered) = encode_request(
            ApiKey::Metadata,
            12,
            77,
            &client_id,
            Box::new(|version, buf| {
                MetadataRequest::default()
                    .encode(buf, version)
                    .map(|_| true)
            }),
        )
        .unwrap();
        assert!(answered);
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        let request = crate::protocol::decode_request(frame.slice(4..)).unwrap();
        assert_eq!(request.api_key, ApiKey::Metadata);
        assert_eq!(request.api_version, 12);
        assert_eq!(request.correlation_id(), 77);
        assert_eq!(request.header.client_id.as_deref(), Some("c"));
    }

    fn response_frame(
        correlation_id: i32,
        header_version: i16,
        body: &MetadataResponse,
        version: i16,
    ) -> Bytes {
        let mut buf = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut buf, header_version)
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn responses_split_at_the_header_version_of_their_api() {
        let body = MetadataResponse::default().with_controller_id(3.into());
        for (version, header_version) in [(8, 0), (12, 1)] {
            let frame = response_frame(9, header_version, &body, version);
            let (correlation_id, rest) = split_response(frame, ApiKey::Metadata, version).unwrap();
            assert_eq!(correlation_id, 9);
            let decoded: MetadataResponse = decode_body(ApiKey::Metadata, version, rest).unwrap();
            assert_eq!(decoded, body);
        }
    }

    #[test]
    fn hostile_counts_are_refused_before_decoding() {
        // Metadata v8: throttle, then a broker count of 2^31 - 1 with nothing behind it.
        let body = Bytes::from_static(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]);
        let err = decode_body::<MetadataResponse>(ApiKey::Metadata, 8, body).unwrap_err();
        assert!(err.contains("exceeds"), "{err}");
        // A header v1 tag section claiming a huge tag.
        let frame = Bytes::from_static(&[0, 0, 0, 1, 1, 5, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(split_response(frame, ApiKey::Metadata, 12).is_err());
        assert!(split_response(Bytes::from_static(&[0, 0]), ApiKey::Metadata, 1).is_err());
    }

    #[tokio::test]
    async fn a_body_is_read_as_it_arrives_and_a_short_one_is_truncated() {
        let mut input: &[u8] = &[0, 0, 0, 3, 1, 2, 3, 0, 0];
        assert_eq!(read_size(&mut input).await.unwrap(), Some(3));
        assert_eq!(&read_body(&mut input, 3).await.unwrap()[..], &[1, 2, 3]);
        assert!(matches!(
            read_size(&mut input).await,
            Err(FrameError::Truncated)
        ));
        let mut input: &[u8] = &[];
        assert_eq!(read_size(&mut input).await.unwrap(), None);
        let mut input: &[u8] = &[1, 2];
        assert!(matches!(
            read_body(&mut input, 3).await,
            Err(FrameError::Truncated)
        ));
    }
}
