//! DeleteGroups (key 42), v0-2: deletes empty groups and their offsets.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{DeleteGroupsRequest, ResponseKind};

use crate::broker::Broker;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    broker: &Arc<Broker>,
    caller: Caller,
    request: DeleteGroupsRequest,
) -> ResponseKind {
    broker
        .groups
        .call(caller, GroupRequest::DeleteGroups(request))
        .await
        .into_response_kind()
}
