//! `/metrics`: one scrape, in the OpenMetrics text format of the `prometheus-client` crate.
//!
//! Names follow the JMX exporter rules of Strimzi's and Confluent's Kafka dashboards, which
//! turn `kafka.server:type=ReplicaManager,name=LeaderCount` into
//! `kafka_server_replicamanager_leadercount` and a `…PerSec` meter's count into a `_total`
//! counter, so their dashboards and alerts work unchanged. KafkaIQ's own additions start with
//! `kafkaiq_`. The README lists every metric with its meaning.
//!
//! Gauges are computed here from the image and the replica manager; counters and histograms
//! are the live ones the paths increment ([`crate::metrics`]), registered into a registry
//! built for this scrape. The cluster-wide controller gauges (offline partitions, preferred
//! replica imbalance, global counts) are reported by the active controller only, and 0
//! elsewhere, as Kafka's `KafkaController` metrics are: summed over every node they give the
//! cluster's value.

use std::collections::HashMap;

use kafkaiq_storage::TopicPartition;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::config::topic::TopicSettings;
use crate::context::Context;
use crate::metadata::MetadataImage;
use crate::replica::partition::PartitionState;
use crate::replica::Role;

/// The content type of [`scrape`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// What this node's partitions add up to (Kafka's `ReplicaManager` gauges).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplicaGauges {
    pub partition_count: i64,
    pub leader_count: i64,
    pub under_replicated: i64,
    pub under_min_isr: i64,
    pub at_min_isr: i64,
}

pub fn replica_gauges<'a>(states: impl Iterator<Item = &'a PartitionState>) -> ReplicaGauges {
    let mut g = ReplicaGauges::default();
    for s in states {
        g.partition_count += 1;
        if s.role != Role::Leader {
            continue;
        }
        g.leader_count += 1;
        let isr = s.isr().len() as i64;
        if isr < s.replicas.len() as i64 {
            g.under_replicated += 1;
        }
        let min = i64::from(s.min_insync_replicas);
        if isr < min {
            g.under_min_isr += 1;
        } else if isr == min {
            g.at_min_isr += 1;
        }
    }
    g
}

/// The cluster as the active controller reports it (Kafka's `KafkaController` gauges).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ControllerGauges {
    pub global_topic_count: i64,
    pub global_partition_count: i64,
    pub offline_partitions: i64,
    pub preferred_replica_imbalance: i64,
    pub active_brokers: i64,
    pub fenced_brokers: i64,
}

pub fn controller_gauges(image: &MetadataImage) -> ControllerGauges {
    let mut g = ControllerGauges {
        global_topic_count: image.topics.len() as i64,
        ..Default::default()
    };
    for topic in image.topics.values() {
        for p in topic.partitions.values() {
            g.global_partition_count += 1;
            if p.leader < 0 {
                g.offline_partitions += 1;
            }
            // Kafka's `hasPreferredLeader`: a partition without a leader is imbalanced too.
            if p.leader < 0 || p.replicas.first() != Some(&p.leader) {
                g.preferred_replica_imbalance += 1;
            }
        }
    }
    for b in image.brokers.values() {
        if b.fenced {
            g.fenced_brokers += 1;
        } else {
            g.active_brokers += 1;
        }
    }
    g
}

/// Kafka's `ReplicaFetcherManager` `MaxLag`: the largest lag, in records, of any partition
/// this broker follows, each the leader's high watermark less the follower's next fetch
/// offset as of the fetcher's last answer.
pub fn max_fetcher_lag<'a>(states: impl Iterator<Item = &'a PartitionState>) -> i64 {
    states
        .filter(|s| s.role == Role::Follower)
        .filter_map(|s| s.follower_lag)
        .max()
        .unwrap_or(0)
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

/// One scrape of this node's metrics.
pub fn scrape(ctx: &Context) -> String {
    let image = ctx.image();
    let local = super::local_partitions(ctx);
    let mut r = Registry::default();

    // kafka.server:type=ReplicaManager
    let g = replica_gauges(local.values().map(|l| &l.state));
    gauge(
        &mut r,
        "kafka_server_replicamanager_partitioncount",
        "Partitions with a replica on this broker",
        g.partition_count,
    );
    gauge(
        &mut r,
        "kafka_server_replicamanager_leadercount",
        "Partitions this broker leads",
        g.leader_count,
    );
    gauge(
        &mut r,
        "kafka_server_replicamanager_underreplicatedpartitions",
        "Partitions this broker leads whose ISR is smaller than their replica set",
        g.under_replicated,
    );
    gauge(
        &mut r,
        "kafka_server_replicamanager_underminisrpartitioncount",
        "Partitions this broker leads whose ISR is smaller than min.insync.replicas",
        g.under_min_isr,
    );
    gauge(
        &mut r,
        "kafka_server_replicamanager_atminisrpartitioncount",
        "Partitions this broker leads whose ISR is exactly min.insync.replicas",
        g.at_min_isr,
    );
    gauge(
        &mut r,
        "kafka_server_replicamanager_offlinereplicacount",
        "Replicas on this broker whose log could not be opened",
        ctx.replicas.offline_count() as i64,
    );
    let stats = &ctx.replicas.stats;
    r.register(
        "kafka_server_replicamanager_isrshrinks",
        "ISR changes committed with this broker as leader that removed replicas",
        stats.isr_shrinks.clone(),
    );
    r.register(
        "kafka_server_replicamanager_isrexpands",
        "ISR changes committed with this broker as leader that added replicas",
        stats.isr_expands.clone(),
    );
    r.register(
        "kafka_server_replicamanager_failedisrupdates",
        "ISR changes this broker asked for that the controller refused",
        stats.failed_isr_updates.clone(),
    );

    // kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica
    let max_lag = Family::<Labels, Gauge>::default();
    max_lag
        .get_or_create(&vec![("clientId", "Replica".to_owned())])
        .set(max_fetcher_lag(local.values().map(|l| &l.state)));
    r.register(
        "kafka_server_replicafetchermanager_maxlag",
        "Largest lag in records (leader high watermark less next fetch offset) of the partitions this broker follows",
        max_lag,
    );

    // kafka.controller:type=KafkaController
    let active = ctx.controller.is_active();
    let c = if active {
        controller_gauges(&image)
    } else {
        ControllerGauges::default()
    };
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_activecontrollercount",
        "1 on the active controller, 0 elsewhere",
        i64::from(active),
    );
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "Partitions without a leader (active controller only)",
        c.offline_partitions,
    );
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
        "Partitions not led by their preferred (first) replica (active controller only)",
        c.preferred_replica_imbalance,
    );
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_globalpartitioncount",
        "Partitions in the cluster (active controller only)",
        c.global_partition_count,
    );
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_globaltopiccount",
        "Topics in the cluster (active controller only)",
        c.global_topic_count,
    );
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_activebrokercount",
        "Registered unfenced brokers (active controller only)",
        c.active_brokers,
    );
    gauge(
        &mut r,
        "kafka_controller_kafkacontroller_fencedbrokercount",
        "Registered fenced brokers (active controller only)",
        c.fenced_brokers,
    );

    // kafka.controller:type=ControllerStats
    let cs = ctx.controller.stats();
    r.register("kafka_controller_controllerstats_leaderelectionrateandtimems", "Leader elections committed by this node as active controller, by time from decision to commit in ms", cs.leader_elections.clone());
    r.register(
        "kafka_controller_controllerstats_uncleanleaderelections",
        "Leaders elected from outside the ISR",
        cs.unclean_leader_elections.clone(),
    );
    r.register(
        "kafkaiq_controller_leader_elections",
        "Leader elections committed by this node as active controller, by reason",
        cs.elections_by_reason.clone(),
    );

    // kafka.server:type=BrokerTopicMetrics, per topic and for all topics
    let topic_stats = &ctx.topic_stats;
    topic_stats.retain_topics(|t| image.topics.contains_key(t));
    let bytes_in = Family::<Labels, Counter>::default();
    let bytes_out = Family::<Labels, Counter>::default();
    let messages_in = Family::<Labels, Counter>::default();
    let mut rows = vec![(None, topic_stats.all.get())];
    rows.extend(
        topic_stats
            .per_topic()
            .into_iter()
            .map(|(t, v)| (Some(t), v)),
    );
    for (topic, (b_in, b_out, m_in)) in rows {
        let labels: Labels = topic.map(|t| vec![("topic", t)]).unwrap_or_default();
        bytes_in.get_or_create(&labels).inc_by(b_in);
        bytes_out.get_or_create(&labels).inc_by(b_out);
        messages_in.get_or_create(&labels).inc_by(m_in);
    }
    r.register(
        "kafka_server_brokertopicmetrics_bytesin",
        "Bytes of produced batches appended by this broker as leader (without topic: all topics)",
        bytes_in,
    );
    r.register(
        "kafka_server_brokertopicmetrics_bytesout",
        "Bytes of records sent to consumers, replication excluded (without topic: all topics)",
        bytes_out,
    );
    r.register(
        "kafka_server_brokertopicmetrics_messagesin",
        "Records appended by this broker as leader (without topic: all topics)",
        messages_in,
    );

    // The per-partition load the load balancer weighs (`kafkaiq.leader.balancer=load`),
    // measured here as leader: exponentially decaying rates (`metrics::DecayingLoad`).
    let load_in = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let load_out = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let load_requests = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for ((topic, partition), rates) in topic_stats.partition_loads(crate::metrics::monotonic_ms()) {
        let labels: Labels = vec![("topic", topic), ("partition", partition.to_string())];
        load_in.get_or_create(&labels).set(rates.bytes_in);
        load_out.get_or_create(&labels).set(rates.bytes_out);
        load_requests.get_or_create(&labels).set(rates.requests);
    }
    r.register(
        "kafkaiq_partition_load_bytes_in_per_sec",
        "Bytes produced to the partition with this broker as leader, per second (decaying, 1 min)",
        load_in,
    );
    r.register(
        "kafkaiq_partition_load_bytes_out_per_sec",
        "Bytes fetched by consumers from this broker as the partition's leader, per second (decaying, 1 min)",
        load_out,
    );
    r.register(
        "kafkaiq_partition_load_requests_per_sec",
        "Produce and consumer fetch requests naming the partition served by this broker as leader, per second (decaying, 1 min)",
        load_requests,
    );

    // Bytes served by Fetch: Kafka's ReplicationBytesOutPerSec, and consumer bytes by this
    // broker's role (KIP-392 follower reads have no Kafka meter of their own).
    let served = &ctx.fetch_served;
    r.register(
        "kafka_server_brokertopicmetrics_replicationbytesout",
        "Bytes of records sent to follower replicas fetching from this broker as leader",
        served.replication_bytes.clone(),
    );
    let consumer_bytes = Family::<Labels, Counter>::default();
    consumer_bytes
        .get_or_create(&vec![("role", "leader".to_owned())])
        .inc_by(served.consumer_bytes_as_leader.get());
    consumer_bytes
        .get_or_create(&vec![("role", "follower".to_owned())])
        .inc_by(served.consumer_bytes_as_follower.get());
    r.register(
        "kafkaiq_fetch_consumer_bytes",
        "Bytes of records sent to consumers, by this broker's role in the partition (follower: read from follower, KIP-392)",
        consumer_bytes,
    );

    // kafka.server:type=socket-server-metrics
    r.register(
        "kafka_server_socket_server_metrics_successful_authentication",
        "Connections that completed SASL authentication, by listener and mechanism (Kafka's successful-authentication-total)",
        ctx.authentication_stats.successful.clone(),
    );
    r.register(
        "kafka_server_socket_server_metrics_failed_authentication",
        "Connections whose SASL authentication failed, by listener and mechanism (Kafka's failed-authentication-total)",
        ctx.authentication_stats.failed.clone(),
    );
    r.register(
        "kafka_server_socket_server_metrics_successful_reauthentication",
        "SASL re-authentications (KIP-368) that completed, by listener and mechanism (Kafka's successful-reauthentication-total)",
        ctx.authentication_stats.successful_reauthentication.clone(),
    );
    r.register(
        "kafka_server_socket_server_metrics_failed_reauthentication",
        "SASL re-authentications (KIP-368) that failed, by listener and mechanism (Kafka's failed-reauthentication-total)",
        ctx.authentication_stats.failed_reauthentication.clone(),
    );
    r.register(
        "kafka_server_socket_server_metrics_expired_connections_killed",
        "Connections closed at a request after their SASL session expired (Kafka's expired-connections-killed-count)",
        ctx.authentication_stats.expired_connections_killed.clone(),
    );

    // kafka.network:type=RequestMetrics
    r.register("kafka_network_requestmetrics_totaltimems", "Requests handled by API and their time in ms from decoded request to encoded response (_count is the request count)", ctx.request_stats.total_time_ms.clone());
    r.register("kafkaiq_produce_stage_time_ms", "Produce requests' time in ms per stage: queue (frame read to handling), decode, append, acks_wait (acks=all until the high watermark covers the records), acks_wake (from the high watermark move that completed acks_wait to the handler running again), encode, write (response to the socket), total (frame read to response written)", ctx.request_stats.produce_stage_ms.clone());

    r.register("kafkaiq_runtime_wake_lateness_ms", "How late in ms a task of the async runtime that sleeps 5 ms at a time wakes after its deadline (worker threads blocked by synchronous work or waiting for a CPU; includes up to 1 ms of timer granularity)", ctx.runtime_stats.wake_lateness_ms.clone());

    // kafka.server:type=group-coordinator-metrics
    let loads = ctx.groups.load_stats();
    load_time_gauges(&mut r, "group", "__consumer_offsets", loads);
    gauge(
        &mut r,
        "kafkaiq_group_coordinator_last_load_records",
        "Records the last load of a __consumer_offsets partition replayed (bounded when the topic is compacted)",
        loads
            .last_records
            .load(std::sync::atomic::Ordering::Relaxed) as i64,
    );

    let (consumer_groups, classic_groups) = ctx.groups.group_views();
    let by_protocol = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
    by_protocol
        .get_or_create(&vec![("protocol", "classic")])
        .set(classic_groups as i64);
    by_protocol
        .get_or_create(&vec![("protocol", "consumer")])
        .set(consumer_groups.len() as i64);
    r.register(
        "kafka_server_group_coordinator_metrics_group_count",
        "Groups this node coordinates, by protocol (classic or consumer, KIP-848)",
        by_protocol,
    );
    let by_state = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
    for state in ["empty", "assigning", "reconciling", "stable", "dead"] {
        let n = consumer_groups
            .iter()
            .filter(|g| g.state.eq_ignore_ascii_case(state))
            .count();
        by_state
            .get_or_create(&vec![("state", state)])
            .set(n as i64);
    }
    r.register(
        "kafka_server_group_coordinator_metrics_consumer_group_count",
        "KIP-848 consumer groups this node coordinates, by state",
        by_state,
    );
    let rebalances = Counter::<u64>::default();
    rebalances.inc_by(consumer_groups.iter().map(|g| g.rebalances).sum());
    r.register(
        "kafka_server_group_coordinator_metrics_consumer_group_rebalance",
        "Rebalances (group epoch bumps) of the consumer groups this node coordinates, since it loaded them",
        rebalances,
    );
    let per_group = |name: &str,
                     help: &str,
                     value: &dyn Fn(&crate::group::ConsumerGroupView) -> Option<i64>,
                     r: &mut Registry| {
        let family = Family::<Labels, Gauge>::default();
        for g in &consumer_groups {
            if let Some(v) = value(g) {
                family
                    .get_or_create(&vec![("group", g.group_id.clone())])
                    .set(v);
            }
        }
        r.register(name, help, family);
    };
    per_group(
        "kafkaiq_consumer_group_epoch",
        "A consumer group's group epoch",
        &|g| Some(i64::from(g.group_epoch)),
        &mut r,
    );
    per_group(
        "kafkaiq_consumer_group_assignment_epoch",
        "The epoch of a consumer group's target assignment",
        &|g| Some(i64::from(g.assignment_epoch)),
        &mut r,
    );
    per_group(
        "kafkaiq_consumer_group_members",
        "Members of a consumer group",
        &|g| Some(g.members as i64),
        &mut r,
    );
    per_group(
        "kafkaiq_consumer_group_members_reconciling",
        "Members of a consumer group not yet at its target assignment",
        &|g| Some(g.members_reconciling as i64),
        &mut r,
    );
    per_group(
        "kafkaiq_consumer_group_rebalances",
        "Rebalances of a consumer group since this node loaded it",
        &|g| Some(g.rebalances as i64),
        &mut r,
    );
    per_group("kafkaiq_consumer_group_last_rebalance_time_ms", "How long a consumer group's last rebalance took, from the group epoch bump until every member was reconciled", &|g| g.last_rebalance_ms, &mut r);

    // kafka.server:type=transaction-coordinator-metrics
    load_time_gauges(
        &mut r,
        "transaction",
        "__transaction_state",
        ctx.txns.load_stats(),
    );
    let by_state = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
    let counts = ctx.txns.state_counts();
    for state in crate::txn::TxnState::ALL {
        by_state
            .get_or_create(&vec![("state", state.name())])
            .set(counts.get(&state).copied().unwrap_or(0) as i64);
    }
    r.register(
        "kafkaiq_transaction_coordinator_transactional_ids",
        "Transactional ids this node coordinates, by the state of their transaction (ListTransactions' states)",
        by_state,
    );

    // kafka.log:type=LogCleaner and LogCleanerManager
    let cleaner = &ctx.cleaner_stats;
    let compacted = ctx.replicas.log_manager.compacted_logs(ctx.clock.now_ms());
    let max_dirty = compacted
        .iter()
        .map(|l| l.dirty_ratio())
        .fold(0.0f64, f64::max);
    gauge(
        &mut r,
        "kafka_log_logcleaner_max_dirty_percent",
        "Dirty share in percent of the filthiest compacted log on this broker",
        (max_dirty * 100.0) as i64,
    );
    gauge(
        &mut r,
        "kafka_log_logcleaner_cleaner_recopy_percent",
        "Bytes the last cleaning wrote over those it read, in percent",
        cleaner
            .recopy_percent
            .load(std::sync::atomic::Ordering::Relaxed) as i64,
    );
    gauge(
        &mut r,
        "kafka_log_logcleaner_max_clean_time_secs",
        "Seconds the last cleaning took",
        cleaner
            .clean_time_secs
            .load(std::sync::atomic::Ordering::Relaxed) as i64,
    );
    gauge(
        &mut r,
        "kafka_log_logcleaner_max_buffer_utilization_percent",
        "How full the key to offset map was when the last cleaning stopped filling it, in percent",
        cleaner
            .buffer_utilization_percent
            .load(std::sync::atomic::Ordering::Relaxed) as i64,
    );
    gauge(
        &mut r,
        "kafka_log_logcleanermanager_uncleanable_partitions_count",
        "Compacted partitions a cleaning failed on; they are not cleaned again until a restart",
        ctx.replicas.log_manager.uncleanable_partitions().len() as i64,
    );
    gauge(
        &mut r,
        "kafkaiq_log_cleaner_cleanings",
        "Cleanings done since startup",
        cleaner.cleanings.load(std::sync::atomic::Ordering::Relaxed) as i64,
    );

    // kafka.cluster:type=Partition, for every partition hosted here (0 where not leader)
    per_partition(&mut r, &local, &image, ctx);

    let mut out = String::new();
    encode(&mut out, &r).expect("writing to a String cannot fail");
    out
}

/// A coordinator's `partition-load-time-max` / `-avg` (Kafka's `<kind>-coordinator-metrics`)
/// over the loads of its `topic`'s partitions.
fn load_time_gauges(
    r: &mut Registry,
    kind: &str,
    topic: &str,
    loads: &crate::metrics::CoordinatorLoadStats,
) {
    gauge(
        r,
        &format!("kafka_server_{kind}_coordinator_metrics_partition_load_time_max"),
        &format!(
            "The longest load of a {topic} partition by this coordinator since startup, in ms"
        ),
        loads.max_ms.load(std::sync::atomic::Ordering::Relaxed) as i64,
    );
    gauge(
        r,
        &format!("kafka_server_{kind}_coordinator_metrics_partition_load_time_avg"),
        &format!("The mean load time of a {topic} partition by this coordinator, in ms"),
        loads.avg_ms() as i64,
    );
}

fn per_partition(
    r: &mut Registry,
    local: &HashMap<TopicPartition, super::LocalPartition>,
    image: &MetadataImage,
    ctx: &Context,
) {
    let under_replicated = Family::<Labels, Gauge>::default();
    let in_sync = Family::<Labels, Gauge>::default();
    let replicas = Family::<Labels, Gauge>::default();
    let under_min_isr = Family::<Labels, Gauge>::default();
    let lso_lag = Family::<Labels, Gauge>::default();
    let open_txns = Family::<Labels, Gauge>::default();
    for (tp, l) in local {
        let s = &l.state;
        let labels: Labels = vec![
            ("topic", tp.topic.clone()),
            ("partition", tp.partition.to_string()),
        ];
        let leader = s.role == Role::Leader;
        let isr = if leader { s.isr().len() as i64 } else { 0 };
        let min = image.topic(&tp.topic).map_or(s.min_insync_replicas, |t| {
            TopicSettings::resolve(&t.configs, &ctx.config).min_insync_replicas
        });
        under_replicated
            .get_or_create(&labels)
            .set(i64::from(leader && isr < s.replicas.len() as i64));
        in_sync.get_or_create(&labels).set(isr);
        replicas
            .get_or_create(&labels)
            .set(if leader { s.replicas.len() as i64 } else { 0 });
        under_min_isr
            .get_or_create(&labels)
            .set(i64::from(leader && isr < i64::from(min)));
        // Kafka's LastStableOffsetLag: the high watermark less the last stable offset, which
        // open transactions hold back.
        lso_lag
            .get_or_create(&labels)
            .set((s.high_watermark - l.last_stable_offset).max(0));
        open_txns
            .get_or_create(&labels)
            .set(l.open_transactions as i64);
    }
    r.register(
        "kafka_cluster_partition_laststableoffsetlag",
        "The high watermark less the last stable offset: records read_committed consumers wait for",
        lso_lag,
    );
    r.register(
        "kafkaiq_partition_open_transactions",
        "Transactions open on the partition (begun, no marker yet)",
        open_txns,
    );
    r.register(
        "kafka_cluster_partition_underreplicated",
        "1 if this broker leads the partition and its ISR is smaller than its replica set",
        under_replicated,
    );
    r.register(
        "kafka_cluster_partition_insyncreplicascount",
        "The partition's ISR size where this broker leads it, else 0",
        in_sync,
    );
    r.register(
        "kafka_cluster_partition_replicascount",
        "The partition's replica count where this broker leads it, else 0",
        replicas,
    );
    r.register(
        "kafka_cluster_partition_underminisr",
        "1 if this broker leads the partition and its ISR is smaller than min.insync.replicas",
        under_min_isr,
    );
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn state(role: Role, replicas: &[i32], isr: &[i32], min_isr: i32) -> PartitionState {
        PartitionState {
            role,
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            replicas: replicas.to_vec(),
            isr_state: crate::replica::isr::IsrState::committed(
                isr.to_vec(),
                crate::metadata::LeaderRecoveryState::Recovered,
            ),
            high_watermark: 0,
            min_insync_replicas: min_isr,
            leader_epoch_start_offset: None,
            remote_replicas: BTreeMap::new(),
            follower_lag: None,
            high_watermark_sent: Default::default(),
            high_watermark_moved_at: None,
        }
    }

    #[test]
    fn max_fetcher_lag_is_the_largest_follower_lag() {
        let lagging = |lag: Option<i64>| PartitionState {
            follower_lag: lag,
            ..state(Role::Follower, &[2, 1], &[], 2)
        };
        assert_eq!(max_fetcher_lag([].iter()), 0);
        let states = [
            lagging(Some(3)),
            lagging(None),
            lagging(Some(41)),
            // A leader's stale lag from when it followed does not count.
            PartitionState {
                follower_lag: Some(900),
                ..state(Role::Leader, &[1, 2], &[1, 2], 1)
            },
        ];
        assert_eq!(max_fetcher_lag(states.iter()), 41);
    }

    #[test]
    fn replica_gauges_count_only_led_partitions_for_health() {
        let states = [
            state(Role::Leader, &[1, 2, 3], &[1, 2, 3], 2),
            state(Role::Leader, &[1, 2, 3], &[1, 2], 2),
            state(Role::Leader, &[1, 2, 3], &[1], 2),
            state(Role::Follower, &[2, 1], &[], 2),
        ];
        assert_eq!(
            replica_gauges(states.iter()),
            ReplicaGauges {
                partition_count: 4,
                leader_count: 3,
                under_replicated: 2,
                under_min_isr: 1,
                at_min_isr: 1,
            }
        );
    }
}
