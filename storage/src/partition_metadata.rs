//! `partition.metadata`: the topic id of the topic a partition directory belongs to, as Kafka
//! writes it (`PartitionMetadataFile`):
//!
//! ```text
//! version: 0
//! topic_id: <22 characters of URL-safe base64, no padding>
//! ```
//!
//! A directory is found by its name alone (`<topic>-<partition>`), and a topic deleted and
//! created again under the same name has the same directory name. The id tells the two
//! incarnations apart: a log whose id differs from the metadata image's topic id belongs to a
//! deleted topic and is never served.

use std::io;
use std::path::Path;

pub const FILE_NAME: &str = "partition.metadata";
const VERSION: &str = "0";

/// The topic id recorded in `dir`, `None` when the file does not exist (a log written before
/// the file was kept, or one whose creation stopped before it was written).
pub fn read(dir: &Path) -> io::Result<Option<u128>> {
    let text = match std::fs::read_to_string(dir.join(FILE_NAME)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse(&text).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("malformed {FILE_NAME} in {}: {text:?}", dir.display()),
        )
    })
}

fn parse(text: &str) -> Option<u128> {
    let mut lines = text.lines();
    let version = lines.next()?.strip_prefix("version:")?.trim();
    if version != VERSION {
        return None;
    }
    decode_uuid(lines.next()?.strip_prefix("topic_id:")?.trim())
}

/// Writes `dir/partition.metadata` durably (temporary file, fsync, rename, fsync of the dir).
pub fn write(dir: &Path, topic_id: u128) -> io::Result<()> {
    let text = format!("version: {VERSION}\ntopic_id: {}\n", encode_uuid(topic_id));
    crate::checkpoint::write_atomically(&dir.join(FILE_NAME), text.as_bytes())
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka's `Uuid.toString`: the 16 bytes in URL-safe base64 without padding (22 characters).
pub fn encode_uuid(id: u128) -> String {
    let bytes = id.to_be_bytes();
    let mut out = String::with_capacity(22);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 63) as usize] as char);
        }
    }
    // 128 bits leave 2: padded with zero bits to a last character.
    out.push(ALPHABET[((acc << (6 - bits)) & 63) as usize] as char);
    out
}

/// Kafka's `Uuid.fromString`: 22 characters of URL-safe base64 without padding, 16 bytes.
pub fn decode_uuid(text: &str) -> Option<u128> {
    if text.len() != 22 {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(17);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Like Java's base64 decoder, the 4 bits left over after the 16th byte are ignored.
    let bytes: [u8; 16] = out.try_into().ok()?;
    Some(u128::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_file_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        let id = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210u128;
        write(dir.path(), id).unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(text, "version: 0\ntopic_id: ASNFZ4mrze_-3LqYdlQyEA\n");
        assert_eq!(read(dir.path()).unwrap(), Some(id));
    }

    #[test]
    fn a_malformed_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "version: 7\ntopic_id: x\n").unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(e.to_string().contains(FILE_NAME), "{e}");
    }

    #[test]
    fn uuids_encode_as_kafka_prints_them() {
        assert_eq!(encode_uuid(0), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(decode_uuid("AAAAAAAAAAAAAAAAAAAAAA"), Some(0));
        assert_eq!(decode_uuid("AAAAAAAAAAAAAAAAAAAAAQ"), Some(1 << 0));
        assert_eq!(encode_uuid(1), "AAAAAAAAAAAAAAAAAAAAAQ");
        assert_eq!(decode_uuid("too-short"), None);
    }
}
