//! AlterReplicaLogDirs (key 34), v1-2: move this broker's replicas between its `log.dirs`
//! (`kafka-reassign-partitions --reassignment-json-file` with `log_dirs`,
//! `Admin.alterReplicaLogDirs`). Each partition is answered on its own with Kafka's outcomes
//! ([`crate::replica::ReplicaManager::alter_replica_log_dir`]): LOG_DIR_NOT_FOUND,
//! KAFKA_STORAGE_ERROR, REPLICA_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, or NONE once the move
//! has started (or there is nothing to move). The copy runs in the background; DescribeLogDirs
//! shows the future replica until it has replaced the current one. Kafka authorizes the request
//! as ALTER on the cluster; with no authorizer every caller may.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, ResponseKind,
};

use super::topic_name;
use crate::errors::code_of;
use crate::metadata::MetadataImage;
use crate::replica::ReplicaManager;
use crate::replica::TopicPartition;

pub fn handle(
    replicas: &Arc<ReplicaManager>,
    image: &MetadataImage,
    _version: i16,
    request: AlterReplicaLogDirsRequest,
) -> ResponseKind {
    // A partition named under two dirs is answered once, for the last (Kafka builds a map).
    let mut wanted: BTreeMap<TopicPartition, String> = BTreeMap::new();
    for dir in &request.dirs {
        for topic in &dir.topics {
            for &partition in &topic.partitions {
                wanted.insert(
                    TopicPartition::new(topic.name.0.as_str(), partition),
                    dir.path.as_str().to_owned(),
                );
            }
        }
    }
    let mut results: BTreeMap<String, Vec<AlterReplicaLogDirPartitionResult>> = BTreeMap::new();
    for (tp, dir) in wanted {
        let outcome = replicas.alter_replica_log_dir(image, &tp, &dir);
        if let Err(e) = &outcome {
            tracing::warn!(partition = %tp, dir, error = %e, "unable to alter log dir");
        }
        results.entry(tp.topic.clone()).or_default().push(
            AlterReplicaLogDirPartitionResult::default()
                .with_partition_index(tp.partition)
                .with_error_code(code_of(&outcome)),
        );
    }
    ResponseKind::AlterReplicaLogDirs(
        AlterReplicaLogDirsResponse::default().with_results(
            results
                .into_iter()
                .map(|(name, partitions)| {
                    AlterReplicaLogDirTopicResult::default()
                        .with_topic_name(topic_name(&name))
                        .with_partitions(partitions)
                })
                .collect(),
        ),
    )
}
