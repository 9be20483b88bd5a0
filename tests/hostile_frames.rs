//! Request decoding under hostile input.
//!
//! 1. Round trip: for every API and version `decode_request` accepts, a request with every field
//!    path populated (two elements per array, every known tagged field set, an unknown tag added)
//!    is built from the layout DSL, decoded by `kafka-protocol`, re-encoded by `kafka-protocol`,
//!    and must come back byte for byte; the guard must accept it and consume exactly all bytes.
//!    This ties the hand-written layouts to the crate's real encoding.
//! 2. Hostile frames: every prefix of those frames, and every frame with a huge or negative value
//!    written over each byte offset, must decode to `Err` or `Ok` without panicking and without
//!    any allocation beyond a small multiple of the frame, measured by a counting allocator.
//! 3. The 7-byte Metadata body that makes unguarded `kafka-protocol` abort.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;

mod frames;
use frames::{all_versions, populated_frame, request_header};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::{Encodable, Message};
use kafkaiq::protocol::guard::{check_body, check_request};
use kafkaiq::protocol::layouts::LAYOUTS;
use kafkaiq::protocol::{decode_request, ApiKey, DecodeError, RequestKind, SUPPORTED_API_KEYS};

// ---- counting allocator -----------------------------------------------------------------------

/// Counts, per thread, the bytes currently allocated, their peak, and the largest single request,
/// so that tests running in parallel do not see each other's allocations.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// No test here legitimately allocates this much at once; a larger request means a wire length
/// reached an allocation unchecked. Refusing it aborts the test binary instead of the machine
/// trying to find 150 GB.
const ALLOCATION_BYTES_REFUSED: usize = 1 << 30;

fn note_alloc(size: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + size as isize;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

fn note_dealloc(size: usize) {
    let _ = LIVE.try_with(|live| live.set(live.get() - size as isize));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        if layout.size() >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        note_alloc(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        if layout.size() >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        note_alloc(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        note_dealloc(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        if new_size >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        note_dealloc(layout.size());
        note_alloc(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak bytes allocated and largest single allocation while running `f` on this thread.
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(base));
    LARGEST.with(|largest| largest.set(0));
    let out = f();
    let peak = (PEAK.with(Cell::get) - base).max(0) as usize;
    (out, peak, LARGEST.with(Cell::get))
}

/// What "a small multiple of the frame's size" means here. `kafka-protocol` reserves a whole
/// array before decoding it, and an in-memory element is larger than its smallest wire form
/// (a LeaveGroup v3 member: 4 bytes on the wire, ~120 in memory). The worst measured is ~29.
const PEAK_BYTES_PER_FRAME_BYTE_MAX: usize = 64;
/// Fixed overhead of a decode (error messages, empty maps) independent of the frame.
const PEAK_BYTES_OVERHEAD: usize = 16 * 1024;

fn peak_bytes_max(frame_len: usize) -> usize {
    PEAK_BYTES_OVERHEAD + PEAK_BYTES_PER_FRAME_BYTE_MAX * frame_len
}

// ---- 1. the layouts match kafka-protocol ------------------------------------------------------

#[test]
fn every_version_round_trips_through_kafka_protocol() {
    let mut checked = 0;
    for (layout, version) in all_versions() {
        let (frame, body_at) = populated_frame(layout, version);
        let what = format!("{:?} v{version}", layout.api_key);

        assert_eq!(
            check_request(
                &frame,
                layout.api_key,
                version,
                layout.api_key.request_header_version(version)
            ),
            Ok(frame.len()),
            "{what}: guard must consume exactly the whole frame"
        );
        assert_eq!(
            check_body(&frame[body_at..], layout, version),
            Ok(frame.len() - body_at),
            "{what}"
        );

        let request = decode_request(frame.clone())
            .unwrap_or_else(|err| panic!("{what}: kafka-protocol rejects the frame: {err}"));
        assert_eq!(request.api_key, layout.api_key);
        assert_eq!(request.api_version, version);
        assert_eq!(request.header.correlation_id, 0x0102_0304);

        let mut encoded = BytesMut::new();
        request
            .header
            .encode(&mut encoded, layout.api_key.request_header_version(version))
            .unwrap();
        request.body.encode(&mut encoded, version).unwrap();
        assert_eq!(
            &encoded[..],
            &frame[..],
            "{what}: kafka-protocol re-encodes the request differently, so the layout differs"
        );
        checked += 1;
    }
    // 57 APIs; the sum of their version ranges.
    assert_eq!(checked, 243, "API versions covered");
}

#[test]
fn layouts_cover_exactly_the_supported_apis_and_crate_versions() {
    let keys: Vec<ApiKey> = LAYOUTS.iter().map(|layout| layout.api_key).collect();
    assert_eq!(keys, SUPPORTED_API_KEYS);
    for layout in LAYOUTS {
        let versions = crate_request_versions(layout.api_key);
        assert_eq!(
            (layout.versions.min, layout.versions.max),
            (versions.min, versions.max),
            "{:?}",
            layout.api_key
        );
    }
}

fn crate_request_versions(api_key: ApiKey) -> kafka_protocol::protocol::VersionRange {
    use kafka_protocol::messages::*;
    match api_key {
        ApiKey::Produce => ProduceRequest::VERSIONS,
        ApiKey::Fetch => FetchRequest::VERSIONS,
        ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS,
        ApiKey::Metadata => MetadataRequest::VERSIONS,
        ApiKey::OffsetCommit => OffsetCommitRequest::VERSIONS,
        ApiKey::OffsetFetch => OffsetFetchRequest::VERSIONS,
        ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS,
        ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
        ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
        ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
        ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
        ApiKey::DescribeGroups => DescribeGroupsRequest::VERSIONS,
        ApiKey::ListGroups => ListGroupsRequest::VERSIONS,
        ApiKey::SaslHandshake => SaslHandshakeRequest::VERSIONS,
        ApiKey::ApiVersions => ApiVersionsRequest::VERSIONS,
        ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS,
        ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS,
        ApiKey::DeleteRecords => DeleteRecordsRequest::VERSIONS,
        ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS,
        ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::VERSIONS,
        ApiKey::DescribeAcls => DescribeAclsRequest::VERSIONS,
        ApiKey::CreateAcls => CreateAclsRequest::VERSIONS,
        ApiKey::DeleteAcls => DeleteAclsRequest::VERSIONS,
        ApiKey::DescribeConfigs => DescribeConfigsRequest::VERSIONS,
        ApiKey::AlterConfigs => AlterConfigsRequest::VERSIONS,
        ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS,
        ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS,
        ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS,
        ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS,
        ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::VERSIONS,
        ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::VERSIONS,
        ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS,
        ApiKey::DescribeCluster => DescribeClusterRequest::VERSIONS,
        ApiKey::DescribeProducers => DescribeProducersRequest::VERSIONS,
        ApiKey::AddPartitionsToTxn => kafka_protocol::messages::AddPartitionsToTxnRequest::VERSIONS,
        ApiKey::AddOffsetsToTxn => kafka_protocol::messages::AddOffsetsToTxnRequest::VERSIONS,
        ApiKey::EndTxn => kafka_protocol::messages::EndTxnRequest::VERSIONS,
        ApiKey::WriteTxnMarkers => kafka_protocol::messages::WriteTxnMarkersRequest::VERSIONS,
        ApiKey::TxnOffsetCommit => kafka_protocol::messages::TxnOffsetCommitRequest::VERSIONS,
        ApiKey::DescribeTransactions => {
            kafka_protocol::messages::DescribeTransactionsRequest::VERSIONS
        }
        ApiKey::ListTransactions => kafka_protocol::messages::ListTransactionsRequest::VERSIONS,
        ApiKey::AlterPartition => AlterPartitionRequest::VERSIONS,
        ApiKey::AlterReplicaLogDirs => {
            kafka_protocol::messages::AlterReplicaLogDirsRequest::VERSIONS
        }
        ApiKey::DescribeLogDirs => DescribeLogDirsRequest::VERSIONS,
        ApiKey::DescribeTopicPartitions => DescribeTopicPartitionsRequest::VERSIONS,
        ApiKey::BrokerRegistration => kafka_protocol::messages::BrokerRegistrationRequest::VERSIONS,
        ApiKey::BrokerHeartbeat => kafka_protocol::messages::BrokerHeartbeatRequest::VERSIONS,
        ApiKey::AllocateProducerIds => {
            kafka_protocol::messages::AllocateProducerIdsRequest::VERSIONS
        }
        ApiKey::DescribeQuorum => kafka_protocol::messages::DescribeQuorumRequest::VERSIONS,
        ApiKey::ListConfigResources => {
            kafka_protocol::messages::ListConfigResourcesRequest::VERSIONS
        }
        ApiKey::SaslAuthenticate => kafka_protocol::messages::SaslAuthenticateRequest::VERSIONS,
        ApiKey::ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest::VERSIONS,
        ApiKey::ConsumerGroupDescribe => ConsumerGroupDescribeRequest::VERSIONS,
        ApiKey::DescribeUserScramCredentials => DescribeUserScramCredentialsRequest::VERSIONS,
        ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::VERSIONS,
        ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsRequest::VERSIONS,
        ApiKey::Envelope => kafka_protocol::messages::EnvelopeRequest::VERSIONS,
        other => panic!("{other:?} has no layout"),
    }
}

// ---- 2. hostile frames ------------------------------------------------------------------------

/// Values written over each byte offset: the largest int32, -1 and -2 as int32, a negative int16
/// followed by zeros, the largest 5-byte unsigned varint, and a huge 2-byte varint.
const HOSTILE_PATTERNS: &[&[u8]] = &[
    &[0x7f, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xff],
    &[0xff, 0xff, 0xff, 0xfe],
    &[0x80, 0x00, 0x00, 0x00],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xff, 0x7f],
];

/// Decodes `frame` and checks allocation stays bounded; returns whether it decoded and the peak
/// bytes allocated per frame byte beyond the fixed overhead.
fn decode_bounded(frame: Bytes, what: &dyn Fn() -> String) -> (bool, f64) {
    let len = frame.len();
    let (result, peak, largest) = measure(|| decode_request(frame).is_ok());
    assert!(
        peak <= peak_bytes_max(len),
        "{}: peak {peak} bytes ({largest} largest) for a {len}-byte frame",
        what()
    );
    let ratio = peak.saturating_sub(PEAK_BYTES_OVERHEAD) as f64 / len.max(1) as f64;
    (result, ratio)
}

#[test]
fn every_truncation_is_rejected_with_bounded_allocation() {
    for (layout, version) in all_versions() {
        let (frame, _) = populated_frame(layout, version);
        for end in 0..frame.len() {
            let (decoded, _) = decode_bounded(frame.slice(..end), &|| {
                format!("{:?} v{version} cut at {end}", layout.api_key)
            });
            // Every field of a populated frame is needed, so no proper prefix of it decodes.
            assert!(
                !decoded,
                "{:?} v{version}: prefix of {end} bytes decoded",
                layout.api_key
            );
        }
    }
}

#[test]
fn huge_and_negative_values_at_every_offset_never_allocate_large() {
    let mut frames = 0usize;
    let mut rejected = 0usize;
    let mut worst_ratio = 0f64;
    for (layout, version) in all_versions() {
        let (frame, _) = populated_frame(layout, version);
        for at in 0..frame.len() {
            for pattern in HOSTILE_PATTERNS {
                let mut hostile = frame.to_vec();
                for (i, byte) in pattern.iter().enumerate() {
                    if let Some(slot) = hostile.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
                let (decoded, ratio) = decode_bounded(Bytes::from(hostile), &|| {
                    format!("{:?} v{version} {pattern:02x?} at {at}", layout.api_key)
                });
                worst_ratio = worst_ratio.max(ratio);
                frames += 1;
                rejected += usize::from(!decoded);
            }
        }
    }
    println!(
        "{frames} hostile frames, {rejected} rejected; worst peak beyond {PEAK_BYTES_OVERHEAD} \
         bytes overhead: {worst_ratio:.1} bytes per frame byte"
    );
    // Most overwrites land on a length or count and must be refused.
    assert!(rejected * 2 > frames, "{rejected} of {frames} rejected");
}

// ---- 3. regressions ---------------------------------------------------------------------------

/// Metadata v8 body: topics count 0x7fffffff, then three booleans. Unguarded `kafka-protocol`
/// reserves 2^31 topic structs (~154 GB) before noticing the bytes are missing, and the process
/// aborts.
#[test]
fn seven_byte_metadata_body_is_rejected() {
    let mut frame = request_header(ApiKey::Metadata, 8, 1);
    frame.put_slice(&[0x7f, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00]);
    let (result, peak, largest) = measure(|| decode_request(frame.freeze()));
    assert!(
        matches!(
            result,
            Err(DecodeError::Hostile {
                api_key: ApiKey::Metadata,
                version: 8,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(peak < PEAK_BYTES_OVERHEAD, "peak {peak}, largest {largest}");

    // The flexible form: a compact array count of 2^32 - 2.
    let mut frame = request_header(ApiKey::Metadata, 12, 1);
    frame.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x00, 0x00]);
    assert!(matches!(
        decode_request(frame.freeze()),
        Err(DecodeError::Hostile { .. })
    ));
}

/// The request header's client id is a length-prefixed string too.
#[test]
fn huge_client_id_is_rejected() {
    let mut frame = BytesMut::new();
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(3);
    frame.put_i32(9);
    frame.put_i16(i16::MAX);
    frame.put_slice(b"abc");
    assert!(matches!(
        decode_request(frame.freeze()),
        Err(DecodeError::Hostile { .. })
    ));
}

#[test]
fn unknown_tag_with_huge_size_is_rejected() {
    let mut frame = request_header(ApiKey::ApiVersions, 3, 9);
    frame.put_slice(&[1, 1]); // empty client software name and version (compact)
    frame.put_slice(&[1, 77, 0xff, 0xff, 0xff, 0xff, 0x0f]); // one tag, size 2^32 - 1
    assert!(matches!(
        decode_request(frame.freeze()),
        Err(DecodeError::Hostile { .. })
    ));
}

#[test]
fn produce_with_empty_records_decodes() {
    // records: Some(empty) must not be confused with null.
    let mut frame = request_header(ApiKey::Produce, 3, 5);
    frame.put_i16(-1); // transactional id null
    frame.put_i16(1); // acks
    frame.put_i32(1000); // timeout
    frame.put_i32(1); // one topic
    frame.put_i16(1);
    frame.put_slice(b"t");
    frame.put_i32(1); // one partition
    frame.put_i32(0);
    frame.put_i32(0); // empty records
    let request = decode_request(frame.freeze()).unwrap();
    let RequestKind::Produce(produce) = request.body else {
        panic!("not produce")
    };
    assert_eq!(
        produce.topic_data[0].partition_data[0].records.as_deref(),
        Some(&[][..])
    );
}

/// Counts that fit the frame still make `kafka-protocol` reserve whole arrays up front. Write a
/// count (4096 classic, 16384 compact) over each offset of a populated frame, append 16 KiB of
/// filler (zeros decode as empty strings and arrays in classic versions, ones in flexible
/// versions), and measure the peak against the frame size.
#[test]
fn counts_that_fit_allocate_a_small_multiple_of_the_frame() {
    const FILLER_BYTES: usize = 16 * 1024;
    let mut worst_ratio = 0f64;
    let mut worst = String::new();
    for (layout, version) in all_versions() {
        let (frame, _) = populated_frame(layout, version);
        let (count, filler): (&[u8], u8) = if layout.is_flexible(version) {
            (&[0x81, 0x80, 0x01], 0x01)
        } else {
            (&[0x00, 0x00, 0x10, 0x00], 0x00)
        };
        for at in 0..frame.len() {
            let mut big = frame.to_vec();
            for (i, byte) in count.iter().enumerate() {
                if let Some(slot) = big.get_mut(at + i) {
                    *slot = *byte;
                }
            }
            big.resize(big.len() + FILLER_BYTES, filler);
            let what = || format!("{:?} v{version} count at {at}", layout.api_key);
            let (_, ratio) = decode_bounded(Bytes::from(big), &what);
            if ratio > worst_ratio {
                worst_ratio = ratio;
                worst = what();
            }
        }
    }
    println!("worst peak: {worst_ratio:.1} bytes per frame byte ({worst})");
}

// ---- 4. random input ----------------------------------------------------------------------------

mod random {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Arbitrary bytes never panic and never allocate large.
        #[test]
        fn random_bytes_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..512)) {
            decode_bounded(Bytes::from(frame), &|| "random bytes".to_string());
        }

        /// A valid header for a random supported API and version, then arbitrary body bytes.
        #[test]
        fn random_bodies_never_panic(
            which in any::<prop::sample::Index>(),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let (layout, version) = all_versions().nth(which.index(179)).unwrap();
            let mut frame = request_header(layout.api_key, version, 1);
            frame.put_slice(&body);
            decode_bounded(frame.freeze(), &|| format!("{:?} v{version}", layout.api_key));
        }

        /// A populated frame with a few random bytes replaced.
        #[test]
        fn mutated_frames_never_panic(
            which in any::<prop::sample::Index>(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ) {
            let (layout, version) = all_versions().nth(which.index(179)).unwrap();
            let (frame, _) = populated_frame(layout, version);
            let mut mutated = frame.to_vec();
            for (at, byte) in edits {
                let at = at.index(mutated.len());
                mutated[at] = byte;
            }
            decode_bounded(Bytes::from(mutated), &|| format!("{:?} v{version}", layout.api_key));
        }
    }
}

/// Every length prefix of every API version, set to the largest value its encoding holds, is
/// refused by the guard before `kafka-protocol` sees it.
#[test]
fn every_huge_length_prefix_is_refused_by_the_guard() {
    let mut refused = 0;
    for (layout, version) in all_versions() {
        let (frame, _, prefixes) = frames::populated_frame_with_prefixes(layout, version);
        for prefix in prefixes {
            let hostile = frames::with_huge_prefix(&frame, prefix);
            let result = decode_request(hostile);
            assert!(
                matches!(result, Err(DecodeError::Hostile { .. })),
                "{:?} v{version} {prefix:?}: {result:?}",
                layout.api_key
            );
            refused += 1;
        }
    }
    println!("{refused} huge length prefixes refused");
    // Every API version has at least the header's client id; most have many more.
    assert!(refused > 1000, "{refused}");
}
