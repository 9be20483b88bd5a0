//! Parked fetches (Kafka's `DelayedFetch`) over TCP: a fetch short of `min_bytes` waits, counts
//! the bytes that become readable on each wake-up without reading them, and is answered — read
//! once — when they reach `min_bytes` or when something it must report happened meanwhile.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, decode_records, start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafkaiq::node::Node;

/// Long enough that a fetch answered before it was woken, not timed out.
const MAX_WAIT_MS: i32 = 30_000;

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
    assert_eq!(client.call(7, &request).await.topics[0].error_code, 0);
}

async fn produce(client: &mut RawClient, topic: &str, partition: i32, records: Bytes) {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let r = client.call(9, &request).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

fn fetch(topic: &str, offsets: &[(i32, i64)], min_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(MAX_WAIT_MS)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(
                offsets
                    .iter()
                    .map(|&(partition, offset)| {
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_current_leader_epoch(-1)
                            .with_partition_max_bytes(1 << 20)
                    })
                    .collect(),
            )])
}

/// Sends `request` on its own connection and returns the pending answer, once the broker has
/// parked it.
async fn park(broker: &Node, request: FetchRequest) -> tokio::task::JoinHandle<FetchResponse> {
    let parked_before = broker.context.replicas.purgatory.parked();
    let addr = broker.local_addr;
    let answer = tokio::spawn(async move {
        let mut client = RawClient::connect(addr).await;
        client.call(12, &request).await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.context.replicas.purgatory.parked() == parked_before {
        assert!(Instant::now() < deadline, "the fetch was never parked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_fetch_is_answered_once_min_bytes_accumulate_across_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "acc", 2).await;

    let one = batch(&["0123456789"], None);
    let min_bytes = 3 * one.len() as i32;
    let started = Instant::now();
    let answer = park(&broker, fetch("acc", &[(0, 0), (1, 0)], min_bytes)).await;
    // Each produce wakes the fetch; the first two leave it short of min_bytes.
    produce(&mut client, "acc", 0, one.clone()).await;
    produce(&mut client, "acc", 1, one.clone()).await;
    produce(&mut client, "acc", 0, one.clone()).await;
    let r = answer.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(MAX_WAIT_MS as u64 / 2),
        "woken, not timed out"
    );
    let records: Vec<usize> = r.responses[0]
        .partitions
        .iter()
        .map(|p| decode_records(p.records.as_ref().unwrap()).len())
        .collect();
    assert_eq!(records, vec![2, 1], "answered with all three batches");
    assert_eq!(broker.context.replicas.purgatory.parked(), 0);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_fetch_reports_what_changed_under_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "gone", 1).await;
    for value in ["a", "b", "c"] {
        produce(&mut client, "gone", 0, batch(&[value], None)).await;
    }

    // DeleteRecords moves the log start offset past the fetch offset: OFFSET_OUT_OF_RANGE.
    let started = Instant::now();
    let answer = park(&broker, fetch("gone", &[(0, 1)], 1 << 20)).await;
    let delete = DeleteRecordsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("gone"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(2)])]);
    assert_eq!(
        client.call(2, &delete).await.topics[0].partitions[0].error_code,
        0
    );
    let r = answer.await.unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, 1);
    assert!(started.elapsed() < Duration::from_millis(MAX_WAIT_MS as u64 / 2));

    // The topic is deleted: UNKNOWN_TOPIC_OR_PARTITION.
    let started = Instant::now();
    let answer = park(&broker, fetch("gone", &[(0, 3)], 1 << 20)).await;
    let r = client
        .call(
            4,
            &DeleteTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topic_names(vec![name("gone")]),
        )
        .await;
    assert_eq!(r.responses[0].error_code, 0);
    let r = answer.await.unwrap();
    assert_eq!(r.responses[0].partitions[0].error_code, 3);
    assert!(started.elapsed() < Duration::from_millis(MAX_WAIT_MS as u64 / 2));
    broker.shutdown().await.unwrap();
}
