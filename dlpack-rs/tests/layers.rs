//! The floors of the safe layer and of the Python layer (ARCHITECTURE.md): each folder of
//! `src/safe/` and of `src/pyo3_glue/` uses only the folders below it, so no two of them form a
//! cycle. Read from the sources: a path `crate::LAYER::FOLDER::...`, or a name the layer's
//! `mod.rs` re-exports from `FOLDER`, in a file of another folder is an edge. Run by
//! `tests/run-all.sh --step layers` (and with the other tests).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The safe layer's floors, lowest first: a folder may use those before it.
const SAFE: &[&str] = &[
    "dtype", "error", "borrow", "layout", "import", "export", "packed",
];

/// The Python layer's floors (`compat_0_3.rs`, above them all, is not one).
const GLUE: &[&str] = &["runtime", "export", "numpy", "import"];

fn layer_dir(layer: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer)
}

/// Every name the layer's `mod.rs` re-exports, with the folder it comes from.
fn reexports(layer: &str, floors: &[&str]) -> BTreeMap<String, String> {
    let text = fs::read_to_string(layer_dir(layer).join("mod.rs")).unwrap();
    let mut names = BTreeMap::new();
    for statement in text.split(';') {
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let head = &statement[..at];
        if !head.trim_end().ends_with("pub") && !head.trim_end().ends_with("pub(crate)") {
            continue;
        }
        let path = statement[at + 4..].trim();
        let folder = path.split("::").next().unwrap().trim();
        if !floors.contains(&folder) {
            continue;
        }
        let tail = path.rsplit("::").next().unwrap();
        let list = match (path.find('{'), path.rfind('}')) {
            (Some(open), Some(close)) => &path[open + 1..close],
            _ => tail,
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            names.insert(name.to_string(), folder.to_string());
        }
    }
    names
}

/// The library files of `dir`, test files left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path.file_name().unwrap().to_string_lossy().contains("test")
        {
            out.push(path);
        }
    }
}

/// A file's code without comments and without its `#[cfg(test)]` tail.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => &text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn words(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// The upward edges of `layer`'s folders, one line each.
fn upward_edges(layer: &str, floors: &[&str]) -> Vec<String> {
    let names = reexports(layer, floors);
    let root = layer_dir(layer);
    let prefix = format!("crate::{layer}::");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut upward = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let folder = first.trim_end_matches(".rs").to_string();
        let Some(floor) = floors.iter().position(|f| *f == folder) else {
            continue; // the layer's root and what sits above its floors
        };
        let text = code(&file);
        let mut used = Vec::new();
        // From a folder's `mod.rs`, `super::` is the layer itself; from its other files,
        // `super::super::` is.
        let up = if rel.ends_with("mod.rs") {
            "super::"
        } else {
            "super::super::"
        };
        let starts = text
            .match_indices(prefix.as_str())
            .map(|(at, p)| at + p.len())
            .chain(text.match_indices(up).map(|(at, p)| at + p.len()));
        for start in starts {
            let rest = &text[start..];
            if let Some(list) = rest.strip_prefix('{') {
                let list = &list[..list.find('}').unwrap_or(list.len())];
                used.extend(words(list).filter_map(|w| names.get(w).cloned()));
            } else {
                let first = words(rest).next().unwrap_or_default();
                if floors.contains(&first) {
                    used.push(first.to_string());
                } else if let Some(f) = names.get(first) {
                    used.push(f.clone());
                }
            }
        }
        for target in used {
            let to = floors.iter().position(|f| *f == target).unwrap();
            if to > floor {
                upward.push(format!(
                    "{layer}/{} ({folder}) uses {target}",
                    rel.display()
                ));
            }
        }
    }
    upward.sort();
    upward.dedup();
    upward
}

#[test]
fn each_safe_folder_uses_only_the_folders_below_it() {
    let upward = upward_edges("safe", SAFE);
    assert!(
        upward.is_empty(),
        "safe/ folders must use only the floors below them ({SAFE:?}):\n{}",
        upward.join("\n")
    );
}

#[test]
fn each_glue_folder_uses_only_the_folders_below_it() {
    let upward = upward_edges("pyo3_glue", GLUE);
    assert!(
        upward.is_empty(),
        "pyo3_glue/ folders must use only the floors below them ({GLUE:?}):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_edge() {
    // The parser finds re-exported names of higher floors in brace lists.
    let names = reexports("safe", SAFE);
    assert_eq!(names.get("Export").map(String::as_str), Some("export"));
    assert_eq!(names.get("Managed").map(String::as_str), Some("import"));
    assert_eq!(names.get("TensorInfo").map(String::as_str), Some("layout"));
    let glue = reexports("pyo3_glue", GLUE);
    assert_eq!(glue.get("PyTensor").map(String::as_str), Some("import"));
    assert_eq!(glue.get("DLPackTensor").map(String::as_str), Some("export"));
}
