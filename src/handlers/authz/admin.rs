//! The APIs whose entries name topics, groups, transactional ids or the cluster one by one
//! (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
//! IncrementalAlterConfigs, DeleteRecords, DescribeProducers, OffsetForLeaderEpoch,
//! DescribeTransactions): [`take_refused`] takes out of a request the entries the caller
//! may not act on, before it is handled or forwarded to the active controller, and
//! [`Refused::merge`] puts their answers into the response. So a forwarded request carries
//! only what the caller may do, and the controller never acts on the rest.
//!
//! The operations are Kafka's: CREATE on the cluster or the topic, DELETE and ALTER on the
//! topic (DELETE on the cluster allows any topic to be deleted), DESCRIBE_CONFIGS /
//! ALTER_CONFIGS on the config resource (a topic, a group, or the cluster for BROKER and
//! BROKER_LOGGER resources), DELETE on the topic for DeleteRecords, READ for DescribeProducers,
//! for OffsetForLeaderEpoch CLUSTER_ACTION on the cluster (a follower's) or else DESCRIBE on the
//! topic (a consumer's), DESCRIBE on the transactional id for DescribeTransactions.

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use super::{Op, RequestAuth, Resource};
use crate::errors::ApiError;
use crate::metadata::MetadataImage;

/// Kafka's `ConfigResource.Type` codes.
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;
const CONFIG_GROUP: i8 = 32;

/// The answers of the entries taken out of a request.
#[derive(Debug)]
pub enum Refused {
    CreateTopics(Vec<kafka_protocol::messages::create_topics_response::CreatableTopicResult>),
    DeleteTopics(Vec<kafka_protocol::messages::delete_topics_response::DeletableTopicResult>),
    CreatePartitions(
        Vec<kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult>,
    ),
    DescribeConfigs(Vec<kafka_protocol::messages::describe_configs_response::DescribeConfigsResult>),
    AlterConfigs(Vec<kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse>),
    IncrementalAlterConfigs(
        Vec<kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse>,
    ),
    DeleteRecords(Vec<kafka_protocol::messages::delete_records_response::DeleteRecordsTopicResult>),
    DescribeProducers(Vec<kafka_protocol::messages::describe_producers_response::TopicResponse>),
    OffsetForLeaderEpoch(
        Vec<kafka_protocol::messages::offset_for_leader_epoch_response::OffsetForLeaderTopicResult>,
    ),
    DescribeTransactions(
        Vec<kafka_protocol::messages::describe_transactions_response::TransactionState>,
    ),
}

/// The config resource `(type, name)` as an ACL resource, and the error of a refusal.
fn config_resource(resource_type: i8, name: &str) -> Option<(Resource, String, ApiError)> {
    match resource_type {
        CONFIG_TOPIC => Some((
            Resource::Topic,
            name.to_owned(),
            ApiError::TopicAuthorizationFailed,
        )),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER => Some((
            Resource::Cluster,
            super::CLUSTER_NAME.to_owned(),
            ApiError::ClusterAuthorizationFailed,
        )),
        CONFIG_GROUP => Some((
            Resource::Group,
            name.to_owned(),
            ApiError::GroupAuthorizationFailed,
        )),
        // Other types (CLIENT_METRICS) need the cluster, as Kafka's `ConfigAdminManager`.
        _ => Some((
            Resource::Cluster,
            super::CLUSTER_NAME.to_owned(),
            ApiError::ClusterAuthorizationFailed,
        )),
    }
}

fn message(e: &ApiError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.message()))
}

/// Takes the entries `auth` refuses out of `request` and returns their answers; `None` when
/// no authorizer is configured or the API has no per-entry checks here.
pub fn take_refused(auth: &RequestAuth, request: &mut RequestKind) -> Option<Refused> {
    let image: &MetadataImage = auth.image()?;
    Some(match request {
        RequestKind::CreateTopics(r) => {
            use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
            let cluster_create = auth.allows_cluster(Op::Create);
            let mut refused = Vec::new();
            r.topics.retain(|t| {
                let ok =
                    cluster_create || auth.allows(Resource::Topic, t.name.as_str(), Op::Create);
                if !ok {
                    let e = ApiError::TopicAuthorizationFailed;
                    refused.push(
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(e.code())
                            .with_error_message(message(&e))
                            .with_num_partitions(-1)
                            .with_replication_factor(-1),
                    );
                }
                ok
            });
            Refused::CreateTopics(refused)
        }
        RequestKind::DeleteTopics(r) => {
            use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
            let e = ApiError::TopicAuthorizationFailed;
            let refusal = |name: Option<kafka_protocol::messages::TopicName>, id| {
                DeletableTopicResult::default()
                    .with_name(name)
                    .with_topic_id(id)
                    .with_error_code(e.code())
                    .with_error_message(message(&e))
            };
            // DELETE on the cluster allows every topic, as in Kafka.
            let cluster_delete = auth.allows_cluster(Op::Delete);
            let mut refused = Vec::new();
            r.topic_names.retain(|n| {
                let ok = cluster_delete || auth.allows(Resource::Topic, n.as_str(), Op::Delete);
                if !ok {
                    refused.push(refusal(Some(n.clone()), uuid::Uuid::nil()));
                }
                ok
            });
            r.topics.retain(|t| {
                // By id (v6+) when the id is set; an id the image does not know is left for
                // the handler (UNKNOWN_TOPIC_ID).
                let name = if t.topic_id.is_nil() {
                    t.name.as_ref().map(|n| n.as_str().to_owned())
                } else {
                    image.topic_by_id(&t.topic_id).map(|t| t.name.clone())
                };
                let ok = cluster_delete
                    || name
                        .as_deref()
                        .is_none_or(|n| auth.allows(Resource::Topic, n, Op::Delete));
                if !ok {
                    refused.push(refusal(t.name.clone(), t.topic_id));
                }
                ok
            });
            Refused::DeleteTopics(refused)
        }
        RequestKind::CreatePartitions(r) => {
            use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
            let mut refused = Vec::new();
            r.topics.retain(|t| {
                let ok = auth.allows(Resource::Topic, t.name.as_str(), Op::Alter);
                if !ok {
                    let e = ApiError::TopicAuthorizationFailed;
                    refused.push(
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(e.code())
                            .with_error_message(message(&e)),
                    );
                }
                ok
            });
            Refused::CreatePartitions(refused)
        }
        RequestKind::DescribeConfigs(r) => {
            use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
            let mut refused = Vec::new();
            r.resources.retain(|res| {
                let Some((resource, name, e)) =
                    config_resource(res.resource_type, res.resource_name.as_str())
                else {
                    return true;
                };
                let ok = auth.allows(resource, &name, Op::DescribeConfigs);
                if !ok {
                    refused.push(
                        DescribeConfigsResult::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(e.code())
                            .with_error_message(message(&e)),
                    );
                }
                ok
            });
            Refused::DescribeConfigs(refused)
        }
        RequestKind::AlterConfigs(r) => {
            use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
            let mut refused = Vec::new();
            r.resources.retain(|res| {
                let Some((resource, name, e)) =
                    config_resource(res.resource_type, res.resource_name.as_str())
                else {
                    return true;
                };
                let ok = auth.allows(resource, &name, Op::AlterConfigs);
                if !ok {
                    refused.push(
                        AlterConfigsResourceResponse::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(e.code())
                            .with_error_message(message(&e)),
                    );
                }
                ok
            });
            Refused::AlterConfigs(refused)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
            let mut refused = Vec::new();
            r.resources.retain(|res| {
                let Some((resource, name, e)) =
                    config_resource(res.resource_type, res.resource_name.as_str())
                else {
                    return true;
                };
                let ok = auth.allows(resource, &name, Op::AlterConfigs);
                if !ok {
                    refused.push(
                        AlterConfigsResourceResponse::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(e.code())
                            .with_error_message(message(&e)),
                    );
                }
                ok
            });
            Refused::IncrementalAlterConfigs(refused)
        }
        RequestKind::DeleteRecords(r) => {
            use kafka_protocol::messages::delete_records_response::*;
            let code = ApiError::TopicAuthorizationFailed.code();
            let mut refused = Vec::new();
            r.topics.retain(|t| {
                let ok = auth.allows(Resource::Topic, t.name.as_str(), Op::Delete);
                if !ok {
                    refused.push(
                        DeleteRecordsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        DeleteRecordsPartitionResult::default()
                                            .with_partition_index(p.partition_index)
                                            .with_low_watermark(-1)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            ),
                    );
                }
                ok
            });
            Refused::DeleteRecords(refused)
        }
        RequestKind::DescribeProducers(r) => {
            use kafka_protocol::messages::describe_producers_response::*;
            let e = ApiError::TopicAuthorizationFailed;
            let mut refused = Vec::new();
            r.topics.retain(|t| {
                let ok = auth.allows(Resource::Topic, t.name.as_str(), Op::Read);
                if !ok {
                    refused.push(
                        TopicResponse::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        PartitionResponse::default()
                                            .with_partition_index(p)
                                            .with_error_code(e.code())
                                            .with_error_message(message(&e))
                                    })
                                    .collect(),
                            ),
                    );
                }
                ok
            });
            Refused::DescribeProducers(refused)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            use kafka_protocol::messages::offset_for_leader_epoch_response::*;
            let code = ApiError::TopicAuthorizationFailed.code();
            // CLUSTER_ACTION on the cluster (a follower's) allows every topic, else DESCRIBE on
            // each (a consumer's, KIP-320), whatever the replica id, as in Kafka.
            let cluster_action = auth.allows_cluster(Op::ClusterAction);
            let mut refused = Vec::new();
            r.topics.retain(|t| {
                let ok =
                    cluster_action || auth.allows(Resource::Topic, t.topic.as_str(), Op::Describe);
                if !ok {
                    refused.push(
                        OffsetForLeaderTopicResult::default()
                            .with_topic(t.topic.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        EpochEndOffset::default()
                                            .with_partition(p.partition)
                                            .with_leader_epoch(-1)
                                            .with_end_offset(-1)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            ),
                    );
                }
                ok
            });
            Refused::OffsetForLeaderEpoch(refused)
        }
        RequestKind::DescribeTransactions(r) => {
            use kafka_protocol::messages::describe_transactions_response::TransactionState;
            let code = ApiError::TransactionalIdAuthorizationFailed.code();
            let mut refused = Vec::new();
            r.transactional_ids.retain(|id| {
                let ok = auth.allows(Resource::TransactionalId, id.as_str(), Op::Describe);
                if !ok {
                    refused.push(
                        TransactionState::default()
                            .with_transactional_id(id.clone())
                            .with_error_code(code),
                    );
                }
                ok
            });
            Refused::DescribeTransactions(refused)
        }
        _ => return None,
    })
}

impl Refused {
    /// Whether nothing was taken out.
    pub fn is_empty(&self) -> bool {
        match self {
            Refused::CreateTopics(v) => v.is_empty(),
            Refused::DeleteTopics(v) => v.is_empty(),
            Refused::CreatePartitions(v) => v.is_empty(),
            Refused::DescribeConfigs(v) => v.is_empty(),
            Refused::AlterConfigs(v) => v.is_empty(),
            Refused::IncrementalAlterConfigs(v) => v.is_empty(),
            Refused::DeleteRecords(v) => v.is_empty(),
            Refused::DescribeProducers(v) => v.is_empty(),
            Refused::OffsetForLeaderEpoch(v) => v.is_empty(),
            Refused::DescribeTransactions(v) => v.is_empty(),
        }
    }

    /// The response with the refused entries' answers added (first, as Kafka's builders put
    /// the unauthorized ones).
    pub fn merge(self, response: ResponseKind) -> ResponseKind {
        fn front<T>(mut refused: Vec<T>, answered: &mut Vec<T>) {
            refused.append(answered);
            *answered = refused;
        }
        match (self, response) {
            (Refused::CreateTopics(v), ResponseKind::CreateTopics(mut r)) => {
                front(v, &mut r.topics);
                ResponseKind::CreateTopics(r)
            }
            (Refused::DeleteTopics(v), ResponseKind::DeleteTopics(mut r)) => {
                front(v, &mut r.responses);
                ResponseKind::DeleteTopics(r)
            }
            (Refused::CreatePartitions(v), ResponseKind::CreatePartitions(mut r)) => {
                front(v, &mut r.results);
                ResponseKind::CreatePartitions(r)
            }
            (Refused::DescribeConfigs(v), ResponseKind::DescribeConfigs(mut r)) => {
                front(v, &mut r.results);
                ResponseKind::DescribeConfigs(r)
            }
            (Refused::AlterConfigs(v), ResponseKind::AlterConfigs(mut r)) => {
                front(v, &mut r.responses);
                ResponseKind::AlterConfigs(r)
            }
            (Refused::IncrementalAlterConfigs(v), ResponseKind::IncrementalAlterConfigs(mut r)) => {
                front(v, &mut r.responses);
                ResponseKind::IncrementalAlterConfigs(r)
            }
            (Refused::DeleteRecords(v), ResponseKind::DeleteRecords(mut r)) => {
                front(v, &mut r.topics);
                ResponseKind::DeleteRecords(r)
            }
            (Refused::DescribeProducers(v), ResponseKind::DescribeProducers(mut r)) => {
                front(v, &mut r.topics);
                ResponseKind::DescribeProducers(r)
            }
            (Refused::OffsetForLeaderEpoch(v), ResponseKind::OffsetForLeaderEpoch(mut r)) => {
                front(v, &mut r.topics);
                ResponseKind::OffsetForLeaderEpoch(r)
            }
            (Refused::DescribeTransactions(v), ResponseKind::DescribeTransactions(mut r)) => {
                front(v, &mut r.transaction_states);
                ResponseKind::DescribeTransactions(r)
            }
            (_, other) => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::acl::{Acl, AclPermissionType, AuthorizerRules, PatternType};
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
    use kafka_protocol::messages::*;
    use std::sync::Arc;

    fn alice_with(acls: &[(Resource, &str, Op)]) -> RequestAuth {
        let mut image = MetadataImage::default();
        let map = Arc::make_mut(&mut image.acls);
        for (i, (resource_type, name, op)) in acls.iter().enumerate() {
            map.insert(
                uuid::Uuid::from_u128(i as u128 + 1),
                Acl {
                    resource_type: *resource_type,
                    resource_name: (*name).into(),
                    pattern_type: PatternType::Literal,
                    principal: "User:alice".into(),
                    host: "*".into(),
                    operation: *op,
                    permission_type: AclPermissionType::Allow,
                },
            );
        }
        let image = Arc::new(image);
        let rules = Arc::new(AuthorizerRules::default());
        RequestAuth::new(Some(&rules), "User:alice", [10, 0, 0, 1].into(), || image)
    }

    fn topic_name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    #[test]
    fn without_an_authorizer_nothing_is_taken() {
        let mut request = RequestKind::CreateTopics(
            CreateTopicsRequest::default()
                .with_topics(vec![CreatableTopic::default().with_name(topic_name("t"))]),
        );
        assert!(take_refused(&RequestAuth::open(), &mut request).is_none());
        let RequestKind::CreateTopics(r) = request else {
            panic!()
        };
        assert_eq!(r.topics.len(), 1);
    }

    #[test]
    fn create_topics_needs_create_on_the_topic_or_the_cluster() {
        let request = || {
            RequestKind::CreateTopics(
                CreateTopicsRequest::default().with_topics(
                    ["mine", "theirs"]
                        .iter()
                        .map(|t| CreatableTopic::default().with_name(topic_name(t)))
                        .collect(),
                ),
            )
        };
        let auth = alice_with(&[(Resource::Topic, "mine", Op::Create)]);
        let mut r = request();
        let refused = take_refused(&auth, &mut r).unwrap();
        let RequestKind::CreateTopics(left) = &r else {
            panic!()
        };
        assert_eq!(left.topics.len(), 1);
        assert_eq!(left.topics[0].name.as_str(), "mine");
        let merged = refused.merge(ResponseKind::CreateTopics(
            CreateTopicsResponse::default()
                .with_topics(vec![create_topics_response::CreatableTopicResult::default(
                )
                .with_name(topic_name("mine"))]),
        ));
        let ResponseKind::CreateTopics(merged) = merged else {
            panic!()
        };
        let answers: Vec<(&str, i16)> = merged
            .topics
            .iter()
            .map(|t| (t.name.as_str(), t.error_code))
            .collect();
        assert_eq!(answers, [("theirs", 29), ("mine", 0)]);
        // CREATE on the cluster covers every topic.
        let cluster = alice_with(&[(Resource::Cluster, super::super::CLUSTER_NAME, Op::Create)]);
        let mut r = request();
        assert!(take_refused(&cluster, &mut r).unwrap().is_empty());
    }

    #[test]
    fn delete_topics_and_create_partitions_need_delete_and_alter() {
        let auth = alice_with(&[
            (Resource::Topic, "a", Op::Delete),
            (Resource::Topic, "b", Op::Alter),
        ]);
        let mut delete = RequestKind::DeleteTopics(
            DeleteTopicsRequest::default().with_topic_names(vec![topic_name("a"), topic_name("b")]),
        );
        let Some(Refused::DeleteTopics(refused)) = take_refused(&auth, &mut delete) else {
            panic!()
        };
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].name.as_ref().unwrap().as_str(), "b");
        assert_eq!(refused[0].error_code, 29);
        let mut create = RequestKind::CreatePartitions(
            CreatePartitionsRequest::default().with_topics(
                ["a", "b"]
                    .iter()
                    .map(|t| {
                        create_partitions_request::CreatePartitionsTopic::default()
                            .with_name(topic_name(t))
                    })
                    .collect(),
            ),
        );
        let Some(Refused::CreatePartitions(refused)) = take_refused(&auth, &mut create) else {
            panic!()
        };
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].name.as_str(), "a");
    }

    #[test]
    fn config_resources_map_to_topics_groups_and_the_cluster() {
        let auth = alice_with(&[
            (Resource::Topic, "t", Op::AlterConfigs),
            (Resource::Group, "g", Op::AlterConfigs),
        ]);
        let resource = |t: i8, name: &str| {
            AlterConfigsResource::default()
                .with_resource_type(t)
                .with_resource_name(StrBytes::from_string(name.to_owned()))
        };
        let mut request = RequestKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsRequest::default().with_resources(vec![
                resource(CONFIG_TOPIC, "t"),
                resource(CONFIG_TOPIC, "u"),
                resource(CONFIG_GROUP, "g"),
                resource(CONFIG_BROKER, "1"),
            ]),
        );
        let Some(Refused::IncrementalAlterConfigs(refused)) = take_refused(&auth, &mut request)
        else {
            panic!()
        };
        let codes: Vec<(&str, i16)> = refused
            .iter()
            .map(|r| (r.resource_name.as_str(), r.error_code))
            .collect();
        assert_eq!(codes, [("u", 29), ("1", 31)]);
        // ALTER_CONFIGS implies DESCRIBE_CONFIGS.
        let mut describe =
            RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(CONFIG_TOPIC)
                .with_resource_name(StrBytes::from_static_str("t")),
        ]));
        assert!(take_refused(&auth, &mut describe).unwrap().is_empty());
    }

    #[test]
    fn offset_for_leader_epoch_needs_cluster_action_or_describe_whatever_the_replica_id() {
        use offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
        let request = |replica_id: i32| {
            RequestKind::OffsetForLeaderEpoch(
                OffsetForLeaderEpochRequest::default()
                    .with_replica_id(BrokerId(replica_id))
                    .with_topics(vec![OffsetForLeaderTopic::default()
                        .with_topic(topic_name("t"))
                        .with_partitions(vec![
                            OffsetForLeaderPartition::default().with_partition(3)
                        ])]),
            )
        };
        // Kafka checks CLUSTER_ACTION first, then DESCRIBE on each topic, for any replica id.
        let reader = alice_with(&[(Resource::Topic, "t", Op::Read)]);
        let broker = alice_with(&[(
            Resource::Cluster,
            super::super::CLUSTER_NAME,
            Op::ClusterAction,
        )]);
        let stranger = alice_with(&[(Resource::Topic, "other", Op::Read)]);
        for replica_id in [-1, 2] {
            assert!(take_refused(&reader, &mut request(replica_id))
                .unwrap()
                .is_empty());
            assert!(take_refused(&broker, &mut request(replica_id))
                .unwrap()
                .is_empty());
            let Some(Refused::OffsetForLeaderEpoch(refused)) =
                take_refused(&stranger, &mut request(replica_id))
            else {
                panic!()
            };
            assert_eq!(refused[0].partitions[0].partition, 3);
            assert_eq!(refused[0].partitions[0].error_code, 29);
        }
    }

    #[test]
    fn describe_transactions_needs_describe_on_each_transactional_id() {
        let auth = alice_with(&[(Resource::TransactionalId, "mine", Op::Write)]);
        let mut request = RequestKind::DescribeTransactions(
            DescribeTransactionsRequest::default().with_transactional_ids(vec![
                TransactionalId(StrBytes::from_static_str("mine")),
                TransactionalId(StrBytes::from_static_str("theirs")),
            ]),
        );
        let Some(Refused::DescribeTransactions(refused)) = take_refused(&auth, &mut request) else {
            panic!()
        };
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].transactional_id.as_str(), "theirs");
        assert_eq!(refused[0].error_code, 53);
    }
}
