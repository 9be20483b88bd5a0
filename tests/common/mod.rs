//! Shared helpers for broker tests: an in-process broker on 127.0.0.1:0 whose task panics fail
//! the test, a raw-frame client that speaks the Kafka wire protocol with `kafka-protocol` types,
//! so tests assert on exact response fields, and ([`broker_process`]) broker child processes
//! whose panics, failed exits and shutdown hangs fail the test.

#![allow(dead_code)]

pub mod broker_process;
pub mod cluster;
pub mod franz_members;
pub mod group_members;
pub mod http;
pub mod panics;

use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafkaiq::config::{BrokerConfig, RawConfig};
use kafkaiq::node::Node;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts a broker on an ephemeral port with data in `dir`, plus extra `key=value` overrides.
pub async fn start_broker(dir: &Path, extra: &[&str]) -> TestBroker {
    panics::install();
    let mark = panics::mark();
    let mut raw = RawConfig::default();
    raw.set("listeners", "PLAINTEXT://127.0.0.1:0");
    raw.set("log.dirs", dir.to_str().unwrap());
    // Tests run in parallel: no fixed HTTP port unless a test asks for one.
    raw.set("http.listener", "none");
    for kv in extra {
        raw.apply_override(kv).unwrap();
    }
    let config = BrokerConfig::from_raw(raw).unwrap().config;
    TestBroker {
        node: Some(Node::start(config).await.unwrap()),
        mark,
        owner: panics::current_thread_name(),
    }
}

/// An in-process broker (a [`Node`], which it derefs to) whose shutdown fails the test if any
/// task that could be the broker's panicked since it started (see [`panics`]).
pub struct TestBroker {
    node: Option<Node>,
    mark: u64,
    owner: Option<String>,
}

impl Deref for TestBroker {
    type Target = Node;

    fn deref(&self) -> &Node {
        self.node.as_ref().expect("broker already shut down")
    }
}

impl TestBroker {
    /// `Node::shutdown`, then panics if a broker task panicked while it ran.
    pub async fn shutdown(mut self) -> Result<(), kafkaiq::node::ShutdownError> {
        let node = self.node.take().expect("broker already shut down");
        let result = node.shutdown().await;
        if let Err(e) = self.check_panics() {
            panic!("{e}");
        }
        result
    }

    /// Err listing the panics since the broker started (or since the last call), if any.
    pub fn check_panics(&mut self) -> Result<(), String> {
        let found = panics::since(self.mark, self.owner.as_deref());
        if let Some(last) = found.last() {
            self.mark = last.seq;
        }
        if found.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = found.iter().map(|p| format!("  {p}")).collect();
        Err(format!(
            "{} panic(s) in the in-process broker's tasks while it ran:\n{}",
            found.len(),
            list.join("\n")
        ))
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        // A broker the test did not shut down (it failed, or it drops the node on purpose).
        if self.node.is_some() && !std::thread::panicking() {
            if let Err(e) = self.check_panics() {
                panic!("{e}");
            }
        }
    }
}

pub struct RawClient {
    pub stream: TcpStream,
    correlation: AtomicI32,
}

impl RawClient {
    /// Connects within a second, or `None` (a node that is down).
    pub async fn try_connect(addr: std::net::SocketAddr) -> Option<RawClient> {
        let stream =
            tokio::time::timeout(std::time::Duration::from_secs(1), TcpStream::connect(addr))
                .await
                .ok()?
                .ok()?;
        Some(RawClient {
            stream,
            correlation: AtomicI32::new(1),
        })
    }

    /// [`RawClient::call`] within `timeout`, or `None` (the node died or did not answer).
    pub async fn try_call<R: Request>(
        &mut self,
        version: i16,
        request: &R,
        timeout: std::time::Duration,
    ) -> Option<R::Response> {
        let (correlation_id, frame) = self.encode(version, request);
        tokio::time::timeout(timeout, async {
            self.stream.write_all(&frame).await.ok()?;
            let response = self.read_frame().await?;
            Some(Self::decode_response::<R>(
                version,
                response,
                correlation_id,
            ))
        })
        .await
        .ok()
        .flatten()
    }

    pub async fn connect(addr: std::net::SocketAddr) -> RawClient {
        RawClient {
            stream: TcpStream::connect(addr).await.unwrap(),
            correlation: AtomicI32::new(1),
        }
    }

    /// Encodes a request frame (size prefix included).
    pub fn encode<R: Request>(&self, version: i16, request: &R) -> (i32, Bytes) {
        let correlation_id = self.correlation.fetch_add(1, Ordering::SeqCst);
        let api_key = ApiKey::try_from(R::KEY).unwrap();
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("raw-test")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, api_key.request_header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        (correlation_id, frame.freeze())
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads one response frame body, or None if the broker closed the connection.
    pub async fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        if self.stream.read_exact(&mut size).await.is_err() {
            return None;
        }
        let size = i32::from_be_bytes(size) as usize;
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).await.ok()?;
        Some(Bytes::from(body))
    }

    pub fn decode_response<R: Request>(
        version: i16,
        mut frame: Bytes,
        expected_correlation_id: i32,
    ) -> R::Response {
        let api_key = ApiKey::try_from(R::KEY).unwrap();
        let header_version = if api_key == ApiKey::ApiVersions {
            0
        } else {
            <R::Response as HeaderVersion>::header_version(version)
        };
        let header = ResponseHeader::decode(&mut frame, header_version).unwrap();
        assert_eq!(header.correlation_id, expected_correlation_id);
        let response = R::Response::decode(&mut frame, version).unwrap();
        assert!(
            !frame.has_remaining(),
            "{} trailing bytes after the response body",
            frame.remaining()
        );
        response
    }

    /// Sends a request and decodes its response.
    pub async fn call<R: Request>(&mut self, version: i16, request: &R) -> R::Response {
        let (correlation_id, frame) = self.encode(version, request);
        self.send_bytes(&frame).await;
        let response = self
            .read_frame()
            .await
            .expect("broker closed the connection");
        Self::decode_response::<R>(version, response, correlation_id)
    }

    /// True if the broker closed the connection (reads end of stream).
    pub async fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                self.stream.read(&mut byte)
            )
            .await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// One row of `/proc/net/tcp` / `/proc/net/tcp6`: a socket of this network namespace.
struct TcpRow {
    local_port: Option<u16>,
    remote_port: Option<u16>,
    /// The kernel's TCP state: 1 is ESTABLISHED.
    state: u8,
    send_queue: u64,
    receive_queue: u64,
}

fn tcp_rows() -> Vec<TcpRow> {
    let mut rows = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 {
                continue;
            }
            let port = |a: &str| {
                a.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            let (tx, rx) = f[4].split_once(':').unwrap_or(("", ""));
            let queued = |q: &str| u64::from_str_radix(q, 16).unwrap_or(u64::MAX);
            rows.push(TcpRow {
                local_port: port(f[1]),
                remote_port: port(f[2]),
                state: u8::from_str_radix(f[3], 16).unwrap_or(0),
                send_queue: queued(tx),
                receive_queue: queued(rx),
            });
        }
    }
    rows
}

/// An ApiVersions request as clients send it: from version 3 it names the client software,
/// which Kafka requires to be valid (an empty name is answered INVALID_REQUEST).
pub fn api_versions_request() -> kafka_protocol::messages::ApiVersionsRequest {
    kafka_protocol::messages::ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("kafkaiq-tests"))
        .with_client_software_version(StrBytes::from_static_str("1.0"))
}

/// Whether the socket on `local_port` connected to `remote_port` (both in this process's
/// network namespace) is still ESTABLISHED; false once its owner closed it (gone, or closing).
pub fn tcp_established(local_port: u16, remote_port: u16) -> bool {
    tcp_rows().iter().any(|r| {
        r.local_port == Some(local_port) && r.remote_port == Some(remote_port) && r.state == 1
    })
}

/// Waits until the broker has read everything the client on local port `client_port` sent to
/// the broker on `broker_port`: the kernel's queues of both ends of the connection, both in
/// this process's network namespace (`/proc/net/tcp`), are empty. With an in-process broker,
/// "read off its socket" is as close as a test can get to "received" without a hook in the
/// broker; a request still in the kernel's buffers may not have been seen at all.
pub async fn wait_until_read_by_broker(client_port: u16, broker_port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows = tcp_rows();
        let client_end = rows
            .iter()
            .find(|r| r.local_port == Some(client_port) && r.remote_port == Some(broker_port))
            .map(|r| r.send_queue);
        let broker_end = rows
            .iter()
            .find(|r| r.local_port == Some(broker_port) && r.remote_port == Some(client_port))
            .map(|r| r.receive_queue);
        assert!(
            client_end.is_some() && broker_end.is_some(),
            "no connection 127.0.0.1:{client_port} <-> :{broker_port} in /proc/net/tcp"
        );
        if client_end == Some(0) && broker_end == Some(0) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the broker did not read the request (client send queue {client_end:?}, broker receive queue {broker_end:?})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// An uncompressed v2 batch of `values` (optionally idempotent), records without keys.
/// A Produce of `records` to `topic`-`partition`, the topic addressed by name (Produce v12 and
/// older), with `acks` and a 10 s timeout.
pub fn produce_by_name(
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                topic.to_owned(),
            )))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])])
}

/// CreateTopics (30 s timeout) of `topic` with one partition on exactly `replicas`, the first
/// preferred.
pub fn create_assigned_request(
    topic: &str,
    replicas: &[i32],
) -> kafka_protocol::messages::CreateTopicsRequest {
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic,
    };
    use kafka_protocol::messages::{BrokerId, CreateTopicsRequest, TopicName};
    CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(
                    replicas.iter().map(|&b| BrokerId(b)).collect(),
                )])])
}

pub fn batch(values: &[&str], producer: Option<(i64, i16, i32)>) -> Bytes {
    batch_keyed(values, producer, false)
}

/// As [`batch`]; with `keyed`, record i has key `k{i}`, as a compacted topic requires.
pub fn batch_keyed(values: &[&str], producer: Option<(i64, i16, i32)>, keyed: bool) -> Bytes {
    batch_of(values, producer, keyed, false)
}

/// A batch of a transaction of `producer` (id, epoch, base sequence).
pub fn batch_transactional(values: &[&str], producer: (i64, i16, i32)) -> Bytes {
    batch_of(values, Some(producer), false, true)
}

fn batch_of(
    values: &[&str],
    producer: Option<(i64, i16, i32)>,
    keyed: bool,
    transactional: bool,
) -> Bytes {
    let (producer_id, producer_epoch, base_sequence) = producer.unwrap_or((-1, -1, -1));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // kafka-protocol groups records into one batch while `offset - sequence` stays
            // constant; non-idempotent batches get their base sequence reset to -1 below.
            sequence: base_sequence.max(0) + i as i32,
            timestamp: now + i as i64,
            key: keyed.then(|| Bytes::from(format!("k{i}"))),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    if base_sequence < 0 {
        // Base sequence (bytes 53..57) is covered by the CRC (from the attributes at byte 21).
        buf[53..57].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = crc32c::crc32c(&buf[21..]);
        buf[17..21].copy_from_slice(&crc.to_be_bytes());
    }
    buf.freeze()
}

/// (offset, value) of every record in a fetched record set.
pub fn decode_records(records: &Bytes) -> Vec<(i64, String)> {
    let mut buf = records.clone();
    let mut out = Vec::new();
    for set in RecordBatchDecoder::decode_all(&mut buf).unwrap() {
        for r in set.records {
            out.push((
                r.offset,
                String::from_utf8(r.value.map(|v| v.to_vec()).unwrap_or_default()).unwrap(),
            ));
        }
    }
    out
}
