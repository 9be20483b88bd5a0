//! TLS and SASL on a client connection, for a destination whose listener is SSL, SASL_PLAINTEXT
//! or SASL_SSL ([`crate::security::ClientSecurity`]).
//!
//! A connection opens as Kafka's broker opens its inter-broker channel: TCP, then the TLS
//! handshake (SSL, SASL_SSL), then ApiVersions, then SaslHandshake v1 naming the mechanism and
//! SaslAuthenticate v2 carrying its tokens (PLAIN: one; SCRAM: two, RFC 5802, the server's
//! signature checked). Until all of that has succeeded the connection is not ready: a failure is
//! a failed connection attempt, retried after the reconnect backoff.
//!
//! [`open`] does the same on a connected socket for the controller listener's own frames (Raft
//! messages between voters, a broker-only node's metadata log fetch), which are not requests of
//! a [`super::Client`]: one mechanism for every secured connection this node opens.
//!
//! KIP-368: when the server gives the session an end (`session_lifetime_ms`), the connection's
//! owner authenticates again on the same connection before it ([`renewal_due`],
//! [`reauthenticate`]), as Kafka's clients do. The connection stays open, so a server that reads
//! its close as the end of this node (the controller fencing a broker, a voter losing the quorum
//! leader) never sees one.
//!
//! The stream is an enum rather than a boxed trait object so that a PLAINTEXT connection keeps
//! tokio's owned TCP halves (no lock, no indirection per read); a TLS stream is split with
//! `tokio::io::split`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::Bytes;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::wire::{decode_body, encode_request, read_body, read_size, split_response, EncodeFn};
use super::Endpoint;
use crate::protocol::ApiKey;
use crate::scram::{ScramHash, SCRAM_ITERATIONS};
use crate::security::Mechanism;
use crate::security::{ClientSecurity, SaslCredentials};

/// The bound of a SASL response frame.
const SASL_RESPONSE_BYTES_MAX: usize = 64 * 1024;

/// A connection's stream: plain TCP or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(tcp) => {
                let (r, w) = tcp.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Stream::Tls(tls) => {
                let (r, w) = tokio::io::split(*tls);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }
}

pub enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<TlsStream<TcpStream>>),
}

pub enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<TlsStream<TcpStream>>),
}

/// Forwards `AsyncRead` to whichever variant is open.
macro_rules! forward_read {
    ($ty:ident, $plain:path, $tls:path) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $plain(s) => Pin::new(s).poll_read(cx, buf),
                    $tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

forward_read!(Stream, Stream::Plain, Stream::Tls);
forward_read!(ReadHalf, ReadHalf::Plain, ReadHalf::Tls);

/// Forwards the three `AsyncWrite` calls to whichever variant is open.
macro_rules! forward_write {
    ($ty:ident, $plain:path, $tls:path) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    $plain(s) => Pin::new(s).poll_write(cx, buf),
                    $tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $plain(s) => Pin::new(s).poll_flush(cx),
                    $tls(s) => Pin::new(s).poll_flush(cx),
                }
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    $plain(s) => Pin::new(s).poll_shutdown(cx),
                    $tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
        }
    };
}

forward_write!(Stream, Stream::Plain, Stream::Tls);
forward_write!(WriteHalf, WriteHalf::Plain, WriteHalf::Tls);

/// Secures a connected socket to `endpoint` as `security` says: the TLS handshake (SSL,
/// SASL_SSL), then SaslHandshake v1 and SaslAuthenticate v2 (SASL_PLAINTEXT, SASL_SSL); the
/// stream as it was for PLAINTEXT. The caller bounds it in time. An error says which step
/// failed, never a password. With the stream, when its session must be renewed
/// ([`renewal_due`], [`reauthenticate`]) and the next correlation id.
pub async fn open(
    tcp: TcpStream,
    endpoint: &Endpoint,
    security: Option<&ClientSecurity>,
    client_id: &str,
) -> Result<(Stream, Option<Instant>, i32), String> {
    let mut stream = start_tls(tcp, endpoint, security).await?;
    let mut renew_at = None;
    let mut correlation_id = 0;
    if let Some(credentials) = security.and_then(|s| s.sasl.as_ref()) {
        let client_id = StrBytes::from_string(client_id.to_owned());
        let mut exchange = Direct {
            stream: &mut stream,
            client_id: &client_id,
            correlation_id: &mut correlation_id,
        };
        renew_at = reauthenticate(&mut exchange, credentials)
            .await
            .map_err(|reason| {
                format!(
                    "SASL authentication failed ({} as {}): {reason}",
                    credentials.mechanism.name(),
                    credentials.username
                )
            })?;
    }
    Ok((stream, renew_at, correlation_id))
}

/// Authenticates with `credentials` through `exchange`, on a new connection or again on one
/// whose session is ending (KIP-368, as Kafka's clients re-authenticate: same connection, a
/// new SaslHandshake and SaslAuthenticate exchange while nothing else is in flight); gives when
/// the new session must be renewed. An error says which step failed, never a password.
pub async fn reauthenticate<E: Exchange>(
    exchange: &mut E,
    credentials: &SaslCredentials,
) -> Result<Option<Instant>, String> {
    let started = Instant::now();
    let lifetime = authenticate(exchange, credentials).await?;
    Ok(renewal_due(started, lifetime))
}

/// One request and its response on a connection: how a SASL exchange reaches the server.
/// [`Direct`] reads and writes a stream in turn; the inter-broker client's connections go
/// through their response reader instead (`destination`).
pub trait Exchange {
    fn round_trip(
        &mut self,
        api_key: ApiKey,
        version: i16,
        encode: EncodeFn,
        bytes_max: usize,
    ) -> impl std::future::Future<Output = Result<Bytes, String>> + Send;
}

/// A stream its owner writes and then reads ([`round_trip`]), with the connection's
/// correlation ids.
pub struct Direct<'a, S> {
    pub stream: &'a mut S,
    pub client_id: &'a StrBytes,
    pub correlation_id: &'a mut i32,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Exchange for Direct<'_, S> {
    fn round_trip(
        &mut self,
        api_key: ApiKey,
        version: i16,
        encode: EncodeFn,
        bytes_max: usize,
    ) -> impl std::future::Future<Output = Result<Bytes, String>> + Send {
        round_trip(
            &mut *self.stream,
            self.client_id,
            &mut *self.correlation_id,
            api_key,
            version,
            encode,
            bytes_max,
        )
    }
}

/// KIP-368: when a connection whose SASL session lasts `lifetime` (the SaslAuthenticate answer's
/// `session_lifetime_ms`; None when the server set no end) and began at `started` must be
/// replaced: at a random point between 85% and 95% of its lifetime, as Kafka's clients pick the
/// moment to re-authenticate, so that a server closing it at the end (`connections.max.reauth.ms`
/// or the credential's expiry) never finds a request on it. The owner stops writing requests to
/// the connection once this passes, lets what is in flight finish, and authenticates again on
/// it ([`reauthenticate`]).
pub fn renewal_due(started: Instant, lifetime: Option<Duration>) -> Option<Instant> {
    let lifetime = lifetime?;
    let jitter = u64::from(rand_u8()) % 100; // 0..99: 85.00% .. 94.90%
    let share = 8500 + jitter * 10;
    let millis = (lifetime.as_millis() as u64).saturating_mul(share) / 10_000;
    started.checked_add(Duration::from_millis(millis))
}

/// A random byte, for spreading renewals (not secret).
fn rand_u8() -> u8 {
    let mut byte = [0u8; 1];
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut byte);
    byte[0]
}

/// The TLS handshake over a connected socket, when the destination's listener is TLS.
pub(super) async fn start_tls(
    tcp: TcpStream,
    endpoint: &Endpoint,
    security: Option<&ClientSecurity>,
) -> Result<Stream, String> {
    let Some(tls) = security.and_then(|s| s.tls.as_ref().map(|t| t.current())) else {
        return Ok(Stream::Plain(tcp));
    };
    let name = ServerName::try_from(endpoint.host.clone())
        .map_err(|e| format!("TLS: {} is not a host name: {e}", endpoint.host))?;
    TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map(|s| Stream::Tls(Box::new(s)))
        .map_err(|e| format!("TLS handshake failed: {e}"))
}

/// One request and its response on a connection being opened (ApiVersions, the SASL exchange):
/// the frame written, the response read within `bytes_max`, its correlation id checked and the
/// id advanced; gives the response body.
pub(super) async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    client_id: &StrBytes,
    correlation_id: &mut i32,
    api_key: ApiKey,
    version: i16,
    encode: EncodeFn,
    bytes_max: usize,
) -> Result<Bytes, String> {
    let (frame, _) = encode_request(api_key, version, *correlation_id, client_id, encode)
        .map_err(|err| format!("{err:#}"))?;
    stream
        .write_all(&frame)
        .await
        .map_err(|err| err.to_string())?;
    stream.flush().await.map_err(|err| err.to_string())?;
    let size = match read_size(stream).await {
        Ok(Some(size)) => size,
        Ok(None) => return Err(format!("closed by the peer during {api_key:?}")),
        Err(err) => return Err(err.to_string()),
    };
    if size < 0 || size as usize > bytes_max {
        return Err(format!("{api_key:?} response frame of {size} bytes"));
    }
    let frame = read_body(stream, size as usize)
        .await
        .map_err(|err| err.to_string())?;
    let (received, body) = split_response(frame, api_key, version)?;
    if received != *correlation_id {
        return Err(format!(
            "{api_key:?} response correlation id {received} where {correlation_id} was expected"
        ));
    }
    *correlation_id = correlation_id.wrapping_add(1);
    Ok(body)
}

/// Authenticates with `credentials` over a connection whose versions are negotiated; gives the
/// session's lifetime when the server set one (KIP-368's `session_lifetime_ms`).
async fn authenticate<E: Exchange>(
    exchange: &mut E,
    credentials: &SaslCredentials,
) -> Result<Option<Duration>, String> {
    const HANDSHAKE_VERSION: i16 = 1;
    const AUTHENTICATE_VERSION: i16 = 2;
    let mechanism = credentials.mechanism.name();
    let request =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let response: SaslHandshakeResponse =
        call(exchange, ApiKey::SaslHandshake, HANDSHAKE_VERSION, request).await?;
    if response.error_code != 0 {
        let offered: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(format!(
            "the listener does not enable {mechanism} (error {}; it offers {})",
            response.error_code,
            offered.join(", ")
        ));
    }
    let mut scram = match credentials.mechanism {
        Mechanism::Plain => None,
        Mechanism::ScramSha256 => Some(ScramClient::new(ScramHash::Sha256, credentials)),
        Mechanism::ScramSha512 => Some(ScramClient::new(ScramHash::Sha512, credentials)),
        // config::inter_broker refuses it for sasl.mechanism.inter.broker.protocol.
        Mechanism::OAuthBearer => {
            return Err("OAUTHBEARER is not spoken between brokers".to_owned())
        }
    };
    let mut token = match &scram {
        None => format!("\0{}\0{}", credentials.username, credentials.password).into_bytes(),
        Some(s) => s.first_message().into_bytes(),
    };
    loop {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        let response: SaslAuthenticateResponse = call(
            exchange,
            ApiKey::SaslAuthenticate,
            AUTHENTICATE_VERSION,
            request,
        )
        .await?;
        if response.error_code != 0 {
            return Err(format!(
                "error {}: {}",
                response.error_code,
                response
                    .error_message
                    .as_ref()
                    .map_or("(no message)", |m| m.as_str())
            ));
        }
        let lifetime = (response.session_lifetime_ms > 0)
            .then(|| Duration::from_millis(response.session_lifetime_ms as u64));
        match scram.as_mut() {
            None => return Ok(lifetime),
            Some(s) => match s.next(&response.auth_bytes)? {
                Some(next) => token = next.into_bytes(),
                None => return Ok(lifetime),
            },
        }
    }
}

/// One SASL request, its response decoded.
async fn call<E, Req, Resp>(
    exchange: &mut E,
    api_key: ApiKey,
    version: i16,
    request: Req,
) -> Result<Resp, String>
where
    E: Exchange,
    Req: Encodable + Send + 'static,
    Resp: kafka_protocol::protocol::Decodable,
{
    let encode: EncodeFn = Box::new(move |v, buf| request.encode(buf, v).map(|()| true));
    let body = exchange
        .round_trip(api_key, version, encode, SASL_RESPONSE_BYTES_MAX)
        .await?;
    decode_body(api_key, version, body)
}

/// The client side of a SCRAM exchange (RFC 5802, as Kafka's `ScramSaslClient`).
struct ScramClient {
    hash: ScramHash,
    password: String,
    client_first_bare: String,
    nonce: String,
    /// The auth message and salted password once the server's first message is in.
    proofed: Option<(String, Vec<u8>)>,
}

impl ScramClient {
    fn new(hash: ScramHash, credentials: &SaslCredentials) -> ScramClient {
        let mut random = [0u8; 24];
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider()
            .secure_random
            .fill(&mut random);
        // Printable, without ',' (RFC 5802's `printable`): base64 without its '=' padding.
        let nonce = B64.encode(random).replace('=', "");
        // RFC 5802 `saslname`: '=' and ',' escaped.
        let user = credentials.username.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            hash,
            password: credentials.password.clone(),
            client_first_bare: format!("n={user},r={nonce}"),
            nonce,
            proofed: None,
        }
    }

    fn first_message(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// The next message for the server's `message`, or `None` when the exchange is complete.
    fn next(&mut self, message: &[u8]) -> Result<Option<String>, String> {
        let message =
            std::str::from_utf8(message).map_err(|_| "SCRAM: a server message is not UTF-8")?;
        let attribute = |name: &str| {
            message
                .split(',')
                .find_map(|a| a.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
        };
        if let Some((auth_message, salted)) = self.proofed.take() {
            if let Some(error) = attribute("e") {
                return Err(format!("SCRAM: the server refused: {error}"));
            }
            let signature = attribute("v")
                .and_then(|v| B64.decode(v).ok())
                .ok_or("SCRAM: the server's final message has no signature")?;
            let server_key = self.hash.hmac(&salted, b"Server Key");
            if self.hash.hmac(&server_key, auth_message.as_bytes()) != signature {
                return Err("SCRAM: the server's signature is wrong".to_owned());
            }
            return Ok(None);
        }
        let nonce = attribute("r").ok_or("SCRAM: the server's first message has no nonce")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("SCRAM: the server's nonce does not extend ours".to_owned());
        }
        let salt = attribute("s")
            .and_then(|s| B64.decode(s).ok())
            .ok_or("SCRAM: the server's first message has no salt")?;
        let iterations: u32 = attribute("i")
            .and_then(|i| i.parse().ok())
            .ok_or("SCRAM: the server's first message has no iteration count")?;
        // Kafka's client refuses fewer iterations than its minimum, 4096.
        if iterations < SCRAM_ITERATIONS {
            return Err(format!(
                "SCRAM: {iterations} iterations are fewer than the minimum {SCRAM_ITERATIONS}"
            ));
        }
        let salted = self
            .hash
            .salted_password(self.password.as_bytes(), &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{message},{without_proof}", self.client_first_bare);
        let client_key = self.hash.hmac(&salted, b"Client Key");
        let signature = self
            .hash
            .hmac(&self.hash.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        self.proofed = Some((auth_message, salted));
        Ok(Some(format!("{without_proof},p={}", B64.encode(proof))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KIP-368: renewed between 85% and 95% of the session, never when it has no end.
    #[test]
    fn a_session_is_renewed_before_it_ends() {
        let started = Instant::now();
        assert_eq!(renewal_due(started, None), None);
        for _ in 0..200 {
            let at = renewal_due(started, Some(Duration::from_secs(100))).unwrap();
            let after = at - started;
            assert!(
                after >= Duration::from_secs(85) && after < Duration::from_secs(95),
                "{after:?}"
            );
        }
    }

    /// RFC 7677's SCRAM-SHA-256 example, the client's side: user `user`, password `pencil`.
    #[test]
    fn scram_client_follows_rfc_7677() {
        let credentials = SaslCredentials {
            mechanism: Mechanism::ScramSha256,
            username: "user".to_owned(),
            password: "pencil".to_owned(),
        };
        let mut client = ScramClient::new(ScramHash::Sha256, &credentials);
        client.nonce = "rOprNGfwEbeRWgbNEkqO".to_owned();
        client.client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO".to_owned();
        assert_eq!(client.first_message(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let last = client
            .next(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap()
            .unwrap();
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert!(client
            .next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap()
            .is_none());
    }

    #[test]
    fn scram_client_refuses_a_wrong_server_signature_or_a_foreign_nonce() {
        let credentials = SaslCredentials {
            mechanism: Mechanism::ScramSha512,
            username: "a=b,c".to_owned(),
            password: "pw".to_owned(),
        };
        let mut client = ScramClient::new(ScramHash::Sha512, &credentials);
        assert!(client.first_message().starts_with("n,,n=a=3Db=2Cc,r="));
        assert!(client.next(b"r=other,s=c2FsdA==,i=4096").is_err());
        let first = format!("r={}xyz,s=c2FsdA==,i=4096", client.nonce);
        assert!(client.next(first.as_bytes()).unwrap().is_some());
        assert!(client.next(b"v=AAAA").is_err());
    }
}
