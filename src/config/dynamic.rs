//! Dynamic broker configs (Kafka's `DynamicBrokerConfig`): the keys IncrementalAlterConfigs may
//! set on a BROKER resource — per broker (resource name = the node id) or as the cluster default
//! (empty name) — kept in the metadata log as `BrokerConfig` records, and the configuration the
//! broker runs with once they are laid over `server.properties`. Precedence, as in Kafka: per
//! broker, then cluster default, then the static file, then the key's default.
//!
//! Only the keys that KafkaIQ acts on are dynamic here; Kafka's other dynamic keys (thread
//! pools, listeners, SASL) are refused like its read-only keys, with INVALID_REQUEST
//! "Cannot update these configs dynamically". The log cleaner's keys are dynamic as in Kafka:
//! its own (`LogCleaner.ReconfigurableConfigs`) restart its threads, the topic defaults
//! (`log.cleanup.policy`, `log.cleaner.min.cleanable.ratio`, …) apply to every hosted log.
//!
//! A listener's key and trust stores are dynamic per broker, as Kafka's reconfigurable SSL
//! keys (`SslConfigs.RECONFIGURABLE_CONFIGS`) are: `listener.name.<l>.ssl.keystore.*` and
//! `.ssl.truststore.*` on the broker's own resource. The broker the change is sent to loads the
//! new stores before the controller commits it ([`check_listener_stores`]); once the image
//! holds it, new TLS handshakes on that listener use them (`server::listener_tls`).

use std::collections::BTreeMap;

use super::{inter_broker, security, BrokerConfig, ConfigError};

/// `leader.replication.throttled.rate` / `follower.replication.throttled.rate` default
/// (Kafka's `QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT`, Long.MAX_VALUE: unthrottled).
pub const THROTTLED_RATE_DEFAULT: &str = "9223372036854775807";

/// The keys a BROKER resource may set at runtime.
pub const DYNAMIC_BROKER_KEYS: &[&str] = &[
    "message.max.bytes",
    "log.retention.ms",
    "log.retention.minutes",
    "log.retention.hours",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.roll.ms",
    "log.roll.hours",
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "log.cleanup.policy",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
];

/// Keys that are dynamic but not in `server.properties` definitions: (key, default).
const DYNAMIC_ONLY_KEYS: &[(&str, &str)] = &[
    ("leader.replication.throttled.rate", THROTTLED_RATE_DEFAULT),
    (
        "follower.replication.throttled.rate",
        THROTTLED_RATE_DEFAULT,
    ),
];

/// Kafka's `SslConfigs.RECONFIGURABLE_CONFIGS`: the SSL keys a listener may change at runtime,
/// each only with its `listener.name.<l>.` prefix and only per broker.
pub const LISTENER_SSL_KEYS: &[&str] = &[
    security::SSL_KEYSTORE_TYPE,
    security::SSL_KEYSTORE_LOCATION,
    security::SSL_KEYSTORE_PASSWORD,
    security::SSL_KEY_PASSWORD,
    security::SSL_TRUSTSTORE_TYPE,
    security::SSL_TRUSTSTORE_LOCATION,
    security::SSL_TRUSTSTORE_PASSWORD,
    security::SSL_KEYSTORE_CERTIFICATE_CHAIN,
    security::SSL_KEYSTORE_KEY,
    security::SSL_TRUSTSTORE_CERTIFICATES,
];

/// Those of [`LISTENER_SSL_KEYS`] Kafka types PASSWORD: DescribeConfigs answers them as
/// sensitive, with no value, and they are never echoed.
const PASSWORD_SSL_KEYS: &[&str] = &[
    security::SSL_KEYSTORE_PASSWORD,
    security::SSL_KEY_PASSWORD,
    security::SSL_TRUSTSTORE_PASSWORD,
    security::SSL_KEYSTORE_CERTIFICATE_CHAIN,
    security::SSL_KEYSTORE_KEY,
    security::SSL_TRUSTSTORE_CERTIFICATES,
];

/// `listener.name.<l>.<key>` with `<key>` in [`LISTENER_SSL_KEYS`]: (listener, key).
pub fn listener_ssl_key(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("listener.name.")?;
    let (listener, key) = rest.split_once('.')?;
    (!listener.is_empty() && LISTENER_SSL_KEYS.contains(&key)).then_some((listener, key))
}

/// A key whose value is secret (Kafka's PASSWORD type), plain or listener-prefixed.
pub fn is_password(name: &str) -> bool {
    let base = listener_ssl_key(name).map_or(name, |(_, k)| k);
    PASSWORD_SSL_KEYS.contains(&base)
        || base.ends_with(".password")
        || base.ends_with("sasl.jaas.config")
}

pub fn is_dynamic(key: &str) -> bool {
    DYNAMIC_BROKER_KEYS.contains(&key) || listener_ssl_key(key).is_some()
}

/// Kafka's `DynamicBrokerConfig.validateConfigs` refusals of keys that are dynamic only in
/// some form: an SSL key without its listener prefix, and a listener's SSL key on the cluster
/// default (`per_broker` false). The message names the keys, as Kafka's does.
pub fn refuse_listener_keys(per_broker: bool, names: &[&str]) -> Result<(), String> {
    let unprefixed: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| LISTENER_SSL_KEYS.contains(n))
        .collect();
    if !unprefixed.is_empty() {
        return Err(format!(
            "These security configs can be dynamically updated only per-listener using the \
             listener prefix: Set({})",
            unprefixed.join(", ")
        ));
    }
    let per_listener: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| listener_ssl_key(n).is_some())
        .collect();
    if !per_broker && !per_listener.is_empty() {
        return Err(format!(
            "Cannot update these configs at default cluster level, broker id must be specified: \
             Set({})",
            per_listener.join(", ")
        ));
    }
    Ok(())
}

/// The default of a dynamic-only key, `None` for keys defined in `server.properties`.
pub fn dynamic_only_default(key: &str) -> Option<&'static str> {
    DYNAMIC_ONLY_KEYS
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, d)| *d)
}

/// Where a broker key's value comes from (Kafka's `ConfigEntry.ConfigSource` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerSource {
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
}

/// The dynamic layers that apply to node `node_id`: (per broker, cluster default).
pub fn layers(
    broker_configs: &BTreeMap<String, BTreeMap<String, String>>,
    node_id: i32,
) -> [(BrokerSource, Option<&BTreeMap<String, String>>); 2] {
    [
        (
            BrokerSource::DynamicBroker,
            broker_configs.get(&node_id.to_string()),
        ),
        (BrokerSource::DynamicDefaultBroker, broker_configs.get("")),
    ]
}

/// Every value of `key` from the highest precedence down, with its source: Kafka's synonyms.
pub fn synonyms(
    config: &BrokerConfig,
    broker_configs: &BTreeMap<String, BTreeMap<String, String>>,
    key: &str,
) -> Vec<(String, BrokerSource)> {
    let mut out: Vec<(String, BrokerSource)> = layers(broker_configs, config.node_id)
        .into_iter()
        .filter_map(|(source, layer)| Some((layer?.get(key)?.clone(), source)))
        .collect();
    if config.is_set(key) {
        out.extend(
            config
                .value_of(key)
                .map(|v| (v, BrokerSource::StaticBroker)),
        );
    }
    let default = dynamic_only_default(key)
        .map(str::to_owned)
        .or_else(|| super::broker_config_def(key).and_then(|d| d.default.map(str::to_owned)));
    out.extend(default.map(|v| (v, BrokerSource::Default)));
    out
}

/// The configuration node `config.node_id` runs with: `server.properties` with the dynamic
/// values of the image laid over it. A value that no longer validates is an error naming its
/// key; the controller checks values before committing them, so this happens only for
/// records written by another version.
pub fn effective(
    config: &BrokerConfig,
    broker_configs: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<BrokerConfig, ConfigError> {
    effective_for(config, broker_configs, config.node_id)
}

/// The configuration node `node_id` runs with when its `server.properties` are those of
/// `config` (the controller checks a change against the values it replaces this way).
pub fn effective_for(
    config: &BrokerConfig,
    broker_configs: &BTreeMap<String, BTreeMap<String, String>>,
    node_id: i32,
) -> Result<BrokerConfig, ConfigError> {
    let overlay = overlay(broker_configs, node_id);
    if overlay.is_empty() {
        return Ok(config.clone());
    }
    let mut raw = config.raw.clone();
    for (k, v) in &overlay {
        if dynamic_only_default(k).is_none() {
            raw.set(k, v);
        }
    }
    let mut c = BrokerConfig::from_raw(raw)?.config;
    c.dynamic = overlay;
    Ok(c)
}

/// The dynamic values that apply to `node_id`, per-broker ones over the cluster default.
pub fn overlay(
    broker_configs: &BTreeMap<String, BTreeMap<String, String>>,
    node_id: i32,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (source, layer) in layers(broker_configs, node_id).into_iter().rev() {
        for (k, v) in layer.into_iter().flatten() {
            // A listener's stores are per broker; Kafka ignores them at the cluster default.
            let ignored =
                source == BrokerSource::DynamicDefaultBroker && listener_ssl_key(k).is_some();
            if is_dynamic(k) && !ignored {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// Checks one value for a dynamic key the way startup checks it: an error message naming the
/// key, or `Ok`.
pub fn check_value(config: &BrokerConfig, key: &str, value: &str) -> Result<(), String> {
    // A listener's stores are files of the broker they are set for, which loads them itself
    // before the change is sent on ([`check_listener_stores`]).
    if listener_ssl_key(key).is_some() {
        return Ok(());
    }
    if dynamic_only_default(key).is_some() {
        return match value.trim().parse::<i64>() {
            Ok(v) if v >= 0 => Ok(()),
            _ => Err(format!(
                "Invalid value {value} for configuration {key}: must be a long at least 0"
            )),
        };
    }
    let mut raw = config.raw.clone();
    raw.set(key, value);
    let next = BrokerConfig::from_raw(raw)
        .map_err(|e| e.to_string())?
        .config;
    // A broker key that is a topic config's fallback takes that config's checks too (the
    // items of `log.cleanup.policy`, for one), in the broker key's name.
    if let Some(def) = super::topic::TOPIC_CONFIG_DEFS
        .iter()
        .find(|d| d.broker_synonyms.contains(&key))
    {
        super::topic::validate(def.name, value).map_err(|e| {
            e.to_string().replace(
                &format!("configuration {}", def.name),
                &format!("configuration {key}"),
            )
        })?;
    }
    if key == "log.cleaner.threads" {
        check_cleaner_threads(config.cleaner.threads, next.cleaner.threads)?;
    }
    Ok(())
}

/// The check Kafka's `ConfigAdminManager` makes on the broker that receives a change of its own
/// listeners' stores, before the controller commits it (the files are that broker's):
/// `current` is the configuration it runs with, `static_config` its `server.properties`,
/// `layer` its whole per-broker dynamic layer as the change would leave it. Each SSL listener
/// whose `listener.name.<l>.ssl.*` values change loads its new stores with its other settings,
/// as startup does, and its certificate must keep its subject and names
/// ([`security::check_keystore_change`]; Kafka's `SslFactory#validateReconfiguration`). The
/// error names the key; passwords are never echoed.
pub fn check_listener_stores(
    static_config: &BrokerConfig,
    current: &BrokerConfig,
    layer: &BTreeMap<String, String>,
) -> Result<(), String> {
    let ssl = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.iter()
            .filter(|(k, _)| listener_ssl_key(k).is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (old, new) = (ssl(&current.dynamic), ssl(layer));
    if old == new {
        return Ok(());
    }
    let mut raw = current.raw.clone();
    for k in old.keys() {
        match static_config.raw.get(k) {
            Some(v) => raw.set(k, v),
            None => raw.remove(k),
        }
    }
    for (k, v) in &new {
        raw.set(k, v);
    }
    let changed = |name: &str| -> String {
        let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
        old.keys()
            .chain(new.keys())
            .filter(|k| k.starts_with(&prefix) && old.get(*k) != new.get(*k))
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let failed = |why: String| {
        format!("Invalid dynamic configuration: Validation of dynamic config update of SSLFactory failed: {why}")
    };
    // Every listener this node serves, the controller listener included.
    let controller = current
        .kraft
        .controller_listener()
        .zip(current.controller_listener_security.as_ref())
        .map(|(l, security)| (l.name.as_str(), security));
    let served = current
        .client_listeners
        .iter()
        .map(|l| (l.listener.name.as_str(), &l.security))
        .chain(controller);
    for (name, security) in served {
        let keys = changed(name);
        if security.tls.is_none() || keys.is_empty() {
            continue;
        }
        let next =
            security::parse(&raw, name, security.protocol).map_err(|e| failed(e.to_string()))?;
        security::check_keystore_change(&raw, name, security, &next)
            .map_err(|e| failed(format!("{keys}: {e}")))?;
    }
    // And the stores of this node's clients to the other brokers and to the controllers (on a
    // broker-only node the controller listener is only reached, not served).
    let clients = [
        (
            &current.inter_broker_client,
            inter_broker::Channel::InterBroker,
        ),
        (
            &current.controller_client,
            inter_broker::Channel::Controller,
        ),
    ];
    for (client, channel) in clients {
        let Some(client) = client.as_ref().filter(|c| c.tls.is_some()) else {
            continue;
        };
        let name = client.listener.as_str();
        let Some(&protocol) = current.kraft.security_protocol_map.get(name) else {
            continue;
        };
        if changed(name).is_empty() {
            continue;
        }
        inter_broker::parse_for(&raw, name, protocol, channel)
            .map_err(|e| failed(e.to_string()))?;
    }
    Ok(())
}

/// Kafka's `LogCleaner#validateReconfiguration`: at least one thread, and at most a halving or
/// a doubling of the running count at once.
fn check_cleaner_threads(current: usize, next: usize) -> Result<(), String> {
    if next < 1 {
        return Err("Log cleaner threads should be at least 1".to_owned());
    }
    if next < current / 2 {
        return Err(format!(
            "Log cleaner threads cannot be reduced to less than half the current value {current}"
        ));
    }
    if next > current * 2 {
        return Err(format!(
            "Log cleaner threads cannot be increased to more than double the current value {current}"
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_listeners_ssl_keys_are_dynamic_per_broker_and_only_with_the_prefix() {
        assert_eq!(
            listener_ssl_key("listener.name.ssl.ssl.keystore.location"),
            Some(("ssl", "ssl.keystore.location"))
        );
        assert!(is_dynamic(
            "listener.name.internal.ssl.truststore.certificates"
        ));
        assert!(!is_dynamic("ssl.keystore.location"));
        assert!(!is_dynamic("listener.name.ssl.ssl.client.auth"));
        assert!(!is_dynamic("listener.name..ssl.keystore.location"));
        assert!(is_password("listener.name.ssl.ssl.keystore.password"));
        assert!(is_password("listener.name.ssl.ssl.keystore.key"));
        assert!(!is_password("listener.name.ssl.ssl.keystore.location"));

        assert_eq!(
            refuse_listener_keys(true, &["listener.name.ssl.ssl.keystore.location"]),
            Ok(())
        );
        assert_eq!(
            refuse_listener_keys(true, &["ssl.keystore.type", "ssl.key.password"]),
            Err(
                "These security configs can be dynamically updated only per-listener using \
                 the listener prefix: Set(ssl.keystore.type, ssl.key.password)"
                    .to_owned()
            )
        );
        assert_eq!(
            refuse_listener_keys(
                false,
                &[
                    "message.max.bytes",
                    "listener.name.ssl.ssl.keystore.location"
                ]
            ),
            Err(
                "Cannot update these configs at default cluster level, broker id must be \
                 specified: Set(listener.name.ssl.ssl.keystore.location)"
                    .to_owned()
            )
        );
    }

    #[test]
    fn a_listeners_store_at_the_cluster_default_is_ignored() {
        let key = "listener.name.ssl.ssl.keystore.location";
        let layer = |entries: &[(&str, &str)]| -> BTreeMap<String, String> {
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut configs = BTreeMap::new();
        configs.insert(
            String::new(),
            layer(&[(key, "/default.pem"), ("message.max.bytes", "100")]),
        );
        assert_eq!(overlay(&configs, 1), layer(&[("message.max.bytes", "100")]));
        configs.insert("1".to_owned(), layer(&[(key, "/one.pem")]));
        assert_eq!(
            overlay(&configs, 1),
            layer(&[(key, "/one.pem"), ("message.max.bytes", "100")])
        );
    }

    /// A PEM key store (a self-signed certificate for 127.0.0.1 with common name `cn`, and its
    /// key) written as `file` in `dir`; its path.
    pub(crate) fn pem_store(dir: &std::path::Path, file: &str, cn: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let cert = params.self_signed(&key).unwrap();
        let path = dir.join(file);
        std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// The controller listener's stores are checked as a client listener's: on a node that
    /// serves it (its certificate must load and keep its subject), and on a broker-only node,
    /// which only reaches it (its client's stores must load). Without the check the value was
    /// committed, and the node's effective config failed to parse from then on.
    #[test]
    fn the_controller_listeners_stores_are_checked_before_they_are_committed() {
        let dir = tempfile::tempdir().unwrap();
        let first = pem_store(dir.path(), "first.pem", "node");
        let same_subject = pem_store(dir.path(), "same.pem", "node");
        let other_subject = pem_store(dir.path(), "other.pem", "someone else");
        let missing = dir.path().join("missing.pem");
        let missing = missing.to_str().unwrap();
        let config = |roles: &str, id: i32, listeners: &str| {
            let text = format!(
                "process.roles={roles}
node.id={id}
controller.quorum.voters=1@127.0.0.1:19092
listeners={listeners}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT
log.dirs={}
ssl.keystore.type=PEM
ssl.truststore.type=PEM
ssl.keystore.location={first}
ssl.truststore.location={first}
",
                dir.path().join("logs").display()
            );
            let raw = super::super::RawConfig::parse(&text, std::path::Path::new("t.properties"))
                .unwrap();
            BrokerConfig::from_raw(raw).unwrap().config
        };
        let check = |c: &BrokerConfig, key: &str, value: &str| {
            let layer = BTreeMap::from([(key.to_owned(), value.to_owned())]);
            check_listener_stores(c, c, &layer)
        };
        let keystore = "listener.name.controller.ssl.keystore.location";
        let truststore = "listener.name.controller.ssl.truststore.location";

        let combined = config(
            "broker,controller",
            1,
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092",
        );
        assert_eq!(check(&combined, keystore, &same_subject), Ok(()));
        let refused = check(&combined, keystore, missing).unwrap_err();
        assert!(
            refused.contains("SSLFactory") && refused.contains(keystore),
            "{refused}"
        );
        let refused = check(&combined, keystore, &other_subject).unwrap_err();
        assert!(
            refused.contains("DistinguishedName does not match"),
            "{refused}"
        );

        let broker_only = config("broker", 2, "PLAINTEXT://127.0.0.1:9092");
        assert_eq!(check(&broker_only, truststore, &same_subject), Ok(()));
        let refused = check(&broker_only, truststore, missing).unwrap_err();
        assert!(
            refused.contains("SSLFactory") && refused.contains(truststore),
            "{refused}"
        );
    }
}
