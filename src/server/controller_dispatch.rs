//! The controller listener's dispatch: Raft messages between voters, and the Kafka APIs a KRaft
//! controller serves — ApiVersions, the broker lifecycle, and the metadata-changing requests
//! brokers forward to the active controller. Anything else is refused as Kafka's controller
//! refuses it: the connection is closed.
//!
//! A Raft message is recognised by its private API key before the Kafka decoder sees the frame
//! ([`crate::quorum::wire`]); it has no response. A malformed one closes its connection and
//! never reaches the voter; a well-formed one the voter does not accept (not for this node, not
//! from a voter, a local type) is dropped by the quorum engine. A broker-only node's fetch of the
//! committed metadata log ([`crate::controller::observer`]) has a private key too and is answered
//! on its connection; a malformed one closes the connection.
//!
//! With an authorizer, the connection's principal is checked as on the client listener
//! (`handlers::authz`): Raft messages, chunks and the metadata log fetch need CLUSTER_ACTION on
//! the cluster (a peer without it is disconnected); the broker lifecycle APIs need
//! CLUSTER_ACTION (else CLUSTER_AUTHORIZATION_FAILED, nothing done); DescribeCluster, which
//! names the controllers, ALTER (as Kafka's controller asks); the administrative APIs their
//! own operations. A broker forwards a client's request inside an Envelope (KIP-590): the
//! envelope needs CLUSTER_ACTION, and the request in it is checked and handled as the client's,
//! whose principal and address it carries, as Kafka's controller does; so a broker needs no more
//! than CLUSTER_ACTION to forward. A request sent directly (an admin client on this listener, or
//! a node's own topic creation) is checked as its connection's principal.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use super::dispatch::{DispatchError, FORWARDED};
use super::ConnectionInfo;
use crate::config::BrokerConfig;
use crate::context::Context;
use crate::controller::observer;
use crate::handlers;
use crate::handlers::api_versions::CONTROLLER_SUPPORTED;
use crate::handlers::authz::{self, Op, RequestAuth};
use crate::limits::{CONTROLLER_REQUEST_BYTES_MAX, RAFT_FRAME_BYTES_MAX};
use crate::protocol::{self, DecodeError};
use crate::quorum::{chunks, wire};

/// The largest frame of API `api_key` the controller listener reads, checked as soon as the
/// key (the body's first two bytes) has arrived and before the rest is read: a Raft message
/// or a chunk of a larger one (a snapshot) is at most [`RAFT_FRAME_BYTES_MAX`]; a metadata
/// change forwarded from a client is bounded as the client listener bounded it
/// (`socket.request.max.bytes`); anything else is small ([`CONTROLLER_REQUEST_BYTES_MAX`]), so
/// a stranger cannot make a controller buffer much per connection with a heartbeat.
pub fn frame_max_bytes(config: &BrokerConfig, api_key: i16) -> usize {
    if api_key == wire::RAFT_MESSAGE_API_KEY || api_key == chunks::RAFT_CHUNK_API_KEY {
        RAFT_FRAME_BYTES_MAX
    } else if api_key == ApiKey::Envelope as i16 || FORWARDED.iter().any(|k| *k as i16 == api_key) {
        config.socket.request_max_bytes
    } else {
        config
            .socket
            .request_max_bytes
            .min(CONTROLLER_REQUEST_BYTES_MAX)
    }
}

/// Handles one frame of the controller listener. `Ok(None)`: nothing to send (Raft messages).
pub async fn handle_frame(
    ctx: &Arc<Context>,
    frame: Bytes,
    conn: &ConnectionInfo,
) -> Result<Option<Bytes>, DispatchError> {
    let auth = RequestAuth::new(
        ctx.authorizer.as_ref(),
        &conn.principal,
        conn.peer.ip(),
        || ctx.image(),
    );
    let peer_frame = wire::is_raft_frame(&frame)
        || chunks::is_chunk_frame(&frame)
        || observer::is_fetch_frame(&frame);
    if peer_frame && !auth.allows_cluster(Op::ClusterAction) {
        return Err(DispatchError::Unauthorized(conn.principal.clone()));
    }
    if wire::is_raft_frame(&frame) {
        let (_, message) = wire::decode_request(&frame).map_err(DispatchError::Raft)?;
        ctx.controller.peer_message(message, conn.id);
        return Ok(None);
    }
    if chunks::is_chunk_frame(&frame) {
        let chunk = chunks::decode_chunk(&frame)?;
        ctx.controller.peer_chunk(chunk, conn.id)?;
        return Ok(None);
    }
    if observer::is_fetch_frame(&frame) {
        // A broker-only node's fetch of the committed metadata log.
        let (correlation_id, request) =
            observer::decode_request(&frame).map_err(DispatchError::MetadataFetch)?;
        let controller = &ctx.controller;
        let response = observer::serve_fetch(
            controller.feed(),
            &ctx.cache,
            || controller.active_controller(),
            &request,
        )
        .await;
        return Ok(Some(observer::encode_response(correlation_id, &response)));
    }
    let request = match protocol::decode_request(frame) {
        Ok(r) => r,
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => {
            return Ok(Some(
                handlers::api_versions::unsupported_version_response_of(
                    CONTROLLER_SUPPORTED,
                    correlation_id,
                )?,
            ));
        }
        Err(e) => return Err(e.into()),
    };
    serve(ctx, request, &auth, conn).await
}

/// Serves one decoded request as `auth`'s principal: the connection's, or for a request a
/// broker forwarded in an envelope, its client's.
async fn serve(
    ctx: &Arc<Context>,
    request: protocol::Request,
    auth: &RequestAuth,
    conn: &ConnectionInfo,
) -> Result<Option<Bytes>, DispatchError> {
    let api_key = request.api_key;
    let version = request.api_version;
    let correlation_id = request.correlation_id();
    let served = CONTROLLER_SUPPORTED
        .iter()
        .any(|(k, min, max)| *k == api_key && (*min..=*max).contains(&version));
    if !served {
        if api_key == ApiKey::ApiVersions {
            return Ok(Some(
                handlers::api_versions::unsupported_version_response_of(
                    CONTROLLER_SUPPORTED,
                    correlation_id,
                )?,
            ));
        }
        return Err(DispatchError::NotAdvertised { api_key, version });
    }
    if let Some(op) = authz::controller_cluster_operation(api_key) {
        if !auth.allows_cluster(op) {
            if let Some(refusal) = authz::refuse_cluster(&request.body, version) {
                return Ok(Some(protocol::encode_response(
                    api_key,
                    version,
                    correlation_id,
                    &refusal,
                )?));
            }
        }
    }
    let mut request_body = request.body;
    let refused = authz::admin::take_refused(auth, &mut request_body);
    let body: ResponseKind = match request_body {
        RequestKind::ApiVersions(r) => {
            handlers::api_versions::handle_of(CONTROLLER_SUPPORTED, version, r)
        }
        RequestKind::Envelope(r) => envelope(ctx, r, conn).await?,
        // A SASL connection's exchange is taken by its authenticator (`connection`) first.
        RequestKind::SaslHandshake(_) => super::sasl::illegal_handshake(),
        RequestKind::SaslAuthenticate(_) => super::sasl::illegal_authenticate(),
        RequestKind::CreateTopics(r) => {
            handlers::create_topics::handle(
                auth,
                &ctx.controller,
                &ctx.replicas,
                &ctx.config,
                version,
                r,
            )
            .await
        }
        RequestKind::DeleteTopics(r) => {
            handlers::delete_topics::handle(&ctx.controller, &ctx.cache, version, r).await
        }
        RequestKind::CreatePartitions(r) => {
            handlers::create_partitions::handle(&ctx.controller, version, r).await
        }
        RequestKind::AlterConfigs(r) => {
            use handlers::incremental_alter_configs::Receiver;
            handlers::alter_configs::handle_on(&ctx.controller, version, r, Receiver::Controller)
                .await
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            use handlers::incremental_alter_configs::{handle_on, Receiver};
            handle_on(&ctx.controller, version, r, Receiver::Controller).await
        }
        RequestKind::ElectLeaders(r) => {
            handlers::elect_leaders::handle(&ctx.controller, &ctx.cache, version, r).await
        }
        RequestKind::AlterPartitionReassignments(r) => {
            handlers::alter_partition_reassignments::handle(&ctx.controller, version, r).await
        }
        RequestKind::ListPartitionReassignments(r) => {
            handlers::list_partition_reassignments::handle(&ctx.image(), version, r)
        }
        RequestKind::DescribeCluster(r) => handlers::describe_cluster::handle_controllers(
            &ctx.image(),
            &ctx.controller,
            &ctx.config.kraft,
            version,
            r,
        ),
        RequestKind::BrokerRegistration(r) => {
            handlers::broker_lifecycle::broker_registration(&ctx.controller, r, conn.id).await
        }
        RequestKind::BrokerHeartbeat(r) => {
            handlers::broker_lifecycle::broker_heartbeat(&ctx.controller, r, conn.id).await
        }
        RequestKind::AlterPartition(r) => {
            handlers::broker_lifecycle::alter_partition(&ctx.controller, version, r).await
        }
        RequestKind::DescribeQuorum(r) => {
            handlers::describe_quorum::handle(&ctx.controller, &ctx.config.kraft, version, r)
        }
        RequestKind::AllocateProducerIds(r) => {
            handlers::broker_lifecycle::allocate_producer_ids(&ctx.controller, r).await
        }
        RequestKind::DescribeAcls(r) => match auth.image() {
            Some(image) => handlers::acls::describe_with(image, r),
            None => handlers::acls::describe(version, r),
        },
        RequestKind::CreateAcls(r) => {
            if auth.is_enabled() {
                handlers::acls::create_with(&ctx.controller, r).await
            } else {
                handlers::acls::create(version, r)
            }
        }
        RequestKind::DeleteAcls(r) => {
            if auth.is_enabled() {
                handlers::acls::delete_with(&ctx.controller, r).await
            } else {
                handlers::acls::delete(version, r)
            }
        }
        RequestKind::AlterUserScramCredentials(r) => {
            handlers::user_scram_credentials::alter(&ctx.controller, r).await
        }
        _ => return Err(DispatchError::NoHandler(api_key)),
    };
    let body = match refused {
        Some(refused) => refused.merge(body),
        None => body,
    };
    Ok(Some(protocol::encode_response(
        api_key,
        version,
        correlation_id,
        &body,
    )?))
}

/// Kafka's PRINCIPAL_DESERIALIZATION_FAILURE.
const PRINCIPAL_DESERIALIZATION_FAILURE: i16 = 97;

/// A client's request that a broker forwarded in an envelope (KIP-590; the broker's principal
/// was checked for CLUSTER_ACTION): decoded, checked and handled as the client's, whose
/// principal and address the envelope carries, and answered inside the envelope's response.
/// Only the requests brokers forward are taken; anything else, or an envelope that cannot be
/// read, is refused as Kafka's controller refuses it (INVALID_REQUEST,
/// PRINCIPAL_DESERIALIZATION_FAILURE) without being handled.
async fn envelope(
    ctx: &Arc<Context>,
    r: kafka_protocol::messages::EnvelopeRequest,
    conn: &ConnectionInfo,
) -> Result<ResponseKind, DispatchError> {
    use kafka_protocol::messages::EnvelopeResponse;
    let refused = |code: i16| {
        Ok(ResponseKind::Envelope(
            EnvelopeResponse::default().with_error_code(code),
        ))
    };
    let invalid = crate::errors::ApiError::InvalidRequest(String::new()).code();
    let Some(principal) = r
        .request_principal
        .as_deref()
        .and_then(protocol::envelope::decode_principal)
    else {
        return refused(PRINCIPAL_DESERIALIZATION_FAILURE);
    };
    let Some(address) = protocol::envelope::decode_address(&r.client_host_address) else {
        return refused(invalid);
    };
    let inner = match protocol::decode_request(r.request_data) {
        Ok(inner) if FORWARDED.contains(&inner.api_key) => inner,
        Ok(inner) => {
            tracing::debug!(api = ?inner.api_key, "an envelope carried a request brokers do not forward");
            return refused(invalid);
        }
        Err(e) => {
            tracing::debug!(error = %e, "an envelope carried an undecodable request");
            return refused(invalid);
        }
    };
    let auth = RequestAuth::new(ctx.authorizer.as_ref(), &principal, address, || ctx.image());
    // A request that cannot be served is refused in the envelope (Kafka answers
    // UNSUPPORTED_VERSION there), rather than closing the broker's connection, which carries
    // other clients' requests too.
    let answer = match Box::pin(serve(ctx, inner, &auth, conn)).await {
        Ok(answer) => answer,
        Err(DispatchError::NotAdvertised { .. }) => {
            return refused(crate::errors::ApiError::UnsupportedVersion.code())
        }
        Err(e) => {
            tracing::warn!(error = %e, "a request in an envelope failed");
            return refused(crate::errors::ApiError::UnknownServerError(String::new()).code());
        }
    };
    // The inner response frame without its size prefix: its header and body.
    let data = answer.map(|frame| frame.slice(4..));
    Ok(ResponseKind::Envelope(
        EnvelopeResponse::default().with_response_data(data),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raft_frames_are_one_chunk_and_only_forwarded_changes_get_client_sized_frames() {
        let config = BrokerConfig::default_single_node();
        let client_bound = config.socket.request_max_bytes;
        for raft in [wire::RAFT_MESSAGE_API_KEY, chunks::RAFT_CHUNK_API_KEY] {
            assert_eq!(frame_max_bytes(&config, raft), RAFT_FRAME_BYTES_MAX);
        }
        assert_eq!(
            frame_max_bytes(&config, ApiKey::CreateTopics as i16),
            client_bound
        );
        for small in [
            ApiKey::BrokerHeartbeat as i16,
            ApiKey::BrokerRegistration as i16,
            ApiKey::AlterPartition as i16,
            ApiKey::ApiVersions as i16,
            observer::METADATA_FETCH_API_KEY,
            -1,
        ] {
            assert_eq!(
                frame_max_bytes(&config, small),
                CONTROLLER_REQUEST_BYTES_MAX,
                "{small}"
            );
        }
    }
}
