//! Server-side apply of objects given as JSON or YAML, of any kind the API server knows.

use anyhow::{Context as _, Result};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt as _};

/// Server-side applies one object given as JSON (`apiVersion`, `kind`, `metadata.name`, and
/// `metadata.namespace` when namespaced) with `field_manager`, forcing conflicts.
///
/// # Errors
/// When the object has no `apiVersion`/`kind` or the API server rejects it (the message names
/// the kind and the object).
pub async fn apply_value(
    client: &Client,
    value: &serde_json::Value,
    field_manager: &str,
) -> Result<DynamicObject> {
    let obj: DynamicObject = serde_json::from_value(value.clone())?;
    let types = obj
        .types
        .clone()
        .context("object without apiVersion/kind")?;
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", types.api_version.as_str()));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
    let api: Api<DynamicObject> = match obj.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        &obj.name_any(),
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("apply {} {}", types.kind, obj.name_any()))
}

/// Server-side applies every document of a YAML stream, in order (empty documents skipped).
///
/// # Errors
/// On a YAML error or the first object the API server rejects.
pub async fn apply_yaml(client: &Client, yaml: &str, field_manager: &str) -> Result<()> {
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !v.is_null() {
            apply_value(client, &v, field_manager).await?;
        }
    }
    Ok(())
}
