//! AddPartitionsToTxn (key 24), v0-5. v0-3 come from a transactional producer: the partitions
//! join its ongoing transaction. v4+ batch several transactions and come from brokers; a
//! transaction with `verify_only` is KIP-890's check that a transactional produce's partition
//! is in its transaction, and changes nothing; one without it adds the partitions for a client
//! of transaction version 2, which sends no AddPartitionsToTxn itself.
//!
//! A topic the image does not know answers UNKNOWN_TOPIC_OR_PARTITION and the others in the
//! same transaction OPERATION_NOT_ATTEMPTED, as in Kafka; otherwise every partition gets the
//! transaction's outcome.
//!
//! With an authorizer (Kafka's `handleAddPartitionsToTxnRequest`): v0-3 need WRITE on the
//! transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and on
//! each topic (else TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); v4+, from
//! brokers, need CLUSTER_ACTION on the cluster (else CLUSTER_AUTHORIZATION_FAILED).

use std::collections::BTreeSet;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ResponseKind, TransactionalId,
};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::{code_of, ApiError};
use crate::metadata::MetadataImage;
use crate::txn::state::TRANSACTION_VERSION_2;
use crate::txn::TxnService;

/// Each partition of `topics` answered `code_of(topic, partition)`.
pub(super) fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    code_of: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code_of(&t.name.0, *p))
                        })
                        .collect(),
                )
        })
        .collect()
}

/// One transaction's per-partition results.
async fn one(
    txns: &TxnService,
    image: &MetadataImage,
    txn_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    transaction_version: i16,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let known = |t: &str, p: i32| {
        image
            .topic(t)
            .is_some_and(|topic| topic.partitions.contains_key(&p))
    };
    let unknown = topics
        .iter()
        .any(|t| t.partitions.iter().any(|p| !known(&t.name.0, *p)));
    if unknown {
        return topic_results(topics, |t, p| {
            if known(t, p) {
                ApiError::OperationNotAttempted.code()
            } else {
                ApiError::UnknownTopicOrPartition.code()
            }
        });
    }
    let partitions: BTreeSet<(String, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    if verify_only {
        return topic_results(topics, |t, p| {
            code_of(&txns.verify_partition(txn_id, producer_id, producer_epoch, &(t.to_owned(), p)))
        });
    }
    let code = code_of(
        &txns
            .add_partitions(
                txn_id,
                producer_id,
                producer_epoch,
                partitions,
                transaction_version,
            )
            .await,
    );
    topic_results(topics, |_, _| code)
}

pub async fn handle(
    auth: &RequestAuth,
    txns: &TxnService,
    image: &MetadataImage,
    version: i16,
    request: AddPartitionsToTxnRequest,
) -> ResponseKind {
    let mut response = AddPartitionsToTxnResponse::default();
    if version <= 3 && auth.is_enabled() {
        let topics = &request.v3_and_below_topics;
        let refused = if !auth.allows(
            Resource::TransactionalId,
            request.v3_and_below_transactional_id.as_str(),
            Op::Write,
        ) {
            Some(topic_results(topics, |_, _| {
                ApiError::TransactionalIdAuthorizationFailed.code()
            }))
        } else if topics
            .iter()
            .any(|t| !auth.allows(Resource::Topic, t.name.as_str(), Op::Write))
        {
            Some(topic_results(topics, |t, _| {
                if auth.allows(Resource::Topic, t, Op::Write) {
                    ApiError::OperationNotAttempted.code()
                } else {
                    ApiError::TopicAuthorizationFailed.code()
                }
            }))
        } else {
            None
        };
        if let Some(results) = refused {
            response.results_by_topic_v3_and_below = results;
            return ResponseKind::AddPartitionsToTxn(response);
        }
    }
    if version >= 4 && !auth.allows_cluster(Op::ClusterAction) {
        response.error_code = ApiError::ClusterAuthorizationFailed.code();
        return ResponseKind::AddPartitionsToTxn(response);
    }
    if version <= 3 {
        response.results_by_topic_v3_and_below = one(
            txns,
            image,
            &request.v3_and_below_transactional_id.0,
            request.v3_and_below_producer_id.0,
            request.v3_and_below_producer_epoch,
            false,
            0,
            &request.v3_and_below_topics,
        )
        .await;
    } else {
        for t in &request.transactions {
            let results = one(
                txns,
                image,
                &t.transactional_id.0,
                t.producer_id.0,
                t.producer_epoch,
                t.verify_only,
                // v4+ comes from a partition leader or group coordinator adding partitions for
                // a client of transaction version 2 (Kafka's
                // `transactionVersionForAddPartitionsToTxn`).
                TRANSACTION_VERSION_2,
                &t.topics,
            )
            .await;
            response.results_by_transaction.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(TransactionalId(t.transactional_id.0.clone()))
                    .with_topic_results(results),
            );
        }
    }
    ResponseKind::AddPartitionsToTxn(response)
}
