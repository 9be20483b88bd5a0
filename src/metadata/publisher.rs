//! The metadata publisher: committed records in, a new image out to everyone who reads it.
//!
//! Every node has one. It replays committed batches onto its image, swaps the image into the
//! [`MetadataCache`] (handlers read it from there) and hands `(previous, next)` to each
//! [`ImageListener`] (the replica manager, the group coordinator), in commit order. On a single
//! node the controller task publishes what it has just made durable; in a cluster the batches
//! will come from the replicated metadata log.
//!
//! Listeners run on the publishing thread and may do blocking I/O (opening or deleting partition
//! logs), so the controller calls [`MetadataPublisher::publish`] from a blocking thread. The
//! listener list and the image are under one lock, so a listener added while an image is being
//! published sees that image either in its first call or in the next one, never neither.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{ImageListener, MetadataCache, MetadataImage, MetadataRecord};

pub struct MetadataPublisher {
    cache: Arc<MetadataCache>,
    state: Mutex<PublisherState>,
}

struct PublisherState {
    image: Arc<MetadataImage>,
    listeners: Vec<Arc<dyn ImageListener>>,
}

impl std::fmt::Debug for MetadataPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataPublisher")
            .field("records_applied", &self.image().records_applied)
            .finish()
    }
}

impl MetadataPublisher {
    /// Starts from `image` (the replay of the log at startup), published at once.
    pub fn new(cache: Arc<MetadataCache>, image: MetadataImage) -> MetadataPublisher {
        let image = Arc::new(image);
        cache.publish(image.clone());
        MetadataPublisher {
            cache,
            state: Mutex::new(PublisherState {
                image,
                listeners: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PublisherState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.lock().image.clone()
    }

    /// Adds a listener; it is first called with the empty image → the current image.
    pub fn add_listener(&self, listener: Arc<dyn ImageListener>) {
        let mut state = self.lock();
        listener.on_image(&MetadataImage::default(), &state.image);
        state.listeners.push(listener);
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
        let mut state = self.lock();
        let previous = std::mem::replace(&mut state.image, Arc::new(next));
        let next = state.image.clone();
        self.cache.publish(next.clone());
        for listener in &state.listeners {
            listener.on_image(&previous, &next);
        }
        next
    }
}
