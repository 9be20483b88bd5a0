//! Leadership balanced by measured load on three processes (issue 33):
//! `kafkaiq.leader.balancer=load`, a 2 s check interval, no dwell and loads taken once measured
//! for 4 s. Uniform produce load
//! over a topic whose partitions are spread by count moves nothing for several intervals; a
//! skewed idempotent acks=all load on the partitions one broker leads then moves leadership off
//! that broker, every acknowledged record is in the log exactly once (the log end offsets equal
//! the acknowledged counts), every node's leadership history gives each move's reason with its
//! numbers, and the produce stall of each moved partition is printed.
//!
//! With `KAFKAIQ_TEST_BALANCER=count` the nodes run Kafka's count balancing and the test fails
//! waiting for the move (the check that it tests the balancer).

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    InitProducerIdRequest, ListOffsetsRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "skew";
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const INTERVAL: Duration = Duration::from_secs(2);

fn name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// One partition's idempotent producer: the same batch (same sequence) is resent until it is
/// acknowledged, following the leader, so a retry across a leader move is deduplicated.
struct PartitionProducer {
    partition: i32,
    leader: i32,
    producer: (i64, i16),
    sequence: i32,
    acked_records: i64,
    last_ack: Option<Instant>,
    /// The gaps between acknowledgements that spanned a leader change.
    stalls: Vec<Duration>,
    leader_changed: bool,
}

const RECORDS_PER_BATCH: usize = 10;

impl PartitionProducer {
    /// Sends one batch until it is acknowledged (bounded by `deadline`).
    async fn send_one(&mut self, cluster: &Cluster, value: &str, deadline: Instant) {
        let values = vec![value; RECORDS_PER_BATCH];
        let records = common::batch(
            &values,
            Some((self.producer.0, self.producer.1, self.sequence)),
        );
        loop {
            assert!(
                Instant::now() < deadline,
                "partition {} never acknowledged",
                self.partition
            );
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(5_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name())
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(self.partition)
                        .with_records(Some(records.clone()))])]);
            let answer =
                match RawClient::try_connect(cluster.nodes[&self.leader].client_addr()).await {
                    Some(mut c) => c.try_call(9, &request, Duration::from_secs(6)).await,
                    None => None,
                };
            match answer.map(|r| r.responses[0].partition_responses[0].error_code) {
                Some(0) => {
                    let now = Instant::now();
                    if self.leader_changed {
                        if let Some(last) = self.last_ack {
                            self.stalls.push(now - last);
                        }
                        self.leader_changed = false;
                    }
                    self.last_ack = Some(now);
                    self.sequence += RECORDS_PER_BATCH as i32;
                    self.acked_records += RECORDS_PER_BATCH as i64;
                    return;
                }
                Some(NOT_LEADER_OR_FOLLOWER) | None => {
                    if let Some(v) = cluster.partitions(1, TOPIC).await {
                        let leader = v[self.partition as usize].leader;
                        if leader > 0 && leader != self.leader {
                            self.leader = leader;
                            self.leader_changed = true;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Some(code) => panic!("partition {}: produce error {code}", self.partition),
            }
        }
    }
}

async fn log_end(cluster: &Cluster, leader: i32, partition: i32) -> i64 {
    let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name())
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    let r = client.call(1, &request).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "{r:?}");
    p.offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_load_moves_leadership_off_the_busiest_broker_and_uniform_load_moves_nothing() {
    let kind = ClusterKind::from_env();
    assert_eq!(kind, ClusterKind::KafkaIq, "the load balancer is KafkaIQ's");
    let balancer = std::env::var("KAFKAIQ_TEST_BALANCER").unwrap_or_else(|_| "load".into());
    let balancer_line = format!("kafkaiq.leader.balancer={balancer}");
    let mut cluster = Cluster::start(
        kind,
        "load-balancer",
        3,
        &[
            &balancer_line,
            "leader.imbalance.check.interval.seconds=2",
            "kafkaiq.leader.balancer.min.dwell.ms=0",
            "kafkaiq.leader.balancer.min.measured.ms=4000",
            // The producers write as fast as acks=all allows: bound the disk they take (the
            // log end offsets checked stay the same when old segments go).
            "log.segment.bytes=16777216",
            "log.retention.bytes=33554432",
            "log.retention.check.interval.ms=1000",
        ],
    );
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    assert_eq!(cluster.create_topic(1, TOPIC, 6).await, Some(0));
    let views = cluster
        .wait_for(
            "skew led by its preferred replicas",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(2, TOPIC).await?;
                (v.len() == 6
                    && v.iter()
                        .all(|p| p.isr.len() == 3 && p.leader == p.replicas[0]))
                .then_some(v)
            },
        )
        .await;
    let leaders_before: Vec<i32> = views.iter().map(|p| p.leader).collect();
    let producer = cluster
        .wait_for("a producer id", Duration::from_secs(30), || async {
            let mut c = RawClient::try_connect(cluster.nodes[&1].client_addr()).await?;
            let r = c
                .call(
                    4,
                    &InitProducerIdRequest::default()
                        .with_transactional_id(None)
                        .with_transaction_timeout_ms(-1),
                )
                .await;
            (r.error_code == 0).then_some((r.producer_id.0, r.producer_epoch))
        })
        .await;
    let mut producers: BTreeMap<i32, PartitionProducer> = views
        .iter()
        .map(|p| {
            (
                p.partition,
                PartitionProducer {
                    partition: p.partition,
                    leader: p.leader,
                    producer,
                    sequence: 0,
                    acked_records: 0,
                    last_ack: None,
                    stalls: Vec::new(),
                    leader_changed: false,
                },
            )
        })
        .collect();
    let value = "x".repeat(2_000);

    // 1. Uniform: every partition the same load for three intervals; nothing moves.
    let uniform_until = Instant::now() + INTERVAL * 3 + Duration::from_secs(2);
    while Instant::now() < uniform_until {
        for p in producers.values_mut() {
            p.send_one(&cluster, &value, uniform_until + Duration::from_secs(30))
                .await;
        }
    }
    let leaders_uniform: Vec<i32> = cluster
        .partitions(2, TOPIC)
        .await
        .expect("partitions")
        .iter()
        .map(|p| p.leader)
        .collect();
    assert_eq!(
        leaders_uniform, leaders_before,
        "uniform load moved leadership"
    );

    // 2. Skewed: only the partitions broker `hot` leads get load, until one of them moves.
    let hot = leaders_before[0];
    let hot_partitions: Vec<i32> = views
        .iter()
        .filter(|p| p.leader == hot)
        .map(|p| p.partition)
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(90);
    let moved = loop {
        assert!(
            Instant::now() < deadline,
            "no leadership moved off broker {hot} within 90 s of skewed load"
        );
        for &p in &hot_partitions {
            producers
                .get_mut(&p)
                .unwrap()
                .send_one(&cluster, &value, deadline + Duration::from_secs(30))
                .await;
        }
        if let Some(v) = cluster.partitions(2, TOPIC).await {
            let moved: Vec<_> = v
                .iter()
                .filter(|p| hot_partitions.contains(&p.partition) && p.leader != hot)
                .map(|p| (p.partition, p.leader, p.replicas.clone()))
                .collect();
            if !moved.is_empty() {
                break moved;
            }
        }
    };
    println!(
        "load balancer: moved {moved:?} off broker {hot} after {:?} of skewed load",
        started.elapsed()
    );
    for (partition, leader, replicas) in &moved {
        assert_eq!(
            replicas[0], *leader,
            "the new leader is the preferred replica"
        );
        // Keep producing to the moved partition so its stall is measured.
        let p = producers.get_mut(partition).unwrap();
        p.send_one(&cluster, &value, Instant::now() + Duration::from_secs(30))
            .await;
        println!(
            "load balancer: produce stall of {TOPIC}-{partition} across its move: {:?}",
            p.stalls
        );
    }

    // Every node's leadership history tells why, with the numbers: the reason travels in the
    // metadata log with the move.
    for (partition, leader, _) in &moved {
        let path = format!("/api/history/{TOPIC}-{partition}");
        for (&id, node) in &cluster.nodes {
            let (addr, path, leader) = (node.http_addr(), &path, *leader);
            let description = cluster
                .wait_for(
                    &format!("node {id}'s history of {TOPIC}-{partition}"),
                    Duration::from_secs(30),
                    || async move {
                        let (status, _, body) = common::http::get(addr, path).await;
                        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                        let change = v["changes"]
                            .as_array()?
                            .iter()
                            .find(|c| c["cause"] == "load_balance" && c["leader"] == leader)?
                            .clone();
                        (status == 200).then_some(())?;
                        change["description"].as_str().map(str::to_owned)
                    },
                )
                .await;
            let want = format!("leader {hot} → {leader}: load balancer: broker {hot} at ");
            assert!(
                description.starts_with(&want)
                    && description.contains("× the mean ")
                    && description.contains(&format!("to broker {leader}, in-sync")),
                "node {id}: {description}"
            );
        }
    }

    // 3. Every acknowledged record is there exactly once (idempotent retries deduplicated).
    let views = cluster.partitions(2, TOPIC).await.expect("partitions");
    for p in &views {
        let end = log_end(&cluster, p.leader, p.partition).await;
        assert_eq!(
            end, producers[&p.partition].acked_records,
            "{TOPIC}-{}: log end vs acknowledged records",
            p.partition
        );
    }
    cluster.stop_all();
}
