//! The authorization context of one request (Kafka's `AuthHelper` over its
//! `AuthorizableRequestContext`): who asks (the connection's principal), from where (the
//! client's address), and the authorizer's rules over the ACLs of the image current when the
//! request arrived. `server::dispatch` makes one per request and passes it to the handlers,
//! which ask it about each resource they touch; no handler decides access any other way.
//!
//! With no authorizer configured (`authorizer.class.name` unset) the context is empty and
//! every question is answered "allowed" after one `None` check: nothing changes for any client
//! and the produce and fetch paths do no more work.

use std::net::IpAddr;
use std::sync::Arc;

pub mod admin;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::errors::ApiError;
use crate::metadata::acl::{self, AclOperation, AuthorizerRules, Decision, ResourceType};
use crate::metadata::MetadataImage;

pub use crate::metadata::acl::{AclOperation as Op, ResourceType as Resource, CLUSTER_NAME};

/// KIP-430's value of authorized operations when the client did not ask for them (Kafka's
/// `Integer.MIN_VALUE`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// What an authorized request is checked against.
#[derive(Debug, Clone)]
struct Checker {
    rules: Arc<AuthorizerRules>,
    image: Arc<MetadataImage>,
    principal: String,
    host: String,
    address: IpAddr,
}

/// One request's authorization context. [`RequestAuth::open`] (no authorizer) allows
/// everything. A clone keeps the ACLs of the request's image: a KIP-848 member's rights, kept
/// to resolve its regex subscription with (Kafka keeps the member's request context).
#[derive(Debug, Clone, Default)]
pub struct RequestAuth {
    checker: Option<Box<Checker>>,
}

impl RequestAuth {
    /// No authorizer: every action is allowed.
    pub fn open() -> RequestAuth {
        RequestAuth { checker: None }
    }

    /// The context of a request from `principal` at `host`, checked by `rules` (the configured
    /// authorizer, `None` for none) against `image`'s ACLs. The image is read only when an
    /// authorizer is configured.
    pub fn new(
        rules: Option<&Arc<AuthorizerRules>>,
        principal: &str,
        host: IpAddr,
        image: impl FnOnce() -> Arc<MetadataImage>,
    ) -> RequestAuth {
        match rules {
            None => RequestAuth::open(),
            Some(rules) => RequestAuth {
                checker: Some(Box::new(Checker {
                    rules: rules.clone(),
                    image: image(),
                    principal: principal.to_owned(),
                    host: acl_host(host),
                    address: host,
                })),
            },
        }
    }

    /// The image the request is checked against, when an authorizer is configured.
    pub fn image(&self) -> Option<&MetadataImage> {
        self.checker.as_ref().map(|c| &*c.image)
    }

    /// The caller's principal and address, when an authorizer checks this request: what a
    /// broker's request made on the caller's behalf carries to the controller (KIP-590).
    pub fn caller(&self) -> Option<(&str, IpAddr)> {
        self.checker
            .as_ref()
            .map(|c| (c.principal.as_str(), c.address))
    }

    /// Whether an authorizer checks this request.
    pub fn is_enabled(&self) -> bool {
        self.checker.is_some()
    }

    /// Whether the caller may do `op` on the resource of type `resource` named `name`.
    #[inline]
    pub fn allows(&self, resource: ResourceType, name: &str, op: AclOperation) -> bool {
        match &self.checker {
            None => true,
            Some(c) => {
                let decision = acl::authorize(
                    &c.rules,
                    c.image.acls.values(),
                    &c.principal,
                    &c.host,
                    resource,
                    name,
                    op,
                );
                if decision == Decision::Denied {
                    tracing::debug!(
                        principal = %c.principal,
                        host = %c.host,
                        operation = acl::operation_name(op),
                        resource = acl::resource_type_name(resource),
                        name,
                        "denied"
                    );
                }
                decision == Decision::Allowed
            }
        }
    }

    /// `op` on the cluster resource.
    pub fn allows_cluster(&self, op: AclOperation) -> bool {
        self.allows(ResourceType::Cluster, CLUSTER_NAME, op)
    }

    /// Whether the caller may do `op` on any resource of `resource`'s type at all (Kafka's
    /// default `Authorizer#authorizeByResourceType`, which the StandardAuthorizer keeps): a super
    /// user, or the answer for a name no ACL names (`allow.everyone.if.no.acl.found`), or an ALLOW
    /// of some pattern that no DENY dominates. A DENY of the LITERAL `*` refuses everything; an
    /// ALLOW of a LITERAL name is cancelled by a DENY of the same LITERAL name or of a PREFIXED
    /// pattern that starts it; an ALLOW of a PREFIXED pattern only by a DENY of a PREFIXED
    /// pattern that starts it. Used for the idempotent producer's "WRITE on any topic".
    pub fn allows_any(&self, resource: ResourceType, op: AclOperation) -> bool {
        let Some(c) = &self.checker else {
            return true;
        };
        // Kafka asks about a name no one would give a resource first, so that super users, and
        // everyone when no ACL names it and `allow.everyone.if.no.acl.found` is set, are let in
        // whatever the DENY ACLs say.
        if self.allows(resource, "hardcode", op) {
            return true;
        }
        let applies = |a: &acl::Acl| {
            a.resource_type == resource
                && (a.principal == c.principal || a.principal == acl::WILDCARD_PRINCIPAL)
                && (a.host == c.host || a.host == acl::WILDCARD_HOST)
                && (a.operation == op || a.operation == AclOperation::All)
        };
        let mut denied_literal = std::collections::HashSet::new();
        let mut denied_prefixed = std::collections::HashSet::new();
        let mut allowed = Vec::new();
        for a in c.image.acls.values().filter(|a| applies(a)) {
            let name = a.resource_name.as_str();
            match (a.permission_type, a.pattern_type) {
                (acl::AclPermissionType::Deny, acl::PatternType::Literal) => {
                    if name == acl::WILDCARD_RESOURCE {
                        return false;
                    }
                    denied_literal.insert(name);
                }
                (acl::AclPermissionType::Deny, acl::PatternType::Prefixed) => {
                    denied_prefixed.insert(name);
                }
                (acl::AclPermissionType::Allow, acl::PatternType::Literal)
                | (acl::AclPermissionType::Allow, acl::PatternType::Prefixed) => {
                    allowed.push((a.pattern_type, name));
                }
                _ => {}
            }
        }
        if allowed.iter().any(|&(pattern, name)| {
            pattern == acl::PatternType::Literal && name == acl::WILDCARD_RESOURCE
        }) {
            return true;
        }
        allowed.iter().any(|&(pattern, name)| {
            let literal_denied =
                pattern == acl::PatternType::Literal && denied_literal.contains(name);
            // A PREFIXED DENY dominates when it is a non-empty prefix of the allowed name.
            let prefix_denied = name
                .char_indices()
                .map(|(i, ch)| &name[..i + ch.len_utf8()])
                .any(|prefix| denied_prefixed.contains(prefix));
            !literal_denied && !prefix_denied
        })
    }

    /// KIP-430: the operations the caller may do on the resource, as a bit field.
    pub fn authorized_operations(&self, resource: ResourceType, name: &str) -> i32 {
        match &self.checker {
            None => acl::supported_operations(resource)
                .iter()
                .fold(0, |bits, op| bits | (1 << op.code())),
            Some(c) => acl::authorized_operations(
                &c.rules,
                c.image.acls.values(),
                &c.principal,
                &c.host,
                resource,
                name,
            ),
        }
    }

    /// KIP-430's answer: the bit field when `requested` and an authorizer is configured, else
    /// Kafka's "omitted" value. Kafka without an authorizer reports every supported operation;
    /// KafkaIQ without one keeps answering "omitted", as it always has, so that nothing changes
    /// for a client of a broker without an authorizer.
    pub fn operations_if(&self, requested: bool, resource: ResourceType, name: &str) -> i32 {
        if requested && self.checker.is_some() {
            self.authorized_operations(resource, name)
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        }
    }
}

/// The resource and operation each whole-request check of a Kafka API asks for (Kafka's
/// `KafkaApis` / `ControllerApis`): the APIs whose every resource is the cluster. Per-resource
/// checks (topics, groups, transactional ids) are made by the handlers.
pub fn cluster_operation(api: kafka_protocol::messages::ApiKey) -> Option<AclOperation> {
    use kafka_protocol::messages::ApiKey::*;
    match api {
        // Inter-broker and controller APIs.
        WriteTxnMarkers | AlterPartition | BrokerRegistration | BrokerHeartbeat
        | UnregisterBroker | AllocateProducerIds | Vote | BeginQuorumEpoch | EndQuorumEpoch
        | FetchSnapshot | AddRaftVoter | RemoveRaftVoter | UpdateRaftVoter => {
            Some(AclOperation::ClusterAction)
        }
        // Cluster administration.
        CreateAcls
        | DeleteAcls
        | ElectLeaders
        | AlterPartitionReassignments
        | AlterReplicaLogDirs
        | AlterUserScramCredentials
        | UpdateFeatures => Some(AclOperation::Alter),
        DescribeAcls
        | ListPartitionReassignments
        | DescribeLogDirs
        | DescribeQuorum
        | DescribeUserScramCredentials => Some(AclOperation::Describe),
        ListConfigResources | DescribeClientQuotas => Some(AclOperation::DescribeConfigs),
        _ => None,
    }
}

/// As [`cluster_operation`], on the controller listener: there DescribeCluster (which names
/// the controllers) needs ALTER on the cluster, where a broker's needs nothing (Kafka's
/// `ControllerApis#handleDescribeCluster`, KIP-919).
pub fn controller_cluster_operation(api: kafka_protocol::messages::ApiKey) -> Option<AclOperation> {
    match api {
        kafka_protocol::messages::ApiKey::DescribeCluster => Some(AclOperation::Alter),
        // A broker forwarding a client's request (Kafka's `ControllerApis#handleEnvelopeRequest`).
        kafka_protocol::messages::ApiKey::Envelope => Some(AclOperation::ClusterAction),
        _ => cluster_operation(api),
    }
}

/// The message of Kafka's `Errors.CLUSTER_AUTHORIZATION_FAILED.exception`, which the refusals
/// that carry a message send.
const CLUSTER_AUTHORIZATION_FAILED_MESSAGE: &str = "Cluster authorization failed.";

/// The answer to a request of an API [`cluster_operation`] names when the caller may not do it
/// on the cluster: CLUSTER_AUTHORIZATION_FAILED wherever the response has an error (the top
/// level, every entry's, or both), nothing done.
pub fn refuse_cluster(request: &RequestKind, version: i16) -> Option<ResponseKind> {
    super::error_response::error_response(
        request,
        version,
        ApiError::ClusterAuthorizationFailed.code(),
        Some(CLUSTER_AUTHORIZATION_FAILED_MESSAGE),
    )
}

/// A consumer group member's rights are its request's: DESCRIBE on a topic.
impl crate::group::TopicRights for RequestAuth {
    fn may_describe(&self, topic: &str) -> bool {
        self.allows(Resource::Topic, topic, Op::Describe)
    }

    fn caller(&self) -> Option<(&str, &str)> {
        self.checker
            .as_ref()
            .map(|c| (c.principal.as_str(), c.host.as_str()))
    }
}

/// A peer address as Kafka's ACLs name hosts: Java's `InetAddress#getHostAddress`. An
/// IPv4-mapped IPv6 address is its IPv4 address (Java makes it an `Inet4Address`), and IPv6 is
/// written in full, without `::` compression or leading zeros (`0:0:0:0:0:0:0:1`), so an ACL
/// written for Kafka matches the same clients here.
pub fn acl_host(host: IpAddr) -> String {
    match host.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:x}")).collect();
            groups.join(":")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::acl::{Acl, AclPermissionType, PatternType};
    use kafka_protocol::messages::ApiKey;

    #[test]
    fn acl_hosts_are_written_as_java_writes_addresses() {
        let host = |s: &str| acl_host(s.parse().unwrap());
        assert_eq!(host("127.0.0.1"), "127.0.0.1");
        assert_eq!(host("::ffff:127.0.0.1"), "127.0.0.1");
        assert_eq!(host("::1"), "0:0:0:0:0:0:0:1");
        assert_eq!(host("fe80::a:0:00ff"), "fe80:0:0:0:0:a:0:ff");
    }

    fn image_with(acls: &[Acl]) -> Arc<MetadataImage> {
        let mut image = MetadataImage::default();
        let map = Arc::make_mut(&mut image.acls);
        for (i, a) in acls.iter().enumerate() {
            map.insert(uuid::Uuid::from_u128(i as u128 + 1), a.clone());
        }
        Arc::new(image)
    }

    fn allow(resource_type: ResourceType, name: &str, pattern: PatternType, op: Op) -> Acl {
        Acl {
            resource_type,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission_type: AclPermissionType::Allow,
        }
    }

    fn auth(acls: &[Acl], principal: &str) -> RequestAuth {
        let rules = Arc::new(AuthorizerRules {
            super_users: ["User:admin".to_owned()].into(),
            allow_everyone_if_no_acl_found: false,
        });
        let image = image_with(acls);
        RequestAuth::new(Some(&rules), principal, [127, 0, 0, 1].into(), || image)
    }

    #[test]
    fn without_an_authorizer_everything_is_allowed_and_every_operation_reported() {
        let open = RequestAuth::open();
        assert!(!open.is_enabled());
        assert!(open.allows(Resource::Topic, "t", Op::Write));
        assert!(open.allows_cluster(Op::ClusterAction));
        assert!(open.allows_any(Resource::Topic, Op::Write));
        // Kafka without an authorizer reports every supported operation.
        let bits = open.authorized_operations(Resource::Topic, "t");
        assert_eq!(bits & (1 << Op::Read.code()), 1 << Op::Read.code());
        for requested in [false, true] {
            assert_eq!(
                open.operations_if(requested, Resource::Topic, "t"),
                AUTHORIZED_OPERATIONS_OMITTED
            );
        }
    }

    #[test]
    fn the_principal_and_host_of_the_request_are_checked_against_the_image() {
        let acls = [allow(
            Resource::Topic,
            "orders",
            PatternType::Literal,
            Op::Read,
        )];
        let alice = auth(&acls, "User:alice");
        assert!(alice.is_enabled());
        assert!(alice.allows(Resource::Topic, "orders", Op::Read));
        assert!(
            alice.allows(Resource::Topic, "orders", Op::Describe),
            "implied"
        );
        assert!(!alice.allows(Resource::Topic, "orders", Op::Write));
        assert!(!alice.allows(Resource::Topic, "payments", Op::Read));
        assert!(!auth(&acls, "User:bob").allows(Resource::Topic, "orders", Op::Read));
        assert!(auth(&[], "User:admin").allows_cluster(Op::ClusterAction));
        let bits = alice.authorized_operations(Resource::Topic, "orders");
        assert_eq!(bits, (1 << Op::Read.code()) | (1 << Op::Describe.code()));
        assert_eq!(alice.operations_if(true, Resource::Topic, "orders"), bits);
        assert_eq!(
            alice.operations_if(false, Resource::Topic, "orders"),
            AUTHORIZED_OPERATIONS_OMITTED
        );
    }

    #[test]
    fn write_on_any_topic_is_a_prefixed_or_literal_allow_not_cancelled_by_a_wildcard_deny() {
        assert!(!auth(&[], "User:alice").allows_any(Resource::Topic, Op::Write));
        let prefixed = [allow(
            Resource::Topic,
            "logs-",
            PatternType::Prefixed,
            Op::Write,
        )];
        assert!(auth(&prefixed, "User:alice").allows_any(Resource::Topic, Op::Write));
        assert!(!auth(&prefixed, "User:bob").allows_any(Resource::Topic, Op::Write));
        let mut denied = prefixed.to_vec();
        denied.push(Acl {
            permission_type: AclPermissionType::Deny,
            resource_name: "*".into(),
            pattern_type: PatternType::Literal,
            ..prefixed[0].clone()
        });
        assert!(!auth(&denied, "User:alice").allows_any(Resource::Topic, Op::Write));
    }

    #[test]
    fn an_allow_on_some_name_is_cancelled_only_by_a_deny_that_covers_it() {
        let deny = |a: &Acl, name: &str, pattern: PatternType| Acl {
            permission_type: AclPermissionType::Deny,
            resource_name: name.into(),
            pattern_type: pattern,
            ..a.clone()
        };
        let literal = allow(Resource::Topic, "t", PatternType::Literal, Op::Write);
        let prefixed = allow(Resource::Topic, "logs-", PatternType::Prefixed, Op::Write);
        let can_write_some =
            |acls: &[Acl]| auth(acls, "User:alice").allows_any(Resource::Topic, Op::Write);
        // Kafka's authorizeByResourceType, case by case.
        assert!(!can_write_some(&[
            literal.clone(),
            deny(&literal, "t", PatternType::Literal)
        ]));
        assert!(!can_write_some(&[
            literal.clone(),
            deny(&literal, "t", PatternType::Prefixed)
        ]));
        assert!(can_write_some(&[
            literal.clone(),
            deny(&literal, "tt", PatternType::Prefixed)
        ]));
        assert!(can_write_some(&[
            literal.clone(),
            deny(&literal, "u", PatternType::Literal)
        ]));
        // A LITERAL DENY does not cancel a PREFIXED ALLOW of the same text.
        assert!(can_write_some(&[
            prefixed.clone(),
            deny(&prefixed, "logs-", PatternType::Literal)
        ]));
        assert!(!can_write_some(&[
            prefixed.clone(),
            deny(&prefixed, "log", PatternType::Prefixed)
        ]));
        // One ALLOW left standing is enough.
        assert!(can_write_some(&[
            literal.clone(),
            deny(&literal, "t", PatternType::Literal),
            prefixed.clone(),
        ]));
        // A LITERAL `*` ALLOW wins unless a LITERAL `*` DENY refuses everything.
        let everything = allow(Resource::Topic, "*", PatternType::Literal, Op::Write);
        assert!(can_write_some(&[
            everything.clone(),
            deny(&everything, "e", PatternType::Prefixed)
        ]));
        assert!(!can_write_some(&[
            everything.clone(),
            deny(&everything, "*", PatternType::Literal)
        ]));
        // Another operation's or resource type's DENY says nothing about WRITE on topics.
        let read_deny = Acl {
            operation: Op::Read,
            ..deny(&literal, "t", PatternType::Literal)
        };
        assert!(can_write_some(&[literal.clone(), read_deny]));
        // Super users, and everyone when no ACL names a resource and the authorizer lets
        // them, whatever the DENY ACLs of other names.
        assert!(auth(
            &[literal.clone(), deny(&literal, "t", PatternType::Literal)],
            "User:admin"
        )
        .allows_any(Resource::Topic, Op::Write));
        let open = RequestAuth::new(
            Some(&Arc::new(AuthorizerRules {
                super_users: Default::default(),
                allow_everyone_if_no_acl_found: true,
            })),
            "User:alice",
            [127, 0, 0, 1].into(),
            || image_with(&[literal.clone(), deny(&literal, "t", PatternType::Literal)]),
        );
        assert!(open.allows_any(Resource::Topic, Op::Write));
        let closed_by_wildcard = RequestAuth::new(
            Some(&Arc::new(AuthorizerRules {
                super_users: Default::default(),
                allow_everyone_if_no_acl_found: true,
            })),
            "User:alice",
            [127, 0, 0, 1].into(),
            || image_with(&[deny(&literal, "*", PatternType::Literal)]),
        );
        assert!(!closed_by_wildcard.allows_any(Resource::Topic, Op::Write));
    }

    #[test]
    fn every_api_refused_whole_has_an_answer_carrying_cluster_authorization_failed() {
        use kafka_protocol::messages::*;
        // Served APIs that cluster_operation names (Raft's own and UpdateFeatures /
        // UnregisterBroker / voter changes are not served) are decoded, and every decoded API
        // has an error response (error_response's tests).
        let served = crate::handlers::api_versions::SUPPORTED
            .iter()
            .chain(crate::handlers::api_versions::CONTROLLER_SUPPORTED);
        for (api, _, _) in served {
            if cluster_operation(*api).is_some() || controller_cluster_operation(*api).is_some() {
                assert!(
                    crate::protocol::layouts::layout_of(*api).is_some(),
                    "{api:?} has no refusal"
                );
            }
        }
        // The Java AdminClient shows the top-level message of a refused describe.
        let named = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
            describe_user_scram_credentials_request::UserName::default(),
        ]));
        let Some(ResponseKind::DescribeUserScramCredentials(refused)) =
            refuse_cluster(&RequestKind::DescribeUserScramCredentials(named), 0)
        else {
            panic!("a DescribeUserScramCredentials refusal")
        };
        assert_eq!(refused.error_code, 31);
        assert_eq!(
            refused.error_message.as_deref(),
            Some("Cluster authorization failed.")
        );
        assert_eq!(refused.results.len(), 1);
        assert_eq!(refused.results[0].error_code, 31);
    }

    #[test]
    fn cluster_apis_map_to_kafkas_operations() {
        for api in [
            ApiKey::WriteTxnMarkers,
            ApiKey::AlterPartition,
            ApiKey::BrokerHeartbeat,
            ApiKey::BrokerRegistration,
            ApiKey::AllocateProducerIds,
            ApiKey::Vote,
        ] {
            assert_eq!(cluster_operation(api), Some(Op::ClusterAction), "{api:?}");
        }
        for api in [
            ApiKey::CreateAcls,
            ApiKey::DeleteAcls,
            ApiKey::ElectLeaders,
            ApiKey::AlterPartitionReassignments,
        ] {
            assert_eq!(cluster_operation(api), Some(Op::Alter), "{api:?}");
        }
        for api in [
            ApiKey::DescribeAcls,
            ApiKey::DescribeQuorum,
            ApiKey::DescribeLogDirs,
        ] {
            assert_eq!(cluster_operation(api), Some(Op::Describe), "{api:?}");
        }
        for api in [
            ApiKey::Produce,
            ApiKey::Fetch,
            ApiKey::Metadata,
            ApiKey::JoinGroup,
        ] {
            assert_eq!(cluster_operation(api), None, "{api:?}");
        }
    }
}
