//! The background flusher. A roll makes the segment it closes durable off the appending
//! thread, as Kafka schedules `flushUptoOffsetExclusive` and the producer snapshot's flush on
//! its background pool: the append that rolled returns without waiting for the disk, and the
//! log's recovery point moves past the rolled segment only once its data, its indexes, the
//! log's directory and the snapshot written at the roll are fsynced.
//!
//! One thread (`log-flusher`) serves every log of a [`crate::LogManager`], in submission
//! order. It holds logs weakly: a log dropped before its turn is skipped. The thread ends when
//! the manager and every log holding the flusher are gone. A log with no flusher (opened on
//! its own) does the same work inline in the roll.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use crate::log::Log;

/// What a roll leaves to the background: everything below `upto` of `log`, and the snapshot.
pub(crate) struct RollFlush {
    pub(crate) log: Weak<Log>,
    /// The new active segment's base offset: the recovery point once the job is done.
    pub(crate) upto: i64,
    /// The producer snapshot written, unsynced, at the roll.
    pub(crate) snapshot: Option<PathBuf>,
}

impl RollFlush {
    fn run(self) {
        if let Some(log) = self.log.upgrade() {
            if let Err(e) = log.flush_rolled(self.upto, self.snapshot.as_deref()) {
                tracing::warn!(dir = %log.dir().display(), upto = self.upto, error = %e,
                    "background flush of a rolled segment failed");
            }
        }
    }
}

pub struct Flusher {
    jobs: mpsc::Sender<RollFlush>,
}

impl Flusher {
    /// Starts the `log-flusher` thread.
    pub fn start() -> std::io::Result<Arc<Flusher>> {
        let (jobs, queue) = mpsc::channel::<RollFlush>();
        std::thread::Builder::new()
            .name("log-flusher".into())
            .spawn(move || {
                for job in queue {
                    job.run();
                }
            })?;
        Ok(Arc::new(Flusher { jobs }))
    }

    /// A flusher whose jobs wait in the returned queue until [`run_queued`] runs them.
    #[cfg(test)]
    pub(crate) fn manual() -> (Arc<Flusher>, mpsc::Receiver<RollFlush>) {
        let (jobs, queue) = mpsc::channel();
        (Arc::new(Flusher { jobs }), queue)
    }

    /// Queues `job`; without the thread (it could not be spawned or has gone) it runs here.
    pub(crate) fn submit(&self, job: RollFlush) {
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            job.run();
        }
    }
}

/// Runs every job queued on a [`Flusher::manual`] flusher; returns how many ran.
#[cfg(test)]
pub(crate) fn run_queued(queue: &mpsc::Receiver<RollFlush>) -> usize {
    let mut n = 0;
    while let Ok(job) = queue.try_recv() {
        job.run();
        n += 1;
    }
    n
}
