//! Three processes whose inter-broker listener is secured (the [`common::cluster`] harness): the
//! one broker listener is SASL_SSL with SCRAM-SHA-256, SASL_PLAINTEXT with PLAIN, or SSL with
//! `ssl.client.auth=required`, and `inter.broker.listener.name` names it, as an Apache Kafka
//! 4.1 node's server.properties would. Each cluster forms, a CreateTopics sent to a node that is
//! not the active controller is forwarded to it, and a batch produced with acks=all reaches
//! every follower's log (the followers fetched it over TLS and SASL) with the ISR full.
//!
//! The controller listener may be secured too: SASL_SSL with SCRAM-SHA-256
//! (`sasl.mechanism.controller.protocol`) beside a SASL_SSL inter-broker listener, with an
//! authorizer whose super users are the nodes' SASL users and a broker-only node that follows
//! the metadata log over it; or SSL with `ssl.client.auth=required`. Raft traffic between the
//! voters, registration, heartbeats, forwarding and AlterPartition then all go over it, and a
//! PLAINTEXT client gets no answer on the controller port. A node whose controller password is
//! wrong never joins, and logs why, while the others form a cluster.
//!
//! The test speaks to the nodes with KafkaIQ's own inter-broker client, secured from the same
//! keys the nodes read. A node whose inter-broker password is wrong never joins the ISR and
//! logs why. A node with two broker listeners, clients on a SASL one and replication on a
//! PLAINTEXT one, serves both.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{CreateTopicsRequest, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafkaiq::client::{Client, ClientConfig, Endpoint, RequestOptions};
use kafkaiq::config::inter_broker::{self, Channel, ClientSecurity};
use kafkaiq::config::kraft::SecurityProtocol;
use kafkaiq::config::RawConfig;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use common::cluster::{Cluster, ClusterKind, NodePorts};
use common::{batch, produce_by_name};

const NODES: i32 = 3;
const DEADLINE: Duration = Duration::from_secs(60);
const TOPIC: &str = "secured";

/// A CA, and one certificate it signed for every node (127.0.0.1 and localhost), as PEM files:
/// the key store (chain and key) and the trust store (the CA).
fn pem_stores(dir: &Path) -> (String, String) {
    let mut params = CertificateParams::new(vec![]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "cluster ca");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "broker");
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let keystore = dir.join("broker.pem");
    std::fs::write(&keystore, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
    let truststore = dir.join("ca.pem");
    std::fs::write(&truststore, ca.pem()).unwrap();
    (
        keystore.to_str().unwrap().to_owned(),
        truststore.to_str().unwrap().to_owned(),
    )
}

fn tls_settings(dir: &Path) -> Vec<String> {
    let (keystore, truststore) = pem_stores(dir);
    vec![
        "ssl.keystore.type=PEM".to_owned(),
        format!("ssl.keystore.location={keystore}"),
        "ssl.truststore.type=PEM".to_owned(),
        format!("ssl.truststore.location={truststore}"),
    ]
}

const SCRAM_JAAS: &str = "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=\
    org.apache.kafka.common.security.scram.ScramLoginModule required username=\"broker\" \
    password=\"broker-secret\";";

fn scram_settings(dir: &Path) -> Vec<String> {
    let mut lines = tls_settings(dir);
    lines.extend([
        "sasl.enabled.mechanisms=SCRAM-SHA-256".to_owned(),
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256".to_owned(),
        SCRAM_JAAS.to_owned(),
        "kafkaiq.sasl.scram.users=broker:broker-secret".to_owned(),
    ]);
    lines
}

fn plain_settings(password: &str) -> Vec<String> {
    vec![
        "sasl.enabled.mechanisms=PLAIN".to_owned(),
        "sasl.mechanism.inter.broker.protocol=PLAIN".to_owned(),
        format!(
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=\
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"broker\" password=\"{password}\" user_broker=\"broker-secret\";"
        ),
    ]
}

/// The listener lines of a node whose broker listener `name` speaks `name` (the protocol) and
/// whose controller listener speaks `controller`; a broker-only node (after the [`NODES`]
/// voters) has no controller listener of its own.
fn listener_lines(name: &str, controller: &str, node: &NodePorts) -> Vec<String> {
    let listeners = if node.id > NODES {
        format!("{name}://127.0.0.1:{}", node.client_port)
    } else {
        format!(
            "{name}://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
            node.client_port, node.controller_port
        )
    };
    vec![
        format!("listeners={listeners}"),
        format!("advertised.listeners={listeners}"),
        format!("inter.broker.listener.name={name}"),
        format!("listener.security.protocol.map=CONTROLLER:{controller},{name}:{name}"),
    ]
}

/// A client secured as a node's inter-broker client, from the same lines.
fn client_for(cluster: &Cluster, name: &str, lines: &[String]) -> Client {
    client_of(cluster, name, lines, Channel::InterBroker)
}

/// A client secured as a node's client of `channel`'s listener `name`, from the same lines,
/// to every node's client port (or controller port, for [`Channel::Controller`]).
fn client_of(cluster: &Cluster, name: &str, lines: &[String], channel: Channel) -> Client {
    let mut raw = RawConfig::default();
    for line in lines {
        let (k, v) = line.split_once('=').unwrap();
        raw.set(k, v);
    }
    // The listener's protocol: its name, else what listener.security.protocol.map maps it to.
    let mapped = raw
        .get("listener.security.protocol.map")
        .unwrap_or_default()
        .split(',')
        .find_map(|pair| {
            let (n, p) = pair.split_once(':')?;
            (n.trim() == name).then(|| p.trim().to_owned())
        });
    let protocol = SecurityProtocol::from_name(mapped.as_deref().unwrap_or(name)).unwrap();
    let security: Option<Arc<ClientSecurity>> =
        inter_broker::parse_for(&raw, name, protocol, channel)
            .unwrap()
            .map(Arc::new);
    let client = Client::new(
        ClientConfig {
            client_id: "secure-cluster-test".to_owned(),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(500),
            request_timeout: Duration::from_secs(10),
            security,
            ..ClientConfig::default()
        },
        None,
    );
    for (id, node) in &cluster.nodes {
        let port = match channel {
            Channel::InterBroker => node.client_port,
            Channel::Controller => node.controller_port,
        };
        client
            .set_endpoint(*id, Endpoint::new("127.0.0.1", port))
            .unwrap();
    }
    client
}

async fn metadata(client: &Client, id: i32) -> Option<MetadataResponse> {
    // Not auto-created: the topic must come from the forwarded CreateTopics.
    let request = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))]));
    client.send(id, request).await.ok().map(|r| r.body)
}

/// The topic's partition 0 as node `id` sees it: (leader, ISR).
async fn partition(client: &Client, id: i32) -> Option<(i32, Vec<i32>)> {
    let m = metadata(client, id).await?;
    let p = m.topics.first()?.partitions.first()?;
    (p.error_code == 0).then(|| (p.leader_id.0, p.isr_nodes.iter().map(|b| b.0).collect()))
}

/// Waits until node 1 names an active controller and `brokers` brokers; the controller's id.
async fn await_brokers(cluster: &Cluster, client: &Client, brokers: i32) -> i32 {
    cluster
        .wait_for(
            &format!("an active controller and {brokers} brokers"),
            DEADLINE,
            || async {
                let m = metadata(client, 1).await?;
                (m.controller_id.0 > 0 && m.brokers.len() == brokers as usize)
                    .then_some(m.controller_id.0)
            },
        )
        .await
}

/// Creates the topic with `partitions` and `replication_factor` through node `via` (forwarded
/// to the active controller unless it is that), and expects it created.
async fn create_topic(client: &Client, via: i32, partitions: i32, replication_factor: i16) {
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)]);
    let created = client.send(via, create).await.unwrap();
    assert_eq!(
        created.body.topics[0].error_code, 0,
        "CreateTopics through node {via}: {:?}",
        created.body
    );
}

/// Creates topic `name`, one partition on `replicas` (the first preferred), through node `via`;
/// its error code (`None` when there was no answer).
async fn create_assigned(client: &Client, via: i32, name: &str, replicas: &[i32]) -> Option<i16> {
    let create = common::create_assigned_request(name, replicas);
    let created = client.send(via, create).await.ok()?;
    Some(created.body.topics[0].error_code)
}

/// Starts three nodes with `lines` (and the listener named `name`), then: forward a
/// CreateTopics (RF=3) through a node that is not the active controller, produce with
/// acks=all, and find the batch in every node's log with the ISR full.
async fn replicates_and_forwards(test: &str, name: &str, lines: Vec<String>) {
    replicates_and_forwards_over(test, name, "PLAINTEXT", 0, lines).await;
}

/// [`replicates_and_forwards`] with the controller listener speaking `controller` and
/// `observers` broker-only nodes beside the three voters (every node a replica of the topic).
/// A secured controller listener answers a client secured from the same lines, and nothing to
/// a PLAINTEXT one.
async fn replicates_and_forwards_over(
    test: &str,
    name: &str,
    controller_protocol: &str,
    observers: i32,
    lines: Vec<String>,
) {
    let nodes = NODES + observers;
    let shared = lines.clone();
    let mut cluster =
        Cluster::start_observed(ClusterKind::KafkaIq, test, NODES, observers, &[], |node| {
            let mut all = listener_lines(name, controller_protocol, node);
            all.extend(shared.iter().cloned());
            all
        });
    for id in 1..=nodes {
        cluster.await_listening(id);
    }
    let client = client_for(&cluster, name, &lines);

    let controller = await_brokers(&cluster, &client, nodes).await;
    if controller_protocol != "PLAINTEXT" {
        controller_listener_is_secured(&cluster, controller_protocol, &lines).await;
    }
    let other = (1..=nodes).find(|id| *id != controller).unwrap();
    create_topic(&client, other, 1, nodes as i16).await;
    // In an envelope, taken by the controller as such: the node did not fall back to sending
    // the request as its own.
    let log = cluster.log_text(other);
    assert!(
        !log.contains("forwarding as this node"),
        "node {other} forwarded without an envelope:\n{log}"
    );

    let leader = cluster
        .wait_for("a leader and a full ISR", DEADLINE, || async {
            let (leader, isr) = partition(&client, other).await?;
            (leader > 0 && isr.len() == nodes as usize).then_some(leader)
        })
        .await;
    let records = batch(
        &["first", "second", "replicated-over-a-secured-listener"],
        None,
    );
    assert_eq!(
        produce_all(&cluster, &client, leader, records, "an acks=all produce").await,
        0
    );

    let needle = b"replicated-over-a-secured-listener";
    for id in 1..=nodes {
        cluster
            .wait_for(
                &format!("node {id}'s log to hold the batch"),
                DEADLINE,
                || async {
                    let log = cluster.log_bytes(id, TOPIC, 0);
                    log.windows(needle.len()).any(|w| w == needle).then_some(())
                },
            )
            .await;
    }
    for id in 1..=nodes {
        let (_, isr) = partition(&client, id).await.unwrap();
        assert_eq!(isr.len(), nodes as usize, "node {id} sees ISR {isr:?}");
    }
    if lines
        .iter()
        .any(|l| l.contains("connections.max.reauth.ms="))
    {
        sessions_are_renewed_before_they_end(&cluster, &client, nodes, leader).await;
    }
    client.shutdown();
    cluster.stop_all();
}

/// Produces `records` to the topic's leader with acks=all until it succeeds; its base offset.
async fn produce_all(
    cluster: &Cluster,
    client: &Client,
    leader: i32,
    records: bytes::Bytes,
    what: &str,
) -> i64 {
    let produced = cluster
        .wait_for(what, DEADLINE, || async {
            let records = records.clone();
            // At v12 at most: the topic is addressed by name.
            let options = RequestOptions::default().versions(3, 12);
            let r = client
                .send_with(leader, options, move |_| {
                    produce_by_name(TOPIC, 0, records, -1)
                })
                .await
                .ok()?;
            let p = r
                .body
                .responses
                .first()?
                .partition_responses
                .first()?
                .clone();
            (p.error_code == 0).then_some(p)
        })
        .await;
    produced.base_offset
}

/// A node's SASL counts, over all its listeners.
#[derive(Debug, Clone, Copy)]
struct AuthCounts {
    /// Authentications again on open connections (KIP-368).
    renewed: f64,
    /// Connections closed at a request because their session had ended (Kafka's
    /// expired-connections-killed-count).
    killed: f64,
}

async fn authentications(cluster: &Cluster, id: i32) -> Option<AuthCounts> {
    let (status, _, text) = common::http::get(cluster.nodes[&id].http_addr(), "/metrics").await;
    if status != 200 {
        return None;
    }
    let sum = |family: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(family) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    Some(AuthCounts {
        renewed: sum("kafka_server_socket_server_metrics_successful_reauthentication_total{"),
        killed: sum("kafka_server_socket_server_metrics_expired_connections_killed"),
    })
}

/// KIP-368 between the nodes: with `connections.max.reauth.ms` on every listener, each node
/// authenticates again on its open connections before their sessions end: the followers'
/// fetch connections to the leader, the voters' Raft connections to each other, the brokers'
/// connections to the active controller (heartbeats), the broker-only node's metadata fetch
/// (and the test's own client, the same client code). No node closes a connection for an
/// ended session; and because no connection closes, no controller takes a renewal for a
/// node's end: the quorum keeps its leader and epoch, the partition its leader and full ISR.
async fn sessions_are_renewed_before_they_end(
    cluster: &Cluster,
    client: &Client,
    nodes: i32,
    leader: i32,
) {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    use kafka_protocol::messages::DescribeQuorumRequest;
    // Over the secured broker listener (the cluster's own helper speaks PLAINTEXT).
    let quorum_epoch = || async {
        let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let answer = client.send(1, request).await.expect("DescribeQuorum");
        let p = &answer.body.topics[0].partitions[0];
        assert_eq!(p.error_code, 0, "DescribeQuorum: {:?}", answer.body);
        p.leader_epoch
    };
    let epoch_before = quorum_epoch().await;
    let mut before = Vec::new();
    for id in 1..=nodes {
        before.push(authentications(cluster, id).await.expect("metrics"));
    }
    // Sessions last 3 s: within seconds the followers authenticate to the leader again several
    // times, and every voter hears its two peers again at least twice each.
    cluster
        .wait_for(
            "the nodes to authenticate again on their connections, sessions renewed",
            DEADLINE,
            || async {
                for id in 1..=NODES {
                    let now = authentications(cluster, id).await?;
                    let want = if id == leader { 6.0 } else { 4.0 };
                    if now.renewed < before[(id - 1) as usize].renewed + want {
                        return None;
                    }
                }
                Some(())
            },
        )
        .await;
    let records = batch(&["after-renewals"], None);
    let what = "an acks=all produce after renewals";
    assert_eq!(produce_all(cluster, client, leader, records, what).await, 3);
    for id in 1..=nodes {
        let now = authentications(cluster, id).await.expect("metrics");
        assert_eq!(
            now.killed, 0.0,
            "node {id} closed a connection whose session had ended ({now:?})"
        );
    }
    assert_eq!(
        quorum_epoch().await,
        epoch_before,
        "the quorum elected again while sessions were renewed"
    );
    for id in 1..=nodes {
        let (now_leader, isr) = partition(client, id).await.unwrap();
        assert_eq!(now_leader, leader, "node {id} sees another leader");
        assert_eq!(isr.len(), nodes as usize, "node {id} sees ISR {isr:?}");
    }
}

/// Every voter's controller listener answers ApiVersions to a client secured as the nodes'
/// controller client is (TLS, SASL with `sasl.mechanism.controller.protocol`), and not to a
/// PLAINTEXT one.
async fn controller_listener_is_secured(cluster: &Cluster, protocol: &str, lines: &[String]) {
    let mut lines = lines.to_vec();
    lines.push(format!(
        "listener.security.protocol.map=CONTROLLER:{protocol}"
    ));
    let secured = client_of(cluster, "CONTROLLER", &lines, Channel::Controller);
    let plain = Client::new(
        ClientConfig {
            client_id: "plaintext-to-controller".to_owned(),
            request_timeout: Duration::from_secs(3),
            reconnect_backoff: Duration::from_millis(50),
            ..ClientConfig::default()
        },
        None,
    );
    for id in 1..=NODES {
        let port = cluster.nodes[&id].controller_port;
        plain
            .set_endpoint(id, Endpoint::new("127.0.0.1", port))
            .unwrap();
        let answered = secured
            .send(id, crate::common::api_versions_request())
            .await
            .unwrap_or_else(|e| panic!("controller {id} over its secured listener: {e}"));
        assert_eq!(answered.body.error_code, 0);
        assert!(
            plain
                .send(id, crate::common::api_versions_request())
                .await
                .is_err(),
            "controller {id} answered a PLAINTEXT client"
        );
    }
    secured.shutdown();
    plain.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_ssl_scram_inter_broker_listener_replicates_and_forwards() {
    let dir = tempfile::tempdir().unwrap();
    let lines = scram_settings(dir.path());
    replicates_and_forwards("sasl-ssl-ib", "SASL_SSL", lines).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_inter_broker_listener_requiring_client_certificates_replicates_and_forwards() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = tls_settings(dir.path());
    lines.push("ssl.client.auth=required".to_owned());
    replicates_and_forwards("ssl-ib", "SSL", lines).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_plaintext_plain_inter_broker_listener_replicates_and_forwards() {
    replicates_and_forwards(
        "sasl-plain-ib",
        "SASL_PLAINTEXT",
        plain_settings("broker-secret"),
    )
    .await;
}

/// The controller's SCRAM credentials, as `kafka-storage format --add-scram` would bootstrap
/// them (here from `kafkaiq.sasl.scram.users`, beside the brokers').
fn controller_scram_lines(dir: &Path) -> Vec<String> {
    let mut lines = scram_settings(dir);
    lines.retain(|l| !l.starts_with("kafkaiq.sasl.scram.users="));
    lines.extend([
        "sasl.mechanism.controller.protocol=SCRAM-SHA-256".to_owned(),
        "listener.name.controller.scram-sha-256.sasl.jaas.config=\
         org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"controller\" password=\"controller-secret\";"
            .to_owned(),
        "kafkaiq.sasl.scram.users=broker:broker-secret,controller:controller-secret".to_owned(),
        // The nodes reach the controllers as User:controller and each other as User:broker:
        // CLUSTER_ACTION for both, as super users.
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_owned(),
        "super.users=User:broker;User:controller".to_owned(),
    ]);
    lines
}

/// The cluster: inter-broker and controller traffic both SASL_SSL (SCRAM-SHA-256), with
/// an authorizer, and a broker-only node that follows the metadata log over the controller
/// listener and registers and heartbeats through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_ssl_scram_controller_and_inter_broker_listener_replicate_and_forward() {
    let dir = tempfile::tempdir().unwrap();
    let lines = controller_scram_lines(dir.path());
    replicates_and_forwards_over("sasl-ssl-ctl", "SASL_SSL", "SASL_SSL", 1, lines).await;
}

/// [`a_sasl_ssl_scram_controller_and_inter_broker_listener_replicate_and_forward`] with
/// sessions of 3 s on every listener (KIP-368, the broker-wide `connections.max.reauth.ms`):
/// every connection between the nodes is renewed in place before its session ends
/// ([`sessions_are_renewed_before_they_end`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_between_the_nodes_are_renewed_before_they_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = controller_scram_lines(dir.path());
    lines.push("connections.max.reauth.ms=3000".to_owned());
    replicates_and_forwards_over("sasl-ssl-reauth", "SASL_SSL", "SASL_SSL", 1, lines).await;
}

/// An SSL controller listener that requires the nodes' certificates (the inter-broker listener
/// PLAINTEXT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_controller_listener_requiring_client_certificates_replicates_and_forwards() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = tls_settings(dir.path());
    lines.push("listener.name.controller.ssl.client.auth=required".to_owned());
    replicates_and_forwards_over("ssl-ctl", "PLAINTEXT", "SSL", 0, lines).await;
}

/// The PLAIN login of the controller listener: the user the nodes authenticate as, with
/// `password`, and the one they accept.
fn controller_plain_lines(password: &str) -> Vec<String> {
    vec![
        "sasl.enabled.mechanisms=PLAIN".to_owned(),
        "sasl.mechanism.controller.protocol=PLAIN".to_owned(),
        format!(
            "listener.name.controller.plain.sasl.jaas.config=\
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"controller\" password=\"{password}\" \
             user_controller=\"controller-secret\";"
        ),
    ]
}

/// Node 3 authenticates to the controller listener with a wrong password: its Raft messages,
/// registration and heartbeats never get through, so it never joins (not a broker of the
/// cluster), and it logs why, again after each backoff; nodes 1 and 2 form the quorum and
/// serve, and authenticate to each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_controller_password_keeps_the_node_out_and_is_logged() {
    let mut cluster =
        Cluster::start_with(ClusterKind::KafkaIq, "sasl-bad-ctl", NODES, &[], |node| {
            let mut all = listener_lines("PLAINTEXT", "SASL_PLAINTEXT", node);
            let password = if node.id == 3 {
                "wrong"
            } else {
                "controller-secret"
            };
            all.extend(controller_plain_lines(password));
            all
        });
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    let client = client_for(&cluster, "PLAINTEXT", &[]);
    cluster
        .wait_for(
            "an active controller and brokers 1 and 2",
            DEADLINE,
            || async {
                let m = metadata(&client, 1).await?;
                let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
                ids.sort();
                (m.controller_id.0 > 0 && ids == [1, 2]).then_some(())
            },
        )
        .await;
    create_topic(&client, 2, 1, 2).await;
    unauthenticated_raft_frame_is_refused(&cluster, 1).await;
    cluster
        .wait_for(
            "node 3 to log failed authentications to the controllers, retried",
            DEADLINE,
            || async {
                let log = cluster.log_text(3);
                let failures = log
                    .lines()
                    .filter(|l| {
                        l.contains("connection to controller") && l.contains("SASL authentication")
                    })
                    .count();
                (failures >= 2 && log.contains("Authentication failed")).then_some(())
            },
        )
        .await;
    for id in [1, 2] {
        let log = cluster.log_text(id);
        assert!(
            !log.contains("SASL authentication failed") && !log.contains("SASL authentication to"),
            "node {id} authenticates"
        );
    }
    let m = metadata(&client, 1).await.unwrap();
    assert!(
        m.brokers.iter().all(|b| b.node_id.0 != 3),
        "node 3 registered: {:?}",
        m.brokers
    );
    client.shutdown();
    cluster.stop_all();
}

/// A stranger's Raft vote request of term 1000, sent unauthenticated to node `id`'s SASL
/// controller listener, closes its connection unanswered and moves no epoch (on a PLAINTEXT
/// controller listener without an authorizer a voter would take it).
async fn unauthenticated_raft_frame_is_refused(cluster: &Cluster, id: i32) {
    use kafkaiq::quorum::wire;
    use raft::eraftpb::{Message, MessageType};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let epoch = || async {
        cluster
            .describe_quorum(id)
            .await
            .expect("the quorum as node answers")
            .leader_epoch
    };
    let before = epoch().await;
    let vote = Message {
        msg_type: MessageType::MsgRequestVote,
        to: id as u64,
        from: 2,
        term: 1_000,
        log_term: 1_000,
        index: 1_000_000,
        ..Default::default()
    };
    let port = cluster.nodes[&id].controller_port;
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    raw.write_all(&wire::encode_request(1, "stranger", &vote))
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(DEADLINE, raw.read(&mut byte))
        .await
        .expect("the connection closes");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "an unauthenticated Raft frame was answered: {read:?}"
    );
    let after = epoch().await;
    assert!(
        after == before && after < 1_000,
        "epoch {before} became {after}"
    );
}

/// Node 3 authenticates to the others with a wrong password: its replica fetches fail SASL
/// authentication, and it logs why, again after each backoff, while the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_inter_broker_password_is_logged_and_retried() {
    let mut cluster =
        Cluster::start_with(ClusterKind::KafkaIq, "sasl-bad-ib", NODES, &[], |node| {
            let mut all = listener_lines("SASL_PLAINTEXT", "PLAINTEXT", node);
            let password = if node.id == 3 {
                "wrong"
            } else {
                "broker-secret"
            };
            all.extend(plain_settings(password));
            all
        });
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    let client = client_for(&cluster, "SASL_PLAINTEXT", &plain_settings("broker-secret"));
    await_brokers(&cluster, &client, NODES).await;
    // Three partitions over three nodes: node 3 follows at least one.
    create_topic(&client, 1, 3, NODES as i16).await;
    cluster
        .wait_for(
            "node 3 to log failed authentications, retried",
            DEADLINE,
            || async {
                let log = cluster.log_text(3);
                let failures = log.matches("SASL authentication to broker").count();
                (failures >= 2 && log.contains("Authentication failed")).then_some(())
            },
        )
        .await;
    for id in [1, 2] {
        assert!(
            !cluster
                .log_text(id)
                .contains("SASL authentication to broker"),
            "node {id} authenticates"
        );
    }
    client.shutdown();
    cluster.stop_all();
}

/// Two broker listeners per node, as a Kafka node that keeps its replication apart from its
/// clients is configured: CLIENT (SASL_PLAINTEXT with PLAIN) for clients, REPLICATION
/// (PLAINTEXT) named by `inter.broker.listener.name`. Both are served: the followers replicate
/// over REPLICATION, and each listener's Metadata answers every broker's endpoint on that
/// listener (Kafka's listener-scoped metadata).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_listener_and_a_replication_listener_are_both_served() {
    let replication_ports: std::collections::BTreeMap<i32, u16> = (1..=NODES)
        .zip(common::broker_process::free_ports(NODES as usize))
        .collect();
    let ports = replication_ports.clone();
    let mut cluster =
        Cluster::start_with(ClusterKind::KafkaIq, "two-listeners", NODES, &[], |node| {
            let listeners = format!(
                "CLIENT://127.0.0.1:{},REPLICATION://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
                node.client_port, ports[&node.id], node.controller_port
            );
            vec![
                format!("listeners={listeners}"),
                format!("advertised.listeners={listeners}"),
                "inter.broker.listener.name=REPLICATION".to_owned(),
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENT:SASL_PLAINTEXT,\
             REPLICATION:PLAINTEXT"
                    .to_owned(),
                "sasl.enabled.mechanisms=PLAIN".to_owned(),
                "listener.name.client.plain.sasl.jaas.config=\
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             user_alice=\"alice-secret\";"
                    .to_owned(),
            ]
        });
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    // A SASL client of CLIENT (the client-side lines are a client's, not the nodes').
    let client = client_for(
        &cluster,
        "CLIENT",
        &[
            "listener.security.protocol.map=CLIENT:SASL_PLAINTEXT".to_owned(),
            "sasl.mechanism.inter.broker.protocol=PLAIN".to_owned(),
            "listener.name.client.plain.sasl.jaas.config=\
             org.apache.kafka.common.security.plain.PlainLoginModule required \
             username=\"alice\" password=\"alice-secret\";"
                .to_owned(),
        ],
    );
    // A PLAINTEXT client of REPLICATION.
    let replication = Client::new(
        ClientConfig {
            client_id: "two-listeners-test".to_owned(),
            request_timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        },
        None,
    );
    for (id, port) in &replication_ports {
        replication
            .set_endpoint(*id, Endpoint::new("127.0.0.1", *port))
            .unwrap();
    }

    let controller = await_brokers(&cluster, &client, NODES).await;
    let ports_of = |m: &MetadataResponse| -> std::collections::BTreeMap<i32, u16> {
        m.brokers
            .iter()
            .map(|b| (b.node_id.0, b.port as u16))
            .collect()
    };
    let client_ports: std::collections::BTreeMap<i32, u16> = cluster
        .nodes
        .iter()
        .map(|(id, n)| (*id, n.client_port))
        .collect();
    for id in 1..=NODES {
        let over_client = metadata(&client, id).await.unwrap();
        assert_eq!(
            ports_of(&over_client),
            client_ports,
            "node {id} over CLIENT"
        );
        let over_replication = metadata(&replication, id).await.unwrap();
        assert_eq!(
            ports_of(&over_replication),
            replication_ports,
            "node {id} over REPLICATION"
        );
    }

    let other = (1..=NODES).find(|id| *id != controller).unwrap();
    create_topic(&client, other, 1, NODES as i16).await;
    let leader = cluster
        .wait_for("a leader and a full ISR", DEADLINE, || async {
            let (leader, isr) = partition(&client, other).await?;
            (leader > 0 && isr.len() == NODES as usize).then_some(leader)
        })
        .await;
    let records = batch(&["over-client", "replicated-over-replication"], None);
    let what = "an acks=all produce over CLIENT";
    assert_eq!(
        produce_all(&cluster, &client, leader, records, what).await,
        0
    );
    let needle = b"replicated-over-replication";
    for id in 1..=NODES {
        cluster
            .wait_for(
                &format!("node {id}'s log to hold the batch"),
                DEADLINE,
                || async {
                    let log = cluster.log_bytes(id, TOPIC, 0);
                    log.windows(needle.len()).any(|w| w == needle).then_some(())
                },
            )
            .await;
    }
    // The followers fetched it over REPLICATION, the inter-broker endpoint the leader
    // registered: before both listeners were served nobody listened there, and they could not.
    for id in 1..=NODES {
        let (_, isr) = partition(&client, id).await.unwrap();
        assert_eq!(isr.len(), NODES as usize, "node {id} sees ISR {isr:?}");
    }
    client.shutdown();
    replication.shutdown();
    cluster.stop_all();
}

/// A CA named `name`, and a certificate for 127.0.0.1 and localhost (subject `broker`) it
/// signed, written as the PEM key store `file`; the CA's PEM.
fn store_signed_by(dir: &Path, name: &str, file: &str) -> (String, String) {
    let mut params = CertificateParams::new(vec![]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "broker");
    let cert = params.signed_by(&key, &ca).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
    (path.to_str().unwrap().to_owned(), ca.pem())
}

/// Two CAs, each with a key store it signed, for certificate rotation: the first CA's store,
/// the second's, a trust store of both CAs and one of the second only (PEM files in a
/// temporary directory that lives as long as this).
struct Rotation {
    _dir: tempfile::TempDir,
    first: String,
    second: String,
    both: String,
    second_only: String,
}

impl Rotation {
    fn new() -> Rotation {
        let dir = tempfile::tempdir().unwrap();
        let (first, first_ca) = store_signed_by(dir.path(), "first ca", "first.pem");
        let (second, second_ca) = store_signed_by(dir.path(), "second ca", "second.pem");
        let write = |file: &str, pem: String| {
            let path = dir.path().join(file);
            std::fs::write(&path, pem).unwrap();
            path.to_str().unwrap().to_owned()
        };
        let both = write("both-cas.pem", format!("{first_ca}{second_ca}"));
        let second_only = write("second-ca.pem", second_ca);
        Rotation {
            _dir: dir,
            first,
            second,
            both,
            second_only,
        }
    }

    /// The stores before the rotation: the first CA's certificate, both CAs trusted.
    fn first_lines(&self) -> Vec<String> {
        rotation_stores(&self.first, &self.both)
    }

    /// The stores after it: the second CA's certificate, that CA alone trusted.
    fn rotated_lines(&self) -> Vec<String> {
        rotation_stores(&self.second, &self.second_only)
    }
}

/// The lines of PEM stores `keystore` and `truststore`, client certificates required.
fn rotation_stores(keystore: &str, truststore: &str) -> Vec<String> {
    vec![
        "ssl.keystore.type=PEM".to_owned(),
        format!("ssl.keystore.location={keystore}"),
        "ssl.truststore.type=PEM".to_owned(),
        format!("ssl.truststore.location={truststore}"),
        "ssl.client.auth=required".to_owned(),
    ]
}

/// Waits until each broker of `ids` refuses a new connection from a client with `lines`'
/// stores (the first CA's certificate, once its trust store no longer has that CA).
async fn await_refused(cluster: &Cluster, lines: &[String], ids: std::ops::RangeInclusive<i32>) {
    for id in ids {
        cluster
            .wait_for(
                &format!("node {id} to refuse the first CA's certificate"),
                DEADLINE,
                || async {
                    let first = client_for(cluster, "SSL", lines);
                    let answered = metadata(&first, id).await.is_some();
                    first.shutdown();
                    (!answered).then_some(())
                },
            )
            .await;
    }
}

/// IncrementalAlterConfigs SET of `configs` for broker `id`, sent to that broker; its error.
async fn alter_broker(client: &Client, id: i32, configs: &[(&str, &str)]) -> (i16, String) {
    alter_broker_via(client, id, id, configs).await
}

/// IncrementalAlterConfigs SET of `configs` for node `id`'s BROKER resource, sent to node `via`;
/// its error.
async fn alter_broker_via(
    client: &Client,
    via: i32,
    id: i32,
    configs: &[(&str, &str)],
) -> (i16, String) {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(id.to_string()))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_config_operation(0)
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            ),
    ]);
    let answer = client
        .send(via, request)
        .await
        .expect("IncrementalAlterConfigs");
    let r = &answer.body.responses[0];
    let message = r.error_message.as_ref().map(|m| m.to_string());
    (r.error_code, message.unwrap_or_default())
}

/// Certificate rotation on the inter-broker and the controller listener, both SSL and requiring
/// client certificates, without a restart: every node's key stores are changed
/// (`kafka-configs --alter` of `listener.name.<l>.ssl.keystore.location`) to a certificate of a
/// second CA, then its trust stores to that CA alone. The nodes' own connections to each other
/// follow, as Kafka's reconfigured inter-broker channel builders and channel to the controllers
/// do. The partition's leader is the active controller, and it stops: the surviving follower
/// reaches the new leader (which now trusts only the second CA) with the new certificate and
/// replicates what is produced there, and the survivor that is not the new active controller
/// forwards a CreateTopics to it over a new connection. With the startup stores either would
/// present the first CA's certificate and be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_listener_stores_reach_the_nodes_own_connections() {
    let r = Rotation::new();
    let (second, second_only) = (&r.second, r.second_only.as_str());
    let lines = r.first_lines();
    let shared = lines.clone();
    let mut cluster = Cluster::start_with(ClusterKind::KafkaIq, "ssl-rotate", NODES, &[], |node| {
        let mut all = listener_lines("SSL", "SSL", node);
        all.extend(shared.iter().cloned());
        all
    });
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    let client = client_for(&cluster, "SSL", &lines);
    let controller = await_brokers(&cluster, &client, NODES).await;
    let mut replicas = vec![controller];
    replicas.extend((1..=NODES).filter(|id| *id != controller));
    assert_eq!(create_assigned(&client, 1, TOPIC, &replicas).await, Some(0));
    let leader = cluster
        .wait_for("a leader and a full ISR", DEADLINE, || async {
            let (leader, isr) = partition(&client, 1).await?;
            (leader > 0 && isr.len() == NODES as usize).then_some(leader)
        })
        .await;
    assert_eq!(leader, controller, "the preferred replica leads");
    let before = batch(&["before-rotation"], None);
    assert_eq!(
        produce_all(&cluster, &client, leader, before, "a produce").await,
        0
    );

    for id in 1..=NODES {
        let keystore = [
            ("listener.name.ssl.ssl.keystore.location", second.as_str()),
            (
                "listener.name.controller.ssl.keystore.location",
                second.as_str(),
            ),
        ];
        assert_eq!(
            alter_broker(&client, id, &keystore).await,
            (0, String::new())
        );
    }
    // From here on the test's own client presents the second CA's certificate too.
    let rotated_lines = r.rotated_lines();
    let rotated = client_for(&cluster, "SSL", &rotated_lines);
    for id in 1..=NODES {
        // Both in one record batch: a node that refuses the first CA on one listener has
        // taken the second on the other too.
        let truststore = [
            ("listener.name.ssl.ssl.truststore.location", second_only),
            (
                "listener.name.controller.ssl.truststore.location",
                second_only,
            ),
        ];
        cluster
            .wait_for(
                &format!("node {id} to serve the second CA's certificate"),
                DEADLINE,
                || async {
                    let m = metadata(&rotated, id).await?;
                    (!m.brokers.is_empty()).then_some(())
                },
            )
            .await;
        assert_eq!(
            alter_broker(&rotated, id, &truststore).await,
            (0, String::new())
        );
    }
    // Every node has taken the new trust store: a new connection with the first CA's
    // certificate is refused.
    await_refused(&cluster, &lines, 1..=NODES).await;
    // The leader, the active controller, stops: a survivor leads, and the other must open a
    // new connection to it.
    cluster.stop(leader);
    let new_leader = cluster
        .wait_for("another leader", DEADLINE, || async {
            let via = (1..=NODES).find(|id| *id != leader)?;
            let (now, _) = partition(&rotated, via).await?;
            (now > 0 && now != leader).then_some(now)
        })
        .await;
    let follower = (1..=NODES)
        .find(|id| *id != leader && *id != new_leader)
        .unwrap();
    let after = batch(&["after-rotation-replicated"], None);
    produce_all(
        &cluster,
        &rotated,
        new_leader,
        after,
        "a produce to the new leader",
    )
    .await;
    let needle = b"after-rotation-replicated";
    cluster
        .wait_for(
            &format!("follower {follower} to replicate from the new leader {new_leader}"),
            DEADLINE,
            || async {
                let log = cluster.log_bytes(follower, TOPIC, 0);
                log.windows(needle.len()).any(|w| w == needle).then_some(())
            },
        )
        .await;
    // The survivor that is not the new active controller forwards a CreateTopics to it.
    let (forwarder, new_controller) = cluster
        .wait_for("a new active controller", DEADLINE, || async {
            let via = (1..=NODES).find(|id| *id != leader)?;
            let now = metadata(&rotated, via).await?.controller_id.0;
            let forwarder = (1..=NODES).find(|id| *id != leader && *id != now)?;
            (now > 0 && now != leader).then_some((forwarder, now))
        })
        .await;
    cluster
        .wait_for(
            &format!("node {forwarder} to forward a CreateTopics to controller {new_controller}"),
            DEADLINE,
            || async {
                let code =
                    create_assigned(&rotated, forwarder, "after-rotation", &[forwarder]).await;
                // TOPIC_ALREADY_EXISTS: an earlier attempt was applied after its answer timed out.
                matches!(code, Some(0 | 36)).then_some(())
            },
        )
        .await;
    client.shutdown();
    rotated.shutdown();
    cluster.stop_all();
}

/// Whether node `id`'s controller listener answers an ApiVersions from a client with `lines`'
/// stores.
async fn controller_answers(cluster: &Cluster, id: i32, lines: &[String]) -> bool {
    let to_controllers = client_of(cluster, "CONTROLLER", lines, Channel::Controller);
    let answered = to_controllers
        .send(id, crate::common::api_versions_request())
        .await
        .is_ok();
    to_controllers.shutdown();
    answered
}

/// Certificate rotation reaches a controller-only node's listener (`process.roles=controller`):
/// nodes 1 and 2 are combined, node 3 only votes, and the controller listener is SSL requiring
/// client certificates. Every node's key stores are changed to the second CA's certificate
/// (node 3's through the active controller), then node 3's trust store to the second CA only:
/// node 3 serves the second CA's certificate and refuses the first's. The quorum leader, one of
/// the brokers, stops: the survivor reaches node 3 with its rotated certificate, which node 3
/// must now trust, to form the quorum without which the CreateTopics at the end never commits.
/// Node 3's own client keeps the stores of its server.properties (see `apply_dynamic_config`).
/// Before controller-only nodes applied dynamic broker configs, node 3 kept serving the first
/// CA's certificate. Last, node 3 restarts alone and serves the stores of its server.properties
/// until the brokers are back and it has caught up with the quorum; before it waited for that,
/// it served the rotated ones of its own log at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_stores_reach_a_controller_only_node() {
    let r = Rotation::new();
    let (second, second_only) = (&r.second, r.second_only.as_str());
    let lines = r.first_lines();
    let shared = lines.clone();
    let mut cluster =
        Cluster::start_with(ClusterKind::KafkaIq, "ssl-rotate-ctl", NODES, &[], |node| {
            let mut all = if node.id == 3 {
                let controller = format!("CONTROLLER://127.0.0.1:{}", node.controller_port);
                vec![
                    "process.roles=controller".to_owned(),
                    format!("listeners={controller}"),
                    format!("advertised.listeners={controller}"),
                    // The brokers' lines, as one shared file would have them.
                    "inter.broker.listener.name=SSL".to_owned(),
                    "listener.security.protocol.map=CONTROLLER:SSL,SSL:SSL".to_owned(),
                ]
            } else {
                listener_lines("SSL", "SSL", node)
            };
            all.extend(shared.iter().cloned());
            all
        });
    for id in 1..=2 {
        cluster.await_listening(id);
    }
    let client = client_for(&cluster, "SSL", &lines);
    let mut controller = await_brokers(&cluster, &client, 2).await;
    // The quorum leader must be a broker, so that stopping it needs node 3 in the next quorum.
    while controller == 3 {
        cluster.stop(3);
        cluster.spawn(3);
        controller = cluster
            .wait_for("a broker leading the quorum", DEADLINE, || async {
                let c = metadata(&client, 1).await?.controller_id.0;
                (c > 0 && c != 3).then_some(c)
            })
            .await;
    }
    let mut controller_lines = lines.clone();
    controller_lines.push("listener.security.protocol.map=CONTROLLER:SSL".to_owned());
    let mut rotated_controller_lines = r.rotated_lines();
    rotated_controller_lines.push("listener.security.protocol.map=CONTROLLER:SSL".to_owned());
    cluster
        .wait_for(
            "node 3 to answer a client of the first CA",
            DEADLINE,
            || async {
                controller_answers(&cluster, 3, &controller_lines)
                    .await
                    .then_some(())
            },
        )
        .await;

    // Key stores first, then trust stores. A broker's BROKER resource is changed through that
    // broker (a broker refuses another's id, as Kafka's), node 3's through the active
    // controller's controller listener (`kafka-configs --bootstrap-controller`; a controller
    // that is not active answers NOT_CONTROLLER, as Kafka's).
    let alter = |lines: &[String], id: i32, configs: Vec<(&'static str, String)>| {
        let (client, via) = match id {
            3 => (
                client_of(&cluster, "CONTROLLER", lines, Channel::Controller),
                controller,
            ),
            _ => (client_for(&cluster, "SSL", lines), id),
        };
        async move {
            let configs: Vec<(&str, &str)> =
                configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let answer = alter_broker_via(&client, via, id, &configs).await;
            client.shutdown();
            answer
        }
    };
    for id in 1..=NODES {
        let mut keystore = vec![(
            "listener.name.controller.ssl.keystore.location",
            second.clone(),
        )];
        if id != 3 {
            keystore.push(("listener.name.ssl.ssl.keystore.location", second.clone()));
        }
        let lines = if id == 3 { &controller_lines } else { &lines };
        assert_eq!(alter(lines, id, keystore).await, (0, String::new()));
    }
    cluster
        .wait_for(
            "node 3 to serve the second CA's certificate",
            DEADLINE,
            || async {
                controller_answers(&cluster, 3, &rotated_controller_lines)
                    .await
                    .then_some(())
            },
        )
        .await;
    let rotated = client_for(&cluster, "SSL", &r.rotated_lines());
    for id in 1..=2 {
        cluster
            .wait_for(
                &format!("node {id} to serve the second CA's certificate"),
                DEADLINE,
                || async { metadata(&rotated, id).await.map(|_| ()) },
            )
            .await;
    }
    // Node 3's trust store now holds the second CA only. The brokers' controller listeners
    // keep trusting both: node 3's own client keeps the stores of its server.properties.
    let truststore = vec![(
        "listener.name.controller.ssl.truststore.location",
        second_only.to_owned(),
    )];
    assert_eq!(
        alter(&rotated_controller_lines, 3, truststore).await,
        (0, String::new())
    );
    cluster
        .wait_for(
            "node 3 to refuse the first CA's certificate",
            DEADLINE,
            || async { (!controller_answers(&cluster, 3, &controller_lines).await).then_some(()) },
        )
        .await;

    // The quorum leader stops: the other broker and node 3 are the quorum now.
    cluster.stop(controller);
    let survivor = 3 - controller;
    cluster
        .wait_for(
            &format!("a CreateTopics through node {survivor} committed by the quorum with node 3"),
            Duration::from_secs(90),
            || async {
                let code = create_assigned(&rotated, survivor, "after-rotation", &[survivor]).await;
                // TOPIC_ALREADY_EXISTS: an earlier attempt was applied after its answer timed out.
                matches!(code, Some(0 | 36)).then_some(())
            },
        )
        .await;

    // Node 3 restarts alone: no quorum to catch up with. Its own log holds its rotated trust
    // store, but until it has caught up its listener serves the stores of its
    // server.properties, which trust the first CA too.
    cluster.stop(survivor);
    cluster.stop(3);
    cluster.spawn(3);
    cluster
        .wait_for("node 3 to start", DEADLINE, || async {
            cluster.log_text(3).contains("node started").then_some(())
        })
        .await;
    assert!(
        controller_answers(&cluster, 3, &controller_lines).await,
        "node 3 applied a store of its own log before catching up with the quorum"
    );
    // With the brokers back it catches up, and applies its rotated trust store.
    cluster.spawn(controller);
    cluster.spawn(survivor);
    cluster
        .wait_for(
            "node 3 to catch up and refuse the first CA's certificate again",
            Duration::from_secs(90),
            || async { (!controller_answers(&cluster, 3, &controller_lines).await).then_some(()) },
        )
        .await;
    assert!(
        cluster
            .log_text(3)
            .contains("caught up with the metadata quorum"),
        "{}",
        cluster.log_tail(3, 30)
    );
    client.shutdown();
    rotated.shutdown();
    cluster.stop_all();
}
