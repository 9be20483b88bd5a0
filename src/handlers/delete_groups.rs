//! DeleteGroups (key 42), v0-2: deletes empty groups and their offsets.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{DeleteGroupsRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: DeleteGroupsRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::DeleteGroups(request))
        .await
        .into_response_kind()
}
