//! **Stand-in infrastructure provider for Machines** (test code, playing the role of CAPD or
//! CAPO for worker Machines): for each CAPI Machine whose `infrastructureRef` is a
//! `StandInMachine` and whose bootstrap data Secret CABPK has written, it boots a fresh real
//! machine (kamaji-machine: containerd, runc, a kubelet supervised as systemd would), applies
//! the cloud-config exactly as cloud-init would (`write_files`, then `runcmd` — the real
//! `kubeadm join` with its phases), then reports `spec.providerID`, `status.addresses` and
//! provisioned, and sets the Node's `spec.providerID` through the tenant API as CAPD does.
//!
//! Two things this machine kind needs are the provider's, as a cloud image's would be:
//! `kubeadm join` runs with `--ignore-preflight-errors=SystemVerification` (kubeadm refuses
//! cgroup v1 otherwise; the tenant's kubelet-config must also carry `failCgroupV1: false`,
//! which is a KamajiControlPlane kubelet setting, not something done here), and the cloud's
//! route controller: every Node's pod CIDR is routed to its machine in the underlay and in
//! every other machine.
//!
//! An instance's user data is the bootstrap data as it was when the instance was created (the
//! first time the provider saw the Machine with its data Secret), as clouds keep it: an
//! instance that boots late (see [`MachineProvider::hold`]) runs a token that may have expired
//! meanwhile. With `cloud-provider: external` the stand-in also plays the cloud controller
//! manager's node controller: it removes the `uninitialized` taint once the Node has its
//! `providerID`.
//!
//! Deleting a StandInMachine (CAPI does it after draining and deleting the Node) stops and
//! removes its machine; a finalizer keeps the object until then.
//!
//! A machine runs the kubelet of its Machine's `spec.version` (the tools' own, or a built
//! previous release's), as the image a cloud boots for that version would. A `StandInCluster`
//! (the infrastructure cluster of a ClusterClass topology) is provisioned at once.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Secret};
use kamaji_machine::{ImageStore, Machine, MachineSpec};
use kamaji_testenv::Tools;
use kamaji_testenv::standins::infrastructure_crd_yaml;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// The stand-in's CRDs: `StandInMachine`, `StandInMachineTemplate`, `StandInCluster` and
/// `StandInClusterTemplate`
/// (`infrastructure.cluster.x-k8s.io/v1alpha1`, CAPI contract labels, any content accepted),
/// as one YAML stream.
#[must_use]
pub fn standin_machine_crds() -> String {
    let contracts = ["v1beta1", "v1beta2"];
    format!(
        "{}---\n{}---\n{}---\n{}",
        infrastructure_crd_yaml("StandInMachine", "v1alpha1", &contracts, true),
        infrastructure_crd_yaml("StandInMachineTemplate", "v1alpha1", &contracts, false),
        infrastructure_crd_yaml("StandInCluster", "v1alpha1", &contracts, true),
        infrastructure_crd_yaml("StandInClusterTemplate", "v1alpha1", &contracts, false)
    )
}

/// The taint a kubelet with `--cloud-provider=external` registers its Node with.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const FINALIZER: &str = "standinmachine.infrastructure.cluster.x-k8s.io";
/// The `providerID` scheme of stand-in machines.
pub const PROVIDER_ID_PREFIX: &str = "kamaji-machine://";

/// A running stand-in provider; dropping it stops the controller and every machine.
pub struct MachineProvider {
    task: tokio::task::JoinHandle<()>,
    state: Arc<State>,
}

struct State {
    client: Client,
    tools: Tools,
    images: ImageStore,
    machines: Mutex<BTreeMap<String, Arc<Machine>>>,
    /// Machine name → its pod CIDR once routed.
    routes: Mutex<BTreeMap<String, String>>,
    busy: Mutex<std::collections::BTreeSet<String>>,
    next_index: std::sync::atomic::AtomicU8,
    /// The last failure per machine (for test messages).
    failures: Mutex<BTreeMap<String, String>>,
    /// While set, Machines ready to boot wait (a cloud whose capacity is delayed).
    held: std::sync::atomic::AtomicBool,
    /// CAPI Machines that arrived while held.
    pending: Mutex<Vec<DynamicObject>>,
    /// Each instance's user data (the bootstrap data), captured when the instance is created,
    /// as a cloud does: a late boot runs what was captured, whatever CABPK writes later.
    user_data: Mutex<BTreeMap<String, String>>,
}

fn standin_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1alpha1",
        "StandInMachine",
    ));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn capi_machines(client: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Machine",
    ));
    Api::all_with(client.clone(), &ar)
}

impl MachineProvider {
    /// Starts the controller. `images` are imported into every machine's containerd.
    #[must_use]
    pub fn start(client: Client, tools: Tools, images: ImageStore) -> Self {
        let state = Arc::new(State {
            client,
            tools,
            images,
            machines: Mutex::default(),
            routes: Mutex::default(),
            busy: Mutex::default(),
            next_index: std::sync::atomic::AtomicU8::new(20),
            failures: Mutex::default(),
            held: std::sync::atomic::AtomicBool::new(false),
            pending: Mutex::default(),
            user_data: Mutex::default(),
        });
        let s = Arc::clone(&state);
        let task = tokio::spawn(async move {
            let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
                "infrastructure.cluster.x-k8s.io",
                "v1alpha1",
                "StandInMachine",
            ));
            let standins: Api<DynamicObject> = Api::all_with(s.client.clone(), &ar);
            let clusters: Api<DynamicObject> = Api::all_with(
                s.client.clone(),
                &ApiResource::from_gvk(&GroupVersionKind::gvk(
                    "infrastructure.cluster.x-k8s.io",
                    "v1alpha1",
                    "StandInCluster",
                )),
            );
            let mut events = futures::stream::select_all([
                watcher(capi_machines(&s.client), watcher::Config::default()).boxed(),
                watcher(standins, watcher::Config::default()).boxed(),
                watcher(clusters, watcher::Config::default()).boxed(),
            ]);
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) = event else {
                    continue;
                };
                let s = Arc::clone(&s);
                tokio::spawn(async move { s.handle_with_retries(&obj).await });
            }
        });
        Self { task, state }
    }

    /// Holds new boots (`true`) until released (`false`): Machines whose bootstrap data is
    /// ready wait, as with a cloud whose instances come late; releasing boots them.
    pub async fn hold(&self, held: bool) {
        self.state
            .held
            .store(held, std::sync::atomic::Ordering::SeqCst);
        if !held {
            for obj in std::mem::take(&mut *self.state.pending.lock().await) {
                let s = Arc::clone(&self.state);
                tokio::spawn(async move { s.handle_with_retries(&obj).await });
            }
        }
    }

    /// The running machine named `name` (the CAPI Machine's name).
    pub async fn machine(&self, name: &str) -> Option<Arc<Machine>> {
        self.state.machines.lock().await.get(name).cloned()
    }

    /// Names of the running machines.
    pub async fn machine_names(&self) -> Vec<String> {
        self.state.machines.lock().await.keys().cloned().collect()
    }

    /// The last provisioning failure of each machine (name → error chain).
    pub async fn failures(&self) -> BTreeMap<String, String> {
        self.state.failures.lock().await.clone()
    }
}

impl Drop for MachineProvider {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl State {
    /// A failed boot is retried (as a cloud retries an instance), three times.
    async fn handle_with_retries(self: &Arc<Self>, obj: &DynamicObject) {
        for _ in 0..3 {
            match self.handle(obj).await {
                Ok(()) => return,
                Err(e) => {
                    self.failures
                        .lock()
                        .await
                        .insert(obj.name_any(), format!("{e:#}"));
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }

    /// A `StandInCluster` is provisioned at once (the cluster's network, as a cloud's would
    /// be, needs nothing here): `status.initialization.provisioned` (contract v1beta2) and
    /// `status.ready` (v1beta1). Its control-plane endpoint is the control plane's to give.
    async fn provision_cluster(&self, ns: &str, obj: &DynamicObject) -> Result<()> {
        if obj.data["status"]["initialization"]["provisioned"] == true
            || obj.metadata.deletion_timestamp.is_some()
        {
            return Ok(());
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "infrastructure.cluster.x-k8s.io",
                "v1alpha1",
                "StandInCluster",
            )),
        );
        api.patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"initialization": {"provisioned": true}, "ready": true}}),
            ),
        )
        .await?;
        Ok(())
    }

    async fn handle(self: &Arc<Self>, obj: &DynamicObject) -> Result<()> {
        let kind = obj
            .types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default();
        let ns = obj.namespace().unwrap_or_default();
        if kind == "StandInCluster" {
            return self.provision_cluster(&ns, obj).await;
        }
        if kind == "StandInMachine" {
            if obj.metadata.deletion_timestamp.is_some() {
                return self.delete(&ns, obj).await;
            }
            return Ok(());
        }
        // A CAPI Machine.
        let spec = &obj.data["spec"];
        if spec["infrastructureRef"]["kind"] != "StandInMachine" {
            return Ok(());
        }
        let Some(secret_name) = spec["bootstrap"]["dataSecretName"].as_str() else {
            return Ok(());
        };
        let infra_name = spec["infrastructureRef"]["name"]
            .as_str()
            .context("infrastructureRef.name")?
            .to_owned();
        let api = standin_api(&self.client, &ns);
        let Some(infra) = api.get_opt(&infra_name).await? else {
            return Ok(());
        };
        if infra.data["status"]["initialization"]["provisioned"] == true
            || infra.metadata.deletion_timestamp.is_some()
        {
            return Ok(());
        }
        let name = obj.name_any();
        if !self.user_data.lock().await.contains_key(&name) {
            let secret = Api::<Secret>::namespaced(self.client.clone(), &ns)
                .get(secret_name)
                .await?;
            let value = secret
                .data
                .as_ref()
                .and_then(|d| d.get("value"))
                .context("bootstrap data Secret has no `value`")?;
            self.user_data
                .lock()
                .await
                .entry(name.clone())
                .or_insert_with(|| String::from_utf8_lossy(&value.0).into_owned());
        }
        if self.held.load(std::sync::atomic::Ordering::SeqCst) {
            self.pending.lock().await.push(obj.clone());
            return Ok(());
        }
        if !self.busy.lock().await.insert(name.clone()) {
            return Ok(());
        }
        let result = self.provision(&ns, &name, &infra_name, spec).await;
        self.busy.lock().await.remove(&name);
        result
    }

    async fn provision(
        self: &Arc<Self>,
        ns: &str,
        name: &str,
        infra_name: &str,
        spec: &Value,
    ) -> Result<()> {
        let api = standin_api(&self.client, ns);
        api.patch(
            infra_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER]}})),
        )
        .await?;
        let user_data = self
            .user_data
            .lock()
            .await
            .get(name)
            .cloned()
            .context("no user data captured")?;
        let cloud_config = render_jinja(&user_data, name);
        // A retry boots a fresh instance: the failed one goes first.
        self.machines.lock().await.remove(name);
        let index = self
            .next_index
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let machine = Arc::new(
            Machine::start(
                &self.tools,
                MachineSpec {
                    name: name.to_owned(),
                    index,
                    images: self.images.clone(),
                    // The Machine's version, as the image a cloud boots for it has its kubelet.
                    kubelet_version: spec["version"]
                        .as_str()
                        .filter(|v| *v != kamaji_testenv::KUBERNETES_VERSION)
                        .map(str::to_owned),
                },
            )
            .await?,
        );
        self.machines
            .lock()
            .await
            .insert(name.to_owned(), Arc::clone(&machine));
        // Routes to the pod CIDRs of the machines already there.
        for (other, cidr) in self.routes.lock().await.iter() {
            if let Some(m) = self.machines.lock().await.get(other) {
                machine.route(cidr, m.address()).await?;
            }
        }
        apply_cloud_config(&machine, &cloud_config).await?;

        let provider_id = format!("{PROVIDER_ID_PREFIX}{name}");
        api.patch(
            infra_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
        )
        .await?;
        api.patch_status(
            infra_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "ready": true,
                "initialization": {"provisioned": true},
                "addresses": [
                    {"type": "InternalIP", "address": machine.address().to_string()},
                    {"type": "Hostname", "address": name},
                ],
            }})),
        )
        .await?;
        let cluster = spec["clusterName"].as_str().context("spec.clusterName")?;
        self.adopt_node(ns, cluster, name, &provider_id, &machine)
            .await
    }

    /// Sets the Node's providerID (as CAPD does) and routes its pod CIDR, as a cloud's route
    /// controller would.
    async fn adopt_node(
        &self,
        ns: &str,
        cluster: &str,
        name: &str,
        provider_id: &str,
        machine: &Machine,
    ) -> Result<()> {
        let config = kamaji_testenv::kubeconfig::config_from_secret(
            &self.client,
            ns,
            &format!("{cluster}-kubeconfig"),
            "value",
        )
        .await?;
        let nodes: Api<Node> = Api::all(Client::try_from(config)?);
        let deadline = tokio::time::Instant::now() + Duration::from_mins(2);
        let cidr = loop {
            if let Some(node) = nodes.get_opt(name).await? {
                if node
                    .spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_none()
                {
                    nodes
                        .patch(
                            name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
                        )
                        .await?;
                }
                // With `cloud-provider: external` the kubelet registers the Node tainted
                // until a cloud controller manager initializes it: this stand-in's role too.
                let taints = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.clone())
                    .unwrap_or_default();
                if taints.iter().any(|t| t.key == UNINITIALIZED_TAINT) {
                    let kept: Vec<_> = taints
                        .into_iter()
                        .filter(|t| t.key != UNINITIALIZED_TAINT)
                        .collect();
                    nodes
                        .patch(
                            name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"taints": kept}})),
                        )
                        .await?;
                }
                if let Some(cidr) = node.spec.and_then(|s| s.pod_cidr) {
                    break cidr;
                }
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "Node {name} did not register with a pod CIDR in 2 minutes; kubelet log:\n{}",
                    machine.kubelet_log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        kamaji_machine::network::route(&cidr, machine.address())?;
        for (other_name, other) in self.machines.lock().await.iter() {
            if other_name != name {
                other.route(&cidr, machine.address()).await?;
            }
        }
        self.routes.lock().await.insert(name.to_owned(), cidr);
        Ok(())
    }

    async fn delete(&self, ns: &str, obj: &DynamicObject) -> Result<()> {
        let name = obj
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.iter().find(|r| r.kind == "Machine"))
            .map_or_else(|| obj.name_any(), |r| r.name.clone());
        self.machines.lock().await.remove(&name);
        self.routes.lock().await.remove(&name);
        let api = standin_api(&self.client, ns);
        api.patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
        Ok(())
    }
}

/// What cloud-init renders in CABPK's `## template: jinja` data: the instance's host name.
fn render_jinja(text: &str, hostname: &str) -> String {
    let mut out = text.to_owned();
    for var in [
        "ds.meta_data.local_hostname",
        "ds.meta_data.hostname",
        "v1.local_hostname",
        "local_hostname",
    ] {
        out = out.replace(&format!("{{{{ {var} }}}}"), hostname);
    }
    out
}

/// Applies a cloud-config as cloud-init would: `write_files` (with `encoding` and
/// `permissions`, `append`), then each `runcmd` entry through `sh -c`, failing on the first
/// command that fails.
pub async fn apply_cloud_config(machine: &Machine, cloud_config: &str) -> Result<()> {
    let doc: Value = serde_yaml::from_str(cloud_config).context("parse the cloud-config")?;
    for file in doc["write_files"].as_array().into_iter().flatten() {
        let path = file["path"].as_str().context("write_files[].path")?;
        let content = file["content"].as_str().unwrap_or_default();
        let bytes = match file["encoding"].as_str() {
            None | Some("text/plain") => content.as_bytes().to_vec(),
            Some("b64" | "base64") => base64::engine::general_purpose::STANDARD
                .decode(content.trim())
                .with_context(|| format!("write_files {path}: base64"))?,
            Some(other) => bail!("write_files {path}: encoding {other} is not supported"),
        };
        let mode = file["permissions"]
            .as_str()
            .map_or(Ok(0o644), |p| {
                u32::from_str_radix(p.trim_start_matches("0o"), 8)
            })
            .with_context(|| format!("write_files {path}: permissions"))?;
        let bytes = if file["append"] == true {
            let mut old = machine.read_file(path).unwrap_or_default();
            old.extend(bytes);
            old
        } else {
            bytes
        };
        machine.write_file(path, &bytes, mode)?;
    }
    for cmd in doc["runcmd"].as_array().into_iter().flatten() {
        let line = match cmd {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            _ => continue,
        };
        // This machine kind runs cgroup v1: kubeadm's SystemVerification must be skipped
        // (real-machines.md §5.3), as a cloud image for it would.
        let line = line.replace(
            "kubeadm join ",
            "kubeadm join --ignore-preflight-errors=SystemVerification ",
        );
        machine
            .exec(&["sh", "-c", &line])
            .await
            .with_context(|| format!("runcmd `{line}`"))?;
    }
    Ok(())
}

/// The tenant settings this machine kind needs, as a user would write them: the kubelet
/// refuses cgroup v1 unless `failCgroupV1: false` and the machines use the cgroupfs driver;
/// kube-proxy runs in nftables mode (its image carries `nft`) and leaves the kernel's conntrack
/// limit alone (`nf_conntrack_max` is read-only outside the host's network namespace).
pub const SETTINGS_FOR_THIS_MACHINE_KIND: &str = "  kubelet:
    cgroupfs: cgroupfs
    configurationJSONPatches:
    - {op: add, path: /failCgroupV1, value: false}
    - {op: add, path: /evictionHard, value: {memory.available: 100Mi, nodefs.available: 0%, imagefs.available: 0%, nodefs.inodesFree: 0%}}
    - {op: add, path: /imageGCHighThresholdPercent, value: 100}
    - {op: add, path: /imageGCLowThresholdPercent, value: 99}
  addons:
    coreDNS: {}
    kubeProxy:
      mode: nftables
      configurationJSONPatches:
      - {op: add, path: /conntrack, value: {maxPerCore: 0}}
";

/// A MachineDeployment of `replicas` stand-in machines bootstrapped by CABPK from the
/// quickstart's worker KubeadmConfigTemplate (`name: '{{ local_hostname }}'`).
#[must_use]
pub fn machine_deployment(ns: &str, cluster: &str, name: &str, replicas: i32) -> String {
    machine_deployment_at(
        ns,
        cluster,
        name,
        replicas,
        kamaji_testenv::KUBERNETES_VERSION,
    )
}

/// [`machine_deployment`] of Machines of Kubernetes `version` (a built version: the stand-in
/// machine runs that version's kubelet and kubeadm).
#[must_use]
pub fn machine_deployment_at(
    ns: &str,
    cluster: &str,
    name: &str,
    replicas: i32,
    version: &str,
) -> String {
    format!(
        r"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          name: '{{{{ local_hostname }}}}'
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: StandInMachineTemplate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  template:
    spec: {{}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  clusterName: {cluster}
  replicas: {replicas}
  selector: {{matchLabels: {{}}}}
  template:
    spec:
      clusterName: {cluster}
      version: {version}
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: {name}
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
        kind: StandInMachineTemplate
        name: {name}
"
    )
}

impl crate::Env {
    /// Waits until exactly `n` CAPI Machines of `ns` are `Running` with a `nodeRef`; returns
    /// their node names, sorted. On time-out the error carries the Machines' status, the stand-in
    /// provider's failures and each machine's kubelet log.
    pub async fn wait_machines_running(
        &self,
        ns: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<String>> {
        let machines = self.capi(ns, "v1beta2", "Machine");
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let list = machines.list(&kube::api::ListParams::default()).await?;
            let mut running: Vec<String> = list
                .items
                .iter()
                .filter(|m| m.data["status"]["phase"] == "Running")
                .filter_map(|m| {
                    m.data["status"]["nodeRef"]["name"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect();
            running.sort();
            if running.len() == n && list.items.len() == n {
                return Ok(running);
            }
            if tokio::time::Instant::now() > deadline {
                let provider = self
                    .machines
                    .as_ref()
                    .context("no worker machines (Env::builder().workers(true))")?;
                let mut logs = String::new();
                for m in provider.machine_names().await {
                    if let Some(machine) = provider.machine(&m).await {
                        let _ = writeln!(logs, "kubelet on {m}:\n{}", machine.kubelet_log_tail(30));
                    }
                }
                bail!(
                    "{n} Machines Running with a nodeRef not reached in {timeout:?}: {:#?}\nprovider failures: {:#?}\n{logs}",
                    list.items
                        .iter()
                        .map(|m| (&m.metadata.name, &m.data["status"]["phase"]))
                        .collect::<Vec<_>>(),
                    provider.failures().await
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// `manifest` (a YAML stream) with this machine kind's tenant settings
/// ([`SETTINGS_FOR_THIS_MACHINE_KIND`]) merged into every KamajiControlPlane's spec (and
/// KamajiControlPlaneTemplate's `spec.template.spec`), as a user
/// of this machine kind would write them into a generated cluster.
///
/// # Errors
/// When `manifest` is not YAML.
pub fn with_machine_kind_settings(manifest: &str) -> Result<String> {
    let settings: Value = serde_yaml::from_str(SETTINGS_FOR_THIS_MACHINE_KIND)?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(manifest) {
        let mut v: Value = serde::Deserialize::deserialize(doc)?;
        if v.is_null() {
            continue;
        }
        let spec = match v["kind"].as_str() {
            Some("KamajiControlPlane") => &mut v["spec"],
            Some("KamajiControlPlaneTemplate") => &mut v["spec"]["template"]["spec"],
            _ => {
                docs.push(serde_yaml::to_string(&v)?);
                continue;
            }
        };
        for (k, s) in settings.as_object().context("settings are a mapping")? {
            spec[k] = s.clone();
        }
        docs.push(serde_yaml::to_string(&v)?);
    }
    Ok(docs.join("---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jinja_host_names_are_rendered_as_cloud_init_would() {
        let text = "name: '{{ ds.meta_data.local_hostname }}'\nother: '{{ local_hostname }}'";
        assert_eq!(
            render_jinja(text, "md-0-x"),
            "name: 'md-0-x'\nother: 'md-0-x'"
        );
    }
}
