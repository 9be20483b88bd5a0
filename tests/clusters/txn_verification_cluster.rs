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

const TV2_TOPIC: &str = "tv2";
const TV2_TXN_ID: &str = "tv2-producer";
const TV2_GROUP: &str = "tv2-group";
const CONCURRENT_TRANSACTIONS: i16 = 51;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

/// A Produce v12 (transaction version 2) of `records` to `partition` of the tv2 topic, retried
/// while its answer is NOT_ENOUGH_REPLICAS (the coordinator still ending the previous
/// transaction), as producers retry it.
async fn produce_v2(cluster: &Cluster, leader: i32, partition: i32, records: bytes::Bytes) -> i16 {
    cluster
        .wait_for("a final answer to a Produce v12", DEADLINE, || {
            let addr = cluster.nodes[&leader].client_addr();
            let records = records.clone();
            async move {
                let mut c = RawClient::try_connect(addr).await?;
                let request = ProduceRequest::default()
                    .with_transactional_id(Some(TransactionalId(s(TV2_TXN_ID))))
                    .with_acks(-1)
                    .with_timeout_ms(10_000)
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(TopicName(s(TV2_TOPIC)))
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(records))])]);
                let code =
                    c.call(12, &request).await.responses[0].partition_responses[0].error_code;
                (code != NOT_ENOUGH_REPLICAS).then_some(code)
            }
        })
        .await
}

/// EndTxn v5, retried while CONCURRENT_TRANSACTIONS: (error, producer id, producer epoch).
async fn end_v5(coord: &mut RawClient, producer: (i64, i16), commit: bool) -> (i16, i64, i16) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let r = coord
            .call(
                5,
                &EndTxnRequest::default()
                    .with_transactional_id(TransactionalId(s(TV2_TXN_ID)))
                    .with_producer_id(ProducerId(producer.0))
                    .with_producer_epoch(producer.1)
                    .with_committed(commit),
            )
            .await;
        if r.error_code != CONCURRENT_TRANSACTIONS || std::time::Instant::now() > deadline {
            return (r.error_code, r.producer_id.0, r.producer_epoch);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last stable and the log end offset of a partition of the tv2 topic.
async fn stable_and_end(client: &mut RawClient, partition: i32) -> (i64, i64) {
    let mut offsets = [0i64; 2];
    for (isolation, slot) in [(1i8, 0usize), (0, 1)] {
        let request = ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_isolation_level(isolation)
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(s(TV2_TOPIC)))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(-1)])]);
        offsets[slot] = client.call(5, &request).await.topics[0].partitions[0].offset;
    }
    (offsets[0], offsets[1])
}

/// Transaction version 2 (KIP-890 part 2), as a Kafka 4.x producer uses it against a cluster
/// that finalizes it: no AddPartitionsToTxn and no AddOffsetsToTxn. Produce v12 makes each
/// partition join the transaction through its leader, on this node or another; TxnOffsetCommit
/// v5 makes the group's offsets partition join it; every EndTxn v5 bumps the epoch, which the
/// answer carries and the markers use. Checked: the markers reach every partition the
/// transaction touched (their last stable offsets reach their ends), the committed offset
/// becomes stable, a retried EndTxn is answered with the bumped epoch, and the old epoch is
/// fenced from the next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_version_2_joins_partitions_through_their_leaders_and_bumps_the_epoch() {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetFetchRequest, TxnOffsetCommitRequest};
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "txn-version-2",
        3,
        &[
            "transaction.state.log.num.partitions=1",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
            "offsets.topic.num.partitions=1",
            "offsets.topic.replication.factor=3",
        ],
    );
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    // The cluster finalizes transaction version 2, as a Kafka 4.1 cluster formatted with its
    // defaults does: that is what makes a Kafka 4.x producer use it.
    let mut any = RawClient::connect(cluster.nodes[&1].client_addr()).await;
    let versions = any
        .call(
            3,
            &crate::common::api_versions_request()
                .with_client_software_name(s("kafkaiq-tests"))
                .with_client_software_version(s("1.0")),
        )
        .await;
    assert_eq!(versions.error_code, 0);
    let tv = versions
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .map(|f| f.max_version_level);
    assert_eq!(
        tv,
        Some(2),
        "finalized {:?} at epoch {}, supported {:?}",
        versions.finalized_features,
        versions.finalized_features_epoch,
        versions.supported_features
    );
    assert_eq!(
        cluster
            .create_topic_configured(1, TV2_TOPIC, 3, 3, &[])
            .await,
        Some(0)
    );
    let leaders = cluster
        .wait_for("every partition led, in sync", DEADLINE, || async {
            let p = cluster.partitions_anywhere(TV2_TOPIC).await?;
            (p.len() == 3 && p.values().all(|s| s.leader > 0 && s.isr.len() == 3))
                .then(|| p.iter().map(|(i, s)| (*i, s.leader)).collect::<Vec<_>>())
        })
        .await;
    let find = |key_type: i8, key: &'static str| {
        let addr = cluster.nodes[&1].client_addr();
        async move {
            let mut c = RawClient::try_connect(addr).await?;
            let r = c
                .call(
                    4,
                    &FindCoordinatorRequest::default()
                        .with_key_type(key_type)
                        .with_coordinator_keys(vec![s(key)]),
                )
                .await;
            let found = &r.coordinators[0];
            (found.error_code == 0).then_some(found.node_id.0)
        }
    };
    let coordinator = cluster
        .wait_for("a transaction coordinator", DEADLINE, || {
            find(1, TV2_TXN_ID)
        })
        .await;
    let group_coordinator = cluster
        .wait_for("a group coordinator", DEADLINE, || find(0, TV2_GROUP))
        .await;
    let mut coord = RawClient::connect(cluster.nodes[&coordinator].client_addr()).await;
    let (producer_id, epoch) = cluster
        .wait_for("a producer id", DEADLINE, || {
            let request = InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(TV2_TXN_ID))))
                .with_transaction_timeout_ms(60_000);
            let addr = cluster.nodes[&coordinator].client_addr();
            async move {
                let mut c = RawClient::try_connect(addr).await?;
                let r = c.call(4, &request).await;
                (r.error_code == 0).then_some((r.producer_id.0, r.producer_epoch))
            }
        })
        .await;

    // The first transaction: a record to every partition, and the group's offset.
    for &(partition, leader) in &leaders {
        let code = produce_v2(
            &cluster,
            leader,
            partition,
            txn_batch((producer_id, epoch), 0, "first"),
        )
        .await;
        assert_eq!(code, 0, "partition {partition} led by {leader}");
    }
    let mut group = RawClient::connect(cluster.nodes[&group_coordinator].client_addr()).await;
    let commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(TV2_TXN_ID)))
        .with_group_id(GroupId(s(TV2_GROUP)))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_member_id(s(""))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(s(TV2_TOPIC)))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(42)])]);
    let committed = cluster
        .wait_for(
            "the offsets partition joins the transaction",
            DEADLINE,
            || {
                let addr = cluster.nodes[&group_coordinator].client_addr();
                let commit = commit.clone();
                async move {
                    let mut c = RawClient::try_connect(addr).await?;
                    let r = c.call(5, &commit).await;
                    let code = r.topics[0].partitions[0].error_code;
                    // COORDINATOR_NOT_AVAILABLE (15) / LOAD_IN_PROGRESS (14): retried, as producers do.
                    (code != 15 && code != 14).then_some(code)
                }
            },
        )
        .await;
    assert_eq!(committed, 0);
    let (code, id_after, epoch_after) = end_v5(&mut coord, (producer_id, epoch), true).await;
    assert_eq!(
        (code, id_after, epoch_after),
        (0, producer_id, epoch + 1),
        "the end bumps the epoch and says so"
    );
    // The markers reach every partition, so nothing stays unstable.
    for &(partition, leader) in &leaders {
        let mut c = RawClient::connect(cluster.nodes[&leader].client_addr()).await;
        let settled = cluster
            .wait_for("the commit marker on the partition", DEADLINE, || {
                let addr = cluster.nodes[&leader].client_addr();
                async move {
                    let mut c = RawClient::try_connect(addr).await?;
                    let (stable, end) = stable_and_end(&mut c, partition).await;
                    (stable == end && end == 2).then_some(())
                }
            })
            .await;
        let () = settled;
        assert_eq!(stable_and_end(&mut c, partition).await, (2, 2));
    }
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(TV2_GROUP)))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(s(TV2_TOPIC)))
            .with_partition_indexes(vec![0])]))
        .with_require_stable(true);
    let offset = cluster
        .wait_for("the transactional offset is stable", DEADLINE, || {
            let addr = cluster.nodes[&group_coordinator].client_addr();
            let fetch = fetch.clone();
            async move {
                let mut c = RawClient::try_connect(addr).await?;
                let r = c.call(7, &fetch).await;
                let p = &r.topics[0].partitions[0];
                (p.error_code != UNSTABLE_OFFSET_COMMIT && r.error_code == 0)
                    .then_some((p.error_code, p.committed_offset))
            }
        })
        .await;
    assert_eq!(offset, (0, 42));
    let _ = &mut group;
    // A retried EndTxn (its answer lost) is answered with the bumped epoch.
    assert_eq!(
        end_v5(&mut coord, (producer_id, epoch), true).await,
        (0, producer_id, epoch + 1)
    );

    // The second transaction runs at the bumped epoch; the old epoch is fenced from it.
    let (partition, leader) = leaders[0];
    assert_eq!(
        produce_v2(
            &cluster,
            leader,
            partition,
            txn_batch((producer_id, epoch), 1, "zombie")
        )
        .await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        produce_v2(
            &cluster,
            leader,
            partition,
            txn_batch((producer_id, epoch + 1), 0, "second")
        )
        .await,
        0
    );
    assert_eq!(
        end_v5(&mut coord, (producer_id, epoch + 1), false).await,
        (0, producer_id, epoch + 2)
    );
    let aborted = cluster
        .wait_for("the abort marker on the partition", DEADLINE, || {
            let addr = cluster.nodes[&leader].client_addr();
            async move {
                let mut c = RawClient::try_connect(addr).await?;
                let (stable, end) = stable_and_end(&mut c, partition).await;
                (stable == end && end == 4).then_some(())
            }
        })
        .await;
    let () = aborted;
    let _ = &mut any;
    cluster.stop_all();
}
