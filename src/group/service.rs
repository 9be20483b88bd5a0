//! The async shell around the pure [`Coordinator`]: it is the only part of `group` that touches
//! the broker.
//!
//! - **Requests**: a handler calls [`GroupService::call`]. The shell hands the request to the
//!   machine under a lock, appends the records of the outcome to their `__consumer_offsets`
//!   partitions through the replica layer (as a produce with acks=all would, still under the
//!   lock so the log order is the order the machine decided in), waits for the high watermark
//!   to cover them, and only then delivers the outcome's responses. A parked JoinGroup or
//!   SyncGroup is a oneshot receiver the handler awaits; a later outcome (another member's
//!   request, a timer) fills it.
//! - **Timers**: one tokio task sleeps until the machine's next deadline and calls
//!   [`Coordinator::tick`]; every call that arms a timer wakes it to re-plan.
//! - **Loading**: an [`ImageListener`] watches the metadata image. When this node becomes leader
//!   of a `__consumer_offsets` partition, the partition is replayed into the machine (its groups
//!   answer COORDINATOR_LOAD_IN_PROGRESS meanwhile); when it stops leading one, its groups are
//!   unloaded.
//! - **Retention**: every `offsets.retention.check.interval.ms`, expired offsets are tombstoned.
//!
//! It does not decide anything about groups; that is the machine's job.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kafkaiq_storage::TopicPartition;
use tokio::sync::{oneshot, watch, Notify};

use super::{
    Coordinator, CoordinatorRecord, GroupConfig, GroupRequest, GroupResponse, Outcome,
    RequestContext, OFFSETS_TOPIC_NAME,
};
use crate::clock::SharedClock;
use crate::config::BrokerConfig;
use crate::controller::{Controller, CreateTopicSpec};
use crate::errors::ApiError;
use crate::metadata::{ImageListener, MetadataCache, MetadataImage};
use crate::replica::{Partition, ReplicaManager};

/// Bytes read per step while replaying a `__consumer_offsets` partition.
const LOAD_READ_BYTES: usize = 1024 * 1024;
/// Upper bound on one sleep of the timer task, so a missed wake-up costs at most this.
const TIMER_SLEEP_MS_MAX: i64 = 1_000;

/// Partitions written to, each with the offset its high watermark must reach.
type Appended = Vec<(Arc<Partition>, i64)>;
/// Responses ready to go once the writes are durable.
type Answers = Vec<(oneshot::Sender<GroupResponse>, GroupResponse)>;

/// Who a request is from; the shell assigns the token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub api_version: i16,
    pub client_id: String,
    pub client_host: String,
}

struct Inner {
    machine: Coordinator,
    waiters: HashMap<u64, oneshot::Sender<GroupResponse>>,
    next_token: u64,
    /// Leader epoch each `__consumer_offsets` partition was loaded at.
    loaded: HashMap<i32, i32>,
}

pub struct GroupService {
    inner: Mutex<Inner>,
    replicas: Arc<ReplicaManager>,
    controller: Arc<Controller>,
    cache: Arc<MetadataCache>,
    clock: SharedClock,
    node_id: i32,
    config: GroupConfig,
    offsets_topic_replication_factor: i16,
    retention_check_interval_ms: u64,
    /// `offsets.commit.timeout.ms`: how long a write waits for the high watermark.
    commit_timeout_ms: u64,
    timer_wake: Notify,
    me: Weak<GroupService>,
}

impl std::fmt::Debug for GroupService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupService")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl GroupService {
    pub fn new(
        config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        controller: Arc<Controller>,
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
            replicas,
            controller,
            cache,
            clock,
            node_id: config.node_id,
            config: group_config,
            offsets_topic_replication_factor: config.offsets_topic_replication_factor,
            retention_check_interval_ms: config.offsets_retention_check_interval_ms,
            commit_timeout_ms: config.offsets_commit_timeout_ms,
            timer_wake: Notify::new(),
            me: me.clone(),
        })
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles one group request; resolves when its response is ready (a JoinGroup waits for
    /// the rebalance, a SyncGroup for the leader's assignment).
    pub async fn call(&self, caller: Caller, request: GroupRequest) -> GroupResponse {
        let api = request.api_key();
        let (tx, rx) = oneshot::channel();
        let (token, appended, responses) = {
            let mut inner = self.lock();
            inner.next_token += 1;
            let token = inner.next_token;
            inner.waiters.insert(token, tx);
            let ctx = RequestContext {
                token,
                api_version: caller.api_version,
                client_id: caller.client_id,
                client_host: caller.client_host,
            };
            let now = self.clock.now_ms();
            let outcome = inner.machine.handle(&ctx, request, now);
            let (appended, responses) = self.write_locked(&mut inner, outcome);
            (token, appended, responses)
        };
        self.finish(appended, responses).await;
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

    /// Appends the outcome's records (under the machine lock, so log order is decision order)
    /// and notes the timers. Returns what must be awaited before responses go out.
    fn write_locked(&self, inner: &mut Inner, outcome: Outcome) -> (Appended, Answers) {
        if !outcome.timers.is_empty() {
            self.timer_wake.notify_one();
        }
        let mut appended = Vec::new();
        let mut failure: Option<ApiError> = None;
        if !outcome.records.is_empty() {
            match self.append(&outcome.records) {
                Ok(a) => appended = a,
                Err(e) => failure = Some(e),
            }
        }
        let mut responses = Vec::new();
        for (token, mut response) in outcome.responses {
            if let Some(e) = &failure {
                tracing::error!(error = %e, "appending group records failed");
                response.fail_writes(ResponseError::CoordinatorNotAvailable);
            }
            if let Some(tx) = inner.waiters.remove(&token) {
                responses.push((tx, response));
            }
        }
        (appended, responses)
    }

    /// Waits (acks=all) for appended records, then answers.
    async fn finish(&self, appended: Appended, responses: Answers) {
        let mut ok = true;
        if !appended.is_empty() {
            let partitions: Vec<_> = appended.iter().map(|(p, _)| p.clone()).collect();
            let done = self
                .replicas
                .purgatory
                .wait_until(
                    &partitions,
                    Duration::from_millis(self.commit_timeout_ms),
                    || {
                        let all = appended
                            .iter()
                            .all(|(p, end)| p.acks_all_outcome(*end).is_some());
                        async move { all.then_some(()) }
                    },
                )
                .await;
            ok = done.is_some()
                && appended
                    .iter()
                    .all(|(p, end)| matches!(p.acks_all_outcome(*end), Some(Ok(()))));
        }
        for (tx, mut response) in responses {
            if !ok {
                response.fail_writes(ResponseError::RequestTimedOut);
            }
            let _ = tx.send(response);
        }
    }

    /// Appends records, one uncompressed batch per partition. Returns each partition with the
    /// offset the high watermark must reach.
    fn append(&self, records: &[CoordinatorRecord]) -> Result<Appended, ApiError> {
        let mut by_partition: BTreeMap<i32, Vec<&CoordinatorRecord>> = BTreeMap::new();
        for r in records {
            by_partition.entry(r.partition).or_default().push(r);
        }
        let image = self.cache.image();
        let now = self.clock.now_ms();
        let mut appended = Vec::new();
        for (partition, records) in by_partition {
            let tp = TopicPartition {
                topic: OFFSETS_TOPIC_NAME.to_owned(),
                partition,
            };
            let p = self.replicas.partition_or_error(&image, &tp)?;
            let batch = encode_batch(&records, now)?;
            let info = p.append_records_to_leader(&batch, -1, now)?;
            appended.push((p, info.last_offset + 1));
        }
        Ok(appended)
    }

    /// Runs an outcome produced outside a request (unloading).
    async fn run_outcome(&self, outcome: Outcome) {
        self.run(|_| outcome).await;
    }

    /// Asks the machine for an outcome and writes its records under one lock, so no other
    /// decision's records can land in between (log order is decision order); then answers.
    /// Returns how many records were written.
    async fn run(&self, decide: impl FnOnce(&mut Coordinator) -> Outcome) -> usize {
        let (written, appended, responses) = {
            let mut inner = self.lock();
            let outcome = decide(&mut inner.machine);
            let written = outcome.records.len();
            if outcome.records.is_empty() && outcome.responses.is_empty() {
                return 0;
            }
            let (appended, responses) = self.write_locked(&mut inner, outcome);
            (written, appended, responses)
        };
        self.finish(appended, responses).await;
        written
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
            self.run(|machine| machine.tick(now)).await;
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
                    let now = self.clock.now_ms();
                    let tombstones = self.run(|machine| machine.expire_offsets(now)).await;
                    if tombstones > 0 {
                        tracing::info!(tombstones, "expired committed offsets");
                    }
                }
            }
        }
    }

    /// Makes sure `__consumer_offsets` exists (created on first use, through the controller,
    /// like Kafka) and returns the image that has it.
    pub fn ensure_offsets_topic(&self) -> Result<Arc<MetadataImage>, ApiError> {
        let image = self.cache.image();
        if image.topic(OFFSETS_TOPIC_NAME).is_some() {
            return Ok(image);
        }
        let live = image.brokers.len().max(1) as i16;
        let spec = CreateTopicSpec {
            name: OFFSETS_TOPIC_NAME.to_owned(),
            num_partitions: self.config.offsets_topic_num_partitions,
            // Kafka refuses to create it with fewer live brokers than the configured factor;
            // a single node (our default setup) would never get one, so use what is there.
            replication_factor: self.offsets_topic_replication_factor.min(live),
            assignments: Vec::new(),
            configs: vec![
                // Offsets must never be deleted by time or size retention.
                ("cleanup.policy".into(), Some("compact".into())),
                ("compression.type".into(), Some("producer".into())),
                ("segment.bytes".into(), Some("104857600".into())),
            ],
        };
        match self.controller.create_topic(&spec, false) {
            Ok(_) | Err(ApiError::TopicAlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(self.cache.image())
    }

    /// The coordinator partition of a group.
    pub fn partition_for(&self, group_id: &str) -> i32 {
        super::partition_for(group_id, self.config.offsets_topic_num_partitions)
    }

    /// Replays one partition into the machine. Runs on a blocking thread.
    fn load_partition(&self, partition: i32, leader_epoch: i32) {
        let tp = TopicPartition {
            topic: OFFSETS_TOPIC_NAME.to_owned(),
            partition,
        };
        let started = std::time::Instant::now();
        let image = self.cache.image();
        let p = match self.replicas.partition_or_error(&image, &tp) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(partition, error = %e, "cannot load group coordinator partition");
                return;
            }
        };
        let mut offset = p.offsets().log_start_offset;
        let mut replayed = 0u64;
        loop {
            let read = match p.read(offset, -1, LOAD_READ_BYTES, true, false) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(partition, offset, error = %e, "reading __consumer_offsets failed");
                    return;
                }
            };
            if read.records.is_empty() {
                break;
            }
            let mut buf = read.records.clone();
            let sets = match RecordBatchDecoder::decode_all(&mut buf) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(partition, offset, error = %e, "undecodable batch in __consumer_offsets");
                    return;
                }
            };
            let mut last = offset - 1;
            let mut inner = self.lock();
            if inner.loaded.get(&partition) != Some(&leader_epoch) {
                return; // Leadership moved on while loading.
            }
            for set in sets {
                for record in set.records {
                    last = last.max(record.offset);
                    if record.control {
                        continue;
                    }
                    let Some(key) = record.key.as_ref() else {
                        continue;
                    };
                    match inner
                        .machine
                        .replay(partition, key, record.value.as_deref())
                    {
                        Ok(()) => replayed += 1,
                        Err(e) => {
                            tracing::warn!(partition, offset = record.offset, error = %e, "skipping record")
                        }
                    }
                }
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

impl ImageListener for GroupService {
    fn on_image(&self, _previous: &MetadataImage, next: &MetadataImage) {
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
        let mut unloaded = Vec::new();
        {
            let mut inner = self.lock();
            let current: Vec<(i32, i32)> = inner.loaded.iter().map(|(p, e)| (*p, *e)).collect();
            for (p, _) in current {
                if !led.contains_key(&p) {
                    inner.loaded.remove(&p);
                    unloaded.push(inner.machine.unload(p));
                }
            }
            for (p, epoch) in &led {
                if inner.loaded.get(p) != Some(epoch) {
                    inner.loaded.insert(*p, *epoch);
                    inner.machine.begin_load(*p);
                    to_load.push((*p, *epoch));
                }
            }
        }
        let Some(me) = self.me.upgrade() else {
            return;
        };
        for outcome in unloaded {
            let me = me.clone();
            spawn_or_run(async move { me.run_outcome(outcome).await });
        }
        if !to_load.is_empty() {
            let me = me.clone();
            let load = move || {
                for (p, epoch) in to_load {
                    me.load_partition(p, epoch);
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn_blocking(load);
                }
                Err(_) => load(),
            }
        }
    }
}

fn spawn_or_run<F: std::future::Future<Output = ()> + Send + 'static>(f: F) {
    if let Ok(h) = tokio::runtime::Handle::try_current() {
        h.spawn(f);
    }
}

fn encode_batch(records: &[&CoordinatorRecord], now_ms: i64) -> Result<Bytes, ApiError> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: now_ms,
            key: Some(r.key.clone()),
            value: r.value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| ApiError::InvalidRecord(format!("cannot encode coordinator records: {e}")))?;
    Ok(buf.freeze())
}
