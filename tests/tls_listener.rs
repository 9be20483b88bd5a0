//! An SSL client listener on a real socket: certificates made here with rcgen, a rustls client.
//! Produce and fetch over TLS, mutual TLS required (a certificate the trust store signed is
//! served, one it did not is refused in the handshake), and a plaintext client on the TLS port
//! gets no answer.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::{batch, start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
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
    fn issue(&self, cn: &str, sans: &[&str]) -> (CertificateDer<'static>, KeyPair) {
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

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// Broker settings: an SSL listener with a PEM key store (chain + key in one file) and the
    /// CA as its PEM trust store.
    fn broker_settings(&self, client_auth: &str) -> Vec<String> {
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

    fn client_config(
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

fn pem_of(cert: &CertificateDer<'_>) -> String {
    use std::fmt::Write;
    let b64 = base64_encode(cert.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        writeln!(out, "{}", std::str::from_utf8(chunk).unwrap()).unwrap();
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn base64_encode(data: &[u8]) -> String {
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

async fn start_ssl_broker(dir: &Path, settings: &[String]) -> common::TestBroker {
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    start_broker(dir, &settings).await
}

async fn tls_connect(
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

/// One request and its response over any stream.
async fn call<S: AsyncRead + AsyncWrite + Unpin, R: Request>(
    stream: &mut S,
    version: i16,
    request: &R,
) -> std::io::Result<R::Response> {
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
    stream.write_all(&frame).await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).await?;
    let mut body = Bytes::from(body);
    let header_version = if api_key == ApiKey::ApiVersions {
        0
    } else {
        <R::Response as HeaderVersion>::header_version(version)
    };
    let header = ResponseHeader::decode(&mut body, header_version).unwrap();
    assert_eq!(header.correlation_id, 7);
    let response = R::Response::decode(&mut body, version).unwrap();
    assert!(!body.has_remaining());
    Ok(response)
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_fetch_over_ssl_and_a_plaintext_client_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let broker = start_ssl_broker(data.path(), &pki.broker_settings("none")).await;
    let mut tls = tls_connect(broker.local_addr, pki.client_config(None))
        .await
        .unwrap();

    let created: CreateTopicsResponse = call(
        &mut tls,
        5,
        &CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name("secure"))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
    )
    .await
    .unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    let produced: ProduceResponse = call(
        &mut tls,
        9,
        &ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("secure"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(&["over", "tls"], None)))])]),
    )
    .await
    .unwrap();
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    let fetched: FetchResponse = call(
        &mut tls,
        12,
        &FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("secure"))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    )
    .await
    .unwrap();
    let p = &fetched.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 2));
    let records = p.records.as_ref().expect("records");
    assert!(
        records.windows(3).any(|w| w == b"tls"),
        "the produced record comes back"
    );

    // A plaintext client on the TLS port: its ApiVersions is not a TLS ClientHello, so the
    // handshake fails and the connection closes without a Kafka answer.
    let mut plain = RawClient::connect(broker.local_addr).await;
    let (_, frame) = plain.encode(3, &ApiVersionsRequest::default());
    plain.send_bytes(&frame).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), plain.read_frame())
        .await
        .expect("the broker closes the connection");
    assert!(
        answer.is_none(),
        "a plaintext request on the SSL port was answered"
    );
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_required_serves_a_trusted_certificate_and_refuses_an_untrusted_one() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let broker = start_ssl_broker(data.path(), &pki.broker_settings("required")).await;

    let (cert, key) = pki.issue("alice", &[]);
    let mut trusted = tls_connect(broker.local_addr, pki.client_config(Some((cert, &key))))
        .await
        .unwrap();
    let versions: ApiVersionsResponse = call(&mut trusted, 3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(versions.error_code, 0);

    // Signed by another CA: the broker's trust store does not know it.
    let other = Pki::new();
    let (cert, key) = other.issue("mallory", &[]);
    let refused = match tls_connect(broker.local_addr, pki.client_config(Some((cert, &key)))).await
    {
        Err(_) => true,
        Ok(mut stream) => call(&mut stream, 3, &ApiVersionsRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "an untrusted client certificate was served");

    // No certificate at all while one is required.
    let refused = match tls_connect(broker.local_addr, pki.client_config(None)).await {
        Err(_) => true,
        Ok(mut stream) => call(&mut stream, 3, &ApiVersionsRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    broker.shutdown().await.unwrap();
}
