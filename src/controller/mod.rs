//! The controller: the only writer of cluster metadata.
//!
//! Every change (topics, partitions, topic configs, leader elections, producer id blocks,
//! broker registration) is a request to one task, the [`task::ControllerTask`], which owns the
//! metadata log and the controller's image. For each request it runs a pure decision from
//! [`decisions`] — `(image, settings, request) -> records | ApiError` — against its image, then
//! commits the records: append to the [`log::MetadataLog`] and wait until they are durable (in a
//! cluster: until the quorum has committed them), replay them through the node's
//! [`MetadataPublisher`] (new image in the cache, listeners told), and only then answer. Requests
//! waiting together are decided one after another against the image the earlier ones make and
//! committed with one write and one fsync. Restart is replay.
//!
//! Callers hold a [`ControllerChannel`], never the task: today it reaches the local task; in a
//! cluster it will forward to the active controller. The controller never touches partition
//! data; the replica layer reacts to published images.

pub mod decisions;
pub mod log;
mod task;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::CONTROLLER_QUEUE_REQUESTS_MAX;
use crate::metadata::{BrokerRegistration, MetadataPublisher, TopicImage};
pub use decisions::{
    AlterConfigOp, CreateTopicSpec, ElectionResult, ElectionType, ProducerIdBlock,
};
use log::{MetadataLog, MetadataLogError};
use task::{ControllerTask, Request};

pub(crate) fn random_uuid() -> Uuid {
    // Random bits from the std hasher's randomly seeded keys (fresh per `RandomState`) mixed with
    // a counter: enough for topic and cluster ids, without a dependency on an RNG crate and
    // without reading the clock.
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        *w = h.finish();
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&words[0].to_be_bytes());
    bytes[8..].copy_from_slice(&words[1].to_be_bytes());
    // Version 4 / variant 1 bits, so tools see a well-formed random UUID.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let id = Uuid::from_bytes(bytes);
    // Kafka reserves the zero UUID and the "metadata topic" UUID 1; never hand them out.
    if id.as_u128() <= 1 {
        random_uuid()
    } else {
        id
    }
}

/// A new cluster id: Kafka's format, a random UUID in URL-safe base64 without padding.
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = random_uuid().into_bytes();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

/// How the rest of the node asks the controller for a change. Cheap to clone. Every method
/// resolves once the change is committed and published on this node (or refused); if the
/// controller is gone the answer is NOT_CONTROLLER, which clients retry.
#[derive(Debug, Clone)]
pub struct ControllerChannel {
    tx: mpsc::Sender<Request>,
}

impl ControllerChannel {
    async fn call<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(request(reply))
            .await
            .map_err(|_| ApiError::NotController)?;
        rx.await.map_err(|_| ApiError::NotController)
    }

    /// Creates one topic (or only validates it). Returns the topic as it is (or would be).
    pub async fn create_topic(
        &self,
        spec: CreateTopicSpec,
        validate_only: bool,
    ) -> Result<Arc<TopicImage>, ApiError> {
        self.call(|reply| Request::CreateTopic {
            spec,
            validate_only,
            reply,
        })
        .await?
    }

    pub async fn delete_topic(&self, topic_id: Uuid) -> Result<(), ApiError> {
        self.call(|reply| Request::DeleteTopic { topic_id, reply })
            .await?
    }

    /// Grows a topic to `count` partitions.
    pub async fn create_partitions(
        &self,
        topic: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call(|reply| Request::CreatePartitions {
            topic,
            count,
            assignments,
            validate_only,
            reply,
        })
        .await?
    }

    /// Applies IncrementalAlterConfigs operations to one topic.
    pub async fn alter_topic_configs(
        &self,
        topic: String,
        ops: Vec<(String, AlterConfigOp, Option<String>)>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.call(|reply| Request::AlterTopicConfigs {
            topic,
            ops,
            validate_only,
            reply,
        })
        .await?
    }

    /// ElectLeaders; see [`decisions::elect_leaders`].
    pub async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionResult>, ApiError> {
        self.call(|reply| Request::ElectLeaders {
            election,
            partitions,
            reply,
        })
        .await
    }

    /// Registers a broker (a new incarnation of it); returns how many partitions it now leads
    /// because of it.
    pub async fn register_broker(
        &self,
        registration: BrokerRegistration,
    ) -> Result<usize, ApiError> {
        self.call(|reply| Request::RegisterBroker {
            registration,
            reply,
        })
        .await?
    }

    /// A new block of producer ids for `broker_id`.
    pub async fn allocate_producer_ids(&self, broker_id: i32) -> Result<ProducerIdBlock, ApiError> {
        self.call(|reply| Request::AllocateProducerIds { broker_id, reply })
            .await?
    }
}

/// Opens the metadata log in `dir`, replays it into `publisher`'s image (`cluster_id`, this node
/// as controller) and starts the controller task; it stops when `shutdown` turns true.
pub fn start(
    dir: &std::path::Path,
    cluster_id: &str,
    config: Arc<BrokerConfig>,
    cache: Arc<crate::metadata::MetadataCache>,
    shutdown: watch::Receiver<bool>,
) -> Result<(ControllerChannel, Arc<MetadataPublisher>, JoinHandle<()>), MetadataLogError> {
    let (log, batches) = MetadataLog::open(dir)?;
    let mut image = crate::metadata::MetadataImage::empty(cluster_id.to_owned(), config.node_id);
    for batch in &batches {
        image.apply_in_place(batch);
    }
    tracing::info!(
        records = image.records_applied,
        topics = image.topics.len(),
        "metadata log replayed"
    );
    let publisher = Arc::new(MetadataPublisher::new(cache, image));
    let (tx, rx) = mpsc::channel(CONTROLLER_QUEUE_REQUESTS_MAX);
    let task = ControllerTask::new(config, log, publisher.clone(), rx);
    let handle = tokio::spawn(task.run(shutdown));
    Ok((ControllerChannel { tx }, publisher, handle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use crate::metadata::MetadataCache;

    struct Started {
        channel: ControllerChannel,
        cache: Arc<crate::metadata::MetadataCache>,
        shutdown: watch::Sender<bool>,
        task: JoinHandle<()>,
    }

    impl Started {
        async fn stop(self) {
            let _ = self.shutdown.send(true);
            self.task.await.unwrap();
        }
    }

    fn start_in(dir: &std::path::Path) -> Started {
        let config = Arc::new(BrokerConfig::from_raw(RawConfig::default()).unwrap().config);
        let cache = Arc::new(MetadataCache::new(Default::default()));
        let (shutdown, rx) = watch::channel(false);
        let (channel, _, task) = start(dir, "cluster", config, cache.clone(), rx).unwrap();
        Started {
            channel,
            cache,
            shutdown,
            task,
        }
    }

    fn registration() -> BrokerRegistration {
        BrokerRegistration {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
        }
    }

    fn spec(name: &str, partitions: i32) -> CreateTopicSpec {
        CreateTopicSpec {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn restart_replays_and_registration_bumps_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path());
        assert_eq!(c.channel.register_broker(registration()).await.unwrap(), 0);
        let t = c.channel.create_topic(spec("t", 2), false).await.unwrap();
        assert_eq!(
            c.cache.image().topic("t").unwrap().id,
            t.id,
            "published before the answer"
        );
        c.channel
            .alter_topic_configs(
                "t".into(),
                vec![("retention.ms".into(), AlterConfigOp::Set, Some("10".into()))],
                false,
            )
            .await
            .unwrap();
        let block = c.channel.allocate_producer_ids(1).await.unwrap();
        c.stop().await;

        let c = start_in(dir.path());
        let t = c.cache.image().topic("t").unwrap().clone();
        assert_eq!(t.configs["retention.ms"], "10");
        assert_eq!(t.partitions[&1].leader_epoch, 0);
        // The broker comes back: it leads its partitions again under a new epoch.
        assert_eq!(c.channel.register_broker(registration()).await.unwrap(), 2);
        let t = c.cache.image().topic("t").unwrap().clone();
        assert_eq!(t.partitions[&1].leader_epoch, 1);
        assert_eq!(t.partitions[&1].partition_epoch, 1);
        // Producer id blocks are never handed out twice, even across restarts.
        let next = c.channel.allocate_producer_ids(1).await.unwrap();
        assert!(
            next.first >= block.first + block.size,
            "{next:?} after {block:?}"
        );
        c.stop().await;
    }

    #[tokio::test]
    async fn requests_decided_together_see_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path());
        c.channel.register_broker(registration()).await.unwrap();
        // Many concurrent creations of one name: the controller decides them in order, so
        // exactly one wins, whether or not they share a pass.
        let attempts: Vec<_> = (0..20)
            .map(|_| {
                let channel = c.channel.clone();
                tokio::spawn(async move { channel.create_topic(spec("same", 1), false).await })
            })
            .collect();
        let mut created = 0;
        for a in attempts {
            match a.await.unwrap() {
                Ok(_) => created += 1,
                Err(e) => assert_eq!(e.code(), 36, "{e}"),
            }
        }
        assert_eq!(created, 1);
        c.stop().await;
    }

    #[tokio::test]
    async fn a_stopped_controller_answers_not_controller() {
        let dir = tempfile::tempdir().unwrap();
        let c = start_in(dir.path());
        let channel = c.channel.clone();
        c.stop().await;
        assert_eq!(
            channel.create_topic(spec("t", 1), false).await.unwrap_err(),
            ApiError::NotController
        );
    }

    #[test]
    fn cluster_ids_have_kafkas_shape() {
        let id = new_cluster_id();
        assert_eq!(id.len(), 22);
        assert_ne!(id, new_cluster_id());
    }
}
