//! SSL, SASL_PLAINTEXT and SASL_SSL client listeners on real sockets: certificates made here
//! with rcgen, a rustls client, SASL by hand (the raw protocol) and through librdkafka.
//! Produce and fetch over TLS, mutual TLS required (a certificate the trust store signed is
//! served, one it did not is refused in the handshake), a plaintext client on the TLS port gets
//! no answer; SASL/PLAIN with SaslAuthenticate (v1 handshake) and raw tokens (v0), a wrong
//! password answered SASL_AUTHENTICATION_FAILED and closed, a request before authentication
//! closed unanswered, one during the exchange answered ILLEGAL_SASL_STATE and closed; SCRAM; OAUTHBEARER with Kafka's unsecured-token validator (by hand, and
//! kcat's built-in token); KIP-368 re-authentication (by hand, and librdkafka's).

use crate::common;
use crate::security_support::*;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{batch, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

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
    let (_, frame) = plain.encode(3, &crate::common::api_versions_request());
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

/// A node with a PLAINTEXT and an SSL listener serves both: a topic created and written over
/// TLS is read over PLAINTEXT, each listener's Metadata names the broker by that listener's
/// port, and the TLS port refuses plaintext while the PLAINTEXT port refuses TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_and_an_ssl_listener_are_both_served() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let mut settings = pki.broker_settings("none");
    settings[0] = "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0".to_owned();
    settings[1] = "inter.broker.listener.name=PLAINTEXT".to_owned();
    let broker = start_ssl_broker(data.path(), &settings).await;
    let plain_addr = broker.listener_addr("PLAINTEXT").expect("PLAINTEXT bound");
    let ssl_addr = broker.listener_addr("SSL").expect("SSL bound");
    assert_ne!(plain_addr.port(), ssl_addr.port());

    let mut tls = tls_connect(ssl_addr, pki.client_config(None))
        .await
        .unwrap();
    produce_and_fetch(&mut tls, "two-listeners").await;
    let mut plain = TcpStream::connect(plain_addr).await.unwrap();
    let fetched: FetchResponse = call(
        &mut plain,
        12,
        &FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name("two-listeners"))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    )
    .await
    .unwrap();
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.high_watermark),
        (0, 2),
        "read over PLAINTEXT"
    );

    let over_ssl: MetadataResponse = call(&mut tls, 12, &MetadataRequest::default())
        .await
        .unwrap();
    let over_plain: MetadataResponse = call(&mut plain, 12, &MetadataRequest::default())
        .await
        .unwrap();
    let ports = |m: &MetadataResponse| m.brokers.iter().map(|b| b.port).collect::<Vec<_>>();
    assert_eq!(ports(&over_ssl), vec![i32::from(ssl_addr.port())]);
    assert_eq!(ports(&over_plain), vec![i32::from(plain_addr.port())]);

    // Each port speaks only its own protocol.
    let mut wrong = RawClient::connect(ssl_addr).await;
    let (_, frame) = wrong.encode(3, &crate::common::api_versions_request());
    wrong.send_bytes(&frame).await;
    let answer = tokio::time::timeout(Duration::from_secs(10), wrong.read_frame())
        .await
        .expect("the broker closes the connection");
    assert!(
        answer.is_none(),
        "a plaintext request on the SSL port was answered"
    );
    assert!(
        tls_connect(plain_addr, pki.client_config(None))
            .await
            .is_err(),
        "a TLS handshake on the PLAINTEXT port succeeded"
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
    let versions: ApiVersionsResponse =
        call(&mut trusted, 3, &crate::common::api_versions_request())
            .await
            .unwrap();
    assert_eq!(versions.error_code, 0);

    // Signed by another CA: the broker's trust store does not know it.
    let other = Pki::new();
    let (cert, key) = other.issue("mallory", &[]);
    let refused = match tls_connect(broker.local_addr, pki.client_config(Some((cert, &key)))).await
    {
        Err(_) => true,
        Ok(mut stream) => call(&mut stream, 3, &crate::common::api_versions_request())
            .await
            .is_err(),
    };
    assert!(refused, "an untrusted client certificate was served");

    // No certificate at all while one is required.
    let refused = match tls_connect(broker.local_addr, pki.client_config(None)).await {
        Err(_) => true,
        Ok(mut stream) => call(&mut stream, 3, &crate::common::api_versions_request())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    broker.shutdown().await.unwrap();
}

/// Creates `topic`, produces two records and fetches them back.
async fn produce_and_fetch<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, topic: &str) {
    let created: CreateTopicsResponse = call(
        stream,
        5,
        &CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
    )
    .await
    .unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    produce(stream, topic, &["authenticated", "write"]).await;
    let fetched: FetchResponse = call(
        stream,
        12,
        &FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    )
    .await
    .unwrap();
    let p = &fetched.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 2));
    assert!(p
        .records
        .as_ref()
        .unwrap()
        .windows(13)
        .any(|w| w == b"authenticated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plaintext_plain_authenticates_then_serves_and_refuses_before() {
    let data = tempfile::tempdir().unwrap();
    let broker = start_ssl_broker(data.path(), &sasl_settings("SASL_PLAINTEXT")).await;

    // ApiVersions before authentication is answered, and advertises the SASL APIs.
    let mut client = TcpStream::connect(broker.local_addr).await.unwrap();
    let versions: ApiVersionsResponse =
        call(&mut client, 3, &crate::common::api_versions_request())
            .await
            .unwrap();
    let keys: Vec<i16> = versions.api_keys.iter().map(|k| k.api_key).collect();
    assert!(keys.contains(&17) && keys.contains(&36), "{keys:?}");
    let done = authenticate(&mut client, "alice", "alice-secret").await;
    assert_eq!(done.error_code, 0, "{:?}", done.error_message);
    assert_eq!(
        done.session_lifetime_ms, 0,
        "connections.max.reauth.ms is 0"
    );
    produce_and_fetch(&mut client, "sasl-plain").await;
    // After authentication (a session without end) a second handshake is a state error, as
    // in Kafka.
    let again: SaslHandshakeResponse = call(
        &mut client,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    assert_eq!(again.error_code, 34);

    // Metadata before authentication: closed without an answer.
    let mut early = TcpStream::connect(broker.local_addr).await.unwrap();
    let answer = call(&mut early, 12, &MetadataRequest::default()).await;
    assert!(
        answer.is_err(),
        "a request before authentication was answered"
    );

    // Metadata in the middle of the exchange (after a v1 handshake): as Kafka, the request's
    // own error response, ILLEGAL_SASL_STATE for the topic it names, then the connection closes.
    let mut midway = TcpStream::connect(broker.local_addr).await.unwrap();
    let handshake: SaslHandshakeResponse = call(
        &mut midway,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    assert_eq!(handshake.error_code, 0);
    let refused: MetadataResponse = call(
        &mut midway,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
            )
            .with_name(Some(TopicName(StrBytes::from_static_str("sasl-plain"))))])),
    )
    .await
    .expect("Metadata during the SASL exchange was not answered");
    let errors: Vec<(Option<&str>, i16)> = refused
        .topics
        .iter()
        .map(|t| (t.name.as_ref().map(|n| n.as_str()), t.error_code))
        .collect();
    assert_eq!(errors, vec![(Some("sasl-plain"), 34)]);
    assert!(
        closed(&mut midway).await,
        "the connection stayed open after a request during the SASL exchange"
    );

    // So is any other API's (Kafka's `getErrorResponse`): a DescribeConfigs answers
    // ILLEGAL_SASL_STATE, with the reason, for the resource it names.
    let mut admin = TcpStream::connect(broker.local_addr).await.unwrap();
    let handshake: SaslHandshakeResponse = call(
        &mut admin,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    assert_eq!(handshake.error_code, 0);
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let refused: kafka_protocol::messages::DescribeConfigsResponse = call(
        &mut admin,
        4,
        &kafka_protocol::messages::DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("sasl-plain")),
        ]),
    )
    .await
    .expect("DescribeConfigs during the SASL exchange was not answered");
    let results: Vec<(&str, i16)> = refused
        .results
        .iter()
        .map(|r| (r.resource_name.as_str(), r.error_code))
        .collect();
    assert_eq!(results, vec![("sasl-plain", 34)]);
    let message = refused.results[0].error_message.as_deref().unwrap_or("");
    assert!(message.contains("during SASL authentication"), "{message}");
    assert!(
        closed(&mut admin).await,
        "the connection stayed open after a request during the SASL exchange"
    );

    // A wrong password: SASL_AUTHENTICATION_FAILED, then the connection closes.
    let mut wrong = TcpStream::connect(broker.local_addr).await.unwrap();
    let refused = authenticate(&mut wrong, "alice", "not-her-password").await;
    assert_eq!(refused.error_code, 58);
    assert!(
        closed(&mut wrong).await,
        "the connection stayed open after a failed authentication"
    );

    // An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    let mut scram = TcpStream::connect(broker.local_addr).await.unwrap();
    let handshake: SaslHandshakeResponse = call(
        &mut scram,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256")),
    )
    .await
    .unwrap();
    assert_eq!(handshake.error_code, 33);
    assert_eq!(
        handshake.mechanisms,
        vec![StrBytes::from_static_str("PLAIN")]
    );
    assert!(closed(&mut scram).await);

    // A frame past sasl.server.max.receive.size before authentication closes the connection.
    let mut big = TcpStream::connect(broker.local_addr).await.unwrap();
    big.write_all(&(600_000i32).to_be_bytes()).await.unwrap();
    assert!(closed(&mut big).await);

    // Kafka's successful- and failed-authentication counts, by listener and mechanism.
    let metrics = kafkaiq::insight::scrape::scrape(&broker.context);
    let count = |outcome: &str| {
        let series = format!(
            "kafka_server_socket_server_metrics_{outcome}_authentication_total{{listener=\"SASL_PLAINTEXT\",mechanism=\"PLAIN\"}}"
        );
        common::http::sample(&metrics, &series)
    };
    assert_eq!(count("successful"), Some(1.0), "{metrics}");
    // The wrong password, and the Metadata and the DescribeConfigs during the exchange.
    assert_eq!(count("failed"), Some(3.0), "{metrics}");
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v0_handshake_takes_a_raw_plain_token() {
    let data = tempfile::tempdir().unwrap();
    let broker = start_ssl_broker(data.path(), &sasl_settings("SASL_PLAINTEXT")).await;
    let mut client = TcpStream::connect(broker.local_addr).await.unwrap();
    let handshake: SaslHandshakeResponse = call(
        &mut client,
        0,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    assert_eq!(handshake.error_code, 0);
    let token = b"\0admin\0admin-secret";
    let mut frame = (token.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(token);
    client.write_all(&frame).await.unwrap();
    let mut reply = [0u8; 4];
    client.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply, [0, 0, 0, 0], "PLAIN's empty server token");
    produce_and_fetch(&mut client, "sasl-v0").await;

    // A wrong raw token: closed without a Kafka answer.
    let mut wrong = TcpStream::connect(broker.local_addr).await.unwrap();
    let _: SaslHandshakeResponse = call(
        &mut wrong,
        0,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    let token = b"\0admin\0guess";
    let mut frame = (token.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(token);
    wrong.write_all(&frame).await.unwrap();
    assert!(closed(&mut wrong).await);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_ssl_plain_over_tls() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let mut settings = pki.broker_settings("none");
    settings.retain(|s| !s.starts_with("listeners=") && !s.starts_with("inter.broker"));
    for s in &mut settings {
        *s = s.replace("listener.name.ssl.", "listener.name.sasl_ssl.");
    }
    settings.extend(sasl_settings("SASL_SSL"));
    let broker = start_ssl_broker(data.path(), &settings).await;
    let mut tls = tls_connect(broker.local_addr, pki.client_config(None))
        .await
        .unwrap();
    let done = authenticate(&mut tls, "admin", "admin-secret").await;
    assert_eq!(done.error_code, 0, "{:?}", done.error_message);
    produce_and_fetch(&mut tls, "sasl-ssl").await;
    let mut wrong = tls_connect(broker.local_addr, pki.client_config(None))
        .await
        .unwrap();
    assert_eq!(
        authenticate(&mut wrong, "admin", "nope").await.error_code,
        58
    );
    assert!(closed(&mut wrong).await);
    broker.shutdown().await.unwrap();
}

/// librdkafka (the `rdkafka` crate) over SASL_PLAINTEXT with PLAIN: it produces and consumes as
/// `alice`; with a wrong password it gets no metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_sasl_plain_produces_and_consumes_and_a_wrong_password_is_refused() {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let data = tempfile::tempdir().unwrap();
    let broker = start_ssl_broker(data.path(), &sasl_settings("SASL_PLAINTEXT")).await;
    let client = |password: &str| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", broker.local_addr.to_string())
            .set("security.protocol", "sasl_plaintext")
            .set("sasl.mechanisms", "PLAIN")
            .set("sasl.username", "alice")
            .set("sasl.password", password);
        c
    };
    let producer: FutureProducer = client("alice-secret")
        .set("message.timeout.ms", "20000")
        .create()
        .unwrap();
    producer
        .send(
            FutureRecord::<(), _>::to("rdkafka-sasl").payload("hello over SASL"),
            Duration::from_secs(20),
        )
        .await
        .expect("delivered");
    let consumer: BaseConsumer = client("alice-secret")
        .set("group.id", "sasl-readers")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset("rdkafka-sasl", 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let payload = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                return Some(m.payload().unwrap().to_vec());
            }
        }
        None
    })
    .await
    .unwrap();
    assert_eq!(payload.as_deref(), Some(&b"hello over SASL"[..]));

    let refused: BaseConsumer = client("wrong").create().unwrap();
    let metadata = tokio::task::spawn_blocking(move || {
        refused
            .fetch_metadata(None, Duration::from_secs(5))
            .map(|_| ())
    })
    .await
    .unwrap();
    assert!(metadata.is_err(), "a wrong password got metadata");
    drop(producer);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha_256_and_512_authenticate_and_a_wrong_password_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let mut settings = sasl_settings("SASL_PLAINTEXT");
    settings.retain(|s| !s.starts_with("sasl.enabled.mechanisms"));
    settings.push("sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN".to_owned());
    settings.push("kafkaiq.sasl.scram.users=carol:carol-secret,dave:dave-secret".to_owned());
    let broker = start_ssl_broker(data.path(), &settings).await;
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let mut client = TcpStream::connect(broker.local_addr).await.unwrap();
        scram_authenticate(&mut client, mechanism, "carol", "carol-secret")
            .await
            .unwrap();
        produce_and_fetch(&mut client, &format!("scram-{}", &mechanism[10..])).await;

        let mut wrong = TcpStream::connect(broker.local_addr).await.unwrap();
        assert_eq!(
            scram_authenticate(&mut wrong, mechanism, "carol", "dave-secret").await,
            Err(58)
        );
        assert!(closed(&mut wrong).await);
        let mut unknown = TcpStream::connect(broker.local_addr).await.unwrap();
        assert_eq!(
            scram_authenticate(&mut unknown, mechanism, "erin", "x").await,
            Err(58)
        );
        assert!(closed(&mut unknown).await);
    }
    broker.shutdown().await.unwrap();
}

async fn alter_scram(
    admin: &mut TcpStream,
    deletions: Vec<alter_user_scram_credentials_request::ScramCredentialDeletion>,
    upsertions: Vec<alter_user_scram_credentials_request::ScramCredentialUpsertion>,
) -> Vec<(String, i16)> {
    let response: AlterUserScramCredentialsResponse = call(
        admin,
        0,
        &AlterUserScramCredentialsRequest::default()
            .with_deletions(deletions)
            .with_upsertions(upsertions),
    )
    .await
    .unwrap();
    let mut results: Vec<(String, i16)> = response
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    results.sort();
    results
}

/// Runs kcat (installed by `integration/kcat.sh` when missing) against `addr` over
/// SASL_PLAINTEXT with the SASL `properties` (`-X key=value` each), 20 s at most; its exit
/// status and standard output.
fn kcat_sasl(
    addr: std::net::SocketAddr,
    properties: &[String],
    args: &[&str],
    input: &[u8],
) -> (Option<i32>, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let kcat = Command::new("bash")
        .arg(root.join("integration/kcat.sh"))
        .output()
        .expect("integration/kcat.sh");
    assert!(
        kcat.status.success(),
        "kcat is missing and could not be installed"
    );
    let kcat = String::from_utf8_lossy(&kcat.stdout).trim().to_owned();
    let mut command = Command::new("timeout");
    command
        .arg("20")
        .arg(kcat)
        .args(["-b", &addr.to_string()])
        .args(["-X", "security.protocol=SASL_PLAINTEXT"]);
    for property in properties {
        command.args(["-X", property]);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // cargo points the library path at the build's own librdkafka (no SCRAM); kcat needs
        // the system's.
        .env_remove("LD_LIBRARY_PATH")
        .spawn()
        .expect("kcat");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The version of the librdkafka the system's kcat runs on (`kcat -V`).
fn kcat_librdkafka_version() -> (u32, u32, u32) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let kcat = std::process::Command::new("bash")
        .arg(root.join("integration/kcat.sh"))
        .output()
        .expect("integration/kcat.sh");
    let kcat = String::from_utf8_lossy(&kcat.stdout).trim().to_owned();
    let out = std::process::Command::new(kcat)
        .arg("-V")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("kcat -V");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let version = text
        .split("librdkafka ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no librdkafka version in `kcat -V`: {text}"));
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

/// [`kcat_sasl`] with a SCRAM `mechanism`, `user` and `password`.
fn kcat_scram(
    addr: std::net::SocketAddr,
    mechanism: &str,
    user: &str,
    password: &str,
    args: &[&str],
    input: &[u8],
) -> (Option<i32>, String) {
    let properties = [
        format!("sasl.mechanisms={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ];
    kcat_sasl(addr, &properties, args, input)
}

/// SCRAM users set through the metadata log, as `kafka-configs --alter --add-config
/// 'SCRAM-SHA-256=[…]' --entity-type users` sets them: they authenticate at once (by hand and
/// through kcat), are described
/// without secrets, win over `kafkaiq.sasl.scram.users`, stop authenticating when deleted, and
/// survive a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_credentials_altered_through_the_metadata_log_authenticate_and_survive_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut settings = sasl_settings("SASL_PLAINTEXT");
    settings.retain(|s| !s.starts_with("sasl.enabled.mechanisms"));
    settings.push("sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN".to_owned());
    settings.push("kafkaiq.sasl.scram.users=carol:carol-secret".to_owned());
    let broker = start_ssl_broker(data.path(), &settings).await;
    let addr = broker.local_addr;
    let scram = |mechanism: &'static str, user: &'static str, password: &'static str| async move {
        let mut client = TcpStream::connect(addr).await.unwrap();
        scram_authenticate(&mut client, mechanism, user, password).await
    };
    assert_eq!(scram("SCRAM-SHA-256", "erin", "erin-secret").await, Err(58));

    let mut admin = plain_admin(addr).await;
    // One alteration per user and request; erin's two mechanisms take two requests.
    assert_eq!(
        alter_scram(
            &mut admin,
            vec![],
            vec![
                scram_upsertion("erin", 1, "erin-secret", 8192),
                scram_upsertion("carol", 2, "carol-new", 4096),
                scram_upsertion("few", 1, "x", 1000),
            ]
        )
        .await,
        [("carol".into(), 0), ("erin".into(), 0), ("few".into(), 93)]
    );
    assert_eq!(
        alter_scram(
            &mut admin,
            vec![],
            vec![scram_upsertion("erin", 2, "erin-512", 4096)]
        )
        .await,
        [("erin".into(), 0)]
    );
    assert!(scram("SCRAM-SHA-256", "erin", "erin-secret").await.is_ok());
    assert!(scram("SCRAM-SHA-512", "erin", "erin-512").await.is_ok());
    assert_eq!(scram("SCRAM-SHA-512", "erin", "erin-secret").await, Err(58));
    // The metadata log's credential wins over the config file's for its mechanism.
    assert!(scram("SCRAM-SHA-512", "carol", "carol-new").await.is_ok());
    assert_eq!(
        scram("SCRAM-SHA-512", "carol", "carol-secret").await,
        Err(58)
    );
    assert!(scram("SCRAM-SHA-256", "carol", "carol-secret")
        .await
        .is_ok());
    let few = scram("SCRAM-SHA-256", "few", "x").await;
    assert_eq!(few, Err(58), "a refused credential is not stored");
    // A stock client (kcat) produces and reads back with it, if its librdkafka is 2.6.1 or
    // newer. Older ones (Debian's 2.0.2) send their own nonce before the combined one in the
    // client-final message, which Kafka 4.1 refuses, and so does KafkaIQ. (The stock clients'
    // SCRAM on a current librdkafka: integration/suites/39-security-clients.sh.)
    let topic = "scram-kcat";
    let produced = kcat_scram(
        addr,
        "SCRAM-SHA-512",
        "erin",
        "erin-512",
        &["-P", "-t", topic],
        b"k1\n",
    );
    if kcat_librdkafka_version() >= (2, 6, 1) {
        assert_eq!(produced.0, Some(0));
        let (status, out) = kcat_scram(
            addr,
            "SCRAM-SHA-512",
            "erin",
            "erin-512",
            &["-C", "-t", topic, "-o", "beginning", "-e", "-q"],
            b"",
        );
        assert_eq!((status, out.trim()), (Some(0), "k1"));
    } else {
        assert_ne!(
            produced.0,
            Some(0),
            "librdkafka before 2.6.1 authenticated with its non-RFC 5802 nonce"
        );
    }
    let (status, _) = kcat_scram(addr, "SCRAM-SHA-256", "erin", "erin-512", &["-L"], b"");
    assert_ne!(
        status,
        Some(0),
        "kcat listed metadata with a wrong password"
    );

    assert_eq!(
        describe_scram(&mut admin, &["erin", "nobody", "carol", "carol"]).await,
        [
            ("erin".into(), 0, vec![(1, 8192), (2, 4096)]),
            ("nobody".into(), 91, vec![]),
            ("carol".into(), 92, vec![]),
        ]
    );
    // carol's SCRAM-SHA-256 comes from the config file (4,096 iterations), described as Kafka
    // describes a credential `kafka-storage format --add-scram` bootstrapped; her SCRAM-SHA-512
    // from the metadata log. Asking for no user lists everyone.
    assert_eq!(
        describe_scram(&mut admin, &["carol"]).await,
        [("carol".into(), 0, vec![(1, 4096), (2, 4096)])]
    );
    let everyone: Vec<String> = describe_scram(&mut admin, &[])
        .await
        .into_iter()
        .map(|(user, code, _)| {
            assert_eq!(code, 0, "{user}");
            user
        })
        .collect();
    assert_eq!(everyone, ["carol", "erin"]);

    let deletion = alter_user_scram_credentials_request::ScramCredentialDeletion::default()
        .with_name(StrBytes::from_static_str("erin"))
        .with_mechanism(1);
    assert_eq!(
        alter_scram(&mut admin, vec![deletion.clone()], vec![]).await,
        [("erin".into(), 0)]
    );
    assert_eq!(scram("SCRAM-SHA-256", "erin", "erin-secret").await, Err(58));
    assert_eq!(
        alter_scram(&mut admin, vec![deletion], vec![]).await,
        [("erin".into(), 91)],
        "deleting it again finds nothing"
    );
    // A credential replaced in the metadata log and then deleted there stays deleted: the
    // config file's password for that user and mechanism does not come back.
    let carol_512 = alter_user_scram_credentials_request::ScramCredentialDeletion::default()
        .with_name(StrBytes::from_static_str("carol"))
        .with_mechanism(2);
    assert_eq!(
        alter_scram(&mut admin, vec![carol_512], vec![]).await,
        [("carol".into(), 0)]
    );
    assert_eq!(
        scram("SCRAM-SHA-512", "carol", "carol-secret").await,
        Err(58)
    );
    assert_eq!(scram("SCRAM-SHA-512", "carol", "carol-new").await, Err(58));
    assert!(scram("SCRAM-SHA-256", "carol", "carol-secret")
        .await
        .is_ok());
    // A credential only the config file gives can be deleted through the API too (as one
    // `kafka-storage format --add-scram` bootstrapped can in Kafka), once.
    let carol_256 = alter_user_scram_credentials_request::ScramCredentialDeletion::default()
        .with_name(StrBytes::from_static_str("carol"))
        .with_mechanism(1);
    assert_eq!(
        alter_scram(&mut admin, vec![carol_256.clone()], vec![]).await,
        [("carol".into(), 0)]
    );
    assert_eq!(
        scram("SCRAM-SHA-256", "carol", "carol-secret").await,
        Err(58)
    );
    assert_eq!(
        alter_scram(&mut admin, vec![carol_256], vec![]).await,
        [("carol".into(), 91)]
    );
    assert_eq!(
        describe_scram(&mut admin, &["carol"]).await,
        [("carol".into(), 91, vec![])],
        "a deleted config-file credential is no longer described"
    );
    drop(admin);
    broker.shutdown().await.unwrap();

    let broker = start_ssl_broker(data.path(), &settings).await;
    let addr = broker.local_addr;
    let scram = |mechanism: &'static str, user: &'static str, password: &'static str| async move {
        let mut client = TcpStream::connect(addr).await.unwrap();
        scram_authenticate(&mut client, mechanism, user, password).await
    };
    assert!(scram("SCRAM-SHA-512", "erin", "erin-512").await.is_ok());
    assert_eq!(scram("SCRAM-SHA-256", "erin", "erin-secret").await, Err(58));
    assert_eq!(
        scram("SCRAM-SHA-512", "carol", "carol-secret").await,
        Err(58),
        "the deletion survives the restart"
    );
    assert_eq!(
        scram("SCRAM-SHA-256", "carol", "carol-secret").await,
        Err(58),
        "so does the deletion of the config file's credential"
    );
    broker.shutdown().await.unwrap();
}

/// DescribeUserScramCredentials v0 for `users` (none: every user): (user, error code,
/// [(mechanism, iterations)]) of each result.
async fn describe_scram<S: AsyncRead + AsyncWrite + Unpin>(
    admin: &mut S,
    users: &[&'static str],
) -> Vec<(String, i16, Vec<(i8, i32)>)> {
    let named = (!users.is_empty()).then(|| {
        users
            .iter()
            .map(|u| {
                describe_user_scram_credentials_request::UserName::default()
                    .with_name(StrBytes::from_static_str(u))
            })
            .collect()
    });
    let described: DescribeUserScramCredentialsResponse = call(
        admin,
        0,
        &DescribeUserScramCredentialsRequest::default().with_users(named),
    )
    .await
    .unwrap();
    described
        .results
        .iter()
        .map(|r| {
            (
                r.user.to_string(),
                r.error_code,
                r.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            )
        })
        .collect()
}

/// A log directory formatted by Kafka's `kafka-storage format --add-scram
/// 'SCRAM-SHA-256=[name=alice,password=alice-secret]'` (its `bootstrap.checkpoint`, a fixture):
/// the new cluster's first controller writes alice's credential, and she authenticates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_formatted_with_kafkas_add_scram_bootstraps_that_user() {
    let data = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kafka-4.1.1-bootstrap.checkpoint"),
        data.path().join("bootstrap.checkpoint"),
    )
    .unwrap();
    let mut settings = sasl_settings("SASL_PLAINTEXT");
    settings.retain(|s| !s.starts_with("sasl.enabled.mechanisms"));
    settings.push("sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN".to_owned());
    let broker = start_ssl_broker(data.path(), &settings).await;
    let mut client = TcpStream::connect(broker.local_addr).await.unwrap();
    scram_authenticate(&mut client, "SCRAM-SHA-256", "alice", "alice-secret")
        .await
        .unwrap();
    produce_and_fetch(&mut client, "bootstrapped").await;
    let mut wrong = TcpStream::connect(broker.local_addr).await.unwrap();
    assert_eq!(
        scram_authenticate(&mut wrong, "SCRAM-SHA-256", "alice", "alice").await,
        Err(58)
    );
    broker.shutdown().await.unwrap();
}

fn keytool(args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new("keytool")
        .args(args)
        .output()
        .expect("keytool (Java 17) runs");
    assert!(
        out.status.success(),
        "keytool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Kafka's default store type, JKS, as Java's `keytool` writes it: the broker's key store (its
/// key under a password of its own, `ssl.key.password`) with no `ssl.keystore.type` set, and a
/// JKS trust store holding the CA of the client certificates (mutual TLS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keytool_jks_key_and_trust_stores_serve_mutual_tls() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let dir = pki.dir.path();
    let keystore = dir.join("broker.jks");
    let keystore = keystore.to_str().unwrap();
    keytool(&[
        "-genkeypair",
        "-storetype",
        "JKS",
        "-keystore",
        keystore,
        "-storepass",
        "store-secret",
        "-keypass",
        "key-secret",
        "-alias",
        "broker",
        "-keyalg",
        "RSA",
        "-keysize",
        "2048",
        "-validity",
        "2",
        "-dname",
        "CN=localhost",
        "-ext",
        "SAN=dns:localhost",
    ]);
    let broker_cert = keytool(&[
        "-exportcert",
        "-rfc",
        "-keystore",
        keystore,
        "-storepass",
        "store-secret",
        "-alias",
        "broker",
    ])
    .stdout;
    let ca_pem = pki.write("ca.pem", &pki.ca.pem());
    let truststore = dir.join("trust.jks");
    let truststore = truststore.to_str().unwrap();
    keytool(&[
        "-importcert",
        "-noprompt",
        "-storetype",
        "JKS",
        "-keystore",
        truststore,
        "-storepass",
        "trust-secret",
        "-alias",
        "ca",
        "-file",
        &ca_pem,
    ]);
    let settings = vec![
        "listeners=SSL://127.0.0.1:0".to_owned(),
        "inter.broker.listener.name=SSL".to_owned(),
        format!("ssl.keystore.location={keystore}"),
        "ssl.keystore.password=store-secret".to_owned(),
        "ssl.key.password=key-secret".to_owned(),
        format!("ssl.truststore.location={truststore}"),
        "ssl.truststore.password=trust-secret".to_owned(),
        "ssl.client.auth=required".to_owned(),
    ];
    let broker = start_ssl_broker(data.path(), &settings).await;

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &broker_cert[..]) {
        roots.add(cert.unwrap()).unwrap();
    }
    let (client_cert, client_key) = pki.issue("client", &["client"]);
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![client_cert],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(client_key.serialize_der())),
        )
        .unwrap();
    let mut tls = tls_connect(broker.local_addr, config.clone())
        .await
        .unwrap();
    let versions: kafka_protocol::messages::ApiVersionsResponse =
        call(&mut tls, 3, &crate::common::api_versions_request())
            .await
            .unwrap();
    assert_eq!(versions.error_code, 0);
    assert!(!versions.api_keys.is_empty());

    // A client whose certificate the JKS trust store does not vouch for is refused.
    let stranger = Pki::new();
    let (cert, key) = stranger.issue("stranger", &["stranger"]);
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &broker_cert[..]) {
        roots.add(cert.unwrap()).unwrap();
    }
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![cert],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let refused = match tls_connect(broker.local_addr, config).await {
        Err(_) => true,
        Ok(mut tls) => {
            call::<_, ApiVersionsRequest>(&mut tls, 3, &crate::common::api_versions_request())
                .await
                .is_err()
        }
    };
    assert!(refused, "a client certificate from another CA was served");
    broker.shutdown().await.unwrap();
}

/// The OAUTHBEARER JAAS entry of the SASL_PLAINTEXT listener: Kafka's unsecured validator,
/// requiring the scope `kafka`.
const OAUTH_JAAS: &str = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule \
    required unsecuredValidatorRequiredScope=\"kafka\" unsecuredValidatorAllowableClockSkewMs=\"1000\";";

/// A SASL_PLAINTEXT listener with OAUTHBEARER (unsecured tokens, scope `kafka` required) and
/// PLAIN, and `extra` settings.
fn oauth_settings(extra: &[&str]) -> Vec<String> {
    let mut settings = sasl_settings("SASL_PLAINTEXT");
    settings.retain(|s| !s.starts_with("sasl.enabled.mechanisms"));
    settings.push("sasl.enabled.mechanisms=OAUTHBEARER,PLAIN".to_owned());
    settings.push(format!(
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={OAUTH_JAAS}"
    ));
    settings.extend(extra.iter().map(|s| s.to_string()));
    settings
}

fn epoch_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// An unsecured JWS (`{"alg":...}`, the claims, an empty signature), base64url without padding
/// as the Java client and librdkafka write it.
fn unsecured_token(alg: &str, claims: &str) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
    use base64::Engine;
    format!(
        "{}.{}.",
        B64.encode(format!(r#"{{"alg":"{alg}"}}"#)),
        B64.encode(claims)
    )
}

/// A token for `sub` with the scope `kafka`, issued now and expiring in `life_secs`.
fn token_for(sub: &str, life_secs: f64) -> String {
    let now = epoch_secs();
    unsecured_token(
        "none",
        &format!(
            r#"{{"sub":"{sub}","scope":["kafka"],"iat":{},"exp":{}}}"#,
            now.floor(),
            (now + life_secs).floor()
        ),
    )
}

/// RFC 7628's client initial response: GS2 header (with `authzid` when not empty), the bearer
/// token, an extension, the closing `\x01`.
fn oauth_message(authzid: &str, token: &str) -> Bytes {
    let gs2 = if authzid.is_empty() {
        "n,,".to_owned()
    } else {
        format!("n,a={authzid},")
    };
    Bytes::from(format!(
        "{gs2}\x01auth=Bearer {token}\x01traceId=t-1\x01\x01"
    ))
}

/// Sends a token the broker refuses: the answer is RFC 7628's JSON error as a challenge (no
/// error code), the client's `\x01` acknowledges it, and authentication fails with that JSON as
/// the message; the connection then closes.
async fn refused_token(addr: std::net::SocketAddr, token: &str, expected_error: &str) {
    let mut client = TcpStream::connect(addr).await.unwrap();
    let challenge = sasl_exchange(&mut client, "OAUTHBEARER", oauth_message("", token))
        .await
        .unwrap();
    assert_eq!(
        (challenge.error_code, &challenge.auth_bytes[..]),
        (0, expected_error.as_bytes()),
        "{token}"
    );
    let failed: SaslAuthenticateResponse = call(
        &mut client,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\x01")),
    )
    .await
    .unwrap();
    assert_eq!(failed.error_code, 58);
    assert_eq!(failed.error_message.as_deref(), Some(expected_error));
    assert!(closed(&mut client).await, "open after a refused token");
}

/// SASL/OAUTHBEARER with Kafka's default (unsecured) validator: a valid token authenticates
/// its `sub` as `User:<sub>` (the principal the authorizer sees: alice is a super user, bob is
/// refused), with or without a matching authorization id; expired, future, wrongly scoped,
/// signed or malformed tokens are refused with RFC 7628's exchange and the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_unsecured_tokens_authenticate_their_subject_and_bad_ones_are_refused() {
    let data = tempfile::tempdir().unwrap();
    let settings = oauth_settings(&[
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:alice;User:admin",
    ]);
    let broker = start_ssl_broker(data.path(), &settings).await;
    let addr = broker.local_addr;

    let mut alice = TcpStream::connect(addr).await.unwrap();
    let done = sasl_exchange(
        &mut alice,
        "OAUTHBEARER",
        oauth_message("", &token_for("alice", 60.0)),
    )
    .await
    .unwrap();
    assert_eq!(
        (done.error_code, done.auth_bytes.len()),
        (0, 0),
        "{:?}",
        done.error_message
    );
    produce_and_fetch(&mut alice, "oauth-alice").await;

    // bob authenticates (with his name as the authorization id) but is not alice: the
    // authorizer refuses him the topic.
    let mut bob = TcpStream::connect(addr).await.unwrap();
    let done = sasl_exchange(
        &mut bob,
        "OAUTHBEARER",
        oauth_message("bob", &token_for("bob", 60.0)),
    )
    .await
    .unwrap();
    assert_eq!(done.error_code, 0, "{:?}", done.error_message);
    let created: CreateTopicsResponse = call(
        &mut bob,
        5,
        &CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name("oauth-bob"))
                .with_num_partitions(1)
                .with_replication_factor(1)]),
    )
    .await
    .unwrap();
    assert_eq!(
        created.topics[0].error_code, 29,
        "TOPIC_AUTHORIZATION_FAILED"
    );

    // Another authorization id than the token's subject: refused at once.
    let mut mallory = TcpStream::connect(addr).await.unwrap();
    let refused = sasl_exchange(
        &mut mallory,
        "OAUTHBEARER",
        oauth_message("alice", &token_for("mallory", 60.0)),
    )
    .await
    .unwrap();
    assert_eq!(refused.error_code, 58);
    assert!(
        refused.error_message.as_deref().unwrap().contains(
            "authorization id (alice) that is different from the token's principal name (mallory)"
        ),
        "{:?}",
        refused.error_message
    );
    assert!(closed(&mut mallory).await);

    let invalid = r#"{"status":"invalid_token"}"#;
    let now = epoch_secs().floor();
    // Expired past the allowed clock skew of 1 s.
    refused_token(
        addr,
        &unsecured_token(
            "none",
            &format!(r#"{{"sub":"alice","scope":"kafka","exp":{}}}"#, now - 5.0),
        ),
        invalid,
    )
    .await;
    // Issued in the future.
    refused_token(
        addr,
        &unsecured_token(
            "none",
            &format!(
                r#"{{"sub":"alice","scope":"kafka","iat":{},"exp":{}}}"#,
                now + 30.0,
                now + 60.0
            ),
        ),
        invalid,
    )
    .await;
    // Signed (Kafka's unsecured validator takes only `alg: none`), or no subject.
    refused_token(
        addr,
        &unsecured_token(
            "HS256",
            &format!(r#"{{"sub":"alice","scope":"kafka","exp":{}}}"#, now + 60.0),
        ),
        invalid,
    )
    .await;
    refused_token(
        addr,
        &unsecured_token(
            "none",
            &format!(r#"{{"scope":"kafka","exp":{}}}"#, now + 60.0),
        ),
        invalid,
    )
    .await;
    // Without the required scope.
    refused_token(
        addr,
        &unsecured_token(
            "none",
            &format!(r#"{{"sub":"alice","scope":["read"],"exp":{}}}"#, now + 60.0),
        ),
        r#"{"status":"insufficient_scope", "scope":"[kafka]"}"#,
    )
    .await;

    // Not RFC 7628's message: refused with Kafka's message for invalid credentials.
    let mut garbled = TcpStream::connect(addr).await.unwrap();
    let refused = sasl_exchange(
        &mut garbled,
        "OAUTHBEARER",
        Bytes::from_static(b"Bearer abc"),
    )
    .await
    .unwrap();
    assert_eq!(refused.error_code, 58);
    assert_eq!(
        refused.error_message.as_deref(),
        Some("Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER")
    );
    assert!(closed(&mut garbled).await);

    let metrics = kafkaiq::insight::scrape::scrape(&broker.context);
    let count = |outcome: &str| {
        common::http::sample(
            &metrics,
            &format!(
                "kafka_server_socket_server_metrics_{outcome}_authentication_total{{listener=\"SASL_PLAINTEXT\",mechanism=\"OAUTHBEARER\"}}"
            ),
        )
    };
    assert_eq!(
        (count("successful"), count("failed")),
        (Some(2.0), Some(7.0)),
        "{metrics}"
    );
    broker.shutdown().await.unwrap();
}

/// OAUTHBEARER is refused at startup without the listener's JAAS entry, as Kafka 4.1 refuses
/// it, and with a server callback handler other than the unsecured validator (KafkaIQ has no
/// other, and must not accept unsigned tokens where signed ones were asked for).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_needs_its_jaas_entry_and_refuses_another_validator() {
    use kafkaiq::config::{BrokerConfig, RawConfig};
    let data = tempfile::tempdir().unwrap();
    let error = |settings: &[String]| {
        let mut raw = RawConfig::default();
        raw.set("log.dirs", data.path().to_str().unwrap());
        for kv in settings {
            raw.apply_override(kv).unwrap();
        }
        BrokerConfig::from_raw(raw).err().map(|e| e.to_string())
    };
    let mut settings = oauth_settings(&[]);
    assert_eq!(error(&settings), None);
    settings.retain(|s| !s.contains("oauthbearer.sasl.jaas.config"));
    let e = error(&settings).expect("refused without the JAAS entry");
    assert!(
        e.contains("listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"),
        "{e}"
    );
    let e = error(&oauth_settings(&[
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    ]))
    .expect("refused with another validator");
    assert!(e.contains("sasl.server.callback.handler.class"), "{e}");
    assert_eq!(
        error(&oauth_settings(&[
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler",
        ])),
        None
    );
}

/// kcat (Debian's librdkafka 2.0.2) with librdkafka's built-in unsecured token
/// (`enable.sasl.oauthbearer.unsecure.jwt=true`, `sasl.oauthbearer.config=principal=alice
/// scope=kafka`) produces and consumes; without the required scope it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_oauthbearer_unsecured_token_produces_and_consumes() {
    let data = tempfile::tempdir().unwrap();
    let broker = start_ssl_broker(data.path(), &oauth_settings(&[])).await;
    let addr = broker.local_addr;
    let oauth = |config: &str| {
        vec![
            "sasl.mechanisms=OAUTHBEARER".to_owned(),
            // librdkafka's own token maker, off unless asked for.
            "enable.sasl.oauthbearer.unsecure.jwt=true".to_owned(),
            format!("sasl.oauthbearer.config={config}"),
        ]
    };
    let alice = oauth("principal=alice scope=kafka");
    let topic = "oauth-kcat";
    let (status, _) = tokio::task::spawn_blocking(move || {
        kcat_sasl(addr, &alice, &["-P", "-t", topic], b"k1\nk2\n")
    })
    .await
    .unwrap();
    assert_eq!(status, Some(0));
    let alice = oauth("principal=alice scope=kafka");
    let (status, out) = tokio::task::spawn_blocking(move || {
        kcat_sasl(
            addr,
            &alice,
            &["-C", "-t", topic, "-o", "beginning", "-e", "-q"],
            b"",
        )
    })
    .await
    .unwrap();
    assert_eq!((status, out.trim()), (Some(0), "k1\nk2"));
    let unscoped = oauth("principal=alice");
    let (status, _) = tokio::task::spawn_blocking(move || kcat_sasl(addr, &unscoped, &["-L"], b""))
        .await
        .unwrap();
    assert_ne!(
        status,
        Some(0),
        "a token without the required scope listed metadata"
    );
    broker.shutdown().await.unwrap();
}

/// Produces `values` in one batch to partition 0 of `topic` (acks=1) and expects them written.
async fn produce<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, topic: &str, values: &[&str]) {
    let produced: ProduceResponse = call(
        stream,
        9,
        &ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch(values, None)))])]),
    )
    .await
    .expect("the produce was not answered");
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
}

/// KIP-368 on the raw protocol: with `connections.max.reauth.ms` (here per listener and
/// mechanism) the SaslAuthenticate answer gives the session's lifetime; a SaslHandshake on the
/// authenticated connection re-authenticates it (not twice within a second: then it is a
/// request like any, ILLEGAL_SASL_STATE); the first request after the session's end closes the
/// connection unanswered; a re-authentication as another principal, or with another mechanism,
/// fails and closes. An OAUTHBEARER session ends no later than its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reauthentication_renews_a_session_and_an_expired_one_closes_the_connection() {
    let data = tempfile::tempdir().unwrap();
    let settings = oauth_settings(&[
        "connections.max.reauth.ms=60000",
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms=2000",
        // Below a produce of 8 KiB: the bound of frames before authentication only.
        "sasl.server.max.receive.size=4096",
    ]);
    let broker = start_ssl_broker(data.path(), &settings).await;
    let addr = broker.local_addr;

    let mut client = TcpStream::connect(addr).await.unwrap();
    let done = plain_exchange(&mut client, "alice", "alice-secret")
        .await
        .unwrap();
    assert_eq!((done.error_code, done.session_lifetime_ms), (0, 2000));
    produce_and_fetch(&mut client, "reauth").await;
    // Re-authentication, as the same user: a new session of the same length.
    let again = plain_exchange(&mut client, "alice", "alice-secret")
        .await
        .unwrap();
    assert_eq!((again.error_code, again.session_lifetime_ms), (0, 2000));
    // The first request after it, larger than sasl.server.max.receive.size, is served: that
    // bound is for frames before authentication, and this one is read while the exchange's
    // last answer is on its way.
    let large = "v".repeat(8 * 1024);
    produce(&mut client, "reauth", &[large.as_str()]).await;
    // So is the first request after a first authentication.
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    plain_exchange(&mut fresh, "alice", "alice-secret")
        .await
        .unwrap();
    produce(&mut fresh, "reauth", &[large.as_str()]).await;
    // A second one within a second is not begun: the handshake is an ordinary request.
    let early: SaslHandshakeResponse = call(
        &mut client,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await
    .unwrap();
    assert_eq!(early.error_code, 34, "ILLEGAL_SASL_STATE");
    let metadata: MetadataResponse = call(&mut client, 12, &MetadataRequest::default())
        .await
        .unwrap();
    assert_eq!(metadata.brokers.len(), 1);
    // The session ends 2 s after the re-authentication: the next request closes the connection.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let late = call(&mut client, 12, &MetadataRequest::default()).await;
    assert!(
        late.is_err(),
        "a request after the session's end was answered"
    );

    // Another principal on re-authentication: refused, and closed.
    let mut client = TcpStream::connect(addr).await.unwrap();
    plain_exchange(&mut client, "alice", "alice-secret")
        .await
        .unwrap();
    let other = plain_exchange(&mut client, "admin", "admin-secret")
        .await
        .unwrap();
    assert_eq!(other.error_code, 58);
    assert_eq!(
        other.error_message.as_deref(),
        Some("Cannot change principals during re-authentication from User.alice: User.admin")
    );
    assert!(closed(&mut client).await);

    // Another mechanism on re-authentication: the handshake is answered, its token is not.
    let mut client = TcpStream::connect(addr).await.unwrap();
    plain_exchange(&mut client, "alice", "alice-secret")
        .await
        .unwrap();
    let switched = sasl_exchange(
        &mut client,
        "OAUTHBEARER",
        oauth_message("", &token_for("alice", 60.0)),
    )
    .await;
    assert!(
        switched.is_err(),
        "a re-authentication with another mechanism was answered"
    );

    // OAUTHBEARER: the session ends with the token (60 s configured, the token lasts ~3 s);
    // re-authentication with a fresh token of the same subject renews it, bob's fails.
    let mut client = TcpStream::connect(addr).await.unwrap();
    let done = sasl_exchange(
        &mut client,
        "OAUTHBEARER",
        oauth_message("", &token_for("alice", 3.0)),
    )
    .await
    .unwrap();
    assert_eq!(done.error_code, 0);
    assert!(
        (1..=3_000).contains(&done.session_lifetime_ms),
        "{}",
        done.session_lifetime_ms
    );
    let renewed = sasl_exchange(
        &mut client,
        "OAUTHBEARER",
        oauth_message("", &token_for("alice", 30.0)),
    )
    .await
    .unwrap();
    assert_eq!(renewed.error_code, 0);
    assert!(
        (28_000..=30_000).contains(&renewed.session_lifetime_ms),
        "{}",
        renewed.session_lifetime_ms
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let bob = sasl_exchange(
        &mut client,
        "OAUTHBEARER",
        oauth_message("", &token_for("bob", 30.0)),
    )
    .await
    .unwrap();
    assert_eq!(bob.error_code, 58);
    assert!(closed(&mut client).await);

    let metrics = kafkaiq::insight::scrape::scrape(&broker.context);
    let sample = |series: &str| common::http::sample(&metrics, series);
    let labels = |m: &str| format!("{{listener=\"SASL_PLAINTEXT\",mechanism=\"{m}\"}}");
    assert_eq!(
        sample(&format!(
            "kafka_server_socket_server_metrics_successful_reauthentication_total{}",
            labels("PLAIN")
        )),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&format!(
            "kafka_server_socket_server_metrics_failed_reauthentication_total{}",
            labels("PLAIN")
        )),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample("kafka_server_socket_server_metrics_expired_connections_killed_total"),
        Some(1.0),
        "{metrics}"
    );
    broker.shutdown().await.unwrap();
}

/// librdkafka (the `rdkafka` crate, 2.12) re-authenticates (KIP-368) against a broker whose
/// sessions last 3 s and keeps producing on its connection for 9 s: every record is
/// delivered, and the broker counts re-authentications rather than connections closed at
/// expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_reauthenticates_and_keeps_producing() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let data = tempfile::tempdir().unwrap();
    let mut settings = sasl_settings("SASL_PLAINTEXT");
    settings.push("connections.max.reauth.ms=3000".to_owned());
    let broker = start_ssl_broker(data.path(), &settings).await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.local_addr.to_string())
        .set("security.protocol", "sasl_plaintext")
        .set("sasl.mechanisms", "PLAIN")
        .set("sasl.username", "alice")
        .set("sasl.password", "alice-secret")
        .set("message.timeout.ms", "20000")
        .set("linger.ms", "0")
        .create()
        .unwrap();
    for i in 0..30 {
        producer
            .send(
                FutureRecord::<(), _>::to("reauth-rdkafka").payload(&format!("record {i}")),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("record {i}: {e}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let metrics = kafkaiq::insight::scrape::scrape(&broker.context);
    let reauthentications = common::http::sample(
        &metrics,
        "kafka_server_socket_server_metrics_successful_reauthentication_total{listener=\"SASL_PLAINTEXT\",mechanism=\"PLAIN\"}",
    )
    .unwrap_or(0.0);
    assert!(reauthentications >= 2.0, "{metrics}");
    assert_eq!(
        common::http::sample(
            &metrics,
            "kafka_server_socket_server_metrics_failed_reauthentication_total{listener=\"SASL_PLAINTEXT\",mechanism=\"PLAIN\"}",
        ),
        None,
        "{metrics}"
    );
    drop(producer);
    broker.shutdown().await.unwrap();
}

/// IncrementalAlterConfigs of BROKER `resource` over `stream`, one entry per (key, value):
/// SET, or DELETE for `None`. (error code, message).
async fn alter_broker<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    resource: &str,
    configs: &[(&str, Option<&str>)],
) -> (i16, String) {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(resource.to_owned()))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_config_operation(if v.is_some() { 0 } else { 1 })
                            .with_value(v.map(|v| StrBytes::from_string(v.to_owned())))
                    })
                    .collect(),
            ),
    ]);
    let answer: IncrementalAlterConfigsResponse = call(stream, 1, &request).await.unwrap();
    let r = &answer.responses[0];
    let message = r.error_message.as_ref().map(|m| m.to_string());
    (r.error_code, message.unwrap_or_default())
}

/// The certificate a new TLS connection is served.
async fn served_certificate(addr: std::net::SocketAddr, pki: &Pki) -> Vec<u8> {
    let tls = tls_connect(addr, pki.client_config(None)).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0]
        .as_ref()
        .to_vec()
}

/// Waits (60 s at most) until new TLS connections are served `cert`.
async fn await_served(addr: std::net::SocketAddr, pki: &Pki, cert: &[u8], what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while served_certificate(addr, pki).await != cert {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kafka's dynamic key store (KIP-226): `listener.name.ssl.ssl.keystore.location` set through
/// IncrementalAlterConfigs on the broker's own resource serves the new certificate (same
/// subject and names) to new TLS connections, while a connection made before keeps working;
/// a store that does not load, another subject, fewer names, the cluster default and the
/// unprefixed key are refused with INVALID_REQUEST naming why, and the certificate served does
/// not change. DescribeConfigs lists the dynamic location and answers the password as
/// sensitive with no value. After a restart with the old `server.properties` the metadata
/// log's store is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keystore_altered_at_runtime_serves_new_handshakes_and_survives_a_restart() {
    const LOCATION: &str = "listener.name.ssl.ssl.keystore.location";
    const PASSWORD: &str = "listener.name.ssl.ssl.keystore.password";
    const INVALID_REQUEST: i16 = 42;
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let settings = pki.broker_settings("none");
    let broker = start_ssl_broker(data.path(), &settings).await;
    let addr = broker.local_addr;
    let id = broker.context.node_id.to_string();
    let first = served_certificate(addr, &pki).await;
    let mut old = tls_connect(addr, pki.client_config(None)).await.unwrap();
    assert_eq!(
        old.get_ref().1.peer_certificates().unwrap()[0].as_ref(),
        &first[..]
    );

    let store = |file: &str, cn: &str, sans: &[&str]| {
        let (cert, key) = pki.issue(cn, sans);
        let path = pki.write(file, &format!("{}{}", pem_of(&cert), key.serialize_pem()));
        (cert.as_ref().to_vec(), path)
    };
    let (second, second_path) = store("broker-2.pem", "broker", &["localhost"]);
    assert_ne!(first, second);
    assert_eq!(
        alter_broker(
            &mut old,
            &id,
            &[(LOCATION, Some(&second_path)), (PASSWORD, Some("s3cret"))]
        )
        .await,
        (0, String::new())
    );
    await_served(
        addr,
        &pki,
        &second,
        "new handshakes never got the new key store",
    )
    .await;
    // The connection made before the change still works, with its certificate.
    let versions: ApiVersionsResponse = call(&mut old, 3, &crate::common::api_versions_request())
        .await
        .unwrap();
    assert_eq!(versions.error_code, 0);
    assert_eq!(
        old.get_ref().1.peer_certificates().unwrap()[0].as_ref(),
        &first[..]
    );

    // Refusals: nothing changes.
    let mut admin = tls_connect(addr, pki.client_config(None)).await.unwrap();
    let missing = pki.dir.path().join("missing.pem");
    let (code, message) = alter_broker(
        &mut admin,
        &id,
        &[(LOCATION, Some(missing.to_str().unwrap()))],
    )
    .await;
    assert_eq!(code, INVALID_REQUEST, "{message}");
    assert!(
        message.contains(LOCATION) && message.contains("SSLFactory"),
        "{message}"
    );
    let (_, other_dn) = store("other.pem", "someone else", &["localhost"]);
    let (code, message) = alter_broker(&mut admin, &id, &[(LOCATION, Some(&other_dn))]).await;
    assert_eq!(code, INVALID_REQUEST, "{message}");
    assert!(
        message.contains("DistinguishedName does not match") && message.contains(LOCATION),
        "{message}"
    );
    let (_, fewer_names) = store("fewer.pem", "broker", &[]);
    let (code, message) = alter_broker(&mut admin, &id, &[(LOCATION, Some(&fewer_names))]).await;
    assert_eq!(code, INVALID_REQUEST, "{message}");
    assert!(
        message.contains("SubjectAltNames do not match"),
        "{message}"
    );
    let (code, message) = alter_broker(&mut admin, "", &[(LOCATION, Some(&second_path))]).await;
    assert_eq!(
        (code, message.as_str()),
        (
            INVALID_REQUEST,
            "Cannot update these configs at default cluster level, broker id must be \
             specified: Set(listener.name.ssl.ssl.keystore.location)"
        )
    );
    let (code, message) = alter_broker(
        &mut admin,
        &id,
        &[("ssl.keystore.location", Some(&second_path))],
    )
    .await;
    assert_eq!(
        (code, message.as_str()),
        (
            INVALID_REQUEST,
            "These security configs can be dynamically updated only per-listener using the \
             listener prefix: Set(ssl.keystore.location)"
        )
    );
    assert_eq!(served_certificate(addr, &pki).await, second);

    // DescribeConfigs: the location with its source, the password sensitive and null.
    use describe_configs_request::DescribeConfigsResource;
    let described: DescribeConfigsResponse = call(
        &mut admin,
        4,
        &DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_string(id.clone()))
                .with_configuration_keys(Some(vec![
                    StrBytes::from_static_str(LOCATION),
                    StrBytes::from_static_str(PASSWORD),
                ]))]),
    )
    .await
    .unwrap();
    let entries: Vec<(String, Option<String>, bool, i8, bool)> = described.results[0]
        .configs
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().map(|v| v.to_string()),
                c.is_sensitive,
                c.config_source,
                c.read_only,
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            (
                LOCATION.to_owned(),
                Some(second_path.clone()),
                false,
                2,
                false
            ),
            (PASSWORD.to_owned(), None, true, 2, false),
        ]
    );
    assert!(described.results[0].configs[1]
        .synonyms
        .iter()
        .all(|s| s.value.is_none()));
    drop((old, admin));
    broker.shutdown().await.unwrap();

    // The metadata log's key store wins over server.properties after a restart.
    let broker = start_ssl_broker(data.path(), &settings).await;
    await_served(
        broker.local_addr,
        &pki,
        &second,
        "after a restart the dynamic key store is not served",
    )
    .await;
    broker.shutdown().await.unwrap();
}

/// Apache Kafka's `kafka-configs` (ConfigCommand of the 4.1.1 jars) against an SSL listener:
/// `--alter --add-config listener.name.ssl.ssl.keystore.location=…` on the broker's id serves
/// the new certificate to new connections, `--describe` lists it and the password as
/// sensitive, and a store with another subject is refused with Kafka's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_configs_alters_a_listeners_keystore_over_ssl() {
    let data = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let broker = start_ssl_broker(data.path(), &pki.broker_settings("none")).await;
    let addr = broker.local_addr;
    let id = broker.context.node_id.to_string();
    let client = pki.write(
        "client.properties",
        &format!(
            "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n\
             ssl.endpoint.identification.algorithm=\n",
            pki.dir.path().join("ca.pem").display()
        ),
    );
    let bootstrap = addr.to_string();
    let configs = |args: &[&str]| {
        let mut all = vec![
            "--bootstrap-server",
            &bootstrap,
            "--command-config",
            &client,
            "--entity-type",
            "brokers",
            "--entity-name",
            &id,
        ];
        all.extend_from_slice(args);
        tokio::task::block_in_place(|| kafka_tool(CONFIG_COMMAND, &all))
    };
    let store = |file: &str, cn: &str| {
        let (cert, key) = pki.issue(cn, &["localhost"]);
        let path = pki.write(file, &format!("{}{}", pem_of(&cert), key.serialize_pem()));
        (cert.as_ref().to_vec(), path)
    };
    let (second, second_path) = store("broker-2.pem", "broker");
    let (code, out) = configs(&[
        "--alter",
        "--add-config",
        &format!(
            "listener.name.ssl.ssl.keystore.location={second_path},\
             listener.name.ssl.ssl.keystore.password=s3cret"
        ),
    ]);
    assert_eq!(code, 0, "{out}");
    await_served(
        addr,
        &pki,
        &second,
        "kafka-configs' key store is not served",
    )
    .await;

    let (code, out) = configs(&["--describe"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "listener.name.ssl.ssl.keystore.location={second_path} sensitive=false"
        )) && out.contains("listener.name.ssl.ssl.keystore.password=null sensitive=true")
            && !out.contains("s3cret"),
        "{out}"
    );

    let (_, other) = store("other.pem", "someone else");
    let (code, out) = configs(&[
        "--alter",
        "--add-config",
        &format!("listener.name.ssl.ssl.keystore.location={other}"),
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("InvalidRequestException") && out.contains("DistinguishedName does not match"),
        "{out}"
    );
    assert_eq!(served_certificate(addr, &pki).await, second);
    broker.shutdown().await.unwrap();
}

/// Kafka's ConfigCommand: in the broker jar up to 4.1, in kafka-tools after.
const CONFIG_COMMAND: &str = "kafka.admin.ConfigCommand";

/// Runs one of Apache Kafka's tools (the jars of `integration/kafka-libs.sh`) with `args`: its
/// exit code and output.
fn kafka_tool(main_class: &str, args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new("java")
        .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(format!("{}/*", common::cluster::kafka_libs().display()))
        .arg(main_class)
        .args(args)
        .output()
        .expect("run java");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let text: Vec<&str> = text.lines().filter(|l| !l.starts_with("SLF4J")).collect();
    (out.status.code().unwrap_or(-1), text.join("\n"))
}
