//! The inter-broker client's response layouts (`client::response_layouts`) against
//! `kafka-protocol`, and response decoding under hostile input.
//!
//! 1. Round trip: for every API and version the client sends, a response with every field path
//!    populated (two elements per array, every known tagged field set, an unknown tag added) is
//!    built from the layout, walked by the guard to its last byte, decoded by `kafka-protocol`
//!    and re-encoded byte for byte. This ties the transcribed layouts to the crate.
//! 2. Hostile bodies: every truncation, every length prefix set to its largest value, and huge
//!    or negative values written over every offset are refused or decoded with allocation
//!    bounded by a small multiple of the body, measured by a counting allocator.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseKind;
use kafkaiq::client::response_layouts::{response_layout_of, RESPONSE_LAYOUTS};
use kafkaiq::client::wire::check_response_body;
use kafkaiq::protocol::guard::check_body;
use kafkaiq::protocol::layouts::{Layout, Ty};
use kafkaiq::protocol::ApiKey;

// ---- counting allocator (per thread, as in hostile_frames.rs) ---------------------------------

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// No decode here legitimately allocates this much at once; refusing it turns an unchecked
/// wire length into a failed test instead of a machine looking for 150 GB.
const ALLOCATION_BYTES_REFUSED: usize = 1 << 30;

fn note(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        if layout.size() >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        note(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        if layout.size() >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        note(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        note(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        if new_size >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        note(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn peak_while<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    let out = f();
    (out, (PEAK.with(Cell::get) - base).max(0) as usize)
}

/// As for requests (`hostile_frames.rs`): the crate reserves whole arrays, and an element in
/// memory is larger than its smallest wire form.
const PEAK_BYTES_PER_BODY_BYTE_MAX: usize = 64;
const PEAK_BYTES_OVERHEAD: usize = 16 * 1024;

/// What the client does with a response body: guard, then decode.
fn guarded_decode(api_key: ApiKey, version: i16, body: Bytes) -> Result<ResponseKind, String> {
    check_response_body(api_key, version, &body)?;
    let mut buf = body;
    ResponseKind::decode(api_key, &mut buf, version).map_err(|err| format!("{err:#}"))
}

fn decode_bounded(api_key: ApiKey, version: i16, body: Bytes, what: &dyn Fn() -> String) -> bool {
    let len = body.len();
    let (decoded, peak) = peak_while(|| guarded_decode(api_key, version, body).is_ok());
    assert!(
        peak <= PEAK_BYTES_OVERHEAD + PEAK_BYTES_PER_BODY_BYTE_MAX * len,
        "{}: peak {peak} bytes for a {len}-byte body",
        what()
    );
    decoded
}

// ---- populated bodies -------------------------------------------------------------------------

/// A tag no response schema defines; `kafka-protocol` keeps and re-encodes it.
const UNKNOWN_TAG: u32 = 1000;

/// A length prefix written directly into a body (not inside a tagged field): where, its width.
#[derive(Debug, Clone, Copy)]
struct Prefix {
    at: usize,
    /// 1 for compact (varint) prefixes, else 2 (string) or 4 (bytes, array).
    width: usize,
}

struct Populate {
    version: i16,
    flexible: bool,
    counter: u32,
    prefixes: Vec<Prefix>,
    /// Offset of the buffer being written within the body; `None` inside a tagged value.
    base: Option<usize>,
}

impl Populate {
    fn note(&mut self, out: &BytesMut, classic_width: usize) {
        if let Some(base) = self.base {
            let width = if self.flexible { 1 } else { classic_width };
            self.prefixes.push(Prefix {
                at: base + out.len(),
                width,
            });
        }
    }

    fn next(&mut self) -> u32 {
        self.counter += 1;
        self.counter
    }

    fn value(&mut self, out: &mut BytesMut, ty: &Ty) {
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
                self.note(out, 2);
                let s = format!("s{}", self.next());
                if self.flexible {
                    put_uvarint(out, s.len() as u32 + 1);
                } else {
                    out.put_i16(s.len() as i16);
                }
                out.put_slice(s.as_bytes());
            }
            Ty::Bytes => {
                self.note(out, 4);
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
                self.note(out, 4);
                if self.flexible {
                    put_uvarint(out, 3);
                } else {
                    out.put_i32(2);
                }
                self.value(out, element);
                self.value(out, element);
            }
            Ty::OptionalStruct(fields) => {
                // Present (1), then the struct.
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

fn put_uvarint(out: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        out.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn populated_body(layout: &Layout, version: i16) -> (Bytes, Vec<Prefix>) {
    let mut populate = Populate {
        version,
        flexible: layout.is_flexible(version),
        counter: 0,
        prefixes: Vec::new(),
        base: Some(0),
    };
    let mut body = BytesMut::new();
    populate.value(&mut body, &layout.body);
    (body.freeze(), populate.prefixes)
}

fn all_versions() -> impl Iterator<Item = (&'static Layout, i16)> {
    RESPONSE_LAYOUTS
        .iter()
        .flat_map(|layout| (layout.versions.min..=layout.versions.max).map(move |v| (layout, v)))
}

// ---- 1. the layouts match kafka-protocol ------------------------------------------------------

#[test]
fn every_response_version_round_trips_through_kafka_protocol() {
    let mut checked = 0;
    for (layout, version) in all_versions() {
        let what = format!("{:?} v{version}", layout.api_key);
        let (body, _) = populated_body(layout, version);
        assert_eq!(
            check_body(&body, layout, version),
            Ok(body.len()),
            "{what}: the guard must consume exactly the whole body"
        );
        let response = guarded_decode(layout.api_key, version, body.clone())
            .unwrap_or_else(|err| panic!("{what}: kafka-protocol rejects the body: {err}"));
        let mut encoded = BytesMut::new();
        response.encode(&mut encoded, version).unwrap();
        assert_eq!(
            &encoded[..],
            &body[..],
            "{what}: kafka-protocol re-encodes the response differently, so the layout differs"
        );
        checked += 1;
    }
    // 29 APIs; the sum of their version ranges.
    assert_eq!(checked, 125, "API versions covered");
}

#[test]
fn layouts_cover_the_crates_response_versions() {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::Message;
    let crate_versions = |api_key: ApiKey| match api_key {
        ApiKey::Produce => ProduceResponse::VERSIONS,
        ApiKey::Fetch => FetchResponse::VERSIONS,
        ApiKey::ListOffsets => ListOffsetsResponse::VERSIONS,
        ApiKey::Metadata => MetadataResponse::VERSIONS,
        ApiKey::ApiVersions => ApiVersionsResponse::VERSIONS,
        ApiKey::CreateTopics => CreateTopicsResponse::VERSIONS,
        ApiKey::DeleteTopics => DeleteTopicsResponse::VERSIONS,
        ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochResponse::VERSIONS,
        ApiKey::CreatePartitions => CreatePartitionsResponse::VERSIONS,
        ApiKey::DescribeConfigs => DescribeConfigsResponse::VERSIONS,
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsResponse::VERSIONS,
        ApiKey::ElectLeaders => ElectLeadersResponse::VERSIONS,
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsResponse::VERSIONS,
        ApiKey::DescribeCluster => DescribeClusterResponse::VERSIONS,
        ApiKey::AlterPartition => AlterPartitionResponse::VERSIONS,
        ApiKey::BrokerRegistration => BrokerRegistrationResponse::VERSIONS,
        ApiKey::BrokerHeartbeat => BrokerHeartbeatResponse::VERSIONS,
        ApiKey::UnregisterBroker => UnregisterBrokerResponse::VERSIONS,
        ApiKey::AllocateProducerIds => AllocateProducerIdsResponse::VERSIONS,
        ApiKey::WriteTxnMarkers => kafka_protocol::messages::WriteTxnMarkersResponse::VERSIONS,
        ApiKey::AddPartitionsToTxn => {
            kafka_protocol::messages::AddPartitionsToTxnResponse::VERSIONS
        }
        ApiKey::DescribeQuorum => DescribeQuorumResponse::VERSIONS,
        ApiKey::CreateAcls => CreateAclsResponse::VERSIONS,
        ApiKey::DeleteAcls => DeleteAclsResponse::VERSIONS,
        ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsResponse::VERSIONS,
        ApiKey::SaslHandshake => kafka_protocol::messages::SaslHandshakeResponse::VERSIONS,
        ApiKey::SaslAuthenticate => kafka_protocol::messages::SaslAuthenticateResponse::VERSIONS,
        ApiKey::AlterConfigs => AlterConfigsResponse::VERSIONS,
        ApiKey::Envelope => EnvelopeResponse::VERSIONS,
        other => panic!("{other:?} has a response layout but no entry here"),
    };
    for layout in RESPONSE_LAYOUTS {
        let versions = crate_versions(layout.api_key);
        assert_eq!(
            (layout.versions.min, layout.versions.max),
            (versions.min, versions.max),
            "{:?}",
            layout.api_key
        );
        assert_eq!(
            response_layout_of(layout.api_key).map(|found| found.api_key),
            Some(layout.api_key)
        );
    }
    assert!(response_layout_of(ApiKey::JoinGroup).is_none());
}

// ---- 2. hostile bodies ------------------------------------------------------------------------

#[test]
fn every_truncation_is_refused_with_bounded_allocation() {
    for (layout, version) in all_versions() {
        let (body, _) = populated_body(layout, version);
        for end in 0..body.len() {
            let decoded = decode_bounded(layout.api_key, version, body.slice(..end), &|| {
                format!("{:?} v{version} cut at {end}", layout.api_key)
            });
            assert!(
                !decoded,
                "{:?} v{version}: a prefix of {end} bytes decoded",
                layout.api_key
            );
        }
    }
}

#[test]
fn every_huge_length_prefix_is_refused_by_the_guard() {
    let mut refused = 0;
    for (layout, version) in all_versions() {
        let (body, prefixes) = populated_body(layout, version);
        for prefix in prefixes {
            let huge: &[u8] = match prefix.width {
                1 => &[0xff, 0xff, 0xff, 0xff, 0x0f],
                2 => &[0x7f, 0xff],
                _ => &[0x7f, 0xff, 0xff, 0xff],
            };
            let mut hostile = BytesMut::from(&body[..prefix.at]);
            hostile.put_slice(huge);
            hostile.put_slice(&body[prefix.at + prefix.width..]);
            let result = check_response_body(layout.api_key, version, &hostile);
            assert!(
                result.is_err(),
                "{:?} v{version} prefix at {}: accepted",
                layout.api_key,
                prefix.at
            );
            refused += 1;
        }
    }
    println!("{refused} huge length prefixes refused");
    assert!(refused > 500, "{refused}");
}

/// Values written over each byte offset: the largest int32, -1 and -2, int32::MIN, the largest
/// 5-byte unsigned varint, a huge 2-byte varint.
const HOSTILE_PATTERNS: &[&[u8]] = &[
    &[0x7f, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xfe],
    &[0x80, 0x00, 0x00, 0x00],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xff, 0x7f],
];

#[test]
fn huge_and_negative_values_at_every_offset_never_allocate_large() {
    let (mut bodies, mut refused) = (0usize, 0usize);
    for (layout, version) in all_versions() {
        let (body, _) = populated_body(layout, version);
        for at in 0..body.len() {
            for pattern in HOSTILE_PATTERNS {
                let mut hostile = body.to_vec();
                for (i, byte) in pattern.iter().enumerate() {
                    if let Some(slot) = hostile.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
                let decoded =
                    decode_bounded(layout.api_key, version, Bytes::from(hostile), &|| {
                        format!("{:?} v{version} {pattern:02x?} at {at}", layout.api_key)
                    });
                bodies += 1;
                refused += usize::from(!decoded);
            }
        }
    }
    println!("{bodies} hostile bodies, {refused} refused");
    // Responses are mostly fixed-width fields (offsets, epochs, error codes), which any value
    // fits; overwrites that land on a length or count are refused.
    assert!(refused * 3 > bodies, "{refused} of {bodies} refused");
}

/// The response twin of the 7-byte Metadata request: a broker count of 2^31 - 1 and nothing
/// behind it. Unguarded, `kafka-protocol` reserves 2^31 broker structs before noticing.
#[test]
fn a_metadata_response_claiming_two_billion_brokers_is_refused() {
    let body = Bytes::from_static(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0]);
    let (result, peak) = peak_while(|| guarded_decode(ApiKey::Metadata, 8, body));
    assert!(result.is_err());
    assert!(peak < PEAK_BYTES_OVERHEAD, "peak {peak}");
}
