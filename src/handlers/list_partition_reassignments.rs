//! ListPartitionReassignments (key 46), v0: the partition reassignments in progress, with their
//! replicas, adding and removing replicas (`kafka-reassign-partitions --list` and `--verify`,
//! `Admin.listPartitionReassignments`), read from this broker's metadata image. As in Kafka's
//! controller, named topics that do not exist and named partitions that are not being reassigned
//! are left out rather than reported as errors (`controller::decisions::list_reassignments`).

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, ResponseKind,
};

use super::topic_name;
use crate::controller::decisions::list_reassignments;
use crate::metadata::MetadataImage;

pub fn handle(
    image: &MetadataImage,
    _version: i16,
    request: ListPartitionReassignmentsRequest,
) -> ResponseKind {
    let named: Option<Vec<(String, Vec<i32>)>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.0.as_str().to_owned(), t.partition_indexes))
            .collect()
    });
    let brokers = |ids: Vec<i32>| ids.into_iter().map(BrokerId).collect::<Vec<_>>();
    let topics = list_reassignments(image, named.as_deref())
        .into_iter()
        .map(|(name, partitions)| {
            OngoingTopicReassignment::default()
                .with_name(topic_name(&name))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|p| {
                            OngoingPartitionReassignment::default()
                                .with_partition_index(p.partition)
                                .with_replicas(brokers(p.replicas))
                                .with_adding_replicas(brokers(p.adding_replicas))
                                .with_removing_replicas(brokers(p.removing_replicas))
                        })
                        .collect(),
                )
        })
        .collect();
    ResponseKind::ListPartitionReassignments(
        ListPartitionReassignmentsResponse::default()
            .with_error_message(None)
            .with_topics(topics),
    )
}
