//! The controller listener's checks with an authorizer, on an in-process node: the broker
//! lifecycle APIs from a principal without CLUSTER_ACTION on the cluster are answered
//! CLUSTER_AUTHORIZATION_FAILED and change nothing (a BrokerHeartbeat asking for the node's
//! controlled shutdown leaves it registered, unfenced and not shutting down), while a super
//! user's heartbeat is decided.

use crate::common;

use common::{start_broker, RawClient};
use kafka_protocol::messages::*;
use kafkaiq::server::{controller_dispatch, ConnectionInfo, ListenerKind};

const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

/// `request` at `version` through the controller listener's dispatch, as `principal`.
async fn call_as<R: kafka_protocol::protocol::Request>(
    ctx: &std::sync::Arc<kafkaiq::context::Context>,
    principal: &str,
    version: i16,
    request: &R,
) -> R::Response {
    // An unconnected client only encodes and decodes here.
    let encoder = RawClient::connect(probe_addr().await).await;
    let (correlation_id, frame) = encoder.encode(version, request);
    let info = ConnectionInfo {
        id: 4242,
        peer: "127.0.0.1:40000".parse().unwrap(),
        listener: ListenerKind::Controller,
        listener_name: "CONTROLLER".into(),
        principal: principal.to_owned(),
    };
    let answer = controller_dispatch::handle_frame(ctx, frame.slice(4..), &info)
        .await
        .expect("handled")
        .expect("answered");
    RawClient::decode_response::<R>(version, answer.slice(4..), correlation_id)
}

/// A listening socket for [`RawClient::connect`], which the encoder never uses.
async fn probe_addr() -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = l.accept().await;
    });
    addr
}

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
