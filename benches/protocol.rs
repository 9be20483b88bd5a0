//! Micro-benchmarks of the wire codec: request decode and response encode, for the requests a
//! producer and a consumer send on their hot path (Produce, Fetch) and the ones every client sends
//! on connect (ApiVersions, Metadata).
//!
//! Frames are shaped like the Java client's: a Produce carries one 16 KiB batch (the default
//! `batch.size`) of 100-byte records, a Fetch answer carries up to 1 MiB of record batches (the
//! default `max.partition.fetch.bytes`). Not measured here: socket I/O, the log, batch validation.
//!
//! Run: `cargo bench --bench protocol` (add `-- --quick` for a short run).

mod common;

use bytes::Bytes;
use common::{
    record_batch, record_batches, request_frame, FETCH_PARTITION_BYTES, PRODUCER_BATCH_BYTES,
};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::{
    api_versions_response::ApiVersion,
    fetch_request::{FetchPartition, FetchTopic},
    fetch_response::{FetchableTopicResponse, PartitionData},
    metadata_request::MetadataRequestTopic,
    metadata_response::{MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic},
    produce_request::{PartitionProduceData, TopicProduceData},
    produce_response::{PartitionProduceResponse, TopicProduceResponse},
    ApiVersionsRequest, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use kafkaiq::protocol::{
    decode_request, encode_response, ApiKey, RequestKind, ResponseKind, StrBytes,
    SUPPORTED_API_KEYS,
};

// Versions a Kafka 4.1 Java client negotiates that still name topics (newer Produce and Fetch
// versions switch to topic ids, which the codec handles the same way).
const PRODUCE_VERSION: i16 = 11;
const FETCH_VERSION: i16 = 12;
const METADATA_VERSION: i16 = 12;
const API_VERSIONS_VERSION: i16 = 3;

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str("bench-topic"))
}

fn produce_request() -> RequestKind {
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(record_batch(
                        PRODUCER_BATCH_BYTES,
                        0,
                        Some((1000, 0, 0)),
                    )))])]),
    )
}

fn fetch_request() -> RequestKind {
    RequestKind::Fetch(
        FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(50 * 1024 * 1024)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(0)
                    .with_fetch_offset(123_456)
                    .with_partition_max_bytes(FETCH_PARTITION_BYTES as i32)])]),
    )
}

fn metadata_request() -> RequestKind {
    RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic())),
    ])))
}

fn api_versions_response() -> ResponseKind {
    let api_keys = SUPPORTED_API_KEYS
        .iter()
        .map(|key| {
            let range = key.valid_versions();
            ApiVersion::default()
                .with_api_key(*key as i16)
                .with_min_version(range.min)
                .with_max_version(range.max)
        })
        .collect();
    ResponseKind::ApiVersions(ApiVersionsResponse::default().with_api_keys(api_keys))
}

fn produce_response() -> ResponseKind {
    ResponseKind::Produce(ProduceResponse::default().with_responses(vec![
        TopicProduceResponse::default()
            .with_name(topic())
            .with_partition_responses(vec![PartitionProduceResponse::default()
                .with_index(0)
                .with_base_offset(123_456)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(0)]),
    ]))
}

fn fetch_response(records: Bytes) -> ResponseKind {
    ResponseKind::Fetch(FetchResponse::default().with_responses(
        vec![FetchableTopicResponse::default()
            .with_topic(topic())
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_high_watermark(1_000_000)
                .with_last_stable_offset(1_000_000)
                .with_log_start_offset(0)
                .with_records(Some(records))])],
    ))
}

fn metadata_response() -> ResponseKind {
    ResponseKind::Metadata(
        MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9092)])
            .with_cluster_id(Some(StrBytes::from_static_str("MkU3OEVBNTcwNTJENDM2Qk")))
            .with_controller_id(BrokerId(1))
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(topic()))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_partition_index(0)
                    .with_leader_id(BrokerId(1))
                    .with_leader_epoch(0)
                    .with_replica_nodes(vec![BrokerId(1)])
                    .with_isr_nodes(vec![BrokerId(1)])])]),
    )
}

fn bench_decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_request");
    let cases = [
        (
            "produce_v11_16KiB",
            ApiKey::Produce,
            PRODUCE_VERSION,
            produce_request(),
        ),
        ("fetch_v12", ApiKey::Fetch, FETCH_VERSION, fetch_request()),
        (
            "metadata_v12",
            ApiKey::Metadata,
            METADATA_VERSION,
            metadata_request(),
        ),
        (
            "api_versions_v3",
            ApiKey::ApiVersions,
            API_VERSIONS_VERSION,
            RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("apache-kafka-java"))
                    .with_client_software_version(StrBytes::from_static_str("4.1.1")),
            ),
        ),
    ];
    for (name, api_key, version, body) in cases {
        let frame = request_frame(api_key, version, 42, &body);
        // The decoded body must round-trip, or the benchmark measures an error path.
        assert_eq!(decode_request(frame.clone()).expect("decodes").body, body);
        group.throughput(Throughput::Bytes(frame.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| decode_request(black_box(frame.clone())).expect("decodes"))
        });
    }
    group.finish();
}

fn bench_encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode_response");
    let cases = [
        (
            "produce_v11",
            ApiKey::Produce,
            PRODUCE_VERSION,
            produce_response(),
        ),
        (
            "fetch_v12_1MiB",
            ApiKey::Fetch,
            FETCH_VERSION,
            fetch_response(record_batches(FETCH_PARTITION_BYTES)),
        ),
        (
            "metadata_v12",
            ApiKey::Metadata,
            METADATA_VERSION,
            metadata_response(),
        ),
        (
            "api_versions_v3",
            ApiKey::ApiVersions,
            API_VERSIONS_VERSION,
            api_versions_response(),
        ),
    ];
    for (name, api_key, version, body) in cases {
        let len = encode_response(api_key, version, 42, &body)
            .expect("encodes")
            .len();
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(name, |b| {
            b.iter(|| encode_response(api_key, version, 42, black_box(&body)).expect("encodes"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decode, bench_encode);
criterion_main!(benches);
