//! The kamaji-rs `manager` as its own process, under the identity `make release` ships: the
//! ServiceAccount of `config/manager/manager.yaml`, bound by `config/rbac/*.yaml` exactly as
//! written (variables substituted with their defaults, as `clusterctl init` does), and
//! authenticating with a real token of that ServiceAccount. A permission missing from
//! `config/rbac` fails the tests that need it (the manager logs the Forbidden answer).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, Result, bail};
use kamaji_testenv::{LocalCluster, Supervised, free_port, workspace_root};

use crate::{Env, substitute};

/// The manager's ServiceAccount and the provider namespace, as `config/manager/manager.yaml`
/// declares them and clusterctl substitutes them by default (`${KAMAJI_RS_NAMESPACE:=kamaji-rs-system}`).
#[derive(Debug, Clone)]
pub struct Identity {
    /// The provider namespace (`kamaji-rs-system`).
    pub namespace: String,
    /// The ServiceAccount name (`kamaji-rs-manager`).
    pub service_account: String,
    /// The user name the API server gives its token
    /// (`system:serviceaccount:<namespace>:<service account>`), as the audit log shows it.
    pub user: String,
    /// A kubeconfig whose only credential is a token of that ServiceAccount.
    pub kubeconfig: PathBuf,
}

impl Identity {
    /// Applies the shipped Namespace and ServiceAccount (the Deployment of manager.yaml is
    /// left out: the manager runs as a local process) and every `config/rbac/*.yaml`, then
    /// requests a token for the ServiceAccount.
    pub async fn install(cluster: &LocalCluster) -> Result<Self> {
        let root = workspace_root();
        let defaults = HashMap::new();
        let manifest = substitute(
            &std::fs::read_to_string(root.join("config/manager/manager.yaml"))?,
            &defaults,
        )?;
        let mut account = None;
        for doc in serde_yaml::Deserializer::from_str(&manifest) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
            match v["kind"].as_str() {
                Some("Namespace") => cluster.apply_value(&v).await?,
                Some("ServiceAccount") => {
                    cluster.apply_value(&v).await?;
                    let meta = &v["metadata"];
                    account = Some((
                        meta["namespace"].as_str().unwrap_or_default().to_owned(),
                        meta["name"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
                _ => {}
            }
        }
        let (namespace, service_account) =
            account.context("config/manager/manager.yaml declares no ServiceAccount")?;
        let mut rbac: Vec<PathBuf> = std::fs::read_dir(root.join("config/rbac"))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        rbac.retain(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        });
        rbac.sort();
        for file in &rbac {
            let text = substitute(&std::fs::read_to_string(file)?, &defaults)?;
            cluster
                .apply_yaml(&text)
                .await
                .with_context(|| format!("apply {}", file.display()))?;
        }
        Self::of(cluster, namespace, service_account).await
    }

    /// The identity of ServiceAccount `namespace/service_account` of `cluster`, with a
    /// kubeconfig holding a fresh token of it.
    ///
    /// # Errors
    /// When the token cannot be requested.
    pub async fn of(
        cluster: &LocalCluster,
        namespace: String,
        service_account: String,
    ) -> Result<Self> {
        let kubeconfig = cluster
            .service_account_kubeconfig(&namespace, &service_account)
            .await?;
        Ok(Self {
            user: format!("system:serviceaccount:{namespace}:{service_account}"),
            namespace,
            service_account,
            kubeconfig,
        })
    }
}

/// The manager process of an environment and how it is started.
pub(crate) struct Manager {
    pub(crate) process: Option<Supervised>,
    pub(crate) identity: Identity,
    starts: u32,
    metrics_port: u16,
    hosts: Vec<(String, IpAddr)>,
}

impl Manager {
    pub(crate) fn new(identity: Identity) -> Self {
        Self {
            process: None,
            identity,
            starts: 0,
            metrics_port: 0,
            hosts: Vec::new(),
        }
    }

    /// Spawns a manager process with `extra` flags, metrics on `metrics_port`, its log in
    /// `dir`; the caller owns it (it is stopped when dropped).
    pub(crate) fn spawn(
        &mut self,
        dir: &std::path::Path,
        metrics_port: u16,
        extra: &[&str],
    ) -> Result<Supervised> {
        self.starts += 1;
        let mut cmd = if self.hosts.is_empty() {
            Command::new(manager_binary()?)
        } else {
            // A private mount namespace whose /etc/hosts resolves the test's host names, so
            // no name lookup ever leaves the machine.
            let hosts = dir.join("manager-hosts");
            let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
            for (name, ip) in &self.hosts {
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
        cmd.env("KUBECONFIG", &self.identity.kubeconfig)
            // In a pod the Lease namespace is the pod's own (the ServiceAccount mount).
            .env("LEADER_ELECTION_NAMESPACE", &self.identity.namespace)
            .env("RUST_LOG", "info,kamaji_reconciler=debug,kube=warn")
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .arg(format!(
                "--health-probe-bind-address=127.0.0.1:{}",
                free_port()?
            ));
        let log = dir.join(format!("manager-{}.log", self.starts));
        cmd.args(extra);
        Supervised::spawn("manager", cmd, &log)
    }

    /// Starts (or restarts) the manager process, its log in `dir`.
    pub(crate) fn start(&mut self, dir: &std::path::Path) -> Result<()> {
        self.metrics_port = free_port()?;
        self.process = Some(self.spawn(dir, self.metrics_port, &[])?);
        Ok(())
    }

    /// A counter or gauge of the running manager's `/metrics` (sum over label sets), 0 if
    /// unreachable.
    pub(crate) async fn metric(&self, name: &str) -> f64 {
        metric_at(
            &format!("http://127.0.0.1:{}/metrics", self.metrics_port),
            name,
        )
        .await
    }

    /// The running manager's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Supervised::pid)
    }

    /// Kills the running manager with SIGKILL (a crash).
    pub(crate) fn kill(&mut self) {
        if let Some(mut m) = self.process.take() {
            m.kill();
        }
    }

    /// The last `lines` lines of the running manager's log (for failure messages).
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|m| m.log_tail(lines))
            .unwrap_or_default()
    }

    /// The whole log of the running manager process.
    pub(crate) fn full_log(&self) -> String {
        self.process
            .as_ref()
            .and_then(|m| std::fs::read_to_string(m.log_path()).ok())
            .unwrap_or_default()
    }
}

impl Env {
    /// The identity the manager runs as (namespace, ServiceAccount, audit user name).
    #[must_use]
    pub fn manager_identity(&self) -> &Identity {
        &self.manager.identity
    }

    /// Starts (or restarts) the manager process.
    pub fn start_manager(&mut self) -> Result<()> {
        self.manager.start(self.cluster.dir())
    }

    /// Spawns one more manager process with `extra` flags, metrics on `metrics_port`; the
    /// caller owns it (it is stopped when dropped).
    pub fn spawn_manager(&mut self, metrics_port: u16, extra: &[&str]) -> Result<Supervised> {
        self.manager.spawn(self.cluster.dir(), metrics_port, extra)
    }

    /// Restarts the manager so that it resolves `name` to `ip` (a private `/etc/hosts`).
    pub fn resolve_for_manager(&mut self, name: &str, ip: IpAddr) -> Result<()> {
        self.manager.hosts.push((name.to_owned(), ip));
        self.kill_manager();
        self.start_manager()
    }

    /// Whether the manager process has exited (crashed) since it was started.
    pub fn manager_exited(&mut self) -> bool {
        self.manager
            .process
            .as_mut()
            .is_none_or(|m| m.exited().is_some())
    }

    /// The manager's process id.
    #[must_use]
    pub fn manager_pid(&self) -> Option<u32> {
        self.manager.pid()
    }

    /// A counter or gauge of the manager's `/metrics` (sum over label sets), 0 if unreachable.
    pub async fn manager_metric(&self, name: &str) -> f64 {
        self.manager.metric(name).await
    }

    /// Kills the manager with SIGKILL (a crash).
    pub fn kill_manager(&mut self) {
        self.manager.kill();
    }

    /// The whole log of the running manager process.
    #[must_use]
    pub fn manager_full_log(&self) -> String {
        self.manager.full_log()
    }

    /// The manager's log so far (for failure messages).
    #[must_use]
    pub fn manager_log(&self) -> String {
        self.manager.log_tail(60)
    }
}

impl Env {
    /// The logs of the manager pods (for failure messages).
    pub async fn manager_pod_logs(&self) -> String {
        use k8s_openapi::api::core::v1::Pod;
        let pods = kube::Api::<Pod>::namespaced(self.client(), &self.manager.identity.namespace);
        let mut out = String::new();
        let listed = pods
            .list(&kube::api::ListParams::default().labels("app.kubernetes.io/component=manager"))
            .await;
        for pod in listed.map(|l| l.items).unwrap_or_default() {
            let name = pod.metadata.name.unwrap_or_default();
            let log = pods
                .logs(
                    &name,
                    &kube::api::LogParams {
                        tail_lines: Some(40),
                        ..Default::default()
                    },
                )
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            let _ = writeln!(out, "manager pod {name}:\n{log}");
        }
        out
    }
}

/// A counter or gauge of the Prometheus text at `url` (summed over label sets), 0 if the
/// endpoint does not answer.
pub async fn metric_at(url: &str, name: &str) -> f64 {
    let Ok(resp) = reqwest::get(url).await else {
        return 0.0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The manager Deployment of `config/manager/manager.yaml` with its variables at their
/// defaults, as `clusterctl init` substitutes them.
///
/// # Errors
/// When the manifest cannot be read or holds no Deployment.
pub fn shipped_manager_deployment() -> Result<serde_json::Value> {
    let manifest = substitute(
        &std::fs::read_to_string(workspace_root().join("config/manager/manager.yaml"))?,
        &HashMap::new(),
    )?;
    for doc in serde_yaml::Deserializer::from_str(&manifest) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if v["kind"] == "Deployment" {
            return Ok(v);
        }
    }
    bail!("config/manager/manager.yaml has no Deployment")
}

/// The `manager` binary: `$KAMAJI_MANAGER_BIN`, else `target/<profile>/manager` beside the
/// running test or example, brought up to date first with `cargo build -p kamaji-reconciler
/// --bin manager` (once per process), so a test never runs a stale manager.
pub fn manager_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KAMAJI_MANAGER_BIN") {
        return Ok(PathBuf::from(p));
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_manager().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build_manager() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> or target/<profile>/examples/<example>
    let profile_dir = exe
        .parent()
        .and_then(|p| p.parent())
        .context("no parent directory")?;
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-q",
        "--locked",
        "-p",
        "kamaji-reconciler",
        "--bin",
        "manager",
    ])
    .current_dir(workspace_root());
    if release {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .context("running cargo build for the manager")?;
    if !out.status.success() {
        bail!(
            "cargo build -p kamaji-reconciler --bin manager failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = profile_dir.join("manager");
    if !path.exists() {
        bail!("{} is missing after the build", path.display());
    }
    Ok(path)
}
