//! Stand-ins for CRDs of providers that kamaji-rs does not ship, so that manifests referencing
//! them (the CAPI quickstart's `OpenStackCluster`) apply in the local management cluster.

use anyhow::Result;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// A minimal `OpenStackCluster` CRD (`infrastructure.cluster.x-k8s.io/v1alpha6`, CAPI `v1beta1`
/// contract label, status subresource, any content accepted), enough for CAPI to resolve the
/// quickstart's `infrastructureRef`; a test marks its object provisioned by patching status.
pub const OPENSTACK_CLUSTER_CRD: &str = r"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: openstackclusters.infrastructure.cluster.x-k8s.io
  labels: {cluster.x-k8s.io/v1beta1: v1alpha6}
spec:
  group: infrastructure.cluster.x-k8s.io
  names: {kind: OpenStackCluster, listKind: OpenStackClusterList, plural: openstackclusters, singular: openstackcluster}
  scope: Namespaced
  versions:
  - name: v1alpha6
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
";

/// [`OPENSTACK_CLUSTER_CRD`], parsed.
///
/// # Errors
/// Never in practice (the YAML is constant); a parse error otherwise.
pub fn openstack_cluster_crd() -> Result<CustomResourceDefinition> {
    Ok(serde_yaml::from_str(OPENSTACK_CLUSTER_CRD)?)
}
