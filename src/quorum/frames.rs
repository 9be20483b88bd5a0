//! CRC32C-framed append-only files: the format of the Raft log on disk, with the replay rules
//! that never delete committed records.
//!
//! ```text
//! length: u32 BE   (bytes of payload, 1..=FRAME_PAYLOAD_BYTES_MAX)
//! crc:    u32 BE   (CRC32C of payload)
//! payload
//! ```
//!
//! Frames are only ever appended (or the file is cut back to a frame boundary by the writer
//! itself), so a crash can tear only the tail: a frame cut short, or a last frame with a bad
//! CRC. [`scan`] cuts such a tail. Anything else is corruption, reported with the byte offset:
//! a bad frame followed by a valid one.

use crate::limits::METADATA_RECORD_BYTES_MAX;

pub const FRAME_HEADER_BYTES: usize = 8;

/// Largest payload of one frame of the Raft log: one entry (a batch of metadata records of at
/// most [`METADATA_RECORD_BYTES_MAX`]) and its header.
pub const FRAME_PAYLOAD_BYTES_MAX: usize = METADATA_RECORD_BYTES_MAX + 64;

/// What sits at a byte offset of a framed file.
pub enum Frame<'a> {
    /// A whole frame with a matching CRC: its payload and the offset after it.
    Valid { payload: &'a [u8], end: usize },
    /// Not a whole valid frame, and why.
    Bad(&'static str),
}

pub fn frame_at(bytes: &[u8], pos: usize) -> Frame<'_> {
    frame_at_most(bytes, pos, FRAME_PAYLOAD_BYTES_MAX)
}

/// [`frame_at`] with another bound on the payload (a snapshot file holds the whole image).
pub fn frame_at_most(bytes: &[u8], pos: usize, max_payload: usize) -> Frame<'_> {
    let rest = &bytes[pos..];
    if rest.len() < FRAME_HEADER_BYTES {
        return Frame::Bad("short frame header");
    }
    let len = u32::from_be_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
    // Frames are never empty; refusing length 0 also keeps eight zero bytes inside a torn tail
    // (a zero length with the CRC of nothing, 0) from passing for a frame.
    if len == 0 || len > max_payload {
        return Frame::Bad("frame length outside 1..=the frame bound");
    }
    if rest.len() - FRAME_HEADER_BYTES < len {
        return Frame::Bad("frame cut short");
    }
    let payload = &rest[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len];
    if crc32c::crc32c(payload) != crc {
        return Frame::Bad("CRC mismatch");
    }
    Frame::Valid {
        payload,
        end: pos + FRAME_HEADER_BYTES + len,
    }
}

/// Appends one frame around `payload` to `out`.
pub fn write_frame(payload: &[u8], out: &mut Vec<u8>) {
    debug_assert!(!payload.is_empty() && payload.len() <= u32::MAX as usize);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Why a framed file cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    /// A bad frame at `offset` with a valid frame after it, at `next`.
    Corrupt {
        offset: u64,
        reason: &'static str,
        next: u64,
    },
    /// A frame with a valid CRC whose payload `accept` refused.
    Undecodable { offset: u64, reason: String },
}

impl std::error::Error for ScanError {}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Corrupt {
                offset,
                reason,
                next,
            } => write!(
                f,
                "the frame at byte {offset} is corrupt ({reason}) and a valid frame follows at byte {next}; refusing to start rather than drop committed records"
            ),
            ScanError::Undecodable { offset, reason } => write!(
                f,
                "the frame at byte {offset} has a valid CRC but does not decode ({reason}); refusing to start rather than drop committed records"
            ),
        }
    }
}

/// Every frame of `bytes`, each handed to `accept` with its byte offset, and the length the
/// frames fill (the rest is a torn tail the caller cuts). `accept` decodes a payload; its error
/// stops the scan as [`ScanError::Undecodable`]. `valid` tells whether a payload found after a
/// bad frame is a real frame (it is asked only on that rare path).
pub fn scan(
    bytes: &[u8],
    mut accept: impl FnMut(u64, &[u8]) -> Result<(), String>,
    valid: impl Fn(&[u8]) -> bool,
) -> Result<usize, ScanError> {
    let mut pos = 0usize;
    while pos < bytes.len() {
        match frame_at(bytes, pos) {
            Frame::Valid { payload, end } => {
                accept(pos as u64, payload).map_err(|reason| ScanError::Undecodable {
                    offset: pos as u64,
                    reason,
                })?;
                pos = end;
            }
            Frame::Bad(reason) => {
                let next = (pos + 1..bytes.len()).find(|&p| match frame_at(bytes, p) {
                    Frame::Valid { payload, .. } => valid(payload),
                    Frame::Bad(_) => false,
                });
                if let Some(next) = next {
                    return Err(ScanError::Corrupt {
                        offset: pos as u64,
                        reason,
                        next: next as u64,
                    });
                }
                break;
            }
        }
    }
    Ok(pos)
}
