//! The controller's decisions, as pure functions of the metadata image, the broker's settings
//! and the request: the records a change needs, or the Kafka error that refuses it. No I/O, no
//! clock, no randomness (ids come in as arguments), no state of their own: the controller thread
//! (`super::driver`) runs them against its image and commits what they return.
//!
//! Here: topics, partitions, configs, leader elections, producer ids. In submodules: replica
//! placement (`placement`), how a partition's registration changes (`partition_change`), a
//! broker's registration, heartbeats, fencing and controlled shutdown (`brokers`),
//! AlterPartition (`alter_partition`), preferred leaders and automatic rebalancing
//! (`leadership`), partition reassignment (`reassignment`), CreateAcls / DeleteAcls
//! (`acls`) and AlterUserScramCredentials (`scram`).

pub mod acls;
mod alter_partition;
mod balancer;
mod brokers;
mod leadership;
mod partition_change;
mod placement;
mod reassignment;
pub mod scram;

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::config::dynamic;
use crate::config::topic as topic_config;
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::{
    METADATA_RECORDS_PER_USER_OP_MAX, METADATA_RECORD_BYTES_MAX, METADATA_STRING_BYTES_MAX,
    PARTITIONS_PER_TOPIC_MAX, PRODUCER_ID_BLOCK_SIZE, TOPIC_NAME_CHARS_MAX,
};
use crate::metadata::{LeaderRecoveryState, MetadataImage, MetadataRecord, PartitionRegistration};
pub use acls::{create_acls, delete_acls};
pub use alter_partition::{alter_partition, AlterPartitionItem, AlterPartitionResult};
pub use balancer::{
    balance, decode_load_report, encode_load_report, inputs_from_image, load_pass, move_records,
    BalancerConfig, BalancerOutcome, BrokerInput, LeadershipMove, LoadPass, PartitionInput,
    PartitionLoad, ReportedLoad, LOAD_REPORT_TAG,
};
pub use brokers::{
    broker_heartbeat, check_cluster_id, controlled_shutdown_step, fence_broker, register_broker,
    register_local_broker, unfence_broker, HeartbeatOutcome, Registered,
};
pub use leadership::{
    has_leaderless_partitions, leadership_summary, rebalance_pass, unclean_election_pass,
    BrokerLeadership,
};
pub use reassignment::{
    alter_reassignments, list_reassignments, OngoingReassignment, ReassignmentItem,
    ReassignmentResult,
};

/// The broker settings the decisions read, passed in so they need no `BrokerConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerSettings {
    /// `unclean.leader.election.enable`, the broker default (a topic's own config, or the
    /// cluster-wide dynamic one, overrides it).
    pub unclean_leader_election_enable: bool,
    /// `auto.leader.rebalance.enable`: whether [`rebalance_pass`] elects anything.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.per.broker.percentage` (0–100): a broker whose imbalance ratio is above
    /// it gets its preferred leaderships back; 0 = every imbalanced partition (KRaft's way).
    pub leader_imbalance_per_broker_percentage: u32,
}

impl Default for ControllerSettings {
    /// Kafka's defaults, as the broker key table gives them.
    fn default() -> ControllerSettings {
        ControllerSettings::from_config(
            &BrokerConfig::from_raw(crate::config::RawConfig::default())
                .expect("the key table's defaults are valid")
                .config,
        )
    }
}

impl ControllerSettings {
    pub fn from_config(config: &BrokerConfig) -> ControllerSettings {
        ControllerSettings {
            // Parsed (strictly) once, by the config's KRaft stage.
            unclean_leader_election_enable: config.kraft.unclean_leader_election_enable,
            auto_leader_rebalance_enable: config.elections.auto_leader_rebalance_enable,
            // Validated to 0..=100 by the config.
            leader_imbalance_per_broker_percentage: u32::try_from(
                config.elections.leader_imbalance_per_broker_percentage,
            )
            .unwrap_or(0),
        }
    }
}

/// The first record an active controller writes into a log that has none: the cluster id. Empty
/// once the image has one.
pub fn bootstrap_cluster_id(
    image: &MetadataImage,
    cluster_id: &str,
    bootstrap: Vec<MetadataRecord>,
) -> Vec<MetadataRecord> {
    if image.cluster_id.is_empty() {
        let mut records = vec![MetadataRecord::ClusterId {
            cluster_id: cluster_id.to_owned(),
        }];
        records.extend(bootstrap);
        records
    } else {
        Vec::new()
    }
}

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

/// Brokers that may hold new replicas and lead: unfenced and not shutting down, with racks.
fn usable_brokers(image: &MetadataImage) -> Vec<(i32, Option<&str>)> {
    image
        .brokers
        .values()
        .filter(|b| b.is_active())
        .map(|b| (b.node_id, b.rack.as_deref()))
        .collect()
}

/// Placement of the partitions `partitions` of a topic, after the `start` partitions the cluster
/// already has ([`placement::place_replicas`]).
fn place_replicas(
    image: &MetadataImage,
    partitions: std::ops::Range<i32>,
    replication_factor: usize,
) -> Result<Vec<(i32, Vec<i32>)>, ApiError> {
    let placed = placement::place_replicas(
        &usable_brokers(image),
        partition_count(image),
        partitions.len(),
        replication_factor,
    )?;
    Ok(partitions.zip(placed).collect())
}

fn partition_count(image: &MetadataImage) -> usize {
    image.topics.values().map(|t| t.partitions.len()).sum()
}

fn check_config_value(name: &str, value: &str) -> Result<(), ApiError> {
    if value.len() > METADATA_STRING_BYTES_MAX {
        return Err(ApiError::InvalidConfig(format!(
            "Value of config {name} is {} bytes long; at most {METADATA_STRING_BYTES_MAX} are allowed",
            value.len()
        )));
    }
    topic_config::validate(name, value).map_err(|e| ApiError::InvalidConfig(e.to_string()))
}

fn check_configs(configs: &[(String, Option<String>)]) -> Result<(), ApiError> {
    for (name, value) in configs {
        match value {
            Some(v) => check_config_value(name, v)?,
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

/// A new partition: its ISR is its replicas that may lead (all of them when placed; a manual
/// assignment may name fenced brokers), the first of them its leader, as Kafka's
/// `buildPartitionRegistration`.
fn new_partition(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    replicas: Vec<i32>,
) -> Result<MetadataRecord, ApiError> {
    let isr: Vec<i32> = replicas
        .iter()
        .copied()
        .filter(|&r| image.is_broker_active(r))
        .collect();
    let Some(&leader) = isr.first() else {
        return Err(ApiError::InvalidReplicaAssignment(format!(
            "All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."
        )));
    };
    Ok(MetadataRecord::Partition {
        topic_id,
        partition,
        registration: PartitionRegistration {
            leader,
            isr,
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        },
    })
}

fn new_partitions(
    image: &MetadataImage,
    topic_id: Uuid,
    assignments: Vec<(i32, Vec<i32>)>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    assignments
        .into_iter()
        .map(|(partition, replicas)| new_partition(image, topic_id, partition, replicas))
        .collect()
}

/// A topic's partition count against [`PARTITIONS_PER_TOPIC_MAX`], however it was asked for
/// (a count or a manual assignment).
fn check_partition_count(count: i64) -> Result<(), ApiError> {
    if count > PARTITIONS_PER_TOPIC_MAX as i64 {
        return Err(ApiError::InvalidPartitions(format!(
            "Number of partitions {count} exceeds the limit of {PARTITIONS_PER_TOPIC_MAX}."
        )));
    }
    Ok(())
}

/// The records of one client-initiated change against [`METADATA_RECORDS_PER_USER_OP_MAX`] and
/// one log entry ([`METADATA_RECORD_BYTES_MAX`] encoded): beyond either, Kafka's controller
/// refuses the whole operation with POLICY_VIOLATION and this message.
pub fn check_user_op_size(records: &[MetadataRecord]) -> Result<(), ApiError> {
    let too_large =
        || ApiError::PolicyViolation("Unable to perform excessively large batch operation.".into());
    if records.len() > METADATA_RECORDS_PER_USER_OP_MAX {
        return Err(too_large());
    }
    let mut bytes = 0usize;
    let mut one = Vec::new();
    for r in records {
        one.clear();
        r.encode(&mut one)
            .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        bytes += one.len();
        if bytes > METADATA_RECORD_BYTES_MAX {
            return Err(too_large());
        }
    }
    Ok(())
}

/// The replicas of each partition of a new topic: the manual assignment, checked, or a
/// placement of `num.partitions` × `default.replication.factor` where the spec says -1.
fn topic_assignments(
    image: &MetadataImage,
    config: &BrokerConfig,
    spec: &CreateTopicSpec,
) -> Result<Vec<(i32, Vec<i32>)>, ApiError> {
    // A manual assignment may name any registered broker (Kafka's rule); placement only uses
    // usable ones.
    let brokers: Vec<i32> = image.brokers.keys().copied().collect();
    if !spec.assignments.is_empty() {
        if spec.num_partitions != -1 || spec.replication_factor != -1 {
            return Err(ApiError::InvalidRequest(
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
            ));
        }
        check_partition_count(spec.assignments.len() as i64)?;
        let rf = spec.assignments[0].1.len();
        let mut sorted = spec.assignments.clone();
        sorted.sort_by_key(|(p, _)| *p);
        for (i, (p, replicas)) in sorted.iter().enumerate() {
            if *p != i as i32 {
                return Err(ApiError::InvalidReplicaAssignment(
                    "partitions should be a consecutive 0-based integer sequence".into(),
                ));
            }
            check_assignment(&brokers, replicas, Some(rf))?;
        }
        return Ok(sorted);
    }
    let num_partitions = match spec.num_partitions {
        -1 => config.topics.num_partitions,
        n => n,
    };
    if num_partitions <= 0 {
        return Err(ApiError::InvalidPartitions(
            "Number of partitions was set to an invalid non-positive value.".into(),
        ));
    }
    check_partition_count(num_partitions as i64)?;
    let rf = match spec.replication_factor {
        -1 => config.topics.default_replication_factor,
        n => n,
    };
    if rf <= 0 {
        return Err(ApiError::InvalidReplicationFactor(
            "Replication factor must be larger than 0, or -1 to use the default value.".into(),
        ));
    }
    place_replicas(image, 0..num_partitions, rf as usize)
}

/// CreateTopics for one topic: the topic, its configs and its partitions, with `topic_id`.
pub fn create_topic(
    image: &MetadataImage,
    config: &BrokerConfig,
    spec: &CreateTopicSpec,
    topic_id: Uuid,
) -> Result<Vec<MetadataRecord>, ApiError> {
    validate_topic_name(&spec.name)?;
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
    let assignments = topic_assignments(image, config, spec)?;
    check_configs(&spec.configs)?;
    let mut records = vec![MetadataRecord::Topic {
        name: spec.name.clone(),
        topic_id,
    }];
    records.extend(
        spec.configs
            .iter()
            .map(|(name, value)| MetadataRecord::TopicConfig {
                topic_id,
                name: name.clone(),
                value: value.clone(),
            }),
    );
    records.extend(new_partitions(image, topic_id, assignments)?);
    Ok(records)
}

/// DeleteTopics for one topic id.
pub fn delete_topic(
    image: &MetadataImage,
    config: &BrokerConfig,
    topic_id: Uuid,
) -> Result<Vec<MetadataRecord>, ApiError> {
    if !config.topics.delete_topic_enable {
        return Err(ApiError::TopicDeletionDisabled);
    }
    if image.topic_by_id(&topic_id).is_none() {
        return Err(ApiError::UnknownTopicId);
    }
    Ok(vec![MetadataRecord::RemoveTopic { topic_id }])
}

/// CreatePartitions: grows `topic` to `count` partitions, placed like the existing ones unless
/// `assignments` gives the new partitions' replicas.
pub fn create_partitions(
    image: &MetadataImage,
    topic: &str,
    count: i32,
    assignments: Option<Vec<Vec<i32>>>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let t = image
        .topic(topic)
        .ok_or(ApiError::UnknownTopicOrPartition)?;
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
    check_partition_count(count as i64)?;
    let rf = t
        .partitions
        .values()
        .next()
        .map(|p| p.replicas.len())
        .unwrap_or(1);
    let brokers: Vec<i32> = image.brokers.keys().copied().collect();
    let placed = match assignments {
        Some(list) => {
            if list.len() as i32 != count - current {
                return Err(ApiError::InvalidReplicaAssignment(format!(
                    "Attempted to add {} additional partition(s), but only {} assignment(s) were specified.",
                    count - current,
                    list.len()
                )));
            }
            let mut placed = Vec::with_capacity(list.len());
            for (i, replicas) in list.into_iter().enumerate() {
                check_assignment(&brokers, &replicas, Some(rf))?;
                placed.push((current + i as i32, replicas));
            }
            placed
        }
        None => place_replicas(image, current..count, rf)?,
    };
    new_partitions(image, t.id, placed)
}

/// The items of a list-valued config (`cleanup.policy`): comma-separated, trimmed, non-empty.
fn list_items(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// APPEND adds the given items not already present; SUBTRACT removes them.
fn apply_list_op(current: &str, given: &str, op: AlterConfigOp) -> String {
    let mut items = list_items(current);
    let given = list_items(given);
    if op == AlterConfigOp::Append {
        for g in given {
            if !items.contains(&g) {
                items.push(g);
            }
        }
    } else {
        items.retain(|i| !given.contains(i));
    }
    items.join(",")
}

/// The value one operation leaves for `name` (`None` = no override).
fn altered_value(
    configs: &BTreeMap<String, String>,
    name: &str,
    op: AlterConfigOp,
    value: &Option<String>,
) -> Result<Option<String>, ApiError> {
    if op == AlterConfigOp::Delete {
        // Kafka validates only the keys a change writes: deleting a key that has no value
        // (known or not) writes nothing and succeeds.
        return Ok(None);
    }
    let def = topic_config::topic_config_def(name)
        .ok_or_else(|| ApiError::InvalidConfig(format!("Unknown topic config name: {name}")))?;
    match op {
        AlterConfigOp::Set => value.clone().map(Some).ok_or_else(|| {
            ApiError::InvalidRequest(format!("Null value not supported for : {name}"))
        }),
        AlterConfigOp::Delete => Ok(None),
        AlterConfigOp::Append | AlterConfigOp::Subtract => {
            if !def.kind.is_list() {
                let verb = if op == AlterConfigOp::Append {
                    "APPEND"
                } else {
                    "SUBTRACT"
                };
                return Err(ApiError::InvalidConfig(format!(
                    "Can't {verb} to key {name} because its type is not LIST."
                )));
            }
            let current = configs.get(name).map_or(def.default, String::as_str);
            Ok(Some(apply_list_op(
                current,
                value.as_deref().unwrap_or_default(),
                op,
            )))
        }
    }
}

/// IncrementalAlterConfigs on one topic: one record per key whose override changes.
pub fn alter_topic_configs(
    image: &MetadataImage,
    topic: &str,
    ops: &[(String, AlterConfigOp, Option<String>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    let t = image
        .topic(topic)
        .ok_or(ApiError::UnknownTopicOrPartition)?;
    let mut configs = t.configs.clone();
    let mut seen = BTreeSet::new();
    for (name, op, value) in ops {
        if !seen.insert(name.clone()) {
            return Err(ApiError::InvalidRequest(format!(
                "Error due to duplicate config keys: {name}"
            )));
        }
        match altered_value(&configs, name, *op, value)? {
            Some(v) => {
                check_config_value(name, &v)?;
                configs.insert(name.clone(), v);
            }
            None => {
                configs.remove(name);
            }
        }
    }
    Ok(seen
        .into_iter()
        .filter(|name| t.configs.get(name) != configs.get(name))
        .map(|name| MetadataRecord::TopicConfig {
            topic_id: t.id,
            value: configs.get(&name).cloned(),
            name,
        })
        .collect())
}

/// IncrementalAlterConfigs on one BROKER resource (`resource`: a node id, or "" for the cluster
/// default): one `BrokerConfig` record per key whose value changes. Only
/// [`dynamic::DYNAMIC_BROKER_KEYS`] may be set; APPEND and SUBTRACT apply to LIST-typed keys
/// (`log.cleanup.policy`) only. Each value is checked as startup checks it, against what the
/// resource runs with now; a failed check is INVALID_REQUEST, as Kafka's broker answers it
/// (KAFKA-13609). A DELETE of a key with no value writes nothing, as in Kafka.
pub fn alter_broker_configs(
    image: &MetadataImage,
    config: &BrokerConfig,
    resource: &str,
    ops: &[(String, AlterConfigOp, Option<String>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    let before = image
        .broker_configs
        .get(resource)
        .cloned()
        .unwrap_or_default();
    let mut configs = before.clone();
    let mut seen = BTreeSet::new();
    // Values are checked against what the resource runs with now (a node's own layer and the
    // cluster default over the static file; the default alone for the "" resource).
    let node = resource.parse::<i32>().unwrap_or(-1);
    let current = dynamic::effective_for(config, &image.broker_configs, node)
        .unwrap_or_else(|_| config.clone());
    let set: Vec<&str> = ops
        .iter()
        .filter(|(_, op, _)| *op != AlterConfigOp::Delete)
        .map(|(name, _, _)| name.as_str())
        .collect();
    let refused: Vec<&str> = set
        .iter()
        .copied()
        .filter(|name| !dynamic::is_dynamic(name) && !dynamic::LISTENER_SSL_KEYS.contains(name))
        .collect();
    if !refused.is_empty() {
        return Err(ApiError::InvalidRequest(format!(
            "Cannot update these configs dynamically: Set({})",
            refused.join(", ")
        )));
    }
    dynamic::refuse_listener_keys(!resource.is_empty(), &set).map_err(ApiError::InvalidRequest)?;
    for (name, op, value) in ops {
        if !seen.insert(name.clone()) {
            return Err(ApiError::InvalidRequest(format!(
                "Error due to duplicate config keys: {name}"
            )));
        }
        match op {
            AlterConfigOp::Delete => {
                configs.remove(name);
            }
            AlterConfigOp::Set => {
                let v = value.clone().ok_or_else(|| {
                    ApiError::InvalidRequest(format!("Null value not supported for : {name}"))
                })?;
                dynamic::check_value(&current, name, &v).map_err(ApiError::InvalidRequest)?;
                configs.insert(name.clone(), v);
            }
            AlterConfigOp::Append | AlterConfigOp::Subtract
                if crate::config::broker_config_def(name)
                    .is_some_and(|d| d.kind == crate::config::ConfigKind::List) =>
            {
                let base = configs
                    .get(name)
                    .cloned()
                    .or_else(|| current.value_of(name))
                    .unwrap_or_default();
                let v = apply_list_op(&base, value.as_deref().unwrap_or_default(), *op);
                dynamic::check_value(&current, name, &v).map_err(ApiError::InvalidRequest)?;
                configs.insert(name.clone(), v);
            }
            AlterConfigOp::Append | AlterConfigOp::Subtract => {
                return Err(ApiError::InvalidConfig(format!(
                    "Can't {} to key {name} because its type is not LIST.",
                    if *op == AlterConfigOp::Append {
                        "APPEND"
                    } else {
                        "SUBTRACT"
                    }
                )));
            }
        }
    }
    Ok(seen
        .into_iter()
        .filter(|name| before.get(name) != configs.get(name))
        .map(|name| MetadataRecord::BrokerConfig {
            resource: resource.to_owned(),
            value: configs.get(&name).cloned(),
            name,
        })
        .collect())
}

/// A resource whose configs a legacy AlterConfigs replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    Topic(String),
    /// A broker id, or "" for the cluster default.
    Broker(String),
}

/// Legacy AlterConfigs (key 33; Kafka's `ConfigurationControlManager#legacyAlterConfigs`):
/// `configs` become the resource's whole set of configs — each listed key set (a null value
/// deletes it), every other key the resource has deleted — with the checks
/// IncrementalAlterConfigs makes. Decided against the controller's image, so a change
/// committed meanwhile is replaced too, never merged.
pub fn replace_configs(
    image: &MetadataImage,
    config: &BrokerConfig,
    resource: &ConfigResource,
    configs: &[(String, Option<String>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    let current = match resource {
        ConfigResource::Topic(topic) => image
            .topic(topic)
            .ok_or(ApiError::UnknownTopicOrPartition)?
            .configs
            .clone(),
        ConfigResource::Broker(name) => image.broker_configs.get(name).cloned().unwrap_or_default(),
    };
    let listed: BTreeSet<&str> = configs.iter().map(|(k, _)| k.as_str()).collect();
    let ops: Vec<(String, AlterConfigOp, Option<String>)> = configs
        .iter()
        .map(|(k, v)| {
            let op = if v.is_some() {
                AlterConfigOp::Set
            } else {
                AlterConfigOp::Delete
            };
            (k.clone(), op, v.clone())
        })
        .chain(
            current
                .keys()
                .filter(|k| !listed.contains(k.as_str()))
                .map(|k| (k.clone(), AlterConfigOp::Delete, None)),
        )
        .collect();
    match resource {
        ConfigResource::Topic(topic) => alter_topic_configs(image, topic, &ops),
        ConfigResource::Broker(name) => alter_broker_configs(image, config, name, &ops),
    }
}

/// The outcome of ElectLeaders for one partition.
pub type ElectionResult = (String, i32, Result<(), ApiError>);

/// ElectLeaders (Kafka's `ReplicationControlManager#electLeaders`): a leader for each partition
/// named, or for every partition when `partitions` is None — then answering only those where
/// something was done or failed (ELECTION_NOT_NEEDED left out), as Kafka does. Each partition's
/// outcome is [`elect_leader`]'s; an elected leader bumps leader and partition epochs. A
/// partition named twice is decided against what its first mention made.
pub fn elect_leaders(
    image: &MetadataImage,
    election: ElectionType,
    partitions: Option<Vec<(String, i32)>>,
) -> (Vec<MetadataRecord>, Vec<ElectionResult>) {
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
    let mut decided: BTreeMap<(Uuid, i32), PartitionRegistration> = BTreeMap::new();
    let acceptable = |broker: i32| image.is_broker_active(broker);
    for (topic, partition) in targets {
        let result =
            match image.topic(&topic) {
                None => Err(ApiError::UnknownTopicOrPartition
                    .with_message(format!("No such topic as {topic}"))),
                Some(t) => match decided
                    .get(&(t.id, partition))
                    .or_else(|| t.partitions.get(&partition))
                {
                    None => Err(ApiError::UnknownTopicOrPartition
                        .with_message(format!("No such partition as {topic}-{partition}"))),
                    Some(reg) => elect_leader(election, reg, &acceptable).map(|next| {
                        decided.insert((t.id, partition), next.clone());
                        records.push(MetadataRecord::Partition {
                            topic_id: t.id,
                            partition,
                            registration: next,
                        });
                    }),
                },
            };
        if all && result == Err(ApiError::ElectionNotNeeded) {
            continue;
        }
        results.push((topic, partition, result));
    }
    (records, results)
}

/// A block of producer ids handed to one broker (Kafka's `AllocateProducerIds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlock {
    pub first: i64,
    pub size: i64,
}

/// The next block of producer ids for `broker_id`; ids below the block's end are never handed out
/// again, across restarts.
pub fn allocate_producer_ids(
    image: &MetadataImage,
    broker_id: i32,
) -> (Vec<MetadataRecord>, ProducerIdBlock) {
    let first = image.next_producer_id_block_start;
    let block = ProducerIdBlock {
        first,
        size: PRODUCER_ID_BLOCK_SIZE,
    };
    let record = MetadataRecord::ProducerIds {
        broker_id,
        next_block_start: first + PRODUCER_ID_BLOCK_SIZE,
    };
    (vec![record], block)
}

/// ElectLeaders' election types (the request's `election_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

/// What an ElectLeaders request makes of one partition (Kafka's
/// `ReplicationControlManager#electLeader`), `acceptable` being "registered, unfenced and not
/// shutting down":
/// - PREFERRED: ELECTION_NOT_NEEDED if `replicas[0]` leads; else a preferred election
///   ([`partition_change::Election::Preferred`]: `replicas[0]` if it is in the ISR and
///   acceptable, else the current leader if it may stay, else the first ISR member that may
///   lead); PREFERRED_LEADER_NOT_AVAILABLE if that changes nothing.
/// - UNCLEAN: ELECTION_NOT_NEEDED if the partition has a leader; else the first acceptable ISR
///   member, else the first acceptable replica (alone in the ISR, RECOVERING), whatever the
///   topic's `unclean.leader.election.enable` says; ELIGIBLE_LEADERS_NOT_AVAILABLE if there is
///   none.
pub fn elect_leader(
    election: ElectionType,
    reg: &PartitionRegistration,
    acceptable: &dyn Fn(i32) -> bool,
) -> Result<PartitionRegistration, ApiError> {
    let (needed, how, unavailable) = match election {
        ElectionType::Preferred => (
            reg.leader != reg.preferred_replica(),
            partition_change::Election::Preferred,
            ApiError::PreferredLeaderNotAvailable,
        ),
        ElectionType::Unclean => (
            reg.leader == partition_change::NO_LEADER,
            partition_change::Election::Unclean,
            ApiError::EligibleLeadersNotAvailable,
        ),
    };
    if !needed {
        return Err(ApiError::ElectionNotNeeded);
    }
    partition_change::build(reg, partition_change::Target::of(reg), how, acceptable)
        .ok_or(unavailable)
}

#[cfg(test)]
// Table tests: each case is a tuple.
#[allow(clippy::type_complexity)]
pub(super) mod tests {
    use super::*;
    use crate::config::RawConfig;
    use crate::metadata::{security_protocol, BrokerRegistration};

    pub(super) fn config() -> BrokerConfig {
        BrokerConfig::from_raw(RawConfig::default()).unwrap().config
    }

    pub(super) fn settings() -> ControllerSettings {
        ControllerSettings::default()
    }

    /// Broker `node_id`'s registration request, in its first incarnation.
    pub(super) fn broker(node_id: i32) -> BrokerRegistration {
        incarnation(node_id, 1)
    }

    pub(super) fn incarnation(node_id: i32, n: u128) -> BrokerRegistration {
        BrokerRegistration::new(node_id, Uuid::from_u128(n << 32 | node_id as u128), None)
            .with_listener(
                "PLAINTEXT",
                "127.0.0.1",
                9090 + node_id as u16,
                security_protocol::PLAINTEXT,
            )
    }

    /// Registers and unfences `registration` as its heartbeat would, committing each step at
    /// the next offset.
    pub(super) fn join(image: &MetadataImage, registration: BrokerRegistration) -> MetadataImage {
        let mut image = image.clone();
        let registered = register_broker(&image, &settings(), &registration);
        image.apply_batch(image.metadata_offset + 1, &registered.records);
        let (records, outcome) = broker_heartbeat(
            &image,
            &settings(),
            registration.node_id,
            registered.broker_epoch,
            image.metadata_offset as i64,
            false,
            false,
            true,
        )
        .unwrap();
        assert!(!outcome.is_fenced);
        image.apply_batch(image.metadata_offset + 1, &records);
        image
    }

    /// An image with brokers `1..=n` registered and unfenced.
    pub(super) fn cluster(n: i32) -> MetadataImage {
        racked_cluster(&vec![None; n as usize])
    }

    /// Brokers `1..` in the given racks, registered and unfenced.
    pub(super) fn racked_cluster(racks: &[Option<&str>]) -> MetadataImage {
        let mut image = MetadataImage::empty("c".into(), 1);
        for (i, rack) in racks.iter().enumerate() {
            let b = BrokerRegistration {
                rack: rack.map(str::to_owned),
                ..broker(i as i32 + 1)
            };
            image = join(&image, b);
        }
        image
    }

    pub(super) fn partition(image: &MetadataImage, topic: &str, p: i32) -> PartitionRegistration {
        image.topic(topic).unwrap().partitions[&p].clone()
    }

    /// Sets a partition's registration by hand.
    pub(super) fn set_partition(
        image: &MetadataImage,
        topic: &str,
        p: i32,
        registration: PartitionRegistration,
    ) -> MetadataImage {
        let topic_id = image.topic(topic).unwrap().id;
        image.apply(&[MetadataRecord::Partition {
            topic_id,
            partition: p,
            registration,
        }])
    }

    pub(super) fn spec(name: &str, partitions: i32, rf: i16) -> CreateTopicSpec {
        CreateTopicSpec {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            ..Default::default()
        }
    }

    pub(super) fn with_topic(
        image: &MetadataImage,
        spec: &CreateTopicSpec,
        id: u128,
    ) -> MetadataImage {
        image.apply(&create_topic(image, &config(), spec, Uuid::from_u128(id)).unwrap())
    }

    #[test]
    fn create_topic_errors_follow_kafka() {
        let image = with_topic(&cluster(1), &spec("t", 3, 1), 1);
        let t = image.topic("t").unwrap();
        assert_eq!(t.partitions.len(), 3);
        assert_eq!(t.partitions[&0].leader, 1);
        assert_eq!(t.partitions[&0].isr, vec![1]);
        let long_value = "x".repeat(METADATA_STRING_BYTES_MAX + 1);
        let cases: Vec<(CreateTopicSpec, i16)> = vec![
            (spec("t", 1, 1), 36),
            (spec("bad name", 1, 1), 17),
            (spec("", 1, 1), 17),
            (spec("t_", 1, 1), 0),
            (spec("x", 0, 1), 37),
            (spec("x", PARTITIONS_PER_TOPIC_MAX + 1, 1), 37),
            (spec("x", 1, 3), 38),
            (spec("x", 1, 0), 38),
            (
                CreateTopicSpec {
                    configs: vec![("retention.ms".into(), Some("soon".into()))],
                    ..spec("x", 1, 1)
                },
                40,
            ),
            (
                CreateTopicSpec {
                    configs: vec![("retention.ms".into(), None)],
                    ..spec("x", 1, 1)
                },
                40,
            ),
            (
                CreateTopicSpec {
                    configs: vec![("cleanup.policy".into(), Some(long_value))],
                    ..spec("x", 1, 1)
                },
                40,
            ),
            (
                CreateTopicSpec {
                    assignments: vec![(0, vec![1])],
                    ..spec("x", 1, 1)
                },
                42,
            ),
            (
                CreateTopicSpec {
                    assignments: vec![(1, vec![1])],
                    ..spec("x", -1, -1)
                },
                39,
            ),
            (
                CreateTopicSpec {
                    assignments: vec![(0, vec![1, 1])],
                    ..spec("x", -1, -1)
                },
                39,
            ),
            (
                CreateTopicSpec {
                    assignments: vec![(0, vec![7])],
                    ..spec("x", -1, -1)
                },
                39,
            ),
            // A manual assignment is held to the partition cap too.
            (
                CreateTopicSpec {
                    assignments: (0..=PARTITIONS_PER_TOPIC_MAX)
                        .map(|p| (p, vec![1]))
                        .collect(),
                    ..spec("x", -1, -1)
                },
                37,
            ),
        ];
        for (s, code) in cases {
            let got = create_topic(&image, &config(), &s, Uuid::from_u128(2));
            match got {
                Ok(_) => assert_eq!(code, 0, "{s:?} was accepted"),
                Err(e) => assert_eq!(e.code(), code, "{s:?}: {e}"),
            }
        }
        // "t.x" and "t_x" collide.
        let image = with_topic(&image, &spec("t.x", 1, 1), 3);
        let err = create_topic(&image, &config(), &spec("t_x", 1, 1), Uuid::from_u128(4));
        assert_eq!(err.unwrap_err().code(), 17);
    }

    #[test]
    fn placement_rotates_leaders_across_brokers_and_topics() {
        let image = with_topic(&cluster(3), &spec("a", 3, 2), 1);
        let a = image.topic("a").unwrap();
        let replicas: Vec<_> = a.partitions.values().map(|p| p.replicas.clone()).collect();
        assert_eq!(replicas, vec![vec![1, 2], vec![2, 3], vec![3, 1]]);
        // The next topic starts where the cluster's partition count points.
        let image = with_topic(&image, &spec("b", 1, 3), 2);
        assert_eq!(
            image.topic("b").unwrap().partitions[&0].replicas,
            vec![1, 2, 3]
        );
        let image = with_topic(&image, &spec("c", 1, 1), 3);
        assert_eq!(image.topic("c").unwrap().partitions[&0].replicas, vec![2]);
    }

    #[test]
    fn create_partitions_table() {
        let image = with_topic(&cluster(2), &spec("t", 1, 2), 1);
        let cases: Vec<(&str, i32, Option<Vec<Vec<i32>>>, Result<usize, i16>)> = vec![
            ("t", 1, None, Err(37)),
            ("t", 0, None, Err(37)),
            ("t", PARTITIONS_PER_TOPIC_MAX + 1, None, Err(37)),
            ("u", 2, None, Err(3)),
            ("t", 3, None, Ok(2)),
            ("t", 3, Some(vec![vec![2, 1]]), Err(39)),
            ("t", 2, Some(vec![vec![2]]), Err(39)),
            ("t", 2, Some(vec![vec![2, 1]]), Ok(1)),
        ];
        for (topic, count, assignments, expected) in cases {
            let got = create_partitions(&image, topic, count, assignments.clone())
                .map(|r| r.len())
                .map_err(|e| e.code());
            assert_eq!(got, expected, "{topic} → {count} {assignments:?}");
        }
        let grown = image.apply(&create_partitions(&image, "t", 4, None).unwrap());
        let t = grown.topic("t").unwrap();
        assert_eq!(t.partitions.len(), 4);
        assert!(t
            .partitions
            .values()
            .all(|p| p.replicas.len() == 2 && p.leader_epoch == 0));
    }

    #[test]
    fn alter_topic_configs_table() {
        use AlterConfigOp::*;
        let image = with_topic(&cluster(1), &spec("t", 1, 1), 1);
        let op =
            |name: &str, op, value: Option<&str>| (name.to_owned(), op, value.map(str::to_owned));
        let apply = |image: &MetadataImage, ops: Vec<(String, AlterConfigOp, Option<String>)>| {
            alter_topic_configs(image, "t", &ops).map(|r| image.apply(&r))
        };
        let image = apply(&image, vec![op("cleanup.policy", Append, Some("compact"))]).unwrap();
        assert_eq!(
            image.topic("t").unwrap().configs["cleanup.policy"],
            "delete,compact"
        );
        // Appending what is there, and subtracting, are list arithmetic on the items.
        let image = apply(
            &image,
            vec![op("cleanup.policy", Append, Some("compact, delete"))],
        )
        .unwrap();
        assert_eq!(
            image.topic("t").unwrap().configs["cleanup.policy"],
            "delete,compact"
        );
        let image = apply(&image, vec![op("cleanup.policy", Subtract, Some("delete"))]).unwrap();
        assert_eq!(
            image.topic("t").unwrap().configs["cleanup.policy"],
            "compact"
        );
        let image = apply(&image, vec![op("retention.ms", Set, Some("10"))]).unwrap();
        assert_eq!(image.topic("t").unwrap().configs["retention.ms"], "10");
        // Setting the same value again changes nothing: no record.
        let same = alter_topic_configs(&image, "t", &[op("retention.ms", Set, Some("10"))]);
        assert!(same.unwrap().is_empty());
        let image = apply(&image, vec![op("retention.ms", Delete, None)]).unwrap();
        assert!(!image
            .topic("t")
            .unwrap()
            .configs
            .contains_key("retention.ms"));
        // DELETE of a key with no value, known or not, writes nothing.
        let none = alter_topic_configs(
            &image,
            "t",
            &[
                op("segment.ms", Delete, None),
                op("no.such.key", Delete, None),
            ],
        );
        assert!(none.unwrap().is_empty());
        // The throttled-replicas lists are LIST-typed: APPEND and SUBTRACT work.
        let key = "follower.replication.throttled.replicas";
        let image = apply(&image, vec![op(key, Append, Some("0:1,0:2"))]).unwrap();
        let image = apply(&image, vec![op(key, Subtract, Some("0:1"))]).unwrap();
        assert_eq!(image.topic("t").unwrap().configs[key], "0:2");
        let errors: Vec<(Vec<(String, AlterConfigOp, Option<String>)>, i16)> = vec![
            (vec![op(key, Append, Some("zero"))], 40),
            (vec![op("retention.ms", Append, Some("1"))], 40),
            (vec![op("no.such.key", Set, Some("1"))], 40),
            (vec![op("retention.ms", Set, Some("soon"))], 40),
            (vec![op("retention.ms", Set, None)], 42),
            (
                vec![
                    op("retention.ms", Set, Some("1")),
                    op("retention.ms", Delete, None),
                ],
                42,
            ),
        ];
        for (ops, code) in errors {
            let err = alter_topic_configs(&image, "t", &ops).unwrap_err();
            assert_eq!(err.code(), code, "{ops:?}: {err}");
        }
        assert_eq!(alter_topic_configs(&image, "u", &[]).unwrap_err().code(), 3);
    }

    #[test]
    fn elect_leaders_on_one_node_needs_no_election() {
        let image = with_topic(&cluster(1), &spec("t", 2, 1), 1);
        let (records, results) = elect_leaders(
            &image,
            ElectionType::Preferred,
            Some(vec![("t".into(), 0), ("t".into(), 9), ("u".into(), 0)]),
        );
        assert!(records.is_empty());
        assert_eq!(results[0].2, Err(ApiError::ElectionNotNeeded));
        assert_eq!(results[1].2.as_ref().unwrap_err().code(), 3);
        assert_eq!(results[2].2.as_ref().unwrap_err().code(), 3);
        // All partitions: those needing nothing are left out.
        let (records, results) = elect_leaders(&image, ElectionType::Preferred, None);
        assert!(records.is_empty() && results.is_empty());
    }

    #[test]
    fn preferred_election_moves_leadership_back_with_new_epochs() {
        let image = with_topic(&cluster(2), &spec("t", 1, 2), 1);
        let mut reg = image.topic("t").unwrap().partitions[&0].clone();
        assert_eq!(reg.leader, 1);
        reg.leader = 2;
        reg.leader_epoch = 3;
        let topic_id = image.topic("t").unwrap().id;
        let image = image.apply(&[MetadataRecord::Partition {
            topic_id,
            partition: 0,
            registration: reg,
        }]);
        let (records, results) = elect_leaders(&image, ElectionType::Preferred, None);
        assert_eq!(results, vec![("t".to_owned(), 0, Ok(()))]);
        let after = image.apply(&records);
        let p = &after.topic("t").unwrap().partitions[&0];
        assert_eq!((p.leader, p.leader_epoch), (1, 4));
    }

    #[test]
    fn placement_uses_only_unfenced_brokers_and_spreads_preferred_leaders() {
        let image = with_topic(&cluster(3), &spec("t", 6, 3), 1);
        let mut led = BTreeMap::new();
        for p in image.topic("t").unwrap().partitions.values() {
            *led.entry(p.replicas[0]).or_insert(0) += 1;
            assert_eq!(p.leader, p.replicas[0]);
            assert_eq!(p.isr, p.replicas);
        }
        assert_eq!(led, BTreeMap::from([(1, 2), (2, 2), (3, 2)]));
        // Broker 3 fenced: RF 3 no longer fits; RF 2 lands on 1 and 2 only.
        let fenced = image.apply(&fence_broker(&image, &settings(), 3, None));
        let err = create_topic(&fenced, &config(), &spec("u", 1, 3), Uuid::from_u128(2));
        assert_eq!(err.unwrap_err().code(), 38, "INVALID_REPLICATION_FACTOR");
        let placed = with_topic(&fenced, &spec("u", 4, 2), 2);
        for p in placed.topic("u").unwrap().partitions.values() {
            assert!(!p.replicas.contains(&3), "{p:?}");
        }
        // A manual assignment may name the fenced broker; it starts outside the ISR.
        let manual = CreateTopicSpec {
            assignments: vec![(0, vec![3, 1])],
            ..spec("m", -1, -1)
        };
        let m =
            fenced.apply(&create_topic(&fenced, &config(), &manual, Uuid::from_u128(3)).unwrap());
        let p = partition(&m, "m", 0);
        assert_eq!((p.replicas, p.isr, p.leader), (vec![3, 1], vec![1], 1));
        let only_fenced = CreateTopicSpec {
            assignments: vec![(0, vec![3])],
            ..spec("n", -1, -1)
        };
        let err = create_topic(&fenced, &config(), &only_fenced, Uuid::from_u128(4));
        assert_eq!(err.unwrap_err().code(), 39, "INVALID_REPLICA_ASSIGNMENT");
    }

    #[test]
    fn placement_is_rack_aware() {
        let image = racked_cluster(&[
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            Some("c"),
            Some("c"),
        ]);
        let image = with_topic(&image, &spec("t", 6, 3), 1);
        let rack = |id: i32| image.brokers[&id].rack.clone().unwrap();
        let mut led = BTreeSet::new();
        for p in image.topic("t").unwrap().partitions.values() {
            let racks: BTreeSet<_> = p.replicas.iter().map(|&r| rack(r)).collect();
            assert_eq!(racks.len(), 3, "{p:?}");
            led.insert(p.leader);
        }
        assert_eq!(led.len(), 6, "every broker prefers one partition");
    }

    #[test]
    fn elections_skip_fenced_brokers() {
        let image = with_topic(&cluster(2), &spec("t", 1, 2), 1);
        let moved = set_partition(
            &image,
            "t",
            0,
            PartitionRegistration {
                leader: 2,
                leader_epoch: 3,
                ..partition(&image, "t", 0)
            },
        );
        // Broker 1 fenced by hand (its ISR membership kept, to isolate the election's check).
        let b1 = moved.brokers[&1].clone();
        let fenced = moved.apply(&[MetadataRecord::BrokerRegistrationChange {
            node_id: 1,
            broker_epoch: b1.broker_epoch,
            fenced: Some(true),
            in_controlled_shutdown: None,
        }]);
        let (records, results) = elect_leaders(
            &fenced,
            ElectionType::Preferred,
            Some(vec![("t".into(), 0)]),
        );
        assert!(records.is_empty());
        assert_eq!(results[0].2, Err(ApiError::PreferredLeaderNotAvailable));
        // Unclean election from outside the ISR marks the leader RECOVERING.
        let leaderless = set_partition(
            &image,
            "t",
            0,
            PartitionRegistration {
                leader: -1,
                isr: vec![1],
                ..partition(&image, "t", 0)
            },
        );
        let leaderless = leaderless.apply(&[MetadataRecord::BrokerRegistrationChange {
            node_id: 1,
            broker_epoch: b1.broker_epoch,
            fenced: Some(true),
            in_controlled_shutdown: None,
        }]);
        let (records, results) = elect_leaders(&leaderless, ElectionType::Unclean, None);
        assert_eq!(results, vec![("t".to_owned(), 0, Ok(()))]);
        let p = partition(&leaderless.apply(&records), "t", 0);
        assert_eq!(
            (p.leader, p.isr, p.leader_recovery_state),
            (2, vec![2], LeaderRecoveryState::Recovering)
        );
    }

    #[test]
    fn the_cluster_id_is_written_once() {
        let image = MetadataImage::default();
        let records = bootstrap_cluster_id(&image, "abc", Vec::new());
        assert_eq!(records.len(), 1);
        let image = image.apply(&records);
        assert_eq!(image.cluster_id, "abc");
        assert!(bootstrap_cluster_id(&image, "other", Vec::new()).is_empty());
        // The bootstrap records go with the id, once: a restarted or later controller writes
        // neither again (a user deleted since stays deleted).
        let alice = MetadataRecord::RemoveUserScramCredential {
            user: "alice".into(),
            mechanism: crate::metadata::scram::ScramMechanism::Sha256,
        };
        let first = bootstrap_cluster_id(&MetadataImage::default(), "abc", vec![alice.clone()]);
        assert_eq!(first.last(), Some(&alice));
        assert!(bootstrap_cluster_id(&image, "abc", vec![alice]).is_empty());
        assert!(check_cluster_id(&image, "abc").is_ok());
        assert_eq!(check_cluster_id(&image, "other").unwrap_err().code(), 104);
    }

    #[test]
    fn settings_read_unclean_election_from_the_config() {
        let mut raw = RawConfig::default();
        raw.set("unclean.leader.election.enable", "true");
        raw.set("leader.imbalance.per.broker.percentage", "0");
        raw.set("auto.leader.rebalance.enable", "false");
        let config = BrokerConfig::from_raw(raw).unwrap().config;
        let settings = ControllerSettings::from_config(&config);
        assert!(settings.unclean_leader_election_enable);
        assert!(!settings.auto_leader_rebalance_enable);
        assert_eq!(settings.leader_imbalance_per_broker_percentage, 0);
        let defaults = ControllerSettings::default();
        assert!(defaults.auto_leader_rebalance_enable, "Kafka's default");
        assert_eq!(defaults.leader_imbalance_per_broker_percentage, 10);
        assert!(
            !ControllerSettings::from_config(&super::tests::config())
                .unclean_leader_election_enable
        );
    }

    #[test]
    fn producer_id_blocks_follow_each_other() {
        let image = cluster(1);
        let (records, first) = allocate_producer_ids(&image, 1);
        let image = image.apply(&records);
        let (_, second) = allocate_producer_ids(&image, 1);
        assert_eq!(first.first, 0);
        assert_eq!(second.first, first.first + first.size);
    }

    #[test]
    fn election_table() {
        use ElectionType::*;
        let all = |_: i32| true;
        let not_2 = |r: i32| r != 2;
        let not_1 = |r: i32| r != 1;
        // (case, type, replicas, isr, leader, acceptable, expected (leader, isr, recovering))
        let cases: Vec<(
            &str,
            ElectionType,
            Vec<i32>,
            Vec<i32>,
            i32,
            &dyn Fn(i32) -> bool,
            Result<(i32, Vec<i32>, bool), ApiError>,
        )> = vec![
            (
                "preferred already leads",
                Preferred,
                vec![1, 2, 3],
                vec![1, 2, 3],
                1,
                &all,
                Err(ApiError::ElectionNotNeeded),
            ),
            (
                "preferred in the ISR",
                Preferred,
                vec![1, 2, 3],
                vec![1, 2, 3],
                2,
                &all,
                Ok((1, vec![1, 2, 3], false)),
            ),
            (
                "preferred not in the ISR",
                Preferred,
                vec![1, 2, 3],
                vec![2, 3],
                2,
                &all,
                Err(ApiError::PreferredLeaderNotAvailable),
            ),
            (
                "preferred fenced or shutting down",
                Preferred,
                vec![2, 1],
                vec![1, 2],
                1,
                &not_2,
                Err(ApiError::PreferredLeaderNotAvailable),
            ),
            (
                "preferred unavailable, leaderless: another ISR member leads (Kafka's builder)",
                Preferred,
                vec![1, 2, 3],
                vec![1, 3],
                -1,
                &not_1,
                Ok((3, vec![1, 3], false)),
            ),
            (
                "unclean with a leader",
                Unclean,
                vec![1, 2],
                vec![1, 2],
                1,
                &all,
                Err(ApiError::ElectionNotNeeded),
            ),
            (
                "unclean with a leader that may not lead: still not needed (Kafka's hasLeader)",
                Unclean,
                vec![1, 2],
                vec![1, 2],
                2,
                &not_2,
                Err(ApiError::ElectionNotNeeded),
            ),
            (
                "unclean: no ISR member may lead, the first replica that may",
                Unclean,
                vec![1, 2, 3],
                vec![2],
                -1,
                &not_2,
                Ok((1, vec![1], true)),
            ),
            (
                "unclean: an ISR member may lead, a clean election",
                Unclean,
                vec![1, 2, 3],
                vec![3],
                -1,
                &all,
                Ok((3, vec![3], false)),
            ),
            (
                "unclean: nobody",
                Unclean,
                vec![2],
                vec![2],
                -1,
                &not_2,
                Err(ApiError::EligibleLeadersNotAvailable),
            ),
        ];
        for (case, election, replicas, isr, leader, acceptable, expected) in cases {
            let reg = PartitionRegistration {
                replicas,
                isr,
                leader,
                leader_epoch: 3,
                partition_epoch: 7,
                leader_recovery_state: LeaderRecoveryState::Recovered,
                adding_replicas: vec![],
                removing_replicas: vec![],
            };
            let got = elect_leader(election, &reg, acceptable);
            if let Ok(next) = &got {
                assert_eq!(
                    (next.leader_epoch, next.partition_epoch),
                    (4, 8),
                    "{case}: both epochs bumped"
                );
            }
            let got = got.map(|n| {
                (
                    n.leader,
                    n.isr,
                    n.leader_recovery_state == LeaderRecoveryState::Recovering,
                )
            });
            assert_eq!(got, expected, "{case}");
        }
    }

    #[test]
    fn elect_leaders_answers_with_kafkas_messages() {
        let image = with_topic(&cluster(1), &spec("t", 1, 1), 1);
        let (_, results) = elect_leaders(
            &image,
            ElectionType::Preferred,
            Some(vec![("u".into(), 0), ("t".into(), 4)]),
        );
        let messages: Vec<(i16, String)> = results
            .iter()
            .map(|(_, _, r)| {
                let e = r.as_ref().unwrap_err();
                (e.code(), e.message())
            })
            .collect();
        assert_eq!(
            messages,
            vec![
                (3, "No such topic as u".to_owned()),
                (3, "No such partition as t-4".to_owned())
            ]
        );
        for (error, message) in [
            (
                ApiError::ElectionNotNeeded,
                "Leader election not needed for topic partition.",
            ),
            (
                ApiError::PreferredLeaderNotAvailable,
                "The preferred leader was not available.",
            ),
            (
                ApiError::EligibleLeadersNotAvailable,
                "Eligible topic partition leaders are not available.",
            ),
        ] {
            assert_eq!(error.message(), message);
        }
    }

    /// A listener's key store is committed for a broker by the controller without loading it
    /// (it is that broker's file, which the broker checked); the cluster default and the
    /// unprefixed key are refused as Kafka refuses them.
    #[test]
    fn a_listeners_key_store_is_set_per_broker_only() {
        let image = MetadataImage::default();
        let config = config();
        let key = "listener.name.ssl.ssl.keystore.location";
        let set = |k: &str| {
            [(
                k.to_owned(),
                AlterConfigOp::Set,
                Some("/nowhere.pem".to_owned()),
            )]
        };
        let records = alter_broker_configs(&image, &config, "2", &set(key)).unwrap();
        assert_eq!(
            records,
            [MetadataRecord::BrokerConfig {
                resource: "2".to_owned(),
                name: key.to_owned(),
                value: Some("/nowhere.pem".to_owned()),
            }]
        );
        let refused = |resource: &str, k: &str| match alter_broker_configs(
            &image,
            &config,
            resource,
            &set(k),
        )
        .unwrap_err()
        {
            ApiError::InvalidRequest(m) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            refused("", key).starts_with("Cannot update these configs at default cluster level")
        );
        assert!(refused("2", "ssl.keystore.location")
            .starts_with("These security configs can be dynamically updated only per-listener"));
        assert!(refused("2", "listener.name.ssl.ssl.client.auth")
            .starts_with("Cannot update these configs dynamically"));
    }
}
