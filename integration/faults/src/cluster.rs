//! The cluster under test: N combined nodes (broker and controller) of KafkaIQ or Apache Kafka
//! 4.1, each a child process started from a `server.properties` in Kafka's keys — the same file
//! for both brokers — on 127.0.0.1.
//!
//! Each node runs with its own group id ([`node_gid`]) so [`crate::netfault`] can drop
//! the packets of one node's sockets to another's ports, and, when disk faults are asked for,
//! with its log dir on a small tmpfs of its own ([`Cluster::fill_disk`]). The metadata log has
//! a directory of its own outside that tmpfs (`metadata.log.dir`), so a full disk takes the
//! partitions' log dir, not the quorum's.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::wire::{self, PartitionState};

/// Node N of this run has group id `NODE_GID_BASE + 10 * (driver pid % 100000) + N`: a range
/// no user has, distinct per run, so two runs on one machine (or the rules a killed run left)
/// never cut each other's nodes.
const NODE_GID_BASE: u32 = 600_000;

pub fn node_gid(id: i32) -> u32 {
    NODE_GID_BASE + 10 * (std::process::id() % 100_000) + id as u32
}
/// How long one request of the driver to a node may take.
pub const ANSWER: Duration = Duration::from_secs(2);
/// How long a node gets to exit after SIGTERM at the end of a run.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);
/// The size of a node's log dir tmpfs when disk faults run.
const LOG_DIR_TMPFS_BYTES: u64 = 256 << 20;
/// The line Rust's panic hook prints for every panic.
const PANIC_MARKER: &str = "panicked at";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    KafkaIq,
    ApacheKafka,
}

impl BrokerKind {
    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::KafkaIq => "kafkaiq",
            BrokerKind::ApacheKafka => "kafka",
        }
    }
}

/// What the driver needs to start a node.
#[derive(Debug, Clone)]
pub struct Launch {
    pub kind: BrokerKind,
    /// The `kafkaiq` binary.
    pub kafkaiq_bin: PathBuf,
    /// Apache Kafka's jars (integration/kafka-libs.sh).
    pub kafka_libs: Option<PathBuf>,
    /// A tmpfs per log dir, for disk faults.
    pub tmpfs_log_dirs: bool,
}

pub struct Node {
    pub id: i32,
    pub client_port: u16,
    pub controller_port: u16,
    pub http_port: u16,
    pub dir: PathBuf,
    pub config: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// A run where the node exited by itself (seen by [`Cluster::exited`]).
    pub exits: Vec<String>,
}

impl Node {
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn ports(&self) -> [u16; 2] {
        [self.client_port, self.controller_port]
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join(format!("node.{}.log", self.starts))
    }
}

pub struct Cluster {
    pub launch: Launch,
    pub root: PathBuf,
    pub nodes: BTreeMap<i32, Node>,
    mounted: Vec<PathBuf>,
}

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Cluster {
    /// Writes every node's file (`settings` after the shared lines) and starts the nodes.
    pub fn start(launch: Launch, root: &Path, n: i32, settings: &[String]) -> Result<Cluster> {
        let _ = std::fs::remove_dir_all(root);
        std::fs::create_dir_all(root)?;
        let ports = free_ports(3 * n as usize);
        let voters: Vec<String> = (0..n as usize)
            .map(|i| format!("{}@127.0.0.1:{}", i + 1, ports[3 * i + 1]))
            .collect();
        let mut cluster = Cluster {
            launch,
            root: root.to_path_buf(),
            nodes: BTreeMap::new(),
            mounted: Vec::new(),
        };
        for i in 0..n as usize {
            let id = i as i32 + 1;
            let (client_port, controller_port, http_port) =
                (ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]);
            let dir = root.join(format!("node-{id}"));
            std::fs::create_dir_all(dir.join("data"))?;
            std::fs::create_dir_all(dir.join("metadata"))?;
            if cluster.launch.tmpfs_log_dirs {
                let data = dir.join("data");
                run(Command::new("mount")
                    .args(["-t", "tmpfs", "-o"])
                    .arg(format!("size={LOG_DIR_TMPFS_BYTES}"))
                    .arg("tmpfs")
                    .arg(&data))
                .context("mount a tmpfs for a log dir (disk faults need root)")?;
                cluster.mounted.push(data);
            }
            let rf = n.min(3);
            let mut lines = vec![
                "process.roles=broker,controller".to_owned(),
                format!("node.id={id}"),
                format!("controller.quorum.voters={}", voters.join(",")),
                format!("listeners=PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}"),
                format!("advertised.listeners=PLAINTEXT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{controller_port}"),
                "controller.listener.names=CONTROLLER".to_owned(),
                "inter.broker.listener.name=PLAINTEXT".to_owned(),
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT".to_owned(),
                format!("log.dirs={}", dir.join("data").display()),
                format!("metadata.log.dir={}", dir.join("metadata").display()),
                format!("broker.rack=rack-{id}"),
                format!("offsets.topic.replication.factor={rf}"),
                "offsets.topic.num.partitions=3".to_owned(),
                format!("transaction.state.log.replication.factor={rf}"),
                "transaction.state.log.min.isr=1".to_owned(),
                format!("share.coordinator.state.topic.replication.factor={rf}"),
                "share.coordinator.state.topic.min.isr=1".to_owned(),
                "group.initial.rebalance.delay.ms=0".to_owned(),
            ];
            lines.extend(settings.iter().cloned());
            let config = dir.join("server.properties");
            std::fs::write(&config, lines.join("\n") + "\n")?;
            cluster.nodes.insert(
                id,
                Node {
                    id,
                    client_port,
                    controller_port,
                    http_port,
                    dir,
                    config,
                    child: None,
                    starts: 0,
                    exits: Vec::new(),
                },
            );
        }
        if launch_kind(&cluster) == BrokerKind::ApacheKafka {
            cluster.format_for_kafka()?;
        }
        let ids: Vec<i32> = cluster.nodes.keys().copied().collect();
        for id in ids {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    fn kafka_classpath(&self) -> Result<String> {
        let libs = self
            .launch
            .kafka_libs
            .as_ref()
            .context("--kafka-libs is needed for Apache Kafka")?;
        Ok(format!("{}/*", libs.display()))
    }

    fn format_for_kafka(&self) -> Result<()> {
        let cp = self.kafka_classpath()?;
        let out = run(Command::new("java").args([
            "-Xmx256m",
            "-cp",
            &cp,
            "kafka.tools.StorageTool",
            "random-uuid",
        ]))?;
        let cluster_id = out
            .trim()
            .lines()
            .last()
            .context("no cluster id")?
            .to_owned();
        for node in self.nodes.values() {
            run(Command::new("java")
                .args([
                    "-Xmx256m",
                    "-cp",
                    &cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    &cluster_id,
                    "-c",
                ])
                .arg(&node.config))
            .with_context(|| format!("kafka-storage format of node {}", node.id))?;
        }
        Ok(())
    }

    /// Starts (or restarts) node `id`.
    pub fn spawn(&mut self, id: i32) -> Result<()> {
        let kind = self.launch.kind;
        let cp = if kind == BrokerKind::ApacheKafka {
            Some(self.kafka_classpath()?)
        } else {
            None
        };
        let bin = self.launch.kafkaiq_bin.clone();
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if node.child.is_some() {
            bail!("node {id} already runs");
        }
        node.starts += 1;
        let log = File::options()
            .create(true)
            .append(true)
            .open(node.log_file())?;
        let mut cmd = match kind {
            BrokerKind::KafkaIq => {
                let mut c = Command::new(&bin);
                c.arg("--config").arg(&node.config);
                c.arg("--override")
                    .arg(format!("http.listener=127.0.0.1:{}", node.http_port));
                if std::env::var_os("RUST_LOG").is_none() {
                    c.env("RUST_LOG", "info");
                }
                c
            }
            BrokerKind::ApacheKafka => {
                let mut c = Command::new("java");
                c.args(["-Xmx512m", "-cp"])
                    .arg(cp.unwrap())
                    .arg("kafka.Kafka")
                    .arg(&node.config);
                c
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .gid(node_gid(id));
        // SAFETY: setgroups(2) and prctl(2) in the child between fork and exec, both
        // async-signal-safe: no supplementary groups besides the node's own, and the node dies
        // with the driver instead of outliving a crashed run.
        unsafe {
            cmd.pre_exec(|| {
                libc::setgroups(0, std::ptr::null());
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        node.child = Some(cmd.spawn().with_context(|| format!("start node {id}"))?);
        Ok(())
    }

    pub fn running(&self) -> Vec<i32> {
        self.nodes
            .values()
            .filter(|n| n.child.is_some())
            .map(|n| n.id)
            .collect()
    }

    /// kill -9 of node `id` (no-op if it is not running).
    pub fn kill(&mut self, id: i32) {
        let node = self.nodes.get_mut(&id).expect("node");
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to node `id`.
    pub fn signal(&self, id: i32, signal: i32) {
        if let Some(c) = self.nodes[&id].child.as_ref() {
            // SAFETY: kill(2) on the pid of a child we started and have not reaped.
            unsafe {
                libc::kill(c.id() as i32, signal);
            }
        }
    }

    /// Nodes that exited although nobody stopped them (recorded in their `exits`).
    pub fn exited(&mut self) -> Vec<i32> {
        let mut out = Vec::new();
        for node in self.nodes.values_mut() {
            if let Some(c) = node.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    node.exits
                        .push(format!("run {} exited with {status}", node.starts));
                    node.child = None;
                    out.push(node.id);
                }
            }
        }
        out
    }

    /// SIGTERM to every node, then waits for each: the problems (a SIGTERM not obeyed, an
    /// unclean exit status, a panic in any run's output).
    pub fn stop_all(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for node in self.nodes.values() {
            if let Some(c) = node.child.as_ref() {
                // SAFETY: as in `signal`.
                unsafe {
                    libc::kill(c.id() as i32, libc::SIGCONT);
                    libc::kill(c.id() as i32, libc::SIGTERM);
                }
            }
        }
        let kind = self.launch.kind;
        for node in self.nodes.values_mut() {
            if let Some(mut c) = node.child.take() {
                let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
                let status = loop {
                    if let Ok(Some(s)) = c.try_wait() {
                        break Some(s);
                    }
                    if Instant::now() > deadline {
                        let _ = c.kill();
                        let _ = c.wait();
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                match status.and_then(|s| s.code()) {
                    Some(0) => {}
                    Some(143) if kind == BrokerKind::ApacheKafka => {}
                    Some(code) => problems.push(format!(
                        "node {}: exited with {code} after SIGTERM",
                        node.id
                    )),
                    None => problems.push(format!(
                        "node {}: did not stop within {SHUTDOWN_TIMEOUT:?} of SIGTERM",
                        node.id
                    )),
                }
            }
            for run in 1..=node.starts {
                let text = std::fs::read_to_string(node.dir.join(format!("node.{run}.log")))
                    .unwrap_or_default();
                if let Some(line) = text.lines().find(|l| l.contains(PANIC_MARKER)) {
                    problems.push(format!("node {} run {run}: {line}", node.id));
                }
            }
        }
        problems
    }

    pub fn bootstrap(&self) -> String {
        self.nodes
            .values()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The partitions of `topic` as the first of `ask` that answers shows them.
    pub fn partitions(
        &self,
        topic: &str,
        ask: &[i32],
    ) -> Option<(i32, BTreeMap<i32, PartitionState>)> {
        ask.iter().find_map(|id| {
            wire::partitions(self.nodes[id].client_addr(), topic, ANSWER).map(|p| (*id, p))
        })
    }

    /// The active controller, as the first of `ask` that answers reports it.
    pub fn active_controller(&self, ask: &[i32]) -> Option<i32> {
        ask.iter()
            .find_map(|id| wire::quorum_leader(self.nodes[id].client_addr(), ANSWER))
    }

    /// Every node in `ask` lists exactly the brokers `expected` as unfenced.
    pub fn brokers_are(&self, ask: &[i32], expected: &[i32]) -> bool {
        ask.iter().all(|id| {
            wire::brokers(self.nodes[id].client_addr(), ANSWER).as_deref() == Some(expected)
        })
    }

    pub fn listening(&self, id: i32) -> bool {
        TcpStream::connect_timeout(&self.nodes[&id].client_addr(), ANSWER).is_ok()
    }

    /// Fills node `id`'s log dir tmpfs: the next write there fails with ENOSPC.
    pub fn fill_disk(&self, id: i32) -> Result<()> {
        let filler = self.nodes[&id].log_dir().join("filler");
        let mut f = File::create(&filler)?;
        let chunk = vec![0u8; 1 << 20];
        use std::io::Write;
        // Until the tmpfs is full (ENOSPC).
        while f.write_all(&chunk).is_ok() {}
        Ok(())
    }

    /// Frees what [`Cluster::fill_disk`] took.
    pub fn free_disk(&self, id: i32) -> Result<()> {
        let filler = self.nodes[&id].log_dir().join("filler");
        if filler.exists() {
            std::fs::remove_file(filler)?;
        }
        Ok(())
    }

    /// The `.log` segment files of `topic`-`partition` on node `id`, in offset order.
    pub fn segments(&self, id: i32, topic: &str, partition: i32) -> Vec<PathBuf> {
        let dir = self.nodes[&id]
            .log_dir()
            .join(format!("{topic}-{partition}"));
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "log"))
                    .collect()
            })
            .unwrap_or_default();
        segments.sort();
        segments
    }

    /// Unmounts the tmpfs log dirs and removes the files unless `keep`.
    pub fn clean_up(&mut self, keep: bool) {
        for m in self.mounted.drain(..) {
            if keep {
                // Keep the bytes: copy the tmpfs out before it goes.
                let copy = m.with_extension("kept");
                let _ = Command::new("cp").arg("-a").arg(&m).arg(&copy).status();
            }
            let _ = Command::new("umount").arg(&m).status();
        }
        if keep {
            eprintln!("faults: cluster files kept in {}", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

fn launch_kind(c: &Cluster) -> BrokerKind {
    c.launch.kind
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut c) = node.child.take() {
                // SAFETY: kill(2) on our own unreaped child (it may be stopped).
                unsafe {
                    libc::kill(c.id() as i32, libc::SIGCONT);
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for m in self.mounted.drain(..) {
            let _ = Command::new("umount").arg(&m).status();
        }
    }
}
