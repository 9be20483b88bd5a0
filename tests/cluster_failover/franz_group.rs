//! franz-go's consumer group (`integration/programs/group-member-go`, one process per member) on
//! three nodes while the group's coordinator is killed with SIGKILL, twice, and restarted:
//! another node takes the group over from `__consumer_offsets` (replicated three ways), the
//! members carry on, no partition is ever owned by two members and with manual commits every
//! record is read exactly once (`common::group_members`). The group rolls between the protocols
//! meanwhile: two classic members, a KIP-848 member joins (the group is upgraded); after the
//! second kill it leaves (downgraded) and another KIP-848 member joins (upgraded again).
//!
//! With `KAFKAIQ_CLUSTER_BROKER=kafka` the same test runs against Apache Kafka.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use crate::common::cluster::{Cluster, ClusterKind};
use crate::common::franz_members::{GoMember, Subscription};
use crate::common::group_members::{assert_owned_once_and_read_once, Shared};
use crate::common::RawClient;
use crate::consumer_protocol::producer;

const TOPIC: &str = "fgo-failover";
const GROUP: &str = "fgo-failover-g";
const PARTITIONS: usize = 6;
const DEADLINE: Duration = Duration::from_secs(120);

/// The group's coordinator as some running node answers FindCoordinator, or `None`.
async fn coordinator(cluster: &Cluster) -> Option<i32> {
    for id in cluster.running() {
        let Some(mut c) = RawClient::try_connect(cluster.nodes[&id].client_addr()).await else {
            continue;
        };
        let request = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_static_str(GROUP)]);
        let r: Option<FindCoordinatorResponse> =
            c.try_call(4, &request, Duration::from_secs(2)).await;
        if let Some(found) = r.as_ref().and_then(|r| r.coordinators.first()) {
            if found.error_code == 0 {
                return Some(found.node_id.0);
            }
        }
    }
    None
}

fn spoke_only(m: &GoMember, protocol: &str) {
    let spoken = m.protocols();
    assert!(
        spoken.len() == 1 && spoken.contains(protocol),
        "{}: {spoken:?}",
        m.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_franz_go_group_reads_everything_once_through_coordinator_kills() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "franz848",
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
            .create_topic_configured(
                1,
                TOPIC,
                PARTITIONS as i32,
                3,
                &[("min.insync.replicas", "2")]
            )
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
    // Progress is records read and committed: a commit after a kill went to the new coordinator.
    let committed_count = |shared: &Shared| shared.committed.lock().unwrap().len();
    let start = |name: &str, protocol: &str| {
        GoMember::start(
            &bootstrap,
            GROUP,
            name,
            Subscription::Topics(&[TOPIC]),
            protocol,
            &shared,
        )
    };
    let all_own = |members: &[GoMember]| {
        members.iter().map(GoMember::size).sum::<usize>() == PARTITIONS
            && members.iter().all(|m| m.size() > 0)
    };
    let mut members: Vec<GoMember> = vec![start("a", "classic"), start("b", "classic")];
    cluster
        .wait_for("the classic members own every partition", DEADLINE, || {
            let done = all_own(&members);
            async move { done.then_some(()) }
        })
        .await;
    // A member of the consumer protocol joins: the classic group is upgraded.
    members.push(start("c", "consumer"));
    cluster
        .wait_for("the three members own every partition", DEADLINE, || {
            let done = all_own(&members);
            async move { done.then_some(()) }
        })
        .await;

    for round in 1..=2 {
        let before = committed_count(&shared);
        cluster
            .wait_for("the group reading and committing", DEADLINE, || {
                let done = committed_count(&shared) >= before + 200;
                async move { done.then_some(()) }
            })
            .await;
        let victim = cluster
            .wait_for("the group's coordinator", DEADLINE, || {
                coordinator(&cluster)
            })
            .await;
        println!(
            "{}: round {round}: killing coordinator {victim}",
            kind.name()
        );
        cluster.kill(victim);
        let next = cluster
            .wait_for("another coordinator", DEADLINE, || async {
                coordinator(&cluster).await.filter(|c| *c != victim)
            })
            .await;
        // The group reads on with its coordinator on another node.
        let before = committed_count(&shared);
        cluster
            .wait_for(
                "the group committing through the new coordinator",
                DEADLINE,
                || {
                    let done = committed_count(&shared) >= before + 200;
                    async move { done.then_some(()) }
                },
            )
            .await;
        println!(
            "{}: round {round}: node {next} took the group over",
            kind.name()
        );
        cluster.spawn(victim);
        cluster.await_listening(victim);
        if round == 2 {
            // The consumer-protocol member leaves (the group converts back to classic) and a
            // new one joins (upgraded again) just after a node came back.
            let gone = members.remove(2);
            assert_eq!(gone.name, "c");
            spoke_only(&gone, "consumer");
            tokio::task::spawn_blocking(move || gone.close())
                .await
                .expect("leave");
            members.push(start("d", "consumer"));
            cluster
                .wait_for("the new member sharing the partitions", DEADLINE, || {
                    let done = all_own(&members);
                    async move { done.then_some(()) }
                })
                .await;
        }
    }
    let before = committed_count(&shared);
    cluster
        .wait_for("the group reading after the last restart", DEADLINE, || {
            let done = committed_count(&shared) >= before + 200;
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
    // Each member spoke the protocol it was started with, nothing else: a silent fallback
    // would test less than it claims.
    for m in &members {
        spoke_only(m, if m.name == "d" { "consumer" } else { "classic" });
    }
    for m in members {
        tokio::task::spawn_blocking(move || m.close())
            .await
            .expect("close");
    }
    assert_owned_once_and_read_once(&shared, &expected);
}
