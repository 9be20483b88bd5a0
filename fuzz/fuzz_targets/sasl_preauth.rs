//! Fuzzes what a SASL listener reads before authentication: no run of frames may panic the
//! connection's `Authenticator` (SaslHandshake v0-v1, SaslAuthenticate v0-v2, the raw tokens
//! after a v0 handshake, PLAIN and SCRAM messages) or make it allocate large
//! ([`bounded_alloc`]). The connection bounds each frame by `sasl.server.max.receive.size`
//! before the authenticator sees it; libFuzzer's `-max_len` stands in for that bound here.
//!
//! Inputs whose first byte is even are raw frames, each a `u16` length and the frame as the
//! connection hands it over (after its size prefix). Otherwise the second byte picks the
//! mechanism the handshake names and the versions, and the rest, cut at each 0xFF byte, are
//! the client's tokens, sent in well-formed SaslAuthenticate requests (or raw after a v0
//! handshake), so that mutations spend their time inside the PLAIN and SCRAM messages.
//!
//! The listener enables PLAIN and both SCRAM mechanisms; `alice` has every credential from the
//! config, `bob` a SCRAM-SHA-256 credential from the metadata log, `carol`'s was removed there.

#![no_main]

#[path = "bounded_alloc.rs"]
mod bounded_alloc;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use bytes::{BufMut, Bytes, BytesMut};
use kafkaiq::config::security::SaslSettings;
use kafkaiq::config::{BrokerConfig, RawConfig};
use kafkaiq::metadata::scram::ScramMechanism;
use kafkaiq::scram::{ScramCredential, ScramHash};
use kafkaiq::server::sasl::{Authenticator, ScramCredentialsLookup, Step, StoredCredential};
use libfuzzer_sys::fuzz_target;

const CONFIG: &str = "listeners=SASL_PLAINTEXT://127.0.0.1:9092
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-secret\";
kafkaiq.sasl.scram.users=alice:alice-secret
";

const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;

fn settings() -> Arc<SaslSettings> {
    static SETTINGS: OnceLock<Arc<SaslSettings>> = OnceLock::new();
    SETTINGS
        .get_or_init(|| {
            let raw = RawConfig::parse(CONFIG, Path::new("fuzz.properties")).expect("parses");
            let validated = BrokerConfig::from_raw(raw).expect("a valid SASL config");
            validated.config.client_listeners[0]
                .security
                .sasl
                .clone()
                .expect("a SASL listener")
        })
        .clone()
}

fn stored() -> ScramCredentialsLookup {
    static BOB: OnceLock<ScramCredential> = OnceLock::new();
    let bob = BOB
        .get_or_init(|| {
            ScramCredential::new(ScramHash::Sha256, "bob-secret", b"salt".to_vec(), 4096)
        })
        .clone();
    Arc::new(move |mechanism, user| match (user, mechanism) {
        ("bob", ScramMechanism::Sha256) => StoredCredential::Set(bob.clone()),
        ("carol", _) => StoredCredential::Removed,
        _ => StoredCredential::Absent,
    })
}

fuzz_target!(|data: &[u8]| {
    let frames = match data {
        [mode, rest @ ..] if mode % 2 == 0 => raw_frames(rest),
        [_, pick, rest @ ..] => exchange(*pick, rest),
        _ => return,
    };
    let mut auth = Authenticator::new(settings(), Some(stored()));
    for frame in frames {
        match auth.handle(frame) {
            Step::Dispatch | Step::Reply(_) => {}
            // The connection closes, or dispatches as the principal from here on.
            Step::Fail { .. } | Step::Close(_) | Step::Authenticated { .. } => return,
        }
    }
});

/// `u16` length-prefixed frames; a last one cut short is taken as it is.
fn raw_frames(mut rest: &[u8]) -> Vec<Bytes> {
    let mut frames = Vec::new();
    while let [hi, lo, tail @ ..] = rest {
        let n = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
        frames.push(Bytes::copy_from_slice(&tail[..n]));
        rest = &tail[n..];
    }
    frames
}

/// A handshake naming the mechanism `pick` gives, then each token in its own frame.
fn exchange(pick: u8, tokens: &[u8]) -> Vec<Bytes> {
    let mechanism = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"][usize::from(pick & 3)];
    let handshake_version = i16::from((pick >> 2) & 1);
    let authenticate_version = i16::from((pick >> 3) & 3).min(2);
    let mut frames = Vec::new();
    let mut body = BytesMut::new();
    put_string(&mut body, mechanism);
    frames.push(request(SASL_HANDSHAKE, handshake_version, 1, &body));
    for (i, token) in tokens.split(|&b| b == 0xFF).enumerate() {
        if handshake_version == 0 {
            // After a v0 handshake the tokens travel without Kafka framing.
            frames.push(Bytes::copy_from_slice(token));
            continue;
        }
        let mut body = BytesMut::new();
        if authenticate_version >= 2 {
            put_uvarint(&mut body, token.len() as u64 + 1);
            body.put_slice(token);
            body.put_u8(0); // no tagged fields
        } else {
            body.put_i32(token.len() as i32);
            body.put_slice(token);
        }
        frames.push(request(
            SASL_AUTHENTICATE,
            authenticate_version,
            2 + i as i32,
            &body,
        ));
    }
    frames
}

/// A request frame: header (v2, with tagged fields, for SaslAuthenticate v2), then `body`.
fn request(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(api_key);
    out.put_i16(version);
    out.put_i32(correlation_id);
    put_string(&mut out, "fuzz");
    if api_key == SASL_AUTHENTICATE && version >= 2 {
        out.put_u8(0);
    }
    out.put_slice(body);
    out.freeze()
}

fn put_string(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

fn put_uvarint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}
