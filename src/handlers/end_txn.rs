//! EndTxn (key 26), v0-5: commits or aborts the producer's transaction. The answer comes once
//! PrepareCommit or PrepareAbort is durable; the markers follow.

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId, ResponseKind};

use crate::txn::{TxnResult, TxnService};

pub async fn handle(txns: &TxnService, _version: i16, request: EndTxnRequest) -> ResponseKind {
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
