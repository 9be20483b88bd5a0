//! Apache Kafka 4.1 KRaft `server.properties` files with no KafkaIQ key start KafkaIQ nodes
//! wherever Kafka would start: three on one host form a cluster, and a single node starts while
//! another process holds 127.0.0.1:9644 (the embedded setup's HTTP port). A file that does not
//! set `http.listener` gets no HTTP listener.

use crate::common;

use std::net::TcpListener;
use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};

const FORMED: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_from_kafka_files_form_a_cluster_on_one_host() {
    let mut cluster = Cluster::start_from_files_only(ClusterKind::from_env(), "files3", 3, &[]);
    cluster
        .wait_for("three nodes to form a cluster", FORMED, || cluster.formed())
        .await;
    let created = cluster
        .wait_for("a topic of replication factor 3", FORMED, || async {
            cluster
                .create_topic_with(1, "spread", 3, 3)
                .await
                .filter(|&code| code == 0)
        })
        .await;
    assert_eq!(created, 0);
    for id in [1, 2, 3] {
        cluster
            .nodes
            .get_mut(&id)
            .unwrap()
            .process
            .as_mut()
            .unwrap()
            .assert_running();
    }
    cluster.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_starts_while_another_process_holds_9644() {
    // Held here, or already held by someone else: either way the port is taken.
    let _held = match TcpListener::bind("127.0.0.1:9644") {
        Ok(l) => Some(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => None,
        Err(e) => panic!("cannot bind 127.0.0.1:9644: {e}"),
    };
    let mut cluster = Cluster::start_from_files_only(ClusterKind::from_env(), "files1", 1, &[]);
    cluster
        .wait_for("the node to serve", FORMED, || cluster.formed())
        .await;
    cluster
        .nodes
        .get_mut(&1)
        .unwrap()
        .process
        .as_mut()
        .unwrap()
        .assert_running();
    cluster.stop_all();
}
