//! AlterConfigs (key 33), v0-2, the legacy API: the configs of each TOPIC or BROKER resource
//! are replaced as a whole (a key not listed is deleted), validated and committed through the
//! controller like IncrementalAlterConfigs ([`super::incremental_alter_configs`]), whose
//! resource-name checks it shares (validate_only supported).

use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ResponseKind};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::incremental_alter_configs::{check_broker_name_on, Receiver};
use super::str_bytes;
use crate::controller::{ConfigResource, ControllerChannel};
use crate::errors::ApiError;

async fn replace(
    controller: &ControllerChannel,
    res: &AlterConfigsResource,
    validate_only: bool,
    receiver: Receiver,
) -> Result<(), ApiError> {
    let name = res.resource_name.as_str().to_owned();
    let resource = match res.resource_type {
        RESOURCE_TOPIC => ConfigResource::Topic(name),
        RESOURCE_BROKER => {
            check_broker_name_on(&name, receiver)?;
            ConfigResource::Broker(name)
        }
        other => {
            return Err(ApiError::InvalidRequest(format!(
                "Unsupported resource type {other}"
            )))
        }
    };
    let configs = res
        .configs
        .iter()
        .map(|c| {
            (
                c.name.as_str().to_owned(),
                c.value.as_ref().map(|v| v.as_str().to_owned()),
            )
        })
        .collect();
    let broker = matches!(resource, ConfigResource::Broker(_));
    controller
        .replace_configs(resource, configs, validate_only)
        .await
        .map_err(|e| match e {
            // Kafka's broker checks a BROKER resource's values before forwarding this API
            // (`ConfigAdminManager#validateBrokerConfigChange`) and answers INVALID_REQUEST.
            ApiError::InvalidConfig(why) if broker => ApiError::InvalidRequest(why),
            other => other,
        })
}

pub async fn handle_on(
    controller: &ControllerChannel,
    _version: i16,
    request: AlterConfigsRequest,
    receiver: Receiver,
) -> ResponseKind {
    let mut responses = Vec::with_capacity(request.resources.len());
    for res in request.resources {
        let result = replace(controller, &res, request.validate_only, receiver).await;
        let mut r = AlterConfigsResourceResponse::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name);
        if let Err(e) = result {
            r.error_code = e.code();
            r.error_message = Some(str_bytes(&e.message()));
        }
        responses.push(r);
    }
    ResponseKind::AlterConfigs(AlterConfigsResponse::default().with_responses(responses))
}
