//! # The inter-broker client
//!
//! Outbound Kafka connections from this node to other nodes, for the replica fetcher,
//! AlterPartition, broker registration and heartbeats, the Raft transport and request forwarding.
//! It is Kafka's `NetworkClient` with `NodeToControllerChannelManager`'s per-purpose channels,
//! written small: typed `kafka-protocol` requests in, typed responses (or a typed error) out.
//!
//! ## Model
//! - **One [`Client`] per purpose** (the fetcher to one source, AlterPartition, heartbeats, Raft,
//!   forwarding), each with its own [`ClientConfig`], as each Kafka manager has its own
//!   `NetworkClient`. A client holds at most one connection per destination node; it is opened
//!   by the first request, reused, and reopened after a failure once the reconnect backoff has
//!   passed (50 ms doubling to 1 s, ±20 %, from a seeded generator). A request that waited for a
//!   connection attempt that failed fails with [`ClientError::ConnectFailed`]; nothing retries.
//! - **Destinations are node ids.** The address comes from [`Client::set_endpoint`] or, failing
//!   that, the resolver given to [`Client::new`], looked up at every connection attempt. A new
//!   endpoint for a connected node closes its connection; the next one uses the new address.
//! - **Versions** are negotiated when a connection opens (ApiVersions v4, retried lower on
//!   UNSUPPORTED_VERSION as Kafka's clients do). A request goes out at min(our max, their max)
//!   of its API; the caller's builder gets the version and sets fields accordingly.
//! - **Pipelining with a bound**: up to `in_flight_requests_max` requests are written before the
//!   first is answered; later ones wait in a bounded queue. Kafka servers answer in request
//!   order, so responses are matched to the oldest request in flight and a different
//!   correlation id is a protocol error that closes the connection.
//! - **Deadlines**: a request's timeout covers queueing, connecting and the response. An
//!   unanswered request past its deadline fails with [`ClientError::Timeout`] and closes its
//!   connection, as Kafka's client does, so a late response can never be taken for another.
//! - **Fire-and-forget** ([`Client::send_and_forget`], [`Client::try_send_and_forget`]): the
//!   request takes an in-flight slot like any other; its response is still read, guarded and
//!   dropped, which keeps the stream in step. (Kafka servers answer every request except
//!   Produce with acks=0, which is recognised and holds no slot.)
//! - **Closing fails what is in flight**: end of stream, an I/O error, a timeout, a misordered
//!   or undecodable response, an oversized frame. Errors say whether the request may have been
//!   sent ([`ClientError::may_have_been_sent`]): callers that must not apply an operation twice
//!   treat those outcomes as unknown.
//! - **Observability**: [`Client::events`] streams [`ConnectionEvent`]s (connected, connect
//!   failed, closed and why) for every destination; [`Client::watch`] gives one destination's
//!   [`ConnectionStatus`], whose counters let a watcher see a close even if it reconnected since.
//!
//! ## Hostile responses
//! A response frame's size prefix is checked against the request's bound
//! ([`RequestOptions::response_bytes_max`], else `response_bytes_max`) before its body is read,
//! and the body buffer grows only as bytes arrive. `protocol::guard` walks *request* layouts
//! only, so [`response_layouts`] adds the response layouts of every API the client sends, in the
//! same DSL; each response is walked before `kafka-protocol` decodes it, so no wire count or
//! length reaches an allocation unchecked. An API without a response layout cannot be sent
//! ([`ClientError::UnsupportedApi`]).
//!
//! ## Security
//! With [`ClientConfig::security`] a connection opens with the TLS handshake (trusting the
//! node's trust store, presenting its key store when asked, checking the host name unless
//! `ssl.endpoint.identification.algorithm` is empty), then ApiVersions, then SaslHandshake v1 and
//! SaslAuthenticate v2 (PLAIN, SCRAM-SHA-256/512) with the inter-broker listener's JAAS
//! credentials. A failed handshake or authentication is a failed connection attempt: logged with
//! its reason, retried after the backoff. A PLAINTEXT connection keeps tokio's owned TCP halves.
//!
//! ## What it does not do
//! No retries, no GSSAPI or OAUTHBEARER, no metadata refresh or choice of node, no idle pings. Callers
//! own their retry policy; the client sends a request at most once.
//!
//! **Architecture Invariant:** every queue and map here is bounded (`limits`, "the inter-broker
//! client"); a response frame's size is checked before its body is allocated; no lock is held
//! across an await (one destination's connection is owned by one task).

mod backoff;
mod destination;
pub mod error;
pub mod response_layouts;
pub mod secure;
pub mod versions;
pub mod wire;

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::{ProduceRequest, RequestKind, ResponseKind};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::runtime::Handle;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::{timeout_at, Instant};

pub use backoff::{ReconnectBackoff, SplitMix64};
use destination::{Control, DestinationTask, Reply, Submit, Ticket};
pub use error::{ClientError, CloseReason};
pub use versions::{PeerVersions, VersionRange};
use wire::{decoder_of, DecodeFn, EncodeFn};

use crate::limits::{
    CLIENT_CONNECTION_IDLE_MS_MAX_DEFAULT, CLIENT_CONNECT_TIMEOUT_MS_DEFAULT,
    CLIENT_EVENTS_QUEUED_MAX, CLIENT_IN_FLIGHT_REQUESTS_DEFAULT, CLIENT_IN_FLIGHT_REQUESTS_MAX,
    CLIENT_NODES_MAX, CLIENT_QUEUED_REQUESTS_PER_NODE_MAX, CLIENT_RECONNECT_BACKOFF_MS_DEFAULT,
    CLIENT_RECONNECT_BACKOFF_MS_MAX_DEFAULT, CLIENT_REQUEST_TIMEOUT_MS_DEFAULT,
    CLIENT_RESPONSE_BYTES_MAX_DEFAULT, FETCH_RESPONSE_FRAME_OVERHEAD_BYTES,
};
use crate::protocol::ApiKey;

/// A node of the cluster (`node.id`): a broker, a controller, or both.
pub type NodeId = i32;

/// Where a node listens: a host name or address, and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Endpoint {
            host: host.into(),
            port,
        }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Self {
        Endpoint::new(addr.ip().to_string(), addr.port())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for Endpoint {
    type Err = String;

    /// `host:port` or `[v6-address]:port`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("endpoint {s:?} is not host:port"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = port
            .parse()
            .map_err(|_| format!("endpoint {s:?} has no valid port"))?;
        if host.is_empty() {
            return Err(format!("endpoint {s:?} has no host"));
        }
        Ok(Endpoint::new(host, port))
    }
}

/// Looks up a node's endpoint when no explicit one is set (for example from the metadata image's
/// registered brokers, or `controller.quorum.voters`). Called at every connection attempt, on
/// the destination's task: it must not block.
pub type Resolver = Arc<dyn Fn(NodeId) -> Option<Endpoint> + Send + Sync>;

/// How one client behaves. Durations and sizes follow Kafka's client defaults.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The request header's client id, e.g. `broker-1-fetcher-0`.
    pub client_id: String,
    /// `max.in.flight.requests.per.connection`: 1..=`CLIENT_IN_FLIGHT_REQUESTS_MAX`.
    pub in_flight_requests_max: usize,
    /// Requests a destination queues beyond those in flight.
    pub queued_requests_max: usize,
    /// `request.timeout.ms` (`replica.socket.timeout.ms` for the fetcher): the default timeout
    /// of a request, and the bound of the ApiVersions exchange that opens a connection.
    pub request_timeout: Duration,
    /// `socket.connection.setup.timeout.ms`: the bound of a TCP connect.
    pub connect_timeout: Duration,
    /// `reconnect.backoff.ms`.
    pub reconnect_backoff: Duration,
    /// `reconnect.backoff.max.ms`.
    pub reconnect_backoff_max: Duration,
    /// `connections.max.idle.ms`: a connection with nothing in flight this long is closed.
    pub connection_idle_max: Duration,
    /// The default bound of a response frame; see [`fetch_response_frame_bytes_max`].
    pub response_bytes_max: usize,
    /// Seeds the reconnect jitter; the same seed gives the same waits.
    pub jitter_seed: u64,
    /// TLS and SASL for destinations whose listener is SSL, SASL_PLAINTEXT or SASL_SSL (the
    /// inter-broker listener's, [`crate::config::BrokerConfig::inter_broker_client`]); `None`
    /// speaks PLAINTEXT.
    pub security: Option<Arc<crate::security::ClientSecurity>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "kafkaiq".to_owned(),
            in_flight_requests_max: CLIENT_IN_FLIGHT_REQUESTS_DEFAULT,
            queued_requests_max: CLIENT_QUEUED_REQUESTS_PER_NODE_MAX,
            request_timeout: Duration::from_millis(CLIENT_REQUEST_TIMEOUT_MS_DEFAULT),
            connect_timeout: Duration::from_millis(CLIENT_CONNECT_TIMEOUT_MS_DEFAULT),
            reconnect_backoff: Duration::from_millis(CLIENT_RECONNECT_BACKOFF_MS_DEFAULT),
            reconnect_backoff_max: Duration::from_millis(CLIENT_RECONNECT_BACKOFF_MS_MAX_DEFAULT),
            connection_idle_max: Duration::from_millis(CLIENT_CONNECTION_IDLE_MS_MAX_DEFAULT),
            response_bytes_max: CLIENT_RESPONSE_BYTES_MAX_DEFAULT,
            // Unseeded clients still jitter differently from each other.
            jitter_seed: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            security: None,
        }
    }
}

/// The frame bound for fetch responses: `replica.fetch.response.max.bytes` is soft, since a
/// response also carries the first batch of the first partition whole (at most
/// `message.max.bytes`), plus per-partition fields.
pub fn fetch_response_frame_bytes_max(
    response_bytes_max: usize,
    message_bytes_max: usize,
) -> usize {
    response_bytes_max
        .saturating_add(message_bytes_max)
        .saturating_add(FETCH_RESPONSE_FRAME_OVERHEAD_BYTES)
}

/// Per-request settings; `Default` uses the client's.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Overrides `request_timeout`.
    pub timeout: Option<Duration>,
    /// Narrows the versions the client may pick (say, Fetch ≤ 12 until topic ids are used).
    pub versions: Option<VersionRange>,
    /// Overrides `response_bytes_max` for this request's response frame.
    pub response_bytes_max: Option<usize>,
}

impl RequestOptions {
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub fn versions(mut self, min: i16, max: i16) -> Self {
        self.versions = Some((min, max));
        self
    }

    pub fn response_bytes_max(mut self, bytes: usize) -> Self {
        self.response_bytes_max = Some(bytes);
        self
    }
}

/// A response and the version its request went out at.
#[derive(Debug, Clone, PartialEq)]
pub struct Response<T> {
    pub version: i16,
    pub body: T,
}

/// Where a destination's connection stands.
#[derive(Debug, Clone)]
pub enum ConnectionState {
    /// No connection: none was needed yet, or it was closed on purpose (idle, `disconnect`).
    Idle,
    Connecting {
        endpoint: Endpoint,
    },
    Ready {
        endpoint: Endpoint,
        versions: Arc<PeerVersions>,
    },
    /// The last attempt failed or the connection broke; the next attempt (made when a request
    /// arrives) waits until `retry_at`.
    BackingOff {
        retry_at: Instant,
        failures: u32,
    },
    /// The destination was removed or the client shut down.
    Removed,
}

/// A destination's state and counters. The counters only grow, so a watcher that compares them
/// sees every close, even one followed at once by a reconnect.
#[derive(Debug, Clone)]
pub struct ConnectionStatus {
    pub state: ConnectionState,
    pub connections_opened: u64,
    pub connections_closed: u64,
    pub connect_failures: u64,
}

/// Something that happened to a destination's connection.
#[derive(Debug, Clone)]
pub struct ConnectionEvent {
    pub node: NodeId,
    pub kind: ConnectionEventKind,
}

/// `requests_failed` counts the awaited requests that failed with the event (fire-and-forget
/// messages have nobody to tell). A subscriber that falls `CLIENT_EVENTS_QUEUED_MAX` events
/// behind gets `RecvError::Lagged` and should re-read [`Client::watch`].
#[derive(Debug, Clone)]
pub enum ConnectionEventKind {
    Connected {
        endpoint: Endpoint,
        versions: Arc<PeerVersions>,
    },
    ConnectFailed {
        endpoint: Endpoint,
        reason: String,
        requests_failed: usize,
        retry_in: Duration,
    },
    /// `retry_in` is the backoff before the next attempt, `None` after a voluntary close.
    Closed {
        reason: CloseReason,
        requests_failed: usize,
        retry_in: Option<Duration>,
    },
}

/// Connections to other nodes for one purpose. Cheap to clone; the last clone dropped (or
/// [`Client::shutdown`]) closes every connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<ClientConfig>,
    client_id: StrBytes,
    resolver: Option<Resolver>,
    runtime: Handle,
    events: broadcast::Sender<ConnectionEvent>,
    /// Locked only to look up or add a destination, never across an await.
    destinations: Mutex<Destinations>,
}

#[derive(Default)]
struct Destinations {
    by_node: HashMap<NodeId, Destination>,
    shut_down: bool,
}

struct Destination {
    submits: mpsc::Sender<Submit>,
    control: watch::Sender<Control>,
    status: watch::Receiver<ConnectionStatus>,
}

impl Client {
    /// A client with no connections yet. Must be called inside a tokio runtime, on which the
    /// connections' tasks run.
    ///
    /// # Panics
    /// On an in-flight or queue bound outside its limits, or a backoff above its maximum.
    pub fn new(config: ClientConfig, resolver: Option<Resolver>) -> Client {
        assert!(
            (1..=CLIENT_IN_FLIGHT_REQUESTS_MAX).contains(&config.in_flight_requests_max),
            "in_flight_requests_max {} outside 1..={CLIENT_IN_FLIGHT_REQUESTS_MAX}",
            config.in_flight_requests_max
        );
        assert!(
            (1..=CLIENT_QUEUED_REQUESTS_PER_NODE_MAX).contains(&config.queued_requests_max),
            "queued_requests_max {} outside 1..={CLIENT_QUEUED_REQUESTS_PER_NODE_MAX}",
            config.queued_requests_max
        );
        assert!(config.reconnect_backoff <= config.reconnect_backoff_max);
        let (events, _) = broadcast::channel(CLIENT_EVENTS_QUEUED_MAX);
        Client {
            inner: Arc::new(Inner {
                client_id: StrBytes::from_string(config.client_id.clone()),
                config: Arc::new(config),
                resolver,
                runtime: Handle::current(),
                events,
                destinations: Mutex::default(),
            }),
        }
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Sets where `node` listens; wins over the resolver. If the node is connected elsewhere,
    /// that connection is closed (its requests in flight fail as disconnected).
    pub fn set_endpoint(&self, node: NodeId, endpoint: Endpoint) -> Result<(), ClientError> {
        self.with_destination(node, |destination| {
            destination.control.send_if_modified(|control| {
                let changed = control.endpoint.as_ref() != Some(&endpoint);
                control.endpoint = Some(endpoint);
                changed
            });
        })
    }

    /// Closes `node`'s connection now, failing what is in flight; the next request reconnects
    /// without waiting for a backoff.
    pub fn disconnect(&self, node: NodeId) {
        let destinations = self.inner.destinations.lock().expect("destinations lock");
        if let Some(destination) = destinations.by_node.get(&node) {
            destination
                .control
                .send_modify(|control| control.disconnects += 1);
        }
    }

    /// Forgets `node`: closes its connection, fails what is queued or in flight, drops its
    /// endpoint. A later request starts afresh.
    pub fn remove(&self, node: NodeId) {
        let removed = self
            .inner
            .destinations
            .lock()
            .expect("destinations lock")
            .by_node
            .remove(&node);
        if let Some(destination) = removed {
            destination
                .control
                .send_modify(|control| control.removed = true);
        }
    }

    /// Closes every connection and refuses further requests.
    pub fn shutdown(&self) {
        let mut destinations = self.inner.destinations.lock().expect("destinations lock");
        destinations.shut_down = true;
        for (_, destination) in destinations.by_node.drain() {
            destination
                .control
                .send_modify(|control| control.removed = true);
        }
    }

    /// Connection events of every destination, from now on.
    pub fn events(&self) -> broadcast::Receiver<ConnectionEvent> {
        self.inner.events.subscribe()
    }

    /// `node`'s connection status, updated as it changes.
    pub fn watch(&self, node: NodeId) -> Result<watch::Receiver<ConnectionStatus>, ClientError> {
        self.with_destination(node, |destination| destination.status.clone())
    }

    /// The versions `node` advertised, while it is connected.
    pub fn peer_versions(&self, node: NodeId) -> Option<Arc<PeerVersions>> {
        let destinations = self.inner.destinations.lock().expect("destinations lock");
        let status = destinations.by_node.get(&node)?.status.borrow();
        match &status.state {
            ConnectionState::Ready { versions, .. } => Some(versions.clone()),
            _ => None,
        }
    }

    /// Sends `request` (the same body at whichever version is picked) and awaits its response.
    pub async fn send<R>(
        &self,
        node: NodeId,
        request: R,
    ) -> Result<Response<R::Response>, ClientError>
    where
        R: Request + Send + 'static,
        R::Response: Send + 'static,
    {
        self.send_with(node, RequestOptions::default(), move |_| request)
            .await
    }

    /// Sends the request `build` makes for the picked version and awaits its response.
    pub async fn send_with<R, F>(
        &self,
        node: NodeId,
        options: RequestOptions,
        build: F,
    ) -> Result<Response<R::Response>, ClientError>
    where
        R: Request + Send + 'static,
        R::Response: Send + 'static,
        F: FnOnce(i16) -> R + Send + 'static,
    {
        let api_key = api_key_of::<R>()?;
        let decode = decoder_of::<R::Response>(api_key);
        let submit = self.submit(
            api_key,
            R::VERSIONS,
            &options,
            encoder_of(build),
            Some(decode),
        )?;
        let reply = self.call(node, submit).await?;
        let body = reply
            .body
            .downcast::<R::Response>()
            .expect("decoded as the request's response type");
        Ok(Response {
            version: reply.version,
            body: *body,
        })
    }

    /// Sends an untyped request (as forwarding does: the API is known only at run time) and
    /// awaits its response.
    pub async fn send_kind<F>(
        &self,
        node: NodeId,
        options: RequestOptions,
        api_key: ApiKey,
        build: F,
    ) -> Result<Response<ResponseKind>, ClientError>
    where
        F: FnOnce(i16) -> RequestKind + Send + 'static,
    {
        let encode: EncodeFn = Box::new(move |version, buf| {
            let request = build(version);
            let answered = !matches!(&request, RequestKind::Produce(p) if p.acks == 0);
            request.encode(buf, version)?;
            Ok(answered)
        });
        let decode: DecodeFn = Box::new(move |body, version| {
            wire::check_response_body(api_key, version, &body)?;
            let mut buf = body;
            ResponseKind::decode(api_key, &mut buf, version)
                .map(|body| Box::new(body) as wire::AnyBody)
                .map_err(|err| format!("{err:#}"))
        });
        let submit = self.submit(
            api_key,
            api_key.valid_versions(),
            &options,
            encode,
            Some(decode),
        )?;
        let reply = self.call(node, submit).await?;
        let body = reply
            .body
            .downcast::<ResponseKind>()
            .expect("decoded as ResponseKind");
        Ok(Response {
            version: reply.version,
            body: *body,
        })
    }

    /// Queues a request without awaiting its response, waiting for queue space (at most the
    /// request's timeout). The response is read and dropped; a failure shows only as a
    /// connection event. A message still queued when its deadline passes is not sent.
    pub async fn send_and_forget<R, F>(
        &self,
        node: NodeId,
        options: RequestOptions,
        build: F,
    ) -> Result<(), ClientError>
    where
        R: Request + Send + 'static,
        F: FnOnce(i16) -> R + Send + 'static,
    {
        let api_key = api_key_of::<R>()?;
        let submit = self.submit(api_key, R::VERSIONS, &options, encoder_of(build), None)?;
        let (deadline, timeout) = (submit.deadline, submit.timeout);
        let submits = self.submits(node)?;
        match timeout_at(deadline, submits.send(submit)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(ClientError::Shutdown),
            Err(_) => Err(ClientError::Timeout {
                node,
                api_key,
                sent: false,
                timeout,
            }),
        }
    }

    /// [`Client::send_and_forget`] without waiting: refused with [`ClientError::QueueFull`] if
    /// the destination's queue is full. Callable from any thread (the Raft driver's).
    pub fn try_send_and_forget<R, F>(
        &self,
        node: NodeId,
        options: RequestOptions,
        build: F,
    ) -> Result<(), ClientError>
    where
        R: Request + Send + 'static,
        F: FnOnce(i16) -> R + Send + 'static,
    {
        let api_key = api_key_of::<R>()?;
        let submit = self.submit(api_key, R::VERSIONS, &options, encoder_of(build), None)?;
        self.submits(node)?
            .try_send(submit)
            .map_err(|err| match err {
                mpsc::error::TrySendError::Full(_) => ClientError::QueueFull { node },
                mpsc::error::TrySendError::Closed(_) => ClientError::Shutdown,
            })
    }

    fn submit(
        &self,
        api_key: ApiKey,
        request_versions: kafka_protocol::protocol::VersionRange,
        options: &RequestOptions,
        encode: EncodeFn,
        decode: Option<DecodeFn>,
    ) -> Result<Submit, ClientError> {
        let ours = versions::our_versions(
            api_key,
            (request_versions.min, request_versions.max),
            options.versions,
        )
        .ok_or(ClientError::UnsupportedApi { api_key })?;
        let config = &self.inner.config;
        let timeout = options.timeout.unwrap_or(config.request_timeout);
        Ok(Submit {
            api_key,
            ours,
            encode,
            decode,
            response_bytes_max: options
                .response_bytes_max
                .unwrap_or(config.response_bytes_max),
            deadline: Instant::now()
                .checked_add(timeout)
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365)),
            timeout,
            ticket: None,
            reply: None,
        })
    }

    /// Queues `submit` and awaits its answer, both within its deadline.
    async fn call(&self, node: NodeId, mut submit: Submit) -> Result<Reply, ClientError> {
        let (reply_tx, reply_rx) = oneshot::channel();
        let ticket = Arc::new(Ticket::default());
        submit.reply = Some(reply_tx);
        submit.ticket = Some(ticket.clone());
        let (api_key, deadline, timeout) = (submit.api_key, submit.deadline, submit.timeout);
        // Dropping this future (the caller gave up) withdraws a request not yet written.
        let withdraw_on_drop = WithdrawOnDrop(ticket.clone());
        let timed_out = || ClientError::Timeout {
            node,
            api_key,
            sent: !ticket.withdraw(),
            timeout,
        };
        let submits = self.submits(node)?;
        match timeout_at(deadline, submits.send(submit)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(ClientError::Shutdown),
            Err(_) => return Err(timed_out()),
        }
        let result = match timeout_at(deadline, reply_rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ClientError::Shutdown),
            // If the request was sent, its connection closes at this same deadline.
            Err(_) => Err(timed_out()),
        };
        drop(withdraw_on_drop);
        result
    }

    fn submits(&self, node: NodeId) -> Result<mpsc::Sender<Submit>, ClientError> {
        self.with_destination(node, |destination| destination.submits.clone())
    }

    /// Runs `f` on `node`'s destination, creating it (and its task) on first use.
    fn with_destination<T>(
        &self,
        node: NodeId,
        f: impl FnOnce(&Destination) -> T,
    ) -> Result<T, ClientError> {
        let mut destinations = self.inner.destinations.lock().expect("destinations lock");
        if destinations.shut_down {
            return Err(ClientError::Shutdown);
        }
        let count = destinations.by_node.len();
        let destination = match destinations.by_node.entry(node) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                if count >= CLIENT_NODES_MAX {
                    return Err(ClientError::TooManyNodes {
                        max: CLIENT_NODES_MAX,
                    });
                }
                entry.insert(self.spawn_destination(node))
            }
        };
        Ok(f(destination))
    }

    fn spawn_destination(&self, node: NodeId) -> Destination {
        let inner = &self.inner;
        let config = inner.config.clone();
        let (submits_tx, submits_rx) = mpsc::channel(config.queued_requests_max);
        let (control_tx, control_rx) = watch::channel(Control::default());
        let (status_tx, status_rx) = watch::channel(ConnectionStatus {
            state: ConnectionState::Idle,
            connections_opened: 0,
            connections_closed: 0,
            connect_failures: 0,
        });
        // Each destination jitters on its own sequence, the same for the same seed and node.
        let seed = config.jitter_seed ^ (node as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let backoff =
            ReconnectBackoff::new(config.reconnect_backoff, config.reconnect_backoff_max, seed);
        let task = DestinationTask {
            node,
            client_id: inner.client_id.clone(),
            resolver: inner.resolver.clone(),
            submits: submits_rx,
            control: control_rx,
            status: status_tx,
            events: inner.events.clone(),
            backoff,
            failures: 0,
            retry_at: None,
            disconnects_seen: 0,
            config,
        };
        inner.runtime.spawn(task.run());
        Destination {
            submits: submits_tx,
            control: control_tx,
            status: status_rx,
        }
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.inner.config.client_id)
            .finish_non_exhaustive()
    }
}

struct WithdrawOnDrop(Arc<Ticket>);

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}

fn api_key_of<R: Request>() -> Result<ApiKey, ClientError> {
    Ok(ApiKey::try_from(R::KEY).expect("kafka-protocol's request types have known api keys"))
}

/// An [`EncodeFn`] from a typed builder; recognises the one request servers do not answer.
fn encoder_of<R, F>(build: F) -> EncodeFn
where
    R: Request + Send + 'static,
    F: FnOnce(i16) -> R + Send + 'static,
{
    Box::new(move |version, buf| {
        let request = build(version);
        let unanswered = (&request as &dyn Any)
            .downcast_ref::<ProduceRequest>()
            .is_some_and(|produce| produce.acks == 0);
        request.encode(buf, version)?;
        Ok(!unanswered)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_print() {
        let endpoint: Endpoint = "broker-1.example:9092".parse().unwrap();
        assert_eq!(endpoint, Endpoint::new("broker-1.example", 9092));
        assert_eq!(endpoint.to_string(), "broker-1.example:9092");
        let v6: Endpoint = "[::1]:19092".parse().unwrap();
        assert_eq!(v6, Endpoint::new("::1", 19092));
        assert_eq!(v6.to_string(), "[::1]:19092");
        assert!("nohost".parse::<Endpoint>().is_err());
        assert!(":9092".parse::<Endpoint>().is_err());
        assert!("h:99999".parse::<Endpoint>().is_err());
    }

    #[test]
    fn the_fetch_frame_bound_allows_one_whole_batch_beyond_the_soft_limit() {
        assert_eq!(
            fetch_response_frame_bytes_max(10 << 20, 1 << 20),
            (10 << 20) + (1 << 20) + FETCH_RESPONSE_FRAME_OVERHEAD_BYTES
        );
        assert_eq!(fetch_response_frame_bytes_max(usize::MAX, 1), usize::MAX);
    }
}
