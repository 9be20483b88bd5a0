//! A Kafka Streams application under `exactly_once_v2` across node and instance kills: the word
//! count of `integration/streams-wordcount` (Kafka Streams 4.1.1, the Java client; counts in a
//! persistent RocksDB store, a repartition topic purged with DeleteRecords, a compacted
//! changelog, offsets committed in each transaction, reads at read_committed, the classic
//! consumer group protocol) runs as two instances on three nodes while nodes are killed with
//! SIGKILL and restarted one at a time and each instance is killed with SIGKILL and restarted.
//! The input arrives in batches, each written while its kill happens. Once every word is
//! counted, a read_committed reader of the output must find, for each word, the counts 1, 2, ...
//! up to its number of occurrences in the input, in that order, once each: never more than that
//! number (a line counted twice), never a smaller count after a larger one, the last one exactly
//! it.
//!
//! With `KAFKAIQ_CLUSTER_BROKER=kafka` the same test runs against Apache Kafka.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::cluster::{Cluster, ClusterKind};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const APPLICATION_ID: &str = "wordcount";
const INPUT: &str = "wc-lines";
const OUTPUT: &str = "wc-counts";
/// The internal topics Kafka Streams creates for the topology (`Grouped.with("words")`,
/// `Materialized.as("counts")`).
const REPARTITION: &str = "wordcount-words-repartition";
const CHANGELOG: &str = "wordcount-counts-changelog";
const PARTITIONS: i32 = 3;
const VOCABULARY: usize = 40;
const WORDS_PER_LINE: usize = 6;
const LINES_PER_BATCH: usize = 800;
const BATCHES: usize = 6;
const BATCH_WORDS: i64 = (LINES_PER_BATCH * WORDS_PER_LINE) as i64;
const DEADLINE: Duration = Duration::from_secs(90);

/// The folder with the word count's jar and its dependencies (built on first use).
fn wordcount_jars() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("integration/streams-wordcount/build.sh"))
        .stdin(Stdio::null())
        .output()
        .expect("run integration/streams-wordcount/build.sh");
    assert!(
        out.status.success(),
        "streams-wordcount/build.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .lines()
            .last()
            .unwrap(),
    )
}

/// One running word count instance.
struct Instance {
    name: &'static str,
    child: Child,
    starts: u32,
}

fn spawn_instance(cluster: &Cluster, jars: &Path, name: &'static str, starts: u32) -> Instance {
    let log = std::fs::File::create(cluster.root.join(format!("streams-{name}-{starts}.log")))
        .expect("streams log");
    // The same state dir on every start: the restarted instance keeps its process id (hence its
    // transactional id) and its RocksDB store.
    let state_dir = cluster.root.join(format!("streams-{name}-state"));
    let mut child = Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(format!("{}/*", jars.display()))
        .arg("kafkaiq.streams.WordCount")
        .args([&cluster.bootstrap(), APPLICATION_ID, INPUT, OUTPUT])
        .arg(&state_dir)
        .stdout(Stdio::piped())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the word count");
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("streams {name}#{starts}: {line}");
        }
    });
    Instance {
        name,
        child,
        starts,
    }
}

impl Drop for Instance {
    /// A failed test leaves no JVM behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Instance {
    /// kill -9, then the same instance again.
    fn hard_bounce(&mut self, cluster: &Cluster, jars: &Path) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = spawn_instance(cluster, jars, self.name, self.starts + 1);
    }
}

/// The lines of batch `batch`: words `w00`..`w39` drawn by a fixed xorshift, so the multiset is
/// known and uneven.
fn lines(batch: usize) -> Vec<String> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (batch as u64 + 1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..LINES_PER_BATCH)
        .map(|_| {
            (0..WORDS_PER_LINE)
                .map(|_| {
                    // Squared: some words are common, some rare.
                    let r = (next() % 1000) as usize;
                    format!("w{:02}", r * r / (1000 * 1000 / VOCABULARY))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Writes the lines, idempotent, acks=all (librdkafka's default with idempotence).
fn produce(bootstrap: &str, lines: &[String]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("create producer");
    for line in lines {
        loop {
            match producer.send(BaseRecord::<(), _>::to(INPUT).payload(line)) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(_), _)) => {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("send: {e}"),
            }
        }
    }
    producer.flush(DEADLINE).expect("flush the input");
}

fn output_consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(OUTPUT, p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&tpl).expect("assign");
    consumer
}

/// One output record: (partition, word, count).
fn decode(m: &rdkafka::message::BorrowedMessage<'_>) -> (i32, String, i64) {
    let word = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
    let value = m.payload().unwrap_or_default();
    let count = i64::from_be_bytes(
        value
            .try_into()
            .unwrap_or_else(|_| panic!("a count of {} bytes for {word}", value.len())),
    );
    (m.partition(), word, count)
}

/// Follows the output at read_committed in the background: the last count of each word, which
/// tells how far the application has got.
fn follow_output(bootstrap: String, stop: Arc<AtomicBool>) -> Arc<Mutex<BTreeMap<String, i64>>> {
    let latest = Arc::new(Mutex::new(BTreeMap::new()));
    let seen = latest.clone();
    std::thread::spawn(move || {
        let consumer = output_consumer(&bootstrap, "wc-counts-follower");
        while !stop.load(Ordering::SeqCst) {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                let (_, word, count) = decode(&m);
                seen.lock().unwrap().insert(word, count);
            }
        }
    });
    latest
}

/// Every record of the output at read_committed, to each partition's end, in offset order per
/// partition.
fn read_output(bootstrap: &str) -> Vec<(i32, String, i64)> {
    let consumer = output_consumer(bootstrap, "wc-counts-reader");
    let mut records = Vec::new();
    let mut at_end = BTreeSet::new();
    let deadline = Instant::now() + DEADLINE;
    while at_end.len() < PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "the output not read to its end within {DEADLINE:?}"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => records.push(decode(&m)),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            _ => {}
        }
    }
    records
}

/// Words counted so far: the sum of the last counts (each word's count is its occurrences
/// processed).
fn processed(latest: &Mutex<BTreeMap<String, i64>>) -> i64 {
    latest.lock().unwrap().values().sum()
}

/// Every partition of the test's topics, the application's internal topics and the
/// coordinators' topics has all three replicas in its ISR.
async fn fully_replicated(cluster: &Cluster) -> Option<()> {
    for topic in [
        INPUT,
        OUTPUT,
        REPARTITION,
        CHANGELOG,
        "__consumer_offsets",
        "__transaction_state",
    ] {
        let partitions = cluster.partitions_anywhere(topic).await?;
        if partitions.is_empty() || partitions.values().any(|p| p.isr.len() < 3 || p.leader < 0) {
            return None;
        }
    }
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_word_count_is_exact_through_node_and_instance_kills() {
    let kind = ClusterKind::from_env();
    let jars = tokio::task::spawn_blocking(wordcount_jars)
        .await
        .expect("build the word count");
    let mut cluster = Cluster::start(
        kind,
        "streams",
        3,
        &[
            "replica.lag.time.max.ms=4000",
            "offsets.topic.num.partitions=3",
            "transaction.state.log.num.partitions=3",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
        ],
    );
    let started = Instant::now();
    cluster
        .wait_for("three nodes in one cluster", DEADLINE, || cluster.formed())
        .await;
    for topic in [INPUT, OUTPUT] {
        assert_eq!(
            cluster
                .create_topic_configured(1, topic, PARTITIONS, 3, &[("min.insync.replicas", "2")])
                .await,
            Some(0)
        );
    }

    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut produce_batch = |cluster: &Cluster, batch: usize| {
        let lines = lines(batch);
        for word in lines.iter().flat_map(|l| l.split(' ')) {
            *expected.entry(word.to_owned()).or_default() += 1;
        }
        let bootstrap = cluster.bootstrap();
        tokio::task::spawn_blocking(move || produce(&bootstrap, &lines))
    };
    produce_batch(&cluster, 0).await.expect("produce");

    let stop = Arc::new(AtomicBool::new(false));
    let latest = follow_output(cluster.bootstrap(), stop.clone());
    let mut instances = [
        spawn_instance(&cluster, &jars, "a", 1),
        spawn_instance(&cluster, &jars, "b", 1),
    ];
    let mut restarts_after_exit = 0;
    // Waits until `words` input words have been counted, starting an instance again should it
    // exit by itself (none is expected to: the app replaces a failed stream thread).
    macro_rules! await_processed {
        ($what:expr, $words:expr) => {{
            let words: i64 = $words;
            let deadline = Instant::now() + DEADLINE;
            while processed(&latest) < words {
                for i in instances.iter_mut() {
                    if let Some(status) = i.child.try_wait().expect("instance status") {
                        eprintln!("streams {} exited with {status}; starting it again", i.name);
                        restarts_after_exit += 1;
                        assert!(restarts_after_exit <= 3, "the word count keeps exiting");
                        i.hard_bounce(&cluster, &jars);
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: {} of {words} words counted after {DEADLINE:?}",
                    $what,
                    processed(&latest)
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }};
    }

    // One bounce per batch, each once the batch is being processed: node 1, instance a, node 2,
    // node 3, instance b; the last batch runs undisturbed.
    let mut bounces = Vec::new();
    for batch in 0..BATCHES {
        // The batch goes on being written while the bounce happens.
        let producing = (batch > 0).then(|| produce_batch(&cluster, batch));
        let before = batch as i64 * BATCH_WORDS;
        await_processed!(
            format!("batch {batch} under way"),
            before + BATCH_WORDS / 10
        );
        match batch {
            0 | 2 | 3 => {
                let victim = [1, 0, 2, 3][batch];
                cluster.kill(victim);
                bounces.push(format!(
                    "node {victim} killed at {} of {} words",
                    processed(&latest),
                    before + BATCH_WORDS
                ));
                await_processed!(
                    format!("batch {batch} with node {victim} down"),
                    before + BATCH_WORDS / 2
                );
                cluster.spawn(victim);
                cluster.await_listening(victim);
                cluster
                    .wait_for(
                        &format!("node {victim} back in every ISR"),
                        DEADLINE,
                        || fully_replicated(&cluster),
                    )
                    .await;
            }
            1 | 4 => {
                let i = &mut instances[if batch == 1 { 0 } else { 1 }];
                let at = processed(&latest);
                i.hard_bounce(&cluster, &jars);
                bounces.push(format!(
                    "instance {} killed at {at} of {} words",
                    i.name,
                    before + BATCH_WORDS
                ));
            }
            _ => {}
        }
        if let Some(producing) = producing {
            producing.await.expect("produce");
        }
    }
    let total = BATCHES as i64 * BATCH_WORDS;
    await_processed!("the whole input".to_owned(), total);
    eprintln!(
        "streams: {total} words counted {:?} after formation; bounces: {bounces:?}",
        started.elapsed()
    );

    // A clean close: whatever the instances still hold is committed or aborted, nothing open.
    stop.store(true, Ordering::SeqCst);
    for i in instances.iter_mut() {
        // SAFETY: kill(2) on the pid of our own unreaped child.
        unsafe { libc::kill(i.child.id() as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + DEADLINE;
    for i in instances.iter_mut() {
        while i.child.try_wait().expect("instance status").is_none() {
            assert!(
                Instant::now() < deadline,
                "streams {} did not close",
                i.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // The application purged the records it had consumed from its repartition topic
    // (DeleteRecords after a commit, every second at most): its log start moved on.
    let bootstrap = cluster.bootstrap();
    let repartition_starts = tokio::task::spawn_blocking(move || {
        let consumer = output_consumer(&bootstrap, "wc-repartition-watermarks");
        (0..PARTITIONS)
            .map(|p| {
                consumer
                    .fetch_watermarks(REPARTITION, p, DEADLINE)
                    .expect("repartition watermarks")
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("watermarks");
    eprintln!("streams: repartition topic (log start, end) per partition: {repartition_starts:?}");
    assert!(
        repartition_starts.iter().all(|(start, _)| *start > 0),
        "the repartition topic not purged: {repartition_starts:?}"
    );

    let bootstrap = cluster.bootstrap();
    let records = tokio::task::spawn_blocking(move || read_output(&bootstrap))
        .await
        .expect("reader");
    // Per word: the partitions it was written to and its counts in offset order.
    let mut partitions: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    let mut counts: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (p, word, count) in &records {
        partitions.entry(word).or_default().insert(*p);
        counts.entry(word).or_default().push(*count);
    }
    let mut problems = Vec::new();
    for (word, want) in &expected {
        let Some(seen) = counts.get(word.as_str()) else {
            problems.push(format!("{word}: never counted (expected {want})"));
            continue;
        };
        if partitions[word.as_str()].len() > 1 {
            problems.push(format!(
                "{word}: in partitions {:?}",
                partitions[word.as_str()]
            ));
        }
        if let Some(over) = seen.iter().find(|c| *c > want) {
            problems.push(format!("{word}: count {over} over its {want} occurrences"));
        }
        if let Some(w) = seen.windows(2).find(|w| w[1] < w[0]) {
            problems.push(format!("{word}: count {} after {}", w[1], w[0]));
        }
        if seen.last() != Some(want) {
            problems.push(format!(
                "{word}: last count {:?}, expected {want}",
                seen.last()
            ));
        }
        // With the record cache off each occurrence yields one record.
        if !seen.iter().copied().eq(1..=*want) {
            problems.push(format!(
                "{word}: {} counts for {want} occurrences, not 1..={want} once each",
                seen.len()
            ));
        }
    }
    for word in counts.keys().filter(|w| !expected.contains_key(**w)) {
        problems.push(format!("{word}: never in the input"));
    }
    eprintln!(
        "streams: {} output records for {total} words, {} distinct; {:?} in all",
        records.len(),
        expected.len(),
        started.elapsed()
    );
    assert!(
        problems.is_empty(),
        "{} problems (logs in {}): {:?}",
        problems.len(),
        cluster.root.display(),
        problems.iter().take(20).collect::<Vec<_>>()
    );
    assert_eq!(records.len() as i64, total);
    cluster.stop_all();
}
