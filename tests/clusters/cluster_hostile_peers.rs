//! Hostile or confused peers on the controller listener of a three-node KafkaIQ cluster, by raw
//! frames: each is refused as Kafka's controller refuses it, and afterwards the cluster is as
//! it was — the same quorum leader and epoch, every broker alive, every partition led where it
//! was, no forged record in the metadata log.
//!
//! - A client API (Metadata, Produce) on the controller listener closes the connection, as does
//!   a lifecycle API frame claiming more than the small bound of those APIs.
//! - BrokerHeartbeat with a wrong broker epoch: STALE_BROKER_EPOCH, even with want_fence; sent to
//!   a controller that is not active: NOT_CONTROLLER.
//! - BrokerRegistration of a new incarnation for a live node id: DUPLICATE_BROKER_REGISTRATION.
//! - AlterPartition claiming a leader's identity with a wrong broker epoch: STALE_BROKER_EPOCH.
//! - A Raft frame that does not decode closes its connection; well-formed Raft messages from a
//!   stranger, to another node, without a term, or from a stale term change nothing.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::alter_partition_request::{
    BrokerState, PartitionData as AlterPartitionData, TopicData as AlterTopicData,
};
use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterPartitionRequest, BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest,
    MetadataRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafkaiq::controller::observer;
use kafkaiq::quorum::chunks::{encode_chunks, RAFT_CHUNK_BYTES};
use kafkaiq::quorum::wire::{self, RAFT_MESSAGE_API_KEY};
use raft::eraftpb::{Entry, Message, MessageType};

const STALE_BROKER_EPOCH: i16 = 77;
const NOT_CONTROLLER: i16 = 41;
const DUPLICATE_BROKER_REGISTRATION: i16 = 101;
const ANSWER: Duration = Duration::from_secs(5);

fn controller_addr(cluster: &Cluster, id: i32) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], cluster.nodes[&id].controller_port))
}

/// (leader id, leader epoch, high watermark) of the metadata quorum, as node 1 reports it.
async fn quorum(cluster: &Cluster) -> (i32, i32, i64) {
    let p = cluster.describe_quorum(1).await.expect("DescribeQuorum");
    (p.leader_id.0, p.leader_epoch, p.high_watermark)
}

/// (partition, leader, leader epoch) of every partition of `topic`, and the brokers listed.
async fn layout(cluster: &Cluster, topic: &str) -> (Vec<(i32, i32, i32)>, Vec<i32>) {
    let m = cluster.metadata(1, &[topic]).await.expect("metadata");
    let mut parts: Vec<(i32, i32, i32)> = m.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
        .collect();
    parts.sort_unstable();
    let mut brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
    brokers.sort_unstable();
    (parts, brokers)
}

async fn assert_closed_after(addr: SocketAddr, frame: &[u8], what: &str) {
    let mut client = RawClient::connect(addr).await;
    client.send_bytes(frame).await;
    assert!(
        client.is_closed().await,
        "{what}: the connection stays open"
    );
}

/// A Raft request frame, size prefix included.
fn raft_frame(message: &Message) -> Vec<u8> {
    wire::encode_request(1, "hostile", message).to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_and_confused_peers_change_nothing() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "hostile", 3, &[]);
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    // One controller failover first, so the quorum is past its first epoch and a stale epoch
    // exists to forge. (A message in the current epoch from a voter is, to Raft, that voter's
    // word: with no authentication on PLAINTEXT it cannot be told from a real one.)
    let first = cluster.describe_quorum(1).await.expect("DescribeQuorum");
    let first_leader = first.leader_id.0;
    cluster.kill(first_leader);
    let survivor = (1..=3).find(|id| *id != first_leader).unwrap();
    cluster
        .wait_for("a second quorum epoch", Duration::from_secs(30), || async {
            let q = cluster.describe_quorum(survivor).await?;
            (q.leader_epoch > first.leader_epoch && q.leader_id.0 != first_leader).then_some(())
        })
        .await;
    cluster.spawn(first_leader);
    cluster
        .wait_for("three brokers again", Duration::from_secs(60), || {
            cluster.formed()
        })
        .await;
    assert_eq!(cluster.create_topic(1, "steady", 3).await, Some(0));
    let (before, brokers) = cluster
        .wait_for("steady led everywhere", Duration::from_secs(30), || async {
            let (parts, brokers) = layout(&cluster, "steady").await;
            (parts.len() == 3 && parts.iter().all(|p| p.1 > 0)).then_some((parts, brokers))
        })
        .await;
    assert_eq!(brokers, vec![1, 2, 3]);
    let (leader, epoch, _) = quorum(&cluster).await;
    assert!(epoch >= 2, "epoch {epoch} after a failover");
    let active = cluster.metadata(1, &[]).await.unwrap().controller_id.0;
    assert_eq!(active, leader, "the active controller is the quorum leader");
    let standby = (1..=3).find(|id| *id != active).unwrap();
    let active_addr = controller_addr(&cluster, active);

    // The controller listener serves only the controller's APIs.
    {
        let mut client = RawClient::connect(active_addr).await;
        let versions = client.call(3, &crate::common::api_versions_request()).await;
        assert_eq!(versions.error_code, 0);
        let keys: Vec<i16> = versions.api_keys.iter().map(|k| k.api_key).collect();
        assert!(keys.contains(&63) && !keys.contains(&0) && !keys.contains(&1));
    }
    let probe = RawClient::connect(active_addr).await;
    let (_, metadata) = probe.encode(12, &MetadataRequest::default());
    assert_closed_after(
        active_addr,
        &metadata,
        "Metadata on the controller listener",
    )
    .await;
    let produce = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("steady")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(common::batch(&["x"], None)))])]);
    let (_, produce) = probe.encode(9, &produce);
    assert_closed_after(active_addr, &produce, "Produce on the controller listener").await;
    // Frame bounds per API: a BrokerHeartbeat (key 63) claiming 20 MiB is past the small bound
    // of the lifecycle APIs and is closed once its key arrives, not awaited. A Raft message is
    // at most one chunk: a 1 MiB one is closed the same way (a snapshot comes in chunks).
    let mut oversized = (20i32 << 20).to_be_bytes().to_vec();
    oversized.extend_from_slice(&63i16.to_be_bytes());
    assert_closed_after(active_addr, &oversized, "a 20 MiB BrokerHeartbeat frame").await;
    let mut oversized = (1i32 << 20).to_be_bytes().to_vec();
    oversized.extend_from_slice(&RAFT_MESSAGE_API_KEY.to_be_bytes());
    assert_closed_after(active_addr, &oversized, "a 1 MiB Raft frame").await;
    // Chunks of a large Raft message: one claiming a message past the snapshot bound, one that
    // continues nothing, and one from a node that is not a voter each close their connection.
    let voter = if active == 1 { 2 } else { 1 };
    let message = [7u8; RAFT_CHUNK_BYTES + 1];
    let chunks = |from| encode_chunks(from, "hostile", &message, || 1).collect::<Vec<_>>();
    let mut huge = chunks(voter)[0].to_vec();
    let total_at = huge.len() - RAFT_CHUNK_BYTES - 8;
    huge[total_at..total_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_closed_after(active_addr, &huge, "a chunk of a 4 GiB message").await;
    let second = &chunks(voter)[1];
    assert_closed_after(active_addr, second, "a chunk continuing nothing").await;
    let stranger = &chunks(9)[0];
    assert_closed_after(active_addr, stranger, "a chunk from a non-voter").await;

    // An observer's metadata fetch: a well-formed one is answered with the committed log (from
    // the start: entries, or the image as a snapshot); a truncated one closes the connection.
    let fetch = observer::FetchRequest {
        node_id: 9,
        after: 0,
        max_wait_ms: 100,
        max_bytes: 1 << 20,
    };
    let frame = observer::encode_request(5, "hostile", &fetch);
    let mut client = RawClient::connect(controller_addr(&cluster, standby)).await;
    client.send_bytes(&frame).await;
    let answer = client.read_frame().await.expect("a metadata fetch answer");
    let (correlation, answer) = observer::decode_response(answer).expect("it decodes");
    assert_eq!(correlation, 5);
    assert_eq!(answer.leader_id, active);
    assert!(
        answer.snapshot.is_some() || answer.entries.first().is_some_and(|e| e.0 == 1),
        "the log from its start: {:?}",
        answer.entries.first()
    );
    let mut truncated = frame[..frame.len() - 3].to_vec();
    let body_len = truncated.len() as i32 - 4;
    truncated[..4].copy_from_slice(&body_len.to_be_bytes());
    assert_closed_after(active_addr, &truncated, "a truncated metadata fetch").await;

    // A heartbeat claiming broker 2 with an epoch it does not have.
    let mut client = RawClient::connect(active_addr).await;
    let forged = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(2))
        .with_broker_epoch(987_654_321)
        .with_current_metadata_offset(0)
        .with_want_fence(true);
    let answer = client
        .try_call(1, &forged, ANSWER)
        .await
        .expect("an answer");
    assert_eq!(answer.error_code, STALE_BROKER_EPOCH);
    let mut other = RawClient::connect(controller_addr(&cluster, standby)).await;
    let answer = other.try_call(1, &forged, ANSWER).await.expect("an answer");
    assert_eq!(answer.error_code, NOT_CONTROLLER);

    // A second process claiming node 2 while node 2 heartbeats.
    let registration = BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(2))
        .with_cluster_id(StrBytes::from_string(
            cluster
                .metadata(1, &[])
                .await
                .unwrap()
                .cluster_id
                .unwrap()
                .to_string(),
        ))
        .with_incarnation_id(uuid::Uuid::from_u128(0xbad))
        .with_listeners(vec![Listener::default()
            .with_name(StrBytes::from_static_str("PLAINTEXT"))
            .with_host(StrBytes::from_static_str("127.0.0.1"))
            .with_port(1)
            .with_security_protocol(0)]);
    let answer = client
        .try_call(4, &registration, ANSWER)
        .await
        .expect("an answer");
    assert_eq!(answer.error_code, DUPLICATE_BROKER_REGISTRATION);

    // AlterPartition in the name of a partition's leader, with a wrong broker epoch.
    let m = cluster.metadata(1, &["steady"]).await.unwrap();
    let topic_id = m.topics[0].topic_id;
    let (_, p0_leader, p0_epoch) = before[0];
    let alter = AlterPartitionRequest::default()
        .with_broker_id(BrokerId(p0_leader))
        .with_broker_epoch(987_654_321)
        .with_topics(vec![AlterTopicData::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![AlterPartitionData::default()
                .with_partition_index(0)
                .with_leader_epoch(p0_epoch)
                .with_new_isr_with_epochs(vec![
                    BrokerState::default().with_broker_id(BrokerId(p0_leader))
                ])
                .with_partition_epoch(0)])]);
    let answer = client.try_call(3, &alter, ANSWER).await.expect("an answer");
    assert_eq!(answer.error_code, STALE_BROKER_EPOCH);

    // Raft frames: one that does not decode, then well-formed ones no voter may accept.
    // A protobuf field whose length runs past the end of the frame.
    let mut garbage = raft_frame(&Message::default());
    garbage.extend_from_slice(&[0x0a, 0x7f, 0x01]);
    let size = (garbage.len() - 4) as i32;
    garbage[..4].copy_from_slice(&size.to_be_bytes());
    assert_closed_after(active_addr, &garbage, "a Raft frame that does not decode").await;

    let mut raft = RawClient::connect(controller_addr(&cluster, standby)).await;
    let forged_append = |from: u64, to: u64, term: u64| {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = from;
        m.to = to;
        m.term = term;
        m.index = 1_000_000;
        m.log_term = term;
        m.commit = 1_000_001;
        let e = Entry {
            index: 1_000_001,
            term,
            data: b"forged".to_vec().into(),
            ..Default::default()
        };
        m.entries = vec![e].into();
        m
    };
    let me = standby as u64;
    let impostor = (1..=3).find(|id| *id != standby && *id != active).unwrap() as u64;
    for message in [
        forged_append(99, me, epoch as u64 + 5), // a stranger, with a higher term
        forged_append(impostor, 42, epoch as u64 + 5), // for another node
        forged_append(impostor, me, 0),          // no term
        forged_append(impostor, me, epoch as u64 - 1), // a stale epoch
    ] {
        raft.send_bytes(&raft_frame(&message)).await;
    }
    // A hostile stranger's vote request with a huge term: the voters keep their leader (it
    // is not a voter, and check-quorum keeps a live leader's followers from listening).
    let mut vote = Message::default();
    vote.set_msg_type(MessageType::MsgRequestVote);
    vote.from = 99;
    vote.to = me;
    vote.term = 1_000;
    raft.send_bytes(&raft_frame(&vote)).await;
    // The connection carried only refused messages: it stays open, and closing it is not the
    // loss of a leader's connection.
    let mut ping = RawClient::connect(controller_addr(&cluster, standby)).await;
    assert_eq!(
        ping.call(3, &crate::common::api_versions_request())
            .await
            .error_code,
        0
    );
    drop(raft);

    // Nothing changed: the same leader and epoch, the same brokers, the same partition
    // leaders and epochs; the cluster still decides (a new topic).
    assert_eq!(cluster.create_topic(2, "after", 1).await, Some(0));
    let (leader_after, epoch_after, _) = quorum(&cluster).await;
    assert_eq!((leader_after, epoch_after), (leader, epoch));
    let (after, brokers_after) = layout(&cluster, "steady").await;
    assert_eq!(after, before);
    assert_eq!(brokers_after, vec![1, 2, 3]);
    for id in 1..=3 {
        assert!(
            !cluster.log_tail(id, 400).contains("forged"),
            "node {id} logged a forged record"
        );
    }
    cluster.stop_all();
}

/// A Raft message on the controller listener, as a forger writes it.
fn forged(kind: MessageType, from: u64, to: u64, term: u64) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    m.from = from;
    m.to = to;
    m.term = term;
    m
}

/// Every forged frame raft-rs would have panicked on, deposed a leader with, or taken into the
/// log, sent to each voter in the name of each other voter, on fresh connections: afterwards
/// every node runs, the same controller leads in the same epoch, nothing committed is lost
/// and the cluster still decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_frames_leave_the_controller_and_lose_nothing() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "forged-raft", 3, &[]);
    cluster
        .wait_for("three brokers", Duration::from_secs(90), || {
            cluster.formed()
        })
        .await;
    for (i, topic) in ["kept-a", "kept-b"].iter().enumerate() {
        assert_eq!(cluster.create_topic(1 + i as i32, topic, 3).await, Some(0));
    }
    let (leader, epoch, hw) = quorum(&cluster).await;
    let term = epoch as u64;
    let mut frames: Vec<(String, Message)> = Vec::new();
    for to in 1..=3u64 {
        for from in (1..=3u64).filter(|f| *f != to) {
            let mut m = forged(MessageType::MsgHeartbeat, from, to, term + 1);
            m.commit = 1 << 40;
            frames.push((
                format!("heartbeat {from}->{to}, later term, commit past the log"),
                m,
            ));
            let mut m = forged(MessageType::MsgHeartbeat, from, to, term);
            m.commit = 1 << 40;
            frames.push((format!("heartbeat {from}->{to}, commit past the log"), m));
            let m = forged(MessageType::MsgHeartbeat, from, to, u64::MAX);
            frames.push((format!("heartbeat {from}->{to}, term u64::MAX"), m));
            for index in hw.max(1) as u64 - 1..=hw as u64 + 1 {
                let mut m = forged(MessageType::MsgAppend, from, to, term + 1);
                m.index = index;
                m.log_term = term;
                m.commit = index + 1;
                m.entries = vec![Entry {
                    index: index + 1,
                    term: term + 1,
                    data: b"forged garbage, not metadata records".to_vec().into(),
                    ..Default::default()
                }]
                .into();
                frames.push((format!("append {from}->{to} of garbage after {index}"), m));
            }
            let m = forged(MessageType::MsgTimeoutNow, from, to, term);
            frames.push((format!("TimeoutNow {from}->{to}"), m));
            let m = forged(MessageType::MsgTransferLeader, from, to, term);
            frames.push((format!("TransferLeader {from}->{to}"), m));
            let mut m = forged(MessageType::MsgSnapshot, from, to, term + 1);
            let meta = m.mut_snapshot().mut_metadata();
            meta.index = hw as u64 + 100;
            meta.term = term + 1;
            meta.mut_conf_state().voters = vec![from];
            frames.push((format!("snapshot {from}->{to} naming one voter"), m));
            let mut m = forged(MessageType::MsgAppendResponse, from, to, term);
            m.index = 1 << 40;
            frames.push((format!("append response {from}->{to} past the log"), m));
            let m = forged(MessageType::MsgHeartbeatResponse, from, to, term + 1);
            frames.push((format!("heartbeat response {from}->{to}, later term"), m));
        }
    }
    for (what, message) in &frames {
        let to = message.to as i32;
        let mut client = RawClient::connect(controller_addr(&cluster, to)).await;
        client.send_bytes(&raft_frame(message)).await;
        // Answered in order on another connection: the frame was read and handled.
        let mut ping = RawClient::connect(controller_addr(&cluster, to)).await;
        let answer = ping
            .try_call(3, &crate::common::api_versions_request(), ANSWER)
            .await;
        assert!(
            answer.is_some(),
            "node {to} stopped answering after: {what}"
        );
        drop(client);
    }
    // A flood on one connection: the controller's queue is bounded, the node answers.
    let flood: Vec<u8> = (0..20_000)
        .flat_map(|_| raft_frame(&forged(MessageType::MsgHeartbeat, 2, 1, term)))
        .collect();
    let mut client = RawClient::connect(controller_addr(&cluster, 1)).await;
    client.send_bytes(&flood).await;
    drop(client);

    let (leader_after, epoch_after, _) = quorum(&cluster).await;
    assert_eq!(
        (leader_after, epoch_after),
        (leader, epoch),
        "the controller and its epoch"
    );
    assert_eq!(cluster.create_topic(3, "after-forgery", 1).await, Some(0));
    let (_, _, hw_after) = quorum(&cluster).await;
    assert!(hw_after > hw, "the log grew from {hw} to {hw_after}");
    for id in 1..=3 {
        let m = cluster.metadata(id, &["kept-a", "kept-b"]).await.unwrap();
        assert!(
            m.topics
                .iter()
                .all(|t| t.error_code == 0 && t.partitions.len() == 3),
            "node {id} lost a topic"
        );
        let log = cluster.log_text(id);
        assert!(!log.contains("panicked"), "node {id} panicked");
        assert!(
            !log.contains("controller stopped"),
            "node {id}'s controller stopped"
        );
    }
    cluster.stop_all();
}
