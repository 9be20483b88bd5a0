//! DeleteGroups (key 42), v0-2: deletes empty groups and their offsets.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{DeleteGroupsRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: DeleteGroupsRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::DeleteGroups(request))
        .await
        .into_response_kind()
}
