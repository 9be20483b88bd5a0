//! The background remover of deleted logs. Deleting a log first renames its directory to
//! `<topic>-<partition>.<unique id>-delete` (one fsynced rename: the log is gone for every
//! later open, however far the removal got), then this thread removes the renamed directory,
//! as Kafka's `LogManager` removes `logsToBeDeleted` in the background. A crash before the
//! removal ends leaves a `-delete` directory, which the next open never loads and queues here.
//!
//! One thread (`log-deleter`) per [`crate::LogManager`], in submission order, so a big log's
//! removal does not hold up the metadata image that deleted it. The thread ends when the
//! manager is gone.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use crate::log::sync_dir;

pub struct Deleter {
    jobs: mpsc::Sender<PathBuf>,
}

/// Removes `dir` (a renamed `-delete` directory) and fsyncs its parent.
fn remove_renamed(dir: &std::path::Path) {
    let removed = match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    if let Err(e) = removed {
        tracing::warn!(dir = %dir.display(), error = %e,
            "could not remove a deleted log; the next open removes it");
        return;
    }
    if let Some(parent) = dir.parent() {
        if let Err(e) = sync_dir(parent) {
            tracing::warn!(dir = %parent.display(), error = %e, "could not fsync a log dir");
        }
    }
}

impl Deleter {
    /// Starts the `log-deleter` thread.
    pub fn start() -> std::io::Result<Arc<Deleter>> {
        let (jobs, queue) = mpsc::channel::<PathBuf>();
        std::thread::Builder::new()
            .name("log-deleter".into())
            .spawn(move || {
                for dir in queue {
                    remove_renamed(&dir);
                }
            })?;
        Ok(Arc::new(Deleter { jobs }))
    }

    /// A deleter whose removals wait in the returned queue and never run unless the caller
    /// runs them (a crash before the background removal, in tests).
    #[cfg(test)]
    pub(crate) fn manual() -> (Arc<Deleter>, mpsc::Receiver<PathBuf>) {
        let (jobs, queue) = mpsc::channel();
        (Arc::new(Deleter { jobs }), queue)
    }

    /// Queues the removal of `dir`; without the thread (it could not be spawned or has gone)
    /// it runs here.
    pub(crate) fn submit(&self, dir: PathBuf) {
        if let Err(mpsc::SendError(dir)) = self.jobs.send(dir) {
            remove_renamed(&dir);
        }
    }
}
