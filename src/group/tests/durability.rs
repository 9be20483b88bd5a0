//! Group state becomes visible only once it is durable: failed appends are rolled back, writes
//! the high watermark has not reached stay pending (unknown), and reads serve durable state.

use super::*;

fn describe(h: &mut H, group: &str) -> (String, Vec<String>) {
    let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    let (t, out) = h.call(5, GroupRequest::DescribeGroups(req));
    let Some(GroupResponse::DescribeGroups(r)) = out.response_for(t) else {
        panic!("no describe response")
    };
    let g = &r.groups[0];
    (
        g.group_state.to_string(),
        g.members.iter().map(|m| m.member_id.to_string()).collect(),
    )
}

fn leave(h: &mut H, member: &str) -> Outcome {
    let req = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_member_id(s(member));
    h.call(2, GroupRequest::LeaveGroup(req)).1
}

#[test]
fn a_failed_commit_is_rolled_back() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    assert_eq!(h.commit(8, G, g, &ids[0], &[("t", 0, 5)]), vec![0]);
    h.fail_appends = true;
    h.commit(8, G, g, &ids[0], &[("t", 0, 7)]);
    // A simple group that only a failed commit would have created does not exist either.
    h.commit(8, "fresh", -1, "", &[("t", 0, 1)]);
    h.fail_appends = false;
    assert_eq!(h.fetch(8, G, "t", 0).0, 5);
    assert_eq!(h.fetch(8, "fresh", "t", 0).0, -1);
    assert_eq!(h.c.group_state("fresh"), None);
    // Later decisions do not see it either: with a generation, a commit to a group that does
    // not exist is ILLEGAL_GENERATION (an existing empty group would say UNKNOWN_MEMBER_ID).
    assert_eq!(
        h.commit(8, "fresh", 3, "m", &[("t", 0, 2)]),
        vec![E::IllegalGeneration.code()]
    );
    assert_eq!(h.commit(8, G, g, &ids[0], &[("t", 0, 8)]), vec![0]);
    assert_eq!(h.fetch(8, G, "t", 0).0, 8);
}

#[test]
fn a_failed_generation_change_is_rolled_back() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    // The last member leaves: the group would become Empty at generation g + 1, written as
    // one GroupMetadata record. The append fails.
    h.fail_appends = true;
    let out = leave(&mut h, &ids[0]);
    assert_eq!(out.records.len(), 1, "the empty group is written");
    h.fail_appends = false;
    assert_eq!(h.c.generation(G), Some(g));
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
    assert_eq!(describe(&mut h, G), ("Stable".into(), ids.clone()));
    // The member is still in the group at generation g, as far as decisions go too.
    assert_eq!(h.heartbeat(&ids[0], g, None), 0);
    // Once a leave succeeds, the change is there.
    leave(&mut h, &ids[0]);
    assert_eq!(h.c.generation(G), Some(g + 1));
    assert_eq!(describe(&mut h, G), ("Empty".into(), vec![]));
}

#[test]
fn a_failed_sync_write_answers_every_parked_sync_and_rebalances_as_in_kafka() {
    // Kafka answers every member waiting in SyncGroup with the append's error and starts a new
    // rebalance when storing the leader's assignment fails; the leader's own request is answered
    // by the shell with the same failure.
    let mut h = H::new();
    let (_, ta, _) = h.join_new();
    let (_, tb, _) = h.join_new();
    let out = h.advance(0);
    let (ra, rb) = (join_of(&out, ta), join_of(&out, tb));
    let leader = ra.leader.to_string();
    let follower = [&ra, &rb]
        .into_iter()
        .map(|r| r.member_id.to_string())
        .find(|m| *m != leader)
        .unwrap();
    let g = ra.generation_id;
    let (t_follower, out) = h.sync(5, &follower, g, &[]);
    assert!(out.responses.is_empty(), "the follower's sync parks");
    h.fail_appends = true;
    let assignment: [(&str, &[u8]); 2] = [(&leader, b"L"), (&follower, b"F")];
    let (t_leader, out) = h.sync(5, &leader, g, &assignment);
    h.fail_appends = false;
    assert!(
        out.response_for(t_leader).is_none(),
        "the leader's request is answered by the shell"
    );
    assert_eq!(
        sync_of(&out, t_follower).0,
        15,
        "COORDINATOR_NOT_AVAILABLE to the parked follower"
    );
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
    // Both rejoin and the next generation completes as usual.
    let (tj1, mut out) = h.join_v(9, &leader, None, &["t"]);
    let (tj2, more) = h.join_v(9, &follower, None, &["t"]);
    merge(&mut out, more);
    merge(&mut out, h.advance(0));
    let g2 = join_of(&out, tj1).generation_id;
    assert_eq!(join_of(&out, tj2).generation_id, g2);
    assert!(g2 > g);
    let (t_follower, _) = h.sync(5, &follower, g2, &[]);
    let (t_leader, out) = h.sync(5, &leader, g2, &assignment);
    assert_eq!(sync_of(&out, t_leader), (0, Bytes::from_static(b"L")));
    assert_eq!(sync_of(&out, t_follower), (0, Bytes::from_static(b"F")));
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
}

#[test]
fn a_join_while_the_assignment_is_written_restarts_the_rebalance_as_in_kafka() {
    // Kafka moves a group to Stable only when the leader's assignment is durable; a member
    // joining before that starts a new rebalance and the syncs get REBALANCE_IN_PROGRESS, so a
    // member never gets an assignment that is revoked before it could be used.
    let mut h = H::new();
    let (_, ta, _) = h.join_new();
    let out = h.advance(0);
    let ra = join_of(&out, ta);
    let leader = ra.member_id.to_string();
    let g = ra.generation_id;
    h.hold_high_watermark = true;
    let assignment: [(&str, &[u8]); 1] = [(&leader, b"L")];
    let (t_leader, out) = h.sync(5, &leader, g, &assignment);
    assert!(
        out.responses.is_empty(),
        "parked until the assignment is durable"
    );
    let (_, tb, out) = h.join_new();
    assert_eq!(
        sync_of(&out, t_leader).0,
        27,
        "REBALANCE_IN_PROGRESS to the parked sync"
    );
    let released = h.release_high_watermark();
    assert!(
        released.responses.is_empty(),
        "the old generation never settles"
    );
    assert_eq!(h.c.group_state(G), Some(GroupState::PreparingRebalance));
    let _ = tb;
}

#[test]
fn a_write_not_yet_durable_is_hidden_until_the_high_watermark_covers_it() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    h.commit(8, G, g, &ids[0], &[("t", 0, 5)]);
    let p = partition_for(G, 50);
    // The high watermark stops (a follower is slow, or the write timed out): unknown.
    h.hold_high_watermark = true;
    h.commit(8, G, g, &ids[0], &[("t", 0, 7)]);
    assert_eq!(
        h.fetch(8, G, "t", 0).0,
        5,
        "OffsetFetch serves durable offsets"
    );
    let pending_end = h.c.durable_at(p).expect("the commit is pending");
    assert_eq!(h.c.partitions_with_pending_writes(), vec![p]);
    // Decisions see the pending write, and their answers wait for it, even without records.
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(G)))
        .with_generation_id(g)
        .with_member_id(s(&ids[0]));
    let (_, out) = h.call(4, GroupRequest::Heartbeat(req));
    assert!(out.records.is_empty());
    assert_eq!(out.partitions.iter().copied().collect::<Vec<_>>(), vec![p]);
    assert_eq!(h.c.durable_at(p), Some(pending_end));
    // A restart now would not find the commit: it is not below the high watermark.
    assert_eq!(h.restart(3).fetch(8, G, "t", 0).0, 5);
    // The high watermark gets there later: the commit becomes durable, without anyone waiting.
    h.release_high_watermark();
    assert_eq!(h.c.durable_at(p), None);
    assert_eq!(h.fetch(8, G, "t", 0).0, 7);
    assert_eq!(h.restart(3).fetch(8, G, "t", 0).0, 7);
}

#[test]
fn a_pending_write_becomes_durable_in_order_with_the_writes_after_it() {
    let mut h = H::new();
    h.hold_high_watermark = true;
    h.commit(8, "simple", -1, "", &[("t", 0, 1)]);
    h.commit(8, "simple", -1, "", &[("t", 0, 2)]);
    h.commit(8, "simple", -1, "", &[("t", 0, 3)]);
    let p = partition_for("simple", 50);
    assert_eq!(h.fetch(8, "simple", "t", 0).0, -1);
    // The high watermark covers the first two writes only.
    h.c.observe_high_watermark(p, 2);
    assert_eq!(h.fetch(8, "simple", "t", 0).0, 2);
    assert_eq!(h.c.durable_at(p), Some(3));
    // A failed append now rolls back to the last pending write, not to the durable state.
    h.fail_appends = true;
    h.commit(8, "simple", -1, "", &[("t", 0, 9)]);
    h.fail_appends = false;
    h.c.observe_high_watermark(p, 3);
    assert_eq!(h.fetch(8, "simple", "t", 0).0, 3);
}

#[test]
fn unloading_discards_pending_state() {
    let mut h = H::new();
    h.commit(8, "simple", -1, "", &[("t", 0, 5)]);
    h.hold_high_watermark = true;
    h.commit(8, "simple", -1, "", &[("t", 0, 6)]);
    let p = partition_for("simple", 50);
    // Leadership moves away and comes back (a new leader epoch): the partition is reloaded from
    // the records below the high watermark; the pending commit was never durable.
    h.c.unload(p);
    assert_eq!(h.c.durable_at(p), None);
    h.c.begin_load(p);
    for rec in h.durable_log() {
        h.c.replay(rec.partition, &rec.key, rec.value.as_deref())
            .unwrap();
    }
    h.c.complete_load(p, h.now);
    assert_eq!(h.fetch(8, "simple", "t", 0).0, 5);
}

#[test]
fn a_timer_whose_write_fails_runs_again_after_a_backoff() {
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    // The member goes silent; its session expiry empties the group, and that write fails.
    h.fail_appends = true;
    let out = h.advance(i64::from(SESSION_MS));
    assert_eq!(out.records.len(), 1);
    assert_eq!(h.c.group_state(G), Some(GroupState::Stable));
    assert_eq!(h.c.next_deadline_ms(), Some(h.now + 500));
    assert!(h.advance(499).records.is_empty(), "not before the backoff");
    h.fail_appends = false;
    h.advance(1);
    assert_eq!(h.c.group_state(G), Some(GroupState::Empty));
    assert_eq!(h.c.generation(G), Some(g + 1));
    let _ = ids;
}

#[test]
#[should_panic(expected = "append was reported")]
fn an_operation_before_the_append_is_reported_is_a_bug() {
    let mut h = H::new();
    let ctx = RequestContext {
        token: 1,
        api_version: 8,
        client_id: "c".into(),
        client_host: "h".into(),
    };
    let commit = || {
        GroupRequest::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s("simple")))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default().with_committed_offset(1)
                    ])]),
        )
    };
    let out = h.c.handle(&ctx, commit(), 0);
    assert_eq!(out.records.len(), 1);
    h.c.handle(&ctx, commit(), 0);
}
