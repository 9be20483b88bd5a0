//! The controller: the only writer of cluster metadata.
//!
//! Every change (topic creation and deletion, partitions, topic configs, leader elections,
//! producer id blocks, broker registration) is decided here as a list of [`MetadataRecord`]s,
//! appended to the [`MetadataLog`] (fsynced), replayed into a new [`MetadataImage`], published to
//! the [`MetadataCache`] and handed to the registered [`ImageListener`]s (the replica manager),
//! in that order, under one lock. Restart is replay.
//!
//! On a single node the log is a local file and this node is the controller. The decisions do
//! not depend on that, so a Raft quorum can later sit under the log without changing callers.
//! The controller never touches partition data; the replica layer reacts to images.

pub mod decisions;
pub mod log;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use uuid::Uuid;

use crate::config::topic as topic_config;
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::{
    METADATA_RECORDS_PER_FRAME_MAX, PARTITIONS_PER_TOPIC_MAX, PRODUCER_ID_BLOCK_SIZE,
    TOPIC_NAME_CHARS_MAX,
};
use crate::metadata::MetadataRecord;
use crate::metadata::{
    BrokerRegistration, ImageListener, MetadataCache, MetadataImage, PartitionRegistration,
    TopicImage,
};
use decisions::{elect_leader, ElectionType};
use log::{MetadataLog, MetadataLogError};

/// What CreateTopics asks for one topic.
#[derive(Debug, Clone, Default)]
pub struct CreateTopicSpec {
    pub name: String,
    /// -1 = `num.partitions`.
    pub num_partitions: i32,
    /// -1 = `default.replication.factor`.
    pub replication_factor: i16,
    /// Manual assignment: partition index → replicas.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

/// One IncrementalAlterConfigs operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set,
    Delete,
    Append,
    Subtract,
}

impl AlterConfigOp {
    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Self::Set),
            1 => Some(Self::Delete),
            2 => Some(Self::Append),
            3 => Some(Self::Subtract),
            _ => None,
        }
    }
}

struct ControllerState {
    log: MetadataLog,
    image: Arc<MetadataImage>,
    /// Producer ids of the current block: `next..block_end`.
    producer_id_next: i64,
    producer_id_block_end: i64,
    /// Rotates the first replica of new partitions across brokers.
    placement_cursor: usize,
}

pub struct Controller {
    node_id: i32,
    config: Arc<BrokerConfig>,
    cache: Arc<MetadataCache>,
    state: Mutex<ControllerState>,
    listeners: Mutex<Vec<Arc<dyn ImageListener>>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("node_id", &self.node_id)
            .finish()
    }
}

/// Kafka's topic name rule: 1-249 chars of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::InvalidTopic(
            "Topic name is illegal, it can't be empty".into(),
        ));
    }
    if name == "." || name == ".." {
        return Err(ApiError::InvalidTopic(
            "Topic name cannot be \".\" or \"..\"".into(),
        ));
    }
    if name.len() > TOPIC_NAME_CHARS_MAX {
        return Err(ApiError::InvalidTopic(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_CHARS_MAX} characters, topic name: {name}"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return Err(ApiError::InvalidTopic(format!(
            "Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )));
    }
    Ok(())
}

fn random_uuid() -> Uuid {
    // Random bits from the std hasher's randomly seeded keys (fresh per `RandomState`) mixed with
    // a counter: enough for topic and cluster ids, without a dependency on an RNG crate and
    // without reading the clock.
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        *w = h.finish();
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_be_bytes());
    bytes[8..].copy_from_slice(&words[1].to_be_bytes());
    // Version 4 / variant 1 bits, so tools see a well-formed random UUID.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let id = Uuid::from_bytes(bytes);
    // Kafka reserves the zero UUID and the "metadata topic" UUID 1; never hand them out.
    if id.as_u128() <= 1 {
        random_uuid()
    } else {
        id
    }
}

/// A new cluster id: Kafka's format, a random UUID in URL-safe base64 without padding.
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = random_uuid().into_bytes();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

impl Controller {
    /// Opens the metadata log in `dir`, replays it, and returns the controller with the image
    /// published in `cache`.
    pub fn open(
        dir: &Path,
        cluster_id: &str,
        config: Arc<BrokerConfig>,
        cache: Arc<MetadataCache>,
    ) -> Result<Controller, MetadataLogError> {
        let (log, batches) = MetadataLog::open(dir)?;
        let mut image = MetadataImage::empty(cluster_id.to_owned(), config.node_id);
        for batch in &batches {
            image = image.apply(batch);
        }
        tracing::info!(
            records = image.records_applied,
            topics = image.topics.len(),
            "metadata log replayed"
        );
        let image = Arc::new(image);
        cache.publish(image.clone());
        Ok(Controller {
            node_id: config.node_id,
            config,
            cache,
            state: Mutex::new(ControllerState {
                log,
                image,
                producer_id_next: 0,
                producer_id_block_end: 0,
                placement_cursor: 0,
            }),
            listeners: Mutex::new(Vec::new()),
        })
    }

    pub fn add_listener(&self, listener: Arc<dyn ImageListener>) {
        let state = self.lock();
        listener.on_image(&MetadataImage::default(), &state.image);
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(listener);
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.cache.image()
    }

    fn lock(&self) -> MutexGuard<'_, ControllerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends, replays, publishes, notifies. The only path by which metadata changes.
    fn commit(
        &self,
        state: &mut ControllerState,
        records: Vec<MetadataRecord>,
    ) -> Result<(), ApiError> {
        if records.is_empty() {
            return Ok(());
        }
        for chunk in records.chunks(METADATA_RECORDS_PER_FRAME_MAX) {
            state.log.append(chunk).map_err(|e| {
                tracing::error!(error = %e, "metadata log append failed");
                ApiError::KafkaStorageError(e.to_string())
            })?;
        }
        let previous = state.image.clone();
        let next = Arc::new(previous.apply(&records));
        state.image = next.clone();
        self.cache.publish(next.clone());
        for listener in self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            listener.on_image(&previous, &next);
        }
        Ok(())
    }

    /// Registers (or re-registers with a new endpoint) this broker.
    pub fn register_broker(&self, registration: BrokerRegistration) -> Result<(), ApiError> {
        let mut state = self.lock();
        if state.image.brokers.get(&registration.node_id) == Some(&registration) {
            return Ok(());
        }
        self.commit(
            &mut state,
            vec![MetadataRecord::RegisterBroker(registration)],
        )
    }

    /// Elects this node leader of every partition it hosts, bumping leader and partition epochs,
    /// as a KRaft controller does when a restarted broker is unfenced. Run once at startup.
    pub fn elect_local_leaders_at_startup(&self) -> Result<usize, ApiError> {
        let mut state = self.lock();
        let mut records = Vec::new();
        for topic in state.image.topics.values() {
            for (&partition, reg) in &topic.partitions {
                if reg.replicas.contains(&self.node_id) && reg.isr.contains(&self.node_id) {
                    let mut next = reg.clone();
                    next.leader = self.node_id;
                    next.leader_epoch += 1;
                    next.partition_epoch += 1;
                    records.push(MetadataRecord::Partition {
                        topic_id: topic.id,
                        partition,
                        registration: next,
                    });
                }
            }
        }
        let count = records.len();
        self.commit(&mut state, records)?;
        Ok(count)
    }

    fn live_brokers(image: &MetadataImage) -> Vec<i32> {
        image.brokers.keys().copied().collect()
    }

    fn place_replicas(
        state: &mut ControllerState,
        brokers: &[i32],
        partitions: std::ops::Range<i32>,
        replication_factor: i16,
    ) -> Vec<(i32, Vec<i32>)> {
        let n = brokers.len();
        partitions
            .map(|p| {
                let first = state.placement_cursor;
                state.placement_cursor = state.placement_cursor.wrapping_add(1);
                let replicas = (0..replication_factor as usize)
                    .map(|i| brokers[(first + i) % n])
                    .collect();
                (p, replicas)
            })
            .collect()
    }

    fn check_configs(configs: &[(String, Option<String>)]) -> Result<(), ApiError> {
        for (name, value) in configs {
            match value {
                Some(v) => topic_config::validate(name, v)
                    .map_err(|e| ApiError::InvalidConfig(e.to_string()))?,
                None => {
                    return Err(ApiError::InvalidConfig(format!(
                        "Null value not supported for topic configs: {name}"
                    )))
                }
            }
        }
        Ok(())
    }

    fn check_assignment(
        brokers: &[i32],
        replicas: &[i32],
        expected_rf: Option<usize>,
    ) -> Result<(), ApiError> {
        if replicas.is_empty() {
            return Err(ApiError::InvalidReplicaAssignment(
                "empty replica assignment".into(),
            ));
        }
        let unique: BTreeSet<_> = replicas.iter().collect();
        if unique.len() != replicas.len() {
            return Err(ApiError::InvalidReplicaAssignment(
                "duplicate brokers in replica assignment".into(),
            ));
        }
        if let Some(missing) = replicas.iter().find(|r| !brokers.contains(r)) {
            return Err(ApiError::InvalidReplicaAssignment(format!(
                "broker {missing} is not registered"
            )));
        }
        if let Some(rf) = expected_rf {
            if replicas.len() != rf {
                return Err(ApiError::InvalidReplicaAssignment(
                    "all partitions must have the same replication factor".into(),
                ));
            }
        }
        Ok(())
    }

    /// Creates one topic (or only validates it). Returns the topic as it is (or would be).
    pub fn create_topic(
        &self,
        spec: &CreateTopicSpec,
        validate_only: bool,
    ) -> Result<Arc<TopicImage>, ApiError> {
        validate_topic_name(&spec.name)?;
        let mut state = self.lock();
        let image = state.image.clone();
        if image.topics.contains_key(&spec.name) {
            return Err(ApiError::TopicAlreadyExists(format!(
                "Topic '{}' already exists.",
                spec.name
            )));
        }
        // Kafka refuses names that differ only by '.' vs '_' (they collide in metric names).
        let normalized = spec.name.replace('.', "_");
        if let Some(other) = image
            .topics
            .keys()
            .find(|t| t.replace('.', "_") == normalized)
        {
            return Err(ApiError::InvalidTopic(format!(
                "Topic '{}' collides with existing topic: {other}",
                spec.name
            )));
        }
        let brokers = Self::live_brokers(&image);
        let assignments = if !spec.assignments.is_empty() {
            if spec.num_partitions != -1 || spec.replication_factor != -1 {
                return Err(ApiError::InvalidRequest(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
                ));
            }
            let rf = spec.assignments[0].1.len();
            let mut sorted = spec.assignments.clone();
            sorted.sort_by_key(|(p, _)| *p);
            for (i, (p, replicas)) in sorted.iter().enumerate() {
                if *p != i as i32 {
                    return Err(ApiError::InvalidReplicaAssignment(
                        "partitions should be a consecutive 0-based integer sequence".into(),
                    ));
                }
                Self::check_assignment(&brokers, replicas, Some(rf))?;
            }
            sorted
        } else {
            let num_partitions = if spec.num_partitions == -1 {
                self.config.num_partitions
            } else {
                spec.num_partitions
            };
            if num_partitions <= 0 {
                return Err(ApiError::InvalidPartitions(
                    "Number of partitions was set to an invalid non-positive value.".into(),
                ));
            }
            if num_partitions > PARTITIONS_PER_TOPIC_MAX {
                return Err(ApiError::InvalidPartitions(format!(
                    "Number of partitions {num_partitions} exceeds the limit of {PARTITIONS_PER_TOPIC_MAX}."
                )));
            }
            let rf = if spec.replication_factor == -1 {
                self.config.default_replication_factor
            } else {
                spec.replication_factor
            };
            if rf <= 0 {
                return Err(ApiError::InvalidReplicationFactor(
                    "Replication factor must be larger than 0, or -1 to use the default value."
                        .into(),
                ));
            }
            if rf as usize > brokers.len() {
                return Err(ApiError::InvalidReplicationFactor(format!(
                    "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered.",
                    brokers.len()
                )));
            }
            Self::place_replicas(&mut state, &brokers, 0..num_partitions, rf)
        };
        Self::check_configs(&spec.configs)?;

        let topic_id = random_uuid();
        let mut records = vec![MetadataRecord::Topic {
            name: spec.name.clone(),
            topic_id,
        }];
        for (name, value) in &spec.configs {
            records.push(MetadataRecord::TopicConfig {
                topic_id,
                name: name.clone(),
                value: value.clone(),
            });
        }
        for (partition, replicas) in assignments {
            records.push(MetadataRecord::Partition {
                topic_id,
                partition,
                registration: PartitionRegistration {
                    leader: replicas[0],
                    isr: replicas.clone(),
                    replicas,
                    leader_epoch: 0,
                    partition_epoch: 0,
                },
            });
        }
        if validate_only {
            let hypothetical = image.apply(&records);
            return Ok(hypothetical.topics[&spec.name].clone());
        }
        self.commit(&mut state, records)?;
        Ok(state.image.topics[&spec.name].clone())
    }

    /// Deletes a topic by id.
    pub fn delete_topic(&self, topic_id: Uuid) -> Result<(), ApiError> {
        if !self.config.delete_topic_enable {
            return Err(ApiError::TopicDeletionDisabled);
        }
        let mut state = self.lock();
        if state.image.topic_by_id(&topic_id).is_none() {
            return Err(ApiError::UnknownTopicId);
        }
        self.commit(&mut state, vec![MetadataRecord::RemoveTopic { topic_id }])
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(
        &self,
        topic: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let mut state = self.lock();
        let image = state.image.clone();
        let t = image
            .topic(topic)
            .ok_or(ApiError::UnknownTopicOrPartition)?
            .clone();
        let current = t.partitions.len() as i32;
        if count < current {
            return Err(ApiError::InvalidPartitions(format!(
                "The topic {topic} currently has {current} partition(s); {count} would not be an increase."
            )));
        }
        if count == current {
            return Err(ApiError::InvalidPartitions(format!(
                "Topic already has {current} partition(s)."
            )));
        }
        if count > PARTITIONS_PER_TOPIC_MAX {
            return Err(ApiError::InvalidPartitions(format!(
                "Number of partitions {count} exceeds the limit of {PARTITIONS_PER_TOPIC_MAX}."
            )));
        }
        let rf = t
            .partitions
            .values()
            .next()
            .map(|p| p.replicas.len())
            .unwrap_or(1);
        let brokers = Self::live_brokers(&image);
        let placed = match assignments {
            Some(list) => {
                if list.len() as i32 != count - current {
                    return Err(ApiError::InvalidReplicaAssignment(format!(
                        "Attempted to add {} additional partition(s), but only {} assignment(s) were specified.",
                        count - current,
                        list.len()
                    )));
                }
                let mut placed = Vec::new();
                for (i, replicas) in list.into_iter().enumerate() {
                    Self::check_assignment(&brokers, &replicas, Some(rf))?;
                    placed.push((current + i as i32, replicas));
                }
                placed
            }
            None => {
                if rf > brokers.len() {
                    return Err(ApiError::InvalidReplicationFactor(format!(
                        "Unable to replicate the partition {rf} time(s): only {} broker(s) are registered.",
                        brokers.len()
                    )));
                }
                Self::place_replicas(&mut state, &brokers, current..count, rf as i16)
            }
        };
        if validate_only {
            return Ok(());
        }
        let records = placed
            .into_iter()
            .map(|(partition, replicas)| MetadataRecord::Partition {
                topic_id: t.id,
                partition,
                registration: PartitionRegistration {
                    leader: replicas[0],
                    isr: replicas.clone(),
                    replicas,
                    leader_epoch: 0,
                    partition_epoch: 0,
                },
            })
            .collect();
        self.commit(&mut state, records)
    }

    /// Applies IncrementalAlterConfigs operations to one topic.
    pub fn alter_topic_configs(
        &self,
        topic: &str,
        ops: &[(String, AlterConfigOp, Option<String>)],
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let mut state = self.lock();
        let t = state
            .image
            .topic(topic)
            .ok_or(ApiError::UnknownTopicOrPartition)?
            .clone();
        let mut configs: BTreeMap<String, String> = t.configs.clone();
        let mut seen = BTreeSet::new();
        for (name, op, value) in ops {
            if !seen.insert(name.clone()) {
                return Err(ApiError::InvalidRequest(format!(
                    "Error due to duplicate config keys: {name}"
                )));
            }
            let def = topic_config::topic_config_def(name).ok_or_else(|| {
                ApiError::InvalidConfig(format!("Unknown topic config name: {name}"))
            })?;
            let is_list = matches!(def.kind, topic_config::TopicConfigKind::ListOf(_));
            match op {
                AlterConfigOp::Set => {
                    let v = value.clone().ok_or_else(|| {
                        ApiError::InvalidRequest(format!("Null value not supported for : {name}"))
                    })?;
                    configs.insert(name.clone(), v);
                }
                AlterConfigOp::Delete => {
                    configs.remove(name);
                }
                AlterConfigOp::Append | AlterConfigOp::Subtract => {
                    if !is_list {
                        return Err(ApiError::InvalidConfig(format!(
                            "Config value append is not allowed for config key: {name}"
                        )));
                    }
                    let current = configs
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| def.default.to_owned());
                    let mut items: Vec<String> = current
                        .split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect();
                    let given: Vec<String> = value
                        .as_deref()
                        .unwrap_or_default()
                        .split(',')
                        .map(|s| s.trim().to_owned())
                        .filter(|s| !s.is_empty())
                        .collect();
                    if *op == AlterConfigOp::Append {
                        for g in given {
                            if !items.contains(&g) {
                                items.push(g);
                            }
                        }
                    } else {
                        items.retain(|i| !given.contains(i));
                    }
                    configs.insert(name.clone(), items.join(","));
                }
            }
            if let Some(v) = configs.get(name) {
                topic_config::validate(name, v)
                    .map_err(|e| ApiError::InvalidConfig(e.to_string()))?;
            }
        }
        if validate_only {
            return Ok(());
        }
        let mut records = Vec::new();
        for name in seen {
            let before = t.configs.get(&name);
            let after = configs.get(&name);
            if before != after {
                records.push(MetadataRecord::TopicConfig {
                    topic_id: t.id,
                    name,
                    value: after.cloned(),
                });
            }
        }
        self.commit(&mut state, records)
    }

    /// ElectLeaders: elects a leader for each partition (all partitions when `partitions` is
    /// None, answering only those where something was done or failed, as Kafka does), bumping
    /// leader and partition epochs of every partition whose leader changes.
    pub fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Vec<(String, i32, Result<(), ApiError>)> {
        let mut state = self.lock();
        let image = state.image.clone();
        let all = partitions.is_none();
        let targets = partitions.unwrap_or_else(|| {
            image
                .topics
                .values()
                .flat_map(|t| t.partitions.keys().map(|p| (t.name.clone(), *p)))
                .collect()
        });
        let mut results = Vec::with_capacity(targets.len());
        let mut records = Vec::new();
        for (topic, partition) in targets {
            let found = image
                .topic(&topic)
                .and_then(|t| t.partitions.get(&partition).map(|reg| (t.id, reg)));
            let result = match found {
                None => Err(ApiError::UnknownTopicOrPartition),
                Some((topic_id, reg)) => {
                    elect_leader(election, &reg.replicas, &reg.isr, reg.leader, |broker| {
                        image.brokers.contains_key(&broker)
                    })
                    .map(|leader| {
                        let mut next = reg.clone();
                        if !next.isr.contains(&leader) {
                            // An unclean election: the new leader is the only in-sync replica.
                            next.isr = vec![leader];
                        }
                        next.leader = leader;
                        next.leader_epoch += 1;
                        next.partition_epoch += 1;
                        records.push(MetadataRecord::Partition {
                            topic_id,
                            partition,
                            registration: next,
                        });
                    })
                }
            };
            if all && result == Err(ApiError::ElectionNotNeeded) {
                continue;
            }
            results.push((topic, partition, result));
        }
        if let Err(e) = self.commit(&mut state, records) {
            for (_, _, r) in results.iter_mut() {
                if r.is_ok() {
                    *r = Err(e.clone());
                }
            }
        }
        results
    }

    /// Hands out one producer id, committing a new block of ids when the current one runs out,
    /// so ids are never reused across restarts.
    pub fn allocate_producer_id(&self) -> Result<i64, ApiError> {
        let mut state = self.lock();
        if state.producer_id_next >= state.producer_id_block_end {
            let start = state.image.next_producer_id_block_start;
            let end = start + PRODUCER_ID_BLOCK_SIZE;
            self.commit(
                &mut state,
                vec![MetadataRecord::ProducerIds {
                    broker_id: self.node_id,
                    next_block_start: end,
                }],
            )?;
            state.producer_id_next = start;
            state.producer_id_block_end = end;
        }
        let id = state.producer_id_next;
        state.producer_id_next += 1;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn controller(name: &str) -> (Controller, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("kafkaiq-controller-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config = Arc::new(BrokerConfig::from_raw(RawConfig::default()).unwrap().config);
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let c = Controller::open(&dir, "cluster", config, cache).unwrap();
        c.register_broker(BrokerRegistration {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
        })
        .unwrap();
        (c, dir)
    }

    fn spec(name: &str, partitions: i32, rf: i16) -> CreateTopicSpec {
        CreateTopicSpec {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            ..Default::default()
        }
    }

    #[test]
    fn create_topic_errors_follow_kafka() {
        let (c, dir) = controller("errors");
        let t = c.create_topic(&spec("t", 3, 1), false).unwrap();
        assert_eq!(t.partitions.len(), 3);
        assert_eq!(t.partitions[&0].leader, 1);
        assert_eq!(t.partitions[&0].isr, vec![1]);
        let cases: Vec<(CreateTopicSpec, i16)> = vec![
            (spec("t", 1, 1), 36),
            (spec("bad name", 1, 1), 17),
            (spec("", 1, 1), 17),
            (spec("x", 0, 1), 37),
            (spec("x", 1, 3), 38),
            (spec("x", 1, 0), 38),
            (
                CreateTopicSpec {
                    configs: vec![("retention.ms".into(), Some("soon".into()))],
                    ..spec("x", 1, 1)
                },
                40,
            ),
        ];
        for (s, code) in cases {
            let err = c.create_topic(&s, false).unwrap_err();
            assert_eq!(err.code(), code, "{s:?}: {err}");
        }
        // validate_only changes nothing.
        c.create_topic(&spec("v", 1, 1), true).unwrap();
        assert!(c.image().topic("v").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn restart_replays_and_elections_bump_epochs() {
        let (c, dir) = controller("replay");
        c.create_topic(&spec("t", 2, 1), false).unwrap();
        c.alter_topic_configs(
            "t",
            &[("retention.ms".into(), AlterConfigOp::Set, Some("10".into()))],
            false,
        )
        .unwrap();
        let pid = c.allocate_producer_id().unwrap();
        let config = c.config.clone();
        drop(c);
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let c = Controller::open(&dir, "cluster", config, cache).unwrap();
        let t = c.image().topic("t").unwrap().clone();
        assert_eq!(t.configs["retention.ms"], "10");
        assert_eq!(t.partitions[&1].leader_epoch, 0);
        assert_eq!(c.elect_local_leaders_at_startup().unwrap(), 2);
        let t = c.image().topic("t").unwrap().clone();
        assert_eq!(t.partitions[&1].leader_epoch, 1);
        assert_eq!(t.partitions[&1].partition_epoch, 1);
        // Producer ids are never handed out twice, even across restarts.
        assert!(c.allocate_producer_id().unwrap() > pid);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn elect_leaders_on_one_node_needs_no_election() {
        let (c, dir) = controller("elect");
        c.create_topic(&spec("t", 2, 1), false).unwrap();
        let r = c.elect_leaders(
            ElectionType::Preferred,
            Some(vec![("t".into(), 0), ("t".into(), 9), ("u".into(), 0)]),
        );
        assert_eq!(r[0].2, Err(ApiError::ElectionNotNeeded));
        assert_eq!(r[1].2, Err(ApiError::UnknownTopicOrPartition));
        assert_eq!(r[2].2, Err(ApiError::UnknownTopicOrPartition));
        // All partitions: those needing nothing are left out.
        assert!(c.elect_leaders(ElectionType::Preferred, None).is_empty());
        assert_eq!(c.image().topic("t").unwrap().partitions[&0].leader_epoch, 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn partitions_and_config_ops() {
        let (c, dir) = controller("ops");
        c.create_topic(&spec("t", 1, 1), false).unwrap();
        assert_eq!(
            c.create_partitions("t", 1, None, false).unwrap_err().code(),
            37
        );
        c.create_partitions("t", 4, None, false).unwrap();
        assert_eq!(c.image().topic("t").unwrap().partitions.len(), 4);
        c.alter_topic_configs(
            "t",
            &[(
                "cleanup.policy".into(),
                AlterConfigOp::Append,
                Some("compact".into()),
            )],
            false,
        )
        .unwrap();
        assert_eq!(
            c.image().topic("t").unwrap().configs["cleanup.policy"],
            "delete,compact"
        );
        let err = c
            .alter_topic_configs(
                "t",
                &[(
                    "retention.ms".into(),
                    AlterConfigOp::Append,
                    Some("1".into()),
                )],
                false,
            )
            .unwrap_err();
        assert_eq!(err.code(), 40);
        let id = c.image().topic("t").unwrap().id;
        c.delete_topic(id).unwrap();
        assert!(c.image().topic("t").is_none());
        assert_eq!(c.delete_topic(id).unwrap_err().code(), 100);
        assert_eq!(new_cluster_id().len(), 22);
        let _ = std::fs::remove_dir_all(dir);
    }
}
