//! KIP-848 consumer groups in the machine: joining, revocation before reassignment, leaving,
//! session expiry, fencing, bad input, and replay after a restart.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest, TopicName,
};
use uuid::Uuid;

use super::*;
use crate::metadata::{LeaderRecoveryState, MetadataImage, PartitionRegistration, TopicImage};

const V: i16 = 1;

pub(super) fn image(topics: &[(&str, u8, i32)]) -> Arc<MetadataImage> {
    let mut img = MetadataImage::default();
    for (name, id, partitions) in topics {
        let id = Uuid::from_bytes([*id; 16]);
        let partitions = (0..*partitions)
            .map(|p| {
                (
                    p,
                    PartitionRegistration {
                        replicas: vec![1],
                        isr: vec![1],
                        leader: 1,
                        leader_epoch: 0,
                        partition_epoch: 0,
                        leader_recovery_state: LeaderRecoveryState::Recovered,
                        adding_replicas: vec![],
                        removing_replicas: vec![],
                    },
                )
            })
            .collect();
        img.topics.insert(
            name.to_string(),
            Arc::new(TopicImage {
                name: name.to_string(),
                id,
                partitions,
                configs: BTreeMap::new(),
                history: BTreeMap::new(),
            }),
        );
        img.topic_names_by_id.insert(id, name.to_string());
    }
    Arc::new(img)
}

pub(super) fn tid(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

pub(super) struct Hb {
    pub(super) member: String,
    pub(super) epoch: i32,
    pub(super) owned: Vec<(Uuid, Vec<i32>)>,
}

impl H {
    pub(super) fn cg_heartbeat(
        &mut self,
        img: &Arc<MetadataImage>,
        req: ConsumerGroupHeartbeatRequest,
    ) -> ConsumerGroupHeartbeatResponse {
        self.cg_heartbeat_as(img, req, Rights::open())
    }

    /// A heartbeat from a caller with `rights`.
    pub(super) fn cg_heartbeat_as(
        &mut self,
        img: &Arc<MetadataImage>,
        req: ConsumerGroupHeartbeatRequest,
        rights: Rights,
    ) -> ConsumerGroupHeartbeatResponse {
        let (token, out) = self.call(
            V,
            GroupRequest::ConsumerGroupHeartbeat(req, img.clone(), Arc::new(rights)),
        );
        match out.response_for(token) {
            Some(GroupResponse::ConsumerGroupHeartbeat(r)) => r.clone(),
            other => panic!("no heartbeat response: {other:?}"),
        }
    }

    pub(super) fn cg_join(
        &mut self,
        img: &Arc<MetadataImage>,
        member: &str,
        topics: &[&str],
    ) -> ConsumerGroupHeartbeatResponse {
        self.cg_heartbeat(
            img,
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(G)))
                .with_member_id(s(member))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(REBALANCE_MS)
                .with_subscribed_topic_names(Some(topics.iter().map(|t| TopicName(s(t))).collect()))
                .with_topic_partitions(Some(vec![])),
        )
    }

    pub(super) fn cg_beat(
        &mut self,
        img: &Arc<MetadataImage>,
        hb: &Hb,
    ) -> ConsumerGroupHeartbeatResponse {
        self.cg_heartbeat(
            img,
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(G)))
                .with_member_id(s(&hb.member))
                .with_member_epoch(hb.epoch)
                .with_rebalance_timeout_ms(-1)
                .with_topic_partitions(Some(
                    hb.owned
                        .iter()
                        .map(|(t, ps)| {
                            TopicPartitions::default()
                                .with_topic_id(*t)
                                .with_partitions(ps.clone())
                        })
                        .collect(),
                )),
        )
    }
}

pub(super) fn assigned(r: &ConsumerGroupHeartbeatResponse) -> Option<Vec<(Uuid, Vec<i32>)>> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .map(|tp| (tp.topic_id, tp.partitions.clone()))
            .collect()
    })
}

pub(super) fn count(a: &Option<Vec<(Uuid, Vec<i32>)>>) -> usize {
    a.as_ref()
        .map_or(0, |v| v.iter().map(|(_, p)| p.len()).sum())
}

#[test]
fn a_second_member_gets_partitions_only_after_the_first_revoked_them() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let a = h.cg_join(&img, "a", &["t"]);
    assert_eq!(a.error_code, 0, "{a:?}");
    assert_eq!(a.member_epoch, 1);
    assert_eq!(assigned(&a), Some(vec![(tid(1), vec![0, 1, 2, 3])]));
    // a holds its target: the configured interval (KafkaIQ's default, 2 s).
    assert_eq!(a.heartbeat_interval_ms, 2_000);

    let b = h.cg_join(&img, "b", &["t"]);
    assert_eq!(b.member_epoch, 2);
    assert_eq!(count(&assigned(&b)), 0, "a still owns everything");
    // b waits for partitions a still owns: the group reconciles, and b is asked back sooner.
    assert_eq!(b.heartbeat_interval_ms, 250);

    // a is asked to revoke two partitions; it stays at epoch 1 until it has.
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1, 2, 3])],
        },
    );
    assert_eq!(a.member_epoch, 1);
    assert_eq!(count(&assigned(&a)), 2);
    assert_eq!(a.heartbeat_interval_ms, 250, "a has partitions to revoke");
    // b still gets nothing while a holds them.
    let b = h.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    assert_eq!(b.member_epoch, 2);
    assert_eq!(count(&assigned(&b)), 0);
    assert_eq!(b.heartbeat_interval_ms, 250);
    // a revoked: it moves to epoch 2; then b gets the two partitions.
    let kept = assigned(&a).unwrap();
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: kept.clone(),
        },
    );
    assert_eq!(a.member_epoch, 2);
    // a holds its target, but b does not yet: the group is still reconciling.
    assert_eq!(a.heartbeat_interval_ms, 250);
    let b = h.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    assert_eq!(count(&assigned(&b)), 2);
    // Everyone holds its target: the group is stable, and the interval the configured one.
    assert_eq!(b.heartbeat_interval_ms, 2_000, "the group is stable");
    let mut all: Vec<i32> = kept[0].1.clone();
    all.extend(assigned(&b).unwrap()[0].1.clone());
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3]);

    // Described: stable, epochs 2, both members.
    let (token, out) = h.call(
        0,
        GroupRequest::ConsumerGroupDescribe(
            ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(G))]),
            img.clone(),
        ),
    );
    let Some(GroupResponse::ConsumerGroupDescribe(d)) = out.response_for(token) else {
        panic!()
    };
    let g = &d.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!((g.group_epoch, g.assignment_epoch), (2, 2));
    assert_eq!(g.assignor_name.as_str(), "uniform");
    assert_eq!(g.members.len(), 2);
}

#[test]
fn a_restart_replays_epochs_and_assignments_and_members_carry_on() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    h.cg_join(&img, "a", &["t"]);
    h.cg_join(&img, "b", &["t"]);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    let kept = assigned(&a).unwrap();
    h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: kept.clone(),
        },
    );
    let b = h.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    let b_owned = assigned(&b).unwrap();

    let mut r = h.restart(99);
    // Both carry on at epoch 2 with what they own; nothing is reassigned.
    let a = r.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 2,
            owned: kept.clone(),
        },
    );
    assert_eq!((a.error_code, a.member_epoch), (0, 2));
    let b = r.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: b_owned.clone(),
        },
    );
    assert_eq!((b.error_code, b.member_epoch), (0, 2));
    assert_eq!(
        assigned(&b),
        None,
        "no change, no assignment in the response"
    );
    // An unknown member is refused after the restart too.
    let x = r.cg_beat(
        &img,
        &Hb {
            member: "x".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    assert_eq!(x.error_code, E::UnknownMemberId.code());
}

#[test]
fn leaving_and_session_expiry_free_partitions_for_the_others() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    h.cg_join(&img, "a", &["t"]);
    let b = h.cg_join(&img, "b", &["t"]);
    assert_eq!(b.member_epoch, 2);
    // b leaves before it got anything; a is told to keep everything at a new epoch.
    let left = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("b"))
            .with_member_epoch(-1),
    );
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    assert_eq!(a.error_code, 0);
    assert_eq!(a.member_epoch, 3);

    // c joins, then a stops heartbeating: its session expires and c gets both partitions.
    let c = h.cg_join(&img, "c", &["t"]);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 3,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    let kept = assigned(&a).unwrap();
    h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 3,
            owned: kept,
        },
    );
    let c = h.cg_beat(
        &img,
        &Hb {
            member: "c".into(),
            epoch: c.member_epoch,
            owned: vec![],
        },
    );
    assert_eq!(count(&assigned(&c)), 1);
    let c_epoch = c.member_epoch;
    for _ in 0..10 {
        h.advance(1_000);
        let c = h.cg_beat(
            &img,
            &Hb {
                member: "c".into(),
                epoch: c_epoch,
                owned: assigned(&c).unwrap_or_default(),
            },
        );
        assert_eq!(c.error_code, 0);
    }
    h.advance(40_000);
    let c2 = h.cg_beat(
        &img,
        &Hb {
            member: "c".into(),
            epoch: c_epoch,
            owned: vec![],
        },
    );
    assert_eq!(c2.error_code, 0, "{c2:?}");
    assert_eq!(
        count(&assigned(&c2)),
        2,
        "a was fenced and its partition is free"
    );
    // a's late heartbeat is refused.
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 3,
            owned: vec![],
        },
    );
    assert_eq!(a.error_code, E::UnknownMemberId.code());
}

#[test]
fn bad_heartbeats_get_kafkas_errors_and_change_nothing() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    h.cg_join(&img, "a", &["t"]);
    let records = h.log.len();
    let fenced = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 7,
            owned: vec![],
        },
    );
    assert_eq!(fenced.error_code, E::FencedMemberEpoch.code());
    let unknown = h.cg_beat(
        &img,
        &Hb {
            member: "zz".into(),
            epoch: 1,
            owned: vec![],
        },
    );
    assert_eq!(unknown.error_code, E::UnknownMemberId.code());
    let regex = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("r"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(1000)
            .with_subscribed_topic_regex(Some(s("(unclosed")))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(regex.error_code, E::InvalidRegularExpression.code());
    let assignor = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("r"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(1000)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_server_assignor(Some(s("sticky")))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(assignor.error_code, E::UnsupportedAssignor.code());
    let no_id = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(1000)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(no_id.error_code, E::InvalidRequest.code());
    assert_eq!(h.log.len(), records, "refused heartbeats write nothing");

    // A classic member joining the consumer group is first given its member id (it then
    // lives in the consumer group, see `migration`).
    let (token, out) = h.join_v(9, "", None, &["t"]);
    let Some(GroupResponse::JoinGroup(j)) = out.response_for(token) else {
        panic!()
    };
    assert_eq!(j.error_code, E::MemberIdRequired.code());
    assert_eq!(h.log.len(), records, "MEMBER_ID_REQUIRED writes nothing");

    // Commits need the member's current epoch.
    let commit = |epoch: i32| {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("a"))
            .with_generation_id_or_member_epoch(epoch)
            .with_topics(vec![
                kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![
                        kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(5),
                    ]),
            ])
    };
    let (token, out) = h.call(9, GroupRequest::OffsetCommit(commit(0)));
    let Some(GroupResponse::OffsetCommit(c)) = out.response_for(token) else {
        panic!()
    };
    assert_eq!(
        c.topics[0].partitions[0].error_code,
        E::StaleMemberEpoch.code()
    );
    let (token, out) = h.call(9, GroupRequest::OffsetCommit(commit(1)));
    let Some(GroupResponse::OffsetCommit(c)) = out.response_for(token) else {
        panic!()
    };
    assert_eq!(c.topics[0].partitions[0].error_code, 0);
}

#[test]
fn a_regex_subscription_follows_new_topics() {
    let mut h = H::new();
    let img = image(&[("logs-a", 1, 1), ("other", 2, 1)]);
    let a = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("a"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(1000)
            .with_subscribed_topic_regex(Some(s("logs-.*")))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(assigned(&a), Some(vec![(tid(1), vec![0])]));
    let img = image(&[("logs-a", 1, 1), ("other", 2, 1), ("logs-b", 3, 2)]);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0])],
        },
    );
    assert_eq!(a.member_epoch, 2);
    assert_eq!(
        assigned(&a),
        Some(vec![(tid(1), vec![0]), (tid(3), vec![0, 1])])
    );
}

/// OffsetFetch v9 names the member and its epoch: a consumer group checks them, a classic
/// group (whose clients send their generation there) does not, as in Kafka.
#[test]
fn offset_fetch_checks_member_epochs_of_consumer_groups_only() {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    use kafka_protocol::messages::OffsetFetchRequest;
    let img = image(&[("t", 1, 1)]);
    let mut h = H::new();
    h.cg_join(&img, "a", &["t"]);
    h.commit(8, "classic", -1, "", &[("t", 0, 3)]);
    let fetch = |h: &mut H, group: &str, member: &str, epoch: i32| -> i16 {
        let req =
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_member_id(Some(s(member)))
                .with_member_epoch(epoch)
                .with_topics(None)]);
        let (t, out) = h.call(9, GroupRequest::OffsetFetch(req));
        let Some(GroupResponse::OffsetFetch(r)) = out.response_for(t) else {
            panic!()
        };
        r.groups[0].error_code
    };
    assert_eq!(fetch(&mut h, G, "a", 1), 0);
    assert_eq!(fetch(&mut h, G, "a", 0), E::StaleMemberEpoch.code());
    assert_eq!(fetch(&mut h, G, "nobody", 1), E::UnknownMemberId.code());
    assert_eq!(fetch(&mut h, "classic", "kgo-member", 7), 0);
    assert_eq!(fetch(&mut h, "no-such-group", "m", 3), 0);
}

// ------------------------------------------------------------------ review-848 sketches

impl H {
    fn cg_describe(
        &mut self,
        img: &Arc<MetadataImage>,
    ) -> kafka_protocol::messages::consumer_group_describe_response::DescribedGroup {
        let (token, out) = self.call(
            0,
            GroupRequest::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(G))]),
                img.clone(),
            ),
        );
        let Some(GroupResponse::ConsumerGroupDescribe(d)) = out.response_for(token) else {
            panic!()
        };
        d.groups[0].clone()
    }
}

/// Offset retention must not remove a consumer group that has members (Kafka's
/// `maybeDeleteGroup` only deletes empty groups).
#[test]
fn retention_keeps_a_consumer_group_with_members_but_no_offsets() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let a = h.cg_join(&img, "a", &["t"]);
    assert_eq!(a.member_epoch, 1);
    let out = h.c.expire_offsets(h.now + 1);
    let mut out = out;
    h.check(&mut out);
    assert!(out.records.is_empty(), "retention wrote {:?}", out.records);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    assert_eq!(a.error_code, 0, "the live group was deleted: {a:?}");
}

/// Offsets of a topic a consumer group subscribes to never expire while it does (Kafka's
/// `cleanupExpiredOffsets` skips `isSubscribedToTopic` topics).
#[test]
fn retention_keeps_offsets_of_subscribed_topics() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let a = h.cg_join(&img, "a", &["t"]);
    assert_eq!(
        h.commit(9, G, a.member_epoch, "a", &[("t", 0, 42)]),
        vec![0]
    );
    let retention = h.c.config().offsets_retention_ms;
    h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    let mut out = h.c.expire_offsets(h.now + retention + 1);
    h.check(&mut out);
    assert!(out.records.is_empty(), "retention wrote {:?}", out.records);
    assert_eq!(h.fetch(8, G, "t", 0).0, 42);
}

/// OffsetDelete of a subscribed topic of a consumer group: GROUP_SUBSCRIBED_TO_TOPIC.
#[test]
fn offset_delete_refuses_subscribed_topics_of_consumer_groups() {
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::OffsetDeleteRequest;
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let a = h.cg_join(&img, "a", &["t"]);
    assert_eq!(
        h.commit(9, G, a.member_epoch, "a", &[("t", 0, 42)]),
        vec![0]
    );
    let req = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_topics(vec![OffsetDeleteRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])]);
    let (t, out) = h.call(0, GroupRequest::OffsetDelete(req));
    let Some(GroupResponse::OffsetDelete(r)) = out.response_for(t) else {
        panic!()
    };
    let code = if r.error_code != 0 {
        r.error_code
    } else {
        r.topics[0].partitions[0].error_code
    };
    assert_eq!(code, E::GroupSubscribedToTopic.code());
    assert_eq!(h.fetch(8, G, "t", 0).0, 42);
}

/// A static member replaced under a new member id: its target assignment is written for the
/// new id (Kafka's `replaceMember`), so a restart rebuilds the same target.
#[test]
fn a_replaced_static_member_keeps_its_target_through_a_restart() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let join_static = |h: &mut H, member: &str| {
        h.cg_heartbeat(
            &img,
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(G)))
                .with_member_id(s(member))
                .with_instance_id(Some(s("i")))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(REBALANCE_MS)
                .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
                .with_topic_partitions(Some(vec![])),
        )
    };
    let s1 = join_static(&mut h, "s1");
    assert_eq!((s1.error_code, count(&assigned(&s1))), (0, 2));
    let left = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("s1"))
            .with_instance_id(Some(s("i")))
            .with_member_epoch(-2),
    );
    assert_eq!(left.error_code, 0);
    let s2 = join_static(&mut h, "s2");
    assert_eq!((s2.error_code, count(&assigned(&s2))), (0, 2), "{s2:?}");
    let before = h.cg_describe(&img);
    let mut r = h.restart(5);
    let after = r.cg_describe(&img);
    let target =
        |g: &kafka_protocol::messages::consumer_group_describe_response::DescribedGroup| {
            g.members
                .iter()
                .map(|m| (m.member_id.to_string(), m.target_assignment.clone()))
                .collect::<Vec<_>>()
        };
    assert_eq!(target(&before), target(&after), "target lost at replay");
}

/// What the retention bug leads to: the live group vanishes, the first member to rejoin
/// gets every partition while the other still owns its own.
#[test]
fn retention_never_removes_live_members() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    h.cg_join(&img, "a", &["t"]);
    h.cg_join(&img, "b", &["t"]);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    let kept = assigned(&a).unwrap();
    h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: kept.clone(),
        },
    );
    let b = h.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    let b_owned = assigned(&b).unwrap();
    assert_eq!(b_owned[0].1.len(), 1);
    // No offsets committed (auto commit off): the retention pass runs.
    let mut out = h.c.expire_offsets(h.now + 1);
    h.check(&mut out);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 2,
            owned: kept.clone(),
        },
    );
    assert_eq!(
        a.error_code, 0,
        "a fenced by the retention pass: {}",
        a.error_code
    );
}

#[test]
fn after_retention_a_rejoin_gets_only_free_partitions() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    h.cg_join(&img, "a", &["t"]);
    h.cg_join(&img, "b", &["t"]);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    let kept = assigned(&a).unwrap();
    h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: kept.clone(),
        },
    );
    let b = h.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    let b_owned = assigned(&b).unwrap();
    let mut out = h.c.expire_offsets(h.now + 1);
    h.check(&mut out);
    // The group survived: a carries on at its epoch, and a rejoin (epoch 0) while b still
    // owns its partition gets only what is free.
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 2,
            owned: kept.clone(),
        },
    );
    assert_eq!(a.error_code, 0);
    let a = h.cg_join(&img, "a", &["t"]);
    let a_now = assigned(&a).unwrap();
    let overlap = a_now[0].1.iter().any(|p| b_owned[0].1.contains(p));
    assert!(!overlap, "a got {a_now:?} while b still owns {b_owned:?}");
}

/// Kafka's static leave (epoch -2) clears the partitions pending revocation
/// (`consumerGroupStaticMemberGroupLeave`), so the others get them at once.
#[test]
fn a_static_leave_releases_partitions_pending_revocation() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let a = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("a"))
            .with_instance_id(Some(s("i")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(count(&assigned(&a)), 2);
    h.cg_join(&img, "b", &["t"]);
    let a = h.cg_beat(
        &img,
        &Hb {
            member: "a".into(),
            epoch: 1,
            owned: vec![(tid(1), vec![0, 1])],
        },
    );
    assert_eq!(count(&assigned(&a)), 1, "a must revoke one");
    let left = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("a"))
            .with_instance_id(Some(s("i")))
            .with_member_epoch(-2),
    );
    assert_eq!(left.error_code, 0);
    let b = h.cg_beat(
        &img,
        &Hb {
            member: "b".into(),
            epoch: 2,
            owned: vec![],
        },
    );
    assert_eq!(
        count(&assigned(&b)),
        1,
        "b still waits for a partition nobody consumes: {b:?}"
    );
}

/// Kafka 4.x counts a request with SubscribedTopicRegex (and no names) as full, and answers
/// it with the assignment (the member resends one after a lost response).
#[test]
fn a_full_request_with_a_regex_gets_the_assignment() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let a = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("a"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_subscribed_topic_regex(Some(s("t.*")))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!((a.error_code, count(&assigned(&a))), (0, 2));
    let full = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("a"))
            .with_member_epoch(1)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_subscribed_topic_regex(Some(s("t.*")))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(full.error_code, 0);
    assert_eq!(
        count(&assigned(&full)),
        2,
        "no assignment in the answer to a full request"
    );
}

/// A static member replaced under a new member id is fenced (FENCED_INSTANCE_ID) when the old
/// id heartbeats again, and a heartbeat to a group that does not exist is GROUP_ID_NOT_FOUND,
/// as in Kafka.
#[test]
fn a_replaced_static_member_is_fenced_and_unknown_groups_are_not_found() {
    let img = image(&[("t", 1, 2)]);
    let mut h = H::new();
    let join = |h: &mut H, member: &str| {
        h.cg_heartbeat(
            &img,
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s(G)))
                .with_member_id(s(member))
                .with_instance_id(Some(s("i")))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(REBALANCE_MS)
                .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
                .with_topic_partitions(Some(vec![])),
        )
    };
    assert_eq!(join(&mut h, "old").error_code, 0);
    // Still active: a second id with the instance id is refused.
    assert_eq!(
        join(&mut h, "new").error_code,
        E::UnreleasedInstanceId.code()
    );
    let left = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("old"))
            .with_instance_id(Some(s("i")))
            .with_member_epoch(-2),
    );
    assert_eq!((left.error_code, left.member_epoch), (0, -2));
    let new = join(&mut h, "new");
    assert_eq!(new.error_code, 0);
    assert_eq!(
        count(&assigned(&new)),
        2,
        "the new id takes the old one's partitions"
    );
    let zombie = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("old"))
            .with_instance_id(Some(s("i")))
            .with_member_epoch(1)
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(zombie.error_code, E::FencedInstanceId.code());
    let missing = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("no-such-group")))
            .with_member_id(s("m"))
            .with_member_epoch(3),
    );
    assert_eq!(missing.error_code, E::GroupIdNotFound.code());
}

/// A deleted topic's committed offsets go from every group, with tombstones, so a topic
/// created again under the same name starts with none, after a restart too.
#[test]
fn a_deleted_topics_offsets_are_tombstoned() {
    let mut h = H::new();
    h.commit(8, "g1", -1, "", &[("gone", 0, 5), ("kept", 0, 7)]);
    h.commit(8, "g2", -1, "", &[("gone", 1, 9)]);
    for p in h.c.active_partitions() {
        let mut out = h.c.topics_deleted(p, &["gone".to_string()].into());
        h.check(&mut out);
    }
    assert_eq!(h.fetch(8, "g1", "gone", 0).0, -1);
    assert_eq!(h.fetch(8, "g2", "gone", 1).0, -1);
    assert_eq!(h.fetch(8, "g1", "kept", 0).0, 7);
    let mut r = h.restart(5);
    assert_eq!(r.fetch(8, "g1", "gone", 0).0, -1);
    assert_eq!(r.fetch(8, "g1", "kept", 0).0, 7);
}

/// A member's rights in these tests: every topic without an authorizer or for the super user
/// `User:admin`, else DESCRIBE on the `describable` ones.
#[derive(Debug)]
pub(super) struct Rights {
    principal: Option<String>,
    describable: Vec<String>,
}

impl Rights {
    pub(super) fn open() -> Rights {
        Rights {
            principal: None,
            describable: Vec::new(),
        }
    }
}

impl crate::group::TopicRights for Rights {
    fn may_describe(&self, topic: &str) -> bool {
        matches!(self.principal.as_deref(), None | Some("User:admin"))
            || self.describable.iter().any(|t| t == topic)
    }

    fn caller(&self) -> Option<(&str, &str)> {
        self.principal.as_deref().map(|p| (p, "127.0.0.1"))
    }
}

/// The rights of `principal`, who may DESCRIBE the `describable` topics.
fn rights_of(principal: &str, describable: &[&str]) -> Rights {
    Rights {
        principal: Some(principal.to_owned()),
        describable: describable.iter().map(|t| t.to_string()).collect(),
    }
}

/// KAFKA-18813: a member's regex brings in only the topics it may DESCRIBE, even when another
/// member's same regex brings in more for the group; more rights at a later heartbeat bring in
/// more.
#[test]
fn a_regex_subscription_holds_only_the_topics_the_member_may_describe() {
    let mut h = H::new();
    let img = image(&[("logs-a", 1, 1), ("logs-secret", 2, 1)]);
    let join = |member: &str| {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s(member))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(1000)
            .with_subscribed_topic_regex(Some(s("logs-.*")))
            .with_topic_partitions(Some(vec![]))
    };
    let alice = h.cg_heartbeat_as(&img, join("alice"), rights_of("User:alice", &["logs-a"]));
    assert_eq!(alice.error_code, 0, "{alice:?}");
    assert_eq!(assigned(&alice), Some(vec![(tid(1), vec![0])]));

    // The super user's member subscribes to both; alice still only to hers.
    let admin = h.cg_heartbeat_as(&img, join("admin"), rights_of("User:admin", &[]));
    assert_eq!(admin.error_code, 0, "{admin:?}");
    let mut admin_epoch = admin.member_epoch;
    let mut alice_epoch = alice.member_epoch;
    let mut alice_owned = vec![(tid(1), vec![0])];
    let mut admin_owned = assigned(&admin).unwrap_or_default();
    for _ in 0..4 {
        let a = h.cg_heartbeat_as(
            &img,
            beat("alice", alice_epoch, &alice_owned),
            rights_of("User:alice", &["logs-a"]),
        );
        assert_eq!(a.error_code, 0, "{a:?}");
        alice_epoch = a.member_epoch;
        if let Some(now) = assigned(&a) {
            assert!(
                now.iter().all(|(t, _)| *t != tid(2)),
                "alice got logs-secret: {a:?}"
            );
            alice_owned = now;
        }
        let b = h.cg_heartbeat_as(
            &img,
            beat("admin", admin_epoch, &admin_owned),
            rights_of("User:admin", &[]),
        );
        admin_epoch = b.member_epoch;
        if let Some(now) = assigned(&b) {
            admin_owned = now;
        }
    }
    assert!(
        admin_owned.iter().any(|(t, _)| *t == tid(2)),
        "{admin_owned:?}"
    );

    // The super user's member leaves; alice, who may now DESCRIBE logs-secret too, gets both.
    let left = h.cg_heartbeat_as(&img, beat("admin", -1, &[]), rights_of("User:admin", &[]));
    assert_eq!(left.error_code, 0, "{left:?}");
    for _ in 0..4 {
        let a = h.cg_heartbeat_as(
            &img,
            beat("alice", alice_epoch, &alice_owned),
            rights_of("User:alice", &["logs-a", "logs-secret"]),
        );
        assert_eq!(a.error_code, 0, "{a:?}");
        alice_epoch = a.member_epoch;
        if let Some(now) = assigned(&a) {
            alice_owned = now;
        }
    }
    assert_eq!(alice_owned, vec![(tid(1), vec![0]), (tid(2), vec![0])]);
}

/// A heartbeat of `member` at `epoch` owning `owned`.
fn beat(member: &str, epoch: i32, owned: &[(Uuid, Vec<i32>)]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(Some(
            owned
                .iter()
                .map(|(t, ps)| {
                    TopicPartitions::default()
                        .with_topic_id(*t)
                        .with_partitions(ps.clone())
                })
                .collect(),
        ))
}
