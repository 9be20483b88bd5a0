//! OffsetFetch (key 9), v1-9: committed offsets of one group, or of several from v8.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{OffsetFetchRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: OffsetFetchRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::OffsetFetch(request))
        .await
        .into_response_kind()
}
