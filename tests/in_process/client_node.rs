//! The inter-broker client against a real in-process KafkaIQ node: ApiVersions negotiation,
//! then CreateTopics, Metadata, Produce and Fetch round trips, pipelined requests, and what the
//! client sees when the node goes away.

use crate::common;

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    CreateTopicsRequest, FetchRequest, MetadataRequest, ProduceRequest, RequestKind, ResponseKind,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafkaiq::client::{
    Client, ClientConfig, ClientError, CloseReason, ConnectionEventKind, RequestOptions,
};
use kafkaiq::protocol::ApiKey;
use tokio::time::timeout;

use common::{batch, decode_records, start_broker};

const STEP: Duration = Duration::from_secs(30);

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

fn config() -> ClientConfig {
    ClientConfig {
        client_id: "broker-2-test".to_owned(),
        jitter_seed: 7,
        reconnect_backoff: Duration::from_millis(20),
        reconnect_backoff_max: Duration::from_millis(100),
        ..ClientConfig::default()
    }
}

#[tokio::test]
async fn round_trips_against_a_kafkaiq_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_broker(dir.path(), &[]).await;
    let node_id = node.context.config.node_id;
    let client = Client::new(config(), None);
    client
        .set_endpoint(node_id, node.local_addr.into())
        .unwrap();

    // ApiVersions is asked directly too; the connection's own negotiation came first.
    let api_versions = timeout(
        STEP,
        client.send(node_id, crate::common::api_versions_request()),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(api_versions.version, 4);
    assert_eq!(api_versions.body.error_code, 0);
    let peer = client.peer_versions(node_id).unwrap();
    assert_eq!(peer.api_versions_version, 4);
    assert_eq!(peer.get(ApiKey::Fetch), Some((4, 17)));
    assert_eq!(peer.get(ApiKey::Produce), Some((0, 13)));

    // CreateTopics v7 (both maxima) returns the topic id.
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(topic_name("replicated"))
            .with_num_partitions(2)
            .with_replication_factor(1)]);
    let created = timeout(STEP, client.send(node_id, create))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(created.version, 7);
    let result = &created.body.topics[0];
    assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    let topic_id = result.topic_id;
    assert!(!topic_id.is_nil());

    // Metadata v13.
    let metadata = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name("replicated"))),
    ]));
    let metadata = timeout(STEP, client.send(node_id, metadata))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(metadata.version, 13);
    assert_eq!(metadata.body.brokers.len(), 1);
    assert_eq!(metadata.body.brokers[0].node_id.0, node_id);
    let topic = &metadata.body.topics[0];
    assert_eq!(topic.topic_id, topic_id);
    assert_eq!(topic.partitions.len(), 2);
    assert!(topic.partitions.iter().all(|p| p.leader_id.0 == node_id));

    // Produce: v13 addresses the topic by id, older versions by name; the builder decides.
    let records = batch(&["a", "b", "c"], None);
    let produced = timeout(
        STEP,
        client.send_with(node_id, RequestOptions::default(), move |version| {
            let topic = TopicProduceData::default().with_partition_data(vec![
                PartitionProduceData::default()
                    .with_index(1)
                    .with_records(Some(records)),
            ]);
            let topic = if version >= 13 {
                topic.with_topic_id(topic_id)
            } else {
                topic.with_name(topic_name("replicated"))
            };
            ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![topic])
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(produced.version, 13);
    let partition = &produced.body.responses[0].partition_responses[0];
    assert_eq!((partition.error_code, partition.base_offset), (0, 0));

    // Fetch at min(18, 17) = 17, by topic id, as a consumer.
    let fetched = timeout(
        STEP,
        client.send_with(node_id, RequestOptions::default(), move |version| {
            assert!(version >= 13);
            FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(1)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])])
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(fetched.version, 17);
    let partition = &fetched.body.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 3);
    let values: Vec<_> = decode_records(partition.records.as_ref().unwrap())
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    assert_eq!(values, ["a", "b", "c"]);

    // The same through the untyped entry point forwarding uses, pinned to an older version.
    let forwarded = timeout(
        STEP,
        client.send_kind(
            node_id,
            RequestOptions::default().versions(0, 9),
            ApiKey::Metadata,
            |_| RequestKind::Metadata(MetadataRequest::default().with_topics(None)),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(forwarded.version, 9);
    let ResponseKind::Metadata(body) = forwarded.body else {
        panic!("not a Metadata response")
    };
    assert!(body
        .topics
        .iter()
        .any(|t| t.name == Some(topic_name("replicated"))));

    // All of it on one connection.
    assert_eq!(
        client.watch(node_id).unwrap().borrow().connections_opened,
        1
    );
    node.shutdown().await.unwrap();
}

#[tokio::test]
async fn pipelined_requests_to_a_node_all_complete_and_its_shutdown_is_observed() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_broker(dir.path(), &[]).await;
    let node_id = node.context.config.node_id;
    let client = Client::new(config(), None);
    client
        .set_endpoint(node_id, node.local_addr.into())
        .unwrap();
    let mut events = client.events();

    let calls: Vec<_> = (0..20)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.send(node_id, MetadataRequest::default()).await })
        })
        .collect();
    for call in calls {
        let response = timeout(STEP, call).await.unwrap().unwrap().unwrap();
        assert_eq!(response.body.controller_id.0, node_id);
    }
    // Fire-and-forget requests to a real broker leave the connection usable.
    for _ in 0..10 {
        client
            .send_and_forget(node_id, RequestOptions::default(), |_| {
                MetadataRequest::default()
            })
            .await
            .unwrap();
    }
    timeout(STEP, client.send(node_id, MetadataRequest::default()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        client.watch(node_id).unwrap().borrow().connections_opened,
        1
    );

    // The node goes away: the client hears the close, and the next request cannot connect.
    node.shutdown().await.unwrap();
    let closed = timeout(STEP, async {
        loop {
            let event = events.recv().await.unwrap();
            if let ConnectionEventKind::Closed { reason, .. } = event.kind {
                return (event.node, reason);
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(closed, (node_id, CloseReason::PeerClosed));
    let err = timeout(STEP, client.send(node_id, MetadataRequest::default()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, ClientError::ConnectFailed { .. }), "{err}");
}
