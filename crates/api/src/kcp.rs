//! `KamajiControlPlane` (`controlplane.cluster.x-k8s.io`, served as `v1alpha1` and `v1alpha2`).
//!
//! One Rust type serves both API versions: the CRD carries the same schema (the union of the
//! fields of the Kamaji CAPI provider's `v1alpha1` and `v1alpha2`) under both versions, so the
//! API server converts between them with `strategy: None` and no webhook. The Rust type is
//! declared as `v1alpha2` (the storage version); [`crate::crd`] adds the `v1alpha1` entry.
//!
//! Field names and JSON names follow upstream
//! (`clastix/cluster-api-control-plane-provider-kamaji:api/v1alpha2/kamajicontrolplane_types.go`);
//! see shared/reference/kamaji-api.md §2 and §4.
//!
//! Every optional field is an `Option` that is skipped when `None`, so a server-side apply body
//! built from these types never sends `null`. Fields that carry a schema default deserialize to
//! that default when absent, matching what the API server stores.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DeploymentStrategy;
use k8s_openapi::api::core::v1::{
    Affinity, Container, ResourceRequirements, SecurityContext, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validation;

/// Desired state of a `KamajiControlPlane`: the shared [`KamajiControlPlaneFields`] plus the
/// three fields a `KamajiControlPlaneTemplate` does not carry (`version`, `replicas`,
/// `controlPlaneEndpoint`).
// `kube(printcolumn(...))` repeats `type_`/`json_path` per column by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "controlplane.cluster.x-k8s.io",
    version = "v1alpha2",
    kind = "KamajiControlPlane",
    plural = "kamajicontrolplanes",
    namespaced,
    status = "KamajiControlPlaneStatus",
    derive = "PartialEq",
    shortname = "ktcp",
    category = "cluster-api",
    category = "kamaji",
    doc = "A Kubernetes control plane (kube-apiserver, kube-controller-manager, kube-scheduler) run by kamaji-rs as pods of a Deployment in the management cluster, for the Cluster API Cluster that references it in spec.controlPlaneRef.",
    validation = validation::version_downgrade_rule(),
    validation = validation::version_skip_from_status_rule(),
    validation = validation::minor_upgrade_during_ca_rotation_rule(),
    validation = validation::data_store_in_use_rule("dataStoreName", "name"),
    validation = validation::data_store_in_use_rule("dataStoreSchema", "schema"),
    validation = validation::data_store_in_use_rule("dataStoreUsername", "username"),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        description = "The Cluster this control plane belongs to"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.controlPlaneEndpoint.host",
        description = "Host of the control-plane endpoint"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".spec.version",
        description = "Desired Kubernetes version"
    ),
    printcolumn(
        name = "Initialized",
        type_ = "boolean",
        json_path = ".status.initialization.controlPlaneInitialized",
        description = "The API server has accepted requests at least once"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Status of the Available condition"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Control-plane pods that exist"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::kamaji_control_plane_spec)]
pub struct KamajiControlPlaneSpec {
    /// Every control-plane field shared with `KamajiControlPlaneTemplate`.
    #[serde(flatten)]
    pub fields: KamajiControlPlaneFields,

    /// Endpoint of the tenant API server (`host`, `port`), written by the controller once the
    /// control-plane Service has an address; CAPI copies it to `Cluster.spec.controlPlaneEndpoint`
    /// (CAPI control-plane contract, "endpoint"). An empty host or zero port means "not set".
    /// Once the host is set, the fields that decide it (`network.ingress`,
    /// `network.gateway` hostname and port, `network.serviceAddress`, `network.serviceType`)
    /// cannot change: Cluster API treats the endpoint as immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,

    /// Desired number of control-plane pods (the Deployment's replicas). 0 scales the control
    /// plane to zero; it then reports not ready. Defaults to 2.
    #[serde(default = "default_replicas", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 64))]
    pub replicas: Option<i32>,

    /// Desired Kubernetes version of the control plane, semver with an optional `v` prefix
    /// (`1.27.0` and `v1.27.0` are both accepted; the controller adds the `v`), from v1.23.0 to
    /// v1.36.x (the versions kamaji-rs supports). On update it may not change the major version,
    /// may not skip a minor version, and may not go below `status.version` (the last version
    /// every replica ran): a stuck upgrade can be backed out to it.
    #[schemars(length(min = 1, max = 256), regex(pattern = validation::VERSION_PATTERN))]
    pub version: String,

    /// Rollout options (Cluster API v1beta2 control-plane contract, `spec.rollout`; ClusterClass
    /// topology copies `Cluster.spec.topology.controlPlane.rollout` here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
}

/// `spec.rollout` (Cluster API control-plane contract; `KubeadmControlPlane.spec.rollout`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Replace every control-plane pod created before this time (RFC 3339), once it has
    /// passed, even if nothing else changed: a rolling replacement of the Deployment's pods, as
    /// `kubectl rollout restart` does, one pass after the time (the controller wakes up for it).
    /// A time in the future rolls nothing yet; a time already passed when the control plane is
    /// created rolls nothing (its pods are newer); removing the field or moving it back rolls
    /// nothing. (Contract field `spec.rollout.after`, formerly `rolloutAfter`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Time>,
}

#[allow(clippy::unnecessary_wraps)] // serde default functions must return the field type
fn default_replicas() -> Option<i32> {
    Some(DEFAULT_REPLICAS)
}

/// Default of `spec.replicas` (upstream `+kubebuilder:default=2`).
pub const DEFAULT_REPLICAS: i32 = 2;
/// Default of `spec.registry` (upstream `ContainerRegistry`).
pub const DEFAULT_REGISTRY: &str = "registry.k8s.io";
/// Default konnectivity-server image (without tag), upstream Kamaji default.
pub const DEFAULT_KONNECTIVITY_SERVER_IMAGE: &str =
    "registry.k8s.io/kas-network-proxy/proxy-server";
/// Default konnectivity-agent image (without tag), upstream Kamaji default.
pub const DEFAULT_KONNECTIVITY_AGENT_IMAGE: &str = "registry.k8s.io/kas-network-proxy/proxy-agent";
/// Default konnectivity-server port.
pub const DEFAULT_KONNECTIVITY_SERVER_PORT: i32 = 8132;

/// The control-plane fields shared by `KamajiControlPlane.spec` and
/// `KamajiControlPlaneTemplate.spec.template.spec` (upstream `KamajiControlPlaneFields`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KamajiControlPlaneFields {
    /// Name of the cluster-scoped `DataStore` (`kamaji.clastix.io`) holding this control plane's
    /// data. Empty means the manager's default DataStore. Immutable once set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub data_store_name: Option<String>,

    /// Database name (relational DataStores) or key prefix (etcd) of this control plane inside
    /// the DataStore. Defaults to a name derived from namespace and name
    /// ([`crate::names::datastore_schema`]). Immutable once set. An identifier of lowercase
    /// letters, digits and `_` ([`validation::DATASTORE_IDENTIFIER_PATTERN`]). One control
    /// plane per schema on a datastore: the first to claim it keeps it (`DataStoreReady=False`,
    /// reason `DataStoreSchemaInUse`, for the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = validation::DATASTORE_IDENTIFIER_PATTERN))]
    pub data_store_schema: Option<String>,

    /// Database user of this control plane on a relational (PostgreSQL, MySQL) DataStore,
    /// created by kamaji-rs with privileges on `dataStoreSchema` only. Defaults to a name
    /// derived like `dataStoreSchema`. Immutable once set. Refused (`SpecValid=False`) on an
    /// etcd DataStore, and on PostgreSQL when it begins with `pg_`. An identifier like
    /// `dataStoreSchema` ([`validation::DATASTORE_IDENTIFIER_PATTERN`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = validation::DATASTORE_IDENTIFIER_PATTERN))]
    pub data_store_username: Option<String>,

    /// Kubernetes resources stored in a DataStore other than `dataStoreName` (for example
    /// `/events` in a separate etcd), as kube-apiserver's `--etcd-servers-overrides`, under the
    /// same key prefix. kube-apiserver uses one client certificate and CA for every etcd, so
    /// each DataStore named must be an etcd DataStore with the same CA certificate as the
    /// control plane's; otherwise `DataStoreReady=False` names the entry. Deleting the control
    /// plane removes its keys from these DataStores too. Each resource at most once. Immutable
    /// (added, changed or removed later, the objects already stored would vanish from the
    /// tenant). kube-apiserver checks every such etcd in its health checks: an outage of one
    /// fails the API servers' liveness and restarts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": validation::OVERRIDE_UNIQUE_RULE, "message": "dataStoreOverrides must name each resource at most once"}]))]
    pub data_store_overrides: Option<Vec<DataStoreOverride>>,

    /// Encryption at rest of the tenant's objects in the DataStore (a kamaji-rs field; Kamaji
    /// has none). The tenant's Secrets are always encrypted; `resources` adds others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_at_rest: Option<EncryptionAtRestSpec>,

    /// Addons installed into the tenant cluster: CoreDNS, kube-proxy, konnectivity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<AddonsSpec>,

    /// Admission plugins enabled on the tenant kube-apiserver (`--enable-admission-plugins`).
    /// A plugin removed from Kubernetes (for example `PodSecurityPolicy`, removed in v1.25) makes
    /// kube-apiserver exit at start: it is refused at admission for a `version` that no longer
    /// has it, on create and on update (and by the controller, `SpecValid=False` naming this
    /// field, for an object stored before that rule), and nothing rolls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub admission_controllers: Option<Vec<AdmissionController>>,

    /// Container registry the control-plane images are pulled from (upstream Go field
    /// `ContainerRegistry`). Defaults to `registry.k8s.io`.
    #[serde(
        rename = "registry",
        default = "default_registry",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub container_registry: Option<String>,

    /// kube-apiserver customisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server: Option<ControlPlaneComponent>,

    /// kube-controller-manager customisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manager: Option<ControlPlaneComponent>,

    /// kube-scheduler customisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<ControlPlaneComponent>,

    /// kine customisation, used only with a relational (PostgreSQL, MySQL) DataStore; refused
    /// (`SpecValid=False`) on an etcd DataStore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kine: Option<KineComponent>,

    /// Kubelet settings published to the tenant (`kubelet-config`, kube-apiserver
    /// `--kubelet-preferred-address-types`). Defaults to preferred address types
    /// `[InternalIP, ExternalIP, Hostname]` and cgroup driver `systemd`.
    #[serde(default = "default_kubelet", skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletSpec>,

    /// How the control plane is exposed. Defaults to `{serviceType: LoadBalancer}`.
    #[serde(default = "default_network", skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkComponent>,

    /// Settings of the control-plane Deployment in the management cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentComponent>,
}

#[allow(clippy::unnecessary_wraps)] // serde default functions must return the field type
fn default_registry() -> Option<String> {
    Some(DEFAULT_REGISTRY.to_owned())
}

#[allow(clippy::unnecessary_wraps)] // serde default functions must return the field type
fn default_kubelet() -> Option<KubeletSpec> {
    Some(KubeletSpec::default_spec())
}

#[allow(clippy::unnecessary_wraps)] // serde default functions must return the field type
fn default_network() -> Option<NetworkComponent> {
    Some(NetworkComponent {
        service_type: Some(ServiceType::LoadBalancer),
        ..NetworkComponent::default()
    })
}

/// The API server endpoint (CAPI `APIEndpoint`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    /// DNS name or IP address the API server is reached at (no port, scheme or path). Empty
    /// means not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": validation::ENDPOINT_HOST_RULE, "message": "controlPlaneEndpoint.host must be an IP address or a DNS name, not host:port or a URL"}]))]
    pub host: Option<String>,
    /// TCP port the API server is reached at. 0 means not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65535))]
    pub port: Option<i32>,
}

impl ApiEndpoint {
    /// True when both host and port are set (CAPI `APIEndpoint.IsValid`: host non-empty and
    /// port non-zero).
    #[must_use]
    pub fn is_valid(&self) -> bool {
        self.host.as_deref().is_some_and(|h| !h.is_empty()) && self.port.is_some_and(|p| p != 0)
    }
}

/// One Kubernetes resource kept in a dedicated DataStore (Kamaji `DataStoreOverride`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataStoreOverride {
    /// The resource as kube-apiserver's `--etcd-servers-overrides` takes it, `group/resource`:
    /// `/events` (core group), `apps/deployments`. Only resources built into kube-apiserver.
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": validation::OVERRIDE_RESOURCE_RULE, "message": validation::OVERRIDE_RESOURCE_MESSAGE}]))]
    pub resource: String,
    /// Name of the (etcd) DataStore holding this resource; it must use the same CA certificate
    /// as the control plane's DataStore.
    #[schemars(length(min = 1, max = 253))]
    pub data_store: String,
}

/// Addons installed into the tenant cluster. An absent addon is not installed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonsSpec {
    /// CoreDNS (Deployment `coredns` and Service `kube-dns` in `kube-system`).
    #[serde(rename = "coreDNS", default, skip_serializing_if = "Option::is_none")]
    pub core_dns: Option<CoreDnsAddonSpec>,
    /// kube-proxy DaemonSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy: Option<KubeProxyAddonSpec>,
    /// konnectivity server (a sidecar of the API server) and agents (in the tenant), needed
    /// when the API server cannot reach the workers' network: its traffic to kubelets, pods and
    /// Services (logs, exec, port-forward, webhooks) goes through agents that dial out to the
    /// endpoint's host at `server.port`, which whatever serves the endpoint must forward to
    /// the Service's `konnectivity` port (a LoadBalancer Service does). Needs Kubernetes 1.33
    /// or newer; refused with `network.ingress`, `network.gateway` or a NodePort Service.
    /// Removing it removes the agents and rolls the pods without the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub konnectivity: Option<KonnectivitySpec>,
}

/// Image override of an addon (Kamaji `AddonSpec` / `ImageOverrideTrait`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonSpec {
    /// Registry and repository path to pull the addon image from; empty means the kubeadm
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image_repository: Option<String>,
    /// Image tag; empty means the kubeadm default for the control-plane version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub image_tag: Option<String>,
}

/// kube-proxy addon: Kamaji's image override, plus kamaji-rs extensions (optional, so Kamaji
/// manifests apply unchanged): JSON patches for its configuration and the proxy `mode`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyAddonSpec {
    /// Registry and repository path to pull the kube-proxy image from; empty means the kubeadm
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image_repository: Option<String>,
    /// Image tag; empty means the tenant's Kubernetes version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub image_tag: Option<String>,
    /// RFC 6902 JSON patches applied to the generated `KubeProxyConfiguration`
    /// (`kubeproxy.config.k8s.io/v1alpha1`) before it is published in the tenant's
    /// `kube-system/kube-proxy` ConfigMap, e.g. `conntrack.maxPerCore: 0` (for the proxy mode use `mode`)
    /// (leave the kernel's conntrack limit alone, as on nodes whose network namespace cannot
    /// change it). A patch that does not apply, or that changes `apiVersion`/`kind`, is refused
    /// in `SpecValid=False` naming this field.
    #[serde(
        rename = "configurationJSONPatches",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    pub configuration_json_patches: Option<Vec<JsonPatch>>,
    /// kube-proxy's proxy mode (`KubeProxyConfiguration.mode`), a kamaji-rs field beyond
    /// Kamaji's schema; unset keeps the platform default (`mode: ""`, iptables on Linux).
    /// Applied before `configurationJSONPatches`, so a patch of `/mode` still wins. A later
    /// change rolls the kube-proxy DaemonSet (its pod template carries a hash of the
    /// configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<KubeProxyMode>,
}

/// kube-proxy's proxy mode on Linux (`kubeproxy.config.k8s.io/v1alpha1` `ProxyMode`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum KubeProxyMode {
    /// iptables rules.
    #[serde(rename = "iptables")]
    Iptables,
    /// IPVS virtual servers.
    #[serde(rename = "ipvs")]
    Ipvs,
    /// nftables rules (beta in Kubernetes 1.31, GA in 1.33; not checked against
    /// `spec.version`).
    #[serde(rename = "nftables")]
    Nftables,
}

impl KubeProxyMode {
    /// The value of `KubeProxyConfiguration.mode`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Iptables => "iptables",
            Self::Ipvs => "ipvs",
            Self::Nftables => "nftables",
        }
    }
}

/// CoreDNS addon: an image override plus the cluster DNS Service IPs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoreDnsAddonSpec {
    /// Registry and repository path of the CoreDNS image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image_repository: Option<String>,
    /// Tag of the CoreDNS image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub image_tag: Option<String>,
    /// ClusterIP(s) of the `kube-dns` Service (one per IP family), also the kubelet
    /// `clusterDNS`. Overrides `network.dnsServiceIPs`. Empty means the tenth address of the
    /// service CIDR (for example `10.96.0.10`). Each entry must be an IP address.
    #[serde(
        rename = "dnsServiceIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 2))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 45, "x-kubernetes-validations": [{"rule": "isIP(self)", "message": "dnsServiceIPs entries must be IP addresses"}]}))]
    pub dns_service_ips: Option<Vec<String>>,
}

/// konnectivity server and agent settings (Kamaji `KonnectivitySpec`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KonnectivitySpec {
    /// konnectivity server, a sidecar of kube-apiserver.
    #[serde(
        default = "default_konnectivity_server",
        skip_serializing_if = "Option::is_none"
    )]
    pub server: Option<KonnectivityServerSpec>,
    /// konnectivity agent, deployed into the tenant cluster.
    #[serde(
        default = "default_konnectivity_agent",
        skip_serializing_if = "Option::is_none"
    )]
    pub agent: Option<KonnectivityAgentSpec>,
}

#[allow(clippy::unnecessary_wraps)] // serde default functions must return the field type
fn default_konnectivity_server() -> Option<KonnectivityServerSpec> {
    Some(KonnectivityServerSpec {
        port: Some(DEFAULT_KONNECTIVITY_SERVER_PORT),
        image: Some(DEFAULT_KONNECTIVITY_SERVER_IMAGE.to_owned()),
        ..KonnectivityServerSpec::default()
    })
}

#[allow(clippy::unnecessary_wraps)] // serde default functions must return the field type
fn default_konnectivity_agent() -> Option<KonnectivityAgentSpec> {
    Some(KonnectivityAgentSpec {
        image: Some(DEFAULT_KONNECTIVITY_AGENT_IMAGE.to_owned()),
        mode: Some(KonnectivityAgentMode::DaemonSet),
        tolerations: Some(default_konnectivity_agent_tolerations()),
        ..KonnectivityAgentSpec::default()
    })
}

/// The konnectivity agents' tolerations when `agent.tolerations` is not given (Kamaji's
/// default): `CriticalAddonsOnly` Exists.
#[must_use]
pub fn default_konnectivity_agent_tolerations() -> Vec<Toleration> {
    vec![Toleration {
        key: Some("CriticalAddonsOnly".to_owned()),
        operator: Some("Exists".to_owned()),
        ..Toleration::default()
    }]
}

/// konnectivity server settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KonnectivityServerSpec {
    /// Port the konnectivity server listens on for agents (default 8132).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Image tag (version) of the konnectivity server; empty means the controller's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub version: Option<String>,
    /// Image of the konnectivity server, without tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image: Option<String>,
    /// Compute resources of the konnectivity-server container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra command-line flags of the konnectivity server (`--name=value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 512, "pattern": validation::EXTRA_ARG_PATTERN}))]
    pub extra_args: Option<Vec<String>>,
    /// Security context of the konnectivity-server container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
}

/// How the konnectivity agent runs in the tenant cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum KonnectivityAgentMode {
    /// One agent per node.
    DaemonSet,
    /// A fixed number of agents (`replicas`).
    Deployment,
}

/// konnectivity agent settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KonnectivityAgentSpec {
    /// Image of the konnectivity agent, without tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image: Option<String>,
    /// Image tag (version) of the konnectivity agent; empty means the controller's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub version: Option<String>,
    /// Tolerations of the agent pods (default: `CriticalAddonsOnly` Exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub tolerations: Option<Vec<Toleration>>,
    /// Extra command-line flags of the agent (`--name=value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 512, "pattern": validation::EXTRA_ARG_PATTERN}))]
    pub extra_args: Option<Vec<String>>,
    /// Run the agent pods in the host network namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    /// `DaemonSet` (default) or `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<KonnectivityAgentMode>,
    /// Number of agents when `mode` is `Deployment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
}

/// Admission plugins of kube-apiserver (`--enable-admission-plugins`): the upstream set of 37
/// names (including plugins later removed from Kubernetes: `DenyEscalatingExec`,
/// `DenyExecOnPrivileged`, `PodSecurityPolicy`, `SecurityContextDeny`,
/// `PersistentVolumeLabel`) plus the plugins added since (`ClusterTrustBundleAttest`,
/// `ValidatingAdmissionPolicy`, `MutatingAdmissionPolicy`, `PodTopologyLabels`).
#[allow(missing_docs)] // each variant is the plugin of the same name
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum AdmissionController {
    AlwaysAdmit,
    AlwaysDeny,
    AlwaysPullImages,
    CertificateApproval,
    CertificateSigning,
    CertificateSubjectRestriction,
    ClusterTrustBundleAttest,
    DefaultIngressClass,
    DefaultStorageClass,
    DefaultTolerationSeconds,
    DenyEscalatingExec,
    DenyExecOnPrivileged,
    DenyServiceExternalIPs,
    EventRateLimit,
    ExtendedResourceToleration,
    ImagePolicyWebhook,
    LimitPodHardAntiAffinityTopology,
    LimitRanger,
    MutatingAdmissionPolicy,
    MutatingAdmissionWebhook,
    NamespaceAutoProvision,
    NamespaceExists,
    NamespaceLifecycle,
    NodeRestriction,
    OwnerReferencesPermissionEnforcement,
    PersistentVolumeClaimResize,
    PersistentVolumeLabel,
    PodNodeSelector,
    PodSecurity,
    PodSecurityPolicy,
    PodTolerationRestriction,
    PodTopologyLabels,
    Priority,
    ResourceQuota,
    RuntimeClass,
    SecurityContextDeny,
    ServiceAccount,
    StorageObjectInUseProtection,
    TaintNodesByCondition,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionWebhook,
}

impl AdmissionController {
    /// Every plugin, in declaration order.
    pub const ALL: [Self; 41] = [
        Self::AlwaysAdmit,
        Self::AlwaysDeny,
        Self::AlwaysPullImages,
        Self::CertificateApproval,
        Self::CertificateSigning,
        Self::CertificateSubjectRestriction,
        Self::ClusterTrustBundleAttest,
        Self::DefaultIngressClass,
        Self::DefaultStorageClass,
        Self::DefaultTolerationSeconds,
        Self::DenyEscalatingExec,
        Self::DenyExecOnPrivileged,
        Self::DenyServiceExternalIPs,
        Self::EventRateLimit,
        Self::ExtendedResourceToleration,
        Self::ImagePolicyWebhook,
        Self::LimitPodHardAntiAffinityTopology,
        Self::LimitRanger,
        Self::MutatingAdmissionPolicy,
        Self::MutatingAdmissionWebhook,
        Self::NamespaceAutoProvision,
        Self::NamespaceExists,
        Self::NamespaceLifecycle,
        Self::NodeRestriction,
        Self::OwnerReferencesPermissionEnforcement,
        Self::PersistentVolumeClaimResize,
        Self::PersistentVolumeLabel,
        Self::PodNodeSelector,
        Self::PodSecurity,
        Self::PodSecurityPolicy,
        Self::PodTolerationRestriction,
        Self::PodTopologyLabels,
        Self::Priority,
        Self::ResourceQuota,
        Self::RuntimeClass,
        Self::SecurityContextDeny,
        Self::ServiceAccount,
        Self::StorageObjectInUseProtection,
        Self::TaintNodesByCondition,
        Self::ValidatingAdmissionPolicy,
        Self::ValidatingAdmissionWebhook,
    ];

    /// The plugin name as kube-apiserver's `--enable-admission-plugins` takes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AlwaysAdmit => "AlwaysAdmit",
            Self::AlwaysDeny => "AlwaysDeny",
            Self::AlwaysPullImages => "AlwaysPullImages",
            Self::CertificateApproval => "CertificateApproval",
            Self::CertificateSigning => "CertificateSigning",
            Self::CertificateSubjectRestriction => "CertificateSubjectRestriction",
            Self::ClusterTrustBundleAttest => "ClusterTrustBundleAttest",
            Self::DefaultIngressClass => "DefaultIngressClass",
            Self::DefaultStorageClass => "DefaultStorageClass",
            Self::DefaultTolerationSeconds => "DefaultTolerationSeconds",
            Self::DenyEscalatingExec => "DenyEscalatingExec",
            Self::DenyExecOnPrivileged => "DenyExecOnPrivileged",
            Self::DenyServiceExternalIPs => "DenyServiceExternalIPs",
            Self::EventRateLimit => "EventRateLimit",
            Self::ExtendedResourceToleration => "ExtendedResourceToleration",
            Self::ImagePolicyWebhook => "ImagePolicyWebhook",
            Self::LimitPodHardAntiAffinityTopology => "LimitPodHardAntiAffinityTopology",
            Self::LimitRanger => "LimitRanger",
            Self::MutatingAdmissionPolicy => "MutatingAdmissionPolicy",
            Self::MutatingAdmissionWebhook => "MutatingAdmissionWebhook",
            Self::NamespaceAutoProvision => "NamespaceAutoProvision",
            Self::NamespaceExists => "NamespaceExists",
            Self::NamespaceLifecycle => "NamespaceLifecycle",
            Self::NodeRestriction => "NodeRestriction",
            Self::OwnerReferencesPermissionEnforcement => "OwnerReferencesPermissionEnforcement",
            Self::PersistentVolumeClaimResize => "PersistentVolumeClaimResize",
            Self::PersistentVolumeLabel => "PersistentVolumeLabel",
            Self::PodNodeSelector => "PodNodeSelector",
            Self::PodSecurity => "PodSecurity",
            Self::PodSecurityPolicy => "PodSecurityPolicy",
            Self::PodTolerationRestriction => "PodTolerationRestriction",
            Self::PodTopologyLabels => "PodTopologyLabels",
            Self::Priority => "Priority",
            Self::ResourceQuota => "ResourceQuota",
            Self::RuntimeClass => "RuntimeClass",
            Self::SecurityContextDeny => "SecurityContextDeny",
            Self::ServiceAccount => "ServiceAccount",
            Self::StorageObjectInUseProtection => "StorageObjectInUseProtection",
            Self::TaintNodesByCondition => "TaintNodesByCondition",
            Self::ValidatingAdmissionPolicy => "ValidatingAdmissionPolicy",
            Self::ValidatingAdmissionWebhook => "ValidatingAdmissionWebhook",
        }
    }

    /// Plugins removed from kube-apiserver: `Some(minor)` is the first 1.minor release
    /// without the plugin. The controller refuses such a plugin for those versions
    /// (`SpecValid=False`) instead of letting the API server crash on an unknown plugin.
    #[must_use]
    pub fn removed_in_minor(self) -> Option<u64> {
        match self {
            Self::DenyEscalatingExec | Self::DenyExecOnPrivileged => Some(21),
            Self::PodSecurityPolicy => Some(25),
            Self::SecurityContextDeny => Some(30),
            Self::PersistentVolumeLabel => Some(31),
            _ => None,
        }
    }
}

/// One control-plane component of a `KamajiControlPlane`: its binary and the spec field that
/// customises it (`spec.apiServer`, `spec.controllerManager`, `spec.scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    /// kube-apiserver.
    ApiServer,
    /// kube-controller-manager.
    ControllerManager,
    /// kube-scheduler.
    Scheduler,
}

impl Component {
    /// Every component, in the order the pod runs them.
    pub const ALL: [Self; 3] = [Self::ApiServer, Self::ControllerManager, Self::Scheduler];

    /// Container and binary name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::ApiServer => "kube-apiserver",
            Self::ControllerManager => "kube-controller-manager",
            Self::Scheduler => "kube-scheduler",
        }
    }

    /// JSON name of this component's [`ControlPlaneComponent`] in the spec (`apiServer`).
    #[must_use]
    pub fn json_field(self) -> &'static str {
        match self {
            Self::ApiServer => "apiServer",
            Self::ControllerManager => "controllerManager",
            Self::Scheduler => "scheduler",
        }
    }

    /// The spec field holding this component's `extraArgs`.
    #[must_use]
    pub fn spec_field(self) -> &'static str {
        match self {
            Self::ApiServer => "spec.apiServer.extraArgs",
            Self::ControllerManager => "spec.controllerManager.extraArgs",
            Self::Scheduler => "spec.scheduler.extraArgs",
        }
    }
}

/// Customisation of one control-plane container (upstream `ControlPlaneComponent`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneComponent {
    /// Volume mounts added to this container; the volumes come from
    /// `deployment.extraVolumes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub extra_volume_mounts: Option<Vec<VolumeMount>>,
    /// Extra command-line flags, each `--name=value`, `--name` or `name=value`. A flag set here
    /// replaces the provider's default of the same name; a flag given several times is passed
    /// several times. Flags that wire the control plane to its PKI and DataStore cannot be
    /// overridden (see [`crate::validation::RESERVED_API_SERVER_FLAGS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 512, "pattern": validation::EXTRA_ARG_PATTERN}))]
    pub extra_args: Option<Vec<String>>,
    /// Compute resources of this container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Image name (repository path below `registry`, without tag), for example
    /// `kube-apiserver`. The tag is the control-plane version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub container_image_name: Option<String>,
    /// Probe timings of this container; unset probes fall back to `deployment.probes`, then to
    /// the provider defaults, each probe on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<ProbeSet>,
}

/// Encryption at rest of the tenant's objects: kube-apiserver's `EncryptionConfiguration`
/// (`apiserver.config.k8s.io/v1`) with a `secretbox` key kamaji-rs keeps in
/// `<cluster>-encryption.config` and rotates on request
/// ([`crate::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionAtRestSpec {
    /// Resources encrypted besides `secrets` (always encrypted), in the form of
    /// `EncryptionConfiguration.resources[].resources`: `<resource>` for the core group
    /// (`configmaps`), `<resource>.<group>` (`widgets.example.com`), `*.<group>` for every
    /// resource of a group (`*.apps`), `*.` for every core resource and `*.*` for all. Each at
    /// most once. May change after creation: an added resource is first read encrypted by every
    /// API server, then written encrypted, then its stored objects are rewritten; a removed one
    /// is first written as plain text everywhere, then its stored objects are rewritten, then
    /// it is dropped from the configuration (condition `EncryptionAtRestConfigured`).
    /// Refused at admission: what kube-apiserver refuses (capitals, `*`, `<resource>.*`,
    /// `apiserveripinfo`, `serviceipallocations`, `servicenodeportallocations`, the
    /// `extensions` and `events.k8s.io` groups), and entries that repeat or overlap another
    /// (`configmaps` beside `*.`). At most 32 entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": validation::ENCRYPTED_RESOURCES_DISJOINT_RULE, "message": "encryptionAtRest.resources must name each resource once, and none that another entry covers (*.* covers all, *.<group> its group, *. the core group)"}]))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 253, "pattern": validation::ENCRYPTED_RESOURCE_PATTERN, "x-kubernetes-validations": [{"rule": validation::ENCRYPTED_RESOURCE_RULE, "message": validation::ENCRYPTED_RESOURCE_MESSAGE}]}))]
    pub resources: Option<Vec<String>>,
}

/// Customisation of the kine container (only with a PostgreSQL or MySQL DataStore; NATS is
/// refused as a DataStore driver).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KineComponent {
    /// Extra command-line flags of kine (`--name=value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 512, "pattern": validation::EXTRA_ARG_PATTERN}))]
    pub extra_args: Option<Vec<String>>,
    /// Compute resources of the kine container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Probe timings per probe type (Kamaji `ProbeSet`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSet {
    /// Liveness probe timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<ProbeSpec>,
    /// Readiness probe timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ProbeSpec>,
    /// Startup probe timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<ProbeSpec>,
}

/// Timings of one probe; unset values keep the provider default (corev1 `Probe` semantics).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSpec {
    /// Seconds after container start before the first probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub initial_delay_seconds: Option<i32>,
    /// Seconds after which one probe attempt times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<i32>,
    /// Seconds between probe attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub period_seconds: Option<i32>,
    /// Consecutive successes to count as healthy after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub success_threshold: Option<i32>,
    /// Consecutive failures to count as unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failure_threshold: Option<i32>,
}

/// Node address types the API server may use to reach kubelets, in order of preference.
#[allow(missing_docs)] // each variant is the corev1 NodeAddressType of the same name
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum KubeletPreferredAddressType {
    Hostname,
    InternalIP,
    ExternalIP,
    InternalDNS,
    ExternalDNS,
}

/// Cgroup driver of the tenant kubelets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// The systemd cgroup driver (the kubeadm default).
    Systemd,
    /// The cgroupfs driver (deprecated).
    Cgroupfs,
}

impl CgroupDriver {
    /// The kubelet's spelling (`KubeletConfiguration.cgroupDriver`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Systemd => "systemd",
            Self::Cgroupfs => "cgroupfs",
        }
    }
}

/// Kubelet settings (Kamaji `KubeletSpec`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSpec {
    /// RFC 6902 JSON patches applied to the generated `KubeletConfiguration` before it is
    /// published in the tenant's `kubelet-config` ConfigMap.
    #[serde(
        rename = "configurationJSONPatches",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    pub configuration_json_patches: Option<Vec<JsonPatch>>,
    /// Node address types, in order of preference, for API server to kubelet connections
    /// (kube-apiserver `--kubelet-preferred-address-types`). A set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 5))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub preferred_address_types: Option<Vec<KubeletPreferredAddressType>>,
    /// Cgroup driver of the kubelets (`cgroupDriver` of `KubeletConfiguration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroupfs: Option<CgroupDriver>,
}

impl KubeletSpec {
    /// The schema default: `{preferredAddressTypes: [InternalIP, ExternalIP, Hostname],
    /// cgroupfs: systemd}`.
    #[must_use]
    pub fn default_spec() -> Self {
        Self {
            configuration_json_patches: None,
            preferred_address_types: Some(vec![
                KubeletPreferredAddressType::InternalIP,
                KubeletPreferredAddressType::ExternalIP,
                KubeletPreferredAddressType::Hostname,
            ]),
            cgroupfs: Some(CgroupDriver::Systemd),
        }
    }
}

/// RFC 6902 operation.
#[allow(missing_docs)] // each variant is the RFC 6902 operation of the same name
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JsonPatchOp {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

/// One RFC 6902 JSON patch operation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JsonPatch {
    /// Operation.
    pub op: JsonPatchOp,
    /// JSON pointer (RFC 6901) of the target, for example `/maxPods`.
    #[schemars(length(min = 1, max = 1024))]
    pub path: String,
    /// Source JSON pointer for `move` and `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub from: Option<String>,
    /// Value for `add`, `replace` and `test`: any JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::any_json")]
    pub value: Option<serde_json::Value>,
}

/// How the control-plane Service is exposed (corev1 `ServiceType`, except `ExternalName`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    /// Reachable only inside the management cluster (or through ingress/gateway).
    ClusterIP,
    /// A port on every management-cluster node.
    NodePort,
    /// An external load balancer (the default).
    LoadBalancer,
}

impl ServiceType {
    /// The corev1 `Service.spec.type` value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

/// How the control plane is exposed (upstream `NetworkComponent`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = validation::network_component)]
pub struct NetworkComponent {
    /// Settings that only apply to a `LoadBalancer` Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_config: Option<LoadBalancerConfig>,
    /// Expose the API server through a Gateway API `TLSRoute` attached to this Gateway.
    /// Mutually exclusive with `ingress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayComponent>,
    /// Expose the API server through an `Ingress` (TLS passthrough). Mutually exclusive with
    /// `gateway`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressComponent>,
    /// Type of the control-plane Service: `ClusterIP`, `NodePort` or `LoadBalancer` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "LoadBalancer"))]
    pub service_type: Option<ServiceType>,
    /// Whether a `LoadBalancer` Service also allocates node ports (Service
    /// `allocateLoadBalancerNodePorts`); only with `serviceType: LoadBalancer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_load_balancer_node_ports: Option<bool>,
    /// Pre-assigned IP address of the Service (a VIP, or the `loadBalancerIP`), used as the
    /// control-plane endpoint host. Must be an IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "isIP(self)", "message": "network.serviceAddress must be an IP address"}]))]
    pub service_address: Option<String>,
    /// kube-apiserver's `--advertise-address` (the address of the tenant's `kubernetes`
    /// Service endpoints), also a serving-certificate name; without it the endpoint's IP, when
    /// it is one. Must be an IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 45))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "isIP(self)", "message": "network.advertiseAddress must be an IP address"}]))]
    pub advertise_address: Option<String>,
    /// Extra labels of the control-plane Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_labels: Option<BTreeMap<String, String>>,
    /// Extra annotations of the control-plane Service (for example cloud load-balancer
    /// settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_annotations: Option<BTreeMap<String, String>>,
    /// Extra ports of the control-plane Service, for sidecars next to kube-apiserver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub additional_service_ports: Option<Vec<AdditionalPort>>,
    /// Extra Subject Alternative Names of the API server serving certificate: DNS names
    /// (wildcards allowed) or IP addresses, never `host:port`.
    #[serde(rename = "certSANs", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 253, "x-kubernetes-validations": [{"rule": validation::CERT_SAN_RULE, "message": "network.certSANs entries must be DNS names or IP addresses, not host:port or URLs"}]}))]
    pub cert_sans: Option<Vec<String>>,
    /// ClusterIP(s) of the tenant `kube-dns` Service; `addons.coreDNS.dnsServiceIPs` wins when
    /// set. Each entry must be an IP address.
    #[serde(
        rename = "dnsServiceIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 2))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 45, "x-kubernetes-validations": [{"rule": "isIP(self)", "message": "network.dnsServiceIPs entries must be IP addresses"}]}))]
    pub dns_service_ips: Option<Vec<String>>,
}

/// Settings of a `LoadBalancer` control-plane Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerConfig {
    /// Client CIDRs allowed to reach the load balancer (Service `loadBalancerSourceRanges`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[schemars(extend("items" = {"type": "string", "maxLength": 49, "x-kubernetes-validations": [{"rule": "isCIDR(self)", "message": "network.loadBalancerConfig.loadBalancerSourceRanges entries must be CIDRs"}]}))]
    pub load_balancer_source_ranges: Option<Vec<String>>,
    /// Load-balancer implementation (Service `loadBalancerClass`). Immutable: it can neither be
    /// changed nor set or unset after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "network.loadBalancerConfig.loadBalancerClass is immutable"}]))]
    pub load_balancer_class: Option<String>,
}

/// Gateway API exposure of the API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayComponent {
    /// Name of the Gateway.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Gateway.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Host name routed to the API server; added to the serving certificate's SANs and used
    /// as the endpoint host (port 443 unless the listener port is set). A lowercase DNS name:
    /// no wildcard, IP address, port or URL.
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": validation::ENDPOINT_HOSTNAME_RULE, "message": "network.gateway.hostname must be a lowercase DNS name (no wildcard, IP address, port or URL): it becomes the control-plane endpoint host"}]))]
    pub hostname: String,
    /// Listener of the Gateway to attach to (`ParentReference.sectionName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub section_name: Option<String>,
    /// Listener port to attach to (`ParentReference.port`), and the endpoint's port (443
    /// without it): set it whenever the listener is not on 443, even with `sectionName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Extra labels of the generated route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_labels: Option<BTreeMap<String, String>>,
    /// Extra annotations of the generated route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_annotations: Option<BTreeMap<String, String>>,
}

/// Ingress exposure of the API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressComponent {
    /// `ingressClassName` of the Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub class_name: Option<String>,
    /// Host name routed to the API server; added to the serving certificate's SANs and used
    /// as the endpoint host (port 443). A lowercase DNS name: no wildcard, IP address, port or
    /// URL.
    #[schemars(length(min = 1, max = 253))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": validation::ENDPOINT_HOSTNAME_RULE, "message": "network.ingress.hostname must be a lowercase DNS name (no wildcard, IP address, port or URL): it becomes the control-plane endpoint host"}]))]
    pub hostname: String,
    /// Extra labels of the Ingress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_labels: Option<BTreeMap<String, String>>,
    /// Extra annotations of the Ingress, over the ingress-nginx and HAProxy TLS-passthrough
    /// ones kamaji-rs sets; other controllers need theirs here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_annotations: Option<BTreeMap<String, String>>,
}

/// Transport protocol of an additional Service port.
#[allow(missing_docs)] // each variant is the corev1 Protocol of the same name
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PortProtocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

/// An extra port of the control-plane Service (Kamaji `AdditionalPort`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalPort {
    /// Port name (DNS label), unique within the Service.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Protocol, `TCP` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "TCP"))]
    pub protocol: Option<PortProtocol>,
    /// Application protocol (Service port `appProtocol`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub app_protocol: Option<String>,
    /// Service port.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Container port (number or name) the Service port forwards to.
    pub target_port: IntOrString,
}

/// Labels and annotations added to a generated object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalMetadata {
    /// Extra labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Extra annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Settings of the control-plane Deployment (upstream `DeploymentComponent`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentComponent {
    /// Node selector of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// RuntimeClass of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub runtime_class_name: Option<String>,
    /// Labels and annotations of the Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_metadata: Option<AdditionalMetadata>,
    /// Labels and annotations of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_additional_metadata: Option<AdditionalMetadata>,
    /// ServiceAccount of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub service_account_name: Option<String>,
    /// Rollout strategy of the Deployment. The provider default is RollingUpdate with
    /// `maxUnavailable: 0` and `maxSurge: 1` (never fewer ready API servers than desired); a
    /// user value is used as given, even one that replaces every API server at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<DeploymentStrategy>,
    /// Scheduling affinity of the control-plane pods (corev1 `Affinity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::compact::<Option<Affinity>>")]
    pub affinity: Option<Affinity>,
    /// Tolerations of the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub tolerations: Option<Vec<Toleration>>,
    /// Topology spread constraints of the control-plane pods; a constraint without
    /// `labelSelector` gets the control plane's own pod selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// Init containers added to the control-plane pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        schema_with = "crate::schema::compact::<Option<Vec<Container>>>"
    )]
    pub extra_init_containers: Option<Vec<Container>>,
    /// Containers added to the control-plane pods (sidecars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 16),
        schema_with = "crate::schema::compact::<Option<Vec<Container>>>"
    )]
    pub extra_containers: Option<Vec<Container>>,
    /// Volumes added to the control-plane pods, mounted with `extraVolumeMounts`. The legacy
    /// `secret.name` is read as `secret.secretName`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_extra_volumes"
    )]
    #[schemars(length(max = 64), schema_with = "crate::schema::extra_volumes")]
    pub extra_volumes: Option<Vec<Volume>>,
    /// Run the control plane in another cluster reached with a kubeconfig Secret (upstream
    /// feature gate `ExternalClusterReference`). Not supported by kamaji-rs yet: the
    /// controller reports it in a condition instead of ignoring it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_cluster_reference: Option<ExternalClusterReference>,
    /// Probe timings for all control-plane containers; per-component `probes` win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<ProbeSet>,
}

/// Deserializes `deployment.extraVolumes`, reading the legacy `secret.name` (written by users
/// of the Kamaji provider, see shared/samples) as `secret.secretName` when that is empty.
///
/// # Errors
/// When the list is not a list of corev1 `Volume`s.
pub fn deserialize_extra_volumes<'de, D>(deserializer: D) -> Result<Option<Vec<Volume>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let Some(mut raw) = Option::<Vec<serde_json::Value>>::deserialize(deserializer)? else {
        return Ok(None);
    };
    for volume in &mut raw {
        if let Some(secret) = volume
            .get_mut("secret")
            .and_then(serde_json::Value::as_object_mut)
        {
            let has_secret_name = secret
                .get("secretName")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if let Some(name) = secret.remove("name")
                && !has_secret_name
            {
                secret.insert("secretName".to_owned(), name);
            }
        }
    }
    serde_json::from_value(serde_json::Value::Array(raw))
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// A remote cluster that hosts the control-plane pods (upstream `ExternalClusterReference`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalClusterReference {
    /// Secret holding the kubeconfig of the remote cluster.
    #[schemars(length(min = 1, max = 253))]
    pub kubeconfig_secret_name: String,
    /// Key of that Secret holding the kubeconfig.
    #[schemars(length(min = 1, max = 253))]
    pub kubeconfig_secret_key: String,
    /// Namespace of that Secret; defaults to the KamajiControlPlane's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub kubeconfig_secret_namespace: Option<String>,
    /// Namespace of the remote cluster where the control plane is deployed.
    #[serde(default)]
    #[schemars(length(max = 63))]
    pub deployment_namespace: String,
}

/// Observed state of a `KamajiControlPlane`, in both CAPI contract flavours: the v1beta2 fields
/// (`initialization`, pointer replica counters, `versions`, `conditions`) and the v1beta1 fields
/// (`initialized`, `ready`, `updatedReplicas`, `unavailableReplicas`, `version`,
/// `failureReason`/`failureMessage`). There is deliberately no `v1beta2` sub-object: CAPI would
/// read `status.v1beta2.conditions` instead of `status.conditions` (contract item 30).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KamajiControlPlaneStatus {
    /// v1beta2 contract: initialization milestones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<KamajiControlPlaneInitialization>,
    /// v1beta1 contract: true once the API server has accepted requests (never reset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized: Option<bool>,
    /// v1beta1 contract (read only by CAPI <= v1.10): the control plane serves requests now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Control-plane pods that exist (the Deployment's `status.replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Control-plane pods whose containers are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Control-plane pods available (ready for `minReadySeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// v1beta2 contract: control-plane pods running the desired spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date_replicas: Option<i32>,
    /// v1beta1 contract: control-plane pods running the desired spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// v1beta1 contract: control-plane pods not available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,
    /// Label selector of the control-plane pods in query-parameter form (scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// v1beta1 contract (deprecated in v1beta2): the lowest Kubernetes version running, so the
    /// last version every replica ran; `spec.version` may go back to it but not below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub version: Option<String>,
    /// v1beta2 contract: the Kubernetes versions running, oldest first, with pod counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["version"]))]
    pub versions: Option<Vec<StatusVersion>>,
    /// Always true: the control plane has no CAPI Machines or Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_managed_control_plane: Option<bool>,
    /// v1beta1 contract: terminal failure reason (informational for CAPI >= v1.11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// v1beta1 contract: terminal failure message (informational for CAPI >= v1.11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_message: Option<String>,
    /// Conditions (`metav1.Condition`); types and reasons in [`crate::conditions`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Where the control plane keeps its objects: the DataStore, the schema (the etcd key
    /// prefix without its `/`) and the datastore user (its client certificate's common name,
    /// its etcd user) it uses; a second control plane on a schema another one holds is refused
    /// (`DataStoreReady=False`, `DataStoreSchemaInUse`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_store: Option<StatusDataStore>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The datastore names of a control plane ([`KamajiControlPlaneStatus::data_store`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusDataStore {
    /// The DataStore (`spec.dataStoreName`, or the manager's default).
    pub name: String,
    /// The schema: `spec.dataStoreSchema`, or the one derived from namespace and name.
    pub schema: String,
    /// The datastore user: on etcd the common name of `<cluster>-apiserver-etcd-client`, on
    /// PostgreSQL and MySQL the tenant's SQL user.
    pub username: String,
}

/// v1beta2 contract initialization milestones.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KamajiControlPlaneInitialization {
    /// True once the API server has accepted requests through the endpoint; never reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_initialized: Option<bool>,
}

/// One running Kubernetes version and how many control-plane pods run it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusVersion {
    /// Kubernetes version, with `v` prefix.
    #[schemars(length(min = 1, max = 256))]
    pub version: String,
    /// Control-plane pods running this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub replicas: Option<i32>,
}

impl KamajiControlPlane {
    /// `spec.network.serviceType`, with the schema default applied.
    #[must_use]
    pub fn service_type(&self) -> ServiceType {
        self.spec
            .fields
            .network
            .as_ref()
            .and_then(|n| n.service_type)
            .unwrap_or(ServiceType::LoadBalancer)
    }

    /// `spec.replicas`, with the schema default applied.
    #[must_use]
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(DEFAULT_REPLICAS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_secret_volume_name_is_read_as_secret_name() {
        let spec: KamajiControlPlaneSpec = serde_json::from_value(serde_json::json!({
            "version": "1.27.0",
            "deployment": {"extraVolumes": [
                {"name": "a", "secret": {"name": "cloud-conf"}},
                {"name": "b", "secret": {"secretName": "kept", "name": "ignored"}},
            ]},
        }))
        .unwrap();
        let volumes = spec.fields.deployment.unwrap().extra_volumes.unwrap();
        let names: Vec<_> = volumes
            .iter()
            .map(|v| v.secret.as_ref().unwrap().secret_name.clone().unwrap())
            .collect();
        assert_eq!(names, vec!["cloud-conf", "kept"]);
    }

    #[test]
    fn missing_fields_take_the_schema_defaults() {
        let spec: KamajiControlPlaneSpec =
            serde_json::from_value(serde_json::json!({"version": "v1.30.2"})).unwrap();
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(
            spec.fields.container_registry.as_deref(),
            Some("registry.k8s.io")
        );
        assert_eq!(spec.fields.kubelet, Some(KubeletSpec::default_spec()));
        assert_eq!(
            spec.fields.network.and_then(|n| n.service_type),
            Some(ServiceType::LoadBalancer)
        );
        let json = serde_json::to_value(KamajiControlPlaneSpec {
            fields: KamajiControlPlaneFields::default(),
            control_plane_endpoint: None,
            replicas: None,
            version: "v1.30.2".to_owned(),
            rollout: None,
        })
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({"version": "v1.30.2"}),
            "None is never sent"
        );
    }

    #[test]
    fn removed_admission_plugins_are_known() {
        assert_eq!(
            AdmissionController::PodSecurityPolicy.removed_in_minor(),
            Some(25)
        );
        assert_eq!(
            AdmissionController::NodeRestriction.removed_in_minor(),
            None
        );
        let parsed: AdmissionController =
            serde_json::from_value(serde_json::json!("SecurityContextDeny")).unwrap();
        assert_eq!(parsed.as_str(), "SecurityContextDeny");
    }
}
