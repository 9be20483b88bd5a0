//! Admin paths on three processes on loopback (the [`common::cluster`] harness), over raw
//! frames, checked as Kafka behaves:
//!
//! - DeleteRecords waits until every replica on an alive broker has moved its log start offset
//!   to the requested offset (Kafka's `DelayedDeleteRecords`): with a follower stopped (SIGSTOP)
//!   it answers REQUEST_TIMED_OUT at `timeout_ms` with the low watermark seen on arrival, and at
//!   once for an offset that follower's log start already reached even though the leader's log
//!   starts further; with every follower running it answers once they have all moved, so each
//!   follower's log already starts at the offset when the answer arrives, and a new leader after
//!   a kill -9 of the old one does not serve the deleted records.
//! - A parked DeleteRecords or acks=all Produce ends with UNKNOWN_TOPIC_OR_PARTITION when its
//!   topic is deleted and NOT_LEADER_OR_FOLLOWER when leadership moves (preferred election after
//!   a reorder), not at its timeout (Kafka's `DelayedDeleteRecords` and `DelayedProduce`).
//! - A partition that lost every ISR member stays offline while its topic forbids unclean
//!   election, and gets its surviving replica as leader from the controller's periodic check
//!   (`unclean.leader.election.interval.ms`, KAFKA-12670) once the topic's
//!   `unclean.leader.election.enable` is turned on, with no broker changing state.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, DeleteRecordsRequest, DeleteTopicsRequest,
    ElectLeadersRequest, FetchRequest, IncrementalAlterConfigsRequest, ListOffsetsRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use common::cluster::{Cluster, ClusterKind, Settings};
use common::{batch, RawClient};

const NODES: i32 = 3;
/// How long a cluster condition may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);
const REQUEST_TIMED_OUT: i16 = 7;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_CONTROLLER: i16 = 41;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// Three nodes with the test's settings: KafkaIQ, or Apache Kafka with
/// `KAFKAIQ_CLUSTER_BROKER=kafka`.
fn start(name: &str, settings: Settings) -> Cluster {
    let mut cluster = Cluster::start(ClusterKind::from_env(), name, NODES, settings);
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    cluster
}

/// Creates a one-partition topic of replication factor 3 with `configs` and waits until it has
/// a leader and a full ISR; returns the leader.
async fn create_topic(cluster: &Cluster, name: &str, configs: &[(&str, &str)]) -> i32 {
    cluster
        .wait_for(&format!("topic {name} created"), DEADLINE, || async {
            for id in cluster.running() {
                if let Some(0 | 36) = cluster
                    .create_topic_configured(id, name, 1, 3, configs)
                    .await
                {
                    return Some(());
                }
            }
            None
        })
        .await;
    cluster
        .wait_for(
            &format!("{name} has a leader and a full ISR"),
            DEADLINE,
            || async {
                let p = cluster.partitions_anywhere(name).await?.remove(&0)?;
                (p.leader > 0 && p.isr.len() == 3).then_some(p.leader)
            },
        )
        .await
}

/// Produces `values` to `topic`-0 with acks=all through `leader`: the error code.
async fn produce(cluster: &Cluster, leader: i32, topic: &str, values: &[&str]) -> i16 {
    produce_acks_all(cluster, leader, topic, values, 10_000)
        .await
        .0
}

/// An acks=all Produce of `values` to `topic`-0 through `leader` that waits at most
/// `timeout_ms` for the ISR: (error code, base offset, how long the answer took).
async fn produce_acks_all(
    cluster: &Cluster,
    leader: i32,
    topic: &str,
    values: &[&str],
    timeout_ms: i32,
) -> (i16, i64, Duration) {
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic_name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(values, None)))])]);
    let sent = Instant::now();
    let r = client.call(9, &request).await;
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset, sent.elapsed())
}

/// Node `id`'s log end offset of `topic`-0: ListOffsets for the latest offset as a replica
/// asks it (a client is answered the high watermark).
async fn log_end_offset(cluster: &Cluster, id: i32, topic: &str) -> Option<i64> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(3))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let r = client.try_call(7, &request, Duration::from_secs(2)).await?;
    let p = r.topics.first()?.partitions.first()?;
    (p.error_code == 0).then_some(p.offset)
}

/// Starts an acks=all Produce of one record to `topic`-0 through node 1 with a long timeout and
/// returns once node 1's log holds it (its log end is `log_end`): with stopped node 3 still in
/// the ISR, the request is parked from then on.
async fn park_produce(
    cluster: &Arc<Cluster>,
    topic: &'static str,
    log_end: i64,
) -> tokio::task::JoinHandle<(i16, i64, Duration)> {
    let parked = {
        let cluster = cluster.clone();
        tokio::spawn(async move { produce_acks_all(&cluster, 1, topic, &["parked"], 40_000).await })
    };
    cluster
        .wait_for(
            "node 1's log holds the parked record",
            DEADLINE,
            || async move { (log_end_offset(cluster, 1, topic).await? == log_end).then_some(()) },
        )
        .await;
    parked
}

/// DeleteRecords of `topic`-0 before `offset` through `leader`: (error code, low watermark,
/// how long the answer took).
async fn delete_records(
    cluster: &Cluster,
    leader: i32,
    topic: &str,
    offset: i64,
    timeout_ms: i32,
) -> (i16, i64, Duration) {
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(offset)])]);
    let started = Instant::now();
    let r = client.call(2, &request).await;
    let p = &r.topics[0].partitions[0];
    (p.error_code, p.low_watermark, started.elapsed())
}

/// The log start offset of `topic`-0 on node `id`, leader or follower, from a consumer Fetch
/// (v12, which a follower serves, KIP-392) at `offset`, which the log must hold (an error
/// answer carries no log start offset): `None` if the node does not answer or refuses.
async fn log_start_offset(cluster: &Cluster, id: i32, topic: &str, offset: i64) -> Option<i64> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1024)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024)])]);
    let r = client
        .try_call(12, &request, Duration::from_secs(2))
        .await?;
    let p = r.responses.first()?.partitions.first()?;
    (p.error_code == 0).then_some(p.log_start_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_waits_for_every_alive_replica_to_move_its_log_start_offset() {
    const TOPIC: &str = "deleted";
    // A stopped broker stays registered and unfenced for the whole test.
    let mut cluster = start("admin-delete-records", &["broker.session.timeout.ms=30000"]);
    let leader = create_topic(&cluster, TOPIC, &[("min.insync.replicas", "1")]).await;
    let values: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    // The leader named in Metadata may not have applied that image yet: NOT_LEADER_OR_FOLLOWER
    // (nothing written) until it has.
    cluster
        .wait_for("the leader takes the records", DEADLINE, || async {
            match produce(&cluster, leader, TOPIC, &values).await {
                0 => Some(()),
                6 => None,
                other => panic!("produce answered {other}"),
            }
        })
        .await;
    let followers: Vec<i32> = (1..=NODES).filter(|n| *n != leader).collect();

    // Every follower running: answered once each has moved, so each already starts there.
    let (code, low, took) = delete_records(&cluster, leader, TOPIC, 3, 30_000).await;
    assert_eq!((code, low), (0, 3), "answered after {took:?}");

    // A stopped follower cannot move its log start offset: the request times out, answering
    // the low watermark seen when it arrived (the stopped follower's 3), as Kafka does.
    cluster.signal(followers[0], libc::SIGSTOP);
    let (code, low, took) = delete_records(&cluster, leader, TOPIC, 6, 1_000).await;
    assert_eq!(code, REQUEST_TIMED_OUT, "answered after {took:?}");
    assert_eq!(low, 3);
    assert!(
        took >= Duration::from_millis(1_000),
        "answered after {took:?}"
    );
    // The wait is for the requested offset, not for the leader's log start (already 6): the
    // stopped follower's 3 satisfies a request for 3 at once.
    let (code, low, took) = delete_records(&cluster, leader, TOPIC, 3, 20_000).await;
    assert_eq!((code, low), (0, 3), "answered after {took:?}");
    cluster.signal(followers[0], libc::SIGCONT);

    let (code, low, took) = delete_records(&cluster, leader, TOPIC, 6, 30_000).await;
    assert_eq!((code, low), (0, 6), "answered after {took:?}");
    for &id in &followers {
        let start = log_start_offset(&cluster, id, TOPIC, 6).await;
        assert_eq!(start, Some(6), "follower {id} when DeleteRecords answered");
    }
    println!("delete records: answered after {} ms", took.as_millis());

    // The leader dies at once: whoever leads next does not serve the deleted records.
    cluster.kill(leader);
    let next = cluster
        .wait_for("a new leader", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?.remove(&0)?;
            (p.leader > 0 && p.leader != leader).then_some(p.leader)
        })
        .await;
    let start = cluster
        .wait_for("the new leader answers", DEADLINE, || {
            log_start_offset(&cluster, next, TOPIC, 6)
        })
        .await;
    assert_eq!(start, 6, "the new leader {next}'s log start offset");
    cluster.stop_all();
}

/// Partition 0 of `topic` on brokers 1, 2, 3 (1 preferred) with `count` records: waits until 1
/// leads with a full ISR and has taken them.
async fn create_led_by_1(cluster: &Cluster, topic: &str, count: usize) {
    cluster
        .wait_for(&format!("{topic} created"), DEADLINE, || async {
            matches!(
                create_assigned(cluster, 1, topic, &[1, 2, 3]).await,
                Some(0 | 36)
            )
            .then_some(())
        })
        .await;
    cluster
        .wait_for(&format!("{topic} led by 1, full ISR"), DEADLINE, || async {
            let p = cluster.partitions_anywhere(topic).await?.remove(&0)?;
            (p.leader == 1 && p.isr.len() == 3).then_some(())
        })
        .await;
    let values: Vec<String> = (0..count).map(|i| format!("v{i}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    cluster
        .wait_for(&format!("1 takes {topic}'s records"), DEADLINE, || async {
            match produce(cluster, 1, topic, &values).await {
                0 => Some(()),
                6 => None,
                other => panic!("produce answered {other}"),
            }
        })
        .await;
}

/// Starts a DeleteRecords of `topic`-0 before `offset` through node 1 with a long timeout and
/// returns once node 1's log starts at `offset`: the handler moves the log start and parks in the
/// same poll, so the request is parked from then on.
async fn park_delete_records(
    cluster: &Arc<Cluster>,
    topic: &'static str,
    offset: i64,
) -> tokio::task::JoinHandle<(i16, i64, Duration)> {
    let parked = {
        let cluster = cluster.clone();
        tokio::spawn(async move { delete_records(&cluster, 1, topic, offset, 40_000).await })
    };
    cluster
        .wait_for("node 1's log start moved", DEADLINE, || async move {
            (log_start_offset(cluster, 1, topic, offset).await? == offset).then_some(())
        })
        .await;
    parked
}

/// Waits for a parked request's answer, which must come well before its timeout.
async fn parked_answer(parked: tokio::task::JoinHandle<(i16, i64, Duration)>) -> (i16, i64) {
    let (code, low, took) = tokio::time::timeout(DEADLINE, parked)
        .await
        .unwrap()
        .unwrap();
    assert!(took < Duration::from_secs(30), "answered after {took:?}");
    (code, low)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_requests_end_with_kafkas_error_when_their_partition_moves_or_is_deleted() {
    // Broker 3 stays stopped (registered, unfenced, in the ISR) for the rest of the test, so a
    // DeleteRecords or an acks=all Produce through node 1 parks until something else ends it.
    let mut cluster = start(
        "admin-parked-requests-end",
        &[
            "broker.session.timeout.ms=60000",
            "replica.lag.time.max.ms=60000",
        ],
    );
    // Node 3 is stopped below and must stay an unfenced broker: it must not be the active
    // controller (a new one would decide about it). If it is, it is restarted until another
    // voter leads the quorum.
    while cluster
        .wait_for("a controller", DEADLINE, || async {
            cluster.controller_seen_by(1).await
        })
        .await
        == 3
    {
        cluster.kill(3);
        cluster.spawn(3);
        cluster.await_listening(3);
        cluster
            .wait_for("a controller other than 3", DEADLINE, || async {
                cluster.controller_seen_by(1).await.filter(|c| *c != 3)
            })
            .await;
    }
    let cluster = Arc::new(cluster);
    create_led_by_1(&cluster, "dropped", 10).await;
    create_led_by_1(&cluster, "moved", 10).await;
    cluster.signal(3, libc::SIGSTOP);

    // The topic is deleted: node 1 no longer hosts the partition (Kafka's HostedPartition.None).
    let parked = park_delete_records(&cluster, "dropped", 4).await;
    let parked_produce = park_produce(&cluster, "dropped", 11).await;
    // The stopped node may be the controller: until a new one is elected the forwarded
    // request answers NOT_CONTROLLER, which clients retry.
    cluster
        .wait_for("DeleteTopics through node 2", DEADLINE, || async {
            let mut client = RawClient::connect(cluster.nodes[&2].client_addr()).await;
            let request = DeleteTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topic_names(vec![topic_name("dropped")]);
            let r = client.call(4, &request).await;
            match r.responses[0].error_code {
                0 => Some(()),
                NOT_CONTROLLER => None,
                other => panic!("DeleteTopics answered {other}: {r:?}"),
            }
        })
        .await;
    assert_eq!(
        parked_answer(parked).await,
        (UNKNOWN_TOPIC_OR_PARTITION, -1)
    );
    assert_eq!(
        parked_answer(parked_produce).await,
        (UNKNOWN_TOPIC_OR_PARTITION, -1)
    );
    let mut client = RawClient::connect(cluster.nodes[&2].client_addr()).await;

    // Leadership moves to 2 (preferred after the reorder) while 1 keeps its replica.
    let parked = park_delete_records(&cluster, "moved", 4).await;
    let parked_produce = park_produce(&cluster, "moved", 11).await;
    let reorder = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(topic_name("moved"))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(0)
                .with_replicas(Some(vec![
                    BrokerId(2),
                    BrokerId(1),
                    BrokerId(3),
                ]))])]);
    let r = client.call(0, &reorder).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    cluster
        .wait_for("2 preferred", DEADLINE, || async {
            let p = cluster.partitions_anywhere("moved").await?.remove(&0)?;
            (p.replicas.first() == Some(&2)).then_some(())
        })
        .await;
    let elect = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(topic_name("moved"))
            .with_partitions(vec![0])]));
    let r = client.call(2, &elect).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(parked_answer(parked).await, (NOT_LEADER_OR_FOLLOWER, -1));
    assert_eq!(
        parked_answer(parked_produce).await,
        (NOT_LEADER_OR_FOLLOWER, -1)
    );

    cluster.signal(3, libc::SIGCONT);
    Arc::into_inner(cluster).unwrap().stop_all();
}

/// CreateTopics of one partition on exactly `replicas` through node `id`: the error code.
async fn create_assigned(cluster: &Cluster, id: i32, topic: &str, replicas: &[i32]) -> Option<i16> {
    let mut client = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let request = common::create_assigned_request(topic, replicas);
    let r = client
        .try_call(7, &request, Duration::from_secs(10))
        .await?;
    Some(r.topics[0].error_code)
}

/// IncrementalAlterConfigs SET of one topic key through node `id`: the error code.
async fn set_topic_config(cluster: &Cluster, id: i32, topic: &str, key: &str, value: &str) -> i16 {
    let mut client = RawClient::connect(cluster.nodes[&id].client_addr()).await;
    let s = |v: &str| StrBytes::from_string(v.to_owned());
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s(topic))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(0)
                .with_value(Some(s(value)))]),
    ]);
    client.call(1, &request).await.responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_on_unclean_election_elects_a_leader_for_an_offline_partition() {
    const TOPIC: &str = "offline";
    const CHECK_MS: u64 = 300;
    // Three voters and two broker-only nodes (4, 5) holding the partition, so both of its
    // replicas can die while the quorum stays up.
    let interval = format!("unclean.leader.election.interval.ms={CHECK_MS}");
    let mut cluster = Cluster::start_observed(
        ClusterKind::from_env(),
        "admin-unclean",
        NODES,
        2,
        &[&interval],
        |_| Vec::new(),
    );
    for id in 1..=NODES + 2 {
        cluster.await_listening(id);
    }
    cluster
        .wait_for("the topic on brokers 4 and 5", DEADLINE, || async {
            matches!(
                create_assigned(&cluster, 1, TOPIC, &[4, 5]).await,
                Some(0 | 36)
            )
            .then_some(())
        })
        .await;
    let leader = cluster
        .wait_for("a leader and a full ISR", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?.remove(&0)?;
            (p.leader > 0 && p.isr.len() == 2).then_some(p.leader)
        })
        .await;
    let survivor = if leader == 4 { 5 } else { 4 };

    // The survivor dies first and leaves the ISR; then the leader: no ISR member is left.
    cluster.kill(survivor);
    cluster
        .wait_for("the ISR shrinks to the leader", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?.remove(&0)?;
            (p.isr == vec![leader]).then_some(())
        })
        .await;
    cluster.kill(leader);
    cluster
        .wait_for("the partition goes offline", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?.remove(&0)?;
            (p.leader == -1).then_some(())
        })
        .await;
    cluster.spawn(survivor);
    cluster.await_listening(survivor);
    cluster
        .wait_for("the survivor registered and unfenced", DEADLINE, || async {
            let m = cluster.metadata(1, &[]).await?;
            m.brokers
                .iter()
                .any(|b| b.node_id.0 == survivor)
                .then_some(())
        })
        .await;
    // Unclean election is off: several checks pass and the partition stays offline.
    let watch_until = Instant::now() + Duration::from_millis(4 * CHECK_MS);
    while Instant::now() < watch_until {
        let p = cluster
            .partitions_anywhere(TOPIC)
            .await
            .unwrap()
            .remove(&0)
            .unwrap();
        assert_eq!(p.leader, -1, "elected while unclean election is off: {p:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let on_at = Instant::now();
    assert_eq!(
        set_topic_config(&cluster, 1, TOPIC, "unclean.leader.election.enable", "true").await,
        0
    );
    let p = cluster
        .wait_for("the survivor elected", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?.remove(&0)?;
            (p.leader == survivor).then_some(p)
        })
        .await;
    assert_eq!(
        p.isr,
        vec![survivor],
        "an unclean leader is alone in the ISR"
    );
    println!(
        "unclean election: leader {survivor} {} ms after the config change",
        on_at.elapsed().as_millis()
    );
    cluster.stop_all();
}

/// A metadata change sent to a broker right after the active controller died is not refused:
/// the broker holds it until the quorum has elected another controller and forwards it there,
/// as Kafka's forwarding channel does (NOT_CONTROLLER only after a long wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_topics_sent_as_the_controller_dies_waits_for_the_next_one() {
    let mut cluster = start("admin-controller-dies", &[]);
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    let controller = cluster
        .wait_for("an active controller", DEADLINE, || async {
            cluster.controller_seen_by(1).await.filter(|c| *c > 0)
        })
        .await;
    let ask = cluster
        .running()
        .into_iter()
        .find(|id| *id != controller)
        .unwrap();
    // Every node knows the controller before it dies.
    cluster
        .wait_for("every node knows the controller", DEADLINE, || async {
            for id in cluster.running() {
                if cluster.controller_seen_by(id).await != Some(controller) {
                    return None;
                }
            }
            Some(())
        })
        .await;
    cluster.kill(controller);
    let started = Instant::now();
    let code = cluster
        .create_topic_configured(ask, "after-the-controller", 1, 2, &[])
        .await;
    assert_eq!(
        code,
        Some(0),
        "CreateTopics through node {ask} as controller {controller} died (after {:?})",
        started.elapsed()
    );
    cluster.stop_all();
}
