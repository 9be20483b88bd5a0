//! SyncGroup (key 14), v0-5: the leader hands out assignments; every member's response waits for the leader's.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{ResponseKind, SyncGroupRequest};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(ctx: &Arc<Context>, caller: Caller, request: SyncGroupRequest) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::SyncGroup(request))
        .await
        .into_response_kind()
}
