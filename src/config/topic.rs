//! Topic-level configuration: the keys a topic may override, the broker key each falls back to,
//! value validation, and the effective [`LogConfig`] of a topic.
//!
//! Used by CreateTopics, IncrementalAlterConfigs and DescribeConfigs (validation, synonyms,
//! sources) and by the replica layer (effective log config). Pure: no I/O, no state.

use std::collections::BTreeMap;

use kafkaiq_storage::{LogConfig, TimestampType};

use super::BrokerConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicConfigKind {
    Long {
        min: i64,
    },
    Int {
        min: i64,
    },
    /// An int in `min..=max`, or exactly `or` (e.g. gzip's -1 for "the codec's default").
    IntRange {
        min: i64,
        max: i64,
        or: Option<i64>,
    },
    Bool,
    Ratio,
    OneOf(&'static [&'static str]),
    ListOf(&'static [&'static str]),
    /// `leader/follower.replication.throttled.replicas`: empty, `*`, or `partition:broker,...`.
    ThrottledReplicas,
}

impl TopicConfigKind {
    /// Kafka's LIST-typed keys, which IncrementalAlterConfigs may APPEND to and SUBTRACT from.
    pub fn is_list(self) -> bool {
        matches!(self, ListOf(_) | ThrottledReplicas)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TopicConfigDef {
    pub name: &'static str,
    /// Broker keys this topic key falls back to, in precedence order (Kafka's synonyms).
    pub broker_synonyms: &'static [&'static str],
    /// Kafka's default when no broker key is set either.
    pub default: &'static str,
    pub kind: TopicConfigKind,
}

use TopicConfigKind::*;

const fn d(
    name: &'static str,
    broker_synonyms: &'static [&'static str],
    default: &'static str,
    kind: TopicConfigKind,
) -> TopicConfigDef {
    TopicConfigDef {
        name,
        broker_synonyms,
        default,
        kind,
    }
}

const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

/// Kafka's topic configs (4.x), sorted by name.
pub const TOPIC_CONFIG_DEFS: &[TopicConfigDef] = &[
    d(
        "cleanup.policy",
        &["log.cleanup.policy"],
        "delete",
        ListOf(&["delete", "compact"]),
    ),
    d(
        "compression.gzip.level",
        &["compression.gzip.level"],
        "-1",
        IntRange {
            min: 1,
            max: 9,
            or: Some(-1),
        },
    ),
    d(
        "compression.lz4.level",
        &["compression.lz4.level"],
        "9",
        IntRange {
            min: 1,
            max: 17,
            or: None,
        },
    ),
    d(
        "compression.type",
        &["compression.type"],
        "producer",
        OneOf(COMPRESSION_TYPES),
    ),
    d(
        "compression.zstd.level",
        &["compression.zstd.level"],
        "3",
        IntRange {
            min: -131072,
            max: 22,
            or: None,
        },
    ),
    d(
        "delete.retention.ms",
        &["log.cleaner.delete.retention.ms"],
        "86400000",
        Long { min: 0 },
    ),
    d(
        "file.delete.delay.ms",
        &["log.segment.delete.delay.ms"],
        "60000",
        Long { min: 0 },
    ),
    d(
        "flush.messages",
        &["log.flush.interval.messages"],
        "9223372036854775807",
        Long { min: 1 },
    ),
    d(
        "flush.ms",
        &["log.flush.interval.ms"],
        "9223372036854775807",
        Long { min: 0 },
    ),
    d(
        "follower.replication.throttled.replicas",
        &[],
        "",
        ThrottledReplicas,
    ),
    d(
        "index.interval.bytes",
        &["log.index.interval.bytes"],
        "4096",
        Int { min: 0 },
    ),
    d(
        "leader.replication.throttled.replicas",
        &[],
        "",
        ThrottledReplicas,
    ),
    d(
        "local.retention.bytes",
        &["log.local.retention.bytes"],
        "-2",
        Long { min: -2 },
    ),
    d(
        "local.retention.ms",
        &["log.local.retention.ms"],
        "-2",
        Long { min: -2 },
    ),
    d(
        "max.compaction.lag.ms",
        &["log.cleaner.max.compaction.lag.ms"],
        "9223372036854775807",
        Long { min: 1 },
    ),
    d(
        "max.message.bytes",
        &["message.max.bytes"],
        "1048588",
        Int { min: 0 },
    ),
    d(
        "message.timestamp.after.max.ms",
        &["log.message.timestamp.after.max.ms"],
        "3600000",
        Long { min: 0 },
    ),
    d(
        "message.timestamp.before.max.ms",
        &["log.message.timestamp.before.max.ms"],
        "9223372036854775807",
        Long { min: 0 },
    ),
    d(
        "message.timestamp.type",
        &["log.message.timestamp.type"],
        "CreateTime",
        OneOf(&["CreateTime", "LogAppendTime"]),
    ),
    d(
        "min.cleanable.dirty.ratio",
        &["log.cleaner.min.cleanable.ratio"],
        "0.5",
        Ratio,
    ),
    d(
        "min.compaction.lag.ms",
        &["log.cleaner.min.compaction.lag.ms"],
        "0",
        Long { min: 0 },
    ),
    d(
        "min.insync.replicas",
        &["min.insync.replicas"],
        "1",
        Int { min: 1 },
    ),
    d("preallocate", &["log.preallocate"], "false", Bool),
    d(
        "retention.bytes",
        &["log.retention.bytes"],
        "-1",
        Long { min: -1 },
    ),
    d("remote.log.copy.disable", &[], "false", Bool),
    d("remote.log.delete.on.disable", &[], "false", Bool),
    d("remote.storage.enable", &[], "false", Bool),
    d(
        "retention.ms",
        &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        "604800000",
        Long { min: -1 },
    ),
    d(
        "segment.bytes",
        &["log.segment.bytes"],
        "1073741824",
        Int { min: 14 },
    ),
    d(
        "segment.index.bytes",
        &["log.index.size.max.bytes"],
        "10485760",
        Int { min: 4 },
    ),
    d(
        "segment.jitter.ms",
        &["log.roll.jitter.ms", "log.roll.jitter.hours"],
        "0",
        Long { min: 0 },
    ),
    d(
        "segment.ms",
        &["log.roll.ms", "log.roll.hours"],
        "604800000",
        Long { min: 1 },
    ),
    d(
        "unclean.leader.election.enable",
        &["unclean.leader.election.enable"],
        "false",
        Bool,
    ),
];

pub fn topic_config_def(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIG_DEFS.iter().find(|d| d.name == name)
}

/// Why a topic config value was refused; the handler turns it into INVALID_CONFIG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicConfigError {
    #[error("Unknown topic config name: {0}")]
    Unknown(String),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
}

/// Checks one value against its key's kind.
pub fn validate(name: &str, value: &str) -> Result<(), TopicConfigError> {
    let def = topic_config_def(name).ok_or_else(|| TopicConfigError::Unknown(name.to_owned()))?;
    let invalid = |reason: String| TopicConfigError::Invalid {
        name: name.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if name == "remote.storage.enable" && value.trim().eq_ignore_ascii_case("true") {
        // Kafka refuses this unless tiered storage is enabled; this broker has none.
        return Err(invalid(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured \
             with remote log storage."
                .into(),
        ));
    }
    match def.kind {
        Long { min } | Int { min } => {
            let v: i64 = value
                .trim()
                .parse()
                .map_err(|_| invalid("Not a number".into()))?;
            if matches!(def.kind, Int { .. }) && i32::try_from(v).is_err() {
                return Err(invalid("Value out of range for an int".into()));
            }
            if v < min {
                return Err(invalid(format!("Value must be at least {min}")));
            }
        }
        IntRange { min, max, or } => {
            let v: i64 = value
                .trim()
                .parse()
                .map_err(|_| invalid("Not a number".into()))?;
            if !(min..=max).contains(&v) && Some(v) != or {
                let also = or.map(|o| format!(" or {o}")).unwrap_or_default();
                return Err(invalid(format!("Value must be in [{min}, {max}]{also}")));
            }
        }
        ThrottledReplicas => {
            let value = value.trim();
            let well_formed = value.is_empty()
                || value == "*"
                || value.split(',').map(str::trim).all(|pair| {
                    pair.split_once(':').is_some_and(|(p, b)| {
                        p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                    })
                });
            if !well_formed {
                return Err(invalid(
                    "must be empty, * or a list of partitionId:brokerId".into(),
                ));
            }
        }
        Bool => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return Err(invalid("Expected value to be either true or false".into()));
            }
        }
        Ratio => {
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| invalid("Not a number".into()))?;
            if !(0.0..=1.0).contains(&v) {
                return Err(invalid("Value must be between 0 and 1".into()));
            }
        }
        OneOf(options) => {
            if !options.contains(&value) {
                return Err(invalid(format!(
                    "String must be one of: {}",
                    options.join(", ")
                )));
            }
        }
        ListOf(options) => {
            for item in value.split(',').map(str::trim) {
                if !options.contains(&item) {
                    return Err(invalid(format!(
                        "Invalid value {item}; must be one of: {}",
                        options.join(", ")
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Where a topic's effective value came from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    StaticBroker = 4,
    Default = 5,
}

/// The effective value of one topic key: override, else the first broker synonym that is set,
/// else the broker's derived default.
pub fn effective_value(
    def: &TopicConfigDef,
    overrides: &BTreeMap<String, String>,
    broker: &BrokerConfig,
) -> (String, ConfigSource) {
    if let Some(v) = overrides.get(def.name) {
        return (v.clone(), ConfigSource::DynamicTopic);
    }
    for synonym in def.broker_synonyms {
        if broker.is_set(synonym) {
            let v = broker_synonym_in_topic_units(def.name, synonym, broker);
            return (v, ConfigSource::StaticBroker);
        }
    }
    (def.default.to_owned(), ConfigSource::Default)
}

/// Broker synonyms in hours/minutes are converted to the topic key's milliseconds.
fn broker_synonym_in_topic_units(topic_key: &str, synonym: &str, broker: &BrokerConfig) -> String {
    match (topic_key, synonym) {
        ("retention.ms", _) => broker.log.retention_ms.to_string(),
        ("segment.ms", _) => broker.log.roll_ms.to_string(),
        _ => broker.value_of(synonym).unwrap_or_default(),
    }
}

/// The [`LogConfig`] a topic's log runs with.
pub fn log_config(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> LogConfig {
    let mut c = broker.default_log_config();
    let long = |k: &str| overrides.get(k).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(v) = long("segment.bytes") {
        c.segment_bytes = v as u32;
    }
    if let Some(v) = long("segment.ms") {
        c.segment_ms = v;
    }
    if let Some(v) = long("segment.index.bytes") {
        c.segment_index_bytes = v as u32;
    }
    if let Some(v) = long("index.interval.bytes") {
        c.index_interval_bytes = v as u32;
    }
    if let Some(v) = long("max.message.bytes") {
        c.max_message_bytes = v as u32;
    }
    if let Some(v) = long("flush.messages") {
        c.flush_messages = v;
    }
    if let Some(v) = long("flush.ms") {
        c.flush_ms = v;
    }
    let broker_long = |k: &str| {
        broker
            .value_of(k)
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    if let Some(v) = long("message.timestamp.before.max.ms")
        .or_else(|| broker_long("log.message.timestamp.before.max.ms"))
    {
        c.message_timestamp_before_max_ms = v;
    }
    if let Some(v) = long("message.timestamp.after.max.ms")
        .or_else(|| broker_long("log.message.timestamp.after.max.ms"))
    {
        c.message_timestamp_after_max_ms = v;
    }
    match overrides.get("message.timestamp.type").map(String::as_str) {
        Some("LogAppendTime") => c.message_timestamp_type = TimestampType::LogAppendTime,
        Some("CreateTime") => c.message_timestamp_type = TimestampType::CreateTime,
        _ => {}
    }
    // The cleaner's keys: the topic's override, else the broker's `log.cleaner.*` key, else
    // Kafka's default (values were validated when set).
    let effective =
        |k: &str| topic_config_def(k).map(|def| effective_value(def, overrides, broker).0);
    let number = |k: &str| effective(k).and_then(|v| v.trim().parse::<f64>().ok());
    let whole = |k: &str| effective(k).and_then(|v| v.trim().parse::<i64>().ok());
    if let Some(v) = number("min.cleanable.dirty.ratio") {
        c.min_cleanable_dirty_ratio = v;
    }
    if let Some(v) = whole("min.compaction.lag.ms") {
        c.min_compaction_lag_ms = v;
    }
    if let Some(v) = whole("max.compaction.lag.ms") {
        c.max_compaction_lag_ms = v;
    }
    if let Some(v) = whole("delete.retention.ms") {
        c.delete_retention_ms = v;
    }
    let settings = TopicSettings::resolve(overrides, broker);
    c.compact = settings.cleanup_compacts;
    c.retention_ms = settings.retention_ms;
    c.retention_bytes = settings.retention_bytes;
    c
}

/// The effective values of a topic that the broker acts on outside the log's own settings: its
/// override, else the broker's key, else the default. Every reader of a topic's
/// `min.insync.replicas`, retention or `cleanup.policy` takes them from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicSettings {
    pub min_insync_replicas: i32,
    /// The effective `cleanup.policy` includes `delete`: Kafka's `LogConfig.delete`, which
    /// gates retention and DeleteRecords (POLICY_VIOLATION otherwise).
    pub cleanup_deletes: bool,
    /// The effective `cleanup.policy` includes `compact`: Kafka's `LogConfig.compact`, under
    /// which a produce of a record without a key is refused (INVALID_RECORD).
    pub cleanup_compacts: bool,
    /// `retention.ms`; -1 (keep) when the policy does not include `delete`.
    pub retention_ms: i64,
    /// `retention.bytes`; -1 (keep) when the policy does not include `delete`.
    pub retention_bytes: i64,
}

impl TopicSettings {
    /// The settings of a topic with these overrides on this broker.
    pub fn resolve(overrides: &BTreeMap<String, String>, broker: &BrokerConfig) -> TopicSettings {
        let long = |k: &str| overrides.get(k).and_then(|v| v.trim().parse::<i64>().ok());
        let policy = |name: &str| {
            topic_config_def("cleanup.policy").map(|def| {
                effective_value(def, overrides, broker)
                    .0
                    .split(',')
                    .any(|p| p.trim().eq_ignore_ascii_case(name))
            })
        };
        let cleanup_deletes = policy("delete").unwrap_or(true);
        // Kafka applies time and size retention only to logs whose policy includes `delete`; a
        // compact-only log (such as `__consumer_offsets`) keeps its segments.
        let (retention_ms, retention_bytes) = if cleanup_deletes {
            (
                long("retention.ms").unwrap_or(broker.log.retention_ms),
                long("retention.bytes").unwrap_or(broker.log.retention_bytes),
            )
        } else {
            (-1, -1)
        };
        TopicSettings {
            min_insync_replicas: overrides
                .get("min.insync.replicas")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(broker.topics.min_insync_replicas),
            cleanup_deletes,
            cleanup_compacts: policy("compact").unwrap_or(false),
            retention_ms,
            retention_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("retention.ms", "-1", true),
            ("retention.ms", "-2", false),
            ("retention.ms", "abc", false),
            ("segment.bytes", "13", false),
            ("segment.bytes", "1048576", true),
            ("segment.bytes", "99999999999", false),
            ("cleanup.policy", "compact,delete", true),
            ("cleanup.policy", "shred", false),
            ("message.timestamp.type", "LogAppendTime", true),
            ("message.timestamp.type", "Whenever", false),
            ("min.cleanable.dirty.ratio", "0.3", true),
            ("min.cleanable.dirty.ratio", "3", false),
            ("preallocate", "TRUE", true),
            ("preallocate", "yes", false),
            ("no.such.config", "1", false),
            ("compression.gzip.level", "-1", true),
            ("compression.gzip.level", "0", false),
            ("compression.gzip.level", "9", true),
            ("compression.gzip.level", "10", false),
            ("compression.zstd.level", "-5", true),
            ("compression.lz4.level", "18", false),
            ("local.retention.ms", "-2", true),
            ("local.retention.ms", "-3", false),
            ("leader.replication.throttled.replicas", "", true),
            ("leader.replication.throttled.replicas", "*", true),
            ("follower.replication.throttled.replicas", "0:1, 1:2", true),
            ("follower.replication.throttled.replicas", "0-1", false),
            ("remote.storage.enable", "false", true),
            ("remote.storage.enable", "true", false),
        ];
        for (name, value, ok) in cases {
            assert_eq!(validate(name, value).is_ok(), *ok, "{name}={value}");
        }
    }

    #[test]
    fn topic_settings_take_the_override_else_the_broker_key() {
        let broker = BrokerConfig::from_raw({
            let mut r = crate::config::RawConfig::default();
            r.set("min.insync.replicas", "2");
            r.set("log.cleanup.policy", "compact");
            r.set("log.retention.bytes", "1000");
            r
        })
        .unwrap()
        .config;
        let mut overrides = BTreeMap::new();
        let s = TopicSettings::resolve(&overrides, &broker);
        assert_eq!(s.min_insync_replicas, 2);
        assert!(s.cleanup_compacts && !s.cleanup_deletes);
        assert_eq!((s.retention_ms, s.retention_bytes), (-1, -1));
        overrides.insert("min.insync.replicas".to_owned(), "3".to_owned());
        overrides.insert("cleanup.policy".to_owned(), "delete".to_owned());
        let s = TopicSettings::resolve(&overrides, &broker);
        assert_eq!(s.min_insync_replicas, 3);
        assert!(!s.cleanup_compacts && s.cleanup_deletes);
        assert_eq!(s.retention_ms, 168 * 3_600_000);
        assert_eq!(s.retention_bytes, 1000);
    }

    #[test]
    fn effective_value_prefers_override_then_broker_then_default() {
        let broker = BrokerConfig::from_raw({
            let mut r = crate::config::RawConfig::default();
            r.set("log.retention.hours", "1");
            r
        })
        .unwrap()
        .config;
        let def = topic_config_def("retention.ms").unwrap();
        let mut overrides = BTreeMap::new();
        assert_eq!(
            effective_value(def, &overrides, &broker),
            ("3600000".to_owned(), ConfigSource::StaticBroker)
        );
        overrides.insert("retention.ms".to_owned(), "5".to_owned());
        assert_eq!(
            effective_value(def, &overrides, &broker),
            ("5".to_owned(), ConfigSource::DynamicTopic)
        );
        let def = topic_config_def("segment.bytes").unwrap();
        assert_eq!(
            effective_value(def, &BTreeMap::new(), &broker),
            ("1073741824".to_owned(), ConfigSource::Default)
        );
        assert_eq!(log_config(&overrides, &broker).retention_ms, 5);
        overrides.insert("cleanup.policy".to_owned(), "compact".to_owned());
        assert!(!TopicSettings::resolve(&overrides, &broker).cleanup_deletes);
        assert_eq!(log_config(&overrides, &broker).retention_ms, -1);
        assert_eq!(log_config(&overrides, &broker).retention_bytes, -1);
        overrides.insert("cleanup.policy".to_owned(), "compact, delete".to_owned());
        assert!(TopicSettings::resolve(&overrides, &broker).cleanup_deletes);
        assert!(log_config(&overrides, &broker).compact);
        overrides.insert("cleanup.policy".to_owned(), "delete".to_owned());
        assert!(!log_config(&overrides, &broker).compact);
        overrides.remove("cleanup.policy");
        assert!(!log_config(&overrides, &broker).compact);
        assert_eq!(log_config(&overrides, &broker).retention_ms, 5);
    }
}
