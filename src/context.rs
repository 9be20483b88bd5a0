//! The services a request handler uses, and nothing else: no sockets, no startup.
//!
//! [`crate::node`] builds one `Context` per process and hands it to the server, which passes
//! each handler the parts it uses: the metadata image, the replica manager, the controller, the
//! group coordinator, the fetch session cache, config values, counters. No handler takes the
//! whole `Context`, so a handler is tested against the parts it takes.

use std::sync::Arc;

use crate::clock::SharedClock;
use crate::config::BrokerConfig;
use crate::controller::ControllerChannel;
use crate::fetch_session::FetchSessionCache;
use crate::group::service::GroupService;
use crate::metadata::{MetadataCache, MetadataImage};
use crate::metrics::{BrokerTopicStats, FetchServedStats, RequestStats, RuntimeStats};
use crate::producer_ids::ProducerIdManager;
use crate::replica::ReplicaManager;

/// State shared by every connection and handler.
pub struct Context {
    pub config: Arc<BrokerConfig>,
    pub node_id: i32,
    pub cache: Arc<MetadataCache>,
    pub controller: ControllerChannel,
    pub producer_ids: Arc<ProducerIdManager>,
    pub replicas: Arc<ReplicaManager>,
    pub fetch_sessions: FetchSessionCache,
    pub clock: SharedClock,
    pub groups: Arc<GroupService>,
    /// The transaction coordinator.
    pub txns: Arc<crate::txn::TxnService>,
    /// Bytes and messages in and out per topic (the Produce and Fetch handlers count them).
    pub topic_stats: BrokerTopicStats,
    /// Record bytes the Fetch handler sent to consumers (as leader, as follower) and followers.
    pub fetch_served: FetchServedStats,
    /// Requests handled and their time per API (`server::dispatch` counts them).
    pub request_stats: RequestStats,
    /// SASL authentications on the client listener (`server::connection` counts them).
    pub authentication_stats: crate::metrics::AuthenticationStats,
    /// The async runtime's wake-up lateness (`node::runtime_probe` observes it).
    pub runtime_stats: RuntimeStats,
    /// What the log cleaner threads report (`node::cleaner` fills them).
    pub cleaner_stats: Arc<crate::metrics::CleanerStats>,
    /// The authorizer's rules (`authorizer.class.name` and its keys); `None`: no authorizer,
    /// every principal may do everything.
    pub authorizer: Option<Arc<crate::metadata::acl::AuthorizerRules>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl Context {
    pub fn image(&self) -> Arc<MetadataImage> {
        self.cache.image()
    }

    /// The authorizer's rules `config` turns on, if any.
    pub fn authorizer_of(
        config: &BrokerConfig,
    ) -> Option<Arc<crate::metadata::acl::AuthorizerRules>> {
        config.authorizer.as_ref().map(|a| {
            Arc::new(crate::metadata::acl::AuthorizerRules {
                super_users: a.super_users.clone(),
                allow_everyone_if_no_acl_found: a.allow_everyone_if_no_acl_found,
            })
        })
    }
}
