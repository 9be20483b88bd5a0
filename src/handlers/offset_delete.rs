//! OffsetDelete (key 47), v0: deletes committed offsets of topics a group no longer subscribes to.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{OffsetDeleteRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: OffsetDeleteRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::OffsetDelete(request))
        .await
        .into_response_kind()
}
