//! The real chain for end-to-end tests: a local management cluster (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, the CAPI core manager), a local node that runs the
//! control-plane pods as processes, a shared TLS etcd registered as the `default` DataStore,
//! and the kamaji-rs `manager` binary as its own process and identity.

#![allow(dead_code, clippy::missing_panics_doc)]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kamaji_api::KamajiControlPlane;
use kamaji_localnode::LocalNode;
use kamaji_testenv::pki::CertPair;
use kamaji_testenv::{Etcd, EtcdTls, LocalCluster, Supervised, free_port};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};

/// User name of the manager in the audit log.
pub const MANAGER_USER: &str = "kamaji-rs-manager";

/// A running environment. Drop order: manager, node, datastore, cluster.
pub struct Env {
    manager: Option<Supervised>,
    pub node: LocalNode,
    /// The datastore etcd (shared with the source environment for a second management cluster).
    pub datastore: std::sync::Arc<Etcd>,
    pub datastore_client: CertPair,
    pub datastore_ca: CertPair,
    /// The datastore's address as pods reach it.
    pub datastore_for_pods: SocketAddr,
    pub cluster: LocalCluster,
    manager_kubeconfig: PathBuf,
    manager_starts: u32,
    metrics_port: u16,
    manager_hosts: Vec<(String, IpAddr)>,
}

impl Env {
    /// Starts everything, including the manager.
    pub async fn start() -> Result<Self> {
        Self::launch(None).await
    }

    /// Starts a second management cluster (its own etcd, API server, controllers, CAPI core
    /// manager, node and manager) whose `default` DataStore is `source`'s datastore etcd, as
    /// two management clusters that reach one shared datastore (the `clusterctl move` setup).
    pub async fn start_sharing_datastore(source: &Env) -> Result<Self> {
        Self::launch(Some(source)).await
    }

    async fn launch(shared: Option<&Env>) -> Result<Self> {
        let cluster = LocalCluster::builder()
            .controllers(true)
            .service_cidr(&kamaji_localnode::unique_service_cidr())
            .start()
            .await?;
        let node = LocalNode::start(&cluster).await?;
        let (datastore, datastore_ca, datastore_client, for_pods) = if let Some(source) = shared {
            (
                std::sync::Arc::clone(&source.datastore),
                source.datastore_ca.clone(),
                source.datastore_client.clone(),
                // The source node's address for it: pods of this node reach it through the host.
                source.datastore_for_pods,
            )
        } else {
            let (etcd, ca, client) = start_datastore(&cluster, node.host_ip()).await?;
            let port: u16 = etcd.url().rsplit(':').next().unwrap_or_default().parse()?;
            let for_pods = node.expose_host_port(port)?;
            (std::sync::Arc::new(etcd), ca, client, for_pods)
        };
        let env = Self {
            manager: None,
            node,
            datastore,
            datastore_client,
            datastore_ca,
            datastore_for_pods: for_pods,
            manager_kubeconfig: cluster.user_kubeconfig(MANAGER_USER, &["system:masters"])?,
            cluster,
            manager_starts: 0,
            metrics_port: 0,
            manager_hosts: Vec::new(),
        };
        env.create_datastore("default", for_pods).await?;
        let mut env = env;
        env.start_manager()?;
        Ok(env)
    }

    /// Registers a Kamaji etcd DataStore named `name` pointing at this environment's etcd.
    pub async fn create_datastore(&self, name: &str, endpoint: SocketAddr) -> Result<()> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let ds = serde_json::json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
            "metadata": {"name": name},
            "spec": {
                "driver": "etcd",
                "endpoints": [endpoint.to_string()],
                "tlsConfig": {
                    "certificateAuthority": {
                        "certificate": {"content": b64(&self.datastore_ca.cert_pem)},
                        "privateKey": {"content": b64(&self.datastore_ca.key_pem)},
                    },
                    "clientCertificate": {
                        "certificate": {"content": b64(&self.datastore_client.cert_pem)},
                        "privateKey": {"content": b64(&self.datastore_client.key_pem)},
                    },
                },
            },
        });
        self.apply_value(&ds).await
    }

    /// Starts (or restarts) the manager process.
    pub fn start_manager(&mut self) -> Result<()> {
        self.metrics_port = free_port()?;
        self.manager = Some(self.spawn_manager(self.metrics_port, &[])?);
        Ok(())
    }

    /// Spawns one more manager process with `extra` flags, metrics on `metrics_port`; the
    /// caller owns it (it is stopped when dropped).
    pub fn spawn_manager(&mut self, metrics_port: u16, extra: &[&str]) -> Result<Supervised> {
        self.manager_starts += 1;
        let mut cmd = if self.manager_hosts.is_empty() {
            Command::new(manager_binary()?)
        } else {
            // A private mount namespace whose /etc/hosts resolves the test's host names, so
            // no name lookup ever leaves the machine.
            let hosts = self.cluster.dir().join("manager-hosts");
            let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
            for (name, ip) in &self.manager_hosts {
                use std::fmt::Write as _;
                let _ = writeln!(text, "{ip} {name}");
            }
            std::fs::write(&hosts, text)?;
            let mut c = Command::new("unshare");
            c.args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
            ])
            .arg(&hosts)
            .arg(manager_binary()?);
            c
        };
        cmd.env("KUBECONFIG", &self.manager_kubeconfig)
            .env("RUST_LOG", "info,kamaji_reconciler=debug,kube=warn")
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .arg(format!(
                "--health-probe-bind-address=127.0.0.1:{}",
                free_port()?
            ));
        let log = self
            .cluster
            .dir()
            .join(format!("manager-{}.log", self.manager_starts));
        cmd.args(extra);
        Supervised::spawn("manager", cmd, &log)
    }

    /// Restarts the manager so that it resolves `name` to `ip` (a private `/etc/hosts`).
    pub fn resolve_for_manager(&mut self, name: &str, ip: IpAddr) -> Result<()> {
        self.manager_hosts.push((name.to_owned(), ip));
        self.kill_manager();
        self.start_manager()
    }

    /// Whether the manager process has exited (crashed) since it was started.
    pub fn manager_exited(&mut self) -> bool {
        self.manager.as_mut().is_none_or(|m| m.exited().is_some())
    }

    /// The manager's process id.
    pub fn manager_pid(&self) -> Option<u32> {
        self.manager.as_ref().map(Supervised::pid)
    }

    /// A counter or gauge of the manager's `/metrics` (sum over label sets), 0 if unreachable.
    pub async fn manager_metric(&self, name: &str) -> f64 {
        let Ok(resp) =
            reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port)).await
        else {
            return 0.0;
        };
        let text = resp.text().await.unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Kills the manager with SIGKILL (a crash).
    pub fn kill_manager(&mut self) {
        if let Some(mut m) = self.manager.take() {
            m.kill();
        }
    }

    /// The whole log of the running manager process.
    pub fn manager_full_log(&self) -> String {
        self.manager
            .as_ref()
            .and_then(|m| std::fs::read_to_string(m.log_path()).ok())
            .unwrap_or_default()
    }

    /// The manager's log so far (for failure messages).
    pub fn manager_log(&self) -> String {
        self.manager
            .as_ref()
            .map(|m| m.log_tail(60))
            .unwrap_or_default()
    }

    pub fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Creates namespace `ns` if missing.
    pub async fn namespace(&self, ns: &str) -> Result<()> {
        let obj: Namespace = serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )?;
        self.cluster.apply(&obj).await?;
        Ok(())
    }

    /// Server-side applies one object given as JSON (any kind the API server knows).
    pub async fn apply_value(&self, v: &serde_json::Value) -> Result<()> {
        let obj: DynamicObject = serde_json::from_value(v.clone())?;
        let types = obj
            .types
            .clone()
            .context("object without apiVersion/kind")?;
        let (group, version) = types
            .api_version
            .split_once('/')
            .map_or(("", types.api_version.as_str()), |(g, v)| (g, v));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
        let api: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(self.client(), &ns, &ar),
            None => Api::all_with(self.client(), &ar),
        };
        api.patch(
            &obj.name_any(),
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(&obj),
        )
        .await
        .with_context(|| format!("apply {} {}", types.kind, obj.name_any()))?;
        Ok(())
    }

    /// Applies every document of a YAML stream, in order.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<()> {
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
            if !v.is_null() {
                self.apply_value(&v).await?;
            }
        }
        Ok(())
    }

    /// Waits until the KamajiControlPlane has condition `type_` with `status`.
    pub async fn wait_kcp_condition(
        &self,
        ns: &str,
        name: &str,
        type_: &str,
        status: &str,
        timeout: Duration,
    ) -> Result<KamajiControlPlane> {
        let (t, st) = (type_.to_owned(), status.to_owned());
        self.wait_kcp(ns, name, &format!("{type_}={status}"), timeout, move |k| {
            k.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == st))
        })
        .await
    }

    /// Waits until the Cluster (read as v1beta2) has condition `type_` = `status`.
    pub async fn wait_cluster_condition(
        &self,
        ns: &str,
        name: &str,
        type_: &str,
        status: &str,
        timeout: Duration,
    ) -> Result<DynamicObject> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "cluster.x-k8s.io",
            "v1beta2",
            "Cluster",
        ));
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, &ar);
        let (t, st) = (type_.to_owned(), status.to_owned());
        let ok = move |c: &DynamicObject| {
            c.data["status"]["conditions"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|c| c["type"] == t.as_str() && c["status"] == st.as_str())
            })
        };
        self.wait_for(
            api,
            &format!("Cluster {ns}/{name}"),
            name,
            &format!("{type_}={status}"),
            timeout,
            ok,
            |c| serde_yaml::to_string(&c.data["status"]).unwrap_or_default(),
        )
        .await
    }

    /// Waits until `ok` holds for object `name` of `api`; on time-out the error carries the
    /// object's status (rendered by `status`) and the manager's log.
    #[allow(clippy::too_many_arguments)]
    pub async fn wait_for<K>(
        &self,
        api: Api<K>,
        label: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&K) -> bool + Send + 'static,
        status: impl Fn(&K) -> String,
    ) -> Result<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let cond = move |k: Option<&K>| k.is_some_and(&ok);
        if let Ok(r) = tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await
        {
            r?;
            return Ok(api.get(name).await?);
        }
        let now = api
            .get_opt(name)
            .await?
            .map(|k| status(&k))
            .unwrap_or_default();
        bail!(
            "{label}: {what} not reached in {timeout:?}\nstatus:\n{now}\nmanager log:\n{}",
            self.manager_log()
        )
    }

    /// The tenant's client configuration from `<cluster>-kubeconfig` (key `value`).
    pub async fn tenant_config(&self, ns: &str, cluster: &str) -> Result<kube::Config> {
        let secret = Api::<Secret>::namespaced(self.client(), ns)
            .get(&format!("{cluster}-kubeconfig"))
            .await?;
        let raw = secret
            .data
            .and_then(|d| d.get("value").cloned())
            .context("no value key")?;
        let kc: kube::config::Kubeconfig = serde_yaml::from_slice(&raw.0)?;
        Ok(
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?,
        )
    }

    /// A client for the tenant from `<cluster>-kubeconfig` (key `value`).
    pub async fn tenant_client(&self, ns: &str, cluster: &str) -> Result<Client> {
        Ok(Client::try_from(self.tenant_config(ns, cluster).await?)?)
    }

    /// Writes requests of the manager's user, from the audit log.
    pub fn manager_writes(&self) -> Result<Vec<kamaji_testenv::AuditEvent>> {
        Ok(self
            .cluster
            .audit_events()?
            .into_iter()
            .filter(|e| e.user.username == MANAGER_USER && e.is_write())
            .collect())
    }
}

/// Starts the TLS etcd that plays the shared datastore, serving for loopback and the node's
/// host address; returns it with its CA and an admin client certificate.
async fn start_datastore(
    cluster: &LocalCluster,
    host_ip: std::net::Ipv4Addr,
) -> Result<(Etcd, CertPair, CertPair)> {
    let dir = cluster.dir().join("datastore");
    std::fs::create_dir_all(&dir)?;
    let ca = kamaji_testenv::pki::TestCa::new("datastore-ca")?;
    let server = ca.serving(
        "etcd",
        &["localhost"],
        &[IpAddr::from([127, 0, 0, 1]), IpAddr::V4(host_ip)],
    )?;
    std::fs::write(dir.join("server.crt"), &server.cert_pem)?;
    std::fs::write(dir.join("server.key"), &server.key_pem)?;
    std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
    let tls = EtcdTls {
        cert_file: dir.join("server.crt"),
        key_file: dir.join("server.key"),
        client_ca_file: dir.join("ca.crt"),
    };
    let etcd = Etcd::start(cluster.tools(), &dir.join("etcd"), Some(&tls)).await?;
    let client = ca.client("datastore-admin", &[])?;
    Ok((etcd, ca.pair(), client))
}

/// The `manager` binary: Cargo's path for integration tests, else `$KAMAJI_MANAGER_BIN`, else
/// `target/<profile>/manager` beside the running example.
pub fn manager_binary() -> Result<PathBuf> {
    if let Some(p) = option_env!("CARGO_BIN_EXE_manager") {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("KAMAJI_MANAGER_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let candidate = exe
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("manager"))
        .context("no parent directory")?;
    if candidate.exists() {
        Ok(candidate)
    } else {
        bail!(
            "{} is missing: build it with `cargo build -p kamaji-reconciler --bin manager`",
            candidate.display()
        )
    }
}

/// The base fixture F0 of shared/cases/: a Cluster (v1beta1, as the cases write it) and a
/// KamajiControlPlane (v1alpha1) with the same name, LoadBalancer, datastore `default`, the
/// tools' Kubernetes version; each setter changes one thing a case varies.
#[derive(Debug, Clone)]
pub struct F0 {
    ns: String,
    name: String,
    replicas: i32,
    services: String,
    pods: String,
    domain: String,
    datastore: String,
    network: String,
    spec: String,
    version: String,
}

impl F0 {
    /// F0 for `ns/name` with 2 replicas.
    pub fn new(ns: &str, name: &str) -> Self {
        Self {
            ns: ns.into(),
            name: name.into(),
            replicas: 2,
            services: "10.96.0.0/12".into(),
            pods: "10.244.0.0/16".into(),
            domain: "cluster.local".into(),
            datastore: "default".into(),
            network: "serviceType: LoadBalancer".into(),
            spec: String::new(),
            version: kamaji_testenv::KUBERNETES_VERSION.into(),
        }
    }
    /// `spec.version`.
    pub fn version(mut self, version: &str) -> Self {
        version.clone_into(&mut self.version);
        self
    }
    /// `spec.replicas`.
    pub fn replicas(mut self, n: i32) -> Self {
        self.replicas = n;
        self
    }
    /// `Cluster.spec.clusterNetwork.services.cidrBlocks[0]`.
    pub fn services(mut self, cidr: &str) -> Self {
        cidr.clone_into(&mut self.services);
        self
    }
    /// `Cluster.spec.clusterNetwork.pods.cidrBlocks[0]`.
    pub fn pods(mut self, cidr: &str) -> Self {
        cidr.clone_into(&mut self.pods);
        self
    }
    /// `Cluster.spec.clusterNetwork.serviceDomain`.
    pub fn domain(mut self, domain: &str) -> Self {
        domain.clone_into(&mut self.domain);
        self
    }
    /// `spec.dataStoreName`.
    pub fn datastore(mut self, name: &str) -> Self {
        name.clone_into(&mut self.datastore);
        self
    }
    /// `spec.network`, as a YAML flow mapping body (e.g. `serviceType: ClusterIP, ...`).
    pub fn network(mut self, body: &str) -> Self {
        body.clone_into(&mut self.network);
        self
    }
    /// Further `spec` fields, as YAML lines indented by two spaces.
    pub fn spec(mut self, lines: &str) -> Self {
        lines.clone_into(&mut self.spec);
        self
    }
    /// The two objects as a YAML stream.
    pub fn yaml(&self) -> String {
        let Self {
            ns,
            name,
            replicas,
            services,
            pods,
            domain,
            datastore,
            network,
            spec,
            version,
        } = self;
        format!(
            r"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {{name: {name}, namespace: {ns}}}
spec:
  clusterNetwork:
    services: {{cidrBlocks: [{services}]}}
    pods: {{cidrBlocks: [{pods}]}}
    serviceDomain: {domain}
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
    kind: KamajiControlPlane
    name: {name}
---
apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
kind: KamajiControlPlane
metadata: {{name: {name}, namespace: {ns}}}
spec:
  version: {version}
  replicas: {replicas}
  dataStoreName: {datastore}
  network: {{{network}}}
{spec}"
        )
    }
}

/// F0 for `ns/name` with `replicas`.
pub fn f0(ns: &str, name: &str, replicas: i32) -> String {
    F0::new(ns, name).replicas(replicas).yaml()
}

/// Substitutes clusterctl-style variables: `${VAR}` and `${VAR:=default}`, taking values from
/// `vars`, else the default; an unset variable without default is an error naming it.
pub fn substitute(text: &str, vars: &std::collections::HashMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').context("unterminated ${")?;
        let expr = &after[..end];
        let (name, default) = match expr.split_once(":=") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        match vars.get(name).map(String::as_str).or(default) {
            Some(v) => out.push_str(v),
            None => bail!("variable {name} is not set and has no default"),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Creates a fresh bootstrap token in the tenant, waits for its cluster-info signature, and
/// runs the real `kubeadm join phase preflight` discovery against `endpoint` pinned to the CA
/// of `<cluster>-ca`. Returns kubeadm's output; fails when discovery fails.
pub async fn kubeadm_discovery(
    env: &Env,
    ns: &str,
    cluster: &str,
    endpoint: &str,
) -> Result<String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kamaji_bootstrap::token::{BootstrapToken, TokenSecretOptions, bootstrap_token_secret};
    let tenant = env.tenant_client(ns, cluster).await?;
    let token = BootstrapToken::generate()?;
    let secret = bootstrap_token_secret(&token, &TokenSecretOptions::default())?;
    Api::<Secret>::namespaced(tenant.clone(), "kube-system")
        .create(&kube::api::PostParams::default(), &secret)
        .await?;
    let key = token.jws_key();
    let signed = move |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d.contains_key(&key))
    };
    tokio::time::timeout(
        Duration::from_mins(1),
        await_condition(
            Api::<ConfigMap>::namespaced(tenant, "kube-public"),
            "cluster-info",
            signed,
        ),
    )
    .await
    .context("cluster-info was not signed for the new token within 60 s")??;
    let ca = Api::<Secret>::namespaced(env.client(), ns)
        .get(&format!("{cluster}-ca"))
        .await?;
    let ca_pem = String::from_utf8(
        ca.data
            .context("no data")?
            .get("tls.crt")
            .context("no tls.crt")?
            .0
            .clone(),
    )?;
    let hash = kamaji_bootstrap::pki::ca_cert_hash(&ca_pem)?;
    let out = Command::new(env.cluster.tools().path("kubeadm"))
        .args(["join", "phase", "preflight", endpoint])
        .arg(format!("--token={}", token.token()))
        .arg(format!("--discovery-token-ca-cert-hash={hash}"))
        .args([
            "--ignore-preflight-errors=all",
            "--node-name=worker-1",
            "--cri-socket=unix:///nonexistent.sock",
            "-v=1",
        ])
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() || !text.contains("TLS certificate validates against pinned roots") {
        bail!("kubeadm join discovery failed:\n{text}");
    }
    Ok(text)
}

/// Serialises the end-to-end tests of one test binary: each starts its own environment, and
/// two at once would only compete for the machine's two cores.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A Secret's data key as UTF-8.
pub fn secret_text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}

impl Env {
    /// Reads Secret `ns/name`.
    pub async fn secret(&self, ns: &str, name: &str) -> Result<Secret> {
        Ok(Api::<Secret>::namespaced(self.client(), ns)
            .get(name)
            .await?)
    }

    /// The control-plane Deployment `ns/name`.
    pub async fn deployment(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<k8s_openapi::api::apps::v1::Deployment> {
        Ok(
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(self.client(), ns)
                .get(name)
                .await?,
        )
    }

    /// The args of container `container` of Deployment `ns/name`.
    pub async fn container_args(
        &self,
        ns: &str,
        name: &str,
        container: &str,
    ) -> Result<Vec<String>> {
        let d = self.deployment(ns, name).await?;
        let spec = d
            .spec
            .and_then(|s| s.template.spec)
            .context("no pod spec")?;
        let c = spec
            .containers
            .into_iter()
            .find(|c| c.name == container)
            .context("no such container")?;
        Ok(c.args.unwrap_or_default())
    }

    /// Applies F0 for `ns/name` and waits until the control plane is Available.
    pub async fn f0_available(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
    ) -> Result<KamajiControlPlane> {
        self.namespace(ns).await?;
        self.apply_yaml(&f0(ns, name, replicas)).await?;
        self.wait_kcp_condition(ns, name, "Available", "True", Duration::from_mins(4))
            .await
    }

    /// Merge-patches the KamajiControlPlane `ns/name`.
    pub async fn patch_kcp(&self, ns: &str, name: &str, patch: serde_json::Value) -> Result<()> {
        Api::<KamajiControlPlane>::namespaced(self.client(), ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

impl Env {
    /// Waits until `ready` holds for the KamajiControlPlane `ns/name`.
    pub async fn wait_kcp(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&KamajiControlPlane) -> bool + Send + 'static,
    ) -> Result<KamajiControlPlane> {
        let api: Api<KamajiControlPlane> = Api::namespaced(self.client(), ns);
        self.wait_for(
            api,
            &format!("KamajiControlPlane {ns}/{name}"),
            name,
            what,
            timeout,
            ready,
            |k| serde_yaml::to_string(&k.status).unwrap_or_default(),
        )
        .await
    }
}

/// The message of condition `type_` of a KamajiControlPlane (empty when absent).
pub fn condition_message(kcp: &KamajiControlPlane, type_: &str) -> String {
    kcp.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Polls `/readyz` of a tenant every 250 ms until stopped, counting answers and failures (a
/// refused connection, a timeout or anything but `ok`). Every poll opens a new connection, as
/// a fresh client behind a load balancer would: a kept-alive connection would stay pinned to
/// one API server, and a terminating API server fails `/readyz` on purpose.
pub struct ReadyzProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ok: std::sync::Arc<std::sync::atomic::AtomicU32>,
    failed: std::sync::Arc<std::sync::atomic::AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl ReadyzProbe {
    /// Starts probing with `tenant` (a new client, so a new connection, per poll).
    pub fn start(tenant: kube::Config) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ok = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let task = {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let ready = match Client::try_from(tenant.clone()) {
                        Ok(c) => kamaji_reconciler::tenant::readyz(&c).await,
                        Err(_) => false,
                    };
                    if ready {
                        ok.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        Self {
            stop,
            ok,
            failed,
            task,
        }
    }

    /// Stops probing; returns `(answers ok, failures)`.
    pub async fn stop(self) -> (u32, u32) {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// Waits until Deployment `ns/name` has rolled out completely: the controller saw the current
/// spec, `replicas` pods exist, all are updated and available, and `done` holds for its spec.
pub async fn wait_rolled_out(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    timeout: Duration,
    done: impl Fn(&k8s_openapi::api::apps::v1::Deployment) -> bool + Send + 'static,
) -> Result<k8s_openapi::api::apps::v1::Deployment> {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(env.client(), ns);
    let label = format!("Deployment {ns}/{name}");
    let want = Some(replicas);
    let ok = move |d: &k8s_openapi::api::apps::v1::Deployment| {
        let s = d.status.clone().unwrap_or_default();
        done(d)
            && s.observed_generation == d.metadata.generation
            && s.updated_replicas == want
            && s.available_replicas == want
            && s.replicas == want
    };
    env.wait_for(api, &label, name, "rolled out", timeout, ok, |d| {
        serde_yaml::to_string(&d.status).unwrap_or_default()
    })
    .await
}

impl Env {
    /// Labels the CRDs as `clusterctl init` labels a provider's components (`clusterctl.cluster.x-k8s.io`
    /// and `cluster.x-k8s.io/provider`), so that `clusterctl move` discovers their objects: the
    /// Cluster API CRDs as `cluster-api` (or `bootstrap-kubeadm`), kamaji-rs's as
    /// `control-plane-kamaji`.
    pub async fn label_crds_as_clusterctl_init_does(&self) -> Result<()> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        for crd in api.list(&kube::api::ListParams::default()).await? {
            let group = crd.spec.group.as_str();
            let provider = match group {
                "cluster.x-k8s.io"
                | "addons.cluster.x-k8s.io"
                | "ipam.cluster.x-k8s.io"
                | "runtime.cluster.x-k8s.io" => "cluster-api",
                "bootstrap.cluster.x-k8s.io" => "bootstrap-kubeadm",
                g if g == kamaji_api::meta::CONTROL_PLANE_GROUP
                    || g == kamaji_api::meta::DATASTORE_GROUP =>
                {
                    kamaji_api::meta::PROVIDER_NAME
                }
                _ => continue,
            };
            let patch = serde_json::json!({"metadata": {"labels": {
                "clusterctl.cluster.x-k8s.io": "",
                kamaji_api::meta::PROVIDER_LABEL: provider,
            }}});
            api.patch(
                &crd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        }
        Ok(())
    }

    /// Runs the real `clusterctl` (built by `tests/tools`) against this management cluster
    /// (`--kubeconfig` is added) with `args`; returns its combined output, or fails with it.
    /// Version checks are off and its configuration directory is private, so it never
    /// reaches the network.
    pub fn clusterctl(&self, args: &[&str]) -> Result<String> {
        let home = self.cluster.dir().join("clusterctl-home");
        std::fs::create_dir_all(&home)?;
        let out = Command::new(self.cluster.tools().path("clusterctl"))
            .args(args)
            .arg(format!(
                "--kubeconfig={}",
                self.cluster.kubeconfig_path().display()
            ))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .output()
            .context("running clusterctl")?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!("clusterctl {} failed:\n{text}", args.join(" "));
        }
        Ok(text)
    }

    /// Marks the stand-in OpenStackCluster `ns/name` provisioned (`status.ready` and
    /// `status.initialization.provisioned`), as the infrastructure provider would; returns the
    /// API of OpenStackClusters in `ns`.
    pub async fn mark_openstack_cluster_provisioned(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Api<DynamicObject>> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1alpha6",
            "OpenStackCluster",
        ));
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, &ar);
        let status =
            serde_json::json!({"status": {"ready": true, "initialization": {"provisioned": true}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
        Ok(api)
    }
}
