//! One KafkaIQ process: startup, periodic tasks and shutdown. The services handlers use are
//! [`Context`]; this module only builds them, starts the server over them and stops them.
//!
//! Startup order: bind the listener (so the real port is known when configured as 0), read or
//! create `meta.properties` in every log dir, open and recover the logs (`LogManager`), replay
//! the metadata log and start the controller task, register this broker (which makes it leader
//! of its partitions again, bumping epochs as KRaft does when a broker returns), add the replica
//! manager and the group coordinator as listeners of published images, then serve. Shutdown
//! reverses it: stop serving and every task, checkpoint high watermarks, close every log (flush,
//! checkpoints, clean-shutdown marker).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kafkaiq_storage::LogManager;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::{SharedClock, SystemClock};
use crate::config::kraft::SecurityProtocol;
use crate::config::{BrokerConfig, ClientListener};
use crate::context::Context;
use crate::controller::new_cluster_id;

pub mod cleaner;
mod lifecycle;
use crate::fetch_session::FetchSessionCache;
use crate::group::service::GroupService;
use crate::limits::{
    HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS, LOG_PERIODIC_INTERVAL_MS,
    LOG_RETENTION_INITIAL_DELAY_MS, RUNTIME_PROBE_INTERVAL_MS,
};
use crate::metadata::{BrokerRegistration, MetadataCache, MetadataImage};
use crate::producer_ids::ProducerIdManager;
use crate::replica::ReplicaManager;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    MetaProperties { path: PathBuf, reason: String },
    #[error("storage: {0}")]
    Storage(#[from] kafkaiq_storage::StorageError),
    #[error("metadata quorum: {0}")]
    Quorum(#[from] crate::quorum::durable::DurableError),
    #[error("metadata: {0}")]
    Metadata(#[from] crate::errors::ApiError),
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
}

impl From<crate::meta_properties::MetaPropertiesError> for StartupError {
    fn from(e: crate::meta_properties::MetaPropertiesError) -> Self {
        match e {
            crate::meta_properties::MetaPropertiesError::Io { path, source } => {
                StartupError::Io { path, source }
            }
            crate::meta_properties::MetaPropertiesError::Invalid { path, reason } => {
                StartupError::MetaProperties { path, reason }
            }
        }
    }
}

/// How often startup looks whether the quorum has written the cluster id.
const CLUSTER_ID_POLL_MS: u64 = 20;

/// A started node: its address, and the handles needed to stop it.
pub struct Node {
    /// The bound client listener (the first); for a node started without one, the advertised
    /// address.
    pub local_addr: SocketAddr,
    /// Every bound client listener: its name and address, in the order of `listeners`.
    pub client_addrs: Vec<(String, SocketAddr)>,
    /// The bound HTTP listener (`http.listener`: metrics, leadership page, JSON API), if any.
    pub http_addr: Option<SocketAddr>,
    pub context: Arc<Context>,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    /// In a cluster: the broker's controlled shutdown, run before anything stops.
    controlled_shutdown: Option<lifecycle::ControlledShutdown>,
    /// Turns true once every log dir has had an I/O error ([`Node::all_log_dirs_failed`]).
    log_dirs_failed: watch::Receiver<bool>,
    /// Closed at shutdown, once nothing publishes any more, before the logs are closed.
    publisher: Arc<crate::metadata::MetadataPublisher>,
    /// The log cleaner threads (brokers only); stopped before the logs are closed.
    cleaner: Option<Arc<cleaner::LogCleaner>>,
}

/// Installs the log manager's failure hook: the log dirs that failed so far, and a flag raised
/// once all of them have (Kafka's `LogManager#handleLogDirFailure`, which halts the broker then:
/// with no log dir left it cannot serve a partition, and its leaderships must move).
fn watch_log_dir_failures(log_manager: &LogManager) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    let total = log_manager.log_dirs().len();
    let failed = std::sync::Mutex::new(std::collections::BTreeSet::new());
    log_manager.on_log_dir_failure(Arc::new(move |dir: &std::path::Path, error: &str| {
        let mut failed = failed.lock().unwrap_or_else(|e| e.into_inner());
        if failed.insert(dir.to_path_buf()) {
            tracing::error!(dir = %dir.display(), error, "log dir failed");
            if failed.len() == total {
                tx.send_replace(true);
            } else {
                // Kafka keeps serving the partitions of its other dirs and tells the controller
                // which dir is offline; KafkaIQ does not yet, so they answer
                // KAFKA_STORAGE_ERROR until the broker restarts.
                tracing::warn!(
                    online = total - failed.len(),
                    "a log dir of several failed: its partitions stay offline until restart"
                );
            }
        }
    }));
    rx
}

/// Why a shutdown was not clean.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("storage: {0}")]
    Storage(#[from] kafkaiq_storage::StorageError),
    #[error("task {0} panicked: {1}")]
    TaskPanicked(&'static str, String),
}

impl Node {
    /// Starts a node with the system clock.
    pub async fn start(config: BrokerConfig) -> Result<Node, StartupError> {
        Self::start_with_clock(config, Arc::new(SystemClock)).await
    }

    /// Binds this node's listeners (so their real ports are known when configured as 0), then
    /// starts its services over them; see the module docs for the order.
    pub async fn start_with_clock(
        config: BrokerConfig,
        clock: SharedClock,
    ) -> Result<Node, StartupError> {
        let controller_listener = match config.kraft.controller_listener() {
            Some(l) => Some(bind(&l.host, l.port).await?),
            None => None,
        };
        // A controller-only node has no client listener (its `listener` is the controller's).
        let mut client = Vec::with_capacity(config.client_listeners.len());
        for served in &config.client_listeners {
            let l = &served.listener;
            let socket = bind(&l.host, l.port).await?;
            let addr = socket.local_addr().map_err(|source| StartupError::Bind {
                addr: format!("{}:{}", l.host, l.port),
                source,
            })?;
            client.push((socket, served.clone(), addr));
        }
        let client_addr = client.first().map(|(_, _, addr)| *addr);
        // The HTTP listener binds with the others, so a taken port stops startup naming it.
        let http_listener = match &config.http_listener {
            Some(l) => Some(bind(&l.host, l.port).await?),
            None => None,
        };
        let listeners = BoundListeners {
            bound_ports: client
                .iter()
                .map(|(_, served, addr)| (served.listener.name.clone(), addr.port()))
                .collect(),
            client_port: client_addr.map_or(config.listener.port, |a| a.port()),
            client,
            controller: controller_listener,
            http: http_listener,
        };
        let client_addrs = listeners
            .client
            .iter()
            .map(|(_, served, addr)| (served.listener.name.clone(), *addr))
            .collect();
        let mut node = Self::start_services(config, clock, listeners).await?;
        node.client_addrs = client_addrs;
        if let Some(addr) = client_addr {
            node.local_addr = addr;
        }
        Ok(node)
    }

    /// Starts every service of a node but no listener, for callers that hand frames to
    /// [`crate::server::dispatch::handle_frame`] themselves (benchmarks). The advertised
    /// endpoint is the configured one.
    pub async fn start_without_listener(
        config: BrokerConfig,
        clock: SharedClock,
    ) -> Result<Node, StartupError> {
        let port = config.advertised().port;
        let listeners = BoundListeners {
            client: Vec::new(),
            bound_ports: BTreeMap::new(),
            client_port: port,
            controller: None,
            http: None,
        };
        Self::start_services(config, clock, listeners).await
    }

    /// `meta.properties`, the logs, the metadata quorum and the controller thread, the replica
    /// manager and the group coordinator, the controller listener, this broker's registration
    /// (and, in a cluster, its heartbeats), the client listener, the periodic tasks.
    async fn start_services(
        config: BrokerConfig,
        clock: SharedClock,
        mut listeners: BoundListeners,
    ) -> Result<Node, StartupError> {
        if config.kraft.voters.is_empty() && !config.kraft.standalone {
            return Err(StartupError::Unsupported(
                "controller.quorum.bootstrap.servers without controller.quorum.voters: KafkaIQ \
                 needs the voters' ids, which a Kafka cluster learns at format time; list them \
                 in controller.quorum.voters"
                    .into(),
            ));
        }
        let meta = crate::meta_properties::load_meta_properties(
            &config.meta_properties_dirs(),
            config.node_id,
        )?;
        let proposed_cluster_id = meta.cluster_id.clone().unwrap_or_else(new_cluster_id);
        let config = Arc::new(config);
        let handle_limits = crate::limits::process_log_handle_limits();
        tracing::info!(
            open_log_files_max = handle_limits.open_log_files_max,
            index_maps_max = handle_limits.index_maps_max,
            open_files_limit = crate::limits::open_files_limit().ok(),
            max_map_count = crate::limits::max_map_count(),
            "bounds on open log files and index maps (least recently used beyond them reopen when next used)"
        );
        let opened = std::time::Instant::now();
        let log_manager = Arc::new(LogManager::open_with_limits(
            &config.log_dirs,
            config.default_log_config(),
            clock.now_ms(),
            handle_limits,
            config.log.num_recovery_threads_per_data_dir,
        )?);
        let handles = log_manager.handle_stats();
        tracing::info!(
            logs = log_manager.logs().len(),
            took_ms = opened.elapsed().as_millis() as u64,
            open_log_files = handles.open_log_files,
            index_maps = handles.index_maps,
            "logs loaded"
        );
        let log_dirs_failed = watch_log_dir_failures(&log_manager);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let (controller, publisher, controller_task) = if config.kraft.is_controller() {
            crate::controller::start(
                &config.kraft.metadata_log_dir,
                &proposed_cluster_id,
                config.clone(),
                cache.clone(),
                &quorum_peers(&config),
                shutdown_rx.clone(),
            )
            .await?
        } else {
            // A broker-only node observes the quorum: it fetches the committed metadata log
            // from the voters' controller listeners.
            crate::controller::observer::start(config.clone(), cache.clone(), shutdown_rx.clone())?
        };
        tasks.push(("controller", controller_task));

        let replicas = Arc::new(ReplicaManager::new(
            config.clone(),
            log_manager.clone(),
            clock.clone(),
        ));
        let groups = GroupService::new(
            &config,
            replicas.clone(),
            controller.clone(),
            cache.clone(),
            clock.clone(),
        );
        let producer_ids = Arc::new(ProducerIdManager::new(config.node_id));
        let txns = crate::txn::TxnService::new(
            &config,
            replicas.clone(),
            controller.clone(),
            cache.clone(),
            producer_ids.clone(),
            groups.clone(),
            clock.clone(),
        );
        let context = Arc::new(Context {
            node_id: config.node_id,
            cache: cache.clone(),
            controller: controller.clone(),
            producer_ids,
            txns: txns.clone(),
            replicas: replicas.clone(),
            fetch_sessions: FetchSessionCache::new(),
            clock: clock.clone(),
            groups: groups.clone(),
            config: config.clone(),
            topic_stats: Default::default(),
            fetch_served: Default::default(),
            request_stats: Default::default(),
            authentication_stats: Default::default(),
            runtime_stats: Default::default(),
            cleaner_stats: Default::default(),
            authorizer: Context::authorizer_of(&config),
        });
        // Voters must hear each other before the quorum can elect anyone.
        if let Some(listener) = listeners.controller.take() {
            let serve =
                crate::server::serve_controller(listener, context.clone(), shutdown_rx.clone());
            tasks.push(("controller listener", tokio::spawn(serve)));
        }
        let cluster_id = wait_for_cluster_id(&cache, &config).await;
        meta.complete(&cluster_id)?;

        let registration = registration(&config, &listeners);
        let mut controlled_shutdown = None;
        if config.kraft.standalone {
            // A single node's broker reads its own controller's image: registered and unfenced
            // at once, leading its partitions again under new epochs.
            let led = controller.register_broker(registration).await?;
            tracing::info!(partitions_led = led, "registered");
            publisher.add_listener(replicas.clone());
            // After the replica manager, so the partitions of __consumer_offsets exist when
            // the group coordinator is told it leads them.
            publisher.add_listener(groups.clone());
            publisher.add_listener(txns.clone());
        } else if !config.kraft.is_broker() {
            // A controller-only node (`process.roles=controller`): a voter that never registers
            // as a broker, hosts no partitions and serves no clients. Its replica manager only
            // follows the dynamic broker configs (the controller listener's key and trust
            // stores), and only once the controller has caught up with the quorum (its
            // `CatchUp`): until then the listener serves the stores of `server.properties`,
            // not per-node ones its own log replayed that may have been superseded while it
            // was down (Kafka's controllers apply nothing before their loader has caught up).
            tracing::info!("controller-only node: no broker registration");
            publisher.add_listeners_once_caught_up(vec![replicas.clone()], |_| false);
        } else {
            // The replica manager and the group coordinator act on nothing until this node has
            // caught up with the quorum: the replay at startup stops at the commit index last
            // persisted, and leaderships, epochs and deletions from there may be long
            // superseded. This incarnation's registration was committed after the node started,
            // so an image holding it holds everything committed before (Kafka's
            // `MetadataLoader` waits for the high watermark). Until then the applied offset a
            // heartbeat reports stays behind the registration, and the broker stays fenced.
            let (node_id, incarnation) = (config.node_id, registration.incarnation_id);
            let hosts: Vec<Arc<dyn crate::metadata::ImageListener>> =
                vec![replicas.clone(), groups.clone(), txns.clone()];
            publisher.add_listeners_once_caught_up(hosts, move |image| {
                image.holds_incarnation(node_id, incarnation)
            });
            let (mut lifecycle, controller_watch) = lifecycle::BrokerLifecycle::new(
                config.clone(),
                cluster_id.clone(),
                registration,
                cache.clone(),
                context.clone(),
            );
            publisher.add_listener(controller_watch);
            controlled_shutdown = Some(lifecycle.controlled_shutdown());
            let running = lifecycle.running();
            tasks.push((
                "broker lifecycle",
                tokio::spawn(lifecycle.run(shutdown_rx.clone())),
            ));
            lifecycle::wait_until_running(running, &config).await;
        }
        tracing::info!(
            node_id = config.node_id,
            %cluster_id,
            roles = %config.kraft.roles,
            "node started"
        );
        if config.kraft.is_broker() {
            for task in groups.start(shutdown_rx.clone()) {
                tasks.push(("group coordinator", task));
            }
            for task in txns.start(shutdown_rx.clone()) {
                tasks.push(("transaction coordinator", task));
            }
        }
        // The replica fetchers, the AlterPartition sender and the ISR expiry check; the
        // fetchers have stopped by the time these tasks end, before the logs are closed.
        tasks.extend(replicas.start(shutdown_rx.clone()));
        // The log cleaner: it cleans a log only once its partition has given it a high
        // watermark, so it may start before every partition has one.
        let cleaner = if config.kraft.is_broker() {
            Some(
                cleaner::LogCleaner::start(
                    &config.cleaner,
                    replicas.log_manager.clone(),
                    clock.clone(),
                    context.cleaner_stats.clone(),
                )
                .map_err(|source| StartupError::Io {
                    path: "log cleaner threads".into(),
                    source,
                })?,
            )
        } else {
            None
        };
        let cleaner = cleaner.map(Arc::new);
        if let Some(cleaner) = &cleaner {
            tasks.push((
                "log cleaner config",
                tokio::spawn(cleaner::follow_config(
                    cleaner.clone(),
                    replicas.clone(),
                    shutdown_rx.clone(),
                )),
            ));
        }
        tasks.push((
            "periodic",
            tokio::spawn(periodic(context.clone(), shutdown_rx.clone())),
        ));
        tasks.push((
            "runtime probe",
            tokio::spawn(runtime_probe(context.clone(), shutdown_rx.clone())),
        ));
        let http_addr = match listeners.http {
            Some(listener) => {
                let addr = listener.local_addr().ok();
                tracing::info!(addr = ?addr, "http listener: /metrics, /api, leadership page at /");
                let serve =
                    crate::server::http::serve(listener, context.clone(), shutdown_rx.clone());
                tasks.push(("http listener", tokio::spawn(serve)));
                addr
            }
            None => None,
        };
        let slots = crate::server::ConnectionSlots::new(&context);
        for (socket, served, addr) in listeners.client {
            tracing::info!(listener = %served.listener.name, protocol = %served.security.protocol, %addr, "listening");
            let serve = crate::server::serve(
                socket,
                served,
                slots.clone(),
                context.clone(),
                shutdown_rx.clone(),
            );
            tasks.push(("client listener", tokio::spawn(serve)));
        }
        Ok(Node {
            local_addr: SocketAddr::from(([127, 0, 0, 1], listeners.client_port)),
            client_addrs: Vec::new(),
            http_addr,
            context,
            shutdown_tx,
            tasks,
            controlled_shutdown,
            log_dirs_failed,
            publisher,
            cleaner,
        })
    }

    /// The bound address of the client listener `name` (upper case, as in `listeners`).
    pub fn listener_addr(&self, name: &str) -> Option<SocketAddr> {
        self.client_addrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, addr)| *addr)
    }

    /// Completes once every log dir of this node has had an I/O error (a full or failing disk):
    /// the binary then halts, as Kafka does, rather than stay a leader that can write nothing.
    pub async fn all_log_dirs_failed(&self) {
        let mut rx = self.log_dirs_failed.clone();
        // An error means the sender is gone, which happens only with the node: never completes.
        if rx.wait_for(|failed| *failed).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Completes with the reason once this node's controller thread stopped by itself (its
    /// metadata log cannot be written, or what it committed does not decode): the binary then
    /// halts, as Kafka's controller does on such a fault, rather than run on with no voter.
    pub async fn controller_failed(&self) -> String {
        self.context.controller.failed().await
    }

    /// Clean shutdown: in a cluster first a controlled shutdown (the controller moves this
    /// broker's leaderships to other ISR members while it still serves, so clients are
    /// redirected rather than timed out; at most `broker.session.timeout.ms`), then stop
    /// serving and every task, checkpoint high watermarks, close every log. A task that
    /// panicked makes the shutdown an error (after the logs are closed).
    pub async fn shutdown(mut self) -> Result<(), ShutdownError> {
        if let Some(controlled) = self.controlled_shutdown.take() {
            let bound = std::time::Duration::from_millis(
                self.context.config.kraft.broker_session_timeout_ms,
            );
            let started = std::time::Instant::now();
            tracing::info!("controlled shutdown: asking the controller to move leaderships away");
            if controlled.begin(bound).await {
                tracing::info!(
                    took_ms = started.elapsed().as_millis() as u64,
                    "controlled shutdown complete"
                );
            } else {
                tracing::warn!(
                    bound_ms = bound.as_millis() as u64,
                    "the controller did not complete the controlled shutdown in time; stopping anyway"
                );
            }
        }
        let _ = self.shutdown_tx.send(true);
        let mut panicked = None;
        for (name, task) in self.tasks {
            if let Err(e) = task.await {
                if e.is_panic() {
                    tracing::error!(task = name, "task panicked");
                    panicked.get_or_insert((name, panic_message(e.into_panic())));
                }
            }
        }
        let replicas = self.context.replicas.clone();
        let publisher = self.publisher.clone();
        let cleaner = self.cleaner.take();
        let closed = tokio::task::spawn_blocking(move || {
            // A cleaning in progress finishes (or is abandoned) before the logs close.
            if let Some(cleaner) = cleaner {
                cleaner.shutdown();
            }
            // What was committed before the controller stopped is applied first.
            publisher.close();
            if let Err(e) = replicas.checkpoint_high_watermarks() {
                tracing::error!(error = %e, "high watermark checkpoint at shutdown failed");
            }
            replicas.log_manager.shutdown()
        })
        .await;
        match closed {
            Ok(result) => result?,
            Err(e) => {
                panicked.get_or_insert(("log shutdown", panic_message(e.into_panic())));
            }
        }
        if let Some((name, message)) = panicked {
            return Err(ShutdownError::TaskPanicked(name, message));
        }
        tracing::info!("broker stopped cleanly");
        Ok(())
    }
}

/// The listeners bound before the services start.
struct BoundListeners {
    /// Every client listener, with its real address.
    client: Vec<(TcpListener, ClientListener, SocketAddr)>,
    /// The real port of each client listener, by name.
    bound_ports: BTreeMap<String, u16>,
    /// The first client listener's real port (or the configured one without a listener).
    client_port: u16,
    controller: Option<TcpListener>,
    http: Option<TcpListener>,
}

async fn bind(host: &str, port: u16) -> Result<TcpListener, StartupError> {
    let host = if host.is_empty() { "0.0.0.0" } else { host };
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    TcpListener::bind(&addr)
        .await
        .map_err(|source| StartupError::Bind { addr, source })
}

/// The voters of the metadata quorum, from `controller.quorum.voters` (a standalone node is
/// its own only voter).
fn quorum_peers(config: &BrokerConfig) -> crate::controller::QuorumPeers {
    if config.kraft.standalone {
        return crate::controller::QuorumPeers::single(config.node_id);
    }
    crate::controller::QuorumPeers {
        voters: config
            .kraft
            .voters
            .iter()
            .map(|v| (v.id as u64, format!("{}:{}", v.host, v.port)))
            .collect(),
        election_timeout_ms: config.kraft.election_timeout_ms,
    }
}

/// Waits until the metadata log holds the cluster id (the first active controller writes it),
/// saying every few seconds what it waits for.
async fn wait_for_cluster_id(cache: &MetadataCache, config: &BrokerConfig) -> String {
    let started = std::time::Instant::now();
    let mut next_log = Duration::from_secs(5);
    loop {
        let image = cache.image();
        if !image.cluster_id.is_empty() {
            return image.cluster_id.clone();
        }
        if started.elapsed() >= next_log {
            tracing::info!(
                voters = ?config.kraft.voter_ids(),
                waited_s = started.elapsed().as_secs(),
                "waiting for the metadata quorum to elect a controller"
            );
            next_log += Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_millis(CLUSTER_ID_POLL_MS)).await;
    }
}

/// This broker's registration: a new incarnation per process start, every advertised broker
/// listener with its security protocol (a listener's real port where it was configured as 0),
/// the rack.
fn registration(config: &BrokerConfig, bound: &BoundListeners) -> BrokerRegistration {
    let mut registration = BrokerRegistration::new(
        config.node_id,
        crate::controller::random_uuid(),
        config.broker_rack.clone(),
    );
    let protocol_of = |name: &str| {
        config
            .kraft
            .security_protocol_map
            .get(name)
            .copied()
            .unwrap_or(SecurityProtocol::Plaintext)
            .id()
    };
    let advertised = config.kraft.advertised_broker_listeners();
    if advertised.is_empty() {
        // Advertise what clients can connect to: the configured advertised listener, else the
        // listener with its real port and a connectable host.
        let a = config.advertised().clone();
        let port = if config.advertised_listener.is_none() || a.port == 0 {
            bound.client_port
        } else {
            a.port
        };
        return registration.with_listener(
            config.listener.name.clone(),
            connectable_host(&a.host),
            port,
            protocol_of(&config.listener.name),
        );
    }
    for l in advertised {
        let port = match bound.bound_ports.get(&l.name) {
            Some(real) if l.port == 0 => *real,
            _ => l.port,
        };
        registration = registration.with_listener(
            l.name.clone(),
            connectable_host(&l.host),
            port,
            protocol_of(&l.name),
        );
    }
    registration
}

fn connectable_host(host: &str) -> String {
    match host {
        "" | "0.0.0.0" | "::" => "127.0.0.1".to_owned(),
        h => h.to_owned(),
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Measures the runtime's poll gaps: sleeps until a deadline [`RUNTIME_PROBE_INTERVAL_MS`] ahead
/// and records how late it woke (`kafkaiq_runtime_wake_lateness_ms`). A task that blocks a
/// worker thread, or a worker waiting for a CPU, delays every task queued behind it; this is
/// how much.
async fn runtime_probe(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let period = Duration::from_millis(RUNTIME_PROBE_INTERVAL_MS);
    loop {
        let deadline = tokio::time::Instant::now() + period;
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            _ = tokio::time::sleep_until(deadline) => {
                ctx.runtime_stats
                    .woke_late(tokio::time::Instant::now().saturating_duration_since(deadline));
            }
        }
    }
}

/// High watermark checkpoints every 5 s; time-based flushes every second; retention every
/// `log.retention.check.interval.ms` (first after at most [`LOG_RETENTION_INITIAL_DELAY_MS`]), as
/// Kafka schedules it: records past `retention.ms` stay readable until the next check.
async fn periodic(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut hw_tick =
        tokio::time::interval(Duration::from_millis(HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS));
    let mut log_tick = tokio::time::interval(Duration::from_millis(LOG_PERIODIC_INTERVAL_MS));
    let retention_interval_ms = ctx.config.log.retention_check_interval_ms;
    let mut next_retention_ms =
        ctx.clock.now_ms() + retention_interval_ms.min(LOG_RETENTION_INITIAL_DELAY_MS);
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
            }
            _ = hw_tick.tick() => {
                let replicas = ctx.replicas.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(e) = replicas.checkpoint_high_watermarks() {
                        tracing::error!(error = %e, "high watermark checkpoint failed");
                    }
                }).await;
            }
            _ = log_tick.tick() => {
                let replicas = ctx.replicas.clone();
                let now = ctx.clock.now_ms();
                let retention_due = now >= next_retention_ms;
                if retention_due {
                    next_retention_ms = now + retention_interval_ms;
                }
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(e) = replicas.log_manager.run_periodic(now, retention_due) {
                        tracing::error!(error = %e, "periodic log maintenance failed");
                    }
                }).await;
            }
        }
    }
}
