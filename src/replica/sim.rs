//! A deterministic simulation of the data plane, driven by one seed: three replicas of one
//! partition (real [`Partition`]s over real logs on disk), the replica fetcher's own answer
//! rules ([`fetch_task::append`], [`fetch_task::truncate`]), a model controller that commits
//! AlterPartition, fences and unfences brokers and elects leaders from the ISR as Kafka's does,
//! and an idempotent acks=all client (one batch in flight, retried with the same sequence until
//! acknowledged). A nemesis crashes (kill -9: the log reopened with recovery, the high
//! watermark from an older checkpoint), restarts, pauses (SIGSTOP, fenced after the session
//! timeout) and cuts links between replicas.
//!
//! Checked after every step: one value per offset across replicas and epochs,
//! every acknowledged write committed at the offset it was acknowledged at, no replica
//! truncating below its own high watermark, no OUT_OF_ORDER_SEQUENCE_NUMBER or unexpected
//! error for the client. After the run the faults heal and every replica must hold the same
//! log, with every acknowledged record once.
//!
//! A failing seed is printed; `KAFKAIQ_SIM_SEED=N cargo test --lib data_plane` replays it
//! alone, and `KAFKAIQ_SIM_SEEDS=N` sets how many seeds a run tries.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use kafkaiq_storage::batch::builder::{batch, Spec};
use kafkaiq_storage::batch::BatchIter;
use kafkaiq_storage::{Log, LogConfig, TopicPartition};
use uuid::Uuid;

use super::brokers::BrokerView;
use super::decisions::FollowerFetch;
use super::fetch_params::{FetchIsolation, FetchParams};
use super::fetcher::state::{self, AnswerAction, PartitionAnswer, PartitionFetchState, Phase};
use super::fetcher::task::{self as fetch_task, Failure, Fetched};
use super::isr::{CommittedPartition, IsrProposal};
use super::partition::{Partition, Role};
use crate::errors::ApiError;
use crate::metadata::{
    BrokerRegistration, LeaderRecoveryState, MetadataImage, MetadataRecord, PartitionRegistration,
};
use crate::sim_rng::Rng;

const NODES: [i32; 3] = [1, 2, 3];
const MIN_ISR: i32 = 2;
const STEP_MS: i64 = 50;
const LAG_MS: i64 = 1_000;
/// A paused broker is fenced after this many steps without heartbeats.
const SESSION_STEPS: u64 = 30;
/// A parked acks=all produce times out after this many steps.
const PRODUCE_TIMEOUT_STEPS: u64 = 20;
const PRODUCER_ID: i64 = 9;
/// Small fetches, so a follower often catches up in several rounds.
const FETCH_BYTES_MAX: usize = 400;

struct Node {
    dir: PathBuf,
    /// `None` while crashed.
    partition: Option<Arc<Partition>>,
    /// As follower: the fetcher's state of the partition.
    fetch: Option<PartitionFetchState>,
    paused_at: Option<u64>,
    /// The high watermark of the last checkpoint (what a restart starts from).
    checkpointed: i64,
    /// The high watermark at the end of the previous step, in this incarnation.
    high_watermark_seen: i64,
}

impl Node {
    fn running(&self) -> Option<&Arc<Partition>> {
        self.partition.as_ref().filter(|_| self.paused_at.is_none())
    }
}

/// The client's batch in flight.
struct InFlight {
    base_sequence: i32,
    count: i32,
    /// Where it was appended: (node, partition, required offset, epoch, first offset, step).
    sent: Option<(i32, Arc<Partition>, i64, i32, i64, u64)>,
}

struct Sim {
    seed: u64,
    rng: Rng,
    step: u64,
    now_ms: i64,
    tp: TopicPartition,
    topic_id: Uuid,
    brokers: Arc<BrokerView>,
    nodes: BTreeMap<i32, Node>,
    reg: PartitionRegistration,
    fenced: BTreeSet<i32>,
    /// Links between replicas that are cut (both directions).
    cut: BTreeSet<(i32, i32)>,
    /// AlterPartition requests on their way to the controller.
    alter_partitions: VecDeque<(i32, IsrProposal)>,
    next_sequence: i32,
    in_flight: Option<InFlight>,
    /// (first offset, base sequence, count) of every acknowledged batch.
    acked: Vec<(i64, i32, i32)>,
    /// The committed log: the value (sequence) at every offset below the highest high watermark.
    committed: Vec<i32>,
    stats: Stats,
    _dir: tempfile::TempDir,
}

/// What a run went through, to show the faults did happen.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    crashes: u32,
    pauses: u32,
    elections: u32,
    isr_changes: u32,
    truncations: u32,
    retries: u32,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("sim", 0);
        let mut nodes = BTreeMap::new();
        for id in NODES {
            nodes.insert(
                id,
                Node {
                    dir: dir.path().join(format!("node-{id}")),
                    partition: None,
                    fetch: None,
                    paused_at: None,
                    checkpointed: 0,
                    high_watermark_seen: 0,
                },
            );
        }
        let mut sim = Sim {
            seed,
            rng: Rng::new(seed),
            step: 0,
            now_ms: 1_700_000_000_000,
            tp,
            topic_id: Uuid::from_u128(7),
            brokers: Arc::new(BrokerView::default()),
            nodes,
            reg: PartitionRegistration {
                replicas: NODES.to_vec(),
                isr: NODES.to_vec(),
                leader: NODES[0],
                leader_epoch: 0,
                partition_epoch: 0,
                leader_recovery_state: LeaderRecoveryState::Recovered,
                adding_replicas: Vec::new(),
                removing_replicas: Vec::new(),
            },
            fenced: BTreeSet::new(),
            cut: BTreeSet::new(),
            alter_partitions: VecDeque::new(),
            next_sequence: 0,
            in_flight: None,
            acked: Vec::new(),
            committed: Vec::new(),
            stats: Stats::default(),
            _dir: dir,
        };
        sim.publish_brokers();
        for id in NODES {
            sim.open(id);
        }
        sim.publish();
        sim
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "data-plane simulation, seed {} (KAFKAIQ_SIM_SEED={}), step {}: {what}",
            self.seed, self.seed, self.step
        );
    }

    /// The brokers' fencing, as the image shows it (ISR eligibility).
    fn publish_brokers(&self) {
        let mut image = MetadataImage::empty("sim".into(), 1);
        let records: Vec<MetadataRecord> = NODES
            .iter()
            .map(|&id| {
                MetadataRecord::RegisterBroker(BrokerRegistration {
                    broker_epoch: 100 + i64::from(id),
                    fenced: self.fenced.contains(&id),
                    ..BrokerRegistration::new(id, Uuid::from_u128(id as u128), None)
                })
            })
            .collect();
        image.apply_in_place(&records);
        self.brokers.update(&image);
    }

    /// Starts node `id`: its log opened with recovery (a crash never closed it), its high
    /// watermark from the last checkpoint.
    fn open(&mut self, id: i32) {
        let node = &self.nodes[&id];
        let log = Log::open(&node.dir, LogConfig::default(), 0, false, self.now_ms)
            .unwrap_or_else(|e| self.fail(format!("node {id} cannot open its log: {e}")));
        let p = Partition::new(
            self.tp.clone(),
            self.topic_id,
            Arc::new(log),
            id,
            node.checkpointed,
            MIN_ISR,
            LAG_MS,
            self.brokers.clone(),
        );
        let node = self.nodes.get_mut(&id).unwrap();
        node.high_watermark_seen = p.high_watermark();
        node.partition = Some(Arc::new(p));
        node.fetch = None;
    }

    /// The registration reaches every running node (a paused one gets it when it continues).
    fn publish(&mut self) {
        for id in NODES {
            self.publish_to(id);
        }
    }

    fn publish_to(&mut self, id: i32) {
        let reg = self.reg.clone();
        let node = &self.nodes[&id];
        let Some(p) = node.running().cloned() else {
            return;
        };
        let fetch = node.fetch.clone();
        let fetch = if reg.leader == id {
            if let Err(e) = p.make_leader(&reg, self.now_ms) {
                self.fail(format!("node {id} cannot lead: {e}"));
            }
            None
        } else {
            if let Err(e) = p.make_follower(&reg) {
                self.fail(format!("node {id} cannot follow: {e}"));
            }
            let stale = fetch
                .as_ref()
                .is_none_or(|f| f.current_leader_epoch != reg.leader_epoch);
            if reg.leader < 0 {
                None
            } else if stale {
                Some(PartitionFetchState::initial(
                    self.topic_id,
                    reg.leader_epoch,
                    p.log().log_end_offset(),
                    p.high_watermark(),
                    p.log().latest_epoch(),
                ))
            } else {
                fetch
            }
        };
        self.nodes.get_mut(&id).unwrap().fetch = fetch;
    }

    fn committed_partition(&self) -> CommittedPartition {
        CommittedPartition {
            leader_id: self.reg.leader,
            leader_epoch: self.reg.leader_epoch,
            isr: self.reg.isr.clone(),
            leader_recovery_state: self.reg.leader_recovery_state,
            partition_epoch: self.reg.partition_epoch,
        }
    }

    /// The controller's AlterPartition checks (Kafka's `ReplicationControlManager`).
    fn alter_partition(
        &mut self,
        from: i32,
        proposal: &IsrProposal,
    ) -> Result<CommittedPartition, ApiError> {
        if from != self.reg.leader || proposal.leader_epoch != self.reg.leader_epoch {
            return Err(ApiError::FencedLeaderEpoch);
        }
        if proposal.partition_epoch != self.reg.partition_epoch {
            return Err(ApiError::InvalidUpdateVersion);
        }
        let isr = proposal.isr();
        if !isr.contains(&from) || isr.iter().any(|r| !self.reg.replicas.contains(r)) {
            return Err(ApiError::InvalidRequest("bad ISR".into()));
        }
        if isr.iter().any(|r| self.fenced.contains(r)) {
            return Err(ApiError::IneligibleReplica);
        }
        self.reg.isr = isr;
        self.reg.partition_epoch += 1;
        self.stats.isr_changes += 1;
        self.publish();
        Ok(self.committed_partition())
    }

    /// The controller fences `id`: out of the ISR (unless it is the last member), and a new
    /// leader from the ISR if it led.
    fn fence(&mut self, id: i32) {
        if !self.fenced.insert(id) {
            return;
        }
        self.publish_brokers();
        let mut changed = false;
        if self.reg.isr.len() > 1 && self.reg.isr.contains(&id) {
            self.reg.isr.retain(|r| *r != id);
            changed = true;
        }
        if self.reg.leader == id {
            self.elect();
            changed = true;
        }
        if changed {
            self.reg.partition_epoch += 1;
            self.publish();
        }
    }

    fn unfence(&mut self, id: i32) {
        if !self.fenced.remove(&id) {
            return;
        }
        self.publish_brokers();
        if self.reg.leader < 0 && self.reg.isr.contains(&id) {
            self.elect();
            self.reg.partition_epoch += 1;
            self.publish();
        }
    }

    /// A leader among the unfenced ISR members, in replica order; none if there is none (no
    /// unclean election).
    fn elect(&mut self) {
        let leader = self
            .reg
            .replicas
            .iter()
            .copied()
            .find(|r| self.reg.isr.contains(r) && !self.fenced.contains(r))
            .unwrap_or(-1);
        self.reg.leader = leader;
        self.reg.leader_epoch += 1;
        self.stats.elections += 1;
    }

    fn nemesis(&mut self) {
        let id = NODES[self.rng.below(3) as usize];
        let crashed = self.nodes[&id].partition.is_none();
        let paused = self.nodes[&id].paused_at.is_some();
        match self.rng.below(1000) {
            0..=14 if !crashed => {
                // kill -9: the connections close, the controller fences at once.
                self.nodes.get_mut(&id).unwrap().partition = None;
                self.stats.crashes += 1;
                self.fence(id);
            }
            15..=59 if crashed => {
                self.open(id);
                self.unfence(id);
                self.publish_to(id);
            }
            60..=74 if !crashed && !paused => {
                self.nodes.get_mut(&id).unwrap().paused_at = Some(self.step);
                self.stats.pauses += 1;
            }
            75..=129 if paused => {
                self.nodes.get_mut(&id).unwrap().paused_at = None;
                self.unfence(id);
                self.publish_to(id);
            }
            130..=139 => {
                let other = NODES[self.rng.below(3) as usize];
                if other != id {
                    self.cut.insert((id.min(other), id.max(other)));
                }
            }
            140..=179 => {
                self.cut.clear();
            }
            _ => {}
        }
        // A paused broker's session expires.
        let expired: Vec<i32> = self
            .nodes
            .iter()
            .filter(|(_, n)| {
                n.paused_at
                    .is_some_and(|at| self.step - at >= SESSION_STEPS)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.fence(id);
        }
    }

    fn linked(&self, a: i32, b: i32) -> bool {
        !self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// One follower fetch of node `id` from its leader, applied by the fetcher's rules.
    fn fetch(&mut self, id: i32) {
        let node = &self.nodes[&id];
        let (Some(p), Some(state)) = (node.running().cloned(), node.fetch.clone()) else {
            return;
        };
        let leader = self.reg.leader;
        let Some(leader_p) = self.nodes.get(&leader).and_then(|n| n.running().cloned()) else {
            return;
        };
        if !self.linked(id, leader) {
            return;
        }
        if state.phase == Phase::Truncating {
            let next = match p.truncate_to(state.fetch_offset, state.current_leader_epoch) {
                Ok(()) => Some(state.fetching_at(p.log().log_end_offset(), p.log().latest_epoch())),
                Err(_) => None,
            };
            self.nodes.get_mut(&id).unwrap().fetch = next;
            return;
        }
        let params = FetchParams {
            replica_id: id,
            replica_epoch: -1,
            isolation: FetchIsolation::LogEnd,
            fetch_only_leader: true,
            current_leader_epoch: Some(state.current_leader_epoch),
            last_fetched_epoch: state.last_fetched_epoch,
            max_bytes: FETCH_BYTES_MAX,
            min_one_message: true,
        };
        let answer = match leader_p.read(state.fetch_offset, &params) {
            Ok(read) => {
                if read.diverging_epoch.is_none() {
                    let fetch = FollowerFetch {
                        fetch_offset: state.fetch_offset,
                        log_start_offset: p.log().log_start_offset(),
                        fetch_time_ms: self.now_ms,
                        leader_log_end_offset: read.offsets.log_end_offset,
                        broker_epoch: -1,
                    };
                    match leader_p.update_follower_fetch_state(id, &fetch) {
                        Ok(r) => {
                            if let Some(expand) = r.expand {
                                self.alter_partitions.push_back((leader, expand));
                            }
                        }
                        Err(e) => self.fail(format!("follower fetch state of {id}: {e}")),
                    }
                }
                PartitionAnswer {
                    error: None,
                    high_watermark: read.offsets.high_watermark,
                    log_start_offset: read.offsets.log_start_offset,
                    records: read.records,
                    diverging_epoch: read.diverging_epoch.map(|e| (e.epoch, e.end_offset)),
                }
            }
            Err(e) => PartitionAnswer {
                error: Some(e),
                high_watermark: -1,
                log_start_offset: -1,
                records: bytes::Bytes::new(),
                diverging_epoch: None,
            },
        };
        let fetched = Fetched {
            partition: p.clone(),
            state: state.clone(),
        };
        let next = match state::answer_action(&answer) {
            AnswerAction::Append => fetch_task::append(&self.tp, &fetched, &answer),
            AnswerAction::Truncate { epoch, end_offset } => {
                self.stats.truncations += 1;
                fetch_task::truncate(&self.tp, &fetched, epoch, end_offset)
            }
            AnswerAction::ResetOffset => {
                // Kafka's fetchOffsetAndTruncate: ahead of the leader's end, truncate to it.
                let end = leader_p.log().log_end_offset();
                if state.fetch_offset > end {
                    p.truncate_to(end, state.current_leader_epoch)
                        .map(|_| state.fetching_at(end, p.log().latest_epoch()))
                        .map_err(|e| Failure::Remove(e.to_string()))
                } else {
                    self.fail(format!("node {id} out of range at {}", state.fetch_offset))
                }
            }
            AnswerAction::Remove => Err(Failure::Remove("fenced".into())),
            AnswerAction::Backoff => Ok(state),
        };
        self.nodes.get_mut(&id).unwrap().fetch = next.ok();
    }

    fn client(&mut self) {
        let in_flight = self.in_flight.get_or_insert_with(|| {
            let count = 1 + (self.next_sequence % 3);
            let f = InFlight {
                base_sequence: self.next_sequence,
                count,
                sent: None,
            };
            self.next_sequence += count;
            f
        });
        if let Some((node, p, required, epoch, first, at)) = in_flight.sent.clone() {
            let alive = self.nodes[&node]
                .partition
                .as_ref()
                .is_some_and(|q| Arc::ptr_eq(q, &p));
            if !alive {
                // The connection closed: the outcome is unknown, send again.
                in_flight.sent = None;
            } else if self.nodes[&node].paused_at.is_none() {
                match p.acks_all_outcome_in_epoch(required, epoch) {
                    Some(Ok(())) => {
                        let batch = (first, in_flight.base_sequence, in_flight.count);
                        self.acked.push(batch);
                        self.in_flight = None;
                        return;
                    }
                    Some(Err(_)) => in_flight.sent = None,
                    None if self.step - at >= PRODUCE_TIMEOUT_STEPS => in_flight.sent = None,
                    None => {}
                }
            } else if self.step - at >= PRODUCE_TIMEOUT_STEPS {
                in_flight.sent = None;
            }
            return;
        }
        let leader = self.reg.leader;
        let Some(p) = self.nodes.get(&leader).and_then(|n| n.running().cloned()) else {
            return;
        };
        let values: Vec<Vec<u8>> = (0..in_flight.count)
            .map(|i| (in_flight.base_sequence + i).to_string().into_bytes())
            .collect();
        let values: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        let records = batch(
            &Spec {
                producer_id: PRODUCER_ID,
                producer_epoch: 0,
                base_sequence: in_flight.base_sequence,
                ..Spec::default()
            },
            &values,
        );
        match p.append_records_to_leader_in_epoch(
            &records,
            -1,
            self.now_ms,
            kafkaiq_storage::TxnVerification::Unchecked,
        ) {
            Ok((info, epoch)) => {
                in_flight.sent = Some((
                    leader,
                    p,
                    info.last_offset + 1,
                    epoch,
                    info.first_offset,
                    self.step,
                ))
            }
            Err(ApiError::NotEnoughReplicas | ApiError::NotLeaderOrFollower) => {
                self.stats.retries += 1
            }
            Err(e) => self.fail(format!("produce answered {e:?}")),
        }
    }

    /// The values (sequences) of `p`'s records from `from` up to `to`.
    fn values(&self, p: &Partition, from: i64, to: i64) -> Vec<i32> {
        let mut values = Vec::new();
        let mut offset = from;
        while offset < to {
            let read = p
                .log()
                .read(offset, 1 << 20, to, true)
                .unwrap_or_else(|e| self.fail(format!("read at {offset}: {e}")));
            if read.records.is_empty() {
                break;
            }
            for (_, h) in BatchIter::new(&read.records) {
                for o in h.base_offset..=h.last_offset() {
                    if o >= offset && o < to {
                        values.push(h.base_sequence + (o - h.base_offset) as i32);
                    }
                }
                offset = h.last_offset() + 1;
            }
        }
        values
    }

    fn check(&mut self, full: bool) {
        // The committed log grows from every leader's high watermark, one value per offset.
        for id in NODES {
            let node = &self.nodes[&id];
            let Some(p) = node.partition.clone() else {
                continue;
            };
            let hw = p.high_watermark();
            if p.log().log_end_offset() < node.high_watermark_seen {
                self.fail(format!(
                    "node {id} truncated to {} below its high watermark {}",
                    p.log().log_end_offset(),
                    node.high_watermark_seen
                ));
            }
            if p.state().role == Role::Leader && hw > self.committed.len() as i64 {
                let more = self.values(&p, self.committed.len() as i64, hw);
                self.committed.extend(more);
            }
        }
        let committed_end = self.committed.len() as i64;
        for (&id, node) in &self.nodes {
            let Some(p) = node.partition.as_ref() else {
                continue;
            };
            let end = p.log().log_end_offset().min(committed_end);
            let from = if full { 0 } else { (end - 20).max(0) };
            let values = self.values(p, from, end);
            if values[..] != self.committed[from as usize..end as usize] {
                self.fail(format!(
                    "node {id} holds {values:?} at {from}..{end}, the committed log {:?}",
                    &self.committed[from as usize..end as usize]
                ));
            }
        }
        for &(first, sequence, count) in &self.acked {
            for i in 0..count {
                let offset = first + i64::from(i);
                if self.committed.get(offset as usize) != Some(&(sequence + i)) {
                    self.fail(format!(
                        "acknowledged record {} at offset {offset} is not committed there",
                        sequence + i
                    ));
                }
            }
        }
        for node in self.nodes.values_mut() {
            if let Some(p) = &node.partition {
                node.high_watermark_seen = p.high_watermark();
            }
        }
    }

    fn run_step(&mut self, faults: bool) {
        self.step += 1;
        self.now_ms += STEP_MS;
        if faults {
            self.nemesis();
        }
        // The controller answers AlterPartition requests, in order, a few per step.
        for _ in 0..self.rng.below(3) {
            let Some((from, proposal)) = self.alter_partitions.pop_front() else {
                break;
            };
            let answer = self.alter_partition(from, &proposal);
            if let Some(p) = self.nodes.get(&from).and_then(|n| n.running().cloned()) {
                let outcome = p.on_alter_partition_answer(proposal.id, &answer, self.now_ms);
                if outcome == super::isr::AlterPartitionOutcome::Retry {
                    self.alter_partitions.push_back((from, proposal));
                }
            }
        }
        for id in NODES {
            if self.rng.chance(800) {
                self.fetch(id);
            }
        }
        // The ISR expiry check, every replica.lag.time.max.ms / 2.
        if self.now_ms % (LAG_MS / 2) < STEP_MS {
            for id in NODES {
                if let Some(p) = self.nodes[&id].running().cloned() {
                    if let Some(proposal) = p.maybe_shrink_isr(self.now_ms) {
                        self.alter_partitions.push_back((id, proposal));
                    }
                }
            }
        }
        if faults {
            self.client();
        }
        // The high watermark checkpoint, now and then.
        if self.step % 40 == 0 {
            for node in self.nodes.values_mut() {
                if let Some(p) = &node.partition {
                    node.checkpointed = p.high_watermark();
                }
            }
        }
        self.check(self.step % 50 == 0);
    }

    /// Every fault healed: all nodes running, links whole, until every replica is in the ISR
    /// with the leader's whole log.
    fn heal(&mut self) {
        self.cut.clear();
        for id in NODES {
            if self.nodes[&id].partition.is_none() {
                self.open(id);
            }
            self.nodes.get_mut(&id).unwrap().paused_at = None;
            self.unfence(id);
            self.publish_to(id);
        }
        for _ in 0..2_000 {
            self.run_step(false);
            let leader = self.reg.leader;
            let done = leader > 0 && self.reg.isr.len() == 3 && {
                let lp = self.nodes[&leader].partition.as_ref().unwrap();
                let end = lp.log().log_end_offset();
                self.nodes.values().all(|n| {
                    let p = n.partition.as_ref().unwrap();
                    p.log().log_end_offset() == end && p.high_watermark() == end
                })
            };
            if done {
                self.check(true);
                return;
            }
        }
        self.fail(format!(
            "no convergence after healing: {:?}, ends {:?}",
            self.reg,
            self.nodes
                .values()
                .map(|n| n.partition.as_ref().map(|p| p.log().log_end_offset()))
                .collect::<Vec<_>>()
        ));
    }

    /// After the heal: every replica holds the committed log, each acknowledged record once.
    fn check_final(&self) {
        let mut seen = BTreeSet::new();
        for (offset, sequence) in self.committed.iter().enumerate() {
            if !seen.insert(*sequence) {
                self.fail(format!("record {sequence} twice (again at {offset})"));
            }
        }
        let end = self.committed.len() as i64;
        for (&id, node) in &self.nodes {
            let p = node.partition.as_ref().unwrap();
            if p.log().log_end_offset() != end || self.values(p, 0, end) != self.committed {
                self.fail(format!("node {id} does not hold the committed log"));
            }
        }
    }
}

fn run(seed: u64, steps: u64) -> (usize, usize, Stats) {
    let mut sim = Sim::new(seed);
    for _ in 0..steps {
        sim.run_step(true);
    }
    sim.heal();
    sim.check_final();
    (sim.acked.len(), sim.committed.len(), sim.stats)
}

#[test]
fn data_plane_simulation() {
    let seeds: Vec<u64> = match std::env::var("KAFKAIQ_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("KAFKAIQ_SIM_SEED is a number")],
        Err(_) => {
            let n = std::env::var("KAFKAIQ_SIM_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(20);
            (1..=n).collect()
        }
    };
    let mut total = Stats::default();
    for seed in seeds {
        let (acked, committed, stats) = run(seed, 600);
        assert!(acked > 0, "seed {seed}: nothing acknowledged");
        assert!(committed >= acked);
        total.crashes += stats.crashes;
        total.pauses += stats.pauses;
        total.elections += stats.elections;
        total.isr_changes += stats.isr_changes;
        total.truncations += stats.truncations;
        total.retries += stats.retries;
    }
    println!("data-plane simulation: {total:?}");
    // The nemesis did its work: leaders changed, ISRs moved, diverged logs were truncated.
    assert!(total.elections > 0 && total.isr_changes > 0 && total.truncations > 0);
}
