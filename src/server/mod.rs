//! The network frontend: a tokio listener, one task per connection, and the dispatch from a
//! decoded request to its handler.
//!
//! `server` owns sockets and nothing else: it reads length-prefixed frames (bounded by
//! `socket.request.max.bytes`, checked before allocating), hands each to [`dispatch`], and writes
//! responses strictly in request order. A frame that cannot be decoded closes only its own
//! connection. `max.connections` bounds open connections, `max.connections.per.ip` those of one
//! client address ([`per_ip`]); a connection that moves no byte either way for
//! `connections.max.idle.ms` is closed.

pub mod connection;
pub mod controller_dispatch;
pub mod dispatch;
pub mod http;
pub mod listener_tls;
pub mod oauthbearer;
pub mod per_ip;
pub mod sasl;
pub mod scram;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::config::security::ListenerSecurity;
use crate::config::ClientListener;
use crate::context::Context;
use crate::limits::{ACCEPT_DESCRIPTOR_SHORTAGE_RELEASE, ACCEPT_FAILURE_BACKOFF_MS_MAX};

/// Which listener a connection came in on: the clients' (every API the broker serves) or the
/// controllers' (`controller.listener.names`: Raft messages, the broker lifecycle and the
/// requests brokers forward to the active controller — nothing else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    Client,
    Controller,
}

/// The connection a request came on.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// Unique in this process.
    pub id: u64,
    pub peer: SocketAddr,
    pub listener: ListenerKind,
    /// The name of the listener it came in on, upper-cased (Kafka's `ListenerName`): clients
    /// are sent every broker's endpoint of this listener.
    pub listener_name: Arc<str>,
    /// Who the client is (Kafka's `KafkaPrincipal`, `User:<name>`): on a SASL listener the
    /// authenticated user, on an SSL listener the subject of the client's certificate, else
    /// `User:ANONYMOUS`. The authorizer checks it, on the controller listener too.
    pub principal: String,
}

/// Kafka's principal of an unauthenticated client.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// The connection limits the client listeners share: `max.connections` and
/// `max.connections.per.ip` count a node's connections, whichever listener they came on (as
/// Kafka's broker-wide limits do).
pub struct ConnectionSlots {
    permits: Arc<Semaphore>,
    per_ip: Arc<per_ip::PerIpSlots>,
}

impl ConnectionSlots {
    pub fn new(ctx: &Context) -> Arc<ConnectionSlots> {
        Arc::new(ConnectionSlots {
            permits: Arc::new(Semaphore::new(ctx.config.socket.max_connections)),
            per_ip: per_ip::PerIpSlots::new(ctx.config.socket.connections_per_ip.clone()),
        })
    }
}

/// Accepts connections on one client listener until `shutdown` turns true, then stops every
/// connection task. Each connection is secured as the listener says (TLS, SASL).
pub async fn serve(
    listener: TcpListener,
    served: ClientListener,
    slots: Arc<ConnectionSlots>,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    let name: Arc<str> = served.listener.name.as_str().into();
    serve_kind(
        listener,
        ctx,
        shutdown,
        ListenerKind::Client,
        name,
        Some(served.security),
        slots,
    )
    .await
}

/// Accepts connections on the controller listener, secured as its protocol says (TLS, SASL:
/// `BrokerConfig::controller_listener_security`), as a client listener's are.
pub async fn serve_controller(
    listener: TcpListener,
    ctx: Arc<Context>,
    shutdown: watch::Receiver<bool>,
) {
    let name: Arc<str> = ctx
        .config
        .kraft
        .controller_listener()
        .map_or("CONTROLLER", |l| l.name.as_str())
        .into();
    let slots = ConnectionSlots::new(&ctx);
    let security = ctx.config.controller_listener_security.clone();
    serve_kind(
        listener,
        ctx,
        shutdown,
        ListenerKind::Controller,
        name,
        security,
        slots,
    )
    .await
}

async fn serve_kind(
    listener: TcpListener,
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    kind: ListenerKind,
    listener_name: Arc<str>,
    security: Option<Arc<ListenerSecurity>>,
    slots: Arc<ConnectionSlots>,
) {
    let mut connections = JoinSet::new();
    let mut backoff_ms = 5u64;
    // Read at each accept: the listener's key store may change at runtime.
    let mut tls = security
        .as_ref()
        .map(|s| listener_tls::ListenerTls::new(&listener_name, s));
    let sasl = security.as_ref().and_then(|s| s.sasl.clone());
    loop {
        tokio::select! {
            _ = shutdown.changed() => {
                if *shutdown.borrow() { break; }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => { backoff_ms = 5; a }
                    Err(e) => {
                        accept_failed(&ctx, &e, &mut backoff_ms, "accept failed").await;
                        continue;
                    }
                };
                let permit = match slots.permits.clone().try_acquire_owned() {
                    Ok(p) => p,
                    Err(_) => {
                        tracing::warn!(%peer, max = ctx.config.socket.max_connections, "max.connections reached; closing new connection");
                        drop(stream);
                        continue;
                    }
                };
                let ip_slot = match slots.per_ip.try_take(peer.ip()) {
                    Ok(slot) => slot,
                    Err(max) => {
                        tracing::info!(%peer, max, "max.connections.per.ip reached; closing new connection");
                        drop(stream);
                        continue;
                    }
                };
                configure_accepted(&stream);
                let ctx = ctx.clone();
                let mut info = ConnectionInfo {
                    id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
                    peer,
                    listener: kind,
                    listener_name: listener_name.clone(),
                    principal: ANONYMOUS.to_owned(),
                };
                let tls = tls.as_mut().and_then(|t| t.current(&ctx.replicas));
                let sasl = sasl.clone();
                connections.spawn(async move {
                    match tls {
                        None => connection::run(stream, info, sasl, ctx).await,
                        Some(acceptor) => {
                            // The handshake is bounded like any silence on a connection.
                            let idle = Duration::from_millis(ctx.config.socket.connections_max_idle_ms);
                            match tokio::time::timeout(idle, acceptor.accept(stream)).await {
                                Ok(Ok(stream)) => {
                                    if let Some(principal) = stream
                                        .get_ref()
                                        .1
                                        .peer_certificates()
                                        .and_then(|certs| certs.first())
                                        .and_then(|c| crate::config::security::principal_of_certificate(c))
                                    {
                                        info.principal = principal;
                                    }
                                    connection::run(stream, info, sasl, ctx).await
                                }
                                Ok(Err(e)) => tracing::info!(%peer, error = %e, "closing connection: TLS handshake failed"),
                                Err(_) => tracing::info!(%peer, "closing connection: no TLS handshake within connections.max.idle.ms"),
                            }
                        }
                    }
                    drop((permit, ip_slot));
                });
            }
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// After a failed `accept`: out of descriptors (EMFILE, ENFILE), the logs hand back some idle
/// ones so the next attempt finds one; whatever the error, the listener backs off (5 ms
/// doubling to [`ACCEPT_FAILURE_BACKOFF_MS_MAX`]) instead of spinning on a connection that
/// stays in the backlog, and keeps listening. Logged once per backoff step, so at most once
/// a second while it lasts.
pub(crate) async fn accept_failed(
    ctx: &Context,
    e: &std::io::Error,
    backoff_ms: &mut u64,
    what: &'static str,
) {
    let shortage = matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE));
    if shortage {
        let released = ctx
            .replicas
            .log_manager
            .release_idle_descriptors(ACCEPT_DESCRIPTOR_SHORTAGE_RELEASE);
        tracing::warn!(
            error = %e,
            released_log_files = released,
            retry_in_ms = *backoff_ms,
            "{what}: out of file descriptors; closed idle log files and backing off"
        );
    } else {
        tracing::warn!(error = %e, retry_in_ms = *backoff_ms, "{what}");
    }
    tokio::time::sleep(Duration::from_millis(*backoff_ms)).await;
    *backoff_ms = (*backoff_ms * 2).min(ACCEPT_FAILURE_BACKOFF_MS_MAX);
}

/// Socket options of an accepted connection. `TCP_NODELAY`, as Kafka's `SocketServer` sets it:
/// without it a response smaller than a segment waits for the client's delayed ACK of the
/// previous one (Nagle), up to 40 ms on Linux, which is what a producer's p99 would show.
pub(crate) fn configure_accepted(stream: &tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
}

#[cfg(test)]
mod socket_tests {
    #[tokio::test]
    async fn accepted_sockets_do_not_delay_small_writes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap(), "Linux accepts with Nagle on");
        super::configure_accepted(&accepted);
        assert!(accepted.nodelay().unwrap());
    }
}
