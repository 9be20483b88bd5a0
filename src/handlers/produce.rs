//! Produce (key 0): append each partition's batches as leader, then answer by `acks`.
//!
//! acks=0 gets no response at all; acks=1 is answered after the local append; acks=-1 is
//! refused NOT_ENOUGH_REPLICAS before anything is written when the ISR is below the effective
//! min ISR, else waits in the purgatory until the high watermark covers the last appended
//! offset: NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR shrank below min ISR
//! meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved while it waited; REQUEST_TIMED_OUT at
//! `timeout_ms` (Kafka's `DelayedProduce`). Batches are stored as produced, whatever their
//! codec: the broker only reads and rewrites the v2 batch header (storage does that), except
//! that a compacted topic's log reads each record's key length (decompressing if need be). A
//! retried batch of an idempotent producer is answered with the offsets of the original,
//! without error.
//!
//! On a compacted topic the log refuses a batch holding a record without a key: INVALID_RECORD
//! with the refused records in `record_errors` and Kafka's message in `error_message` (v8+),
//! and the log start offset, as Kafka's `RecordValidationException` is answered.
//!
//! From v10 a NOT_LEADER_OR_FOLLOWER answer names the partition's current leader and epoch, and
//! the response lists the endpoints of the leaders it names (KIP-951), so the client can retry
//! at once without asking for metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, ResponseKind};

use super::{alive_endpoint, client_listener, current_leader, str_bytes, topic_name};
use crate::context::Context;
use crate::errors::ApiError;
use crate::replica::append::{
    AppendParams, AppendStats, PartitionAppend, PartitionRecords, TopicRecords,
};

/// What the connection does with a produce request's outcome.
#[derive(Debug)]
pub enum ProduceReply {
    Respond(Box<ResponseKind>),
    /// acks=0 and everything was appended: nothing is sent.
    Nothing,
    /// acks=0 and some partition failed: Kafka closes the connection, the only way to tell a
    /// client that expects no answer (it then refreshes metadata and reconnects).
    CloseConnection,
}

pub async fn handle(ctx: &Arc<Context>, version: i16, request: ProduceRequest) -> ProduceReply {
    let image = ctx.image();
    let params = AppendParams {
        acks: request.acks,
        timeout_ms: request.timeout_ms,
        transactional: request.transactional_id.is_some(),
        now_ms: ctx.clock.now_ms(),
    };
    let topics = request
        .topic_data
        .iter()
        .map(|topic| {
            // v13+ names the topic by id.
            let (name, known) = if version >= 13 {
                image
                    .topic_by_id(&topic.topic_id)
                    .map_or((String::new(), false), |t| (t.name.clone(), true))
            } else {
                (topic.name.0.as_str().to_owned(), true)
            };
            let partitions = topic
                .partition_data
                .iter()
                .map(|pd| PartitionRecords {
                    index: pd.index,
                    records: pd.records.as_deref(),
                })
                .collect();
            TopicRecords {
                name,
                known,
                partitions,
            }
        })
        .collect();
    let stats = AppendStats {
        topics: &ctx.topic_stats,
        requests: &ctx.request_stats,
    };
    let appended = ctx
        .replicas
        .append_records(&image, params, topics, stats)
        .await;

    if params.acks == 0 {
        let failed = appended
            .iter()
            .any(|t| t.partitions.iter().any(|o| o.result.is_err()));
        return if failed {
            ProduceReply::CloseConnection
        } else {
            ProduceReply::Nothing
        };
    }

    let mut leaders = LeaderEndpoints {
        image: ctx.image(),
        listener: client_listener(ctx),
        named: BTreeMap::new(),
    };
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
        response.node_endpoints = leaders.named.into_values().collect();
    }
    ProduceReply::Respond(Box::new(ResponseKind::Produce(response)))
}

/// The leaders named in NOT_LEADER_OR_FOLLOWER answers, with their endpoints for the response.
struct LeaderEndpoints<'a> {
    image: Arc<crate::metadata::MetadataImage>,
    listener: &'a str,
    named: BTreeMap<i32, NodeEndpoint>,
}

impl LeaderEndpoints<'_> {
    /// The current leader and epoch of a partition; its endpoint is kept if it is alive.
    fn name(&mut self, topic: &str, partition: i32) -> LeaderIdAndEpoch {
        let (leader, epoch) = current_leader(&self.image, topic, partition);
        if let Some((b, e)) = alive_endpoint(&self.image, self.listener, leader) {
            self.named.entry(leader).or_insert_with(|| {
                NodeEndpoint::default()
                    .with_node_id(BrokerId(leader))
                    .with_host(str_bytes(&e.host))
                    .with_port(i32::from(e.port))
                    .with_rack(b.rack.as_deref().map(str_bytes))
            });
        }
        LeaderIdAndEpoch::default()
            .with_leader_id(BrokerId(leader))
            .with_leader_epoch(epoch)
    }
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
    leaders: &mut LeaderEndpoints<'_>,
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
                r.current_leader = leaders.name(topic, outcome.index);
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
