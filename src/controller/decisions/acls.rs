//! CreateAcls and DeleteAcls on the controller (Kafka's `AclControlManager`): the records a
//! change needs and each entry's outcome, decided against the image's ACLs.
//!
//! Creations are judged one by one (a refused one does not stop the others): an invalid ACL is
//! refused INVALID_REQUEST with Kafka's message; an ACL already present, or created earlier in
//! the same request, succeeds without a record; any other gets an `AccessControlEntry` record
//! under a new id. Deletions: a filter with an UNKNOWN code is refused INVALID_REQUEST; each
//! other filter removes every ACL it matches, and an ACL matched by several filters is listed
//! under each but removed once.

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::errors::ApiError;
use crate::metadata::acl::{
    Acl, AclFilter, AclId, AclOperation, AclPermissionType, PatternType, ResourceType,
};
use crate::metadata::{records::MetadataRecord, MetadataImage};

/// CreateAcls: one outcome per creation, in order, and the records to commit. `new_id` hands
/// out the id of each ACL that gets a record.
pub fn create_acls(
    image: &MetadataImage,
    creations: &[Acl],
    mut new_id: impl FnMut() -> Uuid,
) -> (Vec<Result<(), ApiError>>, Vec<MetadataRecord>) {
    let mut existing: BTreeSet<&Acl> = image.acls.values().collect();
    let mut results = Vec::with_capacity(creations.len());
    let mut records = Vec::new();
    for acl in creations {
        if let Err(e) = acl.validate() {
            results.push(Err(ApiError::InvalidRequest(e.0)));
            continue;
        }
        if existing.insert(acl) {
            records.push(MetadataRecord::AccessControlEntry {
                id: new_id(),
                acl: acl.clone(),
            });
        }
        results.push(Ok(()));
    }
    (results, records)
}

/// DeleteAcls: for each filter, in order, the ACLs it matched (or why it was refused), and the
/// removal records.
#[allow(clippy::type_complexity)]
pub fn delete_acls(
    image: &MetadataImage,
    filters: &[AclFilter],
) -> (
    Vec<Result<Vec<(AclId, Acl)>, ApiError>>,
    Vec<MetadataRecord>,
) {
    let mut removed: BTreeSet<AclId> = BTreeSet::new();
    let mut results = Vec::with_capacity(filters.len());
    for filter in filters {
        if filter.resource_type == ResourceType::Unknown
            || filter.pattern_type == PatternType::Unknown
        {
            results.push(Err(ApiError::InvalidRequest(
                "Unknown patternFilter.".into(),
            )));
            continue;
        }
        if filter.operation == AclOperation::Unknown
            || filter.permission_type == AclPermissionType::Unknown
        {
            results.push(Err(ApiError::InvalidRequest("Unknown entryFilter.".into())));
            continue;
        }
        let matched: Vec<(AclId, Acl)> = image
            .acls
            .iter()
            .filter(|(_, acl)| filter.matches(acl))
            .map(|(&id, acl)| (id, acl.clone()))
            .collect();
        removed.extend(matched.iter().map(|(id, _)| *id));
        results.push(Ok(matched));
    }
    let records = removed
        .into_iter()
        .map(|id| MetadataRecord::RemoveAccessControlEntry { id })
        .collect();
    (results, records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(name: &str, op: AclOperation) -> Acl {
        Acl {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: PatternType::Literal,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission_type: AclPermissionType::Allow,
        }
    }

    fn ids() -> impl FnMut() -> Uuid {
        let mut n = 0;
        move || {
            n += 1;
            Uuid::from_u128(n)
        }
    }

    fn any() -> AclFilter {
        AclFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission_type: AclPermissionType::Any,
        }
    }

    #[test]
    fn creations_are_judged_one_by_one_and_duplicates_write_nothing() {
        let image = MetadataImage::empty("c".into(), 1);
        let read = acl("t", AclOperation::Read);
        let bad = Acl {
            resource_name: String::new(),
            ..read.clone()
        };
        let (results, records) = create_acls(&image, &[read.clone(), bad, read.clone()], ids());
        assert_eq!(results[0], Ok(()));
        assert!(
            matches!(&results[1], Err(ApiError::InvalidRequest(m)) if m == "Resource name should not be empty")
        );
        assert_eq!(results[2], Ok(()), "a duplicate in the request succeeds");
        assert_eq!(
            records,
            [MetadataRecord::AccessControlEntry {
                id: Uuid::from_u128(1),
                acl: read.clone()
            }]
        );
        // Once committed, creating it again succeeds and writes nothing.
        let image = image.apply(&records);
        let (results, records) = create_acls(&image, &[read], ids());
        assert_eq!(results, [Ok(())]);
        assert!(records.is_empty());
    }

    #[test]
    fn deletions_remove_each_matched_acl_once_and_refuse_unknown_filters() {
        let image = MetadataImage::empty("c".into(), 1);
        let (_, records) = create_acls(
            &image,
            &[acl("t", AclOperation::Read), acl("u", AclOperation::Write)],
            ids(),
        );
        let image = image.apply(&records);
        let t_only = AclFilter {
            resource_name: Some("t".into()),
            ..any()
        };
        let unknown = AclFilter {
            operation: AclOperation::Unknown,
            ..any()
        };
        let (results, records) = delete_acls(&image, &[t_only, any(), unknown]);
        assert_eq!(results[0].as_ref().unwrap().len(), 1);
        assert_eq!(results[1].as_ref().unwrap().len(), 2);
        assert!(
            matches!(&results[2], Err(ApiError::InvalidRequest(m)) if m == "Unknown entryFilter.")
        );
        assert_eq!(
            records,
            [
                MetadataRecord::RemoveAccessControlEntry {
                    id: Uuid::from_u128(1)
                },
                MetadataRecord::RemoveAccessControlEntry {
                    id: Uuid::from_u128(2)
                },
            ]
        );
        assert!(image.apply(&records).acls.is_empty());
    }
}
