//! DescribeCluster (key 60), v0-2: cluster id, controller id and brokers (with rack). A single
//! node has no fenced brokers, so v2's `include_fenced_brokers` changes nothing.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, ResponseKind,
};

use super::str_bytes;
use crate::context::Context;
use crate::errors::ApiError;

/// `endpoint_type` 1 = brokers (2 = controllers, which we do not expose separately).
const ENDPOINT_TYPE_BROKERS: i8 = 1;

pub fn handle(ctx: &Arc<Context>, version: i16, request: DescribeClusterRequest) -> ResponseKind {
    let image = ctx.image();
    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&image.cluster_id))
        .with_controller_id(BrokerId(image.controller_id))
        .with_brokers(
            image
                .brokers
                .values()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.node_id))
                        .with_host(str_bytes(&b.host))
                        .with_port(i32::from(b.port))
                        .with_rack(b.rack.as_deref().map(str_bytes))
                })
                .collect(),
        );
    if version >= 1 {
        response.endpoint_type = request.endpoint_type;
        if request.endpoint_type != ENDPOINT_TYPE_BROKERS {
            let e = ApiError::UnsupportedVersion;
            response.error_code = e.code();
            response.error_message = Some(str_bytes("only broker endpoints are described"));
            response.brokers.clear();
        }
    }
    ResponseKind::DescribeCluster(response)
}
