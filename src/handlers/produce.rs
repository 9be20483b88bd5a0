//! Produce (key 0): append each partition's batches as leader, then answer by `acks`.
//!
//! acks=0 gets no response at all; acks=1 is answered after the local append; acks=-1 is
//! refused NOT_ENOUGH_REPLICAS before anything is written when the ISR is below the effective
//! min ISR, else waits in the purgatory until the high watermark covers the last appended
//! offset: NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR shrank below min ISR
//! meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved while it waited, or
//! UNKNOWN_TOPIC_OR_PARTITION if the topic was deleted meanwhile; REQUEST_TIMED_OUT at
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

mod response;

use kafka_protocol::messages::{ProduceRequest, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::clock::Clock;
use crate::metadata::MetadataCache;
use std::collections::HashMap;

use crate::errors::ApiError;
use crate::replica::append::{
    transactional_producer, AppendParams, AppendStats, PartitionRecords, TopicAppend, TopicRecords,
    TxnChecks,
};
use crate::replica::{ReplicaManager, TopicPartition, VerificationGuard};

/// What a Produce uses, borrowed from the node's services by `server::dispatch`.
#[derive(Clone, Copy)]
pub struct ProduceServices<'a> {
    /// The image topics are resolved in, and read again for the answer's current leaders.
    pub cache: &'a MetadataCache,
    pub replicas: &'a ReplicaManager,
    /// The time of the append (`log.message.timestamp.type=LogAppendTime`).
    pub clock: &'a dyn Clock,
    /// Bytes and messages in per topic, and the produce stages' times.
    pub stats: AppendStats<'a>,
    /// The listener the client's connection came in on, whose leader endpoints are answered.
    pub listener: &'a str,
    /// The transaction coordinator, which verifies transactional batches (KIP-890).
    pub txns: &'a crate::txn::TxnService,
    /// Whether the client may write to the internal topics (`__consumer_offsets`,
    /// `__transaction_state`): only Kafka's admin client id, `__admin_client`, may, as in Kafka.
    pub internal_topics_allowed: bool,
}

/// The client id Kafka lets append to internal topics.
pub const ADMIN_CLIENT_ID: &str = "__admin_client";

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

/// With an authorizer (Kafka's `handleProduceRequest`): a transactional produce needs WRITE on
/// its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, nothing
/// appended); each topic needs WRITE (else TOPIC_AUTHORIZATION_FAILED for its partitions).
/// With or without one, an internal topic is refused INVALID_TOPIC_EXCEPTION ("Cannot append to
/// internal topic") unless the client id is `__admin_client`: the coordinators write their
/// topics themselves, and a client's records there could forge offsets or transaction state.
pub async fn handle(
    auth: &RequestAuth,
    services: ProduceServices<'_>,
    version: i16,
    request: ProduceRequest,
) -> ProduceReply {
    let image = services.cache.image();
    let txn_id = request.transactional_id.as_ref().map(|id| id.0.to_string());
    let txn_allowed = txn_id
        .as_ref()
        .is_none_or(|id| auth.allows(Resource::TransactionalId, id, Op::Write));
    let topics: Vec<TopicRecords<'_>> = request
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
            let refused = if !txn_allowed {
                Some(ApiError::TransactionalIdAuthorizationFailed)
            } else if known && !auth.allows(Resource::Topic, &name, Op::Write) {
                Some(ApiError::TopicAuthorizationFailed)
            } else if known
                && crate::metadata::is_internal_topic(&name)
                && !services.internal_topics_allowed
            {
                Some(ApiError::InvalidTopic(format!(
                    "Cannot append to internal topic {name}"
                )))
            } else {
                None
            };
            TopicRecords {
                name,
                known,
                refused,
                partitions,
            }
        })
        .collect();
    let answers;
    let transactions = match &txn_id {
        None => TxnChecks::NoTransactionalId,
        Some(_) if !services.txns.checks_produce(version) => TxnChecks::Unchecked,
        Some(id) => {
            answers = verify_transactions(&services, id, &topics, version).await;
            TxnChecks::Verified(&answers)
        }
    };
    let params = AppendParams {
        acks: request.acks,
        timeout_ms: request.timeout_ms,
        transactions,
        now_ms: services.clock.now_ms(),
    };
    let mut appended = services
        .replicas
        .append_records(&image, params, topics, services.stats)
        .await;
    if params.acks == -1 {
        unknown_if_deleted_while_parked(&services, &mut appended);
    }

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

    let response = response::encode(&services, version, &request, appended);
    ProduceReply::Respond(Box::new(ResponseKind::Produce(response)))
}

/// Kafka's `DelayedProduce` answers from `getPartitionOrError` when it completes: a partition
/// that lost its leadership while the request was parked and is no longer hosted here answers
/// UNKNOWN_TOPIC_OR_PARTITION when the current image no longer has it (its topic was deleted),
/// KAFKA_STORAGE_ERROR when its log is offline here, and NOT_LEADER_OR_FOLLOWER when it is still
/// hosted or was moved to other brokers. (The metadata cache takes an image before the replica
/// manager stops the partitions it removes, so a wait woken by a deletion finds it applied.)
fn unknown_if_deleted_while_parked(services: &ProduceServices<'_>, appended: &mut [TopicAppend]) {
    let mut current = None;
    for topic in appended.iter_mut() {
        for p in topic.partitions.iter_mut().filter(|p| p.lost_while_parked) {
            let image = current.get_or_insert_with(|| services.cache.image());
            let tp = TopicPartition {
                topic: topic.name.clone(),
                partition: p.index,
            };
            if let Err(e) = services.replicas.partition_or_error(image, &tp) {
                p.result = Err(e);
            }
        }
    }
}

/// KIP-890 before the appends: each partition led here whose transactional batch would open
/// its producer's transaction gets a verification guard, and the coordinator is asked about
/// those partitions together. A partition whose transaction is open already, or that is not
/// led here (its append fails anyway), is not asked about.
async fn verify_transactions(
    services: &ProduceServices<'_>,
    txn_id: &str,
    topics: &[TopicRecords<'_>],
    version: i16,
) -> HashMap<TopicPartition, Result<VerificationGuard, ApiError>> {
    let mut producer = None;
    let mut guards = Vec::new();
    for topic in topics.iter().filter(|t| t.known && t.refused.is_none()) {
        for pd in &topic.partitions {
            let Some((producer_id, producer_epoch)) = pd.records.and_then(transactional_producer)
            else {
                continue;
            };
            let tp = TopicPartition {
                topic: topic.name.clone(),
                partition: pd.index,
            };
            let Ok(Some(p)) = services.replicas.hosted_or_offline(&tp) else {
                continue;
            };
            producer.get_or_insert((producer_id, producer_epoch));
            if let Some(guard) = p
                .log()
                .start_transaction_verification(producer_id, producer_epoch)
            {
                guards.push((tp, guard));
            }
        }
    }
    let Some((producer_id, producer_epoch)) = producer else {
        return HashMap::new();
    };
    if guards.is_empty() {
        return HashMap::new();
    }
    let partitions: Vec<TopicPartition> = guards.iter().map(|(tp, _)| tp.clone()).collect();
    let mut answers = services
        .txns
        .verify_produce(txn_id, producer_id, producer_epoch, &partitions, version)
        .await;
    guards
        .into_iter()
        .map(|(tp, guard)| {
            let answer = answers.remove(&tp).unwrap_or(Ok(())).map(|()| guard);
            (tp, answer)
        })
        .collect()
}
