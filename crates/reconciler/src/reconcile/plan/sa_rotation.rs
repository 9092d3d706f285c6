//! Service-account signing-key rotation with overlap (pure): which keys the API servers
//! accept and which one signs, read back from the stored Secrets, and the next step of a
//! rotation the user requested with [`SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION`].
//!
//! The state lives in the Secrets, so a manager restart at any point resumes it:
//!
//! | phase | `<cluster>-sa` (signs) | `<cluster>-sa-rotation.keys` | API servers accept |
//! |---|---|---|---|
//! | none / done | current key | absent, or only the last request's annotation | current |
//! | trusting | old key | `next.key`, `verify.pub` = next public key | old, next |
//! | promoting | old or next key | `next.key`, `previous.pub`, `verify.pub` = next public key | old, next |
//! | overlap | new key | `verify.pub` = old public key, until-annotation | new, old |
//!
//! A phase moves on only once it is *settled*: the Deployment has rolled out and every
//! control-plane pod, terminating ones included, carries the keys' fingerprint
//! ([`SERVICE_ACCOUNT_KEYS_ANNOTATION`]) of the stored state. So no API server that does not
//! trust the new key still runs when the new key starts signing, and the old public key is
//! dropped only once the overlap (the manager's `--service-account-key-overlap-seconds`,
//! by default 25 h: kubelets refresh projected tokens after 80 % of their life or 24 h at
//! the latest) has passed. Promoting writes the rotation Secret (with the old public key)
//! before it overwrites `<cluster>-sa`, so a pass killed in between finds both keys.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::kcp::Component;
use kamaji_api::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION;
use kamaji_api::names::InternalSecret;
use kamaji_api::validation::FlagArg;
use kamaji_bootstrap::pki::{KeyAlgorithm, ServiceAccountKeyPair};
use kamaji_bootstrap::secrets::{self, SecretTarget};
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::reconcile::status::Cond;
use crate::reconcile::validate::ValidSpec;

/// Pod-template annotation: fingerprint of the signing key and every accepted key.
pub const SERVICE_ACCOUNT_KEYS_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/kamaji-rs-service-account-keys";
/// Annotation of the rotation Secret in the overlap phase: until when (RFC 3339) the previous
/// public key is accepted.
pub const VERIFY_PREVIOUS_UNTIL_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/verify-previous-key-until";
/// Key of the rotation Secret: the public key the API servers accept besides `<cluster>-sa`'s
/// (the only key of that Secret mounted into the pod).
pub const VERIFY_KEY: &str = "verify.pub";
/// Key of the rotation Secret: the next private key, until it is promoted.
pub const NEXT_KEY: &str = "next.key";
/// Key of the rotation Secret: the previous public key, while promoting.
pub const PREVIOUS_KEY: &str = "previous.pub";
/// How often a rotation waiting for pods looks again: a terminating pod's end produces no
/// event for the KamajiControlPlane.
pub const SETTLE_RECHECK: Duration = Duration::from_secs(3);

/// The service-account keys of one pass (the default: no rotation, nothing to write).
#[derive(Debug, Clone, Default)]
pub struct ServiceAccountKeys {
    /// The public key the API servers accept besides the signing key's, while a rotation runs
    /// (mounted from the rotation Secret's [`VERIFY_KEY`]).
    pub verify_extra: Option<String>,
    /// The fingerprint of the signing key and the accepted keys, for the pod template
    /// ([`SERVICE_ACCOUNT_KEYS_ANNOTATION`]), while a rotation runs.
    pub fingerprint: Option<String>,
    /// Secrets to write, in order (rotation Secret, `<cluster>-sa`, rotation Secret).
    pub writes: Vec<Secret>,
    /// `ServiceAccountKeyRotated`, once a rotation was requested.
    pub condition: Option<Cond>,
    /// When to look again for this rotation (none when nothing waits).
    pub due: Option<Duration>,
}

/// What [`plan`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The stored `<cluster>-sa`.
    pub service_account: &'a Secret,
    /// The stored rotation Secret.
    pub state: Option<&'a Secret>,
    /// The request: the KamajiControlPlane's annotation value.
    pub request: Option<&'a str>,
    /// The UID of the KamajiControlPlane (a rotation overwrites `<cluster>-sa` only when it
    /// controls it).
    pub uid: &'a str,
    /// Fingerprints of the control-plane pods (terminating included), when listed, and
    /// whether the Deployment has rolled out.
    pub pods: Option<(&'a [Option<String>], bool)>,
    /// How long the old key keeps verifying after the new one signs.
    pub overlap: Duration,
    /// Algorithm of the next key.
    pub algorithm: KeyAlgorithm,
    /// Now.
    pub now: SystemTime,
}

/// Where a rotation stands, read back from the rotation Secret.
enum Phase {
    /// No rotation runs (`last`: the request of the last one done).
    Idle { last: Option<String> },
    /// The next key is trusted (and, once `previous` is set, being promoted).
    Trusting {
        request: String,
        next: String,
        previous: Option<String>,
    },
    /// The new key signs; the previous public key verifies until `until`.
    Overlap { request: String, until: SystemTime },
}

/// The UTF-8 value of `key` in `secret`'s data.
pub(super) fn text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// The value of annotation `key` on `secret`.
pub(super) fn annotation(secret: &Secret, key: &str) -> Option<String> {
    secret.metadata.annotations.as_ref()?.get(key).cloned()
}

fn phase(state: Option<&Secret>) -> Phase {
    let Some(s) = state else {
        return Phase::Idle { last: None };
    };
    let request = annotation(s, SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION).unwrap_or_default();
    let until = annotation(s, VERIFY_PREVIOUS_UNTIL_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(SystemTime::from);
    match (text(s, NEXT_KEY), text(s, VERIFY_KEY), until) {
        (Some(next), _, _) => Phase::Trusting {
            request,
            next,
            previous: text(s, PREVIOUS_KEY),
        },
        (None, Some(_), Some(until)) => Phase::Overlap { request, until },
        _ => Phase::Idle {
            last: Some(request).filter(|r| !r.is_empty()),
        },
    }
}

/// `sha256:` of the signing public key and the extra accepted key, while there is one (the
/// pod template carries no fingerprint outside a rotation, so that it stays as before one).
fn fingerprint(signing_public: &str, extra: Option<&str>) -> Option<String> {
    let extra = extra?;
    let mut h = Sha256::new();
    h.update(signing_public.as_bytes());
    h.update([0]);
    h.update(extra.as_bytes());
    Some(format!("sha256:{}", hex::encode(h.finalize())))
}

/// Why a new rotation cannot start, if it cannot: `<cluster>-sa` is not this control
/// plane's, or the user's `extraArgs` name the key files themselves.
fn refusal(spec: &ValidSpec, sa: &Secret, uid: &str) -> Option<String> {
    let ours = sa
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    if !ours {
        return Some(format!(
            "Secret {} was not created by this KamajiControlPlane (it is not its controller): \
             kamaji-rs rotates only a key it generated; rotate a key you provide yourself",
            spec.names.service_account_secret()
        ));
    }
    let own = [
        (Component::ApiServer, "service-account-key-file"),
        (Component::ApiServer, "service-account-signing-key-file"),
        (
            Component::ControllerManager,
            "service-account-private-key-file",
        ),
    ];
    own.iter().find_map(|(c, flag)| {
        spec.component(*c)
            .extra_args
            .iter()
            .any(|a| FlagArg::parse(a).name == *flag)
            .then(|| {
                format!(
                    "{} sets --{flag}: the key files are the user's, so kamaji-rs cannot \
                     rotate the key; remove the flag first",
                    c.spec_field()
                )
            })
    })
}

/// The keys of this pass and the next step of a requested rotation. A request made while
/// another rotation runs waits for it (the state keeps the running one's): the running one's
/// condition names it.
///
/// # Errors
/// [`Error`] when a stored key does not parse or a new key cannot be generated.
pub fn plan(spec: &ValidSpec, inputs: &Inputs<'_>) -> Result<ServiceAccountKeys, Error> {
    let running = match phase(inputs.state) {
        Phase::Trusting { request, .. } | Phase::Overlap { request, .. } => Some(request),
        Phase::Idle { .. } => None,
    };
    let mut out = phases(spec, inputs)?;
    if let (Some(running), Some(next), Some(cond)) =
        (running, inputs.request, out.condition.as_mut())
        && !next.is_empty()
        && next != running
    {
        let _ = write!(
            cond.message,
            "; rotation {next:?} waits for rotation {running:?} to finish"
        );
    }
    Ok(out)
}

/// The keys of this pass and the next step of the rotation under way, or of a new one.
fn phases(spec: &ValidSpec, inputs: &Inputs<'_>) -> Result<ServiceAccountKeys, Error> {
    let sa_key = secrets::tls_pair_of(inputs.service_account)
        .map(|(_, key)| key)
        .unwrap_or_default();
    let sa = ServiceAccountKeyPair::from_private_pem(&sa_key)?;
    let target_name = spec
        .names
        .internal_secret(InternalSecret::ServiceAccountRotation);
    let target = SecretTarget {
        name: &target_name,
        namespace: &spec.namespace,
        cluster_name: &spec.cluster_name,
    };
    let stored_extra = inputs.state.and_then(|s| text(s, VERIFY_KEY));
    let current = fingerprint(sa.public_pem(), stored_extra.as_deref());
    let settled = inputs
        .pods
        .is_some_and(|(pods, rolled_out)| rolled_out && pods.iter().all(|p| *p == current));
    let mut out = ServiceAccountKeys {
        verify_extra: stored_extra.clone(),
        fingerprint: current,
        writes: Vec::new(),
        condition: None,
        due: None,
    };
    let wait = |out: &mut ServiceAccountKeys| {
        if !settled {
            out.due = Some(SETTLE_RECHECK);
        }
    };
    match phase(inputs.state) {
        Phase::Idle { last } => {
            let Some(request) = inputs.request.filter(|r| !r.is_empty()) else {
                out.condition = last.map(|l| done(&l));
                return Ok(out);
            };
            if last.as_deref() == Some(request) {
                out.condition = Some(done(request));
                return Ok(out);
            }
            if let Some(why) = refusal(spec, inputs.service_account, inputs.uid) {
                out.condition = Some(Cond::no(
                    types::SERVICE_ACCOUNT_KEY_ROTATED,
                    reasons::ROTATION_REFUSED,
                    format!("rotation {request:?}: {why}"),
                ));
                return Ok(out);
            }
            let next = ServiceAccountKeyPair::generate(inputs.algorithm)?;
            out.writes.push(state_secret(
                target,
                request,
                &[
                    (NEXT_KEY, next.private_pem()),
                    (VERIFY_KEY, next.public_pem()),
                ],
                None,
            ));
            out.verify_extra = Some(next.public_pem().to_owned());
            out.fingerprint = fingerprint(sa.public_pem(), Some(next.public_pem()));
            out.condition = Some(trusting(request));
            out.due = Some(SETTLE_RECHECK);
        }
        Phase::Trusting {
            request,
            next,
            previous,
        } => {
            // Promote once every API server trusts the next key; a promotion a killed pass
            // left half-done (previous recorded) is finished whatever the pods say.
            if settled || previous.is_some() {
                promote(
                    spec, inputs, target, &sa, &request, &next, previous, &mut out,
                )?;
            } else {
                out.condition = Some(trusting(&request));
                wait(&mut out);
            }
        }
        Phase::Overlap { request, until } => {
            let left = until.duration_since(inputs.now).unwrap_or_default();
            if !left.is_zero() || !settled {
                out.condition = Some(overlap(&request, until));
                out.due = Some(if settled { left } else { SETTLE_RECHECK });
                return Ok(out);
            }
            out.writes.push(state_secret(target, &request, &[], None));
            out.verify_extra = None;
            out.fingerprint = fingerprint(sa.public_pem(), None);
            out.condition = Some(done(&request));
        }
    }
    Ok(out)
}

/// The next key signs: the rotation Secret records the previous public key (still with the
/// next key), `<cluster>-sa` gets the next key pair, and the rotation Secret keeps only the
/// previous public key with the end of the overlap. A promotion already written (`sa` is
/// the next key) only finishes the last step.
#[allow(clippy::too_many_arguments)]
fn promote(
    spec: &ValidSpec,
    inputs: &Inputs<'_>,
    target: SecretTarget<'_>,
    sa: &ServiceAccountKeyPair,
    request: &str,
    next: &str,
    previous: Option<String>,
    out: &mut ServiceAccountKeys,
) -> Result<(), Error> {
    let next_pair = ServiceAccountKeyPair::from_private_pem(next)?;
    let previous = previous.unwrap_or_else(|| sa.public_pem().to_owned());
    if sa.public_pem() != next_pair.public_pem() {
        out.writes.push(state_secret(
            target,
            request,
            &[
                (NEXT_KEY, next),
                (VERIFY_KEY, next_pair.public_pem()),
                (PREVIOUS_KEY, previous.as_str()),
            ],
            None,
        ));
        out.writes.push(secrets::service_account_secret(
            SecretTarget {
                name: &spec.names.service_account_secret(),
                namespace: &spec.namespace,
                cluster_name: &spec.cluster_name,
            },
            &next_pair,
        ));
    }
    let until = inputs.now + inputs.overlap;
    out.writes.push(state_secret(
        target,
        request,
        &[(VERIFY_KEY, previous.as_str())],
        Some(until),
    ));
    out.fingerprint = fingerprint(next_pair.public_pem(), Some(&previous));
    out.verify_extra = Some(previous);
    out.condition = Some(overlap(request, until));
    out.due = Some(SETTLE_RECHECK);
    Ok(())
}

fn state_secret(
    target: SecretTarget<'_>,
    request: &str,
    data: &[(&str, &str)],
    until: Option<SystemTime>,
) -> Secret {
    let mut s = secrets::data_secret(
        target,
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>(),
    );
    let mut annotations = BTreeMap::from([(
        SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION.to_owned(),
        request.to_owned(),
    )]);
    if let Some(until) = until.and_then(|u| Timestamp::try_from(u).ok()) {
        annotations.insert(
            VERIFY_PREVIOUS_UNTIL_ANNOTATION.to_owned(),
            until.to_string(),
        );
    }
    s.metadata.annotations = Some(annotations);
    s
}

fn trusting(request: &str) -> Cond {
    Cond::no(
        types::SERVICE_ACCOUNT_KEY_ROTATED,
        reasons::TRUSTING_NEW_KEY,
        format!(
            "rotation {request:?}: the API servers roll to accept the new key as well; the old \
             key signs until every one of them does"
        ),
    )
}

fn overlap(request: &str, until: SystemTime) -> Cond {
    let until = Timestamp::try_from(until).map_or_else(|_| "?".into(), |t| t.to_string());
    Cond::no(
        types::SERVICE_ACCOUNT_KEY_ROTATED,
        reasons::VERIFYING_PREVIOUS_KEY,
        format!(
            "rotation {request:?}: the new key signs; tokens signed by the old key are accepted \
             until {until}"
        ),
    )
}

fn done(request: &str) -> Cond {
    Cond::yes(
        types::SERVICE_ACCOUNT_KEY_ROTATED,
        reasons::ROTATED,
        format!(
            "rotation {request:?} done: only the new key signs and verifies (set the \
             annotation {SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION} to a new value to rotate again)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::validate::tests::{fixture, valid};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    const UID: &str = "f0-uid";

    struct World {
        spec: ValidSpec,
        sa: Secret,
        state: Option<Secret>,
        now: SystemTime,
    }

    impl World {
        fn new(patch: serde_json::Value) -> Self {
            let spec = valid(&fixture(patch));
            let mut sa = secrets::service_account_secret(
                SecretTarget {
                    name: &spec.names.service_account_secret(),
                    namespace: &spec.namespace,
                    cluster_name: &spec.cluster_name,
                },
                &ServiceAccountKeyPair::generate(KeyAlgorithm::default()).unwrap(),
            );
            sa.metadata.owner_references = Some(vec![OwnerReference {
                uid: UID.into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]);
            Self {
                spec,
                sa,
                state: None,
                now: SystemTime::now(),
            }
        }

        /// One pass with `request` and pods all on `pods` (or none listed), its writes stored.
        fn pass(
            &mut self,
            request: Option<&str>,
            pods: Option<&[Option<String>]>,
        ) -> ServiceAccountKeys {
            let keys = plan(
                &self.spec,
                &Inputs {
                    service_account: &self.sa,
                    state: self.state.as_ref(),
                    request,
                    uid: UID,
                    pods: pods.map(|p| (p, true)),
                    overlap: Duration::from_mins(10),
                    algorithm: KeyAlgorithm::default(),
                    now: self.now,
                },
            )
            .unwrap();
            self.store(&keys.writes);
            keys
        }

        fn store(&mut self, writes: &[Secret]) {
            for w in writes {
                if w.metadata.name == self.sa.metadata.name {
                    self.sa.data.clone_from(&w.data);
                } else {
                    self.state = Some(w.clone());
                }
            }
        }

        fn public(&self) -> String {
            text(&self.sa, secrets::TLS_CRT_KEY).unwrap()
        }
    }

    fn reason(keys: &ServiceAccountKeys) -> &'static str {
        keys.condition.as_ref().map_or("", |c| c.reason)
    }

    /// The whole rotation, pass by pass: trust the next key, promote it once every pod
    /// trusts it (old key still verifying), drop the old key after the overlap.
    #[test]
    fn a_requested_rotation_trusts_then_signs_then_drops_the_old_key() {
        let mut w = World::new(serde_json::json!({}));
        let idle = w.pass(None, None);
        assert!(idle.writes.is_empty() && idle.fingerprint.is_none() && idle.condition.is_none());
        let old = w.public();

        let start = w.pass(Some("r1"), None);
        assert_eq!(reason(&start), reasons::TRUSTING_NEW_KEY);
        assert_eq!(start.writes.len(), 1, "only the rotation Secret");
        let next_pub = start.verify_extra.clone().unwrap();
        assert_ne!(next_pub, old);
        assert_eq!(w.public(), old, "the old key still signs");

        // Pods not yet on the trusting template: nothing moves, and the pass looks again.
        let waiting = w.pass(Some("r1"), Some(&[None]));
        assert!(waiting.writes.is_empty());
        assert_eq!(waiting.due, Some(SETTLE_RECHECK));
        assert_eq!(reason(&waiting), reasons::TRUSTING_NEW_KEY);

        // Every pod trusts the next key: it is promoted, the old one verifies.
        let promoted = w.pass(Some("r1"), Some(std::slice::from_ref(&start.fingerprint)));
        assert_eq!(reason(&promoted), reasons::VERIFYING_PREVIOUS_KEY);
        assert_eq!(promoted.writes.len(), 3);
        let recorded = &promoted.writes[0];
        assert_eq!(text(recorded, PREVIOUS_KEY).as_deref(), Some(old.as_str()));
        assert!(
            text(recorded, NEXT_KEY).is_some(),
            "the next key is kept until signed with"
        );
        assert_eq!(w.public(), next_pub, "<cluster>-sa holds the new key");
        assert_eq!(promoted.verify_extra.as_deref(), Some(old.as_str()));
        assert!(text(w.state.as_ref().unwrap(), NEXT_KEY).is_none());

        // Within the overlap nothing changes, and the pass looks again when it ends.
        let during = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&promoted.fingerprint)),
        );
        assert!(during.writes.is_empty());
        assert_eq!(during.verify_extra.as_deref(), Some(old.as_str()));
        assert!(during.due.unwrap() <= Duration::from_mins(10));

        // After it, the old key is dropped.
        w.now += Duration::from_mins(11);
        let done = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&promoted.fingerprint)),
        );
        assert_eq!(reason(&done), reasons::ROTATED);
        assert!(done.verify_extra.is_none() && done.fingerprint.is_none());
        let again = w.pass(Some("r1"), None);
        assert!(
            again.writes.is_empty(),
            "the same request does not rotate again"
        );
        assert_eq!(reason(&again), reasons::ROTATED);
        let second = w.pass(Some("r2"), None);
        assert_eq!(
            reason(&second),
            reasons::TRUSTING_NEW_KEY,
            "a new value does"
        );
    }

    /// A pass killed after recording the previous key (and maybe after writing
    /// `<cluster>-sa`) is finished by the next one, and the old public key is never lost.
    #[test]
    fn a_promotion_cut_short_is_finished_without_losing_the_old_key() {
        for sa_written in [false, true] {
            let mut w = World::new(serde_json::json!({}));
            let old = w.public();
            let start = w.pass(Some("r1"), None);
            let promoted = plan(
                &w.spec,
                &Inputs {
                    service_account: &w.sa,
                    state: w.state.as_ref(),
                    request: Some("r1"),
                    uid: UID,
                    pods: Some((std::slice::from_ref(&start.fingerprint), true)),
                    overlap: Duration::from_mins(10),
                    algorithm: KeyAlgorithm::default(),
                    now: w.now,
                },
            )
            .unwrap();
            let cut = if sa_written { 2 } else { 1 };
            w.store(&promoted.writes[..cut]);
            // Pods are on no known fingerprint (a roll was under way): still finished.
            let resumed = w.pass(Some("r1"), Some(&[None]));
            assert_eq!(reason(&resumed), reasons::VERIFYING_PREVIOUS_KEY);
            assert_eq!(resumed.verify_extra.as_deref(), Some(old.as_str()));
            assert_eq!(w.public(), start.verify_extra.clone().unwrap());
            assert_eq!(resumed.fingerprint, promoted.fingerprint);
        }
    }

    #[test]
    fn a_key_the_user_provided_or_key_files_in_extra_args_refuse_the_rotation() {
        let mut w = World::new(serde_json::json!({}));
        w.sa.metadata.owner_references = None;
        let keys = w.pass(Some("r1"), None);
        assert_eq!(reason(&keys), reasons::ROTATION_REFUSED);
        assert!(keys.writes.is_empty());
        assert!(
            keys.condition
                .unwrap()
                .message
                .contains("not created by this")
        );

        let mut w = World::new(serde_json::json!({"apiServer": {"extraArgs": [
            "--service-account-key-file=/etc/own/sa.pub"
        ]}}));
        let keys = w.pass(Some("r1"), None);
        assert_eq!(reason(&keys), reasons::ROTATION_REFUSED);
        assert!(
            keys.condition
                .unwrap()
                .message
                .contains("spec.apiServer.extraArgs sets --service-account-key-file")
        );
    }
}
