//! `kafkaiq local-cluster`: N combined (broker and controller) nodes on 127.0.0.1 as child
//! processes of this binary, one command, stopped together.
//!
//! Node `n` (1..=N) has node.id `n`, client port `base_port + n - 1`, controller port
//! `controller_base_port + n - 1` (default `base_port + 10000`), HTTP listener (metrics and the
//! leadership page) on `http_base_port + n - 1` (default 9644), rack `rack-n`, and lives in
//! `DIR/node-n/`: `server.properties` (generated in Apache Kafka's own keys, so
//! `kafka-storage format` and `kafka.Kafka` accept it unchanged), `kafkaiq.log` (the node's
//! stdout and stderr, appended) and `data/` (its `log.dirs`). The files are rewritten on every
//! start; the data is kept.
//!
//! Stopping: SIGINT or SIGTERM sends SIGTERM to every node still running, waits up to the stop
//! timeout for each to shut down cleanly, then SIGKILLs what is left. A second signal kills at
//! once. On Linux each node also gets SIGTERM if this supervisor dies (PR_SET_PDEATHSIG), so no
//! node outlives it. A node that exits on its own is reported and the others keep running.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;

/// Why the local cluster could not start or did not stop cleanly: a message for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LocalClusterError(pub String);

type Result<T> = std::result::Result<T, LocalClusterError>;

macro_rules! bail {
    ($($arg:tt)*) => { return Err(LocalClusterError(format!($($arg)*))) };
}

/// `.context(..)` / `.with_context(..)` for any displayable error.
trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|e| LocalClusterError(format!("{what}: {e}")))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| LocalClusterError(format!("{}: {e}", what())))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: &str) -> Result<T> {
        self.ok_or_else(|| LocalClusterError(what.to_owned()))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| LocalClusterError(what()))
    }
}

pub const HOST: &str = "127.0.0.1";
pub const MAX_BROKERS: u8 = 9;
/// The controller ports sit this far above the client ports unless given.
pub const CONTROLLER_PORT_OFFSET: u16 = 10_000;

/// What `kafkaiq local-cluster` was asked for.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    pub brokers: u8,
    pub base_port: u16,
    pub controller_base_port: u16,
    /// Node n's `http.listener` is `127.0.0.1:http_base_port + n - 1`.
    pub http_base_port: u16,
    pub dir: PathBuf,
    /// `key=value` overrides passed to every node.
    pub overrides: Vec<String>,
    pub stop_timeout: Duration,
}

/// One node of the local cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalNode {
    pub node_id: i32,
    pub client_port: u16,
    pub controller_port: u16,
    pub http_port: u16,
    pub rack: String,
    pub dir: PathBuf,
}

impl LocalNode {
    pub fn properties_path(&self) -> PathBuf {
        self.dir.join("server.properties")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("kafkaiq.log")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

impl LocalCluster {
    /// The ports must fit and the client and controller ranges must not overlap.
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_BROKERS).contains(&self.brokers) {
            bail!("--brokers must be between 1 and {MAX_BROKERS}");
        }
        let n = u32::from(self.brokers);
        let range = |base: u16, flag: &str| -> Result<(u32, u32)> {
            let first = u32::from(base);
            let last = first + n - 1;
            if first == 0 || last > u32::from(u16::MAX) {
                bail!("{flag} {base}: ports {first}..={last} do not fit in 1..=65535");
            }
            Ok((first, last))
        };
        let client = range(self.base_port, "--base-port")?;
        let controller = range(self.controller_base_port, "--controller-base-port")?;
        let http = range(self.http_base_port, "--http-base-port")?;
        let overlap = |a: (u32, u32), b: (u32, u32)| a.0 <= b.1 && b.0 <= a.1;
        for (what, a, b) in [
            ("client and controller", client, controller),
            ("client and http", client, http),
            ("controller and http", controller, http),
        ] {
            if overlap(a, b) {
                bail!(
                    "{what} ports {}..={} and {}..={} overlap",
                    a.0,
                    a.1,
                    b.0,
                    b.1
                );
            }
        }
        Ok(())
    }

    pub fn nodes(&self) -> Vec<LocalNode> {
        (1..=self.brokers)
            .map(|n| LocalNode {
                node_id: i32::from(n),
                client_port: self.base_port + u16::from(n) - 1,
                controller_port: self.controller_base_port + u16::from(n) - 1,
                http_port: self.http_base_port + u16::from(n) - 1,
                rack: format!("rack-{n}"),
                dir: self.dir.join(format!("node-{n}")),
            })
            .collect()
    }

    /// `host:port,…` of every client listener.
    pub fn bootstrap_servers(&self) -> String {
        self.nodes()
            .iter()
            .map(|n| format!("{HOST}:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `controller.quorum.voters`: every node, `id@host:controller_port`.
    pub fn voters(&self) -> String {
        self.nodes()
            .iter()
            .map(|n| format!("{}@{HOST}:{}", n.node_id, n.controller_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A node's `server.properties`, in Kafka's keys only.
    pub fn server_properties(&self, node: &LocalNode) -> String {
        let replication = self.brokers.min(3);
        let min_isr = self.brokers.min(2);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Generated by `kafkaiq local-cluster` (rewritten on every start): node {} of {}, broker\n\
             # and controller in one process. Apache Kafka's own keys: `kafka-storage format` and\n\
             # `kafka.Kafka` take this file unchanged.",
            node.node_id, self.brokers
        );
        let _ = writeln!(out, "process.roles=broker,controller");
        let _ = writeln!(out, "node.id={}", node.node_id);
        let _ = writeln!(out, "controller.quorum.voters={}", self.voters());
        let listeners = format!(
            "PLAINTEXT://{HOST}:{},CONTROLLER://{HOST}:{}",
            node.client_port, node.controller_port
        );
        let _ = writeln!(out, "listeners={listeners}");
        let _ = writeln!(out, "advertised.listeners={listeners}");
        let _ = writeln!(out, "controller.listener.names=CONTROLLER");
        let _ = writeln!(out, "inter.broker.listener.name=PLAINTEXT");
        let _ = writeln!(
            out,
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        );
        let _ = writeln!(out, "broker.rack={}", node.rack);
        let _ = writeln!(out, "log.dirs={}", node.data_dir().display());
        let _ = writeln!(out, "offsets.topic.replication.factor={replication}");
        let _ = writeln!(
            out,
            "transaction.state.log.replication.factor={replication}"
        );
        let _ = writeln!(out, "transaction.state.log.min.isr={min_isr}");
        let _ = writeln!(
            out,
            "share.coordinator.state.topic.replication.factor={replication}"
        );
        let _ = writeln!(out, "share.coordinator.state.topic.min.isr={min_isr}");
        out
    }

    /// How to reach the cluster, printed once every node is started.
    pub fn banner(&self, pids: &[u32]) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "KafkaIQ local cluster: {} node(s), each broker and controller, data under {}",
            self.brokers,
            self.dir.display()
        );
        for (node, pid) in self.nodes().iter().zip(pids) {
            let _ = writeln!(
                out,
                "  node {} pid {pid}: client {HOST}:{}, controller {HOST}:{}, http://{HOST}:{}/, {}, log {}",
                node.node_id,
                node.client_port,
                node.controller_port,
                node.http_port,
                node.rack,
                node.log_path().display()
            );
        }
        let bootstrap = self.bootstrap_servers();
        let _ = writeln!(out, "bootstrap servers: {bootstrap}");
        let _ = writeln!(out, "  kcat -b {bootstrap} -L");
        let _ = writeln!(out, "Ctrl-C stops every node.");
        out
    }

    /// Writes every node's files, starts the nodes, supervises them until a signal, stops them.
    /// `exe` is the kafkaiq binary to start (normally this one). Must run on a current-thread
    /// runtime: the parent-death signal is tied to the thread that starts the children.
    pub async fn run(mut self, exe: &Path) -> Result<()> {
        self.check()?;
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        self.dir = self
            .dir
            .canonicalize()
            .with_context(|| format!("cannot resolve {}", self.dir.display()))?;
        // Refuse before starting anything if a port is taken: a half-started cluster helps no one.
        for node in self.nodes() {
            for port in [node.client_port, node.controller_port, node.http_port] {
                if let Err(e) = std::net::TcpListener::bind((HOST, port)) {
                    bail!("{HOST}:{port} (node {}) is not free: {e}", node.node_id);
                }
            }
        }
        let mut signals = Signals::install()?;
        let (exits_tx, mut exits_rx) =
            mpsc::unbounded_channel::<(i32, std::io::Result<ExitStatus>)>();
        let mut running: Vec<(LocalNode, u32)> = Vec::new();
        for node in self.nodes() {
            match self.start_node(exe, &node, exits_tx.clone()) {
                Ok(pid) => running.push((node, pid)),
                Err(e) => {
                    eprintln!("node {} did not start: {e}", node.node_id);
                    stop(&mut running, &mut exits_rx, &mut signals, self.stop_timeout).await;
                    return Err(e);
                }
            }
        }
        drop(exits_tx);
        let pids: Vec<u32> = running.iter().map(|(_, pid)| *pid).collect();
        print!("{}", self.banner(&pids));
        use std::io::Write as _;
        let _ = std::io::stdout().flush();

        let mut failed = false;
        loop {
            tokio::select! {
                _ = signals.recv() => break,
                exit = exits_rx.recv() => match exit {
                    None => break,
                    Some((id, status)) => {
                        running.retain(|(n, _)| n.node_id != id);
                        failed = true;
                        println!(
                            "node {id} exited on its own ({}); see {}",
                            describe(&status),
                            self.dir.join(format!("node-{id}")).join("kafkaiq.log").display()
                        );
                        let _ = std::io::stdout().flush();
                        if running.is_empty() {
                            bail!("every node has exited");
                        }
                    }
                },
            }
        }
        println!("stopping {} node(s)", running.len());
        let _ = std::io::stdout().flush();
        let clean = stop(&mut running, &mut exits_rx, &mut signals, self.stop_timeout).await;
        if !clean || failed {
            bail!("not every node stopped cleanly");
        }
        println!("every node stopped");
        Ok(())
    }

    fn start_node(
        &self,
        exe: &Path,
        node: &LocalNode,
        exits: mpsc::UnboundedSender<(i32, std::io::Result<ExitStatus>)>,
    ) -> Result<u32> {
        std::fs::create_dir_all(node.data_dir())
            .with_context(|| format!("cannot create {}", node.data_dir().display()))?;
        let properties = node.properties_path();
        std::fs::write(&properties, self.server_properties(node))
            .with_context(|| format!("cannot write {}", properties.display()))?;
        let log_path = node.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let log_err = log.try_clone().context("cannot share the log file")?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("--config")
            .arg(&properties)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            // A log file, not a terminal: no colour codes.
            .env("NO_COLOR", "1")
            .kill_on_drop(true);
        // Not in server.properties, which holds Kafka's keys only; `--override`s after it win.
        command
            .arg("--override")
            .arg(format!("http.listener={HOST}:{}", node.http_port));
        for flag in &self.overrides {
            command.arg("--override").arg(flag);
        }
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let pid = child.id().context("started node has no pid")?;
        let id = node.node_id;
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = exits.send((id, status));
        });
        Ok(pid)
    }
}

/// SIGTERM to every running node, wait up to `timeout`, then SIGKILL the rest (at once on a
/// second signal). Reports each stop; true if every node exited successfully.
async fn stop(
    running: &mut Vec<(LocalNode, u32)>,
    exits: &mut mpsc::UnboundedReceiver<(i32, std::io::Result<ExitStatus>)>,
    signals: &mut Signals,
    timeout: Duration,
) -> bool {
    use std::io::Write as _;
    for (_, pid) in running.iter() {
        send_signal(*pid, libc::SIGTERM);
    }
    let mut clean = true;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut killed = false;
    while !running.is_empty() {
        tokio::select! {
            exit = exits.recv() => match exit {
                None => break,
                Some((id, status)) => {
                    running.retain(|(n, _)| n.node_id != id);
                    clean &= matches!(&status, Ok(s) if s.success());
                    println!("node {id} stopped ({})", describe(&status));
                    let _ = std::io::stdout().flush();
                }
            },
            _ = &mut deadline, if !killed => {
                killed = true;
                clean = false;
                for (node, pid) in running.iter() {
                    println!("node {} did not stop within {timeout:?}; killing it", node.node_id);
                    send_signal(*pid, libc::SIGKILL);
                }
            },
            _ = signals.recv(), if !killed => {
                killed = true;
                clean = false;
                for (node, pid) in running.iter() {
                    println!("second signal: killing node {}", node.node_id);
                    send_signal(*pid, libc::SIGKILL);
                }
            },
        }
    }
    clean
}

fn describe(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => s.to_string(),
        Err(e) => format!("cannot wait for it: {e}"),
    }
}

fn send_signal(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory effects. The pid is one of our children that has not
        // reported its exit; one reaped a moment ago is removed from `running` as soon as its
        // report is read, so only that short window could reach a reused pid.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut tokio::process::Command) {
    // SAFETY: getpid is async-signal-safe; in the child between fork and exec, only prctl,
    // getppid and _exit are called, all async-signal-safe.
    let parent = unsafe { libc::getpid() };
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut tokio::process::Command) {}

/// SIGINT and SIGTERM for the supervisor.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BrokerConfig, RawConfig};

    fn cluster(brokers: u8) -> LocalCluster {
        LocalCluster {
            brokers,
            base_port: 9092,
            controller_base_port: 9092 + CONTROLLER_PORT_OFFSET,
            http_base_port: 9644,
            dir: PathBuf::from("/tmp/kq-local"),
            overrides: Vec::new(),
            stop_timeout: Duration::from_secs(30),
        }
    }

    #[test]
    fn nodes_ports_racks_and_dirs() {
        let c = cluster(3);
        c.check().unwrap();
        let nodes = c.nodes();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[2].node_id, 3);
        assert_eq!(nodes[2].client_port, 9094);
        assert_eq!(nodes[2].controller_port, 19094);
        assert_eq!(nodes[2].rack, "rack-3");
        assert_eq!(nodes[2].dir, PathBuf::from("/tmp/kq-local/node-3"));
        assert_eq!(
            c.bootstrap_servers(),
            "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
        );
        assert_eq!(
            c.voters(),
            "1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094"
        );
        let banner = c.banner(&[10, 11, 12]);
        assert!(banner.contains("kcat -b 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 -L"));
        assert!(banner.contains("node 2 pid 11"));
    }

    #[test]
    fn generated_files_are_valid_kafka_keys_and_agree() {
        for brokers in [1, 3, 9] {
            let c = cluster(brokers);
            for node in c.nodes() {
                let text = c.server_properties(&node);
                let raw = RawConfig::parse(&text, Path::new("generated")).unwrap();
                let v = BrokerConfig::from_raw(raw).unwrap_or_else(|e| panic!("{e}\n{text}"));
                assert!(v.warnings.is_empty(), "{:?}", v.warnings);
                let k = &v.config.kraft;
                assert_eq!(k.node_id, node.node_id);
                assert_eq!(k.voters.len(), usize::from(brokers));
                assert_eq!(k.local_voter().unwrap().port, node.controller_port);
                assert_eq!(k.controller_listener().unwrap().port, node.controller_port);
                assert_eq!(v.config.listener.port, node.client_port);
                assert_eq!(v.config.broker_rack.as_deref(), Some(node.rack.as_str()));
                assert_eq!(v.config.log_dirs, vec![node.data_dir()]);
                let rf = format!("offsets.topic.replication.factor={}", brokers.min(3));
                assert!(text.contains(&rf), "{text}");
            }
        }
    }

    #[test]
    fn bad_requests_are_refused() {
        let mut c = cluster(0);
        assert!(c.check().is_err());
        c.brokers = 10;
        assert!(c.check().is_err());
        c.brokers = 3;
        c.base_port = 65534;
        c.controller_base_port = 10_000;
        assert!(c.check().unwrap_err().to_string().contains("--base-port"));
        c.base_port = 9092;
        c.controller_base_port = 9093;
        assert!(c.check().unwrap_err().to_string().contains("overlap"));
        c.controller_base_port = 19092;
        c.http_base_port = 9093;
        assert!(c
            .check()
            .unwrap_err()
            .to_string()
            .contains("client and http"));
    }
}
