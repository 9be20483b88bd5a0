//! [`ReplicaManager::log_dir_replicas`]: what each log dir holds, as DescribeLogDirs reports it
//! (`kafka-log-dirs.sh`, `Admin.describeLogDirs`), leader and follower replicas alike.
//!
//! A follower's `offset_lag` is how far its log was behind the leader's high watermark at its
//! last fetch (Kafka computes max(own high watermark − own log end, 0), which is 0 for every
//! follower since a follower's high watermark never passes its log end; the fetcher's lag is
//! what an operator asking about a replica wants to see). A leader's is 0, a partition not
//! hosted here -1. A replica moving to another log dir (AlterReplicaLogDirs) is also listed
//! under the destination dir as a future replica with, as in Kafka, the current log's end
//! offset minus the future log's as its lag, until it replaces the current one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kafkaiq_storage::TopicPartition;

use super::ReplicaManager;

/// Kafka's `INVALID_OFFSET_LAG` for a log the replica manager does not host.
const INVALID_OFFSET_LAG: i64 = -1;

/// One replica's log in a log dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogDirReplica {
    pub tp: TopicPartition,
    pub size_bytes: u64,
    pub offset_lag: i64,
    /// The destination of a move between log dirs, not yet the partition's log.
    pub is_future: bool,
}

impl ReplicaManager {
    /// Every log dir, with the replicas `wanted` names in it: current logs first, then future
    /// ones, each in the log manager's order. A dir holding none is listed empty.
    pub fn log_dir_replicas(
        &self,
        wanted: impl Fn(&TopicPartition) -> bool,
    ) -> BTreeMap<PathBuf, Vec<LogDirReplica>> {
        let log_manager = &self.log_manager;
        let mut dirs: BTreeMap<PathBuf, Vec<LogDirReplica>> = log_manager
            .log_dirs()
            .iter()
            .map(|d| (d.clone(), Vec::new()))
            .collect();
        for (tp, log) in log_manager.logs() {
            if !wanted(&tp) {
                continue;
            }
            let Some(dir) = log.dir().parent().map(|p| p.to_path_buf()) else {
                continue;
            };
            let offset_lag = self.follower_lag(&tp).unwrap_or(INVALID_OFFSET_LAG);
            dirs.entry(dir).or_default().push(LogDirReplica {
                tp,
                size_bytes: log.size_bytes(),
                offset_lag,
                is_future: false,
            });
        }
        for (tp, future) in log_manager.future_logs() {
            if !wanted(&tp) {
                continue;
            }
            let (Some(dir), Some(current)) = (
                future.dir().parent().map(|p| p.to_path_buf()),
                log_manager.get(&tp),
            ) else {
                continue;
            };
            dirs.entry(dir).or_default().push(LogDirReplica {
                size_bytes: future.size_bytes(),
                offset_lag: (current.log_end_offset() - future.log_end_offset()).max(0),
                tp,
                is_future: true,
            });
        }
        dirs
    }
}
