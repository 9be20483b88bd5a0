//! The transaction coordinator's async shell (Kafka's `TransactionCoordinator` with its
//! `TransactionStateManager` and `TransactionMarkerChannelManager`): it owns the state of the
//! transactional ids whose `__transaction_state` partitions this node leads, writes every
//! change there before it takes effect, and sends the markers that end transactions.
//!
//! - **Writes**: a decision ([`TxnMetadata`]'s methods) is made and appended under the lock, so
//!   the log order is the decision order; the id stays *pending* (others get
//!   CONCURRENT_TRANSACTIONS) until the high watermark covers the record, when the change takes
//!   effect and the client is answered. A failed append changes nothing. A write whose
//!   replication outlasts `WRITE_WAIT` answers COORDINATOR_NOT_AVAILABLE (the client retries)
//!   but stays pending until it is durable or this node stops leading the partition, so the
//!   state never runs ahead of, or behind, the log.
//! - **Markers**: once PrepareCommit or PrepareAbort is durable, the client is answered and a
//!   task writes the marker to every partition of the transaction (locally or by
//!   WriteTxnMarkers to its leader), retrying until each is written, its topic is gone, or this
//!   node stops coordinating; then it writes CompleteCommit or CompleteAbort.
//! - **Loading**: leading a `__transaction_state` partition replays it; its ids answer
//!   COORDINATOR_LOAD_IN_PROGRESS meanwhile. Transactions found prepared have their markers
//!   sent again. Losing the leadership drops the partition's ids (NOT_COORDINATOR).
//! - **Timeouts**: every `transaction.abort.timed.out.transaction.cleanup.interval.ms`, ongoing
//!   transactions past their timeout are aborted with a bumped epoch, which fences their
//!   producer. Every `transaction.remove.expired.transaction.cleanup.interval.ms`, ids idle past
//!   `transactional.id.expiration.ms` are removed with a tombstone.
//!
//! Lock order: the coordinator lock is taken after the controller's (metadata listeners) and
//! before a partition's (appends); it is never held across an await.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::records::RecordBatchDecoder;
use kafkaiq_storage::TopicPartition;
use tokio::sync::watch;

use super::records::{decode_key, decode_value, encode_key, encode_value};
use super::state::{
    EndTxnBy, InitDecision, Transit, TxnMetadata, TxnPartition, TxnResult, TxnState,
    TRANSACTION_VERSION_2,
};
use super::TRANSACTION_STATE_TOPIC_NAME;
use crate::client::{Client, ClientConfig, Endpoint, RequestOptions};
use crate::clock::SharedClock;
use crate::config::{BrokerConfig, TransactionSettings};
use crate::controller::{ControllerChannel, CreateTopicSpec};
use crate::errors::ApiError;
use crate::group::log::{CoordinatorLog, Durability, ReplicaLog};
use crate::group::service::GroupService;
use crate::group::{CoordinatorRecord, OFFSETS_TOPIC_NAME};
use crate::metadata::{ImageListener, MetadataCache, MetadataImage};
use crate::producer_ids::ProducerIdManager;
use crate::replica::ReplicaManager;

/// How long a client waits for its write to become durable before it is answered
/// COORDINATOR_NOT_AVAILABLE (Kafka's coordinator appends with `request.timeout.ms`, 30 s).
const WRITE_WAIT: Duration = Duration::from_secs(30);
/// How long one marker write waits for replication before it is retried.
const MARKER_WAIT: Duration = Duration::from_secs(30);
/// First and largest pause between rounds of marker retries.
const MARKER_BACKOFF_MIN: Duration = Duration::from_millis(20);
const MARKER_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Pause before a failed load of a `__transaction_state` partition is tried again.
const LOAD_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How long a partition leader waits for the coordinator's answer to a verification.
const VERIFY_WAIT: Duration = Duration::from_secs(10);
/// The first Produce version of transaction version 2: its partitions join the producer's
/// transaction through the leader (Kafka's `addPartition` supported operation).
const PRODUCE_ADDS_PARTITIONS: i16 = 12;
/// Bytes read per step while loading a `__transaction_state` partition.
const LOAD_READ_BYTES: usize = 1024 * 1024;

/// The ids of one `__transaction_state` partition this node leads.
struct Shard {
    /// The partition's leader epoch: the coordinator epoch its markers carry.
    epoch: i32,
    loaded: bool,
    txns: HashMap<String, TxnMetadata>,
    /// Ids whose markers a task is delivering now.
    delivering: HashSet<String>,
}

#[derive(Default)]
struct Inner {
    shards: HashMap<i32, Shard>,
}

/// A write appended and pending on its id.
struct Write {
    partition: i32,
    epoch: i32,
    txn_id: String,
    /// None: a tombstone removing the id.
    transit: Option<Transit>,
    durable_at: i64,
}

/// One transaction's markers to send.
#[derive(Debug, Clone)]
struct Markers {
    txn_id: String,
    partition: i32,
    coordinator_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    result: TxnResult,
    partitions: BTreeSet<TxnPartition>,
}

/// A transactional id as DescribeTransactions and ListTransactions show it.
#[derive(Debug, Clone)]
pub struct TxnView {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub partitions: BTreeSet<TxnPartition>,
}

pub struct TxnService {
    inner: Mutex<Inner>,
    log: Arc<dyn CoordinatorLog>,
    replicas: Arc<ReplicaManager>,
    controller: ControllerChannel,
    cache: Arc<MetadataCache>,
    producer_ids: Arc<ProducerIdManager>,
    /// The group coordinator, told when a marker ends a transaction's offset commits.
    groups: Arc<GroupService>,
    clock: SharedClock,
    node_id: i32,
    settings: TransactionSettings,
    replication_factor: i16,
    /// WriteTxnMarkers to other partition leaders, on the inter-broker listener.
    markers_client: Client,
    load_stats: crate::metrics::CoordinatorLoadStats,
    me: Weak<TxnService>,
}

impl std::fmt::Debug for TxnService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnService")
            .field("node_id", &self.node_id)
            .finish()
    }
}

/// The coordinator's answer to a failed append (Kafka's `appendTransactionToLog` callback).
fn append_error(e: ApiError) -> ApiError {
    match e.kind() {
        ApiError::NotLeaderOrFollower | ApiError::KafkaStorageError(_) => ApiError::NotCoordinator,
        ApiError::UnknownTopicOrPartition
        | ApiError::NotEnoughReplicas
        | ApiError::NotEnoughReplicasAfterAppend
        | ApiError::RequestTimedOut => ApiError::CoordinatorNotAvailable,
        _ => ApiError::UnknownServerError(format!("writing {TRANSACTION_STATE_TOPIC_NAME}: {e}")),
    }
}

impl TxnService {
    pub fn new(
        config: &BrokerConfig,
        replicas: Arc<ReplicaManager>,
        controller: ControllerChannel,
        cache: Arc<MetadataCache>,
        producer_ids: Arc<ProducerIdManager>,
        groups: Arc<GroupService>,
        clock: SharedClock,
    ) -> Arc<TxnService> {
        let log = Arc::new(ReplicaLog::of_topic(
            replicas.clone(),
            cache.clone(),
            TRANSACTION_STATE_TOPIC_NAME,
        ));
        let brokers = replicas.brokers.clone();
        let listener = config.kraft.inter_broker_listener_name.clone();
        let resolver = Arc::new(move |node: i32| {
            let snapshot = brokers.get();
            let endpoint = snapshot.broker(node)?.endpoint(&listener)?;
            Some(Endpoint::new(endpoint.host.clone(), endpoint.port))
        });
        let markers_client = Client::new(
            ClientConfig {
                client_id: format!("broker-{}-txn-marker-sender", config.node_id),
                security: config.inter_broker_client.clone(),
                ..ClientConfig::default()
            },
            Some(resolver),
        );
        let configured = config.transactions.log_replication_factor;
        let replication_factor = if config.kraft.voter_ids().len() <= 1 {
            configured.min(1)
        } else {
            configured
        };
        Arc::new_cyclic(|me| TxnService {
            inner: Mutex::new(Inner::default()),
            log,
            replicas,
            controller,
            cache,
            producer_ids,
            groups,
            clock,
            node_id: config.node_id,
            settings: config.transactions.clone(),
            replication_factor,
            markers_client,
            load_stats: Default::default(),
            me: me.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arc(&self) -> Option<Arc<TxnService>> {
        self.me.upgrade()
    }

    /// The `__transaction_state` partition of a transactional id.
    pub fn partition_for(&self, txn_id: &str) -> i32 {
        crate::group::partition_for(txn_id, self.settings.log_num_partitions)
    }

    pub fn max_timeout_ms(&self) -> i32 {
        self.settings.max_timeout_ms
    }

    /// Makes sure `__transaction_state` exists (created on first use, like Kafka) and returns
    /// the image that has it.
    pub async fn ensure_topic(&self) -> Result<Arc<MetadataImage>, ApiError> {
        let image = self.cache.image();
        if image.topic(TRANSACTION_STATE_TOPIC_NAME).is_some() {
            return Ok(image);
        }
        let spec = CreateTopicSpec {
            name: TRANSACTION_STATE_TOPIC_NAME.to_owned(),
            num_partitions: self.settings.log_num_partitions,
            replication_factor: self.replication_factor,
            assignments: Vec::new(),
            configs: vec![
                ("cleanup.policy".into(), Some("compact".into())),
                ("compression.type".into(), Some("uncompressed".into())),
                (
                    "min.insync.replicas".into(),
                    Some(self.settings.log_min_isr.to_string()),
                ),
                (
                    "segment.bytes".into(),
                    Some(self.settings.log_segment_bytes.to_string()),
                ),
                (
                    "unclean.leader.election.enable".into(),
                    Some("false".into()),
                ),
            ],
        };
        match self.controller.ensure_topic(spec, None).await {
            Ok(_) | Err(ApiError::TopicAlreadyExists(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(self.cache.image())
    }

    fn shard_mut(inner: &mut Inner, partition: i32) -> Result<&mut Shard, ApiError> {
        match inner.shards.get_mut(&partition) {
            None => Err(ApiError::NotCoordinator),
            Some(s) if !s.loaded => Err(ApiError::CoordinatorLoadInProgress),
            Some(s) => Ok(s),
        }
    }

    /// Appends `transit` for `txn_id` (pending on it already); a failed append abandons it.
    fn append_locked(
        &self,
        shard: &mut Shard,
        partition: i32,
        txn_id: &str,
        transit: Option<Transit>,
        now_ms: i64,
    ) -> Result<Write, ApiError> {
        let record = CoordinatorRecord {
            partition,
            key: encode_key(txn_id),
            value: transit.as_ref().map(|t| encode_value(&t.log_value())),
        };
        match self.log.append(partition, &[record], now_ms) {
            Ok(durable_at) => Ok(Write {
                partition,
                epoch: shard.epoch,
                txn_id: txn_id.to_owned(),
                transit,
                durable_at,
            }),
            Err(e) => {
                if let Some(m) = shard.txns.get_mut(txn_id) {
                    m.abandon();
                }
                Err(append_error(e))
            }
        }
    }

    /// Waits until `w` is durable and applies it; see the module's "Writes".
    async fn settle(&self, w: Write) -> Result<Option<Transit>, ApiError> {
        let Some(me) = self.arc() else {
            return Err(ApiError::CoordinatorNotAvailable);
        };
        let task = tokio::spawn(async move {
            let durable = loop {
                match me
                    .log
                    .wait_for_high_watermark(w.partition, w.durable_at, WRITE_WAIT)
                    .await
                {
                    Durability::Durable => break true,
                    Durability::NotLeader => break false,
                    Durability::Unknown => continue,
                }
            };
            let mut inner = me.lock();
            let Some(shard) = inner.shards.get_mut(&w.partition) else {
                return Err(ApiError::NotCoordinator);
            };
            if shard.epoch != w.epoch {
                return Err(ApiError::NotCoordinator);
            }
            if !durable {
                if let Some(m) = shard.txns.get_mut(&w.txn_id) {
                    m.abandon();
                }
                return Err(ApiError::NotCoordinator);
            }
            match &w.transit {
                Some(t) => {
                    if let Some(m) = shard.txns.get_mut(&w.txn_id) {
                        m.complete(t);
                    }
                    // A durable PrepareCommit or PrepareAbort is a promise to write the
                    // markers, kept here whatever became of the caller that waited for it (it
                    // may have timed out), as Kafka's markers follow the append's callback.
                    if let Some(result) = prepared_result(t.state) {
                        let markers = Markers {
                            txn_id: w.txn_id.clone(),
                            partition: w.partition,
                            coordinator_epoch: w.epoch,
                            producer_id: t.producer_id,
                            producer_epoch: t.producer_epoch,
                            result,
                            partitions: t.partitions.clone(),
                        };
                        me.send_markers_locked(shard, markers);
                    }
                }
                None => {
                    shard.txns.remove(&w.txn_id);
                }
            }
            Ok(w.transit)
        });
        match tokio::time::timeout(WRITE_WAIT, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(ApiError::UnknownServerError(join.to_string())),
            Err(_) => Err(ApiError::CoordinatorNotAvailable),
        }
    }

    /// InitProducerId with a transactional id: the producer id and epoch to use.
    pub async fn init_producer_id(
        &self,
        txn_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ApiError> {
        if txn_id.is_empty() {
            return Err(ApiError::InvalidRequest(
                "the transactional id is empty".into(),
            ));
        }
        if timeout_ms <= 0 || timeout_ms > self.settings.max_timeout_ms {
            return Err(ApiError::InvalidTransactionTimeout);
        }
        let partition = self.partition_for(txn_id);
        let mut fresh: Option<i64> = None;
        loop {
            enum Step {
                NeedId,
                Init(Write),
                Fence(Write),
            }
            let step = {
                let now = self.clock.now_ms();
                let mut inner = self.lock();
                let shard = Self::shard_mut(&mut inner, partition)?;
                let known = if !shard.txns.contains_key(txn_id) {
                    match fresh.take() {
                        Some(id) => {
                            shard.txns.insert(
                                txn_id.to_owned(),
                                TxnMetadata::new(txn_id, id, timeout_ms, now),
                            );
                            Some(())
                        }
                        None => None,
                    }
                } else {
                    Some(())
                };
                match known {
                    None => Step::NeedId,
                    Some(()) => {
                        let meta = shard.txns.get_mut(txn_id).expect("present");
                        match meta.init_producer_id(timeout_ms, expected, fresh.take(), now)? {
                            InitDecision::NeedProducerId => Step::NeedId,
                            InitDecision::Write(t) => Step::Init(self.append_locked(
                                shard,
                                partition,
                                txn_id,
                                Some(t),
                                now,
                            )?),
                            InitDecision::FenceAndAbort(fence) => {
                                let abort = meta
                                    .end_transaction(
                                        fence.producer_id,
                                        fence.producer_epoch,
                                        TxnResult::Abort,
                                        EndTxnBy::Coordinator,
                                        now,
                                    )?
                                    .expect("an ongoing transaction is aborted with a write");
                                Step::Fence(self.append_locked(
                                    shard,
                                    partition,
                                    txn_id,
                                    Some(abort),
                                    now,
                                )?)
                            }
                        }
                    }
                }
            };
            match step {
                Step::NeedId => {
                    fresh = Some(self.producer_ids.next_id(&self.controller).await?);
                }
                Step::Init(w) => {
                    let t = self.settle(w).await?.expect("not a tombstone");
                    tracing::info!(
                        transactional_id = txn_id,
                        producer_id = t.producer_id,
                        producer_epoch = t.producer_epoch,
                        partition,
                        "initialized transactional id"
                    );
                    return Ok((t.producer_id, t.producer_epoch));
                }
                Step::Fence(w) => {
                    self.settle(w).await?;
                    return Err(ApiError::ConcurrentTransactions);
                }
            }
        }
    }

    /// AddPartitionsToTxn (v0-3, and v4+ without `verify_only`) and AddOffsetsToTxn, speaking
    /// `transaction_version` (see [`TxnMetadata::add_partitions`]).
    pub async fn add_partitions(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: BTreeSet<TxnPartition>,
        transaction_version: i16,
    ) -> Result<(), ApiError> {
        if txn_id.is_empty() {
            return Err(ApiError::InvalidRequest(
                "the transactional id is empty".into(),
            ));
        }
        let partition = self.partition_for(txn_id);
        let w = {
            let now = self.clock.now_ms();
            let mut inner = self.lock();
            let shard = Self::shard_mut(&mut inner, partition)?;
            let meta = shard
                .txns
                .get_mut(txn_id)
                .ok_or(ApiError::InvalidProducerIdMapping)?;
            match meta.add_partitions(
                producer_id,
                producer_epoch,
                &partitions,
                transaction_version,
                now,
            )? {
                None => return Ok(()),
                Some(t) => self.append_locked(shard, partition, txn_id, Some(t), now)?,
            }
        };
        self.settle(w).await.map(|_| ())
    }

    /// KIP-890's check that a transactional produce's partition was added to its transaction.
    /// `Ok(None)`: this node does not coordinate the id, the caller asks its coordinator.
    pub fn verify_partition(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partition: &TxnPartition,
    ) -> Result<(), ApiError> {
        let p = self.partition_for(txn_id);
        let mut inner = self.lock();
        let shard = Self::shard_mut(&mut inner, p)?;
        shard
            .txns
            .get(txn_id)
            .ok_or(ApiError::InvalidProducerIdMapping)?
            .verify_partition(producer_id, producer_epoch, partition)
    }

    /// Whether a partition leader asks the coordinator before a transactional produce of
    /// `produce_version` opens a transaction on a partition: with
    /// `transaction.partition.verification.enable`, and always for transaction version 2,
    /// whose partitions join the transaction only that way.
    pub fn checks_produce(&self, produce_version: i16) -> bool {
        self.settings.partition_verification || produce_version >= PRODUCE_ADDS_PARTITIONS
    }

    /// KIP-890's check of a transactional produce to `partitions`, as their leader makes it
    /// before a batch opens the producer's transaction there: here when this node coordinates
    /// the id, else by asking the coordinator (AddPartitionsToTxn v4+, as Kafka's
    /// `AddPartitionsToTxnManager`). Produce v12+ comes from a client of transaction version 2,
    /// which adds no partitions itself: the partitions join the transaction here (part 2 of
    /// KIP-890). Older versions only verify that they were added (`verify_only`, part 1).
    /// One answer per partition, as Kafka's leader gives them to the producer:
    /// - a partition not in the transaction: TRANSACTION_ABORTABLE for clients that know it
    ///   (Produce v11+), INVALID_TXN_STATE for older ones;
    /// - a fenced producer: INVALID_PRODUCER_EPOCH;
    /// - an answer that may change (the coordinator moving, loading or ending the transaction,
    ///   or not reached): NOT_ENOUGH_REPLICAS, which every producer retries without a
    ///   metadata refresh;
    /// - a coordinator too old to verify (no v4): no check, as Kafka.
    pub async fn verify_produce(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        produce_version: i16,
    ) -> HashMap<TopicPartition, Result<(), ApiError>> {
        let add = produce_version >= PRODUCE_ADDS_PARTITIONS;
        let answers = self
            .join_or_verify(txn_id, producer_id, producer_epoch, partitions, add)
            .await;
        partitions
            .iter()
            .cloned()
            .zip(answers)
            .map(|(tp, answer)| {
                let answer = answer.map_err(|e| match e.kind() {
                    ApiError::TransactionAbortable if produce_version < 11 => {
                        ApiError::InvalidTxnState(format!(
                            "partition {tp} is not in the transaction of producer {producer_id}"
                        ))
                    }
                    ApiError::ProducerFenced => ApiError::InvalidProducerEpoch(format!(
                        "producer {producer_id} at epoch {producer_epoch} is fenced"
                    )),
                    ApiError::ConcurrentTransactions
                    | ApiError::CoordinatorLoadInProgress
                    | ApiError::CoordinatorNotAvailable
                    | ApiError::NotCoordinator
                    | ApiError::RequestTimedOut => ApiError::NotEnoughReplicas,
                    _ => e,
                });
                (tp, answer)
            })
            .collect()
    }

    /// TxnOffsetCommit v5+ comes from a client of transaction version 2, which sends no
    /// AddOffsetsToTxn: the group's offsets partition joins the transaction here before the
    /// group coordinator writes the offsets (Kafka's group coordinator does the same through
    /// its transactional write). Retriable answers are COORDINATOR_NOT_AVAILABLE, which the
    /// producer answers by finding the group coordinator again and retrying.
    pub async fn join_offsets_partition(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        offsets_partition: i32,
    ) -> Result<(), ApiError> {
        let tp = TopicPartition {
            topic: OFFSETS_TOPIC_NAME.to_owned(),
            partition: offsets_partition,
        };
        let answer = self
            .join_or_verify(txn_id, producer_id, producer_epoch, &[tp], true)
            .await
            .pop()
            .unwrap_or(Err(ApiError::CoordinatorNotAvailable));
        answer.map_err(|e| match e.kind() {
            ApiError::ConcurrentTransactions
            | ApiError::CoordinatorLoadInProgress
            | ApiError::NotCoordinator
            | ApiError::RequestTimedOut
            | ApiError::NotEnoughReplicas => ApiError::CoordinatorNotAvailable,
            _ => e,
        })
    }

    /// Adds `partitions` to the transaction (`add`) or verifies that they are in it, here or
    /// at the id's coordinator: one answer per partition, in order.
    async fn join_or_verify(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        add: bool,
    ) -> Vec<Result<(), ApiError>> {
        if !self.coordinates(txn_id) {
            return self
                .ask_coordinator(txn_id, producer_id, producer_epoch, partitions, add)
                .await;
        }
        if add {
            let set = partitions
                .iter()
                .map(|tp| (tp.topic.clone(), tp.partition))
                .collect();
            let answer = self
                .add_partitions(
                    txn_id,
                    producer_id,
                    producer_epoch,
                    set,
                    TRANSACTION_VERSION_2,
                )
                .await;
            return partitions.iter().map(|_| answer.clone()).collect();
        }
        partitions
            .iter()
            .map(|tp| {
                let p = (tp.topic.clone(), tp.partition);
                self.verify_partition(txn_id, producer_id, producer_epoch, &p)
            })
            .collect()
    }

    /// AddPartitionsToTxn v4+ to the coordinator of `txn_id`, adding the partitions (`add`) or
    /// with `verify_only`: one answer per partition, in order (the coordinator's codes;
    /// CLUSTER_AUTHORIZATION_FAILED, which the producer must not see, as INVALID_TXN_STATE).
    async fn ask_coordinator(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[TopicPartition],
        add: bool,
    ) -> Vec<Result<(), ApiError>> {
        use kafka_protocol::messages::add_partitions_to_txn_request::{
            AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
        };
        use kafka_protocol::messages::{AddPartitionsToTxnRequest, TransactionalId};
        use kafka_protocol::protocol::StrBytes;
        let all = |e: ApiError| partitions.iter().map(|_| Err(e.clone())).collect();
        let coordinator = self
            .cache
            .image()
            .topic(TRANSACTION_STATE_TOPIC_NAME)
            .and_then(|t| t.partitions.get(&self.partition_for(txn_id)))
            .map(|reg| reg.leader)
            .filter(|&leader| leader >= 0);
        let Some(coordinator) = coordinator else {
            return all(ApiError::CoordinatorNotAvailable);
        };
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            topics.entry(&tp.topic).or_default().push(tp.partition);
        }
        let transaction = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(txn_id.to_owned())))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(producer_epoch)
            .with_verify_only(!add)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let request = AddPartitionsToTxnRequest::default().with_transactions(vec![transaction]);
        let options = RequestOptions::default()
            .timeout(VERIFY_WAIT)
            .versions(4, 5);
        let response = match self
            .markers_client
            .send_with(coordinator, options, move |_| request)
            .await
        {
            Ok(r) => r.body,
            Err(crate::client::ClientError::NoCommonVersion { .. }) if add => {
                return all(ApiError::UnknownServerError(
                    "the transaction coordinator cannot add partitions for their leader".into(),
                ));
            }
            Err(crate::client::ClientError::NoCommonVersion { .. }) => {
                tracing::warn!(coordinator, "the transaction coordinator cannot verify partitions (no AddPartitionsToTxn v4); producing unverified");
                return partitions.iter().map(|_| Ok(())).collect();
            }
            Err(e) => {
                tracing::debug!(coordinator, error = %e, "AddPartitionsToTxn verification failed");
                return all(ApiError::CoordinatorNotAvailable);
            }
        };
        if let Some(e) = ApiError::from_code(response.error_code) {
            return all(match e {
                ApiError::ClusterAuthorizationFailed => ApiError::InvalidTxnState(
                    "the partition leader may not ask the transaction coordinator".into(),
                ),
                e => e,
            });
        }
        let mut codes: HashMap<(String, i32), i16> = HashMap::new();
        for txn in response.results_by_transaction {
            for topic in txn.topic_results {
                for p in topic.results_by_partition {
                    codes.insert(
                        (topic.name.0.to_string(), p.partition_index),
                        p.partition_error_code,
                    );
                }
            }
        }
        partitions
            .iter()
            .map(|tp| {
                match codes.get(&(tp.topic.clone(), tp.partition)) {
                    Some(&code) => ApiError::from_code(code).map_or(Ok(()), Err),
                    // The coordinator said nothing of it: not verified.
                    None => Err(ApiError::CoordinatorNotAvailable),
                }
            })
            .collect()
    }

    /// Whether this node coordinates `txn_id` (its partition is led and loaded here).
    pub fn coordinates(&self, txn_id: &str) -> bool {
        let p = self.partition_for(txn_id);
        self.lock().shards.get(&p).is_some_and(|s| s.loaded)
    }

    /// EndTxn, speaking `transaction_version` (2 from EndTxn v5): the producer id and epoch
    /// the client continues with.
    pub async fn end_transaction(
        &self,
        txn_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        result: TxnResult,
        transaction_version: i16,
    ) -> Result<(i64, i16), ApiError> {
        if txn_id.is_empty() {
            return Err(ApiError::InvalidRequest(
                "the transactional id is empty".into(),
            ));
        }
        let partition = self.partition_for(txn_id);
        let mut next_producer_id = None;
        let w = loop {
            let now = self.clock.now_ms();
            let needs_id = {
                let mut inner = self.lock();
                let shard = Self::shard_mut(&mut inner, partition)?;
                let meta = shard
                    .txns
                    .get_mut(txn_id)
                    .ok_or(ApiError::InvalidProducerIdMapping)?;
                if next_producer_id.is_none()
                    && meta.end_needs_producer_id(producer_epoch, result, transaction_version)
                {
                    true
                } else {
                    let by = EndTxnBy::Client {
                        transaction_version,
                        next_producer_id,
                    };
                    match meta.end_transaction(producer_id, producer_epoch, result, by, now)? {
                        None => return Ok((meta.producer_id, meta.producer_epoch)),
                        Some(t) => {
                            break self.append_locked(shard, partition, txn_id, Some(t), now)?
                        }
                    }
                }
            };
            if needs_id {
                next_producer_id = Some(self.producer_ids.next_id(&self.controller).await?);
            }
        };
        let t = self.settle(w).await?.expect("not a tombstone");
        Ok(t.continues_as())
    }

    /// Starts the delivery of `markers` unless one runs for the id already (`shard` is the
    /// id's, under the coordinator lock).
    fn send_markers_locked(&self, shard: &mut Shard, markers: Markers) {
        let Some(me) = self.arc() else { return };
        if !shard.delivering.insert(markers.txn_id.clone()) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move {
                    let (partition, epoch, id) = (
                        markers.partition,
                        markers.coordinator_epoch,
                        markers.txn_id.clone(),
                    );
                    me.clone().deliver_markers(markers).await;
                    if let Some(s) = me
                        .lock()
                        .shards
                        .get_mut(&partition)
                        .filter(|s| s.epoch == epoch)
                    {
                        s.delivering.remove(&id);
                    }
                });
            }
            Err(_) => {
                shard.delivering.remove(&markers.txn_id);
                tracing::warn!(transactional_id = %markers.txn_id, "no runtime to send transaction markers")
            }
        }
    }

    /// Starts the markers of every prepared transaction of the shard that has no delivery
    /// running: after a load, and on each timeout check as a safety net (a delivery that
    /// stopped, fenced by a partition, is tried again there).
    fn resend_prepared_locked(&self, shard: &mut Shard, partition: i32) {
        if !shard.loaded {
            return;
        }
        let prepared: Vec<Markers> = shard
            .txns
            .values()
            .filter(|t| t.pending.is_none() && !shard.delivering.contains(&t.transactional_id))
            .filter_map(|t| {
                Some(Markers {
                    txn_id: t.transactional_id.clone(),
                    partition,
                    coordinator_epoch: shard.epoch,
                    producer_id: t.producer_id,
                    producer_epoch: t.producer_epoch,
                    result: prepared_result(t.state)?,
                    partitions: t.partitions.clone(),
                })
            })
            .collect();
        for m in prepared {
            self.send_markers_locked(shard, m);
        }
    }

    /// Whether `m`'s transaction is still prepared here, in the same coordinator epoch.
    fn still_prepared(&self, m: &Markers) -> bool {
        let inner = self.lock();
        inner
            .shards
            .get(&m.partition)
            .filter(|s| s.epoch == m.coordinator_epoch)
            .and_then(|s| s.txns.get(&m.txn_id))
            .is_some_and(|t| {
                t.producer_id == m.producer_id
                    && matches!(t.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            })
    }

    async fn deliver_markers(self: Arc<Self>, m: Markers) {
        let mut remaining = m.partitions.clone();
        let mut backoff = MARKER_BACKOFF_MIN;
        while !remaining.is_empty() {
            if !self.still_prepared(&m) {
                return;
            }
            let image = self.cache.image();
            let mut by_leader: BTreeMap<i32, Vec<TxnPartition>> = BTreeMap::new();
            for tp in remaining.clone() {
                let reg = image
                    .topic(&tp.0)
                    .map(|t| t.partitions.get(&tp.1).map(|r| r.leader));
                match reg {
                    // The topic or partition is gone: nothing to mark.
                    None | Some(None) => {
                        remaining.remove(&tp);
                    }
                    Some(Some(leader)) if leader >= 0 => {
                        by_leader.entry(leader).or_default().push(tp)
                    }
                    Some(Some(_)) => {}
                }
            }
            for (leader, tps) in by_leader {
                let outcomes = if leader == self.node_id {
                    let tps_owned: Vec<TopicPartition> = tps
                        .iter()
                        .map(|(t, p)| TopicPartition::new(t, *p))
                        .collect();
                    let outcomes = self
                        .replicas
                        .write_txn_markers(
                            &image,
                            m.producer_id,
                            m.producer_epoch,
                            m.result == TxnResult::Commit,
                            m.coordinator_epoch,
                            &tps_owned,
                            self.clock.now_ms(),
                            MARKER_WAIT,
                        )
                        .await;
                    for (tp, outcome) in tps_owned.iter().zip(&outcomes) {
                        if outcome.is_ok() && tp.topic == OFFSETS_TOPIC_NAME {
                            self.groups.complete_transaction(
                                tp.partition,
                                m.producer_id,
                                m.result == TxnResult::Commit,
                            );
                        }
                    }
                    outcomes
                } else {
                    self.write_markers_remotely(leader, &m, &tps).await
                };
                for (tp, outcome) in tps.into_iter().zip(outcomes) {
                    match outcome {
                        Ok(()) => {
                            remaining.remove(&tp);
                        }
                        Err(e)
                            if matches!(
                                e.kind(),
                                ApiError::InvalidProducerEpoch(_)
                                    | ApiError::TransactionCoordinatorFenced(_)
                            ) =>
                        {
                            // A newer producer epoch or coordinator already wrote there: this
                            // coordinator's transaction is no longer the partition's (Kafka
                            // stops sending, as its `TransactionMarkerRequestCompletionHandler`).
                            tracing::warn!(transactional_id = %m.txn_id, topic = %tp.0, partition = tp.1, error = %e, "transaction marker fenced; not completing the transaction");
                            return;
                        }
                        Err(e) => {
                            tracing::debug!(transactional_id = %m.txn_id, topic = %tp.0, partition = tp.1, error = %e, "transaction marker not written; retrying");
                        }
                    }
                }
            }
            if !remaining.is_empty() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MARKER_BACKOFF_MAX);
            }
        }
        // Every marker is written: complete the transaction.
        loop {
            let w = {
                let now = self.clock.now_ms();
                let mut inner = self.lock();
                let Some(shard) = inner
                    .shards
                    .get_mut(&m.partition)
                    .filter(|s| s.epoch == m.coordinator_epoch)
                else {
                    return;
                };
                let Some(meta) = shard.txns.get_mut(&m.txn_id) else {
                    return;
                };
                let Some(t) = meta.complete_transaction(now) else {
                    return;
                };
                self.append_locked(shard, m.partition, &m.txn_id, Some(t), now)
            };
            let w = match w {
                Ok(w) => w,
                Err(ApiError::NotCoordinator) => return,
                Err(e) => {
                    tracing::warn!(transactional_id = %m.txn_id, error = %e, "cannot write the transaction's completion; retrying");
                    tokio::time::sleep(backoff).await;
                    continue;
                }
            };
            match self.settle(w).await {
                Ok(_) | Err(ApiError::NotCoordinator) => return,
                Err(_) => tokio::time::sleep(backoff).await,
            }
        }
    }

    /// WriteTxnMarkers to `leader` for `tps`: one outcome per partition, in order.
    async fn write_markers_remotely(
        &self,
        leader: i32,
        m: &Markers,
        tps: &[TxnPartition],
    ) -> Vec<Result<(), ApiError>> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in tps {
            topics.entry(t).or_default().push(*p);
        }
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(m.producer_id))
                .with_producer_epoch(m.producer_epoch)
                .with_transaction_result(m.result == TxnResult::Commit)
                .with_coordinator_epoch(m.coordinator_epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(
                                    kafka_protocol::protocol::StrBytes::from_string(t.to_owned()),
                                ))
                                .with_partition_indexes(ps)
                        })
                        .collect(),
                )]);
        let options = RequestOptions::default().timeout(MARKER_WAIT + Duration::from_secs(5));
        let response = self
            .markers_client
            .send_with(leader, options, move |_| request)
            .await;
        let mut errors: HashMap<(String, i32), i16> = HashMap::new();
        match response {
            Ok(r) => {
                for marker in r.body.markers {
                    for topic in marker.topics {
                        for p in topic.partitions {
                            errors.insert(
                                (topic.name.0.to_string(), p.partition_index),
                                p.error_code,
                            );
                        }
                    }
                }
            }
            Err(e) => {
                tracing::debug!(leader, error = %e, "WriteTxnMarkers failed");
                return tps.iter().map(|_| Err(ApiError::RequestTimedOut)).collect();
            }
        }
        tps.iter()
            .map(|tp| match errors.get(tp) {
                None => Err(ApiError::UnknownServerError(
                    "no answer for the partition".into(),
                )),
                Some(&code) => match ApiError::from_code(code) {
                    None => Ok(()),
                    Some(e) => Err(e),
                },
            })
            .collect()
    }

    /// Aborts the ongoing transactions past their timeout.
    fn abort_timed_out(&self) {
        let now = self.clock.now_ms();
        let mut writes = Vec::new();
        {
            let mut inner = self.lock();
            let partitions: Vec<i32> = inner.shards.keys().copied().collect();
            for partition in partitions {
                let shard = inner.shards.get_mut(&partition).expect("listed");
                if !shard.loaded {
                    continue;
                }
                self.resend_prepared_locked(shard, partition);
                let ids: Vec<String> = shard.txns.keys().cloned().collect();
                for id in ids {
                    let meta = shard.txns.get_mut(&id).expect("listed");
                    let Some(fence) = meta.expire(now) else {
                        continue;
                    };
                    let abort = match meta.end_transaction(
                        fence.producer_id,
                        fence.producer_epoch,
                        TxnResult::Abort,
                        EndTxnBy::Coordinator,
                        now,
                    ) {
                        Ok(Some(t)) => t,
                        other => {
                            meta.abandon();
                            tracing::warn!(transactional_id = %id, outcome = ?other, "cannot abort a timed-out transaction");
                            continue;
                        }
                    };
                    tracing::info!(transactional_id = %id, producer_id = abort.producer_id, "aborting a transaction past its timeout");
                    match self.append_locked(shard, partition, &id, Some(abort), now) {
                        Ok(w) => writes.push(w),
                        Err(e) => {
                            tracing::warn!(transactional_id = %id, error = %e, "cannot write the abort of a timed-out transaction")
                        }
                    }
                }
            }
        }
        for w in writes {
            let Some(me) = self.arc() else { return };
            tokio::spawn(async move {
                let _ = me.settle(w).await;
            });
        }
    }

    /// Removes the ids idle past `transactional.id.expiration.ms`.
    fn remove_expired_ids(&self) {
        let now = self.clock.now_ms();
        let expiration = self.settings.id_expiration_ms;
        let mut writes = Vec::new();
        {
            let mut inner = self.lock();
            let partitions: Vec<i32> = inner.shards.keys().copied().collect();
            for partition in partitions {
                let shard = inner.shards.get_mut(&partition).expect("listed");
                if !shard.loaded {
                    continue;
                }
                let expired: Vec<String> = shard
                    .txns
                    .iter()
                    .filter(|(_, m)| m.is_expired_id(expiration, now))
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in expired {
                    shard.txns.get_mut(&id).expect("listed").pending = Some(TxnState::Dead);
                    match self.append_locked(shard, partition, &id, None, now) {
                        Ok(w) => writes.push(w),
                        Err(e) => {
                            tracing::warn!(transactional_id = %id, error = %e, "cannot remove an expired transactional id")
                        }
                    }
                }
            }
        }
        for w in writes {
            let Some(me) = self.arc() else { return };
            tokio::spawn(async move {
                let id = w.txn_id.clone();
                if me.settle(w).await.is_ok() {
                    tracing::info!(transactional_id = %id, "removed an expired transactional id");
                }
            });
        }
    }

    pub fn start(
        self: &Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let me = self.clone();
        let mut stop = shutdown.clone();
        let abort = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(
                me.settings.abort_timed_out_interval_ms,
            ));
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.changed() => if *stop.borrow() { return },
                    _ = tick.tick() => me.abort_timed_out(),
                }
            }
        });
        let me = self.clone();
        let mut stop = shutdown;
        let expire = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(
                me.settings.remove_expired_interval_ms,
            ));
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = stop.changed() => if *stop.borrow() { return },
                    _ = tick.tick() => me.remove_expired_ids(),
                }
            }
        });
        vec![abort, expire]
    }

    pub fn shutdown(&self) {
        self.markers_client.shutdown();
    }

    /// The ids of the partitions this node coordinates, for ListTransactions (durable state
    /// only: an id whose first write is pending has no epoch yet and is left out).
    pub fn list(&self) -> Result<Vec<TxnView>, ApiError> {
        let inner = self.lock();
        let mut out = Vec::new();
        for shard in inner.shards.values() {
            if !shard.loaded {
                return Err(ApiError::CoordinatorLoadInProgress);
            }
            for m in shard.txns.values() {
                if m.producer_epoch < 0 || m.state == TxnState::Dead {
                    continue;
                }
                out.push(view(m));
            }
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(out)
    }

    /// One id, for DescribeTransactions.
    pub fn describe(&self, txn_id: &str) -> Result<TxnView, ApiError> {
        let p = self.partition_for(txn_id);
        let mut inner = self.lock();
        let shard = Self::shard_mut(&mut inner, p)?;
        match shard.txns.get(txn_id) {
            Some(m) if m.producer_epoch >= 0 && m.state != TxnState::Dead => Ok(view(m)),
            _ => Err(ApiError::TransactionalIdNotFound),
        }
    }

    /// What loads of `__transaction_state` partitions cost.
    pub fn load_stats(&self) -> &crate::metrics::CoordinatorLoadStats {
        &self.load_stats
    }

    /// Counts of ids per state, for the metrics.
    pub fn state_counts(&self) -> BTreeMap<TxnState, usize> {
        let inner = self.lock();
        let mut counts = BTreeMap::new();
        for m in inner.shards.values().flat_map(|s| s.txns.values()) {
            *counts.entry(m.state).or_insert(0) += 1;
        }
        counts
    }

    /// Replays one partition; runs on a blocking thread. A load that fails (the log cannot be
    /// read, a batch does not decode) is tried again after a pause while this node still leads
    /// the partition at `epoch`: its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
    fn load_partition(&self, partition: i32, epoch: i32) {
        while !self.try_load_partition(partition, epoch) {
            let current = self.lock().shards.get(&partition).map(|s| s.epoch);
            if current != Some(epoch) {
                return;
            }
            std::thread::sleep(LOAD_RETRY_PAUSE);
        }
    }

    /// One attempt of [`TxnService::load_partition`]: false if it failed and may be retried.
    fn try_load_partition(&self, partition: i32, epoch: i32) -> bool {
        let started = std::time::Instant::now();
        let mut replayed = 0u64;
        let mut txns: HashMap<String, TxnMetadata> = HashMap::new();
        let mut offset = match self.log.log_start_offset(partition) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(partition, error = %e, "cannot load transaction coordinator partition");
                return false;
            }
        };
        loop {
            let records = match self.log.read(partition, offset, LOAD_READ_BYTES) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(partition, offset, error = %e, "reading {TRANSACTION_STATE_TOPIC_NAME} failed");
                    return false;
                }
            };
            if records.is_empty() {
                break;
            }
            let mut buf = records.clone();
            let sets = match RecordBatchDecoder::decode_all(&mut buf) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(partition, offset, error = %e, "undecodable batch in {TRANSACTION_STATE_TOPIC_NAME}");
                    return false;
                }
            };
            let mut last = offset - 1;
            for end in crate::group::service::batch_last_offsets(&records) {
                last = last.max(end);
            }
            for set in sets {
                for record in set.records {
                    last = last.max(record.offset);
                    if record.control {
                        continue;
                    }
                    replayed += 1;
                    let Some(key) = record.key.as_ref() else {
                        continue;
                    };
                    let id = match decode_key(key) {
                        Ok(id) => id,
                        Err(e) => {
                            tracing::warn!(partition, offset = record.offset, error = %e, "skipping record");
                            continue;
                        }
                    };
                    match record.value.as_deref().map(decode_value) {
                        None => {
                            txns.remove(&id);
                        }
                        Some(Ok(v)) => {
                            txns.insert(id.clone(), TxnMetadata::from_log(&id, &v));
                        }
                        Some(Err(e)) => {
                            tracing::warn!(partition, offset = record.offset, error = %e, "skipping record")
                        }
                    }
                }
            }
            if last < offset {
                break;
            }
            offset = last + 1;
        }
        let count = txns.len();
        {
            let mut inner = self.lock();
            match inner.shards.get_mut(&partition) {
                Some(s) if s.epoch == epoch && !s.loaded => {
                    s.txns = txns;
                    s.loaded = true;
                    // Transactions found prepared get their markers (again): this coordinator
                    // may be the first to send them, or its predecessor may have stopped midway.
                    self.resend_prepared_locked(s, partition);
                }
                _ => return true, // Leadership moved on while loading.
            }
        }
        let elapsed_ms = started.elapsed().as_millis() as u64;
        self.load_stats.record(replayed, elapsed_ms);
        tracing::info!(
            partition,
            transactional_ids = count,
            elapsed_ms,
            "loaded transaction coordinator partition"
        );
        true
    }
}

fn view(m: &TxnMetadata) -> TxnView {
    TxnView {
        transactional_id: m.transactional_id.clone(),
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        state: m.state,
        timeout_ms: m.timeout_ms,
        start_ms: m.start_ms,
        partitions: m.partitions.clone(),
    }
}

impl ImageListener for TxnService {
    fn on_image(&self, _previous: &MetadataImage, next: &MetadataImage) {
        let led: HashMap<i32, i32> = next
            .topic(TRANSACTION_STATE_TOPIC_NAME)
            .map(|t| {
                t.partitions
                    .iter()
                    .filter(|(_, reg)| reg.leader == self.node_id)
                    .map(|(p, reg)| (*p, reg.leader_epoch))
                    .collect()
            })
            .unwrap_or_default();
        let mut to_load = Vec::new();
        {
            let mut inner = self.lock();
            inner.shards.retain(|p, s| led.get(p) == Some(&s.epoch));
            for (p, epoch) in &led {
                if !inner.shards.contains_key(p) {
                    inner.shards.insert(
                        *p,
                        Shard {
                            epoch: *epoch,
                            loaded: false,
                            txns: HashMap::new(),
                            delivering: HashSet::new(),
                        },
                    );
                    to_load.push((*p, *epoch));
                }
            }
        }
        if to_load.is_empty() {
            return;
        }
        let Some(me) = self.arc() else { return };
        let load = move || {
            for (p, epoch) in to_load {
                me.load_partition(p, epoch);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(load);
            }
            Err(_) => load(),
        }
    }
}

/// How a transaction in `state` ends, if it is prepared.
fn prepared_result(state: TxnState) -> Option<TxnResult> {
    match state {
        TxnState::PrepareCommit => Some(TxnResult::Commit),
        TxnState::PrepareAbort => Some(TxnResult::Abort),
        _ => None,
    }
}
