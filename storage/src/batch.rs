//! The v2 record batch header (magic 2), the only part of a batch this crate ever reads.
//!
//! Layout (big-endian), as in Kafka's `DefaultRecordBatch`:
//!
//! ```text
//! 0  baseOffset int64            <- rewritten by the leader, outside the CRC
//! 8  batchLength int32           (bytes after this field)
//! 12 partitionLeaderEpoch int32  <- stamped by the leader, outside the CRC
//! 16 magic int8 (= 2)
//! 17 crc uint32                  CRC32C over attributes .. end of batch
//! 21 attributes int16            bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control,
//!                                6 delete horizon set (base timestamp holds it)
//! 23 lastOffsetDelta int32
//! 27 baseTimestamp int64
//! 35 maxTimestamp int64
//! 43 producerId int64
//! 51 producerEpoch int16
//! 53 baseSequence int32
//! 57 recordsCount int32
//! 61 records...
//! ```
//!
//! This module parses and validates headers and rewrites the fields a broker may change. It
//! never decodes records on the read path. The exceptions: ListOffsets, whose
//! [`first_record_timestamp_at_least`] and [`offset_of_max_timestamp`] read record timestamps
//! and offsets, decompressing a compressed batch first ([`crate::compression`]); and a leader's
//! append of a produced batch, which reads each record's timestamp delta and key length once
//! ([`check_records`], Kafka's `LogValidator`).

use crate::compression;
use crate::config::TimestampType;
use crate::error::{Result, StorageError};

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const LENGTH_OFFSET: usize = 8;
/// Bytes before the part counted by `batchLength`: base offset + length.
pub const LOG_OVERHEAD: usize = 12;
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
pub const MAGIC_OFFSET: usize = 16;
pub const CRC_OFFSET: usize = 17;
pub const ATTRIBUTES_OFFSET: usize = 21;
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
pub const PRODUCER_ID_OFFSET: usize = 43;
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
pub const BASE_SEQUENCE_OFFSET: usize = 53;
pub const RECORDS_COUNT_OFFSET: usize = 57;
/// Size of a v2 batch with no records.
pub const RECORD_BATCH_OVERHEAD: usize = 61;

pub const MAGIC_V2: i8 = 2;
pub const COMPRESSION_CODEC_MASK: i16 = 0x07;
pub const TIMESTAMP_TYPE_MASK: i16 = 0x08;
pub const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
pub const CONTROL_FLAG_MASK: i16 = 0x20;
/// Set by the log cleaner on a batch holding tombstones (or, later, a transaction marker):
/// the base timestamp field then holds the delete horizon, the time after which a cleaning
/// may remove them (KIP-534). Record timestamps stay exact: their deltas are taken from it.
pub const DELETE_HORIZON_FLAG_MASK: i16 = 0x40;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
pub const NO_TIMESTAMP: i64 = -1;

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// The 61-byte header of one v2 batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header at the start of `buf`. Checks that the header is complete, that the
    /// magic is 2 and that `batchLength` covers at least a header; it does not need the whole
    /// batch to be present and does not check the CRC (see [`crc_valid`]).
    pub fn parse(buf: &[u8]) -> Result<BatchHeader> {
        if buf.len() < RECORD_BATCH_OVERHEAD {
            return Err(StorageError::CorruptRecord(format!(
                "{} bytes is shorter than a batch header ({RECORD_BATCH_OVERHEAD})",
                buf.len()
            )));
        }
        let batch_length = be_i32(buf, LENGTH_OFFSET);
        let magic = buf[MAGIC_OFFSET] as i8;
        if magic != MAGIC_V2 {
            return Err(StorageError::CorruptRecord(format!(
                "unsupported magic {magic} (only v2 batches are stored)"
            )));
        }
        if batch_length < (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32 {
            return Err(StorageError::CorruptRecord(format!(
                "batch length {batch_length} is smaller than the minimum {}",
                RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
            )));
        }
        Ok(BatchHeader {
            base_offset: be_i64(buf, BASE_OFFSET_OFFSET),
            batch_length,
            partition_leader_epoch: be_i32(buf, PARTITION_LEADER_EPOCH_OFFSET),
            magic,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: be_i64(buf, BASE_TIMESTAMP_OFFSET),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(buf, PRODUCER_ID_OFFSET),
            producer_epoch: be_i16(buf, PRODUCER_EPOCH_OFFSET),
            base_sequence: be_i32(buf, BASE_SEQUENCE_OFFSET),
            records_count: be_i32(buf, RECORDS_COUNT_OFFSET),
        })
    }

    /// Whole size of the batch on disk / on the wire.
    pub fn size_in_bytes(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    pub fn compression_codec(&self) -> i16 {
        self.attributes & COMPRESSION_CODEC_MASK
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG_MASK != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG_MASK != 0
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }
    /// The delete horizon a cleaning stamped on the batch (see [`DELETE_HORIZON_FLAG_MASK`]).
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_FLAG_MASK != 0).then_some(self.base_timestamp)
    }
}

/// CRC32C of a whole batch as stored in its header: over attributes .. end.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// True when `batch` (exactly one whole batch) carries a matching CRC32C.
pub fn crc_valid(batch: &[u8]) -> bool {
    batch.len() >= RECORD_BATCH_OVERHEAD && compute_crc(batch) == be_i32(batch, CRC_OFFSET) as u32
}

/// Rewrites the base offset (outside the CRC, so the CRC stays valid).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Stamps the partition leader epoch (outside the CRC).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// The timestamp type and max timestamp a leader stores in a batch's header (Kafka's
/// `DefaultRecordBatch.setMaxTimestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTimestamp {
    /// A LogAppendTime topic: the append time.
    LogAppendTime(i64),
    /// A CreateTime topic: the largest record timestamp, as [`check_records`] computed it.
    CreateTime(i64),
}

/// Sets the batch's timestamp type and max timestamp and, if they changed, recomputes the CRC,
/// as Kafka's `DefaultRecordBatch.setMaxTimestamp` does. Record timestamps are left alone:
/// readers take every record's timestamp from the batch's max timestamp for LogAppendTime.
pub fn set_max_timestamp(batch: &mut [u8], max: MaxTimestamp) {
    if set_max_timestamp_in_header(batch, max) {
        let crc = compute_crc(batch);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Marks the batch as LogAppendTime with `timestamp` as its max timestamp; see
/// [`set_max_timestamp`].
pub fn set_log_append_time(batch: &mut [u8], timestamp: i64) {
    set_max_timestamp(batch, MaxTimestamp::LogAppendTime(timestamp));
}

/// Writes `max` into the header at the start of `batch`; true when something changed (the CRC
/// must then be recomputed).
fn set_max_timestamp_in_header(batch: &mut [u8], max: MaxTimestamp) -> bool {
    let old_attributes = be_i16(batch, ATTRIBUTES_OFFSET);
    let (attributes, timestamp) = match max {
        MaxTimestamp::LogAppendTime(t) => (old_attributes | TIMESTAMP_TYPE_MASK, t),
        MaxTimestamp::CreateTime(t) => (old_attributes & !TIMESTAMP_TYPE_MASK, t),
    };
    if attributes == old_attributes && be_i64(batch, MAX_TIMESTAMP_OFFSET) == timestamp {
        return false;
    }
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&timestamp.to_be_bytes());
    true
}

/// The header of `batch` as a leader stores it: `base_offset` and `epoch` stamped, the
/// timestamp type and max timestamp set to `max` and, if they changed, the CRC recomputed over
/// the new header and the unchanged records. The records are not copied: a leader writes this
/// header followed by the producer's record bytes.
pub fn leader_header(
    batch: &[u8],
    base_offset: i64,
    epoch: i32,
    max: MaxTimestamp,
) -> [u8; RECORD_BATCH_OVERHEAD] {
    let mut header: [u8; RECORD_BATCH_OVERHEAD] = batch[..RECORD_BATCH_OVERHEAD]
        .try_into()
        .expect("a whole header");
    set_base_offset(&mut header, base_offset);
    set_partition_leader_epoch(&mut header, epoch);
    if set_max_timestamp_in_header(&mut header, max) {
        // (crc32c_combine would avoid the second pass but costs more than it on 16 KiB)
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&header[ATTRIBUTES_OFFSET..]),
            &batch[RECORD_BATCH_OVERHEAD..],
        );
        header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
    header
}

/// How strictly [`validate_batches`] checks the batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    /// A produce request: exactly one batch, as Kafka takes, complete, with
    /// `recordsCount == lastOffsetDelta + 1 > 0`, at most `max.message.bytes`.
    Leader { max_message_bytes: usize },
    /// A leader's batches copied by a follower: whole batches with valid CRCs; a trailing
    /// partial batch (a fetch response cut at its byte limit) is ignored, as Kafka does; size
    /// and count rules are the leader's business (compaction may shrink counts).
    Follower,
}

/// Validates every batch in `records` and returns their headers in order, with the number of
/// bytes they cover (less than `records.len()` only for a follower's trailing partial batch).
pub fn validate_batches(records: &[u8], mode: Validation) -> Result<(Vec<BatchHeader>, usize)> {
    let mut headers = Vec::new();
    let mut pos = 0usize;
    while pos < records.len() {
        let rest = &records[pos..];
        if rest.len() < RECORD_BATCH_OVERHEAD {
            if mode == Validation::Follower && !headers.is_empty() {
                break;
            }
            return Err(StorageError::CorruptRecord(format!(
                "{} trailing bytes at position {pos} do not hold a batch header",
                rest.len()
            )));
        }
        let header = BatchHeader::parse(rest)?;
        let size = header.size_in_bytes();
        if let Validation::Leader { max_message_bytes } = mode {
            if size > max_message_bytes {
                return Err(StorageError::RecordTooLarge {
                    size,
                    max: max_message_bytes,
                });
            }
        }
        if size > rest.len() {
            if mode == Validation::Follower && !headers.is_empty() {
                break;
            }
            return Err(StorageError::CorruptRecord(format!(
                "batch at position {pos} declares {size} bytes but only {} are present",
                rest.len()
            )));
        }
        let batch = &rest[..size];
        let crc = compute_crc(batch);
        if crc != header.crc {
            return Err(StorageError::CorruptRecord(format!(
                "batch at position {pos}: stored crc {:#010x} != computed crc {crc:#010x}",
                header.crc
            )));
        }
        check_counts(&header, mode)?;
        let idempotent =
            header.has_producer_id() || headers.iter().any(BatchHeader::has_producer_id);
        if matches!(mode, Validation::Leader { .. }) && !headers.is_empty() && idempotent {
            // Kafka's LogValidator takes one v2 batch per partition and produce request; a
            // second one could otherwise ride on the first one's duplicate check unwritten.
            // Batches without a producer (the group coordinator's writes) may still come
            // several at once.
            return Err(StorageError::InvalidRecord(
                "Compressed outer record has more than one batch".into(),
            ));
        }
        headers.push(header);
        pos += size;
    }
    if headers.is_empty() {
        return Err(StorageError::InvalidRecord(
            "no record batch in the request".into(),
        ));
    }
    Ok((headers, pos))
}

fn check_counts(header: &BatchHeader, mode: Validation) -> Result<()> {
    if header.last_offset_delta < 0 {
        return Err(StorageError::InvalidRecord(format!(
            "negative last offset delta {}",
            header.last_offset_delta
        )));
    }
    if header.records_count < 0 {
        return Err(StorageError::InvalidRecord(format!(
            "negative record count {}",
            header.records_count
        )));
    }
    match mode {
        Validation::Leader { .. } => {
            if header.records_count == 0 {
                return Err(StorageError::InvalidRecord(
                    "invalid reported count for record batch: 0".into(),
                ));
            }
            if header.records_count as i64 != header.last_offset_delta as i64 + 1 {
                return Err(StorageError::InvalidRecord(format!(
                    "inconsistent batch offset range and record count: last offset delta {} but {} records",
                    header.last_offset_delta, header.records_count
                )));
            }
        }
        Validation::Follower => {
            if header.records_count as i64 > header.last_offset_delta as i64 + 1 {
                return Err(StorageError::InvalidRecord(format!(
                    "{} records do not fit in last offset delta {}",
                    header.records_count, header.last_offset_delta
                )));
            }
        }
    }
    Ok(())
}

/// Headers of the whole batches at the start of `buf`, stopping at the first incomplete one.
/// For bytes this crate already validated (reads); no CRC check.
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> BatchIter<'a> {
        BatchIter { buf, pos: 0 }
    }
}

impl Iterator for BatchIter<'_> {
    /// (position of the batch in the buffer, its header)
    type Item = (usize, BatchHeader);
    fn next(&mut self) -> Option<(usize, BatchHeader)> {
        let rest = &self.buf[self.pos..];
        let header = BatchHeader::parse(rest).ok()?;
        if header.size_in_bytes() > rest.len() {
            return None;
        }
        let at = self.pos;
        self.pos += header.size_in_bytes();
        Some((at, header))
    }
}

/// A zig-zag varint (or varlong) at `pos`, advancing it; `None` past the end or beyond 64 bits.
pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    // zig-zag
    Some(((value >> 1) as i64) ^ -((value & 1) as i64))
}

/// Appends `v` as a zig-zag varint (varlong).
pub(crate) fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// What a scan of a batch's records found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordScan {
    /// (timestamp, offset) of the first record that matched.
    Found(i64, i64),
    /// Every record was read and none matched.
    NotFound,
    /// The records could not be read (corrupt, or decompressing beyond
    /// [`compression::DECOMPRESSED_RECORDS_BYTES_MAX`]): the caller answers at batch level.
    Unreadable,
}

/// Walks the records of a CreateTime `batch`, decompressing them first when the batch is
/// compressed, and returns the first whose (timestamp, offset) satisfies `matches`. Reads only
/// each record's length, attributes, timestamp delta and offset delta: one parser for
/// compressed and uncompressed batches.
fn scan_records(
    batch: &[u8],
    header: &BatchHeader,
    mut matches: impl FnMut(i64, i64) -> bool,
) -> RecordScan {
    let end = header.size_in_bytes().min(batch.len());
    let Some(section) = batch.get(RECORD_BATCH_OVERHEAD..end) else {
        return RecordScan::Unreadable;
    };
    let codec = header.compression_codec() as u8;
    let decompressed;
    let records: &[u8] = if codec == compression::CODEC_NONE {
        section
    } else {
        match compression::decompress(codec, section, compression::DECOMPRESSED_RECORDS_BYTES_MAX) {
            Ok(d) => {
                decompressed = d;
                &decompressed
            }
            Err(e) => {
                tracing::warn!(
                    base_offset = header.base_offset,
                    codec = compression::codec_name(codec),
                    "ListOffsets answers this batch as a whole, its records are unreadable: {e}"
                );
                return RecordScan::Unreadable;
            }
        }
    };
    let mut pos = 0usize;
    for _ in 0..header.records_count {
        let start = pos;
        let Some(length) = read_varint(records, &mut pos) else {
            return RecordScan::Unreadable;
        };
        let body = pos;
        pos += 1; // attributes
        let (Some(ts_delta), Some(offset_delta)) = (
            read_varint(records, &mut pos),
            read_varint(records, &mut pos),
        ) else {
            return RecordScan::Unreadable;
        };
        let ts = header.base_timestamp.wrapping_add(ts_delta);
        let offset = header.base_offset.wrapping_add(offset_delta);
        if matches(ts, offset) {
            return RecordScan::Found(ts, offset);
        }
        match usize::try_from(length)
            .ok()
            .and_then(|l| body.checked_add(l))
        {
            Some(next) if next <= records.len() && next > start => pos = next,
            _ => return RecordScan::Unreadable,
        }
    }
    RecordScan::NotFound
}

/// For ListOffsets by timestamp: the timestamp and offset of the first record in `batch` at or
/// after `min_offset` (the log start offset) whose timestamp is at least `target`, as Kafka's
/// `FileRecords.searchForTimestamp` finds it; `None` when no record of the batch qualifies (the
/// search goes on with the next batch). Compressed batches are decompressed (bounded by
/// [`compression::DECOMPRESSED_RECORDS_BYTES_MAX`]). For LogAppendTime every record has the
/// batch's max timestamp, so the first record at or after `min_offset` is the answer without
/// reading any. A batch whose records cannot be read is answered as a whole: (max timestamp,
/// base offset or `min_offset` if later).
pub fn first_record_timestamp_at_least(
    batch: &[u8],
    target: i64,
    min_offset: i64,
) -> Option<(i64, i64)> {
    let header = BatchHeader::parse(batch).ok()?;
    if header.max_timestamp < target || header.last_offset() < min_offset {
        return None;
    }
    let whole_batch = Some((header.max_timestamp, header.base_offset.max(min_offset)));
    if header.timestamp_type() == TimestampType::LogAppendTime {
        return whole_batch;
    }
    match scan_records(batch, &header, |ts, offset| {
        ts >= target && offset >= min_offset
    }) {
        RecordScan::Found(ts, offset) => Some((ts, offset)),
        RecordScan::NotFound => None,
        RecordScan::Unreadable => whole_batch,
    }
}

/// For ListOffsets MAX_TIMESTAMP: the offset of the first record of `batch` whose timestamp is
/// the batch's max timestamp, as Kafka's `RecordBatch.offsetOfMaxTimestamp` finds it
/// (decompressing compressed batches). LogAppendTime gives every record the max timestamp, so
/// the answer is the base offset; so it is, too, for a batch whose records cannot be read.
/// `None` when no record carries the max timestamp the header claims (Kafka then answers
/// with no offset).
pub fn offset_of_max_timestamp(batch: &[u8]) -> Option<i64> {
    let header = BatchHeader::parse(batch).ok()?;
    if header.timestamp_type() == TimestampType::LogAppendTime {
        return Some(header.base_offset);
    }
    match scan_records(batch, &header, |ts, _| ts == header.max_timestamp) {
        RecordScan::Found(_, offset) => Some(offset),
        RecordScan::NotFound => None,
        RecordScan::Unreadable => Some(header.base_offset),
    }
}

/// The indexes, within `batch`, of its records that have no key: [`check_records`] with the
/// compacted topic's rule alone, for the tests of how records are read.
#[cfg(test)]
fn records_without_key(batch: &[u8]) -> Result<KeylessRecords> {
    records_without_key_within(batch, compression::STREAMED_RECORDS_BYTES_MAX)
}

/// The most refused records named one by one in a refusal: a batch of millions of tiny records
/// compresses to a few KB, and a message per record would cost gigabytes to hold and answer.
/// The count is of all of them.
pub const RECORD_ERRORS_LISTED_MAX: usize = 1_000;

/// The records of a batch without a key: how many, and the indexes of the first
/// [`RECORD_ERRORS_LISTED_MAX`].
#[cfg(test)]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KeylessRecords {
    total: u64,
    listed: Vec<i32>,
}

#[cfg(test)]
impl KeylessRecords {
    fn is_empty(&self) -> bool {
        self.total == 0
    }
}

#[cfg(test)]
fn records_without_key_within(batch: &[u8], max_bytes: usize) -> Result<KeylessRecords> {
    let rules = RecordRules {
        require_key: true,
        timestamp_range: None,
    };
    let checked = check_records_within(batch, &rules, max_bytes)?;
    Ok(KeylessRecords {
        total: checked.refused_total,
        listed: checked.refused.iter().map(|r| r.index).collect(),
    })
}

/// What Kafka's `LogValidator` requires of each record of a batch from a client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordRules {
    /// A compacted topic: every record has a key.
    pub require_key: bool,
    /// A CreateTime topic: every record's timestamp, but -1 (none), lies in this range
    /// (`message.timestamp.before.max.ms` before now .. `message.timestamp.after.max.ms` after).
    pub timestamp_range: Option<(i64, i64)>,
}

/// Why a record is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRefusal {
    /// No key, on a compacted topic.
    NoKey,
    /// A CreateTime timestamp out of range: the timestamp and the record's offset as sent.
    TimestampOutOfRange { timestamp: i64, offset: i64 },
    /// No timestamp in a batch that set LogAppendTime itself.
    LogAppendTimeFromProducer,
}

/// A refused record: its index in the batch and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedRecord {
    pub index: i32,
    pub why: RecordRefusal,
}

/// What one pass over a batch's records found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckedRecords {
    /// The largest record timestamp (-1 when no record has one), which the batch header's max
    /// timestamp must be: Kafka recomputes it rather than trust the producer's header.
    pub max_timestamp: i64,
    /// How many records are refused, and the first [`RECORD_ERRORS_LISTED_MAX`] of them.
    pub refused_total: u64,
    pub refused: Vec<RefusedRecord>,
    /// Whether any refused record (listed or not) is refused for its timestamp.
    pub timestamp_refused: bool,
}

/// Checks every record of a produced batch against `rules`, one error per record (a missing key
/// before a timestamp, as Kafka's `LogValidator.validateRecord` orders them), and computes the
/// batch's real max timestamp. A batch marked LogAppendTime gives each record the header's max
/// timestamp, as Kafka's record iterator does.
///
/// Reads each record's length, attributes, timestamp and offset deltas and key length and skips
/// the rest, streaming through a compressed batch ([`compression::reader`], bounded by
/// [`compression::STREAMED_RECORDS_BYTES_MAX`]) as Kafka's `skipKeyValueIterator` does, so
/// memory stays a few buffers. Like Kafka's record iterator it reads exactly `recordsCount`
/// records and requires nothing after them.
///
/// Errors, as Kafka answers them: records that end early or leave bytes behind, or that do not
/// parse, or whose offset deltas are not 0, 1, 2, ... (which Kafka stores or rewrites instead),
/// are [`StorageError::InvalidRecord`] (INVALID_RECORD); data that does not decompress
/// is [`StorageError::Undecompressable`] (Kafka's "Failed to decompress record stream").
pub fn check_records(batch: &[u8], rules: &RecordRules) -> Result<CheckedRecords> {
    check_records_within(batch, rules, compression::STREAMED_RECORDS_BYTES_MAX)
}

fn check_records_within(
    batch: &[u8],
    rules: &RecordRules,
    max_bytes: usize,
) -> Result<CheckedRecords> {
    let header = BatchHeader::parse(batch)?;
    let log_append_time = header.timestamp_type() == TimestampType::LogAppendTime;
    let mut checked = CheckedRecords {
        max_timestamp: NO_TIMESTAMP,
        ..CheckedRecords::default()
    };
    let mut misnumbered = None;
    walk_records(batch, &header, max_bytes, |record| {
        if record.offset_delta != record.index as i64 && misnumbered.is_none() {
            misnumbered = Some((record.index, record.offset_delta));
        }
        let timestamp = if log_append_time {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(record.timestamp_delta)
        };
        checked.max_timestamp = checked.max_timestamp.max(timestamp);
        let why = if rules.require_key && record.key_length < 0 {
            Some(RecordRefusal::NoKey)
        } else {
            match rules.timestamp_range {
                Some((earliest, latest))
                    if timestamp != NO_TIMESTAMP && !(earliest..=latest).contains(&timestamp) =>
                {
                    Some(RecordRefusal::TimestampOutOfRange {
                        timestamp,
                        offset: header.base_offset.wrapping_add(record.offset_delta),
                    })
                }
                Some(_) if timestamp == NO_TIMESTAMP && log_append_time => {
                    Some(RecordRefusal::LogAppendTimeFromProducer)
                }
                _ => None,
            }
        };
        if let Some(why) = why {
            checked.refused_total += 1;
            checked.timestamp_refused |= why != RecordRefusal::NoKey;
            if checked.refused.len() < RECORD_ERRORS_LISTED_MAX {
                checked.refused.push(RefusedRecord {
                    index: record.index,
                    why,
                });
            }
        }
    })?;
    if let Some((index, delta)) = misnumbered {
        // Kafka keeps an uncompressed batch's deltas as sent and rewrites a compressed one;
        // either way a batch numbered otherwise would show its records at offsets it does not
        // cover. No client numbers them so: refused, not stored or rewritten.
        return Err(StorageError::InvalidRecord(format!(
            "record {index} of the batch has offset delta {delta}: a batch's records are numbered 0, 1, 2, ..."
        )));
    }
    Ok(checked)
}

/// The fields of a record a produce check reads.
#[derive(Debug, Clone, Copy)]
struct RecordFields {
    index: i32,
    timestamp_delta: i64,
    offset_delta: i64,
    key_length: i64,
}

/// Streams through the records of `batch` (decompressing at most `max_bytes`), reading each
/// one's fields up to its key length and skipping the rest; see [`check_records`].
fn walk_records(
    batch: &[u8],
    header: &BatchHeader,
    max_bytes: usize,
    each: impl FnMut(RecordFields),
) -> Result<()> {
    let end = header.size_in_bytes().min(batch.len());
    let section = batch.get(RECORD_BATCH_OVERHEAD..end).unwrap_or_default();
    let codec = header.compression_codec() as u8;
    if codec == compression::CODEC_NONE && section.len() <= max_bytes {
        // Uncompressed (the usual case): read in place, each value skipped without a copy.
        return walk_records_from(section, header, codec, each);
    }
    let reader = compression::reader(codec, section, max_bytes).map_err(decompress_error)?;
    walk_records_from(reader, header, codec, each)
}

/// A [`compression::DecompressError`] as the storage error a batch is refused with.
fn decompress_error(e: compression::DecompressError) -> StorageError {
    match e {
        compression::DecompressError::TooLarge { max } => StorageError::InvalidRecord(format!(
            "the records of the batch decompress to more than {max} bytes"
        )),
        other => StorageError::Undecompressable(other.to_string()),
    }
}

/// The records of a batch whose (decompressed) records section `reader` yields.
fn walk_records_from<R: SkipRead>(
    mut reader: R,
    header: &BatchHeader,
    codec: u8,
    mut each: impl FnMut(RecordFields),
) -> Result<()> {
    use std::io::Read;

    let io_error = |e: std::io::Error| match compression::reader_error(codec, e) {
        None => StorageError::InvalidRecord(
            "Incorrect declared batch size, premature EOF reached".into(),
        ),
        Some(d) => decompress_error(d),
    };
    let invalid_structure = || StorageError::InvalidRecord("Found invalid record structure".into());
    for index in 0..header.records_count {
        let length = read_varint_from(&mut reader, 5)
            .map_err(io_error)?
            .ok_or_else(invalid_structure)?;
        let mut body = CountingReader {
            inner: &mut reader,
            count: 0,
        };
        let mut attributes = [0u8; 1];
        body.read_exact(&mut attributes).map_err(io_error)?;
        let mut fields = [0i64; 3];
        for (field, max_bytes) in fields.iter_mut().zip([10, 5, 5]) {
            // timestamp delta (varlong), offset delta, key length
            *field = read_varint_from(&mut body, max_bytes)
                .map_err(io_error)?
                .ok_or_else(invalid_structure)?;
        }
        let [timestamp_delta, offset_delta, key_length] = fields;
        let rest = length - body.count as i64;
        if length < 0 || rest < 0 || key_length > rest {
            return Err(invalid_structure());
        }
        each(RecordFields {
            index,
            timestamp_delta,
            offset_delta,
            key_length,
        });
        let skipped = reader.skip(rest as u64).map_err(io_error)?;
        if skipped != rest as u64 {
            return Err(io_error(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    let mut probe = [0u8; 1];
    if reader.read(&mut probe).map_err(io_error)? != 0 {
        return Err(StorageError::InvalidRecord(
            "Incorrect declared batch size, records still remaining in file".into(),
        ));
    }
    Ok(())
}

/// A records section being read: [`std::io::Read`], and a way past the bytes of a record that
/// are not looked at.
trait SkipRead: std::io::Read {
    /// Reads past `n` bytes; gives how many there were (fewer at the end of the section).
    fn skip(&mut self, n: u64) -> std::io::Result<u64>;
}

/// An uncompressed section in memory: skipping moves past the bytes, nothing is copied.
impl SkipRead for &[u8] {
    fn skip(&mut self, n: u64) -> std::io::Result<u64> {
        let k = usize::try_from(n).unwrap_or(usize::MAX).min(self.len());
        *self = &self[k..];
        Ok(k as u64)
    }
}

/// A decompressing reader: the bytes are decompressed (and bounded) to be skipped.
impl SkipRead for Box<dyn std::io::Read + '_> {
    fn skip(&mut self, n: u64) -> std::io::Result<u64> {
        std::io::copy(
            &mut std::io::Read::take(&mut *self, n),
            &mut std::io::sink(),
        )
    }
}

/// Counts the bytes read through it.
struct CountingReader<'a, R: std::io::Read> {
    inner: &'a mut R,
    count: usize,
}

impl<R: std::io::Read> std::io::Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n;
        Ok(n)
    }
}

/// A zig-zag varint of at most `max_bytes` bytes from a stream; `Ok(None)` if it is longer.
fn read_varint_from(r: &mut impl std::io::Read, max_bytes: usize) -> std::io::Result<Option<i64>> {
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let mut byte = [0u8; 1];
        r.read_exact(&mut byte)?;
        value |= u64::from(byte[0] & 0x7f) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Some(((value >> 1) as i64) ^ -((value & 1) as i64)));
        }
    }
    Ok(None)
}

/// Kafka's `ControlRecordType` of a transaction marker (the key's second field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlRecordType {
    Abort,
    Commit,
}

/// Kafka's `EndTransactionMarker`: the one record of a control batch that ends a producer's
/// transaction on a partition.
///
/// ```text
/// key:   version i16 (0), type i16 (0 ABORT, 1 COMMIT)
/// value: version i16 (0), coordinator_epoch i32
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub control_type: ControlRecordType,
    pub coordinator_epoch: i32,
}

/// `EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION` and the control key's version.
pub const END_TXN_MARKER_VERSION: i16 = 0;
const CONTROL_KEY_BYTES: usize = 4;
const END_TXN_MARKER_VALUE_BYTES: usize = 6;

/// What the first record of a control batch says, read from the whole batch's bytes. `Ok(None)`:
/// a control batch without records (a cleaning removed its marker) or of a control type that
/// does not end a transaction (Kafka's other control types, which carry no transaction state).
/// Control batches are written uncompressed; a compressed one is corrupt.
pub fn end_txn_marker(batch: &[u8]) -> Result<Option<EndTxnMarker>> {
    let h = BatchHeader::parse(batch)?;
    if !h.is_control() {
        return Err(StorageError::CorruptRecord(
            "not a control batch".to_string(),
        ));
    }
    if h.records_count == 0 {
        return Ok(None);
    }
    if h.compression_codec() != 0 {
        return Err(StorageError::CorruptRecord(
            "compressed control batch".to_string(),
        ));
    }
    let end = h.size_in_bytes().min(batch.len());
    let records = &batch[RECORD_BATCH_OVERHEAD..end];
    let corrupt = || StorageError::CorruptRecord("unreadable control record".to_string());
    let mut pos = 0usize;
    let _length = read_varint(records, &mut pos).ok_or_else(corrupt)?;
    pos += 1; // attributes
    let _timestamp_delta = read_varint(records, &mut pos).ok_or_else(corrupt)?;
    let _offset_delta = read_varint(records, &mut pos).ok_or_else(corrupt)?;
    let key_len = read_varint(records, &mut pos).ok_or_else(corrupt)?;
    if key_len < CONTROL_KEY_BYTES as i64 {
        return Err(StorageError::CorruptRecord(format!(
            "control record key of {key_len} bytes"
        )));
    }
    let key = records
        .get(pos..pos + key_len as usize)
        .ok_or_else(corrupt)?;
    pos += key_len as usize;
    let control_type = match be_i16(key, 2) {
        0 => ControlRecordType::Abort,
        1 => ControlRecordType::Commit,
        _ => return Ok(None),
    };
    let value_len = read_varint(records, &mut pos).ok_or_else(corrupt)?;
    if value_len < END_TXN_MARKER_VALUE_BYTES as i64 {
        return Err(StorageError::CorruptRecord(format!(
            "transaction marker value of {value_len} bytes"
        )));
    }
    let value = records
        .get(pos..pos + value_len as usize)
        .ok_or_else(corrupt)?;
    Ok(Some(EndTxnMarker {
        control_type,
        coordinator_epoch: be_i32(value, 2),
    }))
}

/// One control batch holding `marker` for a producer's transaction (Kafka's
/// `MemoryRecords.withEndTransactionMarker`): base offset 0 (the log assigns it), no sequence,
/// transactional and control attributes, one uncompressed record stamped `timestamp`.
pub fn end_txn_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    partition_leader_epoch: i32,
    timestamp: i64,
    marker: EndTxnMarker,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(32);
    body.push(0u8); // attributes
    put_varint(&mut body, 0); // timestamp delta
    put_varint(&mut body, 0); // offset delta
    put_varint(&mut body, CONTROL_KEY_BYTES as i64);
    body.extend_from_slice(&END_TXN_MARKER_VERSION.to_be_bytes());
    let control_type: i16 = match marker.control_type {
        ControlRecordType::Abort => 0,
        ControlRecordType::Commit => 1,
    };
    body.extend_from_slice(&control_type.to_be_bytes());
    put_varint(&mut body, END_TXN_MARKER_VALUE_BYTES as i64);
    body.extend_from_slice(&END_TXN_MARKER_VERSION.to_be_bytes());
    body.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    put_varint(&mut body, 0); // headers
    let mut records = Vec::with_capacity(body.len() + 2);
    put_varint(&mut records, body.len() as i64);
    records.extend_from_slice(&body);

    let mut b = Vec::with_capacity(RECORD_BATCH_OVERHEAD + records.len());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(
        &((RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + records.len()) as i32).to_be_bytes(),
    );
    b.extend_from_slice(&partition_leader_epoch.to_be_bytes());
    b.push(MAGIC_V2 as u8);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    b.extend_from_slice(&timestamp.to_be_bytes());
    b.extend_from_slice(&timestamp.to_be_bytes());
    b.extend_from_slice(&producer_id.to_be_bytes());
    b.extend_from_slice(&producer_epoch.to_be_bytes());
    b.extend_from_slice(&NO_SEQUENCE.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&records);
    let crc = compute_crc(&b);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

pub mod builder {
    //! Builds real uncompressed v2 batches (records with a key or a null key and a value, no
    //! headers), for tests, benchmarks and tools. The broker never needs it: clients build batches.

    use super::*;

    /// Header fields of a built batch.
    #[derive(Clone, Debug)]
    pub struct Spec {
        pub base_offset: i64,
        pub base_timestamp: i64,
        pub producer_id: i64,
        pub producer_epoch: i16,
        pub base_sequence: i32,
        pub partition_leader_epoch: i32,
    }

    impl Default for Spec {
        fn default() -> Spec {
            Spec {
                base_offset: 0,
                base_timestamp: 1_000,
                producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                base_sequence: NO_SEQUENCE,
                partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            }
        }
    }

    /// One batch of `values.len()` records; record i has timestamp base + i.
    pub fn batch(spec: &Spec, values: &[&[u8]]) -> Vec<u8> {
        let deltas: Vec<i64> = (0..values.len() as i64).collect();
        batch_with_timestamp_deltas(spec, values, &deltas)
    }

    /// One batch of `values.len()` records; record i has timestamp base + `deltas[i]`.
    pub fn batch_with_timestamp_deltas(spec: &Spec, values: &[&[u8]], deltas: &[i64]) -> Vec<u8> {
        let keys = vec![None; values.len()];
        let values: Vec<Option<&[u8]>> = values.iter().map(|v| Some(*v)).collect();
        build(spec, &keys, &values, deltas)
    }

    /// One batch of records with these keys (`None`: a null key) and values.
    pub fn batch_with_keys(spec: &Spec, keys: &[Option<&[u8]>], values: &[&[u8]]) -> Vec<u8> {
        let deltas: Vec<i64> = (0..values.len() as i64).collect();
        let values: Vec<Option<&[u8]>> = values.iter().map(|v| Some(*v)).collect();
        build(spec, keys, &values, &deltas)
    }

    /// One batch of keyed records whose value may be null (a tombstone); record i has timestamp
    /// base + i.
    pub fn batch_with_tombstones(spec: &Spec, records: &[(&[u8], Option<&[u8]>)]) -> Vec<u8> {
        let deltas: Vec<i64> = (0..records.len() as i64).collect();
        let keys: Vec<Option<&[u8]>> = records.iter().map(|(k, _)| Some(*k)).collect();
        let values: Vec<Option<&[u8]>> = records.iter().map(|(_, v)| *v).collect();
        build(spec, &keys, &values, &deltas)
    }

    fn build(
        spec: &Spec,
        keys: &[Option<&[u8]>],
        values: &[Option<&[u8]>],
        deltas: &[i64],
    ) -> Vec<u8> {
        assert_eq!(values.len(), deltas.len(), "one timestamp delta per value");
        assert_eq!(values.len(), keys.len(), "one key per value");
        let mut records = Vec::new();
        for (i, value) in values.iter().enumerate() {
            let mut body = Vec::new();
            body.push(0u8); // attributes
            put_varint(&mut body, deltas[i]); // timestamp delta
            put_varint(&mut body, i as i64); // offset delta
            match keys[i] {
                Some(key) => {
                    put_varint(&mut body, key.len() as i64);
                    body.extend_from_slice(key);
                }
                None => put_varint(&mut body, -1),
            }
            match value {
                Some(value) => {
                    put_varint(&mut body, value.len() as i64);
                    body.extend_from_slice(value);
                }
                None => put_varint(&mut body, -1),
            }
            put_varint(&mut body, 0); // headers
            put_varint(&mut records, body.len() as i64);
            records.extend_from_slice(&body);
        }
        let n = values.len() as i32;
        let mut b = Vec::with_capacity(RECORD_BATCH_OVERHEAD + records.len());
        b.extend_from_slice(&spec.base_offset.to_be_bytes());
        b.extend_from_slice(
            &((RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + records.len()) as i32).to_be_bytes(),
        );
        b.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
        b.push(MAGIC_V2 as u8);
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&(n - 1).to_be_bytes());
        b.extend_from_slice(&spec.base_timestamp.to_be_bytes());
        let max_delta = deltas.iter().copied().max().unwrap_or(0);
        b.extend_from_slice(&(spec.base_timestamp + max_delta).to_be_bytes());
        b.extend_from_slice(&spec.producer_id.to_be_bytes());
        b.extend_from_slice(&spec.producer_epoch.to_be_bytes());
        b.extend_from_slice(&spec.base_sequence.to_be_bytes());
        b.extend_from_slice(&n.to_be_bytes());
        b.extend_from_slice(&records);
        let crc = compute_crc(&b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// `batch` with its records section compressed with `codec` (snappy xerial-framed when
    /// `xerial`), the attributes, length and CRC updated: what a compressing producer sends.
    pub fn compressed(batch: &[u8], codec: u8, xerial: bool) -> Vec<u8> {
        let records = crate::compression::compress(codec, &batch[RECORD_BATCH_OVERHEAD..], xerial);
        let mut b = batch[..RECORD_BATCH_OVERHEAD].to_vec();
        b.extend_from_slice(&records);
        let length = (b.len() - LOG_OVERHEAD) as i32;
        b[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&length.to_be_bytes());
        let attributes = (be_i16(&b, ATTRIBUTES_OFFSET) & !COMPRESSION_CODEC_MASK) | codec as i16;
        b[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// `batch` with the transactional attribute set and its CRC updated: what a transactional
    /// producer sends.
    pub fn transactional(batch: &[u8]) -> Vec<u8> {
        let mut b = batch.to_vec();
        let attributes = be_i16(&b, ATTRIBUTES_OFFSET) | TRANSACTIONAL_FLAG_MASK;
        b[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        b
    }

    /// A batch with `count` records of `value_len` bytes each.
    pub fn simple(count: usize, value_len: usize, base_timestamp: i64) -> Vec<u8> {
        let value = vec![b'x'; value_len];
        let values: Vec<&[u8]> = (0..count).map(|_| value.as_slice()).collect();
        batch(
            &Spec {
                base_timestamp,
                ..Spec::default()
            },
            &values,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::builder::*;
    use super::*;

    const LEADER: Validation = Validation::Leader {
        max_message_bytes: 1_048_588,
    };

    #[test]
    fn end_txn_marker_round_trips_in_kafkas_layout() {
        for (control_type, type_byte) in [
            (ControlRecordType::Abort, 0u8),
            (ControlRecordType::Commit, 1),
        ] {
            let marker = EndTxnMarker {
                control_type,
                coordinator_epoch: 7,
            };
            let b = end_txn_marker_batch(42, 3, 5, 9_000, marker);
            let h = BatchHeader::parse(&b).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (42, 3, -1)
            );
            assert_eq!((h.records_count, h.last_offset_delta), (1, 0));
            assert!(crc_valid(&b));
            // length 16, attributes, timestamp delta, offset delta, key length 4, key,
            // value length 6, value, no headers
            let record = &b[RECORD_BATCH_OVERHEAD..];
            assert_eq!(
                record,
                &[32, 0, 0, 0, 8, 0, 0, 0, type_byte, 12, 0, 0, 0, 0, 0, 7, 0][..]
            );
            assert_eq!(end_txn_marker(&b).unwrap(), Some(marker));
            validate_batches(&b, Validation::Follower).unwrap();
        }
        let data = simple(1, 1, 0);
        assert!(end_txn_marker(&data).is_err());
    }

    #[test]
    fn transactional_builder_sets_the_attribute() {
        let b = transactional(&simple(2, 3, 0));
        let h = BatchHeader::parse(&b).unwrap();
        assert!(h.is_transactional() && !h.is_control());
        assert!(crc_valid(&b));
    }

    #[test]
    fn parses_a_built_batch() {
        let b = simple(3, 10, 5_000);
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.size_in_bytes(), b.len());
        assert_eq!(h.records_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.max_timestamp, 5_002);
        assert!(crc_valid(&b));
        let (headers, used) = validate_batches(&b, LEADER).unwrap();
        assert_eq!((headers.len(), used), (1, b.len()));
    }

    #[test]
    fn offset_and_epoch_rewrite_keeps_crc() {
        let mut b = simple(2, 4, 0);
        set_base_offset(&mut b, 1234);
        set_partition_leader_epoch(&mut b, 7);
        assert!(crc_valid(&b));
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(
            (h.base_offset, h.partition_leader_epoch, h.last_offset()),
            (1234, 7, 1235)
        );
    }

    #[test]
    fn log_append_time_sets_attribute_and_crc() {
        let mut b = simple(2, 4, 0);
        set_log_append_time(&mut b, 99_999);
        assert!(crc_valid(&b));
        let h = BatchHeader::parse(&b).unwrap();
        assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(h.max_timestamp, 99_999);
        assert_eq!(h.base_timestamp, 0);
    }

    #[test]
    fn leader_header_matches_rewriting_the_whole_batch() {
        let b = simple(4, 30, 10);
        let kept = BatchHeader::parse(&b).unwrap().max_timestamp;
        for max in [
            MaxTimestamp::CreateTime(kept),
            MaxTimestamp::CreateTime(kept + 5),
            MaxTimestamp::LogAppendTime(123_456),
        ] {
            let header = leader_header(&b, 77, 3, max);
            let mut whole = b.clone();
            set_base_offset(&mut whole, 77);
            set_partition_leader_epoch(&mut whole, 3);
            set_max_timestamp(&mut whole, max);
            assert_eq!(&header[..], &whole[..RECORD_BATCH_OVERHEAD]);
            let mut joined = header.to_vec();
            joined.extend_from_slice(&b[RECORD_BATCH_OVERHEAD..]);
            assert!(crc_valid(&joined));
        }
    }

    #[test]
    fn rejects_bad_crc() {
        let mut b = simple(2, 4, 0);
        let last = b.len() - 1;
        b[last] ^= 1;
        let e = validate_batches(&b, LEADER).unwrap_err();
        assert!(
            matches!(e, StorageError::CorruptRecord(ref m) if m.contains("crc")),
            "{e}"
        );
    }

    #[test]
    fn rejects_bad_magic() {
        let mut b = simple(1, 4, 0);
        b[MAGIC_OFFSET] = 1;
        let e = validate_batches(&b, LEADER).unwrap_err();
        assert!(
            matches!(e, StorageError::CorruptRecord(ref m) if m.contains("magic")),
            "{e}"
        );
    }

    #[test]
    fn rejects_short_length_and_truncated_batch() {
        let mut b = simple(1, 4, 0);
        b[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&10i32.to_be_bytes());
        assert!(matches!(
            validate_batches(&b, LEADER),
            Err(StorageError::CorruptRecord(_))
        ));
        let b = simple(1, 4, 0);
        let cut = &b[..b.len() - 1];
        assert!(matches!(
            validate_batches(cut, LEADER),
            Err(StorageError::CorruptRecord(_))
        ));
        assert!(matches!(
            validate_batches(&b[..20], LEADER),
            Err(StorageError::CorruptRecord(_))
        ));
    }

    #[test]
    fn rejects_count_mismatch() {
        let mut b = simple(3, 4, 0);
        b[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&2i32.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        let e = validate_batches(&b, LEADER).unwrap_err();
        assert!(
            matches!(e, StorageError::InvalidRecord(ref m) if m.contains("record count")),
            "{e}"
        );
        // a follower accepts fewer records than the offset range (compaction)
        assert!(validate_batches(&b, Validation::Follower).is_ok());
    }

    #[test]
    fn refuses_records_numbered_other_than_by_their_position() {
        let b = builder::batch(&builder::Spec::default(), &[b"a", b"b"]);
        assert!(check_records(&b, &RecordRules::default()).is_ok());
        // Record 0 is 8 bytes (length, attributes, three one-byte varints, value "a", no
        // headers); record 1's offset delta follows its length, attributes and timestamp delta.
        let delta_at = RECORD_BATCH_OVERHEAD + 8 + 3;
        assert_eq!(b[delta_at], 2, "zig-zag 1");
        let mut twice_zero = b.clone();
        twice_zero[delta_at] = 0;
        let crc = compute_crc(&twice_zero);
        twice_zero[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(
            validate_batches(&twice_zero, LEADER).is_ok(),
            "the header is sound"
        );
        let e = check_records(&twice_zero, &RecordRules::default()).unwrap_err();
        assert!(
            matches!(e, StorageError::InvalidRecord(ref m) if m.contains("offset delta 0")),
            "{e}"
        );
    }

    #[test]
    fn rejects_too_large() {
        let b = simple(1, 2000, 0);
        let e = validate_batches(
            &b,
            Validation::Leader {
                max_message_bytes: 1000,
            },
        )
        .unwrap_err();
        assert!(
            matches!(e, StorageError::RecordTooLarge { max: 1000, .. }),
            "{e}"
        );
        assert!(validate_batches(&b, Validation::Follower).is_ok());
    }

    #[test]
    fn follower_ignores_trailing_partial_batch_leader_does_not() {
        let mut two = simple(1, 4, 0);
        let first = two.len();
        two.extend_from_slice(&simple(1, 4, 0)[..30]);
        let (h, used) = validate_batches(&two, Validation::Follower).unwrap();
        assert_eq!((h.len(), used), (1, first));
        assert!(validate_batches(&two, LEADER).is_err());
    }

    #[test]
    fn empty_request_is_invalid() {
        assert!(matches!(
            validate_batches(&[], LEADER),
            Err(StorageError::InvalidRecord(_))
        ));
    }

    #[test]
    fn iter_stops_at_partial_batch() {
        let mut buf = simple(1, 4, 0);
        let one = buf.len();
        buf.extend_from_slice(&simple(2, 4, 0));
        buf.extend_from_slice(&simple(2, 4, 0)[..40]);
        let positions: Vec<usize> = BatchIter::new(&buf).map(|(p, _)| p).collect();
        assert_eq!(positions, vec![0, one]);
    }

    /// Every codec Kafka has, snappy with and without xerial framing.
    const CODECS: [(u8, bool); 6] = [
        (compression::CODEC_NONE, false),
        (compression::CODEC_GZIP, false),
        (compression::CODEC_SNAPPY, false),
        (compression::CODEC_SNAPPY, true),
        (compression::CODEC_LZ4, false),
        (compression::CODEC_ZSTD, false),
    ];

    /// Offsets 50..=59, timestamps 1000 + [0, 10, 20, 30, 40, 50, 200, 70, 200, 90]: the max
    /// (1200) first at offset 56 and again at 58, out of order after it.
    fn distinct_timestamps(codec: u8, xerial: bool) -> Vec<u8> {
        let values: Vec<Vec<u8>> = (0..10).map(|i| format!("value-{i}").into_bytes()).collect();
        let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let deltas = [0, 10, 20, 30, 40, 50, 200, 70, 200, 90];
        let spec = Spec {
            base_offset: 50,
            ..Spec::default()
        };
        compressed(
            &batch_with_timestamp_deltas(&spec, &values, &deltas),
            codec,
            xerial,
        )
    }

    #[test]
    fn finds_the_exact_record_inside_every_codec() {
        for (codec, xerial) in CODECS {
            let b = distinct_timestamps(codec, xerial);
            let h = BatchHeader::parse(&b).unwrap();
            assert_eq!(h.compression_codec(), codec as i16);
            let what = format!("{} (xerial {xerial})", compression::codec_name(codec));
            assert_eq!(
                first_record_timestamp_at_least(&b, 0, 0),
                Some((1000, 50)),
                "{what}"
            );
            assert_eq!(
                first_record_timestamp_at_least(&b, 1030, 0),
                Some((1030, 53)),
                "{what}"
            );
            assert_eq!(
                first_record_timestamp_at_least(&b, 1031, 0),
                Some((1040, 54)),
                "{what}"
            );
            assert_eq!(
                first_record_timestamp_at_least(&b, 1060, 0),
                Some((1200, 56)),
                "{what}"
            );
            assert_eq!(
                first_record_timestamp_at_least(&b, 1000, 57),
                Some((1070, 57)),
                "{what}"
            );
            assert_eq!(
                first_record_timestamp_at_least(&b, 1100, 57),
                Some((1200, 58)),
                "{what}"
            );
            assert_eq!(first_record_timestamp_at_least(&b, 1201, 0), None, "{what}");
            // Records at or after the log start offset are all older than the target: Kafka
            // moves on to the next batch rather than answering with this one.
            assert_eq!(
                first_record_timestamp_at_least(&b, 1100, 59),
                None,
                "{what}"
            );
            assert_eq!(offset_of_max_timestamp(&b), Some(56), "{what}");
        }
    }

    #[test]
    fn log_append_time_answers_with_the_batch_for_every_codec() {
        for (codec, xerial) in CODECS {
            let mut b = distinct_timestamps(codec, xerial);
            set_log_append_time(&mut b, 9_000);
            assert_eq!(
                first_record_timestamp_at_least(&b, 1060, 0),
                Some((9_000, 50))
            );
            assert_eq!(
                first_record_timestamp_at_least(&b, 1060, 55),
                Some((9_000, 55))
            );
            assert_eq!(offset_of_max_timestamp(&b), Some(50));
        }
    }

    #[test]
    fn unreadable_compressed_records_are_answered_at_batch_level() {
        for (codec, xerial) in CODECS.into_iter().skip(1) {
            let mut b = distinct_timestamps(codec, xerial);
            // Garble the compressed records (the CRC is not checked on this path).
            let n = b.len();
            for byte in &mut b[RECORD_BATCH_OVERHEAD + 4..n] {
                *byte = 0xa5;
            }
            let what = format!("{} (xerial {xerial})", compression::codec_name(codec));
            assert_eq!(
                first_record_timestamp_at_least(&b, 1060, 0),
                Some((1200, 50)),
                "{what}"
            );
            assert_eq!(offset_of_max_timestamp(&b), Some(50), "{what}");
        }
    }

    #[test]
    fn a_batch_expanding_beyond_the_bound_is_answered_at_batch_level() {
        // Two records whose values (zeros) decompress past the bound from a small batch.
        let big = vec![0u8; compression::DECOMPRESSED_RECORDS_BYTES_MAX / 2 + 1];
        let spec = Spec {
            base_offset: 10,
            ..Spec::default()
        };
        // Read in full, the answers would be offset 11 (timestamp 1005) for both lookups.
        let plain = batch_with_timestamp_deltas(&spec, &[&big, &big], &[0, 5]);
        for codec in [compression::CODEC_GZIP, compression::CODEC_ZSTD] {
            let b = compressed(&plain, codec, false);
            assert!(b.len() < plain.len() / 100, "compresses well");
            assert_eq!(
                first_record_timestamp_at_least(&b, 1003, 0),
                Some((1005, 10))
            );
            assert_eq!(offset_of_max_timestamp(&b), Some(10));
        }
    }

    fn keyed(keys: &[Option<&[u8]>]) -> Vec<u8> {
        let values: Vec<&[u8]> = keys.iter().map(|_| b"v".as_slice()).collect();
        batch_with_keys(&Spec::default(), keys, &values)
    }

    #[test]
    fn only_the_first_records_without_a_key_are_listed_and_all_are_counted() {
        let n = RECORD_ERRORS_LISTED_MAX * 3;
        let keys: Vec<Option<&[u8]>> = (0..n)
            .map(|i| (i == 0).then_some(b"k".as_slice()))
            .collect();
        let b = compressed(&keyed(&keys), compression::CODEC_ZSTD, false);
        let found = records_without_key(&b).unwrap();
        assert_eq!(found.total, n as u64 - 1);
        let expected: Vec<i32> = (1..=RECORD_ERRORS_LISTED_MAX as i32).collect();
        assert_eq!(found.listed, expected);
    }

    #[test]
    fn finds_the_records_without_a_key_in_every_codec() {
        let b = keyed(&[Some(b"a"), None, Some(b""), None, Some(b"k")]);
        for (codec, xerial) in [
            (compression::CODEC_NONE, false),
            (compression::CODEC_GZIP, false),
            (compression::CODEC_SNAPPY, false),
            (compression::CODEC_SNAPPY, true),
            (compression::CODEC_LZ4, false),
            (compression::CODEC_ZSTD, false),
        ] {
            let batch = if codec == compression::CODEC_NONE {
                b.clone()
            } else {
                compressed(&b, codec, xerial)
            };
            let name = compression::codec_name(codec);
            // An empty key is a key; only a null one is missing.
            assert_eq!(
                records_without_key(&batch).unwrap().listed,
                vec![1, 3],
                "{name}"
            );
            let all = if codec == compression::CODEC_NONE {
                keyed(&[Some(b"x"), Some(b"y")])
            } else {
                compressed(&keyed(&[Some(b"x"), Some(b"y")]), codec, xerial)
            };
            assert!(records_without_key(&all).unwrap().is_empty(), "{name}");
        }
    }

    #[test]
    fn a_batch_whose_records_disagree_with_its_count_is_invalid() {
        let b = keyed(&[Some(b"a"), None]);
        // One record more than declared is left over; one fewer runs out.
        for (count, message) in [(1i32, "records still remaining"), (3, "premature EOF")] {
            let mut bad = b.clone();
            bad[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4]
                .copy_from_slice(&count.to_be_bytes());
            for batch in [
                bad.clone(),
                compressed(&bad, compression::CODEC_GZIP, false),
            ] {
                match records_without_key(&batch) {
                    Err(StorageError::InvalidRecord(m)) => assert!(m.contains(message), "{m}"),
                    other => panic!("count {count}: {other:?}"),
                }
            }
        }
        // A record length running past the records.
        let mut bad = b.clone();
        bad[RECORD_BATCH_OVERHEAD] = 0x7e; // length 63
        assert!(matches!(
            records_without_key(&bad),
            Err(StorageError::InvalidRecord(_))
        ));
    }

    #[test]
    fn undecompressable_and_oversized_records_are_refused() {
        let b = keyed(&[Some(b"a"), None]);
        let mut garbage = compressed(&b, compression::CODEC_ZSTD, false);
        for byte in &mut garbage[RECORD_BATCH_OVERHEAD..] {
            *byte ^= 0x5a;
        }
        assert!(matches!(
            records_without_key(&garbage),
            Err(StorageError::Undecompressable(_))
        ));
        // A record whose value streams past the bound (1 MiB of zeros against 64 KiB): a small
        // compression bomb, refused in every codec; under the bound the same batch passes.
        let big = vec![0u8; 1 << 20];
        let plain = batch_with_keys(&Spec::default(), &[Some(b"k")], &[&big]);
        for (codec, xerial) in [
            (compression::CODEC_GZIP, false),
            (compression::CODEC_SNAPPY, false),
            (compression::CODEC_SNAPPY, true),
            (compression::CODEC_LZ4, false),
            (compression::CODEC_ZSTD, false),
        ] {
            let bomb = compressed(&plain, codec, xerial);
            let name = compression::codec_name(codec);
            match records_without_key_within(&bomb, 64 << 10) {
                Err(StorageError::InvalidRecord(m)) => {
                    assert!(m.contains("decompress to more than"), "{name}: {m}")
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(
                records_without_key_within(&bomb, 2 << 20)
                    .unwrap()
                    .is_empty(),
                "{name}"
            );
        }
    }

    #[test]
    fn finds_first_record_at_timestamp() {
        let mut b = simple(5, 3, 100); // timestamps 100..=104
        set_base_offset(&mut b, 50);
        assert_eq!(first_record_timestamp_at_least(&b, 102, 0), Some((102, 52)));
        assert_eq!(first_record_timestamp_at_least(&b, 0, 0), Some((100, 50)));
        assert_eq!(first_record_timestamp_at_least(&b, 0, 53), Some((103, 53)));
        assert_eq!(first_record_timestamp_at_least(&b, 105, 0), None);
        set_log_append_time(&mut b, 7_000);
        assert_eq!(
            first_record_timestamp_at_least(&b, 102, 0),
            Some((7_000, 50))
        );
        assert_eq!(
            first_record_timestamp_at_least(&b, 102, 52),
            Some((7_000, 52))
        );
    }
}
