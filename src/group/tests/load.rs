//! Partition ownership, replay, and the pieces that must match Kafka byte for byte.

use super::*;

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
    let mut h2 = h.restart(99);
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
    let mut h4 = h3.restart(5);
    assert_eq!(h4.c.group_state(G), Some(GroupState::Stable));
    h4.advance(i64::from(SESSION_MS));
    assert_eq!(h4.c.group_state(G), Some(GroupState::Empty));
    let _ = ids;
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
