//! Partition count under a low descriptor limit: the broker runs with `RLIMIT_NOFILE` soft and
//! hard set in the child before exec (so the startup raise cannot lift it) and holds more
//! single-segment partitions with data than the limit has descriptors. Open `.log` files are
//! bounded by a pool sized from the limit minus the connection reserve (least recently used
//! ones close and reopen by path), index maps are mapped only when used, so the broker keeps
//! fewer descriptors than its limit, reads every partition back, and still accepts a new
//! connection once every partition has been written and read.
//!
//! Short mode (CI): 2,000 partitions under a limit of 512. Full mode (`KAFKAIQ_FD_FULL=1`,
//! outside CI): 50,000 partitions (5 topics of 10,000) under 20,000, read back by 10 consumers,
//! with a restart; the
//! figures (descriptors, maps, RSS, creation and restart times) are printed.

use crate::common;

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use common::broker_process::{free_port, kafkaiq_command, BrokerProcess};

struct Mode {
    limit: u64,
    topics: usize,
    partitions_per_topic: i32,
    /// Bound on each wait (creation, produce, read-back, restart).
    wait: Duration,
    restart: bool,
    /// Consumers reading back, each assigned an equal share of the partitions: one librdkafka
    /// consumer keeps a core busy at tens of thousands of partitions, so the broker would not
    /// be what is measured.
    readers: usize,
}

fn mode() -> Mode {
    if std::env::var_os("KAFKAIQ_FD_FULL").is_some() {
        Mode {
            limit: 20_000,
            topics: 5,
            partitions_per_topic: 10_000,
            wait: Duration::from_secs(1_800),
            restart: true,
            readers: 10,
        }
    } else {
        Mode {
            limit: 512,
            topics: 1,
            partitions_per_topic: 2_000,
            wait: Duration::from_secs(120),
            restart: false,
            readers: 2,
        }
    }
}

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn maps(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.lines().count())
        .unwrap_or(0)
}

/// (VmRSS, VmHWM) in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn spawn(port: u16, dir: &std::path::Path, limit: u64) -> BrokerProcess {
    let mut cmd = kafkaiq_command(port, &dir.join("data"), &["num.partitions=1"]);
    // Per-partition "loaded log" lines would dominate a 50,000-partition restart.
    cmd.env("RUST_LOG", "warn,kafkaiq=info,kafkaiq_storage=warn");
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // A clean stop closes, trims and fsyncs every log: thousands of fsyncs.
    BrokerProcess::spawn("kafkaiq", cmd, &dir.join("broker.log"))
        .with_shutdown_timeout(Duration::from_secs(600))
}

fn topic_name(t: usize) -> String {
    format!("wide{t}")
}

/// Reads the first record of every partition back, with `m.readers` consumers in parallel
/// threads; panics with the missing ones after `wait`. Each consumer is assigned offset 0 of its
/// partitions (every log starts there), so no ListOffsets is needed first.
fn read_back(bootstrap: &str, m: &Mode, broker: &BrokerProcess, group: &str) {
    let per = m.partitions_per_topic as usize;
    let total = m.topics * per;
    let deadline = Instant::now() + m.wait;
    let results: Vec<(Vec<usize>, Option<String>)> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..m.readers)
            .map(|r| {
                let share: Vec<usize> = (r..total).step_by(m.readers).collect();
                scope.spawn(move || {
                    read_share(bootstrap, &format!("{group}-{r}"), &share, per, deadline)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect()
    });
    let errors: Vec<&String> = results.iter().filter_map(|(_, e)| e.as_ref()).collect();
    let missing: Vec<usize> = results
        .iter()
        .flat_map(|(m, _)| m.iter().copied())
        .collect();
    assert!(
        missing.is_empty(),
        "{} partitions never read back, e.g. {:?}; last client errors {errors:?}; broker log \
         tail:\n{}",
        missing.len(),
        missing.iter().take(20).collect::<Vec<_>>(),
        broker.log_tail(20)
    );
}

/// One reader: partitions `share` (indexes `topic * per + partition`) from offset 0 until each
/// gave its record or `deadline` passed; returns the ones never read and the last error the
/// client reported (librdkafka retries by itself, e.g. while the broker restarts).
fn read_share(
    bootstrap: &str,
    group: &str,
    share: &[usize],
    per: usize,
    deadline: Instant,
) -> (Vec<usize>, Option<String>) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for &i in share {
        tpl.add_partition_offset(&topic_name(i / per), (i % per) as i32, Offset::Offset(0))
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut left: std::collections::HashSet<usize> = share.iter().copied().collect();
    let mut last_error = None;
    while !left.is_empty() && Instant::now() < deadline {
        if let Some(msg) = consumer.poll(Duration::from_millis(200)) {
            let msg = match msg {
                Ok(msg) => msg,
                Err(e) => {
                    last_error = Some(e.to_string());
                    continue;
                }
            };
            let t: usize = msg.topic()["wide".len()..].parse().unwrap();
            let p = msg.partition();
            assert_eq!(msg.payload(), Some(format!("record-{t}-{p}").as_bytes()));
            left.remove(&(t * per + p as usize));
        }
    }
    let mut left: Vec<usize> = left.into_iter().collect();
    left.sort_unstable();
    (left, last_error)
}

/// A new client connection is accepted and answered (Metadata) at the broker's current fill.
fn new_connection_is_served(bootstrap: &str) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("client");
    let md = consumer
        .fetch_metadata(Some("wide0"), Duration::from_secs(30))
        .expect("a new connection gets a Metadata answer");
    assert_eq!(md.topics().len(), 1);
}

#[test]
fn more_partitions_than_descriptors_take_and_return_data_and_connections_are_still_accepted() {
    let m = mode();
    let total = m.topics * m.partitions_per_topic as usize;
    assert!(
        total as u64 > m.limit,
        "more partitions than descriptors, at one per partition"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut broker = spawn(port, dir.path(), m.limit);
    broker.await_listening(port);
    let bootstrap = format!("127.0.0.1:{port}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("admin");
    let created = Instant::now();
    for t in 0..m.topics {
        let name = topic_name(t);
        let topic = NewTopic::new(&name, m.partitions_per_topic, TopicReplication::Fixed(1));
        let res = rt
            .block_on(
                admin.create_topics(
                    [&topic],
                    &AdminOptions::new()
                        .request_timeout(Some(m.wait))
                        .operation_timeout(Some(m.wait)),
                ),
            )
            .expect("CreateTopics");
        assert_eq!(res, vec![Ok(name.clone())]);
    }
    let creation = created.elapsed();

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("message.timeout.ms", m.wait.as_millis().to_string())
        .set("queue.buffering.max.messages", "1000000")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let produced = Instant::now();
    for t in 0..m.topics {
        let name = topic_name(t);
        for p in 0..m.partitions_per_topic {
            let value = format!("record-{t}-{p}");
            producer
                .send(
                    BaseRecord::<str, str>::to(&name)
                        .partition(p)
                        .payload(&value),
                )
                .expect("enqueue");
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(m.wait)
        .expect("every partition took its record");
    let produce = produced.elapsed();

    let read = Instant::now();
    read_back(&bootstrap, &m, &broker, "fd-limits");
    let read = read.elapsed();
    let used = descriptors(broker.pid());
    new_connection_is_served(&bootstrap);
    let (rss, hwm) = rss_kib(broker.pid());
    let mapped = maps(broker.pid());
    println!(
        "fd_limits: {total} partitions, RLIMIT_NOFILE {}: created in {:.1} s, produced in {:.1} s, \
         read back in {:.1} s; {used} descriptors, {mapped} maps, RSS {} MiB (peak {} MiB)",
        m.limit,
        creation.as_secs_f64(),
        produce.as_secs_f64(),
        read.as_secs_f64(),
        rss / 1024,
        hwm / 1024
    );
    assert!(
        used < m.limit as usize,
        "broker holds {used} descriptors under a limit of {}",
        m.limit
    );
    assert!(
        !broker.log_text().contains("Too many open files"),
        "broker ran out of descriptors:\n{}",
        broker.log_tail(20)
    );
    drop(producer);
    drop(admin);

    if m.restart {
        let stopped = Instant::now();
        broker.stop().expect("clean stop");
        let stop = stopped.elapsed();
        let restarted = Instant::now();
        broker = spawn(port, dir.path(), m.limit);
        broker.await_listening(port);
        let listening = restarted.elapsed();
        read_back(&bootstrap, &m, &broker, "fd-limits-after-restart");
        let readable = restarted.elapsed();
        let (rss, hwm) = rss_kib(broker.pid());
        println!(
            "fd_limits: clean stop in {:.1} s; restart: listening after {:.1} s, every partition \
             read back after {:.1} s; {} descriptors, {} maps, RSS {} MiB (peak {} MiB)",
            stop.as_secs_f64(),
            listening.as_secs_f64(),
            readable.as_secs_f64(),
            descriptors(broker.pid()),
            maps(broker.pid()),
            rss / 1024,
            hwm / 1024
        );
        assert!(descriptors(broker.pid()) < m.limit as usize);
    }
    broker.stop().expect("clean stop");
}
