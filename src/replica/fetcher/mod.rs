//! The replica fetcher: followers copy their leaders' logs (Kafka's `ReplicaFetcherManager`,
//! `AbstractFetcherThread`, `ReplicaFetcherThread`, `PartitionFetchState`).
//!
//! The [`ReplicaFetcherManager`] keeps one fetcher per source broker and fetcher index
//! (`num.replica.fetchers` per broker; a partition goes to the index its topic and number hash
//! to, as in Kafka), each a task ([`task::FetcherTask`]) with its own connection that fetches
//! all its partitions in one Fetch request at a time and applies the answers
//! ([`state`] holds the pure rules: starting offsets, answers, truncation points, out of range).
//! The [`super::ReplicaManager`] adds a partition when this node becomes its follower under a
//! new leader epoch and removes it when this node leads it, stops hosting it or its leader is
//! gone; a fetcher left with no partitions stops. Partitions added while the fetcher's request
//! is parked at the leader (up to `replica.fetch.wait.max.ms`) do not wait for it: the request
//! is given up and sent again with them (Kafka's fetcher waits), so after a leader moves, its
//! followers fetch at once and an acks=all produce to the new leader is not held for the park.
//!
//! Followers append the leader's bytes as they are (offsets, epochs, producer state rebuilt
//! from them) and take the leader's high watermark; the leader learns where each follower is
//! from its fetches. Nothing here writes a leader's log or decides leadership.
//!
//! **Architecture Invariant:** a fetcher writes a partition only while it holds it in the
//! leader epoch it fetches in; removal waits for an answer being applied, so a removed
//! partition is never written again. Fetchers are bounded by brokers ×
//! `num.replica.fetchers`.

pub mod leader;
pub mod state;
pub mod task;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafkaiq_storage::TopicPartition;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::brokers::BrokerView;
use super::partition::Partition;
use super::quota::ReplicationQuota;
use crate::clock::SystemClock;
use crate::config::ReplicaFetcherConfig;
use leader::{ClientLeaderEndPoint, LeaderEndPointFactory};
use state::PartitionFetchState;
use task::{Fetched, FetcherShared, FetcherTask};

/// A partition to start fetching: from `leader`, in `leader_epoch`.
#[derive(Clone)]
pub struct FetchTarget {
    pub tp: TopicPartition,
    pub partition: Arc<Partition>,
    pub leader: i32,
    pub leader_epoch: i32,
}

struct Fetcher {
    shared: Arc<FetcherShared>,
    task: Option<JoinHandle<()>>,
}

struct Running {
    runtime: Handle,
    shutdown: watch::Receiver<bool>,
}

struct Inner {
    fetchers: BTreeMap<(i32, usize), Fetcher>,
    /// Set by [`ReplicaFetcherManager::start`]; until then partitions are held, not fetched.
    running: Option<Running>,
    /// Tasks of fetchers that were stopped, awaited at shutdown.
    stopped: Vec<JoinHandle<()>>,
}

pub struct ReplicaFetcherManager {
    node_id: i32,
    config: ReplicaFetcherConfig,
    brokers: Arc<BrokerView>,
    endpoints: LeaderEndPointFactory,
    /// The follower side of replication throttling (KIP-73), shared by every fetcher.
    quota: Mutex<Arc<ReplicationQuota>>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for ReplicaFetcherManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaFetcherManager")
            .field("fetchers", &self.lock().fetchers.len())
            .finish()
    }
}

impl ReplicaFetcherManager {
    /// Fetchers over the inter-broker client, reaching leaders on `inter_broker_listener`
    /// (secured by `security` when it is SSL or SASL).
    pub fn new(
        node_id: i32,
        config: ReplicaFetcherConfig,
        message_max_bytes: usize,
        brokers: Arc<BrokerView>,
        inter_broker_listener: String,
        security: Option<Arc<crate::security::ClientSecurity>>,
    ) -> ReplicaFetcherManager {
        let endpoint_config = config.clone();
        let endpoint_brokers = brokers.clone();
        let endpoints: LeaderEndPointFactory = Arc::new(move |_leader, fetcher_id| {
            Arc::new(ClientLeaderEndPoint::new(
                node_id,
                fetcher_id,
                endpoint_config.clone(),
                message_max_bytes,
                endpoint_brokers.clone(),
                inter_broker_listener.clone(),
                security.clone(),
            ))
        });
        Self::with_endpoints(node_id, config, brokers, endpoints)
    }

    /// Fetchers over endpoints `endpoints` makes (tests: a fake leader).
    pub fn with_endpoints(
        node_id: i32,
        config: ReplicaFetcherConfig,
        brokers: Arc<BrokerView>,
        endpoints: LeaderEndPointFactory,
    ) -> ReplicaFetcherManager {
        ReplicaFetcherManager {
            node_id,
            config,
            brokers,
            endpoints,
            quota: Mutex::new(Arc::new(ReplicationQuota::new(
                crate::config::QuotaWindow {
                    samples: 11,
                    window_ms: 1_000,
                },
                Arc::new(SystemClock),
            ))),
            inner: Mutex::new(Inner {
                fetchers: BTreeMap::new(),
                running: None,
                stopped: Vec::new(),
            }),
        }
    }

    /// The follower quota fetchers started from now on check (set before they start).
    pub fn set_quota(&self, quota: Arc<ReplicationQuota>) {
        *self.quota.lock().unwrap_or_else(|e| e.into_inner()) = quota;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts fetching (on the current runtime) what was added so far, and whatever is added
    /// later, until `shutdown`.
    pub fn start(&self, shutdown: watch::Receiver<bool>) {
        let mut inner = self.lock();
        inner.running = Some(Running {
            runtime: Handle::current(),
            shutdown,
        });
        let keys: Vec<(i32, usize)> = inner.fetchers.keys().copied().collect();
        for key in keys {
            self.spawn(&mut inner, key);
        }
    }

    fn spawn(&self, inner: &mut Inner, key: (i32, usize)) {
        let Some(running) = &inner.running else {
            return;
        };
        let (runtime, shutdown) = (running.runtime.clone(), running.shutdown.clone());
        let Some(fetcher) = inner.fetchers.get_mut(&key) else {
            return;
        };
        if fetcher.task.is_some() {
            return;
        }
        let task = FetcherTask {
            shared: fetcher.shared.clone(),
            endpoint: (self.endpoints)(key.0, key.1),
            brokers: self.brokers.clone(),
            node_id: self.node_id,
            backoff: Duration::from_millis(self.config.backoff_ms),
            quota: self.quota.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            shutdown,
        };
        fetcher.task = Some(runtime.spawn(task.run()));
    }

    /// Kafka's `addFetcherForPartitions`: each target joins the fetcher of its leader and
    /// index. A partition already fetched in the same leader epoch, of the same topic id, keeps
    /// its state; otherwise it starts from its log (see [`PartitionFetchState::initial`]).
    pub fn add_partitions(&self, targets: Vec<FetchTarget>) {
        if targets.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let mut touched = std::collections::BTreeSet::new();
        for target in targets {
            let key = (
                target.leader,
                state::fetcher_id(
                    &target.tp.topic,
                    target.tp.partition,
                    self.config.num_replica_fetchers,
                ),
            );
            let fetcher = inner.fetchers.entry(key).or_insert_with(|| Fetcher {
                shared: Arc::new(FetcherShared::new(key.0, key.1)),
                task: None,
            });
            {
                let mut partitions = fetcher.shared.lock();
                let same_epoch = partitions.get(&target.tp).is_some_and(|f| {
                    f.state.current_leader_epoch == target.leader_epoch
                        && f.state.topic_id == target.partition.topic_id
                });
                if !same_epoch {
                    let log = target.partition.log();
                    let state = PartitionFetchState::initial(
                        target.partition.topic_id,
                        target.leader_epoch,
                        log.log_end_offset(),
                        target.partition.high_watermark(),
                        log.latest_epoch(),
                    );
                    tracing::info!(
                        topic = %target.tp.topic,
                        partition = target.tp.partition,
                        leader = target.leader,
                        leader_epoch = target.leader_epoch,
                        fetch_offset = state.fetch_offset,
                        last_fetched_epoch = ?state.last_fetched_epoch,
                        "fetching from the leader"
                    );
                    partitions.insert(
                        target.tp.clone(),
                        Fetched {
                            partition: target.partition.clone(),
                            state,
                        },
                    );
                }
            }
            touched.insert(key);
        }
        // One wake-up per fetcher for the whole set, so a fetch in flight is given up (see
        // `FetcherTask::outgrown`) once for it, not once per partition.
        for key in touched {
            if let Some(fetcher) = inner.fetchers.get(&key) {
                fetcher.shared.notify();
            }
            self.spawn(&mut inner, key);
        }
    }

    /// Kafka's `removeFetcherForPartitions`: once this returns, no fetcher writes these
    /// partitions. Fetchers left with nothing to fetch stop.
    pub fn remove_partitions(&self, tps: &[TopicPartition]) {
        if tps.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let mut idle = Vec::new();
        for (key, fetcher) in &inner.fetchers {
            let mut partitions = fetcher.shared.lock();
            for tp in tps {
                partitions.remove(tp);
            }
            if partitions.is_empty() {
                idle.push(*key);
            }
        }
        for key in idle {
            if let Some(fetcher) = inner.fetchers.remove(&key) {
                fetcher.shared.stop();
                inner.stopped.retain(|t| !t.is_finished());
                if let Some(task) = fetcher.task {
                    inner.stopped.push(task);
                }
            }
        }
    }

    /// The fetch state of `tp`, if some fetcher holds it.
    pub fn fetch_state(&self, tp: &TopicPartition) -> Option<(i32, PartitionFetchState)> {
        let inner = self.lock();
        inner
            .fetchers
            .values()
            .find_map(|f| f.shared.state_of(tp).map(|s| (f.shared.leader, s)))
    }

    /// The (leader, fetcher index) of every fetcher.
    pub fn fetchers(&self) -> Vec<(i32, usize)> {
        self.lock().fetchers.keys().copied().collect()
    }

    /// Stops every fetcher and waits for their tasks.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut inner = self.lock();
            let mut tasks = std::mem::take(&mut inner.stopped);
            for (_, fetcher) in std::mem::take(&mut inner.fetchers) {
                fetcher.shared.stop();
                tasks.extend(fetcher.task);
            }
            inner.running = None;
            tasks
        };
        for task in tasks {
            if let Err(e) = task.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
