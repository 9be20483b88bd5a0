//! IncrementalAlterConfigs (key 44), v0-1: topic configs and dynamic broker configs (per broker,
//! resource name = this node's id, or the cluster default, empty name) with SET / DELETE /
//! APPEND / SUBTRACT, validated and committed through the controller (validate_only supported).
//! Which broker keys may change is [`crate::config::dynamic`]'s.
//!
//! A broker takes a BROKER resource only for its own id (or the default), as Kafka's
//! `ConfigAdminManager` checks; the controller listener, which receives what brokers forward,
//! takes any broker id (Kafka's `ControllerConfigurationValidator#validateBrokerName`): a
//! change for broker 2 sent to broker 2 is committed by whichever node is the controller.
//! Before forwarding a change of its own resource the broker loads its listeners' new key and
//! trust stores, which are its files ([`OwnConfig`]).

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestKind, ResponseKind,
};

use std::collections::BTreeMap;
use std::sync::Arc;

use super::authz::admin::Refused;
use super::describe_configs::{check_broker_resource, RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::config::{dynamic, BrokerConfig};
use crate::controller::{AlterConfigOp, ControllerChannel};
use crate::errors::ApiError;
use crate::metadata::MetadataImage;

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

/// What the broker a change of its own BROKER resource is sent to checks before the controller
/// commits it (Kafka's `ConfigAdminManager#validateBrokerConfigChange`): that its listeners'
/// new stores load from its own files and keep their certificate's names
/// ([`dynamic::check_listener_stores`]). A failure is INVALID_REQUEST, as Kafka answers it.
pub struct OwnConfig {
    static_config: Arc<BrokerConfig>,
    current: Arc<BrokerConfig>,
    /// The broker's per-broker dynamic layer in the latest image.
    layer: BTreeMap<String, String>,
}

impl OwnConfig {
    pub fn new(
        static_config: Arc<BrokerConfig>,
        current: Arc<BrokerConfig>,
        image: &MetadataImage,
    ) -> OwnConfig {
        let layer = image
            .broker_configs
            .get(&static_config.node_id.to_string())
            .cloned()
            .unwrap_or_default();
        OwnConfig {
            static_config,
            current,
            layer,
        }
    }

    /// The check of a change that leaves the per-broker layer as `layer`. Nothing is loaded
    /// when a key is refused anyway (the controller answers that first, as Kafka does).
    pub fn check_layer(&self, layer: &BTreeMap<String, String>) -> Result<(), ApiError> {
        if layer.keys().any(|k| !dynamic::is_dynamic(k)) {
            return Ok(());
        }
        dynamic::check_listener_stores(&self.static_config, &self.current, layer)
            .map_err(ApiError::InvalidRequest)
    }

    /// Takes out of an IncrementalAlterConfigs or AlterConfigs request the changes of this
    /// broker's resource that fail [`OwnConfig`]'s check, before the request is handled or
    /// forwarded to the active controller (Kafka's `ConfigAdminManager#preprocess`); their
    /// answers, for [`Refused::merge`].
    pub fn take_failed(&self, body: &mut RequestKind) -> Option<Refused> {
        let own = self.static_config.node_id.to_string();
        let mine = |resource_type: i8, name: &str| resource_type == RESOURCE_BROKER && name == own;
        match body {
            RequestKind::IncrementalAlterConfigs(r) => {
                let mut failed = Vec::new();
                r.resources.retain(|res| {
                    if !mine(res.resource_type, &res.resource_name) {
                        return true;
                    }
                    let Err(e) = ops(res).and_then(|ops| self.check_ops(&ops)) else {
                        return true;
                    };
                    failed.push(
                        AlterConfigsResourceResponse::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(e.code())
                            .with_error_message(Some(str_bytes(&e.message()))),
                    );
                    false
                });
                Some(Refused::IncrementalAlterConfigs(failed))
            }
            RequestKind::AlterConfigs(r) => {
                use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as Answer;
                let mut failed = Vec::new();
                r.resources.retain(|res| {
                    if !mine(res.resource_type, &res.resource_name) {
                        return true;
                    }
                    // The listed configs become the broker's whole per-broker layer.
                    let layer = res
                        .configs
                        .iter()
                        .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                        .collect();
                    let Err(e) = self.check_layer(&layer) else {
                        return true;
                    };
                    failed.push(
                        Answer::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(e.code())
                            .with_error_message(Some(str_bytes(&e.message()))),
                    );
                    false
                });
                Some(Refused::AlterConfigs(failed))
            }
            _ => None,
        }
    }

    fn check_ops(&self, ops: &Ops) -> Result<(), ApiError> {
        if !ops
            .iter()
            .any(|(n, _, _)| dynamic::listener_ssl_key(n).is_some())
        {
            return Ok(());
        }
        let mut layer = self.layer.clone();
        for (name, op, value) in ops {
            match (op, value) {
                (AlterConfigOp::Set, Some(v)) => {
                    layer.insert(name.clone(), v.clone());
                }
                (AlterConfigOp::Delete, _) => {
                    layer.remove(name);
                }
                _ => {}
            }
        }
        self.check_layer(&layer)
    }
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
