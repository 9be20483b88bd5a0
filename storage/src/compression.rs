//! Decompression of a v2 batch's records section, for the two places that look inside batches.
//!
//! The crate stores batches exactly as produced and never decompresses on the read path, nor on
//! the append path of a topic that is not compacted. The exceptions:
//!
//! - ListOffsets by timestamp and MAX_TIMESTAMP: Kafka answers them with the exact record inside
//!   a compressed batch (`FileRecords.searchForTimestamp`, `RecordBatch.offsetOfMaxTimestamp`
//!   iterate the decompressed records), so [`crate::batch`] decompresses the batch it has
//!   already narrowed the search to ([`decompress`]) and parses the records the same way as an
//!   uncompressed batch's.
//! - A produce: every record's key (on a compacted topic) and timestamp are checked (Kafka's
//!   `LogValidator`), so [`crate::batch::check_records`] reads them from a [`reader`]
//!   over the records, streaming as Kafka's `skipKeyValueIterator` does: memory stays a few
//!   buffers whatever the batch expands to.
//!
//! This module is not a codec layer for producing or re-compressing batches. Output is bounded
//! by the caller's limit ([`DECOMPRESSED_RECORDS_BYTES_MAX`] and
//! [`STREAMED_RECORDS_BYTES_MAX`] in practice): a batch that expands beyond it is reported as
//! [`DecompressError::TooLarge`], never allocated in full.
//!
//! Codecs (attribute bits 0-2, as Kafka numbers them): 1 gzip, 2 snappy (raw block, or the
//! xerial `SnappyOutputStream` framing the Java client writes), 3 lz4 (LZ4 frame format, as
//! Kafka's `Lz4BlockOutputStream` and librdkafka write it), 4 zstd.

use std::io::Read;

/// Most bytes a batch's records may decompress to before ListOffsets gives up on looking
/// inside it and answers at batch level. A batch is at most `max.message.bytes` (1 MiB by
/// default) compressed; 32 MiB leaves room for ordinary ratios on large batches while keeping
/// a compression bomb from costing more than this much memory and time per request.
pub const DECOMPRESSED_RECORDS_BYTES_MAX: usize = 32 << 20;

/// log2 of the largest zstd window accepted: 32 MiB, [`DECOMPRESSED_RECORDS_BYTES_MAX`]. Kafka's
/// and librdkafka's default levels use far smaller windows; a frame asking for more (levels
/// near 22) is refused, and ListOffsets answers its batch as a whole.
const ZSTD_WINDOW_LOG_MAX: u32 = 25;
const _: () = assert!(1 << ZSTD_WINDOW_LOG_MAX == DECOMPRESSED_RECORDS_BYTES_MAX);

/// Most bytes the records of one batch may stream to when a compacted topic's produce checks
/// their keys. Streaming costs no memory, only time: Kafka reads however far a batch expands;
/// this stops a compression bomb (a batch is at most `max.message.bytes`, 1 MiB by default,
/// compressed) after 256 times that default, far beyond what ordinary data compresses by.
pub const STREAMED_RECORDS_BYTES_MAX: usize = 256 << 20;

pub const CODEC_NONE: u8 = 0;
pub const CODEC_GZIP: u8 = 1;
pub const CODEC_SNAPPY: u8 = 2;
pub const CODEC_LZ4: u8 = 3;
pub const CODEC_ZSTD: u8 = 4;

/// Header of snappy-java's `SnappyOutputStream` (xerial framing): magic, then version and
/// compatible version (int32 each), then chunks of `length int32` + raw snappy block.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_BYTES: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
    #[error("records decompress to more than {max} bytes")]
    TooLarge { max: usize },
    #[error("corrupt {codec} data: {message}")]
    Corrupt {
        codec: &'static str,
        message: String,
    },
}

pub fn codec_name(codec: u8) -> &'static str {
    match codec {
        CODEC_NONE => "none",
        CODEC_GZIP => "gzip",
        CODEC_SNAPPY => "snappy",
        CODEC_LZ4 => "lz4",
        CODEC_ZSTD => "zstd",
        _ => "unknown",
    }
}

fn corrupt(codec: u8, message: impl ToString) -> DecompressError {
    DecompressError::Corrupt {
        codec: codec_name(codec),
        message: message.to_string(),
    }
}

/// Decompresses `compressed` (a batch's records section) written with `codec`, producing at
/// most `max_bytes` bytes.
pub fn decompress(
    codec: u8,
    compressed: &[u8],
    max_bytes: usize,
) -> Result<Vec<u8>, DecompressError> {
    match codec {
        CODEC_NONE => bounded_copy(compressed, max_bytes),
        // MultiGzDecoder: Java's GZIPInputStream also reads concatenated members.
        CODEC_GZIP => read_bounded(
            codec,
            flate2::read::MultiGzDecoder::new(compressed),
            max_bytes,
        ),
        CODEC_SNAPPY => snappy(compressed, max_bytes),
        CODEC_LZ4 => read_bounded(
            codec,
            lz4_flex::frame::FrameDecoder::new(compressed),
            max_bytes,
        ),
        CODEC_ZSTD => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)
                .map_err(|e| corrupt(codec, e))?;
            // The decoder allocates the window the frame header asks for (up to 128 MiB by
            // default) before producing a byte: hold it to the output bound too.
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(codec, e))?;
            read_bounded(codec, decoder, max_bytes)
        }
        other => Err(DecompressError::UnknownCodec(other)),
    }
}

/// A reader of the decompressed records section `compressed` written with `codec`, yielding
/// at most `max_bytes` bytes: reading past them fails with an error whose inner error is
/// [`DecompressError::TooLarge`] (see [`reader_error`]). Snappy is decompressed a block at a
/// time (a xerial chunk, or the one raw block librdkafka writes, bounded before allocating).
pub fn reader<'a>(
    codec: u8,
    compressed: &'a [u8],
    max_bytes: usize,
) -> Result<Box<dyn Read + 'a>, DecompressError> {
    let inner: Box<dyn Read + 'a> = match codec {
        CODEC_NONE => Box::new(compressed),
        CODEC_GZIP => Box::new(flate2::read::MultiGzDecoder::new(compressed)),
        CODEC_SNAPPY => Box::new(SnappyReader::new(compressed, max_bytes)),
        CODEC_LZ4 => Box::new(lz4_flex::frame::FrameDecoder::new(compressed)),
        CODEC_ZSTD => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)
                .map_err(|e| corrupt(codec, e))?;
            decoder
                .window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| corrupt(codec, e))?;
            Box::new(decoder)
        }
        other => return Err(DecompressError::UnknownCodec(other)),
    };
    Ok(Box::new(BoundedReader {
        inner,
        codec,
        left: max_bytes,
        max: max_bytes,
    }))
}

/// What a [`reader`]'s I/O error means: the bound, corrupt data, or (`None`) the stream ended
/// early (`UnexpectedEof`), which the caller reports as a batch shorter than it declares.
pub fn reader_error(codec: u8, e: std::io::Error) -> Option<DecompressError> {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return None;
    }
    match e
        .into_inner()
        .map(|inner| inner.downcast::<DecompressError>())
    {
        Some(Ok(d)) => Some(*d),
        Some(Err(other)) => Some(corrupt(codec, other)),
        None => Some(corrupt(codec, "read failed")),
    }
}

struct BoundedReader<'a> {
    inner: Box<dyn Read + 'a>,
    codec: u8,
    left: usize,
    max: usize,
}

impl Read for BoundedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the bound: only the end of the stream is acceptable.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(std::io::Error::other(DecompressError::TooLarge {
                    max: self.max,
                })),
            };
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want]).map_err(|e| {
            let ours = e.get_ref().is_some_and(|r| r.is::<DecompressError>());
            if ours || e.kind() == std::io::ErrorKind::UnexpectedEof {
                e
            } else {
                std::io::Error::other(corrupt(self.codec, e))
            }
        })?;
        self.left -= n;
        Ok(n)
    }
}

/// Snappy as [`snappy`] reads it, one block at a time.
struct SnappyReader<'a> {
    data: &'a [u8],
    /// Position of the next xerial chunk, or `None` for a raw block (read whole, once).
    next_chunk: Option<usize>,
    raw_done: bool,
    block: Vec<u8>,
    at: usize,
    max_bytes: usize,
}

impl<'a> SnappyReader<'a> {
    fn new(data: &'a [u8], max_bytes: usize) -> SnappyReader<'a> {
        let xerial =
            data.len() >= XERIAL_HEADER_BYTES && data[..XERIAL_MAGIC.len()] == XERIAL_MAGIC;
        SnappyReader {
            data,
            next_chunk: xerial.then_some(XERIAL_HEADER_BYTES),
            raw_done: false,
            block: Vec::new(),
            at: 0,
            max_bytes,
        }
    }

    /// Decompresses the next block into `self.block`; false at the end of the data.
    fn next_block(&mut self) -> Result<bool, DecompressError> {
        self.block.clear();
        self.at = 0;
        let block = match self.next_chunk {
            None if self.raw_done => return Ok(false),
            None => {
                self.raw_done = true;
                self.data
            }
            Some(pos) if pos >= self.data.len() => return Ok(false),
            Some(pos) => {
                let len_bytes = self
                    .data
                    .get(pos..pos + 4)
                    .ok_or_else(|| corrupt(CODEC_SNAPPY, "truncated xerial chunk length"))?;
                let len = u32::from_be_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
                let chunk = self
                    .data
                    .get(pos + 4..(pos + 4).saturating_add(len))
                    .ok_or_else(|| {
                        corrupt(CODEC_SNAPPY, "xerial chunk past the end of the batch")
                    })?;
                self.next_chunk = Some(pos + 4 + len);
                chunk
            }
        };
        append_snappy_block(block, &mut self.block, self.max_bytes)?;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.block.len() {
            if !self.next_block().map_err(std::io::Error::other)? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn bounded_copy(data: &[u8], max_bytes: usize) -> Result<Vec<u8>, DecompressError> {
    if data.len() > max_bytes {
        return Err(DecompressError::TooLarge { max: max_bytes });
    }
    Ok(data.to_vec())
}

/// Reads at most `max_bytes + 1` bytes so an oversized stream is detected without being read
/// (or allocated) further; the buffer's capacity stays under twice the bound.
fn read_bounded(
    codec: u8,
    reader: impl Read,
    max_bytes: usize,
) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    reader
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(codec, e))?;
    if out.len() > max_bytes {
        return Err(DecompressError::TooLarge { max: max_bytes });
    }
    Ok(out)
}

/// Snappy as Kafka reads it (snappy-java's `SnappyInputStream`): xerial-framed when the data
/// starts with the xerial magic, else one raw snappy block (librdkafka writes those).
fn snappy(data: &[u8], max_bytes: usize) -> Result<Vec<u8>, DecompressError> {
    if data.len() < XERIAL_HEADER_BYTES || data[..XERIAL_MAGIC.len()] != XERIAL_MAGIC {
        let mut out = Vec::new();
        append_snappy_block(data, &mut out, max_bytes)?;
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut pos = XERIAL_HEADER_BYTES;
    while pos < data.len() {
        let len_bytes = data
            .get(pos..pos + 4)
            .ok_or_else(|| corrupt(CODEC_SNAPPY, "truncated xerial chunk length"))?;
        let len = u32::from_be_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        pos += 4;
        let chunk = data
            .get(pos..pos.saturating_add(len))
            .ok_or_else(|| corrupt(CODEC_SNAPPY, "xerial chunk past the end of the batch"))?;
        append_snappy_block(chunk, &mut out, max_bytes)?;
        pos += len;
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, checking its declared length against the bound
/// before allocating.
fn append_snappy_block(
    block: &[u8],
    out: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<(), DecompressError> {
    let len = snap::raw::decompress_len(block).map_err(|e| corrupt(CODEC_SNAPPY, e))?;
    if out.len().saturating_add(len) > max_bytes {
        return Err(DecompressError::TooLarge { max: max_bytes });
    }
    let at = out.len();
    out.resize(at + len, 0);
    let n = snap::raw::Decoder::new()
        .decompress(block, &mut out[at..])
        .map_err(|e| corrupt(CODEC_SNAPPY, e))?;
    out.truncate(at + n);
    Ok(())
}

/// Whether a snappy records section uses the xerial framing the Java client writes (the
/// cleaner rewrites a batch in the framing it came in).
pub fn is_xerial(section: &[u8]) -> bool {
    section.len() >= XERIAL_HEADER_BYTES && section[..XERIAL_MAGIC.len()] == XERIAL_MAGIC
}

/// Compresses `data` with `codec` the way producers do (snappy: xerial framing when
/// `xerial`, else a raw block). The log cleaner rewrites a compressed batch it shrinks with
/// the batch's own codec; the append path never compresses.
pub fn compress(codec: u8, data: &[u8], xerial: bool) -> Vec<u8> {
    use std::io::Write;
    match codec {
        CODEC_NONE => data.to_vec(),
        CODEC_GZIP => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).expect("writing to memory");
            e.finish().expect("writing to memory")
        }
        CODEC_SNAPPY if xerial => {
            let mut out = XERIAL_MAGIC.to_vec();
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            // Small chunks so a test batch spans several of them.
            for chunk in data.chunks(64) {
                let block = snap::raw::Encoder::new()
                    .compress_vec(chunk)
                    .expect("a 64-byte chunk compresses");
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            out
        }
        CODEC_SNAPPY => snap::raw::Encoder::new()
            .compress_vec(data)
            .expect("snappy compresses any input under 4 GiB"),
        CODEC_LZ4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data).expect("writing to memory");
            e.finish().expect("writing to memory")
        }
        CODEC_ZSTD => zstd::stream::encode_all(data, 3).expect("writing to memory"),
        other => panic!("codec {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        let data = sample();
        for (codec, xerial) in [
            (CODEC_NONE, false),
            (CODEC_GZIP, false),
            (CODEC_SNAPPY, false),
            (CODEC_SNAPPY, true),
            (CODEC_LZ4, false),
            (CODEC_ZSTD, false),
        ] {
            let c = compress(codec, &data, xerial);
            let d = decompress(codec, &c, DECOMPRESSED_RECORDS_BYTES_MAX)
                .unwrap_or_else(|e| panic!("{} (xerial {xerial}): {e}", codec_name(codec)));
            assert_eq!(d, data, "{} (xerial {xerial})", codec_name(codec));
        }
    }

    #[test]
    fn output_beyond_the_bound_is_refused() {
        // 1 MiB of zeros compresses to a few KiB: a small bomb against a 64 KiB bound.
        let data = vec![0u8; 1 << 20];
        for (codec, xerial) in [
            (CODEC_NONE, false),
            (CODEC_GZIP, false),
            (CODEC_SNAPPY, false),
            (CODEC_SNAPPY, true),
            (CODEC_LZ4, false),
            (CODEC_ZSTD, false),
        ] {
            let c = compress(codec, &data, xerial);
            assert!(
                matches!(
                    decompress(codec, &c, 64 << 10),
                    Err(DecompressError::TooLarge { max }) if max == 64 << 10
                ),
                "{} (xerial {xerial})",
                codec_name(codec)
            );
            assert_eq!(decompress(codec, &c, 1 << 20).unwrap().len(), 1 << 20);
        }
    }

    #[test]
    fn a_zstd_frame_asking_for_a_huge_window_is_refused() {
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        e.set_parameter(zstd::stream::raw::CParameter::WindowLog(27))
            .unwrap();
        std::io::Write::write_all(&mut e, &sample()).unwrap();
        let c = e.finish().unwrap();
        assert!(matches!(
            decompress(CODEC_ZSTD, &c, DECOMPRESSED_RECORDS_BYTES_MAX),
            Err(DecompressError::Corrupt { codec: "zstd", .. })
        ));
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        let data = sample();
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let mut c = compress(codec, &data, false);
            let mid = c.len() / 2;
            c.truncate(mid);
            assert!(
                decompress(codec, &c, DECOMPRESSED_RECORDS_BYTES_MAX).is_err(),
                "{}",
                codec_name(codec)
            );
        }
        // A xerial chunk length pointing past the end.
        let mut x = compress(CODEC_SNAPPY, &data, true);
        x[XERIAL_HEADER_BYTES..XERIAL_HEADER_BYTES + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decompress(CODEC_SNAPPY, &x, DECOMPRESSED_RECORDS_BYTES_MAX).is_err());
        assert!(matches!(
            decompress(7, &data, DECOMPRESSED_RECORDS_BYTES_MAX),
            Err(DecompressError::UnknownCodec(7))
        ));
    }
}
