//! DescribeClientQuotas (48), v0–1. KafkaIQ enforces no client quotas and serves no
//! AlterClientQuotas, so no quota is ever configured: a valid filter matches nothing and is
//! answered with no entries, as Kafka answers a cluster without quotas. The filter is validated
//! as Kafka's `ClientQuotasImage.describe` validates it, with its errors and messages.
//! `kafka-configs --describe --entity-type users` asks this before it describes the users'
//! SCRAM credentials. The caller needs DESCRIBE_CONFIGS on the cluster (checked by
//! `server::dispatch`).

use std::collections::BTreeSet;

use kafka_protocol::messages::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::errors::ApiError;

const MATCH_TYPE_EXACT: i8 = 0;
const MATCH_TYPE_DEFAULT: i8 = 1;
const MATCH_TYPE_SPECIFIED: i8 = 2;

fn check(request: &DescribeClientQuotasRequest) -> Result<(), ApiError> {
    let invalid = |m: String| ApiError::InvalidRequest(m);
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for component in &request.components {
        let entity_type: &str = &component.entity_type;
        if entity_type.is_empty() {
            return Err(invalid("Invalid empty entity type.".into()));
        }
        if !seen.insert(entity_type) {
            return Err(invalid(format!(
                "Entity type {entity_type} cannot appear more than once in the filter."
            )));
        }
        if !matches!(entity_type, "user" | "client-id" | "ip") {
            return Err(ApiError::UnsupportedVersion
                .with_message(format!("Unsupported entity type {entity_type}")));
        }
        match (component.match_type, component._match.is_some()) {
            (MATCH_TYPE_EXACT, false) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ))
            }
            (MATCH_TYPE_DEFAULT, true) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .into(),
                ))
            }
            (MATCH_TYPE_SPECIFIED, true) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ))
            }
            (MATCH_TYPE_EXACT | MATCH_TYPE_DEFAULT | MATCH_TYPE_SPECIFIED, _) => {}
            (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
        }
    }
    if seen.contains("ip") && (seen.contains("user") || seen.contains("client-id")) {
        return Err(invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .into(),
        ));
    }
    Ok(())
}

pub fn handle(request: DescribeClientQuotasRequest) -> ResponseKind {
    let response = match check(&request) {
        Ok(()) => DescribeClientQuotasResponse::default()
            .with_error_message(None)
            .with_entries(Some(Vec::new())),
        Err(e) => DescribeClientQuotasResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(StrBytes::from_string(e.message())))
            .with_entries(None),
    };
    ResponseKind::DescribeClientQuotas(response)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    use super::*;

    fn component(
        entity_type: &'static str,
        match_type: i8,
        name: Option<&'static str>,
    ) -> ComponentData {
        ComponentData::default()
            .with_entity_type(StrBytes::from_static_str(entity_type))
            .with_match_type(match_type)
            .with_match(name.map(StrBytes::from_static_str))
    }

    fn answer(components: Vec<ComponentData>) -> (i16, Option<String>, Option<usize>) {
        let ResponseKind::DescribeClientQuotas(r) =
            handle(DescribeClientQuotasRequest::default().with_components(components))
        else {
            unreachable!()
        };
        (
            r.error_code,
            r.error_message.map(|m| m.to_string()),
            r.entries.map(|e| e.len()),
        )
    }

    #[test]
    fn a_valid_filter_matches_no_quota_and_an_invalid_one_gets_kafkas_error() {
        assert_eq!(
            answer(vec![component("user", 0, Some("alice"))]),
            (0, None, Some(0))
        );
        assert_eq!(answer(vec![component("user", 2, None)]), (0, None, Some(0)));
        assert_eq!(
            answer(vec![component("user", 0, None)]),
            (
                42,
                Some("Request specified MATCH_TYPE_EXACT, but set match string to null.".into()),
                None
            )
        );
        assert_eq!(
            answer(vec![component("user", 2, None), component("user", 1, None)]).0,
            42
        );
        assert_eq!(answer(vec![component("topic", 2, None)]).0, 35);
        assert_eq!(answer(vec![component("user", 7, None)]).0, 42);
        assert_eq!(
            answer(vec![
                component("ip", 2, None),
                component("client-id", 2, None)
            ])
            .0,
            42
        );
    }
}
