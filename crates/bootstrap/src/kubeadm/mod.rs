//! Tenant-side kubeadm objects, as `kubeadm init` would create them (see
//! shared/reference/kubeadm-join.md for the shapes and where each comes from).
//!
//! Start from a [`TenantSpec`] (plain values from the KamajiControlPlane and its Cluster),
//! validate it into a [`Tenant`] (field-named errors), then build objects from the `Tenant`:
//! [`cluster_info`], [`rbac`], [`config`] (kubeadm-config, kubelet-config), [`addons`]
//! (kube-proxy, CoreDNS), or everything at once with [`TenantArtifacts::build`].

pub mod addons;
pub mod cluster_info;
pub mod config;
pub mod rbac;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::error::{Error, ValidationError};
use crate::kubeconfig::server_url;
use crate::network::{NetworkSpec, TenantNetwork, is_dns_subdomain};
use crate::version::KubernetesVersion;

pub use kamaji_api::kcp::{CgroupDriver, DEFAULT_REGISTRY};

/// Image override of an addon (`spec.addons.coreDNS` / `kubeProxy`: `imageRepository`,
/// `imageTag`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddonImage {
    /// Full repository (e.g. `my.registry/coredns`), replacing the default.
    pub repository: Option<String>,
    /// Tag, replacing the version-derived default.
    pub tag: Option<String>,
}

/// Kubelet settings (`spec.kubelet` of the KamajiControlPlane).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KubeletSpec {
    /// The kubelet cgroup driver; `None` means kubeadm's default, `systemd`.
    pub cgroup_driver: Option<CgroupDriver>,
    /// RFC 6902 JSON patches applied to the rendered KubeletConfiguration, in order.
    pub configuration_json_patches: json_patch::Patch,
    /// `preferredAddressTypes`: the order in which the API server tries node addresses
    /// (`--kubelet-preferred-address-types`); empty means [`DEFAULT_PREFERRED_ADDRESS_TYPES`].
    pub preferred_address_types: Vec<String>,
}

/// Kamaji's default `preferredAddressTypes`: `InternalIP`, `ExternalIP`, `Hostname`.
pub const DEFAULT_PREFERRED_ADDRESS_TYPES: [&str; 3] = ["InternalIP", "ExternalIP", "Hostname"];
const ADDRESS_TYPES: [&str; 5] = [
    "Hostname",
    "InternalIP",
    "ExternalIP",
    "InternalDNS",
    "ExternalDNS",
];

/// Everything the kubeadm artifacts depend on, unvalidated.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantSpec {
    /// The CAPI Cluster name (kubeadm `clusterName`).
    pub cluster_name: String,
    /// Tenant Kubernetes version (`spec.version`), e.g. `v1.36.3`.
    pub version: String,
    /// Public endpoint host (`Cluster.spec.controlPlaneEndpoint.host`).
    pub endpoint_host: String,
    /// Public endpoint port.
    pub endpoint_port: u16,
    /// The tenant network.
    pub network: NetworkSpec,
    /// Image registry (`registry`); empty means [`DEFAULT_REGISTRY`].
    pub image_registry: String,
    /// `network.certSANs` (recorded in kubeadm-config's `apiServer.certSANs`).
    pub cert_sans: Vec<String>,
    /// Datastore endpoints for kubeadm-config's `etcd.external.endpoints` (informational for
    /// workers).
    pub etcd_endpoints: Vec<String>,
    /// Kubelet settings.
    pub kubelet: KubeletSpec,
    /// CoreDNS image override.
    pub coredns: AddonImage,
    /// kube-proxy image override.
    pub kube_proxy: AddonImage,
    /// RFC 6902 JSON patches applied to the rendered KubeProxyConfiguration, in order.
    pub kube_proxy_patches: json_patch::Patch,
}

/// A validated [`TenantSpec`]; only [`TenantSpec::validate`] builds one.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    cluster_name: String,
    version: KubernetesVersion,
    endpoint_host: String,
    endpoint_port: u16,
    network: TenantNetwork,
    image_registry: String,
    cert_sans: Vec<String>,
    etcd_endpoints: Vec<String>,
    cgroup_driver: CgroupDriver,
    kubelet_patches: json_patch::Patch,
    preferred_address_types: Vec<String>,
    coredns_image: String,
    kube_proxy_image: String,
    kube_proxy_patches: json_patch::Patch,
}

fn is_image_ref(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/' | b':' | b'@')
        })
}

impl TenantSpec {
    /// Validates every input and derives defaults.
    ///
    /// # Errors
    /// The first [`ValidationError`], naming the field: `clusterName`, `version`,
    /// `controlPlaneEndpoint.host` / `.port`, the network fields of [`NetworkSpec::validate`],
    /// `registry`, `addons.coreDNS.imageRepository|imageTag`,
    /// `addons.kubeProxy.imageRepository|imageTag`, `kubelet.cgroupfs`,
    /// `kubelet.preferredAddressTypes[i]`, `kubelet.configurationJSONPatches` and
    /// `addons.kubeProxy.configurationJSONPatches` (a patch that does not apply, or that
    /// changes `apiVersion`/`kind`).
    pub fn validate(&self) -> Result<Tenant, ValidationError> {
        if self.cluster_name.is_empty() || !is_dns_subdomain(&self.cluster_name) {
            return Err(ValidationError::new(
                "clusterName",
                format!("{:?} is not a DNS-1123 subdomain", self.cluster_name),
            ));
        }
        let version = KubernetesVersion::parse(&self.version)?;
        let host = self.checked_endpoint_host()?;
        let network = self.network.validate()?;
        let registry = self.checked_registry()?;
        // kubeadm: CoreDNS lives under `coredns/coredns` on the default registry and under
        // `<registry>/coredns` elsewhere (GetDNSImage).
        let coredns_repo = if registry == DEFAULT_REGISTRY {
            format!("{registry}/coredns/coredns")
        } else {
            format!("{registry}/coredns")
        };
        let coredns_image = image(
            &self.coredns,
            &coredns_repo,
            &format!("v{}", version.coredns_version()),
            "addons.coreDNS",
        )?;
        let kube_proxy_image = image(
            &self.kube_proxy,
            &format!("{registry}/kube-proxy"),
            &version.tag(),
            "addons.kubeProxy",
        )?;
        let cgroup_driver = self.kubelet.cgroup_driver.unwrap_or(CgroupDriver::Systemd);
        let preferred_address_types = self.checked_address_types()?;
        let tenant = Tenant {
            cluster_name: self.cluster_name.clone(),
            version,
            endpoint_host: host.to_owned(),
            endpoint_port: self.endpoint_port,
            network,
            image_registry: registry,
            cert_sans: self.cert_sans.clone(),
            etcd_endpoints: self.etcd_endpoints.clone(),
            cgroup_driver,
            kubelet_patches: self.kubelet.configuration_json_patches.clone(),
            preferred_address_types,
            coredns_image,
            kube_proxy_image,
            kube_proxy_patches: self.kube_proxy_patches.clone(),
        };
        config::kubelet_configuration(&tenant)?;
        addons::kube_proxy_configuration(&tenant)?;
        Ok(tenant)
    }

    /// `controlPlaneEndpoint.host` (trimmed) when it is an IP address or a DNS name and the
    /// port is set ([`TenantSpec::validate`]).
    fn checked_endpoint_host(&self) -> Result<&str, ValidationError> {
        let host = self.endpoint_host.trim();
        let host_ok = host.parse::<std::net::IpAddr>().is_ok() || is_dns_subdomain(host);
        if !host_ok {
            return Err(ValidationError::new(
                "controlPlaneEndpoint.host",
                format!("{host:?} is neither an IP address nor a DNS name"),
            ));
        }
        if self.endpoint_port == 0 {
            return Err(ValidationError::new(
                "controlPlaneEndpoint.port",
                "must be 1-65535",
            ));
        }
        Ok(host)
    }

    /// The image registry, the default when empty ([`TenantSpec::validate`]).
    fn checked_registry(&self) -> Result<String, ValidationError> {
        let registry = if self.image_registry.trim().is_empty() {
            DEFAULT_REGISTRY.to_owned()
        } else {
            self.image_registry.trim().trim_end_matches('/').to_owned()
        };
        if !is_image_ref(&registry) {
            return Err(ValidationError::new(
                "registry",
                format!("{registry:?} is not a registry"),
            ));
        }
        Ok(registry)
    }

    /// `kubelet.preferredAddressTypes`, each known and listed once; the default order when
    /// empty ([`TenantSpec::validate`]).
    fn checked_address_types(&self) -> Result<Vec<String>, ValidationError> {
        let mut preferred_address_types = Vec::new();
        for (i, t) in self.kubelet.preferred_address_types.iter().enumerate() {
            let field = format!("kubelet.preferredAddressTypes[{i}]");
            if !ADDRESS_TYPES.contains(&t.as_str()) {
                return Err(ValidationError::new(
                    field,
                    format!("{t:?} is not one of {}", ADDRESS_TYPES.join(", ")),
                ));
            }
            if preferred_address_types.contains(t) {
                return Err(ValidationError::new(
                    field,
                    format!("{t:?} is listed twice"),
                ));
            }
            preferred_address_types.push(t.clone());
        }
        if preferred_address_types.is_empty() {
            preferred_address_types = DEFAULT_PREFERRED_ADDRESS_TYPES.map(str::to_owned).to_vec();
        }
        Ok(preferred_address_types)
    }
}

fn image(
    over: &AddonImage,
    default_repo: &str,
    default_tag: &str,
    field: &str,
) -> Result<String, ValidationError> {
    let repo = over.repository.as_deref().unwrap_or(default_repo);
    let tag = over.tag.as_deref().unwrap_or(default_tag);
    if !is_image_ref(repo) {
        return Err(ValidationError::new(
            format!("{field}.imageRepository"),
            format!("{repo:?} is not an image repository"),
        ));
    }
    if !is_image_ref(tag) || tag.contains('/') {
        return Err(ValidationError::new(
            format!("{field}.imageTag"),
            format!("{tag:?} is not an image tag"),
        ));
    }
    Ok(format!("{repo}:{tag}"))
}

impl Tenant {
    /// The same tenant behind `endpoint_host:endpoint_port`, with `etcd_endpoints` recorded in
    /// kubeadm-config: the endpoint is known only once the control plane is exposed, while
    /// everything else is validated before anything is created.
    ///
    /// # Errors
    /// A [`ValidationError`] on `controlPlaneEndpoint.host` / `.port`.
    pub fn at_endpoint(
        &self,
        endpoint_host: &str,
        endpoint_port: u16,
        etcd_endpoints: Vec<String>,
    ) -> Result<Self, ValidationError> {
        let host = endpoint_host.trim();
        if host.parse::<std::net::IpAddr>().is_err() && !is_dns_subdomain(host) {
            return Err(ValidationError::new(
                "controlPlaneEndpoint.host",
                format!("{host:?} is neither an IP address nor a DNS name"),
            ));
        }
        if endpoint_port == 0 {
            return Err(ValidationError::new(
                "controlPlaneEndpoint.port",
                "must be 1-65535",
            ));
        }
        Ok(Self {
            endpoint_host: host.to_owned(),
            endpoint_port,
            etcd_endpoints,
            ..self.clone()
        })
    }

    /// Cluster name.
    #[must_use]
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }
    /// Tenant version.
    #[must_use]
    pub fn version(&self) -> &KubernetesVersion {
        &self.version
    }
    /// Validated network.
    #[must_use]
    pub fn network(&self) -> &TenantNetwork {
        &self.network
    }
    /// Image registry.
    #[must_use]
    pub fn image_registry(&self) -> &str {
        &self.image_registry
    }
    /// `host:port` of the public endpoint (IPv6 bracketed): kubeadm's `controlPlaneEndpoint`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        if self.endpoint_host.contains(':') {
            format!("[{}]:{}", self.endpoint_host, self.endpoint_port)
        } else {
            format!("{}:{}", self.endpoint_host, self.endpoint_port)
        }
    }
    /// `https://host:port` of the public endpoint.
    #[must_use]
    pub fn server_url(&self) -> String {
        server_url(&self.endpoint_host, self.endpoint_port)
    }
    /// The CoreDNS image (`<repo>:<tag>`).
    #[must_use]
    pub fn coredns_image(&self) -> &str {
        &self.coredns_image
    }
    /// The JSON patches for the KubeProxyConfiguration
    /// (`addons.kubeProxy.configurationJSONPatches`).
    #[must_use]
    pub fn kube_proxy_patches(&self) -> &json_patch::Patch {
        &self.kube_proxy_patches
    }

    /// The kube-proxy image (`<repo>:<tag>`).
    #[must_use]
    pub fn kube_proxy_image(&self) -> &str {
        &self.kube_proxy_image
    }
    /// kubelet cgroup driver.
    #[must_use]
    pub fn cgroup_driver(&self) -> CgroupDriver {
        self.cgroup_driver
    }
    /// The value for kube-apiserver's `--kubelet-preferred-address-types` (comma-separated,
    /// validated, defaulted).
    #[must_use]
    pub fn kubelet_preferred_address_types(&self) -> String {
        self.preferred_address_types.join(",")
    }
}

/// Which addons to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addons {
    /// Render kube-proxy.
    pub kube_proxy: bool,
    /// Render CoreDNS.
    pub coredns: bool,
}

impl Default for Addons {
    fn default() -> Self {
        Self {
            kube_proxy: true,
            coredns: true,
        }
    }
}

/// Every tenant-side object, grouped; [`TenantArtifacts::to_yaml`] lists them in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantArtifacts {
    /// `kube-public/cluster-info` (unsigned: signatures come from the bootstrapsigner, or from
    /// [`cluster_info::sign`]).
    pub cluster_info: k8s_openapi::api::core::v1::ConfigMap,
    /// `kube-system/kubeadm-config`.
    pub kubeadm_config: k8s_openapi::api::core::v1::ConfigMap,
    /// `kube-system/kubelet-config` (or `kubelet-config-1.X`).
    pub kubelet_config: k8s_openapi::api::core::v1::ConfigMap,
    /// Join RBAC, including cluster-info's anonymous read.
    pub rbac: rbac::RbacObjects,
    /// kube-proxy, if enabled.
    pub kube_proxy: Option<addons::KubeProxyObjects>,
    /// CoreDNS, if enabled.
    pub coredns: Option<addons::CoreDnsObjects>,
}

impl TenantArtifacts {
    /// Builds everything for `tenant`; `ca_cert_pem` is the cluster CA (the CA that signed the
    /// API server's serving certificate and is in `<cluster>-ca`).
    ///
    /// # Errors
    /// [`Error::Render`], [`Error::Template`], [`Error::Validation`] (kubelet patches).
    pub fn build(tenant: &Tenant, ca_cert_pem: &str, addons: Addons) -> Result<Self, Error> {
        Ok(Self {
            cluster_info: cluster_info::config_map(&tenant.server_url(), ca_cert_pem)?,
            kubeadm_config: config::kubeadm_config_map(tenant)?,
            kubelet_config: config::kubelet_config_map(tenant)?,
            rbac: rbac::join_rbac(tenant.version()),
            kube_proxy: if addons.kube_proxy {
                Some(addons::kube_proxy(tenant)?)
            } else {
                None
            },
            coredns: if addons.coredns {
                Some(addons::coredns(tenant)?)
            } else {
                None
            },
        })
    }

    /// Calls `add` with every object, in apply order: RBAC, ServiceAccounts, ConfigMaps,
    /// Services, workloads.
    fn each(
        &self,
        add: &mut dyn FnMut(&dyn erased::Yaml) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.rbac.for_each(add)?;
        if let Some(p) = &self.kube_proxy {
            add(&p.service_account)?;
            add(&p.cluster_role_binding)?;
            add(&p.role)?;
            add(&p.role_binding)?;
        }
        if let Some(d) = &self.coredns {
            add(&d.service_account)?;
            add(&d.cluster_role)?;
            add(&d.cluster_role_binding)?;
        }
        add(&self.cluster_info)?;
        add(&self.kubeadm_config)?;
        add(&self.kubelet_config)?;
        if let Some(p) = &self.kube_proxy {
            add(&p.config_map)?;
        }
        if let Some(d) = &self.coredns {
            add(&d.config_map)?;
            add(&d.service)?;
            add(&d.deployment)?;
        }
        if let Some(p) = &self.kube_proxy {
            add(&p.daemon_set)?;
        }
        Ok(())
    }

    /// All objects as one multi-document YAML stream, in apply order: RBAC, ServiceAccounts,
    /// ConfigMaps, Services, workloads.
    ///
    /// # Errors
    /// [`Error::Render`].
    pub fn to_yaml(&self) -> Result<String, Error> {
        let mut docs = Vec::new();
        self.each(&mut |v| {
            docs.push(v.yaml()?);
            Ok(())
        })?;
        Ok(docs.join("---\n"))
    }

    /// All objects as JSON values (each with its `apiVersion` and `kind`), in the order of
    /// [`TenantArtifacts::to_yaml`]: what a client applies, without a YAML round trip.
    ///
    /// # Errors
    /// [`Error::Json`] (never for these types).
    pub fn to_values(&self) -> Result<Vec<serde_json::Value>, Error> {
        let mut values = Vec::new();
        self.each(&mut |v| {
            values.push(v.value()?);
            Ok(())
        })?;
        Ok(values)
    }
}

/// Object-safe YAML rendering of serializable objects.
pub(crate) mod erased {
    use crate::error::Error;

    /// Renders one object as YAML or as a JSON value.
    pub trait Yaml {
        /// The YAML document.
        fn yaml(&self) -> Result<String, Error>;
        /// The JSON value.
        fn value(&self) -> Result<serde_json::Value, Error>;
    }

    impl<T: serde::Serialize> Yaml for T {
        fn yaml(&self) -> Result<String, Error> {
            serde_yaml::to_string(self).map_err(|source| Error::Render {
                what: "object".into(),
                source,
            })
        }
        fn value(&self) -> Result<serde_json::Value, Error> {
            serde_json::to_value(self).map_err(|source| Error::Json {
                what: "object".into(),
                source,
            })
        }
    }
}

pub(crate) fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..ObjectMeta::default()
    }
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(crate) fn to_yaml<T: Serialize>(what: &str, v: &T) -> Result<String, Error> {
    serde_yaml::to_string(v).map_err(|source| Error::Render {
        what: what.into(),
        source,
    })
}

/// `yaml`, a template compiled into the program, parsed as `T`: parsed once per process into
/// `parsed` and cloned from there afterwards (every pass builds the tenant's objects, and a
/// YAML parse of a template costs many times a clone of what it yields:
/// `cargo bench -p kamaji-bootstrap --bench kubeadm`).
pub(crate) fn from_template<T: serde::de::DeserializeOwned + Clone>(
    parsed: &'static std::sync::OnceLock<T>,
    what: &str,
    yaml: &str,
) -> Result<T, Error> {
    if let Some(t) = parsed.get() {
        return Ok(t.clone());
    }
    let t = serde_yaml::from_str(yaml).map_err(|source| Error::Template {
        what: what.into(),
        source,
    })?;
    Ok(parsed.get_or_init(|| t).clone())
}
