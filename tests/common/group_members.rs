//! Consumers of a KIP-848 group (`group.protocol=consumer`) run by librdkafka, each polling
//! in its own thread and committing what it read (and, on revocation, before its partitions go
//! elsewhere), with what every member read and who owns each partition by the members' own
//! rebalance callbacks: an assignment of a partition another member still owns is recorded as a
//! violation. The bookkeeping ([`Shared`]) and the checker serve franz-go's members too
//! ([`super::franz_members`]), fed from their event lines.
//!
//! A record counts as processed when a commit that covers it succeeds. With the classic protocol
//! a commit can fail in a rebalance (REBALANCE_IN_PROGRESS while the group completes it, or a
//! coordinator that moved), and the next owner then reads the record again from the last
//! committed offset: that second read is the protocol's at-least-once, not an error. What must
//! never happen is a record processed twice (two successful commits covering it: two owners at
//! once, or committed offsets going back) or a record never read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;

const DEADLINE: Duration = Duration::from_secs(90);

#[derive(Default)]
pub struct Shared {
    pub owner: Mutex<HashMap<(String, i32), String>>,
    pub violations: Mutex<Vec<String>>,
    /// Every read of every value (for progress).
    pub seen: Mutex<HashMap<String, usize>>,
    /// Reads a successful commit covered, and reads whose commit failed.
    pub committed: Mutex<HashMap<String, usize>>,
    pub uncommitted: Mutex<HashMap<String, usize>>,
    /// Values a member read and has not committed yet, by member.
    pub pending: Mutex<HashMap<String, Vec<String>>>,
}

impl Shared {
    /// `member` was given `topic`-`partition`: a violation if another member still owns it.
    pub fn assigned(&self, member: &str, topic: &str, partition: i32) {
        let key = (topic.to_string(), partition);
        let mut owner = self.owner.lock().unwrap();
        if let Some(other) = owner.get(&key) {
            if other != member {
                self.violations.lock().unwrap().push(format!(
                    "{key:?} assigned to {member} while {other} owns it"
                ));
            }
        }
        owner.insert(key, member.to_string());
    }

    /// `member` gave `topic`-`partition` back (revoked or lost), or is gone.
    pub fn released(&self, member: &str, topic: &str, partition: i32) {
        let key = (topic.to_string(), partition);
        let mut owner = self.owner.lock().unwrap();
        if owner.get(&key).is_some_and(|o| o == member) {
            owner.remove(&key);
        }
    }

    /// `member` read (processed) `value`; a commit settles it.
    pub fn read(&self, member: &str, value: String) {
        *self.seen.lock().unwrap().entry(value.clone()).or_default() += 1;
        self.pending
            .lock()
            .unwrap()
            .entry(member.to_string())
            .or_default()
            .push(value);
    }

    /// `member`'s commit succeeded (`ok`) or failed: its pending reads are settled.
    pub fn settle(&self, member: &str, ok: bool) {
        let pending = self
            .pending
            .lock()
            .unwrap()
            .remove(member)
            .unwrap_or_default();
        let mut into = if ok {
            self.committed.lock().unwrap()
        } else {
            self.uncommitted.lock().unwrap()
        };
        for v in pending {
            *into.entry(v).or_default() += 1;
        }
    }

    fn commit(&self, member: &str, consumer: &BaseConsumer<Member>) {
        let nothing = self
            .pending
            .lock()
            .unwrap()
            .get(member)
            .is_none_or(Vec::is_empty);
        if nothing {
            return;
        }
        match consumer.commit_consumer_state(CommitMode::Sync) {
            Ok(()) => self.settle(member, true),
            Err(e) => {
                eprintln!("member {member}: commit failed: {e}");
                self.settle(member, false)
            }
        }
    }
}

struct Member {
    name: String,
    shared: Arc<Shared>,
}

impl ClientContext for Member {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        eprintln!("librdkafka {} {level:?} {fac}: {log_message}", self.name);
    }
}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            // What was read is committed before the partitions go elsewhere.
            self.shared.commit(&self.name, consumer);
            for e in tpl.elements() {
                self.shared.released(&self.name, e.topic(), e.partition());
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            for e in tpl.elements() {
                self.shared.assigned(&self.name, e.topic(), e.partition());
            }
        }
    }
}

pub struct Running {
    assigned: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Running {
    pub fn start(
        bootstrap: &str,
        group: &str,
        name: &str,
        topic: &str,
        shared: &Arc<Shared>,
    ) -> Running {
        Self::start_with(bootstrap, group, name, topic, shared, "consumer")
    }

    /// A member of `protocol`: `consumer` (KIP-848) or `classic`.
    pub fn start_with(
        bootstrap: &str,
        group: &str,
        name: &str,
        topic: &str,
        shared: &Arc<Shared>,
        protocol: &str,
    ) -> Running {
        let mut config = ClientConfig::new();
        if protocol == "classic" {
            // Heartbeats often enough that a rebalance is noticed in well under a second.
            config.set("heartbeat.interval.ms", "500");
            config.set("session.timeout.ms", "10000");
        }
        let consumer: BaseConsumer<Member> = config
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("group.protocol", protocol)
            .set("client.id", name)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create_with_context(Member {
                name: name.to_string(),
                shared: shared.clone(),
            })
            .expect("create consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        let assigned = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s, sh) = (assigned.clone(), stop.clone(), shared.clone());
        let me = name.to_string();
        let thread = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let mut read = false;
                match consumer.poll(Duration::from_millis(100)) {
                    // Transient while nodes restart (transport failures, coordinator moves):
                    // librdkafka carries on by itself.
                    Some(Err(e)) => eprintln!("member poll: {e}"),
                    Some(Ok(m)) => {
                        let v =
                            String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
                        sh.read(&me, v);
                        read = true;
                    }
                    None => {}
                }
                if read {
                    sh.commit(&me, &consumer);
                }
                a.store(
                    consumer.assignment().map_or(0, |t| t.count()),
                    Ordering::Relaxed,
                );
            }
            // Leaves the group: close() revokes (committing) and sends the leave heartbeat.
            consumer.unsubscribe();
            let deadline = Instant::now() + Duration::from_secs(10);
            while consumer.assignment().map_or(0, |t| t.count()) > 0 && Instant::now() < deadline {
                let _ = consumer.poll(Duration::from_millis(100));
            }
            drop(consumer);
            // Reads no commit covered: another member reads them again.
            sh.settle(&me, false);
        });
        Running {
            assigned,
            stop,
            thread: Some(thread),
        }
    }

    pub fn size(&self) -> usize {
        self.assigned.load(Ordering::Relaxed)
    }

    pub fn close(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("member thread");
        }
    }
}

pub fn await_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Every value of `expected` processed exactly once (covered by one successful commit; a read
/// whose commit failed and that another member read again is the protocol's at-least-once) and
/// read at least once, and nothing else read; or the problems.
pub fn exactly_once_problems(
    shared: &Shared,
    expected: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let seen = shared.seen.lock().unwrap();
    let committed = shared.committed.lock().unwrap();
    let uncommitted = shared.uncommitted.lock().unwrap();
    let reread: usize = uncommitted.values().sum();
    if reread > 0 {
        eprintln!("{reread} reads were not committed (a commit failed) and were read again");
    }
    expected
        .iter()
        .filter_map(|v| {
            let c = committed.get(v).copied().unwrap_or(0);
            let u = uncommitted.get(v).copied().unwrap_or(0);
            if c > 1 {
                Some(format!("{v} processed {c} times (committed by {c} reads)"))
            } else if c + u == 0 {
                Some(format!(
                    "{v} read {} times, never committed",
                    seen.get(v).copied().unwrap_or(0)
                ))
            } else {
                None
            }
        })
        .chain(
            seen.keys()
                .filter(|v| !expected.contains(*v))
                .map(|v| format!("{v} never produced")),
        )
        .collect()
}

/// The group's verdict: no partition was owned by two members at once, and every value of
/// `expected` was read exactly once ([`exactly_once_problems`]).
pub fn assert_owned_once_and_read_once(
    shared: &Shared,
    expected: &std::collections::BTreeSet<String>,
) {
    let violations = shared.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "ownership violations: {violations:?}"
    );
    let problems = exactly_once_problems(shared, expected);
    assert!(
        problems.is_empty(),
        "{} of {} records: {:?}",
        problems.len(),
        expected.len(),
        &problems[..problems.len().min(10)]
    );
}

/// Values of `expected` that no successful commit covered. Where no broker fails, a commit that
/// answers an error was not applied, so the next owner reads the record again and commits it:
/// every value is then covered by exactly one successful commit (with
/// [`exactly_once_problems`] empty), and one covered by none means members stopped committing.
/// A coordinator killed between applying a commit and answering it makes this legitimate, so it
/// is not checked through node kills.
pub fn never_committed(
    shared: &Shared,
    expected: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let committed = shared.committed.lock().unwrap();
    expected
        .iter()
        .filter(|v| !committed.contains_key(*v))
        .cloned()
        .collect()
}
