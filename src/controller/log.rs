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
//! A controller write is one frame, fsynced before the new image is published, so a change is
//! either fully replayed after a crash or not at all. Replay stops at the first torn or corrupt
//! frame and cuts the file there (only the tail can be torn: frames are only ever appended).
//! The file is deliberately not a Kafka `__cluster_metadata` log: it lives beside partition
//! directories without looking like one. A Raft quorum will replace this file in a cluster.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::limits::METADATA_RECORD_BYTES_MAX;
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
}

#[derive(Debug)]
pub struct MetadataLog {
    path: PathBuf,
    file: File,
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

        let mut batches = Vec::new();
        let mut valid_len = 0usize;
        while bytes.len() - valid_len >= FRAME_HEADER_BYTES {
            let header = &bytes[valid_len..valid_len + FRAME_HEADER_BYTES];
            let len = u32::from_be_bytes(header[0..4].try_into().unwrap()) as usize;
            let crc = u32::from_be_bytes(header[4..8].try_into().unwrap());
            let start = valid_len + FRAME_HEADER_BYTES;
            if len > METADATA_RECORD_BYTES_MAX || bytes.len() - start < len {
                break;
            }
            let payload = &bytes[start..start + len];
            if crc32c::crc32c(payload) != crc {
                break;
            }
            match MetadataRecord::decode_all(payload) {
                Ok(records) => batches.push(records),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "metadata frame with a valid CRC does not decode; stopping replay there");
                    break;
                }
            }
            valid_len = start + len;
        }
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
        Ok((MetadataLog { path, file }, batches))
    }

    /// Appends one batch as one frame and fsyncs it.
    pub fn append(&mut self, records: &[MetadataRecord]) -> Result<(), MetadataLogError> {
        let mut payload = Vec::new();
        for r in records {
            r.encode(&mut payload);
        }
        if payload.len() > METADATA_RECORD_BYTES_MAX {
            return Err(MetadataLogError::TooLarge {
                path: self.path.clone(),
                bytes: payload.len(),
            });
        }
        let mut frame = Vec::with_capacity(FRAME_HEADER_BYTES + payload.len());
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
        frame.extend_from_slice(&payload);
        let io = |source| MetadataLogError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&frame).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        Ok(())
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

    #[test]
    fn batches_replay_and_a_torn_tail_is_cut() {
        let dir = temp_dir("torn");
        let a = vec![MetadataRecord::Topic {
            name: "a".into(),
            topic_id: Uuid::from_u128(1),
        }];
        let b = vec![MetadataRecord::RemoveTopic {
            topic_id: Uuid::from_u128(1),
        }];
        {
            let (mut log, batches) = MetadataLog::open(&dir).unwrap();
            assert!(batches.is_empty());
            log.append(&a).unwrap();
            log.append(&b).unwrap();
        }
        let path = dir.join(METADATA_LOG_FILE);
        let full = std::fs::metadata(&path).unwrap().len();
        // Tear the last frame.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full - 3).unwrap();
        drop(f);
        let (mut log, batches) = MetadataLog::open(&dir).unwrap();
        assert_eq!(batches, vec![a.clone()]);
        log.append(&b).unwrap();
        drop(log);
        let (_, batches) = MetadataLog::open(&dir).unwrap();
        assert_eq!(batches, vec![a, b]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
