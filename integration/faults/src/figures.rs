//! The figures of a run, per fault kind: unavailability (the longest gap between
//! acknowledgements on the partitions a fault affected), time to a new leader, time until every
//! ISR is full again and until every partition is led by its preferred replica again — as
//! distributions (median, p99, max). Pure functions of what the nemesis recorded.

use std::collections::BTreeMap;

/// What the nemesis recorded about one fault (milliseconds since the run started).
#[derive(Debug, Clone)]
pub struct FaultRecord {
    pub kind: &'static str,
    pub victims: Vec<i32>,
    /// The partitions whose acknowledgements the fault's unavailability is measured on.
    pub affected: Vec<i32>,
    pub injected_ms: u64,
    pub healed_ms: u64,
    /// When no partition of `affected` was led by a victim any more (since `injected_ms`).
    pub new_leader_ms: Option<u64>,
    /// When every ISR was full again (since `healed_ms`), and every partition led by its
    /// preferred replica.
    pub isr_full_ms: Option<u64>,
    pub balanced_ms: Option<u64>,
    /// Up to when this fault's unavailability is measured: the next fault's start, or the end.
    pub window_end_ms: u64,
}

/// The longest silence between acknowledgements of `partition` that overlaps `from..to`:
/// from the last acknowledgement before `from` (or `from`) to the first after it (or `to`).
pub fn longest_gap(ack_times: &[u64], from: u64, to: u64) -> u64 {
    let mut times: Vec<u64> = ack_times.to_vec();
    times.sort_unstable();
    let mut prev = times
        .iter()
        .rev()
        .find(|t| **t < from)
        .copied()
        .unwrap_or(from);
    let mut gap = 0;
    for &t in times.iter().filter(|t| **t >= from && **t <= to) {
        gap = gap.max(t - prev);
        prev = t;
    }
    // The silence after the last acknowledgement, up to the window's end.
    gap.max(to.saturating_sub(prev))
}

/// The fault's unavailability: the longest gap over its affected partitions.
pub fn unavailability(fault: &FaultRecord, acks: &[(i32, u64)]) -> u64 {
    fault
        .affected
        .iter()
        .map(|p| {
            let times: Vec<u64> = acks
                .iter()
                .filter(|(q, _)| q == p)
                .map(|(_, t)| *t)
                .collect();
            longest_gap(&times, fault.injected_ms, fault.window_end_ms)
        })
        .max()
        .unwrap_or(0)
}

/// (median, p99, max) of `values`, or `None` if empty.
pub fn distribution(values: &[u64]) -> Option<(u64, u64, u64)> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let at = |q: f64| v[(((v.len() - 1) as f64) * q).round() as usize];
    Some((at(0.5), at(0.99), *v.last().unwrap()))
}

/// One row of figures for a fault kind.
#[derive(Debug, Clone, Default)]
pub struct KindFigures {
    pub count: usize,
    pub unavailability: Vec<u64>,
    pub new_leader: Vec<u64>,
    pub isr_full: Vec<u64>,
    pub balanced: Vec<u64>,
}

pub fn per_kind(
    faults: &[FaultRecord],
    acks: &[(i32, u64)],
) -> BTreeMap<&'static str, KindFigures> {
    let mut m: BTreeMap<&'static str, KindFigures> = BTreeMap::new();
    for f in faults {
        let k = m.entry(f.kind).or_default();
        k.count += 1;
        k.unavailability.push(unavailability(f, acks));
        k.new_leader
            .extend(f.new_leader_ms.map(|t| t - f.injected_ms));
        k.isr_full.extend(f.isr_full_ms.map(|t| t - f.healed_ms));
        k.balanced.extend(f.balanced_ms.map(|t| t - f.healed_ms));
    }
    m
}

pub fn format_distribution(values: &[u64]) -> String {
    match distribution(values) {
        Some((m, p99, max)) => format!("{m} / {p99} / {max}"),
        None => "–".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_spans_the_fault() {
        // Acks every 10 ms, none between 100 and 400: the fault at 150 sees a 300 ms gap.
        let mut acks: Vec<u64> = (0..=10).map(|i| i * 10).collect();
        acks.extend((40..=60).map(|i| i * 10));
        assert_eq!(longest_gap(&acks, 150, 600), 300);
        // No ack after the fault at all: silent until the window's end.
        assert_eq!(
            longest_gap(&(0..=10).map(|i| i * 10).collect::<Vec<_>>(), 150, 900),
            800
        );
        // Steady acks: the spacing.
        assert_eq!(
            longest_gap(&(0..100).map(|i| i * 10).collect::<Vec<_>>(), 150, 900),
            10
        );
    }

    #[test]
    fn distributions() {
        assert_eq!(distribution(&[]), None);
        assert_eq!(distribution(&[5]), Some((5, 5, 5)));
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(distribution(&v), Some((51, 99, 100)));
    }
}
