//! `faults`: a fault-injection run against a KafkaIQ or Apache Kafka 4.1 cluster, checked like
//! Jepsen. `integration/faults/run.sh` builds and runs it; see `integration/faults/README.md`.
//!
//! # Layout
//! - `cluster.rs` — the nodes as child processes (one `server.properties` in Kafka's keys for
//!   both brokers), kill -9, SIGSTOP/SIGCONT, full disks, metadata through `wire.rs`;
//! - `netfault.rs` — cuts between nodes (nftables rules by the sockets' group id) and added
//!   latency (an NFQUEUE served by `delay.rs`);
//! - `workload.rs` — librdkafka producers and consumers recording into `history.rs`;
//! - `transactions.rs` — a transactional producer on a topic of its own, and its check;
//! - `nemesis.rs` — one fault at a time from the seed's schedule, healed, recovery timed;
//! - `checker.rs` — the pure checker over the history; `figures.rs` — distributions;
//! - `segments.rs` — every replica's log read from its segment files after the stop.

mod checker;
mod cluster;
mod delay;
mod figures;
mod history;
mod nemesis;
mod netfault;
mod rng;
mod segments;
mod transactions;
mod wire;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use cluster::{BrokerKind, Cluster, Launch};
use figures::FaultRecord;
use history::Recorder;
use nemesis::{Nemesis, Timing, KINDS};

const TOPIC: &str = "faults";
const PARTITIONS: i32 = 6;
/// The settings both brokers run with, beyond the shared listener and quorum lines: a replica
/// lag time below the session timeout (so a pause can pass one and not the other; Kafka's default
/// is 30 s) and a leader-imbalance check every 5 s (Kafka's default is 300 s) so a run sees
/// leadership balanced again. The session timeout and heartbeat interval stay Kafka's defaults.
const REPLICA_LAG_MS: u64 = 4000;
const SESSION_MS: u64 = 9000;
const SETTINGS: &[&str] = &[
    "replica.lag.time.max.ms=4000",
    "leader.imbalance.check.interval.seconds=5",
    "auto.leader.rebalance.enable=true",
];
/// librdkafka producers and their rate (writes a second each).
const PRODUCERS: usize = 2;
const PRODUCER_RATE: u32 = 100;
/// The Java client's producer (when Apache Kafka's jars are at hand) and its rate.
const JAVA_PRODUCER_RATE: u32 = 50;
/// The Java producer's first write id: far above what the librdkafka producers reach.
const JAVA_FIRST_ID: u64 = 1 << 40;
/// A fault whose ISRs take longer than this to be full again after the heal keeps the
/// session's files (node logs included) even when the run is valid.
const SLOW_RECOVERY_MS: u64 = 30_000;
/// The Java consumer with every partition assigned (read up to the end before the run stops).
const JAVA_ASSIGNED: &str = "java-assign-1";
/// Acknowledgements before the first fault.
const WARM_UP_ACKS: usize = 300;
/// How long the workloads get to finish (a write is retried for up to 120 s).
const WORKLOAD_JOIN: Duration = Duration::from_secs(150);
/// How long the assigned consumer may take to read up to the high watermark at the end.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(60);

struct Args {
    broker: String,
    nodes: i32,
    faults: usize,
    full: bool,
    per_kind: usize,
    blocks: usize,
    seed: u64,
    kinds: Vec<&'static str>,
    kafkaiq_bin: PathBuf,
    kafka_libs: Option<PathBuf>,
    dir: PathBuf,
    results: Option<PathBuf>,
    keep: bool,
    java: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: faults [--broker kafkaiq|kafka|both] [--nodes 3|5] [--faults N] [--full] \
[--per-kind N] [--blocks N] [--seed N] [--kinds a,b,...] --kafkaiq-bin PATH [--kafka-libs DIR] \
[--dir DIR] [--results FILE.md] [--keep] [--no-java]\nkinds: {}",
        KINDS.join(",")
    );
    std::process::exit(2)
}

fn parse() -> Result<Args> {
    let mut a = Args {
        broker: "kafkaiq".into(),
        nodes: 3,
        faults: KINDS.len(),
        full: false,
        per_kind: 100,
        blocks: 4,
        seed: 1,
        kinds: KINDS.to_vec(),
        kafkaiq_bin: PathBuf::new(),
        kafka_libs: None,
        dir: std::env::temp_dir().join(format!("kafkaiq-faults-{}", std::process::id())),
        results: None,
        keep: std::env::var_os("KEEP_BROKER_DIR").is_some(),
        java: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--broker" => a.broker = value(),
            "--nodes" => a.nodes = value().parse()?,
            "--faults" => a.faults = value().parse()?,
            "--full" => a.full = true,
            "--per-kind" => a.per_kind = value().parse()?,
            "--blocks" => a.blocks = value().parse()?,
            "--seed" => a.seed = value().parse()?,
            "--kinds" => {
                let v = value();
                a.kinds = v
                    .split(',')
                    .map(|k| {
                        KINDS
                            .iter()
                            .copied()
                            .find(|x| *x == k)
                            .with_context(|| format!("unknown kind {k}"))
                    })
                    .collect::<Result<_>>()?;
            }
            "--kafkaiq-bin" => a.kafkaiq_bin = value().into(),
            "--kafka-libs" => a.kafka_libs = Some(value().into()),
            "--dir" => a.dir = value().into(),
            "--results" => a.results = Some(value().into()),
            "--keep" => a.keep = true,
            "--no-java" => a.java = false,
            _ => usage(),
        }
    }
    if !matches!(a.broker.as_str(), "kafkaiq" | "kafka" | "both") || !(3..=5).contains(&a.nodes) {
        usage();
    }
    Ok(a)
}

/// What one session (one cluster, one schedule) produced.
struct Session {
    kind: BrokerKind,
    seed: u64,
    faults: Vec<FaultRecord>,
    acks: Vec<(i32, u64)>,
    report: checker::Report,
    problems: Vec<String>,
}

/// The schedule: `count` faults drawn from `kinds` so that every kind comes once per round,
/// in an order the seed shuffles.
fn schedule(kinds: &[&'static str], count: usize, seed: u64) -> Vec<&'static str> {
    let mut rng = rng::Rng::new(seed ^ 0x5EED);
    let mut out = Vec::new();
    while out.len() < count {
        let mut round = kinds.to_vec();
        rng.shuffle(&mut round);
        out.extend(round);
    }
    out.truncate(count);
    out
}

fn wait_until(what: &str, deadline: Duration, mut check: impl FnMut() -> bool) -> Result<()> {
    let end = Instant::now() + deadline;
    while !check() {
        if Instant::now() > end {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn run_session(
    args: &Args,
    kind: BrokerKind,
    plan: &[&'static str],
    seed: u64,
    label: &str,
) -> Result<Session> {
    let disk = plan.contains(&"disk-full-leader");
    let net_needed = plan.iter().any(|k| nemesis::needs_net(k));
    let launch = Launch {
        kind,
        kafkaiq_bin: args.kafkaiq_bin.clone(),
        kafka_libs: args.kafka_libs.clone(),
        tmpfs_log_dirs: disk,
    };
    let root = args.dir.join(label);
    let settings: Vec<String> = SETTINGS.iter().map(|s| s.to_string()).collect();
    let start = Instant::now();
    let mut cluster = Cluster::start(launch, &root, args.nodes, &settings)?;
    println!(
        "faults: {label}: {} nodes of {} in {}",
        args.nodes,
        kind.name(),
        root.display()
    );
    let all: Vec<i32> = cluster.nodes.keys().copied().collect();
    wait_until("every node listening", Duration::from_secs(120), || {
        all.iter().all(|id| cluster.listening(*id))
    })?;
    wait_until(
        "every broker registered and unfenced",
        Duration::from_secs(120),
        || cluster.brokers_are(&all, &all),
    )?;
    let rf = args.nodes.min(3) as i16;
    for (topic, partitions) in [
        (TOPIC, PARTITIONS),
        (transactions::TOPIC, transactions::PARTITIONS),
    ] {
        wait_until("the topics created", Duration::from_secs(60), || {
            all.iter().any(|id| {
                matches!(
                    wire::create_topic(
                        cluster.nodes[id].client_addr(),
                        topic,
                        partitions,
                        rf,
                        &[("min.insync.replicas", "2")]
                    ),
                    Some(0 | 36)
                )
            })
        })?;
    }
    let net = if net_needed {
        let ports = cluster
            .nodes
            .iter()
            .map(|(id, n)| (*id, n.ports().to_vec()))
            .collect();
        Some(netfault::Net::new(ports)?)
    } else {
        None
    };

    let recorder = Recorder::new(start);
    let running = Arc::new(AtomicBool::new(true));
    let consuming = Arc::new(AtomicBool::new(true));
    let ids = Arc::new(AtomicU64::new(0));
    let bootstrap = cluster.bootstrap();
    let ledger = transactions::Ledger::default();
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    let outcome = (|| -> Result<(Vec<FaultRecord>, Vec<String>)> {
        let timing = Timing {
            replica_lag_ms: REPLICA_LAG_MS,
            session_ms: SESSION_MS,
        };
        let mut nemesis = Nemesis::new(&mut cluster, net, recorder.clone(), TOPIC, timing, seed);
        nemesis.wait_healthy("creating the topic")?;
        let load = workload::Load {
            bootstrap: &bootstrap,
            topic: TOPIC,
            partitions: PARTITIONS,
            recorder: recorder.clone(),
            running: running.clone(),
        };
        for i in 1..=PRODUCERS {
            producers.push(workload::producer(
                &format!("rdkafka-{i}"),
                &load,
                PRODUCER_RATE,
                ids.clone(),
            )?);
        }
        producers.push(transactions::producer(
            &bootstrap,
            running.clone(),
            ledger.clone(),
        )?);
        if args.java {
            let libs = args
                .kafka_libs
                .as_ref()
                .context("the Java producer needs --kafka-libs (or --no-java)")?;
            producers.push(workload::java_producer(
                "java-1",
                &load,
                JAVA_PRODUCER_RATE,
                JAVA_FIRST_ID,
                libs,
                &root.join("java-1.log"),
            )?);
        }
        consumers.push(workload::assigned_consumer(
            "assign-1",
            &bootstrap,
            TOPIC,
            PARTITIONS,
            recorder.clone(),
            consuming.clone(),
        )?);
        consumers.push(workload::group_consumer(
            "group-1",
            &bootstrap,
            TOPIC,
            "faults-group",
            recorder.clone(),
            consuming.clone(),
        )?);
        if let (true, Some(libs)) = (args.java, args.kafka_libs.as_ref()) {
            for (name, mode) in [
                (JAVA_ASSIGNED, workload::JavaMode::Assign),
                ("java-group-1", workload::JavaMode::Group),
            ] {
                consumers.push(workload::java_consumer(
                    name,
                    &bootstrap,
                    TOPIC,
                    PARTITIONS,
                    mode,
                    libs,
                    &root.join(format!("{name}.log")),
                    recorder.clone(),
                    consuming.clone(),
                )?);
            }
        }
        wait_until(
            "acknowledgements before the first fault",
            Duration::from_secs(60),
            || recorder.acknowledged() >= WARM_UP_ACKS,
        )?;

        let mut faults = Vec::new();
        for (i, kind) in plan.iter().enumerate() {
            let f = match nemesis.run_fault(kind) {
                Ok(f) => f,
                Err(e) => {
                    nemesis.heal_all();
                    return Err(e.context(format!("fault {} ({kind})", i + 1)));
                }
            };
            let ms = |t: Option<u64>, from: u64| {
                t.map_or("–".to_owned(), |t| format!("{} ms", t - from))
            };
            println!(
                "faults: {label}: fault {}/{}: {kind} on {:?}: partitions {:?}, new leader after {}, ISR full {} after the heal, balanced {} after the heal, held {} ms",
                i + 1,
                plan.len(),
                f.victims,
                f.affected,
                ms(f.new_leader_ms, f.injected_ms),
                ms(f.isr_full_ms, f.healed_ms),
                ms(f.balanced_ms, f.healed_ms),
                f.healed_ms - f.injected_ms
            );
            faults.push(f);
        }
        nemesis.heal_all();
        nemesis.wait_healthy("the last fault")?;
        Ok((faults, std::mem::take(&mut nemesis.problems)))
    })();
    // Stop the load, then let the consumers read up to the end.
    running.store(false, Ordering::SeqCst);
    let mut notes: Vec<String> = Vec::new();
    for p in producers {
        notes.extend(p.join(WORKLOAD_JOIN));
    }
    let (faults, mut problems) = match outcome {
        Ok(v) => v,
        Err(e) => (Vec::new(), vec![format!("{e:#}")]),
    };
    let final_read = workload::final_read(&bootstrap, TOPIC, PARTITIONS);
    if let Ok((_, ends)) = &final_read {
        let caught_up = wait_until(
            "the assigned consumers at the high watermark",
            CATCH_UP_DEADLINE,
            || {
                let mut assigned = vec!["assign-1"];
                if args.java {
                    assigned.push(JAVA_ASSIGNED);
                }
                assigned.iter().all(|c| {
                    let polled = recorder.polled_up_to(c);
                    ends.iter()
                        .all(|(p, end)| *end == 0 || polled.get(p).is_some_and(|o| o + 1 >= *end))
                })
            },
        );
        if let Err(e) = caught_up {
            problems.push(format!("{e}"));
        }
    }
    consuming.store(false, Ordering::SeqCst);
    for c in consumers {
        notes.extend(c.join(Duration::from_secs(30)));
    }
    match transactions::read_committed(&bootstrap) {
        Ok(values) => {
            let (summary, found) = transactions::check(&ledger.lock().unwrap(), &values);
            println!("faults: {label}: {summary}");
            problems.extend(found);
        }
        Err(e) => problems.push(format!("transactions: {e:#}")),
    }
    for n in &notes {
        println!("faults: {label}: note: {n}");
    }
    let mut history = recorder.snapshot();
    match final_read {
        Ok((records, ends)) => {
            history.final_read = records
                .into_iter()
                .filter(|r| r.offset < ends[&r.partition])
                .collect();
            history.final_end = ends;
        }
        Err(e) => problems.push(format!("final read: {e:#}")),
    }
    problems.extend(cluster.stop_all());
    for id in cluster.nodes.keys().copied().collect::<Vec<_>>() {
        for p in 0..PARTITIONS {
            let end = history.final_end.get(&p).copied().unwrap_or(0);
            match segments::read(p, &cluster.segments(id, TOPIC, p)) {
                Ok(records) => history.replica_logs.extend(
                    records
                        .into_iter()
                        .filter(|r| r.offset < end)
                        .map(|r| (id, r)),
                ),
                Err(e) => problems.push(format!("node {id} {TOPIC}-{p}: {e:#}")),
            }
        }
    }
    let report = checker::check(&history);
    // A recovery far slower than the rest keeps the nodes' logs too, to find out why.
    let slow: Vec<String> = faults
        .iter()
        .filter(|f| {
            f.isr_full_ms
                .is_some_and(|t| t - f.healed_ms > SLOW_RECOVERY_MS)
        })
        .map(|f| format!("{} on {:?} at {} ms", f.kind, f.victims, f.injected_ms))
        .collect();
    for f in &slow {
        println!("faults: {label}: slow recovery (ISR full after more than {SLOW_RECOVERY_MS} ms): {f}; keeping the nodes' files");
    }
    let keep = args.keep || !problems.is_empty() || !report.valid() || !slow.is_empty();
    cluster.clean_up(keep);
    Ok(Session {
        kind,
        seed,
        faults,
        acks: recorder.ack_times(),
        report,
        problems,
    })
}

/// Faults and acknowledgement times of several sessions on one time line: each session has its
/// own clock, so each is shifted past the one before.
type Timeline = (Vec<FaultRecord>, Vec<(i32, u64)>);

fn merged<'s>(sessions: impl IntoIterator<Item = &'s Session>) -> Timeline {
    let (mut faults, mut acks) = (Vec::new(), Vec::new());
    let mut shift = 0u64;
    for s in sessions {
        let end = s.faults.iter().map(|f| f.window_end_ms).max().unwrap_or(0);
        faults.extend(s.faults.iter().cloned().map(|mut f| {
            f.injected_ms += shift;
            f.healed_ms += shift;
            f.window_end_ms += shift;
            f.new_leader_ms = f.new_leader_ms.map(|t| t + shift);
            f.isr_full_ms = f.isr_full_ms.map(|t| t + shift);
            f.balanced_ms = f.balanced_ms.map(|t| t + shift);
            f
        }));
        acks.extend(s.acks.iter().map(|(p, t)| (*p, t + shift)));
        shift += end + 1_000_000;
    }
    (faults, acks)
}

fn print_figures(sessions: &[&Session]) {
    let (faults, acks) = merged(sessions.iter().copied());
    for (kind, k) in figures::per_kind(&faults, &acks) {
        println!(
            "faults: figures: {kind} ×{}: unavailability {}, new leader {}, ISR full {}, balanced {} (ms, median / p99 / max)",
            k.count,
            figures::format_distribution(&k.unavailability),
            figures::format_distribution(&k.new_leader),
            figures::format_distribution(&k.isr_full),
            figures::format_distribution(&k.balanced),
        );
    }
}

fn markdown(args: &Args, sessions: &[Session]) -> String {
    let mut by_broker: BTreeMap<&str, Timeline> = BTreeMap::new();
    for kind in [BrokerKind::KafkaIq, BrokerKind::ApacheKafka] {
        let mine: Vec<&Session> = sessions.iter().filter(|s| s.kind == kind).collect();
        if !mine.is_empty() {
            by_broker.insert(kind.name(), merged(mine));
        }
    }
    let mut out = String::new();
    out.push_str(&format!(
        "# Fault injection: KafkaIQ and Apache Kafka 4.1.1 side by side\n\n`integration/faults/run.sh --full --seed {}` (block b runs seed + b - 1): {} nodes (broker and controller each), topic of {PARTITIONS} partitions, replication factor 3, min ISR 2; {PRODUCERS} idempotent acks=all librdkafka producers at {PRODUCER_RATE} writes/s each{}. Settings on both: {}; `broker.session.timeout.ms` and the heartbeat interval are Kafka's defaults (9 s, 2 s). Apache Kafka runs with `-Xmx512m` per node. Figures in ms, median / p99 / max; unavailability is the longest gap between acknowledgements on the partitions the fault affected; ISR full and balanced are measured from the heal.\n\n",
        args.seed,
        args.nodes,
        if args.java {
            format!(" and the Java client's at {JAVA_PRODUCER_RATE} writes/s")
        } else {
            String::new()
        },
        SETTINGS.join(", ")
    ));
    out.push_str("| fault | broker | faults | unavailability | new leader | ISR full again | balanced again |\n|---|---|---|---|---|---|---|\n");
    let kinds: Vec<&str> = KINDS.to_vec();
    for kind in kinds {
        for (broker, (faults, acks)) in &by_broker {
            let per = figures::per_kind(faults, acks);
            if let Some(k) = per.get(kind) {
                out.push_str(&format!(
                    "| {kind} | {broker} | {} | {} | {} | {} | {} |\n",
                    k.count,
                    figures::format_distribution(&k.unavailability),
                    figures::format_distribution(&k.new_leader),
                    figures::format_distribution(&k.isr_full),
                    figures::format_distribution(&k.balanced)
                ));
            }
        }
    }
    out.push_str("\n## Checker\n\n");
    for s in sessions {
        out.push_str(&format!(
            "- {}: {}\n",
            s.kind.name(),
            s.report.summary_line(s.faults.len(), s.seed)
        ));
    }
    out
}

fn main() -> Result<()> {
    let args = parse()?;
    if args.kafkaiq_bin.as_os_str().is_empty() && args.broker != "kafka" {
        bail!("--kafkaiq-bin is required");
    }
    let started = Instant::now();
    let brokers: Vec<BrokerKind> = match args.broker.as_str() {
        "kafkaiq" => vec![BrokerKind::KafkaIq],
        "kafka" => vec![BrokerKind::ApacheKafka],
        _ => vec![BrokerKind::KafkaIq, BrokerKind::ApacheKafka],
    };
    let mut sessions = Vec::new();
    if args.full {
        // Blocks of the schedule, each run on every broker in turn (same seed per block).
        let per_block = (args.per_kind * args.kinds.len()).div_ceil(args.blocks);
        for b in 0..args.blocks {
            let seed = args.seed + b as u64;
            let plan = schedule(&args.kinds, per_block, seed);
            for kind in &brokers {
                let label = format!("block-{}-{}", b + 1, kind.name());
                sessions.push(run_session(&args, *kind, &plan, seed, &label)?);
                let s = sessions.last().unwrap();
                println!(
                    "faults: {label}: {}",
                    s.report.summary_line(s.faults.len(), seed)
                );
                // The table so far, so a benchmark stopped early still leaves its figures.
                if let Some(path) = &args.results {
                    std::fs::write(path, markdown(&args, &sessions))?;
                }
            }
        }
    } else {
        let plan = schedule(&args.kinds, args.faults, args.seed);
        for kind in &brokers {
            sessions.push(run_session(&args, *kind, &plan, args.seed, kind.name())?);
        }
    }

    // The run's folder, empty unless a session's files were kept.
    let _ = std::fs::remove_dir(&args.dir);
    let mut total = checker::Report::default();
    let mut injected = 0;
    let mut problems = Vec::new();
    for kind in &brokers {
        let mine: Vec<&Session> = sessions.iter().filter(|s| s.kind == *kind).collect();
        println!("faults: figures for {}:", kind.name());
        print_figures(&mine);
    }
    for s in &sessions {
        let r = &s.report;
        println!(
            "faults: {}: {} writes unknown (timed out), {} definitely failed, {} duplicates across a producer epoch bump, {} non-monotonic polls, {} definitely failed writes read, {} unknown values",
            s.kind.name(),
            r.unknown,
            r.definitely_failed,
            r.duplicates_across_epochs,
            r.nonmonotonic_polls,
            r.failed_reads,
            r.unknown_values
        );
        for e in &r.examples {
            println!("faults: {}: anomaly: {e}", s.kind.name());
        }
        injected += s.faults.len();
        total.acknowledged += r.acknowledged;
        total.lost += r.lost;
        total.duplicates += r.duplicates;
        total.inconsistent_offsets += r.inconsistent_offsets;
        total.skipped_polls += r.skipped_polls;
        total.nonmonotonic_polls += r.nonmonotonic_polls;
        total.unseen += r.unseen;
        total.failed_reads += r.failed_reads;
        total.unknown_values += r.unknown_values;
        problems.extend(s.problems.iter().map(|p| format!("{}: {p}", s.kind.name())));
    }
    if args.full {
        let path = args
            .results
            .clone()
            .unwrap_or_else(|| PathBuf::from("benches/results/faults.md"));
        std::fs::write(&path, markdown(&args, &sessions))?;
        println!("faults: figures written to {}", path.display());
    }
    for p in &problems {
        println!("faults: problem: {p}");
    }
    // A problem (a node exiting by itself, a cluster that did not heal) fails the run too.
    let mut line = total.summary_line(injected, args.seed);
    if !problems.is_empty() && line.ends_with(": valid") {
        line = line.replace(": valid", ": invalid");
    }
    println!("faults: took {} s", started.elapsed().as_secs());
    println!("{line}");
    if line.ends_with(": valid") {
        Ok(())
    } else {
        std::process::exit(1)
    }
}
