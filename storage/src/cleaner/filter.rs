//! Rewrites one batch keeping the records a cleaning retains (Kafka's `MemoryRecords.filterTo`).
//!
//! A retained batch keeps its base offset and its last offset (so a producer's last sequence
//! survives), its producer id, epoch and base sequence, its leader epoch, its flags and its
//! codec: a compressed batch is decompressed, filtered and compressed again with the same codec
//! (snappy in the framing it came in). A batch whose records are all kept is copied unchanged,
//! unless it holds a tombstone and no delete horizon yet: the first cleaning that reaches a
//! tombstone stamps `now + delete.retention.ms` on its batch, and a later cleaning past that
//! time removes it (KIP-534). A batch the caller must keep for its header alone is written
//! empty (no records, uncompressed), as Kafka keeps the last batch of an active producer.

use crate::batch::{
    self, put_varint, read_varint, BatchHeader, ATTRIBUTES_OFFSET, CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK, LOG_OVERHEAD, MAGIC_V2, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
use crate::compression;
use crate::config::TimestampType;
use crate::error::{Result, StorageError};

/// What happens to a batch whose records are all removed (Kafka's `BatchRetention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRetention {
    /// Removed with all its records, unread.
    Delete,
    /// Records filtered; removed if none is left.
    DeleteEmpty,
    /// Records filtered; kept as an empty batch if none is left.
    RetainEmpty,
}

/// One record of a batch being filtered.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub offset: i64,
    /// The record's timestamp (the batch's max timestamp under LogAppendTime).
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// False for a tombstone.
    pub has_value: bool,
    /// The timestamp as stored (base timestamp + delta), kept as is when re-encoded.
    stored_timestamp: i64,
    attributes: u8,
    offset_delta: i64,
    /// The record from its key length on (key, value, headers), copied as is.
    tail: &'a [u8],
    /// The whole record with its length prefix.
    raw: &'a [u8],
}

/// What filtering one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Filtered {
    pub records_read: usize,
    pub records_kept: usize,
    /// The header of the batch written to the output, if one was.
    pub written: Option<BatchHeader>,
}

fn invalid(what: &str, header: &BatchHeader) -> StorageError {
    StorageError::CorruptRecord(format!("batch at offset {}: {what}", header.base_offset))
}

/// Parses the records of a (decompressed) records section.
pub fn parse_records<'a>(records: &'a [u8], header: &BatchHeader) -> Result<Vec<Record<'a>>> {
    let log_append_time = header.timestamp_type() == TimestampType::LogAppendTime;
    let mut out = Vec::with_capacity(header.records_count.max(0) as usize);
    let mut pos = 0usize;
    for _ in 0..header.records_count {
        let start = pos;
        let length = read_varint(records, &mut pos)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| invalid("record length does not parse", header))?;
        let end = pos
            .checked_add(length)
            .filter(|&e| e <= records.len())
            .ok_or_else(|| invalid("record runs past its batch", header))?;
        let body = &records[pos..end];
        let mut at = 1usize; // attributes
        let attributes = *body
            .first()
            .ok_or_else(|| invalid("empty record", header))?;
        let fields = (|| {
            let ts_delta = read_varint(body, &mut at)?;
            let offset_delta = read_varint(body, &mut at)?;
            let tail_at = at;
            let key_len = read_varint(body, &mut at)?;
            let key = if key_len < 0 {
                None
            } else {
                let k = body.get(at..at.checked_add(key_len as usize)?)?;
                at += key_len as usize;
                Some(k)
            };
            let value_len = read_varint(body, &mut at)?;
            let value = if value_len < 0 {
                None
            } else {
                Some(body.get(at..at.checked_add(value_len as usize)?)?)
            };
            Some((ts_delta, offset_delta, tail_at, key, value))
        })();
        let (ts_delta, offset_delta, tail_at, key, value) =
            fields.ok_or_else(|| invalid("record fields do not parse", header))?;
        let stored_timestamp = header.base_timestamp.wrapping_add(ts_delta);
        out.push(Record {
            offset: header.base_offset.wrapping_add(offset_delta),
            timestamp: if log_append_time {
                header.max_timestamp
            } else {
                stored_timestamp
            },
            key,
            value,
            has_value: value.is_some(),
            stored_timestamp,
            attributes,
            offset_delta,
            tail: &body[tail_at..],
            raw: &records[start..end],
        });
        pos = end;
    }
    if pos != records.len() {
        return Err(invalid("bytes left after its records", header));
    }
    Ok(out)
}

/// Filters `batch` (whole, with `header`) into `out`: records for which `keep` is true stay,
/// and `retention` says what becomes of a batch left with none. `new_horizon_ms` is the delete
/// horizon stamped on a batch that keeps a tombstone, or on the marker of a transaction with
/// nothing left (`empty_txn_marker`), and has none yet.
pub fn filter_batch(
    batch: &[u8],
    header: &BatchHeader,
    retention: BatchRetention,
    mut keep: impl FnMut(&Record<'_>) -> bool,
    new_horizon_ms: i64,
    out: &mut Vec<u8>,
) -> Result<Filtered> {
    filter_batch_with(
        batch,
        header,
        retention,
        |records, kept| kept.extend(records.iter().map(&mut keep)),
        new_horizon_ms,
        false,
        out,
    )
}

/// [`filter_batch`] deciding for all the batch's records at once: `decide` pushes one
/// keep-or-not to its vector per record, in order.
pub fn filter_batch_with(
    batch: &[u8],
    header: &BatchHeader,
    retention: BatchRetention,
    decide: impl FnOnce(&[Record<'_>], &mut Vec<bool>),
    new_horizon_ms: i64,
    empty_txn_marker: bool,
    out: &mut Vec<u8>,
) -> Result<Filtered> {
    if retention == BatchRetention::Delete {
        return Ok(Filtered::default());
    }
    let section = &batch[RECORD_BATCH_OVERHEAD..header.size_in_bytes()];
    let codec = header.compression_codec() as u8;
    let decompressed;
    let records: &[u8] = if codec == compression::CODEC_NONE {
        section
    } else {
        decompressed =
            compression::decompress(codec, section, compression::DECOMPRESSED_RECORDS_BYTES_MAX)
                .map_err(|e| invalid(&e.to_string(), header))?;
        &decompressed
    };
    let all = parse_records(records, header)?;
    let mut decisions = Vec::with_capacity(all.len());
    decide(&all, &mut decisions);
    assert_eq!(decisions.len(), all.len(), "one decision per record");
    let kept: Vec<&Record<'_>> = all
        .iter()
        .zip(&decisions)
        .filter_map(|(r, &k)| k.then_some(r))
        .collect();
    let has_tombstone = kept.iter().any(|r| !r.has_value);
    let horizon = header
        .delete_horizon_ms()
        .or((has_tombstone || empty_txn_marker && !kept.is_empty()).then_some(new_horizon_ms));
    let mut filtered = Filtered {
        records_read: all.len(),
        records_kept: kept.len(),
        written: None,
    };
    let start = out.len();
    if kept.len() == all.len() && horizon == header.delete_horizon_ms() {
        out.extend_from_slice(&batch[..header.size_in_bytes()]);
        filtered.written = Some(*header);
        return Ok(filtered);
    }
    if kept.is_empty() {
        if retention == BatchRetention::RetainEmpty {
            let empty = BatchHeader {
                attributes: header.attributes
                    & !(batch::COMPRESSION_CODEC_MASK | DELETE_HORIZON_FLAG_MASK),
                base_timestamp: NO_TIMESTAMP,
                records_count: 0,
                ..*header
            };
            write_batch(out, &empty, &[]);
            filtered.written = Some(BatchHeader::parse(&out[start..])?);
        }
        return Ok(filtered);
    }
    let base_timestamp = horizon.unwrap_or(header.base_timestamp);
    let mut body = Vec::with_capacity(kept.iter().map(|r| r.raw.len()).sum());
    let mut record = Vec::new();
    for r in &kept {
        if base_timestamp == header.base_timestamp {
            body.extend_from_slice(r.raw);
            continue;
        }
        record.clear();
        record.push(r.attributes);
        put_varint(&mut record, r.stored_timestamp.wrapping_sub(base_timestamp));
        put_varint(&mut record, r.offset_delta);
        record.extend_from_slice(r.tail);
        put_varint(&mut body, record.len() as i64);
        body.extend_from_slice(&record);
    }
    let max_timestamp = if header.timestamp_type() == TimestampType::LogAppendTime {
        header.max_timestamp
    } else {
        kept.iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(NO_TIMESTAMP)
    };
    let section = if codec == compression::CODEC_NONE {
        body
    } else {
        compression::compress(codec, &body, compression::is_xerial(section))
    };
    let attributes = match horizon {
        Some(_) => header.attributes | DELETE_HORIZON_FLAG_MASK,
        None => header.attributes,
    };
    let rewritten = BatchHeader {
        attributes,
        base_timestamp,
        max_timestamp,
        records_count: kept.len() as i32,
        ..*header
    };
    write_batch(out, &rewritten, &section);
    filtered.written = Some(BatchHeader::parse(&out[start..])?);
    Ok(filtered)
}

/// Appends a v2 batch with `header`'s fields (length and CRC computed) and `records`.
fn write_batch(out: &mut Vec<u8>, header: &BatchHeader, records: &[u8]) {
    let start = out.len();
    let length = (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + records.len()) as i32;
    out.extend_from_slice(&header.base_offset.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&header.partition_leader_epoch.to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&[0; 4]); // CRC, below
    out.extend_from_slice(&header.attributes.to_be_bytes());
    out.extend_from_slice(&header.last_offset_delta.to_be_bytes());
    out.extend_from_slice(&header.base_timestamp.to_be_bytes());
    out.extend_from_slice(&header.max_timestamp.to_be_bytes());
    out.extend_from_slice(&header.producer_id.to_be_bytes());
    out.extend_from_slice(&header.producer_epoch.to_be_bytes());
    out.extend_from_slice(&header.base_sequence.to_be_bytes());
    out.extend_from_slice(&header.records_count.to_be_bytes());
    out.extend_from_slice(records);
    let crc = crc32c::crc32c(&out[start + ATTRIBUTES_OFFSET..]);
    out[start + CRC_OFFSET..start + CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::builder::{batch_with_keys, batch_with_tombstones, compressed, Spec};

    fn spec(base_offset: i64) -> Spec {
        Spec {
            base_offset,
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 3,
            partition_leader_epoch: 4,
            ..Spec::default()
        }
    }

    fn keys_and_values(out: &[u8]) -> Vec<(i64, i64, Option<Vec<u8>>, bool)> {
        let h = BatchHeader::parse(out).unwrap();
        assert!(batch::crc_valid(&out[..h.size_in_bytes()]));
        let section = &out[RECORD_BATCH_OVERHEAD..h.size_in_bytes()];
        let records =
            compression::decompress(h.compression_codec() as u8, section, 1 << 20).unwrap();
        parse_records(&records, &h)
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.offset,
                    r.timestamp,
                    r.key.map(|k| k.to_vec()),
                    r.has_value,
                )
            })
            .collect()
    }

    #[test]
    fn a_filtered_batch_keeps_its_offsets_producer_and_codec() {
        let plain = batch_with_keys(
            &spec(100),
            &[Some(b"a"), Some(b"b"), Some(b"a"), Some(b"c")],
            &[b"1", b"2", b"3", b"4"],
        );
        for codec in 0..=4u8 {
            let b = if codec == 0 {
                plain.clone()
            } else {
                compressed(&plain, codec, codec == 2)
            };
            let h = BatchHeader::parse(&b).unwrap();
            let mut out = Vec::new();
            let f = filter_batch(
                &b,
                &h,
                BatchRetention::DeleteEmpty,
                |r| r.offset != 100,
                0,
                &mut out,
            )
            .unwrap();
            assert_eq!((f.records_read, f.records_kept), (4, 3));
            let w = f.written.unwrap();
            assert_eq!(w, BatchHeader::parse(&out).unwrap());
            assert_eq!(w.size_in_bytes(), out.len());
            assert_eq!(
                (w.base_offset, w.last_offset()),
                (100, 103),
                "codec {codec}"
            );
            assert_eq!(
                (w.producer_id, w.producer_epoch, w.base_sequence),
                (7, 1, 3)
            );
            assert_eq!(w.partition_leader_epoch, 4);
            assert_eq!(w.compression_codec(), codec as i16);
            assert_eq!(w.records_count, 3);
            assert_eq!(w.delete_horizon_ms(), None);
            let got = keys_and_values(&out);
            assert_eq!(
                got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(),
                vec![(101, 1001), (102, 1002), (103, 1003)]
            );
            assert_eq!(w.max_timestamp, 1003);
        }
    }

    #[test]
    fn a_batch_kept_whole_is_copied_and_one_emptied_is_dropped_or_kept_empty() {
        let b = batch_with_keys(&spec(5), &[Some(b"a"), Some(b"b")], &[b"1", b"2"]);
        let h = BatchHeader::parse(&b).unwrap();
        let mut out = Vec::new();
        filter_batch(&b, &h, BatchRetention::DeleteEmpty, |_| true, 0, &mut out).unwrap();
        assert_eq!(out, b);

        out.clear();
        let f = filter_batch(&b, &h, BatchRetention::DeleteEmpty, |_| false, 0, &mut out).unwrap();
        assert!(out.is_empty() && f.written.is_none());

        let f = filter_batch(&b, &h, BatchRetention::RetainEmpty, |_| false, 0, &mut out).unwrap();
        let w = f.written.unwrap();
        assert_eq!(out.len(), RECORD_BATCH_OVERHEAD);
        assert!(batch::crc_valid(&out));
        assert_eq!((w.base_offset, w.last_offset(), w.records_count), (5, 6, 0));
        assert_eq!((w.producer_id, w.base_sequence), (7, 3));
        assert_eq!(
            (w.base_timestamp, w.max_timestamp),
            (NO_TIMESTAMP, h.max_timestamp)
        );

        out.clear();
        let f = filter_batch(&b, &h, BatchRetention::Delete, |_| true, 0, &mut out).unwrap();
        assert!(out.is_empty() && f.written.is_none() && f.records_read == 0);
    }

    #[test]
    fn a_kept_tombstone_gets_a_delete_horizon_once_and_timestamps_stay_exact() {
        let plain = batch_with_keys(&spec(0), &[Some(b"a"), Some(b"b")], &[b"1", b"2"]);
        let h = BatchHeader::parse(&plain).unwrap();
        let mut out = Vec::new();
        filter_batch(
            &plain,
            &h,
            BatchRetention::DeleteEmpty,
            |r| r.offset == 1,
            50_000,
            &mut out,
        )
        .unwrap();
        let w = BatchHeader::parse(&out).unwrap();
        assert_eq!(w.delete_horizon_ms(), None, "no tombstone, no horizon");

        let tomb = batch_with_tombstones(&spec(10), &[(b"a", Some(b"1")), (b"b", None)]);
        let h = BatchHeader::parse(&tomb).unwrap();
        let mut out = Vec::new();
        filter_batch(
            &tomb,
            &h,
            BatchRetention::DeleteEmpty,
            |_| true,
            50_000,
            &mut out,
        )
        .unwrap();
        let w = BatchHeader::parse(&out).unwrap();
        assert_eq!(w.delete_horizon_ms(), Some(50_000));
        assert_eq!(
            keys_and_values(&out),
            vec![
                (10, 1000, Some(b"a".to_vec()), true),
                (11, 1001, Some(b"b".to_vec()), false)
            ]
        );
        // A second cleaning keeps the horizon it found and copies the batch.
        let mut again = Vec::new();
        filter_batch(
            &out,
            &w,
            BatchRetention::DeleteEmpty,
            |_| true,
            90_000,
            &mut again,
        )
        .unwrap();
        assert_eq!(again, out);
    }
}
