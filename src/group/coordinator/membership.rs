//! Membership: JoinGroup (with the rebalance it starts and completes), SyncGroup, Heartbeat and
//! LeaveGroup, as Kafka's classic group protocol defines them.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    leave_group_request::MemberIdentity, leave_group_response::MemberResponse, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest,
};

use crate::metadata::MetadataImage;

use super::responses::{join_error, join_success, sync_error, sync_success};
use super::state::{Group, GroupState, InitialJoin, Member, Parked};
use super::{code, Coordinator, GroupResponse, RequestContext, TimerKind};

impl Coordinator {
    // ---------------------------------------------------------------- JoinGroup

    pub(super) fn join_group(
        &mut self,
        ctx: &RequestContext,
        req: JoinGroupRequest,
        image: &MetadataImage,
        now_ms: i64,
    ) {
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
        if self.group(&group_id).is_none() {
            if !member_id.is_empty() {
                return fail(self, ResponseError::UnknownMemberId);
            }
            let partition = self.partition_for(&group_id);
            self.insert_group(Group::new(group_id.clone(), partition, now_ms));
        }
        if let Some(c) = self.group(&group_id).and_then(|g| g.consumer.as_ref()) {
            if !c.members.is_empty() {
                // A classic member inside a consumer group (online migration), unless
                // `group.consumer.migration.policy` is `disabled`: then the group stays with
                // the protocol its members use, and the member gets INCONSISTENT_GROUP_PROTOCOL.
                // (Kafka's coordinator lets classic members into a consumer group whatever the
                // policy, which governs only conversions; `disabled` here keeps them out too,
                // so that neither kind of member meets the other.)
                if self.config.consumer_migration_policy == crate::config::MigrationPolicy::Disabled
                {
                    return fail(self, ResponseError::InconsistentGroupProtocol);
                }
                return self.classic_join_to_consumer_group(ctx, &req, image, now_ms);
            }
            // An empty consumer group becomes a classic one, as in Kafka.
            self.end_consumer_group(&group_id);
        }
        let group = self.group(&group_id).expect("group exists");
        if !self.accept_joining_member(group, &member_id) {
            // As Kafka: a known member refused for a full group leaves it, so the rebalance
            // under way completes without waiting for it; the answer carries no member id.
            self.remove_member(&group_id, &member_id, ResponseError::GroupMaxSizeReached);
            self.respond(
                ctx.token,
                join_error(v, ResponseError::GroupMaxSizeReached, ""),
            );
            if self
                .group(&group_id)
                .is_some_and(|g| g.state == GroupState::PreparingRebalance)
            {
                self.maybe_complete_join(&group_id, now_ms);
            }
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

    pub(super) fn accept_joining_member(&self, group: &Group, member_id: &str) -> bool {
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

    pub(super) fn join_unknown_member(&mut self, group_id: &str, join: Join, now_ms: i64) {
        let v = join.parked.api_version;
        if let Some(instance_id) = join.instance_id.clone() {
            let existing = self
                .group(group_id)
                .expect("group exists")
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
            let group = self.group_mut(group_id).expect("group exists");
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

    pub(super) fn join_existing_member(
        &mut self,
        group_id: &str,
        member_id: &str,
        join: Join,
        now_ms: i64,
    ) {
        let v = join.parked.api_version;
        let group = self.group(group_id).expect("group exists");
        if group.pending_members.contains(member_id) {
            let group = self.group_mut(group_id).expect("group exists");
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
    pub(super) fn rejoin_static_member(
        &mut self,
        group_id: &str,
        old_id: &str,
        new_id: String,
        join: Join,
        now_ms: i64,
    ) {
        let v = join.parked.api_version;
        let group = self.group_mut(group_id).expect("group exists");
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
        if group.pending_sync.remove(old_id).is_some() {
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
        let group = self.group(group_id).expect("group exists");
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

    pub(super) fn add_member_and_rebalance(
        &mut self,
        group_id: &str,
        member_id: String,
        join: Join,
        now_ms: i64,
    ) {
        let group = self.group_mut(group_id).expect("group exists");
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

    pub(super) fn update_member_and_rebalance(
        &mut self,
        group_id: &str,
        member_id: &str,
        join: Join,
        now_ms: i64,
    ) {
        let group = self.group_mut(group_id).expect("group exists");
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

    pub(super) fn prepare_rebalance(&mut self, group_id: &str, now_ms: i64) {
        let initial_delay = self.config.initial_rebalance_delay_ms;
        let group = self.group_mut(group_id).expect("group exists");
        let mut cancelled_syncs = Vec::new();
        if group.state == GroupState::CompletingRebalance {
            for member in group.members.iter_mut().map(|(_, m)| m) {
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

    pub(super) fn maybe_complete_join(&mut self, group_id: &str, now_ms: i64) {
        let Some(group) = self.group(group_id) else {
            return;
        };
        if group.state == GroupState::PreparingRebalance
            && group.initial_join.is_none()
            && group.all_members_joined()
        {
            self.complete_join(group_id, now_ms);
        }
    }

    pub(super) fn complete_join(&mut self, group_id: &str, now_ms: i64) {
        self.cancel(group_id, TimerKind::Join);
        let group = self.group_mut(group_id).expect("group exists");
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
        let group = self.group_mut(group_id).expect("group exists");
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
            group.subscribed_topics = Some(imbl::HashSet::new());
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
        for member in group.members.iter_mut().map(|(_, m)| m) {
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
    pub(super) fn remove_member(&mut self, group_id: &str, member_id: &str, error: ResponseError) {
        let Some(group) = self.group_mut(group_id) else {
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

    pub(super) fn remove_member_and_update(
        &mut self,
        group_id: &str,
        member_id: &str,
        now_ms: i64,
    ) {
        self.remove_member(group_id, member_id, ResponseError::UnknownMemberId);
        let Some(group) = self.group(group_id) else {
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

    pub(super) fn sync_group(&mut self, ctx: &RequestContext, req: SyncGroupRequest, now_ms: i64) {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, sync_error(v, e));
        }
        let Some(group) = self.group(&group_id) else {
            return self.respond(ctx.token, sync_error(v, ResponseError::UnknownMemberId));
        };
        if group.consumer.is_some() {
            return self.classic_sync_to_consumer_group(ctx, &req, now_ms);
        }
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
                let group = self.group_mut(&group_id).expect("group exists");
                group.pending_sync.remove(&member_id);
                if group.pending_sync.is_empty() {
                    self.cancel(&group_id, TimerKind::Sync);
                }
                self.schedule_heartbeat(&group_id, &member_id, now_ms);
                self.respond(ctx.token, response);
            }
            GroupState::CompletingRebalance => {
                let is_leader = group.is_leader(&member_id);
                let group = self.group_mut(&group_id).expect("group exists");
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
                let group = self.group_mut(&group_id).expect("group exists");
                group.pending_sync.remove(&member_id);
                let written = group.assignment_pending;
                if group.pending_sync.is_empty() {
                    self.cancel(&group_id, TimerKind::Sync);
                }
                if is_leader && !written {
                    self.complete_sync(&group_id, &req, now_ms);
                }
            }
        }
    }

    /// The leader's SyncGroup: store every member's assignment (members the leader left out get
    /// an empty one) and persist the group. The group stays CompletingRebalance, its members'
    /// SyncGroups parked, until the write is durable ([`Coordinator::settle_assignments`]).
    pub(super) fn complete_sync(&mut self, group_id: &str, req: &SyncGroupRequest, _now_ms: i64) {
        let group = self.group_mut(group_id).expect("group exists");
        let mut given: HashMap<&str, &Bytes> = HashMap::new();
        for a in &req.assignments {
            given.insert(a.member_id.as_str(), &a.assignment);
        }
        for member in group.members.iter_mut().map(|(_, m)| m) {
            member.assignment = given
                .get(member.member_id.as_str())
                .map(|b| (*b).clone())
                .unwrap_or_default();
        }
        group.assignment_pending = true;
        self.assignments_written.push(group_id.to_owned());
        self.write_group_metadata(group_id);
    }

    /// The writes of `partition` the high watermark covers are durable: every group whose
    /// leader's assignment is among them moves to Stable and answers its members' SyncGroups,
    /// as Kafka does in the append's callback. A group that left CompletingRebalance meanwhile
    /// (a member joined) is not touched: its members were answered REBALANCE_IN_PROGRESS.
    pub fn settle_assignments(&mut self, partition: i32, now_ms: i64) -> super::Outcome {
        self.start_operation();
        let settled: Vec<String> = self
            .groups_of(partition)
            .filter(|g| g.state == GroupState::CompletingRebalance && g.assignment_pending)
            .filter(|g| {
                self.durable_group(&g.group_id).is_some_and(|d| {
                    d.assignment_pending
                        && d.state == GroupState::CompletingRebalance
                        && d.generation_id == g.generation_id
                })
            })
            .map(|g| g.group_id.clone())
            .collect();
        for group_id in settled {
            self.stabilize(&group_id, now_ms);
        }
        self.finish_operation()
    }

    /// The writes of `partition` did not become durable within `offsets.commit.timeout.ms`. As
    /// Kafka fails such a write, every group still waiting for its assignment to be durable
    /// answers its parked SyncGroups COORDINATOR_NOT_AVAILABLE and rebalances. The write stays
    /// pending; if it lands later it settles nothing (the group has moved on).
    pub fn abandon_pending_assignments(&mut self, partition: i32, now_ms: i64) -> super::Outcome {
        let waiting: Vec<String> = self
            .groups_of(partition)
            .filter(|g| g.state == GroupState::CompletingRebalance && g.assignment_pending)
            .map(|g| g.group_id.clone())
            .collect();
        self.fail_assignments(&waiting, ResponseError::CoordinatorNotAvailable, now_ms)
    }

    /// Storing the assignment of each of `group_ids` failed: a group still completing its
    /// rebalance answers its parked SyncGroups with `error` and rebalances (Kafka's
    /// `resetAndPropagateAssignmentWithError` followed by a new rebalance).
    pub fn fail_assignments(
        &mut self,
        group_ids: &[String],
        error: ResponseError,
        now_ms: i64,
    ) -> super::Outcome {
        self.start_operation();
        for group_id in group_ids {
            if self.group(group_id).map(|g| g.state) != Some(GroupState::CompletingRebalance) {
                continue;
            }
            let group = self.group_mut(group_id).expect("group exists");
            let parked: Vec<Parked> = group
                .members
                .iter_mut()
                .filter_map(|(_, m)| m.awaiting_sync.take())
                .collect();
            for p in parked {
                self.respond(p.token, sync_error(p.api_version, error));
            }
            self.prepare_rebalance(group_id, now_ms);
        }
        self.finish_operation()
    }

    fn stabilize(&mut self, group_id: &str, now_ms: i64) {
        let group = self.group_mut(group_id).expect("group exists");
        group.transition(GroupState::Stable, now_ms);
        let mut answers = Vec::new();
        for member in group.members.iter_mut().map(|(_, m)| m) {
            if let Some(p) = member.awaiting_sync.take() {
                answers.push((p, member.member_id.clone(), member.assignment.clone()));
            }
        }
        let group = self.group(group_id).expect("group exists");
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

    pub(super) fn heartbeat(&mut self, ctx: &RequestContext, req: HeartbeatRequest, now_ms: i64) {
        let reply = |e: ResponseError| {
            GroupResponse::Heartbeat(HeartbeatResponse::default().with_error_code(code(e)))
        };
        let group_id = req.group_id.0.to_string();
        let member_id = req.member_id.to_string();
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, reply(e));
        }
        let Some(group) = self.group(&group_id) else {
            return self.respond(ctx.token, reply(ResponseError::UnknownMemberId));
        };
        if group.consumer.is_some() {
            return self.classic_heartbeat_to_consumer_group(ctx, &req, now_ms);
        }
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

    pub(super) fn leave_group(
        &mut self,
        ctx: &RequestContext,
        req: LeaveGroupRequest,
        now_ms: i64,
    ) {
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

    pub(super) fn leave_one(
        &mut self,
        group_id: &str,
        identity: &MemberIdentity,
        now_ms: i64,
    ) -> Option<ResponseError> {
        if self.group(group_id).is_some_and(|g| g.consumer.is_some()) {
            return self.classic_leave_from_consumer_group(group_id, identity, now_ms);
        }
        let Some(group) = self.group_mut(group_id) else {
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
                if group.pending_members.remove(&member_id).is_some() {
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
}

/// The pieces of a JoinGroup request the state machine keeps.
pub(super) struct Join {
    pub(super) parked: Parked,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) instance_id: Option<String>,
    pub(super) protocol_type: String,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) session_timeout_ms: i32,
    pub(super) rebalance_timeout_ms: i32,
}

/// Kafka's `validateMember`: a static member must present the member id its instance id
/// currently maps to (else it is a fenced zombie); a dynamic member must be known.
pub(super) fn validate_member(
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
