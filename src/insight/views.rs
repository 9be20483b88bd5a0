//! The JSON API's views: pure functions of a metadata image, this node's partition states and
//! the quorum description, so they are tested without a broker.
//!
//! - brokers: each registered broker's state, partitions led against partitions it is the
//!   preferred leader of, and its imbalance ratio against
//!   `leader.imbalance.per.broker.percentage` (Kafka's auto-rebalance check).
//! - partitions: leader, preferred leader, replicas, ISR, epochs, health; offline,
//!   under-min-ISR and under-replicated ones first. High watermark and each replica's log end
//!   offset and lag are known only where this node leads the partition.
//! - quorum: voters, leader, epoch, high watermark, each voter's lag.
//! - history: the leader and ISR changes the image keeps (`metadata::history`), newest first,
//!   each with its cause in words; of one partition or of all.

use std::collections::{BTreeMap, HashMap};

use kafkaiq_storage::TopicPartition;
use serde_json::{json, Value};

use super::LocalPartition;
use crate::controller::QuorumDescription;
use crate::limits::HISTORY_API_CHANGES_MAX;
use crate::metadata::{LeadershipChange, MetadataImage, PartitionRegistration};
use crate::replica::Role;

/// How a registered broker stands.
pub fn broker_state(fenced: bool, in_controlled_shutdown: bool) -> &'static str {
    if fenced {
        "fenced"
    } else if in_controlled_shutdown {
        "shutting_down"
    } else {
        "alive"
    }
}

/// Per broker: (partitions led, partitions it is the preferred leader of, of which led by
/// another or by none).
fn leadership_counts(image: &MetadataImage) -> BTreeMap<i32, (usize, usize, usize)> {
    let mut counts: BTreeMap<i32, (usize, usize, usize)> = BTreeMap::new();
    for topic in image.topics.values() {
        for p in topic.partitions.values() {
            if p.leader >= 0 {
                counts.entry(p.leader).or_default().0 += 1;
            }
            if let Some(&preferred) = p.replicas.first() {
                let c = counts.entry(preferred).or_default();
                c.1 += 1;
                if p.leader != preferred {
                    c.2 += 1;
                }
            }
        }
    }
    counts
}

/// `/api/brokers`.
pub fn brokers(image: &MetadataImage, node_id: i32, imbalance_percentage: i32) -> Value {
    let counts = leadership_counts(image);
    let threshold = f64::from(imbalance_percentage) / 100.0;
    let brokers: Vec<Value> = image
        .brokers
        .values()
        .map(|b| {
            let (led, preferred, not_led) = counts.get(&b.node_id).copied().unwrap_or_default();
            // Kafka's ratio: preferred-leader partitions it does not lead / all it prefers.
            let ratio = if preferred == 0 {
                0.0
            } else {
                not_led as f64 / preferred as f64
            };
            json!({
                "id": b.node_id,
                "rack": b.rack,
                "state": broker_state(b.fenced, b.in_controlled_shutdown),
                "broker_epoch": b.broker_epoch,
                "endpoints": b.listeners.iter().map(|(name, e)| json!({
                    "listener": name, "host": e.host, "port": e.port,
                })).collect::<Vec<_>>(),
                "partitions_led": led,
                "partitions_preferred": preferred,
                "preferred_not_led": not_led,
                "imbalance_ratio": ratio,
                "imbalanced": ratio > threshold,
                "is_controller": b.node_id == image.controller_id,
            })
        })
        .collect();
    json!({
        "node_id": node_id,
        "controller_id": image.controller_id,
        "cluster_id": image.cluster_id,
        "metadata_offset": image.metadata_offset,
        "imbalance_threshold": threshold,
        "brokers": brokers,
    })
}

/// How a partition stands, worst first (the order `/api/partitions` sorts by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    Offline,
    UnderMinIsr,
    UnderReplicated,
    Healthy,
}

impl Health {
    pub fn of(p: &PartitionRegistration, min_isr: i32) -> Health {
        if p.leader < 0 {
            Health::Offline
        } else if (p.isr.len() as i64) < i64::from(min_isr) {
            Health::UnderMinIsr
        } else if p.isr.len() < p.replicas.len() {
            Health::UnderReplicated
        } else {
            Health::Healthy
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Health::Offline => "offline",
            Health::UnderMinIsr => "under_min_isr",
            Health::UnderReplicated => "under_replicated",
            Health::Healthy => "healthy",
        }
    }
}

/// What this node knows of a partition it leads: its high watermark, last stable offset, open
/// transactions, log end offset and each replica's.
fn local_view(local: &LocalPartition) -> Value {
    let (state, log_end_offset) = (&local.state, local.log_end_offset);
    let replicas: Vec<Value> = state
        .replicas
        .iter()
        .map(|&id| {
            let leo = if state.role == Role::Leader && id == state.leader {
                Some(log_end_offset)
            } else {
                state
                    .remote_replicas
                    .get(&id)
                    .map(|r| r.log_end_offset)
                    .filter(|&o| o >= 0)
            };
            json!({
                "id": id,
                "log_end_offset": leo,
                "lag": leo.map(|o| (log_end_offset - o).max(0)),
            })
        })
        .collect();
    json!({
        "high_watermark": state.high_watermark,
        // Rates per second, decaying over a minute, and how long they have been measured.
        "load": local.load.map(|l| json!({
            "bytes_in_per_sec": l.bytes_in.round(),
            "bytes_out_per_sec": l.bytes_out.round(),
            "requests_per_sec": (l.requests * 10.0).round() / 10.0,
            "measured_ms": l.measured_ms,
        })),
        "last_stable_offset": local.last_stable_offset,
        "open_transactions": local.open_transactions,
        "log_end_offset": log_end_offset,
        "replicas": replicas,
    })
}

/// `/api/partitions`: every partition of the image, worst health first, then by topic and
/// partition. `min_isr` gives a topic's effective `min.insync.replicas`; `dirty` the dirty
/// ratio of each compacted log on this node (the share of its cleanable bytes not yet cleaned).
pub fn partitions(
    image: &MetadataImage,
    local: &HashMap<TopicPartition, LocalPartition>,
    dirty: &HashMap<TopicPartition, f64>,
    min_isr: impl Fn(&str) -> i32,
) -> Value {
    let mut rows: Vec<(Health, &str, i32, Value)> = Vec::new();
    for topic in image.topics.values() {
        let min = min_isr(&topic.name);
        for (&index, p) in &topic.partitions {
            let health = Health::of(p, min);
            let tp = TopicPartition {
                topic: topic.name.clone(),
                partition: index,
            };
            let leads_here = local
                .get(&tp)
                .filter(|l| l.state.role == Role::Leader)
                .map(local_view);
            let dirty_ratio = dirty.get(&tp).map(|r| (r * 1000.0).round() / 1000.0);
            rows.push((
                health,
                &topic.name,
                index,
                json!({
                    "topic": topic.name,
                    "partition": index,
                    "leader": p.leader,
                    "preferred_leader": p.replicas.first(),
                    "replicas": p.replicas,
                    "isr": p.isr,
                    "offline_replicas": image.offline_replicas(p),
                    "leader_epoch": p.leader_epoch,
                    "partition_epoch": p.partition_epoch,
                    "min_isr": min,
                    "health": health.as_str(),
                    "leader_is_preferred": p.leader >= 0 && p.replicas.first() == Some(&p.leader),
                    "last_change": topic
                        .history
                        .get(&index)
                        .and_then(|h| h.back())
                        .map(|c| change_view(&topic.name, index, c)),
                    "local": leads_here,
                    "dirty_ratio": dirty_ratio,
                }),
            ));
        }
    }
    rows.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    json!({
        "metadata_offset": image.metadata_offset,
        "partitions": rows.into_iter().map(|r| r.3).collect::<Vec<_>>(),
    })
}

fn change_view(topic: &str, partition: i32, c: &LeadershipChange) -> Value {
    json!({
        "topic": topic,
        "partition": partition,
        "time_ms": c.cause.time_ms,
        "cause": c.cause.kind.as_str(),
        "broker_id": (c.cause.broker_id >= 0).then_some(c.cause.broker_id),
        "leader_before": c.leader_before,
        "leader": c.leader,
        "leader_epoch": c.leader_epoch,
        "isr_before": c.isr_before,
        "isr": c.isr,
        "description": c.describe(),
    })
}

/// `/api/history` (every partition) and `/api/history/<topic>-<partition>` (`only`): the
/// changes the image keeps, newest first, at most [`HISTORY_API_CHANGES_MAX`]. `None` when
/// `only` names no partition of the image.
pub fn history(image: &MetadataImage, only: Option<(&str, i32)>) -> Option<Value> {
    if let Some((t, p)) = only {
        image.topic(t)?.partitions.get(&p)?;
    }
    let mut rows: Vec<(i64, i32, &str, i32, &LeadershipChange)> = Vec::new();
    for topic in image.topics.values() {
        if only.is_some_and(|(t, _)| t != topic.name) {
            continue;
        }
        for (&partition, changes) in &topic.history {
            if only.is_some_and(|(_, p)| p != partition) {
                continue;
            }
            rows.extend(changes.iter().map(|c| {
                (
                    c.cause.time_ms,
                    c.leader_epoch,
                    topic.name.as_str(),
                    partition,
                    c,
                )
            }));
        }
    }
    // Newest first; within one decision (one time), by topic and partition.
    rows.sort_by(|a, b| (b.0, a.2, a.3, b.1).cmp(&(a.0, b.2, b.3, a.1)));
    let total = rows.len();
    rows.truncate(HISTORY_API_CHANGES_MAX);
    Some(json!({
        "metadata_offset": image.metadata_offset,
        "total": total,
        "changes": rows.into_iter().map(|(_, _, t, p, c)| change_view(t, p, c)).collect::<Vec<_>>(),
    }))
}

/// Splits `orders-0` into topic and partition at the last `-` (topic names may hold `-`).
pub fn parse_topic_partition(s: &str) -> Option<(&str, i32)> {
    let (topic, partition) = s.rsplit_once('-')?;
    let partition = partition.parse().ok().filter(|p: &i32| *p >= 0)?;
    (!topic.is_empty()).then_some((topic, partition))
}

/// `/api/quorum`: the metadata quorum as this node's voter last saw it.
pub fn quorum(q: &QuorumDescription, node_id: i32, active: bool) -> Value {
    let voters: Vec<Value> = q
        .voters
        .iter()
        .map(|v| {
            json!({
                "node_id": v.node_id,
                "log_end_offset": v.log_end_offset,
                // A follower voter does not know the others' progress (-1): no lag then.
                "lag": (v.log_end_offset >= 0).then(|| (q.high_watermark - v.log_end_offset).max(0)),
                "last_fetch_timestamp": v.last_fetch_timestamp,
                "last_caught_up_timestamp": v.last_caught_up_timestamp,
                "is_leader": v.node_id == q.leader_id,
            })
        })
        .collect();
    json!({
        "node_id": node_id,
        "this_node_is_active_controller": active,
        "leader_id": q.leader_id,
        "leader_epoch": q.leader_epoch,
        "high_watermark": q.high_watermark,
        "voters": voters,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use uuid::Uuid;

    use super::*;
    use crate::metadata::{BrokerRegistration, LeaderRecoveryState, TopicImage};

    fn partition(leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 3,
            partition_epoch: 5,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    fn image(parts: Vec<PartitionRegistration>) -> MetadataImage {
        let mut image = MetadataImage {
            controller_id: 1,
            ..Default::default()
        };
        for id in 1..=3 {
            let mut b = BrokerRegistration::new(id, Uuid::from_u128(id as u128), None);
            b.fenced = id == 3;
            image.brokers.insert(id, b);
        }
        image.topics.insert(
            "t".into(),
            Arc::new(TopicImage {
                name: "t".into(),
                id: Uuid::from_u128(9),
                partitions: parts
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| (i as i32, p))
                    .collect(),
                configs: Default::default(),
                history: Default::default(),
            }),
        );
        image
    }

    #[test]
    fn health_is_offline_then_under_min_isr_then_under_replicated() {
        let cases = [
            (partition(-1, &[1, 2], &[1]), 1, Health::Offline),
            (partition(1, &[1, 2, 3], &[1]), 2, Health::UnderMinIsr),
            (
                partition(1, &[1, 2, 3], &[1, 2]),
                2,
                Health::UnderReplicated,
            ),
            (partition(1, &[1, 2, 3], &[1, 2, 3]), 2, Health::Healthy),
            (partition(1, &[1], &[1]), 2, Health::UnderMinIsr),
        ];
        for (p, min, want) in cases {
            assert_eq!(Health::of(&p, min), want, "{p:?} min {min}");
        }
    }

    #[test]
    fn partitions_are_listed_worst_first_with_the_preferred_leader() {
        let image = image(vec![
            partition(1, &[1, 2], &[1, 2]),
            partition(-1, &[3], &[3]),
            partition(2, &[1, 2], &[2]),
        ]);
        let v = partitions(&image, &HashMap::new(), &HashMap::new(), |_| 1);
        let rows = v["partitions"].as_array().unwrap();
        let order: Vec<(i64, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r["partition"].as_i64().unwrap(),
                    r["health"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            order,
            vec![(1, "offline"), (2, "under_replicated"), (0, "healthy")]
        );
        assert_eq!(rows[1]["preferred_leader"], 1);
        assert_eq!(rows[1]["leader_is_preferred"], false);
        assert_eq!(rows[0]["offline_replicas"], json!([3]));
        assert_eq!(rows[2]["local"], Value::Null);
    }

    #[test]
    fn a_broker_not_leading_its_preferred_partitions_is_imbalanced_past_the_threshold() {
        // Broker 1 prefers partitions 0 and 2 but leads only 0; broker 2 leads 1 and 2.
        let image = image(vec![
            partition(1, &[1, 2], &[1, 2]),
            partition(2, &[2, 1], &[1, 2]),
            partition(2, &[1, 2], &[1, 2]),
        ]);
        let v = brokers(&image, 1, 10);
        let b = v["brokers"].as_array().unwrap();
        assert_eq!(b[0]["partitions_led"], 1);
        assert_eq!(b[0]["partitions_preferred"], 2);
        assert_eq!(b[0]["imbalance_ratio"], 0.5);
        assert_eq!(b[0]["imbalanced"], true);
        assert_eq!(b[1]["partitions_led"], 2);
        assert_eq!(b[1]["imbalanced"], false);
        assert_eq!(b[2]["state"], "fenced");
        assert_eq!(b[0]["is_controller"], true);
    }

    #[test]
    fn quorum_lag_is_behind_the_high_watermark() {
        let q = QuorumDescription {
            leader_id: 1,
            leader_epoch: 4,
            high_watermark: 100,
            voters: vec![
                crate::controller::VoterDescription {
                    node_id: 1,
                    log_end_offset: 100,
                    last_fetch_timestamp: -1,
                    last_caught_up_timestamp: -1,
                },
                crate::controller::VoterDescription {
                    node_id: 2,
                    log_end_offset: 90,
                    last_fetch_timestamp: -1,
                    last_caught_up_timestamp: -1,
                },
            ],
        };
        let v = quorum(&q, 2, false);
        assert_eq!(v["voters"][1]["lag"], 10);
        let mut unknown = q.clone();
        unknown.voters[1].log_end_offset = -1;
        assert_eq!(quorum(&unknown, 2, false)["voters"][1]["lag"], Value::Null);
        assert_eq!(v["voters"][0]["is_leader"], true);
    }

    #[test]
    fn history_is_newest_first_with_causes_and_one_partition_can_be_asked_for() {
        use crate::metadata::{CauseKind, ChangeCause, MetadataRecord};
        let topic_id = Uuid::from_u128(9);
        let record = |p: i32, leader: i32, epoch: i32, isr: &[i32]| MetadataRecord::Partition {
            topic_id,
            partition: p,
            registration: PartitionRegistration {
                leader_epoch: epoch,
                ..partition(leader, &[1, 2, 3], isr)
            },
        };
        let cause = |kind, broker_id, time_ms| {
            MetadataRecord::ChangeCause(ChangeCause {
                kind,
                broker_id,
                time_ms,
            })
        };
        let image = MetadataImage::default().apply(&[
            MetadataRecord::Topic {
                name: "orders-eu".into(),
                topic_id,
            },
            cause(CauseKind::Created, -1, 100),
            record(0, 1, 0, &[1, 2, 3]),
            record(1, 2, 0, &[2, 3, 1]),
            cause(CauseKind::BrokerFenced, 1, 200),
            record(0, 2, 1, &[2, 3]),
            cause(CauseKind::AutoRebalance, -1, 300),
            record(0, 1, 2, &[2, 3, 1]),
        ]);
        let all = history(&image, None).unwrap();
        assert_eq!(all["total"], 4);
        let causes: Vec<&str> = all["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["cause"].as_str().unwrap())
            .collect();
        assert_eq!(
            causes,
            ["auto_rebalance", "broker_fenced", "created", "created"]
        );
        assert_eq!(
            all["changes"][1]["description"],
            "leader 1 → 2, ISR without 1: broker 1 fenced (session ended)"
        );
        assert_eq!(all["changes"][1]["broker_id"], 1);
        assert_eq!(all["changes"][0]["broker_id"], Value::Null);

        let one = history(&image, parse_topic_partition("orders-eu-1")).unwrap();
        assert_eq!(one["total"], 1);
        assert_eq!(one["changes"][0]["partition"], 1);
        assert!(history(&image, Some(("orders-eu", 7))).is_none());
        assert!(history(&image, Some(("nope", 0))).is_none());
        assert_eq!(parse_topic_partition("orders"), None);
        assert_eq!(parse_topic_partition("-3"), None);

        let rows = partitions(&image, &HashMap::new(), &HashMap::new(), |_| 1);
        let p0 = rows["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["partition"] == 0)
            .unwrap();
        assert_eq!(p0["last_change"]["cause"], "auto_rebalance");
    }
}

/// `/api/groups`: the KIP-848 consumer groups this node coordinates, with their epochs and
/// how their rebalances go, and how many classic groups it coordinates.
pub fn groups(consumer: &[crate::group::ConsumerGroupView], classic: usize) -> Value {
    json!({
        "classic_groups": classic,
        "consumer_groups": consumer.iter().map(|g| json!({
            "group_id": g.group_id,
            "state": g.state,
            "group_epoch": g.group_epoch,
            "assignment_epoch": g.assignment_epoch,
            "members": g.members,
            "members_reconciling": g.members_reconciling,
            "rebalances": g.rebalances,
            "last_rebalance_ms": g.last_rebalance_ms,
        })).collect::<Vec<_>>(),
    })
}
