//! Fuzzes request decoding: no input may panic `decode_request` or make it allocate large.
//! Run with `-malloc_limit_mb` (see ../README.md) so that any single allocation above the limit
//! is reported as a crash. libFuzzer sees allocations only through a sanitizer's malloc hooks,
//! so the target also enforces the same bound itself ([`MAX_ALLOCATION`]): a build without
//! AddressSanitizer (`fuzz/smoke.sh` on a stable toolchain) aborts on a large allocation too.
//!
//! Inputs whose first byte is even are taken as a whole frame. Otherwise the next two bytes pick
//! one of the decodable API versions and the rest is its body behind a well-formed request
//! header, so that mutations spend their time inside request bodies rather than on the api key.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};

use bytes::{BufMut, Bytes, BytesMut};
use kafkaiq::protocol::layouts::LAYOUTS;
use kafkaiq::protocol::{decode_request, ApiKey};
use libfuzzer_sys::fuzz_target;

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
        let msg = b"decode_request: single allocation above 64 MiB\n";
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

fuzz_target!(|data: &[u8]| {
    let frame = match data {
        [mode, rest @ ..] if mode % 2 == 0 => Bytes::copy_from_slice(rest),
        [_, pick_hi, pick_lo, body @ ..] => {
            let pick = usize::from(u16::from_be_bytes([*pick_hi, *pick_lo]));
            let (api_key, version) = api_version(pick);
            with_header(api_key, version, body)
        }
        _ => Bytes::copy_from_slice(data),
    };
    let _ = decode_request(frame);
});

fn api_version(pick: usize) -> (ApiKey, i16) {
    let all: Vec<(ApiKey, i16)> = LAYOUTS
        .iter()
        .flat_map(|l| (l.versions.min..=l.versions.max).map(move |v| (l.api_key, v)))
        .collect();
    all[pick % all.len()]
}

fn with_header(api_key: ApiKey, version: i16, body: &[u8]) -> Bytes {
    let mut frame = BytesMut::new();
    frame.put_i16(api_key as i16);
    frame.put_i16(version);
    frame.put_i32(1);
    frame.put_i16(4);
    frame.put_slice(b"fuzz");
    if api_key.request_header_version(version) >= 2 {
        frame.put_u8(0);
    }
    frame.put_slice(body);
    frame.freeze()
}
