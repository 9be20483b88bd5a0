//! The controller: the only writer of cluster metadata.
//!
//! Every change (topics, partitions, topic configs, leader elections, producer id blocks,
//! broker registration) is a request to the controller thread (`driver.rs`), which drives this
//! node's voter of the metadata quorum ([`crate::quorum`]). While the voter leads the quorum
//! the thread is the *active controller*: it runs a pure decision from [`decisions`] —
//! `(image, settings, request) -> records | ApiError` — against its image, proposes the records
//! as log entries, and once the quorum has committed them (durable on a majority) replays them
//! through the node's [`MetadataPublisher`] (new image in the cache, listeners told) and only
//! then answers. Requests waiting together are decided one after another against the image the
//! earlier ones make and proposed together. Restart is replay: of the latest snapshot, then of
//! the entries after it.
//!
//! Callers hold a [`ControllerChannel`], never the thread. The controller never touches
//! partition data; the replica layer reacts to published images.

mod command;
pub mod decisions;
mod driver;
pub mod elections;
mod forward;
pub mod observer;
mod passes;
mod request;
mod sessions;
#[cfg(test)]
mod sim;
mod voter;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::{CONTROLLER_QUEUE_REQUESTS_MAX, RAFT_INBOUND_QUEUE_MESSAGES_MAX};
use crate::metadata::{
    BrokerRegistration, MetadataCache, MetadataImage, MetadataPublisher, MetadataRecord, TopicImage,
};
use crate::quorum::chunks::{Chunk, ChunkError, Reassembly};
use crate::quorum::durable::{DiskState, Durable, DurableError};
use crate::quorum::transport::{Transport, TransportEvent};
use crate::quorum::wire;
use crate::quorum::{QuorumConfig, QuorumEngine};
pub use decisions::{
    AlterConfigOp, AlterPartitionItem, AlterPartitionResult, ConfigResource, CreateTopicSpec,
    ElectionResult, ElectionType, HeartbeatOutcome, ProducerIdBlock, ReassignmentItem,
    ReassignmentResult,
};
use driver::{ControllerCore, Event};
pub use forward::{Origin, QuorumDescription, VoterDescription};
use request::Request;

/// The quorum's directory inside the metadata log dir (the first of `log.dirs`).
pub const QUORUM_DIR: &str = "kafkaiq-metadata";

pub(crate) fn random_uuid() -> Uuid {
    // Random bits from the std hasher's randomly seeded keys (fresh per `RandomState`) mixed with
    // a counter: enough for topic and cluster ids, without a dependency on an RNG crate and
    // without reading the clock.
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        *w = h.finish();
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_be_bytes());
    bytes[8..].copy_from_slice(&words[1].to_be_bytes());
    // Version 4 / variant 1 bits, so tools see a well-formed random UUID.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let id = Uuid::from_bytes(bytes);
    // Kafka reserves the zero UUID and the "metadata topic" UUID 1; never hand them out.
    if id.as_u128() <= 1 {
        random_uuid()
    } else {
        id
    }
}

/// A new cluster id: Kafka's format, a random UUID in URL-safe base64 without padding.
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = random_uuid().into_bytes();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

/// How the rest of the node asks the controller for a change. Cheap to clone. Every method
/// resolves once the change is committed and published on this node (or refused); if the
/// controller is gone or not active the answer is NOT_CONTROLLER, which clients retry.
#[derive(Debug, Clone)]
pub struct ControllerChannel {
    events: mpsc::Sender<Event>,
    /// Bounds the requests queued for the controller thread; a caller beyond it waits.
    permits: Arc<Semaphore>,
    state: Arc<forward::QuorumState>,
    /// Present in a cluster: how requests reach the active controller elsewhere.
    forwarder: Option<forward::Forwarder>,
    /// What this node's voter committed lately, for broker-only nodes' fetches.
    feed: Arc<observer::MetadataFeed>,
    /// Raft messages queued for the controller thread (bounded by
    /// [`RAFT_INBOUND_QUEUE_MESSAGES_MAX`]).
    peers_queued: Arc<AtomicUsize>,
    /// Why the controller thread stopped by itself, once it has.
    failed: watch::Receiver<Option<String>>,
    /// Large Raft messages from peer voters, being put back together from their chunks.
    chunks: Arc<std::sync::Mutex<Reassembly>>,
}

impl ControllerChannel {
    /// The committed entries this node's voter serves to broker-only nodes.
    pub fn feed(&self) -> &observer::MetadataFeed {
        &self.feed
    }

    /// Whether this node's voter is the active controller (always, once started, for a single
    /// node).
    pub fn is_active(&self) -> bool {
        self.state.active.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The metadata quorum as this node's voter last saw it (DescribeQuorum).
    pub fn quorum(&self) -> QuorumDescription {
        self.state.description()
    }

    /// The controller's meters (leader elections), counted while this node is active.
    pub fn stats(&self) -> &crate::metrics::ControllerStats {
        &self.state.stats
    }

    /// The active controller as this node knows it, -1 when none.
    pub fn active_controller(&self) -> i32 {
        self.state.leader.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sends a metadata-changing request to the active controller elsewhere and returns its
    /// answer (NOT_CONTROLLER when there is none to send it to): a client's (`origin`) in an
    /// envelope, checked there as the client's; the node's own as the node's.
    pub async fn forward(
        &self,
        api_key: kafka_protocol::messages::ApiKey,
        version: i16,
        request: kafka_protocol::messages::RequestKind,
        origin: Option<&Origin>,
    ) -> Result<kafka_protocol::messages::ResponseKind, ApiError> {
        match &self.forwarder {
            Some(f) => f.forward(api_key, version, request, origin).await,
            None => Err(ApiError::NotController),
        }
    }

    /// Creates a topic if it does not exist, here if this node is the active controller, else
    /// through the active controller (auto-creation, `__consumer_offsets`): on behalf of the
    /// client whose request asked for it (`origin`, in an envelope), else as this node.
    pub async fn ensure_topic(
        &self,
        spec: CreateTopicSpec,
        origin: Option<&Origin>,
    ) -> Result<(), ApiError> {
        if self.is_active() || self.forwarder.is_none() {
            return self.create_topic(spec, false).await.map(|_| ());
        }
        use kafka_protocol::messages::create_topics_request::{
            CreatableTopic, CreatableTopicConfig,
        };
        use kafka_protocol::messages::{CreateTopicsRequest, RequestKind, ResponseKind};
        use kafka_protocol::protocol::StrBytes;
        let name = spec.name.clone();
        let topic = CreatableTopic::default()
            .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                spec.name,
            )))
            .with_num_partitions(spec.num_partitions)
            .with_replication_factor(spec.replication_factor)
            .with_configs(
                spec.configs
                    .into_iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k))
                            .with_value(v.map(StrBytes::from_string))
                    })
                    .collect(),
            );
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![topic]);
        let response = self
            .forward(
                kafka_protocol::messages::ApiKey::CreateTopics,
                7,
                RequestKind::CreateTopics(request),
                origin,
            )
            .await?;
        let ResponseKind::CreateTopics(r) = response else {
            return Err(ApiError::NotController);
        };
        match r.topics.first().map(|t| t.error_code) {
            Some(0) => Ok(()),
            Some(code) if code == ApiError::TopicAlreadyExists(String::new()).code() => Err(
                ApiError::TopicAlreadyExists(format!("Topic '{name}' already exists.")),
            ),
            Some(code) if code == ApiError::InvalidTopic(String::new()).code() => Err(
                ApiError::InvalidTopic(format!("Topic name {name} is invalid")),
            ),
            Some(code) if code == ApiError::NotController.code() => Err(ApiError::NotController),
            other => Err(ApiError::UnknownServerError(format!(
                "the controller answered {other:?} creating {name}"
            ))),
        }
    }

    async fn call<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<T, ApiError>>) -> Request,
    ) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.permits
            .acquire()
            .await
            .map_err(|_| ApiError::NotController)?
            .forget();
        self.events
            .send(Event::Request(request(reply)))
            .map_err(|_| ApiError::NotController)?;
        rx.await.map_err(|_| ApiError::NotController)?
    }

    /// A Raft message from a peer voter, which came on controller-listener connection
    /// `connection`. Never blocks; dropped if the controller is gone or
    /// [`RAFT_INBOUND_QUEUE_MESSAGES_MAX`] messages already wait (Raft tolerates loss, and a
    /// peer flooding the port cannot grow the queue without bound).
    pub fn peer_message(&self, message: raft::eraftpb::Message, connection: u64) {
        if self.peers_queued.fetch_add(1, Ordering::Relaxed) >= RAFT_INBOUND_QUEUE_MESSAGES_MAX {
            self.peers_queued.fetch_sub(1, Ordering::Relaxed);
            tracing::debug!(
                connection,
                "raft message dropped: the controller's queue is full"
            );
            return;
        }
        let sent = self.events.send(Event::Peer {
            message,
            connection,
        });
        if sent.is_err() {
            self.peers_queued.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Takes one chunk of a large Raft message from a peer voter ([`crate::quorum::chunks`]);
    /// the message, once whole, goes on as [`Self::peer_message`]. An error means the
    /// connection must close.
    pub fn peer_chunk(&self, chunk: Chunk, connection: u64) -> Result<(), ChunkError> {
        let (from, link) = (chunk.from, self.state.peer_link(chunk.from));
        let whole = self.reassembly().accept(connection, link, chunk)?;
        if let Some(body) = whole {
            let message =
                wire::decode_message(&body).map_err(|e| ChunkError::Undecodable(e.to_string()))?;
            if message.from != from {
                return Err(ChunkError::Undecodable(format!(
                    "a message from {} in chunks from {from}",
                    message.from
                )));
            }
            self.peer_message(message, connection);
        }
        Ok(())
    }

    fn reassembly(&self) -> std::sync::MutexGuard<'_, Reassembly> {
        self.chunks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Completes with the reason once the controller thread has stopped by itself (its state
    /// cannot be kept durable, or the committed metadata is corrupt): the node must stop, as
    /// Kafka's controller halts the process on such a fault. Never completes otherwise.
    pub async fn failed(&self) -> String {
        let mut failed = self.failed.clone();
        let reason = match failed.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => return std::future::pending().await,
        };
        reason
    }

    /// A controller-listener connection closed (a peer voter's, or a broker's lifecycle
    /// connection).
    pub fn connection_closed(&self, connection: u64) {
        self.reassembly().connection_closed(connection);
        let _ = self.events.send(Event::ConnectionClosed(connection));
    }

    /// Creates one topic (or only validates it). Returns the topic as it is (or would be).
    pub async fn create_topic(
        &self,
        spec: CreateTopicSpec,
        validate_only: bool,
    ) -> Result<Arc<TopicImage>, ApiError> {
        self.call(|reply| Request::CreateTopic {
            spec,
            validate_only,
            reply,
        })
        .await
    }

    /// Creates the topics of one CreateTopics request (or only validates them), decided
    /// together and committed as one batch: every topic created is in the same commit. Returns
    /// each topic as it is (or would be), or its error, in the order given.
    pub async fn create_topics(
        &self,
        specs: Vec<CreateTopicSpec>,
        validate_only: bool,
    ) -> Result<Vec<Result<Arc<TopicImage>, ApiError>>, ApiError> {
        self.call(|reply| Request::CreateTopics {
            specs,
            validate_only,
            reply,
        })
        .await
    }

    pub async fn delete_topic(&self, topic_id: Uuid) -> Result<(), ApiError> {
        self.call(|reply| Request::DeleteTopic { topic_id, reply })
            .await
    }

    /// Grows a topic to `count` partitions.
    pub async fn create_partitions(
        &self,
        topic: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call(|reply| Request::CreatePartitions {
            topic,
            count,
            assignments,
            validate_only,
            reply,
        })
        .await
    }

    /// Applies IncrementalAlterConfigs operations to one topic.
    pub async fn alter_topic_configs(
        &self,
        topic: String,
        ops: Vec<(String, AlterConfigOp, Option<String>)>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call(|reply| Request::AlterTopicConfigs {
            topic,
            ops,
            validate_only,
            reply,
        })
        .await
    }

    /// Applies IncrementalAlterConfigs operations to one BROKER resource; see
    /// [`decisions::alter_broker_configs`].
    pub async fn alter_broker_configs(
        &self,
        resource: String,
        ops: Vec<(String, AlterConfigOp, Option<String>)>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call(|reply| Request::AlterBrokerConfigs {
            resource,
            ops,
            validate_only,
            reply,
        })
        .await
    }

    /// Legacy AlterConfigs; see [`decisions::replace_configs`].
    pub async fn replace_configs(
        &self,
        resource: ConfigResource,
        configs: Vec<(String, Option<String>)>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call(|reply| Request::ReplaceConfigs {
            resource,
            configs,
            validate_only,
            reply,
        })
        .await
    }

    /// ElectLeaders; see [`decisions::elect_leaders`].
    pub async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionResult>, ApiError> {
        self.call(|reply| Request::ElectLeaders {
            election,
            partitions,
            reply,
        })
        .await
    }

    /// CreateAcls; see [`decisions::acls::create_acls`].
    pub async fn create_acls(
        &self,
        acls: Vec<crate::metadata::acl::Acl>,
    ) -> Result<Vec<Result<(), ApiError>>, ApiError> {
        self.call(|reply| Request::CreateAcls { acls, reply }).await
    }

    /// DeleteAcls; see [`decisions::acls::delete_acls`].
    pub async fn delete_acls(
        &self,
        filters: Vec<crate::metadata::acl::AclFilter>,
    ) -> Result<Vec<request::AclDeletion>, ApiError> {
        self.call(|reply| Request::DeleteAcls { filters, reply })
            .await
    }

    /// AlterUserScramCredentials; see
    /// [`decisions::scram::alter_user_scram_credentials`].
    pub async fn alter_user_scram_credentials(
        &self,
        deletions: Vec<decisions::scram::ScramDeletion>,
        upsertions: Vec<decisions::scram::ScramUpsertion>,
    ) -> Result<Vec<request::ScramAlteration>, ApiError> {
        self.call(|reply| Request::AlterUserScramCredentials {
            deletions,
            upsertions,
            reply,
        })
        .await
    }

    /// AlterPartitionReassignments; see [`decisions::alter_reassignments`].
    pub async fn alter_partition_reassignments(
        &self,
        items: Vec<ReassignmentItem>,
        allow_replication_factor_change: bool,
    ) -> Result<Vec<ReassignmentResult>, ApiError> {
        self.call(|reply| Request::AlterPartitionReassignments {
            items,
            allow_replication_factor_change,
            reply,
        })
        .await
    }

    /// Registers a broker (a new incarnation of it); returns how many partitions it now leads
    /// because of it.
    pub async fn register_broker(
        &self,
        registration: BrokerRegistration,
    ) -> Result<usize, ApiError> {
        self.call(|reply| Request::RegisterBroker {
            registration,
            reply,
        })
        .await
    }

    /// BrokerRegistration from a broker (on controller-listener connection `connection`);
    /// answers the broker epoch.
    pub async fn broker_registration(
        &self,
        registration: BrokerRegistration,
        cluster_id: String,
        connection: Option<u64>,
    ) -> Result<i64, ApiError> {
        self.call(|reply| Request::BrokerRegistration {
            registration,
            cluster_id,
            connection,
            reply,
        })
        .await
    }

    /// BrokerHeartbeat from a broker.
    #[allow(clippy::too_many_arguments)]
    pub async fn broker_heartbeat(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        metadata_offset: i64,
        want_fence: bool,
        want_shut_down: bool,
        connection: Option<u64>,
        loads: Option<Vec<decisions::ReportedLoad>>,
    ) -> Result<HeartbeatOutcome, ApiError> {
        self.call(|reply| Request::BrokerHeartbeat {
            broker_id,
            broker_epoch,
            metadata_offset,
            want_fence,
            want_shut_down,
            connection,
            loads,
            // A node without broker sessions (a single node) has no others to wait for.
            peers_replayed: true,
            reply,
        })
        .await
    }

    /// AlterPartition from a partition leader.
    pub async fn alter_partition(
        &self,
        requester_id: i32,
        requester_epoch: i64,
        version: i16,
        items: Vec<AlterPartitionItem>,
    ) -> Result<Vec<AlterPartitionResult>, ApiError> {
        self.call(|reply| Request::AlterPartition {
            requester_id,
            requester_epoch,
            version,
            items,
            reply,
        })
        .await
    }

    /// A new block of producer ids for `broker_id`, from the active controller wherever it is.
    pub async fn allocate_producer_ids(&self, broker_id: i32) -> Result<ProducerIdBlock, ApiError> {
        if !self.is_active() && self.forwarder.is_some() {
            use kafka_protocol::messages::{
                AllocateProducerIdsRequest, ApiKey, BrokerId, RequestKind, ResponseKind,
            };
            let request = AllocateProducerIdsRequest::default()
                .with_broker_id(BrokerId(broker_id))
                .with_broker_epoch(-1);
            let response = self
                .forward(
                    ApiKey::AllocateProducerIds,
                    0,
                    RequestKind::AllocateProducerIds(request),
                    None,
                )
                .await?;
            return match response {
                ResponseKind::AllocateProducerIds(r) if r.error_code == 0 => Ok(ProducerIdBlock {
                    first: r.producer_id_start.0,
                    size: i64::from(r.producer_id_len),
                }),
                _ => Err(ApiError::NotController),
            };
        }
        self.allocate_producer_ids_here(broker_id).await
    }

    async fn allocate_producer_ids_here(
        &self,
        broker_id: i32,
    ) -> Result<ProducerIdBlock, ApiError> {
        self.call(|reply| Request::AllocateProducerIds { broker_id, reply })
            .await
    }
}

/// Recovery refuses a committed entry whose records do not decode.
/// A panic's message, for the reason the controller thread stopped.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

fn check_entry(data: &[u8]) -> Result<(), String> {
    MetadataRecord::decode_all(data)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Opens this node's voter of the metadata quorum in `metadata_dir` (its files under
/// [`QUORUM_DIR`]) and starts the controller thread, which replays the log into the
/// publisher's image before it answers anything. `cluster_id` is what this node proposes should
/// it be the first active controller of a new cluster; the image's cluster id is the log's. It
/// stops when `shutdown` turns true; the returned task ends with it (and fails if it panicked).
pub async fn start(
    metadata_dir: &Path,
    cluster_id: &str,
    config: Arc<BrokerConfig>,
    cache: Arc<MetadataCache>,
    quorum: &QuorumPeers,
    shutdown: watch::Receiver<bool>,
) -> Result<(ControllerChannel, Arc<MetadataPublisher>, JoinHandle<()>), DurableError> {
    let durable = DiskState::open(&metadata_dir.join(QUORUM_DIR), check_entry)?;
    let bootstrap =
        crate::metadata::bootstrap::read(metadata_dir).map_err(|reason| DurableError::Invalid {
            path: metadata_dir.join(crate::metadata::bootstrap::BOOTSTRAP_CHECKPOINT),
            reason,
        })?;
    // The image's cluster id comes from the log (the first active controller writes it).
    let publisher = Arc::new(
        MetadataPublisher::threaded(cache, MetadataImage::empty(String::new(), config.node_id))
            .map_err(|source| DurableError::Io {
                path: "metadata publisher thread".into(),
                source,
            })?,
    );
    let (channel, task) = spawn(
        config,
        durable,
        publisher.clone(),
        cluster_id,
        bootstrap,
        quorum,
        shutdown,
    )
    .await?;
    Ok((channel, publisher, task))
}

/// The voters of the metadata quorum, as this node sees them.
#[derive(Debug, Clone)]
pub struct QuorumPeers {
    /// Every voter's id and controller listener (`host:port`), this node's included. A single
    /// node is the only voter (its endpoint unused).
    pub voters: std::collections::BTreeMap<u64, String>,
    /// `controller.quorum.election.timeout.ms`: a follower that hears no leader for a random
    /// time between this and twice this campaigns.
    pub election_timeout_ms: u64,
}

impl QuorumPeers {
    /// A quorum of this node alone.
    pub fn single(node_id: i32) -> QuorumPeers {
        QuorumPeers {
            voters: [(node_id as u64, String::new())].into_iter().collect(),
            election_timeout_ms: 1_000,
        }
    }
}

/// Starts the controller thread over a voter with `durable` state.
async fn spawn<D: Durable + 'static>(
    config: Arc<BrokerConfig>,
    durable: D,
    publisher: Arc<MetadataPublisher>,
    cluster_id: &str,
    bootstrap: Vec<MetadataRecord>,
    peers: &QuorumPeers,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(ControllerChannel, JoinHandle<()>), DurableError> {
    let node_id = u64::try_from(config.node_id).expect("node.id is validated non-negative");
    let tick_ms = driver::TICK.as_millis() as u64;
    let quorum = QuorumConfig {
        node_id,
        voters: peers.voters.keys().copied().collect(),
        election_ticks: (peers.election_timeout_ms / tick_ms).max(2) as usize,
        heartbeat_ticks: 1,
        fixed_election_ticks: None,
    };
    let mut durable = durable;
    let mut engine = QuorumEngine::open(&quorum, durable.recover()?);
    engine.set_entry_check(check_entry);
    let lifecycle = (!config.kraft.standalone).then(|| {
        let session = config.kraft.broker_session_timeout_ms;
        driver::Lifecycle {
            session_timeout_ms: session,
            failover_grace_ms: session.min(config.kraft.broker_heartbeat_interval_ms + 1_000),
        }
    });
    let state = Arc::new(forward::QuorumState::new());
    let forwarder = (!config.kraft.standalone).then(|| {
        let voters = forward::voter_endpoints(&config);
        forward::Forwarder::new(
            config.node_id,
            &voters,
            config.controller_client.clone(),
            state.clone(),
        )
    });
    let controller_client = config.controller_client.clone();
    let mut core = ControllerCore::new(
        config,
        engine,
        publisher.image(),
        cluster_id.to_owned(),
        lifecycle,
    );
    core.set_bootstrap_records(bootstrap);
    let effects = command::Effects::new(durable, publisher, state.clone());
    let feed = effects.feed();
    let (events, rx) = mpsc::channel();
    let peers_queued = Arc::new(AtomicUsize::new(0));
    let (failed_tx, failed) = watch::channel(None);
    let permits = Arc::new(Semaphore::new(CONTROLLER_QUEUE_REQUESTS_MAX));
    let remote: std::collections::BTreeMap<u64, String> = peers
        .voters
        .iter()
        .filter(|(id, _)| **id != node_id)
        .map(|(id, endpoint)| (*id, endpoint.clone()))
        .collect();
    let chunks = Arc::new(std::sync::Mutex::new(Reassembly::new(
        remote.keys().copied().collect(),
    )));
    let outbox: driver::Outbox = if remote.is_empty() {
        Box::new(|_| {})
    } else {
        let reports = std::sync::Mutex::new(events.clone());
        let report = Arc::new(move |event: TransportEvent| {
            let events = reports.lock().unwrap_or_else(|e| e.into_inner());
            let _ = events.send(match event {
                TransportEvent::Unreachable(peer) => Event::PeerUnreachable(peer),
                TransportEvent::SnapshotSent { peer, delivered } => {
                    Event::SnapshotSent { peer, delivered }
                }
            });
        });
        let transport = Transport::start(node_id, remote, controller_client, report);
        Box::new(move |messages| transport.send(messages))
    };
    let runtime = tokio::runtime::Handle::current();
    let driver_permits = permits.clone();
    let (replayed_tx, replayed) = oneshot::channel();
    let queued = peers_queued.clone();
    let thread = std::thread::Builder::new()
        .name("controller".into())
        .spawn(move || {
            let _runtime = runtime.enter();
            let run = std::panic::AssertUnwindSafe(|| {
                driver::run(
                    core,
                    effects,
                    rx,
                    driver_permits,
                    queued,
                    replayed_tx,
                    outbox,
                )
            });
            // The thread never ends unnoticed: an error or a panic is the node's to act on.
            let reason = match std::panic::catch_unwind(run) {
                Ok(Ok(())) => return,
                Ok(Err(e)) => e.to_string(),
                Err(panic) => {
                    let reason = format!("controller thread panicked: {}", panic_text(&panic));
                    failed_tx.send_replace(Some(reason));
                    std::panic::resume_unwind(panic);
                }
            };
            tracing::error!(reason, "controller stopped");
            failed_tx.send_replace(Some(reason));
        })
        .map_err(|source| DurableError::Io {
            path: "controller thread".into(),
            source,
        })?;
    // The image is the log's before anything reads it (a voter that cannot even replay stops
    // at once; its channel then answers NOT_CONTROLLER).
    let _ = replayed.await;
    let stop = events.clone();
    let task = tokio::spawn(async move {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
        let _ = stop.send(Event::Shutdown);
        let joined = tokio::task::spawn_blocking(move || thread.join()).await;
        if let Ok(Err(panic)) = joined {
            std::panic::resume_unwind(panic);
        }
    });
    Ok((
        ControllerChannel {
            events,
            permits,
            state,
            forwarder,
            feed,
            peers_queued,
            failed,
            chunks,
        },
        task,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use crate::metadata::MetadataCache;

    struct Started {
        channel: ControllerChannel,
        cache: Arc<crate::metadata::MetadataCache>,
        shutdown: watch::Sender<bool>,
        task: JoinHandle<()>,
    }

    impl Started {
        async fn stop(self) {
            let _ = self.shutdown.send(true);
            self.task.await.unwrap();
        }
    }

    async fn start_in(dir: &std::path::Path) -> Started {
        start_with(dir, RawConfig::default()).await
    }

    async fn start_with(dir: &std::path::Path, raw: RawConfig) -> Started {
        let config = Arc::new(BrokerConfig::from_raw(raw).unwrap().config);
        let cache = Arc::new(MetadataCache::new(Default::default()));
        let (shutdown, rx) = watch::channel(false);
        let (channel, _, task) = start(
            dir,
            "cluster",
            config,
            cache.clone(),
            &QuorumPeers::single(1),
            rx,
        )
        .await
        .unwrap();
        Started {
            channel,
            cache,
            shutdown,
            task,
        }
    }

    fn registration() -> BrokerRegistration {
        registration_of(1)
    }

    fn registration_of(node_id: i32) -> BrokerRegistration {
        BrokerRegistration::new(node_id, random_uuid(), None).with_listener(
            "PLAINTEXT",
            "127.0.0.1",
            9092,
            crate::metadata::security_protocol::PLAINTEXT,
        )
    }

    fn spec(name: &str, partitions: i32) -> CreateTopicSpec {
        CreateTopicSpec {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn restart_replays_and_registration_bumps_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path()).await;
        assert_eq!(c.channel.register_broker(registration()).await.unwrap(), 0);
        let t = c.channel.create_topic(spec("t", 2), false).await.unwrap();
        assert_eq!(
            c.cache.image().topic("t").unwrap().id,
            t.id,
            "published before the answer"
        );
        c.channel
            .alter_topic_configs(
                "t".into(),
                vec![("retention.ms".into(), AlterConfigOp::Set, Some("10".into()))],
                false,
            )
            .await
            .unwrap();
        let block = c.channel.allocate_producer_ids(1).await.unwrap();
        c.stop().await;

        let c = start_in(dir.path()).await;
        let t = c.cache.image().topic("t").unwrap().clone();
        assert_eq!(t.configs["retention.ms"], "10");
        assert_eq!(t.partitions[&1].leader_epoch, 0);
        // The broker comes back: it leads its partitions again under a new epoch.
        assert_eq!(c.channel.register_broker(registration()).await.unwrap(), 2);
        let t = c.cache.image().topic("t").unwrap().clone();
        assert_eq!(t.partitions[&1].leader_epoch, 1);
        assert_eq!(t.partitions[&1].partition_epoch, 1);
        // Producer id blocks are never handed out twice, even across restarts.
        let next = c.channel.allocate_producer_ids(1).await.unwrap();
        assert!(
            next.first >= block.first + block.size,
            "{next:?} after {block:?}"
        );
        c.stop().await;
    }

    /// The controller thread runs the rebalancing pass by itself every check interval: a
    /// partition whose replicas a reassignment reordered goes to its new preferred replica.
    #[tokio::test]
    async fn the_controller_thread_rebalances_every_check_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mut raw = RawConfig::default();
        raw.apply_override("leader.imbalance.check.interval.ms=200")
            .unwrap();
        let c = start_with(dir.path(), raw).await;
        for id in 1..=3 {
            c.channel
                .register_broker(registration_of(id))
                .await
                .unwrap();
        }
        let spec = CreateTopicSpec {
            replication_factor: 3,
            ..spec("t", 3)
        };
        c.channel.create_topic(spec, false).await.unwrap();
        let before = c.cache.image().topic("t").unwrap().partitions[&0].clone();
        assert_eq!(before.leader, before.replicas[0]);
        let target = vec![before.replicas[1], before.replicas[0], before.replicas[2]];
        let results = c
            .channel
            .alter_partition_reassignments(
                vec![ReassignmentItem {
                    topic: "t".into(),
                    partition: 0,
                    replicas: Some(target.clone()),
                }],
                true,
            )
            .await
            .unwrap();
        assert!(results[0].result.is_ok(), "{results:?}");
        let reordered = c.cache.image().topic("t").unwrap().partitions[&0].clone();
        assert_eq!(reordered.replicas, target, "every replica is in the ISR");
        let started = std::time::Instant::now();
        loop {
            let now = c.cache.image().topic("t").unwrap().partitions[&0].clone();
            if now.leader == target[0] {
                assert!(now.leader_epoch > before.leader_epoch);
                break;
            }
            assert_eq!(
                now.leader, before.leader,
                "only the preferred replica takes over"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "no rebalancing pass within 5 s of a 200 ms interval"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        c.stop().await;
    }

    #[tokio::test]
    async fn requests_decided_together_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path()).await;
        c.channel.register_broker(registration()).await.unwrap();
        // Many concurrent creations of one name: the controller decides them in order, so
        // exactly one wins, whether or not they share a pass.
        let attempts: Vec<_> = (0..20)
            .map(|_| {
                let channel = c.channel.clone();
                tokio::spawn(async move { channel.create_topic(spec("same", 1), false).await })
            })
            .collect();
        let mut created = 0;
        for a in attempts {
            match a.await.unwrap() {
                Ok(_) => created += 1,
                Err(e) => assert_eq!(e.code(), 36, "{e}"),
            }
        }
        assert_eq!(created, 1);
        c.stop().await;
    }

    #[tokio::test]
    async fn a_stopped_controller_answers_not_controller() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path()).await;
        let channel = c.channel.clone();
        c.stop().await;
        assert_eq!(
            channel.create_topic(spec("t", 1), false).await.unwrap_err(),
            ApiError::NotController
        );
    }

    /// Durable state that fails every write once `fail` is set.
    struct Failing {
        inner: crate::quorum::durable::MemState,
        fail: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Failing {
        fn check(&self) -> Result<(), DurableError> {
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
                Err(DurableError::Io {
                    path: "test".into(),
                    source: std::io::Error::other("injected write failure"),
                })
            } else {
                Ok(())
            }
        }
    }

    impl Durable for Failing {
        fn recover(&mut self) -> Result<crate::quorum::durable::Recovered, DurableError> {
            self.inner.recover()
        }
        fn append(&mut self, entries: &[raft::eraftpb::Entry]) -> Result<(), DurableError> {
            self.check()?;
            self.inner.append(entries)
        }
        fn set_hard_state(&mut self, hs: &raft::eraftpb::HardState) -> Result<(), DurableError> {
            self.check()?;
            self.inner.set_hard_state(hs)
        }
        fn save_snapshot(
            &mut self,
            snapshot: &raft::eraftpb::Snapshot,
            keep_later: bool,
        ) -> Result<(), DurableError> {
            self.check()?;
            self.inner.save_snapshot(snapshot, keep_later)
        }
    }

    #[tokio::test]
    async fn a_failed_write_stops_the_controller_and_publishes_nothing() {
        let config = Arc::new(BrokerConfig::from_raw(RawConfig::default()).unwrap().config);
        let cache = Arc::new(MetadataCache::new(Default::default()));
        let publisher = Arc::new(MetadataPublisher::new(
            cache.clone(),
            MetadataImage::empty("c".into(), 1),
        ));
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let durable = Failing {
            inner: crate::quorum::durable::MemState::new(),
            fail: fail.clone(),
        };
        let (_shutdown, rx) = watch::channel(false);
        let (channel, task) = spawn(
            config,
            durable,
            publisher,
            "c",
            Vec::new(),
            &QuorumPeers::single(1),
            rx,
        )
        .await
        .unwrap();
        channel.register_broker(registration()).await.unwrap();
        fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let err = channel.create_topic(spec("t", 1), false).await.unwrap_err();
        // The entry may have reached peers before the local write failed: its outcome is
        // unknown, so the client is told it timed out, never that it succeeded.
        assert_eq!(err, ApiError::RequestTimedOut);
        assert!(
            cache.image().topic("t").is_none(),
            "nothing uncommitted is published"
        );
        // The controller stopped, and says so (the node halts on it).
        let reason = tokio::time::timeout(std::time::Duration::from_secs(5), channel.failed())
            .await
            .expect("the controller's failure is reported");
        assert!(reason.contains("cannot persist"), "{reason}");
        // Later requests are refused too, even with storage back.
        fail.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            channel.allocate_producer_ids(1).await.unwrap_err(),
            ApiError::NotController
        );
        drop(channel);
        task.abort();
    }

    #[tokio::test]
    async fn a_committed_entry_that_does_not_decode_stops_the_controller_with_a_reason() {
        // Entries are checked before they reach the log; one that got there anyway (a bug, a
        // disk) is reported as corruption, and the node stops on it, rather than panicking
        // the controller thread and running on without a controller.
        let config = Arc::new(BrokerConfig::from_raw(RawConfig::default()).unwrap().config);
        let cache = Arc::new(MetadataCache::new(Default::default()));
        let publisher = Arc::new(MetadataPublisher::new(
            cache,
            MetadataImage::empty("c".into(), 1),
        ));
        let mut durable = crate::quorum::durable::MemState::new();
        let garbage = raft::eraftpb::Entry {
            index: 1,
            term: 1,
            data: vec![0xff; 16].into(),
            ..Default::default()
        };
        durable.append(&[garbage]).unwrap();
        let mut hs = raft::eraftpb::HardState::default();
        hs.term = 1;
        hs.commit = 1;
        durable.set_hard_state(&hs).unwrap();
        let (_shutdown, rx) = watch::channel(false);
        let (channel, task) = spawn(
            config,
            durable,
            publisher,
            "c",
            Vec::new(),
            &QuorumPeers::single(1),
            rx,
        )
        .await
        .unwrap();
        let reason = tokio::time::timeout(std::time::Duration::from_secs(5), channel.failed())
            .await
            .expect("the controller's failure is reported");
        assert!(reason.contains("offset 1 does not decode"), "{reason}");
        drop(channel);
        task.abort();
    }

    #[tokio::test]
    async fn snapshots_bound_the_log_and_restore_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path()).await;
        c.channel.register_broker(registration()).await.unwrap();
        let n = crate::limits::METADATA_SNAPSHOT_ENTRIES + 10;
        for i in 0..n {
            c.channel
                .create_topic(spec(&format!("t{i}"), 1), false)
                .await
                .unwrap();
        }
        let before = c.cache.image();
        c.stop().await;
        let quorum = dir.path().join(QUORUM_DIR);
        assert!(quorum.join("snapshot").exists(), "a snapshot was taken");
        // The log holds only what came after the snapshot.
        let log_bytes = std::fs::metadata(quorum.join("raft.log")).unwrap().len();
        assert!(log_bytes < 64 * 1024, "raft.log is {log_bytes} bytes");
        let c = start_in(dir.path()).await;
        let after = c.cache.image();
        assert_eq!(after.topics.len(), n);
        assert_eq!(after.brokers, before.brokers);
        for (name, t) in &before.topics {
            assert_eq!(after.topics[name].partitions, t.partitions, "{name}");
            assert_eq!(after.topics[name].id, t.id, "{name}");
        }
        c.stop().await;
    }

    #[test]
    fn cluster_ids_have_kafkas_shape() {
        let id = new_cluster_id();
        assert_eq!(id.len(), 22);
        assert_ne!(id, new_cluster_id());
    }
}
