//! SyncGroup (key 14), v0-5: the leader hands out assignments; every member's response waits for the leader's.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{ResponseKind, SyncGroupRequest};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: SyncGroupRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::SyncGroup(request))
        .await
        .into_response_kind()
}
