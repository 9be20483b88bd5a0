//! ACLs and the authorizer's decision, as Kafka's `StandardAuthorizer` makes it.
//!
//! An [`Acl`] is one access control entry bound to a resource pattern (Kafka's `StandardAcl`):
//! resource type, resource name, pattern type (LITERAL or PREFIXED), principal (`User:alice`, or
//! `User:*` for every user), host (an address, or `*`), operation and permission (ALLOW or
//! DENY). The metadata image holds them by id ([`AclId`]); [`authorize`] decides one action of
//! one principal from a host against them, a pure function table tested below:
//!
//! - a super user (`super.users`) may do everything;
//! - the ACLs that apply are those of the resource type whose pattern matches the name (a
//!   LITERAL of the same name or of `*`, a PREFIXED whose name starts the resource's), whose
//!   principal is the caller's or `User:*` and whose host is the caller's or `*`;
//! - a matching DENY wins over any ALLOW; a DENY matches its own operation or ALL only;
//! - an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, one of ALTER_CONFIGS also
//!   allows DESCRIBE_CONFIGS, one of ALL allows everything;
//! - with no matching ALLOW the action is denied, unless the resource has no ACL at all (for
//!   anyone, any operation) and `allow.everyone.if.no.acl.found` is set.
//!
//! The numeric codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`): they are what CreateAcls, DescribeAcls and DeleteAcls carry.

use std::collections::BTreeSet;

use uuid::Uuid;

/// The id of one ACL in the metadata log (Kafka's `StandardAclWithId`).
pub type AclId = Uuid;

/// Kafka's wildcard resource name of a LITERAL pattern: every resource of the type.
pub const WILDCARD_RESOURCE: &str = "*";
/// Kafka's wildcard principal: every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// Kafka's wildcard host.
pub const WILDCARD_HOST: &str = "*";

/// Kafka's `ResourceType` (the codes the ACL APIs carry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    Unknown = 0,
    Any = 1,
    Topic = 2,
    Group = 3,
    Cluster = 4,
    TransactionalId = 5,
    DelegationToken = 6,
    User = 7,
}

/// Kafka's `PatternType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternType {
    Unknown = 0,
    Any = 1,
    Match = 2,
    Literal = 3,
    Prefixed = 4,
}

/// Kafka's `AclOperation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclOperation {
    Unknown = 0,
    Any = 1,
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
    TwoPhaseCommit = 15,
}

/// Kafka's `AclPermissionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclPermissionType {
    Unknown = 0,
    Any = 1,
    Deny = 2,
    Allow = 3,
}

macro_rules! codes {
    ($ty:ident { $($v:ident = $n:literal),* $(,)? }) => {
        impl $ty {
            /// The value of a wire code; codes this version does not know are `Unknown`, as
            /// Kafka's `fromCode` makes them.
            pub fn from_code(code: i8) -> $ty {
                match code {
                    $($n => $ty::$v,)*
                    _ => $ty::Unknown,
                }
            }

            pub fn code(self) -> i8 {
                self as i8
            }
        }
    };
}

codes!(ResourceType { Unknown = 0, Any = 1, Topic = 2, Group = 3, Cluster = 4,
    TransactionalId = 5, DelegationToken = 6, User = 7 });
codes!(PatternType { Unknown = 0, Any = 1, Match = 2, Literal = 3, Prefixed = 4 });
codes!(AclOperation { Unknown = 0, Any = 1, All = 2, Read = 3, Write = 4, Create = 5,
    Delete = 6, Alter = 7, Describe = 8, ClusterAction = 9, DescribeConfigs = 10,
    AlterConfigs = 11, IdempotentWrite = 12, CreateTokens = 13, DescribeTokens = 14,
    TwoPhaseCommit = 15 });
codes!(AclPermissionType { Unknown = 0, Any = 1, Deny = 2, Allow = 3 });

/// The name of the cluster resource (Kafka's `Resource.CLUSTER_NAME`).
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// One ACL (Kafka's `StandardAcl`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Acl {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

/// Why an ACL may not be stored, in Kafka's words (`AclControlManager#validateNewAcl`); the
/// ACL APIs answer it as INVALID_REQUEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidAcl(pub String);

impl Acl {
    /// Checks an ACL before it is stored, as Kafka's controller does: a concrete resource type,
    /// pattern type, operation and permission, a resource name, and a principal of the form
    /// `Type:name`.
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        if matches!(
            self.resource_type,
            ResourceType::Unknown | ResourceType::Any
        ) {
            return Err(InvalidAcl(format!(
                "Invalid resourceType {}",
                resource_type_name(self.resource_type)
            )));
        }
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            return Err(InvalidAcl(format!(
                "Invalid patternType {}",
                pattern_type_name(self.pattern_type)
            )));
        }
        if matches!(self.operation, AclOperation::Unknown | AclOperation::Any) {
            return Err(InvalidAcl(format!(
                "Invalid operation {}",
                operation_name(self.operation)
            )));
        }
        if !matches!(
            self.permission_type,
            AclPermissionType::Allow | AclPermissionType::Deny
        ) {
            return Err(InvalidAcl(format!(
                "Invalid permissionType {}",
                permission_type_name(self.permission_type)
            )));
        }
        // Kafka's broker checks this before the controller sees the ACL (`AclApis`).
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Err(InvalidAcl(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )));
        }
        if self.resource_name.is_empty() {
            return Err(InvalidAcl("Resource name should not be empty".into()));
        }
        if !is_principal(&self.principal) {
            return Err(InvalidAcl(format!(
                "Could not parse principal from `{}` (no colon is found)",
                self.principal
            )));
        }
        Ok(())
    }

    /// Whether this ACL's pattern covers a resource of this type and (literal) name.
    fn pattern_matches(&self, resource_type: ResourceType, name: &str) -> bool {
        if self.resource_type != resource_type {
            return false;
        }
        match self.pattern_type {
            PatternType::Literal => {
                self.resource_name == name || self.resource_name == WILDCARD_RESOURCE
            }
            PatternType::Prefixed => name.starts_with(&self.resource_name),
            _ => false,
        }
    }

    /// Kafka's `findResult`: ALLOW or DENY when this ACL applies to the caller and operation,
    /// `None` when it says nothing about them.
    fn decides(&self, principal: &str, host: &str, op: AclOperation) -> Option<Decision> {
        if self.principal != principal && self.principal != WILDCARD_PRINCIPAL {
            return None;
        }
        if self.host != WILDCARD_HOST && self.host != host {
            return None;
        }
        if self.operation != AclOperation::All {
            let applies = match self.permission_type {
                // Implied operations are granted by ALLOW ACLs only: a DENY of READ does not
                // deny DESCRIBE.
                AclPermissionType::Allow => match op {
                    AclOperation::Describe => matches!(
                        self.operation,
                        AclOperation::Describe
                            | AclOperation::Read
                            | AclOperation::Write
                            | AclOperation::Delete
                            | AclOperation::Alter
                    ),
                    AclOperation::DescribeConfigs => matches!(
                        self.operation,
                        AclOperation::DescribeConfigs | AclOperation::AlterConfigs
                    ),
                    _ => self.operation == op,
                },
                _ => self.operation == op,
            };
            if !applies {
                return None;
            }
        }
        match self.permission_type {
            AclPermissionType::Allow => Some(Decision::Allowed),
            AclPermissionType::Deny => Some(Decision::Denied),
            _ => None,
        }
    }
}

/// `Type:name`, as Kafka's `SecurityUtils.parseKafkaPrincipal` requires.
pub fn is_principal(s: &str) -> bool {
    matches!(s.split_once(':'), Some((t, _)) if !t.is_empty())
}

/// The authorizer's answer for one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
}

/// The authorizer's settings (`super.users`, `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerRules {
    /// Principals (`User:admin`) that may do everything.
    pub super_users: BTreeSet<String>,
    /// The answer for a resource no ACL names at all.
    pub allow_everyone_if_no_acl_found: bool,
}

/// Whether `principal`, connected from `host` (an IP address as text), may do `op` on the
/// resource of type `resource_type` named `resource_name`, given every ACL of the cluster
/// (Kafka's `StandardAuthorizerData#authorize`).
pub fn authorize<'a>(
    rules: &AuthorizerRules,
    acls: impl IntoIterator<Item = &'a Acl>,
    principal: &str,
    host: &str,
    resource_type: ResourceType,
    resource_name: &str,
    op: AclOperation,
) -> Decision {
    if rules.super_users.contains(principal) {
        return Decision::Allowed;
    }
    let mut resource_has_acls = false;
    let mut allowed = false;
    for acl in acls {
        if !acl.pattern_matches(resource_type, resource_name) {
            continue;
        }
        resource_has_acls = true;
        match acl.decides(principal, host, op) {
            Some(Decision::Denied) => return Decision::Denied,
            Some(Decision::Allowed) => allowed = true,
            None => {}
        }
    }
    if allowed || (!resource_has_acls && rules.allow_everyone_if_no_acl_found) {
        Decision::Allowed
    } else {
        Decision::Denied
    }
}

/// A filter over ACLs, as DescribeAcls and DeleteAcls carry it (Kafka's `AclBindingFilter`):
/// `None` strings and the ANY codes match everything; pattern type MATCH matches the ACLs that
/// would apply to the literal name (LITERAL of the name or `*`, PREFIXED that starts it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission_type: AclPermissionType,
}

impl AclFilter {
    pub fn matches(&self, acl: &Acl) -> bool {
        let resource_ok = (self.resource_type == ResourceType::Any
            || self.resource_type == acl.resource_type)
            && match self.pattern_type {
                PatternType::Any => self
                    .resource_name
                    .as_ref()
                    .is_none_or(|n| *n == acl.resource_name),
                PatternType::Match => match &self.resource_name {
                    None => true,
                    Some(n) => match acl.pattern_type {
                        PatternType::Literal => {
                            acl.resource_name == *n || acl.resource_name == WILDCARD_RESOURCE
                        }
                        PatternType::Prefixed => n.starts_with(&acl.resource_name),
                        _ => false,
                    },
                },
                p => {
                    p == acl.pattern_type
                        && self
                            .resource_name
                            .as_ref()
                            .is_none_or(|n| *n == acl.resource_name)
                }
            };
        resource_ok
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == AclOperation::Any || self.operation == acl.operation)
            && (self.permission_type == AclPermissionType::Any
                || self.permission_type == acl.permission_type)
    }
}

pub fn resource_type_name(t: ResourceType) -> &'static str {
    match t {
        ResourceType::Unknown => "UNKNOWN",
        ResourceType::Any => "ANY",
        ResourceType::Topic => "TOPIC",
        ResourceType::Group => "GROUP",
        ResourceType::Cluster => "CLUSTER",
        ResourceType::TransactionalId => "TRANSACTIONAL_ID",
        ResourceType::DelegationToken => "DELEGATION_TOKEN",
        ResourceType::User => "USER",
    }
}

pub fn pattern_type_name(t: PatternType) -> &'static str {
    match t {
        PatternType::Unknown => "UNKNOWN",
        PatternType::Any => "ANY",
        PatternType::Match => "MATCH",
        PatternType::Literal => "LITERAL",
        PatternType::Prefixed => "PREFIXED",
    }
}

pub fn operation_name(op: AclOperation) -> &'static str {
    match op {
        AclOperation::Unknown => "UNKNOWN",
        AclOperation::Any => "ANY",
        AclOperation::All => "ALL",
        AclOperation::Read => "READ",
        AclOperation::Write => "WRITE",
        AclOperation::Create => "CREATE",
        AclOperation::Delete => "DELETE",
        AclOperation::Alter => "ALTER",
        AclOperation::Describe => "DESCRIBE",
        AclOperation::ClusterAction => "CLUSTER_ACTION",
        AclOperation::DescribeConfigs => "DESCRIBE_CONFIGS",
        AclOperation::AlterConfigs => "ALTER_CONFIGS",
        AclOperation::IdempotentWrite => "IDEMPOTENT_WRITE",
        AclOperation::CreateTokens => "CREATE_TOKENS",
        AclOperation::DescribeTokens => "DESCRIBE_TOKENS",
        AclOperation::TwoPhaseCommit => "TWO_PHASE_COMMIT",
    }
}

pub fn permission_type_name(p: AclPermissionType) -> &'static str {
    match p {
        AclPermissionType::Unknown => "UNKNOWN",
        AclPermissionType::Any => "ANY",
        AclPermissionType::Deny => "DENY",
        AclPermissionType::Allow => "ALLOW",
    }
}

/// The operations KIP-430 reports as authorized for a resource type, in Kafka's order (those
/// `AclEntry.supportedOperations` lists for it).
pub fn supported_operations(t: ResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match t {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
        ResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        ResourceType::TransactionalId => &[Describe, Write, TwoPhaseCommit],
        ResourceType::DelegationToken => &[Describe],
        ResourceType::User => &[CreateTokens, DescribeTokens],
        _ => &[],
    }
}

/// KIP-430's bit field of the operations `principal` may do on a resource: bit `op.code()` set
/// for each supported operation the authorizer allows.
pub fn authorized_operations<'a>(
    rules: &AuthorizerRules,
    acls: impl IntoIterator<Item = &'a Acl> + Clone,
    principal: &str,
    host: &str,
    resource_type: ResourceType,
    resource_name: &str,
) -> i32 {
    let mut bits = 0;
    for &op in supported_operations(resource_type) {
        let decision = authorize(
            rules,
            acls.clone(),
            principal,
            host,
            resource_type,
            resource_name,
            op,
        );
        if decision == Decision::Allowed {
            bits |= 1 << op.code();
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation as Op;
    use AclPermissionType::{Allow, Deny};
    use Decision::{Allowed, Denied};
    use PatternType::{Literal, Prefixed};
    use ResourceType::{Cluster, Group, Topic, TransactionalId};

    fn acl(
        t: ResourceType,
        name: &str,
        p: PatternType,
        principal: &str,
        host: &str,
        op: Op,
        perm: AclPermissionType,
    ) -> Acl {
        Acl {
            resource_type: t,
            resource_name: name.into(),
            pattern_type: p,
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission_type: perm,
        }
    }

    fn rules(super_users: &[&str], allow_everyone: bool) -> AuthorizerRules {
        AuthorizerRules {
            super_users: super_users.iter().map(|s| s.to_string()).collect(),
            allow_everyone_if_no_acl_found: allow_everyone,
        }
    }

    const ALICE: &str = "User:alice";
    const HOST: &str = "10.0.0.1";

    #[test]
    fn the_decision_table() {
        struct Case {
            what: &'static str,
            acls: Vec<Acl>,
            rules: AuthorizerRules,
            principal: &'static str,
            host: &'static str,
            resource: (ResourceType, &'static str),
            op: Op,
            want: Decision,
        }
        let none = rules(&[], false);
        let everyone = rules(&[], true);
        let cases =
            vec![
            Case {
                what: "no ACL, default: denied",
                acls: vec![],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "no ACL, allow.everyone.if.no.acl.found: allowed",
                acls: vec![],
                rules: everyone.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "allow.everyone does not apply when the resource has an ACL for someone else",
                acls: vec![acl(Topic, "t", Literal, "User:bob", "*", Op::Read, Allow)],
                rules: everyone.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "allow.everyone applies when ACLs name only other resources",
                acls: vec![acl(Topic, "other", Literal, "User:bob", "*", Op::Read, Allow)],
                rules: everyone.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "super user with no ACL",
                acls: vec![acl(Topic, "t", Literal, "User:admin", "*", Op::Read, Deny)],
                rules: rules(&["User:admin"], false),
                principal: "User:admin",
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "literal allow",
                acls: vec![acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "literal of another name",
                acls: vec![acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t2"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "literal wildcard resource",
                acls: vec![acl(Topic, "*", Literal, ALICE, "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "anything"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "prefixed allow",
                acls: vec![acl(Topic, "orders-", Prefixed, ALICE, "*", Op::Write, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "orders-eu"),
                op: Op::Write,
                want: Allowed,
            },
            Case {
                what: "prefixed does not match a shorter name",
                acls: vec![acl(Topic, "orders-", Prefixed, ALICE, "*", Op::Write, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "orders"),
                op: Op::Write,
                want: Denied,
            },
            Case {
                what: "prefixed `*` is a plain prefix, not a wildcard",
                acls: vec![acl(Topic, "*", Prefixed, ALICE, "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "another resource type",
                acls: vec![acl(Group, "t", Literal, ALICE, "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "wildcard principal",
                acls: vec![acl(Group, "g", Literal, "User:*", "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Group, "g"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "another principal",
                acls: vec![acl(Group, "g", Literal, "User:bob", "*", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Group, "g"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "the host named",
                acls: vec![acl(Topic, "t", Literal, ALICE, HOST, Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "another host",
                acls: vec![acl(Topic, "t", Literal, ALICE, "10.0.0.2", Op::Read, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "DENY wins over ALLOW",
                acls: vec![
                    acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow),
                    acl(Topic, "t", Prefixed, "User:*", "*", Op::Read, Deny),
                ],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "DENY wins whatever the order",
                acls: vec![
                    acl(Topic, "*", Literal, ALICE, HOST, Op::All, Deny),
                    acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow),
                ],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "a DENY of another operation does not deny",
                acls: vec![
                    acl(Topic, "t", Literal, ALICE, "*", Op::All, Allow),
                    acl(Topic, "t", Literal, ALICE, "*", Op::Write, Deny),
                ],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Allowed,
            },
            Case {
                what: "a DENY of READ does not deny DESCRIBE (implication is ALLOW-only)",
                acls: vec![
                    acl(Topic, "t", Literal, ALICE, "*", Op::Describe, Allow),
                    acl(Topic, "t", Literal, ALICE, "*", Op::Read, Deny),
                ],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Describe,
                want: Allowed,
            },
            Case {
                what: "ALLOW ALL allows any operation",
                acls: vec![acl(Cluster, CLUSTER_NAME, Literal, ALICE, "*", Op::All, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Cluster, CLUSTER_NAME),
                op: Op::ClusterAction,
                want: Allowed,
            },
            Case {
                what: "DENY ALL denies any operation",
                acls: vec![
                    acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow),
                    acl(Topic, "t", Literal, ALICE, "*", Op::All, Deny),
                ],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Read,
                want: Denied,
            },
            Case {
                what: "an ALLOW of one operation does not allow another",
                acls: vec![acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow)],
                rules: everyone.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::Write,
                want: Denied,
            },
            Case {
                what: "DESCRIBE_CONFIGS implied by ALTER_CONFIGS",
                acls: vec![acl(Topic, "t", Literal, ALICE, "*", Op::AlterConfigs, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::DescribeConfigs,
                want: Allowed,
            },
            Case {
                what: "ALTER_CONFIGS not implied by DESCRIBE_CONFIGS",
                acls: vec![acl(Topic, "t", Literal, ALICE, "*", Op::DescribeConfigs, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (Topic, "t"),
                op: Op::AlterConfigs,
                want: Denied,
            },
            Case {
                what: "DESCRIBE does not imply READ",
                acls: vec![acl(TransactionalId, "tx", Literal, ALICE, "*", Op::Describe, Allow)],
                rules: none.clone(),
                principal: ALICE,
                host: HOST,
                resource: (TransactionalId, "tx"),
                op: Op::Write,
                want: Denied,
            },
        ];
        for c in &cases {
            let got = authorize(
                &c.rules,
                &c.acls,
                c.principal,
                c.host,
                c.resource.0,
                c.resource.1,
                c.op,
            );
            assert_eq!(got, c.want, "{}", c.what);
        }
        // DESCRIBE is implied by each of READ, WRITE, DELETE and ALTER, and by nothing else.
        for op in [
            Op::Read,
            Op::Write,
            Op::Create,
            Op::Delete,
            Op::Alter,
            Op::AlterConfigs,
            Op::ClusterAction,
        ] {
            let acls = [acl(Topic, "t", Literal, ALICE, "*", op, Allow)];
            let got = authorize(&none, &acls, ALICE, HOST, Topic, "t", Op::Describe);
            let implied = matches!(op, Op::Read | Op::Write | Op::Delete | Op::Alter);
            assert_eq!(got == Allowed, implied, "DESCRIBE from {op:?}");
        }
    }

    #[test]
    fn codes_are_kafkas_and_unknown_codes_stay_unknown() {
        assert_eq!(ResourceType::from_code(2), Topic);
        assert_eq!(ResourceType::from_code(7), ResourceType::User);
        assert_eq!(ResourceType::from_code(42), ResourceType::Unknown);
        assert_eq!(PatternType::from_code(4), Prefixed);
        assert_eq!(Op::from_code(12), Op::IdempotentWrite);
        assert_eq!(Op::from_code(-1), Op::Unknown);
        assert_eq!(AclPermissionType::from_code(3), Allow);
        for code in 0..=15 {
            assert_eq!(Op::from_code(code).code(), code);
        }
    }

    #[test]
    fn validation_refuses_what_kafkas_controller_refuses() {
        let good = acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow);
        assert_eq!(good.validate(), Ok(()));
        let bad = [
            (
                Acl {
                    resource_type: ResourceType::Any,
                    ..good.clone()
                },
                "Invalid resourceType ANY",
            ),
            (
                Acl {
                    pattern_type: PatternType::Match,
                    ..good.clone()
                },
                "Invalid patternType MATCH",
            ),
            (
                Acl {
                    operation: Op::Any,
                    ..good.clone()
                },
                "Invalid operation ANY",
            ),
            (
                Acl {
                    permission_type: AclPermissionType::Any,
                    ..good.clone()
                },
                "Invalid permissionType ANY",
            ),
            (
                Acl {
                    resource_name: String::new(),
                    ..good.clone()
                },
                "Resource name should not be empty",
            ),
            (
                Acl {
                    resource_type: ResourceType::Cluster,
                    resource_name: "k".into(),
                    pattern_type: PatternType::Prefixed,
                    ..good.clone()
                },
                "The only valid name for the CLUSTER resource is kafka-cluster",
            ),
        ];
        for (a, want) in bad {
            assert_eq!(a.validate(), Err(InvalidAcl(want.into())));
        }
        assert!(Acl {
            principal: "alice".into(),
            ..good
        }
        .validate()
        .is_err());
    }

    #[test]
    fn filters_match_as_kafkas_acl_binding_filter() {
        let lit = acl(Topic, "orders", Literal, ALICE, "*", Op::Read, Allow);
        let star = acl(Topic, "*", Literal, ALICE, "*", Op::Read, Allow);
        let pre = acl(Topic, "ord", Prefixed, "User:bob", "*", Op::Write, Deny);
        let any = AclFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Op::Any,
            permission_type: AclPermissionType::Any,
        };
        assert!([&lit, &star, &pre].iter().all(|a| any.matches(a)));
        let named = AclFilter {
            resource_type: Topic,
            resource_name: Some("orders".into()),
            ..any.clone()
        };
        assert!(named.matches(&lit) && !named.matches(&star) && !named.matches(&pre));
        let matching = AclFilter {
            pattern_type: PatternType::Match,
            ..named.clone()
        };
        assert!(matching.matches(&lit) && matching.matches(&star) && matching.matches(&pre));
        let prefixed = AclFilter {
            pattern_type: Prefixed,
            resource_name: None,
            ..named.clone()
        };
        assert!(!prefixed.matches(&lit) && prefixed.matches(&pre));
        let bob_deny = AclFilter {
            principal: Some("User:bob".into()),
            permission_type: Deny,
            ..any.clone()
        };
        assert!(bob_deny.matches(&pre) && !bob_deny.matches(&lit));
        let group = AclFilter {
            resource_type: Group,
            ..any
        };
        assert!(!group.matches(&lit));
    }

    #[test]
    fn authorized_operations_are_a_bit_per_allowed_operation() {
        let acls = [acl(Topic, "t", Literal, ALICE, "*", Op::Read, Allow)];
        let bits = authorized_operations(&rules(&[], false), &acls, ALICE, HOST, Topic, "t");
        assert_eq!(
            bits,
            (1 << 3) | (1 << 8),
            "READ and the DESCRIBE it implies"
        );
        let all = authorized_operations(&rules(&[ALICE], false), &acls, ALICE, HOST, Topic, "t");
        let want = supported_operations(Topic)
            .iter()
            .fold(0, |b, op| b | 1 << op.code());
        assert_eq!(all, want);
    }
}
