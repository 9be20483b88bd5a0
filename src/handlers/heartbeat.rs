//! Heartbeat (key 12), v0-4: keeps a member's session alive and tells it about rebalances.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{HeartbeatRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: HeartbeatRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::Heartbeat(request))
        .await
        .into_response_kind()
}
