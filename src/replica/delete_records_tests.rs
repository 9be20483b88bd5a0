//! The DeleteRecords rules of [`ReplicaManager::delete_records`] on real logs: the answer is the
//! low watermark once it reaches the requested offset, the one seen on arrival with
//! REQUEST_TIMED_OUT when a follower still holds the records at `timeout_ms`, and offsets past
//! the high watermark or partitions not hosted are refused without waiting. Time is tokio's
//! paused clock.

use std::time::Duration;

use kafkaiq_storage::batch::builder::simple;
use uuid::Uuid;

use super::delete_records::{PartitionDeleted, TopicDeletes};
use super::fetch_tests::{request, spec, Fixture};
use crate::errors::ApiError;
use crate::metadata::{BrokerRegistration, MetadataRecord};

async fn delete(
    f: &Fixture,
    partitions: Vec<(i32, i64)>,
    timeout_ms: i32,
) -> Vec<PartitionDeleted> {
    let topics = vec![TopicDeletes {
        name: "t".into(),
        partitions,
    }];
    let mut out = f
        .manager
        .delete_records(&f.cache.image(), topics, timeout_ms)
        .await;
    assert_eq!(out.len(), 1);
    out.remove(0).partitions
}

#[tokio::test(start_paused = true)]
async fn a_sole_replica_answers_its_new_log_start_at_once() {
    let f = Fixture::new(&[&[1]]);
    f.get(0)
        .append_records_to_leader(&simple(3, 10, 0), 1, 0)
        .unwrap();
    let started = tokio::time::Instant::now();
    let out = delete(&f, vec![(0, 2)], 30_000).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(
        out,
        vec![PartitionDeleted {
            index: 0,
            low_watermark: 2,
            error: None
        }]
    );
    assert_eq!(f.get(0).low_watermark(), Ok(2));
}

#[tokio::test(start_paused = true)]
async fn a_follower_holding_the_records_makes_it_time_out_with_the_first_low_watermark() {
    let f = Fixture::new(&[&[1, 2]]);
    // Only a follower on an alive broker holds the low watermark back.
    f.publish(vec![MetadataRecord::RegisterBroker(BrokerRegistration {
        broker_epoch: 12,
        fenced: false,
        ..BrokerRegistration::new(2, Uuid::from_u128(2), None)
    })]);
    f.get(0)
        .append_records_to_leader(&simple(3, 10, 0), 1, 0)
        .unwrap();
    // The follower fetches at the log end: the high watermark covers all three records.
    let mut caught_up = spec(0, 3);
    caught_up.log_start_offset = 0;
    f.fetch(vec![caught_up], request(2, 0, 0)).await;
    assert_eq!(f.get(0).high_watermark(), 3);
    let started = tokio::time::Instant::now();
    let out = delete(&f, vec![(0, 2)], 500).await;
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(
        out,
        vec![PartitionDeleted {
            index: 0,
            low_watermark: 0,
            error: Some(ApiError::RequestTimedOut)
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn offsets_past_the_high_watermark_and_unknown_partitions_are_refused_without_waiting() {
    let f = Fixture::new(&[&[1, 2]]);
    f.get(0)
        .append_records_to_leader(&simple(3, 10, 0), 1, 0)
        .unwrap();
    let started = tokio::time::Instant::now();
    let out = delete(&f, vec![(0, 2), (7, 0)], 30_000).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(out[0].error, Some(ApiError::OffsetOutOfRange));
    assert_eq!(out[1].error, Some(ApiError::UnknownTopicOrPartition));
    assert!(out.iter().all(|p| p.low_watermark == -1));
}
