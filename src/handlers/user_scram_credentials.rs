//! DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), v0 (the only version).
//!
//! Describe is answered from this node's image (Kafka's `ScramImage.describe`) and the
//! credentials `kafkaiq.sasl.scram.users` gives it (as Kafka lists those `kafka-storage format
//! --add-scram` bootstrapped): every user with a credential when no users (or an empty list)
//! are named; otherwise each named user once, with
//! RESOURCE_NOT_FOUND for one without credentials and DUPLICATE_RESOURCE for one named twice.
//! Only mechanisms and iteration counts are described, never salts or keys. Alter is decided by
//! the active controller (`controller::decisions::scram`), reached like the other metadata
//! changes (forwarded when this node is not the active controller). The caller needs DESCRIBE,
//! respectively ALTER, on the cluster (checked by `server::dispatch` before these run).

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, ResponseKind,
};
use kafka_protocol::protocol::StrBytes;

use crate::controller::decisions::scram::{ScramDeletion, ScramUpsertion};
use crate::controller::ControllerChannel;
use crate::errors::ApiError;
use crate::metadata::scram::ScramMechanism;
use crate::metadata::MetadataImage;

const DESCRIBE_DUPLICATE_USER: &str =
    "Cannot describe SCRAM credentials for the same user twice in a single request: ";
const DESCRIBE_USER_THAT_DOES_NOT_EXIST: &str =
    "Attempt to describe a user credential that does not exist: ";

/// `file`: the credentials `kafkaiq.sasl.scram.users` gives this node (iterations by user and
/// SASL mechanism name), described as Kafka describes the ones `kafka-storage format
/// --add-scram` bootstrapped, unless the metadata log removed them; the log's own win over them.
pub fn describe(
    image: &MetadataImage,
    file: &BTreeMap<(String, &'static str), u32>,
    request: DescribeUserScramCredentialsRequest,
) -> ResponseKind {
    let mut credentials: BTreeMap<(String, ScramMechanism), u32> = file
        .iter()
        .filter_map(|((user, name), iterations)| {
            let mechanism = [ScramMechanism::Sha256, ScramMechanism::Sha512]
                .into_iter()
                .find(|m| m.sasl_name() == *name)?;
            Some(((user.clone(), mechanism), *iterations))
        })
        .filter(|(key, _)| !image.scram_removed.contains(key))
        .collect();
    credentials.extend(
        image
            .scram
            .iter()
            .map(|(key, credential)| (key.clone(), credential.iterations)),
    );
    // Each user once, in the order named (or by name), with whether it was named twice.
    let mut users: Vec<(String, bool)> = Vec::new();
    match request.users.filter(|u| !u.is_empty()) {
        None => {
            for (user, _) in credentials.keys() {
                if users.last().is_none_or(|(last, _)| last != user) {
                    users.push((user.clone(), false));
                }
            }
        }
        Some(named) => {
            let mut seen: BTreeMap<String, usize> = BTreeMap::new();
            for user in named {
                let name = user.name.to_string();
                match seen.get(&name) {
                    Some(&i) => users[i].1 = true,
                    None => {
                        seen.insert(name.clone(), users.len());
                        users.push((name, false));
                    }
                }
            }
        }
    }
    let results = users
        .into_iter()
        .map(|(user, twice)| {
            let result = DescribeUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(user.clone()))
                .with_error_message(None);
            if twice {
                let message = format!("{DESCRIBE_DUPLICATE_USER}{user}");
                return result
                    .with_error_code(ApiError::DuplicateResource.code())
                    .with_error_message(Some(StrBytes::from_string(message)));
            }
            let infos: Vec<CredentialInfo> = credentials
                .range((user.clone(), ScramMechanism::Sha256)..)
                .take_while(|((u, _), _)| *u == user)
                .map(|((_, mechanism), iterations)| {
                    CredentialInfo::default()
                        .with_mechanism(mechanism.code())
                        .with_iterations(*iterations as i32)
                })
                .collect();
            if infos.is_empty() {
                let message = format!("{DESCRIBE_USER_THAT_DOES_NOT_EXIST}{user}");
                result
                    .with_error_code(ApiError::ResourceNotFound.code())
                    .with_error_message(Some(StrBytes::from_string(message)))
            } else {
                result.with_credential_infos(infos)
            }
        })
        .collect();
    ResponseKind::DescribeUserScramCredentials(
        DescribeUserScramCredentialsResponse::default()
            .with_error_message(None)
            .with_results(results),
    )
}

pub async fn alter(
    controller: &ControllerChannel,
    request: AlterUserScramCredentialsRequest,
) -> ResponseKind {
    let deletions: Vec<ScramDeletion> = request
        .deletions
        .iter()
        .map(|d| ScramDeletion {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        })
        .collect();
    let upsertions: Vec<ScramUpsertion> = request
        .upsertions
        .iter()
        .map(|u| ScramUpsertion {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let outcomes = match controller
        .alter_user_scram_credentials(deletions, upsertions)
        .await
    {
        Ok(outcomes) => outcomes,
        // Not decided at all: every user named gets the error.
        Err(e) => every_user(&request)
            .into_iter()
            .map(|user| (user, Err(e.clone())))
            .collect(),
    };
    ResponseKind::AlterUserScramCredentials(
        AlterUserScramCredentialsResponse::default().with_results(
            outcomes
                .into_iter()
                .map(|(user, outcome)| result(user, outcome.err()))
                .collect(),
        ),
    )
}

/// Every user a request names, once each, deletions' first.
pub fn every_user(request: &AlterUserScramCredentialsRequest) -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    let names = request
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(request.upsertions.iter().map(|u| &u.name));
    for name in names {
        if !users.iter().any(|u| **u == **name) {
            users.push(name.to_string());
        }
    }
    users
}

pub fn result(user: String, error: Option<ApiError>) -> AlterUserScramCredentialsResult {
    let result = AlterUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user))
        .with_error_message(None);
    match error {
        None => result,
        Some(e) => result
            .with_error_code(e.code())
            .with_error_message(Some(StrBytes::from_string(e.message()))),
    }
}
