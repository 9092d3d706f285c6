//! Rotation of the key the tenant's Secrets are encrypted with at rest (pure): the next step
//! of a rotation the user requested with [`ENCRYPTION_KEY_ROTATION_ANNOTATION`], read back
//! from `<cluster>-encryption.config`, following Kubernetes' "Rotating a decryption key" task.
//!
//! The state lives in that Secret, so a manager restart at any point resumes it:
//!
//! | phase | `EncryptionConfiguration` keys (writer first) | [`PHASE_ANNOTATION`] |
//! |---|---|---|
//! | none / done | current (the request done on [`ENCRYPTION_KEY_ROTATION_ANNOTATION`]) | absent |
//! | reading | current, next | `reading` |
//! | writing | next, current | `writing` |
//! | dropping | next (every Secret rewritten before) | `dropping`; once settled, removed |
//!
//! A phase moves on only once it is *settled*: the Deployment has rolled out and every
//! control-plane pod, terminating ones included, carries the configuration's fingerprint
//! ([`ENCRYPTION_KEYS_ANNOTATION`]). So no API server that cannot read the next key still
//! runs when the next key starts writing. Once the next key writes everywhere, every Secret of
//! the tenant is rewritten through its API (an update of an object read with a key other than
//! the writer is stored anew), and only then is the previous key dropped.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION;
use kamaji_bootstrap::encryption::{self, CONFIGURATION_KEY, Key};
use sha2::{Digest, Sha256};

use super::sa_rotation::{SETTLE_RECHECK, annotation, text};
use crate::error::Error;
use crate::reconcile::status::Cond;

/// Pod-template annotation: fingerprint of the encryption configuration the pod reads.
pub const ENCRYPTION_KEYS_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/kamaji-rs-encryption-keys";
/// Annotation of `<cluster>-encryption.config` while a rotation runs: `reading` or `writing`.
pub const PHASE_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/encryption-key-rotation-phase";

/// The encryption keys of one pass (the default: no rotation, nothing to write).
#[derive(Debug, Clone, Default)]
pub struct EncryptionKeys {
    /// `<cluster>-encryption.config` as this pass leaves it, when it changes.
    pub write: Option<Secret>,
    /// Every Secret of the tenant must be rewritten before [`EncryptionKeys::write`] (which
    /// drops the previous key).
    pub migrate: bool,
    /// The Secret of the kubeconfig the rewrite uses (the provider's `system:masters` one).
    pub migrate_with: String,
    /// `EncryptionKeyRotated`, once a rotation was requested.
    pub condition: Option<Cond>,
    /// When to look again for this rotation (none when nothing waits).
    pub due: Option<Duration>,
}

/// What [`plan`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The stored `<cluster>-encryption.config`.
    pub stored: &'a Secret,
    /// The request: the KamajiControlPlane's annotation value.
    pub request: Option<&'a str>,
    /// Fingerprints of the control-plane pods (terminating included), when listed, and
    /// whether the Deployment has rolled out.
    pub pods: Option<(&'a [Option<String>], bool)>,
}

/// `sha256:` of an encryption configuration, for [`ENCRYPTION_KEYS_ANNOTATION`].
#[must_use]
pub fn fingerprint(configuration: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(configuration.as_bytes()))
    )
}

/// The configuration stored in `secret`.
///
/// # Errors
/// [`Error::Pki`] when it is missing or does not parse.
pub fn configuration_of(secret: &Secret) -> Result<(String, Vec<Key>), Error> {
    let unusable = |reason: String| {
        Error::Pki(crate::error::PkiError::UnusableRoot {
            name: secret.metadata.name.clone().unwrap_or_default(),
            reason,
        })
    };
    let config = text(secret, CONFIGURATION_KEY)
        .ok_or_else(|| unusable(format!("{CONFIGURATION_KEY} missing")))?;
    let keys = encryption::keys_of(&config).map_err(|e| unusable(e.to_string()))?;
    Ok((config, keys))
}

/// Whether a rotation is under way (the observe step then lists the pods).
#[must_use]
pub fn under_way(stored: Option<&Secret>, request: Option<&str>) -> bool {
    stored.is_some_and(|s| {
        annotation(s, PHASE_ANNOTATION).is_some()
            || request.is_some_and(|r| {
                annotation(s, ENCRYPTION_KEY_ROTATION_ANNOTATION).as_deref() != Some(r)
            })
    })
}

/// The name after the highest `key-<n>` of `keys`.
fn next_name(keys: &[Key]) -> String {
    let n = keys
        .iter()
        .filter_map(|k| k.name.strip_prefix("key-")?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    format!("key-{}", n + 1)
}

/// `stored` with `keys` (writer first) and the phase annotation set (or removed).
fn with(stored: &Secret, keys: &[Key], request: &str, phase: Option<&str>) -> Secret {
    let mut s = stored.clone();
    s.data.get_or_insert_default().insert(
        CONFIGURATION_KEY.into(),
        ByteString(encryption::configuration(keys).into_bytes()),
    );
    let annotations = s.metadata.annotations.get_or_insert_default();
    annotations.insert(ENCRYPTION_KEY_ROTATION_ANNOTATION.into(), request.into());
    match phase {
        Some(p) => annotations.insert(PHASE_ANNOTATION.into(), p.into()),
        None => annotations.remove(PHASE_ANNOTATION),
    };
    s.metadata.managed_fields = None;
    s.metadata.resource_version = None;
    s
}

fn running(reason: &'static str, message: String) -> Cond {
    Cond::no(types::ENCRYPTION_KEY_ROTATED, reason, message)
}

/// The next step of a requested rotation of the encryption key.
///
/// # Errors
/// [`Error::Pki`] when the stored configuration is unusable or no key can be generated.
pub fn plan(inputs: &Inputs<'_>) -> Result<EncryptionKeys, Error> {
    let stored = inputs.stored;
    let (config, keys) = configuration_of(stored)?;
    let fp = fingerprint(&config);
    let settled = inputs.pods.is_some_and(|(pods, rolled_out)| {
        rolled_out && pods.iter().all(|p| p.as_deref() == Some(fp.as_str()))
    });
    let wait = if settled { None } else { Some(SETTLE_RECHECK) };
    let recorded = annotation(stored, ENCRYPTION_KEY_ROTATION_ANNOTATION);
    let phase = annotation(stored, PHASE_ANNOTATION);
    let mut out = EncryptionKeys::default();
    // A rotation under way finishes even when the annotation is removed meanwhile.
    let Some(request) = inputs.request.or(phase.as_ref().and(recorded.as_deref())) else {
        return Ok(out);
    };
    let rolling = |reason, message: String| {
        (
            Some(running(reason, message)),
            wait.or(Some(Duration::from_secs(1))),
        )
    };
    match (phase.as_deref(), keys.as_slice()) {
        (Some("reading"), [current, next, ..]) => {
            let message = format!("the API servers roll to read {} as well", next.name);
            (out.condition, out.due) = rolling(reasons::READING_NEW_KEY, message);
            if settled {
                out.write = Some(with(
                    stored,
                    &[next.clone(), current.clone()],
                    request,
                    Some("writing"),
                ));
                out.condition = Some(running(
                    reasons::WRITING_WITH_NEW_KEY,
                    format!("the API servers roll to write with {}", next.name),
                ));
            }
        }
        (Some("writing"), [next, ..]) => {
            let message = format!("the API servers roll to write with {}", next.name);
            (out.condition, out.due) = rolling(reasons::WRITING_WITH_NEW_KEY, message);
            if settled {
                out.migrate = true;
                out.write = Some(with(
                    stored,
                    std::slice::from_ref(next),
                    request,
                    Some("dropping"),
                ));
                out.condition = Some(running(
                    reasons::DROPPING_PREVIOUS_KEY,
                    format!(
                        "every Secret is rewritten with {}; the API servers roll without the \
                         previous key",
                        next.name
                    ),
                ));
            }
        }
        (Some("dropping"), [next]) => {
            let message = format!(
                "every Secret is rewritten with {}; the API servers roll without the previous key",
                next.name
            );
            (out.condition, out.due) = rolling(reasons::DROPPING_PREVIOUS_KEY, message);
            if settled {
                out.write = Some(with(stored, std::slice::from_ref(next), request, None));
                out.condition = Some(rotated(request, &next.name));
                out.due = None;
            }
        }
        (None, [current]) if recorded.as_deref() == Some(request) => {
            out.condition = Some(rotated(request, &current.name));
        }
        _ => {
            // A new request (or a phase that does not match its keys: start again from the
            // key that writes).
            let current = keys[0].clone();
            let next = Key::generate(&next_name(&keys))?;
            out.condition = Some(running(
                reasons::READING_NEW_KEY,
                format!("the API servers roll to read {} as well", next.name),
            ));
            out.write = Some(with(stored, &[current, next], request, Some("reading")));
            out.due = Some(SETTLE_RECHECK);
        }
    }
    Ok(out)
}

fn rotated(request: &str, key: &str) -> Cond {
    Cond::yes(
        types::ENCRYPTION_KEY_ROTATED,
        reasons::ROTATED,
        format!(
            "rotation {request} done: every Secret is encrypted with {key}, the previous key is \
             dropped"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn stored() -> Secret {
        let config = encryption::configuration(&[Key::generate("key-1").unwrap()]);
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("demo-encryption.config".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                CONFIGURATION_KEY.to_owned(),
                ByteString(config.into_bytes()),
            )])),
            ..Secret::default()
        }
    }

    fn names(s: &Secret) -> Vec<String> {
        configuration_of(s)
            .unwrap()
            .1
            .into_iter()
            .map(|k| k.name)
            .collect()
    }

    /// Each pod runs the configuration of `s`, rolled out.
    fn settled(s: &Secret) -> Vec<Option<String>> {
        vec![Some(fingerprint(&configuration_of(s).unwrap().0)); 2]
    }

    /// A request walks reading → writing → migrating and dropping → done, each step only once
    /// every pod runs the previous one; the previous key stays readable until every Secret is
    /// rewritten; the same request again does nothing.
    #[test]
    fn a_rotation_reads_then_writes_then_rewrites_then_drops() {
        let s0 = stored();
        let idle = plan(&Inputs {
            stored: &s0,
            request: None,
            pods: None,
        })
        .unwrap();
        assert!(idle.write.is_none() && idle.condition.is_none());

        let step = |s: &Secret, pods: &[Option<String>]| {
            plan(&Inputs {
                stored: s,
                request: Some("r1"),
                pods: Some((pods, true)),
            })
            .unwrap()
        };
        let start = step(&s0, &settled(&s0));
        let s1 = start.write.unwrap();
        assert_eq!(names(&s1), ["key-1", "key-2"], "the old key still writes");
        assert!(!start.migrate);
        // Pods of the old configuration: nothing moves.
        let waiting = step(&s1, &settled(&s0));
        assert!(waiting.write.is_none());
        assert_eq!(waiting.due, Some(SETTLE_RECHECK));
        assert_eq!(waiting.condition.unwrap().reason, reasons::READING_NEW_KEY);
        let s2 = step(&s1, &settled(&s1)).write.unwrap();
        assert_eq!(names(&s2), ["key-2", "key-1"], "the new key writes");
        assert!(step(&s2, &settled(&s1)).write.is_none());
        let dropping = step(&s2, &settled(&s2));
        assert!(
            dropping.migrate,
            "every Secret is rewritten before the old key goes"
        );
        let s3 = dropping.write.unwrap();
        assert_eq!(names(&s3), ["key-2"]);
        assert_eq!(
            configuration_of(&s3).unwrap().1[0].secret,
            configuration_of(&s1).unwrap().1[1].secret,
            "the new key is the one generated at the start"
        );
        let rolling = step(&s3, &settled(&s2));
        assert!(rolling.write.is_none());
        assert_eq!(
            rolling.condition.unwrap().reason,
            reasons::DROPPING_PREVIOUS_KEY
        );
        let finishing = step(&s3, &settled(&s3));
        assert!(!finishing.migrate && finishing.due.is_none());
        assert_eq!(finishing.condition.unwrap().reason, reasons::ROTATED);
        let s4 = finishing.write.unwrap();
        assert_eq!(names(&s4), ["key-2"]);
        assert_eq!(
            fingerprint(&configuration_of(&s4).unwrap().0),
            fingerprint(&configuration_of(&s3).unwrap().0),
            "finishing rolls nothing"
        );
        // Done: nothing to write, pods not needed.
        let done = plan(&Inputs {
            stored: &s4,
            request: Some("r1"),
            pods: None,
        })
        .unwrap();
        assert!(done.write.is_none() && !done.migrate && done.due.is_none());
        assert_eq!(done.condition.unwrap().reason, reasons::ROTATED);
        assert!(!under_way(Some(&s4), Some("r1")));
        assert!(under_way(Some(&s4), Some("r2")));
        // A later request starts again from key-2.
        let again = plan(&Inputs {
            stored: &s4,
            request: Some("r2"),
            pods: Some((&settled(&s4), true)),
        })
        .unwrap();
        assert_eq!(names(&again.write.unwrap()), ["key-2", "key-3"]);
    }
}
