//! OffsetFetch (key 9), v1-9: committed offsets of one group, or of several from v8.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

/// With an authorizer (Kafka's `handleOffsetFetchRequest`): a group the caller may not DESCRIBE
/// (READ implies it) is answered GROUP_AUTHORIZATION_FAILED with no offsets; of the topics asked
/// for, those it may not DESCRIBE are answered TOPIC_AUTHORIZATION_FAILED per partition (offset
/// -1); when all topics are asked for, those it may not DESCRIBE are left out.
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    request: OffsetFetchRequest,
) -> ResponseKind {
    if !auth.is_enabled() {
        return groups
            .call(caller, GroupRequest::OffsetFetch(request))
            .await
            .into_response_kind();
    }
    let group_error = ApiError::GroupAuthorizationFailed.code();
    let topic_error = ApiError::TopicAuthorizationFailed.code();
    let describable = |name: &str| auth.allows(Resource::Topic, name, Op::Describe);
    let single_group = request.groups.is_empty();
    if single_group && !auth.allows(Resource::Group, request.group_id.as_str(), Op::Describe) {
        return ResponseKind::OffsetFetch(
            OffsetFetchResponse::default().with_error_code(group_error),
        );
    }
    let all_topics = request.topics.is_none();
    let all_topics_of: std::collections::HashSet<String> = request
        .groups
        .iter()
        .filter(|g| g.topics.is_none())
        .map(|g| g.group_id.to_string())
        .collect();
    let mut response = groups
        .call(caller, GroupRequest::OffsetFetch(request))
        .await
        .into_response_kind();
    let ResponseKind::OffsetFetch(r) = &mut response else {
        return response;
    };
    if single_group && all_topics {
        r.topics.retain(|t| describable(t.name.as_str()));
    }
    for t in &mut r.topics {
        if !describable(t.name.as_str()) {
            for p in &mut t.partitions {
                p.committed_offset = -1;
                p.committed_leader_epoch = -1;
                p.metadata = Some(Default::default());
                p.error_code = topic_error;
            }
        }
    }
    for g in &mut r.groups {
        if !auth.allows(Resource::Group, g.group_id.as_str(), Op::Describe) {
            g.topics.clear();
            g.error_code = group_error;
            continue;
        }
        if all_topics_of.contains(g.group_id.as_str()) {
            g.topics.retain(|t| describable(t.name.as_str()));
        }
        for t in &mut g.topics {
            if !describable(t.name.as_str()) {
                for p in &mut t.partitions {
                    p.committed_offset = -1;
                    p.committed_leader_epoch = -1;
                    p.metadata = Some(Default::default());
                    p.error_code = topic_error;
                }
            }
        }
    }
    response
}
