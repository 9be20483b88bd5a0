//! ListGroups (key 16), v0-5: the groups this broker coordinates, filtered by state (v4+) and type (v5+).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{ListGroupsRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: ListGroupsRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::ListGroups(request))
        .await
        .into_response_kind()
}
