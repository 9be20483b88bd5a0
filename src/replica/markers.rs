//! Transaction markers written as partition leader: what WriteTxnMarkers asks of this node, for
//! a transaction coordinator here or on another node (Kafka's `ReplicaManager.appendRecords`
//! with origin COORDINATOR, acks=all). Each partition answers for itself: NONE once the high
//! watermark covers its marker; NOT_LEADER_OR_FOLLOWER (or the partition's other errors) when
//! it cannot take one; REQUEST_TIMED_OUT when replication does not cover it within `timeout`.

use std::time::Duration;

use kafkaiq_storage::batch::{ControlRecordType, EndTxnMarker};
use kafkaiq_storage::TopicPartition;

use super::ReplicaManager;
use crate::errors::ApiError;
use crate::metadata::MetadataImage;

impl ReplicaManager {
    /// Writes the marker that commits (or aborts) the transaction of `producer_id` at
    /// `producer_epoch`, from a coordinator in `coordinator_epoch`, to each partition of
    /// `partitions` this node leads, and waits until each is replicated, answering per
    /// partition in order.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_txn_markers(
        &self,
        image: &MetadataImage,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        partitions: &[TopicPartition],
        now_ms: i64,
        timeout: Duration,
    ) -> Vec<Result<(), ApiError>> {
        let marker = EndTxnMarker {
            control_type: if commit {
                ControlRecordType::Commit
            } else {
                ControlRecordType::Abort
            },
            coordinator_epoch,
        };
        let mut written = Vec::with_capacity(partitions.len());
        for tp in partitions {
            let appended = self.partition_or_error(image, tp).and_then(|p| {
                let (offset, epoch) =
                    p.append_txn_marker_as_leader(producer_id, producer_epoch, marker, now_ms)?;
                Ok((p, offset, epoch))
            });
            if let Err(e) = &appended {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, producer_id, error = %e, "transaction marker refused");
            }
            written.push(appended);
        }
        let mut outcomes = Vec::with_capacity(written.len());
        for w in written {
            outcomes.push(match w {
                Err(e) => Err(e),
                Ok((p, offset, epoch)) => {
                    let check = || {
                        let outcome = p.acks_all_outcome_in_epoch(offset, epoch);
                        async move { outcome }
                    };
                    match self
                        .purgatory
                        .wait_until(std::slice::from_ref(&p), timeout, check)
                        .await
                    {
                        // A marker the high watermark covers is written, whatever the ISR
                        // did meanwhile.
                        Some(Err(ApiError::NotEnoughReplicasAfterAppend)) | Some(Ok(())) => Ok(()),
                        Some(Err(e)) => Err(e),
                        None => Err(ApiError::RequestTimedOut),
                    }
                }
            });
        }
        outcomes
    }
}

impl ReplicaManager {
    /// The producers `tp`'s log holds state for, answered by its leader only (DescribeProducers,
    /// as Kafka's `ReplicaManager.activeProducerState`).
    pub fn active_producers(
        &self,
        image: &MetadataImage,
        tp: &TopicPartition,
    ) -> Result<Vec<kafkaiq_storage::ActiveProducer>, ApiError> {
        let p = self.partition_or_error(image, tp)?;
        p.check_leader_and_epoch(-1, true)?;
        Ok(p.log().active_producers())
    }
}
