//! The `kafkaiq` binary: a single-node broker.
//!
//! `kafkaiq` with no arguments serves 127.0.0.1:9092 with data in ./kafkaiq-data.
//! `--config server.properties` reads Kafka property names; `--override key=value` (repeatable)
//! wins over the file. Unknown keys warn; an invalid value stops startup naming the key.
//! SIGINT / SIGTERM shut down cleanly (flush, checkpoints, clean-shutdown marker).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kafkaiq::config::{BrokerConfig, RawConfig};
use kafkaiq::node::Node;

#[derive(Debug, Parser)]
#[command(
    name = "kafkaiq",
    version,
    about = "A Kafka wire-protocol compatible broker"
)]
struct Args {
    /// A Kafka `server.properties` file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// `key=value` with a Kafka property name; repeatable; wins over --config.
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
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

    let mut raw = match &args.config {
        Some(path) => RawConfig::from_file(path)?,
        None => RawConfig::default(),
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
        let signals = ShutdownSignals::install()?;
        let running = Node::start(validated.config)
            .await
            .context("broker startup failed")?;
        signals.wait().await;
        tracing::info!("shutting down");
        running.shutdown().await.context("shutdown failed")?;
        Ok(())
    })
}

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

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
