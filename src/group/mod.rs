//! # The classic consumer-group coordinator
//!
//! What it is: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and
//! committed offsets (OffsetCommit, OffsetFetch, OffsetDelete), plus the admin views
//! (ListGroups, DescribeGroups, DeleteGroups), as a **pure state machine**:
//!
//! ```text
//! (request, now) ─► Coordinator ─► Outcome { records, responses, timers, partitions }
//! ```
//!
//! - `records` are key/value pairs for partitions of `__consumer_offsets`, in Kafka's formats
//!   ([`records`]). The caller appends them and reports each partition's append before the
//!   next call: [`Coordinator::write_appended`] with the offset the high watermark must reach,
//!   or [`Coordinator::write_failed`], which rolls the change back.
//! - `responses` answer requests by [`Token`]. They go out only once the high watermark covers
//!   [`Coordinator::durable_at`] of every partition in `partitions` (reported with
//!   [`Coordinator::observe_high_watermark`]): a response promises that the state it describes
//!   is durable. A request whose token is not among them is *parked*: a JoinGroup waits for the
//!   rebalance to complete, a SyncGroup for the leader's assignment. A later call (another
//!   member's request, a timer) returns its response.
//! - `timers` are deadlines the caller must wake the machine at ([`Coordinator::tick`]); the
//!   machine ignores early or stale wake-ups, so the caller may simply sleep until
//!   [`Coordinator::next_deadline_ms`].
//!
//! Decisions are made on the latest state, pending writes included; what clients read
//! (OffsetFetch, DescribeGroups, ListGroups) is the durable state, as of the high watermark.
//! State changes only through requests, timers and [`Coordinator::replay`] of records, so a
//! restart is a replay of the `__consumer_offsets` partitions this node leads. [`service`] is
//! the async shell that does all of the above against the log ([`log`]).
//!
//! What it is not: it does no I/O and reads no clock (time comes in as `now_ms`); it does not
//! know which partitions this node leads (the caller says, through
//! [`Coordinator::begin_load`] / [`Coordinator::complete_load`] / [`Coordinator::unload`]); it
//! does not implement the KIP-848 consumer protocol or transactional offset commits.

pub mod consumer_protocol;
pub mod consumer_records;
mod coordinator;
pub mod log;
pub mod records;
pub mod service;
#[cfg(test)]
mod tests;

pub use coordinator::consumer::ConsumerGroupView;

/// What a consumer group member may see (KAFKA-18813): of the topics its regex matches it
/// subscribes only to those it may DESCRIBE. The request handler gives the caller's rights from
/// its ACLs (`handlers::authz::RequestAuth`); without an authorizer every topic is visible.
pub trait TopicRights: Send + Sync + std::fmt::Debug {
    /// Whether the member may DESCRIBE `topic`.
    fn may_describe(&self, topic: &str) -> bool;
    /// The caller (principal and host), `None` without an authorizer: members of one caller
    /// share one resolution of a regex.
    fn caller(&self) -> Option<(&str, &str)>;
}
pub use coordinator::responses::txn_offset_commit_all;
pub use coordinator::{
    Coordinator, CoordinatorRecord, GroupRequest, GroupResponse, GroupState, Outcome,
    RequestContext, Timer, TimerKind, Token,
};

/// Name of the internal topic holding group metadata and committed offsets.
pub const OFFSETS_TOPIC_NAME: &str = "__consumer_offsets";

/// How long a brand-new member may wait in a rebalance before it is dropped (Kafka's
/// `GroupCoordinatorConfig.CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS`, 5 minutes; not a key).
pub const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

/// Group coordinator settings, with Kafka's property names and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group waits
    /// for more members, so a fleet starting together does not rebalance once per member.
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`
    pub max_size: usize,
    /// How long a brand-new member may wait in a rebalance before it is dropped
    /// ([`NEW_MEMBER_JOIN_TIMEOUT_MS`]).
    pub new_member_join_timeout_ms: i64,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes`, in milliseconds.
    pub offsets_retention_ms: i64,
    /// `offsets.topic.num.partitions`
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.segment.bytes`: the offsets topic's `segment.bytes` when it is created
    /// (smaller segments are compacted sooner).
    pub offsets_topic_segment_bytes: i32,
    /// `group.consumer.session.timeout.ms`
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub consumer_heartbeat_interval_ms: i32,
    /// `kafkaiq.group.consumer.reconciling.heartbeat.interval.ms`: the interval answered to a
    /// member still moving to its target assignment, capped at the interval above.
    pub consumer_reconciling_heartbeat_interval_ms: i32,
    /// `group.consumer.assignors`, our names, the default first.
    pub consumer_assignors: Vec<String>,
    /// `group.consumer.max.size`
    pub consumer_max_size: usize,
    /// `group.coordinator.rebalance.protocols` lists `consumer`: the KIP-848 APIs are
    /// advertised and served.
    pub consumer_protocol_enabled: bool,
    /// `group.consumer.migration.policy`
    pub consumer_migration_policy: crate::config::MigrationPolicy,
}

impl GroupConfig {
    /// The server-side assignor of a consumer group whose members ask for none: the first of
    /// `group.consumer.assignors` (never empty, startup checks it).
    pub fn default_assignor(&self) -> &str {
        self.consumer_assignors
            .first()
            .map_or(coordinator::assignor::UNIFORM, String::as_str)
    }

    /// The coordinator's settings from the broker's validated configuration.
    pub fn from_broker(config: &crate::config::BrokerConfig) -> Self {
        Self {
            min_session_timeout_ms: config.group.min_session_timeout_ms,
            max_session_timeout_ms: config.group.max_session_timeout_ms,
            initial_rebalance_delay_ms: config.group.initial_rebalance_delay_ms,
            max_size: config.group.max_size,
            new_member_join_timeout_ms: NEW_MEMBER_JOIN_TIMEOUT_MS,
            offset_metadata_max_bytes: config.group.offset_metadata_max_bytes,
            offsets_retention_ms: config.group.offsets_retention_ms,
            offsets_topic_num_partitions: config.group.offsets_topic_num_partitions,
            offsets_topic_segment_bytes: config.group.offsets_topic_segment_bytes,
            consumer_session_timeout_ms: config.group.consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms: config.group.consumer_heartbeat_interval_ms,
            consumer_reconciling_heartbeat_interval_ms: config
                .group
                .consumer_reconciling_heartbeat_interval_ms,
            consumer_assignors: config.group.consumer_assignors.clone(),
            consumer_max_size: config.group.consumer_max_size,
            consumer_protocol_enabled: config.group.consumer_protocol_enabled,
            consumer_migration_policy: config.group.consumer_migration_policy,
        }
    }
}

impl Default for GroupConfig {
    /// Kafka's defaults, as the broker key table gives them.
    fn default() -> Self {
        Self::from_broker(
            &crate::config::BrokerConfig::from_raw(crate::config::RawConfig::default())
                .expect("the key table's defaults are valid")
                .config,
        )
    }
}

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The `__consumer_offsets` partition that holds `group_id`, as Kafka computes it:
/// `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`. Kafka's `Utils.abs` maps
/// `Integer.MIN_VALUE` to 0 rather than overflowing.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    assert!(
        num_partitions > 0,
        "offsets.topic.num.partitions must be positive"
    );
    let hash = java_string_hash(group_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions
}
