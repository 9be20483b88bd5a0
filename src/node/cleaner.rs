//! The log cleaner threads (Kafka's `LogCleaner`): `log.cleaner.threads` threads, each with its
//! own key → offset map of `log.cleaner.dedupe.buffer.size / threads` bytes, that clean the
//! filthiest due compacted log in turn ([`LogManager::clean_filthiest`]) and back off
//! `log.cleaner.backoff.ms` when none is due. Reads and writes of all threads share one
//! throttle, `log.cleaner.io.max.bytes.per.second`. Each cleaning is logged with its MB/s read
//! and written, and feeds the `kafka.log:type=LogCleaner` gauges ([`CleanerStats`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kafkaiq_storage::cleaner::{CleanOutcome, OffsetMap};
use kafkaiq_storage::LogManager;

use crate::clock::SharedClock;

pub use crate::config::CleanerSettings;
pub use crate::metrics::CleanerStats;

/// Kafka's `Throttler`: keeps the bytes told per second at or under a rate by sleeping, checked
/// every [`THROTTLE_CHECK_MS`]. The rate can change while the threads run.
struct Throttler {
    /// The rate in bytes per second, as `f64` bits; not finite or ≤ 0 means unthrottled.
    bytes_per_second: AtomicU64,
    period: Mutex<(Instant, u64)>,
}

const THROTTLE_CHECK_MS: u64 = 300;

impl Throttler {
    fn new(bytes_per_second: f64) -> Throttler {
        Throttler {
            bytes_per_second: AtomicU64::new(bytes_per_second.to_bits()),
            period: Mutex::new((Instant::now(), 0)),
        }
    }

    fn set_rate(&self, bytes_per_second: f64) {
        self.bytes_per_second
            .store(bytes_per_second.to_bits(), Ordering::Relaxed);
    }

    fn maybe_throttle(&self, bytes: u64) {
        let rate = f64::from_bits(self.bytes_per_second.load(Ordering::Relaxed));
        // The default (Kafka's Double.MaxValue) is no throttle at all: not even the lock.
        if !rate.is_finite() || rate <= 0.0 || rate == f64::MAX {
            return;
        }
        let mut period = self.period.lock().expect("throttle lock");
        period.1 += bytes;
        let elapsed = period.0.elapsed();
        if elapsed < Duration::from_millis(THROTTLE_CHECK_MS) {
            return;
        }
        let due = Duration::from_secs_f64(period.1 as f64 / rate);
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
        *period = (Instant::now(), 0);
    }
}

/// The cleaner threads (Kafka's `LogCleaner`). Its settings are dynamic broker configs: a
/// change stops the threads after the cleaning each is in and starts them anew with the new
/// map size, thread count and back-off, as Kafka's `LogCleaner#reconfigure` does.
pub struct LogCleaner {
    logs: Arc<LogManager>,
    clock: SharedClock,
    throttler: Arc<Throttler>,
    running: Mutex<Running>,
    /// Set by [`LogCleaner::shutdown`]: a cleaning under way stops at its next batch.
    closing: Arc<AtomicBool>,
    pub stats: Arc<CleanerStats>,
}

/// The threads of one configuration.
struct Running {
    settings: CleanerSettings,
    threads: Vec<std::thread::JoinHandle<()>>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    /// Set by [`LogCleaner::shutdown`]: no thread starts again.
    closed: bool,
}

impl Running {
    /// Stops the threads after the cleaning each is in (a swap is never cut short here).
    fn stop(&mut self) {
        let (lock, wake) = &*self.stop;
        *lock.lock().expect("cleaner stop lock") = true;
        wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl LogCleaner {
    /// Starts the threads (none when `log.cleaner.enable` is false: compacted logs then grow,
    /// as in Kafka).
    pub fn start(
        settings: &CleanerSettings,
        logs: Arc<LogManager>,
        clock: SharedClock,
        stats: Arc<CleanerStats>,
    ) -> std::io::Result<LogCleaner> {
        let cleaner = LogCleaner {
            logs,
            clock,
            throttler: Arc::new(Throttler::new(settings.io_max_bytes_per_second)),
            running: Mutex::new(Running {
                settings: settings.clone(),
                threads: Vec::new(),
                stop: Arc::new((Mutex::new(false), Condvar::new())),
                closed: false,
            }),
            closing: Arc::new(AtomicBool::new(false)),
            stats,
        };
        {
            let mut running = cleaner.running.lock().expect("cleaner lock");
            cleaner.spawn(&mut running)?;
        }
        Ok(cleaner)
    }

    /// Takes new settings: when they differ from the running ones, the threads stop after
    /// their cleaning and start again with them. Whether they were restarted.
    pub fn reconfigure(&self, settings: &CleanerSettings) -> std::io::Result<bool> {
        let mut running = self.running.lock().expect("cleaner lock");
        if running.closed || running.settings == *settings {
            return Ok(false);
        }
        tracing::info!(
            threads = settings.threads,
            dedupe_buffer_size = settings.dedupe_buffer_size,
            io_max_bytes_per_second = settings.io_max_bytes_per_second,
            backoff_ms = settings.backoff_ms,
            "log cleaner reconfigured"
        );
        self.throttler.set_rate(settings.io_max_bytes_per_second);
        running.stop();
        running.settings = settings.clone();
        running.stop = Arc::new((Mutex::new(false), Condvar::new()));
        self.spawn(&mut running)?;
        Ok(true)
    }

    /// How many cleaner threads run now.
    pub fn thread_count(&self) -> usize {
        self.running.lock().expect("cleaner lock").threads.len()
    }

    /// Stops the threads: a cleaning under way stops at its next batch, swapping nothing more in
    /// (the `.cleaned` files it leaves are removed when the log is opened). They do not start
    /// again.
    pub fn shutdown(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let mut running = self.running.lock().expect("cleaner lock");
        running.closed = true;
        running.stop();
    }

    fn spawn(&self, running: &mut Running) -> std::io::Result<()> {
        let settings = &running.settings;
        let count = if settings.enable { settings.threads } else { 0 };
        let map_bytes = settings.map_bytes();
        for id in 0..count {
            let closing = self.closing.clone();
            let (logs, clock, stop, stats, throttler) = (
                self.logs.clone(),
                self.clock.clone(),
                running.stop.clone(),
                self.stats.clone(),
                self.throttler.clone(),
            );
            let (load_factor, backoff) = (settings.load_factor, settings.backoff_ms);
            running.threads.push(
                std::thread::Builder::new()
                    .name(format!("kafka-log-cleaner-thread-{id}"))
                    .spawn(move || {
                        let mut map = OffsetMap::new(map_bytes);
                        loop {
                            let started = Instant::now();
                            let mut throttle = |bytes: u64| throttler.maybe_throttle(bytes);
                            let result = logs.clean_filthiest_until(
                                &mut map,
                                load_factor,
                                clock.now_ms(),
                                &mut throttle,
                                &|| closing.load(Ordering::Relaxed),
                            );
                            let cleaned = match result {
                                Ok(Some(report)) => {
                                    record(id, &report, started.elapsed(), &stats);
                                    // Nothing to clean after all (the uncleanable offset
                                    // inside a segment): back off rather than spin.
                                    !matches!(report.outcome, CleanOutcome::Nothing)
                                }
                                Ok(None) => false,
                                Err(e) => {
                                    tracing::warn!(thread = id, error = %e, "log cleaning failed");
                                    false
                                }
                            };
                            let (lock, wake) = &*stop;
                            let mut stopped = lock.lock().expect("cleaner stop lock");
                            if !cleaned && !*stopped {
                                stopped = wake
                                    .wait_timeout(stopped, Duration::from_millis(backoff))
                                    .expect("cleaner stop lock")
                                    .0;
                            }
                            if *stopped {
                                return;
                            }
                        }
                    })?,
            );
        }
        Ok(())
    }
}

/// How often [`follow_config`] looks at the effective broker config.
const CONFIG_CHECK_MS: u64 = 1_000;

/// Gives the cleaner the `log.cleaner.*` values of the effective broker config (the dynamic
/// broker configs of the latest image over `server.properties`) whenever they change, until
/// shutdown.
pub async fn follow_config(
    cleaner: Arc<LogCleaner>,
    replicas: Arc<crate::replica::ReplicaManager>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(CONFIG_CHECK_MS));
    let mut seen = replicas.effective_config();
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            _ = tick.tick() => {
                let config = replicas.effective_config();
                if Arc::ptr_eq(&config, &seen) {
                    continue;
                }
                seen = config.clone();
                let cleaner = cleaner.clone();
                let restarted = tokio::task::spawn_blocking(move || {
                    cleaner.reconfigure(&config.cleaner)
                })
                .await;
                if let Ok(Err(e)) = restarted {
                    tracing::error!(error = %e, "log cleaner threads could not be restarted");
                }
            }
        }
    }
}

/// Logs one cleaning (Kafka's per-pass report) and updates the gauges.
fn record(
    thread: usize,
    report: &kafkaiq_storage::manager::CleanReport,
    elapsed: Duration,
    stats: &CleanerStats,
) {
    let s = match &report.outcome {
        CleanOutcome::Cleaned { stats, .. }
        | CleanOutcome::Abandoned { stats }
        | CleanOutcome::Stopped { stats } => *stats,
        CleanOutcome::Nothing => return,
    };
    let secs = elapsed.as_secs_f64().max(1e-6);
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let read = s.map_bytes_read + s.bytes_read;
    // Like Kafka's pass report: MB read is the log processed (each byte once, by the copy);
    // the read that built the offset map is reported apart, as Kafka's "Indexed" line.
    tracing::info!(
        thread,
        partition = %format!("{}-{}", report.tp.topic, report.tp.partition),
        dirty_section = %format!("[{}, {})", report.range.first_dirty, report.range.first_uncleanable),
        outcome = match report.outcome {
            CleanOutcome::Cleaned { .. } => "cleaned",
            CleanOutcome::Stopped { .. } => "stopped",
            _ => "abandoned",
        },
        mb_read = mb(s.bytes_read),
        mb_written = mb(s.bytes_written),
        mb_per_sec_read = mb(s.bytes_read) / secs,
        mb_per_sec_written = mb(s.bytes_written) / secs,
        seconds = secs,
        buffer_utilization = s.map_utilization,
        records_before = s.records_read,
        records_after = s.records_written,
        indexed_mb = mb(s.map_bytes_read),
        indexed_records = s.map_records_read,
        indexed_in_seconds = s.map_seconds,
        "log cleaner pass"
    );
    let percent = |n: u64, d: u64| if d == 0 { 0 } else { n * 100 / d };
    stats
        .recopy_percent
        .store(percent(s.bytes_written, s.bytes_read), Ordering::Relaxed);
    stats
        .clean_time_secs
        .store(elapsed.as_secs(), Ordering::Relaxed);
    stats
        .buffer_utilization_percent
        .store((s.map_utilization * 100.0) as u64, Ordering::Relaxed);
    stats.cleanings.fetch_add(1, Ordering::Relaxed);
    stats.bytes_read.fetch_add(read, Ordering::Relaxed);
    stats
        .bytes_written
        .fetch_add(s.bytes_written, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkaiq_storage::batch::builder::{batch_with_keys, Spec};
    use kafkaiq_storage::{LogConfig, TopicPartition};

    fn settings() -> CleanerSettings {
        CleanerSettings {
            enable: true,
            threads: 2,
            dedupe_buffer_size: 1 << 20,
            load_factor: 0.9,
            backoff_ms: 20,
            io_max_bytes_per_second: f64::MAX,
        }
    }

    /// A compacted log of 2,000 records over 10 keys in 4 KiB segments, flushed.
    fn dirty_log(dir: &std::path::Path) -> (Arc<LogManager>, Arc<kafkaiq_storage::Log>) {
        let config = LogConfig {
            segment_bytes: 4096,
            compact: true,
            ..LogConfig::default()
        };
        let logs = Arc::new(LogManager::open(&[dir.to_path_buf()], config.clone(), 0).unwrap());
        let log = logs
            .get_or_create(&TopicPartition::new("t", 0), config, 0)
            .unwrap();
        for i in 0..500 {
            let keys: Vec<String> = (0..4).map(|r| format!("k{}", (i * 4 + r) % 10)).collect();
            let ks: Vec<Option<&[u8]>> = keys.iter().map(|k| Some(k.as_bytes())).collect();
            let vs: [&[u8]; 4] = [b"v"; 4];
            log.append_as_leader(&batch_with_keys(&Spec::default(), &ks, &vs), 0, 0)
                .unwrap();
        }
        log.roll(0).unwrap();
        log.flush().unwrap();
        log.update_high_watermark(log.log_end_offset());
        (logs, log)
    }

    #[test]
    fn the_threads_clean_a_dirty_compacted_log_and_stop_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (logs, log) = dirty_log(dir.path());
        let before = log.size_bytes();
        let cleaner = LogCleaner::start(
            &settings(),
            logs.clone(),
            Arc::new(crate::clock::SystemClock),
            Default::default(),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        // The checkpoint moves inside the cleaning, the counters right after it.
        while log.cleaned_up_to() < 0 || cleaner.stats.cleanings.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "not cleaned in 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            log.size_bytes() < before / 10,
            "{} of {before} bytes",
            log.size_bytes()
        );
        assert_eq!(cleaner.stats.cleanings.load(Ordering::Relaxed), 1);
        assert!(cleaner.stats.recopy_percent.load(Ordering::Relaxed) < 10);
        cleaner.shutdown();
    }

    /// Kafka's cleaner threads check between segments and batches whether they still run
    /// (`LogCleaner.CleanerThread.checkDone`), so a shutdown abandons a long cleaning after the
    /// segment in hand; the `.cleaned` files it leaves are removed by the next open.
    #[test]
    fn shutdown_abandons_a_long_cleaning() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4096,
            compact: true,
            ..LogConfig::default()
        };
        let logs =
            Arc::new(LogManager::open(&[dir.path().to_path_buf()], config.clone(), 0).unwrap());
        let log = logs
            .get_or_create(&TopicPartition::new("t", 0), config, 0)
            .unwrap();
        // About 2,000 segments of 4 KiB, each one group of its own in a cleaning.
        for i in 0..70_000 {
            let keys: Vec<String> = (0..4).map(|r| format!("k{}", (i * 4 + r) % 10)).collect();
            let ks: Vec<Option<&[u8]>> = keys.iter().map(|k| Some(k.as_bytes())).collect();
            let vs: [&[u8]; 4] = [b"v"; 4];
            log.append_as_leader(&batch_with_keys(&Spec::default(), &ks, &vs), 0, 0)
                .unwrap();
        }
        log.roll(0).unwrap();
        log.flush().unwrap();
        assert!(
            log.segment_count() > 1_500,
            "{} segments",
            log.segment_count()
        );
        log.update_high_watermark(log.log_end_offset());
        let size = log.size_bytes();
        let cleaner = LogCleaner::start(
            &CleanerSettings {
                threads: 1,
                ..settings()
            },
            logs.clone(),
            Arc::new(crate::clock::SystemClock),
            Default::default(),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Under way: the first groups are swapped in.
        while log.size_bytes() == size {
            assert!(Instant::now() < deadline, "no cleaning in 10 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            log.cleaned_up_to() < 0,
            "the cleaning ended before the shutdown"
        );
        let started = Instant::now();
        cleaner.shutdown();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "shutdown waited {took:?} for the cleaning in progress ({} segments left)",
            log.segment_count()
        );
    }

    #[test]
    fn a_disabled_cleaner_starts_no_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (logs, log) = dirty_log(dir.path());
        let cleaner = LogCleaner::start(
            &CleanerSettings {
                enable: false,
                ..settings()
            },
            logs,
            Arc::new(crate::clock::SystemClock),
            Default::default(),
        )
        .unwrap();
        assert_eq!(cleaner.thread_count(), 0);
        cleaner.shutdown();
        assert_eq!(log.cleaned_up_to(), -1);
    }

    #[test]
    fn new_settings_restart_the_threads_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let (logs, log) = dirty_log(dir.path());
        let idle = CleanerSettings {
            enable: false,
            ..settings()
        };
        let cleaner = LogCleaner::start(
            &idle,
            logs,
            Arc::new(crate::clock::SystemClock),
            Default::default(),
        )
        .unwrap();
        assert!(!cleaner.reconfigure(&idle).unwrap(), "same settings");
        assert!(cleaner.reconfigure(&settings()).unwrap());
        assert_eq!(cleaner.thread_count(), 2);
        let deadline = Instant::now() + Duration::from_secs(30);
        while log.cleaned_up_to() < 0 {
            assert!(Instant::now() < deadline, "not cleaned in 30 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        let one = CleanerSettings {
            threads: 1,
            ..settings()
        };
        assert!(cleaner.reconfigure(&one).unwrap());
        assert_eq!(cleaner.thread_count(), 1);
        cleaner.shutdown();
        assert_eq!(cleaner.thread_count(), 0);
        assert!(!cleaner.reconfigure(&settings()).unwrap(), "closed");
        assert_eq!(cleaner.thread_count(), 0);
    }

    #[test]
    fn the_throttle_holds_the_rate() {
        let t = Throttler::new(1_000_000.0);
        let started = Instant::now();
        for _ in 0..100 {
            t.maybe_throttle(5_000); // 500 kB at 1 MB/s: about half a second
        }
        t.maybe_throttle(0);
        std::thread::sleep(Duration::from_millis(THROTTLE_CHECK_MS));
        t.maybe_throttle(0);
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
    }
}
