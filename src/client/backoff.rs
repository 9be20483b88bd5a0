//! The reconnect backoff: Kafka's `ExponentialBackoff` as `ClusterConnectionStates` uses it.
//!
//! After the n-th consecutive failure (a connect that failed, or a connection that broke) the
//! next attempt waits `reconnect.backoff.ms × 2^(n-1)`, at most `reconnect.backoff.max.ms`, times
//! a random factor in [0.8, 1.2), and never more than the maximum. A success resets the count.
//! The randomness comes from a seeded generator so a test (or a simulation) replays exactly.

use std::time::Duration;

use crate::limits::CLIENT_RECONNECT_BACKOFF_JITTER_PERCENT;

/// Kafka's `RECONNECT_BACKOFF_EXP_BASE`.
const MULTIPLIER: f64 = 2.0;

#[derive(Debug, Clone)]
pub struct ReconnectBackoff {
    initial_ms: f64,
    max_ms: f64,
    /// The exponent at which the term reaches the maximum (fractional, as in Kafka).
    exp_max: f64,
    rng: SplitMix64,
}

impl ReconnectBackoff {
    pub fn new(initial: Duration, max: Duration, seed: u64) -> Self {
        let initial_ms = initial.as_millis() as f64;
        let max_ms = (max.as_millis() as f64).max(initial_ms);
        let exp_max = if max_ms > initial_ms {
            (max_ms / initial_ms.max(1.0)).ln() / MULTIPLIER.ln()
        } else {
            0.0
        };
        ReconnectBackoff {
            initial_ms,
            max_ms,
            exp_max,
            rng: SplitMix64(seed),
        }
    }

    /// The wait before the next attempt after `failures` (≥ 1) consecutive failures.
    pub fn after_failures(&mut self, failures: u32) -> Duration {
        debug_assert!(failures >= 1, "a backoff follows a failure");
        let exp = f64::from(failures.saturating_sub(1)).min(self.exp_max);
        let term = self.initial_ms * MULTIPLIER.powf(exp);
        let jitter = CLIENT_RECONNECT_BACKOFF_JITTER_PERCENT as f64 / 100.0;
        let factor = 1.0 - jitter + 2.0 * jitter * self.rng.next_unit();
        Duration::from_millis((term * factor).min(self.max_ms) as u64)
    }
}

/// Steele, Lea and Flood's SplitMix64: tiny, seedable, good enough for jitter.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka_defaults(seed: u64) -> ReconnectBackoff {
        ReconnectBackoff::new(Duration::from_millis(50), Duration::from_millis(1000), seed)
    }

    #[test]
    fn doubles_from_the_initial_backoff_up_to_the_maximum_within_the_jitter() {
        let mut backoff = kafka_defaults(7);
        for (failures, term_ms) in [(1, 50.0), (2, 100.0), (3, 200.0), (4, 400.0), (5, 800.0)] {
            for _ in 0..200 {
                let ms = backoff.after_failures(failures).as_millis() as f64;
                assert!(
                    (term_ms * 0.8 - 1.0..term_ms * 1.2).contains(&ms),
                    "failure {failures}: {ms} ms"
                );
            }
        }
        for failures in [6, 7, 30, u32::MAX] {
            for _ in 0..200 {
                let ms = backoff.after_failures(failures).as_millis();
                assert!((799..=1000).contains(&ms), "failure {failures}: {ms} ms");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_waits_and_jitter_spreads_them() {
        let waits = |seed| {
            let mut backoff = kafka_defaults(seed);
            (1..=8)
                .map(|n| backoff.after_failures(n))
                .collect::<Vec<_>>()
        };
        assert_eq!(waits(42), waits(42));
        assert_ne!(waits(42), waits(43));
        let mut backoff = kafka_defaults(1);
        let distinct: std::collections::BTreeSet<_> =
            (0..100).map(|_| backoff.after_failures(1)).collect();
        assert!(distinct.len() > 10, "{distinct:?}");
    }

    #[test]
    fn no_exponent_when_the_maximum_is_the_initial_backoff() {
        let mut backoff =
            ReconnectBackoff::new(Duration::from_millis(100), Duration::from_millis(100), 3);
        for failures in 1..10 {
            let ms = backoff.after_failures(failures).as_millis();
            assert!((79..=100).contains(&ms), "{ms}");
        }
    }
}
