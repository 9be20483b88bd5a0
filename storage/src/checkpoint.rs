//! Kafka's text checkpoint files, and the atomic file replacement every small metadata file uses.
//!
//! A checkpoint file is Kafka's `CheckpointFile` format:
//!
//! ```text
//! 0                  <- format version (always 0 for the files this crate writes)
//! 2                  <- number of entry lines that follow
//! orders 0 1234      <- one entry per line, in the entry type's own format
//! orders 1 987
//! ```
//!
//! The entry line format is the only thing that differs between the files, so it is a trait
//! ([`CheckpointEntry`]) and one [`CheckpointFile`] does the framing, the atomic write and the
//! checked read for all of them:
//! - [`OffsetCheckpointEntry`] (`topic partition offset`) for the per-log-dir files
//!   `recovery-point-offset-checkpoint`, `replication-offset-checkpoint` and
//!   `log-start-offset-checkpoint`;
//! - `epoch::EpochEntry` (`epoch start_offset`) for each partition's `leader-epoch-checkpoint`.
//!
//! Writes replace the file atomically: write `<name>.tmp`, fsync it, rename it over `<name>`,
//! fsync the directory, so a crash leaves either the old or the new file and never a torn one
//! ([`write_atomically`], also used for producer state snapshots).
//!
//! This module does not decide *when* checkpoints are written, nor hold any state: the log manager
//! and the leader epoch cache own that.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Name of the per-log-dir file holding each log's recovery point.
pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Name of the per-log-dir file holding each partition's high watermark.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// Name of the per-log-dir file holding each log's log start offset.
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
/// Where the cleaner has cleaned each compacted log of the dir up to (Kafka's
/// `cleaner-offset-checkpoint`, same format).
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// The version Kafka writes in offset and leader epoch checkpoint files.
pub const CHECKPOINT_VERSION: i32 = 0;

/// Suffix of the temporary file a checkpoint is written to before it is renamed into place
/// (Kafka uses the same one, so a stray `.tmp` from either is recognisable).
pub const TEMP_FILE_SUFFIX: &str = ".tmp";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("I/O error on checkpoint file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("malformed line {line_number} in checkpoint file {path}: {line:?} ({reason})")]
    Malformed {
        path: PathBuf,
        /// 1-based, as an editor shows it.
        line_number: usize,
        line: String,
        reason: String,
    },
    #[error("unrecognised version {found} in checkpoint file {path}, expected version {expected}")]
    UnsupportedVersion {
        path: PathBuf,
        found: i32,
        expected: i32,
    },
    #[error("expected {expected} entries in checkpoint file {path}, but found {found}")]
    CountMismatch {
        path: PathBuf,
        expected: usize,
        found: usize,
    },
}

impl CheckpointError {
    fn io(path: &Path, source: io::Error) -> Self {
        CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One line of a checkpoint file.
pub trait CheckpointEntry: Sized {
    /// The line for this entry, without the line terminator.
    fn to_line(&self) -> String;
    /// Parses a line written by [`to_line`](Self::to_line) (or by Kafka); the error says what is
    /// wrong with it and ends up in [`CheckpointError::Malformed`].
    fn parse_line(line: &str) -> Result<Self, String>;
}

/// `topic partition offset`: an entry of the three per-log-dir offset checkpoint files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetCheckpointEntry {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl CheckpointEntry for OffsetCheckpointEntry {
    fn to_line(&self) -> String {
        format!("{} {} {}", self.topic, self.partition, self.offset)
    }

    fn parse_line(line: &str) -> Result<Self, String> {
        // Kafka splits on runs of whitespace; topic names cannot contain whitespace.
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [topic, partition, offset] = fields[..] else {
            return Err(format!(
                "expected 3 fields `topic partition offset`, found {}",
                fields.len()
            ));
        };
        let partition = partition
            .parse::<i32>()
            .map_err(|e| format!("partition {partition:?} is not an int32: {e}"))?;
        let offset = offset
            .parse::<i64>()
            .map_err(|e| format!("offset {offset:?} is not an int64: {e}"))?;
        Ok(OffsetCheckpointEntry {
            topic: topic.to_string(),
            partition,
            offset,
        })
    }
}

/// A checkpoint file at a fixed path holding entries of type `T`. Holds no data itself: each
/// `write` replaces the whole file and each `read` parses it anew.
#[derive(Debug, Clone)]
pub struct CheckpointFile<T> {
    path: PathBuf,
    version: i32,
    _entry: PhantomData<fn() -> T>,
}

impl<T: CheckpointEntry> CheckpointFile<T> {
    /// A checkpoint at `path` with Kafka's version 0.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self::with_version(path, CHECKPOINT_VERSION)
    }

    pub fn with_version(path: impl Into<PathBuf>, version: i32) -> Self {
        CheckpointFile {
            path: path.into(),
            version,
            _entry: PhantomData,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file with `entries`, durably (see [`write_atomically`]).
    pub fn write<'a, I>(&self, entries: I) -> Result<(), CheckpointError>
    where
        I: IntoIterator<Item = &'a T>,
        T: 'a,
    {
        let lines: Vec<String> = entries.into_iter().map(CheckpointEntry::to_line).collect();
        let mut text = String::with_capacity(16 + lines.iter().map(|l| l.len() + 1).sum::<usize>());
        text.push_str(&format!("{}\n{}\n", self.version, lines.len()));
        for line in &lines {
            debug_assert!(
                !line.contains('\n'),
                "entry line contains a newline: {line:?}"
            );
            text.push_str(line);
            text.push('\n');
        }
        write_atomically(&self.path, text.as_bytes())
            .map_err(|e| CheckpointError::io(&self.path, e))
    }

    /// Reads every entry. A missing or empty file holds no entries (Kafka creates the file empty
    /// when it first opens it); a file with a version line but no count line is empty as well,
    /// as in Kafka. Anything else that does not parse is an error naming the file and line.
    pub fn read(&self) -> Result<Vec<T>, CheckpointError> {
        let text = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CheckpointError::io(&self.path, e)),
        };
        let text = String::from_utf8(text).map_err(|e| CheckpointError::Malformed {
            path: self.path.clone(),
            line_number: 0,
            line: String::new(),
            reason: format!("file is not UTF-8: {e}"),
        })?;
        self.parse(&text)
    }

    fn parse(&self, text: &str) -> Result<Vec<T>, CheckpointError> {
        let malformed =
            |line_number: usize, line: &str, reason: String| CheckpointError::Malformed {
                path: self.path.clone(),
                line_number,
                line: line.to_string(),
                reason,
            };
        // `lines()` accepts "\n" and "\r\n" and ignores one trailing terminator, like Java's
        // BufferedReader.readLine.
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));

        let Some((n, version_line)) = lines.next() else {
            return Ok(Vec::new());
        };
        let version: i32 = version_line
            .parse()
            .map_err(|e| malformed(n, version_line, format!("version is not an int32: {e}")))?;
        if version != self.version {
            return Err(CheckpointError::UnsupportedVersion {
                path: self.path.clone(),
                found: version,
                expected: self.version,
            });
        }

        let Some((n, count_line)) = lines.next() else {
            return Ok(Vec::new());
        };
        let expected: usize = count_line.parse().map_err(|e| {
            malformed(
                n,
                count_line,
                format!("entry count is not a non-negative int: {e}"),
            )
        })?;

        let mut entries = Vec::new();
        for (n, line) in lines {
            entries.push(T::parse_line(line).map_err(|reason| malformed(n, line, reason))?);
        }
        if entries.len() != expected {
            return Err(CheckpointError::CountMismatch {
                path: self.path.clone(),
                expected,
                found: entries.len(),
            });
        }
        Ok(entries)
    }
}

/// Replaces `path` with `contents` so that after a crash the file holds either its old or its new
/// contents, never a mix: write `<path>.tmp`, fsync it, rename it over `path`, fsync the directory
/// (the rename is only durable once the directory entry is).
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temp_path = write_temp(path, contents, true)?;
    fs::rename(&temp_path, path)?;
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        sync_dir(dir)?;
    }
    Ok(())
}

/// [`write_atomically`] without its fsyncs: `<path>.tmp` renamed over `path`. Readers never see
/// a partly written file, but after a crash before the caller fsyncs it the file may be empty
/// or torn, so only for files whose reader detects that (producer snapshots carry a CRC).
pub fn write_replacing(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temp_path = write_temp(path, contents, false)?;
    fs::rename(&temp_path, path)
}

fn write_temp(path: &Path, contents: &[u8], sync: bool) -> io::Result<PathBuf> {
    let mut temp_name = path.as_os_str().to_owned();
    temp_name.push(TEMP_FILE_SUFFIX);
    let temp_path = PathBuf::from(temp_name);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp_path)?;
    file.write_all(contents)?;
    if sync {
        file.sync_all()?;
    }
    Ok(temp_path)
}

/// fsyncs a directory so that entries created, renamed or removed in it survive a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
pub(crate) mod test_dir {
    //! A self-deleting scratch directory for unit tests.
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub struct TestDir(PathBuf);

    impl TestDir {
        pub fn new(label: &str) -> TestDir {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "kafkaiq-storage-{label}-{}-{n}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            TestDir(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_dir::TestDir;
    use super::*;

    fn entry(topic: &str, partition: i32, offset: i64) -> OffsetCheckpointEntry {
        OffsetCheckpointEntry {
            topic: topic.into(),
            partition,
            offset,
        }
    }

    #[test]
    fn writes_kafkas_exact_bytes() {
        let dir = TestDir::new("cp-bytes");
        let file = CheckpointFile::new(dir.path().join(RECOVERY_POINT_CHECKPOINT_FILE));
        file.write(&[entry("orders", 0, 1234), entry("__consumer_offsets", 17, 0)])
            .unwrap();
        let bytes = fs::read(file.path()).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "0\n2\norders 0 1234\n__consumer_offsets 17 0\n"
        );
        assert!(
            !dir.path()
                .join(format!("{RECOVERY_POINT_CHECKPOINT_FILE}.tmp"))
                .exists(),
            "the temporary file is renamed away"
        );
    }

    #[test]
    fn empty_checkpoint_is_version_and_zero() {
        let dir = TestDir::new("cp-empty");
        let file = CheckpointFile::<OffsetCheckpointEntry>::new(dir.path().join("x"));
        file.write(&[]).unwrap();
        assert_eq!(fs::read_to_string(file.path()).unwrap(), "0\n0\n");
        assert_eq!(file.read().unwrap(), vec![]);
    }

    #[test]
    fn round_trip_and_overwrite() {
        let dir = TestDir::new("cp-rt");
        let file = CheckpointFile::new(dir.path().join(REPLICATION_OFFSET_CHECKPOINT_FILE));
        let first = vec![
            entry("a", 0, 5),
            entry("b", 3, i64::MAX),
            entry("a-b.c_d", 1, -1),
        ];
        file.write(&first).unwrap();
        assert_eq!(file.read().unwrap(), first);
        let second = vec![entry("a", 0, 6)];
        file.write(&second).unwrap();
        assert_eq!(file.read().unwrap(), second);
    }

    #[test]
    fn reads_what_kafka_tolerates() {
        let dir = TestDir::new("cp-tolerate");
        let path = dir.path().join(LOG_START_OFFSET_CHECKPOINT_FILE);
        let file = CheckpointFile::<OffsetCheckpointEntry>::new(&path);
        let cases: &[(&str, Vec<OffsetCheckpointEntry>)] = &[
            ("", vec![]),                                    // freshly created empty file
            ("0\n", vec![]),                                 // version but no count
            ("0\n0\n", vec![]),                              // no entries
            ("0\n1\nt 0 7", vec![entry("t", 0, 7)]),         // no final newline
            ("0\r\n1\r\nt 0 7\r\n", vec![entry("t", 0, 7)]), // CRLF
            ("0\n1\nt  0\t7\n", vec![entry("t", 0, 7)]),     // runs of whitespace
        ];
        for (text, want) in cases {
            fs::write(&path, text).unwrap();
            assert_eq!(&file.read().unwrap(), want, "file text {text:?}");
        }
        fs::remove_file(&path).unwrap();
        assert_eq!(file.read().unwrap(), vec![], "a missing file is empty");
    }

    #[test]
    fn malformed_files_name_file_and_line() {
        let dir = TestDir::new("cp-bad");
        let path = dir.path().join(RECOVERY_POINT_CHECKPOINT_FILE);
        let file = CheckpointFile::<OffsetCheckpointEntry>::new(&path);
        // (contents, expected error rendered text fragment, expected line number if Malformed)
        let cases: &[(&str, &str, Option<usize>)] = &[
            ("x\n0\n", "version is not an int32", Some(1)),
            ("1\n0\n", "unrecognised version 1", None),
            ("0\nmany\n", "entry count", Some(2)),
            ("0\n-1\n", "entry count", Some(2)),
            ("0\n1\nt 0\n", "expected 3 fields", Some(3)),
            (
                "0\n2\nt 0 1\nt 1 x\n",
                "offset \"x\" is not an int64",
                Some(4),
            ),
            ("0\n1\nt p 1\n", "partition \"p\" is not an int32", Some(3)),
            ("0\n1\nt 0 1 9\n", "expected 3 fields", Some(3)),
            ("0\n2\nt 0 1\n", "expected 2 entries", None),
            ("0\n1\nt 0 1\nt 1 1\n", "expected 1 entries", None),
            ("0\n2\nt 0 1\n\nt 1 2\n", "expected 3 fields", Some(4)),
        ];
        for (text, fragment, line_number) in cases {
            fs::write(&path, text).unwrap();
            let err = file.read().expect_err(text);
            let rendered = err.to_string();
            assert!(
                rendered.contains(fragment),
                "{text:?}: {rendered:?} lacks {fragment:?}"
            );
            assert!(
                rendered.contains(RECOVERY_POINT_CHECKPOINT_FILE),
                "{text:?}: {rendered:?} does not name the file"
            );
            match (err, line_number) {
                (CheckpointError::Malformed { line_number: n, .. }, Some(want)) => {
                    assert_eq!(n, *want, "{text:?}")
                }
                (CheckpointError::Malformed { .. }, None) => {
                    panic!("{text:?}: unexpected Malformed")
                }
                (other, Some(_)) => panic!("{text:?}: expected Malformed, got {other:?}"),
                (_, None) => {}
            }
        }
    }

    #[test]
    fn non_utf8_is_malformed_not_a_panic() {
        let dir = TestDir::new("cp-utf8");
        let path = dir.path().join("f");
        fs::write(&path, [b'0', b'\n', 0xff, b'\n']).unwrap();
        let err = CheckpointFile::<OffsetCheckpointEntry>::new(&path)
            .read()
            .unwrap_err();
        assert!(matches!(err, CheckpointError::Malformed { .. }), "{err:?}");
    }

    #[test]
    fn write_replaces_a_stale_temp_file() {
        // A crash between creating the temp file and renaming it leaves `<name>.tmp` behind; the
        // next write must neither fail nor leave the stale contents in the result.
        let dir = TestDir::new("cp-stale");
        let path = dir.path().join("f");
        fs::write(
            dir.path().join("f.tmp"),
            "garbage that is longer than the new file\n",
        )
        .unwrap();
        let file = CheckpointFile::new(&path);
        file.write(&[entry("t", 0, 1)]).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n1\nt 0 1\n");
    }

    #[test]
    fn write_into_missing_dir_is_io_error_naming_the_file() {
        let dir = TestDir::new("cp-nodir");
        let path = dir.path().join("gone").join("f");
        let err = CheckpointFile::new(&path)
            .write(&[entry("t", 0, 1)])
            .unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("gone"), "{err}");
    }
}
