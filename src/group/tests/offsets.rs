//! OffsetCommit, OffsetFetch, OffsetDelete and retention.

use super::*;

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

/// OffsetCommit v2 with `retention_time_ms`: an explicit expiry for each offset.
fn commit_with_retention(
    h: &mut H,
    group: &str,
    generation: i32,
    member: &str,
    topic: &str,
    retention_time_ms: i64,
) {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_retention_time_ms(retention_time_ms)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(5)])]);
    let (t, out) = h.call(2, GroupRequest::OffsetCommit(req));
    let Some(GroupResponse::OffsetCommit(r)) = out.response_for(t) else {
        panic!("no commit response")
    };
    assert_eq!(r.topics[0].partitions[0].error_code, 0);
}

#[test]
fn an_explicit_retention_expires_offsets_only_where_kafka_expires_them() {
    // A Stable consumer group: its subscribed topic's offset stays past the explicit expiry;
    // an unsubscribed topic's offset goes at it.
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    commit_with_retention(&mut h, G, g, &ids[0], "t", 1_000);
    commit_with_retention(&mut h, G, g, &ids[0], "other", 1_000);
    let now = h.now;
    assert!(h.c.expire_offsets(now + 999).records.is_empty());
    let mut out = h.c.expire_offsets(now + 10_000);
    assert_eq!(out.records.len(), 1, "only the unsubscribed topic's offset");
    h.check(&mut out);
    assert_eq!(h.fetch(8, G, "t", 0).0, 5);
    assert_eq!(h.fetch(8, G, "other", 0).0, -1);
    // A simple group (no members): the explicit expiry applies.
    commit_with_retention(&mut h, "simple", -1, "", "t", 1_000);
    let now = h.now;
    assert!(h.c.expire_offsets(now + 999).records.is_empty());
    assert_eq!(h.c.expire_offsets(now + 1_000).records.len(), 2);
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
    let mut out = h.c.expire_offsets(committed_at + retention);
    assert_eq!(
        out.records.len(),
        2,
        "offset tombstone, then group tombstone"
    );
    assert!(out.records.iter().all(|r| r.value.is_none()));
    assert_eq!(
        h.c.group_state("simple"),
        Some(GroupState::Empty),
        "not gone until the tombstones are durable"
    );
    h.check(&mut out);
    assert_eq!(h.c.group_state("simple"), None);
    // A stable group's offsets for subscribed topics never expire.
    let mut h = H::new();
    let (ids, g) = h.stable_group(1);
    h.commit(8, G, g, &ids[0], &[("t", 0, 5)]);
    let now = h.now;
    assert!(h.c.expire_offsets(now + 10 * retention).records.is_empty());
}
