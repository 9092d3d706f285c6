//! The **plan** step: desired management-cluster objects as pure functions of the validated
//! spec, the endpoint and the observed key material (no I/O, no randomness).
//!
//! - [`service`]: the control-plane Service (type, port, selector, user labels/annotations,
//!   extra ports, load-balancer settings);
//! - [`deployment`]: kube-apiserver, kube-controller-manager and kube-scheduler in one pod
//!   template, arguments from [`crate::args::merge`], PKI mounted read-only with mode 0600,
//!   probes, the whole `spec.deployment` section, and a pod-template annotation carrying the
//!   hash of the mounted key material so a reissued certificate rolls the pods;
//! - [`desired_hash`]: the hash stored on each applied object, so that an unchanged object is not
//!   written again (a no-op reconcile makes no write request).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, HTTPGetAction, KeyToPath, PodSpec, PodTemplateSpec, Probe,
    SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kamaji_api::kcp::{ProbeSpec, ServiceType};
use kamaji_api::meta::{CLUSTER_NAME_LABEL, KAMAJI_NAME_LABEL};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::args::{self, Component, Flag};
use crate::endpoint::Endpoint;
use crate::pki::{KUBECONFIG_KEY, LeafKind, leaf_secret_name};
use crate::spec::ValidSpec;

/// Annotation holding the hash of the desired object last applied by kamaji-rs.
pub const DESIRED_HASH_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kamaji-rs-desired-hash";
/// Pod-template annotation holding the hash of the mounted key material and configuration.
pub const PKI_HASH_ANNOTATION: &str = "controlplane.cluster.x-k8s.io/kamaji-rs-pki-hash";
/// Name of the API server container port.
pub const API_SERVER_PORT_NAME: &str = "kube-apiserver";
/// kube-controller-manager's secure port (kubeadm default).
pub const CONTROLLER_MANAGER_PORT: i32 = 10257;
/// kube-scheduler's secure port (kubeadm default).
pub const SCHEDULER_PORT: i32 = 10259;
/// Mode of mounted key files: owner read/write only.
pub const SECRET_MODE: i32 = 0o600;

/// How the API server reaches its datastore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatastoreWiring {
    /// `--etcd-servers` URLs.
    pub servers: Vec<String>,
    /// `--etcd-prefix`.
    pub prefix: String,
    /// Secret holding `ca.crt`, `tls.crt`, `tls.key` for TLS, if the datastore uses TLS.
    pub tls_secret: Option<String>,
}

/// A stable hash of any serialisable value (hex SHA-256 of its JSON), e.g. of a desired object.
#[must_use]
pub fn desired_hash<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value).unwrap_or_default();
    hex::encode(Sha256::digest(json))
}

/// Stamps `obj`'s metadata with [`DESIRED_HASH_ANNOTATION`] = hash of the object as it is now.
pub fn stamp_hash(meta: &mut ObjectMeta, hash: String) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DESIRED_HASH_ANNOTATION.into(), hash);
}

/// Labels every control-plane object carries.
#[must_use]
pub fn common_labels(spec: &ValidSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (KAMAJI_NAME_LABEL.to_owned(), spec.names.pod_label_value()),
        (
            CLUSTER_NAME_LABEL.to_owned(),
            spec.names.cluster_label_value(),
        ),
    ])
}

/// The pod selector of the control-plane Deployment and Service.
#[must_use]
pub fn selector_labels(spec: &ValidSpec) -> BTreeMap<String, String> {
    BTreeMap::from([(KAMAJI_NAME_LABEL.to_owned(), spec.names.pod_label_value())])
}

fn meta(spec: &ValidSpec, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(spec.namespace.clone()),
        labels: Some(common_labels(spec)),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// The control-plane Service.
#[must_use]
pub fn service(spec: &ValidSpec, owner: &OwnerReference) -> Service {
    let net = spec.kcp.spec.fields.network.clone().unwrap_or_default();
    let mut m = meta(spec, spec.names.service(), owner);
    if let Some(extra) = &net.service_labels {
        let labels = m.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in extra {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    m.annotations.clone_from(&net.service_annotations);
    let port = i32::from(spec.port);
    let mut ports = vec![ServicePort {
        name: Some(API_SERVER_PORT_NAME.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }];
    for p in net.additional_service_ports.iter().flatten() {
        ports.push(ServicePort {
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
        });
    }
    let lb = spec.service_type == ServiceType::LoadBalancer;
    let lb_config = net.load_balancer_config.clone().unwrap_or_default();
    let mut svc = Service {
        metadata: m,
        spec: Some(ServiceSpec {
            type_: Some(spec.service_type.as_str().into()),
            selector: Some(selector_labels(spec)),
            ports: Some(ports),
            load_balancer_ip: if lb {
                spec.service_address.clone()
            } else {
                None
            },
            load_balancer_source_ranges: if lb {
                lb_config.load_balancer_source_ranges
            } else {
                None
            },
            load_balancer_class: if lb {
                lb_config.load_balancer_class
            } else {
                None
            },
            allocate_load_balancer_node_ports: if lb {
                net.allocate_load_balancer_node_ports
            } else {
                None
            },
            ..ServiceSpec::default()
        }),
        status: None,
    };
    let hash = desired_hash(&svc);
    stamp_hash(&mut svc.metadata, hash);
    svc
}

/// kamaji-rs's default flags of one component (before `extraArgs`).
#[must_use]
#[allow(clippy::too_many_lines)] // one flag per line, kubeadm's static-pod flags in order
pub fn default_flags(
    spec: &ValidSpec,
    c: Component,
    ds: &DatastoreWiring,
    endpoint: &Endpoint,
) -> Vec<Flag> {
    let pki = "/etc/kubernetes/pki";
    match c {
        Component::ApiServer => {
            let mut f = vec![
                Flag::new("allow-privileged", "true"),
                Flag::new("authorization-mode", "Node,RBAC"),
                Flag::new("client-ca-file", format!("{pki}/ca/tls.crt")),
                Flag::new("enable-admission-plugins", spec.admission_plugins.join(",")),
                Flag::new("enable-bootstrap-token-auth", "true"),
                Flag::new("etcd-servers", ds.servers.join(",")),
                Flag::new("etcd-prefix", ds.prefix.clone()),
            ];
            if ds.tls_secret.is_some() {
                f.push(Flag::new("etcd-cafile", format!("{pki}/datastore/ca.crt")));
                f.push(Flag::new(
                    "etcd-certfile",
                    format!("{pki}/datastore/tls.crt"),
                ));
                f.push(Flag::new(
                    "etcd-keyfile",
                    format!("{pki}/datastore/tls.key"),
                ));
            }
            // The endpoint chosen before the first Deployment exists, so the flag never changes
            // later (a later change would roll every pod right after initialization).
            if let Ok(ip) = endpoint.host.parse::<std::net::IpAddr>() {
                f.push(Flag::new("advertise-address", ip.to_string()));
            }
            f.extend([
                Flag::new(
                    "kubelet-client-certificate",
                    format!("{pki}/apiserver-kubelet-client/tls.crt"),
                ),
                Flag::new(
                    "kubelet-client-key",
                    format!("{pki}/apiserver-kubelet-client/tls.key"),
                ),
                Flag::new(
                    "kubelet-preferred-address-types",
                    spec.kubelet_address_types.join(","),
                ),
                Flag::new(
                    "proxy-client-cert-file",
                    format!("{pki}/front-proxy-client/tls.crt"),
                ),
                Flag::new(
                    "proxy-client-key-file",
                    format!("{pki}/front-proxy-client/tls.key"),
                ),
                Flag::new("requestheader-allowed-names", "front-proxy-client"),
                Flag::new(
                    "requestheader-client-ca-file",
                    format!("{pki}/front-proxy-ca/tls.crt"),
                ),
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
                Flag::new("service-account-key-file", format!("{pki}/sa/tls.crt")),
                Flag::new(
                    "service-account-signing-key-file",
                    format!("{pki}/sa/tls.key"),
                ),
                Flag::new(
                    "service-cluster-ip-range",
                    join_nets(spec.network.service_cidrs()),
                ),
                Flag::new("tls-cert-file", format!("{pki}/apiserver/tls.crt")),
                Flag::new("tls-private-key-file", format!("{pki}/apiserver/tls.key")),
            ]);
            f
        }
        Component::ControllerManager => {
            let kc = "/etc/kubernetes/controller-manager/kubeconfig";
            let mut f = vec![
                Flag::new("authentication-kubeconfig", kc),
                Flag::new("authorization-kubeconfig", kc),
                Flag::new("bind-address", "0.0.0.0"),
                Flag::new("client-ca-file", format!("{pki}/ca/tls.crt")),
                Flag::new("cluster-name", spec.cluster.name.clone()),
                Flag::new("cluster-signing-cert-file", format!("{pki}/ca/tls.crt")),
                Flag::new("cluster-signing-key-file", format!("{pki}/ca/tls.key")),
                Flag::new("controllers", "*,bootstrapsigner,tokencleaner"),
                Flag::new("kubeconfig", kc),
                Flag::new("leader-elect", "true"),
                Flag::new(
                    "requestheader-client-ca-file",
                    format!("{pki}/front-proxy-ca/tls.crt"),
                ),
                Flag::new("root-ca-file", format!("{pki}/ca/tls.crt")),
                Flag::new(
                    "service-account-private-key-file",
                    format!("{pki}/sa/tls.key"),
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
        Component::Scheduler => {
            let kc = "/etc/kubernetes/scheduler/kubeconfig";
            vec![
                Flag::new("authentication-kubeconfig", kc),
                Flag::new("authorization-kubeconfig", kc),
                Flag::new("bind-address", "0.0.0.0"),
                Flag::new("kubeconfig", kc),
                Flag::new("leader-elect", "true"),
            ]
        }
    }
}

fn join_nets(nets: &[ipnet::IpNet]) -> String {
    nets.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The full argument list of a component.
#[must_use]
pub fn component_args(
    spec: &ValidSpec,
    c: Component,
    ds: &DatastoreWiring,
    endpoint: &Endpoint,
) -> Vec<String> {
    args::merge(c, &default_flags(spec, c, ds, endpoint), spec.extra_args(c))
}

struct Mount {
    volume: &'static str,
    path: &'static str,
}

const fn mount(volume: &'static str, path: &'static str) -> Mount {
    Mount { volume, path }
}

fn mounts(c: Component, tls_datastore: bool) -> Vec<Mount> {
    match c {
        Component::ApiServer => {
            let mut m = vec![
                mount("ca", "/etc/kubernetes/pki/ca"),
                mount("sa", "/etc/kubernetes/pki/sa"),
                mount("front-proxy-ca", "/etc/kubernetes/pki/front-proxy-ca"),
                mount("apiserver", "/etc/kubernetes/pki/apiserver"),
                mount(
                    "apiserver-kubelet-client",
                    "/etc/kubernetes/pki/apiserver-kubelet-client",
                ),
                mount(
                    "front-proxy-client",
                    "/etc/kubernetes/pki/front-proxy-client",
                ),
            ];
            if tls_datastore {
                m.push(mount("datastore", "/etc/kubernetes/pki/datastore"));
            }
            m
        }
        Component::ControllerManager => vec![
            mount("ca", "/etc/kubernetes/pki/ca"),
            mount("sa", "/etc/kubernetes/pki/sa"),
            mount("front-proxy-ca", "/etc/kubernetes/pki/front-proxy-ca"),
            mount(
                "controller-manager-kubeconfig",
                "/etc/kubernetes/controller-manager",
            ),
        ],
        Component::Scheduler => vec![mount("scheduler-kubeconfig", "/etc/kubernetes/scheduler")],
    }
}

fn secret_volume(name: &str, secret: String, items: Option<Vec<(&str, &str)>>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(SECRET_MODE),
            items: items.map(|list| {
                list.into_iter()
                    .map(|(k, p)| KeyToPath {
                        key: k.into(),
                        path: p.into(),
                        mode: None,
                    })
                    .collect()
            }),
            optional: None,
        }),
        ..Volume::default()
    }
}

fn pki_volumes(spec: &ValidSpec, ds: &DatastoreWiring) -> Vec<Volume> {
    let n = &spec.names;
    let kc = Some(vec![(KUBECONFIG_KEY, "kubeconfig")]);
    let mut v = vec![
        secret_volume("ca", n.ca_secret(), None),
        secret_volume("sa", n.service_account_secret(), None),
        secret_volume(
            "front-proxy-ca",
            n.front_proxy_ca_secret(),
            Some(vec![("tls.crt", "tls.crt")]),
        ),
        secret_volume(
            "apiserver",
            leaf_secret_name(spec, LeafKind::ApiServer),
            None,
        ),
        secret_volume(
            "apiserver-kubelet-client",
            leaf_secret_name(spec, LeafKind::KubeletClient),
            None,
        ),
        secret_volume(
            "front-proxy-client",
            leaf_secret_name(spec, LeafKind::FrontProxyClient),
            None,
        ),
        secret_volume(
            "controller-manager-kubeconfig",
            leaf_secret_name(spec, LeafKind::ControllerManager),
            kc.clone(),
        ),
        secret_volume(
            "scheduler-kubeconfig",
            leaf_secret_name(spec, LeafKind::Scheduler),
            kc,
        ),
    ];
    if let Some(secret) = &ds.tls_secret {
        v.push(secret_volume("datastore", secret.clone(), None));
    }
    v
}

/// kubeadm's static-pod probe timings, with a startup probe that lets the first start take up
/// to 5 minutes.
fn default_probe(kind: &str) -> ProbeSpec {
    match kind {
        "liveness" => ProbeSpec {
            initial_delay_seconds: Some(10),
            timeout_seconds: Some(15),
            period_seconds: Some(10),
            success_threshold: Some(1),
            failure_threshold: Some(8),
        },
        "readiness" => ProbeSpec {
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(15),
            period_seconds: Some(1),
            success_threshold: Some(1),
            failure_threshold: Some(3),
        },
        _ => ProbeSpec {
            initial_delay_seconds: Some(0),
            timeout_seconds: Some(15),
            period_seconds: Some(2),
            success_threshold: Some(1),
            failure_threshold: Some(150),
        },
    }
}

fn pick(kind: &str, set: Option<&kamaji_api::kcp::ProbeSet>) -> Option<ProbeSpec> {
    let set = set?;
    match kind {
        "liveness" => set.liveness.clone(),
        "readiness" => set.readiness.clone(),
        _ => set.startup.clone(),
    }
}

/// One probe: each timing from the component's `probes`, else `deployment.probes`, else the
/// default (each field on its own).
fn probe(spec: &ValidSpec, c: Component, kind: &str, path: &str, port: i32) -> Probe {
    let comp = pick(kind, spec.component(c).and_then(|s| s.probes.as_ref()));
    let global = pick(
        kind,
        spec.kcp
            .spec
            .fields
            .deployment
            .as_ref()
            .and_then(|d| d.probes.as_ref()),
    );
    let def = default_probe(kind);
    let field = |f: fn(&ProbeSpec) -> Option<i32>| {
        comp.as_ref()
            .and_then(f)
            .or_else(|| global.as_ref().and_then(f))
            .or_else(|| f(&def))
    };
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(port),
            scheme: Some("HTTPS".into()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: field(|p| p.initial_delay_seconds),
        timeout_seconds: field(|p| p.timeout_seconds),
        period_seconds: field(|p| p.period_seconds),
        success_threshold: field(|p| p.success_threshold),
        failure_threshold: field(|p| p.failure_threshold),
        ..Probe::default()
    }
}

fn container(
    spec: &ValidSpec,
    c: Component,
    ds: &DatastoreWiring,
    endpoint: &Endpoint,
) -> Container {
    let section = spec.component(c);
    let image_name = section
        .and_then(|s| s.container_image_name.clone())
        .unwrap_or_else(|| c.name().to_owned());
    let (port, live, ready) = match c {
        Component::ApiServer => (i32::from(spec.port), "/livez", "/readyz"),
        Component::ControllerManager => (CONTROLLER_MANAGER_PORT, "/healthz", "/healthz"),
        Component::Scheduler => (SCHEDULER_PORT, "/healthz", "/healthz"),
    };
    let mut volume_mounts: Vec<VolumeMount> = mounts(c, ds.tls_secret.is_some())
        .into_iter()
        .map(|m| VolumeMount {
            name: m.volume.into(),
            mount_path: m.path.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect();
    volume_mounts.extend(
        section
            .and_then(|s| s.extra_volume_mounts.clone())
            .unwrap_or_default(),
    );
    Container {
        name: c.name().into(),
        image: Some(format!(
            "{}/{image_name}:{}",
            spec.registry, spec.version_tag
        )),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![c.name().into()]),
        args: Some(component_args(spec, c, ds, endpoint)),
        ports: Some(vec![ContainerPort {
            name: Some(if c == Component::ApiServer {
                API_SERVER_PORT_NAME.into()
            } else {
                "https".into()
            }),
            container_port: port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(probe(spec, c, "liveness", live, port)),
        readiness_probe: Some(probe(spec, c, "readiness", ready, port)),
        startup_probe: Some(probe(spec, c, "startup", live, port)),
        resources: section.and_then(|s| s.resources.clone()),
        volume_mounts: Some(volume_mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
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

/// The control-plane Deployment. `pki_hash` is the hash of the mounted Secrets' content.
#[must_use]
pub fn deployment(
    spec: &ValidSpec,
    owner: &OwnerReference,
    ds: &DatastoreWiring,
    pki_hash: &str,
    endpoint: &Endpoint,
) -> Deployment {
    let d = spec.kcp.spec.fields.deployment.clone().unwrap_or_default();
    let mut m = meta(spec, spec.names.deployment(), owner);
    if let Some(extra) = d.additional_metadata.as_ref() {
        merge_into(
            m.labels.get_or_insert_with(BTreeMap::new),
            extra.labels.as_ref(),
        );
        if extra.annotations.is_some() {
            merge_into(
                m.annotations.get_or_insert_with(BTreeMap::new),
                extra.annotations.as_ref(),
            );
        }
    }
    let mut pod_labels = common_labels(spec);
    let mut pod_annotations =
        BTreeMap::from([(PKI_HASH_ANNOTATION.to_owned(), pki_hash.to_owned())]);
    if let Some(extra) = d.pod_additional_metadata.as_ref() {
        merge_into(&mut pod_labels, extra.labels.as_ref());
        merge_into(&mut pod_annotations, extra.annotations.as_ref());
    }
    let mut volumes = pki_volumes(spec, ds);
    volumes.extend(d.extra_volumes.clone().unwrap_or_default());
    let mut containers: Vec<Container> = [
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ]
    .into_iter()
    .map(|c| container(spec, c, ds, endpoint))
    .collect();
    containers.extend(d.extra_containers.clone().unwrap_or_default());
    let mut dep = Deployment {
        metadata: m,
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(spec)),
                ..LabelSelector::default()
            },
            strategy: Some(d.strategy.clone().unwrap_or_else(default_strategy)),
            revision_history_limit: Some(10),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers,
                    init_containers: d.extra_init_containers.clone().filter(|v| !v.is_empty()),
                    volumes: Some(volumes),
                    node_selector: d.node_selector.clone(),
                    affinity: d.affinity.clone(),
                    tolerations: d.tolerations.clone(),
                    topology_spread_constraints: d.topology_spread_constraints.clone(),
                    runtime_class_name: d.runtime_class_name.clone(),
                    service_account_name: d.service_account_name.clone(),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };
    let hash = desired_hash(&dep);
    stamp_hash(&mut dep.metadata, hash);
    dep
}

fn merge_into(into: &mut BTreeMap<String, String>, from: Option<&BTreeMap<String, String>>) {
    for (k, v) in from.into_iter().flatten() {
        into.entry(k.clone()).or_insert_with(|| v.clone());
    }
}
