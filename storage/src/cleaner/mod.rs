//! Log compaction: one cleaning of one log (Kafka's `Cleaner`).
//!
//! A cleaning takes the log's dirty part `[first_dirty, first_uncleanable)` and
//!
//! 1. maps each key in it to its latest offset ([`OffsetMap`], bounded memory): when the map
//!    reaches its load factor the cleaning stops there, and the rest waits for the next one;
//! 2. rewrites every segment from the log's start up to the end of what was mapped, in groups
//!    of consecutive segments whose kept batches fit one segment (`segment.bytes`, the index
//!    size, offsets within 2^31 of the base), keeping each record that is the latest for its
//!    key, unless it is a tombstone whose delete horizon has passed; records past the mapped
//!    part stay. A batch whose records all stay is copied as it is;
//! 3. swaps each rewritten group in for its segments ([`Log::replace_segments`], crash-safe).
//!
//! Offsets never change: a cleaned log has gaps, which reads skip. Batches keep their header
//! fields ([`filter`]); the last batch of each producer with state and the batch ending the
//! cleaning round stay, empty if need be. Control batches are kept whole until transactions
//! exist (the seam: their removal depends on the transaction index).
//!
//! The cleaner reads inactive segments only, without the log's writer lock; whatever changed
//! meanwhile (a truncation, a deletion) makes the swap refuse, and the cleaning is abandoned.

pub mod filter;
pub mod manager;
pub mod offset_map;
mod transactions;

use std::sync::Arc;

use crate::batch::BatchHeader;
use crate::error::Result;
use crate::log::{CleaningView, LastRecord, Log, CLEANED_SUFFIX};
use crate::segment::LogSegment;
use filter::{filter_batch_with, BatchRetention, Record};
pub use offset_map::{KeyHash, OffsetMap};
use transactions::{Aborted, CleanedTransactions};

/// Kafka's `log.cleaner.io.buffer.load.factor`: the share of the map's slots filled before a
/// cleaning stops mapping.
pub const DEFAULT_LOAD_FACTOR: f64 = 0.9;

/// Bytes of batches read at a time from a segment (a batch larger than this is read whole).
const READ_CHUNK_BYTES: usize = 1 << 20;

/// The part of a log a cleaning may clean (Kafka's `LogToClean`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanableRange {
    /// The first offset not yet cleaned (the cleaner checkpoint, at least the log start).
    pub first_dirty: i64,
    /// The first offset a cleaning must not reach: the active segment, the first segment
    /// younger than `min.compaction.lag.ms`, the high watermark.
    pub first_uncleanable: i64,
}

/// What one cleaning read and wrote (Kafka's `CleanerStats`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CleanerStats {
    /// Bytes and records read to build the offset map, and the seconds it took (Kafka's
    /// "Indexed ... MB" line).
    pub map_bytes_read: u64,
    pub map_records_read: u64,
    pub map_seconds: f64,
    /// Bytes and records read to copy: each byte of the log cleaned once (Kafka's "MB of log
    /// processed").
    pub bytes_read: u64,
    pub records_read: u64,
    pub bytes_written: u64,
    pub records_written: u64,
    /// Records without a key found in a compacted log, removed.
    pub invalid_records: u64,
    pub segments_cleaned: usize,
    /// Share of the map's slots in use when mapping stopped.
    pub map_utilization: f64,
}

/// How a cleaning ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CleanOutcome {
    /// Cleaned up to `end_offset` (exclusive): the log's cleaner checkpoint now.
    Cleaned {
        end_offset: i64,
        stats: CleanerStats,
    },
    /// Nothing in the range to clean.
    Nothing,
    /// The log changed under the cleaning (truncated, segments deleted); nothing was swapped
    /// from the group that noticed on. Groups swapped before it stay cleaned.
    Abandoned { stats: CleanerStats },
    /// The cleaner was told to stop (a shutdown): nothing was swapped from the group in hand
    /// on. Groups swapped before it stay cleaned.
    Stopped { stats: CleanerStats },
}

/// Settings of one cleaning, from the log's config and the cleaner's.
#[derive(Debug, Clone, Copy)]
pub struct CleanSettings {
    /// `delete.retention.ms`: how long a tombstone stays readable after the cleaning that
    /// first reached it.
    pub delete_retention_ms: i64,
    pub now_ms: i64,
    pub load_factor: f64,
}

/// Calls `each` with every whole batch of `segment` from the one holding `from` on, up to the
/// batch holding `until` (exclusive), until it returns false. A batch header that does not
/// parse, or a batch running past the segment's end, fails the read (Kafka's
/// `CorruptRecordException`): the cleaning must not take the rest of the segment for empty.
fn for_each_batch(
    segment: &LogSegment,
    from: i64,
    until: i64,
    mut each: impl FnMut(&[u8], &BatchHeader) -> Result<bool>,
) -> Result<()> {
    let end = segment.size();
    // Where the batch holding `from` starts; from the segment's start when the index scan
    // finds none (it stops quietly at a damaged header).
    let mut position = segment.find_batch(from, end)?.map_or(0, |(p, _)| p);
    let mut want = READ_CHUNK_BYTES;
    while position < end {
        let bytes = segment.read_exact(position, ((end - position) as usize).min(want))?;
        want = READ_CHUNK_BYTES;
        let mut at = 0usize;
        while at < bytes.len() {
            let left_in_segment = end - position - at as u64;
            let rest = &bytes[at..];
            if rest.len() < crate::batch::RECORD_BATCH_OVERHEAD
                && (rest.len() as u64) < left_in_segment
            {
                // The header continues in the next read.
                want = want.max(crate::batch::RECORD_BATCH_OVERHEAD);
                break;
            }
            let h = BatchHeader::parse(rest).map_err(|e| {
                crate::StorageError::CorruptRecord(format!(
                    "{} at position {}: {e}",
                    segment.log_path().display(),
                    position + at as u64
                ))
            })?;
            let size = h.size_in_bytes();
            if size as u64 > left_in_segment {
                return Err(crate::StorageError::CorruptRecord(format!(
                    "{} at position {}: a batch of {size} bytes runs past the segment's end ({end})",
                    segment.log_path().display(),
                    position + at as u64
                )));
            }
            if size > rest.len() {
                want = want.max(size);
                break;
            }
            if h.base_offset >= until {
                return Ok(());
            }
            if h.last_offset() >= from && !each(&rest[..size], &h)? {
                return Ok(());
            }
            at += size;
        }
        position += at as u64;
    }
    Ok(())
}

/// Fills `map` from the dirty range; returns the bytes and records read. The map's latest
/// offset ends at the last offset it covers.
fn build_offset_map(
    view: &CleaningView,
    range: CleanableRange,
    aborted: &Aborted,
    map: &mut OffsetMap,
    load_factor: f64,
    throttle: &mut dyn FnMut(u64),
    done: &dyn Fn() -> bool,
) -> Result<(u64, u64)> {
    map.clear();
    let max_entries = ((map.slots() as f64) * load_factor) as usize;
    let (mut bytes, mut records_read) = (0u64, 0u64);
    let mut hashes = Vec::new();
    let segments = &view.segments;
    for (i, seg) in segments.iter().enumerate() {
        let upper = segments
            .get(i + 1)
            .map_or(range.first_uncleanable, |n| n.base_offset())
            .min(range.first_uncleanable);
        if upper <= range.first_dirty || seg.base_offset() >= range.first_uncleanable {
            continue;
        }
        let mut full = false;
        for_each_batch(
            seg,
            range.first_dirty.max(seg.base_offset()),
            upper,
            |batch, h| {
                if done() {
                    full = true;
                    return Ok(false);
                }
                if h.last_offset() >= upper {
                    // Straddles the uncleanable offset: not mapped, and it ends the range.
                    full = true;
                    return Ok(false);
                }
                bytes += batch.len() as u64;
                throttle(batch.len() as u64);
                // An aborted transaction's records never replace a key's committed value
                // (Kafka's cleaner leaves aborted batches out of the offset map).
                if !h.is_control() && !aborted.holds(h) {
                    let section = &batch[crate::batch::RECORD_BATCH_OVERHEAD..];
                    let codec = h.compression_codec() as u8;
                    let decompressed;
                    let raw: &[u8] = if codec == crate::compression::CODEC_NONE {
                        section
                    } else {
                        decompressed = crate::compression::decompress(
                            codec,
                            section,
                            crate::compression::DECOMPRESSED_RECORDS_BYTES_MAX,
                        )
                        .map_err(|e| {
                            crate::StorageError::CorruptRecord(format!(
                                "batch at offset {}: {e}",
                                h.base_offset
                            ))
                        })?;
                        &decompressed
                    };
                    let records = filter::parse_records(raw, h)?;
                    hashes.clear();
                    hashes.extend(
                        records
                            .iter()
                            .filter(|r| r.offset >= range.first_dirty)
                            .filter_map(|r| r.key.map(KeyHash::of)),
                    );
                    map.touch(&hashes);
                    let mut hashed = hashes.iter();
                    for r in &records {
                        records_read += 1;
                        if r.offset < range.first_dirty || r.key.is_none() {
                            continue;
                        }
                        let key = *hashed.next().expect("one hash per keyed record");
                        if map.size() >= max_entries && map.get_hash(key) < 0 {
                            full = true;
                            return Ok(false);
                        }
                        map.put_hash(key, r.offset);
                    }
                }
                if h.last_offset() >= range.first_dirty {
                    map.update_latest_offset(h.last_offset());
                }
                Ok(true)
            },
        )?;
        if full {
            break;
        }
        // The whole segment is covered, gaps after its last batch included.
        map.update_latest_offset(upper - 1);
    }
    Ok((bytes, records_read))
}

/// Whether a record stays (Kafka's `shouldRetainRecord`): past the mapped part, or the latest
/// for its key and not a tombstone whose horizon has passed. A record without a key goes.
/// `key` is the record's key hashed, for a keyed record the map covers.
fn retain(
    map: &mut OffsetMap,
    h: &BatchHeader,
    r: &Record<'_>,
    key: Option<KeyHash>,
    now_ms: i64,
    stats: &mut CleanerStats,
) -> bool {
    if r.offset > map.latest_offset() {
        return true;
    }
    let Some(key) = key else {
        stats.invalid_records += 1;
        return false;
    };
    let latest = r.offset >= map.get_hash(key);
    let deletes_retained = h.delete_horizon_ms().is_none_or(|horizon| now_ms < horizon);
    latest && (r.has_value || deletes_retained)
}

/// Decides which records of a batch stay: hashes the keys the map covers, touches their slots
/// together, then looks each up.
fn decide(
    map: &mut OffsetMap,
    h: &BatchHeader,
    records: &[Record<'_>],
    now_ms: i64,
    hashes: &mut Vec<KeyHash>,
    stats: &mut CleanerStats,
    keep: &mut Vec<bool>,
) {
    if h.is_control() {
        keep.resize(records.len(), true);
        return;
    }
    let latest = map.latest_offset();
    let mapped = |r: &Record<'_>| r.offset <= latest;
    hashes.clear();
    hashes.extend(
        records
            .iter()
            .filter(|r| mapped(r))
            .filter_map(|r| r.key.map(KeyHash::of)),
    );
    map.touch(hashes);
    let mut hashed = hashes.iter();
    for r in records {
        let key = if mapped(r) && r.key.is_some() {
            hashed.next().copied()
        } else {
            None
        };
        keep.push(retain(map, h, r, key, now_ms, stats));
    }
}

/// Filters every batch of `seg` into `cleaned` (Kafka's `cleanInto`). False when `done` told
/// it to stop.
#[allow(clippy::too_many_arguments)]
fn filter_segment(
    seg: &LogSegment,
    cleaned: &LogSegment,
    map: &mut OffsetMap,
    txns: &mut CleanedTransactions,
    producers: &std::collections::HashMap<i64, LastRecord>,
    upper_bound: i64,
    settings: &CleanSettings,
    interval: usize,
    stats: &mut CleanerStats,
    throttle: &mut dyn FnMut(u64),
    done: &dyn Fn() -> bool,
) -> Result<bool> {
    let mut stopped = false;
    let new_horizon = settings.now_ms.saturating_add(settings.delete_retention_ms);
    let mut out = Vec::new();
    let mut headers = Vec::new();
    let mut hashes = Vec::new();
    let flush = |out: &mut Vec<u8>, headers: &mut Vec<BatchHeader>| -> Result<()> {
        if !out.is_empty() {
            cleaned.append(&[out], headers, interval)?;
        }
        out.clear();
        headers.clear();
        Ok(())
    };
    for_each_batch(seg, seg.base_offset(), i64::MAX, |batch, h| {
        if done() {
            stopped = true;
            return Ok(false);
        }
        // A rewritten batch gets a fresh CRC: damaged records must not pass for sound.
        if !crate::batch::crc_valid(batch) {
            return Err(crate::StorageError::CorruptRecord(format!(
                "{}: batch at offset {} fails its CRC",
                seg.log_path().display(),
                h.base_offset
            )));
        }
        stats.bytes_read += batch.len() as u64;
        throttle(batch.len() as u64);
        // Records of an aborted transaction go; a marker goes once nothing of its transaction
        // is left and the delete horizon it got then has passed.
        let (discard_records, empty_txn_marker) = if h.is_control() {
            let empty = txns.on_control(h, crate::batch::end_txn_marker(batch)?);
            let due = h
                .delete_horizon_ms()
                .is_some_and(|horizon| horizon <= settings.now_ms);
            (empty && due, empty)
        } else {
            (txns.on_batch(h), false)
        };
        let retention = if h.has_producer_id()
            && producers.get(&h.producer_id).is_some_and(|last| last.is(h))
            || h.next_offset() == upper_bound
        {
            BatchRetention::RetainEmpty
        } else if discard_records {
            BatchRetention::Delete
        } else {
            BatchRetention::DeleteEmpty
        };
        let mut invalid = CleanerStats::default();
        let f = filter_batch_with(
            batch,
            h,
            retention,
            |records, keep| {
                if discard_records {
                    keep.resize(records.len(), false);
                } else {
                    decide(
                        map,
                        h,
                        records,
                        settings.now_ms,
                        &mut hashes,
                        &mut invalid,
                        keep,
                    )
                }
            },
            new_horizon,
            empty_txn_marker,
            &mut out,
        )?;
        stats.invalid_records += invalid.invalid_records;
        stats.records_read += f.records_read as u64;
        stats.records_written += f.records_kept as u64;
        if let Some(w) = f.written {
            stats.bytes_written += w.size_in_bytes() as u64;
            throttle(w.size_in_bytes() as u64);
            headers.push(w);
        }
        if out.len() >= READ_CHUNK_BYTES {
            flush(&mut out, &mut headers)?;
        }
        Ok(true)
    })?;
    if stopped {
        return Ok(false);
    }
    flush(&mut out, &mut headers)?;
    Ok(true)
}

/// Appends to `to` every batch of `from` from `offset` on (a cleaned segment's tail that
/// moves to the next cleaned segment).
fn move_tail(
    from: &LogSegment,
    offset: i64,
    to: &LogSegment,
    interval: usize,
    throttle: &mut dyn FnMut(u64),
) -> Result<()> {
    let mut out = Vec::new();
    let mut headers = Vec::new();
    for_each_batch(from, offset, i64::MAX, |batch, h| {
        out.extend_from_slice(batch);
        headers.push(*h);
        if out.len() >= READ_CHUNK_BYTES {
            throttle(2 * out.len() as u64);
            to.append(&[&out], &headers, interval)?;
            out.clear();
            headers.clear();
        }
        Ok(true)
    })?;
    if !out.is_empty() {
        throttle(2 * out.len() as u64);
        to.append(&[&out], &headers, interval)?;
    }
    Ok(())
}

/// Finishes `cleaned` and swaps it in for `group`. Returns false when the log changed under
/// the cleaning.
fn swap_in(
    log: &Log,
    view: &mut CleaningView,
    cleaned: LogSegment,
    group: &[Arc<LogSegment>],
    txns: &CleanedTransactions,
    stats: &mut CleanerStats,
) -> Result<bool> {
    let finished = cleaned
        .on_become_inactive()
        .and_then(|()| cleaned.flush())
        .and_then(|()| {
            cleaned.set_last_modified_ms(group.last().expect("a group").last_modified_ms())
        });
    if let Err(e) = finished {
        let _ = cleaned.delete_files();
        return Err(e);
    }
    let swapped =
        log.replace_segments(view, cleaned, group, &|from, to| txns.retained_in(from, to))?;
    if swapped {
        stats.segments_cleaned += group.len();
    }
    Ok(swapped)
}

/// Rewrites `segments` (consecutive, from the log's start) into cleaned segments and swaps
/// each in for the segments it replaces. Returns false when the log changed under the
/// cleaning.
///
/// Consecutive segments are grouped into one cleaned segment while what the cleaning keeps of
/// them fits one segment: `segment.bytes`, the index size, offsets within 2^31 of the base.
/// Kafka groups by the segments' sizes before cleaning, so a log whose segments are full gets
/// one cleaned segment (one swap, and its fsyncs) for each; here the group is closed only once
/// the kept bytes overflow. The segment whose kept batches overflow starts the next group, and
/// those batches move to its cleaned segment as they are (each source segment is read once).
#[allow(clippy::too_many_arguments)]
fn clean_segments(
    log: &Log,
    view: &mut CleaningView,
    segments: &[Arc<LogSegment>],
    map: &mut OffsetMap,
    producers: &std::collections::HashMap<i64, LastRecord>,
    upper_bound: i64,
    settings: &CleanSettings,
    stats: &mut CleanerStats,
    throttle: &mut dyn FnMut(u64),
    done: &dyn Fn() -> bool,
) -> Result<bool> {
    let config = log.config();
    let max_bytes = config.segment_bytes as u64;
    let index_bytes = config.segment_index_bytes as usize;
    // Offset index entries are 8 bytes, time index entries 12 (one kept for the roll). An
    // index with room left has dropped no entry.
    let (max_offsets, max_times) = (index_bytes / 8, (index_bytes / 12).saturating_sub(1));
    let interval = config.index_interval_bytes as usize;
    let create = |base: i64| {
        LogSegment::create_with_suffix(
            log.dir(),
            base,
            CLEANED_SUFFIX,
            index_bytes,
            settings.now_ms,
            log.handle_pool(),
        )
    };
    // The cleaned segment being written and the segments it replaces so far. Its files go
    // when the cleaning ends before its swap (stopped, failed).
    struct Pending(Option<(LogSegment, Vec<Arc<LogSegment>>)>);
    impl Drop for Pending {
        fn drop(&mut self) {
            if let Some((cleaned, _)) = self.0.take() {
                if let Err(e) = cleaned.delete_files() {
                    tracing::warn!(error = %e, "cannot remove a cleaned segment's files; the next open removes them");
                }
            }
        }
    }
    let mut current = Pending(None);
    // The aborted transactions of the segments rewritten (up to the first segment kept as is).
    let first = segments.first().map_or(0, |s| s.base_offset());
    let end = view
        .segments
        .iter()
        .find(|s| s.base_offset() > segments.last().map_or(0, |l| l.base_offset()))
        .map_or(view.active_base_offset, |s| s.base_offset());
    let mut txns = CleanedTransactions::new(log.collect_aborted_transactions(first, end));
    for (i, seg) in segments.iter().enumerate() {
        if let Some((cleaned, _)) = &current.0 {
            let last_offset_bound =
                segments.get(i + 1).map_or(upper_bound, |n| n.base_offset()) - 1;
            if seg.size() > 0 && last_offset_bound - cleaned.base_offset() > i32::MAX as i64 {
                let (cleaned, group) = current.0.take().expect("checked");
                if !swap_in(log, view, cleaned, &group, &txns, stats)? {
                    return Ok(false);
                }
            }
        }
        let (cleaned, group) = match &mut current.0 {
            Some(c) => c,
            None => current.0.insert((create(seg.base_offset())?, Vec::new())),
        };
        if !filter_segment(
            seg,
            cleaned,
            map,
            &mut txns,
            producers,
            upper_bound,
            settings,
            interval,
            stats,
            throttle,
            done,
        )? {
            return Ok(false);
        }
        let (offsets, times) = cleaned.index_entries();
        if group.is_empty()
            || cleaned.size() <= max_bytes && offsets < max_offsets && times < max_times
        {
            group.push(seg.clone());
            continue;
        }
        // What `seg` kept does not fit: it moves to the next cleaned segment, and the group
        // closes before `seg`.
        let next = create(seg.base_offset())?;
        let moved = move_tail(cleaned, seg.base_offset(), &next, interval, throttle)
            .and_then(|()| cleaned.truncate_to(seg.base_offset(), interval));
        if let Err(e) = moved {
            let _ = next.delete_files();
            return Err(e);
        }
        let (cleaned, group) = current
            .0
            .replace((next, vec![seg.clone()]))
            .expect("checked");
        if !swap_in(log, view, cleaned, &group, &txns, stats)? {
            let (next, _) = current.0.take().expect("set above");
            next.delete_files()?;
            return Ok(false);
        }
    }
    match current.0.take() {
        Some((cleaned, group)) => swap_in(log, view, cleaned, &group, &txns, stats),
        None => Ok(true),
    }
}

/// Cleans `log` once over `range` with `map` (cleared first) and moves the log's cleaner
/// checkpoint to where it ended. The caller chooses the log and the range and writes the
/// checkpoint file; `throttle` is told every byte read and written
/// (`log.cleaner.io.max.bytes.per.second`: it may sleep).
pub fn clean(
    log: &Log,
    range: CleanableRange,
    map: &mut OffsetMap,
    settings: &CleanSettings,
    throttle: &mut dyn FnMut(u64),
) -> Result<CleanOutcome> {
    clean_until(log, range, map, settings, throttle, &|| false)
}

/// [`clean`], checking `should_stop` between batches (Kafka's `checkDone`): once it is true
/// the cleaning ends [`CleanOutcome::Stopped`], swapping nothing more in. A cleaning also ends,
/// [`CleanOutcome::Abandoned`], when `compact` is turned off for the log meanwhile.
pub fn clean_until(
    log: &Log,
    range: CleanableRange,
    map: &mut OffsetMap,
    settings: &CleanSettings,
    throttle: &mut dyn FnMut(u64),
    should_stop: &dyn Fn() -> bool,
) -> Result<CleanOutcome> {
    let mut view = log.cleaning_view();
    let aborts = view.cleaning_aborts;
    let done = || should_stop() || log.cleaning_aborts() != aborts;
    // A policy change away from compact bumps the abort counter; one that came before the view
    // was taken (after the log was picked) is seen here instead.
    if !log.config().compact {
        return Ok(CleanOutcome::Abandoned {
            stats: CleanerStats::default(),
        });
    }
    let halted = |stats| {
        if should_stop() {
            CleanOutcome::Stopped { stats }
        } else {
            CleanOutcome::Abandoned { stats }
        }
    };
    let range = CleanableRange {
        first_dirty: range.first_dirty.max(log.log_start_offset()),
        // Never the active segment, the high watermark or the recovery point as they are once
        // the view is taken, whatever the caller measured before.
        first_uncleanable: range
            .first_uncleanable
            .min(view.active_base_offset)
            .min(log.high_watermark())
            .min(log.recovery_point())
            .min(log.first_unstable_offset().unwrap_or(i64::MAX)),
    };
    if view.segments.is_empty() || range.first_dirty >= range.first_uncleanable {
        return Ok(CleanOutcome::Nothing);
    }
    let mut stats = CleanerStats::default();
    let started = std::time::Instant::now();
    let aborted =
        Aborted::new(log.collect_aborted_transactions(range.first_dirty, range.first_uncleanable));
    let (bytes, records) = build_offset_map(
        &view,
        range,
        &aborted,
        map,
        settings.load_factor,
        throttle,
        &done,
    )?;
    stats.map_seconds = started.elapsed().as_secs_f64();
    if done() {
        return Ok(halted(stats));
    }
    stats.map_bytes_read = bytes;
    stats.map_records_read = records;
    stats.map_utilization = map.utilization();
    if map.latest_offset() < range.first_dirty {
        return Ok(CleanOutcome::Nothing);
    }
    let end_offset = map.latest_offset() + 1;
    let producers = log.last_records_of_producers();
    let to_clean: Vec<Arc<LogSegment>> = view
        .segments
        .iter()
        .filter(|s| s.base_offset() < end_offset)
        .cloned()
        .collect();
    if !clean_segments(
        log,
        &mut view,
        &to_clean,
        map,
        &producers,
        range.first_uncleanable,
        settings,
        &mut stats,
        throttle,
        &done,
    )? {
        return Ok(halted(stats));
    }
    if !log.finish_cleaning(&view, end_offset)? {
        return Ok(halted(stats));
    }
    Ok(CleanOutcome::Cleaned { end_offset, stats })
}

#[cfg(test)]
mod tests;
