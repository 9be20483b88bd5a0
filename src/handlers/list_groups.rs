//! ListGroups (key 16), v0-5: the groups this broker coordinates, filtered by state (v4+) and type (v5+).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use kafka_protocol::messages::{ListGroupsRequest, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

/// With an authorizer, only the groups the caller may DESCRIBE are listed, unless it may
/// DESCRIBE the cluster (Kafka's `handleListGroupsRequest`).
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    caller: Caller,
    request: ListGroupsRequest,
) -> ResponseKind {
    let mut response = groups
        .call(caller, GroupRequest::ListGroups(request))
        .await
        .into_response_kind();
    if auth.is_enabled() && !auth.allows_cluster(Op::Describe) {
        if let ResponseKind::ListGroups(r) = &mut response {
            r.groups
                .retain(|g| auth.allows(Resource::Group, g.group_id.as_str(), Op::Describe));
        }
    }
    response
}
