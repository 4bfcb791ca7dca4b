//! The floors of the safe layer (ARCHITECTURE.md): each folder of `src/safe/` uses only the
//! folders below it, so no two of them form a cycle. Read from the sources: a path
//! `crate::safe::FOLDER::...`, or a name `safe/mod.rs` re-exports from `FOLDER`, in a file of
//! another folder is an edge. Run by `tests/run-all.sh --step layers` (and with the other tests).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, lowest first: a folder may use those before it.
const FLOORS: &[&str] = &[
    "dtype", "error", "borrow", "layout", "import", "export", "packed",
];

fn safe_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/safe")
}

/// Every name `safe/mod.rs` re-exports, with the folder it comes from.
fn reexports() -> BTreeMap<String, String> {
    let text = fs::read_to_string(safe_dir().join("mod.rs")).unwrap();
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
        if !FLOORS.contains(&folder) {
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

#[test]
fn each_safe_folder_uses_only_the_folders_below_it() {
    let names = reexports();
    let root = safe_dir();
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
        let Some(floor) = FLOORS.iter().position(|f| *f == folder) else {
            continue; // mod.rs: the layer's root
        };
        let text = code(&file);
        let mut used = Vec::new();
        for (at, _) in text.match_indices("crate::safe::") {
            let rest = &text[at + "crate::safe::".len()..];
            if let Some(list) = rest.strip_prefix('{') {
                let list = &list[..list.find('}').unwrap_or(list.len())];
                used.extend(words(list).filter_map(|w| names.get(w).cloned()));
            } else {
                let first = words(rest).next().unwrap_or_default();
                if FLOORS.contains(&first) {
                    used.push(first.to_string());
                } else if let Some(f) = names.get(first) {
                    used.push(f.clone());
                }
            }
        }
        for target in used {
            let to = FLOORS.iter().position(|f| *f == target).unwrap();
            if to > floor {
                upward.push(format!("{} ({folder}) uses {target}", rel.display()));
            }
        }
    }
    upward.sort();
    upward.dedup();
    assert!(
        upward.is_empty(),
        "safe/ folders must use only the floors below them ({FLOORS:?}):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_an_upward_edge() {
    // The parser finds a re-exported name of a higher floor in a brace list.
    let names = reexports();
    assert_eq!(names.get("Export").map(String::as_str), Some("export"));
    assert_eq!(names.get("Managed").map(String::as_str), Some("import"));
    assert_eq!(names.get("TensorInfo").map(String::as_str), Some("layout"));
}
