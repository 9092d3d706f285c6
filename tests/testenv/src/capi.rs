//! Wiring the Cluster API core manager: CRD conversion and admission webhooks served on
//! loopback with a certificate from the test CA.

use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// Reads every CRD in the `*.yaml` files of `dir` (multi-document files allowed), sorted by
/// file name.
pub(crate) fn read_crds(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    read_crds_with(dir, |_| {})
}

/// [`read_crds`] with the `description` of every schema node removed: what controller-gen's
/// `crd:maxDescLen=0` generates. For the Cluster API CRDs, whose descriptions are about two
/// thirds of their 1.7 MB of JSON and serve only `kubectl explain`: without them the
/// management API server's start (apply, validation, `OpenAPI`, CEL, garbage collection) costs
/// less CPU in each of the fifty or so environments of a `make test` (2026-12-05, the
/// `local_cluster` start: 6.0 against 7.1 CPU-seconds, three runs each). kamaji-rs's own CRDs
/// are always installed as generated.
pub(crate) fn read_crds_without_descriptions(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    read_crds_with(dir, |crd| {
        if let Some(versions) = crd
            .pointer_mut("/spec/versions")
            .and_then(Value::as_array_mut)
        {
            for v in versions {
                if let Some(schema) = v.get_mut("schema") {
                    strip_descriptions(schema);
                }
            }
        }
    })
}

/// Removes every `description` keyword (a string; a property named `description` is an
/// object under `properties` and stays) from a JSON schema, recursively.
fn strip_descriptions(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("description").is_some_and(Value::is_string) {
                map.remove("description");
            }
            map.values_mut().for_each(strip_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

fn read_crds_with(dir: &Path, edit: impl Fn(&mut Value)) -> Result<Vec<CustomResourceDefinition>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("read CRD directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let mut v: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("parse {}", file.display()))?;
            if v.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition") {
                edit(&mut v);
                out.push(
                    serde_json::from_value(v)
                        .with_context(|| format!("decode CRD in {}", file.display()))?,
                );
            }
        }
    }
    Ok(out)
}

/// Points a multi-version CRD's conversion at `https://127.0.0.1:<port>/convert`.
pub(crate) fn set_conversion_webhook(
    crd: &mut CustomResourceDefinition,
    port: u16,
    ca_pem: &str,
) -> Result<()> {
    if crd.spec.versions.len() < 2 {
        return Ok(());
    }
    crd.spec.conversion = Some(serde_json::from_value(json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/convert"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            }
        }
    }))?);
    Ok(())
}

/// Admission webhook configurations of a provider, rewritten from in-cluster Service
/// references to `https://127.0.0.1:<port><path>`.
pub(crate) struct Webhooks {
    pub mutating: Vec<MutatingWebhookConfiguration>,
    pub validating: Vec<ValidatingWebhookConfiguration>,
}

pub(crate) fn read_webhooks(
    file: &Path,
    port: u16,
    ca_pem: &str,
    prefix: &str,
) -> Result<Webhooks> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("read webhook manifests {}", file.display()))?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut out = Webhooks {
        mutating: vec![],
        validating: vec![],
    };
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut v: Value = serde::Deserialize::deserialize(doc)?;
        let kind = v
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        v["metadata"]["name"] = json!(format!(
            "{prefix}-{}",
            v["metadata"]["name"].as_str().unwrap_or("webhooks")
        ));
        if let Some(hooks) = v.get_mut("webhooks").and_then(Value::as_array_mut) {
            for hook in hooks {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or("/")
                    .to_owned();
                hook["clientConfig"] = json!({
                    "url": format!("https://127.0.0.1:{port}{path}"),
                    "caBundle": ca,
                });
            }
        }
        match kind.as_str() {
            "MutatingWebhookConfiguration" => out.mutating.push(serde_json::from_value(v)?),
            "ValidatingWebhookConfiguration" => out.validating.push(serde_json::from_value(v)?),
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_go_and_a_property_named_description_stays() {
        let mut schema = json!({
            "type": "object",
            "description": "A thing.",
            "properties": {
                "description": {"type": "string", "description": "Free text."},
                "items": {"type": "array", "items": {"type": "string", "description": "One."}},
                "either": {"anyOf": [{"type": "integer", "description": "A number."}]}
            }
        });
        strip_descriptions(&mut schema);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "string"}},
                    "either": {"anyOf": [{"type": "integer"}]}
                }
            })
        );
    }
}
