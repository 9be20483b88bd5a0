//! Raft messages in Kafka frames, on the controller listener.
//!
//! A Raft message travels as a Kafka request frame: size prefix, a v1 request header (api key
//! [`RAFT_MESSAGE_API_KEY`], version 0, correlation id, client id) and, as the body, the
//! protobuf encoding of the library's `eraftpb::Message`. The key is outside the range Apache
//! Kafka uses, so no Kafka client or broker sends it by accident; the controller listener
//! checks for it before handing a frame to the Kafka decoder. Such a request has no response
//! (like a Produce with acks=0): a voter's answers travel on its own connection to the sender.
//! The Raft library tolerates messages lost, repeated or reordered. A message larger than
//! [`RAFT_CHUNK_BYTES`] travels in chunks instead ([`super::chunks`]).

use bytes::{BufMut, Bytes, BytesMut};
use protobuf::Message as _;
use raft::eraftpb::Message;

use super::chunks::RAFT_CHUNK_BYTES;

/// KafkaIQ's private API key for Raft messages between controllers.
pub const RAFT_MESSAGE_API_KEY: i16 = 32_000;
pub const RAFT_MESSAGE_VERSION: i16 = 0;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("raft frame shorter than its header")]
    Short,
    #[error("raft frame with version {0}; only 0 is known")]
    Version(i16),
    #[error("raft message does not decode: {0}")]
    Decode(String),
}

/// Whether a request frame (without its size prefix) is a Raft message.
pub fn is_raft_frame(frame: &[u8]) -> bool {
    frame.len() >= 2 && i16::from_be_bytes([frame[0], frame[1]]) == RAFT_MESSAGE_API_KEY
}

/// What carries one Raft message: one Raft frame, or the message's encoding to go as chunk
/// frames ([`super::chunks`]) when it is larger than one chunk.
pub enum Frames {
    Whole(Bytes),
    Chunked(Vec<u8>),
}

/// The frames that carry `message` (built with [`encode_request`] or, chunked, by
/// [`chunks::encode_chunks`] as they are written).
pub fn encode_frames(correlation_id: i32, client_id: &str, message: &Message) -> Frames {
    let body = message
        .write_to_bytes()
        .expect("a raft message always encodes");
    if body.len() > RAFT_CHUNK_BYTES {
        return Frames::Chunked(body);
    }
    Frames::Whole(frame_of(correlation_id, client_id, &body))
}

/// A Raft request frame, size prefix included.
pub fn encode_request(correlation_id: i32, client_id: &str, message: &Message) -> Bytes {
    let body = message
        .write_to_bytes()
        .expect("a raft message always encodes");
    frame_of(correlation_id, client_id, &body)
}

fn frame_of(correlation_id: i32, client_id: &str, body: &[u8]) -> Bytes {
    let client = client_id.as_bytes();
    let len = 2 + 2 + 4 + 2 + client.len() + body.len();
    let mut out = BytesMut::with_capacity(4 + len);
    out.put_i32(len as i32);
    out.put_i16(RAFT_MESSAGE_API_KEY);
    out.put_i16(RAFT_MESSAGE_VERSION);
    out.put_i32(correlation_id);
    out.put_i16(client.len() as i16);
    out.put_slice(client);
    out.put_slice(body);
    out.freeze()
}

/// The correlation id and the message of a Raft request frame (without its size prefix).
pub fn decode_request(frame: &[u8]) -> Result<(i32, Message), WireError> {
    if frame.len() < 10 {
        return Err(WireError::Short);
    }
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    if version != RAFT_MESSAGE_VERSION {
        return Err(WireError::Version(version));
    }
    let correlation_id = i32::from_be_bytes(frame[4..8].try_into().expect("4 bytes"));
    let client_len = i16::from_be_bytes([frame[8], frame[9]]);
    let body_start = 10 + client_len.max(0) as usize;
    if frame.len() < body_start {
        return Err(WireError::Short);
    }
    Ok((correlation_id, decode_message(&frame[body_start..])?))
}

/// A Raft message from its encoding (a Raft frame's body, or a message put back together from
/// chunks).
pub fn decode_message(body: &[u8]) -> Result<Message, WireError> {
    // protobuf-2's parser checks every length against the bytes present.
    Message::parse_from_bytes(body).map_err(|e| WireError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_and_garbage_is_refused() {
        let mut m = Message::default();
        m.from = 1;
        m.to = 3;
        m.term = 9;
        m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
        let frame = encode_request(42, "kafkaiq-raft-1", &m);
        let body = &frame[4..];
        assert!(is_raft_frame(body));
        assert_eq!(decode_request(body).unwrap(), (42, m));
        assert_eq!(decode_request(&body[..5]), Err(WireError::Short));
        let mut bad = body.to_vec();
        bad[3] = 1;
        assert_eq!(decode_request(&bad), Err(WireError::Version(1)));
        let mut bad = body.to_vec();
        let n = bad.len();
        bad[n - 3..].copy_from_slice(&[0xff, 0xff, 0xff]);
        assert!(matches!(decode_request(&bad), Err(WireError::Decode(_))));
        assert!(!is_raft_frame(&[0, 3, 0, 0]));
    }
}
