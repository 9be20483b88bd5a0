//! The quorum engine with the library underneath: elections, replication, crashes, snapshots,
//! and the files of a voter.

use std::collections::{BTreeMap, VecDeque};

use raft::eraftpb::{Entry, HardState, Message};

use super::durable::{persist, DiskState, Durable, DurableError, MemState};
use super::engine::{Apply, Output, QuorumConfig, QuorumEngine};

/// Polls `engine` and makes its writes durable on `disk` before anything else, as the
/// controller does.
fn poll(engine: &mut QuorumEngine, disk: &MemState) -> Output {
    let out = engine.poll();
    persist(&mut disk.clone(), &out.persist).unwrap();
    out
}

/// Compacts `engine` at what `app` applied, durably on `disk`.
fn compact(engine: &mut QuorumEngine, app: &App, disk: &MemState) {
    if let Some(write) = engine.compact(app.applied_index, app.encode()) {
        persist(&mut disk.clone(), &[write]).unwrap();
    }
}

fn open(node_id: u64, voters: &[u64], disk: &MemState) -> QuorumEngine {
    QuorumEngine::open(&config(node_id, voters), disk.clone().recover().unwrap())
}

fn config(node_id: u64, voters: &[u64]) -> QuorumConfig {
    QuorumConfig {
        node_id,
        voters: voters.to_vec(),
        election_ticks: 10,
        heartbeat_ticks: 2,
        fixed_election_ticks: None,
    }
}

/// The application of the tests: the list of applied proposals. A snapshot's data is the list,
/// one length-prefixed item after another.
#[derive(Default, Clone, Debug, PartialEq)]
struct App {
    applied_index: u64,
    items: Vec<Vec<u8>>,
}

impl App {
    fn apply(&mut self, apply: Vec<Apply>) {
        for a in apply {
            match a {
                Apply::Entry(c) => {
                    assert!(c.index > self.applied_index, "applied out of order");
                    self.applied_index = c.index;
                    if !c.data.is_empty() {
                        self.items.push(c.data);
                    }
                }
                Apply::Snapshot { index, data, .. } => {
                    self.applied_index = index;
                    self.items = decode_items(&data);
                }
            }
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for item in &self.items {
            out.extend_from_slice(&(item.len() as u32).to_be_bytes());
            out.extend_from_slice(item);
        }
        out
    }
}

fn decode_items(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut items = Vec::new();
    while data.len() >= 4 {
        let n = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
        items.push(data[4..4 + n].to_vec());
        data = &data[4 + n..];
    }
    items
}

/// Voters in one process with a lossless network that delivers in order when asked.
struct Cluster {
    voters: Vec<u64>,
    nodes: BTreeMap<u64, (QuorumEngine, App)>,
    disks: BTreeMap<u64, MemState>,
    in_flight: VecDeque<Message>,
    /// Each voter's answers to its read-index requests, in order, with their contexts.
    read_indexes: BTreeMap<u64, Vec<(u64, Vec<u8>)>>,
}

impl Cluster {
    fn new(voters: &[u64]) -> Cluster {
        let mut c = Cluster {
            voters: voters.to_vec(),
            nodes: BTreeMap::new(),
            disks: voters.iter().map(|&v| (v, MemState::new())).collect(),
            in_flight: VecDeque::new(),
            read_indexes: BTreeMap::new(),
        };
        for &v in voters {
            c.start(v);
        }
        c
    }

    fn start(&mut self, id: u64) {
        let engine = open(id, &self.voters, &self.disks[&id]);
        self.nodes.insert(id, (engine, App::default()));
    }

    fn crash(&mut self, id: u64) {
        self.nodes.remove(&id);
        self.in_flight.retain(|m| m.to != id && m.from != id);
    }

    fn poll_all(&mut self) {
        for (id, (engine, app)) in self.nodes.iter_mut() {
            let out = poll(engine, &self.disks[id]);
            self.in_flight.extend(out.messages);
            app.apply(out.apply);
            self.read_indexes
                .entry(*id)
                .or_default()
                .extend(out.read_indexes);
        }
    }

    /// Delivers messages (and the replies they cause) until the network is quiet.
    fn settle(&mut self) {
        self.poll_all();
        let mut steps = 0;
        while let Some(m) = self.in_flight.pop_front() {
            steps += 1;
            assert!(steps < 100_000, "the network never went quiet");
            let to = m.to;
            if let Some((engine, app)) = self.nodes.get_mut(&to) {
                let _ = engine.step(m);
                let out = poll(engine, &self.disks[&to]);
                self.in_flight.extend(out.messages);
                app.apply(out.apply);
                self.read_indexes
                    .entry(to)
                    .or_default()
                    .extend(out.read_indexes);
            }
        }
    }

    fn tick_all(&mut self, ticks: usize) {
        for _ in 0..ticks {
            for (engine, _) in self.nodes.values_mut() {
                engine.tick();
            }
            self.settle();
        }
    }

    fn leader(&self) -> Option<u64> {
        let leaders: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, (e, _))| e.is_leader())
            .map(|(id, _)| *id)
            .collect();
        assert!(
            leaders.len() <= 1 || {
                // Two leaders can only be in different terms, the older one not yet told.
                let terms: Vec<u64> = leaders.iter().map(|l| self.nodes[l].0.term()).collect();
                terms.windows(2).all(|w| w[0] != w[1])
            }
        );
        leaders.into_iter().max_by_key(|l| self.nodes[l].0.term())
    }

    fn elect(&mut self) -> u64 {
        for _ in 0..100 {
            if let Some(l) = self.leader() {
                return l;
            }
            self.tick_all(1);
        }
        panic!("no leader elected");
    }

    fn propose(&mut self, data: &[u8]) {
        let leader = self.elect();
        self.nodes
            .get_mut(&leader)
            .unwrap()
            .0
            .propose(data.to_vec())
            .unwrap();
        self.settle();
    }

    fn items(&self, id: u64) -> Vec<Vec<u8>> {
        self.nodes[&id].1.items.clone()
    }
}

#[test]
fn a_single_voter_leads_at_once_and_commits_its_proposals() {
    let disk = MemState::new();
    let mut engine = open(1, &[1], &disk);
    let mut app = App::default();
    app.apply(poll(&mut engine, &disk).apply);
    assert!(engine.is_leader());
    let p = engine.propose(b"a".to_vec()).unwrap();
    let out = poll(&mut engine, &disk);
    assert!(out.messages.is_empty());
    app.apply(out.apply);
    assert_eq!(app.items, vec![b"a".to_vec()]);
    assert_eq!(app.applied_index, p.index);
    // Restart: the entry is replayed from durable state, and the voter leads again.
    drop(engine);
    let mut engine = open(1, &[1], &disk);
    let mut app = App::default();
    app.apply(poll(&mut engine, &disk).apply);
    assert!(engine.is_leader());
    assert_eq!(app.items, vec![b"a".to_vec()]);
    assert!(engine.term() > p.term);
}

#[test]
fn three_voters_elect_one_leader_and_apply_the_same_entries() {
    let mut c = Cluster::new(&[1, 2, 3]);
    let leader = c.elect();
    for i in 0..10u8 {
        c.propose(&[i]);
    }
    c.tick_all(3);
    let expected: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i]).collect();
    for id in [1, 2, 3] {
        assert_eq!(c.items(id), expected, "voter {id}");
    }
    // A follower refuses to propose.
    let follower = [1, 2, 3].into_iter().find(|&v| v != leader).unwrap();
    assert!(c
        .nodes
        .get_mut(&follower)
        .unwrap()
        .0
        .propose(vec![9])
        .is_err());
}

#[test]
fn the_quorum_survives_a_leader_crash_and_keeps_committed_entries() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"before");
    let old = c.elect();
    c.crash(old);
    // The others elect a new leader after the election timeout and keep committing.
    c.tick_all(40);
    let new = c.elect();
    assert_ne!(new, old);
    c.propose(b"after");
    // The old leader returns, catches up and applies both, in order.
    c.start(old);
    c.tick_all(20);
    for id in [1, 2, 3] {
        assert_eq!(
            c.items(id),
            vec![b"before".to_vec(), b"after".to_vec()],
            "voter {id}"
        );
    }
}

#[test]
fn a_minority_cannot_commit() {
    let mut c = Cluster::new(&[1, 2, 3]);
    let leader = c.elect();
    for other in [1, 2, 3].into_iter().filter(|&v| v != leader) {
        c.crash(other);
    }
    let engine = &mut c.nodes.get_mut(&leader).unwrap().0;
    engine.propose(b"lonely".to_vec()).unwrap();
    c.tick_all(5);
    assert!(c.items(leader).is_empty());
    // And with check-quorum the lonely leader steps down.
    c.tick_all(30);
    assert!(!c.nodes[&leader].0.is_leader());
}

#[test]
fn a_voter_far_behind_catches_up_from_a_snapshot() {
    let mut c = Cluster::new(&[1, 2, 3]);
    let leader = c.elect();
    let lagging = [1, 2, 3].into_iter().find(|&v| v != leader).unwrap();
    c.crash(lagging);
    for i in 0..50u8 {
        c.propose(&[i]);
    }
    // Every live voter compacts its log at what it has applied.
    for (id, (engine, app)) in c.nodes.iter_mut() {
        compact(engine, app, &c.disks[id]);
        assert_eq!(engine.log_entries(), 0);
    }
    c.start(lagging);
    c.tick_all(20);
    let expected: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i]).collect();
    assert_eq!(c.items(lagging), expected);
    // And after a restart it recovers from its own snapshot.
    c.crash(lagging);
    c.start(lagging);
    c.tick_all(10);
    assert_eq!(c.items(lagging), expected);
}

#[test]
fn messages_from_strangers_and_local_types_are_refused() {
    let mut engine = open(1, &[1, 2, 3], &MemState::new());
    let mut m = Message::default();
    m.from = 2;
    m.to = 9;
    assert!(engine.step(m.clone()).is_err(), "wrong destination");
    m.to = 1;
    m.from = 7;
    assert!(engine.step(m.clone()).is_err(), "not a voter");
    m.from = 2;
    m.set_msg_type(raft::eraftpb::MessageType::MsgHup);
    assert!(engine.step(m.clone()).is_err(), "local type");
    m.set_msg_type(raft::eraftpb::MessageType::MsgPropose);
    assert!(engine.step(m).is_err(), "proposals are not forwarded");
}

#[test]
fn an_append_without_a_term_is_refused_and_never_reaches_the_log() {
    // The library reads term 0 as a local message and would skip its term checks: a follower
    // would take the entries (and the commit index) from whoever claims to lead.
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"real");
    let leader = c.elect();
    let follower = *c.voters.iter().find(|v| **v != leader).unwrap();
    let impostor = *c
        .voters
        .iter()
        .find(|v| **v != leader && **v != follower)
        .unwrap();
    let before = c.items(follower);
    let (engine, _) = c.nodes.get_mut(&follower).unwrap();
    let last = engine
        .status()
        .voters
        .iter()
        .find(|v| v.node_id == follower)
        .map_or(0, |v| v.log_end);
    let term = engine.term();
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    m.from = impostor;
    m.to = follower;
    m.term = 0;
    m.index = last;
    m.log_term = term;
    m.commit = last + 1;
    m.entries = vec![entry(last + 1, term, b"forged")].into();
    assert!(engine.step(m).is_err(), "an append without a term");
    c.settle();
    c.tick_all(3);
    assert_eq!(c.items(follower), before);
    assert!(c.items(follower).iter().all(|i| i != b"forged"));
}

fn accept_any(_: &[u8]) -> Result<(), String> {
    Ok(())
}

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    let mut e = Entry::default();
    e.index = index;
    e.term = term;
    e.data = data.to_vec().into();
    e
}

#[test]
fn disk_state_survives_reopen_and_overwrites_a_conflicting_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = DiskState::open(dir.path(), accept_any).unwrap();
    assert_eq!(d.recover().unwrap().entries, vec![]);
    d.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")])
        .unwrap();
    // A new leader replaces entries from index 2.
    d.append(&[entry(2, 2, b"B")]).unwrap();
    let mut hs = HardState::default();
    hs.term = 2;
    hs.vote = 3;
    hs.commit = 2;
    d.set_hard_state(&hs).unwrap();
    drop(d);
    let mut d = DiskState::open(dir.path(), accept_any).unwrap();
    let r = d.recover().unwrap();
    assert_eq!(r.entries, vec![entry(1, 1, b"a"), entry(2, 2, b"B")]);
    assert_eq!(r.hard_state, hs);
    // Snapshot at 1: entry 1 goes, entry 2 stays, across a reopen.
    let mut s = raft::eraftpb::Snapshot::default();
    s.mut_metadata().index = 1;
    s.mut_metadata().term = 1;
    s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
    s.data = b"image".to_vec().into();
    d.save_snapshot(&s, true).unwrap();
    d.append(&[entry(3, 2, b"c")]).unwrap();
    drop(d);
    let r = DiskState::open(dir.path(), accept_any)
        .unwrap()
        .recover()
        .unwrap();
    assert_eq!(r.snapshot, s);
    assert_eq!(r.entries, vec![entry(2, 2, b"B"), entry(3, 2, b"c")]);
}

#[test]
fn disk_state_cuts_only_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = DiskState::open(dir.path(), accept_any).unwrap();
    d.append(&[entry(1, 1, b"a"), entry(2, 1, b"b")]).unwrap();
    drop(d);
    let log = dir.path().join("raft.log");
    let len = std::fs::metadata(&log).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(len - 2).unwrap();
    drop(f);
    let mut d = DiskState::open(dir.path(), accept_any).unwrap();
    assert_eq!(d.recover().unwrap().entries, vec![entry(1, 1, b"a")]);
    d.append(&[entry(2, 1, b"b"), entry(3, 1, b"c")]).unwrap();
    drop(d);
    // A flipped byte in the middle entry, with a valid one after it: refuse to start.
    let mut bytes = std::fs::read(&log).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&log, &bytes).unwrap();
    let err = DiskState::open(dir.path(), accept_any)
        .unwrap()
        .recover()
        .unwrap_err();
    assert!(matches!(err, DurableError::Scan { .. }), "{err}");
    assert!(err.to_string().contains("refusing to start"), "{err}");
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "nothing was cut");
}

#[test]
fn disk_state_refuses_an_entry_that_does_not_decode_and_goes_offline_after_a_failed_write() {
    fn no_x(data: &[u8]) -> Result<(), String> {
        if data.starts_with(b"x") {
            Err("unknown record".into())
        } else {
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut d = DiskState::open(dir.path(), no_x).unwrap();
    d.append(&[entry(1, 1, b"a"), entry(2, 1, b"x"), entry(3, 1, b"c")])
        .unwrap();
    drop(d);
    let log = dir.path().join("raft.log");
    let before = std::fs::read(&log).unwrap();
    let err = DiskState::open(dir.path(), no_x)
        .unwrap()
        .recover()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("valid CRC but does not decode"), "{text}");
    assert!(text.contains("entry 2"), "{text}");
    assert_eq!(std::fs::read(&log).unwrap(), before, "nothing was cut");

    // A write that fails takes the voter's files offline: nothing more is written.
    let dir = tempfile::tempdir().unwrap();
    let mut d = DiskState::open(dir.path(), accept_any).unwrap();
    d.recover().unwrap();
    d.append(&[entry(1, 1, b"a")]).unwrap();
    let log = dir.path().join("raft.log");
    // Replace the log with a directory: the next append cannot write.
    d.save_snapshot(&raft::eraftpb::Snapshot::default(), true)
        .unwrap();
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    assert!(d.append(&[entry(1, 1, b"a")]).is_err());
    std::fs::remove_dir(&log).unwrap();
    let err = d.append(&[entry(1, 1, b"a")]).unwrap_err();
    assert!(matches!(err, DurableError::Offline(_)), "{err}");
    assert!(!log.exists(), "nothing written after the failure");
}

#[test]
fn raft_messages_round_trip_through_their_encoding() {
    use protobuf::Message as _;
    let mut m = Message::default();
    m.from = 1;
    m.to = 2;
    m.term = 7;
    m.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    m.entries = vec![entry(5, 7, b"records")].into();
    let bytes = m.write_to_bytes().unwrap();
    assert_eq!(Message::parse_from_bytes(&bytes).unwrap(), m);
    assert!(Message::parse_from_bytes(&[0xff, 0xff, 0xff]).is_err());
}

/// A follower of `c`'s leader, another follower, the leader, and the follower's log end and term.
fn follower_view(c: &mut Cluster) -> (u64, u64, u64, u64, u64) {
    let leader = c.elect();
    let follower = *c.voters.iter().find(|v| **v != leader).unwrap();
    let other = *c
        .voters
        .iter()
        .find(|v| **v != leader && **v != follower)
        .unwrap();
    let engine = &c.nodes[&follower].0;
    let last = engine
        .status()
        .voters
        .iter()
        .find(|v| v.node_id == follower)
        .unwrap()
        .log_end;
    (follower, other, leader, last, engine.term())
}

#[test]
fn a_heartbeat_committing_beyond_the_log_is_taken_without_its_commit() {
    // raft-rs panics in `commit_to` ("out of range") on such a heartbeat.
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"real");
    let (follower, other, leader, last, term) = follower_view(&mut c);
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
    m.from = leader;
    m.to = follower;
    m.term = term;
    m.commit = last + 1_000;
    let engine = &mut c.nodes.get_mut(&follower).unwrap().0;
    engine
        .step(m.clone())
        .expect("taken, without its commit index");
    // The same from another voter: refused in this term (it has a leader), and in a later one
    // while the leader is heard.
    m.from = other;
    assert!(matches!(
        engine.step(m.clone()),
        Err(super::engine::StepError::SecondLeader { .. })
    ));
    m.term = term + 5;
    assert!(matches!(
        engine.step(m),
        Err(super::engine::StepError::LeaderInLease { .. })
    ));
    c.settle();
    c.propose(b"after");
    assert_eq!(c.items(follower), vec![b"real".to_vec(), b"after".to_vec()]);
    assert_eq!(c.elect(), leader);
}

#[test]
fn a_voter_that_lost_its_disk_rejoins_and_catches_up() {
    // The leader remembers a match index beyond the voter's new, empty log: its heartbeats
    // commit beyond that log, and its appends' rejections look stale to the library.
    let mut c = Cluster::new(&[1, 2, 3]);
    for i in 0..10u8 {
        c.propose(&[i]);
    }
    let (follower, _, _, _, _) = follower_view(&mut c);
    c.crash(follower);
    c.disks.insert(follower, MemState::new());
    c.start(follower);
    c.tick_all(30);
    c.propose(b"after");
    let mut expected: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i]).collect();
    expected.push(b"after".to_vec());
    assert_eq!(c.items(follower), expected);
}

#[test]
fn hostile_terms_entries_snapshots_and_types_are_refused() {
    fn no_x(data: &[u8]) -> Result<(), String> {
        if data.contains(&b'x') {
            Err("an x".into())
        } else {
            Ok(())
        }
    }
    use raft::eraftpb::MessageType::*;
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"real");
    let (follower, _, leader, last, term) = follower_view(&mut c);
    let append = |entries: Vec<Entry>, term: u64| {
        let mut m = Message::default();
        m.set_msg_type(MsgAppend);
        m.from = leader;
        m.to = follower;
        m.term = term;
        m.index = last;
        m.log_term = term;
        m.commit = last;
        m.entries = entries.into();
        m
    };
    let mut huge = append(vec![], super::admit::RAFT_TERM_MAX + 1);
    huge.set_msg_type(MsgHeartbeat);
    let mut snapshot = append(vec![], term);
    snapshot.set_msg_type(MsgSnapshot);
    let meta = snapshot.mut_snapshot().mut_metadata();
    meta.index = last + 10;
    meta.term = term;
    meta.mut_conf_state().voters = vec![leader];
    // Found by the raft_frame fuzz target: raft-rs restores a snapshot at `u64::MAX` and
    // overflows computing the index after it.
    let mut snapshot_at_the_end = snapshot.clone();
    let meta = snapshot_at_the_end.mut_snapshot().mut_metadata();
    meta.index = u64::MAX;
    meta.mut_conf_state().voters = c.voters.clone();
    let mut commit_at_the_end = append(vec![], term);
    commit_at_the_end.set_msg_type(MsgHeartbeat);
    commit_at_the_end.commit = super::admit::RAFT_INDEX_MAX + 1;
    let mut timeout_now = append(vec![], term);
    timeout_now.set_msg_type(MsgTimeoutNow);
    let mut transfer = append(vec![], term);
    transfer.set_msg_type(MsgTransferLeader);
    let refused = [
        ("a term beyond an int32 epoch", huge),
        (
            "entries with a gap",
            append(vec![entry(last + 2, term, b"a")], term),
        ),
        (
            "an entry of a later term",
            append(vec![entry(last + 1, term + 1, b"a")], term),
        ),
        (
            "an entry that does not decode",
            append(vec![entry(last + 1, term, b"x")], term),
        ),
        ("a snapshot naming other voters", snapshot),
        ("a snapshot at the last u64 index", snapshot_at_the_end),
        ("a commit beyond an int64 offset", commit_at_the_end),
        ("a leader transfer's TimeoutNow", timeout_now),
        ("a leader transfer", transfer),
    ];
    let engine = &mut c.nodes.get_mut(&follower).unwrap().0;
    engine.set_entry_check(no_x);
    for (what, m) in refused {
        assert!(engine.step(m).is_err(), "{what} was taken");
    }
    c.settle();
    c.tick_all(5);
    c.propose(b"after");
    assert_eq!(c.items(follower), vec![b"real".to_vec(), b"after".to_vec()]);
    assert_eq!(c.elect(), leader);
}

#[test]
fn appends_anchored_where_no_leader_could_are_refused() {
    // Found by the raft_frame fuzz target: raft-rs searches below the snapshot for where the
    // logs part and panics ("term(..) must be valid"), or reads the term past its log as 0,
    // takes such an anchor as matching and commits past its log ("out of range").
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"a");
    c.propose(b"b");
    let (follower, _, leader, last, term) = follower_view(&mut c);
    let (engine, app) = c.nodes.get_mut(&follower).unwrap();
    compact(engine, app, &c.disks[&follower]);
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    m.from = leader;
    m.to = follower;
    m.term = term;
    m.index = last;
    m.log_term = 0;
    assert!(matches!(
        engine.step(m.clone()),
        Err(super::engine::StepError::Inconsistent(_))
    ));
    m.index = last + 2;
    m.commit = last + 2;
    assert!(matches!(
        engine.step(m),
        Err(super::engine::StepError::Inconsistent(_))
    ));
    c.propose(b"c");
    assert_eq!(
        c.items(follower),
        vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
}

#[test]
fn a_follower_reads_the_leaders_commit_index_and_nothing_else_passes_for_one() {
    use raft::eraftpb::MessageType::*;
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"a");
    c.propose(b"b");
    let (follower, other, leader, _, term) = follower_view(&mut c);
    let commit = c.nodes[&leader].0.status().commit;
    c.nodes
        .get_mut(&follower)
        .unwrap()
        .0
        .read_index(b"ask-1".to_vec());
    c.settle();
    assert_eq!(c.read_indexes[&follower], vec![(commit, b"ask-1".to_vec())]);
    assert!(
        c.read_indexes[&leader].is_empty(),
        "the leader answers, not reads"
    );

    // What the library would take, but no voter of this quorum sends.
    let request = |from: u64, to: u64, term: u64, contexts: &[&[u8]]| {
        let mut m = Message::default();
        m.set_msg_type(MsgReadIndex);
        m.from = from;
        m.to = to;
        m.term = term;
        m.entries = contexts
            .iter()
            .map(|ctx| {
                let mut e = Entry::default();
                e.data = ctx.to_vec().into();
                e
            })
            .collect::<Vec<_>>()
            .into();
        m
    };
    let mut answer_from_another = request(other, follower, term, &[b"ask-2"]);
    answer_from_another.set_msg_type(MsgReadIndexResp);
    answer_from_another.index = commit;
    let mut answer_of_another_term = request(leader, follower, term + 1, &[b"ask-2"]);
    answer_of_another_term.set_msg_type(MsgReadIndexResp);
    let mut two_answers = request(leader, follower, term, &[b"ask-2", b"ask-3"]);
    two_answers.set_msg_type(MsgReadIndexResp);
    let refused = [
        (
            "a request with a term",
            leader,
            request(follower, leader, term, &[b"ask-2"]),
        ),
        (
            "a request to a follower",
            other,
            request(follower, other, 0, &[b"ask-2"]),
        ),
        (
            "a request without a context",
            leader,
            request(follower, leader, 0, &[]),
        ),
        (
            "a request with an empty context",
            leader,
            request(follower, leader, 0, &[b""]),
        ),
        (
            "a request with a long context",
            leader,
            request(follower, leader, 0, &[&[7u8; 65]]),
        ),
        (
            "an answer from a voter that does not lead",
            follower,
            answer_from_another,
        ),
        (
            "an answer of another term",
            follower,
            answer_of_another_term,
        ),
        ("an answer with two contexts", follower, two_answers),
    ];
    for (what, to, m) in refused {
        let engine = &mut c.nodes.get_mut(&to).unwrap().0;
        assert!(engine.step(m).is_err(), "{what} was taken");
    }
    c.settle();
    assert_eq!(c.read_indexes[&follower], vec![(commit, b"ask-1".to_vec())]);

    // A voter alone, its leader and the third voter gone, gets no answer.
    c.crash(leader);
    c.crash(other);
    c.nodes
        .get_mut(&follower)
        .unwrap()
        .0
        .read_index(b"ask-4".to_vec());
    c.tick_all(50);
    assert_eq!(c.read_indexes[&follower], vec![(commit, b"ask-1".to_vec())]);
}

#[test]
fn a_leader_keeps_few_read_index_requests_waiting() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.propose(b"a");
    let (follower, other, leader, _, _) = follower_view(&mut c);
    // Nobody acknowledges the leader's heartbeats: its requests stay pending.
    c.crash(follower);
    c.crash(other);
    let engine = &mut c.nodes.get_mut(&leader).unwrap().0;
    let request = |n: usize| {
        let mut m = Message::default();
        m.set_msg_type(raft::eraftpb::MessageType::MsgReadIndex);
        m.from = follower;
        m.to = leader;
        let mut e = Entry::default();
        e.data = format!("ask-{n}").into_bytes().into();
        m.entries = vec![e].into();
        m
    };
    for n in 0..16 {
        assert!(engine.step(request(n)).is_ok(), "request {n} refused");
    }
    assert!(engine.step(request(16)).is_err(), "a 17th request was kept");
}
