//! What the replica layer knows of the cluster's brokers: the registrations (broker epoch,
//! listeners, fencing, controlled shutdown) and the active controller of the latest image the
//! [`super::ReplicaManager`] applied.
//!
//! Shared by the manager, its partitions (ISR eligibility, KIP-841 broker epochs), the fetchers
//! (the leader's inter-broker endpoint, this node's own broker epoch) and the AlterPartition
//! sender (the controller). Replaced whole on every image that changes the brokers; readers
//! take an `Arc` of the snapshot and hold no lock while they use it. The lock is a leaf: it is
//! taken after any other and nothing is locked while it is held.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::metadata::{BrokerRegistration, MetadataImage};

/// The brokers of one image.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BrokerSnapshot {
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// The active controller, as the image names it (-1 when unknown).
    pub controller_id: i32,
}

impl BrokerSnapshot {
    pub fn of(image: &MetadataImage) -> BrokerSnapshot {
        BrokerSnapshot {
            brokers: image.brokers.clone(),
            controller_id: image.controller_id,
        }
    }

    pub fn broker(&self, node_id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&node_id)
    }

    /// The broker epoch of `node_id`'s registration, -1 if it has none.
    pub fn broker_epoch(&self, node_id: i32) -> i64 {
        self.broker(node_id).map_or(-1, |b| b.broker_epoch)
    }
}

/// The latest [`BrokerSnapshot`], swapped atomically.
#[derive(Debug, Default)]
pub struct BrokerView {
    current: RwLock<Arc<BrokerSnapshot>>,
}

impl BrokerView {
    pub fn new(snapshot: BrokerSnapshot) -> BrokerView {
        BrokerView {
            current: RwLock::new(Arc::new(snapshot)),
        }
    }

    pub fn get(&self) -> Arc<BrokerSnapshot> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the brokers of `image` if they differ from the current ones.
    pub fn update(&self, image: &MetadataImage) {
        let current = self.get();
        if current.controller_id == image.controller_id && current.brokers == image.brokers {
            return;
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) =
            Arc::new(BrokerSnapshot::of(image));
    }
}
