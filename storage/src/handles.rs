//! The bounded pool of what segments hold open: `.log` file descriptors and `.index` /
//! `.timeindex` memory maps.
//!
//! A broker with tens of thousands of partitions cannot keep a descriptor for every `.log`
//! file (`RLIMIT_NOFILE`) nor a map for every index (`vm.max_map_count`, 65,530 by default).
//! Every segment's log file and indexes are therefore *pooled resources*: opened (or mapped) on
//! first use, registered with the pool, and closed again by the pool when more than its bound
//! are open. A closed resource reopens by path the next time it is used, so eviction is
//! invisible to callers except for the cost of the `open`/`mmap`.
//!
//! Eviction is the CLOCK approximation of LRU: each use sets the resource's `referenced` bit
//! (one relaxed store, no shared lock on the read and append paths; a resource just opened
//! starts with it clear); when the pool is over its bound the hand sweeps the registered
//! resources, clearing set bits and closing the first resource whose bit was clear. A hot partition's segment is used between two sweeps, so it is
//! never the one closed: with a bound of thousands, only idle partitions pay for reopening.
//!
//! Locking: a resource's own mutex is taken first, then (to register or unregister) the pool's.
//! The sweep holds the pool's lock and only *tries* a victim's mutex: a resource in use is
//! skipped, never waited for, so no lock order is ever reversed. A resource in use while it is
//! closed keeps working: readers hold an `Arc<File>` clone until their `pread` returns.
//!
//! Files a reader may still need after their names are gone (segments deleted by retention or
//! truncation, a log renamed away by a move between log dirs) are *pinned* first: opened if
//! needed and taken out of the pool, so they stay readable until the segment is dropped.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, MutexGuard};

/// Default bound on open `.log` descriptors for a pool built without explicit limits (a
/// `LogManager` opened by tests and tools, or a `Log` opened on its own). The broker derives
/// its bound from `RLIMIT_NOFILE` instead.
pub const OPEN_LOG_FILES_MAX_DEFAULT: usize = 4_096;

/// Default bound on mapped index files, as [`OPEN_LOG_FILES_MAX_DEFAULT`]; the broker derives
/// its bound from `vm.max_map_count`.
pub const INDEX_MAPS_MAX_DEFAULT: usize = 8_192;

/// Smallest bound a pool accepts: a log needs its active segment's file and indexes, and a
/// few logs are used at once.
pub const POOL_BOUND_MIN: usize = 16;

/// How many resources of each kind a pool keeps open at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleLimits {
    /// Open `.log` file descriptors.
    pub open_log_files_max: usize,
    /// Mapped `.index` and `.timeindex` files (one map each).
    pub index_maps_max: usize,
}

impl Default for HandleLimits {
    fn default() -> HandleLimits {
        HandleLimits {
            open_log_files_max: OPEN_LOG_FILES_MAX_DEFAULT,
            index_maps_max: INDEX_MAPS_MAX_DEFAULT,
        }
    }
}

/// What a pool holds now and has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleStats {
    /// `.log` descriptors registered (open) now.
    pub open_log_files: usize,
    /// Index maps registered (mapped) now.
    pub index_maps: usize,
    /// Descriptors and maps of deleted or moved segments, kept until the segment is dropped.
    pub pinned: usize,
    /// `.log` files opened so far (first opens and reopens after eviction).
    pub log_file_opens: u64,
    /// Index files mapped so far.
    pub index_map_opens: u64,
    /// Resources closed by the pool to stay within its bounds.
    pub evictions: u64,
}

/// Which bound a resource counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    LogFile,
    IndexMap,
}

/// The pool: one clock per kind of resource.
pub struct HandlePool {
    limits: HandleLimits,
    files: Clock,
    maps: Clock,
    pinned: AtomicUsize,
}

impl std::fmt::Debug for HandlePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlePool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl HandlePool {
    /// A pool with these bounds (each at least [`POOL_BOUND_MIN`]).
    pub fn new(limits: HandleLimits) -> Arc<HandlePool> {
        let limits = HandleLimits {
            open_log_files_max: limits.open_log_files_max.max(POOL_BOUND_MIN),
            index_maps_max: limits.index_maps_max.max(POOL_BOUND_MIN),
        };
        Arc::new(HandlePool {
            limits,
            files: Clock::new(limits.open_log_files_max),
            maps: Clock::new(limits.index_maps_max),
            pinned: Default::default(),
        })
    }

    /// The pool of logs opened without one ([`crate::Log::open`]), with the default limits.
    pub fn shared_default() -> Arc<HandlePool> {
        static POOL: OnceLock<Arc<HandlePool>> = OnceLock::new();
        POOL.get_or_init(|| HandlePool::new(HandleLimits::default()))
            .clone()
    }

    pub fn limits(&self) -> HandleLimits {
        self.limits
    }

    pub fn stats(&self) -> HandleStats {
        let files = self.files.ring.lock();
        let maps = self.maps.ring.lock();
        HandleStats {
            open_log_files: files.live,
            index_maps: maps.live,
            pinned: self.pinned.load(Ordering::Relaxed),
            log_file_opens: files.opens,
            index_map_opens: maps.opens,
            evictions: files.evictions + maps.evictions,
        }
    }

    /// Closes up to `count` idle log files now (not in use, not used since the last sweep),
    /// whatever the bound: descriptors handed back when the process runs short of them.
    /// Returns how many were closed.
    pub fn release_idle_log_files(&self, count: usize) -> usize {
        self.files.sweep_out(count, None)
    }

    fn clock(&self, kind: Kind) -> &Clock {
        match kind {
            Kind::LogFile => &self.files,
            Kind::IndexMap => &self.maps,
        }
    }
}

/// Something a [`Pooled`] wrapper can open and close.
pub(crate) trait Resource: Send + 'static {
    /// Whether it holds a descriptor or map now.
    fn is_open(&self) -> bool;
    /// Opens it (a no-op for resources that open themselves when needed).
    fn open(&mut self) -> crate::Result<()>;
    /// Gives the descriptor or map back; the next use opens it again.
    fn close(&mut self);
}

/// What the clock sees of a registered resource.
trait Evict: Send + Sync {
    fn take_referenced(&self) -> bool;
    /// Closes the resource unless it is in use; true if it was closed.
    fn try_evict(&self) -> bool;
}

struct State<T> {
    value: T,
    /// The resource's place in the clock while it is open and counted.
    slot: Option<usize>,
    /// Kept open outside the pool until dropped (see the module docs).
    pinned: bool,
}

/// A resource counted by a [`HandlePool`]: used through [`Pooled::with`], which registers it
/// when the use opened it and unregisters it when the use closed it.
pub(crate) struct Pooled<T: Resource> {
    kind: Kind,
    pool: Arc<HandlePool>,
    referenced: AtomicBool,
    state: Mutex<State<T>>,
    me: Weak<dyn Evict>,
}

impl<T: Resource> Pooled<T> {
    pub(crate) fn new(pool: &Arc<HandlePool>, kind: Kind, value: T) -> Arc<Pooled<T>> {
        let pooled = Arc::new_cyclic(|me: &Weak<Pooled<T>>| {
            let me: Weak<dyn Evict> = me.clone();
            Pooled {
                kind,
                pool: pool.clone(),
                referenced: AtomicBool::new(true),
                state: Mutex::new(State {
                    value,
                    slot: None,
                    pinned: false,
                }),
                me,
            }
        });
        // A value handed over open (a file just created) is counted from the start.
        pooled.with(|_| ());
        pooled
    }

    /// Runs `f` on the resource under its lock, then registers it with the pool if `f` left it
    /// open and it was not counted yet (which may close other idle resources), or unregisters
    /// it if `f` closed it.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut state = self.state.lock();
        self.referenced.store(true, Ordering::Relaxed);
        let r = f(&mut state.value);
        self.account(&mut state);
        r
    }

    /// As [`Pooled::with`], opening the resource first if it is closed.
    pub(crate) fn with_open<R>(&self, f: impl FnOnce(&mut T) -> R) -> crate::Result<R> {
        let mut state = self.state.lock();
        self.referenced.store(true, Ordering::Relaxed);
        let opened = if state.value.is_open() {
            Ok(())
        } else {
            state.value.open()
        };
        let r = opened.map(|()| f(&mut state.value));
        self.account(&mut state);
        r
    }

    fn account(&self, state: &mut MutexGuard<'_, State<T>>) {
        if state.pinned {
            return;
        }
        let clock = self.pool.clock(self.kind);
        match (state.slot, state.value.is_open()) {
            (None, true) => {
                // Counted from its second use on: a resource opened once and not used again
                // (a scan over many partitions) goes before one in steady use.
                self.referenced.store(false, Ordering::Relaxed);
                state.slot = Some(clock.register(self.me.clone()));
            }
            (Some(slot), false) => {
                clock.unregister(slot);
                state.slot = None;
            }
            _ => {}
        }
    }

    /// Keeps the resource open until it is dropped, outside the pool's count, opening it first
    /// with `open` if it is closed (see the module docs). A failed open leaves it unpinned.
    pub(crate) fn pin(&self, open: impl FnOnce(&mut T) -> crate::Result<()>) -> crate::Result<()> {
        let mut state = self.state.lock();
        if state.pinned {
            return Ok(());
        }
        open(&mut state.value)?;
        if let Some(slot) = state.slot.take() {
            self.pool.clock(self.kind).unregister(slot);
        }
        state.pinned = true;
        self.pool.pinned.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl<T: Resource> Evict for Pooled<T> {
    fn take_referenced(&self) -> bool {
        self.referenced.swap(false, Ordering::Relaxed)
    }

    fn try_evict(&self) -> bool {
        let Some(mut state) = self.state.try_lock() else {
            return false;
        };
        if state.pinned {
            return false;
        }
        state.value.close();
        state.slot = None;
        true
    }
}

impl<T: Resource> Drop for Pooled<T> {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        if state.pinned {
            self.pool.pinned.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(slot) = state.slot.take() {
            self.pool.clock(self.kind).unregister(slot);
        }
    }
}

/// One kind's registered resources and the clock hand over them.
struct Clock {
    bound: usize,
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    slots: Vec<Option<Weak<dyn Evict>>>,
    free: Vec<usize>,
    hand: usize,
    live: usize,
    opens: u64,
    evictions: u64,
}

/// Counts a sweep's visits: how many `evicted` so far, and the Arcs it upgraded (dropped only
/// after the ring's lock is released, since the last one may run a resource's `Drop`, which
/// takes that lock).
struct Sweep {
    evicted: usize,
    upgraded: Vec<Arc<dyn Evict>>,
}

impl Clock {
    fn new(bound: usize) -> Clock {
        Clock {
            bound,
            ring: Mutex::new(Ring::default()),
        }
    }

    /// Counts a newly opened resource and, if that passes the bound, closes idle ones.
    fn register(&self, owner: Weak<dyn Evict>) -> usize {
        let mut ring = self.ring.lock();
        let slot = match ring.free.pop() {
            Some(s) => {
                ring.slots[s] = Some(owner);
                s
            }
            None => {
                ring.slots.push(Some(owner));
                ring.slots.len() - 1
            }
        };
        ring.live += 1;
        ring.opens += 1;
        let over = ring.live.saturating_sub(self.bound);
        let sweep = if over > 0 {
            Some(Self::sweep(&mut ring, over, Some(slot)))
        } else {
            None
        };
        drop(ring);
        drop(sweep);
        slot
    }

    fn unregister(&self, slot: usize) {
        let mut ring = self.ring.lock();
        if ring.slots[slot].take().is_some() {
            ring.free.push(slot);
            ring.live -= 1;
        }
    }

    /// Closes up to `count` idle resources (all of them when fewer are idle), sparing `spare`.
    fn sweep_out(&self, count: usize, spare: Option<usize>) -> usize {
        let mut ring = self.ring.lock();
        let sweep = Self::sweep(&mut ring, count, spare);
        drop(ring);
        sweep.evicted
    }

    /// Moves the hand until `count` resources are closed or two full turns have passed (the
    /// first clears reference bits, the second finds them clear unless used meanwhile).
    fn sweep(ring: &mut Ring, count: usize, spare: Option<usize>) -> Sweep {
        let mut sweep = Sweep {
            evicted: 0,
            upgraded: Vec::new(),
        };
        let len = ring.slots.len();
        let mut steps = 0;
        while sweep.evicted < count && steps < 2 * len {
            steps += 1;
            let at = ring.hand % len;
            ring.hand = (at + 1) % len;
            if Some(at) == spare {
                continue;
            }
            let Some(owner) = ring.slots[at].as_ref().and_then(Weak::upgrade) else {
                // Free, or its owner is being dropped and will unregister.
                continue;
            };
            if !owner.take_referenced() && owner.try_evict() {
                ring.slots[at] = None;
                ring.free.push(at);
                ring.live -= 1;
                ring.evictions += 1;
                sweep.evicted += 1;
            }
            sweep.upgraded.push(owner);
        }
        sweep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    struct Fake {
        open: bool,
        opens: Arc<AtomicU64>,
    }

    impl Resource for Fake {
        fn is_open(&self) -> bool {
            self.open
        }
        fn open(&mut self) -> crate::Result<()> {
            self.open = true;
            self.opens.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn close(&mut self) {
            self.open = false;
        }
    }

    fn fakes(pool: &Arc<HandlePool>, n: usize) -> (Vec<Arc<Pooled<Fake>>>, Arc<AtomicU64>) {
        let opens = Arc::new(AtomicU64::new(0));
        let v = (0..n)
            .map(|_| {
                Pooled::new(
                    pool,
                    Kind::LogFile,
                    Fake {
                        open: false,
                        opens: opens.clone(),
                    },
                )
            })
            .collect();
        (v, opens)
    }

    #[test]
    fn the_bound_holds_and_a_hot_resource_is_not_evicted() {
        let pool = HandlePool::new(HandleLimits {
            open_log_files_max: 16,
            index_maps_max: 16,
        });
        let (all, opens) = fakes(&pool, 200);
        for (i, r) in all.iter().enumerate() {
            r.with_open(|_| ()).unwrap();
            // Resource 0 is hot: used between every two others.
            all[0].with_open(|f| assert!(f.open)).unwrap();
            assert!(pool.stats().open_log_files <= 16, "at {i}");
        }
        let open_now = all.iter().filter(|r| r.with(|f| f.open)).count();
        assert_eq!(open_now, pool.stats().open_log_files);
        assert_eq!(
            opens.load(Ordering::Relaxed),
            200,
            "the hot one opened once"
        );
        assert!(pool.stats().evictions >= 200 - 16);
    }

    #[test]
    fn dropped_and_pinned_resources_leave_the_count() {
        let pool = HandlePool::new(HandleLimits {
            open_log_files_max: 16,
            index_maps_max: 16,
        });
        let (mut all, _) = fakes(&pool, 10);
        for r in &all {
            r.with_open(|_| ()).unwrap();
        }
        assert_eq!(pool.stats().open_log_files, 10);
        all[0].pin(|f| f.open()).unwrap();
        assert_eq!(pool.stats().open_log_files, 9);
        assert_eq!(pool.stats().pinned, 1);
        all.truncate(4);
        assert_eq!(pool.stats().open_log_files, 3);
        drop(all);
        assert_eq!((pool.stats().open_log_files, pool.stats().pinned), (0, 0));
        let (busy, _) = fakes(&pool, 20);
        for r in &busy {
            r.with_open(|_| ()).unwrap();
        }
        assert_eq!(pool.stats().open_log_files, 16);
        // Everything was used since the last sweep: the first turn clears, the second closes.
        assert_eq!(pool.release_idle_log_files(4), 4);
        assert_eq!(pool.stats().open_log_files, 12);
    }

    #[test]
    fn concurrent_use_stays_within_the_bound_without_deadlock() {
        let pool = HandlePool::new(HandleLimits {
            open_log_files_max: 16,
            index_maps_max: 16,
        });
        let (all, _) = fakes(&pool, 64);
        let all = Arc::new(all);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let all = all.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000usize {
                        let x = (i * 7 + t * 13) % all.len();
                        let y = (i * 11 + t) % all.len();
                        // Nested uses (in one order, as any two locks must be), while other
                        // threads' registrations sweep over both.
                        let (a, b) = (&all[x.min(y)], &all[x.max(y)]);
                        if x == y {
                            a.with_open(|f| assert!(f.open)).unwrap();
                            continue;
                        }
                        a.with_open(|_| b.with_open(|f| assert!(f.open)).unwrap())
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let open_now = all.iter().filter(|r| r.with(|f| f.open)).count();
        assert!(open_now <= 16 + 8, "{open_now}");
        assert_eq!(open_now, pool.stats().open_log_files);
    }
}
