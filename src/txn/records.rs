//! `__transaction_state` records in Kafka's formats (`TransactionLogKey`,
//! `TransactionLogValue`), so Kafka's tools read our log and a log written by Kafka loads here.
//!
//! ```text
//! key:   version i16 (0), transactional_id string
//! value: version i16 (0, or 1 for clients of transaction version 2), then
//!        producer_id i64, producer_epoch i16, timeout_ms i32, status i8,
//!        partitions [topic string, partition_ids [i32]] (null while Empty),
//!        last_update_timestamp_ms i64, start_timestamp_ms i64
//!        v1 is flexible (compact lengths, tag sections) and carries tagged fields:
//!        0 previous_producer_id i64, 1 next_producer_id i64, 2 client_transaction_version i16
//! ```
//!
//! A null value (tombstone) removes the transactional id (its expiration).

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::state::{TxnState, NO_PRODUCER_ID};
use crate::group::records::{Reader, RecordError};

/// `TransactionLogKey`'s only version.
const KEY_VERSION: i16 = 0;
/// The value version Kafka writes for clients below transaction version 2.
const VALUE_VERSION_V0: i16 = 0;
/// The flexible value version, written for clients of transaction version 2.
const VALUE_VERSION_V1: i16 = 1;

/// What a `__transaction_state` value holds: one transactional id's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// Topic → partitions in the transaction.
    pub partitions: BTreeMap<String, Vec<i32>>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    pub client_transaction_version: i16,
}

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    buf.put_i16(transactional_id.len() as i16);
    buf.put_slice(transactional_id.as_bytes());
    buf.freeze()
}

/// The transactional id of a key; an unknown key version is an error (Kafka skips those).
pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16("key version")?;
    if version != KEY_VERSION {
        return Err(RecordError::UnknownVersion {
            what: "transaction log key",
            version,
        });
    }
    r.string("transactional id", false)
}

fn put_uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_string(buf: &mut BytesMut, s: &str, flexible: bool) {
    if flexible {
        put_uvarint(buf, s.len() as u64 + 1);
    } else {
        buf.put_i16(s.len() as i16);
    }
    buf.put_slice(s.as_bytes());
}

fn put_len(buf: &mut BytesMut, len: Option<usize>, flexible: bool) {
    match (len, flexible) {
        (None, true) => put_uvarint(buf, 0),
        (None, false) => buf.put_i32(-1),
        (Some(n), true) => put_uvarint(buf, n as u64 + 1),
        (Some(n), false) => buf.put_i32(n as i32),
    }
}

pub fn encode_value(v: &TxnLogValue) -> Bytes {
    let flexible = v.client_transaction_version >= 2;
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(if flexible {
        VALUE_VERSION_V1
    } else {
        VALUE_VERSION_V0
    });
    buf.put_i64(v.producer_id);
    buf.put_i16(v.producer_epoch);
    buf.put_i32(v.timeout_ms);
    buf.put_i8(v.state.id());
    if v.state == TxnState::Empty {
        put_len(&mut buf, None, flexible);
    } else {
        put_len(&mut buf, Some(v.partitions.len()), flexible);
        for (topic, partitions) in &v.partitions {
            put_string(&mut buf, topic, flexible);
            put_len(&mut buf, Some(partitions.len()), flexible);
            for p in partitions {
                buf.put_i32(*p);
            }
            if flexible {
                put_uvarint(&mut buf, 0);
            }
        }
    }
    buf.put_i64(v.last_update_ms);
    buf.put_i64(v.start_ms);
    if flexible {
        // Tagged fields at their defaults are left out, as Kafka's generated code does.
        let mut tags: Vec<(u64, Vec<u8>)> = Vec::new();
        if v.previous_producer_id != NO_PRODUCER_ID {
            tags.push((0, v.previous_producer_id.to_be_bytes().to_vec()));
        }
        if v.next_producer_id != NO_PRODUCER_ID {
            tags.push((1, v.next_producer_id.to_be_bytes().to_vec()));
        }
        if v.client_transaction_version != 0 {
            tags.push((2, v.client_transaction_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut buf, tags.len() as u64);
        for (tag, bytes) in tags {
            put_uvarint(&mut buf, tag);
            put_uvarint(&mut buf, bytes.len() as u64);
            buf.put_slice(&bytes);
        }
    }
    buf.freeze()
}

pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16("value version")?;
    if !(VALUE_VERSION_V0..=VALUE_VERSION_V1).contains(&version) {
        return Err(RecordError::UnknownVersion {
            what: "transaction log value",
            version,
        });
    }
    let flexible = version >= 1;
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    let timeout_ms = r.i32("transaction timeout")?;
    let status = r.take(1, "transaction status")?[0] as i8;
    let state = TxnState::from_id(status).ok_or(RecordError::UnknownVersion {
        what: "transaction status",
        version: i16::from(status),
    })?;
    let mut partitions = BTreeMap::new();
    if let Some(topics) = r.len("transaction partitions", flexible, true)? {
        for _ in 0..topics {
            let topic = r.string("topic", flexible)?;
            let n = r.array_len("partition ids", flexible)?;
            let mut ids = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                ids.push(r.i32("partition id")?);
            }
            if flexible {
                r.skip_tagged_fields()?;
            }
            partitions.entry(topic).or_insert_with(Vec::new).extend(ids);
        }
    }
    let last_update_ms = r.i64("last update timestamp")?;
    let start_ms = r.i64("start timestamp")?;
    let mut value = TxnLogValue {
        producer_id,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch,
        timeout_ms,
        state,
        // Kafka ignores the partitions of an Empty transaction.
        partitions: if state == TxnState::Empty {
            BTreeMap::new()
        } else {
            partitions
        },
        last_update_ms,
        start_ms,
        client_transaction_version: 0,
    };
    if flexible {
        let count = r.uvarint("tagged field count")?;
        for _ in 0..count {
            let tag = r.uvarint("tag")?;
            let size = r.uvarint("tagged field size")? as usize;
            let field = r.take(size, "tagged field")?;
            let mut f = Reader::new(field);
            match tag {
                0 => value.previous_producer_id = f.i64("previous producer id")?,
                1 => value.next_producer_id = f.i64("next producer id")?,
                2 => value.client_transaction_version = f.i16("client transaction version")?,
                _ => {}
            }
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(state: TxnState, tv: i16) -> TxnLogValue {
        let mut partitions = BTreeMap::new();
        if state != TxnState::Empty {
            partitions.insert("t".to_owned(), vec![0, 3]);
            partitions.insert("u".to_owned(), vec![1]);
        }
        TxnLogValue {
            producer_id: 1000,
            previous_producer_id: if tv >= 2 { 999 } else { NO_PRODUCER_ID },
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: 7,
            timeout_ms: 60_000,
            state,
            partitions,
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            client_transaction_version: tv,
        }
    }

    #[test]
    fn key_layout_matches_kafka() {
        let key = encode_key("tx");
        assert_eq!(&key[..], &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&key).unwrap(), "tx");
        assert!(decode_key(&[0, 1, 0, 0]).is_err());
    }

    #[test]
    fn value_v0_layout_matches_kafka() {
        let v = value(TxnState::Ongoing, 0);
        let bytes = encode_value(&v);
        let mut expected = vec![0, 0];
        expected.extend_from_slice(&1000i64.to_be_bytes());
        expected.extend_from_slice(&7i16.to_be_bytes());
        expected.extend_from_slice(&60_000i32.to_be_bytes());
        expected.push(1); // Ongoing
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b't']);
        expected.extend_from_slice(&2i32.to_be_bytes());
        expected.extend_from_slice(&0i32.to_be_bytes());
        expected.extend_from_slice(&3i32.to_be_bytes());
        expected.extend_from_slice(&[0, 1, b'u']);
        expected.extend_from_slice(&1i32.to_be_bytes());
        expected.extend_from_slice(&1i32.to_be_bytes());
        expected.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        expected.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&bytes[..], &expected[..]);
        assert_eq!(decode_value(&bytes).unwrap(), v);
    }

    #[test]
    fn every_state_and_version_round_trips() {
        for state in [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
            TxnState::PrepareEpochFence,
        ] {
            for tv in [0, 1, 2] {
                let v = value(state, tv);
                // Below transaction version 2, Kafka writes value v0, which has no field for
                // the client's transaction version.
                let expected = TxnLogValue {
                    client_transaction_version: if tv < 2 { 0 } else { tv },
                    ..v.clone()
                };
                assert_eq!(
                    decode_value(&encode_value(&v)).unwrap(),
                    expected,
                    "{state:?} tv {tv}"
                );
            }
        }
    }

    #[test]
    fn an_empty_transaction_is_written_with_null_partitions() {
        let bytes = encode_value(&value(TxnState::Empty, 0));
        // version, producer id, epoch, timeout, status, then a null array.
        assert_eq!(&bytes[2 + 8 + 2 + 4 + 1..2 + 8 + 2 + 4 + 1 + 4], &[255; 4]);
    }

    #[test]
    fn truncated_or_unknown_values_are_errors() {
        let bytes = encode_value(&value(TxnState::Ongoing, 2));
        for cut in 0..bytes.len() {
            assert!(decode_value(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode_value(&[0, 9]).is_err());
    }
}
