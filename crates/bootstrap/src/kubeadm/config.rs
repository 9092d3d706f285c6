//! `kube-system/kubeadm-config` (ClusterConfiguration) and `kube-system/kubelet-config`
//! (KubeletConfiguration), the two ConfigMaps a worker join reads with the token identity.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;
use serde_json::{Value, json};

use super::{Tenant, meta, to_yaml};
use crate::error::{Error, ValidationError};

/// `kubeadm-config`.
pub const KUBEADM_CONFIG_NAME: &str = "kubeadm-config";
/// Data key of the ClusterConfiguration.
pub const CLUSTER_CONFIGURATION_KEY: &str = "ClusterConfiguration";
/// Data key of the kubelet configuration.
pub const KUBELET_KEY: &str = "kubelet";
/// Where kubeadm keeps certificates on a node.
pub const CERTIFICATES_DIR: &str = "/etc/kubernetes/pki";

/// The ClusterConfiguration fields a worker uses (kubeadm marshals with sorted keys; the
/// struct is in that order).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfiguration {
    /// `kubeadm.k8s.io/v1beta4` (≥ 1.31) or `v1beta3`.
    pub api_version: String,
    /// `ClusterConfiguration`.
    pub kind: String,
    /// API server settings.
    pub api_server: ApiServerConfig,
    /// `/etc/kubernetes/pki`.
    pub certificates_dir: String,
    /// The CAPI Cluster name.
    pub cluster_name: String,
    /// Public `host:port`.
    pub control_plane_endpoint: String,
    /// Empty.
    pub controller_manager: Empty,
    /// Empty.
    pub dns: Empty,
    /// External datastore endpoints (or empty).
    pub etcd: EtcdConfig,
    /// Image registry.
    pub image_repository: String,
    /// Tenant version.
    pub kubernetes_version: String,
    /// Network.
    pub networking: Networking,
    /// `proxy: {}` exists only in v1beta4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Empty>,
    /// Empty.
    pub scheduler: Empty,
}

/// `{}`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Empty {}

/// `apiServer` of the ClusterConfiguration.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApiServerConfig {
    /// Extra SANs.
    #[serde(rename = "certSANs", skip_serializing_if = "Vec::is_empty")]
    pub cert_sans: Vec<String>,
}

/// `etcd` of the ClusterConfiguration.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct EtcdConfig {
    /// External etcd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalEtcd>,
}

/// External etcd settings, with kubeadm's file locations.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEtcd {
    /// `<certificatesDir>/etcd/ca.crt`.
    pub ca_file: String,
    /// `<certificatesDir>/apiserver-etcd-client.crt`.
    pub cert_file: String,
    /// Endpoints.
    pub endpoints: Vec<String>,
    /// `<certificatesDir>/apiserver-etcd-client.key`.
    pub key_file: String,
}

/// `networking` of the ClusterConfiguration.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Networking {
    /// Cluster DNS domain.
    pub dns_domain: String,
    /// Pod CIDRs, comma-separated (omitted if none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod_subnet: String,
    /// Service CIDRs, comma-separated.
    pub service_subnet: String,
}

/// The ClusterConfiguration of `tenant`: API version by tenant minor (B05), `clusterName`,
/// `kubernetesVersion`, `controlPlaneEndpoint` = public `host:port`, networking from the
/// validated network, `certSANs`, external etcd endpoints.
#[must_use]
pub fn cluster_configuration(tenant: &Tenant) -> ClusterConfiguration {
    let v1beta4 = tenant.version().at_least(1, 31);
    let external = (!tenant.etcd_endpoints.is_empty()).then(|| ExternalEtcd {
        ca_file: format!("{CERTIFICATES_DIR}/etcd/ca.crt"),
        cert_file: format!("{CERTIFICATES_DIR}/apiserver-etcd-client.crt"),
        endpoints: tenant.etcd_endpoints.clone(),
        key_file: format!("{CERTIFICATES_DIR}/apiserver-etcd-client.key"),
    });
    ClusterConfiguration {
        api_version: tenant.version().kubeadm_api_version().into(),
        kind: "ClusterConfiguration".into(),
        api_server: ApiServerConfig {
            cert_sans: tenant.cert_sans.clone(),
        },
        certificates_dir: CERTIFICATES_DIR.into(),
        cluster_name: tenant.cluster_name().into(),
        control_plane_endpoint: tenant.endpoint(),
        controller_manager: Empty {},
        dns: Empty {},
        etcd: EtcdConfig { external },
        image_repository: tenant.image_registry().into(),
        kubernetes_version: tenant.version().to_string(),
        networking: Networking {
            dns_domain: tenant.network().dns_domain().into(),
            pod_subnet: tenant.network().pod_subnet(),
            service_subnet: tenant.network().service_subnet(),
        },
        proxy: v1beta4.then_some(Empty {}),
        scheduler: Empty {},
    }
}

/// The `kube-system/kubeadm-config` ConfigMap, key `ClusterConfiguration`.
///
/// # Errors
/// [`Error::Render`].
pub fn kubeadm_config_map(tenant: &Tenant) -> Result<ConfigMap, Error> {
    let yaml = to_yaml("ClusterConfiguration", &cluster_configuration(tenant))?;
    Ok(ConfigMap {
        metadata: meta(KUBEADM_CONFIG_NAME, Some("kube-system")),
        data: Some(BTreeMap::from([(
            CLUSTER_CONFIGURATION_KEY.to_owned(),
            yaml,
        )])),
        ..ConfigMap::default()
    })
}

/// The KubeletConfiguration (JSON value) for `tenant`: kubeadm's defaults
/// (`componentconfigs/kubelet.go`) as Kamaji writes them — anonymous auth off, webhook authn
/// and authz, `clientCAFile: /etc/kubernetes/pki/ca.crt`, `clusterDNS` = the CoreDNS Service
/// IPs, `clusterDomain`, `cgroupDriver`, `rotateCertificates: true`,
/// `staticPodPath: /etc/kubernetes/manifests`, healthz on 127.0.0.1:10248, no resolver config —
/// then the user's JSON patches (RFC 6902) applied in order.
///
/// # Errors
/// [`ValidationError`] on `kubelet.configurationJSONPatches` if a patch fails or the result
/// no longer has `apiVersion: kubelet.config.k8s.io/v1beta1` and `kind: KubeletConfiguration`.
pub fn kubelet_configuration(tenant: &Tenant) -> Result<Value, ValidationError> {
    let dns: Vec<String> = tenant
        .network()
        .dns_service_ips()
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut doc = json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"cacheTTL": "0s", "enabled": true},
            "x509": {"clientCAFile": format!("{CERTIFICATES_DIR}/ca.crt")},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"},
        },
        "cgroupDriver": tenant.cgroup_driver().as_str(),
        "clusterDNS": dns,
        "clusterDomain": tenant.network().dns_domain(),
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "rotateCertificates": true,
        "staticPodPath": "/etc/kubernetes/manifests",
    });
    let field = "kubelet.configurationJSONPatches";
    json_patch::patch(&mut doc, &tenant.kubelet_patches)
        .map_err(|e| ValidationError::new(field, e.to_string()))?;
    if doc.get("apiVersion").and_then(Value::as_str) != Some("kubelet.config.k8s.io/v1beta1")
        || doc.get("kind").and_then(Value::as_str) != Some("KubeletConfiguration")
    {
        return Err(ValidationError::new(
            field,
            "the patched configuration must keep apiVersion kubelet.config.k8s.io/v1beta1 and kind KubeletConfiguration",
        ));
    }
    Ok(doc)
}

/// The `kube-system/kubelet-config` ConfigMap (`kubelet-config-1.X` below 1.24), key `kubelet`.
///
/// # Errors
/// [`Error::Validation`] from [`kubelet_configuration`], [`Error::Render`].
pub fn kubelet_config_map(tenant: &Tenant) -> Result<ConfigMap, Error> {
    let yaml = to_yaml("KubeletConfiguration", &kubelet_configuration(tenant)?)?;
    Ok(ConfigMap {
        metadata: meta(
            &tenant.version().kubelet_config_map_name(),
            Some("kube-system"),
        ),
        data: Some(BTreeMap::from([(KUBELET_KEY.to_owned(), yaml)])),
        ..ConfigMap::default()
    })
}
