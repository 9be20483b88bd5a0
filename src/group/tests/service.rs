//! The shell over a log that fails appends or holds its high watermark on demand: clients are
//! answered only once what the answer describes is durable, and what is not durable never
//! shows in OffsetFetch or DescribeGroups. Time is tokio's paused clock (the commit timeout)
//! and a manual clock (group timers).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::records::RecordBatchDecoder;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::*;
use crate::clock::ManualClock;
use crate::config::{BrokerConfig, RawConfig};
use crate::errors::ApiError;
use crate::group::log::{encode_batch, CoordinatorLog, Durability, DurabilityFuture};
use crate::group::service::{Caller, GroupService};
use crate::metadata::{
    ImageListener, MetadataCache, MetadataImage, PartitionRegistration, TopicImage,
};

/// `__consumer_offsets` in memory: appends fail while `fail_appends` is set, and the high
/// watermark follows the log end unless held.
#[derive(Default)]
struct MemoryLog {
    state: Mutex<MemoryState>,
    moved: Notify,
}

#[derive(Default)]
struct MemoryState {
    records: HashMap<i32, Vec<CoordinatorRecord>>,
    high_watermark: HashMap<i32, i64>,
    fail_appends: bool,
    hold: bool,
}

impl MemoryLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap()
    }

    fn fail_appends(&self, fail: bool) {
        self.lock().fail_appends = fail;
    }

    fn hold_high_watermark(&self) {
        self.lock().hold = true;
    }

    fn release_high_watermark(&self) {
        let mut state = self.lock();
        state.hold = false;
        let ends: Vec<(i32, i64)> = state
            .records
            .iter()
            .map(|(p, r)| (*p, r.len() as i64))
            .collect();
        state.high_watermark.extend(ends);
        drop(state);
        self.moved.notify_waiters();
    }

    /// What a new leader whose log ends at the high watermark does: the records above it go.
    fn truncate_to_high_watermark(&self) {
        let mut state = self.lock();
        let hws = state.high_watermark.clone();
        for (p, log) in state.records.iter_mut() {
            log.truncate(hws.get(p).copied().unwrap_or(0) as usize);
        }
    }

    fn log_end(&self, partition: i32) -> i64 {
        self.lock()
            .records
            .get(&partition)
            .map_or(0, |r| r.len() as i64)
    }
}

impl CoordinatorLog for MemoryLog {
    fn append(
        &self,
        partition: i32,
        records: &[CoordinatorRecord],
        _now_ms: i64,
    ) -> Result<i64, ApiError> {
        let mut state = self.lock();
        if state.fail_appends {
            return Err(ApiError::NotEnoughReplicas);
        }
        let log = state.records.entry(partition).or_default();
        log.extend(records.iter().cloned());
        let end = log.len() as i64;
        if !state.hold {
            state.high_watermark.insert(partition, end);
        }
        drop(state);
        self.moved.notify_waiters();
        Ok(end)
    }

    fn high_watermark(&self, partition: i32) -> Result<i64, ApiError> {
        Ok(self
            .lock()
            .high_watermark
            .get(&partition)
            .copied()
            .unwrap_or(0))
    }

    fn wait_for_high_watermark(
        &self,
        partition: i32,
        offset: i64,
        timeout: Duration,
    ) -> DurabilityFuture<'_> {
        Box::pin(async move {
            let deadline = Instant::now() + timeout;
            loop {
                let moved = self.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if self.high_watermark(partition).unwrap() >= offset {
                    return Durability::Durable;
                }
                tokio::select! {
                    _ = moved => {}
                    _ = tokio::time::sleep_until(deadline) => return Durability::Unknown,
                }
            }
        })
    }

    fn log_start_offset(&self, _partition: i32) -> Result<i64, ApiError> {
        Ok(0)
    }

    fn read(
        &self,
        partition: i32,
        offset: i64,
        _max_bytes: usize,
    ) -> Result<bytes::Bytes, ApiError> {
        let state = self.lock();
        let log = state.records.get(&partition).cloned().unwrap_or_default();
        if offset >= log.len() as i64 {
            return Ok(bytes::Bytes::new());
        }
        // One batch per record, so a high watermark may fall between any two of them.
        let mut out = bytes::BytesMut::new();
        for (i, record) in log.iter().enumerate().skip(offset as usize) {
            out.extend_from_slice(&encode_batch(std::slice::from_ref(record), i as i64, 0)?);
        }
        Ok(out.freeze())
    }
}

const GROUP: &str = "svc";

struct Broker {
    service: Arc<GroupService>,
    log: Arc<MemoryLog>,
    node_id: i32,
    _shutdown: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

/// An image in which `leader` leads the one partition of `__consumer_offsets` at `epoch`.
fn image(leader: i32, epoch: i32) -> MetadataImage {
    let mut image = MetadataImage::default();
    let topic = TopicImage {
        name: OFFSETS_TOPIC_NAME.into(),
        id: uuid::Uuid::from_u128(7),
        partitions: [(
            0,
            PartitionRegistration {
                replicas: vec![1],
                isr: vec![1],
                leader,
                leader_epoch: epoch,
                partition_epoch: epoch,
                leader_recovery_state: Default::default(),
                adding_replicas: vec![],
                removing_replicas: vec![],
            },
        )]
        .into(),
        configs: Default::default(),
        history: Default::default(),
    };
    image
        .topics
        .insert(OFFSETS_TOPIC_NAME.into(), Arc::new(topic));
    image
}

fn caller(v: i16) -> Caller {
    Caller {
        api_version: v,
        client_id: "svc-client".into(),
        client_host: "/127.0.0.1".into(),
    }
}

impl Broker {
    /// A group service over a [`MemoryLog`], leading the single `__consumer_offsets`
    /// partition, its timer task running.
    async fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let mut raw = RawConfig::default();
        raw.set("log.dirs", dir.path().to_str().unwrap());
        raw.set("offsets.topic.num.partitions", "1");
        raw.set("group.initial.rebalance.delay.ms", "0");
        raw.set("offsets.commit.timeout.ms", "5000");
        let config = Arc::new(BrokerConfig::from_raw(raw).unwrap().config);
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (controller, _, _) = crate::controller::start(
            dir.path(),
            "cluster",
            config.clone(),
            cache.clone(),
            &crate::controller::QuorumPeers::single(1),
            shutdown_rx.clone(),
        )
        .await
        .unwrap();
        let log = Arc::new(MemoryLog::default());
        let clock = ManualClock::new(1_000_000);
        let service =
            GroupService::with_log(&config, log.clone(), controller, cache, Arc::new(clock));
        service.start(shutdown_rx);
        let broker = Broker {
            service,
            log,
            node_id: config.node_id,
            _shutdown: shutdown,
            _dir: dir,
        };
        broker.lead(0).await;
        broker
    }

    /// This node leads the partition at `epoch` (a new epoch reloads it from the log).
    async fn lead(&self, epoch: i32) {
        self.service
            .on_image(&MetadataImage::default(), &image(self.node_id, epoch));
        // The load runs on a blocking thread; wait (bounded) until the group answers.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.describe().await.0 == E::CoordinatorLoadInProgress.code() {
            assert!(std::time::Instant::now() < deadline, "load never completed");
            tokio::task::yield_now().await;
        }
    }

    async fn call(&self, v: i16, request: GroupRequest) -> GroupResponse {
        self.service.call(caller(v), request).await
    }

    async fn commit(&self, generation: i32, member: &str, offset: i64) -> i16 {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]);
        let GroupResponse::OffsetCommit(r) = self.call(8, GroupRequest::OffsetCommit(req)).await
        else {
            panic!("not a commit response")
        };
        r.topics[0].partitions[0].error_code
    }

    async fn fetch(&self) -> i64 {
        let req = OffsetFetchRequest::default()
            .with_require_stable(true)
            .with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(TopicName(s("t")))
                    .with_partition_indexes(vec![0])]))]);
        let GroupResponse::OffsetFetch(r) = self.call(8, GroupRequest::OffsetFetch(req)).await
        else {
            panic!("not a fetch response")
        };
        assert_eq!(r.groups[0].error_code, 0);
        r.groups[0].topics[0].partitions[0].committed_offset
    }

    /// (error code, state, member ids) from DescribeGroups.
    async fn describe(&self) -> (i16, String, Vec<String>) {
        let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]);
        let GroupResponse::DescribeGroups(r) =
            self.call(5, GroupRequest::DescribeGroups(req)).await
        else {
            panic!("not a describe response")
        };
        let g = &r.groups[0];
        (
            g.error_code,
            g.group_state.to_string(),
            g.members.iter().map(|m| m.member_id.to_string()).collect(),
        )
    }

    /// A static member joins and the group becomes Stable with it. Returns (member id,
    /// generation).
    async fn stable_group(&self) -> (String, i32) {
        let join = JoinGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(""))
            .with_group_instance_id(Some(s("instance-1")))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(subscription(&["t"]))]);
        let GroupResponse::JoinGroup(joined) = self
            .call(5, GroupRequest::JoinGroup(join, Default::default()))
            .await
        else {
            panic!("not a join response")
        };
        assert_eq!(joined.error_code, 0);
        let member = joined.member_id.to_string();
        let sync = SyncGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id(joined.generation_id)
            .with_member_id(s(&member))
            .with_group_instance_id(Some(s("instance-1")))
            .with_assignments(vec![SyncGroupRequestAssignment::default()
                .with_member_id(s(&member))
                .with_assignment(Bytes::from_static(b"A"))]);
        let GroupResponse::SyncGroup(synced) = self.call(3, GroupRequest::SyncGroup(sync)).await
        else {
            panic!("not a sync response")
        };
        assert_eq!(synced.error_code, 0);
        (member, joined.generation_id)
    }

    async fn leave(&self, member: &str) -> i16 {
        let req = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_member_id(s(member));
        let GroupResponse::LeaveGroup(r) = self.call(1, GroupRequest::LeaveGroup(req)).await else {
            panic!("not a leave response")
        };
        r.error_code
    }

    async fn heartbeat(&self, member: &str, generation: i32) -> i16 {
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id(generation)
            .with_member_id(s(member))
            .with_group_instance_id(Some(s("instance-1")));
        let GroupResponse::Heartbeat(r) = self.call(3, GroupRequest::Heartbeat(req)).await else {
            panic!("not a heartbeat response")
        };
        r.error_code
    }
}

/// What the log holds, decoded back into (key, value) pairs.
fn decoded(batch: bytes::Bytes) -> usize {
    let mut buf = batch;
    RecordBatchDecoder::decode_all(&mut buf)
        .unwrap()
        .iter()
        .map(|set| set.records.len())
        .sum()
}

#[tokio::test(start_paused = true)]
async fn a_failed_append_is_answered_with_an_error_and_never_shows() {
    let b = Broker::start().await;
    let (member, generation) = b.stable_group().await;
    assert_eq!(b.commit(generation, &member, 5).await, 0);

    b.log.fail_appends(true);
    assert_eq!(
        b.commit(generation, &member, 7).await,
        E::CoordinatorNotAvailable.code()
    );
    // The last member's leave would empty the group at the next generation; it fails too.
    assert_eq!(b.leave(&member).await, E::CoordinatorNotAvailable.code());
    b.log.fail_appends(false);

    assert_eq!(b.fetch().await, 5);
    assert_eq!(
        b.describe().await,
        (0, "Stable".into(), vec![member.clone()])
    );
    assert_eq!(b.heartbeat(&member, generation).await, 0, "same generation");
    assert_eq!(
        b.log.log_end(0),
        2,
        "the group after its sync, and the first commit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_write_stays_hidden_until_the_high_watermark_covers_it() {
    let b = Broker::start().await;
    let (member, generation) = b.stable_group().await;
    assert_eq!(b.commit(generation, &member, 5).await, 0);

    // The high watermark stops: the records are appended but their fate is unknown.
    b.log.hold_high_watermark();
    assert_eq!(
        b.commit(generation, &member, 7).await,
        E::RequestTimedOut.code()
    );
    assert_eq!(
        b.fetch().await,
        5,
        "OffsetFetch does not serve the pending commit"
    );
    assert_eq!(
        b.leave(&member).await,
        E::CoordinatorNotAvailable.code(),
        "a timed-out group write answers as Kafka's coordinator does"
    );
    assert_eq!(
        b.describe().await,
        (0, "Stable".into(), vec![member.clone()])
    );
    assert_eq!(b.log.log_end(0), 4, "both writes are in the log");

    // Later the high watermark covers them: both become visible, though nobody waits.
    b.log.release_high_watermark();
    assert_eq!(b.fetch().await, 7);
    assert_eq!(b.describe().await, (0, "Empty".into(), vec![]));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_write_is_gone_if_the_next_leader_truncates_it() {
    let b = Broker::start().await;
    assert_eq!(b.commit(-1, "", 5).await, 0);
    b.log.hold_high_watermark();
    assert_eq!(b.commit(-1, "", 7).await, E::RequestTimedOut.code());
    // Another broker leads the partition with a log that ends at the high watermark, then
    // this one again at a new epoch: the state is rebuilt from what the log holds.
    b.service
        .on_image(&MetadataImage::default(), &image(b.node_id + 1, 1));
    b.log.truncate_to_high_watermark();
    b.lead(2).await;
    b.log.release_high_watermark();
    assert_eq!(b.fetch().await, 5);
    assert_eq!(decoded(b.log.read(0, 0, 1 << 20).unwrap()), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reload_keeps_records_above_the_high_watermark_pending() {
    let b = Broker::start().await;
    assert_eq!(b.commit(-1, "", 5).await, 0);
    b.log.hold_high_watermark();
    assert_eq!(b.commit(-1, "", 7).await, E::RequestTimedOut.code());
    // A new leader epoch on this node: its log still holds the commit, above the high
    // watermark. Replayed, it is pending, as Kafka's loader leaves it.
    b.lead(1).await;
    assert_eq!(b.fetch().await, 5);
    b.log.release_high_watermark();
    assert_eq!(b.fetch().await, 7);
}

#[tokio::test(start_paused = true)]
async fn unloading_outside_a_runtime_still_answers_parked_requests() {
    let b = Broker::start().await;
    let (member, generation) = b.stable_group().await;
    // A second member's join parks until the first one rejoins or the rebalance times out.
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_session_timeout_ms(30_000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(s(""))
        .with_group_instance_id(Some(s("instance-2")))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(subscription(&["t"]))]);
    let service = b.service.clone();
    let parked = tokio::spawn(async move {
        service
            .call(caller(5), GroupRequest::JoinGroup(join, Default::default()))
            .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.heartbeat(&member, generation).await != E::RebalanceInProgress.code() {
        assert!(
            std::time::Instant::now() < deadline,
            "the join never parked"
        );
        tokio::task::yield_now().await;
    }
    // The controller may notify listeners from a thread with no runtime.
    let service = b.service.clone();
    let other = b.node_id + 1;
    std::thread::spawn(move || service.on_image(&MetadataImage::default(), &image(other, 1)))
        .join()
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(60), parked).await;
    let GroupResponse::JoinGroup(r) = answered.expect("the parked join is answered").unwrap()
    else {
        panic!("not a join response")
    };
    assert_eq!(r.error_code, E::NotCoordinator.code());
}
