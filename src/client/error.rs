//! What can go wrong with a request, and why a connection closed.

use std::time::Duration;

use crate::protocol::ApiKey;

use super::NodeId;

/// Why a request failed. Each variant says whether the request may have reached the peer
/// ([`ClientError::may_have_been_sent`]): a caller that must not apply an operation twice (an
/// AlterPartition, a forwarded CreateTopics) treats those outcomes as unknown, never as failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// Neither `set_endpoint` nor the resolver knows where the node is.
    #[error("no endpoint is known for node {node}")]
    NoEndpoint { node: NodeId },
    /// The TCP connect or the ApiVersions exchange that opens a connection failed. Nothing was
    /// sent; the next attempt waits for the reconnect backoff.
    #[error("connecting to node {node} at {endpoint} failed: {reason}")]
    ConnectFailed {
        node: NodeId,
        endpoint: String,
        reason: String,
    },
    /// The connection closed while the request was queued on it or in flight. Every request in
    /// flight on a connection fails this way when it closes.
    #[error("connection to node {node} closed ({reason}); the request {}", sent_words(*.sent))]
    Disconnected {
        node: NodeId,
        sent: bool,
        reason: CloseReason,
    },
    /// No response within the request's timeout. If it was sent, its connection is closed so a
    /// late response cannot be taken for another request's.
    #[error("request {api_key:?} to node {node} timed out after {timeout:?}; it {}", sent_words(*.sent))]
    Timeout {
        node: NodeId,
        api_key: ApiKey,
        sent: bool,
        timeout: Duration,
    },
    /// The peer does not serve any version of the API that the client can send and decode.
    #[error(
        "no common {api_key:?} version with node {node}: ours {}..={}, theirs {}",
        ours.0, ours.1, theirs.map_or("none".to_owned(), |(min, max)| format!("{min}..={max}"))
    )]
    NoCommonVersion {
        node: NodeId,
        api_key: ApiKey,
        ours: (i16, i16),
        theirs: Option<(i16, i16)>,
    },
    /// The client has no response layout for the API, so it cannot decode its responses safely.
    #[error("{api_key:?} is not an API the client sends")]
    UnsupportedApi { api_key: ApiKey },
    /// The request could not be encoded at the negotiated version (a field set outside its
    /// version range): a bug in the caller. Not sent.
    #[error("cannot encode {api_key:?} v{version}: {reason}")]
    Encode {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    /// The request is one the server never answers (Produce with acks=0): use a fire-and-forget
    /// send. Not sent.
    #[error("{api_key:?} with no response can only be sent fire-and-forget")]
    NoResponse { api_key: ApiKey },
    /// The response frame was refused by the guard or by `kafka-protocol`. The peer processed
    /// the request; the connection is closed.
    #[error("cannot decode {api_key:?} v{version} response from node {node}: {reason}")]
    Decode {
        node: NodeId,
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    /// The response frame's size prefix exceeds the request's bound; the body was not read and
    /// the connection is closed.
    #[error("response frame of {size} bytes from node {node} exceeds {max} bytes")]
    FrameTooLarge { node: NodeId, size: i64, max: usize },
    /// The destination's queue is full (`try_send_and_forget` only). Not sent.
    #[error("request queue for node {node} is full")]
    QueueFull { node: NodeId },
    /// `CLIENT_NODES_MAX` destinations are known already.
    #[error("the client already knows {max} nodes")]
    TooManyNodes { max: usize },
    /// The client was shut down or dropped.
    #[error("the client is shut down")]
    Shutdown,
}

fn sent_words(sent: bool) -> &'static str {
    if sent {
        "may have been sent"
    } else {
        "was not sent"
    }
}

impl ClientError {
    /// Whether the peer may have received (and acted on) the request. `false` means it certainly
    /// did not; `true` means the outcome is unknown, or known to the peer but not to us.
    pub fn may_have_been_sent(&self) -> bool {
        match self {
            ClientError::Disconnected { sent, .. } | ClientError::Timeout { sent, .. } => *sent,
            ClientError::Decode { .. } | ClientError::FrameTooLarge { .. } => true,
            ClientError::NoEndpoint { .. }
            | ClientError::ConnectFailed { .. }
            | ClientError::NoCommonVersion { .. }
            | ClientError::UnsupportedApi { .. }
            | ClientError::Encode { .. }
            | ClientError::NoResponse { .. }
            | ClientError::QueueFull { .. }
            | ClientError::TooManyNodes { .. }
            | ClientError::Shutdown => false,
        }
    }
}

/// Why a connection closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// The peer closed the connection (end of stream).
    #[error("closed by the peer")]
    PeerClosed,
    #[error("i/o error: {0}")]
    Io(String),
    /// A request went unanswered past its deadline.
    #[error("request with correlation id {correlation_id} timed out")]
    Timeout { correlation_id: i32 },
    /// A response answered another request than the oldest in flight. Kafka servers answer in
    /// request order, so this is a protocol error, not out-of-order completion.
    #[error("response correlation id {received} where {expected} was expected")]
    CorrelationMismatch { expected: i32, received: i32 },
    /// A frame arrived while no request was in flight.
    #[error("unsolicited response frame")]
    Unsolicited,
    #[error("response frame of {size} bytes exceeds {max} bytes")]
    FrameTooLarge { size: i64, max: usize },
    #[error("undecodable response: {0}")]
    Decode(String),
    /// The node's endpoint changed (`set_endpoint`); the next connection uses the new one.
    #[error("endpoint changed")]
    EndpointChanged,
    /// `disconnect` or `remove` was called.
    #[error("closed on request")]
    Requested,
    /// Nothing was in flight for `connection_idle_max`.
    #[error("idle")]
    Idle,
    /// Its SASL session ends soon (KIP-368) and authenticating again on it failed: closed
    /// before the server closes it; the next connection authenticates afresh.
    #[error("SASL session renewal failed")]
    SessionRenewal,
    #[error("client shut down")]
    Shutdown,
}

impl CloseReason {
    /// Whether the client closed the connection on purpose rather than because something broke.
    /// Only failures count towards the reconnect backoff.
    pub fn is_voluntary(&self) -> bool {
        matches!(
            self,
            CloseReason::EndpointChanged
                | CloseReason::Requested
                | CloseReason::Idle
                | CloseReason::SessionRenewal
                | CloseReason::Shutdown
        )
    }
}
