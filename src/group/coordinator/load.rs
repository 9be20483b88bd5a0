//! Partition ownership and replay: loading a `__consumer_offsets` partition this node now leads
//! (its records rebuild groups and offsets), and unloading one it no longer leads.

use std::sync::Arc;

use imbl::HashSet;

use kafka_protocol::error::ResponseError;

use crate::group::records::{self, GroupMetadataValue, RecordKey};

use super::responses::{join_error, sync_error};
use super::shard::Shard;
use super::state::{Group, GroupState, Member, StoredOffset};
use super::{Coordinator, Outcome, PartitionStatus, TimerKind};

impl Coordinator {
    /// This node became leader of `partition` (or leads it at a new epoch): its groups are
    /// unavailable (COORDINATOR_LOAD_IN_PROGRESS) until [`Coordinator::complete_load`]. State of
    /// an earlier epoch, pending writes included, is dropped: the replay rebuilds it from the
    /// log. The outcome answers requests parked under the old state with NOT_COORDINATOR.
    pub fn begin_load(&mut self, partition: i32) -> Outcome {
        let out = self.unload(partition);
        self.shards
            .insert(partition, Shard::new(PartitionStatus::Loading));
        out
    }

    /// Every record of `partition` has been replayed: serve its groups and arm member session
    /// timers, as Kafka does when it finishes loading a partition. Replayed records are durable
    /// (the load reads up to the high watermark), so the durable view is the replayed state.
    pub fn complete_load(&mut self, partition: i32, now_ms: i64) -> Outcome {
        self.start_operation();
        let shard = self
            .shards
            .entry(partition)
            .or_insert_with(|| Shard::new(PartitionStatus::Loading));
        shard.status = PartitionStatus::Active;
        let mut arm = Vec::new();
        for group in self.groups_of(partition) {
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
        // KIP-848 members: a session each (a classic member's own session timeout), and a
        // rebalance timeout for members of the consumer protocol still revoking.
        let mut sessions = Vec::new();
        let mut revoking = Vec::new();
        for group in self.groups_of(partition) {
            let Some(c) = &group.consumer else { continue };
            for m in c.members.values() {
                sessions.push((group.group_id.clone(), m.clone()));
                if m.state == super::consumer::MemberState::UnrevokedPartitions
                    && m.meta.classic.is_none()
                {
                    revoking.push((
                        group.group_id.clone(),
                        TimerKind::ConsumerRebalance {
                            member_id: m.member_id.clone(),
                        },
                        now_ms + i64::from(m.meta.rebalance_timeout_ms.max(0)),
                    ));
                }
            }
        }
        for (group_id, m) in sessions {
            self.schedule_consumer_session(&group_id, &m, now_ms);
        }
        for (group_id, kind, deadline) in revoking {
            self.schedule(&group_id, kind, deadline);
        }
        self.touch(partition);
        self.finish_operation()
    }

    /// This node no longer leads `partition`: forget its groups, durable or not, and answer
    /// parked requests with NOT_COORDINATOR so clients look the coordinator up again.
    pub fn unload(&mut self, partition: i32) -> Outcome {
        let Some(shard) = self.shards.remove(&partition) else {
            return Outcome::default();
        };
        let mut out = Outcome::default();
        for group in shard.latest.groups.values() {
            for member in group.members.values() {
                if let Some(p) = member.awaiting_join {
                    out.responses.push((
                        p.token,
                        join_error(p.api_version, ResponseError::NotCoordinator, ""),
                    ));
                }
                if let Some(p) = member.awaiting_sync {
                    out.responses.push((
                        p.token,
                        sync_error(p.api_version, ResponseError::NotCoordinator),
                    ));
                }
            }
        }
        out
    }

    /// The records of `partition` before `end_offset` (a batch boundary) have been replayed.
    /// If the high watermark at the start of the load covers them they are durable; otherwise
    /// they are a pending write, as if this node had just appended them, and become durable
    /// when the high watermark reaches `end_offset`. Without this call, everything replayed is
    /// durable at [`Coordinator::complete_load`].
    pub fn replayed_up_to(&mut self, partition: i32, end_offset: i64, high_watermark: i64) {
        if let Some(shard) = self.shards.get_mut(&partition) {
            shard.replayed_up_to(end_offset, high_watermark);
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
        let shard = self
            .shards
            .entry(partition)
            .or_insert_with(|| Shard::new(PartitionStatus::Loading));
        let record_order = shard.next_record_order();
        let groups = &mut shard.latest.groups;
        match records::decode_key(key)? {
            RecordKey::OffsetCommit {
                group,
                topic,
                partition: tp,
            } => match value {
                Some(v) => {
                    let value = records::decode_offset_commit_value(v)?;
                    let entry = groups.entry(group.clone()).or_insert_with(|| {
                        Arc::new(Group::new(group, partition, value.commit_timestamp_ms))
                    });
                    Arc::make_mut(entry).offsets.insert(
                        (topic, tp),
                        StoredOffset {
                            value,
                            record_order,
                        },
                    );
                }
                None => {
                    if let Some(g) = groups.get_mut(&group) {
                        Arc::make_mut(g).remove_offset(&(topic, tp));
                    }
                }
            },
            RecordKey::Consumer(key) => {
                let group = key.group().to_owned();
                let entry = groups.entry(group.clone()).or_insert_with(|| {
                    let mut g = Group::new(group.clone(), partition, 0);
                    g.become_consumer_group();
                    Arc::new(g)
                });
                let g = Arc::make_mut(entry);
                if g.consumer.is_none() {
                    g.become_consumer_group();
                }
                let c = g.consumer.as_mut().expect("set above");
                super::consumer::replay(c, &key, value)?;
                // A tombstone of the group's epoch record ends the consumer group (it was
                // deleted, or converted back to a classic group).
                if value.is_none()
                    && matches!(
                        key,
                        crate::group::consumer_records::ConsumerKey::GroupMetadata { .. }
                    )
                {
                    g.consumer = None;
                    if g.is_disposable() {
                        groups.remove(&group);
                    }
                }
            }
            RecordKey::GroupMetadata { group } => match value {
                Some(v) => {
                    let value = records::decode_group_metadata_value(v)?;
                    let entry = groups
                        .entry(group.clone())
                        .or_insert_with(|| Arc::new(Group::new(group.clone(), partition, 0)));
                    load_group_metadata(Arc::make_mut(entry), value);
                }
                None => {
                    // The group's metadata goes; its offsets, and those of its open
                    // transactions, have keys of their own.
                    if let Some(g) = groups.get_mut(&group) {
                        let g = Arc::make_mut(g);
                        let offsets = std::mem::take(&mut g.offsets);
                        let pending = std::mem::take(&mut g.pending_txn_offsets);
                        // A producer whose offsets here were all tombstoned holds nothing of
                        // the group: DeleteGroups removed the group whole, and so does this.
                        if offsets.is_empty() && pending.values().all(|p| p.is_empty()) {
                            groups.remove(&group);
                        } else {
                            let mut fresh = Group::new(group.clone(), partition, 0);
                            fresh.offsets = offsets;
                            fresh.pending_txn_offsets = pending;
                            groups.insert(group, Arc::new(fresh));
                        }
                    }
                }
            },
        }
        Ok(())
    }

    /// Replays a record of a transactional batch of `producer_id`: an offset committed inside
    /// its transaction, pending until the transaction's marker is replayed.
    pub fn replay_transactional(
        &mut self,
        partition: i32,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), records::RecordError> {
        let (
            RecordKey::OffsetCommit {
                group,
                topic,
                partition: tp,
            },
            Some(v),
        ) = (records::decode_key(key)?, value)
        else {
            return self.replay(partition, key, value);
        };
        let value = records::decode_offset_commit_value(v)?;
        let shard = self
            .shards
            .entry(partition)
            .or_insert_with(|| Shard::new(PartitionStatus::Loading));
        let record_order = shard.next_record_order();
        let groups = &mut shard.latest.groups;
        let entry = groups
            .entry(group.clone())
            .or_insert_with(|| Arc::new(Group::new(group, partition, value.commit_timestamp_ms)));
        Arc::make_mut(entry)
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
        Ok(())
    }

    /// Replays the marker of `producer_id`'s transaction: its pending offsets take effect
    /// (`commit`) or are dropped.
    pub fn replay_txn_marker(&mut self, partition: i32, producer_id: i64, commit: bool) {
        let Some(shard) = self.shards.get_mut(&partition) else {
            return;
        };
        let ids: Vec<String> = shard
            .latest
            .groups
            .iter()
            .filter(|(_, g)| g.pending_txn_offsets.contains_key(&producer_id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let g = Arc::make_mut(shard.latest.groups.get_mut(&id).expect("listed"));
            g.complete_transaction(producer_id, commit);
            if g.is_disposable() {
                shard.latest.groups.remove(&id);
            }
        }
    }
}

pub(super) fn load_group_metadata(group: &mut Group, value: GroupMetadataValue) {
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
