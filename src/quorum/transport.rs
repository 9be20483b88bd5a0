//! The Raft transport: one outbound connection per peer voter, to its controller listener,
//! carrying Raft messages one way ([`super::wire`] frames; the receiver sends nothing back —
//! the peer's answers travel on its own connection to us).
//!
//! Each peer has a task that owns its connection and a bounded queue. A message that finds the
//! queue full is dropped (Raft resends what matters) and the peer is reported unreachable, so
//! the library stops pipelining to it. A connection that fails is reopened after a backoff
//! (50 ms doubling to 1 s); the messages it was carrying are lost, and the library is told. A
//! connection the peer closes (its process ended) is dropped at once and reopened for the next
//! message, so the first message to a restarted peer is not lost in the old connection. A
//! snapshot's fate is always reported — delivered once written, failed if its connection
//! failed — because until it is, the leader sends that peer nothing more.
//!
//! It has its own sockets (beside `server` and `client`): the inter-broker client speaks typed
//! Kafka requests with responses, and Raft messages are neither. A connection to an SSL or SASL
//! controller listener is secured by `client::secure::open` (TLS, then SASL) before its first
//! Raft frame; a failure is logged and retried as a failed connection. A connection whose SASL
//! session has an end (KIP-368, `connections.max.reauth.ms`) authenticates again in place
//! shortly before it (`secure::reauthenticate`), so the peer never closes one under a message,
//! and never sees this voter's connection close while its process lives.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::eraftpb::{Message, MessageType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::{chunks, wire};
use crate::client::secure::{self, ReadHalf, WriteHalf};
use crate::client::Endpoint;
use crate::limits::{RAFT_PEER_QUEUE_MESSAGES_MAX, RAFT_RECONNECT_BACKOFF_MS_MAX};
use crate::security::ClientSecurity;

/// How long opening a secured connection (TLS handshake, SASL exchange) may take.
const SECURE_OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What the transport tells the voter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportEvent {
    Unreachable(u64),
    SnapshotSent { peer: u64, delivered: bool },
}

/// Sends to every peer; cheap to call from the controller thread (never blocks).
pub struct Transport {
    peers: BTreeMap<u64, mpsc::Sender<Message>>,
    report: Arc<dyn Fn(TransportEvent) + Send + Sync>,
}

impl Transport {
    /// Starts one task per peer on the current tokio runtime. `peers` maps voter ids to their
    /// controller listener (`host:port`); `security` secures the connections to an SSL or SASL
    /// controller listener; `report` is called from those tasks.
    pub fn start(
        node_id: u64,
        peers: BTreeMap<u64, String>,
        security: Option<Arc<ClientSecurity>>,
        report: Arc<dyn Fn(TransportEvent) + Send + Sync>,
    ) -> Transport {
        let correlation = Arc::new(AtomicI32::new(0));
        let dialer = Arc::new(Dialer {
            client_id: format!("kafkaiq-raft-{node_id}"),
            security,
        });
        let mut senders = BTreeMap::new();
        for (peer, address) in peers {
            let (tx, rx) = mpsc::channel(RAFT_PEER_QUEUE_MESSAGES_MAX);
            senders.insert(peer, tx);
            tokio::spawn(peer_task(
                node_id,
                peer,
                address,
                dialer.clone(),
                correlation.clone(),
                rx,
                report.clone(),
            ));
        }
        Transport {
            peers: senders,
            report,
        }
    }

    /// Queues messages for their peers; a full queue or an unknown peer drops the message.
    pub fn send(&self, messages: Vec<Message>) {
        for m in messages {
            let to = m.to;
            let snapshot = m.get_msg_type() == MessageType::MsgSnapshot;
            let queued = self.peers.get(&to).is_some_and(|q| q.try_send(m).is_ok());
            if !queued {
                (self.report)(TransportEvent::Unreachable(to));
                if snapshot {
                    (self.report)(TransportEvent::SnapshotSent {
                        peer: to,
                        delivered: false,
                    });
                }
            }
        }
    }
}

/// How every peer task opens its connections: the client id its frames carry, and the
/// controller listener's client security.
struct Dialer {
    client_id: String,
    security: Option<Arc<ClientSecurity>>,
}

async fn peer_task(
    node_id: u64,
    peer: u64,
    address: String,
    dialer: Arc<Dialer>,
    correlation: Arc<AtomicI32>,
    mut queue: mpsc::Receiver<Message>,
    report: Arc<dyn Fn(TransportEvent) + Send + Sync>,
) {
    let client_id = dialer.client_id.as_str();
    let mut backoff_ms = 50u64;
    let mut connection: Option<(ReadHalf, WriteHalf)> = None;
    // KIP-368: when the connection's SASL session must be renewed (`secure::renewal_due`).
    let mut renew_at: Option<Instant> = None;
    loop {
        let next = match connection.as_mut() {
            // The peer never writes on this connection, so anything readable is its end: a
            // restarted peer's old connection is dropped when the old process goes, not found
            // dead by the first message written into it (which the kernel accepts and loses).
            Some((reader, _)) => {
                let mut byte = [0u8; 1];
                let renew = renew_at.map_or_else(far_future, tokio::time::Instant::from_std);
                tokio::select! {
                    message = queue.recv() => Next::Message(message),
                    _ = reader.read(&mut byte) => Next::Closed,
                    _ = tokio::time::sleep_until(renew), if renew_at.is_some() => Next::Renew,
                }
            }
            None => Next::Message(queue.recv().await),
        };
        let message = match next {
            Next::Message(Some(message)) => message,
            Next::Message(None) => return,
            Next::Closed => {
                tracing::debug!(peer, %address, "raft connection closed by the peer");
                connection = None;
                report(TransportEvent::Unreachable(peer));
                continue;
            }
            Next::Renew => {
                let (reader, writer) = connection.as_mut().expect("renewed while connected");
                match renew(
                    reader,
                    writer,
                    dialer.security.as_deref(),
                    client_id,
                    &correlation,
                )
                .await
                {
                    Ok(renewed) => renew_at = renewed,
                    Err(reason) => {
                        // The next message opens a connection that authenticates afresh.
                        tracing::warn!(peer, %address, %reason, "raft connection's SASL re-authentication failed; reconnecting");
                        connection = None;
                    }
                }
                continue;
            }
        };
        let snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
        if connection.is_none() {
            match connect(peer, &address, dialer.security.as_deref(), client_id).await {
                Ok((stream, renew, _)) => {
                    connection = Some(stream.split());
                    renew_at = renew;
                    backoff_ms = 50;
                }
                Err(()) => {
                    fail(&report, peer, snapshot);
                    // Drain what queued up meanwhile rather than replaying stale messages.
                    tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                    backoff_ms = (backoff_ms * 2).min(RAFT_RECONNECT_BACKOFF_MS_MAX);
                    while let Ok(m) = queue.try_recv() {
                        fail(&report, peer, m.get_msg_type() == MessageType::MsgSnapshot);
                    }
                    continue;
                }
            }
        }
        let next_id = || correlation.fetch_add(1, Ordering::Relaxed);
        let frames = wire::encode_frames(next_id(), client_id, &message);
        drop(message); // A snapshot is held once, encoded.
        let (_, stream) = connection.as_mut().expect("connected above");
        match write_frames(stream, node_id, client_id, frames, next_id).await {
            Ok(()) => {
                if snapshot {
                    report(TransportEvent::SnapshotSent {
                        peer,
                        delivered: true,
                    });
                }
            }
            Err(e) => {
                tracing::debug!(peer, %address, error = %e, "raft connection failed");
                connection = None;
                fail(&report, peer, snapshot);
            }
        }
    }
}

/// Opens a connection to a peer's controller listener, secured as `security` says. A peer that
/// does not answer is logged at debug level (it may be starting); a refused TLS handshake or
/// SASL authentication is logged as a warning, for the operator.
async fn connect(
    peer: u64,
    address: &str,
    security: Option<&ClientSecurity>,
    client_id: &str,
) -> Result<(secure::Stream, Option<Instant>, i32), ()> {
    let stream = TcpStream::connect(address).await.map_err(|e| {
        tracing::debug!(peer, %address, error = %e, "raft peer unreachable");
    })?;
    let _ = stream.set_nodelay(true);
    let endpoint = match address.rsplit_once(':') {
        Some((host, port)) => Endpoint::new(
            host.trim_start_matches('[').trim_end_matches(']'),
            port.parse().unwrap_or(0),
        ),
        None => Endpoint::new(address, 0),
    };
    let opened = tokio::time::timeout(
        SECURE_OPEN_TIMEOUT,
        secure::open(stream, &endpoint, security, client_id),
    )
    .await
    .unwrap_or_else(|_| Err(format!("not secured within {SECURE_OPEN_TIMEOUT:?}")));
    opened.map_err(|reason| {
        let listener = security.map_or("", |s| s.listener.as_str());
        tracing::warn!(
            peer,
            %address,
            "connection to controller {peer} on listener {listener} failed: {reason}"
        );
    })
}

/// KIP-368: authenticates again on an open connection (nothing is in flight: the peer answers
/// no Raft frame), within [`SECURE_OPEN_TIMEOUT`]; gives when the new session must be renewed.
async fn renew(
    reader: &mut ReadHalf,
    writer: &mut WriteHalf,
    security: Option<&ClientSecurity>,
    client_id: &str,
    correlation: &AtomicI32,
) -> Result<Option<Instant>, String> {
    let Some(credentials) = security.and_then(|s| s.sasl.as_ref()) else {
        return Ok(None);
    };
    let mut stream = tokio::io::join(reader, writer);
    let client_id = kafka_protocol::protocol::StrBytes::from_string(client_id.to_owned());
    // A few ids for the exchange (SaslHandshake, at most two SaslAuthenticate).
    let mut correlation_id = correlation.fetch_add(4, Ordering::Relaxed);
    let mut exchange = secure::Direct {
        stream: &mut stream,
        client_id: &client_id,
        correlation_id: &mut correlation_id,
    };
    tokio::time::timeout(
        SECURE_OPEN_TIMEOUT,
        secure::reauthenticate(&mut exchange, credentials),
    )
    .await
    .unwrap_or_else(|_| Err(format!("not done within {SECURE_OPEN_TIMEOUT:?}")))
}

/// A deadline that never comes.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Writes a message's frames in order (a chunked message's chunks one after another, each
/// built as it is written), then flushes them (a TLS stream buffers).
async fn write_frames(
    stream: &mut WriteHalf,
    from: u64,
    client_id: &str,
    frames: wire::Frames,
    next_id: impl FnMut() -> i32,
) -> std::io::Result<()> {
    match frames {
        wire::Frames::Whole(frame) => stream.write_all(&frame).await?,
        wire::Frames::Chunked(body) => {
            for frame in chunks::encode_chunks(from, client_id, &body, next_id) {
                stream.write_all(&frame).await?;
            }
        }
    }
    stream.flush().await
}

/// What a peer task wakes up to.
enum Next {
    Message(Option<Message>),
    Closed,
    /// The connection's SASL session is due for renewal.
    Renew,
}

fn fail(report: &Arc<dyn Fn(TransportEvent) + Send + Sync>, peer: u64, snapshot: bool) {
    report(TransportEvent::Unreachable(peer));
    if snapshot {
        report(TransportEvent::SnapshotSent {
            peer,
            delivered: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    fn message(commit: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgHeartbeat);
        m.from = 1;
        m.to = 2;
        m.commit = commit;
        m
    }

    /// A transport from voter 1 to voter 2, which is a listener here; and what it reports.
    async fn transport_to_listener() -> (
        TcpListener,
        Transport,
        tokio::sync::mpsc::UnboundedReceiver<TransportEvent>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
        let transport = Transport::start(
            1,
            BTreeMap::from([(2, address)]),
            None,
            Arc::new(move |e| {
                let _ = events_tx.send(e);
            }),
        );
        (listener, transport, events)
    }

    async fn read_frame(stream: &mut TcpStream) -> Vec<u8> {
        let len = stream.read_i32().await.expect("frame size") as usize;
        let mut frame = vec![0u8; len];
        stream.read_exact(&mut frame).await.expect("frame");
        frame
    }

    async fn read_message(stream: &mut TcpStream) -> Message {
        wire::decode_request(&read_frame(stream).await)
            .expect("a raft frame")
            .1
    }

    /// A snapshot larger than a chunk goes out as chunk frames, none larger than a chunk and
    /// its header, that put together give the message; it is reported delivered once the last
    /// is written.
    #[tokio::test]
    async fn a_snapshot_travels_in_chunks_and_is_reported_once_all_are_written() {
        use crate::quorum::chunks::{self, Reassembly, RAFT_CHUNK_BYTES};
        let (listener, transport, mut events) = transport_to_listener().await;
        let mut snapshot = message(0);
        snapshot.set_msg_type(MessageType::MsgSnapshot);
        let data: Vec<u8> = (0..5 * RAFT_CHUNK_BYTES + 3).map(|i| i as u8).collect();
        snapshot.mut_snapshot().data = data.into();
        snapshot.mut_snapshot().mut_metadata().index = 40;
        transport.send(vec![snapshot.clone(), message(7)]);
        let deadline = Duration::from_secs(10);
        let (mut stream, _) = tokio::time::timeout(deadline, listener.accept())
            .await
            .unwrap()
            .unwrap();
        let mut reassembly = Reassembly::new(vec![1]);
        let mut frames = 0;
        let whole = loop {
            let frame = bytes::Bytes::from(read_frame(&mut stream).await);
            assert!(chunks::is_chunk_frame(&frame), "every frame is a chunk");
            assert!(
                frame.len() <= RAFT_CHUNK_BYTES + 64,
                "{} bytes",
                frame.len()
            );
            frames += 1;
            let chunk = chunks::decode_chunk(&frame).unwrap();
            if let Some(whole) = reassembly.accept(9, None, chunk).unwrap() {
                break whole;
            }
        };
        assert!(frames >= 6, "{frames} chunks");
        assert_eq!(wire::decode_message(&whole).unwrap(), snapshot);
        // The small message after it travels whole.
        assert_eq!(read_message(&mut stream).await.commit, 7);
        let delivered = loop {
            match tokio::time::timeout(deadline, events.recv()).await.unwrap() {
                Some(TransportEvent::SnapshotSent { peer: 2, delivered }) => break delivered,
                other => assert!(matches!(other, Some(TransportEvent::Unreachable(_)))),
            }
        };
        assert!(delivered);
    }

    /// A restarted peer: its old connection closes with the old process. The first message
    /// after that reaches the new process, on a new connection.
    #[tokio::test]
    async fn a_connection_the_peer_closes_is_dropped_before_the_next_message() {
        let (listener, transport, mut events) = transport_to_listener().await;
        let deadline = Duration::from_secs(10);
        transport.send(vec![message(1)]);
        let (mut old, _) = tokio::time::timeout(deadline, listener.accept())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read_message(&mut old).await.commit, 1);
        drop(old);
        let event = tokio::time::timeout(deadline, events.recv()).await.unwrap();
        assert_eq!(event, Some(TransportEvent::Unreachable(2)));
        transport.send(vec![message(2)]);
        let (mut new, _) = tokio::time::timeout(deadline, listener.accept())
            .await
            .expect("the next message comes on a new connection")
            .unwrap();
        let received = tokio::time::timeout(deadline, read_message(&mut new))
            .await
            .unwrap();
        assert_eq!(
            received.commit, 2,
            "the first message after the close is not lost"
        );
    }
}
