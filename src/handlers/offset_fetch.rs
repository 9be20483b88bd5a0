//! OffsetFetch (key 9), v1-9: committed offsets of one group, or of several from v8.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{OffsetFetchRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: OffsetFetchRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::OffsetFetch(request))
        .await
        .into_response_kind()
}
