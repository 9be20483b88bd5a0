//! The embedded consumer protocol of classic groups (`protocol_type` "consumer"): the
//! `ConsumerProtocolSubscription` a member puts in JoinGroup and the
//! `ConsumerProtocolAssignment` the leader hands out in SyncGroup (Kafka's
//! `clients/src/main/resources/common/message/ConsumerProtocol*.json`, versions 0–3, not
//! flexible, each starting with an `int16` version).
//!
//! The coordinator reads them only where it must understand a classic member: when a classic
//! group converts to a consumer group and back, and when a classic member lives inside a
//! consumer group, whose assignment the broker then computes. The bytes come from clients, so
//! every length is checked against the bytes present before anything is allocated.

use bytes::{BufMut, Bytes, BytesMut};

use super::records::{Reader, RecordError};

/// The newest version of both structures.
pub const HIGHEST_VERSION: i16 = 3;

/// Partitions by topic name, in the order they were written.
pub type TopicPartitions = Vec<(String, Vec<i32>)>;

/// A `ConsumerProtocolSubscription`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// What the member holds (v1+; empty before, and for an eager member that revoked
    /// everything before it rejoined).
    pub owned_partitions: TopicPartitions,
    pub rack_id: Option<String>,
}

fn topic_partitions(r: &mut Reader<'_>) -> Result<TopicPartitions, RecordError> {
    let n = r.array_len("topic partitions", false)?;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let topic = r.string("topic", false)?;
        let count = r.array_len("partitions", false)?;
        let mut partitions = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            partitions.push(r.i32("partition")?);
        }
        out.push((topic, partitions));
    }
    Ok(out)
}

fn nullable_bytes(r: &mut Reader<'_>, what: &'static str) -> Result<(), RecordError> {
    if let Some(n) = r.len(what, false, true)? {
        r.take(n, what)?;
    }
    Ok(())
}

/// The version a subscription or assignment is written in.
pub fn version(bytes: &[u8]) -> Result<i16, RecordError> {
    let v = Reader::new(bytes).i16("consumer protocol version")?;
    if v < 0 {
        return Err(RecordError::UnknownVersion {
            what: "consumer protocol",
            version: v,
        });
    }
    Ok(v)
}

/// Parses a subscription. A version above [`HIGHEST_VERSION`] is read as the highest one (its
/// extra fields come after), as Kafka's clients do.
pub fn parse_subscription(bytes: &[u8]) -> Result<Subscription, RecordError> {
    let version = version(bytes)?;
    let mut r = Reader::new(&bytes[2..]);
    let n = r.array_len("subscribed topics", false)?;
    let mut topics = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        topics.push(r.string("subscribed topic", false)?);
    }
    nullable_bytes(&mut r, "user data")?;
    let mut sub = Subscription {
        version,
        topics,
        ..Default::default()
    };
    if version >= 1 {
        sub.owned_partitions = topic_partitions(&mut r)?;
    }
    if version >= 2 {
        r.i32("generation id")?;
    }
    if version >= 3 {
        sub.rack_id = r.nullable_string_v("rack id", false)?;
    }
    Ok(sub)
}

/// The partitions of an assignment.
pub fn parse_assignment(bytes: &[u8]) -> Result<TopicPartitions, RecordError> {
    if bytes.is_empty() {
        // A member the leader left out of its SyncGroup.
        return Ok(Vec::new());
    }
    version(bytes)?;
    topic_partitions(&mut Reader::new(&bytes[2..]))
}

/// An assignment in `version` (clamped to what this module writes), with no user data.
pub fn encode_assignment(version: i16, partitions: &TopicPartitions) -> Bytes {
    let mut buf = BytesMut::with_capacity(16 + partitions.len() * 24);
    buf.put_i16(version.clamp(0, HIGHEST_VERSION));
    buf.put_i32(partitions.len() as i32);
    for (topic, ps) in partitions {
        buf.put_i16(topic.len() as i16);
        buf.put_slice(topic.as_bytes());
        buf.put_i32(ps.len() as i32);
        for p in ps {
            buf.put_i32(*p);
        }
    }
    // Null user data.
    buf.put_i32(-1);
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v3 subscription as Kafka's `ConsumerProtocol.serializeSubscription` lays it out.
    fn v3_subscription() -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(3);
        b.put_i32(2);
        for t in ["a", "bb"] {
            b.put_i16(t.len() as i16);
            b.put_slice(t.as_bytes());
        }
        b.put_i32(3); // user data
        b.put_slice(b"xyz");
        b.put_i32(1); // owned partitions
        b.put_i16(1);
        b.put_slice(b"a");
        b.put_i32(2);
        b.put_i32(0);
        b.put_i32(4);
        b.put_i32(7); // generation id
        b.put_i16(2);
        b.put_slice(b"r1");
        b.to_vec()
    }

    #[test]
    fn subscriptions_of_every_version_parse() {
        let s = parse_subscription(&v3_subscription()).unwrap();
        assert_eq!(s.version, 3);
        assert_eq!(s.topics, vec!["a".to_string(), "bb".to_string()]);
        assert_eq!(s.owned_partitions, vec![("a".to_string(), vec![0, 4])]);
        assert_eq!(s.rack_id.as_deref(), Some("r1"));

        // v0: topics and user data only.
        let mut v0 = BytesMut::new();
        v0.put_i16(0);
        v0.put_i32(1);
        v0.put_i16(1);
        v0.put_slice(b"t");
        v0.put_i32(-1);
        let s = parse_subscription(&v0).unwrap();
        assert_eq!((s.version, s.topics.len()), (0, 1));
        assert!(s.owned_partitions.is_empty() && s.rack_id.is_none());
    }

    #[test]
    fn truncated_or_hostile_bytes_are_errors_not_allocations() {
        let full = v3_subscription();
        for cut in 0..full.len() {
            assert!(parse_subscription(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = BytesMut::new();
        huge.put_i16(0);
        huge.put_i32(i32::MAX);
        assert!(parse_subscription(&huge).is_err());
        assert!(parse_assignment(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn assignments_round_trip() {
        let parts = vec![("a".to_string(), vec![1, 2]), ("b".to_string(), vec![0])];
        let bytes = encode_assignment(1, &parts);
        assert_eq!(version(&bytes).unwrap(), 1);
        assert_eq!(parse_assignment(&bytes).unwrap(), parts);
        assert_eq!(version(&encode_assignment(9, &parts)).unwrap(), 3);
        assert!(parse_assignment(&[]).unwrap().is_empty());
    }
}
