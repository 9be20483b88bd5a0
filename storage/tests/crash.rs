//! Crash test: a child process (this test binary, re-run as the ignored `crash_child` test)
//! appends to a log in a loop, flushing now and then and printing each flushed offset, and is
//! killed with SIGKILL at a random moment. Sometimes garbage is then appended to the last
//! segment, as a torn write would leave it. After every kill the log is reopened (recovery) and
//! must hold a valid prefix of what the child wrote — byte for byte — that includes everything
//! reported flushed, with indexes that agree with the log. The next child continues on the same
//! log, so recovery runs over logs that were themselves recovered.
//!
//! `KAFKAIQ_CRASH_ITERATIONS` (default 60) sets the number of kills, `KAFKAIQ_CRASH_SEED` the
//! seed; a failure prints the seed.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::splitmix;

use kafkaiq_storage::batch::builder::{batch, Spec};
use kafkaiq_storage::batch::BatchIter;
use kafkaiq_storage::{LogConfig, LogManager, TopicPartition};

const ITERATIONS_DEFAULT: usize = 60;
/// Kills per log directory before a fresh one is started (keeps the verification reads small).
const KILLS_PER_DIR: usize = 10;

fn tp() -> TopicPartition {
    TopicPartition::new("crash", 0)
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 256 * 1024,
        segment_index_bytes: 16 * 1024,
        index_interval_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// The leader epoch the child stamps on the batch at `offset`.
fn epoch_for(offset: i64) -> i32 {
    1 + (offset / 500) as i32
}

/// The batch the child appends at `offset`, as it must be stored: a function of the offset only.
fn expected_batch(offset: i64) -> Vec<u8> {
    let r = splitmix(offset as u64);
    let records = 1 + (r % 20) as usize;
    let value_len = ((r >> 8) % 1500) as usize;
    let fill = (r >> 20) as u8;
    let value: Vec<u8> = (0..value_len).map(|i| fill.wrapping_add(i as u8)).collect();
    let values: Vec<&[u8]> = (0..records).map(|_| value.as_slice()).collect();
    let spec = Spec {
        base_offset: offset,
        base_timestamp: 1_000_000 + offset,
        partition_leader_epoch: epoch_for(offset),
        ..Spec::default()
    };
    batch(&spec, &values)
}

/// Runs in the child process only.
#[test]
#[ignore = "the child process of crash_recovery_keeps_a_valid_prefix"]
fn crash_child() {
    let (Ok(dir), Ok(seed)) = (
        std::env::var("KAFKAIQ_CRASH_DIR"),
        std::env::var("KAFKAIQ_CRASH_CHILD_SEED"),
    ) else {
        panic!("crash_child is started by crash_recovery_keeps_a_valid_prefix");
    };
    let mut rng: u64 = seed.parse().unwrap();
    let manager = LogManager::open(&[PathBuf::from(dir)], config(), 0).unwrap();
    let log = manager.get_or_create(&tp(), config(), 0).unwrap();
    println!("started {}", log.log_end_offset());
    let mut appends_until_flush = 1 + splitmix(rng) % 50;
    loop {
        let offset = log.log_end_offset();
        let info = log
            .append_as_leader(&expected_batch(offset), epoch_for(offset), 0)
            .unwrap();
        assert_eq!(info.first_offset, offset);
        // Bursts of appends with short pauses bound how much a run writes (and the test reads
        // back) in a release build, while most kills still land in the middle of a burst.
        if offset % 16 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        appends_until_flush -= 1;
        if appends_until_flush == 0 {
            log.flush().unwrap();
            manager
                .checkpoint_recovery_points_and_log_start_offsets()
                .unwrap();
            println!("flushed {}", log.recovery_point());
            rng = splitmix(rng);
            appends_until_flush = 1 + rng % 50;
        }
    }
}

struct Outcome {
    log_end_offset: i64,
    batches: usize,
}

/// Opens the log like a restarting broker and checks it against what the child wrote.
fn verify(dir: &Path, flushed: i64, clean_close: bool) -> Outcome {
    let manager = LogManager::open(&[dir.to_path_buf()], config(), 0).unwrap();
    let Some(log) = manager.get(&tp()) else {
        assert_eq!(flushed, 0, "the log vanished");
        return Outcome {
            log_end_offset: 0,
            batches: 0,
        };
    };
    let leo = log.log_end_offset();
    assert!(
        leo >= flushed,
        "log end offset {leo} lost flushed data up to {flushed}"
    );
    assert_eq!(log.log_start_offset(), 0);
    let mut next = 0;
    let mut batches = 0;
    while next < leo {
        let r = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        let mut progressed = false;
        for (at, h) in BatchIter::new(&r.records) {
            assert_eq!(h.base_offset, next, "offsets are contiguous");
            let expected = expected_batch(next);
            let stored = &r.records[at..at + h.size_in_bytes()];
            assert!(
                stored == expected.as_slice(),
                "the batch at {next} differs from the one written"
            );
            next = h.next_offset();
            batches += 1;
            progressed = true;
        }
        assert!(
            progressed,
            "read at {next} below the log end {leo} returned nothing"
        );
    }
    assert_eq!(next, leo);
    log.verify_indexes().unwrap();
    if leo > 0 {
        assert_eq!(
            log.latest_epoch(),
            Some(epoch_for(leo - 1).min(epoch_for(last_base(leo))))
        );
    }
    if clean_close {
        manager.shutdown().unwrap();
    }
    Outcome {
        log_end_offset: leo,
        batches,
    }
}

/// Base offset of the batch ending just below `leo` (the batch sizes are a function of offsets).
fn last_base(leo: i64) -> i64 {
    let mut o = 0;
    let mut last = 0;
    while o < leo {
        last = o;
        o += 1 + (splitmix(o as u64) % 20) as i64;
    }
    last
}

/// Appends to the newest segment what a torn write could leave: random bytes, the first part of
/// a batch, or a whole batch with one byte flipped (a bad CRC). Returns false if there is no
/// segment yet.
fn tear(dir: &Path, rng: u64) -> bool {
    let part = dir.join(tp().dir_name());
    let Ok(entries) = std::fs::read_dir(&part) else {
        return false;
    };
    let newest = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max();
    let Some(newest) = newest else { return false };
    // The torn batch is the one that would come next.
    let existing = std::fs::read(&newest).unwrap();
    let base: i64 = newest
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut valid_end = 0;
    let mut offset = base;
    for (at, h) in BatchIter::new(&existing) {
        if at != valid_end || h.base_offset != offset {
            break;
        }
        valid_end = at + h.size_in_bytes();
        offset = h.next_offset();
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    file.set_len(valid_end as u64).unwrap();
    let mut bytes = expected_batch(offset);
    match rng % 3 {
        0 => {
            let len = 1 + (rng >> 8) as usize % 3000;
            bytes = (0..len)
                .map(|i| (splitmix(rng ^ i as u64) & 0xff) as u8)
                .collect();
        }
        1 => bytes.truncate(1 + (rng >> 8) as usize % (bytes.len() - 1)),
        _ => {
            let at = 61 + (rng >> 8) as usize % (bytes.len() - 61);
            bytes[at] ^= 0x40;
        }
    }
    use std::io::{Seek, Write};
    file.seek(std::io::SeekFrom::End(0)).unwrap();
    file.write_all(&bytes).unwrap();
    true
}

#[test]
fn crash_recovery_keeps_a_valid_prefix() {
    let iterations = common::iterations("KAFKAIQ_CRASH_ITERATIONS", ITERATIONS_DEFAULT);
    let seed = common::seed("crash test");
    let root = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut rng = seed;
    let (mut kills, mut tears, mut max_leo, mut total_batches) = (0, 0, 0i64, 0usize);
    let mut killed_mid_run = 0;
    for i in 0..iterations {
        let dir = root.path().join(format!("dir{}", i / KILLS_PER_DIR));
        let flushed_before = if i % KILLS_PER_DIR == 0 {
            0
        } else {
            verify(&dir, 0, false).log_end_offset
        };
        rng = splitmix(rng);
        let child_seed = rng;
        rng = splitmix(rng);
        // Killed at a random moment once it has started.
        let killed = common::run_and_kill(
            "crash_child",
            &[
                ("KAFKAIQ_CRASH_DIR", dir.display().to_string()),
                ("KAFKAIQ_CRASH_CHILD_SEED", child_seed.to_string()),
            ],
            Duration::from_millis(5 + rng % 120),
        );
        kills += 1;
        killed_mid_run += killed.was_running as usize;
        let out = killed.stdout;
        assert!(
            out.contains("started"),
            "seed {seed}: the child did not start: {out}"
        );
        let flushed = common::flushed(&out).unwrap_or(0).max(flushed_before);
        rng = splitmix(rng);
        if rng % 2 == 0 && tear(&dir, rng >> 1) {
            tears += 1;
        }
        rng = splitmix(rng);
        let outcome = verify(&dir, flushed, rng % 2 == 0);
        max_leo = max_leo.max(outcome.log_end_offset);
        total_batches += outcome.batches;
    }
    eprintln!(
        "crash test: {kills} SIGKILLs ({killed_mid_run} while appending), {tears} torn tails, \
         largest log end offset {max_leo}, {total_batches} batches verified, {:?}",
        started.elapsed()
    );
    assert_eq!(kills, iterations);
    assert!(
        killed_mid_run * 10 >= kills * 9,
        "the child should be running when killed"
    );
    assert!(max_leo > 0, "the child never appended");
}
