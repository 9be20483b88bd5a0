//! Response frames as chunks: a Fetch answer's large record sets are referenced, not copied.
//!
//! A record set read for a Fetch is already a [`Bytes`] of its own (read from the segment
//! file). Encoding the answer into one buffer copies every record byte once more; with TLS,
//! rustls copies them again into its records, and without it the kernel copies them into the
//! socket. [`encode_response_frame`] encodes the answer's fields as usual but leaves each
//! record set of at least [`REFERENCED_RECORDS_BYTES_MIN`] where it is: the frame is the list of
//! chunks to write in order (`connection::write_chunks_unless_stuck` writes them with one vectored
//! write where it can), which saves one copy of every record byte served.
//!
//! The encoder is `kafka-protocol`'s own, run over a buffer ([`ChunkedBuf`]) that recognises
//! the record sets by address when the encoder copies them in: the bytes on the wire are exactly
//! those of the contiguous encoding (tested below for every Fetch version).

use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::Encodable;

use super::{encode_response, header_version, ApiKey, EncodeError, ResponseHeader, ResponseKind};

/// Record sets smaller than this are copied into the frame: a chunk costs a slot of a vectored
/// write (and, on a plaintext socket, may cost a system call of its own), which a small copy
/// does not.
pub const REFERENCED_RECORDS_BYTES_MIN: usize = 16 * 1024;

/// An encoded response frame, size prefix included, as chunks written in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFrame {
    chunks: Vec<Bytes>,
}

impl From<Bytes> for ResponseFrame {
    fn from(bytes: Bytes) -> ResponseFrame {
        ResponseFrame {
            chunks: vec![bytes],
        }
    }
}

impl ResponseFrame {
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// Bytes in the frame.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame as one buffer (copied only if it has several chunks).
    pub fn into_bytes(mut self) -> Bytes {
        if self.chunks.len() == 1 {
            return self.chunks.pop().expect("one chunk");
        }
        let mut out = BytesMut::with_capacity(self.len());
        for c in &self.chunks {
            out.extend_from_slice(c);
        }
        out.freeze()
    }
}

/// Encodes a response frame, size prefix included, as [`encode_response`] does; a Fetch answer's
/// record sets of at least [`REFERENCED_RECORDS_BYTES_MIN`] are referenced instead of copied.
pub fn encode_response_frame(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<ResponseFrame, EncodeError> {
    if let (ApiKey::Fetch, ResponseKind::Fetch(fetch)) = (api_key, body) {
        if let Some(frame) = encode_fetch_chunked(api_version, correlation_id, fetch) {
            return Ok(frame);
        }
    }
    encode_response(api_key, api_version, correlation_id, body).map(ResponseFrame::from)
}

/// The chunked encoding of a Fetch answer, or `None` when it has no record set worth
/// referencing (or anything about it is unexpected: the caller then encodes it whole, which
/// reports any error).
fn encode_fetch_chunked(
    version: i16,
    correlation_id: i32,
    fetch: &FetchResponse,
) -> Option<ResponseFrame> {
    let referenced: Vec<Bytes> = fetch
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|p| p.records.as_ref())
        .filter(|r| r.len() >= REFERENCED_RECORDS_BYTES_MIN)
        .cloned()
        .collect();
    if referenced.is_empty() {
        return None;
    }
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = header_version(ApiKey::Fetch, version);
    let size = header.compute_size(header_version).ok()? + fetch.compute_size(version).ok()?;
    let size_prefix = i32::try_from(size).ok()?;
    let copied: usize = size - referenced.iter().map(Bytes::len).sum::<usize>();
    let mut buf = ChunkedBuf::new(4 + copied, referenced);
    buf.put_i32(size_prefix);
    header.encode(&mut buf, header_version).ok()?;
    fetch.encode(&mut buf, version).ok()?;
    buf.finish(4 + size)
}

/// A `kafka-protocol` output buffer that keeps the record sets it expects by reference: when
/// the encoder copies in a slice that is, by address and length, the next of `referenced`, the
/// bytes so far become a chunk and that record set the next.
struct ChunkedBuf {
    done: Vec<Bytes>,
    /// Bytes in `done`.
    emitted: usize,
    head: BytesMut,
    referenced: Vec<Bytes>,
    next: usize,
    /// The encoder moved back into bytes already emitted (never done for a Fetch answer).
    broken: bool,
    scratch: Vec<u8>,
}

impl ChunkedBuf {
    fn new(capacity: usize, referenced: Vec<Bytes>) -> ChunkedBuf {
        ChunkedBuf {
            done: Vec::with_capacity(2 * referenced.len() + 1),
            emitted: 0,
            head: BytesMut::with_capacity(capacity),
            referenced,
            next: 0,
            broken: false,
            scratch: Vec::new(),
        }
    }

    /// The frame, if every record set was referenced and it is `expected` bytes long.
    fn finish(mut self, expected: usize) -> Option<ResponseFrame> {
        if self.broken || self.next != self.referenced.len() || self.offset() != expected {
            return None;
        }
        if !self.head.is_empty() {
            self.done.push(self.head.split().freeze());
        }
        Some(ResponseFrame { chunks: self.done })
    }
}

// SAFETY: every method passes the call on unchanged to `head`, a `BytesMut`, whose
// implementation keeps the trait's contract; `put_slice` (safe) only adds chunks beside it.
// (`remaining_mut` is `head`'s: it does not count what went out as chunks, which nothing here
// relies on.)
unsafe impl BufMut for ChunkedBuf {
    fn remaining_mut(&self) -> usize {
        self.head.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's guarantee (`cnt` bytes of `chunk_mut` initialised) is passed on.
        unsafe { self.head.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.head.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        if let Some(next) = self.referenced.get(self.next) {
            if std::ptr::eq(src.as_ptr(), next.as_ptr()) && src.len() == next.len() {
                let next = next.clone();
                self.next += 1;
                if !self.head.is_empty() {
                    self.emitted += self.head.len();
                    self.done.push(self.head.split().freeze());
                }
                self.emitted += next.len();
                self.done.push(next);
                return;
            }
        }
        self.head.extend_from_slice(src);
    }
}

impl ByteBufMut for ChunkedBuf {
    fn offset(&self) -> usize {
        self.emitted + self.head.len()
    }

    fn seek(&mut self, offset: usize) {
        match offset.checked_sub(self.emitted) {
            Some(local) => self.head.resize(local, 0),
            None => self.broken = true,
        }
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        match (
            r.start.checked_sub(self.emitted),
            r.end.checked_sub(self.emitted),
        ) {
            (Some(start), Some(end)) if start <= end && end <= self.head.len() => {
                &mut self.head[start..end]
            }
            _ => {
                self.broken = true;
                self.scratch = vec![0; r.len()];
                &mut self.scratch
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn records(len: usize, seed: u8) -> Bytes {
        // A slice of a larger buffer, as a segment read may be.
        let whole: Vec<u8> = (0..len + 7)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        Bytes::from(whole).slice(3..3 + len)
    }

    /// A Fetch answer with every field `version` has.
    fn answer(version: i16) -> FetchResponse {
        let partition = |index: i32, records: Option<Bytes>| {
            let mut p = PartitionData::default()
                .with_partition_index(index)
                .with_high_watermark(1_000 + index as i64)
                .with_last_stable_offset(900)
                .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                    .with_producer_id(ProducerId(7))
                    .with_first_offset(12)]))
                .with_records(records);
            if version >= 5 {
                p.log_start_offset = 5;
            }
            if version >= 11 {
                p.preferred_read_replica = BrokerId(3);
            }
            if version >= 12 {
                p.diverging_epoch = EpochEndOffset::default()
                    .with_epoch(index)
                    .with_end_offset(40);
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(2))
                    .with_leader_epoch(8);
            }
            p
        };
        let topic = |name: &'static str, id: u8| {
            let t = FetchableTopicResponse::default();
            if version >= 13 {
                t.with_topic_id(uuid::Uuid::from_bytes([id; 16]))
            } else {
                t.with_topic(TopicName(StrBytes::from_static_str(name)))
            }
        };
        FetchResponse::default()
            .with_throttle_time_ms(3)
            .with_session_id(if version >= 7 { 44 } else { 0 })
            .with_responses(vec![
                topic("a", 1).with_partitions(vec![
                    partition(0, Some(records(100_000, 1))),
                    partition(1, Some(records(300, 2))),
                    partition(2, None),
                    partition(3, Some(records(REFERENCED_RECORDS_BYTES_MIN, 3))),
                ]),
                topic("b", 2).with_partitions(vec![
                    partition(0, Some(Bytes::new())),
                    partition(1, Some(records(65_536, 4))),
                ]),
            ])
    }

    #[test]
    fn a_chunked_fetch_answer_is_the_contiguous_encoding_in_pieces() {
        for version in 4..=17 {
            let body = ResponseKind::Fetch(answer(version));
            let whole = encode_response(ApiKey::Fetch, version, 99, &body).unwrap();
            let frame = encode_response_frame(ApiKey::Fetch, version, 99, &body).unwrap();
            // Prefix and fields, three record sets referenced with fields between them, and
            // from v12 (flexible) the tagged fields after the last.
            let chunks = if version >= 12 { 7 } else { 6 };
            assert_eq!(frame.chunks().len(), chunks, "v{version}");
            assert_eq!(frame.len(), whole.len(), "v{version}");
            assert_eq!(frame.clone().into_bytes(), whole, "v{version}");
            let ResponseKind::Fetch(fetch) = &body else {
                unreachable!()
            };
            let originals: Vec<&Bytes> = fetch
                .responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .filter_map(|p| p.records.as_ref())
                .filter(|r| r.len() >= REFERENCED_RECORDS_BYTES_MIN)
                .collect();
            for (chunk, original) in [1, 3, 5].map(|i| &frame.chunks()[i]).iter().zip(originals) {
                assert_eq!(chunk.as_ptr(), original.as_ptr(), "v{version}: copied");
            }
        }
    }

    #[test]
    fn small_record_sets_and_other_answers_stay_one_chunk() {
        let small =
            FetchResponse::default()
                .with_responses(vec![FetchableTopicResponse::default().with_partitions(
                    vec![PartitionData::default().with_records(Some(records(1_000, 9)))],
                )]);
        let body = ResponseKind::Fetch(small);
        let frame = encode_response_frame(ApiKey::Fetch, 12, 1, &body).unwrap();
        assert_eq!(frame.chunks().len(), 1);
        assert_eq!(
            frame.into_bytes(),
            encode_response(ApiKey::Fetch, 12, 1, &body).unwrap()
        );
        let metadata = ResponseKind::Metadata(Default::default());
        let frame = encode_response_frame(ApiKey::Metadata, 12, 1, &metadata).unwrap();
        assert_eq!(frame.chunks().len(), 1);
        // A body of another API is refused as by `encode_response`.
        assert!(encode_response_frame(ApiKey::Fetch, 12, 1, &metadata).is_err());
    }
}
