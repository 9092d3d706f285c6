//! Locating the binaries built by `tests/tools/build.sh`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The directory of real programs built by `make tools`.
///
/// Lookup order: `$KAMAJI_TOOLS_BIN`, then the path recorded in `<workspace>/target/tools-bin`
/// by `tests/tools/build.sh`.
#[derive(Debug, Clone)]
pub struct Tools {
    bin: PathBuf,
}

impl Tools {
    /// Finds the tools directory.
    ///
    /// # Errors
    /// When neither `$KAMAJI_TOOLS_BIN` nor `target/tools-bin` names an existing directory
    /// (the message says to run `make tools`).
    pub fn locate() -> Result<Self> {
        let bin = if let Some(dir) = std::env::var_os("KAMAJI_TOOLS_BIN") {
            PathBuf::from(dir)
        } else {
            let record = workspace_root().join("target/tools-bin");
            let text = std::fs::read_to_string(&record).with_context(|| {
                format!("{} is missing: run `make tools` first", record.display())
            })?;
            PathBuf::from(text.trim())
        };
        if !bin.join("kube-apiserver").exists() {
            bail!(
                "{} holds no kube-apiserver: run `make tools`",
                bin.display()
            );
        }
        Ok(Self { bin })
    }

    /// Absolute path of the program `name` (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`, `kubeadm`, `kubectl`, `capi-manager`, `capi-kubeadm-bootstrap-manager`).
    #[must_use]
    pub fn path(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The directory holding the programs.
    #[must_use]
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// Directory of the Cluster API core CRDs (from the same module version as `capi-manager`).
    #[must_use]
    pub fn capi_core_crds(&self) -> PathBuf {
        self.bin.join("crds/capi-core")
    }

    /// Directory of the Gateway API CRDs the tests install (`TLSRoute`, standard channel).
    #[must_use]
    pub fn gateway_api_crds(&self) -> PathBuf {
        self.bin.join("crds/gateway-api")
    }

    /// Directory of the kubeadm bootstrap provider's CRDs.
    #[must_use]
    pub fn capi_bootstrap_crds(&self) -> PathBuf {
        self.bin.join("crds/capi-kubeadm-bootstrap")
    }

    /// The Cluster API core webhook configurations (`config/webhook/manifests.yaml`).
    #[must_use]
    pub fn capi_core_webhooks(&self) -> PathBuf {
        self.bin.join("webhooks/capi-core.yaml")
    }

    /// Cluster API's own providers as a local clusterctl repository
    /// (`{provider-label}/{version}/{components}.yaml` with `metadata.yaml`):
    /// `cluster-api/<CAPI_VERSION>/core-components.yaml` and
    /// `bootstrap-kubeadm/<CAPI_VERSION>/bootstrap-components.yaml`, rendered from the CAPI
    /// module's `config/default` as its `make release-manifests` does, naming the images
    /// `registry.k8s.io/cluster-api/{cluster-api-controller,kubeadm-bootstrap-controller}:<version>`
    /// with pull policy `IfNotPresent`.
    #[must_use]
    pub fn clusterctl_repository(&self) -> PathBuf {
        self.bin.join("clusterctl-repository")
    }
}

/// The kamaji-rs workspace root (two levels above this crate).
#[must_use]
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
