//! Drift: does a live object still carry what kamaji-rs set on it? (pure)
//!
//! A pass skips writing an object whose stored desired-hash annotation equals the hash of
//! what it would write. That alone misses changes made by others after the write (`kubectl
//! scale deployment --replicas=0`, an edited argument, a removed volume): the annotation stays
//! and the live object no longer matches. [`drifted`] compares the desired object with the
//! live one, field by field, and says which field differs; the caller then applies again.
//!
//! The comparison is a containment: every value kamaji-rs sets must be in the live object;
//! what others add (defaults the API server fills in, allocated node ports, annotations of
//! other controllers, extra list items another field manager owns) does not count, because a
//! server-side apply would not remove it either and the pass would write forever.
//!
//! - maps: every key of the desired map, compared recursively; `null`, empty maps/lists and
//!   zero values (`0`, `false`, `""`) in the desired object match an absent field (Go's
//!   `omitempty` leaves them out when the object is stored);
//! - lists of scalars (`args`, `command`): equal as a whole, since server-side apply owns
//!   them atomically;
//! - lists of objects (`containers`, `volumes`, `ports`): every desired item is contained
//!   in the live item of the same `name`, or, for items without a name, in some live item;
//! - numbers by value, everything else by equality;
//! - `metadata`: only `labels`, `annotations` and `ownerReferences` (the rest is the
//!   server's), and `status` never.

use serde_json::Value;

/// The path of the first field where `live` no longer holds what `desired` sets, or `None`
/// when it holds everything. Both are the JSON form of the same kind of object.
#[must_use]
pub fn drifted(desired: &Value, live: &Value) -> Option<String> {
    let (Value::Object(d), Value::Object(l)) = (desired, live) else {
        return (!contains(desired, live)).then(String::new);
    };
    for (key, want) in d {
        match key.as_str() {
            "status" | "apiVersion" | "kind" => {}
            "metadata" => {
                for part in ["labels", "annotations", "ownerReferences"] {
                    let want = want.get(part).unwrap_or(&Value::Null);
                    let have = live
                        .get("metadata")
                        .and_then(|m| m.get(part))
                        .unwrap_or(&Value::Null);
                    if let Some(path) = first_difference(want, have, &format!("metadata.{part}")) {
                        return Some(path);
                    }
                }
            }
            _ => {
                let have = l.get(key).unwrap_or(&Value::Null);
                if let Some(path) = first_difference(want, have, key) {
                    return Some(path);
                }
            }
        }
    }
    None
}

fn first_difference(want: &Value, have: &Value, path: &str) -> Option<String> {
    match (want, have) {
        (w, _) if unset(w) => None,
        // Go's `omitempty` drops zero values when the object is stored.
        (w, Value::Null) if zero(w) => None,
        (Value::Object(w), Value::Object(h)) => w.iter().find_map(|(k, v)| {
            first_difference(v, h.get(k).unwrap_or(&Value::Null), &format!("{path}.{k}"))
        }),
        (Value::Array(w), Value::Array(h)) => {
            if w.iter().all(|x| !x.is_object()) {
                return (w != h).then(|| path.to_owned());
            }
            w.iter().enumerate().find_map(|(i, item)| {
                // Items with a name (containers, volumes, ports, env) are matched by it, so
                // the path says which field of which item differs.
                if let Some(name) = item.get("name").and_then(Value::as_str) {
                    let at = format!("{path}[{name}]");
                    return match h
                        .iter()
                        .find(|c| c.get("name").and_then(Value::as_str) == Some(name))
                    {
                        Some(candidate) => first_difference(item, candidate, &at),
                        None => Some(at),
                    };
                }
                (!h.iter().any(|candidate| contains(item, candidate)))
                    .then(|| format!("{path}[{i}]"))
            })
        }
        (Value::Number(w), Value::Number(h)) => (w.as_f64() != h.as_f64()).then(|| path.to_owned()),
        (w, h) => (w != h).then(|| path.to_owned()),
    }
}

/// `null` or an empty map or list: what serialisation leaves out.
fn unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `false`, `""` or `0`.
fn zero(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn contains(want: &Value, have: &Value) -> bool {
    first_difference(want, have, "").is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64, args: &[&str]) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "demo", "labels": {"a": "b"}, "annotations": {"h": "1"}},
            "spec": {
                "replicas": replicas,
                "template": {"spec": {
                    "containers": [{"name": "kube-apiserver", "args": args, "ports": [{"containerPort": 6443}]}],
                    "volumes": [{"name": "ca", "secret": {"secretName": "demo-ca", "defaultMode": 384}}],
                }},
            },
        })
    }

    #[test]
    fn what_the_server_adds_is_not_drift() {
        let desired = deployment(2, &["--a=1"]);
        let mut live = desired.clone();
        live["metadata"]["uid"] = json!("u");
        live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("3");
        live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
        live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] =
            json!("/dev/termination-log");
        live["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "someone-elses-sidecar"}));
        live["spec"]["progressDeadlineSeconds"] = json!(600);
        live["status"] = json!({"replicas": 2});
        assert_eq!(drifted(&desired, &live), None);
    }

    #[test]
    fn scaled_by_hand_is_drift() {
        let desired = deployment(2, &["--a=1"]);
        let live = deployment(0, &["--a=1"]);
        assert_eq!(drifted(&desired, &live).as_deref(), Some("spec.replicas"));
    }

    #[test]
    fn an_edited_argument_list_is_drift() {
        let desired = deployment(2, &["--a=1", "--b=2"]);
        for args in [&["--a=1"][..], &["--a=1", "--b=3"], &["--b=2", "--a=1"]] {
            let live = deployment(2, args);
            assert!(drifted(&desired, &live).is_some(), "{args:?}");
        }
    }

    #[test]
    fn a_removed_volume_or_label_is_drift() {
        let desired = deployment(2, &[]);
        let mut live = desired.clone();
        live["spec"]["template"]["spec"]["volumes"] = json!([]);
        assert!(drifted(&desired, &live).unwrap().contains("volumes"));
        let mut live = desired.clone();
        live["metadata"]["labels"] = json!({});
        assert_eq!(
            drifted(&desired, &live).as_deref(),
            Some("metadata.labels.a")
        );
    }

    #[test]
    fn secret_data_is_compared_exactly() {
        let desired = json!({"metadata": {"name": "s"}, "type": "x", "data": {"tls.crt": "QQ=="}});
        let mut live = desired.clone();
        assert_eq!(drifted(&desired, &live), None);
        live["data"]["tls.crt"] = json!("Qg==");
        assert_eq!(drifted(&desired, &live).as_deref(), Some("data.tls.crt"));
    }

    #[test]
    fn absent_empty_and_null_desired_fields_match() {
        let desired =
            json!({"spec": {"a": null, "b": {}, "c": [], "d": 1.0, "e": 0, "f": false, "g": ""}});
        let live = json!({"spec": {"d": 1}});
        assert_eq!(drifted(&desired, &live), None);
        let live = json!({"spec": {"d": 1, "e": 2}});
        assert_eq!(drifted(&desired, &live).as_deref(), Some("spec.e"));
    }
}
