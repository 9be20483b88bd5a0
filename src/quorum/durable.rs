//! What a voter must keep across crashes: its Raft log, its hard state (term, vote, commit) and
//! its latest snapshot, behind one trait with two backends — files ([`DiskState`]) and memory
//! that a simulated crash does not clear ([`MemState`]).
//!
//! Files, in the quorum directory (`<first log dir>/kafkaiq-metadata/`):
//! - `raft.log`: one CRC32C frame per entry (`frames.rs`): index u64, term u64, entry type u8,
//!   data (an encoded batch of metadata records; empty for a leader's no-op). Appends are
//!   fsynced; an append that overwrites a conflicting suffix cuts the file back first.
//! - `quorum-state`: one frame: term u64, vote u64, commit u64. Written to a temp file, fsynced
//!   and renamed. Kafka keeps a file of the same name and purpose.
//! - `snapshot`: one frame: index u64, term u64, voter count u16, voters u64…, data. Written the
//!   same way; afterwards `raft.log` is rewritten without the entries the snapshot covers.
//!
//! Every write that returns `Ok` is durable. After an I/O error nothing more is written
//! (the voter stops: a log with a hole in it must not keep voting).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};

use super::frames::{self, ScanError};

const RAFT_LOG_FILE: &str = "raft.log";
const QUORUM_STATE_FILE: &str = "quorum-state";
const SNAPSHOT_FILE: &str = "snapshot";

#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Scan { path: PathBuf, source: ScanError },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("quorum state is offline after an earlier write failed: {0}")]
    Offline(String),
}

/// What was durable when the voter last stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovered {
    pub hard_state: HardState,
    /// The latest snapshot (index 0 = none).
    pub snapshot: Snapshot,
    /// Entries after the snapshot, in order, without gaps.
    pub entries: Vec<Entry>,
}

/// The durable side of a voter. Each call returns only once its effect would survive a crash.
pub trait Durable: Send {
    fn recover(&mut self) -> Result<Recovered, DurableError>;
    /// Appends entries; an entry whose index is already present replaces it and everything
    /// after it (a new leader overwrote an uncommitted suffix).
    fn append(&mut self, entries: &[Entry]) -> Result<(), DurableError>;
    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), DurableError>;
    /// Stores `snapshot` and drops the entries it covers — and every later one too unless
    /// `keep_later` (a snapshot this voter took of its own log keeps its tail; one received from
    /// the leader replaces the whole log).
    fn save_snapshot(&mut self, snapshot: &Snapshot, keep_later: bool) -> Result<(), DurableError>;
}

/// One durable write a voter's engine asks for (see `QuorumEngine::poll` and `compact`): the
/// engine decides what must be durable, its caller makes it so.
#[derive(Debug, Clone, PartialEq)]
pub enum Persist {
    /// See [`Durable::append`].
    Entries(Vec<Entry>),
    HardState(HardState),
    /// See [`Durable::save_snapshot`].
    Snapshot {
        snapshot: Snapshot,
        keep_later: bool,
    },
}

/// Makes `writes` durable, in order. An error means the voter's state can no longer be kept
/// durable: it must stop.
pub fn persist<D: Durable + ?Sized>(
    durable: &mut D,
    writes: &[Persist],
) -> Result<(), DurableError> {
    for write in writes {
        match write {
            Persist::Entries(entries) => durable.append(entries)?,
            Persist::HardState(hard_state) => durable.set_hard_state(hard_state)?,
            Persist::Snapshot {
                snapshot,
                keep_later,
            } => durable.save_snapshot(snapshot, *keep_later)?,
        }
    }
    Ok(())
}

fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(&e.index.to_be_bytes());
    out.extend_from_slice(&e.term.to_be_bytes());
    out.push(e.get_entry_type() as u8);
    out.extend_from_slice(&e.data);
}

fn decode_entry(payload: &[u8]) -> Result<Entry, String> {
    if payload.len() < 17 {
        return Err("entry shorter than its header".into());
    }
    let mut e = Entry::default();
    e.index = u64::from_be_bytes(payload[0..8].try_into().expect("8 bytes"));
    e.term = u64::from_be_bytes(payload[8..16].try_into().expect("8 bytes"));
    e.set_entry_type(match payload[16] {
        0 => EntryType::EntryNormal,
        1 => EntryType::EntryConfChange,
        2 => EntryType::EntryConfChangeV2,
        t => return Err(format!("unknown entry type {t}")),
    });
    e.data = payload[17..].to_vec().into();
    Ok(e)
}

fn encode_hard_state(hs: &HardState) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&hs.term.to_be_bytes());
    out.extend_from_slice(&hs.vote.to_be_bytes());
    out.extend_from_slice(&hs.commit.to_be_bytes());
    out
}

fn decode_hard_state(payload: &[u8]) -> Result<HardState, String> {
    if payload.len() != 24 {
        return Err(format!("quorum state of {} bytes, not 24", payload.len()));
    }
    let word = |i: usize| u64::from_be_bytes(payload[i..i + 8].try_into().expect("8 bytes"));
    let mut hs = HardState::default();
    hs.term = word(0);
    hs.vote = word(8);
    hs.commit = word(16);
    Ok(hs)
}

fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    let meta = s.get_metadata();
    let voters = &meta.get_conf_state().voters;
    let mut out = Vec::with_capacity(18 + voters.len() * 8 + s.data.len());
    out.extend_from_slice(&meta.index.to_be_bytes());
    out.extend_from_slice(&meta.term.to_be_bytes());
    out.extend_from_slice(&(voters.len() as u16).to_be_bytes());
    for v in voters {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out.extend_from_slice(&s.data);
    out
}

fn decode_snapshot(payload: &[u8]) -> Result<Snapshot, String> {
    if payload.len() < 18 {
        return Err("snapshot shorter than its header".into());
    }
    let word = |i: usize| u64::from_be_bytes(payload[i..i + 8].try_into().expect("8 bytes"));
    let count = u16::from_be_bytes(payload[16..18].try_into().expect("2 bytes")) as usize;
    let data_start = 18 + count * 8;
    if payload.len() < data_start {
        return Err("snapshot voter list cut short".into());
    }
    let mut s = Snapshot::default();
    let meta = s.mut_metadata();
    meta.index = word(0);
    meta.term = word(8);
    let mut cs = ConfState::default();
    cs.voters = (0..count).map(|i| word(18 + i * 8)).collect();
    meta.set_conf_state(cs);
    s.data = payload[data_start..].to_vec().into();
    Ok(s)
}

/// Writes `payload` as the only frame of `path`: temp file, fsync, rename, fsync of the dir.
fn write_single_frame(dir: &Path, name: &str, payload: &[u8]) -> std::io::Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut bytes = Vec::with_capacity(payload.len() + frames::FRAME_HEADER_BYTES);
    frames::write_frame(payload, &mut bytes);
    let mut f = File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    File::open(dir)?.sync_all()
}

/// Reads a file written by [`write_single_frame`]; `None` if it does not exist.
fn read_single_frame(path: &Path) -> Result<Option<Vec<u8>>, DurableError> {
    const SINGLE_FRAME_BYTES_MAX: usize = crate::limits::METADATA_SNAPSHOT_BYTES_MAX;
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DurableError::Io {
                path: path.to_owned(),
                source,
            })
        }
    };
    // Renamed into place whole after an fsync: a bad frame here is corruption, not a torn write.
    match frames::frame_at_most(&bytes, 0, SINGLE_FRAME_BYTES_MAX) {
        frames::Frame::Valid { payload, end } if end == bytes.len() => Ok(Some(payload.to_vec())),
        frames::Frame::Valid { .. } => Err(DurableError::Invalid {
            path: path.to_owned(),
            reason: "bytes after its one frame".into(),
        }),
        frames::Frame::Bad(reason) => Err(DurableError::Invalid {
            path: path.to_owned(),
            reason: reason.into(),
        }),
    }
}

/// Checks an entry's data at recovery: an entry whose data the caller cannot decode is
/// corruption, reported with its byte offset instead of being replayed.
pub type EntryCheck = fn(&[u8]) -> Result<(), String>;

/// The files of one voter.
pub struct DiskState {
    dir: PathBuf,
    check: EntryCheck,
    log: Option<File>,
    /// Byte offset in `raft.log` where each entry after the snapshot starts, by position.
    positions: Vec<(u64, u64)>,
    log_len: u64,
    offline: Option<String>,
    /// The (term, vote) `quorum-state` holds.
    durable_term_vote: Option<(u64, u64)>,
}

impl DiskState {
    pub fn open(dir: &Path, check: EntryCheck) -> Result<DiskState, DurableError> {
        std::fs::create_dir_all(dir).map_err(|source| DurableError::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(DiskState {
            dir: dir.to_owned(),
            check,
            log: None,
            positions: Vec::new(),
            log_len: 0,
            offline: None,
            durable_term_vote: None,
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(RAFT_LOG_FILE)
    }

    fn io(&mut self, path: PathBuf, source: std::io::Error) -> DurableError {
        self.offline = Some(format!("{}: {source}", path.display()));
        DurableError::Io { path, source }
    }

    fn check_online(&self) -> Result<(), DurableError> {
        match &self.offline {
            Some(cause) => Err(DurableError::Offline(cause.clone())),
            None => Ok(()),
        }
    }

    fn log_file(&mut self) -> Result<&mut File, DurableError> {
        if self.log.is_none() {
            let path = self.log_path();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|source| DurableError::Io { path, source })?;
            self.log = Some(file);
        }
        Ok(self.log.as_mut().expect("opened above"))
    }

    /// Cuts `raft.log` back to `len` bytes and fsyncs.
    fn cut_log(&mut self, len: u64) -> Result<(), DurableError> {
        let path = self.log_path();
        let result = self
            .log_file()?
            .set_len(len)
            .and_then(|()| self.log.as_mut().expect("open").sync_data());
        result.map_err(|e| self.io(path, e))?;
        self.log_len = len;
        self.positions.retain(|&(_, pos)| pos < len);
        Ok(())
    }
}

impl DiskState {
    fn append_inner(&mut self, entries: &[Entry]) -> Result<(), DurableError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if let Some(&(_, pos)) = self.positions.iter().find(|(i, _)| *i >= first.index) {
            self.cut_log(pos)?;
        }
        let mut bytes = Vec::new();
        let mut payload = Vec::new();
        let mut new_positions = Vec::with_capacity(entries.len());
        for e in entries {
            payload.clear();
            encode_entry(e, &mut payload);
            new_positions.push((e.index, self.log_len + bytes.len() as u64));
            frames::write_frame(&payload, &mut bytes);
        }
        let path = self.log_path();
        self.log_file().and_then(|f| {
            use std::io::{Seek, SeekFrom};
            f.seek(SeekFrom::End(0))
                .and_then(|_| f.write_all(&bytes))
                .and_then(|()| f.sync_data())
                .map_err(|source| DurableError::Io {
                    path: path.clone(),
                    source,
                })
        })?;
        self.log_len += bytes.len() as u64;
        self.positions.extend(new_positions);
        Ok(())
    }
}

impl Durable for DiskState {
    fn recover(&mut self) -> Result<Recovered, DurableError> {
        let hard_state = match read_single_frame(&self.dir.join(QUORUM_STATE_FILE))? {
            Some(p) => decode_hard_state(&p).map_err(|reason| DurableError::Invalid {
                path: self.dir.join(QUORUM_STATE_FILE),
                reason,
            })?,
            None => HardState::default(),
        };
        self.durable_term_vote = Some((hard_state.term, hard_state.vote));
        let snapshot = match read_single_frame(&self.dir.join(SNAPSHOT_FILE))? {
            Some(p) => decode_snapshot(&p).map_err(|reason| DurableError::Invalid {
                path: self.dir.join(SNAPSHOT_FILE),
                reason,
            })?,
            None => Snapshot::default(),
        };
        let path = self.log_path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(DurableError::Io { path, source }),
        };
        let snapshot_index = snapshot.get_metadata().index;
        let check = self.check;
        let mut entries: Vec<Entry> = Vec::new();
        let mut positions = Vec::new();
        let valid_len = frames::scan(
            &bytes,
            |offset, payload| {
                let e = decode_entry(payload)?;
                if !e.data.is_empty() {
                    check(&e.data).map_err(|reason| format!("entry {}: {reason}", e.index))?;
                }
                if e.index <= snapshot_index {
                    // Left over from before a snapshot whose log rewrite did not happen.
                    return Ok(());
                }
                let expected = entries.last().map_or(snapshot_index + 1, |l| l.index + 1);
                if e.index > expected {
                    return Err(format!("entry {} where {expected} was expected", e.index));
                }
                // A smaller index replaces a suffix (written before the cut was made durable).
                while entries.last().is_some_and(|l| l.index >= e.index) {
                    entries.pop();
                    positions.pop();
                }
                positions.push((e.index, offset));
                entries.push(e);
                Ok(())
            },
            |payload| {
                decode_entry(payload).is_ok_and(|e| e.data.is_empty() || check(&e.data).is_ok())
            },
        )
        .map_err(|source| DurableError::Scan {
            path: path.clone(),
            source,
        })?;
        if valid_len < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                kept = valid_len,
                dropped = bytes.len() - valid_len,
                "raft log had a torn tail; truncating it"
            );
            self.cut_log(valid_len as u64)?;
        }
        self.log_len = valid_len as u64;
        self.positions = positions;
        Ok(Recovered {
            hard_state,
            snapshot,
            entries,
        })
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), DurableError> {
        self.check_online()?;
        let result = self.append_inner(entries);
        if let Err(e) = &result {
            self.offline.get_or_insert_with(|| e.to_string());
        }
        result
    }

    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), DurableError> {
        self.check_online()?;
        // Raft needs the term and the vote durable before it acts on them; the commit index it
        // can always learn again (a single voter re-commits its log when it leads again), so a
        // change of the commit index alone costs no write.
        let durable = (hard_state.term, hard_state.vote);
        if self.durable_term_vote == Some(durable) {
            return Ok(());
        }
        let dir = self.dir.clone();
        write_single_frame(&dir, QUORUM_STATE_FILE, &encode_hard_state(hard_state))
            .map_err(|e| self.io(dir.join(QUORUM_STATE_FILE), e))?;
        self.durable_term_vote = Some(durable);
        Ok(())
    }

    fn save_snapshot(&mut self, snapshot: &Snapshot, keep_later: bool) -> Result<(), DurableError> {
        self.check_online()?;
        let dir = self.dir.clone();
        write_single_frame(&dir, SNAPSHOT_FILE, &encode_snapshot(snapshot))
            .map_err(|e| self.io(dir.join(SNAPSHOT_FILE), e))?;
        // Rewrite the log without what the snapshot covers: the kept frames go to a temp file
        // that replaces the log. A crash before the rename leaves the old log, whose covered
        // entries recovery skips.
        let index = snapshot.get_metadata().index;
        let path = self.log_path();
        let keep_from = self
            .positions
            .iter()
            .find(|(i, _)| keep_later && *i > index)
            .map(|&(_, pos)| pos);
        let bytes = match keep_from {
            Some(pos) => {
                let all = std::fs::read(&path).map_err(|e| self.io(path.clone(), e))?;
                all[pos as usize..self.log_len as usize].to_vec()
            }
            None => Vec::new(),
        };
        let tmp = dir.join(format!("{RAFT_LOG_FILE}.tmp"));
        let written = File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| File::open(&dir)?.sync_all());
        written.map_err(|e| self.io(path.clone(), e))?;
        let shift = keep_from.unwrap_or(self.log_len);
        self.positions = self
            .positions
            .iter()
            .filter(|(i, _)| keep_later && *i > index)
            .map(|&(i, pos)| (i, pos - shift))
            .collect();
        self.log_len = bytes.len() as u64;
        self.log = None;
        Ok(())
    }
}

/// Durable state in memory, for the simulation: a "crash" drops the voter but not this.
#[derive(Clone, Default)]
pub struct MemState {
    inner: Arc<Mutex<Recovered>>,
}

impl MemState {
    pub fn new() -> MemState {
        MemState::default()
    }
}

impl Durable for MemState {
    fn recover(&mut self) -> Result<Recovered, DurableError> {
        Ok(self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), DurableError> {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(first) = entries.first() {
            s.entries.retain(|e| e.index < first.index);
            s.entries.extend_from_slice(entries);
        }
        Ok(())
    }

    fn set_hard_state(&mut self, hard_state: &HardState) -> Result<(), DurableError> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .hard_state = hard_state.clone();
        Ok(())
    }

    fn save_snapshot(&mut self, snapshot: &Snapshot, keep_later: bool) -> Result<(), DurableError> {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let index = snapshot.get_metadata().index;
        s.entries.retain(|e| keep_later && e.index > index);
        s.snapshot = snapshot.clone();
        Ok(())
    }
}
