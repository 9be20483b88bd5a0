//! The cluster metadata image: an immutable snapshot of the cluster id, brokers (listeners,
//! rack, epoch, fencing), topics, partitions (leader, leader epoch, partition epoch, replicas,
//! ISR, leader recovery state) and configs.
//!
//! The controller is the only writer: it appends [`MetadataRecord`]s to the metadata log; the
//! [`MetadataPublisher`] replays committed ones into a new image with
//! [`MetadataImage::apply_batch`], publishes it in the [`MetadataCache`] and hands it to the
//! [`ImageListener`]s. Readers (handlers, the replica layer) hold an `Arc<MetadataImage>` from
//! the cache and never see a half-applied change. This module is a leaf: it depends on nothing
//! else of the broker, and it does no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use uuid::Uuid;

pub mod acl;
pub mod bootstrap;
pub mod history;
pub mod publisher;
pub mod records;
pub mod scram;

pub use history::{CauseKind, ChangeCause, LeadershipChange, PartitionHistory};
pub use publisher::MetadataPublisher;
pub use records::MetadataRecord;

/// Kafka's security protocol ids (`SecurityProtocol#id`), as a broker registration carries them.
pub mod security_protocol {
    pub const PLAINTEXT: i16 = 0;
    pub const SSL: i16 = 1;
    pub const SASL_PLAINTEXT: i16 = 2;
    pub const SASL_SSL: i16 = 3;
}

/// Where one listener of a broker is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// One of [`security_protocol`]; kept as the wire id so any value a broker sends replays.
    pub security_protocol: i16,
}

/// A broker as registered with the controller (Kafka's `BrokerRegistration`): one incarnation
/// of a node, from its registration until the next one replaces it.
///
/// Clients are sent the endpoint of the listener they connected on; brokers talk to each other
/// on the listener named by `inter.broker.listener.name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub node_id: i32,
    /// Fresh for every process start: tells a restart from a repeated registration.
    pub incarnation_id: Uuid,
    /// Given by the controller, greater than any earlier epoch of this node. Heartbeats and
    /// AlterPartition requests must carry it. -1 in a registration not yet accepted.
    pub broker_epoch: i64,
    /// Listener name → endpoint.
    pub listeners: BTreeMap<String, Endpoint>,
    pub rack: Option<String>,
    /// A fenced broker is in no ISR, leads nothing, and is not shown to clients. A new
    /// incarnation starts fenced; its heartbeat unfences it once it has caught up.
    pub fenced: bool,
    pub in_controlled_shutdown: bool,
    /// The metadata offset of the record that registered this incarnation. The controller writes
    /// 0, "the offset this record is committed at"; replay fills it in (see
    /// [`MetadataImage::apply_batch`]), and a snapshot keeps it. A broker has caught up once its
    /// own image has reached it.
    pub registration_offset: u64,
}

impl BrokerRegistration {
    /// A registration as a starting broker asks for it: no epoch yet, fenced, no listeners
    /// (add them with [`BrokerRegistration::with_listener`]). The controller sets the epoch,
    /// the fencing and the offset.
    pub fn new(node_id: i32, incarnation_id: Uuid, rack: Option<String>) -> BrokerRegistration {
        BrokerRegistration {
            node_id,
            incarnation_id,
            broker_epoch: -1,
            listeners: BTreeMap::new(),
            rack,
            fenced: true,
            in_controlled_shutdown: false,
            registration_offset: 0,
        }
    }

    /// Adds (or replaces) the listener `name`.
    pub fn with_listener(
        mut self,
        name: impl Into<String>,
        host: impl Into<String>,
        port: u16,
        security_protocol: i16,
    ) -> BrokerRegistration {
        self.listeners.insert(
            name.into(),
            Endpoint {
                host: host.into(),
                port,
                security_protocol,
            },
        );
        self
    }

    /// The endpoint of listener `name`, if the broker has one.
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.listeners.get(listener)
    }

    /// May lead and be added to an ISR: unfenced and not shutting down (Kafka's `isActive`).
    pub fn is_active(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }
}

/// Whether the leader of a partition is still recovering from an unclean election (Kafka's
/// `LeaderRecoveryState`). While RECOVERING the ISR holds only the leader; the leader reports
/// RECOVERED through AlterPartition once it has rebuilt its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderRecoveryState {
    #[default]
    Recovered,
    Recovering,
}

impl LeaderRecoveryState {
    /// The wire value (AlterPartition's `leader_recovery_state`).
    pub fn to_wire(self) -> i8 {
        match self {
            LeaderRecoveryState::Recovered => 0,
            LeaderRecoveryState::Recovering => 1,
        }
    }

    pub fn from_wire(value: i8) -> Option<LeaderRecoveryState> {
        match value {
            0 => Some(LeaderRecoveryState::Recovered),
            1 => Some(LeaderRecoveryState::Recovering),
            _ => None,
        }
    }
}

/// One partition's registration (Kafka's `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// -1 when no leader is available.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Bumped on every change of this registration (ISR changes included).
    pub partition_epoch: i32,
    pub leader_recovery_state: LeaderRecoveryState,
    /// While a reassignment is in progress: the replicas it adds (already in `replicas`, as
    /// followers that catch up and join the ISR). Empty otherwise.
    pub adding_replicas: Vec<i32>,
    /// While a reassignment is in progress: the replicas it removes once every target replica
    /// is in the ISR (still in `replicas` until then). Empty otherwise.
    pub removing_replicas: Vec<i32>,
}

impl PartitionRegistration {
    /// The preferred leader: the first replica (Kafka's `preferredReplica`), -1 without replicas.
    pub fn preferred_replica(&self) -> i32 {
        self.replicas.first().copied().unwrap_or(-1)
    }

    /// Whether a reassignment of this partition is in progress (Kafka's
    /// `isReassignmentInProgress`).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionRegistration>,
    pub configs: BTreeMap<String, String>,
    /// Each partition's recent leader and ISR changes with their causes ([`history`]); shared
    /// between images until a partition changes.
    pub history: BTreeMap<i32, Arc<PartitionHistory>>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataImage {
    /// The cluster id: written into the metadata log by the first quorum leader
    /// ([`MetadataRecord::ClusterId`]). Empty until then, unless the node seeds it.
    pub cluster_id: String,
    /// The active controller's node id, as this node knows it. Not a record: the node's
    /// controller thread sets it when it learns who leads the quorum (a single node names
    /// itself).
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    pub topics: BTreeMap<String, Arc<TopicImage>>,
    pub topic_names_by_id: HashMap<Uuid, String>,
    /// First producer id not yet handed out in a block (Kafka's `ProducerIdsRecord`).
    pub next_producer_id_block_start: i64,
    /// Dynamic broker configs (resource name "" = cluster default, else a node id).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Every ACL of the cluster by id ([`MetadataRecord::AccessControlEntry`]), what the
    /// authorizer decides against (Kafka's `AclsImage`).
    pub acls: Arc<BTreeMap<acl::AclId, acl::Acl>>,
    /// Every SCRAM credential of the cluster ([`MetadataRecord::UserScramCredential`]), what
    /// SASL/SCRAM authenticates against (Kafka's `ScramImage`).
    pub scram: Arc<scram::ScramCredentials>,
    /// The SCRAM credentials removed from the metadata log and not set again since
    /// ([`MetadataRecord::RemoveUserScramCredential`]). A removed credential stays removed:
    /// `kafkaiq.sasl.scram.users` does not stand in for it (as it does for a user and mechanism
    /// the log never held), and a snapshot keeps the removal.
    pub scram_removed: Arc<std::collections::BTreeSet<(String, scram::ScramMechanism)>>,
    /// How many records have been applied since the last snapshot (informational).
    pub records_applied: u64,
    /// The metadata log offset (Raft index) of the last batch applied: the image's version. A
    /// broker is caught up with the metadata log when its image has reached the controller's.
    pub metadata_offset: u64,
    /// The cause of the latest decision ([`MetadataRecord::ChangeCause`]): stamped on the
    /// partition changes replayed after it.
    pub change_cause: ChangeCause,
    /// Why the load balancer made it, when it did ([`MetadataRecord::LoadMoveReason`]).
    pub change_load_move: Option<history::LoadMoveReason>,
}

/// Kafka's internal topics (`Topic.isInternal`).
pub fn is_internal_topic(name: &str) -> bool {
    name == "__consumer_offsets" || name == "__transaction_state" || name == "__share_group_state"
}

impl MetadataImage {
    pub fn empty(cluster_id: String, controller_id: i32) -> Self {
        MetadataImage {
            cluster_id,
            controller_id,
            ..Default::default()
        }
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&Arc<TopicImage>> {
        self.topic_names_by_id
            .get(id)
            .and_then(|name| self.topics.get(name))
    }

    pub fn broker(&self, node_id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&node_id)
    }

    /// Whether this image holds broker `node_id`'s registration as incarnation `incarnation`:
    /// for a broker that registered after it started, proof that the image is at least as new
    /// as everything committed before it started.
    pub fn holds_incarnation(&self, node_id: i32, incarnation: Uuid) -> bool {
        self.broker(node_id)
            .is_some_and(|b| b.incarnation_id == incarnation)
    }

    /// Registered and unfenced: shown to clients (Kafka's "alive" brokers).
    pub fn is_broker_alive(&self, node_id: i32) -> bool {
        self.broker(node_id).is_some_and(|b| !b.fenced)
    }

    /// Registered, unfenced and not shutting down: may lead, join an ISR and hold new replicas.
    pub fn is_broker_active(&self, node_id: i32) -> bool {
        self.broker(node_id)
            .is_some_and(BrokerRegistration::is_active)
    }

    /// The unfenced brokers, by node id.
    pub fn alive_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// Replicas of `partition` on brokers that are not registered or are fenced, in replica
    /// order (the listener-independent part of Metadata's `offline_replicas`).
    pub fn offline_replicas(&self, partition: &PartitionRegistration) -> Vec<i32> {
        partition
            .replicas
            .iter()
            .copied()
            .filter(|&r| !self.is_broker_alive(r))
            .collect()
    }

    /// Replays records onto a copy of this image. Records that refer to things that do not exist
    /// (a partition of an unknown topic) are logged and skipped: the log is the truth, and a
    /// replay must never panic on it.
    pub fn apply(&self, records: &[MetadataRecord]) -> MetadataImage {
        let mut next = self.clone();
        next.apply_in_place(records);
        next
    }

    /// [`MetadataImage::apply`] onto this image itself. Registrations are stamped with the
    /// image's current `metadata_offset`; committed batches go through
    /// [`MetadataImage::apply_batch`], which sets that offset first.
    pub fn apply_in_place(&mut self, records: &[MetadataRecord]) {
        for record in records {
            self.apply_one(record);
            self.records_applied += 1;
        }
    }

    /// Replays the committed batch at metadata offset `offset`: the image's version becomes
    /// `offset`, and a registration in the batch records that it was committed there.
    pub fn apply_batch(&mut self, offset: u64, records: &[MetadataRecord]) {
        self.metadata_offset = offset;
        self.apply_in_place(records);
    }

    fn apply_one(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::ClusterId { cluster_id } => {
                self.cluster_id = cluster_id.clone();
            }
            MetadataRecord::RegisterBroker(b) => {
                let mut b = b.clone();
                if b.registration_offset == 0 {
                    b.registration_offset = self.metadata_offset;
                }
                self.brokers.insert(b.node_id, b);
            }
            MetadataRecord::BrokerRegistrationChange {
                node_id,
                broker_epoch,
                fenced,
                in_controlled_shutdown,
            } => match self.brokers.get_mut(node_id) {
                Some(b) if b.broker_epoch == *broker_epoch => {
                    if let Some(fenced) = fenced {
                        b.fenced = *fenced;
                    }
                    if let Some(shutting_down) = in_controlled_shutdown {
                        b.in_controlled_shutdown = *shutting_down;
                    }
                }
                // A change for an incarnation that has been replaced meanwhile.
                Some(b) => tracing::warn!(
                    node_id,
                    broker_epoch,
                    current_epoch = b.broker_epoch,
                    "registration change for an older broker epoch"
                ),
                None => tracing::warn!(node_id, "registration change for an unknown broker"),
            },
            MetadataRecord::Topic { name, topic_id } => {
                self.topic_names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name: name.clone(),
                        id: *topic_id,
                        partitions: BTreeMap::new(),
                        configs: BTreeMap::new(),
                        history: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                registration,
            } => {
                let cause = self.change_cause;
                let load_move = self.change_load_move;
                match self.topic_mut(topic_id) {
                    Some(topic) => {
                        let before = topic.partitions.insert(*partition, registration.clone());
                        if let Some(change) = LeadershipChange::between(
                            cause,
                            load_move,
                            before.as_ref(),
                            registration,
                        ) {
                            let h = topic.history.entry(*partition).or_default();
                            history::record(Arc::make_mut(h), change);
                        }
                    }
                    None => {
                        tracing::warn!(%topic_id, partition, "partition record for unknown topic")
                    }
                }
            }
            MetadataRecord::ChangeCause(cause) => {
                self.change_cause = *cause;
                self.change_load_move = None;
            }
            MetadataRecord::LoadMoveReason(reason) => self.change_load_move = Some(*reason),
            MetadataRecord::PartitionHistory {
                topic_id,
                partition,
                changes,
            } => match self.topic_mut(topic_id) {
                Some(topic) => {
                    let mut h = PartitionHistory::new();
                    for c in changes {
                        history::record(&mut h, c.clone());
                    }
                    topic.history.insert(*partition, Arc::new(h));
                }
                None => tracing::warn!(%topic_id, partition, "history record for unknown topic"),
            },
            MetadataRecord::TopicConfig {
                topic_id,
                name,
                value,
            } => match self.topic_mut(topic_id) {
                Some(topic) => match value {
                    Some(v) => {
                        topic.configs.insert(name.clone(), v.clone());
                    }
                    None => {
                        topic.configs.remove(name);
                    }
                },
                None => tracing::warn!(%topic_id, name, "config record for unknown topic"),
            },
            MetadataRecord::BrokerConfig {
                resource,
                name,
                value,
            } => {
                let configs = self.broker_configs.entry(resource.clone()).or_default();
                match value {
                    Some(v) => {
                        configs.insert(name.clone(), v.clone());
                    }
                    None => {
                        configs.remove(name);
                    }
                }
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.topic_names_by_id.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::ProducerIds {
                next_block_start, ..
            } => {
                self.next_producer_id_block_start =
                    self.next_producer_id_block_start.max(*next_block_start);
            }
            MetadataRecord::AccessControlEntry { id, acl } => {
                Arc::make_mut(&mut self.acls).insert(*id, acl.clone());
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                if Arc::make_mut(&mut self.acls).remove(id).is_none() {
                    tracing::warn!(%id, "removal of an unknown ACL");
                }
            }
            MetadataRecord::UserScramCredential {
                user,
                mechanism,
                credential,
            } => {
                let key = (user.clone(), *mechanism);
                if self.scram_removed.contains(&key) {
                    Arc::make_mut(&mut self.scram_removed).remove(&key);
                }
                Arc::make_mut(&mut self.scram).insert(key, credential.clone());
            }
            MetadataRecord::RemoveUserScramCredential { user, mechanism } => {
                // A snapshot's removals find nothing to remove: they only keep the removal.
                let key = (user.clone(), *mechanism);
                if self.scram.contains_key(&key) {
                    Arc::make_mut(&mut self.scram).remove(&key);
                }
                if !self.scram_removed.contains(&key) {
                    Arc::make_mut(&mut self.scram_removed).insert(key);
                }
            }
        }
    }

    /// Records that rebuild this image from an empty one: a snapshot's content. Everything a
    /// record set is in here (registrations keep the offset they were committed at); what is
    /// not from records (the controller id, the counters) is not.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        if !self.cluster_id.is_empty() {
            records.push(MetadataRecord::ClusterId {
                cluster_id: self.cluster_id.clone(),
            });
        }
        records.extend(
            self.brokers
                .values()
                .map(|b| MetadataRecord::RegisterBroker(b.clone())),
        );
        for t in self.topics.values() {
            records.push(MetadataRecord::Topic {
                name: t.name.clone(),
                topic_id: t.id,
            });
            records.extend(
                t.configs
                    .iter()
                    .map(|(name, value)| MetadataRecord::TopicConfig {
                        topic_id: t.id,
                        name: name.clone(),
                        value: Some(value.clone()),
                    }),
            );
            records.extend(t.partitions.iter().map(|(&partition, reg)| {
                MetadataRecord::Partition {
                    topic_id: t.id,
                    partition,
                    registration: reg.clone(),
                }
            }));
            // After the partitions, whose replay starts a history of its own.
            records.extend(t.history.iter().map(|(&partition, changes)| {
                MetadataRecord::PartitionHistory {
                    topic_id: t.id,
                    partition,
                    changes: changes.iter().cloned().collect(),
                }
            }));
        }
        for (resource, configs) in &self.broker_configs {
            records.extend(
                configs
                    .iter()
                    .map(|(name, value)| MetadataRecord::BrokerConfig {
                        resource: resource.clone(),
                        name: name.clone(),
                        value: Some(value.clone()),
                    }),
            );
        }
        records.extend(
            self.acls
                .iter()
                .map(|(&id, acl)| MetadataRecord::AccessControlEntry {
                    id,
                    acl: acl.clone(),
                }),
        );
        records.extend(self.scram.iter().map(|((user, mechanism), credential)| {
            MetadataRecord::UserScramCredential {
                user: user.clone(),
                mechanism: *mechanism,
                credential: credential.clone(),
            }
        }));
        records.extend(self.scram_removed.iter().map(|(user, mechanism)| {
            MetadataRecord::RemoveUserScramCredential {
                user: user.clone(),
                mechanism: *mechanism,
            }
        }));
        if self.next_producer_id_block_start > 0 {
            records.push(MetadataRecord::ProducerIds {
                broker_id: -1,
                next_block_start: self.next_producer_id_block_start,
            });
        }
        if self.change_cause != ChangeCause::UNKNOWN {
            records.push(MetadataRecord::ChangeCause(self.change_cause));
        }
        if let Some(reason) = self.change_load_move {
            records.push(MetadataRecord::LoadMoveReason(reason));
        }
        records
    }

    /// An upper bound on the bytes of this image's snapshot (its records, encoded) once the
    /// controller's own changes have grown it as far as they can without a client asking for
    /// anything: every partition's leadership history full and every ISR holding every replica.
    /// The controller keeps this under the snapshot bound by refusing client changes that would
    /// cross it. O(image): measured for each client change that writes records.
    pub fn snapshot_bytes_bound(&self) -> usize {
        let mut total = 0;
        let mut one = Vec::new();
        for r in self.to_records() {
            if matches!(r, MetadataRecord::PartitionHistory { .. }) {
                continue; // Counted full below.
            }
            one.clear();
            // A record that does not encode was refused before it entered the image.
            if r.encode(&mut one).is_ok() {
                total += one.len();
            }
        }
        let mut full_history_bytes: HashMap<usize, usize> = HashMap::new();
        for t in self.topics.values() {
            for reg in t.partitions.values() {
                let n = reg.replicas.len();
                total += *full_history_bytes
                    .entry(n)
                    .or_insert_with(|| full_history_record_bytes(n));
                total += 4 * n.saturating_sub(reg.isr.len());
            }
        }
        total
    }

    /// An upper bound on how much applying `records` can grow [`Self::snapshot_bytes_bound`]:
    /// each record's own encoding (a snapshot holds no record larger than the change that made
    /// it, save a partition's history) plus, for each partition record, a full history and a
    /// full ISR. A removal counts as no growth. O(records), where the exact bound walks the
    /// whole image.
    pub fn snapshot_growth_bound(records: &[MetadataRecord]) -> usize {
        let mut total = 0;
        let mut one = Vec::new();
        for r in records {
            one.clear();
            if r.encode(&mut one).is_ok() {
                total += one.len();
            }
            if let MetadataRecord::Partition { registration, .. } = r {
                let n = registration.replicas.len();
                total += full_history_record_bytes(n) + 4 * n;
            }
        }
        total
    }

    fn topic_mut(&mut self, topic_id: &Uuid) -> Option<&mut TopicImage> {
        let name = self.topic_names_by_id.get(topic_id)?;
        self.topics.get_mut(name).map(Arc::make_mut)
    }
}

/// The encoded bytes of a partition's history record holding as many changes as it keeps, each
/// with ISRs of `replicas` members.
fn full_history_record_bytes(replicas: usize) -> usize {
    let ids: Vec<i32> = (0..replicas as i32).collect();
    let change = LeadershipChange {
        cause: ChangeCause::UNKNOWN,
        load_move: Some(history::LoadMoveReason {
            ratio_milli: 0,
            dimension: history::LoadDimension::BytesIn,
            rate: 0,
            same_rack: None,
        }),
        leader_before: 0,
        leader: 0,
        leader_epoch: 0,
        isr_before: ids.clone(),
        isr: ids,
    };
    let record = MetadataRecord::PartitionHistory {
        topic_id: Uuid::nil(),
        partition: 0,
        changes: vec![change; crate::limits::LEADERSHIP_HISTORY_PER_PARTITION_MAX],
    };
    let mut out = Vec::new();
    record.encode(&mut out).map_or(0, |()| out.len())
}

/// Reacts to every newly published image: the replica manager creates, leads, follows and
/// deletes partitions from here; the group coordinator loads and unloads its partitions. Called
/// once per published image, in commit order, never concurrently with itself.
pub trait ImageListener: Send + Sync {
    fn on_image(&self, previous: &MetadataImage, next: &MetadataImage);
}

/// The current image, swapped atomically by the controller, read by everyone else.
///
/// A `std::sync::RwLock` around an `Arc`: readers hold the lock only long enough to clone the
/// `Arc`, so they never wait on a controller write in progress.
#[derive(Debug)]
pub struct MetadataCache {
    current: RwLock<Arc<MetadataImage>>,
    /// The metadata offset of the last image every listener has been given.
    applied: std::sync::atomic::AtomicU64,
}

impl MetadataCache {
    pub fn new(image: MetadataImage) -> Self {
        MetadataCache {
            applied: std::sync::atomic::AtomicU64::new(image.metadata_offset),
            current: RwLock::new(Arc::new(image)),
        }
    }

    /// How far this node has applied the metadata log: the offset of the last image its
    /// replica manager and group coordinator have acted on (what a broker's heartbeat reports;
    /// the image in the cache may be newer).
    pub fn applied_offset(&self) -> u64 {
        self.applied.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn mark_applied(&self, offset: u64) {
        self.applied
            .store(offset, std::sync::atomic::Ordering::Release);
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn publish(&self, image: Arc<MetadataImage>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = image;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_builds_topics_partitions_and_configs_and_removes_them() {
        let id = Uuid::from_u128(7);
        let reg = PartitionRegistration {
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        let image = MetadataImage::empty("c".into(), 1).apply(&[
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 0,
                registration: reg.clone(),
            },
            MetadataRecord::TopicConfig {
                topic_id: id,
                name: "retention.ms".into(),
                value: Some("5".into()),
            },
        ]);
        let t = image.topic("t").unwrap();
        assert_eq!(t.partitions[&0], reg);
        assert_eq!(t.configs["retention.ms"], "5");
        assert_eq!(image.topic_by_id(&id).unwrap().name, "t");
        assert_eq!(image.records_applied, 3);
        let image = image.apply(&[MetadataRecord::RemoveTopic { topic_id: id }]);
        assert!(image.topic("t").is_none());
        assert!(image.topic_by_id(&id).is_none());
    }

    #[test]
    fn acls_replay_by_id_and_a_snapshot_keeps_them() {
        use acl::{Acl, AclOperation, AclPermissionType, PatternType, ResourceType};
        let read = |name: &str| Acl {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission_type: AclPermissionType::Allow,
        };
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let image = MetadataImage::empty("c".into(), 1).apply(&[
            MetadataRecord::AccessControlEntry {
                id: a,
                acl: read("t"),
            },
            MetadataRecord::AccessControlEntry {
                id: b,
                acl: read("u"),
            },
        ]);
        assert_eq!(image.acls.len(), 2);
        let removed = image.apply(&[MetadataRecord::RemoveAccessControlEntry { id: a }]);
        assert_eq!(removed.acls.keys().collect::<Vec<_>>(), [&b]);
        assert_eq!(image.acls.len(), 2, "the earlier image is unchanged");
        // A restart replays the snapshot: the same ACLs under the same ids.
        let restarted = MetadataImage::empty("c".into(), 1).apply(&removed.to_records());
        assert_eq!(restarted.acls, removed.acls);
    }

    #[test]
    fn scram_credentials_replay_by_user_and_mechanism_and_a_snapshot_keeps_them() {
        use crate::scram::ScramCredential;
        use scram::ScramMechanism;
        let credential = |n: u8| ScramCredential {
            salt: vec![n],
            iterations: 4096 + u32::from(n),
            stored_key: vec![n; 32],
            server_key: vec![n; 32],
        };
        let set = |user: &str, mechanism, n| MetadataRecord::UserScramCredential {
            user: user.into(),
            mechanism,
            credential: credential(n),
        };
        let image = MetadataImage::empty("c".into(), 1).apply(&[
            set("alice", ScramMechanism::Sha256, 1),
            set("alice", ScramMechanism::Sha512, 2),
            set("bob", ScramMechanism::Sha256, 3),
            // A later credential for the same user and mechanism replaces the earlier one.
            set("alice", ScramMechanism::Sha256, 4),
        ]);
        assert_eq!(image.scram.len(), 3);
        assert_eq!(
            image.scram[&("alice".to_owned(), ScramMechanism::Sha256)],
            credential(4)
        );
        let removed = image.apply(&[MetadataRecord::RemoveUserScramCredential {
            user: "alice".into(),
            mechanism: ScramMechanism::Sha512,
        }]);
        assert_eq!(removed.scram.len(), 2);
        assert_eq!(image.scram.len(), 3, "the earlier image is unchanged");
        let restarted = MetadataImage::empty("c".into(), 1).apply(&removed.to_records());
        assert_eq!(restarted.scram, removed.scram);
        // The removal itself is kept, in the image and through a snapshot, until the credential
        // is set again.
        let alice_512 = ("alice".to_owned(), ScramMechanism::Sha512);
        assert!(removed.scram_removed.contains(&alice_512));
        assert!(restarted.scram_removed.contains(&alice_512));
        let again = restarted.apply(&[set("alice", ScramMechanism::Sha512, 5)]);
        assert!(again.scram_removed.is_empty());
        assert_eq!(again.scram[&alice_512], credential(5));
        let restarted = MetadataImage::empty("c".into(), 1).apply(&again.to_records());
        assert!(restarted.scram_removed.is_empty());
        assert_eq!(restarted.scram, again.scram);
    }

    #[test]
    fn a_change_grows_the_snapshot_bound_by_at_most_its_growth_bound() {
        let mut image = MetadataImage::empty("c".into(), 1);
        for t in 0..20u128 {
            let id = Uuid::from_u128(t + 1);
            let mut records = vec![MetadataRecord::Topic {
                name: format!("topic-{t}"),
                topic_id: id,
            }];
            for p in 0..(t as i32 % 4 + 1) {
                records.push(MetadataRecord::Partition {
                    topic_id: id,
                    partition: p,
                    registration: PartitionRegistration {
                        replicas: vec![1, 2, 3],
                        isr: vec![1],
                        leader: 1,
                        leader_epoch: 0,
                        partition_epoch: 0,
                        leader_recovery_state: LeaderRecoveryState::Recovered,
                        adding_replicas: vec![],
                        removing_replicas: vec![],
                    },
                });
            }
            records.push(MetadataRecord::TopicConfig {
                topic_id: id,
                name: "retention.ms".into(),
                value: Some("x".repeat(t as usize * 10)),
            });
            let after = image.apply(&records);
            let grown = after.snapshot_bytes_bound() - image.snapshot_bytes_bound();
            let bound = MetadataImage::snapshot_growth_bound(&records);
            assert!(grown <= bound, "topic {t}: grew {grown}, bound {bound}");
            image = after;
        }
    }

    fn broker(node_id: i32, incarnation: u128) -> BrokerRegistration {
        BrokerRegistration::new(node_id, Uuid::from_u128(incarnation), Some("r".into()))
            .with_listener("PLAINTEXT", "h", 9092, security_protocol::PLAINTEXT)
    }

    #[test]
    fn a_registration_records_the_offset_it_was_committed_at() {
        let mut image = MetadataImage::default();
        let b = BrokerRegistration {
            broker_epoch: 5,
            ..broker(1, 1)
        };
        image.apply_batch(5, &[MetadataRecord::RegisterBroker(b.clone())]);
        assert_eq!(image.metadata_offset, 5);
        assert_eq!(image.brokers[&1].registration_offset, 5);
        // A later batch does not move it; a snapshot's record keeps it.
        image.apply_batch(9, &[]);
        let replayed = MetadataImage::default().apply(&image.to_records());
        assert_eq!(replayed.brokers[&1].registration_offset, 5);
        assert!(image.brokers[&1].fenced, "a new registration is fenced");
        assert!(!image.is_broker_alive(1) && !image.is_broker_active(1));
    }

    #[test]
    fn fencing_changes_apply_only_to_the_incarnation_they_name() {
        let b = BrokerRegistration {
            broker_epoch: 7,
            ..broker(1, 1)
        };
        let mut image = MetadataImage::default();
        image.apply_batch(7, &[MetadataRecord::RegisterBroker(b)]);
        let change = |epoch, fenced, shutting_down| MetadataRecord::BrokerRegistrationChange {
            node_id: 1,
            broker_epoch: epoch,
            fenced,
            in_controlled_shutdown: shutting_down,
        };
        let image = image.apply(&[change(7, Some(false), None)]);
        assert!(image.is_broker_alive(1) && image.is_broker_active(1));
        let image = image.apply(&[change(6, Some(true), None)]);
        assert!(image.is_broker_alive(1), "a stale epoch changes nothing");
        let image = image.apply(&[change(7, None, Some(true))]);
        assert!(image.is_broker_alive(1) && !image.is_broker_active(1));
        assert_eq!(image.alive_brokers().count(), 1);
        let image = image.apply(&[change(7, Some(true), Some(false))]);
        assert_eq!(image.alive_brokers().count(), 0);
        // Offline replicas: on fenced or unregistered brokers.
        let reg = PartitionRegistration {
            replicas: vec![1, 2],
            isr: vec![1],
            leader: -1,
            leader_epoch: 0,
            partition_epoch: 0,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        assert_eq!(image.offline_replicas(&reg), vec![1, 2]);
    }

    /// An image with something in every field records can set.
    fn full_image() -> MetadataImage {
        let id = Uuid::from_u128(3);
        let mut image = MetadataImage::empty(String::new(), 1);
        image.apply_batch(
            1,
            &[
                MetadataRecord::ClusterId {
                    cluster_id: "abc".into(),
                },
                MetadataRecord::RegisterBroker(BrokerRegistration {
                    broker_epoch: 1,
                    ..broker(1, 11)
                }),
            ],
        );
        image.apply_batch(
            2,
            &[
                MetadataRecord::RegisterBroker(BrokerRegistration {
                    broker_epoch: 2,
                    rack: None,
                    ..broker(2, 12).with_listener("INTERNAL", "h2", 9093, security_protocol::SSL)
                }),
                MetadataRecord::BrokerRegistrationChange {
                    node_id: 1,
                    broker_epoch: 1,
                    fenced: Some(false),
                    in_controlled_shutdown: Some(true),
                },
                MetadataRecord::Topic {
                    name: "t".into(),
                    topic_id: id,
                },
                MetadataRecord::TopicConfig {
                    topic_id: id,
                    name: "retention.ms".into(),
                    value: Some("5".into()),
                },
                MetadataRecord::Partition {
                    topic_id: id,
                    partition: 0,
                    registration: PartitionRegistration {
                        replicas: vec![1, 2],
                        isr: vec![2],
                        leader: 2,
                        leader_epoch: 3,
                        partition_epoch: 4,
                        leader_recovery_state: LeaderRecoveryState::Recovering,
                        adding_replicas: vec![2],
                        removing_replicas: vec![1],
                    },
                },
                MetadataRecord::BrokerConfig {
                    resource: "".into(),
                    name: "x".into(),
                    value: Some("y".into()),
                },
                MetadataRecord::ProducerIds {
                    broker_id: 1,
                    next_block_start: 1000,
                },
            ],
        );
        image
    }

    #[test]
    fn to_records_rebuilds_the_whole_image() {
        let image = full_image();
        let mut bytes = Vec::new();
        for r in image.to_records() {
            r.encode(&mut bytes).unwrap();
        }
        let mut rebuilt = MetadataImage::empty(String::new(), 1);
        rebuilt.apply_in_place(&MetadataRecord::decode_all(&bytes).unwrap());
        // What does not come from records: the counters and the offset of the image.
        rebuilt.records_applied = image.records_applied;
        rebuilt.metadata_offset = image.metadata_offset;
        assert_eq!(rebuilt, image);
        assert_eq!(rebuilt.cluster_id, "abc");
        assert_eq!(rebuilt.brokers[&2].registration_offset, 2);
        assert!(rebuilt.brokers[&1].in_controlled_shutdown);
    }
}
