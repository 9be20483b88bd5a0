//! DescribeTopicPartitions (key 75), v0: topics and their partitions, paged (KIP-966). The Java
//! admin client (Kafka 3.8+, `kafka-topics --describe`) uses it instead of Metadata when the
//! broker advertises it.
//!
//! As Kafka's `DescribeTopicPartitionsRequestHandler` and
//! `KRaftMetadataCache#getTopicMetadataForDescribeTopicResponse`:
//! - no topics named = every topic; topics are answered in name order, from the cursor's topic
//!   on (names sorting before it are left out), the cursor's topic from the cursor's partition;
//! - a request naming topics must name the cursor's topic, and a cursor partition must not be
//!   negative: otherwise INVALID_REQUEST for every topic named;
//! - at most `max(min(response_partition_limit, 2000), 1)` partitions are described; where the
//!   limit stops, `next_cursor` names the next topic and partition to ask for;
//! - a named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (or
//!   INVALID_TOPIC_EXCEPTION for a name that is not valid), describing no partition;
//! - per partition: leader (-1 unless alive with the client's listener), leader epoch, replicas,
//!   ISR, offline replicas, and empty eligible leader replica lists (no KIP-966 ELR here).

use super::authz::{Op, RequestAuth, Resource};
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, ResponseKind,
};
use std::collections::BTreeSet;
use uuid::Uuid;

use super::metadata::is_internal_topic;
use super::{alive_endpoint, topic_name};
use crate::controller::decisions::validate_topic_name;
use crate::errors::ApiError;
use crate::limits::DESCRIBE_TOPIC_PARTITIONS_PER_RESPONSE_MAX;
use crate::metadata::{MetadataImage, TopicImage};

/// With an authorizer, a topic the caller may not DESCRIBE is answered
/// TOPIC_AUTHORIZATION_FAILED when named, and left out of a listing of all topics (Kafka's
/// `DescribeTopicPartitionsRequestHandler`).
pub fn handle(
    auth: &RequestAuth,
    image: &MetadataImage,
    listener: &str,
    _version: i16,
    request: DescribeTopicPartitionsRequest,
) -> ResponseKind {
    ResponseKind::DescribeTopicPartitions(describe(auth, image, listener, &request))
}

/// The response for `request` against `image`, with endpoints of `listener`.
pub fn describe(
    auth: &RequestAuth,
    image: &MetadataImage,
    listener: &str,
    request: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    let fetch_all = request.topics.is_empty();
    let cursor = request
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.as_str(), c.partition_index));
    let cursor_topic = cursor.map_or("", |(t, _)| t);
    let names: BTreeSet<&str> = if fetch_all {
        image.topics.keys().map(String::as_str).collect()
    } else {
        request.topics.iter().map(|t| t.name.0.as_str()).collect()
    };
    let names: BTreeSet<&str> = names.into_iter().filter(|n| *n >= cursor_topic).collect();
    if let Some((topic, partition)) = cursor {
        if !fetch_all && !names.contains(topic) {
            return refused(
                request,
                format!("DescribeTopicPartitionsRequest topic list should contain the cursor topic: {topic}"),
            );
        }
        if partition < 0 {
            return refused(
                request,
                format!(
                    "DescribeTopicPartitionsRequest cursor partition must be valid: {partition}"
                ),
            );
        }
    }
    let limit = request
        .response_partition_limit
        .clamp(1, DESCRIBE_TOPIC_PARTITIONS_PER_RESPONSE_MAX) as usize;
    let mut remaining = limit;
    let mut response = DescribeTopicPartitionsResponse::default();
    for name in names {
        if remaining == 0 {
            // The next page starts with this topic, whether or not it exists.
            response.next_cursor = Some(cursor_at(name, 0));
            break;
        }
        if !auth.allows(Resource::Topic, name, Op::Describe) {
            if !fetch_all {
                response.topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(ApiError::TopicAuthorizationFailed.code())
                        .with_name(Some(topic_name(name)))
                        .with_topic_id(Uuid::nil()),
                );
            }
            continue;
        }
        let Some(topic) = image.topic(name) else {
            if !fetch_all {
                let error = match validate_topic_name(name) {
                    Ok(()) => ApiError::UnknownTopicOrPartition,
                    Err(e) => e,
                };
                response.topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(error.code())
                        .with_name(Some(topic_name(name)))
                        .with_topic_id(Uuid::nil())
                        .with_is_internal(is_internal_topic(name)),
                );
            }
            continue;
        };
        let start = match cursor {
            Some((t, p)) if t == name => p as usize,
            _ => 0,
        };
        let count = topic.partitions.len();
        let upper = count.min(start.saturating_add(remaining));
        let partitions: Vec<_> = (start..upper)
            .filter_map(|i| describe_partition(image, listener, topic, i as i32))
            .collect();
        remaining = remaining.saturating_sub(partitions.len());
        response.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(name)))
                .with_topic_id(topic.id)
                .with_is_internal(is_internal_topic(name))
                .with_partitions(partitions),
        );
        if upper < count {
            response.next_cursor = Some(cursor_at(name, upper as i32));
            break;
        }
    }
    response
}

fn cursor_at(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(topic_name(topic))
        .with_partition_index(partition)
}

fn describe_partition(
    image: &MetadataImage,
    listener: &str,
    topic: &TopicImage,
    index: i32,
) -> Option<DescribeTopicPartitionsResponsePartition> {
    let reg = topic.partitions.get(&index)?;
    let reachable = |r: i32| alive_endpoint(image, listener, r).is_some();
    let ids = |ids: &[i32]| ids.iter().map(|r| BrokerId(*r)).collect::<Vec<_>>();
    let leader = if reachable(reg.leader) {
        reg.leader
    } else {
        -1
    };
    Some(
        DescribeTopicPartitionsResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(leader))
            .with_leader_epoch(reg.leader_epoch)
            .with_replica_nodes(ids(&reg.replicas))
            .with_isr_nodes(ids(&reg.isr))
            .with_eligible_leader_replicas(Some(Vec::new()))
            .with_last_known_elr(Some(Vec::new()))
            .with_offline_replicas(
                reg.replicas
                    .iter()
                    .filter(|r| !reachable(**r))
                    .map(|r| BrokerId(*r))
                    .collect(),
            ),
    )
}

/// Kafka's answer to a request it cannot serve: every topic named, with the error.
fn refused(
    request: &DescribeTopicPartitionsRequest,
    why: String,
) -> DescribeTopicPartitionsResponse {
    let code = ApiError::InvalidRequest(why).code();
    DescribeTopicPartitionsResponse::default().with_topics(
        request
            .topics
            .iter()
            .map(|t| {
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(code)
                    .with_name(Some(t.name.clone()))
                    .with_is_internal(false)
            })
            .collect(),
    )
}
