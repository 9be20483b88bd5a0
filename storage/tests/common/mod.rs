//! What the kill tests share: their random numbers, their seed, and running a child (this test
//! binary again, one ignored test) until a random moment, then SIGKILL.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `KAFKAIQ_CRASH_SEED`, or one from the clock; printed so a failure can be repeated.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("KAFKAIQ_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test} seed {seed} (KAFKAIQ_CRASH_SEED to repeat)");
    seed
}

/// `name` from the environment, or `default`.
pub fn iterations(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What a killed child printed, and whether it was still running when killed.
pub struct Killed {
    pub stdout: String,
    pub was_running: bool,
}

/// Runs the ignored test `child` of this binary with `env`, waits for its "started" line, lets
/// it run `run_for`, then SIGKILLs it.
pub fn run_and_kill(child: &str, env: &[(&str, String)], run_for: Duration) -> Killed {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(exe);
    command
        .args([
            child,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut process = command.spawn().unwrap();
    let mut stdout = BufReader::new(process.stdout.take().unwrap());
    let mut out = String::new();
    while !out.contains("started") {
        if stdout.read_line(&mut out).unwrap() == 0 {
            break;
        }
    }
    std::thread::sleep(run_for);
    let was_running = process.try_wait().unwrap().is_none();
    process.kill().unwrap(); // SIGKILL
    process.wait().unwrap();
    stdout.read_to_string(&mut out).unwrap();
    Killed {
        stdout: out,
        was_running,
    }
}

/// The largest `flushed <offset>` line a child printed.
pub fn flushed(stdout: &str) -> Option<i64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("flushed "))
        .filter_map(|n| n.trim().parse::<i64>().ok())
        .max()
}
