//! Filesystem work for many partitions on a few threads at once.
//!
//! Creating a partition's log, or registering a new leader epoch, is a handful of small
//! metadata operations and one or two fsyncs, each of which waits on the disk rather than the
//! CPU. Done one partition after another, a metadata image that adds 1,000 replicas to a node
//! waits for thousands of fsyncs in series; done on a few threads, the filesystem commits the
//! waiting fsyncs together. Each item must be independent of the others.

/// Items below this many are done on the calling thread: a thread costs more than it saves.
pub const PARALLEL_MIN_ITEMS: usize = 16;

/// Threads for creating logs and registering leader epochs of many partitions at once
/// (the filesystem work of one metadata image). Chosen by measurement on a virtual disk: the
/// time of 1,000 partition creations fell until about this many threads and not after.
pub const PARTITION_IO_THREADS: usize = 8;

/// `f` applied to every item, on up to `threads` threads (each takes one contiguous run of
/// the items), answered in the order of `items`. Fewer than [`PARALLEL_MIN_ITEMS`] items, or
/// one thread, run on the caller's thread.
pub fn map<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads.min(items.len().div_ceil(PARALLEL_MIN_ITEMS / 2).max(1));
    if items.len() < PARALLEL_MIN_ITEMS || threads <= 1 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        // A run whose thread could not be started is done here, in its turn.
        let running: Vec<_> = items
            .chunks(chunk)
            .map(|run| {
                let thread = std::thread::Builder::new()
                    .name("kafkaiq-partition-io".into())
                    .spawn_scoped(scope, move || run.iter().map(f).collect::<Vec<R>>());
                (run, thread.ok())
            })
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for (run, thread) in running {
            match thread {
                Some(handle) => match handle.join() {
                    Ok(part) => out.extend(part),
                    Err(panic) => std::panic::resume_unwind(panic),
                },
                None => out.extend(run.iter().map(f)),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn answers_in_order_and_calls_once_per_item() {
        for n in [0, 1, 15, 16, 17, 100, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let calls = AtomicUsize::new(0);
            let out = map(&items, PARTITION_IO_THREADS, |&i| {
                calls.fetch_add(1, Ordering::Relaxed);
                i * 2
            });
            assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
            assert_eq!(calls.load(Ordering::Relaxed), n);
        }
    }

    #[test]
    fn many_items_run_on_more_than_one_thread() {
        let items: Vec<usize> = (0..256).collect();
        let out = map(&items, 4, |_| std::thread::current().id());
        let mut ids = out.clone();
        ids.sort_by_key(|id| format!("{id:?}"));
        ids.dedup();
        assert_eq!(ids.len(), 4);
        assert!(!ids.contains(&std::thread::current().id()));
    }
}
