//! Populated request frames built from the layout DSL, shared by the hostile-frame tests.
#![allow(dead_code)] // each test binary uses a different subset

use bytes::{BufMut, Bytes, BytesMut};
use kafkaiq::protocol::layouts::{Layout, Ty, LAYOUTS};
use kafkaiq::protocol::ApiKey;

/// What a length prefix written into a populated frame counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    String,
    Bytes,
    Array,
}

/// A length prefix in a populated frame: where it is, what it counts, whether it is compact.
#[derive(Debug, Clone, Copy)]
pub struct PrefixAt {
    pub at: usize,
    pub kind: Prefix,
    pub compact: bool,
}

/// Writes a populated value of each layout type. Values are distinct so that a layout that
/// disagrees with the crate shows up as a failed decode or a different re-encoding.
pub struct Populate {
    version: i16,
    flexible: bool,
    counter: u32,
    /// Length prefixes written directly into the frame (not those inside tagged fields).
    prefixes: Vec<PrefixAt>,
    /// Offset of the buffer being written within the frame; `None` inside a tagged value.
    base: Option<usize>,
}

/// A tag no request schema defines; `kafka-protocol` must keep and re-encode it.
pub const UNKNOWN_TAG: u32 = 1000;

impl Populate {
    fn note(&mut self, out: &BytesMut, kind: Prefix) {
        if let Some(base) = self.base {
            self.prefixes.push(PrefixAt {
                at: base + out.len(),
                kind,
                compact: self.flexible,
            });
        }
    }

    fn next(&mut self) -> u32 {
        self.counter += 1;
        self.counter
    }

    pub fn value(&mut self, out: &mut BytesMut, ty: &Ty) {
        match *ty {
            // 1-byte fields are int8 or bool; bool re-encodes as 1.
            Ty::Fixed(1) => out.put_u8(1),
            Ty::Fixed(len) => {
                let n = self.next();
                for i in 0..len {
                    out.put_u8((n as usize * 31 + i * 7) as u8 | 1);
                }
            }
            Ty::String => {
                self.note(out, Prefix::String);
                let s = format!("s{}", self.next());
                if self.flexible {
                    put_uvarint(out, s.len() as u32 + 1);
                } else {
                    out.put_i16(s.len() as i16);
                }
                out.put_slice(s.as_bytes());
            }
            Ty::Bytes => {
                self.note(out, Prefix::Bytes);
                let n = self.next();
                let b: Vec<u8> = (0..(n % 5 + 3)).map(|i| (n + i) as u8).collect();
                if self.flexible {
                    put_uvarint(out, b.len() as u32 + 1);
                } else {
                    out.put_i32(b.len() as i32);
                }
                out.put_slice(&b);
            }
            Ty::Array(element) => {
                self.note(out, Prefix::Array);
                if self.flexible {
                    put_uvarint(out, 3);
                } else {
                    out.put_i32(2);
                }
                self.value(out, element);
                self.value(out, element);
            }
            Ty::OptionalStruct(fields) => {
                out.put_u8(1);
                self.value(out, &Ty::Struct(fields));
            }
            Ty::Struct(fields) => {
                for field in fields {
                    if field.tag.is_none() && field.versions.contains(self.version) {
                        self.value(out, &field.ty);
                    }
                }
                if self.flexible {
                    let mut tagged: Vec<_> = fields
                        .iter()
                        .filter(|f| f.tag.is_some() && f.versions.contains(self.version))
                        .collect();
                    tagged.sort_by_key(|f| f.tag);
                    put_uvarint(out, tagged.len() as u32 + 1);
                    for field in tagged {
                        let mut value = BytesMut::new();
                        let base = self.base.take();
                        self.value(&mut value, &field.ty);
                        self.base = base;
                        put_uvarint(out, field.tag.unwrap());
                        put_uvarint(out, value.len() as u32);
                        out.put_slice(&value);
                    }
                    put_uvarint(out, UNKNOWN_TAG);
                    put_uvarint(out, 3);
                    out.put_slice(&[7, 8, 9]);
                }
            }
        }
    }
}

pub fn put_uvarint(out: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

pub fn request_header(api_key: ApiKey, version: i16, correlation_id: i32) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i16(api_key as i16);
    out.put_i16(version);
    out.put_i32(correlation_id);
    out.put_i16(11);
    out.put_slice(b"test-client");
    if api_key.request_header_version(version) >= 2 {
        out.put_u8(0);
    }
    out
}

/// A populated request frame (header and body, no size prefix) and its body's offset.
pub fn populated_frame(layout: &Layout, version: i16) -> (Bytes, usize) {
    let (frame, body_at, _) = populated_frame_with_prefixes(layout, version);
    (frame, body_at)
}

/// A populated request frame, its body's offset and its length prefixes (the header's client id
/// and every one in the body outside tagged fields).
pub fn populated_frame_with_prefixes(
    layout: &Layout,
    version: i16,
) -> (Bytes, usize, Vec<PrefixAt>) {
    let mut frame = request_header(layout.api_key, version, 0x0102_0304);
    let body_at = frame.len();
    let mut populate = Populate {
        version,
        flexible: layout.is_flexible(version),
        counter: 0,
        // The header's client id (after api key, version and correlation id).
        prefixes: vec![PrefixAt {
            at: 8,
            kind: Prefix::String,
            compact: false,
        }],
        base: Some(0),
    };
    populate.value(&mut frame, &layout.body);
    (frame.freeze(), body_at, populate.prefixes)
}

pub fn all_versions() -> impl Iterator<Item = (&'static Layout, i16)> {
    LAYOUTS
        .iter()
        .flat_map(|layout| (layout.versions.min..=layout.versions.max).map(move |v| (layout, v)))
}

/// `frame` with the length prefix at `prefix` replaced by the largest value its encoding holds.
pub fn with_huge_prefix(frame: &[u8], prefix: PrefixAt) -> Bytes {
    let (old_len, huge): (usize, &[u8]) = match (prefix.compact, prefix.kind) {
        (true, _) => (1, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        (false, Prefix::String) => (2, &[0x7f, 0xff]),
        (false, Prefix::Bytes | Prefix::Array) => (4, &[0x7f, 0xff, 0xff, 0xff]),
    };
    let mut out = BytesMut::from(&frame[..prefix.at]);
    out.put_slice(huge);
    out.put_slice(&frame[prefix.at + old_len..]);
    out.freeze()
}
