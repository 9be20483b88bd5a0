//! Metadata records and their binary encoding.
//!
//! Encoding of one record: a type byte, then the fields in order. Integers big-endian; a string
//! is a u16 length and UTF-8 bytes; an optional string uses length 0xFFFF for "absent"; a list of
//! node ids is a u16 count and i32s; a UUID is 16 bytes. Decoding checks every length against
//! the bytes present before using it, so a corrupt log can only fail to decode, never allocate
//! wildly.

use uuid::Uuid;

use crate::limits::METADATA_STRING_BYTES_MAX;
use crate::metadata::{BrokerRegistration, PartitionRegistration};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    RegisterBroker(BrokerRegistration),
    Topic {
        name: String,
        topic_id: Uuid,
    },
    /// The full registration of one partition: written at creation and on every change
    /// (leader, epochs, ISR), like Kafka's PartitionRecord / PartitionChangeRecord pair.
    Partition {
        topic_id: Uuid,
        partition: i32,
        registration: PartitionRegistration,
    },
    /// Set (Some) or delete (None) one topic config.
    TopicConfig {
        topic_id: Uuid,
        name: String,
        value: Option<String>,
    },
    BrokerConfig {
        resource: String,
        name: String,
        value: Option<String>,
    },
    RemoveTopic {
        topic_id: Uuid,
    },
    /// A block of producer ids was handed to `broker_id`; ids below `next_block_start` are
    /// never handed out again.
    ProducerIds {
        broker_id: i32,
        next_block_start: i64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed metadata record: {0}")]
pub struct RecordDecodeError(pub &'static str);

/// A record that cannot be encoded: a string or list longer than the format holds. Nothing is
/// written; the decisions refuse such values before they get here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata record cannot hold a {what} of {len} (at most {max})")]
pub struct RecordEncodeError {
    pub what: &'static str,
    pub len: usize,
    pub max: usize,
}

const ABSENT: u16 = u16::MAX;

struct Writer {
    out: Vec<u8>,
    /// The first field that did not fit; the record is refused as a whole.
    error: Option<RecordEncodeError>,
}

impl Writer {
    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn uuid(&mut self, v: &Uuid) {
        self.out.extend_from_slice(v.as_bytes());
    }
    /// A u16 length, unless `len` does not fit (then the record is refused).
    fn len(&mut self, what: &'static str, len: usize) -> bool {
        match u16::try_from(len) {
            Ok(n) if n != ABSENT => {
                self.out.extend_from_slice(&n.to_be_bytes());
                true
            }
            _ => {
                self.error.get_or_insert(RecordEncodeError {
                    what,
                    len,
                    max: METADATA_STRING_BYTES_MAX,
                });
                false
            }
        }
    }
    fn string(&mut self, s: &str) {
        if self.len("string", s.len()) {
            self.out.extend_from_slice(s.as_bytes());
        }
    }
    fn opt_string(&mut self, s: &Option<String>) {
        match s {
            Some(s) => self.string(s),
            None => self.out.extend_from_slice(&ABSENT.to_be_bytes()),
        }
    }
    fn ids(&mut self, ids: &[i32]) {
        if self.len("node id list", ids.len()) {
            for id in ids {
                self.i32(*id);
            }
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], RecordDecodeError> {
        if self.0.len() < n {
            return Err(RecordDecodeError("truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, RecordDecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordDecodeError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, RecordDecodeError> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> Result<i64, RecordDecodeError> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn uuid(&mut self) -> Result<Uuid, RecordDecodeError> {
        Ok(Uuid::from_bytes(self.take(16)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String, RecordDecodeError> {
        let n = self.u16()?;
        if n == ABSENT {
            return Err(RecordDecodeError("absent string"));
        }
        let bytes = self.take(n as usize)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RecordDecodeError("bad utf-8"))
    }
    fn opt_string(&mut self) -> Result<Option<String>, RecordDecodeError> {
        let n = self.u16()?;
        if n == ABSENT {
            return Ok(None);
        }
        let bytes = self.take(n as usize)?;
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| RecordDecodeError("bad utf-8"))
    }
    fn ids(&mut self) -> Result<Vec<i32>, RecordDecodeError> {
        let n = self.u16()? as usize;
        // The count is checked against the bytes present before allocating.
        if self.0.len() < n * 4 {
            return Err(RecordDecodeError("truncated id list"));
        }
        (0..n).map(|_| self.i32()).collect()
    }
}

impl MetadataRecord {
    /// Appends the encoded record to `out`; on error `out` is left as it was.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), RecordEncodeError> {
        let start = out.len();
        let mut w = Writer {
            out: std::mem::take(out),
            error: None,
        };
        match self {
            MetadataRecord::RegisterBroker(b) => {
                w.u8(1);
                w.i32(b.node_id);
                w.string(&b.host);
                w.i32(i32::from(b.port));
                w.opt_string(&b.rack);
            }
            MetadataRecord::Topic { name, topic_id } => {
                w.u8(2);
                w.string(name);
                w.uuid(topic_id);
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                registration: r,
            } => {
                w.u8(3);
                w.uuid(topic_id);
                w.i32(*partition);
                w.ids(&r.replicas);
                w.ids(&r.isr);
                w.i32(r.leader);
                w.i32(r.leader_epoch);
                w.i32(r.partition_epoch);
            }
            MetadataRecord::TopicConfig {
                topic_id,
                name,
                value,
            } => {
                w.u8(4);
                w.uuid(topic_id);
                w.string(name);
                w.opt_string(value);
            }
            MetadataRecord::BrokerConfig {
                resource,
                name,
                value,
            } => {
                w.u8(5);
                w.string(resource);
                w.string(name);
                w.opt_string(value);
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                w.u8(6);
                w.uuid(topic_id);
            }
            MetadataRecord::ProducerIds {
                broker_id,
                next_block_start,
            } => {
                w.u8(7);
                w.i32(*broker_id);
                w.i64(*next_block_start);
            }
        }
        *out = w.out;
        match w.error {
            None => Ok(()),
            Some(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }

    /// Decodes every record in `bytes` (one frame of the metadata log).
    pub fn decode_all(bytes: &[u8]) -> Result<Vec<MetadataRecord>, RecordDecodeError> {
        let mut r = Reader(bytes);
        let mut records = Vec::new();
        while !r.0.is_empty() {
            records.push(Self::decode_one(&mut r)?);
        }
        Ok(records)
    }

    fn decode_one(r: &mut Reader<'_>) -> Result<MetadataRecord, RecordDecodeError> {
        Ok(match r.u8()? {
            1 => MetadataRecord::RegisterBroker(BrokerRegistration {
                node_id: r.i32()?,
                host: r.string()?,
                port: u16::try_from(r.i32()?).map_err(|_| RecordDecodeError("bad port"))?,
                rack: r.opt_string()?,
            }),
            2 => MetadataRecord::Topic {
                name: r.string()?,
                topic_id: r.uuid()?,
            },
            3 => MetadataRecord::Partition {
                topic_id: r.uuid()?,
                partition: r.i32()?,
                registration: PartitionRegistration {
                    replicas: r.ids()?,
                    isr: r.ids()?,
                    leader: r.i32()?,
                    leader_epoch: r.i32()?,
                    partition_epoch: r.i32()?,
                },
            },
            4 => MetadataRecord::TopicConfig {
                topic_id: r.uuid()?,
                name: r.string()?,
                value: r.opt_string()?,
            },
            5 => MetadataRecord::BrokerConfig {
                resource: r.string()?,
                name: r.string()?,
                value: r.opt_string()?,
            },
            6 => MetadataRecord::RemoveTopic {
                topic_id: r.uuid()?,
            },
            7 => MetadataRecord::ProducerIds {
                broker_id: r.i32()?,
                next_block_start: r.i64()?,
            },
            _ => return Err(RecordDecodeError("unknown record type")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_round_trips() {
        let id = Uuid::from_u128(0xfeed);
        let records = vec![
            MetadataRecord::RegisterBroker(BrokerRegistration {
                node_id: 1,
                host: "h".into(),
                port: 9092,
                rack: Some("r".into()),
            }),
            MetadataRecord::Topic {
                name: "orders".into(),
                topic_id: id,
            },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 3,
                registration: PartitionRegistration {
                    replicas: vec![1, 2],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: 4,
                    partition_epoch: 9,
                },
            },
            MetadataRecord::TopicConfig {
                topic_id: id,
                name: "retention.ms".into(),
                value: None,
            },
            MetadataRecord::BrokerConfig {
                resource: "".into(),
                name: "x".into(),
                value: Some("y".into()),
            },
            MetadataRecord::RemoveTopic { topic_id: id },
            MetadataRecord::ProducerIds {
                broker_id: 1,
                next_block_start: 2000,
            },
        ];
        let mut bytes = Vec::new();
        for r in &records {
            r.encode(&mut bytes).unwrap();
        }
        assert_eq!(MetadataRecord::decode_all(&bytes).unwrap(), records);
        for cut in 0..bytes.len() {
            // Any truncation either decodes fewer records or fails; it never panics.
            let _ = MetadataRecord::decode_all(&bytes[..cut]);
        }
    }

    #[test]
    fn a_string_too_long_for_the_format_is_refused_not_cut() {
        let record = MetadataRecord::TopicConfig {
            topic_id: Uuid::from_u128(1),
            name: "x".into(),
            value: Some("v".repeat(METADATA_STRING_BYTES_MAX + 1)),
        };
        let mut bytes = vec![9u8];
        let err = record.encode(&mut bytes).unwrap_err();
        assert_eq!(err.len, METADATA_STRING_BYTES_MAX + 1);
        assert_eq!(bytes, vec![9u8], "nothing of a refused record is written");
        let fits = MetadataRecord::TopicConfig {
            topic_id: Uuid::from_u128(1),
            name: "x".into(),
            value: Some("v".repeat(METADATA_STRING_BYTES_MAX)),
        };
        let mut bytes = Vec::new();
        fits.encode(&mut bytes).unwrap();
        assert_eq!(MetadataRecord::decode_all(&bytes).unwrap(), vec![fits]);
    }

    #[test]
    fn huge_id_count_is_rejected_without_allocating() {
        let mut bytes = vec![3u8];
        bytes.extend_from_slice(&[0; 16]);
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.extend_from_slice(&u16::MAX.to_be_bytes());
        assert!(MetadataRecord::decode_all(&bytes).is_err());
    }
}
