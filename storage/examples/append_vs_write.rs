//! Interleaved comparison of `Log::append_as_leader` with a plain sequential `write()` of the
//! same 16 KiB batches, robust to a busy machine: rounds alternate between the two and the
//! median round of each is reported, with their ratio. Nothing is fsynced.
//!
//! Both start each round on a new, empty file (the log by rolling a new segment and deleting the
//! old one by retention), so both pay for the same block allocation.
//!
//! Usage: `append_vs_write [dir] [rounds]` (default: a temporary directory under /tmp, 40).

use std::fs::File;
use std::io::Write;
use std::time::Instant;

use kafkaiq_storage::batch::builder::{batch, Spec};
use kafkaiq_storage::{Log, LogConfig};

const BATCHES_PER_ROUND: usize = 512; // 8 MiB

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let base = args.next().unwrap_or_else(|| "/tmp".into());
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(40);
    let dir = tempfile::tempdir_in(base).unwrap();
    let value = vec![7u8; 1000];
    let values: Vec<&[u8]> = (0..16).map(|_| value.as_slice()).collect();
    let b = batch(&Spec::default(), &values);
    let config = LogConfig {
        retention_bytes: 0,
        ..LogConfig::default()
    };
    let log = Log::open(&dir.path().join("bench-0"), config, 0, true, 0).unwrap();
    let (mut log_rates, mut write_rates) = (vec![], vec![]);
    let mb = (b.len() * BATCHES_PER_ROUND) as f64 / (1024.0 * 1024.0);
    for round in 0..rounds {
        let path = dir.path().join(format!("plain-{round}.bin"));
        let mut file = File::create(&path).unwrap();
        let start = Instant::now();
        for _ in 0..BATCHES_PER_ROUND {
            file.write_all(&b).unwrap();
        }
        write_rates.push(mb / start.elapsed().as_secs_f64());
        drop(file);
        std::fs::remove_file(&path).unwrap();

        let start = Instant::now();
        for _ in 0..BATCHES_PER_ROUND {
            log.append_as_leader(&b, 1, 0).unwrap();
        }
        log_rates.push(mb / start.elapsed().as_secs_f64());
        log.roll(0).unwrap();
        log.delete_old_segments(0).unwrap();
    }
    let (w, l) = (median(write_rates), median(log_rates));
    println!("batch {} bytes: plain write() {w:.0} MiB/s, Log::append_as_leader {l:.0} MiB/s, ratio {:.2}", b.len(), l / w);
}
