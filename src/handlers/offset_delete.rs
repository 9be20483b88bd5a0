//! OffsetDelete (key 47), v0: deletes committed offsets of topics a group no longer subscribes to.
//!
//! The group coordinator ([`crate::group`]) decides; this handler only passes the request on.

use std::sync::Arc;

use kafka_protocol::messages::{OffsetDeleteRequest, ResponseKind};

use crate::broker::Broker;
use crate::group::service::Caller;
use crate::group::GroupRequest;

pub async fn handle(
    broker: &Arc<Broker>,
    caller: Caller,
    request: OffsetDeleteRequest,
) -> ResponseKind {
    broker
        .groups
        .call(caller, GroupRequest::OffsetDelete(request))
        .await
        .into_response_kind()
}
