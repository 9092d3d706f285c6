//! The field table (`crates/api/FIELDS.md`) is complete and honest: every field of the
//! `KamajiControlPlane` spec, walked from the CRD's schema, is covered by a row that says it is
//! implemented or refused, and each row names the tests that prove it, which must exist as
//! test functions in the workspace. A field added to the API without a row, a row naming a
//! field the API no longer has, or a row whose proof is not a test fails here.

// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One row of the table.
#[derive(Debug)]
struct Row {
    path: String,
    status: String,
    tests: Vec<String>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/api sits two levels below the workspace root")
        .to_path_buf()
}

/// Every leaf path below `spec` of the storage version's schema (`spec.network.ingress.hostname`;
/// array items without an index).
fn schema_paths() -> BTreeSet<String> {
    let crd = serde_json::to_value(kamaji_api::crd::kamaji_control_plane()).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["storage"] == true)
        .unwrap()
        .clone();
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut out = BTreeSet::new();
    walk("spec", spec, &mut out);
    out
}

fn walk(path: &str, schema: &Value, out: &mut BTreeSet<String>) {
    if let Some(items) = schema.get("items").filter(|_| schema["type"] == "array") {
        return walk(path, items, out);
    }
    match schema.get("properties").and_then(Value::as_object) {
        Some(props) if !props.is_empty() => {
            for (name, sub) in props {
                walk(&format!("{path}.{name}"), sub, out);
            }
        }
        _ => {
            out.insert(path.to_owned());
        }
    }
}

/// The rows of FIELDS.md: `| `spec.x` | implemented or refused | `test`, `test` | notes |`.
fn table() -> Vec<Row> {
    let text = std::fs::read_to_string(workspace_root().join("crates/api/FIELDS.md")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("| `spec"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert!(cells.len() >= 3, "a row needs field, status and proof: {l}");
            let tests = cells[2]
                .split(',')
                .map(|t| t.trim().trim_matches('`').to_owned())
                .filter(|t| !t.is_empty())
                .collect();
            Row {
                path: cells[0].trim_matches('`').to_owned(),
                status: cells[1].to_owned(),
                tests,
            }
        })
        .collect()
}

/// The names of the workspace's test functions (`#[test]`, `#[tokio::test]`,
/// `#[kamaji_e2e::test]`), from the sources of `crates/` and `tests/`.
fn test_functions() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let root = workspace_root();
    let mut dirs = vec![root.join("crates"), root.join("tests")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    dirs.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let mut test_attribute = false;
            for line in std::fs::read_to_string(&p).unwrap().lines() {
                let l = line.trim();
                if l.starts_with("#[") {
                    test_attribute |= l.contains("test]") || l.contains("::test(");
                    continue;
                }
                if l.starts_with("//") {
                    continue;
                }
                let signature = l
                    .strip_prefix("async fn ")
                    .or_else(|| l.strip_prefix("fn "));
                if test_attribute && let Some(rest) = signature {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    names.insert(name);
                }
                test_attribute = false;
            }
        }
    }
    names
}

#[test]
fn every_spec_field_is_implemented_or_refused_with_a_test_that_proves_it() {
    let paths = schema_paths();
    let rows = table();
    let tests = test_functions();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for row in &rows {
        if !seen.insert(row.path.clone()) {
            problems.push(format!("{}: listed twice", row.path));
        }
        if !["implemented", "refused"].contains(&row.status.as_str()) {
            problems.push(format!(
                "{}: status {:?} is neither implemented nor refused",
                row.path, row.status
            ));
        }
        let prefix = format!("{}.", row.path);
        if !paths
            .iter()
            .any(|p| *p == row.path || p.starts_with(&prefix))
        {
            problems.push(format!("{}: no such field in the schema", row.path));
        }
        if row.tests.is_empty() {
            problems.push(format!("{}: no test named", row.path));
        }
        for t in &row.tests {
            if !tests.contains(t) {
                problems.push(format!("{}: {t} is not a test function", row.path));
            }
        }
    }
    for p in &paths {
        let covered = rows
            .iter()
            .any(|r| *p == r.path || p.starts_with(&format!("{}.", r.path)));
        if !covered {
            problems.push(format!("{p}: not in crates/api/FIELDS.md"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The walk itself: a known leaf, a field below an array, and a subtree cut at a
/// Kubernetes type are where the table expects them.
#[test]
fn the_schema_walk_finds_leaves_below_objects_and_arrays() {
    let paths = schema_paths();
    assert!(paths.contains("spec.network.ingress.hostname"));
    assert!(paths.contains("spec.network.additionalServicePorts.name"));
    assert!(paths.contains("spec.replicas"));
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("spec.deployment.affinity."))
    );
    assert!(test_functions().contains("the_schema_walk_finds_leaves_below_objects_and_arrays"));
}
