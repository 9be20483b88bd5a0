//! AlterPartitionReassignments (key 45), v0-1: starts, changes or cancels (null replicas) the
//! reassignment of partitions through the controller (`kafka-reassign-partitions --execute`,
//! `--cancel`, `Admin.alterPartitionReassignments`). Each partition is answered on its own;
//! see `controller::decisions::alter_reassignments` for the rules and errors. v1 carries
//! `allow_replication_factor_change` (KIP-860; v0 always allows it), echoed in the response.

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ResponseKind,
};

use super::{str_bytes, topic_name};
use crate::controller::ControllerChannel;
use crate::controller::ReassignmentItem;
use crate::errors::ApiError;

pub async fn handle(
    controller: &ControllerChannel,
    version: i16,
    request: AlterPartitionReassignmentsRequest,
) -> ResponseKind {
    let allow_replication_factor_change = version == 0 || request.allow_replication_factor_change;
    let items: Vec<ReassignmentItem> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| ReassignmentItem {
                topic: t.name.0.as_str().to_owned(),
                partition: p.partition_index,
                replicas: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    let mut response = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_replication_factor_change);
    let results = match controller
        .alter_partition_reassignments(items, allow_replication_factor_change)
        .await
    {
        Ok(results) => results,
        Err(e) => {
            response.error_code = e.code();
            response.error_message = Some(str_bytes(&e.message()));
            return ResponseKind::AlterPartitionReassignments(response);
        }
    };
    // One entry per topic of the request, in its order (the results come in item order).
    let mut results = results.into_iter();
    for t in &request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for _ in &t.partitions {
            let r = results.next().expect("one result per item");
            let mut p = ReassignablePartitionResponse::default()
                .with_partition_index(r.partition)
                .with_error_message(None);
            if let Err(e) = r.result {
                p.error_code = e.code();
                p.error_message = message_of(&e).map(|m| str_bytes(&m));
            }
            partitions.push(p);
        }
        response.responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic_name(t.name.0.as_str()))
                .with_partitions(partitions),
        );
    }
    ResponseKind::AlterPartitionReassignments(response)
}

/// The message Kafka sends with an error here: none when it would be the code's default message
/// (`ApiError.fromThrowable`), as for NO_REASSIGNMENT_IN_PROGRESS.
fn message_of(e: &ApiError) -> Option<String> {
    match e.kind() {
        ApiError::NoReassignmentInProgress => None,
        _ => Some(e.message()),
    }
}
