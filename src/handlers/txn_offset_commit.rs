//! TxnOffsetCommit (key 28), v0-5: a transactional producer's `sendOffsetsToTransaction`. The
//! group coordinator writes the offsets as part of the producer's transaction; they take effect
//! when its COMMIT marker reaches the group's partition (see `group::service`).
//!
//! v5 comes from a client of transaction version 2, which sends no AddOffsetsToTxn: the group's
//! offsets partition joins the transaction first, through the transaction coordinator. A
//! refusal answers every partition, and nothing is written.

use kafka_protocol::messages::{ResponseKind, TxnOffsetCommitRequest};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{txn_offset_commit_all, GroupRequest};
use crate::txn::TxnService;

/// The first TxnOffsetCommit version of transaction version 2.
const JOINS_THE_TRANSACTION_FROM: i16 = 5;

/// With an authorizer the caller needs WRITE on the transactional id and READ on the group
/// and on every topic (Kafka's `handleTxnOffsetCommitRequest`); a refusal answers every
/// partition with its error and commits nothing.
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    txns: &TxnService,
    caller: Caller,
    request: TxnOffsetCommitRequest,
) -> ResponseKind {
    let refused = if !auth.allows(
        Resource::TransactionalId,
        request.transactional_id.as_str(),
        Op::Write,
    ) {
        Some(ApiError::TransactionalIdAuthorizationFailed)
    } else if !auth.allows(Resource::Group, request.group_id.as_str(), Op::Read) {
        Some(ApiError::GroupAuthorizationFailed)
    } else if request
        .topics
        .iter()
        .any(|t| !auth.allows(Resource::Topic, t.name.as_str(), Op::Read))
    {
        Some(ApiError::TopicAuthorizationFailed)
    } else {
        None
    };
    if let Some(e) = refused {
        return ResponseKind::TxnOffsetCommit(txn_offset_commit_all(&request, e.code()));
    }
    // Only the group's coordinator adds its partition; elsewhere the group answers
    // NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS) as for any version.
    if caller.api_version >= JOINS_THE_TRANSACTION_FROM && groups.coordinates(&request.group_id.0) {
        let joined = txns
            .join_offsets_partition(
                &request.transactional_id.0,
                request.producer_id.0,
                request.producer_epoch,
                groups.partition_for(&request.group_id.0),
            )
            .await;
        if let Err(e) = joined {
            return ResponseKind::TxnOffsetCommit(txn_offset_commit_all(&request, e.code()));
        }
    }
    groups
        .call(caller, GroupRequest::TxnOffsetCommit(request))
        .await
        .into_response_kind()
}
