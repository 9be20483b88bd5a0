//! The fuzz targets' allocator: the system's, aborting on any single allocation above
//! [`MAX_ALLOCATION`] (`-malloc_limit_mb=64`). libFuzzer sees allocations only through a
//! sanitizer's malloc hooks, so a build without AddressSanitizer (`fuzz/smoke.sh` on a stable
//! toolchain) needs the bound enforced here to report a large allocation as a crash. A target
//! takes it with `#[path = "bounded_alloc.rs"] mod bounded_alloc;`.

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single allocation an input may cause: `-malloc_limit_mb=64`.
const MAX_ALLOCATION: usize = 64 << 20;

struct Bounded;

// SAFETY: delegates to the system allocator; only refuses to return from oversized requests.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

fn check(size: usize) {
    if size > MAX_ALLOCATION {
        // No allocation from here on: write(2) the message, then abort (a crash for libFuzzer,
        // which saves the input).
        let msg = b"fuzz target: single allocation above 64 MiB\n";
        // SAFETY: writing a static buffer to stderr.
        unsafe { libc_write(2, msg.as_ptr(), msg.len()) };
        std::process::abort();
    }
}

extern "C" {
    #[link_name = "write"]
    fn libc_write(fd: i32, buf: *const u8, count: usize) -> isize;
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;
