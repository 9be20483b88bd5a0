//! Incremental fetch sessions (KIP-227).
//!
//! A client opens a session with `session_id = 0, epoch = 0` (a full fetch); later requests
//! name the session, carry the next epoch and list only partitions that changed (added, new
//! fetch offset) or are forgotten. The broker answers an incremental request with only the
//! partitions that have something new: records, a changed high watermark / log start offset,
//! or an error. `epoch = -1` closes the session (with `session_id = 0`: a sessionless full
//! fetch).
//!
//! The cache is bounded (`FETCH_SESSIONS_MAX`; partitions per session
//! `FETCH_SESSION_PARTITIONS_MAX`). At the bound a new session evicts another only as Kafka's
//! `FetchSessionCacheShard#tryEvict` does: one idle for more than `FETCH_SESSION_EVICTION_MS`, or
//! else the least valuable one created more than that long ago if the new one is worth more (a
//! follower's over a consumer's, then more partitions). Otherwise the client is served without a
//! session: evicting active sessions at the bound would turn every client into a loop of
//! FETCH_SESSION_ID_NOT_FOUND and full fetches. Session ids are random, as Kafka draws them, so a
//! client's id from before a restart does not name (and close) another client's session.
//! Pure bookkeeping: no I/O, no reading of logs.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use crate::errors::ApiError;
use crate::limits::{FETCH_SESSIONS_MAX, FETCH_SESSION_EVICTION_MS, FETCH_SESSION_PARTITIONS_MAX};

pub const INITIAL_EPOCH: i32 = 0;
pub const FINAL_EPOCH: i32 = -1;

/// What a fetch asks of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionSpec {
    /// Empty when the request named a topic id (v13+) that no topic has.
    pub topic: String,
    /// Nil before Fetch v13.
    pub topic_id: uuid::Uuid,
    pub partition: i32,
    pub fetch_offset: i64,
    pub partition_max_bytes: i32,
    pub current_leader_epoch: i32,
    pub log_start_offset: i64,
    pub last_fetched_epoch: i32,
}

/// What was last sent for one partition of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct LastSent {
    high_watermark: i64,
    log_start_offset: i64,
}

/// How a session names a partition: by topic id from Fetch v13, by name before (the id is nil).
type PartitionKey = (uuid::Uuid, String, i32);

fn key_of(spec: &FetchPartitionSpec) -> PartitionKey {
    (spec.topic_id, spec.topic.clone(), spec.partition)
}

#[derive(Debug)]
struct SessionPartition {
    spec: FetchPartitionSpec,
    last_sent: Option<LastSent>,
}

/// The partitions of one session, in the order they were added (responses keep that order),
/// found by key in constant time. Kafka keeps them in an `ImplicitLinkedHashCollection` for the
/// same reason: a session of n partitions is looked up n times per request, so a linear search
/// makes every request O(n²).
#[derive(Debug, Default)]
struct SessionPartitions {
    /// Insertion sequence number → partition; iterating gives the session's order.
    by_order: BTreeMap<u64, SessionPartition>,
    /// Key → insertion sequence number.
    by_key: HashMap<PartitionKey, u64>,
    next_order: u64,
}

impl SessionPartitions {
    fn new(specs: Vec<FetchPartitionSpec>) -> Self {
        let mut partitions = SessionPartitions::default();
        for spec in specs {
            partitions.upsert(spec);
        }
        partitions
    }

    fn len(&self) -> usize {
        self.by_order.len()
    }

    fn get_mut(&mut self, key: &PartitionKey) -> Option<&mut SessionPartition> {
        let order = self.by_key.get(key)?;
        self.by_order.get_mut(order)
    }

    /// Replaces the spec of a partition already in the session (keeping its place and what was
    /// last sent) or appends it. Returns false if it was new.
    fn upsert(&mut self, spec: FetchPartitionSpec) -> bool {
        let key = key_of(&spec);
        if let Some(existing) = self.get_mut(&key) {
            existing.spec = spec;
            return true;
        }
        let order = self.next_order;
        self.next_order += 1;
        self.by_key.insert(key, order);
        self.by_order.insert(
            order,
            SessionPartition {
                spec,
                last_sent: None,
            },
        );
        false
    }

    fn contains(&self, key: &PartitionKey) -> bool {
        self.by_key.contains_key(key)
    }

    fn remove(&mut self, key: &PartitionKey) {
        if let Some(order) = self.by_key.remove(key) {
            self.by_order.remove(&order);
        }
    }

    fn specs(&self) -> Vec<FetchPartitionSpec> {
        self.by_order.values().map(|p| p.spec.clone()).collect()
    }
}

#[derive(Debug)]
struct Session {
    next_epoch: i32,
    partitions: SessionPartitions,
    /// A follower's session (Kafka's privileged sessions).
    privileged: bool,
    created_ms: i64,
    last_used_ms: i64,
}

impl Session {
    /// Kafka's `EvictableKey`: the lowest is evicted first.
    fn evictable_key(&self, id: i32) -> (bool, usize, i32) {
        (self.privileged, self.partitions.len(), id)
    }
}

/// How a fetch request names its session, who sent it and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRequest {
    pub session_id: i32,
    pub epoch: i32,
    /// Sent by a follower (`replica_id >= 0`).
    pub privileged: bool,
    pub now_ms: i64,
}

/// How a request relates to sessions, decided before reading any log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPlan {
    /// Session id to put in the response (0 = none).
    pub session_id: i32,
    /// Whether the response lists only changed partitions.
    pub incremental: bool,
    /// Every partition to read, in response order.
    pub partitions: Vec<FetchPartitionSpec>,
}

#[derive(Debug, Default)]
pub struct FetchSessionCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    /// Seeded from the OS per process: session ids differ across restarts.
    ids: RandomState,
    drawn: u64,
}

impl Inner {
    /// A random positive id no session has.
    fn new_session_id(&mut self) -> i32 {
        loop {
            self.drawn += 1;
            let mut hasher = self.ids.build_hasher();
            hasher.write_u64(self.drawn);
            let id = (hasher.finish() & 0x7fff_ffff) as i32;
            if id > 0 && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    /// Makes room for a new session of `size` partitions, as Kafka's `tryEvict`: the least
    /// recently used session if it has been idle longer than `FETCH_SESSION_EVICTION_MS`, else
    /// the lowest-keyed session the new one outranks among those created longer ago than that
    /// (a follower may also evict a younger consumer session). A linear scan: it runs only
    /// when a session is created at the bound.
    fn try_evict(&mut self, privileged: bool, size: usize, now_ms: i64) -> bool {
        let stale = self
            .sessions
            .iter()
            .min_by_key(|(id, s)| (s.last_used_ms, **id))
            .filter(|(_, s)| now_ms - s.last_used_ms > FETCH_SESSION_EVICTION_MS)
            .map(|(id, _)| *id);
        let victim = stale.or_else(|| {
            self.sessions
                .iter()
                .filter(|(_, s)| {
                    now_ms - s.created_ms > FETCH_SESSION_EVICTION_MS
                        || (privileged && !s.privileged)
                })
                .map(|(id, s)| s.evictable_key(*id))
                .min()
                .filter(|lowest| (privileged, size, 0) >= *lowest)
                .map(|(_, _, id)| id)
        });
        victim.is_some_and(|id| self.sessions.remove(&id).is_some())
    }
}

/// A full fetch answered without a session.
fn sessionless(partitions: Vec<FetchPartitionSpec>) -> SessionPlan {
    SessionPlan {
        session_id: 0,
        incremental: false,
        partitions,
    }
}

impl FetchSessionCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sessions
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides what to read for a fetch request.
    pub fn plan(
        &self,
        request: SessionRequest,
        requested: Vec<FetchPartitionSpec>,
        forgotten: &[(uuid::Uuid, String, i32)],
    ) -> Result<SessionPlan, ApiError> {
        let SessionRequest {
            session_id, epoch, ..
        } = request;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if epoch == FINAL_EPOCH {
            if session_id != 0 {
                inner.sessions.remove(&session_id);
            }
            return Ok(sessionless(requested));
        }
        if epoch == INITIAL_EPOCH {
            if session_id != 0 {
                inner.sessions.remove(&session_id);
            }
            return Ok(Self::create(&mut inner, request, requested));
        }
        let session = inner
            .sessions
            .get_mut(&session_id)
            .ok_or(ApiError::FetchSessionIdNotFound)?;
        if session.next_epoch != epoch {
            return Err(ApiError::InvalidFetchSessionEpoch);
        }
        for forgotten in forgotten {
            session.partitions.remove(forgotten);
        }
        for spec in requested {
            if session.partitions.len() >= FETCH_SESSION_PARTITIONS_MAX
                && !session.partitions.contains(&key_of(&spec))
            {
                return Err(ApiError::InvalidRequest(format!(
                    "fetch session would exceed {FETCH_SESSION_PARTITIONS_MAX} partitions"
                )));
            }
            session.partitions.upsert(spec);
        }
        session.next_epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
        session.last_used_ms = request.now_ms;
        Ok(SessionPlan {
            session_id,
            incremental: true,
            partitions: session.partitions.specs(),
        })
    }

    /// A full fetch: a new session if there is room or room can be made, else none (Kafka
    /// declines to create a session then, and the client goes on with full fetches).
    fn create(
        inner: &mut Inner,
        request: SessionRequest,
        requested: Vec<FetchPartitionSpec>,
    ) -> SessionPlan {
        let size = requested.len();
        let fits = size <= FETCH_SESSION_PARTITIONS_MAX
            && (inner.sessions.len() < FETCH_SESSIONS_MAX
                || inner.try_evict(request.privileged, size, request.now_ms));
        if !fits {
            return sessionless(requested);
        }
        let id = inner.new_session_id();
        inner.sessions.insert(
            id,
            Session {
                next_epoch: 1,
                partitions: SessionPartitions::new(requested.clone()),
                privileged: request.privileged,
                created_ms: request.now_ms,
                last_used_ms: request.now_ms,
            },
        );
        SessionPlan {
            session_id: id,
            incremental: false,
            partitions: requested,
        }
    }

    /// After reading: records what was sent for a partition and says whether an incremental
    /// response must include it (`has_records`, an error, or a changed high watermark / log
    /// start offset).
    ///
    /// The partition's fetch offset is left as the client last sent it, whatever was returned
    /// (Kafka's `CachedPartition`: only `updateRequestParams` changes it). The Java client
    /// leaves a partition out of an incremental request when its fetch position equals what it
    /// last sent, so a consumer that seeks back to that offset is asking for it again: moving
    /// the offset forward here would skip every record in between.
    pub fn should_send(
        &self,
        session_id: i32,
        spec: &FetchPartitionSpec,
        high_watermark: i64,
        log_start_offset: i64,
        has_records_or_error: bool,
    ) -> bool {
        if session_id == 0 {
            return true;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(session) = inner.sessions.get_mut(&session_id) else {
            return true;
        };
        let Some(partition) = session.partitions.get_mut(&key_of(spec)) else {
            // Forgotten meanwhile by a later request of the same client: nothing to remember.
            return true;
        };
        let now = LastSent {
            high_watermark,
            log_start_offset,
        };
        let changed = partition.last_sent.as_ref() != Some(&now);
        partition.last_sent = Some(now);
        changed || has_records_or_error
    }
}

#[cfg(test)]
mod sim;

#[cfg(test)]
mod tests {
    use super::*;

    fn req(session_id: i32, epoch: i32) -> SessionRequest {
        at(session_id, epoch, 0)
    }

    fn at(session_id: i32, epoch: i32, now_ms: i64) -> SessionRequest {
        SessionRequest {
            session_id,
            epoch,
            privileged: false,
            now_ms,
        }
    }

    pub(super) fn spec(topic: &str, partition: i32, offset: i64) -> FetchPartitionSpec {
        FetchPartitionSpec {
            topic: topic.into(),
            topic_id: uuid::Uuid::nil(),
            partition,
            fetch_offset: offset,
            partition_max_bytes: 1 << 20,
            current_leader_epoch: -1,
            log_start_offset: -1,
            last_fetched_epoch: -1,
        }
    }

    #[test]
    fn full_then_incremental_then_close() {
        let cache = FetchSessionCache::new();
        let sessionless = cache
            .plan(req(0, FINAL_EPOCH), vec![spec("a", 0, 0)], &[])
            .unwrap();
        assert_eq!(sessionless.session_id, 0);
        assert!(cache.is_empty());

        let full = cache
            .plan(
                req(0, INITIAL_EPOCH),
                vec![spec("a", 0, 0), spec("b", 0, 5)],
                &[],
            )
            .unwrap();
        assert!(full.session_id > 0 && !full.incremental);
        let id = full.session_id;
        assert!(cache.should_send(id, &spec("a", 0, 0), 0, 0, false));
        assert!(cache.should_send(id, &spec("b", 0, 0), 5, 0, false));

        // Incremental: nothing mentioned, both partitions still read; unchanged ones not sent.
        let inc = cache.plan(req(id, 1), vec![], &[]).unwrap();
        assert!(inc.incremental);
        assert_eq!(inc.partitions.len(), 2);
        assert!(!cache.should_send(id, &spec("a", 0, 0), 0, 0, false));
        assert!(cache.should_send(id, &spec("b", 0, 0), 7, 0, true));

        // Wrong epoch, unknown session.
        assert_eq!(
            cache.plan(req(id, 1), vec![], &[]).unwrap_err(),
            ApiError::InvalidFetchSessionEpoch
        );
        assert_eq!(
            cache
                .plan(req(id.wrapping_add(100), 1), vec![], &[])
                .unwrap_err(),
            ApiError::FetchSessionIdNotFound
        );

        // Forget one partition, update the other's offset.
        let inc = cache
            .plan(
                req(id, 2),
                vec![spec("a", 0, 3)],
                &[(uuid::Uuid::nil(), "b".into(), 0)],
            )
            .unwrap();
        assert_eq!(inc.partitions, vec![spec("a", 0, 3)]);

        // Close.
        let closed = cache
            .plan(req(id, FINAL_EPOCH), vec![spec("a", 0, 3)], &[])
            .unwrap();
        assert_eq!(closed.session_id, 0);
        assert!(cache.is_empty());
    }

    #[test]
    fn partitions_keep_their_order_and_their_last_sent_state() {
        let cache = FetchSessionCache::new();
        let id = cache
            .plan(
                req(0, INITIAL_EPOCH),
                vec![spec("a", 0, 0), spec("b", 0, 0), spec("c", 0, 0)],
                &[],
            )
            .unwrap()
            .session_id;
        for p in ["a", "b", "c"] {
            assert!(cache.should_send(id, &spec(p, 0, 0), 1, 0, false));
        }
        // An update keeps the partition's place; a forgotten and re-added one goes last and
        // has nothing recorded as sent.
        let inc = cache
            .plan(
                req(id, 1),
                vec![spec("b", 0, 9), spec("a", 0, 0)],
                &[(uuid::Uuid::nil(), "a".into(), 0)],
            )
            .unwrap();
        let order: Vec<(&str, i64)> = inc
            .partitions
            .iter()
            .map(|p| (p.topic.as_str(), p.fetch_offset))
            .collect();
        assert_eq!(order, vec![("b", 9), ("c", 0), ("a", 0)]);
        assert!(cache.should_send(id, &spec("a", 0, 0), 1, 0, false));
        assert!(!cache.should_send(id, &spec("b", 0, 9), 1, 0, false));
        // Records returned do not move the session's offset: only the client's requests do.
        assert!(cache.should_send(id, &spec("c", 0, 0), 1, 0, true));
        let inc = cache.plan(req(id, 2), vec![], &[]).unwrap();
        assert_eq!(inc.partitions[1].fetch_offset, 0);
    }

    #[test]
    fn records_returned_leave_the_fetch_offset_where_the_client_put_it() {
        // The Java client's seek back after a partial poll: it fetched from 0, got records up
        // to 1,356, consumed ten, and seeks to 0 again. Its position equals what it last sent,
        // so the incremental request does not name the partition: the read must be from 0.
        let cache = FetchSessionCache::new();
        let id = cache
            .plan(
                req(0, INITIAL_EPOCH),
                vec![spec("a", 0, 0), spec("a", 1, 0)],
                &[],
            )
            .unwrap()
            .session_id;
        assert!(cache.should_send(id, &spec("a", 0, 0), 3_000, 0, true));
        assert!(cache.should_send(id, &spec("a", 1, 0), 3_000, 0, true));
        // Partition 1 moved on (named with its new offset); partition 0 was sought back.
        let inc = cache
            .plan(req(id, 1), vec![spec("a", 1, 1_356)], &[])
            .unwrap();
        let offsets: Vec<(i32, i64)> = inc
            .partitions
            .iter()
            .map(|p| (p.partition, p.fetch_offset))
            .collect();
        assert_eq!(offsets, vec![(0, 0), (1, 1_356)]);
        // Records sent again from 0 are still what an incremental answer must carry.
        assert!(cache.should_send(id, &spec("a", 0, 0), 3_000, 0, true));
        let inc = cache.plan(req(id, 2), vec![], &[]).unwrap();
        assert_eq!(inc.partitions[0].fetch_offset, 0);
    }

    #[test]
    fn a_session_at_the_partition_bound_is_planned_and_tracked_per_partition() {
        let cache = FetchSessionCache::new();
        let all: Vec<_> = (0..FETCH_SESSION_PARTITIONS_MAX as i32)
            .map(|p| spec("big", p, 0))
            .collect();
        let id = cache
            .plan(req(0, INITIAL_EPOCH), all.clone(), &[])
            .unwrap()
            .session_id;
        assert!(id > 0);
        for s in &all {
            assert!(cache.should_send(id, s, 0, 0, true));
        }
        // Every partition mentioned again, each found by key rather than by a scan.
        let moved: Vec<_> = all.iter().map(|s| spec("big", s.partition, 1)).collect();
        let inc = cache.plan(req(id, 1), moved, &[]).unwrap();
        assert_eq!(inc.partitions.len(), FETCH_SESSION_PARTITIONS_MAX);
        assert!(inc
            .partitions
            .iter()
            .enumerate()
            .all(|(i, p)| p.partition == i as i32 && p.fetch_offset == 1));
        assert!(inc
            .partitions
            .iter()
            .all(|p| !cache.should_send(id, p, 0, 0, false)));
        // One more would pass the bound.
        assert!(matches!(
            cache.plan(req(id, 2), vec![spec("other", 0, 0)], &[]),
            Err(ApiError::InvalidRequest(_))
        ));
    }

    /// Fills the cache at `now_ms` with single-partition consumer sessions; returns their ids.
    fn fill(cache: &FetchSessionCache, now_ms: i64) -> Vec<i32> {
        (0..FETCH_SESSIONS_MAX)
            .map(|_| {
                let plan = cache
                    .plan(at(0, INITIAL_EPOCH, now_ms), vec![spec("a", 0, 0)], &[])
                    .unwrap();
                assert!(plan.session_id > 0);
                plan.session_id
            })
            .collect()
    }

    #[test]
    fn at_the_bound_active_sessions_stay_and_a_new_client_is_served_without_one() {
        let cache = FetchSessionCache::new();
        let ids = fill(&cache, 0);
        let late = cache
            .plan(at(0, INITIAL_EPOCH, 1_000), vec![spec("a", 0, 0)], &[])
            .unwrap();
        assert_eq!((late.session_id, late.incremental), (0, false));
        assert_eq!(late.partitions, vec![spec("a", 0, 0)]);
        assert_eq!(cache.len(), FETCH_SESSIONS_MAX);
        for id in ids {
            assert!(cache.plan(at(id, 1, 2_000), vec![], &[]).is_ok());
        }
        // Still no room while every session is in use and none is worth less than the new one.
        let late = cache
            .plan(at(0, INITIAL_EPOCH, 3_000), vec![spec("a", 0, 0)], &[])
            .unwrap();
        assert_eq!(late.session_id, 0);
    }

    #[test]
    fn an_idle_session_or_a_smaller_old_one_makes_room() {
        let cache = FetchSessionCache::new();
        let ids = fill(&cache, 0);
        // All but the first used again later: the first is idle past the eviction time.
        let later = FETCH_SESSION_EVICTION_MS;
        for id in &ids[1..] {
            cache.plan(at(*id, 1, later), vec![], &[]).unwrap();
        }
        let now = FETCH_SESSION_EVICTION_MS + 1;
        let new = cache
            .plan(at(0, INITIAL_EPOCH, now), vec![spec("a", 0, 0)], &[])
            .unwrap();
        assert!(new.session_id > 0);
        assert_eq!(
            cache.plan(at(ids[0], 1, now), vec![], &[]).unwrap_err(),
            ApiError::FetchSessionIdNotFound
        );
        // Nothing idle now. Same size: no room. More partitions: the lowest-keyed session
        // created long enough ago gives way (the new one was created just now and is kept).
        assert_eq!(
            cache
                .plan(at(0, INITIAL_EPOCH, now), vec![spec("a", 0, 0)], &[])
                .unwrap()
                .session_id,
            0
        );
        let two = vec![spec("a", 0, 0), spec("a", 1, 0)];
        let bigger = cache.plan(at(0, INITIAL_EPOCH, now), two, &[]).unwrap();
        assert!(bigger.session_id > 0);
        assert_eq!(cache.len(), FETCH_SESSIONS_MAX);
        let gone = ids[1..].iter().min().unwrap();
        assert_eq!(
            cache.plan(at(*gone, 2, now), vec![], &[]).unwrap_err(),
            ApiError::FetchSessionIdNotFound
        );
        assert!(cache.plan(at(new.session_id, 1, now), vec![], &[]).is_ok());
    }

    #[test]
    fn a_follower_session_evicts_a_young_consumer_session() {
        let cache = FetchSessionCache::new();
        fill(&cache, 0);
        let follower = SessionRequest {
            privileged: true,
            ..at(0, INITIAL_EPOCH, 10)
        };
        let plan = cache.plan(follower, vec![spec("a", 0, 0)], &[]).unwrap();
        assert!(plan.session_id > 0);
        assert_eq!(cache.len(), FETCH_SESSIONS_MAX);
    }

    #[test]
    fn session_ids_are_random() {
        let ids: Vec<i32> = (0..4)
            .map(|_| {
                FetchSessionCache::new()
                    .plan(req(0, INITIAL_EPOCH), vec![], &[])
                    .unwrap()
                    .session_id
            })
            .collect();
        assert!(ids.iter().all(|id| *id > 0));
        // A fresh cache (a restarted broker) does not hand out the ids it gave before.
        assert!(ids.windows(2).any(|w| w[0] != w[1]), "{ids:?}");
        assert!(!ids.contains(&1), "{ids:?}");
    }
}
