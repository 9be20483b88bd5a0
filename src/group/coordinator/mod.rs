//! The coordinator state machine: groups, members, committed offsets and timers.
//!
//! Behaviour follows Kafka's classic group coordinator (`GroupMetadataManager`,
//! `OffsetMetadataManager` and `ClassicGroup` in Kafka's group-coordinator module); where this
//! code makes a choice Kafka does not, the comment says so.
//!
//! # Layout
//!
//! - this file: the machine's interface (requests, responses, records, timers, [`Outcome`]),
//!   the [`Coordinator`] itself and the dispatch of a request to its handler.
//! - `state`: group state — Kafka's group states, members, protocols, what a group keeps.
//! - `membership`: JoinGroup and the rebalance it drives, SyncGroup, Heartbeat, LeaveGroup.
//! - `offsets`: OffsetCommit, OffsetFetch, OffsetDelete and offset retention.
//! - `admin`: ListGroups, DescribeGroups, DeleteGroups.
//! - `timers`: session, pending-member, join and sync deadlines, and what happens when they
//!   pass.
//! - `load`: taking over and giving up a `__consumer_offsets` partition; replay of its records.
//! - `responses`: how every response is shaped for the version of its request.
//! - `shard`: one partition's state in two views, latest (decisions) and durable (reads), and
//!   the pending writes in between, with the accessors the other files reach groups through.

mod admin;
pub mod assignor;
pub mod consumer;
mod load;
mod membership;
mod migration;
mod offsets;
pub mod responses;
mod shard;
mod state;
mod timers;

use state::Group;
pub use state::GroupState;

use std::collections::{BTreeSet, HashMap};

use shard::Shard;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, DeleteGroupsRequest, DeleteGroupsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{partition_for, GroupConfig};
use crate::group::records;

/// Identifies one request to the caller. Chosen by the caller, unique among requests in flight.
pub type Token = u64;

/// Who sent a request and at which version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    pub token: Token,
    pub api_version: i16,
    pub client_id: String,
    pub client_host: String,
}

/// The requests the coordinator answers.
#[derive(Debug, Clone)]
pub enum GroupRequest {
    /// With the metadata image a consumer group resolves a classic member's subscription
    /// against (online migration).
    JoinGroup(
        JoinGroupRequest,
        std::sync::Arc<crate::metadata::MetadataImage>,
    ),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    ListGroups(ListGroupsRequest),
    DescribeGroups(DescribeGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    /// KIP-848, with the metadata image its subscriptions are resolved against and the
    /// member's rights (the topics of its regex are those it may DESCRIBE).
    ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatRequest,
        std::sync::Arc<crate::metadata::MetadataImage>,
        std::sync::Arc<dyn crate::group::TopicRights>,
    ),
    /// With the metadata image that names the assigned topics.
    ConsumerGroupDescribe(
        ConsumerGroupDescribeRequest,
        std::sync::Arc<crate::metadata::MetadataImage>,
    ),
}

/// A response, shaped for the version of the request it answers.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupResponse {
    JoinGroup(JoinGroupResponse),
    SyncGroup(SyncGroupResponse),
    Heartbeat(HeartbeatResponse),
    LeaveGroup(LeaveGroupResponse),
    OffsetCommit(OffsetCommitResponse),
    OffsetFetch(OffsetFetchResponse),
    ListGroups(ListGroupsResponse),
    DescribeGroups(DescribeGroupsResponse),
    DeleteGroups(DeleteGroupsResponse),
    OffsetDelete(OffsetDeleteResponse),
    TxnOffsetCommit(TxnOffsetCommitResponse),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse),
    ConsumerGroupDescribe(ConsumerGroupDescribeResponse),
}

/// One record for a partition of `__consumer_offsets`; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorRecord {
    pub partition: i32,
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// Which deadline a timer is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerKind {
    /// A member's session (or, for a new member, its join) timeout.
    Heartbeat { member_id: String },
    /// A member id handed out with MEMBER_ID_REQUIRED that has not joined yet.
    PendingMember { member_id: String },
    /// The end of the join phase of a rebalance (rebalance timeout or initial delay).
    Join,
    /// Members that got a JoinGroup response but have not sent SyncGroup in time.
    Sync,
    /// A KIP-848 member's session timeout.
    ConsumerSession { member_id: String },
    /// A KIP-848 member asked to revoke partitions that has not done so within its
    /// rebalance timeout.
    ConsumerRebalance { member_id: String },
    /// A classic member of a consumer group told to rejoin, or that joined, and has not
    /// rejoined or synced within its rebalance timeout.
    ClassicMemberDeadline { member_id: String },
}

/// A deadline armed by the machine; the caller calls [`Coordinator::tick`] once it passes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timer {
    pub group_id: String,
    pub kind: TimerKind,
    pub deadline_ms: i64,
}

type TimerKey = (String, TimerKind);

/// What one call produced. See the module docs for the order the caller must act in.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Outcome {
    pub records: Vec<CoordinatorRecord>,
    pub responses: Vec<(Token, GroupResponse)>,
    pub timers: Vec<Timer>,
    /// The partitions whose latest (maybe not yet durable) state this call decided on. Its
    /// responses may go out only once [`Coordinator::durable_at`] of each is covered by the
    /// high watermark. Responses of a call that spans partitions name their groups
    /// (DeleteGroups), so a failure in one partition fails only that partition's groups.
    pub partitions: BTreeSet<i32>,
    /// The producer id and epoch whose transaction the records belong to (TxnOffsetCommit):
    /// they are written as a transactional batch of that producer.
    pub producer: Option<(i64, i16)>,
}

impl Outcome {
    pub fn response_for(&self, token: Token) -> Option<&GroupResponse> {
        self.responses
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, r)| r)
    }
}

/// Whether this node coordinates a `__consumer_offsets` partition yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PartitionStatus {
    Loading,
    Active,
}

/// The group coordinator of one node: every group of every `__consumer_offsets` partition the
/// node leads.
#[derive(Debug)]
pub struct Coordinator {
    config: GroupConfig,
    /// One shard per `__consumer_offsets` partition this node leads (or is loading).
    shards: HashMap<i32, Shard>,
    member_id_seed: u64,
    member_id_counter: u64,
    out: Outcome,
    /// Groups whose leader's assignment the current operation writes.
    assignments_written: Vec<String>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Coordinator {
    /// `member_id_seed` makes member ids unique across restarts of the node (the caller passes
    /// something random, tests pass a constant); ids are `<client or instance id>-<uuid>` as in
    /// Kafka.
    pub fn new(config: GroupConfig, member_id_seed: u64) -> Self {
        Self {
            config,
            shards: HashMap::new(),
            member_id_seed,
            member_id_counter: 0,
            out: Outcome::default(),
            assignments_written: Vec::new(),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.offsets_topic_num_partitions)
    }

    // ---------------------------------------------------------------- dispatch

    /// Handles one request. See the module docs for what the caller does with the outcome.
    pub fn handle(&mut self, ctx: &RequestContext, request: GroupRequest, now_ms: i64) -> Outcome {
        self.start_operation();
        // Requests that decide something depend on their group's latest state even when they
        // change nothing (a heartbeat); reads (OffsetFetch, ListGroups, DescribeGroups) use the
        // durable state and depend on nothing.
        let decides_on = match &request {
            GroupRequest::JoinGroup(r, _) => Some(r.group_id.as_str()),
            GroupRequest::SyncGroup(r) => Some(r.group_id.as_str()),
            GroupRequest::Heartbeat(r) => Some(r.group_id.as_str()),
            GroupRequest::LeaveGroup(r) => Some(r.group_id.as_str()),
            GroupRequest::OffsetCommit(r) => Some(r.group_id.as_str()),
            GroupRequest::OffsetDelete(r) => Some(r.group_id.as_str()),
            GroupRequest::TxnOffsetCommit(r) => Some(r.group_id.as_str()),
            GroupRequest::ConsumerGroupHeartbeat(r, ..) => Some(r.group_id.as_str()),
            _ => None,
        };
        if let Some(group_id) = decides_on {
            let partition = self.shard_of(group_id);
            self.touch(partition);
        }
        match request {
            GroupRequest::JoinGroup(r, image) => self.join_group(ctx, r, &image, now_ms),
            GroupRequest::SyncGroup(r) => self.sync_group(ctx, r, now_ms),
            GroupRequest::Heartbeat(r) => self.heartbeat(ctx, r, now_ms),
            GroupRequest::LeaveGroup(r) => self.leave_group(ctx, r, now_ms),
            GroupRequest::OffsetCommit(r) => self.offset_commit(ctx, r, now_ms),
            GroupRequest::OffsetFetch(r) => self.offset_fetch(ctx, r),
            GroupRequest::ListGroups(r) => self.list_groups(ctx, r),
            GroupRequest::DescribeGroups(r) => self.describe_groups(ctx, r),
            GroupRequest::DeleteGroups(r) => self.delete_groups(ctx, r),
            GroupRequest::OffsetDelete(r) => self.offset_delete(ctx, r),
            GroupRequest::TxnOffsetCommit(r) => self.txn_offset_commit(ctx, r, now_ms),
            GroupRequest::ConsumerGroupHeartbeat(r, image, rights) => {
                self.consumer_group_heartbeat(ctx, r, &image, rights, now_ms)
            }
            GroupRequest::ConsumerGroupDescribe(r, image) => {
                self.consumer_group_describe(ctx, r, &image)
            }
        }
        self.finish_operation()
    }

    pub(super) fn respond(&mut self, token: Token, response: GroupResponse) {
        self.out.responses.push((token, response));
    }

    pub(super) fn append(&mut self, partition: i32, key: Bytes, value: Option<Bytes>) {
        self.touch(partition);
        self.out.records.push(CoordinatorRecord {
            partition,
            key,
            value,
        });
    }

    pub(super) fn write_group_metadata(&mut self, group_id: &str) {
        let Some(group) = self.group(group_id) else {
            return;
        };
        let partition = group.partition;
        let value = records::encode_group_metadata_value(&group.metadata_value());
        self.append(
            partition,
            records::encode_group_metadata_key(group_id),
            Some(value),
        );
    }

    /// NOT_COORDINATOR unless this node leads the group's partition; LOAD_IN_PROGRESS while it
    /// is still replaying it.
    pub(super) fn check_coordinator(&self, group_id: &str) -> Result<(), ResponseError> {
        match self.shards.get(&self.shard_of(group_id)).map(|s| s.status) {
            None => Err(ResponseError::NotCoordinator),
            Some(PartitionStatus::Loading) => Err(ResponseError::CoordinatorLoadInProgress),
            Some(PartitionStatus::Active) => Ok(()),
        }
    }

    pub(super) fn new_member_id(&mut self, prefix: &str) -> String {
        self.member_id_counter += 1;
        let a = splitmix64(self.member_id_seed ^ self.member_id_counter);
        let b = splitmix64(a ^ self.member_id_counter.rotate_left(32));
        format!(
            "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    pub(super) fn maybe_dispose(&mut self, group_id: &str) {
        if self.group(group_id).is_some_and(Group::is_disposable) {
            self.remove_group(group_id);
            self.cancel_group_timers(group_id);
        }
    }

    /// The durable state of a group (what DescribeGroups reports), for tests and logs.
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.durable_group(group_id).map(|g| g.state)
    }

    /// The durable generation id of a group, for tests and logs.
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.durable_group(group_id).map(|g| g.generation_id)
    }
}

#[cfg(test)]
pub(super) mod tests_support {
    pub fn parse_topics(bytes: &[u8]) -> Option<Vec<String>> {
        super::state::parse_subscription_topics(bytes)
    }
}
