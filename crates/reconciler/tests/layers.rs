//! The layers of `crates/reconciler` (docs/development/reconcile-pipeline.md, "Layers"): a
//! module may use modules of its own layer or of lower ones, never of a higher one, and the
//! modules' uses form no cycle.
//!
//! Every `crate::`, `super::` and `self::` path of the product code (`src/**/*.rs` less its
//! `#[cfg(test)]` items; comments and literals do not count) is resolved to the module it names
//! (the longest module prefix of the path), and that module to its entry of [`LAYERS`] (the
//! longest entry that is a prefix of it). A path naming a module of a higher layer fails the
//! test with the file and the path; so does a module no entry covers, and a cycle among the
//! entries. A parent module's bare uses of its children (`plan::plan(…)` in the driver) point
//! downwards by construction and are not read. `main.rs` is the binary, above every layer.
// A test file: its helpers fail the test the way the test itself does.
#![allow(clippy::unwrap_used, clippy::panic)]

mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use source::{SourceFile, find_word, is_ident, rust_files};

/// The layers, lowest first: a module entry (a module path under `crate`, covering its child
/// modules unless one is listed itself) and its layer's name. Keep in step with the table in
/// docs/development/reconcile-pipeline.md.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundations",
        &["error", "metrics", "lean", "gateway_api", "replicas"],
    ),
    ("I/O edges", &["datastore", "tenant", "infrastructure"]),
    ("the runtime's memory", &["memory"]),
    ("the runtime's context", &["context"]),
    ("pipeline: conditions and status", &["reconcile::status"]),
    ("pipeline: the pass's report", &["reconcile::report"]),
    ("pipeline: the pass's own object", &["reconcile::kcp"]),
    ("pipeline: validate", &["reconcile::validate"]),
    (
        "pipeline: rotation state",
        &[
            "reconcile::plan::rotation",
            "reconcile::plan::sa_rotation",
            "reconcile::plan::ca_rotation",
            "reconcile::plan::encryption_rotation",
        ],
    ),
    ("pipeline: observe", &["reconcile::observe"]),
    ("pipeline: plan", &["reconcile::plan"]),
    ("pipeline: apply", &["reconcile::apply"]),
    ("pipeline: gates", &["reconcile::gates"]),
    ("pipeline: delete", &["reconcile::delete"]),
    ("pipeline: driver", &["reconcile"]),
    ("wiring", &["controller"]),
    ("process", &["leader", "server", ""]),
];

/// The module of the file `path` relative to `src/` (`""` for `lib.rs`).
fn module_of(path: &Path) -> String {
    let mut parts: Vec<String> = path
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts.join("::")
}

/// The entry of [`LAYERS`] covering `module`, with its layer's index.
fn entry_of(module: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, (_, entries))| entries.iter().map(move |e| (layer, *e)))
        .filter(|(_, e)| e.is_empty() || module == *e || module.starts_with(&format!("{e}::")))
        .max_by_key(|(_, e)| e.len())
}

/// Every path starting with `crate`, `super` or `self` in `file`'s code, with braces of a `use`
/// group expanded (`super::{a, b::c}` gives `super::a` and `super::b::c`), and the index where
/// it starts.
fn paths(file: &SourceFile) -> Vec<(usize, String)> {
    let code = &file.code;
    let mut out = Vec::new();
    for head in ["crate", "super", "self"] {
        for start in find_word(code, head) {
            if start > 0 && code[start - 1] == ':' {
                continue; // `super::super`, `self::x` inside a longer path: read from its head.
            }
            let mut end = start + head.len();
            let mut depth = 0;
            while end < code.len() {
                let c = code[end];
                if is_ident(c)
                    || c == ':'
                    || c == '*'
                    || (depth > 0 && (c == ',' || c.is_whitespace()))
                {
                    end += 1;
                } else if c == '{' && (depth > 0 || code[end - 1] == ':') {
                    depth += 1;
                    end += 1;
                } else if c == '}' && depth > 0 {
                    depth -= 1;
                    end += 1;
                } else {
                    break;
                }
            }
            let text: String = code[start..end]
                .iter()
                .filter(|c| !c.is_whitespace())
                .collect();
            if text.contains("::") {
                out.extend(expand(&text).into_iter().map(|p| (start, p)));
            }
        }
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.trim_end_matches("::").to_owned()];
    };
    let (prefix, inner) = (&path[..open], &path[open + 1..path.len() - 1]);
    let mut items = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[from..]);
    items
        .into_iter()
        .filter(|i| !i.is_empty())
        .flat_map(|i| expand(&format!("{prefix}{i}")))
        .collect()
}

/// The module `path`, written in `module`, names: the longest module of `modules` it starts
/// with.
fn target(module: &str, path: &str, modules: &BTreeSet<String>) -> String {
    let mut segments: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut rest = path.split("::").peekable();
    if rest.peek() == Some(&"crate") {
        rest.next();
        segments.clear();
    }
    for segment in rest {
        match segment {
            "super" => {
                segments.pop();
            }
            "self" | "*" => {}
            name => segments.push(name),
        }
    }
    (0..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

#[test]
fn no_module_uses_a_module_of_a_higher_layer_and_no_uses_form_a_cycle() {
    let src = Path::new("crates/reconciler/src");
    let files: Vec<SourceFile> = rust_files(src)
        .iter()
        .filter(|p| !p.ends_with("main.rs"))
        .map(|p| SourceFile::read(p))
        .collect();
    let module_of_file = |f: &SourceFile| module_of(f.path.strip_prefix(src).unwrap_or(&f.path));
    let modules: BTreeSet<String> = files.iter().map(module_of_file).collect();
    let mut failures = Vec::new();
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for file in &files {
        let module = module_of_file(file);
        let Some((layer, entry)) = entry_of(&module) else {
            failures.push(format!(
                "{}: module `{module}` is in no layer of the table",
                file.path.display()
            ));
            continue;
        };
        for (at, path) in paths(file) {
            let to = target(&module, &path, &modules);
            let Some((to_layer, to_entry)) = entry_of(&to) else {
                continue;
            };
            if to_layer > layer {
                failures.push(format!(
                    "{}:{}: `{path}`: `{module}` ({}) uses `{to}` of a higher layer ({})",
                    file.path.display(),
                    file.line_of(at),
                    LAYERS[layer].0,
                    LAYERS[to_layer].0,
                ));
            }
            if to_entry != entry {
                edges.entry(entry).or_default().insert(to_entry);
            }
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        failures.push(format!("the uses form a cycle: {}", cycle.join(" -> ")));
    }
    assert!(
        failures.is_empty(),
        "layering broken (the table is in crates/reconciler/tests/layers.rs):\n{}",
        failures.join("\n")
    );
}

/// A cycle of `edges`, as the entries along it (the first repeated at the end).
fn find_cycle<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Option<Vec<&'a str>> {
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = path.iter().position(|n| *n == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node);
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// The reader resolves paths as the compiler does.
#[test]
fn paths_resolve_to_their_modules() {
    let modules: BTreeSet<String> = [
        "",
        "context",
        "reconcile",
        "reconcile::plan",
        "reconcile::plan::pki",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(
        target("reconcile::plan::pki", "super::desired_hash", &modules),
        "reconcile::plan"
    );
    assert_eq!(
        target(
            "reconcile::plan",
            "super::super::context::Context",
            &modules
        ),
        "context"
    );
    assert_eq!(
        target("reconcile", "self::plan::pki::Root", &modules),
        "reconcile::plan::pki"
    );
    assert_eq!(
        target("reconcile::plan", "crate::reconcile::object_key", &modules),
        "reconcile"
    );
    assert_eq!(
        expand("super::{a,b::{c,d}}"),
        ["super::a", "super::b::c", "super::b::d"]
    );
    assert_eq!(
        entry_of("reconcile::plan::ca_rotation").map(|e| e.1),
        Some("reconcile::plan::ca_rotation")
    );
    assert_eq!(
        entry_of("reconcile::plan::pki").map(|e| e.1),
        Some("reconcile::plan")
    );
    assert_eq!(entry_of("datastore::auth").map(|e| e.1), Some("datastore"));
}
