//! ListGroups (key 16), v0-5: the groups this broker coordinates, filtered by state (v4+) and type (v5+).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{ListGroupsRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: ListGroupsRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::ListGroups(request))
        .await
        .into_response_kind()
}
