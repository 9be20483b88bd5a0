//! A broker's life as the controller sees it: registration, heartbeats, fencing and unfencing
//! (Kafka's `ClusterControlManager#registerBroker`, `BrokerHeartbeatManager` and
//! `ReplicationControlManager#handleBrokerFenced` / `#handleBrokerUnfenced`).
//!
//! A registration is fenced until the broker's heartbeat shows it has replayed the metadata log
//! up to its own registration; only then does it lead and join ISRs. Fencing takes a broker out
//! of every ISR and moves its leaderships in the same batch of records.
//!
//! A broker that asks to shut down while it leads partitions enters controlled shutdown
//! ([`controlled_shutdown_step`]): it may no longer lead or join an ISR, its leaderships move in
//! bounded batches and it leaves the ISRs, and it is told to shut down once it leads nothing.
//!
//! What is not here: the session timer (which broker missed its heartbeats is the controller
//! thread's to track, with the clock; it calls [`fence_broker`]).

use super::partition_change::{
    change_partition, coalesce, leader_and_isr_updates, unclean_enabled, Election, NO_LEADER,
};
use super::ControllerSettings;
use crate::errors::ApiError;
use crate::limits::CONTROLLED_SHUTDOWN_CHANGES_PER_STEP_MAX;
use crate::metadata::{BrokerRegistration, MetadataImage, MetadataRecord};

/// What a registration decided: its records, and the broker epoch the reply carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub records: Vec<MetadataRecord>,
    pub broker_epoch: i64,
}

/// BrokerRegistration's cluster id check: a broker formatted for another cluster is refused
/// (INCONSISTENT_CLUSTER_ID). An image without a cluster id yet accepts any.
pub fn check_cluster_id(image: &MetadataImage, cluster_id: &str) -> Result<(), ApiError> {
    if image.cluster_id.is_empty() || image.cluster_id == cluster_id {
        Ok(())
    } else {
        Err(ApiError::InconsistentClusterId(format!(
            "Expected cluster ID {}, but got cluster ID {cluster_id}",
            image.cluster_id
        )))
    }
}

/// A broker registers (BrokerRegistration, API 62). `registration` carries the node id,
/// incarnation id, listeners and rack; its epoch, fencing and offset are the controller's to set
/// and are ignored.
///
/// - The same incarnation again (a retried request) changes nothing and keeps its epoch; if its
///   listeners or rack changed, the registration is amended, keeping epoch and fencing.
/// - A new incarnation (a restart) gets a broker epoch greater than any earlier one of the node
///   and than the image's offset (Kafka uses the offset the record is written at), and starts
///   fenced. Its old incarnation is fenced in the same batch: it leaves every ISR and its
///   leaderships move (or the partitions wait, leaderless, for it to return).
///
/// A new incarnation is refused (DUPLICATE_BROKER_REGISTRATION) while the old one's session is
/// valid, as in Kafka; that is the controller thread's to judge, since sessions are not in the
/// image (`driver`'s `is_duplicate_registration`). One that gets here replaces the old at once.
pub fn register_broker(
    image: &MetadataImage,
    settings: &ControllerSettings,
    registration: &BrokerRegistration,
) -> Registered {
    let node_id = registration.node_id;
    let existing = image.broker(node_id);
    if let Some(old) = existing.filter(|b| b.incarnation_id == registration.incarnation_id) {
        let mut records = Vec::new();
        if old.listeners != registration.listeners || old.rack != registration.rack {
            records.push(MetadataRecord::RegisterBroker(BrokerRegistration {
                listeners: registration.listeners.clone(),
                rack: registration.rack.clone(),
                // Committed anew: caught up means having seen the amendment.
                registration_offset: 0,
                ..old.clone()
            }));
        }
        return Registered {
            records,
            broker_epoch: old.broker_epoch,
        };
    }
    let offset_epoch = i64::try_from(image.metadata_offset)
        .unwrap_or(i64::MAX - 1)
        .saturating_add(1);
    let broker_epoch = existing.map_or(offset_epoch, |old| {
        offset_epoch.max(old.broker_epoch.saturating_add(1))
    });
    let mut records = vec![MetadataRecord::RegisterBroker(BrokerRegistration {
        broker_epoch,
        fenced: true,
        in_controlled_shutdown: false,
        registration_offset: 0,
        ..registration.clone()
    })];
    if existing.is_some() {
        // The old incarnation's ISR memberships and leaderships go as in a fencing.
        records.extend(leader_and_isr_updates(
            image,
            settings,
            node_id,
            NO_LEADER,
            |p| p.isr.contains(&node_id),
        ));
    }
    Registered {
        records,
        broker_epoch,
    }
}

/// Fences `broker_id` (its session expired, or it asked to be fenced): a fencing record, and
/// every ISR it is in without it — except as the last member, which stays, the partition then
/// leaderless — with new leaders for what it led: the first replica in the remaining ISR that is
/// unfenced and not shutting down, else (where the topic allows unclean election) the first such
/// replica at all, alone in the ISR and RECOVERING, else none. With `broker_epoch`, only that
/// incarnation is fenced (a timer for a replaced incarnation does nothing). Nothing for a broker
/// that is not registered.
pub fn fence_broker(
    image: &MetadataImage,
    settings: &ControllerSettings,
    broker_id: i32,
    broker_epoch: Option<i64>,
) -> Vec<MetadataRecord> {
    let Some(b) = image.broker(broker_id) else {
        return Vec::new();
    };
    if broker_epoch.is_some_and(|e| e != b.broker_epoch) {
        return Vec::new();
    }
    let mut records = Vec::new();
    if !b.fenced {
        records.push(MetadataRecord::BrokerRegistrationChange {
            node_id: broker_id,
            broker_epoch: b.broker_epoch,
            fenced: Some(true),
            in_controlled_shutdown: None,
        });
    }
    // Also for a broker already fenced: a no-op unless something was left behind.
    records.extend(leader_and_isr_updates(
        image,
        settings,
        broker_id,
        NO_LEADER,
        |p| p.isr.contains(&broker_id),
    ));
    records
}

/// Unfences `broker_id`: an unfencing record, and a leader for every leaderless partition that
/// can have one now — the first replica in its ISR that may lead, the returning broker included
/// (or, where the topic allows unclean election, the first replica that may lead at all).
pub fn unfence_broker(
    image: &MetadataImage,
    settings: &ControllerSettings,
    broker_id: i32,
) -> Vec<MetadataRecord> {
    let Some(b) = image.broker(broker_id) else {
        return Vec::new();
    };
    let mut records = vec![MetadataRecord::BrokerRegistrationChange {
        node_id: broker_id,
        broker_epoch: b.broker_epoch,
        fenced: Some(false),
        in_controlled_shutdown: None,
    }];
    records.extend(leader_and_isr_updates(
        image,
        settings,
        NO_LEADER,
        broker_id,
        |p| p.leader == NO_LEADER,
    ));
    records
}

/// What a BrokerHeartbeat response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    /// The broker's metadata offset has reached its own registration.
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

/// Where a heartbeat moves a broker (Kafka's `BrokerControlState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerState {
    Fenced,
    Unfenced,
    ControlledShutdown,
    ShutdownNow,
}

/// BrokerHeartbeat (API 63, v0–1) from `broker_id` at `broker_epoch`, whose image has reached
/// `metadata_offset` (Kafka's `BrokerHeartbeatManager#calculateNextBrokerState`):
/// - an unknown broker gets BROKER_ID_NOT_REGISTERED, so it knows to register again (Kafka
///   answers STALE_BROKER_EPOCH here too); another epoch than the registration's gets
///   STALE_BROKER_EPOCH;
/// - a fenced broker is unfenced once caught up (`metadata_offset` ≥ the offset of its
///   registration) unless it wants to be fenced; an unfenced one that wants it is fenced;
/// - `want_shut_down`: a fenced broker, or one that leads nothing, may shut down now (it is
///   fenced first); one that still leads enters controlled shutdown, and each heartbeat of it
///   moves the next batch ([`controlled_shutdown_step`]) until the image it is answered from
///   shows it leading nothing and `peers_replayed` (every other active broker has reported a
///   metadata offset at or past the image from which it leads nothing, Kafka's
///   `lowestActiveOffset` ≥ `controlledShutdownOffset`, which the controller thread tracks from
///   heartbeats): then it is fenced and told to shut down. It is never told so in the heartbeat
///   whose records move its last leaderships, so it stops only after they are committed, and
///   the new leaders have them.
///
/// The records are those of [`fence_broker`] / [`unfence_broker`] /
/// [`controlled_shutdown_step`] for the state the broker moves to.
#[allow(clippy::too_many_arguments)] // the heartbeat's fields, as `Controller::broker_heartbeat`
pub fn broker_heartbeat(
    image: &MetadataImage,
    settings: &ControllerSettings,
    broker_id: i32,
    broker_epoch: i64,
    metadata_offset: i64,
    want_fence: bool,
    want_shut_down: bool,
    peers_replayed: bool,
) -> Result<(Vec<MetadataRecord>, HeartbeatOutcome), ApiError> {
    let b = image
        .broker(broker_id)
        .ok_or(ApiError::BrokerIdNotRegistered)?;
    if b.broker_epoch != broker_epoch {
        return Err(ApiError::StaleBrokerEpoch);
    }
    let is_caught_up = u64::try_from(metadata_offset).is_ok_and(|o| o >= b.registration_offset);
    let leads_something = || {
        image
            .topics
            .values()
            .any(|t| t.partitions.values().any(|p| p.leader == broker_id))
    };
    let current = if b.fenced {
        BrokerState::Fenced
    } else if b.in_controlled_shutdown {
        BrokerState::ControlledShutdown
    } else {
        BrokerState::Unfenced
    };
    let next = match current {
        BrokerState::Fenced if want_shut_down => BrokerState::ShutdownNow,
        BrokerState::Fenced if !want_fence && is_caught_up => BrokerState::Unfenced,
        BrokerState::Fenced => BrokerState::Fenced,
        BrokerState::Unfenced if want_fence && want_shut_down => BrokerState::ShutdownNow,
        BrokerState::Unfenced if want_fence => BrokerState::Fenced,
        BrokerState::Unfenced if want_shut_down => {
            if leads_something() {
                BrokerState::ControlledShutdown
            } else {
                BrokerState::ShutdownNow
            }
        }
        BrokerState::Unfenced => BrokerState::Unfenced,
        BrokerState::ControlledShutdown if leads_something() => BrokerState::ControlledShutdown,
        // Leads nothing: records only once the others know where its leaderships went.
        BrokerState::ControlledShutdown if !peers_replayed => BrokerState::ControlledShutdown,
        BrokerState::ControlledShutdown => BrokerState::ShutdownNow,
        BrokerState::ShutdownNow => unreachable!("not a current state"),
    };
    let records = match next {
        // Every heartbeat in controlled shutdown moves the next batch (none once it leads
        // nothing and waits for the others to replay).
        BrokerState::ControlledShutdown if current == next && !leads_something() => Vec::new(),
        BrokerState::ControlledShutdown => {
            controlled_shutdown_step(
                image,
                settings,
                broker_id,
                CONTROLLED_SHUTDOWN_CHANGES_PER_STEP_MAX,
            )
            .0
        }
        _ if next == current => Vec::new(),
        BrokerState::Fenced | BrokerState::ShutdownNow => {
            fence_broker(image, settings, broker_id, Some(broker_epoch))
        }
        BrokerState::Unfenced => unfence_broker(image, settings, broker_id),
    };
    let outcome = HeartbeatOutcome {
        is_caught_up,
        is_fenced: matches!(next, BrokerState::Fenced | BrokerState::ShutdownNow),
        should_shut_down: next == BrokerState::ShutdownNow,
    };
    Ok((records, outcome))
}

/// One step of `broker_id`'s controlled shutdown (Kafka's
/// `ReplicationControlManager#handleBrokerInControlledShutdown`, in batches): marks it
/// `in_controlled_shutdown` if it is not yet (from then on it may not lead, join an ISR or hold
/// new replicas), then changes at most `max_changes` partitions whose ISR it is in — those it
/// leads first, in topic and partition order, then those it follows. As in Kafka it leaves
/// those ISRs (except as the last member, which stays, the partition then leaderless) and a new
/// leader is elected as when a broker is fenced: the first other active ISR member in replica
/// order (or, where the topic allows unclean election, the first active replica), leader epoch
/// bumped.
///
/// Returns the records and how many partitions it still leads once they are applied (the
/// controller thread runs steps until that is 0; heartbeats run one each). Nothing for an
/// unknown or fenced broker, which leads nothing.
pub fn controlled_shutdown_step(
    image: &MetadataImage,
    settings: &ControllerSettings,
    broker_id: i32,
    max_changes: usize,
) -> (Vec<MetadataRecord>, usize) {
    let Some(b) = image.broker(broker_id).filter(|b| !b.fenced) else {
        return (Vec::new(), 0);
    };
    let mut records = Vec::new();
    if !b.in_controlled_shutdown {
        records.push(MetadataRecord::BrokerRegistrationChange {
            node_id: broker_id,
            broker_epoch: b.broker_epoch,
            fenced: None,
            in_controlled_shutdown: Some(true),
        });
    }
    let acceptable = |r: i32| r != broker_id && image.is_broker_active(r);
    let in_isr = || {
        image.topics.values().flat_map(|t| {
            t.partitions
                .iter()
                .filter(|(_, p)| p.isr.contains(&broker_id))
                .map(move |(&partition, p)| (t, partition, p))
        })
    };
    let led = in_isr().filter(|(_, _, p)| p.leader == broker_id);
    let followed = in_isr().filter(|(_, _, p)| p.leader != broker_id);
    let mut still_leading = 0;
    let mut changes = 0;
    for (topic, partition, reg) in led.chain(followed) {
        if changes == max_changes {
            still_leading += usize::from(reg.leader == broker_id);
            continue;
        }
        let election = if unclean_enabled(image, settings, topic) {
            Election::Unclean
        } else {
            Election::Online
        };
        let target_isr: Vec<i32> = reg
            .isr
            .iter()
            .copied()
            .filter(|&r| r != broker_id)
            .collect();
        let Some(next) = change_partition(
            reg,
            &target_isr,
            reg.leader_recovery_state,
            election,
            &acceptable,
        ) else {
            continue;
        };
        if next.leader == NO_LEADER && reg.leader != NO_LEADER {
            tracing::info!(topic = %topic.name, partition, broker_id, "partition has no eligible leader after controlled shutdown");
        }
        changes += 1;
        records.push(MetadataRecord::Partition {
            topic_id: topic.id,
            partition,
            registration: next,
        });
    }
    (records, still_leading)
}

/// Registers this node's own broker and unfences it at once, its partition changes merged
/// ([`coalesce`]) so a restart bumps each epoch once. Only for a broker that reads the
/// controller's own image — on a single node the broker's image is the controller's, so it has
/// caught up with its registration by construction; a remote broker registers with
/// [`register_broker`] and is unfenced by its heartbeats.
pub fn register_local_broker(
    image: &MetadataImage,
    settings: &ControllerSettings,
    registration: &BrokerRegistration,
) -> Registered {
    let registered = register_broker(image, settings, registration);
    let working = image.apply(&registered.records);
    let (unfenced, _) = broker_heartbeat(
        &working,
        settings,
        registration.node_id,
        registered.broker_epoch,
        i64::MAX,
        false,
        false,
        true,
    )
    .expect("the broker was registered at this epoch just above");
    let mut records = registered.records;
    records.extend(unfenced);
    Registered {
        records: coalesce(image, records),
        broker_epoch: registered.broker_epoch,
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::controller::decisions::tests::{
        broker, cluster, incarnation, join, partition, set_partition, settings, spec, with_topic,
    };
    use crate::controller::decisions::{create_topic, CreateTopicSpec};
    use crate::metadata::{LeaderRecoveryState, PartitionRegistration};

    /// Commits `records` as the next batch.
    fn commit(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        let mut next = image.clone();
        next.apply_batch(image.metadata_offset + 1, records);
        next
    }

    fn epoch_of(image: &MetadataImage, id: i32) -> i64 {
        image.brokers[&id].broker_epoch
    }

    /// Three brokers; "t": 3 partitions × RF 3 (leaders 1, 2, 3); "solo": one replica, on 1.
    fn three() -> MetadataImage {
        let image = with_topic(&cluster(3), &spec("t", 3, 3), 1);
        let solo = CreateTopicSpec {
            assignments: vec![(0, vec![1])],
            ..spec("solo", -1, -1)
        };
        let records = create_topic(
            &image,
            &crate::controller::decisions::tests::config(),
            &solo,
            Uuid::from_u128(2),
        )
        .unwrap();
        image.apply(&records)
    }

    #[test]
    fn registration_epochs_fencing_and_idempotence() {
        let image = MetadataImage::default();
        let first = register_broker(&image, &settings(), &broker(1));
        assert_eq!(first.broker_epoch, 1);
        let image = commit(&image, &first.records);
        let b = &image.brokers[&1];
        assert!(b.fenced && b.broker_epoch == 1 && b.registration_offset == 1);
        // The same incarnation again: nothing, same epoch.
        let again = register_broker(&image, &settings(), &broker(1));
        assert_eq!((again.records.len(), again.broker_epoch), (0, 1));
        // The same incarnation with a new listener: amended, epoch and fencing kept.
        let amended = broker(1).with_listener("INTERNAL", "10.0.0.1", 9093, 0);
        let changed = register_broker(&image, &settings(), &amended);
        assert_eq!(changed.broker_epoch, 1);
        let image = commit(&image, &changed.records);
        let b = &image.brokers[&1];
        assert!(b.fenced && b.broker_epoch == 1 && b.listeners.len() == 2);
        // A new incarnation: an epoch above every earlier one, fenced.
        let unfenced = commit(&image, &unfence_broker(&image, &settings(), 1));
        let restart = register_broker(&unfenced, &settings(), &incarnation(1, 2));
        assert!(restart.broker_epoch > 1);
        let image = commit(&unfenced, &restart.records);
        assert!(image.brokers[&1].fenced);
        assert_eq!(
            image.brokers[&1].incarnation_id,
            incarnation(1, 2).incarnation_id
        );
        // Epochs grow even when the image's offset would not make them.
        let mut behind = image.clone();
        behind.metadata_offset = 0;
        assert!(
            register_broker(&behind, &settings(), &incarnation(1, 3)).broker_epoch
                > restart.broker_epoch
        );
    }

    #[test]
    fn a_restart_fences_the_old_incarnation_and_its_heartbeat_unfences_the_new() {
        let image = three();
        let restart = register_broker(&image, &settings(), &incarnation(1, 2));
        let image = commit(&image, &restart.records);
        let t = |image: &MetadataImage, p| partition(image, "t", p);
        // Partition 0 was led by 1: the next ISR member in replica order leads, 1 left the ISR.
        let p0 = t(&image, 0);
        assert_eq!(
            (
                p0.leader,
                p0.isr.clone(),
                p0.leader_epoch,
                p0.partition_epoch
            ),
            (2, vec![2, 3], 1, 1)
        );
        // Partition 1 is led by 2: only the ISR shrinks (partition epoch only).
        let p1 = t(&image, 1);
        assert_eq!(
            (
                p1.leader,
                p1.isr.clone(),
                p1.leader_epoch,
                p1.partition_epoch
            ),
            (2, vec![2, 3], 0, 1)
        );
        // "solo": 1 was its only ISR member; it stays, without a leader.
        let solo = partition(&image, "solo", 0);
        assert_eq!(
            (solo.leader, solo.isr.clone(), solo.leader_epoch),
            (-1, vec![1], 1)
        );
        // A heartbeat from behind its registration: still fenced, not caught up.
        let epoch = restart.broker_epoch;
        let behind = image.brokers[&1].registration_offset as i64 - 1;
        let (records, outcome) =
            broker_heartbeat(&image, &settings(), 1, epoch, behind, false, false, true).unwrap();
        assert!(records.is_empty());
        assert_eq!(
            outcome,
            HeartbeatOutcome {
                is_caught_up: false,
                is_fenced: true,
                should_shut_down: false
            }
        );
        // Caught up: unfenced, and "solo" is led again; the ISRs of "t" grow by AlterPartition.
        let offset = image.metadata_offset as i64;
        let (records, outcome) =
            broker_heartbeat(&image, &settings(), 1, epoch, offset, false, false, true).unwrap();
        assert_eq!(
            outcome,
            HeartbeatOutcome {
                is_caught_up: true,
                is_fenced: false,
                should_shut_down: false
            }
        );
        let image = commit(&image, &records);
        assert!(image.is_broker_active(1));
        let solo = partition(&image, "solo", 0);
        assert_eq!(
            (solo.leader, solo.leader_epoch, solo.partition_epoch),
            (1, 2, 2)
        );
        assert_eq!(t(&image, 0).isr, vec![2, 3]);
    }

    #[test]
    fn heartbeat_table() {
        let image = three();
        let e1 = epoch_of(&image, 1);
        // Broker 4 leads nothing.
        let image = join(&image, broker(4));
        let e4 = epoch_of(&image, 4);
        let fenced4 = commit(&image, &fence_broker(&image, &settings(), 4, None));
        let now = image.metadata_offset as i64;
        // (case, image, broker, epoch, metadata offset, want_fence, want_shut_down,
        //  expected (records written?, outcome))
        let cases: Vec<(
            &str,
            &MetadataImage,
            i32,
            i64,
            i64,
            bool,
            bool,
            Result<(bool, HeartbeatOutcome), ApiError>,
        )> = vec![
            (
                "unknown broker",
                &image,
                9,
                1,
                now,
                false,
                false,
                Err(ApiError::BrokerIdNotRegistered),
            ),
            (
                "stale epoch",
                &image,
                1,
                e1 - 1,
                now,
                false,
                false,
                Err(ApiError::StaleBrokerEpoch),
            ),
            (
                "unfenced stays",
                &image,
                1,
                e1,
                now,
                false,
                false,
                Ok((false, outcome(true, false, false))),
            ),
            (
                "want fence",
                &image,
                1,
                e1,
                now,
                true,
                false,
                Ok((true, outcome(true, true, false))),
            ),
            (
                "want fence and shut down",
                &image,
                1,
                e1,
                now,
                true,
                true,
                Ok((true, outcome(true, true, true))),
            ),
            (
                "shut down, leading nothing: fenced now",
                &image,
                4,
                e4,
                now,
                false,
                true,
                Ok((true, outcome(true, true, true))),
            ),
            (
                "shut down while leading: controlled shutdown, leaderships move",
                &image,
                1,
                e1,
                now,
                false,
                true,
                Ok((true, outcome(true, false, false))),
            ),
            (
                "fenced, shut down",
                &fenced4,
                4,
                e4,
                now,
                false,
                true,
                Ok((false, outcome(true, true, true))),
            ),
            (
                "fenced, wants to stay fenced",
                &fenced4,
                4,
                e4,
                now,
                true,
                false,
                Ok((false, outcome(true, true, false))),
            ),
            (
                "fenced, caught up: unfenced",
                &fenced4,
                4,
                e4,
                now,
                false,
                false,
                Ok((true, outcome(true, false, false))),
            ),
            (
                "fenced, behind its registration",
                &fenced4,
                4,
                e4,
                -1,
                false,
                false,
                Ok((false, outcome(false, true, false))),
            ),
        ];
        for (case, image, id, epoch, offset, want_fence, want_shut_down, expected) in cases {
            let got = broker_heartbeat(
                image,
                &settings(),
                id,
                epoch,
                offset,
                want_fence,
                want_shut_down,
                true,
            )
            .map(|(records, o)| (!records.is_empty(), o));
            assert_eq!(got, expected, "{case}");
        }
    }

    fn leads_any(image: &MetadataImage, broker_id: i32) -> bool {
        image
            .topics
            .values()
            .any(|t| t.partitions.values().any(|p| p.leader == broker_id))
    }

    fn outcome(is_caught_up: bool, is_fenced: bool, should_shut_down: bool) -> HeartbeatOutcome {
        HeartbeatOutcome {
            is_caught_up,
            is_fenced,
            should_shut_down,
        }
    }

    #[test]
    fn fencing_table() {
        use LeaderRecoveryState::{Recovered, Recovering};
        let base = three();
        let reg = |replicas: &[i32], isr: &[i32], leader| PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            leader_epoch: 4,
            partition_epoch: 8,
            leader_recovery_state: Recovered,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        let mut unclean_topic = base.clone();
        let solo_id = base.topic("solo").unwrap().id;
        unclean_topic.apply_in_place(&[MetadataRecord::TopicConfig {
            topic_id: solo_id,
            name: "unclean.leader.election.enable".into(),
            value: Some("true".into()),
        }]);
        let unclean = ControllerSettings {
            unclean_leader_election_enable: true,
            ..settings()
        };
        // Broker 3 fenced by hand, ISR memberships left as they are.
        let three_fenced = base.apply(&[MetadataRecord::BrokerRegistrationChange {
            node_id: 3,
            broker_epoch: epoch_of(&base, 3),
            fenced: Some(true),
            in_controlled_shutdown: None,
        }]);
        // (case, image, settings, "solo" before, broker fenced, "solo" after: leader, isr, leader epoch, partition epoch, state)
        let cases: Vec<(
            &str,
            &MetadataImage,
            ControllerSettings,
            PartitionRegistration,
            (i32, Vec<i32>, i32, i32, LeaderRecoveryState),
        )> = vec![
            (
                "leader moves to the next ISR member in replica order",
                &base,
                settings(),
                reg(&[1, 3, 2], &[1, 2, 3], 1),
                (3, vec![2, 3], 5, 9, Recovered),
            ),
            (
                "a follower leaves the ISR",
                &base,
                settings(),
                reg(&[2, 1, 3], &[2, 1, 3], 2),
                (2, vec![2, 3], 4, 9, Recovered),
            ),
            (
                "the last member stays, no leader",
                &base,
                settings(),
                reg(&[1, 2], &[1], 1),
                (-1, vec![1], 5, 9, Recovered),
            ),
            (
                "unclean (broker setting): first live replica, alone, RECOVERING",
                &base,
                unclean,
                reg(&[1, 2, 3], &[1], 1),
                (2, vec![2], 5, 9, Recovering),
            ),
            (
                "unclean (topic config)",
                &unclean_topic,
                settings(),
                reg(&[1, 3, 2], &[1], 1),
                (3, vec![3], 5, 9, Recovering),
            ),
            (
                "a fenced ISR member is passed over",
                &three_fenced,
                settings(),
                reg(&[1, 3, 2], &[1, 3, 2], 1),
                (2, vec![3, 2], 5, 9, Recovered),
            ),
            (
                "not in the partition: unchanged",
                &base,
                settings(),
                reg(&[2, 3], &[2, 3], 2),
                (2, vec![2, 3], 4, 8, Recovered),
            ),
        ];
        for (case, image, settings, before, expected) in cases {
            let image = set_partition(image, "solo", 0, before);
            let records = fence_broker(&image, &settings, 1, Some(epoch_of(&image, 1)));
            assert!(
                matches!(
                    records[0],
                    MetadataRecord::BrokerRegistrationChange {
                        node_id: 1,
                        fenced: Some(true),
                        ..
                    }
                ),
                "{case}: the fencing comes in the same batch"
            );
            let after = image.apply(&records);
            assert!(!after.is_broker_alive(1), "{case}");
            let p = partition(&after, "solo", 0);
            assert_eq!(
                (
                    p.leader,
                    p.isr,
                    p.leader_epoch,
                    p.partition_epoch,
                    p.leader_recovery_state
                ),
                expected,
                "{case}"
            );
        }
        // A timer for an older incarnation fences nothing; an unknown broker neither.
        assert!(fence_broker(&base, &settings(), 1, Some(epoch_of(&base, 1) - 1)).is_empty());
        assert!(fence_broker(&base, &settings(), 9, None).is_empty());
    }

    #[test]
    fn unfencing_gives_leaderless_partitions_back() {
        let image = three();
        // 1 and 2 fenced: "solo" ([1]) and a partition of [1, 2] with ISR [2] lose their leaders.
        let image = set_partition(
            &image,
            "solo",
            0,
            PartitionRegistration {
                replicas: vec![1, 2],
                isr: vec![2],
                leader: 2,
                ..partition(&image, "solo", 0)
            },
        );
        let image = commit(&image, &fence_broker(&image, &settings(), 1, None));
        let image = commit(&image, &fence_broker(&image, &settings(), 2, None));
        assert_eq!(partition(&image, "solo", 0).leader, -1);
        assert_eq!(partition(&image, "solo", 0).isr, vec![2]);
        // 1 returns: "solo"'s ISR is [2], so it stays leaderless (no unclean election).
        let after1 = commit(&image, &unfence_broker(&image, &settings(), 1));
        assert_eq!(partition(&after1, "solo", 0).leader, -1);
        let t0 = partition(&after1, "t", 0);
        assert_eq!(
            (t0.leader, t0.isr.clone()),
            (3, vec![3]),
            "led by the ISR member left"
        );
        // With unclean election on, 1 takes "solo" (RECOVERING).
        let unclean = ControllerSettings {
            unclean_leader_election_enable: true,
            ..settings()
        };
        let p = partition(
            &image.apply(&unfence_broker(&image, &unclean, 1)),
            "solo",
            0,
        );
        assert_eq!(
            (p.leader, p.isr, p.leader_recovery_state),
            (1, vec![1], LeaderRecoveryState::Recovering)
        );
        // 2 returns: it leads "solo" again.
        let after2 = commit(&after1, &unfence_broker(&after1, &settings(), 2));
        assert_eq!(partition(&after2, "solo", 0).leader, 2);
    }

    #[test]
    fn controlled_shutdown_table() {
        let base = three();
        let solo_id = base.topic("solo").unwrap().id;
        let mut unclean_solo = base.clone();
        unclean_solo.apply_in_place(&[MetadataRecord::TopicConfig {
            topic_id: solo_id,
            name: "unclean.leader.election.enable".into(),
            value: Some("true".into()),
        }]);
        let solo_on_1_2 = set_partition(
            &base,
            "solo",
            0,
            PartitionRegistration {
                replicas: vec![1, 2],
                isr: vec![1, 2],
                ..partition(&base, "solo", 0)
            },
        );
        // (case, image, max changes, expected: records after the mark, still leading,
        //  "solo" (leader, isr), "t"-0 (leader, isr), "t"-1 isr)
        let cases: Vec<(
            &str,
            &MetadataImage,
            usize,
            (usize, usize, (i32, Vec<i32>), (i32, Vec<i32>), Vec<i32>),
        )> = vec![
            (
                "everything in one step: leaderships move, the broker leaves the ISRs",
                &base,
                100,
                (4, 0, (-1, vec![1]), (2, vec![2, 3]), vec![2, 3]),
            ),
            (
                "bounded: led partitions first, in topic order",
                &base,
                1,
                (1, 1, (-1, vec![1]), (1, vec![1, 2, 3]), vec![2, 3, 1]),
            ),
            (
                "bounded: both leaderships, no follower ISR yet",
                &base,
                2,
                (2, 0, (-1, vec![1]), (2, vec![2, 3]), vec![2, 3, 1]),
            ),
            (
                "another ISR member takes over",
                &solo_on_1_2,
                1,
                (1, 1, (2, vec![2]), (1, vec![1, 2, 3]), vec![2, 3, 1]),
            ),
            (
                "the last ISR member with unclean election on: still none (no other replica)",
                &unclean_solo,
                1,
                (1, 1, (-1, vec![1]), (1, vec![1, 2, 3]), vec![2, 3, 1]),
            ),
        ];
        for (case, image, max, (changes, still, solo, t0, t1_isr)) in cases {
            let (records, still_leading) = controlled_shutdown_step(image, &settings(), 1, max);
            assert_eq!(
                records[0],
                MetadataRecord::BrokerRegistrationChange {
                    node_id: 1,
                    broker_epoch: epoch_of(image, 1),
                    fenced: None,
                    in_controlled_shutdown: Some(true),
                },
                "{case}: marked first"
            );
            assert_eq!(
                (records.len() - 1, still_leading),
                (changes, still),
                "{case}"
            );
            let after = image.apply(&records);
            assert!(
                after.is_broker_alive(1) && !after.is_broker_active(1),
                "{case}"
            );
            let p = |t: &str, n| {
                let p = partition(&after, t, n);
                (p.leader, p.isr)
            };
            assert_eq!(p("solo", 0), solo, "{case}");
            assert_eq!(p("t", 0), t0, "{case}");
            assert_eq!(partition(&after, "t", 1).isr, t1_isr, "{case}");
            if t0.0 == 2 {
                assert_eq!(partition(&after, "t", 0).leader_epoch, 1, "{case}");
            }
            // The next step carries on without marking again.
            let (more, left) = controlled_shutdown_step(&after, &settings(), 1, 100);
            assert!(
                more.iter()
                    .all(|r| matches!(r, MetadataRecord::Partition { .. })),
                "{case}"
            );
            assert_eq!(left, 0, "{case}");
        }
        assert_eq!(
            controlled_shutdown_step(&base, &settings(), 9, 10),
            (vec![], 0)
        );
    }

    #[test]
    fn heartbeats_drive_a_controlled_shutdown_to_its_end() {
        // Broker 1 leads "solo"-0 and "t"-0; each step moves one partition.
        let mut image = three();
        let e1 = epoch_of(&image, 1);
        let now = |image: &MetadataImage| image.metadata_offset as i64;
        let mut heartbeats = 0;
        let outcome = loop {
            heartbeats += 1;
            assert!(heartbeats < 10, "controlled shutdown does not end");
            // Until the others have replayed the image where it leads nothing, it waits: no
            // records, not let go.
            let (records, waiting) =
                broker_heartbeat(&image, &settings(), 1, e1, now(&image), false, true, false)
                    .unwrap();
            if !image.brokers[&1].in_controlled_shutdown || leads_any(&image, 1) {
                assert!(!waiting.should_shut_down);
            } else {
                assert!(records.is_empty(), "waiting writes nothing: {records:?}");
                assert_eq!(waiting, self::outcome(true, false, false), "keeps serving");
            }
            let (records, outcome) =
                broker_heartbeat(&image, &settings(), 1, e1, now(&image), false, true, true)
                    .unwrap();
            image = commit(&image, &records);
            if outcome.should_shut_down {
                break outcome;
            }
            assert_eq!(outcome, self::outcome(true, false, false), "keeps serving");
            assert!(image.brokers[&1].in_controlled_shutdown);
        };
        assert_eq!(outcome, self::outcome(true, true, true));
        assert!(!image.is_broker_alive(1), "fenced as it goes");
        for t in image.topics.values() {
            for p in t.partitions.values() {
                assert_ne!(p.leader, 1, "{}: {p:?}", t.name);
            }
        }
        assert_eq!(partition(&image, "t", 0).leader, 2);
        // One heartbeat entered it and moved everything (a small cluster fits one step); the
        // next, from the image showing it leads nothing, says shut down.
        assert_eq!(heartbeats, 2);
        // While in controlled shutdown it is not let back into an ISR.
        let shutting = commit(
            &three(),
            &controlled_shutdown_step(&three(), &settings(), 1, 0).0,
        );
        let p = partition(&shutting, "t", 1);
        let (_, results) = crate::controller::decisions::alter_partition(
            &shutting,
            2,
            epoch_of(&shutting, 2),
            3,
            &[crate::controller::decisions::AlterPartitionItem {
                topic_id: shutting.topic("t").unwrap().id,
                partition: 1,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: vec![(1, -1), (2, -1), (3, -1)],
                leader_recovery_state: 0,
            }],
        )
        .unwrap();
        assert_eq!(results[0].result, Err(ApiError::IneligibleReplica));
    }

    #[test]
    fn a_local_restart_bumps_each_epoch_once() {
        let image = three();
        let registered = register_local_broker(&image, &settings(), &incarnation(1, 2));
        let after = commit(&image, &registered.records);
        assert!(after.is_broker_active(1));
        let solo = partition(&after, "solo", 0);
        assert_eq!(
            (solo.leader, solo.leader_epoch, solo.partition_epoch),
            (1, 1, 1)
        );
        let written = registered
            .records
            .iter()
            .filter(|r| matches!(r, MetadataRecord::Partition { topic_id, .. } if *topic_id == image.topic("solo").unwrap().id))
            .count();
        assert_eq!(written, 1, "one record per partition");
        // Registering the running incarnation again changes nothing.
        assert!(
            register_local_broker(&after, &settings(), &incarnation(1, 2))
                .records
                .is_empty()
        );
    }
}
