//! A request to the controller, and what deciding it yields: the records to commit and how to
//! answer once they are committed (or the commit failed). Deciding is the pure decisions of
//! [`super::decisions`] run against an image; nothing here does I/O.

use std::sync::Arc;

use tokio::sync::oneshot;
use uuid::Uuid;

use super::decisions::{
    self, AlterPartitionItem, AlterPartitionResult, CreateTopicSpec, ElectionResult, ElectionType,
    HeartbeatOutcome, ProducerIdBlock, ReassignmentItem, ReassignmentResult,
};
use super::{AlterConfigOp, ConfigResource};
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::LEADER_ELECTIONS_PER_IMBALANCE_PASS_MAX;
use crate::metadata::{
    BrokerRegistration, CauseKind, ChangeCause, MetadataImage, MetadataRecord, TopicImage,
};

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// One request to the controller, with where its answer goes.
pub(crate) enum Request {
    CreateTopic {
        spec: CreateTopicSpec,
        validate_only: bool,
        reply: Reply<Arc<TopicImage>>,
    },
    /// Every topic of one CreateTopics request: decided together and committed as one batch
    /// (each topic's answer in the request's order), as Kafka's controller does.
    CreateTopics {
        specs: Vec<CreateTopicSpec>,
        validate_only: bool,
        reply: Reply<Vec<Result<Arc<TopicImage>, ApiError>>>,
    },
    DeleteTopic {
        topic_id: Uuid,
        reply: Reply<()>,
    },
    CreatePartitions {
        topic: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
        reply: Reply<()>,
    },
    AlterTopicConfigs {
        topic: String,
        ops: Vec<(String, AlterConfigOp, Option<String>)>,
        validate_only: bool,
        reply: Reply<()>,
    },
    AlterBrokerConfigs {
        resource: String,
        ops: Vec<(String, AlterConfigOp, Option<String>)>,
        validate_only: bool,
        reply: Reply<()>,
    },
    /// Legacy AlterConfigs: `configs` become the whole set of the resource's configs.
    ReplaceConfigs {
        resource: ConfigResource,
        configs: Vec<(String, Option<String>)>,
        validate_only: bool,
        reply: Reply<()>,
    },
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
        reply: Reply<Vec<ElectionResult>>,
    },
    AlterPartitionReassignments {
        items: Vec<ReassignmentItem>,
        allow_replication_factor_change: bool,
        reply: Reply<Vec<ReassignmentResult>>,
    },
    RegisterBroker {
        registration: BrokerRegistration,
        reply: Reply<usize>,
    },
    /// CreateAcls: each creation's outcome, in order
    /// ([`decisions::acls::create_acls`]).
    CreateAcls {
        acls: Vec<crate::metadata::acl::Acl>,
        reply: Reply<Vec<Result<(), ApiError>>>,
    },
    /// DeleteAcls: each filter's matched ACLs, in order ([`decisions::acls::delete_acls`]).
    DeleteAcls {
        filters: Vec<crate::metadata::acl::AclFilter>,
        reply: Reply<Vec<AclDeletion>>,
    },
    /// AlterUserScramCredentials: each user's outcome
    /// ([`decisions::scram::alter_user_scram_credentials`]).
    AlterUserScramCredentials {
        deletions: Vec<decisions::scram::ScramDeletion>,
        upsertions: Vec<decisions::scram::ScramUpsertion>,
        reply: Reply<Vec<ScramAlteration>>,
    },
    AllocateProducerIds {
        broker_id: i32,
        reply: Reply<ProducerIdBlock>,
    },
    /// BrokerRegistration (API 62) from a broker, on controller-listener connection
    /// `connection`: the reply is the broker epoch.
    BrokerRegistration {
        registration: BrokerRegistration,
        cluster_id: String,
        connection: Option<u64>,
        reply: Reply<i64>,
    },
    /// BrokerHeartbeat (API 63).
    BrokerHeartbeat {
        broker_id: i32,
        broker_epoch: i64,
        metadata_offset: i64,
        want_fence: bool,
        want_shut_down: bool,
        connection: Option<u64>,
        /// Whether every other active broker has replayed the metadata log past the image
        /// from which this one leads nothing (a controlled shutdown ends only then). The
        /// controller thread sets it from its sessions before deciding.
        peers_replayed: bool,
        /// The loads of the partitions the broker leads, when it reported them (our own
        /// tagged field, [`decisions::LOAD_REPORT_TAG`]); taken by the controller thread on
        /// arrival ([`super::driver::ControllerCore::request`]).
        loads: Option<Vec<decisions::ReportedLoad>>,
        reply: Reply<HeartbeatOutcome>,
    },
    /// AlterPartition (API 56) from a partition leader.
    AlterPartition {
        requester_id: i32,
        requester_epoch: i64,
        version: i16,
        items: Vec<AlterPartitionItem>,
        reply: Reply<Vec<AlterPartitionResult>>,
    },
    /// The controller's own: a broker's session ended (missed heartbeats, or its connection
    /// closed); fence that incarnation. `after_failover`: the session was the one a new active
    /// controller started, and the broker never reached it.
    FenceBroker {
        broker_id: i32,
        broker_epoch: i64,
        after_failover: bool,
    },
    /// The controller's own: the first active controller of a cluster writes its id, and the
    /// bootstrap records its metadata directory was formatted with
    /// ([`crate::metadata::bootstrap`]).
    BootstrapClusterId {
        cluster_id: String,
        records: Vec<MetadataRecord>,
    },
    /// The controller's own: one automatic leader rebalancing pass
    /// ([`decisions::rebalance_pass`]); `more` is set once committed if the pass stopped at its
    /// bound with electable partitions left.
    Rebalance {
        more: Arc<std::sync::atomic::AtomicBool>,
    },
    /// The controller's own: one load-balancing pass (`kafkaiq.leader.balancer=load`,
    /// [`decisions::load_pass`]) with each broker's latest load report, at wall-clock `now_ms`.
    BalanceLoad {
        reports: std::collections::BTreeMap<i32, Vec<decisions::ReportedLoad>>,
        now_ms: i64,
    },
    /// The controller's own: one periodic unclean election pass over the partitions without a
    /// leader ([`decisions::unclean_election_pass`]); `more` as for `Rebalance`.
    ElectUncleanLeaders {
        more: Arc<std::sync::atomic::AtomicBool>,
    },
}

/// One DeleteAcls filter's outcome: the ACLs it removed, or why it was refused.
pub(crate) type AclDeletion =
    Result<Vec<(crate::metadata::acl::AclId, crate::metadata::acl::Acl)>, ApiError>;

/// One AlterUserScramCredentials user's outcome.
pub(crate) type ScramAlteration = (String, Result<(), ApiError>);

/// Answers a request once its pass is committed: with the committed image, or the commit error.
pub(crate) type Finish = Box<dyn FnOnce(Result<&MetadataImage, &ApiError>) + Send>;

/// A decided request: the records it needs committed, and how to answer it afterwards.
pub(crate) struct Decided {
    pub(crate) records: Vec<MetadataRecord>,
    pub(crate) finish: Finish,
}

impl Decided {
    /// Nothing to commit; the answer is already known.
    pub(crate) fn answer<T: Send + 'static>(
        reply: Reply<T>,
        result: Result<T, ApiError>,
    ) -> Decided {
        Decided {
            records: Vec::new(),
            finish: Box::new(move |_| {
                let _ = reply.send(result);
            }),
        }
    }

    /// `records` on success (which may be none), then `ok` computed from the committed image.
    fn commit<T: Send + 'static>(
        reply: Reply<T>,
        decided: Result<Vec<MetadataRecord>, ApiError>,
        ok: impl FnOnce(&MetadataImage) -> T + Send + 'static,
    ) -> Decided {
        match decided {
            Err(e) => Decided::answer(reply, Err(e)),
            Ok(records) => Decided {
                records,
                finish: Box::new(move |committed| {
                    let _ = reply.send(committed.map(ok).map_err(Clone::clone));
                }),
            },
        }
    }
}

/// Where a decision's new ids (topic ids) come from: random on a node, from the seed in the
/// simulation, so that the decisions themselves hold no randomness.
pub(crate) type IdSource = Box<dyn FnMut() -> Uuid + Send>;

/// Decides `request` against `image` at wall-clock `now_ms`, taking new ids from `new_id`. A
/// decision that changes partitions has its records led by a [`MetadataRecord::ChangeCause`]
/// saying why, so the image's history ([`crate::metadata::history`]) knows.
pub(crate) fn decide(
    config: &BrokerConfig,
    image: &MetadataImage,
    request: Request,
    now_ms: i64,
    new_id: &mut dyn FnMut() -> Uuid,
) -> Decided {
    let (kind, broker_id) = request.cause();
    let mut decided = decide_records(config, image, request, new_id);
    // A decision that names its own causes (one per move of the load balancer) leads with one.
    if decided
        .records
        .iter()
        .any(|r| matches!(r, MetadataRecord::Partition { .. }))
        && !matches!(
            decided.records.first(),
            Some(MetadataRecord::ChangeCause(_))
        )
    {
        let cause = ChangeCause {
            kind,
            broker_id,
            time_ms: now_ms,
        };
        decided
            .records
            .insert(0, MetadataRecord::ChangeCause(cause));
    }
    decided
}

fn decide_records(
    config: &BrokerConfig,
    image: &MetadataImage,
    request: Request,
    new_id: &mut dyn FnMut() -> Uuid,
) -> Decided {
    match request {
        Request::CreateTopic {
            spec,
            validate_only,
            reply,
        } => {
            let (records, mut results) =
                create_topics(config, image, std::slice::from_ref(&spec), new_id);
            let records = results.pop().expect("one topic").map(|()| records);
            if validate_only {
                let topic = records.map(|r| image.apply(&r).topics[&spec.name].clone());
                return Decided::answer(reply, topic);
            }
            let name = spec.name;
            Decided::commit(reply, records, move |image| image.topics[&name].clone())
        }
        Request::CreateTopics {
            specs,
            validate_only,
            reply,
        } => {
            let (records, results) = create_topics(config, image, &specs, new_id);
            let names: Vec<String> = specs.into_iter().map(|s| s.name).collect();
            if validate_only {
                let after = image.apply(&records);
                return Decided::answer(reply, Ok(created(&after, &names, results)));
            }
            Decided {
                records,
                finish: Box::new(move |committed| {
                    let answers = match committed {
                        Ok(image) => created(image, &names, results),
                        Err(e) => results.into_iter().map(|r| r.and(Err(e.clone()))).collect(),
                    };
                    let _ = reply.send(Ok(answers));
                }),
            }
        }
        Request::DeleteTopic { topic_id, reply } => {
            let records = decisions::delete_topic(image, config, topic_id);
            Decided::commit(reply, records, |_| ())
        }
        Request::CreatePartitions {
            topic,
            count,
            assignments,
            validate_only,
            reply,
        } => {
            let records = decisions::create_partitions(image, &topic, count, assignments);
            unless_validating(validate_only, reply, records)
        }
        Request::AlterTopicConfigs {
            topic,
            ops,
            validate_only,
            reply,
        } => {
            let records = decisions::alter_topic_configs(image, &topic, &ops);
            unless_validating(validate_only, reply, records)
        }
        Request::AlterBrokerConfigs {
            resource,
            ops,
            validate_only,
            reply,
        } => {
            let records = decisions::alter_broker_configs(image, config, &resource, &ops);
            unless_validating(validate_only, reply, records)
        }
        Request::ReplaceConfigs {
            resource,
            configs,
            validate_only,
            reply,
        } => {
            let records = decisions::replace_configs(image, config, &resource, &configs);
            unless_validating(validate_only, reply, records)
        }
        Request::ElectLeaders {
            election,
            partitions,
            reply,
        } => {
            let (records, mut results) = decisions::elect_leaders(image, election, partitions);
            Decided {
                records,
                finish: Box::new(move |committed| {
                    if let Err(e) = committed {
                        for (_, _, r) in results.iter_mut().filter(|(_, _, r)| r.is_ok()) {
                            *r = Err(e.clone());
                        }
                    }
                    let _ = reply.send(Ok(results));
                }),
            }
        }
        Request::AlterPartitionReassignments {
            items,
            allow_replication_factor_change,
            reply,
        } => {
            let settings = decisions::ControllerSettings::from_config(config);
            let (records, mut results) = decisions::alter_reassignments(
                image,
                &settings,
                allow_replication_factor_change,
                &items,
            );
            Decided {
                records,
                finish: Box::new(move |committed| {
                    if let Err(e) = committed {
                        for r in results.iter_mut().filter(|r| r.result.is_ok()) {
                            r.result = Err(e.clone());
                        }
                    }
                    let _ = reply.send(Ok(results));
                }),
            }
        }
        Request::RegisterBroker {
            registration,
            reply,
        } => {
            // Until brokers heartbeat to the controller, the one registration is this node's own
            // broker, which reads the controller's image: registered and unfenced at once.
            let node_id = registration.node_id;
            let settings = decisions::ControllerSettings::from_config(config);
            let records = decisions::register_local_broker(image, &settings, &registration).records;
            let led = records
                .iter()
                .filter(|r| {
                    matches!(r, MetadataRecord::Partition { registration, .. } if registration.leader == node_id)
                })
                .count();
            Decided::commit(reply, Ok(records), move |_| led)
        }
        Request::CreateAcls { acls, reply } => {
            let (mut results, records) = decisions::acls::create_acls(image, &acls, new_id);
            Decided {
                records,
                finish: Box::new(move |committed| {
                    if let Err(e) = committed {
                        for r in results.iter_mut().filter(|r| r.is_ok()) {
                            *r = Err(e.clone());
                        }
                    }
                    let _ = reply.send(Ok(results));
                }),
            }
        }
        Request::DeleteAcls { filters, reply } => {
            let (mut results, records) = decisions::acls::delete_acls(image, &filters);
            Decided {
                records,
                finish: Box::new(move |committed| {
                    if let Err(e) = committed {
                        for r in results.iter_mut().filter(|r| r.is_ok()) {
                            *r = Err(e.clone());
                        }
                    }
                    let _ = reply.send(Ok(results));
                }),
            }
        }
        Request::AlterUserScramCredentials {
            deletions,
            upsertions,
            reply,
        } => {
            let (mut results, records) = decisions::scram::alter_user_scram_credentials(
                image,
                &|mechanism, user| config.has_file_scram_user(mechanism.sasl_name(), user),
                &deletions,
                &upsertions,
            );
            Decided {
                records,
                finish: Box::new(move |committed| {
                    if let Err(e) = committed {
                        for (_, r) in results.iter_mut().filter(|(_, r)| r.is_ok()) {
                            *r = Err(e.clone());
                        }
                    }
                    let _ = reply.send(Ok(results));
                }),
            }
        }
        Request::AllocateProducerIds { broker_id, reply } => {
            let (records, block) = decisions::allocate_producer_ids(image, broker_id);
            Decided::commit(reply, Ok(records), move |_| block)
        }
        Request::BrokerRegistration {
            registration,
            cluster_id,
            reply,
            ..
        } => {
            if let Err(e) = decisions::check_cluster_id(image, &cluster_id) {
                return Decided::answer(reply, Err(e));
            }
            let settings = decisions::ControllerSettings::from_config(config);
            let registered = decisions::register_broker(image, &settings, &registration);
            let epoch = registered.broker_epoch;
            Decided::commit(reply, Ok(registered.records), move |_| epoch)
        }
        Request::BrokerHeartbeat {
            broker_id,
            broker_epoch,
            metadata_offset,
            want_fence,
            want_shut_down,
            peers_replayed,
            reply,
            ..
        } => {
            let settings = decisions::ControllerSettings::from_config(config);
            match decisions::broker_heartbeat(
                image,
                &settings,
                broker_id,
                broker_epoch,
                metadata_offset,
                want_fence,
                want_shut_down,
                peers_replayed,
            ) {
                Ok((records, outcome)) => Decided::commit(reply, Ok(records), move |_| outcome),
                Err(e) => Decided::answer(reply, Err(e)),
            }
        }
        Request::AlterPartition {
            requester_id,
            requester_epoch,
            version,
            items,
            reply,
        } => {
            match decisions::alter_partition(image, requester_id, requester_epoch, version, &items)
            {
                Ok((records, results)) => Decided::commit(reply, Ok(records), move |_| results),
                Err(e) => Decided::answer(reply, Err(e)),
            }
        }
        Request::FenceBroker {
            broker_id,
            broker_epoch,
            ..
        } => {
            let settings = decisions::ControllerSettings::from_config(config);
            Decided {
                records: decisions::fence_broker(image, &settings, broker_id, Some(broker_epoch)),
                finish: Box::new(|_| {}),
            }
        }
        Request::BootstrapClusterId {
            cluster_id,
            records,
        } => Decided {
            records: decisions::bootstrap_cluster_id(image, &cluster_id, records),
            finish: Box::new(|_| {}),
        },
        Request::Rebalance { more } => {
            let settings = decisions::ControllerSettings::from_config(config);
            let (records, elected, left) = decisions::rebalance_pass(
                image,
                &settings,
                LEADER_ELECTIONS_PER_IMBALANCE_PASS_MAX,
            );
            if !elected.is_empty() {
                tracing::info!(
                    elections = elected.len(),
                    more = left,
                    "preferred leader elections for imbalanced brokers"
                );
            }
            Decided {
                records,
                finish: Box::new(move |committed| {
                    more.store(
                        left && committed.is_ok(),
                        std::sync::atomic::Ordering::Release,
                    )
                }),
            }
        }
        Request::BalanceLoad { reports, now_ms } => {
            let config = decisions::BalancerConfig::from_settings(&config.elections);
            let pass = decisions::load_pass(image, &config, &reports, now_ms);
            for m in &pass.moves {
                tracing::info!(
                    topic = %m.topic,
                    partition = m.partition,
                    from = m.from,
                    to = m.to,
                    reason = %m.reason,
                    "leadership moved by load"
                );
            }
            if let Some(held) = &pass.held {
                tracing::debug!(%held, "load balancer pass held");
            }
            Decided {
                records: pass.records,
                finish: Box::new(|_| {}),
            }
        }
        Request::ElectUncleanLeaders { more } => {
            let settings = decisions::ControllerSettings::from_config(config);
            let (records, elected, left) = decisions::unclean_election_pass(
                image,
                &settings,
                LEADER_ELECTIONS_PER_IMBALANCE_PASS_MAX,
            );
            for (topic, partition) in &elected {
                tracing::error!(%topic, partition, "unclean leader election for an offline partition");
            }
            Decided {
                records,
                finish: Box::new(move |committed| {
                    more.store(
                        left && committed.is_ok(),
                        std::sync::atomic::Ordering::Release,
                    )
                }),
            }
        }
    }
}

/// The records of a CreateTopics request and each topic's outcome: each topic decided against
/// the image the earlier ones leave; if their records together are more than one operation may
/// write, none is created and every topic gets Kafka's POLICY_VIOLATION.
fn create_topics(
    config: &BrokerConfig,
    image: &MetadataImage,
    specs: &[CreateTopicSpec],
    new_id: &mut dyn FnMut() -> Uuid,
) -> (Vec<MetadataRecord>, Vec<Result<(), ApiError>>) {
    let mut working: Option<MetadataImage> = None;
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(specs.len());
    for spec in specs {
        let base = working.as_ref().unwrap_or(image);
        match decisions::create_topic(base, config, spec, new_id()) {
            Ok(topic) => {
                working
                    .get_or_insert_with(|| image.clone())
                    .apply_in_place(&topic);
                records.extend(topic);
                results.push(Ok(()));
            }
            Err(e) => results.push(Err(e)),
        }
    }
    match decisions::check_user_op_size(&records) {
        Ok(()) => (records, results),
        Err(e) => (Vec::new(), specs.iter().map(|_| Err(e.clone())).collect()),
    }
}

/// Each topic's answer: the topic as `image` holds it, or its error.
fn created(
    image: &MetadataImage,
    names: &[String],
    results: Vec<Result<(), ApiError>>,
) -> Vec<Result<Arc<TopicImage>, ApiError>> {
    names
        .iter()
        .zip(results)
        .map(|(name, r)| r.map(|()| image.topics[name].clone()))
        .collect()
}

fn unless_validating(
    validate_only: bool,
    reply: Reply<()>,
    records: Result<Vec<MetadataRecord>, ApiError>,
) -> Decided {
    if validate_only {
        Decided::answer(reply, records.map(|_| ()))
    } else {
        Decided::commit(reply, records, |_| ())
    }
}

impl Request {
    /// Why the partition records this request leads to are written, and the broker it is about
    /// (-1 for none).
    fn cause(&self) -> (CauseKind, i32) {
        match self {
            Request::CreateTopic { .. }
            | Request::CreateTopics { .. }
            | Request::CreatePartitions { .. } => (CauseKind::Created, -1),
            Request::ElectLeaders { election, .. } => match election {
                ElectionType::Preferred => (CauseKind::PreferredElection, -1),
                ElectionType::Unclean => (CauseKind::UncleanElection, -1),
            },
            Request::AlterPartitionReassignments { .. } => (CauseKind::Reassignment, -1),
            Request::RegisterBroker { registration, .. } => {
                (CauseKind::BrokerUnfenced, registration.node_id)
            }
            Request::BrokerRegistration { registration, .. } => {
                (CauseKind::BrokerRestarted, registration.node_id)
            }
            Request::BrokerHeartbeat {
                broker_id,
                want_fence,
                want_shut_down,
                ..
            } => {
                let kind = if *want_shut_down {
                    CauseKind::ControlledShutdown
                } else if *want_fence {
                    CauseKind::BrokerFenced
                } else {
                    CauseKind::BrokerUnfenced
                };
                (kind, *broker_id)
            }
            Request::AlterPartition { requester_id, .. } => {
                (CauseKind::AlterPartition, *requester_id)
            }
            Request::FenceBroker {
                broker_id,
                after_failover,
                ..
            } => {
                let kind = if *after_failover {
                    CauseKind::ControllerFailover
                } else {
                    CauseKind::BrokerFenced
                };
                (kind, *broker_id)
            }
            Request::Rebalance { .. } => (CauseKind::AutoRebalance, -1),
            Request::BalanceLoad { .. } => (CauseKind::LoadBalance, -1),
            Request::ElectUncleanLeaders { .. } => (CauseKind::UncleanElection, -1),
            Request::DeleteTopic { .. }
            | Request::AlterTopicConfigs { .. }
            | Request::AlterBrokerConfigs { .. }
            | Request::ReplaceConfigs { .. }
            | Request::AllocateProducerIds { .. }
            | Request::CreateAcls { .. }
            | Request::DeleteAcls { .. }
            | Request::AlterUserScramCredentials { .. }
            | Request::BootstrapClusterId { .. } => (CauseKind::Unknown, -1),
        }
    }

    /// Whether a client asked for this change (directly, or forwarded by a broker): its records
    /// are bounded as one operation ([`decisions::check_user_op_size`]) and committed in one
    /// log entry. The controller's own changes and the brokers' lifecycle are not bounded so.
    pub(crate) fn is_user_op(&self) -> bool {
        matches!(
            self,
            Request::CreateTopic { .. }
                | Request::CreateTopics { .. }
                | Request::DeleteTopic { .. }
                | Request::CreatePartitions { .. }
                | Request::AlterTopicConfigs { .. }
                | Request::AlterBrokerConfigs { .. }
                | Request::ElectLeaders { .. }
                | Request::AlterPartitionReassignments { .. }
                | Request::CreateAcls { .. }
                | Request::DeleteAcls { .. }
                | Request::AlterUserScramCredentials { .. }
        )
    }

    /// Answers the request without deciding it (the controller is not active, or stopping).
    pub(crate) fn refuse(self, error: ApiError) {
        match self {
            Request::CreateTopic { reply, .. } => drop(reply.send(Err(error))),
            Request::CreateTopics { reply, .. } => drop(reply.send(Err(error))),
            Request::DeleteTopic { reply, .. }
            | Request::CreatePartitions { reply, .. }
            | Request::AlterTopicConfigs { reply, .. }
            | Request::AlterBrokerConfigs { reply, .. }
            | Request::ReplaceConfigs { reply, .. } => drop(reply.send(Err(error))),
            Request::ElectLeaders { reply, .. } => drop(reply.send(Err(error))),
            Request::AlterPartitionReassignments { reply, .. } => drop(reply.send(Err(error))),
            Request::RegisterBroker { reply, .. } => drop(reply.send(Err(error))),
            Request::AllocateProducerIds { reply, .. } => drop(reply.send(Err(error))),
            Request::CreateAcls { reply, .. } => drop(reply.send(Err(error))),
            Request::DeleteAcls { reply, .. } => drop(reply.send(Err(error))),
            Request::AlterUserScramCredentials { reply, .. } => drop(reply.send(Err(error))),
            Request::BrokerRegistration { reply, .. } => drop(reply.send(Err(error))),
            Request::BrokerHeartbeat { reply, .. } => drop(reply.send(Err(error))),
            Request::AlterPartition { reply, .. } => drop(reply.send(Err(error))),
            Request::FenceBroker { .. }
            | Request::BootstrapClusterId { .. }
            | Request::Rebalance { .. }
            | Request::BalanceLoad { .. }
            | Request::ElectUncleanLeaders { .. } => {}
        }
    }
}
