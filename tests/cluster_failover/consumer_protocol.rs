//! A KIP-848 consumer group (librdkafka) on three nodes while every node, the group coordinator
//! among them, is killed with SIGKILL and restarted in turn. The group starts with two members
//! of the classic protocol and is upgraded when a member of the consumer protocol joins; later
//! that member leaves (the group converts back to classic) and another joins (upgraded again).
//! The group's state comes back from `__consumer_offsets` (replicated three ways) on the next
//! coordinator, no partition is ever owned by two members, and with manual commits every record
//! is read exactly once.
//!
//! With `KAFKAIQ_CLUSTER_BROKER=kafka` the same test runs against Apache Kafka.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::common::cluster::{Cluster, ClusterKind};
use crate::common::group_members::{assert_owned_once_and_read_once, Running, Shared};

const TOPIC: &str = "kip848-failover";
const GROUP: &str = "kip848-failover-g";
const PARTITIONS: i32 = 6;
const DEADLINE: Duration = Duration::from_secs(120);

/// Produces numbered values (idempotent, acks=all) to `topic` until told to stop; returns the
/// values acknowledged.
pub(crate) fn producer(
    bootstrap: String,
    topic: &'static str,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeSet<String>>>,
    count: Arc<AtomicUsize>,
) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .create()
        .expect("producer");
    let mut sent: Vec<String> = Vec::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..20 {
            let v = format!("v{i}");
            i += 1;
            loop {
                match p.send(BaseRecord::<str, str>::to(topic).key(&v).payload(&v)) {
                    Ok(()) => break,
                    Err(_) => {
                        p.poll(Duration::from_millis(10));
                    }
                }
            }
            sent.push(v);
        }
        p.poll(Duration::from_millis(20));
    }
    p.flush(Duration::from_secs(120)).expect("flush");
    // With idempotence and a flush that succeeded, every value sent was acknowledged.
    count.store(sent.len(), Ordering::Relaxed);
    acked.lock().unwrap().extend(sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_protocol_group_reads_everything_once_through_node_kills() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "kip848",
        3,
        &[
            "replica.lag.time.max.ms=4000",
            "offsets.topic.num.partitions=3",
            "offsets.topic.replication.factor=3",
            "group.consumer.min.heartbeat.interval.ms=500",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.min.session.timeout.ms=6000",
            "group.consumer.session.timeout.ms=6000",
        ],
    );
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    assert_eq!(
        cluster
            .create_topic_configured(1, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")])
            .await,
        Some(0)
    );
    let bootstrap = cluster.bootstrap();
    let shared = Arc::new(Shared::default());
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let produced = Arc::new(AtomicUsize::new(0));
    let prod = {
        let (b, s, a, c) = (
            bootstrap.clone(),
            stop.clone(),
            acked.clone(),
            produced.clone(),
        );
        std::thread::spawn(move || producer(b, TOPIC, s, a, c))
    };
    let seen_count = |shared: &Shared| shared.seen.lock().unwrap().len();
    let mut members: Vec<Running> = ["a", "b"]
        .iter()
        .map(|n| Running::start_with(&bootstrap, GROUP, n, TOPIC, &shared, "classic"))
        .collect();
    let assigned = |ms: &[Running]| ms.iter().map(Running::size).sum::<usize>();
    cluster
        .wait_for("the classic members own every partition", DEADLINE, || {
            let done = assigned(&members) == PARTITIONS as usize;
            async move { done.then_some(()) }
        })
        .await;
    // A member of the consumer protocol joins: the classic group is upgraded.
    members.push(Running::start(&bootstrap, GROUP, "c", TOPIC, &shared));
    cluster
        .wait_for("the three members own every partition", DEADLINE, || {
            let done =
                assigned(&members) == PARTITIONS as usize && members.iter().all(|m| m.size() > 0);
            async move { done.then_some(()) }
        })
        .await;

    for victim in 1..=3 {
        let before = seen_count(&shared);
        cluster
            .wait_for("the group reading", DEADLINE, || {
                let done = seen_count(&shared) >= before + 200;
                async move { done.then_some(()) }
            })
            .await;
        cluster.kill(victim);
        cluster.spawn(victim);
        cluster.await_listening(victim);
        if victim == 2 {
            // The consumer-protocol member leaves (the group converts back to classic) and a
            // new one joins (upgraded again) while nodes come and go.
            let gone = members.remove(2);
            tokio::task::spawn_blocking(move || gone.close())
                .await
                .expect("leave");
            members.push(Running::start(&bootstrap, GROUP, "d", TOPIC, &shared));
        }
    }
    let before = seen_count(&shared);
    cluster
        .wait_for("the group reading after the last restart", DEADLINE, || {
            let done = seen_count(&shared) >= before + 200;
            async move { done.then_some(()) }
        })
        .await;
    stop.store(true, Ordering::Relaxed);
    tokio::task::spawn_blocking(move || prod.join().expect("producer"))
        .await
        .expect("producer");
    let expected = acked.lock().unwrap().clone();
    assert_eq!(expected.len(), produced.load(Ordering::Relaxed));
    cluster
        .wait_for("every acknowledged record read", DEADLINE, || {
            let seen = shared.seen.lock().unwrap();
            let done = expected.iter().all(|v| seen.contains_key(v));
            async move { done.then_some(()) }
        })
        .await;
    for m in members {
        tokio::task::spawn_blocking(move || m.close())
            .await
            .expect("close");
    }
    assert_owned_once_and_read_once(&shared, &expected);
}
