//! CreateTopics (key 19), v2-7: each topic goes through the controller (validate_only
//! supported); v5+ answers carry the topic's partitions, replication factor and configs, when
//! the caller may DESCRIBE_CONFIGS the topic (else TOPIC_AUTHORIZATION_FAILED as the topic's
//! config error and none of them, as Kafka's `ReplicationControlManager#createTopic` answers).
//!
//! The topics of one request are one request to the controller, decided together and committed
//! as one batch (one log entry): after a crash or a failover either every topic created is
//! there or none is, as with Kafka's controller, which handles one CreateTopics request as one
//! atomic operation. Their records together are bounded as one operation
//! (`METADATA_RECORDS_PER_USER_OP_MAX`, one log entry); past it every topic is answered
//! POLICY_VIOLATION, as Kafka answers. Each topic still gets its own answer (and error), in the
//! request's order.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use super::str_bytes;
use crate::config::topic::{effective_value, TOPIC_CONFIG_DEFS};
use crate::config::BrokerConfig;
use crate::controller::{ControllerChannel, CreateTopicSpec};
use crate::errors::ApiError;
use crate::replica::ReplicaManager;

/// Partitions named at most in a CreateTopics error about logs that could not be created.
const OFFLINE_PARTITIONS_NAMED_MAX: usize = 10;

/// The created topic, unless this node failed to create the log of one of its partitions
/// here. The controller answers a committed topic only once this node has applied it (so
/// its replica manager has tried to create its logs); a log that failed is offline
/// (KAFKA_STORAGE_ERROR to produce and fetch), and the topic, created though it is, is
/// answered with that error rather than success: the client learns at once that it cannot
/// be used, instead of timing out on its first produce. Kafka takes the log dir offline and
/// answers success; the partitions are then offline in its Metadata.
fn logs_created(
    replicas: &ReplicaManager,
    name: &str,
    topic: Arc<crate::metadata::TopicImage>,
) -> Result<Arc<crate::metadata::TopicImage>, ApiError> {
    let offline = replicas.offline_partitions_of(name);
    let Some((_, error)) = offline.first() else {
        return Ok(topic);
    };
    let named: Vec<String> = offline
        .iter()
        .take(OFFLINE_PARTITIONS_NAMED_MAX)
        .map(|(p, _)| p.to_string())
        .collect();
    let more = offline.len().saturating_sub(OFFLINE_PARTITIONS_NAMED_MAX);
    Err(ApiError::KafkaStorageError(format!(
        "Topic '{name}' was created, but broker {} could not create the log of {} of its {} \
         partitions ({}{}), which are offline there: {error}",
        replicas.node_id(),
        offline.len(),
        topic.partitions.len(),
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
    )))
}

fn spec_of(name: String, t: &CreatableTopic) -> CreateTopicSpec {
    CreateTopicSpec {
        name,
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
    }
}

/// `replicas`: this node's replica manager, asked which of a created topic's logs it could not
/// create; `config`: the broker config a topic's answered configs fall back to; `auth`: who
/// may see the created topics' configs.
pub async fn handle(
    auth: &RequestAuth,
    controller: &ControllerChannel,
    replicas: &ReplicaManager,
    config: &BrokerConfig,
    version: i16,
    request: CreateTopicsRequest,
) -> ResponseKind {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &request.topics {
        *seen.entry(t.name.0.as_str().to_owned()).or_default() += 1;
    }
    // Every topic but the duplicated names, decided together and committed as one batch.
    let mut outcomes: Vec<Option<Result<Arc<crate::metadata::TopicImage>, ApiError>>> =
        Vec::with_capacity(request.topics.len());
    let mut specs = Vec::new();
    for t in &request.topics {
        let name = t.name.0.as_str().to_owned();
        if seen[&name] > 1 {
            outcomes.push(Some(Err(ApiError::InvalidRequest(format!(
                "Create topics request from client contains duplicate topic name {name}"
            )))));
            continue;
        }
        outcomes.push(None);
        specs.push(spec_of(name, t));
    }
    let decided = match controller.create_topics(specs, request.validate_only).await {
        Ok(each) => each,
        Err(e) => outcomes.iter().map(|_| Err(e.clone())).collect(),
    };
    let mut decided = decided.into_iter();
    for (i, outcome) in outcomes.iter_mut().enumerate() {
        if outcome.is_some() {
            continue;
        }
        let name = request.topics[i].name.0.as_str();
        *outcome = decided.next().map(|result| {
            result.and_then(|topic| {
                if request.validate_only {
                    Ok(topic)
                } else {
                    logs_created(replicas, name, topic)
                }
            })
        });
    }
    let mut results = Vec::with_capacity(request.topics.len());
    for (t, outcome) in request.topics.into_iter().zip(outcomes) {
        {
            let result = outcome.unwrap_or_else(|| {
                Err(ApiError::UnknownServerError(format!(
                    "the creation of {} did not finish",
                    t.name.0.as_str()
                )))
            });
            let mut r = CreatableTopicResult::default().with_name(t.name);
            match result {
                Ok(topic) => {
                    if version >= 7 {
                        r.topic_id = topic.id;
                    }
                    if version >= 5
                        && !auth.allows(Resource::Topic, r.name.as_str(), Op::DescribeConfigs)
                    {
                        r.topic_config_error_code = ApiError::TopicAuthorizationFailed.code();
                    } else if version >= 5 {
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
                                        effective_value(def, &topic.configs, config);
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
                    if version >= 5
                        && !auth.allows(Resource::Topic, r.name.as_str(), Op::DescribeConfigs)
                    {
                        r.topic_config_error_code = ApiError::TopicAuthorizationFailed.code();
                    } else if version >= 5 {
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
