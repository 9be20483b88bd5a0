//! The Produce answer: each partition's append outcome as a `PartitionProduceResponse`, in
//! request order, grouped by topic as the request grouped them.

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::ProduceServices;
use crate::errors::ApiError;
use crate::handlers::current_leader::CurrentLeaders;
use crate::handlers::{str_bytes, topic_name};
use crate::replica::append::{PartitionAppend, TopicAppend};

pub(super) fn encode(
    services: &ProduceServices<'_>,
    version: i16,
    request: &ProduceRequest,
    appended: Vec<TopicAppend>,
) -> ProduceResponse {
    let mut leaders = CurrentLeaders::new(services.cache.image(), services.listener);
    let responses = appended
        .into_iter()
        .zip(&request.topic_data)
        .map(|(t, requested)| {
            let partition_responses = t
                .partitions
                .into_iter()
                .map(|o| partition_response(&mut leaders, version, &t.name, o))
                .collect();
            let mut r =
                TopicProduceResponse::default().with_partition_responses(partition_responses);
            if version >= 13 {
                r.topic_id = requested.topic_id;
            } else {
                r.name = topic_name(&t.name);
            }
            r
        })
        .collect();
    let mut response = ProduceResponse::default().with_responses(responses);
    if version >= 10 {
        response.node_endpoints = leaders.node_endpoints(|e| {
            NodeEndpoint::default()
                .with_node_id(e.node_id)
                .with_host(e.host)
                .with_port(e.port)
                .with_rack(e.rack)
        });
    }
    response
}

/// The error a produce is answered with. Never UNKNOWN_SERVER_ERROR: the Java idempotent
/// producer takes it as fatal for the batch's sequence and may write the records again
/// under a new one (KAFKA-14034). A failure this broker cannot name is reported as a storage
/// error, which every client retries with the same sequence.
fn produce_error(e: ApiError) -> ApiError {
    match e {
        ApiError::UnknownServerError(m) => ApiError::KafkaStorageError(m),
        e => e,
    }
}

fn partition_response(
    leaders: &mut CurrentLeaders<'_>,
    version: i16,
    topic: &str,
    outcome: PartitionAppend,
) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default().with_index(outcome.index);
    match outcome.result {
        Ok(a) => {
            r.base_offset = a.base_offset;
            r.log_append_time_ms = a.log_append_time;
            if version >= 5 {
                r.log_start_offset = a.log_start_offset;
            }
        }
        Err(e) => {
            let e = produce_error(e);
            r.error_code = e.code();
            r.base_offset = -1;
            r.log_append_time_ms = -1;
            if version >= 5 {
                r.log_start_offset = outcome.log_start_offset.unwrap_or(-1);
            }
            if version >= 8 {
                r.error_message = Some(str_bytes(&e.message()));
                if let ApiError::RecordErrors { record_errors, .. } = &e {
                    r.record_errors = record_errors
                        .iter()
                        .map(|(index, message)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(*index)
                                .with_batch_index_error_message(Some(str_bytes(message)))
                        })
                        .collect();
                }
            }
            if version >= 10 && e == ApiError::NotLeaderOrFollower {
                // KIP-951: tell the client who leads, saving a metadata round trip.
                let (leader, epoch) = leaders.name(topic, outcome.index);
                r.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(leader)
                    .with_leader_epoch(epoch);
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_produce_is_never_answered_with_unknown_server_error() {
        assert_eq!(
            produce_error(ApiError::UnknownServerError("bug".into())),
            ApiError::KafkaStorageError("bug".into())
        );
        for kept in [
            ApiError::NotEnoughReplicas,
            ApiError::NotEnoughReplicasAfterAppend,
            ApiError::RequestTimedOut,
            ApiError::NotLeaderOrFollower,
        ] {
            assert_eq!(produce_error(kept.clone()), kept);
        }
    }
}
