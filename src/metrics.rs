//! The counters and histograms the broker's paths increment, named after the Kafka MBeans they
//! stand for. Gauges (leader count, under-replicated partitions, …) are not here: they are
//! computed from the metadata image and the replica manager when `/metrics` is scraped
//! (`insight::scrape`), so they can never drift from the state they describe.
//!
//! Who increments what:
//! - [`BrokerTopicStats`]: the Produce and Fetch handlers (`BrokerTopicMetrics`: bytes in,
//!   bytes out to consumers, messages in; per topic and in total).
//! - [`FetchServedStats`]: the Fetch handler (record bytes to consumers as leader and as
//!   follower, and to followers).
//! - [`RequestStats`]: `server::dispatch`, once per handled request (`RequestMetrics`).
//! - [`ReplicaStats`]: the replica layer (`ReplicaManager`: ISR shrinks and expands, failed ISR
//!   updates) — the leader's ISR changes call [`ReplicaStats::isr_shrunk`] and friends.
//! - [`ControllerStats`]: the controller (`ControllerStats`: leader elections with their reason
//!   and time, unclean elections).
//!
//! This module is a leaf: every type is plain atomics or `prometheus-client` metrics (which are
//! atomics too), cheap to increment from any thread, never locked across an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// Request and election times, in milliseconds: 0.25 ms to about 33 s, doubling.
pub fn time_ms_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.25, 2.0, 18))
}

/// Bytes and messages of one topic (or of all), as Kafka's `BrokerTopicMetrics` counts them:
/// bytes in are the produced batches' bytes a leader appended, messages in their records, bytes
/// out the record bytes sent to consumers (replica fetches are replication traffic, not
/// `BytesOut`, as in Kafka).
#[derive(Debug, Default)]
pub struct TopicCounters {
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub messages_in: AtomicU64,
}

impl TopicCounters {
    fn add(&self, bytes_in: u64, bytes_out: u64, messages_in: u64) {
        if bytes_in > 0 {
            self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        }
        if bytes_out > 0 {
            self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        }
        if messages_in > 0 {
            self.messages_in.fetch_add(messages_in, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
            self.messages_in.load(Ordering::Relaxed),
        )
    }
}

/// The time constant of the per-partition load rates: a rate follows a change of load with
/// this lag, and a partition that stops receiving traffic decays to 1/e of its rate in this
/// time. A minute: long enough that a burst of a few seconds does not look like load, short
/// against the balancer's dwell time (`kafkaiq.leader.balancer.min.dwell.ms`, 5 minutes by
/// default), so a new leader has measured a moved partition before it may move again.
pub const PARTITION_LOAD_TAU_MS: f64 = 60_000.0;

/// Exponentially decaying rates of one partition's load as this broker leads it: bytes
/// produced, bytes fetched by consumers from the leader (neither followers' fetches nor reads
/// served by a follower, KIP-392, load the leader's log the same way), and produce and consumer
/// fetch requests naming it. Each is an accumulator that decays as `exp(-Δt / τ)` and is
/// incremented by each amount; for a steady rate r it converges to `r·τ`, so the rate is the
/// accumulator over τ (an exponentially weighted moving average with time constant τ).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecayingLoad {
    bytes_in: f64,
    bytes_out: f64,
    requests: f64,
    at_ms: u64,
    /// When this broker started measuring the partition (its first request as leader).
    since_ms: Option<u64>,
}

/// The shortest span a rate is averaged over: a partition measured for less is taken as
/// measured for this long, so its first batch alone does not look like a burst of load.
pub const PARTITION_LOAD_MIN_SPAN_MS: f64 = 5_000.0;

impl DecayingLoad {
    fn decay_to(&mut self, now_ms: u64) {
        if now_ms > self.at_ms {
            let f = (-((now_ms - self.at_ms) as f64) / PARTITION_LOAD_TAU_MS).exp();
            self.bytes_in *= f;
            self.bytes_out *= f;
            self.requests *= f;
            self.at_ms = now_ms;
        }
    }

    /// Records one request naming the partition with its bytes in and out, at `now_ms`
    /// (monotonic).
    pub fn record(&mut self, now_ms: u64, bytes_in: u64, bytes_out: u64) {
        self.since_ms.get_or_insert(now_ms);
        self.decay_to(now_ms);
        self.bytes_in += bytes_in as f64;
        self.bytes_out += bytes_out as f64;
        self.requests += 1.0;
    }

    /// (bytes in/s, bytes out/s, requests/s) as of `now_ms`.
    ///
    /// The accumulators weigh the past by `exp(-age / τ)`; measured for a span `t` only, the
    /// weights sum to `τ·(1 - exp(-t / τ))`, not τ, and that is what they are divided by. So a
    /// partition whose leadership just moved here reports its rate from its first seconds, not
    /// a rate rising over minutes from zero: the balancer, which reads the new leader's
    /// report, would otherwise take the broker it just moved load to for idle and move more
    /// to it.
    pub fn rates(&self, now_ms: u64) -> LoadRates {
        let mut d = *self;
        d.decay_to(now_ms);
        let measured_ms = now_ms.saturating_sub(self.since_ms.unwrap_or(now_ms));
        let span = (measured_ms as f64).max(PARTITION_LOAD_MIN_SPAN_MS);
        let weights_s =
            PARTITION_LOAD_TAU_MS * (1.0 - (-span / PARTITION_LOAD_TAU_MS).exp()) / 1000.0;
        LoadRates {
            bytes_in: d.bytes_in / weights_s,
            bytes_out: d.bytes_out / weights_s,
            requests: d.requests / weights_s,
            measured_ms,
        }
    }
}

/// A partition's load rates as its leader measured them ([`DecayingLoad::rates`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LoadRates {
    /// Bytes produced per second.
    pub bytes_in: f64,
    /// Bytes fetched by consumers per second.
    pub bytes_out: f64,
    /// Requests naming the partition per second.
    pub requests: f64,
    /// How long this broker has measured the partition (since its first request as leader):
    /// rates measured for a short span are still settling.
    pub measured_ms: u64,
}

impl LoadRates {
    /// Whether any rate is measurable (at least one thousandth a second).
    pub fn is_measurable(&self) -> bool {
        self.bytes_in.max(self.bytes_out).max(self.requests) >= 0.001
    }
}

/// Milliseconds since the first call in this process (monotonic): the load rates' clock.
pub fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Kafka's `BrokerTopicMetrics`, per topic and for all topics.
///
/// The per-topic map grows only with topics this broker served and is pruned to the topics
/// that still exist at every scrape ([`BrokerTopicStats::retain_topics`]), so it is bounded by
/// the metadata image's topics.
#[derive(Debug, Default)]
pub struct BrokerTopicStats {
    pub all: TopicCounters,
    topics: RwLock<HashMap<String, Arc<TopicCounters>>>,
    /// Each partition's load as this broker led it ([`DecayingLoad`]); pruned with the topics.
    /// By topic, then partition: a request looks its partition up by `&str` without
    /// allocating a key.
    partitions: RwLock<HashMap<String, HashMap<i32, Arc<std::sync::Mutex<DecayingLoad>>>>>,
}

impl BrokerTopicStats {
    /// A leader appended a produced batch set of `bytes` holding `messages` records.
    pub fn produced(&self, topic: &str, bytes: u64, messages: u64) {
        self.all.add(bytes, 0, messages);
        self.topic(topic).add(bytes, 0, messages);
    }

    /// `bytes` of records went to a consumer (not to a follower).
    pub fn fetched(&self, topic: &str, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.all.add(0, bytes, 0);
        self.topic(topic).add(0, bytes, 0);
    }

    /// A produce or consumer fetch request this broker served as the partition's leader, with
    /// its bytes in (produced) or out (to the consumer), at `now_ms` ([`monotonic_ms`]).
    pub fn partition_load(
        &self,
        topic: &str,
        partition: i32,
        now_ms: u64,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        let existing = self
            .partitions
            .read()
            .expect("partition load lock")
            .get(topic)
            .and_then(|t| t.get(&partition))
            .cloned();
        let load = existing.unwrap_or_else(|| {
            self.partitions
                .write()
                .expect("partition load lock")
                .entry(topic.to_owned())
                .or_default()
                .entry(partition)
                .or_default()
                .clone()
        });
        load.lock()
            .expect("partition load lock")
            .record(now_ms, bytes_in, bytes_out);
    }

    /// Drops the load measured for partitions for which `led` is false: a broker that leads a
    /// partition again later measures it from then on, not from a decayed earlier
    /// measurement.
    pub fn retain_partition_loads(&self, led: impl Fn(&str, i32) -> bool) {
        let mut partitions = self.partitions.write().expect("partition load lock");
        for (topic, loads) in partitions.iter_mut() {
            loads.retain(|p, _| led(topic, *p));
        }
        partitions.retain(|_, loads| !loads.is_empty());
    }

    /// Every partition's (bytes in/s, bytes out/s, requests/s) as of `now_ms`, sorted.
    pub fn partition_loads(&self, now_ms: u64) -> Vec<((String, i32), LoadRates)> {
        let mut out: Vec<_> = self
            .partitions
            .read()
            .expect("partition load lock")
            .iter()
            .flat_map(|(topic, partitions)| {
                partitions.iter().map(move |(p, l)| {
                    (
                        (topic.clone(), *p),
                        l.lock().expect("partition load lock").rates(now_ms),
                    )
                })
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn topic(&self, topic: &str) -> Arc<TopicCounters> {
        if let Some(c) = self.topics.read().expect("topic stats lock").get(topic) {
            return c.clone();
        }
        self.topics
            .write()
            .expect("topic stats lock")
            .entry(topic.to_owned())
            .or_default()
            .clone()
    }

    /// Drops the counters of topics for which `exists` is false (deleted topics), as Kafka
    /// removes a topic's metrics when the topic goes.
    pub fn retain_topics(&self, exists: impl Fn(&str) -> bool) {
        self.topics
            .write()
            .expect("topic stats lock")
            .retain(|name, _| exists(name));
        self.partitions
            .write()
            .expect("partition load lock")
            .retain(|name, _| exists(name));
    }

    /// Every topic's counters, sorted by name.
    pub fn per_topic(&self) -> Vec<(String, (u64, u64, u64))> {
        let mut out: Vec<_> = self
            .topics
            .read()
            .expect("topic stats lock")
            .iter()
            .map(|(name, c)| (name.clone(), c.get()))
            .collect();
        out.sort();
        out
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kafka's API name (`Produce`, `Fetch`, `Metadata`, …), as `RequestMetrics` labels it.
    pub request: &'static str,
}

/// The stages of a Produce request, in the order it passes them (`RequestStats::produce_stage`).
pub const PRODUCE_STAGES: [&str; 8] = [
    "queue",
    "decode",
    "append",
    "acks_wait",
    "acks_wake",
    "encode",
    "write",
    "total",
];

/// Stage times, in milliseconds: 10 µs to about 42 s, doubling, so the sub-millisecond stages
/// of a produce (decode, append, encode) are resolved too.
pub fn stage_ms_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 23))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// One of [`PRODUCE_STAGES`].
    pub stage: &'static str,
}

/// Authentications on the client listener (Kafka's `socket-server-metrics`
/// `successful-authentication-total` and `failed-authentication-total`, and for KIP-368's
/// re-authentications `successful-reauthentication-total` and `failed-reauthentication-total`),
/// by listener and SASL mechanism (Kafka's are per listener and network processor); and the
/// connections closed because their session expired (`expired-connections-killed-count`).
#[derive(Default)]
pub struct AuthenticationStats {
    pub successful: Family<Vec<(&'static str, String)>, Counter>,
    pub failed: Family<Vec<(&'static str, String)>, Counter>,
    pub successful_reauthentication: Family<Vec<(&'static str, String)>, Counter>,
    pub failed_reauthentication: Family<Vec<(&'static str, String)>, Counter>,
    pub expired_connections_killed: Counter,
}

impl AuthenticationStats {
    fn labels(listener: &str, mechanism: &str) -> Vec<(&'static str, String)> {
        vec![
            ("listener", listener.to_owned()),
            ("mechanism", mechanism.to_owned()),
        ]
    }

    pub fn succeeded(&self, listener: &str, mechanism: &str, reauthentication: bool) {
        let family = if reauthentication {
            &self.successful_reauthentication
        } else {
            &self.successful
        };
        family
            .get_or_create(&Self::labels(listener, mechanism))
            .inc();
    }

    pub fn failed(&self, listener: &str, mechanism: &str, reauthentication: bool) {
        let family = if reauthentication {
            &self.failed_reauthentication
        } else {
            &self.failed
        };
        family
            .get_or_create(&Self::labels(listener, mechanism))
            .inc();
    }

    pub fn expired_connection_killed(&self) {
        self.expired_connections_killed.inc();
    }
}

/// Kafka's `RequestMetrics` `TotalTimeMs` per API, as a histogram: its `_count` is the
/// request count (`RequestsPerSec` as a counter), its `_sum` the total time. The time is from
/// the decoded request to the encoded response (Kafka's also counts the time queued behind
/// earlier requests of the connection and the network send).
#[derive(Debug, Clone)]
pub struct RequestStats {
    pub total_time_ms: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// Produce requests' time per stage (Kafka's `RequestQueueTimeMs`, `LocalTimeMs`,
    /// `RemoteTimeMs`, `ResponseSendTimeMs`, finer): `queue` from the frame fully read to its
    /// handling starting (behind earlier requests of the connection), `decode`, `append` (the
    /// leader's appends of every partition), `acks_wait` (acks=all: parked until the high
    /// watermark covers the records), `acks_wake` (the part of `acks_wait` from the high
    /// watermark move that completed it to the handler running again: the purgatory's wake-up
    /// and a worker thread to run it), `encode`, `write` (the response written to the socket),
    /// `total` from the frame read to the response written.
    pub produce_stage_ms: Family<StageLabels, Histogram, fn() -> Histogram>,
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            total_time_ms: Family::new_with_constructor(time_ms_buckets),
            produce_stage_ms: Family::new_with_constructor(stage_ms_buckets),
        }
    }
}

impl RequestStats {
    /// The label set is bounded by the API keys this broker handles.
    pub fn handled(&self, request: &'static str, elapsed_ms: f64) {
        self.total_time_ms
            .get_or_create(&RequestLabels { request })
            .observe(elapsed_ms);
    }

    /// One stage of one Produce request; `stage` is one of [`PRODUCE_STAGES`].
    pub fn produce_stage(&self, stage: &'static str, elapsed: std::time::Duration) {
        debug_assert!(PRODUCE_STAGES.contains(&stage));
        self.produce_stage_ms
            .get_or_create(&StageLabels { stage })
            .observe(elapsed.as_secs_f64() * 1000.0);
    }
}

/// How late the async runtime runs a task that asked to wake at a given instant: the probe
/// (every `limits::RUNTIME_PROBE_INTERVAL_MS`, `node::runtime_probe`) records now − deadline each time
/// it wakes. A worker thread held by synchronous work (an fsync, a file created, a long loop)
/// or waiting for a CPU shows up here, where the per-request stages cannot see it: they start
/// only once a task has read the frame. Includes up to 1 ms of the timer's granularity.
#[derive(Debug, Clone)]
pub struct RuntimeStats {
    pub wake_lateness_ms: Histogram,
}

impl Default for RuntimeStats {
    fn default() -> Self {
        RuntimeStats {
            wake_lateness_ms: stage_ms_buckets(),
        }
    }
}

impl RuntimeStats {
    pub fn woke_late(&self, lateness: std::time::Duration) {
        self.wake_lateness_ms
            .observe(lateness.as_secs_f64() * 1000.0);
    }
}

/// Kafka's `ReplicaManager` meters: ISR changes made by this broker as leader.
#[derive(Debug, Clone, Default)]
pub struct ReplicaStats {
    /// `IsrShrinksPerSec`: a committed ISR change that removed replicas.
    pub isr_shrinks: Counter,
    /// `IsrExpandsPerSec`: a committed ISR change that added replicas.
    pub isr_expands: Counter,
    /// `FailedIsrUpdatesPerSec`: an ISR change the controller refused.
    pub failed_isr_updates: Counter,
}

impl ReplicaStats {
    /// Records one committed ISR change from `before` to `after`.
    pub fn isr_changed(&self, before: &[i32], after: &[i32]) {
        if before.iter().any(|r| !after.contains(r)) {
            self.isr_shrinks.inc();
        }
        if after.iter().any(|r| !before.contains(r)) {
            self.isr_expands.inc();
        }
    }
}

/// Record bytes this broker's Fetch handler sent, by who read them and in which role this broker
/// served them (KIP-392 read from follower). Consumer bytes are Kafka's `BytesOutPerSec`
/// split by role; follower bytes are Kafka's `ReplicationBytesOutPerSec`.
#[derive(Debug, Clone, Default)]
pub struct FetchServedStats {
    /// To consumers, from a partition this broker led.
    pub consumer_bytes_as_leader: Counter,
    /// To consumers, from a partition this broker follows (follower reads).
    pub consumer_bytes_as_follower: Counter,
    /// To follower replicas fetching from this broker as leader.
    pub replication_bytes: Counter,
}

impl FetchServedStats {
    /// `bytes` sent to `replica_id` (a follower when >= 0) from a partition this broker led or
    /// followed at the read.
    pub fn served(&self, replica_id: i32, as_leader: bool, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let counter = if replica_id >= 0 {
            &self.replication_bytes
        } else if as_leader {
            &self.consumer_bytes_as_leader
        } else {
            &self.consumer_bytes_as_follower
        };
        counter.inc_by(bytes);
    }
}

/// Why a partition's leader changed; the reasons the leadership page explains.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum ElectionReason {
    /// The leader's broker was fenced (missed heartbeats) or unregistered.
    BrokerFenced,
    /// The leader's broker began a controlled shutdown.
    ControlledShutdown,
    /// ElectLeaders with PREFERRED, or a partition without a leader got one back.
    Preferred,
    /// The controller's periodic preferred-leader rebalance.
    AutoRebalance,
    /// A leader chosen outside the ISR (`unclean.leader.election.enable`).
    Unclean,
    /// A new partition's first leader, or a returning broker leading again.
    Other,
}

impl ElectionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ElectionReason::BrokerFenced => "broker_fenced",
            ElectionReason::ControlledShutdown => "controlled_shutdown",
            ElectionReason::Preferred => "preferred",
            ElectionReason::AutoRebalance => "auto_rebalance",
            ElectionReason::Unclean => "unclean",
            ElectionReason::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Kafka's `ControllerStats` on the active controller: leader elections it committed.
#[derive(Debug, Clone)]
pub struct ControllerStats {
    /// `LeaderElectionRateAndTimeMs`: one observation per elected leader, the time from the
    /// decision to its commit.
    pub leader_elections: Histogram,
    /// `UncleanLeaderElectionsPerSec`.
    pub unclean_leader_elections: Counter,
    /// Leader elections by [`ElectionReason`] (KafkaIQ's own: Kafka has no such breakdown).
    pub elections_by_reason: Family<ReasonLabels, Counter>,
}

impl Default for ControllerStats {
    fn default() -> Self {
        ControllerStats {
            leader_elections: time_ms_buckets(),
            unclean_leader_elections: Counter::default(),
            elections_by_reason: Family::default(),
        }
    }
}

impl ControllerStats {
    /// `count` leaders elected for `reason`, committed `elapsed_ms` after the decision.
    pub fn elected(&self, reason: ElectionReason, count: u64, elapsed_ms: f64) {
        for _ in 0..count {
            self.leader_elections.observe(elapsed_ms);
        }
        if reason == ElectionReason::Unclean {
            self.unclean_leader_elections.inc_by(count);
        }
        self.elections_by_reason
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc_by(count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_load_rates_converge_to_a_steady_rate_and_decay_when_it_stops() {
        let s = BrokerTopicStats::default();
        // 1 MB produced and 2 MB fetched every 100 ms for five time constants: 10 MB/s in,
        // 20 MB/s out, 20 requests/s.
        let mut now = 0;
        while now < 5 * PARTITION_LOAD_TAU_MS as u64 {
            now += 100;
            s.partition_load("t", 3, now, 1_000_000, 0);
            s.partition_load("t", 3, now, 0, 2_000_000);
        }
        let loads = s.partition_loads(now);
        assert_eq!(loads.len(), 1);
        let (
            (topic, partition),
            LoadRates {
                bytes_in,
                bytes_out,
                requests,
                measured_ms,
            },
        ) = loads[0].clone();
        assert_eq!(measured_ms, now - 100);
        assert_eq!((topic.as_str(), partition), ("t", 3));
        let near = |v: f64, want: f64| (v - want).abs() / want < 0.02;
        assert!(near(bytes_in, 10e6), "{bytes_in}");
        assert!(near(bytes_out, 20e6), "{bytes_out}");
        assert!(near(requests, 20.0), "{requests}");
        // One time constant without traffic: 1/e of it.
        let later = now + PARTITION_LOAD_TAU_MS as u64;
        let bytes_in = s.partition_loads(later)[0].1.bytes_in;
        assert!(near(bytes_in, 10e6 / std::f64::consts::E), "{bytes_in}");
        // A deleted topic's partitions go.
        s.retain_topics(|t| t != "t");
        assert!(s.partition_loads(later).is_empty());
    }

    #[test]
    fn a_partition_measured_for_seconds_reports_its_rate_and_one_led_again_starts_over() {
        let s = BrokerTopicStats::default();
        // Leadership moved here at t = 100 s: 1 MB every 100 ms (10 MB/s) for 10 s. Without
        // the span the accumulator covers, the rate would read 15 % of it.
        let start = 100_000;
        let mut now = start;
        while now < start + 10_000 {
            now += 100;
            s.partition_load("t", 0, now, 1_000_000, 0);
        }
        let LoadRates {
            bytes_in,
            requests,
            measured_ms,
            ..
        } = s.partition_loads(now)[0].1;
        assert_eq!(measured_ms, 9_900);
        let near = |v: f64, want: f64| (v - want).abs() / want < 0.05;
        assert!(near(bytes_in, 10e6), "{bytes_in}");
        assert!(near(requests, 10.0), "{requests}");
        // The first batch alone is averaged over the minimum span, not over a millisecond.
        s.partition_load("t", 1, now, 1_000_000, 0);
        let first = s.partition_loads(now + 1)[1].1.bytes_in;
        assert!(first < 1e6 / 4.0, "{first}");
        // Leadership of partition 0 leaves: its measurement goes; when it comes back ten
        // minutes later, 5 s at 10 MB/s is measured as that, not averaged with the silence.
        s.retain_partition_loads(|_, p| p != 0);
        assert_eq!(s.partition_loads(now).len(), 1);
        let back = now + 600_000;
        let mut t = back;
        while t < back + 5_000 {
            t += 100;
            s.partition_load("t", 0, t, 1_000_000, 0);
        }
        let again = s.partition_loads(t)[0].1;
        assert!(near(again.bytes_in, 10e6), "{again:?}");
        assert_eq!(
            again.measured_ms, 4_900,
            "measured from its first request since it came back"
        );
    }

    #[test]
    fn topic_counters_add_to_the_topic_and_the_total_and_deleted_topics_are_dropped() {
        let s = BrokerTopicStats::default();
        s.produced("a", 100, 3);
        s.produced("b", 10, 1);
        s.fetched("a", 40);
        s.fetched("b", 0);
        assert_eq!(s.all.get(), (110, 40, 4));
        assert_eq!(
            s.per_topic(),
            vec![("a".into(), (100, 40, 3)), ("b".into(), (10, 0, 1))]
        );
        s.retain_topics(|t| t == "b");
        assert_eq!(s.per_topic(), vec![("b".into(), (10, 0, 1))]);
        assert_eq!(s.all.get(), (110, 40, 4), "totals survive a deleted topic");
    }

    #[test]
    fn an_isr_change_counts_as_shrink_expand_or_both() {
        let s = ReplicaStats::default();
        s.isr_changed(&[1, 2, 3], &[1, 2]);
        s.isr_changed(&[1, 2], &[1, 2, 3]);
        s.isr_changed(&[1, 2], &[1, 3]);
        s.isr_changed(&[1, 2], &[2, 1]);
        assert_eq!((s.isr_shrinks.get(), s.isr_expands.get()), (2, 2));
    }

    #[test]
    fn unclean_elections_are_counted_apart() {
        let s = ControllerStats::default();
        s.elected(ElectionReason::BrokerFenced, 2, 3.0);
        s.elected(ElectionReason::Unclean, 1, 1.0);
        assert_eq!(s.unclean_leader_elections.get(), 1);
        assert_eq!(
            s.elections_by_reason
                .get_or_create(&ReasonLabels {
                    reason: "broker_fenced"
                })
                .get(),
            2
        );
    }
}

/// What the log cleaner threads report (Kafka's `LogCleaner` gauges; `node::cleaner` fills
/// them).
#[derive(Debug, Default)]
pub struct CleanerStats {
    /// Written over read bytes of the last cleaning, in percent (`cleaner-recopy-percent`).
    pub recopy_percent: AtomicU64,
    /// Seconds the last cleaning took (`max-clean-time-secs`).
    pub clean_time_secs: AtomicU64,
    /// The map's fill when the last cleaning stopped mapping, in percent
    /// (`max-buffer-utilization-percent`).
    pub buffer_utilization_percent: AtomicU64,
    /// Cleanings done and bytes they read and wrote since startup.
    pub cleanings: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
}

/// What a coordinator's loads of its topic's partitions cost (Kafka's
/// `group-coordinator-metrics` and `transaction-coordinator-metrics` `partition-load-time-max` /
/// `-avg`). A compacted topic keeps them flat however many records were written.
#[derive(Debug, Default)]
pub struct CoordinatorLoadStats {
    /// Partitions loaded since startup.
    pub loads: AtomicU64,
    /// Records replayed by every load since startup, and by the last one.
    pub records: AtomicU64,
    pub last_records: AtomicU64,
    /// The longest load and all loads together, in ms.
    pub max_ms: AtomicU64,
    pub total_ms: AtomicU64,
}

impl CoordinatorLoadStats {
    pub fn record(&self, records: u64, elapsed_ms: u64) {
        self.loads.fetch_add(1, Ordering::Relaxed);
        self.records.fetch_add(records, Ordering::Relaxed);
        self.last_records.store(records, Ordering::Relaxed);
        self.max_ms.fetch_max(elapsed_ms, Ordering::Relaxed);
        self.total_ms.fetch_add(elapsed_ms, Ordering::Relaxed);
    }

    /// The mean load time in ms (0 before the first load).
    pub fn avg_ms(&self) -> u64 {
        let loads = self.loads.load(Ordering::Relaxed);
        if loads == 0 {
            0
        } else {
            self.total_ms.load(Ordering::Relaxed) / loads
        }
    }
}
