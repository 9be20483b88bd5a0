//! Replication throttling (KIP-73; Kafka's `ReplicationQuotaManager`): one quota for the bytes
//! this broker sends as leader to throttled followers and one for the bytes it fetches as a
//! throttled follower, each a rate over sampled windows bounded by a dynamic broker config
//! (`leader.replication.throttled.rate`, `follower.replication.throttled.rate`).
//!
//! Which partitions a quota covers comes from the topic configs
//! `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`: `*`
//! (every partition of the topic) or `partition:broker` pairs, of which this broker keeps the
//! partitions listed with its own id (Kafka's `TopicConfigHandler#parseThrottledPartitions`).
//!
//! What the quotas do, as in Kafka: the leader answers a follower's fetch with no records for
//! a throttled partition while the leader quota is exceeded and that follower is not in the
//! ISR (`ReplicaManager#shouldLeaderThrottle`); the fetcher leaves a throttled partition out
//! of its request while the follower quota is exceeded and the partition is not caught up
//! (`ReplicaFetcherThread#shouldFollowerThrottle`). Bytes of every throttled partition count,
//! in-sync replicas' included, so the total stays near the bound. Whether the quota is exceeded
//! is decided before an answer and its bytes recorded after, so one answer may overshoot by up
//! to a fetch's size, which the window averages out.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, RwLock};

use kafkaiq_storage::TopicPartition;

use crate::clock::SharedClock;
use crate::config::QuotaWindow;

/// A rate over the last `samples_max` windows of `window_ms` each (Kafka's `SimpleRate` over a
/// `SampledStat`): the sum of the kept samples divided by the time since the oldest one began,
/// at least one window. A window older than all the kept windows together is reset, so a quota
/// idle for that long starts from nothing.
#[derive(Debug, Clone)]
pub struct SampledRate {
    samples_max: usize,
    window_ms: i64,
    samples: Vec<Sample>,
    current: usize,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: i64,
    value: f64,
}

impl SampledRate {
    pub fn new(samples_max: usize, window_ms: i64) -> SampledRate {
        assert!(samples_max >= 1 && window_ms >= 1, "a rate needs a window");
        SampledRate {
            samples_max,
            window_ms,
            samples: Vec::new(),
            current: 0,
        }
    }

    pub fn record(&mut self, value: f64, now_ms: i64) {
        if self.samples.is_empty() {
            self.samples.push(Sample {
                start_ms: now_ms,
                value: 0.0,
            });
        }
        if now_ms - self.samples[self.current].start_ms >= self.window_ms {
            self.current = (self.current + 1) % self.samples_max;
            let fresh = Sample {
                start_ms: now_ms,
                value: 0.0,
            };
            if self.current >= self.samples.len() {
                self.samples.push(fresh);
            } else {
                self.samples[self.current] = fresh;
            }
        }
        self.samples[self.current].value += value;
    }

    /// Per second.
    pub fn measure(&mut self, now_ms: i64) -> f64 {
        let expire_ms = self.samples_max as i64 * self.window_ms;
        for s in &mut self.samples {
            if now_ms - s.start_ms >= expire_ms {
                *s = Sample {
                    start_ms: now_ms,
                    value: 0.0,
                };
            }
        }
        let total: f64 = self.samples.iter().map(|s| s.value).sum();
        let oldest_ms = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let elapsed_ms = (now_ms - oldest_ms).max(self.window_ms);
        total * 1000.0 / elapsed_ms as f64
    }
}

/// The partitions of one topic a quota covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Throttled {
    All,
    Partitions(BTreeSet<i32>),
}

/// The partitions `value` (a `*.replication.throttled.replicas` config) throttles on broker
/// `broker_id`; `None` when it throttles none. The controller validated the value; an entry
/// that does not parse is skipped.
pub fn throttled_partitions(value: &str, broker_id: i32) -> Option<Throttled> {
    let value = value.trim();
    if value == "*" {
        return Some(Throttled::All);
    }
    let partitions: BTreeSet<i32> = value
        .split(',')
        .filter_map(|entry| {
            let (partition, broker) = entry.trim().split_once(':')?;
            let broker: i32 = broker.trim().parse().ok()?;
            (broker == broker_id)
                .then(|| partition.trim().parse().ok())
                .flatten()
        })
        .collect();
    (!partitions.is_empty()).then_some(Throttled::Partitions(partitions))
}

/// Kafka's `shouldLeaderThrottle` / `shouldFollowerThrottle`: a replica not in sync, of a
/// throttled partition, while the quota is exceeded. In-sync replicas are never held back, so
/// a throttle cannot shrink the ISR.
pub fn should_throttle(throttled: bool, in_sync: bool, quota_exceeded: bool) -> bool {
    throttled && !in_sync && quota_exceeded
}

/// One replication quota (leader or follower side) of this broker.
#[derive(Debug)]
pub struct ReplicationQuota {
    /// Bytes per second; `i64::MAX` (the default) never binds.
    bound: AtomicI64,
    rate: Mutex<SampledRate>,
    throttled: RwLock<HashMap<String, Throttled>>,
    clock: SharedClock,
}

impl ReplicationQuota {
    pub fn new(window: QuotaWindow, clock: SharedClock) -> ReplicationQuota {
        ReplicationQuota {
            bound: AtomicI64::new(i64::MAX),
            rate: Mutex::new(SampledRate::new(window.samples, window.window_ms)),
            throttled: RwLock::new(HashMap::new()),
            clock,
        }
    }

    pub fn set_bound(&self, bytes_per_second: i64) {
        self.bound.store(bytes_per_second, Ordering::Relaxed);
    }

    pub fn bound(&self) -> i64 {
        self.bound.load(Ordering::Relaxed)
    }

    /// Kafka's `isQuotaExceeded`: the rate measured now is above the bound.
    pub fn is_exceeded(&self) -> bool {
        let bound = self.bound();
        if bound == i64::MAX {
            return false;
        }
        let now_ms = self.clock.now_ms();
        self.lock_rate().measure(now_ms) > bound as f64
    }

    /// Counts `bytes` against the quota, whether or not it is exceeded.
    pub fn record(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let now_ms = self.clock.now_ms();
        self.lock_rate().record(bytes as f64, now_ms);
    }

    pub fn is_throttled(&self, tp: &TopicPartition) -> bool {
        match self
            .throttled
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&tp.topic)
        {
            Some(Throttled::All) => true,
            Some(Throttled::Partitions(p)) => p.contains(&tp.partition),
            None => false,
        }
    }

    /// Sets (or, with `None`, removes) the throttled partitions of `topic`.
    pub fn mark_throttled(&self, topic: &str, partitions: Option<Throttled>) {
        let mut throttled = self.throttled.write().unwrap_or_else(|e| e.into_inner());
        match partitions {
            Some(p) => throttled.insert(topic.to_owned(), p),
            None => throttled.remove(topic),
        };
    }

    fn lock_rate(&self) -> std::sync::MutexGuard<'_, SampledRate> {
        self.rate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn the_rate_divides_the_kept_samples_by_the_time_since_the_oldest() {
        let mut rate = SampledRate::new(11, 1_000);
        // Within the first window the divisor is one window, not the few ms elapsed.
        rate.record(1_000.0, 0);
        assert_eq!(rate.measure(10), 1_000.0);
        // 4,000 bytes over 4 s.
        rate.record(1_000.0, 1_000);
        rate.record(1_000.0, 2_000);
        rate.record(1_000.0, 3_000);
        assert_eq!(rate.measure(4_000), 1_000.0);
        // Quiet for a while: the same bytes over a longer time.
        assert_eq!(rate.measure(8_000), 500.0);
    }

    #[test]
    fn samples_older_than_all_windows_are_forgotten() {
        let mut rate = SampledRate::new(11, 1_000);
        rate.record(110_000.0, 0);
        assert!(rate.measure(10_999) > 10_000.0);
        // 11 windows later the burst no longer counts.
        assert_eq!(rate.measure(11_000), 0.0);
        // Windows are reused in a ring: 20 windows of 100 bytes keep only the last 11.
        let mut rate = SampledRate::new(11, 1_000);
        for s in 0..20 {
            rate.record(100.0, s * 1_000);
        }
        assert_eq!(rate.measure(20_000), 100.0);
    }

    #[test]
    fn throttled_replicas_lists_name_this_brokers_partitions() {
        let cases: &[(&str, i32, Option<Throttled>)] = &[
            ("", 1, None),
            ("*", 1, Some(Throttled::All)),
            (" * ", 7, Some(Throttled::All)),
            (
                "0:1,1:2,2:1",
                1,
                Some(Throttled::Partitions([0, 2].into_iter().collect())),
            ),
            (
                "0:1, 1:2",
                2,
                Some(Throttled::Partitions([1].into_iter().collect())),
            ),
            ("0:1,1:2", 3, None),
        ];
        for (value, broker, want) in cases {
            assert_eq!(
                &throttled_partitions(value, *broker),
                want,
                "{value} on {broker}"
            );
        }
    }

    #[test]
    fn only_out_of_sync_replicas_of_throttled_partitions_wait_while_exceeded() {
        for throttled in [false, true] {
            for in_sync in [false, true] {
                for exceeded in [false, true] {
                    assert_eq!(
                        should_throttle(throttled, in_sync, exceeded),
                        throttled && !in_sync && exceeded
                    );
                }
            }
        }
    }

    #[test]
    fn a_quota_is_exceeded_only_above_its_bound_and_only_for_its_partitions() {
        let clock = ManualClock::new(1_000_000);
        let window = QuotaWindow {
            samples: 11,
            window_ms: 1_000,
        };
        let quota = ReplicationQuota::new(window, Arc::new(clock.clone()));
        quota.record(50_000_000);
        assert!(!quota.is_exceeded(), "unbounded by default");
        quota.set_bound(1_000_000);
        assert!(quota.is_exceeded());
        // The 50 MB burst keeps the rate above 1 MB/s until its window is 11 windows old.
        clock.advance_ms(10_000);
        assert!(quota.is_exceeded());
        clock.advance_ms(1_000);
        assert!(!quota.is_exceeded());
        let tp = |t: &str, p| TopicPartition::new(t.to_owned(), p);
        quota.mark_throttled("a", throttled_partitions("0:1,2:1", 1));
        quota.mark_throttled("b", throttled_partitions("*", 1));
        assert!(quota.is_throttled(&tp("a", 0)));
        assert!(!quota.is_throttled(&tp("a", 1)));
        assert!(quota.is_throttled(&tp("b", 9)));
        assert!(!quota.is_throttled(&tp("c", 0)));
        quota.mark_throttled("b", None);
        assert!(!quota.is_throttled(&tp("b", 9)));
    }
}
