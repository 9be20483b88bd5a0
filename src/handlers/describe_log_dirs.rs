//! DescribeLogDirs (key 35), v1-4: each log dir with the partitions it holds and their sizes
//! (`kafka-log-dirs.sh`, `Admin.describeLogDirs`), leader and follower replicas alike. A
//! follower's `offset_lag` is how far its log was behind the leader's high watermark at its
//! last fetch (Kafka computes max(own high watermark − own log end, 0), which is 0 for every
//! follower since a follower's high watermark never passes its log end; the fetcher's lag is
//! what an operator asking about a replica wants to see). A leader's is 0, a partition not
//! hosted here -1. A replica moving to another log dir (AlterReplicaLogDirs) is also listed
//! under the destination dir with `is_future_key` and, as in Kafka, the current log's end
//! offset minus the future log's as its lag, until it replaces the current one. Disk totals
//! (v4) are reported as unknown (-1).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, ResponseKind};

use super::{str_bytes, topic_name};
use crate::context::Context;

/// Kafka's `INVALID_OFFSET_LAG` for a log the replica manager does not host.
const INVALID_OFFSET_LAG: i64 = -1;

fn offset_lag(ctx: &Arc<Context>, tp: &kafkaiq_storage::TopicPartition) -> i64 {
    ctx.replicas.follower_lag(tp).unwrap_or(INVALID_OFFSET_LAG)
}

pub fn handle(ctx: &Arc<Context>, version: i16, request: DescribeLogDirsRequest) -> ResponseKind {
    let wanted = |topic: &str, partition: i32| match &request.topics {
        None => true,
        Some(list) => list
            .iter()
            .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&partition)),
    };
    let log_manager = &ctx.replicas.log_manager;
    // log dir -> topic -> partitions
    let mut dirs: BTreeMap<std::path::PathBuf, BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
        log_manager
            .log_dirs()
            .iter()
            .map(|d| (d.clone(), BTreeMap::new()))
            .collect();
    for (tp, log) in log_manager.logs() {
        if !wanted(&tp.topic, tp.partition) {
            continue;
        }
        let Some(dir) = log.dir().parent().map(|p| p.to_path_buf()) else {
            continue;
        };
        dirs.entry(dir)
            .or_default()
            .entry(tp.topic.clone())
            .or_default()
            .push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_partition_size(log.size_bytes() as i64)
                    .with_offset_lag(offset_lag(ctx, &tp))
                    .with_is_future_key(false),
            );
    }
    for (tp, future) in log_manager.future_logs() {
        if !wanted(&tp.topic, tp.partition) {
            continue;
        }
        let (Some(dir), Some(current)) = (
            future.dir().parent().map(|p| p.to_path_buf()),
            log_manager.get(&tp),
        ) else {
            continue;
        };
        dirs.entry(dir)
            .or_default()
            .entry(tp.topic.clone())
            .or_default()
            .push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_partition_size(future.size_bytes() as i64)
                    .with_offset_lag((current.log_end_offset() - future.log_end_offset()).max(0))
                    .with_is_future_key(true),
            );
    }
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
