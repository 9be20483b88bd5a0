//! LeaveGroup (key 13), v0-5: members leave (one at a time before v3, batched from v3).
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{LeaveGroupRequest, ResponseKind};

use crate::broker::Broker;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    broker: &Arc<Broker>,
    caller: Caller,
    request: LeaveGroupRequest,
) -> ResponseKind {
    broker
        .groups
        .call(caller, GroupRequest::LeaveGroup(request))
        .await
        .into_response_kind()
}
