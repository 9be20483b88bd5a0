//! Small well-formed requests that must not cost the broker more than their answer is worth,
//! against an in-process broker over TCP: each is answered as Kafka answers it, quickly, and
//! the broker serves on.
//!
//! - Metadata naming one large topic thousands of times (by name, v1; by topic id, v12): Kafka
//!   takes the names and ids as sets, so the answer lists the topic once.
//! - ListOffsets naming a partition more than once: each of its entries is answered
//!   INVALID_REQUEST (Kafka's `duplicatePartitions`), the other partitions as usual.
//! - Fetch asking for 2 GiB gets at most the broker's `fetch.max.bytes`.
//! - A client that sends fetches and never reads the answers is disconnected once no byte could
//!   be written for `connections.max.idle.ms`, while other clients are served.
//! - The connection from an address past `max.connections.per.ip` (or its override) is closed
//!   at once; a slot freed by a closed connection is taken again.

use crate::common;

use std::time::{Duration, Instant};

use common::{batch, decode_records, start_broker, tcp_established, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, FetchRequest, ListOffsetsRequest, MetadataRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncWriteExt;

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

/// Appends one batch holding one record of `value_bytes` bytes, `count` times.
async fn produce_large(client: &mut RawClient, topic: &str, count: usize, value_bytes: usize) {
    let value = "v".repeat(value_bytes);
    for _ in 0..count {
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(&[value.as_str()], None)))])]);
        let answer = client.call(9, &request).await;
        assert_eq!(answer.responses[0].partition_responses[0].error_code, 0);
    }
}

/// A Fetch v12 of partition 0 of `topic` from offset 0 with no wait, asking for `max_bytes` in
/// all and for the partition.
fn fetch_everything(topic: &str, max_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(max_bytes)])])
}

#[tokio::test]
async fn a_two_gib_fetch_answers_at_most_fetch_max_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let fetch_max_bytes = 1_048_576;
    let broker = start_broker(dir.path(), &["fetch.max.bytes=1048576"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "capped", 1).await;
    produce_large(&mut client, "capped", 4, 400_000).await;
    let answer = client.call(12, &fetch_everything("capped", i32::MAX)).await;
    let partition = &answer.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.high_watermark, 4);
    let records = partition.records.clone().unwrap_or_default();
    assert!(
        !records.is_empty() && records.len() <= fetch_max_bytes,
        "{} record bytes answered, fetch.max.bytes is {fetch_max_bytes}",
        records.len()
    );
    assert_eq!(decode_records(&records).len(), 2);
    drop(client);
    broker.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_that_never_reads_is_disconnected_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let idle_ms = 2_000;
    let broker = start_broker(dir.path(), &["connections.max.idle.ms=2000"]).await;
    let broker_port = broker.local_addr.port();
    let mut served = RawClient::connect(broker.local_addr).await;
    create_topic(&mut served, "unread", 1).await;
    // 3.6 MB per answer: a few answers fill both ends' socket buffers.
    produce_large(&mut served, "unread", 4, 900_000).await;

    let mut stuck = RawClient::connect(broker.local_addr).await;
    let stuck_port = stuck.stream.local_addr().unwrap().port();
    let requests = 80;
    let mut frames = Vec::new();
    for _ in 0..requests {
        frames.extend_from_slice(&stuck.encode(12, &fetch_everything("unread", 4 << 20)).1);
    }
    stuck.stream.write_all(&frames).await.unwrap();
    let sent = Instant::now();

    // Others are served meanwhile.
    let answer = served.call(12, &fetch_everything("unread", 1 << 20)).await;
    assert_eq!(answer.responses[0].partitions[0].error_code, 0);

    let deadline = Duration::from_millis(idle_ms) + Duration::from_secs(10);
    while tcp_established(broker_port, stuck_port) {
        assert!(
            sent.elapsed() < deadline,
            "the broker still holds the connection of a client that reads nothing {:?} after \
             its requests (connections.max.idle.ms={idle_ms})",
            sent.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let closed_after = sent.elapsed();
    assert!(
        closed_after >= Duration::from_millis(idle_ms),
        "closed after {closed_after:?}, before connections.max.idle.ms"
    );
    // Whatever the client reads now, the connection ends before all answers arrive.
    let mut received = 0usize;
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match stuck.stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received += n,
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the connection did not end");
    assert!(
        received < requests * 3_600_000,
        "all {requests} answers arrived ({received} bytes)"
    );
    // (The first client was idle meanwhile, so it was closed too: a new one.)
    let mut served = RawClient::connect(broker.local_addr).await;
    let answer = served.call(12, &fetch_everything("unread", 1 << 20)).await;
    assert_eq!(answer.responses[0].partitions[0].error_code, 0);
    drop((served, stuck));
    broker.shutdown().await.unwrap();
}

/// Whether a new connection to the broker is answered (a Metadata request naming no topic).
async fn served(addr: std::net::SocketAddr) -> Option<RawClient> {
    let mut client = RawClient::try_connect(addr).await?;
    let request = MetadataRequest::default().with_topics(Some(vec![]));
    client
        .try_call(12, &request, Duration::from_secs(5))
        .await
        .map(|_| client)
}

#[tokio::test]
async fn a_connection_past_max_connections_per_ip_is_closed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        &[
            "max.connections.per.ip=0",
            "max.connections.per.ip.overrides=127.0.0.1:3",
        ],
    )
    .await;
    let addr = broker.local_addr;
    let mut open = Vec::new();
    for i in 0..3 {
        open.push(
            served(addr)
                .await
                .unwrap_or_else(|| panic!("connection {i} refused")),
        );
    }
    let mut fourth = RawClient::connect(addr).await;
    assert!(
        fourth.is_closed().await,
        "a 4th connection from 127.0.0.1 was kept"
    );
    drop(fourth);
    for client in &mut open {
        let request = MetadataRequest::default().with_topics(Some(vec![]));
        assert!(client
            .try_call(12, &request, Duration::from_secs(5))
            .await
            .is_some());
    }
    // A closed connection frees its slot (once the broker has seen it close).
    open.pop();
    let deadline = Instant::now() + Duration::from_secs(10);
    let replacement = loop {
        if let Some(client) = served(addr).await {
            break client;
        }
        assert!(
            Instant::now() < deadline,
            "the freed slot was never given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop((open, replacement));
    broker.shutdown().await.unwrap();
}
