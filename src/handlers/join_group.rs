//! JoinGroup (key 11), v0-9: joins a member to a group; the response waits until the rebalance completes.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on,
//! once the caller may READ the group (else GROUP_AUTHORIZATION_FAILED, with an authorizer).

use std::sync::Arc;

use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;
use crate::metadata::MetadataImage;

pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    image: Arc<MetadataImage>,
    caller: Caller,
    request: JoinGroupRequest,
) -> ResponseKind {
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        return ResponseKind::JoinGroup(
            JoinGroupResponse::default().with_error_code(ApiError::GroupAuthorizationFailed.code()),
        );
    }
    groups
        .call(caller, GroupRequest::JoinGroup(request, image))
        .await
        .into_response_kind()
}
