//! The broker-lifecycle APIs a controller serves on its listener: BrokerRegistration (62,
//! v0–4), BrokerHeartbeat (63, v0–1), AlterPartition (56, v2–3) and AllocateProducerIds (67,
//! v0). Each carries the connection it came on, so the controller can fence a broker the moment
//! that connection closes. Answers NOT_CONTROLLER where this node is not the active controller.

use kafka_protocol::messages::alter_partition_response::{
    PartitionData as AlterPartitionPartitionResponse, TopicData as AlterPartitionTopicResponse,
};
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, AlterPartitionRequest,
    AlterPartitionResponse, BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerId,
    BrokerRegistrationRequest, BrokerRegistrationResponse, ProducerId, ResponseKind,
};

use crate::controller::AlterPartitionItem;
use crate::controller::ControllerChannel;
use crate::metadata::BrokerRegistration;

pub async fn broker_registration(
    controller: &ControllerChannel,
    request: BrokerRegistrationRequest,
    connection: u64,
) -> ResponseKind {
    let mut registration = BrokerRegistration::new(
        request.broker_id.0,
        request.incarnation_id,
        request.rack.map(|r| r.to_string()),
    );
    for l in request.listeners {
        registration = registration.with_listener(
            l.name.to_string(),
            l.host.to_string(),
            l.port,
            l.security_protocol,
        );
    }
    let result = controller
        .broker_registration(
            registration,
            request.cluster_id.to_string(),
            Some(connection),
        )
        .await;
    let mut response = BrokerRegistrationResponse::default().with_broker_epoch(-1);
    match result {
        Ok(epoch) => response.broker_epoch = epoch,
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::BrokerRegistration(response)
}

pub async fn broker_heartbeat(
    controller: &ControllerChannel,
    request: BrokerHeartbeatRequest,
    connection: u64,
) -> ResponseKind {
    // KafkaIQ's own tagged field: the loads of the partitions the broker leads. A malformed
    // one is ignored (the heartbeat itself stands); the controller waits for a good report.
    let loads = request
        .unknown_tagged_fields
        .get(&crate::controller::decisions::LOAD_REPORT_TAG)
        .and_then(|b| crate::controller::decisions::decode_load_report(b));
    let result = controller
        .broker_heartbeat(
            request.broker_id.0,
            request.broker_epoch,
            request.current_metadata_offset,
            request.want_fence,
            request.want_shut_down,
            Some(connection),
            loads,
        )
        .await;
    // Kafka's defaults for a refused heartbeat: not caught up, fenced.
    let mut response = BrokerHeartbeatResponse::default()
        .with_is_caught_up(false)
        .with_is_fenced(true);
    match result {
        Ok(outcome) => {
            response.is_caught_up = outcome.is_caught_up;
            response.is_fenced = outcome.is_fenced;
            response.should_shut_down = outcome.should_shut_down;
        }
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::BrokerHeartbeat(response)
}

pub async fn alter_partition(
    controller: &ControllerChannel,
    version: i16,
    request: AlterPartitionRequest,
) -> ResponseKind {
    let mut items = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            let new_isr = if version >= 3 {
                p.new_isr_with_epochs
                    .iter()
                    .map(|b| (b.broker_id.0, b.broker_epoch))
                    .collect()
            } else {
                p.new_isr.iter().map(|b| (b.0, -1)).collect()
            };
            items.push(AlterPartitionItem {
                topic_id: t.topic_id,
                partition: p.partition_index,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr,
                leader_recovery_state: p.leader_recovery_state,
            });
        }
    }
    let result = controller
        .alter_partition(request.broker_id.0, request.broker_epoch, version, items)
        .await;
    let mut response = AlterPartitionResponse::default();
    match result {
        Err(e) => response.error_code = e.code(),
        Ok(results) => {
            let mut topics: Vec<AlterPartitionTopicResponse> = Vec::new();
            for r in results {
                let mut p = AlterPartitionPartitionResponse::default()
                    .with_partition_index(r.partition)
                    .with_leader_id(BrokerId(-1));
                match r.result {
                    Ok(reg) => {
                        p.leader_id = BrokerId(reg.leader);
                        p.leader_epoch = reg.leader_epoch;
                        p.isr = reg.isr.iter().map(|b| BrokerId(*b)).collect();
                        p.leader_recovery_state = reg.leader_recovery_state.to_wire();
                        p.partition_epoch = reg.partition_epoch;
                    }
                    Err(e) => p.error_code = e.code(),
                }
                match topics.last_mut() {
                    Some(t) if t.topic_id == r.topic_id => t.partitions.push(p),
                    _ => topics.push(
                        AlterPartitionTopicResponse::default()
                            .with_topic_id(r.topic_id)
                            .with_partitions(vec![p]),
                    ),
                }
            }
            response.topics = topics;
        }
    }
    ResponseKind::AlterPartition(response)
}

pub async fn allocate_producer_ids(
    controller: &ControllerChannel,
    request: AllocateProducerIdsRequest,
) -> ResponseKind {
    let mut response =
        AllocateProducerIdsResponse::default().with_producer_id_start(ProducerId(-1));
    match controller.allocate_producer_ids(request.broker_id.0).await {
        Ok(block) => {
            response.producer_id_start = ProducerId(block.first);
            response.producer_id_len = block.size as i32;
        }
        Err(e) => response.error_code = e.code(),
    }
    ResponseKind::AllocateProducerIds(response)
}
