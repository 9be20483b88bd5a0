//! The Raft library's view of a voter's log: `raft::Storage` over memory that mirrors what
//! [`super::durable`] makes durable. The engine updates it as it hands out the matching
//! [`super::durable::Persist`] writes, and its caller makes those durable before it sends or
//! applies anything of the same poll, so nothing leaves the voter that a crash could lose.
//!
//! Semantics follow the library's own `MemStorage`; the difference is that [`RaftStore`] keeps
//! the latest snapshot *with its data* (the encoded metadata image), which the leader sends to
//! a voter that is too far behind.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

#[derive(Default)]
struct Core {
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (metadata index 0 = none).
    snapshot: Snapshot,
    /// Entries after the snapshot; `entries[i].index == snapshot index + 1 + i`.
    entries: Vec<Entry>,
}

impl Core {
    fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    fn first_index(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last_index(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot_index(), |e| e.index)
    }
}

/// Cheap to clone: the engine keeps one handle, the library another.
#[derive(Clone, Default)]
pub struct RaftStore {
    core: Arc<RwLock<Core>>,
}

impl RaftStore {
    /// A store holding what recovery found, with `voters` as the configuration when no
    /// snapshot says otherwise (every voter starts from the same list).
    pub fn new(
        hard_state: HardState,
        snapshot: Snapshot,
        entries: Vec<Entry>,
        voters: Vec<u64>,
    ) -> RaftStore {
        let conf_state = if snapshot.get_metadata().index > 0 {
            snapshot.get_metadata().get_conf_state().clone()
        } else {
            let mut cs = ConfState::default();
            cs.voters = voters;
            cs
        };
        RaftStore {
            core: Arc::new(RwLock::new(Core {
                hard_state,
                conf_state,
                snapshot,
                entries,
            })),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Core> {
        self.core.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Core> {
        self.core.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn append(&self, entries: &[Entry]) {
        let Some(first) = entries.first() else {
            return;
        };
        let mut core = self.write();
        assert!(
            first.index >= core.first_index(),
            "append of entry {} below the snapshot at {}",
            first.index,
            core.snapshot_index()
        );
        assert!(
            first.index <= core.last_index() + 1,
            "gap before entry {} (last {})",
            first.index,
            core.last_index()
        );
        let keep = (first.index - core.first_index()) as usize;
        core.entries.truncate(keep);
        core.entries.extend_from_slice(entries);
    }

    pub fn set_hard_state(&self, hard_state: HardState) {
        self.write().hard_state = hard_state;
    }

    pub fn set_commit(&self, commit: u64) {
        self.write().hard_state.commit = commit;
    }

    pub fn hard_state(&self) -> HardState {
        self.read().hard_state.clone()
    }

    /// Installs a snapshot received from the leader; the log restarts after it (as the
    /// library's `MemStorage` does).
    pub fn apply_snapshot(&self, snapshot: Snapshot) {
        let mut core = self.write();
        let meta = snapshot.get_metadata();
        core.entries.clear();
        core.conf_state = meta.get_conf_state().clone();
        core.hard_state.term = core.hard_state.term.max(meta.term);
        core.hard_state.commit = core.hard_state.commit.max(meta.index);
        core.snapshot = snapshot;
    }

    /// Replaces the latest snapshot with one the voter took of its own applied state.
    pub fn compact_to(&self, snapshot: Snapshot) {
        let mut core = self.write();
        let index = snapshot.get_metadata().index;
        assert!(index <= core.last_index(), "snapshot past the log");
        core.entries.retain(|e| e.index > index);
        core.snapshot = snapshot;
    }

    pub fn term_of(&self, index: u64) -> Option<u64> {
        raft::Storage::term(self, index).ok()
    }

    pub fn last_index(&self) -> u64 {
        self.read().last_index()
    }

    pub fn entry_count(&self) -> usize {
        self.read().entries.len()
    }

    pub fn snapshot_metadata(&self) -> (u64, u64) {
        let core = self.read();
        let m = core.snapshot.get_metadata();
        (m.index, m.term)
    }

    pub fn voters(&self) -> Vec<u64> {
        self.read().conf_state.voters.clone()
    }
}

impl raft::Storage for RaftStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let core = self.read();
        Ok(RaftState::new(
            core.hard_state.clone(),
            core.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let core = self.read();
        if low < core.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        assert!(
            high <= core.last_index() + 1,
            "entries up to {high} asked, last is {}",
            core.last_index()
        );
        let offset = core.first_index();
        let mut entries = core.entries[(low - offset) as usize..(high - offset) as usize].to_vec();
        if let Some(max) = max_size.into() {
            // At least one entry, then as many as fit (the library's `limit_size`).
            let mut size = 0u64;
            let keep = entries
                .iter()
                .take_while(|e| {
                    size += protobuf::Message::compute_size(*e) as u64;
                    size <= max
                })
                .count()
                .max(1);
            entries.truncate(keep);
        }
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let core = self.read();
        let meta = core.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < core.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > core.last_index() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(core.entries[(idx - core.first_index()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.read().first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.read().last_index())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let core = self.read();
        if core.snapshot_index() < request_index || core.snapshot_index() == 0 {
            // The engine takes snapshots as it applies; the library asks again later.
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(core.snapshot.clone())
    }
}
