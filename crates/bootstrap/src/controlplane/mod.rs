//! The control-plane programs as kubeadm runs them in its static pods: the flags of
//! kube-apiserver, kube-controller-manager and kube-scheduler (kubeadm v1.36's
//! `cmd/kubeadm/app/phases/controlplane/manifests.go`, adapted to a datastore shared by many
//! tenants and to Secrets mounted as directories), merged with the user's `extraArgs`
//! ([`flags`]), and the file tree they read their key material from ([`layout`]).
//!
//! Everything here is a pure function of a [`ControlPlaneSpec`]; the reconciler turns the
//! result into a Deployment, and the real-program tests start the same programs with the same
//! arguments.

pub mod flags;
pub mod layout;

use std::net::IpAddr;

pub use flags::{Component, Flag, merge, removed_flag};
pub use layout::{Layout, PkiVolume};

use crate::network::TenantNetwork;

/// kube-controller-manager's secure port (kubeadm default).
pub const CONTROLLER_MANAGER_PORT: u16 = 10257;
/// kube-scheduler's secure port (kubeadm default).
pub const SCHEDULER_PORT: u16 = 10259;

/// How the API server reaches its datastore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatastoreWiring {
    /// `--etcd-servers` URLs.
    pub servers: Vec<String>,
    /// `--etcd-prefix`, e.g. `/tenant_a_demo_1a2b3c4d`.
    pub prefix: String,
    /// Whether the datastore takes a TLS client certificate (mounted as
    /// [`PkiVolume::Datastore`]).
    pub tls: bool,
    /// `--etcd-servers-overrides`: resources (`group/resource`, `/events` for the core group)
    /// kept on other servers, with their URLs. kube-apiserver reaches them with the same
    /// client certificate, CA and prefix as [`Self::servers`].
    pub overrides: Vec<(String, Vec<String>)>,
}

impl DatastoreWiring {
    /// The `--etcd-servers-overrides` value: `group/resource#url;url`, comma separated (the
    /// format of kube-apiserver's help); `None` without overrides.
    #[must_use]
    pub fn overrides_flag(&self) -> Option<String> {
        (!self.overrides.is_empty()).then(|| {
            self.overrides
                .iter()
                .map(|(resource, servers)| format!("{resource}#{}", servers.join(";")))
                .collect::<Vec<_>>()
                .join(",")
        })
    }
}

/// Everything the components' default flags depend on, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlPlaneSpec {
    /// The CAPI Cluster name (`--cluster-name`).
    pub cluster_name: String,
    /// kube-apiserver's secure port.
    pub port: u16,
    /// The tenant network (service and pod ranges, DNS domain).
    pub network: TenantNetwork,
    /// `--enable-admission-plugins`.
    pub admission_plugins: Vec<String>,
    /// `--kubelet-preferred-address-types`.
    pub kubelet_address_types: Vec<String>,
    /// `--advertise-address`, when the endpoint is an IP address.
    pub advertise_address: Option<IpAddr>,
    /// The datastore.
    pub datastore: DatastoreWiring,
    /// `--egress-selector-config-file`, when konnectivity carries the `cluster` egress
    /// ([`crate::konnectivity::egress_selector_file`]).
    pub egress_selector_config: Option<String>,
    /// `--encryption-provider-config`: the tenant's Secrets encrypted at rest
    /// ([`Layout::encryption_file`], [`crate::encryption`]).
    pub encryption_provider_config: Option<String>,
    /// A second `--service-account-key-file` while a service-account key rotation runs: the
    /// file of the other public key the API servers accept
    /// ([`Layout::service_account_verify_file`]).
    pub service_account_verify_file: Option<String>,
    /// The cluster CAs the components trust while a CA rotation runs (a bundle;
    /// [`Layout::ca_rotation_file`]): kube-apiserver's and kube-controller-manager's
    /// `--client-ca-file` and kube-controller-manager's `--root-ca-file`. `None`: the cluster
    /// CA's certificate.
    pub ca_bundle_file: Option<String>,
    /// The front-proxy CAs the components trust while a CA rotation runs:
    /// `--requestheader-client-ca-file`. `None`: the front-proxy CA's certificate.
    pub front_proxy_ca_bundle_file: Option<String>,
    /// Where the key material is.
    pub layout: Layout,
}

fn join_nets(nets: &[ipnet::IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// kamaji-rs's default flags of `component` (before `extraArgs`), in kubeadm's order.
#[must_use]
pub fn default_flags(spec: &ControlPlaneSpec, component: Component) -> Vec<Flag> {
    let client_ca = spec
        .ca_bundle_file
        .clone()
        .unwrap_or_else(|| spec.layout.file(PkiVolume::Ca, "tls.crt"));
    let front_proxy_ca = spec
        .front_proxy_ca_bundle_file
        .clone()
        .unwrap_or_else(|| spec.layout.file(PkiVolume::FrontProxyCa, "tls.crt"));
    match component {
        Component::ApiServer => {
            let mut f = api_server_datastore_flags(spec, &client_ca);
            f.extend(api_server_serving_flags(spec, &front_proxy_ca));
            f
        }
        Component::ControllerManager => controller_manager_flags(spec, &client_ca, &front_proxy_ca),
        Component::Scheduler => scheduler_flags(&spec.layout),
    }
}

/// kube-apiserver's flags up to its encryption configuration: authorization, the client CA,
/// admission, the datastore, the advertise address, the egress selector.
fn api_server_datastore_flags(spec: &ControlPlaneSpec, client_ca: &str) -> Vec<Flag> {
    let file = |v: PkiVolume, f: &str| spec.layout.file(v, f);
    let ds = &spec.datastore;
    let mut f = vec![
        Flag::new("allow-privileged", "true"),
        Flag::new("authorization-mode", "Node,RBAC"),
        Flag::new("client-ca-file", client_ca.to_owned()),
        Flag::new("enable-admission-plugins", spec.admission_plugins.join(",")),
        Flag::new("enable-bootstrap-token-auth", "true"),
        Flag::new("etcd-servers", ds.servers.join(",")),
        Flag::new("etcd-prefix", ds.prefix.clone()),
    ];
    if let Some(overrides) = ds.overrides_flag() {
        f.push(Flag::new("etcd-servers-overrides", overrides));
    }
    if ds.tls {
        f.push(Flag::new(
            "etcd-cafile",
            file(PkiVolume::Datastore, "ca.crt"),
        ));
        f.push(Flag::new(
            "etcd-certfile",
            file(PkiVolume::Datastore, "tls.crt"),
        ));
        f.push(Flag::new(
            "etcd-keyfile",
            file(PkiVolume::Datastore, "tls.key"),
        ));
    }
    if let Some(ip) = spec.advertise_address {
        f.push(Flag::new("advertise-address", ip.to_string()));
    }
    if let Some(file) = &spec.egress_selector_config {
        f.push(Flag::new("egress-selector-config-file", file.clone()));
    }
    if let Some(file) = &spec.encryption_provider_config {
        f.push(Flag::new("encryption-provider-config", file.clone()));
    }
    f
}

/// kube-apiserver's flags from the kubelet client on: the front proxy, the serving port,
/// the service-account keys, the Service range, the serving certificate.
fn api_server_serving_flags(spec: &ControlPlaneSpec, front_proxy_ca: &str) -> Vec<Flag> {
    let file = |v: PkiVolume, f: &str| spec.layout.file(v, f);
    let mut f = Vec::new();
    f.extend([
        Flag::new(
            "kubelet-client-certificate",
            file(PkiVolume::ApiServerKubeletClient, "tls.crt"),
        ),
        Flag::new(
            "kubelet-client-key",
            file(PkiVolume::ApiServerKubeletClient, "tls.key"),
        ),
        Flag::new(
            "kubelet-preferred-address-types",
            spec.kubelet_address_types.join(","),
        ),
        Flag::new(
            "proxy-client-cert-file",
            file(PkiVolume::FrontProxyClient, "tls.crt"),
        ),
        Flag::new(
            "proxy-client-key-file",
            file(PkiVolume::FrontProxyClient, "tls.key"),
        ),
        Flag::new("requestheader-allowed-names", "front-proxy-client"),
        Flag::new("requestheader-client-ca-file", front_proxy_ca.to_owned()),
        Flag::new("requestheader-extra-headers-prefix", "X-Remote-Extra-"),
        Flag::new("requestheader-group-headers", "X-Remote-Group"),
        Flag::new("requestheader-username-headers", "X-Remote-User"),
        Flag::new("secure-port", spec.port.to_string()),
        Flag::new(
            "service-account-issuer",
            format!(
                "https://kubernetes.default.svc.{}",
                spec.network.dns_domain()
            ),
        ),
        Flag::new(
            "service-account-key-file",
            file(PkiVolume::ServiceAccount, "tls.crt"),
        ),
    ]);
    if let Some(other) = &spec.service_account_verify_file {
        f.push(Flag::new("service-account-key-file", other.clone()));
    }
    f.extend([
        Flag::new(
            "service-account-signing-key-file",
            file(PkiVolume::ServiceAccount, "tls.key"),
        ),
        Flag::new(
            "service-cluster-ip-range",
            join_nets(spec.network.service_cidrs()),
        ),
        Flag::new("tls-cert-file", file(PkiVolume::ApiServer, "tls.crt")),
        Flag::new(
            "tls-private-key-file",
            file(PkiVolume::ApiServer, "tls.key"),
        ),
    ]);
    f
}

/// kube-controller-manager's flags.
fn controller_manager_flags(
    spec: &ControlPlaneSpec,
    client_ca: &str,
    front_proxy_ca: &str,
) -> Vec<Flag> {
    let file = |v: PkiVolume, f: &str| spec.layout.file(v, f);
    let kc = spec
        .layout
        .kubeconfig(Component::ControllerManager)
        .unwrap_or_default();
    let mut f = vec![
        Flag::new("authentication-kubeconfig", kc.clone()),
        Flag::new("authorization-kubeconfig", kc.clone()),
        Flag::new("bind-address", "0.0.0.0"),
        Flag::new("client-ca-file", client_ca.to_owned()),
        Flag::new("cluster-name", spec.cluster_name.clone()),
        Flag::new("cluster-signing-cert-file", file(PkiVolume::Ca, "tls.crt")),
        Flag::new("cluster-signing-key-file", file(PkiVolume::Ca, "tls.key")),
        Flag::new("controllers", "*,bootstrapsigner,tokencleaner"),
        Flag::new("kubeconfig", kc),
        Flag::new("leader-elect", "true"),
        Flag::new("requestheader-client-ca-file", front_proxy_ca.to_owned()),
        Flag::new("root-ca-file", client_ca.to_owned()),
        Flag::new(
            "service-account-private-key-file",
            file(PkiVolume::ServiceAccount, "tls.key"),
        ),
        Flag::new(
            "service-cluster-ip-range",
            join_nets(spec.network.service_cidrs()),
        ),
        Flag::new("use-service-account-credentials", "true"),
    ];
    if !spec.network.pod_cidrs().is_empty() {
        f.push(Flag::new("allocate-node-cidrs", "true"));
        f.push(Flag::new(
            "cluster-cidr",
            join_nets(spec.network.pod_cidrs()),
        ));
    }
    f
}

/// kube-scheduler's flags.
fn scheduler_flags(layout: &Layout) -> Vec<Flag> {
    let kc = layout.kubeconfig(Component::Scheduler).unwrap_or_default();
    vec![
        Flag::new("authentication-kubeconfig", kc.clone()),
        Flag::new("authorization-kubeconfig", kc.clone()),
        Flag::new("bind-address", "0.0.0.0"),
        Flag::new("kubeconfig", kc),
        Flag::new("leader-elect", "true"),
    ]
}

/// The full argument list of `component`: [`default_flags`] merged with the user's `extra`
/// flags ([`merge`]).
#[must_use]
pub fn component_args(
    spec: &ControlPlaneSpec,
    component: Component,
    extra: &[String],
) -> Vec<String> {
    merge(component, &default_flags(spec, component), extra)
}

/// The container port and the liveness and readiness paths of `component`'s health endpoint
/// (kubeadm's static-pod probes).
#[must_use]
pub fn health_endpoint(
    spec: &ControlPlaneSpec,
    component: Component,
) -> (u16, &'static str, &'static str) {
    match component {
        Component::ApiServer => (spec.port, "/livez", "/readyz"),
        Component::ControllerManager => (CONTROLLER_MANAGER_PORT, "/healthz", "/healthz"),
        Component::Scheduler => (SCHEDULER_PORT, "/healthz", "/healthz"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkSpec;

    fn spec(tls: bool) -> ControlPlaneSpec {
        ControlPlaneSpec {
            cluster_name: "demo".into(),
            port: 6443,
            network: NetworkSpec {
                service_cidrs: vec!["10.96.0.0/12".into()],
                pod_cidrs: vec!["10.244.0.0/16".into()],
                dns_domain: "cluster.local".into(),
                dns_service_ips: vec![],
            }
            .validate()
            .unwrap(),
            admission_plugins: vec!["NodeRestriction".into()],
            kubelet_address_types: vec!["InternalIP".into()],
            advertise_address: Some("10.0.0.10".parse().unwrap()),
            datastore: DatastoreWiring {
                servers: vec!["https://10.0.0.2:2379".into()],
                prefix: "/tenant_a_demo_1".into(),
                tls,
                overrides: Vec::new(),
            },
            egress_selector_config: None,
            encryption_provider_config: None,
            service_account_verify_file: None,
            ca_bundle_file: None,
            front_proxy_ca_bundle_file: None,
            layout: Layout::default(),
        }
    }

    /// Every file a flag names is in a volume the component mounts.
    #[test]
    fn every_flag_path_is_mounted() {
        for tls in [true, false] {
            let s = spec(tls);
            for c in Component::ALL {
                let mounted: Vec<String> = Layout::mounts(c, tls)
                    .into_iter()
                    .map(|v| s.layout.dir(v))
                    .collect();
                for f in default_flags(&s, c) {
                    let Some(v) = f.value.filter(|v| v.starts_with("/etc/kubernetes/")) else {
                        continue;
                    };
                    assert!(
                        mounted.iter().any(|d| v.starts_with(&format!("{d}/"))),
                        "{c:?} --{}={v} is not mounted",
                        f.name
                    );
                }
            }
        }
    }

    #[test]
    fn datastore_tls_flags_follow_the_wiring() {
        let with = component_args(&spec(true), Component::ApiServer, &[]);
        assert!(with.contains(&"--etcd-certfile=/etc/kubernetes/pki/datastore/tls.crt".into()));
        let without = component_args(&spec(false), Component::ApiServer, &[]);
        assert!(!without.iter().any(|a| a.starts_with("--etcd-certfile")));
        assert!(with.contains(&"--advertise-address=10.0.0.10".into()));
    }

    /// `--etcd-servers-overrides` in kube-apiserver's format (`group/resource#servers`, servers
    /// `;`-separated, overrides `,`-separated), only when there are overrides.
    #[test]
    fn datastore_overrides_become_etcd_servers_overrides() {
        let none = component_args(&spec(true), Component::ApiServer, &[]);
        assert!(
            !none
                .iter()
                .any(|a| a.starts_with("--etcd-servers-overrides"))
        );
        let mut s = spec(true);
        s.datastore.overrides = vec![
            (
                "/events".into(),
                vec![
                    "https://10.0.0.3:2379".into(),
                    "https://10.0.0.4:2379".into(),
                ],
            ),
            (
                "coordination.k8s.io/leases".into(),
                vec!["https://10.0.0.5:2379".into()],
            ),
        ];
        let args = component_args(&s, Component::ApiServer, &[]);
        let overrides: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--etcd-servers-overrides="))
            .collect();
        assert_eq!(
            overrides,
            [
                &"--etcd-servers-overrides=/events#https://10.0.0.3:2379;https://10.0.0.4:2379,\
               coordination.k8s.io/leases#https://10.0.0.5:2379"
                    .to_owned()
            ]
        );
        // One client certificate and one prefix for every server.
        assert!(args.contains(&"--etcd-prefix=/tenant_a_demo_1".into()));
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("--etcd-certfile="))
                .count(),
            1
        );
    }

    #[test]
    fn a_rooted_layout_moves_every_path() {
        let mut s = spec(true);
        s.layout = Layout::new("/tmp/t");
        let args = component_args(&s, Component::ControllerManager, &[]);
        assert!(args.contains(&"--kubeconfig=/tmp/t/controller-manager/kubeconfig".into()));
        assert!(args.iter().all(|a| !a.contains("/etc/kubernetes")));
    }
}
