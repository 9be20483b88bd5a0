//! DescribeGroups (key 15), v0-6: state, protocol and members of groups.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{DescribeGroupsRequest, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    ctx: &Arc<Context>,
    caller: Caller,
    request: DescribeGroupsRequest,
) -> ResponseKind {
    ctx.groups
        .call(caller, GroupRequest::DescribeGroups(request))
        .await
        .into_response_kind()
}
