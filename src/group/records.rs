//! Kafka's `__consumer_offsets` record formats, so Kafka's own tools can read what we write.
//!
//! Every record key and value starts with an `int16` version. The key version says which record
//! it is: 0 and 1 are `OffsetCommitKey` (group, topic, partition), 2 is `GroupMetadataKey`
//! (group). A record with a null value is a tombstone for its key. The schemas are Kafka's
//! `group-coordinator/src/main/resources/common/message/*.json`:
//!
//! - `OffsetCommitValue` v0–v4: `offset` i64, `leaderEpoch` i32 (v3+), `metadata` string,
//!   `commitTimestamp` i64, `expireTimestamp` i64 (v1 only); v4 is flexible (compact strings,
//!   tagged fields).
//! - `GroupMetadataValue` v0–v4: `protocolType` string, `generation` i32, `protocol` and `leader`
//!   nullable strings, `currentStateTimestamp` i64 (v2+), `members` array of (`memberId`,
//!   `groupInstanceId` nullable v3+, `clientId`, `clientHost`, `rebalanceTimeout` i32 v1+,
//!   `sessionTimeout` i32, `subscription` bytes, `assignment` bytes); v4 is flexible.
//!
//! We write `OffsetCommitKey` v1, `OffsetCommitValue` v3 (v1 when the commit carries an
//! explicit retention, as Kafka does), `GroupMetadataKey` v2 and `GroupMetadataValue` v3, and read
//! every version. This module only encodes and decodes; it knows nothing about group state.

use bytes::{BufMut, Bytes, BytesMut};

/// Key version of an offset commit record as Kafka 4 writes it.
const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
/// Key version of a group metadata record.
const GROUP_METADATA_KEY_VERSION: i16 = 2;
/// Value version of an offset commit without an explicit expiry.
const OFFSET_COMMIT_VALUE_VERSION: i16 = 3;
/// Value version of an offset commit that carries `expireTimestamp` (requests v2–v4 with a
/// retention time).
const OFFSET_COMMIT_VALUE_EXPIRING_VERSION: i16 = 1;
/// Value version of group metadata: the last non-flexible one, readable by every Kafka tool.
const GROUP_METADATA_VALUE_VERSION: i16 = 3;
/// Highest value version of either record we can read.
const VALUE_VERSION_MAX: i16 = 4;

/// Why a `__consumer_offsets` record could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record truncated while reading {what}")]
    Truncated { what: &'static str },
    #[error("negative length {len} for non-nullable {what}")]
    NegativeLength { what: &'static str, len: i64 },
    #[error("{what} is not valid UTF-8")]
    Utf8 { what: &'static str },
    #[error("unknown {what} version {version}")]
    UnknownVersion { what: &'static str, version: i16 },
}

/// A decoded record key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    OffsetCommit {
        group: String,
        topic: String,
        partition: i32,
    },
    GroupMetadata {
        group: String,
    },
    /// The records of a KIP-848 consumer group (key versions 3–8).
    Consumer(super::consumer_records::ConsumerKey),
}

/// A committed offset as stored in an `OffsetCommitValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub committed_offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// -1 unless the commit carried an explicit retention time.
    pub expire_timestamp_ms: i64,
}

/// One member inside a `GroupMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's selected protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group's persisted state as stored in a `GroupMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberMetadata>,
}

pub fn encode_offset_commit_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(2 + 2 + group.len() + 2 + topic.len() + 4);
    buf.put_i16(OFFSET_COMMIT_KEY_VERSION);
    put_string(&mut buf, group);
    put_string(&mut buf, topic);
    buf.put_i32(partition);
    buf.freeze()
}

pub fn encode_group_metadata_key(group: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(2 + 2 + group.len());
    buf.put_i16(GROUP_METADATA_KEY_VERSION);
    put_string(&mut buf, group);
    buf.freeze()
}

pub fn encode_offset_commit_value(value: &OffsetCommitValue) -> Bytes {
    let mut buf = BytesMut::with_capacity(2 + 8 + 4 + 2 + value.metadata.len() + 16);
    if value.expire_timestamp_ms >= 0 {
        // v1 is the only version with expireTimestamp; it has no leader epoch.
        buf.put_i16(OFFSET_COMMIT_VALUE_EXPIRING_VERSION);
        buf.put_i64(value.committed_offset);
        put_string(&mut buf, &value.metadata);
        buf.put_i64(value.commit_timestamp_ms);
        buf.put_i64(value.expire_timestamp_ms);
    } else {
        buf.put_i16(OFFSET_COMMIT_VALUE_VERSION);
        buf.put_i64(value.committed_offset);
        buf.put_i32(value.leader_epoch);
        put_string(&mut buf, &value.metadata);
        buf.put_i64(value.commit_timestamp_ms);
    }
    buf.freeze()
}

pub fn encode_group_metadata_value(value: &GroupMetadataValue) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i16(GROUP_METADATA_VALUE_VERSION);
    put_string(&mut buf, &value.protocol_type);
    buf.put_i32(value.generation);
    put_nullable_string(&mut buf, value.protocol.as_deref());
    put_nullable_string(&mut buf, value.leader.as_deref());
    buf.put_i64(value.current_state_timestamp_ms);
    buf.put_i32(value.members.len() as i32);
    for member in &value.members {
        put_string(&mut buf, &member.member_id);
        put_nullable_string(&mut buf, member.group_instance_id.as_deref());
        put_string(&mut buf, &member.client_id);
        put_string(&mut buf, &member.client_host);
        buf.put_i32(member.rebalance_timeout_ms);
        buf.put_i32(member.session_timeout_ms);
        buf.put_i32(member.subscription.len() as i32);
        buf.put_slice(&member.subscription);
        buf.put_i32(member.assignment.len() as i32);
        buf.put_slice(&member.assignment);
    }
    buf.freeze()
}

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

pub fn decode_key(bytes: &[u8]) -> Result<RecordKey, RecordError> {
    let mut r = Reader { buf: bytes };
    let version = r.i16("key version")?;
    match version {
        0 | 1 => Ok(RecordKey::OffsetCommit {
            group: r.string("group", false)?,
            topic: r.string("topic", false)?,
            partition: r.i32("partition")?,
        }),
        2 => Ok(RecordKey::GroupMetadata {
            group: r.string("group", false)?,
        }),
        version @ 3..=8 => super::consumer_records::decode_key_body(version, &mut r)?
            .map(RecordKey::Consumer)
            .ok_or(RecordError::UnknownVersion {
                what: "record key",
                version,
            }),
        version => Err(RecordError::UnknownVersion {
            what: "record key",
            version,
        }),
    }
}

pub fn decode_offset_commit_value(bytes: &[u8]) -> Result<OffsetCommitValue, RecordError> {
    let mut r = Reader { buf: bytes };
    let version = r.i16("offset commit value version")?;
    if !(0..=VALUE_VERSION_MAX).contains(&version) {
        return Err(RecordError::UnknownVersion {
            what: "offset commit value",
            version,
        });
    }
    let flexible = version >= 4;
    let committed_offset = r.i64("offset")?;
    let leader_epoch = if version >= 3 {
        r.i32("leaderEpoch")?
    } else {
        -1
    };
    let metadata = r.string_v("metadata", flexible)?;
    let commit_timestamp_ms = r.i64("commitTimestamp")?;
    let expire_timestamp_ms = if version == 1 {
        r.i64("expireTimestamp")?
    } else {
        -1
    };
    if flexible {
        r.skip_tagged_fields()?;
    }
    Ok(OffsetCommitValue {
        committed_offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
        expire_timestamp_ms,
    })
}

pub fn decode_group_metadata_value(bytes: &[u8]) -> Result<GroupMetadataValue, RecordError> {
    let mut r = Reader { buf: bytes };
    let version = r.i16("group metadata value version")?;
    if !(0..=VALUE_VERSION_MAX).contains(&version) {
        return Err(RecordError::UnknownVersion {
            what: "group metadata value",
            version,
        });
    }
    let flexible = version >= 4;
    let protocol_type = r.string_v("protocolType", flexible)?;
    let generation = r.i32("generation")?;
    let protocol = r.nullable_string_v("protocol", flexible)?;
    let leader = r.nullable_string_v("leader", flexible)?;
    let current_state_timestamp_ms = if version >= 2 {
        r.i64("currentStateTimestamp")?
    } else {
        -1
    };
    let count = r.array_len("members", flexible)?;
    let mut members = Vec::new();
    for _ in 0..count {
        let member_id = r.string_v("memberId", flexible)?;
        let group_instance_id = if version >= 3 {
            r.nullable_string_v("groupInstanceId", flexible)?
        } else {
            None
        };
        let client_id = r.string_v("clientId", flexible)?;
        let client_host = r.string_v("clientHost", flexible)?;
        let rebalance_timeout_ms = if version >= 1 {
            r.i32("rebalanceTimeout")?
        } else {
            -1
        };
        let session_timeout_ms = r.i32("sessionTimeout")?;
        let subscription = r.bytes_v("subscription", flexible)?;
        let assignment = r.bytes_v("assignment", flexible)?;
        if flexible {
            r.skip_tagged_fields()?;
        }
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            // v0 had a single timeout for both.
            rebalance_timeout_ms: if rebalance_timeout_ms < 0 {
                session_timeout_ms
            } else {
                rebalance_timeout_ms
            },
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    if flexible {
        r.skip_tagged_fields()?;
    }
    Ok(GroupMetadataValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

/// A bounds-checked reader: every length is checked against the bytes that remain before
/// anything is allocated, because a corrupt log must not make replay allocate wildly.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        if self.buf.len() < n {
            return Err(RecordError::Truncated { what });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, RecordError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, RecordError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, RecordError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub(crate) fn uvarint(&mut self, what: &'static str) -> Result<u64, RecordError> {
        let mut value = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.take(1, what)?[0];
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError::Truncated { what })
    }

    /// Length of a string/bytes/array: `None` for null. Flexible versions use
    /// unsigned varint length+1; others a signed int16 (strings) or int32 (bytes, arrays).
    pub(crate) fn len(
        &mut self,
        what: &'static str,
        flexible: bool,
        wide: bool,
    ) -> Result<Option<usize>, RecordError> {
        let len: i64 = if flexible {
            self.uvarint(what)? as i64 - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        if len > self.buf.len() {
            return Err(RecordError::Truncated { what });
        }
        Ok(Some(len))
    }

    pub(crate) fn nullable_string_v(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<Option<String>, RecordError> {
        match self.len(what, flexible, false)? {
            None => Ok(None),
            Some(n) => {
                let b = self.take(n, what)?;
                String::from_utf8(b.to_vec())
                    .map(Some)
                    .map_err(|_| RecordError::Utf8 { what })
            }
        }
    }

    pub(crate) fn string_v(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<String, RecordError> {
        self.nullable_string_v(what, flexible)?
            .ok_or(RecordError::NegativeLength { what, len: -1 })
    }

    pub(crate) fn string(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<String, RecordError> {
        self.string_v(what, flexible)
    }

    pub(crate) fn bytes_v(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<Bytes, RecordError> {
        match self.len(what, flexible, true)? {
            None => Err(RecordError::NegativeLength { what, len: -1 }),
            Some(n) => Ok(Bytes::copy_from_slice(self.take(n, what)?)),
        }
    }

    pub(crate) fn array_len(
        &mut self,
        what: &'static str,
        flexible: bool,
    ) -> Result<usize, RecordError> {
        let n = self
            .len(what, flexible, true)?
            .ok_or(RecordError::NegativeLength { what, len: -1 })?;
        Ok(n)
    }

    pub(crate) fn skip_tagged_fields(&mut self) -> Result<(), RecordError> {
        let count = self.uvarint("tagged field count")?;
        for _ in 0..count {
            self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")? as usize;
            self.take(size, "tagged field")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_commit_key_layout_matches_kafka() {
        let key = encode_offset_commit_key("g", "t", 7);
        assert_eq!(&key[..], &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 7]);
        assert_eq!(
            decode_key(&key).unwrap(),
            RecordKey::OffsetCommit {
                group: "g".into(),
                topic: "t".into(),
                partition: 7
            }
        );
    }

    #[test]
    fn group_metadata_key_layout_matches_kafka() {
        let key = encode_group_metadata_key("ab");
        assert_eq!(&key[..], &[0, 2, 0, 2, b'a', b'b']);
        assert_eq!(
            decode_key(&key).unwrap(),
            RecordKey::GroupMetadata { group: "ab".into() }
        );
    }

    #[test]
    fn offset_commit_value_v3_layout() {
        let value = OffsetCommitValue {
            committed_offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 1000,
            expire_timestamp_ms: -1,
        };
        let bytes = encode_offset_commit_value(&value);
        let mut expected = vec![0, 3];
        expected.extend_from_slice(&42i64.to_be_bytes());
        expected.extend_from_slice(&3i32.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b'm']);
        expected.extend_from_slice(&1000i64.to_be_bytes());
        assert_eq!(&bytes[..], &expected[..]);
        assert_eq!(decode_offset_commit_value(&bytes).unwrap(), value);
    }

    #[test]
    fn offset_commit_value_v1_carries_expiry() {
        let value = OffsetCommitValue {
            committed_offset: 5,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 10,
            expire_timestamp_ms: 20,
        };
        let bytes = encode_offset_commit_value(&value);
        assert_eq!(&bytes[..2], &[0, 1]);
        assert_eq!(decode_offset_commit_value(&bytes).unwrap(), value);
    }

    #[test]
    fn offset_commit_value_v4_flexible_decodes() {
        // version 4, offset 9, epoch 2, compact string "x", timestamp 7, no tagged fields.
        let mut bytes = vec![0, 4];
        bytes.extend_from_slice(&9i64.to_be_bytes());
        bytes.extend_from_slice(&2i32.to_be_bytes());
        bytes.extend_from_slice(&[2, b'x']);
        bytes.extend_from_slice(&7i64.to_be_bytes());
        bytes.push(0);
        let value = decode_offset_commit_value(&bytes).unwrap();
        assert_eq!(value.committed_offset, 9);
        assert_eq!(value.leader_epoch, 2);
        assert_eq!(value.metadata, "x");
        assert_eq!(value.commit_timestamp_ms, 7);
    }

    #[test]
    fn group_metadata_value_round_trips() {
        let value = GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 99,
            members: vec![MemberMetadata {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        let bytes = encode_group_metadata_value(&value);
        assert_eq!(&bytes[..2], &[0, 3]);
        assert_eq!(decode_group_metadata_value(&bytes).unwrap(), value);
    }

    #[test]
    fn truncated_and_hostile_lengths_are_errors() {
        assert!(decode_key(&[0, 1, 0x7f, 0x7f]).is_err());
        assert!(decode_key(&[0, 9]).is_err());
        let mut bytes = vec![0, 3];
        bytes.extend_from_slice(&[0; 4]);
        assert!(decode_offset_commit_value(&bytes).is_err());
        // A member array claiming 2^31-1 members in a few bytes.
        let mut g = vec![0, 3, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        g.extend_from_slice(&(-1i64).to_be_bytes());
        g.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_group_metadata_value(&g).is_err());
    }
}
