//! Process-wide settings of the C allocator (glibc malloc), applied once at startup.
//!
//! Why: a consumer's Fetch answer is built in fresh buffers of up to `max.partition.fetch.bytes`
//! (1 MiB by default) per partition, freed as soon as it is written to the socket. With glibc's
//! defaults every such free returns the top of the heap to the kernel (`brk` trim, or `munmap`
//! for blocks above the mmap threshold) and the next Fetch faults the same pages back in, zeroed.
//! Profiling `benches/broker_paths.rs` showed that churn to be most of the fetch path's time
//! (page faults, brk, munmap). Keeping freed memory up to [`TRIM_THRESHOLD_BYTES`] in the process
//! removes it; the resident set grows by at most that much over the live data.
//!
//! This module is not an allocator and changes nothing on targets other than glibc.

/// Free memory at the top of the heap kept in the process rather than returned to the kernel.
pub const TRIM_THRESHOLD_BYTES: i32 = 64 * 1024 * 1024;
/// Blocks at least this large get their own mapping (and go back to the kernel when freed). The
/// largest value glibc accepts on 64-bit targets; below it, fetch buffers come from the heap.
pub const MMAP_THRESHOLD_BYTES: i32 = 32 * 1024 * 1024;

/// Applies the settings above. Call once, before the runtime starts its threads.
pub fn retain_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; it is called before other threads
    // exist and with parameter values glibc documents as valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
    }
}
