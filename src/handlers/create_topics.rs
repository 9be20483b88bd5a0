//! CreateTopics (key 19), v2-7: each topic goes through the controller (validate_only
//! supported); v5+ answers carry the topic's partitions, replication factor and configs.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, ResponseKind};

use super::str_bytes;
use crate::config::topic::{effective_value, TOPIC_CONFIG_DEFS};
use crate::context::Context;
use crate::controller::CreateTopicSpec;
use crate::errors::ApiError;

pub async fn handle(
    ctx: &Arc<Context>,
    version: i16,
    request: CreateTopicsRequest,
) -> ResponseKind {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &request.topics {
        *seen.entry(t.name.0.as_str().to_owned()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        {
            let name = t.name.0.as_str().to_owned();
            let spec = CreateTopicSpec {
                name: name.clone(),
                num_partitions: t.num_partitions,
                replication_factor: t.replication_factor,
                assignments: t
                    .assignments
                    .iter()
                    .map(|a| {
                        (
                            a.partition_index,
                            a.broker_ids.iter().map(|b| b.0).collect(),
                        )
                    })
                    .collect(),
                configs: t
                    .configs
                    .iter()
                    .map(|c| {
                        (
                            c.name.as_str().to_owned(),
                            c.value.as_ref().map(|v| v.as_str().to_owned()),
                        )
                    })
                    .collect(),
            };
            let result = if seen[&name] > 1 {
                Err(ApiError::InvalidRequest(format!(
                    "Create topics request from client contains duplicate topic name {name}"
                )))
            } else {
                ctx.controller
                    .create_topic(spec, request.validate_only)
                    .await
            };
            let mut r = CreatableTopicResult::default().with_name(t.name);
            match result {
                Ok(topic) => {
                    if version >= 7 {
                        r.topic_id = topic.id;
                    }
                    if version >= 5 {
                        r.num_partitions = topic.partitions.len() as i32;
                        r.replication_factor = topic
                            .partitions
                            .values()
                            .next()
                            .map(|p| p.replicas.len() as i16)
                            .unwrap_or(-1);
                        r.configs = Some(
                            TOPIC_CONFIG_DEFS
                                .iter()
                                .map(|def| {
                                    let (value, source) =
                                        effective_value(def, &topic.configs, &ctx.config);
                                    CreatableTopicConfigs::default()
                                        .with_name(str_bytes(def.name))
                                        .with_value(Some(str_bytes(&value)))
                                        .with_config_source(source as i8)
                                })
                                .collect(),
                        );
                    }
                }
                Err(e) => {
                    r.error_code = e.code();
                    r.error_message = Some(str_bytes(&e.message()));
                    if version >= 5 {
                        r.num_partitions = -1;
                        r.replication_factor = -1;
                    }
                }
            }
            results.push(r);
        }
    }
    ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(results))
}
