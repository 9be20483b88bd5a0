//! Large Raft messages in chunks, so no frame on the controller listener is larger than
//! [`RAFT_CHUNK_BYTES`] and its overhead.
//!
//! A message whose encoding is longer than one chunk (a snapshot carries the whole image, up to
//! [`METADATA_SNAPSHOT_BYTES_MAX`]; an append may carry about 2 MiB of entries) travels as a
//! run of chunk frames: a Kafka request frame with KafkaIQ's private API key
//! [`RAFT_CHUNK_API_KEY`], version 0, and as the body
//!
//! ```text
//! from:     u64 BE  (the sending voter)
//! total:    u32 BE  (bytes of the whole encoded message)
//! position: u32 BE  (where this chunk's bytes start in it)
//! bytes             (1..=RAFT_CHUNK_BYTES, ending at or before `total`)
//! ```
//!
//! The sender writes one message's chunks one after another, in order, on its connection to
//! the peer. The receiver ([`Reassembly`]) keeps one message in progress per sending voter, at
//! most [`REASSEMBLY_BYTES_MAX`]; the chunk at position 0 starts it and replaces whatever that
//! voter had in progress (its connection failed mid-message, so that message is lost and Raft
//! sends again). A chunk that does not continue the message in progress, comes on another
//! connection, or claims a size past the bound is refused and the connection closed: only a
//! stranger or a broken peer sends one. Like Kafka's `FetchSnapshot`, which reads a snapshot in
//! positioned pieces bounded by its fetch size, no single read holds the whole snapshot.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::limits::{CONTROLLER_FRAME_OVERHEAD_BYTES, METADATA_SNAPSHOT_BYTES_MAX};

/// KafkaIQ's private API key for a chunk of a Raft message.
pub const RAFT_CHUNK_API_KEY: i16 = 32_002;
pub const RAFT_CHUNK_VERSION: i16 = 0;

/// Largest piece of a Raft message in one frame; a message up to this size travels whole.
/// [`crate::limits::RAFT_FRAME_BYTES_MAX`] is this and the frame's header.
pub const RAFT_CHUNK_BYTES: usize = 64 * 1024;

/// Largest message the receiver puts back together: a snapshot of the largest image and the
/// message around it.
pub const REASSEMBLY_BYTES_MAX: usize =
    METADATA_SNAPSHOT_BYTES_MAX + CONTROLLER_FRAME_OVERHEAD_BYTES;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkError {
    #[error("raft chunk shorter than its header")]
    Short,
    #[error("raft chunk with version {0}; only 0 is known")]
    Version(i16),
    #[error("raft chunk from {0}, which is not a peer voter")]
    NotAVoter(u64),
    #[error("raft chunk of a {0}-byte message; at most {REASSEMBLY_BYTES_MAX} are put together")]
    TooLarge(u32),
    #[error("raft chunk out of place: {0}")]
    OutOfPlace(&'static str),
    #[error("raft message put together from chunks does not decode: {0}")]
    Undecodable(String),
}

/// One chunk frame's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub from: u64,
    pub total: u32,
    pub position: u32,
    pub bytes: Bytes,
}

/// Whether a request frame (without its size prefix) is a chunk of a Raft message.
pub fn is_chunk_frame(frame: &[u8]) -> bool {
    frame.len() >= 2 && i16::from_be_bytes([frame[0], frame[1]]) == RAFT_CHUNK_API_KEY
}

/// The frames (size prefixes included) that carry `message`, an encoded Raft message larger
/// than one chunk, from voter `from`, built one at a time as they are written (a snapshot is
/// not held twice). `correlation` gives each frame its id.
pub fn encode_chunks<'a>(
    from: u64,
    client_id: &'a str,
    message: &'a [u8],
    mut correlation: impl FnMut() -> i32 + 'a,
) -> impl Iterator<Item = Bytes> + 'a {
    debug_assert!(message.len() <= REASSEMBLY_BYTES_MAX);
    let client = client_id.as_bytes();
    message
        .chunks(RAFT_CHUNK_BYTES)
        .enumerate()
        .map(move |(i, bytes)| {
            let len = 2 + 2 + 4 + 2 + client.len() + 8 + 4 + 4 + bytes.len();
            let mut out = BytesMut::with_capacity(4 + len);
            out.put_i32(len as i32);
            out.put_i16(RAFT_CHUNK_API_KEY);
            out.put_i16(RAFT_CHUNK_VERSION);
            out.put_i32(correlation());
            out.put_i16(client.len() as i16);
            out.put_slice(client);
            out.put_u64(from);
            out.put_u32(message.len() as u32);
            out.put_u32((i * RAFT_CHUNK_BYTES) as u32);
            out.put_slice(bytes);
            out.freeze()
        })
}

/// A chunk frame's content (the frame without its size prefix).
pub fn decode_chunk(frame: &Bytes) -> Result<Chunk, ChunkError> {
    if frame.len() < 10 {
        return Err(ChunkError::Short);
    }
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    if version != RAFT_CHUNK_VERSION {
        return Err(ChunkError::Version(version));
    }
    let client_len = i16::from_be_bytes([frame[8], frame[9]]).max(0) as usize;
    let start = 10 + client_len;
    if frame.len() < start + 16 {
        return Err(ChunkError::Short);
    }
    let at = |i: usize, n: usize| &frame[start + i..start + i + n];
    Ok(Chunk {
        from: u64::from_be_bytes(at(0, 8).try_into().expect("8 bytes")),
        total: u32::from_be_bytes(at(8, 4).try_into().expect("4 bytes")),
        position: u32::from_be_bytes(at(12, 4).try_into().expect("4 bytes")),
        bytes: frame.slice(start + 16..),
    })
}

/// A message being put back together: which connection brings it, its size, what came.
#[derive(Debug)]
struct Partial {
    connection: u64,
    total: usize,
    bytes: Vec<u8>,
}

/// The receiver's messages in progress, one per peer voter.
#[derive(Debug)]
pub struct Reassembly {
    peers: Vec<u64>,
    partial: HashMap<u64, Partial>,
}

impl Reassembly {
    /// Accepts chunks from the voters `peers` (never from this node itself).
    pub fn new(peers: Vec<u64>) -> Reassembly {
        Reassembly {
            peers,
            partial: HashMap::new(),
        }
    }

    /// Takes one chunk that came on `connection`; the whole encoded message once its last
    /// chunk is in. `link` is the connection that carries the claimed sender's accepted
    /// messages, if one does: a chunk in its name on another connection is refused, as a whole
    /// message would be, and never disturbs what that connection sends. An error means the
    /// connection must close; a message in progress on another connection stays.
    pub fn accept(
        &mut self,
        connection: u64,
        link: Option<u64>,
        chunk: Chunk,
    ) -> Result<Option<Vec<u8>>, ChunkError> {
        if !self.peers.contains(&chunk.from) {
            return Err(ChunkError::NotAVoter(chunk.from));
        }
        if link.is_some_and(|l| l != connection) {
            return Err(ChunkError::OutOfPlace(
                "the voter's messages come on another live connection",
            ));
        }
        let total = chunk.total as usize;
        if total > REASSEMBLY_BYTES_MAX {
            self.drop_partial(chunk.from, connection);
            return Err(ChunkError::TooLarge(chunk.total));
        }
        if chunk.position == 0 {
            // A message starts: whatever this voter had in progress was lost with its
            // connection.
            self.partial.insert(
                chunk.from,
                Partial {
                    connection,
                    total,
                    bytes: Vec::new(),
                },
            );
        }
        let Some(partial) = self
            .partial
            .get_mut(&chunk.from)
            .filter(|p| p.connection == connection)
        else {
            return Err(ChunkError::OutOfPlace(
                "no message in progress on this connection",
            ));
        };
        let end = partial.bytes.len() + chunk.bytes.len();
        let follows = partial.total == total
            && partial.bytes.len() == chunk.position as usize
            && !chunk.bytes.is_empty()
            && chunk.bytes.len() <= RAFT_CHUNK_BYTES
            && end <= total;
        if !follows {
            self.partial.remove(&chunk.from);
            return Err(ChunkError::OutOfPlace(
                "not the next chunk of the message in progress",
            ));
        }
        if end > partial.bytes.capacity() {
            // Grows as a Vec does, but never past the message's size.
            let target = (partial.bytes.capacity() * 2).clamp(end, total);
            partial.bytes.reserve_exact(target - partial.bytes.len());
        }
        partial.bytes.extend_from_slice(&chunk.bytes);
        if end < total {
            return Ok(None);
        }
        Ok(self.partial.remove(&chunk.from).map(|p| p.bytes))
    }

    fn drop_partial(&mut self, from: u64, connection: u64) {
        if self
            .partial
            .get(&from)
            .is_some_and(|p| p.connection == connection)
        {
            self.partial.remove(&from);
        }
    }

    /// Forgets what came on a connection that closed.
    pub fn connection_closed(&mut self, connection: u64) {
        self.partial.retain(|_, p| p.connection != connection);
    }

    /// Bytes held for messages in progress.
    pub fn held_bytes(&self) -> usize {
        self.partial.values().map(|p| p.bytes.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_chunk_frame_fits_the_listener_bound() {
        let longest_client_id = "c".repeat(i16::MAX as usize);
        let message = [0; RAFT_CHUNK_BYTES + 1];
        let frame = encode_chunks(1, &longest_client_id, &message, || 0)
            .next()
            .unwrap();
        assert!(frame.len() - 4 <= crate::limits::RAFT_FRAME_BYTES_MAX);
    }

    fn frames_of(message: &[u8]) -> Vec<Chunk> {
        let mut id = 0;
        encode_chunks(2, "kafkaiq-raft-2", message, || {
            id += 1;
            id
        })
        .map(|f| {
            let body = f.slice(4..);
            assert!(is_chunk_frame(&body));
            assert_eq!(
                i32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
                body.len()
            );
            decode_chunk(&body).unwrap()
        })
        .collect()
    }

    fn message(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_message_travels_in_bounded_chunks_and_comes_back_whole() {
        let m = message(3 * RAFT_CHUNK_BYTES + 17);
        let chunks = frames_of(&m);
        assert_eq!(chunks.len(), 4);
        assert!(chunks.iter().all(|c| c.bytes.len() <= RAFT_CHUNK_BYTES));
        let mut r = Reassembly::new(vec![2, 3]);
        let mut whole = None;
        for c in chunks {
            assert!(whole.is_none(), "complete only at the last chunk");
            whole = r.accept(7, None, c).unwrap();
        }
        assert_eq!(whole.as_deref(), Some(&m[..]));
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn a_new_message_replaces_one_cut_short_and_a_closed_connection_frees_it() {
        let first = frames_of(&message(2 * RAFT_CHUNK_BYTES + 1));
        let second = message(RAFT_CHUNK_BYTES + 5);
        let mut r = Reassembly::new(vec![2]);
        assert_eq!(r.accept(1, Some(1), first[0].clone()).unwrap(), None);
        // The sender reconnected (its old connection no longer carries its messages) and sent
        // its next message from the start.
        let mut whole = None;
        for c in frames_of(&second) {
            whole = r.accept(2, Some(2), c).unwrap();
        }
        assert_eq!(whole, Some(second));
        assert_eq!(r.accept(3, None, first[0].clone()).unwrap(), None);
        assert_eq!(r.held_bytes(), RAFT_CHUNK_BYTES);
        r.connection_closed(3);
        assert_eq!(r.held_bytes(), 0);
    }

    #[test]
    fn chunks_out_of_place_from_strangers_or_too_large_are_refused() {
        let chunks = frames_of(&message(3 * RAFT_CHUNK_BYTES));
        let mut r = Reassembly::new(vec![2]);
        // A gap.
        r.accept(1, None, chunks[0].clone()).unwrap();
        let gap = r.accept(1, None, chunks[2].clone());
        assert!(matches!(gap, Err(ChunkError::OutOfPlace(_))));
        assert_eq!(r.held_bytes(), 0, "the broken message is dropped");
        // A continuation with nothing in progress.
        assert!(r.accept(1, None, chunks[1].clone()).is_err());
        // A size that changes mid-message, or past the bound, or from a non-voter.
        r.accept(1, None, chunks[0].clone()).unwrap();
        let mut other = chunks[1].clone();
        other.total += 1;
        assert!(r.accept(1, None, other).is_err());
        let mut huge = chunks[0].clone();
        huge.total = u32::MAX;
        assert_eq!(r.accept(1, None, huge), Err(ChunkError::TooLarge(u32::MAX)));
        let mut stranger = chunks[0].clone();
        stranger.from = 5;
        assert_eq!(r.accept(1, None, stranger), Err(ChunkError::NotAVoter(5)));
        // More bytes than the message claims.
        let mut over = chunks[0].clone();
        over.total = 10;
        assert!(r.accept(1, None, over).is_err());
        assert_eq!(r.held_bytes(), 0);
    }

    /// A stranger claiming the sender's id on another connection, while the sender's own
    /// connection carries its messages, cannot cut short or replace what it sends.
    #[test]
    fn chunks_in_a_voters_name_on_another_connection_disturb_nothing() {
        let m = message(3 * RAFT_CHUNK_BYTES + 9);
        let chunks = frames_of(&m);
        let mut r = Reassembly::new(vec![2]);
        r.accept(1, Some(1), chunks[0].clone()).unwrap();
        for forged in [chunks[0].clone(), chunks[1].clone(), chunks[3].clone()] {
            assert!(r.accept(6, Some(1), forged).is_err());
        }
        // Before the voter's connection is known, a forged continuation on another
        // connection is refused and leaves the message in progress alone too.
        assert!(r.accept(6, None, chunks[2].clone()).is_err());
        let mut whole = None;
        for c in &chunks[1..] {
            whole = r.accept(1, Some(1), c.clone()).unwrap();
        }
        assert_eq!(whole, Some(m));
    }

    #[test]
    fn truncated_or_unknown_chunk_frames_are_refused() {
        let m = message(RAFT_CHUNK_BYTES + 1);
        let frame = encode_chunks(2, "x", &m, || 1).next().unwrap().slice(4..);
        assert_eq!(decode_chunk(&frame.slice(..12)), Err(ChunkError::Short));
        let mut bad = frame.to_vec();
        bad[3] = 1;
        assert_eq!(decode_chunk(&Bytes::from(bad)), Err(ChunkError::Version(1)));
    }
}
