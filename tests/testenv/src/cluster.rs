//! The local management cluster.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource};
use kube::runtime::wait::{Condition as _, conditions};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::apiserver::{self, ApiServerConfig};
use crate::apply;
use crate::audit::{self, AuditEvent};
use crate::capi;
use crate::etcd::Etcd;
use crate::kubeconfig::{client_from_kubeconfig, service_account_token};
use crate::pki::{self, TestCa};
use crate::process::{Supervised, free_port};
use crate::tools::{Tools, workspace_root};
use crate::wait::{await_object, poll_until};

const FIELD_MANAGER: &str = "kamaji-testenv";
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// Options for [`LocalCluster`]; obtain with [`LocalCluster::builder`].
#[derive(Debug, Clone)]
#[allow(clippy::struct_excessive_bools)] // independent on/off switches of a builder
pub struct Builder {
    capi: bool,
    capi_crds: bool,
    controllers: bool,
    kamaji_crds: bool,
    crd_dirs: Vec<PathBuf>,
    service_cidr: String,
    kubeadm_bootstrap: bool,
    advertise_address: Option<Ipv4Addr>,
    cluster_cidr: Option<String>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            advertise_address: None,
            cluster_cidr: None,
            kubeadm_bootstrap: false,
            capi: true,
            capi_crds: true,
            controllers: false,
            kamaji_crds: true,
            crd_dirs: Vec::new(),
            service_cidr: "10.0.0.0/24".to_owned(),
        }
    }
}

impl Builder {
    /// Run the Cluster API core manager and serve its conversion and admission webhooks on
    /// loopback (default: on). Without it the CAPI CRDs are still installed, but only their
    /// storage version can be used.
    #[must_use]
    pub fn capi(mut self, on: bool) -> Self {
        self.capi = on;
        self
    }

    /// Install the Cluster API CRDs (default: on). Off, with [`Builder::capi`] and
    /// [`Builder::kamaji_crds`] off too, the cluster holds no provider's CRDs: a bare
    /// management cluster for `clusterctl init` to install them.
    #[must_use]
    pub fn capi_crds(mut self, on: bool) -> Self {
        self.capi_crds = on;
        self
    }

    /// Also run Cluster API's kubeadm bootstrap provider (CABPK) with its CRDs and webhooks
    /// (default: off; needs [`Builder::capi`]).
    #[must_use]
    pub fn kubeadm_bootstrap(mut self, on: bool) -> Self {
        self.kubeadm_bootstrap = on;
        self
    }

    /// Run kube-controller-manager and kube-scheduler (default: off).
    #[must_use]
    pub fn controllers(mut self, on: bool) -> Self {
        self.controllers = on;
        self
    }

    /// Install kamaji-rs's CRDs from `config/crd/bases` when that directory exists
    /// (default: on).
    #[must_use]
    pub fn kamaji_crds(mut self, on: bool) -> Self {
        self.kamaji_crds = on;
        self
    }

    /// Also install the CRDs found in `dir`.
    #[must_use]
    pub fn crds_from(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dirs.push(dir.into());
        self
    }

    /// The API server's `--service-cluster-ip-range` (default `10.0.0.0/24`; the addresses
    /// are virtual and nothing in the environment sends traffic to them).
    #[must_use]
    pub fn service_cidr(mut self, cidr: &str) -> Self {
        cidr.clone_into(&mut self.service_cidr);
        self
    }

    /// Serve the API on every address of the calling network namespace and advertise
    /// `address` (default: loopback only). For a cluster whose nodes are machines of a
    /// private test network: its serving certificate covers `address`, the `kubernetes`
    /// Service's endpoints point at it (`--endpoint-reconciler-type=lease`), and it reaches
    /// kubelets by their `InternalIP` with a client certificate of its own.
    #[must_use]
    pub fn advertise_address(mut self, address: Ipv4Addr) -> Self {
        self.advertise_address = Some(address);
        self
    }

    /// Give every Node a pod CIDR from `cidr` (kube-controller-manager's
    /// `--allocate-node-cidrs --cluster-cidr`, `/24` per node; default: none), for nodes whose
    /// container runtime takes pod addresses from the Node's `spec.podCIDR`.
    #[must_use]
    pub fn cluster_cidr(mut self, cidr: &str) -> Self {
        self.cluster_cidr = Some(cidr.to_owned());
        self
    }

    /// Starts the cluster and waits until it is ready.
    ///
    /// # Errors
    /// When a program is missing (`make tools`), fails to start, or does not become ready in
    /// 90 s; the message carries the tail of that program's log.
    pub async fn start(self) -> Result<LocalCluster> {
        LocalCluster::launch(self).await
    }
}

/// A running local management cluster. Dropping it stops every process it started.
pub struct LocalCluster {
    // Fields drop in declaration order: controllers first, then the API server, then etcd,
    // and the temporary directory last.
    kubeadm_bootstrap: Option<Supervised>,
    capi: Option<Supervised>,
    scheduler: Option<Supervised>,
    controller_manager: Option<Supervised>,
    apiserver: Supervised,
    etcd: Etcd,
    client: Client,
    kubeconfig: PathBuf,
    server: String,
    ca: TestCa,
    tools: Tools,
    service_cidr: String,
    cluster_cidr: Option<String>,
    advertise_address: Option<Ipv4Addr>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("server", &self.server)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl LocalCluster {
    /// Starts etcd, kube-apiserver and the Cluster API core manager, with the CAPI CRDs and
    /// kamaji-rs's CRDs installed. Shorthand for `LocalCluster::builder().start()`.
    ///
    /// # Errors
    /// See [`Builder::start`].
    pub async fn start() -> Result<Self> {
        Builder::default().start().await
    }

    /// Options for a cluster with more or fewer parts.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    async fn launch(opts: Builder) -> Result<Self> {
        let tools = Tools::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("kamaji-testenv-")
            .tempdir()?;
        let d = dir.path().to_owned();
        let etcd = Etcd::start(&tools, &d.join("etcd"), None).await?;

        let ca = TestCa::new("kamaji-testenv-ca")?;
        let port = free_port()?;
        let first_service_ip = first_ip(&opts.service_cidr)?;
        let mut serving_ips = vec![IpAddr::V4(Ipv4Addr::LOCALHOST), first_service_ip];
        serving_ips.extend(opts.advertise_address.map(IpAddr::V4));
        let serving = ca.serving(
            "kube-apiserver",
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            &serving_ips,
        )?;
        let kubelet_client = ca.client("kube-apiserver-kubelet-client", &["system:masters"])?;
        let admin = ca.client("kamaji-testenv-admin", &["system:masters"])?;
        let (sa_key, sa_pub) = pki::key_pair()?;
        let write = |name: &str, body: &str| std::fs::write(d.join(name), body);
        write("ca.crt", &ca.cert_pem())?;
        write("ca.key", &ca.pair().key_pem)?;
        write("apiserver.crt", &serving.cert_pem)?;
        write("apiserver.key", &serving.key_pem)?;
        write("apiserver-kubelet-client.crt", &kubelet_client.cert_pem)?;
        write("apiserver-kubelet-client.key", &kubelet_client.key_pem)?;
        write("sa.key", &sa_key)?;
        write("sa.pub", &sa_pub)?;
        write("audit-policy.yaml", apiserver::AUDIT_POLICY)?;
        let server = format!("https://127.0.0.1:{port}");
        let kubeconfig = d.join("admin.kubeconfig");
        write(
            "admin.kubeconfig",
            &pki::kubeconfig(&server, &ca.cert_pem(), "kamaji-testenv-admin", &admin),
        )?;

        let cmd = apiserver::command(
            &tools,
            &ApiServerConfig {
                dir: &d,
                port,
                etcd_url: etcd.url(),
                service_cidr: &opts.service_cidr,
                advertise_address: opts.advertise_address,
            },
        );
        let mut apiserver =
            Supervised::spawn("kube-apiserver", cmd, &d.join("kube-apiserver.log"))?;
        let client = client_from_kubeconfig(&kubeconfig).await?;
        wait_ready(&client, &mut apiserver).await?;

        let mut cluster = Self {
            kubeadm_bootstrap: None,
            capi: None,
            scheduler: None,
            controller_manager: None,
            apiserver,
            etcd,
            client,
            kubeconfig,
            server,
            ca,
            tools,
            service_cidr: opts.service_cidr.clone(),
            cluster_cidr: opts.cluster_cidr.clone(),
            advertise_address: opts.advertise_address,
            dir,
        };
        if opts.controllers {
            cluster.start_controllers()?;
        }
        cluster.install_crds(&opts).await?;
        Ok(cluster)
    }

    fn start_controllers(&mut self) -> Result<()> {
        let d = self.dir.path();
        let kc = self.kubeconfig.display().to_string();
        let f = |name: &str| d.join(name).display().to_string();
        let mut kcm = Command::new(self.tools.path("kube-controller-manager"));
        kcm.arg(format!("--kubeconfig={kc}"))
            .arg(format!("--authentication-kubeconfig={kc}"))
            .arg(format!("--authorization-kubeconfig={kc}"))
            .arg("--controllers=*,bootstrapsigner,tokencleaner")
            .arg(format!("--cluster-signing-cert-file={}", f("ca.crt")))
            .arg(format!("--cluster-signing-key-file={}", f("ca.key")))
            .arg(format!("--root-ca-file={}", f("ca.crt")))
            .arg(format!(
                "--service-account-private-key-file={}",
                f("sa.key")
            ))
            .arg(format!("--service-cluster-ip-range={}", self.service_cidr))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()?))
            .arg("--v=1");
        if let Some(cidr) = &self.cluster_cidr {
            kcm.arg("--allocate-node-cidrs=true")
                .arg(format!("--cluster-cidr={cidr}"))
                .arg("--node-cidr-mask-size=24");
        }
        self.controller_manager = Some(Supervised::spawn(
            "kube-controller-manager",
            kcm,
            &d.join("kcm.log"),
        )?);
        let mut sched = Command::new(self.tools.path("kube-scheduler"));
        sched
            .arg(format!("--kubeconfig={kc}"))
            .arg(format!("--authentication-kubeconfig={kc}"))
            .arg(format!("--authorization-kubeconfig={kc}"))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()?))
            .arg("--v=1");
        self.scheduler = Some(Supervised::spawn(
            "kube-scheduler",
            sched,
            &d.join("scheduler.log"),
        )?);
        Ok(())
    }

    async fn install_crds(&mut self, opts: &Builder) -> Result<()> {
        let mut crds = if opts.capi_crds || opts.capi {
            capi::read_crds_without_descriptions(&self.tools.capi_core_crds())?
        } else {
            Vec::new()
        };
        let webhook_port = free_port()?;
        if opts.capi {
            for crd in &mut crds {
                capi::set_conversion_webhook(crd, webhook_port, &self.ca.cert_pem())?;
            }
        }
        let bootstrap_port = free_port()?;
        if opts.capi && opts.kubeadm_bootstrap {
            let mut bootstrap =
                capi::read_crds_without_descriptions(&self.tools.capi_bootstrap_crds())?;
            for crd in &mut bootstrap {
                capi::set_conversion_webhook(crd, bootstrap_port, &self.ca.cert_pem())?;
                // The contract labels CABPK's kustomization (config/crd) adds.
                let labels = crd.metadata.labels.get_or_insert_with(Default::default);
                labels.insert("cluster.x-k8s.io/v1beta1".into(), "v1beta1".into());
                labels.insert("cluster.x-k8s.io/v1beta2".into(), "v1beta2".into());
            }
            crds.extend(bootstrap);
        }
        let ours = workspace_root().join("config/crd/bases");
        if opts.kamaji_crds && ours.is_dir() {
            crds.extend(capi::read_crds(&ours)?);
        }
        for dir in &opts.crd_dirs {
            crds.extend(capi::read_crds(dir)?);
        }
        self.apply_crds(&crds).await?;
        if opts.capi {
            self.capi = Some(
                self.start_provider(
                    "capi-manager",
                    &["--feature-gates=ClusterTopology=true"],
                    webhook_port,
                    &self.tools.capi_core_webhooks(),
                )
                .await?,
            );
            if opts.kubeadm_bootstrap {
                self.kubeadm_bootstrap = Some(
                    self.start_provider(
                        "capi-kubeadm-bootstrap-manager",
                        &[],
                        bootstrap_port,
                        &self
                            .tools
                            .bin_dir()
                            .join("webhooks/capi-kubeadm-bootstrap.yaml"),
                    )
                    .await?,
                );
            }
        }
        Ok(())
    }

    /// Server-side applies CRDs and waits until each is `Established`.
    ///
    /// # Errors
    /// When the API server rejects a CRD (the message names it) or it is not established
    /// within 30 s.
    pub async fn apply_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in crds {
            self.apply(crd)
                .await
                .with_context(|| format!("install CRD {}", crd.name_any()))?;
        }
        for crd in crds {
            let name = crd.name_any();
            await_object(&api, &name, Duration::from_secs(30), |c| {
                conditions::is_crd_established().matches_object(Some(c))
            })
            .await?
            .with_context(|| format!("CRD {name} not established in 30 s"))?;
        }
        Ok(())
    }

    /// Starts a Cluster API provider manager (`program` from the tools) with its webhooks
    /// served on loopback `webhook_port` and registered from `webhooks`.
    async fn start_provider(
        &self,
        program: &str,
        extra: &[&str],
        webhook_port: u16,
        webhooks: &Path,
    ) -> Result<Supervised> {
        let d = self.dir.path().join(program);
        let certs = d.join("certs");
        std::fs::create_dir_all(&certs)?;
        let serving = self.ca.serving(
            "capi-webhooks",
            &["localhost"],
            &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )?;
        std::fs::write(certs.join("tls.crt"), &serving.cert_pem)?;
        std::fs::write(certs.join("tls.key"), &serving.key_pem)?;
        let health = free_port()?;
        let mut cmd = Command::new(self.tools.path(program));
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--webhook-port={webhook_port}"))
            .arg(format!("--webhook-cert-dir={}", certs.display()))
            .arg(format!("--health-addr=127.0.0.1:{health}"))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()?))
            .arg("--insecure-diagnostics=true")
            .arg("--leader-elect=false")
            .args(extra);
        let mut process = Supervised::spawn(program, cmd, &d.join(format!("{program}.log")))?;
        poll_until(
            &format!("{program} did not become ready"),
            START_TIMEOUT,
            Duration::from_millis(100),
            Some(&mut process),
            || async { http_status(health, "/readyz").await == Some(200) },
        )
        .await?;
        let hooks = capi::read_webhooks(webhooks, webhook_port, &self.ca.cert_pem(), program)?;
        for m in &hooks.mutating {
            self.apply::<MutatingWebhookConfiguration>(m).await?;
        }
        for v in &hooks.validating {
            self.apply::<ValidatingWebhookConfiguration>(v).await?;
        }
        Ok(process)
    }

    /// Server-side applies a cluster-scoped or namespaced object with the test
    /// environment's field manager (forced).
    ///
    /// # Errors
    /// When the API server rejects the object.
    pub async fn apply<K>(&self, obj: &K) -> Result<K>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let ar = ApiResource::erase::<K>(&());
        let mut body = serde_json::to_value(obj)?;
        body["apiVersion"] = serde_json::json!(ar.api_version);
        body["kind"] = serde_json::json!(ar.kind);
        let applied = apply::apply_value(&self.client, &body, FIELD_MANAGER).await?;
        Ok(serde_json::from_value(serde_json::to_value(applied)?)?)
    }

    /// Server-side applies one object given as JSON (any kind the API server knows) with the
    /// test environment's field manager (forced).
    ///
    /// # Errors
    /// When the API server rejects the object.
    pub async fn apply_value(&self, value: &serde_json::Value) -> Result<()> {
        apply::apply_value(&self.client, value, FIELD_MANAGER).await?;
        Ok(())
    }

    /// Server-side applies every document of a YAML stream, in order.
    ///
    /// # Errors
    /// On a YAML error or the first object the API server rejects.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<()> {
        apply::apply_yaml(&self.client, yaml, FIELD_MANAGER).await
    }

    /// An admin client (`system:masters`).
    #[must_use]
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A client of its own, made on the calling tokio runtime. A client's connections live on
    /// the runtime that opened them: a cluster shared by tests that run side by side, each on
    /// a runtime that ends with it, gives each test its own ([`Self::client`] would hand one
    /// test a connection another test's ended runtime dropped).
    ///
    /// # Errors
    /// When the admin kubeconfig cannot be read.
    pub async fn new_client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// Path of an admin kubeconfig file.
    #[must_use]
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// API server URL, `https://127.0.0.1:<port>`.
    #[must_use]
    pub fn server_url(&self) -> &str {
        &self.server
    }

    /// The management cluster CA certificate (PEM), which also signs its serving certs.
    #[must_use]
    pub fn ca_pem(&self) -> String {
        self.ca.cert_pem()
    }

    /// The management cluster CA, to issue further certificates in tests.
    #[must_use]
    pub fn ca(&self) -> &TestCa {
        &self.ca
    }

    /// The programs this cluster runs.
    #[must_use]
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// The cluster's temporary directory (logs, certificates, kubeconfigs).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The etcd client URL.
    #[must_use]
    pub fn etcd_url(&self) -> &str {
        self.etcd.url()
    }

    /// The service CIDR of the API server.
    #[must_use]
    pub fn service_cidr(&self) -> &str {
        &self.service_cidr
    }

    /// The pod CIDR nodes get theirs from ([`Builder::cluster_cidr`]).
    #[must_use]
    pub fn cluster_cidr(&self) -> Option<&str> {
        self.cluster_cidr.as_deref()
    }

    /// The API server as other machines reach it, `https://<advertise address>:<port>`
    /// ([`Builder::advertise_address`]); `None` when it serves loopback only.
    #[must_use]
    pub fn advertised_url(&self) -> Option<String> {
        let port = self.server.rsplit(':').next()?;
        self.advertise_address
            .map(|ip| format!("https://{ip}:{port}"))
    }

    /// Process ids of every program this cluster started.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.etcd.pid(), self.apiserver.pid()];
        for p in [
            &self.controller_manager,
            &self.scheduler,
            &self.capi,
            &self.kubeadm_bootstrap,
        ]
        .into_iter()
        .flatten()
        {
            pids.push(p.pid());
        }
        pids
    }

    /// Writes a kubeconfig for user `user` in `groups` (a client certificate from the cluster
    /// CA) and returns its path; use it to run a program under its own identity, so the
    /// audit log tells its requests apart.
    ///
    /// # Errors
    /// On certificate or file errors.
    pub fn user_kubeconfig(&self, user: &str, groups: &[&str]) -> Result<PathBuf> {
        let cert = self.ca.client(user, groups)?;
        let path = self
            .dir
            .path()
            .join(format!("{user}.kubeconfig").replace(':', "_"));
        std::fs::write(
            &path,
            pki::kubeconfig(&self.server, &self.ca.cert_pem(), user, &cert),
        )?;
        Ok(path)
    }

    /// Writes a kubeconfig whose only credential is a token of `ServiceAccount` `ns/name`
    /// (`TokenRequest`, valid 24 h) and returns its path: a program run with it has exactly
    /// the rights RBAC gives that `ServiceAccount`, as in a pod.
    ///
    /// # Errors
    /// When the `ServiceAccount` does not exist or on file errors.
    pub async fn service_account_kubeconfig(&self, ns: &str, name: &str) -> Result<PathBuf> {
        let token = service_account_token(&self.client, ns, name, 24 * 3600).await?;
        let user = format!("system:serviceaccount:{ns}:{name}");
        let path = self.dir.path().join(format!("sa-{ns}-{name}.kubeconfig"));
        std::fs::write(
            &path,
            pki::token_kubeconfig(&self.server, &self.ca.cert_pem(), &user, &token),
        )?;
        Ok(path)
    }

    /// A client authenticating as `user` in `groups`.
    ///
    /// # Errors
    /// On certificate or client errors.
    pub async fn user_client(&self, user: &str, groups: &[&str]) -> Result<Client> {
        client_from_kubeconfig(&self.user_kubeconfig(user, groups)?).await
    }

    /// Completed requests from the API server's audit log, oldest first.
    ///
    /// # Errors
    /// When the log cannot be read.
    pub fn audit_events(&self) -> Result<Vec<AuditEvent>> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log"))?;
        Ok(audit::parse(&text))
    }

    /// Stops the Cluster API core manager (its webhooks then refuse, as in a real outage).
    pub fn stop_capi(&mut self) {
        if let Some(mut p) = self.capi.take() {
            p.stop(Duration::from_secs(5));
        }
    }
}

async fn wait_ready(client: &Client, apiserver: &mut Supervised) -> Result<()> {
    poll_until(
        "kube-apiserver did not become ready",
        START_TIMEOUT,
        Duration::from_millis(100),
        Some(apiserver),
        || readyz(client),
    )
    .await
}

/// Whether the API server of `client` answers `/readyz` with `ok`.
pub async fn readyz(client: &Client) -> bool {
    let Ok(req) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    client
        .request_text(req)
        .await
        .is_ok_and(|body| body.trim() == "ok")
}

/// HTTP status of a plain `GET http://127.0.0.1:<port><path>`, `None` if unreachable.
async fn http_status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let head = String::from_utf8_lossy(&buf);
    head.split_whitespace().nth(1)?.parse().ok()
}

/// The first host address of an IPv4 CIDR (the `kubernetes` Service IP).
fn first_ip(cidr: &str) -> Result<IpAddr> {
    let (net, _) = cidr
        .split_once('/')
        .context("service CIDR needs a prefix length")?;
    let base: Ipv4Addr = net.parse().context("service CIDR must be IPv4 here")?;
    Ok(IpAddr::V4(Ipv4Addr::from(u32::from(base) + 1)))
}
