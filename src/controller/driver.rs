//! The controller thread: one OS thread per controller node that drives this node's voter of
//! the metadata quorum and, while it leads the quorum, decides every metadata change (Kafka's
//! `QuorumController`, one event queue run by one thread).
//!
//! The loop takes events (requests from [`super::ControllerChannel`]s, Raft messages from peers,
//! ticks), hands each to the [`ControllerCore`] with the time it read, and carries out the
//! [`Command`]s the core returns, in order ([`Effects`]). After each batch of events:
//! 1. if this voter leads and has applied an entry of its own term (it is *active*) and no pass
//!    is in flight, it starts a pass: it takes the requests waiting (up to
//!    [`CONTROLLER_BATCH_REQUESTS_MAX`]), decides each against the image the earlier ones leave,
//!    and proposes their records as log entries;
//! 2. it polls the quorum engine, makes durable (fsync) the writes the poll returns, and only
//!    then sends the poll's messages to the peers;
//! 3. it applies committed entries in order through the node's
//!    [`MetadataPublisher`](crate::metadata::MetadataPublisher) (new image,
//!    listeners told), and answers the requests of a pass once its last entry is applied —
//!    only then, so no client sees a change the quorum has not committed.
//!
//! A request that reaches a voter that does not lead gets NOT_CONTROLLER (the channel forwards
//! it to the active controller instead, once there is one elsewhere). A pass whose entries are
//! replaced by another leader's gets NOT_CONTROLLER; one still unresolved after
//! [`CONTROLLER_WRITE_TIMEOUT_MS`] gets REQUEST_TIMED_OUT (its outcome is unknown).
//!
//! The thread does blocking file I/O itself (the log's fsync, the listeners' partition
//! directories); that is why it is a thread and not a tokio task. It enters the node's tokio
//! runtime, so listeners may spawn tasks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::quorum::durable::DurableError;

use raft::eraftpb::Message;
use tokio::sync::Semaphore;

use super::command::{Command, Effects, Publish, Report};
use super::decisions::has_leaderless_partitions;
use super::passes::{Answer, InFlight, Passes};
use super::request::{decide, IdSource, Request};
use super::sessions::{BrokerSessions, Fence};
use super::voter::Voter;
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::{
    CONTROLLER_BATCH_REQUESTS_MAX, CONTROLLER_WRITE_TIMEOUT_MS, METADATA_RECORD_BYTES_MAX,
    METADATA_SNAPSHOT_BYTES_MAX, METADATA_SNAPSHOT_ENTRIES,
};
use crate::metadata::{MetadataImage, MetadataRecord};
use crate::quorum::durable::Durable;
use crate::quorum::{Apply, Proposal, QuorumEngine};

/// Why the controller thread stopped by itself: the node cannot go on without it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControllerError {
    #[error("the metadata quorum cannot persist its state: {0}")]
    Durable(#[from] DurableError),
    /// The library committed what the controller cannot decode. Entries are checked before they
    /// enter the log, so this is corruption (or a bug), never a peer's message: stopping is
    /// what Kafka's controller does on a metadata fault it cannot replay.
    #[error("committed metadata at offset {offset} does not decode ({reason}): the metadata log is corrupt")]
    Corrupt { offset: u64, reason: String },
}

/// What the controller thread reacts to.
pub(crate) enum Event {
    Request(Request),
    /// A Raft message from a peer voter, and the controller-listener connection it came on.
    Peer {
        message: Message,
        connection: u64,
    },
    /// A controller-listener connection closed.
    ConnectionClosed(u64),
    /// A peer could not be reached: stop pipelining to it.
    PeerUnreachable(u64),
    /// Whether a snapshot message reached a peer.
    SnapshotSent {
        peer: u64,
        delivered: bool,
    },
    Shutdown,
}

/// Where the engine's outgoing messages go (the peer transport; nowhere for a single voter).
pub(crate) type Outbox = Box<dyn FnMut(Vec<Message>) + Send>;

/// When an event happens, as the caller's clocks say: the controller reads no clock itself, so
/// the simulation replays a history exactly from its seed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Now {
    /// A monotonic clock, in ms: every deadline, timeout and schedule.
    pub(crate) mono_ms: u64,
    /// The wall clock, in ms since the epoch: only timestamps reported (DescribeQuorum) or
    /// recorded (a change's cause), never a decision.
    pub(crate) wall_ms: i64,
}

/// A broker's latest load report, as its heartbeat carried it.
struct LoadReport {
    broker_epoch: i64,
    /// When it arrived (monotonic ms).
    at_ms: u64,
    loads: Vec<super::decisions::ReportedLoad>,
}

/// One tick of the quorum's clock.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// How often a voter that has not yet learnt it caught up asks the leader for its commit index
/// again ([`CatchUp`]): the leader drops a request while it has committed nothing of its own
/// term, and nobody answers while no leader is known.
const CATCH_UP_ASK_MS: u64 = 300;

/// A controller-only node learning that it has caught up with the quorum after it started: its
/// replay stopped at the commit index it last persisted, and what it applies from its own log
/// may be long superseded (the dynamic configs of its listener, above all). It reads the
/// leader's commit index (Raft's ReadIndex) and, once it has applied that far, publishes
/// [`Publish::CaughtUp`], which its held listeners wait for (Kafka's `MetadataLoader` waits for
/// the high watermark in the same way). A voter that becomes the active controller has caught
/// up: it has applied everything committed before its term.
struct CatchUp {
    next_ask_ms: u64,
    asked: u64,
    /// What each request's context starts with: this voter's id and a value drawn at start,
    /// so that only answers to this run's own requests count (the leader keys its pending
    /// requests by context alone, whoever sent them).
    prefix: String,
    /// The first commit index the leader answered with.
    read: Option<u64>,
}

impl CatchUp {
    fn new(node_id: i32) -> CatchUp {
        let nonce = super::random_uuid();
        CatchUp {
            next_ask_ms: 0,
            asked: 0,
            prefix: format!("catch-up-{node_id}-{}-", &nonce.simple().to_string()[..16]),
            read: None,
        }
    }
}

pub(crate) use super::sessions::Lifecycle;

/// The controller without its thread: events in, [`Command`]s out (persist, send, publish,
/// answer, report), time given by the caller ([`Now`]). The thread ([`run`]) and the simulation drive
/// it and carry out its commands ([`Effects`]); it does no I/O and reads no clock. It joins
/// three parts, each with its own state, taking its inputs with their time and returning what
/// to do: the [`Voter`] (the quorum engine, campaigns, peer connections), the
/// [`BrokerSessions`] (returning [`Fence`]s) and the [`Passes`] (returning [`Answer`]s).
pub(crate) struct ControllerCore {
    config: Arc<BrokerConfig>,
    /// Each broker's latest load report (`kafkaiq.leader.balancer=load`): in memory only; a new
    /// active controller starts with none and balances once every active broker has reported.
    load_reports: std::collections::BTreeMap<i32, LoadReport>,
    voter: Voter,
    /// The latest image: the one published last, or to be published by the commands not yet
    /// taken. Decisions are made on it.
    image: Arc<MetadataImage>,
    /// The cluster id this voter proposes if it is the first active controller of a cluster
    /// (the one its `meta.properties` holds, or a new one). The log's ClusterId record decides.
    proposed_cluster_id: String,
    /// What the first active controller of a new cluster writes after its id
    /// ([`crate::metadata::bootstrap`]).
    bootstrap_records: Vec<MetadataRecord>,
    sessions: BrokerSessions,
    /// Set when this voter just became active; handled by the next advance (it needs the time).
    became_active_pending: bool,
    applied_index: u64,
    /// The leader term in which this voter applied an entry of its own: it is active then.
    active_term: Option<u64>,
    passes: Passes,
    /// Entries applied since the last snapshot; a snapshot is taken at
    /// `snapshot_entries` (`METADATA_SNAPSHOT_ENTRIES`, smaller in tests).
    since_snapshot: usize,
    /// Bytes of the entries applied since the last snapshot; a snapshot is taken at
    /// `metadata.log.max.record.bytes.between.snapshots` too.
    since_snapshot_bytes: u64,
    snapshot_entries: usize,
    /// The largest snapshot this voter writes (and every voter reads):
    /// `METADATA_SNAPSHOT_BYTES_MAX`, smaller in tests.
    snapshot_bytes_max: usize,
    /// An upper bound on the snapshot size after the last client change this voter admitted,
    /// with the term it was active in: what [`Self::admit_user_op`] adds each change's growth
    /// to, instead of walking the whole image for every change.
    snapshot_bound: std::cell::Cell<Option<(u64, usize)>>,
    /// Whether the image at this metadata offset has a partition without a leader: looked up
    /// once per image, not on every tick.
    leaderless_at: Option<(u64, bool)>,
    /// The latest time the caller gave (for events that come without one); its monotonic part
    /// never goes back.
    now: Now,
    /// New topic ids (see [`IdSource`]).
    new_id: IdSource,
    /// The commands decided since the caller last took them, in the order they take effect.
    commands: Vec<Command>,
    /// Until a controller-only voter has caught up after starting; `None` on other nodes.
    catch_up: Option<CatchUp>,
}

impl ControllerCore {
    /// A core over `engine`, starting from `image` (the replay of the log up to the snapshot
    /// it recovered, as published).
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        engine: QuorumEngine,
        image: Arc<MetadataImage>,
        proposed_cluster_id: String,
        lifecycle: Option<Lifecycle>,
    ) -> ControllerCore {
        ControllerCore {
            load_reports: Default::default(),
            voter: Voter::new(engine),
            image,
            proposed_cluster_id,
            bootstrap_records: Vec::new(),
            sessions: BrokerSessions::new(lifecycle),
            became_active_pending: false,
            applied_index: 0,
            active_term: None,
            passes: Passes::default(),
            since_snapshot: 0,
            since_snapshot_bytes: 0,
            snapshot_entries: METADATA_SNAPSHOT_ENTRIES,
            snapshot_bytes_max: METADATA_SNAPSHOT_BYTES_MAX,
            snapshot_bound: std::cell::Cell::new(None),
            leaderless_at: None,
            now: Now::default(),
            new_id: Box::new(super::random_uuid),
            commands: Vec::new(),
            catch_up: (!config.kraft.is_broker()).then(|| CatchUp::new(config.node_id)),
            config,
        }
    }

    /// The records the first active controller of a new cluster writes after its id.
    pub(crate) fn set_bootstrap_records(&mut self, records: Vec<MetadataRecord>) {
        self.bootstrap_records = records;
    }

    /// Takes new topic ids from `ids` instead of at random (the simulation's come from its seed).
    #[cfg(test)]
    pub(crate) fn set_id_source(&mut self, ids: IdSource) {
        self.new_id = ids;
    }

    /// Takes the time an event came with.
    fn observe_time(&mut self, now: Now) {
        self.now = Now {
            mono_ms: self.now.mono_ms.max(now.mono_ms),
            wall_ms: now.wall_ms,
        };
    }

    #[cfg(test)]
    pub(crate) fn set_snapshot_entries(&mut self, entries: usize) {
        self.snapshot_entries = entries;
    }

    #[cfg(test)]
    pub(crate) fn set_snapshot_bytes_max(&mut self, bytes: usize) {
        self.snapshot_bytes_max = bytes;
    }

    /// The bound on [`MetadataImage::snapshot_bytes_bound`] past which a client's change is
    /// refused: the snapshot bound less a 1/64 reserve (4 MiB at 256 MiB) for what the
    /// controller's own changes add beyond that bound (broker registrations, producer-id
    /// blocks), so that no snapshot ever needs to be larger than every voter reads.
    fn image_bytes_max(&self) -> usize {
        self.snapshot_bytes_max - self.snapshot_bytes_max / 64
    }

    /// Refuses a client's change that would grow the image past [`Self::image_bytes_max`]
    /// (one that shrinks it is taken even there);
    /// otherwise the image after it.
    ///
    /// The bound is kept as an upper estimate: the last admitted change's bound plus this
    /// change's [`MetadataImage::snapshot_growth_bound`]. Only past half the limit (or on a new
    /// term, when another controller may have admitted changes) is the image walked for its exact
    /// bound, so a client change costs O(its records), not O(image). The controller's own
    /// changes between two client changes add no more than the reserve covers.
    fn admit_user_op(
        &self,
        base: &MetadataImage,
        records: &[MetadataRecord],
    ) -> Result<MetadataImage, ApiError> {
        super::decisions::check_user_op_size(records)?;
        let after = base.apply(records);
        let term = self.voter.engine.term();
        let estimate = match self.snapshot_bound.get() {
            Some((t, bound)) if t == term => bound,
            _ => base.snapshot_bytes_bound(),
        }
        .saturating_add(MetadataImage::snapshot_growth_bound(records));
        let bound = if estimate > self.image_bytes_max() / 2 {
            after.snapshot_bytes_bound()
        } else {
            estimate
        };
        // A change that does not grow the image (a deletion) is taken even past the bound.
        if bound > self.image_bytes_max() && bound > base.snapshot_bytes_bound() {
            // Kafka has no such bound; POLICY_VIOLATION is its answer to an operation the
            // cluster's rules refuse whatever the client retries (its own answer to an
            // operation too large for one batch), where a retriable error would be retried
            // forever.
            return Err(ApiError::PolicyViolation(format!(
                "Unable to perform the operation: the cluster's metadata would grow to {bound} \
                 bytes, past its limit of {} bytes.",
                self.image_bytes_max()
            )));
        }
        self.snapshot_bound.set(Some((term, bound)));
        Ok(after)
    }

    /// Whether this voter is the active controller.
    pub(crate) fn is_active(&self) -> bool {
        self.voter.engine.is_leader() && self.active_term == Some(self.voter.engine.term())
    }

    /// Queues a request; it is decided at the next [`ControllerCore::advance`] that can.
    ///
    /// A heartbeat of a broker's current session renews the session now, on arrival, as
    /// Kafka's `BrokerHeartbeatTracker` notes contact before the event queue: a controller
    /// busy with a large write must not fence the brokers whose heartbeats wait behind it.
    ///
    /// A heartbeat's load report is taken here too, the latest per broker, kept in memory only.
    pub(crate) fn request(&mut self, mut request: Request, now: Now) {
        self.observe_time(now);
        if let Request::BrokerHeartbeat {
            broker_id,
            broker_epoch,
            loads,
            ..
        } = &mut request
        {
            self.sessions
                .heartbeat_arrived(*broker_id, *broker_epoch, self.now.mono_ms);
            if let Some(loads) = loads.take() {
                self.load_reports.insert(
                    *broker_id,
                    LoadReport {
                        broker_epoch: *broker_epoch,
                        at_ms: self.now.mono_ms,
                        loads,
                    },
                );
            }
        }
        self.passes.queued.push_back(request);
    }

    /// Takes a Raft message from a peer on a controller-listener connection (see
    /// [`Voter::peer_message_on`]).
    pub(crate) fn peer_message_on(&mut self, message: Message, connection: u64, now: Now) {
        self.observe_time(now);
        let election_timeout_ms = self.config.kraft.election_timeout_ms;
        if let Some(peer) =
            self.voter
                .peer_message_on(message, connection, self.now, election_timeout_ms)
        {
            self.report(Report::PeerLink {
                voter: peer,
                connection: Some(connection),
            });
        }
    }

    /// A controller-listener connection closed. If it carried the quorum leader's messages,
    /// the leader's process is most likely gone: the voters elect another at once instead of
    /// waiting out the election timeout ([`QuorumEngine::leader_connection_lost`]), so the
    /// controller fails over in a few round trips. A broker whose heartbeats came on it is
    /// fenced.
    pub(crate) fn connection_closed(&mut self, connection: u64, now: Now) {
        self.observe_time(now);
        let fences = self
            .sessions
            .connection_closed(connection, self.is_active(), &self.image);
        self.passes
            .queued
            .extend(fences.into_iter().map(Fence::into_request));
        if let Some(closed) = self.voter.connection_closed(connection) {
            if closed.unbound {
                self.report(Report::PeerLink {
                    voter: closed.peer,
                    connection: None,
                });
            }
            if self.is_active() {
                self.sessions
                    .voter_disconnected(closed.peer, self.now.mono_ms);
            }
        }
    }

    /// Takes a Raft message from a peer (the simulation's network, which has no connections).
    #[cfg(test)]
    pub(crate) fn peer_message(&mut self, message: Message, now: Now) {
        self.observe_time(now);
        if let Err(e) = self.voter.engine.step(message) {
            tracing::debug!(error = %e, "raft message refused");
        }
    }

    pub(crate) fn peer_unreachable(&mut self, peer: u64) {
        self.voter.engine.report_unreachable(peer);
    }

    pub(crate) fn snapshot_sent(&mut self, peer: u64, delivered: bool) {
        self.voter.engine.report_snapshot(peer, delivered);
    }

    /// One tick of the quorum clock, at `now_ms`.
    /// When [`Self::advance`] next has something to do without an event: a campaign, or a
    /// broker session's deadline (between ticks, so a dead broker is fenced at its deadline).
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        let sessions = self
            .is_active()
            .then(|| self.sessions.next_deadline_ms())
            .flatten();
        [self.voter.next_campaign_ms(), sessions]
            .into_iter()
            .flatten()
            .min()
    }

    pub(crate) fn tick(&mut self, now: Now) {
        self.observe_time(now);
        let now_ms = now.mono_ms;
        self.voter.engine.tick();
        if let Some(answer) = self.passes.expire(now_ms) {
            self.answer(answer);
        }
        self.expire_sessions(now_ms);
        self.maybe_rebalance(now_ms);
        self.maybe_balance_load(now_ms);
        self.maybe_elect_unclean_leaders(now_ms);
    }

    fn some_partition_leaderless(&mut self) -> bool {
        let offset = self.image.metadata_offset;
        match self.leaderless_at {
            Some((at, leaderless)) if at == offset => leaderless,
            _ => {
                let leaderless = has_leaderless_partitions(&self.image);
                self.leaderless_at = Some((offset, leaderless));
                leaderless
            }
        }
    }

    /// Queues an unclean election pass when one is due and some partition has no leader,
    /// decided in turn with the requests (the pass itself picks the topics that allow it).
    fn maybe_elect_unclean_leaders(&mut self, now_ms: u64) {
        let wanted = self.is_active() && self.some_partition_leaderless();
        let interval_ms = wanted.then(|| {
            u64::try_from(self.config.elections.unclean_leader_election_interval_ms)
                .unwrap_or(1)
                .max(1)
        });
        if let Some(more) = self.passes.unclean.due(interval_ms, now_ms) {
            self.passes
                .queued
                .push_back(Request::ElectUncleanLeaders { more });
        }
    }

    /// Queues an automatic leader rebalancing pass when one is due (Kafka's
    /// `maybeScheduleNextBalancePartitionLeaders`), decided in turn with the requests.
    fn maybe_rebalance(&mut self, now_ms: u64) {
        let wanted = self.is_active() && self.config.elections.auto_leader_rebalance_enable;
        let interval_ms = wanted.then(|| {
            u64::try_from(self.config.elections.leader_imbalance_check_interval_ms)
                .unwrap_or(1)
                .max(1)
        });
        if let Some(more) = self.passes.rebalance.due(interval_ms, now_ms) {
            self.passes.queued.push_back(Request::Rebalance { more });
        }
    }

    /// Queues a load-balancing pass when one is due (`kafkaiq.leader.balancer=load`, every
    /// `leader.imbalance.check.interval.ms` like the count-based rebalance), with each broker's
    /// latest load report of its current incarnation no older than a session timeout.
    ///
    /// It runs whether or not `auto.leader.rebalance.enable` is on: the balancer has its own
    /// opt-in key. The count-based pass stays consistent with its moves, since each move makes
    /// the new leader the preferred replica.
    fn maybe_balance_load(&mut self, now_ms: u64) {
        let wanted = self.is_active()
            && self.config.elections.leader_balancer == crate::config::LeaderBalancer::Load;
        let interval_ms = wanted.then(|| {
            u64::try_from(self.config.elections.leader_imbalance_check_interval_ms)
                .unwrap_or(1)
                .max(1)
        });
        if self.passes.balance.due(interval_ms, now_ms).is_none() {
            return;
        }
        let max_age_ms = self.config.kraft.broker_session_timeout_ms;
        let image = &self.image;
        let reports = self
            .load_reports
            .iter()
            .filter(|(id, r)| {
                image
                    .broker(**id)
                    .is_some_and(|b| b.broker_epoch == r.broker_epoch)
                    && now_ms.saturating_sub(r.at_ms) <= max_age_ms
            })
            .map(|(&id, r)| (id, r.loads.clone()))
            .collect();
        self.passes.queued.push_back(Request::BalanceLoad {
            reports,
            now_ms: self.now.wall_ms,
        });
    }

    /// Fences brokers whose session passed its deadline.
    fn expire_sessions(&mut self, now_ms: u64) {
        if !self.is_active() {
            return;
        }
        let fences = self
            .sessions
            .expire(now_ms, &self.image, |id| self.passes.heartbeat_pending(id));
        self.passes
            .queued
            .extend(fences.into_iter().map(Fence::into_request));
    }

    /// A new active controller starts a session for every live broker, due after the
    /// failover grace, and writes the cluster id if the log has none yet.
    fn became_active(&mut self, now_ms: u64) {
        // Reports heard in an earlier term are stale; each broker's next heartbeat brings one.
        self.load_reports.clear();
        if self.image.cluster_id.is_empty() {
            self.passes.queued.push_front(Request::BootstrapClusterId {
                cluster_id: self.proposed_cluster_id.clone(),
                records: self.bootstrap_records.clone(),
            });
        }
        self.sessions.became_active(
            &self.image,
            self.voter.engine.node_id(),
            self.voter.engine.voters(),
            &self.voter.connected(),
            now_ms,
        );
    }

    #[cfg(test)]
    pub(crate) fn engine(&self) -> &QuorumEngine {
        &self.voter.engine
    }

    /// Requests waiting, and the last index of the pass in flight (for traces).
    #[cfg(test)]
    pub(crate) fn backlog(&self) -> (usize, Option<u64>) {
        (
            self.passes.queued.len(),
            self.passes.in_flight.as_ref().map(|p| p.last.index),
        )
    }

    /// Refuses everything still waiting (NOT_CONTROLLER; a pass in flight, whose outcome is
    /// unknown, REQUEST_TIMED_OUT). Returns the commands not yet taken, these answers last.
    pub(crate) fn stop(&mut self) -> Vec<Command> {
        for answer in self.passes.stop() {
            self.answer(answer);
        }
        std::mem::take(&mut self.commands)
    }

    /// Queues what a pass owes its callers.
    fn answer(&mut self, answer: Answer) {
        self.commands.push(Command::Answer(answer));
    }

    /// Queues what the node's other threads are told.
    fn report(&mut self, report: Report) {
        self.commands.push(Command::Report(report));
    }

    /// Starts a pass if it can, then polls and applies until nothing more happens. Returns the
    /// commands decided since they were last taken (this and earlier events'), in the order
    /// they must take effect. An error means the committed log does not decode: the caller
    /// stops this voter.
    pub(crate) fn advance(&mut self, now: Now) -> Result<Vec<Command>, ControllerError> {
        self.observe_time(now);
        let now_ms = now.mono_ms;
        self.voter.campaign_if_due(now_ms);
        self.expire_sessions(now_ms);
        loop {
            if std::mem::take(&mut self.became_active_pending) {
                self.became_active(now_ms);
            }
            self.publish_controller_id();
            self.maybe_start_pass(now_ms);
            self.maybe_ask_read_index(now_ms);
            let out = self.voter.engine.poll();
            // The poll's writes take effect before anything of it is sent or applied.
            if !out.persist.is_empty() {
                self.commands.push(Command::Persist(out.persist));
            }
            let progressed = !out.apply.is_empty();
            if !out.messages.is_empty() {
                self.commands.push(Command::Send(out.messages));
            }
            for apply in out.apply {
                self.apply(apply)?;
            }
            self.maybe_caught_up(&out.read_indexes);
            if progressed {
                self.maybe_snapshot();
            }
            let more = self.became_active_pending
                || (!self.passes.queued.is_empty() && self.passes.in_flight.is_none());
            if !progressed || !more {
                return Ok(std::mem::take(&mut self.commands));
            }
        }
    }

    /// Asks the leader for its commit index, while this voter waits to catch up ([`CatchUp`]).
    fn maybe_ask_read_index(&mut self, now_ms: u64) {
        let Some(c) = &mut self.catch_up else {
            return;
        };
        let engine = &mut self.voter.engine;
        if c.read.is_some() || now_ms < c.next_ask_ms || engine.is_leader() {
            return;
        }
        if engine.leader_id() == 0 {
            return;
        }
        c.asked += 1;
        c.next_ask_ms = now_ms + CATCH_UP_ASK_MS;
        if c.asked % 20 == 0 {
            // The listener keeps the stores of server.properties meanwhile.
            tracing::info!(
                asked = c.asked,
                leader = engine.leader_id(),
                "not yet caught up with the metadata quorum: the leader has not answered a read of its commit index"
            );
        }
        engine.read_index(format!("{}{}", c.prefix, c.asked).into_bytes());
    }

    /// Notes the leader's answers, and publishes [`Publish::CaughtUp`] once this voter has
    /// applied as far as the first of them (or leads actively).
    fn maybe_caught_up(&mut self, read_indexes: &[(u64, Vec<u8>)]) {
        let active = self.is_active();
        let Some(c) = &mut self.catch_up else {
            return;
        };
        if c.read.is_none() {
            c.read = read_indexes
                .iter()
                .filter(|(_, context)| context.starts_with(c.prefix.as_bytes()))
                .map(|(index, _)| *index)
                .min();
        }
        let applied = self.applied_index;
        if !(active || c.read.is_some_and(|read| applied >= read)) {
            return;
        }
        tracing::info!(
            applied,
            leader_commit = c.read,
            active,
            "caught up with the metadata quorum"
        );
        self.catch_up = None;
        self.commands.push(Command::Publish(Publish::CaughtUp));
    }

    /// Keeps the image's `controller_id` (what DescribeCluster and Metadata name as the active
    /// controller) on the quorum leader this voter knows.
    fn publish_controller_id(&mut self) {
        let leader = self.voter.engine.leader_id();
        self.report(Report::Leadership {
            active: self.is_active(),
            leader: if leader == 0 { -1 } else { leader as i32 },
        });
        self.describe_quorum();
        if leader == 0 {
            return; // No leader known (raft's "none").
        }
        let leader = leader as i32;
        if self.image.controller_id != leader {
            let mut next = (*self.image).clone();
            next.controller_id = leader;
            self.image = Arc::new(next);
            self.commands
                .push(Command::Publish(Publish::ControllerId(self.image.clone())));
        }
    }

    /// Updates what DescribeQuorum reports: the leader's view of every voter.
    fn describe_quorum(&mut self) {
        let description = self.voter.describe(self.now.wall_ms);
        self.report(Report::Quorum(description));
    }

    fn maybe_start_pass(&mut self, now_ms: u64) {
        if self.passes.in_flight.is_some() || self.passes.queued.is_empty() {
            return;
        }
        if !self.voter.engine.is_leader() {
            let requests = self.passes.queued.drain(..).collect();
            self.answer(Answer::Refused {
                requests,
                error: ApiError::NotController,
            });
            return;
        }
        if !self.is_active() {
            // A new leader first applies an entry of its own term; requests wait for that.
            return;
        }
        let take = self.passes.queued.len().min(CONTROLLER_BATCH_REQUESTS_MAX);
        let mut working: Option<MetadataImage> = None;
        // Each decided request's records, kept apart so that none is split across log entries.
        let mut records: Vec<Vec<MetadataRecord>> = Vec::new();
        let mut finishes = Vec::with_capacity(take);
        let mut heartbeats = Vec::new();
        let mut heartbeat_brokers = Vec::new();
        let taken: Vec<Request> = self.passes.queued.drain(..take).collect();
        for mut request in taken {
            let duplicate =
                self.sessions
                    .is_duplicate_registration(&request, &self.image, now_ms, |id| {
                        self.passes.heartbeat_pending(id)
                    });
            if duplicate {
                self.answer(Answer::Refused {
                    requests: vec![request],
                    error: ApiError::DuplicateBrokerRegistration,
                });
                continue;
            }
            self.sessions.observe(&mut request, &self.image, now_ms);
            let heartbeat = match &request {
                Request::BrokerHeartbeat { broker_id, .. } => Some(*broker_id),
                _ => None,
            };
            let user_op = request.is_user_op();
            let decided = decide(
                &self.config,
                working.as_ref().unwrap_or(&self.image),
                request,
                self.now.wall_ms,
                &mut self.new_id,
            );
            if user_op && !decided.records.is_empty() {
                let base = working.as_ref().unwrap_or(&self.image);
                match self.admit_user_op(base, &decided.records) {
                    Ok(after) => {
                        working = Some(after);
                        records.push(decided.records);
                        finishes.push(decided.finish);
                    }
                    Err(error) => self.answer(Answer::Failed {
                        finishes: vec![decided.finish],
                        error,
                    }),
                }
                continue;
            }
            if !decided.records.is_empty() {
                working
                    .get_or_insert_with(|| (*self.image).clone())
                    .apply_in_place(&decided.records);
                records.push(decided.records);
            }
            match heartbeat {
                Some(broker_id) => {
                    heartbeats.push(decided.finish);
                    heartbeat_brokers.push(broker_id);
                }
                None => finishes.push(decided.finish),
            }
        }
        if records.is_empty() {
            self.answer(Answer::Unchanged {
                image: self.image.clone(),
                finishes: heartbeats.into_iter().chain(finishes).collect(),
            });
            return;
        }
        match self.propose(&records) {
            Ok(last) => {
                self.passes.in_flight = Some(InFlight {
                    last,
                    finishes,
                    heartbeats,
                    heartbeat_brokers,
                    deadline_ms: now_ms + CONTROLLER_WRITE_TIMEOUT_MS,
                    proposed_ms: now_ms,
                });
            }
            Err(error) => self.answer(Answer::Failed {
                finishes: heartbeats.into_iter().chain(finishes).collect(),
                error,
            }),
        }
    }

    /// Proposes the records of a pass, one group per decided request, as entries of at most
    /// [`METADATA_RECORD_BYTES_MAX`] each: a group never spans entries unless it alone is larger
    /// (only the controller's own changes can be; a client's are bounded by
    /// [`super::decisions::check_user_op_size`]), so a client's change commits whole or not at
    /// all. Returns the last entry's place.
    fn propose(&mut self, groups: &[Vec<MetadataRecord>]) -> Result<Proposal, ApiError> {
        let entries = pack_entries(groups)?;
        let mut last = None;
        for data in entries {
            last = Some(
                self.voter
                    .engine
                    .propose(data)
                    .map_err(|_| ApiError::NotController)?,
            );
        }
        last.ok_or_else(|| ApiError::UnknownServerError("a pass with no records".into()))
    }

    fn apply(&mut self, apply: Apply) -> Result<(), ControllerError> {
        match apply {
            Apply::Entry(committed) => {
                assert!(
                    committed.index > self.applied_index,
                    "metadata entry {} applied after {}",
                    committed.index,
                    self.applied_index
                );
                self.applied_index = committed.index;
                self.since_snapshot += 1;
                self.since_snapshot_bytes += committed.data.len() as u64;
                // Every entry moves the image's metadata offset, a new leader's empty one too,
                // so the offset means the same on every node (a snapshot's is its index).
                let records = MetadataRecord::decode_all(&committed.data).map_err(|e| {
                    ControllerError::Corrupt {
                        offset: committed.index,
                        reason: e.to_string(),
                    }
                })?;
                let before = self.image.clone();
                let mut next = (*self.image).clone();
                next.apply_batch(committed.index, &records);
                self.image = Arc::new(next);
                self.commands.push(Command::Publish(Publish::Entry {
                    image: self.image.clone(),
                    index: committed.index,
                    data: bytes::Bytes::from(committed.data),
                }));
                if self.active_term == Some(committed.term) {
                    self.count_elections(&before);
                }
                if self.voter.engine.is_leader()
                    && committed.term == self.voter.engine.term()
                    && self.active_term != Some(committed.term)
                {
                    tracing::info!(
                        term = committed.term,
                        offset = committed.index,
                        "active controller"
                    );
                    self.active_term = Some(committed.term);
                    self.became_active_pending = true;
                }
                if let Some(answer) =
                    self.passes
                        .resolve(committed.index, committed.term, &self.image)
                {
                    self.answer(answer);
                }
            }
            Apply::Snapshot { index, term, data } => {
                let records =
                    MetadataRecord::decode_all(&data).map_err(|e| ControllerError::Corrupt {
                        offset: index,
                        reason: format!("snapshot: {e}"),
                    })?;
                // The snapshot's records hold the cluster id.
                let mut image = MetadataImage::empty(String::new(), self.image.controller_id);
                image.apply_in_place(&records);
                image.metadata_offset = index;
                self.image = Arc::new(image);
                self.commands
                    .push(Command::Publish(Publish::Snapshot(self.image.clone())));
                self.applied_index = index;
                self.since_snapshot = 0;
                self.since_snapshot_bytes = 0;
                // A snapshot from the leader covers whatever this voter had proposed; whether
                // its own entries made it is unknown.
                if let Some(answer) = self.passes.snapshot_installed(index) {
                    self.answer(answer);
                }
                let _ = term;
            }
        }
        Ok(())
    }

    /// Counts the leaders the entry just applied elected (only the active controller counts,
    /// so a sum over the cluster's nodes is the cluster's count, as with Kafka's meters).
    fn count_elections(&mut self, before: &MetadataImage) {
        let elections = super::elections::elections(before, &self.image);
        if elections.is_empty() {
            return;
        }
        let elapsed_ms = self.passes.in_flight_for_ms(self.now.mono_ms) as f64;
        for e in &elections {
            tracing::debug!(topic = %e.topic, partition = e.partition, from = e.previous_leader, to = e.leader, reason = e.reason.as_str(), "leader elected");
            self.report(Report::Elected {
                reason: e.reason,
                elapsed_ms,
            });
        }
    }

    fn maybe_snapshot(&mut self) {
        if self.since_snapshot < self.snapshot_entries
            && self.since_snapshot_bytes < self.config.kraft.metadata_snapshot_record_bytes
        {
            return;
        }
        let mut data = Vec::new();
        for r in self.image.to_records() {
            // Every record of the image was encoded once already.
            r.encode(&mut data).expect("a record of the image encodes");
        }
        if data.len() > self.snapshot_bytes_max {
            // Never written: no voter would read it back. Client changes are refused well
            // before this; the log keeps its entries (replay stays correct, only longer).
            tracing::error!(
                offset = self.applied_index,
                bytes = data.len(),
                max = self.snapshot_bytes_max,
                "metadata snapshot not taken: the image is larger than a snapshot may be"
            );
            self.since_snapshot = 0;
            self.since_snapshot_bytes = 0;
            return;
        }
        if let Some(write) = self.voter.engine.compact(self.applied_index, data) {
            self.commands.push(Command::Persist(vec![write]));
        }
        self.since_snapshot = 0;
        self.since_snapshot_bytes = 0;
        tracing::info!(offset = self.applied_index, "metadata snapshot taken");
    }
}

/// The log entries a pass's groups of records become (see `ControllerCore::propose`).
fn pack_entries(groups: &[Vec<MetadataRecord>]) -> Result<Vec<Vec<u8>>, ApiError> {
    let mut entries: Vec<Vec<u8>> = vec![Vec::new()];
    for group in groups {
        let encoded = encode_group(group)?;
        let current = entries.last_mut().expect("at least one");
        if current.len() + encoded.iter().map(Vec::len).sum::<usize>() <= METADATA_RECORD_BYTES_MAX
        {
            encoded
                .iter()
                .for_each(|one| current.extend_from_slice(one));
            continue;
        }
        entries.push(Vec::new());
        for one in encoded {
            let current = entries.last_mut().expect("at least one");
            if current.len() + one.len() > METADATA_RECORD_BYTES_MAX {
                entries.push(one);
            } else {
                current.extend_from_slice(&one);
            }
        }
    }
    entries.retain(|e| !e.is_empty());
    Ok(entries)
}

/// Each record of a group encoded on its own, each checked against [`METADATA_RECORD_BYTES_MAX`].
fn encode_group(group: &[MetadataRecord]) -> Result<Vec<Vec<u8>>, ApiError> {
    group
        .iter()
        .map(|r| {
            let mut one = Vec::new();
            r.encode(&mut one)
                .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
            if one.len() > METADATA_RECORD_BYTES_MAX {
                return Err(ApiError::InvalidRequest(format!(
                    "a metadata record of {} bytes exceeds {METADATA_RECORD_BYTES_MAX}",
                    one.len()
                )));
            }
            Ok(one)
        })
        .collect()
}

/// The thread's clocks: the only place the controller reads the time.
struct Clocks {
    started: Instant,
}

impl Clocks {
    fn now(&self) -> Now {
        Now {
            mono_ms: self.started.elapsed().as_millis() as u64,
            wall_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
        }
    }
}

/// The controller thread's loop: events from `events` (requests, each returning its permit to
/// `permits`), ticks every [`TICK`], and after each batch of events one
/// [`ControllerCore::advance`], whose commands take effect through `effects` (the messages they
/// send go to `outbox`). `replayed` is told once the log is replayed as far as this voter knows
/// it committed. `peers_queued` counts the Raft messages
/// waiting in `events` (the channel's senders drop those beyond
/// [`crate::limits::RAFT_INBOUND_QUEUE_MESSAGES_MAX`]). Runs until shutdown (`Ok`) or until the
/// voter cannot go on (the error says why; the node must stop).
pub(crate) fn run<D: Durable>(
    mut core: ControllerCore,
    mut effects: Effects<D>,
    events: Receiver<Event>,
    permits: Arc<Semaphore>,
    peers_queued: Arc<AtomicUsize>,
    replayed: tokio::sync::oneshot::Sender<()>,
    mut outbox: Outbox,
) -> Result<(), ControllerError> {
    let clocks = Clocks {
        started: Instant::now(),
    };
    let mut next_tick = Instant::now() + TICK;
    match advance(&mut core, &mut effects, clocks.now()) {
        Ok(messages) => outbox(messages),
        Err(e) => {
            stop(core, effects, &events);
            return Err(e);
        }
    }
    // The replayed image is in the cache (and acted on) before anyone is told it is ready.
    effects.publisher().after_delivered(move || {
        let _ = replayed.send(());
    });
    loop {
        let mut wait = next_tick.saturating_duration_since(Instant::now());
        if let Some(due) = core.next_due_ms() {
            wait = wait.min(Duration::from_millis(
                due.saturating_sub(clocks.now().mono_ms),
            ));
        }
        let first = match events.recv_timeout(wait) {
            Ok(event) => Some(event),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Take what else is waiting, so one poll (one fsync) serves many events.
        let mut batch: Vec<Event> = first.into_iter().collect();
        while batch.len() < CONTROLLER_BATCH_REQUESTS_MAX {
            match events.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        let mut shutdown = false;
        let now = clocks.now();
        for event in batch {
            match event {
                Event::Request(r) => {
                    permits.add_permits(1);
                    core.request(r, now);
                }
                Event::Peer {
                    message,
                    connection,
                } => {
                    peers_queued.fetch_sub(1, Ordering::Relaxed);
                    core.peer_message_on(message, connection, now)
                }
                Event::ConnectionClosed(connection) => core.connection_closed(connection, now),
                Event::PeerUnreachable(peer) => core.peer_unreachable(peer),
                Event::SnapshotSent { peer, delivered } => core.snapshot_sent(peer, delivered),
                Event::Shutdown => shutdown = true,
            }
        }
        if shutdown {
            break;
        }
        if Instant::now() >= next_tick {
            core.tick(clocks.now());
            next_tick = Instant::now() + TICK;
        }
        match advance(&mut core, &mut effects, clocks.now()) {
            Ok(messages) if !messages.is_empty() => outbox(messages),
            Ok(_) => {}
            Err(e) => {
                stop(core, effects, &events);
                return Err(e);
            }
        }
    }
    stop(core, effects, &events);
    Ok(())
}

/// One [`ControllerCore::advance`] and its commands carried out: the messages to send.
fn advance<D: Durable>(
    core: &mut ControllerCore,
    effects: &mut Effects<D>,
    now: Now,
) -> Result<Vec<Message>, ControllerError> {
    let commands = core.advance(now)?;
    effects.carry_out(commands)
}

fn stop<D: Durable>(mut core: ControllerCore, mut effects: Effects<D>, events: &Receiver<Event>) {
    // Only answers are left to carry out (the writes of a voter that stops on a failed write
    // are not retried: every answer of a pass after it then says its outcome is unknown).
    if let Err(e) = effects.carry_out(core.stop()) {
        tracing::debug!(error = %e, "writes of a stopping controller not made durable");
    }
    while let Ok(event) = events.try_recv() {
        if let Event::Request(r) = event {
            r.refuse(ApiError::NotController);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` records of about 60 KB each.
    fn group(count: usize) -> Vec<MetadataRecord> {
        (0..count)
            .map(|i| MetadataRecord::TopicConfig {
                topic_id: uuid::Uuid::from_u128(i as u128),
                name: "x".into(),
                value: Some("v".repeat(60_000)),
            })
            .collect()
    }

    fn decoded_lengths(entries: &[Vec<u8>]) -> Vec<usize> {
        entries
            .iter()
            .map(|e| MetadataRecord::decode_all(e).unwrap().len())
            .collect()
    }

    #[test]
    fn a_request_s_records_never_straddle_two_entries_unless_alone_too_large() {
        // Ten and ten fit one entry each, not together: the second group starts an entry
        // rather than putting part of itself in the first.
        let entries = pack_entries(&[group(10), group(10), group(2)]).unwrap();
        assert_eq!(decoded_lengths(&entries), vec![10, 12]);
        assert!(entries.iter().all(|e| e.len() <= METADATA_RECORD_BYTES_MAX));
        // A group larger than an entry (only the controller's own) is split by records.
        let entries = pack_entries(&[group(2), group(30)]).unwrap();
        assert_eq!(decoded_lengths(&entries), vec![2, 17, 13]);
    }
}
