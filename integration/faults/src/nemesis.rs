//! The nemesis: injects one fault at a time into the running cluster, on a schedule drawn from
//! the seed, heals it, and records when leadership moved, when every ISR was full again and when
//! leadership was balanced again. Between faults it waits, with deadlines, for a healthy cluster
//! (every node up, every partition led, every ISR full), so each fault starts from the same
//! state and its figures are its own.
//!
//! Fault kinds (the names the driver's `--kinds` takes):
//! - `kill-leader`, `kill-follower`, `kill-controller`, `kill-two`: kill -9, restart after the
//!   hold (a killed leader is held down until another leader is elected, or 30 s);
//! - `pause-follower-past-lag`: SIGSTOP of a follower for `replica.lag.time.max.ms` + 2 s, less
//!   than the session timeout (the ISR shrinks, the broker stays registered);
//! - `pause-leader-past-session`: SIGSTOP of a leader for `broker.session.timeout.ms` + 3 s (it
//!   is fenced; leadership moves);
//! - `partition-leader-from-quorum`: a leader cut off (both ways) from every other node, past
//!   the session timeout; `partition-follower-from-leader`: a follower cut off from the leader
//!   only, past the lag time; `one-way-cut-leader`: nothing the leader sends reaches another
//!   node (they still reach it), past the session timeout; `flapping-link`: the link between a
//!   leader and a follower cut and restored every second for ten seconds;
//! - `latency-leader`: every request between a leader and every other node (both ways)
//!   delayed by 100–600 ms for ten seconds; `latency-follower`: the same between a follower
//!   and one partition's leader. Slow links, not cut ones: nothing should move, writes slow;
//! - `disk-full-leader`: a leader's log dir (its own tmpfs) filled until writes fail with
//!   ENOSPC; held until leadership moves (or 30 s); healed by freeing the space and restarting
//!   the node (as an operator replaces a failed disk: Kafka halts a broker whose last log dir
//!   failed);
//! - `recreate-topic-follower-down`: a side topic (one partition on every node, the victim its
//!   preferred leader) gets records, the victim is killed, the topic is deleted and created
//!   again under the same name and gets new records, the victim restarts; once it leads the
//!   new topic again, reading it must give exactly the new records from offset 0. A record of
//!   the deleted incarnation, or the new records at other offsets, is a problem of the run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::cluster::Cluster;
use crate::figures::FaultRecord;
use crate::history::Recorder;
use crate::netfault::Net;
use crate::rng::Rng;
use crate::wire::PartitionState;

/// Every fault kind, in the order the schedule's rotation starts from.
pub const KINDS: &[&str] = &[
    "kill-leader",
    "kill-follower",
    "kill-controller",
    "kill-two",
    "pause-follower-past-lag",
    "pause-leader-past-session",
    "partition-leader-from-quorum",
    "partition-follower-from-leader",
    "one-way-cut-leader",
    "flapping-link",
    "latency-leader",
    "latency-follower",
    "disk-full-leader",
    "recreate-topic-follower-down",
];

/// The side topic `recreate-topic-follower-down` deletes and creates again.
const RECREATED_TOPIC: &str = "faults-recreated";
/// Records written to each incarnation of it.
const RECREATED_OLD_RECORDS: usize = 20;
const RECREATED_NEW_RECORDS: usize = 5;
/// How long the side topic may take to be created, deleted, led or caught up.
const RECREATED_DEADLINE: Duration = Duration::from_secs(60);

/// The kinds that need nftables.
pub fn needs_net(kind: &str) -> bool {
    matches!(
        kind,
        "partition-leader-from-quorum"
            | "partition-follower-from-leader"
            | "one-way-cut-leader"
            | "flapping-link"
            | "latency-leader"
            | "latency-follower"
    )
}

/// How long a cluster may take to become healthy again after a heal.
const HEALTHY_DEADLINE: Duration = Duration::from_secs(120);
/// How long leadership may take to be balanced again once healthy.
const BALANCED_DEADLINE: Duration = Duration::from_secs(60);
/// How long a killed leader (or full disk) is held at most while waiting for a new leader.
const NEW_LEADER_HOLD_MAX: Duration = Duration::from_secs(30);
/// How often the nemesis looks at the cluster while it waits.
const POLL: Duration = Duration::from_millis(50);
/// How long a flapping link stays in each state, and how long it flaps.
const FLAP_PERIOD: Duration = Duration::from_secs(1);
const FLAP_TOTAL: Duration = Duration::from_secs(10);
/// How long links stay slow, and the range of the added delay (ms, drawn per fault).
const LATENCY_HOLD: Duration = Duration::from_secs(10);
const LATENCY_MS: (u64, u64) = (100, 600);

/// The broker settings the hold times are derived from (both brokers run with them).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub replica_lag_ms: u64,
    pub session_ms: u64,
}

pub struct Nemesis<'a> {
    pub cluster: &'a mut Cluster,
    pub net: Option<Net>,
    pub recorder: Recorder,
    pub topic: String,
    pub timing: Timing,
    pub rng: Rng,
    /// Things that went wrong outside the history: a node that exited by itself, a cluster
    /// that did not heal within its deadline.
    pub problems: Vec<String>,
    /// Nodes the nemesis made unreachable (killed, paused, cut off): not asked for metadata.
    down: Vec<i32>,
    /// Nodes that may exit by themselves (a full disk).
    may_exit: Vec<i32>,
    /// Incarnations of [`RECREATED_TOPIC`] so far: record values name theirs.
    incarnation: u32,
}

impl<'a> Nemesis<'a> {
    pub fn new(
        cluster: &'a mut Cluster,
        net: Option<Net>,
        recorder: Recorder,
        topic: &str,
        timing: Timing,
        seed: u64,
    ) -> Nemesis<'a> {
        Nemesis {
            cluster,
            net,
            recorder,
            topic: topic.to_owned(),
            timing,
            rng: Rng::new(seed),
            problems: Vec::new(),
            down: Vec::new(),
            may_exit: Vec::new(),
            incarnation: 0,
        }
    }

    fn now(&self) -> u64 {
        self.recorder.now_ms()
    }

    /// The running nodes the nemesis has not made unreachable.
    fn reachable(&self) -> Vec<i32> {
        self.cluster
            .running()
            .into_iter()
            .filter(|n| !self.down.contains(n))
            .collect()
    }

    fn note_exits(&mut self) {
        for id in self.cluster.exited() {
            if self.may_exit.contains(&id) {
                println!("faults: node {id} exited by itself (expected of a failed log dir)");
            } else {
                let what = self.cluster.nodes[&id]
                    .exits
                    .last()
                    .cloned()
                    .unwrap_or_default();
                self.problems
                    .push(format!("node {id} exited while nobody stopped it ({what})"));
            }
        }
    }

    fn state(&mut self) -> Option<BTreeMap<i32, PartitionState>> {
        self.note_exits();
        let ask = self.reachable();
        self.cluster.partitions(&self.topic, &ask).map(|(_, p)| p)
    }

    /// Every node runs and is an unfenced broker, and every node shows the same partitions,
    /// each with a leader and a full ISR. Asking every node matters: after two of three are
    /// killed the survivor's metadata cannot change (no quorum) and still shows full ISRs.
    fn healthy(&mut self) -> Option<BTreeMap<i32, PartitionState>> {
        let all: Vec<i32> = self.cluster.nodes.keys().copied().collect();
        self.note_exits();
        if self.cluster.running() != all || !self.down.is_empty() {
            return None;
        }
        let mut agreed: Option<BTreeMap<i32, PartitionState>> = None;
        for id in &all {
            let (_, p) = self.cluster.partitions(&self.topic, &[*id])?;
            let full = p
                .values()
                .all(|s| s.leader > 0 && s.isr.len() == s.replicas.len());
            if !full || agreed.as_ref().is_some_and(|a| *a != p) {
                return None;
            }
            agreed = Some(p);
        }
        self.cluster.brokers_are(&all, &all).then_some(agreed?)
    }

    fn balanced(p: &BTreeMap<i32, PartitionState>) -> bool {
        p.values().all(|s| s.replicas.first() == Some(&s.leader))
    }

    /// Polls `check` until it holds or `deadline` passes; when it held (ms since the start).
    fn wait<T>(
        &mut self,
        deadline: Duration,
        mut check: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<(u64, T)> {
        let end = Instant::now() + deadline;
        loop {
            if let Some(v) = check(self) {
                return Some((self.now(), v));
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits for a healthy cluster; an error if it does not become healthy in time.
    pub fn wait_healthy(&mut self, after: &str) -> Result<BTreeMap<i32, PartitionState>> {
        match self.wait(HEALTHY_DEADLINE, |n| n.healthy()) {
            Some((_, p)) => Ok(p),
            None => {
                let state = self.state();
                bail!("the cluster was not healthy within {HEALTHY_DEADLINE:?} after {after}: running {:?}, partitions {state:?}", self.cluster.running())
            }
        }
    }

    /// Holds for `hold`, watching for the moment no partition of `affected` is led by a victim
    /// (when `watch_leader`); with `until_new_leader` the hold ends early once that happened
    /// (plus `extra`), at most [`NEW_LEADER_HOLD_MAX`].
    fn hold(
        &mut self,
        hold: Duration,
        watch: Option<(&[i32], &[i32])>,
        until_new_leader: bool,
        extra: Duration,
    ) -> Option<u64> {
        let start = Instant::now();
        let mut moved = None;
        let limit = if until_new_leader {
            NEW_LEADER_HOLD_MAX
        } else {
            hold
        };
        let mut end = start + limit;
        while Instant::now() < end {
            if let (None, Some((affected, victims))) = (moved, watch) {
                if let Some(p) = self.state() {
                    let led_elsewhere = affected.iter().all(|q| {
                        p.get(q)
                            .is_some_and(|s| s.leader > 0 && !victims.contains(&s.leader))
                    });
                    if led_elsewhere {
                        moved = Some(self.now());
                        if until_new_leader {
                            end = end.min(Instant::now() + extra);
                        }
                    }
                }
            }
            std::thread::sleep(POLL);
        }
        moved
    }

    fn net(&mut self) -> Result<&mut Net> {
        match self.net.as_mut() {
            Some(n) => Ok(n),
            None => bail!("network faults need nftables (the driver runs without them)"),
        }
    }

    /// Injects one fault of `kind`, heals it and waits for the cluster to recover.
    pub fn run_fault(&mut self, kind: &'static str) -> Result<FaultRecord> {
        let before = self.wait_healthy("the previous fault")?;
        let ids: Vec<i32> = self.cluster.nodes.keys().copied().collect();
        let partition = *self.rng.pick(&before.keys().copied().collect::<Vec<_>>());
        let leader = before[&partition].leader;
        let followers: Vec<i32> = before[&partition]
            .replicas
            .iter()
            .copied()
            .filter(|r| *r != leader)
            .collect();
        let follower = *self.rng.pick(&followers);
        let others: Vec<i32> = ids.iter().copied().filter(|n| *n != leader).collect();
        let victims: Vec<i32> = match kind {
            "kill-leader"
            | "pause-leader-past-session"
            | "partition-leader-from-quorum"
            | "one-way-cut-leader"
            | "latency-leader"
            | "disk-full-leader" => vec![leader],
            "kill-follower"
            | "pause-follower-past-lag"
            | "partition-follower-from-leader"
            | "latency-follower"
            | "flapping-link"
            | "recreate-topic-follower-down" => vec![follower],
            "kill-two" => vec![leader, follower],
            "kill-controller" => {
                let ask = self.reachable();
                match self.cluster.active_controller(&ask) {
                    Some(c) => vec![c],
                    None => bail!("no active controller reported before kill-controller"),
                }
            }
            other => bail!("unknown fault kind {other}"),
        };
        // The partitions whose writes a fault holds up: those a victim leads, except for a
        // follower fault, which is measured on the partitions the victim follows (the others
        // it leads stop too, but that is a leader's fault, measured by the leader kinds).
        let follower_kind = kind.contains("follower") || kind == "flapping-link";
        let led: Vec<i32> = before
            .iter()
            .filter(|(_, s)| victims.contains(&s.leader))
            .map(|(p, _)| *p)
            .collect();
        let followed: Vec<i32> = before
            .iter()
            .filter(|(_, s)| {
                !victims.contains(&s.leader) && s.replicas.iter().any(|r| victims.contains(r))
            })
            .map(|(p, _)| *p)
            .collect();
        let leads = !led.is_empty();
        let affected = if follower_kind || !leads {
            followed
        } else {
            led
        };
        // Leadership is expected to move off the victims (not for a follower fault, nor when
        // two of three voters are gone: no quorum, no election).
        let expect_move = leads && kind != "kill-two" && !follower_kind;
        let watch = expect_move.then_some((affected.as_slice(), victims.as_slice()));
        let extra = Duration::from_millis(self.rng.range(500, 2500));
        let (lag, session) = (self.timing.replica_lag_ms, self.timing.session_ms);

        let injected_ms = self.now();
        let new_leader_ms = match kind {
            "kill-leader" | "kill-controller" | "kill-follower" | "kill-two" => {
                for v in &victims {
                    self.cluster.kill(*v);
                }
                self.down = victims.clone();
                let hold = Duration::from_millis(self.rng.range(2000, 5000));
                let moved = self.hold(hold, watch, expect_move, extra);
                for v in &victims {
                    self.cluster.spawn(*v)?;
                }
                moved
            }
            "pause-follower-past-lag" | "pause-leader-past-session" => {
                let hold = if kind.contains("lag") {
                    lag + 2000
                } else {
                    session + 3000
                };
                self.cluster.signal(victims[0], libc::SIGSTOP);
                self.down = victims.clone();
                let moved = self.hold(Duration::from_millis(hold), watch, false, extra);
                self.cluster.signal(victims[0], libc::SIGCONT);
                moved
            }
            "partition-leader-from-quorum" | "one-way-cut-leader" => {
                let one_way = kind.starts_with("one-way");
                let net = self.net()?;
                for o in &others {
                    if one_way {
                        net.cut(leader, *o)?;
                    } else {
                        net.partition(leader, *o)?;
                    }
                }
                self.down = victims.clone();
                let moved = self.hold(Duration::from_millis(session + 3000), watch, false, extra);
                self.net()?.heal()?;
                moved
            }
            "partition-follower-from-leader" => {
                self.net()?.partition(follower, leader)?;
                // The follower still answers metadata: it only lost its link to the leader.
                let moved = self.hold(Duration::from_millis(lag + 3000), None, false, extra);
                self.net()?.heal()?;
                moved
            }
            "flapping-link" => {
                let end = Instant::now() + FLAP_TOTAL;
                let mut cut = false;
                while Instant::now() < end {
                    cut = !cut;
                    if cut {
                        self.net()?.partition(follower, leader)?;
                    } else {
                        self.net()?.heal()?;
                    }
                    std::thread::sleep(FLAP_PERIOD);
                }
                self.net()?.heal()?;
                None
            }
            "latency-leader" | "latency-follower" => {
                // The slow node's links: to every other node, or to the partition's leader.
                let peers = if kind == "latency-leader" {
                    others.clone()
                } else {
                    vec![leader]
                };
                let links: Vec<(i32, i32)> = peers
                    .iter()
                    .flat_map(|p| [(victims[0], *p), (*p, victims[0])])
                    .collect();
                let ms = self.rng.range(LATENCY_MS.0, LATENCY_MS.1);
                println!("faults: {kind} on {victims:?}: {ms} ms added to {links:?}");
                self.net()?.delay(&links, Duration::from_millis(ms))?;
                let moved = self.hold(LATENCY_HOLD, watch, false, extra);
                self.net()?.undelay()?;
                moved
            }
            "disk-full-leader" => {
                self.may_exit = victims.clone();
                self.cluster.fill_disk(leader)?;
                let moved = self.hold(NEW_LEADER_HOLD_MAX, watch, true, extra);
                if moved.is_none() {
                    self.problems.push(format!(
                        "disk-full-leader on node {leader}: its leaderships did not move within {NEW_LEADER_HOLD_MAX:?} of its log dir failing"
                    ));
                }
                self.cluster.free_disk(leader)?;
                self.note_exits();
                // The failed log dir comes back with a restart, as in Kafka.
                self.cluster.kill(leader);
                self.cluster.spawn(leader)?;
                self.may_exit.clear();
                moved
            }
            "recreate-topic-follower-down" => {
                self.recreate_while_down(follower)?;
                None
            }
            _ => unreachable!(),
        };
        self.down.clear();
        let healed_ms = self.now();
        let isr_full_ms = self.wait(HEALTHY_DEADLINE, |n| n.healthy()).map(|(t, _)| t);
        if isr_full_ms.is_none() {
            let state = self.state();
            self.problems.push(format!(
                "{kind} on {victims:?}: ISRs not full within {HEALTHY_DEADLINE:?} of the heal: {state:?}"
            ));
        }
        let balanced_ms = self
            .wait(BALANCED_DEADLINE, |n| n.healthy().filter(Self::balanced))
            .map(|(t, _)| t);
        if kind == "recreate-topic-follower-down" {
            self.check_recreated(follower)?;
        }
        // The schedule's quiet interval: normal operation before the next fault.
        std::thread::sleep(Duration::from_millis(self.rng.range(1000, 2000)));
        Ok(FaultRecord {
            kind,
            victims,
            affected,
            injected_ms,
            healed_ms,
            new_leader_ms,
            isr_full_ms,
            balanced_ms,
            window_end_ms: self.now(),
        })
    }

    /// The side topic with `victim` as its preferred leader, written to; then, with the victim
    /// killed, deleted and created again and written to; then the victim restarted.
    fn recreate_while_down(&mut self, victim: i32) -> Result<()> {
        self.incarnation += 1;
        let k = self.incarnation;
        let mut replicas = vec![victim];
        replicas.extend(self.cluster.nodes.keys().copied().filter(|n| *n != victim));
        let old: Vec<String> = (0..RECREATED_OLD_RECORDS)
            .map(|j| format!("incarnation-{k}-deleted-{j}"))
            .collect();
        self.create_and_write(&replicas, &old, true)?;
        self.cluster.kill(victim);
        self.down = vec![victim];
        let ask = self.reachable()[0];
        let addr = self.cluster.nodes[&ask].client_addr();
        match crate::wire::delete_topic(addr, RECREATED_TOPIC) {
            Some(0) => {}
            other => bail!("deleting {RECREATED_TOPIC} while node {victim} is down: {other:?}"),
        }
        let gone = self.wait(RECREATED_DEADLINE, |n| {
            let ask = n.reachable();
            n.cluster
                .partitions(RECREATED_TOPIC, &ask)
                .is_none()
                .then_some(())
        });
        if gone.is_none() {
            bail!("{RECREATED_TOPIC} still listed {RECREATED_DEADLINE:?} after its deletion");
        }
        let new: Vec<String> = (0..RECREATED_NEW_RECORDS)
            .map(|j| format!("incarnation-{k}-new-{j}"))
            .collect();
        self.create_and_write(&replicas, &new, false)?;
        self.cluster.spawn(victim)?;
        Ok(())
    }

    /// Creates the side topic on `replicas` (retrying while the deletion before still settles)
    /// and writes `values` to its leader with acks=all, expecting them at offset 0; with
    /// `all_replicas`, waits until every replica is in the ISR first, so each holds them.
    fn create_and_write(
        &mut self,
        replicas: &[i32],
        values: &[String],
        all_replicas: bool,
    ) -> Result<()> {
        let created = self.wait(RECREATED_DEADLINE, |n| {
            let ask = n.reachable()[0];
            let addr = n.cluster.nodes[&ask].client_addr();
            // 36 TOPIC_ALREADY_EXISTS: created by an earlier try whose answer was lost.
            matches!(
                crate::wire::create_assigned(addr, RECREATED_TOPIC, replicas),
                Some(0 | 36)
            )
            .then_some(())
        });
        if created.is_none() {
            bail!("{RECREATED_TOPIC} could not be created within {RECREATED_DEADLINE:?}");
        }
        let written = self.wait(RECREATED_DEADLINE, |n| {
            let ask = n.reachable();
            let (_, p) = n.cluster.partitions(RECREATED_TOPIC, &ask)?;
            let s = p.get(&0)?;
            let ready = s.leader > 0 && (!all_replicas || s.isr.len() == replicas.len());
            if !ready {
                return None;
            }
            let addr = n.cluster.nodes.get(&s.leader)?.client_addr();
            crate::wire::produce(addr, RECREATED_TOPIC, values)
        });
        match written {
            Some((_, (0, 0))) => Ok(()),
            Some((_, answer)) => {
                self.problems.push(format!(
                    "incarnation {} of {RECREATED_TOPIC}: its first write was answered {answer:?} (error, base offset), not at offset 0",
                    self.incarnation
                ));
                Ok(())
            }
            None => bail!("{RECREATED_TOPIC}: no write within {RECREATED_DEADLINE:?}"),
        }
    }

    /// After the heal: `victim` leads the side topic again (a preferred election, retried until
    /// it is back in the ISR) and what it serves is exactly this incarnation's records. Then the
    /// topic is deleted for the next fault.
    fn check_recreated(&mut self, victim: i32) -> Result<()> {
        let addr = self.cluster.nodes[&victim].client_addr();
        let led = self.wait(RECREATED_DEADLINE, |n| {
            let (_, p) = n.cluster.partitions(RECREATED_TOPIC, &[victim])?;
            let s = p.get(&0)?;
            if s.leader == victim && s.isr.len() == s.replicas.len() {
                return Some(());
            }
            crate::wire::elect_preferred(addr, RECREATED_TOPIC);
            None
        });
        if led.is_none() {
            bail!(
                "node {victim} did not lead {RECREATED_TOPIC} again within {RECREATED_DEADLINE:?}"
            );
        }
        let k = self.incarnation;
        let expected: Vec<(i64, String)> = (0..RECREATED_NEW_RECORDS)
            .map(|j| (j as i64, format!("incarnation-{k}-new-{j}")))
            .collect();
        match crate::wire::read_all(addr, RECREATED_TOPIC) {
            Some(Ok(read)) if read == expected => {
                println!("faults: recreate-topic-follower-down on node {victim}: it serves only incarnation {k}'s {RECREATED_NEW_RECORDS} records, from offset 0");
            }
            Some(Ok(read)) => {
                let resurrected = read.iter().filter(|(_, v)| v.contains("-deleted-")).count();
                self.problems.push(format!(
                    "recreate-topic-follower-down on node {victim}: incarnation {k} of {RECREATED_TOPIC} serves {} records ({resurrected} of a deleted incarnation), first {:?}, expected {expected:?}",
                    read.len(),
                    read.iter().take(3).collect::<Vec<_>>()
                ));
            }
            other => bail!("reading {RECREATED_TOPIC} from node {victim}: {other:?}"),
        }
        let deleted = crate::wire::delete_topic(addr, RECREATED_TOPIC);
        if deleted != Some(0) {
            bail!("deleting {RECREATED_TOPIC} after the check: {deleted:?}");
        }
        Ok(())
    }

    /// Removes whatever a failed run may have left (cuts, stopped nodes).
    pub fn heal_all(&mut self) {
        if let Some(n) = self.net.as_mut() {
            let _ = n.heal();
            let _ = n.undelay();
        }
        for id in self.cluster.running() {
            self.cluster.signal(id, libc::SIGCONT);
        }
        self.down.clear();
    }
}
