//! Kafka's `AbstractRequest#getErrorResponse`: the answer to a request refused as a whole before
//! any handler ran. The error goes wherever the response has one (the top level, each entry, or
//! both), every entry the request names is answered (topics, partitions, groups, resources,
//! transactional ids, users), and the message goes into the fields that carry one in the version
//! answered. Two refusals use it: a request other than SaslAuthenticate in the middle of a SASL
//! exchange (ILLEGAL_SASL_STATE, `server/sasl.rs`) and a request of an API whose resource is the
//! cluster from a caller without that permission (CLUSTER_AUTHORIZATION_FAILED,
//! [`super::authz::refuse_cluster`]).
//!
//! Every API the request decoder accepts ([`crate::protocol::layouts::LAYOUTS`]) has an answer,
//! which the tests encode at every version decoded.

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// The answer to `request` (of `version`) refused with `error` and `message`; `None` for an API
/// the request decoder does not accept.
pub fn error_response(
    request: &RequestKind,
    version: i16,
    error: i16,
    message: Option<&str>,
) -> Option<ResponseKind> {
    let code = error;
    // The message, for a field that exists from version `since`.
    let msg = |since: i16| -> Option<StrBytes> {
        message
            .filter(|_| version >= since)
            .map(|m| StrBytes::from_string(m.to_owned()))
    };
    Some(match request {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(ApiVersionsResponse::default().with_error_code(code))
        }
        RequestKind::SaslHandshake(_) => {
            ResponseKind::SaslHandshake(SaslHandshakeResponse::default().with_error_code(code))
        }
        RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        RequestKind::Metadata(r) => ResponseKind::Metadata(
            MetadataResponse::default().with_topics(
                r.topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        // The name may be null in the response only from v12.
                        let name = match &t.name {
                            None if version < 12 => Some(TopicName(StrBytes::default())),
                            name => name.clone(),
                        };
                        metadata_response::MetadataResponseTopic::default()
                            .with_name(name)
                            .with_topic_id(t.topic_id)
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::Produce(r) => ResponseKind::Produce(
            ProduceResponse::default().with_responses(
                r.topic_data
                    .iter()
                    .map(|t| {
                        produce_response::TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partition_responses(
                                t.partition_data
                                    .iter()
                                    .map(|p| {
                                        produce_response::PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_error_code(code)
                                            .with_base_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::Fetch(r) => ResponseKind::Fetch(
            FetchResponse::default().with_error_code(code).with_responses(
                r.topics
                    .iter()
                    .map(|t| {
                        fetch_response::FetchableTopicResponse::default()
                            .with_topic(t.topic.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        fetch_response::PartitionData::default()
                                            .with_partition_index(p.partition)
                                            .with_error_code(code)
                                            .with_high_watermark(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(
            ListOffsetsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        list_offsets_response::ListOffsetsTopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        list_offsets_response::ListOffsetsPartitionResponse::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetForLeaderEpoch(r) => ResponseKind::OffsetForLeaderEpoch(
            OffsetForLeaderEpochResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        offset_for_leader_epoch_response::OffsetForLeaderTopicResult::default()
                            .with_topic(t.topic.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        offset_for_leader_epoch_response::EpochEndOffset::default()
                                            .with_partition(p.partition)
                                            .with_error_code(code)
                                            .with_leader_epoch(-1)
                                            .with_end_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteRecords(r) => ResponseKind::DeleteRecords(
            DeleteRecordsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        delete_records_response::DeleteRecordsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        delete_records_response::DeleteRecordsPartitionResult::default()
                                            .with_partition_index(p.partition_index)
                                            .with_low_watermark(-1)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        // Up to v3 one coordinator, with the error at the top; from v4 one per key.
        RequestKind::FindCoordinator(_) if version <= 3 => ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_error_message(msg(1))
                .with_node_id(BrokerId(-1))
                .with_port(-1),
        ),
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default().with_coordinators(
                r.coordinator_keys
                    .iter()
                    .map(|key| {
                        find_coordinator_response::Coordinator::default()
                            .with_key(key.clone())
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(code)
                            .with_error_message(msg(4))
                    })
                    .collect(),
            ),
        ),
        RequestKind::JoinGroup(_) => ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1),
        ),
        RequestKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::ListGroups(_) => {
            ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(
            DescribeGroupsResponse::default().with_groups(
                r.groups
                    .iter()
                    .map(|g| {
                        describe_groups_response::DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                            .with_error_message(msg(6))
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(
            DeleteGroupsResponse::default().with_results(
                r.groups_names
                    .iter()
                    .map(|g| {
                        delete_groups_response::DeletableGroupResult::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeResponse::default().with_groups(
                r.group_ids
                    .iter()
                    .map(|g| {
                        consumer_group_describe_response::DescribedGroup::default()
                            .with_group_id(g.clone())
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        offset_commit_response::OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        offset_commit_response::OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::TxnOffsetCommit(r) => ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        // Up to v7 one group, with the error at the top (from v2) and on each partition; from
        // v8 one entry per group.
        RequestKind::OffsetFetch(r) if version <= 7 => {
            use offset_fetch_response::*;
            ResponseKind::OffsetFetch(
                OffsetFetchResponse::default()
                    .with_error_code(code)
                    .with_topics(
                        r.topics
                            .iter()
                            .flatten()
                            .map(|t| {
                                OffsetFetchResponseTopic::default()
                                    .with_name(t.name.clone())
                                    .with_partitions(
                                        t.partition_indexes
                                            .iter()
                                            .map(|&p| {
                                                OffsetFetchResponsePartition::default()
                                                    .with_partition_index(p)
                                                    .with_committed_offset(-1)
                                                    .with_committed_leader_epoch(-1)
                                                    .with_metadata(Some(StrBytes::default()))
                                                    .with_error_code(code)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
            )
        }
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(
            OffsetFetchResponse::default().with_groups(
                r.groups
                    .iter()
                    .map(|g| {
                        offset_fetch_response::OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetDelete(r) => ResponseKind::OffsetDelete(
            OffsetDeleteResponse::default()
                .with_error_code(code)
                .with_topics(
                    r.topics
                        .iter()
                        .map(|t| super::offset_delete::topic_answered(t, code))
                        .collect(),
                ),
        ),
        RequestKind::InitProducerId(_) => ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        // Up to v3 the partitions of one transaction, each with the error; from v4 the error at
        // the top (each transaction's partitions unanswered, as Kafka's).
        RequestKind::AddPartitionsToTxn(r) if version <= 3 => ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
                super::add_partitions_to_txn::topic_results(&r.v3_and_below_topics, |_, _| code),
            ),
        ),
        RequestKind::AddPartitionsToTxn(_) => ResponseKind::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_error_code(code),
        ),
        RequestKind::AddOffsetsToTxn(_) => ResponseKind::AddOffsetsToTxn(
            AddOffsetsToTxnResponse::default().with_error_code(code),
        ),
        RequestKind::EndTxn(_) => ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(code)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        RequestKind::WriteTxnMarkers(r) => {
            use write_txn_markers_response::*;
            ResponseKind::WriteTxnMarkers(
                WriteTxnMarkersResponse::default().with_markers(
                    r.markers
                        .iter()
                        .map(|m| {
                            WritableTxnMarkerResult::default()
                                .with_producer_id(m.producer_id)
                                .with_topics(
                                    m.topics
                                        .iter()
                                        .map(|t| {
                                            WritableTxnMarkerTopicResult::default()
                                                .with_name(t.name.clone())
                                                .with_partitions(
                                                    t.partition_indexes
                                                        .iter()
                                                        .map(|&p| {
                                                            WritableTxnMarkerPartitionResult::default()
                                                                .with_partition_index(p)
                                                                .with_error_code(code)
                                                        })
                                                        .collect(),
                                                )
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            )
        }
        RequestKind::DescribeProducers(r) => ResponseKind::DescribeProducers(
            DescribeProducersResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        describe_producers_response::TopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        describe_producers_response::PartitionResponse::default()
                                            .with_partition_index(p)
                                            .with_error_code(code)
                                            .with_error_message(msg(0))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        RequestKind::DescribeTransactions(r) => ResponseKind::DescribeTransactions(
            DescribeTransactionsResponse::default().with_transaction_states(
                r.transactional_ids
                    .iter()
                    .map(|id| {
                        describe_transactions_response::TransactionState::default()
                            .with_transactional_id(id.clone())
                            .with_error_code(code)
                            .with_transaction_start_time_ms(-1)
                            .with_producer_id(ProducerId(-1))
                            .with_producer_epoch(-1)
                    })
                    .collect(),
            ),
        ),
        RequestKind::ListTransactions(_) => ResponseKind::ListTransactions(
            ListTransactionsResponse::default().with_error_code(code),
        ),
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        create_topics_response::CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(msg(1))
                            .with_num_partitions(-1)
                            .with_replication_factor(-1)
                    })
                    .collect(),
            ),
        ),
        // Up to v5 topics by name; from v6 by name or id, as the request gave them.
        RequestKind::DeleteTopics(r) => {
            use delete_topics_response::DeletableTopicResult;
            let results = if version <= 5 {
                r.topic_names
                    .iter()
                    .map(|name| DeletableTopicResult::default().with_name(Some(name.clone())))
                    .collect::<Vec<_>>()
            } else {
                r.topics
                    .iter()
                    .map(|t| {
                        DeletableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                    })
                    .collect()
            };
            ResponseKind::DeleteTopics(
                DeleteTopicsResponse::default().with_responses(
                    results
                        .into_iter()
                        .map(|t| t.with_error_code(code).with_error_message(msg(5)))
                        .collect(),
                ),
            )
        }
        RequestKind::CreatePartitions(r) => ResponseKind::CreatePartitions(
            CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        create_partitions_response::CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::DescribeTopicPartitions(r) => ResponseKind::DescribeTopicPartitions(
            DescribeTopicPartitionsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        describe_topic_partitions_response::DescribeTopicPartitionsResponseTopic::default()
                            .with_name(Some(t.name.clone()))
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DescribeConfigs(r) => ResponseKind::DescribeConfigs(
            DescribeConfigsResponse::default().with_results(
                r.resources
                    .iter()
                    .map(|res| {
                        describe_configs_response::DescribeConfigsResult::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::AlterConfigs(r) => ResponseKind::AlterConfigs(
            AlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|res| {
                        alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|res| {
                        incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(
            CreateAclsResponse::default().with_results(
                r.creations
                    .iter()
                    .map(|_| {
                        create_acls_response::AclCreationResult::default()
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(
                r.filters
                    .iter()
                    .map(|_| {
                        delete_acls_response::DeleteAclsFilterResult::default()
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::DescribeAcls(_) => ResponseKind::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        RequestKind::DescribeClientQuotas(_) => ResponseKind::DescribeClientQuotas(
            DescribeClientQuotasResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        // The error and its message, and a result carrying them for each user named (with no
        // user name).
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0))
                .with_results(
                    r.users
                        .iter()
                        .flatten()
                        .map(|_| {
                            describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default()
                                .with_error_code(code)
                                .with_error_message(msg(0))
                        })
                        .collect(),
                ),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            AlterUserScramCredentialsResponse::default().with_results(
                super::user_scram_credentials::every_user(r)
                    .into_iter()
                    .map(|user| {
                        alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                            .with_user(StrBytes::from_string(user))
                            .with_error_code(code)
                            .with_error_message(msg(0))
                    })
                    .collect(),
            ),
        ),
        RequestKind::ElectLeaders(r) => {
            use elect_leaders_response::*;
            // The top-level error exists from v1.
            ResponseKind::ElectLeaders(
                ElectLeadersResponse::default()
                    .with_error_code(if version >= 1 { code } else { 0 })
                    .with_replica_election_results(
                        r.topic_partitions
                            .iter()
                            .flatten()
                            .map(|t| {
                                ReplicaElectionResult::default()
                                    .with_topic(t.topic.clone())
                                    .with_partition_result(
                                        t.partitions
                                            .iter()
                                            .map(|&p| {
                                                PartitionResult::default()
                                                    .with_partition_id(p)
                                                    .with_error_code(code)
                                                    .with_error_message(msg(0))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
            )
        }
        RequestKind::AlterPartitionReassignments(_) => ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        RequestKind::ListPartitionReassignments(_) => ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        RequestKind::DescribeLogDirs(_) => {
            ResponseKind::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(code))
        }
        RequestKind::AlterReplicaLogDirs(r) => {
            use alter_replica_log_dirs_response::*;
            let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
            for dir in &r.dirs {
                for t in &dir.topics {
                    results.push(
                        AlterReplicaLogDirTopicResult::default()
                            .with_topic_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|&p| {
                                        AlterReplicaLogDirPartitionResult::default()
                                            .with_partition_index(p)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            ),
                    );
                }
            }
            ResponseKind::AlterReplicaLogDirs(
                AlterReplicaLogDirsResponse::default().with_results(results),
            )
        }
        RequestKind::DescribeCluster(_) => ResponseKind::DescribeCluster(
            DescribeClusterResponse::default()
                .with_error_code(code)
                .with_error_message(msg(0)),
        ),
        RequestKind::DescribeQuorum(_) => ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default()
                .with_error_code(code)
                .with_error_message(msg(2)),
        ),
        RequestKind::ListConfigResources(_) => ResponseKind::ListConfigResources(
            ListConfigResourcesResponse::default().with_error_code(code),
        ),
        RequestKind::BrokerHeartbeat(_) => ResponseKind::BrokerHeartbeat(
            BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        RequestKind::BrokerRegistration(_) => ResponseKind::BrokerRegistration(
            BrokerRegistrationResponse::default()
                .with_error_code(code)
                .with_broker_epoch(-1),
        ),
        RequestKind::AlterPartition(_) => {
            ResponseKind::AlterPartition(AlterPartitionResponse::default().with_error_code(code))
        }
        RequestKind::AllocateProducerIds(_) => ResponseKind::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(code),
        ),
        RequestKind::Envelope(_) => {
            ResponseKind::Envelope(EnvelopeResponse::default().with_error_code(code))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::layouts::LAYOUTS;

    /// A request of `api_key` as a client shapes it, with one of each entry the response
    /// answers (a topic with a partition, a group, a resource, a transactional id, a user).
    fn shaped(api_key: ApiKey, version: i16) -> RequestKind {
        let mut request = default_request(api_key, version);
        let topic = TopicName(StrBytes::from_static_str("t"));
        let group = GroupId(StrBytes::from_static_str("g"));
        match &mut request {
            RequestKind::Metadata(r) => {
                r.topics = Some(vec![metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(topic.clone()))])
            }
            RequestKind::Produce(r) => {
                r.topic_data = vec![produce_request::TopicProduceData::default()
                    .with_name(topic.clone())
                    .with_partition_data(vec![produce_request::PartitionProduceData::default()])]
            }
            RequestKind::Fetch(r) => {
                r.topics = vec![fetch_request::FetchTopic::default()
                    .with_topic(topic.clone())
                    .with_partitions(vec![fetch_request::FetchPartition::default()])]
            }
            RequestKind::ListOffsets(r) => {
                r.topics = vec![list_offsets_request::ListOffsetsTopic::default()
                    .with_name(topic.clone())
                    .with_partitions(vec![list_offsets_request::ListOffsetsPartition::default()])]
            }
            RequestKind::OffsetForLeaderEpoch(r) => {
                r.topics = vec![
                    offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                        .with_topic(topic.clone())
                        .with_partitions(vec![
                            offset_for_leader_epoch_request::OffsetForLeaderPartition::default(),
                        ]),
                ]
            }
            RequestKind::DeleteRecords(r) => {
                r.topics = vec![delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic.clone())
                    .with_partitions(vec![
                        delete_records_request::DeleteRecordsPartition::default(),
                    ])]
            }
            RequestKind::FindCoordinator(r) if version >= 4 => {
                r.coordinator_keys = vec![StrBytes::from_static_str("g")]
            }
            RequestKind::DescribeGroups(r) => r.groups = vec![group.clone()],
            RequestKind::DeleteGroups(r) => r.groups_names = vec![group.clone()],
            RequestKind::ConsumerGroupDescribe(r) => r.group_ids = vec![group.clone()],
            RequestKind::OffsetCommit(r) => {
                r.topics = vec![offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic.clone())
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default(),
                    ])]
            }
            RequestKind::TxnOffsetCommit(r) => {
                r.topics = vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic.clone())
                        .with_partitions(vec![
                            txn_offset_commit_request::TxnOffsetCommitRequestPartition::default(),
                        ]),
                ]
            }
            RequestKind::OffsetFetch(r) if version <= 7 => {
                r.topics = Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(topic.clone())
                        .with_partition_indexes(vec![0]),
                ])
            }
            RequestKind::OffsetFetch(r) => {
                r.groups = vec![offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(group.clone())]
            }
            RequestKind::OffsetDelete(r) => {
                r.topics = vec![offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(topic.clone())
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default(),
                    ])]
            }
            RequestKind::AddPartitionsToTxn(r) if version <= 3 => {
                r.v3_and_below_topics = vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(topic.clone())
                        .with_partitions(vec![0]),
                ]
            }
            RequestKind::AddPartitionsToTxn(r) => {
                r.transactions = vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_topics(vec![
                            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                                .with_name(topic.clone())
                                .with_partitions(vec![0]),
                        ]),
                ]
            }
            RequestKind::WriteTxnMarkers(r) => {
                r.markers = vec![write_txn_markers_request::WritableTxnMarker::default()
                    .with_topics(vec![
                        write_txn_markers_request::WritableTxnMarkerTopic::default()
                            .with_name(topic.clone())
                            .with_partition_indexes(vec![0]),
                    ])]
            }
            RequestKind::DescribeProducers(r) => {
                r.topics = vec![describe_producers_request::TopicRequest::default()
                    .with_name(topic.clone())
                    .with_partition_indexes(vec![0])]
            }
            RequestKind::DescribeTransactions(r) => {
                r.transactional_ids = vec![TransactionalId(StrBytes::from_static_str("x"))]
            }
            RequestKind::CreateTopics(r) => {
                r.topics =
                    vec![create_topics_request::CreatableTopic::default().with_name(topic.clone())]
            }
            RequestKind::DeleteTopics(r) if version <= 5 => r.topic_names = vec![topic.clone()],
            RequestKind::DeleteTopics(r) => {
                r.topics = vec![delete_topics_request::DeleteTopicState::default()
                    .with_name(Some(topic.clone()))]
            }
            RequestKind::CreatePartitions(r) => {
                r.topics = vec![create_partitions_request::CreatePartitionsTopic::default()
                    .with_name(topic.clone())]
            }
            RequestKind::DescribeTopicPartitions(r) => {
                r.topics = vec![describe_topic_partitions_request::TopicRequest::default()
                    .with_name(topic.clone())]
            }
            RequestKind::DescribeConfigs(r) => {
                r.resources = vec![describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("t"))]
            }
            RequestKind::AlterConfigs(r) => {
                r.resources = vec![alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("t"))]
            }
            RequestKind::IncrementalAlterConfigs(r) => {
                r.resources = vec![
                    incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t")),
                ]
            }
            RequestKind::CreateAcls(r) => {
                r.creations = vec![create_acls_request::AclCreation::default()]
            }
            RequestKind::DeleteAcls(r) => {
                r.filters = vec![delete_acls_request::DeleteAclsFilter::default()]
            }
            RequestKind::DescribeUserScramCredentials(r) => {
                r.users = Some(vec![
                    describe_user_scram_credentials_request::UserName::default(),
                ])
            }
            RequestKind::AlterUserScramCredentials(r) => {
                r.deletions = vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(StrBytes::from_static_str("alice")),
                ]
            }
            RequestKind::ElectLeaders(r) => {
                r.topic_partitions = Some(vec![elect_leaders_request::TopicPartitions::default()
                    .with_topic(topic.clone())
                    .with_partitions(vec![0])])
            }
            RequestKind::AlterReplicaLogDirs(r) => {
                r.dirs = vec![
                    alter_replica_log_dirs_request::AlterReplicaLogDir::default().with_topics(
                        vec![
                            alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                                .with_name(topic.clone())
                                .with_partitions(vec![0]),
                        ],
                    ),
                ]
            }
            _ => {}
        }
        request
    }

    /// The request of `api_key` with every field at its default.
    fn default_request(api_key: ApiKey, version: i16) -> RequestKind {
        macro_rules! default_of {
            ($($key:ident => $ty:ty),* $(,)?) => {
                match api_key {
                    $(ApiKey::$key => RequestKind::$key(<$ty>::default()),)*
                    other => panic!("{other:?} v{version}: no default request here"),
                }
            };
        }
        default_of!(
            Produce => ProduceRequest, Fetch => FetchRequest, ListOffsets => ListOffsetsRequest,
            Metadata => MetadataRequest, OffsetCommit => OffsetCommitRequest,
            OffsetFetch => OffsetFetchRequest, FindCoordinator => FindCoordinatorRequest,
            JoinGroup => JoinGroupRequest, Heartbeat => HeartbeatRequest,
            LeaveGroup => LeaveGroupRequest, SyncGroup => SyncGroupRequest,
            DescribeGroups => DescribeGroupsRequest, ListGroups => ListGroupsRequest,
            SaslHandshake => SaslHandshakeRequest, ApiVersions => ApiVersionsRequest,
            CreateTopics => CreateTopicsRequest, DeleteTopics => DeleteTopicsRequest,
            DeleteRecords => DeleteRecordsRequest, InitProducerId => InitProducerIdRequest,
            OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
            AddPartitionsToTxn => AddPartitionsToTxnRequest,
            AddOffsetsToTxn => AddOffsetsToTxnRequest, EndTxn => EndTxnRequest,
            WriteTxnMarkers => WriteTxnMarkersRequest, TxnOffsetCommit => TxnOffsetCommitRequest,
            DescribeAcls => DescribeAclsRequest, CreateAcls => CreateAclsRequest,
            DeleteAcls => DeleteAclsRequest, DescribeConfigs => DescribeConfigsRequest,
            AlterConfigs => AlterConfigsRequest,
            IncrementalAlterConfigs => IncrementalAlterConfigsRequest,
            CreatePartitions => CreatePartitionsRequest, DeleteGroups => DeleteGroupsRequest,
            ElectLeaders => ElectLeadersRequest,
            AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
            ListPartitionReassignments => ListPartitionReassignmentsRequest,
            OffsetDelete => OffsetDeleteRequest, DescribeCluster => DescribeClusterRequest,
            DescribeProducers => DescribeProducersRequest,
            DescribeTransactions => DescribeTransactionsRequest,
            ListTransactions => ListTransactionsRequest, AlterPartition => AlterPartitionRequest,
            AlterReplicaLogDirs => AlterReplicaLogDirsRequest,
            DescribeLogDirs => DescribeLogDirsRequest,
            DescribeTopicPartitions => DescribeTopicPartitionsRequest,
            ListConfigResources => ListConfigResourcesRequest,
            BrokerRegistration => BrokerRegistrationRequest,
            BrokerHeartbeat => BrokerHeartbeatRequest,
            AllocateProducerIds => AllocateProducerIdsRequest,
            DescribeQuorum => DescribeQuorumRequest, SaslAuthenticate => SaslAuthenticateRequest,
            ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest,
            ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
            DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
            DescribeClientQuotas => DescribeClientQuotasRequest,
            AlterUserScramCredentials => AlterUserScramCredentialsRequest,
            Envelope => EnvelopeRequest,
        )
    }

    /// Every API the decoder accepts has an answer to a request with one of each entry, which
    /// encodes at every version decoded and carries the error wherever that version has a
    /// field for it.
    #[test]
    fn every_decoded_api_has_an_error_response_at_every_version() {
        const ERROR: i16 = 0x7a31;
        for layout in LAYOUTS {
            let key = layout.api_key;
            for version in layout.versions.min..=layout.versions.max {
                let request = shaped(key, version);
                let answer = error_response(&request, version, ERROR, Some("refused"))
                    .unwrap_or_else(|| panic!("{key:?}: no error response"));
                let buf = crate::protocol::encode_response(key, version, 7, &answer)
                    .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
                // DescribeLogDirs has no error field before v3: the answer is an empty one, as
                // Kafka's.
                let has_error_field = !(key == ApiKey::DescribeLogDirs && version < 3);
                let found = buf.windows(2).any(|w| *w == ERROR.to_be_bytes());
                assert_eq!(
                    found, has_error_field,
                    "{key:?} v{version}: whether the error is in the answer"
                );
            }
        }
    }
}
