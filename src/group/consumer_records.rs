//! The `__consumer_offsets` records of KIP-848 consumer groups, in Kafka's formats.
//!
//! Keys are not flexible and start with an `int16` version that says which record it is
//! (Kafka's `group-coordinator/src/main/resources/common/message/ConsumerGroup*Key.json`):
//!
//! | key version | record | key fields |
//! |---|---|---|
//! | 3 | `ConsumerGroupMetadata` | group |
//! | 4 | `ConsumerGroupPartitionMetadata` | group |
//! | 5 | `ConsumerGroupMemberMetadata` | group, member |
//! | 6 | `ConsumerGroupTargetAssignmentMetadata` | group |
//! | 7 | `ConsumerGroupTargetAssignmentMember` | group, member |
//! | 8 | `ConsumerGroupCurrentMemberAssignment` | group, member |
//!
//! Every value is version 0 and flexible: compact strings and arrays, UUIDs as 16 bytes, and a
//! tagged-field section after each struct (read and skipped; we write none).

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::records::{Reader, RecordError};

pub const GROUP_METADATA_KEY: i16 = 3;
pub const PARTITION_METADATA_KEY: i16 = 4;
pub const MEMBER_METADATA_KEY: i16 = 5;
pub const TARGET_ASSIGNMENT_METADATA_KEY: i16 = 6;
pub const TARGET_ASSIGNMENT_MEMBER_KEY: i16 = 7;
pub const CURRENT_MEMBER_ASSIGNMENT_KEY: i16 = 8;

/// Partitions by topic id: an assignment, as the records and the heartbeat carry it.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// `ConsumerGroupMemberMetadataValue`: a member's subscription and who it is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberMetadataValue {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    /// Set for a member that speaks the classic protocol inside a consumer group (online
    /// migration); `None` for a member of the consumer protocol. Kafka writes it as tagged
    /// field 0.
    pub classic: Option<ClassicMemberMetadata>,
}

/// `ClassicMemberMetadata`: what a classic member sent in its JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// (protocol name, `ConsumerProtocolSubscription` bytes) in the member's order.
    pub protocols: Vec<(String, Bytes)>,
}

/// One topic of `ConsumerGroupPartitionMetadataValue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub topic_id: Uuid,
    pub topic_name: String,
    pub num_partitions: i32,
}

/// `ConsumerGroupCurrentMemberAssignmentValue`: where a member's reconciliation stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CurrentAssignmentValue {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// Kafka's `MemberState`: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
}

/// A decoded consumer-group key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerKey {
    GroupMetadata { group: String },
    PartitionMetadata { group: String },
    MemberMetadata { group: String, member: String },
    TargetAssignmentMetadata { group: String },
    TargetAssignmentMember { group: String, member: String },
    CurrentMemberAssignment { group: String, member: String },
}

impl ConsumerKey {
    pub fn group(&self) -> &str {
        match self {
            ConsumerKey::GroupMetadata { group }
            | ConsumerKey::PartitionMetadata { group }
            | ConsumerKey::MemberMetadata { group, .. }
            | ConsumerKey::TargetAssignmentMetadata { group }
            | ConsumerKey::TargetAssignmentMember { group, .. }
            | ConsumerKey::CurrentMemberAssignment { group, .. } => group,
        }
    }
}

// ------------------------------------------------------------------------------ keys

fn key(version: i16, group: &str, member: Option<&str>) -> Bytes {
    let mut buf = BytesMut::with_capacity(6 + group.len() + member.map_or(0, str::len));
    buf.put_i16(version);
    buf.put_i16(group.len() as i16);
    buf.put_slice(group.as_bytes());
    if let Some(member) = member {
        buf.put_i16(member.len() as i16);
        buf.put_slice(member.as_bytes());
    }
    buf.freeze()
}

pub fn group_metadata_key(group: &str) -> Bytes {
    key(GROUP_METADATA_KEY, group, None)
}
pub fn partition_metadata_key(group: &str) -> Bytes {
    key(PARTITION_METADATA_KEY, group, None)
}
pub fn member_metadata_key(group: &str, member: &str) -> Bytes {
    key(MEMBER_METADATA_KEY, group, Some(member))
}
pub fn target_assignment_metadata_key(group: &str) -> Bytes {
    key(TARGET_ASSIGNMENT_METADATA_KEY, group, None)
}
pub fn target_assignment_member_key(group: &str, member: &str) -> Bytes {
    key(TARGET_ASSIGNMENT_MEMBER_KEY, group, Some(member))
}
pub fn current_member_assignment_key(group: &str, member: &str) -> Bytes {
    key(CURRENT_MEMBER_ASSIGNMENT_KEY, group, Some(member))
}

/// Decodes the rest of a key whose version (already read) is 3–8.
pub(super) fn decode_key_body(
    version: i16,
    r: &mut Reader<'_>,
) -> Result<Option<ConsumerKey>, RecordError> {
    let key = match version {
        GROUP_METADATA_KEY => ConsumerKey::GroupMetadata {
            group: r.string("group", false)?,
        },
        PARTITION_METADATA_KEY => ConsumerKey::PartitionMetadata {
            group: r.string("group", false)?,
        },
        MEMBER_METADATA_KEY => ConsumerKey::MemberMetadata {
            group: r.string("group", false)?,
            member: r.string("member", false)?,
        },
        TARGET_ASSIGNMENT_METADATA_KEY => ConsumerKey::TargetAssignmentMetadata {
            group: r.string("group", false)?,
        },
        TARGET_ASSIGNMENT_MEMBER_KEY => ConsumerKey::TargetAssignmentMember {
            group: r.string("group", false)?,
            member: r.string("member", false)?,
        },
        CURRENT_MEMBER_ASSIGNMENT_KEY => ConsumerKey::CurrentMemberAssignment {
            group: r.string("group", false)?,
            member: r.string("member", false)?,
        },
        _ => return Ok(None),
    };
    Ok(Some(key))
}

// ------------------------------------------------------------------------------ values

struct Writer(BytesMut);

impl Writer {
    fn new() -> Writer {
        let mut buf = BytesMut::with_capacity(64);
        buf.put_i16(0);
        Writer(buf)
    }
    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.put_u8(v as u8);
    }
    fn len(&mut self, len: Option<usize>) {
        self.uvarint(len.map_or(0, |n| n as u64 + 1));
    }
    fn string(&mut self, s: &str) {
        self.len(Some(s.len()));
        self.0.put_slice(s.as_bytes());
    }
    fn nullable_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.len(None),
        }
    }
    fn no_tags(&mut self) {
        self.uvarint(0);
    }
    fn compact_bytes(&mut self, b: &[u8]) {
        self.len(Some(b.len()));
        self.0.put_slice(b);
    }
    fn assignment(&mut self, a: &Assignment) {
        self.len(Some(a.len()));
        for (topic, partitions) in a {
            self.0.put_slice(topic.as_bytes());
            self.len(Some(partitions.len()));
            for p in partitions {
                self.0.put_i32(*p);
            }
            self.no_tags();
        }
    }
    fn finish(mut self) -> Bytes {
        self.no_tags();
        self.0.freeze()
    }
}

fn reader(bytes: &[u8]) -> Result<Reader<'_>, RecordError> {
    let mut r = Reader::new(bytes);
    match r.i16("value version")? {
        0 => Ok(r),
        version => Err(RecordError::UnknownVersion {
            what: "consumer group value",
            version,
        }),
    }
}

fn read_uuid(r: &mut Reader<'_>) -> Result<Uuid, RecordError> {
    let b = r.take(16, "topic id")?;
    Ok(Uuid::from_slice(b).expect("16 bytes"))
}

fn read_assignment(r: &mut Reader<'_>) -> Result<Assignment, RecordError> {
    let topics = r.array_len("topic partitions", true)?;
    let mut out = Assignment::new();
    for _ in 0..topics {
        let topic = read_uuid(r)?;
        let n = r.array_len("partitions", true)?;
        let partitions = out.entry(topic).or_default();
        for _ in 0..n {
            partitions.insert(r.i32("partition")?);
        }
        r.skip_tagged_fields()?;
    }
    Ok(out)
}

/// `ConsumerGroupMetadataValue`: the group epoch.
pub fn encode_group_metadata_value(epoch: i32) -> Bytes {
    let mut w = Writer::new();
    w.0.put_i32(epoch);
    w.finish()
}

pub fn decode_group_metadata_value(bytes: &[u8]) -> Result<i32, RecordError> {
    let mut r = reader(bytes)?;
    let epoch = r.i32("epoch")?;
    r.skip_tagged_fields()?;
    Ok(epoch)
}

pub fn encode_partition_metadata_value(topics: &[TopicMetadata]) -> Bytes {
    let mut w = Writer::new();
    w.len(Some(topics.len()));
    for t in topics {
        w.0.put_slice(t.topic_id.as_bytes());
        w.string(&t.topic_name);
        w.0.put_i32(t.num_partitions);
        // PartitionMetadata (racks per partition): none; the assignors here are not
        // rack-aware.
        w.len(Some(0));
        w.no_tags();
    }
    w.finish()
}

pub fn decode_partition_metadata_value(bytes: &[u8]) -> Result<Vec<TopicMetadata>, RecordError> {
    let mut r = reader(bytes)?;
    let n = r.array_len("topics", true)?;
    let mut topics = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let topic_id = read_uuid(&mut r)?;
        let topic_name = r.string("topic name", true)?;
        let num_partitions = r.i32("num partitions")?;
        let partitions = r.array_len("partition metadata", true)?;
        for _ in 0..partitions {
            r.i32("partition")?;
            let racks = r.array_len("racks", true)?;
            for _ in 0..racks {
                r.string("rack", true)?;
            }
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
        topics.push(TopicMetadata {
            topic_id,
            topic_name,
            num_partitions,
        });
    }
    r.skip_tagged_fields()?;
    Ok(topics)
}

pub fn encode_member_metadata_value(v: &MemberMetadataValue) -> Bytes {
    let mut w = Writer::new();
    w.nullable_string(v.instance_id.as_deref());
    w.nullable_string(v.rack_id.as_deref());
    w.string(&v.client_id);
    w.string(&v.client_host);
    w.len(Some(v.subscribed_topic_names.len()));
    for t in &v.subscribed_topic_names {
        w.string(t);
    }
    w.nullable_string(v.subscribed_topic_regex.as_deref());
    w.0.put_i32(v.rebalance_timeout_ms);
    w.nullable_string(v.server_assignor.as_deref());
    match &v.classic {
        None => w.finish(),
        Some(c) => {
            // A nullable struct as tagged field 0: its size counts a leading presence byte.
            let mut inner = Writer(BytesMut::new());
            inner.0.put_i32(c.session_timeout_ms);
            inner.len(Some(c.protocols.len()));
            for (name, metadata) in &c.protocols {
                inner.string(name);
                inner.compact_bytes(metadata);
                inner.no_tags();
            }
            inner.no_tags();
            w.uvarint(1);
            w.uvarint(0);
            w.uvarint(inner.0.len() as u64 + 1);
            w.uvarint(1);
            w.0.put_slice(&inner.0);
            w.0.freeze()
        }
    }
}

fn read_classic_member_metadata(
    bytes: &[u8],
) -> Result<Option<ClassicMemberMetadata>, RecordError> {
    let mut r = Reader::new(bytes);
    if r.take(1, "classic member metadata")?[0] == 0xff {
        return Ok(None);
    }
    let session_timeout_ms = r.i32("classic session timeout")?;
    let n = r.array_len("classic protocols", true)?;
    let mut protocols = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let name = r.string("classic protocol name", true)?;
        let metadata = r.bytes_v("classic protocol metadata", true)?;
        r.skip_tagged_fields()?;
        protocols.push((name, metadata));
    }
    r.skip_tagged_fields()?;
    Ok(Some(ClassicMemberMetadata {
        session_timeout_ms,
        protocols,
    }))
}

pub fn decode_member_metadata_value(bytes: &[u8]) -> Result<MemberMetadataValue, RecordError> {
    let mut r = reader(bytes)?;
    let instance_id = r.nullable_string_v("instance id", true)?;
    let rack_id = r.nullable_string_v("rack id", true)?;
    let client_id = r.string("client id", true)?;
    let client_host = r.string("client host", true)?;
    let n = r.array_len("subscribed topic names", true)?;
    let mut subscribed_topic_names = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        subscribed_topic_names.push(r.string("subscribed topic", true)?);
    }
    let subscribed_topic_regex = r.nullable_string_v("subscribed topic regex", true)?;
    let rebalance_timeout_ms = r.i32("rebalance timeout")?;
    let server_assignor = r.nullable_string_v("server assignor", true)?;
    let mut classic = None;
    for _ in 0..r.uvarint("tagged field count")? {
        let tag = r.uvarint("tag")?;
        let size = r.uvarint("tagged field size")? as usize;
        let field = r.take(size, "tagged field")?;
        if tag == 0 {
            classic = read_classic_member_metadata(field)?;
        }
    }
    Ok(MemberMetadataValue {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
    })
}

/// `ConsumerGroupTargetAssignmentMetadataValue`: the epoch of the target assignment.
pub fn encode_target_assignment_metadata_value(assignment_epoch: i32) -> Bytes {
    let mut w = Writer::new();
    w.0.put_i32(assignment_epoch);
    w.finish()
}

pub fn decode_target_assignment_metadata_value(bytes: &[u8]) -> Result<i32, RecordError> {
    let mut r = reader(bytes)?;
    let epoch = r.i32("assignment epoch")?;
    r.skip_tagged_fields()?;
    Ok(epoch)
}

pub fn encode_target_assignment_member_value(a: &Assignment) -> Bytes {
    let mut w = Writer::new();
    w.assignment(a);
    w.finish()
}

pub fn decode_target_assignment_member_value(bytes: &[u8]) -> Result<Assignment, RecordError> {
    let mut r = reader(bytes)?;
    let a = read_assignment(&mut r)?;
    r.skip_tagged_fields()?;
    Ok(a)
}

pub fn encode_current_assignment_value(v: &CurrentAssignmentValue) -> Bytes {
    let mut w = Writer::new();
    w.0.put_i32(v.member_epoch);
    w.0.put_i32(v.previous_member_epoch);
    w.0.put_i8(v.state);
    w.assignment(&v.assigned);
    w.assignment(&v.pending_revocation);
    w.finish()
}

pub fn decode_current_assignment_value(
    bytes: &[u8],
) -> Result<CurrentAssignmentValue, RecordError> {
    let mut r = reader(bytes)?;
    let member_epoch = r.i32("member epoch")?;
    let previous_member_epoch = r.i32("previous member epoch")?;
    let state = r.take(1, "state")?[0] as i8;
    let assigned = read_assignment(&mut r)?;
    let pending_revocation = read_assignment(&mut r)?;
    r.skip_tagged_fields()?;
    Ok(CurrentAssignmentValue {
        member_epoch,
        previous_member_epoch,
        state,
        assigned,
        pending_revocation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::records::{decode_key, RecordKey};

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    #[test]
    fn keys_carry_kafkas_versions_and_decode_back() {
        let k = member_metadata_key("g", "m");
        assert_eq!(&k[..], &[0, 5, 0, 1, b'g', 0, 1, b'm']);
        assert_eq!(
            decode_key(&k).unwrap(),
            RecordKey::Consumer(ConsumerKey::MemberMetadata {
                group: "g".into(),
                member: "m".into()
            })
        );
        for (k, want) in [
            (group_metadata_key("g"), 3),
            (partition_metadata_key("g"), 4),
            (target_assignment_metadata_key("g"), 6),
            (target_assignment_member_key("g", "m"), 7),
            (current_member_assignment_key("g", "m"), 8),
        ] {
            assert_eq!(i16::from_be_bytes([k[0], k[1]]), want);
            assert!(matches!(decode_key(&k).unwrap(), RecordKey::Consumer(c) if c.group() == "g"));
        }
    }

    #[test]
    fn group_epoch_value_layout_is_flexible_v0() {
        let v = encode_group_metadata_value(7);
        // version 0, epoch 7, empty tag section.
        assert_eq!(&v[..], &[0, 0, 0, 0, 0, 7, 0]);
        assert_eq!(decode_group_metadata_value(&v).unwrap(), 7);
    }

    #[test]
    fn values_round_trip() {
        let m = MemberMetadataValue {
            instance_id: Some("i".into()),
            rack_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            subscribed_topic_names: vec!["a".into(), "b".into()],
            subscribed_topic_regex: Some("t.*".into()),
            rebalance_timeout_ms: 300_000,
            server_assignor: Some("range".into()),
            classic: None,
        };
        assert_eq!(
            decode_member_metadata_value(&encode_member_metadata_value(&m)).unwrap(),
            m
        );
        let classic = MemberMetadataValue {
            classic: Some(ClassicMemberMetadata {
                session_timeout_ms: 45_000,
                protocols: vec![
                    ("range".into(), Bytes::from_static(b"\x00\x01")),
                    ("cooperative-sticky".into(), Bytes::new()),
                ],
            }),
            ..m.clone()
        };
        assert_eq!(
            decode_member_metadata_value(&encode_member_metadata_value(&classic)).unwrap(),
            classic
        );
        let a: Assignment = [(topic(1), [0, 2].into()), (topic(2), [1].into())].into();
        assert_eq!(
            decode_target_assignment_member_value(&encode_target_assignment_member_value(&a))
                .unwrap(),
            a
        );
        let c = CurrentAssignmentValue {
            member_epoch: 5,
            previous_member_epoch: 4,
            state: 1,
            assigned: a.clone(),
            pending_revocation: [(topic(3), [9].into())].into(),
        };
        assert_eq!(
            decode_current_assignment_value(&encode_current_assignment_value(&c)).unwrap(),
            c
        );
        let t = vec![TopicMetadata {
            topic_id: topic(4),
            topic_name: "t".into(),
            num_partitions: 12,
        }];
        assert_eq!(
            decode_partition_metadata_value(&encode_partition_metadata_value(&t)).unwrap(),
            t
        );
        assert_eq!(
            decode_target_assignment_metadata_value(&encode_target_assignment_metadata_value(3))
                .unwrap(),
            3
        );
    }

    /// Kafka writes `ClassicMemberMetadata` as tagged field 0 of a nullable struct: the field's
    /// size counts a presence byte (1) before the struct.
    #[test]
    fn classic_member_metadata_is_tagged_field_zero() {
        let v = encode_member_metadata_value(&MemberMetadataValue {
            rebalance_timeout_ms: -1,
            classic: Some(ClassicMemberMetadata {
                session_timeout_ms: 10,
                protocols: vec![("r".into(), Bytes::from_static(b"m"))],
            }),
            ..Default::default()
        });
        // ... rebalance timeout -1, null server assignor, then the tag section.
        let tail: &[u8] = &[
            0xff, 0xff, 0xff, 0xff, 0, // rebalance timeout, null assignor
            1, 0, 12, 1, // one tagged field, tag 0, size 12, present
            0, 0, 0, 10, // session timeout
            2, 2, b'r', 2, b'm', 0, // one protocol: name, metadata, no tags
            0, // the struct's tags
        ];
        assert!(v.ends_with(tail), "{v:?}");
    }

    #[test]
    fn truncated_values_are_errors_not_panics() {
        let v = encode_current_assignment_value(&CurrentAssignmentValue {
            assigned: [(topic(1), [0, 1, 2].into())].into(),
            ..Default::default()
        });
        for cut in 0..v.len() {
            assert!(decode_current_assignment_value(&v[..cut]).is_err());
        }
    }
}
