//! The controller listener's checks with an authorizer, on an in-process node: the broker
//! lifecycle APIs from a principal without CLUSTER_ACTION on the cluster are answered
//! CLUSTER_AUTHORIZATION_FAILED and change nothing (a BrokerHeartbeat asking for the node's
//! controlled shutdown leaves it registered, unfenced and not shutting down), while a super
//! user's heartbeat is decided.

use crate::common;
use crate::security_support::call_as;

use common::start_broker;
use kafka_protocol::messages::*;

const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_lifecycle_apis_need_cluster_action_and_a_refusal_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
        ],
    )
    .await;
    let ctx = broker.context.clone();
    let node_id = ctx.node_id;
    let before = ctx.image();
    let registration = before.broker(node_id).expect("registered").clone();
    assert!(!registration.fenced && !registration.in_controlled_shutdown);

    let shut_down = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(node_id))
        .with_broker_epoch(registration.broker_epoch)
        .with_current_metadata_offset(before.metadata_offset as i64)
        .with_want_fence(false)
        .with_want_shut_down(true);
    let refused: BrokerHeartbeatResponse = call_as(&ctx, "User:alice", 1, &shut_down).await;
    assert_eq!(refused.error_code, CLUSTER_AUTHORIZATION_FAILED);
    let refused: AlterPartitionResponse = call_as(
        &ctx,
        "User:ANONYMOUS",
        2,
        &AlterPartitionRequest::default()
            .with_broker_id(BrokerId(node_id))
            .with_broker_epoch(registration.broker_epoch),
    )
    .await;
    assert_eq!(refused.error_code, CLUSTER_AUTHORIZATION_FAILED);
    let refused: AllocateProducerIdsResponse = call_as(
        &ctx,
        "User:alice",
        0,
        &AllocateProducerIdsRequest::default()
            .with_broker_id(BrokerId(node_id))
            .with_broker_epoch(registration.broker_epoch),
    )
    .await;
    assert_eq!(refused.error_code, CLUSTER_AUTHORIZATION_FAILED);
    let after = ctx.image();
    let still = after.broker(node_id).expect("still registered");
    assert!(
        !still.fenced && !still.in_controlled_shutdown,
        "a refused heartbeat changed the registration: {still:?}"
    );
    assert_eq!(still.broker_epoch, registration.broker_epoch);

    // A super user's heartbeat is decided (no shutdown asked: the node keeps running).
    let alive: BrokerHeartbeatResponse = call_as(
        &ctx,
        "User:admin",
        1,
        &shut_down.clone().with_want_shut_down(false),
    )
    .await;
    assert_ne!(alive.error_code, CLUSTER_AUTHORIZATION_FAILED);
    broker.shutdown().await.unwrap();
}
