//! The manager applying images: hand-built images in, partitions led, followed, deleted and
//! re-created out, on real logs in a temporary directory.

use std::sync::Arc;

use kafkaiq_storage::batch::builder::simple;
use kafkaiq_storage::{LogManager, TopicPartition};
use uuid::Uuid;

use super::*;
use crate::clock::ManualClock;
use crate::metadata::{MetadataRecord, PartitionRegistration};

fn reg(replicas: &[i32], leader: i32, epochs: (i32, i32)) -> PartitionRegistration {
    PartitionRegistration {
        replicas: replicas.to_vec(),
        isr: replicas.to_vec(),
        leader,
        leader_epoch: epochs.0,
        partition_epoch: epochs.1,
        leader_recovery_state: Default::default(),
        adding_replicas: vec![],
        removing_replicas: vec![],
    }
}

fn partition_record(topic: u128, partition: i32, r: PartitionRegistration) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id: Uuid::from_u128(topic),
        partition,
        registration: r,
    }
}

fn topic_records(
    name: &str,
    id: u128,
    partitions: &[PartitionRegistration],
) -> Vec<MetadataRecord> {
    let mut records = vec![MetadataRecord::Topic {
        name: name.into(),
        topic_id: Uuid::from_u128(id),
    }];
    for (i, r) in partitions.iter().enumerate() {
        records.push(partition_record(id, i as i32, r.clone()));
    }
    records
}

struct Fixture {
    _dir: tempfile::TempDir,
    manager: ReplicaManager,
    image: MetadataImage,
    clock: ManualClock,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(BrokerConfig::default_single_node());
        assert_eq!(config.node_id, 1);
        let logs = Arc::new(
            LogManager::open(&[dir.path().to_path_buf()], config.default_log_config(), 0).unwrap(),
        );
        let clock = ManualClock::new(1_000_000);
        let manager = ReplicaManager::new(config, logs, Arc::new(clock.clone()));
        Fixture {
            _dir: dir,
            manager,
            image: MetadataImage::empty("c".into(), 1),
            clock,
        }
    }

    /// Publishes `records` on top of the current image, as the controller does.
    fn publish(&mut self, records: Vec<MetadataRecord>) {
        let next = self.image.apply(&records);
        self.manager.on_image(&self.image, &next);
        self.image = next;
    }

    /// Stops the manager (high watermarks checkpointed, logs closed) and starts a new one on
    /// the same log dir, with no image applied yet, as a restarted node.
    fn restart(self) -> Fixture {
        self.manager.checkpoint_high_watermarks().unwrap();
        let Fixture {
            _dir: dir, manager, ..
        } = self;
        let config = manager.config.clone();
        drop(manager);
        let logs = Arc::new(
            LogManager::open(&[dir.path().to_path_buf()], config.default_log_config(), 0).unwrap(),
        );
        let clock = ManualClock::new(2_000_000);
        let manager = ReplicaManager::new(config, logs, Arc::new(clock.clone()));
        Fixture {
            _dir: dir,
            manager,
            image: MetadataImage::empty("c".into(), 1),
            clock,
        }
    }

    fn get(&self, topic: &str, partition: i32) -> Result<Arc<Partition>, ApiError> {
        self.manager
            .partition_or_error(&self.image, &TopicPartition::new(topic, partition))
    }
}

#[test]
fn images_make_this_node_lead_follow_or_host_nothing() {
    let mut f = Fixture::new();
    f.publish(topic_records(
        "t",
        1,
        &[
            reg(&[1, 2], 1, (0, 0)),
            reg(&[1, 2], 2, (0, 0)),
            reg(&[2, 3], 2, (0, 0)),
        ],
    ));
    let led = f.get("t", 0).unwrap();
    let followed = f.get("t", 1).unwrap();
    assert_eq!(led.state().role, Role::Leader);
    assert!(led.remote_replica(2).is_some() && led.remote_replica(3).is_none());
    assert_eq!(
        (followed.state().role, followed.state().leader),
        (Role::Follower, 2)
    );
    // A known topic whose partition lives elsewhere, and an unknown topic (§5).
    assert_eq!(f.get("t", 2).unwrap_err(), ApiError::NotLeaderOrFollower);
    assert_eq!(
        f.get("u", 0).unwrap_err(),
        ApiError::UnknownTopicOrPartition
    );

    // The follower refuses produce and leader-only reads.
    assert_eq!(
        followed.append_records_to_leader(&simple(1, 10, 0), 1, 0),
        Err(ApiError::NotLeaderOrFollower)
    );
    assert_eq!(
        followed
            .read(0, &FetchParams::leader_committed(1 << 20))
            .unwrap_err(),
        ApiError::NotLeaderOrFollower
    );
    led.append_records_to_leader(&simple(2, 10, 0), 1, 0)
        .unwrap();

    // Leadership swaps: the same partition objects change role.
    f.publish(vec![
        partition_record(1, 0, reg(&[1, 2], 2, (1, 1))),
        partition_record(1, 1, reg(&[1, 2], 1, (1, 1))),
    ]);
    assert!(Arc::ptr_eq(&led, &f.get("t", 0).unwrap()));
    assert_eq!(led.state().role, Role::Follower);
    assert_eq!(
        led.acks_all_outcome(2),
        Some(Err(ApiError::NotLeaderOrFollower))
    );
    assert_eq!(followed.state().role, Role::Leader);
    assert_eq!(followed.state().leader_epoch_start_offset, Some(0));
}

#[test]
fn a_replica_moved_away_is_stopped_and_its_log_deleted() {
    let mut f = Fixture::new();
    f.publish(topic_records("t", 1, &[reg(&[1, 2], 1, (0, 0))]));
    let p = f.get("t", 0).unwrap();
    p.append_records_to_leader(&simple(2, 10, 0), 1, 0).unwrap();
    let dir = p.log().dir().to_path_buf();
    assert!(dir.exists());

    f.publish(vec![partition_record(1, 0, reg(&[2, 3], 2, (1, 1)))]);
    assert_eq!(f.get("t", 0).unwrap_err(), ApiError::NotLeaderOrFollower);
    assert!(!dir.exists());
    assert!(f
        .manager
        .log_manager
        .get(&TopicPartition::new("t", 0))
        .is_none());
    // Whoever still holds it is told it no longer leads.
    assert_eq!(p.state().role, Role::Follower);
    assert_eq!(
        p.acks_all_outcome(2),
        Some(Err(ApiError::NotLeaderOrFollower))
    );
    assert!(f.manager.high_watermarks().is_empty());

    // Moving back creates it afresh.
    f.publish(vec![partition_record(1, 0, reg(&[2, 1], 1, (2, 2)))]);
    let back = f.get("t", 0).unwrap();
    assert!(!Arc::ptr_eq(&p, &back));
    assert_eq!(back.log().log_end_offset(), 0);
}

#[test]
fn a_deleted_and_recreated_topic_starts_from_empty_logs() {
    let mut f = Fixture::new();
    f.publish(topic_records(
        "t",
        1,
        &[reg(&[1], 1, (0, 0)), reg(&[1, 2], 2, (0, 0))],
    ));
    let old = f.get("t", 0).unwrap();
    old.append_records_to_leader(&simple(3, 10, 0), 1, 0)
        .unwrap();

    let mut records = vec![MetadataRecord::RemoveTopic {
        topic_id: Uuid::from_u128(1),
    }];
    records.extend(topic_records(
        "t",
        2,
        &[reg(&[1], 1, (0, 0)), reg(&[1, 2], 1, (0, 0))],
    ));
    f.publish(records);
    let new = f.get("t", 0).unwrap();
    assert!(!Arc::ptr_eq(&old, &new));
    assert_eq!(new.topic_id, Uuid::from_u128(2));
    assert_eq!(
        (new.log().log_end_offset(), new.state().role),
        (0, Role::Leader)
    );
    assert_eq!(old.state().role, Role::Follower);
    assert_eq!(f.get("t", 1).unwrap().state().role, Role::Leader);
}

#[test]
fn logs_the_first_image_after_a_restart_does_not_place_here_are_deleted() {
    let mut f = Fixture::new();
    let mut records = Vec::new();
    for (name, id) in [("recreated", 1), ("deleted", 2), ("kept", 3), ("moved", 4)] {
        records.extend(topic_records(name, id, &[reg(&[1], 1, (0, 0))]));
    }
    f.publish(records);
    let mut dirs = BTreeMap::new();
    for name in ["recreated", "deleted", "kept", "moved"] {
        let p = f.get(name, 0).unwrap();
        p.append_records_to_leader(&simple(5, 10, 0), 1, 0).unwrap();
        assert_eq!(
            partition_metadata::read(p.log().dir()).unwrap(),
            Some(p.topic_id.as_u128()),
            "partition.metadata of {name}"
        );
        dirs.insert(name, p.log().dir().to_path_buf());
    }

    // While this node was down: "recreated" was deleted and created again under a new id,
    // "deleted" was deleted, "moved" was reassigned to other nodes.
    let mut f = f.restart();
    let mut records = Vec::new();
    records.extend(topic_records("recreated", 11, &[reg(&[1, 2], 1, (0, 0))]));
    records.extend(topic_records("kept", 3, &[reg(&[1, 2], 1, (1, 1))]));
    records.extend(topic_records("moved", 4, &[reg(&[2, 3], 2, (1, 1))]));
    f.publish(records);

    let recreated = f.get("recreated", 0).unwrap();
    assert_eq!(
        recreated.log().log_end_offset(),
        0,
        "the old incarnation's records are gone"
    );
    assert_eq!(recreated.high_watermark(), 0);
    assert_eq!(
        partition_metadata::read(recreated.log().dir()).unwrap(),
        Some(11)
    );
    assert_eq!(f.get("kept", 0).unwrap().log().log_end_offset(), 5);
    assert!(
        !dirs["deleted"].exists(),
        "a deleted topic's log is removed"
    );
    assert!(!dirs["moved"].exists(), "a replica moved away is removed");
    for gone in ["deleted", "moved"] {
        assert!(f
            .manager
            .log_manager
            .get(&TopicPartition::new(gone, 0))
            .is_none());
    }
}

#[test]
fn a_log_of_another_incarnation_is_never_served() {
    let mut f = Fixture::new();
    f.publish(topic_records("t", 1, &[reg(&[1], 1, (0, 0))]));
    let p = f.get("t", 0).unwrap();
    let tp = TopicPartition::new("t", 0);
    assert_eq!(
        ReplicaManager::claim_for_topic(&tp, &p.log(), Uuid::from_u128(1)),
        Ok(())
    );
    // The file names another topic id, as a log left by a deleted incarnation would.
    partition_metadata::write(p.log().dir(), 99).unwrap();
    assert_eq!(
        ReplicaManager::claim_for_topic(&tp, &p.log(), Uuid::from_u128(1)),
        Err(ApiError::InconsistentTopicId)
    );
}

#[test]
fn topic_config_changes_reach_hosted_partitions() {
    let mut f = Fixture::new();
    f.publish(topic_records(
        "t",
        1,
        &[reg(&[1, 2], 1, (0, 0)), reg(&[1, 2], 2, (0, 0))],
    ));
    f.publish(vec![
        MetadataRecord::TopicConfig {
            topic_id: Uuid::from_u128(1),
            name: "retention.ms".into(),
            value: Some("12345".into()),
        },
        MetadataRecord::TopicConfig {
            topic_id: Uuid::from_u128(1),
            name: "min.insync.replicas".into(),
            value: Some("2".into()),
        },
    ]);
    for partition in [0, 1] {
        let p = f.get("t", partition).unwrap();
        assert_eq!(p.log().config().retention_ms, 12345);
        assert_eq!(p.state().min_insync_replicas, 2);
    }
}

fn topic_config(topic: u128, name: &str, value: Option<&str>) -> MetadataRecord {
    MetadataRecord::TopicConfig {
        topic_id: Uuid::from_u128(topic),
        name: name.into(),
        value: value.map(str::to_owned),
    }
}

fn broker_config(name: &str, value: &str) -> MetadataRecord {
    MetadataRecord::BrokerConfig {
        resource: String::new(),
        name: name.into(),
        value: Some(value.into()),
    }
}

/// KIP-73 on the leader: the image's throttled replicas and rate decide which follower fetches
/// get no records, and only while the leader quota is exceeded.
#[test]
fn a_leader_holds_back_throttled_followers_outside_the_isr_while_its_quota_is_exceeded() {
    let mut f = Fixture::new();
    let mut out_of_sync = reg(&[1, 2, 3], 1, (0, 0));
    out_of_sync.isr = vec![1, 3];
    f.publish(topic_records("t", 1, &[out_of_sync.clone(), out_of_sync]));
    f.publish(vec![
        topic_config(1, "leader.replication.throttled.replicas", Some("0:1,1:2")),
        broker_config("leader.replication.throttled.rate", "1000"),
    ]);
    let (p0, p1) = (f.get("t", 0).unwrap(), f.get("t", 1).unwrap());
    assert!(
        !f.manager.leader_throttles(&p0, 2),
        "quota not exceeded yet"
    );
    // 11 s of traffic at 2,000 B/s: twice the rate.
    for _ in 0..11 {
        f.manager.leader_quota.record(2_000);
        f.clock.advance_ms(1_000);
    }
    assert!(f.manager.leader_throttles(&p0, 2), "out of sync: held back");
    assert!(
        !f.manager.leader_throttles(&p0, 3),
        "in the ISR: never held back"
    );
    assert!(
        !f.manager.leader_throttles(&p1, 2),
        "1:2 names broker 2, not this leader"
    );
    // A higher rate releases it at once, without a restart.
    f.publish(vec![broker_config(
        "leader.replication.throttled.rate",
        "5000",
    )]);
    assert!(!f.manager.leader_throttles(&p0, 2));
    f.publish(vec![broker_config(
        "leader.replication.throttled.rate",
        "1000",
    )]);
    assert!(f.manager.leader_throttles(&p0, 2));
    // Deleting the config removes the throttle.
    f.publish(vec![topic_config(
        1,
        "leader.replication.throttled.replicas",
        None,
    )]);
    assert!(!f.manager.leader_throttles(&p0, 2));
    // The samples age out: 11 windows later the quota has room again.
    f.publish(vec![topic_config(
        1,
        "leader.replication.throttled.replicas",
        Some("*"),
    )]);
    assert!(f.manager.leader_throttles(&p0, 2));
    f.clock.advance_ms(11_000);
    assert!(!f.manager.leader_throttles(&p0, 2));
}

mod alter_partition {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::metadata::BrokerRegistration;
    use crate::replica::alter_partition::{
        AlterPartitionAnswer, AlterPartitionItem, FnAlterPartitionSender, SendFuture,
    };
    use crate::replica::decisions::FollowerFetch;
    use crate::replica::isr::CommittedPartition;

    fn broker(id: i32) -> MetadataRecord {
        MetadataRecord::RegisterBroker(BrokerRegistration {
            broker_epoch: 10 + i64::from(id),
            fenced: false,
            ..BrokerRegistration::new(id, Uuid::from_u128(id as u128), None)
        })
    }

    /// A controller that refuses the first request as a whole, then commits every proposal
    /// (partition epoch + 1), recording what it was sent.
    #[derive(Default)]
    struct Controller {
        requests: AtomicUsize,
        sent: Mutex<Vec<(i32, i64, Vec<AlterPartitionItem>)>>,
    }

    impl Controller {
        fn send(
            &self,
            broker_id: i32,
            broker_epoch: i64,
            items: Vec<AlterPartitionItem>,
        ) -> SendFuture {
            let n = self.requests.fetch_add(1, Ordering::SeqCst);
            self.sent
                .lock()
                .unwrap()
                .push((broker_id, broker_epoch, items.clone()));
            Box::pin(async move {
                if n == 0 {
                    return Err(ApiError::NotController);
                }
                Ok(items
                    .into_iter()
                    .map(|item| AlterPartitionAnswer {
                        topic_id: item.topic_id,
                        partition: item.partition,
                        result: Ok(CommittedPartition {
                            leader_id: 1,
                            leader_epoch: item.proposal.leader_epoch,
                            isr: item.proposal.isr(),
                            leader_recovery_state: item.proposal.leader_recovery_state,
                            partition_epoch: item.proposal.partition_epoch + 1,
                        }),
                    })
                    .collect())
            })
        }
    }

    #[tokio::test]
    async fn an_expansion_reaches_the_controller_after_a_refused_request_and_commits() {
        let mut f = Fixture::new();
        f.publish(vec![broker(1), broker(2)]);
        let mut led = reg(&[1, 2], 1, (0, 0));
        led.isr = vec![1];
        f.publish(topic_records("t", 1, &[led]));
        let p = f.get("t", 0).unwrap();
        let manager = Arc::new(f.manager);
        let controller = Arc::new(Controller::default());
        let c = controller.clone();
        manager.set_alter_partition_sender(Arc::new(FnAlterPartitionSender(
            move |id, epoch, items| c.send(id, epoch, items),
        )));
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let tasks = manager.start(shutdown);
        p.append_records_to_leader(&simple(2, 10, 0), 1, 0).unwrap();
        let fetch = FollowerFetch {
            fetch_offset: 2,
            log_start_offset: 0,
            fetch_time_ms: 1_000_000,
            leader_log_end_offset: 2,
            broker_epoch: 12,
        };
        let result = manager.update_follower_fetch_state(&p, 2, &fetch).unwrap();
        assert!(result.expand.is_some());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while p.state().isr() != [1, 2] {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the ISR was never committed"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(p.state().partition_epoch, 1);
        let sent = controller.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 2, "the refused request was sent again");
        assert_eq!((sent[1].0, sent[1].1), (1, 11), "this broker at its epoch");
        assert_eq!(
            sent[1].2[0].proposal.isr_with_epochs,
            vec![(1, 11), (2, 12)]
        );
        assert_eq!(manager.alter_partition.waiting(), 0);
        let _ = stop.send(true);
        for (_, t) in tasks {
            t.await.unwrap();
        }
    }
}

/// The TLS settings of this node's clients to the other brokers and to the controllers follow
/// the dynamic key store of their listener (the cell every clone of each client shares), are
/// left alone by a change of another key (the other listener's store included), and return to
/// `server.properties`' stores when the dynamic one is deleted.
#[test]
fn the_peer_clients_tls_follows_their_listeners_dynamic_stores_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let pem_store = crate::config::dynamic::tests::pem_store;
    let first = pem_store(dir.path(), "first.pem", "node");
    let second = pem_store(dir.path(), "second.pem", "node");
    let text = format!(
        "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094
listeners=SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092
advertised.listeners=SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:19092
controller.listener.names=CONTROLLER
inter.broker.listener.name=SSL
listener.security.protocol.map=CONTROLLER:SSL,SSL:SSL
log.dirs={}
ssl.keystore.type=PEM
ssl.truststore.type=PEM
ssl.keystore.location={first}
ssl.truststore.location={first}
",
        dir.path().join("logs").display()
    );
    let raw = crate::config::RawConfig::parse(&text, std::path::Path::new("t.properties")).unwrap();
    let config = Arc::new(BrokerConfig::from_raw(raw).unwrap().config);
    let cell_of = |client: Option<&Arc<crate::security::ClientSecurity>>| {
        client.and_then(|s| s.tls.clone()).expect("an SSL client")
    };
    let cells = [
        (
            "listener.name.ssl.ssl.keystore.location",
            cell_of(config.inter_broker_client.as_ref()),
        ),
        (
            "listener.name.controller.ssl.keystore.location",
            cell_of(config.controller_client.as_ref()),
        ),
    ];
    let started: Vec<_> = cells.iter().map(|(_, cell)| cell.current()).collect();
    let logs = Arc::new(
        LogManager::open(&[dir.path().join("logs")], config.default_log_config(), 0).unwrap(),
    );
    let manager = ReplicaManager::new(config, logs, Arc::new(ManualClock::new(1_000_000)));
    let mut image = MetadataImage::empty("c".into(), 1);
    let mut publish = |name: &str, value: Option<&str>| {
        let next = image.apply(&[MetadataRecord::BrokerConfig {
            resource: "1".into(),
            name: name.into(),
            value: value.map(str::to_owned),
        }]);
        manager.on_image(&image, &next);
        image = next;
    };
    for (i, (keystore, cell)) in cells.iter().enumerate() {
        let (other_cell, other_started) = (&cells[1 - i].1, &started[1 - i]);
        publish(keystore, Some(&second));
        let rotated = cell.current();
        assert!(
            !Arc::ptr_eq(&rotated, &started[i]),
            "{keystore}: the new key store was not taken"
        );
        assert!(
            Arc::ptr_eq(&other_cell.current(), other_started),
            "{keystore}: the other listener's client took it"
        );
        publish("log.retention.ms", Some("3600000"));
        assert!(
            Arc::ptr_eq(&cell.current(), &rotated),
            "{keystore}: another key reloaded the stores"
        );
        publish("log.retention.ms", None);
        publish(keystore, None);
        assert!(
            Arc::ptr_eq(&cell.current(), &started[i]),
            "{keystore}: with the dynamic key store deleted, the stores of server.properties were \
             not restored"
        );
    }
}
