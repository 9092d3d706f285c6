//! The tenant's encryption configuration over time (pure): the next step of a rotation of
//! its key, requested with [`ENCRYPTION_KEY_ROTATION_ANNOTATION`] (Kubernetes' "Rotating a
//! decryption key" task), or of a change of `spec.encryptionAtRest.resources`, read back from
//! `<cluster>-encryption.config`. One runs at a time; the other waits.
//!
//! The state lives in that Secret, so a manager restart at any point resumes it:
//!
//! | phase | `EncryptionConfiguration` (writer first) | [`PHASE_ANNOTATION`] |
//! |---|---|---|
//! | none / done | current keys, every resource encrypted | absent |
//! | rotation: reading | current, next | `reading` |
//! | rotation: writing | next, current | `writing` |
//! | rotation: dropping | next (every encrypted object rewritten before) | `dropping` |
//! | resources: reading | added and removed resources written as plain text, read encrypted | `resources` |
//! | resources: writing | removed dropped (their objects rewritten as plain text before), added encrypted | `resources-rewrite` |
//!
//! A phase moves on only once it is *settled*: the Deployment has rolled out and every
//! control-plane pod, terminating ones included, carries the configuration's fingerprint
//! ([`ENCRYPTION_KEYS_ANNOTATION`]). So no API server that cannot read a form (the next key;
//! an added resource encrypted) still runs when that form starts being written. Once the next
//! key writes everywhere, every encrypted object of the tenant is rewritten through its API
//! (an update of an object read with a key other than the writer is stored anew), and only
//! then is the previous key dropped; a removed resource's objects are rewritten as plain text
//! before it leaves the configuration, an added one's once it is written encrypted
//! everywhere ([`RESOURCES_REWRITE_ANNOTATION`]).
//!
//! What the three rotations share (reading the request back, the settled check, the
//! conditions, the note naming a request that waits, writing the configuration Secret) is
//! [`super::rotation`]'s; this module holds the phases and what each writes.

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION;
use kamaji_bootstrap::encryption::{CONFIGURATION_KEY, Configuration, Key, Mode, SECRETS};
use sha2::{Digest, Sha256};

use super::rotation::{self, Pods, Rotation, SETTLE_RECHECK, annotation, text};
use crate::error::Error;
use crate::reconcile::status::Cond;

/// Pod-template annotation: fingerprint of the encryption configuration the pod reads.
pub const ENCRYPTION_KEYS_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/kamaji-rs-encryption-keys";
/// Annotation of `<cluster>-encryption.config` while a change runs: `reading`, `writing`,
/// `dropping` (key rotation), `resources`, `resources-rewrite` (resources).
pub const PHASE_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/encryption-key-rotation-phase";
/// Annotation of `<cluster>-encryption.config` in phase `resources-rewrite`: the resources
/// whose objects are rewritten once every API server writes them encrypted (comma-separated).
pub const RESOURCES_REWRITE_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/encryption-resources-rewrite";

const RESOURCES_READING: &str = "resources";
const RESOURCES_WRITING: &str = "resources-rewrite";

/// The encryption-key rotation, as the core reads and reports it.
const ROTATION: Rotation = Rotation {
    condition: types::ENCRYPTION_KEY_ROTATED,
    request_annotation: ENCRYPTION_KEY_ROTATION_ANNOTATION,
    quoted: false,
};

/// The phases of a key rotation, as stored in [`PHASE_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyPhase {
    Reading,
    Writing,
    Dropping,
}

impl KeyPhase {
    fn name(self) -> &'static str {
        match self {
            Self::Reading => "reading",
            Self::Writing => "writing",
            Self::Dropping => "dropping",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Self::Reading, Self::Writing, Self::Dropping]
            .into_iter()
            .find(|p| p.name() == s)
    }

    /// `EncryptionKeyRotated=False` in this phase, `next` being the new key.
    fn condition(self, next: &Key) -> Cond {
        let (reason, message) = match self {
            Self::Reading => (
                reasons::READING_NEW_KEY,
                format!("the API servers roll to read {} as well", next.name),
            ),
            Self::Writing => (
                reasons::WRITING_WITH_NEW_KEY,
                format!("the API servers roll to write with {}", next.name),
            ),
            Self::Dropping => (
                reasons::DROPPING_PREVIOUS_KEY,
                format!(
                    "every encrypted object is rewritten with {}; the API servers roll without \
                     the previous key",
                    next.name
                ),
            ),
        };
        ROTATION.running(reason, message)
    }
}

/// The encryption configuration of one pass (the default: nothing changes).
#[derive(Debug, Clone, Default)]
pub struct EncryptionKeys {
    /// `<cluster>-encryption.config` as this pass leaves it, when it changes.
    pub write: Option<Secret>,
    /// Resources (`EncryptionConfiguration` form) whose stored objects must be rewritten
    /// through the tenant's API before [`EncryptionKeys::write`].
    pub migrate: Vec<String>,
    /// The Secret of the kubeconfig the rewrite uses (the provider's `system:masters` one).
    pub migrate_with: String,
    /// `EncryptionKeyRotated`, once a rotation was requested, and
    /// `EncryptionAtRestConfigured`, while resources besides the Secrets are involved.
    pub conditions: Vec<Cond>,
    /// When to look again (none when nothing waits).
    pub due: Option<Duration>,
}

/// What [`plan`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The stored `<cluster>-encryption.config`.
    pub stored: &'a Secret,
    /// The request: the KamajiControlPlane's annotation value.
    pub request: Option<&'a str>,
    /// The resources to encrypt besides the Secrets (`spec.encryptionAtRest.resources`).
    pub resources: &'a [String],
    /// Fingerprints of the control-plane pods, when listed ([`rotation::Pods`]).
    pub pods: Option<Pods<'a>>,
}

/// `sha256:` of an encryption configuration, for [`ENCRYPTION_KEYS_ANNOTATION`].
#[must_use]
pub fn fingerprint(configuration: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(configuration.as_bytes()))
    )
}

/// The configuration stored in `secret`: its text and what it says.
///
/// # Errors
/// [`Error::Pki`] when it is missing or does not parse.
pub fn configuration_of(secret: &Secret) -> Result<(String, Configuration), Error> {
    let unusable =
        |reason: String| Error::Pki(crate::error::PkiError::unusable_root(secret, reason));
    let text = text(secret, CONFIGURATION_KEY)
        .ok_or_else(|| unusable(format!("{CONFIGURATION_KEY} missing")))?;
    let config = Configuration::parse(&text).map_err(|e| unusable(e.to_string()))?;
    Ok((text, config))
}

/// Whether `config` writes exactly `resources` encrypted (besides the Secrets).
fn matches(config: &Configuration, resources: &[String]) -> bool {
    config.resources.len() == resources.len()
        && config
            .resources
            .iter()
            .all(|(r, m)| *m == Mode::Encrypted && resources.contains(r))
}

/// Whether a rotation or a change of resources is under way or asked for (the observe step
/// then lists the pods).
#[must_use]
pub fn under_way(stored: Option<&Secret>, request: Option<&str>, resources: &[String]) -> bool {
    stored.is_some_and(|s| {
        annotation(s, PHASE_ANNOTATION).is_some()
            || request.is_some_and(|r| {
                annotation(s, ENCRYPTION_KEY_ROTATION_ANNOTATION).as_deref() != Some(r)
            })
            || configuration_of(s).is_ok_and(|(_, c)| !matches(&c, resources))
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

/// `stored` with `config` and the annotations `set` (a `None` value removes one).
fn with(stored: &Secret, config: &Configuration, set: &[(&str, Option<&str>)]) -> Secret {
    rotation::updated(stored, CONFIGURATION_KEY, &config.render(), set)
}

/// `config` with other keys.
fn rekeyed(config: &Configuration, keys: &[Key]) -> Configuration {
    Configuration {
        keys: keys.to_vec(),
        resources: config.resources.clone(),
    }
}

/// Everything the configuration encrypts: the Secrets, then its other resources.
fn encrypted(config: &Configuration) -> Vec<String> {
    std::iter::once(SECRETS.to_owned())
        .chain(
            config
                .resources
                .iter()
                .filter(|(_, m)| *m == Mode::Encrypted)
                .map(|(r, _)| r.clone()),
        )
        .collect()
}

/// The next step of a requested rotation of the encryption key or of a change of the
/// encrypted resources.
///
/// # Errors
/// [`Error::Pki`] when the stored configuration is unusable or no key can be generated.
pub fn plan(inputs: &Inputs<'_>) -> Result<EncryptionKeys, Error> {
    let (text, config) = configuration_of(inputs.stored)?;
    let fp = fingerprint(&text);
    let settled = rotation::settled(inputs.pods, Some(&fp));
    let phase = annotation(inputs.stored, PHASE_ANNOTATION);
    let resources_phase = matches!(
        phase.as_deref(),
        Some(RESOURCES_READING | RESOURCES_WRITING)
    );
    let mut out = EncryptionKeys::default();
    if !resources_phase {
        key_rotation(inputs, &config, settled, &mut out)?;
    } else if inputs.request.is_some_and(|r| {
        annotation(inputs.stored, ENCRYPTION_KEY_ROTATION_ANNOTATION).as_deref() != Some(r)
    }) {
        out.conditions.push(ROTATION.running(
            reasons::WAITING_FOR_ENCRYPTION_CHANGE,
            "a change of the encrypted resources runs first",
        ));
    }
    let rotating = out.write.is_some() || (phase.is_some() && !resources_phase);
    if rotating {
        out.conditions.push(if matches(&config, inputs.resources) {
            configured(&config)
        } else {
            Cond::no(
                types::ENCRYPTION_AT_REST_CONFIGURED,
                reasons::WAITING_FOR_ENCRYPTION_CHANGE,
                "a rotation of the encryption key runs first",
            )
        });
        return Ok(out);
    }
    resources(inputs, &config, settled, &mut out);
    Ok(out)
}

/// The rotation's step, into `out` (nothing when none was asked for; waits while a change of
/// resources runs). A rotation under way keeps its own request (recorded on the Secret): it
/// finishes even when the annotation is removed or changed meanwhile, and a new value waits
/// for it, to get a key made after it was asked for, not the one the running rotation made
/// before.
fn key_rotation(
    inputs: &Inputs<'_>,
    config: &Configuration,
    settled: bool,
    out: &mut EncryptionKeys,
) -> Result<(), Error> {
    let recorded = ROTATION.read(Some(inputs.stored), |s| annotation(s, PHASE_ANNOTATION));
    let running = recorded.phase.is_some();
    let request = if running {
        recorded.request.as_deref().or(inputs.request)
    } else {
        inputs.request
    };
    let Some(request) = request else {
        return Ok(());
    };
    let step = KeyStep {
        stored: inputs.stored,
        config,
        request,
        settled,
    };
    let mut condition = step.next(recorded.phase.as_deref(), recorded.request.as_deref(), out)?;
    ROTATION.note_waiting(
        Some(&mut condition),
        running.then_some(request),
        inputs.request,
    );
    out.conditions.push(condition);
    Ok(())
}

/// One step of the key rotation of `request`.
struct KeyStep<'a> {
    stored: &'a Secret,
    config: &'a Configuration,
    request: &'a str,
    /// Every pod runs the stored configuration.
    settled: bool,
}

impl KeyStep<'_> {
    /// The step from `phase` (as stored), into `out`, and the rotation's condition.
    /// `recorded`: the request the stored Secret records.
    fn next(
        &self,
        phase: Option<&str>,
        recorded: Option<&str>,
        out: &mut EncryptionKeys,
    ) -> Result<Cond, Error> {
        let keys = self.config.keys.as_slice();
        let plain_left = self
            .config
            .resources
            .iter()
            .any(|(_, m)| *m == Mode::Plaintext);
        let condition = match (phase, phase.and_then(KeyPhase::parse), keys) {
            (_, Some(KeyPhase::Reading), [current, next, ..]) => {
                self.advance(out, KeyPhase::Reading, next, |out| {
                    out.write =
                        Some(self.write(&[next.clone(), current.clone()], Some(KeyPhase::Writing)));
                    KeyPhase::Writing.condition(next)
                })
            }
            (_, Some(KeyPhase::Writing), [next, ..]) => {
                self.advance(out, KeyPhase::Writing, next, |out| {
                    out.migrate = encrypted(self.config);
                    out.write =
                        Some(self.write(std::slice::from_ref(next), Some(KeyPhase::Dropping)));
                    KeyPhase::Dropping.condition(next)
                })
            }
            (_, Some(KeyPhase::Dropping), [next]) => {
                self.advance(out, KeyPhase::Dropping, next, |out| {
                    out.write = Some(self.write(std::slice::from_ref(next), None));
                    out.due = None;
                    rotated(self.request, &next.name)
                })
            }
            (None, _, [current]) if recorded == Some(self.request) => {
                rotated(self.request, &current.name)
            }
            (None, _, _) if plain_left => {
                // Left over from an interrupted change of resources: that finishes first.
                ROTATION.running(
                    reasons::WAITING_FOR_ENCRYPTION_CHANGE,
                    "a change of the encrypted resources runs first",
                )
            }
            // A new request (or a phase that does not match its keys: start again from the
            // key that writes).
            _ => self.start(out)?,
        };
        Ok(condition)
    }

    /// `<cluster>-encryption.config` with `keys`, in `phase` (`None`: done).
    fn write(&self, keys: &[Key], phase: Option<KeyPhase>) -> Secret {
        with(
            self.stored,
            &rekeyed(self.config, keys),
            &[
                (ENCRYPTION_KEY_ROTATION_ANNOTATION, Some(self.request)),
                (PHASE_ANNOTATION, phase.map(KeyPhase::name)),
            ],
        )
    }

    /// In `phase` (`next` the new key): once settled, the step after it (`then`, which says
    /// the condition); meanwhile the phase's condition. Either way the pass looks again soon:
    /// the pods roll.
    fn advance(
        &self,
        out: &mut EncryptionKeys,
        phase: KeyPhase,
        next: &Key,
        then: impl FnOnce(&mut EncryptionKeys) -> Cond,
    ) -> Cond {
        out.due = Some(if self.settled {
            Duration::from_secs(1)
        } else {
            SETTLE_RECHECK
        });
        if self.settled {
            then(out)
        } else {
            phase.condition(next)
        }
    }

    /// A new rotation: the next key is read beside the one that writes.
    fn start(&self, out: &mut EncryptionKeys) -> Result<Cond, Error> {
        let keys = &self.config.keys;
        let current = keys[0].clone();
        let next = Key::generate(&next_name(keys))?;
        let condition = KeyPhase::Reading.condition(&next);
        out.write = Some(self.write(&[current, next], Some(KeyPhase::Reading)));
        out.due = Some(SETTLE_RECHECK);
        Ok(condition)
    }
}

fn rotated(request: &str, key: &str) -> Cond {
    ROTATION.done(
        request,
        &format!("every encrypted object is encrypted with {key}, the previous key is dropped"),
    )
}

fn list(resources: &[String]) -> String {
    if resources.is_empty() {
        "nothing".into()
    } else {
        resources.join(", ")
    }
}

fn configured(config: &Configuration) -> Cond {
    Cond::yes(
        types::ENCRYPTION_AT_REST_CONFIGURED,
        reasons::CONFIGURED,
        format!(
            "the API servers write {} encrypted with {}",
            list(&encrypted(config)),
            config.keys[0].name
        ),
    )
}

/// The change of resources' step, into `out` (no rotation runs). Resources asked for that the
/// change under way does not hold wait for it: its condition names them.
fn resources(inputs: &Inputs<'_>, config: &Configuration, settled: bool, out: &mut EncryptionKeys) {
    resources_step(inputs, config, settled, out);
    let under_way = annotation(inputs.stored, PHASE_ANNOTATION)
        .is_some_and(|p| p == RESOURCES_READING || p == RESOURCES_WRITING);
    let waiting: Vec<String> = inputs
        .resources
        .iter()
        .filter(|r| !config.resources.iter().any(|(n, _)| n == *r))
        .cloned()
        .collect();
    if let Some(cond) = out
        .conditions
        .iter_mut()
        .find(|c| c.type_ == types::ENCRYPTION_AT_REST_CONFIGURED && c.status == "False")
        && under_way
        && !waiting.is_empty()
    {
        let _ = write!(
            cond.message,
            "; {} waits for the change under way to finish",
            list(&waiting)
        );
    }
}

fn resources_step(
    inputs: &Inputs<'_>,
    config: &Configuration,
    settled: bool,
    out: &mut EncryptionKeys,
) {
    let stored = inputs.stored;
    let desired = inputs.resources;
    let wait = if settled { None } else { Some(SETTLE_RECHECK) };
    match annotation(stored, PHASE_ANNOTATION).as_deref() {
        Some(RESOURCES_READING) => {
            out.due = wait.or(Some(Duration::from_secs(1)));
            resources_reading(stored, config, desired, settled, out);
        }
        Some(RESOURCES_WRITING) => {
            let rewrite: Vec<String> = annotation(stored, RESOURCES_REWRITE_ANNOTATION)
                .unwrap_or_default()
                .split(',')
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect();
            out.due = wait.or(Some(Duration::from_secs(1)));
            out.conditions.push(Cond::no(
                types::ENCRYPTION_AT_REST_CONFIGURED,
                reasons::WRITING_ENCRYPTED_RESOURCES,
                format!(
                    "the API servers roll to write {} encrypted, then its objects are rewritten",
                    list(&rewrite)
                ),
            ));
            if settled {
                out.migrate = rewrite;
                out.write = Some(with(
                    stored,
                    config,
                    &[
                        (PHASE_ANNOTATION, None),
                        (RESOURCES_REWRITE_ANNOTATION, None),
                    ],
                ));
                out.due = None;
                out.conditions = vec![configured(config)];
            }
        }
        _ if matches(config, desired) => out.conditions.push(configured(config)),
        _ => resources_start(stored, config, desired, out),
    }
}

/// The first step of a change: every resource that changes is written as plain text and read
/// encrypted.
fn resources_start(
    stored: &Secret,
    config: &Configuration,
    desired: &[String],
    out: &mut EncryptionKeys,
) {
    let mut next: Vec<(String, Mode)> = config
        .resources
        .iter()
        .map(|(r, m)| {
            let keep = *m == Mode::Encrypted && desired.contains(r);
            (
                r.clone(),
                if keep {
                    Mode::Encrypted
                } else {
                    Mode::Plaintext
                },
            )
        })
        .collect();
    for r in desired {
        if !next.iter().any(|(n, _)| n == r) {
            next.push((r.clone(), Mode::Plaintext));
        }
    }
    let changing: Vec<String> = next
        .iter()
        .filter(|(_, m)| *m == Mode::Plaintext)
        .map(|(r, _)| r.clone())
        .collect();
    out.write = Some(with(
        stored,
        &Configuration {
            keys: config.keys.clone(),
            resources: next,
        },
        &[(PHASE_ANNOTATION, Some(RESOURCES_READING))],
    ));
    out.due = Some(SETTLE_RECHECK);
    out.conditions.push(Cond::no(
        types::ENCRYPTION_AT_REST_CONFIGURED,
        reasons::READING_ENCRYPTED_RESOURCES,
        format!(
            "the API servers roll to read {} encrypted before anything changes how it is \
             written",
            list(&changing)
        ),
    ));
}

/// Phase `resources`: once settled, the removed resources' objects are rewritten as plain
/// text and they leave the configuration, and the added ones are written encrypted.
fn resources_reading(
    stored: &Secret,
    config: &Configuration,
    desired: &[String],
    settled: bool,
    out: &mut EncryptionKeys,
) {
    let (added, removed): (Vec<String>, Vec<String>) = config
        .resources
        .iter()
        .filter(|(_, m)| *m == Mode::Plaintext)
        .map(|(r, _)| r.clone())
        .partition(|r| desired.contains(r));
    if !settled {
        out.conditions.push(Cond::no(
            types::ENCRYPTION_AT_REST_CONFIGURED,
            reasons::READING_ENCRYPTED_RESOURCES,
            format!(
                "the API servers roll to read {} encrypted and to write {} as plain text",
                list(&added),
                list(&removed)
            ),
        ));
        return;
    }
    let next = Configuration {
        keys: config.keys.clone(),
        resources: config
            .resources
            .iter()
            .filter(|(r, _)| !removed.contains(r))
            .map(|(r, m)| {
                let mode = if added.contains(r) {
                    Mode::Encrypted
                } else {
                    *m
                };
                (r.clone(), mode)
            })
            .collect(),
    };
    // A removed resource another entry still encrypts is rewritten with it.
    let rewrite: Vec<String> = added
        .iter()
        .chain(removed.iter().filter(|r| {
            next.resources.iter().any(|(w, m)| {
                *m == Mode::Encrypted && kamaji_api::validation::encrypted_resource_covers(w, r)
            })
        }))
        .cloned()
        .collect();
    out.migrate.clone_from(&removed);
    let joined = rewrite.join(",");
    out.write = Some(with(
        stored,
        &next,
        &[
            (PHASE_ANNOTATION, Some(RESOURCES_WRITING)),
            (RESOURCES_REWRITE_ANNOTATION, Some(&joined)),
        ],
    ));
    out.conditions.push(Cond::no(
        types::ENCRYPTION_AT_REST_CONFIGURED,
        reasons::WRITING_ENCRYPTED_RESOURCES,
        format!(
            "{} rewritten as plain text; the API servers roll to write {} encrypted, then its \
             objects are rewritten",
            list(&removed),
            list(&added)
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn stored() -> Secret {
        let config =
            kamaji_bootstrap::encryption::configuration(&[Key::generate("key-1").unwrap()]);
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
            .keys
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
            resources: &[],
            pods: None,
        })
        .unwrap();
        assert!(idle.write.is_none());
        assert_eq!(idle.conditions.len(), 1);
        assert_eq!(idle.conditions[0].reason, reasons::CONFIGURED);

        let step = |s: &Secret, pods: &[Option<String>]| {
            plan(&Inputs {
                stored: s,
                request: Some("r1"),
                resources: &[],
                pods: Some((pods, true)),
            })
            .unwrap()
        };
        let start = step(&s0, &settled(&s0));
        let s1 = start.write.unwrap();
        assert_eq!(names(&s1), ["key-1", "key-2"], "the old key still writes");
        assert!(start.migrate.is_empty());
        // Pods of the old configuration: nothing moves.
        let waiting = step(&s1, &settled(&s0));
        assert!(waiting.write.is_none());
        assert_eq!(waiting.due, Some(SETTLE_RECHECK));
        assert_eq!(waiting.conditions[0].reason, reasons::READING_NEW_KEY);
        let s2 = step(&s1, &settled(&s1)).write.unwrap();
        assert_eq!(names(&s2), ["key-2", "key-1"], "the new key writes");
        assert!(step(&s2, &settled(&s1)).write.is_none());
        let dropping = step(&s2, &settled(&s2));
        assert_eq!(
            dropping.migrate,
            ["secrets"],
            "every Secret is rewritten before the old key goes"
        );
        let s3 = dropping.write.unwrap();
        assert_eq!(names(&s3), ["key-2"]);
        assert_eq!(
            configuration_of(&s3).unwrap().1.keys[0].secret,
            configuration_of(&s1).unwrap().1.keys[1].secret,
            "the new key is the one generated at the start"
        );
        let rolling = step(&s3, &settled(&s2));
        assert!(rolling.write.is_none());
        assert_eq!(rolling.conditions[0].reason, reasons::DROPPING_PREVIOUS_KEY);
        let finishing = step(&s3, &settled(&s3));
        assert!(finishing.migrate.is_empty() && finishing.due.is_none());
        assert_eq!(finishing.conditions[0].reason, reasons::ROTATED);
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
            resources: &[],
            pods: None,
        })
        .unwrap();
        assert!(done.write.is_none() && done.migrate.is_empty() && done.due.is_none());
        assert_eq!(done.conditions[0].reason, reasons::ROTATED);
        assert!(!under_way(Some(&s4), Some("r1"), &[]));
        assert!(under_way(Some(&s4), Some("r2"), &[]));
        // A later request starts again from key-2.
        let again = plan(&Inputs {
            stored: &s4,
            request: Some("r2"),
            resources: &[],
            pods: Some((&settled(&s4), true)),
        })
        .unwrap();
        assert_eq!(names(&again.write.unwrap()), ["key-2", "key-3"]);
    }

    /// [`stored`] with `resource` encrypted too.
    fn stored_encrypting(resource: &str) -> Secret {
        let config = Configuration {
            keys: vec![Key::generate("key-1").unwrap()],
            resources: vec![(resource.to_owned(), Mode::Encrypted)],
        };
        let mut s = stored();
        s.data.as_mut().unwrap().insert(
            CONFIGURATION_KEY.into(),
            ByteString(config.render().into_bytes()),
        );
        s
    }

    fn modes(s: &Secret) -> Vec<(String, Mode)> {
        configuration_of(s).unwrap().1.resources
    }

    fn phase(s: &Secret) -> Option<String> {
        annotation(s, PHASE_ANNOTATION)
    }

    /// Adding `configmaps` and removing `*.apps`: both are first written as plain text and read
    /// encrypted everywhere; then `*.apps` is rewritten as plain text and dropped while
    /// `configmaps` is written encrypted; then `configmaps` is rewritten. Each step waits for
    /// every pod of the previous configuration. A rotation asked for meanwhile waits.
    #[test]
    fn a_change_of_resources_reads_then_writes_then_rewrites() {
        let s0 = stored_encrypting("*.apps");
        let desired = vec!["configmaps".to_owned()];
        let step = |s: &Secret, pods: &[Option<String>], request: Option<&str>| {
            plan(&Inputs {
                stored: s,
                request,
                resources: &desired,
                pods: Some((pods, true)),
            })
            .unwrap()
        };
        assert!(under_way(Some(&s0), None, &desired));
        assert!(!under_way(Some(&s0), None, &["*.apps".to_owned()]));
        let reading = step(&s0, &settled(&s0), None);
        assert!(reading.migrate.is_empty());
        let s1 = reading.write.unwrap();
        assert_eq!(phase(&s1).as_deref(), Some("resources"));
        assert_eq!(
            modes(&s1),
            [
                ("configmaps".to_owned(), Mode::Plaintext),
                ("*.apps".to_owned(), Mode::Plaintext)
            ]
        );
        assert_eq!(
            reading.conditions[0].reason,
            reasons::READING_ENCRYPTED_RESOURCES
        );
        // Pods of the old configuration: nothing moves; a rotation asked for waits.
        let held = step(&s1, &settled(&s0), Some("r1"));
        assert!(held.write.is_none() && held.migrate.is_empty());
        assert_eq!(held.due, Some(SETTLE_RECHECK));
        assert!(
            held.conditions
                .iter()
                .any(|c| c.type_ == types::ENCRYPTION_KEY_ROTATED
                    && c.reason == reasons::WAITING_FOR_ENCRYPTION_CHANGE)
        );
        let writing = step(&s1, &settled(&s1), None);
        assert_eq!(
            writing.migrate,
            ["*.apps"],
            "rewritten as plain text before it goes"
        );
        let s2 = writing.write.unwrap();
        assert_eq!(modes(&s2), [("configmaps".to_owned(), Mode::Encrypted)]);
        assert_eq!(phase(&s2).as_deref(), Some("resources-rewrite"));
        assert!(step(&s2, &settled(&s1), None).write.is_none());
        let rewriting = step(&s2, &settled(&s2), None);
        assert_eq!(rewriting.migrate, ["configmaps"]);
        let s3 = rewriting.write.unwrap();
        assert_eq!(phase(&s3), None);
        assert_eq!(rewriting.conditions[0].reason, reasons::CONFIGURED);
        assert_eq!(
            fingerprint(&configuration_of(&s3).unwrap().0),
            fingerprint(&configuration_of(&s2).unwrap().0),
            "finishing rolls nothing"
        );
        // Done: nothing more; the rotation may start now.
        let done = step(&s3, &settled(&s3), None);
        assert!(done.write.is_none() && done.migrate.is_empty());
        assert!(!under_way(Some(&s3), None, &desired));
        let rotating = step(&s3, &settled(&s3), Some("r1")).write.unwrap();
        assert_eq!(phase(&rotating).as_deref(), Some("reading"));
        assert_eq!(
            modes(&rotating),
            modes(&s3),
            "a rotation keeps the resources"
        );
        // A change asked for while the rotation runs waits for it.
        let other = vec!["*.".to_owned()];
        let waits = plan(&Inputs {
            stored: &rotating,
            request: Some("r1"),
            resources: &other,
            pods: Some((&settled(&s3), true)),
        })
        .unwrap();
        assert!(waits.write.is_none());
        assert!(
            waits
                .conditions
                .iter()
                .any(|c| c.type_ == types::ENCRYPTION_AT_REST_CONFIGURED
                    && c.reason == reasons::WAITING_FOR_ENCRYPTION_CHANGE)
        );
    }

    /// Removing a resource a wildcard added at the same time covers: it is rewritten with the
    /// wildcard once that writes encrypted, not left as plain text.
    #[test]
    fn a_resource_replaced_by_its_wildcard_is_rewritten_encrypted() {
        let s0 = stored_encrypting("configmaps");
        let desired = vec!["*.".to_owned()];
        let step = |s: &Secret| {
            plan(&Inputs {
                stored: s,
                request: None,
                resources: &desired,
                pods: Some((&settled(s), true)),
            })
            .unwrap()
        };
        let s1 = step(&s0).write.unwrap();
        let writing = step(&s1);
        assert_eq!(writing.migrate, ["configmaps"]);
        let s2 = writing.write.unwrap();
        assert_eq!(modes(&s2), [("*.".to_owned(), Mode::Encrypted)]);
        assert_eq!(step(&s2).migrate, ["*.", "configmaps"]);
    }
}
