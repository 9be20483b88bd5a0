//! Deadlines: member session timeouts, pending member ids, the end of a rebalance's join phase
//! and the sync timeout. The caller wakes the machine with [`Coordinator::tick`].

use kafka_protocol::error::ResponseError;

use super::state::{GroupState, InitialJoin};
use super::{Coordinator, Outcome, Timer, TimerKey, TimerKind};

impl Coordinator {
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

    pub(super) fn schedule(&mut self, group_id: &str, kind: TimerKind, deadline_ms: i64) {
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

    pub(super) fn cancel(&mut self, group_id: &str, kind: TimerKind) {
        let key = (group_id.to_owned(), kind);
        if let Some(old) = self.timer_deadlines.remove(&key) {
            self.timers.remove(&(old, key));
        }
    }

    pub(super) fn cancel_group_timers(&mut self, group_id: &str) {
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

    pub(super) fn schedule_heartbeat(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
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

    pub(super) fn on_heartbeat_expired(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
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

    pub(super) fn on_pending_member_expired(
        &mut self,
        group_id: &str,
        member_id: &str,
        now_ms: i64,
    ) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if group.pending_members.remove(member_id) {
            self.maybe_complete_join(group_id, now_ms);
            self.maybe_dispose(group_id);
        }
    }

    pub(super) fn on_join_timer(&mut self, group_id: &str, now_ms: i64) {
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

    pub(super) fn on_sync_timer(&mut self, group_id: &str, now_ms: i64) {
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
}
