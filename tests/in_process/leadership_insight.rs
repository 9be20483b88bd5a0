//! Leadership insight on a real 3-broker cluster: what `/metrics`, `/api/history` and
//! `kafkaiq leadership history` say while a broker is killed and comes back.
//!
//! - Bytes in on the leader match the bytes produced.
//! - A killed broker: the survivors report under-replicated partitions and count ISR shrinks;
//!   every partition it led has a new leader, and its history says the broker was fenced.
//! - Its restart: it catches up (ISR expansions, "caught up" in the history), under-replicated
//!   partitions fall back to 0, and the periodic rebalance gives it its leaderships back — the
//!   history says `auto_rebalance`, and the active controller's election count by reason too.
//! - The history is the same on every node, the restarted one included (it is replayed from the
//!   metadata log), and the CLI prints it, finding the HTTP listener through DescribeConfigs.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::{Cluster, ClusterKind};
use common::http::{get, sample};
use common::{batch, produce_by_name, RawClient};
use serde_json::Value;

const TOPIC: &str = "orders";

async fn metrics(cluster: &Cluster, id: i32) -> Option<String> {
    let node = cluster.nodes.get(&id)?;
    node.process.as_ref()?;
    let (status, _, body) = get(node.http_addr(), "/metrics").await;
    (status == 200).then_some(body)
}

/// A sample's value on node `id` (0 when the series is absent: a counter not yet touched).
async fn value(cluster: &Cluster, id: i32, series: &str) -> Option<f64> {
    Some(sample(&metrics(cluster, id).await?, series).unwrap_or(0.0))
}

/// The sum of a series over the running nodes.
async fn total(cluster: &Cluster, series: &str) -> f64 {
    let mut sum = 0.0;
    for id in cluster.running() {
        sum += value(cluster, id, series).await.unwrap_or(0.0);
    }
    sum
}

/// Waits until the running nodes together report `want` under-replicated partitions.
async fn under_replicated(cluster: &Cluster, what: &str, want: f64) {
    cluster
        .wait_for(what, Duration::from_secs(30), || async {
            let under = total(
                cluster,
                "kafka_server_replicamanager_underreplicatedpartitions",
            )
            .await;
            (under == want).then_some(())
        })
        .await;
}

async fn history(cluster: &Cluster, id: i32, partition: i32) -> Option<Vec<Value>> {
    let (status, _, body) = get(
        cluster.nodes[&id].http_addr(),
        &format!("/api/history/{TOPIC}-{partition}"),
    )
    .await;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["changes"].as_array().cloned()
}

fn causes(changes: &[Value]) -> Vec<String> {
    changes
        .iter()
        .map(|c| c["cause"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_history_follow_a_killed_and_restarted_broker() {
    let mut cluster = Cluster::start(
        ClusterKind::KafkaIq,
        "insight",
        3,
        &[
            "auto.leader.rebalance.enable=true",
            "leader.imbalance.check.interval.seconds=2",
            "leader.imbalance.per.broker.percentage=0",
        ],
    );
    cluster
        .wait_for(
            "three brokers in one cluster",
            Duration::from_secs(90),
            || cluster.formed(),
        )
        .await;
    assert_eq!(cluster.create_topic(1, TOPIC, 3).await, Some(0));
    let parts = cluster
        .wait_for(
            "orders led by preferred replicas with full ISRs",
            Duration::from_secs(30),
            || async {
                let v = cluster.partitions(1, TOPIC).await?;
                (v.len() == 3
                    && v.iter()
                        .all(|p| p.isr.len() == 3 && p.leader == p.replicas[0]))
                .then_some(v)
            },
        )
        .await;

    // Bytes in, on the leader of orders-0, are the bytes of the batch produced there.
    let leader0 = parts[0].leader;
    let records = batch(&["a", "bb", "ccc"], None);
    // The leader may learn of its leadership a moment after node 1 shows it: until then it
    // answers NOT_LEADER_OR_FOLLOWER (6), which a client retries.
    let mut client = RawClient::connect(cluster.nodes[&leader0].client_addr()).await;
    let produce = produce_by_name(TOPIC, 0, records.clone(), -1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = client.call(9, &produce).await;
        let code = r.responses[0].partition_responses[0].error_code;
        assert!(code == 0 || code == 6, "produce: error {code}");
        if code == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "orders-0 never accepted the produce"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bytes_in = format!("kafka_server_brokertopicmetrics_bytesin_total{{topic=\"{TOPIC}\"}}");
    assert_eq!(
        value(&cluster, leader0, &bytes_in).await,
        Some(records.len() as f64)
    );
    for other in (1..=3).filter(|&b| b != leader0) {
        assert_eq!(
            value(&cluster, other, &bytes_in).await,
            Some(0.0),
            "broker {other}"
        );
    }
    // The per-partition load, measured on the leader only: the batch's bytes over the
    // weights of the span measured, at least the minimum span (a little less, decayed since),
    // and more than over the whole one-minute time constant.
    let load_in =
        format!("kafkaiq_partition_load_bytes_in_per_sec{{topic=\"{TOPIC}\",partition=\"0\"}}");
    let rate = value(&cluster, leader0, &load_in)
        .await
        .expect("leader's load");
    let tau = kafkaiq::metrics::PARTITION_LOAD_TAU_MS;
    let min_span = kafkaiq::metrics::PARTITION_LOAD_MIN_SPAN_MS;
    let most = records.len() as f64 / (tau * (1.0 - (-min_span / tau).exp()) / 1000.0);
    let least = 0.9 * records.len() as f64 / (tau / 1000.0);
    assert!(rate > least && rate <= most, "{rate} vs [{least}, {most}]");
    for other in (1..=3).filter(|&b| b != leader0) {
        assert_eq!(
            value(&cluster, other, &load_in).await,
            Some(0.0),
            "broker {other}"
        );
    }

    // Kill -9 a broker that is not the active controller (so the cause is a plain fencing).
    let controller = cluster
        .describe_quorum(1)
        .await
        .expect("DescribeQuorum")
        .leader_id
        .0;
    let victim = (1..=3).find(|&b| b != controller).unwrap();
    let led: Vec<i32> = parts
        .iter()
        .filter(|p| p.leader == victim)
        .map(|p| p.partition)
        .collect();
    assert_eq!(led.len(), 1, "each broker prefers one of three: {parts:?}");
    let observer = controller;
    let shrinks_before = total(&cluster, "kafka_server_replicamanager_isrshrinks_total").await;
    let expands_before = total(&cluster, "kafka_server_replicamanager_isrexpands_total").await;
    cluster.kill(victim);
    under_replicated(
        &cluster,
        "survivors report every partition under-replicated",
        3.0,
    )
    .await;
    let shrinks = total(&cluster, "kafka_server_replicamanager_isrshrinks_total").await;
    assert!(
        shrinks >= shrinks_before + 2.0,
        "ISR shrinks {shrinks_before} → {shrinks}"
    );
    let fenced = cluster
        .wait_for(
            "the killed broker's partition led elsewhere, fenced in its history",
            Duration::from_secs(30),
            || async {
                let h = history(&cluster, observer, led[0]).await?;
                let last = h.first()?;
                (last["cause"] == "broker_fenced" && last["leader"] != victim).then_some(h)
            },
        )
        .await;
    let last = &fenced[0];
    assert_eq!(last["broker_id"], victim);
    assert_eq!(last["leader_before"], victim);
    let description = last["description"].as_str().unwrap();
    assert!(
        description.contains(&format!("broker {victim} fenced")),
        "{description}"
    );
    // A partition it followed lost it from the ISR for the same cause, its leader unchanged.
    let followed = parts.iter().find(|p| p.leader != victim).unwrap();
    let h = history(&cluster, observer, followed.partition)
        .await
        .unwrap();
    assert_eq!(h[0]["cause"], "broker_fenced", "{h:?}");
    assert_eq!(h[0]["leader"], followed.leader);
    assert!(!h[0]["isr"]
        .as_array()
        .unwrap()
        .contains(&Value::from(victim)));

    // Restart: it catches up and rejoins every ISR, then the rebalance hands its
    // leadership back.
    cluster.spawn(victim);
    cluster
        .wait_for("the restarted broker back", Duration::from_secs(90), || {
            cluster.formed()
        })
        .await;
    cluster
        .wait_for(
            "the restarted broker leading its partition again, full ISRs",
            Duration::from_secs(60),
            || async {
                let v = cluster.partitions(observer, TOPIC).await?;
                (v[led[0] as usize].leader == victim && v.iter().all(|p| p.isr.len() == 3))
                    .then_some(())
            },
        )
        .await;
    under_replicated(&cluster, "no partition under-replicated", 0.0).await;
    let expands = total(&cluster, "kafka_server_replicamanager_isrexpands_total").await;
    assert!(
        expands >= expands_before + 3.0,
        "ISR expansions {expands_before} → {expands}"
    );
    let active = cluster
        .describe_quorum(1)
        .await
        .expect("DescribeQuorum")
        .leader_id
        .0;
    let rebalanced = value(
        &cluster,
        active,
        "kafkaiq_controller_leader_elections_total{reason=\"auto_rebalance\"}",
    )
    .await
    .unwrap();
    assert!(rebalanced >= 1.0, "auto_rebalance elections {rebalanced}");

    // The history of the partition it led: created, fenced, caught up, rebalanced back.
    let h = history(&cluster, observer, led[0]).await.unwrap();
    let seen = causes(&h);
    assert_eq!(
        seen.first().map(String::as_str),
        Some("auto_rebalance"),
        "{seen:?}"
    );
    assert_eq!(h[0]["leader"], victim);
    assert!(
        h.iter().any(|c| c["cause"] == "alter_partition"
            && c["description"]
                .as_str()
                .unwrap()
                .contains(&format!("follower {victim} caught up"))),
        "{h:#?}"
    );
    assert_eq!(seen.last().map(String::as_str), Some("created"), "{seen:?}");

    // Every node keeps the same history; the restarted one replayed it.
    let mut by_node = BTreeMap::new();
    for id in 1..=3 {
        let h = cluster
            .wait_for(
                "the same history everywhere",
                Duration::from_secs(10),
                || async {
                    let h = history(&cluster, id, led[0]).await?;
                    (h.len() == by_node.values().next().map_or(h.len(), Vec::len)).then_some(h)
                },
            )
            .await;
        by_node.insert(id, h);
    }
    assert!(by_node.values().all(|h| *h == by_node[&1]), "{by_node:#?}");

    // The CLI prints it, finding the HTTP listener with DescribeConfigs.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafkaiq"))
        .args([
            "leadership",
            "history",
            &format!("{TOPIC}-{}", led[0]),
            "--bootstrap-server",
            &cluster.nodes[&observer].client_addr().to_string(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("TIME"), "{text}");
    assert_eq!(lines.len(), h.len() + 1, "{text}");
    assert!(lines[1].contains("auto-rebalance"), "{text}");
    assert!(text.contains(&format!("broker {victim} fenced")), "{text}");
    println!("{text}");
    cluster.stop_all();
}
