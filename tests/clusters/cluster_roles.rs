//! `process.roles=controller` next to combined nodes: three voters, of which node 3 is a
//! controller only. It votes and may lead the quorum, but never registers as a broker, hosts
//! no partition and has no client listener; the brokers see two brokers and three voters.

use crate::common;

use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

const INVALID_REPLICATION_FACTOR: i16 = 38;

async fn create(cluster: &Cluster, via: i32, name: &str, rf: i16) -> Option<i16> {
    let mut client = RawClient::try_connect(cluster.nodes[&via].client_addr()).await?;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_owned())))
            .with_num_partitions(2)
            .with_replication_factor(rf)]);
    let r = client
        .try_call(7, &request, Duration::from_secs(10))
        .await?;
    Some(r.topics[0].error_code)
}

/// (quorum leader, voter ids, voters whose log has reached the high watermark) as node `via`
/// reports it.
async fn voters(cluster: &Cluster, via: i32) -> Option<(i32, Vec<i32>, Vec<i32>)> {
    let p = cluster.describe_quorum(via).await?;
    let mut ids: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
    ids.sort_unstable();
    let mut caught_up: Vec<i32> = p
        .current_voters
        .iter()
        .filter(|v| v.log_end_offset >= p.high_watermark)
        .map(|v| v.replica_id.0)
        .collect();
    caught_up.sort_unstable();
    (p.leader_id.0 > 0).then_some((p.leader_id.0, ids, caught_up))
}

async fn brokers(cluster: &Cluster, via: i32) -> Option<Vec<i32>> {
    let m = cluster.metadata(via, &[]).await?;
    let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
    ids.sort_unstable();
    Some(ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_only_node_votes_but_is_no_broker() {
    let mut cluster = Cluster::start_with(ClusterKind::KafkaIq, "roles", 3, &[], |node| {
        if node.id != 3 {
            return Vec::new();
        }
        let controller = format!("CONTROLLER://127.0.0.1:{}", node.controller_port);
        vec![
            "process.roles=controller".to_owned(),
            format!("listeners={controller}"),
            format!("advertised.listeners={controller}"),
        ]
    });
    cluster
        .wait_for(
            "brokers 1 and 2 on both",
            Duration::from_secs(90),
            || async {
                let one = brokers(&cluster, 1).await?;
                let two = brokers(&cluster, 2).await?;
                (one == vec![1, 2] && two == vec![1, 2]).then_some(())
            },
        )
        .await;
    let (_, ids, _) = cluster
        .wait_for("three voters", Duration::from_secs(30), || {
            voters(&cluster, 1)
        })
        .await;
    assert_eq!(ids, vec![1, 2, 3]);
    assert!(
        RawClient::try_connect(cluster.nodes[&3].client_addr())
            .await
            .is_none(),
        "a controller-only node has no client listener"
    );

    // Two brokers: replication factor 2 places, 3 is refused.
    assert_eq!(create(&cluster, 1, "two", 2).await, Some(0));
    assert_eq!(
        create(&cluster, 2, "three", 3).await,
        Some(INVALID_REPLICATION_FACTOR)
    );
    let m = cluster.metadata(2, &["two"]).await.unwrap();
    for p in &m.topics[0].partitions {
        let mut r: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
        r.sort_unstable();
        assert_eq!(r, vec![1, 2], "partition {}", p.partition_index);
    }

    // The quorum leader killed, whichever it is: another voter leads and topics are created.
    let (leader, _, _) = voters(&cluster, 1).await.unwrap();
    cluster.kill(leader);
    let via = if leader == 1 { 2 } else { 1 };
    cluster
        .wait_for(
            "CreateTopics after the leader's kill",
            Duration::from_secs(30),
            || async { create(&cluster, via, "after", 1).await.filter(|c| *c == 0) },
        )
        .await;
    cluster.spawn(leader);
    cluster
        .wait_for(
            "the restarted voter caught up",
            Duration::from_secs(60),
            || async {
                let (_, _, caught_up) = voters(&cluster, via).await?;
                let b = brokers(&cluster, via).await?;
                (caught_up == vec![1, 2, 3] && b == vec![1, 2]).then_some(())
            },
        )
        .await;
    cluster.stop_all();
}
