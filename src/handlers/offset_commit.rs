//! OffsetCommit (key 8), v2-9: stores committed offsets in `__consumer_offsets`.
//!
//! The group coordinator ([`crate::group`]) decides. Before it sees the request, this handler
//! answers UNKNOWN_TOPIC_OR_PARTITION for every partition the metadata image does not have (a
//! topic that does not exist, a partition beyond its count) and leaves those out of what the
//! coordinator stores, as Kafka's `KafkaApis.handleOffsetCommitRequest` does. A request with
//! nothing left is answered without the coordinator, so even a group this node does not
//! coordinate gets those per-partition answers.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, ResponseKind, TopicName,
};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{GroupRequest, GroupResponse};
use crate::metadata::MetadataImage;

pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    image: &MetadataImage,
    caller: Caller,
    mut request: OffsetCommitRequest,
) -> ResponseKind {
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        let all: Vec<(TopicName, Vec<i32>, i16)> = request
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                    ApiError::GroupAuthorizationFailed.code(),
                )
            })
            .collect();
        return ResponseKind::OffsetCommit(merge_refused(OffsetCommitResponse::default(), all));
    }
    let mut refused: Vec<(TopicName, Vec<i32>, i16)> = Vec::new();
    if auth.is_enabled() {
        request.topics.retain(|t| {
            let allowed = auth.allows(Resource::Topic, t.name.as_str(), Op::Read);
            if !allowed {
                refused.push((
                    t.name.clone(),
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                    ApiError::TopicAuthorizationFailed.code(),
                ));
            }
            allowed
        });
    }
    let unknown = take_unknown_partitions(image, &mut request);
    let error = ApiError::UnknownTopicOrPartition.code();
    refused.extend(unknown.into_iter().map(|(t, p)| (t, p, error)));
    let unknown = refused;
    if unknown.is_empty() {
        return groups
            .call(caller, GroupRequest::OffsetCommit(request))
            .await
            .into_response_kind();
    }
    let mut response = OffsetCommitResponse::default();
    if !request.topics.is_empty() {
        match groups
            .call(caller, GroupRequest::OffsetCommit(request))
            .await
        {
            GroupResponse::OffsetCommit(r) => response = r,
            other => return other.into_response_kind(),
        }
    }
    ResponseKind::OffsetCommit(merge_refused(response, unknown))
}

/// Removes from `request` every partition `image` does not have and returns them, by topic in
/// request order.
fn take_unknown_partitions(
    image: &MetadataImage,
    request: &mut OffsetCommitRequest,
) -> Vec<(TopicName, Vec<i32>)> {
    let mut unknown = Vec::new();
    request.topics.retain_mut(|topic| {
        let known = image.topic(topic.name.as_str());
        let mut missing = Vec::new();
        topic.partitions.retain(|p| {
            let exists = known.is_some_and(|t| t.partitions.contains_key(&p.partition_index));
            if !exists {
                missing.push(p.partition_index);
            }
            exists
        });
        if !missing.is_empty() {
            unknown.push((topic.name.clone(), missing));
        }
        !topic.partitions.is_empty()
    });
    unknown
}

/// The answer: the unknown partitions first, then the coordinator's, a topic answered by both
/// keeping its place, as Kafka's `OffsetCommitResponse.Builder` merges them.
#[cfg(test)]
fn merge_unknown(
    response: OffsetCommitResponse,
    unknown: Vec<(TopicName, Vec<i32>)>,
) -> OffsetCommitResponse {
    let error = ApiError::UnknownTopicOrPartition.code();
    merge_refused(
        response,
        unknown.into_iter().map(|(t, p)| (t, p, error)).collect(),
    )
}

/// The answer: the refused partitions (each topic's with its error) first, then the
/// coordinator's, a topic answered by both keeping its place.
fn merge_refused(
    response: OffsetCommitResponse,
    refused: Vec<(TopicName, Vec<i32>, i16)>,
) -> OffsetCommitResponse {
    let mut topics: Vec<OffsetCommitResponseTopic> = refused
        .into_iter()
        .map(|(name, partitions, error)| {
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(error)
                        })
                        .collect(),
                )
        })
        .collect();
    let throttle_time_ms = response.throttle_time_ms;
    for mut answered in response.topics {
        match topics.iter_mut().find(|t| t.name == answered.name) {
            Some(t) => t.partitions.append(&mut answered.partitions),
            None => topics.push(answered),
        }
    }
    OffsetCommitResponse::default()
        .with_throttle_time_ms(throttle_time_ms)
        .with_topics(topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::protocol::StrBytes;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    fn topic(s: &str, partitions: &[i32]) -> OffsetCommitRequestTopic {
        OffsetCommitRequestTopic::default()
            .with_name(name(s))
            .with_partitions(
                partitions
                    .iter()
                    .map(|p| OffsetCommitRequestPartition::default().with_partition_index(*p))
                    .collect(),
            )
    }

    #[test]
    fn unknown_partitions_are_taken_out_and_answered_first() {
        let mut image = MetadataImage::default();
        let partition = crate::metadata::PartitionRegistration {
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            leader_recovery_state: crate::metadata::LeaderRecoveryState::Recovered,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        };
        image.topics.insert(
            "known".to_owned(),
            std::sync::Arc::new(crate::metadata::TopicImage {
                name: "known".to_owned(),
                id: uuid::Uuid::from_u128(7),
                partitions: [(0, partition.clone()), (1, partition)].into(),
                configs: Default::default(),
                history: Default::default(),
            }),
        );
        let mut request = OffsetCommitRequest::default()
            .with_topics(vec![topic("missing", &[0, 1]), topic("known", &[0, 5, 1])]);
        let unknown = take_unknown_partitions(&image, &mut request);
        assert_eq!(
            unknown,
            vec![(name("missing"), vec![0, 1]), (name("known"), vec![5])]
        );
        assert_eq!(request.topics, vec![topic("known", &[0, 1])]);

        let coordinator =
            OffsetCommitResponse::default().with_topics(vec![OffsetCommitResponseTopic::default()
                .with_name(name("known"))
                .with_partitions(vec![
                    OffsetCommitResponsePartition::default().with_partition_index(0),
                    OffsetCommitResponsePartition::default().with_partition_index(1),
                ])]);
        let merged = merge_unknown(coordinator, unknown);
        let shape: Vec<(String, Vec<(i32, i16)>)> = merged
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.partitions
                        .iter()
                        .map(|p| (p.partition_index, p.error_code))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("missing".to_owned(), vec![(0, 3), (1, 3)]),
                ("known".to_owned(), vec![(5, 3), (0, 0), (1, 0)]),
            ]
        );
    }
}
