//! Metadata (key 3): the unfenced brokers (with rack) at their endpoint of the client's
//! listener, cluster id, controller id, and per topic its id and per partition leader, leader
//! epoch, replicas, ISR and offline replicas, from the metadata image, as Kafka's
//! `KRaftMetadataCache#getPartitionMetadata` answers: a partition whose leader is not alive
//! answers LEADER_NOT_AVAILABLE with leader -1 (a leader alive without the client's listener,
//! LISTENER_NOT_FOUND from v6); offline replicas are those on fenced or unregistered brokers or
//! without the listener. Only v0 leaves replicas without an endpoint out of the replica and ISR
//! lists, answering REPLICA_NOT_AVAILABLE next to the leader; later versions list them all. Unknown topics are auto-created through the controller when
//! `auto.create.topics.enable` and the request allow it (answered LEADER_NOT_AVAILABLE, as Kafka
//! does while a new topic's leaders are being elected); invalid names get
//! INVALID_TOPIC_EXCEPTION and are never created.

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, ResponseKind};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::authz::{Op, RequestAuth, Resource, AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_NAME};
use super::{alive_endpoint, str_bytes, topic_name};
use crate::controller::decisions::validate_topic_name;
use crate::controller::{ControllerChannel, CreateTopicSpec};
use crate::errors::ApiError;
use crate::metadata::{MetadataCache, MetadataImage, TopicImage};

pub use crate::metadata::is_internal_topic;

pub fn topic_response(
    image: &MetadataImage,
    topic: &TopicImage,
    version: i16,
    listener: &str,
) -> MetadataResponseTopic {
    let reachable = |r: &i32| alive_endpoint(image, listener, *r).is_some();
    let partitions = topic
        .partitions
        .iter()
        .map(|(&index, reg)| {
            let offline: Vec<BrokerId> = reg
                .replicas
                .iter()
                .filter(|r| !reachable(r))
                .map(|r| BrokerId(*r))
                .collect();
            // v0 lists only replicas with an endpoint (Kafka's errorUnavailableEndpoints).
            let listed = |ids: &[i32]| -> Vec<BrokerId> {
                ids.iter()
                    .filter(|r| version > 0 || reachable(r))
                    .map(|r| BrokerId(*r))
                    .collect()
            };
            let replicas = listed(&reg.replicas);
            let isr = listed(&reg.isr);
            let error = if reachable(&reg.leader) {
                let all_listed = replicas.len() == reg.replicas.len() && isr.len() == reg.isr.len();
                (!all_listed).then_some(ApiError::ReplicaNotAvailable)
            } else if version >= 6 && image.is_broker_alive(reg.leader) {
                Some(ApiError::ListenerNotFound)
            } else {
                Some(ApiError::LeaderNotAvailable)
            };
            let leader = if reachable(&reg.leader) {
                reg.leader
            } else {
                -1
            };
            let mut p = MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(BrokerId(leader))
                .with_replica_nodes(replicas)
                .with_isr_nodes(isr);
            if let Some(e) = error {
                p.error_code = e.code();
            }
            if version >= 7 {
                p.leader_epoch = reg.leader_epoch;
            }
            if version >= 5 {
                p.offline_replicas = offline;
            }
            p
        })
        .collect();
    let mut t = MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_partitions(partitions);
    if version >= 1 {
        t.is_internal = is_internal_topic(&topic.name);
    }
    if version >= 10 {
        t.topic_id = topic.id;
    }
    t
}

fn error_topic(
    name: Option<&str>,
    id: Uuid,
    error: ResponseError,
    version: i16,
) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(topic_name));
    if version >= 10 {
        t.topic_id = id;
    }
    t
}

/// Each topic asked for once, in the order first asked (Kafka takes the request's names and ids
/// as sets): a request naming one large topic many times costs one topic's answer, so no
/// response is larger than the answer for every topic.
fn distinct_topics(list: Vec<MetadataRequestTopic>) -> Vec<MetadataRequestTopic> {
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    list.into_iter()
        .filter(|t| {
            let key = match (&t.name, t.topic_id.is_nil()) {
                (Some(name), true) => (Some(name.0.as_str().to_owned()), Uuid::nil()),
                _ => (None, t.topic_id),
            };
            seen.insert(key)
        })
        .collect()
}

/// `cache`: read again after an auto-creation; `listener`: the client's
/// (the listener its connection came in on); `auto_create_topics_enable`: the broker's key of that name.
///
/// With an authorizer (Kafka's `KafkaApis#handleTopicMetadataRequest`): all topics means those
/// the caller may DESCRIBE; a topic asked for that it may not DESCRIBE, or that does not exist
/// and would be auto-created without CREATE on the cluster or the topic, is answered
/// TOPIC_AUTHORIZATION_FAILED. KIP-430's authorized operations are answered when asked for
/// (v8+ topics, v8–10 cluster).
pub async fn handle(
    auth: &RequestAuth,
    cache: &MetadataCache,
    controller: &ControllerChannel,
    listener: &str,
    auto_create_topics_enable: bool,
    version: i16,
    request: MetadataRequest,
) -> ResponseKind {
    let mut image = cache.image();
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let requested: Option<Vec<_>> = match request.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(list),
    };
    let allow_auto_create = version < 4 || request.allow_auto_topic_creation;

    let topics: Vec<MetadataResponseTopic> = match requested {
        None => image
            .topics
            .values()
            .filter(|t| auth.allows(Resource::Topic, &t.name, Op::Describe))
            .map(|t| topic_response(&image, t, version, listener))
            .collect(),
        Some(list) => {
            let list = distinct_topics(list);
            let mut out = Vec::with_capacity(list.len());
            for wanted in list {
                // A non-zero topic id wins over the name (the Java client sends "" with an id).
                let name = wanted
                    .name
                    .as_ref()
                    .map(|n| n.0.as_str().to_owned())
                    .filter(|_| wanted.topic_id.is_nil());
                let Some(name) = name else {
                    // By id (v10+).
                    match image.topic_by_id(&wanted.topic_id) {
                        Some(t) if !auth.allows(Resource::Topic, &t.name, Op::Describe) => out
                            .push(error_topic(
                                None,
                                wanted.topic_id,
                                ResponseError::TopicAuthorizationFailed,
                                version,
                            )),
                        Some(t) => out.push(topic_response(&image, t, version, listener)),
                        None => out.push(error_topic(
                            None,
                            wanted.topic_id,
                            ResponseError::UnknownTopicId,
                            version,
                        )),
                    }
                    continue;
                };
                if !auth.allows(Resource::Topic, &name, Op::Describe) {
                    out.push(error_topic(
                        Some(&name),
                        Uuid::nil(),
                        ResponseError::TopicAuthorizationFailed,
                        version,
                    ));
                    continue;
                }
                if let Some(t) = image.topic(&name) {
                    out.push(topic_response(&image, t, version, listener));
                    continue;
                }
                if validate_topic_name(&name).is_err() {
                    out.push(error_topic(
                        Some(&name),
                        Uuid::nil(),
                        ResponseError::InvalidTopicException,
                        version,
                    ));
                    continue;
                }
                if !(allow_auto_create && auto_create_topics_enable) || is_internal_topic(&name) {
                    out.push(error_topic(
                        Some(&name),
                        Uuid::nil(),
                        ResponseError::UnknownTopicOrPartition,
                        version,
                    ));
                    continue;
                }
                if !(auth.allows_cluster(Op::Create)
                    || auth.allows(Resource::Topic, &name, Op::Create))
                {
                    out.push(error_topic(
                        Some(&name),
                        Uuid::nil(),
                        ResponseError::TopicAuthorizationFailed,
                        version,
                    ));
                    continue;
                }
                let spec = CreateTopicSpec {
                    name: name.clone(),
                    num_partitions: -1,
                    replication_factor: -1,
                    ..Default::default()
                };
                // On the client's behalf: with an authorizer, the active controller checks
                // the client (as Kafka's broker sends it in an envelope).
                let origin = auth
                    .caller()
                    .map(|(principal, address)| crate::controller::Origin {
                        principal: principal.to_owned(),
                        address,
                        client_id: None,
                        correlation_id: 0,
                    });
                let code = match controller.ensure_topic(spec, origin.as_ref()).await {
                    // Kafka answers LEADER_NOT_AVAILABLE for a topic it just created; the
                    // client refreshes metadata and finds the leaders.
                    Ok(_) | Err(ApiError::TopicAlreadyExists(_)) => {
                        ResponseError::LeaderNotAvailable
                    }
                    Err(ApiError::InvalidTopic(_)) => ResponseError::InvalidTopicException,
                    Err(e) => {
                        tracing::warn!(topic = %name, error = %e, "auto-creating topic failed");
                        ResponseError::UnknownTopicOrPartition
                    }
                };
                image = cache.image();
                out.push(error_topic(Some(&name), Uuid::nil(), code, version));
            }
            out
        }
    };

    let brokers = image
        .alive_brokers()
        .filter_map(|b| {
            let e = b.endpoint(listener)?;
            let mut rb = MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(str_bytes(&e.host))
                .with_port(i32::from(e.port));
            if version >= 1 {
                rb.rack = b.rack.as_deref().map(str_bytes);
            }
            Some(rb)
        })
        .collect();
    let mut topics = topics;
    if version >= 8 {
        for t in &mut topics {
            t.topic_authorized_operations = match (&t.name, t.error_code) {
                (Some(name), 0) => auth.operations_if(
                    request.include_topic_authorized_operations,
                    Resource::Topic,
                    name.0.as_str(),
                ),
                _ => AUTHORIZED_OPERATIONS_OMITTED,
            };
        }
    }
    let mut response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics);
    if (8..=10).contains(&version) {
        response.cluster_authorized_operations = auth.operations_if(
            request.include_cluster_authorized_operations,
            Resource::Cluster,
            CLUSTER_NAME,
        );
    }
    if version >= 1 {
        response.controller_id = BrokerId(image.controller_id);
    }
    if version >= 2 {
        response.cluster_id = Some(str_bytes(&image.cluster_id));
    }
    ResponseKind::Metadata(response)
}
