//! One destination node: the task that owns its connection.
//!
//! Callers hand [`Submit`]s to the task through a bounded queue. The task opens the connection
//! when the first request arrives (after the reconnect backoff, if the last attempt failed),
//! negotiates versions, then writes requests while fewer than `in_flight_requests_max` await
//! their responses; the rest wait in the queue. A reader task beside it reads response frames,
//! checks each against the oldest request in flight (its bound, its correlation id), guards and
//! decodes it, and hands it back. Any failure of the stream — end of stream, an I/O error, a
//! frame too large, a misordered correlation id, an undecodable response, a request past its
//! deadline — closes the connection and fails every request in flight on it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::protocol::{Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};

use super::backoff::ReconnectBackoff;
use super::error::{ClientError, CloseReason};
use super::secure::{
    reauthenticate, round_trip, start_tls, Direct, Exchange, ReadHalf, Stream, WriteHalf,
};
use super::versions::{
    after_api_versions, api_versions_request, pick_version, Negotiation, PeerVersions,
    VersionRange, API_VERSIONS_VERSION_MAX,
};
use super::wire::{
    check_response_body, encode_request, read_body, read_size, split_response, AnyBody, DecodeFn,
    EncodeFn, FrameError,
};
use super::{
    ClientConfig, ConnectionEvent, ConnectionEventKind, ConnectionState, ConnectionStatus,
    Endpoint, NodeId, Resolver,
};
use crate::limits::CLIENT_API_VERSIONS_RESPONSE_BYTES_MAX;
use crate::protocol::ApiKey;

/// A request on its way to a destination.
pub(super) struct Submit {
    pub api_key: ApiKey,
    /// The versions the client can send and decode for this request.
    pub ours: VersionRange,
    pub encode: EncodeFn,
    /// `None` for fire-and-forget: the response is read, guarded and dropped.
    pub decode: Option<DecodeFn>,
    pub response_bytes_max: usize,
    pub deadline: Instant,
    pub timeout: Duration,
    /// Shared with an awaiting caller, who withdraws the request if it gives up first.
    pub ticket: Option<Arc<Ticket>>,
    pub reply: Option<oneshot::Sender<Result<Reply, ClientError>>>,
}

impl Submit {
    /// Whether anyone still wants the request sent: not past its deadline, not withdrawn, its
    /// caller (if any) still waiting.
    fn is_live(&self) -> bool {
        self.deadline > Instant::now()
            && !self
                .ticket
                .as_ref()
                .is_some_and(|ticket| ticket.is_withdrawn())
            && !self.reply.as_ref().is_some_and(|reply| reply.is_closed())
    }
}

/// A decoded response and the version it was sent at.
pub(super) struct Reply {
    pub version: i16,
    pub body: AnyBody,
}

/// Whether a request is still queued, was sent, or was withdrawn by its caller. The caller and
/// the destination task race only through this: a request is written only if the task moves it
/// from queued to sent, and a caller that gives up knows the request was never sent only if it
/// moves it from queued to withdrawn.
#[derive(Debug, Default)]
pub(super) struct Ticket(AtomicU8);

const QUEUED: u8 = 0;
const SENT: u8 = 1;
const WITHDRAWN: u8 = 2;

impl Ticket {
    /// Marks the request sent; `false` if the caller withdrew it.
    fn mark_sent(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, SENT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn is_withdrawn(&self) -> bool {
        self.0.load(Ordering::Acquire) == WITHDRAWN
    }

    /// Withdraws the request; `false` if it was sent already.
    pub fn withdraw(&self) -> bool {
        match self
            .0
            .compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == WITHDRAWN,
        }
    }
}

/// What the client tells a destination task besides requests.
#[derive(Debug, Clone, Default)]
pub(super) struct Control {
    /// Set by `set_endpoint`; wins over the resolver.
    pub endpoint: Option<Endpoint>,
    /// Incremented by `disconnect`.
    pub disconnects: u64,
    /// Set by `remove` and `shutdown`: close and stop.
    pub removed: bool,
}

/// What the reader task expects next: the oldest request in flight.
struct Expect {
    correlation_id: i32,
    api_key: ApiKey,
    version: i16,
    bytes_max: usize,
    decode: Option<DecodeFn>,
}

/// What the reader task reports.
enum Inbound {
    Response {
        correlation_id: i32,
        body: Option<AnyBody>,
    },
    /// The stream is unusable. `head` is the error of the oldest request in flight when the
    /// failing frame was its response.
    Failed {
        reason: CloseReason,
        head: Option<ClientError>,
    },
}

struct InFlight {
    correlation_id: i32,
    api_key: ApiKey,
    version: i16,
    deadline: Instant,
    timeout: Duration,
    reply: Option<oneshot::Sender<Result<Reply, ClientError>>>,
}

/// An open, negotiated connection.
struct Connection {
    endpoint: Endpoint,
    versions: Arc<PeerVersions>,
    writer: WriteHalf,
    reader: JoinHandle<()>,
    expects: mpsc::Sender<Expect>,
    inbound: mpsc::Receiver<Inbound>,
    next_correlation_id: i32,
    /// When the connection's SASL session must be renewed (KIP-368, `secure::renewal_due`):
    /// from then on no request is written to it, and once nothing is in flight it
    /// authenticates again in place ([`renew_session`]).
    renew_at: Option<Instant>,
}

pub(super) struct DestinationTask {
    pub node: NodeId,
    pub config: Arc<ClientConfig>,
    pub client_id: StrBytes,
    pub resolver: Option<Resolver>,
    pub submits: mpsc::Receiver<Submit>,
    pub control: watch::Receiver<Control>,
    pub status: watch::Sender<ConnectionStatus>,
    pub events: broadcast::Sender<ConnectionEvent>,
    pub backoff: ReconnectBackoff,
    /// Consecutive failures (failed connects, broken connections); reset by a connection.
    pub failures: u32,
    pub retry_at: Option<Instant>,
    pub disconnects_seen: u64,
}

/// How a wait for something other than requests ended.
enum Interrupt {
    /// The destination was removed or the client dropped.
    Stop,
    /// `disconnect` was called.
    Disconnect,
    /// The endpoint changed.
    EndpointChanged,
}

impl Interrupt {
    /// Why an open connection closes for it.
    fn close_reason(self) -> CloseReason {
        match self {
            Interrupt::Stop => CloseReason::Shutdown,
            Interrupt::Disconnect => CloseReason::Requested,
            Interrupt::EndpointChanged => CloseReason::EndpointChanged,
        }
    }
}

impl DestinationTask {
    pub async fn run(mut self) {
        loop {
            let first = tokio::select! {
                submit = self.submits.recv() => match submit {
                    Some(submit) => submit,
                    None => return self.stop(None),
                },
                interrupt = next_interrupt(&mut self.control, &mut self.disconnects_seen, None) => {
                    match interrupt {
                        Interrupt::Stop => return self.stop(None),
                        Interrupt::Disconnect => continue,
                        // Nothing is connected; the next connection uses the new endpoint, at
                        // once: the backoff was for the old one.
                        Interrupt::EndpointChanged => {
                            self.retry_at = None;
                            continue;
                        }
                    }
                }
            };
            if !first.is_live() {
                // Its caller gave up while it was queued; do not connect for it.
                continue;
            }
            if let Some(retry_at) = self.retry_at.filter(|at| *at > Instant::now()) {
                tokio::select! {
                    _ = sleep_until(retry_at) => {}
                    interrupt = next_interrupt(&mut self.control, &mut self.disconnects_seen, None) => {
                        if let Interrupt::Stop = interrupt {
                            return self.stop(Some(first));
                        }
                        // A new endpoint is worth trying at once.
                    }
                }
            }
            let Some(endpoint) = self.endpoint() else {
                let error = ClientError::NoEndpoint { node: self.node };
                self.fail_queued(first, &error);
                continue;
            };
            self.set_state(ConnectionState::Connecting {
                endpoint: endpoint.clone(),
            });
            let opened = tokio::select! {
                opened = open(self.node, &endpoint, &self.config, &self.client_id) => opened,
                interrupt = next_interrupt(&mut self.control, &mut self.disconnects_seen, Some(&endpoint)) => {
                    match interrupt {
                        Interrupt::Stop => return self.stop(Some(first)),
                        _ => Err("interrupted by disconnect or a new endpoint".to_owned()),
                    }
                }
            };
            match opened {
                Ok((stream, versions, next_correlation_id, renew_at)) => {
                    let connection = self.start_connection(
                        endpoint,
                        stream,
                        versions,
                        next_correlation_id,
                        renew_at,
                    );
                    let reason = self.serve(connection, first).await;
                    if reason == CloseReason::Shutdown {
                        return self.stop(None);
                    }
                }
                Err(reason) => self.connect_failed(&endpoint, first, reason),
            }
        }
    }

    fn endpoint(&self) -> Option<Endpoint> {
        let explicit = self.control.borrow().endpoint.clone();
        explicit.or_else(|| {
            self.resolver
                .as_ref()
                .and_then(|resolve| resolve(self.node))
        })
    }

    fn set_state(&self, state: ConnectionState) {
        self.status.send_modify(|status| status.state = state);
    }

    fn emit(&self, kind: ConnectionEventKind) {
        // No subscriber is fine.
        let _ = self.events.send(ConnectionEvent {
            node: self.node,
            kind,
        });
    }

    /// Counts a failure and schedules the next attempt.
    fn back_off(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let wait = self.backoff.after_failures(self.failures);
        let retry_at = Instant::now() + wait;
        self.retry_at = Some(retry_at);
        self.set_state(ConnectionState::BackingOff {
            retry_at,
            failures: self.failures,
        });
        wait
    }

    /// Fails `first` and everything queued behind it: every request that waited for the attempt
    /// that just failed.
    fn fail_queued(&mut self, first: Submit, error: &ClientError) -> usize {
        let mut failed = usize::from(respond(first.reply, Err(error.clone())));
        while let Ok(submit) = self.submits.try_recv() {
            failed += usize::from(respond(submit.reply, Err(error.clone())));
        }
        failed
    }

    fn connect_failed(&mut self, endpoint: &Endpoint, first: Submit, reason: String) {
        tracing::debug!(node = self.node, %endpoint, %reason, "connect failed");
        let error = ClientError::ConnectFailed {
            node: self.node,
            endpoint: endpoint.to_string(),
            reason: reason.clone(),
        };
        let requests_failed = self.fail_queued(first, &error);
        let retry_in = self.back_off();
        self.status
            .send_modify(|status| status.connect_failures += 1);
        self.emit(ConnectionEventKind::ConnectFailed {
            endpoint: endpoint.clone(),
            reason,
            requests_failed,
            retry_in,
        });
    }

    fn start_connection(
        &mut self,
        endpoint: Endpoint,
        stream: Stream,
        versions: PeerVersions,
        next_correlation_id: i32,
        renew_at: Option<Instant>,
    ) -> Connection {
        self.failures = 0;
        self.retry_at = None;
        let versions = Arc::new(versions);
        let (read_half, writer) = stream.split();
        let in_flight_max = self.config.in_flight_requests_max;
        let (expects_tx, expects_rx) = mpsc::channel(in_flight_max);
        // Room for a response to every request in flight plus the final failure, so the reader
        // never waits on us while we wait on a write: neither side can block the other.
        let (inbound_tx, inbound_rx) = mpsc::channel(in_flight_max + 1);
        let reader = tokio::spawn(read_responses(self.node, read_half, expects_rx, inbound_tx));
        tracing::debug!(node = self.node, %endpoint, "connected");
        self.status.send_modify(|status| {
            status.state = ConnectionState::Ready {
                endpoint: endpoint.clone(),
                versions: versions.clone(),
            };
            status.connections_opened += 1;
        });
        self.emit(ConnectionEventKind::Connected {
            endpoint: endpoint.clone(),
            versions: versions.clone(),
        });
        Connection {
            endpoint,
            versions,
            writer,
            reader,
            expects: expects_tx,
            inbound: inbound_rx,
            next_correlation_id,
            renew_at,
        }
    }

    /// Runs a connection until it closes; returns why.
    async fn serve(&mut self, mut connection: Connection, first: Submit) -> CloseReason {
        let in_flight_max = self.config.in_flight_requests_max;
        let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(in_flight_max);
        let mut next = Some(first);
        let mut last_activity = Instant::now();
        let mut head_error = None;
        let reason = loop {
            if let Some(submit) = next.take() {
                last_activity = Instant::now();
                match self.write(&mut connection, &mut in_flight, submit).await {
                    Ok(()) => continue,
                    Err(WriteError::ReaderStopped) => {
                        // Everything the reader read, its failure last, is queued already.
                        let (reason, head) = loop {
                            let inbound = connection.inbound.try_recv().ok();
                            if let Some(failed) = take_inbound(&mut in_flight, inbound) {
                                break failed;
                            }
                        };
                        head_error = head;
                        break reason;
                    }
                    Err(WriteError::Close(reason)) => break reason,
                }
            }
            let deadline = in_flight.iter().map(|request| request.deadline).min();
            let renewing = connection.renew_at.is_some_and(|at| Instant::now() >= at);
            let idle_at = last_activity
                .checked_add(self.config.connection_idle_max)
                .unwrap_or_else(far_future);
            tokio::select! {
                biased;
                inbound = connection.inbound.recv() => {
                    last_activity = Instant::now();
                    if let Some((reason, head)) = take_inbound(&mut in_flight, inbound) {
                        head_error = head;
                        break reason;
                    }
                }
                _ = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    let expired = in_flight.iter().find(|r| Some(r.deadline) == deadline);
                    break CloseReason::Timeout {
                        correlation_id: expired.map_or(-1, |r| r.correlation_id),
                    };
                }
                _ = sleep_until(idle_at), if in_flight.is_empty() => break CloseReason::Idle,
                // At the renewal time: renewed at once when nothing is in flight; otherwise no
                // more requests are taken (`renewing`) and it is renewed when the last is
                // answered. A renewal that fails closes the connection; the next one
                // authenticates afresh (or reports why it cannot).
                _ = sleep_until(connection.renew_at.unwrap_or_else(far_future)),
                    if connection.renew_at.is_some() && (!renewing || in_flight.is_empty()) =>
                {
                    if in_flight.is_empty() {
                        // A stop, disconnect or new endpoint during the renewal ends it at once
                        // rather than after the request timeout.
                        let endpoint = connection.endpoint.clone();
                        let renewed = tokio::select! {
                            renewed = renew_session(&self.config, &self.client_id, &mut connection) => renewed,
                            interrupt = next_interrupt(&mut self.control, &mut self.disconnects_seen, Some(&endpoint)) => {
                                break interrupt.close_reason();
                            }
                        };
                        match renewed {
                            Ok(renew_at) => {
                                connection.renew_at = renew_at;
                                last_activity = Instant::now();
                            }
                            Err(reason) => {
                                tracing::warn!(node = self.node, endpoint = %connection.endpoint, %reason, "SASL re-authentication failed; reconnecting");
                                break CloseReason::SessionRenewal;
                            }
                        }
                    }
                }
                interrupt = next_interrupt(&mut self.control, &mut self.disconnects_seen, Some(&connection.endpoint)) => {
                    break interrupt.close_reason();
                }
                submit = self.submits.recv(), if in_flight.len() < in_flight_max && !renewing => match submit {
                    Some(submit) => next = Some(submit),
                    None => break CloseReason::Shutdown,
                },
            }
        };
        self.close(connection, in_flight, &reason, head_error);
        reason
    }

    /// Writes one request. Requests that cannot go out at all (no common version, an encoding
    /// bug, withdrawn) are answered here and the connection stays up; an `Err` closes it.
    async fn write(
        &mut self,
        connection: &mut Connection,
        in_flight: &mut VecDeque<InFlight>,
        submit: Submit,
    ) -> Result<(), WriteError> {
        let Submit {
            api_key,
            ours,
            encode,
            decode,
            response_bytes_max,
            deadline,
            timeout,
            ticket,
            reply,
        } = submit;
        if deadline <= Instant::now() || reply.as_ref().is_some_and(|reply| reply.is_closed()) {
            // The caller has given up (it finds the ticket still queued and withdraws it), or a
            // fire-and-forget message went stale in the queue.
            tracing::debug!(
                node = self.node,
                ?api_key,
                "dropping a request past its deadline"
            );
            return Ok(());
        }
        let theirs = connection.versions.get(api_key);
        let Some(version) = pick_version(ours, theirs) else {
            let error = ClientError::NoCommonVersion {
                node: self.node,
                api_key,
                ours,
                theirs,
            };
            respond(reply, Err(error));
            return Ok(());
        };
        let correlation_id = connection.next_correlation_id;
        let (frame, answered) =
            match encode_request(api_key, version, correlation_id, &self.client_id, encode) {
                Ok(encoded) => encoded,
                Err(err) => {
                    let reason = format!("{err:#}");
                    respond(
                        reply,
                        Err(ClientError::Encode {
                            api_key,
                            version,
                            reason,
                        }),
                    );
                    return Ok(());
                }
            };
        if !answered && reply.is_some() {
            respond(reply, Err(ClientError::NoResponse { api_key }));
            return Ok(());
        }
        // The serve loop keeps fewer than `in_flight_max` requests in flight, so the only way
        // to find no room for the expectation is a reader that has stopped (the peer closed,
        // or sent what no request asked for): the request is then not sent.
        let expectation = match answered.then(|| connection.expects.try_reserve()) {
            None => None,
            Some(Ok(permit)) => Some(permit),
            Some(Err(_)) => {
                let reason = CloseReason::Io("response reader stopped".to_owned());
                let error = ClientError::Disconnected {
                    node: self.node,
                    sent: false,
                    reason,
                };
                respond(reply, Err(error));
                return Err(WriteError::ReaderStopped);
            }
        };
        if ticket.is_some_and(|ticket| !ticket.mark_sent()) {
            return Ok(());
        }
        connection.next_correlation_id = correlation_id.wrapping_add(1);
        if let Some(permit) = expectation {
            permit.send(Expect {
                correlation_id,
                api_key,
                version,
                bytes_max: response_bytes_max,
                decode,
            });
            in_flight.push_back(InFlight {
                correlation_id,
                api_key,
                version,
                deadline,
                timeout,
                reply,
            });
        }
        // A peer that stops reading must not hold the task past the request's deadline.
        // The flush hands TLS records to the socket; on plain TCP it returns at once.
        let writer = &mut connection.writer;
        let written = async move {
            writer.write_all(&frame).await?;
            writer.flush().await
        };
        match timeout_at(deadline, written).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(WriteError::Close(CloseReason::Io(err.to_string()))),
            Err(_) => Err(WriteError::Close(CloseReason::Timeout { correlation_id })),
        }
    }

    /// Closes a connection and fails what was in flight on it: requests past their deadline
    /// with a timeout, the request whose response broke the stream with that error, the rest as
    /// disconnected (they may have been sent).
    fn close(
        &mut self,
        connection: Connection,
        in_flight: VecDeque<InFlight>,
        reason: &CloseReason,
        mut head_error: Option<ClientError>,
    ) {
        connection.reader.abort();
        drop(connection.writer);
        let now = Instant::now();
        let mut requests_failed = 0;
        for request in in_flight {
            let error = if request.deadline <= now {
                ClientError::Timeout {
                    node: self.node,
                    api_key: request.api_key,
                    sent: true,
                    timeout: request.timeout,
                }
            } else if let Some(error) = head_error.take() {
                error
            } else {
                ClientError::Disconnected {
                    node: self.node,
                    sent: true,
                    reason: reason.clone(),
                }
            };
            requests_failed += usize::from(respond(request.reply, Err(error)));
        }
        tracing::debug!(node = self.node, endpoint = %connection.endpoint, %reason, requests_failed, "connection closed");
        let retry_in = if reason.is_voluntary() {
            self.set_state(ConnectionState::Idle);
            None
        } else {
            Some(self.back_off())
        };
        self.status
            .send_modify(|status| status.connections_closed += 1);
        self.emit(ConnectionEventKind::Closed {
            reason: reason.clone(),
            requests_failed,
            retry_in,
        });
    }

    /// Stops the task: what is still queued fails without having been sent.
    fn stop(mut self, first: Option<Submit>) {
        self.submits.close();
        if let Some(first) = first {
            respond(first.reply, Err(ClientError::Shutdown));
        }
        while let Ok(submit) = self.submits.try_recv() {
            respond(submit.reply, Err(ClientError::Shutdown));
        }
        self.set_state(ConnectionState::Removed);
    }
}

/// KIP-368: authenticates again on `connection`, nothing else in flight, within the request
/// timeout; gives when the new session must be renewed.
async fn renew_session(
    config: &ClientConfig,
    client_id: &StrBytes,
    connection: &mut Connection,
) -> Result<Option<Instant>, String> {
    let Some(credentials) = config.security.as_ref().and_then(|s| s.sasl.as_ref()) else {
        return Ok(None);
    };
    let mut exchange = Pipelined {
        connection,
        client_id,
    };
    match timeout(
        config.request_timeout,
        reauthenticate(&mut exchange, credentials),
    )
    .await
    {
        Ok(renewed) => renewed.map(|at| at.map(Instant::from_std)),
        Err(_) => Err(format!("not done within {:?}", config.request_timeout)),
    }
}

/// A SASL exchange on an open connection: each request is written by the serve loop and its
/// response read by the connection's reader, nothing else in flight.
struct Pipelined<'a> {
    connection: &'a mut Connection,
    client_id: &'a StrBytes,
}

impl Exchange for Pipelined<'_> {
    async fn round_trip(
        &mut self,
        api_key: ApiKey,
        version: i16,
        encode: EncodeFn,
        bytes_max: usize,
    ) -> Result<Bytes, String> {
        let connection = &mut *self.connection;
        let correlation_id = connection.next_correlation_id;
        let (frame, _) = encode_request(api_key, version, correlation_id, self.client_id, encode)
            .map_err(|err| format!("{err:#}"))?;
        connection.next_correlation_id = correlation_id.wrapping_add(1);
        let raw: DecodeFn = Box::new(|body, _| Ok(Box::new(body) as AnyBody));
        connection
            .expects
            .try_send(Expect {
                correlation_id,
                api_key,
                version,
                bytes_max,
                decode: Some(raw),
            })
            .map_err(|_| "the response reader stopped".to_owned())?;
        connection
            .writer
            .write_all(&frame)
            .await
            .map_err(|err| err.to_string())?;
        connection
            .writer
            .flush()
            .await
            .map_err(|err| err.to_string())?;
        match connection.inbound.recv().await {
            Some(Inbound::Response {
                body: Some(body), ..
            }) => body
                .downcast::<Bytes>()
                .map(|body| *body)
                .map_err(|_| format!("{api_key:?}: an unexpected response body")),
            Some(Inbound::Response { body: None, .. }) => {
                Err(format!("{api_key:?}: a response without a body"))
            }
            Some(Inbound::Failed { reason, .. }) => Err(reason.to_string()),
            None => Err("the response reader stopped".to_owned()),
        }
    }
}

/// Why a request could not be written.
enum WriteError {
    /// The connection must close for this reason.
    Close(CloseReason),
    /// The response reader has stopped; its reason is in the inbound queue.
    ReaderStopped,
}

/// Applies one message from the reader: a response answers the oldest request in flight; a
/// failure (or a reader gone without one) is returned as the reason to close.
fn take_inbound(
    in_flight: &mut VecDeque<InFlight>,
    inbound: Option<Inbound>,
) -> Option<(CloseReason, Option<ClientError>)> {
    match inbound {
        Some(Inbound::Response {
            correlation_id,
            body,
        }) => {
            let request = in_flight
                .pop_front()
                .expect("a response answers a request in flight");
            assert_eq!(
                request.correlation_id, correlation_id,
                "the reader checks correlation ids"
            );
            if let (Some(reply), Some(body)) = (request.reply, body) {
                let _ = reply.send(Ok(Reply {
                    version: request.version,
                    body,
                }));
            }
            None
        }
        Some(Inbound::Failed { reason, head }) => Some((reason, head)),
        None => Some((CloseReason::Io("response reader stopped".to_owned()), None)),
    }
}

/// Answers a caller, if one waits. Returns whether one did.
fn respond(
    reply: Option<oneshot::Sender<Result<Reply, ClientError>>>,
    result: Result<Reply, ClientError>,
) -> bool {
    reply.is_some_and(|reply| reply.send(result).is_ok())
}

/// An instant far enough away to mean "never".
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Waits until the client asks for something: stop, disconnect, or an endpoint other than
/// `current` (the one connected or being connected to; with `None`, any new endpoint).
async fn next_interrupt(
    control: &mut watch::Receiver<Control>,
    disconnects_seen: &mut u64,
    current: Option<&Endpoint>,
) -> Interrupt {
    loop {
        if control.changed().await.is_err() {
            return Interrupt::Stop;
        }
        let control = control.borrow_and_update();
        if control.removed {
            return Interrupt::Stop;
        }
        if control.disconnects != *disconnects_seen {
            *disconnects_seen = control.disconnects;
            return Interrupt::Disconnect;
        }
        match (current, &control.endpoint) {
            (Some(current), Some(endpoint)) if endpoint != current => {
                return Interrupt::EndpointChanged
            }
            (None, _) => return Interrupt::EndpointChanged,
            _ => {}
        }
    }
}

/// Connects to `endpoint`, secures the connection as `config.security` says (TLS, SASL) and
/// negotiates versions. Returns the stream, the peer's versions and the next correlation id.
async fn open(
    node: NodeId,
    endpoint: &Endpoint,
    config: &ClientConfig,
    client_id: &StrBytes,
) -> Result<(Stream, PeerVersions, i32, Option<Instant>), String> {
    let connect = TcpStream::connect((endpoint.host.as_str(), endpoint.port));
    let stream = match timeout(config.connect_timeout, connect).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(err)) => return Err(err.to_string()),
        Err(_) => {
            return Err(format!(
                "connect timed out after {:?}",
                config.connect_timeout
            ))
        }
    };
    // Requests are written whole; do not let Nagle hold back a small one.
    stream.set_nodelay(true).map_err(|err| err.to_string())?;
    let security = config.security.as_deref();
    let handshake = async {
        let mut stream = start_tls(stream, endpoint, security).await?;
        let mut correlation_id = 0;
        let versions = negotiate(&mut stream, client_id, &mut correlation_id).await?;
        let mut renew_at = None;
        if let Some(credentials) = security.and_then(|s| s.sasl.as_ref()) {
            let mut exchange = Direct {
                stream: &mut stream,
                client_id,
                correlation_id: &mut correlation_id,
            };
            renew_at = reauthenticate(&mut exchange, credentials)
                .await
                .map_err(|reason| {
                    let reason = format!(
                        "SASL authentication to broker {node} failed ({} as {}): {reason}",
                        credentials.mechanism.name(),
                        credentials.username
                    );
                    tracing::warn!("{reason}");
                    reason
                })?
                .map(Instant::from_std);
        }
        Ok::<_, String>((stream, versions, correlation_id, renew_at))
    };
    match timeout(config.request_timeout, handshake).await {
        Ok(result) => result,
        Err(_) if security.is_some() => Err(format!(
            "the TLS handshake, ApiVersions and SASL authentication not done within {:?}",
            config.request_timeout
        )),
        Err(_) => Err(format!(
            "no ApiVersions response within {:?}",
            config.request_timeout
        )),
    }
}

/// The ApiVersions exchange that opens every connection. Each retry asks at a lower version, so
/// it ends after at most `API_VERSIONS_VERSION_MAX + 1` round trips.
async fn negotiate(
    stream: &mut Stream,
    client_id: &StrBytes,
    correlation_id: &mut i32,
) -> Result<PeerVersions, String> {
    let mut version = API_VERSIONS_VERSION_MAX;
    loop {
        let request = api_versions_request(version);
        let encode: EncodeFn = Box::new(move |version, buf| {
            ApiVersionsRequest::encode(&request, buf, version).map(|()| true)
        });
        let body = round_trip(
            stream,
            client_id,
            correlation_id,
            ApiKey::ApiVersions,
            version,
            encode,
            CLIENT_API_VERSIONS_RESPONSE_BYTES_MAX,
        )
        .await?;
        match after_api_versions(version, body) {
            Negotiation::Done(versions) => return Ok(versions),
            Negotiation::Retry(lower) => {
                debug_assert!(lower < version);
                version = lower;
            }
            Negotiation::Failed(reason) => return Err(reason),
        }
    }
}

/// The reader task: one response frame per request in flight, in order.
async fn read_responses(
    node: NodeId,
    mut reader: ReadHalf,
    mut expects: mpsc::Receiver<Expect>,
    inbound: mpsc::Sender<Inbound>,
) {
    let (reason, head) = loop {
        let size = match read_size(&mut reader).await {
            Ok(Some(size)) => size,
            Ok(None) => break (CloseReason::PeerClosed, None),
            Err(FrameError::Truncated) => break (CloseReason::PeerClosed, None),
            Err(FrameError::Io(err)) => break (CloseReason::Io(err.to_string()), None),
        };
        // The request is queued here before it is written, so its response cannot come first.
        let Ok(expect) = expects.try_recv() else {
            break (CloseReason::Unsolicited, None);
        };
        if size < 0 || size as usize > expect.bytes_max {
            let (size, max) = (i64::from(size), expect.bytes_max);
            let error = ClientError::FrameTooLarge { node, size, max };
            break (CloseReason::FrameTooLarge { size, max }, Some(error));
        }
        let frame = match read_body(&mut reader, size as usize).await {
            Ok(frame) => frame,
            Err(FrameError::Truncated) => break (CloseReason::PeerClosed, None),
            Err(FrameError::Io(err)) => break (CloseReason::Io(err.to_string()), None),
        };
        let decode_error = |reason: String| {
            let error = ClientError::Decode {
                node,
                api_key: expect.api_key,
                version: expect.version,
                reason: reason.clone(),
            };
            (CloseReason::Decode(reason), Some(error))
        };
        let (correlation_id, body) = match split_response(frame, expect.api_key, expect.version) {
            Ok(split) => split,
            Err(reason) => break decode_error(reason),
        };
        if correlation_id != expect.correlation_id {
            let reason = CloseReason::CorrelationMismatch {
                expected: expect.correlation_id,
                received: correlation_id,
            };
            break (reason, None);
        }
        let body = match expect.decode {
            Some(decode) => match decode(body, expect.version) {
                Ok(body) => Some(body),
                Err(reason) => break decode_error(reason),
            },
            None => match check_response_body(expect.api_key, expect.version, &body) {
                Ok(()) => None,
                Err(reason) => break decode_error(reason),
            },
        };
        let response = Inbound::Response {
            correlation_id,
            body,
        };
        if inbound.send(response).await.is_err() {
            return;
        }
    };
    let _ = inbound.send(Inbound::Failed { reason, head }).await;
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest};
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::super::{ConnectionState, ConnectionStatus};
    use super::*;

    /// A task serving node 1 with `config`, and the ends that drive it.
    fn task(
        config: ClientConfig,
    ) -> (
        DestinationTask,
        mpsc::Sender<Submit>,
        watch::Sender<Control>,
    ) {
        let (submits_tx, submits) = mpsc::channel(4);
        let (control_tx, control) = watch::channel(Control::default());
        let (status, _) = watch::channel(ConnectionStatus {
            state: ConnectionState::Idle,
            connections_opened: 0,
            connections_closed: 0,
            connect_failures: 0,
        });
        let task = DestinationTask {
            node: 1,
            config: Arc::new(config),
            client_id: StrBytes::from_static_str("test"),
            resolver: None,
            submits,
            control,
            status,
            events: broadcast::channel(4).0,
            backoff: ReconnectBackoff::new(Duration::from_millis(1), Duration::from_millis(1), 1),
            failures: 0,
            retry_at: None,
            disconnects_seen: 0,
        };
        (task, submits_tx, control_tx)
    }

    /// An open connection on `stream` to a peer that offers Metadata v0-12, whose reader is
    /// played by the test through `expects` and `inbound`.
    fn connection(
        stream: TcpStream,
        expects: mpsc::Sender<Expect>,
        inbound: mpsc::Receiver<Inbound>,
        renew_at: Option<Instant>,
    ) -> Connection {
        let metadata = ApiVersion::default()
            .with_api_key(ApiKey::Metadata as i16)
            .with_max_version(12);
        let versions = PeerVersions::from_response(
            &ApiVersionsResponse::default().with_api_keys(vec![metadata]),
            3,
        );
        let endpoint = stream.peer_addr().unwrap().into();
        let (_read_half, writer) = Stream::Plain(stream).split();
        Connection {
            endpoint,
            versions: Arc::new(versions),
            writer,
            reader: tokio::spawn(async {}),
            expects,
            inbound,
            next_correlation_id: 1,
            renew_at,
        }
    }

    /// A Metadata request due by `deadline`, and where its answer goes.
    fn metadata_submit(
        deadline: Instant,
    ) -> (Submit, oneshot::Receiver<Result<Reply, ClientError>>) {
        let (reply, replied) = oneshot::channel();
        let ours = super::super::versions::our_versions(ApiKey::Metadata, (0, 12), None).unwrap();
        let submit = Submit {
            api_key: ApiKey::Metadata,
            ours,
            encode: Box::new(|version, buf| {
                MetadataRequest::default().encode(buf, version)?;
                Ok(true)
            }),
            decode: Some(Box::new(|_, _| Err("never read".to_owned()))),
            response_bytes_max: 1 << 20,
            deadline,
            timeout: Duration::from_secs(10),
            ticket: None,
            reply: Some(reply),
        };
        (submit, replied)
    }

    /// The reader stops (here: the peer closed) after the serve loop has taken a request and
    /// before it is written. The request is refused as not sent, whatever the reader read is
    /// applied, and the connection closes for the reader's reason.
    #[tokio::test]
    async fn a_request_taken_as_the_reader_stops_is_not_sent_and_the_connection_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (_peer, _) = listener.accept().await.unwrap();
        let (mut task, _submits, _control) = task(ClientConfig::default());

        // The reader as it is once it has stopped: its receiver of expectations dropped, its
        // failure queued.
        let (expects, expects_rx) = mpsc::channel(1);
        drop(expects_rx);
        let (inbound_tx, inbound) = mpsc::channel(2);
        inbound_tx
            .try_send(Inbound::Failed {
                reason: CloseReason::PeerClosed,
                head: None,
            })
            .unwrap_or_else(|_| unreachable!());
        let connection = connection(stream, expects, inbound, None);
        let (submit, replied) = metadata_submit(Instant::now() + Duration::from_secs(10));

        let reason = task.serve(connection, submit).await;
        assert_eq!(reason, CloseReason::PeerClosed);
        match replied.await.unwrap() {
            Err(ClientError::Disconnected { sent: false, .. }) => {}
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("answered"),
        }
    }

    /// KIP-368: a stop while a session is being renewed closes the connection at once, rather
    /// than when the renewal gives up at the request timeout. Here the peer never answers the
    /// renewal's SaslHandshake.
    #[tokio::test]
    async fn a_stop_during_a_session_renewal_closes_the_connection_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut peer, _) = listener.accept().await.unwrap();
        let security = crate::security::ClientSecurity {
            listener: "SASL_PLAINTEXT".to_owned(),
            protocol: "SASL_PLAINTEXT",
            tls: None,
            sasl: Some(crate::security::SaslCredentials {
                mechanism: crate::security::Mechanism::Plain,
                username: "broker".to_owned(),
                password: "broker-secret".to_owned(),
            }),
        };
        let (mut task, _submits, control) = task(ClientConfig {
            request_timeout: Duration::from_secs(120),
            security: Some(Arc::new(security)),
            ..ClientConfig::default()
        });
        // The reader stays up and never has an answer.
        let (expects, _expects_rx) = mpsc::channel(4);
        let (_inbound_tx, inbound) = mpsc::channel(4);
        let connection = connection(stream, expects, inbound, Some(Instant::now()));
        // The first request is past its deadline and dropped; the session is due for renewal.
        let (submit, _replied) = metadata_submit(Instant::now());
        let serving = tokio::spawn(async move { task.serve(connection, submit).await });

        let mut size = [0u8; 4];
        timeout(Duration::from_secs(10), peer.read_exact(&mut size))
            .await
            .expect("the renewal's SaslHandshake")
            .unwrap();
        let mut request = vec![0u8; u32::from_be_bytes(size) as usize];
        peer.read_exact(&mut request).await.unwrap();
        assert_eq!(
            i16::from_be_bytes([request[0], request[1]]),
            ApiKey::SaslHandshake as i16
        );
        control.send_modify(|control| control.removed = true);
        let reason = timeout(Duration::from_secs(10), serving)
            .await
            .expect("the stop to end the renewal")
            .unwrap();
        assert_eq!(reason, CloseReason::Shutdown);
    }
}
