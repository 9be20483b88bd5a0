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
//! live broker within its failover grace.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::broker_registration_request::{Feature, Listener};
use kafka_protocol::messages::{BrokerHeartbeatRequest, BrokerId, BrokerRegistrationRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

use crate::client::{Client, ClientConfig, Endpoint, RequestOptions};
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::{BROKER_LIFECYCLE_RETRY_MS, CONTROLLER_CHANGE_POLL_MS};
use crate::metadata::{BrokerRegistration, MetadataCache};

pub(crate) struct BrokerLifecycle {
    config: Arc<BrokerConfig>,
    cluster_id: String,
    registration: BrokerRegistration,
    cache: Arc<MetadataCache>,
    client: Client,
    /// Whether the controller has unfenced this incarnation.
    running: watch::Sender<bool>,
    /// The voter the next request goes to when the image names no active controller.
    next_candidate: usize,
}

impl BrokerLifecycle {
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        cluster_id: String,
        registration: BrokerRegistration,
        cache: Arc<MetadataCache>,
    ) -> BrokerLifecycle {
        let interval = Duration::from_millis(config.kraft.broker_heartbeat_interval_ms);
        let client = Client::new(
            ClientConfig {
                client_id: format!("kafkaiq-{}-lifecycle", config.node_id),
                // A heartbeat not answered within an interval is as good as lost: try the next
                // controller instead of waiting the default 30 s.
                request_timeout: interval.max(Duration::from_millis(500)),
                ..ClientConfig::default()
            },
            None,
        );
        for voter in &config.kraft.voters {
            let _ = client.set_endpoint(voter.id, Endpoint::new(voter.host.clone(), voter.port));
        }
        BrokerLifecycle {
            config,
            cluster_id,
            registration,
            cache,
            client,
            running: watch::channel(false).0,
            next_candidate: 0,
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
        loop {
            let target = self.target(failed);
            let outcome = match epoch {
                None => self.register(target).await.map(|e| {
                    tracing::info!(
                        controller = target,
                        broker_epoch = e,
                        "registered with the controller"
                    );
                    epoch = Some(e);
                }),
                Some(e) => self.heartbeat(target, e).await,
            };
            let wait = match outcome {
                Ok(()) => {
                    failed = None;
                    if *self.running.borrow() {
                        interval
                    } else {
                        // Not unfenced yet: ask again soon, the controller decides on heartbeats.
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
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let now = tokio::time::Instant::now();
                let step = deadline
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(CONTROLLER_CHANGE_POLL_MS));
                if step.is_zero() {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(step) => {}
                    changed = shutdown.changed() => {
                        if changed.is_err() || *shutdown.borrow() {
                            self.client.shutdown();
                            return;
                        }
                    }
                }
                if epoch.is_some() && failed.is_none() && self.controller_changed(target) {
                    break;
                }
            }
        }
    }

    /// The image names an active controller (a voter) other than `target`, the one the last
    /// request went to.
    fn controller_changed(&self, target: i32) -> bool {
        let named = self.cache.image().controller_id;
        named != target && self.config.kraft.voters.iter().any(|v| v.id == named)
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

    async fn heartbeat(&self, target: i32, epoch: i64) -> Result<(), LifecycleError> {
        let node_id = self.registration.node_id;
        let offset = self.cache.image().metadata_offset as i64;
        let request = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(node_id))
            .with_broker_epoch(epoch)
            .with_current_metadata_offset(offset)
            .with_want_fence(false)
            .with_want_shut_down(false);
        let response = self
            .client
            .send_with(target, RequestOptions::default(), move |_version| request)
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
