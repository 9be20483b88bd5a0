//! One fetcher: a task that fetches every partition it holds from one leader, in one Fetch
//! request at a time (Kafka's `AbstractFetcherThread#doWork`).
//!
//! Each round it truncates the partitions without leader epochs to their high watermarks,
//! fetches the partitions ready to fetch, and applies each answer under the fetcher's lock:
//! append the leader's batches and take its high watermark and log start offset; truncate a
//! diverged log to where the leader's epoch ends; find the leader's offsets after
//! OFFSET_OUT_OF_RANGE; back off `replica.fetch.backoff.ms` after an error; drop a partition
//! whose epoch the leader has moved past. An answer is applied only if the partition is still
//! in the state the request was built from (same topic id, leader epoch and fetch offset), and
//! the partition itself refuses writes from any other leader epoch.
//!
//! The lock over the partitions is a `std::sync::Mutex`, held while answers are applied (appends
//! and truncations are short, page-cache writes, as a produce's append is), never across an
//! await: the manager removing a partition waits for the answer being applied, so once removed
//! a partition is never written by this fetcher again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafkaiq_storage::{parallel, TopicPartition};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::leader::{FetchPartitionSpec, LeaderEndPoint};
use super::state::{
    self, AnswerAction, OutOfRangePlan, PartitionAnswer, PartitionFetchState, Phase,
};
use crate::errors::ApiError;
use crate::replica::brokers::BrokerView;
use crate::replica::partition::Partition;
use crate::replica::quota::{self, ReplicationQuota};

/// A partition a fetcher holds.
pub struct Fetched {
    pub partition: Arc<Partition>,
    pub state: PartitionFetchState,
}

/// What the manager and the task share.
pub struct FetcherShared {
    pub leader: i32,
    pub fetcher_id: usize,
    partitions: Mutex<BTreeMap<TopicPartition, Fetched>>,
    /// Partitions were added, or the fetcher was stopped.
    changed: Notify,
    stopped: AtomicBool,
}

impl FetcherShared {
    pub fn new(leader: i32, fetcher_id: usize) -> FetcherShared {
        FetcherShared {
            leader,
            fetcher_id,
            partitions: Mutex::new(BTreeMap::new()),
            changed: Notify::new(),
            stopped: AtomicBool::new(false),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, Fetched>> {
        self.partitions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the task (new partitions to fetch).
    pub fn notify(&self) {
        self.changed.notify_one();
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// The fetch state of `tp`, for tests and DescribeLogDirs-style views.
    pub fn state_of(&self, tp: &TopicPartition) -> Option<PartitionFetchState> {
        self.lock().get(tp).map(|f| f.state.clone())
    }
}

/// The task's own context.
pub struct FetcherTask {
    pub shared: Arc<FetcherShared>,
    pub endpoint: Arc<dyn LeaderEndPoint>,
    pub brokers: Arc<BrokerView>,
    pub node_id: i32,
    pub backoff: Duration,
    /// The follower quota (KIP-73): throttled partitions not caught up are left out of a
    /// request while it is exceeded, and their bytes are counted in it.
    pub quota: Arc<ReplicationQuota>,
    pub shutdown: watch::Receiver<bool>,
}

/// A partition whose fetch offset the leader does not have, to be placed again.
struct Reset {
    tp: TopicPartition,
    leader_epoch: i32,
    fetch_offset: i64,
}

impl FetcherTask {
    pub async fn run(mut self) {
        tracing::debug!(
            leader = self.shared.leader,
            fetcher = self.shared.fetcher_id,
            "replica fetcher started"
        );
        loop {
            if self.shared.is_stopped() || *self.shutdown.borrow() {
                break;
            }
            self.truncate_to_high_watermarks();
            let (specs, throttled) = self.ready_partitions(Instant::now());
            if specs.is_empty() {
                // Only throttled partitions to fetch: look again after a backoff, as Kafka's
                // fetcher waits `replica.fetch.backoff.ms` on an empty request.
                let recheck = throttled.then(|| Instant::now() + self.backoff);
                self.wait_for_work(recheck).await;
                continue;
            }
            let broker_epoch = self.brokers.get().broker_epoch(self.node_id);
            let fetch = self
                .endpoint
                .fetch(self.shared.leader, broker_epoch, specs.clone());
            let result = tokio::select! {
                r = fetch => r,
                _ = outgrown(&self.shared, &specs) => {
                    // The leader may park this fetch for `replica.fetch.wait.max.ms`; partitions
                    // just added (a leader moved here) would wait that long for their first
                    // fetch, and an acks=all produce on them with it. Ask again, with them.
                    tracing::debug!(leader = self.shared.leader, partitions = specs.len(), "partitions added; the fetch in flight is abandoned");
                    self.endpoint.abandon(self.shared.leader);
                    continue;
                }
                _ = self.shutdown.changed() => continue,
            };
            let resets = match result {
                Ok(answers) => self.apply_answers(&specs, answers),
                Err(e) => {
                    tracing::debug!(leader = self.shared.leader, error = %e, partitions = specs.len(), "fetch failed; backing off");
                    self.delay(&specs);
                    Vec::new()
                }
            };
            for reset in resets {
                self.reset_offset(reset).await;
            }
        }
        tracing::debug!(
            leader = self.shared.leader,
            fetcher = self.shared.fetcher_id,
            "replica fetcher stopped"
        );
    }

    /// Sleeps until partitions are added, a delayed one is due, `recheck` comes, or the
    /// fetcher stops.
    async fn wait_for_work(&mut self, recheck: Option<Instant>) {
        let now = Instant::now();
        let next_due = self
            .shared
            .lock()
            .values()
            .filter_map(|f| f.state.delayed_until.filter(|at| *at > now))
            .chain(recheck)
            .min();
        let sleep = async {
            match next_due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.shared.changed.notified() => {}
            _ = sleep => {}
            _ = self.shutdown.changed() => {}
        }
    }

    /// Kafka's `truncateToHighWatermark` for partitions without leader epochs.
    fn truncate_to_high_watermarks(&self) {
        let mut partitions = self.shared.lock();
        for (tp, fetched) in partitions.iter_mut() {
            if fetched.state.phase != Phase::Truncating {
                continue;
            }
            let p = &fetched.partition;
            let epoch = fetched.state.current_leader_epoch;
            let offset = fetched.state.fetch_offset;
            match p.truncate_to(offset, epoch) {
                Ok(()) => {
                    tracing::info!(topic = %tp.topic, partition = tp.partition, offset, "truncated to the high watermark before fetching");
                    fetched.state = fetched
                        .state
                        .fetching_at(p.log().log_end_offset(), p.log().latest_epoch());
                }
                Err(e) => {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "truncation failed; backing off");
                    fetched.state = fetched.state.delayed(Instant::now(), self.backoff);
                }
            }
        }
    }

    /// The partitions to fetch now, and whether the follower quota held any back (Kafka's
    /// `buildFetch` with `shouldFollowerThrottle`).
    fn ready_partitions(&self, now: Instant) -> (Vec<FetchPartitionSpec>, bool) {
        let mut exceeded = None;
        let mut held_back = false;
        let specs = self
            .shared
            .lock()
            .iter()
            .filter(|(_, f)| f.state.is_ready_for_fetch(now))
            .filter(|(tp, f)| {
                if !self.quota.is_throttled(tp) {
                    return true;
                }
                let in_sync = f.state.lag.is_some_and(|lag| lag <= 0);
                let exceeded = *exceeded.get_or_insert_with(|| self.quota.is_exceeded());
                let throttle = quota::should_throttle(true, in_sync, exceeded);
                held_back |= throttle;
                !throttle
            })
            .map(|(tp, f)| FetchPartitionSpec {
                tp: tp.clone(),
                topic_id: f.state.topic_id,
                fetch_offset: f.state.fetch_offset,
                last_fetched_epoch: f.state.last_fetched_epoch,
                current_leader_epoch: f.state.current_leader_epoch,
                log_start_offset: f.partition.log().log_start_offset(),
            })
            .collect();
        (specs, held_back)
    }

    /// Delays the partitions of a failed request that are still as they were.
    fn delay(&self, specs: &[FetchPartitionSpec]) {
        let now = Instant::now();
        let mut partitions = self.shared.lock();
        for spec in specs {
            if let Some(f) = partitions.get_mut(&spec.tp) {
                if unchanged(&f.state, spec) {
                    f.state = f.state.delayed(now, self.backoff);
                }
            }
        }
    }

    /// Applies each answer; returns the partitions whose offsets must be found again.
    fn apply_answers(
        &self,
        specs: &[FetchPartitionSpec],
        answers: Vec<(TopicPartition, PartitionAnswer)>,
    ) -> Vec<Reset> {
        let now = Instant::now();
        let mut resets = Vec::new();
        let mut partitions = self.shared.lock();
        let mut appended = append_new_epochs(&partitions, specs, &answers);
        for (tp, answer) in answers {
            let Some(spec) = specs.iter().find(|s| s.tp == tp) else {
                continue;
            };
            let Some(fetched) = partitions.get_mut(&tp) else {
                continue;
            };
            if !unchanged(&fetched.state, spec) {
                continue;
            }
            let next = match state::answer_action(&answer) {
                AnswerAction::Append => {
                    // In-sync replicas' bytes count too, so the total stays near the bound.
                    if self.quota.is_throttled(&tp) {
                        self.quota.record(answer.records.len());
                    }
                    appended
                        .remove(&tp)
                        .unwrap_or_else(|| append(&tp, fetched, &answer))
                }
                AnswerAction::Truncate { epoch, end_offset } => {
                    truncate(&tp, fetched, epoch, end_offset)
                }
                AnswerAction::ResetOffset => {
                    resets.push(Reset {
                        tp: tp.clone(),
                        leader_epoch: spec.current_leader_epoch,
                        fetch_offset: spec.fetch_offset,
                    });
                    Ok(fetched.state.clone())
                }
                AnswerAction::Remove => Err(Failure::Remove(
                    "the leader has a newer leader epoch; waiting for the metadata".into(),
                )),
                AnswerAction::Backoff => Err(Failure::Backoff(format!("{:?}", answer.error))),
            };
            match next {
                Ok(state) => fetched.state = state,
                Err(Failure::Backoff(why)) => {
                    tracing::debug!(topic = %tp.topic, partition = tp.partition, leader = self.shared.leader, why, "fetch answer refused; backing off");
                    fetched.state = fetched.state.delayed(now, self.backoff);
                }
                Err(Failure::Remove(why)) => {
                    tracing::info!(topic = %tp.topic, partition = tp.partition, leader = self.shared.leader, why, "stopped fetching");
                    partitions.remove(&tp);
                }
            }
        }
        resets
    }

    /// Kafka's `fetchOffsetAndTruncate`, after OFFSET_OUT_OF_RANGE.
    async fn reset_offset(&self, reset: Reset) {
        let asked = self
            .endpoint
            .log_start_and_end(self.shared.leader, reset.tp.clone(), reset.leader_epoch)
            .await;
        let mut partitions = self.shared.lock();
        let Some(fetched) = partitions.get_mut(&reset.tp) else {
            return;
        };
        if fetched.state.current_leader_epoch != reset.leader_epoch
            || fetched.state.fetch_offset != reset.fetch_offset
        {
            return;
        }
        let (start, end) = match asked {
            Ok(offsets) => offsets,
            Err(e) => {
                tracing::info!(topic = %reset.tp.topic, partition = reset.tp.partition, error = %e, "cannot ask the leader's offsets; backing off");
                fetched.state = fetched.state.delayed(Instant::now(), self.backoff);
                return;
            }
        };
        let p = fetched.partition.clone();
        let log_end_offset = p.log().log_end_offset();
        let plan = state::out_of_range_plan(log_end_offset, start, end);
        tracing::warn!(topic = %reset.tp.topic, partition = reset.tp.partition, log_end_offset, leader_log_start_offset = start, leader_log_end_offset = end, plan = ?plan, "fetch offset out of range on the leader");
        let done = match plan {
            OutOfRangePlan::TruncateTo(offset) => p.truncate_to(offset, reset.leader_epoch),
            OutOfRangePlan::StartAt(offset) => {
                p.truncate_fully_and_start_at(offset, reset.leader_epoch)
            }
            OutOfRangePlan::FetchFrom(_) => Ok(()),
        };
        fetched.state = match done {
            Ok(()) => fetched
                .state
                .fetching_at(p.log().log_end_offset(), p.log().latest_epoch()),
            Err(e) => {
                tracing::warn!(topic = %reset.tp.topic, partition = reset.tp.partition, error = %e, "placing the fetch offset failed");
                fetched.state.delayed(Instant::now(), self.backoff)
            }
        };
    }
}

/// The appends of `answers` that open a new leader epoch in the follower's log, done ahead on a
/// few threads when there are many. Such an append fsyncs the partition's epoch checkpoint, and
/// after leaders move, one fetch answers hundreds of them: in series, the new leaders' acks=all
/// produces would wait for every fsync. Each partition's append is independent of the others';
/// the caller applies the results with the rest, under the same lock, in the same checks.
fn append_new_epochs(
    partitions: &BTreeMap<TopicPartition, Fetched>,
    specs: &[FetchPartitionSpec],
    answers: &[(TopicPartition, PartitionAnswer)],
) -> HashMap<TopicPartition, Result<PartitionFetchState, Failure>> {
    let new_epochs: Vec<(&TopicPartition, &Fetched, &PartitionAnswer)> = answers
        .iter()
        .filter_map(|(tp, answer)| {
            // The epoch test first: it is false for nearly every answer, and cheap.
            let fetched = partitions.get(tp).filter(|f| opens_new_epoch(f, answer))?;
            let spec = specs.iter().find(|s| s.tp == *tp)?;
            let due = unchanged(&fetched.state, spec)
                && matches!(state::answer_action(answer), AnswerAction::Append);
            due.then_some((tp, fetched, answer))
        })
        .collect();
    if new_epochs.len() < parallel::PARALLEL_MIN_ITEMS {
        return HashMap::new();
    }
    parallel::map(
        &new_epochs,
        parallel::PARTITION_IO_THREADS,
        |&(tp, fetched, answer)| (tp.clone(), append(tp, fetched, answer)),
    )
    .into_iter()
    .collect()
}

/// Whether the answer's first batch carries a leader epoch other than the log's latest.
fn opens_new_epoch(fetched: &Fetched, answer: &PartitionAnswer) -> bool {
    // A v2 batch header: base offset (8), length (4), then the partition leader epoch (4).
    let Some(epoch) = answer.records.get(12..16) else {
        return false;
    };
    let epoch = i32::from_be_bytes(epoch.try_into().expect("four bytes"));
    fetched.partition.log().latest_epoch() != Some(epoch)
}

/// Kafka's `processPartitionData`: the leader's batches appended as they are, its high
/// watermark and log start offset followed.
pub(crate) fn append(
    tp: &TopicPartition,
    fetched: &Fetched,
    answer: &PartitionAnswer,
) -> Result<PartitionFetchState, Failure> {
    let p = &fetched.partition;
    let epoch = fetched.state.current_leader_epoch;
    let log_end_offset = p.log().log_end_offset();
    if fetched.state.fetch_offset != log_end_offset {
        // Only this fetcher writes this log in this epoch; if the two disagree, fetch from
        // where the log really ends and let the leader check the epoch there.
        tracing::error!(topic = %tp.topic, partition = tp.partition, fetch_offset = fetched.state.fetch_offset, log_end_offset, "fetch offset and log end offset disagree; fetching from the log end");
        return Ok(fetched
            .state
            .fetching_at(log_end_offset, p.log().latest_epoch()));
    }
    let mut next_offset = fetched.state.fetch_offset;
    if !answer.records.is_empty() {
        match p.append_as_follower(&answer.records, epoch) {
            Ok(info) => next_offset = info.last_offset + 1,
            Err(e @ (ApiError::NotLeaderOrFollower | ApiError::FencedLeaderEpoch)) => {
                return Err(Failure::Remove(e.to_string()))
            }
            Err(e @ (ApiError::CorruptMessage(_) | ApiError::InvalidRecord(_))) => {
                return Err(Failure::Backoff(format!(
                    "invalid batches from the leader: {e}"
                )))
            }
            Err(e) => {
                tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "appending the leader's batches failed");
                return Err(Failure::Remove(e.to_string()));
            }
        }
    }
    let follow = p
        .update_follower_high_watermark(answer.high_watermark, epoch)
        .and_then(|_| p.maybe_increment_follower_log_start_offset(answer.log_start_offset, epoch));
    if let Err(e) = follow {
        return Err(Failure::Remove(e.to_string()));
    }
    let lag = (answer.high_watermark - next_offset).max(0);
    p.set_follower_lag(lag);
    Ok(PartitionFetchState {
        lag: Some(lag),
        ..fetched
            .state
            .fetching_at(next_offset, p.log().latest_epoch())
    })
}

/// Kafka's `truncateOnFetchResponse`: truncate to where the leader's epoch ends (or to an
/// intermediate point, and ask again with the epoch before it).
pub(crate) fn truncate(
    tp: &TopicPartition,
    fetched: &Fetched,
    leader_epoch: i32,
    leader_end_offset: i64,
) -> Result<PartitionFetchState, Failure> {
    let p = &fetched.partition;
    let ours = p.log().end_offset_for_epoch(leader_epoch);
    let ours = (ours.end_offset != -1).then_some((ours.epoch, ours.end_offset));
    let log_end_offset = p.log().log_end_offset();
    let t = state::truncation_offset(
        leader_epoch,
        leader_end_offset,
        ours,
        log_end_offset,
        fetched.state.fetch_offset,
    );
    p.truncate_to(t.offset, fetched.state.current_leader_epoch)
        .map_err(|e| Failure::Remove(e.to_string()))?;
    tracing::info!(
        topic = %tp.topic,
        partition = tp.partition,
        leader_epoch,
        leader_end_offset,
        from = log_end_offset,
        to = p.log().log_end_offset(),
        completed = t.completed,
        "truncated a log that diverged from the leader's"
    );
    Ok(fetched
        .state
        .fetching_at(p.log().log_end_offset(), p.log().latest_epoch()))
}

/// Why an answer was not applied: back off, or stop fetching the partition.
pub(crate) enum Failure {
    Backoff(String),
    Remove(String),
}

/// Resolves once the fetcher holds a partition ready to fetch that the fetch in flight (`specs`)
/// does not ask for as it is now, or the fetcher is stopped.
async fn outgrown(shared: &FetcherShared, specs: &[FetchPartitionSpec]) {
    loop {
        shared.changed.notified().await;
        if shared.is_stopped() {
            return;
        }
        let now = Instant::now();
        // Truncating partitions count: the next round truncates, then fetches them.
        let due = |f: &Fetched| match f.state.phase {
            Phase::Fetching => f.state.is_ready_for_fetch(now),
            Phase::Truncating => !f.state.is_delayed(now),
        };
        let lacking = shared
            .lock()
            .iter()
            .any(|(tp, f)| due(f) && !specs.iter().any(|s| s.tp == *tp && unchanged(&f.state, s)));
        if lacking {
            return;
        }
    }
}

/// The partition is in the state the request was built from, of the same topic incarnation
/// (a topic deleted and created again under its name while the fetch was in flight may be at
/// the same leader epoch and fetch offset: the answer about the old one is not for it).
fn unchanged(state: &PartitionFetchState, spec: &FetchPartitionSpec) -> bool {
    state.phase == Phase::Fetching
        && state.topic_id == spec.topic_id
        && state.current_leader_epoch == spec.current_leader_epoch
        && state.fetch_offset == spec.fetch_offset
}
