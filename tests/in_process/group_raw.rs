//! The group coordinator over the wire, with raw frames on separate connections: a JoinGroup
//! parks until the rebalance completes, a follower's SyncGroup parks until the leader's, a
//! member that stops heartbeating is expired by the timer task after its session timeout, and
//! the group's generation and offsets come back after a restart.

use crate::common;

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

const GROUP: &str = "raw-group";
const SESSION_MS: i32 = 6_000;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn join_request(member_id: &str) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_session_timeout_ms(SESSION_MS)
        .with_rebalance_timeout_ms(20_000)
        .with_member_id(s(member_id))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(bytes::Bytes::from_static(b"meta"))])
}

/// The member-id round trip, then the real join (which may park).
async fn join(client: &mut common::RawClient, member_id: &str) -> JoinGroupResponse {
    if member_id.is_empty() {
        let first: JoinGroupResponse = client.call(9, &join_request("")).await;
        assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
        return client.call(9, &join_request(&first.member_id)).await;
    }
    client.call(9, &join_request(member_id)).await
}

/// Polls DescribeGroups until the group is in `state` (within a minute).
async fn wait_for_state(client: &mut common::RawClient, state: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let described: DescribeGroupsResponse = client
            .call(
                5,
                &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
            )
            .await;
        let g = &described.groups[0];
        if g.error_code == 0 && g.group_state.as_str() == state {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the group never became {state}: {} (error {})",
            g.group_state.as_str(),
            g.error_code
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn sync(
    client: &mut common::RawClient,
    member_id: &str,
    generation: i32,
    assignments: &[(&str, &'static [u8])],
) -> SyncGroupResponse {
    client
        .call(5, &sync_request(member_id, generation, assignments))
        .await
}

fn sync_request(
    member_id: &str,
    generation: i32,
    assignments: &[(&str, &'static [u8])],
) -> SyncGroupRequest {
    SyncGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(bytes::Bytes::from_static(a))
                })
                .collect(),
        )
}

async fn heartbeat(client: &mut common::RawClient, member_id: &str, generation: i32) -> i16 {
    let req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id(generation)
        .with_member_id(s(member_id));
    let r: HeartbeatResponse = client.call(4, &req).await;
    r.error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_joins_and_syncs_session_expiry_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let overrides = [
        "group.initial.rebalance.delay.ms=0",
        "offsets.topic.num.partitions=3",
    ];
    let broker = common::start_broker(dir.path(), &overrides).await;
    let addr = broker.local_addr;
    let mut a = common::RawClient::connect(addr).await;
    // The topic the offsets are committed for: a commit for a topic that does not exist is
    // refused (UNKNOWN_TOPIC_OR_PARTITION), as in Kafka.
    let created: CreateTopicsResponse = a
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_num_partitions(1)
                    .with_replication_factor(1)]),
        )
        .await;
    assert_eq!(created.topics[0].error_code, 0);
    let found: FindCoordinatorResponse = a
        .call(3, &FindCoordinatorRequest::default().with_key(s(GROUP)))
        .await;
    assert_eq!(found.error_code, 0);
    // The coordinator partition may still be loading right after the topic was created.
    let mut probe: JoinGroupResponse = a.call(9, &join_request("")).await;
    for _ in 0..50 {
        if probe.error_code != ResponseError::CoordinatorLoadInProgress.code() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        probe = a.call(9, &join_request("")).await;
    }
    assert_eq!(probe.error_code, ResponseError::MemberIdRequired.code());
    let first = join(&mut a, &probe.member_id).await;
    assert_eq!(first.error_code, 0);
    let a_id = first.member_id.to_string();
    assert_eq!(
        (first.generation_id, first.leader.as_str()),
        (1, a_id.as_str())
    );
    let r = sync(&mut a, &a_id, 1, &[(&a_id, b"A1")]).await;
    assert_eq!((r.error_code, &r.assignment[..]), (0, &b"A1"[..]));

    // B joins on its own connection: its JoinGroup parks until A rejoins. The group turning
    // PreparingRebalance shows the broker has B's join; it must not have answered it.
    let b_join = tokio::spawn(async move {
        let mut b = common::RawClient::connect(addr).await;
        let r = join(&mut b, "").await;
        (b, r)
    });
    let mut observer = common::RawClient::connect(addr).await;
    wait_for_state(&mut observer, "PreparingRebalance").await;
    assert!(
        !b_join.is_finished(),
        "B's JoinGroup must wait for the rebalance"
    );
    assert_eq!(
        heartbeat(&mut a, &a_id, 1).await,
        ResponseError::RebalanceInProgress.code()
    );
    let a_join = join(&mut a, &a_id).await;
    let (mut b, b_joined) = b_join.await.unwrap();
    assert_eq!((a_join.error_code, b_joined.error_code), (0, 0));
    assert_eq!(a_join.generation_id, 2);
    // Answered with the generation A's rejoin completed: held until then.
    assert_eq!(b_joined.generation_id, 2);
    assert_eq!(a_join.members.len(), 2, "the leader learns both members");
    assert!(b_joined.members.is_empty());
    let b_id = b_joined.member_id.to_string();

    // B's SyncGroup parks until the leader's. Once the broker has read B's request off its
    // socket (the in-process broker's end of the connection has nothing left to read), it must
    // not have answered it; the answer it gets carries what only the leader's SyncGroup says.
    let b_port = b.stream.local_addr().unwrap().port();
    let (written_tx, written_rx) = tokio::sync::oneshot::channel();
    let b_sync = tokio::spawn({
        let b_id = b_id.clone();
        async move {
            let (id, frame) = b.encode(5, &sync_request(&b_id, 2, &[]));
            b.send_bytes(&frame).await;
            written_tx.send(()).unwrap();
            let response = b.read_frame().await.expect("broker closed B's connection");
            let r = common::RawClient::decode_response::<SyncGroupRequest>(5, response, id);
            (b, r)
        }
    });
    written_rx.await.unwrap();
    common::wait_until_read_by_broker(b_port, addr.port()).await;
    assert!(
        !b_sync.is_finished(),
        "B's SyncGroup must wait for the leader"
    );
    let r = sync(&mut a, &a_id, 2, &[(&a_id, b"A2"), (&b_id, b"B2")]).await;
    assert_eq!(&r.assignment[..], b"A2");
    let (_b, r) = b_sync.await.unwrap();
    assert_eq!((r.error_code, &r.assignment[..]), (0, &b"B2"[..]));

    // Offsets committed at generation 2.
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id_or_member_epoch(2)
        .with_member_id(s(&a_id))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(42)
                .with_committed_metadata(Some(s("m")))])]);
    let r: OffsetCommitResponse = a.call(8, &commit).await;
    assert_eq!(r.topics[0].partitions[0].error_code, 0);

    // B goes silent; A keeps heartbeating. After B's session timeout the timer task expires it
    // and A is told to rejoin.
    let started = std::time::Instant::now();
    let mut code = 0;
    while started.elapsed() < Duration::from_millis(SESSION_MS as u64 + 5_000) {
        code = heartbeat(&mut a, &a_id, 2).await;
        if code != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(code, ResponseError::RebalanceInProgress.code());
    assert!(
        started.elapsed() >= Duration::from_millis(SESSION_MS as u64 - 1_000),
        "expired too early: {:?}",
        started.elapsed()
    );
    let r = join(&mut a, &a_id).await;
    assert_eq!((r.generation_id, r.members.len()), (3, 1));
    let r = sync(&mut a, &a_id, 3, &[(&a_id, b"A3")]).await;
    assert_eq!(r.error_code, 0);

    // Restart: generation, membership and offsets are replayed from __consumer_offsets.
    drop(a);
    broker.shutdown().await.unwrap();
    let broker = common::start_broker(dir.path(), &overrides).await;
    let mut c = common::RawClient::connect(broker.local_addr).await;
    let mut described: DescribeGroupsResponse = c
        .call(
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
        )
        .await;
    for _ in 0..50 {
        if described.groups[0].error_code != ResponseError::CoordinatorLoadInProgress.code() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        described = c
            .call(
                5,
                &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
            )
            .await;
    }
    let g = &described.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(g.group_state.as_str(), "Stable");
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_id.as_str(), a_id);
    assert_eq!(&g.members[0].member_assignment[..], b"A3");
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partition_indexes(vec![0])]));
    let r: OffsetFetchResponse = c.call(7, &fetch).await;
    assert_eq!(r.error_code, 0);
    let p = &r.topics[0].partitions[0];
    assert_eq!((p.committed_offset, p.metadata.as_deref()), (42, Some("m")));
    // The member never came back: its session expires after the load, too.
    wait_for_state(&mut c, "Empty").await;
    broker.shutdown().await.unwrap();
}

/// Commits `rounds` × `partitions` offsets of topic `t` for the simple (memberless) group
/// `group`, round `r` committing offset `r` on every partition.
async fn commit_rounds(client: &mut common::RawClient, group: &str, partitions: i32, rounds: i64) {
    // FindCoordinator creates `__consumer_offsets`, as a client's first step does.
    let found: FindCoordinatorResponse = client
        .call(3, &FindCoordinatorRequest::default().with_key(s(group)))
        .await;
    assert_eq!(found.error_code, 0);
    for round in 1..=rounds {
        let commit = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(s(""))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(
                    (0..partitions)
                        .map(|p| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(round)
                                .with_committed_metadata(Some(s("m")))
                        })
                        .collect(),
                )]);
        // The first commit may find the new coordinator partition still loading.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r: OffsetCommitResponse = client.call(8, &commit).await;
            let code = r.topics[0].partitions[0].error_code;
            let retriable = [
                ResponseError::CoordinatorNotAvailable.code(),
                ResponseError::NotCoordinator.code(),
                ResponseError::CoordinatorLoadInProgress.code(),
            ];
            if round == 1 && retriable.contains(&code) && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            for p in &r.topics[0].partitions {
                assert_eq!(p.error_code, 0, "round {round}: {r:?}");
            }
            break;
        }
    }
}

/// Bytes of `__consumer_offsets-0`'s `.log` segments under `dir`.
fn offsets_log_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir.join("__consumer_offsets-0"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Records the group coordinator replays when it loads `__consumer_offsets` after `ROUNDS`
/// rounds of commits on `PARTITIONS` partitions, through a restart (the load a coordinator
/// move makes): with `cleaner` on, the log cleaner compacts the offsets topic down to about one
/// record per committed partition, so the load stays small however many commits were made;
/// off, the load replays every commit. Either way the last commit is what OffsetFetch answers.
async fn records_loaded_after_a_restart(cleaner: bool) -> u64 {
    const PARTITIONS: i32 = 10;
    const ROUNDS: i64 = 1_000;
    const GROUP_NAME: &str = "commit-heavy";
    let dir = tempfile::tempdir().unwrap();
    let enable = format!("log.cleaner.enable={cleaner}");
    let overrides = [
        "offsets.topic.num.partitions=1",
        "offsets.topic.segment.bytes=65536",
        "log.cleaner.backoff.ms=50",
        enable.as_str(),
    ];
    let broker = common::start_broker(dir.path(), &overrides).await;
    let mut client = common::RawClient::connect(broker.local_addr).await;
    let created: CreateTopicsResponse = client
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_num_partitions(PARTITIONS)
                    .with_replication_factor(1)]),
        )
        .await;
    assert_eq!(created.topics[0].error_code, 0);
    commit_rounds(&mut client, GROUP_NAME, PARTITIONS, ROUNDS).await;
    let written = offsets_log_bytes(dir.path());
    if cleaner {
        // Everything but the active segment is compacted to the last commit per partition.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while offsets_log_bytes(dir.path()) > 65_536 + 8_192 {
            assert!(
                std::time::Instant::now() < deadline,
                "__consumer_offsets still holds {} of {written} bytes",
                offsets_log_bytes(dir.path())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    drop(client);
    broker.shutdown().await.unwrap();

    let broker = common::start_broker(dir.path(), &overrides).await;
    let mut client = common::RawClient::connect(broker.local_addr).await;
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(GROUP_NAME)))
        .with_topics(Some(vec![OffsetFetchRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partition_indexes((0..PARTITIONS).collect())]));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let r: OffsetFetchResponse = loop {
        let r: OffsetFetchResponse = client.call(7, &fetch).await;
        if r.error_code != ResponseError::CoordinatorLoadInProgress.code() {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "still loading");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(r.error_code, 0);
    for p in &r.topics[0].partitions {
        assert_eq!(
            (p.error_code, p.committed_offset),
            (0, ROUNDS),
            "partition {}",
            p.partition_index
        );
    }
    let loads = broker.context.groups.load_stats();
    assert_eq!(loads.loads.load(std::sync::atomic::Ordering::Relaxed), 1);
    let records = loads
        .last_records
        .load(std::sync::atomic::Ordering::Relaxed);
    drop(client);
    broker.shutdown().await.unwrap();
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_offsets_topic_keeps_the_coordinator_load_small() {
    let commits = 10_000;
    let uncleaned = records_loaded_after_a_restart(false).await;
    assert_eq!(
        uncleaned, commits,
        "without the cleaner every commit is replayed"
    );
    let cleaned = records_loaded_after_a_restart(true).await;
    eprintln!(
        "records loaded after {commits} commits: {uncleaned} uncompacted, {cleaned} compacted"
    );
    // At most the active segment (64 KiB of commit records, under 2,000) and one record per
    // partition from the cleaned part, however many commits came before.
    assert!(
        cleaned < 2_000,
        "{cleaned} records replayed after {commits} commits"
    );
}
