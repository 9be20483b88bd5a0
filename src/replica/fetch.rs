//! [`ReplicaManager::fetch_messages`]: a fetch's reads, its long poll and KIP-392's choice
//! (Kafka's `ReplicaManager#fetchMessages` with its `DelayedFetch`).
//!
//! Every planned partition is read once, whole batches up to `max_bytes` in all and
//! `partition_max_bytes` each, except that the first batch of the first partition with data is
//! always returned whole (KIP-74), so a batch larger than the limits still makes progress. If
//! fewer than `min_bytes` came back, and nothing must be answered at once (an error, a diverging
//! epoch, a preferred read replica), the fetch is parked in the purgatory: each time a watched
//! partition moves, the bytes now readable are counted from the log's positions (no records are
//! read), and once they reach `min_bytes` — or something changed that must be answered (an
//! error, a leadership change, a diverging epoch) — or `max_wait_ms` passes, it is read once
//! more and answered.
//!
//! A fetch from a follower (`replica_id >= 0`) reads to the log end offset, so it is served only
//! to an assigned replica of a partition this node leads; anyone else claiming a broker id is
//! refused as Kafka refuses it (`Partition::read`). Its first read records the follower's
//! position with the leader, and a throttled partition (KIP-73) answers its offsets without
//! records.
//!
//! Read from follower (KIP-392): a consumer's fetch that carries client metadata (v11+) to a
//! leader with `replica.selector.class` set may be answered at once with a preferred read
//! replica and no records ([`super::read_replica`]); on a follower a consumer reads up to the
//! follower's high watermark and parks between it and the log end, like any long poll.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafkaiq_storage::{LogPosition, TopicPartition};

use super::decisions::FollowerFetch;
use super::partition::AbortedTransaction;
use super::read_replica::{self, ReadReplicaCandidate};
use super::{FetchIsolation, FetchParams, Offsets, Partition, ReplicaManager};
use crate::config::ReplicaSelector;
use crate::errors::ApiError;
use crate::fetch_session::{FetchPartitionSpec, SessionPlan};
use crate::metadata::{MetadataCache, MetadataImage};

/// What a fetch asks besides its partitions: the request-level part of every partition's
/// [`FetchParams`], the limits of the whole response, and the client's rack (KIP-392, `Some`
/// from v11, possibly empty).
#[derive(Clone, Debug)]
pub struct FetchRequestParams<'a> {
    pub base: FetchParams,
    pub client_rack: Option<&'a str>,
    /// The listener the client's connection came in on: a preferred read replica must have
    /// an endpoint on it.
    pub client_listener: &'a str,
    pub max_bytes: usize,
    pub min_bytes: usize,
    pub max_wait_ms: u64,
}

/// One planned partition's outcome, in plan order.
#[derive(Debug)]
pub struct PartitionRead {
    /// The partition's index in the [`SessionPlan`].
    pub spec_index: usize,
    pub result: Result<(Bytes, Offsets), ApiError>,
    /// The epoch and end offset the follower's log diverges at (KIP-320).
    pub diverging: Option<(i32, i64)>,
    /// KIP-392: the follower the consumer should read from instead; no records were read.
    pub preferred_read_replica: Option<i32>,
    /// The partition was read while this broker led it.
    pub as_leader: bool,
    /// A read_committed read's aborted transactions (see [`super::ReadResult`]); `None`
    /// otherwise.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
}

impl PartitionRead {
    /// Whether the fetch must be answered now rather than parked (Kafka's `fetchMessages`): an
    /// error, a diverging epoch, or a preferred read replica to send the consumer to
    /// (KAFKA-13767: no long poll before the redirect).
    pub fn answers_now(&self) -> bool {
        self.result.is_err() || self.diverging.is_some() || self.preferred_read_replica.is_some()
    }
}

/// The reads of one pass over the plan.
struct Reads {
    reads: Vec<PartitionRead>,
    /// Record bytes read.
    total: usize,
    /// A follower's position moved a high watermark.
    high_watermark_moved: bool,
}

/// A partition of a parked fetch: where its fetch offset is in the log, taken when it parked.
struct Parked {
    spec_index: usize,
    partition: Arc<Partition>,
    start: LogPosition,
}

impl ReplicaManager {
    /// Reads every partition of `plan`, parks the fetch while fewer than `min_bytes` are
    /// readable, and returns each partition's outcome in plan order.
    pub async fn fetch_messages(
        &self,
        cache: &MetadataCache,
        plan: &SessionPlan,
        request: &FetchRequestParams<'_>,
    ) -> Vec<PartitionRead> {
        let first = self.read_all(&cache.image(), plan, request, true);
        let mut reads = first.reads;
        if first.high_watermark_moved {
            // This follower's fetch completed parked acks=all produces and consumer fetches; the
            // runtime put the first one woken in this worker's next-task slot, which no other
            // worker may steal. Let it run (and write its answer) before this fetch is answered:
            // writing to the follower's socket wakes the follower, and on a busy machine this
            // thread may then wait for a CPU with the producer's answer still queued behind it.
            tokio::task::yield_now().await;
        }
        let answer_now = reads.iter().any(PartitionRead::answers_now);
        if first.total < request.min_bytes && !answer_now && request.max_wait_ms > 0 {
            self.park(cache, plan, request).await;
            reads = self.read_all(&cache.image(), plan, request, false).reads;
        }
        if request.base.is_from_follower() {
            self.record_throttled_bytes(plan, &reads);
        }
        reads
    }

    /// Waits until the parked fetch is ready or `max_wait_ms` passes. Every partition was read
    /// without error before; if one cannot be positioned now (it changed meanwhile), it does
    /// not wait: the read that follows reports why.
    async fn park(
        &self,
        cache: &MetadataCache,
        plan: &SessionPlan,
        request: &FetchRequestParams<'_>,
    ) {
        let image = cache.image();
        let parked: Vec<Parked> = plan
            .partitions
            .iter()
            .enumerate()
            .filter_map(|(spec_index, spec)| {
                let partition = self.lookup(&image, spec).ok()?;
                let start = partition.log().position_of(spec.fetch_offset).ok()?;
                Some(Parked {
                    spec_index,
                    partition,
                    start,
                })
            })
            .collect();
        if parked.len() != plan.partitions.len() {
            return;
        }
        let watched: Vec<Arc<Partition>> = parked.iter().map(|p| p.partition.clone()).collect();
        let max_wait = Duration::from_millis(request.max_wait_ms);
        self.purgatory
            .wait_until(&watched, max_wait, || {
                let ready = self.parked_fetch_ready(&cache.image(), plan, request, &parked);
                async move { ready.then_some(()) }
            })
            .await;
    }

    /// The partition a spec names, looked up now: a partition deleted while the fetch was parked
    /// answers with the routing error, not a storage error. A spec that names a topic id (v13+,
    /// kept in a fetch session) reads only that incarnation of the topic: once it is deleted the
    /// answer is UNKNOWN_TOPIC_ID, or INCONSISTENT_TOPIC_ID when a topic of the same name was
    /// created again (Kafka's `ReplicaManager` compares the session's id with the log's), never
    /// the new topic's records.
    fn lookup(
        &self,
        image: &MetadataImage,
        spec: &FetchPartitionSpec,
    ) -> Result<Arc<Partition>, ApiError> {
        if spec.topic.is_empty() {
            return Err(ApiError::UnknownTopicId);
        }
        if !spec.topic_id.is_nil() && image.topic_by_id(&spec.topic_id).is_none() {
            return Err(if image.topic(&spec.topic).is_some() {
                ApiError::InconsistentTopicId
            } else {
                ApiError::UnknownTopicId
            });
        }
        self.partition_or_error(
            image,
            &TopicPartition {
                topic: spec.topic.clone(),
                partition: spec.partition,
            },
        )
    }

    /// Reads every planned partition, `max_bytes` in all. The first read of a request also
    /// records a follower's fetch position with the leader (`first_read`); the read that answers
    /// a parked fetch does not, as in Kafka, where only the initial read updates follower state.
    fn read_all(
        &self,
        image: &MetadataImage,
        plan: &SessionPlan,
        request: &FetchRequestParams<'_>,
        first_read: bool,
    ) -> Reads {
        let mut remaining = request.max_bytes;
        let mut out = Reads {
            reads: Vec::with_capacity(plan.partitions.len()),
            total: 0,
            high_watermark_moved: false,
        };
        for (spec_index, spec) in plan.partitions.iter().enumerate() {
            let mut read = PartitionRead {
                spec_index,
                result: Err(ApiError::UnknownTopicId),
                diverging: None,
                preferred_read_replica: None,
                as_leader: false,
                aborted_transactions: None,
            };
            let mut params = partition_params(&request.base, spec);
            params.max_bytes = params.max_bytes.min(remaining);
            params.min_one_message = out.total == 0;
            read.result = self.lookup(image, spec).and_then(|p| {
                self.read_partition(image, &p, spec, &params, request, first_read)
                    .map(|r| r.into_read(&mut read, &mut out.high_watermark_moved))
            });
            if let Ok((records, _)) = &read.result {
                out.total += records.len();
                remaining = remaining.saturating_sub(records.len());
            }
            out.reads.push(read);
        }
        out
    }

    /// One partition's read: KIP-392's redirect, or its records (none for a throttled
    /// follower), and on a follower's first read its position recorded with the leader.
    fn read_partition(
        &self,
        image: &MetadataImage,
        p: &Arc<Partition>,
        spec: &FetchPartitionSpec,
        params: &FetchParams,
        request: &FetchRequestParams<'_>,
        first_read: bool,
    ) -> Result<OneRead, ApiError> {
        if let Some(rack) = request.client_rack {
            if let Some((replica, offsets)) = self.preferred_read_replica(
                image,
                p,
                params,
                spec.fetch_offset,
                rack,
                request.client_listener,
            )? {
                // Kafka skips the read: the consumer goes to the replica at once.
                return Ok(OneRead {
                    records: Bytes::new(),
                    offsets,
                    diverging: None,
                    preferred: Some(replica),
                    as_leader: true,
                    high_watermark_moved: false,
                    aborted_transactions: (params.isolation == FetchIsolation::TxnCommitted)
                        .then(Vec::new),
                });
            }
        }
        let mut read = p.read(spec.fetch_offset, params)?;
        if read.as_leader
            && params.is_from_follower()
            && self.leader_throttles(p, params.replica_id)
        {
            // KIP-73: the partition's offsets are answered, its records wait.
            read.records = Bytes::new();
        }
        let mut high_watermark_moved = false;
        let diverging = read.diverging_epoch.map(|end| (end.epoch, end.end_offset));
        if diverging.is_none() && first_read && params.is_from_follower() {
            high_watermark_moved = self
                .update_follower_fetch_state(
                    p,
                    params.replica_id,
                    &FollowerFetch {
                        fetch_offset: spec.fetch_offset,
                        log_start_offset: spec.log_start_offset,
                        fetch_time_ms: self.now_ms(),
                        leader_log_end_offset: read.offsets.log_end_offset,
                        broker_epoch: params.replica_epoch,
                    },
                )?
                .high_watermark_moved;
        }
        Ok(OneRead {
            records: read.records,
            offsets: read.offsets,
            diverging,
            preferred: None,
            as_leader: read.as_leader,
            high_watermark_moved,
            aborted_transactions: read.aborted_transactions,
        })
    }

    /// The leader's choice of a follower to serve this consumer fetch (KIP-392), with the
    /// offsets to answer with: Kafka's `findPreferredReadReplica`, asked when
    /// `replica.selector.class` is set, the fetch comes from a consumer and carries client
    /// metadata (Fetch v11+). `None`: this broker serves the read. The leader epoch is checked
    /// first, as Kafka's `fetchOffsetSnapshot` checks it.
    fn preferred_read_replica(
        &self,
        image: &MetadataImage,
        partition: &Partition,
        params: &FetchParams,
        fetch_offset: i64,
        client_rack: &str,
        listener: &str,
    ) -> Result<Option<(i32, Offsets)>, ApiError> {
        let selector = self.config.replica.selector;
        if selector == ReplicaSelector::Leader || params.is_from_follower() {
            return Ok(None);
        }
        let Some(view) = partition.leader_read_view(params.current_leader_epoch)? else {
            return Ok(None);
        };
        // Clients are sent endpoints of the listener they came in on.
        let rack_of = |id: i32| image.broker(id).and_then(|b| b.rack.as_deref());
        let followers: Vec<ReadReplicaCandidate> = view
            .followers
            .iter()
            .map(|(id, state)| {
                // Kafka's `getAliveBrokerNode`: registered, unfenced, with the listener.
                let reachable = image
                    .broker(*id)
                    .is_some_and(|b| !b.fenced && b.endpoint(listener).is_some());
                ReadReplicaCandidate {
                    broker_id: *id,
                    rack: reachable.then(|| rack_of(*id).map(str::to_owned)).flatten(),
                    reachable,
                    in_isr: view.isr.contains(id),
                    log_start_offset: state.log_start_offset,
                    log_end_offset: state.log_end_offset,
                    last_caught_up_time_ms: state.last_caught_up_time_ms,
                }
            })
            .collect();
        Ok(read_replica::preferred_read_replica(
            selector,
            client_rack,
            fetch_offset,
            rack_of(self.node_id),
            &followers,
            self.now_ms(),
        )
        .map(|id| (id, view.offsets)))
    }

    /// The condition a parked fetch waits for (Kafka's `DelayedFetch#tryComplete`), checked on
    /// every wake-up without reading records: true once the bytes readable from the parked
    /// positions, each partition counted up to its `partition_max_bytes`, reach `min_bytes`, or
    /// once any partition must be answered now (`Partition::bytes_available` says which).
    fn parked_fetch_ready(
        &self,
        image: &MetadataImage,
        plan: &SessionPlan,
        request: &FetchRequestParams<'_>,
        parked: &[Parked],
    ) -> bool {
        let mut available = 0usize;
        for p in parked {
            let spec = &plan.partitions[p.spec_index];
            // Deleted or moved meanwhile: the read answers with the routing error.
            if !self
                .lookup(image, spec)
                .is_ok_and(|now| Arc::ptr_eq(&now, &p.partition))
            {
                return true;
            }
            let params = partition_params(&request.base, spec);
            match p
                .partition
                .bytes_available(spec.fetch_offset, &p.start, &params)
            {
                // Bytes a throttled follower may not have yet do not complete its fetch (Kafka's
                // `DelayedFetch` skips them likewise).
                Some(_)
                    if params.is_from_follower()
                        && self.leader_throttles(&p.partition, params.replica_id) => {}
                Some(bytes) => {
                    available += (bytes as usize).min(params.max_bytes);
                    if available >= request.min_bytes {
                        return true;
                    }
                }
                None => return true,
            }
        }
        false
    }

    /// Counts the record bytes of throttled partitions answered to a follower against the leader
    /// quota, in-sync followers' included (Kafka's `sizeOfThrottledPartitions`), so what they
    /// take leaves less for the others.
    fn record_throttled_bytes(&self, plan: &SessionPlan, reads: &[PartitionRead]) {
        let quota = &self.leader_quota;
        let bytes: usize = reads
            .iter()
            .filter_map(|r| {
                let (records, _) = r.result.as_ref().ok()?;
                let spec = &plan.partitions[r.spec_index];
                let tp = TopicPartition {
                    topic: spec.topic.clone(),
                    partition: spec.partition,
                };
                (!records.is_empty() && quota.is_throttled(&tp)).then_some(records.len())
            })
            .sum();
        quota.record(bytes);
    }
}

/// A partition read without error, before it becomes a [`PartitionRead`].
struct OneRead {
    records: Bytes,
    offsets: Offsets,
    diverging: Option<(i32, i64)>,
    preferred: Option<i32>,
    as_leader: bool,
    high_watermark_moved: bool,
    aborted_transactions: Option<Vec<AbortedTransaction>>,
}

impl OneRead {
    fn into_read(
        self,
        read: &mut PartitionRead,
        high_watermark_moved: &mut bool,
    ) -> (Bytes, Offsets) {
        read.diverging = self.diverging;
        read.preferred_read_replica = self.preferred;
        read.as_leader = self.as_leader;
        read.aborted_transactions = self.aborted_transactions;
        *high_watermark_moved |= self.high_watermark_moved;
        (self.records, self.offsets)
    }
}

/// A partition's [`FetchParams`]: the request's, with the spec's epochs and byte limit.
fn partition_params(base: &FetchParams, spec: &FetchPartitionSpec) -> FetchParams {
    FetchParams {
        current_leader_epoch: FetchParams::epoch_from_wire(spec.current_leader_epoch),
        last_fetched_epoch: FetchParams::epoch_from_wire(spec.last_fetched_epoch),
        max_bytes: spec.partition_max_bytes.max(0) as usize,
        ..*base
    }
}
