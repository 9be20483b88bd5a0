//! Crash test of log compaction: a child process (this test binary, re-run as the ignored
//! `cleaner_crash_child` test) appends keyed records to a compacted log, rolls small segments
//! and cleans it over and over, flushing now and then and printing each flushed offset, and is
//! killed with SIGKILL at a random moment — often in the middle of a cleaning or its swap.
//!
//! Every record's key and value are functions of its offset, so after each kill the reopened
//! log is checked against a model: every readable record is one the child wrote at that offset
//! (nothing corrupt, duplicated or moved), offsets only grow, and for every key the latest
//! record written below the flushed offset is still there (cleaning lost nothing that must
//! survive). No `.cleaned` or `.swap` file outlives the open. The next child continues on the
//! same log, so cleanings run over logs that were themselves recovered mid-swap.
//!
//! `KAFKAIQ_CLEANER_CRASH_ITERATIONS` (default 30) sets the number of kills,
//! `KAFKAIQ_CRASH_SEED` the seed; a failure prints the seed.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::splitmix;

use kafkaiq_storage::batch::builder::{batch_with_keys, Spec};
use kafkaiq_storage::batch::{BatchIter, RECORD_BATCH_OVERHEAD};
use kafkaiq_storage::cleaner::{filter, OffsetMap, DEFAULT_LOAD_FACTOR};
use kafkaiq_storage::{LogConfig, LogManager, TopicPartition};

const ITERATIONS_DEFAULT: usize = 30;
const KEYS: u64 = 40;
const RECORDS_PER_BATCH: i64 = 4;

fn tp() -> TopicPartition {
    TopicPartition::new("compacted", 0)
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        segment_index_bytes: 4096,
        index_interval_bytes: 256,
        retention_ms: -1,
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        ..LogConfig::default()
    }
}

fn key_of(offset: i64) -> String {
    format!("key-{}", splitmix(offset as u64) % KEYS)
}

fn value_of(offset: i64) -> Vec<u8> {
    let r = splitmix(!(offset as u64));
    (0..(r % 200) as usize)
        .map(|i| (r as u8).wrapping_add(i as u8))
        .collect()
}

/// The batch the child appends at `offset`: a function of the offset only.
fn batch_at(offset: i64) -> Vec<u8> {
    let keys: Vec<String> = (offset..offset + RECORDS_PER_BATCH).map(key_of).collect();
    let values: Vec<Vec<u8>> = (offset..offset + RECORDS_PER_BATCH).map(value_of).collect();
    let ks: Vec<Option<&[u8]>> = keys.iter().map(|k| Some(k.as_bytes())).collect();
    let vs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    batch_with_keys(
        &Spec {
            base_offset: offset,
            ..Spec::default()
        },
        &ks,
        &vs,
    )
}

#[test]
#[ignore = "the child process of a_killed_cleaner_loses_and_duplicates_nothing"]
fn cleaner_crash_child() {
    let (Ok(dir), Ok(seed)) = (
        std::env::var("KAFKAIQ_CRASH_DIR"),
        std::env::var("KAFKAIQ_CRASH_CHILD_SEED"),
    ) else {
        panic!("cleaner_crash_child is started by a_killed_cleaner_loses_and_duplicates_nothing");
    };
    let mut rng: u64 = seed.parse().unwrap();
    let manager = LogManager::open(&[PathBuf::from(dir)], config(), 0).unwrap();
    let log = manager.get_or_create(&tp(), config(), 0).unwrap();
    log.update_config(config());
    let mut map = OffsetMap::new(64 * 1024);
    println!("started {}", log.log_end_offset());
    loop {
        let offset = log.log_end_offset();
        log.append_as_leader(&batch_at(offset), 0, 0).unwrap();
        // A single replica: everything appended is committed.
        log.update_high_watermark(log.log_end_offset());
        rng = splitmix(rng);
        if rng % 8 == 0 {
            log.roll(0).unwrap();
            manager
                .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, 0, &mut |_| {})
                .unwrap();
        }
        if rng % 13 == 0 {
            log.flush().unwrap();
            manager
                .checkpoint_recovery_points_and_log_start_offsets()
                .unwrap();
            println!("flushed {}", log.recovery_point());
        }
    }
}

/// Opens the log like a restarting broker and checks it against the model; returns the log
/// end offset and the number of records readable.
fn verify(dir: &Path, flushed: i64) -> (i64, usize) {
    let manager = LogManager::open(&[dir.to_path_buf()], config(), 0).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir.join(tp().dir_name()))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "left after the open: {leftovers:?}");
    let Some(log) = manager.get(&tp()) else {
        assert_eq!(flushed, 0, "the log vanished");
        return (0, 0);
    };
    let leo = log.log_end_offset();
    assert!(
        leo >= flushed,
        "log end offset {leo} lost flushed data up to {flushed}"
    );
    let mut present: HashMap<String, i64> = HashMap::new();
    let mut next = log.log_start_offset();
    let mut last_offset = -1;
    let mut readable = 0;
    while next < leo {
        let r = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        assert!(
            !r.records.is_empty(),
            "read at {next} below the log end {leo} returned nothing"
        );
        for (at, h) in BatchIter::new(&r.records) {
            let stored = &r.records[at..at + h.size_in_bytes()];
            assert!(
                kafkaiq_storage::batch::crc_valid(stored),
                "bad CRC at {}",
                h.base_offset
            );
            assert_eq!(
                h.base_offset % RECORDS_PER_BATCH,
                0,
                "batches keep their offsets"
            );
            assert_eq!(h.last_offset_delta as i64, RECORDS_PER_BATCH - 1);
            let section = &stored[RECORD_BATCH_OVERHEAD..];
            for rec in filter::parse_records(section, &h).unwrap() {
                assert!(
                    rec.offset > last_offset,
                    "offset {} after {last_offset}",
                    rec.offset
                );
                last_offset = rec.offset;
                assert_eq!(
                    rec.key,
                    Some(key_of(rec.offset).as_bytes()),
                    "key at {}",
                    rec.offset
                );
                assert_eq!(
                    rec.value,
                    Some(value_of(rec.offset).as_slice()),
                    "value at {}",
                    rec.offset
                );
                present.insert(key_of(rec.offset), rec.offset);
                readable += 1;
            }
            next = h.next_offset();
        }
    }
    // For every key, its latest record below the flushed offset (or a later one) is readable.
    let mut latest: HashMap<String, i64> = HashMap::new();
    for offset in 0..flushed {
        latest.insert(key_of(offset), offset);
    }
    for (key, offset) in &latest {
        let found = present.get(key).copied().unwrap_or(-1);
        assert!(
            found >= *offset,
            "{key}: latest flushed at {offset}, readable only up to {found}"
        );
    }
    log.verify_indexes().unwrap();
    (leo, readable)
}

#[test]
fn a_killed_cleaner_loses_and_duplicates_nothing() {
    let iterations = common::iterations("KAFKAIQ_CLEANER_CRASH_ITERATIONS", ITERATIONS_DEFAULT);
    let seed = common::seed("cleaner crash test");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("dir");
    let mut rng = seed;
    let (mut max_leo, mut flushed, mut readable) = (0i64, 0i64, 0usize);
    for _ in 0..iterations {
        rng = splitmix(rng);
        let child_seed = rng;
        rng = splitmix(rng);
        let killed = common::run_and_kill(
            "cleaner_crash_child",
            &[
                ("KAFKAIQ_CRASH_DIR", dir.display().to_string()),
                ("KAFKAIQ_CRASH_CHILD_SEED", child_seed.to_string()),
            ],
            Duration::from_millis(20 + rng % 150),
        );
        assert!(
            killed.was_running,
            "seed {seed}: the child stopped by itself: {}",
            killed.stdout
        );
        flushed = common::flushed(&killed.stdout).unwrap_or(0).max(flushed);
        let (leo, now_readable) = verify(&dir, flushed);
        max_leo = max_leo.max(leo);
        readable = now_readable;
    }
    eprintln!(
        "cleaner crash test: {iterations} SIGKILLs, log end offset {max_leo}, flushed {flushed}, \
         {readable} records readable"
    );
    assert!(max_leo > 1000, "the child barely wrote: {max_leo}");
    assert!(
        readable * 2 < max_leo as usize,
        "the log was hardly cleaned: {readable} of {max_leo} records readable"
    );
}
