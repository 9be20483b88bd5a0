//! The inter-broker client over real sockets on 127.0.0.1 against a scripted Kafka-frame server:
//! each test accepts the client's connections and answers (or misanswers, or ignores) its
//! requests step by step, then asserts on what the client returned and what reached the wire.
//! Every wait has a deadline; none is a fixed sleep.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiVersionsResponse, FetchRequest, MetadataRequest, MetadataResponse, ProduceRequest,
    ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use kafkaiq::client::{
    Client, ClientConfig, ClientError, CloseReason, ConnectionEvent, ConnectionEventKind,
    ConnectionState, Endpoint, RequestOptions,
};
use kafkaiq::protocol::{decode_request, encode_response, ApiKey, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

// ---- an allocator that remembers the largest allocation --------------------------------------

struct Largest;

static LARGEST_ALLOCATION_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Larger than anything these tests allocate; a larger request means a wire length reached an
/// allocation unchecked, and is refused rather than served.
const ALLOCATION_BYTES_REFUSED: usize = 1 << 30;

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        LARGEST_ALLOCATION_BYTES.fetch_max(layout.size(), Ordering::Relaxed);
        if layout.size() >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        LARGEST_ALLOCATION_BYTES.fetch_max(new_size, Ordering::Relaxed);
        if new_size >= ALLOCATION_BYTES_REFUSED {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

// ---- the scripted server ----------------------------------------------------------------------

/// The longest any step of a test may take.
const STEP: Duration = Duration::from_secs(10);

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

struct FakeBroker {
    listener: TcpListener,
}

impl FakeBroker {
    async fn start() -> FakeBroker {
        FakeBroker {
            listener: TcpListener::bind("127.0.0.1:0").await.unwrap(),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap()
    }

    async fn accept(&self) -> FakeConnection {
        let (stream, _) = within("a connection", self.listener.accept())
            .await
            .unwrap();
        FakeConnection { stream }
    }

    /// Accepts a connection and answers its ApiVersions request with `ranges`.
    async fn accept_advertising(&self, ranges: &[(ApiKey, i16, i16)]) -> FakeConnection {
        let mut connection = self.accept().await;
        let request = connection
            .read_request()
            .await
            .expect("ApiVersions request");
        assert_eq!(request.api_key, ApiKey::ApiVersions);
        assert_eq!(
            request.api_version, 4,
            "the client asks at the newest version first"
        );
        connection
            .answer(&request, ResponseKind::ApiVersions(advertising(ranges)))
            .await;
        connection
    }
}

/// A broker that serves the APIs these tests use.
const RANGES: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 17),
];

fn advertising(ranges: &[(ApiKey, i16, i16)]) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(
        ranges
            .iter()
            .map(|&(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(key as i16)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    )
}

struct FakeConnection {
    stream: TcpStream,
}

impl FakeConnection {
    /// The next request, or `None` once the client closed the connection.
    async fn read_request(&mut self) -> Option<Request> {
        let mut size = [0u8; 4];
        within("a request", self.stream.read_exact(&mut size))
            .await
            .ok()?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        within("a request body", self.stream.read_exact(&mut frame))
            .await
            .ok()?;
        Some(decode_request(Bytes::from(frame)).expect("the client sends valid requests"))
    }

    /// Whether a request arrives within `wait` (for asserting that one does not).
    async fn request_within(&mut self, wait: Duration) -> bool {
        let mut byte = [0u8; 1];
        matches!(timeout(wait, self.stream.peek(&mut byte)).await, Ok(Ok(n)) if n > 0)
    }

    /// Answers `request` at its own version.
    async fn answer(&mut self, request: &Request, body: ResponseKind) {
        let frame = encode_response(
            request.api_key,
            request.api_version,
            request.correlation_id(),
            &body,
        )
        .expect("test responses encode");
        self.stream.write_all(&frame).await.unwrap();
    }

    /// Answers a Metadata request with its correlation id as the controller id, so each caller
    /// can check it got its own response.
    async fn answer_metadata(&mut self, request: &Request) {
        assert_eq!(request.api_key, ApiKey::Metadata);
        let body = MetadataResponse::default().with_controller_id(request.correlation_id().into());
        self.answer(request, ResponseKind::Metadata(body)).await;
    }

    async fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Whether the client closes the connection (end of stream, after any requests).
    async fn closed_by_client(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match within("the client to close", self.stream.read(&mut buf)).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    }
}

// ---- helpers ----------------------------------------------------------------------------------

fn config() -> ClientConfig {
    ClientConfig {
        client_id: "test-client".to_owned(),
        reconnect_backoff: Duration::from_millis(20),
        reconnect_backoff_max: Duration::from_millis(200),
        request_timeout: Duration::from_secs(5),
        jitter_seed: 42,
        ..ClientConfig::default()
    }
}

fn client_for(broker: &FakeBroker, config: ClientConfig) -> Client {
    let client = Client::new(config, None);
    client.set_endpoint(1, broker.addr().into()).unwrap();
    client
}

async fn metadata(client: &Client) -> Result<i32, ClientError> {
    client
        .send(1, MetadataRequest::default())
        .await
        .map(|response| response.body.controller_id.0)
}

/// Spawns a Metadata call; its handle yields the controller id answered (the correlation id).
fn spawn_metadata(client: &Client) -> tokio::task::JoinHandle<Result<i32, ClientError>> {
    let client = client.clone();
    tokio::spawn(async move { metadata(&client).await })
}

async fn next_event(
    events: &mut broadcast::Receiver<ConnectionEvent>,
    what: &str,
    wanted: impl Fn(&ConnectionEventKind) -> bool,
) -> ConnectionEventKind {
    within(what, async {
        loop {
            let event = events.recv().await.expect("events");
            if wanted(&event.kind) {
                return event.kind;
            }
        }
    })
    .await
}

fn is_closed(kind: &ConnectionEventKind) -> bool {
    matches!(kind, ConnectionEventKind::Closed { .. })
}

// ---- version negotiation ----------------------------------------------------------------------

#[tokio::test]
async fn requests_go_out_at_the_lower_maximum_and_an_api_the_peer_lacks_is_refused() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let call = spawn_metadata(&client);
    let mut connection = broker
        .accept_advertising(&[(ApiKey::ApiVersions, 0, 4), (ApiKey::Metadata, 0, 8)])
        .await;
    let request = connection.read_request().await.unwrap();
    assert_eq!(request.api_version, 8, "min(13, 8)");
    assert_eq!(request.header.client_id.as_deref(), Some("test-client"));
    connection.answer_metadata(&request).await;
    assert_eq!(call.await.unwrap().unwrap(), request.correlation_id());

    let versions = client.peer_versions(1).expect("connected");
    assert_eq!(versions.get(ApiKey::Metadata), Some((0, 8)));
    assert_eq!(versions.api_versions_version, 4);

    // Fetch is not served at all; Metadata 9+ is not served.
    let err = client.send(1, FetchRequest::default()).await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::NoCommonVersion {
                api_key: ApiKey::Fetch,
                theirs: None,
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.may_have_been_sent());
    let err = client
        .send_with(1, RequestOptions::default().versions(9, 13), |_| {
            MetadataRequest::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::NoCommonVersion {
                ours: (9, 13),
                theirs: Some((0, 8)),
                ..
            }
        ),
        "{err}"
    );
    // Neither closed the connection.
    let call = spawn_metadata(&client);
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
    assert_eq!(client.watch(1).unwrap().borrow().connections_opened, 1);

    // An API the client has no response layout for is refused before any I/O.
    let err = client
        .send(1, kafka_protocol::messages::JoinGroupRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::UnsupportedApi {
                api_key: ApiKey::JoinGroup
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn the_builder_sets_fields_by_the_negotiated_version() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .send_with(1, RequestOptions::default(), |version| {
                    let request = MetadataRequest::default();
                    if version >= 4 {
                        request.with_allow_auto_topic_creation(false)
                    } else {
                        request
                    }
                })
                .await
        })
    };
    let mut connection = broker
        .accept_advertising(&[(ApiKey::ApiVersions, 0, 4), (ApiKey::Metadata, 0, 3)])
        .await;
    let request = connection.read_request().await.unwrap();
    assert_eq!(request.api_version, 3);
    connection.answer_metadata(&request).await;
    assert_eq!(call.await.unwrap().unwrap().version, 3);
}

#[tokio::test]
async fn an_older_peer_gets_api_versions_again_at_its_own_maximum_or_v0() {
    let unsupported = ResponseError::UnsupportedVersion.code();
    for (listed, retried_at) in [(Some(2), 2), (None, 0)] {
        let broker = FakeBroker::start().await;
        let client = client_for(&broker, config());
        let call = spawn_metadata(&client);
        let mut connection = broker.accept().await;
        let request = connection.read_request().await.unwrap();
        assert_eq!(
            (request.api_key, request.api_version),
            (ApiKey::ApiVersions, 4)
        );
        // KIP-511: a v0 body with UNSUPPORTED_VERSION and our own ApiVersions range.
        let ranges: Vec<_> = listed
            .map(|max| (ApiKey::ApiVersions, 0, max))
            .into_iter()
            .collect();
        let body = advertising(&ranges).with_error_code(unsupported);
        let frame = encode_response(
            ApiKey::ApiVersions,
            0,
            request.correlation_id(),
            &ResponseKind::ApiVersions(body),
        )
        .unwrap();
        connection.write_raw(&frame).await;

        // The client asks again on the same connection.
        let retry = connection.read_request().await.unwrap();
        assert_eq!(
            (retry.api_key, retry.api_version),
            (ApiKey::ApiVersions, retried_at)
        );
        assert_eq!(retry.correlation_id(), request.correlation_id() + 1);
        let mut ranges = RANGES.to_vec();
        ranges[0] = (ApiKey::ApiVersions, 0, retried_at);
        connection
            .answer(&retry, ResponseKind::ApiVersions(advertising(&ranges)))
            .await;

        let request = connection.read_request().await.unwrap();
        connection.answer_metadata(&request).await;
        call.await.unwrap().unwrap();
        let versions = client.peer_versions(1).unwrap();
        assert_eq!(versions.api_versions_version, retried_at);
    }
}

// ---- pipelining and correlation ---------------------------------------------------------------

#[tokio::test]
async fn pipelining_stops_at_the_in_flight_bound_and_each_caller_gets_its_response() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            in_flight_requests_max: 2,
            ..config()
        },
    );
    let calls: Vec<_> = (0..3).map(|_| spawn_metadata(&client)).collect();
    let mut connection = broker.accept_advertising(RANGES).await;
    let first = connection.read_request().await.unwrap();
    let second = connection.read_request().await.unwrap();
    // The third waits for a response.
    assert!(
        !connection.request_within(Duration::from_millis(300)).await,
        "a third request was written with two in flight"
    );
    connection.answer_metadata(&first).await;
    let third = connection.read_request().await.unwrap();
    assert_eq!(
        [first.correlation_id() + 1, first.correlation_id() + 2],
        [second.correlation_id(), third.correlation_id()]
    );
    connection.answer_metadata(&second).await;
    connection.answer_metadata(&third).await;
    let mut answered = Vec::new();
    for call in calls {
        answered.push(within("a call", call).await.unwrap().unwrap());
    }
    answered.sort();
    assert_eq!(
        answered,
        vec![
            first.correlation_id(),
            second.correlation_id(),
            third.correlation_id()
        ]
    );
}

#[tokio::test]
async fn a_response_out_of_order_is_a_protocol_error_that_closes_the_connection() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let mut events = client.events();
    let first = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request_1 = connection.read_request().await.unwrap();
    let second = spawn_metadata(&client);
    let request_2 = connection.read_request().await.unwrap();
    // Answer the second first.
    connection.answer_metadata(&request_2).await;
    for call in [first, second] {
        let err = within("a call", call).await.unwrap().unwrap_err();
        assert!(
            matches!(
                &err,
                ClientError::Disconnected {
                    sent: true,
                    reason: CloseReason::CorrelationMismatch { expected, received },
                    ..
                } if *expected == request_1.correlation_id() && *received == request_2.correlation_id()
            ),
            "{err}"
        );
        assert!(err.may_have_been_sent());
    }
    assert!(connection.closed_by_client().await);
    let closed = next_event(&mut events, "the close event", is_closed).await;
    assert!(
        matches!(
            closed,
            ConnectionEventKind::Closed {
                reason: CloseReason::CorrelationMismatch { .. },
                requests_failed: 2,
                retry_in: Some(_),
            }
        ),
        "{closed:?}"
    );
}

#[tokio::test]
async fn an_unsolicited_frame_closes_the_connection() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let mut events = client.events();
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
    connection.answer_metadata(&request).await;
    let closed = next_event(&mut events, "the close event", is_closed).await;
    assert!(
        matches!(
            closed,
            ConnectionEventKind::Closed {
                reason: CloseReason::Unsolicited,
                ..
            }
        ),
        "{closed:?}"
    );
    assert!(connection.closed_by_client().await);
}

// ---- timeouts ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_timed_out_request_fails_closes_its_connection_and_fails_the_rest() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let mut events = client.events();
    let short = {
        let client = client.clone();
        tokio::spawn(async move {
            let options = RequestOptions::default().timeout(Duration::from_millis(300));
            client
                .send_with(1, options, |_| MetadataRequest::default())
                .await
        })
    };
    let mut connection = broker.accept_advertising(RANGES).await;
    let _never_answered = connection.read_request().await.unwrap();
    let long = spawn_metadata(&client);
    let _closed_before_answered = connection.read_request().await.unwrap();

    let started = Instant::now();
    let err = within("the timeout", short).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Timeout {
                api_key: ApiKey::Metadata,
                sent: true,
                ..
            }
        ),
        "{err}"
    );
    let err = within("the other request", long)
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Disconnected {
                sent: true,
                reason: CloseReason::Timeout { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(connection.closed_by_client().await);
    let closed = next_event(&mut events, "the close event", is_closed).await;
    assert!(
        matches!(
            closed,
            ConnectionEventKind::Closed {
                reason: CloseReason::Timeout { .. },
                ..
            }
        ),
        "{closed:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // The next request reconnects; nothing late from the old connection can reach it.
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    assert_eq!(call.await.unwrap().unwrap(), request.correlation_id());
    assert_eq!(client.watch(1).unwrap().borrow().connections_opened, 2);
}

#[tokio::test]
async fn a_request_that_times_out_in_the_queue_is_never_sent() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            in_flight_requests_max: 1,
            ..config()
        },
    );
    let blocking = {
        let client = client.clone();
        tokio::spawn(async move {
            let options = RequestOptions::default().timeout(Duration::from_millis(1500));
            client
                .send_with(1, options, |_| MetadataRequest::default())
                .await
        })
    };
    let mut connection = broker.accept_advertising(RANGES).await;
    let _unanswered = connection.read_request().await.unwrap();
    let options = RequestOptions::default().timeout(Duration::from_millis(200));
    let err = client
        .send_with(1, options, |_| MetadataRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { sent: false, .. }),
        "{err}"
    );
    assert!(!err.may_have_been_sent());
    // When the first times out its connection closes with nothing more written.
    assert!(matches!(
        within("the first timeout", blocking).await.unwrap(),
        Err(ClientError::Timeout { sent: true, .. })
    ));
    let mut rest = Vec::new();
    within("the close", connection.stream.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(
        rest.is_empty(),
        "{} bytes written after the first request",
        rest.len()
    );
}

// ---- disconnects and reconnects ---------------------------------------------------------------

#[tokio::test]
async fn a_disconnect_fails_every_request_in_flight() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let mut events = client.events();
    let calls: Vec<_> = (0..3).map(|_| spawn_metadata(&client)).collect();
    let mut connection = broker.accept_advertising(RANGES).await;
    for _ in 0..3 {
        connection.read_request().await.unwrap();
    }
    drop(connection);
    for call in calls {
        let err = within("a call", call).await.unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::Disconnected {
                    node: 1,
                    sent: true,
                    reason: CloseReason::PeerClosed
                }
            ),
            "{err}"
        );
    }
    let closed = next_event(&mut events, "the close event", is_closed).await;
    assert!(
        matches!(
            closed,
            ConnectionEventKind::Closed {
                reason: CloseReason::PeerClosed,
                requests_failed: 3,
                retry_in: Some(_)
            }
        ),
        "{closed:?}"
    );
}

#[tokio::test]
async fn after_the_server_closes_the_client_reconnects_once_the_backoff_has_passed() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            reconnect_backoff: Duration::from_millis(300),
            reconnect_backoff_max: Duration::from_millis(300),
            ..config()
        },
    );
    let mut events = client.events();
    let status = client.watch(1).unwrap();
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
    drop(connection);

    let closed = next_event(&mut events, "the close event", is_closed).await;
    let closed_at = Instant::now();
    let ConnectionEventKind::Closed {
        reason: CloseReason::PeerClosed,
        retry_in: Some(retry_in),
        ..
    } = closed
    else {
        panic!("{closed:?}")
    };
    // 300 ms ± 20 %, capped at the maximum.
    assert!(
        (Duration::from_millis(240)..=Duration::from_millis(300)).contains(&retry_in),
        "{retry_in:?}"
    );
    assert!(matches!(
        status.borrow().state,
        ConnectionState::BackingOff { failures: 1, .. }
    ));
    assert_eq!(status.borrow().connections_closed, 1);

    // Closed while idle: the next request reconnects, but not before the backoff.
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let waited = closed_at.elapsed();
    assert!(
        waited + Duration::from_millis(20) >= retry_in,
        "reconnected after {waited:?}, backoff {retry_in:?}"
    );
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
    assert_eq!(status.borrow().connections_opened, 2);
    assert!(matches!(
        status.borrow().state,
        ConnectionState::Ready { .. }
    ));
}

#[tokio::test]
async fn a_failed_connect_fails_the_waiting_requests_and_backs_off_doubling() {
    // A port with nothing listening.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let client = Client::new(config(), None);
    client.set_endpoint(1, dead_addr.into()).unwrap();
    let mut events = client.events();
    let mut waits = Vec::new();
    for attempt in 1..=3 {
        let err = metadata(&client).await.unwrap_err();
        assert!(
            matches!(err, ClientError::ConnectFailed { node: 1, .. }),
            "{err}"
        );
        assert!(!err.may_have_been_sent());
        let failed = next_event(&mut events, "connect failed", |kind| {
            matches!(kind, ConnectionEventKind::ConnectFailed { .. })
        })
        .await;
        let ConnectionEventKind::ConnectFailed {
            retry_in,
            requests_failed: 1,
            ..
        } = failed
        else {
            panic!("{failed:?}")
        };
        waits.push(retry_in);
        assert_eq!(client.watch(1).unwrap().borrow().connect_failures, attempt);
    }
    // 20, 40, 80 ms ± 20 %.
    for (wait, term) in waits.iter().zip([20u64, 40, 80]) {
        let ms = wait.as_millis() as u64;
        assert!(term * 8 / 10 <= ms + 1 && ms <= term * 12 / 10, "{waits:?}");
    }

    // A new endpoint is tried at once and works.
    let broker = FakeBroker::start().await;
    client.set_endpoint(1, broker.addr().into()).unwrap();
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_node_without_an_endpoint_fails_fast() {
    let client = Client::new(config(), None);
    let err = metadata(&client).await.unwrap_err();
    assert!(matches!(err, ClientError::NoEndpoint { node: 1 }), "{err}");
}

#[tokio::test]
async fn the_resolver_supplies_endpoints_and_a_new_endpoint_moves_the_connection() {
    let first = FakeBroker::start().await;
    let second = FakeBroker::start().await;
    let first_addr = first.addr();
    let client = Client::new(
        config(),
        Some(std::sync::Arc::new(move |node| {
            (node == 1).then(|| Endpoint::from(first_addr))
        })),
    );
    let mut events = client.events();
    let call = spawn_metadata(&client);
    let mut connection = first.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();

    // The active controller moved: the old connection closes, requests go to the new address.
    client.set_endpoint(1, second.addr().into()).unwrap();
    let closed = next_event(&mut events, "the close event", is_closed).await;
    assert!(
        matches!(
            closed,
            ConnectionEventKind::Closed {
                reason: CloseReason::EndpointChanged,
                retry_in: None,
                ..
            }
        ),
        "{closed:?}"
    );
    assert!(connection.closed_by_client().await);
    let call = spawn_metadata(&client);
    let mut connection = second.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
}

#[tokio::test]
async fn disconnect_and_idle_close_without_backoff() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            connection_idle_max: Duration::from_millis(300),
            ..config()
        },
    );
    let mut events = client.events();
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
    let closed = next_event(&mut events, "the idle close", is_closed).await;
    assert!(
        matches!(
            closed,
            ConnectionEventKind::Closed {
                reason: CloseReason::Idle,
                retry_in: None,
                ..
            }
        ),
        "{closed:?}"
    );
    assert!(connection.closed_by_client().await);

    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    connection.read_request().await.unwrap();
    client.disconnect(1);
    let err = within("the call", call).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Disconnected {
                sent: true,
                reason: CloseReason::Requested,
                ..
            }
        ),
        "{err}"
    );
    let closed = next_event(&mut events, "the requested close", is_closed).await;
    assert!(
        matches!(closed, ConnectionEventKind::Closed { retry_in: None, .. }),
        "{closed:?}"
    );
}

// ---- hostile responses ------------------------------------------------------------------------

#[tokio::test]
async fn an_oversized_response_frame_is_refused_without_allocating_it() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            response_bytes_max: 1 << 20,
            ..config()
        },
    );
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    // A size prefix of almost 2 GiB, then a little of a body.
    let mut frame = BytesMut::new();
    frame.put_i32(0x7fff_fff0);
    frame.put_i32(request.correlation_id());
    frame.put_slice(&[0; 64]);
    connection.write_raw(&frame).await;
    let err = within("the call", call).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::FrameTooLarge {
                size: 0x7fff_fff0,
                max: 1_048_576,
                ..
            }
        ),
        "{err}"
    );
    assert!(connection.closed_by_client().await);
    let largest = LARGEST_ALLOCATION_BYTES.load(Ordering::Relaxed);
    assert!(largest < 64 << 20, "largest allocation {largest} bytes");

    // A per-request bound overrides the client's.
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            let options = RequestOptions::default().response_bytes_max(16);
            client
                .send_with(1, options, |_| MetadataRequest::default())
                .await
        })
    };
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    let err = within("the call", call).await.unwrap().unwrap_err();
    assert!(
        matches!(err, ClientError::FrameTooLarge { max: 16, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_response_with_a_hostile_count_is_refused_and_closes_the_connection() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            let options = RequestOptions::default().versions(8, 8);
            client
                .send_with(1, options, |_| MetadataRequest::default())
                .await
        })
    };
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    assert_eq!(request.api_version, 8);
    // Header v0, throttle time, then 2^31 - 1 brokers in 14 bytes.
    let mut frame = BytesMut::new();
    frame.put_i32(14);
    frame.put_i32(request.correlation_id());
    frame.put_i32(0);
    frame.put_i32(i32::MAX);
    frame.put_i16(0);
    connection.write_raw(&frame).await;
    let err = within("the call", call).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Decode {
                api_key: ApiKey::Metadata,
                version: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.may_have_been_sent());
    assert!(connection.closed_by_client().await);
}

// ---- fire-and-forget --------------------------------------------------------------------------

#[tokio::test]
async fn fire_and_forget_requests_pipeline_and_their_responses_are_read_and_dropped() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    for _ in 0..3 {
        client
            .send_and_forget(1, RequestOptions::default(), |_| MetadataRequest::default())
            .await
            .unwrap();
    }
    // From a thread outside the runtime, as the controller thread would.
    let from_thread = client.clone();
    std::thread::spawn(move || {
        from_thread
            .try_send_and_forget(1, RequestOptions::default(), |_| MetadataRequest::default())
            .unwrap();
    })
    .join()
    .unwrap();
    let mut connection = broker.accept_advertising(RANGES).await;
    let mut requests = Vec::new();
    for _ in 0..4 {
        requests.push(connection.read_request().await.unwrap());
    }
    for request in &requests {
        connection.answer_metadata(request).await;
    }
    // The stream stayed in step: an awaited request on the same connection gets its own answer.
    let call = spawn_metadata(&client);
    let request = connection.read_request().await.unwrap();
    assert_eq!(request.correlation_id(), requests[3].correlation_id() + 1);
    connection.answer_metadata(&request).await;
    assert_eq!(call.await.unwrap().unwrap(), request.correlation_id());
    assert_eq!(client.watch(1).unwrap().borrow().connections_opened, 1);
}

#[tokio::test]
async fn a_full_queue_refuses_try_send_and_forget() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            in_flight_requests_max: 1,
            queued_requests_max: 1,
            ..config()
        },
    );
    let forget =
        || client.try_send_and_forget(1, RequestOptions::default(), |_| MetadataRequest::default());
    forget().unwrap();
    let mut connection = broker.accept_advertising(RANGES).await;
    connection.read_request().await.unwrap();
    // One in flight, one queued, the next refused.
    forget().unwrap();
    let refused = within("a refusal", async {
        loop {
            match forget() {
                Err(err) => return err,
                Ok(()) => tokio::task::yield_now().await,
            }
        }
    })
    .await;
    assert!(
        matches!(refused, ClientError::QueueFull { node: 1 }),
        "{refused}"
    );
}

#[tokio::test]
async fn produce_with_acks_0_holds_no_slot_and_cannot_be_awaited() {
    let broker = FakeBroker::start().await;
    let client = client_for(
        &broker,
        ClientConfig {
            in_flight_requests_max: 1,
            ..config()
        },
    );
    let produce = || {
        ProduceRequest::default()
            .with_acks(0)
            .with_timeout_ms(1000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(Bytes::new()))])])
    };
    let awaited = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .send_with(1, RequestOptions::default().versions(3, 12), move |_| {
                    produce()
                })
                .await
        })
    };
    let mut connection = broker.accept_advertising(RANGES).await;
    let err = within("the refusal", awaited).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::NoResponse {
                api_key: ApiKey::Produce
            }
        ),
        "{err}"
    );
    assert!(!err.may_have_been_sent());
    for _ in 0..2 {
        client
            .send_and_forget(1, RequestOptions::default().versions(3, 12), move |_| {
                produce()
            })
            .await
            .unwrap();
    }
    // With one slot, both unanswered produces and a Metadata go out before any response.
    let call = spawn_metadata(&client);
    for api_key in [ApiKey::Produce, ApiKey::Produce, ApiKey::Metadata] {
        let request = connection.read_request().await.unwrap();
        assert_eq!(request.api_key, api_key);
        if api_key == ApiKey::Metadata {
            connection.answer_metadata(&request).await;
        }
    }
    call.await.unwrap().unwrap();
}

// ---- lifecycle --------------------------------------------------------------------------------

#[tokio::test]
async fn shutdown_closes_connections_and_refuses_requests() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    connection.read_request().await.unwrap();
    client.shutdown();
    let err = within("the call", call).await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Disconnected {
                reason: CloseReason::Shutdown,
                ..
            }
        ),
        "{err}"
    );
    assert!(connection.closed_by_client().await);
    assert!(matches!(
        metadata(&client).await,
        Err(ClientError::Shutdown)
    ));
}

#[tokio::test]
async fn a_removed_node_starts_afresh() {
    let broker = FakeBroker::start().await;
    let client = client_for(&broker, config());
    let status = client.watch(1).unwrap();
    let call = spawn_metadata(&client);
    let mut connection = broker.accept_advertising(RANGES).await;
    let request = connection.read_request().await.unwrap();
    connection.answer_metadata(&request).await;
    call.await.unwrap().unwrap();
    client.remove(1);
    assert!(connection.closed_by_client().await);
    let mut status = status;
    within(
        "the removal",
        status.wait_for(|s| matches!(s.state, ConnectionState::Removed)),
    )
    .await
    .unwrap();
    // Its endpoint went with it.
    assert!(matches!(
        metadata(&client).await,
        Err(ClientError::NoEndpoint { node: 1 })
    ));
}
