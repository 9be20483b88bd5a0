//! TxnOffsetCommit (key 28), v0-5: a transactional producer's `sendOffsetsToTransaction`. The
//! group coordinator writes the offsets as part of the producer's transaction; they take effect
//! when its COMMIT marker reaches the group's partition (see `group::service`).

use kafka_protocol::messages::{ResponseKind, TxnOffsetCommitRequest};

use crate::group::service::{Caller, GroupService};
use crate::group::GroupRequest;

pub async fn handle(
    groups: &GroupService,
    caller: Caller,
    request: TxnOffsetCommitRequest,
) -> ResponseKind {
    groups
        .call(caller, GroupRequest::TxnOffsetCommit(request))
        .await
        .into_response_kind()
}
