//! One file per Kafka API: typed request in, typed response out.
//!
//! Handlers translate between the wire types of `kafka-protocol` and calls on the core
//! (`replica`, `controller`, the metadata image). They hold no state of their own and never
//! write a numeric error code: codes come from [`crate::errors::ApiError::code`].
//!
//! A handler receives what it uses: its parameters are the services it calls (the group
//! coordinator, the controller channel, the replica manager, the metadata image or cache, the
//! config values it reads, the client's listener), which `server::dispatch` borrows from the
//! node's [`Context`](crate::context::Context). Produce and Fetch, which use more, take one
//! struct of them each ([`produce::ProduceServices`], [`fetch::FetchServices`]). A handler that
//! takes only the group coordinator cannot reach storage or the controller; no handler names
//! `Context` (`tests/in_process/architecture.rs` checks it).

pub mod acls;
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_replica_log_dirs;
pub mod api_versions;
pub mod authz;
pub mod broker_lifecycle;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
mod current_leader;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod elect_leaders;
pub mod end_txn;
pub mod error_response;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_config_resources;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod user_scram_credentials;
pub mod write_txn_markers;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

use crate::metadata::{BrokerRegistration, Endpoint, MetadataImage};

/// Wire string from a Rust string.
pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

pub(crate) fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

/// Broker `node_id` and its endpoint on `listener`, if it is registered, unfenced and has that
/// listener (Kafka's `getAliveBrokerNode`).
pub(crate) fn alive_endpoint<'a>(
    image: &'a MetadataImage,
    listener: &str,
    node_id: i32,
) -> Option<(&'a BrokerRegistration, &'a Endpoint)> {
    image
        .broker(node_id)
        .filter(|b| !b.fenced)
        .and_then(|b| b.endpoint(listener).map(|e| (b, e)))
}
