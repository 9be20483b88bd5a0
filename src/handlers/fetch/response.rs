//! The Fetch answer: each partition's read as `PartitionData`, in plan order, grouped by topic;
//! in an incremental session (KIP-227) only the partitions the session cache says changed.

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, ResponseKind};

use super::FetchServices;
use crate::errors::ApiError;
use crate::fetch_session::SessionPlan;
use crate::handlers::current_leader::CurrentLeaders;
use crate::handlers::topic_name;
use crate::replica::fetch::PartitionRead;
use crate::replica::{FetchIsolation, FetchParams};

pub(super) fn encode(
    services: &FetchServices<'_>,
    version: i16,
    base: &FetchParams,
    plan: &SessionPlan,
    reads: Vec<PartitionRead>,
) -> ResponseKind {
    let read_committed = base.isolation == FetchIsolation::TxnCommitted;
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    let mut leaders = CurrentLeaders::new(services.cache.image(), services.listener);
    for read in reads {
        let spec = &plan.partitions[read.spec_index];
        let mut data = PartitionData::default()
            .with_partition_index(spec.partition)
            .with_records(Some(Bytes::new()));
        let (has_records_or_error, hw, log_start) = match read.result {
            Ok((records, offsets)) => {
                data.high_watermark = offsets.high_watermark;
                data.last_stable_offset = offsets.last_stable_offset;
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
                    services
                        .topic_stats
                        .fetched(&spec.topic, records.len() as u64);
                    if read.as_leader {
                        // The leader's load, which the load balancer weighs.
                        services.topic_stats.partition_load(
                            &spec.topic,
                            spec.partition,
                            crate::metrics::monotonic_ms(),
                            0,
                            records.len() as u64,
                        );
                    }
                }
                services
                    .served
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
                    let (leader, epoch) = leaders.name(&spec.topic, spec.partition);
                    data.current_leader = LeaderIdAndEpoch::default()
                        .with_leader_id(leader)
                        .with_leader_epoch(epoch);
                }
                data.high_watermark = -1;
                data.last_stable_offset = -1;
                if version >= 5 {
                    data.log_start_offset = -1;
                }
                (true, -1, -1)
            }
        };
        // read_committed gets a list (empty when nothing read was aborted), read_uncommitted
        // null, as Kafka.
        data.aborted_transactions = read_committed.then(|| {
            read.aborted_transactions
                .iter()
                .flatten()
                .map(|t| {
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(t.producer_id))
                        .with_first_offset(t.first_offset)
                })
                .collect()
        });
        if plan.incremental
            && !services.sessions.should_send(
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
            services.sessions.should_send(
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
        response.node_endpoints = leaders.node_endpoints(|e| {
            NodeEndpoint::default()
                .with_node_id(e.node_id)
                .with_host(e.host)
                .with_port(e.port)
                .with_rack(e.rack)
        });
    }
    ResponseKind::Fetch(response)
}
