//! Broker processes a test starts, and the checks every stop makes.
//!
//! A test that runs the `kafkaiq` binary (or Apache Kafka through `integration/apache-kafka.sh`)
//! as a child process must fail when the broker misbehaves even if every request was answered:
//! a panic in any of its tasks (a `panicked at` line in its output), an exit status other than
//! a clean one, or a SIGTERM it does not obey within [`SHUTDOWN_TIMEOUT`]. [`BrokerProcess`]
//! keeps the child's output in a log file and makes those checks in [`BrokerProcess::stop`],
//! [`BrokerProcess::kill`] and, for a process nobody stopped, when it is dropped.
//!
//! [`start_selected`] starts the broker the environment selects, as the stock-client suites
//! do: `KAFKA_BOOTSTRAP=host:port` (a running broker, nothing started),
//! `BROKER_UNDER_TEST=apache-kafka` (Apache Kafka 4.1.1), otherwise this build's `kafkaiq`.

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a broker gets to exit after SIGTERM before it is killed and the test fails.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a started broker gets to accept connections.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(90);

/// The line Rust's panic hook prints for every panic, in any thread or task.
pub const PANIC_MARKER: &str = "panicked at";

/// A broker child process whose stdout and stderr go to `log`.
pub struct BrokerProcess {
    pub kind: String,
    child: Option<Child>,
    log: PathBuf,
    shutdown_timeout: Duration,
}

impl BrokerProcess {
    /// Spawns `cmd` (stdin closed, stdout and stderr appended to `log`).
    pub fn spawn(kind: &str, mut cmd: Command, log: &Path) -> BrokerProcess {
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone log handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {kind}: {e}"));
        BrokerProcess {
            kind: kind.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
            shutdown_timeout: SHUTDOWN_TIMEOUT,
        }
    }

    /// Shortens (or lengthens) the SIGTERM bound; for the detection's own tests.
    pub fn with_shutdown_timeout(mut self, timeout: Duration) -> BrokerProcess {
        self.shutdown_timeout = timeout;
        self
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker already stopped").id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has exited (without reaping anything else).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("poll broker"))
    }

    /// Panics (with the log's tail) if the broker is no longer running.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.exited() {
            panic!(
                "{} exited with {status} while the test needed it:\n{}",
                self.kind,
                self.log_tail(40)
            );
        }
    }

    /// Waits until 127.0.0.1:`port` accepts connections; panics if the broker exits first or
    /// does not listen within [`STARTUP_TIMEOUT`].
    pub fn await_listening(&mut self, port: u16) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = self.exited() {
                panic!(
                    "{} exited with {status} before listening on port {port}:\n{}",
                    self.kind,
                    self.log_tail(40)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on port {port} within {STARTUP_TIMEOUT:?}",
                self.kind
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Sends SIGTERM without waiting (a cluster stops all its nodes at once: a combined node
    /// whose quorum is already gone cannot finish a controlled shutdown).
    pub fn terminate(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if child.try_wait().expect("poll broker").is_none() {
                // SAFETY: kill(2) on the pid of a child this process has not reaped yet.
                unsafe {
                    libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                }
            }
        }
    }

    /// Stops the broker with SIGTERM. Err (after a SIGKILL) if it does not exit within the
    /// shutdown bound; Err if it exits with anything but a clean status (0; Apache Kafka's JVM
    /// also exits 143 after a SIGTERM); Err if its output shows a panic.
    pub fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let mut problems = Vec::new();
        if child.try_wait().expect("poll broker").is_none() {
            // SAFETY: kill(2) on the pid of a child this process has not reaped yet.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + self.shutdown_timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll broker") {
                break status;
            }
            if Instant::now() >= deadline {
                problems.push(format!(
                    "did not stop within {:?} of SIGTERM; killed",
                    self.shutdown_timeout
                ));
                let _ = child.kill();
                break child.wait().expect("reap broker");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if problems.is_empty() && !self.clean_exit(status) {
            problems.push(format!("exited with {status}"));
        }
        self.check_log(&mut problems);
        self.report(problems)
    }

    /// Kills the broker with SIGKILL (a crash the test means to cause). Only its output is
    /// checked: Err if it shows a panic.
    pub fn kill(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = child.kill();
        child.wait().expect("reap broker");
        let mut problems = Vec::new();
        self.check_log(&mut problems);
        self.report(problems)
    }

    fn clean_exit(&self, status: ExitStatus) -> bool {
        match status.code() {
            Some(0) => true,
            Some(143) => self.kind == "apache-kafka",
            _ => false,
        }
    }

    fn check_log(&self, problems: &mut Vec<String>) {
        let text = self.log_text();
        let panics: Vec<&str> = text.lines().filter(|l| l.contains(PANIC_MARKER)).collect();
        if !panics.is_empty() {
            problems.push(format!(
                "panicked ({} panic lines), first: {}",
                panics.len(),
                panics[0]
            ));
        }
    }

    fn report(&self, problems: Vec<String>) -> Result<(), String> {
        if problems.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} {} (log {}):\n---- last lines of its output ----\n{}\n----",
            self.kind,
            problems.join("; "),
            self.log.display(),
            self.log_tail(40)
        ))
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if self.child.is_none() {
            return;
        }
        if let Err(e) = self.stop() {
            if std::thread::panicking() {
                eprintln!("{e}");
            } else {
                panic!("{e}");
            }
        }
    }
}

/// `n` distinct free ports for listeners that a test starts later.
///
/// Taken below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), where no
/// outgoing connection is given a local port: a port picked by binding port 0 and released is
/// from that range, and while tests run in parallel any connection may take it before its
/// broker binds it (the broker then fails with "Address already in use"). Each port is handed
/// out once per test process (a counter, started at an offset from the process id so that two
/// test processes rarely meet) and only if it can be bound now.
pub fn free_ports(n: usize) -> Vec<u16> {
    (0..n).map(|_| free_port()).collect()
}

pub fn free_port() -> u16 {
    free_consecutive_ports(1)
}

/// The first of `n` consecutive free ports, taken as [`free_ports`] takes them.
pub fn free_consecutive_ports(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    const LOWEST: u32 = 10_000;
    /// The most ports one call hands out: every call wraps the counter at the same span.
    const MOST: u32 = 16;
    let n = u32::from(n);
    assert!(n <= MOST, "at most {MOST} consecutive ports");
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
        .min(65_536);
    assert!(
        ephemeral_low >= LOWEST + 1_000,
        "the ephemeral port range starts at {ephemeral_low}: no room below it for test listeners"
    );
    let span = ephemeral_low - LOWEST - MOST;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let first = LOWEST + NEXT.fetch_add(n, Ordering::Relaxed) % span;
        if (first..first + n).all(|p| TcpListener::bind(("127.0.0.1", p as u16)).is_ok()) {
            return first as u16;
        }
    }
    panic!("no {n} free consecutive ports in {LOWEST}..{ephemeral_low}");
}

/// Apache Kafka 4.1.1 as a single KRaft node (`integration/apache-kafka.sh`) on 127.0.0.1:`port`
/// and `controller_port`, its files in `dir` (formatted on first use, so a second command
/// restarts it on the same data), with each `key=value` setting appended.
pub fn apache_kafka_command(
    dir: &Path,
    port: u16,
    controller_port: u16,
    settings: &[&str],
) -> Command {
    let mut c = Command::new("bash");
    c.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/apache-kafka.sh"
    ))
    .arg(dir)
    .arg(port.to_string())
    .arg(controller_port.to_string())
    .args(settings);
    c
}

/// The `kafkaiq` binary of this build on 127.0.0.1:`port` with its data in `data`, plus
/// `--override key=value` for each setting.
pub fn kafkaiq_command(port: u16, data: &Path, settings: &[&str]) -> Command {
    let listener = format!("PLAINTEXT://127.0.0.1:{port}");
    let mut c = Command::new(env!("CARGO_BIN_EXE_kafkaiq"));
    c.arg("--override")
        .arg(format!("listeners={listener}"))
        .arg("--override")
        .arg(format!("advertised.listeners={listener}"))
        .arg("--override")
        .arg(format!("log.dirs={}", data.display()))
        // Tests run in parallel: no fixed HTTP port (9644) unless a setting asks for one.
        .arg("--override")
        .arg("http.listener=none");
    for kv in settings {
        c.arg("--override").arg(kv);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        c.env("RUST_LOG", "info");
    }
    c
}

/// The broker a test talks to: started here (and stopped, checked and removed on drop), or an
/// external one.
pub struct SelectedBroker {
    pub bootstrap: String,
    pub kind: String,
    pub process: Option<BrokerProcess>,
    pub dir: Option<PathBuf>,
}

impl SelectedBroker {
    /// Stops a started broker (see [`BrokerProcess::stop`]) and removes its directory unless
    /// `KEEP_BROKER_DIR` is set.
    pub fn stop(&mut self) -> Result<(), String> {
        let result = match self.process.as_mut() {
            Some(p) => p.stop(),
            None => Ok(()),
        };
        self.process = None;
        if let Some(dir) = self.dir.take() {
            if std::env::var_os("KEEP_BROKER_DIR").is_none() && result.is_ok() {
                let _ = std::fs::remove_dir_all(dir);
            } else {
                eprintln!("broker dir kept: {}", dir.display());
            }
        }
        result
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|p| p.log_tail(lines))
            .unwrap_or_default()
    }
}

impl Drop for SelectedBroker {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            if std::thread::panicking() {
                eprintln!("{e}");
            } else {
                panic!("{e}");
            }
        }
    }
}

/// Starts the broker the environment selects (see the module docs) with `settings` (Kafka
/// property names: `--override` for KafkaIQ, server.properties lines for Apache Kafka) and
/// waits until it accepts connections. `name` labels its temp directory.
pub fn start_selected(name: &str, settings: &[&str]) -> SelectedBroker {
    start_selected_logging(name, settings, "info")
}

/// [`start_selected`], with KafkaIQ logging at `rust_log` unless `RUST_LOG` is set.
pub fn start_selected_logging(name: &str, settings: &[&str], rust_log: &str) -> SelectedBroker {
    if let Ok(b) = std::env::var("KAFKA_BOOTSTRAP") {
        if !b.is_empty() {
            return SelectedBroker {
                bootstrap: b,
                kind: "external".into(),
                process: None,
                dir: None,
            };
        }
    }
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create broker temp dir");
    let port = free_port();
    let kind = std::env::var("BROKER_UNDER_TEST").unwrap_or_else(|_| "kafkaiq".into());
    let cmd = match kind.as_str() {
        "apache-kafka" => apache_kafka_command(&dir.join("kafka"), port, free_port(), settings),
        "kafkaiq" => {
            let mut c = kafkaiq_command(port, &dir.join("data"), settings);
            if std::env::var_os("RUST_LOG").is_none() {
                c.env("RUST_LOG", rust_log);
            }
            c
        }
        other => panic!("unknown BROKER_UNDER_TEST={other}"),
    };
    let mut process = BrokerProcess::spawn(&kind, cmd, &dir.join("broker.log"));
    process.await_listening(port);
    SelectedBroker {
        bootstrap: format!("127.0.0.1:{port}"),
        kind,
        process: Some(process),
        dir: Some(dir),
    }
}
