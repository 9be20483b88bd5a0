//! OffsetDelete (key 47), v0: deletes committed offsets of topics a group no longer subscribes to.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{OffsetDeleteRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: OffsetDeleteRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::OffsetDelete(request))
        .await
        .into_response_kind()
}
