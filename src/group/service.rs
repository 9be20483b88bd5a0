//! The async shell around the pure [`Coordinator`]: it is the only part of `group` that touches
//! the broker, and it touches the log only through a [`CoordinatorLog`].
//!
//! - **Requests**: a handler calls [`GroupService::call`]. Under the group lock the shell hands
//!   the request to the machine, appends the records of the outcome to their
//!   `__consumer_offsets` partitions (still under the lock, so log order is decision order) and
//!   reports each append to the machine; a failed one is rolled back at once. Outside the lock it
//!   waits (`offsets.commit.timeout.ms`) until the high watermark covers everything the
//!   outcome's responses describe, reports that too (the state becomes durable: reads such as
//!   OffsetFetch see it from now on) and only then answers. A parked JoinGroup or SyncGroup is
//!   a oneshot receiver the handler awaits; a later outcome (another member's request, a timer)
//!   fills it.
//! - **Failed and unknown writes**: a failed append answers COORDINATOR_NOT_AVAILABLE
//!   (NOT_COORDINATOR if this node no longer leads the partition) and its change is gone. A
//!   wait that times out answers REQUEST_TIMED_OUT to an OffsetCommit (which clients retry) and
//!   COORDINATOR_NOT_AVAILABLE to the other APIs, as Kafka does; the write stays pending. Before
//!   every operation the shell reads the high watermark of partitions with pending writes, so a
//!   write becomes durable as soon as the high watermark covers it, whoever was waiting.
//! - **Timers**: one tokio task sleeps until the machine's next deadline and ticks each
//!   partition with a due timer; every call that arms a timer wakes it to re-plan.
//! - **Loading**: an [`ImageListener`] watches the metadata image. When this node becomes leader
//!   of a `__consumer_offsets` partition, the partition is replayed into the machine, records
//!   above the high watermark as pending writes (its groups answer COORDINATOR_LOAD_IN_PROGRESS
//!   meanwhile); when it stops leading one, its groups are unloaded, pending state included.
//! - **Retention**: every `offsets.retention.check.interval.ms`, expired offsets are tombstoned.
//!
//! It does not decide anything about groups; that is the machine's job. Lock order: the group
//! lock is taken after the controller's (metadata listeners) and before a partition's (appends,
//! high watermarks); it is never held across an await.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::records::RecordBatchDecoder;
use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use super::log::{CoordinatorLog, Durability, ReplicaLog};
use super::{
    Coordinator, CoordinatorRecord, GroupConfig, GroupRequest, GroupResponse, Outcome,
    RequestContext, Token, OFFSETS_TOPIC_NAME,
};
use crate::clock::SharedClock;
use crate::config::BrokerConfig;
use crate::controller::{ControllerChannel, CreateTopicSpec};
use crate::errors::ApiError;
use crate::metadata::{ImageListener, MetadataCache, MetadataImage};
use crate::replica::ReplicaManager;

/// Bytes read per step while replaying a `__consumer_offsets` partition.
const LOAD_READ_BYTES: usize = 1024 * 1024;
/// Upper bound on one sleep of the timer task, so a missed wake-up costs at most this.
const TIMER_SLEEP_MS_MAX: i64 = 1_000;
/// How long due timers wait before they run: one tick of Kafka's coordinator timer wheel
/// (`SystemTimer`, 1 ms ticks). Kafka runs an expired timer by queueing its operation behind the
/// requests already waiting for the coordinator (`EventBasedCoordinatorTimer`), so requests that
/// arrive together with the one that armed it are decided first: with
/// `group.initial.rebalance.delay.ms=0`, consumers joining at the same moment share the first
/// generation. Requests here are decided as they arrive, with no queue to wait behind; this tick
/// gives those arriving together the same chance.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// Who a request is from; the shell assigns the token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub api_version: i16,
    pub client_id: String,
    pub client_host: String,
}

struct Inner {
    machine: Coordinator,
    waiters: HashMap<Token, oneshot::Sender<GroupResponse>>,
    next_token: Token,
    /// Leader epoch each `__consumer_offsets` partition was loaded at.
    loaded: HashMap<i32, i32>,
}

/// Why the records behind a response are not known to be durable.
#[derive(Debug, Clone)]
enum WriteFailure {
    /// The append itself failed; the change was rolled back.
    Append(ApiError),
    /// The high watermark did not reach the records in time; they may still get there.
    TimedOut,
    /// This node stopped leading the partition while waiting.
    NotLeader,
}

impl WriteFailure {
    /// The error a client gets, as Kafka's coordinator maps it (`handleOperationException`),
    /// except that a timed-out OffsetCommit keeps REQUEST_TIMED_OUT: consumers retry it, and
    /// the commit may yet land.
    fn error(&self, api: ApiKey) -> ResponseError {
        match self {
            WriteFailure::Append(ApiError::NotLeaderOrFollower) | WriteFailure::NotLeader => {
                ResponseError::NotCoordinator
            }
            WriteFailure::Append(_) => ResponseError::CoordinatorNotAvailable,
            WriteFailure::TimedOut if api == ApiKey::OffsetCommit => ResponseError::RequestTimedOut,
            WriteFailure::TimedOut => ResponseError::CoordinatorNotAvailable,
        }
    }
}

/// What is left to do after an outcome was decided and written, outside the lock.
struct Delivery {
    /// Responses and where they go.
    answers: Vec<(oneshot::Sender<GroupResponse>, GroupResponse)>,
    /// Partitions whose high watermark must reach an offset before the answers go out.
    waits: Vec<(i32, i64)>,
    failed: BTreeMap<i32, WriteFailure>,
    /// Records written (for logs).
    written: usize,
}

pub struct GroupService {
    inner: Mutex<Inner>,
    log: Arc<dyn CoordinatorLog>,
    controller: ControllerChannel,
    cache: Arc<MetadataCache>,
    clock: SharedClock,
    node_id: i32,
    config: GroupConfig,
    offsets_topic_replication_factor: i16,
    retention_check_interval_ms: u64,
    /// `offsets.commit.timeout.ms`: how long a write waits for the high watermark.
    commit_timeout_ms: u64,
    timer_wake: Notify,
    /// What loads of `__consumer_offsets` partitions replayed and took.
    load_stats: crate::metrics::CoordinatorLoadStats,
    me: Weak<GroupService>,
}

impl std::fmt::Debug for GroupService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupService")
            .field("node_id", &self.node_id)
            .finish()
    }
}

/// The replication factor `__consumer_offsets` is created with: `offsets.topic.replication.factor`
/// (Kafka's default 3), except on a node configured as a cluster of one (no
/// `controller.quorum.voters`, or a single voter), where it is capped at 1. Kafka would refuse
/// to create the topic there until two more brokers joined, which never happens: a single node
/// keeps getting its offsets topic, as it always has. A multi-voter cluster is not capped by
/// the brokers that happen to be up, so a first FindCoordinator during a rolling start does not
/// create a topic of one replica that a later failover would lose.
pub fn offsets_topic_replication_factor(config: &BrokerConfig) -> i16 {
    let configured = config.group.offsets_topic_replication_factor;
    if config.kraft.voter_ids().len() <= 1 {
        configured.min(1)
    } else {
        configured
    }
}

impl GroupService {
    /// The group coordinator over the replica layer.
    pub fn new(
        config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        controller: ControllerChannel,
        cache: Arc<MetadataCache>,
        clock: SharedClock,
    ) -> Arc<GroupService> {
        let log = Arc::new(ReplicaLog::new(replicas, cache.clone()));
        Self::with_log(config, log, controller, cache, clock)
    }

    /// The group coordinator over any [`CoordinatorLog`] (tests pass one that fails).
    pub fn with_log(
        config: &BrokerConfig,
        log: Arc<dyn CoordinatorLog>,
        controller: ControllerChannel,
        cache: Arc<MetadataCache>,
        clock: SharedClock,
    ) -> Arc<GroupService> {
        let group_config = GroupConfig::from_broker(config);
        // Member ids must not repeat across restarts: seed them from the start time.
        let seed = (clock.now_ms() as u64) ^ (u64::from(std::process::id()) << 40);
        Arc::new_cyclic(|me| GroupService {
            inner: Mutex::new(Inner {
                machine: Coordinator::new(group_config.clone(), seed),
                waiters: HashMap::new(),
                next_token: 0,
                loaded: HashMap::new(),
            }),
            log,
            controller,
            cache,
            clock,
            node_id: config.node_id,
            config: group_config,
            offsets_topic_replication_factor: offsets_topic_replication_factor(config),
            retention_check_interval_ms: config.group.offsets_retention_check_interval_ms,
            commit_timeout_ms: config.group.offsets_commit_timeout_ms,
            timer_wake: Notify::new(),
            load_stats: Default::default(),
            me: me.clone(),
        })
    }

    /// What the loads of `__consumer_offsets` partitions replayed and took.
    pub fn load_stats(&self) -> &crate::metrics::CoordinatorLoadStats {
        &self.load_stats
    }

    /// The KIP-848 consumer groups this node coordinates (durable state), and how many classic
    /// groups it coordinates.
    pub fn group_views(&self) -> (Vec<crate::group::ConsumerGroupView>, usize) {
        let inner = self.lock();
        (
            inner.machine.consumer_group_views(),
            inner.machine.classic_group_count(),
        )
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles one group request; resolves when its response is ready (a JoinGroup waits for
    /// the rebalance, a SyncGroup for the leader's assignment, any write for the high
    /// watermark).
    pub async fn call(&self, caller: Caller, request: GroupRequest) -> GroupResponse {
        let api = request.api_key();
        let (tx, rx) = oneshot::channel();
        let mut token = 0;
        let delivery = self.decide(|inner, now| {
            inner.next_token += 1;
            token = inner.next_token;
            inner.waiters.insert(token, tx);
            let ctx = RequestContext {
                token,
                api_version: caller.api_version,
                client_id: caller.client_id,
                client_host: caller.client_host,
            };
            inner.machine.handle(&ctx, request, now)
        });
        if let Some(failure) = delivery.failed.values().next() {
            // The failed operation is rolled back, parking included: a request it parked
            // (a leader's SyncGroup waiting for its assignment to be durable) gets the failure.
            if let Some(tx) = self.lock().waiters.remove(&token) {
                let _ = tx.send(GroupResponse::error_only(api, failure.error(api)));
            }
        }
        self.deliver(delivery).await;
        match rx.await {
            Ok(response) => response,
            Err(_) => {
                // The sender was dropped without an answer: only possible if the service shut
                // down. Say so the way Kafka does.
                tracing::warn!(token, "group request dropped without a response");
                GroupResponse::error_only(api, ResponseError::CoordinatorNotAvailable)
            }
        }
    }

    /// Under the lock: brings the machine's view of high watermarks up to date, asks it for an
    /// outcome, appends the outcome's records (so no other decision's records land in between)
    /// and reports each append. Returns what must happen outside the lock.
    fn decide(&self, decide: impl FnOnce(&mut Inner, i64) -> Outcome) -> Delivery {
        let mut inner = self.lock();
        let now = self.clock.now_ms();
        for partition in self.observe_high_watermarks(&mut inner) {
            self.settle_locked(&mut inner, partition, now);
        }
        let outcome = decide(&mut inner, now);
        self.write_locked(&mut inner, outcome, now)
    }

    /// Under the lock, after writes of `partition` became durable: groups whose assignment they
    /// carry become Stable ([`Coordinator::settle_assignments`]).
    fn settle_locked(&self, inner: &mut Inner, partition: i32, now: i64) {
        let outcome = inner.machine.settle_assignments(partition, now);
        self.answer_detached(inner, outcome, now);
    }

    /// Under the lock: writes `outcome` (an operation without records) and sends its answers
    /// from a task of their own, waiting for no later write: what they say is durable, or an
    /// error.
    fn answer_detached(&self, inner: &mut Inner, outcome: Outcome, now: i64) {
        let mut delivery = self.write_locked(inner, outcome, now);
        if delivery.answers.is_empty() {
            return;
        }
        delivery.waits.clear();
        if let Some(me) = self.me.upgrade() {
            tokio::spawn(async move {
                me.deliver(delivery).await;
            });
        }
    }

    /// A write whose wait timed out becomes durable once the high watermark covers it, even if
    /// nobody waits for it any more.
    /// Returns the partitions where a write became durable.
    fn observe_high_watermarks(&self, inner: &mut Inner) -> Vec<i32> {
        let mut observed = Vec::new();
        for partition in inner.machine.partitions_with_pending_writes() {
            if let Ok(hw) = self.log.high_watermark(partition) {
                if inner.machine.observe_high_watermark(partition, hw) {
                    observed.push(partition);
                }
            }
        }
        observed
    }

    fn write_locked(&self, inner: &mut Inner, outcome: Outcome, now_ms: i64) -> Delivery {
        if !outcome.timers.is_empty() {
            self.timer_wake.notify_one();
        }
        debug_assert!(
            outcome.partitions.len() <= 1
                || outcome
                    .responses
                    .iter()
                    .all(|(_, r)| matches!(r, GroupResponse::DeleteGroups(_))),
            "only responses that name their groups may span partitions"
        );
        let answered: Vec<Token> = outcome.responses.iter().map(|(t, _)| *t).collect();
        let written = outcome.records.len();
        let mut by_partition: BTreeMap<i32, Vec<CoordinatorRecord>> = BTreeMap::new();
        for r in outcome.records {
            by_partition.entry(r.partition).or_default().push(r);
        }
        let mut failed = BTreeMap::new();
        let mut failed_assignments = Vec::new();
        for (partition, records) in by_partition {
            let appended = match outcome.producer {
                Some(producer) => self
                    .log
                    .append_transactional(partition, &records, producer, now_ms),
                None => self.log.append(partition, &records, now_ms),
            };
            match appended {
                Ok(end_offset) => inner.machine.write_appended(partition, end_offset),
                Err(e) => {
                    tracing::error!(partition, error = %e, "appending group records failed; the change is rolled back");
                    let failure = WriteFailure::Append(e);
                    let groups = inner.machine.write_failed(partition, &answered, now_ms);
                    failed_assignments.push((groups, failure.error(ApiKey::SyncGroup)));
                    failed.insert(partition, failure);
                }
            }
        }
        // Only once every partition of the operation is reported may another operation run.
        for (groups, sync_error) in failed_assignments {
            if !groups.is_empty() {
                let failing = inner.machine.fail_assignments(&groups, sync_error, now_ms);
                self.answer_detached(inner, failing, now_ms);
            }
        }
        let waits = outcome
            .partitions
            .iter()
            .filter(|p| !failed.contains_key(p))
            .filter_map(|p| inner.machine.durable_at(*p).map(|offset| (*p, offset)))
            .collect();
        let answers = outcome
            .responses
            .into_iter()
            .filter_map(|(token, response)| inner.waiters.remove(&token).map(|tx| (tx, response)))
            .collect();
        Delivery {
            answers,
            waits,
            failed,
            written,
        }
    }

    /// Waits (outside the lock) until the answers describe durable state, then answers.
    async fn deliver(&self, mut delivery: Delivery) -> usize {
        let deadline = Instant::now() + Duration::from_millis(self.commit_timeout_ms);
        for (partition, offset) in std::mem::take(&mut delivery.waits) {
            let timeout = deadline.saturating_duration_since(Instant::now());
            match self
                .log
                .wait_for_high_watermark(partition, offset, timeout)
                .await
            {
                Durability::Durable => {
                    let mut inner = self.lock();
                    if inner.machine.observe_high_watermark(partition, offset) {
                        let now = self.clock.now_ms();
                        self.settle_locked(&mut inner, partition, now);
                    }
                }
                Durability::Unknown => {
                    tracing::warn!(
                        partition,
                        offset,
                        "group write not durable in time; it stays pending"
                    );
                    delivery.failed.insert(partition, WriteFailure::TimedOut);
                    let mut inner = self.lock();
                    let now = self.clock.now_ms();
                    let outcome = inner.machine.abandon_pending_assignments(partition, now);
                    self.answer_detached(&mut inner, outcome, now);
                }
                Durability::NotLeader => {
                    delivery.failed.insert(partition, WriteFailure::NotLeader);
                }
            }
        }
        for (tx, mut response) in delivery.answers {
            self.fail_response(&mut response, &delivery.failed);
            let _ = tx.send(response);
        }
        delivery.written
    }

    fn fail_response(&self, response: &mut GroupResponse, failed: &BTreeMap<i32, WriteFailure>) {
        let api = response.api_key();
        if matches!(response, GroupResponse::DeleteGroups(_)) {
            response.fail_writes_per_group(|group_id| {
                failed
                    .get(&self.partition_for(group_id))
                    .map(|f| f.error(api))
            });
        } else if let Some(failure) = failed.values().next() {
            // Every other response concerns one group, hence one partition.
            response.fail_writes(failure.error(api));
        }
    }

    /// Decides and writes now, delivers later: a timer task must not wait on the log.
    fn run_detached(self: &Arc<Self>, decide: impl FnOnce(&mut Inner, i64) -> Outcome) {
        let delivery = self.decide(decide);
        if delivery.answers.is_empty() && delivery.waits.is_empty() {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            me.deliver(delivery).await;
        });
    }

    /// Starts the timer and retention tasks; they stop when `shutdown` turns true.
    pub fn start(
        self: &Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(self.clone().timer_loop(shutdown.clone())),
            tokio::spawn(self.clone().retention_loop(shutdown)),
        ]
    }

    async fn timer_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let now = self.clock.now_ms();
            let next = self.lock().machine.next_deadline_ms();
            let wait_ms = next
                .map(|d| (d - now).clamp(0, TIMER_SLEEP_MS_MAX))
                .unwrap_or(TIMER_SLEEP_MS_MAX);
            tokio::select! {
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return; }
                }
                _ = self.timer_wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait_ms as u64)) => {}
            }
            let now = self.clock.now_ms();
            if self.lock().machine.due_partitions(now).is_empty() {
                continue;
            }
            tokio::time::sleep(TIMER_TICK).await;
            let now = self.clock.now_ms();
            let due = self.lock().machine.due_partitions(now);
            for partition in due {
                self.run_detached(|inner, now| inner.machine.tick(partition, now));
            }
        }
    }

    async fn retention_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick =
            tokio::time::interval(Duration::from_millis(self.retention_check_interval_ms));
        tick.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { return; }
                }
                _ = tick.tick() => {
                    let delivery = self.decide(|inner, now| inner.machine.expire_offsets(now));
                    let tombstones = self.deliver(delivery).await;
                    if tombstones > 0 {
                        tracing::info!(tombstones, "expired committed offsets");
                    }
                }
            }
        }
    }

    /// Makes sure `__consumer_offsets` exists (created on first use, through the controller,
    /// like Kafka) and returns the image that has it.
    pub async fn ensure_offsets_topic(&self) -> Result<Arc<MetadataImage>, ApiError> {
        let image = self.cache.image();
        if image.topic(OFFSETS_TOPIC_NAME).is_some() {
            return Ok(image);
        }
        let spec = CreateTopicSpec {
            name: OFFSETS_TOPIC_NAME.to_owned(),
            num_partitions: self.config.offsets_topic_num_partitions,
            // With fewer active brokers the controller refuses it (INVALID_REPLICATION_FACTOR),
            // FindCoordinator answers COORDINATOR_NOT_AVAILABLE and clients retry until enough
            // brokers are up, as in Kafka.
            replication_factor: self.offsets_topic_replication_factor,
            assignments: Vec::new(),
            configs: vec![
                // Offsets must never be deleted by time or size retention.
                ("cleanup.policy".into(), Some("compact".into())),
                ("compression.type".into(), Some("producer".into())),
                (
                    "segment.bytes".into(),
                    Some(self.config.offsets_topic_segment_bytes.to_string()),
                ),
            ],
        };
        match self.controller.ensure_topic(spec, None).await {
            Ok(_) | Err(ApiError::TopicAlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(self.cache.image())
    }

    /// The marker of `producer_id`'s transaction is written to `partition` of
    /// `__consumer_offsets`: the offsets its TxnOffsetCommits left pending there take effect
    /// (`commit`) or are dropped.
    pub fn complete_transaction(&self, partition: i32, producer_id: i64, commit: bool) {
        let delivery = self.decide(|inner, now| {
            inner
                .machine
                .complete_transaction(partition, producer_id, commit, now)
        });
        debug_assert!(delivery.answers.is_empty());
    }

    /// Whether this node coordinates `group_id` now (its partition is led and loaded here).
    pub fn coordinates(&self, group_id: &str) -> bool {
        self.lock().machine.check_coordinator(group_id).is_ok()
    }

    /// The coordinator partition of a group.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        super::partition_for(group_id, self.config.offsets_topic_num_partitions)
    }

    /// Replays one partition into the machine: records below the high watermark as durable,
    /// the batches above it as pending writes. Runs on a blocking thread.
    fn load_partition(&self, partition: i32, leader_epoch: i32) {
        let started = std::time::Instant::now();
        let start = self
            .log
            .log_start_offset(partition)
            .and_then(|o| Ok((o, self.log.high_watermark(partition)?)));
        let (mut offset, high_watermark) = match start {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(partition, error = %e, "cannot load group coordinator partition");
                return;
            }
        };
        let mut replayed = 0u64;
        loop {
            let records = match self.log.read(partition, offset, LOAD_READ_BYTES) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(partition, offset, error = %e, "reading __consumer_offsets failed");
                    return;
                }
            };
            if records.is_empty() {
                break;
            }
            let mut buf = records.clone();
            let sets = match RecordBatchDecoder::decode_all(&mut buf) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(partition, offset, error = %e, "undecodable batch in __consumer_offsets");
                    return;
                }
            };
            // Each batch ends at its header's last offset: a batch the cleaner emptied (kept
            // for its producer's state) is stepped over rather than taken for the log's end.
            let ends = batch_last_offsets(&records);
            let ends = (ends.len() == sets.len()).then_some(ends);
            let mut last = offset - 1;
            let mut inner = self.lock();
            if inner.loaded.get(&partition) != Some(&leader_epoch) {
                return; // Leadership moved on while loading.
            }
            for (i, set) in sets.into_iter().enumerate() {
                if let Some(end) = ends.as_ref().map(|e| e[i]) {
                    last = last.max(end);
                }
                for record in set.records {
                    last = last.max(record.offset);
                    if record.control {
                        if let Some(commit) = record.key.as_deref().and_then(txn_marker_commits) {
                            inner
                                .machine
                                .replay_txn_marker(partition, record.producer_id, commit);
                        }
                        continue;
                    }
                    let Some(key) = record.key.as_ref() else {
                        continue;
                    };
                    let outcome = if record.transactional {
                        inner.machine.replay_transactional(
                            partition,
                            record.producer_id,
                            key,
                            record.value.as_deref(),
                        )
                    } else {
                        inner
                            .machine
                            .replay(partition, key, record.value.as_deref())
                    };
                    match outcome {
                        Ok(()) => replayed += 1,
                        Err(e) => {
                            tracing::warn!(partition, offset = record.offset, error = %e, "skipping record")
                        }
                    }
                }
                inner
                    .machine
                    .replayed_up_to(partition, last + 1, high_watermark);
            }
            drop(inner);
            if last < offset {
                break;
            }
            offset = last + 1;
        }
        let now = self.clock.now_ms();
        let outcome = {
            let mut inner = self.lock();
            if inner.loaded.get(&partition) != Some(&leader_epoch) {
                return;
            }
            inner.machine.complete_load(partition, now)
        };
        if !outcome.timers.is_empty() {
            self.timer_wake.notify_one();
        }
        let elapsed_ms = started.elapsed().as_millis() as u64;
        self.load_stats.record(replayed, elapsed_ms);
        if replayed > 0 {
            tracing::info!(
                partition,
                records = replayed,
                elapsed_ms,
                "loaded group coordinator partition"
            );
        } else {
            tracing::debug!(
                partition,
                elapsed_ms,
                "loaded empty group coordinator partition"
            );
        }
    }
}

/// Whether a control record's key is a transaction marker that commits (`Some(true)`) or
/// aborts (`Some(false)`): version i16, type i16 (0 ABORT, 1 COMMIT).
fn txn_marker_commits(key: &[u8]) -> Option<bool> {
    match key.get(2..4)? {
        [0, 0] => Some(false),
        [0, 1] => Some(true),
        _ => None,
    }
}

/// The last offset of each whole v2 batch in `records`: its base offset plus its last offset
/// delta, from the header (a batch may hold fewer records, or none, after compaction).
pub(crate) fn batch_last_offsets(records: &[u8]) -> Vec<i64> {
    let mut at = 0usize;
    let mut ends = Vec::new();
    while records.len() >= at + 27 {
        let field = |from: usize, to: usize| &records[at + from..at + to];
        let base = i64::from_be_bytes(field(0, 8).try_into().expect("8 bytes"));
        let length = i32::from_be_bytes(field(8, 12).try_into().expect("4 bytes"));
        let Some(size) = usize::try_from(length).ok().and_then(|l| l.checked_add(12)) else {
            break;
        };
        if length < 15 || records.len() < at + size {
            break;
        }
        let delta = i32::from_be_bytes(field(23, 27).try_into().expect("4 bytes"));
        ends.push(base + i64::from(delta));
        at += size;
    }
    ends
}

impl ImageListener for GroupService {
    fn on_image(&self, previous: &MetadataImage, next: &MetadataImage) {
        // Committed offsets of deleted topics go (Kafka's `onPartitionsDeleted`); a topic
        // re-created under the same name has a new id and starts with none.
        let deleted: std::collections::BTreeSet<String> = previous
            .topics
            .iter()
            .filter(|(name, t)| next.topic(name).is_none_or(|n| n.id != t.id))
            .map(|(name, _)| name.clone())
            .collect();
        if !deleted.is_empty() {
            if let (Some(me), Ok(rt)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) {
                let _entered = rt.enter();
                let partitions = me.lock().machine.active_partitions();
                for p in partitions {
                    let deleted = deleted.clone();
                    me.run_detached(move |inner, _now| inner.machine.topics_deleted(p, &deleted));
                }
            }
        }
        let led: HashMap<i32, i32> = next
            .topic(OFFSETS_TOPIC_NAME)
            .map(|t| {
                t.partitions
                    .iter()
                    .filter(|(_, reg)| reg.leader == self.node_id)
                    .map(|(p, reg)| (*p, reg.leader_epoch))
                    .collect()
            })
            .unwrap_or_default();
        let mut to_load = Vec::new();
        // Unloading writes nothing, so its answers (NOT_COORDINATOR to parked requests) go out
        // right here, with or without a runtime.
        let mut answers = Vec::new();
        {
            let mut inner = self.lock();
            let current: Vec<i32> = inner.loaded.keys().copied().collect();
            let mut dropped = Vec::new();
            for p in current {
                if !led.contains_key(&p) {
                    inner.loaded.remove(&p);
                    dropped.push(inner.machine.unload(p));
                }
            }
            for (p, epoch) in &led {
                if inner.loaded.get(p) != Some(epoch) {
                    inner.loaded.insert(*p, *epoch);
                    dropped.push(inner.machine.begin_load(*p));
                    to_load.push((*p, *epoch));
                }
            }
            for outcome in dropped {
                debug_assert!(outcome.records.is_empty() && outcome.partitions.is_empty());
                for (token, response) in outcome.responses {
                    if let Some(tx) = inner.waiters.remove(&token) {
                        answers.push((tx, response));
                    }
                }
            }
        }
        for (tx, response) in answers {
            let _ = tx.send(response);
        }
        if to_load.is_empty() {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let load = move || {
            for (p, epoch) in to_load {
                me.load_partition(p, epoch);
            }
        };
        // Replay reads the log: off the async threads when there are some, else right here.
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(load);
            }
            Err(_) => load(),
        }
    }
}

#[cfg(test)]
mod batch_end_tests {
    use super::*;

    #[test]
    fn each_batch_ends_at_its_headers_last_offset_even_when_it_holds_no_record() {
        let record = |n: usize| crate::group::CoordinatorRecord {
            partition: 0,
            key: bytes::Bytes::from(format!("k{n}")),
            value: Some(bytes::Bytes::from_static(b"v")),
        };
        let mut bytes = super::super::log::encode_batch(&[record(0), record(1)], 5, 0)
            .unwrap()
            .to_vec();
        let written = batch_last_offsets(&bytes);
        assert_eq!(written.last(), Some(&6));
        // A batch emptied by the cleaner: offsets 8..=20 in its header, no record.
        let mut empty = vec![0u8; 61];
        empty[0..8].copy_from_slice(&8i64.to_be_bytes());
        empty[8..12].copy_from_slice(&49i32.to_be_bytes());
        empty[16] = 2;
        empty[23..27].copy_from_slice(&12i32.to_be_bytes());
        empty[43..51].copy_from_slice(&7i64.to_be_bytes()); // producer id
        let crc = crc32c::crc32c(&empty[21..]);
        empty[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes.extend_from_slice(&empty);
        let with_empty = [written.clone(), vec![20]].concat();
        assert_eq!(batch_last_offsets(&bytes), with_empty);
        let sets = RecordBatchDecoder::decode_all(&mut bytes::Bytes::from(bytes.clone())).unwrap();
        assert_eq!(
            sets.len(),
            with_empty.len(),
            "one set per batch, the empty one included"
        );
        // A torn tail is not a batch.
        assert_eq!(batch_last_offsets(&bytes[..bytes.len() - 1]), written);
    }
}

#[cfg(test)]
mod replication_factor_tests {
    use super::*;
    use crate::config::RawConfig;

    fn config(lines: &str) -> BrokerConfig {
        BrokerConfig::from_raw(RawConfig::parse(lines, std::path::Path::new("t")).unwrap())
            .unwrap()
            .config
    }

    #[test]
    fn a_single_node_caps_the_offsets_topic_at_one_replica_and_a_cluster_does_not() {
        assert_eq!(offsets_topic_replication_factor(&config("")), 1);
        let cluster = "process.roles=broker,controller\nnode.id=1\n\
controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094\n\
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092\n\
controller.listener.names=CONTROLLER\n";
        assert_eq!(offsets_topic_replication_factor(&config(cluster)), 3);
        let two = format!("{cluster}offsets.topic.replication.factor=2\n");
        assert_eq!(offsets_topic_replication_factor(&config(&two)), 2);
        let one_voter = "process.roles=broker,controller\nnode.id=1\n\
controller.quorum.voters=1@127.0.0.1:19092\n\
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092\n\
controller.listener.names=CONTROLLER\n";
        assert_eq!(offsets_topic_replication_factor(&config(one_voter)), 1);
    }
}
