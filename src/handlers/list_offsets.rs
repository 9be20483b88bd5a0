//! ListOffsets (key 2), v1-10: earliest (-2), latest (-1), max timestamp (-3), earliest local
//! (-4, the same as earliest without tiered storage), latest tiered (-5, none without tiered
//! storage) and by timestamp, with the leader epoch of the returned offset (v4+).
//! Leader-only, with `current_leader_epoch` fencing.
//!
//! As Kafka's `Partition#fetchOffsetForTimestamp`: a client (replica id -1) reads offsets up to
//! the high watermark, and while a new leader's high watermark has not yet reached the start of
//! its leader epoch it answers OFFSET_NOT_AVAILABLE for the latest offset (and for a timestamp
//! found nowhere below the high watermark), which the Java consumer retries after refreshing
//! metadata. A follower (replica id >= 0, after OFFSET_OUT_OF_RANGE) reads up to the log end
//! offset, without that check.

use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};
use kafkaiq_storage::{TimestampAndOffset, TopicPartition};

use crate::context::Context;
use crate::errors::ApiError;

pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// (timestamp, offset, leader epoch) for one partition, or `None` for "no such offset"
/// (answered -1/-1 without error, as Kafka does).
fn lookup(
    ctx: &Arc<Context>,
    tp: &TopicPartition,
    timestamp: i64,
    current_leader_epoch: i32,
    from_replica: bool,
) -> Result<Option<(i64, i64, i32)>, ApiError> {
    let image = ctx.image();
    let partition = ctx.replicas.partition_or_error(&image, tp)?;
    let (offsets, epoch_start) = partition.leader_offsets(current_leader_epoch)?;
    let log = partition.log();
    let epoch_of = |offset: i64| log.epoch_for_offset(offset).unwrap_or(-1);
    // No transactions: the last fetchable offset for both isolation levels is the HW.
    let last_fetchable = if from_replica {
        offsets.log_end_offset
    } else {
        offsets.high_watermark
    };
    let not_available =
        !from_replica && epoch_start.is_some_and(|start| start > offsets.high_watermark);
    if not_available && timestamp == LATEST_TIMESTAMP {
        return Err(ApiError::OffsetNotAvailable);
    }
    let found = lookup_in(&log, timestamp, &offsets, last_fetchable, epoch_of)?;
    if found.is_none()
        && not_available
        && timestamp != EARLIEST_TIMESTAMP
        && timestamp != EARLIEST_LOCAL_TIMESTAMP
        && timestamp != LATEST_TIERED_TIMESTAMP
    {
        return Err(ApiError::OffsetNotAvailable);
    }
    Ok(found)
}

fn lookup_in(
    log: &kafkaiq_storage::Log,
    timestamp: i64,
    offsets: &crate::replica::Offsets,
    last_fetchable: i64,
    epoch_of: impl Fn(i64) -> i32,
) -> Result<Option<(i64, i64, i32)>, ApiError> {
    Ok(match timestamp {
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Some((
            -1,
            offsets.log_start_offset,
            epoch_of(offsets.log_start_offset),
        )),
        LATEST_TIMESTAMP => Some((-1, last_fetchable, offsets.leader_epoch)),
        LATEST_TIERED_TIMESTAMP => None,
        MAX_TIMESTAMP => log
            .max_timestamp_and_offset()?
            .filter(|t| t.offset < last_fetchable)
            .map(
                |TimestampAndOffset {
                     timestamp,
                     offset,
                     leader_epoch,
                 }| {
                    (
                        timestamp,
                        offset,
                        leader_epoch.unwrap_or_else(|| epoch_of(offset)),
                    )
                },
            ),
        t if t >= 0 => log
            .fetch_offset_by_timestamp(t)?
            .filter(|t| t.offset < last_fetchable)
            .map(
                |TimestampAndOffset {
                     timestamp,
                     offset,
                     leader_epoch,
                 }| {
                    (
                        timestamp,
                        offset,
                        leader_epoch.unwrap_or_else(|| epoch_of(offset)),
                    )
                },
            ),
        _ => {
            return Err(ApiError::InvalidRequest(format!(
                "invalid timestamp {timestamp}"
            )))
        }
    })
}

/// Answers on a blocking thread: a lookup by timestamp reads index files and may decompress a
/// batch, which must not hold a tokio worker (the replica fetchers, heartbeats and the Raft
/// transport share them).
pub async fn handle(ctx: &Arc<Context>, version: i16, request: ListOffsetsRequest) -> ResponseKind {
    let ctx = ctx.clone();
    tokio::task::spawn_blocking(move || answer(&ctx, version, request))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// The partitions named more than once: each of their entries is answered INVALID_REQUEST, as
/// Kafka's `ListOffsetsRequest#duplicatePartitions` makes it (so one request cannot ask for the
/// same costly lookup many times).
fn duplicate_partitions(request: &ListOffsetsRequest) -> HashSet<(&str, i32)> {
    let mut seen = HashSet::new();
    let mut duplicates = HashSet::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let key = (topic.name.0.as_str(), p.partition_index);
            if !seen.insert(key) {
                duplicates.insert(key);
            }
        }
    }
    duplicates
}

fn answer(ctx: &Arc<Context>, version: i16, request: ListOffsetsRequest) -> ResponseKind {
    let from_replica = request.replica_id.0 >= 0;
    let duplicates: HashSet<(String, i32)> = duplicate_partitions(&request)
        .into_iter()
        .map(|(t, p)| (t.to_owned(), p))
        .collect();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.as_str().to_owned();
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let tp = TopicPartition {
                        topic: name.clone(),
                        partition: p.partition_index,
                    };
                    let epoch = if version >= 4 {
                        p.current_leader_epoch
                    } else {
                        -1
                    };
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let found = if duplicates.contains(&(name.clone(), p.partition_index)) {
                        Err(ApiError::InvalidRequest(format!(
                            "partition {tp} named more than once"
                        )))
                    } else {
                        lookup(ctx, &tp, p.timestamp, epoch, from_replica)
                    };
                    match found {
                        Ok(Some((timestamp, offset, leader_epoch))) => {
                            r.timestamp = timestamp;
                            r.offset = offset;
                            if version >= 4 {
                                r.leader_epoch = leader_epoch;
                            }
                        }
                        Ok(None) => {
                            r.timestamp = -1;
                            r.offset = -1;
                        }
                        Err(e) => {
                            r.error_code = e.code();
                            r.timestamp = -1;
                            r.offset = -1;
                        }
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics))
}
