//! IncrementalAlterConfigs (key 44), v0-1: topic configs with SET / DELETE / APPEND / SUBTRACT,
//! validated and committed through the controller (validate_only supported). Broker configs
//! cannot be changed dynamically yet: setting one is refused with INVALID_REQUEST, naming the
//! keys; deleting one (never set) succeeds without change.

use std::sync::Arc;

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ResponseKind,
};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::context::Context;
use crate::controller::AlterConfigOp;
use crate::errors::ApiError;

pub async fn handle(
    ctx: &Arc<Context>,
    _version: i16,
    request: IncrementalAlterConfigsRequest,
) -> ResponseKind {
    let mut responses = Vec::with_capacity(request.resources.len());
    for res in request.resources {
        {
            let name = res.resource_name.as_str().to_owned();
            let result = match res.resource_type {
                RESOURCE_TOPIC => {
                    let ops: Result<Vec<_>, ApiError> = res
                        .configs
                        .iter()
                        .map(|c| {
                            let op =
                                AlterConfigOp::from_code(c.config_operation).ok_or_else(|| {
                                    ApiError::InvalidRequest(format!(
                                        "Unknown config operation {}",
                                        c.config_operation
                                    ))
                                })?;
                            Ok((
                                c.name.as_str().to_owned(),
                                op,
                                c.value.as_ref().map(|v| v.as_str().to_owned()),
                            ))
                        })
                        .collect();
                    match ops {
                        Ok(ops) => {
                            ctx.controller
                                .alter_topic_configs(name, ops, request.validate_only)
                                .await
                        }
                        Err(e) => Err(e),
                    }
                }
                RESOURCE_BROKER => {
                    let ours = name.is_empty() || name == ctx.node_id.to_string();
                    let deletes_only = res.configs.iter().all(|c| {
                        AlterConfigOp::from_code(c.config_operation) == Some(AlterConfigOp::Delete)
                    });
                    if ours && deletes_only {
                        // No broker config is ever set dynamically here, so deleting one
                        // changes nothing and succeeds, as in Kafka (tools such as
                        // kafka-reassign-partitions clear throttles this way).
                        Ok(())
                    } else {
                        let keys: Vec<&str> = res.configs.iter().map(|c| c.name.as_str()).collect();
                        Err(ApiError::InvalidRequest(format!(
                            "Cannot update these configs dynamically: {keys:?}"
                        )))
                    }
                }
                other => Err(ApiError::InvalidRequest(format!(
                    "Unsupported resource type {other}"
                ))),
            };
            let mut r = AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            if let Err(e) = result {
                r.error_code = e.code();
                r.error_message = Some(str_bytes(&e.message()));
            }
            responses.push(r);
        }
    }
    ResponseKind::IncrementalAlterConfigs(
        IncrementalAlterConfigsResponse::default().with_responses(responses),
    )
}
