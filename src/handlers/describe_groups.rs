//! DescribeGroups (key 15), v0-6: state, protocol and members of groups.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{DescribeGroupsRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: DescribeGroupsRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::DescribeGroups(request))
        .await
        .into_response_kind()
}
