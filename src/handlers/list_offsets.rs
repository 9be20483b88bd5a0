//! ListOffsets (key 2), v1-10: earliest (-2), latest (-1), max timestamp (-3), earliest local
//! (-4, the same as earliest without tiered storage), latest tiered (-5, none without tiered
//! storage) and by timestamp, with the leader epoch of the returned offset (v4+).
//! Leader-only, with `current_leader_epoch` fencing; the lookup is
//! [`ReplicaManager::fetch_offset_for_timestamp`](crate::replica::ReplicaManager) (a client,
//! replica id -1, reads up to the high watermark, or the last stable offset at read_committed; a
//! follower, replica id >= 0, to the log end).

use super::authz::{Op, RequestAuth, Resource};
use std::collections::HashSet;
use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, ResponseKind};

use crate::errors::ApiError;
use crate::metadata::MetadataCache;
use crate::replica::list_offsets::FoundOffset;
use crate::replica::{FetchIsolation, ReplicaManager, TopicPartition};

/// Answers on a blocking thread: a lookup by timestamp reads index files and may decompress a
/// batch, which must not hold a tokio worker (the replica fetchers, heartbeats and the Raft
/// transport share them).
/// With an authorizer, the partitions of a topic the caller may not DESCRIBE are answered
/// TOPIC_AUTHORIZATION_FAILED (Kafka's `handleListOffsetRequest`).
pub async fn handle(
    auth: &RequestAuth,
    cache: &Arc<MetadataCache>,
    replicas: &Arc<ReplicaManager>,
    version: i16,
    request: ListOffsetsRequest,
) -> ResponseKind {
    let (cache, replicas) = (cache.clone(), replicas.clone());
    let denied: HashSet<String> = request
        .topics
        .iter()
        .map(|t| t.name.0.as_str())
        .filter(|name| !auth.allows(Resource::Topic, name, Op::Describe))
        .map(str::to_owned)
        .collect();
    tokio::task::spawn_blocking(move || answer(&cache, &replicas, version, request, &denied))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// The partitions named more than once: each of their entries is answered INVALID_REQUEST, as
/// Kafka's `ListOffsetsRequest#duplicatePartitions` makes it (so one request cannot ask for the
/// same costly lookup many times).
fn duplicate_partitions(request: &ListOffsetsRequest) -> HashSet<(&str, i32)> {
    let mut seen = HashSet::new();
    let mut duplicates = HashSet::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let key = (topic.name.0.as_str(), p.partition_index);
            if !seen.insert(key) {
                duplicates.insert(key);
            }
        }
    }
    duplicates
}

fn answer(
    cache: &MetadataCache,
    replicas: &ReplicaManager,
    version: i16,
    request: ListOffsetsRequest,
    denied: &HashSet<String>,
) -> ResponseKind {
    // A follower reads to the log end; a client to the high watermark, or at read_committed to
    // the last stable offset (v2+; older versions decode READ_UNCOMMITTED).
    let isolation = FetchIsolation::of(request.replica_id.0, request.isolation_level);
    let duplicates: HashSet<(String, i32)> = duplicate_partitions(&request)
        .into_iter()
        .map(|(t, p)| (t.to_owned(), p))
        .collect();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.as_str().to_owned();
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let tp = TopicPartition {
                        topic: name.clone(),
                        partition: p.partition_index,
                    };
                    let epoch = if version >= 4 {
                        p.current_leader_epoch
                    } else {
                        -1
                    };
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    let found = if denied.contains(&name) {
                        Err(ApiError::TopicAuthorizationFailed)
                    } else if duplicates.contains(&(name.clone(), p.partition_index)) {
                        Err(ApiError::InvalidRequest(format!(
                            "partition {tp} named more than once"
                        )))
                    } else {
                        replicas.fetch_offset_for_timestamp(
                            &cache.image(),
                            &tp,
                            p.timestamp,
                            epoch,
                            isolation,
                        )
                    };
                    match found {
                        Ok(Some(FoundOffset {
                            timestamp,
                            offset,
                            leader_epoch,
                        })) => {
                            r.timestamp = timestamp;
                            r.offset = offset;
                            if version >= 4 {
                                r.leader_epoch = leader_epoch;
                            }
                        }
                        Ok(None) => {
                            r.timestamp = -1;
                            r.offset = -1;
                        }
                        Err(e) => {
                            r.error_code = e.code();
                            r.timestamp = -1;
                            r.offset = -1;
                        }
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(topics))
}
