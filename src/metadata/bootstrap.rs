//! Kafka's `bootstrap.checkpoint`: the records `kafka-storage format` leaves in the metadata log
//! directory for the first active controller of a new cluster to write. KafkaIQ takes from it
//! the SCRAM credentials of `kafka-storage format --add-scram 'SCRAM-SHA-256=[name=…,password=…]'`
//! (Kafka's `UserScramCredentialRecord`, api key 11, version 0), so a directory formatted for
//! Kafka bootstraps the same users. Its other records (the feature levels) carry nothing KafkaIQ
//! keeps: its `metadata.version` is fixed.
//!
//! The file is a KRaft snapshot: record batches (magic 2) whose records' values are metadata
//! records framed as an unsigned varint frame version (1), api key and record version, then the
//! record's fields in Kafka's flexible encoding.

use std::path::Path;

use bytes::{Buf, Bytes};
use kafka_protocol::records::RecordBatchDecoder;

use crate::limits::METADATA_STRING_BYTES_MAX;
use crate::metadata::records::MetadataRecord;
use crate::metadata::scram::{ScramMechanism, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN};
use crate::scram::ScramCredential;

/// The file `kafka-storage format` writes in the metadata log directory.
pub const BOOTSTRAP_CHECKPOINT: &str = "bootstrap.checkpoint";

const USER_SCRAM_CREDENTIAL_RECORD: u32 = 11;

/// The bootstrap records of `metadata_dir`'s `bootstrap.checkpoint`; none without the file. A
/// file that cannot be read or decoded is an error naming it: a cluster must not start without
/// the users its operator formatted it with.
pub fn read(metadata_dir: &Path) -> Result<Vec<MetadataRecord>, String> {
    let path = metadata_dir.join(BOOTSTRAP_CHECKPOINT);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    decode(Bytes::from(bytes)).map_err(|e| format!("{}: {e}", path.display()))
}

fn decode(mut bytes: Bytes) -> Result<Vec<MetadataRecord>, String> {
    let sets = RecordBatchDecoder::decode_all(&mut bytes)
        .map_err(|e| format!("undecodable record batches: {e}"))?;
    let mut records = Vec::new();
    for set in sets {
        for record in set.records {
            if record.control {
                continue;
            }
            let Some(value) = record.value else { continue };
            if let Some(r) = decode_record(value)? {
                records.push(r);
            }
        }
    }
    Ok(records)
}

fn unsigned_varint(buf: &mut Bytes) -> Result<u32, String> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        if !buf.has_remaining() {
            return Err("truncated varint".into());
        }
        let byte = buf.get_u8();
        value |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

/// A compact (flexible) byte string: unsigned varint length + 1, then the bytes.
fn compact_bytes(buf: &mut Bytes) -> Result<Bytes, String> {
    let n = unsigned_varint(buf)?
        .checked_sub(1)
        .ok_or("null where bytes are required")? as usize;
    if buf.remaining() < n {
        return Err("truncated bytes".into());
    }
    Ok(buf.split_to(n))
}

fn decode_record(mut value: Bytes) -> Result<Option<MetadataRecord>, String> {
    let _frame_version = unsigned_varint(&mut value)?;
    let api_key = unsigned_varint(&mut value)?;
    let version = unsigned_varint(&mut value)?;
    if api_key != USER_SCRAM_CREDENTIAL_RECORD {
        return Ok(None);
    }
    if version != 0 {
        return Err(format!(
            "UserScramCredentialRecord version {version}, only 0 is known"
        ));
    }
    let user = String::from_utf8(compact_bytes(&mut value)?.to_vec())
        .map_err(|_| "a user name that is not UTF-8")?;
    if !value.has_remaining() {
        return Err("truncated UserScramCredentialRecord".into());
    }
    let code = value.get_i8();
    let mechanism =
        ScramMechanism::from_code(code).ok_or(format!("unknown SCRAM mechanism {code}"))?;
    let salt = compact_bytes(&mut value)?.to_vec();
    let stored_key = compact_bytes(&mut value)?.to_vec();
    let server_key = compact_bytes(&mut value)?.to_vec();
    if value.remaining() < 4 {
        return Err("truncated UserScramCredentialRecord".into());
    }
    let iterations = value.get_i32();
    // What `kafka-storage format` accepts, and what the metadata log can hold: a credential
    // it would refuse must stop startup here, not leave the first controller unable to write
    // the cluster id with it.
    if user.is_empty() || user.len() > METADATA_STRING_BYTES_MAX {
        return Err(format!("a SCRAM user name of {} bytes", user.len()));
    }
    if !(SCRAM_ITERATIONS_MIN..=SCRAM_ITERATIONS_MAX).contains(&iterations) {
        return Err(format!("{iterations} SCRAM iterations for {user}"));
    }
    if salt.len() > METADATA_STRING_BYTES_MAX {
        return Err(format!("a SCRAM salt of {} bytes for {user}", salt.len()));
    }
    for (what, key) in [("stored key", &stored_key), ("server key", &server_key)] {
        if key.len() != mechanism.hash().hash(b"").len() {
            return Err(format!("a SCRAM {what} of {} bytes for {user}", key.len()));
        }
    }
    let iterations = iterations as u32;
    Ok(Some(MetadataRecord::UserScramCredential {
        user,
        mechanism,
        credential: ScramCredential {
            salt,
            iterations,
            stored_key,
            server_key,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::ScramHash;

    /// What Kafka 4.1.1's `kafka-storage format --add-scram
    /// 'SCRAM-SHA-256=[name=alice,password=alice-secret]'` wrote.
    const KAFKA_BOOTSTRAP: &[u8] =
        include_bytes!("../../tests/fixtures/kafka-4.1.1-bootstrap.checkpoint");

    #[test]
    fn kafkas_add_scram_credential_is_read_and_matches_the_password() {
        let records = decode(Bytes::from_static(KAFKA_BOOTSTRAP)).unwrap();
        let [MetadataRecord::UserScramCredential {
            user,
            mechanism,
            credential,
        }] = records.as_slice()
        else {
            panic!("{records:?}")
        };
        assert_eq!(
            (user.as_str(), *mechanism),
            ("alice", ScramMechanism::Sha256)
        );
        // Kafka derived the same keys from the password as KafkaIQ does.
        let ours = ScramCredential::new(
            ScramHash::Sha256,
            "alice-secret",
            credential.salt.clone(),
            credential.iterations,
        );
        assert_eq!(credential.iterations, 4096);
        assert_eq!(*credential, ours);
    }

    /// A UserScramCredentialRecord value as Kafka frames it (frame version 1, api key 11,
    /// version 0, compact strings and bytes, an empty tag section).
    fn scram_record_value(user: &str, salt: &[u8], iterations: i32) -> Bytes {
        scram_record_value_with_key(user, salt, iterations, 32)
    }

    fn scram_record_value_with_key(user: &str, salt: &[u8], iterations: i32, key: usize) -> Bytes {
        let compact = |out: &mut Vec<u8>, b: &[u8]| {
            out.push(b.len() as u8 + 1);
            out.extend_from_slice(b);
        };
        let mut out = vec![1, 11, 0];
        compact(&mut out, user.as_bytes());
        out.push(1);
        compact(&mut out, salt);
        compact(&mut out, &vec![7; key]);
        compact(&mut out, &[8; 32]);
        out.extend_from_slice(&iterations.to_be_bytes());
        out.push(0);
        Bytes::from(out)
    }

    #[test]
    fn a_credential_kafka_would_not_format_is_refused() {
        assert!(decode_record(scram_record_value("alice", b"salt", 4096))
            .unwrap()
            .is_some());
        let e = decode_record(scram_record_value("alice", b"salt", 1000)).unwrap_err();
        assert!(e.contains("1000 SCRAM iterations for alice"), "{e}");
        let e = decode_record(scram_record_value("alice", b"salt", 16385)).unwrap_err();
        assert!(e.contains("16385 SCRAM iterations"), "{e}");
        let e = decode_record(scram_record_value("", b"salt", 4096)).unwrap_err();
        assert!(e.contains("user name of 0 bytes"), "{e}");
        let e = decode_record(scram_record_value_with_key("alice", b"salt", 4096, 1)).unwrap_err();
        assert!(e.contains("stored key of 1 bytes"), "{e}");
    }

    #[test]
    fn no_file_is_no_records_and_a_damaged_one_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        let mut damaged = KAFKA_BOOTSTRAP.to_vec();
        let at = damaged.len() - 40;
        damaged.truncate(at);
        std::fs::write(dir.path().join(BOOTSTRAP_CHECKPOINT), damaged).unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(e.contains(BOOTSTRAP_CHECKPOINT), "{e}");
    }
}
