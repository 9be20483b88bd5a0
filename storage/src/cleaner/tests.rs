use std::collections::BTreeMap;

use super::*;
use crate::batch::builder::{batch_with_keys, batch_with_tombstones, compressed, Spec};
use crate::batch::{BatchIter, RECORD_BATCH_OVERHEAD};
use crate::compression;
use crate::config::LogConfig;

const NOW: i64 = 1_000_000;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        segment_index_bytes: 4096,
        index_interval_bytes: 128,
        compact: true,
        ..LogConfig::default()
    }
}

fn settings(now_ms: i64) -> CleanSettings {
    CleanSettings {
        delete_retention_ms: 1_000,
        now_ms,
        load_factor: DEFAULT_LOAD_FACTOR,
    }
}

/// (offset, key, value) of every record readable from the log's start, across its gaps.
fn records(log: &Log) -> Vec<(i64, Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        assert!(!read.records.is_empty(), "stuck at {next}");
        for (at, h) in BatchIter::new(&read.records) {
            let batch = &read.records[at..at + h.size_in_bytes()];
            assert!(crate::batch::crc_valid(batch));
            let section = &batch[RECORD_BATCH_OVERHEAD..];
            let raw =
                compression::decompress(h.compression_codec() as u8, section, 1 << 24).unwrap();
            for r in filter::parse_records(&raw, &h).unwrap() {
                if r.offset >= next {
                    out.push((
                        r.offset,
                        r.key.unwrap().to_vec(),
                        r.value.map(|v| v.to_vec()),
                    ));
                }
            }
            next = h.next_offset();
        }
    }
    out
}

/// Writes `count` records over `keys` keys, value "v<offset>", in batches of `per_batch`.
fn fill(log: &Log, count: usize, keys: usize, per_batch: usize, codec: u8) {
    let mut i = log.log_end_offset() as usize;
    let end = i + count;
    while i < end {
        let n = per_batch.min(end - i);
        let key_strings: Vec<String> = (i..i + n).map(|o| format!("key-{}", o % keys)).collect();
        let value_strings: Vec<String> = (i..i + n).map(|o| format!("v{o}")).collect();
        let ks: Vec<Option<&[u8]>> = key_strings.iter().map(|k| Some(k.as_bytes())).collect();
        let vs: Vec<&[u8]> = value_strings.iter().map(|v| v.as_bytes()).collect();
        let b = batch_with_keys(&Spec::default(), &ks, &vs);
        let b = if codec == 0 {
            b
        } else {
            compressed(&b, codec, codec == 2)
        };
        log.append_as_leader(&b, 0, NOW).unwrap();
        i += n;
    }
}

/// The latest value per key, as a reader of the whole log sees it.
fn latest(records: &[(i64, Vec<u8>, Option<Vec<u8>>)]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

fn clean_all(log: &Log, map: &mut OffsetMap, now_ms: i64) -> CleanOutcome {
    let range = CleanableRange {
        first_dirty: 0,
        first_uncleanable: i64::MAX,
    };
    clean(log, range, map, &settings(now_ms), &mut |_| {}).unwrap()
}

#[test]
fn a_cleaning_keeps_the_latest_value_of_each_key_at_its_offset_for_every_codec() {
    for codec in 0..=4u8 {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
        fill(&log, 400, 10, 4, codec);
        log.roll(NOW).unwrap();
        let before = records(&log);
        let segments_before = log.segment_count();
        assert!(segments_before > 5, "{segments_before}");
        let mut map = OffsetMap::new(1 << 16);
        let CleanOutcome::Cleaned { end_offset, stats } = clean_all(&log, &mut map, NOW) else {
            panic!("codec {codec}: not cleaned");
        };
        assert_eq!(end_offset, 400);
        let after = records(&log);
        assert_eq!(latest(&after), latest(&before), "codec {codec}");
        assert_eq!(after.len(), 10, "codec {codec}: one record per key");
        for (offset, key, value) in &after {
            assert_eq!(value.as_deref(), Some(format!("v{offset}").as_bytes()));
            assert!(*offset >= 390, "{key:?} at {offset}");
        }
        assert!(log.size_bytes() < 2048, "{}", log.size_bytes());
        assert_eq!(log.log_end_offset(), 400);
        // What the cleaning kept of the segments fits one: they were grouped into one.
        clean_all(&log, &mut map, NOW);
        assert!(log.segment_count() <= 2, "{} segments", log.segment_count());
        assert_eq!(records(&log), after);
        log.verify_indexes().unwrap();
        assert_eq!(stats.records_written, 10);
        assert!(stats.bytes_written < stats.bytes_read);
        // What was cleaned survives a reopen, clean or not.
        log.close().unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
        assert_eq!(records(&log), after, "codec {codec} after reopen");
        log.verify_indexes().unwrap();
    }
}

#[test]
fn the_producer_snapshots_of_replaced_segments_go_with_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 400, 10, 4, 0);
    log.roll(NOW).unwrap();
    let snapshots = || {
        let mut v: Vec<i64> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let p = e.unwrap().path();
                (p.extension()? == "snapshot").then(|| p.file_stem()?.to_str()?.parse().ok())?
            })
            .collect();
        v.sort();
        v
    };
    assert!(snapshots().len() > 5, "{:?}", snapshots());
    let mut map = OffsetMap::new(1 << 16);
    clean_all(&log, &mut map, NOW);
    clean_all(&log, &mut map, NOW);
    let bases = log.segment_base_offsets();
    assert!(
        snapshots().iter().all(|o| bases.contains(o)),
        "snapshots {:?}, segments {bases:?}",
        snapshots()
    );
    assert!(snapshots().contains(&400), "{:?}", snapshots());
}

#[test]
fn the_active_segment_and_records_past_the_uncleanable_offset_stay() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 200, 5, 4, 0);
    let active = log.segment_base_offsets().last().copied().unwrap();
    assert!(active < 200);
    let mut map = OffsetMap::new(1 << 16);
    let CleanOutcome::Cleaned { end_offset, .. } = clean_all(&log, &mut map, NOW) else {
        panic!("not cleaned");
    };
    assert_eq!(end_offset, active);
    let after = records(&log);
    // Everything from the active segment on is still there, untouched.
    let tail: Vec<i64> = after.iter().map(|r| r.0).filter(|&o| o >= active).collect();
    assert_eq!(tail, (active..200).collect::<Vec<_>>());
    // Below it, one record per key (the latest below the active segment or later).
    assert!(after.iter().filter(|r| r.0 < active).count() <= 5);
    assert_eq!(latest(&after).len(), 5);
}

#[test]
fn segments_are_grouped_by_what_the_cleaning_keeps_and_the_overflow_starts_the_next_group() {
    // A third of the records have keys written once (kept), the others keys written over and
    // over: the kept bytes fill several segments, so groups close when their kept batches
    // overflow.
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    for round in 0..30 {
        fill(&log, 4, 1_000_000, 4, 0); // unique keys
        for dup in 0..2 {
            let keys: Vec<String> = (0..4)
                .map(|k| format!("dup-{}", (round * 2 + dup) % 3 * 4 + k))
                .collect();
            let ks: Vec<Option<&[u8]>> = keys.iter().map(|k| Some(k.as_bytes())).collect();
            let b = batch_with_keys(&Spec::default(), &ks, &[b"x", b"y", b"z", b"w"]);
            log.append_as_leader(&b, 0, NOW).unwrap();
        }
    }
    log.roll(NOW).unwrap();
    let before = records(&log);
    let segments_before = log.segment_count();
    let CleanOutcome::Cleaned { stats, .. } = clean_all(&log, &mut OffsetMap::new(1 << 16), NOW)
    else {
        panic!("not cleaned");
    };
    let after = records(&log);
    assert_eq!(latest(&after), latest(&before));
    assert_eq!(after.len(), 30 * 4 + 12);
    assert!(after.iter().all(|r| before.contains(r)));
    // Fewer, fuller segments, none over segment.bytes; each source segment read once.
    let sizes: Vec<u64> = log
        .segment_base_offsets()
        .iter()
        .map(|&b| {
            let path = dir.path().join(crate::segment::log_file_name(b));
            std::fs::metadata(path).unwrap().len()
        })
        .collect();
    assert!(log.segment_count() < segments_before, "{sizes:?}");
    assert!(log.segment_count() > 2, "{sizes:?}");
    assert!(sizes.iter().all(|&s| s <= 2048), "{sizes:?}");
    assert_eq!(stats.bytes_read, stats.map_bytes_read);
    assert_eq!(stats.records_written, after.len() as u64);
    assert_eq!(stats.bytes_written, sizes.iter().sum::<u64>());
    log.verify_indexes().unwrap();
    // The replaced segments' files (and producer snapshots) are removed in the background.
    let names = || -> Vec<String> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    assert!(
        names()
            .iter()
            .all(|n| !n.ends_with(crate::log::CLEANED_SUFFIX)),
        "{:?}",
        names()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while names()
        .iter()
        .any(|n| n.ends_with(crate::log::DELETED_SUFFIX))
    {
        assert!(std::time::Instant::now() < deadline, "{:?}", names());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let logs = names().iter().filter(|n| n.ends_with(".log")).count();
    assert_eq!(logs, log.segment_count());
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    assert_eq!(records(&log), after);
    log.verify_indexes().unwrap();
}

#[test]
fn a_small_map_cleans_in_several_passes_to_the_same_result() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 600, 40, 4, 0);
    log.roll(NOW).unwrap();
    let expected = latest(&records(&log));
    // Room for 10 keys at the load factor: 40 keys take several cleanings.
    let mut map = OffsetMap::new(offset_map::BYTES_PER_ENTRY * 12);
    let mut first_dirty = 0;
    let mut passes = 0;
    loop {
        let range = CleanableRange {
            first_dirty,
            first_uncleanable: i64::MAX,
        };
        match clean(&log, range, &mut map, &settings(NOW), &mut |_| {}).unwrap() {
            CleanOutcome::Cleaned { end_offset, .. } => {
                assert!(end_offset > first_dirty);
                first_dirty = end_offset;
                passes += 1;
            }
            CleanOutcome::Nothing => break,
            CleanOutcome::Abandoned { .. } | CleanOutcome::Stopped { .. } => panic!("abandoned"),
        }
        assert!(map.size() <= 11, "the map never grows past its bound");
    }
    assert!(passes > 2, "{passes} passes");
    let after = records(&log);
    assert_eq!(latest(&after), expected);
    // A last cleaning with a map big enough leaves one record per key.
    let mut big = OffsetMap::new(1 << 16);
    clean_all(&log, &mut big, NOW);
    assert_eq!(records(&log).len(), 40);
    assert_eq!(latest(&records(&log)), expected);
}

#[test]
fn a_tombstone_stays_for_delete_retention_after_the_cleaning_that_reached_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 40, 4, 4, 0);
    let tomb = batch_with_tombstones(&Spec::default(), &[(b"key-1", None), (b"key-2", None)]);
    log.append_as_leader(&tomb, 0, NOW).unwrap();
    log.roll(NOW).unwrap();
    let mut map = OffsetMap::new(1 << 16);
    clean_all(&log, &mut map, NOW);
    let after = latest(&records(&log));
    assert_eq!(after.len(), 4);
    assert_eq!(after[b"key-1".as_slice()], None);
    assert_eq!(after[b"key-2".as_slice()], None);
    // Still within delete.retention.ms (1 s) of that cleaning: kept.
    clean_all(&log, &mut map, NOW + 999);
    assert_eq!(latest(&records(&log)).len(), 4);
    // Past it: gone, and the keys with them.
    clean_all(&log, &mut map, NOW + 1_000);
    let after = latest(&records(&log));
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(!after.contains_key(b"key-1".as_slice()));
}

#[test]
fn the_last_batch_of_a_producer_stays_even_when_all_its_records_go() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    let spec = Spec {
        producer_id: 42,
        producer_epoch: 3,
        base_sequence: 0,
        ..Spec::default()
    };
    let b = batch_with_keys(&spec, &[Some(b"k"), Some(b"k")], &[b"1", b"2"]);
    log.append_as_leader(&b, 0, NOW).unwrap();
    // Later plain writes of the same key make the producer's records obsolete.
    fill(&log, 8, 1, 4, 0);
    let keyed: Vec<Option<&[u8]>> = vec![Some(b"k"); 4];
    log.append_as_leader(
        &batch_with_keys(&Spec::default(), &keyed, &[b"a", b"b", b"c", b"d"]),
        0,
        NOW,
    )
    .unwrap();
    log.roll(NOW).unwrap();
    let mut map = OffsetMap::new(1 << 16);
    clean_all(&log, &mut map, NOW);
    let read = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    let (_, first) = BatchIter::new(&read.records).next().unwrap();
    assert_eq!((first.producer_id, first.producer_epoch), (42, 3));
    assert_eq!(
        (first.base_offset, first.last_offset(), first.records_count),
        (0, 1, 0)
    );
    assert_eq!(log.last_producer_epoch(42), Some(3));
    // Reopened from the log alone (no producer snapshot), the producer is still known.
    drop(log);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    assert_eq!(log.last_producer_epoch(42), Some(3));
}

#[test]
fn a_follower_copies_a_cleaned_log_batch_for_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 100, 3, 4, 1);
    log.roll(NOW).unwrap();
    clean_all(&log, &mut OffsetMap::new(1 << 16), NOW);
    let follower_dir = tempfile::tempdir().unwrap();
    let follower = Log::open(follower_dir.path(), config(), 0, false, NOW).unwrap();
    let mut next = 0;
    while next < log.log_end_offset() {
        let read = log.read(next, 4096, i64::MAX, true).unwrap();
        follower.append_as_follower(&read.records).unwrap();
        next = follower.log_end_offset();
    }
    assert_eq!(records(&follower), records(&log));
    assert_eq!(follower.log_end_offset(), log.log_end_offset());
}

#[test]
fn a_swap_refuses_once_the_log_was_truncated_and_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 200, 5, 4, 0);
    log.roll(NOW).unwrap();
    let mut view = log.cleaning_view();
    let old = view.segments[..2].to_vec();
    let cleaned = LogSegment::create_with_suffix(
        dir.path(),
        old[0].base_offset(),
        crate::log::CLEANED_SUFFIX,
        4096,
        NOW,
        log.handle_pool(),
    )
    .unwrap();
    log.truncate_to(150).unwrap();
    assert_eq!(log.log_end_offset(), 148, "batches of 4 go whole");
    assert!(!log
        .replace_segments(&mut view, cleaned, &old, &|_, _| Vec::new())
        .unwrap());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(records(&log).len(), 148);
}

/// Copies a log dir's files (a crash "image").
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn an_open_finishes_a_committed_swap_and_discards_an_uncommitted_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 300, 6, 4, 0);
    log.roll(NOW).unwrap();
    log.flush().unwrap();
    let before = records(&log);
    let before_image = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), before_image.path());
    clean_all(&log, &mut OffsetMap::new(1 << 16), NOW);
    let cleaned = records(&log);
    let first_cleaned = log.segment_base_offsets()[0];
    let cleaned_log = std::fs::read(
        dir.path()
            .join(crate::segment::log_file_name(first_cleaned)),
    )
    .unwrap();
    drop(log);

    // A crash after step 1 (the .swap exists, the old segments too): the swap is finished.
    let committed = tempfile::tempdir().unwrap();
    copy_dir(before_image.path(), committed.path());
    let swap = committed
        .path()
        .join(crate::segment::log_file_name(first_cleaned) + crate::log::SWAP_SUFFIX);
    std::fs::write(&swap, &cleaned_log).unwrap();
    // And a replaced segment's file renamed for removal (a crash in step 2 of an earlier swap).
    let renamed = committed.path().join(format!(
        "{}{}",
        crate::segment::log_file_name(first_cleaned + 1),
        crate::log::DELETED_SUFFIX
    ));
    std::fs::write(&renamed, &cleaned_log).unwrap();
    let log = Log::open(committed.path(), config(), 0, false, NOW).unwrap();
    let got = records(&log);
    assert_eq!(latest(&got), latest(&before));
    // The first group is the cleaned one; the others, still dirty, are read as they were.
    assert!(got.len() < before.len());
    assert!(got.iter().all(|r| before.contains(r)));
    log.verify_indexes().unwrap();
    assert!(!swap.exists());
    assert!(!renamed.exists());
    drop(log);

    // A crash before step 1 (only .cleaned files): discarded, the log is as before.
    let uncommitted = tempfile::tempdir().unwrap();
    copy_dir(before_image.path(), uncommitted.path());
    let leftover = uncommitted
        .path()
        .join(crate::segment::log_file_name(first_cleaned) + crate::log::CLEANED_SUFFIX);
    std::fs::write(&leftover, &cleaned_log).unwrap();
    let log = Log::open(uncommitted.path(), config(), 0, false, NOW).unwrap();
    assert_eq!(records(&log), before);
    assert!(!leftover.exists());
    let _ = cleaned;
}

#[test]
fn the_manager_cleans_the_filthiest_due_log_and_keeps_kafkas_checkpoint() {
    use crate::manager::LogManager;
    use crate::TopicPartition;
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_path_buf()];
    let manager = LogManager::open(&dirs, LogConfig::default(), NOW).unwrap();
    let a = TopicPartition::new("a", 0);
    let b = TopicPartition::new("b", 0);
    let plain = TopicPartition::new("plain", 0);
    let la = manager.get_or_create(&a, config(), NOW).unwrap();
    let lb = manager.get_or_create(&b, config(), NOW).unwrap();
    let lp = manager
        .get_or_create(
            &plain,
            LogConfig {
                compact: false,
                ..config()
            },
            NOW,
        )
        .unwrap();
    fill(&la, 400, 400, 4, 0); // every key once: a cleaning keeps it all
    fill(&lb, 400, 7, 4, 0);
    fill(&lp, 400, 5, 4, 0);
    // Nothing is cleanable before a partition gives the log a high watermark.
    assert_eq!(
        manager::cleanable_range(&la, NOW)
            .unwrap()
            .first_uncleanable,
        0
    );
    for l in [&la, &lb, &lp] {
        l.update_high_watermark(l.log_end_offset());
    }
    // The cleaner cleans only what is fsynced (below the recovery point).
    assert_eq!(
        manager::cleanable_range(&la, NOW)
            .unwrap()
            .first_uncleanable,
        la.recovery_point()
            .min(la.cleaning_view().active_base_offset)
    );
    for l in [&la, &lb, &lp] {
        l.flush().unwrap();
    }
    let mut map = OffsetMap::new(1 << 16);
    let mut cleaned = Vec::new();
    while let Some(report) = manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {})
        .unwrap()
    {
        assert!(
            matches!(report.outcome, CleanOutcome::Cleaned { .. }),
            "{report:?}"
        );
        assert!(report.dirty_ratio > 0.5);
        cleaned.push(report.tp.dir_name());
        assert!(cleaned.len() <= 2, "{cleaned:?} {report:?}");
    }
    cleaned.sort();
    assert_eq!(cleaned, ["a-0", "b-0"]);
    assert_eq!(records(&la).len(), 400);
    assert_eq!(
        records(&lb).len(),
        7 + (400 - lb.cleaning_view().active_base_offset as usize)
    );
    assert_eq!(
        records(&lp).len(),
        400,
        "a log that is not compacted is never cleaned"
    );
    let text = std::fs::read_to_string(dir.path().join("cleaner-offset-checkpoint")).unwrap();
    let active = |l: &Log| l.cleaning_view().active_base_offset;
    assert_eq!(
        text,
        format!("0\n2\na 0 {}\nb 0 {}\n", active(&la), active(&lb))
    );

    // Barely dirty: below min.cleanable.dirty.ratio, nothing is due.
    fill(&la, 8, 400, 4, 0);
    la.roll(NOW).unwrap();
    la.flush().unwrap();
    la.update_high_watermark(la.log_end_offset());
    assert!(manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {})
        .unwrap()
        .is_none());
    // Past max.compaction.lag.ms the same log is due whatever its ratio.
    la.update_config(LogConfig {
        max_compaction_lag_ms: 1,
        ..config()
    });
    let report = manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {})
        .unwrap()
        .unwrap();
    assert_eq!(report.tp, a);
    assert!(report.dirty_ratio < 0.5);
    la.update_config(config());

    // The checkpoint survives a restart: nothing is dirty after it.
    manager.shutdown().unwrap();
    drop((la, lb, lp, manager));
    let manager = LogManager::open(&dirs, LogConfig::default(), NOW).unwrap();
    for tp in [&a, &b] {
        let log = manager.get(tp).unwrap();
        log.update_config(config());
        log.update_high_watermark(log.log_end_offset());
        assert!(log.cleaned_up_to() > 0, "{tp:?} checkpoint read back");
    }
    assert!(manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {})
        .unwrap()
        .is_none());
    assert!(manager.uncleanable_partitions().is_empty());
}

#[test]
fn records_younger_than_the_min_compaction_lag_stay_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        LogConfig {
            min_compaction_lag_ms: 10_000,
            ..config()
        },
        0,
        false,
        NOW,
    )
    .unwrap();
    fill(&log, 200, 5, 4, 0); // record timestamps ~1000
    log.roll(NOW).unwrap();
    log.update_high_watermark(200);
    // At "now" = 5000 every record is younger than 10 s: nothing to clean.
    let range = manager::cleanable_range(&log, 5_000).unwrap();
    assert_eq!(range.first_uncleanable, 0);
    // Later they are old enough.
    let range = manager::cleanable_range(&log, 20_000).unwrap();
    assert_eq!(range.first_uncleanable, 200);
}

#[test]
fn the_throttle_is_told_every_byte_read_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 300, 6, 4, 3);
    log.roll(NOW).unwrap();
    let mut told = 0u64;
    let range = CleanableRange {
        first_dirty: 0,
        first_uncleanable: i64::MAX,
    };
    let outcome = clean(
        &log,
        range,
        &mut OffsetMap::new(1 << 16),
        &settings(NOW),
        &mut |bytes| told += bytes,
    )
    .unwrap();
    let CleanOutcome::Cleaned { stats, .. } = outcome else {
        panic!("{outcome:?}");
    };
    assert!(stats.bytes_written > 0 && stats.map_bytes_read > 0);
    assert_eq!(
        told,
        stats.map_bytes_read + stats.bytes_read + stats.bytes_written
    );
}

#[test]
fn a_truncation_or_a_deletion_rewrites_the_cleaner_checkpoint_file() {
    use crate::manager::LogManager;
    use crate::TopicPartition;
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_path_buf()];
    let manager = LogManager::open(&dirs, LogConfig::default(), NOW).unwrap();
    let (a, b) = (TopicPartition::new("a", 0), TopicPartition::new("b", 0));
    for tp in [&a, &b] {
        let log = manager.get_or_create(tp, config(), NOW).unwrap();
        fill(&log, 200, 5, 4, 0);
        log.roll(NOW).unwrap();
        log.flush().unwrap();
        log.update_high_watermark(200);
    }
    let mut map = OffsetMap::new(1 << 16);
    while manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {})
        .unwrap()
        .is_some()
    {}
    let file = dir.path().join("cleaner-offset-checkpoint");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "0\n2\na 0 200\nb 0 200\n"
    );
    // A follower truncation below the checkpoint: on disk at once, not at the next cleaning.
    // (Batches go whole: the log ends at the last kept batch at or below 100.)
    let la = manager.get(&a).unwrap();
    la.truncate_to(100).unwrap();
    let leo = la.log_end_offset();
    assert!(leo <= 100, "{leo}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("0\n2\na 0 {leo}\nb 0 200\n")
    );
    // A deleted topic leaves no entry for one created again under its name.
    manager.delete(&b).unwrap();
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("0\n1\na 0 {leo}\n")
    );
}

#[test]
fn a_cleaned_segment_keeps_the_aborted_transactions_of_the_segments_it_replaces() {
    use crate::batch::builder::transactional;
    use crate::batch::{ControlRecordType, EndTxnMarker};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    let abort = EndTxnMarker {
        control_type: ControlRecordType::Abort,
        coordinator_epoch: 0,
    };
    let aborted_txn = |pid: i64| {
        let spec = Spec {
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            ..Spec::default()
        };
        let b = batch_with_keys(
            &spec,
            &[Some(b"key-1".as_slice())],
            &[b"aborted".as_slice()],
        );
        log.append_as_leader(&transactional(&b), 0, NOW).unwrap();
        log.append_end_txn_marker_as_leader(pid, 0, abort, 0, NOW)
            .unwrap();
        fill(&log, 100, 10, 4, 0);
    };
    aborted_txn(1);
    aborted_txn(2);
    log.roll(NOW).unwrap();
    let leo = log.log_end_offset();
    let entries = |log: &Log| {
        log.collect_aborted_transactions(0, leo)
            .iter()
            .map(|t| (t.producer_id, t.first_offset, t.last_offset))
            .collect::<Vec<_>>()
    };
    let before = entries(&log);
    assert_eq!(before, vec![(1, 0, 1), (2, 102, 103)]);
    assert!(log.segment_count() > 3);
    let mut map = OffsetMap::new(1 << 16);
    clean_all(&log, &mut map, NOW);
    assert!(log.segment_count() <= 2, "{} segments", log.segment_count());
    assert_eq!(entries(&log), before);
    let bases = log.segment_base_offsets();
    let index_bases: Vec<i64> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_str()?.to_owned();
            name.strip_suffix(".txnindex")?.parse().ok()
        })
        .collect();
    assert_eq!(
        index_bases,
        vec![bases[0]],
        "one index, the cleaned segment's"
    );
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), config(), leo, true, NOW).unwrap();
    assert_eq!(entries(&log), before, "after a clean reopen");
    drop(log);
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    assert_eq!(entries(&log), before, "after recovery");
}

/// A topic deleted and created again under its name while a cleaning of the deleted log runs:
/// the cleaning is abandoned, swaps nothing into the new log and leaves no file in its dir
/// (the deleted log's path names the new log's dir by then), and the new log has no cleaner
/// checkpoint. Kafka aborts the cleaning before it renames the dir (`asyncDelete`).
#[test]
fn a_cleaning_of_a_deleted_log_leaves_nothing_in_the_log_created_again_under_its_name() {
    use crate::manager::LogManager;
    use crate::TopicPartition;
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_path_buf()];
    let manager = LogManager::open(&dirs, LogConfig::default(), NOW).unwrap();
    let tp = TopicPartition::new("t", 0);
    let old = manager.get_or_create(&tp, config(), NOW).unwrap();
    fill(&old, 400, 7, 4, 0);
    old.update_high_watermark(old.log_end_offset());
    old.flush().unwrap();
    let mut map = OffsetMap::new(1 << 16);
    let mut created: Option<Arc<Log>> = None;
    let report = manager.clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {
        if created.is_none() {
            manager.delete(&tp).unwrap();
            let new = manager.get_or_create(&tp, config(), NOW).unwrap();
            fill(&new, 3, 3, 1, 0);
            created = Some(new);
        }
    });
    assert!(
        !matches!(
            report,
            Ok(Some(crate::manager::CleanReport {
                outcome: CleanOutcome::Cleaned { .. },
                ..
            }))
        ),
        "{report:?}"
    );
    let new = created.expect("created during the cleaning");
    let leftovers: Vec<_> = std::fs::read_dir(new.dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "{leftovers:?} in {}",
        new.dir().display()
    );
    assert_eq!(records(&new).len(), 3);
    assert_eq!(new.cleaned_up_to(), -1);
}

/// `cleanup.policy` altered from `compact` to `delete` while a cleaning of the log runs: the
/// cleaning is abandoned and swaps nothing in, so every record written stays (Kafka's
/// `LogManager.updateTopicConfig` calls `abortCleaning` when `compact` is turned off, and the
/// cleaner stops at its next `checkDone`).
#[test]
fn a_cleaning_stops_when_the_log_is_no_longer_compacted() {
    use crate::manager::LogManager;
    use crate::TopicPartition;
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_path_buf()];
    let manager = LogManager::open(&dirs, LogConfig::default(), NOW).unwrap();
    let tp = TopicPartition::new("t", 0);
    let log = manager.get_or_create(&tp, config(), NOW).unwrap();
    fill(&log, 400, 7, 4, 0);
    log.update_high_watermark(log.log_end_offset());
    log.flush().unwrap();
    let mut map = OffsetMap::new(1 << 16);
    let mut altered = false;
    let report = manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {
            if !altered {
                altered = true;
                log.update_config(LogConfig {
                    compact: false,
                    ..config()
                });
            }
        })
        .unwrap();
    assert!(altered, "no cleaning started: {report:?}");
    assert_eq!(records(&log).len(), 400, "{report:?}");
}

/// A cleaning that fails after it swapped in its first groups (here: the second group's
/// `.cleaned` file cannot be created) marks the log uncleanable, as Kafka's cleaner does with
/// any failure other than an abort (`markPartitionUncleanable`). Taking it for "the log moved
/// on" instead makes every later pass pick the same log again (its checkpoint never moves, so
/// it stays the filthiest), fail the same way and count as a cleaning, so a cleaner thread
/// rewrites the first groups over and over without backing off while other logs wait.
#[test]
fn a_cleaning_that_fails_after_its_first_swap_marks_the_log_uncleanable() {
    use crate::manager::LogManager;
    use crate::TopicPartition;
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_path_buf()];
    let manager = LogManager::open(&dirs, LogConfig::default(), NOW).unwrap();
    let tp = TopicPartition::new("t", 0);
    let log = manager.get_or_create(&tp, config(), NOW).unwrap();
    // Every key once: the cleaning keeps every record, so each full segment is a group of its
    // own, and a group's cleaned file is made before the group ahead of it is swapped in.
    fill(&log, 400, 400, 4, 0);
    log.update_high_watermark(log.log_end_offset());
    log.flush().unwrap();
    let bases = log.segment_base_offsets();
    assert!(bases.len() > 3, "{bases:?}");
    // The third group's cleaned file cannot be made: the first group is swapped in by then.
    let blocker = log
        .dir()
        .join(crate::segment::log_file_name(bases[2]) + CLEANED_SUFFIX);
    std::fs::create_dir(&blocker).unwrap();
    let mut map = OffsetMap::new(1 << 16);
    let first = manager.clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {});
    assert!(first.is_err(), "{first:?}");
    assert_eq!(manager.uncleanable_partitions(), vec![tp.clone()]);
    let again = manager
        .clean_filthiest(&mut map, DEFAULT_LOAD_FACTOR, NOW, &mut |_| {})
        .unwrap();
    assert!(again.is_none(), "picked again: {again:?}");
}

/// A batch whose header does not parse in the middle of a segment the cleaner reads (bit rot,
/// a bad disk): the cleaning fails and the segment stays as it is, as Kafka's cleaner throws
/// `CorruptRecordException` on it (`LogCleaner.growBuffersOrFail`, `MemoryRecords` batch
/// iterator) and marks the partition uncleanable. Today the batch iterator stops quietly at
/// the bad header: the map and the rewrite skip the rest of that segment, and the swap deletes
/// every batch after it for good.
#[test]
fn a_corrupt_batch_header_fails_the_cleaning_and_drops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    // Every key once: a cleaning keeps every record.
    fill(&log, 200, 200, 4, 0);
    log.roll(NOW).unwrap();
    log.flush().unwrap();
    let first = log.cleaning_view().segments[0].clone();
    let headers: Vec<_> = {
        let read = log.read(0, 1 << 20, first.next_offset(), true).unwrap();
        BatchIter::new(&read.records)
            .map(|(at, h)| (at, h))
            .collect()
    };
    assert!(headers.len() > 6, "{} batches", headers.len());
    // The magic byte of the fourth batch of the first segment.
    let (at, _) = headers[3];
    let path = dir.path().join(crate::segment::log_file_name(0));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at + 16] = 7;
    std::fs::write(&path, &bytes).unwrap();
    let kept_before = headers.len();
    let mut map = OffsetMap::new(1 << 16);
    let range = CleanableRange {
        first_dirty: 0,
        first_uncleanable: i64::MAX,
    };
    let outcome = clean(&log, range, &mut map, &settings(NOW), &mut |_| {});
    assert!(outcome.is_err(), "{outcome:?}");
    // The first segment is the one on disk, every batch of it still there.
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after.len(), bytes.len(), "{kept_before} batches before");
}

/// A key's committed value stays when an aborted transaction wrote the key again later (the
/// aborted record is not in the offset map), and nothing from an open transaction on is cleaned
/// (the cleanable range ends at the first unstable offset), as in Kafka.
#[test]
fn an_aborted_record_never_replaces_a_committed_value_and_an_open_transaction_stays_dirty() {
    use crate::batch::builder::transactional;
    use crate::batch::{ControlRecordType, EndTxnMarker};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    let keyed =
        |spec: &Spec, key: &[u8], value: &[u8]| batch_with_keys(spec, &[Some(key)], &[value]);
    log.append_as_leader(&keyed(&Spec::default(), b"key-x", b"committed"), 0, NOW)
        .unwrap();
    fill(&log, 40, 5, 5, 0);
    let txn = |producer_id: i64| Spec {
        producer_id,
        producer_epoch: 0,
        base_sequence: 0,
        ..Spec::default()
    };
    log.append_as_leader(
        &transactional(&keyed(&txn(1), b"key-x", b"aborted")),
        0,
        NOW,
    )
    .unwrap();
    let abort = EndTxnMarker {
        control_type: ControlRecordType::Abort,
        coordinator_epoch: 0,
    };
    log.append_end_txn_marker_as_leader(1, 0, abort, 0, NOW)
        .unwrap();
    fill(&log, 40, 5, 5, 0);
    let open_at = log.log_end_offset();
    log.append_as_leader(&transactional(&keyed(&txn(2), b"key-0", b"open")), 0, NOW)
        .unwrap();
    fill(&log, 40, 5, 5, 0);
    log.roll(NOW).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(open_at));
    let from_open =
        |rs: &[(i64, Vec<u8>, Option<Vec<u8>>)]| rs.iter().filter(|(o, ..)| *o >= open_at).count();
    let before = records(&log);
    let mut map = OffsetMap::new(1 << 16);
    clean_all(&log, &mut map, NOW);
    let after = records(&log);
    assert!(after.len() < before.len(), "something was cleaned");
    assert!(
        after
            .iter()
            .any(|(_, k, v)| k == b"key-x" && v.as_deref() == Some(b"committed".as_slice())),
        "the committed value of key-x is kept"
    );
    assert_eq!(
        from_open(&after),
        from_open(&before),
        "nothing from the open transaction on"
    );
}

/// A crash after a swap's commit, before the group's old segments were renamed away, where the
/// cleaned segment ends before the group does (its trailing segments kept nothing): the open
/// finishes the swap and removes every replaced segment, to the end the `.swapend` file
/// records, not only those the cleaned segment's own offsets cover.
#[test]
fn an_open_removes_every_segment_a_committed_swap_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    for _ in 0..3 {
        fill(&log, 30, 1_000, 5, 0);
        log.roll(NOW).unwrap();
    }
    fill(&log, 5, 1_000, 5, 0);
    log.flush().unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 30, 60, 90]);
    drop(log);
    // The cleaned segment of the group [0, 30) + [30, 60) kept only the first segment's
    // records; the crash came right after the commit.
    let first = std::fs::read(dir.path().join(crate::segment::log_file_name(0))).unwrap();
    std::fs::write(
        dir.path()
            .join(crate::segment::log_file_name(0) + crate::log::SWAP_SUFFIX),
        &first,
    )
    .unwrap();
    let end = dir
        .path()
        .join(format!("{:020}{}", 0, crate::log::SWAP_END_SUFFIX));
    std::fs::write(&end, 60i64.to_be_bytes()).unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 60, 90]);
    let offsets: Vec<i64> = records(&log).iter().map(|(o, ..)| *o).collect();
    assert!(offsets.iter().all(|o| !(30..60).contains(o)), "{offsets:?}");
    assert!(!end.exists());
}

/// A swap pins the replaced segments' files first: a reader holding one reads its own bytes
/// after the swap, never the cleaned file that takes its name. When a file cannot be pinned
/// (here its log file is gone while closed; out of descriptors in life), there is no swap:
/// an error, the cleaned files removed, the log as it was.
#[test]
fn a_swap_whose_segments_cannot_be_pinned_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    fill(&log, 200, 5, 4, 0);
    log.roll(NOW).unwrap();
    let before = records(&log);
    let mut view = log.cleaning_view();
    let old = view.segments[..2].to_vec();
    let cleaned = LogSegment::create_with_suffix(
        dir.path(),
        old[0].base_offset(),
        crate::log::CLEANED_SUFFIX,
        4096,
        NOW,
        log.handle_pool(),
    )
    .unwrap();
    // Idle files are closed after two sweeps (the first clears their use bits).
    log.handle_pool().release_idle_log_files(usize::MAX);
    log.handle_pool().release_idle_log_files(usize::MAX);
    assert!(!old[1].open_resources().0, "the log file is closed");
    let log_path = old[1].paths()[0].to_path_buf();
    let aside = dir.path().join("aside");
    std::fs::rename(&log_path, &aside).unwrap();
    assert!(log
        .replace_segments(&mut view, cleaned, &old, &|_, _| Vec::new())
        .is_err());
    std::fs::rename(&aside, &log_path).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.contains(".cleaned") || n.contains(".swap") || n.ends_with(".deleted"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let after = log.cleaning_view();
    assert!(after
        .segments
        .iter()
        .zip(&old)
        .all(|(a, b)| Arc::ptr_eq(a, b)));
    assert_eq!(records(&log), before);
}

/// The headers of every batch readable from the log's start.
fn batch_headers(log: &Log) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let read = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        for (_, h) in BatchIter::new(&read.records) {
            out.push(h);
            next = h.next_offset();
        }
    }
    out
}

/// Kafka's transactional cleaning: an aborted transaction's records go at the first cleaning,
/// its ABORT marker and index entry stay through it (a batch of it was met), the next cleaning
/// finds the transaction empty and stamps the marker with a delete horizon (the index entry
/// goes), and a cleaning past the horizon removes the marker. A COMMIT marker whose
/// transaction still has records stays. At every step a reader never meets an aborted
/// transaction's index entry without its marker.
#[test]
fn aborted_records_go_and_their_markers_follow_once_nothing_of_them_is_left() {
    use crate::batch::builder::transactional;
    use crate::batch::{ControlRecordType, EndTxnMarker};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    let marker = |control_type| EndTxnMarker {
        control_type,
        coordinator_epoch: 0,
    };
    let txn_batch = |sequence: i32, key: &[u8], value: &[u8]| {
        let spec = Spec {
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: sequence,
            ..Spec::default()
        };
        transactional(&batch_with_keys(&spec, &[Some(key)], &[value]))
    };
    fill(&log, 20, 5, 5, 0);
    log.append_as_leader(&txn_batch(0, b"key-x", b"aborted"), 0, NOW)
        .unwrap();
    log.append_as_leader(&txn_batch(1, b"key-y", b"aborted"), 0, NOW)
        .unwrap();
    let abort_at = log
        .append_end_txn_marker_as_leader(1, 0, marker(ControlRecordType::Abort), 0, NOW)
        .unwrap()
        .first_offset;
    log.append_as_leader(&txn_batch(2, b"key-z", b"committed"), 0, NOW)
        .unwrap();
    let commit_at = log
        .append_end_txn_marker_as_leader(1, 0, marker(ControlRecordType::Commit), 0, NOW)
        .unwrap()
        .first_offset;
    fill(&log, 20, 5, 5, 0);
    log.roll(NOW).unwrap();
    log.update_high_watermark(log.log_end_offset());
    let marker_at = |log: &Log, offset: i64| {
        batch_headers(log)
            .into_iter()
            .find(|h| h.is_control() && h.base_offset == offset && h.records_count > 0)
    };
    let mut map = OffsetMap::new(1 << 16);

    clean_all(&log, &mut map, NOW);
    let after = records(&log);
    assert!(
        !after
            .iter()
            .any(|(_, _, v)| v.as_deref() == Some(b"aborted".as_slice())),
        "aborted records go"
    );
    assert!(after
        .iter()
        .any(|(_, k, v)| k == b"key-z" && v.as_deref() == Some(b"committed".as_slice())));
    let abort =
        marker_at(&log, abort_at).expect("the ABORT marker stays through the first cleaning");
    assert_eq!(abort.delete_horizon_ms(), None);
    assert_eq!(log.collect_aborted_transactions(0, i64::MAX).len(), 1);

    clean_all(&log, &mut map, NOW);
    let abort = marker_at(&log, abort_at).expect("kept until its horizon");
    assert_eq!(abort.delete_horizon_ms(), Some(NOW + 1_000));
    assert!(
        log.collect_aborted_transactions(0, i64::MAX).is_empty(),
        "no index entry for a transaction with nothing left"
    );

    clean_all(&log, &mut map, NOW + 1_000);
    assert!(
        marker_at(&log, abort_at).is_none(),
        "removed past its horizon"
    );
    let commit = marker_at(&log, commit_at).expect("its transaction has a record left");
    assert_eq!(commit.delete_horizon_ms(), None);
    // A restart finds the same.
    drop(log);
    let log = Log::open(dir.path(), config(), 0, false, NOW).unwrap();
    assert!(log.collect_aborted_transactions(0, i64::MAX).is_empty());
    assert!(marker_at(&log, commit_at).is_some());
}
