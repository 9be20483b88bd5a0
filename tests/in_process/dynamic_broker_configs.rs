//! Dynamic broker configs on one node (the [`common::cluster`] harness; Apache Kafka with
//! `KAFKAIQ_CLUSTER_BROKER=kafka`), over raw frames, checked as Kafka behaves:
//!
//! - IncrementalAlterConfigs on BROKER "1" sets `message.max.bytes`, and produce refuses a
//!   larger batch from then on, without a restart, and still after one (the value lives in the
//!   metadata log); the cluster default (BROKER "") applies under the per-broker value and
//!   alone once that is deleted.
//! - DescribeConfigs reports the value with Kafka's source (DYNAMIC_BROKER_CONFIG,
//!   DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG) and synonyms in precedence order; the
//!   default resource lists only what is set there.
//! - A key that cannot change at runtime, a bad value and another broker's id are refused with
//!   INVALID_REQUEST (Kafka's broker turns a failed check of a broker config into
//!   INVALID_REQUEST, KAFKA-13609).
//!
//! - Legacy AlterConfigs (key 33) on BROKER "1" replaces the broker's whole set of dynamic
//!   configs: keys it does not list lose their dynamic value; validate_only changes nothing;
//!   refusals as above, but a bad value is INVALID_REQUEST, as Kafka's broker answers it.
//!
//! Every wait has a deadline; nothing sleeps a fixed time to let something happen.

use crate::common;

use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest, ProduceRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use common::cluster::{Cluster, ClusterKind};
use common::{batch, RawClient};

const DEADLINE: Duration = Duration::from_secs(60);
const TOPIC: &str = "sized";
const MESSAGE_TOO_LARGE: i16 = 10;
const INVALID_REQUEST: i16 = 42;
const SET: i8 = 0;
const DELETE: i8 = 1;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// IncrementalAlterConfigs of BROKER `resource` through node 1: (error code, message).
async fn alter(cluster: &Cluster, resource: &str, op: i8, key: &str, value: &str) -> (i16, String) {
    let mut client = RawClient::connect(cluster.nodes[&1].client_addr()).await;
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(resource))
            .with_configs(vec![AlterableConfig::default()
                .with_name(s(key))
                .with_config_operation(op)
                .with_value((op == SET).then(|| s(value)))]),
    ]);
    let r = client.call(1, &request).await;
    let r = &r.responses[0];
    let message = r.error_message.as_ref().map(|m| m.to_string());
    (r.error_code, message.unwrap_or_default())
}

/// DescribeConfigs of `key` on BROKER `resource` through node 1: (value, source, synonyms as
/// (value, source)); `None` if the resource does not list the key.
async fn describe(
    cluster: &Cluster,
    resource: &str,
    key: &str,
) -> Option<(String, i8, Vec<(String, i8)>)> {
    let mut client = RawClient::connect(cluster.nodes[&1].client_addr()).await;
    let request = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(resource))
            .with_configuration_keys(Some(vec![s(key)]))]);
    let r = client.call(4, &request).await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    let c = r.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)?;
    let value = |v: &Option<StrBytes>| v.as_ref().map(|v| v.to_string()).unwrap_or_default();
    let synonyms = c
        .synonyms
        .iter()
        .map(|y| (value(&y.value), y.source))
        .collect();
    Some((value(&c.value), c.config_source, synonyms))
}

/// Produces one record of `size` bytes to `TOPIC`-0 through node 1: the error code.
async fn produce(cluster: &Cluster, size: usize) -> Option<i16> {
    let mut client = RawClient::try_connect(cluster.nodes[&1].client_addr()).await?;
    let value = "x".repeat(size);
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[&value], None)))])]);
    let r = client
        .try_call(9, &request, Duration::from_secs(10))
        .await?;
    Some(r.responses[0].partition_responses[0].error_code)
}

/// Waits until a record of `size` bytes gets `code` (dynamic configs apply once the node has the
/// image that holds them).
async fn await_produce(cluster: &Cluster, size: usize, code: i16) {
    cluster
        .wait_for(
            &format!("a {size}-byte record answered {code}"),
            DEADLINE,
            || async { (produce(cluster, size).await? == code).then_some(()) },
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_max_bytes_changes_at_runtime_and_survives_a_restart() {
    let mut cluster = Cluster::start(ClusterKind::from_env(), "dynamic-broker", 1, &[]);
    cluster.await_listening(1);
    cluster
        .wait_for("topic created", DEADLINE, || async {
            matches!(
                cluster.create_topic_configured(1, TOPIC, 1, 1, &[]).await,
                Some(0 | 36)
            )
            .then_some(())
        })
        .await;
    await_produce(&cluster, 3_000, 0).await;
    let default = describe(&cluster, "1", "message.max.bytes").await.unwrap();
    assert_eq!(default.1, 5, "{default:?}");

    assert_eq!(
        alter(&cluster, "1", SET, "message.max.bytes", "2000")
            .await
            .0,
        0
    );
    await_produce(&cluster, 3_000, MESSAGE_TOO_LARGE).await;
    await_produce(&cluster, 1_000, 0).await;
    let (value, source, synonyms) = describe(&cluster, "1", "message.max.bytes").await.unwrap();
    assert_eq!((value.as_str(), source), ("2000", 2));
    assert_eq!(synonyms[0], ("2000".to_owned(), 2));
    assert_eq!(synonyms.last().unwrap().1, 5, "{synonyms:?}");

    // The cluster default sits under the per-broker value.
    assert_eq!(
        alter(&cluster, "", SET, "message.max.bytes", "2500")
            .await
            .0,
        0
    );
    let default_source = cluster
        .wait_for("the cluster default described", DEADLINE, || async {
            describe(&cluster, "", "message.max.bytes")
                .await
                .map(|d| d.1)
        })
        .await;
    assert_eq!(default_source, 3);
    assert_eq!(describe(&cluster, "", "num.io.threads").await, None);
    let synonyms = cluster
        .wait_for("the default among the synonyms", DEADLINE, || async {
            let (_, _, synonyms) = describe(&cluster, "1", "message.max.bytes").await?;
            (synonyms.len() >= 3).then_some(synonyms)
        })
        .await;
    assert_eq!(
        synonyms[..2],
        [("2000".to_owned(), 2), ("2500".to_owned(), 3)]
    );

    // Refused: a key that cannot change at runtime, a bad value, another broker.
    let (code, message) = alter(&cluster, "1", SET, "log.dirs", "/tmp/elsewhere").await;
    assert_eq!(code, INVALID_REQUEST, "{message}");
    assert!(
        message.contains("Cannot update these configs dynamically"),
        "{message}"
    );
    assert_eq!(
        alter(&cluster, "1", SET, "message.max.bytes", "lots")
            .await
            .0,
        INVALID_REQUEST
    );
    assert_eq!(
        alter(&cluster, "7", SET, "message.max.bytes", "1").await.0,
        INVALID_REQUEST
    );

    // Kept in the metadata log: a restarted node applies it before serving.
    cluster.stop(1);
    cluster.spawn(1);
    cluster.await_listening(1);
    await_produce(&cluster, 3_000, MESSAGE_TOO_LARGE).await;
    let (value, source, _) = describe(&cluster, "1", "message.max.bytes").await.unwrap();
    assert_eq!((value.as_str(), source), ("2000", 2));

    // Without the per-broker value the default's 2500 applies; without both, the static one.
    assert_eq!(
        alter(&cluster, "1", DELETE, "message.max.bytes", "")
            .await
            .0,
        0
    );
    await_produce(&cluster, 2_200, 0).await;
    await_produce(&cluster, 3_000, MESSAGE_TOO_LARGE).await;
    assert_eq!(
        alter(&cluster, "", DELETE, "message.max.bytes", "").await.0,
        0
    );
    await_produce(&cluster, 3_000, 0).await;
    let (_, source, _) = describe(&cluster, "1", "message.max.bytes").await.unwrap();
    assert_eq!(source, 5);
    cluster.stop_all();
}

/// Legacy AlterConfigs of BROKER `resource` through node 1 with `configs`: (error code,
/// message).
async fn replace(
    cluster: &Cluster,
    resource: &str,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> (i16, String) {
    use kafka_protocol::messages::alter_configs_request::{
        AlterConfigsResource as Resource, AlterableConfig as Config,
    };
    let mut client = RawClient::connect(cluster.nodes[&1].client_addr()).await;
    let request = AlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![Resource::default()
            .with_resource_type(4)
            .with_resource_name(s(resource))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| Config::default().with_name(s(k)).with_value(Some(s(v))))
                    .collect(),
            )]);
    let r = client.call(2, &request).await;
    let r = &r.responses[0];
    let message = r.error_message.as_ref().map(|m| m.to_string());
    (r.error_code, message.unwrap_or_default())
}

/// Waits until `key` on BROKER "1" has `value` from `source`.
async fn await_described(cluster: &Cluster, key: &str, value: &str, source: i8) {
    cluster
        .wait_for(
            &format!("{key} = {value} from source {source}"),
            DEADLINE,
            || async {
                let (v, s, _) = describe(cluster, "1", key).await?;
                (v == value && s == source).then_some(())
            },
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_alter_configs_replaces_a_brokers_whole_set_of_dynamic_configs() {
    let mut cluster = Cluster::start(ClusterKind::from_env(), "legacy-alter-configs", 1, &[]);
    cluster.await_listening(1);
    let set = |key, value| alter(&cluster, "1", SET, key, value);
    cluster
        .wait_for("the node answers", DEADLINE, || async {
            (set("message.max.bytes", "2000").await.0 == 0).then_some(())
        })
        .await;
    assert_eq!(set("log.retention.ms", "1234567").await.0, 0);
    await_described(&cluster, "message.max.bytes", "2000", 2).await;
    await_described(&cluster, "log.retention.ms", "1234567", 2).await;

    // validate_only: checked, nothing changes.
    let only_bytes = [("log.retention.bytes", "5000000")];
    assert_eq!(replace(&cluster, "1", &only_bytes, true).await.0, 0);
    // Refused as IncrementalAlterConfigs refuses, and nothing changes either.
    let (code, message) = replace(&cluster, "1", &[("log.dirs", "/elsewhere")], false).await;
    assert_eq!(code, INVALID_REQUEST, "{message}");
    // A bad value: INVALID_REQUEST, as from IncrementalAlterConfigs.
    let bad = [("log.retention.bytes", "lots")];
    let (code, message) = replace(&cluster, "1", &bad, false).await;
    assert_eq!(code, INVALID_REQUEST, "{message}");
    assert!(message.contains("log.retention.bytes"), "{message}");
    assert_eq!(
        replace(&cluster, "7", &only_bytes, false).await.0,
        INVALID_REQUEST
    );
    assert_ne!(
        describe(&cluster, "1", "log.retention.bytes")
            .await
            .unwrap()
            .1,
        2,
        "validate_only and refused requests changed nothing"
    );
    await_described(&cluster, "message.max.bytes", "2000", 2).await;

    // The listed key is set; the keys not listed lose their dynamic value.
    assert_eq!(replace(&cluster, "1", &only_bytes, false).await.0, 0);
    await_described(&cluster, "log.retention.bytes", "5000000", 2).await;
    let (_, source, _) = describe(&cluster, "1", "message.max.bytes").await.unwrap();
    assert_ne!(source, 2, "message.max.bytes still dynamic");
    let (_, source, _) = describe(&cluster, "1", "log.retention.ms").await.unwrap();
    assert_ne!(source, 2, "log.retention.ms still dynamic");
    // An empty set removes every dynamic value of the broker.
    assert_eq!(replace(&cluster, "1", &[], false).await.0, 0);
    cluster
        .wait_for(
            "log.retention.bytes no longer dynamic",
            DEADLINE,
            || async {
                let (_, source, _) = describe(&cluster, "1", "log.retention.bytes").await?;
                (source != 2).then_some(())
            },
        )
        .await;
    cluster.stop_all();
}

/// Bytes of `.log` data of `topic`-0 on node 1.
fn log_size(cluster: &Cluster, topic: &str) -> usize {
    cluster.log_bytes(1, topic, 0).len()
}

/// The `.log` files of `topic`-0 on node 1.
fn segment_count(cluster: &Cluster, topic: &str) -> usize {
    std::fs::read_dir(cluster.node_data_dir(1).join(format!("{topic}-0")))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
            })
            .count()
        })
        .unwrap_or(0)
}

/// The log cleaner's keys change at runtime, as Kafka's `LogCleaner` is reconfigurable: with
/// `log.cleaner.backoff.ms` at an hour the idle cleaner threads would not look at a dirty log
/// again for that long; setting it on BROKER "1" restarts them, and the log is cleaned at
/// once. Values that Kafka refuses are refused: thread counts below one or beyond double the
/// running count, a ratio outside 0–1, an unknown cleanup policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_cleaner_configs_change_at_runtime() {
    const COMPACTED: &str = "cleaned-at-runtime";
    let mut cluster = Cluster::start(
        ClusterKind::from_env(),
        "dynamic-cleaner",
        1,
        &["log.cleaner.backoff.ms=3600000"],
    );
    cluster.await_listening(1);
    cluster
        .wait_for("compacted topic created", DEADLINE, || async {
            matches!(
                cluster
                    .create_topic_configured(
                        1,
                        COMPACTED,
                        1,
                        1,
                        &[
                            ("cleanup.policy", "compact"),
                            ("min.cleanable.dirty.ratio", "0.01"),
                            ("segment.ms", "50"),
                        ],
                    )
                    .await,
                Some(0 | 36)
            )
            .then_some(())
        })
        .await;
    // The same ten keys over and over, until the log has rolled six segments.
    let values: Vec<String> = (0..10).map(|i| format!("value-{i:0>200}")).collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    cluster
        .wait_for("six segments", DEADLINE, || async {
            let mut client = RawClient::try_connect(cluster.nodes[&1].client_addr()).await?;
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(s(COMPACTED)))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(common::batch_keyed(&values, None, true)))])]);
            let r = client
                .try_call(9, &request, Duration::from_secs(10))
                .await?;
            assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
            (segment_count(&cluster, COMPACTED) >= 6).then_some(())
        })
        .await;
    let dirty = log_size(&cluster, COMPACTED);

    // Refused as Kafka refuses them.
    for (key, value) in [
        ("log.cleaner.threads", "0"),
        ("log.cleaner.threads", "3"),
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleanup.policy", "shred"),
    ] {
        let (code, message) = alter(&cluster, "1", SET, key, value).await;
        assert_eq!(code, INVALID_REQUEST, "{key}={value}: {message}");
    }

    assert_eq!(
        alter(&cluster, "1", SET, "log.cleaner.backoff.ms", "100")
            .await
            .0,
        0
    );
    await_described(&cluster, "log.cleaner.backoff.ms", "100", 2).await;
    cluster
        .wait_for("the dirty log cleaned", DEADLINE, || async {
            (log_size(&cluster, COMPACTED) < dirty / 3).then_some(())
        })
        .await;
    assert_eq!(
        alter(&cluster, "1", SET, "log.cleaner.threads", "2")
            .await
            .0,
        0
    );
    cluster.stop_all();
}
