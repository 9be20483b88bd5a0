//! Partition count under a low descriptor limit: the broker runs with `RLIMIT_NOFILE` soft and
//! hard at 1,024 (set in the child before exec, so the startup raise cannot lift it) and holds
//! 600 single-segment partitions with data. With three descriptors per segment (`.log`, `.index`,
//! `.timeindex`) that needs 1,800 and the logs beyond about 340 fail to open; with index maps
//! that hold no descriptor it needs about 600 plus connections.

mod common;

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

const LIMIT: u64 = 1_024;
const PARTITIONS: i32 = 600;

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn many_more_partitions_than_a_third_of_the_descriptor_limit_take_and_return_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut cmd = kafkaiq_command(port, &dir.path().join("data"), &["num.partitions=1"]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT as libc::rlim_t,
                rlim_max: LIMIT as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut broker = BrokerProcess::spawn("kafkaiq", cmd, &dir.path().join("broker.log"));
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
    let topic = NewTopic::new("wide", PARTITIONS, TopicReplication::Fixed(1));
    let res = rt
        .block_on(admin.create_topics(
            [&topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(60))),
        ))
        .expect("CreateTopics");
    assert_eq!(res, vec![Ok("wide".to_string())]);

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("message.timeout.ms", "60000")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for p in 0..PARTITIONS {
        let value = format!("record-{p}");
        producer
            .send(
                BaseRecord::<str, str>::to("wide")
                    .partition(p)
                    .payload(&value),
            )
            .expect("enqueue");
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(90))
        .expect("every partition took its record");

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "fd-limits")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset("wide", p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut seen = vec![false; PARTITIONS as usize];
    let deadline = Instant::now() + Duration::from_secs(90);
    while seen.iter().any(|s| !s) {
        assert!(
            Instant::now() < deadline,
            "partitions never read back: {:?}; broker log tail:\n{}",
            seen.iter()
                .enumerate()
                .filter(|(_, s)| !**s)
                .map(|(i, _)| i)
                .take(20)
                .collect::<Vec<_>>(),
            broker.log_tail(20)
        );
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("fetch");
            let p = m.partition();
            assert_eq!(m.payload(), Some(format!("record-{p}").as_bytes()));
            seen[p as usize] = true;
        }
    }
    let used = descriptors(broker.pid());
    assert!(
        used < LIMIT as usize,
        "broker holds {used} descriptors under a limit of {LIMIT}"
    );
    assert!(
        !broker.log_text().contains("Too many open files"),
        "broker ran out of descriptors:\n{}",
        broker.log_tail(20)
    );
    drop(consumer);
    drop(producer);
    drop(admin);
    broker.stop().expect("clean stop");
}
