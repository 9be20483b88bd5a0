//! Both protocols on one group (KIP-848's online migration), as Kafka's `GroupMetadataManager`
//! does it under `group.consumer.migration.policy`:
//!
//! - **Upgrade.** A ConsumerGroupHeartbeat that joins a classic group with members (protocol
//!   type "consumer") converts it: each classic member becomes a consumer-group member at the
//!   generation as its epoch, holding the partitions of its last assignment, which is also the
//!   target. Parked JoinGroup and SyncGroup requests get REBALANCE_IN_PROGRESS. The classic
//!   group's record is tombstoned and the consumer group's records written.
//! - **Classic members inside a consumer group.** JoinGroup, SyncGroup, Heartbeat and
//!   LeaveGroup of a member of the classic protocol are served by the consumer group: the
//!   broker computes its assignment (the member is never the leader) and reconciles it as for
//!   any member, its owned partitions taken from the subscription it joins with. Its Heartbeat
//!   answers REBALANCE_IN_PROGRESS when it has to rejoin: the group epoch moved past it, it
//!   has partitions to give up, or partitions it waits for became free. A classic member that
//!   does not rejoin or sync within its rebalance timeout, or stops heartbeating within its
//!   session timeout, is fenced.
//! - **Downgrade.** When the last member of the consumer protocol leaves (or is fenced) and
//!   classic members remain, the group converts back: a classic group at the group epoch whose
//!   members hold their target assignments, and a rebalance starts.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    leave_group_request::MemberIdentity, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use uuid::Uuid;

use crate::group::consumer_protocol::{self as cp, TopicPartitions};
use crate::group::consumer_records::{self as cr, Assignment, ClassicMemberMetadata};
use crate::group::records;
use crate::metadata::MetadataImage;

use super::consumer::{self, ConsumerGroup, ConsumerMember, MemberState};
use super::responses::{join_error, sync_error};
use super::state::{GroupState, Member};
use super::{code, s, Coordinator, GroupResponse, RequestContext, TimerKind};

/// The embedded protocol type of consumers.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

fn to_ids(parts: &TopicPartitions, image: &MetadataImage) -> Assignment {
    let mut a = Assignment::new();
    for (topic, ps) in parts {
        if let Some(t) = image.topic(topic) {
            a.entry(t.id).or_default().extend(ps.iter().copied());
        }
    }
    a
}

/// Names the topics of `a` from the group's subscription (every assigned topic is
/// subscribed); a topic no longer known is left out, as Kafka leaves out topics missing from
/// its image.
fn to_names(a: &Assignment, group: &ConsumerGroup) -> TopicPartitions {
    let names: BTreeMap<Uuid, &str> = group
        .subscription
        .values()
        .map(|t| (t.topic_id, t.topic_name.as_str()))
        .collect();
    a.iter()
        .filter_map(|(t, ps)| {
            names
                .get(t)
                .map(|n| (n.to_string(), ps.iter().copied().collect()))
        })
        .collect()
}

/// The assignment bytes a classic member gets, in the version of its subscription.
fn classic_assignment(member: &ConsumerMember, a: &Assignment, group: &ConsumerGroup) -> Bytes {
    let version = member
        .meta
        .classic
        .as_ref()
        .and_then(|c| c.protocols.first())
        .and_then(|(_, m)| cp::version(m).ok())
        .unwrap_or(0);
    cp::encode_assignment(version, &to_names(a, group))
}

fn classic_protocol_name(member: &ConsumerMember) -> String {
    member
        .meta
        .classic
        .as_ref()
        .and_then(|c| c.protocols.first())
        .map(|(n, _)| n.clone())
        .unwrap_or_default()
}

type Refusal = (ResponseError, Option<String>);

impl Coordinator {
    // ------------------------------------------------------------------ upgrade

    /// Converts the classic group `group_id` (with members) into a consumer group for a
    /// ConsumerGroupHeartbeat that joins it, or says why it cannot (Kafka's
    /// `validateOnlineUpgrade`: GROUP_ID_NOT_FOUND, the group is not a consumer group).
    pub(super) fn upgrade_to_consumer_group(
        &mut self,
        group_id: &str,
        joining_instance: Option<&str>,
        image: &MetadataImage,
        now_ms: i64,
    ) -> Result<ConsumerGroup, Refusal> {
        let not_consumer = |why: &str| {
            Err((
                ResponseError::GroupIdNotFound,
                Some(format!("Group {group_id} is not a consumer group: {why}.")),
            ))
        };
        if !self.config.consumer_migration_policy.upgrade_enabled() {
            return not_consumer("the online upgrade is disabled");
        }
        let group = self.group(group_id).expect("caller checked");
        if group.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return not_consumer("it does not use the consumer embedded protocol");
        }
        if group.members.len() > self.config.consumer_max_size {
            return not_consumer("its size exceeds group.consumer.max.size");
        }
        // The joining member must fit too (unless it takes a static member's place): refused
        // here, before anything is converted, so a refused heartbeat changes nothing (Kafka
        // drops the records of the refused operation, the conversion's among them).
        let replaces_static =
            joining_instance.is_some_and(|i| group.static_members.contains_key(i));
        if !replaces_static && group.members.len() >= self.config.consumer_max_size {
            let max = self.config.consumer_max_size;
            return Err((
                ResponseError::GroupMaxSizeReached,
                Some(format!(
                    "The consumer group has reached its maximum capacity of {max} members."
                )),
            ));
        }
        // What each member holds: while the leader's assignment of a rebalance is not yet
        // durable no member has received it, so they hold the durable (previous) one (Kafka
        // sets assignments only once their write completes).
        let held: std::collections::HashMap<String, Bytes> = if group.assignment_pending {
            self.durable_group(group_id)
                .map(|d| {
                    d.members
                        .iter()
                        .map(|(id, m)| (id.clone(), m.assignment.clone()))
                        .collect()
                })
                .unwrap_or_default()
        } else {
            group
                .members
                .iter()
                .map(|(id, m)| (id.clone(), m.assignment.clone()))
                .collect()
        };
        // Every member's subscription and last assignment, or no conversion.
        let mut converted = ConsumerGroup {
            group_epoch: group.generation_id,
            assignment_epoch: group.generation_id,
            ..Default::default()
        };
        for m in group.members.values() {
            let protocol = group
                .protocol_name
                .clone()
                .or_else(|| m.protocols.first().map(|(n, _)| n.clone()))
                .unwrap_or_default();
            let (Ok(sub), Ok(assignment)) = (
                cp::parse_subscription(&m.metadata_for(&protocol)),
                cp::parse_assignment(held.get(&m.member_id).map_or(&[][..], |b| &b[..])),
            ) else {
                return not_consumer("its embedded consumer protocol is malformed");
            };
            let assigned = to_ids(&assignment, image);
            let mut topics = sub.topics.clone();
            topics.sort();
            topics.dedup();
            let member = ConsumerMember {
                member_id: m.member_id.clone(),
                meta: cr::MemberMetadataValue {
                    instance_id: m.group_instance_id.clone(),
                    rack_id: sub.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: topics,
                    subscribed_topic_regex: None,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: None,
                    classic: Some(ClassicMemberMetadata {
                        session_timeout_ms: m.session_timeout_ms,
                        protocols: m.protocols.clone(),
                    }),
                },
                member_epoch: group.generation_id,
                previous_member_epoch: group.generation_id,
                state: MemberState::Stable,
                assigned: assigned.clone(),
                pending_revocation: Assignment::new(),
            };
            converted.target.insert(m.member_id.clone(), assigned);
            converted.put_member(member);
        }
        converted.subscription = consumer::resolve_subscription(
            converted.members.values(),
            image,
            &converted.rights,
            &converted.subscription,
        );

        // The classic group ends: parked requests are told to rejoin, its timers stop.
        let group = self.group_mut(group_id).expect("caller checked");
        let mut parked = Vec::new();
        for m in group.members.iter_mut().map(|(_, m)| m) {
            if let Some(p) = m.awaiting_join.take() {
                parked.push((
                    p.token,
                    join_error(
                        p.api_version,
                        ResponseError::RebalanceInProgress,
                        &m.member_id,
                    ),
                ));
            }
            if let Some(p) = m.awaiting_sync.take() {
                parked.push((
                    p.token,
                    sync_error(p.api_version, ResponseError::RebalanceInProgress),
                ));
            }
        }
        for (token, response) in parked {
            self.respond(token, response);
        }
        self.cancel_group_timers(group_id);
        let partition = self.shard_of(group_id);
        self.append(
            partition,
            records::encode_group_metadata_key(group_id),
            None,
        );
        let group = self.group_mut(group_id).expect("caller checked");
        group.members.clear();
        group.static_members.clear();
        group.pending_members.clear();
        group.pending_sync.clear();
        group.initial_join = None;
        group.assignment_pending = false;
        group.subscribed_topics = None;
        group.state = GroupState::Empty;
        group.become_consumer_group();

        // Kafka's `createConsumerGroupRecords`.
        for m in converted.members.values() {
            self.write_consumer_member(partition, group_id, m);
        }
        self.write_subscription(partition, group_id, &converted.subscription);
        self.write_group_epoch(partition, group_id, converted.group_epoch);
        for (member, a) in converted.target.iter() {
            self.append(
                partition,
                cr::target_assignment_member_key(group_id, member),
                Some(cr::encode_target_assignment_member_value(a)),
            );
        }
        self.append(
            partition,
            cr::target_assignment_metadata_key(group_id),
            Some(cr::encode_target_assignment_metadata_value(
                converted.assignment_epoch,
            )),
        );
        for m in converted.members.values() {
            self.write_current_assignment(partition, group_id, m);
            self.schedule_consumer_session(group_id, m, now_ms);
        }
        tracing::info!(
            group = group_id,
            members = converted.members.len(),
            generation = converted.group_epoch,
            "classic group upgraded to a consumer group"
        );
        Ok(converted)
    }

    /// A member's session timer: the classic session timeout for a classic member.
    pub(super) fn schedule_consumer_session(
        &mut self,
        group_id: &str,
        member: &ConsumerMember,
        now_ms: i64,
    ) {
        let timeout = member
            .meta
            .classic
            .as_ref()
            .map_or(self.config.consumer_session_timeout_ms, |c| {
                c.session_timeout_ms
            });
        self.schedule(
            group_id,
            TimerKind::ConsumerSession {
                member_id: member.member_id.clone(),
            },
            now_ms + i64::from(timeout),
        );
    }

    // ------------------------------------------------------------------ classic members

    /// JoinGroup of a classic member to a consumer group with members (Kafka's
    /// `classicGroupJoinToConsumerGroup`). Answered at once: the broker assigns.
    pub(super) fn classic_join_to_consumer_group(
        &mut self,
        ctx: &RequestContext,
        req: &JoinGroupRequest,
        image: &MetadataImage,
        now_ms: i64,
    ) {
        let v = ctx.api_version;
        match self.classic_join_inner(ctx, req, image, now_ms) {
            Ok(response) => self.respond(ctx.token, GroupResponse::JoinGroup(response)),
            Err((e, member_id)) => self.respond(ctx.token, join_error(v, e, &member_id)),
        }
    }

    fn classic_join_inner(
        &mut self,
        ctx: &RequestContext,
        req: &JoinGroupRequest,
        image: &MetadataImage,
        now_ms: i64,
    ) -> Result<JoinGroupResponse, (ResponseError, String)> {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let partition = self.shard_of(&group_id);
        let mut group = self
            .group(&group_id)
            .and_then(|g| g.consumer.clone())
            .expect("caller checked");
        let instance_id = req.group_instance_id.as_ref().map(|i| i.to_string());
        let unknown = req.member_id.is_empty();
        let member_id = if unknown {
            self.new_member_id(&ctx.client_id)
        } else {
            req.member_id.to_string()
        };
        let fail = |e: ResponseError| Err((e, req.member_id.to_string()));

        let existing_static = instance_id.as_deref().and_then(|i| {
            group
                .members
                .values()
                .find(|m| m.meta.instance_id.as_deref() == Some(i))
                .map(|m| m.member_id.clone())
        });
        if !group.members.contains_key(&member_id)
            && existing_static.is_none()
            && group.members.len() >= self.config.consumer_max_size
        {
            return fail(ResponseError::GroupMaxSizeReached);
        }
        // Kafka's `supportsClassicProtocols`: the consumer protocol type, and a protocol every
        // classic member supports.
        let classic: Vec<&ConsumerMember> = group
            .members
            .values()
            .filter(|m| m.meta.classic.is_some())
            .collect();
        let protocols: Vec<(String, Bytes)> = req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        let supported = req.protocol_type.as_str() == CONSUMER_PROTOCOL_TYPE
            && !protocols.is_empty()
            && (classic.is_empty()
                || protocols.iter().any(|(name, _)| {
                    classic.iter().all(|m| {
                        m.meta
                            .classic
                            .as_ref()
                            .is_some_and(|c| c.protocols.iter().any(|(n, _)| n == name))
                    })
                }));
        if !supported {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        if v >= 4 && unknown && instance_id.is_none() {
            // A dynamic member first learns its id (KIP-394).
            return Err((ResponseError::MemberIdRequired, member_id));
        }
        // Every protocol carries the same subscription; the first is read. Malformed bytes are
        // refused as an inconsistent protocol (Kafka fails the request with an internal error).
        let Ok(sub) = cp::parse_subscription(&protocols[0].1) else {
            return fail(ResponseError::InconsistentGroupProtocol);
        };

        // The member: known, new, or a static member rejoining under a new id (not new: it
        // takes the old member's place, and only a changed subscription is a rebalance).
        let replaced = matches!((&existing_static, unknown), (Some(_), true));
        let replaced_consumer_member = replaced
            && existing_static
                .as_ref()
                .and_then(|old| group.members.get(old))
                .is_some_and(|m| m.meta.classic.is_none());
        let is_new = !replaced && !group.members.contains_key(&member_id);
        let mut member = match (&existing_static, unknown) {
            (Some(old), true) => {
                let mut replacement = group.members.get(old).cloned().expect("static member");
                replacement.member_id = member_id.clone();
                replacement.member_epoch = 0;
                replacement.previous_member_epoch = 0;
                self.replace_static_member(partition, &group_id, &mut group, old, &replacement);
                replacement
            }
            (Some(old), false) if *old != member_id => {
                return fail(ResponseError::FencedInstanceId);
            }
            (None, false) if instance_id.is_some() => {
                return fail(ResponseError::UnknownMemberId);
            }
            _ => group
                .members
                .get(&member_id)
                .cloned()
                .unwrap_or_else(|| ConsumerMember {
                    member_id: member_id.clone(),
                    ..Default::default()
                }),
        };
        if !replaced && member.meta.classic.is_none() && group.members.contains_key(&member_id) {
            // A member of the consumer protocol cannot send JoinGroup.
            return fail(ResponseError::UnknownMemberId);
        }

        // 1. The member and its subscription; a change bumps the group epoch.
        let before = member.meta.clone();
        let mut topics = sub.topics.clone();
        topics.sort();
        topics.dedup();
        let meta = &mut member.meta;
        meta.instance_id = instance_id.clone();
        if sub.rack_id.is_some() {
            meta.rack_id = sub.rack_id.clone();
        }
        meta.rebalance_timeout_ms = if v == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        };
        meta.subscribed_topic_names = topics;
        meta.subscribed_topic_regex = None;
        meta.client_id = ctx.client_id.clone();
        meta.client_host = ctx.client_host.clone();
        meta.classic = Some(ClassicMemberMetadata {
            session_timeout_ms: req.session_timeout_ms,
            protocols,
        });
        let mut bump =
            is_new || before.subscribed_topic_names != member.meta.subscribed_topic_names;
        if is_new || before != member.meta {
            self.write_consumer_member(partition, &group_id, &member);
        }
        group.put_member(member.clone());
        let subscription = consumer::resolve_subscription(
            group.members.values(),
            image,
            &group.rights,
            &group.subscription,
        );
        if subscription != group.subscription {
            self.write_subscription(partition, &group_id, &subscription);
            group.subscription = subscription;
            bump = true;
        }
        if bump {
            group.bump_epoch(now_ms);
            self.write_group_epoch(partition, &group_id, group.group_epoch);
        }

        // 2. The target assignment; 3. one reconciliation step, with what the member says it
        // owns (an eager member gave everything up before rejoining).
        if group.group_epoch > group.assignment_epoch {
            self.update_target_assignment(partition, &group_id, &mut group);
        }
        let target = group.target.get(&member_id).cloned().unwrap_or_default();
        let owned = to_ids(&sub.owned_partitions, image);
        let owners = group.owners.clone();
        let reconciled = if member.is_reconciled_to(group.assignment_epoch) {
            member.clone()
        } else {
            consumer::reconcile(
                &member,
                group.assignment_epoch,
                &target,
                Some(&owned),
                |t, p| owners.get(&(*t, p)).copied(),
            )
        };
        if reconciled != member || is_new {
            self.write_current_assignment(partition, &group_id, &reconciled);
        }
        group.put_member(reconciled.clone());
        group.note_progress(now_ms);

        // 4. A classic static member that replaced the last member of the consumer protocol
        // converts the group back, keeping the assignment, without a rebalance (Kafka's
        // `validateOnlineDowngradeWithReplacedMemberId`).
        if replaced_consumer_member && self.downgrade_allowed(&group, None) {
            let generation = group.group_epoch;
            self.downgrade_to_classic_group(&group_id, &group, None, now_ms);
            let mut response = JoinGroupResponse::default()
                .with_generation_id(generation)
                .with_protocol_name(Some(s(&classic_protocol_name(&reconciled))))
                .with_member_id(s(&member_id));
            if v >= 7 {
                response = response.with_protocol_type(Some(s(CONSUMER_PROTOCOL_TYPE)));
            }
            return Ok(response);
        }
        self.store_consumer_group(&group_id, group);

        // It has its session again, and its rebalance timeout to sync.
        self.schedule_consumer_session(&group_id, &reconciled, now_ms);
        self.schedule(
            &group_id,
            TimerKind::ClassicMemberDeadline {
                member_id: member_id.clone(),
            },
            now_ms + i64::from(reconciled.meta.rebalance_timeout_ms.max(0)),
        );
        let mut response = JoinGroupResponse::default()
            .with_generation_id(reconciled.member_epoch)
            .with_protocol_name(Some(s(&classic_protocol_name(&reconciled))))
            .with_member_id(s(&member_id));
        if v >= 7 {
            response = response.with_protocol_type(Some(s(CONSUMER_PROTOCOL_TYPE)));
        }
        Ok(response)
    }

    /// The member `member_id` (or with `instance_id`) of a consumer group, if it speaks the
    /// classic protocol (Kafka's `validateConsumerGroupMember` and
    /// `throwIfMemberDoesNotUseClassicProtocol`).
    fn classic_member(
        group: &ConsumerGroup,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<ConsumerMember, ResponseError> {
        let member = match instance_id {
            Some(i) => {
                let m = group
                    .members
                    .values()
                    .find(|m| m.meta.instance_id.as_deref() == Some(i))
                    .ok_or(ResponseError::UnknownMemberId)?;
                if m.member_id != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
                m
            }
            None => group
                .members
                .get(member_id)
                .ok_or(ResponseError::UnknownMemberId)?,
        };
        if member.meta.classic.is_none() {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(member.clone())
    }

    /// SyncGroup of a classic member of a consumer group: its current assignment.
    pub(super) fn classic_sync_to_consumer_group(
        &mut self,
        ctx: &RequestContext,
        req: &SyncGroupRequest,
        now_ms: i64,
    ) {
        let v = ctx.api_version;
        let group_id = req.group_id.0.to_string();
        let group = self
            .group(&group_id)
            .and_then(|g| g.consumer.clone())
            .expect("caller checked");
        let instance_id = req.group_instance_id.as_ref().map(|i| i.to_string());
        let member =
            match Self::classic_member(&group, req.member_id.as_str(), instance_id.as_deref()) {
                Ok(m) => m,
                Err(e) => return self.respond(ctx.token, sync_error(v, e)),
            };
        if req.generation_id != member.member_epoch {
            return self.respond(ctx.token, sync_error(v, ResponseError::IllegalGeneration));
        }
        let protocol = classic_protocol_name(&member);
        if req
            .protocol_type
            .as_ref()
            .is_some_and(|t| t.as_str() != CONSUMER_PROTOCOL_TYPE)
            || req
                .protocol_name
                .as_ref()
                .is_some_and(|n| n.as_str() != protocol)
        {
            return self.respond(
                ctx.token,
                sync_error(v, ResponseError::InconsistentGroupProtocol),
            );
        }
        if let Err(e) = self.rejoin_needed_after_join(&group_id, &group, &member, now_ms) {
            return self.respond(ctx.token, sync_error(v, e));
        }
        self.cancel(
            &group_id,
            TimerKind::ClassicMemberDeadline {
                member_id: member.member_id.clone(),
            },
        );
        self.schedule_consumer_session(&group_id, &member, now_ms);
        let mut response = SyncGroupResponse::default().with_assignment(classic_assignment(
            &member,
            &member.assigned,
            &group,
        ));
        if v >= 5 {
            response = response
                .with_protocol_type(Some(s(CONSUMER_PROTOCOL_TYPE)))
                .with_protocol_name(Some(s(&protocol)));
        }
        self.respond(ctx.token, GroupResponse::SyncGroup(response));
    }

    /// Kafka's `throwIfRebalanceInProgress`: the group epoch moved past the member since it
    /// joined, so it must join again (unless it is still revoking, which ends in a rejoin).
    fn rejoin_needed_after_join(
        &mut self,
        group_id: &str,
        group: &ConsumerGroup,
        member: &ConsumerMember,
        now_ms: i64,
    ) -> Result<(), ResponseError> {
        if group.group_epoch > member.member_epoch
            && member.state != MemberState::UnrevokedPartitions
        {
            self.schedule_join_deadline(group_id, member, now_ms);
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// The member has its rebalance timeout to rejoin, counted from the first time it was
    /// told to (Kafka's `scheduleConsumerGroupJoinTimeoutIfAbsent`).
    fn schedule_join_deadline(&mut self, group_id: &str, member: &ConsumerMember, now_ms: i64) {
        let kind = TimerKind::ClassicMemberDeadline {
            member_id: member.member_id.clone(),
        };
        if !self.timer_armed(group_id, &kind) {
            let timeout = i64::from(member.meta.rebalance_timeout_ms.max(0));
            self.schedule(group_id, kind, now_ms + timeout);
        }
    }

    /// Heartbeat of a classic member of a consumer group.
    pub(super) fn classic_heartbeat_to_consumer_group(
        &mut self,
        ctx: &RequestContext,
        req: &HeartbeatRequest,
        now_ms: i64,
    ) {
        let reply = |e: Option<ResponseError>| {
            GroupResponse::Heartbeat(
                HeartbeatResponse::default().with_error_code(e.map_or(0, code)),
            )
        };
        let group_id = req.group_id.0.to_string();
        let group = self
            .group(&group_id)
            .and_then(|g| g.consumer.clone())
            .expect("caller checked");
        let instance_id = req.group_instance_id.as_ref().map(|i| i.to_string());
        let member =
            match Self::classic_member(&group, req.member_id.as_str(), instance_id.as_deref()) {
                Ok(m) => m,
                Err(e) => return self.respond(ctx.token, reply(Some(e))),
            };
        if req.generation_id != member.member_epoch {
            return self.respond(ctx.token, reply(Some(ResponseError::IllegalGeneration)));
        }
        self.schedule_consumer_session(&group_id, &member, now_ms);
        // Rejoin when the group epoch moved on, when partitions must be given up, or when the
        // partitions it waits for are free now.
        let waiting = member.state == MemberState::UnreleasedPartitions
            && group.target.get(&member.member_id).is_some_and(|t| {
                t.iter().any(|(topic, ps)| {
                    ps.iter().any(|p| {
                        !member.assigned.get(topic).is_some_and(|a| a.contains(p))
                            && group.owners.contains_key(&(*topic, *p))
                    })
                })
            });
        let rejoin = member.member_epoch < group.group_epoch
            || member.state == MemberState::UnrevokedPartitions
            || (member.state == MemberState::UnreleasedPartitions && !waiting);
        if rejoin {
            self.schedule_join_deadline(&group_id, &member, now_ms);
        }
        self.respond(
            ctx.token,
            reply(rejoin.then_some(ResponseError::RebalanceInProgress)),
        );
    }

    /// LeaveGroup of one identity from a consumer group (Kafka's
    /// `classicGroupLeaveToConsumerGroup`): the member goes and the group epoch is bumped.
    pub(super) fn classic_leave_from_consumer_group(
        &mut self,
        group_id: &str,
        identity: &MemberIdentity,
        now_ms: i64,
    ) -> Option<ResponseError> {
        let mut group = self.group(group_id).and_then(|g| g.consumer.clone())?;
        let member = match &identity.group_instance_id {
            Some(i) => {
                let m = group
                    .members
                    .values()
                    .find(|m| m.meta.instance_id.as_deref() == Some(i.as_str()))
                    .cloned();
                let Some(m) = m else {
                    return Some(ResponseError::UnknownMemberId);
                };
                // An admin may remove a static member by instance id alone.
                if !identity.member_id.is_empty() && identity.member_id.as_str() != m.member_id {
                    return Some(ResponseError::FencedInstanceId);
                }
                m
            }
            None => match group.members.get(identity.member_id.as_str()) {
                Some(m) => m.clone(),
                None => return Some(ResponseError::UnknownMemberId),
            },
        };
        if member.meta.classic.is_none() {
            return Some(ResponseError::UnknownMemberId);
        }
        tracing::info!(
            group = group_id,
            member = member.member_id.as_str(),
            "classic member left the consumer group"
        );
        if self.fence_consumer_member(group_id, &mut group, &member.member_id, now_ms) {
            self.store_consumer_group(group_id, group);
        }
        None
    }

    /// A classic member did not rejoin or sync within its rebalance timeout.
    pub(super) fn on_classic_member_deadline(
        &mut self,
        group_id: &str,
        member_id: &str,
        now_ms: i64,
    ) {
        let Some(mut group) = self.group(group_id).and_then(|g| g.consumer.clone()) else {
            return;
        };
        if group
            .members
            .get(member_id)
            .is_none_or(|m| m.meta.classic.is_none())
        {
            return;
        }
        tracing::info!(
            group = group_id,
            member = member_id,
            "classic member fenced: it did not rejoin or sync within its rebalance timeout"
        );
        if self.fence_consumer_member(group_id, &mut group, member_id, now_ms) {
            self.store_consumer_group(group_id, group);
        }
    }

    // ------------------------------------------------------------------ downgrade

    /// Whether removing `leaving` (a member of the consumer protocol) leaves only classic
    /// members, so the group converts back (Kafka's `validateOnlineDowngradeWithFencedMember`).
    pub(super) fn downgrade_on_leave(&self, group: &ConsumerGroup, leaving: &str) -> bool {
        group
            .members
            .get(leaving)
            .is_some_and(|m| m.meta.classic.is_none())
            && self.downgrade_allowed(group, Some(leaving))
    }

    /// Whether the group without `leaving` has members, all of the classic protocol, and may
    /// convert back (the policy allows it and they fit `group.max.size`).
    fn downgrade_allowed(&self, group: &ConsumerGroup, leaving: Option<&str>) -> bool {
        let rest: Vec<&ConsumerMember> = group
            .members
            .values()
            .filter(|m| Some(m.member_id.as_str()) != leaving)
            .collect();
        !rest.is_empty()
            && rest.iter().all(|m| m.meta.classic.is_some())
            && self.config.consumer_migration_policy.downgrade_enabled()
            && rest.len() <= self.config.max_size
    }

    /// Converts the consumer group back to a classic group without `leaving`: every record of
    /// the consumer group is tombstoned, the classic group is written at the group epoch with
    /// each member holding its target assignment, and, when a member left, a rebalance starts
    /// (Kafka's `convertToClassicGroup`). Without one leaving (a classic static member took the
    /// last consumer-protocol member's place) the group stays Stable.
    pub(super) fn downgrade_to_classic_group(
        &mut self,
        group_id: &str,
        group: &ConsumerGroup,
        leaving: Option<&str>,
        now_ms: i64,
    ) {
        let partition = self.shard_of(group_id);
        for id in group.members.keys() {
            self.remove_consumer_member_records(partition, group_id, id);
        }
        self.cancel_group_timers(group_id);
        self.end_consumer_group(group_id);

        let mut members: Vec<Member> = Vec::new();
        let remaining: Vec<&ConsumerMember> = group
            .members
            .values()
            .filter(|m| Some(m.member_id.as_str()) != leaving)
            .collect();
        for (seq, m) in remaining.iter().enumerate() {
            let c = m.meta.classic.clone().unwrap_or_default();
            let target = group.target.get(&m.member_id).cloned().unwrap_or_default();
            members.push(Member {
                member_id: m.member_id.clone(),
                group_instance_id: m.meta.instance_id.clone(),
                client_id: m.meta.client_id.clone(),
                client_host: m.meta.client_host.clone(),
                rebalance_timeout_ms: m.meta.rebalance_timeout_ms,
                session_timeout_ms: c.session_timeout_ms,
                assignment: classic_assignment(m, &target, group),
                protocols: c.protocols,
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
                join_seq: seq as u64,
            });
        }
        let g = self.group_mut(group_id).expect("exists");
        g.generation_id = group.group_epoch;
        g.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_owned());
        g.state = GroupState::Stable;
        g.state_timestamp_ms = now_ms;
        g.next_join_seq = members.len() as u64;
        for m in members {
            if let Some(i) = &m.group_instance_id {
                g.static_members.insert(i.clone(), m.member_id.clone());
            }
            g.members.insert(m.member_id.clone(), m);
        }
        g.protocol_name = g.select_protocol();
        g.leader_id = g.first_member_id();
        g.subscribed_topics = g.compute_subscribed_topics();
        self.write_group_metadata(group_id);
        let ids: Vec<String> = self
            .group(group_id)
            .map(|g| g.members.keys().cloned().collect())
            .unwrap_or_default();
        for id in ids {
            self.schedule_heartbeat(group_id, &id, now_ms);
        }
        tracing::info!(
            group = group_id,
            generation = group.group_epoch,
            "consumer group downgraded to a classic group"
        );
        if leaving.is_some() {
            self.prepare_rebalance(group_id, now_ms);
        }
    }
}
