//! Reads a replica's log straight from its segment files once the nodes have stopped: both
//! brokers keep Kafka's on-disk layout, so one reader serves KafkaIQ and Apache Kafka. A segment
//! is a sequence of v2 record batches (8-byte base offset, 4-byte length, then the batch);
//! a torn tail (a length running past the end, zeros) ends the read.

use std::path::Path;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::history::{id_of, LogRecord};

/// Bytes of a batch before its records count toward the length field: base offset + length.
const BATCH_LOG_OVERHEAD: usize = 12;

/// Every record of the segments, in order, for `partition`.
pub fn read(partition: i32, segments: &[impl AsRef<Path>]) -> anyhow::Result<Vec<LogRecord>> {
    let mut out = Vec::new();
    for segment in segments {
        let bytes = std::fs::read(segment.as_ref())?;
        let mut at = 0usize;
        while at + BATCH_LOG_OVERHEAD <= bytes.len() {
            let length = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            if length <= 0 || at + BATCH_LOG_OVERHEAD + length as usize > bytes.len() {
                break;
            }
            let end = at + BATCH_LOG_OVERHEAD + length as usize;
            let mut batch = Bytes::copy_from_slice(&bytes[at..end]);
            let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| {
                anyhow::anyhow!("{}: batch at byte {at}: {e}", segment.as_ref().display())
            })?;
            for r in set.records {
                if r.control {
                    continue;
                }
                out.push(LogRecord {
                    partition,
                    offset: r.offset,
                    id: r.value.as_deref().and_then(id_of),
                    producer: Some((r.producer_id, r.producer_epoch, r.sequence)),
                });
            }
            at = end;
        }
    }
    Ok(out)
}
