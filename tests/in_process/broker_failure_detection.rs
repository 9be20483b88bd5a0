//! The detection that makes a misbehaving broker fail the test that ran it, tested on brokers
//! that misbehave on purpose: a checker that has gone blind would let every other test pass
//! over a broker that panics, exits badly or hangs.
//!
//! - In process (`common::start_broker`): a panic in a task on the broker's runtime, on a
//!   multi-thread runtime and on a current-thread one (where tasks run on the test's thread),
//!   is reported; a broker whose tasks did not panic is not.
//! - As a process (`common::broker_process`): stand-in brokers (shell scripts) that print a
//!   panic line, exit non-zero after SIGTERM, or ignore SIGTERM are each reported by
//!   `BrokerProcess::stop`; a clean exit is not, and Apache Kafka's 143 after SIGTERM is clean.
//!
//! The in-process test runs alone, in a child process of this test binary: the panic it injects
//! on the multi-thread runtime lands on a `tokio-runtime-worker` thread, which every in-process
//! broker of the binary counts as possibly its own (`common::panics::since`), so it would fail
//! the in-process tests running beside it.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::broker_process::BrokerProcess;

async fn panic_in_a_task_is_reported(dir: &std::path::Path) {
    let mut broker = common::start_broker(dir, &[]).await;
    broker.check_panics().expect("no panic yet");
    let task = tokio::spawn(async { panic!("injected task panic") });
    assert!(task.await.unwrap_err().is_panic());
    let reported = broker
        .check_panics()
        .expect_err("the task's panic is reported");
    assert!(reported.contains("injected task panic"), "{reported}");
    // Reported once: the shutdown check after it passes.
    broker.shutdown().await.unwrap();
}

/// Set in the child process that runs `in_process_broker_task_panics_are_reported` alone.
const ALONE: &str = "KAFKAIQ_BROKER_FAILURE_DETECTION_ALONE";

#[test]
fn in_process_broker_task_panics_are_reported() {
    if std::env::var_os(ALONE).is_none() {
        run_alone("in_process_broker_task_panics_are_reported");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(panic_in_a_task_is_reported(&dir.path().join("multi")));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(panic_in_a_task_is_reported(&dir.path().join("current")));
}

/// Runs the test `name` of this module in a child process of this test binary, with no other
/// test beside it, and fails unless that one test ran and passed.
fn run_alone(name: &str) {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, m)| m);
    let test = format!("{module}::{name}");
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, "1")
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{test} in a child process: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// A stand-in broker: a bash script that reports `ready`, then runs `on_term` on SIGTERM.
fn stand_in(kind: &str, dir: &std::path::Path, before: &str, on_term: &str) -> BrokerProcess {
    let script =
        format!("{before}\ntrap '{on_term}' TERM\necho ready\nwhile :; do sleep 0.05; done");
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script);
    let log = dir.join(format!("{kind}-{}.log", rand_suffix()));
    let p = BrokerProcess::spawn(kind, cmd, &log).with_shutdown_timeout(Duration::from_secs(2));
    // Signals sent before bash installed its trap would kill it outright.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !p.log_text().contains("ready") {
        assert!(
            std::time::Instant::now() < deadline,
            "stand-in never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn broker_process_stop_reports_panics_bad_exits_and_hangs() {
    let dir = tempfile::tempdir().unwrap();

    stand_in("kafkaiq", dir.path(), "", "exit 0")
        .stop()
        .expect("a clean exit is clean");
    stand_in("apache-kafka", dir.path(), "", "exit 143")
        .stop()
        .expect("the JVM's 143 after SIGTERM is clean for Apache Kafka");

    let panic_line = "echo \"thread 'kafkaiq' panicked at src/server/connection.rs:1:1:\"";
    let e = stand_in("kafkaiq", dir.path(), panic_line, "exit 0")
        .stop()
        .expect_err("a panic line is reported");
    assert!(e.contains("panicked"), "{e}");

    let e = stand_in("kafkaiq", dir.path(), "", "exit 3")
        .stop()
        .expect_err("a non-zero exit is reported");
    assert!(e.contains("exited with exit status: 3"), "{e}");
    let e = stand_in("kafkaiq", dir.path(), "", "exit 143")
        .stop()
        .expect_err("143 is not clean for KafkaIQ, which handles SIGTERM");
    assert!(e.contains("exited with"), "{e}");

    let e = stand_in("kafkaiq", dir.path(), "", "")
        .stop()
        .expect_err("ignoring SIGTERM is reported");
    assert!(e.contains("did not stop within 2s of SIGTERM"), "{e}");

    let mut p = stand_in("kafkaiq", dir.path(), panic_line, "exit 0");
    let e = p.kill().expect_err("a panic before a SIGKILL is reported");
    assert!(e.contains("panicked"), "{e}");
}
