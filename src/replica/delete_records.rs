//! [`ReplicaManager::delete_records`]: a DeleteRecords request's moves of log start offsets as
//! leader and its wait for the low watermark (Kafka's `ReplicaManager#deleteRecords` with its
//! `DelayedDeleteRecords`).
//!
//! Each partition's log start offset moves forward on the leader (offset -1 = the high
//! watermark); offsets beyond the high watermark are OFFSET_OUT_OF_RANGE and topics whose
//! `cleanup.policy` lacks `delete` POLICY_VIOLATION. Then the request waits until each
//! partition's low watermark — the lowest log start offset over the leader, its followers on
//! alive brokers and a future log — has reached the requested offset (even when the leader's log
//! already started beyond it), so that no replica that could become leader still holds the
//! deleted records. The answer is that low watermark. While waiting, each partition is looked up
//! again as Kafka's `tryComplete` does: one no longer hosted here gets
//! UNKNOWN_TOPIC_OR_PARTITION, one whose log went offline KAFKA_STORAGE_ERROR, one this node no
//! longer leads NOT_LEADER_OR_FOLLOWER. Past `timeout_ms` a partition still waiting gets
//! REQUEST_TIMED_OUT with the low watermark seen when the request arrived, as in Kafka.

use std::sync::Arc;
use std::time::Duration;

use kafkaiq_storage::TopicPartition;

use super::{Partition, ReplicaManager};
use crate::config::topic::TopicSettings;
use crate::errors::ApiError;
use crate::limits::DELETE_RECORDS_TIMEOUT_MS_MAX;
use crate::metadata::MetadataImage;

/// One topic of a DeleteRecords request: each partition with the offset to delete before.
pub struct TopicDeletes {
    pub name: String,
    /// (partition index, offset), in request order.
    pub partitions: Vec<(i32, i64)>,
}

/// One partition's outcome, in request order: its low watermark (-1 with most errors; the one
/// seen on arrival with REQUEST_TIMED_OUT).
#[derive(Debug, PartialEq)]
pub struct PartitionDeleted {
    pub index: i32,
    pub low_watermark: i64,
    pub error: Option<ApiError>,
}

/// One topic's outcomes, in request order.
#[derive(Debug)]
pub struct TopicDeleted {
    pub name: String,
    pub partitions: Vec<PartitionDeleted>,
}

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

impl ReplicaManager {
    /// Moves every partition's log start offset as leader, then waits, at most `timeout_ms`,
    /// for the low watermarks to follow. Outcomes come back in request order.
    pub async fn delete_records(
        &self,
        image: &MetadataImage,
        topics: Vec<TopicDeletes>,
        timeout_ms: i32,
    ) -> Vec<TopicDeleted> {
        // (topic, [(partition index, outcome on the leader)])
        let mut outcomes: Vec<(String, Vec<(i32, Result<Pending, ApiError>)>)> = Vec::new();
        for t in topics {
            let deletes = image.topic(&t.name).is_none_or(|topic| {
                TopicSettings::resolve(&topic.configs, &self.config).cleanup_deletes
            });
            let partitions = t
                .partitions
                .into_iter()
                .map(|(index, offset)| {
                    let tp = TopicPartition {
                        topic: t.name.clone(),
                        partition: index,
                    };
                    (index, self.delete_on_leader(image, &tp, deletes, offset))
                })
                .collect();
            outcomes.push((t.name, partitions));
        }
        let watched: Vec<Arc<Partition>> = outcomes
            .iter()
            .flat_map(|(_, ps)| ps.iter().filter_map(|(_, r)| r.as_ref().ok()))
            .filter_map(|p| self.hosted(&p.tp))
            .collect();
        let timeout_ms = i64::from(timeout_ms).clamp(0, DELETE_RECORDS_TIMEOUT_MS_MAX);
        self.purgatory
            .wait_until(&watched, Duration::from_millis(timeout_ms as u64), || {
                let done = outcomes
                    .iter_mut()
                    .flat_map(|(_, ps)| ps.iter_mut().filter_map(|(_, r)| r.as_mut().ok()))
                    .fold(true, |all, p| self.try_complete_delete(p) && all);
                async move { done.then_some(()) }
            })
            .await;
        outcomes
            .into_iter()
            .map(|(name, partitions)| TopicDeleted {
                name,
                partitions: partitions
                    .into_iter()
                    .map(|(index, outcome)| deleted(index, outcome))
                    .collect(),
            })
            .collect()
    }

    /// Moves the leader's log start offset (Kafka's `deleteRecordsOnLeader`).
    fn delete_on_leader(
        &self,
        image: &MetadataImage,
        tp: &TopicPartition,
        policy_deletes: bool,
        offset: i64,
    ) -> Result<Pending, ApiError> {
        let partition = self.partition_or_error(image, tp)?;
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

    /// Kafka's `DelayedDeleteRecords#tryComplete` for one partition, looked up again since it
    /// may have been deleted or lost its leadership meanwhile: whether it is done.
    fn try_complete_delete(&self, p: &mut Pending) -> bool {
        if p.done.is_none() {
            p.done = match self.hosted_or_offline(&p.tp) {
                Ok(Some(partition)) => match partition.low_watermark() {
                    Ok(low) if low >= p.required_offset => Some(Ok(low)),
                    Ok(_) => None,
                    // A removal takes the partition out of the map, then stops it: one stopped
                    // between the lookup above and its answer is one no longer hosted here.
                    Err(_) if !self.still_hosted(&partition) => {
                        Some(Err(ApiError::UnknownTopicOrPartition))
                    }
                    Err(e) => Some(Err(e)),
                },
                Ok(None) => Some(Err(ApiError::UnknownTopicOrPartition)),
                Err(e) => Some(Err(e)),
            };
        }
        p.done.is_some()
    }

    /// Whether `partition` is still the one hosted under its name (not removed, not replaced
    /// by a re-created topic's).
    fn still_hosted(&self, partition: &Arc<Partition>) -> bool {
        self.hosted(&partition.tp)
            .is_some_and(|now| Arc::ptr_eq(&now, partition))
    }
}

fn deleted(index: i32, outcome: Result<Pending, ApiError>) -> PartitionDeleted {
    let (low_watermark, error) = match outcome {
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
    PartitionDeleted {
        index,
        low_watermark,
        error,
    }
}
