//! The controller task: one tokio task that owns the metadata log and the controller's image,
//! and takes requests over a channel (Kafka's `QuorumController` event queue).
//!
//! A pass takes every request waiting (up to [`CONTROLLER_BATCH_REQUESTS_MAX`]), decides each
//! against the image the earlier ones of the pass leave (so two requests of one pass see each
//! other), appends all their records with one write and one fsync on a blocking thread,
//! publishes the new image through the [`MetadataPublisher`] on that same thread (listeners do
//! file I/O), and then answers every request of the pass. If the commit fails, every request
//! whose records were part of it gets the error; a refused request gets its own error either
//! way. Nothing here blocks a tokio worker, and no lock is held across an await.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot, watch};
use uuid::Uuid;

use super::decisions::{self, CreateTopicSpec, ElectionResult, ElectionType, ProducerIdBlock};
use super::log::{MetadataLog, MetadataLogError};
use super::{random_uuid, AlterConfigOp};
use crate::config::BrokerConfig;
use crate::errors::ApiError;
use crate::limits::CONTROLLER_BATCH_REQUESTS_MAX;
use crate::metadata::{
    BrokerRegistration, MetadataImage, MetadataPublisher, MetadataRecord, TopicImage,
};

type Reply<T> = oneshot::Sender<Result<T, ApiError>>;

/// One request to the controller, with where its answer goes.
pub(crate) enum Request {
    CreateTopic {
        spec: CreateTopicSpec,
        validate_only: bool,
        reply: Reply<Arc<TopicImage>>,
    },
    DeleteTopic {
        topic_id: Uuid,
        reply: Reply<()>,
    },
    CreatePartitions {
        topic: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
        reply: Reply<()>,
    },
    AlterTopicConfigs {
        topic: String,
        ops: Vec<(String, AlterConfigOp, Option<String>)>,
        validate_only: bool,
        reply: Reply<()>,
    },
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
        reply: oneshot::Sender<Vec<ElectionResult>>,
    },
    RegisterBroker {
        registration: BrokerRegistration,
        reply: Reply<usize>,
    },
    AllocateProducerIds {
        broker_id: i32,
        reply: Reply<ProducerIdBlock>,
    },
}

/// Answers a request once its pass is committed: with the committed image, or the commit error.
type Finish = Box<dyn FnOnce(Result<&MetadataImage, &ApiError>) + Send>;

/// A decided request: the records it needs committed, and how to answer it afterwards.
struct Decided {
    records: Vec<MetadataRecord>,
    finish: Finish,
}

impl Decided {
    /// Nothing to commit; the answer is already known.
    fn answer<T: Send + 'static>(reply: Reply<T>, result: Result<T, ApiError>) -> Decided {
        Decided {
            records: Vec::new(),
            finish: Box::new(move |_| {
                let _ = reply.send(result);
            }),
        }
    }

    /// `records` on success (which may be none), then `ok` computed from the committed image.
    fn commit<T: Send + 'static>(
        reply: Reply<T>,
        decided: Result<Vec<MetadataRecord>, ApiError>,
        ok: impl FnOnce(&MetadataImage) -> T + Send + 'static,
    ) -> Decided {
        match decided {
            Err(e) => Decided::answer(reply, Err(e)),
            Ok(records) => Decided {
                records,
                finish: Box::new(move |committed| {
                    let _ = reply.send(committed.map(ok).map_err(Clone::clone));
                }),
            },
        }
    }
}

pub(crate) struct ControllerTask {
    config: Arc<BrokerConfig>,
    /// Behind a mutex only so the blocking thread that appends can borrow it; only this task
    /// ever locks it.
    log: Arc<Mutex<MetadataLog>>,
    publisher: Arc<MetadataPublisher>,
    image: Arc<MetadataImage>,
    rx: mpsc::Receiver<Request>,
}

impl ControllerTask {
    pub(crate) fn new(
        config: Arc<BrokerConfig>,
        log: MetadataLog,
        publisher: Arc<MetadataPublisher>,
        rx: mpsc::Receiver<Request>,
    ) -> ControllerTask {
        ControllerTask {
            config,
            log: Arc::new(Mutex::new(log)),
            image: publisher.image(),
            publisher,
            rx,
        }
    }

    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        loop {
            let first = tokio::select! {
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() { return; }
                    continue;
                }
                request = self.rx.recv() => match request {
                    Some(r) => r,
                    None => return,
                },
            };
            let mut requests = vec![first];
            while requests.len() < CONTROLLER_BATCH_REQUESTS_MAX {
                match self.rx.try_recv() {
                    Ok(r) => requests.push(r),
                    Err(_) => break,
                }
            }
            self.pass(requests).await;
        }
    }

    /// Decides every request against the image the previous ones leave, commits all records
    /// at once, then answers.
    async fn pass(&mut self, requests: Vec<Request>) {
        let mut working: Option<MetadataImage> = None;
        let mut batches = Vec::new();
        let mut finishes = Vec::with_capacity(requests.len());
        for request in requests {
            let decided = {
                let image = working.as_ref().unwrap_or(&self.image);
                self.decide(image, request)
            };
            if !decided.records.is_empty() {
                working
                    .get_or_insert_with(|| (*self.image).clone())
                    .apply_in_place(&decided.records);
                batches.push(decided.records);
            }
            finishes.push(decided.finish);
        }
        let committed = self.commit(batches).await;
        let committed = committed.as_deref();
        for finish in finishes {
            finish(committed);
        }
    }

    /// Append (durable), publish. The only path by which metadata changes.
    async fn commit(
        &mut self,
        batches: Vec<Vec<MetadataRecord>>,
    ) -> Result<Arc<MetadataImage>, ApiError> {
        if batches.is_empty() {
            return Ok(self.image.clone());
        }
        let log = self.log.clone();
        let publisher = self.publisher.clone();
        let published = tokio::task::spawn_blocking(move || {
            log.lock()
                .unwrap_or_else(|e| e.into_inner())
                .append(&batches)
                .map_err(commit_error)?;
            Ok::<_, ApiError>(publisher.publish(&batches))
        })
        .await;
        let image = match published {
            Ok(result) => result?,
            // A listener panicked: a bug. Let it end this task loudly rather than answer as if
            // the image had been published everywhere.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        self.image = image.clone();
        Ok(image)
    }

    fn decide(&self, image: &MetadataImage, request: Request) -> Decided {
        let config = &*self.config;
        match request {
            Request::CreateTopic {
                spec,
                validate_only,
                reply,
            } => {
                let records = decisions::create_topic(image, config, &spec, random_uuid());
                if validate_only {
                    let topic = records.map(|r| image.apply(&r).topics[&spec.name].clone());
                    return Decided::answer(reply, topic);
                }
                let name = spec.name;
                Decided::commit(reply, records, move |image| image.topics[&name].clone())
            }
            Request::DeleteTopic { topic_id, reply } => {
                let records = decisions::delete_topic(image, config, topic_id);
                Decided::commit(reply, records, |_| ())
            }
            Request::CreatePartitions {
                topic,
                count,
                assignments,
                validate_only,
                reply,
            } => {
                let records = decisions::create_partitions(image, &topic, count, assignments);
                Self::unless_validating(validate_only, reply, records)
            }
            Request::AlterTopicConfigs {
                topic,
                ops,
                validate_only,
                reply,
            } => {
                let records = decisions::alter_topic_configs(image, &topic, &ops);
                Self::unless_validating(validate_only, reply, records)
            }
            Request::ElectLeaders {
                election,
                partitions,
                reply,
            } => {
                let (records, mut results) = decisions::elect_leaders(image, election, partitions);
                Decided {
                    records,
                    finish: Box::new(move |committed| {
                        if let Err(e) = committed {
                            for (_, _, r) in results.iter_mut().filter(|(_, _, r)| r.is_ok()) {
                                *r = Err(e.clone());
                            }
                        }
                        let _ = reply.send(results);
                    }),
                }
            }
            Request::RegisterBroker {
                registration,
                reply,
            } => {
                let records = decisions::register_broker(image, &registration);
                let led = records
                    .iter()
                    .filter(|r| matches!(r, MetadataRecord::Partition { .. }))
                    .count();
                Decided::commit(reply, Ok(records), move |_| led)
            }
            Request::AllocateProducerIds { broker_id, reply } => {
                let (records, block) = decisions::allocate_producer_ids(image, broker_id);
                Decided::commit(reply, Ok(records), move |_| block)
            }
        }
    }

    fn unless_validating(
        validate_only: bool,
        reply: Reply<()>,
        records: Result<Vec<MetadataRecord>, ApiError>,
    ) -> Decided {
        if validate_only {
            Decided::answer(reply, records.map(|_| ()))
        } else {
            Decided::commit(reply, records, |_| ())
        }
    }
}

/// What a client sees when the metadata log refuses a commit.
fn commit_error(e: MetadataLogError) -> ApiError {
    match e {
        MetadataLogError::Encode { .. } | MetadataLogError::TooLarge { .. } => {
            ApiError::InvalidRequest(e.to_string())
        }
        _ => {
            tracing::error!(error = %e, "metadata log append failed");
            ApiError::KafkaStorageError(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;
    use crate::controller::ControllerChannel;
    use crate::metadata::MetadataCache;

    #[tokio::test]
    async fn a_failed_append_fails_the_request_and_every_later_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = MetadataLog::open(dir.path()).unwrap();
        // A read-only handle: the append fails with EBADF.
        let path = dir.path().join(super::super::log::METADATA_LOG_FILE);
        log.set_file(std::fs::File::open(&path).unwrap());
        let config = Arc::new(BrokerConfig::from_raw(RawConfig::default()).unwrap().config);
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher = Arc::new(MetadataPublisher::new(
            cache.clone(),
            MetadataImage::empty("c".into(), 1),
        ));
        let (tx, rx) = mpsc::channel(8);
        let (_shutdown, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(ControllerTask::new(config, log, publisher, rx).run(shutdown_rx));
        let channel = ControllerChannel { tx };
        let registration = BrokerRegistration {
            node_id: 1,
            host: "h".into(),
            port: 1,
            rack: None,
        };
        let err = channel.register_broker(registration).await.unwrap_err();
        assert_eq!(
            err.code(),
            ApiError::KafkaStorageError(String::new()).code()
        );
        assert!(
            cache.image().brokers.is_empty(),
            "nothing uncommitted is published"
        );
        let err = channel.allocate_producer_ids(1).await.unwrap_err();
        assert!(err.message().contains("offline"), "{err}");
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "nothing written"
        );
        drop(channel);
        task.await.unwrap();
    }
}
