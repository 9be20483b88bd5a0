//! Admin paths on three processes on loopback (the [`common::cluster`] harness), over raw
//! frames, checked as Kafka behaves:
//!
//! - DeleteRecords waits until every replica on an alive broker has moved its log start offset
//!   (Kafka's `DelayedDeleteRecords`): with a follower stopped (SIGSTOP) it answers
//!   REQUEST_TIMED_OUT at `timeout_ms`; with every follower running it answers once they have
//!   all moved, so each follower's log already starts at the offset when the answer arrives,
//!   and a new leader after a kill -9 of the old one does not serve the deleted records.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

mod common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, DeleteRecordsRequest, FetchRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use common::cluster::{Cluster, ClusterKind, Settings};
use common::{batch, RawClient};

const NODES: i32 = 3;
/// How long a cluster condition may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);
const REQUEST_TIMED_OUT: i16 = 7;

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// Three nodes with the test's settings: KafkaIQ, or Apache Kafka with
/// `KAFKAIQ_CLUSTER_BROKER=kafka`.
fn start(name: &str, settings: Settings) -> Cluster {
    let mut cluster = Cluster::start(ClusterKind::from_env(), name, NODES, settings);
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    cluster
}

/// Creates a one-partition topic of replication factor 3 with `configs` and waits until it has
/// a leader and a full ISR; returns the leader.
async fn create_topic(cluster: &Cluster, name: &str, configs: &[(&str, &str)]) -> i32 {
    cluster
        .wait_for(&format!("topic {name} created"), DEADLINE, || async {
            for id in cluster.running() {
                if let Some(0 | 36) = cluster
                    .create_topic_configured(id, name, 1, 3, configs)
                    .await
                {
                    return Some(());
                }
            }
            None
        })
        .await;
    cluster
        .wait_for(&format!("{name} has a leader and a full ISR"), DEADLINE, || async {
            let p = cluster.partitions_anywhere(name).await?.remove(&0)?;
            (p.leader > 0 && p.isr.len() == 3).then_some(p.leader)
        })
        .await
}

/// Produces `values` to `topic`-0 with acks=all through `leader`: the error code.
async fn produce(cluster: &Cluster, leader: i32, topic: &str, values: &[&str]) -> i16 {
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(values, None)))])]);
    client.call(9, &request).await.responses[0].partition_responses[0].error_code
}

/// DeleteRecords of `topic`-0 before `offset` through `leader`: (error code, low watermark,
/// how long the answer took).
async fn delete_records(
    cluster: &Cluster,
    leader: i32,
    topic: &str,
    offset: i64,
    timeout_ms: i32,
) -> (i16, i64, Duration) {
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])]);
    let started = Instant::now();
    let r = client.call(2, &request).await;
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.low_watermark, started.elapsed())
}

/// The log start offset of `topic`-0 on node `id`, leader or follower, from a consumer Fetch
/// (v12, which a follower serves, KIP-392) at `offset`, which the log must hold (an error
/// answer carries no log start offset): `None` if the node does not answer or refuses.
async fn log_start_offset(cluster: &Cluster, id: i32, topic: &str, offset: i64) -> Option<i64> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1024)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024)])]);
    let r = client.try_call(12, &request, Duration::from_secs(2)).await?;
    let p = r.responses.first()?.partitions.first()?;
    (p.error_code == 0).then_some(p.log_start_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_waits_for_every_alive_replica_to_move_its_log_start_offset() {
    const TOPIC: &str = "deleted";
    // A stopped broker stays registered and unfenced for the whole test.
    let mut cluster = start("admin-delete-records", &["broker.session.timeout.ms=30000"]);
    let leader = create_topic(&cluster, TOPIC, &[("min.insync.replicas", "1")]).await;
    let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    assert_eq!(produce(&cluster, leader, TOPIC, &values).await, 0);
    let followers: Vec<i32> = (1..=NODES).filter(|n| *n != leader).collect();

    // A stopped follower cannot move its log start offset: the request times out, answering
    // the leader's new log start offset, as Kafka does.
    cluster.signal(followers[0], libc::SIGSTOP);
    let (code, low, took) = delete_records(&cluster, leader, TOPIC, 3, 1_000).await;
    assert_eq!(code, REQUEST_TIMED_OUT, "answered after {took:?}");
    assert_eq!(low, 3);
    assert!(took >= Duration::from_millis(1_000), "answered after {took:?}");
    cluster.signal(followers[0], libc::SIGCONT);

    // Every follower running: answered once each has moved, so each already starts there.
    let (code, low, took) = delete_records(&cluster, leader, TOPIC, 6, 30_000).await;
    assert_eq!((code, low), (0, 6), "answered after {took:?}");
    for &id in &followers {
        let start = log_start_offset(&cluster, id, TOPIC, 6).await;
        assert_eq!(start, Some(6), "follower {id} when DeleteRecords answered");
    }
    println!("delete records: answered after {} ms", took.as_millis());

    // The leader dies at once: whoever leads next does not serve the deleted records.
    cluster.kill(leader);
    let next = cluster
        .wait_for("a new leader", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?.remove(&0)?;
            (p.leader > 0 && p.leader != leader).then_some(p.leader)
        })
        .await;
    let start = cluster
        .wait_for("the new leader answers", DEADLINE, || {
            log_start_offset(&cluster, next, TOPIC, 6)
        })
        .await;
    assert_eq!(start, 6, "the new leader {next}'s log start offset");
    cluster.stop_all();
}
