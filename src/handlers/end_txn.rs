//! EndTxn (key 26), v0-5: commits or aborts the producer's transaction. The answer comes once
//! PrepareCommit or PrepareAbort is durable; the markers follow.

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::txn::state::TRANSACTION_VERSION_2;
use crate::txn::{TxnResult, TxnService};

/// EndTxn v5 is transaction version 2: the end bumps the producer epoch, and the answer's
/// producer id and epoch are what the client continues with.
const TRANSACTION_VERSION_2_FROM: i16 = 5;

/// With an authorizer the caller needs WRITE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the transaction untouched).
pub async fn handle(
    auth: &RequestAuth,
    txns: &TxnService,
    version: i16,
    request: EndTxnRequest,
) -> ResponseKind {
    if !auth.allows(
        Resource::TransactionalId,
        request.transactional_id.as_str(),
        Op::Write,
    ) {
        return ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_error_code(ApiError::TransactionalIdAuthorizationFailed.code()),
        );
    }
    let transaction_version = if version >= TRANSACTION_VERSION_2_FROM {
        TRANSACTION_VERSION_2
    } else {
        0
    };
    let result = if request.committed {
        TxnResult::Commit
    } else {
        TxnResult::Abort
    };
    let mut response = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    match txns
        .end_transaction(
            &request.transactional_id.0,
            request.producer_id.0,
            request.producer_epoch,
            result,
            transaction_version,
        )
        .await
    {
        Ok((id, epoch)) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = epoch;
        }
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::EndTxn(response)
}
