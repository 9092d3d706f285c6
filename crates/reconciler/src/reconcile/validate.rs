//! The **validate** step: a KamajiControlPlane and its Cluster become a [`ValidSpec`] of
//! typed, validated values, or a list of errors that each name the field (pure; no I/O).
//!
//! Admission (schema + CEL) rejects most bad input before it is stored; what is checked here
//! needs the Cluster or the target version, or is refused at admission only since a later
//! release: the tenant network (service/pod CIDRs from `Cluster.spec.clusterNetwork`,
//! `dnsServiceIPs` inside the service range, case B18), the supported version range, flags and
//! admission plugins the target version no longer has (they crash the component at start),
//! the serving certificate's names (`certSANs`, the ingress or gateway host, the Cluster's
//! endpoint), the addon images, the kubelet settings and configuration patches (everything the
//! kubeadm artifacts need but the endpoint). Nothing after this step reads the raw spec.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ResourceRequirements, ServicePort, Toleration, TopologySpreadConstraint,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kamaji_api::KamajiControlPlane;
use kamaji_api::cluster::ClusterView;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::kcp::{
    AdmissionController, Component, ControlPlaneComponent, DEFAULT_REGISTRY, DEFAULT_REPLICAS,
    KubeletPreferredAddressType, ProbeSet, ProbeSpec, ServiceType,
};
use kamaji_api::names::{self, ObjectNames};
use kamaji_api::validation;
use kamaji_bootstrap::controlplane::removed_flag;
use kamaji_bootstrap::konnectivity::Konnectivity;
use kamaji_bootstrap::kubeadm::{AddonImage, Addons, KubeletSpec, Tenant, TenantSpec};
use kamaji_bootstrap::network::{NetworkSpec, TenantNetwork};
use kamaji_bootstrap::pki::ApiServerNames;
use kamaji_bootstrap::version::KubernetesVersion;

use super::status::Cond;

/// One reason a spec cannot be reconciled, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// JSON path of the offending field, e.g. `spec.apiServer.extraArgs`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Admission plugins kube-apiserver enables when `spec.admissionControllers` is empty
/// (kubeadm's choice: the API server defaults plus `NodeRestriction`).
pub const DEFAULT_ADMISSION_PLUGINS: &[&str] = &["NodeRestriction"];

/// How the control plane is exposed.
#[derive(Debug, Clone, PartialEq)]
pub struct Exposure {
    /// Service type.
    pub service_type: ServiceType,
    /// `network.serviceAddress`.
    pub service_address: Option<String>,
    /// Ingress or gateway host and port, which the endpoint takes first.
    pub external: Option<(String, u16)>,
    /// Extra serving-certificate names: `network.certSANs`, then the ingress or gateway host.
    pub cert_sans: Vec<String>,
    /// `network.serviceLabels` (kamaji-rs's own labels win on a clash).
    pub service_labels: BTreeMap<String, String>,
    /// `network.serviceAnnotations`.
    pub service_annotations: Option<BTreeMap<String, String>>,
    /// `network.additionalServicePorts`, as Service ports.
    pub additional_ports: Vec<ServicePort>,
    /// `network.loadBalancerConfig.loadBalancerSourceRanges` (LoadBalancer only).
    pub load_balancer_source_ranges: Option<Vec<String>>,
    /// `network.loadBalancerConfig.loadBalancerClass` (LoadBalancer only).
    pub load_balancer_class: Option<String>,
    /// `network.allocateLoadBalancerNodePorts` (LoadBalancer only).
    pub allocate_load_balancer_node_ports: Option<bool>,
    /// `network.advertiseAddress`: kube-apiserver's `--advertise-address` (the address of the
    /// tenant's `kubernetes` Service endpoints), instead of the endpoint's IP; also a serving
    /// certificate name.
    pub advertise_address: Option<std::net::IpAddr>,
    /// `network.ingress`: the Ingress kamaji-rs creates for the API server.
    pub ingress: Option<kamaji_api::kcp::IngressComponent>,
    /// `network.gateway`: the Gateway the API server's TLSRoute attaches to.
    pub gateway: Option<kamaji_api::kcp::GatewayComponent>,
}

/// Where an endpoint set before kamaji-rs chooses one comes from, in the order they win
/// (capi-contract.md items 13–15: Cluster API copies the infrastructure cluster's endpoint, or
/// the control plane's, into the Cluster once, and never changes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointSource {
    /// `Cluster.spec.controlPlaneEndpoint`: set by the user, copied by Cluster API from the
    /// infrastructure cluster, or written by an earlier pass.
    Cluster,
    /// `KamajiControlPlane.spec.controlPlaneEndpoint`: set by the user, or by an earlier pass.
    ControlPlane,
    /// The infrastructure cluster's `spec.controlPlaneEndpoint` (a provider that owns the
    /// address), of this kind.
    Infrastructure(String),
}

impl EndpointSource {
    /// The field the endpoint was read from, for messages.
    #[must_use]
    pub fn field(&self) -> String {
        match self {
            Self::Cluster => "Cluster.spec.controlPlaneEndpoint".to_owned(),
            Self::ControlPlane => "spec.controlPlaneEndpoint".to_owned(),
            Self::Infrastructure(kind) => format!("{kind}.spec.controlPlaneEndpoint"),
        }
    }
}

/// An endpoint set before kamaji-rs chooses one ([`EndpointSource`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresetEndpoint {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Where it was read from.
    pub source: EndpointSource,
}

/// Probe timings of one container: each field from the component's `probes`, else
/// `deployment.probes`, else kubeadm's static-pod default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probes {
    /// Liveness.
    pub liveness: ProbeSpec,
    /// Readiness.
    pub readiness: ProbeSpec,
    /// Startup.
    pub startup: ProbeSpec,
}

/// One component's customisation (`spec.apiServer`, `spec.controllerManager`,
/// `spec.scheduler`).
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentSpec {
    /// `extraArgs`, as written (merged with the defaults by kamaji-bootstrap).
    pub extra_args: Vec<String>,
    /// Image name below the registry (default: the binary name).
    pub image_name: String,
    /// Compute resources.
    pub resources: Option<ResourceRequirements>,
    /// `extraVolumeMounts`.
    pub extra_volume_mounts: Vec<VolumeMount>,
    /// Probe timings.
    pub probes: Probes,
}

/// The pod-level settings of `spec.deployment`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodSettings {
    /// `additionalMetadata` of the Deployment.
    pub labels: BTreeMap<String, String>,
    /// `additionalMetadata` of the Deployment.
    pub annotations: BTreeMap<String, String>,
    /// `podAdditionalMetadata`.
    pub pod_labels: BTreeMap<String, String>,
    /// `podAdditionalMetadata`.
    pub pod_annotations: BTreeMap<String, String>,
    /// `strategy`, else one extra pod at a time and never one fewer ready (case B14).
    pub strategy: DeploymentStrategy,
    /// `nodeSelector`.
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `runtimeClassName`.
    pub runtime_class_name: Option<String>,
    /// `serviceAccountName`.
    pub service_account_name: Option<String>,
    /// `affinity`.
    pub affinity: Option<Affinity>,
    /// `tolerations`.
    pub tolerations: Option<Vec<Toleration>>,
    /// `topologySpreadConstraints`.
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// `extraInitContainers`.
    pub extra_init_containers: Vec<Container>,
    /// `extraContainers`.
    pub extra_containers: Vec<Container>,
    /// `extraVolumes`.
    pub extra_volumes: Vec<Volume>,
}

/// The pod selector of the control-plane Deployment and Service (the observe step lists the
/// control-plane pods with it).
#[must_use]
pub fn selector_labels(spec: &ValidSpec) -> BTreeMap<String, String> {
    BTreeMap::from([(
        kamaji_api::meta::KAMAJI_NAME_LABEL.to_owned(),
        spec.names.pod_label_value(),
    )])
}

/// Everything the later steps need, validated and with defaults applied; nothing but typed
/// values (no copy of the resource).
#[derive(Debug, Clone)]
pub struct ValidSpec {
    /// Namespace of the KamajiControlPlane and its Cluster.
    pub namespace: String,
    /// Child object names.
    pub names: ObjectNames,
    /// The Cluster's name.
    pub cluster_name: String,
    /// An endpoint set before kamaji-rs chooses one, which the control plane serves as is.
    pub preset_endpoint: Option<PresetEndpoint>,
    /// Target version.
    pub version: KubernetesVersion,
    /// Target version as an image tag and `--version` string, `v` prefixed.
    pub version_tag: String,
    /// Desired pods.
    pub replicas: i32,
    /// Image registry.
    pub registry: String,
    /// Tenant network.
    pub network: TenantNetwork,
    /// kube-apiserver port: the Service port, the container port and the endpoint port unless
    /// an ingress or gateway serves elsewhere (`Cluster.spec.clusterNetwork.apiServerPort`).
    pub port: u16,
    /// How the control plane is exposed.
    pub exposure: Exposure,
    /// `--kubelet-preferred-address-types`.
    pub kubelet_address_types: Vec<String>,
    /// Enabled admission plugins.
    pub admission_plugins: Vec<String>,
    /// Datastore schema (etcd key prefix without the leading `/`, or the database of a SQL
    /// DataStore), stable per namespace/name.
    pub datastore_schema: String,
    /// `spec.dataStoreUsername` (SQL DataStores only, [`against_datastore`]); the user is
    /// derived from namespace and name when `None`.
    pub datastore_username: Option<String>,
    /// `spec.kine`: kine's extra flags and resources (SQL DataStores only).
    pub kine: Option<kamaji_api::kcp::KineComponent>,
    /// DataStore name: `spec.dataStoreName` or the manager's default.
    pub datastore_name: String,
    /// Whether `spec.dataStoreName` was empty (the manager's default is used).
    pub default_datastore: bool,
    /// `spec.dataStoreOverrides` in order: resource (`group/resource`) and DataStore name.
    pub datastore_overrides: Vec<(String, String)>,
    /// The three components, in [`Component::ALL`] order.
    pub components: [ComponentSpec; 3],
    /// `spec.deployment`.
    pub pod: PodSettings,
    /// `spec.rollout.after`: pods created before it are replaced once it has passed.
    pub rollout_after: Option<k8s_openapi::jiff::Timestamp>,
    /// The service-account key rotation requested
    /// ([`kamaji_api::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION`]), if any.
    pub service_account_key_rotation: Option<String>,
    /// The requested certificate-authority rotation
    /// ([`kamaji_api::meta::CA_ROTATION_ANNOTATION`]), if any.
    pub ca_rotation: Option<String>,
    /// The requested rotation of the encryption key
    /// ([`kamaji_api::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION`]), if any.
    pub encryption_key_rotation: Option<String>,
    /// `spec.encryptionAtRest.resources` without `secrets` (always encrypted), in order.
    pub encrypted_resources: Vec<String>,
    /// The kubeadm artifacts' inputs, validated (the endpoint is set by the plan step).
    pub tenant: Tenant,
    /// The addons `spec.addons` declares (kube-proxy, CoreDNS); an absent one is not
    /// installed, and what kamaji-rs installed of it is removed.
    pub addons: Addons,
    /// `addons.konnectivity`: the server sidecar and the agents, when declared.
    pub konnectivity: Option<Konnectivity>,
}

impl ValidSpec {
    /// A component's customisation.
    #[must_use]
    pub fn component(&self, c: Component) -> &ComponentSpec {
        match c {
            Component::ApiServer => &self.components[0],
            Component::ControllerManager => &self.components[1],
            Component::Scheduler => &self.components[2],
        }
    }
}

/// The `SpecValid=False` condition for `errors`: every error, each naming its field.
#[must_use]
pub fn refusal(errors: &[SpecError]) -> Cond {
    let msg = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Cond::no(types::SPEC_VALID, reasons::INVALID_SPEC, msg)
}

/// Validates `kcp` against its `cluster` and the `infrastructure` cluster's endpoint (its kind
/// and `spec.controlPlaneEndpoint`, when set); `default_datastore` is the manager's
/// `--default-datastore`. The checks run first, collecting every problem; the values that need
/// none are then read as they are.
///
/// # Errors
/// Every problem found, each naming its field.
pub fn validate(
    kcp: &KamajiControlPlane,
    cluster: &ClusterView,
    infrastructure: Option<(&str, &(String, i32))>,
    default_datastore: &str,
) -> Result<ValidSpec, Vec<SpecError>> {
    let checked = check(kcp, cluster, infrastructure)?;
    Ok(valid_spec(kcp, cluster, default_datastore, checked))
}

/// What [`validate`]'s checks give, the rest of a [`ValidSpec`] being read as it is.
struct Checked {
    version: KubernetesVersion,
    network: TenantNetwork,
    port: u16,
    preset_endpoint: Option<PresetEndpoint>,
    exposure: Exposure,
    registry: String,
    kubelet_address_types: Vec<String>,
    datastore_overrides: Vec<(String, String)>,
    encrypted_resources: Vec<String>,
    tenant: Tenant,
    konnectivity: Option<Konnectivity>,
}

/// [`validate`]'s checks, one per block in field order (the helpers below hold the longer
/// ones): every problem found, or the checked values.
fn check(
    kcp: &KamajiControlPlane,
    cluster: &ClusterView,
    infrastructure: Option<(&str, &(String, i32))>,
) -> Result<Checked, Vec<SpecError>> {
    let mut errors = Vec::new();
    let fields = &kcp.spec.fields;
    let version = version(kcp, &mut errors);
    let network_spec = network_spec(kcp, cluster);
    let network = network(fields, &network_spec, &mut errors);
    let port = api_server_port(cluster, &mut errors);
    errors.extend(field_errors(kcp));
    let cluster_endpoint = cluster
        .control_plane_endpoint
        .as_ref()
        .and_then(|(h, p)| Some((h.clone(), u16::try_from(*p).ok().filter(|p| *p != 0)?)));
    let preset_endpoint =
        preset_endpoint(kcp, cluster_endpoint.as_ref(), infrastructure, &mut errors);
    let exposure = exposure(&fields.network.clone().unwrap_or_default());
    let registry = fields
        .container_registry
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| DEFAULT_REGISTRY.to_owned());
    let kubelet_address_types = kubelet_address_types(fields);
    let datastore_overrides = datastore_overrides(fields, &mut errors);
    let encrypted_resources = encrypted_resources(fields, &mut errors);
    let (Some(version), Some(network), Some(port)) = (version, network, port) else {
        return Err(errors);
    };
    errors.extend(serving_names(&exposure, preset_endpoint.as_ref(), &network));
    let konnectivity = konnectivity(fields, &exposure, port, version.minor, &mut errors);
    let artifacts = TenantInputs {
        version: &version,
        network: &network_spec,
        registry: &registry,
        exposure: &exposure,
        kubelet_address_types: &kubelet_address_types,
        port,
    };
    let tenant = tenant(kcp, cluster, &artifacts)
        .map_err(|e| errors.push(e))
        .ok();
    let (Some(tenant), true) = (tenant, errors.is_empty()) else {
        return Err(errors);
    };
    Ok(Checked {
        version,
        network,
        port,
        preset_endpoint,
        exposure,
        registry,
        kubelet_address_types,
        datastore_overrides,
        encrypted_resources,
        tenant,
        konnectivity,
    })
}

/// `Cluster.spec.clusterNetwork.apiServerPort`, when it is a TCP port (else an error).
fn api_server_port(cluster: &ClusterView, errors: &mut Vec<SpecError>) -> Option<u16> {
    let port = u16::try_from(cluster.api_server_port)
        .ok()
        .filter(|p| *p != 0);
    if port.is_none() {
        errors.push(SpecError::new(
            "Cluster.spec.clusterNetwork.apiServerPort",
            format!("{} is not a TCP port", cluster.api_server_port),
        ));
    }
    port
}

/// The [`ValidSpec`] of `kcp` and `cluster` with the values `checked`.
fn valid_spec(
    kcp: &KamajiControlPlane,
    cluster: &ClusterView,
    default_datastore: &str,
    checked: Checked,
) -> ValidSpec {
    let fields = &kcp.spec.fields;
    let Checked {
        version,
        network,
        port,
        preset_endpoint,
        exposure,
        registry,
        kubelet_address_types,
        datastore_overrides,
        encrypted_resources,
        tenant,
        konnectivity,
    } = checked;
    ValidSpec {
        namespace: kcp.metadata.namespace.clone().unwrap_or_default(),
        names: ObjectNames::new(
            &cluster.name,
            kcp.metadata.name.as_deref().unwrap_or_default(),
        ),
        cluster_name: cluster.name.clone(),
        preset_endpoint,
        version_tag: format!("v{}.{}.{}", version.major, version.minor, version.patch),
        version,
        replicas: kcp.spec.replicas.unwrap_or(DEFAULT_REPLICAS),
        registry,
        network,
        port,
        exposure,
        kubelet_address_types,
        admission_plugins: admission_plugins(fields),
        datastore_schema: datastore_schema(kcp),
        datastore_username: fields.data_store_username.clone().filter(|u| !u.is_empty()),
        kine: fields.kine.clone(),
        default_datastore: fields.data_store_name.as_deref().is_none_or(str::is_empty),
        datastore_name: datastore_name(kcp, default_datastore).to_owned(),
        datastore_overrides,
        components: Component::ALL.map(|c| component(fields, c)),
        pod: pod_settings(fields),
        rollout_after: kcp
            .spec
            .rollout
            .as_ref()
            .and_then(|r| r.after.as_ref())
            .map(|t| t.0),
        service_account_key_rotation: request(
            kcp,
            kamaji_api::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION,
        ),
        ca_rotation: request(kcp, kamaji_api::meta::CA_ROTATION_ANNOTATION),
        encryption_key_rotation: request(kcp, kamaji_api::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION),
        encrypted_resources,
        tenant,
        addons: declared_addons(fields.addons.as_ref()),
        konnectivity,
    }
}

/// `addons.konnectivity`, with defaults: images without a version take the
/// apiserver-network-proxy release known for the tenant's minor
/// ([`kamaji_bootstrap::konnectivity::default_version`]); the agents tolerate
/// `CriticalAddonsOnly` unless `agent.tolerations` is given. Refused (see
/// [`konnectivity_errors`]) where it cannot work as asked.
fn konnectivity(
    fields: &kamaji_api::KamajiControlPlaneFields,
    exposure: &Exposure,
    api_port: u16,
    minor: u32,
    errors: &mut Vec<SpecError>,
) -> Option<Konnectivity> {
    use kamaji_api::kcp::{
        DEFAULT_KONNECTIVITY_AGENT_IMAGE, DEFAULT_KONNECTIVITY_SERVER_IMAGE,
        DEFAULT_KONNECTIVITY_SERVER_PORT, KonnectivityAgentMode,
    };
    use kamaji_bootstrap::konnectivity as k;
    let spec = fields.addons.as_ref()?.konnectivity.as_ref()?;
    let server = spec.server.clone().unwrap_or_default();
    let agent = spec.agent.clone().unwrap_or_default();
    let port = server.port.unwrap_or(DEFAULT_KONNECTIVITY_SERVER_PORT);
    let before = errors.len();
    errors.extend(konnectivity_errors(fields, exposure, api_port, minor, port));
    let server_image = konnectivity_image(
        (server.image.as_ref(), DEFAULT_KONNECTIVITY_SERVER_IMAGE),
        server.version.as_ref(),
        minor,
        "spec.addons.konnectivity.server.version",
        errors,
    );
    let agent_image = konnectivity_image(
        (agent.image.as_ref(), DEFAULT_KONNECTIVITY_AGENT_IMAGE),
        agent.version.as_ref(),
        minor,
        "spec.addons.konnectivity.agent.version",
        errors,
    );
    if errors.len() > before {
        return None;
    }
    Some(k::Konnectivity {
        server: k::Server {
            image: server_image,
            port: u16::try_from(port).unwrap_or_default(),
            resources: server.resources.clone(),
            extra_args: server.extra_args.clone().unwrap_or_default(),
            security_context: server.security_context.clone(),
        },
        agent: k::Agent {
            image: agent_image,
            host_network: agent.host_network.unwrap_or(false),
            // Kamaji's default, also when `agent` is given without tolerations.
            tolerations: agent
                .tolerations
                .clone()
                .unwrap_or_else(kamaji_api::kcp::default_konnectivity_agent_tolerations),
            extra_args: agent.extra_args.clone().unwrap_or_default(),
            mode: match agent.mode.unwrap_or(KonnectivityAgentMode::DaemonSet) {
                KonnectivityAgentMode::DaemonSet => k::AgentMode::DaemonSet,
                KonnectivityAgentMode::Deployment => k::AgentMode::Deployment {
                    replicas: agent.replicas.unwrap_or(1),
                },
            },
        },
    })
}

/// A konnectivity image: `image` (the default when empty) at `version`, else at the
/// apiserver-network-proxy release known for the tenant's `minor`; a release older than the
/// first with the flags kamaji-rs runs it with is refused (`field`).
fn konnectivity_image(
    (image, default): (Option<&String>, &str),
    version: Option<&String>,
    minor: u32,
    field: &str,
    errors: &mut Vec<SpecError>,
) -> String {
    use kamaji_bootstrap::konnectivity as k;
    let tag = version
        .filter(|v| !v.is_empty())
        .cloned()
        .or_else(|| k::default_version(minor).map(str::to_owned))
        .unwrap_or_default();
    if k::is_too_old(&tag) {
        errors.push(SpecError::new(
            field,
            format!(
                "{tag} is older than v0.{}.0, the first apiserver-network-proxy release \
                     with the lease-counting flags kamaji-rs runs the server and agents with",
                k::MIN_RELEASE_MINOR
            ),
        ));
    }
    format!(
        "{}:{tag}",
        image
            .filter(|i| !i.is_empty())
            .map_or(default, String::as_str)
    )
}

/// Why `addons.konnectivity` cannot work as asked: a tenant older than the releases it runs;
/// an exposure the agents cannot dial the server port through (an Ingress or TLSRoute routes
/// only the API server's TLS; a NodePort Service would put the port on a node port the agents
/// are not told); a server `port` the pod or the Service already uses; an extra container or
/// volume under the names it adds to the pod.
fn konnectivity_errors(
    fields: &kamaji_api::KamajiControlPlaneFields,
    exposure: &Exposure,
    api_port: u16,
    minor: u32,
    port: i32,
) -> Vec<SpecError> {
    use kamaji_bootstrap::controlplane::{CONTROLLER_MANAGER_PORT, SCHEDULER_PORT};
    use kamaji_bootstrap::konnectivity as k;
    let mut errors = Vec::new();
    if k::default_version(minor).is_none() {
        errors.push(SpecError::new(
            "spec.addons.konnectivity",
            format!(
                "konnectivity needs spec.version v1.{} or newer (the apiserver-network-proxy \
                 releases kamaji-rs runs start with v0.{}.0)",
                k::MIN_RELEASE_MINOR,
                k::MIN_RELEASE_MINOR
            ),
        ));
    }
    errors.extend(konnectivity_exposure_error(exposure));
    let taken = |p: u16| {
        [
            api_port,
            k::ADMIN_PORT,
            k::HEALTH_PORT,
            CONTROLLER_MANAGER_PORT,
            SCHEDULER_PORT,
        ]
        .contains(&p)
            || exposure
                .additional_ports
                .iter()
                .any(|a| a.port == i32::from(p) || a.name.as_deref() == Some(k::SERVER_PORT_NAME))
    };
    if !u16::try_from(port).is_ok_and(|p| p != 0 && !taken(p)) {
        errors.push(SpecError::new(
            "spec.addons.konnectivity.server.port",
            format!(
                "{port} is taken: the control-plane pod listens on {api_port}, {}, {}, {} and \
                 {}, and network.additionalServicePorts may not use it (nor the port name {})",
                CONTROLLER_MANAGER_PORT,
                SCHEDULER_PORT,
                k::ADMIN_PORT,
                k::HEALTH_PORT,
                k::SERVER_PORT_NAME
            ),
        ));
    }
    errors.extend(konnectivity_name_errors(fields));
    errors
}

/// An exposure the konnectivity agents cannot dial the server port through: an Ingress or
/// TLSRoute routes only the API server's TLS; a NodePort Service would put the port on a node
/// port the agents are not told.
fn konnectivity_exposure_error(exposure: &Exposure) -> Option<SpecError> {
    let via = if exposure.ingress.is_some() {
        "spec.network.ingress"
    } else if exposure.gateway.is_some() {
        "spec.network.gateway"
    } else if exposure.service_type == kamaji_api::kcp::ServiceType::NodePort {
        "a NodePort Service (spec.network.serviceType)"
    } else {
        return None;
    };
    Some(SpecError::new(
        "spec.addons.konnectivity",
        format!(
            "konnectivity agents connect to the endpoint's host at the server port, which \
                 {via} does not serve: expose the control plane with a LoadBalancer Service (or \
                 a ClusterIP Service behind a load balancer of yours that forwards the server \
                 port too), or remove konnectivity"
        ),
    ))
}

/// An extra container or volume under the names konnectivity adds to the pod.
fn konnectivity_name_errors(fields: &kamaji_api::KamajiControlPlaneFields) -> Vec<SpecError> {
    use kamaji_bootstrap::konnectivity as k;
    let mut errors = Vec::new();
    let deployment = fields.deployment.as_ref();
    if deployment
        .and_then(|d| d.extra_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == k::SERVER_CONTAINER))
    {
        errors.push(SpecError::new(
            "spec.deployment.extraContainers",
            format!("{} is konnectivity's container", k::SERVER_CONTAINER),
        ));
    }
    if deployment
        .and_then(|d| d.extra_volumes.as_ref())
        .is_some_and(|v| {
            v.iter()
                .any(|v| v.name == k::CONFIG_VOLUME || v.name == k::UDS_VOLUME)
        })
    {
        errors.push(SpecError::new(
            "spec.deployment.extraVolumes",
            format!(
                "{} and {} are konnectivity's volumes",
                k::CONFIG_VOLUME,
                k::UDS_VOLUME
            ),
        ));
    }
    errors
}

/// `spec.version`: a version, in the supported range, without flags or plugins it removed.
fn version(kcp: &KamajiControlPlane, errors: &mut Vec<SpecError>) -> Option<KubernetesVersion> {
    let version = KubernetesVersion::parse(&kcp.spec.version)
        .map_err(|e| errors.push(SpecError::new("spec.version", e.to_string())))
        .ok()?;
    // Admission refuses these; objects stored before those rules existed are caught here.
    if !validation::is_supported_version(version.major, version.minor) {
        errors.push(SpecError::new(
            "spec.version",
            format!(
                "{} is not supported: kamaji-rs supports Kubernetes {}",
                kcp.spec.version,
                validation::supported_versions()
            ),
        ));
    }
    errors.extend(removed_in_target(kcp, &version));
    Some(version)
}

/// The tenant network, with errors naming where the user set the offending value.
fn network(
    fields: &kamaji_api::KamajiControlPlaneFields,
    spec: &NetworkSpec,
    errors: &mut Vec<SpecError>,
) -> Option<TenantNetwork> {
    // The CoreDNS addresses come from `addons.coreDNS`, else from `network`: name the one set.
    let dns_from_network = fields
        .addons
        .as_ref()
        .and_then(|a| a.core_dns.as_ref())
        .and_then(|c| c.dns_service_ips.as_ref())
        .is_none_or(Vec::is_empty);
    spec.validate()
        .map_err(|e| {
            let mut field = network_field(&e.field);
            if dns_from_network {
                field = field.replace(
                    "spec.addons.coreDNS.dnsServiceIPs",
                    "spec.network.dnsServiceIPs",
                );
            }
            errors.push(SpecError::new(field, e.reason.clone()));
        })
        .ok()
}

/// The endpoint set before kamaji-rs chooses one: the Cluster's, else the control plane's own,
/// else the infrastructure cluster's. A control-plane endpoint that differs from the Cluster's
/// or the infrastructure cluster's is refused naming both (Cluster API keeps the Cluster's,
/// and copies the infrastructure cluster's there first, so the control plane would serve an
/// endpoint nobody is given); it is never overwritten.
fn preset_endpoint(
    kcp: &KamajiControlPlane,
    cluster: Option<&(String, u16)>,
    infrastructure: Option<(&str, &(String, i32))>,
    errors: &mut Vec<SpecError>,
) -> Option<PresetEndpoint> {
    let own = kcp
        .spec
        .control_plane_endpoint
        .as_ref()
        .filter(|e| e.is_valid())
        .and_then(|e| Some((e.host.clone()?, u16::try_from(e.port?).ok()?)));
    let infrastructure = infrastructure.and_then(|(kind, (h, p))| {
        Some((
            kind,
            (h.clone(), u16::try_from(*p).ok().filter(|p| *p != 0)?),
        ))
    });
    let at = |(host, port): &(String, u16), source| PresetEndpoint {
        host: host.clone(),
        port: *port,
        source,
    };
    let differs = |other: &str, theirs: &(String, u16), ours: &(String, u16)| {
        SpecError::new(
            "spec.controlPlaneEndpoint",
            format!(
                "{}:{} differs from {other} {}:{}, which Cluster API gives the Cluster's users; \
                 remove spec.controlPlaneEndpoint or set it to the same host and port",
                ours.0, ours.1, theirs.0, theirs.1
            ),
        )
    };
    if let (Some(own), Some(cluster)) = (own.as_ref(), cluster) {
        if own != cluster {
            errors.push(differs("Cluster.spec.controlPlaneEndpoint", cluster, own));
        }
    } else if let (Some(own), Some((kind, theirs))) = (own.as_ref(), infrastructure.as_ref())
        && own != theirs
    {
        errors.push(differs(
            &format!("{kind}.spec.controlPlaneEndpoint"),
            theirs,
            own,
        ));
    }
    if let Some(c) = cluster {
        return Some(at(c, EndpointSource::Cluster));
    }
    if let Some(own) = &own {
        return Some(at(own, EndpointSource::ControlPlane));
    }
    infrastructure.map(|(kind, e)| at(&e, EndpointSource::Infrastructure(kind.to_owned())))
}

/// The serving certificate's names: `certSANs`, the ingress or gateway host and a preset
/// endpoint must each be an IP address or a DNS name (the Service names and addresses are
/// added when the certificate is issued).
fn serving_names(
    exposure: &Exposure,
    preset: Option<&PresetEndpoint>,
    network: &TenantNetwork,
) -> Vec<SpecError> {
    let endpoint_host = preset.map_or("localhost", |p| p.host.as_str());
    let names = ApiServerNames {
        endpoint_host: endpoint_host.to_owned(),
        service: None,
        cert_sans: exposure.cert_sans.clone(),
        external_hosts: exposure.external.iter().map(|(h, _)| h.clone()).collect(),
    };
    match names.san_lists(network) {
        Ok(_) => Vec::new(),
        Err(e) => vec![SpecError::new(
            match e.field.as_str() {
                "controlPlaneEndpoint.host" => format!(
                    "{}.host",
                    preset.map_or_else(
                        || "spec.controlPlaneEndpoint".to_owned(),
                        |p| p.source.field()
                    )
                ),
                f => format!("spec.{f}"),
            },
            e.reason,
        )],
    }
}

/// What the kubeadm artifacts' inputs share with the rest of the spec ([`tenant`]).
#[derive(Clone, Copy)]
struct TenantInputs<'a> {
    version: &'a KubernetesVersion,
    network: &'a NetworkSpec,
    registry: &'a str,
    exposure: &'a Exposure,
    kubelet_address_types: &'a [String],
    port: u16,
}

/// The kubeadm artifacts' inputs, validated now with a placeholder endpoint (the plan step sets
/// the real one): addon images, kubelet settings and configuration patches, registry.
fn tenant(
    kcp: &KamajiControlPlane,
    cluster: &ClusterView,
    inputs: &TenantInputs<'_>,
) -> Result<Tenant, SpecError> {
    let TenantInputs {
        version,
        network,
        registry,
        exposure,
        kubelet_address_types,
        port,
    } = *inputs;
    let fields = &kcp.spec.fields;
    let addons = fields.addons.clone().unwrap_or_default();
    let kubelet = fields.kubelet.clone().unwrap_or_default();
    let patches = json_patches(
        kubelet.configuration_json_patches.clone(),
        "spec.kubelet.configurationJSONPatches",
    )?;
    let spec = TenantSpec {
        cluster_name: cluster.name.clone(),
        version: format!("v{}.{}.{}", version.major, version.minor, version.patch),
        endpoint_host: "localhost".into(),
        endpoint_port: port,
        network: network.clone(),
        image_registry: registry.to_owned(),
        cert_sans: exposure.cert_sans.clone(),
        etcd_endpoints: Vec::new(),
        kubelet: KubeletSpec {
            cgroup_driver: kubelet.cgroupfs,
            configuration_json_patches: patches,
            preferred_address_types: kubelet_address_types.to_vec(),
        },
        coredns: AddonImage {
            repository: addons
                .core_dns
                .as_ref()
                .and_then(|c| c.image_repository.clone()),
            tag: addons.core_dns.as_ref().and_then(|c| c.image_tag.clone()),
        },
        kube_proxy: AddonImage {
            repository: addons
                .kube_proxy
                .as_ref()
                .and_then(|c| c.image_repository.clone()),
            tag: addons.kube_proxy.as_ref().and_then(|c| c.image_tag.clone()),
        },
        kube_proxy_patches: kube_proxy_patches(addons.kube_proxy.as_ref())?,
    };
    spec.validate()
        .map_err(|e| SpecError::new(format!("spec.{}", e.field), e.reason))
}

/// `spec.encryptionAtRest.resources` without `secrets`, each entry checked as at admission
/// ([`kamaji_api::validation::encrypted_resource_errors`]).
fn encrypted_resources(
    fields: &kamaji_api::KamajiControlPlaneFields,
    errors: &mut Vec<SpecError>,
) -> Vec<String> {
    let resources = fields
        .encryption_at_rest
        .as_ref()
        .and_then(|e| e.resources.clone())
        .unwrap_or_default();
    for (i, reason) in kamaji_api::validation::encrypted_resource_errors(&resources) {
        errors.push(SpecError::new(
            format!("spec.encryptionAtRest.resources[{i}]"),
            reason,
        ));
    }
    resources
        .into_iter()
        .filter(|r| r != kamaji_bootstrap::encryption::SECRETS)
        .collect()
}

/// Checks of single fields the schema cannot make: the advertise address, probe thresholds,
/// and the fields kamaji-rs does not support (yet).
fn field_errors(kcp: &KamajiControlPlane) -> Vec<SpecError> {
    let fields = &kcp.spec.fields;
    let mut errors = Vec::new();
    if let Some(a) = fields
        .network
        .as_ref()
        .and_then(|n| n.advertise_address.as_deref())
        .filter(|a| a.parse::<std::net::IpAddr>().is_err())
    {
        errors.push(SpecError::new(
            "spec.network.advertiseAddress",
            format!("{a:?} is not an IP address"),
        ));
    }
    if fields
        .deployment
        .as_ref()
        .is_some_and(|d| d.external_cluster_reference.is_some())
    {
        errors.push(SpecError::new(
            "spec.deployment.externalClusterReference",
            "running the control plane in another cluster is not supported by kamaji-rs",
        ));
    }
    errors.extend(probe_errors(fields));
    errors.extend(reserved_volumes(fields));
    errors
}

/// The volume of the service-account rotation Secret, mounted into kube-apiserver while a
/// rotation runs (only its public key, `plan::sa_rotation::VERIFY_KEY`).
pub const SERVICE_ACCOUNT_ROTATION_VOLUME: &str = "sa-rotation";

/// The volume of the encryption Secret (`<cluster>-encryption.config`), mounted into
/// kube-apiserver.
pub const ENCRYPTION_VOLUME: &str = "encryption";

/// The volume of the CA rotation Secret, mounted into kube-apiserver and
/// kube-controller-manager while a rotation runs (only its trust bundles,
/// `plan::ca_rotation::CA_BUNDLE` and `FRONT_PROXY_CA_BUNDLE`).
pub const CA_ROTATION_VOLUME: &str = "ca-rotation";

/// The volume of `<cluster>-kine.config`, mounted into the kine container.
pub const KINE_VOLUME: &str = "kine";

/// `spec.deployment.extraVolumes` must not reuse the name of a volume kamaji-rs mounts (the
/// key material's, the service-account rotation's): the Deployment would be refused with
/// duplicate volume names.
fn reserved_volumes(fields: &kamaji_api::KamajiControlPlaneFields) -> Vec<SpecError> {
    use kamaji_bootstrap::controlplane::PkiVolume;
    let reserved: Vec<&str> = PkiVolume::ALL
        .iter()
        .map(|v| v.volume_name())
        .chain([
            SERVICE_ACCOUNT_ROTATION_VOLUME,
            CA_ROTATION_VOLUME,
            ENCRYPTION_VOLUME,
            KINE_VOLUME,
        ])
        .collect();
    fields
        .deployment
        .as_ref()
        .and_then(|d| d.extra_volumes.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, v)| reserved.contains(&v.name.as_str()))
        .map(|(i, v)| {
            SpecError::new(
                format!("spec.deployment.extraVolumes[{i}].name"),
                format!(
                    "{} is a volume kamaji-rs mounts for the key material (reserved: {})",
                    v.name,
                    reserved.join(", ")
                ),
            )
        })
        .collect()
}

/// Database and user names of the servers themselves and of kamaji-rs's claims (PostgreSQL,
/// MySQL/MariaDB): a tenant never gets them.
pub const RESERVED_SQL_NAMES: &[&str] = &[
    "postgres",
    "template0",
    "template1",
    "mysql",
    "sys",
    "information_schema",
    "performance_schema",
    "root",
    "mariadb_sys",
    "kamaji_rs",
];

/// kine flags kamaji-rs sets and `spec.kine.extraArgs` may not replace: where kine listens
/// (the pod's loopback; elsewhere it would serve the tenant's data without authentication) and
/// what it connects to.
pub const RESERVED_KINE_FLAGS: &[&str] = &["listen-address", "endpoint"];

/// What the control plane asks of its DataStore that the DataStore's driver cannot give,
/// known once the DataStore is read: `spec.dataStoreUsername` and `spec.kine` on etcd (the
/// tenant's etcd user is its client certificate's common name; there is no kine), and
/// `spec.dataStoreOverrides` on PostgreSQL or MySQL (one kine per pod serves one database).
/// Reported as `SpecValid=False`, each error naming its field.
#[must_use]
pub fn against_datastore(spec: &ValidSpec, ds: &crate::datastore::Resolved) -> Vec<SpecError> {
    let mut errors = driver_field_errors(spec, ds);
    if let Some(access) = &ds.sql {
        errors.extend(reserved_sql_errors(spec, access));
    }
    if ds.sql.is_some() && !spec.datastore_overrides.is_empty() {
        errors.push(SpecError::new(
            "spec.dataStoreOverrides",
            format!(
                "overrides are for etcd DataStores; DataStore {} is {}, whose kine serves \
                 every resource from the tenant's one database: remove them",
                ds.name,
                ds.driver.as_str()
            ),
        ));
    }
    errors
}

/// The fields the DataStore's driver does not take: `spec.dataStoreUsername` and `spec.kine`
/// on etcd, a PostgreSQL role name PostgreSQL reserves.
fn driver_field_errors(spec: &ValidSpec, ds: &crate::datastore::Resolved) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let driver = ds.driver.as_str();
    if ds.sql.is_none() {
        if spec.datastore_username.is_some() {
            errors.push(SpecError::new(
                "spec.dataStoreUsername",
                format!(
                    "a datastore user name is for PostgreSQL and MySQL DataStores; DataStore {} \
                     is {driver}, where the tenant's etcd user is its client certificate's \
                     common name (status.dataStore.username): remove it",
                    ds.name
                ),
            ));
        }
        if spec.kine.is_some() {
            errors.push(SpecError::new(
                "spec.kine",
                format!(
                    "kine runs only with a PostgreSQL or MySQL DataStore; DataStore {} is \
                     {driver}: remove it",
                    ds.name
                ),
            ));
        }
    } else if let Some(user) = spec
        .datastore_username
        .as_deref()
        .filter(|u| u.starts_with("pg_"))
        .filter(|_| ds.driver == kamaji_api::datastore::Driver::PostgreSQL)
    {
        errors.push(SpecError::new(
            "spec.dataStoreUsername",
            format!(
                "{user}: PostgreSQL reserves role names beginning with pg_ (DataStore {} is \
                 PostgreSQL): choose another name",
                ds.name
            ),
        ));
    }
    errors
}

/// Names a PostgreSQL or MySQL DataStore (`access`) reserves: the server's own and its
/// administrator's (schema, user), and the kine flags kamaji-rs sets.
fn reserved_sql_errors(
    spec: &ValidSpec,
    access: &crate::datastore::sql::SqlAccess,
) -> Vec<SpecError> {
    let mut errors = Vec::new();
    for (field, name) in [
        ("spec.dataStoreSchema", Some(spec.datastore_schema.as_str())),
        ("spec.dataStoreUsername", spec.datastore_username.as_deref()),
    ] {
        if let Some(name) =
            name.filter(|n| RESERVED_SQL_NAMES.contains(n) || *n == access.admin.username.as_str())
        {
            errors.push(SpecError::new(
                field,
                format!(
                    "{name} is a name of the server itself or of the DataStore's \
                     administrator (reserved: {}, and the administrator): choose another",
                    RESERVED_SQL_NAMES.join(", ")
                ),
            ));
        }
    }
    for (i, arg) in spec
        .kine
        .as_ref()
        .and_then(|k| k.extra_args.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = kamaji_api::validation::FlagArg::parse(arg).name;
        if RESERVED_KINE_FLAGS.contains(&name) {
            errors.push(SpecError::new(
                format!("spec.kine.extraArgs[{i}]"),
                format!(
                    "--{name} is kamaji-rs's: kine listens on the pod's loopback only and \
                     reaches the tenant's own database"
                ),
            ));
        }
    }
    errors
}

/// The addons `addons` declares: each one present, even empty (`coreDNS: {}`), is installed.
fn declared_addons(addons: Option<&kamaji_api::kcp::AddonsSpec>) -> Addons {
    Addons {
        kube_proxy: addons.is_some_and(|a| a.kube_proxy.is_some()),
        coredns: addons.is_some_and(|a| a.core_dns.is_some()),
    }
}

/// The patches of the published KubeProxyConfiguration: `addons.kubeProxy.mode` as a
/// `replace /mode`, then `addons.kubeProxy.configurationJSONPatches`.
fn kube_proxy_patches(
    kube_proxy: Option<&kamaji_api::kcp::KubeProxyAddonSpec>,
) -> Result<json_patch::Patch, SpecError> {
    let mut patches = json_patches(
        kube_proxy.and_then(|k| k.configuration_json_patches.clone()),
        "spec.addons.kubeProxy.configurationJSONPatches",
    )?;
    if let Some(mode) = kube_proxy.and_then(|k| k.mode) {
        let replace: json_patch::PatchOperation = serde_json::from_value(
            serde_json::json!({"op": "replace", "path": "/mode", "value": mode.as_str()}),
        )
        .map_err(|e| SpecError::new("spec.addons.kubeProxy.mode", e.to_string()))?;
        patches.0.insert(0, replace);
    }
    Ok(patches)
}

/// The API's JSON patches as an RFC 6902 patch; an error names `field`.
fn json_patches(
    patches: Option<Vec<kamaji_api::kcp::JsonPatch>>,
    field: &str,
) -> Result<json_patch::Patch, SpecError> {
    serde_json::to_value(patches.unwrap_or_default())
        .and_then(serde_json::from_value)
        .map_err(|e| SpecError::new(field, format!("not an RFC 6902 JSON patch: {e}")))
}

/// The DataStore a control plane uses: `spec.dataStoreName`, else the manager's default.
#[must_use]
pub fn datastore_name<'a>(kcp: &'a KamajiControlPlane, default: &'a str) -> &'a str {
    kcp.spec
        .fields
        .data_store_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(default)
}

/// `spec.dataStoreOverrides` as (resource, DataStore) pairs: each resource one
/// `group/resource` of `--etcd-servers-overrides`, at most once (admission checks the same;
/// this catches objects stored before those rules). Whether each DataStore exists and shares
/// the control plane's CA is the observe step's (`DataStoreReady`).
fn datastore_overrides(
    fields: &kamaji_api::KamajiControlPlaneFields,
    errors: &mut Vec<SpecError>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, o) in fields.data_store_overrides.iter().flatten().enumerate() {
        let field = format!("spec.dataStoreOverrides[{i}]");
        if !kamaji_api::validation::is_override_resource(&o.resource) {
            errors.push(SpecError::new(
                format!("{field}.resource"),
                format!(
                    "{:?} is not one group/resource as kube-apiserver's \
                     --etcd-servers-overrides takes it (/events for core events, \
                     apps/deployments)",
                    o.resource
                ),
            ));
        } else if out.iter().any(|(r, _)| *r == o.resource) {
            errors.push(SpecError::new(
                format!("{field}.resource"),
                format!("{} is overridden more than once", o.resource),
            ));
        }
        if o.data_store.is_empty() {
            errors.push(SpecError::new(
                format!("{field}.dataStore"),
                "names no DataStore",
            ));
        }
        out.push((o.resource.clone(), o.data_store.clone()));
    }
    out
}

/// The value of the request annotation `key` (a rotation), when set and not empty.
fn request(kcp: &KamajiControlPlane, key: &str) -> Option<String> {
    kcp.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

/// Every DataStore a control plane keeps keys in: [`datastore_name`], then the DataStores of
/// `spec.dataStoreOverrides` not named before (the watch of DataStores and the deletion of the
/// tenant's keys use it; not validated).
#[must_use]
pub fn datastore_names<'a>(kcp: &'a KamajiControlPlane, default: &'a str) -> Vec<&'a str> {
    let mut names = vec![datastore_name(kcp, default)];
    for o in kcp.spec.fields.data_store_overrides.iter().flatten() {
        if !o.data_store.is_empty() && !names.contains(&o.data_store.as_str()) {
            names.push(&o.data_store);
        }
    }
    names
}

/// The control plane's datastore schema (etcd key prefix without the leading `/`):
/// `spec.dataStoreSchema`, else derived from namespace and name, stable across provider
/// upgrades and `clusterctl move` (kamaji-api's naming).
#[must_use]
pub fn datastore_schema(kcp: &KamajiControlPlane) -> String {
    kcp.spec
        .fields
        .data_store_schema
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            names::datastore_schema(
                kcp.metadata.namespace.as_deref().unwrap_or_default(),
                kcp.metadata.name.as_deref().unwrap_or_default(),
            )
        })
}

/// Flags and admission plugins that the target version no longer has: the component would exit
/// at start, so they are refused before any pod rolls.
fn removed_in_target(kcp: &KamajiControlPlane, v: &KubernetesVersion) -> Vec<SpecError> {
    let mut errors = Vec::new();
    let fields = &kcp.spec.fields;
    for c in Component::ALL {
        let extra = component_section(fields, c)
            .and_then(|s| s.extra_args.as_deref())
            .unwrap_or_default();
        if let Some((flag, removed)) = removed_flag(c, extra, v.minor) {
            errors.push(SpecError::new(
                c.spec_field(),
                validation::removed_flag_message(c, &flag, removed, &kcp.spec.version),
            ));
        }
    }
    for plugin in fields.admission_controllers.iter().flatten() {
        if let Some(removed) = plugin.removed_in_minor()
            && u64::from(v.minor) >= removed
        {
            errors.push(SpecError::new(
                "spec.admissionControllers",
                validation::removed_admission_plugin_message(
                    plugin.as_str(),
                    removed,
                    &kcp.spec.version,
                ),
            ));
        }
    }
    errors
}

/// `--enable-admission-plugins`: `spec.admissionControllers`, else [`DEFAULT_ADMISSION_PLUGINS`].
fn admission_plugins(fields: &kamaji_api::KamajiControlPlaneFields) -> Vec<String> {
    match fields.admission_controllers.as_deref() {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|p: &AdmissionController| p.as_str().to_owned())
            .collect(),
        _ => DEFAULT_ADMISSION_PLUGINS
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    }
}

/// `--kubelet-preferred-address-types`: `spec.kubelet.preferredAddressTypes`, else the
/// schema default `InternalIP,ExternalIP,Hostname`.
fn kubelet_address_types(fields: &kamaji_api::KamajiControlPlaneFields) -> Vec<String> {
    fields
        .kubelet
        .as_ref()
        .and_then(|k| k.preferred_address_types.clone())
        .unwrap_or_else(|| {
            vec![
                KubeletPreferredAddressType::InternalIP,
                KubeletPreferredAddressType::ExternalIP,
                KubeletPreferredAddressType::Hostname,
            ]
        })
        .iter()
        .map(|t| {
            serde_json::to_value(t)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        })
        .collect()
}

/// The tenant network inputs: ranges and domain from the Cluster (defaults applied, case B23),
/// CoreDNS addresses from `spec.addons.coreDNS.dnsServiceIPs`, else
/// `spec.network.dnsServiceIPs`.
fn network_spec(kcp: &KamajiControlPlane, cluster: &ClusterView) -> NetworkSpec {
    let fields = &kcp.spec.fields;
    let network_cfg = fields.network.clone().unwrap_or_default();
    let dns_service_ips = fields
        .addons
        .as_ref()
        .and_then(|a| a.core_dns.as_ref())
        .and_then(|c| c.dns_service_ips.clone())
        .filter(|l| !l.is_empty())
        .or_else(|| network_cfg.dns_service_ips.clone())
        .unwrap_or_default();
    NetworkSpec {
        service_cidrs: cluster.service_cidrs.clone(),
        pod_cidrs: cluster.pod_cidrs.clone(),
        dns_domain: cluster.service_domain.clone(),
        dns_service_ips,
    }
}

/// `spec.network` as the Service and the endpoint use it.
fn exposure(net: &kamaji_api::kcp::NetworkComponent) -> Exposure {
    // The ingress or gateway host and port (443 unless the gateway names one) comes before any
    // Service address.
    let external: Option<(String, u16)> = net
        .ingress
        .as_ref()
        .map(|i| (i.hostname.clone(), 443))
        .or_else(|| {
            net.gateway.as_ref().map(|g| {
                (
                    g.hostname.clone(),
                    g.port.and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
                )
            })
        });
    let advertise_address = net
        .advertise_address
        .as_deref()
        .and_then(|a| a.parse::<std::net::IpAddr>().ok());
    let cert_sans = net
        .cert_sans
        .iter()
        .flatten()
        .chain(external.iter().map(|(host, _)| host))
        .cloned()
        .chain(advertise_address.map(|a| a.to_string()))
        .collect();
    let service_type = net.service_type.unwrap_or(ServiceType::LoadBalancer);
    let lb = service_type == ServiceType::LoadBalancer;
    let lb_config = net.load_balancer_config.clone().unwrap_or_default();
    Exposure {
        advertise_address,
        ingress: net.ingress.clone(),
        gateway: net.gateway.clone(),
        service_type,
        service_address: net.service_address.clone().filter(|a| !a.is_empty()),
        external,
        cert_sans,
        service_labels: net.service_labels.clone().unwrap_or_default(),
        service_annotations: net.service_annotations.clone(),
        additional_ports: net
            .additional_service_ports
            .iter()
            .flatten()
            .map(|p| ServicePort {
                name: Some(p.name.clone()),
                port: p.port,
                target_port: Some(p.target_port.clone()),
                protocol: Some(
                    p.protocol
                        .and_then(|x| serde_json::to_value(x).ok())
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "TCP".into()),
                ),
                app_protocol: p.app_protocol.clone(),
                ..ServicePort::default()
            })
            .collect(),
        load_balancer_source_ranges: lb_config.load_balancer_source_ranges.filter(|_| lb),
        load_balancer_class: lb_config.load_balancer_class.filter(|_| lb),
        allocate_load_balancer_node_ports: net.allocate_load_balancer_node_ports.filter(|_| lb),
    }
}

fn component_section(
    fields: &kamaji_api::KamajiControlPlaneFields,
    c: Component,
) -> Option<&ControlPlaneComponent> {
    match c {
        Component::ApiServer => fields.api_server.as_ref(),
        Component::ControllerManager => fields.controller_manager.as_ref(),
        Component::Scheduler => fields.scheduler.as_ref(),
    }
}

/// kubeadm's static-pod probe timings, with a startup probe that lets the first start take up
/// to 5 minutes.
fn default_probe(kind: ProbeKind) -> ProbeSpec {
    match kind {
        ProbeKind::Liveness => ProbeSpec {
            initial_delay_seconds: Some(10),
            timeout_seconds: Some(15),
            period_seconds: Some(10),
            success_threshold: Some(1),
            failure_threshold: Some(8),
        },
        ProbeKind::Readiness => ProbeSpec {
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(15),
            period_seconds: Some(1),
            success_threshold: Some(1),
            failure_threshold: Some(3),
        },
        ProbeKind::Startup => ProbeSpec {
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(15),
            period_seconds: Some(2),
            success_threshold: Some(1),
            failure_threshold: Some(150),
        },
    }
}

#[derive(Clone, Copy)]
enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

/// Liveness and startup probes count one success (corev1 `Probe`: `successThreshold` must be
/// 1); another value would only be refused by the API server when the Deployment is written.
fn probe_errors(fields: &kamaji_api::KamajiControlPlaneFields) -> Vec<SpecError> {
    let sections = [
        (
            "apiServer",
            fields.api_server.as_ref().and_then(|c| c.probes.as_ref()),
        ),
        (
            "controllerManager",
            fields
                .controller_manager
                .as_ref()
                .and_then(|c| c.probes.as_ref()),
        ),
        (
            "scheduler",
            fields.scheduler.as_ref().and_then(|c| c.probes.as_ref()),
        ),
        (
            "deployment",
            fields.deployment.as_ref().and_then(|d| d.probes.as_ref()),
        ),
    ];
    let mut errors = Vec::new();
    for (section, set) in sections {
        for (kind, name) in [
            (ProbeKind::Liveness, "liveness"),
            (ProbeKind::Startup, "startup"),
        ] {
            if let Some(n) = pick(kind, set)
                .and_then(|p| p.success_threshold)
                .filter(|n| *n != 1)
            {
                errors.push(SpecError::new(
                    format!("spec.{section}.probes.{name}.successThreshold"),
                    format!("must be 1 for a {name} probe, not {n}"),
                ));
            }
        }
    }
    errors
}

fn pick(kind: ProbeKind, set: Option<&ProbeSet>) -> Option<&ProbeSpec> {
    let set = set?;
    match kind {
        ProbeKind::Liveness => set.liveness.as_ref(),
        ProbeKind::Readiness => set.readiness.as_ref(),
        ProbeKind::Startup => set.startup.as_ref(),
    }
}

/// One probe: each timing from the component's `probes`, else `deployment.probes`, else the
/// default (each field on its own).
fn probe(kind: ProbeKind, own: Option<&ProbeSet>, global: Option<&ProbeSet>) -> ProbeSpec {
    let (own, global, default) = (pick(kind, own), pick(kind, global), default_probe(kind));
    let field = |f: fn(&ProbeSpec) -> Option<i32>| {
        own.and_then(f)
            .or_else(|| global.and_then(f))
            .or_else(|| f(&default))
    };
    ProbeSpec {
        initial_delay_seconds: field(|p| p.initial_delay_seconds),
        timeout_seconds: field(|p| p.timeout_seconds),
        period_seconds: field(|p| p.period_seconds),
        success_threshold: field(|p| p.success_threshold),
        failure_threshold: field(|p| p.failure_threshold),
    }
}

fn component(fields: &kamaji_api::KamajiControlPlaneFields, c: Component) -> ComponentSpec {
    let section = component_section(fields, c);
    let own = section.and_then(|s| s.probes.as_ref());
    let global = fields.deployment.as_ref().and_then(|d| d.probes.as_ref());
    ComponentSpec {
        extra_args: section
            .and_then(|s| s.extra_args.clone())
            .unwrap_or_default(),
        image_name: section
            .and_then(|s| s.container_image_name.clone())
            .unwrap_or_else(|| c.name().to_owned()),
        resources: section.and_then(|s| s.resources.clone()),
        extra_volume_mounts: section
            .and_then(|s| s.extra_volume_mounts.clone())
            .unwrap_or_default(),
        probes: Probes {
            liveness: probe(ProbeKind::Liveness, own, global),
            readiness: probe(ProbeKind::Readiness, own, global),
            startup: probe(ProbeKind::Startup, own, global),
        },
    }
}

/// The default rollout: never fewer ready API servers than desired (`maxUnavailable: 0`), one
/// extra pod at a time (case B14).
#[must_use]
pub fn default_strategy() -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".into()),
        rolling_update: Some(RollingUpdateDeployment {
            max_unavailable: Some(IntOrString::Int(0)),
            max_surge: Some(IntOrString::Int(1)),
        }),
    }
}

fn pod_settings(fields: &kamaji_api::KamajiControlPlaneFields) -> PodSettings {
    let d = fields.deployment.clone().unwrap_or_default();
    let meta = d.additional_metadata.unwrap_or_default();
    let pod_meta = d.pod_additional_metadata.unwrap_or_default();
    PodSettings {
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        pod_labels: pod_meta.labels.unwrap_or_default(),
        pod_annotations: pod_meta.annotations.unwrap_or_default(),
        strategy: d.strategy.unwrap_or_else(default_strategy),
        node_selector: d.node_selector,
        runtime_class_name: d.runtime_class_name,
        service_account_name: d.service_account_name,
        affinity: d.affinity,
        tolerations: d.tolerations,
        topology_spread_constraints: d.topology_spread_constraints,
        extra_init_containers: d.extra_init_containers.unwrap_or_default(),
        extra_containers: d.extra_containers.unwrap_or_default(),
        extra_volumes: d.extra_volumes.unwrap_or_default(),
    }
}

/// Maps the bootstrap crate's network field names to where the user sets them.
fn network_field(field: &str) -> String {
    if field.starts_with("clusterNetwork.") {
        format!("Cluster.spec.{field}")
    } else if field.starts_with("addons.") {
        format!("spec.{field}")
    } else {
        field.to_owned()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn cluster() -> ClusterView {
        ClusterView {
            name: "demo".into(),
            namespace: "tenant-a".into(),
            api_server_port: 6443,
            service_cidrs: vec!["10.96.0.0/12".into()],
            pod_cidrs: vec!["10.244.0.0/16".into()],
            service_domain: "cluster.local".into(),
            ..ClusterView::default()
        }
    }

    /// F0 (shared/cases/README.md) at the tools' version, with `patch` merged into its spec.
    pub(crate) fn fixture(patch: serde_json::Value) -> KamajiControlPlane {
        let mut spec = serde_json::json!({
            "version": "v1.36.3", "replicas": 2, "dataStoreName": "default",
            "network": {"serviceType": "LoadBalancer"},
        });
        merge(&mut spec, patch);
        serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha2",
            "kind": "KamajiControlPlane",
            "metadata": {"name": "demo", "namespace": "tenant-a", "uid": "f0-uid"},
            "spec": spec,
        }))
        .unwrap()
    }

    /// `patch` merged into `into` (objects key by key, anything else replaced).
    pub(crate) fn merge(into: &mut serde_json::Value, patch: serde_json::Value) {
        match (into, patch) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    /// The valid spec of `kcp` against F0's Cluster.
    pub(crate) fn valid(kcp: &KamajiControlPlane) -> ValidSpec {
        validate(kcp, &cluster(), None, "default").unwrap()
    }

    fn errors(patch: serde_json::Value) -> Vec<SpecError> {
        validate(&fixture(patch), &cluster(), None, "default")
            .err()
            .unwrap_or_default()
    }

    /// A table of F0 variants and the field each error must name (the message is checked
    /// where it is part of the contract); every variant that is valid must pass.
    /// F0 variants refused, each with the field its error names and a part of its message.
    #[allow(clippy::too_many_lines)] // one row per refusal
    fn refused_variants() -> Vec<(serde_json::Value, &'static str, &'static str)> {
        vec![
            (
                serde_json::json!({"version": "v1.99.0"}),
                "spec.version",
                "v1.23.0 to v1.36.x",
            ),
            (
                serde_json::json!({"version": "1.22.17"}),
                "spec.version",
                "not supported",
            ),
            (
                serde_json::json!({"version": "latest"}),
                "spec.version",
                "not a version",
            ),
            (
                serde_json::json!({"apiServer": {"extraArgs": ["--insecure-port=0"]}}),
                "spec.apiServer.extraArgs",
                "--insecure-port was removed from kube-apiserver in v1.24; version v1.36.3 would not start with it",
            ),
            (
                serde_json::json!({"controllerManager": {"extraArgs": ["--pod-eviction-timeout=1m"]}}),
                "spec.controllerManager.extraArgs",
                "removed from kube-controller-manager in v1.27",
            ),
            (
                serde_json::json!({"admissionControllers": ["PodSecurityPolicy"]}),
                "spec.admissionControllers",
                "admission plugin PodSecurityPolicy was removed in v1.25; version v1.36.3 would not start with it",
            ),
            (
                serde_json::json!({"network": {"dnsServiceIPs": ["10.200.0.10"]}}),
                "spec.network.dnsServiceIPs",
                "",
            ),
            (
                serde_json::json!({"addons": {"coreDNS": {"imageTag": "v1/2"}}}),
                "spec.addons.coreDNS.imageTag",
                "not an image tag",
            ),
            (
                serde_json::json!({"scheduler": {"probes": {"startup": {"successThreshold": 2}}}}),
                "spec.scheduler.probes.startup.successThreshold",
                "must be 1",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {}},
                    "network": {"ingress": {"hostname": "k.example.com"}}}),
                "spec.addons.konnectivity",
                "which spec.network.ingress does not serve",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {"server": {"port": 6443}}}}),
                "spec.addons.konnectivity.server.port",
                "6443 is taken",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {"server": {"port": 8134}}}}),
                "spec.addons.konnectivity.server.port",
                "8134 is taken",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {"server": {"port": 10257}}}}),
                "spec.addons.konnectivity.server.port",
                "10257 is taken",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {}},
                    "network": {"serviceType": "NodePort", "serviceAddress": "10.0.0.9"}}),
                "spec.addons.konnectivity",
                "which a NodePort Service (spec.network.serviceType) does not serve",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {}}, "version": "v1.32.4"}),
                "spec.addons.konnectivity",
                "needs spec.version v1.33 or newer",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {"agent": {"version": "v0.32.1"}}}}),
                "spec.addons.konnectivity.agent.version",
                "v0.32.1 is older than v0.33.0",
            ),
            (
                serde_json::json!({"addons": {"konnectivity": {}},
                    "deployment": {"extraContainers": [{"name": "konnectivity-server", "image": "x"}]}}),
                "spec.deployment.extraContainers",
                "konnectivity's container",
            ),
            (
                serde_json::json!({"dataStoreOverrides": [{"resource": "events", "dataStore": "events"}]}),
                "spec.dataStoreOverrides[0].resource",
                "not one group/resource",
            ),
            (
                serde_json::json!({"dataStoreOverrides": [
                    {"resource": "/events", "dataStore": "events"},
                    {"resource": "/events", "dataStore": "other"}]}),
                "spec.dataStoreOverrides[1].resource",
                "more than once",
            ),
            (
                serde_json::json!({"network": {"advertiseAddress": "api.example.com"}}),
                "spec.network.advertiseAddress",
                "not an IP address",
            ),
            (
                serde_json::json!({"addons": {"kubeProxy": {"imageRepository": "bad repo"}}}),
                "spec.addons.kubeProxy.imageRepository",
                "not an image repository",
            ),
            (
                serde_json::json!({"registry": "bad registry!"}),
                "spec.registry",
                "not a registry",
            ),
            (
                serde_json::json!({"kubelet": {"configurationJSONPatches": [
                    {"op": "remove", "path": "/nonexistent"}]}}),
                "spec.kubelet.configurationJSONPatches",
                "",
            ),
            (
                serde_json::json!({"addons": {"kubeProxy": {"configurationJSONPatches": [
                    {"op": "remove", "path": "/kind"}]}}}),
                "spec.addons.kubeProxy.configurationJSONPatches",
                "must keep apiVersion",
            ),
            (
                serde_json::json!({"network": {"certSANs": ["api.example.com:6443"]}}),
                "spec.network.certSANs",
                "",
            ),
            (
                serde_json::json!({"deployment": {"externalClusterReference": {
                    "kubeconfigSecretName": "k", "kubeconfigSecretKey": "v"}}}),
                "spec.deployment.externalClusterReference",
                "not supported",
            ),
        ]
    }

    #[test]
    fn table_of_fixture_variants() {
        let refused = refused_variants();
        for (patch, field, message) in refused {
            let errors = errors(patch.clone());
            assert!(
                errors
                    .iter()
                    .any(|e| e.field.starts_with(field) && e.message.contains(message)),
                "{patch}: want {field} ({message}), got {errors:?}"
            );
        }
        for patch in [
            serde_json::json!({}),
            serde_json::json!({"version": "v1.23.0"}),
            serde_json::json!({"version": "1.30.2"}),
            serde_json::json!({"admissionControllers": ["PodSecurityPolicy"], "version": "v1.24.0"}),
            serde_json::json!({"network": {"ingress": {"hostname": "api.demo.example.com"}}}),
            serde_json::json!({"kubelet": {"cgroupfs": "cgroupfs", "configurationJSONPatches": [
                {"op": "add", "path": "/maxPods", "value": 50}]}}),
            serde_json::json!({"addons": {"coreDNS": {"imageRepository": "mirror.example.com/coredns", "imageTag": "v1.12.1"}}}),
        ] {
            assert!(
                errors(patch.clone()).is_empty(),
                "{patch}: {:?}",
                errors(patch.clone())
            );
        }
    }

    #[test]
    fn a_preset_endpoint_is_served_and_never_overwritten() {
        let own = serde_json::json!({"controlPlaneEndpoint": {"host": "10.9.0.7", "port": 6443}});
        let infra = ("10.9.0.8".to_owned(), 6443);
        let preset =
            |kcp: &KamajiControlPlane, c: &ClusterView, i: Option<(&str, &(String, i32))>| {
                validate(kcp, c, i, "default").map(|s| s.preset_endpoint)
            };
        // Nothing set: kamaji-rs chooses.
        assert_eq!(
            preset(&fixture(serde_json::json!({})), &cluster(), None).unwrap(),
            None
        );
        // The infrastructure cluster's, the control plane's own, the Cluster's: each wins over
        // the ones before it.
        let p = preset(
            &fixture(serde_json::json!({})),
            &cluster(),
            Some(("OpenStackCluster", &infra)),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.source.field()),
            (
                "10.9.0.8",
                6443,
                "OpenStackCluster.spec.controlPlaneEndpoint".to_owned()
            )
        );
        let p = preset(&fixture(own.clone()), &cluster(), None)
            .unwrap()
            .unwrap();
        assert_eq!(
            (p.host.as_str(), p.source),
            ("10.9.0.7", EndpointSource::ControlPlane)
        );
        let mut c = cluster();
        c.control_plane_endpoint = Some(("10.9.0.7".into(), 6443));
        let p = preset(&fixture(own.clone()), &c, None).unwrap().unwrap();
        assert_eq!(p.source, EndpointSource::Cluster);
        // A control-plane endpoint that differs from the Cluster's or the infrastructure
        // cluster's is refused naming both.
        let mut c = cluster();
        c.control_plane_endpoint = Some(("10.9.0.1".into(), 6443));
        let e = preset(&fixture(own.clone()), &c, None).unwrap_err();
        assert_eq!(e[0].field, "spec.controlPlaneEndpoint");
        assert!(
            e[0].message
                .contains("Cluster.spec.controlPlaneEndpoint 10.9.0.1:6443"),
            "{e:?}"
        );
        let e = preset(
            &fixture(own),
            &cluster(),
            Some(("OpenStackCluster", &infra)),
        )
        .unwrap_err();
        assert!(
            e[0].message
                .contains("OpenStackCluster.spec.controlPlaneEndpoint 10.9.0.8:6443"),
            "{e:?}"
        );
        // The Cluster's differing from the infrastructure cluster's is Cluster API's business.
        let mut c = cluster();
        c.control_plane_endpoint = Some(("10.9.0.1".into(), 6443));
        assert!(
            preset(
                &fixture(serde_json::json!({})),
                &c,
                Some(("OpenStackCluster", &infra))
            )
            .is_ok()
        );
        // A preset host must be a serving name; the error names where it was read.
        let bad = ("api.example.com:443".to_owned(), 443);
        let e = preset(
            &fixture(serde_json::json!({})),
            &cluster(),
            Some(("OpenStackCluster", &bad)),
        )
        .unwrap_err();
        assert_eq!(
            e[0].field,
            "OpenStackCluster.spec.controlPlaneEndpoint.host"
        );
    }

    /// An extra volume named like one of the key material's is refused naming the entry.
    #[test]
    fn extra_volumes_cannot_take_the_key_materials_names() {
        let errors = errors(serde_json::json!({"deployment": {"extraVolumes": [
            {"name": "mine", "emptyDir": {}},
            {"name": "sa-rotation", "emptyDir": {}},
            {"name": "ca", "emptyDir": {}}
        ]}}));
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.deployment.extraVolumes[1].name",
                "spec.deployment.extraVolumes[2].name"
            ]
        );
        assert!(
            errors[0]
                .message
                .contains("sa-rotation is a volume kamaji-rs mounts")
        );
    }

    #[test]
    fn the_cluster_network_and_endpoint_are_checked_too() {
        let mut c = cluster();
        c.control_plane_endpoint = Some(("api.demo.example.com:443".into(), 443));
        let errors = validate(&fixture(serde_json::json!({})), &c, None, "default").unwrap_err();
        assert_eq!(
            errors[0].field, "Cluster.spec.controlPlaneEndpoint.host",
            "{errors:?}"
        );
        let mut c = cluster();
        c.api_server_port = 0;
        let errors = validate(&fixture(serde_json::json!({})), &c, None, "default").unwrap_err();
        assert_eq!(errors[0].field, "Cluster.spec.clusterNetwork.apiServerPort");
    }

    /// `dataStoreOverrides` are kept in order; the whole keyspace, a resource without its
    /// `/`, a duplicate and an empty DataStore name are refused naming the entry; the
    /// DataStores a control plane uses are its own, then the overrides' once each.
    #[test]
    fn data_store_overrides_are_validated_and_kept_in_order() {
        let overrides = serde_json::json!({"dataStoreName": "main", "dataStoreOverrides": [
            {"resource": "/events", "dataStore": "events"},
            {"resource": "coordination.k8s.io/leases", "dataStore": "main"},
            {"resource": "apps/deployments", "dataStore": "events"}]});
        let kcp = fixture(overrides);
        assert_eq!(
            valid(&kcp).datastore_overrides,
            vec![
                ("/events".to_owned(), "events".to_owned()),
                ("coordination.k8s.io/leases".to_owned(), "main".to_owned()),
                ("apps/deployments".to_owned(), "events".to_owned()),
            ]
        );
        assert_eq!(datastore_names(&kcp, "default"), vec!["main", "events"]);
        assert!(
            valid(&fixture(serde_json::json!({})))
                .datastore_overrides
                .is_empty()
        );
        for (entry, field) in [
            (
                serde_json::json!({"resource": "/", "dataStore": "e"}),
                "resource",
            ),
            (
                serde_json::json!({"resource": "", "dataStore": "e"}),
                "resource",
            ),
            (
                serde_json::json!({"resource": "events", "dataStore": "e"}),
                "resource",
            ),
            (
                serde_json::json!({"resource": "/events#x", "dataStore": "e"}),
                "resource",
            ),
            (
                serde_json::json!({"resource": "/events", "dataStore": ""}),
                "dataStore",
            ),
        ] {
            let errors = errors(serde_json::json!({"dataStoreOverrides": [entry.clone()]}));
            assert!(
                errors
                    .iter()
                    .any(|e| e.field == format!("spec.dataStoreOverrides[0].{field}")),
                "{entry}: {errors:?}"
            );
        }
    }

    #[test]
    fn defaults_and_typed_values() {
        let s = valid(&fixture(serde_json::json!({"dataStoreName": ""})));
        assert!(s.default_datastore);
        assert_eq!(s.datastore_name, "default");
        assert_eq!(s.version_tag, "v1.36.3");
        assert_eq!(s.registry, DEFAULT_REGISTRY);
        assert_eq!(s.admission_plugins, vec!["NodeRestriction".to_owned()]);
        assert_eq!(
            s.component(Component::Scheduler).image_name,
            "kube-scheduler"
        );
        assert_eq!(
            s.component(Component::ApiServer)
                .probes
                .readiness
                .period_seconds,
            Some(1)
        );
        let ing = valid(&fixture(serde_json::json!({"network": {
            "certSANs": ["extra.example.com"], "ingress": {"hostname": "api.demo.example.com"}}})));
        assert_eq!(
            ing.exposure.cert_sans,
            vec![
                "extra.example.com".to_owned(),
                "api.demo.example.com".to_owned()
            ]
        );
        assert_eq!(
            ing.exposure.external,
            Some(("api.demo.example.com".into(), 443))
        );
        // Per-field probe fallback: component, then deployment, then the default.
        let p = valid(&fixture(serde_json::json!({
            "apiServer": {"probes": {"liveness": {"periodSeconds": 3}}},
            "deployment": {"probes": {"liveness": {"periodSeconds": 5, "failureThreshold": 2}}},
        })));
        let live = &p.component(Component::ApiServer).probes.liveness;
        assert_eq!(
            (
                live.period_seconds,
                live.failure_threshold,
                live.timeout_seconds
            ),
            (Some(3), Some(2), Some(15))
        );
    }
}
