//! The real `clusterctl` against an environment: `clusterctl init` from a local repository
//! (Cluster API's core and CABPK components as `tests/tools` rendered them, kamaji-rs's as
//! `make components` writes them), and the labels `clusterctl init` puts on a provider's CRDs
//! for environments whose providers were installed otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use kamaji_machine::ManagementMachines;
use kamaji_testenv::{CAPI_VERSION, LocalCluster, workspace_root};

use crate::Env;
use crate::manager::{Identity, manager_binary, shipped_manager_deployment};

/// The version kamaji-rs's components carry in the local repository (`v` + the workspace
/// version, as `make release`'s `VERSION`).
#[must_use]
pub fn provider_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// The newer version the upgrade test moves to: [`provider_version`] with its patch number
/// raised by one (`v0.1.0` → `v0.1.1`, the same release series, so `metadata.yaml` covers it).
#[must_use]
pub fn next_provider_version() -> String {
    let current = provider_version();
    let (head, patch) = current.rsplit_once('.').unwrap_or((&current, "0"));
    format!("{head}.{}", patch.parse::<u32>().unwrap_or(0) + 1)
}

/// The manager image a version's components name (`make components VERSION=<v>`'s `IMAGE`).
#[must_use]
pub fn manager_image_for(version: &str) -> String {
    format!("ghcr.io/kamaji-rs/manager:{version}")
}

/// Writes a local clusterctl repository under `dir` and a clusterctl configuration naming it:
/// Cluster API's `cluster-api` and `kubeadm` providers from the tools
/// ([`kamaji_testenv::Tools::clusterctl_repository`]) and `kamaji` at each of `versions`, as
/// `make components VERSION=<v>` writes them (`control-plane-kamaji/<v>/`, the provider label
/// clusterctl derives; each names the image [`manager_image_for`] it). The configuration also
/// sets `CLUSTER_TOPOLOGY=true` (ClusterClass, as the quickstart exports it) and declares
/// cert-manager externally provisioned (the stand-in). Returns the configuration file's path.
///
/// # Errors
/// When `make components` fails or a file cannot be written.
pub fn write_local_repository(
    cluster: &LocalCluster,
    dir: &Path,
    versions: &[String],
) -> Result<PathBuf> {
    let ours = dir.join("control-plane-kamaji");
    for version in versions {
        let out = ours.join(version);
        std::fs::create_dir_all(&out)?;
        let made = Command::new("make")
            .args(["-s", "components"])
            .arg(format!("OUT={}", out.display()))
            .arg(format!("VERSION={version}"))
            .current_dir(workspace_root())
            .output()
            .context("running make components")?;
        if !made.status.success() {
            bail!(
                "make components failed:\n{}",
                String::from_utf8_lossy(&made.stderr)
            );
        }
    }
    let first = versions.first().context("no version to write")?;
    let capi = cluster.tools().clusterctl_repository();
    let config = format!(
        "providers:
- name: cluster-api
  type: CoreProvider
  url: file://{}
- name: kubeadm
  type: BootstrapProvider
  url: file://{}
- name: kamaji
  type: ControlPlaneProvider
  url: file://{}
cert-manager:
  externallyProvisioned: \"true\"
CLUSTER_TOPOLOGY: \"true\"
",
        capi.join("cluster-api")
            .join(CAPI_VERSION)
            .join("core-components.yaml")
            .display(),
        capi.join("bootstrap-kubeadm")
            .join(CAPI_VERSION)
            .join("bootstrap-components.yaml")
            .display(),
        ours.join(first)
            .join("control-plane-components.yaml")
            .display(),
    );
    let path = clusterctl_home(cluster)
        .join(".config/cluster-api")
        .join("clusterctl.yaml");
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(&path, config)?;
    Ok(path)
}

/// Imports the manager image ([`kamaji_machine::images::manager_image`] of [`manager_binary`])
/// under `reference` into every machine of `machines`, as a registry pull would leave it.
///
/// # Errors
/// When the binary cannot be built or the image imported.
pub async fn import_manager_image(machines: &ManagementMachines, reference: &str) -> Result<()> {
    let built = kamaji_machine::images::manager_image(&manager_binary()?, reference)?;
    for machine in machines.machines() {
        machine.import_image(&built).await?;
    }
    Ok(())
}

/// `clusterctl init --core cluster-api --bootstrap kubeadm --control-plane kamaji` into a bare
/// `cluster` whose `machines` have Cluster API's images
/// ([`kamaji_machine::management::Builder::with_capi_images`]) and a running cert-manager
/// (stand-in): the local repository is written ([`write_local_repository`], with
/// [`provider_version`] and [`next_provider_version`]), the manager's image of
/// [`provider_version`] imported into every machine ([`import_manager_image`]), and clusterctl
/// waits until every provider's Deployment is available. Returns the manager's identity as
/// installed.
///
/// # Errors
/// When clusterctl fails (its output is in the message) or the image cannot be imported.
pub async fn init(cluster: &LocalCluster, machines: &ManagementMachines) -> Result<Identity> {
    let repository = cluster.dir().join("clusterctl-repository");
    write_local_repository(
        cluster,
        &repository,
        &[provider_version(), next_provider_version()],
    )?;
    let deployment = shipped_manager_deployment()?;
    import_manager_image(machines, &manager_image_for(&provider_version())).await?;
    let (kubeconfig, home) = (
        cluster.kubeconfig_path().to_owned(),
        clusterctl_home(cluster),
    );
    let clusterctl = cluster.tools().path("clusterctl");
    let args = [
        "init".to_owned(),
        format!("--core=cluster-api:{CAPI_VERSION}"),
        format!("--bootstrap=kubeadm:{CAPI_VERSION}"),
        format!("--control-plane=kamaji:{}", provider_version()),
        "--wait-providers".to_owned(),
        "--wait-provider-timeout=300".to_owned(),
    ];
    tokio::task::spawn_blocking(move || run(&clusterctl, &home, &kubeconfig, &args, &[])).await??;
    let namespace = deployment["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Identity::of(cluster, namespace, service_account).await
}

/// clusterctl's home: its configuration directory (`$XDG_CONFIG_HOME/cluster-api`) is private
/// to the environment, so it never reads a user's configuration.
fn clusterctl_home(cluster: &LocalCluster) -> PathBuf {
    cluster.dir().join("clusterctl-home")
}

/// Runs `clusterctl args… --kubeconfig=<kubeconfig>` with version checks off, `home` as its
/// home and `vars` in its environment; its combined output, or an error carrying it.
fn run(
    clusterctl: &Path,
    home: &Path,
    kubeconfig: &Path,
    args: &[String],
    vars: &[(&str, &str)],
) -> Result<String> {
    std::fs::create_dir_all(home)?;
    let out = Command::new(clusterctl)
        .args(args)
        .envs(vars.iter().copied())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .env("HOME", home)
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

impl Env {
    /// Runs the real `clusterctl` (built by `tests/tools`) against this management cluster
    /// (`--kubeconfig` is added) with `args`; returns its combined output, or fails with it.
    /// Version checks are off and its configuration directory is private, so it never
    /// reaches the network.
    pub fn clusterctl(&self, args: &[&str]) -> Result<String> {
        self.clusterctl_with(args, &[])
    }

    /// [`Env::clusterctl`] with variables `vars` set in its environment (as a user exports
    /// them for `clusterctl generate cluster`).
    pub fn clusterctl_with(&self, args: &[&str], vars: &[(&str, &str)]) -> Result<String> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        run(
            &self.cluster.tools().path("clusterctl"),
            &clusterctl_home(&self.cluster),
            self.cluster.kubeconfig_path(),
            &args,
            vars,
        )
    }
}
