//! JoinGroup (key 11), v0-9: joins a member to a group; the response waits until the rebalance completes.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{JoinGroupRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;
use crate::metadata::MetadataImage;

pub async fn handle(
    groups: &GroupService,
    image: Arc<MetadataImage>,
    caller: Caller,
    request: JoinGroupRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::JoinGroup(request, image))
        .await
        .into_response_kind()
}
