//! The active controller's passes: the requests waiting, the one pass in flight (proposed,
//! not yet applied), the answers it owes, and the schedules of the passes the controller
//! queues itself (leader rebalancing, unclean elections). Each input comes with the time it
//! happens at; what is owed to callers comes back as [`Answer`]s, which the controller carries
//! out. No clock, no I/O.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::request::{Finish, Request};
use crate::errors::ApiError;
use crate::limits::LEADER_IMBALANCE_RECHECK_MS;
use crate::metadata::MetadataImage;
use crate::quorum::Proposal;

/// A pass whose entries are proposed but not yet applied.
pub(crate) struct InFlight {
    /// The pass's last entry; the pass is committed when the entry applied at its index has its
    /// term.
    pub(crate) last: Proposal,
    /// Answered once this node has acted on the committed image.
    pub(crate) finishes: Vec<Finish>,
    /// Broker heartbeats: answered at commit. What they answer (fenced, caught up, may shut
    /// down) is the broker's own state, not this node's cache, and a broker sends its next
    /// heartbeat only after this answer, so it must not wait for this node's replica manager.
    pub(crate) heartbeats: Vec<Finish>,
    /// The brokers whose heartbeats are in the pass: in contact, not expired while it runs.
    pub(crate) heartbeat_brokers: Vec<i32>,
    pub(crate) deadline_ms: u64,
    /// When it was proposed (the quorum clock), for the election time.
    pub(crate) proposed_ms: u64,
}

impl InFlight {
    fn fail(self, error: ApiError) -> Answer {
        Answer::Failed {
            finishes: self.heartbeats.into_iter().chain(self.finishes).collect(),
            error,
        }
    }
}

/// What a pass owes its callers (carried out as a [`super::command::Command::Answer`]).
pub(crate) enum Answer {
    /// It committed, giving `image`: the heartbeats are answered at once, the rest once this
    /// node has acted on the image (its cache shows what was answered, its replica logs exist).
    Committed {
        image: Arc<MetadataImage>,
        heartbeats: Vec<Finish>,
        finishes: Vec<Finish>,
    },
    /// It had nothing to write: every caller is answered at once, with `image`.
    Unchanged {
        image: Arc<MetadataImage>,
        finishes: Vec<Finish>,
    },
    /// It failed, or its outcome is unknown: every caller gets `error`.
    Failed {
        finishes: Vec<Finish>,
        error: ApiError,
    },
    /// Requests refused undecided (this voter is not active, or stops).
    Refused {
        requests: Vec<Request>,
        error: ApiError,
    },
}

/// When a pass the controller queues itself is next due: an interval after it is first
/// enabled and after each pass, [`LEADER_IMBALANCE_RECHECK_MS`] after a pass that hit its
/// bound and left work for the next (Kafka's `maybeScheduleNextBalancePartitionLeaders` and
/// `maybeScheduleNextElectUncleanLeaders`).
#[derive(Default)]
pub(crate) struct PassSchedule {
    next_ms: Option<u64>,
    /// Set by a committed pass that left work for the next one.
    more: Arc<AtomicBool>,
}

impl PassSchedule {
    /// At `now_ms`, with the pass every `interval_ms` (`None`: not wanted now, the schedule
    /// starts over): the flag to hand a pass that is due now.
    pub(crate) fn due(&mut self, interval_ms: Option<u64>, now_ms: u64) -> Option<Arc<AtomicBool>> {
        let Some(interval_ms) = interval_ms else {
            self.next_ms = None;
            return None;
        };
        let Some(due) = self.next_ms else {
            self.next_ms = Some(now_ms + interval_ms);
            return None;
        };
        if self.more.swap(false, Ordering::AcqRel) {
            self.next_ms = Some(due.min(now_ms + LEADER_IMBALANCE_RECHECK_MS));
            return None;
        }
        if now_ms < due {
            return None;
        }
        self.next_ms = Some(now_ms + interval_ms);
        Some(self.more.clone())
    }
}

/// The queue, the pass in flight and the schedules.
#[derive(Default)]
pub(crate) struct Passes {
    pub(crate) queued: VecDeque<Request>,
    pub(crate) in_flight: Option<InFlight>,
    /// Automatic leader rebalancing (only while active and `auto.leader.rebalance.enable`).
    pub(crate) rebalance: PassSchedule,
    /// Unclean elections (only while active and some partition has no leader).
    pub(crate) unclean: PassSchedule,
    /// Load balancing (only while active and `kafkaiq.leader.balancer=load`).
    pub(crate) balance: PassSchedule,
}

impl Passes {
    /// Whether a heartbeat of `broker_id` waits in the queue or in the pass in flight: the
    /// broker is in contact and this controller has not answered yet.
    pub(crate) fn heartbeat_pending(&self, broker_id: i32) -> bool {
        self.in_flight
            .as_ref()
            .is_some_and(|p| p.heartbeat_brokers.contains(&broker_id))
            || self.queued.iter().any(
                |r| matches!(r, Request::BrokerHeartbeat { broker_id: b, .. } if *b == broker_id),
            )
    }

    /// The entry at `index` of `term` was applied, giving `image`: the answer of the pass in
    /// flight once it reaches the pass's last entry.
    pub(crate) fn resolve(
        &mut self,
        index: u64,
        term: u64,
        image: &Arc<MetadataImage>,
    ) -> Option<Answer> {
        if index < self.in_flight.as_ref()?.last.index {
            return None;
        }
        let pass = self.in_flight.take().expect("checked");
        if index == pass.last.index && term == pass.last.term {
            return Some(Answer::Committed {
                image: image.clone(),
                heartbeats: pass.heartbeats,
                finishes: pass.finishes,
            });
        }
        // Another leader's entry took the place of ours: nothing of the pass was committed
        // (entries of a term are committed in order, so its earlier ones went too).
        Some(pass.fail(ApiError::NotController))
    }

    /// A snapshot from the leader up to `index` was installed: it covers whatever this voter
    /// had proposed up to there, and whether its own entries made it is unknown.
    pub(crate) fn snapshot_installed(&mut self, index: u64) -> Option<Answer> {
        if self.in_flight.as_ref()?.last.index > index {
            return None;
        }
        let pass = self.in_flight.take().expect("checked");
        Some(pass.fail(ApiError::RequestTimedOut))
    }

    /// The pass in flight, if still unresolved at its deadline: its outcome is unknown.
    pub(crate) fn expire(&mut self, now_ms: u64) -> Option<Answer> {
        if now_ms < self.in_flight.as_ref()?.deadline_ms {
            return None;
        }
        let pass = self.in_flight.take().expect("checked");
        tracing::warn!(
            offset = pass.last.index,
            "metadata write not committed in time; its outcome is unknown"
        );
        Some(pass.fail(ApiError::RequestTimedOut))
    }

    /// How long ago (quorum clock) the pass in flight was proposed; 0 without one.
    pub(crate) fn in_flight_for_ms(&self, now_ms: u64) -> u64 {
        self.in_flight
            .as_ref()
            .map_or(0, |p| now_ms.saturating_sub(p.proposed_ms))
    }

    /// Stopping: the requests still waiting are refused (NOT_CONTROLLER), the pass in flight
    /// fails (REQUEST_TIMED_OUT: its outcome is unknown).
    pub(crate) fn stop(&mut self) -> Vec<Answer> {
        let requests: Vec<Request> = self.queued.drain(..).collect();
        let refused = (!requests.is_empty()).then_some(Answer::Refused {
            requests,
            error: ApiError::NotController,
        });
        let pass = self
            .in_flight
            .take()
            .map(|p| p.fail(ApiError::RequestTimedOut));
        refused.into_iter().chain(pass).collect()
    }
}
