//! The leadership core: [`ReplicaManager`] maps topic-partitions to [`Partition`]s, reacts to
//! metadata images, checkpoints high watermarks and owns the [`purgatory::Purgatory`] of
//! delayed produce and fetch.
//!
//! Each image becomes [`local_changes::LocalChanges`] (a pure diff: partitions to lead, to
//! follow, to delete, to reconfigure), which the manager applies in that order after deleting
//! (Kafka's `ReplicaManager#applyDelta`). Nothing here assumes this node leads everything: a
//! partition led elsewhere is a follower that refuses produce and leader-only reads, one whose
//! replica moved away is stopped and its log deleted.
//!
//! It is called by handlers and by the controller (through [`ImageListener`]); it calls
//! `kafkaiq-storage`. It does not know the wire protocol: inputs and outputs are offsets, bytes
//! and [`ApiError`]s. Decisions live in [`decisions`] and [`local_changes`] as pure functions.
//! Lock order: the partition map, then a partition's state, then its log; none is held across
//! an await.

pub mod decisions;
pub mod fetch_params;
pub mod local_changes;
pub mod partition;
pub mod purgatory;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kafkaiq_storage::LogManager;
use kafkaiq_storage::TopicPartition;

use crate::clock::SharedClock;
use crate::config::topic as topic_config;
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::metadata::{ImageListener, MetadataImage, TopicImage};
use crate::metrics::ReplicaStats;
pub use fetch_params::{FetchIsolation, FetchParams};
use local_changes::{local_changes, LocalChanges};
pub use partition::{Offsets, Partition, ReadResult, Role};
use purgatory::Purgatory;

pub struct ReplicaManager {
    node_id: i32,
    config: Arc<BrokerConfig>,
    pub log_manager: Arc<LogManager>,
    clock: SharedClock,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Partitions whose log could not be opened or created: KAFKA_STORAGE_ERROR.
    offline: RwLock<HashSet<TopicPartition>>,
    /// High watermarks read from `replication-offset-checkpoint` at startup.
    checkpointed_high_watermarks: HashMap<TopicPartition, i64>,
    pub purgatory: Purgatory,
    /// ISR shrinks and expands this broker committed as leader (`kafka.server:ReplicaManager`).
    pub stats: ReplicaStats,
}

impl std::fmt::Debug for ReplicaManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaManager")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl ReplicaManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        log_manager: Arc<LogManager>,
        clock: SharedClock,
    ) -> ReplicaManager {
        let checkpointed_high_watermarks = log_manager.read_high_watermarks().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read replication-offset-checkpoint; high watermarks restart from log start");
            HashMap::new()
        });
        ReplicaManager {
            node_id: config.node_id,
            config,
            log_manager,
            clock,
            partitions: RwLock::new(HashMap::new()),
            offline: RwLock::new(HashSet::new()),
            checkpointed_high_watermarks,
            purgatory: Purgatory::default(),
            stats: ReplicaStats::default(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The partition if hosted here, or the routing error Kafka gives (leadership-semantics 5):
    /// unknown topic → UNKNOWN_TOPIC_OR_PARTITION; known topic but not hosted here →
    /// NOT_LEADER_OR_FOLLOWER; offline log → KAFKA_STORAGE_ERROR.
    pub fn partition_or_error(
        &self,
        image: &MetadataImage,
        tp: &TopicPartition,
    ) -> Result<Arc<Partition>, ApiError> {
        if let Some(p) = self
            .partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tp)
        {
            return Ok(p.clone());
        }
        if self
            .offline
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(tp)
        {
            return Err(ApiError::KafkaStorageError(format!(
                "log of {}-{} is offline",
                tp.topic, tp.partition
            )));
        }
        match image.topic(&tp.topic) {
            Some(t) if t.partitions.contains_key(&tp.partition) => {
                Err(ApiError::NotLeaderOrFollower)
            }
            _ => Err(ApiError::UnknownTopicOrPartition),
        }
    }

    pub fn partitions(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn ensure_partition(&self, topic: &TopicImage, index: i32) -> Result<Arc<Partition>, ApiError> {
        let tp = TopicPartition {
            topic: topic.name.clone(),
            partition: index,
        };
        if let Some(p) = self
            .partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&tp)
        {
            return Ok(p.clone());
        }
        let log_config = topic_config::log_config(&topic.configs, &self.config);
        let log = self
            .log_manager
            .get_or_create(&tp, log_config.clone(), self.clock.now_ms())?;
        // A log recovered at startup was opened with the broker defaults; the topic's own
        // configuration applies from here on.
        log.update_config(log_config);
        let hw = self
            .checkpointed_high_watermarks
            .get(&tp)
            .copied()
            .unwrap_or(0);
        let partition = Arc::new(Partition::new(
            tp.clone(),
            topic.id,
            log,
            self.node_id,
            hw,
            topic_config::min_insync_replicas(&topic.configs, &self.config),
            self.config.replica_lag_time_max_ms,
        ));
        self.partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tp, partition.clone());
        Ok(partition)
    }

    /// Stops a partition this node no longer hosts and deletes its log (Kafka's
    /// `stopPartitions` with `deleteLocalLog`).
    fn remove_partition(&self, tp: &TopicPartition) {
        let removed = self
            .partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp);
        if let Some(p) = removed {
            p.stop();
        }
        self.offline
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp);
        if let Err(e) = self.log_manager.delete(tp) {
            tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "deleting log failed");
        }
    }

    /// High watermarks of every hosted partition.
    pub fn high_watermarks(&self) -> HashMap<TopicPartition, i64> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(tp, p)| (tp.clone(), p.high_watermark()))
            .collect()
    }

    /// Writes `replication-offset-checkpoint` (every 5 s and at shutdown).
    pub fn checkpoint_high_watermarks(&self) -> Result<(), ApiError> {
        let hws = self.high_watermarks();
        self.log_manager
            .checkpoint_high_watermarks(&hws)
            .map_err(ApiError::from)
    }
}

impl ReplicaManager {
    /// Applies the local changes of one image: deletes first (a re-created topic's partitions
    /// then start from empty logs), then leaders, then followers, then config changes.
    pub fn apply_local_changes(&self, image: &MetadataImage, changes: &LocalChanges) {
        for tp in &changes.delete {
            tracing::info!(topic = %tp.topic, partition = tp.partition, "partition no longer hosted here; deleting it");
            self.remove_partition(tp);
        }
        let now_ms = self.clock.now_ms();
        for (tp, local) in &changes.become_leader {
            if let Some(p) = self.open_partition(image, tp) {
                let before = p.state();
                if let Err(e) = p.make_leader(&local.registration, now_ms) {
                    tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "becoming leader failed");
                } else if before.role == Role::Leader
                    && before.leader_epoch == local.registration.leader_epoch
                {
                    // Same leader, same epoch, new partition epoch: a committed ISR change.
                    self.stats.isr_changed(&before.isr, &local.registration.isr);
                }
            }
        }
        for (tp, local) in &changes.become_follower {
            if let Some(p) = self.open_partition(image, tp) {
                if let Err(e) = p.make_follower(&local.registration) {
                    tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "becoming follower failed");
                }
            }
        }
        for tp in &changes.reconfigure {
            let (Some(topic), Some(p)) = (image.topic(&tp.topic), self.hosted(tp)) else {
                continue;
            };
            p.log
                .update_config(topic_config::log_config(&topic.configs, &self.config));
            p.set_min_insync_replicas(topic_config::min_insync_replicas(
                &topic.configs,
                &self.config,
            ));
        }
    }

    /// Partitions whose log could not be opened (Kafka's `OfflineReplicaCount`).
    pub fn offline_count(&self) -> usize {
        self.offline.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn hosted(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tp)
            .cloned()
    }

    /// The partition, created with its log if new; `None` (and the partition offline) if its
    /// log cannot be opened.
    fn open_partition(&self, image: &MetadataImage, tp: &TopicPartition) -> Option<Arc<Partition>> {
        let topic = image.topic(&tp.topic)?;
        match self.ensure_partition(topic, tp.partition) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "cannot open partition log; partition offline");
                self.offline
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(tp.clone());
                None
            }
        }
    }
}

impl ImageListener for ReplicaManager {
    fn on_image(&self, previous: &MetadataImage, next: &MetadataImage) {
        let changes = local_changes(previous, next, self.node_id);
        if !changes.is_empty() {
            self.apply_local_changes(next, &changes);
        }
    }
}

#[cfg(test)]
mod tests;
