//! The `kafkaiq` binary's command line: config errors stop startup naming the key, unknown keys
//! warn, SIGTERM shuts down cleanly.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kafkaiq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kafkaiq"))
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
}

#[test]
fn config_file_is_read_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let props = dir.path().join("server.properties");
    std::fs::write(&props, "num.partitions=3\nlog.segment.bytes=tiny\n").unwrap();
    let out = kafkaiq().arg("--config").arg(&props).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("log.segment.bytes"));
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
}

#[test]
fn unknown_key_warns_and_sigterm_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = kafkaiq()
        .args([
            "--override",
            &format!("listeners=PLAINTEXT://127.0.0.1:{port}"),
        ])
        .args(["--override", &format!("log.dirs={}", dir.path().display())])
        .args(["--override", "no.such.setting=1"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "broker did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(exit.success(), "{stderr}");
    assert!(stderr.contains("no.such.setting"), "{stderr}");
    assert!(stderr.contains("stopped cleanly"), "{stderr}");
    assert!(dir.path().join(".kafka_cleanshutdown").exists());
    assert!(dir.path().join("meta.properties").exists());
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
    // A TLS listener is refused by name: there is no TLS.
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
    assert!(stderr.contains("listeners"), "{stderr}");
    assert!(stderr.contains("only PLAINTEXT"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "nothing is written");
}
