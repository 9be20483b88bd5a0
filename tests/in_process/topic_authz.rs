//! What a caller with some ACLs, but not every one, is told about the topics, transactions and
//! groups around it, as Kafka 4.1 tells it: an in-process broker with the StandardAuthorizer,
//! `User:admin` its super user setting the scene, and alice's requests handed to the client
//! listener's dispatch.

use crate::common;
use crate::security_support::{decode_answer, encode_frame, name};

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::start_broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Request, StrBytes};
use kafkaiq::context::Context;

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

const ADMIN: &str = "User:admin";
const ALICE: &str = "User:alice";

// ACL codes (Kafka's `ResourceType`, `PatternType`, `AclOperation`, `AclPermissionType`).
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const TRANSACTIONAL_ID: i8 = 5;
const LITERAL: i8 = 3;
const READ: i8 = 3;
const WRITE: i8 = 4;
const CREATE: i8 = 5;
const DESCRIBE: i8 = 8;
const DESCRIBE_CONFIGS: i8 = 10;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// `request` at `version` through the client listener's dispatch, as `principal`.
async fn call_as<R: Request>(
    ctx: &Arc<Context>,
    principal: &str,
    version: i16,
    request: &R,
) -> R::Response {
    let frame = encode_frame(version, request);
    let answer = kafkaiq::server::dispatch::handle_frame(
        ctx,
        frame.slice(4..),
        "127.0.0.1:40000".parse().unwrap(),
        principal,
        "PLAINTEXT",
    )
    .await
    .expect("handled")
    .expect("answered");
    decode_answer::<R>(version, answer.slice(4..))
}

async fn authorized_broker(dir: &std::path::Path) -> common::TestBroker {
    start_broker(
        dir,
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
        ],
    )
    .await
}

/// One ACL of alice's from any host.
fn acl(
    resource_type: i8,
    resource: &str,
    operation: i8,
    permission: i8,
) -> create_acls_request::AclCreation {
    create_acls_request::AclCreation::default()
        .with_resource_type(resource_type)
        .with_resource_name(str(resource))
        .with_resource_pattern_type(LITERAL)
        .with_principal(str(ALICE))
        .with_host(str("*"))
        .with_operation(operation)
        .with_permission_type(permission)
}

/// `acls` created by the admin and in the image the requests are checked against.
async fn grant(ctx: &Arc<Context>, acls: Vec<create_acls_request::AclCreation>) {
    let expected = ctx.image().acls.len() + acls.len();
    let created: CreateAclsResponse = call_as(
        ctx,
        ADMIN,
        3,
        &CreateAclsRequest::default().with_creations(acls),
    )
    .await;
    assert!(
        created.results.iter().all(|r| r.error_code == 0),
        "{created:?}"
    );
    until("the ACLs in the image", || async {
        ctx.image().acls.len() >= expected
    })
    .await;
}

/// Waits until `done`, for 20 s at most: a partition's leader, a coordinator, an ACL come up a
/// moment after they are asked for.
async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    until_some(what, || {
        let done = done();
        async move { done.await.then_some(()) }
    })
    .await
}

/// As [`until`], for the first answer that is `Some`.
async fn until_some<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = attempt().await {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: not yet");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kafka's `authorizeByResourceType`: alice's ALLOW of WRITE on topic `t` is cancelled by her
/// DENY of WRITE on `t`, so she may not write any topic and, without IDEMPOTENT_WRITE on the
/// cluster, gets no idempotent producer id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_cancelled_by_a_deny_on_the_same_topic_gives_no_idempotent_producer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = authorized_broker(dir.path()).await;
    let ctx = broker.context.clone();
    grant(
        &ctx,
        vec![acl(TOPIC, "t", WRITE, ALLOW), acl(TOPIC, "t", WRITE, DENY)],
    )
    .await;
    let idempotent = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let refused: InitProducerIdResponse = call_as(&ctx, ALICE, 4, &idempotent).await;
    assert_eq!(
        refused.error_code, CLUSTER_AUTHORIZATION_FAILED,
        "{refused:?}"
    );
    // An ALLOW of another topic, not denied, is enough.
    grant(&ctx, vec![acl(TOPIC, "u", WRITE, ALLOW)]).await;
    let code = until_some("an idempotent producer id", || async {
        let init: InitProducerIdResponse = call_as(&ctx, ALICE, 4, &idempotent).await;
        // Past COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS.
        (init.error_code != 15 && init.error_code != 14).then_some(init.error_code)
    })
    .await;
    assert_eq!(code, 0);
    broker.shutdown().await.unwrap();
}
