//! DescribeQuorum (key 55), v0–2: the metadata quorum's leader, epoch, high watermark and every
//! voter's log end offset and fetch and caught-up times, for `kafka-metadata-quorum describe
//! --status` and `--replication`. Only the leader knows the voters' progress: another voter
//! answers NOT_LEADER_OR_FOLLOWER, as Kafka's does (brokers forward the request to the active
//! controller). The quorum's log is reported as Kafka's `__cluster_metadata` partition 0.

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::config::kraft::KraftConfig;
use crate::controller::ControllerChannel;
use crate::errors::ApiError;

/// The name Kafka's tools expect for the metadata log.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub fn handle(
    controller: &ControllerChannel,
    kraft: &KraftConfig,
    version: i16,
    request: DescribeQuorumRequest,
) -> ResponseKind {
    let quorum = controller.quorum();
    let active = controller.is_active();
    let mut topics = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let mut data = PartitionData::default()
                .with_partition_index(p.partition_index)
                .with_leader_id(BrokerId(-1));
            let error = if t.topic_name.0.as_str() != METADATA_TOPIC || p.partition_index != 0 {
                Some(ApiError::UnknownTopicOrPartition)
            } else if !active {
                Some(ApiError::NotLeaderOrFollower)
            } else {
                None
            };
            match error {
                Some(e) => {
                    data.error_code = e.code();
                    if version >= 2 {
                        data.error_message = Some(StrBytes::from_string(e.message()));
                    }
                }
                None => {
                    data.leader_id = BrokerId(quorum.leader_id);
                    data.leader_epoch = quorum.leader_epoch;
                    data.high_watermark = quorum.high_watermark;
                    data.current_voters = quorum
                        .voters
                        .iter()
                        .map(|v| {
                            let mut r = ReplicaState::default()
                                .with_replica_id(BrokerId(v.node_id))
                                .with_log_end_offset(v.log_end_offset);
                            if version >= 1 {
                                r.last_fetch_timestamp = v.last_fetch_timestamp;
                                r.last_caught_up_timestamp = v.last_caught_up_timestamp;
                            }
                            r
                        })
                        .collect();
                }
            }
            partitions.push(data);
        }
        topics.push(
            TopicData::default()
                .with_topic_name(TopicName(t.topic_name.0))
                .with_partitions(partitions),
        );
    }
    let mut response = DescribeQuorumResponse::default().with_topics(topics);
    if version >= 2 {
        let listener = kraft
            .controller_listener_names
            .first()
            .cloned()
            .unwrap_or_else(|| "CONTROLLER".to_owned());
        response.nodes = kraft
            .voters
            .iter()
            .map(|v| {
                Node::default()
                    .with_node_id(BrokerId(v.id))
                    .with_listeners(vec![Listener::default()
                        .with_name(StrBytes::from_string(listener.clone()))
                        .with_host(StrBytes::from_string(v.host.clone()))
                        .with_port(v.port)])
            })
            .collect();
    }
    ResponseKind::DescribeQuorum(response)
}
