//! Writes a compacted sample log and cleans it with the crate's log cleaner, so that Apache
//! Kafka's `kafka.tools.DumpLogSegments` can check what a cleaning leaves on disk
//! (`integration/suites/20-dump-log-segments.sh`).
//!
//! Usage: `write_compacted_log <log dir>` — creates the partition `compacted-0` under
//! `<log dir>` (16 KiB segments, `cleanup.policy=compact`), appends keyed records in batches of
//! every codec, some of an idempotent producer, then tombstones for a few keys, and cleans it
//! until nothing is due. Every record's key is `key-<n>` and its value `value-<offset>-`. It
//! writes `<log dir>/expected` with one `key offset` line per key still readable (its latest
//! record; tombstones stay, within `delete.retention.ms`) and prints one `key=value` summary
//! line on stdout.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;

use kafkaiq_storage::batch::builder::{batch_with_keys, batch_with_tombstones, compressed, Spec};
use kafkaiq_storage::cleaner::{CleanOutcome, OffsetMap, DEFAULT_LOAD_FACTOR};
use kafkaiq_storage::{LogConfig, LogManager, TopicPartition};

const KEYS: usize = 30;
const BATCHES: usize = 400;
const PER_BATCH: usize = 8;
const TOMBSTONED_KEYS: usize = 5;
const PRODUCER_ID: i64 = 777;
const NOW_MS: i64 = 1_700_000_000_000;

fn main() -> Result<(), Box<dyn Error>> {
    let log_dir = PathBuf::from(
        std::env::args_os()
            .nth(1)
            .ok_or("usage: write_compacted_log <log dir>")?,
    );
    std::fs::create_dir_all(&log_dir)?;
    let config = LogConfig {
        segment_bytes: 16 * 1024,
        compact: true,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let manager = LogManager::open(std::slice::from_ref(&log_dir), config.clone(), NOW_MS)?;
    let tp = TopicPartition::new("compacted", 0);
    let log = manager.get_or_create(&tp, config, NOW_MS)?;
    let mut latest: BTreeMap<String, i64> = BTreeMap::new();
    let mut sequence = 0;
    let mut cleanings = 0;
    let mut map = OffsetMap::new(1 << 20);
    // Two rounds: the second cleaning rewrites the segments the first left, grouping them.
    for round in [0..BATCHES, BATCHES..BATCHES + BATCHES / 4] {
        for i in round.clone() {
            append_batch(&log, i, &mut sequence, &mut latest)?;
        }
        if round.start != 0 {
            // Last, so the tombstones are their keys' latest records.
            let tombstoned: Vec<String> =
                (0..TOMBSTONED_KEYS).map(|k| format!("key-{k}")).collect();
            let records: Vec<(&[u8], Option<&[u8]>)> =
                tombstoned.iter().map(|k| (k.as_bytes(), None)).collect();
            let base = log.log_end_offset();
            let spec = Spec {
                base_timestamp: NOW_MS + 2 * BATCHES as i64,
                ..Spec::default()
            };
            log.append_as_leader(&batch_with_tombstones(&spec, &records), 0, NOW_MS)?;
            for (r, k) in tombstoned.iter().enumerate() {
                latest.insert(k.clone(), base + r as i64);
            }
        }
        log.roll(NOW_MS)?;
        log.flush()?;
        log.update_high_watermark(log.log_end_offset());
        while let Some(report) =
            manager.clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW_MS, &mut |_| {})?
        {
            if !matches!(report.outcome, CleanOutcome::Cleaned { .. }) {
                return Err(format!("cleaning did not finish: {report:?}").into());
            }
            cleanings += 1;
            if cleanings > 10 {
                return Err("the cleaner never stops".into());
            }
        }
    }
    let expected: String = latest.iter().map(|(k, o)| format!("{k} {o}\n")).collect();
    std::fs::write(log_dir.join("expected"), expected)?;
    println!(
        "partition_dir={} log_end_offset={} keys={} tombstones={} cleanings={} segments={} \
         bytes={} producer_id={PRODUCER_ID}",
        log.dir().display(),
        log.log_end_offset(),
        latest.len(),
        TOMBSTONED_KEYS,
        cleanings,
        log.segment_count(),
        log.size_bytes(),
    );
    manager.shutdown()?;
    Ok(())
}

/// Appends batch `i`: `PER_BATCH` keyed records, codec `i % 5`, every fifth idempotent.
fn append_batch(
    log: &kafkaiq_storage::Log,
    i: usize,
    sequence: &mut i32,
    latest: &mut BTreeMap<String, i64>,
) -> Result<(), Box<dyn Error>> {
    let base = log.log_end_offset();
    let keys: Vec<String> = (0..PER_BATCH)
        .map(|r| format!("key-{}", (i * 7 + r * 3) % KEYS))
        .collect();
    let values: Vec<String> = (0..PER_BATCH)
        .map(|r| format!("value-{}-{}", base + r as i64, "x".repeat(i % 40)))
        .collect();
    let ks: Vec<Option<&[u8]>> = keys.iter().map(|k| Some(k.as_bytes())).collect();
    let vs: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    let idempotent = i % 5 == 0;
    let spec = Spec {
        base_timestamp: NOW_MS + i as i64,
        producer_id: if idempotent { PRODUCER_ID } else { -1 },
        producer_epoch: if idempotent { 0 } else { -1 },
        base_sequence: if idempotent { *sequence } else { -1 },
        ..Spec::default()
    };
    if idempotent {
        *sequence += PER_BATCH as i32;
    }
    let codec = (i % 5) as u8;
    let plain = batch_with_keys(&spec, &ks, &vs);
    let batch = if codec == 0 {
        plain
    } else {
        compressed(&plain, codec, codec == 2)
    };
    log.append_as_leader(&batch, 0, NOW_MS)?;
    for (r, k) in keys.into_iter().enumerate() {
        latest.insert(k, base + r as i64);
    }
    Ok(())
}
