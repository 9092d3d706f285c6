//! The **validate** step: a KamajiControlPlane and its Cluster become a [`ValidSpec`], or a
//! list of errors that each name the field (pure; no I/O).
//!
//! Admission (schema + CEL) rejects most bad input before it is stored; what is checked here
//! needs the Cluster or the target version: the tenant network (service/pod CIDRs from
//! `Cluster.spec.clusterNetwork`, `dnsServiceIPs` inside the service range, case B18), flags
//! and admission plugins that the target Kubernetes version no longer has (they crash the
//! component at start, so they are refused before any pod rolls), and the SAN list. The
//! supported version range and removed flags are also refused at admission; they are checked
//! here again, with the same tables, for objects stored before those rules existed.

use std::fmt;

use kamaji_api::KamajiControlPlane;
use kamaji_api::cluster::ClusterView;
use kamaji_api::kcp::{
    AdmissionController, ControlPlaneComponent, DEFAULT_REGISTRY, KubeletPreferredAddressType,
    ServiceType,
};
use kamaji_api::names::{self, ObjectNames};
use kamaji_api::validation;
use kamaji_bootstrap::network::{NetworkSpec, TenantNetwork};
use kamaji_bootstrap::version::KubernetesVersion;

use crate::args::{self, Component};

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

/// Admission plugins kube-apiserver enables when `spec.admissionControllers` is empty
/// (kubeadm's choice: the API server defaults plus `NodeRestriction`).
pub const DEFAULT_ADMISSION_PLUGINS: &[&str] = &["NodeRestriction"];

/// Everything the plan step needs, validated and with defaults applied.
#[derive(Debug, Clone)]
pub struct ValidSpec {
    /// Namespace of the KamajiControlPlane and its Cluster.
    pub namespace: String,
    /// The Cluster (defaults applied, case B23).
    pub cluster: ClusterView,
    /// Child object names.
    pub names: ObjectNames,
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
    /// The raw network inputs (for the kubeadm artifacts).
    pub network_spec: NetworkSpec,
    /// kube-apiserver port: the Service port, the container port and the endpoint port unless
    /// an ingress or gateway serves elsewhere (`Cluster.spec.clusterNetwork.apiServerPort`).
    pub port: u16,
    /// Service type.
    pub service_type: ServiceType,
    /// `network.serviceAddress`.
    pub service_address: Option<String>,
    /// Ingress or gateway host and port, which the endpoint takes first.
    pub external: Option<(String, u16)>,
    /// `network.certSANs`.
    pub cert_sans: Vec<String>,
    /// `--kubelet-preferred-address-types`.
    pub kubelet_address_types: Vec<String>,
    /// Enabled admission plugins.
    pub admission_plugins: Vec<String>,
    /// Datastore schema (etcd key prefix without the leading `/`), stable per namespace/name.
    pub datastore_schema: String,
    /// DataStore name: `spec.dataStoreName` or the manager's default.
    pub datastore_name: String,
    /// The KamajiControlPlane as observed (for the component and deployment sections).
    pub kcp: KamajiControlPlane,
}

impl ValidSpec {
    /// A component's section of the spec.
    #[must_use]
    pub fn component(&self, c: Component) -> Option<&ControlPlaneComponent> {
        let f = &self.kcp.spec.fields;
        match c {
            Component::ApiServer => f.api_server.as_ref(),
            Component::ControllerManager => f.controller_manager.as_ref(),
            Component::Scheduler => f.scheduler.as_ref(),
        }
    }

    /// A component's `extraArgs` (empty when unset).
    #[must_use]
    pub fn extra_args(&self, c: Component) -> &[String] {
        self.component(c)
            .and_then(|s| s.extra_args.as_deref())
            .unwrap_or_default()
    }
}

/// Validates `kcp` against its `cluster`; `default_datastore` is the manager's
/// `--default-datastore`.
///
/// # Errors
/// Every problem found, each naming its field.
pub fn validate(
    kcp: &KamajiControlPlane,
    cluster: &ClusterView,
    default_datastore: &str,
) -> Result<ValidSpec, Vec<SpecError>> {
    let mut errors = Vec::new();
    let err = |field: &str, message: String| SpecError {
        field: field.to_owned(),
        message,
    };
    let namespace = kcp.metadata.namespace.clone().unwrap_or_default();
    let kcp_name = kcp.metadata.name.clone().unwrap_or_default();
    let fields = &kcp.spec.fields;

    let version = KubernetesVersion::parse(&kcp.spec.version)
        .map_err(|e| errors.push(err("spec.version", e.to_string())))
        .ok();
    // Admission refuses these; objects stored before that rule existed are caught here.
    if let Some(v) = &version
        && !validation::is_supported_version(v.major, v.minor)
    {
        errors.push(err(
            "spec.version",
            format!(
                "{} is not supported: kamaji-rs supports Kubernetes {}",
                kcp.spec.version,
                validation::supported_versions()
            ),
        ));
    }

    let network_cfg = fields.network.clone().unwrap_or_default();
    let network_spec = network_spec(kcp, cluster);
    let network = network_spec
        .validate()
        .map_err(|e| errors.push(err(&network_field(&e.field), e.reason.clone())))
        .ok();

    let port = u16::try_from(cluster.api_server_port)
        .ok()
        .filter(|p| *p != 0);
    if port.is_none() {
        errors.push(err(
            "Cluster.spec.clusterNetwork.apiServerPort",
            format!("{} is not a TCP port", cluster.api_server_port),
        ));
    }

    if let Some(v) = &version {
        errors.extend(removed_in_target(kcp, v));
    }
    if fields
        .deployment
        .as_ref()
        .is_some_and(|d| d.external_cluster_reference.is_some())
    {
        errors.push(err(
            "spec.deployment.externalClusterReference",
            "running the control plane in another cluster is not supported by kamaji-rs".into(),
        ));
    }

    let external = external_endpoint(&network_cfg);

    if !errors.is_empty() {
        return Err(errors);
    }
    let (Some(version), Some(network), Some(port)) = (version, network, port) else {
        return Err(errors);
    };
    let version_tag = format!("v{}.{}.{}", version.major, version.minor, version.patch);
    let admission_plugins = admission_plugins(fields);
    let kubelet_address_types = kubelet_address_types(fields);
    let mut cert_sans = network_cfg.cert_sans.clone().unwrap_or_default();
    if let Some((host, _)) = &external {
        cert_sans.push(host.clone());
    }
    Ok(ValidSpec {
        namespace: namespace.clone(),
        names: ObjectNames::new(&cluster.name, &kcp_name),
        cluster: cluster.clone(),
        version,
        version_tag,
        replicas: kcp
            .spec
            .replicas
            .unwrap_or(kamaji_api::kcp::DEFAULT_REPLICAS),
        registry: fields
            .container_registry
            .clone()
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| DEFAULT_REGISTRY.to_owned()),
        network,
        network_spec,
        port,
        service_type: network_cfg
            .service_type
            .unwrap_or(ServiceType::LoadBalancer),
        service_address: network_cfg
            .service_address
            .clone()
            .filter(|a| !a.is_empty()),
        external,
        cert_sans,
        kubelet_address_types,
        admission_plugins,
        datastore_schema: datastore_schema(kcp),
        datastore_name: datastore_name(kcp, default_datastore).to_owned(),
        kcp: kcp.clone(),
    })
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
    let err = |field: &str, message: String| SpecError {
        field: field.to_owned(),
        message,
    };
    let fields = &kcp.spec.fields;
    for c in Component::ALL {
        let extra = fields_component(kcp, c)
            .and_then(|s| s.extra_args.as_deref())
            .unwrap_or_default();
        if let Some((flag, removed)) = args::removed_flag(c, extra, v.minor) {
            errors.push(err(
                c.spec_field(),
                validation::removed_flag_message(c, &flag, removed, &kcp.spec.version),
            ));
        }
    }
    for plugin in fields.admission_controllers.iter().flatten() {
        if let Some(removed) = plugin.removed_in_minor()
            && u64::from(v.minor) >= removed
        {
            errors.push(err(
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

/// The ingress or gateway host and port (443 unless the gateway names one), which the endpoint
/// takes before any Service address.
fn external_endpoint(network_cfg: &kamaji_api::kcp::NetworkComponent) -> Option<(String, u16)> {
    network_cfg
        .ingress
        .as_ref()
        .map(|i| (i.hostname.clone(), 443))
        .or_else(|| {
            network_cfg.gateway.as_ref().map(|g| {
                (
                    g.hostname.clone(),
                    g.port.and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
                )
            })
        })
}

fn fields_component(kcp: &KamajiControlPlane, c: Component) -> Option<&ControlPlaneComponent> {
    let f = &kcp.spec.fields;
    match c {
        Component::ApiServer => f.api_server.as_ref(),
        Component::ControllerManager => f.controller_manager.as_ref(),
        Component::Scheduler => f.scheduler.as_ref(),
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
mod tests {
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

    fn kcp(spec: &serde_json::Value) -> KamajiControlPlane {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha2",
            "kind": "KamajiControlPlane",
            "metadata": {"name": "demo", "namespace": "tenant-a"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn errors(spec: &serde_json::Value) -> Vec<SpecError> {
        validate(&kcp(spec), &cluster(), "default")
            .err()
            .unwrap_or_default()
    }

    #[test]
    fn versions_outside_the_supported_range_are_refused_naming_spec_version() {
        for version in ["v1.99.0", "v1.22.17", "v2.30.0", "1.37.0"] {
            let errors = errors(&serde_json::json!({"version": version}));
            assert_eq!(errors.len(), 1, "{version}: {errors:?}");
            assert_eq!(errors[0].field, "spec.version");
            assert!(
                errors[0].message.contains(version)
                    && errors[0].message.contains("v1.23.0 to v1.36.x"),
                "{}",
                errors[0].message
            );
        }
        for version in ["v1.23.0", "1.30.2", "v1.36.3"] {
            assert!(
                errors(&serde_json::json!({"version": version})).is_empty(),
                "{version} refused"
            );
        }
    }

    #[test]
    fn removed_flags_and_plugins_are_refused_with_the_admission_message() {
        let errors = errors(&serde_json::json!({
            "version": "v1.36.3",
            "apiServer": {"extraArgs": ["--insecure-port=0"]},
            "admissionControllers": ["PodSecurityPolicy"],
        }));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[0].field, "spec.apiServer.extraArgs");
        assert_eq!(
            errors[0].message,
            "--insecure-port was removed from kube-apiserver in v1.24; version v1.36.3 would not start with it"
        );
        assert_eq!(errors[1].field, "spec.admissionControllers");
        assert_eq!(
            errors[1].message,
            "admission plugin PodSecurityPolicy was removed in v1.25; version v1.36.3 would not start with it"
        );
    }
}
