//! Forwarding to the active controller: a node whose voter does not lead the quorum sends the
//! metadata-changing requests it receives to the active controller's controller listener, as a
//! Kafka broker forwards them, and hands the answer back unchanged.
//!
//! The request goes out at the client's own version (the controller is KafkaIQ too, and serves
//! the same versions), so the answer can be passed on as it is. A client's request goes inside an
//! Envelope (KIP-590) that carries the client's principal and address, so the controller checks
//! it as the client's, as Kafka's controller does; the forwarding broker's own principal needs
//! only CLUSTER_ACTION. A request of the node's own (creating a topic on first use) goes as it
//! is, as the node's. While no active controller is
//! known, or the one known cannot be reached (it died and the quorum is electing another), the
//! request waits and is sent again, as Kafka's forwarding channel does, for up to
//! [`FORWARD_RETRY`]; after that, or when a request may have reached a controller that then
//! went away, the caller gets NOT_CONTROLLER, which clients retry.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use crate::client::{Client, ClientConfig, ClientError, Endpoint, RequestOptions};
use crate::errors::ApiError;
use crate::limits::CONTROLLER_FORWARD_TIMEOUT_MS;

/// How long a forwarded request waits for an active controller it can reach.
pub(crate) const FORWARD_RETRY: Duration = Duration::from_secs(15);
/// Pauses between attempts, doubling from the first to the last.
const FORWARD_BACKOFF_MIN: Duration = Duration::from_millis(25);
const FORWARD_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// What the controller thread tells the rest of the node about the quorum, without a round
/// trip through its queue: written only by carrying out the core's
/// [`Report`](super::command::Report)s.
#[derive(Debug)]
pub(crate) struct QuorumState {
    /// Whether this node's voter is the active controller.
    pub(crate) active: AtomicBool,
    /// The quorum leader as this voter knows it (-1 when none).
    pub(crate) leader: AtomicI32,
    /// The quorum as this voter last saw it (DescribeQuorum).
    pub(crate) status: std::sync::Mutex<QuorumDescription>,
    /// Leader elections this voter committed as active controller.
    pub(crate) stats: crate::metrics::ControllerStats,
    /// The controller-listener connection carrying each peer voter's accepted messages (the
    /// controller thread's binding): a chunk in a voter's name on another connection is refused.
    peer_links: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
}

/// What DescribeQuorum reports, as of the controller thread's last pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuorumDescription {
    pub leader_id: i32,
    pub leader_epoch: i32,
    /// The commit index: the metadata log's high watermark.
    pub high_watermark: i64,
    pub voters: Vec<VoterDescription>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VoterDescription {
    pub node_id: i32,
    pub log_end_offset: i64,
    /// Wall-clock ms of the last message from the voter (-1 if none yet).
    pub last_fetch_timestamp: i64,
    /// Wall-clock ms when the voter last had every entry the leader had (-1 if never).
    pub last_caught_up_timestamp: i64,
}

impl QuorumState {
    pub(crate) fn new() -> QuorumState {
        QuorumState {
            active: AtomicBool::new(false),
            leader: AtomicI32::new(-1),
            status: std::sync::Mutex::new(QuorumDescription::default()),
            stats: crate::metrics::ControllerStats::default(),
            peer_links: Default::default(),
        }
    }

    /// Notes that `connection` carries `voter`'s accepted messages (or, with `None`, that the
    /// one which did closed).
    pub(crate) fn link_peer(&self, voter: u64, connection: Option<u64>) {
        let mut links = self.peer_links.lock().unwrap_or_else(|e| e.into_inner());
        match connection {
            Some(c) => links.insert(voter, c),
            None => links.remove(&voter),
        };
    }

    /// The connection carrying `voter`'s accepted messages, if one does.
    pub(crate) fn peer_link(&self, voter: u64) -> Option<u64> {
        let links = self.peer_links.lock().unwrap_or_else(|e| e.into_inner());
        links.get(&voter).copied()
    }

    pub(crate) fn description(&self) -> QuorumDescription {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set(&self, active: bool, leader: i32) {
        self.active.store(active, Ordering::Release);
        self.leader.store(leader, Ordering::Release);
    }
}

/// Every voter's id and controller listener (`host`, `port`), from `controller.quorum.voters`.
pub(crate) fn voter_endpoints(config: &crate::config::BrokerConfig) -> Vec<(i32, String, u16)> {
    config
        .kraft
        .voters
        .iter()
        .map(|v| (v.id, v.host.clone(), v.port))
        .collect()
}

/// Whose request a broker forwards: the client's principal (`<type>:<name>`), address, client
/// id and correlation id, which the envelope carries to the controller.
#[derive(Debug, Clone)]
pub struct Origin {
    pub principal: String,
    pub address: std::net::IpAddr,
    pub client_id: Option<String>,
    pub correlation_id: i32,
}

/// The forwarding side of a [`super::ControllerChannel`].
#[derive(Clone)]
pub(crate) struct Forwarder {
    client: Client,
    node_id: i32,
    state: Arc<QuorumState>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl Forwarder {
    /// A forwarder to `voters` (id, controller-listener host, port), secured as `security`
    /// says (the controller listener's client security). Inside a tokio runtime.
    pub(crate) fn new(
        node_id: i32,
        voters: &[(i32, String, u16)],
        security: Option<Arc<crate::security::ClientSecurity>>,
        state: Arc<QuorumState>,
    ) -> Forwarder {
        let client = Client::new(
            ClientConfig {
                client_id: format!("kafkaiq-{node_id}-forwarding"),
                request_timeout: Duration::from_millis(CONTROLLER_FORWARD_TIMEOUT_MS),
                security,
                ..ClientConfig::default()
            },
            None,
        );
        for (id, host, port) in voters {
            if *id != node_id {
                let _ = client.set_endpoint(*id, Endpoint::new(host.clone(), *port));
            }
        }
        Forwarder {
            client,
            node_id,
            state,
        }
    }

    /// The active controller to forward to, if it is another node.
    fn target(&self) -> Result<i32, ApiError> {
        let leader = self.state.leader.load(Ordering::Acquire);
        if leader < 0 || leader == self.node_id {
            return Err(ApiError::NotController);
        }
        Ok(leader)
    }

    /// Sends `request` at `version` to the active controller and returns its answer; in an
    /// envelope when it is a client's (`origin`). A controller that does not take envelopes (it
    /// advertises no Envelope version: an older node during a rolling upgrade) or refuses one
    /// before handling what is in it (this node may not forward) gets the request as it is, as
    /// this node's, which checked the client first: a definite answer rather than NOT_CONTROLLER
    /// until the client gives up.
    pub(crate) async fn forward(
        &self,
        api_key: ApiKey,
        version: i16,
        request: RequestKind,
        origin: Option<&Origin>,
    ) -> Result<ResponseKind, ApiError> {
        let mut envelope = match origin {
            None => None,
            Some(origin) => Some(enveloped(api_key, version, &request, origin)?),
        };
        let deadline = tokio::time::Instant::now() + FORWARD_RETRY;
        let mut backoff = FORWARD_BACKOFF_MIN;
        loop {
            let failed = match self.target() {
                Ok(target) => {
                    let (key, v, attempt) = match &envelope {
                        Some(e) => (ApiKey::Envelope, 0, e.clone()),
                        None => (api_key, version, request.clone()),
                    };
                    let options = RequestOptions::default().versions(v, v);
                    match self
                        .client
                        .send_kind(target, options, key, move |_| attempt)
                        .await
                    {
                        Ok(r) if envelope.is_some() => {
                            let correlation_id = origin.map_or(0, |o| o.correlation_id);
                            match unwrap_envelope(api_key, version, correlation_id, r.body) {
                                Unwrapped::Answer(body) => return Ok(body),
                                // A controller that has just lost its leadership: the
                                // envelope goes again to the next one.
                                Unwrapped::Refused(code)
                                    if code == ApiError::NotController.code() =>
                                {
                                    Some((target, format!("envelope error {code}")))
                                }
                                Unwrapped::Refused(code) => {
                                    tracing::warn!(controller = target, api = ?api_key, "the controller refused this node's envelope (error {code}); forwarding as this node");
                                    envelope = None;
                                    continue;
                                }
                                Unwrapped::Unreadable(why) => {
                                    tracing::warn!(controller = target, api = ?api_key, "forwarding: {why}");
                                    return Err(ApiError::NotController);
                                }
                            }
                        }
                        Ok(r) => return Ok(r.body),
                        Err(ClientError::NoCommonVersion {
                            api_key: ApiKey::Envelope,
                            ..
                        }) => {
                            tracing::info!(
                                controller = target,
                                api = ?api_key,
                                "the controller takes no envelopes; forwarding as this node"
                            );
                            envelope = None;
                            continue;
                        }
                        Err(e) if e.may_have_been_sent() => {
                            tracing::debug!(controller = target, error = %e, "forwarding to the controller failed after sending");
                            return Err(ApiError::NotController);
                        }
                        Err(e) => Some((target, e.to_string())),
                    }
                }
                // This node became the active controller meanwhile: the client's retry is
                // served here.
                Err(_) if self.state.leader.load(Ordering::Acquire) == self.node_id => {
                    return Err(ApiError::NotController)
                }
                Err(_) => None,
            };
            if tokio::time::Instant::now() + backoff > deadline {
                if let Some((target, e)) = failed {
                    tracing::debug!(controller = target, error = %e, "forwarding to the controller failed");
                }
                return Err(ApiError::NotController);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(FORWARD_BACKOFF_MAX);
        }
    }
}

/// A client's request in an envelope.
fn enveloped(
    api_key: ApiKey,
    version: i16,
    request: &RequestKind,
    origin: &Origin,
) -> Result<RequestKind, ApiError> {
    use crate::protocol::envelope;
    let data = envelope::request_data(
        api_key,
        version,
        origin.correlation_id,
        origin.client_id.as_deref(),
        request,
    )
    .map_err(|e| ApiError::UnknownServerError(format!("cannot forward {api_key:?}: {e:#}")))?;
    Ok(RequestKind::Envelope(
        kafka_protocol::messages::EnvelopeRequest::default()
            .with_request_data(data)
            .with_request_principal(Some(envelope::encode_principal(&origin.principal)))
            .with_client_host_address(envelope::encode_address(origin.address)),
    ))
}

/// What an envelope response holds.
enum Unwrapped {
    /// The answer to the request in it.
    Answer(ResponseKind),
    /// The controller refused the envelope before handling the request in it.
    Refused(i16),
    /// It cannot be read (the request in it may have been handled).
    Unreadable(String),
}

/// The answer to a client's request, from the controller's envelope response.
fn unwrap_envelope(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: ResponseKind,
) -> Unwrapped {
    let ResponseKind::Envelope(r) = body else {
        return Unwrapped::Unreadable("the answer to an envelope is not an envelope".into());
    };
    if r.error_code != 0 {
        return Unwrapped::Refused(r.error_code);
    }
    let Some(data) = r.response_data else {
        return Unwrapped::Unreadable("the envelope came back empty".into());
    };
    let decoded = crate::client::wire::split_response(data, api_key, version).and_then(
        |(correlation, body)| {
            if correlation != correlation_id {
                return Err(format!(
                    "correlation id {correlation} in the envelope, {correlation_id} sent"
                ));
            }
            crate::client::wire::check_response_body(api_key, version, &body)?;
            let mut buf = body;
            ResponseKind::decode(api_key, &mut buf, version).map_err(|e| format!("{e:#}"))
        },
    );
    match decoded {
        Ok(body) => Unwrapped::Answer(body),
        Err(e) => Unwrapped::Unreadable(format!("the answer in the envelope does not decode: {e}")),
    }
}
