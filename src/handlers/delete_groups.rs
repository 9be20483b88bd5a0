//! DeleteGroups (key 42), v0-2: deletes empty groups and their offsets.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{GroupRequest, GroupResponse};

/// With an authorizer, a group the caller may not DELETE is answered
/// GROUP_AUTHORIZATION_FAILED and kept.
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    mut request: DeleteGroupsRequest,
) -> ResponseKind {
    let mut refused = Vec::new();
    request.groups_names.retain(|g| {
        let allowed = auth.allows(Resource::Group, g.as_str(), Op::Delete);
        if !allowed {
            refused.push(
                DeletableGroupResult::default()
                    .with_group_id(g.clone())
                    .with_error_code(ApiError::GroupAuthorizationFailed.code()),
            );
        }
        allowed
    });
    if refused.is_empty() {
        return groups
            .call(caller, GroupRequest::DeleteGroups(request))
            .await
            .into_response_kind();
    }
    let mut response = DeleteGroupsResponse::default();
    if !request.groups_names.is_empty() {
        match groups
            .call(caller, GroupRequest::DeleteGroups(request))
            .await
        {
            GroupResponse::DeleteGroups(r) => response = r,
            other => return other.into_response_kind(),
        }
    }
    refused.append(&mut response.results);
    response.results = refused;
    ResponseKind::DeleteGroups(response)
}
