//! konnectivity (`sigs.k8s.io/apiserver-network-proxy`): the tunnel through which a tenant's
//! API server reaches its cluster's network (kubelets for `logs`/`exec`/`port-forward`, pods
//! and Services for webhooks and aggregated APIs) when that network cannot be reached from
//! the management cluster.
//!
//! The shape follows the upstream konnectivity setup (kubernetes.io "Set up Konnectivity
//! service") as Kamaji runs it:
//!
//! - the **server** is a sidecar of kube-apiserver in the control-plane pod. kube-apiserver
//!   sends its `cluster` egress traffic to it over a Unix socket in a shared `emptyDir`
//!   ([`egress_selector_configuration`], `--egress-selector-config-file`); the server accepts
//!   agents on its agent port (`spec.addons.konnectivity.server.port`, also a port of the
//!   control-plane Service) with the API server's serving certificate, and authenticates each
//!   agent's projected service-account token (audience [`SERVER_IDENTITY`]) with a TokenReview
//!   through its own kubeconfig (client certificate `CN=system:konnectivity-server` from the
//!   tenant CA, which [`agent_objects`] lets review tokens);
//! - the **agents** run in the tenant (`kube-system/konnectivity-agent`, a DaemonSet or a
//!   Deployment) and dial out to the control-plane endpoint's host at the server port, so only
//!   the workers need a path to the control plane, never the reverse. An agent is ready
//!   (`/readyz`) once it holds a connection to a server.
//!
//! Everything here is a pure function of its inputs.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, KeyToPath, Lifecycle,
    LifecycleHandler, PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, ResourceRequirements,
    SecretVolumeSource, SecurityContext, ServiceAccount, ServiceAccountTokenProjection,
    SleepAction, Toleration, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kamaji_api::meta::KUBECONFIG_SECRET_KEY;

use crate::controlplane::flags::{Flag, merge_flags};
use crate::controlplane::{Layout, PkiVolume};

/// The server's identity: the common name of its client certificate and the audience of the
/// agents' tokens.
pub const SERVER_IDENTITY: &str = "system:konnectivity-server";
/// Name of the agents' ServiceAccount and workload, and of the agent container.
pub const AGENT_NAME: &str = "konnectivity-agent";
/// Namespace of the agents in the tenant.
pub const AGENT_NAMESPACE: &str = "kube-system";
/// Name of the server container in the control-plane pod.
pub const SERVER_CONTAINER: &str = "konnectivity-server";
/// Name of the server's port (container and control-plane Service).
pub const SERVER_PORT_NAME: &str = "konnectivity";
/// The server's and the agents' admin (metrics) port.
pub const ADMIN_PORT: u16 = 8133;
/// The server's and the agents' health port (`/healthz`, `/readyz`).
pub const HEALTH_PORT: u16 = 8134;
/// Directory of the Unix socket shared by kube-apiserver and the server.
pub const UDS_DIR: &str = "/run/konnectivity";
/// The Unix socket kube-apiserver dials for `cluster` egress.
pub const UDS_NAME: &str = "/run/konnectivity/konnectivity-server.socket";
/// Secret key of the egress selector configuration (beside the kubeconfig under `value`).
pub const EGRESS_SELECTOR_KEY: &str = "egress-selector-configuration.yaml";
/// Where both containers mount the konnectivity Secret: `kubeconfig` and
/// [`EGRESS_SELECTOR_KEY`].
pub const CONFIG_DIR: &str = "/etc/kubernetes/konnectivity";
/// Pod volume of the konnectivity Secret.
pub const CONFIG_VOLUME: &str = "konnectivity";
/// Pod volume of the Unix socket (`emptyDir`).
pub const UDS_VOLUME: &str = "konnectivity-uds";
/// Where the agent's projected token is mounted, and its file name.
const AGENT_TOKEN_DIR: &str = "/var/run/secrets/tokens";
const AGENT_TOKEN_FILE: &str = "konnectivity-agent-token";
/// Lifetime of the agents' projected tokens (the kubelet refreshes them at 80 %).
const AGENT_TOKEN_SECONDS: i64 = 3600;

/// The oldest apiserver-network-proxy release the server's and agents' flags work with
/// (`v0.<this>`): lease counting with `--lease-namespace`/`--lease-label` on both sides is in
/// every release from v0.33.0 (checked in the sources of v0.33.0, v0.34.0 and v0.36.0; older
/// releases lack some of these flags and would exit at start).
pub const MIN_RELEASE_MINOR: u32 = 33;

/// The apiserver-network-proxy release the images default to for Kubernetes `1.<minor>`: the
/// project's release of that minor where it is known to exist (v0.33.0, v0.34.0, v0.36.0),
/// else the newest known one before it (v0.34.0 for 1.35); `None` below 1.33, where no
/// release with the flags used here goes with the tenant.
#[must_use]
pub fn default_version(minor: u32) -> Option<&'static str> {
    match minor {
        33 => Some("v0.33.0"),
        34 | 35 => Some("v0.34.0"),
        36.. => Some("v0.36.0"),
        _ => None,
    }
}

/// Whether image tag `tag` is a release older than [`MIN_RELEASE_MINOR`] (`v0.32.1`); a tag
/// that is no `v0.<minor>…` version (a mirror's own tag) is not judged.
#[must_use]
pub fn is_too_old(tag: &str) -> bool {
    tag.strip_prefix("v0.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|minor| minor.parse::<u32>().ok())
        .is_some_and(|minor| minor < MIN_RELEASE_MINOR)
}

/// The `EgressSelectorConfiguration` (`apiserver.k8s.io/v1beta1`) sending kube-apiserver's
/// `cluster` traffic through the server's Unix socket ([`UDS_NAME`]) with the gRPC protocol;
/// `controlplane` and `etcd` traffic stays direct.
#[must_use]
pub fn egress_selector_configuration() -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\n\
         kind: EgressSelectorConfiguration\n\
         egressSelections:\n\
         - name: cluster\n\
         \x20 connection:\n\
         \x20   proxyProtocol: GRPC\n\
         \x20   transport:\n\
         \x20     uds:\n\
         \x20       udsName: {UDS_NAME}\n"
    )
}

/// The path of the egress selector configuration in the kube-apiserver container.
#[must_use]
pub fn egress_selector_file() -> String {
    format!("{CONFIG_DIR}/{EGRESS_SELECTOR_KEY}")
}

/// The server sidecar, validated (`spec.addons.konnectivity.server`).
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// Image reference with tag.
    pub image: String,
    /// The agent port (`--agent-port`, the Service's `konnectivity` port).
    pub port: u16,
    /// Container resources.
    pub resources: Option<ResourceRequirements>,
    /// The user's flags, merged over the defaults (the user's value wins).
    pub extra_args: Vec<String>,
    /// Container security context.
    pub security_context: Option<SecurityContext>,
}

/// How the agents run (`spec.addons.konnectivity.agent.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentMode {
    /// One agent per node (`DaemonSet`).
    DaemonSet,
    /// A fixed number of agents (`Deployment`, `replicas`).
    Deployment {
        /// Number of agents.
        replicas: i32,
    },
}

/// The agents, validated (`spec.addons.konnectivity.agent`).
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// Image reference with tag.
    pub image: String,
    /// Run in the node's network namespace.
    pub host_network: bool,
    /// Pod tolerations.
    pub tolerations: Vec<Toleration>,
    /// The user's flags, merged over the defaults (the user's value wins).
    pub extra_args: Vec<String>,
    /// DaemonSet or Deployment.
    pub mode: AgentMode,
}

/// The whole konnectivity setup of one control plane.
#[derive(Debug, Clone, PartialEq)]
pub struct Konnectivity {
    /// The server sidecar.
    pub server: Server,
    /// The agents in the tenant.
    pub agent: Agent,
}

/// Namespace of the servers' leases in the tenant.
pub const LEASE_NAMESPACE: &str = "kube-system";
/// Label of the servers' leases, by which the agents count the servers.
pub const LEASE_LABEL: &str = "k8s-app=konnectivity-server";

/// The server's arguments: the defaults (Unix socket for kube-apiserver, agent port with the
/// API server's serving certificate from `layout`, token authentication of agents, a lease in
/// the tenant per server, by which agents count the servers — so a control plane that scales
/// keeps its pod template, and each agent still connects to every server through the
/// endpoint) merged with `server.extra_args`.
#[must_use]
pub fn server_args(server: &Server, layout: &Layout) -> Vec<String> {
    let defaults = [
        Flag::new("uds-name", UDS_NAME),
        Flag {
            name: "delete-existing-uds-file".into(),
            value: None,
        },
        Flag::new("cluster-cert", layout.file(PkiVolume::ApiServer, "tls.crt")),
        Flag::new("cluster-key", layout.file(PkiVolume::ApiServer, "tls.key")),
        Flag::new("mode", "grpc"),
        Flag::new("server-port", "0"),
        Flag::new("agent-port", server.port.to_string()),
        Flag::new("admin-port", ADMIN_PORT.to_string()),
        Flag::new("health-port", HEALTH_PORT.to_string()),
        Flag::new("agent-namespace", AGENT_NAMESPACE),
        Flag::new("agent-service-account", AGENT_NAME),
        Flag::new("kubeconfig", format!("{CONFIG_DIR}/kubeconfig")),
        Flag::new("authentication-audience", SERVER_IDENTITY),
        Flag {
            name: "enable-lease-controller".into(),
            value: None,
        },
        Flag::new("lease-namespace", LEASE_NAMESPACE),
        Flag::new("lease-label", LEASE_LABEL),
    ];
    merge_flags(&defaults, &server.extra_args, |_| false)
        .iter()
        .map(Flag::render)
        .collect()
}

fn http_probe(path: &str, port: u16, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(port)),
            scheme: Some("HTTP".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

/// The mount of the Unix socket's directory, for kube-apiserver and the server.
#[must_use]
pub fn uds_mount() -> VolumeMount {
    VolumeMount {
        name: UDS_VOLUME.into(),
        mount_path: UDS_DIR.into(),
        ..VolumeMount::default()
    }
}

/// The read-only mount of the konnectivity Secret ([`CONFIG_DIR`]).
#[must_use]
pub fn config_mount() -> VolumeMount {
    VolumeMount {
        name: CONFIG_VOLUME.into(),
        mount_path: CONFIG_DIR.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The pod volumes: the Unix socket's `emptyDir` and the konnectivity Secret `secret_name`
/// (its kubeconfig as `kubeconfig`, the egress selector configuration), files mode `mode`.
#[must_use]
pub fn volumes(secret_name: &str, mode: i32) -> Vec<Volume> {
    vec![
        Volume {
            name: UDS_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: CONFIG_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret_name.into()),
                default_mode: Some(mode),
                items: Some(vec![
                    KeyToPath {
                        key: KUBECONFIG_SECRET_KEY.into(),
                        path: "kubeconfig".into(),
                        mode: None,
                    },
                    KeyToPath {
                        key: EGRESS_SELECTOR_KEY.into(),
                        path: EGRESS_SELECTOR_KEY.into(),
                        mode: None,
                    },
                ]),
                optional: None,
            }),
            ..Volume::default()
        },
    ]
}

/// The server container: [`server_args`], the agent port, liveness on the health port, the
/// API server's serving certificate (`layout`), the konnectivity Secret and the socket; on
/// deletion it sleeps `pre_stop_seconds` before it stops, like kube-apiserver beside it.
#[must_use]
pub fn server_container(server: &Server, layout: &Layout, pre_stop_seconds: i64) -> Container {
    Container {
        name: SERVER_CONTAINER.into(),
        image: Some(server.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/proxy-server".into()]),
        args: Some(server_args(server, layout)),
        ports: Some(vec![
            ContainerPort {
                name: Some(SERVER_PORT_NAME.into()),
                container_port: i32::from(server.port),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("konn-health".into()),
                container_port: i32::from(HEALTH_PORT),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            },
        ]),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..http_probe("/healthz", HEALTH_PORT, 10)
        }),
        resources: server.resources.clone(),
        security_context: server.security_context.clone(),
        // Serves kube-apiserver's tunnelled requests for as long as kube-apiserver keeps
        // serving after the pod is deleted (its own pre-stop sleep of `pre_stop_seconds`).
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: pre_stop_seconds,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: PkiVolume::ApiServer.volume_name().into(),
                mount_path: layout.dir(PkiVolume::ApiServer),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            config_mount(),
            uds_mount(),
        ]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    }
}

/// The agents' objects in the tenant, in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentObjects {
    /// `kube-system/konnectivity-agent`.
    pub service_account: ServiceAccount,
    /// `system:konnectivity-server`: lets the server's identity review the agents' tokens
    /// (`system:auth-delegator`).
    pub cluster_role_binding: ClusterRoleBinding,
    /// `kube-system/system:konnectivity-server`: the servers' leases, all verbs.
    pub lease_role: Role,
    /// `kube-system/system:konnectivity-server`: binds [`Self::lease_role`] to the server's
    /// identity.
    pub lease_role_binding: RoleBinding,
    /// `kube-system/konnectivity-agent`: reading the servers' leases.
    pub agent_lease_role: Role,
    /// `kube-system/konnectivity-agent`: binds [`Self::agent_lease_role`] to the agents'
    /// ServiceAccount.
    pub agent_lease_role_binding: RoleBinding,
    /// The agents, as a DaemonSet or a Deployment.
    pub workload: AgentWorkload,
}

/// The agents' workload.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentWorkload {
    /// One agent per node.
    DaemonSet(Box<DaemonSet>),
    /// A fixed number of agents.
    Deployment(Box<Deployment>),
}

impl AgentObjects {
    /// The objects as JSON values (with `apiVersion` and `kind`), in apply order.
    ///
    /// # Errors
    /// When an object does not serialise (never for these types).
    pub fn to_values(&self) -> Result<Vec<serde_json::Value>, serde_json::Error> {
        // k8s-openapi writes each resource's `apiVersion` and `kind`.
        let workload = match &self.workload {
            AgentWorkload::DaemonSet(d) => serde_json::to_value(d)?,
            AgentWorkload::Deployment(d) => serde_json::to_value(d)?,
        };
        Ok(vec![
            serde_json::to_value(&self.service_account)?,
            serde_json::to_value(&self.cluster_role_binding)?,
            serde_json::to_value(&self.lease_role)?,
            serde_json::to_value(&self.lease_role_binding)?,
            serde_json::to_value(&self.agent_lease_role)?,
            serde_json::to_value(&self.agent_lease_role_binding)?,
            workload,
        ])
    }
}

/// An object's `(apiVersion, kind, namespace, name)`.
pub type ObjectIdentity = (
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static str,
);

/// Every object the agents may have in a tenant, as `(apiVersion, kind, namespace, name)`:
/// what is removed when konnectivity is turned off (and the other workload kind when the
/// mode changes).
#[must_use]
pub fn agent_identities() -> [ObjectIdentity; 8] {
    const RBAC: &str = "rbac.authorization.k8s.io/v1";
    [
        ("v1", "ServiceAccount", Some(AGENT_NAMESPACE), AGENT_NAME),
        (RBAC, "ClusterRoleBinding", None, SERVER_IDENTITY),
        (RBAC, "Role", Some(LEASE_NAMESPACE), SERVER_IDENTITY),
        (RBAC, "RoleBinding", Some(LEASE_NAMESPACE), SERVER_IDENTITY),
        (RBAC, "Role", Some(LEASE_NAMESPACE), AGENT_NAME),
        (RBAC, "RoleBinding", Some(LEASE_NAMESPACE), AGENT_NAME),
        ("apps/v1", "DaemonSet", Some(AGENT_NAMESPACE), AGENT_NAME),
        ("apps/v1", "Deployment", Some(AGENT_NAMESPACE), AGENT_NAME),
    ]
}

fn meta(name: &str, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    }
}

/// The agents' arguments: the CA of the tenant (the service-account volume's `ca.crt`, which
/// signed the API server's serving certificate the server presents), the server at
/// `server_host:server_port`, the health and admin ports, the projected token, counting the
/// servers by their leases; merged with `agent.extra_args`.
#[must_use]
pub fn agent_args(agent: &Agent, server_host: &str, server_port: u16) -> Vec<String> {
    let defaults = [
        Flag::new(
            "ca-cert",
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        ),
        Flag::new("proxy-server-host", server_host),
        Flag::new("proxy-server-port", server_port.to_string()),
        Flag::new("admin-server-port", ADMIN_PORT.to_string()),
        Flag::new("health-server-port", HEALTH_PORT.to_string()),
        Flag::new(
            "service-account-token-path",
            format!("{AGENT_TOKEN_DIR}/{AGENT_TOKEN_FILE}"),
        ),
        Flag {
            name: "count-server-leases".into(),
            value: None,
        },
        Flag::new("lease-namespace", LEASE_NAMESPACE),
        Flag::new("lease-label", LEASE_LABEL),
    ];
    merge_flags(&defaults, &agent.extra_args, |_| false)
        .iter()
        .map(Flag::render)
        .collect()
}

/// The agents' pod template (see [`agent_objects`]).
fn agent_pod(
    agent: &Agent,
    server_host: &str,
    server_port: u16,
    api_port: u16,
    labels: &BTreeMap<String, String>,
) -> PodTemplateSpec {
    let container = agent_container(agent, server_host, server_port, api_port);
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container],
            service_account_name: Some(AGENT_NAME.into()),
            priority_class_name: Some("system-cluster-critical".into()),
            host_network: Some(agent.host_network).filter(|h| *h),
            tolerations: Some(agent.tolerations.clone()).filter(|t| !t.is_empty()),
            node_selector: Some(BTreeMap::from([(
                "kubernetes.io/os".to_owned(),
                "linux".to_owned(),
            )])),
            volumes: Some(vec![agent_token_volume()]),
            ..PodSpec::default()
        }),
    }
}

/// The agent's container: its server and the API server at the endpoint, its probes, and its
/// ports (declared so that agents in the host network never share a node's ports).
fn agent_container(agent: &Agent, server_host: &str, server_port: u16, api_port: u16) -> Container {
    Container {
        name: AGENT_NAME.into(),
        image: Some(agent.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/proxy-agent".into()]),
        args: Some(agent_args(agent, server_host, server_port)),
        env: Some(vec![
            EnvVar {
                name: "KUBERNETES_SERVICE_HOST".into(),
                value: Some(server_host.into()),
                value_from: None,
            },
            EnvVar {
                name: "KUBERNETES_SERVICE_PORT".into(),
                value: Some(api_port.to_string()),
                value_from: None,
            },
        ]),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(15),
            ..http_probe("/healthz", HEALTH_PORT, 10)
        }),
        readiness_probe: Some(http_probe("/readyz", HEALTH_PORT, 5)),
        // Declared so that agents in the host network never share a node's ports (the
        // scheduler places such pods by them).
        ports: Some(
            [("admin", ADMIN_PORT), ("health", HEALTH_PORT)]
                .into_iter()
                .map(|(name, port)| ContainerPort {
                    name: Some(name.into()),
                    container_port: i32::from(port),
                    host_port: agent.host_network.then_some(i32::from(port)),
                    protocol: Some("TCP".into()),
                    ..ContainerPort::default()
                })
                .collect(),
        ),
        volume_mounts: Some(vec![VolumeMount {
            name: AGENT_TOKEN_FILE.into(),
            mount_path: AGENT_TOKEN_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    }
}

/// The agent's service-account token for the server's audience, projected.
fn agent_token_volume() -> Volume {
    Volume {
        name: AGENT_TOKEN_FILE.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    audience: Some(SERVER_IDENTITY.into()),
                    expiration_seconds: Some(AGENT_TOKEN_SECONDS),
                    path: AGENT_TOKEN_FILE.into(),
                }),
                ..VolumeProjection::default()
            }]),
            default_mode: None,
        }),
        ..Volume::default()
    }
}

/// The agents' workload of `mode` (a DaemonSet, or a Deployment of its replicas) running `pod`.
fn agent_workload(
    mode: AgentMode,
    pod: PodTemplateSpec,
    labels: &BTreeMap<String, String>,
) -> AgentWorkload {
    let selector = LabelSelector {
        match_labels: Some(labels.clone()),
        ..LabelSelector::default()
    };
    let workload_meta = meta(AGENT_NAME, Some(AGENT_NAMESPACE), labels);
    match mode {
        AgentMode::DaemonSet => AgentWorkload::DaemonSet(Box::new(DaemonSet {
            metadata: workload_meta,
            spec: Some(DaemonSetSpec {
                selector,
                template: pod,
                ..DaemonSetSpec::default()
            }),
            status: None,
        })),
        AgentMode::Deployment { replicas } => AgentWorkload::Deployment(Box::new(Deployment {
            metadata: workload_meta,
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector,
                template: pod,
                ..DeploymentSpec::default()
            }),
            status: None,
        })),
    }
}

/// The agents' objects for a server reachable at `server_host:server_port` (the endpoint's
/// host and the server port); `api_port` is the endpoint's port. The agents read the servers'
/// leases from the API server at the endpoint (`KUBERNETES_SERVICE_HOST`/`_PORT` set to it, as
/// kubeadm points kube-proxy at the endpoint), so they need no Service proxy on the node.
#[must_use]
pub fn agent_objects(
    agent: &Agent,
    server_host: &str,
    server_port: u16,
    api_port: u16,
) -> AgentObjects {
    let labels = BTreeMap::from([("k8s-app".to_owned(), AGENT_NAME.to_owned())]);
    let pod = agent_pod(agent, server_host, server_port, api_port, &labels);
    let workload = agent_workload(agent.mode, pod, &labels);
    let leases = |name: &str, verbs: &[&str]| Role {
        metadata: meta(name, Some(LEASE_NAMESPACE), &labels),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        }]),
    };
    let binding = |name: &str, subject: Subject| RoleBinding {
        metadata: meta(name, Some(LEASE_NAMESPACE), &labels),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: name.into(),
        },
        subjects: Some(vec![subject]),
    };
    let server_user = Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "User".into(),
        name: SERVER_IDENTITY.into(),
        namespace: None,
    };
    AgentObjects {
        lease_role: leases(
            SERVER_IDENTITY,
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        lease_role_binding: binding(SERVER_IDENTITY, server_user.clone()),
        agent_lease_role: leases(AGENT_NAME, &["get", "list", "watch"]),
        agent_lease_role_binding: binding(
            AGENT_NAME,
            Subject {
                api_group: None,
                kind: "ServiceAccount".into(),
                name: AGENT_NAME.into(),
                namespace: Some(AGENT_NAMESPACE.into()),
            },
        ),
        service_account: ServiceAccount {
            metadata: meta(AGENT_NAME, Some(AGENT_NAMESPACE), &labels),
            ..ServiceAccount::default()
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: meta(SERVER_IDENTITY, None, &labels),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: "system:auth-delegator".into(),
            },
            subjects: Some(vec![server_user]),
        },
        workload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(extra: &[&str]) -> Server {
        Server {
            image: "registry.k8s.io/kas-network-proxy/proxy-server:v0.36.0".into(),
            port: 8132,
            resources: None,
            extra_args: extra.iter().map(|s| (*s).to_owned()).collect(),
            security_context: None,
        }
    }

    fn agent(mode: AgentMode) -> Agent {
        Agent {
            image: "registry.k8s.io/kas-network-proxy/proxy-agent:v0.36.0".into(),
            host_network: true,
            tolerations: vec![Toleration {
                key: Some("CriticalAddonsOnly".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }],
            extra_args: vec![
                "--sync-interval=2s".into(),
                "--proxy-server-port=9000".into(),
            ],
            mode,
        }
    }

    #[test]
    fn the_server_listens_for_agents_on_its_port_and_serves_the_api_server_over_its_socket() {
        let args = server_args(&server(&["--keepalive-time=30s"]), &Layout::default());
        for want in [
            "--uds-name=/run/konnectivity/konnectivity-server.socket",
            "--agent-port=8132",
            "--server-port=0",
            "--cluster-cert=/etc/kubernetes/pki/apiserver/tls.crt",
            "--kubeconfig=/etc/kubernetes/konnectivity/kubeconfig",
            "--authentication-audience=system:konnectivity-server",
            "--agent-service-account=konnectivity-agent",
            "--enable-lease-controller",
            "--lease-label=k8s-app=konnectivity-server",
            "--keepalive-time=30s",
        ] {
            assert!(
                args.contains(&want.to_owned()),
                "{want} missing from {args:?}"
            );
        }
        // The servers are counted by their leases, not by a flag that would change with the
        // replica count; the user's value replaces a default.
        assert!(!args.iter().any(|a| a.starts_with("--server-count")));
        let args = server_args(&server(&["--agent-port=9000"]), &Layout::default());
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("--agent-port"))
                .count(),
            1
        );
        assert!(args.contains(&"--agent-port=9000".to_owned()));
        assert!(egress_selector_configuration().contains(UDS_NAME));
    }

    #[test]
    fn the_agents_dial_the_endpoint_with_a_token_for_the_server_and_honour_every_setting() {
        let daemon = agent_objects(&agent(AgentMode::DaemonSet), "10.0.0.10", 8132, 6443);
        let AgentWorkload::DaemonSet(ds) = &daemon.workload else {
            panic!("a DaemonSet was asked for");
        };
        let pod = ds.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert_eq!(pod.host_network, Some(true));
        assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
        let args = pod.containers[0].args.clone().unwrap();
        assert!(args.contains(&"--proxy-server-host=10.0.0.10".to_owned()));
        // extraArgs win over the defaults.
        assert!(args.contains(&"--proxy-server-port=9000".to_owned()));
        assert!(!args.contains(&"--proxy-server-port=8132".to_owned()));
        assert!(args.contains(&"--sync-interval=2s".to_owned()));
        assert!(args.contains(&"--count-server-leases".to_owned()));
        // The leases are read from the API server at the endpoint, not through a Service.
        let env = pod.containers[0].env.clone().unwrap();
        assert!(env.iter().any(
            |e| e.name == "KUBERNETES_SERVICE_HOST" && e.value.as_deref() == Some("10.0.0.10")
        ));
        assert!(
            env.iter()
                .any(|e| e.name == "KUBERNETES_SERVICE_PORT" && e.value.as_deref() == Some("6443"))
        );
        let token = pod.volumes.as_ref().unwrap()[0]
            .projected
            .as_ref()
            .unwrap()
            .sources
            .as_ref()
            .unwrap()[0]
            .service_account_token
            .clone()
            .unwrap();
        assert_eq!(token.audience.as_deref(), Some(SERVER_IDENTITY));
        let deployment = agent_objects(
            &Agent {
                host_network: false,
                ..agent(AgentMode::Deployment { replicas: 3 })
            },
            "k.example.com",
            8132,
            6443,
        );
        let AgentWorkload::Deployment(d) = &deployment.workload else {
            panic!("a Deployment was asked for");
        };
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
        let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert_eq!(pod.host_network, None);
        let values = deployment.to_values().unwrap();
        let kinds: Vec<&str> = values.iter().map(|v| v["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "Deployment"
            ]
        );
        // The server writes its lease, the agents only read them.
        let verbs = |v: &serde_json::Value| v["rules"][0]["verbs"].as_array().unwrap().clone();
        assert_eq!(values[3]["subjects"][0]["name"], SERVER_IDENTITY);
        assert!(verbs(&values[2]).contains(&"create".into()));
        assert_eq!(values[5]["subjects"][0]["kind"], "ServiceAccount");
        assert!(!verbs(&values[4]).contains(&"create".into()));
        assert_eq!(values[1]["roleRef"]["name"], "system:auth-delegator");
        assert_eq!(values[1]["subjects"][0]["name"], SERVER_IDENTITY);
        // Every object built is among those removed when konnectivity is turned off.
        for v in values.iter().chain(&daemon.to_values().unwrap()) {
            assert!(agent_identities().iter().any(|(api, kind, ns, name)| {
                v["apiVersion"] == *api
                    && v["kind"] == *kind
                    && v["metadata"]["namespace"].as_str() == *ns
                    && v["metadata"]["name"] == *name
            }));
        }
    }

    #[test]
    fn the_default_version_is_a_known_release_with_lease_counting() {
        assert_eq!(default_version(36), Some("v0.36.0"));
        assert_eq!(default_version(35), Some("v0.34.0"));
        assert_eq!(default_version(33), Some("v0.33.0"));
        assert_eq!(default_version(32), None);
        for minor in 23..=36 {
            if let Some(v) = default_version(minor) {
                assert!(!is_too_old(v), "{v}");
            }
        }
        assert!(is_too_old("v0.32.1"));
        assert!(is_too_old("v0.1.5"));
        assert!(!is_too_old("v0.33.0"));
        assert!(!is_too_old("mirror-2026"));
    }
}
