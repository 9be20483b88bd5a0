//! OffsetCommit (key 8), v2-9: stores committed offsets in `__consumer_offsets`.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{OffsetCommitRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: OffsetCommitRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::OffsetCommit(request))
        .await
        .into_response_kind()
}
