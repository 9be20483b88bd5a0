//! DescribeConfigs (key 32), v1-4: topic configs (effective value, source, synonyms) and broker
//! configs (set value or Kafka default). Broker configs are read-only: this broker has no
//! dynamic broker configuration yet.

use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse, ResponseKind};

use super::str_bytes;
use crate::config::topic::{ConfigSource, TopicConfigKind, TOPIC_CONFIG_DEFS};
use crate::config::{ConfigKind, BROKER_CONFIG_DEFS};
use crate::context::Context;
use crate::errors::ApiError;

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

fn describe_topic(
    ctx: &Arc<Context>,
    version: i16,
    name: &str,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, ApiError> {
    let image = ctx.image();
    let topic = image.topic(name).ok_or(ApiError::UnknownTopicOrPartition)?;
    let mut out = Vec::new();
    for def in TOPIC_CONFIG_DEFS.iter().filter(|d| wanted(keys, d.name)) {
        let (value, source) =
            crate::config::topic::effective_value(def, &topic.configs, &ctx.config);
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(def.name))
            .with_value(Some(str_bytes(&value)))
            .with_read_only(false)
            .with_config_source(source as i8);
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
                if ctx.config.is_set(s) {
                    synonyms.push(
                        DescribeConfigsSynonym::default()
                            .with_name(str_bytes(s))
                            .with_value(ctx.config.value_of(s).as_deref().map(str_bytes))
                            .with_source(ConfigSource::StaticBroker as i8),
                    );
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

fn describe_broker(
    ctx: &Arc<Context>,
    version: i16,
    resource_name: &str,
    keys: &Option<Vec<kafka_protocol::protocol::StrBytes>>,
    include_synonyms: bool,
) -> Result<Vec<DescribeConfigsResourceResult>, ApiError> {
    // "" is the cluster-wide default resource.
    if !resource_name.is_empty() && resource_name != ctx.node_id.to_string() {
        return Err(ApiError::InvalidRequest(format!(
            "Unexpected broker id, expected {} or empty string, but received {resource_name}",
            ctx.node_id
        )));
    }
    let mut out = Vec::new();
    for def in BROKER_CONFIG_DEFS.iter().filter(|d| wanted(keys, d.name)) {
        let value = ctx.config.value_of(def.name);
        let source = if ctx.config.is_set(def.name) {
            ConfigSource::StaticBroker
        } else {
            ConfigSource::Default
        };
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(def.name))
            .with_value(value.as_deref().map(str_bytes))
            .with_read_only(true)
            .with_config_source(source as i8);
        if include_synonyms {
            entry.synonyms = vec![DescribeConfigsSynonym::default()
                .with_name(str_bytes(def.name))
                .with_value(value.as_deref().map(str_bytes))
                .with_source(source as i8)];
        }
        if version >= 3 {
            entry.config_type = broker_config_type(def.kind);
            // No documentation strings here: null, as Kafka answers when none is included.
            entry.documentation = None;
        }
        out.push(entry);
    }
    Ok(out)
}

pub fn handle(ctx: &Arc<Context>, version: i16, request: DescribeConfigsRequest) -> ResponseKind {
    let include_synonyms = request.include_synonyms;
    let results = request
        .resources
        .into_iter()
        .map(|res| {
            let name = res.resource_name.as_str().to_owned();
            let result = match res.resource_type {
                RESOURCE_TOPIC => describe_topic(
                    ctx,
                    version,
                    &name,
                    &res.configuration_keys,
                    include_synonyms,
                ),
                RESOURCE_BROKER => describe_broker(
                    ctx,
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
