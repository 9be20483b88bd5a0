//! ConsumerGroupDescribe (key 69), v0-1: a KIP-848 group's epochs, assignor and members with
//! their current and target assignments.
//!
//! The group coordinator ([`crate::group`]) answers from its durable state; the metadata image
//! names the assigned topics.

use std::sync::Arc;

use kafka_protocol::messages::{ConsumerGroupDescribeRequest, ResponseKind};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;
use crate::metadata::MetadataImage;

pub async fn handle(
    groups: &GroupService,
    image: Arc<MetadataImage>,
    caller: Caller,
    request: ConsumerGroupDescribeRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::ConsumerGroupDescribe(request, image))
        .await
        .into_response_kind()
}
