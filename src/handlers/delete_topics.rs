//! DeleteTopics (key 20), v1-6: by name, or by topic id (v6), through the controller. The
//! replica manager deletes the partitions' logs when the new image is published.

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, ResponseKind};
use uuid::Uuid;

use super::{str_bytes, topic_name};
use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::metadata::MetadataCache;

pub async fn handle(
    controller: &ControllerChannel,
    cache: &MetadataCache,
    version: i16,
    request: DeleteTopicsRequest,
) -> ResponseKind {
    let wanted: Vec<(Option<String>, Uuid)> = if version >= 6 {
        request
            .topics
            .iter()
            .map(|t| {
                // A non-zero id wins over the name, as in Kafka.
                let name = t
                    .name
                    .as_ref()
                    .map(|n| n.0.as_str().to_owned())
                    .filter(|_| t.topic_id.is_nil());
                (name, t.topic_id)
            })
            .collect()
    } else {
        request
            .topic_names
            .iter()
            .map(|n| (Some(n.0.as_str().to_owned()), Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        {
            let image = cache.image();
            let resolved = match &name {
                Some(n) => image
                    .topic(n)
                    .map(|t| (t.name.clone(), t.id))
                    .ok_or(ApiError::UnknownTopicOrPartition),
                None => image
                    .topic_by_id(&id)
                    .map(|t| (t.name.clone(), t.id))
                    .ok_or(ApiError::UnknownTopicId),
            };
            let result = match resolved {
                Ok((n, id)) => controller.delete_topic(id).await.map(|_| (n, id)),
                Err(e) => Err(e),
            };
            let mut r = DeletableTopicResult::default();
            match result {
                Ok((n, id)) => {
                    r.name = Some(topic_name(&n));
                    if version >= 6 {
                        r.topic_id = id;
                    }
                }
                Err(e) => {
                    r.name = name.as_deref().map(topic_name);
                    if version >= 6 {
                        r.topic_id = id;
                    }
                    r.error_code = e.code();
                    if version >= 5 {
                        r.error_message = Some(str_bytes(&e.message()));
                    }
                }
            }
            responses.push(r);
        }
    }
    ResponseKind::DeleteTopics(DeleteTopicsResponse::default().with_responses(responses))
}
