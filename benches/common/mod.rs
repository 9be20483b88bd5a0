//! Frames and record batches shaped like the Java client's, shared by the benchmarks.

#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafkaiq::protocol::{ApiKey, RequestHeader, RequestKind, StrBytes};

/// Producer `batch.size` default: the largest batch the Java producer builds by default.
pub const PRODUCER_BATCH_BYTES: usize = 16 * 1024;
/// Consumer `max.partition.fetch.bytes` default: what one partition of a Fetch answer carries.
pub const FETCH_PARTITION_BYTES: usize = 1024 * 1024;
pub const RECORD_VALUE_BYTES: usize = 100;
/// Bytes of a v2 batch header, before its first record.
const BATCH_HEADER_BYTES: usize = 61;
/// Framing of one 100-byte-value record without key or headers, in varints: length (2),
/// attributes (1), timestamp and offset deltas (2 + 2 up to 8191 records), key length (1), value
/// length (2), header count (1).
const RECORD_OVERHEAD_BYTES: usize = 11;

/// Records of 100-byte values that fit one batch of `target_bytes`.
pub fn records_per_batch(target_bytes: usize) -> usize {
    target_bytes.saturating_sub(BATCH_HEADER_BYTES) / (RECORD_VALUE_BYTES + RECORD_OVERHEAD_BYTES)
}

/// One uncompressed v2 batch of 100-byte values, as close to `target_bytes` as whole records
/// allow. `producer` is (producer id, epoch, first sequence) for an idempotent producer, `None`
/// for a plain one.
pub fn record_batch(
    target_bytes: usize,
    base_offset: i64,
    producer: Option<(i64, i16, i32)>,
) -> Bytes {
    let (producer_id, producer_epoch, base_sequence) = producer.unwrap_or((-1, -1, -1));
    let value = Bytes::from(vec![b'x'; RECORD_VALUE_BYTES]);
    // Current timestamps: a broker's time-based retention (7 days by default) would delete
    // batches stamped in the past.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64;
    let records: Vec<Record> = (0..records_per_batch(target_bytes) as i64)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i,
            sequence: if base_sequence < 0 {
                -1
            } else {
                base_sequence + i as i32
            },
            timestamp: now_ms + i,
            key: None,
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode record batch");
    buf.freeze()
}

/// Consecutive producer-sized batches filling `target_bytes`, as a log holds them.
pub fn record_batches(target_bytes: usize) -> Bytes {
    let mut out = BytesMut::with_capacity(target_bytes);
    let per_batch = records_per_batch(PRODUCER_BATCH_BYTES) as i64;
    let mut offset = 0;
    while out.len() + PRODUCER_BATCH_BYTES <= target_bytes {
        out.extend_from_slice(&record_batch(PRODUCER_BATCH_BYTES, offset, None));
        offset += per_batch;
    }
    out.freeze()
}

/// A request frame without its size prefix, as the connection layer hands it to the codec.
pub fn request_frame(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &RequestKind,
) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("producer-1")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api_key.request_header_version(version))
        .expect("encode header");
    body.encode(&mut buf, version).expect("encode body");
    buf.freeze()
}
