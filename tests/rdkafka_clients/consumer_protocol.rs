//! librdkafka with `group.protocol=consumer` (KIP-848): members join and leave a group whose
//! partitions the broker assigns; with manual commits every record is read exactly once and no
//! partition is owned by two members at once, by the members' own rebalance callbacks.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::common::broker_process::{start_selected, SelectedBroker};

const DEADLINE: Duration = Duration::from_secs(90);

#[derive(Default)]
struct Shared {
    owner: Mutex<HashMap<(String, i32), String>>,
    violations: Mutex<Vec<String>>,
    seen: Mutex<HashMap<String, usize>>,
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
            let _ = consumer.commit_consumer_state(CommitMode::Sync);
            let mut owner = self.shared.owner.lock().unwrap();
            for e in tpl.elements() {
                let key = (e.topic().to_string(), e.partition());
                if owner.get(&key) == Some(&self.name) {
                    owner.remove(&key);
                }
            }
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let mut owner = self.shared.owner.lock().unwrap();
            for e in tpl.elements() {
                let key = (e.topic().to_string(), e.partition());
                if let Some(other) = owner.get(&key) {
                    if *other != self.name {
                        self.shared.violations.lock().unwrap().push(format!(
                            "{key:?} assigned to {} while {other} owns it",
                            self.name
                        ));
                    }
                }
                owner.insert(key, self.name.clone());
            }
        }
    }
}

struct Running {
    assigned: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Running {
    fn start(
        bootstrap: &str,
        group: &str,
        name: &str,
        topic: &str,
        shared: &Arc<Shared>,
    ) -> Running {
        let consumer: BaseConsumer<Member> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("group.protocol", "consumer")
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
        let thread = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let mut read = false;
                if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                    let m = m.expect("poll");
                    let v = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
                    *sh.seen.lock().unwrap().entry(v).or_default() += 1;
                    read = true;
                }
                if read {
                    consumer.commit_consumer_state(CommitMode::Sync).ok();
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
        });
        Running {
            assigned,
            stop,
            thread: Some(thread),
        }
    }

    fn size(&self) -> usize {
        self.assigned.load(Ordering::Relaxed)
    }

    fn close(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("member thread");
        }
    }
}

fn await_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn produce(bootstrap: &str, topic: &str, values: &[String]) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for v in values {
        loop {
            match p.send(BaseRecord::<str, str>::to(topic).key(v).payload(v)) {
                Ok(()) => break,
                Err(_) => {
                    p.poll(Duration::from_millis(10));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

#[test]
fn librdkafka_members_share_partitions_with_every_record_read_once() {
    let selected: SelectedBroker = start_selected(
        "rdkafka-consumer-protocol",
        &[
            "num.partitions=6",
            "group.consumer.min.heartbeat.interval.ms=500",
            "group.consumer.heartbeat.interval.ms=500",
            "group.consumer.min.session.timeout.ms=6000",
            "group.consumer.session.timeout.ms=6000",
        ],
    );
    let bootstrap = selected.bootstrap.clone();
    let topic = "rdk-kip848";
    let shared = Arc::new(Shared::default());
    let mut expected: BTreeSet<String> = BTreeSet::new();
    let mut batch = |round: &str| -> Vec<String> {
        let v: Vec<String> = (0..150).map(|i| format!("{round}-{i}")).collect();
        expected.extend(v.iter().cloned());
        v
    };
    // The topic is created by the first produce (num.partitions=6).
    produce(&bootstrap, topic, &batch("r0"));
    let a = Running::start(&bootstrap, "rdk-g", "a", topic, &shared);
    await_until("a owns 6", || a.size() == 6);
    let b = Running::start(&bootstrap, "rdk-g", "b", topic, &shared);
    await_until("a and b own 3 each", || a.size() == 3 && b.size() == 3);
    produce(&bootstrap, topic, &batch("r1"));
    b.close();
    await_until("a owns 6 again", || a.size() == 6);
    produce(&bootstrap, topic, &batch("r2"));
    await_until("every record read", || {
        let seen = shared.seen.lock().unwrap();
        expected.iter().all(|v| seen.contains_key(v))
    });
    a.close();
    let violations = shared.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "ownership violations: {violations:?}"
    );
    let seen = shared.seen.lock().unwrap();
    let problems: Vec<String> = expected
        .iter()
        .filter(|v| seen.get(*v) != Some(&1))
        .map(|v| format!("{v} read {} times", seen.get(v).copied().unwrap_or(0)))
        .chain(
            seen.keys()
                .filter(|v| !expected.contains(*v))
                .map(|v| format!("{v} never produced")),
        )
        .collect();
    assert!(
        problems.is_empty(),
        "{} problems: {:?}",
        problems.len(),
        &problems[..problems.len().min(10)]
    );
    drop(selected);
}
