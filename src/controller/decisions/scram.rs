//! AlterUserScramCredentials on the controller (Kafka's `ScramControlManager.alterCredentials`):
//! the records a request needs and each user's outcome, decided against the image.
//!
//! A user is altered at most once per request: a second deletion or upsertion naming the same
//! user (whatever the mechanism) fails that user with DUPLICATE_RESOURCE, and nothing is done
//! for it. An empty user name or a salt too long to store is UNACCEPTABLE_CREDENTIAL, an
//! unknown mechanism UNSUPPORTED_SASL_MECHANISM, a deletion of a credential that does not
//! exist RESOURCE_NOT_FOUND, and an iteration count outside 4096..=16384 UNACCEPTABLE_CREDENTIAL
//! ("Too few iterations" / "Too many iterations"), all with Kafka's messages; an empty salted
//! password is UNACCEPTABLE_CREDENTIAL too (Kafka fails it another way). An upsertion carries
//! the salted password; only the stored key and the server key derived from it are written.

use std::collections::BTreeMap;

use crate::errors::ApiError;
use crate::limits::METADATA_STRING_BYTES_MAX;
use crate::metadata::records::MetadataRecord;
use crate::metadata::scram::{ScramMechanism, SCRAM_ITERATIONS_MAX, SCRAM_ITERATIONS_MIN};
use crate::metadata::MetadataImage;
use crate::scram::ScramCredential;

/// One credential to delete, as the request carries it.
#[derive(Debug, Clone)]
pub struct ScramDeletion {
    pub user: String,
    pub mechanism: i8,
}

/// One credential to set, as the request carries it.
#[derive(Clone)]
pub struct ScramUpsertion {
    pub user: String,
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
}

impl std::fmt::Debug for ScramUpsertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramUpsertion")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

fn duplicate() -> ApiError {
    ApiError::DuplicateResource
        .with_message("A user credential cannot be altered twice in the same request")
}

fn check_user_and_mechanism(user: &str, mechanism: i8) -> Result<ScramMechanism, ApiError> {
    if user.is_empty() {
        return Err(ApiError::UnacceptableCredential.with_message("Username must not be empty"));
    }
    if user.len() > METADATA_STRING_BYTES_MAX {
        return Err(ApiError::UnacceptableCredential.with_message("Username is too long"));
    }
    ScramMechanism::from_code(mechanism)
        .ok_or_else(|| ApiError::UnsupportedSaslMechanism.with_message("Unknown SCRAM mechanism"))
}

/// AlterUserScramCredentials: each user's outcome (the deletions' users first, then the
/// upsertions', then the refused ones) and the records to commit.
///
/// `in_file` says whether this node's `kafkaiq.sasl.scram.users` gives a user a credential for
/// a mechanism: such a credential, never in the log or set there and not removed since, can be
/// deleted too (its removal is written, and stands in every node's image and snapshot), as a
/// credential Kafka's `kafka-storage format --add-scram` bootstrapped can.
pub fn alter_user_scram_credentials(
    image: &MetadataImage,
    in_file: &dyn Fn(ScramMechanism, &str) -> bool,
    deletions: &[ScramDeletion],
    upsertions: &[ScramUpsertion],
) -> (Vec<(String, Result<(), ApiError>)>, Vec<MetadataRecord>) {
    let mut refused: BTreeMap<String, ApiError> = BTreeMap::new();
    let mut deleting: Vec<(String, ScramMechanism)> = Vec::new();
    let mut upserting: Vec<(String, ScramMechanism, ScramCredential)> = Vec::new();
    for deletion in deletions {
        let user = &deletion.user;
        if refused.contains_key(user) {
            continue;
        }
        if let Some(i) = deleting.iter().position(|(u, _)| u == user) {
            deleting.remove(i);
            refused.insert(user.clone(), duplicate());
            continue;
        }
        let checked = check_user_and_mechanism(user, deletion.mechanism).and_then(|mechanism| {
            let key = (user.clone(), mechanism);
            let from_file = || in_file(mechanism, user) && !image.scram_removed.contains(&key);
            if image.scram.contains_key(&key) || from_file() {
                Ok(mechanism)
            } else {
                Err(ApiError::ResourceNotFound
                    .with_message("Attempt to delete a user credential that does not exist"))
            }
        });
        match checked {
            Ok(mechanism) => deleting.push((user.clone(), mechanism)),
            Err(e) => {
                refused.insert(user.clone(), e);
            }
        }
    }
    for upsertion in upsertions {
        let user = &upsertion.user;
        if refused.contains_key(user) {
            continue;
        }
        let deleted = deleting.iter().position(|(u, _)| u == user);
        let upserted = upserting.iter().position(|(u, _, _)| u == user);
        if deleted.is_some() || upserted.is_some() {
            if let Some(i) = deleted {
                deleting.remove(i);
            }
            if let Some(i) = upserted {
                upserting.remove(i);
            }
            refused.insert(user.clone(), duplicate());
            continue;
        }
        let checked = check_user_and_mechanism(user, upsertion.mechanism).and_then(|mechanism| {
            if upsertion.iterations < SCRAM_ITERATIONS_MIN {
                Err(ApiError::UnacceptableCredential.with_message("Too few iterations"))
            } else if upsertion.iterations > SCRAM_ITERATIONS_MAX {
                Err(ApiError::UnacceptableCredential.with_message("Too many iterations"))
            } else if upsertion.salted_password.is_empty() {
                // Kafka refuses it too, when its HMAC will not take an empty key (as
                // UNKNOWN_SERVER_ERROR, "Empty key"). Keys derived from an empty salted password
                // are known to everyone: anyone could authenticate as this user.
                Err(ApiError::UnacceptableCredential
                    .with_message("Salted password must not be empty"))
            } else if upsertion.salt.len() > METADATA_STRING_BYTES_MAX {
                // Kafka takes any salt; the metadata log's byte strings hold at most this much.
                Err(ApiError::UnacceptableCredential.with_message("Salt is too long"))
            } else {
                Ok(mechanism)
            }
        });
        match checked {
            Ok(mechanism) => upserting.push((
                user.clone(),
                mechanism,
                ScramCredential::from_salted_password(
                    mechanism.hash(),
                    &upsertion.salted_password,
                    upsertion.salt.clone(),
                    upsertion.iterations as u32,
                ),
            )),
            Err(e) => {
                refused.insert(user.clone(), e);
            }
        }
    }
    let mut results = Vec::with_capacity(deleting.len() + upserting.len() + refused.len());
    let mut records = Vec::with_capacity(deleting.len() + upserting.len());
    for (user, mechanism) in deleting {
        records.push(MetadataRecord::RemoveUserScramCredential {
            user: user.clone(),
            mechanism,
        });
        results.push((user, Ok(())));
    }
    for (user, mechanism, credential) in upserting {
        records.push(MetadataRecord::UserScramCredential {
            user: user.clone(),
            mechanism,
            credential,
        });
        results.push((user, Ok(())));
    }
    results.extend(refused.into_iter().map(|(user, e)| (user, Err(e))));
    (results, records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::ScramHash;

    fn no_file(_: ScramMechanism, _: &str) -> bool {
        false
    }

    fn upsert(user: &str, mechanism: i8, iterations: i32) -> ScramUpsertion {
        ScramUpsertion {
            user: user.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: ScramHash::Sha256.salted_password(b"secret", b"salt", 4096),
        }
    }

    fn delete(user: &str, mechanism: i8) -> ScramDeletion {
        ScramDeletion {
            user: user.into(),
            mechanism,
        }
    }

    fn outcome(
        results: &[(String, Result<(), ApiError>)],
        user: &str,
    ) -> Result<(), (i16, String)> {
        let (_, result) = results.iter().find(|(u, _)| u == user).expect(user);
        result.clone().map_err(|e| (e.code(), e.message()))
    }

    #[test]
    fn an_upsertion_writes_the_derived_keys_and_the_user_then_authenticates() {
        let image = MetadataImage::empty("c".into(), 1);
        let (results, records) =
            alter_user_scram_credentials(&image, &no_file, &[], &[upsert("alice", 1, 4096)]);
        assert_eq!(outcome(&results, "alice"), Ok(()));
        let image = image.apply(&records);
        let stored = &image.scram[&("alice".to_owned(), ScramMechanism::Sha256)];
        // The same credential the password would give: the salted password is not kept.
        assert_eq!(
            *stored,
            ScramCredential::new(ScramHash::Sha256, "secret", b"salt".to_vec(), 4096)
        );
    }

    #[test]
    fn refusals_carry_kafkas_codes_and_messages_and_write_nothing_for_that_user() {
        let image = MetadataImage::empty("c".into(), 1);
        let (results, records) = alter_user_scram_credentials(
            &image,
            &no_file,
            &[delete("gone", 1), delete("", 1)],
            &[
                upsert("few", 1, 4095),
                upsert("many", 2, 16385),
                upsert("odd", 0, 4096),
                upsert("ok", 2, 16384),
            ],
        );
        assert_eq!(
            outcome(&results, "gone"),
            Err((
                91,
                "Attempt to delete a user credential that does not exist".into()
            ))
        );
        assert_eq!(
            outcome(&results, ""),
            Err((93, "Username must not be empty".into()))
        );
        assert_eq!(
            outcome(&results, "few"),
            Err((93, "Too few iterations".into()))
        );
        assert_eq!(
            outcome(&results, "many"),
            Err((93, "Too many iterations".into()))
        );
        assert_eq!(
            outcome(&results, "odd"),
            Err((33, "Unknown SCRAM mechanism".into()))
        );
        assert_eq!(outcome(&results, "ok"), Ok(()));
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn an_empty_salted_password_is_refused_as_its_keys_are_public() {
        let image = MetadataImage::empty("c".into(), 1);
        let mut empty = upsert("eve", 1, 4096);
        empty.salted_password.clear();
        let (results, records) = alter_user_scram_credentials(&image, &no_file, &[], &[empty]);
        assert_eq!(
            outcome(&results, "eve"),
            Err((93, "Salted password must not be empty".into()))
        );
        assert!(records.is_empty(), "{records:?}");
    }

    #[test]
    fn a_user_named_twice_is_refused_whole_whatever_the_mechanisms() {
        let image =
            MetadataImage::empty("c".into(), 1).apply(&[MetadataRecord::UserScramCredential {
                user: "bob".into(),
                mechanism: ScramMechanism::Sha256,
                credential: ScramCredential::new(ScramHash::Sha256, "x", vec![1], 4096),
            }]);
        let (results, records) = alter_user_scram_credentials(
            &image,
            &no_file,
            &[delete("bob", 1)],
            &[
                upsert("bob", 2, 4096),
                upsert("carol", 1, 4096),
                upsert("carol", 2, 4096),
            ],
        );
        let twice = Err((
            92,
            "A user credential cannot be altered twice in the same request".into(),
        ));
        assert_eq!(outcome(&results, "bob"), twice);
        assert_eq!(outcome(&results, "carol"), twice);
        assert!(records.is_empty(), "{records:?}");
        assert_eq!(results.len(), 2);
    }

    #[test]
    fn a_deletion_removes_only_its_mechanism() {
        let image = MetadataImage::empty("c".into(), 1);
        let (_, records) =
            alter_user_scram_credentials(&image, &no_file, &[], &[upsert("dan", 1, 4096)]);
        let image = image.apply(&records);
        let (_, more) =
            alter_user_scram_credentials(&image, &no_file, &[], &[upsert("dan", 2, 8192)]);
        let image = image.apply(&more);
        assert_eq!(image.scram.len(), 2);
        let (results, records) =
            alter_user_scram_credentials(&image, &no_file, &[delete("dan", 2)], &[]);
        assert_eq!(outcome(&results, "dan"), Ok(()));
        let image = image.apply(&records);
        assert_eq!(
            image.scram.keys().collect::<Vec<_>>(),
            [&("dan".to_owned(), ScramMechanism::Sha256)]
        );
    }

    #[test]
    fn a_credential_of_the_file_can_be_deleted_once_and_stays_deleted() {
        // `kafkaiq.sasl.scram.users` gives eve SCRAM-SHA-256; the log never held it.
        let in_file = |m: ScramMechanism, u: &str| m == ScramMechanism::Sha256 && u == "eve";
        let image = MetadataImage::empty("c".into(), 1);
        let (results, records) =
            alter_user_scram_credentials(&image, &in_file, &[delete("eve", 2)], &[]);
        assert_eq!(
            outcome(&results, "eve").unwrap_err().0,
            ApiError::ResourceNotFound.code()
        );
        assert!(
            records.is_empty(),
            "no SCRAM-SHA-512 credential for eve anywhere"
        );
        let (results, records) =
            alter_user_scram_credentials(&image, &in_file, &[delete("eve", 1)], &[]);
        assert_eq!(outcome(&results, "eve"), Ok(()));
        let image = image.apply(&records);
        assert!(image
            .scram_removed
            .contains(&("eve".to_owned(), ScramMechanism::Sha256)));
        // Deleted, it is not found a second time, as in Kafka.
        let (results, records) =
            alter_user_scram_credentials(&image, &in_file, &[delete("eve", 1)], &[]);
        assert_eq!(
            outcome(&results, "eve").unwrap_err().0,
            ApiError::ResourceNotFound.code()
        );
        assert!(records.is_empty());
    }
}
