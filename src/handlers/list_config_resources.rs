//! ListConfigResources (key 74), v0-1 (KIP-1142; v0 was ListClientMetricsResources): the
//! resources that configs can be described for, as the Java `Admin.listConfigResources` asks.
//!
//! v0 knows only client-metrics resources; v1 takes a list of resource types and, when it is
//! empty, means every type v1 knows: topics, brokers, broker loggers, client metrics and groups.
//! A type outside what the version knows answers UNSUPPORTED_VERSION with no resources, as
//! Kafka's `KafkaApis.handleListConfigResources` does.
//!
//! What exists of each type here: every topic of the metadata image, and every unfenced broker
//! (once as a broker, once as its broker logger). KafkaIQ has no client-metrics subscriptions and
//! no group configs, so those types list nothing.

use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{
    ListConfigResourcesRequest, ListConfigResourcesResponse, ResponseKind,
};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::errors::ApiError;
use crate::metadata::MetadataImage;

/// `ConfigResource.Type` ids beyond the two DescribeConfigs answers for.
const RESOURCE_BROKER_LOGGER: i8 = 8;
const RESOURCE_CLIENT_METRICS: i8 = 16;
const RESOURCE_GROUP: i8 = 32;

/// The resource types a request of `version` may ask for (Kafka's
/// `ListConfigResourcesRequest.supportedResourceTypes`).
fn supported_types(version: i16) -> &'static [i8] {
    if version == 0 {
        &[RESOURCE_CLIENT_METRICS]
    } else {
        &[
            RESOURCE_TOPIC,
            RESOURCE_BROKER,
            RESOURCE_BROKER_LOGGER,
            RESOURCE_CLIENT_METRICS,
            RESOURCE_GROUP,
        ]
    }
}

pub fn handle(
    image: &MetadataImage,
    version: i16,
    request: ListConfigResourcesRequest,
) -> ResponseKind {
    ResponseKind::ListConfigResources(list(image, version, &request.resource_types))
}

fn list(image: &MetadataImage, version: i16, asked: &[i8]) -> ListConfigResourcesResponse {
    let supported = supported_types(version);
    let types: &[i8] = if asked.is_empty() { supported } else { asked };
    if types.iter().any(|t| !supported.contains(t)) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ApiError::UnsupportedVersion.code());
    }
    let mut resources = Vec::new();
    let mut add = |name: String, resource_type: i8| {
        let mut r = ConfigResource::default().with_resource_name(str_bytes(&name));
        if version >= 1 {
            r.resource_type = resource_type;
        }
        resources.push(r);
    };
    // Kafka's order: groups, client metrics, broker loggers, brokers, topics.
    let brokers = || image.brokers.values().filter(|b| !b.fenced);
    if types.contains(&RESOURCE_BROKER_LOGGER) {
        brokers().for_each(|b| add(b.node_id.to_string(), RESOURCE_BROKER_LOGGER));
    }
    if types.contains(&RESOURCE_BROKER) {
        brokers().for_each(|b| add(b.node_id.to_string(), RESOURCE_BROKER));
    }
    if types.contains(&RESOURCE_TOPIC) {
        image
            .topics
            .keys()
            .for_each(|name| add(name.clone(), RESOURCE_TOPIC));
    }
    ListConfigResourcesResponse::default().with_config_resources(resources)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(r: &ListConfigResourcesResponse) -> (i16, Vec<(String, i8)>) {
        (
            r.error_code,
            r.config_resources
                .iter()
                .map(|c| (c.resource_name.to_string(), c.resource_type))
                .collect(),
        )
    }

    fn image() -> MetadataImage {
        let mut image = MetadataImage::default();
        for name in ["b", "a"] {
            image.topics.insert(
                name.to_owned(),
                std::sync::Arc::new(crate::metadata::TopicImage {
                    name: name.to_owned(),
                    id: uuid::Uuid::from_u128(1),
                    partitions: Default::default(),
                    configs: Default::default(),
                    history: Default::default(),
                }),
            );
        }
        image
    }

    #[test]
    fn types_by_version() {
        let image = image();
        let topics = vec![
            ("a".to_owned(), RESOURCE_TOPIC),
            ("b".to_owned(), RESOURCE_TOPIC),
        ];
        assert_eq!(shape(&list(&image, 1, &[])), (0, topics.clone()));
        assert_eq!(shape(&list(&image, 1, &[RESOURCE_TOPIC])), (0, topics));
        assert_eq!(shape(&list(&image, 1, &[RESOURCE_GROUP])), (0, vec![]));
        // v0 lists client metrics only, and refuses anything else.
        assert_eq!(shape(&list(&image, 0, &[])), (0, vec![]));
        let unsupported = ApiError::UnsupportedVersion.code();
        assert_eq!(
            shape(&list(&image, 0, &[RESOURCE_TOPIC])),
            (unsupported, vec![])
        );
        assert_eq!(
            shape(&list(&image, 1, &[RESOURCE_TOPIC, 1])),
            (unsupported, vec![])
        );
    }
}
