//! Fetches that claim to come from a follower (`replica_id >= 0`), over TCP with raw frames.
//!
//! A follower's fetch reads up to the log end offset, past the high watermark, so a leader
//! serves it only to an assigned replica (Kafka's `Partition#followerReplicaOrThrow`,
//! leadership-semantics §5): anyone else claiming a broker id gets UNKNOWN_LEADER_EPOCH if the
//! request carries a current leader epoch, else NOT_LEADER_OR_FOLLOWER, and no records. On one
//! node every partition has a single replica, the leader, so every such claim is refused.

use crate::common;

use bytes::Bytes;
use common::{batch, decode_records, start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const NONE: i16 = 0;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

async fn create_topic(client: &mut RawClient, topic: &str) -> Uuid {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let response = client.call(7, &request).await;
    assert_eq!(response.topics[0].error_code, NONE);
    response.topics[0].topic_id
}

async fn produce(client: &mut RawClient, topic: &str, records: Bytes) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let response = client.call(9, &request).await;
    assert_eq!(
        response.responses[0].partition_responses[0].error_code,
        NONE
    );
}

/// A fetch of partition 0 from `replica_id` (in `replica_state` from v15, in `replica_id`
/// before), naming the topic by id from v13.
fn fetch(
    version: i16,
    topic: &str,
    topic_id: Uuid,
    replica_id: i32,
    current_leader_epoch: i32,
    max_wait_ms: i32,
) -> FetchRequest {
    let mut request = FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1 << 20)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_topic_id(topic_id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_current_leader_epoch(current_leader_epoch)
                .with_partition_max_bytes(1 << 20)])]);
    if version >= 15 {
        request.replica_id = BrokerId(-1);
        request.replica_state = ReplicaState::default()
            .with_replica_id(BrokerId(replica_id))
            .with_replica_epoch(-1);
    } else {
        request.replica_id = BrokerId(replica_id);
    }
    request
}

/// (error code, high watermark, records) of the one partition answered.
async fn call(client: &mut RawClient, version: i16, request: &FetchRequest) -> (i16, i64, usize) {
    let response = client.call(version, request).await;
    assert_eq!(response.error_code, NONE);
    let p = &response.responses[0].partitions[0];
    let records = p.records.as_ref().map_or(0, |r| decode_records(r).len());
    (p.error_code, p.high_watermark, records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_claiming_a_replica_id_that_is_not_assigned_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let topic_id = create_topic(&mut client, "r").await;
    produce(&mut client, "r", batch(&["a", "b", "c"], None)).await;

    // A consumer reads the records (leader epoch 0 on a fresh topic).
    assert_eq!(
        call(&mut client, 17, &fetch(17, "r", topic_id, -1, 0, 0)).await,
        (NONE, 3, 3)
    );

    // Another broker id (2 is no broker at all) and this node's own id (1) are no follower of
    // the partition, with every way of carrying the replica id: replica_state (v15+), the
    // replica_id field (v4-v14), by topic id (v13+) and by name.
    for version in [17, 15, 13, 12, 9, 4] {
        for replica_id in [2, 1] {
            let what = format!("v{version} replica {replica_id}");
            // No current leader epoch (always so before v9): NOT_LEADER_OR_FOLLOWER.
            assert_eq!(
                call(
                    &mut client,
                    version,
                    &fetch(version, "r", topic_id, replica_id, -1, 0)
                )
                .await,
                (NOT_LEADER_OR_FOLLOWER, -1, 0),
                "{what} without a leader epoch"
            );
            if version >= 9 {
                // The epoch matches, the replica does not: UNKNOWN_LEADER_EPOCH.
                assert_eq!(
                    call(
                        &mut client,
                        version,
                        &fetch(version, "r", topic_id, replica_id, 0, 0)
                    )
                    .await,
                    (UNKNOWN_LEADER_EPOCH, -1, 0),
                    "{what} with the current leader epoch"
                );
            }
        }
    }

    // Parked fetches too: refused at once, not after max_wait_ms.
    let started = std::time::Instant::now();
    assert_eq!(
        call(&mut client, 17, &fetch(17, "r", topic_id, 2, 0, 30_000)).await,
        (UNKNOWN_LEADER_EPOCH, -1, 0)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));

    // Leader epoch fencing still comes first, as in Kafka: a stale epoch is fenced.
    drop(client);
    broker.shutdown().await.unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    assert_eq!(
        call(&mut client, 17, &fetch(17, "r", topic_id, 2, 0, 0)).await,
        (FENCED_LEADER_EPOCH, -1, 0)
    );
    assert_eq!(
        call(&mut client, 17, &fetch(17, "r", topic_id, 2, 1, 0)).await,
        (UNKNOWN_LEADER_EPOCH, -1, 0)
    );
    assert_eq!(
        call(&mut client, 17, &fetch(17, "r", topic_id, -1, 1, 0)).await,
        (NONE, 3, 3)
    );
    broker.shutdown().await.unwrap();
}
