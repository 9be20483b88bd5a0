//! Fetch (key 1), v4-17: whole batches up to the high watermark, long polling, fetch sessions.
//!
//! The request is planned against the fetch session cache (KIP-227), read once, and if fewer
//! than `min_bytes` are available it is parked in the purgatory until a watched partition moves
//! or `max_wait_ms` passes, then read again. `max_bytes` bounds the response and
//! `partition_max_bytes` each partition, except that the first batch of the first partition
//! with data is always returned whole (KIP-74), so a batch larger than the limits still makes
//! progress. Records are never `None` on the wire (librdkafka rejects a -1 record set size).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseKind};
use kafkaiq_storage::TopicPartition;
use uuid::Uuid;

use super::topic_name;
use crate::context::Context;
use crate::errors::ApiError;
use crate::fetch_session::{FetchPartitionSpec, SessionPlan};
use crate::limits::FETCH_WAIT_MS_MAX;
use crate::replica::{Offsets, Partition};

/// Kafka's `READ_COMMITTED` isolation level.
const READ_COMMITTED: i8 = 1;

struct PartitionRead {
    spec_index: usize,
    result: Result<(Bytes, Offsets), ApiError>,
    diverging: Option<(i32, i64)>,
}

fn read_all(
    ctx: &Arc<Context>,
    plan: &SessionPlan,
    partitions: &[Option<Arc<Partition>>],
    max_bytes: usize,
    from_follower: bool,
    version: i16,
) -> (Vec<PartitionRead>, usize) {
    let image = ctx.image();
    let mut remaining = max_bytes;
    let mut total = 0usize;
    let mut reads = Vec::with_capacity(plan.partitions.len());
    for (i, spec) in plan.partitions.iter().enumerate() {
        // Looked up on every read, not only when the request arrived: a partition deleted
        // while the fetch was parked answers with the routing error, not a storage error.
        let partition = match &partitions[i] {
            None if spec.topic.is_empty() => Err(ApiError::UnknownTopicId),
            _ => ctx.replicas.partition_or_error(
                &image,
                &TopicPartition {
                    topic: spec.topic.clone(),
                    partition: spec.partition,
                },
            ),
        };
        let mut diverging = None;
        let result = partition.and_then(|p| {
            if version >= 12 && spec.last_fetched_epoch >= 0 {
                let offsets = p.check_leader_and_epoch(spec.current_leader_epoch, true)?;
                if spec.fetch_offset < offsets.log_start_offset {
                    return Err(ApiError::OffsetOutOfRange);
                }
                let end = p.log.end_offset_for_epoch(spec.last_fetched_epoch);
                if end.epoch < spec.last_fetched_epoch || end.end_offset < spec.fetch_offset {
                    diverging = Some((end.epoch, end.end_offset));
                    return Ok((Bytes::new(), offsets));
                }
            }
            let limit = (spec.partition_max_bytes.max(0) as usize).min(remaining);
            let read = p.read(
                spec.fetch_offset,
                spec.current_leader_epoch,
                limit,
                total == 0,
                from_follower,
            )?;
            Ok((read.records, read.offsets))
        });
        if let Ok((records, _)) = &result {
            total += records.len();
            remaining = remaining.saturating_sub(records.len());
        }
        reads.push(PartitionRead {
            spec_index: i,
            result,
            diverging,
        });
    }
    (reads, total)
}

pub async fn handle(ctx: &Arc<Context>, version: i16, request: FetchRequest) -> ResponseKind {
    // v15+ carries the replica id in replica_state.
    let replica_id = if version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    let from_follower = replica_id >= 0;
    let image = ctx.image();
    // v13+ names topics by id; an unknown id keeps an empty name (UNKNOWN_TOPIC_ID below).
    let resolve = |name: &kafka_protocol::messages::TopicName, id: &Uuid| -> (String, Uuid) {
        if version >= 13 {
            let name = image
                .topic_by_id(id)
                .map(|t| t.name.clone())
                .unwrap_or_default();
            (name, *id)
        } else {
            (name.0.as_str().to_owned(), Uuid::nil())
        }
    };
    let requested: Vec<FetchPartitionSpec> = request
        .topics
        .iter()
        .flat_map(|t| {
            let (topic, topic_id) = resolve(&t.topic, &t.topic_id);
            t.partitions.iter().map(move |p| FetchPartitionSpec {
                topic: topic.clone(),
                topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
                current_leader_epoch: if version >= 9 {
                    p.current_leader_epoch
                } else {
                    -1
                },
                log_start_offset: p.log_start_offset,
                last_fetched_epoch: if version >= 12 {
                    p.last_fetched_epoch
                } else {
                    -1
                },
            })
        })
        .collect();
    let forgotten: Vec<(Uuid, String, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let (topic, topic_id) = resolve(&t.topic, &t.topic_id);
            t.partitions
                .iter()
                .map(move |p| (topic_id, topic.clone(), *p))
        })
        .collect();
    let (session_id, epoch) = if version >= 7 {
        (request.session_id, request.session_epoch)
    } else {
        (0, -1)
    };
    let plan = match ctx
        .fetch_sessions
        .plan(session_id, epoch, requested, &forgotten)
    {
        Ok(plan) => plan,
        Err(e) => {
            let mut response = FetchResponse::default();
            if version >= 7 {
                response.error_code = e.code();
            }
            return ResponseKind::Fetch(response);
        }
    };

    let partitions: Vec<Option<Arc<Partition>>> = plan
        .partitions
        .iter()
        .map(|s| {
            ctx.replicas
                .partition_or_error(
                    &image,
                    &TopicPartition {
                        topic: s.topic.clone(),
                        partition: s.partition,
                    },
                )
                .ok()
        })
        .collect();
    let max_bytes = if version >= 3 {
        request.max_bytes.max(0) as usize
    } else {
        usize::MAX
    };
    let min_bytes = request.min_bytes.max(0) as usize;
    let max_wait_ms = i64::from(request.max_wait_ms).clamp(0, FETCH_WAIT_MS_MAX) as u64;

    let (mut reads, total) = read_all(ctx, &plan, &partitions, max_bytes, from_follower, version);
    let any_error = reads
        .iter()
        .any(|r| r.result.is_err() || r.diverging.is_some());
    if total < min_bytes && !any_error && max_wait_ms > 0 {
        let watched: Vec<Arc<Partition>> = partitions.iter().flatten().cloned().collect();
        let waited = ctx
            .replicas
            .purgatory
            .wait_until(&watched, Duration::from_millis(max_wait_ms), || {
                let (reads, total) =
                    read_all(ctx, &plan, &partitions, max_bytes, from_follower, version);
                let error = reads
                    .iter()
                    .any(|r| r.result.is_err() || r.diverging.is_some());
                let ready = (total >= min_bytes || error).then_some(reads);
                async move { ready }
            })
            .await;
        reads = match waited {
            Some(r) => r,
            None => read_all(ctx, &plan, &partitions, max_bytes, from_follower, version).0,
        };
    }

    let read_committed = version >= 4 && request.isolation_level == READ_COMMITTED;
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    for read in reads {
        let spec = &plan.partitions[read.spec_index];
        let mut data = PartitionData::default()
            .with_partition_index(spec.partition)
            .with_records(Some(Bytes::new()));
        let (has_records_or_error, next_offset, hw, log_start) = match read.result {
            Ok((records, offsets)) => {
                data.high_watermark = offsets.high_watermark;
                // No transactions yet: the last stable offset is the high watermark.
                data.last_stable_offset = offsets.high_watermark;
                if version >= 5 {
                    data.log_start_offset = offsets.log_start_offset;
                }
                if let Some((epoch, end_offset)) = read.diverging {
                    data.diverging_epoch = EpochEndOffset::default()
                        .with_epoch(epoch)
                        .with_end_offset(end_offset);
                }
                let has = !records.is_empty() || read.diverging.is_some();
                let next = (!records.is_empty()).then(|| last_offset_after(&records));
                data.records = Some(records);
                (
                    has,
                    next.flatten(),
                    offsets.high_watermark,
                    offsets.log_start_offset,
                )
            }
            Err(e) => {
                data.error_code = e.code();
                data.high_watermark = -1;
                data.last_stable_offset = -1;
                if version >= 5 {
                    data.log_start_offset = -1;
                }
                (true, None, -1, -1)
            }
        };
        // No transactions: read_committed gets an empty list, read_uncommitted null, as Kafka.
        data.aborted_transactions = read_committed.then(Vec::new);
        if plan.incremental
            && !ctx.fetch_sessions.should_send(
                plan.session_id,
                spec,
                next_offset,
                hw,
                log_start,
                has_records_or_error,
            )
        {
            continue;
        }
        if !plan.incremental && plan.session_id != 0 {
            ctx.fetch_sessions.should_send(
                plan.session_id,
                spec,
                next_offset,
                hw,
                log_start,
                has_records_or_error,
            );
        }
        match responses.last_mut() {
            Some(t) if t.topic.0.as_str() == spec.topic && t.topic_id == spec.topic_id => {
                t.partitions.push(data)
            }
            _ => {
                let mut t = FetchableTopicResponse::default().with_partitions(vec![data]);
                if version >= 13 {
                    t.topic_id = spec.topic_id;
                } else {
                    t.topic = topic_name(&spec.topic);
                }
                responses.push(t)
            }
        }
    }
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= 7 {
        response.session_id = plan.session_id;
    }
    ResponseKind::Fetch(response)
}

/// The offset after the last complete batch in `records` (the client's next fetch offset).
fn last_offset_after(records: &[u8]) -> Option<i64> {
    let mut pos = 0usize;
    let mut next = None;
    while records.len() - pos >= kafkaiq_storage::batch::RECORD_BATCH_OVERHEAD {
        let header = kafkaiq_storage::batch::BatchHeader::parse(&records[pos..]).ok()?;
        let size = header.size_in_bytes();
        if size == 0 || records.len() - pos < size {
            break;
        }
        next = Some(header.next_offset());
        pos += size;
    }
    next
}
