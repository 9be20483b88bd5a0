//! The broker sessions the active controller keeps (Kafka's `BrokerHeartbeatManager`):
//! registration, heartbeats, the connection a broker's requests come on, and expiry. Each
//! input comes with the time it happens at (monotonic ms, from the controller's caller), and
//! what the sessions ask of the controller comes back as [`Fence`]s for it to decide in turn
//! with the requests. No clock, no I/O, no image of its own: the image is read as given.

use std::collections::{BTreeMap, BTreeSet};

use super::request::Request;
use crate::metadata::MetadataImage;

/// How long a new active controller waits for the broker of a voter whose Raft connection to
/// it is closed: long enough for a live one to reconnect and heartbeat, short enough that a
/// broker that died with the old controller loses its leaderships well within a second.
const DISCONNECTED_VOTER_GRACE_MS: u64 = 100;

/// The liveness timing of brokers (`broker.session.timeout.ms`, `broker.heartbeat.interval.ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lifecycle {
    pub(crate) session_timeout_ms: u64,
    /// How long a new active controller waits for a broker it has not heard from yet: a broker
    /// heartbeats at once when its controller changes, so a heartbeat interval and a second
    /// are plenty, and a broker that died with the old controller is fenced that soon.
    pub(crate) failover_grace_ms: u64,
}

/// What the active controller knows of one broker's session.
#[derive(Debug, Clone, Copy)]
struct Session {
    /// The incarnation the session belongs to (from its heartbeats); `None` between a
    /// registration and its first heartbeat.
    broker_epoch: Option<i64>,
    deadline_ms: u64,
    /// The controller-listener connection its requests come on; when it closes, the broker's
    /// process is gone (or cut off) and it is fenced at once (decision 5).
    connection: Option<u64>,
    /// Started by [`BrokerSessions::became_active`] and not yet renewed by a heartbeat: if it
    /// expires, the broker never reached this controller after the failover.
    from_failover: bool,
    /// How far the broker has replayed the metadata log, as its last heartbeat said (-1 before
    /// one reached this controller).
    metadata_offset: i64,
    /// In controlled shutdown: the offset of the first image that showed it leading nothing
    /// (Kafka's `controlledShutdownOffset`); it may stop once every other active broker has
    /// replayed that far.
    leads_nothing_from: Option<u64>,
}

/// A broker the sessions found gone: the controller fences it (a `FenceBroker` request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fence {
    pub(crate) broker_id: i32,
    pub(crate) broker_epoch: i64,
    /// The session was started by a failover and never renewed.
    pub(crate) after_failover: bool,
}

impl Fence {
    pub(crate) fn into_request(self) -> Request {
        Request::FenceBroker {
            broker_id: self.broker_id,
            broker_epoch: self.broker_epoch,
            after_failover: self.after_failover,
        }
    }
}

/// Broker sessions, by broker id (kept only on the active controller, and only in a cluster:
/// a standalone node's own broker never heartbeats, and has no [`Lifecycle`]). Ordered by
/// broker id, so that brokers expiring together are fenced in one order on every run.
pub(crate) struct BrokerSessions {
    lifecycle: Option<Lifecycle>,
    sessions: BTreeMap<i32, Session>,
}

impl BrokerSessions {
    pub(crate) fn new(lifecycle: Option<Lifecycle>) -> BrokerSessions {
        BrokerSessions {
            lifecycle,
            sessions: BTreeMap::new(),
        }
    }

    /// A heartbeat of `broker_id` arrived (before it is decided): one of the broker's current
    /// session renews it now, as Kafka's `BrokerHeartbeatTracker` notes contact before the
    /// event queue, so a controller busy with a large write does not fence the brokers whose
    /// heartbeats wait behind it.
    pub(crate) fn heartbeat_arrived(&mut self, broker_id: i32, broker_epoch: i64, now_ms: u64) {
        let Some(lifecycle) = self.lifecycle else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(&broker_id) {
            if s.broker_epoch == Some(broker_epoch) {
                s.deadline_ms = s.deadline_ms.max(now_ms + lifecycle.session_timeout_ms);
            }
        }
    }

    /// A controller-listener connection closed: the sessions of brokers whose requests came on
    /// it end, and those the active controller sees alive in `image` are fenced.
    pub(crate) fn connection_closed(
        &mut self,
        connection: u64,
        active: bool,
        image: &MetadataImage,
    ) -> Vec<Fence> {
        let closed: Vec<(i32, Option<i64>)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.connection == Some(connection))
            .map(|(id, s)| (*id, s.broker_epoch))
            .collect();
        let mut fences = Vec::new();
        for (broker_id, epoch) in closed {
            self.sessions.remove(&broker_id);
            if let (Some(broker_epoch), true) = (epoch, active) {
                if image.is_broker_alive(broker_id) {
                    tracing::info!(
                        broker_id,
                        broker_epoch,
                        "broker's controller connection closed; fencing it"
                    );
                    fences.push(Fence {
                        broker_id,
                        broker_epoch,
                        after_failover: false,
                    });
                }
            }
        }
        fences
    }

    /// Voter `peer`'s Raft connection to the active controller closed and its broker has not
    /// yet reached this controller (a session started by [`Self::became_active`]): the
    /// process most likely died with it. Its broker gets the short grace a disconnected voter
    /// gets on failover instead of the whole failover grace.
    pub(crate) fn voter_disconnected(&mut self, peer: u64, now_ms: u64) {
        let Some(lifecycle) = self.lifecycle else {
            return;
        };
        if let Some(session) = self.sessions.get_mut(&(peer as i32)) {
            if session.connection.is_none() {
                let grace = lifecycle.failover_grace_ms.min(DISCONNECTED_VOTER_GRACE_MS);
                session.deadline_ms = session.deadline_ms.min(now_ms + grace);
            }
        }
    }

    /// The earliest deadline of a session with a broker epoch (when the active controller must
    /// look again, between ticks).
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        self.sessions
            .values()
            .filter(|s| s.broker_epoch.is_some())
            .map(|s| s.deadline_ms)
            .min()
    }

    /// Ends the sessions past their deadline at `now_ms`, except a broker whose heartbeat is
    /// waiting (`heartbeat_pending`: it is in contact); those alive in `image` are fenced.
    pub(crate) fn expire(
        &mut self,
        now_ms: u64,
        image: &MetadataImage,
        heartbeat_pending: impl Fn(i32) -> bool,
    ) -> Vec<Fence> {
        let expired: Vec<(i32, i64, bool)> = self
            .sessions
            .iter()
            .filter(|(_, s)| now_ms >= s.deadline_ms)
            .filter_map(|(id, s)| s.broker_epoch.map(|e| (*id, e, s.from_failover)))
            .filter(|(id, _, _)| !heartbeat_pending(*id))
            .collect();
        let mut fences = Vec::new();
        for (broker_id, broker_epoch, after_failover) in expired {
            self.sessions.remove(&broker_id);
            if image.is_broker_alive(broker_id) {
                tracing::info!(
                    broker_id,
                    broker_epoch,
                    "broker session expired; fencing it"
                );
                fences.push(Fence {
                    broker_id,
                    broker_epoch,
                    after_failover,
                });
            }
        }
        fences
    }

    /// A registration of a new incarnation while the registered one has a valid session —
    /// unfenced, and heard from within `broker.session.timeout.ms` (or, just after a failover,
    /// within the grace every live broker gets) — whichever connection it came on: refused as
    /// Kafka's `ClusterControlManager.registerBroker` refuses it, DUPLICATE_BROKER_REGISTRATION
    /// (a second process with the same node id, or a forger). A restart is seldom refused: the
    /// old process's connection closed when it died, which ended its session
    /// ([`Self::connection_closed`]); if not, the new incarnation's retries succeed once the old
    /// session expires. A registered broker not yet unfenced has no valid session (Kafka's
    /// `hasValidSession` likewise), so a restart during startup replaces it.
    pub(crate) fn is_duplicate_registration(
        &self,
        request: &Request,
        image: &MetadataImage,
        now_ms: u64,
        heartbeat_pending: impl Fn(i32) -> bool,
    ) -> bool {
        let Request::BrokerRegistration { registration, .. } = request else {
            return false;
        };
        let node_id = registration.node_id;
        let Some(registered) = image.broker(node_id) else {
            return false;
        };
        if registered.fenced || registered.incarnation_id == registration.incarnation_id {
            return false;
        }
        self.sessions.get(&node_id).is_some_and(|s| {
            s.broker_epoch == Some(registered.broker_epoch)
                && (now_ms < s.deadline_ms || heartbeat_pending(node_id))
        })
    }

    /// Whether every active broker but `broker_id` has reported replaying the metadata log to
    /// `offset` or further (Kafka's `lowestActiveOffset`); one without a heartbeat to this
    /// controller yet has not.
    fn peers_replayed_past(&self, image: &MetadataImage, broker_id: i32, offset: i64) -> bool {
        image
            .brokers
            .values()
            .filter(|b| b.node_id != broker_id && image.is_broker_active(b.node_id))
            .all(|b| {
                self.sessions
                    .get(&b.node_id)
                    .is_some_and(|s| s.metadata_offset >= offset)
            })
    }

    /// Notes what a lifecycle request says about its broker's session before it is decided
    /// against `image`, and for a heartbeat in controlled shutdown whether the others have
    /// replayed far enough.
    pub(crate) fn observe(&mut self, request: &mut Request, image: &MetadataImage, now_ms: u64) {
        let Some(lifecycle) = self.lifecycle else {
            return;
        };
        match request {
            Request::BrokerRegistration {
                registration,
                connection,
                ..
            } => {
                self.sessions.insert(
                    registration.node_id,
                    Session {
                        broker_epoch: None,
                        deadline_ms: now_ms + lifecycle.session_timeout_ms,
                        connection: *connection,
                        from_failover: false,
                        metadata_offset: -1,
                        leads_nothing_from: None,
                    },
                );
            }
            Request::BrokerHeartbeat {
                broker_id,
                broker_epoch,
                metadata_offset,
                want_shut_down,
                connection,
                peers_replayed,
                ..
            } => {
                let Some(b) = image.broker(*broker_id) else {
                    return;
                };
                if b.broker_epoch != *broker_epoch {
                    return;
                }
                let previous = self.sessions.get(broker_id);
                let leads_nothing = b.in_controlled_shutdown
                    && !image
                        .topics
                        .values()
                        .any(|t| t.partitions.values().any(|p| p.leader == *broker_id));
                let leads_nothing_from = if *want_shut_down && leads_nothing {
                    previous
                        .and_then(|s| s.leads_nothing_from)
                        .or(Some(image.metadata_offset))
                } else {
                    None
                };
                let session = Session {
                    broker_epoch: Some(*broker_epoch),
                    deadline_ms: now_ms + lifecycle.session_timeout_ms,
                    connection: connection.or_else(|| previous.and_then(|s| s.connection)),
                    from_failover: false,
                    metadata_offset: *metadata_offset,
                    leads_nothing_from,
                };
                self.sessions.insert(*broker_id, session);
                *peers_replayed = leads_nothing_from.is_some_and(|from| {
                    self.peers_replayed_past(
                        image,
                        *broker_id,
                        i64::try_from(from).unwrap_or(i64::MAX),
                    )
                });
            }
            _ => {}
        }
    }

    /// This voter just became the active controller: a session for every live broker of
    /// `image`, due after the failover grace. A voter in `voters` other than `me` whose Raft
    /// connection to this node is not open (not in `connected`) is most likely the process
    /// that died with the old controller (a live voter keeps one open, answering the leader):
    /// its broker gets only a short grace to reach this controller.
    pub(crate) fn became_active(
        &mut self,
        image: &MetadataImage,
        me: u64,
        voters: &[u64],
        connected: &BTreeSet<u64>,
        now_ms: u64,
    ) {
        let Some(lifecycle) = self.lifecycle else {
            return;
        };
        self.sessions = image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| {
                let id = b.node_id as u64;
                let gone = id != me && voters.contains(&id) && !connected.contains(&id);
                let grace = if gone {
                    lifecycle.failover_grace_ms.min(DISCONNECTED_VOTER_GRACE_MS)
                } else {
                    lifecycle.failover_grace_ms
                };
                (
                    b.node_id,
                    Session {
                        broker_epoch: Some(b.broker_epoch),
                        deadline_ms: now_ms + grace,
                        connection: None,
                        from_failover: true,
                        metadata_offset: -1,
                        leads_nothing_from: None,
                    },
                )
            })
            .collect();
    }
}
