//! The coordinator state machine: groups, members, committed offsets and timers.
//!
//! Behaviour follows Kafka's classic group coordinator (`GroupMetadataManager`,
//! `OffsetMetadataManager` and `ClassicGroup` in Kafka's group-coordinator module); where this
//! file makes a choice Kafka does not, the comment says so.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    delete_groups_response::DeletableGroupResult,
    describe_groups_response::{DescribedGroup, DescribedGroupMember},
    join_group_response::JoinGroupResponseMember,
    leave_group_request::MemberIdentity,
    leave_group_response::MemberResponse,
    list_groups_response::ListedGroup,
    offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic},
    offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic},
    offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
        OffsetFetchResponseTopic, OffsetFetchResponseTopics,
    },
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::records::{self, GroupMetadataValue, MemberMetadata, OffsetCommitValue, RecordKey};
use super::{partition_for, GroupConfig};

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
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    ListGroups(ListGroupsRequest),
    DescribeGroups(DescribeGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
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
}

impl Outcome {
    pub fn response_for(&self, token: Token) -> Option<&GroupResponse> {
        self.responses
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, r)| r)
    }
}

/// Kafka's classic group states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A request waiting for the group to move on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parked {
    token: Token,
    api_version: i16,
}

#[derive(Debug, Clone)]
struct Member {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    /// (protocol name, metadata) in the member's order of preference.
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    awaiting_join: Option<Parked>,
    awaiting_sync: Option<Parked>,
    /// Joined during the current rebalance and never completed one; such a member is held to
    /// the new-member join timeout instead of its session timeout.
    is_new: bool,
    /// Join order: Kafka keeps members in insertion order, which picks the next leader and
    /// orders the member list the leader receives.
    join_seq: u64,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// The initial-rebalance delay of a new group (Kafka's `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy)]
struct InitialJoin {
    delay_ms: i64,
    remaining_ms: i64,
}

#[derive(Debug, Clone)]
struct Group {
    group_id: String,
    partition: i32,
    state: GroupState,
    state_timestamp_ms: i64,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    generation_id: i32,
    leader_id: Option<String>,
    members: HashMap<String, Member>,
    static_members: HashMap<String, String>,
    pending_members: HashSet<String>,
    pending_sync: HashSet<String>,
    initial_join: Option<InitialJoin>,
    new_member_added: bool,
    /// Topics the members subscribe to, when the protocol is "consumer" and every
    /// subscription parsed; `None` means unknown (treated as subscribed to everything).
    subscribed_topics: Option<HashSet<String>>,
    offsets: BTreeMap<(String, i32), OffsetCommitValue>,
    next_join_seq: u64,
}

impl Group {
    fn new(group_id: String, partition: i32, now_ms: i64) -> Self {
        Self {
            group_id,
            partition,
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: HashMap::new(),
            static_members: HashMap::new(),
            pending_members: HashSet::new(),
            pending_sync: HashSet::new(),
            initial_join: None,
            new_member_added: false,
            subscribed_topics: Some(HashSet::new()),
            offsets: BTreeMap::new(),
            next_join_seq: 0,
        }
    }

    fn transition(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_timestamp_ms = now_ms;
    }

    fn members_in_join_order(&self) -> Vec<&Member> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.join_seq);
        members
    }

    fn first_member_id(&self) -> Option<String> {
        self.members
            .values()
            .min_by_key(|m| m.join_seq)
            .map(|m| m.member_id.clone())
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    /// Protocol names every member supports, in the first member's order of preference.
    fn candidate_protocols(&self) -> Vec<String> {
        let members = self.members_in_join_order();
        let Some(first) = members.first() else {
            return Vec::new();
        };
        first
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .filter(|name| {
                members
                    .iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
            .collect()
    }

    /// Kafka's vote: each member votes for its most preferred candidate; most votes wins.
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: Vec<(String, usize)> = candidates.iter().map(|c| (c.clone(), 0)).collect();
        for member in self.members.values() {
            if let Some((name, _)) = member
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(n))
            {
                if let Some(entry) = votes.iter_mut().find(|(c, _)| c == name) {
                    entry.1 += 1;
                }
            }
        }
        let mut best: Option<(String, usize)> = None;
        for (name, count) in votes {
            if best.as_ref().is_none_or(|(_, c)| count > *c) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name)
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    fn compute_subscribed_topics(&self) -> Option<HashSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = HashSet::new();
        for member in self.members.values() {
            topics.extend(parse_subscription_topics(&member.metadata_for(protocol))?);
        }
        Some(topics)
    }

    fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => true,
        }
    }

    fn metadata_value(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.clone();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: protocol.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members_in_join_order()
                .into_iter()
                .map(|m| MemberMetadata {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: protocol
                        .as_deref()
                        .map(|p| m.metadata_for(p))
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// A group with nothing worth keeping: no members, no offsets, never persisted.
    fn is_disposable(&self) -> bool {
        self.state == GroupState::Empty
            && self.members.is_empty()
            && self.pending_members.is_empty()
            && self.offsets.is_empty()
            && self.generation_id == 0
            && self.protocol_type.is_none()
    }
}

/// Topics of a `ConsumerProtocolSubscription` (every version starts with the topic array).
/// Parsed by hand, with every length checked against the bytes present, because the bytes come
/// from clients and the generated decoder sizes allocations from wire lengths.
fn parse_subscription_topics(bytes: &[u8]) -> Option<Vec<String>> {
    let mut buf = bytes;
    let mut take = |n: usize| -> Option<&[u8]> {
        if buf.len() < n {
            return None;
        }
        let (head, tail) = buf.split_at(n);
        buf = tail;
        Some(head)
    };
    let version = i16::from_be_bytes(take(2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let count = i32::from_be_bytes(take(4)?.try_into().ok()?);
    if count < 0 {
        return None;
    }
    let mut topics = Vec::new();
    for _ in 0..count {
        let len = i16::from_be_bytes(take(2)?.try_into().ok()?);
        if len < 0 {
            return None;
        }
        let name = std::str::from_utf8(take(len as usize)?).ok()?;
        topics.push(name.to_owned());
    }
    Some(topics)
}

/// Whether this node coordinates a `__consumer_offsets` partition yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionStatus {
    Loading,
    Active,
}

/// The group coordinator of one node: every group of every `__consumer_offsets` partition the
/// node leads.
#[derive(Debug)]
pub struct Coordinator {
    config: GroupConfig,
    partitions: HashMap<i32, PartitionStatus>,
    groups: HashMap<String, Group>,
    timers: BTreeSet<(i64, TimerKey)>,
    timer_deadlines: HashMap<TimerKey, i64>,
    member_id_seed: u64,
    member_id_counter: u64,
    out: Outcome,
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
            partitions: HashMap::new(),
            groups: HashMap::new(),
            timers: BTreeSet::new(),
            timer_deadlines: HashMap::new(),
            member_id_seed,
            member_id_counter: 0,
            out: Outcome::default(),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.offsets_topic_num_partitions)
    }

    // ---------------------------------------------------------------- partition ownership

    /// This node became leader of `partition`: its groups are unavailable
    /// (COORDINATOR_LOAD_IN_PROGRESS) until [`Coordinator::complete_load`].
    pub fn begin_load(&mut self, partition: i32) {
        self.drop_partition_groups(partition);
        self.partitions.insert(partition, PartitionStatus::Loading);
    }

    /// Every record of `partition` has been replayed: serve its groups and arm member session
    /// timers, as Kafka does when it finishes loading a partition.
    pub fn complete_load(&mut self, partition: i32, now_ms: i64) -> Outcome {
        self.partitions.insert(partition, PartitionStatus::Active);
        let mut arm = Vec::new();
        for group in self.groups.values() {
            if group.partition != partition {
                continue;
            }
            for member in group.members.values() {
                arm.push((
                    group.group_id.clone(),
                    member.member_id.clone(),
                    now_ms + i64::from(member.session_timeout_ms),
                ));
            }
        }
        for (group_id, member_id, deadline) in arm {
            self.schedule(&group_id, TimerKind::Heartbeat { member_id }, deadline);
        }
        std::mem::take(&mut self.out)
    }

    /// This node no longer leads `partition`: forget its groups and answer parked requests with
    /// NOT_COORDINATOR so clients look the coordinator up again.
    pub fn unload(&mut self, partition: i32) -> Outcome {
        self.partitions.remove(&partition);
        self.drop_partition_groups(partition);
        std::mem::take(&mut self.out)
    }

    fn drop_partition_groups(&mut self, partition: i32) {
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| g.partition == partition)
            .map(|g| g.group_id.clone())
            .collect();
        for id in ids {
            if let Some(group) = self.groups.remove(&id) {
                for member in group.members.values() {
                    if let Some(p) = member.awaiting_join {
                        self.respond(
                            p.token,
                            join_error(p.api_version, ResponseError::NotCoordinator, ""),
                        );
                    }
                    if let Some(p) = member.awaiting_sync {
                        self.respond(
                            p.token,
                            sync_error(p.api_version, ResponseError::NotCoordinator),
                        );
                    }
                }
                self.cancel_group_timers(&id);
            }
        }
    }

    /// Applies one record of `partition` (replay at load time). Later records win; a null value
    /// deletes. Errors mean the record is not one of ours and is skipped by the caller.
    pub fn replay(
        &mut self,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), records::RecordError> {
        match records::decode_key(key)? {
            RecordKey::OffsetCommit {
                group,
                topic,
                partition: tp,
            } => match value {
                Some(v) => {
                    let value = records::decode_offset_commit_value(v)?;
                    self.groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group, partition, value.commit_timestamp_ms))
                        .offsets
                        .insert((topic, tp), value);
                }
                None => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.offsets.remove(&(topic, tp));
                    }
                }
            },
            RecordKey::GroupMetadata { group } => match value {
                Some(v) => {
                    let value = records::decode_group_metadata_value(v)?;
                    let entry = self
                        .groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(group.clone(), partition, 0));
                    load_group_metadata(entry, value);
                }
                None => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        let offsets = std::mem::take(&mut g.offsets);
                        if offsets.is_empty() {
                            self.groups.remove(&group);
                        } else {
                            let mut fresh = Group::new(group.clone(), partition, 0);
                            fresh.offsets = offsets;
                            self.groups.insert(group, fresh);
                        }
                    }
                }
            },
        }
        Ok(())
    }

    // ---------------------------------------------------------------- timers

    /// The earliest armed deadline, if any.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.timers.iter().next().map(|(d, _)| *d)
    }

    /// Runs every timer whose deadline is at or before `now_ms`.
    pub fn tick(&mut self, now_ms: i64) -> Outcome {
        while let Some((deadline, key)) = self.timers.iter().next().cloned() {
            if deadline > now_ms {
                break;
            }
            self.timers.remove(&(deadline, key.clone()));
            self.timer_deadlines.remove(&key);
            let (group_id, kind) = key;
            match kind {
                TimerKind::Heartbeat { member_id } => {
                    self.on_heartbeat_expired(&group_id, &member_id, now_ms)
                }
                TimerKind::PendingMember { member_id } => {
                    self.on_pending_member_expired(&group_id, &member_id, now_ms)
                }
                TimerKind::Join => self.on_join_timer(&group_id, now_ms),
                TimerKind::Sync => self.on_sync_timer(&group_id, now_ms),
            }
        }
        std::mem::take(&mut self.out)
    }

    fn schedule(&mut self, group_id: &str, kind: TimerKind, deadline_ms: i64) {
        let key = (group_id.to_owned(), kind.clone());
        if let Some(old) = self.timer_deadlines.insert(key.clone(), deadline_ms) {
            self.timers.remove(&(old, key.clone()));
        }
        self.timers.insert((deadline_ms, key));
        self.out.timers.push(Timer {
            group_id: group_id.to_owned(),
            kind,
            deadline_ms,
        });
    }

    fn cancel(&mut self, group_id: &str, kind: TimerKind) {
        let key = (group_id.to_owned(), kind);
        if let Some(old) = self.timer_deadlines.remove(&key) {
            self.timers.remove(&(old, key));
        }
    }

    fn cancel_group_timers(&mut self, group_id: &str) {
        let keys: Vec<TimerKey> = self
            .timer_deadlines
            .keys()
            .filter(|(g, _)| g == group_id)
            .cloned()
            .collect();
        for (g, kind) in keys {
            self.cancel(&g, kind);
        }
    }

    fn schedule_heartbeat(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        let Some(member) = self
            .groups
            .get(group_id)
            .and_then(|g| g.members.get(member_id))
        else {
            return;
        };
        let timeout = if member.is_new {
            self.config.new_member_join_timeout_ms
        } else {
            i64::from(member.session_timeout_ms)
        };
        self.schedule(
            group_id,
            TimerKind::Heartbeat {
                member_id: member_id.to_owned(),
            },
            now_ms + timeout,
        );
    }

    fn on_heartbeat_expired(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        let Some(member) = self
            .groups
            .get(group_id)
            .and_then(|g| g.members.get(member_id))
        else {
            return;
        };
        // A member waiting on the group is alive; the rebalance and sync timeouts bound the wait.
        // A new member is not: it has only the new-member join timeout.
        let waiting = member.awaiting_join.is_some() || member.awaiting_sync.is_some();
        if waiting && !member.is_new {
            return;
        }
        self.remove_member_and_update(group_id, member_id, now_ms);
    }

    fn on_pending_member_expired(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.pending_members.remove(member_id) {
            self.maybe_complete_join(group_id, now_ms);
            self.maybe_dispose(group_id);
        }
    }

    fn on_join_timer(&mut self, group_id: &str, now_ms: i64) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(initial) = group.initial_join {
            if group.new_member_added && initial.remaining_ms > 0 {
                // Kafka's InitialDelayedJoin: members keep arriving, wait another delay, but
                // never longer in total than the rebalance timeout.
                let delay = initial.delay_ms.min(initial.remaining_ms);
                group.initial_join = Some(InitialJoin {
                    delay_ms: initial.delay_ms,
                    remaining_ms: initial.remaining_ms - delay,
                });
                group.new_member_added = false;
                self.schedule(group_id, TimerKind::Join, now_ms + delay);
                return;
            }
        }
        self.complete_join(group_id, now_ms);
    }

    fn on_sync_timer(&mut self, group_id: &str, now_ms: i64) {
        let Some(group) = self.groups.get(group_id) else {
            return;
        };
        if !matches!(
            group.state,
            GroupState::CompletingRebalance | GroupState::Stable
        ) || group.pending_sync.is_empty()
        {
            return;
        }
        let laggards: Vec<String> = group.pending_sync.iter().cloned().collect();
        for member_id in laggards {
            self.remove_member(group_id, &member_id, ResponseError::UnknownMemberId);
        }
        let state = self.groups.get(group_id).map(|g| g.state);
        if matches!(
            state,
            Some(GroupState::CompletingRebalance | GroupState::Stable)
        ) {
            self.prepare_rebalance(group_id, now_ms);
        }
    }

    // ---------------------------------------------------------------- dispatch

    /// Handles one request. See the module docs for what the caller does with the outcome.
    pub fn handle(&mut self, ctx: &RequestContext, request: GroupRequest, now_ms: i64) -> Outcome {
        match request {
            GroupRequest::JoinGroup(r) => self.join_group(ctx, r, now_ms),
            GroupRequest::SyncGroup(r) => self.sync_group(ctx, r, now_ms),
            GroupRequest::Heartbeat(r) => self.heartbeat(ctx, r, now_ms),
            GroupRequest::LeaveGroup(r) => self.leave_group(ctx, r, now_ms),
            GroupRequest::OffsetCommit(r) => self.offset_commit(ctx, r, now_ms),
            GroupRequest::OffsetFetch(r) => self.offset_fetch(ctx, r),
            GroupRequest::ListGroups(r) => self.list_groups(ctx, r),
            GroupRequest::DescribeGroups(r) => self.describe_groups(ctx, r),
            GroupRequest::DeleteGroups(r) => self.delete_groups(ctx, r),
            GroupRequest::OffsetDelete(r) => self.offset_delete(ctx, r),
        }
        std::mem::take(&mut self.out)
    }

    fn respond(&mut self, token: Token, response: GroupResponse) {
        self.out.responses.push((token, response));
    }

    /// Forgets a committed offset: a tombstone for its key in `__consumer_offsets`, and the
    /// entry in the group (OffsetDelete and offset expiry).
    fn delete_offset(&mut self, partition: i32, group_id: &str, topic: String, tp: i32) {
        self.append(
            partition,
            records::encode_offset_commit_key(group_id, &topic, tp),
            None,
        );
        self.groups
            .get_mut(group_id)
            .expect("group exists")
            .offsets
            .remove(&(topic, tp));
    }

    fn append(&mut self, partition: i32, key: Bytes, value: Option<Bytes>) {
        self.out.records.push(CoordinatorRecord {
            partition,
            key,
            value,
        });
    }

    fn write_group_metadata(&mut self, group_id: &str) {
        let Some(group) = self.groups.get(group_id) else {
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
    fn check_coordinator(&self, group_id: &str) -> Result<(), ResponseError> {
        match self.partitions.get(&self.partition_for(group_id)) {
            None => Err(ResponseError::NotCoordinator),
            Some(PartitionStatus::Loading) => Err(ResponseError::CoordinatorLoadInProgress),
            Some(PartitionStatus::Active) => Ok(()),
        }
    }

    fn new_member_id(&mut self, prefix: &str) -> String {
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

    fn maybe_dispose(&mut self, group_id: &str) {
        if self.groups.get(group_id).is_some_and(Group::is_disposable) {
            self.groups.remove(group_id);
            self.cancel_group_timers(group_id);
        }
    }

    // ---------------------------------------------------------------- JoinGroup

    fn join_group(&mut self, ctx: &RequestContext, req: JoinGroupRequest, now_ms: i64) {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let fail = |this: &mut Self, e: ResponseError| {
            this.respond(ctx.token, join_error(v, e, &member_id));
        };
        if group_id.is_empty() {
            return fail(self, ResponseError::InvalidGroupId);
        }
        if let Err(e) = self.check_coordinator(&group_id) {
            return fail(self, e);
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return fail(self, ResponseError::InvalidSessionTimeout);
        }
        if !self.groups.contains_key(&group_id) {
            if !member_id.is_empty() {
                return fail(self, ResponseError::UnknownMemberId);
            }
            let partition = self.partition_for(&group_id);
            self.groups.insert(
                group_id.clone(),
                Group::new(group_id.clone(), partition, now_ms),
            );
        }
        let group = &self.groups[&group_id];
        if !self.accept_joining_member(group, &member_id) {
            fail(self, ResponseError::GroupMaxSizeReached);
            return self.maybe_dispose(&group_id);
        }
        let protocols: Vec<(String, Bytes)> = req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        if !group.supports_protocols(&req.protocol_type, &protocols) {
            fail(self, ResponseError::InconsistentGroupProtocol);
            return self.maybe_dispose(&group_id);
        }
        let join = Join {
            parked: Parked {
                token: ctx.token,
                api_version: v,
            },
            client_id: ctx.client_id.clone(),
            client_host: ctx.client_host.clone(),
            instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            protocol_type: req.protocol_type.to_string(),
            protocols,
            session_timeout_ms: req.session_timeout_ms,
            // v0 had one timeout for both.
            rebalance_timeout_ms: if v == 0 {
                req.session_timeout_ms
            } else {
                req.rebalance_timeout_ms
            },
        };
        if member_id.is_empty() {
            self.join_unknown_member(&group_id, join, now_ms);
        } else {
            self.join_existing_member(&group_id, &member_id, join, now_ms);
        }
        self.maybe_dispose(&group_id);
    }

    fn accept_joining_member(&self, group: &Group, member_id: &str) -> bool {
        let max = self.config.max_size;
        match group.state {
            GroupState::Empty | GroupState::Dead => true,
            GroupState::PreparingRebalance => {
                group
                    .members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || group.num_awaiting_join() < max
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                group.members.contains_key(member_id) || group.members.len() < max
            }
        }
    }

    fn join_unknown_member(&mut self, group_id: &str, join: Join, now_ms: i64) {
        let v = join.parked.api_version;
        if let Some(instance_id) = join.instance_id.clone() {
            let existing = self.groups[group_id]
                .static_members
                .get(&instance_id)
                .cloned();
            let new_id = self.new_member_id(&instance_id);
            match existing {
                Some(old_id) => self.rejoin_static_member(group_id, &old_id, new_id, join, now_ms),
                None => self.add_member_and_rebalance(group_id, new_id, join, now_ms),
            }
        } else if v >= 4 {
            // KIP-394: hand out an id first so a client that times out on its first join does
            // not leave a ghost member behind.
            let new_id = self.new_member_id(&join.client_id);
            let group = self.groups.get_mut(group_id).expect("group exists");
            group.pending_members.insert(new_id.clone());
            self.schedule(
                group_id,
                TimerKind::PendingMember {
                    member_id: new_id.clone(),
                },
                now_ms + i64::from(join.session_timeout_ms),
            );
            self.respond(
                join.parked.token,
                join_error(v, ResponseError::MemberIdRequired, &new_id),
            );
        } else {
            let new_id = self.new_member_id(&join.client_id);
            self.add_member_and_rebalance(group_id, new_id, join, now_ms);
        }
    }

    fn join_existing_member(&mut self, group_id: &str, member_id: &str, join: Join, now_ms: i64) {
        let v = join.parked.api_version;
        let group = &self.groups[group_id];
        if group.pending_members.contains(member_id) {
            let group = self.groups.get_mut(group_id).expect("group exists");
            group.pending_members.remove(member_id);
            self.cancel(
                group_id,
                TimerKind::PendingMember {
                    member_id: member_id.to_owned(),
                },
            );
            return self.add_member_and_rebalance(group_id, member_id.to_owned(), join, now_ms);
        }
        if let Err(e) = validate_member(group, member_id, join.instance_id.as_deref()) {
            return self.respond(join.parked.token, join_error(v, e, member_id));
        }
        let member = &group.members[member_id];
        let unchanged = member.same_protocols(&join.protocols);
        match group.state {
            GroupState::PreparingRebalance => {
                self.update_member_and_rebalance(group_id, member_id, join, now_ms)
            }
            GroupState::CompletingRebalance if unchanged => {
                // A retried JoinGroup after its response was lost: answer from the current
                // generation instead of starting another rebalance.
                let is_leader = group.is_leader(member_id);
                let response = join_success(group, v, member_id, is_leader, false);
                self.respond(join.parked.token, response);
            }
            GroupState::Stable if unchanged && !group.is_leader(member_id) => {
                let response = join_success(group, v, member_id, false, false);
                self.respond(join.parked.token, response);
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member_and_rebalance(group_id, member_id, join, now_ms)
            }
            GroupState::Empty | GroupState::Dead => self.respond(
                join.parked.token,
                join_error(v, ResponseError::UnknownMemberId, member_id),
            ),
        }
    }

    /// A static member came back with a new process (empty member id, known instance id):
    /// it takes over the old member's place, fencing the old id (KIP-345).
    fn rejoin_static_member(
        &mut self,
        group_id: &str,
        old_id: &str,
        new_id: String,
        join: Join,
        now_ms: i64,
    ) {
        let v = join.parked.api_version;
        let group = self.groups.get_mut(group_id).expect("group exists");
        let Some(mut member) = group.members.remove(old_id) else {
            return self.add_member_and_rebalance(group_id, new_id, join, now_ms);
        };
        let mut fenced = Vec::new();
        if let Some(p) = member.awaiting_join.take() {
            fenced.push((
                p.token,
                join_error(p.api_version, ResponseError::FencedInstanceId, old_id),
            ));
        }
        if let Some(p) = member.awaiting_sync.take() {
            fenced.push((
                p.token,
                sync_error(p.api_version, ResponseError::FencedInstanceId),
            ));
        }
        member.member_id = new_id.clone();
        member.protocols = join.protocols.clone();
        member.client_id = join.client_id.clone();
        member.client_host = join.client_host.clone();
        member.session_timeout_ms = join.session_timeout_ms;
        member.rebalance_timeout_ms = join.rebalance_timeout_ms;
        group.members.insert(new_id.clone(), member);
        if let Some(instance_id) = &join.instance_id {
            group
                .static_members
                .insert(instance_id.clone(), new_id.clone());
        }
        if group.leader_id.as_deref() == Some(old_id) {
            group.leader_id = Some(new_id.clone());
        }
        if group.pending_sync.remove(old_id) {
            group.pending_sync.insert(new_id.clone());
        }
        for (token, response) in fenced {
            self.respond(token, response);
        }
        self.cancel(
            group_id,
            TimerKind::Heartbeat {
                member_id: old_id.to_owned(),
            },
        );
        let group = &self.groups[group_id];
        let keeps_protocol = group.select_protocol() == group.protocol_name;
        if group.state == GroupState::Stable && keeps_protocol {
            // No rebalance: persist the new member id and answer from the current generation.
            // The leader learns the members but is told to skip the assignment (KIP-814).
            let is_leader = group.is_leader(&new_id);
            let response = join_success(group, v, &new_id, is_leader, is_leader && v >= 9);
            self.write_group_metadata(group_id);
            self.respond(join.parked.token, response);
            self.schedule_heartbeat(group_id, &new_id, now_ms);
            return;
        }
        // Otherwise (the selected protocol would change, or a rebalance is under way) the
        // member takes part in a rebalance under its new id.
        self.update_member_and_rebalance(group_id, &new_id, join, now_ms);
    }

    fn add_member_and_rebalance(
        &mut self,
        group_id: &str,
        member_id: String,
        join: Join,
        now_ms: i64,
    ) {
        let group = self.groups.get_mut(group_id).expect("group exists");
        let join_seq = group.next_join_seq;
        group.next_join_seq += 1;
        if group.members.is_empty() {
            group.protocol_type = Some(join.protocol_type.clone());
        }
        if let Some(instance_id) = &join.instance_id {
            group
                .static_members
                .insert(instance_id.clone(), member_id.clone());
        }
        group.members.insert(
            member_id.clone(),
            Member {
                member_id: member_id.clone(),
                group_instance_id: join.instance_id.clone(),
                client_id: join.client_id,
                client_host: join.client_host,
                rebalance_timeout_ms: join.rebalance_timeout_ms,
                session_timeout_ms: join.session_timeout_ms,
                protocols: join.protocols,
                assignment: Bytes::new(),
                awaiting_join: Some(join.parked),
                awaiting_sync: None,
                is_new: true,
                join_seq,
            },
        );
        if group.leader_id.is_none() {
            group.leader_id = Some(member_id.clone());
        }
        if group.state == GroupState::PreparingRebalance && group.initial_join.is_some() {
            group.new_member_added = true;
        }
        let state = group.state;
        self.schedule_heartbeat(group_id, &member_id, now_ms);
        if state == GroupState::PreparingRebalance {
            self.maybe_complete_join(group_id, now_ms);
        } else {
            self.prepare_rebalance(group_id, now_ms);
        }
    }

    fn update_member_and_rebalance(
        &mut self,
        group_id: &str,
        member_id: &str,
        join: Join,
        now_ms: i64,
    ) {
        let group = self.groups.get_mut(group_id).expect("group exists");
        let member = group.members.get_mut(member_id).expect("member exists");
        member.protocols = join.protocols;
        member.session_timeout_ms = join.session_timeout_ms;
        member.rebalance_timeout_ms = join.rebalance_timeout_ms;
        let replaced = member.awaiting_join.replace(join.parked);
        let state = group.state;
        if let Some(old) = replaced {
            // The client retried its JoinGroup; the earlier request is superseded.
            self.respond(
                old.token,
                join_error(
                    old.api_version,
                    ResponseError::RebalanceInProgress,
                    member_id,
                ),
            );
        }
        if state == GroupState::PreparingRebalance {
            self.maybe_complete_join(group_id, now_ms);
        } else {
            self.prepare_rebalance(group_id, now_ms);
        }
    }

    fn prepare_rebalance(&mut self, group_id: &str, now_ms: i64) {
        let initial_delay = self.config.initial_rebalance_delay_ms;
        let group = self.groups.get_mut(group_id).expect("group exists");
        let mut cancelled_syncs = Vec::new();
        if group.state == GroupState::CompletingRebalance {
            for member in group.members.values_mut() {
                member.assignment = Bytes::new();
                if let Some(p) = member.awaiting_sync.take() {
                    cancelled_syncs.push(p);
                }
            }
        }
        group.pending_sync.clear();
        let rebalance_timeout = group.rebalance_timeout_ms();
        let deadline = if group.state == GroupState::Empty {
            let delay = initial_delay.min(rebalance_timeout);
            group.initial_join = Some(InitialJoin {
                delay_ms: delay,
                remaining_ms: (rebalance_timeout - delay).max(0),
            });
            group.new_member_added = false;
            now_ms + delay
        } else {
            group.initial_join = None;
            now_ms + rebalance_timeout
        };
        group.transition(GroupState::PreparingRebalance, now_ms);
        for p in cancelled_syncs {
            self.respond(
                p.token,
                sync_error(p.api_version, ResponseError::RebalanceInProgress),
            );
        }
        self.cancel(group_id, TimerKind::Sync);
        self.schedule(group_id, TimerKind::Join, deadline);
        self.maybe_complete_join(group_id, now_ms);
    }

    fn maybe_complete_join(&mut self, group_id: &str, now_ms: i64) {
        let Some(group) = self.groups.get(group_id) else {
            return;
        };
        if group.state == GroupState::PreparingRebalance
            && group.initial_join.is_none()
            && group.all_members_joined()
        {
            self.complete_join(group_id, now_ms);
        }
    }

    fn complete_join(&mut self, group_id: &str, now_ms: i64) {
        self.cancel(group_id, TimerKind::Join);
        let group = self.groups.get_mut(group_id).expect("group exists");
        if group.state != GroupState::PreparingRebalance {
            return;
        }
        group.initial_join = None;
        // Dynamic members that did not rejoin in time are gone; static members keep their
        // place, since their instance id may come back (KIP-345).
        let laggards: Vec<String> = group
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in &laggards {
            self.remove_member(group_id, member_id, ResponseError::UnknownMemberId);
        }
        let group = self.groups.get_mut(group_id).expect("group exists");
        if !group.members.is_empty() && group.num_awaiting_join() == 0 {
            // Only absent static members are left: nobody could lead. Kafka waits another
            // round for their session timeouts to remove them.
            let wait = group.rebalance_timeout_ms();
            self.schedule(group_id, TimerKind::Join, now_ms + wait);
            return;
        }
        // The leader must be a member that rejoined (Kafka's maybeElectNewJoinedLeader): an
        // absent static leader would leave the group without an assignment.
        let leader_joined = group
            .leader_id
            .as_ref()
            .and_then(|l| group.members.get(l))
            .is_some_and(|m| m.awaiting_join.is_some());
        if !leader_joined {
            group.leader_id = group
                .members_in_join_order()
                .into_iter()
                .find(|m| m.awaiting_join.is_some())
                .map(|m| m.member_id.clone());
        }
        group.generation_id += 1;
        if group.members.is_empty() {
            group.protocol_name = None;
            group.leader_id = None;
            group.subscribed_topics = Some(HashSet::new());
            group.transition(GroupState::Empty, now_ms);
            self.write_group_metadata(group_id);
            return;
        }
        group.protocol_name = group.select_protocol();
        group.subscribed_topics = group.compute_subscribed_topics();
        if !group
            .leader_id
            .as_ref()
            .is_some_and(|l| group.members.contains_key(l))
        {
            group.leader_id = group.first_member_id();
        }
        group.transition(GroupState::CompletingRebalance, now_ms);
        group.pending_sync = group.members.keys().cloned().collect();
        let rebalance_timeout = group.rebalance_timeout_ms();
        let mut answers = Vec::new();
        for member in group.members.values() {
            if let Some(p) = member.awaiting_join {
                let is_leader = group.is_leader(&member.member_id);
                answers.push((
                    p.token,
                    join_success(group, p.api_version, &member.member_id, is_leader, false),
                ));
            }
        }
        let member_ids: Vec<String> = group.members.keys().cloned().collect();
        for member in group.members.values_mut() {
            member.awaiting_join = None;
            member.is_new = false;
        }
        for (token, response) in answers {
            self.respond(token, response);
        }
        for member_id in member_ids {
            self.schedule_heartbeat(group_id, &member_id, now_ms);
        }
        self.schedule(group_id, TimerKind::Sync, now_ms + rebalance_timeout);
    }

    /// Removes a member outright, answering any parked request of it with `error`.
    fn remove_member(&mut self, group_id: &str, member_id: &str, error: ResponseError) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        let Some(member) = group.members.remove(member_id) else {
            return;
        };
        if let Some(instance_id) = &member.group_instance_id {
            if group.static_members.get(instance_id).map(String::as_str) == Some(member_id) {
                group.static_members.remove(instance_id);
            }
        }
        group.pending_sync.remove(member_id);
        if group.leader_id.as_deref() == Some(member_id) {
            group.leader_id = group.first_member_id();
        }
        if let Some(p) = member.awaiting_join {
            self.respond(p.token, join_error(p.api_version, error, member_id));
        }
        if let Some(p) = member.awaiting_sync {
            self.respond(p.token, sync_error(p.api_version, error));
        }
        self.cancel(
            group_id,
            TimerKind::Heartbeat {
                member_id: member_id.to_owned(),
            },
        );
    }

    fn remove_member_and_update(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        self.remove_member(group_id, member_id, ResponseError::UnknownMemberId);
        let Some(group) = self.groups.get(group_id) else {
            return;
        };
        match group.state {
            GroupState::Dead | GroupState::Empty => {}
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(group_id, now_ms)
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(group_id, now_ms),
        }
    }

    // ---------------------------------------------------------------- SyncGroup

    fn sync_group(&mut self, ctx: &RequestContext, req: SyncGroupRequest, now_ms: i64) {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, sync_error(v, e));
        }
        let Some(group) = self.groups.get(&group_id) else {
            return self.respond(ctx.token, sync_error(v, ResponseError::UnknownMemberId));
        };
        let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
        if let Err(e) = validate_member(group, &member_id, instance_id.as_deref()) {
            return self.respond(ctx.token, sync_error(v, e));
        }
        if req.generation_id != group.generation_id {
            return self.respond(ctx.token, sync_error(v, ResponseError::IllegalGeneration));
        }
        let type_mismatch = req
            .protocol_type
            .as_ref()
            .is_some_and(|t| group.protocol_type.as_deref() != Some(t.as_str()));
        let name_mismatch = req
            .protocol_name
            .as_ref()
            .is_some_and(|n| group.protocol_name.as_deref() != Some(n.as_str()));
        if type_mismatch || name_mismatch {
            return self.respond(
                ctx.token,
                sync_error(v, ResponseError::InconsistentGroupProtocol),
            );
        }
        match group.state {
            GroupState::Empty | GroupState::Dead => {
                self.respond(ctx.token, sync_error(v, ResponseError::UnknownMemberId))
            }
            GroupState::PreparingRebalance => {
                self.respond(ctx.token, sync_error(v, ResponseError::RebalanceInProgress))
            }
            GroupState::Stable => {
                let response = sync_success(group, v, &group.members[&member_id].assignment);
                let group = self.groups.get_mut(&group_id).expect("group exists");
                group.pending_sync.remove(&member_id);
                if group.pending_sync.is_empty() {
                    self.cancel(&group_id, TimerKind::Sync);
                }
                self.schedule_heartbeat(&group_id, &member_id, now_ms);
                self.respond(ctx.token, response);
            }
            GroupState::CompletingRebalance => {
                let is_leader = group.is_leader(&member_id);
                let group = self.groups.get_mut(&group_id).expect("group exists");
                let member = group.members.get_mut(&member_id).expect("member exists");
                if let Some(old) = member.awaiting_sync.replace(Parked {
                    token: ctx.token,
                    api_version: v,
                }) {
                    self.respond(
                        old.token,
                        sync_error(old.api_version, ResponseError::RebalanceInProgress),
                    );
                }
                let group = self.groups.get_mut(&group_id).expect("group exists");
                group.pending_sync.remove(&member_id);
                if group.pending_sync.is_empty() {
                    self.cancel(&group_id, TimerKind::Sync);
                }
                if is_leader {
                    self.complete_sync(&group_id, &req, now_ms);
                }
            }
        }
    }

    /// The leader's SyncGroup: store every member's assignment (members the leader left out get
    /// an empty one), persist the group, move to Stable and answer every waiting member.
    fn complete_sync(&mut self, group_id: &str, req: &SyncGroupRequest, now_ms: i64) {
        let group = self.groups.get_mut(group_id).expect("group exists");
        let mut given: HashMap<&str, &Bytes> = HashMap::new();
        for a in &req.assignments {
            given.insert(a.member_id.as_str(), &a.assignment);
        }
        for member in group.members.values_mut() {
            member.assignment = given
                .get(member.member_id.as_str())
                .map(|b| (*b).clone())
                .unwrap_or_default();
        }
        group.transition(GroupState::Stable, now_ms);
        let mut answers = Vec::new();
        for member in group.members.values_mut() {
            if let Some(p) = member.awaiting_sync.take() {
                answers.push((p, member.member_id.clone(), member.assignment.clone()));
            }
        }
        self.write_group_metadata(group_id);
        let group = &self.groups[group_id];
        let mut responses = Vec::new();
        for (p, member_id, assignment) in answers {
            responses.push((
                p.token,
                sync_success(group, p.api_version, &assignment),
                member_id,
            ));
        }
        for (token, response, member_id) in responses {
            self.respond(token, response);
            self.schedule_heartbeat(group_id, &member_id, now_ms);
        }
    }

    // ---------------------------------------------------------------- Heartbeat

    fn heartbeat(&mut self, ctx: &RequestContext, req: HeartbeatRequest, now_ms: i64) {
        let reply = |e: ResponseError| {
            GroupResponse::Heartbeat(HeartbeatResponse::default().with_error_code(code(e)))
        };
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, reply(e));
        }
        let Some(group) = self.groups.get(&group_id) else {
            return self.respond(ctx.token, reply(ResponseError::UnknownMemberId));
        };
        let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
        if let Err(e) = validate_member(group, &member_id, instance_id.as_deref()) {
            return self.respond(ctx.token, reply(e));
        }
        if req.generation_id != group.generation_id {
            return self.respond(ctx.token, reply(ResponseError::IllegalGeneration));
        }
        let error = match group.state {
            GroupState::Empty | GroupState::Dead => {
                return self.respond(ctx.token, reply(ResponseError::UnknownMemberId))
            }
            GroupState::PreparingRebalance => Some(ResponseError::RebalanceInProgress),
            GroupState::CompletingRebalance | GroupState::Stable => None,
        };
        self.schedule_heartbeat(&group_id, &member_id, now_ms);
        let response = match error {
            Some(e) => reply(e),
            None => GroupResponse::Heartbeat(HeartbeatResponse::default()),
        };
        self.respond(ctx.token, response);
    }

    // ---------------------------------------------------------------- LeaveGroup

    fn leave_group(&mut self, ctx: &RequestContext, req: LeaveGroupRequest, now_ms: i64) {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let identities: Vec<MemberIdentity> = if v < 3 {
            vec![MemberIdentity::default().with_member_id(req.member_id.clone())]
        } else {
            req.members.clone()
        };
        let top_error = |e: ResponseError| {
            GroupResponse::LeaveGroup(LeaveGroupResponse::default().with_error_code(code(e)))
        };
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, top_error(e));
        }
        let mut results = Vec::new();
        for identity in &identities {
            let error = self.leave_one(&group_id, identity, now_ms);
            results.push((identity.clone(), error));
        }
        self.maybe_dispose(&group_id);
        let response = if v < 3 {
            let error = results.first().and_then(|(_, e)| *e);
            LeaveGroupResponse::default().with_error_code(error.map_or(0, code))
        } else {
            LeaveGroupResponse::default().with_members(
                results
                    .into_iter()
                    .map(|(identity, error)| {
                        MemberResponse::default()
                            .with_member_id(identity.member_id)
                            .with_group_instance_id(identity.group_instance_id)
                            .with_error_code(error.map_or(0, code))
                    })
                    .collect(),
            )
        };
        self.respond(ctx.token, GroupResponse::LeaveGroup(response));
    }

    fn leave_one(
        &mut self,
        group_id: &str,
        identity: &MemberIdentity,
        now_ms: i64,
    ) -> Option<ResponseError> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Some(ResponseError::UnknownMemberId);
        };
        let member_id = identity.member_id.to_string();
        let target = match &identity.group_instance_id {
            Some(instance_id) => match group.static_members.get(instance_id.as_str()) {
                None => return Some(ResponseError::UnknownMemberId),
                Some(existing) if !member_id.is_empty() && *existing != member_id => {
                    return Some(ResponseError::FencedInstanceId)
                }
                Some(existing) => existing.clone(),
            },
            None => {
                if group.pending_members.remove(&member_id) {
                    self.cancel(
                        group_id,
                        TimerKind::PendingMember {
                            member_id: member_id.clone(),
                        },
                    );
                    self.maybe_complete_join(group_id, now_ms);
                    return None;
                }
                if !group.members.contains_key(&member_id) {
                    return Some(ResponseError::UnknownMemberId);
                }
                member_id
            }
        };
        self.remove_member_and_update(group_id, &target, now_ms);
        None
    }

    // ---------------------------------------------------------------- OffsetCommit

    fn offset_commit(&mut self, ctx: &RequestContext, req: OffsetCommitRequest, now_ms: i64) {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        let instance_id = req.group_instance_id.as_ref().map(|s| s.to_string());
        let generation = req.generation_id_or_member_epoch;
        let all = |this: &mut Self, e: ResponseError| {
            this.respond(ctx.token, offset_commit_all(&req, Some(e)));
        };
        if let Err(e) = self.check_coordinator(&group_id) {
            return all(self, e);
        }
        if !self.groups.contains_key(&group_id) {
            if generation >= 0 {
                let e = if v >= 9 {
                    ResponseError::GroupIdNotFound
                } else {
                    ResponseError::IllegalGeneration
                };
                return all(self, e);
            }
            // A consumer without a group generation (assign() with a group id, admin tools)
            // commits to an empty "simple" group that the commit creates.
            let partition = self.partition_for(&group_id);
            self.groups.insert(
                group_id.clone(),
                Group::new(group_id.clone(), partition, now_ms),
            );
        }
        let group = &self.groups[&group_id];
        let simple = generation < 0 && group.state == GroupState::Empty;
        if !simple {
            if let Err(e) = validate_member(group, &member_id, instance_id.as_deref()) {
                return all(self, e);
            }
            if generation != group.generation_id {
                return all(self, ResponseError::IllegalGeneration);
            }
            if group.state == GroupState::CompletingRebalance {
                // The member has not received its new assignment; its commit may be for
                // partitions it no longer owns.
                return all(self, ResponseError::RebalanceInProgress);
            }
        }
        let expire_ms = if (2..=4).contains(&v) && req.retention_time_ms >= 0 {
            now_ms + req.retention_time_ms
        } else {
            -1
        };
        let partition = group.partition;
        let max_metadata = self.config.offset_metadata_max_bytes;
        let mut topics = Vec::new();
        let mut committed = Vec::new();
        for topic in &req.topics {
            let mut partitions = Vec::new();
            for p in &topic.partitions {
                let metadata = p
                    .committed_metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                let error = if metadata.len() > max_metadata {
                    code(ResponseError::OffsetMetadataTooLarge)
                } else {
                    committed.push((
                        topic.name.0.to_string(),
                        p.partition_index,
                        OffsetCommitValue {
                            committed_offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                            metadata,
                            commit_timestamp_ms: now_ms,
                            expire_timestamp_ms: expire_ms,
                        },
                    ));
                    0
                };
                partitions.push(
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error),
                );
            }
            topics.push(
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        for (topic, tp, value) in committed {
            let key = records::encode_offset_commit_key(&group_id, &topic, tp);
            let encoded = records::encode_offset_commit_value(&value);
            self.append(partition, key, Some(encoded));
            self.groups
                .get_mut(&group_id)
                .expect("group exists")
                .offsets
                .insert((topic, tp), value);
        }
        self.maybe_dispose(&group_id);
        self.respond(
            ctx.token,
            GroupResponse::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)),
        );
    }

    // ---------------------------------------------------------------- OffsetFetch

    fn offset_fetch(&mut self, ctx: &RequestContext, req: OffsetFetchRequest) {
        let v = ctx.api_version;
        // No transactional offsets exist here, so nothing is ever pending and require_stable
        // never has to answer UNSTABLE_OFFSET_COMMIT.
        if v >= 8 {
            let groups = req
                .groups
                .iter()
                .map(|g| {
                    let topics = g.topics.as_ref().map(|ts| {
                        ts.iter()
                            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                            .collect::<Vec<_>>()
                    });
                    match self.fetch_offsets(&g.group_id.0, topics.as_deref()) {
                        Ok(found) => OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_topics(
                                found
                                    .into_iter()
                                    .map(|(topic, parts)| {
                                        OffsetFetchResponseTopics::default()
                                            .with_name(TopicName(s(&topic)))
                                            .with_partitions(
                                                parts
                                                    .into_iter()
                                                    .map(|(p, o)| fetched_partitions(p, o))
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            ),
                        Err(e) => OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(code(e)),
                    }
                })
                .collect();
            return self.respond(
                ctx.token,
                GroupResponse::OffsetFetch(OffsetFetchResponse::default().with_groups(groups)),
            );
        }
        let topics = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                .collect::<Vec<_>>()
        });
        let response = match self.fetch_offsets(&req.group_id.0, topics.as_deref()) {
            Ok(found) => OffsetFetchResponse::default().with_topics(
                found
                    .into_iter()
                    .map(|(topic, parts)| {
                        OffsetFetchResponseTopic::default()
                            .with_name(TopicName(s(&topic)))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, o)| fetched_partition(p, o, v))
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
            Err(e) if v >= 2 => OffsetFetchResponse::default().with_error_code(code(e)),
            Err(e) => {
                // v0-1 have no top-level error: every requested partition carries it.
                OffsetFetchResponse::default().with_topics(
                    topics
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(topic, parts)| {
                            OffsetFetchResponseTopic::default()
                                .with_name(TopicName(s(&topic)))
                                .with_partitions(
                                    parts
                                        .into_iter()
                                        .map(|p| {
                                            OffsetFetchResponsePartition::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(-1)
                                                .with_error_code(code(e))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
            }
        };
        self.respond(ctx.token, GroupResponse::OffsetFetch(response));
    }

    /// Committed offsets of a group: for the requested partitions (missing ones as `None`), or
    /// every committed partition when `topics` is `None`. Grouped by topic in request order.
    #[allow(clippy::type_complexity)]
    fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<(String, Vec<(i32, Option<OffsetCommitValue>)>)>, ResponseError> {
        self.check_coordinator(group_id)?;
        let group = self.groups.get(group_id);
        match topics {
            Some(topics) => Ok(topics
                .iter()
                .map(|(topic, parts)| {
                    let found = parts
                        .iter()
                        .map(|p| {
                            let value = group
                                .and_then(|g| g.offsets.get(&(topic.clone(), *p)))
                                .cloned();
                            (*p, value)
                        })
                        .collect();
                    (topic.clone(), found)
                })
                .collect()),
            None => {
                let mut by_topic: Vec<(String, Vec<(i32, Option<OffsetCommitValue>)>)> = Vec::new();
                for ((topic, p), value) in group.map(|g| &g.offsets).into_iter().flatten() {
                    match by_topic.last_mut() {
                        Some((t, parts)) if t == topic => parts.push((*p, Some(value.clone()))),
                        _ => by_topic.push((topic.clone(), vec![(*p, Some(value.clone()))])),
                    }
                }
                Ok(by_topic)
            }
        }
    }

    // ---------------------------------------------------------------- admin views

    fn list_groups(&mut self, ctx: &RequestContext, req: ListGroupsRequest) {
        let v = ctx.api_version;
        let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
        let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
        let loading = self
            .partitions
            .values()
            .any(|s| *s == PartitionStatus::Loading);
        let mut listed: Vec<&Group> = self
            .groups
            .values()
            .filter(|g| self.partitions.get(&g.partition) == Some(&PartitionStatus::Active))
            .filter(|g| g.state != GroupState::Dead)
            .filter(|g| states.is_empty() || states.contains(&g.state.name().to_lowercase()))
            .filter(|_| types.is_empty() || types.iter().any(|t| t == "classic"))
            .collect();
        listed.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        let groups = listed
            .into_iter()
            .map(|g| {
                let mut listed = ListedGroup::default()
                    .with_group_id(GroupId(s(&g.group_id)))
                    .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or("")));
                if v >= 4 {
                    listed = listed.with_group_state(s(g.state.name()));
                }
                if v >= 5 {
                    listed = listed.with_group_type(s("classic"));
                }
                listed
            })
            .collect();
        let mut response = ListGroupsResponse::default().with_groups(groups);
        if loading {
            response = response.with_error_code(code(ResponseError::CoordinatorLoadInProgress));
        }
        self.respond(ctx.token, GroupResponse::ListGroups(response));
    }

    fn describe_groups(&mut self, ctx: &RequestContext, req: DescribeGroupsRequest) {
        let v = ctx.api_version;
        let described = req
            .groups
            .iter()
            .map(|gid| {
                let base = DescribedGroup::default().with_group_id(gid.clone());
                if let Err(e) = self.check_coordinator(gid) {
                    return base.with_error_code(code(e));
                }
                let Some(group) = self.groups.get(gid.as_str()) else {
                    let dead = base.with_group_state(s(GroupState::Dead.name()));
                    return if v >= 6 {
                        dead.with_error_code(code(ResponseError::GroupIdNotFound))
                            .with_error_message(Some(s(&format!(
                                "Group {} not found.",
                                gid.as_str()
                            ))))
                    } else {
                        dead
                    };
                };
                describe_group(group, v)
            })
            .collect();
        self.respond(
            ctx.token,
            GroupResponse::DescribeGroups(DescribeGroupsResponse::default().with_groups(described)),
        );
    }

    fn delete_groups(&mut self, ctx: &RequestContext, req: DeleteGroupsRequest) {
        let mut results = Vec::new();
        for gid in &req.groups_names {
            let error = self.delete_group(gid.as_str());
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(gid.clone())
                    .with_error_code(error.map_or(0, code)),
            );
        }
        self.respond(
            ctx.token,
            GroupResponse::DeleteGroups(DeleteGroupsResponse::default().with_results(results)),
        );
    }

    fn delete_group(&mut self, group_id: &str) -> Option<ResponseError> {
        if let Err(e) = self.check_coordinator(group_id) {
            return Some(e);
        }
        let Some(group) = self.groups.get(group_id) else {
            return Some(ResponseError::GroupIdNotFound);
        };
        match group.state {
            GroupState::Dead => return Some(ResponseError::GroupIdNotFound),
            GroupState::Empty => {}
            _ => return Some(ResponseError::NonEmptyGroup),
        }
        let group = self.groups.remove(group_id).expect("group exists");
        for (topic, tp) in group.offsets.keys() {
            self.append(
                group.partition,
                records::encode_offset_commit_key(group_id, topic, *tp),
                None,
            );
        }
        self.append(
            group.partition,
            records::encode_group_metadata_key(group_id),
            None,
        );
        self.cancel_group_timers(group_id);
        None
    }

    fn offset_delete(&mut self, ctx: &RequestContext, req: OffsetDeleteRequest) {
        let group_id = req.group_id.0.to_string();
        let top = |e: ResponseError| {
            GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code(e)))
        };
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, top(e));
        }
        let Some(group) = self.groups.get(&group_id) else {
            return self.respond(ctx.token, top(ResponseError::GroupIdNotFound));
        };
        let consumer = group.protocol_type.as_deref() == Some("consumer");
        if group.state == GroupState::Dead {
            return self.respond(ctx.token, top(ResponseError::GroupIdNotFound));
        }
        if !consumer && group.state != GroupState::Empty {
            return self.respond(ctx.token, top(ResponseError::NonEmptyGroup));
        }
        let partition = group.partition;
        let mut topics = Vec::new();
        let mut deletes = Vec::new();
        for topic in &req.topics {
            let name = topic.name.0.to_string();
            let subscribed = consumer && group.is_subscribed_to_topic(&name);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let error = if subscribed {
                        code(ResponseError::GroupSubscribedToTopic)
                    } else {
                        if group
                            .offsets
                            .contains_key(&(name.clone(), p.partition_index))
                        {
                            deletes.push((name.clone(), p.partition_index));
                        }
                        0
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                })
                .collect();
            topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        for (topic, tp) in deletes {
            self.delete_offset(partition, &group_id, topic, tp);
        }
        self.respond(
            ctx.token,
            GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_topics(topics)),
        );
    }

    // ---------------------------------------------------------------- retention

    /// Expires committed offsets past `offsets.retention.minutes` and removes groups left empty
    /// with no offsets, producing tombstones. Kafka's rules: offsets of an Empty group expire
    /// a retention period after the group became empty; offsets of a "simple" group (no
    /// protocol type) a retention period after their commit; a Stable consumer group only
    /// expires offsets of topics it does not subscribe to; an explicit per-commit expiry (v1
    /// records) wins.
    pub fn expire_offsets(&mut self, now_ms: i64) -> Outcome {
        let retention = self.config.offsets_retention_ms;
        let ids: Vec<String> = self
            .groups
            .values()
            .filter(|g| self.partitions.get(&g.partition) == Some(&PartitionStatus::Active))
            .map(|g| g.group_id.clone())
            .collect();
        for group_id in ids {
            let group = &self.groups[&group_id];
            let consumer_stable = group.protocol_type.as_deref() == Some("consumer")
                && group.state == GroupState::Stable
                && group.subscribed_topics.is_some();
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|((topic, _), value)| {
                    if value.expire_timestamp_ms >= 0 {
                        return now_ms >= value.expire_timestamp_ms;
                    }
                    let base = match (&group.protocol_type, group.state) {
                        (None, _) => Some(value.commit_timestamp_ms),
                        (Some(_), GroupState::Empty) => Some(group.state_timestamp_ms),
                        (Some(_), _) if consumer_stable && !group.is_subscribed_to_topic(topic) => {
                            Some(value.commit_timestamp_ms)
                        }
                        _ => None,
                    };
                    base.is_some_and(|b| now_ms - b >= retention)
                })
                .map(|(k, _)| k.clone())
                .collect();
            let partition = group.partition;
            for (topic, tp) in expired {
                self.delete_offset(partition, &group_id, topic, tp);
            }
            let group = &self.groups[&group_id];
            if group.state == GroupState::Empty
                && group.members.is_empty()
                && group.pending_members.is_empty()
                && group.offsets.is_empty()
            {
                self.append(
                    partition,
                    records::encode_group_metadata_key(&group_id),
                    None,
                );
                self.groups.remove(&group_id);
                self.cancel_group_timers(&group_id);
            }
        }
        std::mem::take(&mut self.out)
    }

    /// The state name of a group, for tests and logs.
    pub fn group_state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// Generation id of a group, for tests and logs.
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation_id)
    }
}

/// The pieces of a JoinGroup request the state machine keeps.
struct Join {
    parked: Parked,
    client_id: String,
    client_host: String,
    instance_id: Option<String>,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
}

/// Kafka's `validateMember`: a static member must present the member id its instance id
/// currently maps to (else it is a fenced zombie); a dynamic member must be known.
fn validate_member(
    group: &Group,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<(), ResponseError> {
    if let Some(instance_id) = instance_id {
        match group.static_members.get(instance_id) {
            None => return Err(ResponseError::UnknownMemberId),
            Some(existing) if existing != member_id => return Err(ResponseError::FencedInstanceId),
            Some(_) => {}
        }
    }
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(())
}

fn load_group_metadata(group: &mut Group, value: GroupMetadataValue) {
    group.protocol_type = if value.protocol_type.is_empty() {
        None
    } else {
        Some(value.protocol_type)
    };
    group.generation_id = value.generation;
    group.protocol_name = value.protocol;
    group.leader_id = value.leader;
    group.state_timestamp_ms = value.current_state_timestamp_ms;
    group.members.clear();
    group.static_members.clear();
    group.pending_members.clear();
    group.pending_sync.clear();
    group.initial_join = None;
    for (seq, m) in value.members.into_iter().enumerate() {
        if let Some(instance_id) = &m.group_instance_id {
            group
                .static_members
                .insert(instance_id.clone(), m.member_id.clone());
        }
        let protocols = match &group.protocol_name {
            Some(p) => vec![(p.clone(), m.subscription)],
            None => Vec::new(),
        };
        group.members.insert(
            m.member_id.clone(),
            Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                protocols,
                assignment: m.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                join_seq: seq as u64,
            },
        );
    }
    group.next_join_seq = group.members.len() as u64;
    group.state = if group.members.is_empty() {
        GroupState::Empty
    } else {
        GroupState::Stable
    };
    group.subscribed_topics = if group.members.is_empty() {
        Some(HashSet::new())
    } else {
        group.compute_subscribed_topics()
    };
}

fn join_error(v: i16, e: ResponseError, member_id: &str) -> GroupResponse {
    let mut r = JoinGroupResponse::default()
        .with_error_code(code(e))
        .with_member_id(s(member_id));
    if v >= 7 {
        r = r.with_protocol_name(None);
    }
    GroupResponse::JoinGroup(r)
}

fn join_success(
    group: &Group,
    v: i16,
    member_id: &str,
    with_members: bool,
    skip_assignment: bool,
) -> GroupResponse {
    let protocol = group.protocol_name.clone().unwrap_or_default();
    let members = if with_members {
        group
            .members_in_join_order()
            .into_iter()
            .map(|m| {
                let mut r = JoinGroupResponseMember::default()
                    .with_member_id(s(&m.member_id))
                    .with_metadata(m.metadata_for(&protocol));
                if v >= 5 {
                    r = r.with_group_instance_id(m.group_instance_id.as_deref().map(s));
                }
                r
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut r = JoinGroupResponse::default()
        .with_generation_id(group.generation_id)
        .with_protocol_name(Some(s(&protocol)))
        .with_leader(s(group.leader_id.as_deref().unwrap_or("")))
        .with_member_id(s(member_id))
        .with_members(members);
    if v >= 7 {
        r = r.with_protocol_type(group.protocol_type.as_deref().map(s));
    }
    if v >= 9 {
        r = r.with_skip_assignment(skip_assignment);
    }
    GroupResponse::JoinGroup(r)
}

fn sync_error(_v: i16, e: ResponseError) -> GroupResponse {
    // member_assignment is always present (empty, never null): franz-go and others read it
    // unconditionally.
    GroupResponse::SyncGroup(
        SyncGroupResponse::default()
            .with_error_code(code(e))
            .with_assignment(Bytes::new()),
    )
}

fn sync_success(group: &Group, v: i16, assignment: &Bytes) -> GroupResponse {
    let mut r = SyncGroupResponse::default().with_assignment(assignment.clone());
    if v >= 5 {
        r = r
            .with_protocol_type(group.protocol_type.as_deref().map(s))
            .with_protocol_name(group.protocol_name.as_deref().map(s));
    }
    GroupResponse::SyncGroup(r)
}

fn offset_commit_all(req: &OffsetCommitRequest, error: Option<ResponseError>) -> GroupResponse {
    let error = error.map_or(0, code);
    GroupResponse::OffsetCommit(
        OffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(error)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    )
}

fn fetched_partition(
    p: i32,
    value: Option<OffsetCommitValue>,
    v: i16,
) -> OffsetFetchResponsePartition {
    let r = OffsetFetchResponsePartition::default().with_partition_index(p);
    match value {
        Some(o) => {
            let r = r
                .with_committed_offset(o.committed_offset)
                .with_metadata(Some(s(&o.metadata)));
            if v >= 5 {
                r.with_committed_leader_epoch(o.leader_epoch)
            } else {
                r
            }
        }
        None => r.with_committed_offset(-1),
    }
}

fn fetched_partitions(p: i32, value: Option<OffsetCommitValue>) -> OffsetFetchResponsePartitions {
    let r = OffsetFetchResponsePartitions::default().with_partition_index(p);
    match value {
        Some(o) => r
            .with_committed_offset(o.committed_offset)
            .with_committed_leader_epoch(o.leader_epoch)
            .with_metadata(Some(s(&o.metadata))),
        None => r.with_committed_offset(-1),
    }
}

fn describe_group(group: &Group, v: i16) -> DescribedGroup {
    let stable = group.state == GroupState::Stable;
    let protocol = if stable {
        group.protocol_name.clone().unwrap_or_default()
    } else {
        String::new()
    };
    let members = group
        .members_in_join_order()
        .into_iter()
        .map(|m| {
            let mut r = DescribedGroupMember::default()
                .with_member_id(s(&m.member_id))
                .with_client_id(s(&m.client_id))
                .with_client_host(s(&m.client_host));
            if v >= 4 {
                r = r.with_group_instance_id(m.group_instance_id.as_deref().map(s));
            }
            if stable {
                r = r
                    .with_member_metadata(m.metadata_for(&protocol))
                    .with_member_assignment(m.assignment.clone());
            }
            r
        })
        .collect();
    DescribedGroup::default()
        .with_group_id(GroupId(s(&group.group_id)))
        .with_group_state(s(group.state.name()))
        .with_protocol_type(s(group.protocol_type.as_deref().unwrap_or("")))
        .with_protocol_data(s(&protocol))
        .with_members(members)
}

impl GroupResponse {
    /// The response as the codec's [`kafka_protocol::messages::ResponseKind`].
    pub fn into_response_kind(self) -> kafka_protocol::messages::ResponseKind {
        use kafka_protocol::messages::ResponseKind as K;
        match self {
            GroupResponse::JoinGroup(r) => K::JoinGroup(r),
            GroupResponse::SyncGroup(r) => K::SyncGroup(r),
            GroupResponse::Heartbeat(r) => K::Heartbeat(r),
            GroupResponse::LeaveGroup(r) => K::LeaveGroup(r),
            GroupResponse::OffsetCommit(r) => K::OffsetCommit(r),
            GroupResponse::OffsetFetch(r) => K::OffsetFetch(r),
            GroupResponse::ListGroups(r) => K::ListGroups(r),
            GroupResponse::DescribeGroups(r) => K::DescribeGroups(r),
            GroupResponse::DeleteGroups(r) => K::DeleteGroups(r),
            GroupResponse::OffsetDelete(r) => K::OffsetDelete(r),
        }
    }

    /// The API this response answers.
    pub fn api_key(&self) -> kafka_protocol::messages::ApiKey {
        use kafka_protocol::messages::ApiKey as A;
        match self {
            GroupResponse::JoinGroup(_) => A::JoinGroup,
            GroupResponse::SyncGroup(_) => A::SyncGroup,
            GroupResponse::Heartbeat(_) => A::Heartbeat,
            GroupResponse::LeaveGroup(_) => A::LeaveGroup,
            GroupResponse::OffsetCommit(_) => A::OffsetCommit,
            GroupResponse::OffsetFetch(_) => A::OffsetFetch,
            GroupResponse::ListGroups(_) => A::ListGroups,
            GroupResponse::DescribeGroups(_) => A::DescribeGroups,
            GroupResponse::DeleteGroups(_) => A::DeleteGroups,
            GroupResponse::OffsetDelete(_) => A::OffsetDelete,
        }
    }
}

impl GroupRequest {
    /// The API of this request.
    pub fn api_key(&self) -> kafka_protocol::messages::ApiKey {
        use kafka_protocol::messages::ApiKey as A;
        match self {
            GroupRequest::JoinGroup(_) => A::JoinGroup,
            GroupRequest::SyncGroup(_) => A::SyncGroup,
            GroupRequest::Heartbeat(_) => A::Heartbeat,
            GroupRequest::LeaveGroup(_) => A::LeaveGroup,
            GroupRequest::OffsetCommit(_) => A::OffsetCommit,
            GroupRequest::OffsetFetch(_) => A::OffsetFetch,
            GroupRequest::ListGroups(_) => A::ListGroups,
            GroupRequest::DescribeGroups(_) => A::DescribeGroups,
            GroupRequest::DeleteGroups(_) => A::DeleteGroups,
            GroupRequest::OffsetDelete(_) => A::OffsetDelete,
        }
    }
}

impl GroupResponse {
    /// The records behind this response could not be made durable: turn its successes into
    /// `error`, as Kafka does when a coordinator write fails.
    pub fn fail_writes(&mut self, error: ResponseError) {
        let c = code(error);
        match self {
            GroupResponse::JoinGroup(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::SyncGroup(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::LeaveGroup(r) if r.error_code == 0 => r.error_code = c,
            GroupResponse::OffsetCommit(r) => {
                for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    if p.error_code == 0 {
                        p.error_code = c;
                    }
                }
            }
            GroupResponse::DeleteGroups(r) => {
                for g in r.results.iter_mut().filter(|g| g.error_code == 0) {
                    g.error_code = c;
                }
            }
            GroupResponse::OffsetDelete(r) if r.error_code == 0 => r.error_code = c,
            _ => {}
        }
    }

    /// A response to `api` carrying only a top-level `error` (used when no answer can be had).
    pub fn error_only(api: kafka_protocol::messages::ApiKey, error: ResponseError) -> Self {
        use kafka_protocol::messages::ApiKey as A;
        let c = code(error);
        match api {
            A::JoinGroup => join_error(0, error, ""),
            A::SyncGroup => sync_error(0, error),
            A::LeaveGroup => {
                GroupResponse::LeaveGroup(LeaveGroupResponse::default().with_error_code(c))
            }
            A::OffsetCommit => GroupResponse::OffsetCommit(OffsetCommitResponse::default()),
            A::OffsetFetch => {
                GroupResponse::OffsetFetch(OffsetFetchResponse::default().with_error_code(c))
            }
            A::ListGroups => {
                GroupResponse::ListGroups(ListGroupsResponse::default().with_error_code(c))
            }
            A::DescribeGroups => GroupResponse::DescribeGroups(DescribeGroupsResponse::default()),
            A::DeleteGroups => GroupResponse::DeleteGroups(DeleteGroupsResponse::default()),
            A::OffsetDelete => {
                GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_error_code(c))
            }
            _ => GroupResponse::Heartbeat(HeartbeatResponse::default().with_error_code(c)),
        }
    }
}

#[cfg(test)]
pub(super) mod tests_support {
    pub fn parse_topics(bytes: &[u8]) -> Option<Vec<String>> {
        super::parse_subscription_topics(bytes)
    }
}
