//! Hostile frames sent over TCP to the real `kafkaiq` binary.
//!
//! For every API version the broker decodes, every length prefix of a populated request (the
//! header's client id, every string, bytes, records and array count) is set to the largest value
//! its encoding holds and the frame is sent on its own connection; the 7-byte Metadata body and
//! absurd size prefixes follow. The broker must close each such connection (as Kafka does on a
//! request it cannot parse), stay up, keep serving a client that was connected all along, and
//! serve a new one.
//!
//! `BROKER_UNDER_TEST=apache-kafka` runs the same checks against Apache Kafka 4.1.1 (to check
//! the test itself), `KAFKA_BOOTSTRAP=host:port` against an already running broker. A started
//! broker that panicked on any of the frames, exits uncleanly or ignores SIGTERM fails the test.

mod common;
mod frames;

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

/// Waits for the broker to close `stream`; panics if it answers or keeps it open.
fn expect_closed(stream: &mut TcpStream, what: &dyn Fn() -> String) {
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => panic!("{}: broker answered {n} bytes instead of closing", what()),
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => panic!("{}: connection not closed: {e}", what()),
        }
    }
}

fn send_hostile(broker: &mut BrokerUnderTest, bytes: &[u8], what: &dyn Fn() -> String) {
    let mut stream = broker.connect();
    // The broker may close before reading everything; a failed write is fine.
    let _ = stream.write_all(bytes);
    expect_closed(&mut stream, what);
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
    for (layout, version) in all_versions() {
        let (frame, _, prefixes) = populated_frame_with_prefixes(layout, version);
        for prefix in prefixes {
            let hostile = with_huge_prefix(&frame, prefix);
            send_hostile(&mut broker, &size_prefixed(&hostile), &|| {
                format!("{:?} v{version} huge {prefix:?}", layout.api_key)
            });
            sent += 1;
        }
        broker.assert_running();
    }
    assert!(sent > 1000, "{sent} hostile frames");

    // Metadata v8 claiming 2^31 - 1 topics in a 7-byte body.
    let mut frame = request_header(ApiKey::Metadata, 8, 7);
    frame.put_slice(&[0x7f, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00]);
    send_hostile(&mut broker, &size_prefixed(&frame), &|| {
        "7-byte Metadata body".into()
    });

    // Absurd size prefixes: the largest and a negative one.
    for size in [i32::MAX, -1, i32::MIN] {
        let mut bytes = BytesMut::new();
        bytes.put_i32(size);
        bytes.put_slice(&[0, 3, 0, 8, 0, 0, 0, 1]);
        send_hostile(&mut broker, &bytes, &|| format!("size prefix {size}"));
    }

    // A good request pipelined before a hostile one is still answered, then the connection closes.
    let mut stream = broker.connect();
    let mut bytes = size_prefixed(&api_versions_request(2));
    let mut hostile = request_header(ApiKey::Metadata, 8, 3);
    hostile.put_slice(&[0x7f, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00]);
    bytes.extend_from_slice(&size_prefixed(&hostile));
    stream.write_all(&bytes).unwrap();
    expect_api_versions_response(&mut stream, 2, "pipelined before hostile");
    expect_closed(&mut stream, &|| "pipelined hostile frame".into());

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
