//! Structural validation of request frames before `kafka-protocol` decodes them.
//!
//! `kafka-protocol` 0.18 reserves memory from wire lengths before it checks that the bytes exist:
//! `Vec::with_capacity(n)` for arrays, `vec![0; n]` for strings and bytes decoded into owned
//! buffers. A 7-byte Metadata body claiming 2^31 topics makes it try to allocate ~150 GB and
//! abort the process. This module walks a frame along the request's [layout](super::layouts)
//! exactly as the crate will read it, and rejects the frame if
//!
//! - any field is truncated,
//! - a string, bytes or tagged-field length is negative (other than null) or exceeds the bytes
//!   that remain,
//! - an array's element count times its smallest possible element exceeds the bytes that remain,
//! - a known tagged field's declared size differs from the bytes its value occupies.
//!
//! A frame that passes therefore makes the crate reserve at most one element per byte of frame
//! for any array, and never more bytes than the frame holds for a string. Work is linear in the
//! frame size: every step of the walk consumes at least one byte. Recursion depth is bounded by
//! the layouts, not by the input.
//!
//! This is not a decoder: it builds no values and does not check UTF-8, enum values or whether a
//! null is allowed; `kafka-protocol` still rejects those.

use super::layouts::{layout_of, Field, Layout, Ty};
use super::ApiKey;

/// Why a frame was rejected. `at` is the byte offset in the frame (without size prefix).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("{api_key:?} is not an API this broker decodes")]
    UnknownApi { api_key: ApiKey },
    #[error("{api_key:?} v{version} is outside the decodable versions")]
    UnknownVersion { api_key: ApiKey, version: i16 },
    #[error("truncated at byte {at}")]
    Truncated { at: usize },
    #[error("negative length {len} at byte {at}")]
    NegativeLength { at: usize, len: i64 },
    #[error("length {len} at byte {at} exceeds the {remaining} bytes that remain")]
    LengthTooLarge {
        at: usize,
        len: u64,
        remaining: usize,
    },
    #[error("tagged field {tag} at byte {at} declares {declared} bytes but holds {actual}")]
    TaggedSizeMismatch {
        at: usize,
        tag: u32,
        declared: usize,
        actual: usize,
    },
}

/// Checks that `frame` (request header and body, no size prefix) can be decoded by
/// `kafka-protocol` without any allocation sized by an unchecked wire length. Returns the number of
/// bytes the header and body occupy; bytes after that are ignored by the decoder.
pub fn check_request(
    frame: &[u8],
    api_key: ApiKey,
    api_version: i16,
    header_version: i16,
) -> Result<usize, GuardError> {
    let layout = layout_of(api_key).ok_or(GuardError::UnknownApi { api_key })?;
    if !layout.versions.contains(api_version) {
        return Err(GuardError::UnknownVersion {
            api_key,
            version: api_version,
        });
    }
    let mut walker = Walker::new(frame, layout, api_version);
    walker.request_header(header_version)?;
    walker.value(&layout.body)?;
    Ok(walker.pos)
}

/// Checks a request body alone (no header) against `layout` at `version`; returns the bytes it
/// occupies.
pub fn check_body(body: &[u8], layout: &Layout, version: i16) -> Result<usize, GuardError> {
    let mut walker = Walker::new(body, layout, version);
    walker.value(&layout.body)?;
    Ok(walker.pos)
}

/// A read position in a frame plus what decides the encoding of every field.
struct Walker<'a> {
    frame: &'a [u8],
    pos: usize,
    version: i16,
    flexible: bool,
}

impl<'a> Walker<'a> {
    fn new(frame: &'a [u8], layout: &Layout, version: i16) -> Self {
        Walker {
            frame,
            pos: 0,
            version,
            flexible: layout.is_flexible(version),
        }
    }

    fn remaining(&self) -> usize {
        self.frame.len() - self.pos
    }

    /// RequestHeader v1/v2: api key, api version, correlation id, client id (always a classic
    /// nullable STRING, even in v2), then in v2 a tag section with no known tags.
    fn request_header(&mut self, header_version: i16) -> Result<(), GuardError> {
        self.skip(2 + 2 + 4)?;
        self.string(false)?;
        if header_version >= 2 {
            self.tag_section(&[])?;
        }
        Ok(())
    }

    fn value(&mut self, ty: &Ty) -> Result<(), GuardError> {
        match *ty {
            Ty::Fixed(len) => self.skip(len),
            Ty::String => self.string(self.flexible),
            Ty::Bytes => self.bytes(),
            Ty::Array(element) => self.array(element),
            Ty::Struct(fields) => self.structure(fields),
            Ty::OptionalStruct(fields) => {
                let [present] = self.take::<1>()?;
                if present as i8 == 1 {
                    self.structure(fields)
                } else {
                    Ok(())
                }
            }
        }
    }

    fn structure(&mut self, fields: &'static [Field]) -> Result<(), GuardError> {
        for field in fields {
            if field.tag.is_none() && field.versions.contains(self.version) {
                self.value(&field.ty)?;
            }
        }
        if self.flexible {
            self.tag_section(fields)?;
        }
        Ok(())
    }

    /// The tag section that ends a struct in flexible versions: a count, then per field its tag,
    /// its size and its value. `kafka-protocol` decodes a known tag's value from the stream without
    /// looking at the size, and keeps an unknown tag's bytes as a zero-copy slice.
    fn tag_section(&mut self, fields: &'static [Field]) -> Result<(), GuardError> {
        let count_at = self.pos;
        let count = self.unsigned_varint()?;
        // Each tagged field takes at least two bytes (tag and size).
        self.ensure_fits(count_at, u64::from(count) * 2)?;
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size_at = self.pos;
            let size = self.unsigned_varint()? as usize;
            self.ensure_fits(size_at, size as u64)?;
            let known = fields
                .iter()
                .find(|f| f.tag == Some(tag) && f.versions.contains(self.version));
            match known {
                Some(field) => {
                    let start = self.pos;
                    self.value(&field.ty)?;
                    let actual = self.pos - start;
                    if actual != size {
                        return Err(GuardError::TaggedSizeMismatch {
                            at: size_at,
                            tag,
                            declared: size,
                            actual,
                        });
                    }
                }
                None => self.skip(size)?,
            }
        }
        Ok(())
    }

    fn string(&mut self, compact: bool) -> Result<(), GuardError> {
        let at = self.pos;
        if compact {
            return self.compact_length(at).and_then(|len| self.skip_len(len));
        }
        match self.i16()? {
            -1 => Ok(()),
            len if len < 0 => Err(GuardError::NegativeLength {
                at,
                len: len.into(),
            }),
            len => self.checked_skip(at, len as u64),
        }
    }

    fn bytes(&mut self) -> Result<(), GuardError> {
        let at = self.pos;
        if self.flexible {
            return self.compact_length(at).and_then(|len| self.skip_len(len));
        }
        match self.i32()? {
            -1 => Ok(()),
            len if len < 0 => Err(GuardError::NegativeLength {
                at,
                len: len.into(),
            }),
            len => self.checked_skip(at, len as u64),
        }
    }

    fn array(&mut self, element: &'static Ty) -> Result<(), GuardError> {
        let at = self.pos;
        let count = if self.flexible {
            match self.compact_length(at)? {
                None => return Ok(()),
                Some(count) => count,
            }
        } else {
            match self.i32()? {
                -1 => return Ok(()),
                count if count < 0 => {
                    return Err(GuardError::NegativeLength {
                        at,
                        len: count.into(),
                    })
                }
                count => count as u64,
            }
        };
        // The decoder reserves `count` elements up front; each needs at least this many bytes.
        let element_bytes_min = self.min_wire_bytes(element).max(1) as u64;
        self.ensure_fits(at, count * element_bytes_min)?;
        for _ in 0..count {
            self.value(element)?;
        }
        Ok(())
    }

    /// The fewest bytes a value of `ty` can occupy at this version.
    fn min_wire_bytes(&self, ty: &Ty) -> usize {
        match *ty {
            Ty::Fixed(len) => len,
            Ty::String if self.flexible => 1,
            Ty::String => 2,
            Ty::Bytes | Ty::Array(_) if self.flexible => 1,
            Ty::Bytes | Ty::Array(_) => 4,
            Ty::OptionalStruct(_) => 1,
            Ty::Struct(fields) => {
                let present: usize = fields
                    .iter()
                    .filter(|f| f.tag.is_none() && f.versions.contains(self.version))
                    .map(|f| self.min_wire_bytes(&f.ty))
                    .sum();
                present + usize::from(self.flexible)
            }
        }
    }

    /// A compact length (unsigned varint holding length + 1, 0 meaning null). Returns the length,
    /// `None` for null, after checking it fits in what remains.
    fn compact_length(&mut self, at: usize) -> Result<Option<u64>, GuardError> {
        match self.unsigned_varint()? {
            0 => Ok(None),
            n => {
                let len = u64::from(n) - 1;
                self.ensure_fits(at, len)?;
                Ok(Some(len))
            }
        }
    }

    fn skip_len(&mut self, len: Option<u64>) -> Result<(), GuardError> {
        // `len` was checked against the remaining bytes, so it fits in usize.
        len.map_or(Ok(()), |len| self.skip(len as usize))
    }

    fn checked_skip(&mut self, at: usize, len: u64) -> Result<(), GuardError> {
        self.ensure_fits(at, len)?;
        self.skip(len as usize)
    }

    fn ensure_fits(&self, at: usize, len: u64) -> Result<(), GuardError> {
        let remaining = self.remaining();
        if len > remaining as u64 {
            return Err(GuardError::LengthTooLarge { at, len, remaining });
        }
        Ok(())
    }

    fn skip(&mut self, len: usize) -> Result<(), GuardError> {
        if len > self.remaining() {
            return Err(GuardError::Truncated { at: self.pos });
        }
        self.pos += len;
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], GuardError> {
        let at = self.pos;
        self.skip(N)?;
        Ok(self.frame[at..at + N]
            .try_into()
            .expect("slice of length N"))
    }

    fn i16(&mut self) -> Result<i16, GuardError> {
        self.take().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Result<i32, GuardError> {
        self.take().map(i32::from_be_bytes)
    }

    /// An unsigned varint read exactly as `kafka-protocol` reads it: at most five bytes, bits
    /// beyond 32 dropped, no error for a fifth byte with its continuation bit set.
    fn unsigned_varint(&mut self) -> Result<u32, GuardError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let [byte] = self.take::<1>()?;
            value |= u32::from(byte & 0x7f) << (i * 7);
            if byte < 0x80 {
                break;
            }
        }
        Ok(value)
    }
}
