//! TxnOffsetCommit (key 28), v0-5: a transactional producer's `sendOffsetsToTransaction`. The
//! group coordinator writes the offsets as part of the producer's transaction; they take effect
//! when its COMMIT marker reaches the group's partition (see `group::service`).
//!
//! v5 comes from a client of transaction version 2, which sends no AddOffsetsToTxn: the group's
//! offsets partition joins the transaction first, through the transaction coordinator. A
//! refusal of the transactional id or the group answers every partition, and nothing is
//! written; a topic the caller may not READ is answered alone and the others are committed.

use kafka_protocol::messages::{ResponseKind, TxnOffsetCommitRequest};

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::group::service::{Caller, GroupService};
use crate::group::{txn_offset_commit_all, GroupRequest};
use crate::txn::TxnService;

/// The first TxnOffsetCommit version of transaction version 2.
const JOINS_THE_TRANSACTION_FROM: i16 = 5;

/// With an authorizer the caller needs WRITE on the transactional id and READ on the group
/// (else every partition is answered with the error and nothing is committed), and READ on
/// each topic: the partitions of the others are answered TOPIC_AUTHORIZATION_FAILED and the
/// rest committed (Kafka's `handleTxnOffsetCommitRequest`).
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    txns: &TxnService,
    caller: Caller,
    mut request: TxnOffsetCommitRequest,
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
        return ResponseKind::TxnOffsetCommit(txn_offset_commit_all(&request, e.code()));
    }
    let (allowed, refused_topics): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topics)
        .into_iter()
        .partition(|t| auth.allows(Resource::Topic, t.name.as_str(), Op::Read));
    let refused = txn_offset_commit_all(
        &TxnOffsetCommitRequest::default().with_topics(refused_topics),
        ApiError::TopicAuthorizationFailed.code(),
    );
    if allowed.is_empty() && !refused.topics.is_empty() {
        // Nothing left to commit: the transaction is not joined either.
        return ResponseKind::TxnOffsetCommit(refused);
    }
    request.topics = allowed;
    match commit(groups, txns, caller, request).await {
        ResponseKind::TxnOffsetCommit(mut committed) => {
            let mut topics = refused.topics;
            topics.append(&mut committed.topics);
            committed.topics = topics;
            ResponseKind::TxnOffsetCommit(committed)
        }
        other => other,
    }
}

/// The authorized part of the request, through the group coordinator.
async fn commit(
    groups: &GroupService,
    txns: &TxnService,
    caller: Caller,
    request: TxnOffsetCommitRequest,
) -> ResponseKind {
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
