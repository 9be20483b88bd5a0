//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and retention
//! (`offsets.retention.minutes`).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic},
    offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic},
    offset_fetch_response::{
        OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
        OffsetFetchResponseTopics,
    },
    txn_offset_commit_response::{TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic},
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};

use crate::group::records::{self, OffsetCommitValue};

use super::membership::validate_member;
use super::responses::{
    fetched_partition, fetched_partitions, offset_commit_all, txn_offset_commit_all,
};
use super::state::{Group, GroupState, StoredOffset};
use super::{code, s, Coordinator, GroupResponse, Outcome, PartitionStatus, RequestContext};

impl Coordinator {
    /// Forgets a committed offset: a tombstone for its key in `__consumer_offsets`, and the
    /// entry in the group (OffsetDelete and offset expiry).
    pub(super) fn delete_offset(&mut self, partition: i32, group_id: &str, topic: String, tp: i32) {
        self.append(
            partition,
            records::encode_offset_commit_key(group_id, &topic, tp),
            None,
        );
        self.group_mut(group_id)
            .expect("group exists")
            .remove_offset(&(topic, tp));
    }

    /// Topics deleted from the cluster (or re-created under a new id): their committed offsets
    /// go from every group this node coordinates, with tombstones (Kafka's
    /// `OffsetMetadataManager.onPartitionsDeleted`), so a topic created again under the same
    /// name starts with no committed offsets. Groups left with nothing are disposed of.
    /// One `__consumer_offsets` partition at a time (see [`Coordinator::active_partitions`]), so
    /// a failed write of one undoes nothing of another.
    pub fn topics_deleted(
        &mut self,
        partition: i32,
        topics: &std::collections::BTreeSet<String>,
    ) -> Outcome {
        self.start_operation();
        let groups: Vec<String> = self
            .shards
            .get(&partition)
            .filter(|s| s.status == PartitionStatus::Active)
            .map(|s| s.latest.groups.keys().cloned().collect())
            .unwrap_or_default();
        for group_id in groups {
            let doomed: Vec<(String, i32)> = self
                .group(&group_id)
                .map(|g| {
                    g.offsets
                        .keys()
                        .filter(|(t, _)| topics.contains(t))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            for (topic, tp) in doomed {
                self.delete_offset(partition, &group_id, topic, tp);
            }
        }
        self.finish_operation()
    }

    /// The `__consumer_offsets` partitions this node coordinates and has loaded.
    pub fn active_partitions(&self) -> Vec<i32> {
        let mut ps: Vec<i32> = self
            .shards
            .iter()
            .filter(|(_, s)| s.status == PartitionStatus::Active)
            .map(|(p, _)| *p)
            .collect();
        ps.sort_unstable();
        ps
    }

    // ---------------------------------------------------------------- OffsetCommit

    pub(super) fn offset_commit(
        &mut self,
        ctx: &RequestContext,
        req: OffsetCommitRequest,
        now_ms: i64,
    ) {
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
        if self.group(&group_id).is_none() {
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
            self.insert_group(Group::new(group_id.clone(), partition, now_ms));
        }
        let group = self.group(&group_id).expect("group exists");
        if let Some(c) = &group.consumer {
            if let Err(e) = c.validate_commit(&member_id, generation, v >= 9, false) {
                return all(self, e);
            }
        }
        let simple = generation < 0 && group.state == GroupState::Empty;
        if !simple && group.consumer.is_none() {
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
                // Kafka compares Java's `String.length()`: UTF-16 code units, not bytes.
                let error = if metadata.encode_utf16().count() > max_metadata {
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
            let record_order = self.next_record_order(partition);
            self.group_mut(&group_id)
                .expect("group exists")
                .offsets
                .insert(
                    (topic, tp),
                    StoredOffset {
                        value,
                        record_order,
                    },
                );
        }
        self.maybe_dispose(&group_id);
        self.respond(
            ctx.token,
            GroupResponse::OffsetCommit(OffsetCommitResponse::default().with_topics(topics)),
        );
    }

    // ---------------------------------------------------------------- TxnOffsetCommit

    /// TxnOffsetCommit: offsets committed inside a producer's transaction, written as part of
    /// it (a transactional batch of that producer) and pending until its marker reaches the
    /// partition ([`Coordinator::complete_transaction`]). The member checks are Kafka's for
    /// transactional commits: a request without member information (v0-2, or a producer
    /// outside the group) is accepted, a named member must exist, a given generation must be
    /// the group's, and a rebalance in progress does not refuse it.
    pub(super) fn txn_offset_commit(
        &mut self,
        ctx: &RequestContext,
        req: TxnOffsetCommitRequest,
        now_ms: i64,
    ) {
        let group_id = req.group_id.0.to_string();
        let respond_all = |this: &mut Self, e: Option<ResponseError>| {
            let response = txn_offset_commit_all(&req, e.map_or(0, code));
            this.respond(ctx.token, GroupResponse::TxnOffsetCommit(response));
        };
        if let Err(e) = self.check_coordinator(&group_id) {
            return respond_all(self, Some(e));
        }
        if self.group(&group_id).is_none() {
            let partition = self.partition_for(&group_id);
            self.insert_group(Group::new(group_id.clone(), partition, now_ms));
        }
        let group = self.group(&group_id).expect("group exists");
        let member_id = req.member_id.to_string();
        if group.state == GroupState::Dead {
            return respond_all(self, Some(ResponseError::CoordinatorNotAvailable));
        }
        if let Some(instance) = req.group_instance_id.as_ref().map(|s| s.to_string()) {
            if group
                .static_members
                .get(&instance)
                .is_some_and(|m| *m != member_id)
            {
                return respond_all(self, Some(ResponseError::FencedInstanceId));
            }
        }
        if let Some(c) = &group.consumer {
            if let Err(e) = c.validate_commit(&member_id, req.generation_id, true, true) {
                return respond_all(self, Some(e));
            }
        } else if !member_id.is_empty() && !group.members.contains_key(&member_id) {
            return respond_all(self, Some(ResponseError::UnknownMemberId));
        }
        if group.consumer.is_none()
            && req.generation_id >= 0
            && req.generation_id != group.generation_id
        {
            return respond_all(self, Some(ResponseError::IllegalGeneration));
        }
        let partition = group.partition;
        let max_metadata = self.config.offset_metadata_max_bytes;
        let producer_id = req.producer_id.0;
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
                let error = if metadata.encode_utf16().count() > max_metadata {
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
                            expire_timestamp_ms: -1,
                        },
                    ));
                    0
                };
                partitions.push(
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error),
                );
            }
            topics.push(
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        if !committed.is_empty() {
            self.out.producer = Some((producer_id, req.producer_epoch));
        }
        for (topic, tp, value) in committed {
            let key = records::encode_offset_commit_key(&group_id, &topic, tp);
            let encoded = records::encode_offset_commit_value(&value);
            self.append(partition, key, Some(encoded));
            let record_order = self.next_record_order(partition);
            self.group_mut(&group_id)
                .expect("group exists")
                .pending_txn_offsets
                .entry(producer_id)
                .or_default()
                .insert(
                    (topic, tp),
                    StoredOffset {
                        value,
                        record_order,
                    },
                );
        }
        self.maybe_dispose(&group_id);
        self.respond(
            ctx.token,
            GroupResponse::TxnOffsetCommit(TxnOffsetCommitResponse::default().with_topics(topics)),
        );
    }

    /// The marker of `producer_id`'s transaction reached `partition` (written there, or
    /// replayed): its pending offsets take effect (`commit`) or are dropped.
    pub fn complete_transaction(
        &mut self,
        partition: i32,
        producer_id: i64,
        commit: bool,
        now_ms: i64,
    ) -> Outcome {
        self.start_operation();
        let ids: Vec<String> = self
            .groups_of(partition)
            .filter(|g| g.pending_txn_offsets.contains_key(&producer_id))
            .map(|g| g.group_id.clone())
            .collect();
        for id in ids {
            self.group_mut(&id)
                .expect("listed")
                .complete_transaction(producer_id, commit);
            self.maybe_dispose(&id);
        }
        let _ = now_ms;
        self.finish_operation()
    }

    // ---------------------------------------------------------------- OffsetFetch

    pub(super) fn offset_fetch(&mut self, ctx: &RequestContext, req: OffsetFetchRequest) {
        let v = ctx.api_version;
        // Offsets come from the durable state: a commit whose write has not reached the high
        // watermark is not shown. With require_stable (v7+), a partition with offsets committed
        // in a transaction not yet ended answers UNSTABLE_OFFSET_COMMIT, as Kafka's: the client
        // retries until the transaction ends.
        let require_stable = v >= 7 && req.require_stable;
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
                    let group_id = g.group_id.0.to_string();
                    let member = g.member_id.as_ref().map(|m| m.to_string());
                    let checked = self
                        .check_fetch_member(&group_id, member.as_deref(), g.member_epoch)
                        .and_then(|_| self.fetch_offsets(&g.group_id.0, topics.as_deref()));
                    match checked {
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
                                                    .map(|(p, o)| {
                                                        let r = fetched_partitions(p, o);
                                                        if require_stable
                                                            && self.has_pending_txn_offset(
                                                                &group_id, &topic, p,
                                                            )
                                                        {
                                                            unstable_partitions(r)
                                                        } else {
                                                            r
                                                        }
                                                    })
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
                                    .map(|(p, o)| {
                                        let r = fetched_partition(p, o, v);
                                        if require_stable
                                            && self.has_pending_txn_offset(
                                                &req.group_id.0,
                                                &topic,
                                                p,
                                            )
                                        {
                                            unstable_partition(r)
                                        } else {
                                            r
                                        }
                                    })
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

    /// Whether a transaction not yet ended committed an offset for `topic`-`p` of the group.
    fn has_pending_txn_offset(&self, group_id: &str, topic: &str, p: i32) -> bool {
        self.group(group_id)
            .is_some_and(|g| g.has_pending_txn_offset(&(topic.to_owned(), p)))
    }

    /// Durable committed offsets of a group: for the requested partitions (missing ones as `None`), or
    /// every committed partition when `topics` is `None`. Grouped by topic in request order.
    #[allow(clippy::type_complexity)]
    /// OffsetFetch v9+ from a member of a consumer group names it and its epoch; a stale
    /// epoch means the member may no longer own what it asks about (STALE_MEMBER_EPOCH).
    fn check_fetch_member(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), ResponseError> {
        let (Some(member_id), true) = (member_id, member_epoch >= 0) else {
            return Ok(());
        };
        self.check_coordinator(group_id)?;
        // Classic groups are not checked (Kafka's `ClassicGroup.validateOffsetFetch`), and a
        // group that does not exist has no offsets to hide.
        match self.group(group_id).and_then(|g| g.consumer.as_ref()) {
            Some(c) => match c.members.get(member_id) {
                None => Err(ResponseError::UnknownMemberId),
                Some(m) if m.member_epoch != member_epoch => Err(if m.meta.classic.is_some() {
                    ResponseError::IllegalGeneration
                } else {
                    ResponseError::StaleMemberEpoch
                }),
                Some(_) => Ok(()),
            },
            None => Ok(()),
        }
    }

    pub(super) fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<(String, Vec<(i32, Option<OffsetCommitValue>)>)>, ResponseError> {
        self.check_coordinator(group_id)?;
        let group = self.durable_group(group_id);
        match topics {
            Some(topics) => Ok(topics
                .iter()
                .map(|(topic, parts)| {
                    let found = parts
                        .iter()
                        .map(|p| {
                            let value = group
                                .and_then(|g| g.offsets.get(&(topic.clone(), *p)))
                                .map(|o| o.value.clone());
                            (*p, value)
                        })
                        .collect();
                    (topic.clone(), found)
                })
                .collect()),
            None => {
                let mut by_topic: Vec<(String, Vec<(i32, Option<OffsetCommitValue>)>)> = Vec::new();
                for ((topic, p), o) in group.map(|g| &g.offsets).into_iter().flatten() {
                    let value = Some(o.value.clone());
                    match by_topic.last_mut() {
                        Some((t, parts)) if t == topic => parts.push((*p, value)),
                        _ => by_topic.push((topic.clone(), vec![(*p, value)])),
                    }
                }
                Ok(by_topic)
            }
        }
    }

    pub(super) fn offset_delete(&mut self, ctx: &RequestContext, req: OffsetDeleteRequest) {
        let group_id = req.group_id.0.to_string();
        let top = |e: ResponseError| {
            GroupResponse::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code(e)))
        };
        if let Err(e) = self.check_coordinator(&group_id) {
            return self.respond(ctx.token, top(e));
        }
        let Some(group) = self.group(&group_id) else {
            return self.respond(ctx.token, top(ResponseError::GroupIdNotFound));
        };
        let consumer =
            group.protocol_type.as_deref() == Some("consumer") || group.consumer.is_some();
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
                        // A tombstone also goes for an offset of an open transaction only.
                        let tp = (name.clone(), p.partition_index);
                        if group.offsets.contains_key(&tp) || group.has_pending_txn_offset(&tp) {
                            deletes.push(tp);
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
    /// expires offsets of topics it does not subscribe to; no other group expires any. Where
    /// offsets do expire, an explicit per-commit expiry (OffsetCommit v2–v4 `retention_time_ms`,
    /// v1 records) replaces the retention period, as in Kafka's `GroupMetadata#getExpiredOffsets`;
    /// it never expires the offsets of an active group's subscribed topics.
    pub fn expire_offsets(&mut self, now_ms: i64) -> Outcome {
        self.start_operation();
        let retention = self.config.offsets_retention_ms;
        let ids: Vec<String> = self
            .shards
            .iter()
            .filter(|(_, s)| s.status == PartitionStatus::Active)
            .flat_map(|(_, s)| s.latest.groups.keys().cloned())
            .collect();
        for group_id in ids {
            let group = self.group(&group_id).expect("group exists");
            let consumer_stable = group.protocol_type.as_deref() == Some("consumer")
                && group.state == GroupState::Stable
                && group.subscribed_topics.is_some();
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(tp, o)| {
                    // Not while an open transaction has an offset for the partition (Kafka's
                    // rule): its commit would bring one back that expiry just removed.
                    if group.has_pending_txn_offset(tp) {
                        return false;
                    }
                    let (topic, value) = (&tp.0, &o.value);
                    let base = match (&group.protocol_type, group.state) {
                        // A consumer group (Kafka's `ConsumerGroup.offsetExpirationCondition`):
                        // offsets of topics its members subscribe to never expire; others from
                        // their commit.
                        _ if group.consumer.is_some() => (!group.is_subscribed_to_topic(topic))
                            .then_some(value.commit_timestamp_ms),
                        (None, _) => Some(value.commit_timestamp_ms),
                        (Some(_), GroupState::Empty) => Some(group.state_timestamp_ms),
                        (Some(_), _) if consumer_stable && !group.is_subscribed_to_topic(topic) => {
                            Some(value.commit_timestamp_ms)
                        }
                        _ => None,
                    };
                    base.is_some_and(|b| {
                        if value.expire_timestamp_ms >= 0 {
                            now_ms >= value.expire_timestamp_ms
                        } else {
                            now_ms - b >= retention
                        }
                    })
                })
                .map(|(k, _)| k.clone())
                .collect();
            let partition = group.partition;
            for (topic, tp) in expired {
                self.delete_offset(partition, &group_id, topic, tp);
            }
            let group = self.group(&group_id).expect("group exists");
            if let Some(c) = &group.consumer {
                // Deleted only without members and offsets, with its own tombstones (Kafka's
                // `maybeDeleteGroup`).
                if c.members.is_empty()
                    && group.offsets.is_empty()
                    && group.pending_txn_offsets.is_empty()
                {
                    self.end_consumer_group(&group_id);
                    self.remove_group(&group_id);
                    self.cancel_group_timers(&group_id);
                }
                continue;
            }
            if group.state == GroupState::Empty
                && group.members.is_empty()
                && group.pending_members.is_empty()
                && group.offsets.is_empty()
                && group.pending_txn_offsets.is_empty()
            {
                self.append(
                    partition,
                    records::encode_group_metadata_key(&group_id),
                    None,
                );
                self.remove_group(&group_id);
                self.cancel_group_timers(&group_id);
            }
        }
        self.finish_operation()
    }
}

fn unstable_partition(r: OffsetFetchResponsePartition) -> OffsetFetchResponsePartition {
    r.with_committed_offset(-1)
        .with_metadata(None)
        .with_error_code(code(ResponseError::UnstableOffsetCommit))
}

fn unstable_partitions(
    r: kafka_protocol::messages::offset_fetch_response::OffsetFetchResponsePartitions,
) -> kafka_protocol::messages::offset_fetch_response::OffsetFetchResponsePartitions {
    r.with_committed_offset(-1)
        .with_metadata(None)
        .with_error_code(code(ResponseError::UnstableOffsetCommit))
}
