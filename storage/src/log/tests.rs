use super::*;
use crate::batch::builder::{self, simple};
use crate::batch::BatchIter;

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        segment_index_bytes: 4096,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

fn offsets(info: &FetchDataInfo) -> Vec<(i64, i64)> {
    BatchIter::new(&info.records)
        .map(|(_, h)| (h.base_offset, h.last_offset()))
        .collect()
}

#[test]
fn leader_append_assigns_offsets_and_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap();
    let mut two = simple(3, 10, 100);
    two.extend_from_slice(&simple(2, 10, 200));
    let info = log.append_as_leader(&two, 5, 1_000).unwrap();
    assert_eq!(
        (
            info.first_offset,
            info.last_offset,
            info.batch_count,
            info.record_count
        ),
        (0, 4, 2, 5)
    );
    assert_eq!((info.log_append_time, info.max_timestamp), (-1, 201));
    assert_eq!(log.log_end_offset(), 5);
    let info = log.append_as_leader(&simple(1, 10, 300), 6, 1_000).unwrap();
    assert_eq!(info.first_offset, 5);
    let read = log.read(1, 1 << 20, i64::MAX, false).unwrap();
    assert_eq!(read.first_batch_offset, Some(0));
    assert_eq!(offsets(&read), vec![(0, 2), (3, 4), (5, 5)]);
    let epochs: Vec<i32> = BatchIter::new(&read.records)
        .map(|(_, h)| h.partition_leader_epoch)
        .collect();
    assert_eq!(epochs, vec![5, 5, 6]);
    for (at, h) in BatchIter::new(&read.records) {
        assert!(batch::crc_valid(&read.records[at..at + h.size_in_bytes()]));
    }
    // the high watermark bounds the read
    assert_eq!(
        offsets(&log.read(0, 1 << 20, 5, false).unwrap()),
        vec![(0, 2), (3, 4)]
    );
    assert_eq!(
        log.read(6, 100, i64::MAX, true).unwrap(),
        FetchDataInfo::default()
    );
    assert!(matches!(
        log.read(7, 100, i64::MAX, true),
        Err(StorageError::OffsetOutOfRange { offset: 7, .. })
    ));
}

#[test]
fn log_append_time_is_stamped() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
    let info = log
        .append_as_leader(&simple(2, 10, 100), 0, 77_000)
        .unwrap();
    assert_eq!((info.log_append_time, info.max_timestamp), (77_000, 77_000));
    let read = log.read(0, 1 << 20, i64::MAX, false).unwrap();
    let (_, h) = BatchIter::new(&read.records).next().unwrap();
    assert_eq!(
        (h.timestamp_type(), h.max_timestamp),
        (TimestampType::LogAppendTime, 77_000)
    );
}

#[test]
fn rejects_bad_batches_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_message_bytes: 200,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
    let mut b = simple(1, 10, 0);
    let n = b.len();
    b[n - 1] ^= 1;
    assert!(matches!(
        log.append_as_leader(&b, 0, 0),
        Err(StorageError::CorruptRecord(_))
    ));
    assert!(matches!(
        log.append_as_leader(&simple(1, 300, 0), 0, 0),
        Err(StorageError::RecordTooLarge { .. })
    ));
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn follower_append_keeps_offsets_and_gaps_and_rejects_overlaps() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap();
    let mut b = simple(3, 10, 0);
    batch::set_partition_leader_epoch(&mut b, 4);
    let info = log.append_as_follower(&b).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    assert!(matches!(
        log.append_as_follower(&b),
        Err(StorageError::NonMonotonicAppend(_))
    ));
    batch::set_base_offset(&mut b, 1);
    assert!(matches!(
        log.append_as_follower(&b),
        Err(StorageError::NonMonotonicAppend(_))
    ));
    batch::set_base_offset(&mut b, 3);
    log.append_as_follower(&b).unwrap();
    assert_eq!(log.log_end_offset(), 6);
    // A gap (a compacted leader's log) is kept as it is.
    batch::set_base_offset(&mut b, 10);
    log.append_as_follower(&b).unwrap();
    assert_eq!(log.log_end_offset(), 13);
    // One past what a segment can address from its base: a new segment starts at the batch.
    let far = 13 + i32::MAX as i64 + 100;
    batch::set_base_offset(&mut b, far);
    log.append_as_follower(&b).unwrap();
    assert_eq!(log.log_end_offset(), far + 3);
    assert_eq!(log.segment_base_offsets().last(), Some(&far));
    log.verify_indexes().unwrap();
    drop(log);
    let log = Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap();
    assert_eq!(log.log_end_offset(), far + 3, "an unclean open keeps it");
    let read = log.read(3, 1 << 20, i64::MAX, false).unwrap();
    let (_, h) = BatchIter::new(&read.records).next().unwrap();
    assert_eq!((h.base_offset, h.partition_leader_epoch), (3, 4));
}

#[test]
fn rolls_by_size_and_reads_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..40 {
        log.append_as_leader(&simple(2, 60, i), 0, i).unwrap();
    }
    assert!(log.segment_count() > 5, "{}", log.segment_count());
    for seg in log.segments().iter() {
        assert!(seg.size() <= 1024);
    }
    assert_eq!(
        log.recovery_point(),
        *log.segment_base_offsets().last().unwrap()
    );
    let mut next = 0;
    let mut seen = 0;
    while next < log.log_end_offset() {
        let r = log.read(next, 300, i64::MAX, true).unwrap();
        let o = offsets(&r);
        assert!(!o.is_empty());
        assert_eq!(o[0].0, next);
        next = o.last().unwrap().1 + 1;
        seen += o.len();
    }
    assert_eq!(seen, 40);
    log.verify_indexes().unwrap();
    // rolled segments have trimmed indexes on disk
    let first = log.segments()[0].clone();
    let idx = std::fs::metadata(
        dir.path()
            .join(crate::segment::index_file_name(first.base_offset())),
    )
    .unwrap();
    assert!(idx.len() < 4096);
}

#[test]
fn rolls_by_segment_ms() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: 1000,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
    log.append_as_leader(&simple(1, 10, 10_000), 0, 10_000)
        .unwrap();
    log.append_as_leader(&simple(1, 10, 10_500), 0, 10_500)
        .unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append_as_leader(&simple(1, 10, 11_001), 0, 11_001)
        .unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 2]);
}

#[test]
fn retention_by_time_and_bytes_and_delete_records() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..40 {
        log.append_as_leader(&simple(2, 60, 1_000 + i * 100), 0, 0)
            .unwrap();
    }
    let bases = log.segment_base_offsets();
    // nothing is old enough
    assert_eq!(log.delete_old_segments(1_000).unwrap(), 0);
    // retention.ms: segments whose newest record is older than now - retention.ms
    log.update_config(LogConfig {
        retention_ms: 1_000,
        ..small_config()
    });
    let now = 1_000 + 10 * 100 + 1_000 + 1; // records up to ts 2_000 have expired
    let deleted = log.delete_old_segments(now).unwrap();
    assert!(deleted > 0);
    assert_eq!(log.log_start_offset(), bases[deleted]);
    for seg in log.segments().iter() {
        assert!(now - seg.max_timestamp() <= 1_000 || seg.base_offset() == log.log_start_offset());
    }
    assert!(matches!(
        log.read(0, 100, i64::MAX, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // retention.bytes
    log.update_config(LogConfig {
        retention_bytes: 2048,
        retention_ms: -1,
        ..small_config()
    });
    log.delete_old_segments(now).unwrap();
    // Kafka keeps at least retention.bytes: a segment goes only if the rest still has them
    let first = log.segments()[0].size();
    assert!(
        log.size_bytes() >= 2048 && log.size_bytes() - first < 2048,
        "{}",
        log.size_bytes()
    );
    // DeleteRecords inside a segment moves the start offset but keeps the segment
    let lso = log.log_start_offset();
    assert_eq!(log.delete_records_before(lso + 1).unwrap(), lso + 1);
    let r = log.read(lso + 1, 1 << 20, i64::MAX, false).unwrap();
    assert!(!r.records.is_empty());
    assert!(matches!(
        log.read(lso, 100, i64::MAX, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // not past the high watermark
    log.update_high_watermark(70);
    assert!(matches!(
        log.delete_records_before(71),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    assert_eq!(log.delete_records_before(70).unwrap(), 70);
    assert!(log.segment_base_offsets()[0] <= 70);
    assert!(log.segment_base_offsets().get(1).is_none_or(|&b| b > 70));
}

#[test]
fn retention_of_everything_leaves_an_empty_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: 10,
        ..small_config()
    };
    let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
    for i in 0..10 {
        log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap();
    }
    log.delete_old_segments(1_000_000).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![20]);
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.size_bytes()
        ),
        (20, 20, 0)
    );
    let info = log.append_as_leader(&simple(1, 1, 0), 0, 0).unwrap();
    assert_eq!(info.first_offset, 20);
}

#[test]
fn truncate_to_cuts_and_deletes_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..40 {
        log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap();
    }
    log.flush().unwrap();
    log.truncate_to(31).unwrap(); // batch 30..=31 goes
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(log.recovery_point(), 30);
    assert!(log.segment_base_offsets().iter().all(|&b| b <= 30));
    log.verify_indexes().unwrap();
    let info = log.append_as_leader(&simple(1, 60, 0), 1, 0).unwrap();
    assert_eq!(info.first_offset, 30);
    let r = log.read(28, 1 << 20, i64::MAX, false).unwrap();
    assert_eq!(offsets(&r)[0], (28, 29));
    let r = log.read(30, 1 << 20, i64::MAX, false).unwrap();
    assert_eq!(offsets(&r), vec![(30, 30)]);
    log.truncate_fully_and_start_at(100).unwrap();
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_base_offsets()
        ),
        (100, 100, vec![100])
    );
    assert_eq!(
        log.append_as_leader(&simple(1, 1, 0), 0, 0)
            .unwrap()
            .first_offset,
        100
    );
}

#[test]
fn clean_reopen_and_unclean_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..25 {
        log.append_as_leader(&simple(2, 60, 100 + i), 0, 0).unwrap();
    }
    let before = log.read(0, 1 << 20, i64::MAX, false).unwrap();
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), small_config(), 50, true, 0).unwrap();
    assert_eq!(log.log_end_offset(), 50);
    assert_eq!(log.read(0, 1 << 20, i64::MAX, false).unwrap(), before);
    log.verify_indexes().unwrap();
    assert_eq!(
        log.max_timestamp_and_offset().unwrap().unwrap().timestamp,
        125
    );
    log.append_as_leader(&simple(2, 60, 200), 0, 0).unwrap();
    let active = log.active();
    drop(log); // no close: unclean
               // tear the active segment's last batch
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(active.log_path())
        .unwrap();
    f.set_len(active.size() - 5).unwrap();
    drop(active);
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.log_end_offset(), 50);
    assert_eq!(log.read(0, 1 << 20, i64::MAX, false).unwrap(), before);
    log.verify_indexes().unwrap();
}

#[test]
fn corruption_in_an_old_segment_deletes_later_ones_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..30 {
        log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap();
    }
    let bases = log.segment_base_offsets();
    drop(log);
    let second = dir.path().join(crate::segment::log_file_name(bases[1]));
    let mut bytes = std::fs::read(&second).unwrap();
    bytes[80] ^= 0xff;
    std::fs::write(&second, bytes).unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![bases[0], bases[1]]);
    assert_eq!(log.log_end_offset(), bases[1]);
    for b in &bases[2..] {
        assert!(!dir.path().join(crate::segment::log_file_name(*b)).exists());
    }
}

#[test]
fn offset_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..30 {
        log.append_as_leader(&simple(3, 60, 1_000 + i * 10), 2, 0)
            .unwrap(); // ts 1000+10i ..+2
    }
    let t = log.fetch_offset_by_timestamp(1_101).unwrap().unwrap();
    assert_eq!(
        (t.timestamp, t.offset, t.leader_epoch),
        (1_101, 31, Some(2))
    );
    let t = log.fetch_offset_by_timestamp(1_103).unwrap().unwrap();
    assert_eq!((t.timestamp, t.offset), (1_110, 33));
    assert_eq!(log.fetch_offset_by_timestamp(0).unwrap().unwrap().offset, 0);
    assert_eq!(log.fetch_offset_by_timestamp(5_000).unwrap(), None);
    let m = log.max_timestamp_and_offset().unwrap().unwrap();
    assert_eq!((m.timestamp, m.offset), (1_292, 89));
    // below the log start offset nothing is answered, even inside its batch
    log.delete_records_before(31).unwrap();
    let t = log.fetch_offset_by_timestamp(1_100).unwrap().unwrap();
    assert_eq!((t.timestamp, t.offset), (1_101, 31));
}

#[test]
fn offset_by_timestamp_inside_compressed_batches() {
    use crate::batch::builder::{batch_with_timestamp_deltas, compressed, Spec};
    use crate::compression::*;
    for (codec, xerial) in [
        (CODEC_GZIP, false),
        (CODEC_SNAPPY, false),
        (CODEC_SNAPPY, true),
        (CODEC_LZ4, false),
        (CODEC_ZSTD, false),
    ] {
        let what = format!("{} (xerial {xerial})", codec_name(codec));
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 300,
            ..small_config()
        };
        let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
        let values: Vec<Vec<u8>> = (0..5).map(|j| vec![b'a' + j; 40]).collect();
        let values: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        // Batch i holds offsets 5i..5i+4 at 10_000 + 100 i + [0, 40, 10, 20, 30]; record
        // 2 of batch 5 (offset 27) jumps to 50_000, the log's max.
        for i in 0..12i64 {
            let mut deltas = [0, 40, 10, 20, 30];
            if i == 5 {
                deltas[2] = 50_000 - 10_000 - 500;
            }
            let spec = Spec {
                base_timestamp: 10_000 + 100 * i,
                ..Spec::default()
            };
            let b = compressed(
                &batch_with_timestamp_deltas(&spec, &values, &deltas),
                codec,
                xerial,
            );
            log.append_as_leader(&b, 3, 0).unwrap();
        }
        assert!(log.segment_count() > 2, "{what}: spans segments");
        let at = |ts| {
            log.fetch_offset_by_timestamp(ts)
                .unwrap()
                .map(|t| (t.timestamp, t.offset, t.leader_epoch))
        };
        assert_eq!(at(0), Some((10_000, 0, Some(3))), "{what}");
        assert_eq!(at(10_325), Some((10_340, 16, Some(3))), "{what}");
        assert_eq!(at(10_310), Some((10_340, 16, Some(3))), "{what}");
        assert_eq!(at(10_341), Some((10_400, 20, Some(3))), "{what}");
        assert_eq!(at(10_402), Some((10_440, 21, Some(3))), "{what}");
        // Batch 5's outlier is the first record at or after 11_141.
        assert_eq!(at(11_141), Some((50_000, 27, Some(3))), "{what}");
        assert_eq!(at(50_001), None, "{what}");
        let m = log.max_timestamp_and_offset().unwrap().unwrap();
        assert_eq!((m.timestamp, m.offset), (50_000, 27), "{what}");
        // Below the log start offset nothing is answered, even inside its batch.
        log.delete_records_before(17).unwrap();
        assert_eq!(at(10_305), Some((10_310, 17, Some(3))), "{what}");
        assert_eq!(at(10_325), Some((10_330, 19, Some(3))), "{what}");
    }
}

#[test]
fn io_error_takes_the_log_offline() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("t-0");
    let log = Log::open(&log_dir, LogConfig::default(), 0, false, 0).unwrap();
    log.append_as_leader(&simple(1, 10, 0), 0, 0).unwrap();
    std::fs::remove_dir_all(&log_dir).unwrap();
    std::fs::write(&log_dir, b"not a directory").unwrap();
    let e = log.roll(0).unwrap_err();
    assert!(matches!(e, StorageError::Io { .. }), "{e}");
    assert!(log.is_offline());
    for e in [
        log.append_as_leader(&simple(1, 10, 0), 0, 0).unwrap_err(),
        log.read(0, 100, i64::MAX, true).unwrap_err(),
        log.flush().unwrap_err(),
    ] {
        assert!(
            matches!(e, StorageError::Offline(ref m) if m.contains("I/O error")),
            "{e}"
        );
    }
}

#[test]
fn readers_stay_valid_while_the_writer_rolls_and_deletes() {
    // In memory when possible: this checks concurrency, and thousands of rolls fsync.
    let dir = match tempfile::tempdir_in("/dev/shm") {
        Ok(dir) => dir,
        Err(_) => tempfile::tempdir().unwrap(),
    };
    let config = LogConfig {
        retention_bytes: 4096,
        ..small_config()
    };
    let log = Arc::new(Log::open(dir.path(), config, 0, false, 0).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    // Readers read at the start (segments being deleted) and at the tail (being truncated
    // and rewritten with batches of other sizes, so old and new batch boundaries differ):
    // every batch they get must be whole, valid and hold the offset asked for.
    let readers: Vec<_> = (0..3)
        .map(|n| {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let start = if n == 0 {
                        log.log_start_offset()
                    } else {
                        (log.log_end_offset() - 1 - n as i64).max(log.log_start_offset())
                    };
                    match log.read(start, 2048, i64::MAX, true) {
                        Ok(r) => {
                            let batches: Vec<_> = BatchIter::new(&r.records).collect();
                            let covered: usize =
                                batches.iter().map(|(_, h)| h.size_in_bytes()).sum();
                            assert_eq!(covered, r.records.len(), "whole batches only");
                            for (at, h) in &batches {
                                assert!(batch::crc_valid(&r.records[*at..*at + h.size_in_bytes()]));
                            }
                            if let Some((_, first)) = batches.first() {
                                assert!(
                                    first.base_offset <= start
                                        || first.base_offset == r.first_batch_offset.unwrap()
                                );
                                assert!(
                                    first.last_offset() >= start,
                                    "batch {first:?} for {start}"
                                );
                            }
                            reads += 1;
                        }
                        Err(StorageError::OffsetOutOfRange { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                reads
            })
        })
        .collect();
    for i in 0..10_000i64 {
        let records = 1 + (i % 3) as usize;
        let value_bytes = 20 + ((i * 37) % 150) as usize;
        log.append_as_leader(&simple(records, value_bytes, i), 0, 0)
            .unwrap();
        if i % 50 == 0 {
            log.delete_old_segments(0).unwrap();
        }
        if i % 7 == 0 {
            let leo = log.log_end_offset();
            log.truncate_to((leo - 1 - i % 4).max(0)).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

fn idempotent(pid: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
    use crate::batch::builder::{batch, Spec};
    let values: Vec<&[u8]> = (0..count).map(|_| b"v".as_slice()).collect();
    batch(
        &Spec {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            ..Spec::default()
        },
        &values,
    )
}

#[test]
fn leader_epochs_follow_appends_truncation_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(
        log.end_offset_for_epoch(0),
        EpochEndOffset {
            epoch: -1,
            end_offset: -1
        }
    );
    for epoch in [1, 1, 2, 2, 4] {
        log.append_as_leader(&simple(2, 10, 0), epoch, 0).unwrap();
    }
    assert_eq!(log.latest_epoch(), Some(4));
    assert_eq!(
        log.end_offset_for_epoch(1),
        EpochEndOffset {
            epoch: 1,
            end_offset: 4
        }
    );
    assert_eq!(
        log.end_offset_for_epoch(3),
        EpochEndOffset {
            epoch: 2,
            end_offset: 8
        }
    );
    assert_eq!(
        log.end_offset_for_epoch(4),
        EpochEndOffset {
            epoch: 4,
            end_offset: 10
        }
    );
    assert_eq!(log.epoch_for_offset(5), Some(2));
    let file = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(file, "0\n3\n1 0\n2 4\n4 8\n");
    log.truncate_to(8).unwrap();
    assert_eq!(log.latest_epoch(), Some(2));
    log.assign_epoch_start_offset(5, log.log_end_offset())
        .unwrap();
    assert_eq!(
        log.end_offset_for_epoch(2),
        EpochEndOffset {
            epoch: 2,
            end_offset: 8
        }
    );
    drop(log);
    // reopen: like Kafka, entries starting at or past the log end offset are dropped (a new
    // leader registers its epoch again when it takes over)
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.latest_epoch(), Some(2));
    assert_eq!(
        log.end_offset_for_epoch(1),
        EpochEndOffset {
            epoch: 1,
            end_offset: 4
        }
    );
    // the file lost: recovery rebuilds it from the batches' partition leader epochs
    drop(log);
    std::fs::remove_file(dir.path().join("leader-epoch-checkpoint")).unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.latest_epoch(), Some(2));
    assert_eq!(
        log.end_offset_for_epoch(1),
        EpochEndOffset {
            epoch: 1,
            end_offset: 4
        }
    );
    // retention moves the first entry up
    log.update_high_watermark(8);
    log.delete_records_before(5).unwrap();
    assert_eq!(
        log.end_offset_for_epoch(0),
        EpochEndOffset {
            epoch: 0,
            end_offset: 5
        }
    );
}

#[test]
fn producers_expire_after_the_configured_producer_id_expiration() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        producer_id_expiration_ms: 5_000,
        ..small_config()
    };
    let log = Log::open(dir.path(), config.clone(), 0, false, 0).unwrap();
    // The batch's timestamp is 1,000 (the builder's default).
    log.append_as_leader(&idempotent(7, 0, 0, 1), 0, 0).unwrap();
    assert_eq!(log.remove_expired_producers(5_999), 0);
    assert_eq!(log.remove_expired_producers(6_000), 1);
    // A changed config applies to the open log.
    log.append_as_leader(&idempotent(8, 0, 0, 1), 0, 0).unwrap();
    log.update_config(LogConfig {
        producer_id_expiration_ms: 60_000,
        ..config
    });
    assert_eq!(log.remove_expired_producers(6_000), 0);
    assert_eq!(log.remove_expired_producers(61_000), 1);
}

#[test]
fn idempotent_producers_duplicates_sequences_and_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    let first = log.append_as_leader(&idempotent(7, 0, 0, 3), 0, 0).unwrap();
    assert_eq!(
        (first.first_offset, first.last_offset, first.duplicate),
        (0, 2, false)
    );
    log.append_as_leader(&simple(1, 10, 0), 0, 0).unwrap();
    log.append_as_leader(&idempotent(7, 0, 3, 2), 0, 0).unwrap();
    let retry = log.append_as_leader(&idempotent(7, 0, 0, 3), 0, 0).unwrap();
    assert_eq!(
        (retry.first_offset, retry.last_offset, retry.duplicate),
        (0, 2, true)
    );
    assert_eq!(log.log_end_offset(), 6);
    assert!(matches!(
        log.append_as_leader(&idempotent(7, 0, 9, 1), 0, 0),
        Err(StorageError::OutOfOrderSequence(_))
    ));
    assert!(matches!(
        log.append_as_leader(&idempotent(7, 1, 5, 1), 0, 0),
        Err(StorageError::OutOfOrderSequence(_))
    ));
    log.append_as_leader(&idempotent(7, 1, 0, 1), 0, 0).unwrap();
    assert_eq!(log.last_producer_epoch(7), Some(1));
    assert!(matches!(
        log.append_as_leader(&idempotent(7, 0, 5, 1), 0, 0),
        Err(StorageError::InvalidProducerEpoch(_))
    ));
    // A new batch riding with a duplicate in one request is refused whole, never dropped
    // behind the duplicate's answer.
    let mut two = idempotent(8, 0, 0, 1);
    two.extend_from_slice(&idempotent(7, 1, 0, 1));
    assert!(matches!(
        log.append_as_leader(&two, 0, 0),
        Err(StorageError::InvalidRecord(_))
    ));
    log.append_as_leader(&idempotent(7, 1, 1, 1), 0, 0).unwrap();
    assert_eq!(
        log.append_as_leader(&idempotent(7, 1, 2, 2), 0, 0)
            .unwrap()
            .last_offset,
        9
    );
    let leo = log.log_end_offset();
    drop(log);
    // unclean reopen without a snapshot: state rebuilt from batch headers
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(log.last_producer_epoch(7), Some(1));
    assert!(
        log.append_as_leader(&idempotent(7, 1, 2, 2), 0, 0)
            .unwrap()
            .duplicate
    );
    assert!(matches!(
        log.append_as_leader(&idempotent(7, 1, 7, 1), 0, 0),
        Err(StorageError::OutOfOrderSequence(_))
    ));
    // truncation forgets the producer's later batches
    log.truncate_to(6).unwrap();
    assert_eq!(log.last_producer_epoch(7), Some(0));
    log.append_as_leader(&idempotent(7, 0, 5, 1), 0, 0).unwrap();
    log.close().unwrap();
    drop(log);
    assert!(std::fs::read_dir(dir.path()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".snapshot")));
    let log = Log::open(dir.path(), small_config(), 7, true, 0).unwrap();
    assert!(matches!(
        log.append_as_leader(&idempotent(7, 0, 7, 1), 0, 0),
        Err(StorageError::OutOfOrderSequence(_))
    ));
    assert!(
        !log.append_as_leader(&idempotent(7, 0, 6, 1), 0, 0)
            .unwrap()
            .duplicate
    );
}

#[test]
fn truncating_at_the_log_end_drops_an_epoch_registered_there() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    log.append_as_leader(&simple(2, 10, 0), 3, 0).unwrap();
    // Became leader at epoch 5, wrote nothing, lost leadership.
    log.assign_epoch_start_offset(5, 2).unwrap();
    assert_eq!(log.latest_epoch(), Some(5));
    log.truncate_to(2).unwrap();
    assert_eq!((log.log_end_offset(), log.latest_epoch()), (2, Some(3)));
    log.truncate_to(100).unwrap();
    assert_eq!(log.latest_epoch(), Some(3));
    // An empty log keeps no epoch at all.
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    log.assign_epoch_start_offset(2, 0).unwrap();
    log.truncate_to(0).unwrap();
    assert_eq!(log.latest_epoch(), None);
}

#[test]
fn a_follower_rebuilds_producer_state_from_the_leaders_batches() {
    use crate::batch::builder::{batch, Spec};
    let leader_batch = |base_offset: i64, seq: i32, count: usize| {
        let values: Vec<&[u8]> = (0..count).map(|_| b"v".as_slice()).collect();
        batch(
            &Spec {
                base_offset,
                producer_id: 7,
                producer_epoch: 0,
                base_sequence: seq,
                partition_leader_epoch: 1,
                ..Spec::default()
            },
            &values,
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    log.append_as_follower(&leader_batch(0, 0, 3)).unwrap();
    log.append_as_follower(&leader_batch(3, 3, 2)).unwrap();
    // The follower becomes leader: a producer retrying its last batch gets the original
    // offsets, and its next batch is in sequence.
    log.assign_epoch_start_offset(2, 5).unwrap();
    let retry = log.append_as_leader(&idempotent(7, 0, 3, 2), 2, 0).unwrap();
    assert_eq!(
        (retry.first_offset, retry.last_offset, retry.duplicate),
        (3, 4, true)
    );
    let next = log.append_as_leader(&idempotent(7, 0, 5, 1), 2, 0).unwrap();
    assert_eq!((next.first_offset, next.duplicate), (5, false));
    // A truncated tail is forgotten by the producer state too.
    log.truncate_to(3).unwrap();
    let again = log.append_as_leader(&idempotent(7, 0, 3, 2), 2, 0).unwrap();
    assert_eq!((again.first_offset, again.duplicate), (3, false));
}

#[test]
fn flush_messages_moves_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        flush_messages: 10,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
    log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
    log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
    assert_eq!(log.recovery_point(), 0);
    log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap(); // 12 unflushed >= 10
    assert_eq!(log.recovery_point(), 12);
}

#[test]
fn rolls_when_an_index_is_full() {
    let dir = tempfile::tempdir().unwrap();
    // 3 offset-index entries (24 bytes) and 2 time-index entries; an entry every batch
    let config = LogConfig {
        segment_index_bytes: 24,
        index_interval_bytes: 1,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config, 0, false, 0).unwrap();
    for i in 0..10 {
        log.append_as_leader(&simple(1, 10, i), 0, 0).unwrap();
    }
    assert!(log.segment_count() >= 3, "{:?}", log.segment_base_offsets());
    log.verify_indexes().unwrap();
    for seg in log.segments().iter() {
        assert!(seg.size() > 0);
    }
}

#[test]
fn a_read_waits_while_a_truncation_rewrites_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), LogConfig::default(), 0, false, 0).unwrap());
    for i in 0..10 {
        log.append_as_leader(&simple(1, 10, i), 0, 0).unwrap();
    }
    // What truncate_to does first: take the writer lock, make the generation odd.
    let w = log.writer.lock();
    log.truncation_generation.fetch_add(1, Ordering::SeqCst);
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || log.read(0, 1 << 20, i64::MAX, true).unwrap())
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !reader.is_finished(),
        "a read must not run during a truncation"
    );
    log.truncation_generation.fetch_add(1, Ordering::SeqCst);
    drop(w);
    let r = reader.join().unwrap();
    assert_eq!(BatchIter::new(&r.records).count(), 10);
}

#[test]
fn bytes_between_counts_whole_batches_across_segments_without_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for i in 0..20 {
        log.append_as_leader(&simple(2, 60, i), 0, 0).unwrap(); // offsets 2i, 2i+1
    }
    assert!(log.segment_count() > 2);
    let batch_bytes = simple(2, 60, 0).len() as u64;
    let leo = log.log_end_offset();
    let from_start = log.position_of(0).unwrap();
    assert_eq!(
        (from_start.segment_base_offset, from_start.position),
        (0, 0)
    );
    assert_eq!(
        log.bytes_between(&from_start, leo).unwrap(),
        Some(log.size_bytes())
    );
    assert_eq!(
        log.bytes_between(&from_start, i64::MAX).unwrap(),
        Some(log.size_bytes())
    );
    // An offset inside a batch counts from that batch, as a read returns it whole.
    let mid = log.position_of(11).unwrap();
    assert_eq!(
        mid,
        LogPosition {
            offset: 11,
            ..log.position_of(10).unwrap()
        }
    );
    assert_eq!(log.bytes_between(&mid, 16).unwrap(), Some(3 * batch_bytes));
    assert_eq!(log.bytes_between(&mid, 11).unwrap(), Some(0));
    assert_eq!(log.bytes_between(&mid, 5).unwrap(), Some(0));
    // The tail: nothing until an append, then that batch.
    let tail = log.position_of(leo).unwrap();
    assert_eq!(log.bytes_between(&tail, leo).unwrap(), Some(0));
    log.append_as_leader(&simple(2, 60, 0), 0, 0).unwrap();
    assert_eq!(
        log.bytes_between(&tail, log.log_end_offset()).unwrap(),
        Some(batch_bytes)
    );
    assert!(matches!(
        log.position_of(log.log_end_offset() + 1),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // A truncation invalidates positions taken before it.
    log.truncate_to(30).unwrap();
    assert_eq!(log.bytes_between(&mid, 20).unwrap(), None);
    let mid = log.position_of(11).unwrap();
    assert_eq!(log.bytes_between(&mid, 16).unwrap(), Some(3 * batch_bytes));
    // So does deleting the segment a position is in.
    log.update_high_watermark(30);
    log.delete_records_before(28).unwrap();
    assert_eq!(log.bytes_between(&from_start, 20).unwrap(), None);
}

#[test]
fn a_compacted_log_refuses_records_without_a_key_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("compacted-0");
    let config = LogConfig {
        compact: true,
        ..LogConfig::default()
    };
    let log = Log::open(&path, config, 0, false, 0).unwrap();
    let spec = builder::Spec::default();
    let keys: [Option<&[u8]>; 4] = [Some(b"a"), None, None, Some(b"b")];
    let values: [&[u8]; 4] = [b"1", b"2", b"3", b"4"];
    let refused = builder::batch_with_keys(&spec, &keys, &values);
    match log.append_as_leader(&refused, 0, 0) {
        Err(StorageError::RecordErrors {
            message,
            record_errors,
            invalid_timestamp: false,
        }) => {
            let why =
                "Compacted topic cannot accept message without key in topic partition compacted-0";
            assert_eq!(
                record_errors,
                vec![(1, why.to_owned()), (2, why.to_owned())]
            );
            assert_eq!(
                message,
                format!(
                    "One or more records have been rejected due to 2 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=1, message='{why}'), RecordError(batchIndex=2, message='{why}')]"
                )
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_end_offset(), 0);
    let keyed = builder::batch_with_keys(&spec, &[Some(b"a"), Some(b"b")], &[b"1", b"2"]);
    assert_eq!(log.append_as_leader(&keyed, 0, 0).unwrap().first_offset, 0);
    assert_eq!(log.log_end_offset(), 2);
    // The same batch is fine once the log is no longer compacted.
    log.update_config(LogConfig::default());
    assert_eq!(
        log.append_as_leader(&refused, 0, 0).unwrap().first_offset,
        2
    );
}

/// A log whose rolls queue their fsyncs on a flusher the test runs by hand.
fn log_with_manual_flusher(
    dir: &Path,
) -> (
    Arc<Log>,
    std::sync::mpsc::Receiver<crate::flusher::RollFlush>,
) {
    let log = Arc::new(Log::open(dir, small_config(), 0, false, 0).unwrap());
    let (flusher, queue) = Flusher::manual();
    log.set_flusher(flusher);
    (log, queue)
}

#[test]
fn a_roll_leaves_its_fsyncs_to_the_flusher_and_the_recovery_point_waits_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let (log, queue) = log_with_manual_flusher(dir.path());
    log.append_as_leader(&idempotent(7, 0, 0, 3), 0, 0).unwrap();
    log.roll(1).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 3]);
    // The roll returned with nothing fsynced: the recovery point has not moved.
    assert_eq!(log.recovery_point(), 0);
    // The producer snapshot is written at the roll (unsynced) and loadable.
    assert!(dir.path().join(format!("{:020}.snapshot", 3)).exists());
    log.append_as_leader(&simple(2, 10, 0), 0, 0).unwrap();
    assert_eq!(crate::flusher::run_queued(&queue), 1);
    // Durable below the new segment only: the appends after the roll are not flushed.
    assert_eq!(log.recovery_point(), 3);
    assert!(!log.is_offline());
}

#[test]
fn a_truncation_between_roll_and_flush_keeps_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let (log, queue) = log_with_manual_flusher(dir.path());
    log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
    log.roll(1).unwrap();
    log.truncate_to(2).unwrap();
    assert_eq!(crate::flusher::run_queued(&queue), 1);
    assert!(log.recovery_point() <= 2, "{}", log.recovery_point());
    assert!(!log.is_offline());
}

#[test]
fn a_log_deleted_before_its_roll_flush_does_not_go_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (log, queue) = log_with_manual_flusher(&dir.path().join("t-0"));
    log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
    log.roll(1).unwrap();
    std::fs::remove_dir_all(dir.path().join("t-0")).unwrap();
    assert_eq!(crate::flusher::run_queued(&queue), 1);
    assert!(!log.is_offline());
    assert_eq!(log.recovery_point(), 0);
}

#[test]
fn without_a_flusher_a_roll_fsyncs_inline() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    log.append_as_leader(&simple(4, 10, 0), 0, 0).unwrap();
    log.roll(1).unwrap();
    assert_eq!(log.recovery_point(), 4);
}

/// Recovery after a crash starts at the segment holding the recovery point, here in the middle
/// of epoch 5. Its batches must not rewrite the epoch cache: epochs 3, 5 and 7 keep their start
/// offsets, so OffsetForLeaderEpoch(3) still answers where epoch 5 began, and recovery logs no
/// conflicting entry.
#[test]
fn recovery_from_mid_log_leaves_the_epoch_cache_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    for epoch in [3, 5, 7] {
        for _ in 0..12 {
            log.append_as_leader(&simple(2, 10, 0), epoch, 0).unwrap();
        }
    }
    let before = log.epoch_entries();
    let start_of = |e: i32| before.iter().find(|(epoch, _)| *epoch == e).unwrap().1;
    let mid_epoch_5 = log
        .segment_base_offsets()
        .into_iter()
        .find(|&b| b > start_of(5) && b < start_of(7))
        .expect("a segment starting inside epoch 5");
    log.flush().unwrap();
    drop(log);
    // As after kill -9: not a clean shutdown, recovery point inside epoch 5.
    let log = Log::open(dir.path(), small_config(), mid_epoch_5, false, 0).unwrap();
    assert_eq!(log.epoch_entries(), before);
    assert_eq!(log.end_offset_for_epoch(3).end_offset, start_of(5));
    assert_eq!(log.end_offset_for_epoch(5).end_offset, start_of(7));
    assert_eq!(log.end_offset_for_epoch(4).epoch, 3);
}

#[test]
fn every_record_timestamp_is_checked_and_the_max_timestamp_recomputed() {
    // Kafka's LogValidator checks each record's timestamp, not the header's, and stores the
    // batch with the max timestamp of its records, whatever the producer wrote there.
    use crate::batch::builder::{batch_with_timestamp_deltas, compressed, Spec};
    use crate::compression::{CODEC_LZ4, CODEC_NONE};
    let now = 10_000_000;
    let config = LogConfig {
        message_timestamp_before_max_ms: 60_000,
        message_timestamp_after_max_ms: 60_000,
        ..LogConfig::default()
    };
    for codec in [CODEC_NONE, CODEC_LZ4] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(&dir.path().join("t-0"), config.clone(), 0, false, 0).unwrap();
        let spec = Spec {
            base_timestamp: now,
            ..Spec::default()
        };
        let values: [&[u8]; 3] = [b"a", b"b", b"c"];
        let pack = |b: Vec<u8>| {
            if codec == CODEC_NONE {
                b
            } else {
                compressed(&b, codec, false)
            }
        };
        // Record 1 is two hours old: header first and max timestamps are in range.
        let hidden = pack(batch_with_timestamp_deltas(
            &spec,
            &values,
            &[0, -7_200_000, 5],
        ));
        match log.append_as_leader(&hidden, 0, now) {
            Err(StorageError::RecordErrors {
                record_errors,
                invalid_timestamp: true,
                message,
            }) => {
                assert_eq!(record_errors.len(), 1, "{message}");
                assert_eq!(record_errors[0].0, 1);
                assert!(
                    record_errors[0].1.starts_with(&format!(
                        "Timestamp {} of message with offset 1 is out of range. The timestamp should be within [{}, {}]",
                        now - 7_200_000,
                        now - 60_000,
                        now + 60_000
                    )),
                    "{}",
                    record_errors[0].1
                );
            }
            other => panic!("codec {codec}: {other:?}"),
        }
        assert_eq!(log.log_end_offset(), 0);
        // A header whose max timestamp lies is stored with its records' real max.
        let mut lying = pack(batch_with_timestamp_deltas(&spec, &values, &[0, 30, 5]));
        lying[35..43].copy_from_slice(&(now - 50_000).to_be_bytes());
        let crc = crate::batch::compute_crc(&lying);
        lying[17..21].copy_from_slice(&crc.to_be_bytes());
        let info = log.append_as_leader(&lying, 0, now).unwrap();
        assert_eq!(info.max_timestamp, now + 30, "codec {codec}");
        // One that claims LogAppendTime on this CreateTime topic gives each record its max
        // timestamp, as Kafka reads such a batch, and is stored as CreateTime.
        let mut claims_append_time = pack(batch_with_timestamp_deltas(&spec, &values, &[0, 1, 2]));
        claims_append_time[35..43].copy_from_slice(&(now + 7).to_be_bytes());
        let attributes =
            i16::from_be_bytes([claims_append_time[21], claims_append_time[22]]) | 0x08;
        claims_append_time[21..23].copy_from_slice(&attributes.to_be_bytes());
        let crc = crate::batch::compute_crc(&claims_append_time);
        claims_append_time[17..21].copy_from_slice(&crc.to_be_bytes());
        log.append_as_leader(&claims_append_time, 0, now).unwrap();
        let stored = log.read(0, 1 << 20, i64::MAX, false).unwrap().records;
        let headers: Vec<BatchHeader> = BatchIter::new(&stored).map(|(_, h)| h).collect();
        assert_eq!(
            headers
                .iter()
                .map(|h| (h.max_timestamp, h.timestamp_type()))
                .collect::<Vec<_>>(),
            vec![
                (now + 30, TimestampType::CreateTime),
                (now + 7, TimestampType::CreateTime)
            ],
            "codec {codec}"
        );
        for (at, h) in BatchIter::new(&stored) {
            assert!(crate::batch::crc_valid(&stored[at..at + h.size_in_bytes()]));
        }
        let t = log.fetch_offset_by_timestamp(now + 1).unwrap().unwrap();
        assert_eq!((t.timestamp, t.offset), (now + 30, 1), "codec {codec}");
    }
}

#[test]
fn a_log_append_time_log_refuses_records_that_do_not_parse() {
    // Kafka's LogValidator walks the records of every batch, whatever the timestamp type: a
    // batch claiming more records than it holds is INVALID_RECORD, never stored.
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let log = Log::open(&dir.path().join("t-0"), config, 0, false, 0).unwrap();
    let mut b = builder::batch(&builder::Spec::default(), &[b"a", b"b", b"c"]);
    b[23..27].copy_from_slice(&3i32.to_be_bytes()); // last offset delta
    b[57..61].copy_from_slice(&4i32.to_be_bytes()); // records count
    let crc = crate::batch::compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        log.append_as_leader(&b, 0, 5_000),
        Err(StorageError::InvalidRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 0);
}

/// An inactive segment whose indexes have no entries (a segment smaller than
/// `index.interval.bytes`) keeps them empty when the log opens again: preallocating them would
/// leave files full of zeros that the next unclean open takes for corrupt indexes, recovering
/// every segment from the first such one instead of from the recovery point.
#[test]
fn empty_indexes_of_inactive_segments_stay_empty_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1024,
        segment_index_bytes: 4096,
        index_interval_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let log = Log::open(dir.path(), config.clone(), 0, false, 0).unwrap();
    for i in 0..20 {
        log.append_as_leader(&simple(2, 100, i), 0, 0).unwrap();
    }
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 3, "{bases:?}");
    let active = *bases.last().unwrap();
    log.close().unwrap();
    drop(log);
    let index_lens = |base: i64| {
        ["index", "timeindex"].map(|ext| {
            std::fs::metadata(dir.path().join(format!("{base:020}.{ext}")))
                .unwrap()
                .len()
        })
    };
    let inactive = &bases[..bases.len() - 1];
    let trimmed: Vec<[u64; 2]> = inactive.iter().map(|b| index_lens(*b)).collect();
    assert!(
        trimmed.iter().all(|[offsets, _]| *offsets == 0),
        "{trimmed:?}"
    );
    // Opened cleanly, then left as a kill -9 leaves it.
    let log = Log::open(dir.path(), config.clone(), active, true, 0).unwrap();
    assert_eq!(log.segment_base_offsets(), bases);
    drop(log);
    let after: Vec<[u64; 2]> = inactive.iter().map(|b| index_lens(*b)).collect();
    assert_eq!(after, trimmed, "empty indexes were preallocated again");
    let log = Log::open(dir.path(), config, active, false, 0).unwrap();
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(log.segment_base_offsets(), bases);
}

fn transactional(pid: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
    builder::transactional(&idempotent(pid, epoch, seq, count))
}

fn marker(control_type: batch::ControlRecordType) -> EndTxnMarker {
    EndTxnMarker {
        control_type,
        coordinator_epoch: 1,
    }
}

fn aborted(log: &Log, from: i64, upper: i64) -> Vec<(i64, i64, i64, i64)> {
    log.collect_aborted_transactions(from, upper)
        .iter()
        .map(|t| {
            (
                t.producer_id,
                t.first_offset,
                t.last_offset,
                t.last_stable_offset,
            )
        })
        .collect()
}

fn txn_index_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().to_owned())
        .filter(|n| n.ends_with(".txnindex"))
        .collect();
    names.sort();
    names
}

#[test]
fn transactions_hold_the_last_stable_offset_and_aborts_are_indexed() {
    use batch::ControlRecordType::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    log.append_as_leader(&simple(2, 10, 0), 0, 0).unwrap(); // 0-1
    log.append_as_leader(&transactional(1, 0, 0, 2), 0, 0)
        .unwrap(); // 2-3
    log.append_as_leader(&transactional(2, 0, 0, 1), 0, 0)
        .unwrap(); // 4
    log.append_as_leader(&transactional(1, 0, 2, 1), 0, 0)
        .unwrap(); // 5
    assert_eq!(log.ongoing_transactions(), vec![(2, 1), (4, 2)]);
    log.update_high_watermark(6);
    assert_eq!(
        (log.first_unstable_offset(), log.last_stable_offset()),
        (Some(2), 2)
    );
    log.update_high_watermark(1);
    assert_eq!(
        log.last_stable_offset(),
        1,
        "never above the high watermark"
    );

    // A non-transactional batch from a producer in a transaction is refused.
    assert!(matches!(
        log.append_as_leader(&idempotent(1, 0, 3, 1), 0, 0),
        Err(StorageError::InvalidTxnState(_))
    ));
    let info = log
        .append_end_txn_marker_as_leader(1, 0, marker(Abort), 0, 0)
        .unwrap();
    assert_eq!(info.first_offset, 6);
    // The abort is complete but its marker is not below the high watermark yet.
    log.update_high_watermark(6);
    assert_eq!(log.last_stable_offset(), 2);
    log.update_high_watermark(7);
    assert_eq!(log.last_stable_offset(), 4);
    // Producer 2's open transaction bounds the entry's last stable offset.
    assert_eq!(aborted(&log, 0, 7), vec![(1, 2, 6, 4)]);
    assert_eq!(aborted(&log, 6, 7), vec![(1, 2, 6, 4)]);
    assert_eq!(aborted(&log, 7, 8), vec![]);
    assert_eq!(aborted(&log, 0, 2), vec![]);

    log.append_end_txn_marker_as_leader(2, 0, marker(Commit), 0, 0)
        .unwrap(); // 7
    log.update_high_watermark(8);
    assert_eq!(
        (log.first_unstable_offset(), log.last_stable_offset()),
        (None, 8)
    );
    assert_eq!(
        aborted(&log, 0, 8),
        vec![(1, 2, 6, 4)],
        "a commit is not indexed"
    );
    // A marker of an older epoch is fenced; after the abort the producer writes anew.
    log.append_end_txn_marker_as_leader(1, 1, marker(Abort), 0, 0)
        .unwrap(); // 8, an empty transaction: nothing indexed
    assert!(matches!(
        log.append_end_txn_marker_as_leader(1, 0, marker(Abort), 0, 0),
        Err(StorageError::InvalidProducerEpoch(_))
    ));
    // So is a marker from a coordinator older than the last marker's (epoch 1).
    let zombie = EndTxnMarker {
        control_type: Abort,
        coordinator_epoch: 0,
    };
    assert!(matches!(
        log.append_end_txn_marker_as_leader(1, 1, zombie, 0, 0),
        Err(StorageError::TransactionCoordinatorFenced(_))
    ));
    assert_eq!(aborted(&log, 0, 9).len(), 1);
    log.append_as_leader(&idempotent(1, 1, 0, 1), 0, 0).unwrap();

    // A clean restart reads the index back; an unclean one rebuilds it from the markers.
    let leo = log.log_end_offset();
    log.close().unwrap();
    drop(log);
    assert!(!txn_index_files(dir.path()).is_empty());
    let log = Log::open(dir.path(), small_config(), leo, true, 0).unwrap();
    assert_eq!(aborted(&log, 0, leo), vec![(1, 2, 6, 4)]);
    drop(log);
    let indexes = txn_index_files(dir.path());
    for name in &indexes {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(aborted(&log, 0, leo), vec![(1, 2, 6, 4)]);
    assert_eq!(txn_index_files(dir.path()), indexes);
    assert_eq!(log.first_unstable_offset(), None);
}

#[test]
fn open_transactions_survive_restart_and_follow_truncation() {
    use batch::ControlRecordType::Abort;
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    log.append_as_leader(&transactional(1, 0, 0, 2), 0, 0)
        .unwrap(); // 0-1
    log.roll(0).unwrap(); // snapshot at 2 carries the open transaction
    log.append_as_leader(&transactional(1, 0, 2, 2), 0, 0)
        .unwrap(); // 2-3
    log.append_end_txn_marker_as_leader(1, 0, marker(Abort), 0, 0)
        .unwrap(); // 4
    log.append_as_leader(&transactional(3, 0, 0, 1), 0, 0)
        .unwrap(); // 5
    assert_eq!(aborted(&log, 0, 6), vec![(1, 0, 4, 5)]);
    assert_eq!(log.first_unstable_offset(), Some(5));

    // Truncating below the marker reopens the transaction and drops its entry.
    log.truncate_to(4).unwrap();
    assert_eq!(aborted(&log, 0, 4), vec![]);
    assert!(txn_index_files(dir.path()).is_empty());
    assert_eq!(log.ongoing_transactions(), vec![(0, 1)]);
    assert_eq!(log.first_unstable_offset(), Some(0));

    // Restarts, clean (from the snapshot) and unclean (from the log), keep it open.
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), small_config(), 4, true, 0).unwrap();
    assert_eq!(log.ongoing_transactions(), vec![(0, 1)]);
    drop(log);
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    assert_eq!(log.ongoing_transactions(), vec![(0, 1)]);
    assert_eq!(log.last_stable_offset(), 0);
    // Deleting the segment that opened it does not take the last stable offset below the
    // log start.
    log.update_high_watermark(4);
    log.delete_records_before(2).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(2));
}

#[test]
fn a_follower_rebuilds_transactions_from_the_leaders_batches() {
    use crate::batch::builder::{batch, Spec};
    let leader = tempfile::tempdir().unwrap();
    let follower = tempfile::tempdir().unwrap();
    let leader_log = Log::open(leader.path(), small_config(), 0, false, 0).unwrap();
    let follower_log = Log::open(follower.path(), small_config(), 0, false, 0).unwrap();
    leader_log
        .append_as_leader(&transactional(4, 0, 0, 3), 1, 0)
        .unwrap();
    leader_log
        .append_as_leader(&batch(&Spec::default(), &[b"plain".as_slice()]), 1, 0)
        .unwrap();
    leader_log
        .append_end_txn_marker_as_leader(4, 0, marker(batch::ControlRecordType::Abort), 1, 0)
        .unwrap();
    leader_log
        .append_as_leader(&transactional(5, 0, 0, 1), 1, 0)
        .unwrap();
    let all = leader_log.read(0, 1 << 20, i64::MAX, true).unwrap();
    follower_log.append_as_follower(&all.records).unwrap();
    for log in [&leader_log, &follower_log] {
        assert_eq!(aborted(log, 0, 6), vec![(4, 0, 4, 5)]);
        assert_eq!(log.ongoing_transactions(), vec![(5, 5)]);
    }
    assert_eq!(
        txn_index_files(leader.path()),
        txn_index_files(follower.path())
    );
}

/// KIP-890's guard: a transactional batch that would open a transaction is appended only with
/// the guard of a verification that no marker voided since; one into an open transaction
/// needs none; an unchecked append (verification off, coordinators) is not checked.
#[test]
fn a_verification_guard_admits_one_transaction_and_a_marker_voids_it() {
    use batch::ControlRecordType::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config(), 0, false, 0).unwrap();
    let refused = |r: Result<LogAppendInfo>| matches!(r, Err(StorageError::InvalidTxnState(_)));
    // Not verified: refused, nothing written.
    assert!(refused(log.append_as_leader_checked(
        &transactional(1, 0, 0, 1),
        0,
        0,
        TxnVerification::Verified(None)
    )));
    assert_eq!(log.log_end_offset(), 0);
    // Verified: the first batch opens the transaction, the next needs no guard.
    let guard = log
        .start_transaction_verification(1, 0)
        .expect("no open transaction");
    log.append_as_leader_checked(
        &transactional(1, 0, 0, 1),
        0,
        0,
        TxnVerification::Verified(Some(guard)),
    )
    .unwrap();
    assert_eq!(log.start_transaction_verification(1, 0), None, "open now");
    log.append_as_leader_checked(
        &transactional(1, 0, 1, 1),
        0,
        0,
        TxnVerification::Verified(None),
    )
    .unwrap();
    log.append_end_txn_marker_as_leader(1, 0, marker(Commit), 0, 0)
        .unwrap();
    // A verification that a marker overtakes (the transaction timed out and was aborted while
    // the coordinator was asked): its guard no longer opens a transaction.
    let guard = log.start_transaction_verification(1, 0).expect("closed");
    log.append_end_txn_marker_as_leader(1, 0, marker(Abort), 0, 0)
        .unwrap();
    let end = log.log_end_offset();
    assert!(refused(log.append_as_leader_checked(
        &transactional(1, 0, 2, 1),
        0,
        0,
        TxnVerification::Verified(Some(guard))
    )));
    assert_eq!(log.log_end_offset(), end);
    // A guard of another epoch does not pass either; unchecked appends are not checked.
    let guard = log.start_transaction_verification(1, 0).expect("closed");
    assert!(refused(log.append_as_leader_checked(
        &transactional(1, 1, 0, 1),
        0,
        0,
        TxnVerification::Verified(Some(guard))
    )));
    log.append_as_leader(&transactional(1, 1, 0, 1), 0, 0)
        .unwrap();
}
