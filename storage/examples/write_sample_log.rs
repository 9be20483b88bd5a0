//! Writes a multi-segment sample log with the crate's public API and closes it cleanly, so that
//! Apache Kafka's `kafka.tools.DumpLogSegments` can check what the crate writes
//! (`integration/suites/20-dump-log-segments.sh`).
//!
//! Usage: `write_sample_log <log dir>` — creates the partition `sample-0` under `<log dir>`,
//! appends batches of varied shapes as leader over three leader epochs, deletes the records below
//! offset 50 (DeleteRecords), checkpoints a high watermark and shuts the log manager down. It prints one `key=value` summary line on stdout
//! (what was written) for the suite to compare with what DumpLogSegments reads back.
//!
//! The batches cover what the segment and index code must get right: sizes from one small
//! record to ~40 KiB (several index entries per batch and batches larger than
//! `index.interval.bytes`), keys, headers, record timestamps out of order inside a batch and a
//! batch whose max timestamp is below an earlier one (the time index must stay monotonic),
//! idempotent batches of one producer and non-idempotent ones. Every record's value starts with
//! `value-<offset>-`, so the reader can check each record sits at the offset it was written to.

use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;

use kafkaiq_storage::{LogConfig, LogManager, TopicPartition};

/// Small segments so the sample has several: a roll every 64 KiB.
const SEGMENT_BYTES: u32 = 64 * 1024;
const BATCH_COUNT: usize = 120;
/// The producer id of the idempotent batches.
const PRODUCER_ID: i64 = 4242;
const PRODUCER_EPOCH: i16 = 0;
/// Leader epochs and the batch index at which each leadership begins.
const EPOCHS: [(usize, i32); 3] = [(0, 0), (40, 2), (80, 5)];
const BASE_TIMESTAMP_MS: i64 = 1_700_000_000_000;
/// A DeleteRecords offset inside the first segment (and inside a batch).
const DELETE_RECORDS_BEFORE: i64 = 50;

fn main() -> Result<(), Box<dyn Error>> {
    let log_dir = PathBuf::from(
        std::env::args_os()
            .nth(1)
            .ok_or("usage: write_sample_log <log dir>")?,
    );
    std::fs::create_dir_all(&log_dir)?;
    let config = LogConfig {
        segment_bytes: SEGMENT_BYTES,
        ..LogConfig::default()
    };
    let mut now_ms = BASE_TIMESTAMP_MS;
    let manager = LogManager::open(std::slice::from_ref(&log_dir), config.clone(), now_ms)?;
    let tp = TopicPartition {
        topic: "sample".to_string(),
        partition: 0,
    };
    let log = manager.get_or_create(&tp, config, now_ms)?;

    let mut next_offset = log.log_end_offset();
    let mut records_total = 0u64;
    let mut next_sequence = 0i32;
    let mut idempotent_batches = 0usize;
    let mut leader_epoch = 0;
    for i in 0..BATCH_COUNT {
        if let Some(&(_, epoch)) = EPOCHS.iter().find(|(start, _)| *start == i) {
            // A new leader registers its epoch at the log end before writing, as Kafka's
            // Partition.makeLeader does.
            log.assign_epoch_start_offset(epoch, log.log_end_offset())?;
            leader_epoch = epoch;
        }
        let shape = BatchShape::for_index(i);
        let idempotent = i % 3 == 0;
        let (producer_id, producer_epoch, base_sequence) = if idempotent {
            (PRODUCER_ID, PRODUCER_EPOCH, next_sequence)
        } else {
            (-1, -1, -1)
        };
        let batch = encode_batch(
            next_offset,
            &shape,
            producer_id,
            producer_epoch,
            base_sequence,
        );
        now_ms += 10;
        let info = log.append_as_leader(&batch, leader_epoch, now_ms)?;
        if info.first_offset != next_offset
            || info.last_offset != next_offset + shape.records as i64 - 1
        {
            return Err(format!(
                "batch {i}: appended at {}..={}, expected {}..={}",
                info.first_offset,
                info.last_offset,
                next_offset,
                next_offset + shape.records as i64 - 1
            )
            .into());
        }
        if idempotent {
            next_sequence += shape.records as i32;
            idempotent_batches += 1;
        }
        next_offset += shape.records as i64;
        records_total += shape.records as u64;
    }

    // DeleteRecords inside the first segment: the log start offset moves above the first
    // segment's base offset (so Kafka's rule puts it in log-start-offset-checkpoint) and the
    // first leader epoch entry moves up with it.
    let log_start_offset = log.delete_records_before(DELETE_RECORDS_BEFORE)?;

    let log_end_offset = log.log_end_offset();
    let size_bytes = log.size_bytes();
    let latest_epoch = log.latest_epoch();
    let mut high_watermarks = HashMap::new();
    high_watermarks.insert(tp.clone(), log_end_offset);
    manager.checkpoint_high_watermarks(&high_watermarks)?;
    drop(log);
    manager.shutdown()?;

    println!(
        "partition_dir={} batches={BATCH_COUNT} records={records_total} log_start_offset={log_start_offset} \
         log_end_offset={log_end_offset} \
         size_bytes={size_bytes} latest_epoch={} producer_id={PRODUCER_ID} producer_epoch={PRODUCER_EPOCH} \
         idempotent_batches={idempotent_batches} last_sequence={}",
        log_dir.join("sample-0").display(),
        latest_epoch.map_or(-1, i64::from),
        next_sequence - 1,
    );
    Ok(())
}

/// What one sample batch holds; a pure function of its index so the sample is reproducible.
struct BatchShape {
    records: usize,
    value_len: usize,
    with_key: bool,
    with_headers: bool,
    /// Timestamp of each record relative to the batch's first.
    timestamp_deltas: Vec<i64>,
    first_timestamp: i64,
}

impl BatchShape {
    fn for_index(i: usize) -> BatchShape {
        let records = match i % 7 {
            0 => 1,
            1 => 3,
            2 => 10,
            3 => 25,
            4 => 2,
            5 => 7,
            _ => 40,
        };
        let value_len = match i % 5 {
            0 => 16,
            1 => 100,
            2 => 500,
            3 => 1_000,
            _ => 60,
        };
        // Out of order inside the batch: the max timestamp is not the last record's.
        let timestamp_deltas = (0..records as i64)
            .map(|r| if r % 4 == 1 { r + 3 } else { r })
            .collect();
        // Every 11th batch is stamped before its predecessors, so its max timestamp is lower
        // than one already indexed.
        let first_timestamp = if i % 11 == 10 {
            BASE_TIMESTAMP_MS + i as i64 * 100 - 5_000
        } else {
            BASE_TIMESTAMP_MS + i as i64 * 100
        };
        BatchShape {
            records,
            value_len,
            with_key: i % 2 == 0,
            with_headers: i % 4 == 1,
            timestamp_deltas,
            first_timestamp,
        }
    }
}

/// Encodes an uncompressed v2 record batch (Kafka's DefaultRecordBatch layout). The base offset
/// and partition leader epoch are placeholders the log overwrites; the values embed the offset
/// each record is expected to get (`expected_base_offset` + its offset delta).
fn encode_batch(
    expected_base_offset: i64,
    shape: &BatchShape,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) -> Vec<u8> {
    let mut records = Vec::new();
    for r in 0..shape.records {
        let offset = expected_base_offset + r as i64;
        let mut value = format!("value-{offset}-").into_bytes();
        value.resize(shape.value_len.max(value.len()), b'x');
        let key = shape
            .with_key
            .then(|| format!("key-{}", offset % 13).into_bytes());
        let mut body = Vec::new();
        body.push(0u8); // record attributes
        put_varlong(&mut body, shape.timestamp_deltas[r]);
        put_varint(&mut body, r as i32); // offset delta
        match &key {
            Some(k) => {
                put_varint(&mut body, k.len() as i32);
                body.extend_from_slice(k);
            }
            None => put_varint(&mut body, -1),
        }
        put_varint(&mut body, value.len() as i32);
        body.extend_from_slice(&value);
        if shape.with_headers {
            put_varint(&mut body, 2);
            for (k, v) in [
                ("trace", format!("t{offset}")),
                ("origin", "sample".to_string()),
            ] {
                put_varint(&mut body, k.len() as i32);
                body.extend_from_slice(k.as_bytes());
                put_varint(&mut body, v.len() as i32);
                body.extend_from_slice(v.as_bytes());
            }
        } else {
            put_varint(&mut body, 0);
        }
        put_varint(&mut records, body.len() as i32);
        records.extend_from_slice(&body);
    }

    let max_timestamp = shape.first_timestamp + shape.timestamp_deltas.iter().max().unwrap();
    let mut batch = Vec::with_capacity(61 + records.len());
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset: assigned by the log
    batch.extend_from_slice(&0i32.to_be_bytes()); // batch length, below
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch: stamped by the log
    batch.push(2); // magic
    batch.extend_from_slice(&0u32.to_be_bytes()); // CRC, below
    batch.extend_from_slice(&0i16.to_be_bytes()); // attributes: no compression, CreateTime
    batch.extend_from_slice(&(shape.records as i32 - 1).to_be_bytes()); // last offset delta
    batch.extend_from_slice(&shape.first_timestamp.to_be_bytes());
    batch.extend_from_slice(&max_timestamp.to_be_bytes());
    batch.extend_from_slice(&producer_id.to_be_bytes());
    batch.extend_from_slice(&producer_epoch.to_be_bytes());
    batch.extend_from_slice(&base_sequence.to_be_bytes());
    batch.extend_from_slice(&(shape.records as i32).to_be_bytes());
    batch.extend_from_slice(&records);
    let batch_length = (batch.len() - 12) as i32;
    batch[8..12].copy_from_slice(&batch_length.to_be_bytes());
    // The CRC covers everything from the attributes to the end.
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn put_varint(buf: &mut Vec<u8>, value: i32) {
    put_unsigned_varint(buf, ((value << 1) ^ (value >> 31)) as u32 as u64);
}

fn put_varlong(buf: &mut Vec<u8>, value: i64) {
    put_unsigned_varint(buf, ((value << 1) ^ (value >> 63)) as u64);
}

fn put_unsigned_varint(buf: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        buf.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    buf.push(value as u8);
}
