//! The **status** step: conditions and contract fields computed once per pass from what was
//! observed and applied (pure); the driver writes the result once — and not at all when
//! nothing changed.
//!
//! Both CAPI contract flavours are filled (capi-contract.md §D and the v1beta1 items):
//! `initialization.controlPlaneInitialized` / `initialized`, replica counters from the
//! Deployment, `selector`, `versions[]` / `version`, `externalManagedControlPlane: true`,
//! `ready`, and `metav1.Condition`s with CAPI's types and reasons.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kamaji_api::KamajiControlPlaneStatus;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::kcp::{KamajiControlPlaneInitialization, StatusVersion};

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

/// Replica counters of the control-plane Deployment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replicas {
    /// Pods that exist.
    pub replicas: i32,
    /// Ready pods.
    pub ready: i32,
    /// Available pods.
    pub available: i32,
    /// Pods of the current template.
    pub up_to_date: i32,
    /// Pods terminating (the Deployment's `status.terminatingReplicas`, Kubernetes v1.35+
    /// by default; 0 where the management cluster does not report it).
    pub terminating: i32,
    /// The Deployment controller has seen the current spec.
    pub observed_current: bool,
}

impl Replicas {
    /// Reads the counters of `d` (all zero when it does not exist).
    #[must_use]
    pub fn of(d: Option<&Deployment>) -> Self {
        let Some(d) = d else { return Self::default() };
        Self::of_status(d.metadata.generation, d.status.as_ref())
    }

    /// Reads the counters of a Deployment at `metadata.generation` `generation` with status
    /// `status`.
    #[must_use]
    pub fn of_status(generation: Option<i64>, status: Option<&DeploymentStatus>) -> Self {
        let Some(s) = status else {
            return Self {
                observed_current: generation.unwrap_or(0) <= 0,
                ..Self::default()
            };
        };
        Self {
            replicas: s.replicas.unwrap_or(0),
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            up_to_date: s.updated_replicas.unwrap_or(0),
            terminating: s.terminating_replicas.unwrap_or(0),
            observed_current: s.observed_generation.unwrap_or(0) >= generation.unwrap_or(0),
        }
    }
}

/// The prefix of the annotations the Deployment controller writes on a Deployment.
const DEPLOYMENT_CONTROLLER_PREFIX: &str = "deployment.kubernetes.io/";

/// What a pass reads of its control-plane Deployment, for the Deployment watch to tell an event
/// that would change what a pass does from one that would not ([`DeploymentView::wakes`]).
///
/// A pass reads the Deployment's metadata (owner references, the desired-hash annotation), its
/// spec (compared with the desired one; every change raises `metadata.generation`) and the
/// counters of its status ([`Replicas`]); nothing else of the status (its conditions, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentView {
    /// A hash of the UID, `metadata.generation`, labels, annotations (but the Deployment
    /// controller's), owner references, finalizers and deletion timestamp.
    identity: u64,
    /// `spec.replicas` (1 when unset, as the API server defaults it).
    want: i32,
    /// The status counters.
    replicas: Replicas,
}

impl DeploymentView {
    /// The view of `d`.
    #[must_use]
    pub fn of(d: &Deployment) -> Self {
        Self::of_parts(
            &d.metadata,
            d.spec.as_ref().and_then(|s| s.replicas),
            d.status.as_ref(),
        )
    }

    /// The view of a Deployment with `metadata`, `spec.replicas` `want` and `status`.
    #[must_use]
    pub fn of_parts(
        metadata: &ObjectMeta,
        want: Option<i32>,
        status: Option<&DeploymentStatus>,
    ) -> Self {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        metadata.uid.hash(&mut hasher);
        metadata.generation.hash(&mut hasher);
        metadata.labels.hash(&mut hasher);
        // The Deployment controller's own (`deployment.kubernetes.io/revision`), which it writes
        // beside its first status, are not read by a pass.
        for annotation in metadata.annotations.iter().flatten() {
            if !annotation.0.starts_with(DEPLOYMENT_CONTROLLER_PREFIX) {
                annotation.hash(&mut hasher);
            }
        }
        metadata.finalizers.hash(&mut hasher);
        metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .hash(&mut hasher);
        for o in metadata.owner_references.iter().flatten() {
            (&o.api_version, &o.kind, &o.name, &o.uid, o.controller).hash(&mut hasher);
        }
        Self {
            identity: hasher.finish(),
            want: want.unwrap_or(1),
            replicas: Replicas::of_status(metadata.generation, status),
        }
    }

    /// Whether a pass that last saw the Deployment as `seen` would act otherwise on it as
    /// `self`: a change of anything the pass reads, except the Deployment controller catching
    /// up with the spec (`status.observedGeneration`) while some replica is not up to date.
    /// Then every step that reads it ([`compute`]'s `RollingOut`, the rolled-out checks of
    /// rotations and of the v0.1 Secrets' removal) decides by the counters alone: a rollout
    /// is under way and nothing has rolled out. That is the Deployment controller's first
    /// status write on a new control plane, which woke a pass that found nothing to do.
    #[must_use]
    pub fn wakes(&self, seen: &Self) -> bool {
        let counters = |r: &Replicas| {
            (
                r.replicas,
                r.ready,
                r.available,
                r.up_to_date,
                r.terminating,
            )
        };
        if self.identity != seen.identity
            || self.want != seen.want
            || counters(&self.replicas) != counters(&seen.replicas)
        {
            return true;
        }
        let r = &self.replicas;
        let rolling = r.up_to_date < r.replicas || r.up_to_date < self.want;
        r.observed_current != seen.replicas.observed_current && !rolling
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
    let r = inputs.replicas;
    let mut conds = Vec::with_capacity(5);
    conds.push(if initialized {
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
    });
    conds.push(if available {
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
    });
    conds.push(if rolling_out {
        Cond::yes(
            types::ROLLING_OUT,
            reasons::ROLLING_OUT,
            format!("{} of {} pods up to date", r.up_to_date, inputs.desired),
        )
    } else {
        Cond::no(types::ROLLING_OUT, reasons::NOT_ROLLING_OUT, "")
    });
    // Scaling up lasts until the added pods are available, as a KubeadmControlPlane's lasts
    // until its new Machines are (the Deployment creates pods at once, so counting the pods
    // that exist would end it before anything serves); extra pods of a rollout's surge are not
    // a scale-up.
    conds.push(
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
        },
    );
    // The surge pod of a rollout is not a scale-down. A scale-down lasts until the removed
    // pods are gone, as a KubeadmControlPlane's lasts until its Machines are deleted: the
    // Deployment stops counting a pod in `replicas` the moment it starts terminating (its
    // kube-apiserver still serves for API_SERVER_PRE_STOP_SECONDS), so a scale-down under way
    // stays one while pods terminate; terminating pods after a rollout never start one.
    let was_scaling_down = was_true(inputs.previous, types::SCALING_DOWN);
    conds.push(if r.replicas > inputs.desired && !rolling_out {
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
    });
    conds
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

    /// A Deployment of `generation` with `annotations` and `status` (YAML flow maps).
    fn deployment(generation: i64, annotations: &str, status: &str) -> Deployment {
        serde_yaml::from_str(&format!(
            "metadata: {{name: demo, namespace: a, uid: d1, generation: {generation}, \
             labels: {{kamaji.clastix.io/name: demo}}, annotations: {annotations}, \
             ownerReferences: [{{apiVersion: controlplane.cluster.x-k8s.io/v1alpha2, \
             kind: KamajiControlPlane, name: demo, uid: k1, controller: true}}]}}\n\
             spec: {{replicas: 1, selector: {{}}, template: {{}}}}\nstatus: {status}\n"
        ))
        .expect("deployment")
    }

    /// The Deployment controller's first status write on a new control plane (its revision
    /// annotation, `observedGeneration`, conditions, no replica yet) shows a pass nothing it
    /// acts on; a change of a counter, of what the pass compares, or the controller catching
    /// up once every replica is up to date does.
    #[test]
    fn only_a_deployment_change_a_pass_acts_on_wakes_it() {
        let view = |d: &Deployment| DeploymentView::of(d);
        // As the pass that created it saw it: the API server's answer, no status yet.
        let created = view(&deployment(1, "{kamaji.clastix.io/desired-hash: h}", "{}"));
        let first_status = view(&deployment(
            1,
            "{kamaji.clastix.io/desired-hash: h, deployment.kubernetes.io/revision: '1'}",
            "{observedGeneration: 1, conditions: [{type: Progressing, status: 'True', reason: NewReplicaSetCreated}]}",
        ));
        assert!(!created.wakes(&created));
        assert!(
            !first_status.wakes(&created),
            "the controller's first status write"
        );
        let available = view(&deployment(
            1,
            "{kamaji.clastix.io/desired-hash: h, deployment.kubernetes.io/revision: '1'}",
            "{observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1}",
        ));
        assert!(available.wakes(&first_status), "a replica became available");
        let not_observed = view(&deployment(
            2,
            "{kamaji.clastix.io/desired-hash: h2}",
            "{observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1}",
        ));
        let observed = view(&deployment(
            2,
            "{kamaji.clastix.io/desired-hash: h2}",
            "{observedGeneration: 2, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1}",
        ));
        assert!(
            observed.wakes(&not_observed),
            "caught up with every replica up to date: a rollout may have ended"
        );
        let conditions_only = view(&deployment(
            1,
            "{kamaji.clastix.io/desired-hash: h, deployment.kubernetes.io/revision: '1'}",
            "{observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1, conditions: [{type: Available, status: 'True', reason: MinimumReplicasAvailable}]}",
        ));
        assert!(!conditions_only.wakes(&available));
        assert!(
            view(&deployment(
                1,
                "{kamaji.clastix.io/desired-hash: other}",
                "{}"
            ))
            .wakes(&created),
            "an annotation the pass compares"
        );
        assert!(
            view(&deployment(2, "{kamaji.clastix.io/desired-hash: h}", "{}")).wakes(&created),
            "a spec change"
        );
        let mut orphaned = deployment(1, "{kamaji.clastix.io/desired-hash: h}", "{}");
        orphaned.metadata.owner_references = None;
        assert!(
            view(&orphaned).wakes(&created),
            "its owner reference removed"
        );
        let mut relabelled = deployment(1, "{kamaji.clastix.io/desired-hash: h}", "{}");
        relabelled.metadata.labels = None;
        assert!(view(&relabelled).wakes(&created), "its labels removed");
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
