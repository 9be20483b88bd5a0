//! Fetch (key 1), v4-17: whole batches up to the high watermark, long polling, fetch sessions.
//!
//! The request is planned against the fetch session cache (KIP-227) and read once. If fewer
//! than `min_bytes` came back it is parked in the purgatory: each time a watched partition
//! moves, the bytes now readable are counted from the log's positions (no records are read),
//! and once they reach `min_bytes` — or something changed that must be answered (an error,
//! a leadership change, a diverging epoch) — or `max_wait_ms` passes, it is read once more and
//! answered (Kafka's `DelayedFetch`). `max_bytes` (at most `fetch.max.bytes`) bounds the response and `partition_max_bytes`
//! each partition, except that the first batch of the first partition with data is always
//! returned whole (KIP-74), so a batch larger than the limits still makes progress. Records are
//! never `None` on the wire (librdkafka rejects a -1 record set size).
//!
//! A fetch from a follower (`replica_id >= 0`) reads to the log end offset, so it is served
//! only to an assigned replica of a partition this node leads; anyone else claiming a broker id
//! is refused as Kafka refuses it (`Partition::read`).
//!
//! Read from follower (KIP-392): a consumer's fetch (v11+, which carries the client's rack) to a
//! leader with `replica.selector.class` set may be answered at once with a
//! `preferred_read_replica` and no records ([`crate::replica::read_replica`]); on a follower a
//! consumer reads up to the follower's high watermark and parks between it and the log end,
//! like any long poll. Record bytes sent are counted by role (`FetchServedStats`).
//!
//! From v16 a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer names the partition's current
//! leader and epoch, and the response lists the endpoints of the leaders it names (KIP-951).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ResponseKind};
use kafkaiq_storage::{LogPosition, TopicPartition};
use uuid::Uuid;

use super::{alive_endpoint, client_listener, current_leader, str_bytes, topic_name};
use crate::config::ReplicaSelector;
use crate::context::Context;
use crate::errors::ApiError;
use crate::fetch_session::{FetchPartitionSpec, SessionPlan, SessionRequest};
use crate::limits::FETCH_WAIT_MS_MAX;
use crate::metadata::MetadataImage;
use crate::replica::decisions::FollowerFetch;
use crate::replica::read_replica::{self, ReadReplicaCandidate};
use crate::replica::{FetchIsolation, FetchParams, Offsets, Partition};

struct PartitionRead {
    spec_index: usize,
    result: Result<(Bytes, Offsets), ApiError>,
    diverging: Option<(i32, i64)>,
    /// KIP-392: the follower the consumer should read from instead; no records were read.
    preferred_read_replica: Option<i32>,
    /// The partition was read while this broker led it.
    as_leader: bool,
}

/// The leader's choice of a follower to serve this consumer fetch (KIP-392), with the offsets
/// to answer with: Kafka's `findPreferredReadReplica`, asked when `replica.selector.class` is
/// set, the fetch comes from a consumer and carries client metadata (Fetch v11+). `None`: this
/// broker serves the read. The leader epoch is checked first, as Kafka's
/// `fetchOffsetSnapshot` checks it.
fn preferred_read_replica(
    ctx: &Context,
    image: &MetadataImage,
    partition: &Partition,
    params: &FetchParams,
    fetch_offset: i64,
    client_rack: &str,
) -> Result<Option<(i32, Offsets)>, ApiError> {
    let selector = ctx.config.replica.selector;
    if selector == ReplicaSelector::Leader || params.is_from_follower() {
        return Ok(None);
    }
    let Some(view) = partition.leader_read_view(params.current_leader_epoch)? else {
        return Ok(None);
    };
    let listener = client_listener(ctx);
    let rack_of = |id: i32| image.broker(id).and_then(|b| b.rack.as_deref());
    let followers: Vec<ReadReplicaCandidate> = view
        .followers
        .iter()
        .map(|(id, state)| {
            let reachable = alive_endpoint(image, listener, *id).is_some();
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
        rack_of(ctx.node_id),
        &followers,
        ctx.replicas.now_ms(),
    )
    .map(|id| (id, view.offsets)))
}

/// The request-level part of every partition's [`FetchParams`].
fn request_params(version: i16, request: &FetchRequest) -> FetchParams {
    // v15+ carries the replica id and broker epoch in replica_state.
    let (replica_id, replica_epoch) = if version >= 15 {
        (
            request.replica_state.replica_id.0,
            request.replica_state.replica_epoch,
        )
    } else {
        (request.replica_id.0, -1)
    };
    let isolation_level = if version >= 4 {
        request.isolation_level
    } else {
        0
    };
    FetchParams {
        replica_id,
        replica_epoch,
        isolation: FetchIsolation::of(replica_id, isolation_level),
        // Client metadata (the rack id, KIP-392) is in every v11+ request.
        fetch_only_leader: FetchParams::fetch_only_leader(replica_id, version >= 11),
        current_leader_epoch: None,
        last_fetched_epoch: None,
        max_bytes: 0,
        min_one_message: false,
    }
}

fn partition_params(base: &FetchParams, spec: &FetchPartitionSpec) -> FetchParams {
    FetchParams {
        current_leader_epoch: FetchParams::epoch_from_wire(spec.current_leader_epoch),
        last_fetched_epoch: FetchParams::epoch_from_wire(spec.last_fetched_epoch),
        max_bytes: spec.partition_max_bytes.max(0) as usize,
        ..*base
    }
}

/// The partition a spec names, looked up now: a partition deleted while the fetch was parked
/// answers with the routing error, not a storage error. A spec that names a topic id (v13+,
/// kept in a fetch session) reads only that incarnation of the topic: once it is deleted the
/// answer is UNKNOWN_TOPIC_ID, or INCONSISTENT_TOPIC_ID when a topic of the same name was
/// created again (Kafka's `ReplicaManager` compares the session's id with the log's), never
/// the new topic's records.
fn lookup(
    ctx: &Arc<Context>,
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
    ctx.replicas.partition_or_error(
        image,
        &TopicPartition {
            topic: spec.topic.clone(),
            partition: spec.partition,
        },
    )
}

/// Reads every planned partition, `max_bytes` in all. The first read of a request also records
/// a follower's fetch position with the leader (`first_read`); the read that answers a parked
/// fetch does not, as in Kafka, where only the initial read updates follower state. Returns the
/// reads, their record bytes, and whether a follower's position moved a high watermark.
fn read_all(
    ctx: &Arc<Context>,
    plan: &SessionPlan,
    base: &FetchParams,
    client_rack: Option<&str>,
    max_bytes: usize,
    first_read: bool,
) -> (Vec<PartitionRead>, usize, bool) {
    let image = ctx.image();
    let mut remaining = max_bytes;
    let mut total = 0usize;
    let mut high_watermark_moved = false;
    let mut reads = Vec::with_capacity(plan.partitions.len());
    for (i, spec) in plan.partitions.iter().enumerate() {
        let mut diverging = None;
        let mut preferred = None;
        let mut as_leader = false;
        let result = lookup(ctx, &image, spec).and_then(|p| {
            let mut params = partition_params(base, spec);
            if let Some(rack) = client_rack {
                if let Some((replica, offsets)) =
                    preferred_read_replica(ctx, &image, &p, &params, spec.fetch_offset, rack)?
                {
                    // Kafka skips the read: the consumer goes to the replica at once.
                    preferred = Some(replica);
                    as_leader = true;
                    return Ok((Bytes::new(), offsets));
                }
            }
            params.max_bytes = params.max_bytes.min(remaining);
            params.min_one_message = total == 0;
            let mut read = p.read(spec.fetch_offset, &params)?;
            as_leader = read.as_leader;
            if read.as_leader
                && params.is_from_follower()
                && ctx.replicas.leader_throttles(&p, params.replica_id)
            {
                // KIP-73: the partition's offsets are answered, its records wait.
                read.records = Bytes::new();
            }
            if let Some(end) = read.diverging_epoch {
                diverging = Some((end.epoch, end.end_offset));
            } else if first_read && params.is_from_follower() {
                high_watermark_moved |= ctx
                    .replicas
                    .update_follower_fetch_state(
                        &p,
                        params.replica_id,
                        &FollowerFetch {
                            fetch_offset: spec.fetch_offset,
                            log_start_offset: spec.log_start_offset,
                            fetch_time_ms: ctx.replicas.now_ms(),
                            leader_log_end_offset: read.offsets.log_end_offset,
                            broker_epoch: params.replica_epoch,
                        },
                    )?
                    .high_watermark_moved;
            }
            Ok((read.records, read.offsets))
        });
        if let Ok((records, _)) = &result {
            total += records.len();
            remaining = remaining.saturating_sub(records.len());
        }
        reads.push(PartitionRead {
            spec_index: i,
            result,
            diverging,
            preferred_read_replica: preferred,
            as_leader,
        });
    }
    (reads, total, high_watermark_moved)
}

/// A partition of a parked fetch: where its fetch offset is in the log, taken when it parked.
struct Parked {
    spec_index: usize,
    partition: Arc<Partition>,
    start: LogPosition,
}

/// The condition a parked fetch waits for (Kafka's `DelayedFetch#tryComplete`), checked on every
/// wake-up without reading records: true once the bytes readable from the parked positions,
/// each partition counted up to its `partition_max_bytes`, reach `min_bytes`, or once any
/// partition must be answered now (`Partition::bytes_available` says which).
fn parked_fetch_ready(
    ctx: &Arc<Context>,
    plan: &SessionPlan,
    base: &FetchParams,
    parked: &[Parked],
    min_bytes: usize,
) -> bool {
    let image = ctx.image();
    let mut available = 0usize;
    for p in parked {
        let spec = &plan.partitions[p.spec_index];
        // Deleted or moved meanwhile: the read answers with the routing error.
        if !lookup(ctx, &image, spec).is_ok_and(|now| Arc::ptr_eq(&now, &p.partition)) {
            return true;
        }
        let params = partition_params(base, spec);
        match p
            .partition
            .bytes_available(spec.fetch_offset, &p.start, &params)
        {
            // Bytes a throttled follower may not have yet do not complete its fetch (Kafka's
            // `DelayedFetch` skips them likewise).
            Some(_)
                if params.is_from_follower()
                    && ctx
                        .replicas
                        .leader_throttles(&p.partition, params.replica_id) => {}
            Some(bytes) => {
                available += (bytes as usize).min(params.max_bytes);
                if available >= min_bytes {
                    return true;
                }
            }
            None => return true,
        }
    }
    false
}

/// Counts the record bytes of throttled partitions answered to a follower against the leader
/// quota, in-sync followers' included (Kafka's `sizeOfThrottledPartitions`), so what they take
/// leaves less for the others.
fn record_throttled_bytes(ctx: &Context, plan: &SessionPlan, reads: &[PartitionRead]) {
    let quota = &ctx.replicas.leader_quota;
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

pub async fn handle(ctx: &Arc<Context>, version: i16, request: FetchRequest) -> ResponseKind {
    let base = request_params(version, &request);
    let image = ctx.image();
    // v13+ names topics by id; an unknown id keeps an empty name (UNKNOWN_TOPIC_ID below).
    let resolve = |name: &kafka_protocol::messages::TopicName, id: &Uuid| -> (String, Uuid) {
        if version >= 13 {
            let name = image
                .topic_by_id(id)
                .map(|t| t.name.clone())
                .unwrap_or_default();
            (name, *id)
        } else {
            (name.0.as_str().to_owned(), Uuid::nil())
        }
    };
    let requested: Vec<FetchPartitionSpec> = request
        .topics
        .iter()
        .flat_map(|t| {
            let (topic, topic_id) = resolve(&t.topic, &t.topic_id);
            t.partitions.iter().map(move |p| FetchPartitionSpec {
                topic: topic.clone(),
                topic_id,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                partition_max_bytes: p.partition_max_bytes,
                current_leader_epoch: if version >= 9 {
                    p.current_leader_epoch
                } else {
                    -1
                },
                log_start_offset: p.log_start_offset,
                last_fetched_epoch: if version >= 12 {
                    p.last_fetched_epoch
                } else {
                    -1
                },
            })
        })
        .collect();
    let forgotten: Vec<(Uuid, String, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            let (topic, topic_id) = resolve(&t.topic, &t.topic_id);
            t.partitions
                .iter()
                .map(move |p| (topic_id, topic.clone(), *p))
        })
        .collect();
    let (session_id, epoch) = if version >= 7 {
        (request.session_id, request.session_epoch)
    } else {
        (0, -1)
    };
    let session = SessionRequest {
        session_id,
        epoch,
        privileged: base.is_from_follower(),
        now_ms: ctx.replicas.now_ms(),
    };
    let plan = match ctx.fetch_sessions.plan(session, requested, &forgotten) {
        Ok(plan) => plan,
        Err(e) => {
            let mut response = FetchResponse::default();
            if version >= 7 {
                response.error_code = e.code();
            }
            return ResponseKind::Fetch(response);
        }
    };

    // The broker's `fetch.max.bytes` caps what any fetch may ask (Kafka's `handleFetchRequest`
    // takes the smaller, for followers too: they ask for `replica.fetch.response.max.bytes`),
    // so a 2 GiB `max_bytes` cannot make one answer copy 2 GiB of segments into memory.
    let requested_max_bytes = if version >= 3 {
        request.max_bytes.max(0) as usize
    } else {
        usize::MAX
    };
    let max_bytes = requested_max_bytes.min(ctx.config.replica.fetch_max_bytes);
    let min_bytes = (request.min_bytes.max(0) as usize).min(max_bytes);
    let max_wait_ms = i64::from(request.max_wait_ms).clamp(0, FETCH_WAIT_MS_MAX) as u64;

    // Client metadata (KIP-392) comes with every v11+ fetch; its rack may be empty.
    let client_rack = (version >= 11).then(|| request.rack_id.as_str());
    let (mut reads, total, high_watermark_moved) =
        read_all(ctx, &plan, &base, client_rack, max_bytes, true);
    if high_watermark_moved {
        // This follower's fetch completed parked acks=all produces and consumer fetches; the
        // runtime put the first one woken in this worker's next-task slot, which no other
        // worker may steal. Let it run (and write its answer) before this fetch is answered:
        // writing to the follower's socket wakes the follower, and on a busy machine this
        // thread may then wait for a CPU with the producer's answer still queued behind it.
        tokio::task::yield_now().await;
    }
    // Answered at once (Kafka's `fetchMessages`): an error, a diverging epoch, or a preferred
    // read replica to send the consumer to (KAFKA-13767: no long poll before the redirect).
    let answer_now = reads
        .iter()
        .any(|r| r.result.is_err() || r.diverging.is_some() || r.preferred_read_replica.is_some());
    if total < min_bytes && !answer_now && max_wait_ms > 0 {
        // Every partition was read without error above. If one cannot be positioned now (it
        // changed meanwhile), the fetch is answered at once and the read reports why.
        let image = ctx.image();
        let parked: Vec<Parked> = plan
            .partitions
            .iter()
            .enumerate()
            .filter_map(|(spec_index, spec)| {
                let partition = lookup(ctx, &image, spec).ok()?;
                let start = partition.log().position_of(spec.fetch_offset).ok()?;
                Some(Parked {
                    spec_index,
                    partition,
                    start,
                })
            })
            .collect();
        if parked.len() == plan.partitions.len() {
            let watched: Vec<Arc<Partition>> = parked.iter().map(|p| p.partition.clone()).collect();
            ctx.replicas
                .purgatory
                .wait_until(&watched, Duration::from_millis(max_wait_ms), || {
                    let ready = parked_fetch_ready(ctx, &plan, &base, &parked, min_bytes);
                    async move { ready.then_some(()) }
                })
                .await;
        }
        reads = read_all(ctx, &plan, &base, client_rack, max_bytes, false).0;
    }

    if base.is_from_follower() {
        record_throttled_bytes(ctx, &plan, &reads);
    }
    let read_committed = base.isolation == FetchIsolation::TxnCommitted;
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    let answered_image = ctx.image();
    let listener = client_listener(ctx);
    let mut leader_endpoints: BTreeMap<i32, NodeEndpoint> = BTreeMap::new();
    for read in reads {
        let spec = &plan.partitions[read.spec_index];
        let mut data = PartitionData::default()
            .with_partition_index(spec.partition)
            .with_records(Some(Bytes::new()));
        let (has_records_or_error, hw, log_start) = match read.result {
            Ok((records, offsets)) => {
                data.high_watermark = offsets.high_watermark;
                // No transactions yet: the last stable offset is the high watermark.
                data.last_stable_offset = offsets.high_watermark;
                if version >= 5 {
                    data.log_start_offset = offsets.log_start_offset;
                }
                if let Some((epoch, end_offset)) = read.diverging {
                    data.diverging_epoch = EpochEndOffset::default()
                        .with_epoch(epoch)
                        .with_end_offset(end_offset);
                }
                if let Some(replica) = read.preferred_read_replica {
                    if version >= 11 {
                        data.preferred_read_replica = BrokerId(replica);
                    }
                }
                // A preferred read replica is always sent, even in an incremental session
                // (Kafka's `CachedPartition#maybeUpdateResponseData`).
                let has = !records.is_empty()
                    || read.diverging.is_some()
                    || read.preferred_read_replica.is_some();
                if base.replica_id < 0 {
                    // Consumers only: a follower's fetch is replication, not `BytesOut`.
                    ctx.topic_stats.fetched(&spec.topic, records.len() as u64);
                }
                ctx.fetch_served
                    .served(base.replica_id, read.as_leader, records.len() as u64);
                data.records = Some(records);
                (has, offsets.high_watermark, offsets.log_start_offset)
            }
            Err(e) => {
                data.error_code = e.code();
                if version >= 16
                    && matches!(
                        e,
                        ApiError::NotLeaderOrFollower | ApiError::FencedLeaderEpoch
                    )
                {
                    let (leader, epoch) =
                        current_leader(&answered_image, &spec.topic, spec.partition);
                    data.current_leader = LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(leader))
                        .with_leader_epoch(epoch);
                    if let Some((b, e)) = alive_endpoint(&answered_image, listener, leader) {
                        leader_endpoints.entry(leader).or_insert_with(|| {
                            NodeEndpoint::default()
                                .with_node_id(BrokerId(leader))
                                .with_host(str_bytes(&e.host))
                                .with_port(i32::from(e.port))
                                .with_rack(b.rack.as_deref().map(str_bytes))
                        });
                    }
                }
                data.high_watermark = -1;
                data.last_stable_offset = -1;
                if version >= 5 {
                    data.log_start_offset = -1;
                }
                (true, -1, -1)
            }
        };
        // No transactions: read_committed gets an empty list, read_uncommitted null, as Kafka.
        data.aborted_transactions = read_committed.then(Vec::new);
        if plan.incremental
            && !ctx.fetch_sessions.should_send(
                plan.session_id,
                spec,
                hw,
                log_start,
                has_records_or_error,
            )
        {
            continue;
        }
        if !plan.incremental && plan.session_id != 0 {
            ctx.fetch_sessions.should_send(
                plan.session_id,
                spec,
                hw,
                log_start,
                has_records_or_error,
            );
        }
        match responses.last_mut() {
            Some(t) if t.topic.0.as_str() == spec.topic && t.topic_id == spec.topic_id => {
                t.partitions.push(data)
            }
            _ => {
                let mut t = FetchableTopicResponse::default().with_partitions(vec![data]);
                if version >= 13 {
                    t.topic_id = spec.topic_id;
                } else {
                    t.topic = topic_name(&spec.topic);
                }
                responses.push(t)
            }
        }
    }
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= 7 {
        response.session_id = plan.session_id;
    }
    if version >= 16 {
        response.node_endpoints = leader_endpoints.into_values().collect();
    }
    ResponseKind::Fetch(response)
}
