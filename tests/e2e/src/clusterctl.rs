//! The real `clusterctl` against an environment, and the labels `clusterctl init` puts on a
//! provider's CRDs.

use std::process::Command;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::Env;

impl Env {
    /// Labels the CRDs as `clusterctl init` labels a provider's components (`clusterctl.cluster.x-k8s.io`
    /// and `cluster.x-k8s.io/provider`), so that `clusterctl move` discovers their objects: the
    /// Cluster API CRDs as `cluster-api` (or `bootstrap-kubeadm`), kamaji-rs's as
    /// `control-plane-kamaji`.
    pub async fn label_crds_as_clusterctl_init_does(&self) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        for crd in api.list(&ListParams::default()).await? {
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
}
