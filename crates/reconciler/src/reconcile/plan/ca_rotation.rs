//! Certificate-authority rotation with overlap (pure): which CAs sign and which the
//! components trust, read back from the stored Secrets, and the next step of a rotation the
//! user requested with [`CA_ROTATION_ANNOTATION`]. It rotates the cluster CA
//! (`<cluster>-ca`) and the front-proxy CA (`<cluster>-proxy`) together.
//!
//! The state lives in `<cluster>-ca-rotation.keys` (phase annotation
//! [`PHASE_ANNOTATION`]), so a manager restart at any point resumes it:
//!
//! | phase | signs | components and kubeconfigs trust | API server serves |
//! |---|---|---|---|
//! | none / `Done` | current CAs | current CAs | its certificate |
//! | `Trusting` | old CAs | old + next (bundles) | its certificate (old CA) |
//! | `Issuing` | new CAs | new + old | its certificate (new CA) + new CA cross-signed by the old |
//! | `ReplacingWorkers` | new CAs | new + old | as `Issuing`; the Cluster's MachineDeployments roll |
//! | `Dropping` | new CAs | new | its certificate |
//!
//! A phase moves on only once it is *settled*: the Deployment has rolled out and every
//! control-plane pod, terminating ones included, carries the fingerprint
//! ([`CERTIFICATE_AUTHORITIES_ANNOTATION`]) of the phase. So no API server that does not
//! trust the new CA still runs when the new CA starts signing, and no kubeconfig or worker
//! that trusts only the old CA is left when it is dropped:
//!
//! - a client holding a kubeconfig made before the rotation (old CA only, client certificate
//!   of the old CA) keeps working until `Dropping`: the API servers accept both CAs' client
//!   certificates and serve the cross-signed new CA, which chains to the old one;
//! - `cluster-info` carries both CAs from `Trusting` on, so `kubeadm join` with a CA pin of
//!   either CA (CABPK pins `<cluster>-ca`) works throughout (kubeadm accepts any pinned CA of
//!   the bundle), and nodes that join get both CAs;
//! - workers that joined before the rotation trust only the old CA (their kubelet.conf and
//!   client-CA file) and hold client certificates of the old CA, which no running kubelet
//!   updates: `ReplacingWorkers` sets `spec.rollout.after` on every MachineDeployment of the
//!   Cluster, so Cluster API replaces each of their Machines, and waits until no Machine of
//!   the Cluster was created before that instant (a Machine no MachineDeployment owns is
//!   named in the condition for its owner to replace). Meanwhile the API servers' kubelet
//!   client certificate stays issued by the old CA, which those workers' kubelets trust.
//!
//! Promoting writes the rotation Secret (with the old CAs) before it overwrites the roots, so
//! a pass killed in between finds both; until `Done` the rotation Secret keeps the new CAs
//! and a root that does not hold them is written again.
//!
//! What the three rotations share (reading the request back, the settled check, the
//! conditions, the note naming a request that waits, writing the rotation Secret) is
//! [`super::rotation`]'s; this module holds the phases and what each writes.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::kcp::Component;
use kamaji_api::meta::CA_ROTATION_ANNOTATION;
use kamaji_api::names::InternalSecret;
use kamaji_bootstrap::pki::{
    CA_COMMON_NAME, CertificateAuthority, FRONT_PROXY_CA_COMMON_NAME, KeyAlgorithm,
};
use kamaji_bootstrap::secrets::{self, SecretTarget};
use sha2::{Digest, Sha256};

use super::rotation::{self, Material, Pods, Recorded, Rotation, SETTLE_RECHECK, annotation, text};
use crate::error::Error;
use crate::reconcile::status::Cond;
use crate::reconcile::validate::ValidSpec;

/// Pod-template annotation: fingerprint of what the components sign with and trust, while a
/// rotation runs (absent outside one and while dropping the old CAs).
pub const CERTIFICATE_AUTHORITIES_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/kamaji-rs-certificate-authorities";
/// Annotation of the rotation Secret: the phase (`Trusting`, `Issuing`, `ReplacingWorkers`,
/// `Dropping`, `Done`).
pub const PHASE_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/ca-rotation-phase";
/// Annotation of the rotation Secret while replacing workers: the instant (RFC 3339) set as
/// the MachineDeployments' `spec.rollout.after`; Machines created before it are replaced.
pub const WORKERS_AFTER_ANNOTATION: &str =
    "controlplane.cluster.x-k8s.io/ca-rotation-workers-after";
/// Key of the rotation Secret: the next cluster CA's certificate.
pub const NEXT_CA_CRT: &str = "next-ca.crt";
/// Key of the rotation Secret: the next cluster CA's key.
pub const NEXT_CA_KEY: &str = "next-ca.key";
/// Key of the rotation Secret: the next front-proxy CA's certificate.
pub const NEXT_FRONT_PROXY_CA_CRT: &str = "next-front-proxy-ca.crt";
/// Key of the rotation Secret: the next front-proxy CA's key.
pub const NEXT_FRONT_PROXY_CA_KEY: &str = "next-front-proxy-ca.key";
/// Key of the rotation Secret: the previous cluster CA's certificate.
pub const PREVIOUS_CA_CRT: &str = "previous-ca.crt";
/// Key of the rotation Secret: the previous cluster CA's key (it keeps issuing the API
/// servers' kubelet client certificate while old workers run).
pub const PREVIOUS_CA_KEY: &str = "previous-ca.key";
/// Key of the rotation Secret: the new cluster CA cross-signed by the previous one.
pub const CROSS_SIGNED_CA_CRT: &str = "ca-cross-signed.crt";
/// Key of the rotation Secret (mounted): the cluster CAs the components trust.
pub const CA_BUNDLE: &str = "ca-bundle.crt";
/// Key of the rotation Secret (mounted): the front-proxy CAs the components trust.
pub const FRONT_PROXY_CA_BUNDLE: &str = "front-proxy-ca-bundle.crt";
/// How often a rotation waiting for workers to be replaced looks again (Machines are not
/// watched: a rotation is rare, a watch on every Machine is not).
pub const WORKERS_RECHECK: Duration = Duration::from_secs(10);

/// A worker Machine of the Cluster, as the `ReplacingWorkers` phase needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerMachine {
    /// Its name.
    pub name: String,
    /// Its `metadata.creationTimestamp`.
    pub created: SystemTime,
    /// Whether a MachineSet owns it (so a MachineDeployment's rollout replaces it).
    pub in_machine_set: bool,
}

/// A MachineSet of the Cluster whose scale-up Cluster API holds back (its `ScalingUp`
/// condition says it is blocked), as the `ReplacingWorkers` phase reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldMachineSet {
    /// Its name.
    pub name: String,
    /// The MachineDeployment it belongs to (label `cluster.x-k8s.io/deployment-name`).
    pub machine_deployment: Option<String>,
    /// Cluster API's reasons, one per blocked check (the condition's `* ` lines).
    pub reasons: Vec<String>,
}

/// The certificate authorities of one pass (the default: no rotation, nothing to write).
#[derive(Debug, Clone, Default)]
pub struct CertificateAuthorities {
    /// The cluster CAs the components and kubeconfigs trust, while a rotation runs.
    pub ca_bundle: Option<String>,
    /// The front-proxy CAs the components trust, while a rotation runs.
    pub front_proxy_ca_bundle: Option<String>,
    /// Served after the API server's certificate (the new CA cross-signed by the old one).
    pub serving_chain: Option<String>,
    /// The CAs that sign from this pass on when they are not the stored roots yet (cluster,
    /// front-proxy): the leaves of this pass are issued by them.
    pub signing: Option<(CertificateAuthority, CertificateAuthority)>,
    /// The CA that issues the API servers' kubelet client certificate while workers that
    /// trust only it may run.
    pub kubelet_client_issuer: Option<CertificateAuthority>,
    /// Fingerprint for the pod template ([`CERTIFICATE_AUTHORITIES_ANNOTATION`]).
    pub fingerprint: Option<String>,
    /// Secrets to write, in order (rotation Secret, then `<cluster>-ca` and
    /// `<cluster>-proxy`).
    pub writes: Vec<Secret>,
    /// While replacing workers: the `spec.rollout.after` every MachineDeployment of the
    /// Cluster must have at least.
    pub roll_workers_after: Option<SystemTime>,
    /// When the old CAs are dropped and no API server trusts them any more: what the tenant's
    /// `kube-system/extension-apiserver-authentication` must trust from now on, set before the
    /// rotation is recorded as done (kube-apiserver only ever adds to that ConfigMap).
    pub authentication_trust: Option<AuthenticationTrust>,
    /// `CertificateAuthoritiesRotated`, once a rotation was requested.
    pub condition: Option<Cond>,
    /// When to look again for this rotation.
    pub due: Option<Duration>,
}

/// The CAs the tenant's `kube-system/extension-apiserver-authentication` ConfigMap publishes
/// to extension API servers and webhooks. kube-apiserver's cluster-authentication-trust
/// controller merges its own CA files into what the ConfigMap holds and never removes a
/// certificate before it expires, so after a rotation the old CAs stay there until replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticationTrust {
    /// `client-ca-file`: the cluster CA, PEM.
    pub client_ca: String,
    /// `requestheader-client-ca-file`: the front-proxy CA, PEM.
    pub requestheader_client_ca: String,
    /// The Secret holding the provider's super-admin kubeconfig for the tenant.
    pub super_admin_secret: String,
}

/// What [`plan`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The stored `<cluster>-ca`.
    pub ca: &'a Secret,
    /// The stored `<cluster>-proxy`.
    pub front_proxy_ca: &'a Secret,
    /// The stored rotation Secret.
    pub state: Option<&'a Secret>,
    /// The request: the KamajiControlPlane's annotation value.
    pub request: Option<&'a str>,
    /// The UID of the KamajiControlPlane (a rotation overwrites roots it controls only).
    pub uid: &'a str,
    /// Fingerprints of the control-plane pods, when listed ([`rotation::Pods`]).
    pub pods: Option<Pods<'a>>,
    /// The Cluster's worker Machines, when listed (while replacing workers).
    pub machines: Option<&'a [WorkerMachine]>,
    /// The Cluster's MachineSets Cluster API holds back, when listed (while replacing
    /// workers).
    pub held: Option<&'a [HeldMachineSet]>,
    /// The upgrade the control plane is in, when it is in one (`from → to`): a new rotation
    /// waits for it ([`kamaji_api::lifecycle::decide`]).
    pub upgrading: Option<&'a str>,
    /// Algorithm of the next CAs' keys.
    pub algorithm: KeyAlgorithm,
    /// Now.
    pub now: SystemTime,
}

/// The phases, as stored in [`PHASE_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Trusting,
    Issuing,
    ReplacingWorkers,
    Dropping,
    Done,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Trusting => "Trusting",
            Self::Issuing => "Issuing",
            Self::ReplacingWorkers => "ReplacingWorkers",
            Self::Dropping => "Dropping",
            Self::Done => "Done",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            Self::Trusting,
            Self::Issuing,
            Self::ReplacingWorkers,
            Self::Dropping,
            Self::Done,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }

    /// The phase under way that `state` records (`Done` is none).
    fn of(state: &Secret) -> Option<Self> {
        Self::parse(&annotation(state, PHASE_ANNOTATION)?).filter(|p| *p != Self::Done)
    }
}

/// The CA rotation, as the core reads and reports it.
const ROTATION: Rotation = Rotation {
    condition: types::CERTIFICATE_AUTHORITIES_ROTATED,
    request_annotation: CA_ROTATION_ANNOTATION,
    quoted: true,
};

/// Whether the rotation Secret says a rotation is under way (pods are listed then, and
/// Machines while replacing workers: the second value).
#[must_use]
pub fn under_way(state: Option<&Secret>) -> (bool, bool) {
    let phase = state.and_then(Phase::of);
    (phase.is_some(), phase == Some(Phase::ReplacingWorkers))
}

/// Why a new rotation cannot start, if it cannot: a root is not this control plane's, or the
/// user's `extraArgs` name the CA files themselves.
fn refusal(spec: &ValidSpec, inputs: &Inputs<'_>) -> Option<String> {
    rotation::refusal(
        spec,
        &[
            (inputs.ca, spec.names.ca_secret()),
            (inputs.front_proxy_ca, spec.names.front_proxy_ca_secret()),
        ],
        inputs.uid,
        &[
            (Component::ApiServer, "client-ca-file"),
            (Component::ApiServer, "requestheader-client-ca-file"),
            (Component::ApiServer, "tls-cert-file"),
            (Component::ApiServer, "kubelet-client-certificate"),
            (Component::ApiServer, "proxy-client-cert-file"),
            (Component::ControllerManager, "client-ca-file"),
            (Component::ControllerManager, "requestheader-client-ca-file"),
            (Component::ControllerManager, "root-ca-file"),
            (Component::ControllerManager, "cluster-signing-cert-file"),
            (Component::ControllerManager, "cluster-signing-key-file"),
        ],
        Material {
            one: "CA",
            all: "CAs",
        },
    )
}

/// `sha256:` of the phase's signing CAs, bundles and chain.
fn fingerprint(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    format!("sha256:{}", hex::encode(h.finalize()))
}

fn bundle(first: &str, second: &str) -> String {
    let mut out = first.trim_end().to_owned();
    out.push('\n');
    out.push_str(second.trim_end());
    out.push('\n');
    out
}

fn ca_of(secret: &Secret, crt: &str, key: &str) -> Result<CertificateAuthority, Error> {
    let (c, k) = text(secret, crt).zip(text(secret, key)).ok_or_else(|| {
        Error::Pki(crate::error::PkiError::unusable_root(
            secret,
            format!("{crt} or {key} missing"),
        ))
    })?;
    Ok(CertificateAuthority::from_pem(&c, &k)?)
}

/// The next CAs, cluster and front-proxy.
type Pair = (CertificateAuthority, CertificateAuthority);

/// The CAs of this pass and the next step of a requested rotation. A request made while
/// another rotation runs waits for it: the running one's condition names it.
///
/// # Errors
/// [`Error`] when stored CA material does not load or new CAs cannot be made.
pub fn plan(spec: &ValidSpec, inputs: &Inputs<'_>) -> Result<CertificateAuthorities, Error> {
    let recorded = ROTATION.read(inputs.state, Phase::of);
    let mut out = phases(spec, inputs, &recorded)?;
    ROTATION.note_waiting(out.condition.as_mut(), recorded.running(), inputs.request);
    Ok(out)
}

/// The CAs of this pass and the next step of the rotation under way, or of a new one.
fn phases(
    spec: &ValidSpec,
    inputs: &Inputs<'_>,
    recorded: &Recorded<'_, Phase>,
) -> Result<CertificateAuthorities, Error> {
    let mut pass = Pass {
        spec,
        inputs,
        target_name: spec.names.internal_secret(InternalSecret::CaRotation),
        out: CertificateAuthorities::default(),
    };
    match (recorded.secret, recorded.phase) {
        (Some(state), Some(phase)) => {
            let request = recorded.request.as_deref().unwrap_or_default();
            pass.under_way(state, request, phase)?;
        }
        _ => pass.idle(recorded.last())?,
    }
    Ok(pass.out)
}

/// One pass: what it reads, and the CAs it leaves.
struct Pass<'a> {
    spec: &'a ValidSpec,
    inputs: &'a Inputs<'a>,
    /// `<cluster>-ca-rotation.keys`.
    target_name: String,
    out: CertificateAuthorities,
}

impl Pass<'_> {
    fn target(&self) -> SecretTarget<'_> {
        SecretTarget {
            name: &self.target_name,
            namespace: &self.spec.namespace,
            cluster_name: &self.spec.cluster_name,
        }
    }

    /// The rotation Secret of `request` in `phase`, holding `data`.
    fn state(&self, request: &str, phase: Phase, data: &[(&str, &str)]) -> Secret {
        rotation::state_secret(
            self.target(),
            data,
            &[
                (CA_ROTATION_ANNOTATION, request),
                (PHASE_ANNOTATION, phase.name()),
            ],
        )
    }

    /// The stored rotation Secret, moved on to `phase` (`workers_after`: see
    /// [`WORKERS_AFTER_ANNOTATION`]).
    fn move_on(&mut self, state: &Secret, phase: Phase, workers_after: Option<SystemTime>) {
        let after = workers_after.and_then(rotation::instant);
        let mut annotations = vec![(PHASE_ANNOTATION, phase.name())];
        if let Some(after) = &after {
            annotations.push((WORKERS_AFTER_ANNOTATION, after));
        }
        let next = rotation::restated(self.target(), state, &annotations);
        self.out.writes.push(next);
    }

    /// Waits in `phase` (its condition, with `detail`), looking again after `due`.
    fn stay(&mut self, request: &str, phase: Phase, detail: &str, due: Duration) {
        self.out.condition = Some(phase_condition(request, phase, detail));
        self.out.due = Some(due);
    }

    /// Whether every pod runs `fingerprint`.
    fn settled(&self, fingerprint: Option<&str>) -> bool {
        rotation::settled(self.inputs.pods, fingerprint)
    }

    /// No rotation runs: the last one's condition, or a new request refused, waiting for an
    /// upgrade, or started.
    fn idle(&mut self, last: Option<&str>) -> Result<(), Error> {
        let Some(request) = self.inputs.request.filter(|r| !r.is_empty()) else {
            self.out.condition = last.map(done);
            return Ok(());
        };
        if last == Some(request) {
            self.out.condition = Some(done(request));
            return Ok(());
        }
        if let Some(why) = refusal(self.spec, self.inputs) {
            self.out.condition = Some(ROTATION.refused(request, &why));
            return Ok(());
        }
        if let Some(upgrade) = self.inputs.upgrading {
            self.out.condition = Some(waiting_for_upgrade(request, upgrade));
            return Ok(());
        }
        self.start(request)
    }

    /// A new rotation: the next CAs are made and trusted beside the current ones.
    fn start(&mut self, request: &str) -> Result<(), Error> {
        let (inputs, now) = (self.inputs, self.inputs.now);
        let next_ca = CertificateAuthority::generate(CA_COMMON_NAME, inputs.algorithm, now)?;
        let next_proxy =
            CertificateAuthority::generate(FRONT_PROXY_CA_COMMON_NAME, inputs.algorithm, now)?;
        let stored_ca = text(inputs.ca, secrets::TLS_CRT_KEY).unwrap_or_default();
        let stored_proxy = text(inputs.front_proxy_ca, secrets::TLS_CRT_KEY).unwrap_or_default();
        let ca_bundle = bundle(&stored_ca, next_ca.cert_pem());
        let proxy_bundle = bundle(&stored_proxy, next_proxy.cert_pem());
        let state = self.state(
            request,
            Phase::Trusting,
            &[
                (NEXT_CA_CRT, next_ca.cert_pem()),
                (NEXT_CA_KEY, next_ca.key_pem()),
                (NEXT_FRONT_PROXY_CA_CRT, next_proxy.cert_pem()),
                (NEXT_FRONT_PROXY_CA_KEY, next_proxy.key_pem()),
                (CA_BUNDLE, &ca_bundle),
                (FRONT_PROXY_CA_BUNDLE, &proxy_bundle),
            ],
        );
        self.out.writes.push(state);
        self.trust_both((ca_bundle, proxy_bundle));
        self.stay(request, Phase::Trusting, "", SETTLE_RECHECK);
        Ok(())
    }

    /// The rotation under way in `phase`, its state in `state`.
    fn under_way(&mut self, state: &Secret, request: &str, phase: Phase) -> Result<(), Error> {
        let next = (
            ca_of(state, NEXT_CA_CRT, NEXT_CA_KEY)?,
            ca_of(state, NEXT_FRONT_PROXY_CA_CRT, NEXT_FRONT_PROXY_CA_KEY)?,
        );
        let bundles = || {
            (
                text(state, CA_BUNDLE).unwrap_or_default(),
                text(state, FRONT_PROXY_CA_BUNDLE).unwrap_or_default(),
            )
        };
        match phase {
            Phase::Trusting => return self.trusting(request, next, bundles()),
            // `Done` is never under way ([`Phase::of`]).
            Phase::Dropping | Phase::Done => {
                self.sign_with(&next);
                self.dropping(request, &next);
            }
            Phase::Issuing | Phase::ReplacingWorkers => {
                self.sign_with(&next);
                let previous_ca = ca_of(state, PREVIOUS_CA_CRT, PREVIOUS_CA_KEY)?;
                let cross = text(state, CROSS_SIGNED_CA_CRT).unwrap_or_default();
                let fp = self.serve_both(&next.0, previous_ca, cross, bundles());
                if phase == Phase::Issuing {
                    self.issuing(state, request, &fp);
                } else {
                    self.replacing_workers(state, request, &fp);
                }
            }
        }
        Ok(())
    }

    /// The components trust the old and the next CAs (`bundles`, cluster and front-proxy);
    /// the old ones sign. Returns the phase's fingerprint.
    fn trust_both(&mut self, (ca_bundle, proxy_bundle): (String, String)) -> String {
        let stored_ca = text(self.inputs.ca, secrets::TLS_CRT_KEY).unwrap_or_default();
        let fp = fingerprint(&[
            Phase::Trusting.name(),
            &stored_ca,
            &ca_bundle,
            &proxy_bundle,
        ]);
        self.out.ca_bundle = Some(ca_bundle);
        self.out.front_proxy_ca_bundle = Some(proxy_bundle);
        self.out.fingerprint = Some(fp.clone());
        fp
    }

    /// `Trusting`: once every API server trusts the next CAs, they are promoted.
    fn trusting(
        &mut self,
        request: &str,
        next: Pair,
        bundles: (String, String),
    ) -> Result<(), Error> {
        let fp = self.trust_both(bundles);
        if !self.settled(Some(&fp)) {
            self.stay(request, Phase::Trusting, "", SETTLE_RECHECK);
            return Ok(());
        }
        self.promote(request, next)
    }

    /// The next CAs sign from now on. The rotation Secret records the old CAs before the
    /// roots are overwritten.
    fn promote(&mut self, request: &str, (next_ca, next_proxy): Pair) -> Result<(), Error> {
        let (ca, proxy) = (self.inputs.ca, self.inputs.front_proxy_ca);
        let previous_ca = CertificateAuthority::from_pem(
            &text(ca, secrets::TLS_CRT_KEY).unwrap_or_default(),
            &text(ca, secrets::TLS_KEY_KEY).unwrap_or_default(),
        )?;
        let cross = previous_ca.cross_sign(&next_ca)?;
        let ca_bundle = bundle(next_ca.cert_pem(), previous_ca.cert_pem());
        let stored_proxy = text(proxy, secrets::TLS_CRT_KEY).unwrap_or_default();
        let proxy_bundle = bundle(next_proxy.cert_pem(), &stored_proxy);
        let state = self.state(
            request,
            Phase::Issuing,
            &[
                (NEXT_CA_CRT, next_ca.cert_pem()),
                (NEXT_CA_KEY, next_ca.key_pem()),
                (NEXT_FRONT_PROXY_CA_CRT, next_proxy.cert_pem()),
                (NEXT_FRONT_PROXY_CA_KEY, next_proxy.key_pem()),
                (PREVIOUS_CA_CRT, previous_ca.cert_pem()),
                (PREVIOUS_CA_KEY, previous_ca.key_pem()),
                (CROSS_SIGNED_CA_CRT, &cross),
                (CA_BUNDLE, &ca_bundle),
                (FRONT_PROXY_CA_BUNDLE, &proxy_bundle),
            ],
        );
        self.out.writes.push(state);
        let next = (next_ca, next_proxy);
        self.sign_with(&next);
        self.serve_both(&next.0, previous_ca, cross, (ca_bundle, proxy_bundle));
        // The pods roll to the new certificates: `Issuing` starts with this pass.
        self.stay(request, Phase::Issuing, "", SETTLE_RECHECK);
        Ok(())
    }

    /// The next CAs sign this pass's leaves; the roots are written (after the rotation
    /// Secret) when they do not hold them yet, by a promotion or because a pass killed in
    /// between left them behind.
    fn sign_with(&mut self, (next_ca, next_proxy): &Pair) {
        let stored = |s| text(s, secrets::TLS_CRT_KEY).unwrap_or_default();
        if stored(self.inputs.ca) != next_ca.cert_pem()
            || stored(self.inputs.front_proxy_ca) != next_proxy.cert_pem()
        {
            self.out
                .writes
                .extend(root_writes(self.spec, next_ca, next_proxy));
        }
        self.out.signing = Some((next_ca.clone(), next_proxy.clone()));
    }

    /// `Issuing` and `ReplacingWorkers`: both CAs are trusted (`bundles`), the API server
    /// serves the new CA cross-signed by the old one (`cross`), and the old CA issues the
    /// kubelet client certificate. Returns the phases' fingerprint.
    fn serve_both(
        &mut self,
        next_ca: &CertificateAuthority,
        previous_ca: CertificateAuthority,
        cross: String,
        (ca_bundle, proxy_bundle): (String, String),
    ) -> String {
        let fp = fingerprint(&[
            Phase::Issuing.name(),
            next_ca.cert_pem(),
            &ca_bundle,
            &proxy_bundle,
            &cross,
        ]);
        self.out.kubelet_client_issuer = Some(previous_ca);
        self.out.fingerprint = Some(fp.clone());
        self.out.ca_bundle = Some(ca_bundle);
        self.out.front_proxy_ca_bundle = Some(proxy_bundle);
        self.out.serving_chain = Some(cross);
        fp
    }

    /// `Issuing`: once every pod runs the new certificates (`fp`), the workers are replaced.
    fn issuing(&mut self, state: &Secret, request: &str, fp: &str) {
        if !self.settled(Some(fp)) {
            self.stay(request, Phase::Issuing, "", SETTLE_RECHECK);
            return;
        }
        let after = whole_seconds(self.inputs.now);
        self.move_on(state, Phase::ReplacingWorkers, Some(after));
        self.out.roll_workers_after = Some(after);
        self.stay(
            request,
            Phase::ReplacingWorkers,
            "the Cluster's MachineDeployments roll",
            WORKERS_RECHECK,
        );
    }

    /// `ReplacingWorkers`: once every worker Machine is newer than the rollout instant and
    /// every pod still runs `fp`, the old CAs are dropped.
    fn replacing_workers(&mut self, state: &Secret, request: &str, fp: &str) {
        let after =
            rotation::instant_of(state, WORKERS_AFTER_ANNOTATION).unwrap_or(self.inputs.now);
        self.out.roll_workers_after = Some(after);
        let waiting = older_machines(self.inputs.machines.unwrap_or_default(), after);
        if self.inputs.machines.is_none() || !waiting.is_empty() || !self.settled(Some(fp)) {
            let mut detail = if waiting.is_empty() {
                "the Cluster's MachineDeployments roll".to_owned()
            } else {
                format!(
                    "waiting for Machines made before the new CA to be replaced: {}",
                    waiting.join(", ")
                )
            };
            detail.push_str(&held_back(self.inputs.held.unwrap_or_default()));
            self.stay(request, Phase::ReplacingWorkers, &detail, WORKERS_RECHECK);
            return;
        }
        // Every worker joined with the new CA: drop the old ones.
        self.move_on(state, Phase::Dropping, None);
        self.out.ca_bundle = None;
        self.out.front_proxy_ca_bundle = None;
        self.out.serving_chain = None;
        self.out.kubelet_client_issuer = None;
        self.out.fingerprint = None;
        self.stay(request, Phase::Dropping, "", SETTLE_RECHECK);
    }

    /// `Dropping`: once no pod trusts the old CAs, the tenant's trust is reset to the new
    /// ones and the rotation is done.
    fn dropping(&mut self, request: &str, (next_ca, next_proxy): &Pair) {
        if !self.settled(None) {
            self.stay(request, Phase::Dropping, "", SETTLE_RECHECK);
            return;
        }
        self.out.authentication_trust = Some(AuthenticationTrust {
            client_ca: next_ca.cert_pem().to_owned(),
            requestheader_client_ca: next_proxy.cert_pem().to_owned(),
            super_admin_secret: self.spec.names.super_admin_kubeconfig_secret(),
        });
        let done_state = self.state(request, Phase::Done, &[]);
        self.out.writes.push(done_state);
        self.out.condition = Some(done(request));
    }
}

/// The worker Machines made before `after`, as the `ReplacingWorkers` condition names them.
fn older_machines(machines: &[WorkerMachine], after: SystemTime) -> Vec<String> {
    machines
        .iter()
        .filter(|m| m.created < after)
        .map(|m| {
            if m.in_machine_set {
                m.name.clone()
            } else {
                format!(
                    "{} (no MachineDeployment owns it: delete it to replace it)",
                    m.name
                )
            }
        })
        .collect()
}

/// What Cluster API holds back, for the `ReplacingWorkers` condition: each MachineSet that
/// cannot scale up with Cluster API's reasons, and what to do when a reason is kubeadm's
/// version skew (the replacement would join at the MachineDeployment's minor).
fn held_back(held: &[HeldMachineSet]) -> String {
    let mut out = String::new();
    for ms in held {
        let owner = ms
            .machine_deployment
            .as_ref()
            .map(|md| format!(" of MachineDeployment {md}"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "; Cluster API holds back MachineSet {}{owner}: {}",
            ms.name,
            ms.reasons.join("; ")
        );
        if let Some(md) = &ms.machine_deployment
            && ms.reasons.iter().any(|r| r.contains("KubeadmVersionSkew"))
        {
            let _ = write!(
                out,
                " (upgrade MachineDeployment {md} to the control plane's minor version: its \
                 new Machines then join with the new CA)"
            );
        }
    }
    out
}

/// `CertificateAuthoritiesRotated=False` for a rotation that waits for the control plane's
/// upgrade `upgrade` to roll out before it starts.
fn waiting_for_upgrade(request: &str, upgrade: &str) -> Cond {
    ROTATION.running(
        reasons::WAITING_FOR_UPGRADE,
        format!(
            "{} waits for the upgrade {upgrade} to roll out: Cluster API creates no worker \
             Machine while the control plane upgrades, and the rotation replaces the workers",
            ROTATION.named(request)
        ),
    )
}

fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn root_writes(
    spec: &ValidSpec,
    ca: &CertificateAuthority,
    front_proxy: &CertificateAuthority,
) -> [Secret; 2] {
    let ca_name = spec.names.ca_secret();
    let proxy_name = spec.names.front_proxy_ca_secret();
    let target = |name| SecretTarget {
        name,
        namespace: &spec.namespace,
        cluster_name: &spec.cluster_name,
    };
    [
        secrets::ca_secret(target(ca_name.as_str()), ca),
        secrets::ca_secret(target(proxy_name.as_str()), front_proxy),
    ]
}

fn phase_condition(request: &str, phase: Phase, detail: &str) -> Cond {
    let (reason, what) = match phase {
        Phase::Trusting => (
            reasons::TRUSTING_NEW_CA,
            "the control plane rolls to trust the new CAs as well; the old ones still sign",
        ),
        Phase::Issuing => (
            reasons::ISSUING_FROM_NEW_CA,
            "the new CAs sign and the control plane rolls to their certificates; the old CAs \
             are still trusted",
        ),
        Phase::ReplacingWorkers => (
            reasons::REPLACING_WORKERS,
            "workers are replaced so that every one joins with the new CA; the old CAs are \
             still trusted",
        ),
        Phase::Dropping | Phase::Done => (
            reasons::DROPPING_PREVIOUS_CA,
            "the control plane rolls to trust only the new CAs",
        ),
    };
    let detail = if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    };
    ROTATION.in_phase(request, reason, &format!("{what}{detail}"))
}

fn done(request: &str) -> Cond {
    ROTATION.done(
        request,
        &format!(
            "only the new CAs sign and are trusted (set the annotation {CA_ROTATION_ANNOTATION} \
             to a new value to rotate again)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::reconcile::validate::tests::{fixture, valid};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kamaji_bootstrap::pki::inspect::is_signed_by;

    const UID: &str = "f0-uid";

    struct World {
        spec: ValidSpec,
        ca: Secret,
        proxy: Secret,
        state: Option<Secret>,
        now: SystemTime,
        held: Vec<HeldMachineSet>,
        upgrading: Option<String>,
    }

    impl World {
        fn new(patch: serde_json::Value) -> Self {
            let spec = valid(&fixture(patch));
            let root = |name: String, cn: &str| {
                let mut s = secrets::ca_secret(
                    SecretTarget {
                        name: &name,
                        namespace: &spec.namespace,
                        cluster_name: &spec.cluster_name,
                    },
                    &CertificateAuthority::generate(cn, KeyAlgorithm::default(), SystemTime::now())
                        .unwrap(),
                );
                s.metadata.owner_references = Some(vec![OwnerReference {
                    uid: UID.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]);
                s
            };
            Self {
                ca: root(spec.names.ca_secret(), CA_COMMON_NAME),
                proxy: root(
                    spec.names.front_proxy_ca_secret(),
                    FRONT_PROXY_CA_COMMON_NAME,
                ),
                spec,
                state: None,
                now: SystemTime::now(),
                held: Vec::new(),
                upgrading: None,
            }
        }

        /// One pass with `request`, pods all on `pods` (or none listed) and `machines`, its
        /// writes stored.
        fn pass(
            &mut self,
            request: Option<&str>,
            pods: Option<&[Option<String>]>,
            machines: Option<&[WorkerMachine]>,
        ) -> CertificateAuthorities {
            let out = plan(
                &self.spec,
                &Inputs {
                    ca: &self.ca,
                    front_proxy_ca: &self.proxy,
                    state: self.state.as_ref(),
                    request,
                    uid: UID,
                    pods: pods.map(|p| (p, true)),
                    machines,
                    held: Some(&self.held),
                    upgrading: self.upgrading.as_deref(),
                    algorithm: KeyAlgorithm::default(),
                    now: self.now,
                },
            )
            .unwrap();
            for w in &out.writes {
                if w.metadata.name == self.ca.metadata.name {
                    self.ca.data.clone_from(&w.data);
                } else if w.metadata.name == self.proxy.metadata.name {
                    self.proxy.data.clone_from(&w.data);
                } else {
                    self.state = Some(w.clone());
                }
            }
            out
        }

        fn ca_cert(&self) -> String {
            text(&self.ca, secrets::TLS_CRT_KEY).unwrap()
        }
    }

    fn reason(out: &CertificateAuthorities) -> &'static str {
        out.condition.as_ref().map_or("", |c| c.reason)
    }

    fn machine(name: &str, created: SystemTime) -> WorkerMachine {
        WorkerMachine {
            name: name.into(),
            created,
            in_machine_set: true,
        }
    }

    /// Issue 48, the pair (upgrade, CA rotation) of `kamaji_api::lifecycle`: a rotation
    /// requested while the control plane upgrades starts nothing (no Secret, no fingerprint)
    /// and says what it waits for; once the upgrade has rolled out it starts.
    #[test]
    fn a_rotation_requested_during_an_upgrade_waits_for_it_then_starts() {
        let mut w = World::new(serde_json::json!({}));
        w.upgrading = Some("v1.35.4 → v1.36.3".into());
        let waiting = w.pass(Some("r1"), None, None);
        assert_eq!(reason(&waiting), reasons::WAITING_FOR_UPGRADE);
        let message = &waiting.condition.as_ref().unwrap().message;
        assert!(
            message.contains("rotation \"r1\" waits for the upgrade v1.35.4 → v1.36.3"),
            "{message}"
        );
        assert!(waiting.writes.is_empty() && waiting.fingerprint.is_none());
        assert!(
            waiting.due.is_none(),
            "the Deployment's events wake the next pass"
        );
        w.upgrading = None;
        let start = w.pass(Some("r1"), None, None);
        assert_eq!(reason(&start), reasons::TRUSTING_NEW_CA);
        // Once started, an upgrade does not hold it back (admission refuses a minor one).
        w.upgrading = Some("v1.36.2 → v1.36.3".into());
        let on = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&start.fingerprint)),
            None,
        );
        assert_eq!(reason(&on), reasons::ISSUING_FROM_NEW_CA);
    }

    /// Issue 48, the pair (CA rotation, CA rotation): a new annotation value while a rotation
    /// runs starts nothing new; the running rotation's condition names the waiting request,
    /// and the new one starts once the first is done.
    #[test]
    fn a_request_made_during_a_rotation_waits_for_it_and_is_named() {
        let mut w = World::new(serde_json::json!({}));
        let start = w.pass(Some("r1"), None, None);
        let again = w.pass(Some("r2"), Some(&[None]), None);
        assert_eq!(reason(&again), reasons::TRUSTING_NEW_CA);
        let message = &again.condition.as_ref().unwrap().message;
        assert!(
            message.starts_with("rotation \"r1\"")
                && message.ends_with("rotation \"r2\" waits for rotation \"r1\" to finish"),
            "{message}"
        );
        assert!(again.writes.is_empty(), "nothing of r2 is made");
        assert_eq!(again.fingerprint, start.fingerprint);
    }

    /// Issue 48: while replacing workers, the MachineSets Cluster API holds back are named with
    /// Cluster API's reasons, and for kubeadm's version skew what to do.
    #[test]
    fn replacing_workers_names_the_machine_sets_cluster_api_holds_back_and_why() {
        let held = [HeldMachineSet {
            name: "md-old-x7k2p".into(),
            machine_deployment: Some("md-old".into()),
            reasons: vec![
                "MachineSet version (1.35.4) and ControlPlane version (1.36.3) do not conform to \
                 kubeadm version skew policy as kubeadm only supports joining with the same \
                 major+minor version as the control plane (\"KubeadmVersionSkew\" preflight \
                 check failed)"
                    .into(),
            ],
        }];
        let text = held_back(&held);
        assert!(text.starts_with(
            "; Cluster API holds back MachineSet md-old-x7k2p of MachineDeployment md-old: \
             MachineSet version (1.35.4)"
        ));
        assert!(text.contains("(\"KubeadmVersionSkew\" preflight check failed)"));
        assert!(text.ends_with(
            "(upgrade MachineDeployment md-old to the control plane's minor version: its new \
             Machines then join with the new CA)"
        ));
        let stable = [HeldMachineSet {
            reasons: vec!["KamajiControlPlane ns/demo is upgrading (\"ControlPlaneIsStable\" preflight check failed)".into()],
            ..held[0].clone()
        }];
        assert!(!held_back(&stable).contains("upgrade MachineDeployment"));
        assert_eq!(held_back(&[]), "");
    }

    /// The whole rotation, pass by pass: trust both, promote once every pod trusts both
    /// (serving the cross-signed new CA), replace the workers, drop the old CAs.
    #[test]
    #[allow(clippy::too_many_lines)] // one rotation, phase by phase
    fn a_requested_rotation_trusts_issues_replaces_workers_and_drops_the_old_cas() {
        let mut w = World::new(serde_json::json!({}));
        let idle = w.pass(None, None, None);
        assert!(idle.writes.is_empty() && idle.fingerprint.is_none() && idle.condition.is_none());
        let old = w.ca_cert();

        let start = w.pass(Some("r1"), None, None);
        assert_eq!(reason(&start), reasons::TRUSTING_NEW_CA);
        assert_eq!(start.writes.len(), 1, "only the rotation Secret");
        let bundle = start.ca_bundle.clone().unwrap();
        assert!(bundle.starts_with(old.trim_end()), "old first, then next");
        assert_eq!(bundle.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(start.signing.is_none() && start.serving_chain.is_none());
        assert_eq!(w.ca_cert(), old, "the old CA still signs");

        // Pods not yet on the trusting template: nothing moves.
        let waiting = w.pass(Some("r1"), Some(&[None]), None);
        assert!(waiting.writes.is_empty());
        assert_eq!(waiting.due, Some(SETTLE_RECHECK));

        // Every pod trusts both: the new CAs are promoted, the state first.
        let issuing = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&start.fingerprint)),
            None,
        );
        assert_eq!(reason(&issuing), reasons::ISSUING_FROM_NEW_CA);
        assert_eq!(
            issuing.writes.len(),
            3,
            "state, then <cluster>-ca and -proxy"
        );
        assert_eq!(
            issuing.writes[0].metadata.name,
            Some(w.spec.names.internal_secret(InternalSecret::CaRotation))
        );
        let new = w.ca_cert();
        assert_ne!(new, old);
        let (signing, _) = issuing.signing.clone().unwrap();
        assert_eq!(signing.cert_pem(), new);
        let cross = issuing.serving_chain.clone().unwrap();
        assert!(
            is_signed_by(&cross, &old).unwrap(),
            "cross-signed by the old CA"
        );
        assert!(!is_signed_by(&cross, &new).unwrap());
        assert_eq!(
            issuing.kubelet_client_issuer.as_ref().unwrap().cert_pem(),
            old,
            "old workers' kubelets trust only the old CA"
        );
        assert_ne!(issuing.fingerprint, start.fingerprint, "the pods roll");

        // Settled on the issuing template: the workers are replaced.
        let fp = issuing.fingerprint.clone();
        let t0 = w.now;
        w.now += Duration::from_secs(5);
        let replacing = w.pass(Some("r1"), Some(std::slice::from_ref(&fp)), None);
        assert_eq!(reason(&replacing), reasons::REPLACING_WORKERS);
        let after = replacing.roll_workers_after.unwrap();
        assert!(after > t0);
        assert_eq!(replacing.fingerprint, fp, "no roll between the two phases");

        // An old Machine is waited for, by name.
        let old_machine = [machine("md-0-old", t0)];
        let still = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&fp)),
            Some(&old_machine),
        );
        assert_eq!(reason(&still), reasons::REPLACING_WORKERS);
        assert!(still.condition.unwrap().message.contains("md-0-old"));
        assert!(still.writes.is_empty());
        // A replacement Cluster API holds back is named with its reason.
        w.held = vec![HeldMachineSet {
            name: "md-0-abc".into(),
            machine_deployment: Some("md-0".into()),
            reasons: vec!["(\"KubeadmVersionSkew\" preflight check failed)".into()],
        }];
        let held = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&fp)),
            Some(&old_machine),
        );
        let message = held.condition.unwrap().message;
        assert!(
            message.contains("md-0-old")
                && message.contains(
                    "Cluster API holds back MachineSet md-0-abc of MachineDeployment md-0"
                ),
            "{message}"
        );
        w.held.clear();
        assert_eq!(
            still.roll_workers_after,
            Some(after),
            "rolls are idempotent"
        );

        // Every Machine is newer: the old CAs are dropped.
        let new_machine = [machine("md-0-new", after + Duration::from_secs(1))];
        let dropping = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&fp)),
            Some(&new_machine),
        );
        assert_eq!(reason(&dropping), reasons::DROPPING_PREVIOUS_CA);
        assert!(dropping.ca_bundle.is_none() && dropping.serving_chain.is_none());
        assert!(dropping.kubelet_client_issuer.is_none() && dropping.fingerprint.is_none());

        // Until the pods ran without the old CAs, it is not done.
        let rolling = w.pass(Some("r1"), Some(std::slice::from_ref(&fp)), None);
        assert_eq!(reason(&rolling), reasons::DROPPING_PREVIOUS_CA);
        assert!(rolling.writes.is_empty() && rolling.authentication_trust.is_none());
        let done = w.pass(Some("r1"), Some(&[None]), None);
        assert_eq!(reason(&done), reasons::ROTATED);
        let trust = done
            .authentication_trust
            .as_ref()
            .expect("the tenant's trust reset");
        assert_eq!(
            trust.client_ca, new,
            "extension-apiserver-authentication: the new CA"
        );
        assert_ne!(trust.requestheader_client_ca, trust.client_ca);
        let state = w.state.as_ref().unwrap();
        assert!(
            state.data.as_ref().is_none_or(BTreeMap::is_empty),
            "no key kept"
        );
        assert!(under_way(Some(state)) == (false, false));

        // The same request again does nothing; the signing CA stays the new one.
        let again = w.pass(Some("r1"), None, None);
        assert!(again.writes.is_empty() && again.signing.is_none());
        assert_eq!(reason(&again), reasons::ROTATED);
        assert_eq!(w.ca_cert(), new);
    }

    /// A pass killed between the rotation Secret and the roots: the next pass writes the
    /// roots again from the recorded new CAs, and no CA is made anew.
    #[test]
    fn a_promotion_cut_short_is_finished_from_the_recorded_cas() {
        let mut w = World::new(serde_json::json!({}));
        let start = w.pass(Some("r1"), None, None);
        let old_ca = w.ca.clone();
        let issuing = w.pass(
            Some("r1"),
            Some(std::slice::from_ref(&start.fingerprint)),
            None,
        );
        let new = w.ca_cert();
        // Undo the root writes: only the state landed.
        w.ca = old_ca;
        let repaired = w.pass(Some("r1"), Some(&[None]), None);
        assert_eq!(w.ca_cert(), new);
        assert!(
            repaired
                .writes
                .iter()
                .any(|s| s.metadata.name == w.ca.metadata.name)
        );
        assert_eq!(reason(&repaired), reasons::ISSUING_FROM_NEW_CA);
        assert_eq!(repaired.fingerprint, issuing.fingerprint);
    }

    /// A CA the user provided (not controlled by this control plane) or CA flags in
    /// `extraArgs`: refused, naming what to change, and nothing written.
    #[test]
    fn a_rotation_of_a_users_ca_or_with_ca_flags_is_refused() {
        let mut w = World::new(serde_json::json!({}));
        w.ca.metadata.owner_references = None;
        let out = w.pass(Some("r1"), None, None);
        assert_eq!(reason(&out), reasons::ROTATION_REFUSED);
        assert!(out.writes.is_empty());
        assert!(
            out.condition
                .unwrap()
                .message
                .contains(&w.spec.names.ca_secret())
        );

        let mut w = World::new(serde_json::json!({
            "controllerManager": {"extraArgs": ["--root-ca-file=/x"]}
        }));
        let out = w.pass(Some("r1"), None, None);
        assert_eq!(reason(&out), reasons::ROTATION_REFUSED);
        assert!(out.condition.unwrap().message.contains("--root-ca-file"));
    }
}
