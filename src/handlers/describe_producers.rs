//! DescribeProducers (key 61), v0: the producers a partition's log holds state for, with their
//! open transactions (`kafka-transactions.sh describe-producers` and `find-hanging`). Answered
//! by the partition's leader; elsewhere NOT_LEADER_OR_FOLLOWER, as in Kafka.

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, ProducerId, ResponseKind,
};

use crate::metadata::MetadataImage;
use crate::replica::{ReplicaManager, TopicPartition};

pub fn handle(
    replicas: &ReplicaManager,
    image: &MetadataImage,
    _version: i16,
    request: DescribeProducersRequest,
) -> ResponseKind {
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|p| {
                    let tp = TopicPartition::new(t.name.0.as_str(), *p);
                    let r = PartitionResponse::default().with_partition_index(*p);
                    match replicas.active_producers(image, &tp) {
                        Ok(producers) => r.with_active_producers(
                            producers
                                .into_iter()
                                .map(|a| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(a.producer_id))
                                        .with_producer_epoch(i32::from(a.producer_epoch))
                                        .with_last_sequence(a.last_sequence)
                                        .with_last_timestamp(a.last_timestamp)
                                        .with_coordinator_epoch(a.coordinator_epoch)
                                        .with_current_txn_start_offset(a.current_txn_start_offset)
                                })
                                .collect(),
                        ),
                        Err(e) => r
                            .with_error_code(e.code())
                            .with_error_message(Some(super::str_bytes(&e.message()))),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::DescribeProducers(DescribeProducersResponse::default().with_topics(topics))
}
