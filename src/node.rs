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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kafkaiq_storage::LogManager;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::{SharedClock, SystemClock};
use crate::config::BrokerConfig;
use crate::context::Context;
use crate::controller::new_cluster_id;
use crate::fetch_session::FetchSessionCache;
use crate::group::service::GroupService;
use crate::limits::{
    HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS, LOG_PERIODIC_INTERVAL_MS,
    LOG_RETENTION_CHECK_INTERVAL_MS_DEFAULT, LOG_RETENTION_INITIAL_DELAY_MS,
};
use crate::metadata::{security_protocol, BrokerRegistration, MetadataCache, MetadataImage};
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
}

const META_PROPERTIES: &str = "meta.properties";

/// Reads `meta.properties` from every log dir; all that exist must agree and carry our node id.
/// Returns the cluster id (new if no dir has one) after writing the file where missing.
fn ensure_meta_properties(dirs: &[PathBuf], node_id: i32) -> Result<String, StartupError> {
    let mut cluster_id: Option<String> = None;
    for dir in dirs {
        std::fs::create_dir_all(dir).map_err(|source| StartupError::Io {
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(META_PROPERTIES);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(StartupError::Io { path, source }),
        };
        let mut found_node = None;
        let mut found_cluster = None;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some((k, v)) = line.split_once('=') {
                match k.trim() {
                    "node.id" => found_node = v.trim().parse::<i32>().ok(),
                    "cluster.id" => found_cluster = Some(v.trim().to_owned()),
                    _ => {}
                }
            }
        }
        if found_node != Some(node_id) {
            return Err(StartupError::MetaProperties {
                path,
                reason: format!(
                    "stored node.id {found_node:?} does not match configured node.id {node_id}"
                ),
            });
        }
        match (&cluster_id, found_cluster) {
            (_, None) => {
                return Err(StartupError::MetaProperties {
                    path,
                    reason: "no cluster.id".into(),
                })
            }
            (Some(a), Some(b)) if *a != b => {
                return Err(StartupError::MetaProperties {
                    path,
                    reason: format!("cluster.id {b} differs from {a} in another log dir"),
                })
            }
            (_, Some(b)) => cluster_id = Some(b),
        }
    }
    let cluster_id = cluster_id.unwrap_or_else(new_cluster_id);
    for dir in dirs {
        let path = dir.join(META_PROPERTIES);
        if path.exists() {
            continue;
        }
        let text = format!(
            "#\n#Written by kafkaiq\nnode.id={node_id}\ndirectory.id={}\nversion=1\ncluster.id={cluster_id}\n",
            new_cluster_id()
        );
        write_file_durably(&path, text.as_bytes())?;
    }
    Ok(cluster_id)
}

fn write_file_durably(path: &Path, bytes: &[u8]) -> Result<(), StartupError> {
    let io = |source| StartupError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

/// A started node: its address, and the handles needed to stop it.
pub struct Node {
    /// The bound client listener; for a node started without one, the advertised address.
    pub local_addr: SocketAddr,
    pub context: Arc<Context>,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
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

    pub async fn start_with_clock(
        config: BrokerConfig,
        clock: SharedClock,
    ) -> Result<Node, StartupError> {
        let bind_host = match config.listener.host.as_str() {
            "" => "0.0.0.0".to_owned(),
            h => h.to_owned(),
        };
        let bind = format!("{bind_host}:{}", config.listener.port);
        let bind_error = |source| StartupError::Bind {
            addr: bind.clone(),
            source,
        };
        let listener = TcpListener::bind(&bind).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        let mut node = Self::start_services(config, clock, local_addr.port()).await?;
        node.local_addr = local_addr;
        let serve =
            crate::server::serve(listener, node.context.clone(), node.shutdown_tx.subscribe());
        node.tasks.push(("server", tokio::spawn(serve)));
        tracing::info!(%local_addr, "listening");
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
        Self::start_services(config, clock, port).await
    }

    /// `meta.properties`, the logs, the metadata log and the controller, this broker's
    /// registration, the replica manager, the group coordinator, the periodic tasks.
    async fn start_services(
        config: BrokerConfig,
        clock: SharedClock,
        bound_port: u16,
    ) -> Result<Node, StartupError> {
        let cluster_id = ensure_meta_properties(&config.log_dirs, config.node_id)?;
        let config = Arc::new(config);
        let log_manager = Arc::new(LogManager::open(
            &config.log_dirs,
            config.default_log_config(),
            clock.now_ms(),
        )?);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let (controller, publisher, controller_task) = crate::controller::start(
            &config.log_dirs[0],
            &cluster_id,
            config.clone(),
            cache.clone(),
            &crate::controller::QuorumPeers::single(config.node_id),
            shutdown_rx.clone(),
        )
        .await?;
        tasks.push(("controller", controller_task));

        // Advertise what clients can connect to: the configured advertised listener, else the
        // listener with its real port (port 0 binds an ephemeral one) and a connectable host.
        let advertised = config.advertised().clone();
        let host = match advertised.host.as_str() {
            "" | "0.0.0.0" | "::" => "127.0.0.1".to_owned(),
            h => h.to_owned(),
        };
        let port = if config.advertised_listener.is_none() || advertised.port == 0 {
            bound_port
        } else {
            advertised.port
        };
        let led = controller
            .register_broker(
                // A new incarnation per process start.
                BrokerRegistration::new(
                    config.node_id,
                    crate::controller::random_uuid(),
                    config.broker_rack.clone(),
                )
                .with_listener(
                    config.listener.name.clone(),
                    host,
                    port,
                    security_protocol::PLAINTEXT,
                ),
            )
            .await?;
        let replicas = Arc::new(ReplicaManager::new(
            config.clone(),
            log_manager.clone(),
            clock.clone(),
        ));
        publisher.add_listener(replicas.clone());
        // After the replica manager, so the partitions of __consumer_offsets exist when the
        // group coordinator is told it leads them.
        let groups = GroupService::new(
            &config,
            replicas.clone(),
            controller.clone(),
            cache.clone(),
            clock.clone(),
        );
        publisher.add_listener(groups.clone());
        tracing::info!(
            node_id = config.node_id,
            %cluster_id,
            partitions_led = led,
            "broker started"
        );

        let context = Arc::new(Context {
            node_id: config.node_id,
            cluster_id,
            cache,
            controller,
            producer_ids: ProducerIdManager::new(config.node_id),
            replicas: replicas.clone(),
            fetch_sessions: FetchSessionCache::new(),
            clock: clock.clone(),
            groups: groups.clone(),
            config,
        });
        for task in groups.start(shutdown_rx.clone()) {
            tasks.push(("group coordinator", task));
        }
        // The replica fetchers, the AlterPartition sender and the ISR expiry check; the
        // fetchers have stopped by the time these tasks end, before the logs are closed.
        tasks.extend(replicas.start(shutdown_rx.clone()));
        tasks.push((
            "periodic",
            tokio::spawn(periodic(context.clone(), shutdown_rx)),
        ));
        Ok(Node {
            local_addr: SocketAddr::from(([127, 0, 0, 1], port)),
            context,
            shutdown_tx,
            tasks,
        })
    }

    /// Clean shutdown: stop serving and every task, checkpoint high watermarks, close every
    /// log. A task that panicked makes the shutdown an error (after the logs are closed).
    pub async fn shutdown(self) -> Result<(), ShutdownError> {
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
        let closed = tokio::task::spawn_blocking(move || {
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

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// High watermark checkpoints every 5 s; time-based flushes every second; retention every
/// `log.retention.check.interval.ms` (first after at most [`LOG_RETENTION_INITIAL_DELAY_MS`]), as
/// Kafka schedules it: records past `retention.ms` stay readable until the next check.
async fn periodic(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut hw_tick =
        tokio::time::interval(Duration::from_millis(HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS));
    let mut log_tick = tokio::time::interval(Duration::from_millis(LOG_PERIODIC_INTERVAL_MS));
    let retention_interval_ms = ctx
        .config
        .value_of("log.retention.check.interval.ms")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(LOG_RETENTION_CHECK_INTERVAL_MS_DEFAULT);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_properties_is_created_then_checked() {
        let dir = std::env::temp_dir().join(format!("kafkaiq-meta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let id = ensure_meta_properties(std::slice::from_ref(&dir), 1).unwrap();
        assert_eq!(
            ensure_meta_properties(std::slice::from_ref(&dir), 1).unwrap(),
            id
        );
        let err = ensure_meta_properties(std::slice::from_ref(&dir), 2).unwrap_err();
        assert!(err.to_string().contains("node.id"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
