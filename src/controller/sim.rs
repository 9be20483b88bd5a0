//! A deterministic simulation of the control plane: several controller nodes (each a
//! [`ControllerCore`] over a voter whose durable state outlives its crashes) on a simulated
//! network and clock, all driven by one seed. Clients send metadata requests to random nodes
//! while a nemesis crashes and restarts nodes, cuts and heals links, delays, drops and
//! duplicates messages. After every step the invariants are checked; at the end the network
//! heals and every node must converge on the same image, holding every acknowledged change.
//!
//! A failing seed is printed; `KAFKAIQ_SIM_SEED=N cargo test --lib sim` replays it alone, and
//! `KAFKAIQ_SIM_SEEDS=N` sets how many seeds a run tries: 250 by default (the test command's
//! short mode, about 20 s); `KAFKAIQ_SIM_SEEDS=5000 cargo test --release --lib
//! control_plane_simulation` is the full run.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};

use raft::eraftpb::Message;
use tokio::sync::oneshot;

use super::command::Effects;
use super::driver::{ControllerCore, Now, TICK};
use super::request::Request;
use super::{CreateTopicSpec, ElectionType, ProducerIdBlock};
use crate::config::{BrokerConfig, RawConfig};
use crate::errors::ApiError;
use crate::metadata::{
    BrokerRegistration, ImageListener, MetadataCache, MetadataImage, MetadataPublisher,
};
use crate::quorum::durable::{Durable, MemState};
use crate::quorum::{QuorumConfig, QuorumEngine};

/// The simulated clocks at `ms` into a run: the wall clock is the monotonic one from a fixed
/// epoch, so that a seed alone decides every timestamp too.
fn at(ms: u64) -> Now {
    const SIM_EPOCH_MS: i64 = 1_700_000_000_000;
    Now {
        mono_ms: ms,
        wall_ms: SIM_EPOCH_MS + ms as i64,
    }
}

/// One advance of `core` at `now`, its commands carried out through `effects` in order (as the
/// controller thread does): the messages to send.
fn advance(core: &mut ControllerCore, effects: &mut Effects<MemState>, now: Now) -> Vec<Message> {
    let commands = core
        .advance(now)
        .unwrap_or_else(|e| panic!("the simulation's log decodes: {e}"));
    effects
        .carry_out(commands)
        .unwrap_or_else(|e| panic!("memory state cannot fail: {e}"))
}

/// What a simulated node's other threads would read of its controller (nothing reads it here).
fn quorum_state() -> Arc<super::forward::QuorumState> {
    Arc::new(super::forward::QuorumState::new())
}

/// A crashed voter's callers are answered (its commands carried out: answers only).
fn crash(mut core: ControllerCore, mut effects: Effects<MemState>) {
    effects
        .carry_out(core.stop())
        .unwrap_or_else(|e| panic!("memory state cannot fail: {e}"));
}

/// A small, fast, seedable generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// Records every image a node publishes, for the invariants.
/// (topic id, partition) → (leader epoch, leader) in one image.
type Leaders = BTreeMap<(uuid::Uuid, i32), (i32, i32)>;

#[derive(Default)]
struct Recorder {
    /// (metadata offset, leaders) of each image.
    images: Mutex<Vec<(u64, Leaders)>>,
    /// The run's history and the node this recorder listens on, when the run keeps one.
    history: Option<(History, u64)>,
}

fn leaders_of(image: &MetadataImage) -> Leaders {
    image
        .topics
        .values()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |(p, r)| ((t.id, *p), (r.leader_epoch, r.leader)))
        })
        .collect()
}

/// A message as the history keeps it: its header, and each entry's place and a digest of its
/// data (SipHash with fixed keys, the same in every run).
fn describe(m: &Message) -> String {
    use std::hash::{Hash, Hasher};
    let entries: Vec<(u64, u64, u64)> = m
        .entries
        .iter()
        .map(|e| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            e.data.hash(&mut h);
            (e.index, e.term, h.finish())
        })
        .collect();
    let snapshot = m.get_snapshot().get_metadata();
    format!(
        "{}→{} {:?} term {} index {} log term {} commit {} reject {} hint {} entries {entries:?} snapshot {}/{}",
        m.from,
        m.to,
        m.get_msg_type(),
        m.term,
        m.index,
        m.log_term,
        m.commit,
        m.reject,
        m.reject_hint,
        snapshot.index,
        snapshot.term
    )
}

/// Everything a simulated run did, in order: each message a node sent and its fate, each image
/// a node published, each client request, answer and fault. One seed must always give the same.
type History = Arc<Mutex<Vec<String>>>;

impl ImageListener for Recorder {
    fn on_image(&self, _previous: &MetadataImage, next: &MetadataImage) {
        if let Some((history, node)) = &self.history {
            let brokers: Vec<(i32, i64, bool)> = next
                .brokers
                .values()
                .map(|b| (b.node_id, b.broker_epoch, b.fenced))
                .collect();
            let topics: Vec<(&String, uuid::Uuid, usize)> = next
                .topics
                .values()
                .map(|t| (&t.name, t.id, t.partitions.len()))
                .collect();
            history.lock().unwrap().push(format!(
                "node {node} image {} cluster {:?} controller {} brokers {brokers:?} topics {topics:?} leaders {:?} next pid {}",
                next.metadata_offset,
                next.cluster_id,
                next.controller_id,
                leaders_of(next),
                next.next_producer_id_block_start
            ));
        }
        self.images
            .lock()
            .unwrap()
            .push((next.metadata_offset, leaders_of(next)));
    }
}

struct Live {
    core: ControllerCore,
    effects: Effects<MemState>,
    cache: Arc<MetadataCache>,
    recorder: Arc<Recorder>,
}

struct Node {
    id: u64,
    durable: MemState,
    live: Option<Live>,
}

/// An in-flight message, ordered by delivery time then by send order.
struct InFlight {
    at_ms: u64,
    seq: u64,
    message: Message,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}

impl Eq for InFlight {}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at_ms, other.seq).cmp(&(self.at_ms, self.seq))
    }
}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What a client is waiting for.
enum Pending {
    CreateTopic(
        String,
        oneshot::Receiver<Result<Arc<crate::metadata::TopicImage>, ApiError>>,
    ),
    ProducerIds(oneshot::Receiver<Result<ProducerIdBlock, ApiError>>),
    Other(oneshot::Receiver<Result<(), ApiError>>),
    Elect(oneshot::Receiver<Result<Vec<super::ElectionResult>, ApiError>>),
    Register(oneshot::Receiver<Result<usize, ApiError>>),
}

struct Sim {
    seed: u64,
    rng: Rng,
    now_ms: u64,
    nodes: Vec<Node>,
    network: BinaryHeap<InFlight>,
    seq: u64,
    /// Links that drop everything, as (from, to).
    cut: BTreeSet<(u64, u64)>,
    pending: Vec<Pending>,
    /// Topics a client was told were created.
    acknowledged_topics: BTreeSet<String>,
    /// Producer id blocks handed out.
    blocks: Vec<ProducerIdBlock>,
    /// (term → the node that was active in it).
    active_in_term: HashMap<u64, u64>,
    /// The committed entries seen applied: index → (term, metadata offset image count).
    topic_counter: u64,
    voters: Vec<u64>,
    /// Snapshot messages whose sending failed, (from, to), to be reported to the sender.
    failed_snapshots: Vec<(u64, u64)>,
    /// How many topic ids the nodes have taken: every id comes from this count, so a seed
    /// decides them (one count for all nodes, so a restarted node never repeats one).
    ids_taken: Arc<std::sync::atomic::AtomicU64>,
    history: History,
}

fn config_for(node_id: u64) -> Arc<BrokerConfig> {
    let mut raw = RawConfig::default();
    raw.set("node.id", &node_id.to_string());
    Arc::new(BrokerConfig::from_raw(raw).unwrap().config)
}

impl Sim {
    fn new(seed: u64, voters: usize) -> Sim {
        let ids: Vec<u64> = (1..=voters as u64).collect();
        let mut sim = Sim {
            seed,
            rng: Rng(seed),
            now_ms: 0,
            nodes: ids
                .iter()
                .map(|&id| Node {
                    id,
                    durable: MemState::new(),
                    live: None,
                })
                .collect(),
            network: BinaryHeap::new(),
            seq: 0,
            cut: BTreeSet::new(),
            pending: Vec::new(),
            acknowledged_topics: BTreeSet::new(),
            blocks: Vec::new(),
            active_in_term: HashMap::new(),
            topic_counter: 0,
            voters: ids.clone(),
            failed_snapshots: Vec::new(),
            ids_taken: Arc::default(),
            history: History::default(),
        };
        for i in 0..voters {
            sim.start(i);
        }
        sim
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "simulation seed {} failed at {} ms: {what}\nreplay: KAFKAIQ_SIM_SEED={} cargo test --release --lib controller::sim",
            self.seed, self.now_ms, self.seed
        );
    }

    fn start(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let quorum = QuorumConfig {
            node_id: node.id,
            voters: self.voters.clone(),
            election_ticks: 10,
            heartbeat_ticks: 2,
            // Different per voter and fixed, so the seed alone decides the run.
            fixed_election_ticks: Some(10 + 3 * node.id as usize),
        };
        let engine = QuorumEngine::open(&quorum, node.durable.clone().recover().unwrap());
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher = Arc::new(MetadataPublisher::new(
            cache.clone(),
            MetadataImage::empty(String::new(), node.id as i32),
        ));
        let recorder = Arc::new(Recorder {
            history: Some((self.history.clone(), node.id)),
            ..Recorder::default()
        });
        publisher.add_listener(recorder.clone());
        let mut core = ControllerCore::new(
            config_for(node.id),
            engine,
            publisher.image(),
            format!("sim-{}", node.id),
            None,
        );
        // Small snapshots, so compaction and snapshot installs happen within a run.
        core.set_snapshot_entries(16);
        let ids = self.ids_taken.clone();
        core.set_id_source(Box::new(move || {
            let n = ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            uuid::Uuid::from_u128(0x5eed_0000_0000_0000_0000_0000_0000_0000 | u128::from(n))
        }));
        node.live = Some(Live {
            core,
            effects: Effects::new(node.durable.clone(), publisher, quorum_state()),
            cache,
            recorder,
        });
    }

    fn crash(&mut self, i: usize) {
        if let Some(live) = self.nodes[i].live.take() {
            crash(live.core, live.effects);
        }
    }

    fn send(&mut self, messages: Vec<Message>) {
        for m in messages {
            self.note(format!("send {}", describe(&m)));
            if self.cut.contains(&(m.from, m.to)) || self.rng.chance(10) {
                // A cut link or a lost message: to the sender's transport, a failed connection.
                if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                    self.failed_snapshots.push((m.from, m.to));
                }
                continue;
            }
            let copies = if self.rng.chance(10) { 2 } else { 1 };
            for _ in 0..copies {
                let delay = 1 + self.rng.below(40);
                self.seq += 1;
                self.network.push(InFlight {
                    at_ms: self.now_ms + delay,
                    seq: self.seq,
                    message: m.clone(),
                });
            }
        }
    }

    fn advance(&mut self, i: usize) {
        let now = self.now_ms;
        let Some(live) = self.nodes[i].live.as_mut() else {
            return;
        };
        let messages = advance(&mut live.core, &mut live.effects, at(now));
        self.send(messages);
    }

    fn report_failed_snapshots(&mut self) {
        for (from, to) in std::mem::take(&mut self.failed_snapshots) {
            if let Some(i) = self.nodes.iter().position(|n| n.id == from) {
                if let Some(live) = self.nodes[i].live.as_mut() {
                    live.core.snapshot_sent(to, false);
                }
            }
        }
    }

    fn deliver_due(&mut self) {
        self.report_failed_snapshots();
        while self.network.peek().is_some_and(|m| m.at_ms <= self.now_ms) {
            let m = self.network.pop().unwrap().message;
            let to = m.to;
            let Some(i) = self.nodes.iter().position(|n| n.id == to) else {
                continue;
            };
            if let Some(live) = self.nodes[i].live.as_mut() {
                let snapshot_from =
                    (m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot).then_some(m.from);
                live.core.peer_message(m, at(self.now_ms));
                self.advance(i);
                // Written to a live connection: the sender's transport reports it sent.
                if let Some(from) = snapshot_from {
                    if let Some(j) = self.nodes.iter().position(|n| n.id == from) {
                        if let Some(sender) = self.nodes[j].live.as_mut() {
                            sender.core.snapshot_sent(to, true);
                        }
                    }
                }
            } else if m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot {
                // Sent to a crashed node: its connection failed under the snapshot.
                self.failed_snapshots.push((m.from, m.to));
            }
        }
    }

    fn client_request(&mut self) {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].live.is_some())
            .collect();
        if live.is_empty() {
            return;
        }
        // Most requests find the active controller, as a forwarding broker would; the rest hit
        // any node and must be refused there.
        let active = live
            .iter()
            .copied()
            .find(|&i| self.nodes[i].live.as_ref().unwrap().core.is_active());
        let i = match active {
            Some(a) if self.rng.chance(800) => a,
            _ => live[self.rng.below(live.len() as u64) as usize],
        };
        let (request, pending) = match self.rng.below(6) {
            0 | 1 => {
                self.topic_counter += 1;
                let name = format!("t{}", self.topic_counter);
                let (tx, rx) = oneshot::channel();
                let spec = CreateTopicSpec {
                    name: name.clone(),
                    num_partitions: 1 + self.rng.below(3) as i32,
                    replication_factor: 1,
                    ..Default::default()
                };
                (
                    Request::CreateTopic {
                        spec,
                        validate_only: false,
                        reply: tx,
                    },
                    Pending::CreateTopic(name, rx),
                )
            }
            2 => {
                let (tx, rx) = oneshot::channel();
                let broker_id = 1 + self.rng.below(3) as i32;
                (
                    Request::AllocateProducerIds {
                        broker_id,
                        reply: tx,
                    },
                    Pending::ProducerIds(rx),
                )
            }
            3 => {
                let (tx, rx) = oneshot::channel();
                let node_id = 1 + self.rng.below(self.voters.len() as u64) as i32;
                // One of two incarnations: a repeat of the current one, or a restart.
                let incarnation = self.rng.below(2);
                let registration = BrokerRegistration::new(
                    node_id,
                    uuid::Uuid::from_u128(u128::from(incarnation) + 1),
                    None,
                )
                .with_listener(
                    "PLAINTEXT",
                    "127.0.0.1",
                    9090 + node_id as u16 + incarnation as u16 * 100,
                    crate::metadata::security_protocol::PLAINTEXT,
                );
                (
                    Request::RegisterBroker {
                        registration,
                        reply: tx,
                    },
                    Pending::Register(rx),
                )
            }
            4 => {
                let (tx, rx) = oneshot::channel();
                (
                    Request::ElectLeaders {
                        election: ElectionType::Preferred,
                        partitions: None,
                        reply: tx,
                    },
                    Pending::Elect(rx),
                )
            }
            _ => {
                let (tx, rx) = oneshot::channel();
                let topic = format!("t{}", 1 + self.rng.below(self.topic_counter.max(1)));
                (
                    Request::CreatePartitions {
                        topic,
                        count: 4,
                        assignments: None,
                        validate_only: false,
                        reply: tx,
                    },
                    Pending::Other(rx),
                )
            }
        };
        self.note(format!("request to node {}", self.nodes[i].id));
        self.nodes[i]
            .live
            .as_mut()
            .unwrap()
            .core
            .request(request, at(self.now_ms));
        self.pending.push(pending);
        self.advance(i);
    }

    /// Collects answers that arrived.
    fn collect_answers(&mut self) {
        use oneshot::error::TryRecvError::Empty;
        let pending = std::mem::take(&mut self.pending);
        for p in pending {
            match p {
                Pending::CreateTopic(name, mut rx) => match rx.try_recv() {
                    Err(Empty) => self.pending.push(Pending::CreateTopic(name, rx)),
                    answer => {
                        let id = answer.as_ref().map(|r| r.as_ref().map(|t| t.id));
                        self.note(format!("answer: create {name}: {id:?}"));
                        if let Ok(Ok(_)) = answer {
                            self.acknowledged_topics.insert(name);
                        }
                    }
                },
                Pending::ProducerIds(mut rx) => match rx.try_recv() {
                    Err(Empty) => self.pending.push(Pending::ProducerIds(rx)),
                    answer => {
                        self.note(format!("answer: producer ids {answer:?}"));
                        if let Ok(Ok(block)) = answer {
                            self.check_block(block);
                        }
                    }
                },
                Pending::Other(mut rx) => match rx.try_recv() {
                    Err(Empty) => self.pending.push(Pending::Other(rx)),
                    answer => self.note(format!("answer: {answer:?}")),
                },
                Pending::Elect(mut rx) => match rx.try_recv() {
                    Err(Empty) => self.pending.push(Pending::Elect(rx)),
                    answer => self.note(format!("answer: elect {answer:?}")),
                },
                Pending::Register(mut rx) => match rx.try_recv() {
                    Err(Empty) => self.pending.push(Pending::Register(rx)),
                    answer => self.note(format!("answer: register {answer:?}")),
                },
            }
        }
    }

    /// A producer id block handed out: it overlaps no other.
    fn check_block(&mut self, block: ProducerIdBlock) {
        if let Some(other) = self
            .blocks
            .iter()
            .find(|b| b.first < block.first + block.size && block.first < b.first + b.size)
        {
            self.fail(format!(
                "producer id blocks {other:?} and {block:?} overlap"
            ));
        }
        self.blocks.push(block);
    }

    /// Adds to the run's history, at the current time.
    fn note(&self, what: String) {
        self.history
            .lock()
            .unwrap()
            .push(format!("{} ms {what}", self.now_ms));
    }

    fn nemesis(&mut self) {
        let n = self.nodes.len();
        match self.rng.below(8) {
            0 => {
                let i = self.rng.below(n as u64) as usize;
                self.crash(i);
            }
            1 | 2 => {
                for i in 0..n {
                    if self.nodes[i].live.is_none() {
                        self.start(i);
                        self.advance(i);
                        break;
                    }
                }
            }
            3 => {
                // Isolate one node, both ways.
                let id = 1 + self.rng.below(n as u64);
                for other in 1..=n as u64 {
                    if other != id {
                        self.cut.insert((id, other));
                        self.cut.insert((other, id));
                    }
                }
            }
            4 => {
                // A one-way cut.
                let a = 1 + self.rng.below(n as u64);
                let b = 1 + self.rng.below(n as u64);
                if a != b {
                    self.cut.insert((a, b));
                }
            }
            _ => self.cut.clear(),
        }
        let live: Vec<u64> = self
            .nodes
            .iter()
            .filter(|n| n.live.is_some())
            .map(|n| n.id)
            .collect();
        self.note(format!("faults: live {live:?} cut {:?}", self.cut));
    }

    fn check_invariants(&mut self) {
        // At most one active controller per term.
        for node in &self.nodes {
            let Some(live) = &node.live else { continue };
            if live.core.is_active() {
                let term = live.core.engine().term();
                if let Some(&other) = self.active_in_term.get(&term) {
                    if other != node.id {
                        self.fail(format!(
                            "nodes {other} and {} both active in term {term}",
                            node.id
                        ));
                    }
                }
                self.active_in_term.insert(term, node.id);
            }
        }
        // Committed metadata agrees: the image at a metadata offset is the same on every node,
        // each node's offsets only grow, and a partition's leader epoch never goes back.
        let mut at_offset: BTreeMap<u64, (u64, Leaders)> = BTreeMap::new();
        let mut leader_of: BTreeMap<((uuid::Uuid, i32), i32), (u64, i32)> = BTreeMap::new();
        for node in &self.nodes {
            let Some(live) = &node.live else { continue };
            let images = live.recorder.images.lock().unwrap();
            let mut last_offset = 0;
            let mut last_epoch: BTreeMap<(uuid::Uuid, i32), i32> = BTreeMap::new();
            for (offset, leaders) in images.iter() {
                if *offset < last_offset {
                    self.fail(format!(
                        "node {} went back from offset {last_offset} to {offset}",
                        node.id
                    ));
                }
                last_offset = *offset;
                for (tp, &(epoch, leader)) in leaders {
                    if last_epoch.get(tp).is_some_and(|&e| e > epoch) {
                        self.fail(format!(
                            "node {}: leader epoch of {tp:?} went back",
                            node.id
                        ));
                    }
                    last_epoch.insert(*tp, epoch);
                    if let Some(&(other_node, other_leader)) = leader_of.get(&(*tp, epoch)) {
                        if other_leader != leader {
                            self.fail(format!(
                                "{tp:?} epoch {epoch}: leader {other_leader} on node {other_node}, {leader} on node {}",
                                node.id
                            ));
                        }
                    }
                    leader_of.insert((*tp, epoch), (node.id, leader));
                }
                if let Some((other, theirs)) = at_offset.get(offset) {
                    if theirs != leaders {
                        self.fail(format!(
                            "nodes {other} and {} applied different metadata at offset {offset}",
                            node.id
                        ));
                    }
                } else {
                    at_offset.insert(*offset, (node.id, leaders.clone()));
                }
            }
        }
    }

    fn step(&mut self) {
        self.now_ms += TICK.as_millis() as u64;
        for i in 0..self.nodes.len() {
            if let Some(live) = self.nodes[i].live.as_mut() {
                live.core.tick(at(self.now_ms));
            }
            self.advance(i);
        }
        // Deliver the messages of this tick in time order, 10 ms at a time.
        let end = self.now_ms;
        let mut t = end - TICK.as_millis() as u64;
        while t < end {
            t += 10;
            let saved = self.now_ms;
            self.now_ms = t;
            self.deliver_due();
            self.now_ms = saved;
        }
        if self.rng.chance(300) {
            self.client_request();
        }
        if self.rng.chance(40) {
            self.nemesis();
        }
        self.collect_answers();
        self.check_invariants();
        if std::env::var("KAFKAIQ_SIM_TRACE").is_ok() {
            let states: Vec<String> = self
                .nodes
                .iter()
                .map(|n| match &n.live {
                    None => format!("{}:down", n.id),
                    Some(l) => format!(
                        "{}:{}{}t{}c{}{:?}",
                        n.id,
                        if l.core.engine().is_leader() {
                            "L"
                        } else {
                            "f"
                        },
                        if l.core.is_active() { "A" } else { "" },
                        l.core.engine().term(),
                        l.core.engine().status().commit,
                        l.core.backlog()
                    ),
                })
                .collect();
            eprintln!(
                "{} ms {:?} cut={:?} acked={}",
                self.now_ms,
                states,
                self.cut,
                self.acknowledged_topics.len()
            );
        }
    }

    /// Heals everything, restarts every node, runs until quiet, and checks convergence.
    fn heal_and_check(&mut self) {
        self.cut.clear();
        for i in 0..self.nodes.len() {
            if self.nodes[i].live.is_none() {
                self.start(i);
            }
        }
        for _ in 0..200 {
            self.step_without_faults();
        }
        self.collect_answers();
        let images: Vec<(u64, Arc<MetadataImage>)> = self
            .nodes
            .iter()
            .map(|n| (n.id, n.live.as_ref().unwrap().cache.image()))
            .collect();
        let (first_id, first) = &images[0];
        for (id, image) in &images[1..] {
            if image.metadata_offset != first.metadata_offset
                || image.cluster_id != first.cluster_id
                || image.cluster_id.is_empty()
                || image.topics != first.topics
                || image.brokers != first.brokers
                || image.next_producer_id_block_start != first.next_producer_id_block_start
            {
                self.fail(format!(
                    "after healing, node {id} (offset {}) and node {first_id} (offset {}) differ",
                    image.metadata_offset, first.metadata_offset
                ));
            }
        }
        for name in &self.acknowledged_topics {
            if first.topic(name).is_none() {
                self.fail(format!(
                    "acknowledged topic {name} is missing after healing"
                ));
            }
        }
        for block in &self.blocks {
            if block.first + block.size > first.next_producer_id_block_start {
                self.fail(format!(
                    "handed-out block {block:?} is beyond the committed next block start {}",
                    first.next_producer_id_block_start
                ));
            }
        }
        // Liveness once healed: a new topic, sent to the active controller, commits everywhere.
        let Some(active) =
            (0..self.nodes.len()).find(|&i| self.nodes[i].live.as_ref().unwrap().core.is_active())
        else {
            self.fail("no active controller after healing".into());
        };
        let (tx, mut rx) = oneshot::channel();
        let spec = CreateTopicSpec {
            name: "after-heal".into(),
            num_partitions: 1,
            replication_factor: 1,
            ..Default::default()
        };
        let registration = BrokerRegistration::new(1, uuid::Uuid::from_u128(3), None)
            .with_listener(
                "PLAINTEXT",
                "127.0.0.1",
                9091,
                crate::metadata::security_protocol::PLAINTEXT,
            );
        let (reg_tx, _reg_rx) = oneshot::channel();
        let now = at(self.now_ms);
        let core = &mut self.nodes[active].live.as_mut().unwrap().core;
        core.request(
            Request::RegisterBroker {
                registration,
                reply: reg_tx,
            },
            now,
        );
        core.request(
            Request::CreateTopic {
                spec,
                validate_only: false,
                reply: tx,
            },
            now,
        );
        self.advance(active);
        for _ in 0..50 {
            self.step_without_faults();
        }
        match rx.try_recv() {
            Ok(Ok(_)) => {}
            other => self.fail(format!(
                "a request after healing was not committed: {other:?}"
            )),
        }
        for node in &self.nodes {
            if node
                .live
                .as_ref()
                .unwrap()
                .cache
                .image()
                .topic("after-heal")
                .is_none()
            {
                self.fail(format!(
                    "node {} lacks the topic created after healing",
                    node.id
                ));
            }
        }
    }

    fn step_without_faults(&mut self) {
        self.now_ms += TICK.as_millis() as u64;
        for i in 0..self.nodes.len() {
            if let Some(live) = self.nodes[i].live.as_mut() {
                live.core.tick(at(self.now_ms));
            }
            self.advance(i);
        }
        let end = self.now_ms;
        let mut t = end - TICK.as_millis() as u64;
        while t < end {
            t += 10;
            let saved = self.now_ms;
            self.now_ms = t;
            self.deliver_due();
            self.now_ms = saved;
        }
        self.collect_answers();
        self.check_invariants();
    }
}

/// Runs one seed and checks it; returns its history.
fn run_seed(seed: u64) -> Vec<String> {
    let voters = [1, 3, 3, 5][(seed % 4) as usize];
    let mut sim = Sim::new(seed, voters);
    for _ in 0..300 {
        sim.step();
    }
    sim.heal_and_check();
    let history = sim.history.lock().unwrap().clone();
    history
}

/// One seed replays one cluster history exactly: every message sent and its fate, every image
/// published on every node, every request, answer and fault, in order — nothing in the
/// controller reads a clock or draws a random number of its own. A different seed gives a
/// different history (the check is not vacuous).
#[test]
fn a_seed_replays_its_cluster_history_exactly() {
    for seed in [2, 7] {
        let first = run_seed(seed);
        let second = run_seed(seed);
        assert!(
            first.len() > 1_000 && first.iter().any(|e| e.contains("answer: create")),
            "seed {seed}: a history of {} events",
            first.len()
        );
        if let Some(at) = (0..first.len().min(second.len())).find(|&i| first[i] != second[i]) {
            panic!(
                "seed {seed} diverged at event {at}:\n  first:  {}\n  second: {}",
                first[at], second[at]
            );
        }
        assert_eq!(first.len(), second.len(), "seed {seed}: history lengths");
        let other = run_seed(seed + 4);
        assert_ne!(
            first,
            other,
            "seeds {seed} and {} gave one history",
            seed + 4
        );
    }
}

#[test]
fn control_plane_simulation() {
    if let Ok(seed) = std::env::var("KAFKAIQ_SIM_SEED") {
        run_seed(seed.parse().expect("KAFKAIQ_SIM_SEED is a number"));
        return;
    }
    let seeds: u64 = std::env::var("KAFKAIQ_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(250);
    for seed in 0..seeds {
        run_seed(seed);
    }
}

/// Two voters as bare [`ControllerCore`]s with broker sessions of `SESSION_MS`, stepped by
/// hand on a manual clock: every message delivered at once, except that while `held` no
/// append is acknowledged (so a pass stays in flight).
struct SessionVoters {
    cores: Vec<ControllerCore>,
    effects: Vec<Effects<MemState>>,
    caches: Vec<Arc<MetadataCache>>,
    active: usize,
    now: u64,
}

impl SessionVoters {
    const SESSION_MS: u64 = 1_000;

    fn start() -> SessionVoters {
        let lifecycle = super::driver::Lifecycle {
            session_timeout_ms: Self::SESSION_MS,
            failover_grace_ms: Self::SESSION_MS,
        };
        let mut caches = Vec::new();
        let mut effects = Vec::new();
        let cores = (1..=2u64)
            .map(|id| {
                let quorum = QuorumConfig {
                    node_id: id,
                    voters: vec![1, 2],
                    election_ticks: 10,
                    heartbeat_ticks: 2,
                    fixed_election_ticks: Some(10 + 3 * id as usize),
                };
                let durable = MemState::new();
                let engine = QuorumEngine::open(&quorum, durable.clone().recover().unwrap());
                let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
                caches.push(cache.clone());
                let publisher = Arc::new(MetadataPublisher::new(
                    cache,
                    MetadataImage::empty(String::new(), id as i32),
                ));
                let image = publisher.image();
                effects.push(Effects::new(durable, publisher, quorum_state()));
                ControllerCore::new(
                    config_for(id),
                    engine,
                    image,
                    "sessions".into(),
                    Some(lifecycle),
                )
            })
            .collect();
        let mut voters = SessionVoters {
            cores,
            effects,
            caches,
            active: 0,
            now: 0,
        };
        voters.active = loop {
            voters.step(false);
            if let Some(i) = voters.cores.iter().position(|c| c.is_active()) {
                if !voters.caches[i].image().cluster_id.is_empty() {
                    break i;
                }
            }
            voters.now += TICK.as_millis() as u64;
            assert!(voters.now < 60_000, "no active controller");
        };
        voters
    }

    fn step(&mut self, held: bool) {
        let now = self.now;
        let mut messages = Vec::new();
        for (core, effects) in self.cores.iter_mut().zip(&mut self.effects) {
            core.tick(at(now));
            messages.extend(advance(core, effects, at(now)));
        }
        while !messages.is_empty() {
            for m in std::mem::take(&mut messages) {
                if held && m.get_msg_type() == raft::eraftpb::MessageType::MsgAppendResponse {
                    continue;
                }
                self.cores[m.to as usize - 1].peer_message(m, at(now));
            }
            for (core, effects) in self.cores.iter_mut().zip(&mut self.effects) {
                messages.extend(advance(core, effects, at(now)));
            }
        }
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.caches[self.active].image()
    }

    /// BrokerRegistration of broker `id` as `incarnation` on `connection`, decided in one step.
    fn register(
        &mut self,
        id: i32,
        incarnation: u128,
        connection: Option<u64>,
    ) -> Result<i64, ApiError> {
        let registration = BrokerRegistration::new(id, uuid::Uuid::from_u128(incarnation), None)
            .with_listener(
                "PLAINTEXT",
                "127.0.0.1",
                9097,
                crate::metadata::security_protocol::PLAINTEXT,
            );
        let (tx, mut rx) = oneshot::channel();
        let cluster_id = self.image().cluster_id.clone();
        self.cores[self.active].request(
            Request::BrokerRegistration {
                registration,
                cluster_id,
                connection,
                reply: tx,
            },
            at(self.now),
        );
        self.step(false);
        rx.try_recv().expect("registration answered")
    }

    /// Queues a heartbeat of broker `id` at `broker_epoch`, caught up with the image.
    fn heartbeat(
        &mut self,
        id: i32,
        broker_epoch: i64,
        connection: Option<u64>,
    ) -> oneshot::Receiver<Result<super::HeartbeatOutcome, ApiError>> {
        let (tx, rx) = oneshot::channel();
        let metadata_offset = self.image().metadata_offset as i64;
        self.cores[self.active].request(
            Request::BrokerHeartbeat {
                broker_id: id,
                broker_epoch,
                metadata_offset,
                want_fence: false,
                want_shut_down: false,
                connection,
                peers_replayed: false,
                loads: None,
                reply: tx,
            },
            at(self.now),
        );
        rx
    }

    /// Registers broker `id` and heartbeats until it is unfenced; its broker epoch.
    fn register_unfenced(&mut self, id: i32, incarnation: u128, connection: Option<u64>) -> i64 {
        let broker_epoch = self
            .register(id, incarnation, connection)
            .expect("registered");
        for _ in 0..3 {
            let _answer = self.heartbeat(id, broker_epoch, connection);
            self.now += 100;
            self.step(false);
        }
        assert!(
            self.image().is_broker_alive(id),
            "the broker is unfenced once caught up"
        );
        broker_epoch
    }
}

/// Two voters with broker sessions (no nemesis). The follower's acknowledgements of appends
/// are lost (its heartbeat answers are not, so the leader stays leader), so a pass stays in
/// flight; the broker's heartbeats meanwhile queue behind it. They renew its session
/// on arrival, and while one waits the broker is in contact: no fencing is queued however long
/// the write takes (Kafka's `BrokerHeartbeatTracker`). Before this, sessions were renewed only
/// when a heartbeat was decided, and a restart of a large cluster fenced its brokers over and
/// over, each fencing a write of thousands of partition changes that delayed the next.
#[test]
fn heartbeats_waiting_behind_a_write_in_flight_keep_their_broker_in_session() {
    let mut voters = SessionVoters::start();
    let broker_epoch = voters.register_unfenced(7, 7, Some(1));
    let active = voters.active;

    // Appends go unacknowledged: a CreateTopic's pass stays in flight.
    let (tx, _rx) = oneshot::channel();
    voters.cores[active].request(
        Request::CreateTopic {
            spec: CreateTopicSpec {
                name: "held".into(),
                num_partitions: 1,
                replication_factor: 1,
                ..Default::default()
            },
            validate_only: false,
            reply: tx,
        },
        at(voters.now),
    );
    voters.step(true);
    assert!(
        voters.cores[active].backlog().1.is_some(),
        "the pass is in flight"
    );
    // Heartbeats keep coming, every 300 ms, for five session timeouts.
    let mut answers = Vec::new();
    let until = voters.now + 5 * SessionVoters::SESSION_MS;
    while voters.now < until {
        answers.push(voters.heartbeat(7, broker_epoch, Some(1)));
        voters.now += 300;
        voters.step(true);
    }
    assert!(
        voters.cores[active].is_active(),
        "still the active controller"
    );
    let (waiting, in_flight) = voters.cores[active].backlog();
    assert!(in_flight.is_some(), "the pass is still in flight");
    assert_eq!(
        waiting,
        answers.len(),
        "only the heartbeats wait behind the pass: no fencing of their broker was queued"
    );
    // Acknowledged again: the write commits and the waiting heartbeats are answered unfenced.
    for _ in 0..10 {
        voters.now += TICK.as_millis() as u64;
        voters.step(false);
    }
    assert!(voters.image().topic("held").is_some());
    assert!(voters.image().is_broker_alive(7));
    for mut rx in answers {
        let outcome = rx.try_recv().expect("answered").expect("heartbeat");
        assert!(!outcome.is_fenced);
    }
}

/// A registration of another incarnation for a broker whose session is valid (unfenced,
/// heard from within the session timeout) is refused DUPLICATE_BROKER_REGISTRATION whichever
/// connection it comes on — the broker's own, another, none (as after a failover, when the
/// session has no connection yet) — as Kafka's `ClusterControlManager.registerBroker` refuses
/// it; the broker keeps its id and epoch. Once it has been silent past the session timeout,
/// a new incarnation registers.
#[test]
fn a_second_incarnation_is_refused_while_the_registered_one_is_in_session() {
    let mut voters = SessionVoters::start();
    let broker_epoch = voters.register_unfenced(7, 7, Some(1));
    let no_connection_epoch = voters.register_unfenced(8, 8, None);
    for (id, forged_on) in [
        (7, Some(1)),
        (7, Some(2)),
        (7, None),
        (8, Some(3)),
        (8, None),
    ] {
        assert_eq!(
            voters.register(id, 0xbad, forged_on),
            Err(ApiError::DuplicateBrokerRegistration),
            "broker {id}, forged registration on connection {forged_on:?}"
        );
    }
    let image = voters.image();
    let registered = image.broker(7).unwrap();
    assert_eq!(registered.incarnation_id, uuid::Uuid::from_u128(7));
    assert_eq!(registered.broker_epoch, broker_epoch);
    assert!(image.is_broker_alive(7) && image.is_broker_alive(8));
    let mut answer = voters.heartbeat(7, broker_epoch, Some(1));
    voters.now += 100;
    voters.step(false);
    assert!(!answer.try_recv().unwrap().unwrap().is_fenced);
    // The same incarnation again (a retried request) is answered with its epoch.
    assert_eq!(voters.register(7, 7, Some(1)), Ok(broker_epoch));

    // Broker 8 falls silent; once its session has expired a new incarnation takes its id.
    let until = voters.now + 2 * SessionVoters::SESSION_MS;
    while voters.now < until {
        let _answer = voters.heartbeat(7, broker_epoch, Some(1));
        voters.now += 300;
        voters.step(false);
    }
    assert!(!voters.image().is_broker_alive(8), "fenced once silent");
    let new_epoch = voters
        .register(8, 0x8b, Some(4))
        .expect("a new incarnation");
    assert!(new_epoch > no_connection_epoch);
    assert_eq!(
        voters.image().broker(8).unwrap().incarnation_id,
        uuid::Uuid::from_u128(0x8b)
    );
}

/// Node 1 leads `t-0` in two leader epochs, with records in each; its voter crashes, and while
/// it is down broker 1 is fenced and broker 2 leads under a newer epoch. The voter restarts
/// from its durable state, whose persisted commit index is older than what it had applied, so
/// its replay yields images that are long superseded. Its replica manager (and a recorder
/// beside it) wait for the image holding broker 1's new registration: they see no image older
/// than the last one applied before the crash, no superseded leader epoch, and the partition's
/// epoch cache is what it was.
#[tokio::test(flavor = "current_thread")]
async fn a_restarted_voter_applies_no_superseded_image_to_its_replica_manager() {
    use crate::clock::ManualClock;
    use crate::replica::ReplicaManager;
    use kafkaiq_storage::batch::builder::simple;
    use kafkaiq_storage::{LogManager, TopicPartition};

    const NODE: usize = 0;
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("t", 0);
    let mut sim = SimCluster::new(3);
    let cluster_id = sim.run_until("an active controller with a cluster id", |s| {
        s.active()
            .filter(|&i| !s.caches[i].image().cluster_id.is_empty())
    });
    let cluster_id = sim.caches[cluster_id].image().cluster_id.clone();
    let _ = cluster_id;
    let replicas = |dir: &std::path::Path| {
        let config = config_for(1);
        let logs = Arc::new(
            LogManager::open(&[dir.to_path_buf()], config.default_log_config(), 0).unwrap(),
        );
        Arc::new(ReplicaManager::new(
            config,
            logs,
            Arc::new(ManualClock::new(1_000_000)),
        ))
    };
    let recorder = Arc::new(Recorder::default());
    let manager = replicas(dir.path());
    sim.hold_listeners(NODE, 1, vec![manager.clone(), recorder.clone()]);
    for (id, incarnation) in [(1, 1), (2, 2), (3, 3)] {
        sim.register(id, incarnation);
    }
    sim.create_topic("t", vec![1, 2, 3]);
    let leads = |s: &SimCluster, leader: i32| {
        s.caches[NODE]
            .image()
            .topic("t")
            .and_then(|t| t.partitions.get(&0).cloned())
            .filter(|p| p.leader == leader)
            .map(|p| p.leader_epoch)
    };
    let first = sim.run_until("node 1 leading t-0", |s| leads(s, 1));
    let append = |m: &ReplicaManager, image: &MetadataImage| {
        m.partition_or_error(image, &tp)
            .unwrap()
            .append_records_to_leader(&simple(5, 5, 0), 1, 1_000_000)
            .unwrap();
    };
    append(&manager, &sim.caches[NODE].image());
    // Leadership moves to 2, then back to 1 by an unclean election (2 and 3 fenced): a second
    // epoch led by node 1.
    sim.fence(1);
    sim.run_until("node 2 leading t-0", |s| leads(s, 2));
    sim.fence(2);
    sim.fence(3);
    sim.register(1, 4);
    sim.elect_unclean("t");
    let second = sim.run_until("node 1 leading t-0 again", |s| {
        leads(s, 1).filter(|&e| e > first)
    });
    sim.register(2, 6);
    sim.register(3, 7);
    append(&manager, &sim.caches[NODE].image());
    let epochs_before = manager.hosted(&tp).unwrap().log().epoch_entries();
    assert_eq!(epochs_before.len(), 2, "{epochs_before:?}");
    let last_applied = sim.caches[NODE].applied_offset();

    // Node 1's process dies; broker 2 leads under a newer epoch meanwhile.
    sim.crash(NODE);
    drop(manager);
    sim.fence(1);
    sim.elect_unclean("t");
    let third = sim.run_until("node 2 or 3 leading t-0 under a newer epoch", |s| {
        (1..3).find_map(|i| {
            s.caches[i]
                .image()
                .topic("t")
                .and_then(|t| t.partitions.get(&0).cloned())
                .filter(|p| p.leader > 1 && p.leader_epoch > second)
                .map(|p| p.leader_epoch)
        })
    });
    for _ in 0..20 {
        sim.step();
    }

    // Restarted from its durable state: a new incarnation registers.
    sim.start(NODE);
    let recorder = Arc::new(Recorder::default());
    let manager = replicas(dir.path());
    sim.hold_listeners(NODE, 5, vec![manager.clone(), recorder.clone()]);
    sim.register(1, 5);
    sim.run_until("node 1's replica manager caught up", |s| {
        (s.caches[NODE].applied_offset() > last_applied).then_some(())
    });
    let images = recorder.images.lock().unwrap().clone();
    assert!(
        images
            .first()
            .is_some_and(|(offset, _)| *offset > last_applied),
        "first image after the restart at {:?}, last applied before it {last_applied}",
        images.first().map(|(o, _)| o)
    );
    for (offset, leaders) in &images {
        for &(epoch, _) in leaders.values() {
            assert!(
                epoch >= third,
                "image at {offset} has superseded leader epoch {epoch}"
            );
        }
    }
    assert_eq!(
        manager.hosted(&tp).unwrap().log().epoch_entries(),
        epochs_before
    );
}

/// Voters driven in lock step, every message delivered at once, for scenarios that need a
/// specific sequence of events rather than a random one.
struct SimCluster {
    cores: Vec<Option<ControllerCore>>,
    /// Where each live voter's commands take effect.
    effects: Vec<Option<Effects<MemState>>>,
    durables: Vec<MemState>,
    caches: Vec<Arc<MetadataCache>>,
    publishers: Vec<Arc<MetadataPublisher>>,
    now_ms: u64,
}

impl SimCluster {
    fn new(voters: u64) -> SimCluster {
        let mut sim = SimCluster {
            cores: Vec::new(),
            effects: Vec::new(),
            durables: (1..=voters).map(|_| MemState::new()).collect(),
            caches: Vec::new(),
            publishers: Vec::new(),
            now_ms: 0,
        };
        for i in 0..voters as usize {
            sim.cores.push(None);
            sim.effects.push(None);
            sim.caches
                .push(Arc::new(MetadataCache::new(MetadataImage::default())));
            sim.publishers.push(Arc::new(MetadataPublisher::new(
                sim.caches[i].clone(),
                MetadataImage::default(),
            )));
            sim.start(i);
        }
        sim
    }

    /// Starts voter `i` from its durable state, with a new cache and publisher.
    fn start(&mut self, i: usize) {
        let id = i as u64 + 1;
        let voters: Vec<u64> = (1..=self.durables.len() as u64).collect();
        let quorum = QuorumConfig {
            node_id: id,
            voters,
            election_ticks: 10,
            heartbeat_ticks: 2,
            fixed_election_ticks: Some(10 + 3 * id as usize),
        };
        let engine = QuorumEngine::open(&quorum, self.durables[i].clone().recover().unwrap());
        self.caches[i] = Arc::new(MetadataCache::new(MetadataImage::default()));
        self.publishers[i] = Arc::new(MetadataPublisher::new(
            self.caches[i].clone(),
            MetadataImage::empty(String::new(), id as i32),
        ));
        self.cores[i] = Some(ControllerCore::new(
            config_for(id),
            engine,
            self.publishers[i].image(),
            "scenario".into(),
            None,
        ));
        self.effects[i] = Some(Effects::new(
            self.durables[i].clone(),
            self.publishers[i].clone(),
            quorum_state(),
        ));
    }

    fn crash(&mut self, i: usize) {
        if let (Some(core), Some(effects)) = (self.cores[i].take(), self.effects[i].take()) {
            crash(core, effects);
        }
    }

    /// Every live voter with where its commands take effect.
    fn live(&mut self) -> impl Iterator<Item = (&mut ControllerCore, &mut Effects<MemState>)> {
        self.cores
            .iter_mut()
            .zip(&mut self.effects)
            .filter_map(|(c, e)| Some((c.as_mut()?, e.as_mut()?)))
    }

    /// What node `i + 1` hosts, held until its image holds broker `i + 1` as `incarnation`.
    fn hold_listeners(&self, i: usize, incarnation: u128, listeners: Vec<Arc<dyn ImageListener>>) {
        let node_id = i as i32 + 1;
        let incarnation = uuid::Uuid::from_u128(incarnation);
        self.publishers[i].add_listeners_once_caught_up(listeners, move |image| {
            image.holds_incarnation(node_id, incarnation)
        });
    }

    fn active(&self) -> Option<usize> {
        self.cores
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.is_active()))
    }

    /// One tick of every live voter, then messages delivered until none is left.
    fn step(&mut self) {
        self.now_ms += TICK.as_millis() as u64;
        let now = self.now_ms;
        let mut messages = Vec::new();
        for (core, effects) in self.live() {
            core.tick(at(now));
            messages.extend(advance(core, effects, at(now)));
        }
        while !messages.is_empty() {
            for m in std::mem::take(&mut messages) {
                if let Some(core) = self.cores[m.to as usize - 1].as_mut() {
                    core.peer_message(m, at(now));
                }
            }
            for (core, effects) in self.live() {
                messages.extend(advance(core, effects, at(now)));
            }
        }
    }

    fn run_until<T>(&mut self, what: &str, mut done: impl FnMut(&SimCluster) -> Option<T>) -> T {
        for _ in 0..2_000 {
            if let Some(v) = done(self) {
                return v;
            }
            self.step();
        }
        panic!("not reached within 2,000 ticks: {what}");
    }

    /// Sends a request to the active controller (waiting for one) and runs until it is answered.
    fn request<T>(
        &mut self,
        make: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> Request,
    ) -> T {
        self.try_request(make).expect("request succeeds")
    }

    /// [`SimCluster::request`], answered with success or the error.
    fn try_request<T>(
        &mut self,
        make: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> Request,
    ) -> Result<T, ApiError> {
        let active = self.run_until("an active controller", |s| s.active());
        let (tx, mut rx) = oneshot::channel();
        self.cores[active]
            .as_mut()
            .unwrap()
            .request(make(tx), at(self.now_ms));
        self.run_until("an answer", |_| match rx.try_recv() {
            Ok(answer) => Some(answer),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(e) => panic!("request dropped: {e}"),
        })
    }

    /// Broker `id` registered as `incarnation`, unfenced at once.
    fn register(&mut self, id: i32, incarnation: u128) {
        let registration = BrokerRegistration::new(id, uuid::Uuid::from_u128(incarnation), None)
            .with_listener(
                "PLAINTEXT",
                "127.0.0.1",
                1,
                crate::metadata::security_protocol::PLAINTEXT,
            );
        self.request(|reply| Request::RegisterBroker {
            registration,
            reply,
        });
    }

    fn elect_unclean(&mut self, topic: &str) {
        self.request(|reply| Request::ElectLeaders {
            election: super::ElectionType::Unclean,
            partitions: Some(vec![(topic.into(), 0)]),
            reply,
        });
    }

    fn fence(&mut self, id: i32) {
        let active = self.run_until("an active controller", |s| s.active());
        let epoch = self.caches[active].image().broker(id).unwrap().broker_epoch;
        self.cores[active].as_mut().unwrap().request(
            Request::FenceBroker {
                broker_id: id,
                broker_epoch: epoch,
                after_failover: false,
            },
            at(self.now_ms),
        );
        self.step();
    }

    fn create_topic(&mut self, name: &str, replicas: Vec<i32>) {
        self.request(|reply| Request::CreateTopic {
            spec: CreateTopicSpec {
                name: name.into(),
                num_partitions: -1,
                replication_factor: -1,
                assignments: vec![(0, replicas)],
                ..Default::default()
            },
            validate_only: false,
            reply,
        });
    }
}

/// A topic of `partitions` partitions on broker 1, created through the active controller.
fn create_wide(sim: &mut SimCluster, name: &str, partitions: i32) -> Result<(), ApiError> {
    sim.try_request(|reply| Request::CreateTopic {
        spec: CreateTopicSpec {
            name: name.into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: (0..partitions).map(|p| (p, vec![1])).collect(),
            ..Default::default()
        },
        validate_only: false,
        reply,
    })
    .map(|_| ())
}

/// The metadata bound, small: client changes stop with POLICY_VIOLATION before the image
/// could outgrow a snapshot, and every snapshot written is within the bound.
#[test]
fn client_changes_stop_before_the_image_outgrows_a_snapshot() {
    const SNAPSHOT_BYTES_MAX: usize = 64 * 1024;
    let mut sim = SimCluster::new(1);
    let core = sim.cores[0].as_mut().unwrap();
    core.set_snapshot_bytes_max(SNAPSHOT_BYTES_MAX);
    core.set_snapshot_entries(4);
    sim.register(1, 1);
    let mut created = 0;
    let refused = loop {
        assert!(created < 1_000, "no client change was ever refused");
        match create_wide(&mut sim, &format!("t{created}"), 10) {
            Ok(()) => created += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(refused.code(), 44, "{refused}");
    assert!(created > 4, "only {created} topics fit");
    let image = sim.caches[0].image();
    assert_eq!(image.topics.len(), created);
    assert!(image.snapshot_bytes_bound() <= SNAPSHOT_BYTES_MAX);
    let snapshot = sim.durables[0].clone().recover().unwrap().snapshot;
    assert!(snapshot.get_metadata().index > 0, "a snapshot was taken");
    assert!(snapshot.data.len() <= SNAPSHOT_BYTES_MAX);
    // A change that shrinks the image is still taken, and so is a new topic once room is made.
    let id = image.topic("t0").unwrap().id;
    sim.request(|reply| Request::DeleteTopic {
        topic_id: id,
        reply,
    });
    create_wide(&mut sim, "again", 10).expect("room was made");
}

/// A snapshot larger than the bound is never written (no voter would read it): the voter
/// keeps its log and goes on.
#[test]
fn an_image_past_the_snapshot_bound_is_not_snapshotted() {
    let mut sim = SimCluster::new(1);
    sim.cores[0].as_mut().unwrap().set_snapshot_entries(4);
    sim.register(1, 1);
    for i in 0..6 {
        create_wide(&mut sim, &format!("t{i}"), 10).unwrap();
    }
    let before = sim.durables[0].clone().recover().unwrap().snapshot;
    assert!(before.get_metadata().index > 0, "a snapshot was taken");
    // The bound falls below the image (as a smaller bound in a newer version would).
    sim.cores[0].as_mut().unwrap().set_snapshot_bytes_max(100);
    for i in 0..5 {
        let id = sim.caches[0].image().topic(&format!("t{i}")).unwrap().id;
        sim.request(|reply| Request::DeleteTopic {
            topic_id: id,
            reply,
        });
    }
    let after = sim.durables[0].clone().recover().unwrap();
    assert_eq!(
        after.snapshot.get_metadata().index,
        before.get_metadata().index,
        "no snapshot past the bound"
    );
    assert!(after.entries.len() >= 4, "the log kept its entries");
    assert_eq!(sim.caches[0].image().topics.len(), 1);
}
