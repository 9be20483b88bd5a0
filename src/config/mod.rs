//! Broker configuration, in two stages.
//!
//! 1. [`RawConfig`]: key/value strings as written in a Kafka `server.properties` file, with
//!    `--override key=value` flags applied on top (flags win).
//! 2. [`BrokerConfig`]: the validated, typed configuration the broker runs with. Building it
//!    checks every value; an invalid value is an error naming the key, an unknown key is a
//!    warning (returned, logged by the caller), never silently dropped.
//!
//! Kafka's property names and defaults throughout. Topic-level configs (and the broker keys they
//! fall back to) live in [`topic`]. This module does no I/O except reading the
//! properties file it is pointed at and resolving the host names of
//! `max.connections.per.ip.overrides`.

use std::collections::BTreeMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::limits;

pub mod dynamic;
pub mod inter_broker;
mod jks;
mod keys;
pub mod kraft;
pub mod security;
mod settings;
pub mod topic;

use keys::Reader;
pub use keys::{broker_config_def, BrokerConfigDef, Check, ConfigKind, Part, BROKER_CONFIG_DEFS};
pub use settings::{
    consumer_assignor_name, CleanerSettings, ElectionSettings, GroupSettings, LeaderBalancer,
    LogSettings, MigrationPolicy, ReplicaSettings, SocketSettings, TopicDefaults,
    TransactionSettings,
};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: expected `key=value`, got `{text}`")]
    Syntax {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("invalid value `{value}` for configuration `{key}`: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    /// Settings that are valid one by one but refuse each other (KRaft roles, listeners,
    /// voters), as Kafka's `KafkaConfig` validation refuses them.
    #[error("inconsistent configuration ({keys}): {reason}")]
    Conflict { keys: String, reason: String },
}

/// Stage one: raw properties, in the order they were given, later entries winning.
#[derive(Debug, Clone, Default)]
pub struct RawConfig {
    entries: BTreeMap<String, String>,
}

/// The HTTP listener of the embedded single-node setup (`kafkaiq` with no `--config`).
pub const EMBEDDED_HTTP_LISTENER: &str = "127.0.0.1:9644";

impl RawConfig {
    /// The embedded single-node setup, used when no `--config` is given: every default, and the
    /// HTTP listener at `EMBEDDED_HTTP_LISTENER`. A configuration file gets an HTTP listener
    /// only if it sets `http.listener`.
    pub fn embedded() -> RawConfig {
        let mut raw = RawConfig::default();
        raw.set("http.listener", EMBEDDED_HTTP_LISTENER);
        raw
    }

    /// Parses Java `.properties` syntax as Kafka's files use it: `key=value` or `key: value`,
    /// `#`/`!` comments, blank lines, backslash line continuations.
    pub fn parse(text: &str, path: &Path) -> Result<RawConfig, ConfigError> {
        let mut raw = RawConfig::default();
        let mut pending = String::new();
        let mut pending_line = 0;
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with(['#', '!'])) {
                continue;
            }
            if pending.is_empty() {
                pending_line = index + 1;
            }
            if let Some(stripped) = trimmed.strip_suffix('\\') {
                pending.push_str(stripped);
                continue;
            }
            pending.push_str(trimmed);
            let entry = std::mem::take(&mut pending);
            raw.set_line(&entry, path, pending_line)?;
        }
        if !pending.is_empty() {
            raw.set_line(&pending, path, pending_line)?;
        }
        Ok(raw)
    }

    pub fn from_file(path: &Path) -> Result<RawConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    fn set_line(&mut self, entry: &str, path: &Path, line: usize) -> Result<(), ConfigError> {
        let split = entry.find(['=', ':']).ok_or_else(|| ConfigError::Syntax {
            path: path.to_owned(),
            line,
            text: entry.to_owned(),
        })?;
        let key = entry[..split].trim();
        let value = entry[split + 1..].trim();
        if key.is_empty() {
            return Err(ConfigError::Syntax {
                path: path.to_owned(),
                line,
                text: entry.to_owned(),
            });
        }
        self.set(key, value);
        Ok(())
    }

    /// Applies one `key=value` override (a CLI flag).
    pub fn apply_override(&mut self, flag: &str) -> Result<(), ConfigError> {
        let (key, value) = flag.split_once('=').ok_or_else(|| ConfigError::Invalid {
            key: flag.to_owned(),
            value: String::new(),
            reason: "an override must be written key=value".to_owned(),
        })?;
        self.set(key.trim(), value.trim());
        Ok(())
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.entries.insert(key.to_owned(), value.to_owned());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    pub fn remove(&mut self, key: &str) {
        self.entries.remove(key);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// A listener: `NAME://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// A listener clients and other brokers connect to, with its security.
#[derive(Debug, Clone)]
pub struct ClientListener {
    pub listener: Listener,
    pub security: std::sync::Arc<security::ListenerSecurity>,
}

/// Where the HTTP listener (`http.listener`: metrics, the leadership page and its JSON API)
/// binds: `host:port`, port 0 for any free port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpListener {
    pub host: String,
    pub port: u16,
}

impl HttpListener {
    /// `host:port` (an IPv6 host in brackets), or `none`: `Ok(None)`, no HTTP listener.
    pub fn parse(value: &str) -> Result<Option<HttpListener>, &'static str> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        let (host, port) = value.rsplit_once(':').ok_or("must be host:port or none")?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() || host.contains("://") || host.contains(['/', ' ', '[', ']']) {
            return Err("must be host:port or none (no scheme, no path)");
        }
        let port = port
            .parse::<u16>()
            .map_err(|_| "the port must be a number from 0 to 65535")?;
        Ok(Some(HttpListener {
            host: host.to_owned(),
            port,
        }))
    }
}

/// Stage two: the typed configuration the broker runs with.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub raw: RawConfig,
    /// The dynamic broker configs laid over `raw` ([`dynamic::effective`]); empty at startup.
    pub dynamic: BTreeMap<String, String>,
    pub node_id: i32,
    pub listener: Listener,
    /// What Metadata tells clients to connect to; defaults to the listener.
    pub advertised_listener: Option<Listener>,
    /// `http.listener`: `/metrics`, the leadership page and `/api/...`; `None` when `none`.
    pub http_listener: Option<HttpListener>,
    /// Every listener this node serves clients and other brokers on, each with its security
    /// protocol, TLS and SASL settings ([`security`]): every non-controller listener of
    /// `listeners`, in the order written (the first is `listener`); empty for a
    /// controller-only node.
    pub client_listeners: Vec<ClientListener>,
    /// How this broker's client reaches other brokers' inter-broker listener when it is SSL,
    /// SASL_PLAINTEXT or SASL_SSL ([`inter_broker`]); `None` for PLAINTEXT or a node without
    /// the broker role among others.
    pub inter_broker_client: Option<std::sync::Arc<inter_broker::ClientSecurity>>,
    /// The security of the controller listener this node serves (the first of
    /// `controller.listener.names` among `listeners`): its protocol, TLS and SASL settings, read
    /// as a client listener's are ([`security`]); `None` without the controller role.
    pub controller_listener_security: Option<std::sync::Arc<security::ListenerSecurity>>,
    /// How this node's clients reach the controllers' listener when it is SSL, SASL_PLAINTEXT
    /// or SASL_SSL (voter to voter, the metadata log fetch, registration, heartbeats,
    /// AlterPartition, forwarding), with `sasl.mechanism.controller.protocol`
    /// ([`inter_broker::Channel::Controller`]); `None` for PLAINTEXT or a single node.
    pub controller_client: Option<std::sync::Arc<inter_broker::ClientSecurity>>,
    /// `authorizer.class.name` and its keys: `None` when no authorizer is configured.
    pub authorizer: Option<security::AuthorizerSettings>,
    /// Process roles, the controller quorum, every named listener, liveness and quorum
    /// timings, the metadata log dir (see [`kraft`]).
    pub kraft: kraft::KraftConfig,
    pub log_dirs: Vec<PathBuf>,
    /// `broker.rack`
    pub broker_rack: Option<String>,
    pub log: LogSettings,
    pub topics: TopicDefaults,
    pub socket: SocketSettings,
    pub replica: ReplicaSettings,
    pub elections: ElectionSettings,
    pub group: GroupSettings,
    pub cleaner: CleanerSettings,
    pub transactions: TransactionSettings,
}

/// `replica.selector.class`: how a leader picks the replica a consumer should read from
/// (KIP-392, [`crate::replica::read_replica`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// Unset (Kafka's default): the leader serves every fetch it gets. Followers still serve a
    /// consumer that fetches from them, as Kafka's do.
    Leader,
    /// `org.apache.kafka.common.replica.RackAwareReplicaSelector`: a follower in the client's
    /// `client.rack`, when the leader is not in it.
    RackAware,
}

impl ReplicaSelector {
    pub const RACK_AWARE_CLASS: &'static str =
        "org.apache.kafka.common.replica.RackAwareReplicaSelector";

    /// The selector a `replica.selector.class` value names: Kafka's class name or its short
    /// name. Kafka loads any class on its class path here; KafkaIQ has exactly one selector, so
    /// any other value is refused rather than silently serving everything from the leader.
    pub fn parse(value: Option<&str>) -> Result<ReplicaSelector, &'static str> {
        match value.map(str::trim) {
            None | Some("") => Ok(ReplicaSelector::Leader),
            Some(Self::RACK_AWARE_CLASS) | Some("RackAwareReplicaSelector") => {
                Ok(ReplicaSelector::RackAware)
            }
            Some(_) => Err("the only replica selector is org.apache.kafka.common.replica.RackAwareReplicaSelector (or RackAwareReplicaSelector); leave it unset for the leader to serve every read"),
        }
    }
}

/// `replication.quota.window.num` / `replication.quota.window.size.seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaWindow {
    pub samples: usize,
    pub window_ms: i64,
}

/// How followers fetch from leaders, in Kafka's keys and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaFetcherConfig {
    /// `num.replica.fetchers`: fetchers (each one connection) per source broker; a partition
    /// goes to the fetcher its topic and index hash to.
    pub num_replica_fetchers: usize,
    /// `replica.fetch.wait.max.ms`: how long the leader may park a follower's fetch.
    pub wait_max_ms: u64,
    /// `replica.fetch.min.bytes`: the bytes a leader waits for before answering.
    pub min_bytes: i32,
    /// `replica.fetch.max.bytes`: per partition (the first batch is returned whole anyway).
    pub max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per response, soft in the same way.
    pub response_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: how long a partition waits after a fetch error.
    pub backoff_ms: u64,
    /// `replica.socket.timeout.ms`: the fetcher's request timeout.
    pub socket_timeout_ms: u64,
}

/// A validated configuration plus the warnings met on the way (unknown keys, keys without
/// effect here).
#[derive(Debug)]
pub struct Validated {
    pub config: BrokerConfig,
    pub warnings: Vec<String>,
}

/// The replica fetcher's keys, checked one by one and against each other as Kafka's
/// `KafkaConfig` checks them: the leader may not park a fetch for longer than the fetcher's
/// request timeout, nor for longer than the lag that shrinks the ISR.
fn replica_fetcher_config(
    r: &Reader<'_>,
    replica_lag_time_max_ms: i64,
) -> Result<ReplicaFetcherConfig, ConfigError> {
    let num_replica_fetchers = r.i32("num.replica.fetchers")?;
    if num_replica_fetchers as usize > limits::REPLICA_FETCHERS_PER_BROKER_MAX {
        return Err(r.invalid(
            "num.replica.fetchers",
            &format!(
                "must be at most {}",
                limits::REPLICA_FETCHERS_PER_BROKER_MAX
            ),
        ));
    }
    let wait_max_ms = r.i32("replica.fetch.wait.max.ms")?;
    let socket_timeout_ms = r.i32("replica.socket.timeout.ms")?;
    if socket_timeout_ms < wait_max_ms {
        return Err(r.invalid(
            "replica.socket.timeout.ms",
            "must be at least replica.fetch.wait.max.ms, or every long-polling fetch times out",
        ));
    }
    if i64::from(wait_max_ms) > replica_lag_time_max_ms {
        return Err(r.invalid(
            "replica.fetch.wait.max.ms",
            "must be at most replica.lag.time.max.ms, or the ISR shrinks while fetches wait",
        ));
    }
    Ok(ReplicaFetcherConfig {
        num_replica_fetchers: num_replica_fetchers as usize,
        wait_max_ms: wait_max_ms as u64,
        min_bytes: r.i32("replica.fetch.min.bytes")?,
        max_bytes: r.i32("replica.fetch.max.bytes")?,
        response_max_bytes: r.i32("replica.fetch.response.max.bytes")?,
        backoff_ms: r.i32("replica.fetch.backoff.ms")? as u64,
        socket_timeout_ms: socket_timeout_ms as u64,
    })
}

/// `max.connections.per.ip` and `max.connections.per.ip.overrides`, as Kafka's
/// `ConnectionQuotas` applies them: a new connection from an address already holding its
/// maximum is closed at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionsPerIp {
    pub default_max: usize,
    pub overrides: BTreeMap<IpAddr, usize>,
}

impl ConnectionsPerIp {
    /// The most connections `ip` may hold (an IPv4 client seen on an IPv6 socket counts as its
    /// IPv4 address).
    pub fn max_for(&self, ip: IpAddr) -> usize {
        let ip = ip.to_canonical();
        self.overrides.get(&ip).copied().unwrap_or(self.default_max)
    }
}

/// Reads the per-address connection limits. The overrides are Kafka's `host:n,ip:n` (split at
/// the last colon, so IPv6 addresses work); a host name is resolved once, at startup, and its
/// limit applies to every address it resolves to (Kafka takes the first; `localhost` may list
/// `::1` before `127.0.0.1`). A count below zero refuses every connection, as it does in Kafka.
fn connections_per_ip_config(r: &Reader) -> Result<ConnectionsPerIp, ConfigError> {
    const KEY: &str = "max.connections.per.ip.overrides";
    let default_max = r.i32("max.connections.per.ip")? as usize;
    let mut overrides = BTreeMap::new();
    for entry in r.value(KEY).unwrap_or("").split(',').map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        let (host, count) = entry
            .rsplit_once(':')
            .ok_or_else(|| r.invalid(KEY, "each entry must be host:count"))?;
        let count: i32 = count
            .trim()
            .parse()
            .map_err(|_| r.invalid(KEY, &format!("`{entry}`: the count is not a number")))?;
        for ip in resolve_host(host.trim())
            .map_err(|reason| r.invalid(KEY, &format!("`{entry}`: {reason}")))?
        {
            overrides.insert(ip, count.max(0) as usize);
        }
    }
    if default_max == 0 && overrides.is_empty() {
        return Err(r.invalid(
            "max.connections.per.ip",
            "can be set to zero only if max.connections.per.ip.overrides is set",
        ));
    }
    Ok(ConnectionsPerIp {
        default_max,
        overrides,
    })
}

/// The addresses of `host`: itself if it is an IP address, else what the resolver answers.
fn resolve_host(host: &str) -> Result<Vec<IpAddr>, String> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![ip.to_canonical()]);
    }
    if bare.is_empty() {
        return Err("no host".to_owned());
    }
    let addrs = (bare, 0u16)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {bare}: {e}"))?;
    Ok(addrs.map(|a| a.ip().to_canonical()).collect())
}

/// `leader.imbalance.check.interval.ms`, or its synonym in seconds; both written must agree.
fn leader_imbalance_check_interval_ms(r: &Reader) -> Result<i64, ConfigError> {
    const MS: &str = "leader.imbalance.check.interval.ms";
    const SECONDS: &str = "leader.imbalance.check.interval.seconds";
    let seconds = r.raw.get(SECONDS).map(|_| r.i64(SECONDS)).transpose()?;
    let ms = r.opt_i64(MS)?;
    if let (Some(s), Some(m)) = (seconds, ms) {
        if s * 1000 != m {
            return Err(r.invalid(
                MS,
                &format!("conflicts with {SECONDS}={s}; set one of them"),
            ));
        }
    }
    Ok(r.with_synonyms(MS)?.unwrap_or_default())
}

impl BrokerConfig {
    /// Validates raw properties into a typed configuration.
    pub fn from_raw(raw: RawConfig) -> Result<Validated, ConfigError> {
        let mut warnings = Vec::new();
        for (key, _) in raw.iter() {
            match broker_config_def(key) {
                // Read by `security::parse` (not in the key table: DescribeConfigs does not list
                // them yet).
                None if security::is_security_key(key) => {}
                None if crate::config::topic::topic_config_def(key).is_none() => warnings.push(
                    format!("unknown configuration `{key}` is ignored"),
                ),
                None => warnings.push(format!(
                    "`{key}` is a topic-level configuration; set the broker key it falls back to instead"
                )),
                Some(d) if !d.effective => {
                    tracing::debug!(key, "configuration accepted; it has no effect on KafkaIQ")
                }
                Some(d) => {
                    // Type-check every effective key even if we read it below, so that a bad
                    // value never goes unnoticed.
                    let r = Reader { raw: &raw };
                    match d.kind {
                        ConfigKind::Int => {
                            r.opt_i32(key)?;
                        }
                        ConfigKind::Long => {
                            r.opt_i64(key)?;
                        }
                        ConfigKind::Bool => {
                            r.bool(key)?;
                        }
                        ConfigKind::Double => {
                            r.f64(key)?;
                        }
                        ConfigKind::Str | ConfigKind::List => {}
                    }
                }
            }
        }
        let r = Reader { raw: &raw };

        let node_id = r.with_synonyms(kraft::NODE_ID)?.unwrap_or_default() as i32;

        let log_dirs: Vec<PathBuf> = match (raw.get("log.dirs"), raw.get("log.dir")) {
            (Some(dirs), _) => dirs
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
                .collect(),
            (None, Some(dir)) => vec![PathBuf::from(dir)],
            (None, None) => vec![PathBuf::from("./kafkaiq-data")],
        };
        if log_dirs.is_empty() {
            return Err(r.invalid("log.dirs", "no directory given"));
        }
        let kraft::Parsed {
            kraft,
            listener,
            advertised_listener,
            client_listeners,
        } = kraft::parse(&raw, node_id, &log_dirs, &mut warnings)?;
        let client_listeners = client_listeners
            .iter()
            .map(|l| {
                Ok(ClientListener {
                    listener: l.to_listener(),
                    security: std::sync::Arc::new(security::parse(&raw, &l.name, l.protocol)?),
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let authorizer = security::parse_authorizer(&raw)?;
        let inter_broker_client = if kraft.standalone || !kraft.roles.broker {
            None
        } else {
            let name = &kraft.inter_broker_listener_name;
            let protocol = kraft
                .security_protocol_map
                .get(name)
                .copied()
                .unwrap_or(kraft::SecurityProtocol::Plaintext);
            inter_broker::parse(&raw, name, protocol)?.map(std::sync::Arc::new)
        };
        let controller_listener_security = kraft
            .controller_listener()
            .map(|l| security::parse(&raw, &l.name, l.protocol).map(std::sync::Arc::new))
            .transpose()?;
        let controller_client = if kraft.standalone {
            None
        } else {
            match (
                kraft.controller_connect_listener_name(),
                kraft.controller_connect_protocol(),
            ) {
                (Some(name), Some(protocol)) => inter_broker::parse_for(
                    &raw,
                    name,
                    protocol,
                    inter_broker::Channel::Controller,
                )?
                .map(std::sync::Arc::new),
                _ => None,
            }
        };
        if let Some(a) = &authorizer {
            // Nodes reach each other's controller listener as `User:ANONYMOUS` when it is
            // PLAINTEXT: without it among the super users their heartbeats and AlterPartition
            // are refused, as they are in Kafka with a PLAINTEXT controller listener. On a SASL
            // or SSL controller listener they come as the SASL user or the certificate's
            // subject, which is then what needs to be a super user (or to have CLUSTER_ACTION).
            // (A secured inter-broker listener's principal needs CLUSTER_ACTION too, as in
            // Kafka.)
            let nodes_principal = match &controller_client {
                None => Some("User:ANONYMOUS".to_owned()),
                Some(c) => c.sasl.as_ref().map(|s| format!("User:{}", s.username)),
            };
            if let Some(principal) =
                nodes_principal.filter(|p| !kraft.standalone && !a.super_users.contains(p.as_str()))
            {
                warnings.push(format!(
                    "`{}` is set on a KRaft node whose nodes reach each other's controller \
                     listener as {principal}; add it to `{}` or the cluster's own requests are \
                     refused",
                    security::AUTHORIZER_CLASS_NAME,
                    security::SUPER_USERS
                ));
            }
        }

        let log = LogSettings::read(&r)?;
        let socket = SocketSettings::read(&r)?;
        let elections = ElectionSettings::read(&r)?;
        let topics = TopicDefaults::read(&r)?;
        let group = GroupSettings::read(&r)?;
        let replica = ReplicaSettings::read(&r)?;
        let cleaner = CleanerSettings::read(&r)?;
        let transactions = TransactionSettings::read(&r)?;
        let http_listener = HttpListener::parse(r.value("http.listener").unwrap_or("none"))
            .map_err(|reason| r.invalid("http.listener", reason))?;

        let config = BrokerConfig {
            dynamic: BTreeMap::new(),
            node_id,
            listener,
            advertised_listener,
            http_listener,
            client_listeners,
            inter_broker_client,
            controller_listener_security,
            controller_client,
            authorizer,
            kraft,
            log_dirs,
            broker_rack: raw.get("broker.rack").map(str::to_owned),
            log,
            topics,
            socket,
            replica,
            elections,
            group,
            cleaner,
            transactions,
            raw,
        };
        Ok(Validated { config, warnings })
    }

    /// The embedded single-node default: 127.0.0.1:9092, data in ./kafkaiq-data, the HTTP
    /// listener at 127.0.0.1:9644.
    pub fn default_single_node() -> BrokerConfig {
        Self::from_raw(RawConfig::embedded())
            .expect("built-in defaults are valid")
            .config
    }

    /// The value of a broker key as the broker sees it (set value or default), for
    /// DescribeConfigs and topic-config fallbacks.
    pub fn value_of(&self, key: &str) -> Option<String> {
        if let Some(v) = self.raw.get(key) {
            return Some(v.to_owned());
        }
        match key {
            "log.dirs" => Some(
                self.log_dirs
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            "log.retention.ms" => Some(self.log.retention_ms.to_string()),
            "log.roll.ms" => Some(self.log.roll_ms.to_string()),
            "log.flush.interval.ms" => Some(self.log.flush_interval_ms.to_string()),
            "node.id" | "broker.id" => Some(self.node_id.to_string()),
            "leader.imbalance.check.interval.ms" => Some(
                self.elections
                    .leader_imbalance_check_interval_ms
                    .to_string(),
            ),
            _ => broker_config_def(key).and_then(|d| d.default.map(str::to_owned)),
        }
    }

    /// Whether `kafkaiq.sasl.scram.users` gives `user` a credential for the SCRAM mechanism
    /// named `mechanism` on some listener of this node (client or controller).
    pub fn has_file_scram_user(&self, mechanism: &str, user: &str) -> bool {
        self.client_listeners
            .iter()
            .map(|l| &l.security)
            .chain(self.controller_listener_security.iter())
            .filter_map(|s| s.sasl.as_ref())
            .any(|sasl| sasl.scram.keys().any(|(m, u)| *m == mechanism && u == user))
    }

    /// The SCRAM credentials `kafkaiq.sasl.scram.users` gives on the listeners of this node
    /// (client or controller): the iterations of each, by user and mechanism name.
    pub fn file_scram_credentials(
        &self,
    ) -> std::collections::BTreeMap<(String, &'static str), u32> {
        self.client_listeners
            .iter()
            .map(|l| &l.security)
            .chain(self.controller_listener_security.iter())
            .filter_map(|s| s.sasl.as_ref())
            .flat_map(|sasl| sasl.scram.iter())
            .map(|((mechanism, user), credential)| {
                ((user.clone(), *mechanism), credential.iterations)
            })
            .collect()
    }

    /// Whether a broker key was set explicitly (file or flag), as opposed to defaulted.
    pub fn is_set(&self, key: &str) -> bool {
        self.raw.get(key).is_some()
    }

    pub fn advertised(&self) -> &Listener {
        self.advertised_listener.as_ref().unwrap_or(&self.listener)
    }

    /// The directories that hold a `meta.properties`: every log dir, then the metadata log dir
    /// when it is not one of them (as `kafka-storage format` writes them).
    pub fn meta_properties_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.log_dirs.clone();
        if !dirs.contains(&self.kraft.metadata_log_dir) {
            dirs.push(self.kraft.metadata_log_dir.clone());
        }
        dirs
    }

    /// The default log config for a topic without overrides, derived from broker keys.
    pub fn default_log_config(&self) -> kafkaiq_storage::LogConfig {
        kafkaiq_storage::LogConfig {
            segment_bytes: self.log.segment_bytes,
            segment_ms: self.log.roll_ms,
            segment_index_bytes: self.log.index_size_max_bytes,
            index_interval_bytes: self.log.index_interval_bytes,
            retention_ms: self.log.retention_ms,
            retention_bytes: self.log.retention_bytes,
            max_message_bytes: self.log.message_max_bytes,
            flush_messages: self.log.flush_interval_messages,
            flush_ms: self.log.flush_interval_ms,
            message_timestamp_type: self.log.message_timestamp_type,
            producer_id_expiration_ms: self.log.producer_id_expiration_ms,
            // From the broker's `log.message.timestamp.*.max.ms` or the topic's override
            // (`topic::log_config`).
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            // Per topic, from the effective `cleanup.policy` (`topic::log_config`).
            compact: false,
            ..kafkaiq_storage::LogConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::keys::HOUR_MS;
    use super::*;

    fn validated(lines: &str) -> Result<Validated, ConfigError> {
        BrokerConfig::from_raw(RawConfig::parse(lines, Path::new("test.properties"))?)
    }

    #[test]
    fn defaults_are_the_embedded_single_node() {
        let c = BrokerConfig::default_single_node();
        assert_eq!(c.listener.host, "127.0.0.1");
        assert_eq!(c.listener.port, 9092);
        assert_eq!(c.log_dirs, vec![PathBuf::from("./kafkaiq-data")]);
        assert_eq!(c.node_id, 1);
        assert_eq!(c.log.retention_ms, 168 * HOUR_MS);
        assert_eq!(c.elections.leader_imbalance_check_interval_ms, 300_000);
        assert_eq!(
            c.http_listener,
            Some(HttpListener {
                host: "127.0.0.1".into(),
                port: 9644
            })
        );
    }

    #[test]
    fn fetch_and_per_address_connection_limits_are_kafkas() {
        let c = BrokerConfig::default_single_node();
        assert_eq!(c.replica.fetch_max_bytes, 57_671_680);
        assert_eq!(c.socket.connections_per_ip.default_max, i32::MAX as usize);
        assert!(c.socket.connections_per_ip.overrides.is_empty());
        let c = validated(
            "max.connections.per.ip=0\nmax.connections.per.ip.overrides=127.0.0.1:3, [::1]:4,10.0.0.7:-1\n",
        )
        .unwrap()
        .config
        .socket.connections_per_ip;
        assert_eq!(c.max_for("127.0.0.1".parse().unwrap()), 3);
        assert_eq!(c.max_for("::ffff:127.0.0.1".parse().unwrap()), 3);
        assert_eq!(c.max_for("::1".parse().unwrap()), 4);
        assert_eq!(c.max_for("10.0.0.7".parse().unwrap()), 0);
        assert_eq!(c.max_for("10.0.0.8".parse().unwrap()), 0);
        for (bad, key) in [
            ("max.connections.per.ip=0\n", "max.connections.per.ip"),
            ("max.connections.per.ip=-1\n", "max.connections.per.ip"),
            (
                "max.connections.per.ip.overrides=127.0.0.1\n",
                "max.connections.per.ip.overrides",
            ),
            (
                "max.connections.per.ip.overrides=127.0.0.1:many\n",
                "max.connections.per.ip.overrides",
            ),
            ("fetch.max.bytes=1023\n", "fetch.max.bytes"),
        ] {
            let err = validated(bad).unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn an_unknown_authorizer_is_refused_at_startup_naming_the_key() {
        // Another class: refused by name.
        let e = validated("authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`authorizer.class.name`"), "{e}");
        // The StandardAuthorizer starts, with its keys.
        let v = validated(
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
             super.users=User:admin;User:ANONYMOUS\n",
        )
        .unwrap();
        let on = v.config.authorizer.as_ref().expect("authorizer on");
        assert!(on.super_users.contains("User:admin"));
        assert!(!on.allow_everyone_if_no_acl_found);
        // Unset: no authorizer, and its keys are known (no unknown-key warning).
        let v = validated("super.users=User:admin\n").unwrap();
        assert!(v.config.authorizer.is_none());
        assert!(
            !v.warnings.iter().any(|w| w.contains("super.users")),
            "{:?}",
            v.warnings
        );
    }

    #[test]
    fn a_config_file_without_http_listener_has_none() {
        let c = validated("node.id=2\nlisteners=PLAINTEXT://127.0.0.1:9192\n").unwrap();
        assert_eq!(c.config.http_listener, None);
        let c = BrokerConfig::from_raw(RawConfig::default()).unwrap();
        assert_eq!(c.config.http_listener, None);
        let c = validated("http.listener=127.0.0.1:9700\n").unwrap();
        assert_eq!(c.config.http_listener.map(|l| l.port), Some(9700));
    }

    #[test]
    fn http_listener_is_host_port_or_none_and_a_bad_value_names_the_key() {
        let parse = |v: &str| {
            let mut raw = RawConfig::default();
            raw.set("http.listener", v);
            BrokerConfig::from_raw(raw).map(|v| v.config.http_listener)
        };
        assert_eq!(parse("none").unwrap(), None);
        assert_eq!(parse("NONE").unwrap(), None);
        let l = parse("0.0.0.0:0").unwrap().unwrap();
        assert_eq!((l.host.as_str(), l.port), ("0.0.0.0", 0));
        let l = parse("[::1]:9700").unwrap().unwrap();
        assert_eq!((l.host.as_str(), l.port), ("::1", 9700));
        for bad in [
            "9644",
            ":9644",
            "localhost:99999",
            "http://localhost:9644",
            "host:port",
            "",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(err.contains("http.listener"), "{bad}: {err}");
        }
    }

    #[test]
    fn stock_kraft_server_properties_is_accepted_without_unknown_warnings() {
        let text = "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.bootstrap.servers=localhost:9093\n\
listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ninter.broker.listener.name=PLAINTEXT\n\
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\ncontroller.listener.names=CONTROLLER\n\
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\nnum.network.threads=3\nnum.io.threads=8\n\
socket.send.buffer.bytes=102400\nsocket.receive.buffer.bytes=102400\nsocket.request.max.bytes=104857600\n\
log.dirs=/tmp/kraft-combined-logs\nnum.partitions=1\nnum.recovery.threads.per.data.dir=1\n\
offsets.topic.replication.factor=1\nshare.coordinator.state.topic.replication.factor=1\n\
share.coordinator.state.topic.min.isr=1\ntransaction.state.log.replication.factor=1\n\
transaction.state.log.min.isr=1\nlog.retention.hours=168\nlog.segment.bytes=1073741824\n\
log.retention.check.interval.ms=300000\n";
        let v = validated(text).unwrap();
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        assert_eq!(v.config.listener.name, "PLAINTEXT");
        assert_eq!(v.config.listener.port, 9092);
        assert_eq!(v.config.advertised().host, "localhost");

        // With an authorizer, the nodes' own principal must be a super user: warned when not.
        let authorizer =
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n";
        let v = validated(&format!("{text}{authorizer}super.users=User:admin\n")).unwrap();
        assert!(
            v.warnings.len() == 1 && v.warnings[0].contains("User:ANONYMOUS"),
            "{:?}",
            v.warnings
        );
        let v = validated(&format!(
            "{text}{authorizer}super.users=User:admin;User:ANONYMOUS\n"
        ))
        .unwrap();
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    }

    #[test]
    fn unknown_key_warns_and_invalid_value_names_the_key() {
        let v = validated("no.such.key=1\n").unwrap();
        assert_eq!(v.warnings.len(), 1);
        assert!(v.warnings[0].contains("no.such.key"));
        let err = validated("num.partitions=lots\n").unwrap_err();
        assert!(err.to_string().contains("num.partitions"), "{err}");
        let err = validated("auto.create.topics.enable=maybe\n").unwrap_err();
        assert!(err.to_string().contains("auto.create.topics.enable"));
    }

    #[test]
    fn leader_balancer_keys_default_to_count_and_invalid_ones_name_the_key() {
        let e = validated("").unwrap().config.elections;
        assert_eq!(
            e.leader_balancer,
            LeaderBalancer::Count,
            "Kafka's behaviour by default"
        );
        assert_eq!(e.leader_balancer_threshold, 1.1);
        assert_eq!(e.leader_balancer_min_dwell_ms, 300_000);
        assert_eq!(e.leader_balancer_max_moves_per_interval, 5);
        assert_eq!(e.leader_balancer_min_measured_ms, 30_000);
        let v = validated(
            "kafkaiq.leader.balancer=load\nkafkaiq.leader.balancer.threshold=1.25\n\
             kafkaiq.leader.balancer.min.dwell.ms=0\nkafkaiq.leader.balancer.max.moves.per.interval=2\n\
             kafkaiq.leader.balancer.min.measured.ms=2000\n",
        )
        .unwrap();
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        let e = v.config.elections;
        assert_eq!(e.leader_balancer, LeaderBalancer::Load);
        assert_eq!(e.leader_balancer_threshold, 1.25);
        assert_eq!(e.leader_balancer_min_dwell_ms, 0);
        assert_eq!(e.leader_balancer_max_moves_per_interval, 2);
        assert_eq!(e.leader_balancer_min_measured_ms, 2_000);
        for (bad, key) in [
            (
                "kafkaiq.leader.balancer.min.measured.ms=-5",
                "kafkaiq.leader.balancer.min.measured.ms",
            ),
            ("kafkaiq.leader.balancer=cpu", "kafkaiq.leader.balancer"),
            (
                "kafkaiq.leader.balancer.threshold=1",
                "kafkaiq.leader.balancer.threshold",
            ),
            (
                "kafkaiq.leader.balancer.threshold=0.9",
                "kafkaiq.leader.balancer.threshold",
            ),
            (
                "kafkaiq.leader.balancer.threshold=much",
                "kafkaiq.leader.balancer.threshold",
            ),
            (
                "kafkaiq.leader.balancer.min.dwell.ms=-1",
                "kafkaiq.leader.balancer.min.dwell.ms",
            ),
            (
                "kafkaiq.leader.balancer.max.moves.per.interval=0",
                "kafkaiq.leader.balancer.max.moves.per.interval",
            ),
        ] {
            let err = validated(&format!("{bad}\n")).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{bad}: {err}");
        }
    }

    #[test]
    fn cleaner_keys_are_read_and_invalid_ones_name_the_key() {
        let c = validated("").unwrap().config.cleaner;
        assert!(c.enable);
        assert_eq!((c.threads, c.backoff_ms), (1, 15_000));
        assert_eq!(c.dedupe_buffer_size, 128 << 20);
        assert_eq!(c.load_factor, 0.9);
        assert_eq!(c.io_max_bytes_per_second, f64::MAX);
        let c = validated(
            "log.cleaner.enable=false\nlog.cleaner.threads=2\nlog.cleaner.dedupe.buffer.size=1000000\n\
             log.cleaner.io.max.bytes.per.second=5e6\nlog.cleaner.backoff.ms=100\n",
        )
        .unwrap()
        .config
        .cleaner;
        assert!(!c.enable);
        assert_eq!((c.threads, c.map_bytes(), c.backoff_ms), (2, 500_000, 100));
        assert_eq!(c.io_max_bytes_per_second, 5e6);
        for (text, key) in [
            (
                "log.cleaner.min.cleanable.ratio=1.5\n",
                "log.cleaner.min.cleanable.ratio",
            ),
            (
                "log.cleaner.min.cleanable.ratio=-0.1\n",
                "log.cleaner.min.cleanable.ratio",
            ),
            ("log.cleaner.threads=-1\n", "log.cleaner.threads"),
            ("log.cleaner.backoff.ms=-1\n", "log.cleaner.backoff.ms"),
            (
                "log.cleaner.io.buffer.load.factor=x\n",
                "log.cleaner.io.buffer.load.factor",
            ),
            (
                "log.cleaner.max.compaction.lag.ms=0\n",
                "log.cleaner.max.compaction.lag.ms",
            ),
            (
                "log.cleaner.delete.retention.ms=-5\n",
                "log.cleaner.delete.retention.ms",
            ),
            // 47 bytes hold one 24-byte entry, which a 0.9 load factor may not fill.
            (
                "log.cleaner.dedupe.buffer.size=47\n",
                "log.cleaner.dedupe.buffer.size",
            ),
            (
                "log.cleaner.threads=4\nlog.cleaner.dedupe.buffer.size=100\n",
                "log.cleaner.dedupe.buffer.size",
            ),
        ] {
            let err = validated(text).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{text}: {err}");
        }
        // A disabled cleaner needs no map.
        assert!(validated("log.cleaner.enable=false\nlog.cleaner.dedupe.buffer.size=1\n").is_ok());
        assert!(validated("log.cleaner.dedupe.buffer.size=72\n").is_ok());
    }

    #[test]
    fn a_topic_takes_the_cleaner_keys_from_its_override_then_the_broker() {
        let broker = validated(
            "log.cleaner.min.cleanable.ratio=0.2\nlog.cleaner.delete.retention.ms=1000\n",
        )
        .unwrap()
        .config;
        let mut overrides = BTreeMap::new();
        let c = topic::log_config(&overrides, &broker);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.2);
        assert_eq!(c.delete_retention_ms, 1000);
        assert_eq!(
            (c.min_compaction_lag_ms, c.max_compaction_lag_ms),
            (0, i64::MAX)
        );
        for (k, v) in [
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "5"),
            ("min.compaction.lag.ms", "7"),
            ("max.compaction.lag.ms", "9"),
        ] {
            overrides.insert(k.to_owned(), v.to_owned());
        }
        let c = topic::log_config(&overrides, &broker);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.01);
        assert_eq!(c.delete_retention_ms, 5);
        assert_eq!((c.min_compaction_lag_ms, c.max_compaction_lag_ms), (7, 9));
    }

    #[test]
    fn producer_id_expiration_is_configurable_and_checked() {
        let expiration = |text: &str| {
            validated(text).map(|v| v.config.default_log_config().producer_id_expiration_ms)
        };
        assert_eq!(expiration("").unwrap(), 86_400_000);
        assert_eq!(
            expiration("producer.id.expiration.ms=5000\n").unwrap(),
            5_000
        );
        let err = expiration("producer.id.expiration.ms=0\n").unwrap_err();
        assert!(
            err.to_string().contains("producer.id.expiration.ms"),
            "{err}"
        );
    }

    #[test]
    fn replica_selector_is_unset_rack_aware_or_refused_naming_the_key() {
        let selector = |text: &str| validated(text).map(|v| v.config.replica.selector);
        assert_eq!(selector("").unwrap(), ReplicaSelector::Leader);
        assert_eq!(
            selector("replica.selector.class=\n").unwrap(),
            ReplicaSelector::Leader
        );
        assert_eq!(
            selector(
                "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector\n"
            )
            .unwrap(),
            ReplicaSelector::RackAware
        );
        assert_eq!(
            selector("replica.selector.class=RackAwareReplicaSelector\n").unwrap(),
            ReplicaSelector::RackAware
        );
        let v = validated("replica.selector.class=RackAwareReplicaSelector\nbroker.rack=rack-1\n")
            .unwrap();
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        assert_eq!(v.config.broker_rack.as_deref(), Some("rack-1"));
        for bad in [
            "com.example.MySelector",
            "rackaware",
            "org.apache.kafka.common.replica.ReplicaSelector",
        ] {
            let err = selector(&format!("replica.selector.class={bad}\n")).unwrap_err();
            assert!(
                err.to_string().contains("replica.selector.class"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn group_coordinator_keys_have_kafka_defaults_and_bad_values_name_the_key() {
        let c = BrokerConfig::default_single_node();
        assert_eq!(c.group.min_session_timeout_ms, 6_000);
        assert_eq!(c.group.max_session_timeout_ms, 1_800_000);
        assert_eq!(c.group.max_size, i32::MAX as usize);
        assert_eq!(c.group.offset_metadata_max_bytes, 4_096);
        assert_eq!(c.group.offsets_retention_ms, 10_080 * 60_000);
        assert_eq!(c.group.offsets_retention_check_interval_ms, 600_000);
        assert_eq!(c.group.offsets_topic_replication_factor, 3);
        assert_eq!(c.group.offsets_commit_timeout_ms, 5_000);
        let v = validated(
            "group.max.size=7\noffsets.retention.minutes=2\noffsets.topic.replication.factor=1\n\
offsets.commit.timeout.ms=250\noffsets.retention.check.interval.ms=1000\n",
        )
        .unwrap();
        assert_eq!(v.config.group.max_size, 7);
        assert_eq!(v.config.group.offsets_retention_ms, 120_000);
        assert_eq!(v.config.group.offsets_topic_replication_factor, 1);
        assert_eq!(v.config.group.offsets_commit_timeout_ms, 250);
        assert_eq!(v.config.group.offsets_retention_check_interval_ms, 1_000);
        for line in [
            "group.min.session.timeout.ms=soon",
            "group.max.session.timeout.ms=99999999999",
            "group.max.size=0",
            "offset.metadata.max.bytes=-1",
            "offsets.retention.minutes=0",
            "offsets.retention.check.interval.ms=0",
            "offsets.topic.replication.factor=0",
            "offsets.topic.replication.factor=40000",
            "offsets.commit.timeout.ms=0",
        ] {
            let key = line.split('=').next().unwrap();
            let err = validated(&format!("{line}\n")).unwrap_err();
            assert!(err.to_string().contains(key), "{line}: {err}");
        }
    }

    #[test]
    fn the_consumer_heartbeat_interval_defaults_to_2s_within_any_bounds_a_file_sets() {
        let c = BrokerConfig::default_single_node();
        assert_eq!(c.group.consumer_heartbeat_interval_ms, 2_000);
        assert_eq!(c.group.consumer_reconciling_heartbeat_interval_ms, 250);
        let interval = |text: &str| {
            validated(text)
                .map(|v| v.config.group.consumer_heartbeat_interval_ms)
                .map_err(|e| e.to_string())
        };
        // Kafka's own bounds written out: the default moves up to them.
        assert_eq!(
            interval("group.consumer.min.heartbeat.interval.ms=5000\n"),
            Ok(5_000)
        );
        assert_eq!(
            interval("group.consumer.max.heartbeat.interval.ms=1500\n"),
            Ok(1_500)
        );
        // Set, it is the value written, checked against the bounds.
        assert_eq!(
            interval("group.consumer.heartbeat.interval.ms=5000\n"),
            Ok(5_000)
        );
        assert_eq!(
            interval("group.consumer.heartbeat.interval.ms=1200\n"),
            Ok(1_200)
        );
        for (text, key) in [
            (
                "group.consumer.heartbeat.interval.ms=3000\ngroup.consumer.min.heartbeat.interval.ms=5000",
                "group.consumer.heartbeat.interval.ms",
            ),
            (
                "group.consumer.min.heartbeat.interval.ms=20000",
                "group.consumer.min.heartbeat.interval.ms",
            ),
            (
                "kafkaiq.group.consumer.reconciling.heartbeat.interval.ms=0",
                "kafkaiq.group.consumer.reconciling.heartbeat.interval.ms",
            ),
        ] {
            let err = interval(&format!("{text}\n")).unwrap_err();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn replica_fetcher_keys_have_kafka_defaults_and_are_checked_against_each_other() {
        let c = BrokerConfig::default_single_node();
        assert_eq!(
            c.replica.fetcher,
            ReplicaFetcherConfig {
                num_replica_fetchers: 1,
                wait_max_ms: 500,
                min_bytes: 1,
                max_bytes: 1_048_576,
                response_max_bytes: 10_485_760,
                backoff_ms: 1_000,
                socket_timeout_ms: 30_000,
            }
        );
        let v = validated(
            "num.replica.fetchers=3\nreplica.fetch.wait.max.ms=100\nreplica.fetch.min.bytes=10\n\
replica.fetch.max.bytes=2048\nreplica.fetch.response.max.bytes=4096\nreplica.fetch.backoff.ms=50\n\
replica.socket.timeout.ms=1000\n",
        )
        .unwrap();
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        assert_eq!(v.config.replica.fetcher.num_replica_fetchers, 3);
        assert_eq!(v.config.replica.fetcher.wait_max_ms, 100);
        assert_eq!(v.config.replica.fetcher.min_bytes, 10);
        assert_eq!(v.config.replica.fetcher.max_bytes, 2048);
        assert_eq!(v.config.replica.fetcher.response_max_bytes, 4096);
        assert_eq!(v.config.replica.fetcher.backoff_ms, 50);
        assert_eq!(v.config.replica.fetcher.socket_timeout_ms, 1000);
        for (text, key) in [
            ("num.replica.fetchers=0", "num.replica.fetchers"),
            ("num.replica.fetchers=100000", "num.replica.fetchers"),
            ("replica.fetch.wait.max.ms=-1", "replica.fetch.wait.max.ms"),
            ("replica.fetch.min.bytes=0", "replica.fetch.min.bytes"),
            ("replica.fetch.max.bytes=lots", "replica.fetch.max.bytes"),
            (
                "replica.fetch.response.max.bytes=-5",
                "replica.fetch.response.max.bytes",
            ),
            ("replica.fetch.backoff.ms=-1", "replica.fetch.backoff.ms"),
            ("replica.socket.timeout.ms=0", "replica.socket.timeout.ms"),
            (
                "replica.socket.timeout.ms=400\nreplica.fetch.wait.max.ms=500",
                "replica.socket.timeout.ms",
            ),
            (
                "replica.lag.time.max.ms=400\nreplica.fetch.wait.max.ms=500",
                "replica.fetch.wait.max.ms",
            ),
        ] {
            let err = validated(&format!("{text}\n")).unwrap_err();
            assert!(err.to_string().contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn retention_precedence_is_ms_then_minutes_then_hours() {
        let v = validated("log.retention.hours=1\nlog.retention.minutes=2\n").unwrap();
        assert_eq!(v.config.log.retention_ms, 120_000);
        let v = validated("log.retention.hours=1\nlog.retention.ms=5\n").unwrap();
        assert_eq!(v.config.log.retention_ms, 5);
    }

    #[test]
    fn imbalance_interval_accepts_seconds_or_ms_but_not_conflicting_both() {
        let v = validated("leader.imbalance.check.interval.seconds=10\n").unwrap();
        assert_eq!(
            v.config.elections.leader_imbalance_check_interval_ms,
            10_000
        );
        let v = validated("leader.imbalance.check.interval.ms=2500\n").unwrap();
        assert_eq!(v.config.elections.leader_imbalance_check_interval_ms, 2_500);
        let v = validated(
            "leader.imbalance.check.interval.ms=10000\nleader.imbalance.check.interval.seconds=10\n",
        )
        .unwrap();
        assert_eq!(
            v.config.elections.leader_imbalance_check_interval_ms,
            10_000
        );
        let err = validated(
            "leader.imbalance.check.interval.ms=300000\nleader.imbalance.check.interval.seconds=10\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("leader.imbalance.check.interval"));
    }

    #[test]
    fn overrides_win_over_the_file() {
        let mut raw = RawConfig::parse("num.partitions=3\n", Path::new("x")).unwrap();
        raw.apply_override("num.partitions=7").unwrap();
        let v = BrokerConfig::from_raw(raw).unwrap();
        assert_eq!(v.config.topics.num_partitions, 7);
    }

    #[test]
    fn properties_syntax_comments_colons_and_continuations() {
        let raw = RawConfig::parse(
            "# comment\n! also\nbroker.rack : r1\nlog.dirs=/a,\\\n  /b\n",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(raw.get("broker.rack"), Some("r1"));
        assert_eq!(raw.get("log.dirs"), Some("/a,/b"));
    }
}
