//! One client connection: frames in, responses out, in request order.
//!
//! A reader task reads size-prefixed frames and queues up to
//! `IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX` of them, holding at most `socket.request.max.bytes`
//! of queued frames (pipelining with bounded memory); the processing loop handles them
//! one at a time and writes each response before taking the next frame. Handling requests of one
//! connection one by one is what Kafka does (a channel is muted while a request is in flight) and
//! what idempotent producers rely on: batches of one producer arrive in sequence order and must
//! be appended in that order.
//!
//! `connections.max.idle.ms` covers both directions, as Kafka's selector does (a channel is
//! active while bytes move either way): no frame read for that long closes the connection, and
//! so does an answer of which no byte could be written for that long — a client that sends
//! requests and never reads its answers would otherwise pin the connection, its queued
//! requests and an answer in memory forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use std::sync::atomic::{AtomicBool, Ordering};

use super::{controller_dispatch, dispatch, sasl, ConnectionInfo, ListenerKind};
use crate::config::security::SaslSettings;
use crate::context::Context;
use crate::limits::{IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX, RAFT_FRAME_BYTES_MAX};
use crate::protocol::frame::ResponseFrame;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error(
        "frame size {size} is outside 0..={max} (socket.request.max.bytes, or the API's bound)"
    )]
    BadSize { size: i32, max: usize },
    #[error("connection closed inside a frame")]
    Truncated,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The largest frame body whose buffer is reserved whole as soon as its size is read: a
/// produce request of Kafka's default `max.request.size` (1 MiB) is then read into one buffer
/// without being copied as it grows. Reserving commits no memory until bytes arrive.
const FRAME_RESERVED_BYTES_MAX: usize = 1 << 20;

/// Reads one frame body. `Ok(None)` on a clean end of stream between frames.
///
/// The size is checked against `max_bytes` before anything is allocated, and a body buffer
/// larger than [`FRAME_RESERVED_BYTES_MAX`] grows only as bytes actually arrive, so a client
/// claiming a large frame and sending little costs little.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: usize,
) -> Result<Option<Bytes>, FrameError> {
    read_frame_per_api(reader, || max_bytes, |_| max_bytes).await
}

/// As [`read_frame`], and once the request's API key (the body's first two bytes) has arrived,
/// the size is checked against `max_for_api(key)` too, before the rest is read. Both bounds are
/// asked for when their bytes have arrived, not before the wait for them.
pub async fn read_frame_per_api<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: impl Fn() -> usize,
    max_for_api: impl Fn(i16) -> usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut size = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        let n = reader.read(&mut size[filled..]).await?;
        if n == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated)
            };
        }
        filled += n;
    }
    let size = i32::from_be_bytes(size);
    let max_bytes = max_bytes();
    if size < 0 || size as usize > max_bytes {
        return Err(FrameError::BadSize {
            size,
            max: max_bytes,
        });
    }
    let size = size as usize;
    let mut body = Vec::with_capacity(2);
    let key_bytes = size.min(2);
    let read = reader.take(key_bytes as u64).read_to_end(&mut body).await?;
    if read < key_bytes {
        return Err(FrameError::Truncated);
    }
    if key_bytes == 2 {
        let api_max = max_for_api(i16::from_be_bytes([body[0], body[1]]));
        if size > api_max {
            return Err(FrameError::BadSize {
                size: size as i32,
                max: api_max,
            });
        }
    }
    let rest = size - key_bytes;
    // Reserved once the size has passed the API's bound too.
    body.reserve(size.min(FRAME_RESERVED_BYTES_MAX) - key_bytes);
    let read = reader.take(rest as u64).read_to_end(&mut body).await?;
    if read < rest {
        return Err(FrameError::Truncated);
    }
    Ok(Some(Bytes::from(body)))
}

/// Writes all of `bytes` and flushes them, failing with `TimedOut` once no byte could be
/// written for `idle` (the peer stopped reading). A slow reader that keeps taking bytes is never
/// cut off.
///
/// The flush matters on TLS: a write counts the bytes the TLS layer took in, and when the socket
/// is full their end may still wait in its buffer; unflushed, the end of an answer would stay
/// there until the next answer, and a client waiting for it would send nothing more.
pub async fn write_unless_stuck<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
    idle: Duration,
) -> std::io::Result<()> {
    write_chunks_unless_stuck(writer, &[bytes], idle).await
}

/// [`write_unless_stuck`] of `chunks` one after the other (a frame of
/// [`crate::protocol::frame`]), with vectored writes: a TLS stream encrypts them into the same
/// records as if they were one buffer, and a plaintext socket takes several in one system call.
pub async fn write_chunks_unless_stuck<W: AsyncWrite + Unpin, C: AsRef<[u8]>>(
    writer: &mut W,
    chunks: &[C],
    idle: Duration,
) -> std::io::Result<()> {
    /// Chunks offered to one vectored write (a Fetch answer has two per large record set).
    const CHUNKS_PER_WRITE_MAX: usize = 64;
    let stuck = |_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client read nothing for connections.max.idle.ms",
        )
    };
    // The next byte to write: chunk `first`, from `offset`.
    let (mut first, mut offset) = (0, 0);
    loop {
        while chunks
            .get(first)
            .is_some_and(|c| c.as_ref().len() == offset)
        {
            first += 1;
            offset = 0;
        }
        if first == chunks.len() {
            break;
        }
        let mut slices = [std::io::IoSlice::new(&[]); CHUNKS_PER_WRITE_MAX];
        let mut offered = 0;
        let mut n = 0;
        for chunk in chunks[first..].iter().take(CHUNKS_PER_WRITE_MAX) {
            let from = if n == 0 { offset } else { 0 };
            slices[n] = std::io::IoSlice::new(&chunk.as_ref()[from..]);
            offered += slices[n].len();
            n += 1;
        }
        let written = tokio::time::timeout(idle, writer.write_vectored(&slices[..n]))
            .await
            .map_err(stuck)??;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        if written > offered {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a write took more bytes than it was given",
            ));
        }
        let mut left = written;
        while first < chunks.len() {
            let rest = chunks[first].as_ref().len() - offset;
            if left < rest {
                offset += left;
                break;
            }
            left -= rest;
            first += 1;
            offset = 0;
        }
    }
    tokio::time::timeout(idle, writer.flush())
        .await
        .map_err(stuck)?
}

/// Serves one connection: a TCP stream, or the TLS stream over one — the same code for both.
/// `sasl` is the listener's SASL settings when it is SASL_PLAINTEXT or SASL_SSL: the
/// connection authenticates first.
pub async fn run<S>(
    stream: S,
    info: ConnectionInfo,
    sasl: Option<Arc<SaslSettings>>,
    ctx: Arc<Context>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let peer = info.peer;
    tracing::debug!(%peer, listener = ?info.listener, principal = %info.principal, "connection opened");
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut info = info;
    // A SASL listener's connection authenticates first ([`sasl`]); until it has, frames are
    // bounded by `sasl.server.max.receive.size`.
    let pre_auth_max = sasl.as_ref().map_or(usize::MAX, |s| s.max_receive_size);
    // `connection.failed.authentication.delay.ms`: a refused client waits before the close.
    let failed_delay_ms = sasl
        .as_ref()
        .map_or(0, |s| s.failed_authentication_delay_ms);
    // On the controller listener too: no Raft frame, metadata log fetch or controller API is
    // read before authentication (the authenticator closes on anything but ApiVersions and the
    // SASL exchange).
    let mut authenticator = sasl.map(|settings| {
        let cache = ctx.cache.clone();
        let stored: sasl::ScramCredentialsLookup = Arc::new(move |mechanism, user| {
            sasl::StoredCredential::of(&cache.image(), mechanism, user)
        });
        sasl::Authenticator::new(settings, Some(stored))
    });
    let authenticated = Arc::new(AtomicBool::new(authenticator.is_none()));
    let reader_authenticated = authenticated.clone();
    let (tx, mut rx) = mpsc::channel::<(Bytes, OwnedSemaphorePermit, Instant)>(
        IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX,
    );
    let max_bytes = match info.listener {
        ListenerKind::Client => ctx.config.socket.request_max_bytes,
        // The largest of the per-API bounds (`controller_dispatch::frame_max_bytes`); a
        // snapshot for a voter far behind comes in chunks.
        ListenerKind::Controller => ctx
            .config
            .socket
            .request_max_bytes
            .max(RAFT_FRAME_BYTES_MAX),
    };
    let config = ctx.config.clone();
    let listener = info.listener;
    let max_for_api = move |api_key: i16| match listener {
        ListenerKind::Client => max_bytes,
        ListenerKind::Controller => controller_dispatch::frame_max_bytes(&config, api_key),
    };
    let idle = Duration::from_millis(ctx.config.socket.connections_max_idle_ms);
    // Bytes of frames read but not yet handled are bounded by one maximal frame, so pipelining
    // never holds more than about twice `socket.request.max.bytes` per connection.
    let queued_bytes = Arc::new(Semaphore::new(max_bytes.min(u32::MAX as usize)));

    // The reader is a task of its own. In the connection's task, a frame handed to a waiting
    // processing loop would wake the task that is running: the runtime then queues it again
    // as if it had yielded and wakes an idle worker to steal it, a thread wake-up per request
    // for nothing. Woken from another task, it runs next on the same worker instead.
    let read_loop = async move {
        loop {
            // Whether the connection is authenticated is read when the frame's size has
            // arrived, not before the wait for it: the first frame after an authentication
            // (or a KIP-368 re-authentication) is awaited while the exchange's last answer is
            // on its way, and must get the authenticated bound. The server marks the
            // connection authenticated before it writes that answer.
            let bound = || {
                if reader_authenticated.load(Ordering::Acquire) {
                    max_bytes
                } else {
                    max_bytes.min(pre_auth_max)
                }
            };
            let frame = read_frame_per_api(&mut reader, bound, |key| max_for_api(key).min(bound()));
            match tokio::time::timeout(idle, frame).await {
                Err(_) => {
                    tracing::debug!(%peer, "closing idle connection (connections.max.idle.ms)");
                    break;
                }
                Ok(Ok(Some(frame))) => {
                    let Ok(permit) = queued_bytes
                        .clone()
                        .acquire_many_owned(frame.len() as u32)
                        .await
                    else {
                        break;
                    };
                    if tx.send((frame, permit, Instant::now())).await.is_err() {
                        break;
                    }
                }
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    tracing::info!(%peer, error = %e, "closing connection: bad frame");
                    break;
                }
            }
        }
    };

    let closing_ctx = ctx.clone();
    let closing_info = info.clone();
    let process_loop = async move {
        while let Some((frame, permit, read_at)) = rx.recv().await {
            // The request header starts with the API key; Produce is key 0, SaslHandshake 17.
            if let Some(auth) = authenticator.as_mut().filter(|a| a.is_complete()) {
                let now = Instant::now();
                if frame.starts_with(&[0, 17]) && auth.begin_reauthentication(now) {
                    tracing::debug!(%peer, "re-authenticating");
                    authenticated.store(false, Ordering::Release);
                } else if auth.session_expired(now) {
                    // KIP-368: as Kafka, the first request after the session's end closes the
                    // connection unanswered.
                    tracing::info!(%peer, principal = %info.principal, "closing connection: SASL session expired");
                    ctx.authentication_stats.expired_connection_killed();
                    break;
                }
            }
            if let Some(auth) = authenticator.as_mut().filter(|a| !a.is_complete()) {
                let mechanism = auth.mechanism();
                let reauthenticating = auth.is_reauthenticating();
                let step = auth.handle(frame.clone());
                let listener = &*info.listener_name;
                let stats = &ctx.authentication_stats;
                match (&step, mechanism) {
                    (sasl::Step::Authenticated { .. }, Some(m)) => {
                        stats.succeeded(listener, m, reauthenticating)
                    }
                    (sasl::Step::Fail { .. }, Some(m)) => {
                        stats.failed(listener, m, reauthenticating)
                    }
                    _ => {}
                }
                drop(permit);
                let response = match step {
                    sasl::Step::Dispatch => None,
                    sasl::Step::Reply(response) => Some(response),
                    sasl::Step::Authenticated {
                        response,
                        principal,
                    } => {
                        tracing::debug!(%peer, %principal, "authenticated");
                        info.principal = principal;
                        authenticated.store(true, Ordering::Release);
                        Some(response)
                    }
                    sasl::Step::Fail { response, reason } => {
                        // The reason names the user at most, never a password.
                        tracing::info!(%peer, %reason, "closing connection: authentication failed");
                        if let Some(response) = response {
                            let _ = write_unless_stuck(&mut writer, &response, idle).await;
                        }
                        tokio::time::sleep(Duration::from_millis(failed_delay_ms)).await;
                        break;
                    }
                    sasl::Step::Close(reason) => {
                        tracing::info!(%peer, %reason, "closing connection");
                        break;
                    }
                };
                let response = match response {
                    Some(r) => r,
                    // ApiVersions before authentication: the listener's normal handler.
                    None => {
                        let answered = match info.listener {
                            ListenerKind::Client => dispatch::handle_frame(
                                &ctx,
                                frame,
                                peer,
                                &info.principal,
                                &info.listener_name,
                            )
                            .await
                            .map(|r| r.map(ResponseFrame::into_bytes)),
                            ListenerKind::Controller => {
                                controller_dispatch::handle_frame(&ctx, frame, &info).await
                            }
                        };
                        match answered {
                            Ok(Some(r)) => r,
                            Ok(None) => continue,
                            Err(e) => {
                                tracing::info!(%peer, error = %e, "closing connection");
                                break;
                            }
                        }
                    }
                };
                if let Err(e) = write_unless_stuck(&mut writer, &response, idle).await {
                    tracing::debug!(%peer, error = %e, "closing connection: write failed");
                    break;
                }
                continue;
            }
            let produce = info.listener == ListenerKind::Client && frame.starts_with(&[0, 0]);
            if produce {
                ctx.request_stats.produce_stage("queue", read_at.elapsed());
            }
            let outcome = match info.listener {
                ListenerKind::Client => {
                    dispatch::handle_frame(&ctx, frame, peer, &info.principal, &info.listener_name)
                        .await
                }
                ListenerKind::Controller => controller_dispatch::handle_frame(&ctx, frame, &info)
                    .await
                    .map(|r| r.map(ResponseFrame::from)),
            };
            drop(permit);
            match outcome {
                Ok(Some(response)) => {
                    let writing = Instant::now();
                    if let Err(e) =
                        write_chunks_unless_stuck(&mut writer, response.chunks(), idle).await
                    {
                        tracing::debug!(%peer, error = %e, "closing connection: write failed");
                        break;
                    }
                    if produce {
                        ctx.request_stats.produce_stage("write", writing.elapsed());
                        ctx.request_stats.produce_stage("total", read_at.elapsed());
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::info!(%peer, error = %e, "closing connection");
                    break;
                }
            }
        }
        // Bounded like a write: a TLS shutdown sends what is buffered and close_notify first,
        // and a client that stopped reading must not keep the connection (and its slot).
        let _ = tokio::time::timeout(idle, writer.shutdown()).await;
    };

    // Reading stopped (end of stream, idle, bad frame): the channel closes once the frames
    // already read are answered. Processing stopped (bad request or write error), or this
    // task was aborted: the reader is aborted too.
    let reader = AbortOnDrop(tokio::spawn(read_loop));
    process_loop.await;
    // The reader's half of the socket is dropped before this returns, and so before the
    // connection's `max.connections` slot is released.
    reader.stop().await;
    if closing_info.listener == ListenerKind::Controller {
        closing_ctx.controller.connection_closed(closing_info.id);
    }
    tracing::debug!(%peer, "connection closed");
}

/// A spawned task that ends when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Aborts the task and waits until it has ended (what it owned is dropped).
    async fn stop(mut self) {
        self.0.abort();
        let _ = (&mut self.0).await;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that, like a TLS stream over a full socket, takes bytes in and passes them on
    /// only when flushed.
    #[derive(Default)]
    struct HoldsUntilFlushed {
        held: Vec<u8>,
        sent: Vec<u8>,
    }

    impl AsyncWrite for HoldsUntilFlushed {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(3);
            self.held.extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let held = std::mem::take(&mut self.held);
            self.sent.extend_from_slice(&held);
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.poll_flush(cx)
        }
    }

    #[tokio::test]
    async fn an_answer_is_flushed_whole() {
        let mut writer = HoldsUntilFlushed::default();
        write_unless_stuck(&mut writer, b"a whole answer", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(writer.sent, b"a whole answer");
        assert!(writer.held.is_empty());
    }

    /// A writer that takes vectored writes, at most `max` bytes each, across buffers.
    struct Vectored {
        max: usize,
        out: Vec<u8>,
        writes: usize,
    }

    impl AsyncWrite for Vectored {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.poll_write_vectored(cx, &[std::io::IoSlice::new(buf)])
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut taken = 0;
            for b in bufs {
                let n = b.len().min(self.max - taken);
                self.out.extend_from_slice(&b[..n]);
                taken += n;
                if taken == self.max {
                    break;
                }
            }
            self.writes += 1;
            std::task::Poll::Ready(Ok(taken))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn chunks_are_written_in_order_whatever_each_write_takes() {
        let chunks: Vec<&[u8]> = vec![b"head", b"", b"records-one", b"mid", b"records-two", b"t"];
        let whole: Vec<u8> = chunks.concat();
        for max in [1, 2, 5, 7, 14, 15, 100] {
            let mut writer = Vectored {
                max,
                out: Vec::new(),
                writes: 0,
            };
            write_chunks_unless_stuck(&mut writer, &chunks, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(writer.out, whole, "at most {max} bytes a write");
            assert_eq!(writer.writes, whole.len().div_ceil(max), "at most {max}");
        }
        // A writer without vectored writes gets one chunk (or its rest) at a time.
        let mut writer = HoldsUntilFlushed::default();
        write_chunks_unless_stuck(&mut writer, &chunks, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(writer.sent, whole);
    }

    #[tokio::test]
    async fn frame_size_is_checked_before_reading_the_body() {
        let mut input: &[u8] = &[0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
        let err = read_frame(&mut input, 1024).await.unwrap_err();
        assert!(matches!(err, FrameError::BadSize { .. }));
        let mut input: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut input, 1024).await.unwrap_err(),
            FrameError::BadSize { .. }
        ));
        let mut input: &[u8] = &[0, 0, 0, 3, 1, 2];
        assert!(matches!(
            read_frame(&mut input, 1024).await.unwrap_err(),
            FrameError::Truncated
        ));
        let mut input: &[u8] = &[0, 0, 0, 2, 7, 8, 0, 0, 0, 0];
        assert_eq!(
            read_frame(&mut input, 1024).await.unwrap().unwrap(),
            Bytes::from_static(&[7, 8])
        );
        assert_eq!(
            read_frame(&mut input, 1024).await.unwrap().unwrap(),
            Bytes::new()
        );
        assert!(read_frame(&mut input, 1024).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_frame_past_its_apis_bound_is_refused_once_the_key_arrives() {
        let bound = |key: i16| if key == 7 { 1024 } else { 16 };
        // Key 5, 100 bytes claimed, only the key sent: refused without waiting for the body.
        let mut input: &[u8] = &[0, 0, 0, 100, 0, 5];
        assert!(matches!(
            read_frame_per_api(&mut input, || 1024, bound)
                .await
                .unwrap_err(),
            FrameError::BadSize { size: 100, max: 16 }
        ));
        let mut frame = vec![0, 0, 0, 100, 0, 7];
        frame.extend_from_slice(&[9; 98]);
        let mut input: &[u8] = &frame;
        let body = read_frame_per_api(&mut input, || 1024, bound)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((body.len(), &body[..3]), (100, &[0u8, 7, 9][..]));
        let mut input: &[u8] = &[0, 0, 0, 1, 0xff];
        assert_eq!(
            read_frame_per_api(&mut input, || 1024, bound)
                .await
                .unwrap()
                .unwrap(),
            Bytes::from_static(&[0xff])
        );
    }
}
