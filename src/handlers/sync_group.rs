//! SyncGroup (key 14), v0-5: the leader hands out assignments; every member's response waits for the leader's.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on,
//! once the caller may READ the group (else GROUP_AUTHORIZATION_FAILED, with an authorizer).

use kafka_protocol::messages::{ResponseKind, SyncGroupRequest, SyncGroupResponse};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    request: SyncGroupRequest,
) -> ResponseKind {
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        return ResponseKind::SyncGroup(
            SyncGroupResponse::default().with_error_code(ApiError::GroupAuthorizationFailed.code()),
        );
    }
    groups
        .call(caller, GroupRequest::SyncGroup(request))
        .await
        .into_response_kind()
}
