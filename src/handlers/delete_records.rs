//! DeleteRecords (key 21), v0-2: decodes the request, has
//! [`ReplicaManager::delete_records`](crate::replica::ReplicaManager) move each partition's log
//! start offset and wait for its low watermark (the rules: [`crate::replica::delete_records`]),
//! and encodes each partition's low watermark or error.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, ResponseKind};

use super::topic_name;
use crate::metadata::MetadataImage;
use crate::replica::delete_records::{PartitionDeleted, TopicDeletes};
use crate::replica::ReplicaManager;

pub async fn handle(
    replicas: &ReplicaManager,
    image: &MetadataImage,
    _version: i16,
    request: DeleteRecordsRequest,
) -> ResponseKind {
    let topics = request
        .topics
        .into_iter()
        .map(|t| TopicDeletes {
            name: t.name.0.as_str().to_owned(),
            partitions: t
                .partitions
                .into_iter()
                .map(|p| (p.partition_index, p.offset))
                .collect(),
        })
        .collect();
    let deleted = replicas
        .delete_records(image, topics, request.timeout_ms)
        .await;
    let topics = deleted
        .into_iter()
        .map(|t| {
            DeleteRecordsTopicResult::default()
                .with_name(topic_name(&t.name))
                .with_partitions(t.partitions.into_iter().map(answer).collect())
        })
        .collect();
    ResponseKind::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics))
}

fn answer(p: PartitionDeleted) -> DeleteRecordsPartitionResult {
    let mut r = DeleteRecordsPartitionResult::default()
        .with_partition_index(p.index)
        .with_low_watermark(p.low_watermark);
    if let Some(e) = p.error {
        r.error_code = e.code();
    }
    r
}
