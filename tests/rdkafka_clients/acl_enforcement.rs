//! ACLs enforced by the `StandardAuthorizer` on a SASL_PLAINTEXT (PLAIN) listener, with the real
//! `kafkaiq` binary as a child process (or Apache Kafka 4.1.1 from the same server.properties
//! lines, with `BROKER_UNDER_TEST=apache-kafka`: `run-all.sh --against kafka`), Apache Kafka 4.1.1's `kafka-acls`
//! (`org.apache.kafka.tools.AclCommand`) and console consumer with `--command-config`, and raw
//! requests for the exact answers:
//!
//! - `admin` is a super user; `alice` has no ACL at first: Metadata lists no topic to her and
//!   answers TOPIC_AUTHORIZATION_FAILED for the one she names, her produce is refused
//!   TOPIC_AUTHORIZATION_FAILED and appends nothing, her fetch TOPIC_AUTHORIZATION_FAILED with
//!   no records, her group requests
//!   GROUP_AUTHORIZATION_FAILED, her CreateAcls CLUSTER_AUTHORIZATION_FAILED, and her
//!   WriteTxnMarkers CLUSTER_AUTHORIZATION_FAILED with no marker written;
//! - `kafka-acls --add` as admin gives her WRITE and READ on the topic and READ on the group:
//!   she then sees the topic (only that one), produces, fetches, and consumes with a group
//!   through the console consumer; `kafka-acls --list` shows the ACLs;
//! - after a restart the ACLs are still there and still enforced;
//! - `kafka-acls --remove` takes them away and she is refused again.
//!
//! And narrow grants allow what they allow in Kafka: DESCRIBE on a group and a topic is enough
//! to fetch the group's offsets, DELETE on the cluster to delete any topic, CLUSTER_ACTION to
//! ask any topic's OffsetForLeaderEpoch as a consumer; a CLUSTER ACL must name `kafka-cluster`;
//! and nobody, a super user included, may append to `__consumer_offsets`.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::broker_process::{apache_kafka_command, free_port, kafkaiq_command, BrokerProcess};
use common::cluster::kafka_libs;
use common::{batch, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\" \
    user_bob=\"bob-secret\";";

/// The node's server.properties lines, the same for KafkaIQ and Apache Kafka
/// (`BROKER_UNDER_TEST=apache-kafka`): a combined KRaft node whose client and inter-broker
/// listener is SASL_PLAINTEXT and whose controller listener is PLAINTEXT. Its own requests
/// to its controller come as `User:ANONYMOUS`, hence that super user beside `admin`.
fn settings(port: u16, controller_port: u16) -> Vec<String> {
    let listeners =
        format!("SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}");
    vec![
        "process.roles=broker,controller".to_owned(),
        "node.id=1".to_owned(),
        format!("controller.quorum.voters=1@127.0.0.1:{controller_port}"),
        format!("listeners={listeners}"),
        format!("advertised.listeners={listeners}"),
        "controller.listener.names=CONTROLLER".to_owned(),
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
            .to_owned(),
        "inter.broker.listener.name=SASL_PLAINTEXT".to_owned(),
        "sasl.enabled.mechanisms=PLAIN".to_owned(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".to_owned(),
        format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}"),
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
        "super.users=User:admin;User:ANONYMOUS".to_owned(),
        "offsets.topic.replication.factor=1".to_owned(),
        "transaction.state.log.replication.factor=1".to_owned(),
        "transaction.state.log.min.isr=1".to_owned(),
        "group.initial.rebalance.delay.ms=0".to_owned(),
    ]
}

/// The broker under test (`BROKER_UNDER_TEST`: this build's `kafkaiq`, or Apache Kafka 4.1.1
/// through `integration/apache-kafka.sh`), started again on the same data by a second call.
fn start(port: u16, controller_port: u16, dir: &Path, log: &Path) -> BrokerProcess {
    let settings = settings(port, controller_port);
    let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
    let kind = std::env::var("BROKER_UNDER_TEST").unwrap_or_else(|_| "kafkaiq".into());
    let cmd = match kind.as_str() {
        "apache-kafka" => apache_kafka_command(&dir.join("kafka"), port, controller_port, &refs),
        _ => kafkaiq_command(port, &dir.join("data"), &refs),
    };
    let mut p = BrokerProcess::spawn(&kind, cmd, log);
    p.await_listening(port);
    p
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// A connection authenticated as `user` (SaslHandshake v1, SaslAuthenticate v2, PLAIN).
async fn connect_as(port: u16, user: &str, password: &str) -> RawClient {
    let mut c = RawClient::connect(([127, 0, 0, 1], port).into()).await;
    let handshake: SaslHandshakeResponse = c
        .call(
            1,
            &SaslHandshakeRequest::default().with_mechanism(str("PLAIN")),
        )
        .await;
    assert_eq!(handshake.error_code, 0);
    let auth: SaslAuthenticateResponse = c
        .call(
            2,
            &SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from(format!("\0{user}\0{password}"))),
        )
        .await;
    assert_eq!(auth.error_code, 0, "{user} authenticates");
    c
}

async fn metadata(c: &mut RawClient, topics: Option<&[&str]>) -> MetadataResponse {
    let request = MetadataRequest::default()
        .with_topics(topics.map(|list| {
            list.iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(false)
        .with_include_topic_authorized_operations(true);
    c.call(12, &request).await
}

/// One record produced to partition 0 of `topic`: its error code and base offset.
async fn produce(c: &mut RawClient, topic: &str, value: &str) -> (i16, i64) {
    let request = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[value], None)))])]);
    let r: ProduceResponse = c.call(9, &request).await;
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// The log end offset of partition 0 of `topic`, as `c` may ask.
async fn log_end(c: &mut RawClient, topic: &str) -> i64 {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let r: ListOffsetsResponse = c.call(7, &request).await;
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0, "ListOffsets of {topic}");
    p.offset
}

/// A fetch of partition 0 of `topic` from offset 0: its error code and whether records came.
async fn fetch(c: &mut RawClient, topic: &str) -> (i16, bool) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let r: FetchResponse = c.call(11, &request).await;
    let p = &r.responses[0].partitions[0];
    (
        p.error_code,
        p.records.as_ref().is_some_and(|b| !b.is_empty()),
    )
}

/// The group coordinator lookup's error code. COORDINATOR_NOT_AVAILABLE is asked again, as
/// clients do: Apache Kafka answers it while the first lookup creates `__consumer_offsets`.
async fn find_group_coordinator(c: &mut RawClient, group: &str) -> i16 {
    const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r: FindCoordinatorResponse = c
            .call(
                4,
                &FindCoordinatorRequest::default()
                    .with_key_type(0)
                    .with_coordinator_keys(vec![str(group)]),
            )
            .await;
        let code = r.coordinators[0].error_code;
        if code != COORDINATOR_NOT_AVAILABLE || Instant::now() >= deadline {
            return code;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn commit_offset(c: &mut RawClient, group: &str, topic: &str, offset: i64) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR are asked
    // again, as clients do: Apache Kafka answers them while the new offsets partition loads.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r: OffsetCommitResponse = c.call(8, &request).await;
        let code = r.topics[0].partitions[0].error_code;
        if !(14..=16).contains(&code) || Instant::now() >= deadline {
            return code;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `topics` (one partition each, replication factor 1) as `c`, and checks that all were.
async fn create_topics(c: &mut RawClient, topics: &[&str]) {
    let created: CreateTopicsResponse = c
        .call(
            5,
            &CreateTopicsRequest::default()
                .with_timeout_ms(10_000)
                .with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            CreatableTopic::default()
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

/// Runs one of Apache Kafka's tools with `args`; its exit code and output.
fn kafka_tool(main_class: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(format!("{}/*", kafka_libs().display()))
        .arg(main_class)
        .args(args)
        .output()
        .expect("run java");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let text: Vec<&str> = text.lines().filter(|l| !l.starts_with("SLF4J")).collect();
    (out.status.code().unwrap_or(-1), text.join("\n"))
}

const ACLS: &str = "org.apache.kafka.tools.AclCommand";
const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";

fn client_properties(dir: &Path, user: &str, password: &str) -> String {
    let path = dir.join(format!("{user}.properties"));
    std::fs::write(
        &path,
        format!(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n\
             sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"{user}\" password=\"{password}\";\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn acls(bootstrap: &str, admin: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", bootstrap, "--command-config", admin];
    all.extend_from_slice(args);
    let (code, out) = tokio::task::block_in_place(|| kafka_tool(ACLS, &all));
    assert_eq!(code, 0, "kafka-acls {args:?}:\n{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_created_listed_enforced_kept_across_a_restart_and_removed_with_kafka_acls() {
    let dir = tempfile::tempdir().unwrap();
    let (port, controller_port) = (free_port(), free_port());
    let bootstrap = format!("127.0.0.1:{port}");
    let mut broker = start(
        port,
        controller_port,
        dir.path(),
        &dir.path().join("run1.log"),
    );
    let admin_props = client_properties(dir.path(), "admin", "admin-secret");
    let alice_props = client_properties(dir.path(), "alice", "alice-secret");

    let mut admin = connect_as(port, "admin", "admin-secret").await;
    create_topics(&mut admin, &["orders", "secret"]).await;
    // The super user sees both, with every operation authorized.
    let seen = metadata(&mut admin, None).await;
    assert_eq!(seen.topics.len(), 2, "{seen:?}");

    // Alice, without any ACL.
    let mut alice = connect_as(port, "alice", "alice-secret").await;
    let listed = metadata(&mut alice, None).await;
    assert!(listed.topics.is_empty(), "hidden: {listed:?}");
    let named = metadata(&mut alice, Some(&["orders"])).await;
    assert_eq!(named.topics[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    assert!(named.topics[0].partitions.is_empty());
    assert_eq!(
        produce(&mut alice, "orders", "refused").await.0,
        TOPIC_AUTHORIZATION_FAILED
    );
    assert_eq!(log_end(&mut admin, "orders").await, 0, "nothing appended");
    assert_eq!(produce(&mut admin, "orders", "first").await, (0, 0));
    assert_eq!(
        fetch(&mut alice, "orders").await,
        (TOPIC_AUTHORIZATION_FAILED, false),
        "no records to a consumer without READ"
    );
    assert_eq!(fetch(&mut admin, "orders").await, (0, true));
    assert_eq!(
        find_group_coordinator(&mut alice, "readers").await,
        GROUP_AUTHORIZATION_FAILED
    );
    assert_eq!(
        commit_offset(&mut alice, "readers", "orders", 0).await,
        GROUP_AUTHORIZATION_FAILED
    );
    let create_acl: CreateAclsResponse = alice
        .call(
            3,
            &CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(str("orders"))
                    .with_resource_pattern_type(3)
                    .with_principal(str("User:alice"))
                    .with_host(str("*"))
                    .with_operation(2)
                    .with_permission_type(3),
            ]),
        )
        .await;
    assert_eq!(
        create_acl.results[0].error_code,
        CLUSTER_AUTHORIZATION_FAILED
    );
    // An inter-broker API from a client: refused, and no marker is written.
    let markers: WriteTxnMarkersResponse = alice
        .call(
            1,
            &WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(7))
                .with_producer_epoch(0)
                .with_transaction_result(true)
                .with_coordinator_epoch(0)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(name("orders"))
                    .with_partition_indexes(vec![0])])]),
        )
        .await;
    assert_eq!(
        markers.markers[0].topics[0].partitions[0].error_code,
        CLUSTER_AUTHORIZATION_FAILED
    );
    assert_eq!(log_end(&mut admin, "orders").await, 1, "no marker written");

    // kafka-acls as the super user.
    acls(
        &bootstrap,
        &admin_props,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--topic",
            "orders",
        ],
    );
    acls(
        &bootstrap,
        &admin_props,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--group",
            "readers",
        ],
    );
    let listed = acls(&bootstrap, &admin_props, &["--list", "--topic", "orders"]);
    assert!(
        listed.contains("User:alice") && listed.contains("WRITE") && listed.contains("READ"),
        "{listed}"
    );
    // A plain user may not change ACLs through the tool either.
    let (code, out) = tokio::task::block_in_place(|| {
        kafka_tool(
            ACLS,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--command-config",
                &alice_props,
                "--add",
                "--allow-principal",
                "User:alice",
                "--operation",
                "All",
                "--topic",
                "secret",
            ],
        )
    });
    assert!(
        code != 0 || out.contains("ClusterAuthorization"),
        "alice changed ACLs:\n{out}"
    );

    // Allowed now: she sees the topic (only that one, with READ, WRITE and DESCRIBE), produces,
    // commits offsets for the group, and consumes with the group.
    let listed = metadata(&mut alice, None).await;
    let names: Vec<String> = listed
        .topics
        .iter()
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(names, ["orders"]);
    let ops = listed.topics[0].topic_authorized_operations;
    for op in [3, 4, 8] {
        assert_ne!(ops & (1 << op), 0, "operation {op} in {ops:b}");
    }
    assert_eq!(ops & (1 << 6), 0, "no DELETE in {ops:b}");
    assert_eq!(produce(&mut alice, "orders", "hello").await, (0, 1));
    assert_eq!(fetch(&mut alice, "orders").await, (0, true));
    assert_eq!(find_group_coordinator(&mut alice, "readers").await, 0);
    assert_eq!(commit_offset(&mut alice, "readers", "orders", 0).await, 0);
    let (code, out) = tokio::task::block_in_place(|| {
        kafka_tool(
            CONSOLE_CONSUMER,
            &[
                "--bootstrap-server",
                &bootstrap,
                "--consumer.config",
                &alice_props,
                "--topic",
                "orders",
                "--group",
                "readers",
                "--from-beginning",
                "--max-messages",
                "2",
                "--timeout-ms",
                "30000",
            ],
        )
    });
    assert!(
        code == 0 && out.lines().any(|l| l == "first") && out.lines().any(|l| l == "hello"),
        "console consumer as alice:\n{out}"
    );
    // Still hidden: the other topic.
    let secret = metadata(&mut alice, Some(&["secret"])).await;
    assert_eq!(secret.topics[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    drop((admin, alice));

    // A restart keeps the ACLs.
    broker.stop().unwrap();
    let mut broker = start(
        port,
        controller_port,
        dir.path(),
        &dir.path().join("run2.log"),
    );
    let listed = acls(&bootstrap, &admin_props, &["--list"]);
    assert!(
        listed.contains("orders") && listed.contains("readers"),
        "after the restart:\n{listed}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut alice = connect_as(port, "alice", "alice-secret").await;
    loop {
        // The partition's leadership comes back with the broker's registration.
        let (code, offset) = produce(&mut alice, "orders", "again").await;
        if code == 0 {
            assert!(offset >= 2);
            break;
        }
        assert_ne!(code, TOPIC_AUTHORIZATION_FAILED, "ACL lost in the restart");
        assert!(
            Instant::now() < deadline,
            "no produce after restart: {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Removed: refused again.
    acls(
        &bootstrap,
        &admin_props,
        &[
            "--remove",
            "--force",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--topic",
            "orders",
        ],
    );
    assert_eq!(
        produce(&mut alice, "orders", "refused again").await.0,
        TOPIC_AUTHORIZATION_FAILED
    );
    let listed = acls(&bootstrap, &admin_props, &["--list", "--topic", "orders"]);
    assert!(!listed.contains("User:alice"), "{listed}");
    broker.stop().unwrap();
}

/// Creates one ALLOW ACL (LITERAL, any host) for `principal` as `admin`, a super user. It
/// reaches the broker's authorizer through the metadata log, shortly after the answer.
async fn allow(admin: &mut RawClient, principal: &str, resource: (i8, &str), operation: i8) {
    let created: CreateAclsResponse = admin
        .call(
            3,
            &CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(resource.0)
                    .with_resource_name(str(resource.1))
                    .with_resource_pattern_type(3)
                    .with_principal(str(principal))
                    .with_host(str("*"))
                    .with_operation(operation)
                    .with_permission_type(3),
            ]),
        )
        .await;
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrow_grants_allow_what_they_allow_in_kafka_and_internal_topics_refuse_appends() {
    const TOPIC: i8 = 2;
    const GROUP: i8 = 3;
    const CLUSTER: i8 = 4;
    const DESCRIBE: i8 = 8;
    const DELETE: i8 = 6;
    const CLUSTER_ACTION: i8 = 9;
    const INVALID_TOPIC_EXCEPTION: i16 = 17;
    const INVALID_REQUEST: i16 = 42;
    let dir = tempfile::tempdir().unwrap();
    let (port, controller_port) = (free_port(), free_port());
    let mut broker = start(
        port,
        controller_port,
        dir.path(),
        &dir.path().join("run.log"),
    );
    let mut admin = connect_as(port, "admin", "admin-secret").await;
    create_topics(&mut admin, &["watched", "doomed"]).await;
    // Apache Kafka answers NOT_LEADER_OR_FOLLOWER until the new topic reaches its broker side.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, offset) = produce(&mut admin, "watched", "w").await;
        if code == 0 {
            assert_eq!(offset, 0);
            break;
        }
        assert!(
            code == 6 && Instant::now() < deadline,
            "produce to a new topic: {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(find_group_coordinator(&mut admin, "monitors").await, 0);
    assert_eq!(commit_offset(&mut admin, "monitors", "watched", 1).await, 0);

    // Nobody appends to an internal topic, a super user included (INVALID_TOPIC_EXCEPTION).
    assert_eq!(
        produce(&mut admin, "__consumer_offsets", "forged").await.0,
        INVALID_TOPIC_EXCEPTION
    );

    // A CLUSTER ACL names `kafka-cluster`, or is refused INVALID_REQUEST.
    let bad: CreateAclsResponse = admin
        .call(
            3,
            &CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(CLUSTER)
                    .with_resource_name(str("kafka"))
                    .with_resource_pattern_type(4)
                    .with_principal(str("User:bob"))
                    .with_host(str("*"))
                    .with_operation(DELETE)
                    .with_permission_type(3),
            ]),
        )
        .await;
    assert_eq!(bad.results[0].error_code, INVALID_REQUEST, "{bad:?}");

    // The cluster grants first: the metadata log applies in order, so once the last one is
    // seen (the offset fetch below waits for it), all are.
    allow(&mut admin, "User:bob", (CLUSTER, "kafka-cluster"), DELETE).await;
    allow(
        &mut admin,
        "User:bob",
        (CLUSTER, "kafka-cluster"),
        CLUSTER_ACTION,
    )
    .await;
    allow(&mut admin, "User:bob", (GROUP, "monitors"), DESCRIBE).await;
    allow(&mut admin, "User:bob", (TOPIC, "watched"), DESCRIBE).await;
    let mut bob = connect_as(port, "bob", "bob-secret").await;

    // DESCRIBE on the group and the topic: the committed offset (READ is not needed).
    let fetch_offsets = OffsetFetchRequest::default()
        .with_group_id(GroupId(str("monitors")))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(name("watched"))
                .with_partition_indexes(vec![0]),
        ]));
    let deadline = Instant::now() + Duration::from_secs(30);
    let fetched = loop {
        let r: OffsetFetchResponse = bob.call(7, &fetch_offsets).await;
        let p = r.topics.first().and_then(|t| t.partitions.first());
        if (r.error_code == 0 && p.is_some_and(|p| p.error_code == 0)) || Instant::now() >= deadline
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(fetched.error_code, 0, "{fetched:?}");
    assert_eq!(
        fetched.topics[0].partitions[0].committed_offset, 1,
        "{fetched:?}"
    );

    // CLUSTER_ACTION: a consumer's OffsetForLeaderEpoch (replica id -1) of a topic bob may not
    // describe.
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    let epochs: OffsetForLeaderEpochResponse = bob
        .call(
            4,
            &OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![OffsetForLeaderTopic::default()
                    .with_topic(name("doomed"))
                    .with_partitions(vec![OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_leader_epoch(0)])]),
        )
        .await;
    assert_eq!(epochs.topics[0].partitions[0].error_code, 0, "{epochs:?}");

    // DELETE on the cluster: any topic may be deleted.
    let deleted: DeleteTopicsResponse = bob
        .call(
            4,
            &DeleteTopicsRequest::default()
                .with_timeout_ms(10_000)
                .with_topic_names(vec![name("doomed")]),
        )
        .await;
    assert_eq!(deleted.responses[0].error_code, 0, "{deleted:?}");
    broker.stop().unwrap();
}
