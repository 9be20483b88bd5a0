//! Heartbeat (key 12), v0-4: keeps a member's session alive and tells it about rebalances.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{HeartbeatRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(ctx: &Arc<Context>, caller: Caller, request: HeartbeatRequest) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::Heartbeat(request))
        .await
        .into_response_kind()
}
