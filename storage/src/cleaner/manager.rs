//! Which compacted log to clean next, and from where to where (Kafka's `LogCleanerManager`).
//!
//! A compacted log's cleanable part runs from its first dirty offset (the cleaner checkpoint,
//! or the log start) to its first uncleanable offset: the smallest of the high watermark, the
//! active segment's base, the recovery point (what is fsynced), and the base of the first segment holding a record younger than
//! `min.compaction.lag.ms`. Its dirty ratio is the size of the segments in that part over the
//! size of all segments up to it. The cleaner takes the log with the highest ratio among those
//! above their `min.cleanable.dirty.ratio`, or with a dirty record older than
//! `max.compaction.lag.ms`.

use std::sync::Arc;

use crate::config::TopicPartition;
use crate::error::Result;
use crate::log::Log;

use super::CleanableRange;

/// A compacted log with its cleanable part measured (Kafka's `LogToClean`).
#[derive(Clone)]
pub struct LogToClean {
    pub tp: TopicPartition,
    pub log: Arc<Log>,
    pub range: CleanableRange,
    /// Bytes of the segments already clean (before the first dirty one).
    pub clean_bytes: u64,
    /// Bytes of the segments in the cleanable part.
    pub cleanable_bytes: u64,
    /// How long past `max.compaction.lag.ms` its oldest dirty record is (0 when not).
    pub compaction_delay_ms: i64,
}

impl LogToClean {
    /// `cleanable / (clean + cleanable)`, 0 for an empty log.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.cleanable_bytes;
        if total == 0 {
            0.0
        } else {
            self.cleanable_bytes as f64 / total as f64
        }
    }

    /// Whether the cleaner should clean it now.
    pub fn is_due(&self) -> bool {
        (self.compaction_delay_ms > 0 && self.cleanable_bytes > 0)
            || self.dirty_ratio() > self.log.config().min_cleanable_dirty_ratio
    }
}

/// Kafka's `cleanableOffsets`: the first dirty offset (the checkpoint when it lies within the
/// log, else the log start) and the first uncleanable offset.
pub fn cleanable_range(log: &Log, now_ms: i64) -> Result<CleanableRange> {
    let start = log.log_start_offset();
    let checkpoint = log.cleaned_up_to();
    let first_dirty = if checkpoint < start || checkpoint > log.log_end_offset() {
        start
    } else {
        checkpoint
    };
    let view = log.cleaning_view();
    if log.high_watermark() == i64::MAX {
        // No high watermark yet (a log no partition has taken up): nothing is known committed.
        return Ok(CleanableRange {
            first_dirty,
            first_uncleanable: first_dirty,
        });
    }
    // Only what is durable: a cleaning must not drop a record for a newer one that a power
    // loss could still take (Kafka cleans up to the high watermark alone).
    // Nor past an open transaction: its records may yet be aborted, and an aborted record must
    // never take the place of a committed one (Kafka cleans below the last stable offset).
    let mut first_uncleanable = log
        .high_watermark()
        .min(view.active_base_offset)
        .min(log.recovery_point())
        .min(log.first_unstable_offset().unwrap_or(i64::MAX));
    let lag = log.config().min_compaction_lag_ms;
    if lag > 0 {
        for (i, seg) in view.segments.iter().enumerate() {
            let upper = view
                .segments
                .get(i + 1)
                .map_or(view.active_base_offset, |n| n.base_offset());
            if upper <= first_dirty {
                continue;
            }
            if seg.largest_timestamp()? > now_ms.saturating_sub(lag) {
                first_uncleanable = first_uncleanable.min(seg.base_offset());
                break;
            }
        }
    }
    Ok(CleanableRange {
        first_dirty,
        first_uncleanable: first_uncleanable.max(first_dirty),
    })
}

/// Measures one compacted log (Kafka's `LogToClean` and `maxCompactionDelay`).
pub fn measure(tp: &TopicPartition, log: &Arc<Log>, now_ms: i64) -> Result<LogToClean> {
    let range = cleanable_range(log, now_ms)?;
    let view = log.cleaning_view();
    let (mut clean_bytes, mut cleanable_bytes) = (0u64, 0u64);
    let mut earliest_dirty = i64::MAX;
    for (i, seg) in view.segments.iter().enumerate() {
        let upper = view
            .segments
            .get(i + 1)
            .map_or(view.active_base_offset, |n| n.base_offset());
        if upper <= range.first_dirty {
            clean_bytes += seg.size();
        } else if seg.base_offset() < range.first_uncleanable {
            cleanable_bytes += seg.size();
            if let Some(ts) = seg.first_batch_timestamp()?.filter(|&t| t > 0) {
                earliest_dirty = earliest_dirty.min(ts);
            }
        }
    }
    let max_lag = log.config().max_compaction_lag_ms.max(0);
    let clean_until = now_ms.saturating_sub(max_lag);
    let compaction_delay_ms = if earliest_dirty < clean_until {
        clean_until - earliest_dirty
    } else {
        0
    };
    Ok(LogToClean {
        tp: tp.clone(),
        log: log.clone(),
        range,
        clean_bytes,
        cleanable_bytes,
        compaction_delay_ms,
    })
}

/// The log the cleaner should clean next among `candidates` (compacted, not being cleaned):
/// the due one with the highest dirty ratio (Kafka's `grabFilthiestCompactedLog`).
pub fn filthiest(candidates: Vec<LogToClean>) -> Option<LogToClean> {
    candidates
        .into_iter()
        .filter(LogToClean::is_due)
        .max_by(|a, b| a.dirty_ratio().total_cmp(&b.dirty_ratio()))
}
