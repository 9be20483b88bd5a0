//! DeleteRecords (key 21), v0-2: move a partition's log start offset forward (offset -1 = the
//! high watermark), then wait, as Kafka's `DelayedDeleteRecords` does, until the partition's low
//! watermark — the lowest log start offset over the leader, its followers on alive brokers and a
//! future log — has reached the requested offset (even when the leader's log already started
//! beyond it), so that no replica that could become leader still holds the deleted records. The
//! answer is that low watermark. While waiting, each partition is looked up again as Kafka's
//! `tryComplete` does: one no longer hosted here gets UNKNOWN_TOPIC_OR_PARTITION, one whose log
//! went offline KAFKA_STORAGE_ERROR, one this node no longer leads NOT_LEADER_OR_FOLLOWER. Past
//! `timeout_ms` a partition still waiting gets REQUEST_TIMED_OUT with the low watermark seen
//! when the request arrived, as in Kafka. Offsets beyond the high watermark get
//! OFFSET_OUT_OF_RANGE and topics whose `cleanup.policy` lacks `delete` get POLICY_VIOLATION, as
//! in Kafka.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use crate::config::topic::TopicSettings;
use crate::context::Context;
use crate::errors::ApiError;
use crate::limits::DELETE_RECORDS_TIMEOUT_MS_MAX;
use crate::replica::partition::Partition;
use crate::replica::TopicPartition;

/// One partition of the request after its log start offset moved on the leader (Kafka's
/// `DeleteRecordsPartitionStatus`).
struct Pending {
    tp: TopicPartition,
    /// The requested offset, which the low watermark must reach.
    required_offset: i64,
    /// The low watermark just after the leader's move: the answer on timeout.
    initial_low_watermark: i64,
    /// `Some` once the partition is done: its low watermark, or the error that ended the wait.
    done: Option<Result<i64, ApiError>>,
}

pub async fn handle(
    ctx: &Arc<Context>,
    _version: i16,
    request: DeleteRecordsRequest,
) -> ResponseKind {
    let image = ctx.image();
    // (topic, [(partition index, outcome on the leader)])
    let mut outcomes: Vec<(_, Vec<(i32, Result<Pending, ApiError>)>)> = Vec::new();
    for t in request.topics {
        let name = t.name.0.as_str().to_owned();
        let deletes = image.topic(&name).is_none_or(|topic| {
            TopicSettings::resolve(&topic.configs, &ctx.config).cleanup_deletes
        });
        let partitions = t
            .partitions
            .into_iter()
            .map(|p| {
                let tp = TopicPartition {
                    topic: name.clone(),
                    partition: p.partition_index,
                };
                (
                    p.partition_index,
                    delete_on_leader(ctx, &image, &tp, deletes, p.offset),
                )
            })
            .collect();
        outcomes.push((t.name, partitions));
    }
    let watched: Vec<Arc<Partition>> = outcomes
        .iter()
        .flat_map(|(_, ps)| ps.iter().filter_map(|(_, r)| r.as_ref().ok()))
        .filter_map(|p| ctx.replicas.hosted(&p.tp))
        .collect();
    let timeout_ms = i64::from(request.timeout_ms).clamp(0, DELETE_RECORDS_TIMEOUT_MS_MAX);
    ctx.replicas
        .purgatory
        .wait_until(&watched, Duration::from_millis(timeout_ms as u64), || {
            let done = outcomes
                .iter_mut()
                .flat_map(|(_, ps)| ps.iter_mut().filter_map(|(_, r)| r.as_mut().ok()))
                .fold(true, |all, p| try_complete(ctx, p) && all);
            async move { done.then_some(()) }
        })
        .await;
    let topics = outcomes
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(index, outcome)| answer(index, outcome))
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics))
}

/// Moves the leader's log start offset (Kafka's `deleteRecordsOnLeader`).
fn delete_on_leader(
    ctx: &Context,
    image: &crate::metadata::MetadataImage,
    tp: &TopicPartition,
    policy_deletes: bool,
    offset: i64,
) -> Result<Pending, ApiError> {
    let partition = ctx.replicas.partition_or_error(image, tp)?;
    if !policy_deletes {
        return Err(ApiError::PolicyViolation(format!(
            "Records of partition {}-{} can not be deleted due to the configured policy",
            tp.topic, tp.partition
        )));
    }
    let required_offset = partition.delete_records_before(offset)?;
    Ok(Pending {
        tp: tp.clone(),
        required_offset,
        initial_low_watermark: partition.low_watermark()?,
        done: None,
    })
}

/// Kafka's `DelayedDeleteRecords#tryComplete` for one partition, looked up again since it may
/// have been deleted or lost its leadership meanwhile: whether it is done.
fn try_complete(ctx: &Context, p: &mut Pending) -> bool {
    if p.done.is_none() {
        p.done = match ctx.replicas.hosted_or_offline(&p.tp) {
            Ok(Some(partition)) => match partition.low_watermark() {
                Ok(low) if low >= p.required_offset => Some(Ok(low)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            },
            Ok(None) => Some(Err(ApiError::UnknownTopicOrPartition)),
            Err(e) => Some(Err(e)),
        };
    }
    p.done.is_some()
}

fn answer(index: i32, outcome: Result<Pending, ApiError>) -> DeleteRecordsPartitionResult {
    let r = DeleteRecordsPartitionResult::default().with_partition_index(index);
    let (low, error) = match outcome {
        Ok(Pending {
            done: Some(Ok(low)),
            ..
        }) => (low, None),
        Ok(Pending {
            done: None,
            initial_low_watermark,
            ..
        }) => (initial_low_watermark, Some(ApiError::RequestTimedOut)),
        Ok(Pending {
            done: Some(Err(e)), ..
        })
        | Err(e) => (-1, Some(e)),
    };
    let mut r = r.with_low_watermark(low);
    if let Some(e) = error {
        r.error_code = e.code();
    }
    r
}
