//! DescribeConfigs (key 32), v1-4: topic configs (effective value, source, synonyms) and broker
//! configs (effective value, Kafka's sources DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
//! STATIC_BROKER_CONFIG, DEFAULT_CONFIG, and synonyms). Only the dynamic keys of
//! [`crate::config::dynamic`] are reported writable.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};

use super::str_bytes;
use crate::config::dynamic::{self, BrokerSource};
use crate::config::topic::{ConfigSource, TopicConfigKind, TOPIC_CONFIG_DEFS};
use crate::config::{BrokerConfig, ConfigKind, BROKER_CONFIG_DEFS};
use crate::errors::ApiError;
use crate::metadata::{MetadataCache, MetadataImage};
use crate::replica::ReplicaManager;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// Kafka's `ConfigEntry.ConfigType` codes (v3+).
fn topic_config_type(kind: TopicConfigKind) -> i8 {
    match kind {
        TopicConfigKind::Bool => 1,
        TopicConfigKind::OneOf(_) => 2,
        TopicConfigKind::Int { .. } | TopicConfigKind::IntRange { .. } => 3,
        TopicConfigKind::Long { .. } => 5,
        TopicConfigKind::Ratio => 6,
        TopicConfigKind::ListOf(_) | TopicConfigKind::ThrottledReplicas => 7,
    }
}

fn broker_config_type(kind: ConfigKind) -> i8 {
    match kind {
        ConfigKind::Bool => 1,
        ConfigKind::Str => 2,
        ConfigKind::Int => 3,
        ConfigKind::Long => 5,
        ConfigKind::Double => 6,
        ConfigKind::List => 7,
    }
}

fn wanted(keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>, name: &str) -> bool {
    match keys {
        None => true,
        Some(k) => k.iter().any(|k| k.as_str() == name),
    }
}

/// A topic key that falls back to its broker synonym takes that synonym's source, which may be
/// a dynamic broker config.
fn topic_source(
    def: &crate::config::topic::TopicConfigDef,
    source: ConfigSource,
    config: &BrokerConfig,
    image: &MetadataImage,
) -> i8 {
    if source != ConfigSource::StaticBroker {
        return source as i8;
    }
    def.broker_synonyms
        .iter()
        .find_map(|s| {
            let first = dynamic::synonyms(config, &image.broker_configs, s)
                .first()?
                .1;
            (first != BrokerSource::Default).then_some(first as i8)
        })
        .unwrap_or(source as i8)
}

fn describe_topic(
    cache: &MetadataCache,
    replicas: &ReplicaManager,
    config: &BrokerConfig,
    version: i16,
    name: &str,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, ApiError> {
    let image = cache.image();
    let topic = image.topic(name).ok_or(ApiError::UnknownTopicOrPartition)?;
    let broker = replicas.effective_config();
    let mut out = Vec::new();
    for def in TOPIC_CONFIG_DEFS.iter().filter(|d| wanted(keys, d.name)) {
        let (value, source) = crate::config::topic::effective_value(def, &topic.configs, &broker);
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(def.name))
            .with_value(Some(str_bytes(&value)))
            .with_read_only(false)
            .with_config_source(topic_source(def, source, config, &image));
        if include_synonyms {
            let mut synonyms = Vec::new();
            if let Some(v) = topic.configs.get(def.name) {
                synonyms.push(
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(def.name))
                        .with_value(Some(str_bytes(v)))
                        .with_source(ConfigSource::DynamicTopic as i8),
                );
            }
            for s in def.broker_synonyms {
                for (v, source) in dynamic::synonyms(config, &image.broker_configs, s) {
                    if source != BrokerSource::Default {
                        synonyms.push(
                            DescribeConfigsSynonym::default()
                                .with_name(str_bytes(s))
                                .with_value(Some(str_bytes(&v)))
                                .with_source(source as i8),
                        );
                    }
                }
            }
            // Kafka lists a default synonym only for keys with a broker-level counterpart.
            if let Some(first) = def.broker_synonyms.first() {
                synonyms.push(
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(first))
                        .with_value(Some(str_bytes(def.default)))
                        .with_source(ConfigSource::Default as i8),
                );
            }
            entry.synonyms = synonyms;
        }
        if version >= 3 {
            entry.config_type = topic_config_type(def.kind);
            // No documentation strings here: null, as Kafka answers when none is included.
            entry.documentation = None;
        }
        out.push(entry);
    }
    Ok(out)
}

/// A BROKER resource must name this node or be the cluster default (""), as Kafka checks.
pub fn check_broker_resource(node_id: i32, resource_name: &str) -> Result<(), ApiError> {
    if resource_name.is_empty() || resource_name == node_id.to_string() {
        return Ok(());
    }
    Err(ApiError::InvalidRequest(format!(
        "Unexpected broker id, expected {node_id} or empty string, but received {resource_name}"
    )))
}

/// Kafka's `ConfigHelper` for a BROKER resource: this node's every key with its effective value,
/// source and synonyms (per broker, cluster default, static, default); for the cluster default
/// resource ("") only the keys set there.
fn describe_broker(
    cache: &MetadataCache,
    config: &BrokerConfig,
    version: i16,
    resource_name: &str,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, ApiError> {
    check_broker_resource(config.node_id, resource_name)?;
    let image = cache.image();
    let per_broker = !resource_name.is_empty();
    let names = BROKER_CONFIG_DEFS
        .iter()
        .map(|d| (d.name, broker_config_type(d.kind)))
        .chain(dynamic::DYNAMIC_BROKER_KEYS.iter().filter_map(|k| {
            dynamic::dynamic_only_default(k).map(|_| (*k, broker_config_type(ConfigKind::Long)))
        }));
    let mut out = Vec::new();
    for (name, config_type) in names.filter(|(n, _)| wanted(keys, n)) {
        let mut synonyms = dynamic::synonyms(config, &image.broker_configs, name);
        if !per_broker {
            synonyms.retain(|(_, s)| *s != BrokerSource::DynamicBroker);
            if synonyms.first().map(|(_, s)| *s) != Some(BrokerSource::DynamicDefaultBroker) {
                continue;
            }
        }
        let (value, source) = match synonyms.first() {
            Some((v, s)) => (Some(v.clone()), *s),
            // Derived values (log.dirs, node.id) without a default of their own.
            None => (config.value_of(name), BrokerSource::Default),
        };
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(name))
            .with_value(value.as_deref().map(str_bytes))
            .with_read_only(!dynamic::is_dynamic(name))
            .with_config_source(source as i8);
        if include_synonyms {
            entry.synonyms = synonyms
                .iter()
                .map(|(v, s)| {
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(name))
                        .with_value(Some(str_bytes(v)))
                        .with_source(*s as i8)
                })
                .collect();
        }
        if version >= 3 {
            entry.config_type = config_type;
            // No documentation strings here: null, as Kafka answers when none is included.
            entry.documentation = None;
        }
        out.push(entry);
    }
    if per_broker {
        out.extend(listener_ssl_entries(
            config,
            &image,
            version,
            keys,
            include_synonyms,
        ));
    }
    Ok(out)
}

/// A listener's reconfigurable SSL keys (`listener.name.<l>.ssl.keystore.location`, …) that
/// `server.properties` or this broker's dynamic configs set, as Kafka lists the
/// listener-prefixed keys it was given, with the unprefixed key as a synonym. The secret ones
/// (Kafka's PASSWORD type) are sensitive and answered without a value.
fn listener_ssl_entries(
    config: &BrokerConfig,
    image: &MetadataImage,
    version: i16,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
    include_synonyms: bool,
) -> Vec<DescribeConfigsResourceResult> {
    let layer = image.broker_configs.get(&config.node_id.to_string());
    let names: std::collections::BTreeSet<&str> = config
        .raw
        .iter()
        .map(|(k, _)| k)
        .chain(layer.into_iter().flatten().map(|(k, _)| k.as_str()))
        .filter(|k| dynamic::listener_ssl_key(k).is_some() && wanted(keys, k))
        .collect();
    let mut out = Vec::new();
    for name in names {
        let Some((_, base)) = dynamic::listener_ssl_key(name) else {
            continue;
        };
        let sensitive = dynamic::is_password(name);
        let shown = |v: &str| (!sensitive).then(|| str_bytes(v));
        let mut synonyms: Vec<(&str, &str, BrokerSource)> = Vec::new();
        if let Some(v) = layer.and_then(|l| l.get(name)) {
            synonyms.push((name, v, BrokerSource::DynamicBroker));
        }
        if let Some(v) = config.raw.get(name) {
            synonyms.push((name, v, BrokerSource::StaticBroker));
        }
        if let Some(v) = config.raw.get(base) {
            synonyms.push((base, v, BrokerSource::StaticBroker));
        }
        let Some(&(_, value, source)) = synonyms.first() else {
            continue;
        };
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(name))
            .with_value(shown(value))
            .with_read_only(false)
            .with_is_sensitive(sensitive)
            .with_config_source(source as i8);
        if include_synonyms {
            entry.synonyms = synonyms
                .iter()
                .map(|(n, v, s)| {
                    DescribeConfigsSynonym::default()
                        .with_name(str_bytes(n))
                        .with_value(shown(v))
                        .with_source(*s as i8)
                })
                .collect();
        }
        if version >= 3 {
            // Kafka's ConfigType: PASSWORD 9, STRING 2.
            entry.config_type = if sensitive { 9 } else { 2 };
            entry.documentation = None;
        }
        out.push(entry);
    }
    out
}

/// `replicas` gives the effective broker config (`server.properties` with the dynamic broker
/// configs laid over), `config` the static one, whose node id names this broker's resource.
pub fn handle(
    cache: &MetadataCache,
    replicas: &ReplicaManager,
    config: &BrokerConfig,
    version: i16,
    request: DescribeConfigsRequest,
) -> ResponseKind {
    let include_synonyms = request.include_synonyms;
    let results = request
        .resources
        .into_iter()
        .map(|res| {
            let name = res.resource_name.as_str().to_owned();
            let result = match res.resource_type {
                RESOURCE_TOPIC => describe_topic(
                    cache,
                    replicas,
                    config,
                    version,
                    &name,
                    &res.configuration_keys,
                    include_synonyms,
                ),
                RESOURCE_BROKER => describe_broker(
                    cache,
                    config,
                    version,
                    &name,
                    &res.configuration_keys,
                    include_synonyms,
                ),
                other => Err(ApiError::InvalidRequest(format!(
                    "Unsupported resource type {other}"
                ))),
            };
            let mut r = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            match result {
                Ok(configs) => r.configs = configs,
                Err(e) => {
                    r.error_code = e.code();
                    r.error_message = Some(str_bytes(&e.message()));
                }
            }
            r
        })
        .collect();
    ResponseKind::DescribeConfigs(DescribeConfigsResponse::default().with_results(results))
}
