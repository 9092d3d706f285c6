//! Read-only typed views of the CAPI `Cluster` (`cluster.x-k8s.io` `v1beta2` and `v1beta1`).
//!
//! Only the fields the reconciler reads, all optional, with unknown fields ignored, so a
//! Cluster missing `clusterNetwork`, `controlPlaneEndpoint` or `infrastructureRef` deserializes
//! fine (case B23). The types implement [`kube::Resource`] by hand (no CRD is generated for
//! them: CAPI owns the Cluster CRD), so `Api<v1beta2::Cluster>` and watchers work directly.
//!
//! They are views: never use them as server-side apply bodies (they would claim only the
//! fields they know, and `Serialize` exists only for tests and caches). [`ClusterView`] is a
//! version-neutral summary with the documented defaults applied.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Serialize};

/// Service CIDR used when `Cluster.spec.clusterNetwork.services.cidrBlocks` is absent
/// (kubeadm default).
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
/// Pod CIDR used when `Cluster.spec.clusterNetwork.pods.cidrBlocks` is absent.
pub const DEFAULT_POD_CIDR: &str = "10.244.0.0/16";
/// DNS domain used when `Cluster.spec.clusterNetwork.serviceDomain` is absent.
pub const DEFAULT_SERVICE_DOMAIN: &str = "cluster.local";
/// API server port used when `Cluster.spec.clusterNetwork.apiServerPort` is absent.
pub const DEFAULT_API_SERVER_PORT: i32 = 6443;

macro_rules! cluster_resource {
    ($version:literal) => {
        /// A CAPI `Cluster`, reduced to what kamaji-rs reads.
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
        pub struct Cluster {
            /// Object metadata.
            #[serde(default)]
            pub metadata: ObjectMeta,
            /// Desired state.
            #[serde(default)]
            pub spec: ClusterSpec,
            /// Observed state.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<ClusterStatus>,
        }

        impl Resource for Cluster {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind((): &()) -> Cow<'_, str> {
                "Cluster".into()
            }
            fn group((): &()) -> Cow<'_, str> {
                crate::meta::CAPI_GROUP.into()
            }
            fn version((): &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural((): &()) -> Cow<'_, str> {
                "clusters".into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// `Cluster.spec.clusterNetwork` (identical in v1beta1 and v1beta2).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// Port the API server should be reached at (becomes the endpoint port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_port: Option<i32>,
    /// Service network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<NetworkRanges>,
    /// Pod network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NetworkRanges>,
    /// Cluster DNS domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_domain: Option<String>,
}

/// A list of CIDR blocks (one per IP family for dual stack).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    /// CIDR blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr_blocks: Option<Vec<String>>,
}

/// `Cluster.spec.controlPlaneEndpoint`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// Host; empty means not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Port; 0 means not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

impl ApiEndpoint {
    /// CAPI `APIEndpoint.IsValid`: host non-empty and port non-zero.
    #[must_use]
    pub fn is_valid(&self) -> bool {
        self.host.as_deref().is_some_and(|h| !h.is_empty()) && self.port.is_some_and(|p| p != 0)
    }
}

/// `Cluster` at `cluster.x-k8s.io/v1beta2` (CAPI >= v1.11).
pub mod v1beta2 {
    use super::{
        ApiEndpoint, ClusterNetwork, Cow, Deserialize, NamespaceResourceScope, ObjectMeta,
        Resource, Serialize,
    };

    cluster_resource!("v1beta2");

    /// `Cluster.spec` (v1beta2).
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterSpec {
        /// Reconciliation of the Cluster and its objects is paused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub paused: Option<bool>,
        /// Networks of the workload cluster.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cluster_network: Option<ClusterNetwork>,
        /// The endpoint of the workload API server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub control_plane_endpoint: Option<ApiEndpoint>,
        /// The control-plane object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub control_plane_ref: Option<ContractVersionedObjectReference>,
        /// The InfraCluster object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub infrastructure_ref: Option<ContractVersionedObjectReference>,
    }

    /// A reference without version; the version comes from the CRD's contract label.
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ContractVersionedObjectReference {
        /// API group of the referenced object.
        #[serde(default)]
        pub api_group: String,
        /// Kind of the referenced object.
        #[serde(default)]
        pub kind: String,
        /// Name of the referenced object (same namespace as the Cluster).
        #[serde(default)]
        pub name: String,
    }

    /// `Cluster.status` (v1beta2).
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterStatus {
        /// Initialization milestones.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub initialization: Option<ClusterInitializationStatus>,
    }

    /// `Cluster.status.initialization`.
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterInitializationStatus {
        /// The InfraCluster reported `provisioned`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub infrastructure_provisioned: Option<bool>,
        /// The control plane reported `controlPlaneInitialized`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub control_plane_initialized: Option<bool>,
    }
}

/// `Cluster` at `cluster.x-k8s.io/v1beta1` (CAPI <= v1.10, still served by later releases).
pub mod v1beta1 {
    use super::{
        ApiEndpoint, ClusterNetwork, Cow, Deserialize, NamespaceResourceScope, ObjectMeta,
        Resource, Serialize,
    };

    cluster_resource!("v1beta1");

    /// `Cluster.spec` (v1beta1).
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterSpec {
        /// Reconciliation of the Cluster and its objects is paused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub paused: Option<bool>,
        /// Networks of the workload cluster.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cluster_network: Option<ClusterNetwork>,
        /// The endpoint of the workload API server.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub control_plane_endpoint: Option<ApiEndpoint>,
        /// The control-plane object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub control_plane_ref: Option<ObjectReference>,
        /// The InfraCluster object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub infrastructure_ref: Option<ObjectReference>,
    }

    /// A corev1 `ObjectReference`, reduced to what identifies the object.
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ObjectReference {
        /// `group/version` of the referenced object.
        #[serde(default)]
        pub api_version: String,
        /// Kind of the referenced object.
        #[serde(default)]
        pub kind: String,
        /// Name of the referenced object.
        #[serde(default)]
        pub name: String,
        /// Namespace of the referenced object (empty: the Cluster's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub namespace: Option<String>,
    }

    /// `Cluster.status` (v1beta1).
    #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
    #[serde(rename_all = "camelCase")]
    pub struct ClusterStatus {
        /// The InfraCluster reported ready.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub infrastructure_ready: Option<bool>,
        /// The control plane reported initialized.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub control_plane_ready: Option<bool>,
    }
}

/// A reference to an object in the Cluster's namespace, by group, kind and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LocalObjectRef {
    /// API group (empty for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// Version-neutral summary of a Cluster with the documented defaults applied (case B23): every
/// field of a Cluster that a pass of its control plane reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClusterView {
    /// Cluster name.
    pub name: String,
    /// Cluster namespace.
    pub namespace: String,
    /// `spec.paused` (false when absent).
    pub paused: bool,
    /// Endpoint port: `clusterNetwork.apiServerPort`, else 6443.
    pub api_server_port: i32,
    /// Service CIDRs: `clusterNetwork.services.cidrBlocks`, else `[10.96.0.0/12]`.
    pub service_cidrs: Vec<String>,
    /// Pod CIDRs: `clusterNetwork.pods.cidrBlocks`, else `[10.244.0.0/16]`.
    pub pod_cidrs: Vec<String>,
    /// DNS domain: `clusterNetwork.serviceDomain`, else `cluster.local`.
    pub service_domain: String,
    /// `spec.controlPlaneEndpoint` when valid (host and port set).
    pub control_plane_endpoint: Option<(String, i32)>,
    /// `spec.controlPlaneRef`.
    pub control_plane_ref: Option<LocalObjectRef>,
    /// `spec.infrastructureRef`.
    pub infrastructure_ref: Option<LocalObjectRef>,
    /// The infrastructure is provisioned (v1beta2 `status.initialization.infrastructureProvisioned`,
    /// v1beta1 `status.infrastructureReady`).
    pub infrastructure_provisioned: bool,
}

fn group_of(api_version: &str) -> String {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group.to_owned())
        .unwrap_or_default()
}

fn non_empty(list: Option<&NetworkRanges>, default: &str) -> Vec<String> {
    list.and_then(|r| r.cidr_blocks.clone())
        .filter(|blocks| !blocks.is_empty())
        .unwrap_or_else(|| vec![default.to_owned()])
}

fn network_view(network: Option<&ClusterNetwork>) -> (i32, Vec<String>, Vec<String>, String) {
    let port = network
        .and_then(|n| n.api_server_port)
        .filter(|p| *p != 0)
        .unwrap_or(DEFAULT_API_SERVER_PORT);
    let services = non_empty(
        network.and_then(|n| n.services.as_ref()),
        DEFAULT_SERVICE_CIDR,
    );
    let pods = non_empty(network.and_then(|n| n.pods.as_ref()), DEFAULT_POD_CIDR);
    let domain = network
        .and_then(|n| n.service_domain.clone())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| DEFAULT_SERVICE_DOMAIN.to_owned());
    (port, services, pods, domain)
}

fn endpoint_view(endpoint: Option<&ApiEndpoint>) -> Option<(String, i32)> {
    endpoint
        .filter(|e| e.is_valid())
        .and_then(|e| Some((e.host.clone()?, e.port?)))
}

impl From<&v1beta2::Cluster> for ClusterView {
    fn from(c: &v1beta2::Cluster) -> Self {
        let (api_server_port, service_cidrs, pod_cidrs, service_domain) =
            network_view(c.spec.cluster_network.as_ref());
        let to_ref = |r: &v1beta2::ContractVersionedObjectReference| LocalObjectRef {
            group: r.api_group.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
        };
        Self {
            name: c.metadata.name.clone().unwrap_or_default(),
            namespace: c.metadata.namespace.clone().unwrap_or_default(),
            paused: c.spec.paused.unwrap_or(false),
            api_server_port,
            service_cidrs,
            pod_cidrs,
            service_domain,
            control_plane_endpoint: endpoint_view(c.spec.control_plane_endpoint.as_ref()),
            control_plane_ref: c.spec.control_plane_ref.as_ref().map(to_ref),
            infrastructure_ref: c.spec.infrastructure_ref.as_ref().map(to_ref),
            infrastructure_provisioned: c
                .status
                .as_ref()
                .and_then(|s| s.initialization.as_ref())
                .and_then(|i| i.infrastructure_provisioned)
                .unwrap_or(false),
        }
    }
}

impl From<&v1beta1::Cluster> for ClusterView {
    fn from(c: &v1beta1::Cluster) -> Self {
        let (api_server_port, service_cidrs, pod_cidrs, service_domain) =
            network_view(c.spec.cluster_network.as_ref());
        let to_ref = |r: &v1beta1::ObjectReference| LocalObjectRef {
            group: group_of(&r.api_version),
            kind: r.kind.clone(),
            name: r.name.clone(),
        };
        Self {
            name: c.metadata.name.clone().unwrap_or_default(),
            namespace: c.metadata.namespace.clone().unwrap_or_default(),
            paused: c.spec.paused.unwrap_or(false),
            api_server_port,
            service_cidrs,
            pod_cidrs,
            service_domain,
            control_plane_endpoint: endpoint_view(c.spec.control_plane_endpoint.as_ref()),
            control_plane_ref: c.spec.control_plane_ref.as_ref().map(to_ref),
            infrastructure_ref: c.spec.infrastructure_ref.as_ref().map(to_ref),
            infrastructure_provisioned: c
                .status
                .as_ref()
                .and_then(|s| s.infrastructure_ready)
                .unwrap_or(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn b23_minimal_v1beta1_cluster_gets_defaults() {
        let yaml = r"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: demo, namespace: tenant-a}
spec:
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
    kind: KamajiControlPlane
    name: demo
  somethingNew: {x: 1}
";
        let c: v1beta1::Cluster = serde_yaml::from_str(yaml).unwrap();
        let v = ClusterView::from(&c);
        assert_eq!(v.api_server_port, 6443);
        assert_eq!(v.service_cidrs, vec!["10.96.0.0/12"]);
        assert_eq!(v.pod_cidrs, vec!["10.244.0.0/16"]);
        assert_eq!(v.service_domain, "cluster.local");
        assert_eq!(v.control_plane_endpoint, None);
        assert!(!v.paused);
        let cp = v.control_plane_ref.unwrap();
        assert_eq!(cp.group, "controlplane.cluster.x-k8s.io");
        assert_eq!(cp.kind, "KamajiControlPlane");
        assert_eq!(v.infrastructure_ref, None);
    }

    #[test]
    fn v1beta2_cluster_reads_network_and_refs() {
        let yaml = r"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo, namespace: tenant-a}
spec:
  paused: true
  clusterNetwork:
    apiServerPort: 443
    services: {cidrBlocks: [10.100.0.0/16, fd00::/108]}
    pods: {cidrBlocks: [10.200.0.0/16]}
  controlPlaneEndpoint: {host: 10.0.0.10, port: 6443}
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KamajiControlPlane, name: demo}
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DockerCluster, name: demo}
status:
  initialization: {infrastructureProvisioned: true}
  conditions: []
";
        let c: v1beta2::Cluster = serde_yaml::from_str(yaml).unwrap();
        let v = ClusterView::from(&c);
        assert!(v.paused);
        assert_eq!(v.api_server_port, 443);
        assert_eq!(v.service_cidrs, vec!["10.100.0.0/16", "fd00::/108"]);
        assert_eq!(v.service_domain, "cluster.local");
        assert_eq!(
            v.control_plane_endpoint,
            Some(("10.0.0.10".to_owned(), 6443))
        );
        assert_eq!(v.infrastructure_ref.unwrap().kind, "DockerCluster");
        assert!(v.infrastructure_provisioned);
        assert_eq!(
            <v1beta2::Cluster as Resource>::api_version(&()),
            "cluster.x-k8s.io/v1beta2"
        );
    }

    #[test]
    fn empty_endpoint_is_not_valid() {
        let e = ApiEndpoint {
            host: Some(String::new()),
            port: Some(0),
        };
        assert!(!e.is_valid());
        assert_eq!(endpoint_view(Some(&e)), None);
    }
}
