//! ConsumerGroupDescribe (key 69), v0-1: a KIP-848 group's epochs, assignor and members with
//! their current and target assignments.
//!
//! The group coordinator ([`crate::group`]) answers from its durable state; the metadata image
//! names the assigned topics.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ResponseKind,
};

use super::authz::{Op, RequestAuth, Resource, AUTHORIZED_OPERATIONS_OMITTED};
use super::str_bytes;
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{GroupRequest, GroupResponse};
use crate::metadata::MetadataImage;

/// With an authorizer, a group the caller may not DESCRIBE is answered
/// GROUP_AUTHORIZATION_FAILED and not described, and a group whose members subscribe to or are
/// assigned a topic the caller may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED and not
/// described either (Kafka's `handleConsumerGroupDescribe`, KAFKA-18813); KIP-430's authorized
/// operations are answered when asked for.
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    image: Arc<MetadataImage>,
    caller: Caller,
    mut request: ConsumerGroupDescribeRequest,
) -> ResponseKind {
    let asked = request.group_ids.clone();
    let include = request.include_authorized_operations;
    request
        .group_ids
        .retain(|g| auth.allows(Resource::Group, g.as_str(), Op::Describe));
    let mut described = if request.group_ids.is_empty() {
        ConsumerGroupDescribeResponse::default()
    } else {
        match groups
            .call(caller, GroupRequest::ConsumerGroupDescribe(request, image))
            .await
        {
            GroupResponse::ConsumerGroupDescribe(r) => r,
            other => return other.into_response_kind(),
        }
    };
    let mut answered = std::mem::take(&mut described.groups).into_iter();
    described.groups = asked
        .iter()
        .map(|g| {
            if auth.allows(Resource::Group, g.as_str(), Op::Describe) {
                let mut d = answered
                    .next()
                    .unwrap_or_else(|| DescribedGroup::default().with_group_id(g.clone()));
                if uses_hidden_topics(auth, &d) {
                    return DescribedGroup::default()
                        .with_group_id(g.clone())
                        .with_error_code(ApiError::TopicAuthorizationFailed.code())
                        .with_error_message(Some(str_bytes(HIDDEN_TOPICS_MESSAGE)))
                        .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
                }
                d.authorized_operations = auth.operations_if(include, Resource::Group, g.as_str());
                d
            } else {
                DescribedGroup::default()
                    .with_group_id(g.clone())
                    .with_error_code(ApiError::GroupAuthorizationFailed.code())
                    .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
            }
        })
        .collect();
    ResponseKind::ConsumerGroupDescribe(described)
}

/// The message of a group refused for its topics.
const HIDDEN_TOPICS_MESSAGE: &str =
    "The described group uses topics that the client is not authorized to describe.";

/// Whether a member of `group` subscribes to, is assigned or is to be assigned a topic the
/// caller may not DESCRIBE.
fn uses_hidden_topics(auth: &RequestAuth, group: &DescribedGroup) -> bool {
    if !auth.is_enabled() {
        return false;
    }
    let mut topics = std::collections::BTreeSet::new();
    for m in &group.members {
        topics.extend(m.subscribed_topic_names.iter().map(|t| t.as_str()));
        for a in [&m.assignment, &m.target_assignment] {
            topics.extend(a.topic_partitions.iter().map(|tp| tp.topic_name.as_str()));
        }
    }
    // A deleted topic's name is no longer known: there is nothing of it to hide.
    topics
        .into_iter()
        .filter(|t| !t.is_empty())
        .any(|t| !auth.allows(Resource::Topic, t, Op::Describe))
}
