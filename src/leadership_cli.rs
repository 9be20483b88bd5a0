//! `kafkaiq leadership brokers|partitions [--under-replicated]|history [TOPIC-PARTITION]
//! --bootstrap-server HOST:PORT`: the leadership page's views as text tables, for a running
//! cluster.
//!
//! It asks over the Kafka protocol with the crate's own client ([`crate::client`]):
//! DescribeCluster (v2, fenced brokers included) and Metadata (all topics), as Kafka's own tools
//! do, rather than the HTTP JSON API. So `--bootstrap-server` is any broker's client listener,
//! as for `kafka-topics`, no second address is needed, and it works against Apache Kafka too.
//! The answers are turned into a [`MetadataImage`] and shown through the same
//! [`crate::insight::views`] as the page, so both read the same. What Metadata does not carry
//! (partition epochs, high watermarks, replica lag) is on the page only.
//!
//! The history (why leadership is where it is) is KafkaIQ's own and no Kafka API carries it:
//! `history` reads `/api/history` from the HTTP listener of the bootstrap broker, found with
//! DescribeConfigs (the broker's `http.listener`, a read-only broker config) unless `--http`
//! names it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeConfigsRequest, MetadataRequest};
use kafka_protocol::protocol::StrBytes;
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    Brokers,
    Partitions {
        under_replicated: bool,
    },
    /// The leadership history of one partition (`topic-N`) or of all; `http` is the HTTP
    /// listener to ask, found through the bootstrap broker when `None`.
    History {
        partition: Option<String>,
        http: Option<String>,
    },
}

/// Asks `bootstrap` (`HOST:PORT`) and returns the table.
pub async fn run(bootstrap: &str, view: View) -> Result<String, String> {
    if let View::History { partition, http } = view {
        return history(bootstrap, partition.as_deref(), http).await;
    }
    let image = fetch_image(bootstrap).await?;
    Ok(match view {
        View::Brokers => brokers_table(&crate::insight::views::brokers(&image, -1, 10)),
        View::Partitions { under_replicated } => partitions_table(
            &crate::insight::views::partitions(
                &image,
                &Default::default(),
                &Default::default(),
                |_| 1,
            ),
            under_replicated,
        ),
        View::History { .. } => unreachable!("answered above"),
    })
}

fn host_port(what: &str, address: &str) -> Result<(String, u16), String> {
    address
        .rsplit_once(':')
        .and_then(|(h, p)| {
            Some((
                h.trim_matches(['[', ']']).to_owned(),
                p.parse::<u16>().ok()?,
            ))
        })
        .ok_or_else(|| format!("{what} {address}: expected HOST:PORT"))
}

fn bootstrap_client(bootstrap: &str) -> Result<Client, String> {
    let (host, port) = host_port("--bootstrap-server", bootstrap)?;
    let client = Client::new(
        ClientConfig {
            client_id: "kafkaiq-leadership".into(),
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS),
            ..ClientConfig::default()
        },
        None,
    );
    client
        .set_endpoint(BOOTSTRAP_NODE, Endpoint::new(&host, port))
        .map_err(|e| e.to_string())?;
    Ok(client)
}

async fn history(
    bootstrap: &str,
    partition: Option<&str>,
    http: Option<String>,
) -> Result<String, String> {
    if let Some(p) = partition {
        if crate::insight::views::parse_topic_partition(p).is_none() {
            return Err(format!("{p}: expected TOPIC-PARTITION, e.g. orders-0"));
        }
    }
    let http = match http {
        Some(h) => h,
        None => http_listener_of(bootstrap).await?,
    };
    let path = match partition {
        Some(p) => format!("/api/history/{p}"),
        None => "/api/history".to_owned(),
    };
    let view = http_get_json(&http, &path).await?;
    Ok(history_table(&view))
}

/// The `http.listener` of the broker behind `bootstrap`, as its DescribeConfigs says; a
/// wildcard host is replaced by the bootstrap host.
async fn http_listener_of(bootstrap: &str) -> Result<String, String> {
    let (bootstrap_host, bootstrap_port) = host_port("--bootstrap-server", bootstrap)?;
    let client = bootstrap_client(bootstrap)?;
    let cluster = client
        .send(BOOTSTRAP_NODE, DescribeClusterRequest::default())
        .await
        .map_err(|e| format!("DescribeCluster to {bootstrap}: {e}"))?
        .body;
    let node = cluster
        .brokers
        .iter()
        .find(|b| b.port == i32::from(bootstrap_port) && b.host.as_str() == bootstrap_host)
        .or_else(|| {
            cluster
                .brokers
                .iter()
                .find(|b| b.port == i32::from(bootstrap_port))
        })
        .map_or(cluster.controller_id.0, |b| b.broker_id.0);
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(node.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("http.listener")]))]);
    let answer = client
        .send(BOOTSTRAP_NODE, request)
        .await
        .map_err(|e| format!("DescribeConfigs to {bootstrap}: {e}"))?
        .body;
    let value = answer
        .results
        .first()
        .filter(|r| r.error_code == 0)
        .and_then(|r| {
            r.configs
                .iter()
                .find(|c| c.name.as_str() == "http.listener")
        })
        .and_then(|c| c.value.as_ref())
        .map(|v| v.to_string())
        .filter(|v| v != "none")
        .ok_or_else(|| {
            format!(
                "broker {node} at {bootstrap} has no http.listener: it keeps no leadership \
                 history (Apache Kafka keeps none), or pass --http HOST:PORT"
            )
        })?;
    let (host, port) = host_port("http.listener", &value)?;
    let host = if host.is_empty() || host == "0.0.0.0" || host == "::" {
        bootstrap_host
    } else {
        host
    };
    Ok(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// One GET over HTTP/1.0 (the listener serves one request per connection), its body as JSON.
async fn http_get_json(address: &str, path: &str) -> Result<Value, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect to {address}: {e}"))?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write to {address}: {e}"))?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|e| format!("read from {address}: {e}"))?;
        Ok::<_, String>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("GET http://{address}{path}: no answer within {timeout:?}"))??;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET http://{address}{path}: malformed answer"))?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!(
            "GET http://{address}{path}: HTTP {status}: {}",
            body.trim()
        ));
    }
    serde_json::from_str(body).map_err(|e| format!("GET http://{address}{path}: {e}"))
}

async fn fetch_image(bootstrap: &str) -> Result<MetadataImage, String> {
    let client = bootstrap_client(bootstrap)?;
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
                history: BTreeMap::new(),
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

/// The history view (`insight::views::history`) as a table, newest first.
pub fn history_table(view: &Value) -> String {
    let rows: Vec<Vec<String>> = view["changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let time = c["time_ms"].as_i64().filter(|t| *t > 0).map_or_else(
                || "-".to_owned(),
                |t| {
                    let secs = t.div_euclid(1000);
                    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
                    format!("{h:02}:{m:02}:{s:02}.{:03}Z", t.rem_euclid(1000))
                },
            );
            vec![
                time,
                format!("{}-{}", text(&c["topic"]), text(&c["partition"])),
                text(&c["leader_epoch"]),
                text(&c["cause"]).replace('_', "-"),
                text(&c["description"]),
            ]
        })
        .collect();
    let mut out = table(&["TIME", "PARTITION", "EPOCH", "CAUSE", "WHAT"], &rows);
    let (total, shown) = (view["total"].as_u64().unwrap_or(0), rows.len() as u64);
    if total > shown {
        let _ = writeln!(out, "({shown} newest of {total} changes)");
    }
    out
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

    #[test]
    fn history_table_shows_time_cause_and_what() {
        let view = json!({"total": 1, "changes": [
            {"topic": "orders", "partition": 0, "time_ms": 1_764_590_400_123_i64,
             "leader_epoch": 3, "cause": "broker_fenced",
             "description": "leader 1 → 2, ISR without 1: broker 1 fenced (session ended)"},
        ]});
        let t = history_table(&view);
        assert_eq!(
            t.lines().nth(1).unwrap(),
            "12:00:00.123Z  orders-0   3      broker-fenced  leader 1 → 2, ISR without 1: broker 1 fenced (session ended)"
        );
    }
}
