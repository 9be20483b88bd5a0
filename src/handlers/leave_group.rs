//! LeaveGroup (key 13), v0-5: members leave (one at a time before v3, batched from v3).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on,
//! once the caller may READ the group (else GROUP_AUTHORIZATION_FAILED, with an authorizer).

use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    request: LeaveGroupRequest,
) -> ResponseKind {
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        return ResponseKind::LeaveGroup(
            LeaveGroupResponse::default()
                .with_error_code(ApiError::GroupAuthorizationFailed.code()),
        );
    }
    groups
        .call(caller, GroupRequest::LeaveGroup(request))
        .await
        .into_response_kind()
}
