//! From one request frame to one (or no) response frame.
//!
//! Decodes through [`crate::protocol`], checks the version against what we advertise
//! ([`crate::handlers::api_versions::SUPPORTED`]), routes to the API's handler and encodes the
//! answer. An ApiVersions request with a version we do not know gets a v0 UNSUPPORTED_VERSION
//! answer with our ranges (KIP-511); any other undecodable or unsupported request closes the
//! connection, as Kafka does.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};

use crate::context::Context;
use crate::group::service::Caller;
use crate::handlers;
use crate::handlers::authz::{self, RequestAuth};
use crate::protocol::frame::ResponseFrame;
use crate::protocol::{self, DecodeError};
use crate::replica::append::AppendStats;

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("{api_key:?} v{version} is not supported by this broker")]
    NotAdvertised { api_key: ApiKey, version: i16 },
    #[error("cannot encode response: {0}")]
    Encode(#[from] protocol::EncodeError),
    #[error("an acks=0 produce request failed; closing so the client notices")]
    AcksZeroProduceFailed,
    #[error("request {0:?} has no handler")]
    NoHandler(ApiKey),
    #[error(transparent)]
    Raft(#[from] crate::quorum::wire::WireError),
    #[error(transparent)]
    RaftChunk(#[from] crate::quorum::chunks::ChunkError),
    #[error(transparent)]
    MetadataFetch(crate::controller::observer::FetchWireError),
    #[error("{0} may not act as a controller quorum peer (CLUSTER_ACTION on the cluster)")]
    Unauthorized(String),
}

/// The requests a node that is not the active controller forwards to it.
pub(crate) const FORWARDED: &[ApiKey] = &[
    ApiKey::CreateTopics,
    ApiKey::DeleteTopics,
    ApiKey::CreatePartitions,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::AlterConfigs,
    ApiKey::ElectLeaders,
    ApiKey::AlterPartitionReassignments,
    ApiKey::DescribeQuorum,
    ApiKey::CreateAcls,
    ApiKey::DeleteAcls,
    ApiKey::AlterUserScramCredentials,
];

/// Whether a config change names a BROKER resource other than this node or the default: the
/// broker refuses it itself (Kafka's `ConfigAdminManager` checks before forwarding), as the
/// controller, which takes any broker's change, cannot tell who was asked.
fn names_another_broker(node_id: i32, body: &RequestKind) -> bool {
    let foreign = |resource_type: i8, name: &str| {
        resource_type == handlers::describe_configs::RESOURCE_BROKER
            && handlers::describe_configs::check_broker_resource(node_id, name).is_err()
    };
    match body {
        RequestKind::IncrementalAlterConfigs(r) => r
            .resources
            .iter()
            .any(|res| foreign(res.resource_type, &res.resource_name)),
        RequestKind::AlterConfigs(r) => r
            .resources
            .iter()
            .any(|res| foreign(res.resource_type, &res.resource_name)),
        _ => false,
    }
}

/// Handles one frame from `principal` at `peer`. `Ok(None)` means "send nothing" (acks=0
/// produce).
pub async fn handle_frame(
    ctx: &Arc<Context>,
    frame: Bytes,
    peer: SocketAddr,
    principal: &str,
    listener: &str,
) -> Result<Option<ResponseFrame>, DispatchError> {
    let decoding = std::time::Instant::now();
    let request = match protocol::decode_request(frame.clone()) {
        Ok(r) => r,
        Err(DecodeError::UnsupportedVersion {
            api_key: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => {
            return Ok(Some(
                handlers::api_versions::unsupported_version_response(correlation_id)?.into(),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let api_key = request.api_key;
    let version = request.api_version;
    if api_key == ApiKey::Produce {
        ctx.request_stats
            .produce_stage("decode", decoding.elapsed());
    }
    if !handlers::api_versions::is_supported(api_key, version) {
        if api_key == ApiKey::ApiVersions {
            return Ok(Some(
                handlers::api_versions::unsupported_version_response(request.correlation_id())?
                    .into(),
            ));
        }
        return Err(DispatchError::NotAdvertised { api_key, version });
    }
    let started = std::time::Instant::now();
    let result = handle_supported(ctx, request, peer, principal, listener).await;
    ctx.request_stats
        .handled(api_name(api_key), started.elapsed().as_secs_f64() * 1000.0);
    result
}

/// Kafka's name of an API (`ApiKeys#name`), as `RequestMetrics` labels it: the variant names
/// of `kafka-protocol`'s `ApiKey` are Kafka's names.
fn api_name(api_key: ApiKey) -> &'static str {
    macro_rules! names {
        ($($key:ident),* $(,)?) => {
            match api_key {
                $(ApiKey::$key => stringify!($key),)*
                _ => "Other",
            }
        };
    }
    names!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        WriteTxnMarkers,
        TxnOffsetCommit,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        OffsetForLeaderEpoch,
        DescribeConfigs,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        AlterReplicaLogDirs,
        DescribeLogDirs,
        CreatePartitions,
        DeleteGroups,
        ElectLeaders,
        AlterConfigs,
        IncrementalAlterConfigs,
        ListPartitionReassignments,
        OffsetDelete,
        DescribeQuorum,
        DescribeCluster,
        ListConfigResources,
        DescribeTopicPartitions,
        AlterPartition,
        BrokerRegistration,
        BrokerHeartbeat,
        UnregisterBroker,
        AllocateProducerIds,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeClientQuotas,
    )
}

/// What a Produce uses, of the node's services.
fn produce_services<'a>(
    ctx: &'a Context,
    listener: &'a str,
    client_id: Option<&str>,
) -> handlers::produce::ProduceServices<'a> {
    handlers::produce::ProduceServices {
        cache: &ctx.cache,
        replicas: &ctx.replicas,
        clock: &*ctx.clock,
        txns: &ctx.txns,
        stats: AppendStats {
            topics: &ctx.topic_stats,
            requests: &ctx.request_stats,
        },
        listener: listener,
        internal_topics_allowed: client_id == Some(handlers::produce::ADMIN_CLIENT_ID),
    }
}

/// What a Fetch uses, of the node's services.
/// This broker's configuration, for the checks it makes of a change of its own configs.
fn own_config(ctx: &Context) -> handlers::incremental_alter_configs::OwnConfig {
    handlers::incremental_alter_configs::OwnConfig::new(
        ctx.config.clone(),
        ctx.replicas.effective_config(),
        &ctx.image(),
    )
}

fn fetch_services<'a>(ctx: &'a Context, listener: &'a str) -> handlers::fetch::FetchServices<'a> {
    handlers::fetch::FetchServices {
        cache: &ctx.cache,
        replicas: &ctx.replicas,
        sessions: &ctx.fetch_sessions,
        fetch_max_bytes: ctx.config.replica.fetch_max_bytes,
        topic_stats: &ctx.topic_stats,
        served: &ctx.fetch_served,
        listener: listener,
    }
}

/// A decoded request of an advertised version: forwarded or handled, its response encoded.
async fn handle_supported(
    ctx: &Arc<Context>,
    request: protocol::Request,
    peer: SocketAddr,
    principal: &str,
    listener: &str,
) -> Result<Option<ResponseFrame>, DispatchError> {
    let api_key = request.api_key;
    let version = request.api_version;
    let correlation_id = request.correlation_id();
    let header = request.header;
    // The request's authorization context: empty (one `None` check per question) unless an
    // authorizer is configured.
    let auth = RequestAuth::new(ctx.authorizer.as_ref(), principal, peer.ip(), || {
        ctx.image()
    });
    // The APIs whose one resource is the cluster are refused whole, before anything is done.
    if let Some(op) = authz::cluster_operation(api_key) {
        if !auth.allows_cluster(op) {
            if let Some(refusal) = authz::refuse_cluster(&request.body, version) {
                return Ok(Some(
                    protocol::encode_response(api_key, version, correlation_id, &refusal)?.into(),
                ));
            }
        }
    }
    // The entries of an administrative request the caller may not act on are answered here
    // and never reach a handler or the active controller.
    let mut request_body = request.body;
    let refused = authz::admin::take_refused(&auth, &mut request_body);
    // A change of this broker's own listener stores is checked here, where its files are.
    let failed = match api_key {
        ApiKey::IncrementalAlterConfigs | ApiKey::AlterConfigs => {
            own_config(ctx).take_failed(&mut request_body)
        }
        _ => None,
    };
    let answer = |body: ResponseKind| {
        let body = match refused {
            Some(refused) => refused.merge(body),
            None => body,
        };
        match failed {
            Some(failed) => failed.merge(body),
            None => body,
        }
    };
    // Group members are described with their client id and host, as Kafka shows them.
    let caller = || Caller {
        api_version: version,
        client_id: header
            .client_id
            .as_ref()
            .map(|c| c.to_string())
            .unwrap_or_default(),
        client_host: format!("/{}", peer.ip()),
    };
    // Metadata changes are the active controller's; elsewhere they are forwarded to it, and its
    // answer goes back as it is (Kafka's forwarding). If it cannot be reached the local handler
    // answers, with NOT_CONTROLLER where it cannot decide.
    let request_body = if FORWARDED.contains(&api_key)
        && !ctx.controller.is_active()
        && !names_another_broker(ctx.node_id, &request_body)
    {
        // The client's request goes in an envelope, checked on the controller as the client's.
        let origin = crate::controller::Origin {
            principal: principal.to_owned(),
            address: peer.ip(),
            client_id: header.client_id.as_ref().map(|c| c.to_string()),
            correlation_id,
        };
        match ctx
            .controller
            .forward(api_key, version, request_body.clone(), Some(&origin))
            .await
        {
            Ok(forwarded) => {
                return Ok(Some(
                    protocol::encode_response(
                        api_key,
                        version,
                        correlation_id,
                        &answer(forwarded),
                    )?
                    .into(),
                ))
            }
            Err(_) => request_body,
        }
    } else {
        request_body
    };
    let body: Option<ResponseKind> = match request_body {
        RequestKind::ApiVersions(r) => Some(handlers::api_versions::handle(
            version,
            r,
            ctx.groups.config().consumer_protocol_enabled,
        )),
        RequestKind::SaslHandshake(_) => Some(crate::server::sasl::illegal_handshake()),
        RequestKind::SaslAuthenticate(_) => Some(crate::server::sasl::illegal_authenticate()),
        RequestKind::Metadata(r) => Some(
            handlers::metadata::handle(
                &auth,
                &ctx.cache,
                &ctx.controller,
                listener,
                ctx.config.topics.auto_create_topics_enable,
                version,
                r,
            )
            .await,
        ),
        RequestKind::Produce(r) => {
            let client_id = header.client_id.as_ref().map(|c| c.as_str());
            let services = produce_services(ctx, listener, client_id);
            match handlers::produce::handle(&auth, services, version, r).await {
                handlers::produce::ProduceReply::Respond(body) => Some(*body),
                handlers::produce::ProduceReply::Nothing => None,
                handlers::produce::ProduceReply::CloseConnection => {
                    return Err(DispatchError::AcksZeroProduceFailed)
                }
            }
        }
        RequestKind::Fetch(r) => {
            Some(handlers::fetch::handle(&auth, fetch_services(ctx, listener), version, r).await)
        }
        RequestKind::ListOffsets(r) => {
            Some(handlers::list_offsets::handle(&auth, &ctx.cache, &ctx.replicas, version, r).await)
        }
        RequestKind::InitProducerId(r) => Some(
            handlers::init_producer_id::handle(
                &auth,
                &ctx.producer_ids,
                &ctx.txns,
                &ctx.controller,
                version,
                r,
            )
            .await,
        ),
        RequestKind::AddPartitionsToTxn(r) => Some(
            handlers::add_partitions_to_txn::handle(&auth, &ctx.txns, &ctx.image(), version, r)
                .await,
        ),
        RequestKind::AddOffsetsToTxn(r) => Some(
            handlers::add_offsets_to_txn::handle(&auth, &ctx.txns, &ctx.groups, version, r).await,
        ),
        RequestKind::EndTxn(r) => {
            Some(handlers::end_txn::handle(&auth, &ctx.txns, version, r).await)
        }
        RequestKind::WriteTxnMarkers(r) => Some(
            handlers::write_txn_markers::handle(
                &ctx.replicas,
                &ctx.groups,
                &ctx.image(),
                ctx.clock.now_ms(),
                version,
                r,
            )
            .await,
        ),
        RequestKind::DescribeProducers(r) => Some(handlers::describe_producers::handle(
            &ctx.replicas,
            &ctx.image(),
            version,
            r,
        )),
        RequestKind::DescribeTransactions(r) => Some(handlers::describe_transactions::handle(
            &auth, &ctx.txns, version, r,
        )),
        RequestKind::ListTransactions(r) => Some(handlers::list_transactions::handle(
            &auth,
            &ctx.txns,
            ctx.clock.now_ms(),
            version,
            r,
        )),
        RequestKind::OffsetForLeaderEpoch(r) => Some(handlers::offset_for_leader_epoch::handle(
            &ctx.replicas,
            &ctx.image(),
            version,
            r,
        )),
        RequestKind::CreateTopics(r) => Some(
            handlers::create_topics::handle(
                &auth,
                &ctx.controller,
                &ctx.replicas,
                &ctx.config,
                version,
                r,
            )
            .await,
        ),
        RequestKind::DeleteTopics(r) => {
            Some(handlers::delete_topics::handle(&ctx.controller, &ctx.cache, version, r).await)
        }
        RequestKind::CreatePartitions(r) => {
            Some(handlers::create_partitions::handle(&ctx.controller, version, r).await)
        }
        RequestKind::DeleteRecords(r) => {
            Some(handlers::delete_records::handle(&ctx.replicas, &ctx.image(), version, r).await)
        }
        RequestKind::DescribeConfigs(r) => Some(handlers::describe_configs::handle(
            &ctx.cache,
            &ctx.replicas,
            &ctx.config,
            version,
            r,
        )),
        RequestKind::AlterConfigs(r) => Some(
            handlers::alter_configs::handle_on(
                &ctx.controller,
                version,
                r,
                handlers::incremental_alter_configs::Receiver::Broker {
                    node_id: ctx.node_id,
                },
            )
            .await,
        ),
        RequestKind::IncrementalAlterConfigs(r) => Some(
            handlers::incremental_alter_configs::handle(&ctx.controller, ctx.node_id, version, r)
                .await,
        ),
        RequestKind::AlterReplicaLogDirs(r) => Some(handlers::alter_replica_log_dirs::handle(
            &ctx.replicas,
            &ctx.image(),
            version,
            r,
        )),
        RequestKind::DescribeLogDirs(r) => Some(handlers::describe_log_dirs::handle(
            &ctx.replicas,
            version,
            r,
        )),
        RequestKind::ElectLeaders(r) => {
            Some(handlers::elect_leaders::handle(&ctx.controller, &ctx.cache, version, r).await)
        }
        RequestKind::AlterPartitionReassignments(r) => {
            Some(handlers::alter_partition_reassignments::handle(&ctx.controller, version, r).await)
        }
        RequestKind::ListPartitionReassignments(r) => Some(
            handlers::list_partition_reassignments::handle(&ctx.image(), version, r),
        ),
        RequestKind::DescribeQuorum(r) => Some(handlers::describe_quorum::handle(
            &ctx.controller,
            &ctx.config.kraft,
            version,
            r,
        )),
        RequestKind::DescribeAcls(r) => Some(match auth.image() {
            Some(image) => handlers::acls::describe_with(image, r),
            None => handlers::acls::describe(version, r),
        }),
        RequestKind::CreateAcls(r) => Some(if auth.is_enabled() {
            handlers::acls::create_with(&ctx.controller, r).await
        } else {
            handlers::acls::create(version, r)
        }),
        RequestKind::DeleteAcls(r) => Some(if auth.is_enabled() {
            handlers::acls::delete_with(&ctx.controller, r).await
        } else {
            handlers::acls::delete(version, r)
        }),
        RequestKind::DescribeClientQuotas(r) => Some(handlers::describe_client_quotas::handle(r)),
        RequestKind::DescribeUserScramCredentials(r) => {
            Some(handlers::user_scram_credentials::describe(
                &ctx.image(),
                &ctx.config.file_scram_credentials(),
                r,
            ))
        }
        RequestKind::AlterUserScramCredentials(r) => {
            Some(handlers::user_scram_credentials::alter(&ctx.controller, r).await)
        }
        RequestKind::DescribeCluster(r) => Some(handlers::describe_cluster::handle(
            &auth,
            &ctx.image(),
            listener,
            version,
            r,
        )),
        RequestKind::ListConfigResources(r) => Some(handlers::list_config_resources::handle(
            &ctx.image(),
            version,
            r,
        )),
        RequestKind::DescribeTopicPartitions(r) => Some(
            handlers::describe_topic_partitions::handle(&auth, &ctx.image(), listener, version, r),
        ),
        RequestKind::FindCoordinator(r) => Some(
            handlers::find_coordinator::handle(&auth, &ctx.groups, &ctx.txns, listener, version, r)
                .await,
        ),
        RequestKind::JoinGroup(r) => {
            Some(handlers::join_group::handle(&auth, &ctx.groups, ctx.image(), caller(), r).await)
        }
        RequestKind::SyncGroup(r) => {
            Some(handlers::sync_group::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::Heartbeat(r) => {
            Some(handlers::heartbeat::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::LeaveGroup(r) => {
            Some(handlers::leave_group::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::OffsetCommit(r) => Some(
            handlers::offset_commit::handle(&auth, &ctx.groups, &ctx.image(), caller(), r).await,
        ),
        RequestKind::OffsetFetch(r) => {
            Some(handlers::offset_fetch::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::ListGroups(r) => {
            Some(handlers::list_groups::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::DescribeGroups(r) => {
            Some(handlers::describe_groups::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::DeleteGroups(r) => {
            Some(handlers::delete_groups::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::OffsetDelete(r) => {
            Some(handlers::offset_delete::handle(&auth, &ctx.groups, caller(), r).await)
        }
        RequestKind::TxnOffsetCommit(r) => Some(
            handlers::txn_offset_commit::handle(&auth, &ctx.groups, &ctx.txns, caller(), r).await,
        ),
        RequestKind::ConsumerGroupHeartbeat(r) => Some(
            handlers::consumer_group_heartbeat::handle(
                &auth,
                &ctx.groups,
                ctx.image(),
                caller(),
                r,
            )
            .await,
        ),
        RequestKind::ConsumerGroupDescribe(r) => Some(
            handlers::consumer_group_describe::handle(&auth, &ctx.groups, ctx.image(), caller(), r)
                .await,
        ),
        _ => return Err(DispatchError::NoHandler(api_key)),
    };
    tracing::trace!(?api_key, version, correlation_id, client = ?header.client_id, "handled");
    let body = body.map(answer);
    match body {
        None => Ok(None),
        Some(body) => {
            let encoding = std::time::Instant::now();
            let response =
                protocol::frame::encode_response_frame(api_key, version, correlation_id, &body)?;
            if api_key == ApiKey::Produce {
                ctx.request_stats
                    .produce_stage("encode", encoding.elapsed());
            }
            Ok(Some(response))
        }
    }
}
