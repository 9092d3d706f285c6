//! Hand-written schema fragments for fields whose derived schema does not fit a CRD.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value (object, array, string, number, boolean): `x-kubernetes-preserve-unknown-fields`
/// without a type, as the API server requires for untyped values (for example the `value` of
/// a JSON patch operation).
pub(crate) fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Bytes, base64-encoded in JSON (`format: byte`), as Go's `[]byte` fields are.
pub(crate) fn base64_bytes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "byte",
    })
}

/// The derived schema of `T` with every `description` below the top level removed.
///
/// Used for the large embedded core types (`Container`, `Volume`, `Affinity`): they keep
/// their full structural schema (validated and pruned by the API server), but not the
/// upstream field documentation, which would make the two-version CRD several hundred KB
/// larger (the same trade-off as controller-gen's `maxDescLen=0`). Their documentation is the
/// Kubernetes API reference of the same type.
pub(crate) fn compact<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<T>();
    if let Some(object) = schema.as_object_mut() {
        for (key, value) in object.iter_mut() {
            if key != "description" {
                strip_descriptions(value);
            }
        }
    }
    schema
}

fn strip_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.remove("description");
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// `deployment.extraVolumes`: the corev1 `Volume` list schema (see [`compact`]), plus the
/// legacy `secret.name` that users of the Kamaji provider wrote for `secret.secretName`
/// (shared/samples/kamajicontrolplane-cloud-config-v1alpha1.yaml). Accepting it keeps their
/// manifests applying under strict field validation;
/// [`crate::kcp::deserialize_extra_volumes`] turns it into `secretName`.
pub(crate) fn extra_volumes(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = compact::<Option<Vec<k8s_openapi::api::core::v1::Volume>>>(generator);
    if let Some(secret_properties) = schema
        .as_object_mut()
        .and_then(|s| s.get_mut("items"))
        .and_then(|items| items.get_mut("properties"))
        .and_then(|p| p.get_mut("secret"))
        .and_then(|secret| secret.get_mut("properties"))
        .and_then(serde_json::Value::as_object_mut)
    {
        secret_properties.insert(
            "name".to_owned(),
            serde_json::json!({
                "type": "string",
                "description": "Deprecated spelling of secretName, accepted for manifests written for the Kamaji provider; the controller uses it when secretName is empty.",
            }),
        );
    }
    schema
}
