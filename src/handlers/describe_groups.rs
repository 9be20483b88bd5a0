//! DescribeGroups (key 15), v0-6: state, protocol and members of groups.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{DescribeGroupsRequest, ResponseKind};

use crate::broker::Broker;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    broker: &Arc<Broker>,
    caller: Caller,
    request: DescribeGroupsRequest,
) -> ResponseKind {
    broker
        .groups
        .call(caller, GroupRequest::DescribeGroups(request))
        .await
        .into_response_kind()
}
