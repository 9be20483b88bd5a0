//! Tables and scenarios for the group coordinator, driven with a manual clock. Every response
//! the machine produces is also encoded at its request's version, so a field set outside its
//! version range fails the test that produced it.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError as E;
use kafka_protocol::messages::{
    join_group_request::JoinGroupRequestProtocol,
    leave_group_request::MemberIdentity,
    offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic},
    offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    },
    sync_group_request::SyncGroupRequestAssignment,
    DeleteGroupsRequest, DescribeGroupsRequest, GroupId, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::records::{self, RecordKey};
use super::*;
use crate::protocol::encode_response;

const G: &str = "g";
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// A `ConsumerProtocolSubscription` v0: topics, then null user data.
fn subscription(topics: &[&str]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        b.put_i16(t.len() as i16);
        b.put_slice(t.as_bytes());
    }
    b.put_i32(-1);
    b.freeze()
}

struct H {
    c: Coordinator,
    now: i64,
    token: u64,
    versions: HashMap<u64, i16>,
    log: Vec<CoordinatorRecord>,
}

impl H {
    fn new() -> Self {
        Self::with(GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        })
    }

    fn with(config: GroupConfig) -> Self {
        let mut c = Coordinator::new(config.clone(), 7);
        for p in 0..config.offsets_topic_num_partitions {
            c.begin_load(p);
            c.complete_load(p, 0);
        }
        Self {
            c,
            now: 1_000,
            token: 0,
            versions: HashMap::new(),
            log: Vec::new(),
        }
    }

    fn call(&mut self, v: i16, req: GroupRequest) -> (Token, Outcome) {
        self.token += 1;
        let token = self.token;
        self.versions.insert(token, v);
        let ctx = RequestContext {
            token,
            api_version: v,
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
        };
        let out = self.c.handle(&ctx, req, self.now);
        self.check(&out);
        (token, out)
    }

    fn check(&mut self, out: &Outcome) {
        for (token, response) in &out.responses {
            let v = self.versions[token];
            encode_response(
                response.api_key(),
                v,
                1,
                &response.clone().into_response_kind(),
            )
            .unwrap_or_else(|e| panic!("{:?} v{v} does not encode: {e}", response.api_key()));
        }
        self.log.extend(out.records.iter().cloned());
    }

    fn advance(&mut self, ms: i64) -> Outcome {
        self.now += ms;
        let out = self.c.tick(self.now);
        self.check(&out);
        out
    }

    fn join_v(
        &mut self,
        v: i16,
        member: &str,
        instance: Option<&str>,
        topics: &[&str],
    ) -> (Token, Outcome) {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_session_timeout_ms(SESSION_MS)
            .with_rebalance_timeout_ms(REBALANCE_MS)
            .with_member_id(s(member))
            .with_group_instance_id(instance.map(s))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(subscription(topics))]);
        self.call(v, GroupRequest::JoinGroup(req))
    }

    /// Full join of a dynamic member at JoinGroup v9: the MEMBER_ID_REQUIRED round trip, then
    /// the real join. Returns the member id and the token of the (maybe parked) join.
    fn join_new(&mut self) -> (String, Token, Outcome) {
        let (t, out) = self.join_v(9, "", None, &["t"]);
        let first = join_of(&out, t);
        assert_eq!(first.error_code, E::MemberIdRequired.code());
        let id = first.member_id.to_string();
        let (t, out) = self.join_v(9, &id, None, &["t"]);
        (id, t, out)
    }

    fn sync(
        &mut self,
        v: i16,
        member: &str,
        generation: i32,
        assign: &[(&str, &[u8])],
    ) -> (Token, Outcome) {
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_protocol_type(if v >= 5 { Some(s("consumer")) } else { None })
            .with_protocol_name(if v >= 5 { Some(s("range")) } else { None })
            .with_assignments(
                assign
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            );
        self.call(v, GroupRequest::SyncGroup(req))
    }

    fn heartbeat(&mut self, member: &str, generation: i32, instance: Option<&str>) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(G)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_group_instance_id(instance.map(s));
        let (t, out) = self.call(4, GroupRequest::Heartbeat(req));
        match out.response_for(t) {
            Some(GroupResponse::Heartbeat(r)) => r.error_code,
            other => panic!("no heartbeat response: {other:?}"),
        }
    }

    fn commit(
        &mut self,
        v: i16,
        group: &str,
        generation: i32,
        member: &str,
        offsets: &[(&str, i32, i64)],
    ) -> Vec<i16> {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_topics(
                offsets
                    .iter()
                    .map(|(topic, p, o)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(TopicName(s(topic)))
                            .with_partitions(vec![OffsetCommitRequestPartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(*o)
                                .with_committed_metadata(Some(s("meta")))])
                    })
                    .collect(),
            );
        let (t, out) = self.call(v, GroupRequest::OffsetCommit(req));
        match out.response_for(t) {
            Some(GroupResponse::OffsetCommit(r)) => r
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect(),
            other => panic!("no commit response: {other:?}"),
        }
    }

    /// Committed offset of one partition via OffsetFetch at version `v`.
    fn fetch(&mut self, v: i16, group: &str, topic: &str, p: i32) -> (i64, Option<String>, i16) {
        let req = if v >= 8 {
            OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_indexes(vec![p])]))])
        } else {
            OffsetFetchRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_indexes(vec![p])]))
        };
        let (t, out) = self.call(v, GroupRequest::OffsetFetch(req));
        let Some(GroupResponse::OffsetFetch(r)) = out.response_for(t) else {
            panic!("no fetch response");
        };
        if v >= 8 {
            let g = &r.groups[0];
            if g.error_code != 0 {
                return (-1, None, g.error_code);
            }
            let part = &g.topics[0].partitions[0];
            (
                part.committed_offset,
                part.metadata.as_ref().map(|m| m.to_string()),
                part.error_code,
            )
        } else {
            if r.error_code != 0 {
                return (-1, None, r.error_code);
            }
            let part = &r.topics[0].partitions[0];
            (
                part.committed_offset,
                part.metadata.as_ref().map(|m| m.to_string()),
                part.error_code,
            )
        }
    }

    /// Forms a stable group of `n` dynamic members; returns (member ids, generation).
    fn stable_group(&mut self, n: usize) -> (Vec<String>, i32) {
        let mut ids = Vec::new();
        let mut tokens = Vec::new();
        for _ in 0..n {
            let (id, t, _) = self.join_new();
            ids.push(id);
            tokens.push(t);
        }
        let out = self.advance(0);
        let mut generation = -1;
        let mut leader = String::new();
        for t in &tokens {
            let r = join_of(&out, *t);
            assert_eq!(r.error_code, 0);
            generation = r.generation_id;
            leader = r.leader.to_string();
        }
        let assignments: Vec<(String, Vec<u8>)> = ids
            .iter()
            .map(|id| (id.clone(), format!("assign-{id}").into_bytes()))
            .collect();
        for id in ids.iter().filter(|id| **id != leader) {
            let (_, out) = self.sync(5, id, generation, &[]);
            assert!(
                out.responses.is_empty(),
                "follower sync parks until the leader's"
            );
        }
        let refs: Vec<(&str, &[u8])> = assignments
            .iter()
            .map(|(m, a)| (m.as_str(), a.as_slice()))
            .collect();
        let (_, out) = self.sync(5, &leader, generation, &refs);
        assert_eq!(out.responses.len(), n);
        assert_eq!(self.c.group_state(G), Some(GroupState::Stable));
        (ids, generation)
    }
}

fn join_of(out: &Outcome, token: Token) -> JoinGroupResponse {
    match out.response_for(token) {
        Some(GroupResponse::JoinGroup(r)) => r.clone(),
        other => panic!("no join response for {token}: {other:?}"),
    }
}

fn sync_of(out: &Outcome, token: Token) -> (i16, Bytes) {
    match out.response_for(token) {
        Some(GroupResponse::SyncGroup(r)) => (r.error_code, r.assignment.clone()),
        other => panic!("no sync response for {token}: {other:?}"),
    }
}

#[test]
fn partition_for_matches_kafka_utils_abs_hash() {
    // Values computed with Java's String.hashCode and Kafka's Utils.abs.
    let cases = [
        ("test", 3_556_498, 48),
        ("my-group", -1_906_497_762, 12),
        ("polygenelubricants", i32::MIN, 0),
        ("console-consumer-93", 1_109_249_243, 43),
        ("\u{e9}t\u{e9}", 227_742, 42),
        ("groupZ", -1_237_460_549, 49),
        ("", 0, 0),
    ];
    for (group, hash, partition) in cases {
        assert_eq!(java_string_hash(group), hash, "{group}");
        assert_eq!(partition_for(group, 50), partition, "{group}");
    }
}

#[test]
fn single_member_join_sync_heartbeat_at_every_version() {
    // (join version, sync version): the member-id round trip only from JoinGroup v4.
    for join_v in 0..=9i16 {
        for sync_v in [0i16, 3, 5] {
            let mut h = H::new();
            let (t, out) = h.join_v(join_v, "", None, &["t"]);
            let member_id = if join_v >= 4 {
                let r = join_of(&out, t);
                assert_eq!(r.error_code, E::MemberIdRequired.code(), "v{join_v}");
                assert!(r.member_id.starts_with("client-"));
                let id = r.member_id.to_string();
                let (t2, out) = h.join_v(join_v, &id, None, &["t"]);
                assert!(
                    out.response_for(t2).is_none(),
                    "join parks until the rebalance ends"
                );
                let out = h.advance(0);
                let r = join_of(&out, t2);
                assert_eq!(r.member_id.as_str(), id);
                r
            } else {
                assert!(out.response_for(t).is_none());
                let out = h.advance(0);
                join_of(&out, t)
            };
            assert_eq!(member_id.error_code, 0);
            assert_eq!(member_id.generation_id, 1);
            assert_eq!(member_id.leader, member_id.member_id, "sole member leads");
            assert_eq!(member_id.members.len(), 1);
            assert_eq!(
                member_id
                    .protocol_name
                    .as_ref()
                    .map(|p| p.to_string())
                    .as_deref(),
                Some("range")
            );
            let id = member_id.member_id.to_string();
            let (ts, out) = h.sync(sync_v, &id, 1, &[(&id, b"A")]);
            assert_eq!(sync_of(&out, ts), (0, Bytes::from_static(b"A")));
            assert_eq!(out.records.len(), 1, "the assignment is persisted");
            assert_eq!(h.heartbeat(&id, 1, None), 0);
        }
    }
}

#[test]
fn new_member_triggers_rebalance_and_leader_gets_all_members() {
    let mut h = H::new();
    let (ids, generation) = h.stable_group(1);
    let a = &ids[0];
    let (b, tb, out) = h.join_new();
    assert!(out.response_for(tb).is_none());
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(
        h.heartbeat(a, generation, None),
        E::RebalanceInProgress.code()
    );
    let (ta, out) = h.join_v(9, a, None, &["t"]);
    // Both have joined: the rebalance completes without waiting for the timeout.
    let ra = join_of(&out, ta);
    let rb = join_of(&out, tb);
    assert_eq!(ra.generation_id, generation + 1);
    assert_eq!(
        ra.leader.as_str(),
        a.as_str(),
        "the existing leader keeps leading"
    );
    assert_eq!(ra.members.len(), 2);
    assert!(rb.members.is_empty(), "followers get no member list");
    let g = ra.generation_id;
    let (tsb, out) = h.sync(5, &b, g, &[]);
    assert!(out.responses.is_empty());
    let (tsa, out) = h.sync(5, a, g, &[(a, b"A"), (&b, b"B")]);
    assert_eq!(sync_of(&out, tsa), (0, Bytes::from_static(b"A")));
    assert_eq!(sync_of(&out, tsb), (0, Bytes::from_static(b"B")));
}

#[test]
fn leader_leaves_out_a_member_which_gets_an_empty_assignment() {
    let mut h = H::new();
    let (_a, ta, _) = h.join_new();
    let (b, tb, _) = h.join_new();
    let out = h.advance(0);
    let leader = join_of(&out, ta).leader.to_string();
    let g = join_of(&out, tb).generation_id;
    let (tsb, _) = h.sync(5, &b, g, &[]);
    let (_, out) = h.sync(5, &leader, g, &[(&leader, b"X")]);
    let (err, assignment) = sync_of(&out, tsb);
    assert_eq!(err, 0);
    assert!(assignment.is_empty(), "empty, never null");
}

#[test]
fn initial_rebalance_delay_extends_while_members_arrive() {
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 3_000,
        ..GroupConfig::default()
    });
    let (_, ta, _) = h.join_new();
    assert!(h.advance(1_000).responses.is_empty());
    let (_, tb, _) = h.join_new();
    // At 3s the delay is extended because b arrived; nothing is answered.
    assert!(h.advance(2_000).responses.is_empty());
    assert!(h.advance(2_999).responses.is_empty());
    let out = h.advance(1);
    assert_eq!(join_of(&out, ta).members.len(), 2);
    assert_eq!(join_of(&out, tb).generation_id, 1);
}

#[test]
fn session_timeout_expires_a_silent_member() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(2);
    h.advance(i64::from(SESSION_MS) - 1);
    assert_eq!(h.heartbeat(&ids[0], g, None), 0);
    // ids[1] stays silent; at its session timeout it is removed and a rebalance begins.
    h.advance(1);
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(h.heartbeat(&ids[1], g, None), E::UnknownMemberId.code());
    assert_eq!(h.heartbeat(&ids[0], g, None), E::RebalanceInProgress.code());
    let (t, out) = h.join_v(9, &ids[0], None, &["t"]);
    let r = join_of(&out, t);
    assert_eq!((r.generation_id, r.members.len()), (g + 1, 1));
}

#[test]
fn rebalance_timeout_drops_members_that_do_not_rejoin() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(2);
    let (t, out) = h.join_v(9, &ids[1], None, &["t", "u"]);
    assert!(out.response_for(t).is_none());
    // ids[0] keeps heartbeating but never rejoins.
    for _ in 0..5 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(&ids[0], g, None), E::RebalanceInProgress.code());
    }
    let out = h.advance(i64::from(REBALANCE_MS) - 25_000);
    let r = join_of(&out, t);
    assert_eq!(r.error_code, 0);
    assert_eq!(r.members.len(), 1);
    assert_eq!(r.leader.as_str(), ids[1].as_str(), "a new leader is chosen");
    assert_eq!(
        h.heartbeat(&ids[0], r.generation_id, None),
        E::UnknownMemberId.code()
    );
}

#[test]
fn member_that_never_syncs_is_removed_after_the_rebalance_timeout() {
    let mut h = H::new();
    let (_, ta, _) = h.join_new();
    let (_, tb, _) = h.join_new();
    let out = h.advance(0);
    let leader = join_of(&out, ta).leader.to_string();
    let g = join_of(&out, tb).generation_id;
    let follower = if join_of(&out, ta).member_id.as_str() == leader {
        join_of(&out, tb).member_id.to_string()
    } else {
        join_of(&out, ta).member_id.to_string()
    };
    let (_, out) = h.sync(5, &leader, g, &[]);
    assert_eq!(out.responses.len(), 1);
    // Both heartbeat, but the follower never sends SyncGroup.
    for _ in 0..5 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(&leader, g, None), 0);
        assert_eq!(h.heartbeat(&follower, g, None), 0);
    }
    h.advance(i64::from(REBALANCE_MS) - 25_001);
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
    h.advance(1);
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
}

#[test]
fn leave_group_single_and_batched() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(2);
    // v0-2: one member, the error at the top.
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_member_id(s("nobody"));
    let (t, out) = h.call(1, GroupRequest::LeaveGroup(req));
    let Some(GroupResponse::LeaveGroup(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.error_code, E::UnknownMemberId.code());
    // v3+: a batch, errors per member.
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_members(vec![
            MemberIdentity::default().with_member_id(s(&ids[1])),
            MemberIdentity::default().with_member_id(s("nobody")),
        ]);
    let (t, out) = h.call(5, GroupRequest::LeaveGroup(req));
    let Some(GroupResponse::LeaveGroup(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    let errors: Vec<i16> = r.members.iter().map(|m| m.error_code).collect();
    assert_eq!(errors, vec![0, E::UnknownMemberId.code()]);
    assert_eq!(h.heartbeat(&ids[0], g, None), E::RebalanceInProgress.code());
    // The last member leaves during the rebalance: the group empties, the generation moves on,
    // and the empty group is persisted.
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_member_id(s(&ids[0]));
    let (_, out) = h.call(2, GroupRequest::LeaveGroup(req));
    assert_eq!(h.c.group_state(G), Some(GroupState::Empty));
    assert_eq!(h.c.generation(G), Some(g + 1));
    let last = out.records.last().expect("group metadata written");
    let value = records::decode_group_metadata_value(last.value.as_ref().unwrap()).unwrap();
    assert!(value.members.is_empty());
    assert_eq!(value.generation, g + 1);
}

#[test]
fn static_member_rejoins_without_rebalance_and_fences_the_old_id() {
    for v in [5i16, 8, 9] {
        let mut h = H::new();
        let (t, out) = h.join_v(v, "", Some("i1"), &["t"]);
        assert!(
            out.response_for(t).is_none(),
            "static members skip MEMBER_ID_REQUIRED"
        );
        let r = join_of(&h.advance(0), t);
        let old = r.member_id.to_string();
        assert!(old.starts_with("i1-"));
        let (ts, out) = h.sync(5, &old, r.generation_id, &[(&old, b"A")]);
        assert_eq!(sync_of(&out, ts).0, 0);
        // The process restarts and rejoins with no member id within the session timeout.
        h.advance(3_000);
        let (t, out) = h.join_v(v, "", Some("i1"), &["t"]);
        let r2 = join_of(&out, t);
        assert_eq!(r2.error_code, 0);
        assert_eq!(r2.generation_id, r.generation_id, "no rebalance");
        assert_ne!(r2.member_id, r.member_id);
        assert_eq!(r2.leader, r2.member_id, "leadership moves to the new id");
        assert_eq!(r2.skip_assignment, v >= 9);
        assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
        assert_eq!(out.records.len(), 1, "the new member id is persisted");
        // The old process is a zombie now.
        assert_eq!(
            h.heartbeat(&old, r.generation_id, Some("i1")),
            E::FencedInstanceId.code()
        );
        let new = r2.member_id.to_string();
        assert_eq!(h.heartbeat(&new, r.generation_id, Some("i1")), 0);
        let (ts, out) = h.sync(5, &new, r.generation_id, &[]);
        assert_eq!(
            sync_of(&out, ts),
            (0, Bytes::from_static(b"A")),
            "keeps its assignment"
        );
    }
}

#[test]
fn static_member_not_rejoining_keeps_its_place_through_a_rebalance() {
    let mut h = H::new();
    let (t1, _) = h.join_v(9, "", Some("i1"), &["t"]);
    let (t2, _) = h.join_v(9, "", Some("i2"), &["t"]);
    let out = h.advance(0);
    let r1 = join_of(&out, t1);
    let r2 = join_of(&out, t2);
    let (m1, m2, g) = (
        r1.member_id.to_string(),
        r2.member_id.to_string(),
        r1.generation_id,
    );
    let leader = r1.leader.to_string();
    let other = if leader == m1 { &m2 } else { &m1 };
    h.sync(5, other, g, &[]);
    h.sync(5, &leader, g, &[(&m1, b"1"), (&m2, b"2")]);
    // m2 changes its subscription, forcing a rebalance; m1 does not rejoin in time.
    let (t, _) = h.join_v(9, &m2, Some("i2"), &["t", "u"]);
    let mut last = Outcome::default();
    for _ in 0..6 {
        last = h.advance(5_000);
        h.heartbeat(&m1, g, Some("i1"));
        h.heartbeat(&m2, g, Some("i2"));
    }
    let r = join_of(&last, t);
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.leader.as_str(),
        m2,
        "only a member that rejoined can lead"
    );
    assert_eq!(
        r.members.len(),
        2,
        "the absent static member stays in the group"
    );
}

#[test]
fn only_absent_static_members_postpone_the_join() {
    let mut h = H::new();
    // A static member whose session (60 s) outlasts its rebalance timeout (20 s).
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_session_timeout_ms(60_000)
        .with_rebalance_timeout_ms(20_000)
        .with_member_id(s(""))
        .with_group_instance_id(Some(s("i1")))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(subscription(&["t"]))]);
    let (t1, _) = h.call(9, GroupRequest::JoinGroup(req));
    let r = join_of(&h.advance(0), t1);
    let m1 = r.member_id.to_string();
    h.sync(5, &m1, 1, &[(&m1, b"1")]);
    // A dynamic member arrives and leaves again; the static one never rejoins.
    let (b, _, _) = h.join_new();
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_member_id(s(&b));
    h.call(2, GroupRequest::LeaveGroup(req));
    // The rebalance timeout passes with nobody rejoined: no generation without a leader.
    let out = h.advance(21_000);
    assert!(out.responses.is_empty());
    assert_eq!(h.c.generation(G), Some(1));
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
    // The static member comes back in time and the rebalance completes with it leading.
    let req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_session_timeout_ms(60_000)
        .with_rebalance_timeout_ms(20_000)
        .with_member_id(s(&m1))
        .with_group_instance_id(Some(s("i1")))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(subscription(&["t"]))]);
    let (t, out) = h.call(9, GroupRequest::JoinGroup(req));
    let r = join_of(&out, t);
    assert_eq!((r.error_code, r.generation_id), (0, 2));
    assert_eq!(r.leader.as_str(), m1);
}

#[test]
fn errors_table() {
    struct Case {
        name: &'static str,
        run: fn(&mut H, &[String], i32) -> i16,
        expect: E,
    }
    let cases = [
        Case {
            name: "heartbeat wrong generation",
            run: |h, ids, g| h.heartbeat(&ids[0], g + 1, None),
            expect: E::IllegalGeneration,
        },
        Case {
            name: "heartbeat unknown member",
            run: |h, _, g| h.heartbeat("x", g, None),
            expect: E::UnknownMemberId,
        },
        Case {
            name: "heartbeat unknown static instance",
            run: |h, ids, g| h.heartbeat(&ids[0], g, Some("nope")),
            expect: E::UnknownMemberId,
        },
        Case {
            name: "sync wrong generation",
            run: |h, ids, g| {
                let (t, o) = h.sync(5, &ids[0], g - 1, &[]);
                sync_of(&o, t).0
            },
            expect: E::IllegalGeneration,
        },
        Case {
            name: "sync unknown member",
            run: |h, _, g| {
                let (t, o) = h.sync(3, "x", g, &[]);
                sync_of(&o, t).0
            },
            expect: E::UnknownMemberId,
        },
        Case {
            name: "sync v5 protocol name mismatch",
            run: |h, ids, g| {
                let req = SyncGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_generation_id(g)
                    .with_member_id(s(&ids[0]))
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("roundrobin")));
                let (t, o) = h.call(5, GroupRequest::SyncGroup(req));
                sync_of(&o, t).0
            },
            expect: E::InconsistentGroupProtocol,
        },
        Case {
            name: "join with another protocol type",
            run: |h, _, _| {
                let req = JoinGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_session_timeout_ms(SESSION_MS)
                    .with_rebalance_timeout_ms(REBALANCE_MS)
                    .with_member_id(s(""))
                    .with_group_instance_id(Some(s("z")))
                    .with_protocol_type(s("connect"))
                    .with_protocols(vec![
                        JoinGroupRequestProtocol::default().with_name(s("range"))
                    ]);
                let (t, o) = h.call(7, GroupRequest::JoinGroup(req));
                join_of(&o, t).error_code
            },
            expect: E::InconsistentGroupProtocol,
        },
        Case {
            name: "join with no common protocol",
            run: |h, _, _| {
                let req = JoinGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_session_timeout_ms(SESSION_MS)
                    .with_rebalance_timeout_ms(REBALANCE_MS)
                    .with_member_id(s(""))
                    .with_group_instance_id(Some(s("z")))
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![
                        JoinGroupRequestProtocol::default().with_name(s("sticky"))
                    ]);
                let (t, o) = h.call(7, GroupRequest::JoinGroup(req));
                join_of(&o, t).error_code
            },
            expect: E::InconsistentGroupProtocol,
        },
        Case {
            name: "join with session timeout below group.min.session.timeout.ms",
            run: |h, _, _| {
                let req = JoinGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_session_timeout_ms(10)
                    .with_member_id(s(""))
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![
                        JoinGroupRequestProtocol::default().with_name(s("range"))
                    ]);
                let (t, o) = h.call(9, GroupRequest::JoinGroup(req));
                join_of(&o, t).error_code
            },
            expect: E::InvalidSessionTimeout,
        },
        Case {
            name: "join unknown member id",
            run: |h, _, _| {
                let (t, o) = h.join_v(9, "ghost", None, &["t"]);
                join_of(&o, t).error_code
            },
            expect: E::UnknownMemberId,
        },
        Case {
            name: "join static with wrong member id",
            run: |h, _, _| {
                let (t, o) = h.join_v(9, "ghost", Some("i-static"), &["t"]);
                join_of(&o, t).error_code
            },
            expect: E::UnknownMemberId,
        },
        Case {
            name: "commit wrong generation",
            run: |h, ids, g| h.commit(8, G, g + 3, &ids[0], &[("t", 0, 1)])[0],
            expect: E::IllegalGeneration,
        },
        Case {
            name: "commit unknown member",
            run: |h, _, g| h.commit(8, G, g, "x", &[("t", 0, 1)])[0],
            expect: E::UnknownMemberId,
        },
        Case {
            name: "simple commit to a non-empty group",
            run: |h, _, _| h.commit(8, G, -1, "", &[("t", 0, 1)])[0],
            expect: E::UnknownMemberId,
        },
        Case {
            name: "commit with generation to an unknown group (v8)",
            run: |h, _, _| h.commit(8, "other", 3, "m", &[("t", 0, 1)])[0],
            expect: E::IllegalGeneration,
        },
        Case {
            name: "commit with generation to an unknown group (v9)",
            run: |h, _, _| h.commit(9, "other", 3, "m", &[("t", 0, 1)])[0],
            expect: E::GroupIdNotFound,
        },
        Case {
            name: "delete a non-empty group",
            run: |h, _, _| {
                let (t, o) = h.call(
                    2,
                    GroupRequest::DeleteGroups(
                        DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(G))]),
                    ),
                );
                let Some(GroupResponse::DeleteGroups(r)) = o.response_for(t) else {
                    panic!()
                };
                r.results[0].error_code
            },
            expect: E::NonEmptyGroup,
        },
        Case {
            name: "delete an unknown group",
            run: |h, _, _| {
                let (t, o) = h.call(
                    2,
                    GroupRequest::DeleteGroups(
                        DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("nope"))]),
                    ),
                );
                let Some(GroupResponse::DeleteGroups(r)) = o.response_for(t) else {
                    panic!()
                };
                r.results[0].error_code
            },
            expect: E::GroupIdNotFound,
        },
    ];
    for case in cases {
        let mut h = H::new();
        let (ids, g) = h.stable_group(1);
        let got = (case.run)(&mut h, &ids, g);
        assert_eq!(got, case.expect.code(), "{}", case.name);
    }
}

#[test]
fn group_max_size_rejects_extra_members() {
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        max_size: 1,
        ..GroupConfig::default()
    });
    h.stable_group(1);
    let (t, out) = h.join_v(9, "", Some("i9"), &["t"]);
    assert_eq!(join_of(&out, t).error_code, E::GroupMaxSizeReached.code());
}

#[test]
fn sync_and_commit_rules_during_rebalance() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(2);
    // A follower repeating its JoinGroup with the same protocols changes nothing.
    let follower = ids[1].clone();
    let (t, out) = h.join_v(9, &follower, None, &["t"]);
    assert_eq!(join_of(&out, t).generation_id, g);
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
    // A changed subscription starts a rebalance.
    let (_, out) = h.join_v(9, &follower, None, &["t", "u"]);
    assert!(out.responses.is_empty());
    // PreparingRebalance: syncs are refused, commits of the current generation still land.
    let (t, out) = h.sync(5, &ids[0], g, &[]);
    assert_eq!(sync_of(&out, t).0, E::RebalanceInProgress.code());
    assert_eq!(h.commit(8, G, g, &ids[0], &[("t", 0, 5)]), vec![0]);
    let (t0, out) = h.join_v(9, &ids[0], None, &["t"]);
    let g2 = join_of(&out, t0).generation_id;
    // CompletingRebalance: a commit would be for partitions the member may no longer own.
    assert_eq!(
        h.commit(8, G, g2, &ids[0], &[("t", 0, 6)]),
        vec![E::RebalanceInProgress.code()]
    );
    assert_eq!(h.heartbeat(&ids[0], g2, None), 0);
}

#[test]
fn a_second_rebalance_answers_parked_syncs_with_rebalance_in_progress() {
    let mut h = H::new();
    let (_, ta, _) = h.join_new();
    let (_, tb, _) = h.join_new();
    let out = h.advance(0);
    let leader = join_of(&out, ta).leader.to_string();
    let rb = join_of(&out, tb);
    let follower = if rb.member_id.as_str() == leader {
        join_of(&out, ta).member_id.to_string()
    } else {
        rb.member_id.to_string()
    };
    let (ts, _) = h.sync(5, &follower, rb.generation_id, &[]);
    // A third member arrives before the leader syncs.
    let (_, _, out) = h.join_new();
    assert_eq!(sync_of(&out, ts).0, E::RebalanceInProgress.code());
    let _ = leader;
}

#[test]
fn offsets_commit_fetch_every_version() {
    let mut h = H::new();
    // A simple consumer (generation -1) commits to a group that does not exist yet.
    assert_eq!(
        h.commit(2, "simple", -1, "", &[("t", 0, 42), ("t", 1, 7)]),
        vec![0, 0]
    );
    assert_eq!(h.c.group_state("simple"), Some(GroupState::Empty));
    for v in 1..=9 {
        assert_eq!(
            h.fetch(v, "simple", "t", 0),
            (42, Some("meta".into()), 0),
            "v{v}"
        );
        assert_eq!(h.fetch(v, "simple", "t", 5).0, -1, "v{v}: no offset is -1");
        assert_eq!(
            h.fetch(v, "unknown", "t", 0),
            (-1, Some(String::new()), 0),
            "v{v}"
        );
    }
    // All offsets of a group (topics null), and several groups at once (v8+).
    h.commit(8, "other", -1, "", &[("u", 3, 9)]);
    let req = OffsetFetchRequest::default()
        .with_require_stable(true)
        .with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("simple")))
                .with_topics(None),
            OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s("other")))
                .with_topics(None),
        ]);
    let (t, out) = h.call(9, GroupRequest::OffsetFetch(req));
    let Some(GroupResponse::OffsetFetch(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.groups.len(), 2);
    assert_eq!(r.groups[0].topics[0].partitions.len(), 2);
    assert_eq!(r.groups[1].topics[0].partitions[0].committed_offset, 9);
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s("simple")))
        .with_topics(None);
    let (t, out) = h.call(3, GroupRequest::OffsetFetch(req));
    let Some(GroupResponse::OffsetFetch(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions.len(), 2);
}

#[test]
fn commit_records_are_kafka_offset_commit_records() {
    let mut h = H::new();
    h.commit(8, "simple", -1, "", &[("t", 3, 42)]);
    let record = h.log.last().unwrap();
    assert_eq!(record.partition, partition_for("simple", 50));
    assert_eq!(
        records::decode_key(&record.key).unwrap(),
        RecordKey::OffsetCommit {
            group: "simple".into(),
            topic: "t".into(),
            partition: 3
        }
    );
    let value = records::decode_offset_commit_value(record.value.as_ref().unwrap()).unwrap();
    assert_eq!(
        (
            value.committed_offset,
            value.metadata.as_str(),
            value.commit_timestamp_ms
        ),
        (42, "meta", h.now)
    );
}

#[test]
fn metadata_too_large_is_refused_per_partition() {
    let mut h = H::with(GroupConfig {
        offset_metadata_max_bytes: 3,
        ..GroupConfig::default()
    });
    assert_eq!(
        h.commit(8, "simple", -1, "", &[("t", 0, 1)]),
        vec![E::OffsetMetadataTooLarge.code()]
    );
    assert!(h.log.is_empty());
}

#[test]
fn not_coordinator_and_load_in_progress() {
    let config = GroupConfig::default();
    let mut c = Coordinator::new(config, 1);
    let ctx = RequestContext {
        token: 1,
        api_version: 4,
        client_id: "c".into(),
        client_host: "h".into(),
    };
    let hb = || {
        GroupRequest::Heartbeat(
            HeartbeatRequest::default()
                .with_group_id(GroupId(s(G)))
                .with_member_id(s("m")),
        )
    };
    let code = |out: &Outcome| match out.response_for(1) {
        Some(GroupResponse::Heartbeat(r)) => r.error_code,
        _ => panic!(),
    };
    assert_eq!(code(&c.handle(&ctx, hb(), 0)), E::NotCoordinator.code());
    let p = c.partition_for(G);
    c.begin_load(p);
    assert_eq!(
        code(&c.handle(&ctx, hb(), 0)),
        E::CoordinatorLoadInProgress.code()
    );
    c.complete_load(p, 0);
    assert_eq!(code(&c.handle(&ctx, hb(), 0)), E::UnknownMemberId.code());
    c.unload(p);
    assert_eq!(code(&c.handle(&ctx, hb(), 0)), E::NotCoordinator.code());
}

#[test]
fn replay_rebuilds_groups_and_offsets() {
    let mut h = H::new();
    let (t, _) = h.join_v(9, "", Some("i1"), &["t"]);
    let r = join_of(&h.advance(0), t);
    let m = r.member_id.to_string();
    h.sync(5, &m, r.generation_id, &[(&m, b"A")]);
    h.commit(8, G, r.generation_id, &m, &[("t", 0, 100)]);
    h.commit(8, "simple", -1, "", &[("t", 0, 5)]);
    h.commit(8, "simple", -1, "", &[("t", 0, 6)]);

    // Restart: a new coordinator replays the log.
    let config = h.c.config().clone();
    let mut c = Coordinator::new(config.clone(), 99);
    for p in 0..config.offsets_topic_num_partitions {
        c.begin_load(p);
    }
    for rec in &h.log {
        c.replay(rec.partition, &rec.key, rec.value.as_deref())
            .unwrap();
    }
    for p in 0..config.offsets_topic_num_partitions {
        c.complete_load(p, h.now);
    }
    let mut h2 = H {
        c,
        now: h.now,
        token: 1000,
        versions: HashMap::new(),
        log: Vec::new(),
    };
    assert_eq!(h2.c.group_state(G), Some(GroupState::Stable));
    assert_eq!(h2.c.generation(G), Some(r.generation_id));
    assert_eq!(h2.fetch(8, G, "t", 0).0, 100);
    assert_eq!(h2.fetch(8, "simple", "t", 0).0, 6, "the later commit wins");
    // The static member restarts too and rejoins without a rebalance.
    let (t, out) = h2.join_v(9, "", Some("i1"), &["t"]);
    let r2 = join_of(&out, t);
    assert_eq!((r2.error_code, r2.generation_id), (0, r.generation_id));
    let (ts, out) = h2.sync(5, &r2.member_id.to_string(), r.generation_id, &[]);
    assert_eq!(sync_of(&out, ts), (0, Bytes::from_static(b"A")));
    // Members that never come back are expired by their session timeout after the load.
    let mut h3 = H::new();
    let (ids, _) = h3.stable_group(1);
    let config = h3.c.config().clone();
    let mut c = Coordinator::new(config.clone(), 5);
    for rec in &h3.log {
        c.begin_load(rec.partition);
    }
    for rec in &h3.log {
        c.replay(rec.partition, &rec.key, rec.value.as_deref())
            .unwrap();
    }
    c.complete_load(partition_for(G, 50), 0);
    assert_eq!(c.group_state(G), Some(GroupState::Stable));
    c.tick(i64::from(SESSION_MS));
    assert_eq!(c.group_state(G), Some(GroupState::Empty));
    let _ = ids;
}

#[test]
fn delete_groups_writes_tombstones_that_replay_away() {
    let mut h = H::new();
    h.commit(8, "simple", -1, "", &[("t", 0, 5), ("u", 1, 2)]);
    let (t, out) = h.call(
        2,
        GroupRequest::DeleteGroups(
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("simple"))]),
        ),
    );
    let Some(GroupResponse::DeleteGroups(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(out.records.len(), 3);
    assert!(out.records.iter().all(|r| r.value.is_none()));
    assert_eq!(h.c.group_state("simple"), None);
    let mut c = Coordinator::new(GroupConfig::default(), 1);
    for rec in &h.log {
        c.replay(rec.partition, &rec.key, rec.value.as_deref())
            .unwrap();
    }
    assert_eq!(c.group_state("simple"), None);
}

#[test]
fn offset_delete_refuses_subscribed_topics() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    h.commit(8, G, g, &ids[0], &[("t", 0, 5), ("other", 0, 1)]);
    let req = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![
                    OffsetDeleteRequestPartition::default().with_partition_index(0)
                ]),
            OffsetDeleteRequestTopic::default()
                .with_name(TopicName(s("other")))
                .with_partitions(vec![
                    OffsetDeleteRequestPartition::default().with_partition_index(0)
                ]),
        ]);
    let (t, out) = h.call(0, GroupRequest::OffsetDelete(req));
    let Some(GroupResponse::OffsetDelete(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.error_code, 0);
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        E::GroupSubscribedToTopic.code()
    );
    assert_eq!(r.topics[1].partitions[0].error_code, 0);
    assert_eq!(out.records.len(), 1);
    assert_eq!(h.fetch(8, G, "other", 0).0, -1);
    assert_eq!(h.fetch(8, G, "t", 0).0, 5);
    let req = OffsetDeleteRequest::default().with_group_id(GroupId(s("nope")));
    let (t, out) = h.call(0, GroupRequest::OffsetDelete(req));
    let Some(GroupResponse::OffsetDelete(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.error_code, E::GroupIdNotFound.code());
}

#[test]
fn offsets_expire_after_retention() {
    let retention = 7 * 24 * 3_600 * 1_000;
    let mut h = H::new();
    h.commit(8, "simple", -1, "", &[("t", 0, 5)]);
    let committed_at = h.now;
    assert!(h
        .c
        .expire_offsets(committed_at + retention - 1)
        .records
        .is_empty());
    let out = h.c.expire_offsets(committed_at + retention);
    assert_eq!(
        out.records.len(),
        2,
        "offset tombstone, then group tombstone"
    );
    assert!(out.records.iter().all(|r| r.value.is_none()));
    assert_eq!(h.c.group_state("simple"), None);
    // A stable group's offsets for subscribed topics never expire.
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    h.commit(8, G, g, &ids[0], &[("t", 0, 5)]);
    let now = h.now;
    assert!(h.c.expire_offsets(now + 10 * retention).records.is_empty());
}

#[test]
fn list_and_describe_groups() {
    let mut h = H::new();
    let (ids, _) = h.stable_group(1);
    h.commit(8, "simple", -1, "", &[("t", 0, 1)]);
    for (v, filter, expect) in [
        (3i16, vec![], vec!["g", "simple"]),
        (4, vec![s("stable")], vec!["g"]),
        (4, vec![s("Empty")], vec!["simple"]),
        (5, vec![], vec!["g", "simple"]),
    ] {
        let (t, out) = h.call(
            v,
            GroupRequest::ListGroups(ListGroupsRequest::default().with_states_filter(filter)),
        );
        let Some(GroupResponse::ListGroups(r)) = out.response_for(t) else {
            panic!()
        };
        let names: Vec<&str> = r.groups.iter().map(|g| g.group_id.as_str()).collect();
        assert_eq!(names, expect, "v{v}");
    }
    for v in 0..=6 {
        let req =
            DescribeGroupsRequest::default().with_groups(vec![GroupId(s(G)), GroupId(s("nope"))]);
        let (t, out) = h.call(v, GroupRequest::DescribeGroups(req));
        let Some(GroupResponse::DescribeGroups(r)) = out.response_for(t) else {
            panic!()
        };
        let g = &r.groups[0];
        assert_eq!(
            (g.group_state.as_str(), g.protocol_data.as_str()),
            ("Stable", "range")
        );
        assert_eq!(g.members[0].member_id.as_str(), ids[0]);
        assert_eq!(
            &g.members[0].member_assignment[..],
            format!("assign-{}", ids[0]).as_bytes()
        );
        let missing = &r.groups[1];
        assert_eq!(missing.group_state.as_str(), "Dead");
        let expect = if v >= 6 { E::GroupIdNotFound.code() } else { 0 };
        assert_eq!(missing.error_code, expect, "v{v}");
    }
}

#[test]
fn subscription_parser_rejects_hostile_lengths() {
    use super::coordinator::tests_support::parse_topics;
    assert_eq!(
        parse_topics(&subscription(&["a", "bb"])),
        Some(vec!["a".into(), "bb".into()])
    );
    assert_eq!(parse_topics(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
    assert_eq!(parse_topics(&[0, 0, 0, 0, 0, 1, 0x7f, 0xff]), None);
}

/// A seeded random walk over joins, syncs, heartbeats, commits, leaves and clock advances by a
/// handful of members (static and dynamic, every JoinGroup version). Checks that nothing
/// panics, every response encodes at its version, no request is answered twice, generations
/// never go backwards, and replaying the records written rebuilds the same group.
#[test]
fn random_walks_keep_the_invariants() {
    let mut generations = Vec::new();
    let mut stable = 0;
    for seed in 1..=60u64 {
        let (generation, was_stable) = random_walk(seed);
        generations.push(generation);
        stable += usize::from(was_stable);
    }
    // The walks must actually get somewhere: groups that form, rebalance and settle.
    assert!(generations.iter().any(|g| *g >= 3), "{generations:?}");
    assert!(stable > 0, "no walk ever reached Stable");
}

/// Returns the final generation and whether the group was ever Stable.
fn random_walk(seed: u64) -> (i32, bool) {
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 500,
        ..GroupConfig::default()
    });
    // Per client: (member id, instance id, last generation seen).
    let mut clients: Vec<(String, Option<String>, i32)> = (0..5)
        .map(|i| {
            let instance = (i % 2 == 0).then(|| format!("inst-{i}"));
            (String::new(), instance, -1)
        })
        .collect();
    let mut answered = std::collections::HashSet::new();
    let mut last_generation = 0;
    let mut ever_stable = false;
    for step in 0..400 {
        let c = next(clients.len() as u64) as usize;
        let (member, instance, generation) = clients[c].clone();
        let out = match next(8) {
            0 | 1 => {
                let v = next(10) as i16;
                let instance = if v >= 5 { instance.as_deref() } else { None };
                let (_, out) = h.join_v(v, &member, instance, &["t"]);
                out
            }
            2 => {
                let assign: Vec<(String, Vec<u8>)> = clients
                    .iter()
                    .filter(|c| !c.0.is_empty())
                    .map(|c| (c.0.clone(), c.0.as_bytes().to_vec()))
                    .collect();
                let refs: Vec<(&str, &[u8])> = assign
                    .iter()
                    .map(|(m, a)| (m.as_str(), a.as_slice()))
                    .collect();
                let (_, out) = h.sync(next(6) as i16, &member, generation, &refs);
                out
            }
            3 => {
                h.heartbeat(&member, generation, None);
                Outcome::default()
            }
            4 => {
                h.commit(8, G, generation, &member, &[("t", next(3) as i32, step)]);
                Outcome::default()
            }
            5 => {
                let req = LeaveGroupRequest::default()
                    .with_group_id(GroupId(s(G)))
                    .with_members(vec![MemberIdentity::default()
                        .with_member_id(s(&member))
                        .with_group_instance_id(instance.as_deref().map(s))]);
                let (_, out) = h.call(4, GroupRequest::LeaveGroup(req));
                clients[c].0.clear();
                out
            }
            _ => h.advance(next(8_000) as i64),
        };
        for (token, response) in &out.responses {
            assert!(
                answered.insert(*token),
                "seed {seed}: token {token} answered twice"
            );
            if let GroupResponse::JoinGroup(r) = response {
                // Whoever this answers, remember ids handed out so clients can use them.
                if r.error_code == 0 || r.error_code == E::MemberIdRequired.code() {
                    if let Some(cl) = clients
                        .iter_mut()
                        .find(|cl| cl.0 == r.member_id.as_str() || cl.0.is_empty())
                    {
                        cl.0 = r.member_id.to_string();
                        if r.error_code == 0 {
                            cl.2 = r.generation_id;
                        }
                    }
                }
            }
        }
        let g = h.c.generation(G).unwrap_or(last_generation);
        assert!(g >= last_generation, "seed {seed}: generation went back");
        last_generation = g;
        ever_stable |= h.c.group_state(G) == Some(GroupState::Stable);
    }
    // Replay what was written: the group comes back with the same generation and state class.
    let mut c = Coordinator::new(h.c.config().clone(), 1);
    for rec in &h.log {
        c.replay(rec.partition, &rec.key, rec.value.as_deref())
            .unwrap();
    }
    if let Some(state) = h.c.group_state(G) {
        if matches!(state, GroupState::Stable | GroupState::Empty) {
            assert_eq!(c.generation(G), h.c.generation(G), "seed {seed}");
        }
    }
    (last_generation, ever_stable)
}
