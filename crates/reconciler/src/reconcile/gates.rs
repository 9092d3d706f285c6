//! The **gates** before the pipeline, in order: deleted by `clusterctl move`, the owner
//! Cluster, paused, the finalizer, deletion.

use kamaji_api::KamajiControlPlane;
use kamaji_api::cluster::ClusterView;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::{DELETE_FOR_MOVE_ANNOTATION, FINALIZER, PAUSED_ANNOTATION};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::info;

use super::status::Cond;
use super::{Report, object_key};
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
        if !super::patch_kcp(kcp, ctx, report, patch, "add finalizer").await? {
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
