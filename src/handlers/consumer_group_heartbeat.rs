//! ConsumerGroupHeartbeat (key 68), v0-1: a KIP-848 member joins, heartbeats, reconciles its
//! assignment and leaves.
//!
//! The group coordinator ([`crate::group`]) decides, against the metadata image the member's
//! subscription is resolved in; this handler only passes the request on, once the caller may
//! READ the group (else GROUP_AUTHORIZATION_FAILED, with an authorizer).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, ResponseKind,
};

use super::authz::{Op, RequestAuth, Resource};
use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;
use crate::metadata::MetadataImage;

pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    image: Arc<MetadataImage>,
    caller: Caller,
    request: ConsumerGroupHeartbeatRequest,
) -> ResponseKind {
    if !groups.config().consumer_protocol_enabled {
        // As Kafka when `group.coordinator.rebalance.protocols` leaves out `consumer`.
        return ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(ResponseError::UnsupportedVersion.code()),
        );
    }
    if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        return ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(ResponseError::GroupAuthorizationFailed.code()),
        );
    }
    groups
        .call(caller, GroupRequest::ConsumerGroupHeartbeat(request, image))
        .await
        .into_response_kind()
}
