//! The `kafkaiq` binary: a single-node broker.
//!
//! `kafkaiq` with no arguments serves 127.0.0.1:9092 with data in ./kafkaiq-data.
//! `--config server.properties` reads Kafka property names; `--override key=value` (repeatable)
//! wins over the file. Unknown keys warn; an invalid value stops startup naming the key.
//! SIGINT / SIGTERM shut down cleanly (flush, checkpoints, clean-shutdown marker).

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use kafkaiq::broker::RunningBroker;
use kafkaiq::config::{BrokerConfig, RawConfig};

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
        let running = RunningBroker::start(validated.config)
            .await
            .context("broker startup failed")?;
        wait_for_signal().await?;
        tracing::info!("shutting down");
        running.shutdown().await.context("shutdown failed")?;
        Ok(())
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot watch SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
