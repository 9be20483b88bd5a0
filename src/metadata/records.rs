//! Metadata records and their binary encoding.
//!
//! Encoding of one record: a type byte, then every field in order, always (no versions, no
//! optional fields: a record's layout is fixed by its type byte). Integers big-endian; a string
//! is a u16 length and UTF-8 bytes; an optional string uses length 0xFFFF for "absent"; a list of
//! node ids is a u16 count and i32s; a UUID is 16 bytes; a flag set is one byte whose unknown bits
//! are refused. Decoding checks every length against the bytes present before using it, so a
//! corrupt log can only fail to decode, never allocate wildly.
//!
//! Type bytes: 2 topic, 4 topic config, 5 broker config, 6 topic removal, 7 producer ids,
//! 8 broker registration, 9 partition, 10 broker registration change, 11 cluster id, 12 partition
//! being reassigned, 13 change cause, 14 partition history, 27 load move reason (of the change
//! cause before it: ratio to the mean in thousandths u32, dimension u8, the partition's rate
//! u64, rack flag u8: 0 no racks, 1 same rack, 2 another), 28 partition history whose changes
//! carry load move reasons, 23 ACL (Kafka's
//! `AccessControlEntryRecord`, whose api key it shares: id, resource type, name, pattern type,
//! principal, host, operation, permission; the enums as Kafka's codes), 24 ACL removal (Kafka's
//! `RemoveAccessControlEntryRecord`: the id), 25 SCRAM credential (Kafka's
//! `UserScramCredentialRecord`: user, mechanism code, salt, stored key, server key, iterations;
//! byte strings as a u16 length and the bytes), 26 SCRAM credential removal (Kafka's
//! `RemoveUserScramCredentialRecord`: user, mechanism code). Types 1 and 3 held the single-node broker and partition layouts; they are
//! retired, so a log written before the cluster shapes fails to decode rather than being read as
//! something else.
//!
//! A partition is written as type 9 when no reassignment is in progress and as type 12 (type 9's
//! fields, then the adding and the removing replicas) while one is: logs and snapshots without
//! reassignments keep the layout they had before reassignments existed. Likewise a partition's
//! history is type 14 unless a change in it has a load move reason, then type 28 (each change
//! followed by a presence byte and, when 1, its reason).

use uuid::Uuid;

use crate::limits::METADATA_STRING_BYTES_MAX;
use crate::metadata::acl::{Acl, AclOperation, AclPermissionType, PatternType, ResourceType};
use crate::metadata::history::{LoadDimension, LoadMoveReason};
use crate::metadata::scram::ScramMechanism;
use crate::metadata::{
    BrokerRegistration, CauseKind, ChangeCause, Endpoint, LeaderRecoveryState, LeadershipChange,
    PartitionRegistration,
};
use crate::scram::ScramCredential;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    /// The cluster's id, written once by the first quorum leader.
    ClusterId {
        cluster_id: String,
    },
    /// A broker incarnation's whole registration (Kafka's `RegisterBrokerRecord`); replaces any
    /// earlier registration of the node.
    RegisterBroker(BrokerRegistration),
    /// Fences or unfences a broker, or marks its controlled shutdown (Kafka's
    /// `BrokerRegistrationChangeRecord`, which subsumes `FenceBrokerRecord` and
    /// `UnfenceBrokerRecord`). `None` leaves a flag as it is. Applies only while the broker's
    /// epoch is `broker_epoch`: a change meant for a replaced incarnation does nothing.
    BrokerRegistrationChange {
        node_id: i32,
        broker_epoch: i64,
        fenced: Option<bool>,
        in_controlled_shutdown: Option<bool>,
    },
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
    /// Why the partition records after it are written (`metadata::history`): every decision that
    /// changes partitions writes one first.
    ChangeCause(ChangeCause),
    /// Why the load balancer made the [`MetadataRecord::ChangeCause`] before it, stamped with
    /// it on the partition change that follows.
    LoadMoveReason(LoadMoveReason),
    /// A partition's whole recent history, replacing what replay made of it: a snapshot's copy.
    PartitionHistory {
        topic_id: Uuid,
        partition: i32,
        changes: Vec<LeadershipChange>,
    },
    /// A block of producer ids was handed to `broker_id`; ids below `next_block_start` are
    /// never handed out again.
    ProducerIds {
        broker_id: i32,
        next_block_start: i64,
    },
    /// One ACL, by its id (Kafka's `AccessControlEntryRecord`).
    AccessControlEntry {
        id: Uuid,
        acl: Acl,
    },
    /// Removes the ACL of this id (Kafka's `RemoveAccessControlEntryRecord`).
    RemoveAccessControlEntry {
        id: Uuid,
    },
    /// Sets a user's credential for one SCRAM mechanism (Kafka's `UserScramCredentialRecord`).
    UserScramCredential {
        user: String,
        mechanism: ScramMechanism,
        credential: ScramCredential,
    },
    /// Removes a user's credential for one SCRAM mechanism (Kafka's
    /// `RemoveUserScramCredentialRecord`).
    RemoveUserScramCredential {
        user: String,
        mechanism: ScramMechanism,
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
    fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn i16(&mut self, v: i16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    /// An optional flag change: 0 = unchanged, 1 = set, 2 = cleared.
    fn change(&mut self, v: Option<bool>) {
        self.u8(match v {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        });
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
    fn bytes(&mut self, b: &[u8]) {
        if self.len("byte string", b.len()) {
            self.out.extend_from_slice(b);
        }
    }
    fn opt_string(&mut self, s: &Option<String>) {
        match s {
            Some(s) => self.string(s),
            None => self.out.extend_from_slice(&ABSENT.to_be_bytes()),
        }
    }
    fn cause(&mut self, c: &ChangeCause) {
        self.u8(c.kind.to_wire());
        self.i32(c.broker_id);
        self.i64(c.time_ms);
    }
    fn load_move(&mut self, m: &LoadMoveReason) {
        self.out.extend_from_slice(&m.ratio_milli.to_be_bytes());
        self.u8(m.dimension.to_wire());
        self.out.extend_from_slice(&m.rate.to_be_bytes());
        self.u8(match m.same_rack {
            None => 0,
            Some(true) => 1,
            Some(false) => 2,
        });
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
    fn i16(&mut self) -> Result<i16, RecordDecodeError> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, RecordDecodeError> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, RecordDecodeError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn change(&mut self) -> Result<Option<bool>, RecordDecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(true)),
            2 => Ok(Some(false)),
            _ => Err(RecordDecodeError("bad flag change")),
        }
    }
    fn recovery_state(&mut self) -> Result<LeaderRecoveryState, RecordDecodeError> {
        LeaderRecoveryState::from_wire(self.u8()? as i8)
            .ok_or(RecordDecodeError("bad leader recovery state"))
    }
    fn listeners(
        &mut self,
    ) -> Result<std::collections::BTreeMap<String, Endpoint>, RecordDecodeError> {
        let n = self.u16()? as usize;
        // Each listener takes at least 8 bytes (two empty strings, a port, a protocol).
        if self.0.len() < n * 8 {
            return Err(RecordDecodeError("truncated listener list"));
        }
        let mut listeners = std::collections::BTreeMap::new();
        for _ in 0..n {
            let name = self.string()?;
            let endpoint = Endpoint {
                host: self.string()?,
                port: self.u16()?,
                security_protocol: self.i16()?,
            };
            if listeners.insert(name, endpoint).is_some() {
                return Err(RecordDecodeError("duplicate listener"));
            }
        }
        Ok(listeners)
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
    fn bytes(&mut self) -> Result<Vec<u8>, RecordDecodeError> {
        let n = self.u16()?;
        if n == ABSENT {
            return Err(RecordDecodeError("absent byte string"));
        }
        Ok(self.take(n as usize)?.to_vec())
    }
    fn scram_mechanism(&mut self) -> Result<ScramMechanism, RecordDecodeError> {
        ScramMechanism::from_code(self.u8()? as i8)
            .ok_or(RecordDecodeError("unknown SCRAM mechanism"))
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
    fn load_move(&mut self) -> Result<LoadMoveReason, RecordDecodeError> {
        Ok(LoadMoveReason {
            ratio_milli: u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")),
            dimension: LoadDimension::from_wire(self.u8()?)
                .ok_or(RecordDecodeError("bad load dimension"))?,
            rate: u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")),
            same_rack: match self.u8()? {
                0 => None,
                1 => Some(true),
                2 => Some(false),
                _ => return Err(RecordDecodeError("bad rack flag")),
            },
        })
    }
    fn cause(&mut self) -> Result<ChangeCause, RecordDecodeError> {
        Ok(ChangeCause {
            kind: CauseKind::from_wire(self.u8()?).ok_or(RecordDecodeError("bad cause"))?,
            broker_id: self.i32()?,
            time_ms: self.i64()?,
        })
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
            MetadataRecord::ClusterId { cluster_id } => {
                w.u8(11);
                w.string(cluster_id);
            }
            MetadataRecord::RegisterBroker(b) => {
                w.u8(8);
                w.i32(b.node_id);
                w.uuid(&b.incarnation_id);
                w.i64(b.broker_epoch);
                if w.len("listener list", b.listeners.len()) {
                    for (name, e) in &b.listeners {
                        w.string(name);
                        w.string(&e.host);
                        w.u16(e.port);
                        w.i16(e.security_protocol);
                    }
                }
                w.opt_string(&b.rack);
                w.u8(u8::from(b.fenced) | (u8::from(b.in_controlled_shutdown) << 1));
                w.u64(b.registration_offset);
            }
            MetadataRecord::BrokerRegistrationChange {
                node_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
            } => {
                w.u8(10);
                w.i32(*node_id);
                w.i64(*broker_epoch);
                w.change(*fenced);
                w.change(*in_controlled_shutdown);
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
                w.u8(if r.is_reassigning() { 12 } else { 9 });
                w.uuid(topic_id);
                w.i32(*partition);
                w.ids(&r.replicas);
                w.ids(&r.isr);
                w.i32(r.leader);
                w.i32(r.leader_epoch);
                w.i32(r.partition_epoch);
                w.u8(r.leader_recovery_state.to_wire() as u8);
                if r.is_reassigning() {
                    w.ids(&r.adding_replicas);
                    w.ids(&r.removing_replicas);
                }
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
            MetadataRecord::ChangeCause(c) => {
                w.u8(13);
                w.cause(c);
            }
            MetadataRecord::LoadMoveReason(reason) => {
                w.u8(27);
                w.load_move(reason);
            }
            MetadataRecord::PartitionHistory {
                topic_id,
                partition,
                changes,
            } => {
                let reasons = changes.iter().any(|c| c.load_move.is_some());
                w.u8(if reasons { 28 } else { 14 });
                w.uuid(topic_id);
                w.i32(*partition);
                if w.len("history", changes.len()) {
                    for c in changes {
                        w.cause(&c.cause);
                        w.i32(c.leader_before);
                        w.i32(c.leader);
                        w.i32(c.leader_epoch);
                        w.ids(&c.isr_before);
                        w.ids(&c.isr);
                        if reasons {
                            match &c.load_move {
                                Some(m) => {
                                    w.u8(1);
                                    w.load_move(m);
                                }
                                None => w.u8(0),
                            }
                        }
                    }
                }
            }
            MetadataRecord::ProducerIds {
                broker_id,
                next_block_start,
            } => {
                w.u8(7);
                w.i32(*broker_id);
                w.i64(*next_block_start);
            }
            MetadataRecord::AccessControlEntry { id, acl } => {
                w.u8(23);
                w.uuid(id);
                w.u8(acl.resource_type.code() as u8);
                w.string(&acl.resource_name);
                w.u8(acl.pattern_type.code() as u8);
                w.string(&acl.principal);
                w.string(&acl.host);
                w.u8(acl.operation.code() as u8);
                w.u8(acl.permission_type.code() as u8);
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                w.u8(24);
                w.uuid(id);
            }
            MetadataRecord::UserScramCredential {
                user,
                mechanism,
                credential,
            } => {
                w.u8(25);
                w.string(user);
                w.u8(mechanism.code() as u8);
                w.bytes(&credential.salt);
                w.bytes(&credential.stored_key);
                w.bytes(&credential.server_key);
                w.i32(credential.iterations as i32);
            }
            MetadataRecord::RemoveUserScramCredential { user, mechanism } => {
                w.u8(26);
                w.string(user);
                w.u8(mechanism.code() as u8);
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
            8 => {
                let node_id = r.i32()?;
                let incarnation_id = r.uuid()?;
                let broker_epoch = r.i64()?;
                let listeners = r.listeners()?;
                let rack = r.opt_string()?;
                let flags = r.u8()?;
                if flags > 0b11 {
                    return Err(RecordDecodeError("bad broker flags"));
                }
                MetadataRecord::RegisterBroker(BrokerRegistration {
                    node_id,
                    incarnation_id,
                    broker_epoch,
                    listeners,
                    rack,
                    fenced: flags & 1 != 0,
                    in_controlled_shutdown: flags & 2 != 0,
                    registration_offset: r.u64()?,
                })
            }
            10 => MetadataRecord::BrokerRegistrationChange {
                node_id: r.i32()?,
                broker_epoch: r.i64()?,
                fenced: r.change()?,
                in_controlled_shutdown: r.change()?,
            },
            11 => MetadataRecord::ClusterId {
                cluster_id: r.string()?,
            },
            2 => MetadataRecord::Topic {
                name: r.string()?,
                topic_id: r.uuid()?,
            },
            kind @ (9 | 12) => {
                let topic_id = r.uuid()?;
                let partition = r.i32()?;
                let mut registration = PartitionRegistration {
                    replicas: r.ids()?,
                    isr: r.ids()?,
                    leader: r.i32()?,
                    leader_epoch: r.i32()?,
                    partition_epoch: r.i32()?,
                    leader_recovery_state: r.recovery_state()?,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                };
                if kind == 12 {
                    registration.adding_replicas = r.ids()?;
                    registration.removing_replicas = r.ids()?;
                    if !registration.is_reassigning() {
                        return Err(RecordDecodeError(
                            "reassigning partition without a reassignment",
                        ));
                    }
                }
                MetadataRecord::Partition {
                    topic_id,
                    partition,
                    registration,
                }
            }
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
            13 => MetadataRecord::ChangeCause(r.cause()?),
            27 => MetadataRecord::LoadMoveReason(r.load_move()?),
            ty @ (14 | 28) => {
                let topic_id = r.uuid()?;
                let partition = r.i32()?;
                let n = r.u16()? as usize;
                // Each change takes at least 29 bytes (a cause, three ids, two empty lists).
                if r.0.len() < n * 29 {
                    return Err(RecordDecodeError("truncated history"));
                }
                let mut changes = Vec::with_capacity(n);
                for _ in 0..n {
                    changes.push(LeadershipChange {
                        cause: r.cause()?,
                        leader_before: r.i32()?,
                        leader: r.i32()?,
                        leader_epoch: r.i32()?,
                        isr_before: r.ids()?,
                        isr: r.ids()?,
                        load_move: match (ty, if ty == 28 { r.u8()? } else { 0 }) {
                            (_, 0) => None,
                            (_, 1) => Some(r.load_move()?),
                            _ => return Err(RecordDecodeError("bad load move presence")),
                        },
                    });
                }
                MetadataRecord::PartitionHistory {
                    topic_id,
                    partition,
                    changes,
                }
            }
            7 => MetadataRecord::ProducerIds {
                broker_id: r.i32()?,
                next_block_start: r.i64()?,
            },
            23 => MetadataRecord::AccessControlEntry {
                id: r.uuid()?,
                acl: Acl {
                    resource_type: ResourceType::from_code(r.u8()? as i8),
                    resource_name: r.string()?,
                    pattern_type: PatternType::from_code(r.u8()? as i8),
                    principal: r.string()?,
                    host: r.string()?,
                    operation: AclOperation::from_code(r.u8()? as i8),
                    permission_type: AclPermissionType::from_code(r.u8()? as i8),
                },
            },
            24 => MetadataRecord::RemoveAccessControlEntry { id: r.uuid()? },
            25 => MetadataRecord::UserScramCredential {
                user: r.string()?,
                mechanism: r.scram_mechanism()?,
                credential: ScramCredential {
                    salt: r.bytes()?,
                    stored_key: r.bytes()?,
                    server_key: r.bytes()?,
                    iterations: u32::try_from(r.i32()?)
                        .map_err(|_| RecordDecodeError("negative SCRAM iterations"))?,
                },
            },
            26 => MetadataRecord::RemoveUserScramCredential {
                user: r.string()?,
                mechanism: r.scram_mechanism()?,
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
            MetadataRecord::ClusterId {
                cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            },
            MetadataRecord::RegisterBroker(BrokerRegistration {
                broker_epoch: 12,
                in_controlled_shutdown: true,
                registration_offset: 12,
                ..BrokerRegistration::new(1, Uuid::from_u128(9), Some("r".into()))
                    .with_listener("PLAINTEXT", "h", 9092, 0)
                    .with_listener("INTERNAL", "i", 9093, 1)
            }),
            MetadataRecord::RegisterBroker(BrokerRegistration::new(2, Uuid::from_u128(8), None)),
            MetadataRecord::BrokerRegistrationChange {
                node_id: 1,
                broker_epoch: 12,
                fenced: Some(false),
                in_controlled_shutdown: None,
            },
            MetadataRecord::BrokerRegistrationChange {
                node_id: 1,
                broker_epoch: 12,
                fenced: Some(true),
                in_controlled_shutdown: Some(false),
            },
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
                    leader_recovery_state: LeaderRecoveryState::Recovering,
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                },
            },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 4,
                registration: PartitionRegistration {
                    replicas: vec![3, 2, 1],
                    isr: vec![1, 2],
                    leader: 1,
                    leader_epoch: 4,
                    partition_epoch: 10,
                    leader_recovery_state: LeaderRecoveryState::Recovered,
                    adding_replicas: vec![3],
                    removing_replicas: vec![1],
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
            MetadataRecord::AccessControlEntry {
                id: Uuid::from_u128(0xac1),
                acl: Acl {
                    resource_type: ResourceType::TransactionalId,
                    resource_name: "tx-".into(),
                    pattern_type: PatternType::Prefixed,
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: AclOperation::IdempotentWrite,
                    permission_type: AclPermissionType::Deny,
                },
            },
            MetadataRecord::RemoveAccessControlEntry {
                id: Uuid::from_u128(0xac1),
            },
            MetadataRecord::UserScramCredential {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha512,
                credential: ScramCredential {
                    salt: vec![1, 2, 3],
                    iterations: 8192,
                    stored_key: vec![4; 64],
                    server_key: vec![5; 64],
                },
            },
            MetadataRecord::RemoveUserScramCredential {
                user: "alice".into(),
                mechanism: ScramMechanism::Sha256,
            },
            MetadataRecord::ChangeCause(ChangeCause {
                kind: CauseKind::ControlledShutdown,
                broker_id: 3,
                time_ms: 1_764_000_000_000,
            }),
            MetadataRecord::LoadMoveReason(LoadMoveReason {
                ratio_milli: 1_800,
                dimension: LoadDimension::Requests,
                rate: 95,
                same_rack: None,
            }),
            // Type 28: a change with its reason beside one without.
            MetadataRecord::PartitionHistory {
                topic_id: id,
                partition: 1,
                changes: vec![
                    LeadershipChange {
                        cause: ChangeCause {
                            kind: CauseKind::LoadBalance,
                            broker_id: 1,
                            time_ms: 9,
                        },
                        load_move: Some(LoadMoveReason {
                            ratio_milli: 1_250,
                            dimension: LoadDimension::BytesOut,
                            rate: 12_000_000,
                            same_rack: Some(false),
                        }),
                        leader_before: 1,
                        leader: 2,
                        leader_epoch: 3,
                        isr_before: vec![1, 2],
                        isr: vec![1, 2],
                    },
                    LeadershipChange {
                        cause: ChangeCause::UNKNOWN,
                        load_move: None,
                        leader_before: 2,
                        leader: 1,
                        leader_epoch: 4,
                        isr_before: vec![1, 2],
                        isr: vec![1, 2],
                    },
                ],
            },
            MetadataRecord::PartitionHistory {
                topic_id: id,
                partition: 2,
                changes: vec![
                    LeadershipChange {
                        cause: ChangeCause::UNKNOWN,
                        load_move: None,
                        leader_before: -1,
                        leader: 1,
                        leader_epoch: 0,
                        isr_before: vec![],
                        isr: vec![1, 2],
                    },
                    LeadershipChange {
                        cause: ChangeCause {
                            kind: CauseKind::BrokerFenced,
                            broker_id: 1,
                            time_ms: 5,
                        },
                        load_move: None,
                        leader_before: 1,
                        leader: 2,
                        leader_epoch: 1,
                        isr_before: vec![1, 2],
                        isr: vec![2],
                    },
                ],
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
        let mut bytes = vec![9u8];
        bytes.extend_from_slice(&[0; 16]);
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.extend_from_slice(&u16::MAX.to_be_bytes());
        assert!(MetadataRecord::decode_all(&bytes).is_err());
    }

    #[test]
    fn a_partition_keeps_its_layout_unless_it_is_being_reassigned() {
        let registration = PartitionRegistration {
            replicas: vec![1, 2],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        let record = |registration| MetadataRecord::Partition {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            registration,
        };
        let mut plain = Vec::new();
        record(registration.clone()).encode(&mut plain).unwrap();
        // Type 9: id, partition, two lists of two, leader, two epochs, the state.
        assert_eq!(
            (plain[0], plain.len()),
            (9, 1 + 16 + 4 + 2 * (2 + 8) + 12 + 1)
        );
        let mut moving = Vec::new();
        let reassigning = PartitionRegistration {
            replicas: vec![2, 3, 1],
            adding_replicas: vec![3],
            removing_replicas: vec![1],
            ..registration
        };
        record(reassigning.clone()).encode(&mut moving).unwrap();
        assert_eq!(moving[0], 12);
        assert_eq!(
            MetadataRecord::decode_all(&moving).unwrap(),
            vec![record(reassigning)]
        );
        // Type 12 with nothing being reassigned is not a layout the encoder writes.
        let mut empty = plain.clone();
        empty[0] = 12;
        empty.extend_from_slice(&[0, 0, 0, 0]);
        assert!(MetadataRecord::decode_all(&empty).is_err());
    }

    #[test]
    fn retired_types_and_unknown_flags_are_refused() {
        // The single-node broker layout (type 1) no longer decodes.
        let mut old = vec![1u8];
        old.extend_from_slice(&1i32.to_be_bytes());
        assert!(MetadataRecord::decode_all(&old).is_err());
        let mut bytes = Vec::new();
        MetadataRecord::RegisterBroker(BrokerRegistration::new(1, Uuid::from_u128(1), None))
            .encode(&mut bytes)
            .unwrap();
        // The flags byte sits before the trailing 8-byte offset.
        let flags_at = bytes.len() - 9;
        bytes[flags_at] = 0b100;
        assert!(MetadataRecord::decode_all(&bytes).is_err());
        let huge_listeners = [8u8, 0, 0, 0, 1]
            .into_iter()
            .chain([0u8; 16])
            .chain([0u8; 8])
            .chain(u16::MAX.to_be_bytes())
            .collect::<Vec<u8>>();
        assert!(MetadataRecord::decode_all(&huge_listeners).is_err());
    }
}
