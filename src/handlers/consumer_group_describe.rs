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
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{GroupRequest, GroupResponse};
use crate::metadata::MetadataImage;

/// With an authorizer, a group the caller may not DESCRIBE is answered
/// GROUP_AUTHORIZATION_FAILED and not described; KIP-430's authorized operations are answered
/// when asked for.
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
