//! What one client request may put into the metadata log, against an in-process broker over
//! TCP with raw CreateTopics frames:
//!
//! - a manual partition assignment is held to the same partition cap as a partition count
//!   (INVALID_PARTITIONS), validated or not;
//! - the topics of one CreateTopics request are one operation: past the records one operation
//!   may write, every topic is answered POLICY_VIOLATION (Kafka's "Unable to perform
//!   excessively large batch operation.") and none is created; below it, all are.

use crate::common;

use common::{start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const INVALID_PARTITIONS: i16 = 37;
const POLICY_VIOLATION: i16 = 44;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

/// A topic of `partitions` partitions, each on broker `broker` alone, as a manual assignment.
fn assigned(topic: &str, partitions: i32, broker: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(
            (0..partitions)
                .map(|p| {
                    CreatableReplicaAssignment::default()
                        .with_partition_index(p)
                        .with_broker_ids(vec![BrokerId(broker)])
                })
                .collect(),
        )
}

fn counted(topic: &str, partitions: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
}

async fn create(
    client: &mut RawClient,
    topics: Vec<CreatableTopic>,
    validate_only: bool,
) -> CreateTopicsResponse {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only)
        .with_topics(topics);
    client.call(7, &request).await
}

/// The broker's node id and the topics its Metadata lists.
async fn metadata(client: &mut RawClient) -> (i32, Vec<String>) {
    let answer = client
        .call(12, &MetadataRequest::default().with_topics(None))
        .await;
    let node = answer.brokers[0].node_id.0;
    let topics = answer
        .topics
        .iter()
        .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str().to_owned()))
        .collect();
    (node, topics)
}

fn codes(answer: &CreateTopicsResponse) -> Vec<i16> {
    answer.topics.iter().map(|t| t.error_code).collect()
}

#[tokio::test]
async fn a_manual_assignment_past_the_partition_cap_is_invalid_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let (node, _) = metadata(&mut client).await;
    for validate_only in [true, false] {
        let answer = create(
            &mut client,
            vec![assigned("wide", 10_001, node)],
            validate_only,
        )
        .await;
        assert_eq!(
            codes(&answer),
            vec![INVALID_PARTITIONS],
            "validate_only={validate_only}: {:?}",
            answer.topics[0].error_message
        );
        let message = answer.topics[0].error_message.as_ref().unwrap().to_string();
        assert!(message.contains("10001"), "{message}");
    }
    let (_, topics) = metadata(&mut client).await;
    assert!(!topics.contains(&"wide".to_owned()), "{topics:?}");
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_create_topics_request_past_one_operation_creates_none_of_its_topics() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let (node, _) = metadata(&mut client).await;
    // 6,100 partitions each: every topic is within the per-topic cap, together past the
    // records one operation may write.
    let too_many = || vec![counted("a", 6_100), assigned("b", 6_100, node)];
    for validate_only in [true, false] {
        let answer = create(&mut client, too_many(), validate_only).await;
        assert_eq!(
            codes(&answer),
            vec![POLICY_VIOLATION, POLICY_VIOLATION],
            "validate_only={validate_only}"
        );
        for t in &answer.topics {
            assert_eq!(
                t.error_message.as_ref().map(|m| m.to_string()).as_deref(),
                Some("Unable to perform excessively large batch operation.")
            );
            assert_eq!(t.num_partitions, -1);
        }
    }
    let (_, topics) = metadata(&mut client).await;
    assert!(
        !topics.iter().any(|t| t == "a" || t == "b"),
        "a refused request created {topics:?}"
    );

    // Within the bound, one request's topics are all created (a duplicated name still gets its
    // own INVALID_REQUEST and does not stop the others).
    let within = vec![
        counted("c", 40),
        assigned("d", 40, node),
        counted("e", 1),
        counted("e", 1),
    ];
    let answer = create(&mut client, within, false).await;
    assert_eq!(codes(&answer), vec![0, 0, 42, 42]);
    assert_eq!(answer.topics[1].num_partitions, 40);
    let (_, topics) = metadata(&mut client).await;
    assert!(topics.contains(&"c".to_owned()) && topics.contains(&"d".to_owned()));
    broker.shutdown().await.unwrap();
}
