//! One `__consumer_offsets` partition's groups and timers, and when their state is durable.
//!
//! A shard keeps two views of its state, as Kafka's coordinator runtime does with its
//! `SnapshotRegistry` and timeline collections:
//!
//! - `latest`: every change the machine has decided, durable or not. Later decisions are made
//!   on it, so a second JoinGroup sees the first.
//! - `durable`: the state as of the last write whose records the high watermark covers. What
//!   clients read without deciding anything (OffsetFetch, DescribeGroups, ListGroups) comes from
//!   here, so no client sees an offset or a generation that a failed or lost write may take back.
//!
//! In between sit the pending writes: appended, not yet covered by the high watermark, each with
//! the state right after it. When the caller sees the high watermark move it calls
//! [`Coordinator::observe_high_watermark`] and the covered writes become durable, oldest first.
//! If an append fails, [`Coordinator::write_failed`] puts `latest` back to the state after the
//! last write still pending (or the durable state), discarding the failed operation's changes.
//! A write whose wait timed out stays pending: it is unknown, not lost, and becomes durable when
//! the high watermark reaches it; if leadership moves first, the shard is unloaded with it.
//!
//! An operation that writes nothing still decides on `latest`: when nothing is pending its
//! changes are durable at once; otherwise they join the last pending write and become durable
//! with it (its responses wait for that write, see [`Coordinator::durable_at`]).
//!
//! Snapshots are clones of [`ShardState`], O(1): its collections are persistent maps (`imbl`),
//! so a change after a snapshot copies only the tree path it touches, and a group (behind an
//! `Arc`) is copied only when an operation changes it. Nothing clones a whole shard or the
//! whole coordinator.

use std::collections::VecDeque;
use std::sync::Arc;

use super::state::Group;
use super::{Coordinator, PartitionStatus, TimerKey, Token};
use crate::limits::GROUP_PENDING_WRITES_PER_PARTITION_MAX;

/// Everything a shard decides on, cheap to snapshot.
#[derive(Debug, Clone, Default)]
pub(super) struct ShardState {
    pub(super) groups: imbl::HashMap<String, Arc<Group>>,
    pub(super) timers: imbl::OrdSet<(i64, TimerKey)>,
    pub(super) timer_deadlines: imbl::HashMap<TimerKey, i64>,
}

/// A write appended to the log and not yet covered by the high watermark.
#[derive(Debug)]
struct PendingWrite {
    /// The offset the high watermark must reach for the write to be durable.
    end_offset: i64,
    /// The shard's state right after the write (and the operations without records after it).
    state: ShardState,
}

#[derive(Debug)]
pub(super) struct Shard {
    pub(super) status: PartitionStatus,
    pub(super) latest: ShardState,
    pub(super) durable: ShardState,
    /// Oldest first; end offsets increase.
    pending: VecDeque<PendingWrite>,
    /// The last operation produced records here and the caller has not yet said whether their
    /// append succeeded; no other operation may run until it has.
    awaiting_append: bool,
    /// The groups whose leader's assignment that awaited write carries: if it fails, their
    /// parked SyncGroups get the failure and they rebalance ([`Coordinator::write_failed`]).
    assignments_in_flight: Vec<String>,
    /// Offset records of this partition so far, replayed and appended, in log order: the next
    /// one's [`super::state::StoredOffset::record_order`]. Never goes back (a failed write's
    /// number is simply not reused), so it orders records as their log offsets do.
    offset_records: u64,
}

impl Shard {
    pub(super) fn new(status: PartitionStatus) -> Shard {
        Shard {
            status,
            latest: ShardState::default(),
            durable: ShardState::default(),
            pending: VecDeque::new(),
            awaiting_append: false,
            assignments_in_flight: Vec::new(),
            offset_records: 0,
        }
    }

    /// The place of the next offset record in the log, relative to the others.
    pub(super) fn next_record_order(&mut self) -> u64 {
        self.offset_records += 1;
        self.offset_records
    }

    /// An operation changed `latest` without writing: its changes become durable with the last
    /// pending write, or now if there is none.
    fn settle_without_records(&mut self) {
        match self.pending.back_mut() {
            Some(last) => last.state = self.latest.clone(),
            None => self.durable = self.latest.clone(),
        }
    }

    /// See [`Coordinator::replayed_up_to`].
    pub(super) fn replayed_up_to(&mut self, end_offset: i64, high_watermark: i64) {
        if end_offset <= high_watermark && self.pending.is_empty() {
            self.durable = self.latest.clone();
        } else {
            self.push_pending(end_offset);
        }
    }

    fn push_pending(&mut self, end_offset: i64) {
        debug_assert!(
            self.pending
                .back()
                .is_none_or(|w| w.end_offset < end_offset),
            "log offsets only grow while a partition is led"
        );
        if self.pending.len() == GROUP_PENDING_WRITES_PER_PARTITION_MAX {
            // Dropping the oldest snapshot only delays visibility: its state becomes durable
            // with the next pending write instead.
            self.pending.pop_front();
        }
        self.pending.push_back(PendingWrite {
            end_offset,
            state: self.latest.clone(),
        });
    }

    /// The state the shard goes back to if the operation in flight fails.
    fn last_written(&self) -> &ShardState {
        self.pending.back().map_or(&self.durable, |w| &w.state)
    }
}

impl Coordinator {
    /// The records the last operation produced for `partition` are in the log; they are durable
    /// once the high watermark reaches `end_offset` (the offset after the last of them).
    pub fn write_appended(&mut self, partition: i32, end_offset: i64) {
        let shard = self
            .shards
            .get_mut(&partition)
            .expect("partition has a shard");
        assert!(shard.awaiting_append, "no write is awaiting its append");
        shard.awaiting_append = false;
        shard.assignments_in_flight.clear();
        shard.push_pending(end_offset);
    }

    /// Appending the last operation's records to `partition` failed: its changes are discarded
    /// and the shard is back at the state after the last write still pending. `answered` are
    /// the tokens the failed operation answered (with errors, by the caller); requests the
    /// restored state still has parked under them are forgotten, since they have their answer.
    /// Timers the failed operation ran come back; those already due wait
    /// [`TIMER_RETRY_BACKOFF_MS`](super::timers::TIMER_RETRY_BACKOFF_MS), so a partition that
    /// cannot be written to does not spin.
    ///
    /// Returns the groups whose leader's assignment the write carried: once every partition of
    /// the operation is reported, the caller passes them to [`Coordinator::fail_assignments`],
    /// as Kafka answers their parked SyncGroups with the error and rebalances.
    pub fn write_failed(&mut self, partition: i32, answered: &[Token], now_ms: i64) -> Vec<String> {
        let shard = self
            .shards
            .get_mut(&partition)
            .expect("partition has a shard");
        assert!(shard.awaiting_append, "no write is awaiting its append");
        shard.awaiting_append = false;
        shard.latest = shard.last_written().clone();
        let assignments = std::mem::take(&mut shard.assignments_in_flight);
        self.forget_parked(partition, answered);
        self.postpone_due_timers(partition, now_ms);
        if let Some(shard) = self.shards.get_mut(&partition) {
            shard.settle_without_records();
        }
        self.out = Default::default();
        assignments
    }

    /// The high watermark of `partition` is at least `high_watermark`: every pending write it
    /// covers is durable now. True when one became durable.
    pub fn observe_high_watermark(&mut self, partition: i32, high_watermark: i64) -> bool {
        let Some(shard) = self.shards.get_mut(&partition) else {
            return false;
        };
        let mut advanced = false;
        while shard
            .pending
            .front()
            .is_some_and(|w| w.end_offset <= high_watermark)
        {
            let write = shard.pending.pop_front().expect("checked above");
            shard.durable = write.state;
            advanced = true;
        }
        advanced
    }

    /// The offset the high watermark of `partition` must reach for everything decided on it so
    /// far to be durable, or `None` if it already is. A response that describes the partition's
    /// state waits for this, even if its own operation wrote nothing.
    pub fn durable_at(&self, partition: i32) -> Option<i64> {
        self.shards
            .get(&partition)?
            .pending
            .back()
            .map(|w| w.end_offset)
    }

    /// Partitions with writes the high watermark does not cover yet.
    pub fn partitions_with_pending_writes(&self) -> Vec<i32> {
        let mut partitions: Vec<i32> = self
            .shards
            .iter()
            .filter(|(_, s)| !s.pending.is_empty())
            .map(|(p, _)| *p)
            .collect();
        partitions.sort_unstable();
        partitions
    }

    /// Ends an operation: partitions it wrote to wait for the caller's report of the append;
    /// those it only changed settle now.
    pub(super) fn finish_operation(&mut self) -> super::Outcome {
        let out = std::mem::take(&mut self.out);
        let assignments = std::mem::take(&mut self.assignments_written);
        for partition in &out.partitions {
            let in_flight: Vec<String> = assignments
                .iter()
                .filter(|g| self.partition_for(g) == *partition)
                .cloned()
                .collect();
            let Some(shard) = self.shards.get_mut(partition) else {
                continue;
            };
            if out.records.iter().any(|r| r.partition == *partition) {
                shard.awaiting_append = true;
                shard.assignments_in_flight = in_flight;
            } else {
                shard.settle_without_records();
            }
        }
        out
    }

    /// Checks the caller kept its side of [`Coordinator::write_appended`] /
    /// [`Coordinator::write_failed`] before a new operation starts.
    pub(super) fn start_operation(&self) {
        assert!(
            self.shards.values().all(|s| !s.awaiting_append),
            "an operation started before the previous one's append was reported"
        );
        debug_assert!(self.out == Default::default());
        debug_assert!(self.assignments_written.is_empty());
    }

    /// Notes that the current operation decided on `partition`'s latest state. A partition
    /// still loading decides nothing (its groups answer COORDINATOR_LOAD_IN_PROGRESS at once).
    pub(super) fn touch(&mut self, partition: i32) {
        let active = self
            .shards
            .get(&partition)
            .is_some_and(|s| s.status == PartitionStatus::Active);
        if active {
            self.out.partitions.insert(partition);
        }
    }

    /// [`Shard::next_record_order`] of `partition` (0 for a partition without a shard, which
    /// decides nothing).
    pub(super) fn next_record_order(&mut self, partition: i32) -> u64 {
        self.shards
            .get_mut(&partition)
            .map_or(0, |s| s.next_record_order())
    }

    // ------------------------------------------------------------ access to the two views

    pub(super) fn shard_of(&self, group_id: &str) -> i32 {
        self.partition_for(group_id)
    }

    /// A group as decisions see it.
    pub(super) fn group(&self, group_id: &str) -> Option<&Group> {
        self.shards
            .get(&self.shard_of(group_id))?
            .latest
            .groups
            .get(group_id)
            .map(|g| &**g)
    }

    /// A group to change; copied first if a snapshot shares it.
    pub(super) fn group_mut(&mut self, group_id: &str) -> Option<&mut Group> {
        let partition = self.shard_of(group_id);
        self.touch(partition);
        let group = self
            .shards
            .get_mut(&partition)?
            .latest
            .groups
            .get_mut(group_id)?;
        Some(Arc::make_mut(group))
    }

    /// Adds (or replaces) a group in its partition's latest state.
    pub(super) fn insert_group(&mut self, group: Group) {
        let partition = group.partition;
        self.touch(partition);
        let shard = self
            .shards
            .get_mut(&partition)
            .expect("groups live in partitions this node coordinates");
        shard
            .latest
            .groups
            .insert(group.group_id.clone(), Arc::new(group));
    }

    pub(super) fn remove_group(&mut self, group_id: &str) -> Option<Group> {
        let partition = self.shard_of(group_id);
        self.touch(partition);
        let group = self
            .shards
            .get_mut(&partition)?
            .latest
            .groups
            .remove(group_id)?;
        Some(Arc::unwrap_or_clone(group))
    }

    /// Groups of `partition` as decisions see them.
    pub(super) fn groups_of(&self, partition: i32) -> impl Iterator<Item = &Group> {
        self.shards
            .get(&partition)
            .into_iter()
            .flat_map(|s| s.latest.groups.values().map(|g| &**g))
    }

    /// A group as clients may see it: only what is durable.
    pub(super) fn durable_group(&self, group_id: &str) -> Option<&Group> {
        self.shards
            .get(&self.shard_of(group_id))?
            .durable
            .groups
            .get(group_id)
            .map(|g| &**g)
    }

    /// Durable groups of every partition this node serves.
    pub(super) fn durable_groups(&self) -> impl Iterator<Item = &Group> {
        self.shards
            .values()
            .filter(|s| s.status == PartitionStatus::Active)
            .flat_map(|s| s.durable.groups.values().map(|g| &**g))
    }

    /// After a failed write: requests the restored state has parked but which were answered.
    fn forget_parked(&mut self, partition: i32, answered: &[Token]) {
        if answered.is_empty() {
            return;
        }
        let ids: Vec<String> = self
            .groups_of(partition)
            .filter(|g| {
                g.members.values().any(|m| {
                    let parked = [m.awaiting_join, m.awaiting_sync];
                    parked.iter().flatten().any(|p| answered.contains(&p.token))
                })
            })
            .map(|g| g.group_id.clone())
            .collect();
        for id in ids {
            let group = self.group_mut(&id).expect("listed above");
            for (_, m) in group.members.iter_mut() {
                if m.awaiting_join.is_some_and(|p| answered.contains(&p.token)) {
                    m.awaiting_join = None;
                }
                if m.awaiting_sync.is_some_and(|p| answered.contains(&p.token)) {
                    m.awaiting_sync = None;
                }
            }
        }
    }
}
