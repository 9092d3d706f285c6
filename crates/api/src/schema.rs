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
