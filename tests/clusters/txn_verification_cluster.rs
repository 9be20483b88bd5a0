//! KIP-890's verification across nodes: a transactional produce to a partition whose leader is
//! not the transaction's coordinator is checked with the coordinator before it opens the
//! producer's transaction there.
//!
//! On three nodes, a producer with a transactional id writes, with raw requests, to partitions
//! led by the other two nodes:
//! - before AddPartitionsToTxn: refused, TRANSACTION_ABORTABLE at Produce v11 and
//!   INVALID_TXN_STATE at v10 (Kafka's answers to clients without, and with, the new error);
//!   nothing is written;
//! - once the partition is added: written;
//! - after the transaction's commit, a late batch of it (a retry arriving after the end):
//!   refused again, so no transaction hangs open on the partition.
//!
//! With `KAFKAIQ_CLUSTER_BROKER=kafka` the same requests go to Apache Kafka.

use crate::common;

use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ListOffsetsRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "verified";
const TXN_ID: &str = "verifier";
const DEADLINE: Duration = Duration::from_secs(60);
const TRANSACTION_ABORTABLE: i16 = 120;
const INVALID_TXN_STATE: i16 = 48;
const NOT_ENOUGH_REPLICAS: i16 = 19;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// A transactional batch of one record by `producer` at `sequence`.
fn txn_batch(producer: (i64, i16), sequence: i32, value: &str) -> bytes::Bytes {
    let mut b = bytes::BytesMut::from(
        &common::batch(&[value], Some((producer.0, producer.1, sequence)))[..],
    );
    // The transactional flag is attribute bit 4 (attributes at bytes 21..23, under the CRC).
    let attributes = i16::from_be_bytes([b[21], b[22]]) | 0x10;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

async fn produce(
    client: &mut RawClient,
    version: i16,
    partition: i32,
    records: bytes::Bytes,
) -> i16 {
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(s(TXN_ID))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    client.call(version, &request).await.responses[0].partition_responses[0].error_code
}

async fn log_end(client: &mut RawClient, partition: i32) -> i64 {
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-1)])]);
    client.call(1, &request).await.topics[0].partitions[0].offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_verifies_transactional_produces_with_a_coordinator_on_another_node() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "txn-verification",
        3,
        &[
            "transaction.state.log.num.partitions=1",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
        ],
    );
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    assert_eq!(
        cluster.create_topic_configured(1, TOPIC, 3, 3, &[]).await,
        Some(0)
    );
    let leaders = cluster
        .wait_for("every partition led, in sync", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?;
            (p.len() == 3 && p.values().all(|s| s.leader > 0 && s.isr.len() == 3))
                .then(|| p.iter().map(|(i, s)| (*i, s.leader)).collect::<Vec<_>>())
        })
        .await;
    let coordinator = cluster
        .wait_for("a transaction coordinator", DEADLINE, || async {
            let mut c = RawClient::try_connect(cluster.nodes[&1].client_addr()).await?;
            let r = c
                .call(
                    4,
                    &FindCoordinatorRequest::default()
                        .with_key_type(1)
                        .with_coordinator_keys(vec![s(TXN_ID)]),
                )
                .await;
            let found = &r.coordinators[0];
            (found.error_code == 0).then_some(found.node_id.0)
        })
        .await;
    let mut coord = RawClient::connect(cluster.nodes[&coordinator].client_addr()).await;
    let init = cluster
        .wait_for("a producer id", DEADLINE, || {
            let request = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(TXN_ID))))
                .with_transaction_timeout_ms(60_000);
            let addr = cluster.nodes[&coordinator].client_addr();
            async move {
                let mut c = RawClient::try_connect(addr).await?;
                let r = c.call(4, &request).await;
                (r.error_code == 0).then_some((r.producer_id.0, r.producer_epoch))
            }
        })
        .await;
    let remote: Vec<(i32, i32)> = leaders
        .into_iter()
        .filter(|(_, leader)| *leader != coordinator)
        .collect();
    assert!(
        !remote.is_empty(),
        "some partition is led away from the coordinator"
    );

    for &(partition, leader) in &remote {
        let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
        // Not in the transaction: refused with the error the client version knows.
        assert_eq!(
            produce(&mut client, 11, partition, txn_batch(init, 0, "early")).await,
            TRANSACTION_ABORTABLE,
            "partition {partition} on node {leader}, coordinator {coordinator}"
        );
        assert_eq!(
            produce(&mut client, 10, partition, txn_batch(init, 0, "early")).await,
            INVALID_TXN_STATE
        );
        assert_eq!(log_end(&mut client, partition).await, 0, "nothing written");
    }
    // Added to the transaction: written.
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s(TXN_ID)))
        .with_v3_and_below_producer_id(ProducerId(init.0))
        .with_v3_and_below_producer_epoch(init.1)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partitions(remote.iter().map(|(p, _)| *p).collect())]);
    let r = coord.call(3, &add).await;
    assert!(
        r.results_by_topic_v3_and_below.iter().all(|t| t
            .results_by_partition
            .iter()
            .all(|p| p.partition_error_code == 0)),
        "{r:?}"
    );
    for &(partition, leader) in &remote {
        let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
        assert_eq!(
            produce(&mut client, 11, partition, txn_batch(init, 0, "in")).await,
            0
        );
    }
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(TXN_ID)))
        .with_producer_id(ProducerId(init.0))
        .with_producer_epoch(init.1)
        .with_committed(true);
    let r = coord.call(3, &end).await;
    assert_eq!(r.error_code, 0);
    // A late batch of the ended transaction does not open a new one.
    for &(partition, leader) in &remote {
        let mut client = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
        let marker_written = cluster
            .wait_for("the commit marker on the partition", DEADLINE, || {
                let addr = cluster.nodes[&leader].client_addr();
                async move {
                    let mut c = RawClient::try_connect(addr).await?;
                    (log_end(&mut c, partition).await == 2).then_some(())
                }
            })
            .await;
        let () = marker_written;
        // NOT_ENOUGH_REPLICAS while the coordinator is still completing the transaction
        // (producers retry it); then refused for good.
        let answer = cluster
            .wait_for("a final answer to the late batch", DEADLINE, || {
                let addr = cluster.nodes[&leader].client_addr();
                async move {
                    let mut c = RawClient::try_connect(addr).await?;
                    let code = produce(&mut c, 11, partition, txn_batch(init, 1, "late")).await;
                    (code != NOT_ENOUGH_REPLICAS).then_some(code)
                }
            })
            .await;
        assert_eq!(answer, TRANSACTION_ABORTABLE);
        assert_eq!(
            log_end(&mut client, partition).await,
            2,
            "record and marker only"
        );
    }
    cluster.stop_all();
}
