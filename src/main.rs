//! The `kafkaiq` binary: one node, or a local cluster of them.
//!
//! `kafkaiq` with no arguments serves 127.0.0.1:9092 with data in ./kafkaiq-data.
//! `--config server.properties` reads Kafka property names; `--override key=value` (repeatable)
//! wins over the file. Unknown keys warn; an invalid value stops startup naming the key.
//! SIGINT / SIGTERM shut down cleanly (flush, checkpoints, clean-shutdown marker).
//!
//! `kafkaiq local-cluster --brokers 3` starts three combined nodes as child processes on
//! 127.0.0.1 and stops them together (see `kafkaiq::local_cluster`).
//!
//! `kafkaiq leadership brokers|partitions|history --bootstrap-server HOST:PORT` prints a running
//! cluster's leadership as text tables (see `kafkaiq::leadership_cli`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kafkaiq::config::{BrokerConfig, RawConfig};
use kafkaiq::local_cluster::{LocalCluster, CONTROLLER_PORT_OFFSET, MAX_BROKERS};
use kafkaiq::node::Node;

#[derive(Debug, Parser)]
#[command(
    name = "kafkaiq",
    version,
    about = "A Kafka wire-protocol compatible broker",
    args_conflicts_with_subcommands = true
)]
struct Args {
    /// A Kafka `server.properties` file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// `key=value` with a Kafka property name; repeatable; wins over --config.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Without a command: run one node.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start N nodes (each broker and controller) on 127.0.0.1 as child processes, print how to
    /// reach them, and stop them all on Ctrl-C.
    LocalCluster(LocalClusterArgs),
    /// Show a running cluster's leadership as text tables (brokers, partitions, history).
    Leadership(LeadershipArgs),
}

#[derive(Debug, clap::Args)]
struct LeadershipArgs {
    /// A broker's client listener, as Kafka's tools take it.
    #[arg(
        long,
        value_name = "HOST:PORT",
        global = true,
        default_value = "127.0.0.1:9092"
    )]
    bootstrap_server: String,
    #[command(subcommand)]
    view: LeadershipView,
}

#[derive(Debug, Subcommand)]
enum LeadershipView {
    /// Brokers: rack, state, controller, partitions led against preferred, imbalance.
    Brokers,
    /// Partitions: leader, preferred leader, epoch, replicas, ISR, offline replicas, status;
    /// offline, under-min-ISR and under-replicated first.
    Partitions {
        /// Only partitions whose ISR is smaller than their replica set.
        #[arg(long)]
        under_replicated: bool,
    },
    /// Leader and ISR changes with their causes, newest first: of one partition (`orders-0`)
    /// or of all. Read from the broker's HTTP listener (`http.listener`).
    History {
        /// TOPIC-PARTITION, e.g. orders-0; all partitions when left out.
        partition: Option<String>,
        /// The HTTP listener to ask; by default the bootstrap broker's `http.listener`.
        #[arg(long, value_name = "HOST:PORT")]
        http: Option<String>,
    },
}

fn leadership(args: LeadershipArgs) -> anyhow::Result<()> {
    use kafkaiq::leadership_cli::{run, View};
    let view = match args.view {
        LeadershipView::Brokers => View::Brokers,
        LeadershipView::Partitions { under_replicated } => View::Partitions { under_replicated },
        LeadershipView::History { partition, http } => View::History { partition, http },
    };
    let table = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(run(&args.bootstrap_server, view))
        .map_err(anyhow::Error::msg)?;
    print!("{table}");
    Ok(())
}

#[derive(Debug, clap::Args)]
struct LocalClusterArgs {
    /// How many nodes, with node ids 1..=N.
    #[arg(long, default_value_t = 3,
          value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_BROKERS)))]
    brokers: u8,
    /// The client port of node 1; node N listens on BASE_PORT + N - 1.
    #[arg(long, default_value_t = 9092)]
    base_port: u16,
    /// The controller port of node 1 [default: BASE_PORT + 10000].
    #[arg(long)]
    controller_base_port: Option<u16>,
    /// The HTTP port (metrics, leadership page) of node 1; node N's is HTTP_BASE_PORT + N - 1.
    #[arg(long, default_value_t = 9644)]
    http_base_port: u16,
    /// Where the nodes live: DIR/node-N/{server.properties,kafkaiq.log,data}.
    #[arg(long, default_value = "kafkaiq-cluster")]
    dir: PathBuf,
    /// `key=value` with a Kafka property name, given to every node; repeatable.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// How long each node may take to shut down cleanly before it is killed.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    stop_timeout: u64,
}

fn local_cluster(args: LocalClusterArgs) -> anyhow::Result<()> {
    let controller_base_port = match args.controller_base_port {
        Some(port) => port,
        None => args
            .base_port
            .checked_add(CONTROLLER_PORT_OFFSET)
            .with_context(|| {
                format!(
                    "--base-port {} leaves no room for controller ports {CONTROLLER_PORT_OFFSET} \
                     above it; give --controller-base-port",
                    args.base_port
                )
            })?,
    };
    let cluster = LocalCluster {
        brokers: args.brokers,
        base_port: args.base_port,
        controller_base_port,
        http_base_port: args.http_base_port,
        dir: args.dir,
        overrides: args.overrides,
        stop_timeout: Duration::from_secs(args.stop_timeout),
    };
    let exe = std::env::current_exe().context("cannot find the kafkaiq binary")?;
    // One thread: the nodes' parent-death signal follows the thread that started them.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(cluster.run(&exe))?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    kafkaiq::allocator::retain_freed_memory();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match args.command {
        Some(Command::LocalCluster(cluster)) => return local_cluster(cluster),
        Some(Command::Leadership(l)) => return leadership(l),
        None => {}
    }
    // A node only: a command prints nothing but its own output.
    raise_open_files_limit();

    let mut raw = match &args.config {
        Some(path) => RawConfig::from_file(path)?,
        None => RawConfig::embedded(),
    };
    for flag in &args.overrides {
        raw.apply_override(flag)?;
    }
    let validated = BrokerConfig::from_raw(raw).context("invalid configuration")?;
    for warning in &validated.warnings {
        tracing::warn!("{warning}");
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kafkaiq")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        // Watch the signals before binding: a SIGTERM that arrives while the broker is still
        // starting (the port already accepts) must shut it down cleanly, not kill it.
        let mut signals = ShutdownSignals::install()?;
        let start = Node::start(validated.config);
        tokio::pin!(start);
        let running = tokio::select! {
            started = &mut start => started.context("broker startup failed")?,
            _ = signals.wait() => {
                // A startup that can still finish soon is finished and shut down cleanly; one
                // waiting on something that may never come (a quorum with no majority up) is
                // abandoned, and its logs are recovered at the next start.
                match tokio::time::timeout(STARTUP_GRACE_ON_SIGNAL, &mut start).await {
                    Ok(started) => {
                        let node = started.context("broker startup failed")?;
                        tracing::info!("shutting down");
                        node.shutdown().await.context("shutdown failed")?;
                    }
                    Err(_) => tracing::warn!(
                        grace_s = STARTUP_GRACE_ON_SIGNAL.as_secs(),
                        "stopped before startup finished"
                    ),
                }
                return Ok(());
            }
        };
        tokio::select! {
            _ = signals.wait() => {}
            _ = running.all_log_dirs_failed() => {
                // Kafka's `Exit.halt(1)` in `LogManager#handleLogDirFailure`: no clean shutdown
                // (nothing could be flushed or checkpointed); the closed connections fence this
                // broker at once and its leaderships move to the ISR.
                tracing::error!("shutting down the broker because all log dirs have failed");
                std::process::exit(1);
            }
            reason = running.controller_failed() => {
                // Kafka's `ProcessTerminatingFaultHandler`: a controller fault halts the process.
                tracing::error!(reason, "stopping the node because its controller stopped");
                eprintln!("kafkaiq: stopping: the controller stopped: {reason}");
                std::process::exit(1);
            }
        }
        tracing::info!("shutting down");
        running.shutdown().await.context("shutdown failed")?;
        Ok(())
    })
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit for a node's logs and connections, and
/// logs the outcome.
fn raise_open_files_limit() {
    match kafkaiq::limits::raise_open_files_limit() {
        Ok(l) => {
            tracing::info!(
                soft_before = l.soft_before,
                soft = l.soft,
                hard = l.hard,
                reserve_for_connections = kafkaiq::limits::CONNECTION_DESCRIPTOR_RESERVE,
                "open files limit (RLIMIT_NOFILE)"
            );
            if l.soft <= kafkaiq::limits::CONNECTION_DESCRIPTOR_RESERVE {
                tracing::warn!(
                    soft = l.soft,
                    "the open files limit leaves no room for partition logs beyond the connection reserve"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read or raise RLIMIT_NOFILE"),
    }
}

/// How long a SIGTERM during startup waits for the startup to finish before abandoning it.
const STARTUP_GRACE_ON_SIGNAL: std::time::Duration = std::time::Duration::from_secs(5);

/// SIGINT and SIGTERM, registered up front so none is missed.
struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    async fn wait(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
