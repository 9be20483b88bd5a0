//! ACLs on three processes with the `StandardAuthorizer` (the [`common::cluster`] harness, raw
//! frames): the listeners are PLAINTEXT, so every client and every node is `User:ANONYMOUS`,
//! made a super user as Kafka needs it for PLAINTEXT inter-node listeners. The cluster forms,
//! replicates (heartbeats, AlterPartition and replica fetches pass the authorizer), a CreateAcls
//! sent to a node that is not the active controller is forwarded to it, committed, and
//! described alike by every node, and a DeleteAcls sent to another one removes it everywhere.
//! SCRAM credentials the same way: an AlterUserScramCredentials sent to a node that is not the
//! active controller is forwarded, committed, and described by every node.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

use crate::common;

use std::time::Duration;

use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use common::cluster::{Cluster, ClusterKind};
use common::RawClient;

const NODES: i32 = 3;
const DEADLINE: Duration = Duration::from_secs(60);

/// The `(resource, principal)` of every ACL node `id` describes, or `None` if it cannot answer.
async fn described(cluster: &Cluster, id: i32) -> Option<Vec<(String, String)>> {
    let mut c = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    // Null names, principal and host: any (an empty string would match only itself).
    let any = DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1);
    let r: DescribeAclsResponse = c.try_call(3, &any, Duration::from_secs(5)).await?;
    (r.error_code == 0).then(|| {
        r.resources
            .iter()
            .flat_map(|res| {
                res.acls
                    .iter()
                    .map(move |a| (res.resource_name.to_string(), a.principal.to_string()))
            })
            .collect()
    })
}

/// The `(user, [(mechanism, iterations)])` of every SCRAM user node `id` describes.
async fn scram_users(cluster: &Cluster, id: i32) -> Option<Vec<(String, Vec<(i8, i32)>)>> {
    let mut c = RawClient::try_connect(cluster.nodes[&id].client_addr()).await?;
    let all = DescribeUserScramCredentialsRequest::default().with_users(None);
    let r: DescribeUserScramCredentialsResponse =
        c.try_call(0, &all, Duration::from_secs(5)).await?;
    (r.error_code == 0).then(|| {
        r.results
            .iter()
            .map(|u| {
                let infos = u.credential_infos.iter();
                let infos = infos.map(|i| (i.mechanism, i.iterations)).collect();
                (u.user.to_string(), infos)
            })
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_changes_reach_the_active_controller_from_any_node_and_every_node_agrees() {
    let mut cluster = Cluster::start(
        ClusterKind::from_env(),
        "acls",
        NODES,
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
        ],
    );
    for id in 1..=NODES {
        cluster.await_listening(id);
    }
    cluster
        .wait_for("the cluster to form", DEADLINE, || cluster.formed())
        .await;
    // The nodes' own traffic passes the authorizer: a replicated topic gets a full ISR.
    cluster
        .wait_for("topic created", DEADLINE, || async {
            matches!(cluster.create_topic(1, "replicated", 1).await, Some(0 | 36)).then_some(())
        })
        .await;
    cluster
        .wait_for("a full ISR", DEADLINE, || async {
            let (leader, _, isr) = cluster.partition_state(2, "replicated", 0).await?;
            (leader >= 0 && isr.len() == NODES as usize).then_some(())
        })
        .await;

    let controller = cluster
        .wait_for("an active controller", DEADLINE, || async {
            cluster.controller_seen_by(1).await.filter(|c| *c > 0)
        })
        .await;
    let others: Vec<i32> = (1..=NODES).filter(|id| *id != controller).collect();
    let mut c = RawClient::connect(cluster.nodes[&others[0]].client_addr()).await;
    let created: CreateAclsResponse = c
        .call(
            3,
            &CreateAclsRequest::default().with_creations(vec![AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("orders"))
                .with_resource_pattern_type(3)
                .with_principal(StrBytes::from_static_str("User:alice"))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(3)
                .with_permission_type(3)]),
        )
        .await;
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    let expected = vec![("orders".to_owned(), "User:alice".to_owned())];

    for id in 1..=NODES {
        cluster
            .wait_for(
                &format!("node {id} to describe the ACL"),
                DEADLINE,
                || async { (described(&cluster, id).await? == expected).then_some(()) },
            )
            .await;
    }

    let mut c = RawClient::connect(cluster.nodes[&others[1]].client_addr()).await;
    let deleted: DeleteAclsResponse = c
        .call(
            3,
            &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(Some(StrBytes::from_static_str("orders")))
                .with_pattern_type_filter(3)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1)]),
        )
        .await;
    assert_eq!(deleted.filter_results[0].error_code, 0, "{deleted:?}");
    assert_eq!(deleted.filter_results[0].matching_acls.len(), 1);
    for id in 1..=NODES {
        cluster
            .wait_for(&format!("node {id} to drop the ACL"), DEADLINE, || async {
                described(&cluster, id).await?.is_empty().then_some(())
            })
            .await;
    }

    let mut c = RawClient::connect(cluster.nodes[&others[1]].client_addr()).await;
    let altered: AlterUserScramCredentialsResponse = c
        .call(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                ScramCredentialUpsertion::default()
                    .with_name(StrBytes::from_static_str("alice"))
                    .with_mechanism(2)
                    .with_iterations(8192)
                    .with_salt(bytes::Bytes::from_static(b"salt"))
                    .with_salted_password(bytes::Bytes::from(vec![7u8; 64])),
            ]),
        )
        .await;
    assert_eq!(altered.results.len(), 1, "{altered:?}");
    assert_eq!(altered.results[0].error_code, 0, "{altered:?}");
    let expected = vec![("alice".to_owned(), vec![(2, 8192)])];
    for id in 1..=NODES {
        cluster
            .wait_for(
                &format!("node {id} to describe the SCRAM user"),
                DEADLINE,
                || async { (scram_users(&cluster, id).await? == expected).then_some(()) },
            )
            .await;
    }
    cluster.stop_all();
}
