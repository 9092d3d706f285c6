//! The management cluster on real machines: one to three [`Machine`]s whose kubelets join a
//! [`LocalCluster`], run its pods (the tenants' control planes) as containers, with
//! kube-proxy serving its Services, and the [`LoadBalancer`] stand-in in front of them.
//!
//! The cluster must be started for it: `advertise_address(`[`UNDERLAY_GATEWAY`]`)` (the
//! machines reach the API server there) and `cluster_cidr(`[`MANAGEMENT_CLUSTER_CIDR`]`)`
//! (each Node gets a `/24` pod CIDR). Each machine then has, as a node set up by hand the
//! way "Kubernetes the hard way" does it (there is no kubeadm in front of this API server):
//!
//! - `/etc/kubernetes/kubelet.conf`: a client certificate `system:node:<name>` in
//!   `system:nodes` from the cluster CA, and `/var/lib/kubelet/config.yaml`: webhook
//!   authentication and authorization, the CA for client certificates, the cgroupfs driver
//!   and `failCgroupV1: false` (this machine kind), a static-pod path; the Node carries a
//!   `topology.kubernetes.io/zone` label (`zone-a`, `zone-b`, …);
//! - kube-proxy as a static pod (nftables mode, its image from [`images`](crate::images)),
//!   authenticated as `system:kube-proxy` (bound to `system:node-proxier` by default), with
//!   `clusterCIDR` set so traffic from outside the pod network is masqueraded;
//! - the control-plane images of the requested versions, the pause, kube-proxy and
//!   konnectivity-server images and the netcheck test client (an [`ImageStore`]).
//!
//! Once every Node is Ready with its pod CIDR, each CIDR is routed to its machine in the
//! test's namespace and in every other machine (a cloud route controller's role; before any
//! pod starts), and the cluster's service CIDR is routed to the first machine, whose
//! kube-proxy serves `ClusterIP`s to the test and the manager running in the test's namespace
//! (as on a control-plane host of a kubeadm cluster, which runs kube-proxy too).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::Node;
use kamaji_testenv::pki::kubeconfig;
use kamaji_testenv::{KUBERNETES_VERSION, LocalCluster, Tools};
use kube::api::Api;

use crate::images::{control_plane_images, kube_proxy_image, node_images};
use crate::load_balancer::LoadBalancer;
use crate::machine::{Machine, MachineSpec};
use crate::network;
use crate::store::ImageStore;

/// The management cluster's pod network (`/24` per Node), apart from the tenants' default
/// `10.244.0.0/16` so both can be routed in the test's namespace.
pub const MANAGEMENT_CLUSTER_CIDR: &str = "10.220.0.0/16";

/// The pod network of a second management cluster in the same test (the `clusterctl move`
/// target): its own, since both clusters' machines share the underlay and the test's
/// namespace routes each Node's pod CIDR to its machine.
pub const SECOND_MANAGEMENT_CLUSTER_CIDR: &str = "10.221.0.0/16";

/// The service network of that second management cluster: the test's namespace routes a
/// cluster's service CIDR to its first machine, so two clusters need two.
pub const SECOND_MANAGEMENT_SERVICE_CIDR: &str = "10.0.1.0/24";

/// Machine indices `0..10` (`10.200.0.10`–`.19`) are the management machines'; stand-in
/// infrastructure providers number their machines from 20.
const MAX_MACHINES: u8 = 10;

/// Indices taken by live management machines of this process (two management clusters may
/// share one test network).
static INDICES: Mutex<BTreeSet<u8>> = Mutex::new(BTreeSet::new());

/// Options for [`ManagementMachines`].
#[derive(Debug, Clone)]
pub struct Builder {
    machines: usize,
    versions: Vec<String>,
    capi_images: bool,
    test_images: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            machines: 1,
            versions: vec![KUBERNETES_VERSION.to_owned()],
            capi_images: false,
            test_images: true,
        }
    }
}

impl Builder {
    /// How many machines (1 to 3, default 1).
    #[must_use]
    pub fn machines(mut self, n: usize) -> Self {
        self.machines = n.clamp(1, 3);
        self
    }

    /// Also import the control-plane images of the built `version` (default: only
    /// [`KUBERNETES_VERSION`]'s).
    #[must_use]
    pub fn with_version(mut self, version: &str) -> Self {
        if !self.versions.iter().any(|v| v == version) {
            self.versions.push(version.to_owned());
        }
        self
    }

    /// Also import Cluster API's controller images ([`crate::images::capi_images`]), for
    /// `clusterctl init` to run the core manager and CABPK as pods (default: off).
    #[must_use]
    pub fn with_capi_images(mut self, on: bool) -> Self {
        self.capi_images = on;
        self
    }

    /// Also import the images only tests run (default: on): the netcheck client, the
    /// konnectivity server and kine ([`crate::images::test_images_of_management_machines`]).
    /// Off, the machines need none of those programs built (`make demo` builds only what it
    /// runs: `tests/tools/build.sh --demo`).
    #[must_use]
    pub fn with_test_images(mut self, on: bool) -> Self {
        self.test_images = on;
        self
    }

    /// Starts the machines and joins them to `cluster`; returns once every Node is Ready
    /// and routed.
    ///
    /// # Errors
    /// When `cluster` was not started for machines, or a machine does not come up (the
    /// message carries its kubelet log).
    pub async fn start(self, cluster: &LocalCluster) -> Result<ManagementMachines> {
        self.boot(cluster.tools()).await?.join(cluster).await
    }

    /// Boots the machines (namespaces, containerd, images imported) without a cluster, so
    /// that it can run while the cluster starts; [`BootedMachines::join`] joins them.
    ///
    /// # Errors
    /// When a machine does not come up.
    pub async fn boot(self, tools: &Tools) -> Result<BootedMachines> {
        let store = image_store(tools, &self.versions, self.capi_images, self.test_images).await?;
        let indices = take_indices(self.machines)?;
        let pid = std::process::id();
        let starts = indices.0.iter().map(|i| {
            Machine::start(
                tools,
                MachineSpec {
                    name: format!("mgmt-{pid}-{i}"),
                    index: *i,
                    images: store.clone(),
                    kubelet_version: None,
                },
            )
        });
        let mut machines = Vec::new();
        for machine in futures::future::join_all(starts).await {
            machines.push(machine?);
        }
        Ok(BootedMachines { machines, indices })
    }
}

/// Machines booted by [`Builder::boot`], not yet nodes of a cluster.
#[derive(Debug)]
pub struct BootedMachines {
    machines: Vec<Machine>,
    indices: Indices,
}

/// The running machines of a management cluster and its load-balancer stand-in. Dropping
/// it stops the stand-in, then every machine.
#[derive(Debug)]
pub struct ManagementMachines {
    load_balancer: LoadBalancer,
    machines: Vec<Machine>,
    _indices: Indices,
}

/// Machine indices held by one [`ManagementMachines`], released on drop.
#[derive(Debug)]
struct Indices(Vec<u8>);

impl Drop for Indices {
    fn drop(&mut self) {
        if let Ok(mut used) = INDICES.lock() {
            for i in &self.0 {
                used.remove(i);
            }
        }
    }
}

/// The images of every management machine: pause, kube-proxy, the control-plane images of
/// `versions` and, with `test_images`, the netcheck test client, the konnectivity server and
/// kine (the sidecar of SQL data stores), in a store made once for them.
async fn image_store(
    tools: &Tools,
    versions: &[String],
    capi: bool,
    test_images: bool,
) -> Result<ImageStore> {
    let mut images = node_images(tools)?;
    if test_images {
        images.extend(crate::images::test_images_of_management_machines(tools)?);
    }
    if capi {
        images.extend(crate::images::capi_images(tools)?);
    }
    for version in versions {
        images.extend(control_plane_images(tools, version)?);
    }
    ImageStore::prepare(tools, &images).await
}

impl BootedMachines {
    /// Joins the machines to `cluster` (see the module docs); returns once every Node is
    /// Ready and routed.
    ///
    /// # Errors
    /// When `cluster` was not started for machines, or a Node does not become Ready (the
    /// message carries its kubelet log).
    pub async fn join(self, cluster: &LocalCluster) -> Result<ManagementMachines> {
        let server = cluster.advertised_url().context(
            "the management cluster must be started with advertise_address(UNDERLAY_GATEWAY)",
        )?;
        cluster
            .cluster_cidr()
            .context("the management cluster must be started with cluster_cidr(..)")?;
        let Self { machines, indices } = self;
        for (n, machine) in machines.iter().enumerate() {
            join(cluster, &server, machine, n)?;
        }
        let nodes: Api<Node> = Api::all(cluster.client());
        let mut cidrs = Vec::new();
        for machine in &machines {
            cidrs.push(wait_ready_with_cidr(&nodes, machine).await?);
        }
        // Every Node's pod CIDR to its machine, before any pod starts.
        for (cidr, to) in cidrs.iter().zip(&machines) {
            network::route(cidr, to.address())?;
            for other in &machines {
                if other.name() != to.name() {
                    other.route(cidr, to.address()).await?;
                }
            }
        }
        network::route(cluster.service_cidr(), machines[0].address())?;
        let load_balancer = LoadBalancer::start(
            cluster.client(),
            machines.iter().map(Machine::address).collect(),
        )
        .await?;
        Ok(ManagementMachines {
            load_balancer,
            machines,
            _indices: indices,
        })
    }
}

impl ManagementMachines {
    /// Options.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The machines.
    #[must_use]
    pub fn machines(&self) -> &[Machine] {
        &self.machines
    }

    /// The load-balancer stand-in in front of the machines.
    #[must_use]
    pub fn load_balancer(&self) -> &LoadBalancer {
        &self.load_balancer
    }
}

fn take_indices(n: usize) -> Result<Indices> {
    let mut used = INDICES
        .lock()
        .map_err(|_| anyhow::anyhow!("machine indices poisoned"))?;
    let free: Vec<u8> = (0..MAX_MACHINES)
        .filter(|i| !used.contains(i))
        .take(n)
        .collect();
    if free.len() < n {
        bail!("no free management machine index (at most {MAX_MACHINES} at once)");
    }
    used.extend(free.iter().copied());
    Ok(Indices(free))
}

/// Writes the kubelet's and kube-proxy's credentials and configuration; the machine's
/// kubelet supervisor starts the kubelet once `config.yaml` is there (written last).
fn join(cluster: &LocalCluster, server: &str, machine: &Machine, n: usize) -> Result<()> {
    let name = machine.name();
    let ca = cluster.ca();
    let node = ca.client(&format!("system:node:{name}"), &["system:nodes"])?;
    let proxy = ca.client("system:kube-proxy", &[])?;
    let ca_pem = ca.cert_pem();
    machine.write_file("/etc/kubernetes/pki/ca.crt", ca_pem.as_bytes(), 0o644)?;
    machine.write_file(
        "/etc/kubernetes/kubelet.conf",
        kubeconfig(server, &ca_pem, &format!("system:node:{name}"), &node).as_bytes(),
        0o600,
    )?;
    machine.write_file(
        "/etc/kubernetes/kube-proxy/kubeconfig.conf",
        kubeconfig(server, &ca_pem, "system:kube-proxy", &proxy).as_bytes(),
        0o600,
    )?;
    let cluster_cidr = cluster.cluster_cidr().unwrap_or(MANAGEMENT_CLUSTER_CIDR);
    machine.write_file(
        "/etc/kubernetes/kube-proxy/config.conf",
        kube_proxy_config(name, cluster_cidr).as_bytes(),
        0o644,
    )?;
    machine.write_file(
        "/etc/kubernetes/manifests/kube-proxy.yaml",
        kube_proxy_pod(name).as_bytes(),
        0o644,
    )?;
    let zone = char::from(b'a' + u8::try_from(n % 26).unwrap_or(0));
    machine.write_file(
        "/var/lib/kubelet/kubeadm-flags.env",
        format!("KUBELET_KUBEADM_ARGS=\"--node-labels=topology.kubernetes.io/zone=zone-{zone}\"\n")
            .as_bytes(),
        0o644,
    )?;
    machine.write_file(
        "/var/lib/kubelet/config.yaml",
        KUBELET_CONFIG.as_bytes(),
        0o644,
    )?;
    Ok(())
}

/// Waits until the machine's Node is Ready with a pod CIDR; returns the CIDR. Three minutes:
/// beside other suites on 2 cores, the management cluster's controller manager has once taken
/// over two to allocate the CIDR.
async fn wait_ready_with_cidr(nodes: &Api<Node>, machine: &Machine) -> Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_mins(3);
    let mut seen = String::from("no Node");
    loop {
        if let Some(node) = nodes.get_opt(machine.name()).await? {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| {
                    format!(
                        "Ready={} ({})",
                        c.status,
                        c.message.clone().unwrap_or_default()
                    )
                });
            let cidr = node.spec.and_then(|s| s.pod_cidr);
            if let (Some(true), Some(cidr)) =
                (ready.as_ref().map(|r| r.starts_with("Ready=True")), &cidr)
            {
                return Ok(cidr.clone());
            }
            seen = format!(
                "{}, pod CIDR {cidr:?}",
                ready.unwrap_or_else(|| "no Ready".into())
            );
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "management machine {} did not become a Ready Node with a pod CIDR in 3 minutes \
                 (last seen: {seen}); kubelet log:\n{}",
                machine.name(),
                machine.kubelet_log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kubelet configuration of a management machine: what kubeadm writes for a node, plus
/// this machine kind's settings: cgroupfs, `failCgroupV1: false`, swap allowed, and eviction
/// and image garbage collection that do not look at the disk (every machine shares the
/// host's file system, whose fill level belongs to the host and the tests, not to the node:
/// with the defaults a host at 85 % has the kubelet delete the imported images and refuse
/// pods for `DiskPressure`).
const KUBELET_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
rotateCertificates: false
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 0%, imagefs.available: 0%, nodefs.inodesFree: 0%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
";

fn kube_proxy_config(name: &str, cluster_cidr: &str) -> String {
    format!(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {{kubeconfig: /var/lib/kube-proxy/kubeconfig.conf}}
hostnameOverride: {name}
clusterCIDR: {cluster_cidr}
conntrack: {{maxPerCore: 0}}
"
    )
}

fn kube_proxy_pod(name: &str) -> String {
    let image = kube_proxy_image(KUBERNETES_VERSION);
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: kube-proxy
  namespace: kube-system
  labels: {{k8s-app: kube-proxy}}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  containers:
  - name: kube-proxy
    image: {image}
    imagePullPolicy: Never
    command: [/usr/local/bin/kube-proxy, --config=/var/lib/kube-proxy/config.conf, --hostname-override={name}]
    securityContext: {{privileged: true}}
    volumeMounts:
    - {{name: kube-proxy, mountPath: /var/lib/kube-proxy, readOnly: true}}
  volumes:
  - name: kube-proxy
    hostPath: {{path: /etc/kubernetes/kube-proxy, type: Directory}}
"
    )
}
