//! OffsetDelete (key 47), v0: deletes committed offsets of topics a group no longer subscribes to.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

/// With an authorizer: DELETE on the group (else GROUP_AUTHORIZATION_FAILED, nothing
/// deleted), and READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions, kept).
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    mut request: OffsetDeleteRequest,
) -> ResponseKind {
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Delete) {
        return ResponseKind::OffsetDelete(
            OffsetDeleteResponse::default()
                .with_error_code(ApiError::GroupAuthorizationFailed.code()),
        );
    }
    let mut refused = Vec::new();
    request.topics.retain(|t| {
        let allowed = auth.allows(Resource::Topic, t.name.as_str(), Op::Read);
        if !allowed {
            refused.push(topic_answered(t, ApiError::TopicAuthorizationFailed.code()));
        }
        allowed
    });
    let mut response = groups
        .call(caller, GroupRequest::OffsetDelete(request))
        .await
        .into_response_kind();
    if let ResponseKind::OffsetDelete(r) = &mut response {
        refused.append(&mut r.topics);
        r.topics = refused;
    }
    response
}

/// `topic` with every partition it names answered `code`.
pub(super) fn topic_answered(
    topic: &OffsetDeleteRequestTopic,
    code: i16,
) -> OffsetDeleteResponseTopic {
    OffsetDeleteResponseTopic::default()
        .with_name(topic.name.clone())
        .with_partitions(
            topic
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect(),
        )
}
