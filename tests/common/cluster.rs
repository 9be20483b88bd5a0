//! Clusters of broker processes on loopback for multi-node tests: three (or N) combined nodes,
//! each started from a `server.properties` in Kafka's own keys, so the same harness runs
//! KafkaIQ or, with `KAFKAIQ_CLUSTER_BROKER=kafka` (or `BROKER_UNDER_TEST=apache-kafka`), Apache Kafka 4.1.1 (formatted with one
//! shared cluster id first, as Kafka needs).
//!
//! Nodes are [`BrokerProcess`]es: a panic in a node's log, an unclean exit or a SIGTERM it does
//! not obey fails the test when the node is stopped (a node killed with SIGKILL is checked for
//! panics only).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{CreateTopicsRequest, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::broker_process::{free_port, BrokerProcess};
use super::RawClient;

/// How long a node may take to answer a request of the harness.
const ANSWER: Duration = Duration::from_secs(2);

/// Which broker a cluster is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterKind {
    KafkaIq,
    ApacheKafka,
}

impl ClusterKind {
    /// `KAFKAIQ_CLUSTER_BROKER=kafka` or `BROKER_UNDER_TEST=apache-kafka` (what
    /// `run-all.sh --against kafka` sets) selects Apache Kafka; KafkaIQ otherwise.
    pub fn from_env() -> ClusterKind {
        let named = |var: &str| {
            matches!(
                std::env::var(var).as_deref(),
                Ok("kafka") | Ok("apache-kafka")
            )
        };
        if named("KAFKAIQ_CLUSTER_BROKER") || named("BROKER_UNDER_TEST") {
            ClusterKind::ApacheKafka
        } else {
            ClusterKind::KafkaIq
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClusterKind::KafkaIq => "kafkaiq",
            ClusterKind::ApacheKafka => "apache-kafka",
        }
    }
}

pub struct ClusterNode {
    pub id: i32,
    pub client_port: u16,
    pub controller_port: u16,
    /// KafkaIQ's `http.listener` (metrics, leadership page, JSON API): a free port per node
    /// rather than the default 9644, which parallel tests would fight over.
    pub http_port: u16,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub process: Option<BrokerProcess>,
    /// How many times this node was started (its log files are numbered).
    starts: u32,
}

impl ClusterNode {
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    pub fn http_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http_port))
    }
}

pub struct Cluster {
    pub kind: ClusterKind,
    pub root: PathBuf,
    pub nodes: BTreeMap<i32, ClusterNode>,
}

/// The node settings a test adds to every node (Kafka keys).
pub type Settings<'a> = &'a [&'a str];

fn kafka_libs() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("integration/kafka-libs.sh"))
        .output()
        .expect("run integration/kafka-libs.sh");
    assert!(out.status.success(), "kafka-libs.sh failed");
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .lines()
            .last()
            .unwrap(),
    )
}

impl Cluster {
    /// Writes the nodes' files and starts them; returns once every node runs (not yet once
    /// they form a cluster: see [`Cluster::wait_for_brokers`]).
    pub fn start(kind: ClusterKind, name: &str, n: i32, settings: Settings) -> Cluster {
        let root = std::env::temp_dir().join(format!(
            "kafkaiq-cluster-{name}-{}-{}",
            kind.name(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c, _))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect();
        let mut nodes = BTreeMap::new();
        for (i, (client_port, controller_port, http_port)) in ports.into_iter().enumerate() {
            let id = i as i32 + 1;
            let dir = root.join(format!("node-{id}"));
            std::fs::create_dir_all(dir.join("data")).unwrap();
            let mut lines = vec![
                "process.roles=broker,controller".to_owned(),
                format!("node.id={id}"),
                format!("controller.quorum.voters={}", voters.join(",")),
                format!(
                    "listeners=PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}"
                ),
                format!(
                    "advertised.listeners=PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}"
                ),
                "controller.listener.names=CONTROLLER".to_owned(),
                "inter.broker.listener.name=PLAINTEXT".to_owned(),
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT".to_owned(),
                format!("log.dirs={}", dir.join("data").display()),
                format!("broker.rack=rack-{id}"),
                format!("offsets.topic.replication.factor={}", n.min(3)),
                format!("transaction.state.log.replication.factor={}", n.min(3)),
                "transaction.state.log.min.isr=1".to_owned(),
                format!("share.coordinator.state.topic.replication.factor={}", n.min(3)),
                "share.coordinator.state.topic.min.isr=1".to_owned(),
                "group.initial.rebalance.delay.ms=0".to_owned(),
            ];
            lines.extend(settings.iter().map(|s| s.to_string()));
            let config = dir.join("server.properties");
            std::fs::write(&config, lines.join("\n") + "\n").unwrap();
            nodes.insert(
                id,
                ClusterNode {
                    id,
                    client_port,
                    controller_port,
                    http_port,
                    dir,
                    config,
                    process: None,
                    starts: 0,
                },
            );
        }
        let mut cluster = Cluster { kind, root, nodes };
        if kind == ClusterKind::ApacheKafka {
            cluster.format_for_kafka();
        }
        let ids: Vec<i32> = cluster.nodes.keys().copied().collect();
        for id in ids {
            cluster.spawn(id);
        }
        cluster
    }

    fn format_for_kafka(&self) {
        let libs = kafka_libs();
        let cp = format!("{}/*", libs.display());
        let out = Command::new("java")
            .args([
                "-Xmx256m",
                "-cp",
                &cp,
                "kafka.tools.StorageTool",
                "random-uuid",
            ])
            .output()
            .unwrap();
        let cluster_id = String::from_utf8_lossy(&out.stdout)
            .trim()
            .lines()
            .last()
            .unwrap()
            .to_owned();
        for node in self.nodes.values() {
            let status = Command::new("java")
                .args([
                    "-Xmx256m",
                    "-cp",
                    &cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                ])
                .arg(&cluster_id)
                .arg("-c")
                .arg(&node.config)
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "kafka-storage format of node {}", node.id);
        }
    }

    /// Starts (or restarts) node `id`.
    pub fn spawn(&mut self, id: i32) {
        let kind = self.kind;
        let node = self.nodes.get_mut(&id).expect("node");
        assert!(node.process.is_none(), "node {id} already runs");
        node.starts += 1;
        let log = node.dir.join(format!("node.{}.log", node.starts));
        let cmd = match kind {
            ClusterKind::KafkaIq => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_kafkaiq"));
                c.arg("--config").arg(&node.config);
                // KafkaIQ's own key, kept out of the file Apache Kafka reads too.
                c.arg("--override")
                    .arg(format!("http.listener=127.0.0.1:{}", node.http_port));
                if std::env::var_os("RUST_LOG").is_none() {
                    c.env("RUST_LOG", "info");
                }
                c
            }
            ClusterKind::ApacheKafka => {
                let mut c = Command::new("java");
                c.args(["-Xmx512m", "-cp"])
                    .arg(format!("{}/*", kafka_libs().display()))
                    .arg("kafka.Kafka")
                    .arg(&node.config);
                c
            }
        };
        node.process = Some(BrokerProcess::spawn(kind.name(), cmd, &log));
    }

    /// SIGKILL of node `id`; the test fails if its log shows a panic.
    pub fn kill(&mut self, id: i32) {
        let node = self.nodes.get_mut(&id).expect("node");
        let mut p = node.process.take().expect("node runs");
        if let Err(e) = p.kill() {
            panic!("node {id}: {e}");
        }
    }

    /// SIGTERM of node `id`, checked (clean exit, no panic, within the bound).
    pub fn stop(&mut self, id: i32) {
        let node = self.nodes.get_mut(&id).expect("node");
        if let Some(mut p) = node.process.take() {
            if let Err(e) = p.stop() {
                panic!("node {id}: {e}");
            }
        }
    }

    /// Stops every running node, checked; removes the directory unless `KEEP_BROKER_DIR`.
    pub fn stop_all(&mut self) {
        let mut failures = Vec::new();
        for node in self.nodes.values_mut() {
            if let Some(p) = node.process.as_mut() {
                p.terminate();
            }
        }
        for node in self.nodes.values_mut() {
            if let Some(mut p) = node.process.take() {
                if let Err(e) = p.stop() {
                    failures.push(format!("node {}: {e}", node.id));
                }
            }
        }
        if failures.is_empty() && std::env::var_os("KEEP_BROKER_DIR").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        } else {
            eprintln!("cluster dir kept: {}", self.root.display());
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Metadata (v12) of `topics` (all brokers, no topics if empty) as node `id` answers it
    /// within two seconds, or `None` (down, or no answer).
    pub async fn metadata(&self, id: i32, topics: &[&str]) -> Option<MetadataResponse> {
        let mut client = RawClient::try_connect(self.nodes[&id].client_addr()).await?;
        let request = MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(false);
        client.try_call(12, &request, ANSWER).await
    }

    /// CreateTopics (v7) of one topic at replication factor 3 through node `id`: its error
    /// code, or `None` (no answer).
    pub async fn create_topic(&self, id: i32, name: &str, partitions: i32) -> Option<i16> {
        let mut client = RawClient::try_connect(self.nodes[&id].client_addr()).await?;
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(3)]);
        let r = client
            .try_call(7, &request, Duration::from_secs(10))
            .await?;
        Some(r.topics[0].error_code)
    }

    /// Every running node lists exactly the running brokers, under one cluster id: that id.
    pub async fn formed(&self) -> Option<String> {
        let running = self.running();
        let mut ids = Vec::new();
        for &id in &running {
            let m = self.metadata(id, &[]).await?;
            let mut brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
            brokers.sort_unstable();
            if brokers != running {
                return None;
            }
            ids.push(m.cluster_id.map(|c| c.to_string())?);
        }
        ids.windows(2).all(|w| w[0] == w[1]).then(|| ids[0].clone())
    }

    pub fn running(&self) -> Vec<i32> {
        self.nodes
            .values()
            .filter(|n| n.process.is_some())
            .map(|n| n.id)
            .collect()
    }

    pub fn bootstrap(&self) -> String {
        self.nodes
            .values()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn log_tail(&self, id: i32, lines: usize) -> String {
        self.nodes[&id]
            .process
            .as_ref()
            .map(|p| p.log_tail(lines))
            .unwrap_or_default()
    }

    /// Polls `check` every 20 ms until it returns `Some`, or panics after `timeout` with
    /// `what` and the tails of the running nodes' logs.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .running()
                    .into_iter()
                    .map(|id| format!("--- node {id}:\n{}", self.log_tail(id, 15)))
                    .collect();
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut p) = node.process.take() {
                let _ = p.kill();
            }
        }
        if std::thread::panicking() {
            eprintln!("cluster dir kept: {}", self.root.display());
        }
    }
}
