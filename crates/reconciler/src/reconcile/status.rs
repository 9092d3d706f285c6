//! The **status** step: conditions and contract fields computed once per pass from what was
//! observed and applied (pure); the driver writes the result once — and not at all when
//! nothing changed.
//!
//! Both CAPI contract flavours are filled (capi-contract.md §D and the v1beta1 items):
//! `initialization.controlPlaneInitialized` / `initialized`, replica counters from the
//! Deployment, `selector`, `versions[]` / `version`, `externalManagedControlPlane: true`,
//! `ready`, and `metav1.Condition`s with CAPI's types and reasons.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kamaji_api::KamajiControlPlaneStatus;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::kcp::{KamajiControlPlaneInitialization, StatusVersion};

use crate::replicas::Replicas;

/// A condition before timestamps: `(type, status, reason, message)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cond {
    /// Condition type.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable message (never contains secret material).
    pub message: String,
}

impl Cond {
    /// A `True` condition.
    #[must_use]
    pub fn yes(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: "True",
            reason,
            message: message.into(),
        }
    }
    /// A `False` condition.
    #[must_use]
    pub fn no(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: "False",
            reason,
            message: message.into(),
        }
    }
    /// An `Unknown` condition.
    #[must_use]
    pub fn unknown(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: "Unknown",
            reason,
            message: message.into(),
        }
    }
}

/// Merges `new` conditions into `prev`: a condition whose status is unchanged keeps its
/// `lastTransitionTime`; conditions of other types in `prev` are kept as they are.
#[must_use]
pub fn merge_conditions(
    prev: &[Condition],
    new: &[Cond],
    generation: i64,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = prev
        .iter()
        .filter(|p| !new.iter().any(|n| n.type_ == p.type_))
        .cloned()
        .collect();
    for n in new {
        let old = prev.iter().find(|p| p.type_ == n.type_);
        let last = match old {
            Some(o) if o.status == n.status => o.last_transition_time.clone(),
            _ => now.clone(),
        };
        out.push(Condition {
            type_: n.type_.to_owned(),
            status: n.status.to_owned(),
            reason: n.reason.to_owned(),
            message: n.message.clone(),
            observed_generation: Some(generation),
            last_transition_time: last,
        });
    }
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// What the apply step did that conditions report (`CertificatesAvailable`,
/// `KubeconfigAvailable`, `TenantBootstrapped`, `KonnectivityReady`): recorded in the pass's
/// report as the step goes, so a later step that stops or fails the pass keeps it; the driver
/// turns it into conditions ([`applied_conditions`]) when it writes the status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedRecord {
    /// Every leaf and kubeconfig is stored: the name of the `<cluster>-kubeconfig` Secret.
    pub key_material: Option<String>,
    /// How far the tenant side got.
    pub tenant: Option<TenantSide>,
}

/// How far the tenant side of a pass got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantSide {
    /// No control-plane pod is available yet.
    WaitingForPods,
    /// A pod is available, and the API server does not answer through the endpoint yet.
    WaitingForApiServer,
    /// Applying the kubeadm artifacts failed; the error.
    Failed(String),
    /// The kubeadm artifacts are applied (`summary` says what they install); with konnectivity,
    /// what its agents' workload shows.
    Bootstrapped {
        /// What the artifacts install.
        summary: String,
        /// The konnectivity agents, when konnectivity is on.
        agents: Option<Agents>,
    },
}

/// The konnectivity agents' workload in the tenant, as a pass read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agents {
    /// Its ready and desired counts (an agent is ready once it holds a connection to a server).
    Counted {
        /// Ready agents.
        ready: i32,
        /// Desired agents.
        desired: i32,
    },
    /// It does not exist in the tenant yet.
    Missing,
    /// Reading it failed; the error.
    Unreadable(String),
}

impl Agents {
    /// Whether every agent is connected.
    #[must_use]
    pub fn all_connected(&self) -> bool {
        matches!(self, Self::Counted { ready, desired } if *desired > 0 && ready >= desired)
    }
}

/// The conditions of what the apply step did ([`AppliedRecord`]).
#[must_use]
pub fn applied_conditions(applied: &AppliedRecord) -> Vec<Cond> {
    let mut conds = Vec::new();
    if let Some(kubeconfig) = &applied.key_material {
        conds.push(Cond::yes(
            types::CERTIFICATES_AVAILABLE,
            reasons::READY,
            "CA, service-account key, front-proxy CA and every leaf certificate are present",
        ));
        conds.push(Cond::yes(
            types::KUBECONFIG_AVAILABLE,
            reasons::READY,
            format!("Secret {kubeconfig}"),
        ));
    }
    match &applied.tenant {
        None => {}
        Some(TenantSide::WaitingForPods) => conds.push(Cond::no(
            types::TENANT_BOOTSTRAPPED,
            reasons::WAITING_FOR_PODS,
            "waiting for a control-plane pod to become available",
        )),
        Some(TenantSide::WaitingForApiServer) => conds.push(Cond::no(
            types::TENANT_BOOTSTRAPPED,
            reasons::WAITING_FOR_API_SERVER,
            "waiting for the API server to answer /readyz through the endpoint",
        )),
        Some(TenantSide::Failed(error)) => conds.push(Cond::no(
            types::TENANT_BOOTSTRAPPED,
            reasons::WAITING_FOR_API_SERVER,
            error.clone(),
        )),
        Some(TenantSide::Bootstrapped { summary, agents }) => {
            conds.push(Cond::yes(
                types::TENANT_BOOTSTRAPPED,
                reasons::READY,
                format!("applied: {summary}"),
            ));
            conds.extend(agents.as_ref().map(konnectivity_condition));
        }
    }
    conds
}

/// `KonnectivityReady` of what a pass read of the agents.
fn konnectivity_condition(agents: &Agents) -> Cond {
    match agents {
        Agents::Counted { ready, desired } if agents.all_connected() => Cond::yes(
            types::KONNECTIVITY_READY,
            reasons::AGENTS_CONNECTED,
            format!("{ready} of {desired} konnectivity agents connected"),
        ),
        Agents::Counted { ready, desired } => Cond::no(
            types::KONNECTIVITY_READY,
            reasons::WAITING_FOR_AGENTS,
            if *desired == 0 {
                "no konnectivity agent is scheduled (the tenant has no node for them yet)"
                    .to_owned()
            } else {
                format!("{ready} of {desired} konnectivity agents connected")
            },
        ),
        Agents::Missing => Cond::no(
            types::KONNECTIVITY_READY,
            reasons::WAITING_FOR_AGENTS,
            "the konnectivity agents' workload does not exist in the tenant yet",
        ),
        Agents::Unreadable(e) => Cond::unknown(
            types::KONNECTIVITY_READY,
            reasons::WAITING_FOR_AGENTS,
            format!("cannot read the konnectivity agents: {e}"),
        ),
    }
}

/// What the status is computed from.
#[derive(Debug, Clone)]
pub struct StatusInputs<'a> {
    /// The status as stored.
    pub previous: &'a KamajiControlPlaneStatus,
    /// `metadata.generation`.
    pub generation: i64,
    /// Desired replicas.
    pub desired: i32,
    /// The Deployment's counters.
    pub replicas: Replicas,
    /// `status.selector` (query-parameter label selector).
    pub selector: Option<String>,
    /// The desired version tag (`v1.36.3`).
    pub version: Option<String>,
    /// Whether the tenant API answered `/readyz` through the endpoint in this pass.
    pub api_reachable: bool,
    /// Whether the `<cluster>-kubeconfig` Secret exists.
    pub kubeconfig_exists: bool,
    /// Whether this pass changed the Deployment's pod template. Until the Deployment
    /// controller has observed a new spec its counters describe the old one; this tells a
    /// rollout (a new template) from a scale (only `replicas` changed) in that window.
    pub template_changed: bool,
    /// Condition types that no longer apply (`KonnectivityReady` once konnectivity is removed
    /// from the spec): dropped from the stored conditions.
    pub retired: Vec<&'static str>,
    /// Conditions computed by the pipeline steps (gates, PKI, datastore, endpoint, bootstrap).
    pub conditions: Vec<Cond>,
    /// The datastore names (`None`: as stored).
    pub data_store: Option<kamaji_api::StatusDataStore>,
}

/// Computes the new status.
#[must_use]
pub fn compute(inputs: &StatusInputs<'_>, now: &Time) -> KamajiControlPlaneStatus {
    let prev = inputs.previous;
    let was_initialized = prev
        .initialization
        .as_ref()
        .and_then(|i| i.control_plane_initialized)
        .unwrap_or(false)
        || prev.initialized.unwrap_or(false);
    // Initialized only after /readyz through the endpoint succeeded and the kubeconfig exists
    // (case B22); never goes back.
    let initialized = was_initialized || (inputs.api_reachable && inputs.kubeconfig_exists);
    let r = inputs.replicas;
    let available = initialized && inputs.api_reachable && r.available > 0;
    // While the Deployment controller has not observed the current spec, a rollout is one this
    // pass started (a new template) or one already reported; a spec that changed only
    // `replicas` is a scale, not a rollout.
    let was_rolling_out = was_true(prev, types::ROLLING_OUT);
    let rolling_out = r.up_to_date < r.replicas
        || r.up_to_date < inputs.desired
        || (!r.observed_current && (inputs.template_changed || was_rolling_out));
    let mut conds = inputs.conditions.clone();
    conds.extend(contract_conditions(
        inputs,
        initialized,
        available,
        rolling_out,
    ));
    let mut prev_conditions = prev.conditions.clone().unwrap_or_default();
    prev_conditions.retain(|c| !inputs.retired.contains(&c.type_.as_str()));
    let conditions = merge_conditions(&prev_conditions, &conds, inputs.generation, now);

    // versions[]: what runs. When the rollout is complete, every pod runs the desired version;
    // during a rollout the previously reported list stays until the roll finishes.
    let versions = match (&inputs.version, rolling_out || r.replicas == 0) {
        (Some(v), false) => Some(vec![StatusVersion {
            version: v.clone(),
            replicas: Some(r.replicas),
        }]),
        _ => prev.versions.clone(),
    };
    let version = versions
        .as_ref()
        .and_then(|v| v.last())
        .map(|v| v.version.clone());
    KamajiControlPlaneStatus {
        initialization: Some(KamajiControlPlaneInitialization {
            control_plane_initialized: Some(initialized),
        }),
        initialized: Some(initialized),
        ready: Some(available),
        replicas: Some(r.replicas),
        ready_replicas: Some(r.ready),
        available_replicas: Some(r.available),
        up_to_date_replicas: Some(r.up_to_date),
        updated_replicas: Some(r.up_to_date),
        unavailable_replicas: Some((r.replicas - r.available).max(0)),
        selector: inputs.selector.clone(),
        version,
        versions,
        external_managed_control_plane: Some(true),
        failure_reason: None,
        failure_message: None,
        conditions: Some(conditions),
        data_store: inputs
            .data_store
            .clone()
            .or_else(|| prev.data_store.clone()),
        observed_generation: Some(inputs.generation),
    }
}

/// The stored status with `conds` merged in, for passes that stop before the spec is valid
/// (gates, an invalid spec): nothing else changes.
#[must_use]
pub fn conditions_only(
    prev: &KamajiControlPlaneStatus,
    conds: &[Cond],
    generation: i64,
    now: &Time,
) -> KamajiControlPlaneStatus {
    let mut next = prev.clone();
    next.conditions = Some(merge_conditions(
        prev.conditions.as_deref().unwrap_or_default(),
        conds,
        generation,
        now,
    ));
    next.external_managed_control_plane = Some(true);
    next
}

/// Whether `next` is the first status that says the control plane is initialized.
#[must_use]
pub fn newly_initialized(prev: &KamajiControlPlaneStatus, next: &KamajiControlPlaneStatus) -> bool {
    let initialized = |s: &KamajiControlPlaneStatus| {
        s.initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false)
    };
    !initialized(prev) && initialized(next)
}

/// Condition types that a passing failure can turn from `True` while the control plane's pods
/// stay available: `Available` (one `/readyz` through the endpoint that failed),
/// `TenantBootstrapped` (one tenant write that failed) and `Reconciled` (one management API
/// call that failed).
const TRANSIENT_TYPES: [&str; 3] = [
    types::AVAILABLE,
    types::TENANT_BOOTSTRAPPED,
    types::RECONCILED,
];

/// Whether `next` sets the stored status `prev` back only the way a passing failure does: the
/// control plane was available (`ready`), the generation and every replica counter are the
/// same, and the only changes are `ready` and conditions of [`TRANSIENT_TYPES`] that were
/// `True` and are not. The caller holds such a status back while the failure is younger than
/// its grace period (`Config::transient_grace`), so that one probe lost to load does not flap
/// `Available` (and the Cluster's `ControlPlaneAvailable`) for every watcher.
#[must_use]
pub fn transient_setback(prev: &KamajiControlPlaneStatus, next: &KamajiControlPlaneStatus) -> bool {
    if prev.ready != Some(true)
        || prev == next
        || prev.observed_generation != next.observed_generation
    {
        return false;
    }
    let prev_conditions = prev.conditions.as_deref().unwrap_or_default();
    let mut masked = next.clone();
    masked.ready = prev.ready;
    for c in masked.conditions.iter_mut().flatten() {
        if !TRANSIENT_TYPES.contains(&c.type_.as_str()) {
            continue;
        }
        let Some(old) = prev_conditions.iter().find(|p| p.type_ == c.type_) else {
            return false;
        };
        if old != c {
            if old.status != "True" || c.status == "True" {
                return false;
            }
            *c = old.clone();
        }
    }
    masked == *prev
}

/// Whether `status` carries condition `type_` with status True.
fn was_true(status: &KamajiControlPlaneStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The CAPI contract conditions: `Initialized`, `Available`, `RollingOut`, `ScalingUp`,
/// `ScalingDown` (capi-contract.md items 29–32).
fn contract_conditions(
    inputs: &StatusInputs<'_>,
    initialized: bool,
    available: bool,
    rolling_out: bool,
) -> Vec<Cond> {
    vec![
        initialized_condition(initialized),
        available_condition(inputs, available),
        rolling_out_condition(inputs, rolling_out),
        scaling_up_condition(inputs),
        scaling_down_condition(inputs, rolling_out),
    ]
}

/// `Initialized`.
fn initialized_condition(initialized: bool) -> Cond {
    if initialized {
        Cond::yes(
            types::INITIALIZED,
            reasons::INITIALIZED,
            "the API server has accepted requests",
        )
    } else {
        Cond::no(
            types::INITIALIZED,
            reasons::NOT_INITIALIZED,
            "waiting for the API server to answer /readyz through the endpoint",
        )
    }
}

/// `Available`.
fn available_condition(inputs: &StatusInputs<'_>, available: bool) -> Cond {
    let r = inputs.replicas;
    if available {
        Cond::yes(
            types::AVAILABLE,
            reasons::AVAILABLE,
            format!(
                "{} of {} API server pods available",
                r.available, inputs.desired
            ),
        )
    } else if inputs.desired == 0 {
        Cond::no(
            types::AVAILABLE,
            reasons::SCALED_TO_ZERO,
            "the control plane is scaled to zero",
        )
    } else if r.available == 0 {
        Cond::no(
            types::AVAILABLE,
            reasons::NOT_AVAILABLE,
            "no API server pod is available",
        )
    } else {
        Cond::no(
            types::AVAILABLE,
            reasons::NOT_AVAILABLE,
            "the API server does not answer /readyz through the endpoint",
        )
    }
}

/// `RollingOut`.
fn rolling_out_condition(inputs: &StatusInputs<'_>, rolling_out: bool) -> Cond {
    if rolling_out {
        Cond::yes(
            types::ROLLING_OUT,
            reasons::ROLLING_OUT,
            format!(
                "{} of {} pods up to date",
                inputs.replicas.up_to_date, inputs.desired
            ),
        )
    } else {
        Cond::no(types::ROLLING_OUT, reasons::NOT_ROLLING_OUT, "")
    }
}

/// `ScalingUp`. Scaling up lasts until the added pods are available, as a
/// KubeadmControlPlane's lasts until its new Machines are (the Deployment creates pods at once,
/// so counting the pods that exist would end it before anything serves); extra pods of a
/// rollout's surge are not a scale-up.
fn scaling_up_condition(inputs: &StatusInputs<'_>) -> Cond {
    let r = inputs.replicas;
    if r.available < inputs.desired && r.replicas <= inputs.desired {
        Cond::yes(
            types::SCALING_UP,
            reasons::SCALING_UP,
            format!(
                "scaling up: {} of {} pods available",
                r.available, inputs.desired
            ),
        )
    } else {
        Cond::no(types::SCALING_UP, reasons::NOT_SCALING_UP, "")
    }
}

/// `ScalingDown`. The surge pod of a rollout is not a scale-down. A scale-down lasts until the
/// removed pods are gone, as a KubeadmControlPlane's lasts until its Machines are deleted: the
/// Deployment stops counting a pod in `replicas` the moment it starts terminating (its
/// kube-apiserver still serves for API_SERVER_PRE_STOP_SECONDS), so a scale-down under way
/// stays one while pods terminate; terminating pods after a rollout never start one.
fn scaling_down_condition(inputs: &StatusInputs<'_>, rolling_out: bool) -> Cond {
    let r = inputs.replicas;
    let was_scaling_down = was_true(inputs.previous, types::SCALING_DOWN);
    if r.replicas > inputs.desired && !rolling_out {
        Cond::yes(
            types::SCALING_DOWN,
            reasons::SCALING_DOWN,
            format!(
                "scaling down from {} to {} pods",
                r.replicas, inputs.desired
            ),
        )
    } else if was_scaling_down && r.terminating > 0 && !rolling_out {
        Cond::yes(
            types::SCALING_DOWN,
            reasons::SCALING_DOWN,
            format!(
                "scaling down to {} pods: {} pods terminating",
                inputs.desired, r.terminating
            ),
        )
    } else {
        Cond::no(types::SCALING_DOWN, reasons::NOT_SCALING_DOWN, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn transition_time_changes_only_when_the_status_flips() {
        let prev = merge_conditions(
            &[],
            &[Cond::no("Available", "NotAvailable", "x")],
            1,
            &t("2026-01-01T00:00:00Z"),
        );
        let same = merge_conditions(
            &prev,
            &[Cond::no("Available", "NotAvailable", "y")],
            2,
            &t("2026-01-02T00:00:00Z"),
        );
        assert_eq!(same[0].last_transition_time, t("2026-01-01T00:00:00Z"));
        assert_eq!(same[0].message, "y");
        let flipped = merge_conditions(
            &same,
            &[Cond::yes("Available", "Available", "")],
            2,
            &t("2026-01-03T00:00:00Z"),
        );
        assert_eq!(flipped[0].last_transition_time, t("2026-01-03T00:00:00Z"));
    }

    /// An available control plane's status, then the same pass with its probe lost.
    fn available_then_unreachable() -> (KamajiControlPlaneStatus, KamajiControlPlaneStatus) {
        let empty = KamajiControlPlaneStatus::default();
        let mut bootstrapped = inputs(&empty, true, 2);
        bootstrapped.conditions = vec![
            Cond::yes(types::TENANT_BOOTSTRAPPED, reasons::READY, "applied"),
            Cond::yes(types::RECONCILED, reasons::RECONCILE_SUCCEEDED, ""),
        ];
        let prev = compute(&bootstrapped, &t("2026-01-01T00:00:00Z"));
        assert_eq!(prev.ready, Some(true));
        let mut lost = inputs(&prev, false, 2);
        lost.conditions = vec![
            Cond::no(
                types::TENANT_BOOTSTRAPPED,
                reasons::WAITING_FOR_API_SERVER,
                "waiting for the API server to answer /readyz through the endpoint",
            ),
            Cond::yes(types::RECONCILED, reasons::RECONCILE_SUCCEEDED, ""),
        ];
        let next = compute(&lost, &t("2026-01-01T00:01:00Z"));
        (prev, next)
    }

    #[test]
    fn a_lost_probe_of_an_available_control_plane_is_a_transient_setback() {
        let (prev, next) = available_then_unreachable();
        assert_eq!(next.ready, Some(false));
        assert!(transient_setback(&prev, &next));
        // The same pass once it is stored is no setback (nothing to hold), nor is recovery.
        assert!(!transient_setback(&next, &next));
        assert!(!transient_setback(&next, &prev));
        assert!(!transient_setback(&prev, &prev));
    }

    #[test]
    fn a_setback_with_other_changes_is_reported_at_once() {
        let (prev, next) = available_then_unreachable();
        // A pod lost: the counters say more than a lost probe.
        let mut pods = next.clone();
        pods.available_replicas = Some(1);
        assert!(!transient_setback(&prev, &pods));
        // A spec change.
        let mut spec = next.clone();
        spec.observed_generation = Some(2);
        assert!(!transient_setback(&prev, &spec));
        // Another condition changed too (the certificates).
        let mut certs = next.clone();
        certs
            .conditions
            .get_or_insert_with(Vec::new)
            .push(Condition {
                type_: types::CERTIFICATES_AVAILABLE.into(),
                status: "False".into(),
                reason: "Missing".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: t("2026-01-01T00:01:00Z"),
            });
        assert!(!transient_setback(&prev, &certs));
        // A control plane that was not available has nothing to hold.
        let mut unavailable = prev.clone();
        unavailable.ready = Some(false);
        assert!(!transient_setback(&unavailable, &next));
    }

    #[test]
    fn a_transient_condition_that_changes_but_stays_true_is_no_setback() {
        let (prev, _) = available_then_unreachable();
        let mut next = prev.clone();
        for c in next.conditions.iter_mut().flatten() {
            if c.type_ == types::TENANT_BOOTSTRAPPED {
                c.message = "another message".into();
            }
        }
        assert!(!transient_setback(&prev, &next));
    }

    fn inputs(
        prev: &KamajiControlPlaneStatus,
        reachable: bool,
        available: i32,
    ) -> StatusInputs<'_> {
        StatusInputs {
            previous: prev,
            generation: 1,
            desired: 2,
            replicas: Replicas {
                replicas: 2,
                ready: available,
                available,
                up_to_date: 2,
                terminating: 0,
                observed_current: true,
            },
            selector: Some("kamaji.clastix.io/name=demo".into()),
            version: Some("v1.36.3".into()),
            api_reachable: reachable,
            kubeconfig_exists: true,
            template_changed: false,
            retired: vec![],
            conditions: vec![],
            data_store: None,
        }
    }

    /// The status of condition `type_` in `s`.
    fn condition(s: &KamajiControlPlaneStatus, type_: &str) -> String {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
            .unwrap()
    }

    #[test]
    fn a_new_template_not_yet_observed_is_a_rollout_and_a_new_replica_count_is_not() {
        let now = t("2026-01-01T00:00:00Z");
        let pass = |prev: &KamajiControlPlaneStatus, template_changed, observed_current| {
            let mut i = inputs(prev, true, 2);
            i.template_changed = template_changed;
            i.replicas.observed_current = observed_current;
            compute(&i, &now)
        };
        let idle = pass(&KamajiControlPlaneStatus::default(), false, true);
        assert_eq!(condition(&idle, "RollingOut"), "False");
        // Only `replicas` changed and the Deployment controller has not caught up: no rollout.
        assert_eq!(condition(&pass(&idle, false, false), "RollingOut"), "False");
        // This pass wrote a new template: a rollout from the start...
        let started = pass(&idle, true, false);
        assert_eq!(condition(&started, "RollingOut"), "True");
        // ...that a next pass before the controller caught up does not end.
        let next = pass(&started, false, false);
        assert_eq!(condition(&next, "RollingOut"), "True");
        // Observed and every pod up to date: done.
        assert_eq!(condition(&pass(&next, false, true), "RollingOut"), "False");
    }

    #[test]
    fn scaling_up_lasts_until_the_pods_serve_and_a_rollouts_surge_is_no_scale_down() {
        let prev = KamajiControlPlaneStatus::default();
        let now = t("2026-01-01T00:00:00Z");
        let status_of = |type_: &str, r: Replicas| {
            let mut i = inputs(&prev, true, r.available);
            i.replicas = r;
            compute(&i, &now)
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == type_)
                .map(|c| c.status)
                .unwrap()
        };
        let r = |replicas, available, up_to_date| Replicas {
            replicas,
            ready: available,
            available,
            up_to_date,
            terminating: 0,
            observed_current: true,
        };
        // 1 -> 2: the pod exists at once, and the scale-up lasts until it is available.
        assert_eq!(status_of("ScalingUp", r(2, 1, 2)), "True");
        assert_eq!(status_of("ScalingUp", r(2, 2, 2)), "False");
        // A rollout's surge pod (3 of 2, one not up to date): rolling out, not scaling.
        assert_eq!(status_of("RollingOut", r(3, 2, 1)), "True");
        assert_eq!(status_of("ScalingDown", r(3, 2, 1)), "False");
        assert_eq!(status_of("ScalingUp", r(3, 2, 1)), "False");
        // 3 -> 2 with every pod up to date: scaling down.
        assert_eq!(status_of("ScalingDown", r(3, 3, 3)), "True");
    }

    #[test]
    fn a_scale_down_lasts_while_its_pods_terminate_and_a_rollouts_leftovers_start_none() {
        let now = t("2026-01-01T00:00:00Z");
        let step_seen = |prev: &KamajiControlPlaneStatus,
                         replicas,
                         terminating,
                         up_to_date,
                         observed_current| {
            let mut i = inputs(prev, true, 1);
            i.desired = 1;
            i.replicas = Replicas {
                replicas,
                ready: replicas,
                available: replicas,
                up_to_date,
                terminating,
                observed_current,
            };
            compute(&i, &now)
        };
        let step = |prev: &KamajiControlPlaneStatus, replicas, terminating, up_to_date| {
            step_seen(prev, replicas, terminating, up_to_date, true)
        };
        let scaling_down = |s: &KamajiControlPlaneStatus| {
            s.conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "ScalingDown")
                .map(|c| c.status.clone())
                .unwrap()
        };
        // 2 -> 1: the pass that patched the Deployment still sees 2 pods, and the Deployment
        // controller has not observed the new spec yet: a scale-down, not a rollout.
        let s1 = step_seen(&KamajiControlPlaneStatus::default(), 2, 0, 2, false);
        assert_eq!(scaling_down(&s1), "True");
        assert_eq!(condition(&s1, "RollingOut"), "False");
        // The Deployment counts 1 pod; the other terminates: still scaling down.
        let s2 = step(&s1, 1, 1, 1);
        assert_eq!(scaling_down(&s2), "True");
        // It is gone: done.
        let s3 = step(&s2, 1, 0, 1);
        assert_eq!(scaling_down(&s3), "False");
        // An old pod terminating after a rollout is no scale-down.
        assert_eq!(scaling_down(&step(&s3, 1, 1, 1)), "False");
    }

    #[test]
    fn b22_initialized_needs_readyz_and_never_goes_back() {
        let now = t("2026-01-01T00:00:00Z");
        let s0 = compute(
            &inputs(&KamajiControlPlaneStatus::default(), false, 2),
            &now,
        );
        assert_eq!(s0.initialized, Some(false));
        assert_eq!(
            s0.ready,
            Some(false),
            "ready is never true while initialized is false"
        );
        let s1 = compute(&inputs(&s0, true, 2), &now);
        assert_eq!(
            s1.initialization
                .as_ref()
                .unwrap()
                .control_plane_initialized,
            Some(true)
        );
        assert_eq!(s1.ready, Some(true));
        let s2 = compute(&inputs(&s1, false, 0), &now);
        assert_eq!(s2.initialized, Some(true), "initialized is sticky");
        assert_eq!(
            s2.ready,
            Some(false),
            "a control plane without pods is not ready"
        );
        assert_eq!(s2.external_managed_control_plane, Some(true));
    }

    #[test]
    fn versions_follow_a_finished_rollout_only() {
        let now = t("2026-01-01T00:00:00Z");
        let s1 = compute(&inputs(&KamajiControlPlaneStatus::default(), true, 2), &now);
        assert_eq!(s1.version.as_deref(), Some("v1.36.3"));
        let mut rolling = inputs(&s1, true, 2);
        rolling.version = Some("v1.37.0".into());
        rolling.replicas.up_to_date = 1;
        let s2 = compute(&rolling, &now);
        assert_eq!(
            s2.version.as_deref(),
            Some("v1.36.3"),
            "version is set only when all replicas run it"
        );
    }

    #[test]
    fn recomputing_an_unchanged_status_is_equal() {
        let now = t("2026-01-01T00:00:00Z");
        let s1 = compute(&inputs(&KamajiControlPlaneStatus::default(), true, 2), &now);
        let s2 = compute(&inputs(&s1, true, 2), &t("2026-02-01T00:00:00Z"));
        assert_eq!(s1, s2, "no-op reconcile must not produce a status write");
    }
}
