//! A node that restarts never answers as if a partition were empty while it loads: from the
//! first connection it accepts, every ListOffsets, Fetch and Metadata answer about a partition
//! is either the truth (its records and its log end) or one of Kafka's retriable errors. A
//! consumer that saw an empty partition there would reset its position or re-read.
//!
//! The node is killed with SIGKILL, so the restart recovers every log; many partitions make the
//! load take long enough that probes sent from the first moment land in it.

use crate::common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::broker_process::{free_port, kafkaiq_command, BrokerProcess};
use common::{batch, decode_records, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "loaded";
const PARTITIONS: i32 = 1_000;
/// Records in every partition.
const RECORDS: i64 = 3;
/// How long the restarted node may take until every partition has been answered truly.
const LOADED_WITHIN: Duration = Duration::from_secs(120);
/// Kafka's retriable answers for a partition that is not served yet: UNKNOWN_TOPIC_OR_PARTITION,
/// LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE.
const NOT_YET: [i16; 4] = [3, 5, 6, 78];

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// The node, with at most `descriptors` open files if given (set in the child before exec,
/// so the startup raise cannot lift it): fewer than the partitions' logs.
fn spawn_broker(dir: &Path, port: u16, log_name: &str, descriptors: Option<u64>) -> BrokerProcess {
    let mut cmd = kafkaiq_command(port, &dir.join("data"), &[]);
    if let Some(limit) = descriptors {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    BrokerProcess::spawn("kafkaiq", cmd, &dir.join(log_name))
}

async fn connect(addr: SocketAddr) -> RawClient {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(client) = RawClient::try_connect(addr).await {
            return client;
        }
        assert!(Instant::now() < deadline, "broker did not start listening");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn fill(client: &mut RawClient) {
    let created = client
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(60_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(topic())
                    .with_num_partitions(PARTITIONS)
                    .with_replication_factor(1)]),
        )
        .await;
    assert_eq!(created.topics[0].error_code, 0);
    let values: Vec<String> = (0..RECORDS).map(|i| format!("record-{i}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let partitions = (0..PARTITIONS)
        .map(|p| {
            PartitionProduceData::default()
                .with_index(p)
                .with_records(Some(batch(&refs, None)))
        })
        .collect();
    let produced = client
        .call(
            9,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic())
                    .with_partition_data(partitions)]),
        )
        .await;
    for p in &produced.responses[0].partition_responses {
        assert_eq!((p.index, p.error_code), (p.index, 0));
    }
}

fn list_latest() -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic())
            .with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(-1)
                    })
                    .collect(),
            )])
}

fn fetch_from_start() -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(16 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic())
            .with_partitions(
                (0..PARTITIONS)
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(0)
                            .with_current_leader_epoch(-1)
                            .with_partition_max_bytes(64 << 10)
                    })
                    .collect(),
            )])
}

/// Answers of one probe: which partitions were answered truly by every API. Panics on any
/// answer that is neither the truth nor a retriable error.
async fn probe(client: &mut RawClient) -> Option<BTreeSet<i32>> {
    let wait = Duration::from_secs(60);
    let mut listed = BTreeSet::new();
    let listing = client.try_call(7, &list_latest(), wait).await?;
    for p in listing.topics.iter().flat_map(|t| &t.partitions) {
        match p.error_code {
            0 => {
                assert_eq!(
                    p.offset, RECORDS,
                    "ListOffsets(latest) of partition {} answered {} while the log holds {RECORDS}",
                    p.partition_index, p.offset
                );
                listed.insert(p.partition_index);
            }
            e => assert!(NOT_YET.contains(&e), "ListOffsets error {e}"),
        }
    }
    let mut fetched = BTreeSet::new();
    let fetch = client.try_call(12, &fetch_from_start(), wait).await?;
    for p in fetch.responses.iter().flat_map(|t| &t.partitions) {
        match p.error_code {
            0 => {
                let records = p.records.as_ref().map(decode_records).unwrap_or_default();
                assert_eq!(
                    (p.high_watermark, records.len() as i64),
                    (RECORDS, RECORDS),
                    "Fetch of partition {} from 0 answered as if the log held less",
                    p.partition_index
                );
                fetched.insert(p.partition_index);
            }
            e => assert!(NOT_YET.contains(&e), "Fetch error {e}"),
        }
    }
    let metadata = client
        .try_call(
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic()))
            ])),
            wait,
        )
        .await?;
    let t = &metadata.topics[0];
    if t.error_code == 0 {
        assert_eq!(
            t.partitions.len() as i32,
            PARTITIONS,
            "Metadata lists part of the topic"
        );
    } else {
        assert!(
            NOT_YET.contains(&t.error_code),
            "Metadata error {}",
            t.error_code
        );
    }
    Some(listed.intersection(&fetched).copied().collect())
}

/// Fills a node, kills it, restarts it with `descriptors`, and probes from the first moment
/// until every partition has been answered truly.
async fn restart_and_probe(descriptors: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = spawn_broker(dir.path(), port, "broker-1.log", None);
    let mut client = connect(addr).await;
    fill(&mut client).await;
    drop(client);
    child.kill().unwrap_or_else(|e| panic!("{e}"));

    let started = Instant::now();
    let mut child = spawn_broker(dir.path(), port, "broker-2.log", descriptors);
    let mut probes = 0;
    let mut first_answer = None;
    'probing: loop {
        assert!(
            started.elapsed() < LOADED_WITHIN,
            "not every partition answered within {LOADED_WITHIN:?}"
        );
        let Some(mut client) = RawClient::try_connect(addr).await else {
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        };
        while let Some(right) = probe(&mut client).await {
            probes += 1;
            first_answer.get_or_insert(started.elapsed());
            if right.len() as i32 == PARTITIONS {
                break 'probing;
            }
            assert!(started.elapsed() < LOADED_WITHIN);
        }
    }
    eprintln!(
        "{probes} probes; first answer {:?} after the restart, all partitions true after {:?}",
        first_answer.unwrap(),
        started.elapsed()
    );
    // Killed, not stopped: a clean stop of thousands of logs is slow, and not what is tested.
    child.kill().unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarting_after_sigkill_never_answers_as_if_a_partition_were_empty() {
    restart_and_probe(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarting_after_sigkill_with_fewer_descriptors_than_logs_never_answers_as_if_a_partition_were_empty(
) {
    restart_and_probe(Some(512)).await;
}
