//! Hostile frames sent over TCP to the real `kafkaiq` binary.
//!
//! For every API version the broker decodes, every length prefix of a populated request (the
//! header's client id, every string, bytes, records and array count) is set to the largest value
//! its encoding holds and the frame is sent on its own connection; the 7-byte Metadata body and
//! absurd size prefixes follow. The broker must close each such connection (as Kafka does on a
//! request it cannot parse) or, where the huge value reads as a valid request, answer it with
//! one whole response frame for its correlation id (Kafka reads an unsigned varint above
//! i32::MAX as a negative int, so a nullable compact array of that "length" is null: it answers
//! Metadata v9 with such a topics array). It must stay up, keep serving a client that was
//! connected all along, and serve a new one; the 7-byte body and the absurd size prefixes must
//! be met with a closed connection.
//!
//! `BROKER_UNDER_TEST=apache-kafka` runs the same checks against Apache Kafka 4.1.1 (to check
//! the test itself), `KAFKA_BOOTSTRAP=host:port` against an already running broker. A started
//! broker that panicked on any of the frames, exits uncleanly or ignores SIGTERM fails the test.

use crate::common;
use crate::frames;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::broker_process::{start_selected_logging, SelectedBroker};

use bytes::{BufMut, Bytes, BytesMut};
use frames::{all_versions, populated_frame_with_prefixes, request_header, with_huge_prefix};
use kafkaiq::protocol::ApiKey;

/// How long the broker may take to close a connection after a hostile frame.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

struct BrokerUnderTest {
    addr: SocketAddr,
    selected: SelectedBroker,
}

impl BrokerUnderTest {
    fn start() -> Self {
        let selected = start_selected_logging("kafkaiq-hostile", &[], "warn");
        let addr = selected
            .bootstrap
            .parse()
            .expect("KAFKA_BOOTSTRAP is host:port");
        BrokerUnderTest { addr, selected }
    }

    fn assert_running(&mut self) {
        if let Some(p) = self.selected.process.as_mut() {
            p.assert_running();
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(CLOSE_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// SIGTERM: the broker must exit cleanly and in time, with no panic in its output.
    fn stop(mut self) {
        self.selected.stop().unwrap_or_else(|e| panic!("{e}"));
    }
}

fn size_prefixed(frame: &[u8]) -> Vec<u8> {
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(frame);
    out
}

/// An ApiVersions v3 request frame (no size prefix).
fn api_versions_request(correlation_id: i32) -> Bytes {
    let mut frame = request_header(ApiKey::ApiVersions, 3, correlation_id);
    frame.put_u8(5); // client_software_name "test" (compact)
    frame.put_slice(b"test");
    frame.put_u8(4); // client_software_version "1.0"
    frame.put_slice(b"1.0");
    frame.put_u8(0); // no tagged fields
    frame.freeze()
}

/// Reads one response frame and checks it answers ApiVersions with `correlation_id` and no error.
fn expect_api_versions_response(stream: &mut TcpStream, correlation_id: i32, what: &str) {
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).unwrap();
    assert_eq!(&body[..4], &correlation_id.to_be_bytes(), "{what}");
    // v0 response header, then error_code.
    assert_eq!(&body[4..6], &[0, 0], "{what}: error code");
}

/// What the broker did with a hostile frame.
#[derive(Debug, PartialEq)]
enum Met {
    /// Closed the connection without answering: what either broker does with a request it
    /// cannot parse.
    Closed,
    /// Answered it with one whole response frame for its correlation id. Apache Kafka does this
    /// where its reader takes the huge value as something valid: an unsigned varint above
    /// i32::MAX wraps negative in Java, and a nullable compact array or string of negative
    /// length is null (Metadata v9's topics, for one).
    Answered,
}

/// Reads what the broker does after a hostile frame with `correlation_id`: it must close the
/// connection, or answer with one whole response frame for that correlation id (then the test
/// hangs up). Err if it answers anything else, or neither answers nor closes within
/// CLOSE_TIMEOUT.
fn expect_closed_or_answered(stream: &mut TcpStream, correlation_id: i32) -> Result<Met, String> {
    let mut size = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match stream.read(&mut size[got..]) {
            Ok(0) if got == 0 => return Ok(Met::Closed),
            Ok(0) => return Err(format!("{got} bytes of a size prefix, then closed")),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return if got == 0 {
                    Ok(Met::Closed)
                } else {
                    Err(format!("{got} bytes of a size prefix, then reset"))
                };
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("neither answered nor closed: {e}")),
        }
    }
    let size = i32::from_be_bytes(size);
    if !(4..=1 << 20).contains(&size) {
        return Err(format!("answered with a frame size of {size}"));
    }
    let mut body = vec![0u8; size as usize];
    stream
        .read_exact(&mut body)
        .map_err(|e| format!("answered a {size}-byte frame, cut short: {e}"))?;
    let answered_id = i32::from_be_bytes(body[..4].try_into().unwrap());
    if answered_id != correlation_id {
        return Err(format!(
            "answered correlation id {answered_id}, not {correlation_id}"
        ));
    }
    Ok(Met::Answered)
}

/// Sends `frame` (no size prefix; bytes 4..8 are its correlation id) on a new connection.
fn send_hostile(broker: &mut BrokerUnderTest, frame: &[u8]) -> Result<Met, String> {
    let mut stream = broker.connect();
    // The broker may close before reading everything; a failed write is fine.
    let _ = stream.write_all(&size_prefixed(frame));
    let correlation_id = i32::from_be_bytes(frame[4..8].try_into().unwrap());
    expect_closed_or_answered(&mut stream, correlation_id)
}

/// Waits for the broker to close `stream` without answering anything.
fn expect_closed(stream: &mut TcpStream) -> Result<(), String> {
    // Matches no request sent here, so any answer is an error.
    match expect_closed_or_answered(stream, i32::MIN) {
        Ok(Met::Closed) => Ok(()),
        Ok(Met::Answered) => Err("answered instead of closing".into()),
        Err(e) => Err(e),
    }
}

#[test]
fn hostile_frames_close_the_connection_and_the_broker_keeps_serving() {
    let mut broker = BrokerUnderTest::start();

    // A client connected before the attack and still served after it.
    let mut bystander = broker.connect();
    bystander
        .write_all(&size_prefixed(&api_versions_request(1)))
        .unwrap();
    expect_api_versions_response(&mut bystander, 1, "bystander before");

    let mut sent = 0;
    let mut failures = Vec::new();
    let mut answered = Vec::new();
    for (layout, version) in all_versions() {
        let (frame, _, prefixes) = populated_frame_with_prefixes(layout, version);
        for prefix in prefixes {
            let hostile = with_huge_prefix(&frame, prefix);
            let what = format!("{:?} v{version} huge {prefix:?}", layout.api_key);
            match send_hostile(&mut broker, &hostile) {
                Ok(Met::Closed) => {}
                Ok(Met::Answered) => answered.push(what),
                Err(e) => failures.push(format!("{what}: {e}")),
            }
            sent += 1;
        }
        broker.assert_running();
    }
    assert!(sent > 1000, "{sent} hostile frames");
    eprintln!(
        "{} of {sent} hostile frames answered as valid requests, the rest closed: {answered:?}",
        answered.len()
    );

    // Metadata v8 claiming 2^31 - 1 topics in a 7-byte body.
    let mut frame = request_header(ApiKey::Metadata, 8, 7);
    frame.put_slice(&[0x7f, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00]);
    let mut stream = broker.connect();
    let _ = stream.write_all(&size_prefixed(&frame));
    if let Err(e) = expect_closed(&mut stream) {
        failures.push(format!("7-byte Metadata body: {e}"));
    }

    // Absurd size prefixes: the largest and a negative one.
    for size in [i32::MAX, -1, i32::MIN] {
        let mut bytes = BytesMut::new();
        bytes.put_i32(size);
        bytes.put_slice(&[0, 3, 0, 8, 0, 0, 0, 1]);
        let mut stream = broker.connect();
        let _ = stream.write_all(&bytes);
        if let Err(e) = expect_closed(&mut stream) {
            failures.push(format!("size prefix {size}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} hostile frames were met with neither a closed connection nor one whole answer:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );

    // A good request pipelined before a hostile one is still answered, then the connection closes.
    let mut stream = broker.connect();
    let mut bytes = size_prefixed(&api_versions_request(2));
    let mut hostile = request_header(ApiKey::Metadata, 8, 3);
    hostile.put_slice(&[0x7f, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00]);
    bytes.extend_from_slice(&size_prefixed(&hostile));
    stream.write_all(&bytes).unwrap();
    expect_api_versions_response(&mut stream, 2, "pipelined before hostile");
    if let Err(e) = expect_closed(&mut stream) {
        panic!("pipelined hostile frame: {e}");
    }

    broker.assert_running();
    bystander
        .write_all(&size_prefixed(&api_versions_request(4)))
        .unwrap();
    expect_api_versions_response(&mut bystander, 4, "bystander after");
    let mut fresh = broker.connect();
    fresh
        .write_all(&size_prefixed(&api_versions_request(5)))
        .unwrap();
    expect_api_versions_response(&mut fresh, 5, "new client after");
    broker.assert_running();
    broker.stop();
}
