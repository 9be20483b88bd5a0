//! Why leadership is where it is: each partition's recent leader and ISR changes, with their
//! cause, kept in the image and so replicated by the metadata log it is replayed from.
//!
//! Every controller decision that writes partition records writes a
//! [`MetadataRecord::ChangeCause`](super::MetadataRecord::ChangeCause) before them: what the
//! decision was (a broker fenced, a controlled shutdown, an election asked for, the periodic
//! rebalance, a leader's AlterPartition...), the broker it was about, and the controller's wall
//! clock. Replay keeps the latest cause and stamps it on a [`LeadershipChange`] for each partition
//! record that changes a leader, a leader epoch or an ISR, so the history reads the same on every
//! node and after every restart. A snapshot carries each partition's history as a
//! [`MetadataRecord::PartitionHistory`](super::MetadataRecord::PartitionHistory).
//!
//! Kafka keeps no such history (its controller logs the reasons); KafkaIQ keeps the last
//! [`LEADERSHIP_HISTORY_PER_PARTITION_MAX`] changes of each partition, so the leadership page
//! and `kafkaiq leadership history` can say why without reading any broker's log.

use std::collections::VecDeque;

use crate::limits::LEADERSHIP_HISTORY_PER_PARTITION_MAX;

use super::PartitionRegistration;

/// What a controller decision was, as its cause record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CauseKind {
    /// Written before the cause records existed, or by something that named none.
    Unknown,
    /// CreateTopics or CreatePartitions made the partition.
    Created,
    /// The broker's session ended: it missed heartbeats or its controller connection closed.
    BrokerFenced,
    /// A new active controller fenced a broker that never reached it after the failover (most
    /// often the node the old controller ran on).
    ControllerFailover,
    /// A new incarnation of the broker registered: the old one's leaderships and ISR places end.
    BrokerRestarted,
    /// The broker caught up and was unfenced: partitions without a leader may get one.
    BrokerUnfenced,
    /// The broker asked to shut down (BrokerHeartbeat `want_shut_down`).
    ControlledShutdown,
    /// ElectLeaders with PREFERRED.
    PreferredElection,
    /// ElectLeaders with UNCLEAN.
    UncleanElection,
    /// The controller's periodic preferred-leader rebalance (`auto.leader.rebalance.enable`).
    AutoRebalance,
    /// The partition's leader changed its ISR (AlterPartition): a follower fell behind by time
    /// (`replica.lag.time.max.ms`), caught up, or the leader finished recovering.
    AlterPartition,
    /// AlterPartitionReassignments, or a reassignment completing.
    Reassignment,
    /// The load balancer (`kafkaiq.leader.balancer=load`) moved leadership off the broker named,
    /// the busiest by measured load. A cause record and a [`LoadMoveReason`] record (the load
    /// ratio, the partition's rate, the rack) lead each move's partition record.
    LoadBalance,
}

impl CauseKind {
    const ALL: [CauseKind; 13] = [
        CauseKind::Unknown,
        CauseKind::Created,
        CauseKind::BrokerFenced,
        CauseKind::ControllerFailover,
        CauseKind::BrokerRestarted,
        CauseKind::BrokerUnfenced,
        CauseKind::ControlledShutdown,
        CauseKind::PreferredElection,
        CauseKind::UncleanElection,
        CauseKind::AutoRebalance,
        CauseKind::AlterPartition,
        CauseKind::Reassignment,
        CauseKind::LoadBalance,
    ];

    /// The byte a record holds.
    pub fn to_wire(self) -> u8 {
        CauseKind::ALL
            .iter()
            .position(|k| *k == self)
            .expect("every kind is listed") as u8
    }

    pub fn from_wire(v: u8) -> Option<CauseKind> {
        CauseKind::ALL.get(v as usize).copied()
    }

    /// The name the API, the page and the CLI show.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Unknown => "unknown",
            CauseKind::Created => "created",
            CauseKind::BrokerFenced => "broker_fenced",
            CauseKind::ControllerFailover => "controller_failover",
            CauseKind::BrokerRestarted => "broker_restarted",
            CauseKind::BrokerUnfenced => "broker_unfenced",
            CauseKind::ControlledShutdown => "controlled_shutdown",
            CauseKind::PreferredElection => "preferred_election",
            CauseKind::UncleanElection => "unclean_election",
            CauseKind::AutoRebalance => "auto_rebalance",
            CauseKind::AlterPartition => "alter_partition",
            CauseKind::Reassignment => "reassignment",
            CauseKind::LoadBalance => "load_balance",
        }
    }
}

/// Why the partition records after it were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeCause {
    pub kind: CauseKind,
    /// The broker the decision was about (fenced, shutting down, asking), -1 for none.
    pub broker_id: i32,
    /// The active controller's wall clock when it decided, in ms since the epoch.
    pub time_ms: i64,
}

impl Default for ChangeCause {
    fn default() -> Self {
        ChangeCause::UNKNOWN
    }
}

impl ChangeCause {
    pub const UNKNOWN: ChangeCause = ChangeCause {
        kind: CauseKind::Unknown,
        broker_id: -1,
        time_ms: -1,
    };
}

/// A load dimension the load balancer scores (`controller::decisions::balancer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoadDimension {
    BytesIn,
    BytesOut,
    Requests,
}

impl LoadDimension {
    const ALL: [LoadDimension; 3] = [
        LoadDimension::BytesIn,
        LoadDimension::BytesOut,
        LoadDimension::Requests,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LoadDimension::BytesIn => "bytes in",
            LoadDimension::BytesOut => "bytes out",
            LoadDimension::Requests => "requests",
        }
    }

    /// A rate in this dimension, in words (`12 MB/s`, `95 req/s`).
    pub fn format(self, v: f64) -> String {
        const KB: f64 = 1000.0;
        match self {
            LoadDimension::Requests => format!("{v:.0} req/s"),
            _ if v >= KB * KB * KB => format!("{:.1} GB/s", v / (KB * KB * KB)),
            _ if v >= KB * KB => format!("{:.0} MB/s", v / (KB * KB)),
            _ if v >= KB => format!("{:.0} kB/s", v / KB),
            _ => format!("{v:.0} B/s"),
        }
    }

    pub fn to_wire(self) -> u8 {
        self as u8
    }

    pub fn from_wire(v: u8) -> Option<LoadDimension> {
        LoadDimension::ALL.get(v as usize).copied()
    }
}

/// Why the load balancer moved a partition's leadership, kept with the change (a
/// [`MetadataRecord::LoadMoveReason`](super::MetadataRecord::LoadMoveReason) after the cause):
/// numbers, not words, so a full history stays small in a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadMoveReason {
    /// The busiest broker's load over the mean in `dimension`, in thousandths.
    pub ratio_milli: u32,
    pub dimension: LoadDimension,
    /// The partition's rate in `dimension` (bytes or requests per second).
    pub rate: u64,
    /// Whether the new leader is in the old one's rack; None when the brokers have no racks.
    pub same_rack: Option<bool>,
}

impl LoadMoveReason {
    /// The reason of a move from broker `from` to `to`, in words.
    pub fn words(&self, from: i32, to: i32) -> String {
        let rack = match self.same_rack {
            None => "",
            Some(true) => ", same rack preferred",
            Some(false) => ", another rack",
        };
        format!(
            "broker {from} at {:.2}× the mean {}; this partition {} to broker {to}, in-sync{rack}",
            self.ratio_milli as f64 / 1000.0,
            self.dimension.name(),
            self.dimension.format(self.rate as f64),
        )
    }
}

/// One change of a partition's leader, leader epoch or ISR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeadershipChange {
    pub cause: ChangeCause,
    /// Why the load balancer moved it, when it did.
    pub load_move: Option<LoadMoveReason>,
    /// -1 for a partition just created.
    pub leader_before: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr_before: Vec<i32>,
    pub isr: Vec<i32>,
}

impl LeadershipChange {
    /// The change from `before` (None for a new partition) to `after` under `cause`, or None when
    /// neither leader, leader epoch nor ISR changed (a replica set or recovery state change).
    pub fn between(
        cause: ChangeCause,
        load_move: Option<LoadMoveReason>,
        before: Option<&PartitionRegistration>,
        after: &PartitionRegistration,
    ) -> Option<LeadershipChange> {
        if let Some(b) = before {
            if b.leader == after.leader
                && b.leader_epoch == after.leader_epoch
                && b.isr == after.isr
            {
                return None;
            }
        }
        Some(LeadershipChange {
            cause,
            load_move,
            leader_before: before.map_or(-1, |b| b.leader),
            leader: after.leader,
            leader_epoch: after.leader_epoch,
            isr_before: before.map(|b| b.isr.clone()).unwrap_or_default(),
            isr: after.isr.clone(),
        })
    }

    /// What happened, in words: the leader move and the ISR members that left or joined, with
    /// the cause.
    pub fn describe(&self) -> String {
        let created = self.leader_before == -1 && self.isr_before.is_empty();
        let mut parts = Vec::new();
        if created {
            parts.push(format!("created, leader {}", self.leader));
        } else if self.leader_before != self.leader {
            parts.push(match (self.leader_before, self.leader) {
                (-1, to) => format!("leader none → {to}"),
                (from, -1) => format!("leader {from} → none (offline)"),
                (from, to) => format!("leader {from} → {to}"),
            });
        }
        let members = |of: &[i32], not_in: &[i32]| -> Vec<String> {
            of.iter()
                .filter(|r| !not_in.contains(r))
                .map(i32::to_string)
                .collect()
        };
        let left = members(&self.isr_before, &self.isr);
        let joined = members(&self.isr, &self.isr_before);
        if !created {
            if !left.is_empty() {
                parts.push(format!("ISR without {}", left.join(",")));
            }
            if !joined.is_empty() {
                parts.push(format!("ISR with {}", joined.join(",")));
            }
        }
        if parts.is_empty() {
            parts.push(format!("leader epoch {}", self.leader_epoch));
        }
        format!("{}: {}", parts.join(", "), self.why(&left, &joined))
    }

    /// The cause in words, the ISR change telling an AlterPartition shrink from an expansion.
    fn why(&self, left: &[String], joined: &[String]) -> String {
        let b = self.cause.broker_id;
        let unclean =
            self.leader >= 0 && self.leader_before >= 0 && !self.isr_before.contains(&self.leader);
        let why = match self.cause.kind {
            CauseKind::Unknown => "cause not recorded".to_owned(),
            CauseKind::Created => "partition created".to_owned(),
            CauseKind::BrokerFenced => format!("broker {b} fenced (session ended)"),
            CauseKind::ControllerFailover => {
                format!("broker {b} fenced: it did not reach the new controller after a failover")
            }
            CauseKind::BrokerRestarted => format!("broker {b} restarted (new incarnation)"),
            CauseKind::BrokerUnfenced => format!("broker {b} unfenced (caught up)"),
            CauseKind::ControlledShutdown => format!("controlled shutdown of broker {b}"),
            CauseKind::PreferredElection => "preferred leader election (ElectLeaders)".to_owned(),
            CauseKind::UncleanElection => "unclean leader election (ElectLeaders)".to_owned(),
            CauseKind::AutoRebalance => "automatic preferred leader rebalance".to_owned(),
            CauseKind::AlterPartition => match (left.is_empty(), joined.is_empty()) {
                (false, true) => format!(
                    "follower {} fell behind (replica.lag.time.max.ms), leader {b} shrank the ISR",
                    left.join(",")
                ),
                (true, false) => format!("follower {} caught up", joined.join(",")),
                _ => format!("AlterPartition from leader {b}"),
            },
            CauseKind::Reassignment => "partition reassignment".to_owned(),
            CauseKind::LoadBalance => match &self.load_move {
                Some(reason) => format!(
                    "load balancer: {}; the new leader is now the preferred replica",
                    reason.words(b, self.leader)
                ),
                None => format!(
                    "load balancer: broker {b} above the mean load by more than \
                     kafkaiq.leader.balancer.threshold; the new leader is now the preferred replica"
                ),
            },
        };
        if unclean && self.cause.kind != CauseKind::UncleanElection {
            format!("{why}; unclean election (leader from outside the ISR)")
        } else {
            why
        }
    }
}

/// A partition's recent changes, oldest first, at most [`LEADERSHIP_HISTORY_PER_PARTITION_MAX`].
pub type PartitionHistory = VecDeque<LeadershipChange>;

/// Appends `change`, dropping the oldest past the bound.
pub fn record(history: &mut PartitionHistory, change: LeadershipChange) {
    history.push_back(change);
    while history.len() > LEADERSHIP_HISTORY_PER_PARTITION_MAX {
        history.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::LeaderRecoveryState;

    fn reg(leader: i32, epoch: i32, isr: &[i32]) -> PartitionRegistration {
        PartitionRegistration {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            leader,
            leader_epoch: epoch,
            partition_epoch: epoch,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    fn cause(kind: CauseKind, broker_id: i32) -> ChangeCause {
        ChangeCause {
            kind,
            broker_id,
            time_ms: 1,
        }
    }

    #[test]
    fn every_kind_round_trips_its_byte() {
        for k in CauseKind::ALL {
            assert_eq!(CauseKind::from_wire(k.to_wire()), Some(k));
        }
        assert_eq!(CauseKind::from_wire(CauseKind::ALL.len() as u8), None);
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn changes_are_described_with_their_cause() {
        let cases: &[(&str, ChangeCause, Option<PartitionRegistration>, PartitionRegistration, Option<&str>)] = &[
            (
                "created",
                cause(CauseKind::Created, -1),
                None,
                reg(1, 0, &[1, 2, 3]),
                Some("created, leader 1: partition created"),
            ),
            (
                "leader fenced",
                cause(CauseKind::BrokerFenced, 1),
                Some(reg(1, 0, &[1, 2, 3])),
                reg(2, 1, &[2, 3]),
                Some("leader 1 → 2, ISR without 1: broker 1 fenced (session ended)"),
            ),
            (
                "follower lagging",
                cause(CauseKind::AlterPartition, 1),
                Some(reg(1, 0, &[1, 2, 3])),
                reg(1, 0, &[1, 2]),
                Some("ISR without 3: follower 3 fell behind (replica.lag.time.max.ms), leader 1 shrank the ISR"),
            ),
            (
                "caught up",
                cause(CauseKind::AlterPartition, 1),
                Some(reg(1, 0, &[1, 2])),
                reg(1, 0, &[1, 2, 3]),
                Some("ISR with 3: follower 3 caught up"),
            ),
            (
                "rebalance",
                cause(CauseKind::AutoRebalance, -1),
                Some(reg(2, 1, &[1, 2, 3])),
                reg(1, 2, &[1, 2, 3]),
                Some("leader 2 → 1: automatic preferred leader rebalance"),
            ),
            (
                "offline",
                cause(CauseKind::BrokerFenced, 1),
                Some(reg(1, 0, &[1])),
                reg(-1, 1, &[1]),
                Some("leader 1 → none (offline): broker 1 fenced (session ended)"),
            ),
            (
                "unclean after fencing",
                cause(CauseKind::BrokerFenced, 1),
                Some(reg(1, 0, &[1])),
                reg(2, 1, &[2]),
                Some("leader 1 → 2, ISR without 1, ISR with 2: broker 1 fenced (session ended); unclean election (leader from outside the ISR)"),
            ),
            (
                "replica set only",
                cause(CauseKind::Reassignment, -1),
                Some(reg(1, 0, &[1, 2, 3])),
                reg(1, 0, &[1, 2, 3]),
                None,
            ),
        ];
        for (what, cause, before, after, want) in cases {
            let got = LeadershipChange::between(*cause, None, before.as_ref(), after)
                .map(|c| c.describe());
            assert_eq!(got.as_deref(), *want, "{what}");
        }
    }

    #[test]
    fn the_history_keeps_only_the_latest() {
        let mut h = PartitionHistory::new();
        for epoch in 0..(LEADERSHIP_HISTORY_PER_PARTITION_MAX as i32 + 5) {
            let c = LeadershipChange::between(
                cause(CauseKind::PreferredElection, -1),
                None,
                Some(&reg(1, epoch, &[1])),
                &reg(1, epoch + 1, &[1]),
            )
            .unwrap();
            record(&mut h, c);
        }
        assert_eq!(h.len(), LEADERSHIP_HISTORY_PER_PARTITION_MAX);
        assert_eq!(
            h.back().unwrap().leader_epoch,
            LEADERSHIP_HISTORY_PER_PARTITION_MAX as i32 + 5
        );
    }

    #[test]
    fn a_load_balancer_move_reads_its_reason_and_one_without_the_generic_words() {
        let reason = LoadMoveReason {
            ratio_milli: 1_804,
            dimension: LoadDimension::BytesIn,
            rate: 12_400_000,
            same_rack: Some(true),
        };
        let with = LeadershipChange::between(
            cause(CauseKind::LoadBalance, 1),
            Some(reason),
            Some(&reg(1, 4, &[1, 2])),
            &reg(2, 5, &[1, 2]),
        )
        .unwrap();
        assert_eq!(
            with.describe(),
            "leader 1 → 2: load balancer: broker 1 at 1.80× the mean bytes in; this partition \
             12 MB/s to broker 2, in-sync, same rack preferred; the new leader is now the \
             preferred replica"
        );
        let requests = LoadMoveReason {
            dimension: LoadDimension::Requests,
            rate: 95,
            same_rack: None,
            ..reason
        };
        assert_eq!(
            requests.words(2, 3),
            "broker 2 at 1.80× the mean requests; this partition 95 req/s to broker 3, in-sync"
        );
        let without = LeadershipChange {
            load_move: None,
            ..with
        };
        assert!(
            without
                .describe()
                .contains("load balancer: broker 1 above the mean load"),
            "{}",
            without.describe()
        );
    }
}
