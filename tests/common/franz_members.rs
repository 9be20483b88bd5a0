//! Consumer-group members run by franz-go: each one a process of
//! `integration/programs/group-member-go` (built here with `go build` once per test binary),
//! whose event lines (assigned / revoked / lost partitions, records processed, commits and
//! their results) feed the same bookkeeping and checker as the librdkafka members
//! ([`super::group_members`]).
//!
//! A member stopped with SIGTERM leaves the group and must exit 0; a member killed with SIGKILL
//! owns nothing once it is dead, and what it read without a commit is read again by another.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::group_members::Shared;

/// How long a member gets to leave the group and exit after SIGTERM.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// The member program, built into the target directory (`target/tmp`) on first use.
pub fn member_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/integration/programs/group-member-go"
            ));
            // One binary per test binary: two of them building at once do not overwrite the
            // program the other runs.
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(concat!("group-member-go-", env!("CARGO_CRATE_NAME")));
            let version = Command::new("go").arg("version").output();
            assert!(
                version.as_ref().is_ok_and(|o| o.status.success()),
                "go is required to build {} (franz-go group members): {version:?}",
                source.display()
            );
            let build = Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .arg(".")
                .current_dir(&source)
                .env("GOFLAGS", "-mod=mod")
                .env("GOTOOLCHAIN", "local")
                .output()
                .expect("run go build");
            assert!(
                build.status.success(),
                "go build of {} failed:\n{}",
                source.display(),
                String::from_utf8_lossy(&build.stderr)
            );
            out
        })
        .clone()
}

/// What a member subscribes to.
#[derive(Clone, Copy)]
pub enum Subscription<'a> {
    Topics(&'a [&'a str]),
    /// Regular expressions, matched by franz-go (classic) or the broker (consumer protocol).
    Regex(&'a [&'a str]),
}

#[derive(Default)]
struct State {
    owned: BTreeSet<(String, i32)>,
    /// From the `protocol` lines: the group protocols the member spoke.
    protocols: BTreeSet<String>,
    closed: bool,
}

pub struct GoMember {
    pub name: String,
    /// The protocol asked for: the only one the member may speak.
    protocol: String,
    child: Option<Child>,
    readers: Vec<thread::JoinHandle<()>>,
    state: Arc<Mutex<State>>,
    shared: Arc<Shared>,
}

impl GoMember {
    /// A member `name` of `group` speaking `protocol` (`consumer` for KIP-848, `classic`).
    pub fn start(
        bootstrap: &str,
        group: &str,
        name: &str,
        subscription: Subscription<'_>,
        protocol: &str,
        shared: &Arc<Shared>,
    ) -> GoMember {
        Self::start_processing(bootstrap, group, name, subscription, protocol, shared, 0)
    }

    /// [`GoMember::start`], the member taking `process_ms` to process each poll's records
    /// before it commits them.
    pub fn start_processing(
        bootstrap: &str,
        group: &str,
        name: &str,
        subscription: Subscription<'_>,
        protocol: &str,
        shared: &Arc<Shared>,
        process_ms: u64,
    ) -> GoMember {
        let mut cmd = Command::new(member_binary());
        cmd.args(["-brokers", bootstrap, "-group", group, "-name", name])
            .args(["-protocol", protocol])
            .args(["-process-ms", &process_ms.to_string()]);
        match subscription {
            Subscription::Topics(t) => cmd.args(t),
            Subscription::Regex(r) => cmd.arg("-regex").args(r),
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the franz-go member");
        let state = Arc::new(Mutex::new(State::default()));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let events = {
            let (state, shared, me) = (state.clone(), shared.clone(), name.to_string());
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    event(&me, &line, &state, &shared);
                }
            })
        };
        let log = {
            let me = name.to_string();
            thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("franz-go {me}: {line}");
                }
            })
        };
        GoMember {
            name: name.to_string(),
            protocol: protocol.to_string(),
            child: Some(child),
            readers: vec![events, log],
            state,
            shared: shared.clone(),
        }
    }

    /// Partitions the member owns (by its own callbacks).
    pub fn size(&self) -> usize {
        self.state.lock().unwrap().owned.len()
    }

    pub fn owned(&self) -> BTreeSet<(String, i32)> {
        self.state.lock().unwrap().owned.clone()
    }

    /// The group protocols the member has spoken so far (sent a request of).
    pub fn protocols(&self) -> BTreeSet<String> {
        self.state.lock().unwrap().protocols.clone()
    }

    /// The member spoke the protocol it was asked for and no other (franz-go falls back to the
    /// classic protocol when the broker refuses the consumer protocol).
    fn check_protocol(&self) {
        let spoken = self.protocols();
        assert!(
            spoken.len() == 1 && spoken.contains(&self.protocol),
            "franz-go member {} asked for the {} protocol and spoke {spoken:?}",
            self.name,
            self.protocol
        );
    }

    /// SIGTERM: the member leaves the group (giving its partitions back) and exits 0.
    pub fn close(mut self) {
        let mut child = self.child.take().expect("member runs");
        signal(&child, libc::SIGTERM);
        let deadline = Instant::now() + CLOSE_TIMEOUT;
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for the member") {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "franz-go member {} did not exit within {CLOSE_TIMEOUT:?} of SIGTERM",
                    self.name
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        self.drain();
        self.check_protocol();
        let state = self.state.lock().unwrap();
        assert!(
            status.success() && state.closed,
            "franz-go member {} did not leave cleanly after SIGTERM: {status}",
            self.name
        );
        assert!(
            state.owned.is_empty(),
            "franz-go member {} left owning {:?}",
            self.name,
            state.owned
        );
    }

    /// SIGKILL: the member dies owning what it owned; once it is dead it owns nothing, and
    /// its reads no commit covered are read again by another member.
    pub fn crash(mut self) {
        let mut child = self.child.take().expect("member runs");
        signal(&child, libc::SIGKILL);
        child.wait().expect("reap the member");
        self.drain();
        self.check_protocol();
        let owned = std::mem::take(&mut self.state.lock().unwrap().owned);
        for (topic, partition) in owned {
            self.shared.released(&self.name, &topic, partition);
        }
    }

    /// Reads every line the exited member wrote; settles reads no commit covered.
    fn drain(&mut self) {
        for r in self.readers.drain(..) {
            r.join().expect("member output reader");
        }
        self.shared.settle(&self.name, false);
    }
}

impl Drop for GoMember {
    /// A member a failed test left running must not outlive it.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on the pid of our own child, not yet reaped.
    let rc = unsafe { libc::kill(child.id() as i32, signal) };
    assert_eq!(rc, 0, "signal {signal} to the member");
}

/// One event line of member `me` (see the program's documentation).
fn event(me: &str, line: &str, state: &Mutex<State>, shared: &Shared) {
    let mut words = line.splitn(5, ' ');
    let kind = words.next().unwrap_or_default();
    let mut next = || words.next().unwrap_or_default();
    match kind {
        "record" => {
            let (_topic, _partition, _offset) = (next(), next(), next());
            shared.read(me, next().to_string());
        }
        "assigned" | "revoked" | "lost" => {
            eprintln!("franz-go {me}: {line}");
            let topic = next().to_string();
            let partition: i32 = next().parse().expect("partition");
            let mut state = state.lock().unwrap();
            if kind == "assigned" {
                shared.assigned(me, &topic, partition);
                state.owned.insert((topic, partition));
            } else {
                shared.released(me, &topic, partition);
                state.owned.remove(&(topic, partition));
            }
        }
        "commit" => match next() {
            "ok" => shared.settle(me, true),
            _ => {
                eprintln!("franz-go {me}: {line}");
                shared.settle(me, false)
            }
        },
        "protocol" => {
            eprintln!("franz-go {me}: {line}");
            state.lock().unwrap().protocols.insert(next().to_string());
        }
        "closed" => state.lock().unwrap().closed = true,
        _ => panic!("franz-go member {me}: unexpected line {line:?}"),
    }
}
