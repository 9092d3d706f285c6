//! kube-apiserver flags for the local management cluster.

use std::path::Path;
use std::process::Command;

use crate::tools::Tools;

/// Files and settings the API server is started with.
pub(crate) struct ApiServerConfig<'a> {
    pub dir: &'a Path,
    pub port: u16,
    pub etcd_url: &'a str,
    pub service_cidr: &'a str,
    /// Serve on every address and advertise this one (else loopback only).
    pub advertise_address: Option<std::net::Ipv4Addr>,
}

/// Audit policy: every request at `Metadata` level (no bodies, so no Secret data in logs),
/// but writes to infrastructure and control-plane objects with their request bodies.
pub(crate) const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
# Writes to infrastructure providers' objects with their bodies (kamaji-rs may patch nothing
# but an infrastructure cluster's spec.controlPlaneEndpoint).
- level: Request
  verbs: [create, update, patch]
  resources: [{group: infrastructure.cluster.x-k8s.io}]
# Writes to control planes with their bodies (a status patch says what a reconcile changed).
- level: Request
  verbs: [create, update, patch]
  resources: [{group: controlplane.cluster.x-k8s.io}]
- level: Metadata
";

/// Builds the kube-apiserver command: RBAC + Node authorizer, bootstrap-token authentication,
/// service-account keys, audit log; on 127.0.0.1 unless an advertise address is given.
pub(crate) fn command(tools: &Tools, c: &ApiServerConfig<'_>) -> Command {
    let f = |name: &str| c.dir.join(name).display().to_string();
    let mut cmd = Command::new(tools.path("kube-apiserver"));
    match c.advertise_address {
        Some(ip) => cmd
            .arg("--bind-address=0.0.0.0")
            .arg(format!("--advertise-address={ip}"))
            .arg("--endpoint-reconciler-type=lease"),
        None => cmd
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg("--endpoint-reconciler-type=none"),
    };
    cmd.arg(format!("--etcd-servers={}", c.etcd_url))
        .arg(format!("--secure-port={}", c.port))
        .arg(format!("--tls-cert-file={}", f("apiserver.crt")))
        .arg(format!("--tls-private-key-file={}", f("apiserver.key")))
        .arg(format!("--client-ca-file={}", f("ca.crt")))
        .arg(format!(
            "--service-account-issuer=https://127.0.0.1:{}",
            c.port
        ))
        .arg(format!("--service-account-key-file={}", f("sa.pub")))
        .arg(format!(
            "--service-account-signing-key-file={}",
            f("sa.key")
        ))
        .arg(format!("--service-cluster-ip-range={}", c.service_cidr))
        .arg("--authorization-mode=Node,RBAC")
        // Kubelets are reached by address (their host names resolve nowhere), as kubeadm
        // configures it, with a client certificate of the API server's own.
        .arg("--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname")
        .arg(format!(
            "--kubelet-client-certificate={}",
            f("apiserver-kubelet-client.crt")
        ))
        .arg(format!(
            "--kubelet-client-key={}",
            f("apiserver-kubelet-client.key")
        ))
        .arg("--enable-bootstrap-token-auth=true")
        .arg("--allow-privileged=true")
        .arg(format!("--audit-log-path={}", f("audit.log")))
        .arg(format!("--audit-policy-file={}", f("audit-policy.yaml")))
        .arg("--audit-log-maxsize=0")
        .arg("--profiling=false")
        .arg("--v=1");
    cmd
}
