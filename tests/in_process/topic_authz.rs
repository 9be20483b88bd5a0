//! What a caller with some ACLs, but not every one, is told about the topics, transactions and
//! groups around it, as Kafka 4.1 tells it: an in-process broker with the StandardAuthorizer,
//! `User:admin` its super user setting the scene, and alice's requests handed to the client
//! listener's dispatch.

use crate::common;
use crate::security_support::{decode_answer, encode_frame, name};

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::start_broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};
use kafkaiq::context::Context;

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

const ADMIN: &str = "User:admin";
const ALICE: &str = "User:alice";

// ACL codes (Kafka's `ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`).
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DESCRIBE: i8 = 8;
const DESCRIBE_CONFIGS: i8 = 10;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// `request` at `version` through the client listener's dispatch, as `principal`.
async fn call_as<R: Request>(
    ctx: &Arc<Context>,
    principal: &str,
    version: i16,
    request: &R,
) -> R::Response {
    let frame = encode_frame(version, request);
    let answer = kafkaiq::server::dispatch::handle_frame(
        ctx,
        frame.slice(4..),
        "127.0.0.1:40000".parse().unwrap(),
        principal,
        "PLAINTEXT",
    )
    .await
    .expect("handled")
    .expect("answered")
    .into_bytes();
    decode_answer::<R>(version, answer.slice(4..))
}

async fn authorized_broker(dir: &std::path::Path) -> common::TestBroker {
    start_broker(
        dir,
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
        ],
    )
    .await
}

/// One ACL of alice's from any host.
fn acl(
    resource_type: i8,
    resource: &str,
    operation: i8,
    permission: i8,
) -> create_acls_request::AclCreation {
    create_acls_request::AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(str(resource))
        .with_resource_pattern_type(LITERAL)
        .with_principal(str(ALICE))
        .with_host(str("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

/// `acls` created by the admin and in the image the requests are checked against.
async fn grant(ctx: &Arc<Context>, acls: Vec<create_acls_request::AclCreation>) {
    let expected = ctx.image().acls.len() + acls.len();
    let created: CreateAclsResponse = call_as(
        ctx,
        ADMIN,
        3,
        &CreateAclsRequest::default().with_creations(acls),
    )
    .await;
    assert!(
        created.results.iter().all(|r| r.error_code == 0),
        "{created:?}"
    );
    until("the ACLs in the image", || async {
        ctx.image().acls.len() >= expected
    })
    .await;
}

/// Waits until `done`, for 20 s at most: a partition's leader, a coordinator, an ACL come up a
/// moment after they are asked for.
async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    until_some(what, || {
        let done = done();
        async move { done.await.then_some(()) }
    })
    .await
}

/// As [`until`], for the first answer that is `Some`.
async fn until_some<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = attempt().await {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: not yet");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_topics(ctx: &Arc<Context>, topics: &[&str]) {
    let created: CreateTopicsResponse = call_as(
        ctx,
        ADMIN,
        5,
        &CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        create_topics_request::CreatableTopic::default()
                            .with_name(name(t))
                            .with_num_partitions(1)
                            .with_replication_factor(1)
                    })
                    .collect(),
            ),
    )
    .await;
    assert!(
        created.topics.iter().all(|t| t.error_code == 0),
        "{created:?}"
    );
}

/// `key`'s coordinator (0 a group, 1 a transactional id) found, its topic created.
async fn find_coordinator(ctx: &Arc<Context>, key_type: i8, key: &str) {
    until("a coordinator", || async {
        let found: FindCoordinatorResponse = call_as(
            ctx,
            ADMIN,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![str(key)]),
        )
        .await;
        found.coordinators[0].error_code == 0
    })
    .await;
    if key_type == 0 {
        // FindCoordinator names the coordinator before it has loaded its partition of
        // __consumer_offsets; wait past COORDINATOR_LOAD_IN_PROGRESS (14) too, or a group
        // request in the test could be answered with it.
        until("the group coordinator loaded", || async {
            let described: DescribeGroupsResponse = call_as(
                ctx,
                ADMIN,
                5,
                &DescribeGroupsRequest::default().with_groups(vec![GroupId(str(key))]),
            )
            .await;
            described.groups[0].error_code == 0
        })
        .await;
    }
}

/// `transactional_id`'s producer, initialized by `principal`.
async fn init_transactional(
    ctx: &Arc<Context>,
    principal: &str,
    transactional_id: &str,
) -> (i64, i16) {
    find_coordinator(ctx, 1, transactional_id).await;
    until_some("a producer id", || async {
        let init: InitProducerIdResponse = call_as(
            ctx,
            principal,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(str(transactional_id))))
                .with_transaction_timeout_ms(600_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .await;
        (init.error_code == 0).then_some((init.producer_id.0, init.producer_epoch))
    })
    .await
}

/// Partition 0 of each of `topics` added to the admin's transaction `transactional_id`.
async fn add_partitions(
    ctx: &Arc<Context>,
    transactional_id: &str,
    (id, epoch): (i64, i16),
    topics: &[&str],
) {
    let added: AddPartitionsToTxnResponse = call_as(
        ctx,
        ADMIN,
        3,
        &AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(str(transactional_id)))
            .with_v3_and_below_producer_id(ProducerId(id))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(
                topics
                    .iter()
                    .map(|t| {
                        add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                            .with_name(name(t))
                            .with_partitions(vec![0])
                    })
                    .collect(),
            ),
    )
    .await;
    for t in &added.results_by_topic_v3_and_below {
        assert_eq!(
            t.results_by_partition[0].partition_error_code, 0,
            "{added:?}"
        );
    }
}

/// Kafka's `authorizeByResourceType`: alice's ALLOW of WRITE on topic `t` is cancelled by her
/// DENY of WRITE on `t`, so she may not write any topic and, without IDEMPOTENT_WRITE on the
/// cluster, gets no idempotent producer id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_cancelled_by_a_deny_on_the_same_topic_gives_no_idempotent_producer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = authorized_broker(dir.path()).await;
    let ctx = broker.context.clone();
    grant(
        &ctx,
        vec![acl(TOPIC, "t", WRITE, ALLOW), acl(TOPIC, "t", WRITE, DENY)],
    )
    .await;
    let idempotent = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let refused: InitProducerIdResponse = call_as(&ctx, ALICE, 4, &idempotent).await;
    assert_eq!(
        refused.error_code, CLUSTER_AUTHORIZATION_FAILED,
        "{refused:?}"
    );
    // An ALLOW of another topic, not denied, is enough.
    grant(&ctx, vec![acl(TOPIC, "u", WRITE, ALLOW)]).await;
    let code = until_some("an idempotent producer id", || async {
        let init: InitProducerIdResponse = call_as(&ctx, ALICE, 4, &idempotent).await;
        // Past COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS.
        (init.error_code != 15 && init.error_code != 14).then_some(init.error_code)
    })
    .await;
    assert_eq!(code, 0);
    broker.shutdown().await.unwrap();
}

/// ListTransactions lists only the transactional ids the caller may DESCRIBE, even to a
/// caller that may DESCRIBE the cluster; DescribeTransactions leaves out the topics it may not
/// DESCRIBE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_are_listed_and_described_only_as_far_as_the_caller_may_describe() {
    let dir = tempfile::tempdir().unwrap();
    let broker = authorized_broker(dir.path()).await;
    let ctx = broker.context.clone();
    create_topics(&ctx, &["seen", "hidden"]).await;
    let open = init_transactional(&ctx, ADMIN, "open-txn").await;
    add_partitions(&ctx, "open-txn", open, &["seen", "hidden"]).await;
    init_transactional(&ctx, ADMIN, "other-txn").await;
    grant(
        &ctx,
        vec![
            acl(CLUSTER, "kafka-cluster", DESCRIBE, ALLOW),
            acl(TRANSACTIONAL_ID, "open-txn", DESCRIBE, ALLOW),
            acl(TOPIC, "seen", DESCRIBE, ALLOW),
        ],
    )
    .await;

    let listed: ListTransactionsResponse =
        call_as(&ctx, ALICE, 1, &ListTransactionsRequest::default()).await;
    assert_eq!(listed.error_code, 0, "{listed:?}");
    let ids: Vec<&str> = listed
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.as_str())
        .collect();
    assert_eq!(ids, ["open-txn"], "{listed:?}");

    let described: DescribeTransactionsResponse = call_as(
        &ctx,
        ALICE,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(str("open-txn"))]),
    )
    .await;
    let state = &described.transaction_states[0];
    assert_eq!(state.error_code, 0, "{described:?}");
    let topics: Vec<&str> = state.topics.iter().map(|t| t.topic.as_str()).collect();
    assert_eq!(topics, ["seen"], "{described:?}");
    // The super user sees both.
    let described: DescribeTransactionsResponse = call_as(
        &ctx,
        ADMIN,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(str("open-txn"))]),
    )
    .await;
    assert_eq!(described.transaction_states[0].topics.len(), 2);
    broker.shutdown().await.unwrap();
}

/// A topic created by a caller that may not DESCRIBE_CONFIGS it is answered without its
/// configs, partitions and replication factor, TOPIC_AUTHORIZATION_FAILED as its config error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_answers_configs_only_to_who_may_describe_them() {
    let dir = tempfile::tempdir().unwrap();
    let broker = authorized_broker(dir.path()).await;
    let ctx = broker.context.clone();
    grant(
        &ctx,
        vec![
            acl(TOPIC, "blind", CREATE, ALLOW),
            acl(TOPIC, "shown", CREATE, ALLOW),
            acl(TOPIC, "shown", DESCRIBE_CONFIGS, ALLOW),
        ],
    )
    .await;
    let created: CreateTopicsResponse = call_as(
        &ctx,
        ALICE,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(
                ["blind", "shown"]
                    .iter()
                    .map(|t| {
                        create_topics_request::CreatableTopic::default()
                            .with_name(name(t))
                            .with_num_partitions(2)
                            .with_replication_factor(1)
                    })
                    .collect(),
            ),
    )
    .await;
    let blind = created
        .topics
        .iter()
        .find(|t| t.name.as_str() == "blind")
        .unwrap();
    assert_eq!(blind.error_code, 0, "{created:?}");
    assert_eq!(blind.topic_config_error_code, TOPIC_AUTHORIZATION_FAILED);
    assert!(
        blind.configs.as_ref().is_none_or(Vec::is_empty),
        "{blind:?}"
    );
    assert_eq!((blind.num_partitions, blind.replication_factor), (-1, -1));
    assert!(!blind.topic_id.is_nil());
    let shown = created
        .topics
        .iter()
        .find(|t| t.name.as_str() == "shown")
        .unwrap();
    assert_eq!(shown.error_code, 0, "{created:?}");
    assert_eq!(shown.topic_config_error_code, 0);
    assert!(shown.configs.as_ref().is_some_and(|c| !c.is_empty()));
    assert_eq!((shown.num_partitions, shown.replication_factor), (2, 1));
    broker.shutdown().await.unwrap();
}

/// A TxnOffsetCommit naming a topic the caller may not READ answers that topic's partitions
/// TOPIC_AUTHORIZATION_FAILED and commits the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_offset_commit_refuses_only_the_topics_the_caller_may_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let broker = authorized_broker(dir.path()).await;
    let ctx = broker.context.clone();
    create_topics(&ctx, &["seen", "hidden"]).await;
    find_coordinator(&ctx, 0, "txn-group").await;
    grant(
        &ctx,
        vec![
            acl(TRANSACTIONAL_ID, "alice-txn", WRITE, ALLOW),
            acl(GROUP, "txn-group", READ, ALLOW),
            acl(TOPIC, "seen", READ, ALLOW),
        ],
    )
    .await;
    let (id, epoch) = init_transactional(&ctx, ALICE, "alice-txn").await;
    let added: AddOffsetsToTxnResponse = call_as(
        &ctx,
        ALICE,
        3,
        &AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(str("alice-txn")))
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(epoch)
            .with_group_id(GroupId(str("txn-group"))),
    )
    .await;
    assert_eq!(added.error_code, 0, "{added:?}");
    use txn_offset_commit_request::{TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic};
    let commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(str("alice-txn")))
        .with_group_id(GroupId(str("txn-group")))
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch)
        .with_topics(
            ["hidden", "seen"]
                .iter()
                .map(|t| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(name(t))
                        .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(0)])
                })
                .collect(),
        );
    let committed: TxnOffsetCommitResponse = call_as(&ctx, ALICE, 3, &commit).await;
    let codes: Vec<(&str, i16)> = committed
        .topics
        .iter()
        .map(|t| (t.name.as_str(), t.partitions[0].error_code))
        .collect();
    assert_eq!(
        codes,
        [("hidden", TOPIC_AUTHORIZATION_FAILED), ("seen", 0)],
        "{committed:?}"
    );
    broker.shutdown().await.unwrap();
}

fn heartbeat(member: &str, topics: &[&str]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str("cg")))
        .with_member_id(str(member))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(topics.iter().map(|t| name(t)).collect()))
        .with_topic_partitions(Some(vec![]))
}

/// KAFKA-18813: a heartbeat subscribing by name to a topic the caller may not DESCRIBE is
/// answered TOPIC_AUTHORIZATION_FAILED naming it and joins nothing; a ConsumerGroupDescribe of
/// a group whose members use such a topic is answered TOPIC_AUTHORIZATION_FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_need_describe_on_their_topics() {
    let dir = tempfile::tempdir().unwrap();
    let broker = authorized_broker(dir.path()).await;
    let ctx = broker.context.clone();
    create_topics(&ctx, &["seen", "hidden"]).await;
    find_coordinator(&ctx, 0, "cg").await;
    grant(
        &ctx,
        vec![
            acl(GROUP, "cg", READ, ALLOW),
            acl(GROUP, "cg", DESCRIBE, ALLOW),
            acl(TOPIC, "seen", DESCRIBE, ALLOW),
        ],
    )
    .await;

    let refused: ConsumerGroupHeartbeatResponse = call_as(
        &ctx,
        ALICE,
        0,
        &heartbeat("alice-member-0000000", &["seen", "hidden"]),
    )
    .await;
    assert_eq!(
        refused.error_code, TOPIC_AUTHORIZATION_FAILED,
        "{refused:?}"
    );
    let message = refused.error_message.as_deref().unwrap_or_default();
    assert!(
        message.contains("hidden") && !message.contains("seen"),
        "{message}"
    );
    let describe = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(str("cg"))]);
    let described: ConsumerGroupDescribeResponse = call_as(&ctx, ADMIN, 0, &describe).await;
    assert!(
        described.groups[0].members.is_empty(),
        "a refused heartbeat joined: {described:?}"
    );

    // Alice joins with the topic she may see; the admin's member subscribes to the other.
    let joined: ConsumerGroupHeartbeatResponse = call_as(
        &ctx,
        ALICE,
        0,
        &heartbeat("alice-member-0000000", &["seen"]),
    )
    .await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let described: ConsumerGroupDescribeResponse = call_as(&ctx, ALICE, 0, &describe).await;
    assert_eq!(described.groups[0].error_code, 0, "{described:?}");
    assert_eq!(described.groups[0].members.len(), 1);
    let joined: ConsumerGroupHeartbeatResponse = call_as(
        &ctx,
        ADMIN,
        0,
        &heartbeat("admin-member-0000000", &["hidden"]),
    )
    .await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let described: ConsumerGroupDescribeResponse = call_as(&ctx, ALICE, 0, &describe).await;
    let group = &described.groups[0];
    assert_eq!(
        group.error_code, TOPIC_AUTHORIZATION_FAILED,
        "{described:?}"
    );
    assert!(group.members.is_empty(), "{described:?}");
    let described: ConsumerGroupDescribeResponse = call_as(&ctx, ADMIN, 0, &describe).await;
    assert_eq!(described.groups[0].error_code, 0, "{described:?}");
    assert_eq!(described.groups[0].members.len(), 2);
    broker.shutdown().await.unwrap();
}
