//! The wake-ups of one record's journey across three `kafkaiq` processes on loopback (the
//! [`common::cluster`] harness), RF 3 and min ISR 2, over raw frames:
//!
//! - A consumer's fetch parked on the leader (min bytes 1, a long max wait) is answered with the
//!   record once an acks=all produce of it completes, long before its max wait: the high
//!   watermark move wakes it. The bound asserted is the max wait, not a latency, so a loaded
//!   machine cannot make it flaky; the time taken is printed.
//! - The leader counts the parked produce's wake-up (`acks_wake`, from the high watermark move
//!   that completed the wait to the handler running again) and every node exports the runtime
//!   probe's wake lateness (`kafkaiq_runtime_wake_lateness_ms`), both in `/metrics`.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

use crate::common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{BrokerId, FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use common::cluster::{Cluster, ClusterKind};
use common::http::{get, sample};
use common::{batch, decode_records, RawClient};

const DEADLINE: Duration = Duration::from_secs(60);
/// The consumer fetch's max wait: answered sooner means woken by the high watermark.
const FETCH_MAX_WAIT_MS: i32 = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_consumer_fetch_is_woken_by_the_acks_all_produce_and_the_wake_ups_are_measured() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "latency-wakeups", 3, &[]);
    for id in 1..=3 {
        cluster.await_listening(id);
    }
    let topic = "journey";
    cluster
        .wait_for("topic created", DEADLINE, || async {
            for id in cluster.running() {
                if let Some(0 | 36) = cluster
                    .create_topic_configured(id, topic, 1, 3, &[("min.insync.replicas", "2")])
                    .await
                {
                    return Some(());
                }
            }
            None
        })
        .await;
    let leader = cluster
        .wait_for("a leader and a full ISR", DEADLINE, || async {
            let (leader, _, isr) = cluster.partition_state(1, topic, 0).await?;
            (leader > 0 && isr.len() == 3).then_some(leader)
        })
        .await;
    let addr = cluster.nodes[&leader].client_addr();
    // Metadata shows a new leader as soon as its node's cache has the image; its replica
    // manager acts on the image just after (as in Kafka, whose clients retry the
    // NOT_LEADER_OR_FOLLOWER of that window). The parked fetch below must reach a leader.
    cluster
        .wait_for("the leader serving the partition", DEADLINE, || async {
            let mut probe = RawClient::connect(addr).await;
            let fetch = consumer_fetch(topic, 0);
            let answer = probe.call(12, &fetch).await;
            (answer.responses[0].partitions[0].error_code == 0).then_some(())
        })
        .await;

    // The consumer's fetch parks on the leader: nothing is below the high watermark yet.
    let mut consumer = RawClient::connect(addr).await;
    let fetch = consumer_fetch(topic, FETCH_MAX_WAIT_MS);
    let (correlation_id, frame) = consumer.encode(12, &fetch);
    consumer.send_bytes(&frame).await;
    // The fetch is parked once the leader has read it; a produce racing ahead of it would be
    // answered at once instead, which would not test the wake-up.
    common::wait_until_read_by_broker(
        consumer.stream.local_addr().unwrap().port(),
        cluster.nodes[&leader].client_port,
    )
    .await;

    let mut producer = RawClient::connect(addr).await;
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&["journey"], None)))])]);
    let sent = Instant::now();
    let answer = producer.call(9, &produce).await;
    let acked = sent.elapsed();
    assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);

    let answered = tokio::time::timeout(
        Duration::from_millis(FETCH_MAX_WAIT_MS as u64),
        consumer.read_frame(),
    )
    .await
    .expect("the parked fetch is answered before its max wait")
    .expect("the leader answers the fetch");
    let delivered = sent.elapsed();
    let response = RawClient::decode_response::<FetchRequest>(12, answered, correlation_id);
    let p = &response.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 1);
    let records = p.records.clone().unwrap_or_default();
    assert_eq!(decode_records(&records), vec![(0, "journey".to_owned())]);
    assert!(
        delivered < Duration::from_millis(FETCH_MAX_WAIT_MS as u64 / 2),
        "the consumer's fetch was answered {delivered:?} after the produce: not by the high \
         watermark's move"
    );
    println!("latency: acks=all answered after {acked:?}, the parked fetch after {delivered:?}");

    // The leader parked the produce until both followers had the record, and counted the
    // wake-up; every node's runtime probe is running.
    let (status, _, text) = get(cluster.nodes[&leader].http_addr(), "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(
            &text,
            "kafkaiq_produce_stage_time_ms_count{stage=\"acks_wait\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "kafkaiq_produce_stage_time_ms_count{stage=\"acks_wake\"}"
        ),
        Some(1.0),
        "the parked produce was completed by a high watermark move"
    );
    for id in 1..=3 {
        let http = cluster.nodes[&id].http_addr();
        cluster
            .wait_for(
                "runtime probe wake-ups in /metrics",
                DEADLINE,
                || async move {
                    let (_, _, text) = get(http, "/metrics").await;
                    sample(&text, "kafkaiq_runtime_wake_lateness_ms_count").filter(|n| *n > 0.0)
                },
            )
            .await;
    }
    cluster.stop_all();
}

/// A consumer's Fetch of partition 0 from offset 0, waiting up to `max_wait_ms` for a byte.
fn consumer_fetch(topic: &str, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])])
}
