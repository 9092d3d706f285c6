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
//!
//! What the three rotations share (reading the request back, the settled check, the
//! conditions, the note naming a request that waits, writing the rotation Secret) is
//! [`super::rotation`]'s; this module holds the phases and what each writes.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::kcp::Component;
use kamaji_api::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION;
use kamaji_api::names::InternalSecret;
use kamaji_bootstrap::pki::{KeyAlgorithm, ServiceAccountKeyPair};
use kamaji_bootstrap::secrets::{self, SecretTarget};
use sha2::{Digest, Sha256};

use super::rotation::{self, Material, Pods, Recorded, Rotation, SETTLE_RECHECK, text};
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

/// The service-account key rotation, as the core reads and reports it.
const ROTATION: Rotation = Rotation {
    condition: types::SERVICE_ACCOUNT_KEY_ROTATED,
    request_annotation: SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION,
    quoted: true,
};

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
    /// Fingerprints of the control-plane pods, when listed ([`rotation::Pods`]).
    pub pods: Option<Pods<'a>>,
    /// How long the old key keeps verifying after the new one signs.
    pub overlap: Duration,
    /// Algorithm of the next key.
    pub algorithm: KeyAlgorithm,
    /// Now.
    pub now: SystemTime,
}

/// The phase under way, read back from the rotation Secret's keys (none: no rotation runs).
enum Phase {
    /// The next key is trusted (and, once `previous` is set, being promoted).
    Trusting {
        next: String,
        previous: Option<String>,
    },
    /// The new key signs; the previous public key verifies until `until`.
    Overlap { until: SystemTime },
}

/// The phase `state` records, if a rotation runs.
fn phase(state: &Secret) -> Option<Phase> {
    let until = rotation::instant_of(state, VERIFY_PREVIOUS_UNTIL_ANNOTATION);
    match (text(state, NEXT_KEY), text(state, VERIFY_KEY), until) {
        (Some(next), _, _) => Some(Phase::Trusting {
            next,
            previous: text(state, PREVIOUS_KEY),
        }),
        (None, Some(_), Some(until)) => Some(Phase::Overlap { until }),
        _ => None,
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
    rotation::refusal(
        spec,
        &[(sa, spec.names.service_account_secret())],
        uid,
        &[
            (Component::ApiServer, "service-account-key-file"),
            (Component::ApiServer, "service-account-signing-key-file"),
            (
                Component::ControllerManager,
                "service-account-private-key-file",
            ),
        ],
        Material {
            one: "key",
            all: "key",
        },
    )
}

/// The keys of this pass and the next step of a requested rotation. A request made while
/// another rotation runs waits for it (the state keeps the running one's): the running one's
/// condition names it.
///
/// # Errors
/// [`Error`] when a stored key does not parse or a new key cannot be generated.
pub fn plan(spec: &ValidSpec, inputs: &Inputs<'_>) -> Result<ServiceAccountKeys, Error> {
    let recorded = ROTATION.read(inputs.state, phase);
    let running = recorded.running().map(str::to_owned);
    let mut out = phases(spec, inputs, recorded)?;
    ROTATION.note_waiting(out.condition.as_mut(), running.as_deref(), inputs.request);
    Ok(out)
}

/// The keys of this pass and the next step of the rotation under way, or of a new one.
fn phases(
    spec: &ValidSpec,
    inputs: &Inputs<'_>,
    recorded: Recorded<'_, Phase>,
) -> Result<ServiceAccountKeys, Error> {
    let mut pass = Pass::new(spec, inputs)?;
    let request = recorded.request.clone().unwrap_or_default();
    match recorded.phase {
        None => pass.idle(recorded.last())?,
        Some(Phase::Trusting { next, previous }) => {
            // Promote once every API server trusts the next key; a promotion a killed pass
            // left half-done (previous recorded) is finished whatever the pods say.
            if pass.settled || previous.is_some() {
                pass.promote(&request, &next, previous)?;
            } else {
                pass.out.condition = Some(trusting(&request));
                pass.out.due = Some(SETTLE_RECHECK);
            }
        }
        Some(Phase::Overlap { until }) => pass.overlap(&request, until),
    }
    Ok(pass.out)
}

/// One pass: what it reads, and the keys it leaves.
struct Pass<'a> {
    spec: &'a ValidSpec,
    inputs: &'a Inputs<'a>,
    /// `<cluster>-sa-rotation.keys`.
    target_name: String,
    /// The stored signing key.
    sa: ServiceAccountKeyPair,
    /// Every pod runs the stored keys.
    settled: bool,
    out: ServiceAccountKeys,
}

impl<'a> Pass<'a> {
    /// The stored keys, as the pods should run them.
    fn new(spec: &'a ValidSpec, inputs: &'a Inputs<'a>) -> Result<Self, Error> {
        let sa_key = secrets::tls_pair_of(inputs.service_account)
            .map(|(_, key)| key)
            .unwrap_or_default();
        let sa = ServiceAccountKeyPair::from_private_pem(&sa_key)?;
        let verify_extra = inputs.state.and_then(|s| text(s, VERIFY_KEY));
        let current = fingerprint(sa.public_pem(), verify_extra.as_deref());
        Ok(Self {
            spec,
            inputs,
            target_name: spec
                .names
                .internal_secret(InternalSecret::ServiceAccountRotation),
            settled: rotation::settled(inputs.pods, current.as_deref()),
            sa,
            out: ServiceAccountKeys {
                verify_extra,
                fingerprint: current,
                ..ServiceAccountKeys::default()
            },
        })
    }

    /// The rotation Secret with `data`, for `request` (and, in the overlap, `until`).
    fn state(&self, request: &str, data: &[(&str, &str)], until: Option<SystemTime>) -> Secret {
        let until = until.and_then(rotation::instant);
        let mut annotations = vec![(SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION, request)];
        if let Some(until) = &until {
            annotations.push((VERIFY_PREVIOUS_UNTIL_ANNOTATION, until));
        }
        rotation::state_secret(
            SecretTarget {
                name: &self.target_name,
                namespace: &self.spec.namespace,
                cluster_name: &self.spec.cluster_name,
            },
            data,
            &annotations,
        )
    }

    /// No rotation runs: the last one's condition, or a new request refused or started (the
    /// next key trusted beside the current one).
    fn idle(&mut self, last: Option<&str>) -> Result<(), Error> {
        let Some(request) = self.inputs.request.filter(|r| !r.is_empty()) else {
            self.out.condition = last.map(done);
            return Ok(());
        };
        if last == Some(request) {
            self.out.condition = Some(done(request));
            return Ok(());
        }
        if let Some(why) = refusal(self.spec, self.inputs.service_account, self.inputs.uid) {
            self.out.condition = Some(ROTATION.refused(request, &why));
            return Ok(());
        }
        let next = ServiceAccountKeyPair::generate(self.inputs.algorithm)?;
        let state = self.state(
            request,
            &[
                (NEXT_KEY, next.private_pem()),
                (VERIFY_KEY, next.public_pem()),
            ],
            None,
        );
        self.out.writes.push(state);
        self.out.verify_extra = Some(next.public_pem().to_owned());
        self.out.fingerprint = fingerprint(self.sa.public_pem(), Some(next.public_pem()));
        self.out.condition = Some(trusting(request));
        self.out.due = Some(SETTLE_RECHECK);
        Ok(())
    }

    /// The next key signs: the rotation Secret records the previous public key (still with
    /// the next key), `<cluster>-sa` gets the next key pair, and the rotation Secret keeps
    /// only the previous public key with the end of the overlap. A promotion already written
    /// (`<cluster>-sa` holds the next key) only finishes the last step.
    fn promote(
        &mut self,
        request: &str,
        next: &str,
        previous: Option<String>,
    ) -> Result<(), Error> {
        let next_pair = ServiceAccountKeyPair::from_private_pem(next)?;
        let previous = previous.unwrap_or_else(|| self.sa.public_pem().to_owned());
        if self.sa.public_pem() != next_pair.public_pem() {
            let recorded = self.state(
                request,
                &[
                    (NEXT_KEY, next),
                    (VERIFY_KEY, next_pair.public_pem()),
                    (PREVIOUS_KEY, previous.as_str()),
                ],
                None,
            );
            self.out.writes.push(recorded);
            self.out.writes.push(secrets::service_account_secret(
                SecretTarget {
                    name: &self.spec.names.service_account_secret(),
                    namespace: &self.spec.namespace,
                    cluster_name: &self.spec.cluster_name,
                },
                &next_pair,
            ));
        }
        let until = self.inputs.now + self.inputs.overlap;
        let overlapping = self.state(request, &[(VERIFY_KEY, previous.as_str())], Some(until));
        self.out.writes.push(overlapping);
        self.out.fingerprint = fingerprint(next_pair.public_pem(), Some(&previous));
        self.out.verify_extra = Some(previous);
        self.out.condition = Some(overlap(request, until));
        self.out.due = Some(SETTLE_RECHECK);
        Ok(())
    }

    /// The overlap: once it has passed and every pod runs the new key with the old one, the
    /// old public key is dropped.
    fn overlap(&mut self, request: &str, until: SystemTime) {
        let left = until.duration_since(self.inputs.now).unwrap_or_default();
        if !left.is_zero() || !self.settled {
            self.out.condition = Some(overlap(request, until));
            self.out.due = Some(if self.settled { left } else { SETTLE_RECHECK });
            return;
        }
        let done_state = self.state(request, &[], None);
        self.out.writes.push(done_state);
        self.out.verify_extra = None;
        self.out.fingerprint = fingerprint(self.sa.public_pem(), None);
        self.out.condition = Some(done(request));
    }
}

fn trusting(request: &str) -> Cond {
    ROTATION.in_phase(
        request,
        reasons::TRUSTING_NEW_KEY,
        "the API servers roll to accept the new key as well; the old key signs until every one \
         of them does",
    )
}

fn overlap(request: &str, until: SystemTime) -> Cond {
    let until = rotation::instant(until).unwrap_or_else(|| "?".into());
    ROTATION.in_phase(
        request,
        reasons::VERIFYING_PREVIOUS_KEY,
        &format!("the new key signs; tokens signed by the old key are accepted until {until}"),
    )
}

fn done(request: &str) -> Cond {
    ROTATION.done(
        request,
        &format!(
            "only the new key signs and verifies (set the annotation \
             {SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION} to a new value to rotate again)"
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
