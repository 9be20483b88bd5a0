//! LeaveGroup (key 13), v0-5: members leave (one at a time before v3, batched from v3).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{LeaveGroupRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: LeaveGroupRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::LeaveGroup(request))
        .await
        .into_response_kind()
}
