//! LeaveGroup (key 13), v0-5: members leave (one at a time before v3, batched from v3).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{LeaveGroupRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: LeaveGroupRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::LeaveGroup(request))
        .await
        .into_response_kind()
}
