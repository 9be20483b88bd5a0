//! ConsumerGroupHeartbeat (key 68), v0-1: a KIP-848 member joins, heartbeats, reconciles its
//! assignment and leaves.
//!
//! The group coordinator ([`crate::group`]) decides, against the metadata image the member's
//! subscription is resolved in; this handler only passes the request on, once the caller may
//! READ the group (else GROUP_AUTHORIZATION_FAILED, with an authorizer) and DESCRIBE every topic
//! it names in `subscribed_topic_names` (else TOPIC_AUTHORIZATION_FAILED naming them, and the
//! group is left as it was: Kafka's `handleConsumerGroupHeartbeat`, KAFKA-18813). The caller's
//! rights go with the request: the topics its regex matches are those it may DESCRIBE.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

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
    if let Some(refused) = refused_topics(auth, &request) {
        return ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                .with_error_message(Some(StrBytes::from_string(format!(
                    "Not authorized to access topics: [{}]",
                    refused.join(", ")
                )))),
        );
    }
    groups
        .call(
            caller,
            GroupRequest::ConsumerGroupHeartbeat(request, image, Arc::new(auth.clone())),
        )
        .await
        .into_response_kind()
}

/// The topics of the subscription by name the caller may not DESCRIBE, in name order; `None`
/// when there are none (or the heartbeat leaves the subscription unchanged).
fn refused_topics(
    auth: &RequestAuth,
    request: &ConsumerGroupHeartbeatRequest,
) -> Option<Vec<String>> {
    let names = request.subscribed_topic_names.as_ref()?;
    let refused: std::collections::BTreeSet<&str> = names
        .iter()
        .map(|n| n.as_str())
        .filter(|n| !auth.allows(Resource::Topic, n, Op::Describe))
        .collect();
    if refused.is_empty() {
        None
    } else {
        Some(refused.into_iter().map(str::to_owned).collect())
    }
}
