//! Tables and scenarios for the group coordinator, driven with a manual clock. Every response
//! the machine produces is also encoded at its request's version, so a field set outside its
//! version range fails the test that produced it.

mod admin;
mod consumer;
mod durability;
mod load;
mod membership;
mod migration;
mod offsets;
mod service;
mod walk;

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

/// The machine plus a perfect in-memory `__consumer_offsets` by default: every append lands
/// and the high watermark follows at once. `fail_appends` and `hold_high_watermark` make the
/// log fail appends or stop the high watermark, for the durability tests.
/// Adds `more` to `all`.
fn merge(all: &mut Outcome, more: Outcome) {
    all.records.extend(more.records);
    all.responses.extend(more.responses);
    all.timers.extend(more.timers);
    all.partitions.extend(more.partitions);
}

struct H {
    c: Coordinator,
    now: i64,
    token: u64,
    versions: HashMap<u64, i16>,
    /// Every record appended, in log order.
    log: Vec<CoordinatorRecord>,
    log_end: HashMap<i32, i64>,
    high_watermark: HashMap<i32, i64>,
    fail_appends: bool,
    hold_high_watermark: bool,
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
        Self::around(c, 1_000)
    }

    fn around(c: Coordinator, now: i64) -> Self {
        Self {
            c,
            now,
            token: 1_000,
            versions: HashMap::new(),
            log: Vec::new(),
            log_end: HashMap::new(),
            high_watermark: HashMap::new(),
            fail_appends: false,
            hold_high_watermark: false,
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
        let mut out = self.c.handle(&ctx, req, self.now);
        self.check(&mut out);
        (token, out)
    }

    /// Checks every response encodes at its version, then plays the log's part: appends the
    /// records and reports the append (and the high watermark) to the machine, as the service
    /// does; the answers of groups whose assignment became durable join `out`.
    fn check(&mut self, out: &mut Outcome) {
        for (token, response) in &out.responses {
            let v = self.versions.get(token).copied().unwrap_or(0);
            encode_response(
                response.api_key(),
                v,
                1,
                &response.clone().into_response_kind(),
            )
            .unwrap_or_else(|e| panic!("{:?} v{v} does not encode: {e}", response.api_key()));
        }
        let answered: Vec<Token> = out.responses.iter().map(|(t, _)| *t).collect();
        let mut partitions: Vec<i32> = out.records.iter().map(|r| r.partition).collect();
        partitions.dedup();
        partitions.sort_unstable();
        partitions.dedup();
        let mut failed_assignments = Vec::new();
        for p in partitions {
            if self.fail_appends {
                failed_assignments.extend(self.c.write_failed(p, &answered, self.now));
                continue;
            }
            let records: Vec<_> = out.records.iter().filter(|r| r.partition == p).collect();
            let end = self.log_end.entry(p).or_default();
            *end += records.len() as i64;
            let end = *end;
            self.log.extend(records.into_iter().cloned());
            self.c.write_appended(p, end);
            if !self.hold_high_watermark {
                self.high_watermark.insert(p, end);
                self.c.observe_high_watermark(p, end);
                let settled = self.settle(p);
                merge(out, settled);
            }
        }
        // As the service does, once every partition of the operation is reported.
        if !failed_assignments.is_empty() {
            let mut failed =
                self.c
                    .fail_assignments(&failed_assignments, E::CoordinatorNotAvailable, self.now);
            self.check(&mut failed);
            merge(out, failed);
        }
    }

    /// Groups whose assignment the high watermark now covers become Stable.
    fn settle(&mut self, p: i32) -> Outcome {
        let mut settled = self.c.settle_assignments(p, self.now);
        self.check(&mut settled);
        settled
    }

    /// The held high watermarks catch up with the log; returns the answers that releases.
    fn release_high_watermark(&mut self) -> Outcome {
        self.hold_high_watermark = false;
        let mut all = Outcome::default();
        for (p, end) in self.log_end.clone() {
            self.high_watermark.insert(p, end);
            self.c.observe_high_watermark(p, end);
            let settled = self.settle(p);
            merge(&mut all, settled);
        }
        all
    }

    /// The records below the high watermark: what a restart would replay.
    fn durable_log(&self) -> Vec<CoordinatorRecord> {
        let mut seen: HashMap<i32, i64> = HashMap::new();
        self.log
            .iter()
            .filter(|r| {
                let offset = seen.entry(r.partition).or_default();
                *offset += 1;
                *offset <= self.high_watermark.get(&r.partition).copied().unwrap_or(0)
            })
            .cloned()
            .collect()
    }

    /// A new machine that replays the durable log, as a restart would.
    fn restart(&self, seed: u64) -> H {
        let config = self.c.config().clone();
        let mut c = Coordinator::new(config.clone(), seed);
        for p in 0..config.offsets_topic_num_partitions {
            c.begin_load(p);
        }
        for rec in self.durable_log() {
            c.replay(rec.partition, &rec.key, rec.value.as_deref())
                .unwrap();
        }
        for p in 0..config.offsets_topic_num_partitions {
            c.complete_load(p, self.now);
        }
        H::around(c, self.now)
    }

    /// Moves the clock and runs the timers due, partition by partition.
    fn advance(&mut self, ms: i64) -> Outcome {
        self.now += ms;
        let mut all = Outcome::default();
        for p in self.c.due_partitions(self.now) {
            let mut out = self.c.tick(p, self.now);
            self.check(&mut out);
            merge(&mut all, out);
        }
        all
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
        self.call(v, GroupRequest::JoinGroup(req, Default::default()))
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
