//! What a new metadata image means for this node's partitions (Kafka's
//! `TopicsDelta#localChanges`): which to lead, which to follow, which to stop and delete, and
//! which to reconfigure.
//!
//! A pure function of the previous image, the new one and this node's id, table tested below;
//! the [`super::ReplicaManager`] applies the result (Kafka's `ReplicaManager#applyDelta`). It
//! assumes nothing about who leads: a partition led elsewhere is followed, one whose replica
//! moved away is deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafkaiq_storage::TopicPartition;
use uuid::Uuid;

use crate::metadata::{MetadataImage, PartitionRegistration};

/// A partition to lead or follow, with the registration to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPartition {
    pub topic_id: Uuid,
    pub registration: PartitionRegistration,
}

/// The changes to this node's partitions between two images.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LocalChanges {
    /// Partitions this node hosted and no longer does: its replica moved away, or the partition
    /// or its topic was deleted — a topic re-created under the same name has a new id, so its
    /// old partitions are here and its new ones under `become_leader` / `become_follower`.
    /// Applied first, so those start from empty logs.
    pub delete: BTreeSet<TopicPartition>,
    /// Partitions this node leads whose registration is new or changed (a new leader epoch, or
    /// new replicas or ISR under the same leader).
    pub become_leader: BTreeMap<TopicPartition, LocalPartition>,
    /// Partitions another node leads (or none, leader -1) whose registration is new or
    /// changed.
    pub become_follower: BTreeMap<TopicPartition, LocalPartition>,
    /// Partitions hosted here whose topic configs changed: their log config and min ISR are
    /// updated.
    pub reconfigure: BTreeSet<TopicPartition>,
}

impl LocalChanges {
    pub fn is_empty(&self) -> bool {
        self.delete.is_empty()
            && self.become_leader.is_empty()
            && self.become_follower.is_empty()
            && self.reconfigure.is_empty()
    }
}

/// The local changes from `old` to `new` for node `node_id`.
///
/// A registration counts as changed when it differs in any field (Kafka compares partition
/// epochs; every change here bumps the partition epoch, so the two agree, and comparing the whole
/// registration cannot miss a change). Topics whose image is shared with the previous one
/// (`Arc::ptr_eq`, the replay touched nothing in them) are skipped without looking inside.
pub fn local_changes(old: &MetadataImage, new: &MetadataImage, node_id: i32) -> LocalChanges {
    let mut changes = LocalChanges::default();
    for (name, before) in &old.topics {
        let same_topic = new.topics.get(name).filter(|t| t.id == before.id);
        if same_topic.is_some_and(|t| Arc::ptr_eq(t, before)) {
            continue;
        }
        for (&index, was) in &before.partitions {
            if !was.replicas.contains(&node_id) {
                continue;
            }
            let still_hosted = same_topic
                .and_then(|t| t.partitions.get(&index))
                .is_some_and(|now| now.replicas.contains(&node_id));
            if !still_hosted {
                changes
                    .delete
                    .insert(TopicPartition::new(name.clone(), index));
            }
        }
    }
    for (name, topic) in &new.topics {
        let before = old.topics.get(name).filter(|t| t.id == topic.id);
        if before.is_some_and(|b| Arc::ptr_eq(b, topic)) {
            continue;
        }
        let configs_changed = before.is_some_and(|b| b.configs != topic.configs);
        for (&index, reg) in &topic.partitions {
            if !reg.replicas.contains(&node_id) {
                continue;
            }
            let tp = TopicPartition::new(name.clone(), index);
            if configs_changed {
                changes.reconfigure.insert(tp.clone());
            }
            if before.and_then(|b| b.partitions.get(&index)) == Some(reg) {
                continue;
            }
            let local = LocalPartition {
                topic_id: topic.id,
                registration: reg.clone(),
            };
            if reg.leader == node_id {
                changes.become_leader.insert(tp, local);
            } else {
                changes.become_follower.insert(tp, local);
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::MetadataRecord;

    const ME: i32 = 1;

    fn reg(
        replicas: &[i32],
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
    ) -> PartitionRegistration {
        PartitionRegistration {
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
            leader,
            leader_epoch,
            partition_epoch,
            leader_recovery_state: Default::default(),
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    fn topic(name: &str, id: u128, partitions: &[PartitionRegistration]) -> Vec<MetadataRecord> {
        let topic_id = Uuid::from_u128(id);
        let mut records = vec![MetadataRecord::Topic {
            name: name.into(),
            topic_id,
        }];
        for (i, r) in partitions.iter().enumerate() {
            records.push(MetadataRecord::Partition {
                topic_id,
                partition: i as i32,
                registration: r.clone(),
            });
        }
        records
    }

    fn image(records: Vec<MetadataRecord>) -> MetadataImage {
        MetadataImage::empty("c".into(), ME).apply(&records)
    }

    /// (leaders, followers, deletes, reconfigured) as "topic-partition" names.
    type Summary = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

    fn summary(c: &LocalChanges) -> Summary {
        let names =
            |it: &mut dyn Iterator<Item = &TopicPartition>| it.map(|tp| tp.to_string()).collect();
        (
            names(&mut c.become_leader.keys()),
            names(&mut c.become_follower.keys()),
            names(&mut c.delete.iter()),
            names(&mut c.reconfigure.iter()),
        )
    }

    fn s(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn local_changes_table() {
        let led = reg(&[1, 2], 1, 3, 5);
        let followed = reg(&[1, 2], 2, 3, 5);
        let elsewhere = reg(&[2, 3], 2, 0, 0);
        let base = topic("t", 1, &[led.clone(), followed.clone(), elsewhere.clone()]);
        let with = |records: Vec<MetadataRecord>| {
            let mut all = base.clone();
            all.extend(records);
            image(all)
        };
        let partition = |index: i32, r: PartitionRegistration| MetadataRecord::Partition {
            topic_id: Uuid::from_u128(1),
            partition: index,
            registration: r,
        };
        let cases: Vec<(&str, MetadataImage, MetadataImage, Summary)> = vec![
            (
                "first image: lead what names us leader, follow the rest we host, ignore others",
                MetadataImage::default(),
                image(base.clone()),
                (s(&["t-0"]), s(&["t-1"]), s(&[]), s(&[])),
            ),
            (
                "nothing changed",
                image(base.clone()),
                image(base.clone()),
                (s(&[]), s(&[]), s(&[]), s(&[])),
            ),
            (
                "a new leader epoch on a led partition",
                image(base.clone()),
                with(vec![partition(0, reg(&[1, 2], 1, 4, 6))]),
                (s(&["t-0"]), s(&[]), s(&[]), s(&[])),
            ),
            (
                "an ISR change under the same leader (partition epoch only)",
                image(base.clone()),
                with(vec![partition(
                    0,
                    PartitionRegistration {
                        isr: vec![1],
                        partition_epoch: 6,
                        ..led.clone()
                    },
                )]),
                (s(&["t-0"]), s(&[]), s(&[]), s(&[])),
            ),
            (
                "leadership moves to another node: follow",
                image(base.clone()),
                with(vec![partition(0, reg(&[1, 2], 2, 4, 6))]),
                (s(&[]), s(&["t-0"]), s(&[]), s(&[])),
            ),
            (
                "leadership comes here: lead",
                image(base.clone()),
                with(vec![partition(1, reg(&[1, 2], 1, 4, 6))]),
                (s(&["t-1"]), s(&[]), s(&[]), s(&[])),
            ),
            (
                "no leader at all: follow (leader -1)",
                image(base.clone()),
                with(vec![partition(0, reg(&[1, 2], -1, 4, 6))]),
                (s(&[]), s(&["t-0"]), s(&[]), s(&[])),
            ),
            (
                "our replica moves away from a led and a followed partition: delete both",
                image(base.clone()),
                with(vec![
                    partition(0, reg(&[2, 3], 2, 4, 6)),
                    partition(1, reg(&[2, 3], 2, 4, 6)),
                ]),
                (s(&[]), s(&[]), s(&["t-0", "t-1"]), s(&[])),
            ),
            (
                "a replica is added here: follow it",
                image(base.clone()),
                with(vec![partition(2, reg(&[2, 3, 1], 2, 0, 1))]),
                (s(&[]), s(&["t-2"]), s(&[]), s(&[])),
            ),
            (
                "the topic is deleted: delete only what we hosted",
                image(base.clone()),
                with(vec![MetadataRecord::RemoveTopic {
                    topic_id: Uuid::from_u128(1),
                }]),
                (s(&[]), s(&[]), s(&["t-0", "t-1"]), s(&[])),
            ),
            (
                "deleted and re-created under a new id: a delete plus a create",
                image(base.clone()),
                {
                    let mut records = base.clone();
                    records.push(MetadataRecord::RemoveTopic {
                        topic_id: Uuid::from_u128(1),
                    });
                    records.extend(topic("t", 2, &[reg(&[1], 1, 0, 0), reg(&[1, 2], 2, 0, 0)]));
                    image(records)
                },
                (s(&["t-0"]), s(&["t-1"]), s(&["t-0", "t-1"]), s(&[])),
            ),
            (
                "a config change reconfigures what we host, leader or follower",
                image(base.clone()),
                with(vec![MetadataRecord::TopicConfig {
                    topic_id: Uuid::from_u128(1),
                    name: "retention.ms".into(),
                    value: Some("5".into()),
                }]),
                (s(&[]), s(&[]), s(&[]), s(&["t-0", "t-1"])),
            ),
            (
                "a new topic with a partition per role",
                image(base.clone()),
                with(topic(
                    "u",
                    3,
                    &[
                        reg(&[1], 1, 0, 0),
                        reg(&[3, 1], 3, 0, 0),
                        reg(&[3], 3, 0, 0),
                    ],
                )),
                (s(&["u-0"]), s(&["u-1"]), s(&[]), s(&[])),
            ),
        ];
        for (what, old, new, expected) in cases {
            assert_eq!(summary(&local_changes(&old, &new, ME)), expected, "{what}");
        }
    }

    #[test]
    fn changes_carry_the_new_registration_and_topic_id() {
        let old = image(topic("t", 1, &[reg(&[1, 2], 1, 3, 5)]));
        let moved = reg(&[1, 2], 2, 4, 6);
        let new = old.apply(&[MetadataRecord::Partition {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            registration: moved.clone(),
        }]);
        let changes = local_changes(&old, &new, ME);
        assert_eq!(
            changes.become_follower[&TopicPartition::new("t", 0)],
            LocalPartition {
                topic_id: Uuid::from_u128(1),
                registration: moved,
            }
        );
        // Seen from the new leader, the same step is a become-leader.
        let theirs = local_changes(&old, &new, 2);
        assert_eq!(summary(&theirs).0, s(&["t-0"]));
        assert!(local_changes(&new, &new, ME).is_empty());
    }
}
