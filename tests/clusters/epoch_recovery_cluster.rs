//! The leader-epoch cache of a replica killed with SIGKILL, whose log recovery starts in the
//! middle of its log, on three processes.
//!
//! A one-partition topic with small segments (`segment.bytes`) gets records in several leader
//! epochs, leadership moved between nodes 1 and 2 by reordering the replicas and a preferred
//! election. Node 3 follows throughout: it is stopped cleanly in the middle of one epoch (its
//! recovery-point checkpoint then holds an offset inside that epoch, in a segment that begins
//! after the epoch does), and killed with SIGKILL after two more epochs, before the next periodic
//! checkpoint. Its restart recovers at least the segments from that checkpoint on: batches of
//! epochs older than the cache's latest are replayed, and must not move where any epoch begins
//! (Kafka's `LogSegment.recover` assigns only an epoch newer than the cache's latest).
//!
//! Then each node in turn leads and answers OffsetForLeaderEpoch for every epoch: every answer
//! is the (epoch, end offset) the batches in the log imply (Kafka's `endOffsetFor`), the same on
//! every replica.
//!
//! Waits have deadlines; each step waits on a condition.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ElectLeadersRequest, OffsetForLeaderEpochRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "epochs";
const DEADLINE: Duration = Duration::from_secs(60);
/// Small enough that each epoch's records span several segments.
const SEGMENT_BYTES: &str = "1024";
/// Batches produced per epoch (about 300 bytes each: three or four per segment).
const BATCHES_PER_EPOCH: usize = 12;
const ELECTION_NOT_NEEDED: i16 = 84;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// The replica killed with SIGKILL: a follower throughout.
const VICTIM: i32 = 3;

fn name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// Waits until node 1 shows the partition with a leader and all three replicas in its ISR;
/// returns (leader, leader epoch).
async fn settled(cluster: &Cluster, what: &str) -> (i32, i32) {
    cluster
        .wait_for(what, DEADLINE, || async {
            let (leader, epoch, isr) = cluster.partition_state(1, TOPIC, 0).await?;
            (leader > 0 && isr.len() == 3).then_some((leader, epoch))
        })
        .await
}

/// Makes `node` the leader: the replicas reordered with it first (a reassignment that completes
/// at once), then a preferred election. Returns the new leader epoch.
async fn lead(cluster: &Cluster, node: i32) -> i32 {
    let (leader, _) = settled(cluster, "all replicas in sync before a move").await;
    if leader != node {
        move_leadership(cluster, node).await;
    }
    cluster
        .wait_for("the node leading, as it sees itself", DEADLINE, || async {
            let (leader, epoch, isr) = cluster.partition_state(node, TOPIC, 0).await?;
            (leader == node && isr.len() == 3).then_some(epoch)
        })
        .await
}

/// The replicas reordered with `node` first, then a preferred election.
async fn move_leadership(cluster: &Cluster, node: i32) {
    let mut replicas = vec![node];
    replicas.extend([1, 2, 3].into_iter().filter(|&r| r != node));
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(name())
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(0)
                .with_replicas(Some(
                    replicas.into_iter().map(BrokerId).collect(),
                ))])]);
    let mut client = RawClient::connect(cluster.nodes[&1].client_addr()).await;
    let r = client.call(0, &request).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.responses[0].partitions[0].error_code, 0, "{r:?}");
    cluster
        .wait_for("the reordered replicas", DEADLINE, || async {
            let p = cluster.partitions(1, TOPIC).await?;
            (p[0].replicas[0] == node).then_some(())
        })
        .await;
    let request = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(name())
            .with_partitions(vec![0])]));
    let r = client.call(2, &request).await;
    let code = r.replica_election_results[0].partition_result[0].error_code;
    assert!(code == 0 || code == ELECTION_NOT_NEEDED, "{r:?}");
}

/// `batches` acks=all batches of four records produced to `leader`.
async fn produce(cluster: &Cluster, leader: i32, batches: usize) {
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let value = "v".repeat(60);
    for _ in 0..batches {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(common::batch(&[value.as_str(); 4], None)))])]);
        // A node that Metadata names the leader may not have taken the partition on yet:
        // retried, as clients do.
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let r = client.call(9, &request).await;
            let p = &r.responses[0].partition_responses[0];
            if p.error_code == NOT_LEADER_OR_FOLLOWER && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            assert_eq!(p.error_code, 0, "produce to node {leader}: {p:?}");
            break;
        }
    }
}

/// (base offset, partition leader epoch, last offset) of every batch in node `id`'s log.
fn batches(cluster: &Cluster, id: i32) -> Vec<(i64, i32, i64)> {
    let bytes = cluster.log_bytes(id, TOPIC, 0);
    let mut out = Vec::new();
    let mut at = 0;
    while at + 27 <= bytes.len() {
        let int = |from: usize| i32::from_be_bytes(bytes[from..from + 4].try_into().unwrap());
        let base = i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
        let length = int(at + 8) as usize;
        if length == 0 {
            break;
        }
        out.push((base, int(at + 12), base + i64::from(int(at + 23))));
        at += 12 + length;
    }
    out
}

/// Where each epoch's first batch is, in offset order.
fn epoch_starts(batches: &[(i64, i32, i64)]) -> Vec<(i32, i64)> {
    let mut starts: Vec<(i32, i64)> = Vec::new();
    for &(base, epoch, _) in batches {
        if starts.last().is_none_or(|&(e, _)| e != epoch) {
            starts.push((epoch, base));
        }
    }
    starts
}

/// Kafka's `LeaderEpochFileCache.endOffsetFor` over `starts`, for an epoch from the first
/// through the last of them; the last runs to `log_end_offset` (later epochs, registered by
/// leaders that wrote nothing, start there).
fn end_offset_for(starts: &[(i32, i64)], log_end_offset: i64, epoch: i32) -> (i32, i64) {
    let floor = starts.iter().rev().find(|&&(e, _)| e <= epoch).unwrap();
    let end = starts
        .iter()
        .find(|&&(e, _)| e > epoch)
        .map_or(log_end_offset, |&(_, start)| start);
    (floor.0, end)
}

/// The partition's recovery point in node `id`'s `recovery-point-offset-checkpoint`.
fn checkpointed_recovery_point(dir: &Path) -> i64 {
    let text = std::fs::read_to_string(dir.join("recovery-point-offset-checkpoint")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{TOPIC} 0 ")))
        .expect("the partition in the recovery-point checkpoint")
        .parse()
        .unwrap()
}

/// The base offsets of the partition's segments on node `id`.
fn segment_bases(dir: &Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir.join(format!("{TOPIC}-0")))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort();
    bases
}

/// OffsetForLeaderEpoch (v4, as a consumer asks it) of `epoch` through node `id`.
async fn ask_end_offset(cluster: &Cluster, id: i32, epoch: i32) -> (i32, i64) {
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(name())
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_current_leader_epoch(-1)
                .with_leader_epoch(epoch)])]);
    let mut client = RawClient::connect(cluster.nodes[&id].client_addr()).await;
    // The node's metadata cache names it the leader a moment before its replica manager has
    // taken the partition on (the same order as Kafka's metadata publisher): retried, as
    // clients do.
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let r = client.call(4, &request).await;
        let p = &r.topics[0].partitions[0];
        if p.error_code == NOT_LEADER_OR_FOLLOWER && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(p.error_code, 0, "node {id}, epoch {epoch}: {p:?}");
        return (p.leader_epoch, p.end_offset);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_answers_the_same_epoch_end_offsets_after_a_kill_9_recovering_mid_log() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "epoch-recovery", 3, &[]);
    for id in 1..=3 {
        cluster.await_listening(id);
    }
    cluster
        .wait_for("the cluster formed", DEADLINE, || cluster.formed())
        .await;
    let created = cluster
        .create_topic_configured(1, TOPIC, 1, 3, &[("segment.bytes", SEGMENT_BYTES)])
        .await;
    assert_eq!(created, Some(0));

    let mut leader = 1;
    lead(&cluster, leader).await;
    produce(&cluster, leader, BATCHES_PER_EPOCH).await;
    // The epoch node 3 is stopped in the middle of: its clean shutdown checkpoints its log end.
    leader = 2;
    lead(&cluster, leader).await;
    produce(&cluster, leader, BATCHES_PER_EPOCH).await;
    cluster.stop(VICTIM);
    cluster.spawn(VICTIM);
    cluster.await_listening(VICTIM);
    settled(&cluster, "node 3 back in sync after its clean restart").await;
    produce(&cluster, leader, BATCHES_PER_EPOCH).await;
    for next in [1, 2] {
        lead(&cluster, next).await;
        produce(&cluster, next, BATCHES_PER_EPOCH).await;
    }

    let truth = batches(&cluster, 1);
    let starts = epoch_starts(&truth);
    let log_end_offset = truth.last().unwrap().2 + 1;
    assert!(starts.len() >= 4, "four epochs with records: {starts:?}");
    let victim_dir = cluster.nodes[&VICTIM].data_dir();
    let recovery_point = checkpointed_recovery_point(&victim_dir);
    let unflushed_from = *segment_bases(&victim_dir)
        .iter()
        .rev()
        .find(|&&b| b <= recovery_point)
        .unwrap();
    let latest_start = starts.last().unwrap().1;
    let (mid_epoch, mid_start) = *starts
        .iter()
        .rev()
        .find(|&&(_, s)| s < unflushed_from)
        .expect("an epoch starting before the unflushed segments");
    // The case this test is about: the first segment past the checkpointed recovery point (where
    // Kafka's recovery starts) begins inside an epoch older than the latest.
    assert!(
        unflushed_from > mid_start && unflushed_from < latest_start,
        "node 3's first unflushed segment is {unflushed_from} (checkpoint {recovery_point}); epochs {starts:?}"
    );
    println!("epoch-recovery: epochs {starts:?}, log end {log_end_offset}; node 3's recovery point {recovery_point} (segment {unflushed_from}, inside epoch {mid_epoch})");

    cluster.kill(VICTIM);
    cluster.spawn(VICTIM);
    cluster.await_listening(VICTIM);
    settled(&cluster, "node 3 back in sync after kill -9").await;

    let epochs = starts.first().unwrap().0..=starts.last().unwrap().0;
    let expected: Vec<(i32, (i32, i64))> = epochs
        .clone()
        .map(|e| (e, end_offset_for(&starts, log_end_offset, e)))
        .collect();
    for node in [VICTIM, 1, 2] {
        lead(&cluster, node).await;
        let mut answers = Vec::new();
        for e in epochs.clone() {
            answers.push((e, ask_end_offset(&cluster, node, e).await));
        }
        assert_eq!(
            answers, expected,
            "node {node}'s OffsetForLeaderEpoch answers (epoch, (epoch, end offset))"
        );
        assert_eq!(
            batches(&cluster, node),
            truth,
            "node {node} holds the same batches"
        );
    }
    cluster.stop_all();
}
