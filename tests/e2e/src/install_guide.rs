//! The install guide, `docs/install.md`, as the `clusterctl` suite follows it (issue 48). Each
//! step of the guide is a fenced code block after a `<!-- step: <id> -->` marker; [`step`]
//! reads it from the page, so the suite runs the page's own commands and files, and fails when
//! the page and the suite no longer have the same steps ([`STEPS`]). What the suite changes
//! (it has no network and its own repository folder) is listed with each function here.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail, ensure};
use kamaji_testenv::workspace_root;
use serde_json::Value;

/// The guide's steps, in the page's order.
pub const STEPS: [&str; 9] = [
    "components",
    "repository",
    "clusterctl-config",
    "init",
    "datastore",
    "namespace",
    "generate",
    "apply",
    "wait",
];

/// The guide's page.
#[must_use]
pub fn page() -> PathBuf {
    workspace_root().join("docs/install.md")
}

/// Every step of the page, `(id, the code block's text)`, in the page's order.
///
/// # Errors
/// When the page cannot be read, or a marker has no code block after it.
pub fn steps() -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(page()).with_context(|| page().display().to_string())?;
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("<!-- step: ") {
        rest = &rest[at + "<!-- step: ".len()..];
        let (id, after) = rest.split_once(" -->").context("an unclosed step marker")?;
        let fence = after
            .find("```")
            .with_context(|| format!("step {id}: no code block"))?;
        let block = &after[fence + 3..];
        let (_, body) = block
            .split_once('\n')
            .with_context(|| format!("step {id}: an empty code block"))?;
        let (body, _) = body
            .split_once("```")
            .with_context(|| format!("step {id}: an unclosed code block"))?;
        out.push((id.to_owned(), body.to_owned()));
        rest = after;
    }
    Ok(out)
}

/// The code block of step `id`.
///
/// # Errors
/// When the page has no such step, or its steps are not [`STEPS`] in that order.
pub fn step(id: &str) -> Result<String> {
    let steps = steps()?;
    let ids: Vec<&str> = steps.iter().map(|(i, _)| i.as_str()).collect();
    ensure!(
        ids == STEPS,
        "docs/install.md has the steps {ids:?}; the clusterctl suite follows {STEPS:?}: change both"
    );
    steps
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, body)| body)
        .with_context(|| format!("no step {id}"))
}

/// The one command of shell step `id`, as words (`#` comments and a trailing `> file` left
/// out), and the file its output is redirected to, if any.
///
/// # Errors
/// When the step does not hold exactly one command, or quotes one (the guide keeps its
/// commands plain, so that they split on spaces).
pub fn command(id: &str) -> Result<(Vec<String>, Option<String>)> {
    let body = step(id)?;
    let lines: Vec<&str> = body
        .lines()
        .map(|l| l.split(" #").next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let [line] = lines.as_slice() else {
        bail!("step {id} holds {} commands, not one: {body}", lines.len());
    };
    ensure!(
        !line.contains(['"', '\'', '\\', '|', ';', '&']),
        "step {id} quotes or chains: {line}"
    );
    let (command, output) = match line.split_once(" > ") {
        Some((c, o)) => (c, Some(o.trim().to_owned())),
        None => (*line, None),
    };
    Ok((
        command.split_whitespace().map(str::to_owned).collect(),
        output,
    ))
}

/// The file `kubectl apply -f <file>` of step `id` applies (relative to the repository).
///
/// # Errors
/// When the step is not such a command.
pub fn applied_file(id: &str) -> Result<String> {
    match command(id)?.0.as_slice() {
        [kubectl, apply, f, file] if kubectl == "kubectl" && apply == "apply" && f == "-f" => {
            Ok(file.clone())
        }
        other => bail!("step {id} is not `kubectl apply -f <file>`: {other:?}"),
    }
}

/// The documents of the etcd DataStore example named by the `datastore` step, with its
/// placeholders filled in: the etcd endpoint, the CA's certificate and key, and a client
/// certificate and key. Fails when a value it fills was not a placeholder of the file (the
/// guide would then tell users to edit something else), or when one is left.
///
/// # Errors
/// As said, or when the file cannot be read.
pub fn datastore_documents(
    endpoint: &str,
    ca: (&str, &str),
    client: (&str, &str),
) -> Result<Vec<Value>> {
    let file = applied_file("datastore")?;
    let text =
        std::fs::read_to_string(workspace_root().join(&file)).with_context(|| file.clone())?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc: Value = serde::Deserialize::deserialize(doc)?;
        if !doc.is_null() {
            docs.push(doc);
        }
    }
    let mut filled = 0;
    for doc in &mut docs {
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let values: Vec<(&str, &str)> = match (doc["kind"].as_str(), name.as_str()) {
            (Some("Secret"), "etcd-ca") => {
                vec![("/stringData/tls.crt", ca.0), ("/stringData/tls.key", ca.1)]
            }
            (Some("Secret"), "etcd-client") => {
                vec![
                    ("/stringData/tls.crt", client.0),
                    ("/stringData/tls.key", client.1),
                ]
            }
            (Some("DataStore"), _) => vec![("/spec/endpoints/0", endpoint)],
            _ => vec![],
        };
        for (pointer, value) in values {
            let slot = doc
                .pointer_mut(pointer)
                .with_context(|| format!("{file}: no {pointer} in {name}"))?;
            let placeholder = slot.as_str().unwrap_or_default();
            ensure!(
                placeholder.contains("replace with") || placeholder.contains("example.com"),
                "{file}: {name} {pointer} is not a placeholder: {placeholder}"
            );
            *slot = Value::String(value.to_owned());
            filled += 1;
        }
    }
    ensure!(filled == 5, "{file}: filled {filled} placeholders, not 5");
    let all = serde_json::to_string(&docs)?;
    ensure!(
        !all.contains("replace with") && !all.contains("example.com"),
        "{file}: a placeholder is left"
    );
    Ok(docs)
}
