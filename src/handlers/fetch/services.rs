//! What a Fetch uses.

use crate::fetch_session::FetchSessionCache;
use crate::metadata::MetadataCache;
use crate::metrics::{BrokerTopicStats, FetchServedStats};
use crate::replica::ReplicaManager;

/// What a Fetch uses, borrowed from the node's services by `server::dispatch`.
#[derive(Clone, Copy)]
pub struct FetchServices<'a> {
    /// The image topic ids are resolved in, read again for the answer's current leaders.
    pub cache: &'a MetadataCache,
    pub replicas: &'a ReplicaManager,
    pub sessions: &'a FetchSessionCache,
    /// The broker's `fetch.max.bytes`, the most any fetch may ask.
    pub fetch_max_bytes: usize,
    /// Bytes out per topic (consumers only) and record bytes served by role.
    pub topic_stats: &'a BrokerTopicStats,
    pub served: &'a FetchServedStats,
    /// The listener the client's connection came in on, whose leader endpoints are answered.
    pub listener: &'a str,
}
