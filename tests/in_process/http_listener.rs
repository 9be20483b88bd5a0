//! The HTTP listener (`http.listener`) on a real socket: `/metrics` in OpenMetrics text with
//! Kafka's JMX-exporter names and values that follow what was produced and fetched, the JSON
//! API, the leadership page, 4xx answers to bad requests, and its bounds (a silent client is
//! answered 408 and never holds up a scrape). When `integration/.venv` has `prometheus_client`
//! (installed by `integration/suites/47-metrics.sh`), the scrape also goes through its strict
//! OpenMetrics parser here.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::http::{get, parse_http, raw_http, read_http, sample, send_http};
use common::{batch, start_broker, RawClient};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

async fn produce(client: &mut RawClient, topic: &str, records: Bytes) {
    let r = client
        .call(
            9,
            &ProduceRequest::default()
                .with_acks(1)
                .with_timeout_ms(5_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name(topic))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records))])]),
        )
        .await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_produce_and_fetch_and_bad_requests_get_4xx() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["http.listener=127.0.0.1:0"]).await;
    let http = broker.http_addr.expect("an HTTP listener");
    let mut client = RawClient::connect(broker.local_addr).await;
    let created = client
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name("metered"))
                    .with_num_partitions(2)
                    .with_replication_factor(1)]),
        )
        .await;
    assert_eq!(created.topics[0].error_code, 0);
    let first = batch(&["a", "b", "c"], None);
    let second = batch(&["d", "e"], None);
    let produced = (first.len() + second.len()) as f64;
    produce(&mut client, "metered", first).await;
    produce(&mut client, "metered", second).await;
    let fetched = client
        .call(
            12,
            &FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name("metered"))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]),
        )
        .await;
    let fetched_bytes = fetched.responses[0].partitions[0]
        .records
        .as_ref()
        .map_or(0, |r| r.len()) as f64;
    assert!(fetched_bytes > 0.0);

    let (status, head, text) = get(http, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
    let expect = |series: &str, want: f64| {
        assert_eq!(sample(&text, series), Some(want), "{series} in:\n{text}");
    };
    // Two partitions of `metered` plus nothing else yet: this node leads both.
    expect("kafka_server_replicamanager_leadercount", 2.0);
    expect("kafka_server_replicamanager_partitioncount", 2.0);
    expect("kafka_server_replicamanager_underreplicatedpartitions", 0.0);
    expect("kafka_server_replicamanager_underminisrpartitioncount", 0.0);
    expect("kafka_server_replicamanager_offlinereplicacount", 0.0);
    expect("kafka_server_replicamanager_isrshrinks_total", 0.0);
    expect("kafka_server_replicamanager_isrexpands_total", 0.0);
    expect(
        "kafka_controller_kafkacontroller_activecontrollercount",
        1.0,
    );
    expect(
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        0.0,
    );
    expect(
        "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
        0.0,
    );
    expect("kafka_controller_kafkacontroller_globalpartitioncount", 2.0);
    expect("kafka_controller_kafkacontroller_globaltopiccount", 1.0);
    expect(
        "kafka_controller_controllerstats_uncleanleaderelections_total",
        0.0,
    );
    expect("kafka_server_brokertopicmetrics_bytesin_total", produced);
    expect(
        "kafka_server_brokertopicmetrics_bytesin_total{topic=\"metered\"}",
        produced,
    );
    expect("kafka_server_brokertopicmetrics_messagesin_total", 5.0);
    expect(
        "kafka_server_brokertopicmetrics_messagesin_total{topic=\"metered\"}",
        5.0,
    );
    expect(
        "kafka_server_brokertopicmetrics_bytesout_total",
        fetched_bytes,
    );
    expect(
        "kafka_server_brokertopicmetrics_bytesout_total{topic=\"metered\"}",
        fetched_bytes,
    );
    // Fetch bytes by role: all to a consumer, from the leader (one node leads everything).
    expect(
        "kafkaiq_fetch_consumer_bytes_total{role=\"leader\"}",
        fetched_bytes,
    );
    expect("kafkaiq_fetch_consumer_bytes_total{role=\"follower\"}", 0.0);
    expect(
        "kafka_server_brokertopicmetrics_replicationbytesout_total",
        0.0,
    );
    // One node follows nothing: no fetcher lag.
    expect(
        "kafka_server_replicafetchermanager_maxlag{clientId=\"Replica\"}",
        0.0,
    );
    expect(
        "kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"}",
        2.0,
    );
    expect(
        "kafka_network_requestmetrics_totaltimems_count{request=\"Fetch\"}",
        1.0,
    );
    expect(
        "kafka_cluster_partition_insyncreplicascount{topic=\"metered\",partition=\"0\"}",
        1.0,
    );
    expect(
        "kafka_cluster_partition_underreplicated{topic=\"metered\",partition=\"1\"}",
        0.0,
    );
    // Both produces (acks=1) passed every stage but the acks=all wait.
    for stage in ["queue", "decode", "append", "encode", "write", "total"] {
        expect(
            &format!("kafkaiq_produce_stage_time_ms_count{{stage=\"{stage}\"}}"),
            2.0,
        );
    }
    assert!(!text.contains("kafkaiq_produce_stage_time_ms_count{stage=\"acks_wait\"}"));
    assert!(text.contains("# TYPE kafka_network_requestmetrics_totaltimems histogram"));
    assert!(text.contains("# TYPE kafka_server_brokertopicmetrics_bytesin counter"));

    // The JSON API.
    let (status, _, body) = get(http, "/api/brokers").await;
    assert_eq!(status, 200);
    let brokers: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(brokers["brokers"][0]["id"], 1);
    assert_eq!(brokers["brokers"][0]["state"], "alive");
    assert_eq!(brokers["brokers"][0]["partitions_led"], 2);
    assert_eq!(brokers["brokers"][0]["imbalanced"], false);
    let (status, _, body) = get(http, "/api/partitions").await;
    assert_eq!(status, 200);
    let partitions: serde_json::Value = serde_json::from_str(&body).unwrap();
    let p0 = &partitions["partitions"][0];
    assert_eq!(
        (p0["topic"].as_str(), p0["partition"].as_i64()),
        (Some("metered"), Some(0))
    );
    assert_eq!(p0["health"], "healthy");
    assert_eq!(p0["leader"], 1);
    assert_eq!(p0["preferred_leader"], 1);
    assert_eq!(p0["local"]["high_watermark"], 5);
    assert_eq!(p0["local"]["replicas"][0]["lag"], 0);
    // The load measured here as leader (the load balancer's input): two produces, one fetch.
    let load = &p0["local"]["load"];
    let per_sec = |k: &str| load[k].as_f64().unwrap_or(-1.0);
    assert!(per_sec("bytes_in_per_sec") > 0.0, "{load}");
    assert!(per_sec("bytes_out_per_sec") > 0.0, "{load}");
    assert!(per_sec("requests_per_sec") > 0.0, "{load}");
    assert!(load["measured_ms"].is_u64(), "{load}");
    let p1 = &partitions["partitions"][1];
    assert_eq!(p1["partition"], 1);
    assert!(
        p1["local"]["load"].is_null(),
        "nothing produced to it: {p1}"
    );
    let (status, _, body) = get(http, "/api/quorum").await;
    assert_eq!(status, 200);
    let quorum: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(quorum["leader_id"], 1);
    assert_eq!(quorum["this_node_is_active_controller"], true);
    let (status, head, page) = get(http, "/").await;
    assert_eq!(status, 200);
    assert!(head.contains("text/html"));
    assert!(page.contains("/api/partitions"));
    assert!(page.contains("/api/groups"));
    assert!(page.contains("load in / out / requests"));

    // A KIP-848 group: its epochs on /api/groups and in /metrics.
    client
        .call(
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![StrBytes::from_static_str("web-g")]),
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hb = client
            .call(
                1,
                &ConsumerGroupHeartbeatRequest::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("web-g")))
                    .with_member_id(StrBytes::from_static_str("m-1"))
                    .with_member_epoch(0)
                    .with_rebalance_timeout_ms(30_000)
                    .with_subscribed_topic_names(Some(vec![name("metered")]))
                    .with_topic_partitions(Some(vec![])),
            )
            .await;
        if hb.error_code == 0 {
            assert_eq!(hb.member_epoch, 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "heartbeat error {}",
            hb.error_code
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body) = get(http, "/api/groups").await;
    assert_eq!(status, 200);
    let groups: serde_json::Value = serde_json::from_str(&body).unwrap();
    let g = &groups["consumer_groups"][0];
    assert_eq!(g["group_id"], "web-g");
    assert_eq!(g["state"], "Stable");
    assert_eq!(
        (g["group_epoch"].as_i64(), g["assignment_epoch"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(g["members"], 1);
    assert_eq!(g["members_reconciling"], 0);
    let (_, _, text) = get(http, "/metrics").await;
    assert_eq!(
        sample(&text, r#"kafkaiq_consumer_group_epoch{group="web-g"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"kafka_server_group_coordinator_metrics_consumer_group_count{state="stable"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"kafka_server_group_coordinator_metrics_group_count{protocol="consumer"}"#
        ),
        Some(1.0)
    );

    // HEAD answers the same head without a body.
    let (status, head, body) = raw_http(http, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status, 200);
    assert!(head.contains("Content-Length: "));
    assert!(body.is_empty());

    // Bad requests: 4xx, never a hang or a crash.
    let big = format!("GET / HTTP/1.1\r\nX-Filler: {}\r\n\r\n", "x".repeat(10_000));
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GET /nope HTTP/1.1\r\n\r\n".to_vec(), 404),
        (b"POST /metrics HTTP/1.1\r\n\r\n".to_vec(), 405),
        (
            b"GET /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody".to_vec(),
            413,
        ),
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (b"GET /metrics HTTP/3\r\n\r\n".to_vec(), 505),
        (
            b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n".to_vec(),
            400,
        ),
        (big.into_bytes(), 431),
    ];
    for (request, want) in cases {
        let (status, _, _) = raw_http(http, &request).await;
        assert_eq!(status, want, "{:?}", String::from_utf8_lossy(&request));
    }

    prometheus_parser_check(&text);
    drop(client);
    broker.shutdown().await.unwrap();
}

/// A client that sends half a request and then nothing gets 408 after the request timeout, and
/// while it waits — and while more connections than the bound are open — scrapes and Kafka
/// requests are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_gets_408_and_holds_up_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["http.listener=127.0.0.1:0"]).await;
    let http = broker.http_addr.expect("an HTTP listener");
    let started = Instant::now();
    // Connected and half a request sent before the scrape below.
    let silent = tokio::spawn(read_http(
        send_http(http, b"GET /metrics HTTP/1.1\r\n").await,
    ));
    let (status, _, _) = get(http, "/metrics").await;
    assert_eq!(
        status, 200,
        "a scrape is answered while another client is silent"
    );
    // Beyond the connection bound: the extra ones are closed, the broker still serves Kafka.
    let mut idle = Vec::new();
    for _ in 0..kafkaiq::limits::HTTP_CONNECTIONS_MAX + 4 {
        idle.push(TcpStream::connect(http).await.unwrap());
    }
    let mut client = RawClient::connect(broker.local_addr).await;
    let r = client.call(3, &crate::common::api_versions_request()).await;
    assert_eq!(r.error_code, 0);
    let (status, _, body) = silent.await.unwrap();
    assert_eq!(status, 408, "{body}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(kafkaiq::limits::HTTP_REQUEST_TIMEOUT_MS - 500),
        "{waited:?}"
    );
    drop(idle);
    // Once the idle ones close, scrapes are served again (as soon as the listener has seen
    // them close; until then an extra connection is closed unanswered).
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let mut s = send_http(http, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        if !out.is_empty() || Instant::now() >= deadline {
            break parse_http(out);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.0, 200);
    drop(client);
    broker.shutdown().await.unwrap();
}

/// One client address holds at most `HTTP_CONNECTIONS_PER_CLIENT_MAX` of the listener's slots:
/// while it tries to hold all of them (silent connections), the ones past its bound are closed
/// unanswered at once and a client from another address (127.0.0.2) is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_hold_every_http_slot() {
    use kafkaiq::limits::{HTTP_CONNECTIONS_MAX, HTTP_CONNECTIONS_PER_CLIENT_MAX};
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &["http.listener=127.0.0.1:0"]).await;
    let http = broker.http_addr.expect("an HTTP listener");
    let mut held = Vec::new();
    for _ in 0..HTTP_CONNECTIONS_MAX {
        held.push(TcpStream::connect(http).await.unwrap());
    }
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(http).await.unwrap();
    other
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), other.read_to_end(&mut out))
        .await
        .expect("answered")
        .unwrap();
    assert!(
        !out.is_empty(),
        "a client from another address was refused: one address holds every slot"
    );
    assert_eq!(parse_http(out).0, 200);
    let mut closed = 0;
    for s in &mut held {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(300), s.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert_eq!(
        closed,
        HTTP_CONNECTIONS_MAX - HTTP_CONNECTIONS_PER_CLIENT_MAX
    );
    drop(held);
    broker.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_http_port_stops_startup_naming_it_and_none_binds_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut raw = kafkaiq::config::RawConfig::default();
    raw.set("listeners", "PLAINTEXT://127.0.0.1:0");
    raw.set("log.dirs", dir.path().to_str().unwrap());
    raw.set("http.listener", &format!("127.0.0.1:{port}"));
    let config = kafkaiq::config::BrokerConfig::from_raw(raw).unwrap().config;
    let err = match kafkaiq::node::Node::start(config).await {
        Ok(_) => panic!("started on a taken port"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]).await;
    assert_eq!(
        broker.http_addr, None,
        "the test default is http.listener=none"
    );
    broker.shutdown().await.unwrap();
}

/// The strict OpenMetrics parser of Python's `prometheus_client`, when installed in
/// `integration/.venv` (the metrics suite installs it).
fn prometheus_parser_check(text: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("integration/.venv/bin/python");
    let has_parser = python.exists()
        && std::process::Command::new(&python)
            .args(["-c", "import prometheus_client"])
            .status()
            .is_ok_and(|s| s.success());
    if !has_parser {
        eprintln!("prometheus_client not installed in integration/.venv; the metrics suite checks the parse");
        return;
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    let out = std::process::Command::new(&python)
        .arg(root.join("integration/python/check_metrics.py"))
        .arg("--file")
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the scrape: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
