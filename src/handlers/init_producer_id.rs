//! InitProducerId (key 22), v0-5, for idempotent producers: a fresh producer id with epoch 0
//! from the controller's persisted id blocks, as Kafka does for requests without a
//! transactional id. Transactions are not implemented, so a transactional id is refused.

use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId, ResponseKind,
};

use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::producer_ids::ProducerIdManager;

pub async fn handle(
    producer_ids: &ProducerIdManager,
    controller: &ControllerChannel,
    _version: i16,
    request: InitProducerIdRequest,
) -> ResponseKind {
    let mut response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let result = if request.transactional_id.is_some() {
        Err(ApiError::TransactionalIdAuthorizationFailed)
    } else {
        producer_ids.next_id(controller).await
    };
    match result {
        Ok(id) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = 0;
        }
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::InitProducerId(response)
}
