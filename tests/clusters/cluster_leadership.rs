//! Preferred leaders on three processes (issue 11): automatic rebalancing by imbalance ratio,
//! ElectLeaders through `kafka-leader-election`, a killed and restarted preferred leader,
//! controlled shutdown on SIGTERM, and `kafka-reassign-partitions`.
//!
//! The nodes run with `leader.imbalance.check.interval.seconds=3` and the default 10 %.
//! Imbalance is made without data replication: a reassignment that only reorders a partition's
//! replicas completes at once (every replica is in the ISR of a fresh topic) and leaves the old
//! leader leading a partition whose preferred replica is now another broker. That is how the
//! ratio threshold is shown: one broker at 1 imbalanced partition out of 11 or more (≤ 10 %)
//! keeps it, another at 2 (> 10 %) gets both back in the same pass.
//!
//! A killed preferred leader, restarted, catches up, rejoins the ISR of its partitions and
//! gets their leadership back (by the automatic rebalance or the ElectLeaders that races it),
//! both timed; a reassignment that adds a replica completes once the new replica has caught up.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ElectLeadersRequest,
    ListPartitionReassignmentsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const INTERVAL: Duration = Duration::from_secs(3);
const ELECTION_NOT_NEEDED: i16 = 84;
const LEADER_ELECTION: &str = "org.apache.kafka.tools.LeaderElectionCommand";
const REASSIGN: &str = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand";

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

/// AlterPartitionReassignments through node `id`: (topic, partition, target replicas); the
/// per-partition error codes.
async fn reassign(cluster: &Cluster, id: i32, moves: &[(&str, i32, Vec<i32>)]) -> Vec<i16> {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for (topic, partition, replicas) in moves {
        let p = ReassignablePartition::default()
            .with_partition_index(*partition)
            .with_replicas(Some(replicas.iter().map(|&b| BrokerId(b)).collect()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == *topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                ReassignableTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![p]),
            ),
        }
    }
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(topics);
    let mut client = RawClient::connect(cluster.nodes[&id].client_addr()).await;
    let r = client.call(0, &request).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

/// Partitions by broker: how many each is the preferred replica of, over `views`.
fn preferred_counts(views: &[Vec<common::cluster::PartitionView>]) -> BTreeMap<i32, usize> {
    let mut counts = BTreeMap::new();
    for p in views.iter().flatten() {
        *counts.entry(p.replicas[0]).or_default() += 1;
    }
    counts
}

/// A one-partition acks=all producer that follows the leader: after NOT_LEADER_OR_FOLLOWER or
/// an unreachable leader it sends to the leader the latest metadata names.
#[derive(Debug)]
struct Producer {
    leader: i32,
    first_leader: i32,
    acked: usize,
    not_leader: usize,
    unreachable: usize,
    timed_out: usize,
    other_errors: Vec<i16>,
    last_ack: Option<Instant>,
    longest_stall: Duration,
    /// A produce was acknowledged by another leader than the first.
    acked_by_other: bool,
}

impl Producer {
    fn new(leader: i32) -> Producer {
        Producer {
            leader,
            first_leader: leader,
            acked: 0,
            not_leader: 0,
            unreachable: 0,
            timed_out: 0,
            other_errors: Vec::new(),
            last_ack: None,
            longest_stall: Duration::ZERO,
            acked_by_other: false,
        }
    }

    async fn send(&mut self, cluster: &Cluster, topic: &str, partition: i32, latest: Option<i32>) {
        const NOT_LEADER_OR_FOLLOWER: i16 = 6;
        const PRODUCE_TIMEOUT: Duration = Duration::from_secs(5);
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT.as_millis() as i32)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(common::batch(&["during shutdown"], None)))])]);
        let sent = Instant::now();
        let answer = match RawClient::try_connect(cluster.nodes[&self.leader].client_addr()).await {
            Some(mut client) => {
                client
                    .try_call(9, &request, PRODUCE_TIMEOUT + Duration::from_secs(1))
                    .await
            }
            None => None,
        };
        let follow = |p: &mut Producer| {
            if let Some(l) = latest.filter(|l| *l > 0) {
                p.leader = l;
            }
        };
        match answer.map(|r| r.responses[0].partition_responses[0].error_code) {
            Some(0) => {
                let now = Instant::now();
                if let Some(last) = self.last_ack {
                    self.longest_stall = self.longest_stall.max(now - last);
                }
                self.last_ack = Some(now);
                self.acked += 1;
                self.acked_by_other |= self.leader != self.first_leader;
            }
            Some(NOT_LEADER_OR_FOLLOWER) => {
                self.not_leader += 1;
                follow(self);
            }
            Some(code) => self.other_errors.push(code),
            None if sent.elapsed() >= PRODUCE_TIMEOUT => self.timed_out += 1,
            None => {
                self.unreachable += 1;
                follow(self);
            }
        }
    }
}

async fn all_partitions(
    cluster: &Cluster,
    id: i32,
    topics: &[&str],
) -> Option<Vec<Vec<common::cluster::PartitionView>>> {
    let mut all = Vec::new();
    for t in topics {
        all.push(cluster.partitions(id, t).await?);
    }
    Some(all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_leaders_come_back_and_controlled_shutdown_hands_over_first() {
    let kind = ClusterKind::from_env();
    assert_eq!(
        kind,
        ClusterKind::KafkaIq,
        "the ratio threshold is KafkaIQ's (decision 2)"
    );
    let mut cluster = Cluster::start(
        kind,
        "leadership",
        3,
        &[
            "auto.leader.rebalance.enable=true",
            "leader.imbalance.check.interval.seconds=3",
            "leader.imbalance.per.broker.percentage=10",
        ],
    );
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;

    // Six partitions, RF 3: every broker preferred for two, each led by its preferred replica.
    assert_eq!(cluster.create_topic(1, "prefer", 6).await, Some(0));
    let prefer = cluster
        .wait_for(
            "prefer led by preferred replicas",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(2, "prefer").await?;
                (v.len() == 6
                    && v.iter()
                        .all(|p| p.isr.len() == 3 && p.leader == p.replicas[0]))
                .then_some(v)
            },
        )
        .await;

    // 1. Automatic rebalancing: prefer-0 reordered so that another broker is preferred; the
    // old leader keeps it until the next pass elects the new preferred replica.
    let p0 = &prefer[0];
    let old_leader = p0.leader;
    let target = vec![p0.replicas[1], p0.replicas[0], p0.replicas[2]];
    let new_preferred = target[0];
    assert_eq!(
        reassign(&cluster, 3, &[("prefer", 0, target.clone())]).await,
        vec![0]
    );
    let reordered_at = Instant::now();
    let leader_then = cluster
        .wait_for("prefer-0 reordered", Duration::from_secs(10), || async {
            let v = cluster.partitions(1, "prefer").await?;
            (v[0].replicas == target).then_some(v[0].leader)
        })
        .await;
    assert!(
        leader_then == old_leader || leader_then == new_preferred,
        "leader {leader_then}"
    );
    cluster
        .wait_for(
            "the preferred replica elected by the rebalancing pass",
            INTERVAL * 2 + Duration::from_secs(5),
            || async {
                let v = cluster.partitions(1, "prefer").await?;
                (v[0].leader == new_preferred).then_some(())
            },
        )
        .await;
    let took = reordered_at.elapsed();
    println!("rebalance: prefer-0 back on its preferred replica {new_preferred} after {took:?} (interval {INTERVAL:?})");
    assert!(took < INTERVAL + Duration::from_secs(2), "took {took:?}");

    // 2. The 10 % threshold, on 30 more partitions: broker `under` gets 1 imbalanced partition
    // (at most 10 % of those it is preferred for), broker `over` 2 (above 10 %). One pass moves
    // both of `over`'s and leaves `under`'s.
    assert_eq!(cluster.create_topic(2, "threshold", 30).await, Some(0));
    let views = cluster
        .wait_for(
            "threshold led by preferred replicas",
            Duration::from_secs(30),
            || async {
                let all = all_partitions(&cluster, 3, &["prefer", "threshold"]).await?;
                (all[1].len() == 30
                    && all
                        .iter()
                        .flatten()
                        .all(|p| p.isr.len() == 3 && p.leader == p.replicas[0]))
                .then_some(all)
            },
        )
        .await;
    let counts = preferred_counts(&views);
    let (source, under, over) = (1, 2, 3);
    let from_source: Vec<&common::cluster::PartitionView> = views[1]
        .iter()
        .filter(|p| p.replicas[0] == source)
        .collect();
    let front = |p: &common::cluster::PartitionView, b: i32| -> Vec<i32> {
        let mut r = vec![b];
        r.extend(p.replicas.iter().copied().filter(|&x| x != b));
        r
    };
    // Exact in integers, as the controller computes it.
    let exceeds = |imbalanced: usize, preferred: usize| imbalanced * 100 > 10 * preferred;
    assert!(!exceeds(1, counts[&under] + 1), "{counts:?}");
    assert!(exceeds(2, counts[&over] + 2), "{counts:?}");
    let u = from_source[0];
    let w = [from_source[1], from_source[2]];
    let moves = vec![
        ("threshold", u.partition, front(u, under)),
        ("threshold", w[0].partition, front(w[0], over)),
        ("threshold", w[1].partition, front(w[1], over)),
    ];
    assert_eq!(reassign(&cluster, 1, &moves).await, vec![0, 0, 0]);
    let after = cluster
        .wait_for(
            "the broker above 10 % rebalanced",
            INTERVAL * 2 + Duration::from_secs(5),
            || async {
                let v = cluster.partitions(2, "threshold").await?;
                let done = w.iter().all(|p| v[p.partition as usize].leader == over);
                done.then_some(v)
            },
        )
        .await;
    let kept = &after[u.partition as usize];
    assert_eq!(kept.replicas[0], under);
    assert_eq!(
        kept.leader,
        source,
        "broker {under} at 1 of {} imbalanced (≤ 10 %) keeps its imbalance",
        counts[&under] + 1
    );
    println!(
        "threshold: broker {over} at 2/{} rebalanced, broker {under} at 1/{} left as is",
        counts[&over] + 2,
        counts[&under] + 1
    );

    // 3. kafka-leader-election: a preferred election moves `under`'s partition at once; a
    // second run finds nothing to do.
    let (code, out) = cluster.kafka_tool(
        LEADER_ELECTION,
        &["--election-type", "preferred", "--all-topic-partitions"],
    );
    assert_eq!(code, 0, "{out}");
    let expected = format!(
        "Successfully completed leader election (PREFERRED) for partitions threshold-{}",
        u.partition
    );
    assert!(out.lines().any(|l| l == expected), "{out}");
    cluster
        .wait_for(
            "the elected leader in metadata",
            Duration::from_secs(2),
            || async {
                let v = cluster.partitions(3, "threshold").await?;
                (v[u.partition as usize].leader == under).then_some(())
            },
        )
        .await;
    let partition_arg = u.partition.to_string();
    let (code, out) = cluster.kafka_tool(
        LEADER_ELECTION,
        &[
            "--election-type",
            "preferred",
            "--topic",
            "threshold",
            "--partition",
            &partition_arg,
        ],
    );
    assert_eq!(code, 0, "{out}");
    let expected = format!(
        "Valid replica already elected for partitions threshold-{}",
        u.partition
    );
    assert!(out.lines().any(|l| l == expected), "{out}");

    // 4. kill -9 of a broker leading two partitions of prefer, and a restart. Its leaderships
    // move to other ISR members; once back it catches up, rejoins their ISRs and leads them
    // again.
    let prefer = cluster.partitions(1, "prefer").await.unwrap();
    let mut led: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in &prefer {
        led.entry(p.leader).or_default().push(p.partition);
    }
    let (&victim, victim_partitions) = led
        .iter()
        .find(|(_, ps)| ps.len() == 2)
        .expect("a broker leading two");
    let victim_partitions = victim_partitions.clone();
    let observer = if victim == 1 { 2 } else { 1 };
    let killed_at = Instant::now();
    cluster.kill(victim);
    cluster
        .wait_for(
            "new leaders for the killed broker's partitions",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(observer, "prefer").await?;
                victim_partitions
                    .iter()
                    .all(|&p| v[p as usize].leader > 0 && v[p as usize].leader != victim)
                    .then_some(())
            },
        )
        .await;
    println!(
        "kill -9 of broker {victim}: its partitions led elsewhere after {:?}",
        killed_at.elapsed()
    );
    let restarted_at = Instant::now();
    cluster.spawn(victim);
    cluster
        .wait_for("the restarted broker back", Duration::from_secs(90), || {
            cluster.formed()
        })
        .await;
    cluster
        .wait_for(
            "the restarted broker back in its partitions' ISRs",
            Duration::from_secs(60),
            || async {
                let v = cluster.partitions(observer, "prefer").await?;
                victim_partitions
                    .iter()
                    .all(|&p| v[p as usize].isr.contains(&victim))
                    .then_some(())
            },
        )
        .await;
    let rejoined = restarted_at.elapsed();
    // A preferred election now succeeds, unless the automatic rebalance got there first.
    let request = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(name("prefer"))
            .with_partitions(victim_partitions.clone())]));
    let mut client = RawClient::connect(cluster.nodes[&observer].client_addr()).await;
    let r = client.call(2, &request).await;
    for result in &r.replica_election_results[0].partition_result {
        assert!(
            result.error_code == 0 || result.error_code == ELECTION_NOT_NEEDED,
            "{result:?}"
        );
    }
    cluster
        .wait_for(
            "the restarted broker leading its partitions again",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(observer, "prefer").await?;
                victim_partitions
                    .iter()
                    .all(|&p| v[p as usize].leader == victim)
                    .then_some(())
            },
        )
        .await;
    println!(
        "restart of broker {victim}: back in the ISRs after {rejoined:?}, leading again after {:?}",
        restarted_at.elapsed()
    );

    // 5. Controlled shutdown: SIGTERM of a broker that leads partitions; while it shuts down
    // every partition always has a leader, and it leads nothing before its process exits.
    let views = all_partitions(&cluster, observer, &["prefer", "threshold"])
        .await
        .unwrap();
    let mut leads: BTreeMap<i32, usize> = BTreeMap::new();
    for p in views.iter().flatten() {
        *leads.entry(p.leader).or_default() += 1;
    }
    let (&leaving, &count) = leads
        .iter()
        .filter(|(b, _)| **b != observer)
        .max_by_key(|(_, n)| **n)
        .unwrap();
    // A producer (acks=all) on one of its partitions, between observations: it follows the
    // leader through NOT_LEADER_OR_FOLLOWER and metadata, and never waits out a time-out.
    let (produced_topic, produced_partition) = ["prefer", "threshold"]
        .iter()
        .zip(&views)
        .flat_map(|(t, v)| v.iter().map(move |p| (*t, p)))
        .find(|(_, p)| p.leader == leaving)
        .map(|(t, p)| (t, p.partition))
        .unwrap();
    let mut producer = Producer::new(leaving);
    let stopping = cluster.stop_in_background(leaving);
    let term_at = Instant::now();
    let mut handed_over: Option<Duration> = None;
    let mut observations = 0;
    let mut exited_at = None;
    loop {
        let exited = stopping.is_finished();
        if exited && exited_at.is_none() {
            exited_at = Some(term_at.elapsed());
        }
        let mut current_leader = None;
        if let Some(all) = all_partitions(&cluster, observer, &["prefer", "threshold"]).await {
            observations += 1;
            let topic_index = usize::from(produced_topic == "threshold");
            current_leader = Some(all[topic_index][produced_partition as usize].leader);
            let leaderless: Vec<String> = all
                .iter()
                .flatten()
                .filter(|p| p.leader < 0)
                .map(|p| format!("{p:?}"))
                .collect();
            assert!(
                leaderless.is_empty(),
                "leaderless during controlled shutdown: {leaderless:?}"
            );
            if handed_over.is_none() && all.iter().flatten().all(|p| p.leader != leaving) {
                handed_over = Some(term_at.elapsed());
                assert!(
                    !exited,
                    "broker {leaving} exited before it was seen leading nothing"
                );
            }
        }
        producer
            .send(&cluster, produced_topic, produced_partition, current_leader)
            .await;
        if exited && producer.acked_by_other {
            break;
        }
        assert!(
            term_at.elapsed() < Duration::from_secs(40),
            "SIGTERM not obeyed, or no produce acknowledged by the new leader: {producer:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exited_after = exited_at.unwrap();
    assert_eq!(producer.timed_out, 0, "{producer:?}");
    assert!(producer.other_errors.is_empty(), "{producer:?}");
    println!(
        "controlled shutdown: producer on {produced_topic}-{produced_partition}: {} acked, {} NOT_LEADER_OR_FOLLOWER, {} unreachable, 0 timed out; longest stall between acks {:?}",
        producer.acked, producer.not_leader, producer.unreachable, producer.longest_stall
    );
    stopping.join().unwrap().unwrap();
    let handed_over = handed_over.expect("leaderships moved before exit");
    assert!(
        cluster
            .log_text(leaving)
            .contains("controlled shutdown complete"),
        "{}",
        cluster.log_text(leaving)
    );
    println!(
        "controlled shutdown of broker {leaving} ({count} leaderships): led nothing after {handed_over:?}, exited after {exited_after:?}, {observations} metadata observations, none leaderless"
    );
    cluster.spawn(leaving);
    cluster
        .wait_for("the stopped broker back", Duration::from_secs(90), || {
            cluster.formed()
        })
        .await;

    // 6. kafka-reassign-partitions: a reassignment that removes the leader completes at once
    // and moves leadership; one that adds a replica (RF 2 → 3) completes once the new replica
    // has caught up and joined the ISR. Nothing written before either is lost.
    assert_eq!(cluster.create_topic_with(1, "moving", 1, 2).await, Some(0));
    assert_eq!(cluster.create_topic_with(1, "growing", 1, 2).await, Some(0));
    let (moving, growing) = cluster
        .wait_for("two RF 2 topics", Duration::from_secs(30), || async {
            let m = cluster.partitions(2, "moving").await?;
            let g = cluster.partitions(2, "growing").await?;
            (m[0].isr.len() == 2 && g[0].isr.len() == 2 && m[0].leader > 0 && g[0].leader > 0)
                .then(|| (m[0].clone(), g[0].clone()))
        })
        .await;
    // Records written before the moves must all be there after them.
    const WRITTEN: usize = 5;
    for (topic, leader) in [("moving", moving.leader), ("growing", growing.leader)] {
        let mut producer = Producer::new(leader);
        while producer.acked < WRITTEN {
            producer.send(&cluster, topic, 0, None).await;
            assert!(
                producer.other_errors.is_empty() && producer.timed_out == 0,
                "{topic}: {producer:?}"
            );
        }
    }
    let records_in = |id: i32, topic: &str| {
        let log = cluster.log_bytes(id, topic, 0);
        log.windows(b"during shutdown".len())
            .filter(|w| *w == b"during shutdown")
            .count()
    };
    let keep = moving.replicas[1];
    let added = (1..=3).find(|b| !growing.replicas.contains(b)).unwrap();
    let mut grown = growing.replicas.clone();
    grown.push(added);
    let json = format!(
        r#"{{"version":1,"partitions":[{{"topic":"moving","partition":0,"replicas":[{keep}]}},{{"topic":"growing","partition":0,"replicas":{grown:?}}}]}}"#
    );
    let file = cluster.root.join("reassign.json");
    std::fs::write(&file, json).unwrap();
    let file = file.to_str().unwrap();
    let (code, out) =
        cluster.kafka_tool(REASSIGN, &["--execute", "--reassignment-json-file", file]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Successfully started partition reassignments for moving-0,growing-0")
            || out.contains("Successfully started partition reassignment"),
        "{out}"
    );
    cluster
        .wait_for(
            "moving-0 led by the replica kept",
            Duration::from_secs(10),
            || async {
                let m = cluster.partitions(3, "moving").await?;
                (m[0].replicas == vec![keep] && m[0].leader == keep).then_some(())
            },
        )
        .await;
    cluster
        .wait_for(
            "growing-0 on three replicas",
            Duration::from_secs(30),
            || async {
                let g = cluster.partitions(3, "growing").await?;
                let mut isr = g[0].isr.clone();
                isr.sort_unstable();
                (g[0].replicas == grown && isr == vec![1, 2, 3]).then_some(())
            },
        )
        .await;
    let (_, out) = cluster.kafka_tool(REASSIGN, &["--verify", "--reassignment-json-file", file]);
    assert!(
        out.contains("Reassignment of partition moving-0 is completed."),
        "{out}"
    );
    assert!(
        out.contains("Reassignment of partition growing-0 is completed."),
        "{out}"
    );
    let mut client = RawClient::connect(cluster.nodes[&2].client_addr()).await;
    let list = client
        .call(
            0,
            &ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000),
        )
        .await;
    assert!(list.topics.is_empty(), "{:?}", list.topics);
    assert_eq!(records_in(keep, "moving"), WRITTEN, "moving-0 on {keep}");
    cluster
        .wait_for(
            "growing-0's three replicas holding the same bytes",
            Duration::from_secs(10),
            || async {
                let logs: Vec<Vec<u8>> = grown
                    .iter()
                    .map(|&id| cluster.log_bytes(id, "growing", 0))
                    .collect();
                logs.iter().all(|l| l == &logs[0]).then_some(())
            },
        )
        .await;
    assert_eq!(
        records_in(added, "growing"),
        WRITTEN,
        "growing-0 on {added}"
    );
    println!("reassignment: moving-0 moved to [{keep}] and its leader with it; growing-0 grew to {grown:?}; the {WRITTEN} records written before each are all there");

    cluster.stop_all();
}

/// Kafka's rule for the end of a controlled shutdown: the controller lets the broker go only
/// once every other active broker has reported (in its heartbeats) replaying the metadata past
/// the point where the broker leads nothing, so the new leaders know they lead before the old
/// one stops. A third broker stopped with SIGSTOP is still active (its session has seconds
/// left, its connection is open) but replays nothing: the shutting-down broker, leading
/// nothing, keeps running until that broker resumes, then exits at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controlled_shutdown_ends_once_the_other_brokers_have_replayed_it() {
    let mut cluster = Cluster::start(ClusterKind::KafkaIq, "shutdown-replay", 3, &[]);
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    assert_eq!(cluster.create_topic(1, "handover", 3).await, Some(0));
    cluster
        .wait_for(
            "handover led by preferred replicas with full ISRs",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(1, "handover").await?;
                (v.len() == 3
                    && v.iter()
                        .all(|p| p.isr.len() == 3 && p.leader == p.replicas[0]))
                .then_some(())
            },
        )
        .await;
    // Neither the leaving nor the stopped broker is the active controller, whose loss would
    // be a controller failover instead.
    let controller = cluster
        .wait_for("an active controller", Duration::from_secs(30), || async {
            cluster.controller_seen_by(1).await.filter(|&c| c > 0)
        })
        .await;
    let others: Vec<i32> = (1..=3).filter(|&n| n != controller).collect();
    let (leaving, frozen) = (others[0], others[1]);

    cluster.signal(frozen, libc::SIGSTOP);
    let stopping = cluster.stop_in_background(leaving);
    let term_at = Instant::now();
    cluster
        .wait_for(
            "the leaving broker leads nothing",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(controller, "handover").await?;
                v.iter().all(|p| p.leader != leaving).then_some(())
            },
        )
        .await;
    let moved_after = term_at.elapsed();
    // Well inside the stopped broker's session (broker.session.timeout.ms, 9 s) and the
    // shutdown's own bound (the same), the leaving broker must still be there.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(2) {
        assert!(
            !stopping.is_finished(),
            "broker {leaving} exited {:?} after SIGTERM while broker {frozen} (stopped) had not replayed its handover",
            term_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.signal(frozen, libc::SIGCONT);
    let resumed_at = Instant::now();
    cluster
        .wait_for(
            "the leaving broker exits once the other has replayed",
            Duration::from_secs(8),
            || async { stopping.is_finished().then_some(()) },
        )
        .await;
    let exited_after_resume = resumed_at.elapsed();
    stopping.join().unwrap().unwrap();
    let log = cluster.log_text(leaving);
    assert!(
        log.contains("the controller lets this broker shut down"),
        "broker {leaving} was not let go by the controller: {}",
        cluster.log_tail(leaving, 30)
    );
    println!(
        "controlled shutdown of broker {leaving} with broker {frozen} stopped: led nothing {moved_after:?} after SIGTERM, exited {exited_after_resume:?} after broker {frozen} resumed"
    );
    cluster.stop_all();
}
