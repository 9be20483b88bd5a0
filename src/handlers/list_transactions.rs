//! ListTransactions (key 66), v0-2: the transactional ids this node coordinates, filtered by
//! state, producer id, how long they have run (v1) and an id pattern (v2), as
//! `kafka-transactions.sh list` and `find-hanging` ask.

use super::authz::{Op, RequestAuth, Resource};
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, ResponseKind, TransactionalId,
};

use super::str_bytes;
use crate::errors::ApiError;
use crate::txn::{TxnService, TxnState};

/// With an authorizer only the transactional ids the caller may DESCRIBE are listed, whatever it
/// may do on the cluster (Kafka's `handleListTransactionsRequest`).
pub fn handle(
    auth: &RequestAuth,
    txns: &TxnService,
    now_ms: i64,
    version: i16,
    request: ListTransactionsRequest,
) -> ResponseKind {
    let mut response = ListTransactionsResponse::default();
    let mut states = Vec::new();
    for s in &request.state_filters {
        match TxnState::from_name(s) {
            Some(state) => states.push(state),
            None => response.unknown_state_filters.push(s.clone()),
        }
    }
    let pattern = match request
        .transactional_id_pattern
        .as_ref()
        .filter(|_| version >= 2)
        .map(|p| regex::Regex::new(&format!("^(?:{})$", p.as_str())))
        .transpose()
    {
        Ok(p) => p,
        Err(e) => {
            response.error_code = ApiError::InvalidRequest(e.to_string()).code();
            return ResponseKind::ListTransactions(response);
        }
    };
    let duration = if version >= 1 {
        request.duration_filter
    } else {
        -1
    };
    match txns.list() {
        Err(e) => response.error_code = e.code(),
        Ok(list) => {
            response.transaction_states = list
                .into_iter()
                .filter(|v| states.is_empty() || states.contains(&v.state))
                .filter(|v| {
                    auth.allows(Resource::TransactionalId, &v.transactional_id, Op::Describe)
                })
                .filter(|v| {
                    request.producer_id_filters.is_empty()
                        || request
                            .producer_id_filters
                            .contains(&ProducerId(v.producer_id))
                })
                .filter(|v| duration < 0 || (v.start_ms >= 0 && now_ms - v.start_ms >= duration))
                .filter(|v| {
                    pattern
                        .as_ref()
                        .is_none_or(|re| re.is_match(&v.transactional_id))
                })
                .map(|v| {
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(str_bytes(&v.transactional_id)))
                        .with_producer_id(ProducerId(v.producer_id))
                        .with_transaction_state(str_bytes(v.state.name()))
                })
                .collect();
        }
    }
    ResponseKind::ListTransactions(response)
}
