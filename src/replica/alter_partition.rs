//! Sending a leader's ISR changes to the active controller (Kafka's `AlterPartitionManager`).
//!
//! A [`Partition`] that decides to expand or shrink its ISR hands its [`IsrProposal`] to the
//! [`AlterPartitionManager`]. The manager's task sends every proposal waiting, for all
//! partitions, in one AlterPartition request (API 56) through an [`AlterPartitionSender`], one
//! request at a time, and gives each partition its own answer
//! ([`Partition::on_alter_partition_answer`]). A request refused as a whole (NOT_CONTROLLER,
//! STALE_BROKER_EPOCH, the controller unreachable) is sent again after
//! [`ALTER_PARTITION_RETRY_BACKOFF_MS`], to whichever controller the metadata names by then; so
//! is a single partition whose answer says to retry, or that the answer left out. Nothing
//! times out a proposal: it is answered, or a new image replaces the partition's state and the
//! answer, when it comes, is ignored.
//!
//! [`ControllerAlterPartitionSender`] is the sender over the inter-broker client: it reaches the
//! active controller (the image's `controller_id`) at its endpoint in
//! `controller.quorum.voters`, and builds and reads AlterPartition v2–3 (topic ids; v3 carries
//! each ISR member's broker epoch). [`FnAlterPartitionSender`] wraps a function, for tests that
//! play the controller.
//!
//! **Architecture Invariant:** the waiting proposals are bounded by the partitions this node
//! leads (one per partition, the newest replacing an older one); no lock is held across an
//! await.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, BrokerId};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use uuid::Uuid;

use super::brokers::BrokerView;
use super::isr::{AlterPartitionOutcome, CommittedPartition, IsrProposal};
use super::partition::Partition;
use crate::client::{Client, Endpoint, RequestOptions};
use crate::clock::SharedClock;
use crate::errors::ApiError;
use crate::limits::ALTER_PARTITION_RETRY_BACKOFF_MS;
use crate::metadata::LeaderRecoveryState;
use crate::metrics::ReplicaStats;

/// One partition's proposed change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionItem {
    pub topic_id: Uuid,
    pub partition: i32,
    pub proposal: IsrProposal,
}

/// The controller's answer for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionAnswer {
    pub topic_id: Uuid,
    pub partition: i32,
    pub result: Result<CommittedPartition, ApiError>,
}

/// What a sender's future resolves to: the answers per partition, or why the whole request
/// failed (the controller's top-level error, or NOT_CONTROLLER / REQUEST_TIMED_OUT when it could
/// not be reached).
pub type SendFuture =
    Pin<Box<dyn Future<Output = Result<Vec<AlterPartitionAnswer>, ApiError>> + Send>>;

/// Sends this broker's AlterPartition requests.
pub trait AlterPartitionSender: Send + Sync {
    /// Sends `items` for broker `broker_id` at `broker_epoch`.
    fn send(&self, broker_id: i32, broker_epoch: i64, items: Vec<AlterPartitionItem>)
        -> SendFuture;
}

/// A sender that calls a function: for tests that play the controller.
pub struct FnAlterPartitionSender<F>(pub F);

impl<F> AlterPartitionSender for FnAlterPartitionSender<F>
where
    F: Fn(i32, i64, Vec<AlterPartitionItem>) -> SendFuture + Send + Sync,
{
    fn send(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        items: Vec<AlterPartitionItem>,
    ) -> SendFuture {
        (self.0)(broker_id, broker_epoch, items)
    }
}

/// A sender that refuses everything as NOT_CONTROLLER: until a real one is set, proposals wait.
struct NoController;

impl AlterPartitionSender for NoController {
    fn send(&self, _: i32, _: i64, _: Vec<AlterPartitionItem>) -> SendFuture {
        Box::pin(async { Err(ApiError::NotController) })
    }
}

struct Waiting {
    partition: Arc<Partition>,
    proposal: IsrProposal,
    not_before: Instant,
}

/// The queue of proposals and the task that sends them.
pub struct AlterPartitionManager {
    node_id: i32,
    brokers: Arc<BrokerView>,
    clock: SharedClock,
    sender: RwLock<Option<Arc<dyn AlterPartitionSender>>>,
    default_sender: RwLock<Arc<dyn AlterPartitionSender>>,
    /// (topic id, partition) → the newest proposal not yet sent.
    waiting: Mutex<BTreeMap<(Uuid, i32), Waiting>>,
    wake: Notify,
    /// Counts the ISR changes committed through this manager's answers (the replica manager
    /// counts those it learns from an image first; see [`ReplicaStats`]).
    stats: ReplicaStats,
}

impl std::fmt::Debug for AlterPartitionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlterPartitionManager")
            .field("waiting", &self.lock().len())
            .finish()
    }
}

impl AlterPartitionManager {
    /// `stats` shares its counters with the replica manager's.
    pub fn new(
        node_id: i32,
        brokers: Arc<BrokerView>,
        clock: SharedClock,
        stats: ReplicaStats,
    ) -> AlterPartitionManager {
        AlterPartitionManager {
            node_id,
            brokers,
            clock,
            sender: RwLock::new(None),
            default_sender: RwLock::new(Arc::new(NoController)),
            waiting: Mutex::new(BTreeMap::new()),
            wake: Notify::new(),
            stats,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Uuid, i32), Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the sender (tests that play the controller); wins over the default.
    pub fn set_sender(&self, sender: Arc<dyn AlterPartitionSender>) {
        *self.sender.write().unwrap_or_else(|e| e.into_inner()) = Some(sender);
        self.wake.notify_one();
    }

    /// The sender used unless [`AlterPartitionManager::set_sender`] set one (the node's, over
    /// the inter-broker client).
    pub fn set_default_sender(&self, sender: Arc<dyn AlterPartitionSender>) {
        *self
            .default_sender
            .write()
            .unwrap_or_else(|e| e.into_inner()) = sender;
        self.wake.notify_one();
    }

    fn sender(&self) -> Arc<dyn AlterPartitionSender> {
        let chosen = self
            .sender
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        chosen.unwrap_or_else(|| {
            self.default_sender
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        })
    }

    /// Queues `proposal` of `partition`, replacing an older one not yet sent.
    pub fn submit(&self, partition: &Arc<Partition>, proposal: IsrProposal) {
        self.queue(partition.clone(), proposal, Instant::now());
    }

    fn queue(&self, partition: Arc<Partition>, proposal: IsrProposal, not_before: Instant) {
        let key = (partition.topic_id, partition.tp.partition);
        let mut waiting = self.lock();
        if waiting
            .get(&key)
            .is_some_and(|w| w.proposal.id > proposal.id)
        {
            return;
        }
        waiting.insert(
            key,
            Waiting {
                partition,
                proposal,
                not_before,
            },
        );
        drop(waiting);
        self.wake.notify_one();
    }

    /// Proposals waiting to be sent (for tests and metrics).
    pub fn waiting(&self) -> usize {
        self.lock().len()
    }

    /// Takes the proposals due now, or says when the next one is due.
    fn take_due(&self, now: Instant) -> Result<Vec<Waiting>, Option<Instant>> {
        let mut waiting = self.lock();
        let due: Vec<(Uuid, i32)> = waiting
            .iter()
            .filter(|(_, w)| w.not_before <= now)
            .map(|(k, _)| *k)
            .collect();
        if due.is_empty() {
            return Err(waiting.values().map(|w| w.not_before).min());
        }
        Ok(due.iter().filter_map(|k| waiting.remove(k)).collect())
    }

    /// The task: sends what waits, one request at a time, until `shutdown`.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if *shutdown.borrow() {
                return;
            }
            let due = match self.take_due(Instant::now()) {
                Ok(due) => due,
                Err(next) => {
                    let sleep = async {
                        match next {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = self.wake.notified() => {}
                        _ = sleep => {}
                        _ = shutdown.changed() => {}
                    }
                    continue;
                }
            };
            let sender = self.sender();
            let broker_epoch = self.brokers.get().broker_epoch(self.node_id);
            let items: Vec<AlterPartitionItem> = due
                .iter()
                .map(|w| AlterPartitionItem {
                    topic_id: w.partition.topic_id,
                    partition: w.partition.tp.partition,
                    proposal: w.proposal.clone(),
                })
                .collect();
            let result = tokio::select! {
                r = sender.send(self.node_id, broker_epoch, items) => r,
                _ = shutdown.changed() => return,
            };
            self.on_result(due, result);
        }
    }

    /// Hands each partition its answer; queues again what must be retried.
    fn on_result(&self, sent: Vec<Waiting>, result: Result<Vec<AlterPartitionAnswer>, ApiError>) {
        let retry_at = Instant::now() + Duration::from_millis(ALTER_PARTITION_RETRY_BACKOFF_MS);
        let answers = match result {
            Ok(answers) => answers,
            Err(e) => {
                tracing::info!(error = %e, partitions = sent.len(), "AlterPartition request failed; retrying");
                for w in sent {
                    self.retry(w, retry_at);
                }
                return;
            }
        };
        let mut by_partition: BTreeMap<(Uuid, i32), Result<CommittedPartition, ApiError>> = answers
            .into_iter()
            .map(|a| ((a.topic_id, a.partition), a.result))
            .collect();
        let now_ms = self.clock.now_ms();
        for w in sent {
            let key = (w.partition.topic_id, w.partition.tp.partition);
            match by_partition.remove(&key) {
                Some(answer) => {
                    let before = w.partition.state();
                    let outcome =
                        w.partition
                            .on_alter_partition_answer(w.proposal.id, &answer, now_ms);
                    if let AlterPartitionOutcome::Commit(committed, partition_epoch) = &outcome {
                        // Counted here unless an image brought the change first.
                        if *partition_epoch > before.partition_epoch {
                            self.stats.isr_changed(before.isr(), &committed.isr);
                        }
                    }
                    if outcome == AlterPartitionOutcome::Retry {
                        self.retry(w, retry_at);
                    }
                }
                None => {
                    tracing::warn!(topic = %w.partition.tp.topic, partition = w.partition.tp.partition, "AlterPartition answer left a partition out; sending it again");
                    self.retry(w, retry_at);
                }
            }
        }
    }

    /// Queues a sent proposal again if the partition still waits for it.
    fn retry(&self, w: Waiting, at: Instant) {
        if w.partition
            .pending_isr_proposal()
            .is_some_and(|p| p.id == w.proposal.id)
        {
            self.queue(w.partition, w.proposal, at);
        }
    }
}

/// AlterPartition v2–3 for `items` (Kafka's `AlterPartitionManager#buildRequest`): grouped by
/// topic id; v3 sends each member's broker epoch, v2 the plain ids.
pub fn build_request(
    version: i16,
    broker_id: i32,
    broker_epoch: i64,
    items: &[AlterPartitionItem],
) -> AlterPartitionRequest {
    let mut topics: Vec<TopicData> = Vec::new();
    for item in items {
        let p = &item.proposal;
        let mut data = PartitionData::default()
            .with_partition_index(item.partition)
            .with_leader_epoch(p.leader_epoch)
            .with_partition_epoch(p.partition_epoch)
            .with_leader_recovery_state(p.leader_recovery_state.to_wire());
        if version >= 3 {
            data.new_isr_with_epochs = p
                .isr_with_epochs
                .iter()
                .map(|&(id, epoch)| {
                    BrokerState::default()
                        .with_broker_id(BrokerId(id))
                        .with_broker_epoch(epoch)
                })
                .collect();
        } else {
            data.new_isr = p
                .isr_with_epochs
                .iter()
                .map(|&(id, _)| BrokerId(id))
                .collect();
        }
        match topics.iter_mut().find(|t| t.topic_id == item.topic_id) {
            Some(t) => t.partitions.push(data),
            None => topics.push(
                TopicData::default()
                    .with_topic_id(item.topic_id)
                    .with_partitions(vec![data]),
            ),
        }
    }
    AlterPartitionRequest::default()
        .with_broker_id(BrokerId(broker_id))
        .with_broker_epoch(broker_epoch)
        .with_topics(topics)
}

/// The per-partition answers of a response, or its top-level error.
pub fn read_response(
    response: &AlterPartitionResponse,
) -> Result<Vec<AlterPartitionAnswer>, ApiError> {
    if let Some(e) = ApiError::from_code(response.error_code) {
        return Err(e);
    }
    Ok(response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| AlterPartitionAnswer {
                topic_id: t.topic_id,
                partition: p.partition_index,
                result: match ApiError::from_code(p.error_code) {
                    Some(e) => Err(e),
                    None => Ok(CommittedPartition {
                        leader_id: p.leader_id.0,
                        leader_epoch: p.leader_epoch,
                        isr: p.isr.iter().map(|b| b.0).collect(),
                        leader_recovery_state: LeaderRecoveryState::from_wire(
                            p.leader_recovery_state,
                        )
                        .unwrap_or_default(),
                        partition_epoch: p.partition_epoch,
                    }),
                },
            })
        })
        .collect())
}

/// The sender over the inter-broker client, to the active controller's controller listener.
pub struct ControllerAlterPartitionSender {
    client: Client,
    brokers: Arc<BrokerView>,
    /// `controller.quorum.voters`: where each controller listens.
    voters: BTreeMap<i32, Endpoint>,
}

impl ControllerAlterPartitionSender {
    pub fn new(
        client: Client,
        brokers: Arc<BrokerView>,
        voters: BTreeMap<i32, Endpoint>,
    ) -> ControllerAlterPartitionSender {
        ControllerAlterPartitionSender {
            client,
            brokers,
            voters,
        }
    }
}

impl AlterPartitionSender for ControllerAlterPartitionSender {
    fn send(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        items: Vec<AlterPartitionItem>,
    ) -> SendFuture {
        let controller = self.brokers.get().controller_id;
        let endpoint = self.voters.get(&controller).cloned();
        let client = self.client.clone();
        Box::pin(async move {
            let Some(endpoint) = endpoint else {
                // No active controller known yet, or not one we can reach: wait for metadata.
                return Err(ApiError::NotController);
            };
            client
                .set_endpoint(controller, endpoint)
                .map_err(|_| ApiError::NotController)?;
            let response = client
                .send_with(
                    controller,
                    RequestOptions::default().versions(2, 3),
                    move |version| build_request(version, broker_id, broker_epoch, &items),
                )
                .await
                .map_err(|e| {
                    tracing::debug!(controller, error = %e, "AlterPartition not answered");
                    ApiError::RequestTimedOut
                })?;
            let answers = read_response(&response.body);
            if answers == Err(ApiError::NotController) {
                // Kafka's controller channel drops the connection and finds the new one.
                client.disconnect(controller);
            }
            answers
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::alter_partition_response;

    fn item(topic: u128, partition: i32, isr: &[(i32, i64)]) -> AlterPartitionItem {
        AlterPartitionItem {
            topic_id: Uuid::from_u128(topic),
            partition,
            proposal: IsrProposal {
                id: 1,
                leader_epoch: 4,
                partition_epoch: 9,
                isr_with_epochs: isr.to_vec(),
                leader_recovery_state: LeaderRecoveryState::Recovered,
            },
        }
    }

    #[test]
    fn requests_group_by_topic_and_carry_epochs_from_v3() {
        let items = [
            item(1, 0, &[(1, 10), (2, 20)]),
            item(2, 3, &[(1, 10)]),
            item(1, 1, &[(1, 10), (3, -1)]),
        ];
        let v3 = build_request(3, 1, 10, &items);
        assert_eq!((v3.broker_id, v3.broker_epoch), (BrokerId(1), 10));
        assert_eq!(v3.topics.len(), 2);
        assert_eq!(v3.topics[0].topic_id, Uuid::from_u128(1));
        let p = &v3.topics[0].partitions;
        assert_eq!(
            p.iter().map(|p| p.partition_index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!((p[0].leader_epoch, p[0].partition_epoch), (4, 9));
        assert_eq!(
            p[1].new_isr_with_epochs
                .iter()
                .map(|b| (b.broker_id.0, b.broker_epoch))
                .collect::<Vec<_>>(),
            vec![(1, 10), (3, -1)]
        );
        assert!(p[1].new_isr.is_empty());
        let v2 = build_request(2, 1, 10, &items);
        assert_eq!(
            v2.topics[0].partitions[1].new_isr,
            vec![BrokerId(1), BrokerId(3)]
        );
        assert!(v2.topics[0].partitions[1].new_isr_with_epochs.is_empty());
        // Both encode at their version.
        use kafka_protocol::protocol::Encodable;
        let mut buf = bytes::BytesMut::new();
        v3.encode(&mut buf, 3).unwrap();
        v2.encode(&mut buf, 2).unwrap();
    }

    #[test]
    fn responses_give_per_partition_answers_or_the_top_level_error() {
        let partition = |index: i32, error: i16| {
            alter_partition_response::PartitionData::default()
                .with_partition_index(index)
                .with_error_code(error)
                .with_leader_id(BrokerId(1))
                .with_leader_epoch(4)
                .with_isr(vec![BrokerId(1), BrokerId(2)])
                .with_partition_epoch(10)
        };
        let response = AlterPartitionResponse::default().with_topics(vec![
            alter_partition_response::TopicData::default()
                .with_topic_id(Uuid::from_u128(1))
                .with_partitions(vec![
                    partition(0, 0),
                    partition(1, ApiError::InvalidUpdateVersion.code()),
                ]),
        ]);
        let answers = read_response(&response).unwrap();
        assert_eq!(
            answers[0].result,
            Ok(CommittedPartition {
                leader_id: 1,
                leader_epoch: 4,
                isr: vec![1, 2],
                leader_recovery_state: LeaderRecoveryState::Recovered,
                partition_epoch: 10,
            })
        );
        assert_eq!(answers[1].result, Err(ApiError::InvalidUpdateVersion));
        assert_eq!(
            read_response(
                &response
                    .clone()
                    .with_error_code(ApiError::NotController.code())
            ),
            Err(ApiError::NotController)
        );
    }
}
