//! [`ReplicaManager::append_records`]: a produce request's appends as leader and its acks=all
//! wait (Kafka's `ReplicaManager#appendRecords` with its `DelayedProduce`).
//!
//! Each partition is refused or appended in request order: acks outside -1..=1 are
//! INVALID_REQUIRED_ACKS, a topic id the image does not know UNKNOWN_TOPIC_ID, no records
//! INVALID_RECORD; then the client batch rules of [`validate_client_batches`], the transaction
//! check of a transactional batch ([`AppendParams::transactions`]: KIP-890's verification,
//! made before the appends, TRANSACTIONAL_ID_AUTHORIZATION_FAILED without a transactional id)
//! and the partition's own append (which refuses acks=-1
//! with NOT_ENOUGH_REPLICAS before writing anything when the ISR is below the effective min ISR).
//!
//! acks=-1 then waits in the purgatory until the high watermark covers every partition's last
//! appended offset: NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR shrank below min
//! ISR meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved while it waited (marked
//! `lost_while_parked`: the handler answers UNKNOWN_TOPIC_OR_PARTITION for a topic deleted
//! meanwhile); REQUEST_TIMED_OUT at `timeout_ms`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafkaiq_storage::{TopicPartition, TxnVerification, VerificationGuard};

use super::{Partition, ReplicaManager};
use crate::errors::ApiError;
use crate::limits::PRODUCE_TIMEOUT_MS_MAX;
use crate::metadata::MetadataImage;
use crate::metrics::{BrokerTopicStats, RequestStats};

/// One partition's records of a produce request.
pub struct PartitionRecords<'a> {
    pub index: i32,
    pub records: Option<&'a [u8]>,
}

/// One topic of a produce request, its name resolved (v13+ names it by id: `known` is false for
/// an id the image does not know).
pub struct TopicRecords<'a> {
    pub name: String,
    pub known: bool,
    /// Why none of this topic's batches may be appended (the caller is not authorized), or
    /// `None`.
    pub refused: Option<ApiError>,
    pub partitions: Vec<PartitionRecords<'a>>,
}

/// What a produce request's transactional batches are appended with (KIP-890).
#[derive(Clone, Copy)]
pub enum TxnChecks<'a> {
    /// The request has no transactional id: a transactional batch is refused
    /// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in Kafka).
    NoTransactionalId,
    /// `transaction.partition.verification.enable=false`: appended unchecked.
    Unchecked,
    /// The coordinator's answer for each partition whose batch would open a transaction,
    /// asked before the appends: an error, or the guard the append shows. A partition not
    /// listed had its transaction open already (its append checks that it still is).
    Verified(&'a HashMap<TopicPartition, Result<VerificationGuard, ApiError>>),
}

/// What a produce request asks, besides its records.
#[derive(Clone, Copy)]
pub struct AppendParams<'a> {
    pub acks: i16,
    pub timeout_ms: i32,
    /// How its transactional batches are checked.
    pub transactions: TxnChecks<'a>,
    pub now_ms: i64,
}

/// Where a partition's records went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time: i64,
    pub log_start_offset: i64,
}

/// One partition's outcome, in request order.
#[derive(Debug)]
pub struct PartitionAppend {
    pub index: i32,
    pub result: Result<Appended, ApiError>,
    /// For records the log refused (INVALID_RECORD with record errors): the log start offset,
    /// which Kafka reports with them.
    pub log_start_offset: Option<i64>,
    /// For acks=-1: the partition, the offset the high watermark must reach, and the leader
    /// epoch the records were written in.
    wait_for: Option<(Arc<Partition>, i64, i32)>,
    /// Whether the partition lost its leadership while the request waited for acks=-1 (the
    /// caller may then answer for a deleted topic instead, as Kafka's `DelayedProduce` does).
    pub lost_while_parked: bool,
}

impl PartitionAppend {
    /// A partition refused before any append.
    fn refused(index: i32, error: ApiError) -> PartitionAppend {
        PartitionAppend {
            index,
            result: Err(error),
            log_start_offset: None,
            wait_for: None,
            lost_while_parked: false,
        }
    }
}

/// One topic's outcomes, in request order.
#[derive(Debug)]
pub struct TopicAppend {
    pub name: String,
    pub partitions: Vec<PartitionAppend>,
}

/// The counters an append updates: bytes and messages in per topic, and the produce stages.
#[derive(Clone, Copy)]
pub struct AppendStats<'a> {
    pub topics: &'a BrokerTopicStats,
    pub requests: &'a RequestStats,
}

impl ReplicaManager {
    /// Appends every partition's records as leader and, for acks=-1, waits for them to be
    /// committed. Outcomes come back in request order.
    pub async fn append_records(
        &self,
        image: &MetadataImage,
        params: AppendParams<'_>,
        topics: Vec<TopicRecords<'_>>,
        stats: AppendStats<'_>,
    ) -> Vec<TopicAppend> {
        let appending = Instant::now();
        let mut outcomes: Vec<TopicAppend> = topics
            .into_iter()
            .map(|topic| self.append_topic(image, &params, topic, stats.topics))
            .collect();
        stats.requests.produce_stage("append", appending.elapsed());
        if params.acks == -1 {
            self.wait_for_acks_all(&mut outcomes, params.timeout_ms, stats.requests)
                .await;
        }
        outcomes
    }

    fn append_topic(
        &self,
        image: &MetadataImage,
        params: &AppendParams<'_>,
        topic: TopicRecords<'_>,
        topic_stats: &BrokerTopicStats,
    ) -> TopicAppend {
        let name = topic.name;
        let partitions = topic
            .partitions
            .into_iter()
            .map(|pd| {
                let o = match &topic.refused {
                    Some(e) => PartitionAppend::refused(pd.index, e.clone()),
                    None => {
                        self.append_partition(image, params, &name, topic.known, pd, topic_stats)
                    }
                };
                if let Err(e) = &o.result {
                    tracing::debug!(topic = %name, partition = o.index, error = %e, "produce refused");
                }
                o
            })
            .collect();
        TopicAppend { name, partitions }
    }

    fn append_partition(
        &self,
        image: &MetadataImage,
        params: &AppendParams<'_>,
        name: &str,
        known: bool,
        pd: PartitionRecords<'_>,
        topic_stats: &BrokerTopicStats,
    ) -> PartitionAppend {
        let mut log_start_offset = None;
        let result = if !(-1..=1).contains(&params.acks) {
            Err(ApiError::InvalidRequiredAcks)
        } else if !known {
            Err(ApiError::UnknownTopicId)
        } else {
            let tp = TopicPartition {
                topic: name.to_owned(),
                partition: pd.index,
            };
            self.partition_or_error(image, &tp).and_then(|p| {
                let records = pd.records.unwrap_or_default();
                if records.is_empty() {
                    return Err(ApiError::InvalidRecord(
                        "produce request without record batches".into(),
                    ));
                }
                validate_client_batches(records, &p.log().config(), &tp)?;
                let verification = verify_transactional(records, &tp, params.transactions)?;
                match p.append_records_to_leader_in_epoch(
                    records,
                    params.acks,
                    params.now_ms,
                    verification,
                ) {
                    Ok((info, epoch)) => {
                        if !info.duplicate {
                            topic_stats.produced(name, records.len() as u64, info.record_count);
                            topic_stats.partition_load(
                                name,
                                tp.partition,
                                crate::metrics::monotonic_ms(),
                                records.len() as u64,
                                0,
                            );
                        }
                        Ok((p, info, epoch))
                    }
                    Err(e @ ApiError::RecordErrors { .. }) => {
                        log_start_offset = Some(p.log().log_start_offset());
                        Err(e)
                    }
                    Err(e) => Err(e),
                }
            })
        };
        match result {
            Ok((p, info, epoch)) => {
                if info.duplicate {
                    tracing::debug!(topic = %name, partition = pd.index, offset = info.first_offset, "duplicate batch answered with its original offset");
                }
                PartitionAppend {
                    index: pd.index,
                    result: Ok(Appended {
                        base_offset: info.first_offset,
                        log_append_time: info.log_append_time,
                        log_start_offset: info.log_start_offset,
                    }),
                    log_start_offset: None,
                    wait_for: (params.acks == -1).then(|| (p, info.last_offset + 1, epoch)),
                    lost_while_parked: false,
                }
            }
            Err(e) => PartitionAppend {
                index: pd.index,
                result: Err(e),
                log_start_offset,
                wait_for: None,
                lost_while_parked: false,
            },
        }
    }

    /// Kafka's `DelayedProduce`: parks until every appended partition's high watermark covers
    /// its records (or something must be answered), then sets each outcome.
    async fn wait_for_acks_all(
        &self,
        outcomes: &mut [TopicAppend],
        timeout_ms: i32,
        request_stats: &RequestStats,
    ) {
        let timeout_ms = i64::from(timeout_ms).clamp(0, PRODUCE_TIMEOUT_MS_MAX);
        let waiting: Vec<(Arc<Partition>, i64, i32)> = outcomes
            .iter()
            .flat_map(|t| t.partitions.iter().filter_map(|o| o.wait_for.clone()))
            .collect();
        let partitions: Vec<Arc<Partition>> = waiting.iter().map(|(p, _, _)| p.clone()).collect();
        let waiting_since = Instant::now();
        let all_done = self
            .purgatory
            .wait_until(
                &partitions,
                Duration::from_millis(timeout_ms as u64),
                || {
                    let done = waiting.iter().all(|(p, offset, epoch)| {
                        p.acks_all_outcome_in_epoch(*offset, *epoch).is_some()
                    });
                    async move { done.then_some(()) }
                },
            )
            .await
            .is_some();
        request_stats.produce_stage("acks_wait", waiting_since.elapsed());
        if all_done {
            // The move that completed the wait is the latest one of the watched partitions
            // (a later one can only make this shorter); only a wait that parked is counted.
            let moved_at = partitions
                .iter()
                .filter_map(|p| p.high_watermark_moved_at())
                .max();
            if let Some(at) = moved_at.filter(|at| *at > waiting_since) {
                request_stats.produce_stage("acks_wake", at.elapsed());
            }
        }
        for o in outcomes.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            if let Some((p, offset, epoch)) = o.wait_for.take() {
                // Leadership lost while parked (even if regained since): the records may be
                // gone, NOT_LEADER_OR_FOLLOWER. The ISR shrunk below min ISR once they were
                // committed: NOT_ENOUGH_REPLICAS_AFTER_APPEND. Neither came in time:
                // REQUEST_TIMED_OUT.
                match p.acks_all_outcome_in_epoch(offset, epoch) {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        o.lost_while_parked = matches!(e, ApiError::NotLeaderOrFollower);
                        o.result = Err(e)
                    }
                    None => {
                        debug_assert!(!all_done);
                        o.result = Err(ApiError::RequestTimedOut)
                    }
                }
            }
        }
    }
}

/// Kafka's `LogValidator` rules for batches from a client that the batch headers decide, checked
/// before the append (the log checks sizes, CRCs and counts, and each record's key and timestamp;
/// `__consumer_offsets` writes do not come this way):
/// - a control batch is refused ("Clients are not allowed to write control records"), and so is
///   a batch with a producer id and a negative base sequence: both INVALID_RECORD;
/// - a transactional batch is TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Kafka refuses one without
///   an authorized transactional id, and no producer holds one here yet (InitProducerId refuses
///   transactional ids), so its transaction could never be ended and would hold the partition's
///   last stable offset back for good;
/// - on a LogAppendTime topic a batch that set LogAppendTime itself is INVALID_TIMESTAMP.
fn validate_client_batches(
    records: &[u8],
    config: &kafkaiq_storage::LogConfig,
    tp: &TopicPartition,
) -> Result<(), ApiError> {
    use kafkaiq_storage::batch::BatchHeader;
    use kafkaiq_storage::TimestampType;
    let mut pos = 0usize;
    while let Ok(h) = BatchHeader::parse(&records[pos..]) {
        let tp = format!("{}-{}", tp.topic, tp.partition);
        if h.is_control() {
            return Err(ApiError::InvalidRecord(format!(
                "Clients are not allowed to write control records in topic partition {tp}"
            )));
        }
        if h.has_producer_id() && h.base_sequence < 0 {
            return Err(ApiError::InvalidRecord(format!(
                "Invalid sequence number {} in record batch with producerId {} in topic partition {tp}",
                h.base_sequence, h.producer_id
            )));
        }
        if config.message_timestamp_type == TimestampType::LogAppendTime
            && h.timestamp_type() == TimestampType::LogAppendTime
        {
            return Err(ApiError::InvalidTimestamp(format!(
                "Invalid timestamp type in topic partition {tp}. Producer should not set \
                 timestamp type to LogAppendTime."
            )));
        }
        let size = h.size_in_bytes();
        if size == 0 || pos + size >= records.len() {
            break;
        }
        pos += size;
    }
    Ok(())
}

/// The producer of a transactional batch (its id and epoch), `None` for any other records:
/// what a produce request's KIP-890 verification asks the coordinator about.
pub fn transactional_producer(records: &[u8]) -> Option<(i64, i16)> {
    use kafkaiq_storage::batch::BatchHeader;
    BatchHeader::parse(records)
        .ok()
        .filter(|h| h.is_transactional())
        .map(|h| (h.producer_id, h.producer_epoch))
}

/// A transactional batch needs a transactional id (Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED
/// without one) and, with verification on, a partition in its producer's transaction: the
/// coordinator's answer, or a transaction open on the partition already.
fn verify_transactional(
    records: &[u8],
    tp: &TopicPartition,
    checks: TxnChecks<'_>,
) -> Result<TxnVerification, ApiError> {
    use kafkaiq_storage::batch::BatchHeader;
    let transactional = BatchHeader::parse(records).is_ok_and(|h| h.is_transactional());
    match checks {
        _ if !transactional => Ok(TxnVerification::Unchecked),
        TxnChecks::NoTransactionalId => Err(ApiError::TransactionalIdAuthorizationFailed),
        TxnChecks::Unchecked => Ok(TxnVerification::Unchecked),
        TxnChecks::Verified(answers) => match answers.get(tp) {
            Some(Ok(guard)) => Ok(TxnVerification::Verified(Some(*guard))),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(TxnVerification::Verified(None)),
        },
    }
}

#[cfg(test)]
mod tests {
    use kafkaiq_storage::batch::builder::{batch, transactional, Spec};
    use kafkaiq_storage::batch::{end_txn_marker_batch, ControlRecordType, EndTxnMarker};

    use super::*;

    #[test]
    fn client_batches_may_not_be_control_and_transactional_ones_are_verified() {
        let config = kafkaiq_storage::LogConfig::default();
        let tp = TopicPartition::new("t", 0);
        let idempotent = batch(
            &Spec {
                producer_id: 5,
                producer_epoch: 0,
                base_sequence: 0,
                ..Spec::default()
            },
            &[b"v".as_slice()],
        );
        assert!(validate_client_batches(&idempotent, &config, &tp).is_ok());
        let txn = transactional(&idempotent);
        assert!(validate_client_batches(&txn, &config, &tp).is_ok());
        // Without a transactional id in the request, a transactional batch is refused.
        assert_eq!(
            verify_transactional(&txn, &tp, TxnChecks::NoTransactionalId),
            Err(ApiError::TransactionalIdAuthorizationFailed)
        );
        assert_eq!(
            verify_transactional(&txn, &tp, TxnChecks::Unchecked),
            Ok(TxnVerification::Unchecked)
        );
        // The coordinator's answer: an error refuses the batch; no answer (the transaction
        // was open already) leaves the check to the log.
        let not_added = HashMap::from([(tp.clone(), Err(ApiError::TransactionAbortable))]);
        assert_eq!(
            verify_transactional(&txn, &tp, TxnChecks::Verified(&not_added)),
            Err(ApiError::TransactionAbortable)
        );
        assert_eq!(
            verify_transactional(
                &txn,
                &TopicPartition::new("t", 1),
                TxnChecks::Verified(&not_added)
            ),
            Ok(TxnVerification::Verified(None))
        );
        // An idempotent batch is not checked.
        assert_eq!(
            verify_transactional(&idempotent, &tp, TxnChecks::Verified(&not_added)),
            Ok(TxnVerification::Unchecked)
        );
        let marker = EndTxnMarker {
            control_type: ControlRecordType::Commit,
            coordinator_epoch: 0,
        };
        assert!(matches!(
            validate_client_batches(&end_txn_marker_batch(5, 0, 0, 0, marker), &config, &tp),
            Err(ApiError::InvalidRecord(_))
        ));
    }
}
