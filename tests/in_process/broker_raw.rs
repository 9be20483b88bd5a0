//! In-process broker on 127.0.0.1:0, driven with raw Kafka frames, asserting exact response
//! fields and error codes.

use crate::common;

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::{batch, batch_keyed, decode_records, start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

async fn create_topic(
    client: &mut RawClient,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> CreateTopicsResponse {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )]);
    client.call(7, &request).await
}

fn produce_request(topic: &str, partition: i32, acks: i16, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

async fn produce(client: &mut RawClient, topic: &str, acks: i16, records: Bytes) -> (i16, i64) {
    let response = client
        .call(9, &produce_request(topic, 0, acks, records))
        .await;
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn fetch_request(topic: &str, offset: i64, leader_epoch: i32, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(leader_epoch)
                .with_partition_max_bytes(1 << 20)])])
}

fn metadata_request(topic: &str) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name(topic)))
        ]))
        .with_allow_auto_topic_creation(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_too_new_gets_unsupported_version_with_our_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;

    // ApiVersions v99, header v2 (flexible): key, version, correlation id, client id, tags.
    let mut body = BytesMut::new();
    body.put_i16(18);
    body.put_i16(99);
    body.put_i32(4242);
    body.put_i16(4);
    body.put_slice(b"test");
    body.put_u8(0);
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    client.send_bytes(&frame).await;
    let mut response = client.read_frame().await.unwrap();
    let header = ResponseHeader::decode(&mut response, 0).unwrap();
    assert_eq!(header.correlation_id, 4242);
    let body = ApiVersionsResponse::decode(&mut response, 0).unwrap();
    assert_eq!(body.error_code, 35, "UNSUPPORTED_VERSION");
    let range = |key: ApiKey| {
        body.api_keys
            .iter()
            .find(|k| k.api_key == key as i16)
            .map(|k| (k.min_version, k.max_version))
    };
    assert_eq!(range(ApiKey::ApiVersions), Some((0, 4)));
    assert_eq!(range(ApiKey::Produce), Some((0, 13)));
    assert_eq!(range(ApiKey::Fetch), Some((4, 17)));
    assert_eq!(range(ApiKey::ListOffsets).unwrap().0, 1);
    assert_eq!(range(ApiKey::InitProducerId).unwrap().0, 0);

    // The same connection keeps working with a version we know.
    let ok = client.call(3, &crate::common::api_versions_request()).await;
    assert_eq!(ok.error_code, 0);
    assert_eq!(ok.api_keys.len(), body.api_keys.len());
    broker.shutdown().await.unwrap();
}

/// `kafka-features describe` and `Admin.describeFeatures` read the features of ApiVersions v3+:
/// Kafka 4.1 reports `metadata.version` finalized at 27 (4.1-IV1) and leaves level-0 features out
/// of the finalized list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_v3_reports_supported_and_finalized_features() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let r = client.call(3, &crate::common::api_versions_request()).await;
    assert_eq!(r.error_code, 0);
    let supported = |name: &str| {
        r.supported_features
            .iter()
            .find(|f| f.name.as_str() == name)
            .map(|f| (f.min_version, f.max_version))
    };
    assert_eq!(supported("metadata.version"), Some((27, 27)));
    assert_eq!(supported("group.version"), Some((0, 1)));
    assert_eq!(supported("transaction.version"), Some((0, 2)));
    let finalized: Vec<_> = r
        .finalized_features
        .iter()
        .map(|f| {
            (
                f.name.as_str().to_owned(),
                f.min_version_level,
                f.max_version_level,
            )
        })
        .collect();
    // Group version 1 (KIP-848) and transaction version 2 are finalized, as in a Kafka 4.1
    // cluster formatted with its defaults.
    assert_eq!(
        finalized,
        vec![
            ("metadata.version".to_owned(), 27, 27),
            ("group.version".to_owned(), 1, 1),
            ("transaction.version".to_owned(), 2, 2)
        ]
    );
    assert!(r.finalized_features_epoch >= 0);
    // v0-2 have no feature fields.
    let old = client.call(2, &crate::common::api_versions_request()).await;
    assert_eq!(old.error_code, 0);
    assert!(old.supported_features.is_empty());
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_reports_leader_epoch_topic_id_and_epochs_bump_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["broker.rack=rack-a"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let created = create_topic(&mut client, "orders", 3, &[]).await;
    let created = &created.topics[0];
    assert_eq!(created.error_code, 0);
    assert_eq!(created.num_partitions, 3);
    assert_eq!(created.replication_factor, 1);
    let topic_id = created.topic_id;
    assert!(!topic_id.is_nil());

    let md = client.call(13, &metadata_request("orders")).await;
    assert_eq!(md.error_code, 0);
    assert_eq!(md.controller_id, BrokerId(1));
    assert_eq!(md.brokers.len(), 1);
    assert_eq!(md.brokers[0].port, i32::from(broker.local_addr.port()));
    assert_eq!(md.brokers[0].rack.as_deref(), Some("rack-a"));
    let cluster_id = md.cluster_id.clone().unwrap();
    assert_eq!(cluster_id.len(), 22);
    let t = &md.topics[0];
    assert_eq!(t.error_code, 0);
    assert_eq!(t.topic_id, topic_id);
    assert_eq!(t.partitions.len(), 3);
    for p in &t.partitions {
        assert_eq!(p.leader_id, BrokerId(1));
        assert_eq!(p.leader_epoch, 0);
        assert_eq!(p.replica_nodes, vec![BrokerId(1)]);
        assert_eq!(p.isr_nodes, vec![BrokerId(1)]);
        assert!(p.offline_replicas.is_empty());
    }

    // By topic id; the Java client sends an empty name next to the id.
    let by_id = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
        .with_topic_id(topic_id)
        .with_name(Some(name("")))]));
    let md = client.call(12, &by_id).await;
    assert_eq!(md.topics[0].error_code, 0);
    assert_eq!(
        md.topics[0].name.as_ref().map(|n| n.0.as_str()),
        Some("orders")
    );
    assert_eq!(md.topics[0].topic_id, topic_id);
    let unknown =
        MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_topic_id(uuid::Uuid::from_u128(42))
            .with_name(None)]));
    let md = client.call(12, &unknown).await;
    assert_eq!(md.topics[0].error_code, 100, "UNKNOWN_TOPIC_ID");
    assert_eq!(md.topics[0].topic_id, uuid::Uuid::from_u128(42));

    // Unknown and invalid names.
    let md = client.call(12, &metadata_request("nope")).await;
    assert_eq!(md.topics[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    let md = client.call(12, &metadata_request("bad name!")).await;
    assert_eq!(md.topics[0].error_code, 17, "INVALID_TOPIC_EXCEPTION");

    drop(client);
    broker.shutdown().await.unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let md = client.call(12, &metadata_request("orders")).await;
    assert_eq!(
        md.cluster_id,
        Some(cluster_id),
        "cluster id survives restart"
    );
    assert_eq!(md.topics[0].topic_id, topic_id);
    for p in &md.topics[0].partitions {
        assert_eq!(p.leader_epoch, 1, "a returning leader gets a new epoch");
    }
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_create_answers_leader_not_available_then_serves_the_topic() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["num.partitions=2"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let request = metadata_request("auto").with_allow_auto_topic_creation(true);
    let md = client.call(9, &request).await;
    assert_eq!(md.topics[0].error_code, 5, "LEADER_NOT_AVAILABLE");
    let md = client.call(9, &request).await;
    assert_eq!(md.topics[0].error_code, 0);
    assert_eq!(md.topics[0].partitions.len(), 2);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_then_fetch_reads_back_the_same_records_at_consecutive_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "t", 1, &[]).await;
    assert_eq!(
        produce(&mut client, "t", -1, batch(&["a", "b", "c"], None)).await,
        (0, 0)
    );
    assert_eq!(
        produce(&mut client, "t", 1, batch(&["d", "e"], None)).await,
        (0, 3)
    );

    let response = client.call(12, &fetch_request("t", 0, -1, 0)).await;
    let p = &response.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 5);
    assert_eq!(p.last_stable_offset, 5);
    assert_eq!(p.log_start_offset, 0);
    let records = decode_records(p.records.as_ref().unwrap());
    let expected: Vec<(i64, String)> = ["a", "b", "c", "d", "e"]
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v.to_string()))
        .collect();
    assert_eq!(records, expected);

    // A fetch in the middle of a batch returns the whole batch containing the offset.
    let response = client.call(12, &fetch_request("t", 1, -1, 0)).await;
    let raw = response.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(
        i64::from_be_bytes(raw[..8].try_into().unwrap()),
        0,
        "base offset of the first batch"
    );
    let records = decode_records(&raw);
    assert_eq!(records.first().unwrap().0, 0, "{records:?}");

    // At the end of the log: empty records (never null), no error.
    let response = client.call(12, &fetch_request("t", 5, -1, 0)).await;
    let p = &response.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.records.as_ref().map(|r| r.len()), Some(0));

    // Beyond the log end: OFFSET_OUT_OF_RANGE.
    let response = client.call(12, &fetch_request("t", 6, -1, 0)).await;
    assert_eq!(response.responses[0].partitions[0].error_code, 1);

    // ListOffsets earliest / latest / by timestamp, with the leader epoch.
    let list = |ts: i64| {
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(ts)])])
    };
    let r = client.call(7, &list(-2)).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset, p.leader_epoch), (0, 0, 0));
    let r = client.call(7, &list(-1)).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.offset, p.leader_epoch), (0, 5, 0));
    let r = client.call(7, &list(0)).await;
    assert_eq!(r.topics[0].partitions[0].offset, 0);
    let r = client.call(7, &list(i64::MAX / 2)).await;
    assert_eq!(r.topics[0].partitions[0].offset, -1, "no record that late");
    broker.shutdown().await.unwrap();
}

/// Kafka's ReplicaManager refuses a client's append to an internal topic (only the admin
/// client id may): records forged into `__consumer_offsets` would become a group's offsets when
/// its coordinator loads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_append_to_an_internal_topic() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    // FindCoordinator creates `__consumer_offsets`, as a consumer's first step does.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found: FindCoordinatorResponse = client
            .call(
                3,
                &FindCoordinatorRequest::default().with_key(StrBytes::from_static_str("g")),
            )
            .await;
        if found.error_code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no coordinator: {found:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let forged = produce_request("__consumer_offsets", 0, 1, batch(&["forged"], None));
    let response = client.call(9, &forged).await;
    let p = &response.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 17, "INVALID_TOPIC_EXCEPTION: {p:?}");
    let fetched = client
        .call(12, &fetch_request("__consumer_offsets", 0, -1, 0))
        .await;
    assert_eq!(fetched.responses[0].partitions[0].high_watermark, 0);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_errors_use_kafka_codes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["auto.create.topics.enable=false"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "small", 1, &[("max.message.bytes", "200")]).await;

    assert_eq!(
        produce(&mut client, "small", 2, batch(&["x"], None))
            .await
            .0,
        21,
        "INVALID_REQUIRED_ACKS"
    );
    assert_eq!(
        produce(&mut client, "missing", 1, batch(&["x"], None))
            .await
            .0,
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let big = "y".repeat(500);
    assert_eq!(
        produce(&mut client, "small", 1, batch(&[big.as_str()], None))
            .await
            .0,
        10,
        "MESSAGE_TOO_LARGE"
    );
    let mut corrupt = BytesMut::from(&batch(&["z"], None)[..]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    assert_eq!(
        produce(&mut client, "small", 1, corrupt.freeze()).await.0,
        2,
        "CORRUPT_MESSAGE"
    );
    // Nothing above was appended.
    assert_eq!(
        produce(&mut client, "small", 1, batch(&["ok"], None)).await,
        (0, 0)
    );

    // acks=0: no response; the next request's response comes next on the connection.
    let (_, frame) = client.encode(9, &produce_request("small", 0, 0, batch(&["silent"], None)));
    client.send_bytes(&frame).await;
    let r = client.call(3, &crate::common::api_versions_request()).await;
    assert_eq!(r.error_code, 0);
    let response = client.call(12, &fetch_request("small", 0, -1, 0)).await;
    let records = decode_records(
        response.responses[0].partitions[0]
            .records
            .as_ref()
            .unwrap(),
    );
    assert_eq!(records.len(), 2);

    // acks=0 that fails: the broker closes the connection, as Kafka does.
    let (_, frame) = client.encode(9, &produce_request("missing", 0, 0, batch(&["lost"], None)));
    client.send_bytes(&frame).await;
    assert!(client.is_closed().await);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_epoch_fencing_on_fetch_list_offsets_and_offset_for_leader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "e", 1, &[]).await;
    produce(&mut client, "e", -1, batch(&["a", "b"], None)).await;
    drop(client);
    broker.shutdown().await.unwrap();

    // After a restart the leader epoch is 1, starting at offset 2.
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    produce(&mut client, "e", -1, batch(&["c"], None)).await;

    let r = client.call(12, &fetch_request("e", 0, 0, 0)).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code, 74,
        "FENCED_LEADER_EPOCH"
    );
    let r = client.call(12, &fetch_request("e", 0, 2, 0)).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code, 75,
        "UNKNOWN_LEADER_EPOCH"
    );
    let r = client.call(12, &fetch_request("e", 0, 1, 0)).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(decode_records(p.records.as_ref().unwrap()).len(), 3);

    // Fetch v12: a last fetched epoch the log diverged from gets DivergingEpoch and no records
    // (epoch 0 ended at offset 2, the client claims to have fetched epoch 0 up to offset 3).
    let mut diverged = fetch_request("e", 3, 1, 0);
    diverged.topics[0].partitions[0].last_fetched_epoch = 0;
    let r = client.call(12, &diverged).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(
        (p.diverging_epoch.epoch, p.diverging_epoch.end_offset),
        (0, 2)
    );
    assert_eq!(p.records.as_ref().map(|r| r.len()), Some(0));
    let mut consistent = fetch_request("e", 2, 1, 0);
    consistent.topics[0].partitions[0].last_fetched_epoch = 0;
    let r = client.call(12, &consistent).await;
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.diverging_epoch.epoch, -1);
    assert_eq!(decode_records(p.records.as_ref().unwrap()).len(), 1);

    let list = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("e"))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(0)
                .with_timestamp(-1)])]);
    let r = client.call(7, &list).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 74);

    let ofle = |epoch: i32, current: i32| {
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![OffsetForLeaderTopic::default()
                .with_topic(name("e"))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(current)
                    .with_leader_epoch(epoch)])])
    };
    let r = client.call(4, &ofle(0, 1)).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_epoch, p.end_offset), (0, 0, 2));
    let r = client.call(4, &ofle(1, -1)).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_epoch, p.end_offset), (0, 1, 3));
    let r = client.call(4, &ofle(0, 0)).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 74);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_waits_for_max_wait_and_wakes_on_produce() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "lp", 1, &[]).await;

    // Nothing to read: answered at max_wait_ms, empty.
    let start = Instant::now();
    let r = client.call(12, &fetch_request("lp", 0, -1, 400)).await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(380),
        "answered after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(2_000),
        "answered after {waited:?}"
    );
    assert_eq!(
        r.responses[0].partitions[0].records.as_ref().unwrap().len(),
        0
    );

    // min_bytes = 0: answered at once even with nothing to read.
    let start = Instant::now();
    let r = client
        .call(12, &fetch_request("lp", 0, -1, 5_000).with_min_bytes(0))
        .await;
    assert!(start.elapsed() < Duration::from_millis(1_000));
    assert_eq!(r.responses[0].partitions[0].error_code, 0);

    // Parked fetch is answered as soon as a produce arrives: the produce goes out once the
    // broker shows the fetch parked in its purgatory, so it wakes a fetch that was waiting
    // (long before its 10 s max wait).
    let addr = broker.local_addr;
    let context = broker.context.clone();
    let producer = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(10);
        while context.replicas.purgatory.parked() == 0 {
            assert!(Instant::now() < deadline, "the fetch never parked");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut other = RawClient::connect(addr).await;
        produce(&mut other, "lp", 1, batch(&["wake"], None)).await
    });
    let start = Instant::now();
    let r = client.call(12, &fetch_request("lp", 0, -1, 10_000)).await;
    let waited = start.elapsed();
    assert_eq!(producer.await.unwrap(), (0, 0));
    assert!(
        waited < Duration::from_millis(5_000),
        "answered after {waited:?}: not woken by the produce"
    );
    let records = decode_records(r.responses[0].partitions[0].records.as_ref().unwrap());
    assert_eq!(records, vec![(0, "wake".to_string())]);

    // Fewer bytes than min_bytes: the fetch waits for max_wait_ms, then returns what there is.
    let start = Instant::now();
    let r = client
        .call(12, &fetch_request("lp", 0, -1, 500).with_min_bytes(1 << 20))
        .await;
    assert!(start.elapsed() >= Duration::from_millis(480));
    let records = decode_records(r.responses[0].partitions[0].records.as_ref().unwrap());
    assert_eq!(records.len(), 1);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "p", 1, &[]).await;
    let mut all = BytesMut::new();
    let mut ids = Vec::new();
    for i in 0..20 {
        let (id, frame) = if i % 2 == 0 {
            client.encode(9, &produce_request("p", 0, 1, batch(&["v"], None)))
        } else {
            client.encode(3, &crate::common::api_versions_request())
        };
        ids.push(id);
        all.put_slice(&frame);
    }
    client.send_bytes(&all).await;
    let mut offsets = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let frame = client.read_frame().await.unwrap();
        if i % 2 == 0 {
            let r = RawClient::decode_response::<ProduceRequest>(9, frame, id);
            offsets.push(r.responses[0].partition_responses[0].base_offset);
        } else {
            RawClient::decode_response::<ApiVersionsRequest>(3, frame, id);
        }
    }
    assert_eq!(offsets, (0..10).collect::<Vec<i64>>());
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;

    // A size prefix far above socket.request.max.bytes.
    let mut bad = RawClient::connect(broker.local_addr).await;
    bad.send_bytes(&0x7fff_ffffi32.to_be_bytes()).await;
    assert!(bad.is_closed().await);

    // A negative size prefix.
    let mut bad = RawClient::connect(broker.local_addr).await;
    bad.send_bytes(&(-5i32).to_be_bytes()).await;
    assert!(bad.is_closed().await);

    // The 7-byte Metadata body claiming a huge topics array.
    let mut bad = RawClient::connect(broker.local_addr).await;
    let mut body = BytesMut::new();
    body.put_i16(3); // Metadata
    body.put_i16(4);
    body.put_i32(1);
    body.put_i16(-1); // null client id
    body.put_slice(&[0x7f, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03]);
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    bad.send_bytes(&frame).await;
    assert!(bad.is_closed().await);

    // An unknown API key.
    let mut bad = RawClient::connect(broker.local_addr).await;
    bad.send_bytes(&[0, 0, 0, 8, 0x7f, 0x00, 0, 0, 0, 0, 0, 1])
        .await;
    assert!(bad.is_closed().await);

    // Everyone else is still served.
    let mut good = RawClient::connect(broker.local_addr).await;
    let r = good.call(3, &crate::common::api_versions_request()).await;
    assert_eq!(r.error_code, 0);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_duplicates_and_sequence_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "idem", 1, &[]).await;
    let init = client
        .call(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000),
        )
        .await;
    assert_eq!(init.error_code, 0);
    assert_eq!(init.producer_epoch, 0);
    let pid = init.producer_id.0;
    let init2 = client
        .call(
            4,
            &InitProducerIdRequest::default().with_transactional_id(None),
        )
        .await;
    assert_ne!(init2.producer_id.0, pid, "producer ids are never reused");

    let b0 = batch(&["a", "b"], Some((pid, 0, 0)));
    assert_eq!(produce(&mut client, "idem", -1, b0.clone()).await, (0, 0));
    assert_eq!(
        produce(&mut client, "idem", -1, batch(&["c"], Some((pid, 0, 2)))).await,
        (0, 2)
    );
    // A retry of the first batch: the original offset, no error, nothing appended.
    assert_eq!(produce(&mut client, "idem", -1, b0).await, (0, 0));
    // A gap in the sequence.
    assert_eq!(
        produce(&mut client, "idem", -1, batch(&["x"], Some((pid, 0, 9))))
            .await
            .0,
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );
    // A new batch and a retried one in one request: refused whole, as Kafka takes one batch
    // per partition, never answered as the retry with the new batch left unwritten.
    let mut two = BytesMut::from(&batch(&["new"], Some((init2.producer_id.0, 0, 0)))[..]);
    two.extend_from_slice(&batch(&["a", "b"], Some((pid, 0, 0))));
    assert_eq!(
        produce(&mut client, "idem", -1, two.freeze()).await.0,
        87,
        "INVALID_RECORD"
    );
    let r = client.call(12, &fetch_request("idem", 0, -1, 0)).await;
    assert_eq!(r.responses[0].partitions[0].high_watermark, 3);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetch_session_sends_only_changed_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "s1", 1, &[]).await;
    create_topic(&mut client, "s2", 1, &[]).await;
    produce(&mut client, "s1", 1, batch(&["one"], None)).await;

    let part = |offset: i64| {
        vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(offset)
            .with_current_leader_epoch(-1)
            .with_partition_max_bytes(1 << 20)]
    };
    let full = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_id(0)
        .with_session_epoch(0)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(name("s1"))
                .with_partitions(part(0)),
            FetchTopic::default()
                .with_topic(name("s2"))
                .with_partitions(part(0)),
        ]);
    let r = client.call(12, &full).await;
    assert_eq!(r.error_code, 0);
    assert!(r.session_id > 0);
    assert_eq!(r.responses.len(), 2);
    let session = r.session_id;

    // Epoch 1, nothing new anywhere: the answer lists no partitions.
    let incremental = |epoch: i32| {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_session_id(session)
            .with_session_epoch(epoch)
    };
    let r = client
        .call(
            12,
            &incremental(1).with_topics(vec![FetchTopic::default()
                .with_topic(name("s1"))
                .with_partitions(part(1))]),
        )
        .await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.session_id, session);
    assert!(r.responses.is_empty(), "{:?}", r.responses);

    // New data in s2 only: only s2 is sent.
    produce(&mut client, "s2", 1, batch(&["two"], None)).await;
    let r = client.call(12, &incremental(2)).await;
    assert_eq!(r.responses.len(), 1);
    assert_eq!(r.responses[0].topic.0.as_str(), "s2");

    // A wrong epoch and an unknown session are top-level errors.
    let r = client.call(12, &incremental(7)).await;
    assert_eq!(r.error_code, 71, "INVALID_FETCH_SESSION_EPOCH");
    let r = client
        .call(
            12,
            &incremental(1).with_session_id(session.wrapping_add(1000)),
        )
        .await;
    assert_eq!(r.error_code, 70, "FETCH_SESSION_ID_NOT_FOUND");
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_session_never_reads_a_topic_created_again_under_its_old_id() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let old = create_topic(&mut client, "again", 1, &[]).await.topics[0].topic_id;
    produce(&mut client, "again", 1, batch(&["old"], None)).await;
    let partition = vec![FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_current_leader_epoch(-1)
        .with_partition_max_bytes(1 << 20)];
    let request = |session_id: i32, epoch: i32| {
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_session_id(session_id)
            .with_session_epoch(epoch)
    };
    let r = client
        .call(
            17,
            &request(0, 0).with_topics(vec![FetchTopic::default()
                .with_topic_id(old)
                .with_partitions(partition)]),
        )
        .await;
    let session = r.session_id;
    assert!(session > 0);
    let p = &r.responses[0].partitions[0];
    assert_eq!(decode_records(p.records.as_ref().unwrap()).len(), 1);

    // Deleted and created again with one record at offset 0: the session still holds offset 0
    // of the old topic id, and an incremental fetch naming nothing must not read the new topic.
    let deleted = client
        .call(
            5,
            &DeleteTopicsRequest::default().with_topic_names(vec![name("again")]),
        )
        .await;
    assert_eq!(deleted.responses[0].error_code, 0);
    let new = create_topic(&mut client, "again", 1, &[]).await.topics[0].topic_id;
    assert_ne!(new, old);
    assert_eq!(
        produce(&mut client, "again", 1, batch(&["new"], None)).await,
        (0, 0)
    );
    let r = client.call(17, &request(session, 1)).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses.len(), 1, "{:?}", r.responses);
    assert_eq!(r.responses[0].topic_id, old);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 103, "INCONSISTENT_TOPIC_ID");
    assert!(decode_records(p.records.as_ref().unwrap()).is_empty());

    // Deleted for good: the old id is unknown.
    client
        .call(
            5,
            &DeleteTopicsRequest::default().with_topic_names(vec![name("again")]),
        )
        .await;
    let r = client.call(17, &request(session, 2)).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code, 100,
        "UNKNOWN_TOPIC_ID"
    );
    broker.shutdown().await.unwrap();
}

/// `batch` with its header changed by `edit` and the CRC computed again.
fn patched(batch: Bytes, edit: impl FnOnce(&mut [u8])) -> Bytes {
    let mut v = batch.to_vec();
    edit(&mut v);
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(v)
}

/// Sets a one-record batch's first and largest timestamps.
fn at_timestamp(v: &mut [u8], timestamp: i64) {
    v[27..35].copy_from_slice(&timestamp.to_be_bytes());
    v[35..43].copy_from_slice(&timestamp.to_be_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_refuses_what_kafkas_log_validator_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "valid", 1, &[]).await;
    let before = [("message.timestamp.before.max.ms", "60000")];
    create_topic(&mut client, "valid-old", 1, &before).await;
    let append_time = [("message.timestamp.type", "LogAppendTime")];
    create_topic(&mut client, "valid-lat", 1, &append_time).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let hour = 3_600_000;
    let one = || batch(&["x"], None);
    let timed = |ts: i64| patched(one(), |v| at_timestamp(v, ts));

    // message.timestamp.after.max.ms, 1 h by default: 2 h ahead is refused, 10 min is not.
    assert_eq!(
        produce(&mut client, "valid", 1, timed(now + 2 * hour)).await,
        (32, -1),
        "INVALID_TIMESTAMP"
    );
    assert_eq!(
        produce(&mut client, "valid", 1, timed(now + hour / 6)).await,
        (0, 0)
    );
    // Every record's timestamp is checked: here the header's first and largest are in range,
    // the second record is two hours old.
    let spec = kafkaiq_storage::batch::builder::Spec {
        base_timestamp: now,
        ..Default::default()
    };
    let hidden = kafkaiq_storage::batch::builder::batch_with_timestamp_deltas(
        &spec,
        &[b"a", b"b"],
        &[0, -2 * hour],
    );
    assert_eq!(
        produce(&mut client, "valid-old", 1, Bytes::from(hidden)).await,
        (32, -1)
    );
    // message.timestamp.before.max.ms: 10 min old is refused with a 1 min bound; -1 is exempt.
    assert_eq!(
        produce(&mut client, "valid-old", 1, timed(now - hour / 6)).await,
        (32, -1)
    );
    assert_eq!(
        produce(&mut client, "valid-old", 1, timed(-1)).await,
        (0, 0)
    );
    // A producer that sets LogAppendTime itself, on a LogAppendTime topic.
    let log_append_time = patched(one(), |v| v[22] |= 0x08);
    assert_eq!(
        produce(&mut client, "valid-lat", 1, log_append_time).await,
        (32, -1)
    );
    // A control batch, and a producer id with a negative base sequence: INVALID_RECORD.
    let control = patched(one(), |v| v[22] |= 0x20);
    assert_eq!(produce(&mut client, "valid", 1, control).await, (87, -1));
    let no_sequence = patched(batch(&["x"], Some((7, 0, 0))), |v| {
        v[53..57].copy_from_slice(&(-1i32).to_be_bytes())
    });
    assert_eq!(
        produce(&mut client, "valid", 1, no_sequence).await,
        (87, -1)
    );

    // Nothing refused was stored.
    let r = client.call(12, &fetch_request("valid", 0, -1, 0)).await;
    assert_eq!(r.responses[0].partitions[0].high_watermark, 1);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_and_idle_connections_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(
        dir.path(),
        &["max.connections=2", "connections.max.idle.ms=400"],
    )
    .await;
    let mut a = RawClient::connect(broker.local_addr).await;
    let mut b = RawClient::connect(broker.local_addr).await;
    assert_eq!(
        a.call(3, &crate::common::api_versions_request())
            .await
            .error_code,
        0
    );
    assert_eq!(
        b.call(3, &crate::common::api_versions_request())
            .await
            .error_code,
        0
    );
    // A third connection is over max.connections: closed at once.
    let mut c = RawClient::connect(broker.local_addr).await;
    assert!(c.is_closed().await);
    // Idle connections are closed after connections.max.idle.ms...
    let start = Instant::now();
    assert!(a.is_closed().await);
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert!(b.is_closed().await);
    // ...which frees their slots: a new connection is served once the broker has counted the
    // closed ones out (the client may see their close first).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut d = RawClient::connect(broker.local_addr).await;
        let (id, frame) = d.encode(3, &crate::common::api_versions_request());
        d.send_bytes(&frame).await;
        if let Some(response) = d.read_frame().await {
            let r = RawClient::decode_response::<ApiVersionsRequest>(3, response, id);
            assert_eq!(r.error_code, 0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no slot freed after the idle closes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_v13_and_fetch_v17_address_topics_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let created = create_topic(&mut client, "by-id", 1, &[]).await;
    let id = created.topics[0].topic_id;
    let unknown = uuid::Uuid::from_u128(0xdead_beef);

    let produce_by_id = |topic_id: uuid::Uuid| {
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_topic_id(topic_id)
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(&["x", "y"], None)))])])
    };
    let r = client.call(13, &produce_by_id(id)).await;
    assert_eq!(r.responses[0].topic_id, id);
    let p = &r.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0));
    let r = client.call(13, &produce_by_id(unknown)).await;
    assert_eq!(
        r.responses[0].partition_responses[0].error_code, 100,
        "UNKNOWN_TOPIC_ID"
    );

    let fetch_by_id = |topic_id: uuid::Uuid| {
        FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_current_leader_epoch(0)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let r = client.call(17, &fetch_by_id(id)).await;
    assert_eq!(r.responses[0].topic_id, id);
    let p = &r.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(
        decode_records(p.records.as_ref().unwrap()),
        vec![(0, "x".to_string()), (1, "y".to_string())]
    );
    let r = client.call(17, &fetch_by_id(unknown)).await;
    assert_eq!(r.responses[0].topic_id, unknown);
    assert_eq!(
        r.responses[0].partitions[0].error_code, 100,
        "UNKNOWN_TOPIC_ID"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_survives_restart_and_old_epochs_are_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "idem2", 1, &[]).await;
    let pid = client
        .call(
            4,
            &InitProducerIdRequest::default().with_transactional_id(None),
        )
        .await
        .producer_id
        .0;
    assert_eq!(
        produce(&mut client, "idem2", -1, batch(&["a"], Some((pid, 1, 0)))).await,
        (0, 0)
    );
    let last = batch(&["b"], Some((pid, 1, 1)));
    assert_eq!(
        produce(&mut client, "idem2", -1, last.clone()).await,
        (0, 1)
    );
    drop(client);
    broker.shutdown().await.unwrap();

    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    // A retry of the producer's last batch after the restart is still recognised as a
    // duplicate (like Kafka, the snapshot keeps the last batch of each producer).
    assert_eq!(produce(&mut client, "idem2", -1, last).await, (0, 1));
    // The next sequence continues.
    assert_eq!(
        produce(&mut client, "idem2", -1, batch(&["c"], Some((pid, 1, 2)))).await,
        (0, 2)
    );
    // An older producer epoch is fenced.
    assert_eq!(
        produce(&mut client, "idem2", -1, batch(&["z"], Some((pid, 0, 0))))
            .await
            .0,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_apis_configs_partitions_records_and_deletion() {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };

    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["log.retention.hours=1"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let s = |v: &str| StrBytes::from_string(v.to_string());

    // CreateTopics: validate_only creates nothing; replication factor beyond live brokers.
    let r = client
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_validate_only(true)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name("adm"))
                    .with_num_partitions(2)
                    .with_replication_factor(1)]),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(r.topics[0].num_partitions, 2);
    let md = client.call(12, &metadata_request("adm")).await;
    assert_eq!(md.topics[0].error_code, 3);
    let r = client
        .call(
            7,
            &CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(name("adm"))
                .with_num_partitions(1)
                .with_replication_factor(3)]),
        )
        .await;
    assert_eq!(r.topics[0].error_code, 38, "INVALID_REPLICATION_FACTOR");
    let r = create_topic(&mut client, "adm", 1, &[("retention.ms", "5000")]).await;
    assert_eq!(r.topics[0].error_code, 0);
    let r = create_topic(&mut client, "adm", 1, &[]).await;
    assert_eq!(r.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");

    // DescribeConfigs: sources and synonyms.
    let describe = |rtype: i8, rname: &str| {
        DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(rtype)
                .with_resource_name(s(rname))
                .with_configuration_keys(Some(vec![
                    s("retention.ms"),
                    s("segment.bytes"),
                    s("log.retention.hours"),
                ]))])
    };
    let r = client.call(4, &describe(2, "adm")).await;
    let result = &r.results[0];
    assert_eq!(result.error_code, 0);
    let retention = result
        .configs
        .iter()
        .find(|c| c.name.as_str() == "retention.ms")
        .unwrap();
    assert_eq!(retention.value.as_deref(), Some("5000"));
    assert_eq!(retention.config_source, 1, "DYNAMIC_TOPIC_CONFIG");
    let synonyms: Vec<(&str, i8)> = retention
        .synonyms
        .iter()
        .map(|x| (x.name.as_str(), x.source))
        .collect();
    assert_eq!(synonyms[0], ("retention.ms", 1));
    assert!(
        synonyms.contains(&("log.retention.hours", 4)),
        "{synonyms:?}"
    );
    let segment = result
        .configs
        .iter()
        .find(|c| c.name.as_str() == "segment.bytes")
        .unwrap();
    assert_eq!(segment.value.as_deref(), Some("1073741824"));
    assert_eq!(segment.config_source, 5, "DEFAULT_CONFIG");
    let r = client.call(4, &describe(4, "1")).await;
    let hours = r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "log.retention.hours")
        .unwrap();
    assert_eq!(hours.value.as_deref(), Some("1"));
    assert_eq!(hours.config_source, 4, "STATIC_BROKER_CONFIG");
    // A dynamic broker config, as in Kafka: not read-only.
    assert!(!hours.read_only);
    let r = client.call(4, &describe(2, "nope")).await;
    assert_eq!(r.results[0].error_code, 3);

    // IncrementalAlterConfigs: SET, APPEND, invalid value, validate_only.
    let alter = |ops: Vec<(&str, i8, &str)>, validate_only: bool| {
        IncrementalAlterConfigsRequest::default()
            .with_validate_only(validate_only)
            .with_resources(vec![AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("adm"))
                .with_configs(
                    ops.into_iter()
                        .map(|(k, op, v)| {
                            AlterableConfig::default()
                                .with_name(s(k))
                                .with_config_operation(op)
                                .with_value(Some(s(v)))
                        })
                        .collect(),
                )])
    };
    let r = client
        .call(1, &alter(vec![("retention.ms", 0, "abc")], false))
        .await;
    assert_eq!(r.responses[0].error_code, 40, "INVALID_CONFIG");
    let r = client
        .call(1, &alter(vec![("retention.ms", 0, "7000")], true))
        .await;
    assert_eq!(r.responses[0].error_code, 0);
    let r = client
        .call(
            1,
            &alter(
                vec![
                    ("cleanup.policy", 2, "compact"),
                    ("max.message.bytes", 0, "2000"),
                ],
                false,
            ),
        )
        .await;
    assert_eq!(r.responses[0].error_code, 0);
    let r = client
        .call(4, &describe(2, "adm").with_include_synonyms(false))
        .await;
    let retention = r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "retention.ms")
        .unwrap();
    assert_eq!(
        retention.value.as_deref(),
        Some("5000"),
        "validate_only changed nothing"
    );
    // max.message.bytes applies to produce at once.
    let big = "q".repeat(3000);
    assert_eq!(
        produce(&mut client, "adm", 1, batch(&[big.as_str()], None))
            .await
            .0,
        10
    );

    // CreatePartitions.
    let grow = |count: i32| {
        CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(name("adm"))
            .with_count(count)
            .with_assignments(None)])
    };
    assert_eq!(
        client.call(3, &grow(1)).await.results[0].error_code,
        37,
        "INVALID_PARTITIONS"
    );
    assert_eq!(client.call(3, &grow(4)).await.results[0].error_code, 0);
    let md = client.call(12, &metadata_request("adm")).await;
    assert_eq!(md.topics[0].partitions.len(), 4);

    // DeleteRecords: moves the log start offset; beyond the high watermark is out of range.
    // "adm" is compacted now (cleanup.policy delete,compact): its records need keys.
    for i in 0..5 {
        let (code, _) = produce(
            &mut client,
            "adm",
            1,
            batch_keyed(&[&format!("r{i}")], None, true),
        )
        .await;
        assert_eq!(code, 0);
    }
    let delete_records = |offset: i64| {
        DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("adm"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])])
    };
    let r = client.call(2, &delete_records(3)).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 3));
    let r = client.call(2, &delete_records(99)).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 1);
    let r = client.call(12, &fetch_request("adm", 0, -1, 0)).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code, 1,
        "below the log start offset"
    );
    let r = client.call(12, &fetch_request("adm", 3, -1, 0)).await;
    assert_eq!(r.responses[0].partitions[0].log_start_offset, 3);

    // DescribeCluster.
    let r = client
        .call(
            2,
            &DescribeClusterRequest::default()
                .with_endpoint_type(1)
                .with_include_fenced_brokers(true),
        )
        .await;
    assert_eq!(r.error_code, 0);
    assert!(!r.brokers[0].is_fenced);
    assert_eq!(r.controller_id, BrokerId(1));
    assert_eq!(r.brokers.len(), 1);
    assert_eq!(r.brokers[0].port, i32::from(broker.local_addr.port()));

    // DeleteTopics by id (v6) and by name; the data directory goes away.
    let id = client.call(12, &metadata_request("adm")).await.topics[0].topic_id;
    let r = client
        .call(
            6,
            &DeleteTopicsRequest::default().with_topics(vec![DeleteTopicState::default()
                .with_topic_id(id)
                .with_name(Some(name("")))]),
        )
        .await;
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(
        r.responses[0].name.as_ref().map(|n| n.0.as_str()),
        Some("adm")
    );
    assert!(!dir.path().join("adm-0").exists());
    let r = client
        .call(
            5,
            &DeleteTopicsRequest::default().with_topic_names(vec![name("adm")]),
        )
        .await;
    assert_eq!(r.responses[0].error_code, 3);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_limits_return_whole_batches_and_at_least_one() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "lim", 2, &[]).await;
    let value = "v".repeat(1_000);
    for partition in 0..2 {
        for _ in 0..3 {
            let r = client
                .call(
                    9,
                    &produce_request("lim", partition, 1, batch(&[value.as_str()], None)),
                )
                .await;
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        }
    }
    let fetch = |max_bytes: i32, partition_max_bytes: i32| {
        let part = |p: i32| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(partition_max_bytes)
        };
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("lim"))
                .with_partitions(vec![part(0), part(1)])])
    };
    let counts = |r: &FetchResponse| -> Vec<usize> {
        r.responses[0]
            .partitions
            .iter()
            .map(|p| decode_records(p.records.as_ref().unwrap()).len())
            .collect()
    };
    // Generous limits: everything.
    assert_eq!(
        counts(&client.call(12, &fetch(1 << 20, 1 << 20)).await),
        vec![3, 3]
    );
    // Partition limit of 1.5 batches: one whole batch per partition.
    assert_eq!(
        counts(&client.call(12, &fetch(1 << 20, 1_500)).await),
        vec![1, 1]
    );
    // Tiny limits: the first batch of the first partition still comes back whole (KIP-74),
    // nothing else does.
    assert_eq!(counts(&client.call(12, &fetch(10, 10)).await), vec![1, 0]);
    // The response limit is shared across partitions.
    assert_eq!(
        counts(&client.call(12, &fetch(2_500, 1 << 20)).await),
        vec![2, 0]
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["log.retention.check.interval.ms=200"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let r = create_topic(
        &mut client,
        "ret",
        1,
        &[("segment.bytes", "300"), ("retention.ms", "1")],
    )
    .await;
    assert_eq!(r.topics[0].error_code, 0);
    let value = "w".repeat(200);
    for _ in 0..5 {
        produce(&mut client, "ret", 1, batch(&[value.as_str()], None)).await;
    }
    let earliest = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("ret"))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-2)])]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client.call(7, &earliest).await;
        let start = r.topics[0].partitions[0].offset;
        if start > 0 {
            // Whole expired segments go (the active one too, after a roll, as in Kafka), but
            // never past the high watermark.
            assert!(start <= 5, "log start offset {start}");
            break;
        }
        assert!(Instant::now() < deadline, "retention never ran");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leaders_answers_election_not_needed_on_one_node() {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "el", 2, &[]).await;
    let request = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(5_000)
        .with_topic_partitions(Some(vec![
            TopicPartitions::default()
                .with_topic(name("el"))
                .with_partitions(vec![0, 1, 7]),
            TopicPartitions::default()
                .with_topic(name("missing"))
                .with_partitions(vec![0]),
        ]));
    let r = client.call(2, &request).await;
    assert_eq!(r.error_code, 0);
    let codes: Vec<(String, i32, i16)> = r
        .replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(move |p| (t.topic.0.to_string(), p.partition_id, p.error_code))
        })
        .collect();
    assert_eq!(
        codes,
        vec![
            ("el".to_string(), 0, 84),
            ("el".to_string(), 1, 84),
            ("el".to_string(), 7, 3),
            ("missing".to_string(), 0, 3),
        ]
    );
    // The messages are Kafka's.
    let messages: Vec<Option<String>> = r
        .replica_election_results
        .iter()
        .flat_map(|t| t.partition_result.iter())
        .map(|p| p.error_message.as_ref().map(|m| m.to_string()))
        .collect();
    assert_eq!(
        messages,
        vec![
            Some("Leader election not needed for topic partition.".into()),
            Some("Leader election not needed for topic partition.".into()),
            Some("No such partition as el-7".into()),
            Some("No such topic as missing".into()),
        ]
    );
    // All partitions: every topic listed, as Kafka does, with no partition to report.
    let r = client
        .call(
            2,
            &ElectLeadersRequest::default().with_topic_partitions(None),
        )
        .await;
    let topics: Vec<String> = r
        .replica_election_results
        .iter()
        .map(|t| t.topic.0.to_string())
        .collect();
    assert!(topics.contains(&"el".to_string()), "{topics:?}");
    assert!(r
        .replica_election_results
        .iter()
        .all(|t| t.partition_result.is_empty()));
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_log_dirs_lists_partitions_with_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "ld", 2, &[]).await;
    produce(&mut client, "ld", 1, batch(&["payload"], None)).await;
    let r = client
        .call(4, &DescribeLogDirsRequest::default().with_topics(None))
        .await;
    assert_eq!(r.results.len(), 1);
    let d = &r.results[0];
    assert_eq!(d.error_code, 0);
    assert_eq!(d.log_dir.as_str(), dir.path().display().to_string());
    let t = d.topics.iter().find(|t| t.name.0.as_str() == "ld").unwrap();
    assert_eq!(t.partitions.len(), 2);
    assert!(t.partitions[0].partition_size > 0);
    assert_eq!(t.partitions[1].partition_size, 0);
    broker.shutdown().await.unwrap();
}

/// Kafka's `LogConfig.delete`: a log whose `cleanup.policy` lacks `delete` is never trimmed by
/// time or size retention, and DeleteRecords on it answers POLICY_VIOLATION.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_only_topics_skip_retention_and_refuse_delete_records() {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["log.retention.check.interval.ms=200"]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let value = "w".repeat(200);
    for (topic, policy) in [("del", "delete"), ("cmp", "compact")] {
        let configs = [
            ("segment.bytes", "300"),
            ("retention.ms", "1"),
            ("cleanup.policy", policy),
        ];
        let r = create_topic(&mut client, topic, 1, &configs).await;
        assert_eq!(r.topics[0].error_code, 0);
        for _ in 0..5 {
            let records = batch_keyed(&[value.as_str()], None, true);
            let (code, _) = produce(&mut client, topic, 1, records).await;
            assert_eq!(code, 0);
        }
    }
    let earliest = |topic: &str| {
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-2)])])
    };
    // Wait for retention to trim the delete topic, then for a later retention pass to trim
    // what is produced to it afterwards: passes run one after another over every log, so by
    // then a whole pass has gone over the compact topic too.
    let start_of = |r: ListOffsetsResponse| r.topics[0].partitions[0].offset;
    let deadline = Instant::now() + Duration::from_secs(20);
    let first_trim = loop {
        let start = start_of(client.call(7, &earliest("del")).await);
        if start > 0 {
            break start;
        }
        assert!(Instant::now() < deadline, "retention never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(first_trim <= 5, "log start offset {first_trim}");
    for _ in 0..5 {
        let (code, _) = produce(&mut client, "del", 1, batch(&[value.as_str()], None)).await;
        assert_eq!(code, 0);
    }
    while start_of(client.call(7, &earliest("del")).await) <= 5 {
        assert!(Instant::now() < deadline, "no second retention pass");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = client.call(7, &earliest("cmp")).await;
    assert_eq!(r.topics[0].partitions[0].offset, 0, "compact log trimmed");

    let delete_records = |topic: &str| {
        DeleteRecordsRequest::default().with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(2)])])
    };
    let r = client.call(2, &delete_records("cmp")).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.low_watermark),
        (44, -1),
        "POLICY_VIOLATION"
    );
    let r = client.call(2, &delete_records("del")).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
    broker.shutdown().await.unwrap();
}

/// `kafka-reassign-partitions --list` and `--verify`: no reassignment is ever in progress, and
/// clearing broker-level throttles (IncrementalAlterConfigs DELETE of keys never set) succeeds
/// as in Kafka; setting a throttle rate (a dynamic broker config) succeeds, setting a key that
/// cannot change at runtime is refused with INVALID_REQUEST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassignments_list_empty_and_broker_throttle_deletes_succeed() {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    assert_eq!(
        create_topic(&mut client, "ra", 2, &[]).await.topics[0].error_code,
        0
    );
    for topics in [
        None,
        Some(vec![ListPartitionReassignmentsTopics::default()
            .with_name(name("ra"))
            .with_partition_indexes(vec![0, 1])]),
    ] {
        let r = client
            .call(
                0,
                &ListPartitionReassignmentsRequest::default()
                    .with_timeout_ms(5_000)
                    .with_topics(topics),
            )
            .await;
        assert_eq!(r.error_code, 0);
        assert!(r.topics.is_empty());
    }
    let alter = |key: &'static str, op: i8| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str("1"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(StrBytes::from_static_str(key))
                    .with_config_operation(op)
                    .with_value(Some(StrBytes::from_static_str("100")))]),
        ])
    };
    let throttle = "leader.replication.throttled.rate";
    let r = client.call(1, &alter(throttle, 1)).await;
    assert_eq!(
        r.responses[0].error_code, 0,
        "DELETE of an unset broker config"
    );
    let r = client.call(1, &alter(throttle, 0)).await;
    assert_eq!(
        r.responses[0].error_code, 0,
        "SET of a dynamic broker config"
    );
    let r = client.call(1, &alter("num.io.threads", 0)).await;
    assert_eq!(r.responses[0].error_code, 42, "SET of a read-only key");
    broker.shutdown().await.unwrap();
}

/// IncrementalAlterConfigs on a topic as Kafka's controller does it: a DELETE of a key that has
/// no value (known or unknown) writes nothing and succeeds, and the throttled-replicas lists are
/// LIST-typed, so APPEND and SUBTRACT work on them (the reassignment tool sets them this way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_config_delete_of_unset_key_and_list_ops_on_throttled_replicas() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    assert_eq!(
        create_topic(&mut client, "lists", 2, &[]).await.topics[0].error_code,
        0
    );
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let alter = |key: &str, op: i8, value: Option<&str>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("lists"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s(key))
                    .with_config_operation(op)
                    .with_value(value.map(s))]),
        ])
    };
    for key in ["retention.ms", "no.such.topic.key"] {
        let r = client.call(1, &alter(key, 1, None)).await;
        assert_eq!(r.responses[0].error_code, 0, "DELETE of unset {key}");
    }
    let key = "leader.replication.throttled.replicas";
    for (op, value) in [(2, "0:1"), (2, "1:1,0:1"), (3, "0:1")] {
        let r = client.call(1, &alter(key, op, Some(value))).await;
        assert_eq!(r.responses[0].error_code, 0, "op {op} {value}");
    }
    let r = client
        .call(
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("lists"))
                    .with_configuration_keys(Some(vec![s(key)])),
            ]),
        )
        .await;
    assert_eq!(r.results[0].configs[0].value.as_deref(), Some("1:1"));
    // A malformed item is still refused after the list arithmetic.
    let r = client.call(1, &alter(key, 2, Some("x"))).await;
    assert_eq!(r.responses[0].error_code, 40, "INVALID_CONFIG");
    broker.shutdown().await.unwrap();
}

/// AlterPartitionReassignments on one node: the current replicas are accepted and change
/// nothing; Kafka's errors for unknown brokers, topics and partitions, a replica twice, and a
/// cancel with nothing in progress (no message, as Kafka sends it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_partition_reassignments_on_one_node() {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, BrokerId};
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "mv", 2, &[]).await;
    let part = |index: i32, replicas: Option<&[i32]>| {
        ReassignablePartition::default()
            .with_partition_index(index)
            .with_replicas(replicas.map(|r| r.iter().map(|&b| BrokerId(b)).collect()))
    };
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![
            ReassignableTopic::default()
                .with_name(name("mv"))
                .with_partitions(vec![
                    part(0, Some(&[1])),
                    part(1, Some(&[2])),
                    part(1, Some(&[1, 1])),
                    part(0, None),
                    part(5, Some(&[1])),
                ]),
            ReassignableTopic::default()
                .with_name(name("missing"))
                .with_partitions(vec![part(0, Some(&[1]))]),
        ]);
    for version in [0, 1] {
        let r = client
            .call(
                version,
                &request.clone().with_allow_replication_factor_change(true),
            )
            .await;
        assert_eq!(r.error_code, 0);
        let got: Vec<(String, i32, i16, Option<String>)> = r
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.error_code,
                        p.error_message.as_ref().map(|m| m.to_string()),
                    )
                })
            })
            .collect();
        let s = |m: &str| Some(m.to_owned());
        assert_eq!(
            got,
            vec![
                ("mv".into(), 0, 0, None),
                ("mv".into(), 1, 39, s("The manual partition assignment includes broker 2, but no such broker is registered.")),
                ("mv".into(), 1, 39, s("The manual partition assignment includes the broker 1 more than once.")),
                ("mv".into(), 0, 85, None),
                ("mv".into(), 5, 3, s("Unable to find partition mv:5.")),
                ("missing".into(), 0, 3, s("Unable to find a topic named missing.")),
            ],
            "v{version}"
        );
    }
    // v1 without replication factor changes: the same replica count is allowed, and echoed (a
    // different count needs a second registered broker; the decision's table tests it).
    let r = client
        .call(
            1,
            &AlterPartitionReassignmentsRequest::default()
                .with_allow_replication_factor_change(false)
                .with_topics(vec![ReassignableTopic::default()
                    .with_name(name("mv"))
                    .with_partitions(vec![part(0, Some(&[1]))])]),
        )
        .await;
    assert!(!r.allow_replication_factor_change);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    // Nothing is in progress afterwards.
    let r = client
        .call(
            0,
            &ListPartitionReassignmentsRequest::default().with_timeout_ms(5_000),
        )
        .await;
    assert!(r.topics.is_empty());
    broker.shutdown().await.unwrap();
}

/// DescribeConfigs v3+ carries a nullable documentation per entry; Kafka leaves it null unless
/// documentation is asked for (kafka-python shows it as None).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_configs_documentation_is_null() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    assert_eq!(
        create_topic(&mut client, "docs", 1, &[]).await.topics[0].error_code,
        0
    );
    for (resource_type, resource_name) in [(2, "docs"), (4, "1")] {
        let r = client
            .call(
                4,
                &DescribeConfigsRequest::default().with_resources(vec![
                    DescribeConfigsResource::default()
                        .with_resource_type(resource_type)
                        .with_resource_name(StrBytes::from_static_str(resource_name))
                        .with_configuration_keys(None),
                ]),
            )
            .await;
        assert_eq!(r.results[0].error_code, 0);
        assert!(!r.results[0].configs.is_empty());
        assert!(
            r.results[0]
                .configs
                .iter()
                .all(|c| c.documentation.is_none()),
            "resource type {resource_type}"
        );
    }
    broker.shutdown().await.unwrap();
}

/// Retention runs every `log.retention.check.interval.ms` (Kafka's default 5 minutes, first check
/// 30 s after start), not continuously: records past `retention.ms` stay readable until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_records_stay_until_the_retention_check() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let configs = [
        ("segment.bytes", "300"),
        ("retention.ms", "1"),
        ("flush.ms", "1"),
    ];
    assert_eq!(
        create_topic(&mut client, "keep", 1, &configs).await.topics[0].error_code,
        0
    );
    let value = "w".repeat(200);
    for _ in 0..5 {
        produce(&mut client, "keep", 1, batch(&[value.as_str()], None)).await;
    }
    // The periodic maintenance runs every second over every log: retention (when due), then
    // the time-based flush that flush.ms=1 makes due each time. A flush up to the log end
    // offset (rolls only move the recovery point to a segment's base) shows that a pass ran
    // after the records were written; had retention been due then, it would have run first.
    let log = broker
        .context
        .replicas
        .log_manager
        .get(&kafkaiq_storage::TopicPartition {
            topic: "keep".into(),
            partition: 0,
        })
        .expect("the log of keep-0");
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.recovery_point() < 5 {
        assert!(Instant::now() < deadline, "no periodic flush");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let earliest = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name("keep"))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_current_leader_epoch(-1)
                .with_timestamp(-2)])]);
    let r = client.call(7, &earliest).await;
    assert_eq!(
        r.topics[0].partitions[0].offset, 0,
        "retention ran before its interval"
    );
    broker.shutdown().await.unwrap();
}
