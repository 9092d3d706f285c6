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

/// Writes `make components VERSION=<version>` into the local clusterctl repository `dir`, at
/// `control-plane-kamaji/<version>/` (the provider label clusterctl derives), as the install
/// guide's steps `components` and `repository` do with `make release` and a copy (the manager
/// image is imported into the machines instead of pushed: [`import_manager_image`]).
///
/// # Errors
/// When `make components` fails, or the guide's steps no longer name that layout.
pub fn write_provider_version(dir: &Path, version: &str) -> Result<()> {
    let components = crate::install_guide::step("components")?;
    anyhow::ensure!(
        components.contains("make release"),
        "the guide's step components no longer runs make release: {components}"
    );
    let repository = crate::install_guide::step("repository")?;
    for part in [
        "control-plane-kamaji/v0.1.0",
        "out/control-plane-components.yaml",
        "out/metadata.yaml",
    ] {
        anyhow::ensure!(
            repository.contains(part),
            "the guide's step repository no longer names {part}: {repository}"
        );
    }
    let out = dir.join("control-plane-kamaji").join(version);
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
    Ok(())
}

/// Writes a local clusterctl repository under `dir` holding kamaji-rs at `version`
/// ([`write_provider_version`]) and the clusterctl configuration naming it: the guide's step
/// `clusterctl-config` with `<repo>` as `dir`, and what this machine needs beside it (it
/// reaches no network): Cluster API's `cluster-api` and `kubeadm` providers from the tools
/// ([`kamaji_testenv::Tools::clusterctl_repository`]), cert-manager declared externally
/// provisioned (the stand-in), and `CLUSTER_TOPOLOGY=true` (ClusterClass, as the quickstart
/// exports it). Returns the configuration file's path.
///
/// # Errors
/// When `make components` fails, the guide's configuration does not parse or does not name
/// the repository, or a file cannot be written.
pub fn write_local_repository(
    cluster: &LocalCluster,
    dir: &Path,
    version: &str,
) -> Result<PathBuf> {
    write_provider_version(dir, version)?;
    let guide = crate::install_guide::step("clusterctl-config")?
        .replace("<repo>", &dir.display().to_string());
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&guide).context("the guide's clusterctl.yaml")?;
    let ours = dir
        .join("control-plane-kamaji")
        .join(version)
        .join("control-plane-components.yaml");
    anyhow::ensure!(
        guide.contains(&format!("file://{}", ours.display())),
        "the guide's clusterctl.yaml does not name {}: {guide}",
        ours.display()
    );
    let capi = cluster.tools().clusterctl_repository();
    let extra: serde_yaml::Value = serde_yaml::from_str(&format!(
        "- name: cluster-api
  type: CoreProvider
  url: file://{}
- name: kubeadm
  type: BootstrapProvider
  url: file://{}
",
        capi.join("cluster-api")
            .join(CAPI_VERSION)
            .join("core-components.yaml")
            .display(),
        capi.join("bootstrap-kubeadm")
            .join(CAPI_VERSION)
            .join("bootstrap-components.yaml")
            .display(),
    ))?;
    let providers = config
        .get_mut("providers")
        .and_then(serde_yaml::Value::as_sequence_mut)
        .context("the guide's clusterctl.yaml has no providers")?;
    providers.extend(extra.as_sequence().cloned().unwrap_or_default());
    let map = config.as_mapping_mut().context("a mapping")?;
    map.insert(
        "cert-manager".into(),
        serde_yaml::from_str("{externallyProvisioned: \"true\"}")?,
    );
    map.insert("CLUSTER_TOPOLOGY".into(), "true".into());
    let path = clusterctl_home(cluster)
        .join(".config/cluster-api")
        .join("clusterctl.yaml");
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(&path, serde_yaml::to_string(&config)?)?;
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

/// The install guide's step `init` (`clusterctl init --bootstrap kubeadm --control-plane
/// kamaji --wait-providers`, run as written with `--kubeconfig` added) into a bare `cluster`
/// whose `machines` have Cluster API's images
/// ([`kamaji_machine::management::Builder::with_capi_images`]) and a running cert-manager
/// (stand-in): the local repository is written ([`write_local_repository`], with
/// [`provider_version`]; the upgrade test adds [`next_provider_version`] later), the manager's
/// image of [`provider_version`] imported into every machine ([`import_manager_image`]), and
/// clusterctl waits until every provider's Deployment is available. Returns the manager's
/// identity as installed.
///
/// # Errors
/// When clusterctl fails (its output is in the message) or the image cannot be imported.
pub async fn init(cluster: &LocalCluster, machines: &ManagementMachines) -> Result<Identity> {
    write_local_repository(cluster, &repository(cluster), &provider_version())?;
    let deployment = shipped_manager_deployment()?;
    import_manager_image(machines, &manager_image_for(&provider_version())).await?;
    let (kubeconfig, home) = (
        cluster.kubeconfig_path().to_owned(),
        clusterctl_home(cluster),
    );
    let clusterctl = cluster.tools().path("clusterctl");
    let (command, _) = crate::install_guide::command("init")?;
    let Some(("clusterctl", args)) = command.split_first().map(|(c, a)| (c.as_str(), a.to_vec()))
    else {
        bail!("the guide's step init is not a clusterctl command: {command:?}");
    };
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

/// The environment's local clusterctl repository.
#[must_use]
pub fn repository(cluster: &LocalCluster) -> PathBuf {
    cluster.dir().join("clusterctl-repository")
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
