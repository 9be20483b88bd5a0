//! The broker's side of its life in a cluster (Kafka's `BrokerLifecycleManager`): register with
//! the active controller, then heartbeat every `broker.heartbeat.interval.ms` with how far this
//! node has replayed the metadata log, until the controller unfences it; keep heartbeating;
//! register again when the controller no longer knows this incarnation.
//!
//! Requests go to the controller listener of the active controller (the image's
//! `controller_id`, else each voter in turn), over one inter-broker client connection. That
//! connection is what the controller watches: when it closes (this process died), the broker is
//! fenced at once. When a request fails or the controller answers NOT_CONTROLLER, the next
//! heartbeat goes out at once to the next candidate, so a new active controller hears from every
//! live broker within its failover grace. When the image names a new active controller, the
//! next heartbeat goes to it at once rather than at the end of the interval: a broker the new
//! controller has not heard from yet is one it can only fence by timeout.
//!
//! Controlled shutdown (Kafka's `beginControlledShutdown`): when the node is asked to stop, the
//! heartbeats carry `want_shut_down`, every [`BROKER_LIFECYCLE_RETRY_MS`] instead of every
//! interval, and the controller moves this broker's leaderships to other ISR members a batch
//! per heartbeat; the node stops serving only once a heartbeat answers `should_shut_down` (it
//! then leads nothing, and that is committed), after [`ControlledShutdown::begin`]'s bound, or
//! once no controller has answered for a heartbeat interval (there is nobody to hand over to).
//! The controller lets it go only once every other active broker has reported replaying the
//! image in which it leads nothing; each broker therefore heartbeats at once on every new image
//! while another broker is in controlled shutdown, rather than at the end of its interval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

use crate::client::{Client, ClientConfig, Endpoint, RequestOptions};
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::BROKER_LIFECYCLE_RETRY_MS;
use crate::metadata::{BrokerRegistration, ImageListener, MetadataCache, MetadataImage};

pub(crate) struct BrokerLifecycle {
    config: Arc<BrokerConfig>,
    cluster_id: String,
    registration: BrokerRegistration,
    cache: Arc<MetadataCache>,
    /// Where the per-partition load rates are measured (its `topic_stats`).
    context: Arc<crate::context::Context>,
    client: Client,
    /// Whether the controller has unfenced this incarnation.
    running: watch::Sender<bool>,
    /// The voter the next request goes to when the image names no active controller.
    next_candidate: usize,
    /// The active controller each new image names (fed by [`ControllerWatch`]).
    controller: watch::Receiver<i32>,
    /// Each new image's offset while another broker is in controlled shutdown: the controller
    /// lets that broker go once every active broker has replayed past the image where it leads
    /// nothing, so a heartbeat tells it at once instead of at the end of the interval.
    peer_shutting_down: watch::Receiver<u64>,
    /// Turned true by [`ControlledShutdown::begin`].
    want_shut_down: watch::Receiver<bool>,
    /// Turned true once the controller lets this broker go (or it has nothing to hand over).
    may_shut_down: watch::Sender<bool>,
}

/// An image listener that passes on the active controller's id when it changes, and the
/// offset of each new image while another broker is in controlled shutdown.
pub(crate) struct ControllerWatch {
    controller: watch::Sender<i32>,
    peer_shutting_down: watch::Sender<u64>,
    node_id: i32,
}

impl ImageListener for ControllerWatch {
    fn on_image(&self, _previous: &MetadataImage, next: &MetadataImage) {
        self.controller.send_if_modified(|id| {
            let changed = *id != next.controller_id;
            *id = next.controller_id;
            changed
        });
        let peer = next
            .brokers
            .values()
            .any(|b| b.node_id != self.node_id && b.in_controlled_shutdown && !b.fenced);
        if peer {
            self.peer_shutting_down.send_if_modified(|offset| {
                let changed = *offset != next.metadata_offset;
                *offset = next.metadata_offset;
                changed
            });
        }
    }
}

/// The node's handle on its broker's controlled shutdown.
pub(crate) struct ControlledShutdown {
    want_shut_down: watch::Sender<bool>,
    may_shut_down: watch::Receiver<bool>,
}

impl ControlledShutdown {
    /// Asks the controller to move this broker's leaderships away and waits until it lets the
    /// broker go, at most `bound`: past it the broker stops anyway (a controller that has not
    /// answered for a session timeout would have fenced it for silence by then). Returns
    /// whether the controller let it go.
    pub(crate) async fn begin(mut self, bound: Duration) -> bool {
        let _ = self.want_shut_down.send(true);
        let waited = tokio::time::timeout(bound, self.may_shut_down.wait_for(|ok| *ok)).await;
        matches!(waited, Ok(Ok(_)))
    }
}

impl BrokerLifecycle {
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        cluster_id: String,
        registration: BrokerRegistration,
        cache: Arc<MetadataCache>,
        context: Arc<crate::context::Context>,
    ) -> (BrokerLifecycle, Arc<ControllerWatch>) {
        let interval = Duration::from_millis(config.kraft.broker_heartbeat_interval_ms);
        let client = Client::new(
            ClientConfig {
                client_id: format!("kafkaiq-{}-lifecycle", config.node_id),
                // A request times out, and its connection closes (which the active controller
                // takes as this broker's death), only once the controller would have fenced
                // it for silence anyway: a controller busy for a few seconds is waited for. A
                // controller that is gone is left sooner, when the image names its successor
                // (see `run`), or at once when its connection fails.
                request_timeout: Duration::from_millis(config.kraft.broker_session_timeout_ms)
                    .max(interval),
                security: config.controller_client.clone(),
                ..ClientConfig::default()
            },
            None,
        );
        for voter in &config.kraft.voters {
            let _ = client.set_endpoint(voter.id, Endpoint::new(voter.host.clone(), voter.port));
        }
        let (watch_tx, controller) = watch::channel(cache.image().controller_id);
        let (peer_tx, peer_shutting_down) = watch::channel(cache.image().metadata_offset);
        let node_id = config.node_id;
        let lifecycle = BrokerLifecycle {
            config,
            cluster_id,
            registration,
            cache,
            context,
            client,
            running: watch::channel(false).0,
            next_candidate: 0,
            controller,
            peer_shutting_down,
            want_shut_down: watch::channel(false).1,
            may_shut_down: watch::channel(false).0,
        };
        let watch = ControllerWatch {
            controller: watch_tx,
            peer_shutting_down: peer_tx,
            node_id,
        };
        (lifecycle, Arc::new(watch))
    }

    /// The handle that starts this broker's controlled shutdown.
    pub(crate) fn controlled_shutdown(&mut self) -> ControlledShutdown {
        let (want_tx, want_rx) = watch::channel(false);
        let (may_tx, may_rx) = watch::channel(false);
        self.want_shut_down = want_rx;
        self.may_shut_down = may_tx;
        ControlledShutdown {
            want_shut_down: want_tx,
            may_shut_down: may_rx,
        }
    }

    /// Turns true once the controller has unfenced this broker (and back to false if it fences
    /// it again).
    pub(crate) fn running(&self) -> watch::Receiver<bool> {
        self.running.subscribe()
    }

    /// Where the next request goes: the active controller the image names if it is a voter,
    /// else the next voter in turn.
    fn target(&mut self, avoid: Option<i32>) -> i32 {
        let voters: Vec<i32> = self.config.kraft.voters.iter().map(|v| v.id).collect();
        let named = self.cache.image().controller_id;
        if voters.contains(&named) && Some(named) != avoid {
            return named;
        }
        self.next_candidate = (self.next_candidate + 1) % voters.len();
        voters[self.next_candidate]
    }

    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let interval = Duration::from_millis(self.config.kraft.broker_heartbeat_interval_ms);
        let retry = Duration::from_millis(BROKER_LIFECYCLE_RETRY_MS);
        let mut epoch: Option<i64> = None;
        let mut failed: Option<i32> = None;
        let mut want_shut_down = self.want_shut_down.clone();
        // The node dropped its handle without asking: stop watching it.
        let mut handle_dropped = false;
        // The publisher dropped the controller watch (the node is stopping).
        let mut controller_gone = false;
        let mut peer_watch_gone = false;
        // While shutting down: since when no controller has answered.
        let mut unreachable_since: Option<Instant> = None;
        loop {
            let shutting_down = *want_shut_down.borrow_and_update();
            if shutting_down && (epoch.is_none() || *self.may_shut_down.borrow()) {
                // Not registered (nothing to hand over), or already let go: wait for the stop.
                let _ = self.may_shut_down.send(true);
                let _ = shutdown.wait_for(|stop| *stop).await;
                self.client.shutdown();
                return;
            }
            let target = self.target(failed);
            // A request waits for its answer until the image names another active
            // controller: it then goes there at once, where the old one may never answer.
            let mut named = self.controller.clone();
            let named_at_start = *named.borrow_and_update();
            let elsewhere = named.wait_for(|id| *id >= 0 && *id != named_at_start && *id != target);
            let exchange = async {
                match epoch {
                    None => self.register(target).await.map(Some),
                    Some(e) => self
                        .heartbeat(target, e, shutting_down)
                        .await
                        .map(|()| None),
                }
            };
            let outcome = tokio::select! {
                outcome = exchange => outcome,
                _ = elsewhere => Err(LifecycleError::Retry(
                    "the image names another active controller".into(),
                )),
            };
            let outcome = outcome.map(|registered| {
                if let Some(e) = registered {
                    tracing::info!(
                        controller = target,
                        broker_epoch = e,
                        "registered with the controller"
                    );
                    epoch = Some(e);
                }
            });
            let wait = match outcome {
                Ok(()) => {
                    failed = None;
                    unreachable_since = None;
                    if *self.running.borrow() && !shutting_down {
                        interval
                    } else {
                        // Not unfenced yet, or handing over leaderships: ask again soon, the
                        // controller decides on heartbeats.
                        retry.max(Duration::from_millis(100)).min(interval)
                    }
                }
                Err(LifecycleError::Reregister(reason)) => {
                    tracing::info!(reason, "registering again");
                    epoch = None;
                    let _ = self.running.send(false);
                    Duration::ZERO
                }
                Err(LifecycleError::Retry(reason)) => {
                    tracing::debug!(
                        controller = target,
                        reason,
                        "controller request failed; trying the next"
                    );
                    failed = Some(target);
                    if shutting_down {
                        // No controller to hand leaderships over: once none has answered for
                        // a heartbeat interval (a controller failover takes far less), stop;
                        // the last node of a cluster that has lost its quorum would otherwise
                        // wait out the whole bound.
                        let since = *unreachable_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= interval {
                            tracing::warn!(
                                waited_ms = since.elapsed().as_millis() as u64,
                                "no controller answers; shutting down without handing over"
                            );
                            let _ = self.may_shut_down.send(true);
                        }
                    }
                    retry
                }
                Err(LifecycleError::Fatal(reason)) => {
                    tracing::error!(
                        reason,
                        "the controller refuses this broker; it stays fenced"
                    );
                    interval
                }
            };
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    _ = &mut sleep => break,
                    changed = want_shut_down.changed(), if !shutting_down && !handle_dropped => {
                        handle_dropped = changed.is_err();
                        if !handle_dropped {
                            break;
                        }
                    }
                    changed = self.controller.changed(), if !controller_gone => {
                        if changed.is_err() {
                            controller_gone = true;
                            continue;
                        }
                        let named = *self.controller.borrow_and_update();
                        if named != target && named >= 0 {
                            break;
                        }
                    }
                    changed = self.peer_shutting_down.changed(), if !peer_watch_gone && !shutting_down => {
                        if changed.is_err() {
                            peer_watch_gone = true;
                            continue;
                        }
                        if epoch.is_some() {
                            break;
                        }
                    }
                    changed = shutdown.changed() => {
                        if changed.is_err() || *shutdown.borrow() {
                            self.client.shutdown();
                            return;
                        }
                    }
                }
            }
        }
    }

    async fn register(&self, target: i32) -> Result<i64, LifecycleError> {
        let r = &self.registration;
        let cluster_id = self.cluster_id.clone();
        let request = BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(r.node_id))
            .with_cluster_id(StrBytes::from_string(cluster_id))
            .with_incarnation_id(r.incarnation_id)
            .with_listeners(
                r.listeners
                    .iter()
                    .map(|(name, e)| {
                        Listener::default()
                            .with_name(StrBytes::from_string(name.clone()))
                            .with_host(StrBytes::from_string(e.host.clone()))
                            .with_port(e.port)
                            .with_security_protocol(e.security_protocol)
                    })
                    .collect(),
            )
            .with_features(vec![Feature::default()
                .with_name(StrBytes::from_static_str("metadata.version"))
                .with_min_supported_version(crate::handlers::api_versions::METADATA_VERSION_LEVEL)
                .with_max_supported_version(
                    crate::handlers::api_versions::METADATA_VERSION_LEVEL,
                )])
            .with_rack(r.rack.clone().map(StrBytes::from_string));
        let response = self
            .client
            .send_with(target, RequestOptions::default(), move |_version| request)
            .await
            .map_err(|e| LifecycleError::Retry(e.to_string()))?;
        let body = response.body;
        match body.error_code {
            0 => Ok(body.broker_epoch),
            code if code == ApiError::InconsistentClusterId(String::new()).code() => {
                Err(LifecycleError::Fatal(format!(
                    "cluster id {} is not the cluster's",
                    self.cluster_id
                )))
            }
            code => Err(LifecycleError::Retry(format!("error code {code}"))),
        }
    }

    /// With `kafkaiq.leader.balancer=load`, the loads of the partitions this broker leads as
    /// our own tagged field of the heartbeat ([`crate::controller::decisions::LOAD_REPORT_TAG`]);
    /// with `count` nothing (the heartbeat is Kafka's). A partition without measurable load
    /// (every rate under one thousandth a second) is left out: the controller takes it as idle.
    fn load_report(&self) -> std::collections::BTreeMap<i32, bytes::Bytes> {
        use crate::controller::decisions::{encode_load_report, PartitionLoad, ReportedLoad};
        let mut fields = std::collections::BTreeMap::new();
        if self.config.elections.leader_balancer != crate::config::LeaderBalancer::Load {
            return fields;
        }
        let image = self.cache.image();
        let node_id = self.registration.node_id;
        let now_ms = crate::metrics::monotonic_ms();
        // What was measured while leading a partition another broker leads now goes: if the
        // leadership comes back, its load is measured afresh.
        self.context
            .topic_stats
            .retain_partition_loads(|topic, partition| {
                image
                    .topic(topic)
                    .and_then(|t| t.partitions.get(&partition))
                    .is_some_and(|p| p.leader == node_id)
            });
        let loads: Vec<ReportedLoad> = self
            .context
            .topic_stats
            .partition_loads(now_ms)
            .into_iter()
            .filter(|(_, rates)| rates.is_measurable())
            .filter_map(|((topic, partition), rates)| {
                let t = image.topic(&topic)?;
                (t.partitions.get(&partition)?.leader == node_id).then_some(ReportedLoad {
                    topic_id: t.id,
                    partition,
                    load: PartitionLoad {
                        bytes_in: rates.bytes_in,
                        bytes_out: rates.bytes_out,
                        requests: rates.requests,
                    },
                    measured_ms: rates.measured_ms,
                })
            })
            .collect();
        fields.insert(
            crate::controller::decisions::LOAD_REPORT_TAG,
            encode_load_report(&loads),
        );
        fields
    }

    async fn heartbeat(
        &self,
        target: i32,
        epoch: i64,
        want_shut_down: bool,
    ) -> Result<(), LifecycleError> {
        let node_id = self.registration.node_id;
        // Applied, not merely cached: the controller counts this broker caught up (and lets a
        // peer in controlled shutdown go) only once it acts on the image.
        let offset = self.cache.applied_offset() as i64;
        let request = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(node_id))
            .with_broker_epoch(epoch)
            .with_current_metadata_offset(offset)
            .with_want_fence(false)
            .with_want_shut_down(want_shut_down)
            .with_unknown_tagged_fields(self.load_report());
        let mut options = RequestOptions::default();
        if want_shut_down {
            // Handing over: a controller silent for an interval is given up on (see `run`).
            options = options.timeout(Duration::from_millis(
                self.config.kraft.broker_heartbeat_interval_ms,
            ));
        }
        let response = self
            .client
            .send_with(target, options, move |_version| request)
            .await
            .map_err(|e| LifecycleError::Retry(e.to_string()))?;
        let body = response.body;
        if body.error_code == ApiError::StaleBrokerEpoch.code()
            || body.error_code == ApiError::BrokerIdNotRegistered.code()
        {
            return Err(LifecycleError::Reregister(format!(
                "the controller does not know broker epoch {epoch} (error {})",
                body.error_code
            )));
        }
        if body.error_code != 0 {
            return Err(LifecycleError::Retry(format!(
                "error code {}",
                body.error_code
            )));
        }
        if want_shut_down && body.should_shut_down {
            tracing::info!("the controller lets this broker shut down: it leads nothing");
            let _ = self.may_shut_down.send(true);
        }
        let running = !body.is_fenced;
        if *self.running.borrow() != running {
            tracing::info!(
                fenced = body.is_fenced,
                caught_up = body.is_caught_up,
                "broker state"
            );
            let _ = self.running.send(running);
        }
        Ok(())
    }
}

enum LifecycleError {
    /// Try again, at the next candidate controller.
    Retry(String),
    /// The controller no longer knows this incarnation's epoch.
    Reregister(String),
    /// The controller will never accept this broker (another cluster's).
    Fatal(String),
}

/// Waits until the controller unfences this broker, saying every few seconds what it waits for.
pub(crate) async fn wait_until_running(mut running: watch::Receiver<bool>, config: &BrokerConfig) {
    let started = std::time::Instant::now();
    loop {
        if *running.borrow() {
            return;
        }
        match tokio::time::timeout(Duration::from_secs(5), running.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => tracing::info!(
                node_id = config.node_id,
                waited_s = started.elapsed().as_secs(),
                "waiting for the controller to unfence this broker"
            ),
        }
    }
}
