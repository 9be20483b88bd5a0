//! Deadlines: member session timeouts, pending member ids, the end of a rebalance's join phase
//! and the sync timeout. The caller wakes the machine with [`Coordinator::tick`].

use kafka_protocol::error::ResponseError;

use super::state::{GroupState, InitialJoin};
use super::{Coordinator, Outcome, Timer, TimerKey, TimerKind};

/// How long a timer whose write failed waits before it runs again (Kafka's coordinator timer
/// retry backoff): the partition is likely still unwritable, and running it at once would spin.
pub(super) const TIMER_RETRY_BACKOFF_MS: i64 = 500;

impl Coordinator {
    /// The earliest armed deadline, if any.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.shards
            .values()
            .filter_map(|s| s.latest.timers.get_min().map(|(d, _)| *d))
            .min()
    }

    /// Partitions with a timer due at `now_ms`, each to be ticked on its own so that one
    /// partition's failed write does not undo another's.
    pub fn due_partitions(&self, now_ms: i64) -> Vec<i32> {
        let mut due: Vec<i32> = self
            .shards
            .iter()
            .filter(|(_, s)| s.latest.timers.get_min().is_some_and(|(d, _)| *d <= now_ms))
            .map(|(p, _)| *p)
            .collect();
        due.sort_unstable();
        due
    }

    /// Runs every timer of `partition` whose deadline is at or before `now_ms`.
    pub fn tick(&mut self, partition: i32, now_ms: i64) -> Outcome {
        self.start_operation();
        self.touch(partition);
        while let Some(shard) = self.shards.get_mut(&partition) {
            let Some((deadline, key)) = shard.latest.timers.get_min().cloned() else {
                break;
            };
            if deadline > now_ms {
                break;
            }
            shard.latest.timers.remove(&(deadline, key.clone()));
            shard.latest.timer_deadlines.remove(&key);
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
                TimerKind::ConsumerSession { member_id } => {
                    self.on_consumer_timer(&group_id, &member_id, false, now_ms)
                }
                TimerKind::ConsumerRebalance { member_id } => {
                    self.on_consumer_timer(&group_id, &member_id, true, now_ms)
                }
                TimerKind::ClassicMemberDeadline { member_id } => {
                    self.on_classic_member_deadline(&group_id, &member_id, now_ms)
                }
            }
        }
        self.finish_operation()
    }

    pub(super) fn schedule(&mut self, group_id: &str, kind: TimerKind, deadline_ms: i64) {
        let partition = self.shard_of(group_id);
        self.touch(partition);
        let Some(shard) = self.shards.get_mut(&partition) else {
            return;
        };
        let key = (group_id.to_owned(), kind.clone());
        if let Some(old) = shard
            .latest
            .timer_deadlines
            .insert(key.clone(), deadline_ms)
        {
            shard.latest.timers.remove(&(old, key.clone()));
        }
        shard.latest.timers.insert((deadline_ms, key));
        self.out.timers.push(Timer {
            group_id: group_id.to_owned(),
            kind,
            deadline_ms,
        });
    }

    pub(super) fn timer_armed(&self, group_id: &str, kind: &TimerKind) -> bool {
        self.shards.get(&self.shard_of(group_id)).is_some_and(|s| {
            s.latest
                .timer_deadlines
                .contains_key(&(group_id.to_owned(), kind.clone()))
        })
    }

    pub(super) fn cancel(&mut self, group_id: &str, kind: TimerKind) {
        let partition = self.shard_of(group_id);
        self.touch(partition);
        let Some(shard) = self.shards.get_mut(&partition) else {
            return;
        };
        let key = (group_id.to_owned(), kind);
        if let Some(old) = shard.latest.timer_deadlines.remove(&key) {
            shard.latest.timers.remove(&(old, key));
        }
    }

    pub(super) fn cancel_group_timers(&mut self, group_id: &str) {
        let Some(shard) = self.shards.get(&self.shard_of(group_id)) else {
            return;
        };
        let keys: Vec<TimerKey> = shard
            .latest
            .timer_deadlines
            .keys()
            .filter(|(g, _)| g == group_id)
            .cloned()
            .collect();
        for (g, kind) in keys {
            self.cancel(&g, kind);
        }
    }

    /// Moves the timers of `partition` due at `now_ms` to [`TIMER_RETRY_BACKOFF_MS`] later.
    pub(super) fn postpone_due_timers(&mut self, partition: i32, now_ms: i64) {
        let Some(shard) = self.shards.get(&partition) else {
            return;
        };
        let due: Vec<TimerKey> = shard
            .latest
            .timers
            .iter()
            .take_while(|(d, _)| *d <= now_ms)
            .map(|(_, k)| k.clone())
            .collect();
        for (group_id, kind) in due {
            self.schedule(&group_id, kind, now_ms + TIMER_RETRY_BACKOFF_MS);
        }
    }

    pub(super) fn schedule_heartbeat(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        let Some(member) = self.group(group_id).and_then(|g| g.members.get(member_id)) else {
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

    pub(super) fn on_heartbeat_expired(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        let Some(member) = self.group(group_id).and_then(|g| g.members.get(member_id)) else {
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

    pub(super) fn on_pending_member_expired(
        &mut self,
        group_id: &str,
        member_id: &str,
        now_ms: i64,
    ) {
        let Some(group) = self.group_mut(group_id) else {
            return;
        };
        if group.pending_members.remove(member_id).is_some() {
            self.maybe_complete_join(group_id, now_ms);
            self.maybe_dispose(group_id);
        }
    }

    pub(super) fn on_join_timer(&mut self, group_id: &str, now_ms: i64) {
        let Some(group) = self.group_mut(group_id) else {
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

    pub(super) fn on_sync_timer(&mut self, group_id: &str, now_ms: i64) {
        let Some(group) = self.group(group_id) else {
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
        let state = self.group(group_id).map(|g| g.state);
        if matches!(
            state,
            Some(GroupState::CompletingRebalance | GroupState::Stable)
        ) {
            self.prepare_rebalance(group_id, now_ms);
        }
    }
}
