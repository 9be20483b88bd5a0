//! The cluster metadata image: an immutable snapshot of brokers, topics, partitions (leader,
//! leader epoch, partition epoch, replicas, ISR) and topic configs.
//!
//! The controller is the only writer: it appends [`MetadataRecord`]s to the metadata log; the
//! [`MetadataPublisher`] replays committed ones into a new image with [`MetadataImage::apply`],
//! publishes it in the [`MetadataCache`] and hands it to the [`ImageListener`]s. Readers
//! (handlers, the replica layer) hold an `Arc<MetadataImage>` from the cache and never see a
//! half-applied change. This module is a leaf: it depends on nothing else of the broker, and it
//! does no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use uuid::Uuid;

pub mod publisher;
pub mod records;

pub use publisher::MetadataPublisher;
pub use records::MetadataRecord;

/// A broker as registered with the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

/// One partition's registration (Kafka's `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// -1 when no leader is available.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Bumped on every change of this registration (ISR changes included).
    pub partition_epoch: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: BTreeMap<i32, PartitionRegistration>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    pub topics: BTreeMap<String, Arc<TopicImage>>,
    pub topic_names_by_id: HashMap<Uuid, String>,
    /// First producer id not yet handed out in a block (Kafka's `ProducerIdsRecord`).
    pub next_producer_id_block_start: i64,
    /// Dynamic broker configs (resource name "" = cluster default, else a node id).
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// How many records have been applied since the last snapshot (informational).
    pub records_applied: u64,
    /// The metadata log offset (Raft index) of the last batch applied: the image's version. A
    /// broker is caught up with the metadata log when its image has reached the controller's.
    pub metadata_offset: u64,
}

impl MetadataImage {
    pub fn empty(cluster_id: String, controller_id: i32) -> Self {
        MetadataImage {
            cluster_id,
            controller_id,
            ..Default::default()
        }
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&Arc<TopicImage>> {
        self.topic_names_by_id
            .get(id)
            .and_then(|name| self.topics.get(name))
    }

    /// Replays records onto a copy of this image. Records that refer to things that do not exist
    /// (a partition of an unknown topic) are logged and skipped: the log is the truth, and a
    /// replay must never panic on it.
    pub fn apply(&self, records: &[MetadataRecord]) -> MetadataImage {
        let mut next = self.clone();
        next.apply_in_place(records);
        next
    }

    /// [`MetadataImage::apply`] onto this image itself.
    pub fn apply_in_place(&mut self, records: &[MetadataRecord]) {
        for record in records {
            self.apply_one(record);
            self.records_applied += 1;
        }
    }

    fn apply_one(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::RegisterBroker(b) => {
                self.brokers.insert(b.node_id, b.clone());
            }
            MetadataRecord::Topic { name, topic_id } => {
                self.topic_names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name: name.clone(),
                        id: *topic_id,
                        partitions: BTreeMap::new(),
                        configs: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition {
                topic_id,
                partition,
                registration,
            } => match self.topic_mut(topic_id) {
                Some(topic) => {
                    topic.partitions.insert(*partition, registration.clone());
                }
                None => tracing::warn!(%topic_id, partition, "partition record for unknown topic"),
            },
            MetadataRecord::TopicConfig {
                topic_id,
                name,
                value,
            } => match self.topic_mut(topic_id) {
                Some(topic) => match value {
                    Some(v) => {
                        topic.configs.insert(name.clone(), v.clone());
                    }
                    None => {
                        topic.configs.remove(name);
                    }
                },
                None => tracing::warn!(%topic_id, name, "config record for unknown topic"),
            },
            MetadataRecord::BrokerConfig {
                resource,
                name,
                value,
            } => {
                let configs = self.broker_configs.entry(resource.clone()).or_default();
                match value {
                    Some(v) => {
                        configs.insert(name.clone(), v.clone());
                    }
                    None => {
                        configs.remove(name);
                    }
                }
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.topic_names_by_id.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::ProducerIds {
                next_block_start, ..
            } => {
                self.next_producer_id_block_start =
                    self.next_producer_id_block_start.max(*next_block_start);
            }
        }
    }

    /// Records that rebuild this image from an empty one: a snapshot's content.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut records: Vec<MetadataRecord> = self
            .brokers
            .values()
            .map(|b| MetadataRecord::RegisterBroker(b.clone()))
            .collect();
        for t in self.topics.values() {
            records.push(MetadataRecord::Topic {
                name: t.name.clone(),
                topic_id: t.id,
            });
            records.extend(
                t.configs
                    .iter()
                    .map(|(name, value)| MetadataRecord::TopicConfig {
                        topic_id: t.id,
                        name: name.clone(),
                        value: Some(value.clone()),
                    }),
            );
            records.extend(t.partitions.iter().map(|(&partition, reg)| {
                MetadataRecord::Partition {
                    topic_id: t.id,
                    partition,
                    registration: reg.clone(),
                }
            }));
        }
        for (resource, configs) in &self.broker_configs {
            records.extend(
                configs
                    .iter()
                    .map(|(name, value)| MetadataRecord::BrokerConfig {
                        resource: resource.clone(),
                        name: name.clone(),
                        value: Some(value.clone()),
                    }),
            );
        }
        if self.next_producer_id_block_start > 0 {
            records.push(MetadataRecord::ProducerIds {
                broker_id: -1,
                next_block_start: self.next_producer_id_block_start,
            });
        }
        records
    }

    fn topic_mut(&mut self, topic_id: &Uuid) -> Option<&mut TopicImage> {
        let name = self.topic_names_by_id.get(topic_id)?;
        self.topics.get_mut(name).map(Arc::make_mut)
    }
}

/// Reacts to every newly published image: the replica manager creates, leads, follows and
/// deletes partitions from here; the group coordinator loads and unloads its partitions. Called
/// once per published image, in commit order, never concurrently with itself.
pub trait ImageListener: Send + Sync {
    fn on_image(&self, previous: &MetadataImage, next: &MetadataImage);
}

/// The current image, swapped atomically by the controller, read by everyone else.
///
/// A `std::sync::RwLock` around an `Arc`: readers hold the lock only long enough to clone the
/// `Arc`, so they never wait on a controller write in progress.
#[derive(Debug)]
pub struct MetadataCache {
    current: RwLock<Arc<MetadataImage>>,
}

impl MetadataCache {
    pub fn new(image: MetadataImage) -> Self {
        MetadataCache {
            current: RwLock::new(Arc::new(image)),
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn publish(&self, image: Arc<MetadataImage>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = image;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_builds_topics_partitions_and_configs_and_removes_them() {
        let id = Uuid::from_u128(7);
        let reg = PartitionRegistration {
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
        };
        let image = MetadataImage::empty("c".into(), 1).apply(&[
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            MetadataRecord::Partition {
                topic_id: id,
                partition: 0,
                registration: reg.clone(),
            },
            MetadataRecord::TopicConfig {
                topic_id: id,
                name: "retention.ms".into(),
                value: Some("5".into()),
            },
        ]);
        let t = image.topic("t").unwrap();
        assert_eq!(t.partitions[&0], reg);
        assert_eq!(t.configs["retention.ms"], "5");
        assert_eq!(image.topic_by_id(&id).unwrap().name, "t");
        assert_eq!(image.records_applied, 3);
        let image = image.apply(&[MetadataRecord::RemoveTopic { topic_id: id }]);
        assert!(image.topic("t").is_none());
        assert!(image.topic_by_id(&id).is_none());
    }
}
