//! AddOffsetsToTxn (key 25), v0-4: adds the group's `__consumer_offsets` partition to the
//! producer's transaction, so its offsets commit or abort with it.

use std::collections::BTreeSet;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ResponseKind};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::{code_of, ApiError};
use crate::group::service::GroupService;
use crate::group::OFFSETS_TOPIC_NAME;
use crate::txn::TxnService;

/// With an authorizer the caller needs WRITE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on the group (else
/// GROUP_AUTHORIZATION_FAILED), as Kafka's `handleAddOffsetsToTxnRequest`.
pub async fn handle(
    auth: &RequestAuth,
    txns: &TxnService,
    groups: &GroupService,
    _version: i16,
    request: AddOffsetsToTxnRequest,
) -> ResponseKind {
    let refused = if !auth.allows(
        Resource::TransactionalId,
        request.transactional_id.as_str(),
        Op::Write,
    ) {
        Some(ApiError::TransactionalIdAuthorizationFailed)
    } else if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        Some(ApiError::GroupAuthorizationFailed)
    } else {
        None
    };
    if let Some(e) = refused {
        return ResponseKind::AddOffsetsToTxn(
            AddOffsetsToTxnResponse::default().with_error_code(e.code()),
        );
    }
    let partition = groups.partition_for(&request.group_id.0);
    let partitions = BTreeSet::from([(OFFSETS_TOPIC_NAME.to_owned(), partition)]);
    let result = match groups.ensure_offsets_topic().await {
        Err(e) => Err(e),
        Ok(_) => {
            txns.add_partitions(
                &request.transactional_id.0,
                request.producer_id.0,
                request.producer_epoch,
                partitions,
                // A client of transaction version 2 sends no AddOffsetsToTxn.
                0,
            )
            .await
        }
    };
    ResponseKind::AddOffsetsToTxn(
        AddOffsetsToTxnResponse::default().with_error_code(code_of(&result)),
    )
}
