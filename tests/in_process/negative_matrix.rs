//! The negative matrix of issue 31: each way in that must be refused is one row — how the
//! attacker tries, and what Kafka answers (an error code, or a closed connection) — and every
//! row is shown to be refused so and to change nothing.
//!
//! Two in-process brokers. The SASL one (SASL_PLAINTEXT, PLAIN and SCRAM-SHA-256, the
//! StandardAuthorizer, `User:admin` the only super user, `alice` a user without any ACL):
//! authentication rows (no credentials, empty and wrong passwords, unknown users, an unknown
//! mechanism, SCRAM client-final messages replayed or forged, requests before
//! authentication, frames past `sasl.server.max.receive.size`), then one row or more per API
//! its client listener serves, sent by alice, then the controller listener's APIs from alice
//! (its dispatch handed the frames: the broker lifecycle, AlterPartition, the quorum's own
//! frames, the forwarded administrative requests). The SSL one (`ssl.client.auth=required`):
//! an untrusted or missing client certificate, plaintext bytes on the TLS port. Slow
//! handshakes on both are closed after `connections.max.idle.ms` while good clients are served.
//!
//! "Changes nothing": the super user first makes state the attacks aim at — topic `guarded`
//! with records, a group with committed offsets, a transaction left open, an ACL, a SCRAM
//! credential, a topic config — and reads it all back as a [`Snapshot`] (the metadata image,
//! every partition's log start and end offsets, groups and committed offsets, transactions,
//! producers, replica log dirs, ACLs, SCRAM credentials, the quorum); after every row a fresh
//! connection of the super user (of a trusted certificate on the SSL broker) reads it again and
//! must find the same, which also shows that the broker still serves a good client. An
//! attacker that authentication refuses pipelines a Produce and a CreateTopics behind its
//! refused message, which must never run.

use crate::common;
use crate::security_support::*;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{batch, batch_transactional};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};
use kafkaiq::handlers::api_versions::{CONTROLLER_SUPPORTED, SUPPORTED};
use kafkaiq::metadata::MetadataImage;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
const SASL_AUTHENTICATION_FAILED: i16 = 58;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

/// `connection.failed.authentication.delay.ms` of the SASL broker.
const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(300);
/// `connections.max.idle.ms` of both brokers: the bound of a handshake that stalls.
const IDLE: Duration = Duration::from_millis(2_500);

const TOPIC: &str = "guarded";
const GROUP: &str = "guarded-group";
const TXN: &str = "guarded-txn";
const ALICE: &str = "User:alice";

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// Requests both the super user (setting up, reading back) and alice send.
fn create_topic(topic: &str, partitions: i32) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(1)])
}

fn find_coordinator(key_type: i8, key: &str) -> FindCoordinatorRequest {
    FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(vec![str(key)])
}

/// [`GROUP`]'s offset of guarded-0, outside any generation.
fn commit_offset(offset: i64) -> OffsetCommitRequest {
    use offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    OffsetCommitRequest::default()
        .with_group_id(GroupId(str(GROUP)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(str(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])])
}

/// Every offset [`GROUP`] committed.
fn offset_fetch() -> OffsetFetchRequest {
    OffsetFetchRequest::default().with_groups(vec![
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(str(GROUP)))
            .with_topics(None),
    ])
}

/// [`TXN`]'s producer, its transactions timing out after 10 minutes.
fn init_transactional() -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(str(TXN))))
        .with_transaction_timeout_ms(600_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

/// `guarded-<partition>` added to [`TXN`]'s transaction by its producer (v3, a client's).
fn add_to_transaction((id, epoch): (i64, i16), partition: i32) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(str(TXN)))
        .with_v3_and_below_producer_id(ProducerId(id))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![partition]),
        ])
}

/// [`TXN`]'s transaction committed by its producer.
fn end_transaction((id, epoch): (i64, i16)) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str(TXN)))
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch)
        .with_committed(true)
}

fn describe_producers(partitions: Vec<i32>) -> DescribeProducersRequest {
    DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(name(TOPIC))
            .with_partition_indexes(partitions),
    ])
}

/// `operation` on guarded, allowed to `principal` from any host.
fn grant(principal: &str, operation: i8) -> CreateAclsRequest {
    CreateAclsRequest::default().with_creations(vec![create_acls_request::AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(str(TOPIC))
        .with_resource_pattern_type(3)
        .with_principal(str(principal))
        .with_host(str("*"))
        .with_operation(operation)
        .with_permission_type(3)])
}

/// Every ACL (null filters match anything).
fn every_acl() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1)
}

/// `key` set to `value` on a config resource (2: a topic, 4: a broker, "" its default).
fn set_config(
    resource_type: i8,
    resource: &str,
    key: &str,
    value: &str,
) -> IncrementalAlterConfigsRequest {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(str(resource))
        .with_configs(vec![AlterableConfig::default()
            .with_name(str(key))
            .with_config_operation(0)
            .with_value(Some(str(value)))])])
}

/// The metadata quorum's state.
fn metadata_quorum() -> DescribeQuorumRequest {
    DescribeQuorumRequest::default().with_topics(vec![describe_quorum_request::TopicData::default(
    )
    .with_topic_name(name("__cluster_metadata"))
    .with_partitions(vec![
        describe_quorum_request::PartitionData::default().with_partition_index(0)
    ])])
}

/// What the broker did with an attack.
#[derive(Debug)]
enum Seen {
    /// It answered: every error code of the answer, and what the answer shows (topics, groups,
    /// transactions, records, authorized operations).
    Answer { codes: Vec<i16>, shown: Vec<String> },
    /// It closed the connection without answering.
    Closed,
}

/// What a row expects, as Kafka does it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Answered with this error code wherever the answer carries one, showing nothing.
    Refused(i16),
    /// Answered without error, showing nothing the principal may not see.
    Hidden,
    /// The connection closes unanswered.
    Closed,
}

fn check(what: &str, expect: Expect, seen: &Seen) {
    let ok = match (expect, seen) {
        (Expect::Refused(code), Seen::Answer { codes, shown }) => {
            !codes.is_empty() && codes.iter().all(|c| *c == code) && shown.is_empty()
        }
        (Expect::Hidden, Seen::Answer { codes, shown }) => {
            codes.iter().all(|c| *c == 0) && shown.is_empty()
        }
        (Expect::Closed, Seen::Closed) => true,
        _ => false,
    };
    assert!(ok, "{what}: expected {expect:?}, the broker did {seen:?}");
}

/// A transaction as described: (transactional id, state, producer id, epoch, partitions).
type Transaction = (String, String, i64, i16, Vec<(String, Vec<i32>)>);

/// The error codes an answer carries, and what it shows.
type Answer = (Vec<i16>, Vec<String>);

/// What the super user reads back after every row; equal before and after, or the row changed
/// something.
#[derive(Debug, PartialEq)]
struct Snapshot {
    image: MetadataImage,
    /// (topic, partition, log start offset, log end offset) of every partition.
    logs: Vec<(String, i32, i64, i64)>,
    /// (group, state, type).
    groups: Vec<(String, String, String)>,
    /// (topic, partition, committed offset) of [`GROUP`].
    committed: Vec<(String, i32, i64)>,
    transactions: Vec<Transaction>,
    /// (partition of [`TOPIC`], producer id, epoch, last sequence, open transaction's offset).
    producers: Vec<(i32, i64, i32, i32, i64)>,
    /// (log dir, topic, partition).
    log_dirs: Vec<(String, String, i32)>,
    acls: Vec<String>,
    /// (user, [(mechanism, iterations)]).
    scram: Vec<(String, Vec<(i8, i32)>)>,
    /// (leader, epoch) of the metadata quorum.
    quorum: (i32, i32),
}

impl Snapshot {
    /// Reads everything over `stream`, a super user's connection, and the node's image.
    async fn read<S: AsyncRead + AsyncWrite + Unpin>(
        stream: &mut S,
        ctx: &kafkaiq::context::Context,
    ) -> Snapshot {
        let image = (*ctx.image()).clone();
        let partitions: Vec<(String, i32)> = image
            .topics
            .values()
            .flat_map(|t| t.partitions.keys().map(|p| (t.name.clone(), *p)))
            .collect();
        let mut logs = Vec::new();
        let offsets = |timestamp: i64| {
            use list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(
                    image
                        .topics
                        .values()
                        .map(|t| {
                            ListOffsetsTopic::default()
                                .with_name(name(&t.name))
                                .with_partitions(
                                    t.partitions
                                        .keys()
                                        .map(|p| {
                                            ListOffsetsPartition::default()
                                                .with_partition_index(*p)
                                                .with_timestamp(timestamp)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        };
        let earliest: ListOffsetsResponse = call(stream, 7, &offsets(-2)).await.unwrap();
        let latest: ListOffsetsResponse = call(stream, 7, &offsets(-1)).await.unwrap();
        for (early, late) in earliest.topics.iter().zip(&latest.topics) {
            for (e, l) in early.partitions.iter().zip(&late.partitions) {
                assert_eq!((e.error_code, l.error_code), (0, 0), "{early:?}");
                logs.push((
                    early.name.to_string(),
                    e.partition_index,
                    e.offset,
                    l.offset,
                ));
            }
        }
        logs.sort();
        assert_eq!(logs.len(), partitions.len());

        let listed: ListGroupsResponse = call(stream, 5, &ListGroupsRequest::default())
            .await
            .unwrap();
        let mut groups: Vec<(String, String, String)> = listed
            .groups
            .iter()
            .map(|g| {
                (
                    g.group_id.to_string(),
                    g.group_state.to_string(),
                    g.group_type.to_string(),
                )
            })
            .collect();
        groups.sort();
        let fetched: OffsetFetchResponse = call(stream, 8, &offset_fetch()).await.unwrap();
        let mut committed: Vec<(String, i32, i64)> = fetched.groups[0]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.to_string(), p.partition_index, p.committed_offset))
            })
            .collect();
        committed.sort();

        let ids: ListTransactionsResponse = call(stream, 0, &ListTransactionsRequest::default())
            .await
            .unwrap();
        let described: DescribeTransactionsResponse = call(
            stream,
            0,
            &DescribeTransactionsRequest::default().with_transactional_ids(
                ids.transaction_states
                    .iter()
                    .map(|t| t.transactional_id.clone())
                    .collect(),
            ),
        )
        .await
        .unwrap();
        let mut transactions: Vec<_> = described
            .transaction_states
            .iter()
            .map(|t| {
                (
                    t.transactional_id.to_string(),
                    t.transaction_state.to_string(),
                    t.producer_id.0,
                    t.producer_epoch,
                    t.topics
                        .iter()
                        .map(|p| (p.topic.to_string(), p.partitions.clone()))
                        .collect(),
                )
            })
            .collect();
        transactions.sort();

        let ours: Vec<i32> = partitions
            .iter()
            .filter(|(t, _)| t == TOPIC)
            .map(|(_, p)| *p)
            .collect();
        let described: DescribeProducersResponse =
            call(stream, 0, &describe_producers(ours)).await.unwrap();
        let mut producers: Vec<_> = described.topics[0]
            .partitions
            .iter()
            .flat_map(|p| {
                p.active_producers.iter().map(|s| {
                    (
                        p.partition_index,
                        s.producer_id.0,
                        s.producer_epoch,
                        s.last_sequence,
                        s.current_txn_start_offset,
                    )
                })
            })
            .collect();
        producers.sort();

        let dirs: DescribeLogDirsResponse = call(
            stream,
            4,
            &DescribeLogDirsRequest::default().with_topics(None),
        )
        .await
        .unwrap();
        let mut log_dirs: Vec<(String, String, i32)> = dirs
            .results
            .iter()
            .flat_map(|d| {
                d.topics.iter().flat_map(move |t| {
                    t.partitions.iter().map(move |p| {
                        (d.log_dir.to_string(), t.name.to_string(), p.partition_index)
                    })
                })
            })
            .collect();
        log_dirs.sort();

        let described: DescribeAclsResponse = call(stream, 3, &every_acl()).await.unwrap();
        let mut acls: Vec<String> = described
            .resources
            .iter()
            .flat_map(|r| {
                r.acls.iter().map(move |a| {
                    format!(
                        "{}:{}:{} {} {} {} {}",
                        r.resource_type,
                        r.pattern_type,
                        r.resource_name.as_str(),
                        a.principal.as_str(),
                        a.host.as_str(),
                        a.operation,
                        a.permission_type
                    )
                })
            })
            .collect();
        acls.sort();
        let described: DescribeUserScramCredentialsResponse = call(
            stream,
            0,
            &DescribeUserScramCredentialsRequest::default().with_users(None),
        )
        .await
        .unwrap();
        let mut scram: Vec<(String, Vec<(i8, i32)>)> = described
            .results
            .iter()
            .map(|r| {
                (
                    r.user.to_string(),
                    r.credential_infos
                        .iter()
                        .map(|c| (c.mechanism, c.iterations))
                        .collect(),
                )
            })
            .collect();
        scram.sort();
        let described: DescribeQuorumResponse = call(stream, 2, &metadata_quorum()).await.unwrap();
        let quorum = described
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map_or((-1, -1), |p| (p.leader_id.0, p.leader_epoch));
        Snapshot {
            image,
            logs,
            groups,
            committed,
            transactions,
            producers,
            log_dirs,
            acls,
            scram,
            quorum,
        }
    }

    /// Panics showing where `after` first differs from `self`.
    fn assert_same(&self, after: &Snapshot, what: &str) {
        if self == after {
            return;
        }
        let before = format!("{self:#?}");
        let now = format!("{after:#?}");
        let (before, now): (Vec<&str>, Vec<&str>) =
            (before.lines().collect(), now.lines().collect());
        let first = (0..before.len().min(now.len()))
            .find(|i| before[*i] != now[*i])
            .unwrap_or(before.len().min(now.len()));
        let around = |lines: &[&str]| {
            lines[first.saturating_sub(12)..(first + 8).min(lines.len())].join("\n")
        };
        panic!(
            "{what} changed the broker's state; before:\n{}\nafter:\n{}",
            around(&before),
            around(&now)
        );
    }
}

/// One request of the matrix, and what it must get on each listener.
struct ApiRow {
    what: String,
    /// `None`: a frame of the quorum's own protocol.
    api: Option<ApiKey>,
    /// The request frame, size prefix included.
    frame: Bytes,
    /// The answer's body, as [`Seen`].
    read: Box<dyn Fn(Bytes) -> Seen + Send + Sync>,
    /// On the client listener (an API it does not serve closes the connection, as in Kafka);
    /// `None`: a request only the controller listener is asked.
    client: Option<Expect>,
    /// On the controller listener; `None` where it does not serve the API.
    controller: Option<Expect>,
}

impl ApiRow {
    fn on_controller(mut self, expect: Expect) -> ApiRow {
        self.controller = Some(expect);
        self
    }

    fn controller_only(mut self) -> ApiRow {
        self.client = None;
        self
    }
}

/// A row of `request` at `version`; `seen` takes the error codes and what the answer shows out
/// of the response.
fn row<R: Request + 'static>(
    what: &str,
    version: i16,
    request: R,
    expect: Expect,
    seen: fn(&R::Response) -> Answer,
) -> ApiRow {
    let api = ApiKey::try_from(R::KEY).unwrap();
    let served = |table: &[(ApiKey, i16, i16)]| {
        table
            .iter()
            .any(|(k, min, max)| *k == api && (*min..=*max).contains(&version))
    };
    ApiRow {
        what: format!("{api:?} v{version}: {what}"),
        api: Some(api),
        frame: encode_frame(version, &request),
        read: Box::new(move |body| {
            let (codes, shown) = seen(&decode_answer::<R>(version, body));
            Seen::Answer { codes, shown }
        }),
        client: Some(if served(SUPPORTED) {
            expect
        } else {
            Expect::Closed
        }),
        controller: served(CONTROLLER_SUPPORTED).then_some(expect),
    }
}

/// A frame only the controller listener takes (the quorum's own); it must close.
fn quorum_row(what: &str, api: i16, frame: Bytes) -> ApiRow {
    ApiRow {
        what: format!("quorum frame (key {api}): {what}"),
        api: None,
        frame,
        read: Box::new(|_| panic!("a quorum frame is never answered here")),
        client: Some(Expect::Closed),
        controller: Some(Expect::Closed),
    }
}

/// What the rows name, from the broker after setup.
struct Fixture {
    cluster_id: String,
    node_id: i32,
    broker_epoch: i64,
    metadata_offset: i64,
    topic_id: uuid::Uuid,
    leader_epoch: i32,
    partition_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    /// The log dir `guarded-0` is not in.
    other_dir: String,
}

/// The error codes `$code` of every `$inner` entry of every entry of `$outer`, and nothing
/// shown: an answer of per-partition results.
macro_rules! nested_codes {
    ($outer:expr, $inner:ident, $code:ident) => {
        (
            $outer
                .iter()
                .flat_map(|t| t.$inner.iter().map(|p| p.$code))
                .collect(),
            none(),
        )
    };
}

fn codes<T>(items: &[T], code: impl Fn(&T) -> i16) -> Vec<i16> {
    items.iter().map(code).collect()
}

fn none() -> Vec<String> {
    Vec::new()
}

/// Every request of the matrix, as alice.
fn api_rows(f: &Fixture) -> Vec<ApiRow> {
    use Expect::*;
    let topic = || name(TOPIC);
    let group = || GroupId(str(GROUP));
    let txn = || TransactionalId(str(TXN));
    let pid = ProducerId(f.producer_id);
    let epoch = f.producer_epoch;
    let produce = |records: Bytes, txn_id: Option<TransactionalId>| {
        use produce_request::{PartitionProduceData, TopicProduceData};
        ProduceRequest::default()
            .with_transactional_id(txn_id)
            .with_acks(-1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records))])])
    };
    let produce_codes =
        |r: &ProduceResponse| nested_codes!(r.responses, partition_responses, error_code);
    let fetch = |replica: i32| {
        use fetch_request::{FetchPartition, FetchTopic};
        FetchRequest::default()
            .with_replica_id(BrokerId(replica))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let fetch_codes = |r: &FetchResponse| {
        let partitions = || r.responses.iter().flat_map(|t| t.partitions.iter());
        let shown = partitions()
            .filter(|p| p.records.as_ref().is_some_and(|b| !b.is_empty()))
            .map(|p| format!("records of partition {}", p.partition_index))
            .collect();
        (partitions().map(|p| p.error_code).collect(), shown)
    };
    let metadata = |topics: Option<&[&str]>, auto_create: bool| {
        MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|t| {
                        metadata_request::MetadataRequestTopic::default().with_name(Some(name(t)))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(auto_create)
    };
    let metadata_seen = |r: &MetadataResponse| {
        let shown = r
            .topics
            .iter()
            .filter(|t| t.error_code == 0 || !t.partitions.is_empty())
            .map(|t| format!("topic {:?}", t.name))
            .collect();
        (codes(&r.topics, |t| t.error_code), shown)
    };
    let offset_for_leader_epoch = |replica: i32| {
        use offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(replica))
            .with_topics(vec![OffsetForLeaderTopic::default()
                .with_topic(topic())
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(-1)
                    .with_leader_epoch(0)])])
    };
    let epoch_codes =
        |r: &OffsetForLeaderEpochResponse| nested_codes!(r.topics, partitions, error_code);
    let describe_configs = |resource_type: i8, resource: &str| {
        DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str(resource))
                .with_configuration_keys(None),
        ])
    };
    let describe_configs_seen = |r: &DescribeConfigsResponse| {
        let shown = r
            .results
            .iter()
            .flat_map(|c| c.configs.iter().map(|e| e.name.to_string()))
            .collect();
        (codes(&r.results, |c| c.error_code), shown)
    };
    let incremental_codes =
        |r: &IncrementalAlterConfigsResponse| (codes(&r.responses, |c| c.error_code), none());
    let coordinator_codes = |r: &FindCoordinatorResponse| {
        let shown = r
            .coordinators
            .iter()
            .filter(|c| c.node_id.0 >= 0)
            .map(|c| format!("coordinator {}", c.node_id.0))
            .collect();
        (codes(&r.coordinators, |c| c.error_code), shown)
    };
    let join = |group_id: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(str(group_id)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(str(""))
            .with_protocol_type(str("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(str("range"))
            .with_metadata(Bytes::from_static(b"\0\0"))])
    };
    let consumer_heartbeat = |group_id: &str| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(str(group_id)))
            .with_member_id(str("alice-member-id-0000001"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(10_000)
            .with_subscribed_topic_names(Some(vec![topic()]))
            .with_topic_partitions(Some(vec![]))
    };
    let mut rows = vec![
        row(
            "a record to guarded",
            9,
            produce(batch(&["alice was here"], None), None),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            produce_codes,
        ),
        row(
            "a record of the open transaction, to guarded",
            9,
            produce(
                batch_transactional(&["alice's commit"], (f.producer_id, epoch, 0)),
                Some(txn()),
            ),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            produce_codes,
        ),
        row(
            "guarded's records, as a consumer",
            12,
            fetch(-1),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            fetch_codes,
        ),
        row(
            "guarded's records, as follower 1",
            12,
            fetch(f.node_id),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            fetch_codes,
        ),
        row(
            "guarded's log end",
            7,
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1),
                    ])]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| nested_codes!(r.topics, partitions, error_code),
        ),
        row(
            "every topic",
            12,
            metadata(None, false),
            Hidden,
            metadata_seen,
        ),
        row(
            "guarded by name",
            12,
            metadata(Some(&[TOPIC]), false),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            metadata_seen,
        ),
        row(
            "a new topic, auto-created",
            12,
            metadata(Some(&["alice-auto"]), true),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            metadata_seen,
        ),
        row(
            "guarded-group's offset of guarded-0 set to 0",
            8,
            commit_offset(0),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| nested_codes!(r.topics, partitions, error_code),
        ),
        row(
            "guarded-group's offsets",
            8,
            offset_fetch(),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .groups
                    .iter()
                    .flat_map(|g| g.topics.iter().map(|t| t.name.to_string()))
                    .collect();
                (codes(&r.groups, |g| g.error_code), shown)
            },
        ),
        row(
            "guarded-group's coordinator",
            4,
            find_coordinator(0, GROUP),
            Refused(GROUP_AUTHORIZATION_FAILED),
            coordinator_codes,
        ),
        row(
            "guarded-txn's coordinator",
            4,
            find_coordinator(1, TXN),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            coordinator_codes,
        ),
        row(
            "joining guarded-group",
            7,
            join(GROUP),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "a new group",
            7,
            join("alice-group"),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-group's assignment",
            5,
            SyncGroupRequest::default()
                .with_group_id(group())
                .with_generation_id(1)
                .with_member_id(str("alice"))
                .with_protocol_type(Some(str("consumer")))
                .with_protocol_name(Some(str("range"))),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "a heartbeat to guarded-group",
            4,
            HeartbeatRequest::default()
                .with_group_id(group())
                .with_generation_id(1)
                .with_member_id(str("alice")),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "leaving guarded-group",
            4,
            LeaveGroupRequest::default()
                .with_group_id(group())
                .with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(str("alice"))
                ]),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-group described",
            5,
            DescribeGroupsRequest::default().with_groups(vec![group()]),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .groups
                    .iter()
                    .filter(|g| !g.protocol_type.is_empty() || !g.members.is_empty())
                    .map(|g| g.group_id.to_string())
                    .collect();
                (codes(&r.groups, |g| g.error_code), shown)
            },
        ),
        row(
            "every group",
            4,
            ListGroupsRequest::default(),
            Hidden,
            |r| {
                let shown = r.groups.iter().map(|g| g.group_id.to_string()).collect();
                (vec![r.error_code], shown)
            },
        ),
        row(
            "guarded-group deleted",
            2,
            DeleteGroupsRequest::default().with_groups_names(vec![group()]),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (codes(&r.results, |g| g.error_code), none()),
        ),
        row(
            "guarded-group's offset of guarded-0 deleted",
            0,
            OffsetDeleteRequest::default()
                .with_group_id(group())
                .with_topics(vec![
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            offset_delete_request::OffsetDeleteRequestPartition::default()
                                .with_partition_index(0),
                        ]),
                ]),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "joining guarded-group (KIP-848)",
            0,
            consumer_heartbeat(GROUP),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "a new group (KIP-848)",
            0,
            consumer_heartbeat("alice-group"),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-group described (KIP-848)",
            0,
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![group()]),
            Refused(GROUP_AUTHORIZATION_FAILED),
            |r| (codes(&r.groups, |g| g.error_code), none()),
        ),
        row(
            "a new topic",
            5,
            create_topic("alice-made", 1),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| (codes(&r.topics, |t| t.error_code), none()),
        ),
        row(
            "guarded deleted",
            5,
            DeleteTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topic_names(vec![topic()]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| (codes(&r.responses, |t| t.error_code), none()),
        ),
        row(
            "guarded grown to 4 partitions",
            3,
            CreatePartitionsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(topic())
                        .with_count(4)
                        .with_assignments(None),
                ]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| (codes(&r.results, |t| t.error_code), none()),
        ),
        row(
            "guarded-0's records before offset 2 deleted",
            2,
            DeleteRecordsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(0)
                            .with_offset(2),
                    ])]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| nested_codes!(r.topics, partitions, error_code),
        ),
        row(
            "guarded-txn's producer re-initialized (it would fence the super user's)",
            4,
            init_transactional(),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "an idempotent producer id",
            4,
            InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-1 added to the open transaction",
            3,
            add_to_transaction((f.producer_id, epoch), 1),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            |r| {
                nested_codes!(
                    r.results_by_topic_v3_and_below,
                    results_by_partition,
                    partition_error_code
                )
            },
        ),
        row(
            "guarded-1 added to the open transaction, as a partition leader",
            4,
            AddPartitionsToTxnRequest::default().with_transactions(vec![
                add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(txn())
                    .with_producer_id(pid)
                    .with_producer_epoch(epoch)
                    .with_verify_only(false)
                    .with_topics(vec![
                        add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                            .with_name(topic())
                            .with_partitions(vec![1]),
                    ]),
            ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-group's offsets added to the open transaction",
            3,
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(txn())
                .with_producer_id(pid)
                .with_producer_epoch(epoch)
                .with_group_id(group()),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "the open transaction committed",
            3,
            end_transaction((f.producer_id, epoch)),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "a commit marker of the open transaction, to guarded-0",
            1,
            WriteTxnMarkersRequest::default().with_markers(vec![
                write_txn_markers_request::WritableTxnMarker::default()
                    .with_producer_id(pid)
                    .with_producer_epoch(epoch)
                    .with_transaction_result(true)
                    .with_coordinator_epoch(0)
                    .with_topics(vec![
                        write_txn_markers_request::WritableTxnMarkerTopic::default()
                            .with_name(topic())
                            .with_partition_indexes(vec![0]),
                    ]),
            ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let codes = r
                    .markers
                    .iter()
                    .flat_map(|m| m.topics.iter())
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                    .collect();
                (codes, none())
            },
        ),
        row(
            "guarded-group's offset committed in the open transaction",
            3,
            TxnOffsetCommitRequest::default()
                .with_transactional_id(txn())
                .with_group_id(group())
                .with_producer_id(pid)
                .with_producer_epoch(epoch)
                .with_generation_id(-1)
                .with_member_id(str(""))
                .with_topics(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(0),
                        ]),
                ]),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            |r| nested_codes!(r.topics, partitions, error_code),
        ),
        row(
            "guarded-0's producers",
            0,
            describe_producers(vec![0]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| {
                let partitions = || r.topics.iter().flat_map(|t| t.partitions.iter());
                let shown = partitions()
                    .flat_map(|p| p.active_producers.iter())
                    .map(|s| format!("producer {}", s.producer_id.0))
                    .collect();
                (partitions().map(|p| p.error_code).collect(), shown)
            },
        ),
        row(
            "guarded-txn described",
            0,
            DescribeTransactionsRequest::default().with_transactional_ids(vec![txn()]),
            Refused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .transaction_states
                    .iter()
                    .filter(|t| !t.transaction_state.is_empty() || t.producer_id.0 > 0)
                    .map(|t| t.transactional_id.to_string())
                    .collect();
                (codes(&r.transaction_states, |t| t.error_code), shown)
            },
        ),
        row(
            "every transaction",
            0,
            ListTransactionsRequest::default(),
            Hidden,
            |r| {
                let shown = r
                    .transaction_states
                    .iter()
                    .map(|t| t.transactional_id.to_string())
                    .collect();
                (vec![r.error_code], shown)
            },
        ),
        row(
            "guarded-0's end offset of epoch 0, as a consumer",
            4,
            offset_for_leader_epoch(-1),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            epoch_codes,
        ),
        row(
            "guarded-0's end offset of epoch 0, as follower 1",
            4,
            offset_for_leader_epoch(f.node_id),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            epoch_codes,
        ),
        row(
            "guarded's configs",
            4,
            describe_configs(2, TOPIC),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            describe_configs_seen,
        ),
        row(
            "the broker's configs",
            4,
            describe_configs(4, &f.node_id.to_string()),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            describe_configs_seen,
        ),
        row(
            "guarded's configs replaced (retention.ms=1)",
            2,
            AlterConfigsRequest::default().with_resources(vec![
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(str(TOPIC))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(str("retention.ms"))
                        .with_value(Some(str("1")))]),
            ]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| (codes(&r.responses, |c| c.error_code), none()),
        ),
        row(
            "guarded's retention.ms set to 1",
            1,
            set_config(2, TOPIC, "retention.ms", "1"),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            incremental_codes,
        ),
        row(
            "the broker's log.retention.ms set to 1",
            1,
            set_config(4, &f.node_id.to_string(), "log.retention.ms", "1"),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            incremental_codes,
        ),
        row(
            "the cluster default log.retention.ms set to 1",
            1,
            set_config(4, "", "log.retention.ms", "1"),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            incremental_codes,
        ),
        row(
            "every ACL",
            3,
            every_acl(),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .resources
                    .iter()
                    .map(|a| a.resource_name.to_string())
                    .collect();
                (vec![r.error_code], shown)
            },
        ),
        row(
            "ALL on guarded granted to alice",
            3,
            grant(ALICE, 2),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (codes(&r.results, |a| a.error_code), none()),
        ),
        row(
            "every ACL deleted",
            3,
            DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(1)
                    .with_resource_name_filter(None)
                    .with_pattern_type_filter(1)
                    .with_principal_filter(None)
                    .with_host_filter(None)
                    .with_operation(1)
                    .with_permission_type(1),
            ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .filter_results
                    .iter()
                    .flat_map(|f| f.matching_acls.iter())
                    .map(|a| a.principal.to_string())
                    .collect();
                (codes(&r.filter_results, |f| f.error_code), shown)
            },
        ),
        row(
            "every SCRAM user",
            0,
            DescribeUserScramCredentialsRequest::default().with_users(None),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .results
                    .iter()
                    .filter(|u| !u.credential_infos.is_empty())
                    .map(|u| u.user.to_string())
                    .collect();
                (vec![r.error_code], shown)
            },
        ),
        row(
            "carol's password replaced, and alice's credential made",
            0,
            AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                scram_upsertion("carol", 1, "alice-knows-it", 4096),
                scram_upsertion("alice", 1, "alice-scram", 4096),
            ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (codes(&r.results, |u| u.error_code), none()),
        ),
        row(
            "carol's credential deleted",
            0,
            AlterUserScramCredentialsRequest::default().with_deletions(vec![
                alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                    .with_name(str("carol"))
                    .with_mechanism(1),
            ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (codes(&r.results, |u| u.error_code), none()),
        ),
        row(
            "every user's quotas",
            1,
            DescribeClientQuotasRequest::default()
                .with_components(vec![])
                .with_strict(false),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-0's preferred leader elected",
            2,
            ElectLeadersRequest::default()
                .with_election_type(0)
                .with_timeout_ms(5_000)
                .with_topic_partitions(Some(vec![
                    elect_leaders_request::TopicPartitions::default()
                        .with_topic(topic())
                        .with_partitions(vec![0]),
                ])),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-0 reassigned",
            0,
            AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![
                    alter_partition_reassignments_request::ReassignableTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            alter_partition_reassignments_request::ReassignablePartition::default()
                                .with_partition_index(0)
                                .with_replicas(Some(vec![BrokerId(f.node_id)])),
                        ]),
                ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "every reassignment",
            0,
            ListPartitionReassignmentsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(None),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-0 moved to the other log dir",
            2,
            AlterReplicaLogDirsRequest::default().with_dirs(vec![
                alter_replica_log_dirs_request::AlterReplicaLogDir::default()
                    .with_path(str(&f.other_dir))
                    .with_topics(vec![
                        alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                            .with_name(topic())
                            .with_partitions(vec![0]),
                    ]),
            ]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| nested_codes!(r.results, partitions, error_code),
        ),
        row(
            "every log dir",
            4,
            DescribeLogDirsRequest::default().with_topics(None),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r.results.iter().map(|d| d.log_dir.to_string()).collect();
                (vec![r.error_code], shown)
            },
        ),
        // The broker's DescribeCluster needs no ACL in Kafka, and alice is shown no operation
        // on the cluster; the controller's needs ALTER on the cluster (KIP-919).
        row(
            "the cluster, with alice's operations on it",
            1,
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
            Hidden,
            |r| {
                let ops = r.cluster_authorized_operations;
                let shown = (ops != 0 && ops != i32::MIN)
                    .then(|| format!("operations {ops:b}"))
                    .into_iter()
                    .collect();
                (vec![r.error_code], shown)
            },
        )
        .on_controller(Refused(CLUSTER_AUTHORIZATION_FAILED)),
        row(
            "the controllers",
            1,
            DescribeClusterRequest::default().with_endpoint_type(2),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .brokers
                    .iter()
                    .map(|b| format!("node {}", b.broker_id.0))
                    .collect();
                (vec![r.error_code], shown)
            },
        )
        .controller_only(),
        row(
            "guarded by name",
            0,
            DescribeTopicPartitionsRequest::default()
                .with_response_partition_limit(100)
                .with_topics(vec![
                    describe_topic_partitions_request::TopicRequest::default().with_name(topic()),
                ]),
            Refused(TOPIC_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .topics
                    .iter()
                    .filter(|t| !t.partitions.is_empty())
                    .map(|t| format!("{:?}", t.name))
                    .collect();
                (codes(&r.topics, |t| t.error_code), shown)
            },
        ),
        row(
            "every topic",
            0,
            DescribeTopicPartitionsRequest::default()
                .with_response_partition_limit(100)
                .with_topics(vec![]),
            Hidden,
            |r| {
                let shown = r.topics.iter().map(|t| format!("{:?}", t.name)).collect();
                (codes(&r.topics, |t| t.error_code), shown)
            },
        ),
        row(
            "every config resource",
            1,
            ListConfigResourcesRequest::default(),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r
                    .config_resources
                    .iter()
                    .map(|c| c.resource_name.to_string())
                    .collect();
                (vec![r.error_code], shown)
            },
        ),
        row(
            "the metadata quorum",
            2,
            metadata_quorum(),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| {
                let shown = r.topics.iter().map(|t| t.topic_name.to_string()).collect();
                (vec![r.error_code], shown)
            },
        ),
        // The broker lifecycle and the ISR: the controller's, which needs CLUSTER_ACTION; a
        // broker's client listener does not serve them.
        row(
            "this broker's controlled shutdown",
            1,
            BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(f.node_id))
                .with_broker_epoch(f.broker_epoch)
                .with_current_metadata_offset(f.metadata_offset)
                .with_want_shut_down(true),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "this broker fenced",
            1,
            BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(f.node_id))
                .with_broker_epoch(f.broker_epoch)
                .with_current_metadata_offset(f.metadata_offset)
                .with_want_fence(true),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "this broker registered again, as a new incarnation",
            3,
            BrokerRegistrationRequest::default()
                .with_broker_id(BrokerId(f.node_id))
                .with_cluster_id(str(&f.cluster_id))
                .with_incarnation_id(uuid::Uuid::from_u128(0xa11ce))
                .with_listeners(vec![broker_registration_request::Listener::default()
                    .with_name(str("SASL_PLAINTEXT"))
                    .with_host(str("10.0.0.66"))
                    .with_port(6666)
                    .with_security_protocol(2)]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "guarded-0's ISR emptied",
            3,
            AlterPartitionRequest::default()
                .with_broker_id(BrokerId(f.node_id))
                .with_broker_epoch(f.broker_epoch)
                .with_topics(vec![alter_partition_request::TopicData::default()
                    .with_topic_id(f.topic_id)
                    .with_partitions(vec![
                        alter_partition_request::PartitionData::default()
                            .with_partition_index(0)
                            .with_leader_epoch(f.leader_epoch)
                            .with_partition_epoch(f.partition_epoch)
                            .with_new_isr_with_epochs(vec![]),
                    ])]),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        row(
            "a block of producer ids",
            0,
            AllocateProducerIdsRequest::default()
                .with_broker_id(BrokerId(f.node_id))
                .with_broker_epoch(f.broker_epoch),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
        // A broker forwarding a client's request: only a principal with CLUSTER_ACTION may,
        // or anyone could act as anyone (here alice as the super user admin).
        row(
            "a CreateTopics in admin's name",
            0,
            EnvelopeRequest::default()
                .with_request_data(
                    encode_frame(
                        7,
                        &CreateTopicsRequest::default().with_topics(vec![
                            create_topics_request::CreatableTopic::default()
                                .with_name(TopicName(str("enveloped")))
                                .with_num_partitions(1)
                                .with_replication_factor(1),
                        ]),
                    )
                    .slice(4..),
                )
                .with_request_principal(Some(Bytes::from_static(&[
                    0, 0, 5, b'U', b's', b'e', b'r', 6, b'a', b'd', b'm', b'i', b'n', 0, 0,
                ])))
                .with_client_host_address(Bytes::from_static(&[127, 0, 0, 1])),
            Refused(CLUSTER_AUTHORIZATION_FAILED),
            |r| (vec![r.error_code], none()),
        ),
    ];
    rows.extend(quorum_rows());
    rows
}

/// The quorum's own frames, from alice: a vote request of a later term, a chunk of a
/// message, an observer's fetch of the metadata log.
fn quorum_rows() -> Vec<ApiRow> {
    use kafkaiq::controller::observer;
    use kafkaiq::quorum::{chunks, wire};
    use raft::eraftpb::{Message, MessageType};
    let vote = Message {
        msg_type: MessageType::MsgRequestVote,
        to: 1,
        from: 2,
        term: 1_000,
        log_term: 1_000,
        index: 1_000_000,
        ..Default::default()
    };
    let big = vec![7u8; chunks::RAFT_CHUNK_BYTES + 1];
    let chunk = chunks::encode_chunks(2, "alice", &big, || 1)
        .next()
        .unwrap();
    let fetch = observer::encode_request(
        5,
        "alice",
        &observer::FetchRequest {
            node_id: 9,
            after: 0,
            max_wait_ms: 0,
            max_bytes: 1 << 20,
        },
    );
    vec![
        quorum_row(
            "a vote request of term 1000",
            wire::RAFT_MESSAGE_API_KEY,
            wire::encode_request(1, "alice", &vote),
        ),
        quorum_row(
            "a chunk of a Raft message",
            chunks::RAFT_CHUNK_API_KEY,
            chunk,
        ),
        quorum_row(
            "a fetch of the metadata log",
            observer::METADATA_FETCH_API_KEY,
            fetch,
        ),
    ]
}

/// A connection of any kind: TCP, or TLS over it.
trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// How the super user of a broker connects: SASL/PLAIN as `admin`, or TLS with a certificate
/// the broker trusts (the SSL broker has no authorizer).
#[derive(Clone)]
enum SuperUser {
    Sasl(std::net::SocketAddr),
    Tls(std::net::SocketAddr, Arc<rustls::ClientConfig>),
}

impl SuperUser {
    async fn connect(&self) -> Box<dyn Duplex> {
        match self {
            SuperUser::Sasl(addr) => Box::new(plain_admin(*addr).await),
            SuperUser::Tls(addr, config) => {
                Box::new(tls_connect(*addr, (**config).clone()).await.unwrap())
            }
        }
    }

    /// The broker's state as this user reads it, on a new connection.
    async fn snapshot(&self, ctx: &kafkaiq::context::Context) -> Snapshot {
        let mut stream = self.connect().await;
        Snapshot::read(&mut stream, ctx).await
    }

    /// One request on a new connection.
    async fn call<R: Request>(&self, version: i16, request: &R) -> R::Response {
        call(&mut self.connect().await, version, request)
            .await
            .unwrap()
    }
}

/// Retries `attempt` (an error code and a result) until the code is 0, for 20 s at most: a
/// partition's leader, a coordinator, come up a moment after the topic.
async fn until_done<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (i16, T)>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, result) = attempt().await;
        if code == 0 {
            return result;
        }
        assert!(Instant::now() < deadline, "{what}: still {code}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The state the attacks aim at, made by the super user: topic `guarded` (two partitions, three
/// records each), [`GROUP`]'s offset of guarded-0, [`TXN`]'s transaction open on guarded-0 with
/// one record, carol's SCRAM-SHA-256 credential, guarded's `retention.ms`, and with an
/// authorizer bob's READ on guarded.
async fn set_up(su: &SuperUser, ctx: &kafkaiq::context::Context, authorizer: bool) -> Fixture {
    let created: CreateTopicsResponse = su.call(5, &create_topic(TOPIC, 2)).await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    for partition in 0..2 {
        until_done("records to guarded", || async move {
            let produced: ProduceResponse = su
                .call(
                    9,
                    &common::produce_by_name(TOPIC, partition, batch(&["a", "b", "c"], None), -1),
                )
                .await;
            (produced.responses[0].partition_responses[0].error_code, ())
        })
        .await;
    }
    // FindCoordinator creates the coordinators' topics.
    for (key_type, key) in [(0, GROUP), (1, TXN)] {
        until_done("a coordinator", || async move {
            let found: FindCoordinatorResponse = su.call(4, &find_coordinator(key_type, key)).await;
            (found.coordinators[0].error_code, ())
        })
        .await;
    }
    until_done("guarded-group's offset", || async {
        let committed: OffsetCommitResponse = su.call(8, &commit_offset(2)).await;
        (committed.topics[0].partitions[0].error_code, ())
    })
    .await;
    let (producer_id, producer_epoch) = until_done("guarded-txn's producer id", || async {
        let init: InitProducerIdResponse = su.call(4, &init_transactional()).await;
        (init.error_code, (init.producer_id.0, init.producer_epoch))
    })
    .await;
    let added: AddPartitionsToTxnResponse = su
        .call(3, &add_to_transaction((producer_id, producer_epoch), 0))
        .await;
    let code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    assert_eq!(code, 0, "{added:?}");
    let produced: ProduceResponse = su
        .call(
            9,
            &common::produce_by_name(
                TOPIC,
                0,
                batch_transactional(&["pending"], (producer_id, producer_epoch, 0)),
                -1,
            )
            .with_transactional_id(Some(TransactionalId(str(TXN)))),
        )
        .await;
    assert_eq!(
        produced.responses[0].partition_responses[0].error_code, 0,
        "{produced:?}"
    );
    if authorizer {
        let created: CreateAclsResponse = su.call(3, &grant("User:bob", 3)).await;
        assert_eq!(created.results[0].error_code, 0, "{created:?}");
    }
    let altered: AlterUserScramCredentialsResponse = su
        .call(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![scram_upsertion(
                "carol",
                1,
                "carol-secret",
                4096,
            )]),
        )
        .await;
    assert_eq!(altered.results[0].error_code, 0, "{altered:?}");
    let altered: IncrementalAlterConfigsResponse = su
        .call(1, &set_config(2, TOPIC, "retention.ms", "3600000"))
        .await;
    assert_eq!(altered.responses[0].error_code, 0, "{altered:?}");

    let image = ctx.image();
    let node_id = ctx.node_id;
    let guarded = image.topic(TOPIC).expect("guarded");
    let partition = &guarded.partitions[&0];
    let dirs: DescribeLogDirsResponse = su
        .call(4, &DescribeLogDirsRequest::default().with_topics(None))
        .await;
    let other_dir = dirs
        .results
        .iter()
        .find(|d| {
            !d.topics.iter().any(|t| {
                t.name.as_str() == TOPIC && t.partitions.iter().any(|p| p.partition_index == 0)
            })
        })
        .map_or_else(String::new, |d| d.log_dir.to_string());
    Fixture {
        cluster_id: image.cluster_id.clone(),
        node_id,
        broker_epoch: image.broker(node_id).expect("registered").broker_epoch,
        metadata_offset: image.metadata_offset as i64,
        topic_id: guarded.id,
        leader_epoch: partition.leader_epoch,
        partition_epoch: partition.partition_epoch,
        producer_id,
        producer_epoch,
        other_dir,
    }
}

/// The SASL broker's settings: see the module's doc; two log dirs.
fn sasl_broker_settings(dirs: [&std::path::Path; 2]) -> Vec<String> {
    let mut settings = sasl_settings("SASL_PLAINTEXT");
    settings.retain(|s| {
        !s.starts_with("sasl.enabled.mechanisms") && !s.starts_with("connection.failed")
    });
    settings.extend([
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256".to_owned(),
        format!(
            "connection.failed.authentication.delay.ms={}",
            FAILED_AUTHENTICATION_DELAY.as_millis()
        ),
        format!("connections.max.idle.ms={}", IDLE.as_millis()),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
        "super.users=User:admin".to_owned(),
        format!("log.dirs={},{}", dirs[0].display(), dirs[1].display()),
        "offsets.topic.num.partitions=1".to_owned(),
        "transaction.state.log.num.partitions=1".to_owned(),
        "group.initial.rebalance.delay.ms=0".to_owned(),
    ]);
    settings
}

/// How an attacker without credentials (or with wrong ones) knocks on the SASL listener.
#[derive(Debug, Clone, Copy)]
enum Knock {
    /// A client configured without SASL: ApiVersions (answered, as Kafka answers it), then its
    /// Produce.
    NoSasl,
    /// A Produce as the first request.
    ProduceFirst,
    /// SaslHandshake for PLAIN, then a Produce and a CreateTopics instead of SaslAuthenticate:
    /// as Kafka, the Produce is answered with its own error response (ILLEGAL_SASL_STATE) and
    /// nothing behind it.
    ProduceMidExchange,
    /// SASL/PLAIN with this user and password.
    Plain(&'static str, &'static str),
    /// A SaslHandshake naming a mechanism the listener does not enable.
    Mechanism(&'static str),
    /// SCRAM's client-first message for a user without a credential.
    ScramUnknownUser,
    /// carol's exchange, with the proof of another password.
    ScramWrongPassword,
    /// carol's client-final message of an earlier, successful exchange, sent again as it was.
    ScramReplayed,
    /// That message with its nonce made this exchange's.
    ScramReplayedWithThisNonce,
    /// This exchange's nonce and a made-up proof.
    ScramForgedProof,
    /// carol's right client-final message, claiming channel binding (`y,,`).
    ScramForgedChannelBinding,
    /// A client-final message where the client-first belongs.
    ScramFinalFirst,
    /// A first frame past `sasl.server.max.receive.size`.
    OversizedFirstFrame,
    /// After SaslHandshake, a SaslAuthenticate past `sasl.server.max.receive.size`.
    OversizedToken,
}

/// What authentication must do with a knock.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Refusal {
    /// Answer with this error code, then close no sooner than
    /// `connection.failed.authentication.delay.ms`.
    Answered(i16),
    /// Close without answering the knock.
    Closed,
}

/// The rows of authentication, as Kafka's `SaslServerAuthenticator` refuses them.
fn knocks() -> Vec<(Knock, Refusal)> {
    use Knock::*;
    use Refusal::*;
    vec![
        (NoSasl, Closed),
        (ProduceFirst, Closed),
        (ProduceMidExchange, Answered(ILLEGAL_SASL_STATE)),
        (Plain("", ""), Answered(SASL_AUTHENTICATION_FAILED)),
        (Plain("alice", ""), Answered(SASL_AUTHENTICATION_FAILED)),
        (
            Plain("alice", "not-her-password"),
            Answered(SASL_AUTHENTICATION_FAILED),
        ),
        (
            Plain("alice", "ALICE-SECRET"),
            Answered(SASL_AUTHENTICATION_FAILED),
        ),
        (
            Plain("mallory", "alice-secret"),
            Answered(SASL_AUTHENTICATION_FAILED),
        ),
        (
            Plain("admin", "alice-secret"),
            Answered(SASL_AUTHENTICATION_FAILED),
        ),
        (Mechanism("GSSAPI"), Answered(UNSUPPORTED_SASL_MECHANISM)),
        (
            Mechanism("SCRAM-SHA-512"),
            Answered(UNSUPPORTED_SASL_MECHANISM),
        ),
        (Mechanism("plain"), Answered(UNSUPPORTED_SASL_MECHANISM)),
        (ScramUnknownUser, Answered(SASL_AUTHENTICATION_FAILED)),
        (ScramWrongPassword, Answered(SASL_AUTHENTICATION_FAILED)),
        (ScramReplayed, Answered(SASL_AUTHENTICATION_FAILED)),
        (
            ScramReplayedWithThisNonce,
            Answered(SASL_AUTHENTICATION_FAILED),
        ),
        (ScramForgedProof, Answered(SASL_AUTHENTICATION_FAILED)),
        (
            ScramForgedChannelBinding,
            Answered(SASL_AUTHENTICATION_FAILED),
        ),
        (ScramFinalFirst, Answered(SASL_AUTHENTICATION_FAILED)),
        (OversizedFirstFrame, Closed),
        (OversizedToken, Closed),
    ]
}

/// A SaslHandshake v1 for `mechanism`, which the broker accepts.
async fn sasl_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    mechanism: &'static str,
) {
    let done: SaslHandshakeResponse = call(
        stream,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
    )
    .await
    .unwrap();
    assert_eq!(done.error_code, 0);
}

/// A SaslAuthenticate v2 frame carrying `bytes`.
fn sasl_authenticate(bytes: impl Into<Bytes>) -> Bytes {
    encode_frame(
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes.into()),
    )
}

/// What an attacker pipelines behind its knock: a record to guarded-0 and a new topic.
fn sneaked_requests() -> Vec<u8> {
    let mut frames = encode_frame(
        9,
        &common::produce_by_name(TOPIC, 0, batch(&["sneaked in"], None), -1),
    )
    .to_vec();
    frames.extend_from_slice(&encode_frame(5, &create_topic("sneaked", 1)));
    frames
}

/// Reads one frame's body within 10 s; `None` once the connection is closed.
async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Bytes> {
    let read = async {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await.ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut body).await.ok()?;
        Some(Bytes::from(body))
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer or a close within 10 s")
}

/// Knocks once: the error code of the broker's answer to the knock (if it answered), and how
/// long after the knock was sent the connection closed (the test fails if it stays open for
/// 10 s, or if anything pipelined behind the knock is answered).
async fn knock(
    addr: std::net::SocketAddr,
    knock: Knock,
    carol_final: &str,
) -> (Option<i16>, Duration) {
    use Knock::*;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let handshake = |mechanism: &'static str| {
        encode_frame(
            1,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
        )
    };
    let with_nonce = |message: &str, nonce: &str| {
        message
            .split(',')
            .map(|a| {
                if a.starts_with("r=") {
                    format!("r={nonce}")
                } else {
                    a.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    // The frame that must be refused, and the API its answer is of (if any).
    let (frame, answer_api): (Bytes, Option<ApiKey>) = match knock {
        NoSasl => {
            let versions: ApiVersionsResponse =
                call(&mut c, 3, &crate::common::api_versions_request())
                    .await
                    .unwrap();
            assert_eq!(versions.error_code, 0);
            (Bytes::from(sneaked_requests()), None)
        }
        ProduceFirst => (Bytes::from(sneaked_requests()), None),
        ProduceMidExchange => {
            sasl_handshake(&mut c, "PLAIN").await;
            // The knock is the Produce of the sneaked requests; their CreateTopics and the
            // second pair appended below are pipelined behind it.
            (Bytes::from(sneaked_requests()), Some(ApiKey::Produce))
        }
        Plain(user, password) => {
            sasl_handshake(&mut c, "PLAIN").await;
            (
                sasl_authenticate(format!("\0{user}\0{password}")),
                Some(ApiKey::SaslAuthenticate),
            )
        }
        Mechanism(mechanism) => (handshake(mechanism), Some(ApiKey::SaslHandshake)),
        ScramUnknownUser => {
            sasl_handshake(&mut c, "SCRAM-SHA-256").await;
            (
                sasl_authenticate(format!("n,,n=mallory,r={SCRAM_CLIENT_NONCE}")),
                Some(ApiKey::SaslAuthenticate),
            )
        }
        ScramWrongPassword
        | ScramReplayed
        | ScramReplayedWithThisNonce
        | ScramForgedProof
        | ScramForgedChannelBinding => {
            let server_first = scram_first(&mut c, "SCRAM-SHA-256", "carol")
                .await
                .expect("carol's server-first message");
            let nonce = server_first
                .split(',')
                .find_map(|a| a.strip_prefix("r="))
                .unwrap();
            let message = match knock {
                ScramWrongPassword => {
                    scram_final("SCRAM-SHA-256", "carol", "carol-guess", &server_first).message
                }
                ScramReplayed => carol_final.to_owned(),
                ScramReplayedWithThisNonce => with_nonce(carol_final, nonce),
                ScramForgedProof => format!("c=biws,r={nonce},p={}", base64_encode(&[0x5a; 32])),
                _ => scram_final("SCRAM-SHA-256", "carol", "carol-secret", &server_first)
                    .message
                    .replacen("c=biws", "c=eSws", 1),
            };
            (sasl_authenticate(message), Some(ApiKey::SaslAuthenticate))
        }
        ScramFinalFirst => {
            sasl_handshake(&mut c, "SCRAM-SHA-256").await;
            (
                sasl_authenticate(carol_final.to_owned()),
                Some(ApiKey::SaslAuthenticate),
            )
        }
        OversizedFirstFrame => {
            let mut frame = 600_000i32.to_be_bytes().to_vec();
            frame.extend_from_slice(&[0, 36, 0, 2, 0, 0, 0, 7]);
            (Bytes::from(frame), None)
        }
        OversizedToken => {
            sasl_handshake(&mut c, "PLAIN").await;
            let mut frame = 600_000i32.to_be_bytes().to_vec();
            frame.extend_from_slice(&[0, 36, 0, 2, 0, 0, 0, 7]);
            (Bytes::from(frame), None)
        }
    };
    let mut sent = frame.to_vec();
    if answer_api.is_some() {
        sent.extend_from_slice(&sneaked_requests());
    }
    let sent_at = Instant::now();
    // The broker may close before it has read all of it.
    let _ = c.write_all(&sent).await;
    let answer = read_answer(&mut c).await;
    let code = answer.map(|body| match answer_api {
        Some(ApiKey::SaslAuthenticate) => {
            decode_answer::<SaslAuthenticateRequest>(2, body).error_code
        }
        Some(ApiKey::SaslHandshake) => decode_answer::<SaslHandshakeRequest>(1, body).error_code,
        Some(ApiKey::Produce) => {
            let answer = decode_answer::<ProduceRequest>(9, body);
            let codes: Vec<(String, i32, i16)> = answer
                .responses
                .iter()
                .flat_map(|t| {
                    t.partition_responses
                        .iter()
                        .map(|p| (t.name.as_str().to_owned(), p.index, p.error_code))
                })
                .collect();
            assert_eq!(codes.len(), 1, "{knock:?}: {codes:?}");
            assert_eq!(codes[0].0, TOPIC, "{knock:?}: {codes:?}");
            codes[0].2
        }
        _ => panic!("{knock:?}: a request before authentication was answered"),
    });
    if code.is_some() {
        assert!(
            read_answer(&mut c).await.is_none(),
            "{knock:?}: a request pipelined behind a refused authentication was answered"
        );
    }
    (code, sent_at.elapsed())
}

/// How an attacker knocks on the SSL listener, which requires a client certificate.
#[derive(Debug, Clone, Copy)]
enum TlsKnock {
    /// A certificate another CA signed.
    UntrustedCertificate,
    /// A certificate another CA signed, with the super user's own subject.
    ImpostorCertificate,
    /// No certificate.
    NoCertificate,
    /// Kafka requests in plaintext.
    Plaintext,
}

/// Knocks once, then sends ApiVersions and the [`sneaked_requests`]: whether anything was
/// answered (the TLS handshake must fail, and the connection close unanswered).
async fn tls_knock(addr: std::net::SocketAddr, knock: TlsKnock, pki: &Pki) -> bool {
    let mut frames = encode_frame(3, &crate::common::api_versions_request()).to_vec();
    frames.extend_from_slice(&sneaked_requests());
    let config = match knock {
        TlsKnock::Plaintext => {
            let mut plain = TcpStream::connect(addr).await.unwrap();
            let _ = plain.write_all(&frames).await;
            return read_answer(&mut plain).await.is_some();
        }
        TlsKnock::UntrustedCertificate | TlsKnock::ImpostorCertificate => {
            let other = Pki::new();
            let subject = match knock {
                TlsKnock::UntrustedCertificate => "mallory",
                _ => "admin",
            };
            let (cert, key) = other.issue(subject, &[]);
            pki.client_config(Some((cert, &key)))
        }
        TlsKnock::NoCertificate => pki.client_config(None),
    };
    match tls_connect(addr, config).await {
        Err(_) => false,
        Ok(mut tls) => {
            let _ = tls.write_all(&frames).await;
            let _ = tls.flush().await;
            read_answer(&mut tls).await.is_some()
        }
    }
}

/// A client that begins a handshake and stalls.
#[derive(Debug, Clone, Copy)]
enum Stall {
    /// Connects and sends nothing.
    Silent,
    /// Sends 14 bytes of a frame of 100.
    HalfFrame,
    /// SaslHandshake, then nothing.
    AfterSaslHandshake,
    /// Half a TLS ClientHello.
    HalfClientHello,
    /// A whole ClientHello, then nothing: the handshake never finishes.
    UnfinishedTls,
}

/// The first flight of a TLS client.
fn client_hello(config: rustls::ClientConfig) -> Vec<u8> {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    hello
}

/// Stalls against `addr`; how long after connecting the broker closed the connection.
async fn stall(
    addr: std::net::SocketAddr,
    stall: Stall,
    tls: Option<rustls::ClientConfig>,
) -> Duration {
    let started = Instant::now();
    let mut c = TcpStream::connect(addr).await.unwrap();
    match stall {
        Stall::Silent => {}
        Stall::HalfFrame => c
            .write_all(&[0, 0, 0, 100, 0, 18, 0, 3, 0, 0, 0, 7, 0, 0])
            .await
            .unwrap(),
        Stall::AfterSaslHandshake => sasl_handshake(&mut c, "PLAIN").await,
        Stall::HalfClientHello => {
            let hello = client_hello(tls.expect("a TLS client"));
            c.write_all(&hello[..hello.len() / 2]).await.unwrap();
        }
        Stall::UnfinishedTls => {
            c.write_all(&client_hello(tls.expect("a TLS client")))
                .await
                .unwrap();
        }
    }
    // Whatever the broker sends (its TLS flight), until it closes.
    let mut sink = [0u8; 4096];
    let closing = async {
        loop {
            match c.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(IDLE + Duration::from_secs(10), closing)
        .await
        .unwrap_or_else(|_| panic!("{stall:?}: still open after {:?}", started.elapsed()));
    started.elapsed()
}

/// The slow-handshake rows: `stalls` against `addr` at once; until they are all closed the
/// super user reads the state every 100 ms, each time within `IDLE` and finding `baseline`;
/// each stalled connection closes after `connections.max.idle.ms` (as in Kafka, whose idle
/// expiry covers a connection that has not authenticated), not before and not long after.
async fn stalls_while_served(
    addr: std::net::SocketAddr,
    stalls: &[Stall],
    tls: Option<rustls::ClientConfig>,
    su: &SuperUser,
    ctx: &kafkaiq::context::Context,
    baseline: &Snapshot,
) {
    let tasks: Vec<_> = stalls
        .iter()
        .map(|s| {
            let (s, tls) = (*s, tls.clone());
            (s, tokio::spawn(async move { stall(addr, s, tls).await }))
        })
        .collect();
    let mut served = 0;
    while !tasks.iter().all(|(_, t)| t.is_finished()) {
        let asked = Instant::now();
        let seen = su.snapshot(ctx).await;
        assert!(
            asked.elapsed() < IDLE,
            "a good client waited {:?} beside the stalled handshakes",
            asked.elapsed()
        );
        baseline.assert_same(&seen, "a stalled handshake");
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served >= 3, "{served} reads while the handshakes stalled");
    for (s, task) in tasks {
        let open = task.await.unwrap();
        assert!(
            open >= IDLE.mul_f64(0.9) && open <= IDLE + Duration::from_secs(5),
            "{s:?}: closed after {open:?}, connections.max.idle.ms is {IDLE:?}"
        );
    }
}

/// alice's connection: `frame` sent once she has authenticated; the answer's body, or `None`
/// when the broker closed the connection.
async fn as_alice(addr: std::net::SocketAddr, frame: &Bytes) -> Option<Bytes> {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let done = authenticate(&mut c, "alice", "alice-secret").await;
    assert_eq!(done.error_code, 0, "alice authenticates");
    tokio::time::timeout(Duration::from_secs(10), exchange(&mut c, frame))
        .await
        .expect("an answer or a close within 10 s")
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_on_the_sasl_listener_and_the_controller_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let dirs = [data.path().join("dir-a"), data.path().join("dir-b")];
    let broker = start_ssl_broker(data.path(), &sasl_broker_settings([&dirs[0], &dirs[1]])).await;
    let addr = broker.local_addr;
    let ctx = broker.context.clone();
    let su = SuperUser::Sasl(addr);
    let fixture = set_up(&su, &ctx, true).await;
    assert!(!fixture.other_dir.is_empty(), "two log dirs");
    let baseline = su.snapshot(&ctx).await;
    assert_eq!(baseline.acls.len(), 1, "{:?}", baseline.acls);
    assert_eq!(
        baseline.transactions.len(),
        1,
        "{:?}",
        baseline.transactions
    );

    // carol's successful exchange, whose client-final message the replay rows send again.
    let mut carol = TcpStream::connect(addr).await.unwrap();
    let server_first = scram_first(&mut carol, "SCRAM-SHA-256", "carol")
        .await
        .unwrap();
    let carol_final = scram_final("SCRAM-SHA-256", "carol", "carol-secret", &server_first);
    let done = scram_send(&mut carol, &carol_final.message).await.unwrap();
    assert_eq!(done.error_code, 0, "{:?}", done.error_message);
    drop(carol);

    for (k, refusal) in knocks() {
        let (code, closed_after) = knock(addr, k, &carol_final.message).await;
        match refusal {
            Refusal::Answered(expected) => {
                assert_eq!(code, Some(expected), "{k:?}");
                assert!(
                    closed_after >= FAILED_AUTHENTICATION_DELAY,
                    "{k:?}: closed {closed_after:?} after the knock, before \
                     connection.failed.authentication.delay.ms"
                );
            }
            Refusal::Closed => assert_eq!(code, None, "{k:?}"),
        }
        baseline.assert_same(&su.snapshot(&ctx).await, &format!("{k:?}"));
    }

    let rows = api_rows(&fixture);
    for row in &rows {
        let Some(expect) = row.client else {
            continue;
        };
        let seen = match as_alice(addr, &row.frame).await {
            Some(body) => (row.read)(body),
            None => Seen::Closed,
        };
        let what = format!("client listener, {}", row.what);
        check(&what, expect, &seen);
        baseline.assert_same(&su.snapshot(&ctx).await, &what);
    }
    for row in &rows {
        let Some(expect) = row.controller else {
            continue;
        };
        let seen = match controller_exchange(&ctx, ALICE, &row.frame).await {
            Ok(Some(answer)) => (row.read)(answer.slice(4..)),
            Ok(None) => Seen::Answer {
                codes: vec![],
                shown: vec!["taken without an answer".to_owned()],
            },
            Err(_) => Seen::Closed,
        };
        let what = format!("controller listener, {}", row.what);
        check(&what, expect, &seen);
        baseline.assert_same(&su.snapshot(&ctx).await, &what);
    }

    stalls_while_served(
        addr,
        &[Stall::Silent, Stall::HalfFrame, Stall::AfterSaslHandshake],
        None,
        &su,
        &ctx,
        &baseline,
    )
    .await;

    // Still as before: carol's password, alice's, and the transaction alice could not end,
    // which the super user commits (its marker lands).
    let mut carol = TcpStream::connect(addr).await.unwrap();
    scram_authenticate(&mut carol, "SCRAM-SHA-256", "carol", "carol-secret")
        .await
        .unwrap();
    let ended: EndTxnResponse = su
        .call(
            3,
            &end_transaction((fixture.producer_id, fixture.producer_epoch)),
        )
        .await;
    assert_eq!(
        ended.error_code, 0,
        "the super user's transaction is intact"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_on_the_ssl_listener_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let mut settings = pki.broker_settings("required");
    settings.extend([
        format!("connections.max.idle.ms={}", IDLE.as_millis()),
        "offsets.topic.num.partitions=1".to_owned(),
        "transaction.state.log.num.partitions=1".to_owned(),
    ]);
    let broker = start_ssl_broker(data.path(), &settings).await;
    let addr = broker.local_addr;
    let ctx = broker.context.clone();
    let (cert, key) = pki.issue("admin", &[]);
    let trusted = pki.client_config(Some((cert, &key)));
    let su = SuperUser::Tls(addr, Arc::new(trusted.clone()));
    set_up(&su, &ctx, false).await;
    let baseline = su.snapshot(&ctx).await;

    for k in [
        TlsKnock::UntrustedCertificate,
        TlsKnock::ImpostorCertificate,
        TlsKnock::NoCertificate,
        TlsKnock::Plaintext,
    ] {
        assert!(!tls_knock(addr, k, &pki).await, "{k:?} was answered");
        baseline.assert_same(&su.snapshot(&ctx).await, &format!("{k:?}"));
    }
    stalls_while_served(
        addr,
        &[Stall::Silent, Stall::HalfClientHello, Stall::UnfinishedTls],
        Some(trusted),
        &su,
        &ctx,
        &baseline,
    )
    .await;
    broker.shutdown().await.unwrap();
}

/// The matrix covers every API each listener serves: a new API needs its row.
#[test]
fn every_api_served_has_a_row() {
    let fixture = Fixture {
        cluster_id: String::new(),
        node_id: 1,
        broker_epoch: 1,
        metadata_offset: 1,
        topic_id: uuid::Uuid::nil(),
        leader_epoch: 0,
        partition_epoch: 0,
        producer_id: 1,
        producer_epoch: 0,
        other_dir: String::new(),
    };
    let rows = api_rows(&fixture);
    let unauthenticated = [
        ApiKey::ApiVersions,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
    ];
    for (api, _, _) in SUPPORTED {
        if !unauthenticated.contains(api) {
            assert!(
                rows.iter()
                    .any(|r| r.api == Some(*api) && r.client.is_some_and(|e| e != Expect::Closed)),
                "no row for {api:?} on the client listener"
            );
        }
    }
    for (api, _, _) in CONTROLLER_SUPPORTED {
        if !unauthenticated.contains(api) {
            assert!(
                rows.iter()
                    .any(|r| r.api == Some(*api) && r.controller.is_some()),
                "no row for {api:?} on the controller listener"
            );
        }
    }
}
