//! CreatePartitions (key 37), v0-3: grow a topic through the controller (validate_only
//! supported, optional manual assignments).

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, ResponseKind};

use super::str_bytes;
use crate::controller::ControllerChannel;

pub async fn handle(
    controller: &ControllerChannel,
    _version: i16,
    request: CreatePartitionsRequest,
) -> ResponseKind {
    let mut results = Vec::with_capacity(request.topics.len());
    for t in request.topics {
        {
            let assignments = t.assignments.as_ref().map(|list| {
                list.iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            });
            let result = controller
                .create_partitions(
                    t.name.0.as_str().to_owned(),
                    t.count,
                    assignments,
                    request.validate_only,
                )
                .await;
            let mut r = CreatePartitionsTopicResult::default().with_name(t.name);
            if let Err(e) = result {
                r.error_code = e.code();
                r.error_message = Some(str_bytes(&e.message()));
            }
            results.push(r);
        }
    }
    ResponseKind::CreatePartitions(CreatePartitionsResponse::default().with_results(results))
}
