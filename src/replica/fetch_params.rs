//! What a read asks of a partition: who is reading, up to which offset it may read, and how
//! much (Kafka's `FetchParams`, with the per-partition fields of `FetchRequest.PartitionData`).
//!
//! Built by the Fetch handler from the request (and by the group coordinator when it replays
//! `__consumer_offsets`), passed to [`super::Partition::read`]. Plain data, no behaviour beyond
//! Kafka's rules for deriving its fields.

use super::partition::Offsets;

/// Kafka's `FetchRequest.CONSUMER_REPLICA_ID`: a consumer's fetch.
pub const CONSUMER_REPLICA_ID: i32 = -1;

/// Kafka's `IsolationLevel.READ_COMMITTED` on the wire.
pub const READ_COMMITTED: i8 = 1;

/// The offset a read stops below (Kafka's `FetchIsolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchIsolation {
    /// Followers: everything the leader has.
    LogEnd,
    /// READ_UNCOMMITTED consumers: committed data only.
    HighWatermark,
    /// READ_COMMITTED consumers: below the last stable offset.
    TxnCommitted,
}

impl FetchIsolation {
    /// Kafka's `FetchIsolation.of(replicaId, isolationLevel)`: replicas read to the log end,
    /// consumers to the high watermark or, with READ_COMMITTED, the last stable offset.
    ///
    /// Kafka also gives the log end to its internal "future replica" id (-3), which never comes
    /// over the wire from a real broker; here every negative id is a consumer, so no client can
    /// read past the high watermark by claiming it.
    pub fn of(replica_id: i32, isolation_level: i8) -> FetchIsolation {
        if replica_id >= 0 {
            FetchIsolation::LogEnd
        } else if isolation_level == READ_COMMITTED {
            FetchIsolation::TxnCommitted
        } else {
            FetchIsolation::HighWatermark
        }
    }

    /// The exclusive upper bound of what a read may return.
    pub fn max_offset(self, offsets: &Offsets) -> i64 {
        match self {
            FetchIsolation::LogEnd => offsets.log_end_offset,
            FetchIsolation::HighWatermark => offsets.high_watermark,
            FetchIsolation::TxnCommitted => offsets.last_stable_offset,
        }
    }
}

/// One read of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchParams {
    /// A broker id (>= 0) for a follower's fetch, negative for a consumer.
    pub replica_id: i32,
    /// The follower's broker epoch (Fetch v15+), -1 when absent.
    pub replica_epoch: i64,
    pub isolation: FetchIsolation,
    /// Refuse the read with NOT_LEADER_OR_FOLLOWER unless this node leads the partition.
    pub fetch_only_leader: bool,
    /// The reader's view of the leader epoch, checked against ours; `None` skips the check.
    pub current_leader_epoch: Option<i32>,
    /// The epoch of the last batch the reader has (Fetch v12+), to detect divergence.
    pub last_fetched_epoch: Option<i32>,
    pub max_bytes: usize,
    /// Return the first batch whole even if it is larger than `max_bytes` (KIP-74), so a
    /// reader always makes progress.
    pub min_one_message: bool,
}

impl FetchParams {
    /// A read of committed data from the leader, at least one batch (the group coordinator
    /// replaying its partition).
    pub fn leader_committed(max_bytes: usize) -> FetchParams {
        FetchParams {
            replica_id: CONSUMER_REPLICA_ID,
            replica_epoch: -1,
            isolation: FetchIsolation::HighWatermark,
            fetch_only_leader: true,
            current_leader_epoch: None,
            last_fetched_epoch: None,
            max_bytes,
            min_one_message: true,
        }
    }

    /// A local read of everything the leader has appended, committed or not (the group
    /// coordinator loading its partition: records above the high watermark become its pending
    /// writes).
    pub fn leader_to_log_end(max_bytes: usize) -> FetchParams {
        FetchParams {
            isolation: FetchIsolation::LogEnd,
            ..FetchParams::leader_committed(max_bytes)
        }
    }

    /// Kafka's `FetchParams#isFromFollower`.
    pub fn is_from_follower(&self) -> bool {
        self.replica_id >= 0
    }

    /// Kafka's `FetchParams#fetchOnlyLeader`: followers read from the leader only, and so do
    /// consumers that send no client metadata (Fetch before v11, KIP-392). A v11+ consumer may
    /// read from a follower, up to the follower's high watermark.
    pub fn fetch_only_leader(replica_id: i32, has_client_metadata: bool) -> bool {
        replica_id >= 0 || !has_client_metadata
    }

    /// An epoch field of a Fetch request: negative means absent (Kafka's
    /// `FetchRequest#optionalEpoch`).
    pub fn epoch_from_wire(epoch: i32) -> Option<i32> {
        (epoch >= 0).then_some(epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_and_leader_only_follow_kafka() {
        assert_eq!(FetchIsolation::of(2, 0), FetchIsolation::LogEnd);
        assert_eq!(
            FetchIsolation::of(2, READ_COMMITTED),
            FetchIsolation::LogEnd
        );
        assert_eq!(FetchIsolation::of(-1, 0), FetchIsolation::HighWatermark);
        assert_eq!(
            FetchIsolation::of(-1, READ_COMMITTED),
            FetchIsolation::TxnCommitted
        );
        // The debugging consumer (-2) and the internal future-replica id (-3) are consumers.
        assert_eq!(FetchIsolation::of(-2, 0), FetchIsolation::HighWatermark);
        assert_eq!(FetchIsolation::of(-3, 0), FetchIsolation::HighWatermark);

        assert!(FetchParams::fetch_only_leader(0, true));
        assert!(FetchParams::fetch_only_leader(-1, false));
        assert!(!FetchParams::fetch_only_leader(-1, true));

        assert_eq!(FetchParams::epoch_from_wire(-1), None);
        assert_eq!(FetchParams::epoch_from_wire(-5), None);
        assert_eq!(FetchParams::epoch_from_wire(0), Some(0));
    }

    #[test]
    fn max_offset_by_isolation() {
        let offsets = Offsets {
            log_start_offset: 2,
            high_watermark: 7,
            last_stable_offset: 5,
            log_end_offset: 9,
            leader_epoch: 1,
        };
        assert_eq!(FetchIsolation::LogEnd.max_offset(&offsets), 9);
        assert_eq!(FetchIsolation::HighWatermark.max_offset(&offsets), 7);
        assert_eq!(FetchIsolation::TxnCommitted.max_offset(&offsets), 5);
    }
}
