//! Fuzzes request decoding: no input may panic `decode_request` or make it allocate large.
//! Run with `-malloc_limit_mb` (see ../README.md) so that any single allocation above the limit
//! is reported as a crash; the target also enforces the same bound itself ([`bounded_alloc`]),
//! so a build without AddressSanitizer aborts on a large allocation too.
//!
//! Inputs whose first byte is even are taken as a whole frame. Otherwise the next two bytes pick
//! one of the decodable API versions and the rest is its body behind a well-formed request
//! header, so that mutations spend their time inside request bodies rather than on the api key.

#![no_main]

#[path = "bounded_alloc.rs"]
mod bounded_alloc;

use bytes::{BufMut, Bytes, BytesMut};
use kafkaiq::protocol::layouts::LAYOUTS;
use kafkaiq::protocol::{decode_request, ApiKey};
use libfuzzer_sys::fuzz_target;

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
