//! Leadership insight: what `/metrics`, the leadership page and `/api/...` show, computed from
//! the metadata image and this node's replica manager at the moment they are asked for.
//!
//! - [`scrape`]: the Prometheus/OpenMetrics text of `/metrics`, with the names the JMX
//!   exporter rules of common Kafka dashboards (Strimzi's, Confluent's) give Kafka's MBeans.
//! - [`views`]: the JSON of `/api/brokers`, `/api/partitions` and `/api/quorum`, pure
//!   functions of an image and the local partitions' states, table tested.
//! - `page.html`: the leadership page at `/`, static, polling the JSON API.
//!
//! Who calls it: `server::http`, which owns the sockets. It reads; it never changes the
//! broker's state, and it holds no lock but a partition's, briefly, to copy its state.

pub mod scrape;
pub mod views;

use std::collections::HashMap;

use kafkaiq_storage::TopicPartition;

use crate::context::Context;
use crate::replica::partition::PartitionState;

/// The leadership page: one static file, no build step.
pub const PAGE_HTML: &str = include_str!("page.html");

/// What this node holds of one partition it hosts.
#[derive(Debug, Clone)]
pub struct LocalPartition {
    /// The replica state as the replica manager holds it.
    pub state: PartitionState,
    pub log_end_offset: i64,
    /// Where read_committed consumers stop: open transactions hold it below the high watermark.
    pub last_stable_offset: i64,
    /// Transactions begun on the partition with no marker yet.
    pub open_transactions: usize,
    /// The load measured here as its leader (what the load balancer weighs), if any.
    pub load: Option<crate::metrics::LoadRates>,
}

/// A copy of every partition this node hosts.
pub fn local_partitions(ctx: &Context) -> HashMap<TopicPartition, LocalPartition> {
    let mut loads: HashMap<(String, i32), crate::metrics::LoadRates> = ctx
        .topic_stats
        .partition_loads(crate::metrics::monotonic_ms())
        .into_iter()
        .collect();
    ctx.replicas
        .partitions()
        .into_iter()
        .map(|p| {
            let log = p.log();
            let local = LocalPartition {
                state: p.state(),
                log_end_offset: log.log_end_offset(),
                last_stable_offset: log.last_stable_offset(),
                open_transactions: log.ongoing_transactions().len(),
                load: loads.remove(&(p.tp.topic.clone(), p.tp.partition)),
            };
            (p.tp.clone(), local)
        })
        .collect()
}
