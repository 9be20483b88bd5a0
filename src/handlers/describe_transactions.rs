//! DescribeTransactions (key 65), v0: the state of transactional ids this node coordinates
//! (`kafka-transactions.sh describe`).

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, ResponseKind, TopicName,
    TransactionalId,
};

use super::authz::{Op, RequestAuth, Resource};
use super::str_bytes;
use crate::errors::ApiError;
use crate::txn::TxnService;

/// The transactional ids the caller may not DESCRIBE were taken out of the request before
/// (`authz::admin::take_refused`); of the others only the topics the caller may DESCRIBE are
/// listed (Kafka's `handleDescribeTransactionsRequest`).
pub fn handle(
    auth: &RequestAuth,
    txns: &TxnService,
    _version: i16,
    request: DescribeTransactionsRequest,
) -> ResponseKind {
    let mut response = DescribeTransactionsResponse::default();
    for id in request.transactional_ids {
        let mut state = TransactionState::default()
            .with_transactional_id(TransactionalId(id.0.clone()))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_start_time_ms(-1);
        let described = if id.0.is_empty() {
            Err(ApiError::InvalidRequest("empty transactional id".into()))
        } else {
            txns.describe(&id.0)
        };
        match described {
            Ok(v) => {
                let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                let described = v
                    .partitions
                    .iter()
                    .filter(|(t, _)| auth.allows(Resource::Topic, t, Op::Describe));
                for (t, p) in described {
                    topics.entry(t.clone()).or_default().push(*p);
                }
                state = state
                    .with_transaction_state(str_bytes(v.state.name()))
                    .with_transaction_timeout_ms(v.timeout_ms)
                    .with_transaction_start_time_ms(v.start_ms)
                    .with_producer_id(ProducerId(v.producer_id))
                    .with_producer_epoch(v.producer_epoch)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                TopicData::default()
                                    .with_topic(TopicName(str_bytes(&t)))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    );
            }
            Err(e) => state.error_code = e.code(),
        }
        response.transaction_states.push(state);
    }
    ResponseKind::DescribeTransactions(response)
}
