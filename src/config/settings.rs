//! The settings each part of the broker runs with, one struct per part, each filled from the
//! key table ([`super::keys`]) by its own `read`. A key's row names the struct it fills
//! ([`super::Part`]); the struct documents the meaning, the row the default and the bounds.

use kafkaiq_storage::TimestampType;

use super::keys::{self, Reader};
use super::{
    connections_per_ip_config, leader_imbalance_check_interval_ms, replica_fetcher_config,
    ConfigError, ConnectionsPerIp, QuotaWindow, ReplicaFetcherConfig, ReplicaSelector,
};
use crate::limits;

/// The log defaults a topic without overrides gets, and how logs are loaded
/// (`log.*`, `message.max.bytes`, `producer.id.expiration.ms`,
/// `num.recovery.threads.per.data.dir`).
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// `message.max.bytes`
    pub message_max_bytes: u32,
    /// `log.segment.bytes`
    pub segment_bytes: u32,
    /// `log.roll.ms`, else `log.roll.hours`.
    pub roll_ms: i64,
    /// `log.retention.ms`, else `log.retention.minutes`, else `log.retention.hours`.
    pub retention_ms: i64,
    /// `log.retention.bytes`
    pub retention_bytes: i64,
    /// `log.flush.interval.messages`
    pub flush_interval_messages: i64,
    /// `log.flush.interval.ms`; Kafka's null (flushed only by the OS) is `i64::MAX`.
    pub flush_interval_ms: i64,
    /// `log.index.interval.bytes`
    pub index_interval_bytes: u32,
    /// `log.index.size.max.bytes`
    pub index_size_max_bytes: u32,
    /// `log.message.timestamp.type`
    pub message_timestamp_type: TimestampType,
    /// `producer.id.expiration.ms`: how long a producer's state outlives its last batch.
    pub producer_id_expiration_ms: i64,
    /// `log.retention.check.interval.ms`: how often retention runs; a value not above 0 runs it
    /// at the default interval.
    pub retention_check_interval_ms: i64,
    /// `num.recovery.threads.per.data.dir`: threads per log dir that load (and recover) the
    /// logs at startup.
    pub num_recovery_threads_per_data_dir: usize,
}

impl LogSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<LogSettings, ConfigError> {
        const RETENTION_CHECK: &str = "log.retention.check.interval.ms";
        let retention_ms = r.with_synonyms("log.retention.ms")?.unwrap_or_default();
        if retention_ms < -1 {
            return Err(r.invalid("log.retention.ms", "must be -1 or at least 0"));
        }
        let roll_ms = r.with_synonyms("log.roll.ms")?.unwrap_or_default();
        let message_max_bytes = r.i32("message.max.bytes")? as u32;
        let segment_bytes = r.i32("log.segment.bytes")? as u32;
        let message_timestamp_type = match r.one_of("log.message.timestamp.type")? {
            "LogAppendTime" => TimestampType::LogAppendTime,
            _ => TimestampType::CreateTime,
        };
        Ok(LogSettings {
            message_max_bytes,
            segment_bytes,
            roll_ms,
            retention_ms,
            retention_bytes: r.i64("log.retention.bytes")?,
            flush_interval_messages: r.i64("log.flush.interval.messages")?,
            flush_interval_ms: r.opt_i64("log.flush.interval.ms")?.unwrap_or(i64::MAX),
            index_interval_bytes: r.i32("log.index.interval.bytes")? as u32,
            index_size_max_bytes: r.i32("log.index.size.max.bytes")? as u32,
            message_timestamp_type,
            producer_id_expiration_ms: r.i64("producer.id.expiration.ms")?,
            retention_check_interval_ms: Some(r.i64(RETENTION_CHECK)?)
                .filter(|v| *v > 0)
                .map_or_else(|| r.default_i64(RETENTION_CHECK), Ok)?,
            num_recovery_threads_per_data_dir: r.i32("num.recovery.threads.per.data.dir")? as usize,
        })
    }
}

/// How topics are created and deleted, and the broker's `min.insync.replicas` (a topic's own
/// value is resolved by [`super::topic::TopicSettings`]).
#[derive(Debug, Clone)]
pub struct TopicDefaults {
    /// `num.partitions`
    pub num_partitions: i32,
    /// `default.replication.factor`
    pub default_replication_factor: i16,
    /// `auto.create.topics.enable`
    pub auto_create_topics_enable: bool,
    /// `delete.topic.enable`
    pub delete_topic_enable: bool,
    /// `min.insync.replicas`
    pub min_insync_replicas: i32,
}

impl TopicDefaults {
    pub(crate) fn read(r: &Reader<'_>) -> Result<TopicDefaults, ConfigError> {
        let default_replication_factor = r.i32("default.replication.factor")?;
        Ok(TopicDefaults {
            num_partitions: r.i32("num.partitions")?,
            default_replication_factor: i16::try_from(default_replication_factor)
                .map_err(|_| r.invalid("default.replication.factor", "too large"))?,
            auto_create_topics_enable: r.bool("auto.create.topics.enable")?,
            delete_topic_enable: r.bool("delete.topic.enable")?,
            min_insync_replicas: r.i32("min.insync.replicas")?,
        })
    }
}

/// The client listener's connections and request frames.
#[derive(Debug, Clone)]
pub struct SocketSettings {
    /// `socket.request.max.bytes`
    pub request_max_bytes: usize,
    /// `max.connections`; when not written, [`limits::CONNECTIONS_MAX_DEFAULT`] rather than
    /// Kafka's `Integer.MAX_VALUE`.
    pub max_connections: usize,
    /// `max.connections.per.ip` and its overrides: connections one client address may hold
    /// open on one listener.
    pub connections_per_ip: ConnectionsPerIp,
    /// `connections.max.idle.ms`: a connection that moves no byte either way for this long is
    /// closed (a client that stops reading its answers included).
    pub connections_max_idle_ms: u64,
}

impl SocketSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<SocketSettings, ConfigError> {
        let request_max_bytes = r.i32("socket.request.max.bytes")? as usize;
        let max_connections_configured = r.i32("max.connections")? as usize;
        let max_connections = if r.raw.get("max.connections").is_some() {
            max_connections_configured
        } else {
            limits::CONNECTIONS_MAX_DEFAULT
        };
        Ok(SocketSettings {
            request_max_bytes,
            max_connections,
            connections_per_ip: connections_per_ip_config(r)?,
            connections_max_idle_ms: r.i64("connections.max.idle.ms")? as u64,
        })
    }
}

/// Replication: the ISR, the fetch answers, who serves reads, the replica fetcher and the
/// throttles.
#[derive(Debug, Clone)]
pub struct ReplicaSettings {
    /// `replica.lag.time.max.ms`
    pub lag_time_max_ms: i64,
    /// `fetch.max.bytes`: the most record bytes one Fetch answer carries, whatever the request
    /// asks (consumers and followers alike, as in Kafka).
    pub fetch_max_bytes: usize,
    /// `replica.selector.class`: who serves a consumer's fetch (KIP-392).
    pub selector: ReplicaSelector,
    /// `replica.alter.log.dirs.io.max.bytes.per.second`: how fast a replica moving to another
    /// log dir (AlterReplicaLogDirs) is copied, in bytes per second over all moves.
    pub alter_log_dirs_io_max_bytes_per_second: i64,
    /// `replication.quota.window.num` × `replication.quota.window.size.seconds`: the sampled
    /// windows the replication throttle rates are measured over (KIP-73).
    pub quota_window: QuotaWindow,
    /// The replica fetcher's keys (`num.replica.fetchers`, `replica.fetch.*`,
    /// `replica.socket.timeout.ms`).
    pub fetcher: ReplicaFetcherConfig,
}

impl ReplicaSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<ReplicaSettings, ConfigError> {
        let lag_time_max_ms = r.i64("replica.lag.time.max.ms")?;
        let fetcher = replica_fetcher_config(r, lag_time_max_ms)?;
        Ok(ReplicaSettings {
            lag_time_max_ms,
            fetch_max_bytes: r.i32("fetch.max.bytes")? as usize,
            selector: ReplicaSelector::parse(r.raw.get("replica.selector.class"))
                .map_err(|reason| r.invalid("replica.selector.class", reason))?,
            alter_log_dirs_io_max_bytes_per_second: r
                .i64("replica.alter.log.dirs.io.max.bytes.per.second")?,
            quota_window: QuotaWindow {
                samples: r.i32("replication.quota.window.num")? as usize,
                window_ms: i64::from(r.i32("replication.quota.window.size.seconds")?) * 1_000,
            },
            fetcher,
        })
    }
}

/// How the active controller moves leaderships on its own: preferred-leader rebalancing and
/// unclean elections.
#[derive(Debug, Clone)]
pub struct ElectionSettings {
    /// `auto.leader.rebalance.enable`
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.per.broker.percentage` (0–100)
    pub leader_imbalance_per_broker_percentage: i32,
    /// `leader.imbalance.check.interval.ms`, else `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_ms: i64,
    /// `unclean.leader.election.interval.ms`: how often the active controller looks for
    /// partitions without a leader whose topic allows unclean election (KAFKA-12670).
    pub unclean_leader_election_interval_ms: i64,
    /// `kafkaiq.leader.balancer`: `load` balances leadership by measured load; `count` (the
    /// default) is Kafka's preferred-leader behaviour and nothing else.
    pub leader_balancer: LeaderBalancer,
    /// `kafkaiq.leader.balancer.threshold` (a ratio to the mean, > 1)
    pub leader_balancer_threshold: f64,
    /// `kafkaiq.leader.balancer.min.dwell.ms`
    pub leader_balancer_min_dwell_ms: u64,
    /// `kafkaiq.leader.balancer.max.moves.per.interval`
    pub leader_balancer_max_moves_per_interval: usize,
    /// `kafkaiq.leader.balancer.min.measured.ms`
    pub leader_balancer_min_measured_ms: u64,
}

/// How leadership is balanced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderBalancer {
    /// By count: Kafka's preferred leaders.
    #[default]
    Count,
    /// By measured load (KafkaIQ's own).
    Load,
}

impl ElectionSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<ElectionSettings, ConfigError> {
        let leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms(r)?;
        Ok(ElectionSettings {
            auto_leader_rebalance_enable: r.bool("auto.leader.rebalance.enable")?,
            leader_imbalance_per_broker_percentage: r
                .i32("leader.imbalance.per.broker.percentage")?,
            leader_imbalance_check_interval_ms,
            unclean_leader_election_interval_ms: r.i64("unclean.leader.election.interval.ms")?,
            leader_balancer: match r.one_of(keys::LEADER_BALANCER)? {
                "load" => LeaderBalancer::Load,
                _ => LeaderBalancer::Count,
            },
            leader_balancer_threshold: {
                let t = r.f64(keys::LEADER_BALANCER_THRESHOLD)?;
                // 1 would call any deviation from the mean an imbalance.
                if t <= 1.0 {
                    return Err(
                        r.invalid(keys::LEADER_BALANCER_THRESHOLD, "must be greater than 1")
                    );
                }
                t
            },
            leader_balancer_min_dwell_ms: r.i64(keys::LEADER_BALANCER_MIN_DWELL_MS)? as u64,
            leader_balancer_max_moves_per_interval: r
                .i32(keys::LEADER_BALANCER_MAX_MOVES_PER_INTERVAL)?
                as usize,
            leader_balancer_min_measured_ms: r.i64(keys::LEADER_BALANCER_MIN_MEASURED_MS)? as u64,
        })
    }
}

/// The group coordinator and its `__consumer_offsets` topic (`group.*`, `offset*`).
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.max.size`
    pub max_size: usize,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes`, in milliseconds.
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`
    pub offsets_retention_check_interval_ms: u64,
    /// `offsets.topic.num.partitions`
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor`
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes`
    pub offsets_topic_segment_bytes: i32,
    /// `offsets.commit.timeout.ms`
    pub offsets_commit_timeout_ms: u64,
    /// `group.consumer.session.timeout.ms` (KIP-848 groups)
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub consumer_heartbeat_interval_ms: i32,
    /// `kafkaiq.group.consumer.reconciling.heartbeat.interval.ms`, at most the interval.
    pub consumer_reconciling_heartbeat_interval_ms: i32,
    /// `group.consumer.assignors`, as our names (`uniform`, `range`), the default first.
    pub consumer_assignors: Vec<String>,
    /// `group.consumer.max.size`
    pub consumer_max_size: usize,
    /// `group.coordinator.rebalance.protocols` includes `consumer`: ConsumerGroupHeartbeat is
    /// served and advertised.
    pub consumer_protocol_enabled: bool,
    /// `group.consumer.migration.policy`
    pub consumer_migration_policy: MigrationPolicy,
}

/// `group.consumer.migration.policy`: whether a classic group converts to a consumer group
/// when a member of the consumer protocol joins it (upgrade), and back when the last such
/// member leaves (downgrade). Kafka reads the value without regard to case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Disabled,
    Upgrade,
    Downgrade,
    Bidirectional,
}

impl MigrationPolicy {
    pub fn upgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional
        )
    }
    pub fn downgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional
        )
    }
}

fn migration_policy(r: &Reader<'_>) -> Result<MigrationPolicy, ConfigError> {
    const KEY: &str = "group.consumer.migration.policy";
    match r.value(KEY).map(str::to_ascii_lowercase).as_deref() {
        Some("disabled") => Ok(MigrationPolicy::Disabled),
        Some("upgrade") => Ok(MigrationPolicy::Upgrade),
        Some("downgrade") => Ok(MigrationPolicy::Downgrade),
        Some("bidirectional") => Ok(MigrationPolicy::Bidirectional),
        _ => Err(r.invalid(
            KEY,
            "must be disabled, upgrade, downgrade or bidirectional (any case)",
        )),
    }
}

impl GroupSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<GroupSettings, ConfigError> {
        let offsets_topic_replication_factor = r.i32("offsets.topic.replication.factor")?;
        Ok(GroupSettings {
            initial_rebalance_delay_ms: i64::from(r.i32("group.initial.rebalance.delay.ms")?),
            min_session_timeout_ms: r.i32("group.min.session.timeout.ms")?,
            max_session_timeout_ms: r.i32("group.max.session.timeout.ms")?,
            max_size: r.i32("group.max.size")? as usize,
            offset_metadata_max_bytes: r.i32("offset.metadata.max.bytes")? as usize,
            offsets_retention_ms: i64::from(r.i32("offsets.retention.minutes")?) * 60_000,
            offsets_retention_check_interval_ms: r.i64("offsets.retention.check.interval.ms")?
                as u64,
            offsets_topic_num_partitions: r.i32("offsets.topic.num.partitions")?,
            offsets_topic_replication_factor: i16::try_from(offsets_topic_replication_factor)
                .map_err(|_| r.invalid("offsets.topic.replication.factor", "too large"))?,
            offsets_commit_timeout_ms: r.i32("offsets.commit.timeout.ms")? as u64,
            offsets_topic_segment_bytes: r.i32("offsets.topic.segment.bytes")?,
            consumer_session_timeout_ms: bounded(
                r,
                "group.consumer.session.timeout.ms",
                "group.consumer.min.session.timeout.ms",
                "group.consumer.max.session.timeout.ms",
            )?,
            consumer_heartbeat_interval_ms: {
                let interval = bounded_or_default_within(
                    r,
                    "group.consumer.heartbeat.interval.ms",
                    "group.consumer.min.heartbeat.interval.ms",
                    "group.consumer.max.heartbeat.interval.ms",
                )?;
                if interval >= r.i32("group.consumer.session.timeout.ms")? {
                    return Err(r.invalid(
                        "group.consumer.heartbeat.interval.ms",
                        "must be less than group.consumer.session.timeout.ms",
                    ));
                }
                interval
            },
            consumer_reconciling_heartbeat_interval_ms: r
                .i32(keys::CONSUMER_RECONCILING_HEARTBEAT_INTERVAL_MS)?,
            consumer_assignors: consumer_assignors(r)?,
            consumer_max_size: r.i32("group.consumer.max.size")? as usize,
            consumer_protocol_enabled: rebalance_protocols(r)?,
            consumer_migration_policy: migration_policy(r)?,
        })
    }
}

/// `key` as [`bounded`] checks it when the file sets it; when it does not, the default moved
/// within the bounds. KafkaIQ's default for `group.consumer.heartbeat.interval.ms` is below
/// Kafka's `group.consumer.min.heartbeat.interval.ms` default, and a file written for Kafka may
/// set that bound without setting the interval.
fn bounded_or_default_within(
    r: &Reader<'_>,
    key: &str,
    min_key: &str,
    max_key: &str,
) -> Result<i32, ConfigError> {
    if r.raw.get(key).is_some() {
        return bounded(r, key, min_key, max_key);
    }
    let (min, max) = bounds(r, min_key, max_key)?;
    Ok(r.i32(key)?.clamp(min, max))
}

/// The values of `min_key` and `max_key`, the first not above the second.
fn bounds(r: &Reader<'_>, min_key: &str, max_key: &str) -> Result<(i32, i32), ConfigError> {
    let (min, max) = (r.i32(min_key)?, r.i32(max_key)?);
    if min > max {
        return Err(r.invalid(min_key, &format!("must be at most {max_key} ({max})")));
    }
    Ok((min, max))
}

/// `key`, which must lie within the values of `min_key` and `max_key` (Kafka's
/// `GroupCoordinatorConfig` checks, each error naming the key).
fn bounded(r: &Reader<'_>, key: &str, min_key: &str, max_key: &str) -> Result<i32, ConfigError> {
    let v = r.i32(key)?;
    let (min, max) = bounds(r, min_key, max_key)?;
    if v < min {
        return Err(r.invalid(key, &format!("must be at least {min_key} ({min})")));
    }
    if v > max {
        return Err(r.invalid(key, &format!("must be at most {max_key} ({max})")));
    }
    Ok(v)
}

/// The server-side assignor a `group.consumer.assignors` entry or a heartbeat's
/// `ServerAssignor` names: `uniform` or `range`, by name or by Kafka's class name.
pub fn consumer_assignor_name(name: &str) -> Option<&'static str> {
    match name.trim() {
        "uniform" | "org.apache.kafka.coordinator.group.assignor.UniformAssignor" => {
            Some("uniform")
        }
        "range" | "org.apache.kafka.coordinator.group.assignor.RangeAssignor" => Some("range"),
        _ => None,
    }
}

fn consumer_assignors(r: &Reader<'_>) -> Result<Vec<String>, ConfigError> {
    const KEY: &str = "group.consumer.assignors";
    let mut out: Vec<String> = Vec::new();
    for name in r.value(KEY).unwrap_or_default().split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        let Some(canonical) = consumer_assignor_name(name) else {
            return Err(r.invalid(
                KEY,
                &format!("unknown assignor {name}: the assignors are uniform (org.apache.kafka.coordinator.group.assignor.UniformAssignor) and range (org.apache.kafka.coordinator.group.assignor.RangeAssignor)"),
            ));
        };
        if !out.iter().any(|a| a == canonical) {
            out.push(canonical.to_owned());
        }
    }
    if out.is_empty() {
        return Err(r.invalid(KEY, "must name at least one assignor"));
    }
    Ok(out)
}

fn rebalance_protocols(r: &Reader<'_>) -> Result<bool, ConfigError> {
    const KEY: &str = "group.coordinator.rebalance.protocols";
    let mut consumer = false;
    let mut classic = false;
    for p in r.value(KEY).unwrap_or_default().split(',').map(str::trim) {
        match p.to_ascii_lowercase().as_str() {
            "classic" => classic = true,
            "consumer" => consumer = true,
            // Kafka's other group types; their APIs are not served here, as when they are not
            // enabled in Kafka.
            "share" | "streams" | "" => {}
            other => {
                return Err(r.invalid(
                    KEY,
                    &format!(
                        "unknown protocol {other}: must list classic, consumer, share or streams"
                    ),
                ))
            }
        }
    }
    if !classic {
        return Err(r.invalid(KEY, "must include classic"));
    }
    Ok(consumer)
}

/// The transaction coordinator (Kafka's `TransactionStateManagerConfig` and
/// `TransactionLogConfig`): its topic and its timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSettings {
    /// `transaction.state.log.num.partitions`
    pub log_num_partitions: i32,
    /// `transaction.state.log.replication.factor`
    pub log_replication_factor: i16,
    /// `transaction.state.log.min.isr`
    pub log_min_isr: i32,
    /// `transaction.state.log.segment.bytes`
    pub log_segment_bytes: i32,
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_timed_out_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub remove_expired_interval_ms: u64,
    /// `transaction.partition.verification.enable`
    pub partition_verification: bool,
}

impl TransactionSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<TransactionSettings, ConfigError> {
        const RF: &str = "transaction.state.log.replication.factor";
        Ok(TransactionSettings {
            log_num_partitions: r.i32("transaction.state.log.num.partitions")?,
            log_replication_factor: i16::try_from(r.i32(RF)?)
                .map_err(|_| r.invalid(RF, "too large"))?,
            log_min_isr: r.i32("transaction.state.log.min.isr")?,
            log_segment_bytes: r.i32("transaction.state.log.segment.bytes")?,
            max_timeout_ms: r.i32("transaction.max.timeout.ms")?,
            id_expiration_ms: i64::from(r.i32("transactional.id.expiration.ms")?),
            abort_timed_out_interval_ms: r
                .i32("transaction.abort.timed.out.transaction.cleanup.interval.ms")?
                as u64,
            remove_expired_interval_ms: r
                .i32("transaction.remove.expired.transaction.cleanup.interval.ms")?
                as u64,
            partition_verification: r.bool("transaction.partition.verification.enable")?,
        })
    }
}

/// The log cleaner (Kafka's `CleanerConfig`, the `log.cleaner.*` keys that are not a topic's
/// fallback): its threads and their shared memory and I/O budget.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerSettings {
    /// `log.cleaner.enable`
    pub enable: bool,
    /// `log.cleaner.threads`
    pub threads: usize,
    /// `log.cleaner.dedupe.buffer.size`: the key → offset maps of all threads together.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.io.buffer.load.factor`: how full a map may get (above 1 is taken as 1).
    pub load_factor: f64,
    /// `log.cleaner.backoff.ms`
    pub backoff_ms: u64,
    /// `log.cleaner.io.max.bytes.per.second`: the bytes all threads read and write per second.
    pub io_max_bytes_per_second: f64,
}

impl CleanerSettings {
    pub(crate) fn read(r: &Reader<'_>) -> Result<CleanerSettings, ConfigError> {
        const DEDUPE: &str = "log.cleaner.dedupe.buffer.size";
        let settings = CleanerSettings {
            enable: r.bool("log.cleaner.enable")?,
            threads: r.i32("log.cleaner.threads")? as usize,
            dedupe_buffer_size: r.i64(DEDUPE)?.max(0) as u64,
            load_factor: r.f64("log.cleaner.io.buffer.load.factor")?.min(1.0),
            backoff_ms: r.i64("log.cleaner.backoff.ms")? as u64,
            io_max_bytes_per_second: r.f64("log.cleaner.io.max.bytes.per.second")?,
        };
        // Kafka refuses to start a cleaner whose map cannot hold even one key: it would never
        // make progress.
        if settings.enable && settings.threads > 0 {
            let slots =
                settings.map_bytes() / kafkaiq_storage::cleaner::offset_map::BYTES_PER_ENTRY;
            if slots as f64 * settings.load_factor <= 1.0 {
                return Err(r.invalid(
                    DEDUPE,
                    &format!(
                        "the offset map of each of the {} cleaner threads is too small to hold \
                         one key; increase log.cleaner.dedupe.buffer.size or decrease \
                         log.cleaner.threads",
                        settings.threads
                    ),
                ));
            }
        }
        Ok(settings)
    }

    /// The bytes of each thread's key → offset map: the buffer shared by the threads, at most
    /// 2 GiB each (as in Kafka).
    pub fn map_bytes(&self) -> usize {
        (self.dedupe_buffer_size / self.threads.max(1) as u64).min(i32::MAX as u64) as usize
    }
}
