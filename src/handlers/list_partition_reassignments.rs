//! ListPartitionReassignments (key 46), v0: the partition reassignments in progress
//! (`kafka-reassign-partitions --list`, `Admin.listPartitionReassignments`).
//!
//! This broker never moves replicas (no AlterPartitionReassignments), so no reassignment is ever
//! in progress and the answer is an empty list. As in Kafka's controller, named topics that do
//! not exist are skipped rather than reported as errors.

use std::sync::Arc;

use kafka_protocol::messages::{
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, ResponseKind,
};

use crate::context::Context;

pub fn handle(
    _broker: &Arc<Context>,
    _version: i16,
    _request: ListPartitionReassignmentsRequest,
) -> ResponseKind {
    ResponseKind::ListPartitionReassignments(
        ListPartitionReassignmentsResponse::default().with_error_message(None),
    )
}
