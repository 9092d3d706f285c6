//! `kube-public/cluster-info` and its anonymous-read RBAC (kubeadm phase
//! `bootstraptoken/clusterinfo`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use super::meta;
use crate::error::{Error, parse_err};
use crate::kubeconfig::cluster_info_kubeconfig;
use crate::token::{BootstrapToken, JWS_KEY_PREFIX, jws_kubeconfig};

/// `cluster-info`.
pub const NAME: &str = "cluster-info";
/// `kube-public`.
pub const NAMESPACE: &str = "kube-public";
/// The data key holding the kubeconfig.
pub const CLUSTER_INFO_KUBECONFIG_KEY: &str = "kubeconfig";
/// Name of the Role/RoleBinding for anonymous reads.
pub const RBAC_NAME: &str = "kubeadm:bootstrap-signer-clusterinfo";

/// The `cluster-info` ConfigMap with the `kubeconfig` key only: one cluster (name `""`) with
/// `certificate-authority-data` = `ca_cert_pem` and `server` = `server` (the **public**
/// endpoint URL: workers use it after discovery), no users or contexts.
///
/// # Errors
/// [`Error::Render`].
pub fn config_map(server: &str, ca_cert_pem: &str) -> Result<ConfigMap, Error> {
    let kubeconfig = cluster_info_kubeconfig(server, ca_cert_pem).to_yaml()?;
    Ok(ConfigMap {
        metadata: meta(NAME, Some(NAMESPACE)),
        data: Some(BTreeMap::from([(
            CLUSTER_INFO_KUBECONFIG_KEY.to_owned(),
            kubeconfig,
        )])),
        ..ConfigMap::default()
    })
}

/// Does what the tenant's bootstrapsigner does, for places where none runs: removes every
/// `jws-kubeconfig-*` key, then adds `jws-kubeconfig-<id>` = [`jws_kubeconfig`] over the current
/// `kubeconfig` value for each token.
///
/// # Errors
/// [`Error::Parse`] if the ConfigMap has no `kubeconfig` key.
pub fn sign(config_map: &mut ConfigMap, tokens: &[BootstrapToken]) -> Result<(), Error> {
    let data = config_map.data.get_or_insert_with(BTreeMap::new);
    let kubeconfig = data
        .get(CLUSTER_INFO_KUBECONFIG_KEY)
        .cloned()
        .ok_or_else(|| parse_err("cluster-info", "no kubeconfig key"))?;
    data.retain(|k, _| !k.starts_with(JWS_KEY_PREFIX));
    for t in tokens {
        data.insert(t.jws_key(), jws_kubeconfig(t.id(), t.secret(), &kubeconfig));
    }
    Ok(())
}

/// Role + RoleBinding `kube-public/kubeadm:bootstrap-signer-clusterinfo`: `get` on
/// `configmaps/cluster-info` for User `system:anonymous` (kubeadm's
/// `CreateClusterInfoRBACRules`).
#[must_use]
pub fn rbac() -> (Role, RoleBinding) {
    let role = Role {
        metadata: meta(RBAC_NAME, Some(NAMESPACE)),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(vec![NAME.into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta(RBAC_NAME, Some(NAMESPACE)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: RBAC_NAME.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: "system:anonymous".into(),
            namespace: None,
        }]),
    };
    (role, binding)
}
