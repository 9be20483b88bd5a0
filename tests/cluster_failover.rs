//! Three combined nodes as processes on loopback, started from Kafka's own `server.properties`
//! keys: they form one cluster (one cluster id, three brokers, three voters), place replicas as
//! Kafka does, lose a killed leader's leaderships to another ISR member with a higher epoch, and
//! elect another active controller when the active one is killed, with CreateTopics working
//! through any node; a restarted node rejoins.
//!
//! Measured on every run and printed: the time from kill -9 to a new leader in Metadata (goal:
//! p99 under 1 s) and to a new active controller (goal: under 2 s). `KAFKAIQ_FAILOVER_KILLS`
//! sets the number of leader kills (default 5; 20 for the figures in the closing notes), and
//! `KAFKAIQ_CLUSTER_BROKER=kafka` runs the same harness on Apache Kafka 4.1.1 for comparison
//! (the timing goals are asserted for KafkaIQ only).

mod common;
#[path = "cluster_failover/consumer_protocol.rs"]
mod consumer_protocol;
#[path = "cluster_failover/copier.rs"]
mod copier;
#[path = "cluster_failover/franz_group.rs"]
mod franz_group;
#[path = "cluster_failover/streams.rs"]
mod streams;
#[path = "cluster_failover/transactions.rs"]
mod transactions;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterKind};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_one_cluster_and_fail_over_leaders_and_the_controller() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(kind, "failover", 3, &[]);
    let cluster_id = cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    println!("{}: cluster {cluster_id} formed", kind.name());

    // Placement: striped over the three racks, each broker the preferred leader of two of six.
    // Sent to node 2, which forwards it when it is not the active controller.
    assert_eq!(cluster.create_topic(2, "placed", 6).await, Some(0));
    let placed = cluster
        .wait_for(
            "the placed topic on node 3",
            Duration::from_secs(30),
            || async {
                let m = cluster.metadata(3, &["placed"]).await?;
                let t = m.topics.first().filter(|t| t.error_code == 0)?;
                (t.partitions.len() == 6).then(|| t.clone())
            },
        )
        .await;
    let mut preferred: BTreeMap<i32, usize> = BTreeMap::new();
    for p in &placed.partitions {
        let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
        let mut sorted = replicas.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 3], "partition {}", p.partition_index);
        *preferred.entry(replicas[0]).or_default() += 1;
    }
    assert_eq!(
        preferred.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2]
    );

    if kind == ClusterKind::KafkaIq {
        // The quorum through a broker: three voters, one leader.
        let p = cluster.describe_quorum(1).await.expect("DescribeQuorum");
        assert_eq!(p.current_voters.len(), 3);
        assert!(p.leader_id.0 >= 1);
    }

    // Leader kills: each round a fresh one-partition topic (its ISR all three brokers), its
    // leader killed with SIGKILL, the time until another node reports a new leader with a
    // higher epoch, then the node restarted and back in the cluster.
    let kills: usize = std::env::var("KAFKAIQ_FAILOVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut leader_failovers = Vec::new();
    for round in 0..kills {
        let topic = format!("failover-{round}");
        let creator = *cluster.running().first().unwrap();
        assert_eq!(cluster.create_topic(creator, &topic, 1).await, Some(0));
        let (leader, epoch, _) = cluster
            .wait_for("a full ISR", Duration::from_secs(30), || async {
                let s = cluster.partition_state(creator, &topic, 0).await?;
                (s.0 > 0 && s.2.len() == 3).then_some(s)
            })
            .await;
        let observer = *cluster.running().iter().find(|&&id| id != leader).unwrap();
        let killed_at = Instant::now();
        cluster.kill(leader);
        let (new_leader, new_epoch) = cluster
            .wait_for("a new leader", Duration::from_secs(60), || async {
                let (l, e, _) = cluster.partition_state(observer, &topic, 0).await?;
                (l > 0 && l != leader && e > epoch).then_some((l, e))
            })
            .await;
        let took = killed_at.elapsed();
        println!(
            "{}: round {round}: leader {leader} killed, {new_leader} leads at epoch {new_epoch} after {took:?}",
            kind.name()
        );
        leader_failovers.push(took);
        cluster.spawn(leader);
        cluster
            .wait_for("the restarted node back", Duration::from_secs(90), || {
                cluster.formed()
            })
            .await;
    }
    leader_failovers.sort();
    let p50 = percentile(&leader_failovers, 0.5);
    let p99 = percentile(&leader_failovers, 0.99);
    println!(
        "{}: kill -9 to new leader over {} kills: p50 {p50:?}, p99 {p99:?}, max {:?}",
        kind.name(),
        leader_failovers.len(),
        leader_failovers.last().unwrap()
    );

    // The active controller killed: another takes over, and CreateTopics works through any
    // node; the killed node rejoins.
    let old = cluster
        .wait_for("an active controller", Duration::from_secs(30), || async {
            cluster.controller_seen_by(1).await.filter(|c| *c > 0)
        })
        .await;
    let observer = *cluster.running().iter().find(|&&id| id != old).unwrap();
    let killed_at = Instant::now();
    cluster.kill(old);
    let new = cluster
        .wait_for(
            "a new active controller",
            Duration::from_secs(60),
            || async {
                cluster
                    .controller_seen_by(observer)
                    .await
                    .filter(|c| *c > 0 && *c != old)
            },
        )
        .await;
    let controller_failover = killed_at.elapsed();
    println!(
        "{}: active controller {old} killed, {new} active after {controller_failover:?}",
        kind.name()
    );
    let code = cluster
        .wait_for(
            "CreateTopics after the failover",
            Duration::from_secs(60),
            || async {
                cluster
                    .create_topic(observer, "after-failover", 3)
                    .await
                    .filter(|c| *c == 0)
            },
        )
        .await;
    assert_eq!(code, 0);
    cluster.spawn(old);
    cluster
        .wait_for("the old controller back", Duration::from_secs(90), || {
            cluster.formed()
        })
        .await;
    if kind == ClusterKind::KafkaIq {
        assert!(
            p99 < Duration::from_secs(1),
            "kill -9 to new leader p99 {p99:?} over {} kills",
            leader_failovers.len()
        );
        assert!(
            controller_failover < Duration::from_secs(2),
            "controller failover took {controller_failover:?}"
        );
    }
    cluster.stop_all();
}

/// A CreateTopics answer that shows the topic was committed. An earlier attempt that timed out
/// (its outcome unknown, as in Kafka) may have committed it, so a retry's TOPIC_ALREADY_EXISTS
/// counts as well; the name is new to the test, so nothing else could have created it.
fn created(code: i16) -> bool {
    code == 0 || code == 36
}

/// Five voters keep deciding with two of them down, the quorum leader among them; one voter
/// alone of three (a minority) decides nothing until a second returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_voters_survive_two_down_and_a_minority_decides_nothing() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "five", 5, &[]);
    cluster
        .wait_for(
            "five brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    let q = cluster.describe_quorum(1).await.expect("DescribeQuorum");
    assert_eq!(q.current_voters.len(), 5);
    let leader = q.leader_id.0;
    let other = (1..=5).find(|id| *id != leader).unwrap();
    cluster.kill(leader);
    cluster.kill(other);
    let via = (1..=5).find(|id| *id != leader && *id != other).unwrap();
    cluster
        .wait_for(
            "CreateTopics with two voters down",
            Duration::from_secs(30),
            || async {
                cluster
                    .create_topic(via, "three-of-five", 3)
                    .await
                    .filter(|c| created(*c))
            },
        )
        .await;
    let q = cluster.describe_quorum(via).await.expect("DescribeQuorum");
    assert!(q.leader_id.0 != leader && q.leader_id.0 != other);
    cluster.spawn(leader);
    cluster.spawn(other);
    cluster
        .wait_for("five brokers again", Duration::from_secs(90), || {
            cluster.formed()
        })
        .await;
    cluster.stop_all();

    // Three voters, two of them down: the one left cannot commit anything.
    let mut three = Cluster::start(ClusterKind::KafkaIq, "minority", 3, &[]);
    three
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || three.formed(),
        )
        .await;
    three.kill(2);
    three.kill(3);
    // (What the minority was asked may still commit later, once a majority is back and the
    // entry survives in the new leader's log: a timed-out request, as in Kafka, is not a
    // refused one.)
    let answer = three.create_topic(1, "minority", 1).await;
    assert_ne!(answer, Some(0), "a minority committed a topic");
    three.spawn(2);
    three
        .wait_for(
            "CreateTopics once a majority is back",
            Duration::from_secs(60),
            || async {
                // Two brokers are live, so replication factor 2: three would be refused
                // (INVALID_REPLICATION_FACTOR) until node 3 is back.
                three
                    .create_topic_with(1, "majority", 1, 2)
                    .await
                    .filter(|c| created(*c))
            },
        )
        .await;
    three.spawn(3);
    three
        .wait_for("three brokers again", Duration::from_secs(90), || {
            three.formed()
        })
        .await;
    three.stop_all();
}

/// A node that cannot finish starting (no quorum to unfence it) still obeys SIGTERM, exiting
/// cleanly within the harness's bound instead of hanging until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waiting_for_a_quorum_obeys_sigterm() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "alone", 3, &[]);
    cluster.kill(2);
    cluster.kill(3);
    cluster
        .wait_for(
            "node 1 waiting for a quorum",
            Duration::from_secs(60),
            || async {
                let node = &cluster.nodes[&1];
                let log = node.process.as_ref()?.log_text();
                log.contains("waiting for the metadata quorum")
                    .then_some(())
            },
        )
        .await;
    cluster.stop(1);
    cluster.stop_all();
}

/// One CreateTopics of 1,500 partitions (15 topics of 100, RF 3): every topic is created, every
/// partition is led with a full ISR on every node, and no broker is fenced on the way. Creating
/// that many replica logs once held the controller thread for seconds, the brokers' heartbeats
/// waited behind it, their lifecycle connections timed out and closed, and the controller
/// fenced them (so most topics failed with INVALID_REPLICATION_FACTOR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_create_topics_completes_without_fencing_a_broker() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    const TOPICS: usize = 15;
    const PARTITIONS: i32 = 100;
    let cluster = Cluster::start(ClusterKind::KafkaIq, "mass-create", 3, &[]);
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    let names: Vec<String> = (0..TOPICS).map(|t| format!("mass-{t:02}")).collect();
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(n.clone())))
                        .with_num_partitions(PARTITIONS)
                        .with_replication_factor(3)
                })
                .collect(),
        );
    let started = Instant::now();
    let mut client = common::RawClient::try_connect(cluster.nodes[&1].client_addr())
        .await
        .expect("connect to node 1");
    let answer = client
        .try_call(7, &request, Duration::from_secs(60))
        .await
        .expect("a CreateTopics answer");
    let errors: Vec<(String, i16)> = answer
        .topics
        .iter()
        .filter(|t| t.error_code != 0)
        .map(|t| (t.name.0.to_string(), t.error_code))
        .collect();
    assert!(errors.is_empty(), "topics not created: {errors:?}");
    let answered = started.elapsed();
    for id in [1, 2, 3] {
        cluster
            .wait_for(
                &format!("every partition led with a full ISR on node {id}"),
                Duration::from_secs(30),
                || async {
                    for name in &names {
                        let parts = cluster.partitions_seen_by(id, name).await?;
                        let complete = parts.len() == PARTITIONS as usize
                            && parts.values().all(|p| p.leader >= 1 && p.isr.len() == 3);
                        if !complete {
                            return None;
                        }
                    }
                    Some(())
                },
            )
            .await;
    }
    println!(
        "{} partitions x RF 3 in one request: answered in {answered:?}, complete everywhere in {:?}",
        TOPICS as i32 * PARTITIONS,
        started.elapsed()
    );
    for id in [1, 2, 3] {
        let log = cluster.log_text(id);
        assert!(
            !log.contains("fencing it"),
            "node {id} fenced a broker during the creation:\n{}",
            log.lines()
                .filter(|l| l.contains("fencing it"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
