//! DescribeLogDirs (key 35), v1-4: each log dir with the partitions it holds and their sizes
//! (`kafka-log-dirs.sh`, `Admin.describeLogDirs`), leader and follower replicas alike, as
//! [`ReplicaManager::log_dir_replicas`](crate::replica::ReplicaManager) lists them (with each
//! one's `offset_lag`, and a replica moving to another dir under its destination with
//! `is_future_key`). Disk totals (v4) are reported as unknown (-1).

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, ResponseKind};
use std::collections::BTreeMap;

use super::{str_bytes, topic_name};
use crate::replica::ReplicaManager;

pub fn handle(
    replicas: &ReplicaManager,
    version: i16,
    request: DescribeLogDirsRequest,
) -> ResponseKind {
    let wanted = |topic: &str, partition: i32| match &request.topics {
        None => true,
        Some(list) => list
            .iter()
            .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&partition)),
    };
    // log dir -> topic -> partitions
    let dirs: BTreeMap<std::path::PathBuf, BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
        replicas
            .log_dir_replicas(|tp| wanted(&tp.topic, tp.partition))
            .into_iter()
            .map(|(dir, replicas)| {
                let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
                for r in replicas {
                    topics.entry(r.tp.topic).or_default().push(
                        DescribeLogDirsPartition::default()
                            .with_partition_index(r.tp.partition)
                            .with_partition_size(r.size_bytes as i64)
                            .with_offset_lag(r.offset_lag)
                            .with_is_future_key(r.is_future),
                    );
                }
                (dir, topics)
            })
            .collect();
    let results = dirs
        .into_iter()
        .map(|(dir, topics)| {
            let mut r = DescribeLogDirsResult::default()
                .with_log_dir(str_bytes(&dir.display().to_string()))
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, mut partitions)| {
                            partitions.sort_by_key(|p| p.partition_index);
                            DescribeLogDirsTopic::default()
                                .with_name(topic_name(&name))
                                .with_partitions(partitions)
                        })
                        .collect(),
                );
            if version >= 4 {
                r.total_bytes = -1;
                r.usable_bytes = -1;
            }
            r
        })
        .collect();
    ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_results(results))
}
