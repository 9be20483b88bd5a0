//! In-process brokers, the kafkaiq binary on one node, and checks of the code and tables
//! themselves: one test binary for many files, so they are compiled and linked once. Each
//! module is one former test file; run one with `cargo test --test in_process broker_raw::`.

mod acls_raw;
mod architecture;
mod broker_failure_detection;
mod broker_raw;
mod cli;
mod client_node;
mod cluster_routing_raw;
#[path = "../common/mod.rs"]
mod common;
mod compat_raw;
mod delayed_fetch_raw;
mod dynamic_broker_configs;
mod fd_limits;
mod fetch_from_replica_raw;
mod group_raw;
mod hostile_frames_requests;
mod http_listener;
mod kafka_files_one_host;
mod kill9_restart;
mod leadership_insight;
mod local_cluster;
mod log_dirs_raw;
mod metadata_bounds_raw;
mod negative_matrix;
mod rdkafka_groups;
mod readme;
mod restart_loading;
mod security_listeners;
mod security_support;
mod topic_authz;
