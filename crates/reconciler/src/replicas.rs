//! The replica counters of the control-plane Deployment ([`Replicas`]) and what a pass reads of
//! it ([`DeploymentView`]): plain values that the status step computes from, the observe and
//! apply steps read, and the per-process memory ([`crate::memory`]) keeps for the Deployment
//! watch to tell an event that would change what a pass does from one that would not.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
    /// Then every step that reads it (the status step's `RollingOut`, the rolled-out checks of
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
