//! KIP-951's leader hints: a NOT_LEADER_OR_FOLLOWER (or, in Fetch, FENCED_LEADER_EPOCH) answer
//! names the partition's current leader and epoch, and the response lists the endpoint of every
//! leader it names, so a client can retry at once without asking for metadata. Produce (v10+)
//! and Fetch (v16+) gather them the same way; each encodes them in its own message types.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::BrokerId;
use kafka_protocol::protocol::StrBytes;

use super::{alive_endpoint, str_bytes};
use crate::metadata::MetadataImage;

/// The leaders one response names, each endpoint kept once, in node id order.
pub(crate) struct CurrentLeaders<'a> {
    image: Arc<MetadataImage>,
    listener: &'a str,
    named: BTreeMap<i32, NodeEndpoint>,
}

/// A named leader's endpoint on the client's listener, in wire types.
pub(crate) struct NodeEndpoint {
    pub node_id: BrokerId,
    pub host: StrBytes,
    pub port: i32,
    pub rack: Option<StrBytes>,
}

impl<'a> CurrentLeaders<'a> {
    /// `image` is the one the response is answered from; `listener` the client's.
    pub(crate) fn new(image: Arc<MetadataImage>, listener: &'a str) -> Self {
        CurrentLeaders {
            image,
            listener,
            named: BTreeMap::new(),
        }
    }

    /// The current leader of a partition and its epoch, from the image, (-1, -1) for a
    /// partition it does not know; the leader's endpoint is kept if it is alive (Kafka's
    /// `getCurrentLeader` and the `nodeEndpoints` it fills).
    pub(crate) fn name(&mut self, topic: &str, partition: i32) -> (BrokerId, i32) {
        let (leader, epoch) = self
            .image
            .topic(topic)
            .and_then(|t| t.partitions.get(&partition))
            .map_or((-1, -1), |p| (p.leader, p.leader_epoch));
        if let Some((b, e)) = alive_endpoint(&self.image, self.listener, leader) {
            self.named.entry(leader).or_insert_with(|| NodeEndpoint {
                node_id: BrokerId(leader),
                host: str_bytes(&e.host),
                port: i32::from(e.port),
                rack: b.rack.as_deref().map(str_bytes),
            });
        }
        (BrokerId(leader), epoch)
    }

    /// The endpoints of the leaders named, as the response's `NodeEndpoints` entries.
    pub(crate) fn node_endpoints<T>(self, encode: impl Fn(NodeEndpoint) -> T) -> Vec<T> {
        self.named.into_values().map(encode).collect()
    }
}
