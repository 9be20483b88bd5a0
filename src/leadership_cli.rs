//! `kafkaiq leadership brokers|partitions [--under-replicated] --bootstrap-server HOST:PORT`:
//! the leadership page's views as text tables, for a running cluster.
//!
//! It asks over the Kafka protocol with the crate's own client ([`crate::client`]):
//! DescribeCluster (v2, fenced brokers included) and Metadata (all topics), as Kafka's own tools
//! do, rather than the HTTP JSON API. So `--bootstrap-server` is any broker's client listener,
//! as for `kafka-topics`, no second address is needed, and it works against Apache Kafka too.
//! The answers are turned into a [`MetadataImage`] and shown through the same
//! [`crate::insight::views`] as the page, so both read the same. What Metadata does not carry
//! (partition epochs, high watermarks, replica lag) is on the page only.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{DescribeClusterRequest, MetadataRequest};
use serde_json::Value;
use uuid::Uuid;

use crate::client::{Client, ClientConfig, Endpoint};
use crate::metadata::{
    BrokerRegistration, LeaderRecoveryState, MetadataImage, PartitionRegistration, TopicImage,
};

/// The pseudo node id the bootstrap server is reached under.
const BOOTSTRAP_NODE: i32 = -1;
/// How long each request may take.
const REQUEST_TIMEOUT_MS: u64 = 15_000;

/// Which table to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Brokers,
    Partitions { under_replicated: bool },
}

/// Asks `bootstrap` (`HOST:PORT`) and returns the table.
pub async fn run(bootstrap: &str, view: View) -> Result<String, String> {
    let image = fetch_image(bootstrap).await?;
    Ok(match view {
        View::Brokers => brokers_table(&crate::insight::views::brokers(&image, -1, 10)),
        View::Partitions { under_replicated } => partitions_table(
            &crate::insight::views::partitions(&image, &Default::default(), |_| 1),
            under_replicated,
        ),
    })
}

async fn fetch_image(bootstrap: &str) -> Result<MetadataImage, String> {
    let (host, port) = bootstrap
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("--bootstrap-server {bootstrap}: expected HOST:PORT"))?;
    let client = Client::new(
        ClientConfig {
            client_id: "kafkaiq-leadership".into(),
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS),
            ..ClientConfig::default()
        },
        None,
    );
    client
        .set_endpoint(BOOTSTRAP_NODE, Endpoint::new(host, port))
        .map_err(|e| e.to_string())?;
    let cluster = client
        .send(
            BOOTSTRAP_NODE,
            DescribeClusterRequest::default().with_include_fenced_brokers(true),
        )
        .await
        .map_err(|e| format!("DescribeCluster to {bootstrap}: {e}"))?
        .body;
    if cluster.error_code != 0 {
        return Err(format!(
            "DescribeCluster: error code {}",
            cluster.error_code
        ));
    }
    let metadata = client
        .send(
            BOOTSTRAP_NODE,
            MetadataRequest::default()
                .with_topics(None)
                .with_allow_auto_topic_creation(false),
        )
        .await
        .map_err(|e| format!("Metadata to {bootstrap}: {e}"))?
        .body;
    let mut image = MetadataImage {
        cluster_id: cluster.cluster_id.to_string(),
        controller_id: cluster.controller_id.0,
        ..Default::default()
    };
    for b in &cluster.brokers {
        let mut r = BrokerRegistration::new(
            b.broker_id.0,
            Uuid::nil(),
            b.rack.as_ref().map(|r| r.to_string()),
        );
        r.fenced = b.is_fenced;
        r = r.with_listener(
            "client",
            b.host.to_string(),
            u16::try_from(b.port).unwrap_or(0),
            crate::metadata::security_protocol::PLAINTEXT,
        );
        image.brokers.insert(b.broker_id.0, r);
    }
    for t in &metadata.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
            continue;
        };
        let partitions: BTreeMap<i32, PartitionRegistration> = t
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition_index,
                    PartitionRegistration {
                        replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
                        isr: p.isr_nodes.iter().map(|r| r.0).collect(),
                        leader: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        // Not in Metadata: shown as -1.
                        partition_epoch: -1,
                        leader_recovery_state: LeaderRecoveryState::Recovered,
                        adding_replicas: Vec::new(),
                        removing_replicas: Vec::new(),
                    },
                )
            })
            .collect();
        image.topics.insert(
            name.clone(),
            Arc::new(TopicImage {
                name,
                id: t.topic_id,
                partitions,
                configs: BTreeMap::new(),
            }),
        );
    }
    Ok(image)
}

/// Left-aligned columns, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", text.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

fn ids(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The brokers view (`insight::views::brokers`) as a table.
pub fn brokers_table(view: &Value) -> String {
    let rows: Vec<Vec<String>> = view["brokers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            vec![
                text(&b["id"]),
                text(&b["rack"]),
                text(&b["state"]),
                if b["is_controller"] == true {
                    "yes"
                } else {
                    ""
                }
                .into(),
                text(&b["partitions_led"]),
                text(&b["partitions_preferred"]),
                text(&b["preferred_not_led"]),
                format!(
                    "{:.0}%",
                    b["imbalance_ratio"].as_f64().unwrap_or(0.0) * 100.0
                ),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "RACK",
            "STATE",
            "CONTROLLER",
            "LED",
            "PREFERRED",
            "PREFERRED-NOT-LED",
            "IMBALANCE",
        ],
        &rows,
    )
}

/// The partitions view (`insight::views::partitions`) as a table; with `under_replicated`,
/// only partitions whose ISR is smaller than their replicas (offline ones included).
pub fn partitions_table(view: &Value, under_replicated: bool) -> String {
    let rows: Vec<Vec<String>> = view["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            !under_replicated
                || p["isr"].as_array().map_or(0, Vec::len)
                    < p["replicas"].as_array().map_or(0, Vec::len)
                || p["health"] == "offline"
        })
        .map(|p| {
            let leader = p["leader"].as_i64().unwrap_or(-1);
            vec![
                text(&p["topic"]),
                text(&p["partition"]),
                if leader < 0 {
                    "none".into()
                } else {
                    leader.to_string()
                },
                text(&p["preferred_leader"]),
                text(&p["leader_epoch"]),
                ids(&p["replicas"]),
                ids(&p["isr"]),
                ids(&p["offline_replicas"]),
                text(&p["health"]).replace('_', "-"),
            ]
        })
        .collect();
    table(
        &[
            "TOPIC",
            "PARTITION",
            "LEADER",
            "PREFERRED",
            "LEADER-EPOCH",
            "REPLICAS",
            "ISR",
            "OFFLINE",
            "STATUS",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tables_align_columns_and_filter_under_replicated() {
        let view = json!({"partitions": [
            {"topic": "orders", "partition": 0, "leader": 2, "preferred_leader": 1,
             "leader_epoch": 4, "replicas": [1, 2, 3], "isr": [2, 3], "offline_replicas": [1],
             "health": "under_replicated"},
            {"topic": "orders", "partition": 1, "leader": 2, "preferred_leader": 2,
             "leader_epoch": 1, "replicas": [2, 3, 1], "isr": [2, 3, 1], "offline_replicas": [],
             "health": "healthy"},
        ]});
        let all = partitions_table(&view, false);
        assert_eq!(all.lines().count(), 3);
        let under = partitions_table(&view, true);
        assert_eq!(
            under,
            "TOPIC   PARTITION  LEADER  PREFERRED  LEADER-EPOCH  REPLICAS  ISR  OFFLINE  STATUS\n\
             orders  0          2       1          4             1,2,3     2,3  1        under-replicated\n"
        );
    }

    #[test]
    fn brokers_table_shows_state_and_imbalance() {
        let view = json!({"brokers": [
            {"id": 1, "rack": "r1", "state": "fenced", "is_controller": false,
             "partitions_led": 0, "partitions_preferred": 2, "preferred_not_led": 2,
             "imbalance_ratio": 1.0},
        ]});
        let t = brokers_table(&view);
        assert!(
            t.lines().nth(1).unwrap().starts_with("1   r1    fenced"),
            "{t}"
        );
        assert!(t.ends_with("100%\n"), "{t}");
    }
}
