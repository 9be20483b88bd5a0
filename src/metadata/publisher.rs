//! The metadata publisher: committed records in, a new image out to everyone who reads it.
//!
//! Every node has one. It replays committed batches onto its image and delivers each
//! `(previous, next)` pair, in commit order: it swaps `next` into the [`MetadataCache`] (handlers
//! read it from there), hands the pair to each [`ImageListener`] (the replica manager, the group
//! coordinator, the broker lifecycle's watch), then marks `next` applied
//! ([`MetadataCache::applied_offset`], the offset a broker's heartbeat reports).
//!
//! Listeners may do blocking I/O: opening, recovering or deleting partition logs takes seconds
//! for a thousand partitions. A node's publisher therefore delivers on its own thread
//! ([`MetadataPublisher::threaded`], Kafka's metadata loader thread), so the controller thread
//! that publishes keeps answering heartbeats and Raft messages while logs are created. A
//! publisher made with [`MetadataPublisher::new`] delivers on the publishing thread instead
//! (simulations and unit tests, which need every step to finish before the next).
//!
//! [`MetadataPublisher::image`] is the latest image published, which the controller decides on;
//! the cache may be a few images behind it while the delivery thread works.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::{ImageListener, MetadataCache, MetadataImage, MetadataRecord};

pub struct MetadataPublisher {
    state: Mutex<PublisherState>,
    /// The delivery thread, joined by [`MetadataPublisher::close`].
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct PublisherState {
    image: Arc<MetadataImage>,
    sink: Sink,
}

/// Where deliveries go.
enum Sink {
    /// Run at once, on the publishing thread.
    Inline(Deliveries),
    /// Sent to the delivery thread, which runs them in order.
    Thread(mpsc::Sender<Job>),
    /// After [`MetadataPublisher::close`]: dropped.
    Closed,
}

/// What deliveries work on: owned by whoever runs them.
struct Deliveries {
    cache: Arc<MetadataCache>,
    /// The last image delivered.
    delivered: Arc<MetadataImage>,
    listeners: Vec<Arc<dyn ImageListener>>,
    /// Listeners waiting for this node to catch up with the quorum.
    held: Option<Held>,
    /// The quorum said this node has caught up ([`MetadataPublisher::caught_up`]).
    quorum_caught_up: bool,
}

/// Listeners that see no image until one passes `caught_up`, or until the quorum says this node
/// has caught up ([`MetadataPublisher::caught_up`]) (Kafka's `MetadataLoader`, which
/// publishes nothing before it has reached the quorum's high watermark): a restarted node
/// replays its log only as far as it last knew to be committed, and an image from there may be
/// long superseded. The first image that passes reaches them as one change from the empty
/// image; every later one follows in order. The cache's applied offset (what a broker's
/// heartbeat reports as caught up) stays where it was until then.
struct Held {
    listeners: Vec<Arc<dyn ImageListener>>,
    caught_up: Box<dyn Fn(&MetadataImage) -> bool + Send>,
}

impl Deliveries {
    /// Hands the held listeners the last image delivered, if it passes; true once none wait.
    fn release_if_caught_up(&mut self) -> bool {
        let Some(held) = &self.held else {
            return true;
        };
        if !self.quorum_caught_up && !(held.caught_up)(&self.delivered) {
            return false;
        }
        let held = self.held.take().expect("checked above");
        let empty = MetadataImage::default();
        for listener in held.listeners {
            listener.on_image(&empty, &self.delivered);
            self.listeners.push(listener);
        }
        true
    }
}

type Job = Box<dyn FnOnce(&mut Deliveries) + Send>;

impl std::fmt::Debug for MetadataPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataPublisher")
            .field("records_applied", &self.image().records_applied)
            .finish()
    }
}

impl MetadataPublisher {
    /// Starts from `image` (the replay of the log at startup), published at once; deliveries
    /// run on the publishing thread.
    pub fn new(cache: Arc<MetadataCache>, image: MetadataImage) -> MetadataPublisher {
        let (image, deliveries) = Self::first(cache, image);
        MetadataPublisher {
            state: Mutex::new(PublisherState {
                image,
                sink: Sink::Inline(deliveries),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Like [`MetadataPublisher::new`], but deliveries run on a thread of their own, inside the
    /// current tokio runtime if there is one (listeners start fetcher tasks).
    pub fn threaded(
        cache: Arc<MetadataCache>,
        image: MetadataImage,
    ) -> std::io::Result<MetadataPublisher> {
        let (image, mut deliveries) = Self::first(cache, image);
        let (tx, rx) = mpsc::channel::<Job>();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let thread = std::thread::Builder::new()
            .name("metadata-publisher".into())
            .spawn(move || {
                let _entered = runtime.as_ref().map(|r| r.enter());
                while let Ok(job) = rx.recv() {
                    job(&mut deliveries);
                }
            })?;
        Ok(MetadataPublisher {
            state: Mutex::new(PublisherState {
                image,
                sink: Sink::Thread(tx),
            }),
            thread: Mutex::new(Some(thread)),
        })
    }

    fn first(cache: Arc<MetadataCache>, image: MetadataImage) -> (Arc<MetadataImage>, Deliveries) {
        let image = Arc::new(image);
        cache.publish(image.clone());
        cache.mark_applied(image.metadata_offset);
        let deliveries = Deliveries {
            cache,
            delivered: image.clone(),
            listeners: Vec::new(),
            held: None,
            quorum_caught_up: false,
        };
        (image, deliveries)
    }

    fn lock(&self) -> MutexGuard<'_, PublisherState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The latest image published (perhaps not yet delivered).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.lock().image.clone()
    }

    /// Runs `job` after every delivery queued before it. Returns false if the publisher is
    /// closed (the job is dropped).
    fn submit(state: &mut PublisherState, job: Job) -> bool {
        match &mut state.sink {
            Sink::Inline(deliveries) => {
                job(deliveries);
                true
            }
            Sink::Thread(tx) => tx.send(job).is_ok(),
            Sink::Closed => false,
        }
    }

    /// Adds a listener; it is first called with the empty image → the last image delivered,
    /// then with every image after it. Returns once that first call has returned.
    pub fn add_listener(&self, listener: Arc<dyn ImageListener>) {
        let (done_tx, done_rx) = mpsc::channel();
        let job: Job = Box::new(move |d: &mut Deliveries| {
            listener.on_image(&MetadataImage::default(), &d.delivered);
            d.listeners.push(listener);
            let _ = done_tx.send(());
        });
        let queued = Self::submit(&mut self.lock(), job);
        if queued {
            let _ = done_rx.recv();
        }
    }

    /// Adds listeners that see nothing until an image delivered passes `caught_up` (see
    /// [`Held`]); then each is called with the empty image → that image, and with every image
    /// after it. Returns at once. Call at most once.
    pub fn add_listeners_once_caught_up(
        &self,
        listeners: Vec<Arc<dyn ImageListener>>,
        caught_up: impl Fn(&MetadataImage) -> bool + Send + 'static,
    ) {
        let job: Job = Box::new(move |d: &mut Deliveries| {
            assert!(d.held.is_none(), "listeners are held once");
            d.held = Some(Held {
                listeners,
                caught_up: Box::new(caught_up),
            });
            if d.release_if_caught_up() {
                d.cache.mark_applied(d.delivered.metadata_offset);
            }
        });
        Self::submit(&mut self.lock(), job);
    }

    /// The quorum says this node has caught up: the images published so far hold everything
    /// committed before some moment after the node started (a voter's read of the leader's
    /// commit index, applied). Held listeners get the last of them, once delivered, whether or
    /// not it passes their `caught_up`.
    pub fn caught_up(&self) {
        let job: Job = Box::new(move |d: &mut Deliveries| {
            d.quorum_caught_up = true;
            if d.held.is_some() && d.release_if_caught_up() {
                d.cache.mark_applied(d.delivered.metadata_offset);
            }
        });
        Self::submit(&mut self.lock(), job);
    }

    /// Runs `f` once every image published so far has been delivered (at once if deliveries
    /// are inline). The controller answers a committed request from here, so what it answered
    /// is in this node's cache, and in its replica manager, when the answer is read.
    pub fn after_delivered(&self, f: impl FnOnce() + Send + 'static) {
        Self::submit(&mut self.lock(), Box::new(move |_: &mut Deliveries| f()));
    }

    /// Replays one committed batch, the one at metadata offset `offset`, and publishes the
    /// result. Returns the new image.
    pub fn publish(&self, offset: u64, batch: &[MetadataRecord]) -> Arc<MetadataImage> {
        let mut next = (*self.image()).clone();
        next.apply_batch(offset, batch);
        self.publish_image(next)
    }

    /// Publishes a whole new image (a snapshot loaded in place of the current state).
    pub fn publish_image(&self, next: MetadataImage) -> Arc<MetadataImage> {
        self.publish_shared(Arc::new(next))
    }

    /// Publishes an image already shared (the controller's, which it goes on deciding on).
    pub fn publish_shared(&self, next: Arc<MetadataImage>) -> Arc<MetadataImage> {
        let mut state = self.lock();
        let previous = std::mem::replace(&mut state.image, next.clone());
        let delivered = next.clone();
        Self::submit(
            &mut state,
            Box::new(move |d: &mut Deliveries| {
                d.cache.publish(delivered.clone());
                for listener in &d.listeners {
                    listener.on_image(&previous, &delivered);
                }
                d.delivered = delivered;
                if d.release_if_caught_up() {
                    d.cache.mark_applied(d.delivered.metadata_offset);
                }
            }),
        );
        next
    }

    /// Stops delivering: what was queued is delivered first, then the delivery thread ends and
    /// is joined. Later publications change [`MetadataPublisher::image`] only. Blocks.
    pub fn close(&self) {
        let sink = std::mem::replace(&mut self.lock().sink, Sink::Closed);
        drop(sink);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Records the offsets it is given, and holds each delivery until released.
    struct Slow {
        seen: Mutex<Vec<u64>>,
        gate: Mutex<mpsc::Receiver<()>>,
    }

    impl ImageListener for Slow {
        fn on_image(&self, _previous: &MetadataImage, next: &MetadataImage) {
            if next.metadata_offset > 0 {
                let _ = self
                    .gate
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(10));
            }
            self.seen.lock().unwrap().push(next.metadata_offset);
        }
    }

    fn image_at(offset: u64) -> MetadataImage {
        let mut image = MetadataImage::empty("c".into(), 1);
        image.metadata_offset = offset;
        image
    }

    #[test]
    fn a_slow_listener_does_not_hold_up_the_publisher_and_sees_every_image_in_order() {
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher = MetadataPublisher::threaded(cache.clone(), image_at(0)).unwrap();
        let (gate_tx, gate_rx) = mpsc::channel();
        let slow = Arc::new(Slow {
            seen: Mutex::new(Vec::new()),
            gate: Mutex::new(gate_rx),
        });
        publisher.add_listener(slow.clone());
        assert_eq!(*slow.seen.lock().unwrap(), vec![0]);
        // Three publications return while the listener is still held on the first.
        for offset in 1..=3 {
            publisher.publish_image(image_at(offset));
        }
        assert_eq!(publisher.image().metadata_offset, 3);
        assert_eq!(cache.applied_offset(), 0);
        let (answered_tx, answered_rx) = mpsc::channel();
        publisher.after_delivered(move || {
            let _ = answered_tx.send(());
        });
        assert!(answered_rx.try_recv().is_err(), "answered before delivery");
        for _ in 1..=3 {
            gate_tx.send(()).unwrap();
        }
        answered_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(*slow.seen.lock().unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(cache.applied_offset(), 3);
        assert_eq!(cache.image().metadata_offset, 3);
        publisher.close();
        publisher.publish_image(image_at(4));
        assert_eq!(
            cache.applied_offset(),
            3,
            "nothing is delivered once closed"
        );
    }

    #[test]
    fn held_listeners_see_nothing_before_catching_up_then_one_change_from_empty() {
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher = MetadataPublisher::new(cache.clone(), image_at(3));
        let (gate_tx, gate_rx) = mpsc::channel();
        drop(gate_tx);
        let held = Arc::new(Slow {
            seen: Mutex::new(Vec::new()),
            gate: Mutex::new(gate_rx),
        });
        publisher.add_listeners_once_caught_up(vec![held.clone()], |i| i.metadata_offset >= 6);
        publisher.publish_image(image_at(4));
        publisher.publish_image(image_at(5));
        assert!(
            held.seen.lock().unwrap().is_empty(),
            "no image before catching up"
        );
        assert_eq!(cache.applied_offset(), 3, "nothing applied while held");
        assert_eq!(cache.image().metadata_offset, 5, "the cache still follows");
        publisher.publish_image(image_at(6));
        publisher.publish_image(image_at(7));
        assert_eq!(*held.seen.lock().unwrap(), vec![6, 7]);
        assert_eq!(cache.applied_offset(), 7);
    }

    #[test]
    fn a_listener_added_late_starts_from_the_last_delivered_image() {
        let cache = Arc::new(MetadataCache::new(MetadataImage::default()));
        let publisher = MetadataPublisher::new(cache.clone(), image_at(5));
        publisher.publish_image(image_at(6));
        let (_gate_tx, gate_rx) = mpsc::channel();
        let slow = Arc::new(Slow {
            seen: Mutex::new(Vec::new()),
            gate: Mutex::new(gate_rx),
        });
        drop(_gate_tx);
        publisher.add_listener(slow.clone());
        assert_eq!(*slow.seen.lock().unwrap(), vec![6]);
        assert_eq!(cache.applied_offset(), 6);
    }
}
