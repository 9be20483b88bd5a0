//! Heartbeat (key 12), v0-4: keeps a member's session alive and tells it about rebalances.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on,
//! once the caller may READ the group (else GROUP_AUTHORIZATION_FAILED, with an authorizer).

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    request: HeartbeatRequest,
) -> ResponseKind {
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        return ResponseKind::Heartbeat(
            HeartbeatResponse::default().with_error_code(ApiError::GroupAuthorizationFailed.code()),
        );
    }
    groups
        .call(caller, GroupRequest::Heartbeat(request))
        .await
        .into_response_kind()
}
