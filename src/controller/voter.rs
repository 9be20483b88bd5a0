//! This node's voter of the metadata quorum as the controller drives it: the quorum engine,
//! the staggered campaigns after the leader's connection closes, and the bookkeeping of which
//! controller-listener connection carries each peer voter's messages. Each input comes with
//! the time it happens at (from the controller's caller); no clock, no I/O.

use std::collections::{BTreeMap, BTreeSet};

use raft::eraftpb::Message;

use super::driver::Now;
use super::forward::{QuorumDescription, VoterDescription};
use crate::quorum::QuorumEngine;

/// Between the campaigns of the voters that lost their leader's connection, in rank order: the
/// first campaigns at once, the next only if no leader emerged by then.
const CAMPAIGN_STAGGER_MS: u64 = 150;

/// A voter still a pre-candidate this long after campaigning campaigns again, at most
/// [`CAMPAIGN_RETRIES`] times: its pre-vote may have reached a voter that had not yet seen the
/// leader's connection close and still honoured the lease, which ignores it without answering.
const CAMPAIGN_RETRY_MS: u64 = 30;
const CAMPAIGN_RETRIES: u8 = 3;

/// A controller-listener connection that carried a peer voter's messages closed.
pub(crate) struct PeerClosed {
    pub(crate) peer: u64,
    /// It was the peer's latest connection: the peer has none bound now.
    pub(crate) unbound: bool,
}

pub(crate) struct Voter {
    pub(crate) engine: QuorumEngine,
    /// After the leader's connection closed: campaign this many ms from then (this voter's
    /// rank × [`CAMPAIGN_STAGGER_MS`]) unless a leader other than the lost one is known.
    campaign_after: Option<(u64, u64)>,
    /// When to campaign (again), for the loss of which leader, after how many attempts.
    campaign_due_ms: Option<(u64, u64, u8)>,
    /// Controller-listener connections carrying a peer voter's messages, by connection id.
    peer_connections: BTreeMap<u64, u64>,
    /// Each peer voter's latest connection, and when (quorum clock) it last carried a message
    /// the voter accepted.
    peer_bound: BTreeMap<u64, (u64, u64)>,
    /// Wall-clock ms of the last message from each peer, and of when each voter last had every
    /// entry (DescribeQuorum's timestamps; reporting only, never a decision).
    peer_seen_ms: BTreeMap<u64, i64>,
    peer_caught_up_ms: BTreeMap<u64, i64>,
}

impl Voter {
    pub(crate) fn new(engine: QuorumEngine) -> Voter {
        Voter {
            engine,
            campaign_after: None,
            campaign_due_ms: None,
            peer_connections: BTreeMap::new(),
            peer_bound: BTreeMap::new(),
            peer_seen_ms: BTreeMap::new(),
            peer_caught_up_ms: BTreeMap::new(),
        }
    }

    /// Takes a Raft message from a peer, noting which connection carries that peer's messages:
    /// when it closes, the peer's process is gone (or cut off). Returns the peer whose
    /// connection it marked.
    ///
    /// Only a message the voter accepts, of this voter's term or later, marks its connection:
    /// a confused peer (a wrong node id, a stale term) cannot make a closed connection look like
    /// the leader's and start an election.
    pub(crate) fn peer_message_on(
        &mut self,
        message: Message,
        connection: u64,
        now: Now,
        election_timeout_ms: u64,
    ) -> Option<u64> {
        let (from, term) = (message.from, message.term);
        if let Err(reason) = self.check_peer_connection(from, connection, now, election_timeout_ms)
        {
            tracing::debug!(from, connection, reason, "raft message refused");
            return None;
        }
        let current = self.engine.term();
        match self.engine.step(message) {
            Ok(()) if term >= current => {
                self.peer_connections.insert(connection, from);
                self.peer_bound.insert(from, (connection, now.mono_ms));
                self.peer_seen_ms.insert(from, now.wall_ms);
                Some(from)
            }
            Ok(()) => None,
            Err(e) => {
                tracing::debug!(error = %e, "raft message refused");
                None
            }
        }
    }

    /// A voter's messages come on one connection (its transport keeps one per peer). A message
    /// in its name on another, while that one is open and was heard within the election
    /// timeout, is not the voter's: refused, so nobody can speak for a live voter (a restarted
    /// voter's old connection closes, or falls silent, before its new one is needed).
    fn check_peer_connection(
        &self,
        from: u64,
        connection: u64,
        now: Now,
        election_timeout_ms: u64,
    ) -> Result<(), &'static str> {
        match self.peer_bound.get(&from) {
            Some((bound, last_ms))
                if *bound != connection
                    && self.peer_connections.contains_key(bound)
                    && now.mono_ms.saturating_sub(*last_ms) < election_timeout_ms =>
            {
                Err("the voter's messages come on another live connection")
            }
            _ => Ok(()),
        }
    }

    /// A controller-listener connection closed. If it carried the quorum leader's messages,
    /// the leader's process is most likely gone: the voters elect another at once instead of
    /// waiting out the election timeout ([`QuorumEngine::leader_connection_lost`]), staggered
    /// by rank so that two do not split the vote.
    pub(crate) fn connection_closed(&mut self, connection: u64) -> Option<PeerClosed> {
        let peer = self.peer_connections.remove(&connection)?;
        let unbound = self
            .peer_bound
            .get(&peer)
            .is_some_and(|(c, _)| *c == connection);
        if unbound {
            self.peer_bound.remove(&peer);
        }
        if let Some(rank) = self.engine.leader_connection_lost(peer) {
            tracing::info!(
                leader = peer,
                rank,
                "connection from the quorum leader closed"
            );
            self.campaign_after = Some((rank as u64 * CAMPAIGN_STAGGER_MS, peer));
        }
        Some(PeerClosed { peer, unbound })
    }

    /// The peer voters whose messages come on an open connection.
    pub(crate) fn connected(&self) -> BTreeSet<u64> {
        self.peer_connections.values().copied().collect()
    }

    /// When the next campaign is due, if one is.
    pub(crate) fn next_campaign_ms(&self) -> Option<u64> {
        self.campaign_due_ms.map(|c| c.0)
    }

    /// Campaigns if a staggered campaign is due at `now_ms`, until a leader other than the
    /// lost one is known, this voter leads, or its pre-vote is past.
    pub(crate) fn campaign_if_due(&mut self, now_ms: u64) {
        if let Some((delay, lost)) = self.campaign_after.take() {
            self.campaign_due_ms = Some((now_ms + delay, lost, 0));
        }
        let Some((due, lost, attempts)) = self.campaign_due_ms else {
            return;
        };
        let leader = self.engine.leader_id();
        if self.engine.is_leader() || (leader != 0 && leader != lost) {
            self.campaign_due_ms = None;
        } else if attempts > 0 && !self.engine.is_pre_candidate() {
            // Past the pre-vote (a real election, which must not be restarted), or back
            // to following.
            self.campaign_due_ms = None;
        } else if now_ms >= due {
            self.engine.campaign();
            self.campaign_due_ms = (attempts < CAMPAIGN_RETRIES).then_some((
                now_ms + CAMPAIGN_RETRY_MS,
                lost,
                attempts + 1,
            ));
        }
    }

    /// What DescribeQuorum reports at wall-clock `wall_ms`: the leader's view of every voter.
    pub(crate) fn describe(&mut self, wall_ms: i64) -> QuorumDescription {
        let status = self.engine.status();
        let leader_end = status
            .voters
            .iter()
            .find(|v| v.node_id == status.node_id)
            .map_or(0, |v| v.log_end);
        let voters = status
            .voters
            .iter()
            .map(|v| {
                let me = v.node_id == status.node_id;
                if v.log_end >= leader_end && status.is_leader {
                    self.peer_caught_up_ms.insert(v.node_id, wall_ms);
                }
                VoterDescription {
                    node_id: v.node_id as i32,
                    log_end_offset: if status.is_leader || me {
                        v.log_end as i64
                    } else {
                        -1
                    },
                    last_fetch_timestamp: if me {
                        wall_ms
                    } else {
                        self.peer_seen_ms.get(&v.node_id).map_or(-1, |t| *t)
                    },
                    last_caught_up_timestamp: self
                        .peer_caught_up_ms
                        .get(&v.node_id)
                        .map_or(-1, |t| *t),
                }
            })
            .collect();
        QuorumDescription {
            leader_id: if status.leader_id == 0 {
                -1
            } else {
                status.leader_id as i32
            },
            leader_epoch: status.term as i32,
            high_watermark: status.commit as i64,
            voters,
        }
    }
}
