//! Group state: Kafka's classic group states, members and their protocols, and what the
//! coordinator keeps per group (generation, leader, assignments, committed offsets).

// Persistent collections: cloning a group (for a snapshot, see `shard`) shares them; a change
// copies only the path to what it touches.
use imbl::{HashMap, HashSet, OrdMap};

use bytes::Bytes;

use crate::group::records::{GroupMetadataValue, MemberMetadata, OffsetCommitValue};

use super::Token;

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
pub(super) struct Parked {
    pub(super) token: Token,
    pub(super) api_version: i16,
}

#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) member_id: String,
    pub(super) group_instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) rebalance_timeout_ms: i32,
    pub(super) session_timeout_ms: i32,
    /// (protocol name, metadata) in the member's order of preference.
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) awaiting_join: Option<Parked>,
    pub(super) awaiting_sync: Option<Parked>,
    /// Joined during the current rebalance and never completed one; such a member is held to
    /// the new-member join timeout instead of its session timeout.
    pub(super) is_new: bool,
    /// Join order: Kafka keeps members in insertion order, which picks the next leader and
    /// orders the member list the leader receives.
    pub(super) join_seq: u64,
}

impl Member {
    pub(super) fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    pub(super) fn same_protocols(&self, protocols: &[(String, Bytes)]) -> bool {
        self.protocols == protocols
    }
}

/// The initial-rebalance delay of a new group (Kafka's `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy)]
pub(super) struct InitialJoin {
    pub(super) delay_ms: i64,
    pub(super) remaining_ms: i64,
}

#[derive(Debug, Clone)]
pub(super) struct Group {
    pub(super) group_id: String,
    pub(super) partition: i32,
    pub(super) state: GroupState,
    pub(super) state_timestamp_ms: i64,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol_name: Option<String>,
    pub(super) generation_id: i32,
    pub(super) leader_id: Option<String>,
    pub(super) members: HashMap<String, Member>,
    pub(super) static_members: HashMap<String, String>,
    pub(super) pending_members: HashSet<String>,
    pub(super) pending_sync: HashSet<String>,
    pub(super) initial_join: Option<InitialJoin>,
    pub(super) new_member_added: bool,
    /// The leader's assignment is written and the group waits, in CompletingRebalance, for the
    /// write to become durable before it is Stable and the members get their assignments
    /// (Kafka moves to Stable in the append's callback). A join meanwhile starts a new
    /// rebalance and the waiting SyncGroups get REBALANCE_IN_PROGRESS, as in Kafka.
    pub(super) assignment_pending: bool,
    /// Topics the members subscribe to, when the protocol is "consumer" and every
    /// subscription parsed; `None` means unknown (treated as subscribed to everything).
    pub(super) subscribed_topics: Option<HashSet<String>>,
    pub(super) offsets: OrdMap<(String, i32), StoredOffset>,
    /// Offsets committed inside transactions not yet ended, by producer id (Kafka's
    /// `pendingTransactionalOffsets`): they take effect when the transaction's COMMIT marker
    /// reaches this partition and are dropped by its ABORT. A producer stays listed (the
    /// group has an open transaction) even once tombstones took all its offsets.
    pub(super) pending_txn_offsets: OrdMap<i64, OrdMap<(String, i32), StoredOffset>>,
    pub(super) next_join_seq: u64,
    /// A KIP-848 consumer group's state; `None` for a classic group. A consumer group has no
    /// classic members and protocol type.
    pub(super) consumer: Option<super::consumer::ConsumerGroup>,
}

/// An offset commit as the group keeps it: its value, and its record's place in the
/// partition's log relative to the group's other offset records (Kafka keeps the record
/// offset). A transaction's offset takes effect at its commit only over an offset whose
/// record came before its own.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct StoredOffset {
    pub(super) value: OffsetCommitValue,
    pub(super) record_order: u64,
}

impl Group {
    /// The transaction of `producer_id` ended on this partition: its pending offsets take
    /// effect (`commit`), each unless the group's offset for that partition was written
    /// after it (a plain OffsetCommit after the TxnOffsetCommit, or another transaction's
    /// later offset committed first), or are dropped.
    pub(super) fn complete_transaction(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending_txn_offsets.remove(&producer_id) else {
            return;
        };
        if !commit {
            return;
        }
        for (tp, offset) in pending {
            if self
                .offsets
                .get(&tp)
                .is_none_or(|c| c.record_order < offset.record_order)
            {
                self.offsets.insert(tp, offset);
            }
        }
    }

    /// A tombstone for `tp` (OffsetDelete, expiry, DeleteGroups): the committed offset goes,
    /// and so does every open transaction's offset for it, as in Kafka.
    pub(super) fn remove_offset(&mut self, tp: &(String, i32)) {
        self.offsets.remove(tp);
        let producers: Vec<i64> = self
            .pending_txn_offsets
            .iter()
            .filter(|(_, o)| o.contains_key(tp))
            .map(|(p, _)| *p)
            .collect();
        for p in producers {
            if let Some(offsets) = self.pending_txn_offsets.get_mut(&p) {
                offsets.remove(tp);
            }
        }
    }

    /// Whether a transaction not yet ended committed an offset for `tp`.
    pub(super) fn has_pending_txn_offset(&self, tp: &(String, i32)) -> bool {
        self.pending_txn_offsets
            .values()
            .any(|offsets| offsets.contains_key(tp))
    }

    pub(super) fn new(group_id: String, partition: i32, now_ms: i64) -> Self {
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
            assignment_pending: false,
            subscribed_topics: Some(HashSet::new()),
            offsets: OrdMap::new(),
            pending_txn_offsets: OrdMap::new(),
            next_join_seq: 0,
            consumer: None,
        }
    }

    pub(super) fn transition(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.assignment_pending = false;
        self.state_timestamp_ms = now_ms;
    }

    pub(super) fn members_in_join_order(&self) -> Vec<&Member> {
        let mut members: Vec<&Member> = self.members.values().collect();
        members.sort_by_key(|m| m.join_seq);
        members
    }

    pub(super) fn first_member_id(&self) -> Option<String> {
        self.members
            .values()
            .min_by_key(|m| m.join_seq)
            .map(|m| m.member_id.clone())
    }

    pub(super) fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    pub(super) fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    pub(super) fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    pub(super) fn num_awaiting_join(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    /// Protocol names every member supports, in the first member's order of preference.
    pub(super) fn candidate_protocols(&self) -> Vec<String> {
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
    pub(super) fn select_protocol(&self) -> Option<String> {
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

    pub(super) fn supports_protocols(
        &self,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
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

    pub(super) fn compute_subscribed_topics(&self) -> Option<HashSet<String>> {
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

    pub(super) fn is_subscribed_to_topic(&self, topic: &str) -> bool {
        if let Some(c) = &self.consumer {
            // The topics its members subscribe to, by name or regex, as last resolved.
            return c.subscription.contains_key(topic);
        }
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => true,
        }
    }

    pub(super) fn metadata_value(&self) -> GroupMetadataValue {
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
    pub(super) fn is_disposable(&self) -> bool {
        self.state == GroupState::Empty
            && self.members.is_empty()
            && self.pending_members.is_empty()
            && self.offsets.is_empty()
            && self.pending_txn_offsets.is_empty()
            && self.generation_id == 0
            && self.protocol_type.is_none()
            && self.consumer.is_none()
    }

    /// The state ListGroups and DescribeGroups report: a consumer group's own states.
    pub(super) fn state_name(&self) -> &'static str {
        match &self.consumer {
            Some(c) => c.state_name(),
            None => self.state.name(),
        }
    }

    /// `classic` or `consumer` (ListGroups v5 group types).
    pub(super) fn type_name(&self) -> &'static str {
        if self.consumer.is_some() {
            "consumer"
        } else {
            "classic"
        }
    }
}

/// Topics of a `ConsumerProtocolSubscription` (every version starts with the topic array).
/// Parsed by hand, with every length checked against the bytes present, because the bytes come
/// from clients and the generated decoder sizes allocations from wire lengths.
pub(super) fn parse_subscription_topics(bytes: &[u8]) -> Option<Vec<String>> {
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
