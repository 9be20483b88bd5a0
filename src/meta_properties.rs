//! `meta.properties`: the file in every log directory (and the metadata log directory) that ties
//! it to one node of one cluster, in the format Apache Kafka's `kafka-storage format` writes:
//!
//! ```text
//! #
//! #Tue Dec 01 10:09:59 UTC 2026
//! node.id=1
//! directory.id=xksRT4OIl9cuCJoZ7R7wHQ
//! version=1
//! cluster.id=axeASEgEQ8yAF8tjtw9qEw
//! ```
//!
//! Version 1 carries `node.id` and `cluster.id`; version 0 (no `version`, or `version=0`) carries
//! `broker.id` and may carry `cluster.id`; both may carry a `directory.id` (a Kafka UUID, unique
//! per directory, never one of the 100 reserved ones). [`ensure_meta_properties`] checks them as
//! Kafka's `MetaPropertiesEnsemble.verify` does, then writes what is missing: KafkaIQ needs no
//! format step, so an empty directory gets a file, and a file without `directory.id` gets one
//! (as Kafka's `KafkaRaftServer.initializeLogDirs` does). A node that learns its cluster id from
//! the metadata quorum reads and checks first ([`load_meta_properties`], no writes) and writes
//! once it knows the id ([`LoadedMetaProperties::complete`]).

use std::path::{Path, PathBuf};

use crate::config::RawConfig;
use crate::controller::new_cluster_id;

pub const META_PROPERTIES: &str = "meta.properties";

#[derive(Debug, thiserror::Error)]
pub enum MetaPropertiesError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// One `meta.properties` as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// 0 or 1.
    pub version: u8,
    pub cluster_id: Option<String>,
    /// `node.id` (version 1) or `broker.id` (version 0).
    pub node_id: Option<i32>,
    pub directory_id: Option<String>,
}

impl MetaProperties {
    /// Parses the file's text (Java properties syntax); `path` is for messages.
    pub fn parse(text: &str, path: &Path) -> Result<MetaProperties, MetaPropertiesError> {
        let invalid = |reason: String| MetaPropertiesError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let raw = RawConfig::parse(text, path).map_err(|e| invalid(e.to_string()))?;
        let version = match raw.get("version").map(str::trim) {
            None | Some("0") => 0,
            Some("1") => 1,
            Some(other) => return Err(invalid(format!("unknown meta.properties version {other}"))),
        };
        let id_key = if version == 0 { "broker.id" } else { "node.id" };
        let node_id = match raw.get(id_key) {
            None if version == 1 => return Err(invalid("node.id was not found.".into())),
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<i32>()
                    .map_err(|_| invalid(format!("{id_key} `{v}` is not an integer")))?,
            ),
        };
        let cluster_id = raw.get("cluster.id").map(|v| v.trim().to_owned());
        if version == 1 && cluster_id.is_none() {
            return Err(invalid(format!(
                "cluster.id was not specified in the v1 file: {}",
                path.display()
            )));
        }
        let directory_id = match raw.get("directory.id").map(str::trim) {
            None => None,
            Some(id) => {
                let uuid = decode_kafka_uuid(id).ok_or_else(|| {
                    invalid(format!(
                        "Unable to read directory.id as a Uuid: `{id}` is not a base64 UUID"
                    ))
                })?;
                if uuid < 100 {
                    return Err(invalid(format!("Invalid reserved directory ID {id}")));
                }
                Some(id.to_owned())
            }
        };
        Ok(MetaProperties {
            version,
            cluster_id,
            node_id,
            directory_id,
        })
    }

    /// The file's text, in Kafka's key order for the version.
    pub fn to_text(&self) -> String {
        let mut out = String::from("#\n#Written by kafkaiq\n");
        if let Some(id) = self.node_id {
            let key = if self.version == 0 {
                "broker.id"
            } else {
                "node.id"
            };
            out.push_str(&format!("{key}={id}\n"));
        }
        if let Some(dir) = &self.directory_id {
            out.push_str(&format!("directory.id={dir}\n"));
        }
        out.push_str(&format!("version={}\n", self.version));
        if let Some(cluster) = &self.cluster_id {
            out.push_str(&format!("cluster.id={cluster}\n"));
        }
        out
    }
}

/// One directory's `meta.properties` after [`ensure_meta_properties`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryMeta {
    pub dir: PathBuf,
    pub directory_id: String,
    /// The file was written (or rewritten to add `directory.id`) by this call.
    pub written: bool,
}

/// What [`ensure_meta_properties`] found or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaPropertiesEnsemble {
    pub cluster_id: String,
    /// Some directory already named `cluster_id`; false when it was made by this call (a new
    /// node: in a cluster the real id comes from the metadata log).
    pub cluster_id_found: bool,
    pub node_id: i32,
    pub directories: Vec<DirectoryMeta>,
}

/// Every directory's `meta.properties` as read and checked by [`load_meta_properties`], before
/// anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedMetaProperties {
    pub node_id: i32,
    /// The cluster id the existing files agree on; None if no directory has a file yet.
    pub cluster_id: Option<String>,
    /// Each directory and its file, None where there is none yet.
    pub directories: Vec<(PathBuf, Option<MetaProperties>)>,
}

/// Reads `meta.properties` from every directory (log dirs and the metadata log dir, e.g.
/// `BrokerConfig::meta_properties_dirs`), creating the directories, and checks them: every file
/// must carry `node_id`, all must agree on the cluster id and have distinct directory ids.
/// Writes nothing: a node that learns its cluster id elsewhere (the metadata log) calls
/// [`LoadedMetaProperties::complete`] once it knows it.
pub fn load_meta_properties(
    dirs: &[PathBuf],
    node_id: i32,
) -> Result<LoadedMetaProperties, MetaPropertiesError> {
    let mut found: Vec<(PathBuf, Option<MetaProperties>)> = Vec::new();
    let mut cluster_id: Option<String> = None;
    for dir in dirs {
        std::fs::create_dir_all(dir).map_err(|source| MetaPropertiesError::Io {
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(META_PROPERTIES);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                found.push((dir.clone(), None));
                continue;
            }
            Err(source) => return Err(MetaPropertiesError::Io { path, source }),
        };
        let meta = MetaProperties::parse(&text, &path)?;
        let invalid = |reason: String| MetaPropertiesError::Invalid {
            path: path.clone(),
            reason,
        };
        match meta.node_id {
            None => {
                return Err(invalid(format!(
                    "Error: node ID not found in {}",
                    dir.display()
                )))
            }
            Some(stored) if stored != node_id => {
                return Err(invalid(format!(
                    "Stored node id {stored} doesn't match the configured node.id {node_id}. If \
                     you moved your data, make sure your configured node id matches. If you \
                     intend to create a new node, you should remove all data in your data \
                     directories."
                )))
            }
            Some(_) => {}
        }
        match (&cluster_id, &meta.cluster_id) {
            (_, None) => {
                return Err(invalid(format!(
                    "Error: cluster ID not found in {}",
                    dir.display()
                )))
            }
            (Some(expected), Some(read)) if expected != read => {
                return Err(invalid(format!(
                    "Invalid cluster.id in: {}. Expected {expected}, but read {read}",
                    path.display()
                )))
            }
            (_, Some(read)) => cluster_id = Some(read.clone()),
        }
        if let Some(id) = &meta.directory_id {
            if let Some((other, _)) = found
                .iter()
                .find(|(_, m)| m.as_ref().and_then(|m| m.directory_id.as_ref()) == Some(id))
            {
                return Err(invalid(format!(
                    "Duplicate directory ID {id} found. It was the ID of {}, but also of {}",
                    other.display(),
                    dir.display()
                )));
            }
        }
        found.push((dir.clone(), Some(meta)));
    }
    Ok(LoadedMetaProperties {
        node_id,
        cluster_id,
        directories: found,
    })
}

impl LoadedMetaProperties {
    /// Writes a file where a directory has none (with `cluster_id`) and adds `directory.id`
    /// where a file lacks one. `cluster_id` must be the one the existing files carry, if any.
    pub fn complete(self, cluster_id: &str) -> Result<MetaPropertiesEnsemble, MetaPropertiesError> {
        let cluster_id_found = self.cluster_id.is_some();
        if let Some(found) = &self.cluster_id {
            if found != cluster_id {
                let dir = self
                    .directories
                    .iter()
                    .find(|(_, m)| m.is_some())
                    .map(|(d, _)| d.clone())
                    .unwrap_or_default();
                return Err(MetaPropertiesError::Invalid {
                    path: dir.join(META_PROPERTIES),
                    reason: format!(
                        "Invalid cluster.id: the directory belongs to cluster {found}, but this \
                         node is joining cluster {cluster_id}"
                    ),
                });
            }
        }
        let mut directories = Vec::with_capacity(self.directories.len());
        for (dir, meta) in self.directories {
            let (meta, written) = match meta {
                Some(meta) if meta.directory_id.is_some() => (meta, false),
                Some(mut meta) => {
                    meta.directory_id = Some(new_directory_id());
                    (meta, true)
                }
                None => (
                    MetaProperties {
                        version: 1,
                        cluster_id: Some(cluster_id.to_owned()),
                        node_id: Some(self.node_id),
                        directory_id: Some(new_directory_id()),
                    },
                    true,
                ),
            };
            if written {
                write_file_durably(&dir.join(META_PROPERTIES), meta.to_text().as_bytes())?;
            }
            directories.push(DirectoryMeta {
                dir,
                directory_id: meta.directory_id.expect("set above"),
                written,
            });
        }
        Ok(MetaPropertiesEnsemble {
            cluster_id: cluster_id.to_owned(),
            cluster_id_found,
            node_id: self.node_id,
            directories,
        })
    }
}

/// [`load_meta_properties`], then [`LoadedMetaProperties::complete`] with the cluster id found,
/// or a new one when no directory has a file yet (today's single node).
pub fn ensure_meta_properties(
    dirs: &[PathBuf],
    node_id: i32,
) -> Result<MetaPropertiesEnsemble, MetaPropertiesError> {
    let loaded = load_meta_properties(dirs, node_id)?;
    let cluster_id = loaded.cluster_id.clone().unwrap_or_else(new_cluster_id);
    loaded.complete(&cluster_id)
}

/// A directory id as Kafka's `DirectoryId.random` makes them: not reserved, not starting with
/// a dash.
fn new_directory_id() -> String {
    loop {
        let id = new_cluster_id();
        if !id.starts_with('-') && decode_kafka_uuid(&id).is_some_and(|u| u >= 100) {
            return id;
        }
    }
}

/// Kafka's `Uuid.fromString`: 22 characters of URL-safe base64 without padding, 16 bytes.
fn decode_kafka_uuid(text: &str) -> Option<u128> {
    kafkaiq_storage::partition_metadata::decode_uuid(text)
}

fn write_file_durably(path: &Path, bytes: &[u8]) -> Result<(), MetaPropertiesError> {
    let io = |source| MetaPropertiesError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by Apache Kafka 4.1.1's `kafka-storage format` (kafka.tools.StorageTool).
    const KAFKA_FORMATTED: &str = "#\n#Tue Dec 01 10:09:59 UTC 2026\nnode.id=1\n\
directory.id=xksRT4OIl9cuCJoZ7R7wHQ\nversion=1\ncluster.id=axeASEgEQ8yAF8tjtw9qEw\n";

    #[test]
    fn meta_properties_is_created_then_checked() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().join("a")];
        let made = ensure_meta_properties(&dirs, 1).unwrap();
        assert!(!made.cluster_id_found);
        assert!(made.directories[0].written);
        let again = ensure_meta_properties(&dirs, 1).unwrap();
        assert_eq!(again.cluster_id, made.cluster_id);
        assert!(again.cluster_id_found);
        assert!(!again.directories[0].written);
        assert_eq!(
            again.directories[0].directory_id,
            made.directories[0].directory_id
        );
        let err = ensure_meta_properties(&dirs, 2).unwrap_err();
        assert!(err.to_string().contains("node.id"), "{err}");
        // What KafkaIQ writes, Kafka reads: v1 with every key.
        let text = std::fs::read_to_string(dirs[0].join(META_PROPERTIES)).unwrap();
        let meta = MetaProperties::parse(&text, Path::new("x")).unwrap();
        assert_eq!(meta.version, 1);
        assert_eq!(meta.node_id, Some(1));
    }

    #[test]
    fn a_kafka_formatted_directory_is_accepted_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(META_PROPERTIES), KAFKA_FORMATTED).unwrap();
        let found = ensure_meta_properties(&[dir.path().to_owned()], 1).unwrap();
        assert_eq!(found.cluster_id, "axeASEgEQ8yAF8tjtw9qEw");
        assert!(found.cluster_id_found);
        assert_eq!(found.directories[0].directory_id, "xksRT4OIl9cuCJoZ7R7wHQ");
        assert!(!found.directories[0].written);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(META_PROPERTIES)).unwrap(),
            KAFKA_FORMATTED
        );
        // A second, unformatted log dir joins the same cluster with its own directory id.
        let second = dir.path().join("second");
        let found = ensure_meta_properties(&[dir.path().to_owned(), second.clone()], 1).unwrap();
        assert_eq!(found.cluster_id, "axeASEgEQ8yAF8tjtw9qEw");
        assert!(found.directories[1].written);
        assert_ne!(
            found.directories[1].directory_id,
            found.directories[0].directory_id
        );
        let written = std::fs::read_to_string(second.join(META_PROPERTIES)).unwrap();
        assert!(written.contains("cluster.id=axeASEgEQ8yAF8tjtw9qEw"));
    }

    #[test]
    fn load_writes_nothing_and_complete_takes_the_cluster_id_learned_later() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().join("data")];
        let loaded = load_meta_properties(&dirs, 2).unwrap();
        assert_eq!(loaded.cluster_id, None);
        assert!(!dirs[0].join(META_PROPERTIES).exists());
        let done = loaded.complete("axeASEgEQ8yAF8tjtw9qEw").unwrap();
        assert!(!done.cluster_id_found);
        let again = load_meta_properties(&dirs, 2).unwrap();
        assert_eq!(again.cluster_id.as_deref(), Some("axeASEgEQ8yAF8tjtw9qEw"));
        let err = again.complete("OGuB95JqS42Imj248W-UwQ").unwrap_err();
        assert!(
            err.to_string()
                .contains("belongs to cluster axeASEgEQ8yAF8tjtw9qEw"),
            "{err}"
        );
    }

    #[test]
    fn version_0_files_and_missing_directory_ids() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(META_PROPERTIES),
            "version=0\nbroker.id=3\ncluster.id=axeASEgEQ8yAF8tjtw9qEw\n",
        )
        .unwrap();
        let found = ensure_meta_properties(&[dir.path().to_owned()], 3).unwrap();
        assert!(found.directories[0].written);
        let text = std::fs::read_to_string(dir.path().join(META_PROPERTIES)).unwrap();
        let meta = MetaProperties::parse(&text, Path::new("x")).unwrap();
        assert_eq!(meta.version, 0);
        assert_eq!(meta.node_id, Some(3));
        assert_eq!(
            meta.directory_id.as_deref(),
            Some(found.directories[0].directory_id.as_str())
        );
    }

    #[test]
    fn what_kafka_refuses_is_refused() {
        let cases: &[(&str, &[&str], &str)] = &[
            (
                "unknown version",
                &["version=2\nnode.id=1\ncluster.id=c\n"],
                "version 2",
            ),
            (
                "v1 without node.id",
                &["version=1\ncluster.id=c\n"],
                "node.id was not found",
            ),
            (
                "v1 without cluster.id",
                &["version=1\nnode.id=1\n"],
                "cluster.id was not specified",
            ),
            (
                "v0 without broker.id",
                &["version=0\ncluster.id=c\n"],
                "node ID not found",
            ),
            (
                "v0 without cluster.id",
                &["broker.id=1\n"],
                "cluster ID not found",
            ),
            (
                "another node",
                &["version=1\nnode.id=2\ncluster.id=c\n"],
                "Stored node id 2",
            ),
            (
                "bad directory id",
                &["version=1\nnode.id=1\ncluster.id=c\ndirectory.id=nope\n"],
                "directory.id",
            ),
            (
                "reserved directory id",
                &["version=1\nnode.id=1\ncluster.id=c\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\n"],
                "reserved directory ID",
            ),
            (
                "two clusters",
                &[
                    "version=1\nnode.id=1\ncluster.id=c1\n",
                    "version=1\nnode.id=1\ncluster.id=c2\n",
                ],
                "Expected c1, but read c2",
            ),
            (
                "one directory id twice",
                &[
                    "version=1\nnode.id=1\ncluster.id=c\ndirectory.id=xksRT4OIl9cuCJoZ7R7wHQ\n",
                    "version=1\nnode.id=1\ncluster.id=c\ndirectory.id=xksRT4OIl9cuCJoZ7R7wHQ\n",
                ],
                "Duplicate directory ID",
            ),
        ];
        for (what, files, words) in cases {
            let root = tempfile::tempdir().unwrap();
            let mut dirs = Vec::new();
            for (i, text) in files.iter().enumerate() {
                let d = root.path().join(i.to_string());
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join(META_PROPERTIES), text).unwrap();
                dirs.push(d);
            }
            let err = ensure_meta_properties(&dirs, 1).unwrap_err().to_string();
            assert!(err.contains(words), "{what}: {err}");
        }
    }

    #[test]
    fn kafka_uuids_decode() {
        assert_eq!(decode_kafka_uuid("AAAAAAAAAAAAAAAAAAAAAA"), Some(0));
        assert_eq!(decode_kafka_uuid("AAAAAAAAAAAAAAAAAAAAAQ"), Some(1));
        assert!(decode_kafka_uuid("xksRT4OIl9cuCJoZ7R7wHQ").is_some());
        assert!(decode_kafka_uuid("xksRT4OIl9cuCJoZ7R7wH").is_none());
        assert!(decode_kafka_uuid("xksRT4OIl9cuCJoZ7R7wH+").is_none());
        for _ in 0..100 {
            assert!(decode_kafka_uuid(&new_directory_id()).unwrap() >= 100);
        }
    }
}
