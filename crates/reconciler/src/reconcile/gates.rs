//! The **gates** before the pipeline, in order: deleted by `clusterctl move`, the owner
//! Cluster, paused, the finalizer, deletion.

use kamaji_api::KamajiControlPlane;
use kamaji_api::cluster::{ClusterView, v1beta2};
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::{DELETE_FOR_MOVE_ANNOTATION, FINALIZER, PAUSED_ANNOTATION};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::info;

use super::kcp::{object_key, patch_kcp};
use super::report::Report;
use super::status::Cond;
use crate::context::Context;
use crate::error::{Error, KubeContext};

/// Where the gates send the pass.
#[derive(Debug)]
pub enum Gate {
    /// On to the pipeline, for the owner Cluster.
    Pipeline(ClusterView),
    /// The deletion branch (the owner Cluster, if it still exists).
    Delete(Option<ClusterView>),
    /// Stop here, status written by the driver.
    Stop(Action),
    /// Deleted by `clusterctl move`: release the finalizer and touch nothing else.
    ReleaseForMove,
}

/// Runs the gates.
///
/// # Errors
/// [`Error::Kube`] when reading the Cluster or adding the finalizer fails.
pub async fn check(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    report: &mut Report,
) -> Result<Gate, Error> {
    let deleting = kcp.metadata.deletion_timestamp.is_some();

    // Gate 0: deleted by `clusterctl move`. The control plane lives on in the target
    // management cluster on the same datastore prefix and Secrets: release the finalizer and
    // touch nothing else (clusterctl removes finalizers itself; this covers a finalizer added
    // back in between), whether or not the Cluster is still paused or present.
    if deleting && kcp.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION) {
        info!(kcp = %object_key(kcp), "deleted for clusterctl move: keeping the tenant's datastore data and Secrets");
        return Ok(Gate::ReleaseForMove);
    }

    // Gate 1: the owner Cluster (CAPI control-plane contract: "Cluster API sets an ownerRef from
    // the Cluster on the control plane"; found by kind and group, not by position).
    let owner = match owner_cluster(kcp, ctx).await? {
        Some(o) => o,
        None if deleting => return Ok(Gate::Delete(None)),
        // A Cluster points here and Cluster API has not got to it yet (it sets the owner
        // reference when it reconciles that Cluster, usually within seconds): no status and no
        // event, as Cluster API's own control planes write none while they wait. The owner
        // reference's event wakes the next pass. Without such a Cluster (or with it paused),
        // the status says what is missing.
        None if awaited_by_cluster(ctx, kcp) => {
            report.silent = true;
            return Ok(Gate::Stop(Action::await_change()));
        }
        None => {
            let msg = "waiting for Cluster API to set an owner reference from the Cluster (is spec.controlPlaneRef of a Cluster pointing here?)";
            info!(kcp = %object_key(kcp), "{msg}");
            report.note(reasons::WAITING_FOR_OWNER_CLUSTER, msg);
            report.push(Cond::no(
                types::CLUSTER_FOUND,
                reasons::WAITING_FOR_OWNER_CLUSTER,
                msg,
            ));
            return Ok(Gate::Stop(Action::await_change()));
        }
    };
    tracing::Span::current().record("cluster", owner.name.as_str());

    // Gate 2: paused (contract: Cluster.spec.paused or the cluster.x-k8s.io/paused annotation
    // stops every change but the Paused condition).
    if owner.paused || kcp.annotations().contains_key(PAUSED_ANNOTATION) {
        report.push(Cond::yes(
            types::PAUSED,
            reasons::PAUSED,
            "reconciliation is paused (Cluster.spec.paused or the cluster.x-k8s.io/paused annotation)",
        ));
        return Ok(Gate::Stop(Action::await_change()));
    }

    // Gate 3: the finalizer, before anything is created.
    if !deleting && !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = kcp.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
        if !patch_kcp(kcp, ctx, report, patch, "add finalizer").await? {
            return Ok(Gate::Stop(Action::await_change()));
        }
    }

    // Gate 4: deletion.
    if deleting {
        return Ok(Gate::Delete(Some(owner)));
    }
    report.push(Cond::yes(
        types::CLUSTER_FOUND,
        reasons::READY,
        format!("Cluster {}", owner.name),
    ));
    report.push(Cond::no(types::PAUSED, reasons::NOT_PAUSED, ""));
    report.push(Cond::no(types::DELETING, reasons::NOT_DELETING, ""));
    Ok(Gate::Pipeline(owner))
}

/// The KamajiControlPlane `cluster.spec.controlPlaneRef` names, if it names one.
#[must_use]
pub fn control_plane_of(cluster: &v1beta2::Cluster) -> Option<ObjectRef<KamajiControlPlane>> {
    let ns = cluster.metadata.namespace.as_deref().unwrap_or_default();
    cluster
        .spec
        .control_plane_ref
        .as_ref()
        .filter(|r| {
            r.kind == "KamajiControlPlane" && r.api_group == kamaji_api::meta::CONTROL_PLANE_GROUP
        })
        .map(|r| ObjectRef::new(&r.name).within(ns))
}

/// Whether a Cluster in the controller's watch cache points at `kcp` and Cluster API will set
/// its owner reference ([`awaits`]); `false` without the cache.
fn awaited_by_cluster(ctx: &Context, kcp: &KamajiControlPlane) -> bool {
    ctx.clusters()
        .is_some_and(|store| store.state().iter().any(|c| awaits(c, kcp)))
}

/// Whether `cluster` will give `kcp` its owner reference: its `spec.controlPlaneRef` names
/// `kcp` (kind, group and name, in its namespace), and it is neither paused nor being deleted
/// (Cluster API's Cluster controller then sets the reference on its next pass).
#[must_use]
pub fn awaits(cluster: &v1beta2::Cluster, kcp: &KamajiControlPlane) -> bool {
    cluster.spec.paused != Some(true)
        && cluster.metadata.deletion_timestamp.is_none()
        && control_plane_of(cluster).is_some_and(|r| r == ObjectRef::from_obj(kcp))
}

async fn owner_cluster(
    kcp: &KamajiControlPlane,
    ctx: &Context,
) -> Result<Option<ClusterView>, Error> {
    let Some(reference) = kcp.owner_references().iter().find(|o| {
        o.kind == "Cluster" && o.api_version.split('/').next() == Some("cluster.x-k8s.io")
    }) else {
        return Ok(None);
    };
    let ns = kcp.namespace().unwrap_or_default();
    let cluster = ctx
        .cluster(&ns, &reference.name)
        .await
        .ctx(|| format!("get Cluster {ns}/{}", reference.name))?;
    Ok(cluster.map(|c| ClusterView::from(&c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
        serde_yaml::from_str(yaml).expect("yaml")
    }

    /// A control plane waits silently for its owner reference only while a Cluster that Cluster
    /// API will reconcile points at it; otherwise its status says it is waiting.
    #[test]
    fn only_a_cluster_pointing_here_and_not_paused_is_awaited() {
        let kcp: KamajiControlPlane = parse(
            "apiVersion: controlplane.cluster.x-k8s.io/v1alpha2\nkind: KamajiControlPlane\nmetadata: {name: demo, namespace: a}\nspec: {version: v1.36.3}\n",
        );
        let cluster = |ns: &str, reference: &str, paused: bool| -> v1beta2::Cluster {
            parse(&format!(
                "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {{name: demo, namespace: {ns}}}\nspec:\n  paused: {paused}\n  controlPlaneRef: {reference}\n"
            ))
        };
        let here =
            "{apiGroup: controlplane.cluster.x-k8s.io, kind: KamajiControlPlane, name: demo}";
        assert!(awaits(&cluster("a", here, false), &kcp));
        assert!(!awaits(&cluster("a", here, true), &kcp), "paused");
        let mut deleting = cluster("a", here, false);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert!(!awaits(&deleting, &kcp), "deleting");
        assert!(
            !awaits(&cluster("b", here, false), &kcp),
            "another namespace"
        );
        for other in [
            "{apiGroup: controlplane.cluster.x-k8s.io, kind: KamajiControlPlane, name: other}",
            "{apiGroup: controlplane.cluster.x-k8s.io, kind: KubeadmControlPlane, name: demo}",
            "{apiGroup: example.com, kind: KamajiControlPlane, name: demo}",
        ] {
            assert!(!awaits(&cluster("a", other, false), &kcp), "{other}");
        }
    }
}
