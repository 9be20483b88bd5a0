//! DescribeGroups (key 15), v0-6: state, protocol and members of groups.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource, AUTHORIZED_OPERATIONS_OMITTED};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{GroupRequest, GroupResponse};

/// With an authorizer, a group the caller may not DESCRIBE is answered
/// GROUP_AUTHORIZATION_FAILED and not described; KIP-430's authorized operations of each group
/// are answered when asked for (v3+).
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    mut request: DescribeGroupsRequest,
) -> ResponseKind {
    let asked = request.groups.clone();
    let include = caller.api_version >= 3 && request.include_authorized_operations;
    request
        .groups
        .retain(|g| auth.allows(Resource::Group, g.as_str(), Op::Describe));
    let mut described = if request.groups.is_empty() {
        DescribeGroupsResponse::default()
    } else {
        match groups
            .call(caller, GroupRequest::DescribeGroups(request))
            .await
        {
            GroupResponse::DescribeGroups(r) => r,
            other => return other.into_response_kind(),
        }
    };
    let mut answered = std::mem::take(&mut described.groups).into_iter();
    // In the order asked, the refused ones in their places.
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
    ResponseKind::DescribeGroups(described)
}
