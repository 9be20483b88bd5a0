//! [`ReplicaManager::fetch_offset_for_timestamp`]: the offset a ListOffsets query names, read
//! from the leader's log (Kafka's `Partition#fetchOffsetForTimestamp`).
//!
//! Earliest (-2), latest (-1), max timestamp (-3), earliest local (-4, the same as earliest
//! without tiered storage), latest tiered (-5, none without tiered storage) and by timestamp,
//! with the leader epoch of the returned offset. Leader-only, with `current_leader_epoch`
//! fencing. A client reads offsets up to the high watermark (the last stable offset at
//! read_committed), and while a
//! new leader's high watermark has not yet reached the start of its leader epoch it is answered
//! OFFSET_NOT_AVAILABLE for the latest offset (and for a timestamp found nowhere below the high
//! watermark), which the Java consumer retries after refreshing metadata. A follower (after
//! OFFSET_OUT_OF_RANGE) reads up to the log end offset, without that check.

use kafkaiq_storage::{Log, TimestampAndOffset, TopicPartition};

use super::{FetchIsolation, Offsets, ReplicaManager};
use crate::errors::ApiError;
use crate::metadata::MetadataImage;

pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// The offset found for a query, the timestamp it was found by (-1 for the earliest and latest
/// queries) and the leader epoch it was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoundOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

impl ReplicaManager {
    /// The offset `timestamp` names in the partition this node leads, or `None` for "no such
    /// offset" (answered -1/-1 without error, as Kafka does).
    pub fn fetch_offset_for_timestamp(
        &self,
        image: &MetadataImage,
        tp: &TopicPartition,
        timestamp: i64,
        current_leader_epoch: i32,
        isolation: FetchIsolation,
    ) -> Result<Option<FoundOffset>, ApiError> {
        let partition = self.partition_or_error(image, tp)?;
        let (offsets, epoch_start) = partition.leader_offsets(current_leader_epoch)?;
        let log = partition.log();
        let epoch_of = |offset: i64| log.epoch_for_offset(offset).unwrap_or(-1);
        // Kafka's `lastFetchableOffset`: what the reader could fetch at its isolation level.
        let last_fetchable = isolation.max_offset(&offsets);
        let from_replica = isolation == FetchIsolation::LogEnd;
        let not_available =
            !from_replica && epoch_start.is_some_and(|start| start > offsets.high_watermark);
        if not_available && timestamp == LATEST_TIMESTAMP {
            return Err(ApiError::OffsetNotAvailable);
        }
        let found = lookup_in(&log, timestamp, &offsets, last_fetchable, epoch_of)?;
        if found.is_none()
            && not_available
            && timestamp != EARLIEST_TIMESTAMP
            && timestamp != EARLIEST_LOCAL_TIMESTAMP
            && timestamp != LATEST_TIERED_TIMESTAMP
        {
            return Err(ApiError::OffsetNotAvailable);
        }
        Ok(found)
    }
}

fn lookup_in(
    log: &Log,
    timestamp: i64,
    offsets: &Offsets,
    last_fetchable: i64,
    epoch_of: impl Fn(i64) -> i32,
) -> Result<Option<FoundOffset>, ApiError> {
    let found = |t: TimestampAndOffset| FoundOffset {
        timestamp: t.timestamp,
        offset: t.offset,
        leader_epoch: t.leader_epoch.unwrap_or_else(|| epoch_of(t.offset)),
    };
    Ok(match timestamp {
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Some(FoundOffset {
            timestamp: -1,
            offset: offsets.log_start_offset,
            leader_epoch: epoch_of(offsets.log_start_offset),
        }),
        LATEST_TIMESTAMP => Some(FoundOffset {
            timestamp: -1,
            offset: last_fetchable,
            leader_epoch: offsets.leader_epoch,
        }),
        LATEST_TIERED_TIMESTAMP => None,
        MAX_TIMESTAMP => log
            .max_timestamp_and_offset()?
            .filter(|t| t.offset < last_fetchable)
            .map(found),
        t if t >= 0 => log
            .fetch_offset_by_timestamp(t)?
            .filter(|t| t.offset < last_fetchable)
            .map(found),
        _ => {
            return Err(ApiError::InvalidRequest(format!(
                "invalid timestamp {timestamp}"
            )))
        }
    })
}
