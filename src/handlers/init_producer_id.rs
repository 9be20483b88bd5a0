//! InitProducerId (key 22), v0-5. Without a transactional id: a fresh producer id with epoch 0
//! from the controller's persisted id blocks (an idempotent producer). With one: the
//! transaction coordinator's producer id and bumped epoch for it, which fences older producers
//! of the same id (KIP-98), with KIP-360's recovery when the request (v3+) names the producer
//! id and epoch it had.

use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};

use super::authz::{Op, RequestAuth, Resource};
use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::producer_ids::ProducerIdManager;
use crate::txn::TxnService;

/// With an authorizer (Kafka's `handleInitProducerIdRequest`): a transactional id needs WRITE
/// on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs
/// IDEMPOTENT_WRITE on the cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED).
pub async fn handle(
    auth: &RequestAuth,
    producer_ids: &ProducerIdManager,
    txns: &TxnService,
    controller: &ControllerChannel,
    version: i16,
    request: InitProducerIdRequest,
) -> ResponseKind {
    let mut response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let refused = match &request.transactional_id {
        Some(id) if !auth.allows(Resource::TransactionalId, id.as_str(), Op::Write) => {
            Some(ApiError::TransactionalIdAuthorizationFailed)
        }
        None if !(auth.allows_cluster(Op::IdempotentWrite)
            || auth.allows_any(Resource::Topic, Op::Write)) =>
        {
            Some(ApiError::ClusterAuthorizationFailed)
        }
        _ => None,
    };
    if let Some(e) = refused {
        response.error_code = e.code();
        return ResponseKind::InitProducerId(response);
    }
    let result = match &request.transactional_id {
        None => producer_ids.next_id(controller).await.map(|id| (id, 0)),
        Some(id) => {
            let expected = (version >= 3 && request.producer_id.0 >= 0)
                .then_some((request.producer_id.0, request.producer_epoch));
            txns.init_producer_id(id, request.transaction_timeout_ms, expected)
                .await
        }
    };
    match result {
        Ok((id, epoch)) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = epoch;
        }
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::InitProducerId(response)
}
