//! A voter far behind catches up from the active controller's snapshot, which travels in
//! chunks: no frame on the controller listener is larger than one chunk and its header.
//!
//! Three processes. Nodes 1 and 2 snapshot the metadata log once 64 KiB of entries follow the
//! last snapshot (`metadata.log.max.record.bytes.between.snapshots`, a Kafka key); node 3 keeps
//! Kafka's default (20 MiB), so it never snapshots on its own here. Node 3 stops; 1,000 topics
//! with long names are created in one request (about 300 KB of metadata: many chunks), and the
//! two voters compact their logs past where node 3 stopped. Node 3 starts again and can only
//! catch up from a snapshot: its `snapshot` file then holds the image, and its Metadata answer
//! names every topic.
//!
//! Waits have deadlines; each step waits on a condition.

use crate::common;

use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafkaiq::quorum::chunks::RAFT_CHUNK_BYTES;

const DEADLINE: Duration = Duration::from_secs(90);
const TOPICS: usize = 1_000;
const LAGGING: i32 = 3;

fn topic_name(i: usize) -> String {
    // 200 characters: the image is mostly topic names.
    format!("{i:05}-{}", "n".repeat(194))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_far_behind_catches_up_from_a_snapshot_sent_in_chunks() {
    let mut cluster = Cluster::start_with(ClusterKind::KafkaIq, "snapshot-chunks", 3, &[], |n| {
        if n.id == LAGGING {
            Vec::new()
        } else {
            vec!["metadata.log.max.record.bytes.between.snapshots=65536".into()]
        }
    });
    cluster
        .wait_for("three brokers in one cluster", DEADLINE, || {
            cluster.formed()
        })
        .await;
    let snapshot_file = cluster.nodes[&LAGGING]
        .data_dir()
        .join("kafkaiq-metadata")
        .join("snapshot");
    cluster.stop(LAGGING);
    assert!(
        !snapshot_file.exists(),
        "node 3 took no snapshot of its own"
    );

    let names: Vec<String> = (0..TOPICS).map(topic_name).collect();
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            names
                .iter()
                .map(|name| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name.clone())))
                        .with_num_partitions(1)
                        .with_replication_factor(1)
                })
                .collect(),
        );
    let created = cluster
        .wait_for("1,000 topics created", DEADLINE, || async {
            let mut client = RawClient::try_connect(cluster.nodes[&1].client_addr()).await?;
            let answer = client
                .try_call(7, &request, Duration::from_secs(30))
                .await?;
            answer
                .topics
                .iter()
                .all(|t| t.error_code == 0 || t.error_code == 36) // TOPIC_ALREADY_EXISTS
                .then_some(answer.topics.len())
        })
        .await;
    assert_eq!(created, TOPICS);

    cluster.spawn(LAGGING);
    cluster.await_listening(LAGGING);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    cluster
        .wait_for("node 3 names every topic", DEADLINE, || async {
            let m = cluster.metadata(LAGGING, &refs).await?;
            (m.topics.len() == TOPICS && m.topics.iter().all(|t| t.error_code == 0)).then_some(())
        })
        .await;
    let snapshot_bytes = std::fs::metadata(&snapshot_file)
        .expect("node 3 holds the snapshot it was sent")
        .len() as usize;
    assert!(
        snapshot_bytes > 4 * RAFT_CHUNK_BYTES,
        "the snapshot ({snapshot_bytes} bytes) spans several chunks"
    );
    cluster.stop_all();
    cluster.remove_files();
}
