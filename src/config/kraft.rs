//! Apache Kafka's KRaft keys: process roles, the controller quorum, named listeners and their
//! security protocols, broker liveness and quorum timings, the metadata log directory.
//!
//! [`parse`] turns them into one typed [`KraftConfig`] and refuses what Kafka 4.1's
//! `KafkaConfig` refuses (its messages are kept where it has one), plus the few things only
//! KafkaIQ needs: a voter id may appear once, and this node's voter entry must be reachable at
//! its own controller listener. Any listener, the controller's and the inter-broker one
//! included, may be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, as in Kafka.
//!
//! A file without `process.roles` is today's single node: a quorum of one voter (this node)
//! that no network reaches, serving the client listener only ([`KraftConfig::standalone`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use super::{ConfigError, Listener, RawConfig};

pub const PROCESS_ROLES: &str = "process.roles";
pub const NODE_ID: &str = "node.id";
pub const BROKER_ID: &str = "broker.id";
pub const QUORUM_VOTERS: &str = "controller.quorum.voters";
pub const QUORUM_BOOTSTRAP_SERVERS: &str = "controller.quorum.bootstrap.servers";
pub const LISTENERS: &str = "listeners";
pub const ADVERTISED_LISTENERS: &str = "advertised.listeners";
pub const CONTROLLER_LISTENER_NAMES: &str = "controller.listener.names";
pub const INTER_BROKER_LISTENER_NAME: &str = "inter.broker.listener.name";
pub const INTER_BROKER_SECURITY_PROTOCOL: &str = "inter.broker.security.protocol";
pub const LISTENER_SECURITY_PROTOCOL_MAP: &str = "listener.security.protocol.map";
pub const BROKER_HEARTBEAT_INTERVAL_MS: &str = "broker.heartbeat.interval.ms";
pub const BROKER_SESSION_TIMEOUT_MS: &str = "broker.session.timeout.ms";
pub const QUORUM_ELECTION_TIMEOUT_MS: &str = "controller.quorum.election.timeout.ms";
pub const QUORUM_FETCH_TIMEOUT_MS: &str = "controller.quorum.fetch.timeout.ms";
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
pub const METADATA_LOG_DIR: &str = "metadata.log.dir";
pub const METADATA_SNAPSHOT_RECORD_BYTES: &str = "metadata.log.max.record.bytes.between.snapshots";

/// Kafka's `listener.security.protocol.map` default: every protocol named after itself.
pub const DEFAULT_SECURITY_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// The keys that make a configuration a KRaft one; any of them without `process.roles` is refused.
const KRAFT_ONLY_KEYS: &[&str] = &[
    QUORUM_VOTERS,
    QUORUM_BOOTSTRAP_SERVERS,
    CONTROLLER_LISTENER_NAMES,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's `SecurityProtocol.forName`: case-insensitive.
    pub fn from_name(name: &str) -> Option<SecurityProtocol> {
        match name.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        }
    }

    /// Kafka's `SecurityProtocol.id`, as broker registrations carry it.
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `process.roles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRoles {
    pub broker: bool,
    pub controller: bool,
}

impl ProcessRoles {
    pub const COMBINED: ProcessRoles = ProcessRoles {
        broker: true,
        controller: true,
    };

    pub fn is_combined(self) -> bool {
        self.broker && self.controller
    }
}

impl fmt::Display for ProcessRoles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.broker, self.controller) {
            (true, true) => f.write_str("broker,controller"),
            (true, false) => f.write_str("broker"),
            (false, true) => f.write_str("controller"),
            (false, false) => f.write_str(""),
        }
    }
}

/// One entry of `controller.quorum.voters`: `id@host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

/// One entry of `controller.quorum.bootstrap.servers`: `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_host_port(f, &self.host, self.port)
    }
}

/// One listener: `NAME://host:port` with the security protocol its name maps to. The name is
/// normalised to upper case, as Kafka's `ListenerName.normalised` does; an empty host means
/// every interface (bind) or "this machine's name" (advertised).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedListener {
    pub name: String,
    pub host: String,
    pub port: u16,
    pub protocol: SecurityProtocol,
}

impl NamedListener {
    pub fn to_listener(&self) -> Listener {
        Listener {
            name: self.name.clone(),
            host: self.host.clone(),
            port: self.port,
        }
    }
}

impl fmt::Display for NamedListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.name)?;
        write_host_port(f, &self.host, self.port)
    }
}

fn write_host_port(f: &mut fmt::Formatter<'_>, host: &str, port: u16) -> fmt::Result {
    if host.contains(':') {
        write!(f, "[{host}]:{port}")
    } else {
        write!(f, "{host}:{port}")
    }
}

/// The KRaft side of a node's configuration, validated.
#[derive(Debug, Clone)]
pub struct KraftConfig {
    /// No `process.roles` was given: today's single node. The roles are broker and controller,
    /// the quorum is this node alone ([`KraftConfig::voter_ids`]) and nothing binds a
    /// controller listener; `voters` and `bootstrap_servers` are empty.
    pub standalone: bool,
    pub roles: ProcessRoles,
    pub node_id: i32,
    /// `controller.quorum.voters` in the order written (static quorum); empty when the quorum is
    /// found through `controller.quorum.bootstrap.servers`.
    pub voters: Vec<Voter>,
    pub bootstrap_servers: Vec<HostPort>,
    /// `listeners`, in the order written.
    pub listeners: Vec<NamedListener>,
    /// What this node tells others to connect to, one per listener name: broker listeners from
    /// `advertised.listeners` (else `listeners`), controller listeners from
    /// `advertised.listeners` where named there, else the listener itself (a `0.0.0.0` host
    /// becomes empty), as Kafka's `effectiveAdvertised*Listeners` do.
    pub advertised_listeners: Vec<NamedListener>,
    /// `controller.listener.names`, upper-cased, in order (the first is the one used to reach
    /// the controllers).
    pub controller_listener_names: Vec<String>,
    /// `inter.broker.listener.name`, else the listener named after
    /// `inter.broker.security.protocol` (PLAINTEXT).
    pub inter_broker_listener_name: String,
    /// The effective `listener.security.protocol.map`, keys upper-cased.
    pub security_protocol_map: BTreeMap<String, SecurityProtocol>,
    pub broker_heartbeat_interval_ms: u64,
    pub broker_session_timeout_ms: u64,
    pub election_timeout_ms: u64,
    pub fetch_timeout_ms: u64,
    pub unclean_leader_election_enable: bool,
    /// `metadata.log.dir`, else the first of `log.dirs`.
    pub metadata_log_dir: PathBuf,
    /// `metadata.log.max.record.bytes.between.snapshots`: the controller snapshots the image
    /// once the entries applied since the last snapshot hold this many bytes (or
    /// `METADATA_SNAPSHOT_ENTRIES` entries, whichever comes first).
    pub metadata_snapshot_record_bytes: u64,
}

impl KraftConfig {
    pub fn is_broker(&self) -> bool {
        self.roles.broker
    }

    pub fn is_controller(&self) -> bool {
        self.roles.controller
    }

    fn is_controller_name(&self, name: &str) -> bool {
        self.controller_listener_names.iter().any(|n| n == name)
    }

    /// The listeners that serve clients and other brokers (every listener not named in
    /// `controller.listener.names`); empty for a controller-only node.
    pub fn client_listeners(&self) -> Vec<&NamedListener> {
        if !self.roles.broker {
            return Vec::new();
        }
        self.listeners
            .iter()
            .filter(|l| !self.is_controller_name(&l.name))
            .collect()
    }

    /// Every controller listener this node binds, in `controller.listener.names` order; empty
    /// unless the node has the controller role (and for a standalone node).
    pub fn controller_listeners(&self) -> Vec<&NamedListener> {
        if !self.roles.controller {
            return Vec::new();
        }
        self.controller_listener_names
            .iter()
            .filter_map(|name| self.listeners.iter().find(|l| &l.name == name))
            .collect()
    }

    /// The controller listener to bind for the quorum (the first of
    /// [`KraftConfig::controller_listeners`]), if this node has the controller role.
    pub fn controller_listener(&self) -> Option<&NamedListener> {
        self.controller_listeners().into_iter().next()
    }

    /// The listener name brokers and controllers use to reach the controllers: the first of
    /// `controller.listener.names`.
    pub fn controller_connect_listener_name(&self) -> Option<&str> {
        self.controller_listener_names.first().map(String::as_str)
    }

    /// The security protocol of [`KraftConfig::controller_connect_listener_name`], as
    /// `listener.security.protocol.map` gives it.
    pub fn controller_connect_protocol(&self) -> Option<SecurityProtocol> {
        let name = self.controller_connect_listener_name()?;
        self.security_protocol_map.get(name).copied()
    }

    /// This node's entry in `controller.quorum.voters`, if it is a static voter.
    pub fn local_voter(&self) -> Option<&Voter> {
        self.voters.iter().find(|v| v.id == self.node_id)
    }

    /// Every voter except this node.
    pub fn other_voters(&self) -> impl Iterator<Item = &Voter> {
        self.voters.iter().filter(move |v| v.id != self.node_id)
    }

    /// The ids of the voters of the metadata quorum: this node alone when standalone, else the
    /// static `controller.quorum.voters` (empty when the quorum is found through
    /// `controller.quorum.bootstrap.servers`).
    pub fn voter_ids(&self) -> Vec<i32> {
        if self.standalone {
            vec![self.node_id]
        } else {
            self.voters.iter().map(|v| v.id).collect()
        }
    }

    /// The advertised endpoint of one listener (by name, any case), see
    /// [`KraftConfig::advertised_listeners`].
    pub fn advertised(&self, listener_name: &str) -> Option<&NamedListener> {
        let name = listener_name.to_ascii_uppercase();
        self.advertised_listeners.iter().find(|l| l.name == name)
    }

    /// The advertised broker endpoints, for this broker's registration (every listener name a
    /// client may ask Metadata about).
    pub fn advertised_broker_listeners(&self) -> Vec<&NamedListener> {
        self.advertised_listeners
            .iter()
            .filter(|l| !self.is_controller_name(&l.name))
            .collect()
    }

    /// The advertised endpoint other brokers replicate from: that of
    /// `inter.broker.listener.name` (validated to exist for a broker).
    pub fn inter_broker_endpoint(&self) -> Option<&NamedListener> {
        self.advertised(&self.inter_broker_listener_name)
    }
}

/// What [`parse`] gives `BrokerConfig::from_raw`.
pub(crate) struct Parsed {
    pub kraft: KraftConfig,
    /// The client listener (the first non-controller listener; for a controller-only node the
    /// controller listener).
    pub listener: Listener,
    /// Its entry in `advertised.listeners`, if there is one.
    pub advertised_listener: Option<Listener>,
    /// Every listener this node serves clients and other brokers on (each non-controller
    /// listener, in the order written; the first is `listener`); empty for a controller-only
    /// node.
    pub client_listeners: Vec<NamedListener>,
}

fn conflict(keys: &[&str], reason: impl Into<String>) -> ConfigError {
    ConfigError::Conflict {
        keys: keys.join(", "),
        reason: reason.into(),
    }
}

fn invalid(raw: &RawConfig, key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        value: raw.get(key).unwrap_or_default().to_owned(),
        reason: reason.into(),
    }
}

/// Kafka's `Csv.parseCsvList`: split on commas, trim, drop empty entries.
fn csv(text: &str) -> Vec<&str> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_of<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    format!("Set({})", items.join(", "))
}

/// Kafka's host characters (`Utils.VALID_HOST_CHARACTERS`).
fn valid_host(host: &str) -> bool {
    host.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '%' | '.' | '_' | ':'))
}

/// `host:port` or `[v6]:port` as Kafka's `Utils.getHost`/`getPort` read it.
fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port = if !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()) {
        port.parse::<u16>().ok()
    } else {
        None
    };
    Some((host.to_owned(), port))
}

fn parse_listener_list(
    raw: &RawConfig,
    key: &str,
    text: &str,
    map: &BTreeMap<String, SecurityProtocol>,
) -> Result<Vec<NamedListener>, ConfigError> {
    let mut out: Vec<NamedListener> = Vec::new();
    for entry in csv(text) {
        let malformed = || {
            invalid(
                raw,
                key,
                format!("Unable to parse {entry} to a broker endpoint"),
            )
        };
        let (name, rest) = entry.split_once("://").ok_or_else(malformed)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(malformed)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if name.trim().is_empty() || !valid_host(host) {
            return Err(malformed());
        }
        let port: u16 = port.parse().map_err(|_| {
            invalid(
                raw,
                key,
                format!("port `{port}` of {entry} is not a port number (0 to 65535)"),
            )
        })?;
        let name = name.trim().to_ascii_uppercase();
        let protocol = *map.get(&name).ok_or_else(|| {
            conflict(
                &[key, LISTENER_SECURITY_PROTOCOL_MAP],
                format!(
                    "Error creating broker listeners from '{text}': No security protocol defined \
                     for listener {name}"
                ),
            )
        })?;
        if out.iter().any(|l| l.name == name) {
            return Err(invalid(
                raw,
                key,
                format!("Each listener must have a different name, listeners: {text}"),
            ));
        }
        out.push(NamedListener {
            name,
            host: host.to_owned(),
            port,
            protocol,
        });
    }
    Ok(out)
}

/// Kafka's rule for `listeners` (not `advertised.listeners`): distinct ports, except port 0 and
/// one IPv4 plus one IPv6 address on the same port.
fn check_distinct_ports(
    raw: &RawConfig,
    listeners: &[NamedListener],
    text: &str,
) -> Result<(), ConfigError> {
    let mut by_port: BTreeMap<u16, Vec<&NamedListener>> = BTreeMap::new();
    for l in listeners.iter().filter(|l| l.port != 0) {
        by_port.entry(l.port).or_default().push(l);
    }
    for (port, group) in by_port.into_iter().filter(|(_, g)| g.len() > 1) {
        let ips: Vec<IpAddr> = group.iter().filter_map(|l| l.host.parse().ok()).collect();
        let one_of_each =
            group.len() == 2 && ips.len() == 2 && ips.iter().filter(|ip| ip.is_ipv4()).count() == 1;
        if !one_of_each {
            return Err(invalid(
                raw,
                LISTENERS,
                format!(
                    "Each listener must have a different port unless exactly one listener has an \
                     IPv4 address and the other IPv6 address, listeners: {text}, port: {port}"
                ),
            ));
        }
    }
    Ok(())
}

fn parse_roles(raw: &RawConfig, text: &str) -> Result<ProcessRoles, ConfigError> {
    let mut roles = ProcessRoles {
        broker: false,
        controller: false,
    };
    let entries = csv(text);
    for role in &entries {
        let seen = match *role {
            "broker" => std::mem::replace(&mut roles.broker, true),
            "controller" => std::mem::replace(&mut roles.controller, true),
            other => {
                return Err(invalid(
                    raw,
                    PROCESS_ROLES,
                    format!(
                        "Unknown process role '{other}' (only 'broker' and 'controller' are \
                         allowed roles)"
                    ),
                ))
            }
        };
        if seen {
            return Err(invalid(
                raw,
                PROCESS_ROLES,
                format!(
                    "Duplicate role names found in `process.roles`: [{}]",
                    entries.join(", ")
                ),
            ));
        }
    }
    if !roles.broker && !roles.controller {
        return Err(invalid(
            raw,
            PROCESS_ROLES,
            "must be broker, controller or broker,controller",
        ));
    }
    Ok(roles)
}

fn parse_voters(raw: &RawConfig, text: &str) -> Result<Vec<Voter>, ConfigError> {
    let mut voters: Vec<Voter> = Vec::new();
    if text.trim().is_empty() {
        return Ok(voters);
    }
    const FORM: &str = "Each entry should be in the form `{id}@{host}:{port}`.";
    for entry in text.split(',').map(str::trim) {
        let Some((id, address)) = entry.split_once('@').filter(|(_, a)| !a.contains('@')) else {
            return Err(invalid(
                raw,
                QUORUM_VOTERS,
                format!("Invalid configuration value for controller.quorum.voters. {FORM}"),
            ));
        };
        let id: i32 = id.trim().parse().map_err(|_| {
            invalid(
                raw,
                QUORUM_VOTERS,
                format!("Failed to parse voter ID as an integer from {id}"),
            )
        })?;
        if id < 0 {
            return Err(invalid(
                raw,
                QUORUM_VOTERS,
                format!("voter id {id} in {entry} is negative; node ids are at least 0"),
            ));
        }
        let (host, port) = split_host_port(address).unwrap_or_default();
        if host.is_empty() || !valid_host(&host) {
            return Err(invalid(
                raw,
                QUORUM_VOTERS,
                format!(
                    "Failed to parse host name from entry {entry} for the configuration \
                     controller.quorum.voters. {FORM}"
                ),
            ));
        }
        let Some(port) = port else {
            return Err(invalid(
                raw,
                QUORUM_VOTERS,
                format!(
                    "Failed to parse host port from entry {entry} for the configuration \
                     controller.quorum.voters. {FORM}"
                ),
            ));
        };
        if host == "0.0.0.0" {
            return Err(invalid(
                raw,
                QUORUM_VOTERS,
                "Host string (0.0.0.0) is not routeable",
            ));
        }
        if voters.iter().any(|v| v.id == id) {
            return Err(invalid(
                raw,
                QUORUM_VOTERS,
                format!("voter id {id} appears more than once"),
            ));
        }
        voters.push(Voter { id, host, port });
    }
    Ok(voters)
}

fn parse_bootstrap_servers(raw: &RawConfig, text: &str) -> Result<Vec<HostPort>, ConfigError> {
    let mut out = Vec::new();
    const FORM: &str = "Each entry should be in the form \"{host}:{port}\"";
    for entry in csv(text) {
        let (host, port) = split_host_port(entry).unwrap_or_default();
        if host.is_empty() || !valid_host(&host) {
            return Err(invalid(
                raw,
                QUORUM_BOOTSTRAP_SERVERS,
                format!(
                    "Failed to parse host name from {entry} for the configuration \
                     controller.quorum.bootstrap.servers. {FORM}"
                ),
            ));
        }
        let Some(port) = port else {
            return Err(invalid(
                raw,
                QUORUM_BOOTSTRAP_SERVERS,
                format!(
                    "Failed to parse host port from {entry} for the configuration \
                     controller.quorum.bootstrap.servers. {FORM}"
                ),
            ));
        };
        out.push(HostPort { host, port });
    }
    Ok(out)
}

/// Kafka's `effectiveListenerSecurityProtocolMap`: the map as written (or Kafka's default), and
/// when it is not written and no SSL/SASL name is in sight, every controller listener name maps to
/// PLAINTEXT.
fn security_protocol_map(
    raw: &RawConfig,
    controller_names: &[String],
) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let explicit = raw.get(LISTENER_SECURITY_PROTOCOL_MAP);
    let text = super::Reader { raw }
        .value(LISTENER_SECURITY_PROTOCOL_MAP)
        .unwrap_or_default();
    let mut map = BTreeMap::new();
    for entry in csv(text) {
        let Some((name, protocol)) = entry.rsplit_once(':') else {
            return Err(invalid(
                raw,
                LISTENER_SECURITY_PROTOCOL_MAP,
                format!("Error parsing configuration property 'listener.security.protocol.map': entry `{entry}` is not NAME:PROTOCOL"),
            ));
        };
        let protocol = SecurityProtocol::from_name(protocol.trim()).ok_or_else(|| {
            invalid(
                raw,
                LISTENER_SECURITY_PROTOCOL_MAP,
                format!(
                    "Invalid security protocol `{}` defined in listener.security.protocol.map",
                    protocol.trim()
                ),
            )
        })?;
        if name.trim().is_empty() {
            return Err(invalid(
                raw,
                LISTENER_SECURITY_PROTOCOL_MAP,
                "The provided listener name is null or empty string",
            ));
        }
        map.insert(name.trim().to_ascii_uppercase(), protocol);
    }
    if explicit.is_none() {
        let ssl_or_sasl = |name: &str| matches!(name, "SSL" | "SASL_SSL" | "SASL_PLAINTEXT");
        let listener_names: Vec<String> = csv(raw.get(LISTENERS).unwrap_or_default())
            .iter()
            .map(|l| l.split(':').next().unwrap_or_default().to_ascii_uppercase())
            .collect();
        if !controller_names.iter().any(|n| ssl_or_sasl(n))
            && !listener_names.iter().any(|n| ssl_or_sasl(n))
        {
            for name in controller_names {
                map.entry(name.clone())
                    .or_insert(SecurityProtocol::Plaintext);
            }
        }
    }
    Ok(map)
}

/// Parses and checks the KRaft keys. `node_id` is the one `from_raw` read (node.id, else
/// broker.id, else 1); `log_dirs` gives the metadata log dir its default.
pub(crate) fn parse(
    raw: &RawConfig,
    node_id: i32,
    log_dirs: &[PathBuf],
    warnings: &mut Vec<String>,
) -> Result<Parsed, ConfigError> {
    // node.id and broker.id are synonyms; both set means both must agree.
    if let (Some(n), Some(b)) = (raw.get(NODE_ID), raw.get(BROKER_ID)) {
        if n.trim() != b.trim() {
            return Err(conflict(
                &[NODE_ID, BROKER_ID],
                "You must set `node.id` to the same value as `broker.id`.",
            ));
        }
    }

    let roles = match raw.get(PROCESS_ROLES) {
        Some(text) => Some(parse_roles(raw, text)?),
        None => None,
    };
    let standalone = roles.is_none();
    if standalone {
        if let Some(key) = KRAFT_ONLY_KEYS.iter().find(|k| raw.get(k).is_some()) {
            return Err(conflict(
                &[PROCESS_ROLES, key],
                format!(
                    "{key} is set but process.roles is not: set process.roles \
                     (broker,controller for a combined node), or remove {key} to run a single \
                     node"
                ),
            ));
        }
    } else if raw.get(NODE_ID).is_none() && raw.get(BROKER_ID).is_none() {
        return Err(conflict(
            &[NODE_ID, PROCESS_ROLES],
            "Missing required configuration \"node.id\" which has no default value.",
        ));
    }
    let roles = roles.unwrap_or(ProcessRoles::COMBINED);

    let controller_names: Vec<String> = csv(raw.get(CONTROLLER_LISTENER_NAMES).unwrap_or_default())
        .iter()
        .map(|n| n.to_ascii_uppercase())
        .collect();
    let map = security_protocol_map(raw, &controller_names)?;

    let listeners_text = raw
        .get(LISTENERS)
        .or_else(|| super::broker_config_def(LISTENERS).and_then(|d| d.default))
        .unwrap_or_default()
        .to_owned();
    let listeners = parse_listener_list(raw, LISTENERS, &listeners_text, &map)?;
    check_distinct_ports(raw, &listeners, &listeners_text)?;

    let advertised_text = raw.get(ADVERTISED_LISTENERS);
    let advertised_written = match advertised_text {
        Some(text) => parse_listener_list(raw, ADVERTISED_LISTENERS, text, &map)?,
        None => Vec::new(),
    };

    let is_controller_name = |name: &str| controller_names.iter().any(|n| n == name);

    // Kafka's effectiveAdvertisedBrokerListeners and effectiveAdvertisedControllerListeners.
    let advertised_brokers: Vec<NamedListener> = if advertised_text.is_some() {
        &advertised_written
    } else {
        &listeners
    }
    .iter()
    .filter(|l| !is_controller_name(&l.name))
    .cloned()
    .collect();
    let advertised_controllers: Vec<NamedListener> = controller_names
        .iter()
        .filter_map(|name| {
            advertised_written
                .iter()
                .find(|l| &l.name == name)
                .cloned()
                .or_else(|| {
                    listeners.iter().find(|l| &l.name == name).map(|l| {
                        let mut l = l.clone();
                        if l.host == "0.0.0.0" {
                            l.host.clear();
                        }
                        l
                    })
                })
        })
        .collect();
    if advertised_brokers
        .iter()
        .chain(&advertised_controllers)
        .any(|l| l.host == "0.0.0.0")
    {
        return Err(invalid(
            raw,
            ADVERTISED_LISTENERS,
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a \
             routable IP address.",
        ));
    }

    // The inter-broker listener: named, or the one named after inter.broker.security.protocol.
    let inter_broker_listener_name = match raw.get(INTER_BROKER_LISTENER_NAME) {
        Some(name) => {
            if raw.get(INTER_BROKER_SECURITY_PROTOCOL).is_some() {
                return Err(conflict(
                    &[INTER_BROKER_LISTENER_NAME, INTER_BROKER_SECURITY_PROTOCOL],
                    "Only one of inter.broker.listener.name and inter.broker.security.protocol \
                     should be set.",
                ));
            }
            let name = name.trim().to_ascii_uppercase();
            match map.get(&name) {
                None => {
                    return Err(conflict(
                        &[INTER_BROKER_LISTENER_NAME, LISTENER_SECURITY_PROTOCOL_MAP],
                        format!(
                            "Listener with name {name} defined in inter.broker.listener.name not \
                             found in listener.security.protocol.map."
                        ),
                    ))
                }
                // Any protocol: the inter-broker client speaks TLS and SASL too.
                Some(_) => {}
            }
            name
        }
        None => {
            let text = super::Reader { raw }
                .value(INTER_BROKER_SECURITY_PROTOCOL)
                .unwrap_or_default();
            match SecurityProtocol::from_name(text.trim()) {
                Some(protocol) => protocol.name().to_owned(),
                None => {
                    return Err(invalid(
                        raw,
                        INTER_BROKER_SECURITY_PROTOCOL,
                        format!(
                            "Invalid security protocol `{}` defined in \
                             inter.broker.security.protocol",
                            text.trim()
                        ),
                    ))
                }
            }
        }
    };

    let voters = match raw.get(QUORUM_VOTERS) {
        Some(text) => parse_voters(raw, text)?,
        None => Vec::new(),
    };
    let bootstrap_servers = match raw.get(QUORUM_BOOTSTRAP_SERVERS) {
        Some(text) => parse_bootstrap_servers(raw, text)?,
        None => Vec::new(),
    };

    let listener_names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
    let voter_ids = || set_of(voters.iter().map(|v| v.id));

    if !standalone {
        if voters.is_empty() && bootstrap_servers.is_empty() {
            return Err(conflict(
                &[PROCESS_ROLES, QUORUM_BOOTSTRAP_SERVERS, QUORUM_VOTERS],
                "If using process.roles, either controller.quorum.bootstrap.servers must contain \
                 the set of bootstrap controllers or controller.quorum.voters must contain a \
                 parseable set of controllers.",
            ));
        }
        let controller_listeners_in_listeners: Vec<&NamedListener> = listeners
            .iter()
            .filter(|l| is_controller_name(&l.name))
            .collect();
        if roles.controller {
            if !voters.is_empty() && !voters.iter().any(|v| v.id == node_id) {
                return Err(conflict(
                    &[PROCESS_ROLES, NODE_ID, QUORUM_VOTERS],
                    format!(
                        "If process.roles contains the 'controller' role, the node id {node_id} \
                         must be included in the set of voters controller.quorum.voters={}",
                        voter_ids()
                    ),
                ));
            }
            if !roles.broker {
                if controller_listeners_in_listeners.len() != listeners.len() {
                    return Err(conflict(
                        &[LISTENERS, CONTROLLER_LISTENER_NAMES, PROCESS_ROLES],
                        "The listeners config must only contain KRaft controller listeners from \
                         controller.listener.names when process.roles=controller",
                    ));
                }
                if let Some(name) = raw.get(INTER_BROKER_LISTENER_NAME) {
                    if is_controller_name(&name.trim().to_ascii_uppercase()) {
                        return Err(conflict(
                            &[
                                CONTROLLER_LISTENER_NAMES,
                                INTER_BROKER_LISTENER_NAME,
                                PROCESS_ROLES,
                            ],
                            "controller.listener.names must not contain an explicitly set \
                             inter.broker.listener.name configuration value when \
                             process.roles=controller'",
                        ));
                    }
                }
            }
            if advertised_controllers.is_empty() {
                return Err(conflict(
                    &[CONTROLLER_LISTENER_NAMES, LISTENERS],
                    "controller.listener.names must contain at least one value appearing in the \
                     'listeners' configuration when running the KRaft controller role",
                ));
            }
            if !controller_names
                .iter()
                .all(|n| listener_names.contains(&n.as_str()))
            {
                return Err(conflict(
                    &[CONTROLLER_LISTENER_NAMES, LISTENERS],
                    "controller.listener.names must only contain values appearing in the \
                     'listeners' configuration when running the KRaft controller role",
                ));
            }
            // KafkaIQ's own rule: the other voters reach this node at its voter entry, so the
            // entry must be where this node's controller listener is.
            if let Some(local) = voters.iter().find(|v| v.id == node_id) {
                let advertised = &advertised_controllers[0];
                let bound = controller_listeners_in_listeners
                    .iter()
                    .find(|l| l.name == advertised.name)
                    .map(|l| l.port)
                    .unwrap_or(advertised.port);
                let others = voters.len() > 1;
                let port_ok = if bound == 0 {
                    !others
                } else {
                    advertised.port == local.port
                };
                let host_ok = match (
                    advertised.host.parse::<IpAddr>(),
                    local.host.parse::<IpAddr>(),
                ) {
                    (Ok(a), Ok(v)) => a == v || a.is_unspecified(),
                    _ => true,
                };
                if !port_ok || !host_ok {
                    return Err(conflict(
                        &[QUORUM_VOTERS, LISTENERS, ADVERTISED_LISTENERS],
                        format!(
                            "controller.quorum.voters gives node {node_id} the address {}, but \
                             its controller listener is advertised as {advertised}: the other \
                             voters could not reach it; make the voter entry and the {} \
                             listener agree",
                            HostPort {
                                host: local.host.clone(),
                                port: local.port
                            },
                            advertised.name
                        ),
                    ));
                }
            }
        } else {
            // Broker only.
            if voters.iter().any(|v| v.id == node_id) {
                return Err(conflict(
                    &[PROCESS_ROLES, NODE_ID, QUORUM_VOTERS],
                    format!(
                        "If process.roles contains just the 'broker' role, the node id {node_id} \
                         must not be included in the set of voters controller.quorum.voters={}",
                        voter_ids()
                    ),
                ));
            }
            if controller_names.is_empty() {
                return Err(conflict(
                    &[CONTROLLER_LISTENER_NAMES, PROCESS_ROLES],
                    "controller.listener.names must contain at least one value when running \
                     KRaft with just the broker role",
                ));
            }
            if !controller_listeners_in_listeners.is_empty() {
                return Err(conflict(
                    &[CONTROLLER_LISTENER_NAMES, LISTENERS, PROCESS_ROLES],
                    "controller.listener.names must not contain a value appearing in the \
                     'listeners' configuration when running KRaft with just the broker role",
                ));
            }
            // Any protocol, as in Kafka: `BrokerConfig::controller_client` reads how to reach
            // it.
            for name in &controller_names {
                if !map.contains_key(name) {
                    return Err(conflict(
                        &[CONTROLLER_LISTENER_NAMES, LISTENER_SECURITY_PROTOCOL_MAP],
                        format!(
                            "Controller listener with name {name} defined in \
                             controller.listener.names not found in \
                             listener.security.protocol.map  (an explicit security mapping \
                             for each controller listener is required if \
                             listener.security.protocol.map is non-empty, or if there are \
                             security protocols other than PLAINTEXT in use)"
                        ),
                    ));
                }
            }
            if controller_names.len() > 1 {
                warnings.push(format!(
                    "controller.listener.names has multiple entries; only the first will be used \
                     since process.roles=broker: [{}]",
                    controller_names.join(", ")
                ));
            }
        }
    }

    if roles.broker {
        let advertised_names: Vec<&str> =
            advertised_brokers.iter().map(|l| l.name.as_str()).collect();
        if advertised_names.is_empty() {
            return Err(conflict(
                &[LISTENERS, ADVERTISED_LISTENERS, CONTROLLER_LISTENER_NAMES],
                "There must be at least one broker advertised listener. Perhaps all listeners \
                 appear in controller.listener.names?",
            ));
        }
        if !advertised_names.contains(&inter_broker_listener_name.as_str()) {
            return Err(conflict(
                &[INTER_BROKER_LISTENER_NAME, ADVERTISED_LISTENERS],
                format!(
                    "inter.broker.listener.name must be a listener name defined in \
                     advertised.listeners. The valid options based on currently configured \
                     listeners are {}",
                    advertised_names.join(",")
                ),
            ));
        }
        if let Some(extra) = advertised_names
            .iter()
            .find(|n| !listener_names.contains(n))
        {
            return Err(conflict(
                &[ADVERTISED_LISTENERS, LISTENERS],
                format!(
                    "advertised.listeners listener names must be equal to or a subset of the ones \
                     defined in listeners. Found {}. The valid options based on the current \
                     configuration are {} ({extra} is not a listener)",
                    advertised_names.join(","),
                    listener_names.join(",")
                ),
            ));
        }
    }

    // The client listener BrokerConfig::listener keeps meaning.
    let listener = if roles.broker {
        listeners
            .iter()
            .find(|l| !is_controller_name(&l.name))
            .ok_or_else(|| invalid(raw, LISTENERS, "no client listener"))?
    } else {
        listeners
            .iter()
            .find(|l| is_controller_name(&l.name))
            .ok_or_else(|| invalid(raw, LISTENERS, "no controller listener"))?
    };
    let advertised_listener = match advertised_text {
        None => None,
        Some(_) => {
            let found = advertised_written
                .iter()
                .find(|l| l.name == listener.name)
                .map(NamedListener::to_listener);
            if found.is_none() && standalone {
                return Err(invalid(
                    raw,
                    ADVERTISED_LISTENERS,
                    format!("no entry for listener {}", listener.name),
                ));
            }
            found
        }
    };

    let r = super::Reader { raw };
    let broker_heartbeat_interval_ms = r.i32(BROKER_HEARTBEAT_INTERVAL_MS)? as u64;
    let broker_session_timeout_ms = r.i32(BROKER_SESSION_TIMEOUT_MS)? as u64;
    if broker_session_timeout_ms <= broker_heartbeat_interval_ms {
        warnings.push(format!(
            "broker.session.timeout.ms={broker_session_timeout_ms} is not longer than \
             broker.heartbeat.interval.ms={broker_heartbeat_interval_ms}: every broker will be \
             fenced between two heartbeats"
        ));
    }
    let election_timeout_ms = r.i32(QUORUM_ELECTION_TIMEOUT_MS)? as u64;
    let fetch_timeout_ms = r.i32(QUORUM_FETCH_TIMEOUT_MS)? as u64;
    let unclean_leader_election_enable = r.bool(UNCLEAN_LEADER_ELECTION_ENABLE)?;
    let metadata_log_dir = match raw.get(METADATA_LOG_DIR).map(str::trim) {
        Some("") => return Err(invalid(raw, METADATA_LOG_DIR, "must not be empty")),
        Some(dir) => PathBuf::from(dir),
        None => log_dirs[0].clone(),
    };
    let metadata_snapshot_record_bytes = r.i64(METADATA_SNAPSHOT_RECORD_BYTES)? as u64;

    let client_listeners: Vec<NamedListener> = if roles.broker {
        listeners
            .iter()
            .filter(|l| !is_controller_name(&l.name))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let listener = listener.to_listener();
    let mut advertised_listeners = advertised_brokers;
    advertised_listeners.extend(advertised_controllers);
    Ok(Parsed {
        kraft: KraftConfig {
            standalone,
            roles,
            node_id,
            voters,
            bootstrap_servers,
            listeners,
            advertised_listeners,
            controller_listener_names: controller_names,
            inter_broker_listener_name,
            security_protocol_map: map,
            broker_heartbeat_interval_ms,
            broker_session_timeout_ms,
            election_timeout_ms,
            fetch_timeout_ms,
            unclean_leader_election_enable,
            metadata_log_dir,
            metadata_snapshot_record_bytes,
        },
        listener,
        advertised_listener,
        client_listeners,
    })
}

#[cfg(test)]
mod tests;
