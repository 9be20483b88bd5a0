//! `process.roles=broker` beside combined nodes: three voters and node 4, a broker only. It has
//! no controller listener and no voter; it learns the metadata log from the voters (an observer
//! of the quorum), registers and heartbeats like any broker, leads and follows partitions, and
//! forwards metadata changes. Runs against Apache Kafka too (`KAFKAIQ_CLUSTER_BROKER=kafka`).

use crate::common;

use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

const OBSERVER: i32 = 4;
const PARTITIONS: i32 = 8;

async fn create(cluster: &Cluster, via: i32, name: &str, partitions: i32) -> Option<i16> {
    let mut client = RawClient::try_connect(cluster.nodes[&via].client_addr()).await?;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
            .with_num_partitions(partitions)
            .with_replication_factor(3)]);
    let r = client
        .try_call(7, &request, Duration::from_secs(10))
        .await?;
    Some(r.topics[0].error_code)
}

/// (broker ids, active controller) in a Metadata answer from node `via`.
async fn brokers(cluster: &Cluster, via: i32) -> Option<(Vec<i32>, i32)> {
    let m = cluster.metadata(via, &[]).await?;
    let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    Some((ids, m.controller_id.0))
}

/// Partitions of `topic` with a leader and three in sync, as node `via` sees them; (partition,
/// leader, leader epoch).
async fn led(cluster: &Cluster, via: i32, topic: &str) -> Option<Vec<(i32, i32, i32)>> {
    let m = cluster.metadata(via, &[topic]).await?;
    let t = m.topics.first()?;
    let ready: Vec<(i32, i32, i32)> = t
        .partitions
        .iter()
        .filter(|p| p.error_code == 0 && p.leader_id.0 > 0 && p.isr_nodes.len() == 3)
        .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
        .collect();
    (ready.len() == PARTITIONS as usize).then_some(ready)
}

fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

/// Sends one record to each partition (acks=all), bootstrapped from `bootstrap`.
async fn send_each(bootstrap: &str, topic: &str, tag: &str) {
    let producer: FutureProducer = client_config(bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for p in 0..PARTITIONS {
        let value = format!("{tag}-{p}");
        producer
            .send(
                FutureRecord::<(), _>::to(topic)
                    .partition(p)
                    .payload(&value),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("send {value}: {e}"));
    }
}

/// Every value of `topic`, bootstrapped from `bootstrap`.
fn read_all(bootstrap: &str, topic: &str, expected: usize) -> Vec<String> {
    tokio::task::block_in_place(|| {
        let consumer: BaseConsumer = client_config(bootstrap)
            .set("group.id", "observer-test")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut values = Vec::new();
        while values.len() < expected {
            assert!(
                std::time::Instant::now() < deadline,
                "read {} of {expected} records of {topic}: {values:?}",
                values.len()
            );
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
                values.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
            }
        }
        values.sort();
        values
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_only_node_observes_the_quorum_and_serves_as_any_broker() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start_observed(kind, "observer", 3, 1, &[], |_| Vec::new());
    let (ids, _) = cluster
        .wait_for(
            "four brokers seen by node 1 and by the observer",
            Duration::from_secs(90),
            || async {
                let one = brokers(&cluster, 1).await?;
                let four = brokers(&cluster, OBSERVER).await?;
                (one.0 == vec![1, 2, 3, 4] && four.0 == one.0 && four.1 > 0).then_some(four)
            },
        )
        .await;
    assert_eq!(ids, vec![1, 2, 3, 4]);
    // The quorum, asked through the observer, has the three voters only.
    let quorum = cluster
        .wait_for("the quorum through node 4", Duration::from_secs(30), || {
            cluster.describe_quorum(OBSERVER)
        })
        .await;
    let mut voters: Vec<i32> = quorum
        .current_voters
        .iter()
        .map(|v| v.replica_id.0)
        .collect();
    voters.sort_unstable();
    assert_eq!(voters, vec![1, 2, 3]);
    assert!(
        RawClient::try_connect(
            format!("127.0.0.1:{}", cluster.nodes[&OBSERVER].controller_port)
                .parse()
                .unwrap()
        )
        .await
        .is_none(),
        "a broker-only node has no controller listener"
    );

    // A topic created through the observer (forwarded to the active controller) is placed on
    // all four brokers; the observer leads its share and takes writes and reads as leader.
    cluster
        .wait_for(
            "CreateTopics through node 4",
            Duration::from_secs(30),
            || async {
                create(&cluster, OBSERVER, "observed", PARTITIONS)
                    .await
                    .filter(|c| *c == 0)
            },
        )
        .await;
    let before = cluster
        .wait_for(
            "every partition led with three in sync",
            Duration::from_secs(60),
            || led(&cluster, OBSERVER, "observed"),
        )
        .await;
    let on_observer: Vec<i32> = before
        .iter()
        .filter(|(_, leader, _)| *leader == OBSERVER)
        .map(|(p, _, _)| *p)
        .collect();
    assert!(
        !on_observer.is_empty(),
        "node 4 is the preferred leader of some partitions: {before:?}"
    );
    let observer_only = format!("127.0.0.1:{}", cluster.nodes[&OBSERVER].client_port);
    send_each(&observer_only, "observed", "first").await;

    // kill -9 of the observer: its partitions move to other ISR members with higher epochs.
    cluster.kill(OBSERVER);
    let moved = cluster
        .wait_for(
            "node 4's partitions led elsewhere",
            Duration::from_secs(30),
            || async {
                let m = cluster.metadata(1, &["observed"]).await?;
                let parts = &m.topics.first()?.partitions;
                let all_moved = on_observer.iter().all(|p| {
                    parts.iter().any(|q| {
                        q.partition_index == *p && q.leader_id.0 > 0 && q.leader_id.0 != OBSERVER
                    })
                });
                all_moved.then(|| {
                    parts
                        .iter()
                        .map(|q| (q.partition_index, q.leader_epoch))
                        .collect::<Vec<_>>()
                })
            },
        )
        .await;
    for p in &on_observer {
        let old = before.iter().find(|b| b.0 == *p).unwrap().2;
        let new = moved.iter().find(|m| m.0 == *p).unwrap().1;
        assert!(new > old, "partition {p}: epoch {old} then {new}");
    }
    send_each(&cluster.bootstrap(), "observed", "second").await;

    // Restarted, it learns the log again from the voters, catches up and rejoins every ISR.
    cluster.spawn(OBSERVER);
    cluster
        .wait_for(
            "node 4 back in the ISR of each partition it hosts",
            Duration::from_secs(60),
            || async {
                let m = cluster.metadata(OBSERVER, &["observed"]).await?;
                let t = m.topics.first()?;
                t.partitions
                    .iter()
                    .filter(|p| p.replica_nodes.iter().any(|b| b.0 == OBSERVER))
                    .all(|p| p.isr_nodes.iter().any(|b| b.0 == OBSERVER))
                    .then_some(())
            },
        )
        .await;

    // kill -9 of the active controller: the observer follows the new one, and CreateTopics
    // through it keeps working.
    let (_, controller) = brokers(&cluster, OBSERVER).await.unwrap();
    assert!((1..=3).contains(&controller), "controller {controller}");
    cluster.kill(controller);
    cluster
        .wait_for(
            "a new active controller seen by node 4",
            Duration::from_secs(30),
            || async {
                let (_, c) = brokers(&cluster, OBSERVER).await?;
                (c > 0 && c != controller).then_some(())
            },
        )
        .await;
    cluster
        .wait_for(
            "CreateTopics through node 4 after the controller's kill",
            Duration::from_secs(30),
            || async {
                create(&cluster, OBSERVER, "after", 2)
                    .await
                    .filter(|c| *c == 0)
            },
        )
        .await;
    cluster.spawn(controller);

    // Nothing written was lost: 16 records, bootstrapped from the observer.
    let values = read_all(&observer_only, "observed", 2 * PARTITIONS as usize);
    let mut expected: Vec<String> = (0..PARTITIONS)
        .flat_map(|p| [format!("first-{p}"), format!("second-{p}")])
        .collect();
    expected.sort();
    assert_eq!(values, expected);
    cluster.stop_all();
}
