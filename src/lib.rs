//! # kafkaiq
//!
//! A Kafka wire-protocol compatible broker built around partition leadership.
//!
//! ## Layout (the path of a request)
//!
//! - [`server`]: tokio listener and connections; frames in, responses out in request order;
//!   [`server::dispatch`] routes a decoded request to its handler.
//! - [`protocol`]: bytes ↔ typed Kafka messages, guarded against hostile lengths.
//! - [`handlers`]: one file per API; typed request → calls on the core → typed response.
//! - [`replica`]: the leadership core — `ReplicaManager`, `Partition` (role, leader epoch, ISR,
//!   high watermark), the purgatory of delayed produce and fetch, pure decision functions.
//! - [`controller`]: the only writer of metadata; appends records to the metadata log and
//!   publishes [`metadata`] images. [`quorum`]: the metadata quorum's voter (raft-rs) and its
//!   files.
//! - [`fetch_session`]: incremental fetch sessions (KIP-227).
//! - [`group`]: the classic consumer-group coordinator, a pure state machine over records in
//!   `__consumer_offsets`.
//! - [`config`] (and [`config::topic`]): Kafka's property names, validated into typed config.
//! - [`errors`]: the one mapping from outcomes to Kafka error codes. [`limits`]: every bound.
//! - [`client`]: the inter-broker client — outbound connections to other nodes, version
//!   negotiation, bounded pipelining, deadlines, guarded responses.
//! - [`metrics`]: the counters and histograms the paths increment (Kafka's meters);
//!   [`insight`] computes the gauges and the leadership views, [`server::http`] serves them.
//! - [`clock`]: the only reader of wall-clock time. [`node`]: startup, periodic tasks, shutdown.
//! - Storage (segment logs, indexes, epoch cache, checkpoints) is the `kafkaiq-storage` crate.

pub mod allocator;
pub mod client;
pub mod clock;
pub mod config;
pub mod context;
pub mod controller;
pub mod errors;
pub mod fetch_session;
pub mod group;
pub mod handlers;
pub mod insight;
pub mod leadership_cli;
pub mod limits;
pub mod local_cluster;
pub mod meta_properties;
pub mod metadata;
pub mod metrics;
pub mod node;
pub mod producer_ids;
pub mod protocol;
pub mod quorum;
pub mod replica;
pub mod scram;
pub mod security;
pub mod server;
#[cfg(test)]
pub(crate) mod sim_rng;
pub mod txn;
