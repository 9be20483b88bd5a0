//! The layering of the broker crate, checked on its source: a module may use only modules of
//! lower layers (`ARCHITECTURE.md`, "Architecture invariants"). The flow it keeps is
//! `main → node → server → handlers → context → {replica, controller, group, metadata} → storage`,
//! with `client` (outbound connections) beside `config` and `metadata`, for the layers above.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Lowest layer first. Modules of one layer do not use each other.
const LAYERS: &[&[&str]] = &[
    &[
        "limits",
        "clock",
        "errors",
        "allocator",
        "protocol",
        "metrics",
        "sim_rng",
        "scram",
        "security",
    ],
    &["config", "metadata", "fetch_session", "client"],
    &["replica", "quorum"],
    &["controller"],
    &["group", "producer_ids", "meta_properties"],
    &["txn"],
    &["context"],
    &["handlers", "insight"],
    &["server"],
    &["node", "local_cluster", "leadership_cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/replica/partition.rs` → `replica`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap();
    first.trim_end_matches(".rs").to_owned()
}

/// Every `crate::<module>` a file names outside comments.
fn uses(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push((n + 1, name));
            }
        }
    }
    found
}

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    let mut unknown = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            unknown.insert(module, file.clone());
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in uses(&text) {
            if used == module {
                continue;
            }
            match layer_of(&used) {
                Some(l) if l < own => {}
                _ => violations.push(format!(
                    "{}:{line}: {module} uses crate::{used}",
                    file.strip_prefix(&src).unwrap().display()
                )),
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules missing from LAYERS (add them where they belong): {unknown:?}"
    );
    assert!(
        violations.is_empty(),
        "imports against the layering:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_checker_sees_uses_and_skips_comments() {
    let text = "use crate::replica::Partition;\n// crate::node is only mentioned\nlet x = crate::errors::ApiError::X; // crate::server";
    assert_eq!(
        uses(text),
        vec![(1, "replica".to_owned()), (3, "errors".to_owned())]
    );
}

/// Storage stays behind the replica layer: handlers translate between the wire and the core, and
/// name partitions, logs and offsets only through `crate::replica`.
#[test]
fn handlers_do_not_use_storage() {
    let handlers = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/handlers");
    let mut files = Vec::new();
    rust_files(&handlers, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.find("//").map_or(line, |i| &line[..i]);
            if code.contains("kafkaiq_storage") {
                violations.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "handlers using kafkaiq_storage:\n{}",
        violations.join("\n")
    );
}

/// Handlers receive what they use: `server::dispatch` passes each handler the services it
/// calls (the group coordinator, the controller channel, the replica manager, the image, the
/// config pieces, `ProduceServices` / `FetchServices`), never the whole `Context`: no file
/// under `src/handlers` names it.
#[test]
fn handlers_receive_what_they_use() {
    let handlers = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/handlers");
    let mut files = Vec::new();
    rust_files(&handlers, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.find("//").map_or(line, |i| &line[..i]);
            if code.contains("crate::context") || code.contains("Context") {
                violations.push(format!("{}:{}", file.display(), n + 1));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "handlers taking the whole Context:\n{}",
        violations.join("\n")
    );
}
