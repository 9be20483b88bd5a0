//! Multi-node clusters of `kafkaiq` processes (or Apache Kafka with
//! `KAFKAIQ_CLUSTER_BROKER=kafka`) through the `common::cluster` harness: one test binary for
//! many files, so they are compiled and linked once. Each module is one former test file; run
//! one with `cargo test --test clusters replication_cluster::`.

mod acls_cluster;
mod admin_cluster;
mod cluster_hostile_peers;
mod cluster_leadership;
mod cluster_observer;
mod cluster_roles;
#[path = "../common/mod.rs"]
mod common;
mod compaction_cluster;
mod epoch_recovery_cluster;
mod follower_fetch_cluster;
mod latency_cluster;
mod load_balancer_cluster;
mod log_dirs_cluster;
mod replication_cluster;
mod secure_inter_broker_cluster;
mod snapshot_transfer_cluster;
mod txn_verification_cluster;
