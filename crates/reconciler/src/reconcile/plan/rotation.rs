//! What the three rotations share (pure): the service-account key ([`super::sa_rotation`]),
//! the certificate authorities ([`super::ca_rotation`]) and the encryption key
//! ([`super::encryption_rotation`]). Each keeps its own phases, their table in its module
//! docs, and what each phase writes; this module holds the rest:
//!
//! - reading the state Secret back: the request a rotation runs or last ran (the request
//!   annotation, recorded on the state Secret too) and the phase under way ([`Rotation::read`]),
//!   the UTF-8 values ([`text`]), annotations ([`annotation`]) and instants ([`instant_of`]) it
//!   holds;
//! - the *settled* check a phase waits for before it moves on ([`settled`]): the Deployment
//!   has rolled out and every control-plane pod, terminating ones included, carries the
//!   fingerprint of the phase;
//! - the conditions ([`Rotation::in_phase`], [`Rotation::done`], [`Rotation::refused`]) and the
//!   note naming a request that waits for the running rotation ([`Rotation::note_waiting`]);
//! - why a new rotation is refused: key material this control plane does not control, or
//!   flags of the user's `extraArgs` that name its files ([`refusal`]);
//! - writing the state Secret ([`state_secret`], [`restated`], [`updated`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kamaji_api::conditions::reasons;
use kamaji_api::kcp::Component;
use kamaji_api::validation::FlagArg;
use kamaji_bootstrap::secrets::{self, SecretTarget};

use crate::reconcile::status::Cond;
use crate::reconcile::validate::ValidSpec;

/// How often a rotation waiting for pods looks again: a terminating pod's end produces no
/// event for the KamajiControlPlane.
pub const SETTLE_RECHECK: Duration = Duration::from_secs(3);

/// The control-plane pods as a rotation reads them
/// ([`crate::reconcile::observe::ControlPlanePods`]): the rotation's fingerprint annotation of
/// each pod, terminating ones included, and whether the Deployment has rolled out.
pub type Pods<'a> = (&'a [Option<String>], bool);

/// Whether a phase is settled: the Deployment has rolled out and every control-plane pod
/// carries `fingerprint` (`None`: no fingerprint annotation, as outside a rotation); false
/// while the pods are not listed.
#[must_use]
pub fn settled(pods: Option<Pods<'_>>, fingerprint: Option<&str>) -> bool {
    pods.is_some_and(|(pods, rolled_out)| {
        rolled_out && pods.iter().all(|p| p.as_deref() == fingerprint)
    })
}

/// One rotation, as the core reads, reports and names it.
#[derive(Debug, Clone, Copy)]
pub struct Rotation {
    /// Its condition type (`…Rotated`).
    pub condition: &'static str,
    /// The annotation that requests it on the KamajiControlPlane and records the request on
    /// its state Secret.
    pub request_annotation: &'static str,
    /// Whether its messages quote the request (`rotation "r1"`) or name it bare
    /// (`rotation r1`, the encryption key's).
    pub quoted: bool,
}

/// What a rotation's state Secret records.
#[derive(Debug, Clone)]
pub struct Recorded<'a, P> {
    /// The state Secret, when stored.
    pub secret: Option<&'a Secret>,
    /// Its request annotation: the request the rotation runs, or the last one it ran.
    pub request: Option<String>,
    /// The phase under way (`None`: no rotation runs).
    pub phase: Option<P>,
}

impl<P> Recorded<'_, P> {
    /// The request of the rotation under way.
    #[must_use]
    pub fn running(&self) -> Option<&str> {
        self.phase.as_ref().and(self.request.as_deref())
    }

    /// The request of the last rotation done, while none runs.
    #[must_use]
    pub fn last(&self) -> Option<&str> {
        self.request
            .as_deref()
            .filter(|r| self.phase.is_none() && !r.is_empty())
    }
}

impl Rotation {
    /// What `state` records: its request and the phase `phase` reads from it (`None` when no
    /// rotation runs).
    pub fn read<'a, P>(
        &self,
        state: Option<&'a Secret>,
        phase: impl FnOnce(&Secret) -> Option<P>,
    ) -> Recorded<'a, P> {
        Recorded {
            secret: state,
            request: state.and_then(|s| annotation(s, self.request_annotation)),
            phase: state.and_then(phase),
        }
    }

    /// `rotation "r1"`, or `rotation r1` when the messages name requests bare.
    #[must_use]
    pub fn named(&self, request: &str) -> String {
        if self.quoted {
            format!("rotation {request:?}")
        } else {
            format!("rotation {request}")
        }
    }

    /// The condition, `False` with `reason` and `message`: a rotation runs or waits.
    #[must_use]
    pub fn running(&self, reason: &'static str, message: impl Into<String>) -> Cond {
        Cond::no(self.condition, reason, message)
    }

    /// The condition while rotation `request` is in a phase: `rotation "r1": <what>`.
    #[must_use]
    pub fn in_phase(&self, request: &str, reason: &'static str, what: &str) -> Cond {
        self.running(reason, format!("{}: {what}", self.named(request)))
    }

    /// The condition refusing rotation `request`, saying `why`.
    #[must_use]
    pub fn refused(&self, request: &str, why: &str) -> Cond {
        self.in_phase(request, reasons::ROTATION_REFUSED, why)
    }

    /// The condition once rotation `request` is done: `True`, `rotation "r1" done: <what>`.
    #[must_use]
    pub fn done(&self, request: &str, what: &str) -> Cond {
        Cond::yes(
            self.condition,
            reasons::ROTATED,
            format!("{} done: {what}", self.named(request)),
        )
    }

    /// Names `requested` (the KamajiControlPlane's annotation) in the condition of the rotation
    /// `running`, when it is another request: it waits for the running one to finish, so that
    /// it gets key material made after it was asked for.
    pub fn note_waiting(
        &self,
        condition: Option<&mut Cond>,
        running: Option<&str>,
        requested: Option<&str>,
    ) {
        if let (Some(cond), Some(running), Some(requested)) = (condition, running, requested)
            && !requested.is_empty()
            && requested != running
        {
            let _ = write!(
                cond.message,
                "; {} waits for {} to finish",
                self.named(requested),
                self.named(running)
            );
        }
    }
}

/// What a rotation replaces, as a refusal names it.
#[derive(Debug, Clone, Copy)]
pub struct Material {
    /// One of it (`key`, `CA`).
    pub one: &'static str,
    /// All of it (`key`, `CAs`).
    pub all: &'static str,
}

/// Why a new rotation of `material` cannot start, if it cannot: a Secret of `roots` (with its
/// name) is not controlled by this control plane (`uid`), or a component's `extraArgs` set one
/// of `flags`, which name the files of that material (the user's then, not kamaji-rs's).
#[must_use]
pub fn refusal(
    spec: &ValidSpec,
    roots: &[(&Secret, String)],
    uid: &str,
    flags: &[(Component, &str)],
    material: Material,
) -> Option<String> {
    let Material { one, all } = material;
    if let Some((_, name)) = roots.iter().find(|(s, _)| !secrets::controlled_by(s, uid)) {
        return Some(format!(
            "Secret {name} was not created by this KamajiControlPlane (it is not its \
             controller): kamaji-rs rotates only a {one} it generated; rotate a {one} you \
             provide yourself"
        ));
    }
    flags.iter().find_map(|(c, flag)| {
        spec.component(*c)
            .extra_args
            .iter()
            .any(|a| FlagArg::parse(a).name == *flag)
            .then(|| {
                format!(
                    "{} sets --{flag}: the {one} files are the user's, so kamaji-rs cannot \
                     rotate the {all}; remove the flag first",
                    c.spec_field()
                )
            })
    })
}

/// The UTF-8 value of `key` in `secret`'s data.
#[must_use]
pub fn text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// The value of annotation `key` on `secret`.
#[must_use]
pub fn annotation(secret: &Secret, key: &str) -> Option<String> {
    secret.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The instant (RFC 3339) in annotation `key` on `secret`.
#[must_use]
pub fn instant_of(secret: &Secret, key: &str) -> Option<SystemTime> {
    annotation(secret, key)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(SystemTime::from)
}

/// `t` as an annotation value (RFC 3339), when it is representable.
#[must_use]
pub fn instant(t: SystemTime) -> Option<String> {
    Timestamp::try_from(t).ok().map(|t| t.to_string())
}

/// A state Secret as `target` (labels and type of [`secrets::data_secret`]) holding `data`,
/// with exactly `annotations`.
#[must_use]
pub fn state_secret(
    target: SecretTarget<'_>,
    data: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Secret {
    let mut s = secrets::data_secret(
        target,
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>(),
    );
    s.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    s
}

/// The stored state Secret again as `target` (its data and annotations; labels and type of
/// [`secrets::data_secret`]), with `annotations` set.
#[must_use]
pub fn restated(target: SecretTarget<'_>, stored: &Secret, annotations: &[(&str, &str)]) -> Secret {
    let mut s = secrets::data_secret(target, stored.data.clone().unwrap_or_default());
    s.metadata
        .annotations
        .clone_from(&stored.metadata.annotations);
    annotate(
        &mut s,
        &annotations
            .iter()
            .map(|(k, v)| (*k, Some(*v)))
            .collect::<Vec<_>>(),
    );
    s
}

/// `stored` itself (its metadata kept, but what the API server manages) with `value` under
/// `key` and the annotations `set` (a `None` value removes one): for a state Secret that
/// holds more than the rotation's state.
#[must_use]
pub fn updated(stored: &Secret, key: &str, value: &str, set: &[(&str, Option<&str>)]) -> Secret {
    let mut s = stored.clone();
    s.data
        .get_or_insert_default()
        .insert(key.into(), ByteString(value.as_bytes().to_vec()));
    annotate(&mut s, set);
    s.metadata.managed_fields = None;
    s.metadata.resource_version = None;
    s
}

/// Sets the annotations `set` on `secret` (a `None` value removes one).
fn annotate(secret: &mut Secret, set: &[(&str, Option<&str>)]) {
    let annotations = secret.metadata.annotations.get_or_insert_default();
    for (k, v) in set {
        match v {
            Some(v) => annotations.insert((*k).to_owned(), (*v).to_owned()),
            None => annotations.remove(*k),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(fingerprints: &[Option<&str>]) -> Vec<Option<String>> {
        fingerprints.iter().map(|f| f.map(str::to_owned)).collect()
    }

    /// Settled: rolled out, and every pod on the fingerprint (none outside a rotation).
    #[test]
    fn a_phase_is_settled_once_rolled_out_with_every_pod_on_its_fingerprint() {
        let on = pods(&[Some("a"), Some("a")]);
        assert!(settled(Some((&on, true)), Some("a")));
        assert!(!settled(Some((&on, false)), Some("a")), "not rolled out");
        assert!(!settled(None, Some("a")), "pods not listed");
        let mixed = pods(&[Some("a"), None]);
        assert!(!settled(Some((&mixed, true)), Some("a")));
        assert!(settled(Some((&pods(&[None]), true)), None));
    }

    /// A request other than the running one is named in the running one's condition.
    #[test]
    fn a_waiting_request_is_named_quoted_or_bare() {
        let quoted = Rotation {
            condition: "X",
            request_annotation: "a",
            quoted: true,
        };
        let mut cond = quoted.in_phase("r1", reasons::ROTATED, "runs");
        quoted.note_waiting(Some(&mut cond), Some("r1"), Some("r2"));
        assert_eq!(
            cond.message,
            "rotation \"r1\": runs; rotation \"r2\" waits for rotation \"r1\" to finish"
        );
        let bare = Rotation {
            quoted: false,
            ..quoted
        };
        let mut cond = bare.running(reasons::ROTATED, "runs");
        for (running, requested) in [
            (Some("r1"), Some("r1")),
            (Some("r1"), Some("")),
            (None, Some("r2")),
        ] {
            bare.note_waiting(Some(&mut cond), running, requested);
        }
        assert_eq!(cond.message, "runs");
        bare.note_waiting(Some(&mut cond), Some("r1"), Some("r2"));
        assert_eq!(
            cond.message,
            "runs; rotation r2 waits for rotation r1 to finish"
        );
    }
}
