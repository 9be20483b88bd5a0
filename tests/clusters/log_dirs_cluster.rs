//! AlterReplicaLogDirs in a two-node cluster: a broker asked to move a replica it does not hold
//! (the partition lives on the other broker) answers REPLICA_NOT_AVAILABLE, as Kafka 4.1 does
//! for a known partition this broker is not a replica of; one it holds, asked for the dir it is
//! in, answers NONE. `BROKER_UNDER_TEST=apache-kafka` runs it against Apache Kafka.

use crate::common;

use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::alter_replica_log_dirs_request::{
    AlterReplicaLogDir, AlterReplicaLogDirTopic,
};
use kafka_protocol::messages::{
    AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const REPLICA_NOT_AVAILABLE: i16 = 9;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_the_replica_answers_replica_not_available() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(kind, "log-dirs", 2, &[]);
    cluster
        .wait_for(
            "two brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    let topic = "placed";
    cluster
        .wait_for("the topic created", Duration::from_secs(30), || async {
            cluster
                .create_topic_with(1, topic, 4, 1)
                .await
                .filter(|&code| code == 0 || code == 36)
        })
        .await;
    let partitions = cluster
        .wait_for("every partition led", Duration::from_secs(30), || async {
            let v = cluster.partitions(1, topic).await?;
            (v.len() == 4 && v.iter().all(|p| p.leader >= 1)).then_some(v)
        })
        .await;
    let on = |node: i32| {
        partitions
            .iter()
            .find(|p| p.replicas == vec![node])
            .unwrap_or_else(|| panic!("a partition on node {node}: {partitions:?}"))
            .partition
    };
    let (mine, theirs) = (on(1), on(2));
    let dir = cluster.nodes[&1].data_dir();
    assert!(dir.is_absolute(), "{}", dir.display());
    let request =
        AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
            .with_path(StrBytes::from_string(dir.display().to_string()))
            .with_topics(vec![AlterReplicaLogDirTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![mine, theirs])])]);
    let mut client = RawClient::connect(cluster.nodes[&1].client_addr()).await;
    let r: AlterReplicaLogDirsResponse = client.call(2, &request).await;
    let mut codes: Vec<(i32, i16)> = r.results[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect();
    codes.sort();
    let mut expected = vec![(mine, 0), (theirs, REPLICA_NOT_AVAILABLE)];
    expected.sort();
    assert_eq!(codes, expected, "{}", kind.name());
    drop(client);
    cluster.stop_all();
}
