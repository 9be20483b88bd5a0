//! DeleteRecords (key 21), v0-2: move a partition's log start offset forward (offset -1 = the
//! high watermark); the answer is the new low watermark. Offsets beyond the high watermark get
//! OFFSET_OUT_OF_RANGE and topics whose `cleanup.policy` lacks `delete` get POLICY_VIOLATION, as
//! in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};
use kafkaiq_storage::TopicPartition;

use crate::config::topic::cleanup_policy_deletes;
use crate::context::Context;
use crate::errors::ApiError;

pub fn handle(ctx: &Arc<Context>, _version: i16, request: DeleteRecordsRequest) -> ResponseKind {
    let image = ctx.image();
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.as_str().to_owned();
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let tp = TopicPartition {
                        topic: name.clone(),
                        partition: p.partition_index,
                    };
                    let result =
                        ctx.replicas
                            .partition_or_error(&image, &tp)
                            .and_then(|partition| {
                                let deletes = image.topic(&tp.topic).is_none_or(|t| {
                                    cleanup_policy_deletes(&t.configs, &ctx.config)
                                });
                                if !deletes {
                                    return Err(ApiError::PolicyViolation(format!(
                                        "Records of partition {}-{} can not be deleted due to the \
                                     configured policy",
                                        tp.topic, tp.partition
                                    )));
                                }
                                partition.delete_records_before(p.offset)
                            });
                    let mut r = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index);
                    match result {
                        Ok(low) => r.low_watermark = low,
                        Err(e) => {
                            r.low_watermark = -1;
                            r.error_code = e.code();
                        }
                    }
                    r
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics))
}
