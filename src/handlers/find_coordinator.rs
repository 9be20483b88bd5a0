//! FindCoordinator (key 10), v0-6: which broker coordinates a group (one key before v4, a batch
//! of keys from v4).
//!
//! The coordinator of a group is the leader of its `__consumer_offsets` partition
//! (`Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`). The topic is created on first
//! use through the controller, as Kafka does. The coordinator of a transactional id (key type
//! 1) is likewise the leader of its `__transaction_state` partition.
//!
//! With an authorizer the caller needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED)
//! or the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), checked before the
//! internal topic is created.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{
    BrokerId, FindCoordinatorRequest, FindCoordinatorResponse, ResponseKind,
};
use kafka_protocol::ResponseError;

use super::authz::{Op, RequestAuth, Resource};
use super::str_bytes;
use crate::group::service::GroupService;
use crate::group::OFFSETS_TOPIC_NAME;
use crate::txn::{TxnService, TRANSACTION_STATE_TOPIC_NAME};

/// `key_type` of a consumer group.
const KEY_TYPE_GROUP: i8 = 0;
/// `key_type` of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;

struct Found {
    node_id: i32,
    host: String,
    port: i32,
}

async fn find(
    auth: &RequestAuth,
    groups: &GroupService,
    txns: &TxnService,
    listener: &str,
    key_type: i8,
    key: &str,
) -> Result<Found, (i16, String)> {
    let fail = |e: ResponseError, msg: &str| Err((e.code(), msg.to_owned()));
    match key_type {
        KEY_TYPE_GROUP if !auth.allows(Resource::Group, key, Op::Describe) => {
            return fail(
                ResponseError::GroupAuthorizationFailed,
                "Not authorized to access group",
            )
        }
        KEY_TYPE_TRANSACTION if !auth.allows(Resource::TransactionalId, key, Op::Describe) => {
            return fail(
                ResponseError::TransactionalIdAuthorizationFailed,
                "Transactional Id authorization failed.",
            )
        }
        _ => {}
    }
    let (topic, ensured, partition) = match key_type {
        KEY_TYPE_GROUP => (
            OFFSETS_TOPIC_NAME,
            groups.ensure_offsets_topic().await,
            groups.partition_for(key),
        ),
        KEY_TYPE_TRANSACTION => (
            TRANSACTION_STATE_TOPIC_NAME,
            txns.ensure_topic().await,
            txns.partition_for(key),
        ),
        _ => {
            return fail(
                ResponseError::InvalidRequest,
                "unknown coordinator key type",
            )
        }
    };
    let image = match ensured {
        Ok(image) => image,
        Err(e) => {
            tracing::warn!(error = %e, "cannot create {topic}");
            return fail(ResponseError::CoordinatorNotAvailable, &e.to_string());
        }
    };
    let leader = image
        .topic(topic)
        .and_then(|t| t.partitions.get(&partition))
        .map(|reg| reg.leader)
        .unwrap_or(-1);
    match super::alive_endpoint(&image, listener, leader) {
        Some((b, e)) => Ok(Found {
            node_id: b.node_id,
            host: e.host.clone(),
            port: i32::from(e.port),
        }),
        None => fail(
            ResponseError::CoordinatorNotAvailable,
            "the coordinator partition has no leader",
        ),
    }
}

/// `listener`: the listener the client's connection came in on, whose endpoint is answered.
pub async fn handle(
    auth: &RequestAuth,
    groups: &GroupService,
    txns: &TxnService,
    listener: &str,
    version: i16,
    request: FindCoordinatorRequest,
) -> ResponseKind {
    let key_type = if version >= 1 {
        request.key_type
    } else {
        KEY_TYPE_GROUP
    };
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in &request.coordinator_keys {
            let c = Coordinator::default().with_key(key.clone());
            coordinators.push(
                match find(auth, groups, txns, listener, key_type, key).await {
                    Ok(f) => c
                        .with_node_id(BrokerId(f.node_id))
                        .with_host(str_bytes(&f.host))
                        .with_port(f.port),
                    Err((code, msg)) => c
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(&msg))),
                },
            );
        }
        return ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(coordinators),
        );
    }
    let response = match find(auth, groups, txns, listener, key_type, &request.key).await {
        Ok(f) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(f.node_id))
            .with_host(str_bytes(&f.host))
            .with_port(f.port),
        Err((code, msg)) => {
            let r = FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            if version >= 1 {
                r.with_error_message(Some(str_bytes(&msg)))
            } else {
                r
            }
        }
    };
    ResponseKind::FindCoordinator(response)
}
