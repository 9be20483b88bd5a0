//! What the controller asks to be done: the [`Command`]s its core returns for each event, and
//! [`Effects`], which carries them out on a node (the controller thread) or in the simulation.
//!
//! The core decides and keeps its own state; it writes no file, sends no message, publishes no
//! image, answers no caller and writes nothing other threads read ([`QuorumState`]) itself. It
//! returns those as commands, in the order they must take effect (the openraft engine's way): a
//! poll's writes come before the messages and the images that say they were written, so
//! carrying the commands out in order keeps Raft's rule that nothing is sent or applied before
//! it is durable.

use std::sync::Arc;

use bytes::Bytes;
use raft::eraftpb::Message;

use super::driver::ControllerError;
use super::forward::{QuorumDescription, QuorumState};
use super::observer::MetadataFeed;
use super::passes::Answer;
use crate::errors::ApiError;
use crate::metadata::{MetadataImage, MetadataPublisher};
use crate::metrics::ElectionReason;
use crate::quorum::durable::{persist, Durable, Persist};

/// One thing the controller's core asks to be done; a list of them is carried out in order.
pub(crate) enum Command {
    /// Make these writes durable (fsync) before any later command takes effect.
    Persist(Vec<Persist>),
    /// Send these Raft messages to the peer voters.
    Send(Vec<Message>),
    /// Publish a new image (cache, listeners), and keep the feed of committed entries.
    Publish(Publish),
    /// Answer the callers of a pass, or refuse requests.
    Answer(Answer),
    /// Tell the node's other threads (channels, DescribeQuorum, metrics, the chunk reassembly).
    Report(Report),
}

/// What the node's other threads read of the controller ([`QuorumState`]).
pub(crate) enum Report {
    /// Whether this voter is the active controller, and the quorum leader it knows (-1: none).
    Leadership { active: bool, leader: i32 },
    /// What DescribeQuorum answers.
    Quorum(QuorumDescription),
    /// A leader elected by an applied entry, `elapsed_ms` after its pass was decided.
    Elected {
        reason: ElectionReason,
        elapsed_ms: f64,
    },
    /// The controller-listener connection carrying a peer voter's accepted messages (none once
    /// it closed).
    PeerLink { voter: u64, connection: Option<u64> },
}

/// A new image, and what it means for the feed broker-only nodes fetch from.
pub(crate) enum Publish {
    /// The image after a committed entry, and that entry (its index and encoded records).
    Entry {
        image: Arc<MetadataImage>,
        index: u64,
        data: Bytes,
    },
    /// The image of a snapshot loaded in place of the state: the feed starts over at its offset.
    Snapshot(Arc<MetadataImage>),
    /// The image naming another active controller; no entry.
    ControllerId(Arc<MetadataImage>),
    /// The images published so far hold everything the quorum had committed when this voter
    /// read the leader's commit index ([`MetadataPublisher::caught_up`]).
    CaughtUp,
}

/// Where a controller's commands take effect: its durable state, its publisher, the feed and
/// what the node's other threads read.
pub(crate) struct Effects<D: Durable> {
    durable: D,
    publisher: Arc<MetadataPublisher>,
    feed: Arc<MetadataFeed>,
    state: Arc<QuorumState>,
}

impl<D: Durable> Effects<D> {
    pub(crate) fn new(
        durable: D,
        publisher: Arc<MetadataPublisher>,
        state: Arc<QuorumState>,
    ) -> Effects<D> {
        Effects {
            durable,
            publisher,
            feed: Arc::default(),
            state,
        }
    }

    /// Every applied entry, for broker-only nodes' fetches.
    pub(crate) fn feed(&self) -> Arc<MetadataFeed> {
        self.feed.clone()
    }

    pub(crate) fn publisher(&self) -> &Arc<MetadataPublisher> {
        &self.publisher
    }

    /// Carries out `commands` in order and returns the messages to send to peers (sent after
    /// every write of the list is durable). A write that fails stops it: what it has not carried
    /// out yet is not sent or published, and a committed pass not yet answered gets
    /// REQUEST_TIMED_OUT (its outcome, as far as its callers can know, is unknown); reports are
    /// still made (they say what the core saw, not what is durable). The error means this voter
    /// can no longer keep its state durable: the caller stops it.
    pub(crate) fn carry_out(
        &mut self,
        commands: Vec<Command>,
    ) -> Result<Vec<Message>, ControllerError> {
        let mut messages = Vec::new();
        let mut commands = commands.into_iter();
        while let Some(command) = commands.next() {
            match command {
                Command::Persist(writes) => {
                    if let Err(e) = persist(&mut self.durable, &writes) {
                        for command in commands {
                            match command {
                                Command::Answer(answer) => self.answer(answer.unknown()),
                                Command::Report(report) => self.report(report),
                                _ => {}
                            }
                        }
                        return Err(e.into());
                    }
                }
                Command::Send(sent) => messages.extend(sent),
                Command::Publish(publish) => self.publish(publish),
                Command::Answer(answer) => self.answer(answer),
                Command::Report(report) => self.report(report),
            }
        }
        Ok(messages)
    }

    fn report(&self, report: Report) {
        match report {
            Report::Leadership { active, leader } => self.state.set(active, leader),
            Report::Quorum(description) => {
                *self.state.status.lock().unwrap_or_else(|e| e.into_inner()) = description;
            }
            Report::Elected { reason, elapsed_ms } => {
                self.state.stats.elected(reason, 1, elapsed_ms);
            }
            Report::PeerLink { voter, connection } => self.state.link_peer(voter, connection),
        }
    }

    fn publish(&self, publish: Publish) {
        match publish {
            Publish::Entry { image, index, data } => {
                self.publisher.publish_shared(image);
                self.feed.append(index, data);
            }
            Publish::Snapshot(image) => {
                let offset = image.metadata_offset;
                self.publisher.publish_shared(image);
                self.feed.reset(offset);
            }
            Publish::ControllerId(image) => {
                self.publisher.publish_shared(image);
            }
            Publish::CaughtUp => self.publisher.caught_up(),
        }
    }

    /// Carries out what a pass owes its callers.
    fn answer(&self, answer: Answer) {
        match answer {
            Answer::Committed {
                image,
                heartbeats,
                finishes,
            } => {
                // The controller thread goes on while this node acts on the image.
                for f in heartbeats {
                    f(Ok(&image));
                }
                self.publisher.after_delivered(move || {
                    for f in finishes {
                        f(Ok(&image));
                    }
                });
            }
            Answer::Unchanged { image, finishes } => {
                for f in finishes {
                    f(Ok(&image));
                }
            }
            Answer::Failed { finishes, error } => {
                for f in finishes {
                    f(Err(&error));
                }
            }
            Answer::Refused { requests, error } => {
                for r in requests {
                    r.refuse(error.clone());
                }
            }
        }
    }
}

impl Answer {
    /// The answer when the writes before it could not be made durable: a committed pass's
    /// outcome is unknown to its callers.
    fn unknown(self) -> Answer {
        match self {
            Answer::Committed {
                heartbeats,
                finishes,
                ..
            } => Answer::Failed {
                finishes: heartbeats.into_iter().chain(finishes).collect(),
                error: ApiError::RequestTimedOut,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use tokio::sync::oneshot;

    use super::*;
    use crate::config::{BrokerConfig, RawConfig};
    use crate::controller::driver::{ControllerCore, Now};
    use crate::controller::request::Request;
    use crate::metadata::MetadataCache;
    use crate::quorum::durable::MemState;
    use crate::quorum::{QuorumConfig, QuorumEngine};

    /// A single voter's core at time 0, and where its commands take effect.
    fn single_voter() -> (
        ControllerCore,
        Effects<MemState>,
        Arc<MetadataCache>,
        Arc<QuorumState>,
    ) {
        let mut raw = RawConfig::default();
        raw.set("node.id", "1");
        let config = Arc::new(BrokerConfig::from_raw(raw).unwrap().config);
        let quorum = QuorumConfig {
            node_id: 1,
            voters: vec![1],
            election_ticks: 10,
            heartbeat_ticks: 2,
            fixed_election_ticks: Some(10),
        };
        let durable = MemState::new();
        let engine = QuorumEngine::open(&quorum, durable.clone().recover().unwrap());
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher = Arc::new(MetadataPublisher::new(
            cache.clone(),
            MetadataImage::empty(String::new(), 1),
        ));
        let core = ControllerCore::new(config, engine, publisher.image(), "commands".into(), None);
        let state = Arc::new(QuorumState::new());
        (
            core,
            Effects::new(durable, publisher, state.clone()),
            cache,
            state,
        )
    }

    /// Checks that every entry a command publishes was persisted by an earlier command, and
    /// that a committed pass is answered only after its entry's image is published. Returns the
    /// indexes published.
    fn check_order(commands: &[Command], persisted: &mut BTreeSet<u64>) -> Vec<u64> {
        let mut published = Vec::new();
        for command in commands {
            match command {
                Command::Persist(writes) => {
                    for write in writes {
                        if let Persist::Entries(entries) = write {
                            persisted.extend(entries.iter().map(|e| e.index));
                        }
                    }
                }
                Command::Publish(Publish::Entry { index, image, .. }) => {
                    assert!(
                        persisted.contains(index),
                        "entry {index} published unpersisted"
                    );
                    assert_eq!(image.metadata_offset, *index);
                    published.push(*index);
                }
                Command::Answer(Answer::Committed { image, .. }) => {
                    assert_eq!(published.last(), Some(&image.metadata_offset));
                }
                _ => {}
            }
        }
        published
    }

    #[test]
    fn the_core_returns_writes_before_the_images_and_answers_that_depend_on_them() {
        let (mut core, mut effects, cache, _) = single_voter();
        let mut persisted = BTreeSet::new();
        let mut now = Now::default();
        while !core.is_active() {
            now.mono_ms += 100;
            core.tick(now);
            let before = cache.image().metadata_offset;
            let commands = core.advance(now).unwrap();
            let published = check_order(&commands, &mut persisted);
            // The cache shows an image only once the commands are carried out.
            assert_eq!(cache.image().metadata_offset, before);
            effects.carry_out(commands).unwrap();
            if let Some(last) = published.last() {
                assert_eq!(cache.image().metadata_offset, *last);
            }
            assert!(now.mono_ms < 10_000, "a single voter never became active");
        }
        // The first active controller wrote the cluster id.
        assert_eq!(cache.image().cluster_id, "commands");

        let (reply, mut answer) = oneshot::channel();
        core.request(
            Request::AllocateProducerIds {
                broker_id: 1,
                reply,
            },
            now,
        );
        let commands = core.advance(now).unwrap();
        let published = check_order(&commands, &mut persisted);
        assert_eq!(published.len(), 1, "the pass's one entry");
        assert!(commands
            .iter()
            .any(|c| matches!(c, Command::Answer(Answer::Committed { .. }))));
        // Nothing is answered until the commands are carried out.
        assert!(answer.try_recv().is_err());
        effects.carry_out(commands).unwrap();
        let block = answer.try_recv().unwrap().unwrap();
        assert!(block.size > 0);
        assert_eq!(cache.image().metadata_offset, published[0]);
    }

    #[test]
    fn what_other_threads_read_is_written_only_by_carrying_out_the_reports() {
        use std::sync::atomic::Ordering;
        let reported = |state: &QuorumState| {
            (
                state.active.load(Ordering::Acquire),
                state.leader.load(Ordering::Acquire),
                state.status.lock().unwrap().leader_id,
            )
        };
        let (mut core, mut effects, _, state) = single_voter();
        let mut now = Now::default();
        let mut commands = Vec::new();
        while !core.is_active() {
            now.mono_ms += 100;
            core.tick(now);
            commands.extend(core.advance(now).unwrap());
            assert!(now.mono_ms < 10_000, "a single voter never became active");
        }
        commands.extend(core.advance(now).unwrap());
        // Active, and it says so in its commands; nothing the node's threads read has moved.
        assert!(commands.iter().any(|c| matches!(
            c,
            Command::Report(Report::Leadership {
                active: true,
                leader: 1
            })
        )));
        assert_eq!(reported(&state), (false, -1, 0));
        effects.carry_out(commands).unwrap();
        assert_eq!(reported(&state), (true, 1, 1));
    }
}
