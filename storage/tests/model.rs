//! Property test: random appends, reads, truncations, rolls, retention, DeleteRecords, flushes
//! and clean/unclean reopens run against the real `LogManager`/`Log` and a simple in-memory
//! model of the log (a list of batches plus start and end offsets). After every step the log's
//! offsets must equal the model's, every read must return exactly the model's batches, and the
//! indexes must point at the batches they name.

use std::path::PathBuf;
use std::sync::Arc;

use kafkaiq_storage::batch::builder::{batch, Spec};
use kafkaiq_storage::batch::{self, BatchIter};
use kafkaiq_storage::{Log, LogConfig, LogManager, StorageError, TopicPartition};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    AppendLeader {
        records: usize,
        value_bytes: usize,
        epoch_bump: bool,
    },
    AppendFollower {
        records: usize,
        value_bytes: usize,
    },
    Read {
        at: f64,
        max_bytes: usize,
        hw_back: i64,
        min_one: bool,
    },
    TruncateTo {
        at: f64,
    },
    DeleteRecords {
        at: f64,
    },
    RetentionBytes {
        keep: u64,
    },
    Roll,
    Flush,
    Reopen {
        clean: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 0usize..300, proptest::bool::weighted(0.1)).prop_map(
            |(records, value_bytes, epoch_bump)| Op::AppendLeader { records, value_bytes, epoch_bump }
        ),
        2 => (1usize..6, 0usize..300)
            .prop_map(|(records, value_bytes)| Op::AppendFollower { records, value_bytes }),
        5 => (0.0f64..1.0, 1usize..3000, 0i64..5, any::<bool>()).prop_map(
            |(at, max_bytes, hw_back, min_one)| Op::Read { at, max_bytes, hw_back, min_one }
        ),
        1 => (0.0f64..1.0).prop_map(|at| Op::TruncateTo { at }),
        1 => (0.0f64..1.0).prop_map(|at| Op::DeleteRecords { at }),
        1 => (0u64..6000).prop_map(|keep| Op::RetentionBytes { keep }),
        1 => Just(Op::Roll),
        1 => Just(Op::Flush),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

#[derive(Clone)]
struct ModelBatch {
    base: i64,
    last: i64,
    bytes: Vec<u8>,
}

/// The model: the batches holding offsets at or past the log start offset, in order.
struct Model {
    batches: Vec<ModelBatch>,
    log_start_offset: i64,
    log_end_offset: i64,
    epoch: i32,
}

impl Model {
    fn drop_below_start(&mut self) {
        let lso = self.log_start_offset;
        self.batches.retain(|b| b.last >= lso);
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2000,
        segment_index_bytes: 400,
        index_interval_bytes: 200,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

struct Harness {
    dirs: Vec<PathBuf>,
    manager: LogManager,
    log: Arc<Log>,
    tp: TopicPartition,
}

impl Harness {
    fn reopen(self, clean: bool) -> Harness {
        if clean {
            self.manager.shutdown().unwrap();
        } else {
            // an unclean stop some time after a periodic checkpoint
            self.manager
                .checkpoint_recovery_points_and_log_start_offsets()
                .unwrap();
        }
        let Harness { dirs, tp, .. } = self;
        let manager = LogManager::open(&dirs, config(), 0).unwrap();
        let log = manager.get(&tp).expect("the log is found again");
        Harness {
            dirs,
            manager,
            log,
            tp,
        }
    }
}

fn pick(model: &Model, at: f64) -> i64 {
    let span = model.log_end_offset - model.log_start_offset;
    model.log_start_offset + (at * (span + 1) as f64) as i64
}

fn check_read(
    model: &Model,
    log: &Log,
    start: i64,
    max_bytes: usize,
    max_offset: i64,
    min_one: bool,
) {
    let got = log.read(start, max_bytes, max_offset, min_one);
    if start < model.log_start_offset || start > model.log_end_offset {
        assert!(
            matches!(got, Err(StorageError::OffsetOutOfRange { .. })),
            "{got:?}"
        );
        return;
    }
    let got = got.unwrap();
    let bound = max_offset.min(model.log_end_offset);
    let run: Vec<&ModelBatch> = model
        .batches
        .iter()
        .filter(|b| b.last >= start && b.last < bound)
        .collect();
    let got_batches: Vec<(usize, batch::BatchHeader)> = BatchIter::new(&got.records).collect();
    let covered: usize = got_batches.iter().map(|(_, h)| h.size_in_bytes()).sum();
    assert_eq!(covered, got.records.len(), "only whole batches");
    assert!(got_batches.len() <= run.len());
    for ((at, h), want) in got_batches.iter().zip(&run) {
        assert_eq!(
            &got.records[*at..*at + h.size_in_bytes()],
            want.bytes.as_slice(),
            "batch {}",
            want.base
        );
    }
    let expected_first = run
        .first()
        .filter(|_| !got_batches.is_empty())
        .map(|b| b.base);
    assert_eq!(got.first_batch_offset, expected_first);
    let first_fits = run
        .first()
        .is_some_and(|b| b.bytes.len() <= max_bytes || min_one);
    if first_fits {
        assert!(
            !got_batches.is_empty(),
            "the first eligible batch must be returned"
        );
    }
    if !got_batches.is_empty() {
        assert!(covered <= max_bytes || got_batches.len() == 1);
        // a read stops only at the byte limit, the bound, or a segment boundary
        if let Some(next) = run.get(got_batches.len()) {
            let at_segment_start = log.segment_base_offsets().contains(&next.base);
            assert!(
                at_segment_start || covered + next.bytes.len() > max_bytes,
                "read stopped early before {}",
                next.base
            );
        }
    }
}

/// A scratch directory in memory when the machine has one: the model checks logic, not the
/// disk, and every roll fsyncs several files.
fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

fn run(ops: Vec<Op>) {
    let root = scratch_dir();
    let dirs = vec![root.path().join("data")];
    let manager = LogManager::open(&dirs, config(), 0).unwrap();
    let tp = TopicPartition::new("model", 0);
    let log = manager.get_or_create(&tp, config(), 0).unwrap();
    let mut h = Harness {
        dirs,
        manager,
        log,
        tp,
    };
    let mut m = Model {
        batches: vec![],
        log_start_offset: 0,
        log_end_offset: 0,
        epoch: 0,
    };
    let mut ts = 1_000i64;
    for op in ops {
        match op {
            Op::AppendLeader {
                records,
                value_bytes,
                epoch_bump,
            } => {
                if epoch_bump {
                    m.epoch += 1;
                }
                ts += 10;
                let value = vec![b'a' + (ts % 26) as u8; value_bytes];
                let values: Vec<&[u8]> = (0..records).map(|_| value.as_slice()).collect();
                let mut b = batch(
                    &Spec {
                        base_timestamp: ts,
                        ..Spec::default()
                    },
                    &values,
                );
                let info = h.log.append_as_leader(&b, m.epoch, ts).unwrap();
                assert_eq!(info.first_offset, m.log_end_offset);
                batch::set_base_offset(&mut b, m.log_end_offset);
                batch::set_partition_leader_epoch(&mut b, m.epoch);
                let last = m.log_end_offset + records as i64 - 1;
                m.batches.push(ModelBatch {
                    base: m.log_end_offset,
                    last,
                    bytes: b,
                });
                m.log_end_offset = last + 1;
            }
            Op::AppendFollower {
                records,
                value_bytes,
            } => {
                ts += 10;
                let value = vec![b'f'; value_bytes];
                let values: Vec<&[u8]> = (0..records).map(|_| value.as_slice()).collect();
                let spec = Spec {
                    base_offset: m.log_end_offset,
                    base_timestamp: ts,
                    partition_leader_epoch: m.epoch,
                    ..Spec::default()
                };
                let b = batch(&spec, &values);
                if m.log_end_offset > 0 {
                    // Offsets that go back are refused (gaps, a compacted leader's, are kept).
                    let overlap = batch(
                        &Spec {
                            base_offset: m.log_end_offset - 1,
                            ..spec.clone()
                        },
                        &values,
                    );
                    assert!(matches!(
                        h.log.append_as_follower(&overlap),
                        Err(StorageError::NonMonotonicAppend(_))
                    ));
                }
                h.log.append_as_follower(&b).unwrap();
                let last = m.log_end_offset + records as i64 - 1;
                m.batches.push(ModelBatch {
                    base: m.log_end_offset,
                    last,
                    bytes: b,
                });
                m.log_end_offset = last + 1;
            }
            Op::Read {
                at,
                max_bytes,
                hw_back,
                min_one,
            } => {
                let start = pick(&m, at);
                check_read(
                    &m,
                    &h.log,
                    start,
                    max_bytes,
                    m.log_end_offset - hw_back,
                    min_one,
                );
                check_read(
                    &m,
                    &h.log,
                    m.log_start_offset - 1,
                    max_bytes,
                    i64::MAX,
                    min_one,
                );
                check_read(
                    &m,
                    &h.log,
                    m.log_end_offset + 1,
                    max_bytes,
                    i64::MAX,
                    min_one,
                );
            }
            Op::TruncateTo { at } => {
                let x = pick(&m, at);
                h.log.truncate_to(x).unwrap();
                if x < m.log_end_offset {
                    // whole batches go; if nothing visible remains the log restarts at its start
                    m.batches.retain(|b| b.last < x);
                    m.log_end_offset = m.batches.last().map_or(m.log_start_offset, |b| b.last + 1);
                }
            }
            Op::DeleteRecords { at } => {
                let x = pick(&m, at);
                h.log.delete_records_before(x).unwrap();
                m.log_start_offset = m.log_start_offset.max(x);
                m.drop_below_start();
            }
            Op::RetentionBytes { keep } => {
                h.log.update_config(LogConfig {
                    retention_bytes: keep as i64,
                    ..config()
                });
                h.log.delete_old_segments(ts).unwrap();
                h.log.update_config(config());
                let lso = h.log.log_start_offset();
                assert!(lso >= m.log_start_offset);
                if lso > m.log_start_offset {
                    assert_eq!(h.log.segment_base_offsets()[0], lso, "whole segments only");
                    assert!(h.log.size_bytes() >= keep || h.log.segment_count() == 1);
                }
                m.log_start_offset = lso;
                m.drop_below_start();
            }
            Op::Roll => h.log.roll(ts).unwrap(),
            Op::Flush => {
                h.log.flush().unwrap();
                assert_eq!(h.log.recovery_point(), m.log_end_offset);
            }
            Op::Reopen { clean } => {
                h = h.reopen(clean);
            }
        }
        assert_eq!(
            h.log.log_start_offset(),
            m.log_start_offset,
            "log start offset"
        );
        assert_eq!(h.log.log_end_offset(), m.log_end_offset, "log end offset");
        h.log.verify_indexes().unwrap();
    }
    // everything visible reads back in order
    let mut next = m.log_start_offset;
    let mut seen = 0;
    while next < m.log_end_offset {
        let r = h.log.read(next, 1 << 20, i64::MAX, true).unwrap();
        let batches: Vec<_> = BatchIter::new(&r.records).collect();
        seen += batches.len();
        next = batches.last().expect("progress").1.last_offset() + 1;
    }
    assert_eq!(seen, m.batches.len());
}

proptest! {
    // PROPTEST_CASES runs more (or fewer) cases than the default 256. Before them, every seed in
    // model.proptest-regressions (committed, next to this file) is replayed, and a new failure
    // adds its seed there.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops);
    }
}
