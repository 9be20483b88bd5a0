//! A small blocking Kafka client for what the driver asks a node directly: Metadata (leaders,
//! replicas, ISRs as one node sees them), DescribeQuorum (the active controller) and
//! CreateTopics. One connection per call: a node that is paused or cut off costs one timeout,
//! never a stuck connection.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, DescribeQuorumRequest, MetadataRequest, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

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
