//! ElectLeaders (key 43), v0-2: preferred (0) or unclean (1) leader elections through the
//! controller (`controller::decisions::elect_leaders`), with Kafka's per-partition errors and
//! messages. `topic_partitions` null means every partition: then, as Kafka answers, every topic
//! is listed and partitions that need no election (ELECTION_NOT_NEEDED) are left out; named
//! partitions are all answered.

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, ResponseKind};

use super::{str_bytes, topic_name};
use crate::controller::decisions::ElectionType;
use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::metadata::MetadataCache;

pub async fn handle(
    controller: &ControllerChannel,
    cache: &MetadataCache,
    version: i16,
    request: ElectLeadersRequest,
) -> ResponseKind {
    // v0 has no election type: it is always a preferred election.
    let election = match (version, request.election_type) {
        (0, _) | (_, 0) => Ok(ElectionType::Preferred),
        (_, 1) => Ok(ElectionType::Unclean),
        (_, other) => Err(ApiError::InvalidRequest(format!(
            "unknown election type {other}"
        ))),
    };
    let mut response = ElectLeadersResponse::default();
    let election = match election {
        Ok(e) => e,
        Err(e) => {
            if version >= 1 {
                response.error_code = e.code();
            }
            return ResponseKind::ElectLeaders(response);
        }
    };
    let all = request.topic_partitions.is_none();
    let partitions = request.topic_partitions.map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.0.as_str().to_owned(), *p))
            })
            .collect()
    });
    let results = match controller.elect_leaders(election, partitions).await {
        Ok(results) => results,
        Err(e) => {
            if version >= 1 {
                response.error_code = e.code();
            }
            return ResponseKind::ElectLeaders(response);
        }
    };
    let mut by_topic: Vec<ReplicaElectionResult> = Vec::new();
    let mut results = results.into_iter().peekable();
    if all {
        // Every topic, those without a partition to report included (in name order, as the
        // decision goes through them).
        for name in cache.image().topics.keys() {
            let mut t = ReplicaElectionResult::default().with_topic(topic_name(name));
            while let Some((_, partition, result)) = results.next_if(|(t, _, _)| t == name) {
                t.partition_result.push(partition_result(partition, result));
            }
            by_topic.push(t);
        }
    }
    for (topic, partition, result) in results {
        let p = partition_result(partition, result);
        match by_topic.last_mut() {
            Some(t) if t.topic.0.as_str() == topic => t.partition_result.push(p),
            _ => by_topic.push(
                ReplicaElectionResult::default()
                    .with_topic(topic_name(&topic))
                    .with_partition_result(vec![p]),
            ),
        }
    }
    response.replica_election_results = by_topic;
    ResponseKind::ElectLeaders(response)
}

/// One partition's answer: Kafka sends the message with every error, none on success.
fn partition_result(partition: i32, result: Result<(), ApiError>) -> PartitionResult {
    let mut p = PartitionResult::default()
        .with_partition_id(partition)
        .with_error_message(None);
    if let Err(e) = result {
        p.error_code = e.code();
        p.error_message = Some(str_bytes(&e.message()));
    }
    p
}
