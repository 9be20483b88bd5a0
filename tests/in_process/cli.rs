//! The `kafkaiq` binary's command line: config errors stop startup naming the key (without a
//! panic), unknown keys warn, SIGTERM shuts down cleanly and in time.

use crate::common;

use std::process::Command;

use common::broker_process::{free_port, kafkaiq_command, BrokerProcess, PANIC_MARKER};

fn kafkaiq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kafkaiq"))
}

/// A refused configuration is an error message, not a crash.
fn assert_no_panic(stderr: &str) {
    assert!(!stderr.contains(PANIC_MARKER), "{stderr}");
}

#[test]
fn invalid_value_stops_startup_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = kafkaiq()
        .args(["--override", "num.partitions=lots"])
        .args(["--override", &format!("log.dirs={}", dir.path().display())])
        .args(["--override", "listeners=PLAINTEXT://127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("num.partitions"), "{stderr}");
    assert_no_panic(&stderr);
}

#[test]
fn config_file_is_read_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("server.properties");
    std::fs::write(&props, "num.partitions=3\nlog.segment.bytes=tiny\n").unwrap();
    let out = kafkaiq().arg("--config").arg(&props).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("log.segment.bytes"), "{stderr}");
    assert_no_panic(&stderr);
    // The flag overrides the file's bad value, so the file's other keys are what fails next.
    std::fs::write(&props, "num.partitions=oops\n").unwrap();
    let out = kafkaiq()
        .arg("--config")
        .arg(&props)
        .args([
            "--override",
            "num.partitions=4",
            "--override",
            "socket.request.max.bytes=-1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("socket.request.max.bytes"), "{stderr}");
    assert!(!stderr.contains("num.partitions"), "{stderr}");
    assert_no_panic(&stderr);
}

#[test]
fn unknown_key_warns_and_sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let data = dir.path().join("data");
    let mut cmd = kafkaiq_command(port, &data, &["no.such.setting=1"]);
    cmd.env("RUST_LOG", "info");
    let log = dir.path().join("broker.log");
    let mut broker = BrokerProcess::spawn("kafkaiq", cmd, &log);
    broker.await_listening(port);
    // SIGTERM: exit status 0 within the bound, no panic (BrokerProcess::stop checks all three).
    broker.stop().unwrap_or_else(|e| panic!("{e}"));
    let output = std::fs::read_to_string(&log).unwrap();
    assert!(output.contains("no.such.setting"), "{output}");
    assert!(output.contains("stopped cleanly"), "{output}");
    assert!(data.join(".kafka_cleanshutdown").exists());
    assert!(data.join("meta.properties").exists());
}

#[test]
fn kraft_settings_that_refuse_each_other_stop_startup_naming_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("server.properties");
    let base = format!(
        "process.roles=broker,controller\nnode.id=4\n\
controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094\n\
listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:19095\n\
controller.listener.names=CONTROLLER\nlog.dirs={}\n",
        dir.path().join("data").display()
    );
    std::fs::write(&props, &base).unwrap();
    let out = kafkaiq().arg("--config").arg(&props).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("controller.quorum.voters"), "{stderr}");
    assert!(stderr.contains("node id 4 must be included"), "{stderr}");
    // An inter-broker TLS listener without a key store stops startup naming the key.
    let out = kafkaiq()
        .arg("--config")
        .arg(&props)
        .args(["--override", "node.id=1"])
        .args([
            "--override",
            "listeners=SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:19092",
        ])
        .args([
            "--override",
            "listener.security.protocol.map=SSL:SSL,CONTROLLER:PLAINTEXT",
        ])
        .args(["--override", "inter.broker.listener.name=SSL"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ssl.keystore.location"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "nothing is written");
}

/// A command prints only its own output: not the broker's startup lines (the open-files
/// limit a node raises and logs).
#[test]
fn commands_print_only_their_own_output() {
    for args in [
        vec!["--help"],
        vec!["leadership", "--help"],
        vec!["local-cluster", "--help"],
    ] {
        let out = kafkaiq()
            .args(&args)
            .env("RUST_LOG", "info")
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains("RLIMIT_NOFILE"), "{args:?}: {all}");
        assert_no_panic(&all);
    }
}
