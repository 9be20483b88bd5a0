//! A seeded simulation of consumers reading through incremental fetch sessions (KIP-227) while
//! they seek, consume part of what was fetched, pause partitions, are reassigned, lose their
//! session, and the logs grow.
//!
//! The consumer side follows the Java client (`FetchSessionHandler`, `FetchCollector`): an
//! incremental request names only the partitions whose fetch position differs from what the
//! session last got, forgets those it no longer fetches, and a partition with records still
//! buffered from a fetch is not fetched. The broker side is the cache under test with a log of
//! whole batches. Checked on every response: the records of a partition start at the batch that
//! holds the consumer's position (nothing skipped, nothing stale), and every fetched partition
//! with records at that position is in the response.
//!
//! `KAFKAIQ_SIM_SEED=N cargo test --lib fetch_session_simulation` replays one seed.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::sim_rng::Rng;

const PARTITIONS: i32 = 4;
const CONSUMERS: usize = 2;
const BATCH_RECORDS_MAX: u64 = 5;
const READ_BATCHES_MAX: u64 = 3;
const STEP_MS: i64 = 10;

/// A partition's log: the end offset of each batch, in order.
#[derive(Default)]
struct Log {
    batch_ends: Vec<i64>,
}

impl Log {
    fn end(&self) -> i64 {
        self.batch_ends.last().copied().unwrap_or(0)
    }

    fn append(&mut self, records: i64) {
        let end = self.end() + records;
        self.batch_ends.push(end);
    }

    /// Up to `batches` whole batches from the one holding `offset`: (first base, next offset).
    fn read(&self, offset: i64, batches: usize) -> Option<(i64, i64)> {
        let first = self.batch_ends.partition_point(|end| *end <= offset);
        let last = (first + batches).min(self.batch_ends.len());
        if first >= last {
            return None;
        }
        let base = if first == 0 {
            0
        } else {
            self.batch_ends[first - 1]
        };
        Some((base, self.batch_ends[last - 1]))
    }
}

#[derive(Default)]
struct Consumer {
    session_id: i32,
    next_epoch: i32,
    /// The fetch offset the session holds for each partition, as this consumer last sent it.
    sent: BTreeMap<i32, i64>,
    /// Assigned partitions and their positions.
    position: BTreeMap<i32, i64>,
    /// Partitions with records fetched but not yet consumed: the end of what is buffered.
    buffered: BTreeMap<i32, i64>,
    paused: BTreeSet<i32>,
    delivered: u64,
}

struct Sim {
    rng: Rng,
    seed: u64,
    step: u64,
    cache: FetchSessionCache,
    logs: Vec<Log>,
    consumers: Vec<Consumer>,
}

fn spec(partition: i32, offset: i64) -> FetchPartitionSpec {
    super::tests::spec("t", partition, offset)
}

impl Sim {
    fn new(seed: u64) -> Sim {
        let mut sim = Sim {
            rng: Rng::new(seed),
            seed,
            step: 0,
            cache: FetchSessionCache::new(),
            logs: (0..PARTITIONS).map(|_| Log::default()).collect(),
            consumers: (0..CONSUMERS).map(|_| Consumer::default()).collect(),
        };
        for c in &mut sim.consumers {
            c.position = (0..PARTITIONS).map(|p| (p, 0)).collect();
        }
        sim
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "fetch-session simulation, seed {} (KAFKAIQ_SIM_SEED={}), step {}: {what}",
            self.seed, self.seed, self.step
        )
    }

    /// What the consumer asks for: (session id, epoch, requested, forgotten).
    fn request(&mut self, c: usize) -> (i32, i32, Vec<FetchPartitionSpec>, Vec<PartitionKey>) {
        let consumer = &mut self.consumers[c];
        let fetchable: BTreeMap<i32, i64> = consumer
            .position
            .iter()
            .filter(|(p, _)| !consumer.buffered.contains_key(p) && !consumer.paused.contains(p))
            .map(|(p, o)| (*p, *o))
            .collect();
        let full = consumer.session_id == 0 || consumer.next_epoch == INITIAL_EPOCH;
        let (requested, forgotten) = if full {
            consumer.sent.clear();
            let all = fetchable.iter().map(|(p, o)| spec(*p, *o)).collect();
            (all, Vec::new())
        } else {
            let changed = fetchable
                .iter()
                .filter(|(p, o)| consumer.sent.get(p) != Some(o))
                .map(|(p, o)| spec(*p, *o))
                .collect();
            let gone = consumer
                .sent
                .keys()
                .filter(|p| !fetchable.contains_key(p))
                .map(|p| (uuid::Uuid::nil(), "t".to_owned(), *p))
                .collect();
            (changed, gone)
        };
        consumer.sent = fetchable;
        let epoch = if full {
            INITIAL_EPOCH
        } else {
            consumer.next_epoch
        };
        (consumer.session_id, epoch, requested, forgotten)
    }

    /// The broker's side: the fetch handler's use of the cache, over the simulated logs.
    fn serve(
        &mut self,
        session_id: i32,
        epoch: i32,
        requested: Vec<FetchPartitionSpec>,
        forgotten: &[PartitionKey],
    ) -> Result<(SessionPlan, Vec<(i32, (i64, i64))>), ApiError> {
        let request = SessionRequest {
            session_id,
            epoch,
            privileged: false,
            now_ms: self.step as i64 * STEP_MS,
        };
        let plan = self.cache.plan(request, requested, forgotten)?;
        let mut answered = Vec::new();
        for spec in &plan.partitions {
            let batches = 1 + self.rng.below(READ_BATCHES_MAX) as usize;
            let log = &self.logs[spec.partition as usize];
            let read = log.read(spec.fetch_offset, batches);
            let send = self
                .cache
                .should_send(plan.session_id, spec, log.end(), 0, read.is_some());
            if let (Some(read), true) = (read, send || !plan.incremental) {
                answered.push((spec.partition, read));
            }
        }
        Ok((plan, answered))
    }

    fn fetch(&mut self, c: usize) {
        let (session_id, epoch, requested, forgotten) = self.request(c);
        let (plan, answered) = match self.serve(session_id, epoch, requested, &forgotten) {
            Ok(answer) => answer,
            Err(_) => {
                // The Java client starts over with a full fetch.
                self.consumers[c].session_id = 0;
                return;
            }
        };
        let consumer = &mut self.consumers[c];
        consumer.next_epoch = if plan.session_id == 0 {
            INITIAL_EPOCH
        } else {
            epoch + 1
        };
        consumer.session_id = plan.session_id;
        let answered: BTreeMap<i32, (i64, i64)> = answered.into_iter().collect();
        for (p, offset) in consumer.sent.clone() {
            let readable = offset < self.logs[p as usize].end();
            match answered.get(&p) {
                Some(&(base, next)) if base <= offset && offset < next => {
                    self.consumers[c].buffered.insert(p, next);
                }
                Some(read) => self.fail(format!(
                    "consumer {c} partition {p} at {offset} was sent batches {read:?}"
                )),
                None if readable => self.fail(format!(
                    "consumer {c} partition {p} at {offset} has records but was not answered"
                )),
                None => {}
            }
        }
    }

    /// The application polls: part of each buffered run of records, like `max.poll.records`.
    fn poll(&mut self, c: usize) {
        for (p, end) in self.consumers[c].buffered.clone() {
            let position = self.consumers[c].position[&p];
            let taken = 1 + self.rng.below((end - position) as u64) as i64;
            let consumer = &mut self.consumers[c];
            consumer.position.insert(p, position + taken);
            consumer.delivered += taken as u64;
            if position + taken == end {
                consumer.buffered.remove(&p);
            }
        }
    }

    /// Seeks, pauses, reassignments and lost sessions: what moves a position by other means.
    fn disturb(&mut self, c: usize) {
        let p = self.rng.below(PARTITIONS as u64) as i32;
        let end = self.logs[p as usize].end();
        let anywhere = self.rng.below(end as u64 + 1) as i64;
        let choice = self.rng.below(10);
        let consumer = &mut self.consumers[c];
        let last_sent = consumer.sent.get(&p).copied();
        let assigned = consumer.position.contains_key(&p);
        match choice {
            // Retry by seek back to what the session holds: the case a broker cannot see.
            0..=3 if assigned => {
                consumer.position.insert(p, last_sent.unwrap_or(0));
                consumer.buffered.remove(&p);
            }
            4 | 5 if assigned => {
                consumer.position.insert(p, anywhere);
                consumer.buffered.remove(&p);
            }
            6 => {
                if !consumer.paused.remove(&p) {
                    consumer.paused.insert(p);
                }
            }
            // An eager rebalance: revoked, or handed back at a committed offset.
            7 | 8 => {
                if consumer.position.remove(&p).is_none() {
                    consumer.position.insert(p, last_sent.unwrap_or(0).min(end));
                }
                consumer.buffered.remove(&p);
            }
            9 => consumer.session_id = 0,
            _ => {}
        }
    }

    fn run_step(&mut self) {
        self.step += 1;
        if self.rng.chance(500) {
            let p = self.rng.below(PARTITIONS as u64) as usize;
            let records = 1 + self.rng.below(BATCH_RECORDS_MAX) as i64;
            self.logs[p].append(records);
        }
        let c = self.rng.below(CONSUMERS as u64) as usize;
        match self.rng.below(10) {
            0..=4 => self.fetch(c),
            5..=7 => self.poll(c),
            _ => self.disturb(c),
        }
    }
}

#[test]
fn fetch_session_simulation() {
    let seeds: Vec<u64> = match std::env::var("KAFKAIQ_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("KAFKAIQ_SIM_SEED is a number")],
        Err(_) => (1..=200).collect(),
    };
    for seed in seeds {
        let mut sim = Sim::new(seed);
        for _ in 0..400 {
            sim.run_step();
        }
        let delivered: u64 = sim.consumers.iter().map(|c| c.delivered).sum();
        assert!(delivered > 0, "seed {seed}: no record delivered");
    }
}
