//! Both protocols on one group: a classic group upgraded by a member of the consumer
//! protocol, classic members served by the consumer group, the downgrade when the last
//! consumer-protocol member leaves, the migration policy, and replay of each step.

use std::sync::Arc;

use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, LeaveGroupRequest,
};

use super::consumer::{assigned, count, image, tid, Hb};
use super::*;
use crate::config::MigrationPolicy;
use crate::group::consumer_protocol as cp;
use crate::metadata::MetadataImage;

/// A `ConsumerProtocolSubscription` v1: topics, null user data, owned partitions.
fn subscription_owning(topics: &[&str], owned: &[(&str, Vec<i32>)]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(1);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.put_i32(owned.len() as i32);
    for (t, ps) in owned {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.freeze()
}

impl H {
    /// A classic JoinGroup (v9) with the image the broker passes along.
    fn classic_join(
        &mut self,
        img: &Arc<MetadataImage>,
        member: &str,
        owned: &[(&str, Vec<i32>)],
    ) -> JoinGroupResponse {
        self.classic_join_as(img, member, None, owned)
    }

    fn classic_join_as(
        &mut self,
        img: &Arc<MetadataImage>,
        member: &str,
        instance: Option<&str>,
        owned: &[(&str, Vec<i32>)],
    ) -> JoinGroupResponse {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_session_timeout_ms(SESSION_MS)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_member_id(s(member))
            .with_group_instance_id(instance.map(s))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(subscription_owning(&["t"], owned))]);
        let (t, out) = self.call(9, GroupRequest::JoinGroup(req, img.clone()));
        join_of(&out, t)
    }

    fn member_types(&mut self, img: &Arc<MetadataImage>) -> Vec<(String, i8, i32)> {
        let (token, out) = self.call(
            0,
            GroupRequest::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(G))]),
                img.clone(),
            ),
        );
        let Some(GroupResponse::ConsumerGroupDescribe(d)) = out.response_for(token) else {
            panic!("no describe response")
        };
        let g = &d.groups[0];
        assert_eq!(g.error_code, 0, "{g:?}");
        let mut v: Vec<_> = g
            .members
            .iter()
            .map(|m| (m.member_id.to_string(), m.member_type, m.member_epoch))
            .collect();
        v.sort();
        v
    }
}

fn parts(bytes: &Bytes) -> Vec<i32> {
    let mut v: Vec<i32> = cp::parse_assignment(bytes)
        .unwrap()
        .into_iter()
        .flat_map(|(_, ps)| ps)
        .collect();
    v.sort();
    v
}

/// The SyncGroups that make the joined pair `a`, `b` stable holding t-0,1 and t-2,3.
fn sync_pair(
    h: &mut H,
    a: String,
    b: String,
    generation: i32,
    leader: &str,
) -> (String, String, i32) {
    let follower = if leader == a { &b } else { &a };
    h.sync(5, follower, generation, &[]);
    let assign_a = cp::encode_assignment(0, &vec![("t".to_string(), vec![0, 1])]);
    let assign_b = cp::encode_assignment(0, &vec![("t".to_string(), vec![2, 3])]);
    h.sync(
        5,
        leader,
        generation,
        &[(a.as_str(), &assign_a[..]), (b.as_str(), &assign_b[..])],
    );
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
    (a, b, generation)
}

/// Two classic members, stable at generation 1, holding t-0,1 and t-2,3.
fn classic_pair(h: &mut H) -> (String, String, i32) {
    let (a, ta, _) = h.join_new();
    let (b, tb, _) = h.join_new();
    let out = h.advance(0);
    let (ja, jb) = (join_of(&out, ta), join_of(&out, tb));
    assert_eq!((ja.error_code, jb.error_code), (0, 0));
    let generation = ja.generation_id;
    let leader = ja.leader.to_string();
    sync_pair(h, a, b, generation, &leader)
}

#[test]
fn a_consumer_member_upgrades_a_classic_group_and_the_classic_members_follow_the_broker() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (a, b, generation) = classic_pair(&mut h);

    // The consumer-protocol member joins: the group converts, keeping what each classic
    // member holds; the newcomer waits for partitions to be released.
    let c = h.cg_join(&img, "c", &["t"]);
    assert_eq!(c.error_code, 0, "{c:?}");
    assert_eq!(c.member_epoch, generation + 1);
    assert_eq!(count(&assigned(&c)), 0, "everything is still owned");
    let types = h.member_types(&img);
    assert_eq!(
        types.iter().map(|(_, t, _)| *t).collect::<Vec<_>>(),
        {
            let mut want = vec![(a.clone(), 0), (b.clone(), 0), ("c".to_string(), 1)];
            want.sort();
            want.into_iter().map(|(_, t)| t).collect::<Vec<_>>()
        },
        "classic members are of type 0"
    );
    // The classic group's record is tombstoned before the consumer group's are written.
    let tombstone = h
        .log
        .iter()
        .position(|r| r.key == records::encode_group_metadata_key(G) && r.value.is_none())
        .expect("classic group tombstoned");
    assert!(h.log[tombstone..]
        .iter()
        .any(|r| r.key == crate::group::consumer_records::group_metadata_key(G)));

    // The classic members are told to rejoin; an eager member rejoins owning nothing and gets
    // the part of its old partitions the target leaves it.
    assert_eq!(
        h.heartbeat(&a, generation, None),
        E::RebalanceInProgress.code()
    );
    let ja = h.classic_join(&img, &a, &[]);
    assert_eq!(ja.error_code, 0, "{ja:?}");
    assert!(ja.generation_id > generation);
    assert_eq!(ja.protocol_name.as_deref(), Some("range"));
    assert_ne!(ja.leader.as_str(), a, "the broker assigns, no member leads");
    assert!(ja.members.is_empty());
    let (t, out) = h.sync(5, &a, ja.generation_id, &[]);
    let (e, bytes_a) = sync_of(&out, t);
    assert_eq!(e, 0);
    let got_a = parts(&bytes_a);
    assert!(!got_a.is_empty() && got_a.iter().all(|p| [0, 1].contains(p)));

    // A cooperative member reports what it owns; it keeps what the target leaves it.
    assert_eq!(
        h.heartbeat(&b, generation, None),
        E::RebalanceInProgress.code()
    );
    let jb = h.classic_join(&img, &b, &[("t", vec![2, 3])]);
    assert_eq!(jb.error_code, 0, "{jb:?}");
    let (t, out) = h.sync(5, &b, jb.generation_id, &[]);
    let got_b = parts(&sync_of(&out, t).1);
    assert!(!got_b.is_empty() && got_b.iter().all(|p| [2, 3].contains(p)));

    // Then c gets what a and b gave up; nothing is held twice and nothing is lost.
    let c = h.cg_beat(
        &img,
        &Hb {
            member: "c".into(),
            epoch: c.member_epoch,
            owned: vec![],
        },
    );
    let got_c: Vec<i32> = assigned(&c)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(_, p)| p)
        .collect();
    let mut all: Vec<i32> = got_a.iter().chain(&got_b).chain(&got_c).copied().collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3], "a {got_a:?} b {got_b:?} c {got_c:?}");
    assert_eq!(assigned(&c).unwrap()[0].0, tid(1));

    // A classic member's commit is checked against its generation (its member epoch).
    assert_eq!(
        h.commit(9, G, generation, &a, &[("t", 0, 5)]),
        vec![E::IllegalGeneration.code()]
    );
    assert_eq!(
        h.commit(9, G, ja.generation_id, &a, &[("t", 0, 5)]),
        vec![0]
    );

    // A restart replays the same group: both kinds of member, same epochs.
    let before = h.member_types(&img);
    let mut r = h.restart(9);
    assert_eq!(r.member_types(&img), before);
    assert_eq!(r.heartbeat(&a, ja.generation_id, None), 0);
}

#[test]
fn the_last_consumer_member_leaving_converts_the_group_back() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (a, b, _) = classic_pair(&mut h);
    let c = h.cg_join(&img, "c", &["t"]);
    let epoch = c.member_epoch;

    // c leaves: only classic members remain, so the group is classic again, at the group
    // epoch, and rebalances.
    let left = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("c"))
            .with_member_epoch(-1),
    );
    assert_eq!(left.error_code, 0, "{left:?}");
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.c.generation(G),
        Some(epoch),
        "the classic generation goes on from the group epoch"
    );
    let last = h
        .log
        .iter()
        .rposition(|r| r.key == records::encode_group_metadata_key(G));
    let consumer_end = h.log.iter().rposition(|r| {
        r.key == crate::group::consumer_records::group_metadata_key(G) && r.value.is_none()
    });
    assert!(
        consumer_end.unwrap() < last.unwrap(),
        "consumer records end, then the classic group"
    );

    // Both classic members rejoin through the classic protocol and one leads again.
    let (ta, _) = h.join_v(9, &a, None, &["t"]);
    let (tb, out) = h.join_v(9, &b, None, &["t"]);
    let (ja, jb) = (join_of(&out, ta), join_of(&out, tb));
    assert_eq!((ja.error_code, jb.error_code), (0, 0));
    assert!(ja.generation_id > epoch);
    assert!(ja.leader.as_str() == a || ja.leader.as_str() == b);

    // The durable log replays as a classic group too.
    let r = h.restart(9);
    assert!(r.c.generation(G).is_some());
    assert!(r.c.consumer_group_views().is_empty());
}

#[test]
fn with_migration_disabled_each_group_keeps_its_protocol() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        consumer_migration_policy: MigrationPolicy::Disabled,
        ..GroupConfig::default()
    });
    classic_pair(&mut h);
    let records = h.log.len();
    let c = h.cg_join(&img, "c", &["t"]);
    assert_eq!(c.error_code, E::GroupIdNotFound.code());
    assert_eq!(h.log.len(), records, "a refused upgrade writes nothing");

    // A consumer group refuses classic members.
    let mut h = H::with(GroupConfig {
        consumer_migration_policy: MigrationPolicy::Disabled,
        ..GroupConfig::default()
    });
    assert_eq!(h.cg_join(&img, "c", &["t"]).error_code, 0);
    let records = h.log.len();
    let j = h.classic_join(&img, "", &[]);
    assert_eq!(j.error_code, E::InconsistentGroupProtocol.code());
    assert_eq!(h.log.len(), records);
}

#[test]
fn a_classic_member_that_does_not_rejoin_in_time_is_fenced() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (a, b, generation) = classic_pair(&mut h);
    h.cg_join(&img, "c", &["t"]);
    assert_eq!(
        h.heartbeat(&a, generation, None),
        E::RebalanceInProgress.code()
    );
    // b keeps heartbeating and rejoins; a heartbeats but never rejoins.
    let jb = h.classic_join(&img, &b, &[]);
    h.sync(5, &b, jb.generation_id, &[]);
    // Heartbeats keep the sessions; the rebalance timeout runs from the first REBALANCE_IN_PROGRESS.
    for _ in 0..5 {
        h.advance(i64::from(REBALANCE_MS) / 6);
        assert_eq!(
            h.heartbeat(&a, generation, None),
            E::RebalanceInProgress.code()
        );
        assert_eq!(h.heartbeat(&b, jb.generation_id, None), 0);
    }
    h.advance(i64::from(REBALANCE_MS) / 6);
    assert_eq!(h.heartbeat(&a, generation, None), E::UnknownMemberId.code());
    let members = h.member_types(&img);
    assert!(members.iter().all(|(id, _, _)| *id != a), "{members:?}");

    // A classic LeaveGroup removes the member and bumps the epoch.
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_members(vec![MemberIdentity::default().with_member_id(s(&b))]);
    let (t, out) = h.call(5, GroupRequest::LeaveGroup(req));
    let Some(GroupResponse::LeaveGroup(l)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(l.members[0].error_code, 0);
    assert_eq!(h.member_types(&img).len(), 1);
}

// ------------------------------------------ static members, refused upgrades, durability

/// Two static classic members (instance ids i1, i2), stable, holding t-0,1 and t-2,3.
fn classic_static_pair(h: &mut H) -> (String, String, i32) {
    let mut all = Outcome::default();
    let (ta, out) = h.join_v(9, "", Some("i1"), &["t"]);
    merge(&mut all, out);
    let (tb, out) = h.join_v(9, "", Some("i2"), &["t"]);
    merge(&mut all, out);
    merge(&mut all, h.advance(0));
    let (ja, jb) = (join_of(&all, ta), join_of(&all, tb));
    assert_eq!((ja.error_code, jb.error_code), (0, 0), "{ja:?} {jb:?}");
    let (a, b) = (ja.member_id.to_string(), jb.member_id.to_string());
    let generation = ja.generation_id;
    let leader = ja.leader.to_string();
    sync_pair(h, a, b, generation, &leader)
}

/// Rolling upgrade of a static member: the classic process with `group.instance.id=i1` stops
/// (static members send no LeaveGroup) and comes back with the consumer protocol and the same
/// instance id. Kafka (`getOrMaybeSubscribeStaticConsumerGroupMember`) replaces the classic
/// static member: only two members of the consumer protocol are refused with
/// UNRELEASED_INSTANCE_ID.
#[test]
fn a_static_member_rolls_from_classic_to_consumer_protocol() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (_a, _b, _generation) = classic_static_pair(&mut h);
    let c = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("c1"))
            .with_instance_id(Some(s("i1")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(c.error_code, 0, "{c:?}");
}

/// A ConsumerGroupHeartbeat that converts a classic group and is then refused (here: the
/// group is at group.consumer.max.size) must leave the group classic, as in Kafka, where the
/// refused heartbeat's records (the conversion's included) are never written.
#[test]
fn a_refused_upgrading_heartbeat_leaves_the_group_classic() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        consumer_max_size: 2,
        ..GroupConfig::default()
    });
    let (_a, _b, generation) = classic_pair(&mut h);
    let records = h.log.len();
    let c = h.cg_join(&img, "c", &["t"]);
    assert_eq!(c.error_code, E::GroupMaxSizeReached.code(), "{c:?}");
    assert_eq!(h.log.len(), records, "a refused upgrade writes nothing");
    assert_eq!(h.c.generation(G), Some(generation));
    assert!(
        h.c.consumer_group_views().is_empty(),
        "still a classic group"
    );
}

/// Kafka's `classicGroupJoinToConsumerGroup` step 4: a classic static member replacing the
/// last static member of the consumer protocol converts the group back to a classic group.
#[test]
fn a_classic_static_member_replacing_the_last_consumer_member_downgrades() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (_a, _b, _) = classic_pair(&mut h);
    let c = h.cg_heartbeat(
        &img,
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_member_id(s("c1"))
            .with_instance_id(Some(s("ic")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_topic_partitions(Some(vec![])),
    );
    assert_eq!(c.error_code, 0, "{c:?}");
    // The process comes back as a classic consumer with the same instance id: the group is
    // classic again, Stable at the group epoch, and the member syncs its assignment there.
    let j = h.classic_join_as(&img, "", Some("ic"), &[]);
    assert_eq!(j.error_code, 0, "{j:?}");
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
    assert_eq!(h.c.generation(G), Some(j.generation_id));
    let (t, out) = h.sync(5, j.member_id.as_str(), j.generation_id, &[]);
    assert_eq!(sync_of(&out, t).0, 0);
    assert!(
        h.c.consumer_group_views().is_empty(),
        "only classic members remain: the group is classic again"
    );
}

/// A static member coming back under a new member id with the same subscription is not a
/// rebalance (Kafka's `replaceMember` keeps the epoch unless the subscription changed).
#[test]
fn a_classic_static_rejoin_does_not_bump_the_group_epoch() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (_a, _b, _) = classic_static_pair(&mut h);
    let c = h.cg_join(&img, "c", &["t"]);
    assert_eq!(c.error_code, 0, "{c:?}");
    let epoch = |h: &mut H| {
        let (token, out) = h.call(
            0,
            GroupRequest::ConsumerGroupDescribe(
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(G))]),
                img.clone(),
            ),
        );
        let Some(GroupResponse::ConsumerGroupDescribe(d)) = out.response_for(token) else {
            panic!("no describe response")
        };
        d.groups[0].group_epoch
    };
    let before = epoch(&mut h);
    let j = h.classic_join_as(&img, "", Some("i2"), &[]);
    assert_eq!(j.error_code, 0, "{j:?}");
    assert_eq!(epoch(&mut h), before, "a static rejoin is not a rebalance");
}

/// An upgrade that lands after the leader's SyncGroup but before that assignment is durable:
/// no member has received it (their SyncGroups are parked, then answered
/// REBALANCE_IN_PROGRESS), so each still holds its previous assignment. Kafka sets members'
/// assignments only once the write completes, so the converted group holds the previous
/// generation's. Partitions a cooperative leader moved between members (left out of this
/// round) must not look free to the newcomer while their old owners still consume them.
#[test]
fn an_upgrade_before_the_leaders_assignment_is_durable_hands_out_nothing_still_held() {
    let img = image(&[("t", 1, 4)]);
    let mut h = H::new();
    let (a, b, generation) = classic_pair(&mut h); // a: t-0,1  b: t-2,3
    let mut all = Outcome::default();
    let (d, td, out) = h.join_new();
    merge(&mut all, out);
    let (ta, out) = h.join_v(9, &a, None, &["t"]);
    merge(&mut all, out);
    let (tb, out) = h.join_v(9, &b, None, &["t"]);
    merge(&mut all, out);
    merge(&mut all, h.advance(0));
    let (ja, jb, jd) = (join_of(&all, ta), join_of(&all, tb), join_of(&all, td));
    assert_eq!((ja.error_code, jb.error_code, jd.error_code), (0, 0, 0));
    let next = ja.generation_id;
    assert!(next > generation);
    let leader = ja.leader.to_string();
    for m in [&a, &b, &d] {
        if *m != leader {
            h.sync(5, m, next, &[]);
        }
    }
    // Cooperative first round: t-1 and t-3 move to d, so nobody gets them yet.
    h.hold_high_watermark = true;
    let to_a = cp::encode_assignment(0, &vec![("t".to_string(), vec![0])]);
    let to_b = cp::encode_assignment(0, &vec![("t".to_string(), vec![2])]);
    let to_d = cp::encode_assignment(0, &vec![]);
    h.sync(
        5,
        &leader,
        next,
        &[
            (a.as_str(), &to_a[..]),
            (b.as_str(), &to_b[..]),
            (d.as_str(), &to_d[..]),
        ],
    );
    // a still consumes t-0,1 and b t-2,3: the consumer-protocol member converts the group.
    let c = h.cg_join(&img, "c", &["t"]);
    assert_eq!(c.error_code, 0, "{c:?}");
    let got: Vec<i32> = assigned(&c)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(_, p)| p)
        .collect();
    assert!(
        !got.contains(&1) && !got.contains(&3),
        "c got {got:?} while a and b still hold t-1 and t-3"
    );
}
