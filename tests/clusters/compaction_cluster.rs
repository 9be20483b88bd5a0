//! Log compaction on three replicas while the leader is killed with SIGKILL, checked on every
//! replica's own files.
//!
//! A compacted topic (replication factor 3, `min.insync.replicas=2`, segments rolled every
//! 300 ms, `min.cleanable.dirty.ratio=0.01`) receives keyed records over 40 keys from an
//! idempotent acks=all producer, while three times the partition's leader is killed with
//! SIGKILL, another is elected, writes go on and the victim restarts and catches up. Every
//! replica cleans its own copy throughout.
//!
//! Then, with a tick record written now and then so the last segment rolls and is cleaned too,
//! each replica's files are read until every one holds exactly one record per key: the last
//! acknowledged value of that key (or a later write whose outcome the producer never learnt).
//! After a clean stop of all nodes, each replica's log is read once more at rest: every batch's
//! CRC is valid, offsets only grow, and the key → value maps of the three replicas are that same
//! map. A replica that lost an acknowledged value, kept a stale one, or resurrected an older
//! value from a half-done swap fails the test.
//!
//! Waits have deadlines; each step waits on a condition.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterKind};
use kafkaiq_storage::batch::{crc_valid, BatchIter, RECORD_BATCH_OVERHEAD};
use kafkaiq_storage::cleaner::filter::parse_records;
use kafkaiq_storage::compression::{decompress, DECOMPRESSED_RECORDS_BYTES_MAX};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};

const TOPIC: &str = "compacted";
const KEYS: u64 = 40;
const DEADLINE: Duration = Duration::from_secs(60);
/// Leader kills.
const KILLS: usize = 3;
/// Acknowledged writes between two steps of the run.
const WRITES_PER_STEP: usize = 1_500;

/// What the producer learnt of its writes: (key, seq) acknowledged at an offset, and the seqs
/// whose outcome is unknown (an error: written or not).
#[derive(Default)]
struct Ledger {
    acked: Vec<(u64, u64, i64)>,
    unknown: Vec<(u64, u64)>,
}

fn key_of(seq: u64) -> u64 {
    seq % KEYS
}

/// Reads every `.log` of `topic-0` on a node's data dir: (offset, key, value) of every record,
/// or `None` when a file changed under the read (a segment swapped by the cleaner) or a batch
/// is torn or fails its CRC.
fn replica_records(data_dir: &Path) -> Option<Vec<(i64, String, Option<String>)>> {
    let dir = data_dir.join(format!("{TOPIC}-0"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let mut out = Vec::new();
    for segment in segments {
        let bytes = std::fs::read(&segment).ok()?;
        let mut end = 0;
        for (at, h) in BatchIter::new(&bytes) {
            let batch = &bytes[at..at + h.size_in_bytes()];
            end = at + h.size_in_bytes();
            if !crc_valid(batch) {
                return None;
            }
            if h.is_control() {
                continue;
            }
            let raw = decompress(
                h.compression_codec() as u8,
                &batch[RECORD_BATCH_OVERHEAD..],
                DECOMPRESSED_RECORDS_BYTES_MAX,
            )
            .ok()?;
            for r in parse_records(&raw, &h).ok()? {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                out.push((r.offset, text(r.key?), r.value.map(text)));
            }
        }
        if end != bytes.len() {
            return None;
        }
    }
    Some(out)
}

/// The last value of each key in `records` (ticks left out), and how many records are not ticks.
fn latest(records: &[(i64, String, Option<String>)]) -> (BTreeMap<String, Option<String>>, usize) {
    let mut map = BTreeMap::new();
    let mut count = 0;
    for (_, k, v) in records.iter().filter(|(_, k, _)| k != "tick") {
        map.insert(k.clone(), v.clone());
        count += 1;
    }
    (map, count)
}

/// Whether a replica's map holds, for every key, its last acknowledged value or a later write
/// of unknown outcome; the reason when not.
fn check_map(
    map: &BTreeMap<String, Option<String>>,
    allowed: &BTreeMap<String, Vec<String>>,
) -> Result<(), String> {
    if map.len() != allowed.len() {
        return Err(format!("{} keys, {} written", map.len(), allowed.len()));
    }
    for (k, values) in allowed {
        match map.get(k) {
            Some(Some(v)) if values.contains(v) => {}
            other => return Err(format!("key {k}: {other:?}, allowed {values:?}")),
        }
    }
    Ok(())
}

async fn settled(cluster: &Cluster, what: &str) -> i32 {
    cluster
        .wait_for(what, DEADLINE, || async {
            let p = cluster.partitions_anywhere(TOPIC).await?;
            let s = p.get(&0)?;
            (s.leader > 0 && s.isr.len() == 3).then_some(s.leader)
        })
        .await
}

async fn acked_at_least(cluster: &Cluster, ledger: &Mutex<Ledger>, n: usize, what: &str) {
    cluster
        .wait_for(what, DEADLINE, || async {
            (ledger.lock().unwrap().acked.len() >= n).then_some(())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_compacts_to_the_last_acknowledged_value_of_each_key_across_leader_kills() {
    let kind = ClusterKind::from_env();
    let mut cluster = Cluster::start(
        kind,
        "compaction",
        3,
        &["log.cleaner.backoff.ms=100", "replica.lag.time.max.ms=4000"],
    );
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1048576"),
        ("segment.ms", "300"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "1000"),
        ("min.insync.replicas", "2"),
    ];
    assert_eq!(
        cluster
            .create_topic_configured(1, TOPIC, 1, 3, &configs)
            .await,
        Some(0)
    );
    settled(&cluster, "the topic fully replicated").await;

    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "120000")
        .create()
        .unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (producer, ledger, stop) = (producer.clone(), ledger.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Fifty in flight at a time, then the next fifty.
                let mut sends = Vec::new();
                for _ in 0..50 {
                    let (producer, ledger) = (producer.clone(), ledger.clone());
                    let this = seq;
                    seq += 1;
                    sends.push(tokio::spawn(async move {
                        let key = format!("k{}", key_of(this));
                        let value = format!("v{this}-{}", "x".repeat(100));
                        let record = FutureRecord::to(TOPIC)
                            .partition(0)
                            .key(&key)
                            .payload(&value);
                        let outcome = producer.send(record, Duration::from_secs(150)).await;
                        let mut ledger = ledger.lock().unwrap();
                        match outcome {
                            Ok(d) => ledger.acked.push((key_of(this), this, d.offset)),
                            Err(_) => ledger.unknown.push((key_of(this), this)),
                        }
                    }));
                }
                for s in sends {
                    s.await.unwrap();
                }
            }
        })
    };

    let mut target = WRITES_PER_STEP;
    acked_at_least(&cluster, &ledger, target, "writes before the first kill").await;
    for round in 1..=KILLS {
        let victim = settled(&cluster, "all replicas in sync before a kill").await;
        cluster.kill(victim);
        cluster
            .wait_for("another leader elected", DEADLINE, || async {
                let p = cluster.partitions_anywhere(TOPIC).await?;
                let s = p.get(&0)?;
                (s.leader > 0 && s.leader != victim).then_some(())
            })
            .await;
        target = ledger.lock().unwrap().acked.len() + WRITES_PER_STEP;
        acked_at_least(&cluster, &ledger, target, "writes to the new leader").await;
        cluster.spawn(victim);
        cluster.await_listening(victim);
        settled(&cluster, "the killed node back in the ISR").await;
        println!("{}: kill {round} of node {victim} done", kind.name());
    }
    target = ledger.lock().unwrap().acked.len() + WRITES_PER_STEP;
    acked_at_least(&cluster, &ledger, target, "writes after the last restart").await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    // Per key: the last acknowledged value, or any later write of unknown outcome.
    let (allowed, written) = {
        let ledger = ledger.lock().unwrap();
        let mut last: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
        for &(key, seq, offset) in &ledger.acked {
            let e = last.entry(key).or_insert((seq, offset));
            if offset > e.1 {
                *e = (seq, offset);
            }
        }
        let mut allowed: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key, (seq, _)) in &last {
            let values = allowed.entry(format!("k{key}")).or_default();
            values.push(format!("v{seq}-{}", "x".repeat(100)));
            for &(k, s) in &ledger.unknown {
                if k == *key && s > *seq {
                    values.push(format!("v{s}-{}", "x".repeat(100)));
                }
            }
        }
        let written = ledger.acked.len() + ledger.unknown.len();
        println!(
            "{}: {} writes acknowledged, {} of unknown outcome",
            kind.name(),
            ledger.acked.len(),
            ledger.unknown.len()
        );
        (allowed, written)
    };
    assert_eq!(allowed.len() as u64, KEYS);

    // Every replica compacted to one record per key, a tick rolling the last segment now and
    // then.
    let tick_producer = producer.clone();
    let mut last_tick = Instant::now();
    let nodes = [1, 2, 3];
    let dirs: Vec<_> = nodes.iter().map(|&id| cluster.node_data_dir(id)).collect();
    let mut last_seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut done = true;
        for (id, dir) in nodes.iter().zip(&dirs) {
            match replica_records(dir) {
                Some(records) => {
                    let (map, count) = latest(&records);
                    if count != KEYS as usize || check_map(&map, &allowed).is_err() {
                        done = false;
                        last_seen = format!(
                            "node {id}: {count} records besides ticks ({})",
                            check_map(&map, &allowed).err().unwrap_or_default()
                        );
                    }
                }
                None => done = false,
            }
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every replica compacted to one record per key in 120 s: {last_seen}"
        );
        if last_tick.elapsed() >= Duration::from_millis(400) {
            tick_producer
                .send(
                    FutureRecord::to(TOPIC)
                        .partition(0)
                        .key("tick")
                        .payload("t"),
                    Duration::from_secs(30),
                )
                .await
                .unwrap_or_else(|(e, _)| panic!("tick: {e}"));
            last_tick = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{}: every replica holds one record per key of {written} written",
        kind.name()
    );

    // At rest: the same map on every replica, valid batches, growing offsets.
    cluster.stop_all_keeping_files();
    let mut maps = Vec::new();
    for (id, dir) in nodes.iter().zip(&dirs) {
        let records =
            replica_records(dir).unwrap_or_else(|| panic!("node {id}: torn or invalid batch"));
        for w in records.windows(2) {
            assert!(
                w[0].0 < w[1].0,
                "node {id}: offset {} then {}",
                w[0].0,
                w[1].0
            );
        }
        let (map, _) = latest(&records);
        check_map(&map, &allowed).unwrap_or_else(|e| panic!("node {id} at rest: {e}"));
        maps.push(map);
    }
    assert!(
        maps.windows(2).all(|w| w[0] == w[1]),
        "replicas' maps differ"
    );
    cluster.remove_files();
}
