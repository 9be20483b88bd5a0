//! Broker-only nodes (`process.roles=broker`): observers of the metadata quorum.
//!
//! A broker-only node holds no voter. It learns the metadata log as Kafka's observers do, by
//! fetching what the quorum has committed from a voter's controller listener, and replays it into
//! its [`MetadataImage`] through the same [`MetadataPublisher`] a voter uses, so the replica
//! manager and the group coordinator see the same images in the same order.
//!
//! - **The voter's side** ([`MetadataFeed`]): each voter keeps the last
//!   [`METADATA_FEED_ENTRIES_MAX`] committed entries in memory, as the controller thread applies
//!   them. A fetch for entries after offset `n` is answered with those entries, or — when `n` is
//!   older than what the feed still holds (a node starting, or one that fell far behind) — with
//!   the voter's current image as records, a snapshot, after which the observer fetches entries
//!   again. With nothing new, the fetch waits up to its `max_wait_ms` for the next commit (a long
//!   poll, as Kafka's follower fetch does), so a new image reaches observers within a round trip.
//! - **The wire**: a request frame with KafkaIQ's private API key [`METADATA_FETCH_API_KEY`]
//!   (beside the Raft messages' key, outside Kafka's range), answered on the same connection.
//!   Committed entries are committed: any voter may serve them. The observer asks the quorum
//!   leader when it knows it (every answer names it), else each voter in turn.
//! - **The observer's side** ([`start`]): a task that fetches and publishes, and a
//!   [`ControllerChannel`] without a controller thread: every metadata change goes to the active
//!   controller by forwarding, as on a voter that is not active.
//!
//! The observer keeps no copy of the metadata log on disk: on start it takes a snapshot from a
//! voter (Kafka's observers keep a local log; here a restart costs one image transfer).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use super::forward::{Forwarder, QuorumState};
use super::ControllerChannel;
use crate::client::secure;
use crate::client::Endpoint;
use crate::config::BrokerConfig;
use crate::limits::CONTROLLER_QUEUE_REQUESTS_MAX;
use crate::metadata::{MetadataCache, MetadataImage, MetadataPublisher, MetadataRecord};
use crate::quorum::chunks::Reassembly;
use crate::quorum::durable::DurableError;
use crate::security::ClientSecurity;

/// KafkaIQ's private API key for an observer's fetch of the metadata log.
pub const METADATA_FETCH_API_KEY: i16 = 32_001;
pub const METADATA_FETCH_VERSION: i16 = 0;

/// Committed entries a voter keeps in memory for observers; one further behind gets a snapshot.
pub const METADATA_FEED_ENTRIES_MAX: usize = 4_096;
/// Longest an observer's fetch waits at the voter for a new commit.
pub const METADATA_FETCH_MAX_WAIT_MS: i32 = 500;
/// Bytes of entries one fetch answer carries at most (at least one entry is always sent).
pub const METADATA_FETCH_MAX_BYTES: i32 = 8 << 20;
/// Largest answer an observer accepts (a snapshot of a large cluster included).
const METADATA_FETCH_RESPONSE_BYTES_MAX: usize = 512 << 20;
/// Pause before an observer tries the next voter after a failed fetch.
const OBSERVER_RETRY_MS: u64 = 100;
/// Pause before asking again a voter that refused this node's TLS handshake or credentials.
const OBSERVER_REFUSED_RETRY_MS: u64 = 1_000;
/// How long securing a connection to a voter (TLS handshake, SASL exchange) may take.
const OBSERVER_SECURE_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What a voter has committed lately, for observers.
#[derive(Debug)]
pub struct MetadataFeed {
    inner: Mutex<FeedInner>,
    last: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct FeedInner {
    /// The feed holds the entries after this offset (every one of them, in order).
    base: u64,
    entries: VecDeque<(u64, Bytes)>,
}

/// What a fetch gets from the feed.
#[derive(Debug, PartialEq, Eq)]
pub enum FeedRead {
    /// The entries after the asked offset (possibly none yet).
    Entries(Vec<(u64, Bytes)>),
    /// The asked offset is older than the feed: take a snapshot.
    TooOld,
}

impl Default for MetadataFeed {
    fn default() -> Self {
        MetadataFeed {
            inner: Mutex::new(FeedInner::default()),
            last: watch::channel(0).0,
        }
    }
}

impl MetadataFeed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FeedInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An entry the controller thread just applied (after it was published).
    pub fn append(&self, index: u64, data: Bytes) {
        let mut inner = self.lock();
        let next = inner.entries.back().map_or(inner.base, |(i, _)| *i) + 1;
        if index != next {
            // Not contiguous with what the feed holds (the first entry after a restart's
            // replay): start over from here.
            inner.entries.clear();
            inner.base = index - 1;
        }
        inner.entries.push_back((index, data));
        while inner.entries.len() > METADATA_FEED_ENTRIES_MAX {
            let (dropped, _) = inner.entries.pop_front().expect("non-empty");
            inner.base = dropped;
        }
        drop(inner);
        self.last.send_replace(index);
    }

    /// A snapshot was applied: the feed starts after it.
    pub fn reset(&self, index: u64) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.base = index;
        drop(inner);
        self.last.send_replace(index);
    }

    /// The entries after `after`, up to `max_bytes` (one at least).
    pub fn read(&self, after: u64, max_bytes: usize) -> FeedRead {
        let inner = self.lock();
        if after < inner.base {
            return FeedRead::TooOld;
        }
        // The entries are contiguous after `base`: the one after `after` is at `after - base`.
        let skip = usize::try_from(after - inner.base).unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let mut bytes = 0;
        for (index, data) in inner.entries.iter().skip(skip) {
            if !out.is_empty() && bytes + data.len() > max_bytes {
                break;
            }
            bytes += data.len();
            out.push((*index, data.clone()));
        }
        FeedRead::Entries(out)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.last.subscribe()
    }
}

/// An observer's fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub node_id: i32,
    /// The metadata offset the observer has replayed (0: nothing).
    pub after: i64,
    pub max_wait_ms: i32,
    pub max_bytes: i32,
}

/// A voter's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    /// The quorum leader as the voter knows it (-1 when none).
    pub leader_id: i32,
    /// The voter's image as records at `snapshot_offset`, when the asked offset was too old.
    pub snapshot: Option<(i64, Bytes)>,
    /// Committed entries in order, each an encoded batch of metadata records.
    pub entries: Vec<(i64, Bytes)>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchWireError {
    #[error("metadata fetch frame is truncated")]
    Short,
    #[error("metadata fetch frame with version {0}; only 0 is known")]
    Version(i16),
    #[error("metadata fetch frame has {0} bytes after its end")]
    Trailing(usize),
    #[error("metadata fetch field out of range: {0}")]
    Range(&'static str),
}

/// Whether a request frame (without its size prefix) is an observer's fetch.
pub fn is_fetch_frame(frame: &[u8]) -> bool {
    frame.len() >= 2 && i16::from_be_bytes([frame[0], frame[1]]) == METADATA_FETCH_API_KEY
}

/// A fetch request frame, size prefix included.
pub fn encode_request(correlation_id: i32, client_id: &str, r: &FetchRequest) -> Bytes {
    let client = client_id.as_bytes();
    let mut body = BytesMut::new();
    body.put_i16(METADATA_FETCH_API_KEY);
    body.put_i16(METADATA_FETCH_VERSION);
    body.put_i32(correlation_id);
    body.put_i16(client.len() as i16);
    body.put_slice(client);
    body.put_i32(r.node_id);
    body.put_i64(r.after);
    body.put_i32(r.max_wait_ms);
    body.put_i32(r.max_bytes);
    let mut out = BytesMut::with_capacity(4 + body.len());
    out.put_i32(body.len() as i32);
    out.put_slice(&body);
    out.freeze()
}

fn need(buf: &[u8], n: usize) -> Result<(), FetchWireError> {
    if buf.len() < n {
        Err(FetchWireError::Short)
    } else {
        Ok(())
    }
}

/// The correlation id and the request of a fetch frame (without its size prefix).
pub fn decode_request(mut frame: &[u8]) -> Result<(i32, FetchRequest), FetchWireError> {
    need(frame, 10)?;
    let _key = frame.get_i16();
    let version = frame.get_i16();
    if version != METADATA_FETCH_VERSION {
        return Err(FetchWireError::Version(version));
    }
    let correlation_id = frame.get_i32();
    let client_len = frame.get_i16();
    let client_len = usize::try_from(client_len).map_err(|_| FetchWireError::Range("client id"))?;
    need(frame, client_len)?;
    frame.advance(client_len);
    need(frame, 20)?;
    let r = FetchRequest {
        node_id: frame.get_i32(),
        after: frame.get_i64(),
        max_wait_ms: frame.get_i32(),
        max_bytes: frame.get_i32(),
    };
    if !frame.is_empty() {
        return Err(FetchWireError::Trailing(frame.len()));
    }
    if r.after < 0 {
        return Err(FetchWireError::Range("after"));
    }
    Ok((correlation_id, r))
}

/// A response frame, size prefix included.
pub fn encode_response(correlation_id: i32, r: &FetchResponse) -> Bytes {
    let mut body = BytesMut::new();
    body.put_i32(correlation_id);
    body.put_i32(r.leader_id);
    match &r.snapshot {
        Some((offset, data)) => {
            body.put_u8(1);
            body.put_i64(*offset);
            body.put_u32(data.len() as u32);
            body.put_slice(data);
        }
        None => body.put_u8(0),
    }
    body.put_u32(r.entries.len() as u32);
    for (index, data) in &r.entries {
        body.put_i64(*index);
        body.put_u32(data.len() as u32);
        body.put_slice(data);
    }
    let mut out = BytesMut::with_capacity(4 + body.len());
    out.put_i32(body.len() as i32);
    out.put_slice(&body);
    out.freeze()
}

fn get_bytes(frame: &mut Bytes) -> Result<Bytes, FetchWireError> {
    need(frame, 4)?;
    let len = frame.get_u32() as usize;
    need(frame, len)?;
    Ok(frame.split_to(len))
}

/// The correlation id and the answer of a response frame (without its size prefix).
pub fn decode_response(mut frame: Bytes) -> Result<(i32, FetchResponse), FetchWireError> {
    need(&frame, 9)?;
    let correlation_id = frame.get_i32();
    let leader_id = frame.get_i32();
    let snapshot = match frame.get_u8() {
        0 => None,
        1 => {
            need(&frame, 8)?;
            let offset = frame.get_i64();
            Some((offset, get_bytes(&mut frame)?))
        }
        _ => return Err(FetchWireError::Range("snapshot flag")),
    };
    need(&frame, 4)?;
    let count = frame.get_u32() as usize;
    let mut entries = Vec::with_capacity(count.min(METADATA_FEED_ENTRIES_MAX));
    for _ in 0..count {
        need(&frame, 8)?;
        let index = frame.get_i64();
        entries.push((index, get_bytes(&mut frame)?));
    }
    if !frame.is_empty() {
        return Err(FetchWireError::Trailing(frame.len()));
    }
    Ok((
        correlation_id,
        FetchResponse {
            leader_id,
            snapshot,
            entries,
        },
    ))
}

/// A voter answers a fetch: entries after the asked offset, waiting up to its `max_wait_ms` for
/// one, or its image as a snapshot when the offset is older than the feed.
pub async fn serve_fetch(
    feed: &MetadataFeed,
    cache: &MetadataCache,
    leader_id: impl Fn() -> i32,
    request: &FetchRequest,
) -> FetchResponse {
    let after = request.after as u64;
    let max_bytes = request.max_bytes.max(1) as usize;
    let wait =
        Duration::from_millis(request.max_wait_ms.clamp(0, METADATA_FETCH_MAX_WAIT_MS) as u64);
    let mut last = feed.subscribe();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match feed.read(after, max_bytes) {
            FeedRead::TooOld => {
                let image = cache.image();
                let mut data = Vec::new();
                for r in image.to_records() {
                    r.encode(&mut data).expect("a record of the image encodes");
                }
                return FetchResponse {
                    leader_id: leader_id(),
                    snapshot: Some((image.metadata_offset as i64, Bytes::from(data))),
                    entries: Vec::new(),
                };
            }
            FeedRead::Entries(entries) if !entries.is_empty() => {
                return FetchResponse {
                    leader_id: leader_id(),
                    snapshot: None,
                    entries: entries.into_iter().map(|(i, d)| (i as i64, d)).collect(),
                };
            }
            FeedRead::Entries(_) => {}
        }
        last.borrow_and_update();
        let changed = tokio::time::timeout_at(deadline, last.changed()).await;
        if !matches!(changed, Ok(Ok(()))) {
            return FetchResponse {
                leader_id: leader_id(),
                snapshot: None,
                entries: Vec::new(),
            };
        }
    }
}

/// Starts a broker-only node's observer: the fetch task, and the channel through which the
/// node's metadata changes reach the active controller. The image is empty until the first
/// answer; the returned task ends when `shutdown` turns true.
pub fn start(
    config: Arc<BrokerConfig>,
    cache: Arc<MetadataCache>,
    shutdown: watch::Receiver<bool>,
) -> Result<(ControllerChannel, Arc<MetadataPublisher>, JoinHandle<()>), DurableError> {
    let publisher = Arc::new(
        MetadataPublisher::threaded(cache, MetadataImage::empty(String::new(), -1)).map_err(
            |source| DurableError::Io {
                path: "metadata publisher thread".into(),
                source,
            },
        )?,
    );
    let state = Arc::new(QuorumState::new());
    let voters = super::forward::voter_endpoints(&config);
    let forwarder = Forwarder::new(
        config.node_id,
        &voters,
        config.controller_client.clone(),
        state.clone(),
    );
    // No controller thread: a request for it finds its queue closed and answers NOT_CONTROLLER,
    // and everything that changes metadata is forwarded instead.
    let (events, _) = std::sync::mpsc::channel();
    let channel = ControllerChannel {
        events,
        permits: Arc::new(Semaphore::new(CONTROLLER_QUEUE_REQUESTS_MAX)),
        state: state.clone(),
        forwarder: Some(forwarder),
        feed: Arc::new(MetadataFeed::default()),
        peers_queued: Arc::default(),
        // No controller thread to fail: never completes.
        failed: tokio::sync::watch::channel(None).1,
        // Not a voter: a chunk sent here names no peer it accepts.
        chunks: Arc::new(Mutex::new(Reassembly::new(Vec::new()))),
    };
    let task = tokio::spawn(run(
        config.node_id,
        voters,
        config.controller_client.clone(),
        publisher.clone(),
        state,
        shutdown,
    ));
    Ok((channel, publisher, task))
}

async fn run(
    node_id: i32,
    voters: Vec<(i32, String, u16)>,
    security: Option<Arc<ClientSecurity>>,
    publisher: Arc<MetadataPublisher>,
    state: Arc<QuorumState>,
    mut shutdown: watch::Receiver<bool>,
) {
    let client_id = format!("kafkaiq-{node_id}-metadata-observer");
    let mut correlation = 0i32;
    let mut next_voter = 0usize;
    // The voter, the connection, and when its SASL session must be renewed (KIP-368,
    // `secure::renewal_due`): one request at a time, so it authenticates again between two.
    let mut connection: Option<(i32, secure::Stream, Option<Instant>)> = None;
    loop {
        let (target, mut stream, renew_at) = match connection.take() {
            Some(c) => c,
            None => {
                let leader = state.leader.load(Ordering::Acquire);
                let (id, host, port) = match voters.iter().find(|v| v.0 == leader) {
                    Some(v) => v.clone(),
                    None => {
                        next_voter = (next_voter + 1) % voters.len();
                        voters[next_voter].clone()
                    }
                };
                match open(id, &host, port, security.as_deref(), &client_id).await {
                    Ok((s, renew_at)) => (id, s, renew_at),
                    Err(refused) => {
                        state.set(false, -1);
                        // A voter that refused the TLS handshake or the credentials is asked
                        // again less often than one that did not answer (each refusal logged).
                        let ms = if refused {
                            OBSERVER_REFUSED_RETRY_MS
                        } else {
                            OBSERVER_RETRY_MS
                        };
                        if pause_ms(&mut shutdown, ms).await {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        correlation = correlation.wrapping_add(1);
        let request = FetchRequest {
            node_id,
            after: publisher.image().metadata_offset as i64,
            max_wait_ms: METADATA_FETCH_MAX_WAIT_MS,
            max_bytes: METADATA_FETCH_MAX_BYTES,
        };
        let exchange = async {
            stream
                .write_all(&encode_request(correlation, &client_id, &request))
                .await?;
            stream.flush().await?;
            let len = stream.read_i32().await?;
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= METADATA_FETCH_RESPONSE_BYTES_MAX)
                .ok_or_else(|| std::io::Error::other("metadata fetch answer of a bad size"))?;
            let mut buf = vec![0u8; len];
            stream.read_exact(&mut buf).await?;
            decode_response(Bytes::from(buf)).map_err(std::io::Error::other)
        };
        let timeout = Duration::from_millis(METADATA_FETCH_MAX_WAIT_MS as u64 + 5_000);
        let answer = tokio::select! {
            _ = stopped(&mut shutdown) => return,
            a = tokio::time::timeout(timeout, exchange) => a,
        };
        match answer {
            Ok(Ok((id, response))) if id == correlation => {
                if let Err(e) = apply(&publisher, &response) {
                    tracing::warn!(voter = target, error = %e, "metadata fetch answer refused");
                    if pause(&mut shutdown).await {
                        return;
                    }
                    continue;
                }
                state.set(false, response.leader_id);
                // Ask the leader next when it is another voter; a connection whose session
                // ends soon authenticates again first (KIP-368), or is dropped if it cannot.
                if response.leader_id == target || response.leader_id < 0 {
                    let due = renew_at.is_some_and(|at| Instant::now() >= at);
                    let renewed = match (due, security.as_deref().and_then(|s| s.sasl.as_ref())) {
                        (true, Some(credentials)) => {
                            let id = StrBytes::from_string(client_id.clone());
                            correlation = correlation.wrapping_add(1);
                            let mut exchange = secure::Direct {
                                stream: &mut stream,
                                client_id: &id,
                                correlation_id: &mut correlation,
                            };
                            let renewing = secure::reauthenticate(&mut exchange, credentials);
                            match tokio::time::timeout(OBSERVER_SECURE_OPEN_TIMEOUT, renewing).await
                            {
                                Ok(Ok(renewed)) => Some(renewed),
                                Ok(Err(reason)) => {
                                    tracing::warn!(voter = target, %reason, "metadata fetch connection's SASL re-authentication failed; reconnecting");
                                    None
                                }
                                Err(_) => {
                                    tracing::warn!(voter = target, "metadata fetch connection's SASL re-authentication not done within {OBSERVER_SECURE_OPEN_TIMEOUT:?}; reconnecting");
                                    None
                                }
                            }
                        }
                        _ => Some(renew_at),
                    };
                    if let Some(renew_at) = renewed {
                        connection = Some((target, stream, renew_at));
                    }
                }
            }
            other => {
                tracing::debug!(voter = target, answer = ?other.map(|r| r.map(|(id, _)| id)), "metadata fetch failed");
                state.set(false, -1);
                if pause(&mut shutdown).await {
                    return;
                }
            }
        }
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Opens a connection to voter `id`'s controller listener, with TLS and SASL when it is
/// secured. `Err(true)`: the voter answered but refused the handshake or the credentials
/// (logged); `Err(false)`: it did not answer.
async fn open(
    id: i32,
    host: &str,
    port: u16,
    security: Option<&ClientSecurity>,
    client_id: &str,
) -> Result<(secure::Stream, Option<Instant>), bool> {
    let connect = TcpStream::connect((host, port));
    let tcp = match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Ok(tcp)) => tcp,
        _ => return Err(false),
    };
    let _ = tcp.set_nodelay(true);
    let endpoint = Endpoint::new(host, port);
    let opened = tokio::time::timeout(
        OBSERVER_SECURE_OPEN_TIMEOUT,
        secure::open(tcp, &endpoint, security, client_id),
    )
    .await
    .unwrap_or_else(|_| {
        Err(format!(
            "not secured within {OBSERVER_SECURE_OPEN_TIMEOUT:?}"
        ))
    });
    opened
        .map(|(stream, renew_at, _)| (stream, renew_at))
        .map_err(|reason| {
            tracing::warn!(
                voter = id,
                "metadata fetch connection to controller {id} failed: {reason}"
            );
            true
        })
}

/// Sleeps before the next try; true when the node is stopping.
async fn pause(shutdown: &mut watch::Receiver<bool>) -> bool {
    pause_ms(shutdown, OBSERVER_RETRY_MS).await
}

/// Sleeps `ms` before the next try; true when the node is stopping.
async fn pause_ms(shutdown: &mut watch::Receiver<bool>, ms: u64) -> bool {
    tokio::select! {
        _ = stopped(shutdown) => true,
        _ = tokio::time::sleep(Duration::from_millis(ms)) => false,
    }
}

/// Publishes what a voter answered: its snapshot, then its entries, each only if it follows what
/// this node has (an answer from a voter behind this node publishes nothing).
fn apply(publisher: &MetadataPublisher, response: &FetchResponse) -> Result<(), String> {
    if let Some((offset, data)) = &response.snapshot {
        let offset = u64::try_from(*offset).map_err(|_| "negative snapshot offset")?;
        if offset > publisher.image().metadata_offset || publisher.image().cluster_id.is_empty() {
            let records = MetadataRecord::decode_all(data).map_err(|e| e.to_string())?;
            let mut image = MetadataImage::empty(String::new(), response.leader_id);
            image.apply_in_place(&records);
            image.metadata_offset = offset;
            publisher.publish_image(image);
        }
    }
    for (index, data) in &response.entries {
        let index = u64::try_from(*index).map_err(|_| "negative entry offset")?;
        let have = publisher.image().metadata_offset;
        if index <= have {
            continue;
        }
        if index != have + 1 {
            return Err(format!("entry {index} does not follow offset {have}"));
        }
        let records = MetadataRecord::decode_all(data).map_err(|e| e.to_string())?;
        publisher.publish(index, &records);
    }
    if response.leader_id >= 0 && publisher.image().controller_id != response.leader_id {
        let mut next = (*publisher.image()).clone();
        next.controller_id = response.leader_id;
        publisher.publish_image(next);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feed_serves_what_follows_and_asks_for_a_snapshot_when_too_old() {
        let feed = MetadataFeed::default();
        for i in 1..=3u64 {
            feed.append(i, Bytes::from(vec![i as u8; 10]));
        }
        let FeedRead::Entries(e) = feed.read(1, 1 << 20) else {
            panic!("entries")
        };
        assert_eq!(e.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![2, 3]);
        // One entry at least, however small the budget.
        let FeedRead::Entries(e) = feed.read(0, 1) else {
            panic!("entries")
        };
        assert_eq!(e.len(), 1);
        assert_eq!(feed.read(3, 1 << 20), FeedRead::Entries(vec![]));
        // Past the bound the oldest entries go, and a fetch from before them needs a snapshot.
        for i in 4..=(METADATA_FEED_ENTRIES_MAX as u64 + 10) {
            feed.append(i, Bytes::new());
        }
        assert_eq!(feed.read(5, 1 << 20), FeedRead::TooOld);
        assert!(
            matches!(feed.read(11, 1 << 20), FeedRead::Entries(e) if e.len() == METADATA_FEED_ENTRIES_MAX - 1)
        );
        // A snapshot (or a gap) starts the feed over.
        feed.reset(100_000);
        assert_eq!(feed.read(99_999, 1 << 20), FeedRead::TooOld);
        feed.append(200_000, Bytes::new());
        assert_eq!(feed.read(199_998, 1 << 20), FeedRead::TooOld);
        assert!(matches!(feed.read(199_999, 1 << 20), FeedRead::Entries(e) if e.len() == 1));
    }

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let request = FetchRequest {
            node_id: 4,
            after: 17,
            max_wait_ms: 500,
            max_bytes: 1024,
        };
        let frame = encode_request(9, "observer", &request);
        assert!(is_fetch_frame(&frame[4..]));
        assert_eq!(decode_request(&frame[4..]), Ok((9, request.clone())));
        assert_eq!(
            decode_request(&frame[4..frame.len() - 1]),
            Err(FetchWireError::Short)
        );
        let mut longer = frame[4..].to_vec();
        longer.push(0);
        assert_eq!(decode_request(&longer), Err(FetchWireError::Trailing(1)));
        let mut bad = frame[4..].to_vec();
        bad[3] = 7;
        assert_eq!(decode_request(&bad), Err(FetchWireError::Version(7)));

        let response = FetchResponse {
            leader_id: 2,
            snapshot: Some((40, Bytes::from_static(b"image"))),
            entries: vec![(41, Bytes::from_static(b"a")), (42, Bytes::new())],
        };
        let frame = encode_response(9, &response);
        assert_eq!(decode_response(frame.slice(4..)), Ok((9, response)));
        assert_eq!(
            decode_response(frame.slice(4..frame.len() - 1)),
            Err(FetchWireError::Short)
        );
    }

    #[test]
    fn an_answer_publishes_its_snapshot_then_the_entries_that_follow() {
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher =
            MetadataPublisher::new(cache.clone(), MetadataImage::empty(String::new(), -1));
        let source = MetadataImage::empty("cluster-a".into(), 2);
        let mut data = Vec::new();
        for r in source.to_records() {
            r.encode(&mut data).unwrap();
        }
        let answer = FetchResponse {
            leader_id: 2,
            snapshot: Some((40, Bytes::from(data))),
            entries: vec![(41, Bytes::new()), (42, Bytes::new())],
        };
        apply(&publisher, &answer).unwrap();
        let image = cache.image();
        assert_eq!(
            (
                image.metadata_offset,
                image.cluster_id.as_str(),
                image.controller_id
            ),
            (42, "cluster-a", 2)
        );
        // The same answer again (from a voter behind this node) changes nothing; a gap is
        // refused and publishes nothing.
        apply(&publisher, &answer).unwrap();
        assert_eq!(cache.image().metadata_offset, 42);
        let gap = FetchResponse {
            leader_id: 2,
            snapshot: None,
            entries: vec![(44, Bytes::new())],
        };
        assert!(apply(&publisher, &gap).is_err());
        assert_eq!(cache.image().metadata_offset, 42);
        // Undecodable records are refused.
        let garbage = FetchResponse {
            leader_id: 2,
            snapshot: None,
            entries: vec![(43, Bytes::from_static(&[0xee, 1, 2]))],
        };
        assert!(apply(&publisher, &garbage).is_err());
        assert_eq!(cache.image().metadata_offset, 42);
    }

    #[tokio::test]
    async fn a_fetch_waits_for_the_next_commit() {
        let feed = Arc::new(MetadataFeed::default());
        let cache = MetadataCache::new(MetadataImage::default());
        feed.append(1, Bytes::from_static(b"x"));
        let request = FetchRequest {
            node_id: 4,
            after: 1,
            max_wait_ms: 400,
            max_bytes: 1024,
        };
        // Nothing new: the answer comes empty after the wait.
        let started = std::time::Instant::now();
        let r = serve_fetch(&feed, &cache, || 1, &request).await;
        assert!(r.entries.is_empty() && r.snapshot.is_none());
        assert!(started.elapsed() >= Duration::from_millis(350));
        // A commit during the wait answers at once.
        let later = feed.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            later.append(2, Bytes::from_static(b"y"));
        });
        let started = std::time::Instant::now();
        let r = serve_fetch(&feed, &cache, || 1, &request).await;
        assert_eq!(r.entries, vec![(2, Bytes::from_static(b"y"))]);
        assert!(started.elapsed() < Duration::from_millis(350));
        // Older than the feed (a snapshot was taken since): the image, at its offset.
        feed.reset(10);
        let old = FetchRequest {
            after: 0,
            ..request
        };
        let r = serve_fetch(&feed, &cache, || 1, &old).await;
        assert!(r.entries.is_empty());
        assert_eq!(r.snapshot.map(|(offset, _)| offset), Some(0));
    }
}
