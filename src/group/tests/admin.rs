//! ListGroups, DescribeGroups, DeleteGroups.

use super::*;

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
    let mut before = H::new();
    before.commit(8, "simple", -1, "", &[("t", 0, 5), ("u", 1, 2)]);
    assert_eq!(
        before.restart(1).c.group_state("simple"),
        Some(GroupState::Empty),
        "replay without the tombstones keeps the group"
    );
    assert_eq!(h.restart(1).c.group_state("simple"), None);
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
