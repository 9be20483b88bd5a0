//! The seam between the group coordinator and the log it writes: the partitions of
//! `__consumer_offsets` this node leads, seen as "append these coordinator records to partition
//! P and tell me when they are durable", plus the reads a load needs.
//!
//! [`ReplicaLog`] is the real one, over the replica layer: an append is a leader append (as a
//! produce with acks=all), durability is the high watermark covering the records (the
//! purgatory wakes the wait). Tests implement [`CoordinatorLog`] to make appends fail, or never
//! become durable, or become durable on demand (`group::tests::MemoryLog`).
//!
//! Thread-safety: every method may be called with the group lock held (lock order group →
//! partition); none blocks for long, and only the future of
//! [`CoordinatorLog::wait_for_high_watermark`] waits, outside that lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafkaiq_storage::TopicPartition;

use super::{CoordinatorRecord, OFFSETS_TOPIC_NAME};
use crate::errors::ApiError;
use crate::metadata::MetadataCache;
use crate::replica::{Partition, ReplicaManager};

/// How a wait for the high watermark ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The high watermark covers the records.
    Durable,
    /// The timeout passed first. The records may still become durable, or be truncated away
    /// if leadership moves: their fate is unknown.
    Unknown,
    /// This node no longer leads the partition; its coordinator state is being unloaded.
    NotLeader,
}

pub type DurabilityFuture<'a> = Pin<Box<dyn Future<Output = Durability> + Send + 'a>>;

/// `__consumer_offsets` as the coordinator uses it.
pub trait CoordinatorLog: Send + Sync {
    /// Appends `records` (all for `partition`) as its leader, in one batch. Returns the offset
    /// the high watermark must reach for them to be durable: the offset after the last one.
    fn append(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        now_ms: i64,
    ) -> Result<i64, ApiError>;

    /// [`CoordinatorLog::append`] as one transactional batch of `producer_id` at
    /// `producer_epoch` (the offsets of TxnOffsetCommit, which its transaction's marker commits
    /// or aborts). Logs without transactions refuse it.
    fn append_transactional(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        producer: (i64, i16),
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        let _ = (partition, records, producer, now_ms);
        Err(ApiError::UnknownServerError(
            "this log takes no transactional writes".into(),
        ))
    }

    /// The high watermark of `partition`, or an error if this node does not lead it.
    fn high_watermark(&self, partition: i32) -> Result<i64, ApiError>;

    /// Resolves once the high watermark of `partition` reaches `offset`, this node stops
    /// leading it, or `timeout` passes, whichever comes first.
    fn wait_for_high_watermark(
        &self,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> DurabilityFuture<'_>;

    /// The first offset of `partition`, where a load starts.
    fn log_start_offset(&self, partition: i32) -> Result<i64, ApiError>;

    /// Whole record batches of `partition` from `offset`, at most about `max_bytes` (at least
    /// one batch), up to the log end offset: a load replays everything the log holds, and what
    /// is above the high watermark becomes pending (Kafka's loader reads to the log end too).
    /// Empty at the log end.
    fn read(&self, partition: i32, offset: i64, max_bytes: usize) -> Result<Bytes, ApiError>;
}

/// [`CoordinatorLog`] over the replica layer.
pub struct ReplicaLog {
    replicas: Arc<ReplicaManager>,
    cache: Arc<MetadataCache>,
    /// The coordinator's topic: `__consumer_offsets` or `__transaction_state`.
    topic: &'static str,
}

impl ReplicaLog {
    pub fn new(replicas: Arc<ReplicaManager>, cache: Arc<MetadataCache>) -> ReplicaLog {
        Self::of_topic(replicas, cache, OFFSETS_TOPIC_NAME)
    }

    /// The same seam over another coordinator topic.
    pub fn of_topic(
        replicas: Arc<ReplicaManager>,
        cache: Arc<MetadataCache>,
        topic: &'static str,
    ) -> ReplicaLog {
        ReplicaLog {
            replicas,
            cache,
            topic,
        }
    }

    fn partition(&self, partition: i32) -> Result<Arc<Partition>, ApiError> {
        let tp = TopicPartition {
            topic: self.topic.to_owned(),
            partition,
        };
        self.replicas.partition_or_error(&self.cache.image(), &tp)
    }
}

impl CoordinatorLog for ReplicaLog {
    fn append(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        let p = self.partition(partition)?;
        // The log assigns the offsets; the batch's are relative.
        let batch = encode_batch(records, 0, now_ms)?;
        let info = p.append_records_to_leader(&batch, -1, now_ms)?;
        Ok(info.last_offset + 1)
    }

    fn append_transactional(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        producer: (i64, i16),
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        let p = self.partition(partition)?;
        let batch = encode_batch_of(records, 0, now_ms, Some(producer))?;
        let info = p.append_records_to_leader(&batch, -1, now_ms)?;
        Ok(info.last_offset + 1)
    }

    fn high_watermark(&self, partition: i32) -> Result<i64, ApiError> {
        Ok(self
            .partition(partition)?
            .check_leader_and_epoch(-1, true)?
            .high_watermark)
    }

    fn wait_for_high_watermark(
        &self,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> DurabilityFuture<'_> {
        Box::pin(async move {
            let Ok(p) = self.partition(partition) else {
                return Durability::NotLeader;
            };
            let check = || {
                // The high watermark covering the records is what makes them durable; an ISR
                // that shrank below min ISR meanwhile (NOT_ENOUGH_REPLICAS_AFTER_APPEND for a
                // produce) does not take them back.
                let outcome = match p.acks_all_outcome(offset) {
                    None => None,
                    Some(Err(ApiError::NotLeaderOrFollower)) => Some(Durability::NotLeader),
                    Some(_) => Some(Durability::Durable),
                };
                async move { outcome }
            };
            self.replicas
                .purgatory
                .wait_until(std::slice::from_ref(&p), timeout, check)
                .await
                .unwrap_or(Durability::Unknown)
        })
    }

    fn log_start_offset(&self, partition: i32) -> Result<i64, ApiError> {
        Ok(self.partition(partition)?.offsets().log_start_offset)
    }

    fn read(&self, partition: i32, offset: i64, max_bytes: usize) -> Result<Bytes, ApiError> {
        let p = self.partition(partition)?;
        Ok(p.read(
            offset,
            &crate::replica::FetchParams::leader_to_log_end(max_bytes),
        )?
        .records)
    }
}

/// One uncompressed v2 batch of coordinator records, as Kafka's coordinator writes them, its
/// first record at `first_offset`.
pub(crate) fn encode_batch(
    records: &[CoordinatorRecord],
    first_offset: i64,
    now_ms: i64,
) -> Result<Bytes, ApiError> {
    encode_batch_of(records, first_offset, now_ms, None)
}

/// [`encode_batch`], transactional for `producer` (id, epoch) when given. A coordinator's
/// transactional batch carries no sequence (Kafka's coordinator writes `NO_SEQUENCE`): the
/// log does not check the sequence of such a batch.
pub(crate) fn encode_batch_of(
    records: &[CoordinatorRecord],
    first_offset: i64,
    now_ms: i64,
    producer: Option<(i64, i16)>,
) -> Result<Bytes, ApiError> {
    let (producer_id, producer_epoch) = producer.unwrap_or((-1, -1));
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: producer.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: first_offset + i as i64,
            // The encoder keeps records in one batch while offset minus sequence stays the
            // same; the batch's base sequence is then the first record's, -1 (none).
            sequence: i as i32 - 1,
            timestamp: now_ms,
            key: Some(r.key.clone()),
            value: r.value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| ApiError::InvalidRecord(format!("cannot encode coordinator records: {e}")))?;
    Ok(buf.freeze())
}
