//! The group coordinator over the wire, with raw frames on separate connections: a JoinGroup
//! parks until the rebalance completes, a follower's SyncGroup parks until the leader's, a
//! member that stops heartbeating is expired by the timer task after its session timeout, and
//! the group's generation and offsets come back after a restart.

mod common;

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
