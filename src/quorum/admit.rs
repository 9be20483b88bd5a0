//! What a Raft message from the network must satisfy before the library sees it.
//!
//! raft-rs trusts its peers: a commit index beyond the receiver's log, entries whose indexes
//! do not follow the message's, a snapshot naming other voters, all end in a panic
//! (`fatal!`) or a changed configuration. Raft messages come on the controller listener, which
//! anyone may reach, and from voters that may have lost their disk, so each message is checked
//! here against this voter's state and refused (or, for a heartbeat's commit, disregarded)
//! when it could not come from a correct voter. A refused message is lost, which Raft
//! tolerates.
//!
//! Pure functions of the message and [`Local`], table tested in `super::tests`.

use raft::eraftpb::{Message, MessageType};

use super::durable::EntryCheck;
use super::engine::StepError;

/// The largest term a message may carry: Kafka's leader epoch (DescribeQuorum's
/// `leader_epoch`) is an int32, and refusing terms above it keeps every `term + 1` of a
/// campaign far from overflowing the library's u64.
pub const RAFT_TERM_MAX: u64 = i32::MAX as u64;

/// The largest log index a message may name (its commit, anchor, hints, entries, snapshot):
/// Kafka's offsets are int64, and keeping every index this far below `u64::MAX` keeps the
/// library's `index + 1` from overflowing (a snapshot at `u64::MAX` panics in its restore).
pub const RAFT_INDEX_MAX: u64 = i64::MAX as u64;

/// This voter's state, as far as the checks need it.
#[derive(Debug, Clone)]
pub struct Local<'a> {
    pub node_id: u64,
    pub voters: &'a [u64],
    pub term: u64,
    pub last_index: u64,
    /// The commit index, and the term of the latest snapshot (0 without one).
    pub committed: u64,
    pub snapshot_term: u64,
    pub is_leader: bool,
    /// The leader of this voter's term, if it knows one (itself when it leads).
    pub leader: Option<u64>,
    /// The leader this follower hears, if it heard it within the election timeout (the lease
    /// check-quorum keeps: no other voter can have been elected meanwhile).
    pub leader_in_lease: Option<u64>,
}

/// The only message types voters of this quorum send each other (no leader transfer: a
/// `MsgTimeoutNow` would make the receiver campaign past every lease).
fn is_used_between_voters(kind: MessageType) -> bool {
    use MessageType::*;
    matches!(
        kind,
        MsgAppend
            | MsgAppendResponse
            | MsgRequestVote
            | MsgRequestVoteResponse
            | MsgSnapshot
            | MsgHeartbeat
            | MsgHeartbeatResponse
            | MsgRequestPreVote
            | MsgRequestPreVoteResponse
            | MsgReadIndex
            | MsgReadIndexResp
    )
}

/// Largest context of a ReadIndex request (the requester's own tag, a few bytes).
const READ_INDEX_CONTEXT_BYTES_MAX: usize = 64;

/// Whether `m` may be stepped into the library, given this voter's state. `check` decodes an
/// entry's data (a snapshot's too): what cannot be applied is never taken into the log.
pub fn check(m: &Message, local: &Local<'_>, entry_check: EntryCheck) -> Result<(), StepError> {
    let kind = m.get_msg_type();
    if m.to != local.node_id {
        return Err(StepError::WrongNode {
            to: m.to,
            me: local.node_id,
        });
    }
    if !local.voters.contains(&m.from) || m.from == local.node_id {
        return Err(StepError::NotAVoter(m.from));
    }
    if !is_used_between_voters(kind) {
        return Err(StepError::LocalType(kind));
    }
    // The library reads term 0 as "a local message" and skips every term check: an append
    // without a term would be taken from whoever claims to lead. Every message between voters
    // carries its sender's term, but for the ReadIndex request a follower forwards to its
    // leader (the library sends it without one), which only a leader takes.
    if kind == MessageType::MsgReadIndex {
        check_indexes(m)?;
        return check_read_index(m, local);
    }
    if m.term == 0 {
        return Err(StepError::NoTerm(kind));
    }
    if m.term > RAFT_TERM_MAX {
        return Err(StepError::TermTooLarge(m.term));
    }
    check_indexes(m)?;
    check_new_term(m, local)?;
    match kind {
        MessageType::MsgAppend => {
            check_anchor(m, local)?;
            check_entries(m, entry_check)
        }
        MessageType::MsgSnapshot => check_snapshot(m, local, entry_check),
        MessageType::MsgReadIndexResp => check_read_index_answer(m, local),
        MessageType::MsgAppendResponse if local.is_leader && !m.reject => {
            if m.index > local.last_index {
                return Err(StepError::Inconsistent(format!(
                    "acknowledges index {} beyond this leader's log end {}",
                    m.index, local.last_index
                )));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A ReadIndex request: forwarded without a term, to the leader only (a follower would
/// forward it again), with one entry holding the requester's short context (the engine steps
/// only that entry into the library).
fn check_read_index(m: &Message, local: &Local<'_>) -> Result<(), StepError> {
    if m.term != 0 {
        return Err(StepError::Inconsistent(format!(
            "a read-index request of term {}; a forwarded one has none",
            m.term
        )));
    }
    if !local.is_leader {
        return Err(StepError::Inconsistent(
            "a read-index request to a voter that does not lead".into(),
        ));
    }
    check_read_index_entry(m)
}

/// A ReadIndex answer comes from the leader this voter follows, in its term; the library
/// commits its index only where this voter's log holds an entry of that term there.
fn check_read_index_answer(m: &Message, local: &Local<'_>) -> Result<(), StepError> {
    if local.leader != Some(m.from) || m.term != local.term {
        return Err(StepError::Inconsistent(format!(
            "a read-index answer from {} in term {}, not from the leader of term {}",
            m.from, m.term, local.term
        )));
    }
    check_read_index_entry(m)
}

fn check_read_index_entry(m: &Message) -> Result<(), StepError> {
    match m.entries.as_slice() {
        [e] if (1..=READ_INDEX_CONTEXT_BYTES_MAX).contains(&e.data.len())
            && e.index == 0
            && e.term == 0
            && e.get_entry_type() == raft::eraftpb::EntryType::EntryNormal =>
        {
            Ok(())
        }
        _ => Err(StepError::Inconsistent(
            "a read-index message carries exactly one short context entry".into(),
        )),
    }
}

/// Every index the message names, its entries' and snapshot's included, is at most
/// [`RAFT_INDEX_MAX`].
fn check_indexes(m: &Message) -> Result<(), StepError> {
    let named = [
        m.index,
        m.commit,
        m.reject_hint,
        m.request_snapshot,
        m.get_snapshot().get_metadata().index,
    ];
    let largest = named
        .into_iter()
        .chain(m.entries.iter().map(|e| e.index))
        .max()
        .unwrap_or(0);
    if largest > RAFT_INDEX_MAX {
        return Err(StepError::IndexTooLarge(largest));
    }
    Ok(())
}

/// A message of a later term, while this follower still hears its leader, cannot be genuine
/// (but from that leader, re-elected): a term moves on only by an election, a voter is elected
/// only by a majority's votes, and check-quorum keeps a voter in its leader's lease from
/// voting, so the quorum can have moved on without this voter only after its leader stopped
/// reaching a majority — and then, within an election timeout, this voter stops hearing it too.
/// Refusing such a message keeps a forged term from deposing a healthy leader; a real new
/// leader is heard at most an election timeout later. (A vote request in the lease is ignored
/// by the library itself.)
fn check_new_term(m: &Message, local: &Local<'_>) -> Result<(), StepError> {
    let from_a_leader = matches!(
        m.get_msg_type(),
        MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot
    );
    // One leader per term: a leader's message of this term from another voter is not its.
    if let Some(leader) = local.leader {
        if from_a_leader && m.term == local.term && m.from != leader {
            return Err(StepError::SecondLeader {
                from: m.from,
                leader,
            });
        }
    }
    match local.leader_in_lease {
        Some(leader) if m.term > local.term && !(from_a_leader && m.from == leader) => {
            Err(StepError::LeaderInLease {
                from: m.from,
                leader,
            })
        }
        _ => Ok(()),
    }
}

/// An append anchored at or past the commit index in a term older than the snapshot's cannot
/// come from a leader (its log holds the snapshot's entries, and terms only grow along a log);
/// the library, looking for where the logs part, would search below the snapshot and panic.
/// Nor is an append anchored past index 0 in term 0: the library reads the term of an index
/// past its log as 0, takes the anchor as matching and commits past its log.
fn check_anchor(m: &Message, local: &Local<'_>) -> Result<(), StepError> {
    if m.index > 0 && m.log_term == 0 {
        return Err(StepError::Inconsistent(format!(
            "append after index {} of term 0",
            m.index
        )));
    }
    if m.index >= local.committed && m.log_term < local.snapshot_term {
        return Err(StepError::Inconsistent(format!(
            "append after index {} of term {}, older than the snapshot's term {}",
            m.index, m.log_term, local.snapshot_term
        )));
    }
    Ok(())
}

/// An append's entries follow its `index` one by one, in terms no later than the message's
/// and never decreasing, and each decodes: otherwise the library would panic on a conflict
/// with committed entries or apply what the controller cannot.
fn check_entries(m: &Message, entry_check: EntryCheck) -> Result<(), StepError> {
    let mut previous_term = m.log_term;
    for (i, e) in m.entries.iter().enumerate() {
        let expected = m.index.checked_add(i as u64 + 1);
        if expected != Some(e.index) {
            return Err(StepError::Inconsistent(format!(
                "entry {} at position {i} after index {}",
                e.index, m.index
            )));
        }
        if e.term > m.term || e.term < previous_term {
            return Err(StepError::Inconsistent(format!(
                "entry {} of term {} after term {previous_term} in a message of term {}",
                e.index, e.term, m.term
            )));
        }
        previous_term = e.term;
        if e.get_entry_type() != raft::eraftpb::EntryType::EntryNormal {
            return Err(StepError::Inconsistent(format!(
                "entry {} is a membership change; the voters are configured",
                e.index
            )));
        }
        if !e.data.is_empty() {
            entry_check(&e.data).map_err(|reason| {
                StepError::Inconsistent(format!("entry {} does not decode: {reason}", e.index))
            })?;
        }
    }
    Ok(())
}

/// A snapshot names exactly the configured voters (the library would adopt any other
/// configuration it names), is of a term no later than the message's, and decodes.
fn check_snapshot(
    m: &Message,
    local: &Local<'_>,
    entry_check: EntryCheck,
) -> Result<(), StepError> {
    let snapshot = m.get_snapshot();
    let meta = snapshot.get_metadata();
    let conf = meta.get_conf_state();
    let mut voters = conf.voters.clone();
    voters.sort_unstable();
    let mut configured = local.voters.to_vec();
    configured.sort_unstable();
    if voters != configured
        || !conf.learners.is_empty()
        || !conf.voters_outgoing.is_empty()
        || !conf.learners_next.is_empty()
    {
        return Err(StepError::Inconsistent(format!(
            "snapshot names voters {:?}, the configured ones are {configured:?}",
            conf.voters
        )));
    }
    if meta.index == 0 || meta.term == 0 || meta.term > m.term {
        return Err(StepError::Inconsistent(format!(
            "snapshot at index {} of term {} in a message of term {}",
            meta.index, meta.term, m.term
        )));
    }
    entry_check(&snapshot.data)
        .map_err(|reason| StepError::Inconsistent(format!("snapshot does not decode: {reason}")))
}

/// A heartbeat's commit index beyond this voter's log: the leader believes this voter holds
/// entries it does not (it lost its disk, or the message is forged). The library would panic;
/// the heartbeat is taken without its commit index, so this voter answers and the leader
/// finds, by the append it then rejects, where its log really ends.
pub fn disregard_commit_beyond_log(m: &mut Message, last_index: u64) -> bool {
    if m.get_msg_type() == MessageType::MsgHeartbeat && m.commit > last_index {
        m.commit = 0;
        return true;
    }
    false
}
