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

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::describe_quorum_response::PartitionData as QuorumPartition;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeQuorumRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::broker_process::{free_ports, BrokerProcess};
use super::RawClient;

/// How long a node gets to answer one request of the harness.
const ANSWER: Duration = Duration::from_secs(2);

/// A partition as one node's Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// -1 while the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

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

/// What [`Cluster::start_with`] tells about a node whose file it writes.
pub struct NodePorts {
    pub id: i32,
    pub client_port: u16,
    pub controller_port: u16,
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

    /// The node's one log dir.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn http_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.http_port))
    }
}

pub struct Cluster {
    pub kind: ClusterKind,
    pub root: PathBuf,
    pub nodes: BTreeMap<i32, ClusterNode>,
    /// Nodes sent SIGSTOP and not SIGCONT since: left out of [`Cluster::bootstrap`], since a
    /// client bootstrapping from a frozen node waits for its request timeout.
    frozen: std::sync::Mutex<std::collections::BTreeSet<i32>>,
    /// Nodes start from their file alone: no KafkaIQ key (`http.listener`) on the command line.
    files_only: bool,
}

/// The node settings a test adds to every node (Kafka keys).
pub type Settings<'a> = &'a [&'a str];

pub fn kafka_libs() -> PathBuf {
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
    /// they form a cluster: see [`Cluster::formed`]).
    pub fn start(kind: ClusterKind, name: &str, n: i32, settings: Settings) -> Cluster {
        Self::start_with(kind, name, n, settings, |_| Vec::new())
    }

    /// [`Cluster::start`] with lines for one node's file after the shared ones (a later line
    /// wins): `node_settings(node)` sees the node's id and ports.
    pub fn start_with(
        kind: ClusterKind,
        name: &str,
        n: i32,
        settings: Settings,
        node_settings: impl Fn(&NodePorts) -> Vec<String>,
    ) -> Cluster {
        Self::start_observed(kind, name, n, 0, settings, node_settings)
    }

    /// [`Cluster::start_with`] with `observers` broker-only nodes (`process.roles=broker`, no
    /// controller listener) after the `n` combined ones, which alone are the voters.
    pub fn start_observed(
        kind: ClusterKind,
        name: &str,
        n: i32,
        observers: i32,
        settings: Settings,
        node_settings: impl Fn(&NodePorts) -> Vec<String>,
    ) -> Cluster {
        Self::start_nodes(kind, name, (n, observers), settings, node_settings, false)
    }

    /// [`Cluster::start`] with each node started from its Kafka-style file alone, as a user
    /// would start Apache Kafka: no KafkaIQ key anywhere (so no `http.listener`).
    pub fn start_from_files_only(
        kind: ClusterKind,
        name: &str,
        n: i32,
        settings: Settings,
    ) -> Cluster {
        Self::start_nodes(kind, name, (n, 0), settings, |_| Vec::new(), true)
    }

    fn start_nodes(
        kind: ClusterKind,
        name: &str,
        (n, observers): (i32, i32),
        settings: Settings,
        node_settings: impl Fn(&NodePorts) -> Vec<String>,
        files_only: bool,
    ) -> Cluster {
        let voter_count = n as usize;
        let n = n + observers;
        let root = std::env::temp_dir().join(format!(
            "kafkaiq-cluster-{name}-{}-{}",
            kind.name(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let ports: Vec<(u16, u16, u16)> = free_ports(3 * n as usize)
            .chunks(3)
            .map(|c| (c[0], c[1], c[2]))
            .collect();
        let voters: Vec<String> = ports
            .iter()
            .take(voter_count)
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
            if i >= voter_count {
                let broker = format!("PLAINTEXT://127.0.0.1:{client_port}");
                lines.extend([
                    "process.roles=broker".to_owned(),
                    format!("listeners={broker}"),
                    format!("advertised.listeners={broker}"),
                ]);
            }
            lines.extend(settings.iter().map(|s| s.to_string()));
            lines.extend(node_settings(&NodePorts {
                id,
                client_port,
                controller_port,
            }));
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
        let mut cluster = Cluster {
            kind,
            root,
            nodes,
            frozen: Default::default(),
            files_only,
        };
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
        let files_only = self.files_only;
        let node = self.nodes.get_mut(&id).expect("node");
        assert!(node.process.is_none(), "node {id} already runs");
        node.starts += 1;
        let log = node.dir.join(format!("node.{}.log", node.starts));
        let cmd = match kind {
            ClusterKind::KafkaIq => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_kafkaiq"));
                c.arg("--config").arg(&node.config);
                // KafkaIQ's own key, kept out of the file Apache Kafka reads too.
                if !files_only {
                    c.arg("--override")
                        .arg(format!("http.listener=127.0.0.1:{}", node.http_port));
                }
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

    /// SIGTERM of node `id` without waiting: the returned thread checks the stop as
    /// [`Cluster::stop`] does and ends when the process has exited, so a test can watch the
    /// cluster while the node shuts down.
    pub fn stop_in_background(&mut self, id: i32) -> std::thread::JoinHandle<Result<(), String>> {
        let node = self.nodes.get_mut(&id).expect("node");
        let mut p = node.process.take().expect("node runs");
        std::thread::spawn(move || p.stop().map_err(|e| format!("node {id}: {e}")))
    }

    /// The whole output of node `id`'s current (or, once stopped, last) run.
    pub fn log_text(&self, id: i32) -> String {
        let node = &self.nodes[&id];
        std::fs::read_to_string(node.dir.join(format!("node.{}.log", node.starts)))
            .unwrap_or_default()
    }

    /// Runs one of Apache Kafka 4.1.1's command-line tools (`main_class`, e.g.
    /// `org.apache.kafka.tools.LeaderElectionCommand`) against this cluster with `args`;
    /// `--bootstrap-server` is added. Returns the exit code and its output, SLF4J noise removed.
    pub fn kafka_tool(&self, main_class: &str, args: &[&str]) -> (i32, String) {
        let out = Command::new("java")
            .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
            .arg(format!("{}/*", kafka_libs().display()))
            .arg(main_class)
            .arg("--bootstrap-server")
            .arg(self.bootstrap())
            .args(args)
            .output()
            .expect("run java");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let text: Vec<&str> = text.lines().filter(|l| !l.starts_with("SLF4J")).collect();
        (out.status.code().unwrap_or(-1), text.join("\n"))
    }

    /// Stops every running node, checked; removes the directory unless `KEEP_BROKER_DIR`.
    pub fn stop_all(&mut self) {
        self.stop_all_keeping_files();
        self.remove_files();
    }

    /// Stops every running node with SIGTERM, checked (clean exit, no panic, within the
    /// bound); the nodes' files stay for the test to inspect.
    pub fn stop_all_keeping_files(&mut self) {
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
        if !failures.is_empty() {
            eprintln!("cluster dir kept: {}", self.root.display());
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Removes the nodes' files unless `KEEP_BROKER_DIR` is set.
    pub fn remove_files(&self) {
        if std::env::var_os("KEEP_BROKER_DIR").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        } else {
            eprintln!("cluster dir kept: {}", self.root.display());
        }
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

    /// CreateTopics (v7) through node `id` (forwarded when it is not the active controller):
    /// the topic's error code, or `None` (no answer).
    pub async fn create_topic_with(
        &self,
        id: i32,
        name: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Option<i16> {
        let mut client = RawClient::try_connect(self.nodes[&id].client_addr()).await?;
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(replication_factor)]);
        let r = client
            .try_call(7, &request, Duration::from_secs(10))
            .await?;
        Some(r.topics[0].error_code)
    }

    /// CreateTopics of a replication factor 3 topic through node `id`.
    pub async fn create_topic(&self, id: i32, name: &str, partitions: i32) -> Option<i16> {
        self.create_topic_with(id, name, partitions, 3).await
    }

    /// Every partition of `topic` as node `id` reports it, in partition order.
    pub async fn partitions(&self, id: i32, topic: &str) -> Option<Vec<PartitionView>> {
        let m = self.metadata(id, &[topic]).await?;
        let t = m.topics.first().filter(|t| t.error_code == 0)?;
        let mut v: Vec<PartitionView> = t
            .partitions
            .iter()
            .map(|p| PartitionView {
                partition: p.partition_index,
                replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                leader: p.leader_id.0,
                leader_epoch: p.leader_epoch,
                isr: p.isr_nodes.iter().map(|b| b.0).collect(),
            })
            .collect();
        v.sort_by_key(|p| p.partition);
        Some(v)
    }

    /// (leader, leader epoch, isr) of a partition as node `id` reports it; leader -1 while
    /// it has none.
    pub async fn partition_state(
        &self,
        id: i32,
        topic: &str,
        partition: i32,
    ) -> Option<(i32, i32, Vec<i32>)> {
        let m = self.metadata(id, &[topic]).await?;
        let t = m.topics.first()?;
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)?;
        if p.error_code != 0 && p.leader_id.0 < 0 {
            return Some((-1, p.leader_epoch, Vec::new()));
        }
        Some((
            p.leader_id.0,
            p.leader_epoch,
            p.isr_nodes.iter().map(|b| b.0).collect(),
        ))
    }

    /// The active controller node `id` names in Metadata.
    pub async fn controller_seen_by(&self, id: i32) -> Option<i32> {
        self.metadata(id, &[]).await.map(|m| m.controller_id.0)
    }

    /// DescribeQuorum (v2) of the metadata log through node `id`'s client listener: the
    /// partition's answer if it has no error, else `None` (also when down or silent).
    pub async fn describe_quorum(&self, id: i32) -> Option<QuorumPartition> {
        let mut client = RawClient::try_connect(self.nodes[&id].client_addr()).await?;
        let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let q = client.try_call(2, &request, ANSWER).await?;
        let p = q.topics.into_iter().next()?.partitions.into_iter().next()?;
        (p.error_code == 0).then_some(p)
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

    /// Every node's client listener but those frozen by SIGSTOP.
    pub fn bootstrap(&self) -> String {
        let frozen = self.frozen.lock().unwrap_or_else(|e| e.into_inner());
        self.nodes
            .values()
            .filter(|n| !frozen.contains(&n.id))
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

    /// Waits until node `id` accepts connections on its client listener (it may not be part
    /// of the cluster yet).
    pub fn await_listening(&mut self, id: i32) {
        let node = self.nodes.get_mut(&id).expect("node");
        let port = node.client_port;
        node.process
            .as_mut()
            .expect("node runs")
            .await_listening(port);
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to node `id`.
    pub fn signal(&self, id: i32, signal: i32) {
        let pid = self.nodes[&id].process.as_ref().expect("node runs").pid() as i32;
        // SAFETY: kill(2) on the pid of a child this harness started and has not reaped.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "signal {signal} to node {id}");
        let mut frozen = self.frozen.lock().unwrap_or_else(|e| e.into_inner());
        match signal {
            libc::SIGSTOP => frozen.insert(id),
            libc::SIGCONT => frozen.remove(&id),
            _ => false,
        };
    }

    /// Node `id`'s log dir.
    pub fn node_data_dir(&self, id: i32) -> PathBuf {
        self.nodes[&id].data_dir()
    }

    /// The bytes of every `.log` segment of `topic`-`partition` on node `id`, in offset order.
    pub fn log_bytes(&self, id: i32, topic: &str, partition: i32) -> Vec<u8> {
        let dir = self.nodes[&id]
            .data_dir()
            .join(format!("{topic}-{partition}"));
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        segments.sort();
        segments
            .iter()
            .flat_map(|s| std::fs::read(s).unwrap())
            .collect()
    }

    /// The partitions of `topic` as node `id` shows them; `None` if it does not answer or does
    /// not know the topic.
    pub async fn partitions_seen_by(
        &self,
        id: i32,
        topic: &str,
    ) -> Option<BTreeMap<i32, PartitionState>> {
        let m = self.metadata(id, &[topic]).await?;
        let t = m.topics.first().filter(|t| t.error_code == 0)?;
        Some(
            t.partitions
                .iter()
                .map(|p| {
                    let leaderless = p.error_code != 0 && p.leader_id.0 < 0;
                    let state = PartitionState {
                        leader: if leaderless { -1 } else { p.leader_id.0 },
                        leader_epoch: p.leader_epoch,
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    };
                    (p.partition_index, state)
                })
                .collect(),
        )
    }

    /// The partitions of `topic` as the first running node that answers shows them.
    pub async fn partitions_anywhere(&self, topic: &str) -> Option<BTreeMap<i32, PartitionState>> {
        for id in self.running() {
            if let Some(p) = self.partitions_seen_by(id, topic).await {
                return Some(p);
            }
        }
        None
    }

    /// CreateTopics through node `id` with replication factor `replication` and topic
    /// `configs`: the topic's error code, or `None` if the node does not answer.
    pub async fn create_topic_configured(
        &self,
        id: i32,
        name: &str,
        partitions: i32,
        replication: i16,
        configs: &[(&str, &str)],
    ) -> Option<i16> {
        let mut client = RawClient::try_connect(self.nodes[&id].client_addr()).await?;
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(replication)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )]);
        let r = client
            .try_call(7, &request, Duration::from_secs(10))
            .await?;
        Some(r.topics[0].error_code)
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
                // A node a failed test left stopped (SIGSTOP) must not outlive it.
                // SAFETY: kill(2) on the pid of our own unreaped child.
                let _ = unsafe { libc::kill(p.pid() as i32, libc::SIGCONT) };
                let _ = p.kill();
            }
        }
        if std::thread::panicking() {
            eprintln!("cluster dir kept: {}", self.root.display());
        }
    }
}

/// One partition as node `id` reports it: replicas, leader, ISR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
}
