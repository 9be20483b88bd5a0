//! A small blocking Kafka client for what the driver asks a node directly: Metadata (leaders,
//! replicas, ISRs as one node sees them), DescribeQuorum (the active controller), CreateTopics
//! and DeleteTopics, ElectLeaders, and a plain Produce and Fetch of one partition for the
//! re-created topic's check. One connection per call: a node that is paused or cut off costs one timeout,
//! never a stuck connection.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, DeleteTopicsRequest, DescribeQuorumRequest,
    ElectLeadersRequest, FetchRequest, MetadataRequest, ProduceRequest, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A response frame larger than this is refused (Metadata of a small test cluster is a few KiB).
const RESPONSE_BYTES_MAX: usize = 16 << 20;

/// One partition as a node's Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// -1 while the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

fn call<R: Request>(
    addr: SocketAddr,
    version: i16,
    request: &R,
    timeout: Duration,
) -> Option<R::Response> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let api_key = ApiKey::try_from(R::KEY).ok()?;
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("faults-driver")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api_key.request_header_version(version))
        .ok()?;
    request.encode(&mut body, version).ok()?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    stream.write_all(&frame).ok()?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > RESPONSE_BYTES_MAX {
        return None;
    }
    let mut body = vec![0u8; size as usize];
    stream.read_exact(&mut body).ok()?;
    let mut body = Bytes::from(body);
    let header = ResponseHeader::decode(&mut body, R::Response::header_version(version)).ok()?;
    if header.correlation_id != 1 {
        return None;
    }
    let response = R::Response::decode(&mut body, version).ok()?;
    (!body.has_remaining()).then_some(response)
}

/// The partitions of `topic` as the node at `addr` shows them, or `None` (no answer, or it does
/// not know the topic).
pub fn partitions(
    addr: SocketAddr,
    topic: &str,
    timeout: Duration,
) -> Option<BTreeMap<i32, PartitionState>> {
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_owned())),
        ))]))
        .with_allow_auto_topic_creation(false);
    let m = call(addr, 12, &request, timeout)?;
    let t = m.topics.first().filter(|t| t.error_code == 0)?;
    Some(
        t.partitions
            .iter()
            .map(|p| {
                let leaderless = p.error_code != 0 && p.leader_id.0 < 0;
                (
                    p.partition_index,
                    PartitionState {
                        leader: if leaderless { -1 } else { p.leader_id.0 },
                        leader_epoch: p.leader_epoch,
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    },
                )
            })
            .collect(),
    )
}

/// The brokers the node at `addr` lists in Metadata (the unfenced ones).
pub fn brokers(addr: SocketAddr, timeout: Duration) -> Option<Vec<i32>> {
    let request = MetadataRequest::default()
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(false);
    let m = call(addr, 12, &request, timeout)?;
    let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    Some(ids)
}

/// The metadata quorum's leader (the active controller) as the node at `addr` reports it
/// through DescribeQuorum on its client listener.
pub fn quorum_leader(addr: SocketAddr, timeout: Duration) -> Option<i32> {
    let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let q = call(addr, 2, &request, timeout)?;
    let p = q.topics.into_iter().next()?.partitions.into_iter().next()?;
    (p.error_code == 0 && p.leader_id.0 >= 0).then_some(p.leader_id.0)
}

/// CreateTopics (v7) through the node at `addr`: the topic's error code, or `None`.
pub fn create_topic(
    addr: SocketAddr,
    name: &str,
    partitions: i32,
    replication: i16,
    configs: &[(&str, &str)],
) -> Option<i16> {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
            .with_num_partitions(partitions)
            .with_replication_factor(replication)
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
    let r = call(addr, 7, &request, Duration::from_secs(10))?;
    Some(r.topics.first()?.error_code)
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// CreateTopics (v7) of a one-partition topic on the given replicas, the first preferred.
pub fn create_assigned(addr: SocketAddr, topic: &str, replicas: &[i32]) -> Option<i16> {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(
                    replicas.iter().map(|r| BrokerId(*r)).collect(),
                )])]);
    let r = call(addr, 7, &request, Duration::from_secs(35))?;
    Some(r.topics.first()?.error_code)
}

/// DeleteTopics (v5) of one topic by name: its error code, or `None`.
pub fn delete_topic(addr: SocketAddr, topic: &str) -> Option<i16> {
    let request = DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topic_names(vec![name(topic)]);
    let r = call(addr, 5, &request, Duration::from_secs(35))?;
    Some(r.responses.first()?.error_code)
}

/// ElectLeaders (v2, preferred) for partition 0 of `topic`: the partition's error code.
pub fn elect_preferred(addr: SocketAddr, topic: &str) -> Option<i16> {
    let request = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(10_000)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(name(topic))
            .with_partitions(vec![0])]));
    let r = call(addr, 2, &request, Duration::from_secs(15))?;
    if r.error_code != 0 {
        return Some(r.error_code);
    }
    Some(
        r.replica_election_results
            .first()?
            .partition_result
            .first()?
            .error_code,
    )
}

/// One plain (not idempotent) batch of `values`.
fn batch(values: &[String]) -> Bytes {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: now,
            key: None,
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("a plain batch encodes");
    // A batch without a producer carries base sequence -1 (bytes 53..57), under the CRC that
    // covers everything from the attributes (byte 21) on.
    buf[53..57].copy_from_slice(&(-1i32).to_be_bytes());
    let crc = crc32c::crc32c(&buf[21..]);
    buf[17..21].copy_from_slice(&crc.to_be_bytes());
    buf.freeze()
}

/// An acks=all Produce (v9) of `values` to partition 0 of `topic` at its leader `addr`:
/// (error code, base offset).
pub fn produce(addr: SocketAddr, topic: &str, values: &[String]) -> Option<(i16, i64)> {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(values)))])]);
    let r = call(addr, 9, &request, Duration::from_secs(15))?;
    let p = r.responses.first()?.partition_responses.first()?;
    Some((p.error_code, p.base_offset))
}

/// Every record (offset, value) of partition 0 of `topic` from offset 0 to the high watermark,
/// read from its leader `addr` with Fetch v12; `Err(code)` if the leader answers an error.
pub fn read_all(addr: SocketAddr, topic: &str) -> Option<Result<Vec<(i64, String)>, i16>> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_partition_max_bytes(1 << 20)])]);
        let r = call(addr, 12, &request, Duration::from_secs(10))?;
        let p = r.responses.first()?.partitions.first()?;
        if p.error_code != 0 {
            return Some(Err(p.error_code));
        }
        let mut records = p.records.clone().unwrap_or_default();
        let mut fetched = 0;
        while records.has_remaining() {
            let set = RecordBatchDecoder::decode(&mut records).ok()?;
            for r in set.records {
                let value = r.value.map(|v| v.to_vec()).unwrap_or_default();
                out.push((r.offset, String::from_utf8_lossy(&value).into_owned()));
                offset = r.offset + 1;
                fetched += 1;
            }
        }
        if fetched == 0 || offset >= p.high_watermark {
            return Some(Ok(out));
        }
    }
}
