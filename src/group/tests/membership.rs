//! JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalances they drive.

use super::*;

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
    let (t1, _) = h.call(9, GroupRequest::JoinGroup(req, Default::default()));
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
    let (t, out) = h.call(9, GroupRequest::JoinGroup(req, Default::default()));
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
                let (t, o) = h.call(7, GroupRequest::JoinGroup(req, Default::default()));
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
                let (t, o) = h.call(7, GroupRequest::JoinGroup(req, Default::default()));
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
                let (t, o) = h.call(9, GroupRequest::JoinGroup(req, Default::default()));
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
fn a_known_member_refused_for_a_full_group_leaves_it_and_the_rebalance_completes() {
    let mut h = H::with(GroupConfig {
        initial_rebalance_delay_ms: 0,
        max_size: 2,
        ..GroupConfig::default()
    });
    let (ids, g) = h.stable_group(2);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    // A changes its subscription: a rebalance starts, A waits in it.
    let (ta, out) = h.join_v(9, &a, None, &["t", "u"]);
    assert!(out.responses.is_empty());
    // A new member takes the second place in the rebalance.
    let (c, tc, _) = h.join_new();
    // B rejoins too late: the group is full; B leaves it, and the rebalance completes with A
    // and C instead of waiting for B.
    let (tb, out) = h.join_v(9, &b, None, &["t"]);
    let refused = join_of(&out, tb);
    assert_eq!(refused.error_code, E::GroupMaxSizeReached.code());
    assert_eq!(refused.member_id.as_str(), "");
    let (ja, jc) = (join_of(&out, ta), join_of(&out, tc));
    assert_eq!((ja.error_code, jc.error_code), (0, 0));
    assert_eq!(ja.generation_id, g + 1);
    // The leader's answer lists the members.
    let leader = if ja.members.is_empty() { &jc } else { &ja };
    let mut members: Vec<String> = leader
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect();
    members.sort();
    let mut expected = vec![a, c];
    expected.sort();
    assert_eq!(members, expected);
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
