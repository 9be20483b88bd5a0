//! The Raft transport: one outbound connection per peer voter, to its controller listener,
//! carrying Raft messages one way ([`super::wire`] frames; the receiver sends nothing back —
//! the peer's answers travel on its own connection to us).
//!
//! Each peer has a task that owns its connection and a bounded queue. A message that finds the
//! queue full is dropped (Raft resends what matters) and the peer is reported unreachable, so
//! the library stops pipelining to it. A connection that fails is reopened after a backoff
//! (50 ms doubling to 1 s); the messages it was carrying are lost, and the library is told. A
//! snapshot's fate is always reported — delivered once written, failed if its connection
//! failed — because until it is, the leader sends that peer nothing more.
//!
//! It has its own sockets (beside `server` and `client`): the inter-broker client speaks typed
//! Kafka requests with responses, and Raft messages are neither.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::{Message, MessageType};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::wire;
use crate::limits::{RAFT_PEER_QUEUE_MESSAGES_MAX, RAFT_RECONNECT_BACKOFF_MS_MAX};

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
    /// controller listener (`host:port`); `report` is called from those tasks.
    pub fn start(
        node_id: u64,
        peers: BTreeMap<u64, String>,
        report: Arc<dyn Fn(TransportEvent) + Send + Sync>,
    ) -> Transport {
        let correlation = Arc::new(AtomicI32::new(0));
        let client_id = format!("kafkaiq-raft-{node_id}");
        let mut senders = BTreeMap::new();
        for (peer, address) in peers {
            let (tx, rx) = mpsc::channel(RAFT_PEER_QUEUE_MESSAGES_MAX);
            senders.insert(peer, tx);
            tokio::spawn(peer_task(
                peer,
                address,
                client_id.clone(),
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

async fn peer_task(
    peer: u64,
    address: String,
    client_id: String,
    correlation: Arc<AtomicI32>,
    mut queue: mpsc::Receiver<Message>,
    report: Arc<dyn Fn(TransportEvent) + Send + Sync>,
) {
    let mut backoff_ms = 50u64;
    let mut connection: Option<TcpStream> = None;
    while let Some(message) = queue.recv().await {
        let snapshot = message.get_msg_type() == MessageType::MsgSnapshot;
        if connection.is_none() {
            match TcpStream::connect(&address).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    connection = Some(stream);
                    backoff_ms = 50;
                }
                Err(e) => {
                    tracing::debug!(peer, %address, error = %e, "raft peer unreachable");
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
        let id = correlation.fetch_add(1, Ordering::Relaxed);
        let frame = wire::encode_request(id, &client_id, &message);
        let stream = connection.as_mut().expect("connected above");
        match stream.write_all(&frame).await {
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

fn fail(report: &Arc<dyn Fn(TransportEvent) + Send + Sync>, peer: u64, snapshot: bool) {
    report(TransportEvent::Unreachable(peer));
    if snapshot {
        report(TransportEvent::SnapshotSent {
            peer,
            delivered: false,
        });
    }
}
