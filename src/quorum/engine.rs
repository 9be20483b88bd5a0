//! One voter of the metadata quorum, as a synchronous engine over the `raft` crate (TiKV's
//! raft-rs): inputs are ticks, messages from peers and proposals; [`QuorumEngine::poll`]
//! returns what the caller must do — the writes to make durable ([`Persist`]) first, then
//! messages to send and committed entries and snapshots to apply, in order.
//!
//! No I/O at all, no clock (a tick is a unit of time the caller chooses), no threads: the
//! controller runs it on its own thread, and the simulation runs many of them in one loop from
//! a seed.

use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use raft::{RawNode, StateRole};

use super::admit;
use super::durable::{EntryCheck, Persist, Recovered};
use super::storage::RaftStore;

/// Timing and identity of one voter, in ticks.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    pub node_id: u64,
    /// Every voter, this one included, the same list on every node.
    pub voters: Vec<u64>,
    /// A follower that hears nothing from a leader for a random time in
    /// `[election_ticks, 2 × election_ticks)` campaigns.
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    /// When set, this voter's election timeout is exactly this many ticks instead of a random
    /// one (the library draws from the thread's RNG): a simulation gives each voter a
    /// different fixed timeout so that a seed replays exactly.
    pub fixed_election_ticks: Option<usize>,
}

/// A committed entry, to be applied in index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub index: u64,
    pub term: u64,
    /// An encoded batch of metadata records; empty for a new leader's first entry.
    pub data: Vec<u8>,
}

/// What the caller applies, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Apply {
    Entry(Committed),
    /// Replace the state with the snapshot's (sent by the leader to a voter far behind).
    Snapshot {
        index: u64,
        term: u64,
        data: Vec<u8>,
    },
}

/// What one [`QuorumEngine::poll`] produced. The caller makes `persist` durable, in order,
/// before it sends any of `messages` or applies any of `apply` (Raft's rule: what a message
/// says was written must survive a crash).
#[derive(Debug, Default)]
pub struct Output {
    pub persist: Vec<Persist>,
    pub messages: Vec<Message>,
    pub apply: Vec<Apply>,
    /// Answers to [`QuorumEngine::read_index`]: the commit index the leader confirmed, while a
    /// quorum still followed it, after a request reached it, with that request's context.
    pub read_indexes: Vec<(u64, Vec<u8>)>,
}

/// Where a proposal landed in the log; it is committed if the entry applied at `index` has
/// `term`, and lost if another term's entry is applied there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    pub term: u64,
    pub index: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("not the quorum leader")]
    NotLeader,
    #[error("proposal of {0} bytes refused by the log")]
    Refused(usize),
}

/// Why a message from the network was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    #[error("message for node {to}, this is node {me}")]
    WrongNode { to: u64, me: u64 },
    #[error("message from {0}, which is not a voter")]
    NotAVoter(u64),
    #[error("message type {0:?} never travels between voters")]
    LocalType(MessageType),
    #[error("message of type {0:?} without a term")]
    NoTerm(MessageType),
    #[error("term {0} beyond the largest epoch (2^31 - 1)")]
    TermTooLarge(u64),
    #[error("index {0} beyond the largest offset (2^63 - 1)")]
    IndexTooLarge(u64),
    #[error("a leader's message from voter {from} in the term voter {leader} leads")]
    SecondLeader { from: u64, leader: u64 },
    #[error("a new term from voter {from} while leader {leader} is heard")]
    LeaderInLease { from: u64, leader: u64 },
    #[error("message inconsistent with the log: {0}")]
    Inconsistent(String),
    #[error("rejected by the raft library: {0}")]
    Library(String),
}

/// ReadIndex requests a leader keeps waiting for a quorum's acknowledgement at once; more are
/// refused (the requester asks again).
const READ_INDEX_PENDING_MAX: usize = 16;

/// A forwarded ReadIndex request with nothing but what the leader needs: type, sender, receiver
/// and the one context entry.
fn read_index_request(m: &Message) -> Message {
    let mut minimal = Message::default();
    minimal.set_msg_type(MessageType::MsgReadIndex);
    minimal.from = m.from;
    minimal.to = m.to;
    let mut context = Entry::default();
    context.data = m.entries[0].data.clone();
    minimal.set_entries(vec![context].into());
    minimal
}

/// What the quorum looks like from this voter (DescribeQuorum).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterStatus {
    pub node_id: u64,
    /// The highest index known to be in this voter's log (on the leader: its match index).
    pub log_end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: u64,
    pub leader_id: u64,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    pub is_leader: bool,
    pub voters: Vec<VoterStatus>,
}

pub struct QuorumEngine {
    node: RawNode<RaftStore>,
    store: RaftStore,
    node_id: u64,
    voters: Vec<u64>,
    /// The snapshot recovery found, handed to the caller by the first poll.
    recovered: Option<Apply>,
    entry_check: EntryCheck,
}

/// The raft library logs through slog; this forwards its records to `tracing` at debug level.
struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record<'_>, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "kafkaiq::quorum::raft", "{}", record.msg())
            }
            slog::Level::Warning => {
                tracing::warn!(target: "kafkaiq::quorum::raft", "{}", record.msg())
            }
            _ => tracing::trace!(target: "kafkaiq::quorum::raft", "{}", record.msg()),
        }
        Ok(())
    }
}

impl QuorumEngine {
    /// Starts the voter as a follower from what was durable (`Durable::recover`). The first
    /// poll hands out the recovered snapshot (if any), then the entries committed after it, to
    /// be applied again: the caller's state is rebuilt by the same path that built it.
    pub fn open(config: &QuorumConfig, mut recovered: Recovered) -> QuorumEngine {
        let applied = recovered.snapshot.get_metadata().index;
        // The commit index is not written on every change (it can be learnt again), but a
        // snapshot is only ever taken of committed entries.
        recovered.hard_state.commit = recovered.hard_state.commit.max(applied);
        let snapshot_apply = (applied > 0).then(|| Apply::Snapshot {
            index: applied,
            term: recovered.snapshot.get_metadata().term,
            data: recovered.snapshot.data.to_vec(),
        });
        let store = RaftStore::new(
            recovered.hard_state,
            recovered.snapshot,
            recovered.entries,
            config.voters.clone(),
        );
        let raft_config = raft::Config {
            id: config.node_id,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied,
            // A leader steps down when it stops hearing from a majority, and a voter cut off
            // from the quorum cannot disturb it by campaigning on return (pre-vote).
            check_quorum: true,
            pre_vote: true,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
            min_election_tick: config.fixed_election_ticks.unwrap_or(0),
            max_election_tick: config.fixed_election_ticks.map_or(0, |t| t + 1),
            ..Default::default()
        };
        raft_config
            .validate()
            .unwrap_or_else(|e| panic!("invalid quorum timing {config:?}: {e}"));
        let logger = slog::Logger::root(TracingDrain, slog::o!());
        let node = RawNode::new(&raft_config, store.clone(), &logger)
            .unwrap_or_else(|e| panic!("cannot start the raft node: {e}"));
        let mut engine = QuorumEngine {
            node,
            store,
            node_id: config.node_id,
            voters: config.voters.clone(),
            recovered: snapshot_apply,
            entry_check: |_| Ok(()),
        };
        // A quorum of one needs no election timeout to know it leads.
        if engine.voters == [engine.node_id] {
            let _ = engine.node.campaign();
        }
        engine
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    pub fn voters(&self) -> &[u64] {
        &self.voters
    }

    pub fn tick(&mut self) {
        self.node.tick();
    }

    /// Starts an election now rather than after the election timeout. Pre-vote keeps this
    /// from disturbing a leader the others still hear.
    pub fn campaign(&mut self) {
        let _ = self.node.campaign();
    }

    /// The connection carrying `leader`'s messages closed: its process is most likely gone.
    /// This voter stops honouring the leader's lease, so it grants another voter's pre-vote
    /// and vote at once instead of after the election timeout. Returns this voter's rank among
    /// the other voters (0 = lowest id), by which the caller staggers campaigns so that two do
    /// not split the vote; `None` if `leader` is not whom this voter follows. A leader that is
    /// in fact alive keeps its followers with its next heartbeat.
    pub fn leader_connection_lost(&mut self, leader: u64) -> Option<usize> {
        if self.node.raft.leader_id != leader || self.is_leader() {
            return None;
        }
        let timeout = self.node.raft.election_timeout();
        self.node.raft.election_elapsed = self.node.raft.election_elapsed.max(timeout);
        let mut others: Vec<u64> = self
            .voters
            .iter()
            .copied()
            .filter(|v| *v != leader)
            .collect();
        others.sort_unstable();
        others.iter().position(|v| *v == self.node_id)
    }

    /// Takes one message from a peer, once [`admit::check`] found nothing a correct voter
    /// could not have sent; a heartbeat's commit index beyond this voter's log is disregarded.
    pub fn step(&mut self, mut message: Message) -> Result<(), StepError> {
        let raft = &self.node.raft;
        let last_index = raft.raft_log.last_index();
        let in_lease = raft.state == StateRole::Follower
            && raft.leader_id != raft::INVALID_ID
            && raft.election_elapsed < raft.election_timeout();
        let local = admit::Local {
            node_id: self.node_id,
            voters: &self.voters,
            term: raft.term,
            last_index,
            committed: raft.raft_log.committed,
            // A snapshot just received and not yet polled counts too.
            snapshot_term: raft
                .raft_log
                .term(raft.raft_log.first_index() - 1)
                .unwrap_or(0),
            is_leader: self.is_leader(),
            leader: (raft.leader_id != raft::INVALID_ID).then_some(raft.leader_id),
            leader_in_lease: in_lease.then_some(raft.leader_id),
        };
        admit::check(&message, &local, self.entry_check)?;
        if admit::disregard_commit_beyond_log(&mut message, last_index) {
            tracing::debug!(
                from = message.from,
                last_index,
                "heartbeat's commit index beyond this voter's log disregarded"
            );
        }
        if message.get_msg_type() == MessageType::MsgReadIndex {
            // The library keeps a ReadIndex request whole until a quorum has acknowledged it:
            // only its context is kept, and only a few wait at once.
            if self.node.raft.pending_read_count() >= READ_INDEX_PENDING_MAX {
                return Err(StepError::Inconsistent(format!(
                    "{READ_INDEX_PENDING_MAX} read-index requests wait already"
                )));
            }
            message = read_index_request(&message);
        }
        self.note_lost_entries(&message);
        self.node
            .step(message)
            .map_err(|e| StepError::Library(e.to_string()))
    }

    /// A follower's rejection saying its log ends before what it acknowledged: it lost entries
    /// (its disk, most likely). The library would take the rejection as stale and probe from
    /// the acknowledged index forever; its progress is moved back to where the log really
    /// ends, so the leader sends it entries (or a snapshot) from there. Lowering a match index
    /// only ever delays a commit.
    fn note_lost_entries(&mut self, m: &Message) {
        if !self.is_leader()
            || m.get_msg_type() != MessageType::MsgAppendResponse
            || !m.reject
            || m.term != self.node.raft.term
        {
            return;
        }
        if let Some(progress) = self.node.raft.mut_prs().get_mut(m.from) {
            if m.reject_hint < progress.matched {
                tracing::warn!(
                    voter = m.from,
                    acknowledged = progress.matched,
                    log_end = m.reject_hint,
                    "a voter's log ends before what it acknowledged (lost disk?); resending from its log end"
                );
                progress.matched = m.reject_hint;
                progress.become_probe();
            }
        }
    }

    /// Sets what an entry's data must decode as (default: anything); an append or snapshot
    /// whose data does not is refused before it reaches the log.
    pub fn set_entry_check(&mut self, check: EntryCheck) {
        self.entry_check = check;
    }

    pub fn is_leader(&self) -> bool {
        self.node.raft.state == StateRole::Leader
    }

    /// Campaigning, but not yet past the pre-vote (no term was spent).
    pub fn is_pre_candidate(&self) -> bool {
        self.node.raft.state == StateRole::PreCandidate
    }

    pub fn leader_id(&self) -> u64 {
        self.node.raft.leader_id
    }

    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// Appends `data` (an encoded batch of records) to the log, if this voter leads.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Proposal, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader);
        }
        let size = data.len();
        let before = self.node.raft.raft_log.last_index();
        self.node
            .propose(Vec::new(), data)
            .map_err(|_| ProposeError::Refused(size))?;
        let index = self.node.raft.raft_log.last_index();
        debug_assert_eq!(index, before + 1);
        Ok(Proposal {
            term: self.node.raft.term,
            index,
        })
    }

    /// Asks the leader for its commit index (Raft's ReadIndex): the leader confirms it still
    /// leads with a heartbeat round, and a later [`QuorumEngine::poll`] returns the index in
    /// [`Output::read_indexes`]. Once this voter has applied that far, it holds everything
    /// committed before the request. Dropped without an answer when no leader is known, or
    /// when the leader has not yet committed an entry of its own term: ask again. `context`
    /// tells requests apart (a repeated one that is still pending is ignored).
    pub fn read_index(&mut self, context: Vec<u8>) {
        self.node.read_index(context);
    }

    /// Handles everything the library has ready, and returns the entries, hard state and
    /// received snapshots to make durable, the messages and what to apply (see [`Output`] for
    /// the order the caller keeps). Call after every input.
    pub fn poll(&mut self) -> Output {
        let mut out = Output::default();
        out.apply.extend(self.recovered.take());
        while self.node.has_ready() {
            let mut ready = self.node.ready();
            out.messages.extend(ready.take_messages());
            out.read_indexes.extend(
                ready
                    .take_read_states()
                    .into_iter()
                    .map(|r| (r.index, r.request_ctx)),
            );
            if !ready.snapshot().is_empty() {
                let snapshot = ready.snapshot().clone();
                out.persist.push(Persist::Snapshot {
                    snapshot: snapshot.clone(),
                    keep_later: false,
                });
                let meta = snapshot.get_metadata();
                out.apply.push(Apply::Snapshot {
                    index: meta.index,
                    term: meta.term,
                    data: snapshot.data.to_vec(),
                });
                self.store.apply_snapshot(snapshot);
            }
            Self::collect(&mut out, ready.take_committed_entries());
            if !ready.entries().is_empty() {
                out.persist.push(Persist::Entries(ready.entries().to_vec()));
                self.store.append(ready.entries());
            }
            if let Some(hs) = ready.hs() {
                out.persist.push(Persist::HardState(hs.clone()));
                self.store.set_hard_state(hs.clone());
            }
            out.messages.extend(ready.take_persisted_messages());
            let mut light = self.node.advance(ready);
            if let Some(commit) = light.commit_index() {
                self.store.set_commit(commit);
            }
            out.messages.extend(light.take_messages());
            Self::collect(&mut out, light.take_committed_entries());
            self.node.advance_apply();
        }
        out
    }

    fn collect(out: &mut Output, entries: Vec<Entry>) {
        for e in entries {
            // Membership changes are not used (the voters are configured); a conf-change entry
            // would be applied by the library, not by the metadata image.
            if e.get_entry_type() != EntryType::EntryNormal {
                continue;
            }
            out.apply.push(Apply::Entry(Committed {
                index: e.index,
                term: e.term,
                data: e.data.to_vec(),
            }));
        }
    }

    /// Takes a snapshot of the caller's state as of `applied` (an index it has applied) and
    /// drops the log entries it covers, so the log and replay stay bounded. Returns the write
    /// that makes it durable (`None` if a snapshot covers `applied` already).
    pub fn compact(&mut self, applied: u64, data: Vec<u8>) -> Option<Persist> {
        let term = self.store.term_of(applied)?;
        let mut snapshot = Snapshot::default();
        snapshot.data = data.into();
        let meta = snapshot.mut_metadata();
        meta.index = applied;
        meta.term = term;
        let mut cs = ConfState::default();
        cs.voters = self.store.voters();
        meta.set_conf_state(cs);
        self.store.compact_to(snapshot.clone());
        Some(Persist::Snapshot {
            snapshot,
            keep_later: true,
        })
    }

    /// Entries in the log after the latest snapshot.
    pub fn log_entries(&self) -> usize {
        self.store.entry_count()
    }

    /// The latest snapshot's (index, term).
    pub fn snapshot_metadata(&self) -> (u64, u64) {
        self.store.snapshot_metadata()
    }

    /// Tells the library whether a snapshot message reached `peer`: until it is told, the leader
    /// sends that peer nothing more. The transport reports a failure when the connection the
    /// snapshot went on fails, and success once it is written.
    pub fn report_snapshot(&mut self, peer: u64, delivered: bool) {
        let status = if delivered {
            raft::SnapshotStatus::Finish
        } else {
            raft::SnapshotStatus::Failure
        };
        self.node.report_snapshot(peer, status);
    }

    /// Tells the library a peer could not be reached, so it stops pipelining to it.
    pub fn report_unreachable(&mut self, peer: u64) {
        self.node.report_unreachable(peer);
    }

    pub fn status(&self) -> QuorumStatus {
        let raft = &self.node.raft;
        let is_leader = raft.state == StateRole::Leader;
        let last = raft.raft_log.last_index();
        let voters = self
            .voters
            .iter()
            .map(|&id| {
                let log_end = if id == self.node_id {
                    last
                } else if is_leader {
                    raft.prs().get(id).map_or(0, |p| p.matched)
                } else {
                    0
                };
                VoterStatus {
                    node_id: id,
                    log_end,
                }
            })
            .collect();
        QuorumStatus {
            node_id: self.node_id,
            leader_id: raft.leader_id,
            term: raft.term,
            commit: raft.raft_log.committed,
            applied: raft.raft_log.applied,
            is_leader,
            voters,
        }
    }
}
