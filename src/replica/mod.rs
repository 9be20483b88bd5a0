//! The leadership core: [`ReplicaManager`] maps topic-partitions to [`Partition`]s, reacts to
//! metadata images, checkpoints high watermarks and owns the [`purgatory::Purgatory`] of
//! delayed produce, fetch and DeleteRecords.
//!
//! Each image becomes [`local_changes::LocalChanges`] (a pure diff: partitions to lead, to
//! follow, to delete, to reconfigure), which the manager applies in that order after deleting
//! (Kafka's `ReplicaManager#applyDelta`). Nothing here assumes this node leads everything: a
//! partition led elsewhere is a follower whose [`fetcher`] copies the leader's log (started on
//! a new leader epoch, stopped when this node leads or stops hosting it), one whose replica
//! moved away is stopped and its log deleted. As leader, a partition proposes ISR changes
//! ([`isr`]) — expansion when a follower's fetch shows it caught up, shrink from the expiry
//! check every `replica.lag.time.max.ms / 2` — which the [`alter_partition`] manager sends to
//! the active controller.
//!
//! It is called by handlers and by the controller (through [`ImageListener`]); it calls
//! `kafkaiq-storage`. It does not know the wire protocol: inputs and outputs are offsets, bytes
//! and [`ApiError`]s. Decisions live in [`decisions`] and [`local_changes`] as pure functions.
//! Lock order: the partition map, then a fetcher's partitions, then a partition's state, then
//! its log; the broker view is a leaf. None is held across an await.

pub mod alter_partition;
pub mod append;
pub mod brokers;
pub mod decisions;
pub mod delete_records;
pub mod fetch;
pub mod fetch_params;
pub mod fetcher;
pub mod isr;
pub mod list_offsets;
pub mod local_changes;
mod log_dir_move;
pub mod log_dirs;
pub mod markers;
pub mod partition;
pub mod purgatory;
pub mod quota;
pub mod read_replica;
#[cfg(test)]
pub(crate) mod sim;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kafkaiq_storage::parallel;
use kafkaiq_storage::partition_metadata;
use kafkaiq_storage::LogManager;
/// A partition's name, as every caller of the replica layer names it; storage's own type, so the
/// layers above never import `kafkaiq-storage` to name a partition.
pub use kafkaiq_storage::TopicPartition;
/// A partition's KIP-890 verification guard, held from the coordinator's answer to the append.
pub use kafkaiq_storage::VerificationGuard;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::{Client, ClientConfig, Endpoint};
use crate::clock::SharedClock;
use crate::config::dynamic;
use crate::config::topic::{self as topic_config, TopicSettings};
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::metadata::{ImageListener, MetadataImage, TopicImage};
use crate::metrics::ReplicaStats;
use crate::security::ClientSecurity;
use alter_partition::{
    AlterPartitionManager, AlterPartitionSender, ControllerAlterPartitionSender,
};
use brokers::BrokerView;
use decisions::FollowerFetch;
pub use fetch_params::{FetchIsolation, FetchParams};
use fetcher::{FetchTarget, ReplicaFetcherManager};
use local_changes::{local_changes, LocalChanges, LocalPartition};
pub use partition::{
    FollowerFetchResult, FutureCopy, LeaderReadView, Offsets, Partition, ReadResult,
    ReplicationStatus, Role,
};
use purgatory::Purgatory;
use quota::ReplicationQuota;

pub struct ReplicaManager {
    node_id: i32,
    config: Arc<BrokerConfig>,
    /// `config` with the image's dynamic broker configs laid over it: what logs run with.
    effective: RwLock<Arc<BrokerConfig>>,
    /// The TLS settings from `server.properties` of this node's clients to its peers, for when
    /// the dynamic key and trust stores of their listener are all deleted again.
    startup_tls: StartupClientTls,
    pub log_manager: Arc<LogManager>,
    clock: SharedClock,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Partitions whose log could not be opened or created, with the error: produce, fetch
    /// and the other partition requests answer KAFKA_STORAGE_ERROR at once.
    offline: RwLock<HashMap<TopicPartition, String>>,
    /// High watermarks read from `replication-offset-checkpoint` at startup, each taken by the
    /// first incarnation of its partition (a log deleted and created again starts at 0).
    checkpointed_high_watermarks: Mutex<HashMap<TopicPartition, i64>>,
    /// Whether the logs found on disk at startup were checked against the first image
    /// ([`Self::stray_logs`]).
    strays_checked: AtomicBool,
    pub purgatory: Purgatory,
    /// The brokers and controller of the latest image applied.
    pub brokers: Arc<BrokerView>,
    pub fetchers: ReplicaFetcherManager,
    pub alter_partition: Arc<AlterPartitionManager>,
    /// ISR shrinks and expands this broker committed as leader (`kafka.server:ReplicaManager`).
    pub stats: ReplicaStats,
    /// The tasks of moves between log dirs ([`log_dir_move`]); its lock also serialises
    /// AlterReplicaLogDirs requests.
    moves: Mutex<Vec<JoinHandle<()>>>,
    moves_stopped: AtomicBool,
    /// When the next copy step of any move may start (`replica.alter.log.dirs.io.max.bytes.per.second`).
    move_pacing: Mutex<tokio::time::Instant>,
    /// KIP-73: the bytes this broker sends to throttled followers as leader
    /// (`leader.replication.throttled.rate`) and fetches for throttled partitions as follower
    /// (`follower.replication.throttled.rate`).
    pub leader_quota: Arc<ReplicationQuota>,
    pub follower_quota: Arc<ReplicationQuota>,
}

impl std::fmt::Debug for ReplicaManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaManager")
            .field("node_id", &self.node_id)
            .finish()
    }
}

/// See [`ReplicaManager::startup_tls`].
struct StartupClientTls {
    inter_broker: Option<Arc<rustls::ClientConfig>>,
    controller: Option<Arc<rustls::ClientConfig>>,
}

fn startup_tls(client: Option<&ClientSecurity>) -> Option<Arc<rustls::ClientConfig>> {
    client.and_then(|s| s.tls.as_ref()).map(|tls| tls.current())
}

/// The client of the effective config: `running` (the startup config's, whose TLS cell every
/// clone of it shares), its cell refilled when the dynamic key or trust store values of its
/// listener went from `dynamic.0` to `dynamic.1`: with `changed`'s (the client the effective
/// config parsed), or with `startup` when none is left (the effective config is then
/// `server.properties` itself, whose cell this is).
fn follow_listener_stores(
    running: Option<&Arc<ClientSecurity>>,
    changed: Option<Arc<ClientSecurity>>,
    dynamic: (&BTreeMap<String, String>, &BTreeMap<String, String>),
    startup: Option<Arc<rustls::ClientConfig>>,
    peers: &str,
) -> Option<Arc<ClientSecurity>> {
    let (Some(running), Some(changed)) = (running, changed) else {
        return running.cloned();
    };
    let prefix = format!("listener.name.{}.", running.listener.to_ascii_lowercase());
    let stores = |values: &BTreeMap<String, String>| -> Vec<(String, String)> {
        values
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix) && dynamic::listener_ssl_key(k).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let now = stores(dynamic.1);
    if now != stores(dynamic.0) {
        let next = if now.is_empty() {
            startup
        } else {
            changed.tls.as_ref().map(|read| read.current())
        };
        if let (Some(cell), Some(next)) = (&running.tls, next) {
            tracing::info!(listener = %running.listener, "new connections to {peers} use the listener's reconfigured key and trust stores");
            cell.replace(next);
        }
    }
    Some(running.clone())
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
        let brokers = Arc::new(BrokerView::default());
        let window = config.replica.quota_window;
        let leader_quota = Arc::new(ReplicationQuota::new(window, clock.clone()));
        let follower_quota = Arc::new(ReplicationQuota::new(window, clock.clone()));
        let fetchers = ReplicaFetcherManager::new(
            config.node_id,
            config.replica.fetcher.clone(),
            config.log.message_max_bytes as usize,
            brokers.clone(),
            config.kraft.inter_broker_listener_name.clone(),
            config.inter_broker_client.clone(),
        );
        fetchers.set_quota(follower_quota.clone());
        let stats = ReplicaStats::default();
        let alter_partition = Arc::new(AlterPartitionManager::new(
            config.node_id,
            brokers.clone(),
            clock.clone(),
            stats.clone(),
        ));
        ReplicaManager {
            node_id: config.node_id,
            config: config.clone(),
            log_manager,
            clock,
            partitions: RwLock::new(HashMap::new()),
            offline: RwLock::new(HashMap::new()),
            checkpointed_high_watermarks: Mutex::new(checkpointed_high_watermarks),
            strays_checked: AtomicBool::new(false),
            purgatory: Purgatory::default(),
            brokers,
            fetchers,
            alter_partition,
            stats,
            moves: Mutex::new(Vec::new()),
            moves_stopped: AtomicBool::new(false),
            move_pacing: Mutex::new(tokio::time::Instant::now()),
            effective: RwLock::new(config.clone()),
            startup_tls: StartupClientTls {
                inter_broker: startup_tls(config.inter_broker_client.as_deref()),
                controller: startup_tls(config.controller_client.as_deref()),
            },
            leader_quota,
            follower_quota,
        }
    }

    /// Kafka's `shouldLeaderThrottle`: whether this leader answers `replica_id`'s fetch of `p`
    /// without records for now (a throttled partition, a follower outside the ISR, the leader
    /// quota exceeded).
    pub fn leader_throttles(&self, p: &Partition, replica_id: i32) -> bool {
        let quota = &self.leader_quota;
        // Cheapest test first: nearly every partition is unthrottled.
        quota.is_throttled(&p.tp)
            && quota::should_throttle(true, p.in_sync(replica_id), quota.is_exceeded())
    }

    /// Starts what runs in the background, until `shutdown`: the fetchers (of the partitions
    /// followed so far and later), the AlterPartition sender (to the active controller over the
    /// inter-broker client, unless [`ReplicaManager::set_alter_partition_sender`] set another),
    /// and the ISR expiry check every `replica.lag.time.max.ms / 2`. The returned tasks end
    /// once every fetcher has stopped, so the logs can be closed after them.
    pub fn start(
        self: &Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<(&'static str, JoinHandle<()>)> {
        let voters: BTreeMap<i32, Endpoint> = self
            .config
            .kraft
            .voters
            .iter()
            .map(|v| (v.id, Endpoint::new(v.host.clone(), v.port)))
            .collect();
        let client = Client::new(
            ClientConfig {
                client_id: format!("broker-{}-alter-partition", self.node_id),
                security: self.config.controller_client.clone(),
                ..ClientConfig::default()
            },
            None,
        );
        self.alter_partition
            .set_default_sender(Arc::new(ControllerAlterPartitionSender::new(
                client,
                self.brokers.clone(),
                voters,
            )));
        self.fetchers.start(shutdown.clone());
        let mut tasks = Vec::new();
        tasks.push((
            "alter partition",
            tokio::spawn(self.alter_partition.clone().run(shutdown.clone())),
        ));
        let me = self.clone();
        let mut isr_shutdown = shutdown.clone();
        tasks.push((
            "isr expiration",
            tokio::spawn(async move {
                let period =
                    Duration::from_millis((me.config.replica.lag_time_max_ms / 2).max(1) as u64);
                let mut tick = tokio::time::interval(period);
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = tick.tick() => me.maybe_shrink_isrs(),
                        _ = isr_shutdown.changed() => {
                            if *isr_shutdown.borrow() { return; }
                        }
                    }
                }
            }),
        ));
        let me = self.clone();
        let mut fetcher_shutdown = shutdown;
        tasks.push((
            "replica fetchers",
            tokio::spawn(async move {
                while !*fetcher_shutdown.borrow() {
                    if fetcher_shutdown.changed().await.is_err() {
                        break;
                    }
                }
                me.stop_moves().await;
                me.fetchers.shutdown().await;
            }),
        ));
        tasks
    }

    /// Replaces the AlterPartition sender (tests that play the controller).
    pub fn set_alter_partition_sender(&self, sender: Arc<dyn AlterPartitionSender>) {
        self.alter_partition.set_sender(sender);
    }

    /// The ISR expiry check (Kafka's `maybeShrinkIsr` over every led partition).
    pub fn maybe_shrink_isrs(&self) {
        let now_ms = self.clock.now_ms();
        for p in self.partitions() {
            if let Some(proposal) = p.maybe_shrink_isr(now_ms) {
                self.alter_partition.submit(&p, proposal);
            }
        }
    }

    /// A follower's fetch of a partition this node leads: recorded, and an expansion it makes
    /// sent to the controller (Kafka's `updateFollowerFetchState`).
    pub fn update_follower_fetch_state(
        &self,
        partition: &Arc<Partition>,
        replica_id: i32,
        fetch: &FollowerFetch,
    ) -> Result<FollowerFetchResult, ApiError> {
        let result = partition.update_follower_fetch_state(replica_id, fetch)?;
        if let Some(proposal) = &result.expand {
            self.alter_partition.submit(partition, proposal.clone());
        }
        Ok(result)
    }

    /// The replication health of a hosted partition.
    pub fn replication_status(&self, tp: &TopicPartition) -> Option<ReplicationStatus> {
        self.hosted(tp).map(|p| p.replication_status())
    }

    /// How far a hosted partition is behind its leader: 0 for a leader, the fetcher's lag (0
    /// before the first answer) for a follower; `None` if not hosted.
    pub fn follower_lag(&self, tp: &TopicPartition) -> Option<i64> {
        let state = self.hosted(tp)?.state();
        Some(match state.role {
            Role::Leader => 0,
            Role::Follower => state.follower_lag.unwrap_or(0),
        })
    }

    /// The replication health of every hosted partition (for metrics).
    pub fn replication_statuses(&self) -> Vec<(TopicPartition, ReplicationStatus)> {
        self.partitions()
            .into_iter()
            .map(|p| (p.tp.clone(), p.replication_status()))
            .collect()
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
        if let Some(p) = self.hosted_or_offline(tp)? {
            return Ok(p);
        }
        match image.topic(&tp.topic) {
            Some(t) if t.partitions.contains_key(&tp.partition) => {
                Err(ApiError::NotLeaderOrFollower)
            }
            _ => Err(ApiError::UnknownTopicOrPartition),
        }
    }

    /// Kafka's `getPartition`: the partition if hosted here, `None` if not, KAFKA_STORAGE_ERROR
    /// if its log is offline.
    pub fn hosted_or_offline(
        &self,
        tp: &TopicPartition,
    ) -> Result<Option<Arc<Partition>>, ApiError> {
        if let Some(p) = self.hosted(tp) {
            return Ok(Some(p));
        }
        match self
            .offline
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tp)
        {
            Some(error) => Err(ApiError::KafkaStorageError(format!(
                "the log of {}-{} on broker {} is offline: {error}",
                tp.topic, tp.partition, self.node_id
            ))),
            None => Ok(None),
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
        let log_config = topic_config::log_config(&topic.configs, &self.effective_config());
        let log = self
            .log_manager
            .get_or_create(&tp, log_config.clone(), self.clock.now_ms())?;
        Self::claim_for_topic(&tp, &log, topic.id)?;
        // A log recovered at startup was opened with the broker defaults; the topic's own
        // configuration applies from here on.
        log.update_config(log_config);
        let hw = self
            .checkpointed_high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&tp)
            .unwrap_or(0);
        let partition = Arc::new(Partition::new(
            tp.clone(),
            topic.id,
            log,
            self.node_id,
            hw,
            TopicSettings::resolve(&topic.configs, &self.effective_config()).min_insync_replicas,
            self.config.replica.lag_time_max_ms,
            self.brokers.clone(),
        ));
        self.partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tp, partition.clone());
        Ok(partition)
    }

    /// Records the topic id in a log's `partition.metadata`, or checks the one recorded: a log
    /// of another incarnation of the topic is never served (INCONSISTENT_TOPIC_ID).
    fn claim_for_topic(
        tp: &TopicPartition,
        log: &kafkaiq_storage::Log,
        topic_id: uuid::Uuid,
    ) -> Result<(), ApiError> {
        match partition_metadata::read(log.dir()) {
            Ok(Some(id)) if id == topic_id.as_u128() => Ok(()),
            Ok(Some(id)) => {
                tracing::error!(topic = %tp.topic, partition = tp.partition,
                    on_disk = %uuid::Uuid::from_u128(id), image = %topic_id,
                    "log belongs to another incarnation of the topic; not serving it");
                Err(ApiError::InconsistentTopicId)
            }
            Ok(None) => partition_metadata::write(log.dir(), topic_id.as_u128()).map_err(|e| {
                ApiError::KafkaStorageError(format!("cannot write {tp}'s partition.metadata: {e}"))
            }),
            Err(e) => Err(ApiError::KafkaStorageError(e.to_string())),
        }
    }

    /// Logs found on disk that the first image after startup does not place here (Kafka's
    /// `isStrayKraftReplica`): their topic is gone, the partition's replicas no longer include
    /// this node, or `partition.metadata` names another incarnation of the topic (deleted and
    /// created again while this node was down). Deleted before anything is led or followed, so
    /// a re-created topic starts from an empty log. A log without `partition.metadata` (written
    /// before the file was kept) is taken as the image's topic.
    fn stray_logs(&self, image: &MetadataImage) -> Vec<TopicPartition> {
        let mut strays = Vec::new();
        for (tp, log) in self.log_manager.logs() {
            let placed = image.topic(&tp.topic).filter(|topic| {
                topic
                    .partitions
                    .get(&tp.partition)
                    .is_some_and(|p| p.replicas.contains(&self.node_id))
            });
            let stray = match placed {
                None => true,
                Some(topic) => matches!(
                    partition_metadata::read(log.dir()),
                    Ok(Some(id)) if id != topic.id.as_u128()
                ),
            };
            if stray {
                tracing::warn!(topic = %tp.topic, partition = tp.partition,
                    "stray log: not a replica of this node in the current metadata; deleting it");
                strays.push(tp);
            }
        }
        strays
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
            p.set_future_log(None);
            p.stop();
        }
        self.offline
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tp);
        self.checkpointed_high_watermarks
            .lock()
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
    /// then start from empty logs), then leaders, then followers, then config changes. A
    /// partition stops being fetched before it is deleted or led (Kafka removes the fetchers
    /// first), and is fetched again from its new leader when it follows under a new leader
    /// epoch.
    pub fn apply_local_changes(&self, image: &MetadataImage, changes: &LocalChanges) {
        let stopped: Vec<TopicPartition> = changes
            .delete
            .iter()
            .chain(changes.become_leader.keys())
            .cloned()
            .collect();
        self.fetchers.remove_partitions(&stopped);
        for tp in &changes.delete {
            tracing::info!(topic = %tp.topic, partition = tp.partition, "partition no longer hosted here; deleting it");
            self.remove_partition(tp);
        }
        self.create_logs(
            image,
            changes
                .become_leader
                .keys()
                .chain(changes.become_follower.keys()),
        );
        let now_ms = self.clock.now_ms();
        // A new leader epoch is fsynced to the partition's epoch checkpoint before the partition
        // leads; many partitions (a creation, a failover) do that on a few threads at once.
        let leaders: Vec<(&TopicPartition, &LocalPartition)> =
            changes.become_leader.iter().collect();
        parallel::map(&leaders, parallel::PARTITION_IO_THREADS, |&(tp, local)| {
            if let Some(p) = self.open_partition(image, tp) {
                let before = p.state();
                if let Err(e) = p.make_leader(&local.registration, now_ms) {
                    tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "becoming leader failed");
                } else if before.role == Role::Leader
                    && before.leader_epoch == local.registration.leader_epoch
                    && before.partition_epoch < local.registration.partition_epoch
                {
                    // Same leader, same epoch, new partition epoch: a committed ISR change
                    // (counted by the AlterPartition manager instead if its answer came first).
                    self.stats
                        .isr_changed(before.isr(), &local.registration.isr);
                }
            }
        });
        let mut restart = Vec::new();
        for (tp, local) in &changes.become_follower {
            if let Some(p) = self.open_partition(image, tp) {
                match p.make_follower(&local.registration) {
                    Ok(true) => restart.push((tp.clone(), p, local.registration.clone())),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "becoming follower failed")
                    }
                }
            }
        }
        self.restart_fetching(image, restart);
        for tp in &changes.reconfigure {
            let (Some(topic), Some(p)) = (image.topic(&tp.topic), self.hosted(tp)) else {
                continue;
            };
            p.update_log_config(topic_config::log_config(
                &topic.configs,
                &self.effective_config(),
            ));
            p.set_min_insync_replicas(
                TopicSettings::resolve(&topic.configs, &self.effective_config())
                    .min_insync_replicas,
            );
        }
    }

    /// Kafka's `applyLocalFollowersDelta`: partitions that follow under a new leader epoch stop
    /// fetching from wherever they fetched and start again, from their own log end, at their
    /// leader, if it has registered an endpoint of `inter.broker.listener.name`. A partition
    /// without a leader (-1) is not fetched until one is elected.
    fn restart_fetching(
        &self,
        image: &MetadataImage,
        partitions: Vec<(
            TopicPartition,
            Arc<Partition>,
            crate::metadata::PartitionRegistration,
        )>,
    ) {
        if partitions.is_empty() {
            return;
        }
        let tps: Vec<TopicPartition> = partitions.iter().map(|(tp, _, _)| tp.clone()).collect();
        self.fetchers.remove_partitions(&tps);
        let listener = &self.config.kraft.inter_broker_listener_name;
        let targets = partitions
            .into_iter()
            .filter(|(tp, _, reg)| {
                let reachable = reg.leader >= 0
                    && image
                        .broker(reg.leader)
                        .is_some_and(|b| b.endpoint(listener).is_some());
                if !reachable {
                    tracing::info!(topic = %tp.topic, partition = tp.partition, leader = reg.leader, listener, "no leader to fetch from");
                }
                reachable
            })
            .map(|(tp, partition, reg)| FetchTarget {
                tp,
                partition,
                leader: reg.leader,
                leader_epoch: reg.leader_epoch,
            })
            .collect();
        self.fetchers.add_partitions(targets);
    }

    /// Partitions whose log could not be opened (Kafka's `OfflineReplicaCount`).
    pub fn offline_count(&self) -> usize {
        self.offline.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The partitions of `topic` whose log could not be opened or created here, with the
    /// error, by partition index.
    pub fn offline_partitions_of(&self, topic: &str) -> Vec<(i32, String)> {
        let mut found: Vec<(i32, String)> = self
            .offline
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(tp, _)| tp.topic == topic)
            .map(|(tp, e)| (tp.partition, e.clone()))
            .collect();
        found.sort();
        found
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub(crate) fn hosted(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tp)
            .cloned()
    }

    /// Creates the logs of the partitions among `tps` not hosted yet, together (one fsync per
    /// log dir for all of them rather than one per partition). A log that cannot be created is
    /// left to [`Self::open_partition`], which retries it and takes the partition offline.
    fn create_logs<'a>(
        &self,
        image: &MetadataImage,
        tps: impl Iterator<Item = &'a TopicPartition>,
    ) {
        let new: Vec<(TopicPartition, kafkaiq_storage::LogConfig)> = {
            let hosted = self.partitions.read().unwrap_or_else(|e| e.into_inner());
            tps.filter(|tp| !hosted.contains_key(*tp))
                .filter_map(|tp| {
                    let topic = image.topic(&tp.topic)?;
                    Some((
                        tp.clone(),
                        topic_config::log_config(&topic.configs, &self.effective_config()),
                    ))
                })
                .collect()
        };
        if new.len() > 1 {
            let _ = self
                .log_manager
                .get_or_create_many(new, self.clock.now_ms());
        }
    }

    /// The partition, created with its log if new; `None` (and the partition offline) if its
    /// log cannot be opened.
    fn open_partition(&self, image: &MetadataImage, tp: &TopicPartition) -> Option<Arc<Partition>> {
        let topic = image.topic(&tp.topic)?;
        match self.ensure_partition(topic, tp.partition) {
            Ok(p) => {
                let was_offline = self
                    .offline
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains_key(tp);
                if was_offline {
                    self.offline
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(tp);
                }
                Some(p)
            }
            Err(e) => {
                tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "cannot open partition log; partition offline");
                self.offline
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(tp.clone(), e.message());
                None
            }
        }
    }
}

impl ReplicaManager {
    /// The broker configuration with the dynamic broker configs of the latest image.
    pub fn effective_config(&self) -> Arc<BrokerConfig> {
        self.effective
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Lays the image's dynamic broker configs over `server.properties` (Kafka's
    /// `DynamicBrokerConfig#updateBrokerConfig`): whether they changed, in which case every
    /// hosted log takes the new defaults at once, without a restart.
    fn apply_dynamic_config(&self, image: &MetadataImage) -> bool {
        let overlay = dynamic::overlay(&image.broker_configs, self.node_id);
        if overlay == self.effective_config().dynamic {
            return false;
        }
        match dynamic::effective(&self.config, &image.broker_configs) {
            Ok(mut c) => {
                // When the stores of the listener a client of this node reaches its peers by
                // changed: every clone of that client (made from the startup config, sharing
                // its cell) opens its next connections with them, as Kafka reconfigures its
                // inter-broker channel builders and its channel to the controllers. The
                // effective config shares those cells either way.
                let before = &self.effective_config().dynamic;
                c.inter_broker_client = follow_listener_stores(
                    self.config.inter_broker_client.as_ref(),
                    c.inter_broker_client.take(),
                    (before, &c.dynamic),
                    self.startup_tls.inter_broker.clone(),
                    "the other brokers",
                );
                c.controller_client = if self.config.kraft.is_broker() {
                    follow_listener_stores(
                        self.config.controller_client.as_ref(),
                        c.controller_client.take(),
                        (before, &c.dynamic),
                        self.startup_tls.controller.clone(),
                        "the controllers",
                    )
                } else {
                    // A controller-only node's Raft client keeps the stores of
                    // `server.properties`, as Kafka's controllers' Raft clients do: dynamic
                    // per-node stores must never decide how it reaches the other voters, or a
                    // store they no longer trust could keep it from ever fetching what
                    // supersedes it.
                    self.config.controller_client.clone()
                };
                // Secret values (a listener's store passwords, an inline key) are never logged.
                let shown: BTreeMap<&str, &str> = c
                    .dynamic
                    .iter()
                    .map(|(k, v)| {
                        let v = if dynamic::is_password(k) {
                            "[hidden]"
                        } else {
                            v.as_str()
                        };
                        (k.as_str(), v)
                    })
                    .collect();
                tracing::info!(dynamic = ?shown, "dynamic broker configs applied");
                *self.effective.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "dynamic broker configs not applied");
                false
            }
        }
    }

    /// The throttle rates of the effective config (Long.MAX when unset: unthrottled).
    fn apply_throttle_rates(&self) {
        let config = self.effective_config();
        let rate = |key: &str| {
            config
                .dynamic
                .get(key)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(i64::MAX)
        };
        self.leader_quota
            .set_bound(rate("leader.replication.throttled.rate"));
        self.follower_quota
            .set_bound(rate("follower.replication.throttled.rate"));
    }

    /// The throttled partitions of each topic whose image changed (Kafka's
    /// `TopicConfigHandler#updateThrottledList`), this broker's entries of
    /// `leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`.
    fn update_throttled_replicas(&self, previous: &MetadataImage, next: &MetadataImage) {
        for name in previous.topics.keys() {
            if !next.topics.contains_key(name) {
                self.leader_quota.mark_throttled(name, None);
                self.follower_quota.mark_throttled(name, None);
            }
        }
        for (name, topic) in &next.topics {
            if previous
                .topics
                .get(name)
                .is_some_and(|before| Arc::ptr_eq(before, topic))
            {
                continue;
            }
            for (key, quota) in [
                ("leader.replication.throttled.replicas", &self.leader_quota),
                (
                    "follower.replication.throttled.replicas",
                    &self.follower_quota,
                ),
            ] {
                let throttled = topic
                    .configs
                    .get(key)
                    .and_then(|v| quota::throttled_partitions(v, self.node_id));
                quota.mark_throttled(name, throttled);
            }
        }
    }

    fn hosted_partitions(&self) -> Vec<TopicPartition> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}

impl ImageListener for ReplicaManager {
    fn on_image(&self, previous: &MetadataImage, next: &MetadataImage) {
        if !self.config.kraft.is_broker() {
            // A controller-only node hosts no partition: only the dynamic broker configs of
            // the image apply (its controller listener's stores, as Kafka's controllers
            // reconfigure their socket server).
            self.apply_dynamic_config(next);
            return;
        }
        // First, so partitions becoming leaders judge ISR eligibility and fetchers reach
        // leaders by this image's registrations.
        self.brokers.update(next);
        let mut changes = local_changes(previous, next, self.node_id);
        if self.apply_dynamic_config(next) {
            self.apply_throttle_rates();
            changes.reconfigure.extend(self.hosted_partitions());
        }
        self.update_throttled_replicas(previous, next);
        if !self.strays_checked.swap(true, Ordering::SeqCst) {
            changes.delete.extend(self.stray_logs(next));
        }
        if !changes.is_empty() {
            self.apply_local_changes(next, &changes);
        }
    }
}

#[cfg(test)]
mod delete_records_tests;
#[cfg(test)]
mod fetch_tests;
#[cfg(test)]
mod tests;
