//! JoinGroup (key 11), v0-9: joins a member to a group; the response waits until the rebalance completes.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{JoinGroupRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(ctx: &Arc<Context>, caller: Caller, request: JoinGroupRequest) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::JoinGroup(request))
        .await
        .into_response_kind()
}
