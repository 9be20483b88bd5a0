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

/// A client's request in an Envelope (KIP-590), as a broker forwards it to the controller: the
/// envelope needs CLUSTER_ACTION (a super user here), and the request in it is checked as the
/// client's, whose principal it carries, and answered inside the envelope. An envelope that
/// cannot be read, or that carries a request brokers do not forward, is refused as Kafka's
/// controller refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_is_checked_as_its_client_and_needs_cluster_action() {
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin;User:broker",
        ],
    )
    .await;
    let ctx = broker.context.clone();
    // Kafka's DefaultPrincipalData: version 0, compact strings, not token-authenticated.
    let principal = |kind: &str, name: &str| {
        let mut b = BytesMut::new();
        b.put_i16(0);
        for part in [kind, name] {
            b.put_u8(part.len() as u8 + 1);
            b.put_slice(part.as_bytes());
        }
        b.put_slice(&[0, 0]);
        b.freeze()
    };
    let create = |topic: &str| {
        let mut b = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::CreateTopics as i16)
            .with_request_api_version(7)
            .with_correlation_id(99)
            .with_client_id(Some(StrBytes::from_static_str("admin-client")))
            .encode(&mut b, ApiKey::CreateTopics.request_header_version(7))
            .unwrap();
        CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(1)
                .with_replication_factor(1)])
            .encode(&mut b, 7)
            .unwrap();
        b.freeze()
    };
    let envelope = |data: Bytes, who: Option<Bytes>| {
        EnvelopeRequest::default()
            .with_request_data(data)
            .with_request_principal(who)
            .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1]))
    };
    let inner = |r: &EnvelopeResponse| {
        let mut data = r.response_data.clone().expect("an answer in the envelope");
        let header =
            ResponseHeader::decode(&mut data, ApiKey::CreateTopics.response_header_version(7))
                .unwrap();
        assert_eq!(header.correlation_id, 99, "the client's correlation id");
        CreateTopicsResponse::decode(&mut data, 7).unwrap()
    };
    let exists = |topic: &str| ctx.image().topics.values().any(|t| t.name == topic);

    // alice has no ACL: her CreateTopics, forwarded by a broker, is refused as hers.
    let r: EnvelopeResponse = call_as(
        &ctx,
        "User:broker",
        0,
        &envelope(create("by-alice"), Some(principal("User", "alice"))),
    )
    .await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        inner(&r).topics[0].error_code,
        29,
        "TOPIC_AUTHORIZATION_FAILED"
    );
    assert!(!exists("by-alice"));

    // The same from the super user admin is created.
    let r: EnvelopeResponse = call_as(
        &ctx,
        "User:broker",
        0,
        &envelope(create("by-admin"), Some(principal("User", "admin"))),
    )
    .await;
    assert_eq!(r.error_code, 0);
    assert_eq!(inner(&r).topics[0].error_code, 0, "{:?}", inner(&r));
    assert!(exists("by-admin"));

    // Only a principal with CLUSTER_ACTION may send envelopes: alice cannot pass as admin.
    let r: EnvelopeResponse = call_as(
        &ctx,
        "User:alice",
        0,
        &envelope(create("alice-as-admin"), Some(principal("User", "admin"))),
    )
    .await;
    assert_eq!(r.error_code, CLUSTER_AUTHORIZATION_FAILED);
    assert!(r.response_data.is_none());
    // No principal, or one that is not Kafka's form: PRINCIPAL_DESERIALIZATION_FAILURE.
    for who in [None, Some(Bytes::from_static(&[0, 7, 1, 2]))] {
        let r: EnvelopeResponse =
            call_as(&ctx, "User:broker", 0, &envelope(create("nobody"), who)).await;
        assert_eq!(r.error_code, 97);
    }
    // A request brokers do not forward (a heartbeat in the node's name), or bytes that are no
    // request: INVALID_REQUEST, nothing done.
    let mut heartbeat = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::BrokerHeartbeat as i16)
        .with_request_api_version(1)
        .with_correlation_id(1)
        .encode(
            &mut heartbeat,
            ApiKey::BrokerHeartbeat.request_header_version(1),
        )
        .unwrap();
    BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(ctx.node_id))
        .with_want_shut_down(true)
        .encode(&mut heartbeat, 1)
        .unwrap();
    for data in [heartbeat.freeze(), Bytes::from_static(&[0, 19, 0])] {
        let r: EnvelopeResponse = call_as(
            &ctx,
            "User:broker",
            0,
            &envelope(data, Some(principal("User", "admin"))),
        )
        .await;
        assert_eq!(r.error_code, 42, "INVALID_REQUEST");
    }
    assert!(!exists("nobody") && !exists("alice-as-admin"));
    assert!(
        !ctx.image()
            .broker(ctx.node_id)
            .unwrap()
            .in_controlled_shutdown
    );
    broker.shutdown().await.unwrap();
}
