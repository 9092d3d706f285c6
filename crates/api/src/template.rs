//! `KamajiControlPlaneTemplate`: the ClusterClass template of a `KamajiControlPlane`
//! (shared/reference/kamaji-api.md §5). It has no status and no controller; the CAPI topology
//! controller copies `spec.template.spec` into the `KamajiControlPlane` it creates and adds
//! `version`, `replicas` and the endpoint itself.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kcp::KamajiControlPlaneFields;
use crate::validation;

/// Desired state of a `KamajiControlPlaneTemplate`.
// `kube(printcolumn(...))` repeats `type_`/`json_path` per column by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1alpha2",
    kind = "KamajiControlPlaneTemplate",
    plural = "kamajicontrolplanetemplates",
    namespaced,
    derive = "PartialEq",
    shortname = "ktcpt",
    category = "cluster-api",
    category = "kamaji",
    doc = "A template of KamajiControlPlane for ClusterClass: spec.template.spec holds every control-plane field except version, replicas and controlPlaneEndpoint, which the topology controller sets.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KamajiControlPlaneTemplateSpec {
    /// The control plane to create.
    pub template: KamajiControlPlaneTemplateResource,
}

/// The templated control plane: metadata and spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::kamaji_control_plane_template_resource)]
pub struct KamajiControlPlaneTemplateResource {
    /// Labels and annotations of the created KamajiControlPlane (CAPI `ObjectMeta`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// The control-plane fields of the created KamajiControlPlane.
    #[serde(default)]
    pub spec: KamajiControlPlaneFields,
}

/// The subset of object metadata a template may set (CAPI `ObjectMeta`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateObjectMeta {
    /// Labels of the created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations of the created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}
