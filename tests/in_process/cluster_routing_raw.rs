//! Routing as clients expect it in a cluster, over raw frames: which brokers Metadata and
//! DescribeCluster list, what a partition without a live leader answers, the current leader
//! named in NOT_LEADER_OR_FOLLOWER answers (KIP-951), and DescribeTopicPartitions' paging.
//!
//! One node cannot make other brokers, so the multi-broker cases publish a hand-built image
//! (the node's own registration plus brokers 2–5 and a topic they hold) into the running
//! node's metadata cache, which is what every handler reads; the replica manager is not told,
//! so nothing of that topic is hosted here.

use crate::common;

use std::sync::Arc;

use common::{batch, start_broker, RawClient};
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafkaiq::metadata::{
    security_protocol, BrokerRegistration, LeaderRecoveryState, MetadataImage, MetadataRecord,
    PartitionRegistration,
};
use kafkaiq::node::Node;
use uuid::Uuid;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

const REMOTE: &str = "remote";
const REMOTE_ID: Uuid = Uuid::from_u128(0xabc);

fn broker(id: i32, listener: &str, fenced: bool) -> MetadataRecord {
    MetadataRecord::RegisterBroker(BrokerRegistration {
        broker_epoch: 100 + i64::from(id),
        fenced,
        ..BrokerRegistration::new(id, Uuid::from_u128(id as u128), Some(format!("rack-{id}")))
            .with_listener(
                listener,
                "127.0.0.1",
                19090 + id as u16,
                security_protocol::PLAINTEXT,
            )
    })
}

fn partition(
    index: i32,
    replicas: &[i32],
    isr: &[i32],
    leader: i32,
    leader_epoch: i32,
) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id: REMOTE_ID,
        partition: index,
        registration: PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch,
            partition_epoch: leader_epoch,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        },
    }
}

/// The node's image plus: brokers 2 and 3 alive, 4 fenced, 5 alive without the client listener,
/// broker 3 the active controller, and topic "remote":
/// - 0: led by 2 (epoch 7), replicas [2, 1, 3] all in sync;
/// - 1: replicas [4, 2], ISR [4], no leader (epoch 3);
/// - 2: led by 3, replicas [3, 4] (4 fenced), ISR [3];
/// - 3: led by 5, which has no endpoint for the client's listener.
fn publish_cluster(node: &Node) -> Arc<MetadataImage> {
    let mut image = (*node.context.image()).clone();
    image.controller_id = 3;
    image.apply_in_place(&[
        broker(2, "PLAINTEXT", false),
        broker(3, "PLAINTEXT", false),
        broker(4, "PLAINTEXT", true),
        broker(5, "INTERNAL", false),
        MetadataRecord::Topic {
            name: REMOTE.into(),
            topic_id: REMOTE_ID,
        },
        partition(0, &[2, 1, 3], &[2, 1, 3], 2, 7),
        partition(1, &[4, 2], &[4], -1, 3),
        partition(2, &[3, 4], &[3], 3, 1),
        partition(3, &[5], &[5], 5, 2),
    ]);
    let image = Arc::new(image);
    node.context.cache.publish(image.clone());
    image
}

fn ids(v: &[BrokerId]) -> Vec<i32> {
    v.iter().map(|b| b.0).collect()
}

fn metadata_of(version: i16, topic: &str) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name(topic)))
        ]))
        // v0-3 auto-create anyway; the topic exists.
        .with_allow_auto_topic_creation(version < 4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_lists_live_brokers_and_each_partitions_liveness() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_broker(dir.path(), &["broker.rack=rack-1"]).await;
    publish_cluster(&node);
    let mut client = RawClient::connect(node.local_addr).await;

    let md = client.call(12, &metadata_of(12, REMOTE)).await;
    let brokers: Vec<(i32, i32, Option<&str>)> = md
        .brokers
        .iter()
        .map(|b| (b.node_id.0, b.port, b.rack.as_deref()))
        .collect();
    assert_eq!(
        brokers,
        vec![
            (1, i32::from(node.local_addr.port()), Some("rack-1")),
            (2, 19092, Some("rack-2")),
            (3, 19093, Some("rack-3")),
        ],
        "fenced 4 and listener-less 5 are not listed"
    );
    assert_eq!(md.controller_id, BrokerId(3));
    let p = &md.topics[0].partitions;
    // (error, leader, leader epoch, replicas, isr, offline)
    let got: Vec<_> = p
        .iter()
        .map(|p| {
            (
                p.error_code,
                p.leader_id.0,
                p.leader_epoch,
                ids(&p.replica_nodes),
                ids(&p.isr_nodes),
                ids(&p.offline_replicas),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 2, 7, vec![2, 1, 3], vec![2, 1, 3], vec![]),
            (5, -1, 3, vec![4, 2], vec![4], vec![4]),
            (0, 3, 1, vec![3, 4], vec![3], vec![4]),
            (72, -1, 2, vec![5], vec![5], vec![5]),
        ],
        "LEADER_NOT_AVAILABLE without a live leader, LISTENER_NOT_FOUND (v6+) without the listener"
    );

    // v5: a leader without the listener is LEADER_NOT_AVAILABLE.
    let md = client.call(5, &metadata_of(5, REMOTE)).await;
    assert_eq!(md.topics[0].partitions[3].error_code, 5);
    assert_eq!(ids(&md.topics[0].partitions[2].offline_replicas), vec![4]);

    // v0 lists only replicas with an endpoint, and says so with REPLICA_NOT_AVAILABLE.
    let md = client.call(0, &metadata_of(0, REMOTE)).await;
    let p2 = &md.topics[0].partitions[2];
    assert_eq!(
        (p2.error_code, p2.leader_id.0, ids(&p2.replica_nodes)),
        (9, 3, vec![3])
    );
    assert_eq!(md.topics[0].partitions[0].error_code, 0);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_answers_name_the_current_leader_and_its_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_broker(dir.path(), &[]).await;
    publish_cluster(&node);
    let mut client = RawClient::connect(node.local_addr).await;

    let produce = |partitions: &[i32]| {
        ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(REMOTE))
                .with_partition_data(
                    partitions
                        .iter()
                        .map(|&p| {
                            PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(batch(&["x"], None)))
                        })
                        .collect(),
                )])
    };
    let response = client.call(10, &produce(&[0, 1, 2])).await;
    let parts = &response.responses[0].partition_responses;
    let leaders: Vec<(i16, i32, i32)> = parts
        .iter()
        .map(|p| {
            (
                p.error_code,
                p.current_leader.leader_id.0,
                p.current_leader.leader_epoch,
            )
        })
        .collect();
    assert_eq!(leaders, vec![(6, 2, 7), (6, -1, 3), (6, 3, 1)]);
    let endpoints: Vec<(i32, &str, i32, Option<&str>)> = response
        .node_endpoints
        .iter()
        .map(|e| (e.node_id.0, e.host.as_str(), e.port, e.rack.as_deref()))
        .collect();
    assert_eq!(
        endpoints,
        vec![
            (2, "127.0.0.1", 19092, Some("rack-2")),
            (3, "127.0.0.1", 19093, Some("rack-3"))
        ],
        "each named live leader once; none for a partition without one"
    );
    // Before v10 there is no current leader.
    let response = client.call(9, &produce(&[0])).await;
    let p = &response.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.current_leader.leader_id.0), (6, -1));

    let fetch = |version: i16| {
        let topic = if version >= 13 {
            FetchTopic::default().with_topic_id(REMOTE_ID)
        } else {
            FetchTopic::default().with_topic(name(REMOTE))
        };
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![topic.with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(1 << 20)])])
    };
    let response = client.call(16, &fetch(16)).await;
    let p = &response.responses[0].partitions[0];
    assert_eq!(
        (
            p.error_code,
            p.current_leader.leader_id.0,
            p.current_leader.leader_epoch
        ),
        (6, 2, 7)
    );
    assert_eq!(
        ids(&response
            .node_endpoints
            .iter()
            .map(|e| e.node_id)
            .collect::<Vec<_>>()),
        vec![2]
    );
    assert_eq!(response.node_endpoints[0].port, 19092);
    // v15 does not carry them.
    let response = client.call(15, &fetch(15)).await;
    let p = &response.responses[0].partitions[0];
    assert_eq!((p.error_code, p.current_leader.leader_id.0), (6, -1));
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_names_the_active_controller_and_fenced_brokers_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(node.local_addr).await;
    let request = DescribeClusterRequest::default().with_endpoint_type(1);
    // A single node is its own controller.
    let response = client.call(1, &request).await;
    assert_eq!(response.controller_id, BrokerId(1));
    assert_eq!(response.brokers.len(), 1);

    publish_cluster(&node);
    let response = client.call(1, &request).await;
    assert_eq!(response.controller_id, BrokerId(3));
    let listed: Vec<i32> = response.brokers.iter().map(|b| b.broker_id.0).collect();
    assert_eq!(listed, vec![1, 2, 3]);
    let response = client
        .call(2, &request.clone().with_include_fenced_brokers(true))
        .await;
    let listed: Vec<(i32, bool)> = response
        .brokers
        .iter()
        .map(|b| (b.broker_id.0, b.is_fenced))
        .collect();
    assert_eq!(listed, vec![(1, false), (2, false), (3, false), (4, true)]);
    node.shutdown().await.unwrap();
}

fn describe(
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> DescribeTopicPartitionsRequest {
    DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|t| TopicRequest::default().with_name(name(t)))
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| {
            Cursor::default()
                .with_topic_name(name(t))
                .with_partition_index(p)
        }))
}

/// (topic, error, partition indexes) of a response, and its next cursor.
#[allow(clippy::type_complexity)]
fn pages(
    r: &DescribeTopicPartitionsResponse,
) -> (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>) {
    (
        r.topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().unwrap().0.to_string(),
                    t.error_code,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect(),
        r.next_cursor
            .as_ref()
            .map(|c| (c.topic_name.0.to_string(), c.partition_index)),
    )
}

fn s(v: &str) -> String {
    v.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_topic_partitions_pages_with_its_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(node.local_addr).await;
    let versions = client.call(3, &crate::common::api_versions_request()).await;
    let advertised = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::DescribeTopicPartitions as i16)
        .map(|k| (k.min_version, k.max_version));
    assert_eq!(advertised, Some((0, 0)));
    for (topic, partitions) in [("c", 1), ("a", 3), ("b", 2)] {
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![
                kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                    .with_name(name(topic))
                    .with_num_partitions(partitions)
                    .with_replication_factor(1),
            ]);
        let created = client.call(7, &request).await;
        assert_eq!(created.topics[0].error_code, 0);
    }

    // All topics, in name order, four partitions a page.
    let first = client.call(0, &describe(&[], 4, None)).await;
    assert_eq!(
        pages(&first),
        (
            vec![(s("a"), 0, vec![0, 1, 2]), (s("b"), 0, vec![0])],
            Some((s("b"), 1))
        )
    );
    let p = &first.topics[0].partitions[0];
    assert_eq!(
        (p.leader_id.0, ids(&p.replica_nodes), ids(&p.isr_nodes)),
        (1, vec![1], vec![1])
    );
    assert_eq!(p.eligible_leader_replicas, Some(vec![]));
    assert!(!first.topics[0].topic_id.is_nil());
    let second = client.call(0, &describe(&[], 4, Some(("b", 1)))).await;
    assert_eq!(
        pages(&second),
        (vec![(s("b"), 0, vec![1]), (s("c"), 0, vec![0])], None)
    );
    // A page that ends with a topic points at the next one's start.
    let exact = client.call(0, &describe(&[], 3, None)).await;
    assert_eq!(
        pages(&exact),
        (vec![(s("a"), 0, vec![0, 1, 2])], Some((s("b"), 0)))
    );
    // A limit below 1 is 1.
    let one = client.call(0, &describe(&["c"], 0, None)).await;
    assert_eq!(pages(&one), (vec![(s("c"), 0, vec![0])], None));

    // Named topics: the unknown and the invalid answer errors, in name order with the others.
    let named = client
        .call(0, &describe(&["zz", "b", "bad name!"], 10, None))
        .await;
    assert_eq!(
        pages(&named),
        (
            vec![
                (s("b"), 0, vec![0, 1]),
                (s("bad name!"), 17, vec![]),
                (s("zz"), 3, vec![])
            ],
            None
        )
    );
    // Names before the cursor are left out; the cursor must be among the names, its partition
    // not negative.
    let after = client
        .call(0, &describe(&["a", "b", "c"], 10, Some(("b", 1))))
        .await;
    assert_eq!(
        pages(&after),
        (vec![(s("b"), 0, vec![1]), (s("c"), 0, vec![0])], None)
    );
    let refused = client
        .call(0, &describe(&["a", "c"], 10, Some(("b", 0))))
        .await;
    assert_eq!(
        pages(&refused),
        (vec![(s("a"), 42, vec![]), (s("c"), 42, vec![])], None)
    );
    let refused = client.call(0, &describe(&["a"], 10, Some(("a", -1)))).await;
    assert_eq!(pages(&refused), (vec![(s("a"), 42, vec![])], None));

    // Liveness as in Metadata: no live leader → -1; offline replicas listed.
    publish_cluster(&node);
    let remote = client.call(0, &describe(&[REMOTE], 10, None)).await;
    let got: Vec<(i32, i32, Vec<i32>)> = remote.topics[0]
        .partitions
        .iter()
        .map(|p| (p.leader_id.0, p.leader_epoch, ids(&p.offline_replicas)))
        .collect();
    assert_eq!(
        got,
        vec![
            (2, 7, vec![]),
            (-1, 3, vec![4]),
            (3, 1, vec![4]),
            (-1, 2, vec![5])
        ]
    );
    node.shutdown().await.unwrap();
}
