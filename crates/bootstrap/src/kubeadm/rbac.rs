//! The RBAC `kubeadm init` creates for worker joins (`phases/bootstraptoken/node/tlsbootstrap.go`,
//! `phases/uploadconfig`, `phases/kubelet/config.go`, `phases/bootstraptoken/clusterinfo`), plus
//! the `kubeadm:cluster-admins` and `kubeadm:apiserver-kubelet-client` bindings.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

use super::erased::Yaml;
use super::{cluster_info, meta};
use crate::error::Error;
use crate::pki::CLUSTER_ADMINS_GROUP;
use crate::token::NODE_BOOTSTRAP_TOKEN_GROUP;
use crate::version::KubernetesVersion;

/// `system:nodes`.
pub const NODES_GROUP: &str = "system:nodes";
/// `kubeadm:get-nodes`.
pub const GET_NODES: &str = "kubeadm:get-nodes";
/// `kubeadm:nodes-kubeadm-config`.
pub const NODES_KUBEADM_CONFIG: &str = "kubeadm:nodes-kubeadm-config";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A set of RBAC objects.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RbacObjects {
    /// ClusterRoles.
    pub cluster_roles: Vec<ClusterRole>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Roles.
    pub roles: Vec<Role>,
    /// RoleBindings.
    pub role_bindings: Vec<RoleBinding>,
}

impl RbacObjects {
    pub(crate) fn for_each(
        &self,
        f: &mut dyn FnMut(&dyn Yaml) -> Result<(), Error>,
    ) -> Result<(), Error> {
        for o in &self.cluster_roles {
            f(o)?;
        }
        for o in &self.cluster_role_bindings {
            f(o)?;
        }
        for o in &self.roles {
            f(o)?;
        }
        for o in &self.role_bindings {
            f(o)?;
        }
        Ok(())
    }
}

pub(crate) fn group(name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: "Group".into(),
        name: name.into(),
        namespace: None,
    }
}

fn user(name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: "User".into(),
        name: name.into(),
        namespace: None,
    }
}

pub(crate) fn cluster_role_binding(
    name: &str,
    cluster_role: &str,
    subjects: Vec<Subject>,
) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name, None),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.into(),
            kind: "ClusterRole".into(),
            name: cluster_role.into(),
        },
        subjects: Some(subjects),
    }
}

/// A Role allowing `get` on the named ConfigMaps, and its RoleBinding of the same name.
pub(crate) fn configmap_reader(
    name: &str,
    namespace: &str,
    config_maps: &[&str],
    subjects: Vec<Subject>,
) -> (Role, RoleBinding) {
    let role = Role {
        metadata: meta(name, Some(namespace)),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(config_maps.iter().map(|c| (*c).to_owned()).collect()),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
    };
    let binding = RoleBinding {
        metadata: meta(name, Some(namespace)),
        role_ref: RoleRef {
            api_group: RBAC_GROUP.into(),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(subjects),
    };
    (role, binding)
}

/// The full join RBAC set for a tenant of `version` (G = bootstrap token group, N =
/// `system:nodes`):
///
/// - ClusterRoleBinding `kubeadm:kubelet-bootstrap` → `system:node-bootstrapper` (G);
/// - ClusterRoleBinding `kubeadm:node-autoapprove-bootstrap` →
///   `system:certificates.k8s.io:certificatesigningrequests:nodeclient` (G);
/// - ClusterRoleBinding `kubeadm:node-autoapprove-certificate-rotation` →
///   `system:certificates.k8s.io:certificatesigningrequests:selfnodeclient` (N);
/// - ClusterRole + ClusterRoleBinding `kubeadm:get-nodes` (`get nodes`; G);
/// - Role + RoleBinding `kube-system/kubeadm:nodes-kubeadm-config` (`get configmaps
///   [kubeadm-config]`; G, N);
/// - Role + RoleBinding `kube-system/kubeadm:kubelet-config` (or `…-1.X` below 1.24, naming the
///   ConfigMap of [`KubernetesVersion::kubelet_config_map_name`]; N, G);
/// - Role + RoleBinding `kube-public/kubeadm:bootstrap-signer-clusterinfo` (anonymous read);
/// - ClusterRoleBinding `kubeadm:cluster-admins` → `cluster-admin` (Group
///   `kubeadm:cluster-admins`, the admin kubeconfig's `O=`);
/// - ClusterRoleBinding `kubeadm:apiserver-kubelet-client` → `system:kubelet-api-admin` (User
///   `kube-apiserver-kubelet-client`; kubeadm ≥ 1.36.1, needed because that certificate no
///   longer carries `system:masters`).
///
/// Not included: kube-proxy's Role/bindings (see [`super::addons::kube_proxy`]) and the
/// non-upstream `kubeadm:node-certificate-approve` some forks add.
#[must_use]
pub fn join_rbac(version: &KubernetesVersion) -> RbacObjects {
    let g = || group(NODE_BOOTSTRAP_TOKEN_GROUP);
    let n = || group(NODES_GROUP);
    let get_nodes = ClusterRole {
        metadata: meta(GET_NODES, None),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["nodes".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    let (kubeadm_cfg_role, kubeadm_cfg_binding) = configmap_reader(
        NODES_KUBEADM_CONFIG,
        "kube-system",
        &["kubeadm-config"],
        vec![g(), n()],
    );
    let kubelet_cm = version.kubelet_config_map_name();
    let (kubelet_cfg_role, kubelet_cfg_binding) = configmap_reader(
        &version.kubelet_config_rbac_name(),
        "kube-system",
        &[&kubelet_cm],
        vec![n(), g()],
    );
    let (clusterinfo_role, clusterinfo_binding) = cluster_info::rbac();
    RbacObjects {
        cluster_roles: vec![get_nodes],
        cluster_role_bindings: vec![
            cluster_role_binding(
                "kubeadm:kubelet-bootstrap",
                "system:node-bootstrapper",
                vec![g()],
            ),
            cluster_role_binding(
                "kubeadm:node-autoapprove-bootstrap",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                vec![g()],
            ),
            cluster_role_binding(
                "kubeadm:node-autoapprove-certificate-rotation",
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                vec![n()],
            ),
            cluster_role_binding(GET_NODES, GET_NODES, vec![g()]),
            cluster_role_binding(
                CLUSTER_ADMINS_GROUP,
                "cluster-admin",
                vec![group(CLUSTER_ADMINS_GROUP)],
            ),
            cluster_role_binding(
                "kubeadm:apiserver-kubelet-client",
                "system:kubelet-api-admin",
                vec![user("kube-apiserver-kubelet-client")],
            ),
        ],
        roles: vec![kubeadm_cfg_role, kubelet_cfg_role, clusterinfo_role],
        role_bindings: vec![
            kubeadm_cfg_binding,
            kubelet_cfg_binding,
            clusterinfo_binding,
        ],
    }
}
