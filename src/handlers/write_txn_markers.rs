//! WriteTxnMarkers (key 27), v1: a transaction coordinator asks this node, as partition
//! leader, to write the markers that end transactions. Inter-broker only: the dispatcher serves
//! it only to other brokers' connections (see `server::dispatch`). Each partition answers for
//! itself once its marker is replicated.

use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ResponseKind, WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::errors::{code_of, ApiError};
use crate::group::service::GroupService;
use crate::group::OFFSETS_TOPIC_NAME;
use crate::metadata::MetadataImage;
use crate::replica::{ReplicaManager, TopicPartition};

/// How long markers wait for replication (Kafka uses `request.timeout.ms`).
const MARKER_WAIT: Duration = Duration::from_secs(30);

pub async fn handle(
    replicas: &ReplicaManager,
    groups: &GroupService,
    image: &MetadataImage,
    now_ms: i64,
    _version: i16,
    request: WriteTxnMarkersRequest,
) -> ResponseKind {
    let mut response = WriteTxnMarkersResponse::default();
    for m in request.markers {
        let partitions: Vec<TopicPartition> = m
            .topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| TopicPartition::new(t.name.0.as_str(), *p))
            })
            .collect();
        let outcomes = replicas
            .write_txn_markers(
                image,
                m.producer_id.0,
                m.producer_epoch,
                m.transaction_result,
                m.coordinator_epoch,
                &partitions,
                now_ms,
                MARKER_WAIT,
            )
            .await;
        for (tp, outcome) in partitions.iter().zip(&outcomes) {
            if outcome.is_ok() && tp.topic == OFFSETS_TOPIC_NAME {
                groups.complete_transaction(tp.partition, m.producer_id.0, m.transaction_result);
            }
        }
        let mut outcomes = outcomes.into_iter();
        let topics = m
            .topics
            .iter()
            .map(|t| {
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|p| {
                                let code = code_of(&outcomes.next().unwrap_or_else(|| {
                                    Err(ApiError::UnknownServerError(String::new()))
                                }));
                                WritableTxnMarkerPartitionResult::default()
                                    .with_partition_index(*p)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        response.markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics),
        );
    }
    ResponseKind::WriteTxnMarkers(response)
}
