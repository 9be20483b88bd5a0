//! Small well-formed requests that must not cost the broker more than their answer is worth,
//! against an in-process broker over TCP: each is answered as Kafka answers it, quickly, and
//! the broker serves on.
//!
//! - Metadata naming one large topic thousands of times (by name, v1; by topic id, v12): Kafka
//!   takes the names and ids as sets, so the answer lists the topic once.
//! - ListOffsets naming a partition more than once: each of its entries is answered
//!   INVALID_REQUEST (Kafka's `duplicatePartitions`), the other partitions as usual.

mod common;

use std::time::{Duration, Instant};

use common::{start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

async fn create_topic(client: &mut RawClient, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let answer = client.call(7, &request).await;
    assert_eq!(answer.topics[0].error_code, 0, "creating {topic}");
}

#[tokio::test]
async fn metadata_naming_a_topic_many_times_answers_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "wide", 500).await;
    let repeats = 20_000;
    let by_name = MetadataRequest::default().with_topics(Some(
        (0..repeats)
            .map(|i| {
                let topic = if i % 2 == 0 { "wide" } else { "missing" };
                MetadataRequestTopic::default().with_name(Some(name(topic)))
            })
            .collect(),
    ));
    let started = Instant::now();
    let answer = client.call(1, &by_name).await;
    let names: Vec<&str> = answer
        .topics
        .iter()
        .map(|t| t.name.as_ref().map_or("", |n| n.0.as_str()))
        .collect();
    assert_eq!(names.len(), 2, "{} topics answered", names.len());
    assert_eq!(names, vec!["wide", "missing"]);
    assert_eq!(answer.topics[0].partitions.len(), 500);
    // Auto-created once (auto.create.topics.enable): LEADER_NOT_AVAILABLE, as Kafka answers.
    assert_eq!(answer.topics[1].error_code, 5);

    let id = answer.topics[0].topic_id;
    let id = if id.is_nil() {
        let v12 = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name("wide"))),
        ]));
        client.call(12, &v12).await.topics[0].topic_id
    } else {
        id
    };
    let by_id = MetadataRequest::default().with_topics(Some(
        (0..repeats)
            .map(|_| MetadataRequestTopic::default().with_topic_id(id))
            .collect(),
    ));
    let answer = client.call(12, &by_id).await;
    assert_eq!(answer.topics.len(), 1);
    assert_eq!(answer.topics[0].topic_id, id);
    assert_eq!(answer.topics[0].partitions.len(), 500);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    drop(client);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn list_offsets_naming_a_partition_twice_is_an_invalid_request_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "twice", 2).await;
    let partition = |index: i32, timestamp: i64| {
        ListOffsetsPartition::default()
            .with_partition_index(index)
            .with_timestamp(timestamp)
    };
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(name("twice"))
                .with_partitions(vec![partition(0, 0), partition(1, -1)]),
            ListOffsetsTopic::default()
                .with_name(name("twice"))
                .with_partitions(vec![partition(0, -2)]),
        ]);
    let answer = client.call(7, &request).await;
    let codes: Vec<(i32, i16)> = answer
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
        })
        .collect();
    // INVALID_REQUEST (42) for each entry of partition 0; partition 1 answered.
    assert_eq!(codes, vec![(0, 42), (1, 0), (0, 42)]);
    drop(client);
    broker.shutdown().await.unwrap();
}
