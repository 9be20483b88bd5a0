//! The broker key table: one row per key Kafka's `server.properties` may hold, with its name,
//! Kafka default, kind, validation and synonyms (the keys that give the same setting in other
//! units). `BrokerConfig::from_raw`, the KRaft parsing ([`super::kraft`]), DescribeConfigs and
//! the dynamic broker configs all read keys through this table, so a default or a bound is
//! written exactly once.

use super::{kraft, ConfigError, RawConfig};

/// How a broker key's value is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    Int,
    Long,
    Bool,
    Str,
    List,
    Double,
}

/// What a value must satisfy beyond its kind (Kafka's `ConfigDef.Validator`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Any,
    AtLeast(i64),
    /// `min..=max`; below `min` is "at least", above is "between".
    Between(i64, i64),
    OneOf(&'static [&'static str]),
}

/// The settings a key fills: a field of [`super::BrokerConfig`] or of one of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The node itself: `node.id`, `broker.rack`, the log dirs, the HTTP listener.
    Broker,
    /// [`super::kraft::KraftConfig`]: roles, quorum, listeners, sessions, the metadata log.
    Kraft,
    /// [`super::LogSettings`]
    Log,
    /// [`super::TopicDefaults`]
    Topics,
    /// [`super::SocketSettings`]
    Socket,
    /// [`super::ReplicaSettings`]
    Replica,
    /// [`super::ElectionSettings`]
    Elections,
    /// [`super::GroupSettings`]
    Group,
    /// [`super::CleanerSettings`]
    Cleaner,
    /// [`super::TransactionSettings`]
    Transactions,
    /// No struct: read as the broker synonym of a topic key ([`super::topic`]) when a topic
    /// does not set it.
    TopicConfigs,
    /// Nothing: accepted because stock `server.properties` files contain it, but without
    /// effect on a single KafkaIQ process (thread counts, socket buffers).
    Unused,
}

/// One broker key the broker knows: its Kafka default (None = null) and whether changing it
/// needs a restart (all of ours do: there are no dynamic broker configs yet).
#[derive(Debug, Clone, Copy)]
pub struct BrokerConfigDef {
    pub name: &'static str,
    pub default: Option<&'static str>,
    pub kind: ConfigKind,
    /// The settings struct the key fills.
    pub part: Part,
    /// false (exactly the [`Part::Unused`] keys) for keys that are accepted because stock `server.properties` files contain them,
    /// but which have no effect on a single KafkaIQ process (thread counts, socket buffers).
    pub effective: bool,
    pub check: Check,
    /// Keys that set the same value in other units, in precedence order after this one: (key,
    /// how many of this key's units one of theirs is). `log.retention.ms` is set by
    /// `log.retention.minutes` (× 60,000) and `log.retention.hours` (× 3,600,000).
    pub synonyms: &'static [(&'static str, i64)],
}

const fn key(
    part: Part,
    name: &'static str,
    default: Option<&'static str>,
    kind: ConfigKind,
) -> BrokerConfigDef {
    BrokerConfigDef {
        name,
        default,
        kind,
        part,
        effective: !matches!(part, Part::Unused),
        check: Check::Any,
        synonyms: &[],
    }
}

impl BrokerConfigDef {
    const fn at_least(mut self, min: i64) -> Self {
        self.check = Check::AtLeast(min);
        self
    }

    const fn between(mut self, min: i64, max: i64) -> Self {
        self.check = Check::Between(min, max);
        self
    }

    const fn one_of(mut self, values: &'static [&'static str]) -> Self {
        self.check = Check::OneOf(values);
        self
    }

    const fn synonyms(mut self, synonyms: &'static [(&'static str, i64)]) -> Self {
        self.synonyms = synonyms;
        self
    }
}

pub(crate) const HOUR_MS: i64 = 3_600_000;

/// `kafkaiq.group.consumer.reconciling.heartbeat.interval.ms`: the heartbeat interval answered
/// to every member of a KIP-848 group while the group is Assigning or Reconciling (some member
/// does not hold its target assignment yet), capped at `group.consumer.heartbeat.interval.ms`.
/// Equal to that key, it is Kafka's behaviour.
pub const CONSUMER_RECONCILING_HEARTBEAT_INTERVAL_MS: &str =
    "kafkaiq.group.consumer.reconciling.heartbeat.interval.ms";
/// `kafkaiq.leader.balancer`: `count` (Kafka's) or `load`.
pub const LEADER_BALANCER: &str = "kafkaiq.leader.balancer";
/// `kafkaiq.leader.balancer.threshold`: the busiest broker's load over the mean above which the
/// load balancer moves leadership.
pub const LEADER_BALANCER_THRESHOLD: &str = "kafkaiq.leader.balancer.threshold";
/// `kafkaiq.leader.balancer.min.dwell.ms`: how long a moved leadership stays.
pub const LEADER_BALANCER_MIN_DWELL_MS: &str = "kafkaiq.leader.balancer.min.dwell.ms";
/// `kafkaiq.leader.balancer.min.measured.ms`: how long a partition's leader must have measured
/// its load before the balancer acts on it.
pub const LEADER_BALANCER_MIN_MEASURED_MS: &str = "kafkaiq.leader.balancer.min.measured.ms";
/// `kafkaiq.leader.balancer.max.moves.per.interval`: moves per balancing pass.
pub const LEADER_BALANCER_MAX_MOVES_PER_INTERVAL: &str =
    "kafkaiq.leader.balancer.max.moves.per.interval";

use ConfigKind::*;
use Part::*;

/// Every broker key we accept, sorted by name. Defaults are Kafka's, except:
/// - `listeners` and `log.dirs`, whose defaults are the embedded single-node setup
///   (127.0.0.1:9092, ./kafkaiq-data);
/// - `group.consumer.heartbeat.interval.ms` (2 s, Kafka's is 5 s) and its lower bound
///   `group.consumer.min.heartbeat.interval.ms` (1 s, Kafka's is 5 s). A KIP-848 member learns
///   of a rebalance only from its next heartbeat, so the interval is what a join or a leave
///   costs; a heartbeat costs the coordinator a few microseconds. A file that sets a bound the
///   2 s default falls outside of moves the default into it ([`super::GroupSettings`]), so
///   every file Kafka accepts is accepted.
pub const BROKER_CONFIG_DEFS: &[BrokerConfigDef] = &[
    key(Kraft, kraft::ADVERTISED_LISTENERS, None, List),
    key(Topics, "auto.create.topics.enable", Some("true"), Bool),
    key(
        Elections,
        "auto.leader.rebalance.enable",
        Some("true"),
        Bool,
    ),
    key(
        Kraft,
        kraft::BROKER_HEARTBEAT_INTERVAL_MS,
        Some("2000"),
        Int,
    )
    .at_least(1),
    key(Broker, kraft::BROKER_ID, None, Int).at_least(0),
    key(Broker, "broker.rack", None, Str),
    key(Kraft, kraft::BROKER_SESSION_TIMEOUT_MS, Some("9000"), Int).at_least(1),
    key(TopicConfigs, "compression.type", Some("producer"), Str),
    key(Socket, "connections.max.idle.ms", Some("600000"), Long).at_least(1),
    key(Kraft, kraft::CONTROLLER_LISTENER_NAMES, None, List),
    key(
        Unused,
        "controller.quorum.append.linger.ms",
        Some("25"),
        Int,
    ),
    key(Kraft, kraft::QUORUM_BOOTSTRAP_SERVERS, None, List),
    key(
        Unused,
        "controller.quorum.election.backoff.max.ms",
        Some("1000"),
        Int,
    ),
    key(Kraft, kraft::QUORUM_ELECTION_TIMEOUT_MS, Some("1000"), Int).at_least(0),
    key(Kraft, kraft::QUORUM_FETCH_TIMEOUT_MS, Some("2000"), Int).at_least(0),
    key(
        Unused,
        "controller.quorum.request.timeout.ms",
        Some("2000"),
        Int,
    ),
    key(
        Unused,
        "controller.quorum.retry.backoff.ms",
        Some("20"),
        Int,
    ),
    key(Kraft, kraft::QUORUM_VOTERS, None, List),
    key(Topics, "default.replication.factor", Some("1"), Int).at_least(1),
    key(Topics, "delete.topic.enable", Some("true"), Bool),
    key(Replica, "fetch.max.bytes", Some("57671680"), Int).at_least(1024),
    key(
        Group,
        "group.consumer.assignors",
        Some("org.apache.kafka.coordinator.group.assignor.UniformAssignor,org.apache.kafka.coordinator.group.assignor.RangeAssignor"),
        List,
    ),
    key(Group, "group.consumer.heartbeat.interval.ms", Some("2000"), Int).at_least(1),
    key(Group, "group.consumer.max.heartbeat.interval.ms", Some("15000"), Int).at_least(1),
    key(Group, "group.consumer.max.session.timeout.ms", Some("60000"), Int).at_least(1),
    key(Group, "group.consumer.max.size", Some("2147483647"), Int).at_least(1),
    key(Group, "group.consumer.migration.policy", Some("bidirectional"), Str).one_of(&[
        "disabled",
        "upgrade",
        "downgrade",
        "bidirectional",
    ]),
    key(Group, "group.consumer.min.heartbeat.interval.ms", Some("1000"), Int).at_least(1),
    key(Group, "group.consumer.min.session.timeout.ms", Some("45000"), Int).at_least(1),
    key(Group, "group.consumer.session.timeout.ms", Some("45000"), Int).at_least(1),
    key(Group, "group.coordinator.rebalance.protocols", Some("classic,consumer"), List),
    key(Group, "group.initial.rebalance.delay.ms", Some("3000"), Int).at_least(0),
    key(Group, "group.max.session.timeout.ms", Some("1800000"), Int),
    key(Group, "group.max.size", Some("2147483647"), Int).at_least(1),
    key(Group, "group.min.session.timeout.ms", Some("6000"), Int),
    key(
        Unused,
        "initial.broker.registration.timeout.ms",
        Some("60000"),
        Int,
    ),
    // No default: a Kafka `server.properties` names no HTTP listener, and several nodes on one
    // host must not fight over one port. The embedded setup (no `--config`) turns it on
    // (`RawConfig::embedded`).
    key(Broker, "http.listener", None, Str),
    key(Kraft, kraft::INTER_BROKER_LISTENER_NAME, None, Str),
    key(
        Kraft,
        kraft::INTER_BROKER_SECURITY_PROTOCOL,
        Some("PLAINTEXT"),
        Str,
    ),
    // KafkaIQ's own: a shorter heartbeat interval while a KIP-848 group reconciles
    // (`group::coordinator::consumer`).
    key(
        Group,
        CONSUMER_RECONCILING_HEARTBEAT_INTERVAL_MS,
        Some("250"),
        Int,
    )
    .at_least(1),
    // KafkaIQ's own: leadership balanced by measured load (`controller::decisions::balancer`).
    // `count` is Kafka's behaviour (preferred leaders, `auto.leader.rebalance.enable`).
    key(Elections, LEADER_BALANCER, Some("count"), Str).one_of(&["count", "load"]),
    key(
        Elections,
        LEADER_BALANCER_MAX_MOVES_PER_INTERVAL,
        Some("5"),
        Int,
    )
    .between(1, 1000),
    key(
        Elections,
        LEADER_BALANCER_MIN_DWELL_MS,
        Some("300000"),
        Long,
    )
    .at_least(0),
    key(
        Elections,
        LEADER_BALANCER_MIN_MEASURED_MS,
        Some("30000"),
        Long,
    )
    .at_least(0),
    // A ratio to the mean, > 1 (checked where it is read: the row's bounds are integers).
    key(Elections, LEADER_BALANCER_THRESHOLD, Some("1.1"), Double).between(1, 100),
    key(Elections, "leader.imbalance.check.interval.ms", None, Long)
        .at_least(1)
        .synonyms(&[("leader.imbalance.check.interval.seconds", 1_000)]),
    key(
        Elections,
        "leader.imbalance.check.interval.seconds",
        Some("300"),
        Long,
    )
    .at_least(1),
    key(
        Elections,
        "leader.imbalance.per.broker.percentage",
        Some("10"),
        Int,
    )
    .between(0, 100),
    key(
        Kraft,
        kraft::LISTENER_SECURITY_PROTOCOL_MAP,
        Some(kraft::DEFAULT_SECURITY_PROTOCOL_MAP),
        List,
    ),
    key(
        Kraft,
        kraft::LISTENERS,
        Some("PLAINTEXT://127.0.0.1:9092"),
        List,
    ),
    key(Cleaner, "log.cleaner.backoff.ms", Some("15000"), Long).at_least(0),
    key(
        Cleaner,
        "log.cleaner.dedupe.buffer.size",
        Some("134217728"),
        Long,
    ),
    key(
        TopicConfigs,
        "log.cleaner.delete.retention.ms",
        Some("86400000"),
        Long,
    )
    .at_least(0),
    key(Cleaner, "log.cleaner.enable", Some("true"), Bool),
    key(
        Cleaner,
        "log.cleaner.io.buffer.load.factor",
        Some("0.9"),
        Double,
    ),
    // The cleaner reads segments through the page cache (mapped), without an I/O buffer.
    key(Unused, "log.cleaner.io.buffer.size", Some("524288"), Int).at_least(0),
    key(
        Cleaner,
        "log.cleaner.io.max.bytes.per.second",
        Some("1.7976931348623157E308"),
        Double,
    ),
    key(
        TopicConfigs,
        "log.cleaner.max.compaction.lag.ms",
        Some("9223372036854775807"),
        Long,
    )
    .at_least(1),
    key(
        TopicConfigs,
        "log.cleaner.min.cleanable.ratio",
        Some("0.5"),
        Double,
    )
    .between(0, 1),
    key(
        TopicConfigs,
        "log.cleaner.min.compaction.lag.ms",
        Some("0"),
        Long,
    )
    .at_least(0),
    key(Cleaner, "log.cleaner.threads", Some("1"), Int).at_least(0),
    key(TopicConfigs, "log.cleanup.policy", Some("delete"), List),
    key(Broker, "log.dir", Some("/tmp/kafka-logs"), Str),
    key(Broker, "log.dirs", None, List),
    key(
        Log,
        "log.flush.interval.messages",
        Some("9223372036854775807"),
        Long,
    )
    .at_least(1),
    key(Log, "log.flush.interval.ms", None, Long).at_least(0),
    key(
        Unused,
        "log.flush.scheduler.interval.ms",
        Some("9223372036854775807"),
        Long,
    ),
    key(Log, "log.index.interval.bytes", Some("4096"), Int).at_least(0),
    key(Log, "log.index.size.max.bytes", Some("10485760"), Int).at_least(4),
    key(Log, "log.message.timestamp.type", Some("CreateTime"), Str)
        .one_of(&["CreateTime", "LogAppendTime"]),
    key(Log, "log.retention.bytes", Some("-1"), Long),
    key(Log, "log.retention.check.interval.ms", Some("300000"), Long),
    key(Log, "log.retention.hours", Some("168"), Int),
    key(Log, "log.retention.minutes", None, Int),
    key(Log, "log.retention.ms", None, Long).synonyms(&[
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", HOUR_MS),
    ]),
    key(Log, "log.roll.hours", Some("168"), Int).at_least(1),
    key(Log, "log.roll.ms", None, Long)
        .at_least(1)
        .synonyms(&[("log.roll.hours", HOUR_MS)]),
    key(Log, "log.segment.bytes", Some("1073741824"), Int).at_least(14),
    key(Socket, "max.connections", Some("2147483647"), Int).at_least(0),
    key(Socket, "max.connections.per.ip", Some("2147483647"), Int).at_least(0),
    key(Socket, "max.connections.per.ip.overrides", Some(""), Str),
    key(Log, "message.max.bytes", Some("1048588"), Int).at_least(0),
    key(Kraft, kraft::METADATA_LOG_DIR, None, Str),
    key(
        Kraft,
        kraft::METADATA_SNAPSHOT_RECORD_BYTES,
        Some("20971520"),
        Long,
    )
    .at_least(1),
    key(Topics, "min.insync.replicas", Some("1"), Int).at_least(1),
    key(Broker, kraft::NODE_ID, Some("1"), Int)
        .at_least(0)
        .synonyms(&[(kraft::BROKER_ID, 1)]),
    key(Unused, "num.io.threads", Some("8"), Int),
    key(Unused, "num.network.threads", Some("3"), Int),
    key(Topics, "num.partitions", Some("1"), Int).at_least(1),
    key(Log, "num.recovery.threads.per.data.dir", Some("2"), Int).at_least(1),
    key(Replica, "num.replica.fetchers", Some("1"), Int).at_least(1),
    key(Group, "offset.metadata.max.bytes", Some("4096"), Int).at_least(0),
    key(Group, "offsets.commit.timeout.ms", Some("5000"), Int).at_least(1),
    key(
        Group,
        "offsets.retention.check.interval.ms",
        Some("600000"),
        Long,
    )
    .at_least(1),
    key(Group, "offsets.retention.minutes", Some("10080"), Int).at_least(1),
    key(Group, "offsets.topic.num.partitions", Some("50"), Int).at_least(1),
    key(Group, "offsets.topic.replication.factor", Some("3"), Int).at_least(1),
    key(Group, "offsets.topic.segment.bytes", Some("104857600"), Int).at_least(1),
    key(Kraft, kraft::PROCESS_ROLES, None, List),
    key(Log, "producer.id.expiration.ms", Some("86400000"), Long).at_least(1),
    key(
        Replica,
        "replica.alter.log.dirs.io.max.bytes.per.second",
        Some("9223372036854775807"),
        Long,
    )
    .at_least(1),
    key(Replica, "replica.fetch.backoff.ms", Some("1000"), Int).at_least(0),
    key(Replica, "replica.fetch.max.bytes", Some("1048576"), Int).at_least(0),
    key(Replica, "replica.fetch.min.bytes", Some("1"), Int).at_least(1),
    key(
        Replica,
        "replica.fetch.response.max.bytes",
        Some("10485760"),
        Int,
    )
    .at_least(0),
    key(Replica, "replica.fetch.wait.max.ms", Some("500"), Int).at_least(0),
    key(
        Unused,
        "replica.high.watermark.checkpoint.interval.ms",
        Some("5000"),
        Long,
    ),
    key(Replica, "replica.lag.time.max.ms", Some("30000"), Long).at_least(1),
    key(Replica, "replica.selector.class", None, Str),
    key(Replica, "replica.socket.timeout.ms", Some("30000"), Int).at_least(1),
    key(Replica, "replication.quota.window.num", Some("11"), Int).at_least(1),
    key(
        Replica,
        "replication.quota.window.size.seconds",
        Some("1"),
        Int,
    )
    .at_least(1),
    key(
        Unused,
        "share.coordinator.state.topic.min.isr",
        Some("2"),
        Int,
    ),
    key(
        Unused,
        "share.coordinator.state.topic.replication.factor",
        Some("3"),
        Int,
    ),
    key(Unused, "socket.receive.buffer.bytes", Some("102400"), Int),
    key(Socket, "socket.request.max.bytes", Some("104857600"), Int).at_least(1),
    key(Unused, "socket.send.buffer.bytes", Some("102400"), Int),
    key(
        Transactions,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        Some("10000"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transaction.max.timeout.ms",
        Some("900000"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transaction.partition.verification.enable",
        Some("true"),
        Bool,
    ),
    key(
        Transactions,
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        Some("3600000"),
        Int,
    )
    .at_least(1),
    key(
        Unused,
        "transaction.state.log.load.buffer.size",
        Some("5242880"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transaction.state.log.min.isr",
        Some("2"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transaction.state.log.num.partitions",
        Some("50"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transaction.state.log.replication.factor",
        Some("3"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transaction.state.log.segment.bytes",
        Some("104857600"),
        Int,
    )
    .at_least(1),
    key(
        Transactions,
        "transactional.id.expiration.ms",
        Some("604800000"),
        Int,
    )
    .at_least(1),
    key(
        Kraft,
        kraft::UNCLEAN_LEADER_ELECTION_ENABLE,
        Some("false"),
        Bool,
    ),
    key(
        Elections,
        "unclean.leader.election.interval.ms",
        Some("300000"),
        Long,
    )
    .at_least(1),
];

pub fn broker_config_def(name: &str) -> Option<&'static BrokerConfigDef> {
    BROKER_CONFIG_DEFS.iter().find(|d| d.name == name)
}

/// Reads broker keys from raw properties through the table: a key's value is the one written,
/// else its default; typed getters apply the row's check, and every error names the key.
pub(crate) struct Reader<'a> {
    pub raw: &'a RawConfig,
}

impl<'a> Reader<'a> {
    pub fn value(&self, key: &str) -> Option<&'a str> {
        self.raw
            .get(key)
            .or_else(|| broker_config_def(key).and_then(|d| d.default))
    }

    pub fn invalid(&self, key: &str, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_owned(),
            value: self.raw.get(key).unwrap_or_default().to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// The value of a Long key, type-checked only.
    pub fn long(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.invalid(key, "not a 64-bit integer")),
        }
    }

    /// The value of an Int key, type-checked only.
    pub fn int(&self, key: &str) -> Result<Option<i32>, ConfigError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<i32>()
                .map(Some)
                .map_err(|_| self.invalid(key, "not a 32-bit integer")),
        }
    }

    fn checked(&self, key: &str, v: i64) -> Result<i64, ConfigError> {
        match broker_config_def(key).map_or(Check::Any, |d| d.check) {
            Check::AtLeast(min) | Check::Between(min, _) if v < min => {
                Err(self.invalid(key, &format!("must be at least {min}")))
            }
            Check::Between(min, max) if v > max => {
                Err(self.invalid(key, &format!("must be between {min} and {max}")))
            }
            _ => Ok(v),
        }
    }

    /// An Int key, checked; `None` only for a key without default that is not set.
    pub fn opt_i32(&self, key: &str) -> Result<Option<i32>, ConfigError> {
        self.int(key)?
            .map(|v| self.checked(key, i64::from(v)).map(|v| v as i32))
            .transpose()
    }

    /// A Long key, checked; `None` only for a key without default that is not set.
    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        self.long(key)?.map(|v| self.checked(key, v)).transpose()
    }

    /// The default a Long key's row gives it.
    pub fn default_i64(&self, key: &str) -> Result<i64, ConfigError> {
        broker_config_def(key)
            .and_then(|d| d.default)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| self.invalid(key, "no numeric default"))
    }

    /// An Int key with a default, checked.
    pub fn i32(&self, key: &str) -> Result<i32, ConfigError> {
        self.opt_i32(key)?
            .ok_or_else(|| self.invalid(key, "missing"))
    }

    /// A Long key with a default, checked.
    pub fn i64(&self, key: &str) -> Result<i64, ConfigError> {
        self.opt_i64(key)?
            .ok_or_else(|| self.invalid(key, "missing"))
    }

    /// A Double key with a default, checked against its row's bounds as a real number.
    pub fn f64(&self, key: &str) -> Result<f64, ConfigError> {
        let v = self
            .value(key)
            .ok_or_else(|| self.invalid(key, "missing"))?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| !v.is_nan())
            .ok_or_else(|| self.invalid(key, "not a number"))?;
        match broker_config_def(key).map_or(Check::Any, |d| d.check) {
            Check::AtLeast(min) | Check::Between(min, _) if v < min as f64 => {
                Err(self.invalid(key, &format!("must be at least {min}")))
            }
            Check::Between(min, max) if v > max as f64 => {
                Err(self.invalid(key, &format!("must be between {min} and {max}")))
            }
            _ => Ok(v),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, ConfigError> {
        match self.value(key).map(|v| v.to_ascii_lowercase()) {
            Some(v) if v == "true" => Ok(true),
            Some(v) if v == "false" => Ok(false),
            _ => Err(self.invalid(key, "must be true or false")),
        }
    }

    /// A key whose row lists the values it may take.
    pub fn one_of(&self, key: &str) -> Result<&str, ConfigError> {
        let allowed = match broker_config_def(key).map(|d| d.check) {
            Some(Check::OneOf(values)) => values,
            _ => &[],
        };
        match self.value(key) {
            Some(v) if allowed.contains(&v) => Ok(v),
            _ => Err(self.invalid(key, &format!("must be {}", allowed.join(" or ")))),
        }
    }

    /// A number set by a key or one of its synonyms, in the key's units: the first of them (in
    /// the row's precedence order) that is written, else the first that has a default.
    pub fn with_synonyms(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        let synonyms = broker_config_def(key).map_or(&[][..], |d| d.synonyms);
        let chain = || std::iter::once((key, 1)).chain(synonyms.iter().copied());
        let chosen = chain()
            .find(|(name, _)| self.raw.get(name).is_some())
            .or_else(|| chain().find(|(name, _)| self.value(name).is_some()));
        let Some((name, factor)) = chosen else {
            return Ok(None);
        };
        let value = match broker_config_def(name).map(|d| d.kind) {
            Some(Int) => self.opt_i32(name)?.map(i64::from),
            _ => self.opt_i64(name)?,
        };
        Ok(value.map(|v| v * factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every default in the table passes its own row's kind and check, and every synonym is a
    /// row of the table: a default that its own validation refuses would stop every startup.
    #[test]
    fn every_default_passes_its_row_and_every_synonym_is_a_row() {
        let raw = RawConfig::default();
        let r = Reader { raw: &raw };
        for d in BROKER_CONFIG_DEFS {
            if d.default.is_some() {
                match (d.kind, d.check) {
                    (_, Check::OneOf(_)) => drop(r.one_of(d.name).unwrap()),
                    (Int, _) => drop(r.i32(d.name).unwrap()),
                    (Long, _) => drop(r.i64(d.name).unwrap()),
                    (Bool, _) => drop(r.bool(d.name).unwrap()),
                    (Double, _) => drop(r.f64(d.name).unwrap()),
                    _ => {}
                }
            }
            for (synonym, factor) in d.synonyms {
                assert!(broker_config_def(synonym).is_some(), "{synonym}");
                assert!(*factor >= 1, "{synonym}");
            }
        }
    }

    #[test]
    fn a_value_outside_its_rows_check_names_the_key() {
        let mut raw = RawConfig::default();
        raw.set("leader.imbalance.per.broker.percentage", "101");
        raw.set("log.segment.bytes", "13");
        raw.set("log.message.timestamp.type", "Now");
        let r = Reader { raw: &raw };
        let err = r.i32("leader.imbalance.per.broker.percentage").unwrap_err();
        assert!(
            err.to_string().contains("must be between 0 and 100"),
            "{err}"
        );
        let err = r.i32("log.segment.bytes").unwrap_err().to_string();
        assert!(
            err.contains("`log.segment.bytes`") && err.contains("at least 14"),
            "{err}"
        );
        let err = r.one_of("log.message.timestamp.type").unwrap_err();
        assert!(
            err.to_string().contains("CreateTime or LogAppendTime"),
            "{err}"
        );
    }
}
