//! Writes a small multi-segment log in Kafka's on-disk format and closes it cleanly, so that
//! Apache Kafka's `kafka.tools.DumpLogSegments` can be run over the files.
//!
//! Usage: `write_sample_log <log dir> [topic-partition]` (default partition `sample-0`).
//! Prints the partition directory. The log holds CreateTime batches from a plain producer and
//! from an idempotent one (so there are producer snapshots), LogAppendTime batches, three leader
//! epochs, and enough data to roll several segments with sparse index entries.

use std::path::PathBuf;

use kafkaiq_storage::batch::builder::{batch, Spec};
use kafkaiq_storage::{LogConfig, LogManager, TimestampType, TopicPartition};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: write_sample_log <log dir> [topic-partition]");
        std::process::exit(2);
    };
    let tp = match args.next() {
        Some(name) => TopicPartition::parse_dir_name(&name).unwrap_or_else(|| {
            eprintln!("not a <topic>-<partition> name: {name}");
            std::process::exit(2);
        }),
        None => TopicPartition::new("sample", 0),
    };
    let config = LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        segment_index_bytes: 64 * 1024,
        ..LogConfig::default()
    };
    let dirs = vec![PathBuf::from(&dir)];
    let manager = LogManager::open(&dirs, config.clone(), 0).expect("open the log dir");
    let log = manager
        .get_or_create(&tp, config.clone(), 0)
        .expect("create the log");
    let base_ts = 1_700_000_000_000i64;
    let mut sequence = 0;
    for i in 0..120i64 {
        let epoch = (i / 40) as i32; // epochs 0, 1, 2
        let records = 1 + (i % 7) as usize;
        let value = format!("value-{i:04}-").repeat(1 + (i % 13) as usize);
        let values: Vec<&[u8]> = (0..records).map(|_| value.as_bytes()).collect();
        let ts = base_ts + i * 1000;
        if i == 80 {
            log.update_config(LogConfig {
                message_timestamp_type: TimestampType::LogAppendTime,
                ..config.clone()
            });
        }
        let spec = if i % 3 == 0 {
            let s = Spec {
                base_timestamp: ts,
                producer_id: 4242,
                producer_epoch: 0,
                base_sequence: sequence,
                ..Spec::default()
            };
            sequence += records as i32;
            s
        } else {
            Spec {
                base_timestamp: ts,
                ..Spec::default()
            }
        };
        let info = log
            .append_as_leader(&batch(&spec, &values), epoch, ts + 500)
            .expect("append");
        assert!(!info.duplicate);
    }
    let mut hws = std::collections::HashMap::new();
    hws.insert(tp.clone(), log.log_end_offset());
    manager
        .checkpoint_high_watermarks(&hws)
        .expect("high watermark checkpoint");
    eprintln!(
        "wrote {} offsets in {} segments",
        log.log_end_offset(),
        log.segment_count()
    );
    manager.shutdown().expect("clean shutdown");
    println!("{}", log.dir().display());
}
