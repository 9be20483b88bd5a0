//! DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1–3 (the versions Kafka 4 serves).
//!
//! With no authorizer configured Kafka answers every ACL request SECURITY_DISABLED (its
//! `AclApis`): the whole DescribeAcls, each creation and each deletion filter, so that
//! `kafka-acls` says security is disabled rather than that the API is unknown.
//!
//! With the `StandardAuthorizer` (`authorizer.class.name`), the caller needs DESCRIBE on the
//! cluster for DescribeAcls and ALTER for CreateAcls / DeleteAcls (checked by
//! `server::dispatch` before these run, [`super::authz::cluster_operation`]). DescribeAcls
//! answers from the broker's image, grouped by resource pattern as Kafka groups them;
//! CreateAcls and DeleteAcls are decided by the active controller
//! (`controller::decisions::acls`), reached like the other metadata changes (forwarded when
//! this node is not the active controller).

use std::collections::BTreeMap;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use kafka_protocol::ResponseError;

use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::metadata::acl::{
    Acl, AclFilter, AclOperation, AclPermissionType, PatternType, ResourceType,
};
use crate::metadata::MetadataImage;

/// Kafka's messages for SECURITY_DISABLED: DescribeAcls has its own wording.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";
const NO_AUTHORIZER_ON_BROKER: &str = "No Authorizer is configured on the broker";

fn security_disabled() -> i16 {
    ResponseError::SecurityDisabled.code()
}

fn filter_of(
    resource_type: i8,
    resource_name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission_type: i8,
) -> AclFilter {
    AclFilter {
        resource_type: ResourceType::from_code(resource_type),
        resource_name: resource_name.map(|s| s.to_string()),
        pattern_type: PatternType::from_code(pattern_type),
        principal: principal.map(|s| s.to_string()),
        host: host.map(|s| s.to_string()),
        operation: AclOperation::from_code(operation),
        permission_type: AclPermissionType::from_code(permission_type),
    }
}

/// DescribeAcls with an authorizer: the image's ACLs the filter matches, grouped by resource
/// pattern. A filter with an UNKNOWN code is refused INVALID_REQUEST, as Kafka's
/// `DescribeAclsRequest` validates it.
pub fn describe_with(image: &MetadataImage, request: DescribeAclsRequest) -> ResponseKind {
    let filter = filter_of(
        request.resource_type_filter,
        request.resource_name_filter.as_ref(),
        request.pattern_type_filter,
        request.principal_filter.as_ref(),
        request.host_filter.as_ref(),
        request.operation,
        request.permission_type,
    );
    if filter.resource_type == ResourceType::Unknown
        || filter.pattern_type == PatternType::Unknown
        || filter.operation == AclOperation::Unknown
        || filter.permission_type == AclPermissionType::Unknown
    {
        let e = ApiError::InvalidRequest("The filter contains an UNKNOWN element".into());
        return ResponseKind::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(e.code())
                .with_error_message(Some(StrBytes::from_string(e.message()))),
        );
    }
    let mut grouped: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for acl in image.acls.values().filter(|a| filter.matches(a)) {
        grouped
            .entry((
                acl.resource_type.code(),
                acl.resource_name.clone(),
                acl.pattern_type.code(),
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(StrBytes::from_string(acl.principal.clone()))
                    .with_host(StrBytes::from_string(acl.host.clone()))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission_type.code()),
            );
    }
    let resources = grouped
        .into_iter()
        .map(|((t, name, p), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(t)
                .with_resource_name(StrBytes::from_string(name))
                .with_pattern_type(p)
                .with_acls(acls)
        })
        .collect();
    ResponseKind::DescribeAcls(DescribeAclsResponse::default().with_resources(resources))
}

fn error_message(e: &ApiError) -> Option<StrBytes> {
    Some(StrBytes::from_string(e.message()))
}

/// CreateAcls with an authorizer: the creations decided by the active controller.
pub async fn create_with(
    controller: &ControllerChannel,
    request: CreateAclsRequest,
) -> ResponseKind {
    let acls: Vec<Acl> = request
        .creations
        .iter()
        .map(|c| Acl {
            resource_type: ResourceType::from_code(c.resource_type),
            resource_name: c.resource_name.to_string(),
            pattern_type: PatternType::from_code(c.resource_pattern_type),
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation: AclOperation::from_code(c.operation),
            permission_type: AclPermissionType::from_code(c.permission_type),
        })
        .collect();
    let count = acls.len();
    let outcomes = match controller.create_acls(acls).await {
        Ok(outcomes) => outcomes,
        Err(e) => vec![Err(e); count],
    };
    let results = outcomes
        .iter()
        .map(|o| match o {
            Ok(()) => AclCreationResult::default(),
            Err(e) => AclCreationResult::default()
                .with_error_code(e.code())
                .with_error_message(error_message(e)),
        })
        .collect();
    ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results))
}

/// DeleteAcls with an authorizer: each filter's deletions decided by the active controller.
pub async fn delete_with(
    controller: &ControllerChannel,
    request: DeleteAclsRequest,
) -> ResponseKind {
    let filters: Vec<AclFilter> = request
        .filters
        .iter()
        .map(|f| {
            filter_of(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let count = filters.len();
    let outcomes = match controller.delete_acls(filters).await {
        Ok(outcomes) => outcomes,
        Err(e) => vec![Err(e); count],
    };
    let results = outcomes
        .into_iter()
        .map(|o| match o {
            Ok(matched) => DeleteAclsFilterResult::default().with_matching_acls(
                matched
                    .into_iter()
                    .map(|(_, acl)| {
                        DeleteAclsMatchingAcl::default()
                            .with_resource_type(acl.resource_type.code())
                            .with_resource_name(StrBytes::from_string(acl.resource_name))
                            .with_pattern_type(acl.pattern_type.code())
                            .with_principal(StrBytes::from_string(acl.principal))
                            .with_host(StrBytes::from_string(acl.host))
                            .with_operation(acl.operation.code())
                            .with_permission_type(acl.permission_type.code())
                    })
                    .collect(),
            ),
            Err(e) => DeleteAclsFilterResult::default()
                .with_error_code(e.code())
                .with_error_message(error_message(&e)),
        })
        .collect();
    ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results))
}

pub fn describe(_version: i16, _request: DescribeAclsRequest) -> ResponseKind {
    ResponseKind::DescribeAcls(
        DescribeAclsResponse::default()
            .with_error_code(security_disabled())
            .with_error_message(Some(StrBytes::from_static_str(NO_AUTHORIZER_ON_BROKER))),
    )
}

pub fn create(_version: i16, request: CreateAclsRequest) -> ResponseKind {
    let results = request
        .creations
        .iter()
        .map(|_| {
            AclCreationResult::default()
                .with_error_code(security_disabled())
                .with_error_message(Some(StrBytes::from_static_str(NO_AUTHORIZER)))
        })
        .collect();
    ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results))
}

pub fn delete(_version: i16, request: DeleteAclsRequest) -> ResponseKind {
    let results = request
        .filters
        .iter()
        .map(|_| {
            DeleteAclsFilterResult::default()
                .with_error_code(security_disabled())
                .with_error_message(Some(StrBytes::from_static_str(NO_AUTHORIZER)))
        })
        .collect();
    ResponseKind::DeleteAcls(DeleteAclsResponse::default().with_filter_results(results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    const SECURITY_DISABLED: i16 = 54;

    #[test]
    fn without_an_authorizer_every_acl_request_is_security_disabled() {
        let ResponseKind::DescribeAcls(d) = describe(3, DescribeAclsRequest::default()) else {
            panic!()
        };
        assert_eq!(d.error_code, SECURITY_DISABLED);
        assert!(d.resources.is_empty());
        let ResponseKind::CreateAcls(c) = create(
            3,
            CreateAclsRequest::default()
                .with_creations(vec![AclCreation::default(), AclCreation::default()]),
        ) else {
            panic!()
        };
        assert_eq!(c.results.len(), 2, "one result per creation");
        assert!(c.results.iter().all(|r| r.error_code == SECURITY_DISABLED));
        let ResponseKind::DeleteAcls(d) = delete(
            2,
            DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()]),
        ) else {
            panic!()
        };
        assert_eq!(d.filter_results.len(), 1, "one result per filter");
        assert_eq!(d.filter_results[0].error_code, SECURITY_DISABLED);
        assert!(d.filter_results[0].matching_acls.is_empty());
    }
}
