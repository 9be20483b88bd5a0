//! IncrementalAlterConfigs (key 44), v0-1: topic configs and dynamic broker configs (per broker,
//! resource name = this node's id, or the cluster default, empty name) with SET / DELETE /
//! APPEND / SUBTRACT, validated and committed through the controller (validate_only supported).
//! Which broker keys may change is [`crate::config::dynamic`]'s.
//!
//! A broker takes a BROKER resource only for its own id (or the default), as Kafka's
//! `ConfigAdminManager` checks; the controller listener, which receives what brokers forward,
//! takes any broker id (Kafka's `ControllerConfigurationValidator#validateBrokerName`): a
//! change for broker 2 sent to broker 2 is committed by whichever node is the controller.

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};

use super::describe_configs::{check_broker_resource, RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::controller::{AlterConfigOp, ControllerChannel};
use crate::errors::ApiError;

type Ops = Vec<(String, AlterConfigOp, Option<String>)>;

fn ops(res: &AlterConfigsResource) -> Result<Ops, ApiError> {
    res.configs
        .iter()
        .map(|c| {
            let op = AlterConfigOp::from_code(c.config_operation).ok_or_else(|| {
                ApiError::InvalidRequest(format!("Unknown config operation {}", c.config_operation))
            })?;
            Ok((
                c.name.as_str().to_owned(),
                op,
                c.value.as_ref().map(|v| v.as_str().to_owned()),
            ))
        })
        .collect()
}

/// Where the request arrived: the client listener of broker `node_id`, or the controller
/// listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    Broker { node_id: i32 },
    Controller,
}

/// Kafka's controller-side check of a BROKER resource name: empty or a broker id.
fn check_broker_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Ok(());
    }
    match name.parse::<i32>() {
        Ok(id) if id >= 0 => Ok(()),
        Ok(_) => Err(ApiError::InvalidRequest(
            "Invalid negative broker ID.".into(),
        )),
        Err(_) => Err(ApiError::InvalidRequest(format!(
            "Invalid broker name {name}"
        ))),
    }
}

/// The BROKER resource names a request that arrived on `receiver` may carry.
pub fn check_broker_name_on(name: &str, receiver: Receiver) -> Result<(), ApiError> {
    match receiver {
        Receiver::Broker { node_id } => check_broker_resource(node_id, name),
        Receiver::Controller => check_broker_name(name),
    }
}

async fn alter(
    controller: &ControllerChannel,
    res: &AlterConfigsResource,
    validate_only: bool,
    receiver: Receiver,
) -> Result<(), ApiError> {
    let name = res.resource_name.as_str().to_owned();
    match res.resource_type {
        RESOURCE_TOPIC => {
            controller
                .alter_topic_configs(name, ops(res)?, validate_only)
                .await
        }
        RESOURCE_BROKER => {
            check_broker_name_on(&name, receiver)?;
            controller
                .alter_broker_configs(name, ops(res)?, validate_only)
                .await
        }
        other => Err(ApiError::InvalidRequest(format!(
            "Unsupported resource type {other}"
        ))),
    }
}

/// On the client listener of broker `node_id`.
pub async fn handle(
    controller: &ControllerChannel,
    node_id: i32,
    version: i16,
    request: IncrementalAlterConfigsRequest,
) -> ResponseKind {
    handle_on(controller, version, request, Receiver::Broker { node_id }).await
}

pub async fn handle_on(
    controller: &ControllerChannel,
    _version: i16,
    request: IncrementalAlterConfigsRequest,
    receiver: Receiver,
) -> ResponseKind {
    let mut responses = Vec::with_capacity(request.resources.len());
    for res in request.resources {
        let result = alter(controller, &res, request.validate_only, receiver).await;
        let mut r = AlterConfigsResourceResponse::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name);
        if let Err(e) = result {
            r.error_code = e.code();
            r.error_message = Some(str_bytes(&e.message()));
        }
        responses.push(r);
    }
    ResponseKind::IncrementalAlterConfigs(
        IncrementalAlterConfigsResponse::default().with_responses(responses),
    )
}
