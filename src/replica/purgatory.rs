//! The purgatory: requests parked until a condition on partitions holds or a deadline passes.
//!
//! Kafka keeps `DelayedProduce` (acks=all, waiting for the high watermark) and `DelayedFetch`
//! (long polling, waiting for `min_bytes`) and `DelayedDeleteRecords` (waiting for the low
//! watermark) in a timing wheel keyed by partition. Here an operation is an async wait: it
//! registers one `Notify` with every partition it watches, checks its condition, and sleeps until
//! woken or the deadline. Partitions wake watchers on append, high watermark and log start
//! offset changes. The number of parked operations is bounded; beyond the bound a
//! request is answered at once with what is available.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::partition::Partition;
use crate::limits::PURGATORY_OPERATIONS_MAX;

#[derive(Debug, Default)]
pub struct Purgatory {
    parked: AtomicUsize,
}

struct ParkedGuard<'a>(&'a AtomicUsize);

impl Drop for ParkedGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Purgatory {
    pub fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Evaluates `check` until it returns `Some`, re-checking whenever one of `partitions`
    /// changes, and gives up at `timeout` by returning `check`'s last `None` as `None`.
    /// `check` must be cheap and must not block.
    pub async fn wait_until<T, F, Fut>(
        &self,
        partitions: &[Arc<Partition>],
        timeout: Duration,
        mut check: F,
    ) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        if let Some(done) = check().await {
            return Some(done);
        }
        if timeout.is_zero() || partitions.is_empty() {
            return None;
        }
        if self.parked.fetch_add(1, Ordering::SeqCst) >= PURGATORY_OPERATIONS_MAX {
            self.parked.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("purgatory full; answering a delayed request immediately");
            return None;
        }
        let _guard = ParkedGuard(&self.parked);
        let deadline = Instant::now() + timeout;
        let notify = Arc::new(Notify::new());
        loop {
            // Register before checking, so a change between the check and the sleep is not
            // lost: `notify_one` stores a permit when nobody waits yet.
            for p in partitions {
                p.watch(&notify);
            }
            if let Some(done) = check().await {
                return Some(done);
            }
            tokio::select! {
                _ = notify.notified() => {}
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }
}
