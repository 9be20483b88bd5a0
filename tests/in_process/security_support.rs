//! Helpers of the tests of secured listeners (`security_listeners`, `acls_raw`,
//! `negative_matrix`): certificates made with rcgen and a rustls client, requests over any
//! stream, SASL/PLAIN and the client side of SCRAM by hand, and requests handed to the
//! controller listener's dispatch as a given principal.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::start_broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) struct Pki {
    pub(crate) ca: CertifiedIssuer<'static, KeyPair>,
    pub(crate) dir: tempfile::TempDir,
}

impl Pki {
    pub(crate) fn new() -> Pki {
        let mut params = CertificateParams::new(vec![]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "test ca");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Pki {
            ca,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A certificate and key signed by this CA, as (certificate, key).
    pub(crate) fn issue(&self, cn: &str, sans: &[&str]) -> (CertificateDer<'static>, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "KafkaIQ tests");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.der().clone(), key)
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Broker settings: an SSL listener with a PEM key store (chain + key in one file) and the
    /// CA as its PEM trust store.
    pub(crate) fn broker_settings(&self, client_auth: &str) -> Vec<String> {
        let (cert, key) = self.issue("broker", &["localhost"]);
        let pem = format!("{}{}", pem_of(&cert), key.serialize_pem());
        let keystore = self.write("broker.pem", &pem);
        let truststore = self.write("ca.pem", &self.ca.pem());
        vec![
            "listeners=SSL://127.0.0.1:0".to_owned(),
            "inter.broker.listener.name=SSL".to_owned(),
            "ssl.keystore.type=PEM".to_owned(),
            format!("listener.name.ssl.ssl.keystore.location={keystore}"),
            "ssl.truststore.type=PEM".to_owned(),
            format!("ssl.truststore.location={truststore}"),
            format!("ssl.client.auth={client_auth}"),
        ]
    }

    pub(crate) fn client_config(
        &self,
        cert: Option<(CertificateDer<'static>, &KeyPair)>,
    ) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        match cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    vec![cert],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
                )
                .unwrap(),
        }
    }
}

pub(crate) fn pem_of(cert: &CertificateDer<'_>) -> String {
    use std::fmt::Write;
    let b64 = base64_encode(cert.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        writeln!(out, "{}", std::str::from_utf8(chunk).unwrap()).unwrap();
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

pub(crate) fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(crate) async fn start_ssl_broker(dir: &Path, settings: &[String]) -> common::TestBroker {
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    start_broker(dir, &settings).await
}

pub(crate) async fn tls_connect(
    addr: std::net::SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    // TLS 1.3 reports a refused client certificate only after the handshake: one flush and a
    // read make the server's verdict visible.
    tls.flush().await?;
    Ok(tls)
}

/// A request frame (size prefix included), correlation id 7.
pub(crate) fn encode_frame<R: Request>(version: i16, request: &R) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("tls-test")));
    let api_key = ApiKey::try_from(R::KEY).unwrap();
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api_key.request_header_version(version))
        .unwrap();
    request.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    frame.freeze()
}

/// Writes `frame` and reads the answer's body (size prefix removed).
pub(crate) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    frame: &[u8],
) -> std::io::Result<Bytes> {
    stream.write_all(frame).await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

/// The response to an [`encode_frame`] request of `R` at `version`, from the answer's body.
pub(crate) fn decode_answer<R: Request>(version: i16, mut body: Bytes) -> R::Response {
    let header_version = if R::KEY == ApiKey::ApiVersions as i16 {
        0
    } else {
        <R::Response as HeaderVersion>::header_version(version)
    };
    let header = ResponseHeader::decode(&mut body, header_version).unwrap();
    assert_eq!(header.correlation_id, 7);
    let response = R::Response::decode(&mut body, version).unwrap();
    assert!(!body.has_remaining());
    response
}

/// One request and its response over any stream.
pub(crate) async fn call<S: AsyncRead + AsyncWrite + Unpin, R: Request>(
    stream: &mut S,
    version: i16,
    request: &R,
) -> std::io::Result<R::Response> {
    let body = exchange(stream, &encode_frame(version, request)).await?;
    Ok(decode_answer::<R>(version, body))
}

pub(crate) fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

pub(crate) const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required \
    username=\"admin\" password=\"admin-secret\" user_admin=\"admin-secret\" user_alice=\"alice-secret\";";

pub(crate) fn sasl_settings(protocol: &str) -> Vec<String> {
    let lower = protocol.to_ascii_lowercase();
    vec![
        format!("listeners={protocol}://127.0.0.1:0"),
        format!("inter.broker.listener.name={protocol}"),
        "sasl.enabled.mechanisms=PLAIN".to_owned(),
        format!("listener.name.{lower}.plain.sasl.jaas.config={JAAS}"),
        // Short, so the failure test's close comes quickly; still a real delay.
        "connection.failed.authentication.delay.ms=50".to_owned(),
    ]
}

/// SaslHandshake v1 for PLAIN, then SaslAuthenticate v2 with `user` / `password`.
pub(crate) async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    user: &str,
    password: &str,
) -> SaslAuthenticateResponse {
    let handshake: SaslHandshakeResponse = call(
        stream,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    assert_eq!(handshake.error_code, 0);
    assert!(handshake
        .mechanisms
        .contains(&StrBytes::from_static_str("PLAIN")));
    call(
        stream,
        2,
        &SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::from(format!("\0{user}\0{password}"))),
    )
    .await
    .unwrap()
}

/// True once the broker has closed `stream` (end of stream or reset), within 10 s.
pub(crate) async fn closed<S: AsyncRead + Unpin>(stream: &mut S) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// The client nonce of the SCRAM exchanges here.
pub(crate) const SCRAM_CLIENT_NONCE: &str = "fyko+d2lbbFgONRv9qkxdawL";

fn scram_hash(mechanism: &str) -> kafkaiq::server::scram::ScramHash {
    use kafkaiq::server::scram::ScramHash;
    if mechanism == "SCRAM-SHA-512" {
        ScramHash::Sha512
    } else {
        ScramHash::Sha256
    }
}

/// SaslHandshake v1 for `mechanism`, then the client-first message for `user` (nonce
/// [`SCRAM_CLIENT_NONCE`]): the server-first message, or SaslAuthenticate's error code.
pub(crate) async fn scram_first<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    mechanism: &'static str,
    user: &str,
) -> Result<String, i16> {
    let handshake: SaslHandshakeResponse = call(
        stream,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
    )
    .await
    .unwrap();
    assert_eq!(handshake.error_code, 0);
    let first: SaslAuthenticateResponse = call(
        stream,
        2,
        &SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::from(format!("n,,n={user},r={SCRAM_CLIENT_NONCE}"))),
    )
    .await
    .unwrap();
    if first.error_code != 0 {
        return Err(first.error_code);
    }
    Ok(String::from_utf8(first.auth_bytes.to_vec()).unwrap())
}

/// The client's side of a SCRAM exchange after the server-first message.
pub(crate) struct ScramFinal {
    /// The client-final message, with the proof of `password`.
    pub(crate) message: String,
    /// The server-final message of a server that holds the credential.
    pub(crate) server_final: String,
}

/// The client-final message of `user` with `password`, answering `server_first`.
pub(crate) fn scram_final(
    mechanism: &str,
    user: &str,
    password: &str,
    server_first: &str,
) -> ScramFinal {
    use base64::engine::general_purpose::STANDARD as B64;
    use base64::Engine;
    let hash = scram_hash(mechanism);
    let attr = |k: &str| {
        server_first
            .split(',')
            .find_map(|a| a.strip_prefix(k))
            .unwrap()
            .to_owned()
    };
    let nonce = attr("r=");
    assert!(nonce.starts_with(SCRAM_CLIENT_NONCE) && nonce.len() > SCRAM_CLIENT_NONCE.len());
    let salt = B64.decode(attr("s=")).unwrap();
    let iterations: u32 = attr("i=").parse().unwrap();
    let salted = hash.salted_password(password.as_bytes(), &salt, iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    let stored_key = hash.hash(&client_key);
    let without_proof = format!("c=biws,r={nonce}");
    let auth_message = format!("n={user},r={SCRAM_CLIENT_NONCE},{server_first},{without_proof}");
    let signature = hash.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let server_key = hash.hmac(&salted, b"Server Key");
    ScramFinal {
        message: format!("{without_proof},p={}", B64.encode(proof)),
        server_final: format!(
            "v={}",
            B64.encode(hash.hmac(&server_key, auth_message.as_bytes()))
        ),
    }
}

/// Sends a client-final (or any) SCRAM message in a SaslAuthenticate v2.
pub(crate) async fn scram_send<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    message: &str,
) -> std::io::Result<SaslAuthenticateResponse> {
    call(
        stream,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message.to_owned())),
    )
    .await
}

/// The client side of SCRAM (RFC 5802) over SaslAuthenticate; the server-final message on
/// success, the SaslAuthenticate error code on failure.
pub(crate) async fn scram_authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    mechanism: &'static str,
    user: &str,
    password: &str,
) -> Result<String, i16> {
    let server_first = scram_first(stream, mechanism, user).await?;
    let client_final = scram_final(mechanism, user, password, &server_first);
    let last = scram_send(stream, &client_final.message).await.unwrap();
    if last.error_code != 0 {
        return Err(last.error_code);
    }
    let server_final = String::from_utf8(last.auth_bytes.to_vec()).unwrap();
    assert_eq!(
        server_final, client_final.server_final,
        "the broker proves it knows the credential"
    );
    Ok(server_final)
}

/// AlterUserScramCredentials setting `user`'s `password` for one mechanism (1 = SHA-256,
/// 2 = SHA-512), as kafka-configs does: the client salts the password.
pub(crate) fn scram_upsertion(
    user: &str,
    mechanism: i8,
    password: &str,
    iterations: i32,
) -> alter_user_scram_credentials_request::ScramCredentialUpsertion {
    let hash = scram_hash(if mechanism == 2 {
        "SCRAM-SHA-512"
    } else {
        "SCRAM-SHA-256"
    });
    let salt = format!("salt-of-{user}").into_bytes();
    alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(user.to_owned()))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salted_password(Bytes::from(hash.salted_password(
            password.as_bytes(),
            &salt,
            iterations as u32,
        )))
        .with_salt(Bytes::from(salt))
}

pub(crate) async fn plain_admin(addr: std::net::SocketAddr) -> TcpStream {
    let mut admin = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        authenticate(&mut admin, "admin", "admin-secret")
            .await
            .error_code,
        0
    );
    admin
}

/// SaslHandshake v1 for `mechanism` (expected accepted), then SaslAuthenticate v2 with `bytes`.
pub(crate) async fn sasl_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    mechanism: &'static str,
    bytes: Bytes,
) -> std::io::Result<SaslAuthenticateResponse> {
    let handshake: SaslHandshakeResponse = call(
        stream,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
    )
    .await?;
    assert_eq!(handshake.error_code, 0);
    call(
        stream,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes),
    )
    .await
}

/// SaslHandshake v1 + SaslAuthenticate v2 for PLAIN as `user` on an open connection; the
/// SaslAuthenticate answer, or an error when the connection closed unanswered.
pub(crate) async fn plain_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    user: &str,
    password: &str,
) -> std::io::Result<SaslAuthenticateResponse> {
    sasl_exchange(
        stream,
        "PLAIN",
        Bytes::from(format!("\0{user}\0{password}")),
    )
    .await
}

/// The controller listener's dispatch of `frame` (size prefix included) from `principal`, as
/// a connection of that listener would hand it over: the answer (size prefix included),
/// nothing (a Raft message), or why the connection closes.
pub(crate) async fn controller_exchange(
    ctx: &Arc<kafkaiq::context::Context>,
    principal: &str,
    frame: &Bytes,
) -> Result<Option<Bytes>, kafkaiq::server::dispatch::DispatchError> {
    use kafkaiq::server::{controller_dispatch, ConnectionInfo, ListenerKind};
    let info = ConnectionInfo {
        id: 4242,
        peer: "127.0.0.1:40000".parse().unwrap(),
        listener: ListenerKind::Controller,
        listener_name: "CONTROLLER".into(),
        principal: principal.to_owned(),
    };
    controller_dispatch::handle_frame(ctx, frame.slice(4..), &info).await
}

/// `request` at `version` through the controller listener's dispatch, as `principal`.
pub(crate) async fn call_as<R: Request>(
    ctx: &Arc<kafkaiq::context::Context>,
    principal: &str,
    version: i16,
    request: &R,
) -> R::Response {
    let answer = controller_exchange(ctx, principal, &encode_frame(version, request))
        .await
        .expect("handled")
        .expect("answered");
    decode_answer::<R>(version, answer.slice(4..))
}
