//! DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), v1–3 (the versions Kafka 4 serves).
//!
//! With no authorizer configured Kafka answers every ACL request SECURITY_DISABLED (its
//! `AclApis`): the whole DescribeAcls, each creation and each deletion filter, so that
//! `kafka-acls` says security is disabled rather than that the API is unknown. KafkaIQ runs
//! without an authorizer (`authorizer.class.name` is refused at startup until requests are
//! checked against ACLs), so these answers are the whole of what the APIs do for now.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use kafka_protocol::ResponseError;

/// Kafka's messages for SECURITY_DISABLED: DescribeAcls has its own wording.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";
const NO_AUTHORIZER_ON_BROKER: &str = "No Authorizer is configured on the broker";

fn security_disabled() -> i16 {
    ResponseError::SecurityDisabled.code()
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
