//! `kafkaiq local-cluster`: the nodes start as children of one supervisor with generated
//! `server.properties` files in Kafka's keys, and SIGINT to the supervisor stops every one.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::MetadataRequest;
use kafkaiq::config::{broker_config_def, BrokerConfig, RawConfig};

const NODES: u16 = 3;

fn kafkaiq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kafkaiq"))
}

/// The first of `n` consecutive free ports on 127.0.0.1 (never one handed out before).
fn free_ports(n: u16) -> u16 {
    common::broker_process::free_consecutive_ports(n)
}

/// A running `kafkaiq local-cluster`; killed if a test fails before stopping it (its nodes
/// follow through their parent-death signal).
struct Supervisor {
    child: Child,
    lines: mpsc::Receiver<String>,
    output: Vec<String>,
    dir: tempfile::TempDir,
    client_base: u16,
    controller_base: u16,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Supervisor {
    fn start(nodes: u16) -> Supervisor {
        let dir = tempfile::tempdir().unwrap();
        let client_base = free_ports(nodes);
        let controller_base = free_ports(nodes);
        let http_base = free_ports(nodes);
        let mut child = kafkaiq()
            .args(["local-cluster", "--brokers", &nodes.to_string()])
            .args(["--base-port", &client_base.to_string()])
            .args(["--controller-base-port", &controller_base.to_string()])
            .args(["--http-base-port", &http_base.to_string()])
            .arg("--dir")
            .arg(dir.path())
            .args(["--stop-timeout", "30"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Supervisor {
            child,
            lines,
            output: Vec::new(),
            dir,
            client_base,
            controller_base,
        }
    }

    /// Reads stdout until a line contains `needle`.
    fn wait_for_line(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.output.iter().any(|l| l.contains(needle)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.output.push(line),
                Err(_) => panic!("no `{needle}` within {timeout:?}: {:?}", self.output),
            }
        }
    }

    /// The node pids from the banner's `node N pid P:` lines.
    fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for n in 1..=NODES {
            let prefix = format!("node {n} pid ");
            let line = self
                .output
                .iter()
                .find(|l| l.trim_start().starts_with(&prefix))
                .unwrap_or_else(|| panic!("no pid for node {n}: {:?}", self.output));
            let rest = &line.trim_start()[prefix.len()..];
            pids.push(rest.split(':').next().unwrap().parse().unwrap());
        }
        pids
    }

    fn node_dir(&self, n: u16) -> PathBuf {
        self.dir
            .path()
            .canonicalize()
            .unwrap()
            .join(format!("node-{n}"))
    }

    fn client_addr(&self, n: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_base + n - 1))
    }

    /// Waits until every node serves clients: its port accepts and its log says it listens
    /// (a cluster node binds early but serves only once the controller has unfenced it).
    fn wait_until_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for n in 1..=NODES {
            let log = self.node_dir(n).join("kafkaiq.log");
            loop {
                let serving = TcpStream::connect(self.client_addr(n)).is_ok()
                    && std::fs::read_to_string(&log).is_ok_and(|t| t.contains("listening"));
                if serving {
                    break;
                }
                assert!(Instant::now() < deadline, "node {n} never listened");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// SIGINT to the supervisor; its exit status, within a bound.
    fn interrupt(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.output.push(line);
                }
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "supervisor still running 90 s after SIGINT"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Alive and not a zombie.
fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().next() != Some("Z")
        }
    }
}

#[test]
fn local_cluster_starts_every_node_with_kafka_keys_and_sigint_stops_them_all() {
    let mut sup = Supervisor::start(NODES);
    sup.wait_for_line("Ctrl-C stops every node", Duration::from_secs(60));
    let pids = sup.pids();
    let bootstrap = (1..=NODES)
        .map(|n| sup.client_addr(n).to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert!(
        sup.output
            .iter()
            .any(|l| l.contains(&format!("kcat -b {bootstrap} -L"))),
        "{:?}",
        sup.output
    );
    // Every node is a child of the supervisor running this binary on its generated file.
    for (i, pid) in pids.iter().enumerate() {
        let n = i as u16 + 1;
        assert_eq!(parent_of(*pid), Some(sup.child.id()), "node {n}");
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
        let properties = sup.node_dir(n).join("server.properties");
        assert!(
            cmdline.contains(properties.to_str().unwrap()),
            "node {n}: {cmdline:?}"
        );
    }
    sup.wait_until_listening();

    let voters = (1..=NODES)
        .map(|n| format!("{n}@127.0.0.1:{}", sup.controller_base + n - 1))
        .collect::<Vec<_>>()
        .join(",");
    for n in 1..=NODES {
        let dir = sup.node_dir(n);
        let path = dir.join("server.properties");
        let text = std::fs::read_to_string(&path).unwrap();
        let client = sup.client_base + n - 1;
        let controller = sup.controller_base + n - 1;
        for line in [
            "process.roles=broker,controller".to_owned(),
            format!("node.id={n}"),
            format!("controller.quorum.voters={voters}"),
            format!("listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}"),
            "controller.listener.names=CONTROLLER".to_owned(),
            "inter.broker.listener.name=PLAINTEXT".to_owned(),
            format!("broker.rack=rack-{n}"),
            format!("log.dirs={}", dir.join("data").display()),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{path:?} lacks {line}:\n{text}"
            );
        }
        // Only Kafka's keys, and nothing KafkaIQ warns about.
        let raw = RawConfig::from_file(&path).unwrap();
        for (key, _) in raw.iter() {
            assert!(broker_config_def(key).is_some(), "{path:?}: {key}");
        }
        let v = BrokerConfig::from_raw(raw).unwrap();
        assert!(v.warnings.is_empty(), "{path:?}: {:?}", v.warnings);
        // Its log file next to it, and its data where log.dirs says.
        let log = std::fs::read_to_string(dir.join("kafkaiq.log")).unwrap();
        assert!(log.contains("listening"), "node {n} log:\n{log}");
        assert!(!log.contains('\u{1b}'), "colour codes in node {n}'s log");
        assert!(dir.join("data").join("meta.properties").exists());
    }

    let status = sup.interrupt();
    assert!(status.success(), "{status}: {:?}", sup.output);
    assert!(
        sup.output.iter().any(|l| l.contains("every node stopped")),
        "{:?}",
        sup.output
    );
    for (i, pid) in pids.iter().enumerate() {
        assert!(
            !is_running(*pid),
            "node {} (pid {pid}) outlived SIGINT",
            i + 1
        );
        let log = std::fs::read_to_string(sup.node_dir(i as u16 + 1).join("kafkaiq.log")).unwrap();
        assert!(log.contains("stopped cleanly"), "node {}:\n{log}", i + 1);
    }
}

#[test]
fn local_cluster_refuses_a_taken_port_and_a_bad_size() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let controller_base = free_ports(2);
    let http_base = free_ports(2);
    let out = kafkaiq()
        .args(["local-cluster", "--brokers", "2", "--base-port"])
        .arg(port.to_string())
        .args(["--controller-base-port", &controller_base.to_string()])
        .args(["--http-base-port", &http_base.to_string()])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert!(!dir.path().join("node-1").join("kafkaiq.log").exists());

    let out = kafkaiq()
        .args(["local-cluster", "--brokers", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--brokers"));
}

/// Whether the nodes form one cluster is the metadata quorum's business: every node must report
/// the same cluster id and all three brokers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cluster_of_three_forms_one_cluster() {
    let mut sup = Supervisor::start(NODES);
    sup.wait_for_line("Ctrl-C stops every node", Duration::from_secs(60));
    sup.wait_until_listening();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut views = Vec::new();
        for n in 1..=NODES {
            let mut client = common::RawClient::connect(sup.client_addr(n)).await;
            let r = client.call(12, &MetadataRequest::default()).await;
            let mut brokers: Vec<i32> = r.brokers.iter().map(|b| b.node_id.0).collect();
            brokers.sort_unstable();
            views.push((r.cluster_id.map(|c| c.to_string()), brokers));
        }
        let formed = views
            .iter()
            .all(|v| v == &views[0] && v.1 == vec![1, 2, 3] && v.0.is_some());
        if formed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no single cluster of 3 within 60 s: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let status = tokio::task::block_in_place(|| sup.interrupt());
    assert!(status.success());
}
