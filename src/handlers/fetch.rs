//! Fetch (key 1), v4-17: decodes the request, plans it against the fetch session cache
//! (KIP-227), has [`ReplicaManager::fetch_messages`](crate::replica::ReplicaManager) read it (the
//! reads, the long poll, the KIP-392 choice: [`crate::replica::fetch`]), and encodes the answer:
//! whole batches, never `None` records (librdkafka rejects a -1 record set size), and in an
//! incremental session only the partitions that changed. Record bytes sent are counted by role
//! (`FetchServedStats`).
//!
//! With an authorizer, a consumer's partitions of a topic it may not READ, and every partition
//! of a follower's fetch without CLUSTER_ACTION on the cluster, are answered
//! TOPIC_AUTHORIZATION_FAILED and not read (Kafka's `handleFetchRequest`).
//!
//! From v16 a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer names the partition's current
//! leader and epoch, and the response lists the endpoints of the leaders it names (KIP-951).

mod request;
mod response;
mod services;

pub use services::FetchServices;

use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseKind};
use uuid::Uuid;

use super::authz::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::fetch_session::{FetchPartitionSpec, SessionPlan, SessionRequest};
use crate::limits::FETCH_WAIT_MS_MAX;
use crate::replica::fetch::{FetchRequestParams, PartitionRead};

pub async fn handle(
    auth: &RequestAuth,
    services: FetchServices<'_>,
    version: i16,
    request: FetchRequest,
) -> ResponseKind {
    let base = request::request_params(version, &request);
    let image = services.cache.image();
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
        now_ms: services.replicas.now_ms(),
    };
    let plan = match services.sessions.plan(session, requested, &forgotten) {
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
    let max_bytes = requested_max_bytes.min(services.fetch_max_bytes);
    let min_bytes = (request.min_bytes.max(0) as usize).min(max_bytes);
    let max_wait_ms = i64::from(request.max_wait_ms).clamp(0, FETCH_WAIT_MS_MAX) as u64;

    let request_params = FetchRequestParams {
        base,
        // Client metadata (KIP-392) comes with every v11+ fetch; its rack may be empty.
        client_rack: (version >= 11).then(|| request.rack_id.as_str()),
        client_listener: services.listener,
        max_bytes,
        min_bytes,
        max_wait_ms,
    };
    let reads = if auth.is_enabled() {
        read_authorized(auth, &services, &plan, &request_params).await
    } else {
        services
            .replicas
            .fetch_messages(services.cache, &plan, &request_params)
            .await
    };
    response::encode(&services, version, &request_params.base, &plan, reads)
}

/// The reads of the partitions the caller may fetch, and TOPIC_AUTHORIZATION_FAILED for the
/// others, in plan order.
async fn read_authorized(
    auth: &RequestAuth,
    services: &FetchServices<'_>,
    plan: &SessionPlan,
    request: &FetchRequestParams<'_>,
) -> Vec<PartitionRead> {
    let follower_allowed =
        request.base.is_from_follower() && auth.allows_cluster(Op::ClusterAction);
    let allowed = |spec: &FetchPartitionSpec| {
        if request.base.is_from_follower() {
            follower_allowed
        } else {
            // An id the image does not know has no name to check: UNKNOWN_TOPIC_ID follows.
            spec.topic.is_empty() || auth.allows(Resource::Topic, &spec.topic, Op::Read)
        }
    };
    let (read_indexes, denied): (Vec<usize>, Vec<usize>) =
        (0..plan.partitions.len()).partition(|&i| allowed(&plan.partitions[i]));
    let mut reads = if read_indexes.is_empty() {
        Vec::new()
    } else {
        let sub_plan = SessionPlan {
            session_id: plan.session_id,
            incremental: plan.incremental,
            partitions: read_indexes
                .iter()
                .map(|&i| plan.partitions[i].clone())
                .collect(),
        };
        let mut reads = services
            .replicas
            .fetch_messages(services.cache, &sub_plan, request)
            .await;
        for read in &mut reads {
            read.spec_index = read_indexes[read.spec_index];
        }
        reads
    };
    reads.extend(denied.into_iter().map(|spec_index| PartitionRead {
        spec_index,
        result: Err(ApiError::TopicAuthorizationFailed),
        diverging: None,
        preferred_read_replica: None,
        as_leader: false,
        aborted_transactions: None,
    }));
    reads.sort_by_key(|r| r.spec_index);
    reads
}
