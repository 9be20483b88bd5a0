//! The librdkafka workloads (the `rdkafka` crate, librdkafka 2.12): idempotent acks=all
//! producers writing unique values round-robin over the partitions, a consumer with a manual
//! assignment of every partition from the start, and a consumer in a group. Each records what
//! it sees in the [`Recorder`]; [`final_read`] reads every partition back once faults healed.
//!
//! A write's outcome comes from librdkafka's own persistence status
//! (`rd_kafka_message_status`): NOT_PERSISTED is a write that definitely failed, POSSIBLY_PERSISTED
//! is unknown, and a delivery report without an error is an acknowledgement at its offset.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::bindings::{rd_kafka_message_status, rd_kafka_msg_status_t};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{BorrowedMessage, DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::history::{id_of, value_of, LogRecord, Outcome, Recorder, WriteId};

/// How long librdkafka keeps retrying a write before it reports it failed (unknown outcome):
/// longer than any fault the nemesis holds, so a write outlives the faults it meets.
const MESSAGE_TIMEOUT_MS: u32 = 120_000;
/// How long the final read may take per partition.
const FINAL_READ_DEADLINE: Duration = Duration::from_secs(60);

/// Unique write ids across every producer of the run.
pub type Ids = Arc<AtomicU64>;

struct ProducerCtx {
    recorder: Recorder,
}

impl ClientContext for ProducerCtx {}

fn persisted(m: &BorrowedMessage<'_>) -> rd_kafka_msg_status_t {
    // SAFETY: the message pointer is valid for the duration of the delivery callback.
    unsafe { rd_kafka_message_status(m.ptr()) }
}

impl ProducerContext for ProducerCtx {
    type DeliveryOpaque = Box<WriteId>;

    fn delivery(&self, result: &DeliveryResult<'_>, id: Box<WriteId>) {
        let outcome = match result {
            Ok(m) => Outcome::Ack { offset: m.offset() },
            Err((_, m)) => match persisted(m) {
                rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED => {
                    Outcome::DefinitelyFailed
                }
                _ => Outcome::Unknown,
            },
        };
        self.recorder.outcome(*id, outcome);
    }
}

/// A running workload thread.
pub struct Worker {
    pub name: String,
    handle: Option<JoinHandle<Vec<String>>>,
}

impl Worker {
    /// Runs `work` on a thread named `name`; what it returns are its notes.
    pub fn spawn(
        name: &str,
        work: impl FnOnce() -> Vec<String> + Send + 'static,
    ) -> anyhow::Result<Worker> {
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(work)?;
        Ok(Worker {
            name: name.to_owned(),
            handle: Some(handle),
        })
    }

    /// Waits for the thread up to `deadline`; its notes (errors it saw), or a line saying it hung.
    pub fn join(mut self, deadline: Duration) -> Vec<String> {
        let end = Instant::now() + deadline;
        let handle = self.handle.take().unwrap();
        while !handle.is_finished() {
            if Instant::now() > end {
                // Left behind: a librdkafka client that does not close must not hang the run.
                return vec![format!("{}: did not finish within {deadline:?}", self.name)];
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        handle
            .join()
            .unwrap_or_else(|_| vec![format!("{}: panicked", self.name)])
    }
}

/// Where a producer writes and what it records into, until `running` is cleared.
pub struct Load<'a> {
    pub bootstrap: &'a str,
    pub topic: &'a str,
    pub partitions: i32,
    pub recorder: Recorder,
    pub running: Arc<AtomicBool>,
}

/// An idempotent acks=all librdkafka producer sending about `rate` writes a second,
/// round-robin over the partitions, until `running` is cleared; then it waits (up to
/// `MESSAGE_TIMEOUT_MS`) for every outcome.
pub fn producer(name: &str, load: &Load<'_>, rate: u32, ids: Ids) -> anyhow::Result<Worker> {
    let (bootstrap, topic, partitions) = (load.bootstrap, load.topic, load.partitions);
    let (recorder, running) = (load.recorder.clone(), load.running.clone());
    let producer: ThreadedProducer<ProducerCtx> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", name)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // One request in flight per connection: with up to five, librdkafka 2.12 bumps its
        // producer epoch when a later in-flight request of a partition comes back
        // OUT_OF_ORDER_SEQUENCE_NUMBER after the first failed (a leader change), and sends the
        // writes again under the new epoch: duplicates no broker can recognise
        // (confluentinc/librdkafka#4953, fix pending in #4972). The suite saw exactly that on
        // both brokers. The Java client retries without a bump and keeps its default of five.
        .set("max.in.flight.requests.per.connection", "1")
        .set("linger.ms", "5")
        .set("message.timeout.ms", MESSAGE_TIMEOUT_MS.to_string())
        .set("retry.backoff.ms", "20")
        .set("retry.backoff.max.ms", "200")
        .set("topic.metadata.refresh.interval.ms", "1000")
        .create_with_context(ProducerCtx {
            recorder: recorder.clone(),
        })?;
    let (name, topic) = (name.to_owned(), topic.to_owned());
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let mut notes = Vec::new();
            let pause = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
            let mut next = Instant::now();
            let mut n: u64 = 0;
            while running.load(Ordering::SeqCst) {
                let id = ids.fetch_add(1, Ordering::SeqCst);
                let partition = (n % partitions as u64) as i32;
                n += 1;
                let value = value_of(id);
                recorder.sent(id, &name, partition);
                let record = BaseRecord::<(), _, _>::with_opaque_to(&topic, Box::new(id))
                    .partition(partition)
                    .payload(&value);
                if let Err((e, _)) = producer.send(record) {
                    // Not enqueued: nothing was sent.
                    recorder.outcome(id, Outcome::DefinitelyFailed);
                    if notes.len() < 5 {
                        notes.push(format!("{name}: send refused: {e}"));
                    }
                }
                // Pacing of the load, not a wait for anything.
                next += pause;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
            if let Err(e) =
                producer.flush(Duration::from_millis(MESSAGE_TIMEOUT_MS as u64 + 10_000))
            {
                notes.push(format!("{name}: flush: {e}"));
            }
            notes
        })?;
    Ok(Worker {
        name: thread_name,
        handle: Some(handle),
    })
}

struct GroupCtx {
    generation: Arc<AtomicU64>,
}

impl ClientContext for GroupCtx {}

impl ConsumerContext for GroupCtx {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(_) = rebalance {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn consumer_config(bootstrap: &str, name: &str, group: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", name)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("topic.metadata.refresh.interval.ms", "1000");
    c
}

fn record_poll<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    name: &str,
    generation: u64,
    recorder: &Recorder,
    errors: &mut u64,
    notes: &mut Vec<String>,
) {
    match consumer.poll(Duration::from_millis(100)) {
        Some(Ok(m)) => {
            let id = m.payload().and_then(id_of);
            recorder.poll(name, generation, m.partition(), m.offset(), id);
        }
        Some(Err(e)) => {
            *errors += 1;
            if notes.len() < 5 {
                notes.push(format!("{name}: {e}"));
            }
        }
        None => {}
    }
}

/// A consumer assigned every partition from offset 0 (no group membership), polling until
/// `running` is cleared.
pub fn assigned_consumer(
    name: &str,
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    recorder: Recorder,
    running: Arc<AtomicBool>,
) -> anyhow::Result<Worker> {
    let consumer: BaseConsumer = consumer_config(bootstrap, name, &format!("faults-{name}"))
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let name = name.to_owned();
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let (mut errors, mut notes) = (0u64, Vec::new());
            while running.load(Ordering::SeqCst) {
                record_poll(&consumer, &name, 0, &recorder, &mut errors, &mut notes);
            }
            if errors > 0 {
                notes.push(format!(
                    "{name}: {errors} poll errors (librdkafka retries them)"
                ));
            }
            notes
        })?;
    Ok(Worker {
        name: thread_name,
        handle: Some(handle),
    })
}

/// A consumer in group `group` subscribed to `topic`, committing automatically; each
/// assignment it gets starts a new generation in its polls.
pub fn group_consumer(
    name: &str,
    bootstrap: &str,
    topic: &str,
    group: &str,
    recorder: Recorder,
    running: Arc<AtomicBool>,
) -> anyhow::Result<Worker> {
    let generation = Arc::new(AtomicU64::new(0));
    let consumer: BaseConsumer<GroupCtx> = consumer_config(bootstrap, name, group)
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .create_with_context(GroupCtx {
            generation: generation.clone(),
        })?;
    consumer.subscribe(&[topic])?;
    let name = name.to_owned();
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let (mut errors, mut notes) = (0u64, Vec::new());
            while running.load(Ordering::SeqCst) {
                let g = generation.load(Ordering::SeqCst);
                record_poll(&consumer, &name, g, &recorder, &mut errors, &mut notes);
            }
            notes.push(format!(
                "{name}: {} assignments, {errors} poll errors",
                generation.load(Ordering::SeqCst)
            ));
            notes
        })?;
    Ok(Worker {
        name: thread_name,
        handle: Some(handle),
    })
}

/// Reads every partition from offset 0 up to its high watermark with a fresh consumer:
/// the records, and each partition's high watermark.
pub fn final_read(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<(Vec<LogRecord>, std::collections::BTreeMap<i32, i64>)> {
    let consumer: BaseConsumer = consumer_config(bootstrap, "final-read", "faults-final-read")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut records = Vec::new();
    let mut ends = std::collections::BTreeMap::new();
    for p in 0..partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        ends.insert(p, high);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
        consumer.assign(&tpl)?;
        let deadline = Instant::now() + FINAL_READ_DEADLINE;
        let mut last = -1i64;
        while last + 1 < high {
            if Instant::now() > deadline {
                anyhow::bail!("final read of partition {p}: at offset {last} of {high} after {FINAL_READ_DEADLINE:?}");
            }
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) if m.partition() == p => {
                    last = m.offset();
                    records.push(LogRecord {
                        partition: p,
                        offset: m.offset(),
                        id: m.payload().and_then(id_of),
                        producer: None,
                    });
                }
                Some(Err(e))
                    if matches!(e.rdkafka_error_code(), Some(RDKafkaErrorCode::PartitionEOF)) => {}
                _ => {}
            }
        }
    }
    Ok((records, ends))
}

/// Starts `java/<program>` (a single-file program) on Kafka's jars with `args`, its stderr in
/// `log` and its stdout piped back; its stdin is closed (the program's signal to stop, drain
/// and exit) once `running` is cleared.
fn spawn_java(
    program: &str,
    args: &[&str],
    kafka_libs: &std::path::Path,
    log: &std::path::Path,
    running: Arc<AtomicBool>,
) -> anyhow::Result<(std::process::Child, std::process::ChildStdout)> {
    use std::process::{Command, Stdio};
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("java")
        .join(program);
    let mut child = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(format!("{}/*", kafka_libs.display()))
        .arg(&source)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        while running.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(stdin);
    });
    Ok((child, stdout))
}

/// The Java client's producer (`java/FaultsProducer.java`, kafka-clients 4.1.1, idempotent,
/// acks=all) as a child process: its stdout lines are recorded as they come; closing its stdin
/// (once `running` is cleared) makes it stop, drain and exit. Its ids start at `first_id`.
pub fn java_producer(
    name: &str,
    load: &Load<'_>,
    rate: u32,
    first_id: WriteId,
    kafka_libs: &std::path::Path,
    log: &std::path::Path,
) -> anyhow::Result<Worker> {
    let (bootstrap, topic, partitions) = (load.bootstrap, load.topic, load.partitions);
    let (recorder, running) = (load.recorder.clone(), load.running.clone());
    use std::io::BufRead;
    let args = [
        bootstrap,
        topic,
        &partitions.to_string(),
        &rate.to_string(),
        &first_id.to_string(),
        name,
    ];
    let (mut child, stdout) = spawn_java(
        "FaultsProducer.java",
        &args,
        kafka_libs,
        log,
        running.clone(),
    )?;
    let name = name.to_owned();
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let mut notes = Vec::new();
            let mut done = false;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let f: Vec<&str> = line.split(' ').collect();
                let id = f.get(1).and_then(|v| v.parse::<WriteId>().ok());
                match (f[0], id, f.get(2)) {
                    ("sent", Some(id), Some(p)) => {
                        recorder.sent(id, &name, p.parse().unwrap_or(-1))
                    }
                    ("ack", Some(id), Some(o)) => recorder.outcome(
                        id,
                        Outcome::Ack {
                            offset: o.parse().unwrap_or(-1),
                        },
                    ),
                    ("unknown", Some(id), _) => recorder.outcome(id, Outcome::Unknown),
                    ("failed", Some(id), _) => recorder.outcome(id, Outcome::DefinitelyFailed),
                    ("done", _, _) => done = true,
                    _ if notes.len() < 5 => notes.push(format!("{name}: unexpected line {line:?}")),
                    _ => {}
                }
            }
            let status = child.wait();
            if !done {
                notes.push(format!(
                    "{name}: ended without finishing ({status:?}); see its log"
                ));
            }
            notes
        })?;
    Ok(Worker {
        name: thread_name,
        handle: Some(handle),
    })
}

/// How the Java consumer gets its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JavaMode {
    /// Every partition assigned by hand, from the beginning.
    Assign,
    /// Subscribed in a group, committing automatically.
    Group,
}

/// The Java client's consumer (`java/FaultsConsumer.java`, kafka-clients 4.1.1) as a child
/// process: every record it polls is a line of its stdout, recorded as a poll of `name`;
/// closing its stdin (once `running` is cleared) makes it stop.
#[allow(clippy::too_many_arguments)]
pub fn java_consumer(
    name: &str,
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    mode: JavaMode,
    kafka_libs: &std::path::Path,
    log: &std::path::Path,
    recorder: Recorder,
    running: Arc<AtomicBool>,
) -> anyhow::Result<Worker> {
    use std::io::BufRead;
    let mode_arg = match mode {
        JavaMode::Assign => "assign",
        JavaMode::Group => "group",
    };
    let group = format!("faults-{name}");
    let args = [
        bootstrap,
        topic,
        &partitions.to_string(),
        mode_arg,
        &group,
        name,
    ];
    let (mut child, stdout) = spawn_java(
        "FaultsConsumer.java",
        &args,
        kafka_libs,
        log,
        running.clone(),
    )?;
    let name = name.to_owned();
    let thread_name = name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let mut notes = Vec::new();
            let mut done = false;
            let (mut generations, mut polled) = (0, 0u64);
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let f: Vec<&str> = line.splitn(5, ' ').collect();
                let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
                match (f[0], num(1), num(2), num(3), f.get(4)) {
                    ("poll", Some(g), Some(p), Some(o), Some(v)) => {
                        generations = generations.max(g);
                        polled += 1;
                        recorder.poll(&name, g as u64, p as i32, o, id_of(v.as_bytes()));
                    }
                    ("done", errors, ..) => {
                        done = true;
                        notes.push(format!(
                            "{name}: {polled} records polled, {generations} assignments, {} poll errors (see its log)",
                            errors.unwrap_or(0)
                        ));
                    }
                    _ if notes.len() < 5 => notes.push(format!("{name}: unexpected line {line:?}")),
                    _ => {}
                }
            }
            let status = child.wait();
            if !done {
                notes.push(format!(
                    "{name}: ended without finishing ({status:?}); see its log"
                ));
            }
            notes
        })?;
    Ok(Worker {
        name: thread_name,
        handle: Some(handle),
    })
}
