//! The leader as a fetcher sees it (Kafka's `LeaderEndPoint`): a Fetch of several partitions,
//! and the leader's log start and end offsets of one partition (ListOffsets as a replica, which
//! a leader answers with its log end offset rather than its high watermark).
//!
//! [`ClientLeaderEndPoint`] speaks Kafka's own protocol through the inter-broker client: Fetch
//! v12–17 as a follower (v15+ `ReplicaState{replica_id, replica_epoch}`, `current_leader_epoch`,
//! `last_fetched_epoch`, no fetch session), to the leader's endpoint of
//! `inter.broker.listener.name` in the metadata image. Tests put a fake leader behind the trait.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafkaiq_storage::TopicPartition;
use uuid::Uuid;

use super::state::PartitionAnswer;
use crate::client::{
    fetch_response_frame_bytes_max, Client, ClientConfig, Endpoint, RequestOptions,
};
use crate::config::ReplicaFetcherConfig;
use crate::errors::ApiError;
use crate::replica::brokers::BrokerView;
use crate::security::ClientSecurity;

/// One partition of a follower's fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionSpec {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub fetch_offset: i64,
    pub last_fetched_epoch: Option<i32>,
    pub current_leader_epoch: i32,
    pub log_start_offset: i64,
}

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A leader to fetch from.
pub trait LeaderEndPoint: Send + Sync {
    /// One Fetch of `partitions` from `leader` as replica `replica_id` at broker epoch
    /// `replica_epoch`. An `Err` fails every partition of the request (the connection, the
    /// whole response).
    fn fetch(
        &self,
        leader: i32,
        replica_epoch: i64,
        partitions: Vec<FetchPartitionSpec>,
    ) -> BoxFuture<Result<Vec<(TopicPartition, PartitionAnswer)>, ApiError>>;

    /// Gives up the fetch in flight to `leader` (its future was dropped): the leader may hold
    /// it for `replica.fetch.wait.max.ms`, and the next fetch must not queue behind it.
    fn abandon(&self, leader: i32);

    /// The leader's log start and log end offsets of `tp`, in `current_leader_epoch`.
    fn log_start_and_end(
        &self,
        leader: i32,
        tp: TopicPartition,
        current_leader_epoch: i32,
    ) -> BoxFuture<Result<(i64, i64), ApiError>>;
}

/// Makes the endpoint a new fetcher uses, from the leader's id and the fetcher's index.
pub type LeaderEndPointFactory = Arc<dyn Fn(i32, usize) -> Arc<dyn LeaderEndPoint> + Send + Sync>;

/// The endpoint over the inter-broker client: one client (so one connection to the leader)
/// per fetcher, as each of Kafka's fetcher threads has its own `NetworkClient`.
pub struct ClientLeaderEndPoint {
    client: Client,
    replica_id: i32,
    config: ReplicaFetcherConfig,
    /// `message.max.bytes`: the response frame may hold one whole batch beyond the soft limit.
    message_max_bytes: usize,
}

impl ClientLeaderEndPoint {
    /// A fetcher's endpoint. The leader's address is looked up in `brokers` at every connection
    /// attempt (a restarted leader may listen elsewhere), on `inter_broker_listener`, secured
    /// by `security` when that listener is SSL or SASL.
    pub fn new(
        replica_id: i32,
        fetcher_id: usize,
        config: ReplicaFetcherConfig,
        message_max_bytes: usize,
        brokers: Arc<BrokerView>,
        inter_broker_listener: String,
        security: Option<Arc<ClientSecurity>>,
    ) -> ClientLeaderEndPoint {
        let resolver = Arc::new(move |node: i32| {
            let snapshot = brokers.get();
            let endpoint = snapshot.broker(node)?.endpoint(&inter_broker_listener)?;
            Some(Endpoint::new(endpoint.host.clone(), endpoint.port))
        });
        let client = Client::new(
            ClientConfig {
                client_id: format!("broker-{replica_id}-fetcher-{fetcher_id}"),
                request_timeout: Duration::from_millis(config.socket_timeout_ms),
                security,
                ..ClientConfig::default()
            },
            Some(resolver),
        );
        ClientLeaderEndPoint {
            client,
            replica_id,
            config,
            message_max_bytes,
        }
    }
}

impl Drop for ClientLeaderEndPoint {
    fn drop(&mut self) {
        self.client.shutdown();
    }
}

/// A follower's Fetch at `version` (12–17): no fetch session (session 0, epoch -1: a full
/// fetch every time), read to the log end (`isolation_level` 0 is ignored for replicas).
pub fn build_fetch(
    version: i16,
    replica_id: i32,
    replica_epoch: i64,
    config: &ReplicaFetcherConfig,
    partitions: &[FetchPartitionSpec],
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for p in partitions {
        let data = FetchPartition::default()
            .with_partition(p.tp.partition)
            .with_current_leader_epoch(p.current_leader_epoch)
            .with_fetch_offset(p.fetch_offset)
            .with_last_fetched_epoch(p.last_fetched_epoch.unwrap_or(-1))
            .with_log_start_offset(p.log_start_offset)
            .with_partition_max_bytes(config.max_bytes);
        let same = |t: &FetchTopic| {
            if version >= 13 {
                t.topic_id == p.topic_id
            } else {
                t.topic.0.as_str() == p.tp.topic
            }
        };
        match topics.iter_mut().find(|t| same(t)) {
            Some(t) => t.partitions.push(data),
            None => {
                let mut t = FetchTopic::default().with_partitions(vec![data]);
                if version >= 13 {
                    t.topic_id = p.topic_id;
                } else {
                    t.topic = TopicName(StrBytes::from_string(p.tp.topic.clone()));
                }
                topics.push(t);
            }
        }
    }
    let mut request = FetchRequest::default()
        .with_max_wait_ms(i32::try_from(config.wait_max_ms).unwrap_or(i32::MAX))
        .with_min_bytes(config.min_bytes)
        .with_max_bytes(config.response_max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics);
    if version >= 15 {
        request.replica_state = ReplicaState::default()
            .with_replica_id(BrokerId(replica_id))
            .with_replica_epoch(replica_epoch);
    } else {
        request.replica_id = BrokerId(replica_id);
    }
    request
}

/// The answers of a fetch response to `partitions`, matched by topic id (v13+) or name. A
/// response-level error fails the whole request.
pub fn read_fetch(
    version: i16,
    response: FetchResponse,
    partitions: &[FetchPartitionSpec],
) -> Result<Vec<(TopicPartition, PartitionAnswer)>, ApiError> {
    if let Some(e) = ApiError::from_code(response.error_code) {
        return Err(e);
    }
    let mut answers = Vec::new();
    for topic in response.responses {
        for data in topic.partitions {
            let spec = partitions.iter().find(|p| {
                p.tp.partition == data.partition_index
                    && if version >= 13 {
                        p.topic_id == topic.topic_id
                    } else {
                        p.tp.topic == topic.topic.0.as_str()
                    }
            });
            let Some(spec) = spec else {
                continue;
            };
            let diverging = (data.diverging_epoch.epoch >= 0
                || data.diverging_epoch.end_offset >= 0)
                .then_some((data.diverging_epoch.epoch, data.diverging_epoch.end_offset));
            answers.push((
                spec.tp.clone(),
                PartitionAnswer {
                    error: ApiError::from_code(data.error_code),
                    high_watermark: data.high_watermark,
                    log_start_offset: data.log_start_offset,
                    records: data.records.unwrap_or_default(),
                    diverging_epoch: diverging,
                },
            ));
        }
    }
    Ok(answers)
}

impl LeaderEndPoint for ClientLeaderEndPoint {
    fn fetch(
        &self,
        leader: i32,
        replica_epoch: i64,
        partitions: Vec<FetchPartitionSpec>,
    ) -> BoxFuture<Result<Vec<(TopicPartition, PartitionAnswer)>, ApiError>> {
        let client = self.client.clone();
        let config = self.config.clone();
        let replica_id = self.replica_id;
        let frame_max = fetch_response_frame_bytes_max(
            config.response_max_bytes.max(0) as usize,
            self.message_max_bytes,
        );
        // The leader may park the fetch for `replica.fetch.wait.max.ms`; the request timeout
        // (`replica.socket.timeout.ms`, validated to be at least that) covers it.
        let options = RequestOptions::default()
            .versions(12, 17)
            .response_bytes_max(frame_max);
        Box::pin(async move {
            let specs = partitions.clone();
            let response = client
                .send_with(leader, options, move |version| {
                    build_fetch(version, replica_id, replica_epoch, &config, &specs)
                })
                .await
                .map_err(|e| {
                    tracing::debug!(leader, error = %e, "fetch from the leader failed");
                    ApiError::RequestTimedOut
                })?;
            read_fetch(response.version, response.body, &partitions)
        })
    }

    /// A connection answers its requests in order, so the parked fetch would hold back the
    /// next one: the connection is closed (no reconnect backoff follows a requested close),
    /// and the next fetch opens a new one. No fetch session is lost: followers fetch without.
    fn abandon(&self, leader: i32) {
        self.client.disconnect(leader);
    }

    fn log_start_and_end(
        &self,
        leader: i32,
        tp: TopicPartition,
        current_leader_epoch: i32,
    ) -> BoxFuture<Result<(i64, i64), ApiError>> {
        let client = self.client.clone();
        let replica_id = self.replica_id;
        Box::pin(async move {
            let mut offsets = [0i64; 2];
            for (slot, timestamp) in [(0, EARLIEST_TIMESTAMP), (1, LATEST_TIMESTAMP)] {
                let tp = tp.clone();
                let response = client
                    .send_with(
                        leader,
                        RequestOptions::default().versions(4, 10),
                        move |_| {
                            ListOffsetsRequest::default()
                                .with_replica_id(BrokerId(replica_id))
                                .with_topics(vec![ListOffsetsTopic::default()
                                    .with_name(TopicName(StrBytes::from_string(tp.topic)))
                                    .with_partitions(vec![ListOffsetsPartition::default()
                                        .with_partition_index(tp.partition)
                                        .with_current_leader_epoch(current_leader_epoch)
                                        .with_timestamp(timestamp)])])
                        },
                    )
                    .await
                    .map_err(|_| ApiError::RequestTimedOut)?;
                let p = response
                    .body
                    .topics
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or(ApiError::UnknownTopicOrPartition)?;
                if let Some(e) = ApiError::from_code(p.error_code) {
                    return Err(e);
                }
                offsets[slot] = p.offset;
            }
            Ok((offsets[0], offsets[1]))
        })
    }
}

const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{
        EpochEndOffset, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::protocol::Encodable;

    fn spec(topic: &str, id: u128, partition: i32) -> FetchPartitionSpec {
        FetchPartitionSpec {
            tp: TopicPartition::new(topic, partition),
            topic_id: Uuid::from_u128(id),
            fetch_offset: 40,
            last_fetched_epoch: Some(3),
            current_leader_epoch: 4,
            log_start_offset: 2,
        }
    }

    fn config() -> ReplicaFetcherConfig {
        crate::config::BrokerConfig::default_single_node()
            .replica
            .fetcher
    }

    #[test]
    fn a_follower_fetch_carries_kafkas_replica_fields() {
        let specs = [spec("a", 1, 0), spec("b", 2, 0), spec("a", 1, 1)];
        let v17 = build_fetch(17, 2, 77, &config(), &specs);
        assert_eq!(
            (
                v17.replica_state.replica_id,
                v17.replica_state.replica_epoch
            ),
            (BrokerId(2), 77)
        );
        assert_eq!(
            v17.replica_id,
            BrokerId(-1),
            "v15+ carries it in replica_state"
        );
        assert_eq!(
            (v17.max_wait_ms, v17.min_bytes, v17.max_bytes),
            (500, 1, 10 << 20)
        );
        assert_eq!((v17.session_id, v17.session_epoch), (0, -1));
        assert_eq!(v17.topics.len(), 2);
        assert_eq!(v17.topics[0].topic_id, Uuid::from_u128(1));
        let p = &v17.topics[0].partitions[1];
        assert_eq!(
            (
                p.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.log_start_offset,
                p.partition_max_bytes
            ),
            (1, 4, 40, 3, 2, 1 << 20)
        );
        let v12 = build_fetch(12, 2, 77, &config(), &specs);
        assert_eq!(v12.replica_id, BrokerId(2));
        assert_eq!(v12.topics[0].topic.0.as_str(), "a");
        let mut buf = bytes::BytesMut::new();
        v17.encode(&mut buf, 17).unwrap();
        v12.encode(&mut buf, 12).unwrap();
    }

    #[test]
    fn answers_are_matched_to_the_request_and_carry_diverging_epochs() {
        let specs = [spec("a", 1, 0), spec("a", 1, 1)];
        let response =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic_id(Uuid::from_u128(1))
                .with_partitions(vec![
                    PartitionData::default()
                        .with_partition_index(0)
                        .with_high_watermark(50)
                        .with_records(Some(Bytes::from_static(b"x"))),
                    PartitionData::default()
                        .with_partition_index(1)
                        .with_diverging_epoch(
                            EpochEndOffset::default().with_epoch(2).with_end_offset(30),
                        ),
                    // Not asked for: ignored.
                    PartitionData::default().with_partition_index(9),
                ])]);
        let answers = read_fetch(17, response, &specs).unwrap();
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0].1.high_watermark, 50);
        assert_eq!(answers[0].1.diverging_epoch, None);
        assert_eq!(answers[1].1.diverging_epoch, Some((2, 30)));
        let failed = FetchResponse::default()
            .with_error_code(ApiError::UnknownServerError(String::new()).code());
        assert!(read_fetch(17, failed, &specs).is_err());
    }
}
