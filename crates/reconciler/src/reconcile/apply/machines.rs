//! The Cluster's workers, as a CA rotation replaces them: every MachineDeployment of the
//! Cluster gets `spec.rollout.after` (Cluster API `v1beta2`), so that the MachineDeployment
//! controller replaces each Machine made before that instant with one that joins with the
//! new CA. Nothing else of a MachineDeployment is touched.

use std::time::SystemTime;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::json;
use tracing::info;

use crate::error::{Error, KubeContext};

/// Cluster API's `MachineDeployment` (`cluster.x-k8s.io/v1beta2`).
#[must_use]
pub fn machine_deployment_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "MachineDeployment",
    ))
}

/// Sets `spec.rollout.after = after` on every MachineDeployment of `cluster` in `ns` whose
/// value is absent or earlier (a merge patch of that field alone); returns how many changed.
///
/// # Errors
/// [`Error::Kube`] when listing or patching fails (RBAC: `machinedeployments` list, patch).
pub async fn roll_machine_deployments(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    after: SystemTime,
) -> Result<usize, Error> {
    let Ok(after) = Timestamp::try_from(after) else {
        return Ok(0);
    };
    let api =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &machine_deployment_resource());
    let list = api
        .list(&ListParams::default())
        .await
        .ctx(|| format!("list MachineDeployments of Cluster {ns}/{cluster}"))?;
    let mut changed = 0;
    for md in list.items.iter().filter(|md| {
        md.data
            .pointer("/spec/clusterName")
            .and_then(|v| v.as_str())
            == Some(cluster)
    }) {
        let current = md
            .data
            .pointer("/spec/rollout/after")
            .and_then(|v| v.as_str())
            .and_then(|t| t.parse::<Timestamp>().ok());
        if current.is_some_and(|c| c >= after) {
            continue;
        }
        let name = md.name_any();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rollout": {"after": after.to_string()}}})),
        )
        .await
        .ctx(|| format!("set spec.rollout.after of MachineDeployment {ns}/{name}"))?;
        info!(machine_deployment = %format!("{ns}/{name}"), after = %after,
            "CA rotation: rolling the MachineDeployment so that its workers join with the new CA");
        changed += 1;
    }
    Ok(changed)
}
