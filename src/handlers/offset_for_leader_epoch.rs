//! OffsetForLeaderEpoch (key 23), v2-4: the end offset of a leader epoch from the leader's
//! epoch cache (Kafka's `endOffsetFor`). Leader-only, for consumers too, with
//! `current_leader_epoch` fencing.

use crate::metadata::MetadataImage;
use crate::replica::ReplicaManager;
use crate::replica::TopicPartition;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ResponseKind,
};

pub fn handle(
    replicas: &ReplicaManager,
    image: &MetadataImage,
    _version: i16,
    request: OffsetForLeaderEpochRequest,
) -> ResponseKind {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.topic.0.as_str().to_owned();
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let tp = TopicPartition {
                        topic: name.clone(),
                        partition: p.partition,
                    };
                    let mut r = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let result = replicas
                        .partition_or_error(image, &tp)
                        .and_then(|partition| {
                            partition.last_offset_for_leader_epoch(
                                p.current_leader_epoch,
                                p.leader_epoch,
                            )
                        });
                    match result {
                        Ok(end) => {
                            r.leader_epoch = end.epoch;
                            r.end_offset = end.end_offset;
                        }
                        Err(e) => r.error_code = e.code(),
                    }
                    r
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse::default().with_topics(topics))
}
