//! The persisted metadata log of a single-node cluster.
//!
//! File `<first log dir>/kafkaiq-metadata.log`, a sequence of frames:
//!
//! ```text
//! length: u32 BE   (bytes of payload)
//! crc:    u32 BE   (CRC32C of payload)
//! payload: one or more encoded MetadataRecords, committed together
//! ```
//!
//! One controller request is one frame (a very large one a few frames), and a commit writes its
//! frames with one write and one fsync before the new image is published, so a change is either
//! replayed after a crash or not.
//!
//! Replay never deletes committed records. Frames are only ever appended, so only the tail can
//! be torn by a crash: a frame cut short, or the last frame with a bad CRC. Such a tail is cut.
//! Anything else is corruption, and startup stops with an error naming the file and the byte
//! offset: a frame whose CRC is valid but whose records do not decode, or a bad frame followed
//! by a valid one. After a failed append the log is offline: every later append fails without
//! writing, because bytes after a half-written frame would be cut (or refused) at the next start.
//!
//! The file is deliberately not a Kafka `__cluster_metadata` log: it lives beside partition
//! directories without looking like one. A Raft quorum will replace this file in a cluster.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::limits::{METADATA_RECORDS_PER_FRAME_MAX, METADATA_RECORD_BYTES_MAX};
use crate::metadata::records::{RecordDecodeError, RecordEncodeError};
use crate::metadata::MetadataRecord;

pub const METADATA_LOG_FILE: &str = "kafkaiq-metadata.log";
const FRAME_HEADER_BYTES: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    #[error("metadata log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metadata log {path}: frame of {bytes} bytes exceeds the record bound")]
    TooLarge { path: PathBuf, bytes: usize },
    #[error("metadata log {path}: {source}")]
    Encode {
        path: PathBuf,
        source: RecordEncodeError,
    },
    #[error("metadata log {path}: the frame at byte {offset} has a valid CRC but does not decode ({source}); refusing to start rather than drop committed records")]
    Undecodable {
        path: PathBuf,
        offset: u64,
        source: RecordDecodeError,
    },
    #[error("metadata log {path}: the frame at byte {offset} is corrupt ({reason}) and a valid frame follows at byte {next}; refusing to start rather than drop committed records")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: &'static str,
        next: u64,
    },
    #[error("metadata log {path} is offline after an earlier write failed: {cause}")]
    Offline { path: PathBuf, cause: String },
}

#[derive(Debug)]
pub struct MetadataLog {
    path: PathBuf,
    file: File,
    /// Set by the first failed append; from then on nothing more is written.
    offline: Option<String>,
}

/// What sits at a byte offset of the file.
enum Frame<'a> {
    /// A whole frame with a matching CRC: its payload and the offset after it.
    Valid { payload: &'a [u8], end: usize },
    /// Not a whole valid frame, and why.
    Bad(&'static str),
}

fn frame_at(bytes: &[u8], pos: usize) -> Frame<'_> {
    let rest = &bytes[pos..];
    if rest.len() < FRAME_HEADER_BYTES {
        return Frame::Bad("short frame header");
    }
    let len = u32::from_be_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
    // Frames are never empty; refusing length 0 also keeps eight zero bytes inside a torn
    // tail (a zero length with the CRC of nothing, 0) from passing for a frame.
    if len == 0 || len > METADATA_RECORD_BYTES_MAX {
        return Frame::Bad("frame length outside 1..=the record bound");
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

/// The first offset after `pos` where a valid frame starts, if any. Only called once a bad
/// frame was found, to tell a torn tail (nothing valid after it) from corruption in the middle.
fn next_valid_frame(bytes: &[u8], pos: usize) -> Option<usize> {
    (pos + 1..bytes.len()).find(|&p| match frame_at(bytes, p) {
        Frame::Valid { payload, .. } => MetadataRecord::decode_all(payload).is_ok(),
        Frame::Bad(_) => false,
    })
}

impl MetadataLog {
    /// Opens (creating if needed) the log in `dir` and returns it with every committed batch.
    pub fn open(dir: &Path) -> Result<(MetadataLog, Vec<Vec<MetadataRecord>>), MetadataLogError> {
        let path = dir.join(METADATA_LOG_FILE);
        let io = |source| MetadataLogError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;

        let (batches, valid_len) = Self::replay(&path, &bytes)?;
        if valid_len < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                kept = valid_len,
                dropped = bytes.len() - valid_len,
                "metadata log had a torn tail; truncating it"
            );
            file.set_len(valid_len as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        Ok((
            MetadataLog {
                path,
                file,
                offline: None,
            },
            batches,
        ))
    }

    /// Every committed batch, and the length of the file they fill (the rest is a torn tail).
    fn replay(
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Vec<Vec<MetadataRecord>>, usize), MetadataLogError> {
        let mut batches = Vec::new();
        let mut pos = 0usize;
        while pos < bytes.len() {
            match frame_at(bytes, pos) {
                Frame::Valid { payload, end } => {
                    let records = MetadataRecord::decode_all(payload).map_err(|source| {
                        MetadataLogError::Undecodable {
                            path: path.to_owned(),
                            offset: pos as u64,
                            source,
                        }
                    })?;
                    batches.push(records);
                    pos = end;
                }
                Frame::Bad(reason) => {
                    if let Some(next) = next_valid_frame(bytes, pos) {
                        return Err(MetadataLogError::Corrupt {
                            path: path.to_owned(),
                            offset: pos as u64,
                            reason,
                            next: next as u64,
                        });
                    }
                    break;
                }
            }
        }
        Ok((batches, pos))
    }

    /// Appends each batch as its own frame (split in frames of at most
    /// `METADATA_RECORDS_PER_FRAME_MAX` records), with one write and one fsync for all of them.
    /// Nothing is written if any record cannot be encoded. An I/O error takes the log offline.
    pub fn append(&mut self, batches: &[Vec<MetadataRecord>]) -> Result<(), MetadataLogError> {
        if let Some(cause) = &self.offline {
            return Err(MetadataLogError::Offline {
                path: self.path.clone(),
                cause: cause.clone(),
            });
        }
        let mut out = Vec::new();
        for batch in batches {
            for chunk in batch.chunks(METADATA_RECORDS_PER_FRAME_MAX) {
                self.encode_frame(chunk, &mut out)?;
            }
        }
        if out.is_empty() {
            return Ok(());
        }
        let written = self
            .file
            .write_all(&out)
            .and_then(|()| self.file.sync_data());
        written.map_err(|source| {
            self.offline = Some(source.to_string());
            tracing::error!(path = %self.path.display(), error = %source, "metadata log write failed; the log is offline");
            MetadataLogError::Io {
                path: self.path.clone(),
                source,
            }
        })
    }

    fn encode_frame(
        &self,
        records: &[MetadataRecord],
        out: &mut Vec<u8>,
    ) -> Result<(), MetadataLogError> {
        let mut payload = Vec::new();
        for r in records {
            r.encode(&mut payload)
                .map_err(|source| MetadataLogError::Encode {
                    path: self.path.clone(),
                    source,
                })?;
        }
        if payload.len() > METADATA_RECORD_BYTES_MAX {
            return Err(MetadataLogError::TooLarge {
                path: self.path.clone(),
                bytes: payload.len(),
            });
        }
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
        Ok(())
    }

    /// Replaces the file handle, so tests can make the next write fail.
    #[cfg(test)]
    pub(crate) fn set_file(&mut self, file: File) {
        self.file = file;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kafkaiq-metalog-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn topic(n: u128) -> Vec<MetadataRecord> {
        vec![MetadataRecord::Topic {
            name: format!("t{n}"),
            topic_id: Uuid::from_u128(n),
        }]
    }

    /// Writes batches `1..=n`, one frame each, and returns the file and each frame's offset.
    fn write_frames(dir: &Path, n: u128) -> (PathBuf, Vec<u64>) {
        let (mut log, _) = MetadataLog::open(dir).unwrap();
        let path = dir.join(METADATA_LOG_FILE);
        let mut offsets = Vec::new();
        for i in 1..=n {
            offsets.push(std::fs::metadata(&path).unwrap().len());
            log.append(&[topic(i)]).unwrap();
        }
        (path, offsets)
    }

    fn flip_byte(path: &Path, offset: u64) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[offset as usize] ^= 0xff;
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn batches_replay_and_a_torn_tail_is_cut() {
        let dir = temp_dir("torn");
        let (path, _) = write_frames(&dir, 2);
        let full = std::fs::metadata(&path).unwrap().len();
        // Tear the last frame.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full - 3).unwrap();
        drop(f);
        let (mut log, batches) = MetadataLog::open(&dir).unwrap();
        assert_eq!(batches, vec![topic(1)]);
        log.append(&[topic(2)]).unwrap();
        drop(log);
        let (_, batches) = MetadataLog::open(&dir).unwrap();
        assert_eq!(batches, vec![topic(1), topic(2)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_crc_on_the_last_frame_is_a_torn_tail() {
        let dir = temp_dir("lastcrc");
        let (path, offsets) = write_frames(&dir, 3);
        flip_byte(&path, offsets[2] + FRAME_HEADER_BYTES as u64 + 1);
        let (_, batches) = MetadataLog::open(&dir).unwrap();
        assert_eq!(batches, vec![topic(1), topic(2)]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), offsets[2]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bad_frame_followed_by_valid_ones_stops_startup_and_keeps_the_file() {
        let dir = temp_dir("middle");
        let (path, offsets) = write_frames(&dir, 3);
        // A CRC mismatch in the middle frame.
        flip_byte(&path, offsets[1] + FRAME_HEADER_BYTES as u64 + 1);
        let before = std::fs::read(&path).unwrap();
        let err = MetadataLog::open(&dir).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, MetadataLogError::Corrupt { offset, next, .. } if offset == offsets[1] && next == offsets[2]),
            "{text}"
        );
        assert!(text.contains(METADATA_LOG_FILE), "{text}");
        assert!(text.contains(&format!("byte {}", offsets[1])), "{text}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was cut");

        // A length prefix corrupted to run past the end of the file is not a torn tail either
        // when a valid frame follows it.
        let dir2 = temp_dir("middlelen");
        let (path2, offsets2) = write_frames(&dir2, 3);
        flip_byte(&path2, offsets2[1]);
        let err = MetadataLog::open(&dir2).unwrap_err();
        assert!(matches!(err, MetadataLogError::Corrupt { offset, .. } if offset == offsets2[1]));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&dir2);
    }

    #[test]
    fn a_valid_crc_frame_that_does_not_decode_stops_startup() {
        let dir = temp_dir("undecodable");
        let (path, offsets) = write_frames(&dir, 3);
        // Rewrite the middle frame with an unknown record type and a matching CRC.
        let mut bytes = std::fs::read(&path).unwrap();
        let start = offsets[1] as usize + FRAME_HEADER_BYTES;
        bytes[start] = 0xee;
        let len = (offsets[2] - offsets[1]) as usize - FRAME_HEADER_BYTES;
        let crc = crc32c::crc32c(&bytes[start..start + len]);
        bytes[start - 4..start].copy_from_slice(&crc.to_be_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let err = MetadataLog::open(&dir).unwrap_err();
        assert!(
            matches!(err, MetadataLogError::Undecodable { offset, .. } if offset == offsets[1]),
            "{err}"
        );
        assert!(err.to_string().contains(&format!("byte {}", offsets[1])));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was cut");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_append_takes_the_log_offline() {
        let dir = temp_dir("offline");
        let (path, _) = write_frames(&dir, 1);
        let (mut log, _) = MetadataLog::open(&dir).unwrap();
        // A read-only handle: the next write fails with EBADF.
        log.set_file(File::open(&path).unwrap());
        assert!(matches!(
            log.append(&[topic(2)]),
            Err(MetadataLogError::Io { .. })
        ));
        // Even with a writable file again, nothing more is written.
        log.set_file(OpenOptions::new().append(true).open(&path).unwrap());
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(matches!(
            log.append(&[topic(3)]),
            Err(MetadataLogError::Offline { .. })
        ));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_record_that_cannot_be_encoded_writes_nothing() {
        let dir = temp_dir("encode");
        let (path, _) = write_frames(&dir, 1);
        let (mut log, _) = MetadataLog::open(&dir).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        let too_long = vec![MetadataRecord::TopicConfig {
            topic_id: Uuid::from_u128(1),
            name: "x".into(),
            value: Some("v".repeat(70_000)),
        }];
        assert!(matches!(
            log.append(&[topic(2), too_long]),
            Err(MetadataLogError::Encode { .. })
        ));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        // Not an I/O failure: the log stays online.
        log.append(&[topic(2)]).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
