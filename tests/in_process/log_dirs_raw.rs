//! AlterReplicaLogDirs and DescribeLogDirs against an in-process broker with two log dirs,
//! driven with raw frames: a partition moved while it is written and read (the future replica
//! seen in DescribeLogDirs, paced by `replica.alter.log.dirs.io.max.bytes.per.second` so the
//! move lasts seconds), every acknowledged record readable after the move and after a restart,
//! a restart in the middle of a move, a topic config changed during a move kept after it, and
//! the per-partition error codes Kafka answers.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, decode_records, start_broker, RawClient, TestBroker};
use kafka_protocol::messages::alter_replica_log_dirs_request::{
    AlterReplicaLogDir, AlterReplicaLogDirTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const DEADLINE: Duration = Duration::from_secs(60);

/// The copy rate of the moves in these tests: a few MiB take seconds.
const MOVE_BYTES_PER_SECOND: usize = 512 * 1024;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn name(v: &str) -> TopicName {
    TopicName(s(v))
}

fn dirs(root: &Path) -> (PathBuf, PathBuf) {
    (root.join("d1"), root.join("d2"))
}

async fn start(root: &Path) -> TestBroker {
    let (d1, d2) = dirs(root);
    let log_dirs = format!("log.dirs={},{}", d1.display(), d2.display());
    let rate = format!("replica.alter.log.dirs.io.max.bytes.per.second={MOVE_BYTES_PER_SECOND}");
    start_broker(&d1, &[&log_dirs, &rate]).await
}

async fn create_topic(client: &mut RawClient, topic: &str, partitions: i32) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(s("segment.bytes"))
                .with_value(Some(s("1048576")))])]);
    let r: CreateTopicsResponse = client.call(7, &request).await;
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
}

async fn produce(client: &mut RawClient, topic: &str, partition: i32, records: Bytes) -> i64 {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let r: ProduceResponse = client.call(9, &request).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce to {topic}-{partition}: {p:?}");
    p.base_offset
}

/// Produces `batches` batches of 10 records of ~1 KiB, values `<tag>-<batch>-<i>`; returns the
/// values in offset order.
async fn produce_many(
    client: &mut RawClient,
    topic: &str,
    tag: &str,
    batches: usize,
) -> Vec<String> {
    let pad = "x".repeat(1000);
    let mut all = Vec::new();
    for b in 0..batches {
        let values: Vec<String> = (0..10).map(|i| format!("{tag}-{b}-{i}-{pad}")).collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        produce(client, topic, 0, batch(&refs, None)).await;
        all.extend(values);
    }
    all
}

/// Every record of partition 0 from offset 0, as (offset, value).
async fn read_all(client: &mut RawClient, topic: &str) -> Vec<(i64, String)> {
    let mut out: Vec<(i64, String)> = Vec::new();
    let mut offset = 0;
    loop {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(4 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_current_leader_epoch(-1)
                    .with_partition_max_bytes(4 << 20)])]);
        let r: FetchResponse = client.call(12, &request).await;
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "fetch at {offset}: {:?}", p.error_code);
        let records = p.records.clone().unwrap_or_default();
        let decoded: Vec<_> = decode_records(&records)
            .into_iter()
            .filter(|(o, _)| *o >= offset)
            .collect();
        if decoded.is_empty() {
            assert_eq!(
                offset, p.high_watermark,
                "read stopped below the high watermark"
            );
            return out;
        }
        offset = decoded.last().unwrap().0 + 1;
        out.extend(decoded);
    }
}

fn values(records: &[(i64, String)]) -> Vec<String> {
    for (i, (offset, _)) in records.iter().enumerate() {
        assert_eq!(*offset, i as i64, "offsets are consecutive from 0");
    }
    records.iter().map(|(_, v)| v.clone()).collect()
}

async fn alter(
    client: &mut RawClient,
    version: i16,
    moves: &[(&str, &str, i32)],
) -> Vec<(String, i32, i16)> {
    let request = AlterReplicaLogDirsRequest::default().with_dirs(
        moves
            .iter()
            .map(|(dir, topic, partition)| {
                AlterReplicaLogDir::default()
                    .with_path(s(dir))
                    .with_topics(vec![AlterReplicaLogDirTopic::default()
                        .with_name(name(topic))
                        .with_partitions(vec![*partition])])
            })
            .collect(),
    );
    let r: AlterReplicaLogDirsResponse = client.call(version, &request).await;
    let mut out: Vec<_> = r
        .results
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic_name.0.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    out.sort();
    out
}

/// (log dir, is future, offset lag) of every replica of `topic`-0 DescribeLogDirs lists.
async fn replicas_of(client: &mut RawClient, topic: &str) -> Vec<(String, bool, i64)> {
    let request =
        DescribeLogDirsRequest::default()
            .with_topics(Some(vec![DescribableLogDirTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![0])]));
    let r: DescribeLogDirsResponse = client.call(4, &request).await;
    assert_eq!(r.error_code, 0);
    let mut out = Vec::new();
    for dir in &r.results {
        assert_eq!(dir.error_code, 0);
        for t in &dir.topics {
            for p in &t.partitions {
                if t.name.0.as_str() == topic && p.partition_index == 0 {
                    out.push((dir.log_dir.to_string(), p.is_future_key, p.offset_lag));
                }
            }
        }
    }
    out.sort();
    out
}

fn subdirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("kafkaiq-metadata"))
        .collect();
    names.sort();
    names
}

/// The partition's dir and the other one.
async fn source_and_destination(
    client: &mut RawClient,
    root: &Path,
    topic: &str,
) -> (String, String) {
    let (d1, d2) = dirs(root);
    let (d1, d2) = (d1.display().to_string(), d2.display().to_string());
    let now = replicas_of(client, topic).await;
    assert_eq!(now.len(), 1, "{now:?}");
    if now[0].0 == d1 {
        (d1, d2)
    } else {
        (d2, d1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_to_the_other_log_dir_while_written_and_survives_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let topic = "moving";
    create_topic(&mut client, topic, 1).await;
    let (from, to) = source_and_destination(&mut client, root.path(), topic).await;

    // ~3 MiB in three segments: at 512 KiB/s the copy takes about six seconds.
    let mut expected = produce_many(&mut client, topic, "before", 300).await;
    assert_eq!(
        alter(&mut client, 2, &[(&to, topic, 0)]).await,
        vec![(topic.into(), 0, 0)]
    );

    let during = replicas_of(&mut client, topic).await;
    assert_eq!(during.len(), 2, "current and future replica: {during:?}");
    let current = during.iter().find(|r| !r.1).expect("the current replica");
    let future = during.iter().find(|r| r.1).expect("the future replica");
    assert_eq!(
        current.0, from,
        "the current replica stays in its dir while copied"
    );
    assert_eq!(current.2, 0, "a leader's lag");
    assert_eq!(future.0, to, "the future replica is in the destination dir");
    assert!(future.2 > 0, "the future replica is behind: {during:?}");
    let future_dirs: Vec<String> = subdirs(Path::new(&to));
    assert!(
        future_dirs.len() == 1
            && future_dirs[0].starts_with("moving-0.")
            && future_dirs[0].ends_with("-future"),
        "{future_dirs:?}"
    );
    // Asking again for the same destination changes nothing.
    assert_eq!(
        alter(&mut client, 1, &[(&to, topic, 0)]).await,
        vec![(topic.into(), 0, 0)]
    );

    // Writes and reads go on during the move.
    expected.extend(produce_many(&mut client, topic, "during", 50).await);
    assert_eq!(values(&read_all(&mut client, topic).await), expected);

    let deadline = Instant::now() + DEADLINE;
    loop {
        let now = replicas_of(&mut client, topic).await;
        if now == vec![(to.clone(), false, 0)] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the move did not complete: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(subdirs(Path::new(&to)), vec!["moving-0".to_string()]);
    // The replaced replica's dir is renamed at the swap and removed in the background.
    while subdirs(Path::new(&from))
        .iter()
        .any(|d| d.starts_with("moving-0"))
    {
        assert!(
            Instant::now() < deadline,
            "the old replica's dir is not removed: {:?}",
            subdirs(Path::new(&from))
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    expected.extend(produce_many(&mut client, topic, "after", 20).await);
    assert_eq!(values(&read_all(&mut client, topic).await), expected);
    drop(client);
    broker.shutdown().await.unwrap();

    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    assert_eq!(
        replicas_of(&mut client, topic).await,
        vec![(to.clone(), false, 0)]
    );
    assert_eq!(values(&read_all(&mut client, topic).await), expected);
    expected.extend(produce_many(&mut client, topic, "restarted", 5).await);
    assert_eq!(values(&read_all(&mut client, topic).await), expected);
    // Moving it back is a move like any other.
    assert_eq!(
        alter(&mut client, 2, &[(&from, topic, 0)]).await,
        vec![(topic.into(), 0, 0)]
    );
    drop(client);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_move_keeps_the_current_replica_and_every_record() {
    let root = tempfile::tempdir().unwrap();
    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let topic = "interrupted";
    create_topic(&mut client, topic, 1).await;
    let (from, to) = source_and_destination(&mut client, root.path(), topic).await;
    let mut expected = produce_many(&mut client, topic, "a", 400).await;
    assert_eq!(
        alter(&mut client, 2, &[(&to, topic, 0)]).await,
        vec![(topic.into(), 0, 0)]
    );
    expected.extend(produce_many(&mut client, topic, "b", 5).await);
    assert_eq!(replicas_of(&mut client, topic).await.len(), 2);
    drop(client);
    broker.shutdown().await.unwrap();

    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    // The unfinished copy is dropped: the replica is where it was, whole.
    assert_eq!(
        replicas_of(&mut client, topic).await,
        vec![(from.clone(), false, 0)]
    );
    assert!(
        subdirs(Path::new(&to)).is_empty(),
        "{:?}",
        subdirs(Path::new(&to))
    );
    assert_eq!(values(&read_all(&mut client, topic).await), expected);
    expected.extend(produce_many(&mut client, topic, "c", 5).await);
    assert_eq!(values(&read_all(&mut client, topic).await), expected);
    drop(client);
    broker.shutdown().await.unwrap();
}

/// A topic config changed while its partition moves between log dirs is the config the moved
/// log runs with: `max.message.bytes` lowered during the move refuses a large batch after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_during_a_move_is_kept_after_the_swap() {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    const MESSAGE_TOO_LARGE: i16 = 10;
    let root = tempfile::tempdir().unwrap();
    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let topic = "reconfigured";
    create_topic(&mut client, topic, 1).await;
    let (_, to) = source_and_destination(&mut client, root.path(), topic).await;
    produce_many(&mut client, topic, "before", 100).await;
    assert_eq!(
        alter(&mut client, 2, &[(&to, topic, 0)]).await,
        vec![(topic.into(), 0, 0)]
    );
    let lower = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s("max.message.bytes"))
                .with_config_operation(0)
                .with_value(Some(s("2000")))]),
    ]);
    let r: IncrementalAlterConfigsResponse = client.call(1, &lower).await;
    assert_eq!(r.responses[0].error_code, 0);
    assert_eq!(
        replicas_of(&mut client, topic).await.len(),
        2,
        "the config changed while the move was under way"
    );
    let deadline = Instant::now() + DEADLINE;
    while replicas_of(&mut client, topic).await != vec![(to.clone(), false, 0)] {
        assert!(Instant::now() < deadline, "the move did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let big = "x".repeat(3000);
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[big.as_str()], None)))])]);
    let r: ProduceResponse = client.call(9, &request).await;
    assert_eq!(
        r.responses[0].partition_responses[0].error_code, MESSAGE_TOO_LARGE,
        "max.message.bytes set during the move"
    );
    drop(client);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_replica_log_dirs_answers_kafkas_error_codes() {
    let root = tempfile::tempdir().unwrap();
    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "known", 2).await;
    let (here, _) = source_and_destination_of(&mut client, root.path(), "known", 0).await;
    let other_dir = root.path().join("not-a-log-dir");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other_dir = other_dir.display().to_string();
    let too_long = "z".repeat(249);
    let cases = alter(
        &mut client,
        2,
        &[
            // LOG_DIR_NOT_FOUND: not one of log.dirs, or not absolute.
            (&other_dir, "known", 1),
            ("d2", "unknown", 0),
            // UNKNOWN_TOPIC_OR_PARTITION: no such topic, no such partition.
            (&here, "unknown", 1),
            (&here, "known", 7),
            // NONE: already there.
            (&here, "known", 0),
            // INVALID_TOPIC_EXCEPTION: its future dir's name would pass 255 bytes.
            (&here, &too_long, 0),
        ],
    )
    .await;
    assert_eq!(
        cases,
        vec![
            ("known".into(), 0, 0),
            ("known".into(), 1, 57),
            ("known".into(), 7, 3),
            ("unknown".into(), 0, 57),
            ("unknown".into(), 1, 3),
            (too_long.clone(), 0, 17),
        ]
    );
    assert_eq!(
        replicas_of(&mut client, "known").await,
        vec![(here.clone(), false, 0)]
    );

    // The API is advertised with Kafka 4.1's versions.
    let versions: ApiVersionsResponse =
        client.call(3, &crate::common::api_versions_request()).await;
    let v = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::AlterReplicaLogDirs as i16)
        .expect("AlterReplicaLogDirs advertised");
    assert_eq!((v.min_version, v.max_version), (1, 2));
    drop(client);
    broker.shutdown().await.unwrap();
}

/// KAFKA_STORAGE_ERROR for a destination dir where a log had an I/O error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_an_offline_log_dir_is_refused_with_kafka_storage_error() {
    let root = tempfile::tempdir().unwrap();
    let broker = start(root.path()).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    create_topic(&mut client, "two", 2).await;
    let (dir0, dir1) = source_and_destination_of(&mut client, root.path(), "two", 0).await;
    assert_eq!(
        source_and_destination_of(&mut client, root.path(), "two", 1)
            .await
            .0,
        dir1,
        "one partition per dir"
    );
    // Partition 1's files vanish: its next segment roll fails and takes dir1 offline.
    std::fs::remove_dir_all(Path::new(&dir1).join("two-1")).unwrap();
    let pad = "y".repeat(1000);
    let values: Vec<String> = (0..10).map(|i| format!("{i}-{pad}")).collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("two"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(1)
                    .with_records(Some(batch(&refs, None)))])]);
        let r: ProduceResponse = client.call(9, &request).await;
        if r.responses[0].partition_responses[0].error_code == 56 {
            break;
        }
        assert!(Instant::now() < deadline, "the broken log never failed");
    }
    assert_eq!(
        alter(&mut client, 2, &[(&dir1, "two", 0)]).await,
        vec![("two".into(), 0, 56)]
    );
    assert_eq!(
        replicas_of(&mut client, "two").await,
        vec![(dir0, false, 0)]
    );
    drop(client);
    // The broker keeps running on its other dir; its stop is not checked here (a dir failed).
    drop(broker);
}

/// The dir of `topic`-`partition` and the other dir.
async fn source_and_destination_of(
    client: &mut RawClient,
    root: &Path,
    topic: &str,
    partition: i32,
) -> (String, String) {
    let (d1, d2) = dirs(root);
    let (d1, d2) = (d1.display().to_string(), d2.display().to_string());
    let request =
        DescribeLogDirsRequest::default()
            .with_topics(Some(vec![DescribableLogDirTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![partition])]));
    let r: DescribeLogDirsResponse = client.call(4, &request).await;
    let holding: Vec<String> = r
        .results
        .iter()
        .filter(|d| d.topics.iter().any(|t| !t.partitions.is_empty()))
        .map(|d| d.log_dir.to_string())
        .collect();
    assert_eq!(holding.len(), 1, "{holding:?}");
    if holding[0] == d1 {
        (d1, d2)
    } else {
        (d2, d1)
    }
}

/// A partition whose log cannot be created (a file stands where its directory must go):
/// CreateTopics answers KAFKA_STORAGE_ERROR naming it instead of success, and produce and fetch
/// to it answer KAFKA_STORAGE_ERROR at once, while the topic's other partition works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_created_fails_create_topics_and_answers_kafka_storage_error() {
    let root = tempfile::tempdir().unwrap();
    let d1 = root.path().join("d1");
    std::fs::create_dir_all(&d1).unwrap();
    std::fs::write(d1.join("broken-0"), b"not a directory").unwrap();
    let log_dirs = format!("log.dirs={}", d1.display());
    let broker = start_broker(&d1, &[&log_dirs]).await;
    let mut client = RawClient::connect(broker.local_addr).await;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name("broken"))
            .with_num_partitions(2)
            .with_replication_factor(1)]);
    let r: CreateTopicsResponse = client.call(7, &request).await;
    let t = &r.topics[0];
    assert_eq!(t.error_code, 56, "{r:?}");
    let message = t.error_message.as_ref().map(|m| m.to_string()).unwrap();
    assert!(
        message.contains("could not create the log of 1 of its 2 partitions (0)"),
        "{message}"
    );
    assert!(message.contains("broken-0"), "names the path: {message}");

    let started = Instant::now();
    let produce_to = |partition: i32| {
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("broken"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch(&["v"], None)))])])
    };
    let r: ProduceResponse = client.call(9, &produce_to(0)).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 56);
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(10_000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name("broken"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_current_leader_epoch(-1)
                .with_partition_max_bytes(1 << 20)])]);
    let r: FetchResponse = client.call(12, &fetch).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 56);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered at once, not after the request timeouts: {:?}",
        started.elapsed()
    );
    let r: ProduceResponse = client.call(9, &produce_to(1)).await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0, "{r:?}");
    drop(client);
    drop(broker);
}
