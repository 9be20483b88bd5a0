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

/// A TxnOffsetCommit of `offset` for `t`-0 by producer `pid` at version 3, with no member.
fn txn_commit(h: &mut H, group: &str, pid: i64, offset: i64) -> (Vec<i16>, Option<(i64, i16)>) {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{ProducerId, TransactionalId, TxnOffsetCommitRequest};
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("tx")))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(2)
        .with_generation_id(-1)
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let (t, out) = h.call(3, GroupRequest::TxnOffsetCommit(req));
    let Some(GroupResponse::TxnOffsetCommit(r)) = out.response_for(t) else {
        panic!("no TxnOffsetCommit response");
    };
    let codes = r
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect();
    (codes, out.producer)
}

/// OffsetFetch v7 of `t`-0 with require_stable: (offset, error).
fn fetch_stable(h: &mut H, group: &str) -> (i64, i16) {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_require_stable(true)
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partition_indexes(vec![0])]));
    let (t, out) = h.call(7, GroupRequest::OffsetFetch(req));
    let Some(GroupResponse::OffsetFetch(r)) = out.response_for(t) else {
        panic!("no fetch response");
    };
    let p = &r.topics[0].partitions[0];
    (p.committed_offset, p.error_code)
}

#[test]
fn transactional_offsets_take_effect_only_with_their_commit_marker() {
    let mut h = H::new();
    h.commit(8, "g", -1, "", &[("t", 0, 5)]);
    let (codes, producer) = txn_commit(&mut h, "g", 77, 9);
    assert_eq!(codes, vec![0]);
    // Written as the producer's transactional batch.
    assert_eq!(producer, Some((77, 2)));
    // Pending: the committed offset is still 5; a stable read is refused until the end.
    assert_eq!(h.fetch(7, "g", "t", 0).0, 5);
    assert_eq!(
        fetch_stable(&mut h, "g"),
        (-1, E::UnstableOffsetCommit.code())
    );
    let partition = h.c.partition_for("g");
    // The ABORT marker drops the offset.
    let mut out = h.c.complete_transaction(partition, 77, false, h.now);
    h.check(&mut out);
    assert_eq!(fetch_stable(&mut h, "g"), (5, 0));
    // Another transaction's COMMIT marker makes its offset the committed one.
    txn_commit(&mut h, "g", 78, 11);
    let mut out = h.c.complete_transaction(partition, 78, true, h.now);
    h.check(&mut out);
    assert_eq!(fetch_stable(&mut h, "g"), (11, 0));
    // A marker of a producer with nothing pending changes nothing.
    let mut out = h.c.complete_transaction(partition, 79, true, h.now);
    h.check(&mut out);
    assert_eq!(fetch_stable(&mut h, "g"), (11, 0));
}

#[test]
fn replayed_transactional_offsets_wait_for_their_replayed_marker() {
    let mut h = H::new();
    txn_commit(&mut h, "g", 77, 9);
    txn_commit(&mut h, "g", 78, 12);
    let records = h.log.clone();
    let partition = h.c.partition_for("g");
    let mut c = Coordinator::new(GroupConfig::default(), 7);
    c.begin_load(partition);
    c.replay_transactional(partition, 77, &records[0].key, records[0].value.as_deref())
        .unwrap();
    c.replay_transactional(partition, 78, &records[1].key, records[1].value.as_deref())
        .unwrap();
    c.replay_txn_marker(partition, 78, false);
    c.replay_txn_marker(partition, 77, true);
    c.complete_load(partition, 0);
    let mut h = H::around(c, 2_000);
    assert_eq!(fetch_stable(&mut h, "g"), (9, 0));
}

#[test]
fn a_transactional_offset_never_overrides_an_offset_written_after_it() {
    let mut h = H::new();
    let partition = h.c.partition_for("g");
    // A plain commit after the transaction's offset wins at the transaction's commit.
    txn_commit(&mut h, "g", 77, 9);
    h.commit(8, "g", -1, "", &[("t", 0, 20)]);
    let mut out = h.c.complete_transaction(partition, 77, true, h.now);
    h.check(&mut out);
    assert_eq!(fetch_stable(&mut h, "g"), (20, 0));
    // Of two transactions, the later offset record wins whatever order they commit in.
    txn_commit(&mut h, "g", 78, 30);
    txn_commit(&mut h, "g", 79, 40);
    let mut out = h.c.complete_transaction(partition, 79, true, h.now);
    h.check(&mut out);
    let mut out = h.c.complete_transaction(partition, 78, true, h.now);
    h.check(&mut out);
    assert_eq!(fetch_stable(&mut h, "g"), (40, 0));
    // A replay of the same log, markers where they were written, agrees.
    let records = h.log.clone();
    assert_eq!(records.len(), 4);
    let mut c = Coordinator::new(GroupConfig::default(), 7);
    c.begin_load(partition);
    let r = |i: usize| (records[i].key.clone(), records[i].value.clone());
    let (k, v) = r(0);
    c.replay_transactional(partition, 77, &k, v.as_deref())
        .unwrap();
    let (k, v) = r(1);
    c.replay(partition, &k, v.as_deref()).unwrap();
    c.replay_txn_marker(partition, 77, true);
    let (k, v) = r(2);
    c.replay_transactional(partition, 78, &k, v.as_deref())
        .unwrap();
    let (k, v) = r(3);
    c.replay_transactional(partition, 79, &k, v.as_deref())
        .unwrap();
    c.replay_txn_marker(partition, 79, true);
    c.replay_txn_marker(partition, 78, true);
    c.complete_load(partition, 0);
    let mut h2 = H::around(c, 2_000);
    assert_eq!(fetch_stable(&mut h2, "g"), (40, 0));
}

/// OffsetDelete of `t`-0 for `group`: the partition's error code and the records written.
fn delete_offset(h: &mut H, group: &str) -> (i16, usize) {
    let req = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(vec![OffsetDeleteRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![
                OffsetDeleteRequestPartition::default().with_partition_index(0)
            ])]);
    let (t, out) = h.call(0, GroupRequest::OffsetDelete(req));
    let Some(GroupResponse::OffsetDelete(r)) = out.response_for(t) else {
        panic!("no OffsetDelete response")
    };
    (r.topics[0].partitions[0].error_code, out.records.len())
}

#[test]
fn expiry_waits_for_open_transactions_and_a_tombstone_removes_their_offsets() {
    let retention = 7 * 24 * 3_600 * 1_000;
    let mut h = H::new();
    let partition = h.c.partition_for("g");
    h.commit(8, "g", -1, "", &[("t", 0, 5)]);
    txn_commit(&mut h, "g", 77, 9);
    // The offset has a pending one: it does not expire, and the group stays.
    let now = h.now;
    let mut out = h.c.expire_offsets(now + 10 * retention);
    assert!(out.records.is_empty(), "{:?}", out.records);
    h.check(&mut out);
    assert_eq!(h.c.group_state("g"), Some(GroupState::Empty));
    // Without a committed offset, a pending one alone gets a tombstone from OffsetDelete.
    let mut out = h.c.complete_transaction(partition, 77, false, h.now);
    h.check(&mut out);
    assert_eq!(delete_offset(&mut h, "g"), (0, 1));
    txn_commit(&mut h, "g", 78, 11);
    assert_eq!(
        delete_offset(&mut h, "g"),
        (0, 1),
        "a tombstone for the pending offset"
    );
    assert_eq!(
        fetch_stable(&mut h, "g"),
        (-1, 0),
        "nothing pending any more"
    );
    let mut out = h.c.complete_transaction(partition, 78, true, h.now);
    h.check(&mut out);
    assert_eq!(
        fetch_stable(&mut h, "g"),
        (-1, 0),
        "the commit brings nothing back"
    );
    // Once no transaction is open, the group with no offsets (never written) goes.
    assert_eq!(h.c.group_state("g"), None);
}

#[test]
fn a_group_deleted_during_an_open_transaction_replays_away_as_it_went_live() {
    let mut h = H::new();
    let partition = h.c.partition_for("g");
    txn_commit(&mut h, "g", 77, 9);
    let (t, out) = h.call(
        2,
        GroupRequest::DeleteGroups(
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g"))]),
        ),
    );
    let Some(GroupResponse::DeleteGroups(r)) = out.response_for(t) else {
        panic!()
    };
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(h.c.group_state("g"), None);
    // The coordinator moves before the transaction's marker: the replay of the same records
    // (the transactional offset, then the tombstones) has no group either.
    let records = h.log.clone();
    let mut c = Coordinator::new(GroupConfig::default(), 7);
    c.begin_load(partition);
    c.replay_transactional(partition, 77, &records[0].key, records[0].value.as_deref())
        .unwrap();
    for r in &records[1..] {
        c.replay(partition, &r.key, r.value.as_deref()).unwrap();
    }
    c.complete_load(partition, 0);
    assert_eq!(c.group_state("g"), None);
}
