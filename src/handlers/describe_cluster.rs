//! DescribeCluster (key 60), v0-2: cluster id, the active controller's id and the unfenced
//! brokers (with rack) at their endpoint of the client's listener; v2's
//! `include_fenced_brokers` adds the fenced ones, marked `is_fenced` (KIP-1073).

use super::authz::{RequestAuth, Resource, CLUSTER_NAME};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, ResponseKind,
};

use super::str_bytes;
use crate::config::kraft::KraftConfig;
use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::metadata::MetadataImage;

/// `endpoint_type` 1 = brokers, 2 = controllers (KIP-919).
const ENDPOINT_TYPE_BROKERS: i8 = 1;
const ENDPOINT_TYPE_CONTROLLERS: i8 = 2;

/// `listener`: the listener the client's connection came in on, whose endpoints are answered.
/// KIP-430: the caller's authorized operations on the cluster when asked for.
pub fn handle(
    auth: &RequestAuth,
    image: &MetadataImage,
    listener: &str,
    version: i16,
    request: DescribeClusterRequest,
) -> ResponseKind {
    let include_fenced = version >= 2 && request.include_fenced_brokers;
    let brokers = image
        .brokers
        .values()
        .filter(|b| include_fenced || !b.fenced)
        .filter_map(|b| {
            let e = b.endpoint(listener)?;
            let mut broker = DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.node_id))
                .with_host(str_bytes(&e.host))
                .with_port(i32::from(e.port))
                .with_rack(b.rack.as_deref().map(str_bytes));
            if version >= 2 {
                broker.is_fenced = b.fenced;
            }
            Some(broker)
        })
        .collect();
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&image.cluster_id))
        .with_controller_id(BrokerId(image.controller_id))
        .with_brokers(brokers);
    response.cluster_authorized_operations = auth.operations_if(
        request.include_cluster_authorized_operations,
        Resource::Cluster,
        CLUSTER_NAME,
    );
    if version >= 1 {
        response.endpoint_type = request.endpoint_type;
        if request.endpoint_type != ENDPOINT_TYPE_BROKERS {
            let e = ApiError::UnsupportedEndpointType(
                "The broker listener only describes brokers".into(),
            );
            response.error_code = e.code();
            response.error_message = Some(str_bytes(&e.message()));
            response.brokers.clear();
        }
    }
    ResponseKind::DescribeCluster(response)
}

/// DescribeCluster on the controller listener (`--bootstrap-controller`): the voters at their
/// controller endpoints, and the active controller; brokers are the broker listener's to
/// describe, as in Kafka.
pub fn handle_controllers(
    image: &MetadataImage,
    controller: &ControllerChannel,
    kraft: &KraftConfig,
    version: i16,
    request: DescribeClusterRequest,
) -> ResponseKind {
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&image.cluster_id))
        .with_controller_id(BrokerId(controller.active_controller()));
    if version < 1 || request.endpoint_type != ENDPOINT_TYPE_CONTROLLERS {
        let e = ApiError::UnsupportedEndpointType(
            "The controller listener only describes controllers".into(),
        );
        response.error_code = e.code();
        response.error_message = Some(str_bytes(&e.message()));
        return ResponseKind::DescribeCluster(response);
    }
    response.endpoint_type = ENDPOINT_TYPE_CONTROLLERS;
    response.brokers = kraft
        .voters
        .iter()
        .map(|v| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(v.id))
                .with_host(str_bytes(&v.host))
                .with_port(i32::from(v.port))
                .with_rack(
                    image
                        .broker(v.id)
                        .and_then(|b| b.rack.as_deref())
                        .map(str_bytes),
                )
        })
        .collect();
    ResponseKind::DescribeCluster(response)
}
