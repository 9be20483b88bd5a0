//! Criterion benchmarks of the storage engine:
//! * `append/16KiB`: `Log::append_as_leader` of 16 KiB batches, next to `plain_write/16KiB`, a
//!   plain sequential `write()` of the same bytes to a file in the same directory (the ceiling);
//! * `read`: `Log::read` of 1 MiB fetches, sequentially through a 64 MiB log, and of single
//!   batches at random offsets (16 KiB batches, and one-record batches);
//! * `index_lookup`: `OffsetIndex::lookup` in a full 10 MiB index;
//! * `clean`: one cleaning (`cleaner::clean`) of a compacted log of 1 MiB segments holding 500k
//!   records of 100 B values over 50k keys (about 58 MiB; one in ten records stays), each
//!   iteration on a fresh copy of the log, the copy and open untimed; throughput in log bytes.
//!
//! Nothing is fsynced in either append case (Kafka's default flush policy); every 64 MiB both
//! files are emptied outside the timed region so the runs do not fill the disk.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kafkaiq_storage::batch::builder::{batch, batch_with_keys, Spec};
use kafkaiq_storage::cleaner::{clean, CleanOutcome, CleanSettings, CleanableRange, OffsetMap};
use kafkaiq_storage::index::OffsetIndex;
use kafkaiq_storage::{Log, LogConfig};

const BATCH_BYTES: usize = 16 * 1024;
const RESET_BYTES: usize = 64 << 20;

/// The clock the benches append at, and their records' timestamps: a produce refuses
/// timestamps more than `message.timestamp.after.max.ms` ahead of it.
const NOW_MS: i64 = 1_700_000_000_000;

/// A batch of 16 records whose size is exactly 16 KiB.
fn batch_16k() -> Vec<u8> {
    let mut value_len = BATCH_BYTES / 16;
    loop {
        let value = vec![7u8; value_len];
        let values: Vec<&[u8]> = (0..16).map(|_| value.as_slice()).collect();
        let b = batch(
            &Spec {
                base_timestamp: NOW_MS,
                ..Spec::default()
            },
            &values,
        );
        match b.len().cmp(&BATCH_BYTES) {
            std::cmp::Ordering::Equal => return b,
            std::cmp::Ordering::Greater => value_len -= 1,
            std::cmp::Ordering::Less => return b, // varint step; close enough
        }
    }
}

fn append(c: &mut Criterion) {
    let dir =
        tempfile::tempdir_in(std::env::var("KAFKAIQ_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
            .unwrap();
    let b = batch_16k();
    let per_reset = RESET_BYTES / b.len();
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Bytes(b.len() as u64));

    // retention.bytes 0: the retention pass between rounds deletes all but the active segment
    let config = LogConfig {
        retention_bytes: 0,
        ..LogConfig::default()
    };
    let log = Log::open(&dir.path().join("bench-0"), config, 0, true, 0).unwrap();
    group.bench_function(BenchmarkId::new("log_append_as_leader", "16KiB"), |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(per_reset as u64);
                let start = Instant::now();
                for _ in 0..n {
                    log.append_as_leader(&b, 1, NOW_MS).unwrap();
                }
                total += start.elapsed();
                done += n;
                log.roll(0).unwrap();
                log.delete_old_segments(0).unwrap();
            }
            total
        })
    });

    let mut file = File::create(dir.path().join("plain.bin")).unwrap();
    group.bench_function(BenchmarkId::new("plain_write", "16KiB"), |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let n = (iters - done).min(per_reset as u64);
                let start = Instant::now();
                for _ in 0..n {
                    file.write_all(&b).unwrap();
                }
                total += start.elapsed();
                done += n;
                file.set_len(0).unwrap();
                file.seek(SeekFrom::Start(0)).unwrap();
            }
            total
        })
    });
    group.finish();
}

fn read(c: &mut Criterion) {
    let dir =
        tempfile::tempdir_in(std::env::var("KAFKAIQ_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
            .unwrap();
    let b = batch_16k();
    let log = Log::open(
        &dir.path().join("bench-0"),
        LogConfig::default(),
        0,
        true,
        0,
    )
    .unwrap();
    for _ in 0..(RESET_BYTES / b.len()) {
        log.append_as_leader(&b, 1, NOW_MS).unwrap();
    }
    let leo = log.log_end_offset();
    let fetch_bytes = 1 << 20;
    let mut group = c.benchmark_group("read");
    group.throughput(Throughput::Bytes(fetch_bytes as u64));
    let mut next = 0;
    group.bench_function(BenchmarkId::new("log_read_sequential", "1MiB"), |bench| {
        bench.iter(|| {
            if next >= leo {
                next = 0;
            }
            let r = log.read(next, fetch_bytes, i64::MAX, true).unwrap();
            next += (r.records.len() / b.len()) as i64 * 16;
            r
        })
    });
    group.throughput(Throughput::Bytes(b.len() as u64));
    let mut i: u64 = 1;
    group.bench_function(
        BenchmarkId::new("log_read_one_batch_random", "16KiB"),
        |bench| {
            bench.iter(|| {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let offset = (i >> 33) as i64 % leo;
                log.read(offset, b.len(), i64::MAX, true).unwrap()
            })
        },
    );

    // Small batches (one 100-byte record): the scan from the index entry to the batch matters.
    let small_log = Log::open(
        &dir.path().join("small-0"),
        LogConfig::default(),
        0,
        true,
        0,
    )
    .unwrap();
    let value = [9u8; 100];
    let small = batch(
        &Spec {
            base_timestamp: NOW_MS,
            ..Spec::default()
        },
        &[&value],
    );
    for _ in 0..((16 << 20) / small.len()) {
        small_log.append_as_leader(&small, 1, NOW_MS).unwrap();
    }
    let small_leo = small_log.log_end_offset();
    group.throughput(Throughput::Bytes(small.len() as u64));
    group.bench_function(
        BenchmarkId::new("log_read_one_batch_random", "161B"),
        |bench| {
            bench.iter(|| {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let offset = (i >> 33) as i64 % small_leo;
                small_log.read(offset, small.len(), i64::MAX, true).unwrap()
            })
        },
    );
    group.finish();
}

fn index_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let index_bytes = 10 * 1024 * 1024;
    let mut index = OffsetIndex::open(&dir.path().join("0.index"), 0, index_bytes, false).unwrap();
    let mut n = 0i64;
    while index
        .append(n * 16 + 15, (n * 4096) as u32)
        .expect("index append")
    {
        n += 1;
    }
    let max = n * 16;
    let mut i: u64 = 1;
    c.bench_function("index_lookup/offset_index_10MiB", |bench| {
        bench.iter(|| {
            i = i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            index.lookup((i >> 33) as i64 % max)
        })
    });
}

fn clean_log(c: &mut Criterion) {
    let root =
        tempfile::tempdir_in(std::env::var("KAFKAIQ_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
            .unwrap();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        compact: true,
        ..LogConfig::default()
    };
    let template = root.path().join("template-0");
    let (records, keys, per_batch) = (500_000usize, 50_000usize, 1_000usize);
    let log = Log::open(&template, config.clone(), 0, true, NOW_MS).unwrap();
    let pad = "x".repeat(87);
    for first in (0..records).step_by(per_batch) {
        let range = first..(first + per_batch).min(records);
        let ks: Vec<String> = range
            .clone()
            .map(|o| format!("key-{:08}", o % keys))
            .collect();
        let vs: Vec<String> = range.map(|o| format!("{o:012}-{pad}")).collect();
        let ks: Vec<Option<&[u8]>> = ks.iter().map(|k| Some(k.as_bytes())).collect();
        let vs: Vec<&[u8]> = vs.iter().map(|v| v.as_bytes()).collect();
        let spec = Spec {
            base_timestamp: NOW_MS,
            ..Spec::default()
        };
        log.append_as_leader(&batch_with_keys(&spec, &ks, &vs), 0, NOW_MS)
            .unwrap();
    }
    log.roll(NOW_MS).unwrap();
    log.flush().unwrap();
    let size = log.size_bytes();
    log.close().unwrap();
    drop(log);
    let settings = CleanSettings {
        delete_retention_ms: 86_400_000,
        now_ms: NOW_MS,
        load_factor: 0.9,
    };
    let mut map = OffsetMap::new(128 << 20);
    let mut group = c.benchmark_group("clean");
    group.throughput(Throughput::Bytes(size));
    group.sample_size(10);
    let mut copies = 0;
    group.bench_function(BenchmarkId::new("clean", "58MiB_1in10_kept"), |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                copies += 1;
                let dir = root.path().join(format!("copy-{copies}"));
                std::fs::create_dir(&dir).unwrap();
                for entry in std::fs::read_dir(&template).unwrap() {
                    let entry = entry.unwrap();
                    std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
                }
                let log = Log::open(&dir, config.clone(), 0, true, NOW_MS).unwrap();
                let range = CleanableRange {
                    first_dirty: 0,
                    first_uncleanable: i64::MAX,
                };
                let start = Instant::now();
                let outcome = clean(&log, range, &mut map, &settings, &mut |_| {}).unwrap();
                total += start.elapsed();
                assert!(
                    matches!(outcome, CleanOutcome::Cleaned { .. }),
                    "{outcome:?}"
                );
                log.close().unwrap();
                drop(log);
                std::fs::remove_dir_all(&dir).unwrap();
            }
            total
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = append, read, index_lookup, clean_log
}
criterion_main!(benches);
