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

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, ResponseKind};
use kafkaiq_storage::TopicPartition;

use super::{alive_endpoint, client_listener, current_leader, str_bytes, topic_name};
use crate::context::Context;
use crate::errors::ApiError;
use crate::limits::PRODUCE_TIMEOUT_MS_MAX;
use crate::replica::Partition;
use uuid::Uuid;

struct Outcome {
    index: i32,
    result: Result<(i64, i64, i64), ApiError>, // (base offset, log append time, log start)
    /// For records the log refused (INVALID_RECORD with record errors): the log start offset,
    /// which Kafka reports with them.
    log_start_offset: Option<i64>,
    /// For acks=-1: the partition, the offset the high watermark must reach, and the leader
    /// epoch the records were written in.
    wait_for: Option<(Arc<Partition>, i64, i32)>,
}

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
    let acks = request.acks;
    let image = ctx.image();
    let now_ms = ctx.clock.now_ms();
    let appending = std::time::Instant::now();
    let mut topics: Vec<(String, Uuid, Vec<Outcome>)> = Vec::new();

    for topic in request.topic_data {
        // v13+ names the topic by id.
        let (name, known) = if version >= 13 {
            match image.topic_by_id(&topic.topic_id) {
                Some(t) => (t.name.clone(), true),
                None => (String::new(), false),
            }
        } else {
            (topic.name.0.as_str().to_owned(), true)
        };
        let mut outcomes = Vec::with_capacity(topic.partition_data.len());
        for pd in topic.partition_data {
            let mut log_start_offset = None;
            let result = if !(-1..=1).contains(&acks) {
                Err(ApiError::InvalidRequiredAcks)
            } else if !known {
                Err(ApiError::UnknownTopicId)
            } else if request.transactional_id.is_some() {
                // Transactions are not implemented; refuse rather than store batches whose
                // markers would never come.
                Err(ApiError::TransactionalIdAuthorizationFailed)
            } else {
                let tp = TopicPartition {
                    topic: name.clone(),
                    partition: pd.index,
                };
                ctx.replicas.partition_or_error(&image, &tp).and_then(|p| {
                    let records = pd.records.as_deref().unwrap_or_default();
                    if records.is_empty() {
                        return Err(ApiError::InvalidRecord(
                            "produce request without record batches".into(),
                        ));
                    }
                    validate_client_batches(records, &p.log().config(), &tp)?;
                    match p.append_records_to_leader_in_epoch(records, acks, now_ms) {
                        Ok((info, epoch)) => {
                            if !info.duplicate {
                                ctx.topic_stats.produced(
                                    &name,
                                    records.len() as u64,
                                    info.record_count,
                                );
                            }
                            Ok((p, info, epoch))
                        }
                        Err(e @ ApiError::RecordErrors { .. }) => {
                            log_start_offset = Some(p.log().log_start_offset());
                            Err(e)
                        }
                        Err(e) => Err(e),
                    }
                })
            };
            match result {
                Ok((p, info, epoch)) => {
                    if info.duplicate {
                        tracing::debug!(topic = %name, partition = pd.index, offset = info.first_offset, "duplicate batch answered with its original offset");
                    }
                    let wait_for = (acks == -1).then(|| (p, info.last_offset + 1, epoch));
                    outcomes.push(Outcome {
                        index: pd.index,
                        result: Ok((
                            info.first_offset,
                            info.log_append_time,
                            info.log_start_offset,
                        )),
                        log_start_offset: None,
                        wait_for,
                    });
                }
                Err(e) => {
                    tracing::debug!(topic = %name, partition = pd.index, error = %e, "produce refused");
                    outcomes.push(Outcome {
                        index: pd.index,
                        result: Err(e),
                        log_start_offset,
                        wait_for: None,
                    });
                }
            }
        }
        topics.push((name, topic.topic_id, outcomes));
    }

    ctx.request_stats
        .produce_stage("append", appending.elapsed());

    if acks == 0 {
        let failed = topics
            .iter()
            .any(|(_, _, outcomes)| outcomes.iter().any(|o| o.result.is_err()));
        return if failed {
            ProduceReply::CloseConnection
        } else {
            ProduceReply::Nothing
        };
    }

    if acks == -1 {
        let timeout_ms = i64::from(request.timeout_ms).clamp(0, PRODUCE_TIMEOUT_MS_MAX);
        let waiting: Vec<(Arc<Partition>, i64, i32)> = topics
            .iter()
            .flat_map(|(_, _, outcomes)| outcomes.iter().filter_map(|o| o.wait_for.clone()))
            .collect();
        let partitions: Vec<Arc<Partition>> = waiting.iter().map(|(p, _, _)| p.clone()).collect();
        let waiting_since = std::time::Instant::now();
        let all_done = ctx
            .replicas
            .purgatory
            .wait_until(
                &partitions,
                Duration::from_millis(timeout_ms as u64),
                || {
                    let done = waiting.iter().all(|(p, offset, epoch)| {
                        p.acks_all_outcome_in_epoch(*offset, *epoch).is_some()
                    });
                    async move { done.then_some(()) }
                },
            )
            .await
            .is_some();
        ctx.request_stats
            .produce_stage("acks_wait", waiting_since.elapsed());
        if all_done {
            // The move that completed the wait is the latest one of the watched partitions
            // (a later one can only make this shorter); only a wait that parked is counted.
            let moved_at = partitions
                .iter()
                .filter_map(|p| p.high_watermark_moved_at())
                .max();
            if let Some(at) = moved_at.filter(|at| *at > waiting_since) {
                ctx.request_stats.produce_stage("acks_wake", at.elapsed());
            }
        }
        for (_, _, outcomes) in topics.iter_mut() {
            for o in outcomes.iter_mut() {
                if let Some((p, offset, epoch)) = o.wait_for.take() {
                    // Leadership lost while parked (even if regained since): the records may
                    // be gone, NOT_LEADER_OR_FOLLOWER. The ISR shrunk below min ISR once they
                    // were committed: NOT_ENOUGH_REPLICAS_AFTER_APPEND. Neither came in time:
                    // REQUEST_TIMED_OUT.
                    match p.acks_all_outcome_in_epoch(offset, epoch) {
                        Some(Ok(())) => {}
                        Some(Err(e)) => o.result = Err(e),
                        None => {
                            debug_assert!(!all_done);
                            o.result = Err(ApiError::RequestTimedOut)
                        }
                    }
                }
            }
        }
    }

    let mut responses = Vec::with_capacity(topics.len());
    let mut leaders = LeaderEndpoints {
        image: ctx.image(),
        listener: client_listener(ctx),
        named: BTreeMap::new(),
    };
    for (name, topic_id, outcomes) in topics {
        let partition_responses = outcomes
            .into_iter()
            .map(|o| partition_response(&mut leaders, version, &name, o))
            .collect();
        let mut t = TopicProduceResponse::default().with_partition_responses(partition_responses);
        if version >= 13 {
            t.topic_id = topic_id;
        } else {
            t.name = topic_name(&name);
        }
        responses.push(t);
    }
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
    outcome: Outcome,
) -> PartitionProduceResponse {
    let mut r = PartitionProduceResponse::default().with_index(outcome.index);
    match outcome.result {
        Ok((base_offset, log_append_time, log_start_offset)) => {
            r.base_offset = base_offset;
            r.log_append_time_ms = log_append_time;
            if version >= 5 {
                r.log_start_offset = log_start_offset;
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

/// Kafka's `LogValidator` rules for batches from a client that the batch headers decide, checked
/// before the append (the log checks sizes, CRCs and counts, and each record's key and timestamp;
/// `__consumer_offsets` writes do not come this way):
/// - a control batch is refused ("Clients are not allowed to write control records"), and so is
///   a batch with a producer id and a negative base sequence: both INVALID_RECORD;
/// - on a LogAppendTime topic a batch that set LogAppendTime itself is INVALID_TIMESTAMP.
fn validate_client_batches(
    records: &[u8],
    config: &kafkaiq_storage::LogConfig,
    tp: &TopicPartition,
) -> Result<(), ApiError> {
    use kafkaiq_storage::batch::BatchHeader;
    use kafkaiq_storage::TimestampType;
    let mut pos = 0usize;
    while let Ok(h) = BatchHeader::parse(&records[pos..]) {
        let tp = format!("{}-{}", tp.topic, tp.partition);
        if h.is_control() {
            return Err(ApiError::InvalidRecord(format!(
                "Clients are not allowed to write control records in topic partition {tp}"
            )));
        }
        if h.has_producer_id() && h.base_sequence < 0 {
            return Err(ApiError::InvalidRecord(format!(
                "Invalid sequence number {} in record batch with producerId {} in topic partition {tp}",
                h.base_sequence, h.producer_id
            )));
        }
        if config.message_timestamp_type == TimestampType::LogAppendTime
            && h.timestamp_type() == TimestampType::LogAppendTime
        {
            return Err(ApiError::InvalidTimestamp(format!(
                "Invalid timestamp type in topic partition {tp}. Producer should not set \
                 timestamp type to LogAppendTime."
            )));
        }
        let size = h.size_in_bytes();
        if size == 0 || pos + size >= records.len() {
            break;
        }
        pos += size;
    }
    Ok(())
}
