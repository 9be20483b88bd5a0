//! What the log cleaner needs of a [`Log`]: a consistent view of its inactive segments, the
//! producers whose last batch must stay, and the crash-safe swap of cleaned segments
//! (Kafka's `UnifiedLog.replaceSegments` and the `.swap` handling of `LogLoader`).
//!
//! A cleaned segment is written as `<base>.log.cleaned` (and `.index.cleaned`,
//! `.timeindex.cleaned`) beside the segments it replaces, then swapped in under the writer lock:
//!
//! 0. `<base>.swapend` records where the replaced segments end (the next segment's base),
//!    fsynced with the dir;
//! 1. the `.cleaned` files are renamed `.swap`, the `.log` last, and the dir is fsynced: from
//!    here the swap is committed;
//! 2. the replaced segments' files are renamed `.deleted` (readers holding them keep reading
//!    their pinned files), dir fsynced;
//! 3. the `.swap` files get their final names, dir fsynced.
//!
//! The `.deleted` files are removed, and the replaced segments closed, on a thread of their own
//! once the cleaning is done with them (as Kafka's asynchronous segment deletion): unlinking
//! and unmapping hundreds of files is not the cleaner's, nor the writer lock's, time.
//!
//! Opening a log finishes or discards a swap cut short: `.cleaned` and `.deleted` files, and
//! index `.swap` files without their log's, are removed (the cleaning never committed, or is
//! done); a `<base>.log.swap` replaces every segment whose base offset lies in `[base, end)`,
//! `end` being the later of the swap's next offset and what `<base>.swapend` records (a group's
//! trailing segments of which the cleaning kept nothing lie past the first), and its indexes
//! are rebuilt; `.swapend` files are removed.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{parse_segment_base, sync_dir, Log};
use crate::batch::{BatchHeader, RECORD_BATCH_OVERHEAD};
use crate::error::{IoContext, Result, StorageError};
use crate::segment::{remove_segment_files, LogSegment};

/// Suffix of a cleaned segment's files before the swap.
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment's files while the swap is under way.
pub const SWAP_SUFFIX: &str = ".swap";
/// Suffix of a replaced segment's files from its swap until their removal.
pub const DELETED_SUFFIX: &str = ".deleted";
/// Suffix of the file, `<base>.swapend`, that holds (8 bytes, big-endian) the offset where the
/// segments a swap replaces end: the next segment's base. It is written and made durable
/// before the swap's commit, so a recovery that finishes the swap removes every replaced
/// segment, also those past the cleaned segment's last offset (a group's trailing segments of
/// which the cleaning kept nothing), which the `.swap` file alone cannot name.
pub const SWAP_END_SUFFIX: &str = ".swapend";

fn swap_end_path(dir: &Path, base: i64) -> std::path::PathBuf {
    dir.join(format!("{base:020}{SWAP_END_SUFFIX}"))
}

/// The replaced range's end a `.swapend` file records, if the file is whole.
fn read_swap_end(path: &Path) -> Option<i64> {
    let bytes = std::fs::read(path).ok()?;
    Some(i64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// The inactive segments a cleaning may read, and what must not change before its swap.
pub struct CleaningView {
    /// Every segment but the active one, in order.
    pub segments: Vec<Arc<LogSegment>>,
    /// Where the active segment starts: no cleaning reaches it.
    pub active_base_offset: i64,
    pub(crate) truncation_generation: u64,
    pub(crate) cleaning_aborts: u64,
    /// What the swaps replaced: removed in the background when the view goes (after
    /// `segments`, so that the replaced segments are closed there too).
    replaced: Replaced,
}

/// Replaced segments and their renamed files.
#[derive(Default)]
struct Replaced {
    segments: Vec<Arc<LogSegment>>,
    paths: Vec<std::path::PathBuf>,
}

impl Drop for Replaced {
    fn drop(&mut self) {
        if self.paths.is_empty() && self.segments.is_empty() {
            return;
        }
        let (segments, paths) = (
            std::mem::take(&mut self.segments),
            std::mem::take(&mut self.paths),
        );
        let remove = move || {
            // Closed first: the last close of an unlinked file is what frees its blocks.
            drop(segments);
            for path in &paths {
                if let Err(e) = remove_if_present(path) {
                    tracing::warn!(error = %e, "cannot remove a replaced segment's file; the next open removes it");
                }
            }
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("log-cleaner-remove".into())
            .spawn(move || {
                if let Ok(remove) = rx.recv() {
                    let remove: Box<dyn FnOnce() + Send> = remove;
                    remove();
                }
            });
        let remove: Box<dyn FnOnce() + Send> = Box::new(remove);
        match spawned {
            Ok(_) => {
                if let Err(std::sync::mpsc::SendError(remove)) = tx.send(remove) {
                    remove();
                }
            }
            Err(_) => remove(),
        }
    }
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(from, e)),
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// The offset after the last whole batch of a `.log` file (its base offset when it holds none).
fn next_offset_of_file(path: &Path, base_offset: i64) -> Result<i64> {
    let mut file = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(path).at(path)?);
    let len = std::fs::metadata(path).at(path)?.len();
    let mut position = 0u64;
    let mut next = base_offset;
    let mut header = [0u8; RECORD_BATCH_OVERHEAD];
    while position + RECORD_BATCH_OVERHEAD as u64 <= len {
        file.read_exact(&mut header).at(path)?;
        let Ok(h) = BatchHeader::parse(&header) else {
            break;
        };
        let size = h.size_in_bytes() as u64;
        if position + size > len {
            break;
        }
        next = h.next_offset();
        std::io::copy(
            &mut (&mut file).take(size - RECORD_BATCH_OVERHEAD as u64),
            &mut std::io::sink(),
        )
        .at(path)?;
        position += size;
    }
    Ok(next)
}

/// Finishes or discards a cleaner's swap cut short in `dir` (see the module docs). Returns the
/// base offsets of the segments swapped in, whose indexes must be rebuilt.
pub(crate) fn recover_swaps(dir: &Path) -> Result<Vec<i64>> {
    let mut swaps = Vec::new();
    let mut changed = false;
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(CLEANED_SUFFIX) || name.ends_with(DELETED_SUFFIX) {
            remove_if_present(&entry.path())?;
            changed = true;
        } else if let Some(base) = name.strip_suffix(SWAP_SUFFIX).and_then(parse_segment_base) {
            swaps.push(base);
        }
    }
    swaps.sort_unstable();
    // An index `.swap` without its log's `.swap` is from a swap cut before its commit point.
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(SWAP_SUFFIX) else {
            continue;
        };
        let index_base = stem
            .strip_suffix(".index")
            .or_else(|| stem.strip_suffix(".timeindex"))
            .filter(|b| b.len() == 20 && b.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|b| b.parse::<i64>().ok());
        if index_base.is_some_and(|b| !swaps.contains(&b)) {
            remove_if_present(&entry.path())?;
            changed = true;
        }
    }
    let mut bases = Vec::new();
    let mut ends = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(base) = parse_segment_base(name) {
            bases.push(base);
        } else if let Some(base) = name
            .strip_suffix(SWAP_END_SUFFIX)
            .filter(|b| b.len() == 20 && b.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|b| b.parse::<i64>().ok())
        {
            ends.push(base);
        }
    }
    for &base in &swaps {
        let swap = dir.join(crate::segment::log_file_name(base) + SWAP_SUFFIX);
        let next = next_offset_of_file(&swap, base)?;
        // The replaced range: to its recorded end when the swap wrote one (a swap from before
        // `.swapend` files has only the cleaned segment's own offsets).
        let end = read_swap_end(&swap_end_path(dir, base)).unwrap_or(i64::MIN);
        let until = next.max(base + 1).max(end);
        tracing::info!(dir = %dir.display(), segment = base, next_offset = next, replaced_until = until,
            "finishing the swap of a cleaned segment");
        for &old in bases.iter().filter(|&&b| b >= base && b < until) {
            remove_segment_files(dir, old)?;
        }
        for name in [
            crate::segment::index_file_name(base),
            crate::segment::time_index_file_name(base),
        ] {
            remove_if_present(&dir.join(name.clone() + SWAP_SUFFIX))?;
            // Rebuilt from the log on open.
            remove_if_present(&dir.join(name))?;
        }
        rename(&swap, &dir.join(crate::segment::log_file_name(base)))?;
        changed = true;
    }
    // A `.swapend` outlives its swap only until the next open: finished or never committed,
    // it has nothing left to say.
    for base in ends {
        remove_if_present(&swap_end_path(dir, base))?;
        changed = true;
    }
    if changed {
        sync_dir(dir)?;
    }
    Ok(swaps)
}

impl Log {
    /// The inactive segments, with what a swap checks has not changed since.
    pub fn cleaning_view(&self) -> CleaningView {
        let segments = self.segments();
        CleaningView {
            segments: segments[..segments.len() - 1].to_vec(),
            active_base_offset: segments.last().expect("a log has a segment").base_offset(),
            truncation_generation: self.truncation_generation.load(Ordering::SeqCst),
            replaced: Replaced::default(),
            cleaning_aborts: self.cleaning_aborts.load(Ordering::SeqCst),
        }
    }

    /// How many times a cleaning of the log was aborted (`compact` turned off).
    pub(crate) fn cleaning_aborts(&self) -> u64 {
        self.cleaning_aborts.load(Ordering::SeqCst)
    }

    /// Whether the cleaning that took `view` must stop: `compact` was turned off since.
    pub(crate) fn cleaning_aborted(&self, view: &CleaningView) -> bool {
        self.cleaning_aborts.load(Ordering::SeqCst) != view.cleaning_aborts
    }

    /// How many truncations the log went through (a cleaning's swaps are not counted).
    pub(crate) fn truncation_count(&self) -> u64 {
        self.truncations.load(Ordering::SeqCst)
    }

    /// Records where a cleaning ended, unless a truncation happened since `view` was taken (it
    /// may have pulled the checkpoint below what the cleaning covered). Under the writer lock,
    /// so no truncation falls between the check and the store.
    pub(crate) fn finish_cleaning(&self, view: &CleaningView, end_offset: i64) -> Result<bool> {
        let _w = self.lock_writer()?;
        if self.truncation_generation.load(Ordering::SeqCst) != view.truncation_generation
            || self.cleaning_aborted(view)
        {
            return Ok(false);
        }
        self.cleaned_up_to.store(end_offset, Ordering::Release);
        Ok(true)
    }

    /// For each producer id with state, its last entry in the log: the batch a cleaning keeps
    /// (empty if need be) so the producer's sequence and epoch survive a restart.
    pub fn last_records_of_producers(&self) -> HashMap<i64, LastRecord> {
        self.producers
            .lock()
            .producers()
            .map(|p| {
                let last = LastRecord {
                    last_data_offset: p.last_batch().map(|b| b.last_offset),
                    producer_epoch: p.producer_epoch,
                };
                (p.producer_id, last)
            })
            .collect()
    }

    /// Swaps `cleaned` (written with [`CLEANED_SUFFIX`] files, flushed) in for `old`, which
    /// must still be consecutive segments of the log, none truncated since `view` was taken.
    /// Returns false, removing the cleaned files and changing nothing else, when the log moved
    /// on (a truncation, a retention or DeleteRecords deletion, a replacement of the log) or
    /// the cleaning was aborted; an error removes the cleaned files too.
    /// After a swap `view` stays valid for the next group of the same cleaning.
    /// `aborted_in(from, to)` gives the transaction index entries of the cleaned segment: the
    /// aborted transactions whose markers it kept in `[from, to)`.
    pub fn replace_segments(
        &self,
        view: &mut CleaningView,
        cleaned: LogSegment,
        old: &[Arc<LogSegment>],
        aborted_in: &dyn Fn(i64, i64) -> Vec<crate::txn_index::AbortedTxn>,
    ) -> Result<bool> {
        let base = cleaned.base_offset();
        let cleaned_paths: Vec<_> = cleaned.paths().iter().map(|p| p.to_path_buf()).collect();
        drop(cleaned);
        let discard = |paths: &[std::path::PathBuf]| -> Result<bool> {
            for p in paths {
                remove_if_present(p)?;
            }
            Ok(false)
        };
        let w = match self.lock_writer() {
            Ok(w) => w,
            Err(e) => {
                discard(&cleaned_paths)?;
                return Err(e);
            }
        };
        let segments = self.segments();
        let first = segments
            .iter()
            .position(|s| old.first().is_some_and(|o| Arc::ptr_eq(s, o)));
        let in_place = first.is_some_and(|i| {
            i + old.len() < segments.len()
                && segments[i..i + old.len()]
                    .iter()
                    .zip(old)
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        });
        if !in_place
            || self.truncation_generation.load(Ordering::SeqCst) != view.truncation_generation
            || self.retired.load(Ordering::Acquire)
            || self.cleaning_aborted(view)
        {
            drop(w);
            return discard(&cleaned_paths);
        }
        // A reader holding a replaced segment must go on reading its files, not the cleaned
        // file that takes the first one's name: every replaced segment is pinned before the
        // commit, or there is no swap.
        if let Err(e) = old.iter().try_for_each(|s| s.pin_files()) {
            drop(w);
            discard(&cleaned_paths)?;
            return Err(e);
        }
        let first = first.expect("checked");
        // Where the replaced segments end: the next segment's base (there is one: the active
        // segment is never replaced).
        let replaced_end = segments[first + old.len()].base_offset();
        let end_path = swap_end_path(&self.dir, base);
        let r = (|| {
            // 0. The replaced range's end, durable before the commit names the swap.
            {
                use std::io::Write;
                let mut f = std::fs::File::create(&end_path).at(&end_path)?;
                f.write_all(&replaced_end.to_be_bytes()).at(&end_path)?;
                f.sync_all().at(&end_path)?;
            }
            sync_dir(&self.dir)?;
            // 1. Commit: `.cleaned` → `.swap`, the log file last.
            let swap_paths: Vec<_> = cleaned_paths
                .iter()
                .map(|p| {
                    let s = p.to_str().expect("segment paths are UTF-8");
                    std::path::PathBuf::from(
                        s.strip_suffix(CLEANED_SUFFIX)
                            .expect("a cleaned file")
                            .to_owned()
                            + SWAP_SUFFIX,
                    )
                })
                .collect();
            for (from, to) in cleaned_paths.iter().zip(&swap_paths).rev() {
                rename(from, to)?;
            }
            sync_dir(&self.dir)?;
            // 2. The replaced segments go (renamed now, removed in the background); readers
            // holding them read their pinned files. Their transaction indexes go too: the
            // cleaned segment's is written after the swap, and an old one left under its base
            // would name markers the cleaning removed (a crash before then loses only entries
            // of transactions with no record left).
            for seg in old {
                let txn_index = self
                    .dir
                    .join(crate::txn_index::txn_index_file_name(seg.base_offset()));
                let has_txn_index = txn_index.exists();
                for path in seg
                    .paths()
                    .into_iter()
                    .chain(has_txn_index.then_some(&*txn_index))
                {
                    let to = std::path::PathBuf::from(
                        path.to_str().expect("segment paths are UTF-8").to_owned() + DELETED_SUFFIX,
                    );
                    rename(path, &to)?;
                    view.replaced.paths.push(to);
                }
                view.replaced.segments.push(seg.clone());
            }
            sync_dir(&self.dir)?;
            // 3. Final names.
            for to in swap_paths.iter().rev() {
                let s = to.to_str().expect("segment paths are UTF-8");
                rename(
                    to,
                    Path::new(s.strip_suffix(SWAP_SUFFIX).expect("a swap file")),
                )?;
            }
            sync_dir(&self.dir)?;
            // Done with it; one left by a crash from here on is removed at the next open.
            remove_if_present(&end_path)?;
            let config = self.config();
            let seg = LogSegment::open(
                &self.dir,
                base,
                config.segment_index_bytes as usize,
                w.last_now_ms,
                &self.pool,
            )?;
            let interval = config.index_interval_bytes as usize;
            if !seg.load_clean(interval)? {
                seg.recover(interval, config.segment_index_bytes as usize, &mut |_| {})?;
                seg.on_roll()?;
            }
            let mut list = segments[..first].to_vec();
            list.push(Arc::new(seg));
            list.extend_from_slice(&segments[first + old.len()..]);
            // The index first: its entries are right for the replaced segments as well (it only
            // loses those of transactions with no batch left in them).
            let old_bases: Vec<i64> = old.iter().map(|s| s.base_offset()).collect();
            self.txn_indexes.lock().replace(
                &self.dir,
                base,
                &old_bases,
                aborted_in(base, replaced_end),
            )?;
            // Byte positions into the replaced segments (parked fetches) are void now.
            view.truncation_generation =
                self.truncation_generation.fetch_add(2, Ordering::SeqCst) + 2;
            self.set_segments(list);
            // The producer snapshots of the replaced segments go with them (as Kafka's
            // replaceSegments does): else each roll of a compacted log would leave one for good.
            // Renamed `.deleted` here and removed with the segments' files. Best effort: the
            // swap is done, and a snapshot left behind is only a file.
            let mut producers = self.producers.lock();
            for seg in old.iter().filter(|s| s.base_offset() != base) {
                let Some(path) = producers.forget_snapshot(seg.base_offset()) else {
                    continue;
                };
                let to = std::path::PathBuf::from(
                    path.to_str().expect("snapshot paths are UTF-8").to_owned() + DELETED_SUFFIX,
                );
                match rename(&path, &to) {
                    Ok(()) => view.replaced.paths.push(to),
                    Err(e) => {
                        tracing::warn!(dir = %self.dir.display(), error = %e, "cannot delete the producer snapshot of a replaced segment")
                    }
                }
            }
            Ok(true)
        })();
        drop(w);
        self.guard(r)
    }
}

/// A producer's last entry in the log, as a cleaning sees it (Kafka's `LastRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    /// The last offset of its last data batch, if it has one at its current epoch; without one
    /// its last entry is a marker (written at a bumped epoch, say), which carries the epoch.
    pub last_data_offset: Option<i64>,
    pub producer_epoch: i16,
}

impl LastRecord {
    /// Whether the batch `h` of this producer is its last entry (Kafka's
    /// `isBatchLastRecordOfProducer`): its last data batch, or the marker carrying its epoch.
    pub fn is(&self, h: &crate::batch::BatchHeader) -> bool {
        match self.last_data_offset {
            Some(last) => h.last_offset() == last,
            None => h.is_control() && h.producer_epoch == self.producer_epoch,
        }
    }
}
