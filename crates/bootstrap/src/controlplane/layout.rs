//! Where the control-plane containers find their key material: kubeadm's `/etc/kubernetes`
//! tree, one directory per Secret (`pki/ca/tls.crt`, `pki/apiserver/tls.key`,
//! `controller-manager/kubeconfig`, …), each mounted read-only from the Secret that holds it.
//!
//! The flags ([`super::default_flags`]) and the pod's volumes and mounts are both derived from
//! this one table, so a path in a flag always exists in the container. The root is a
//! parameter, so a test can lay the same tree out in a temporary directory and start the real
//! programs with the product's flags.

use kamaji_api::kcp::Component;
use kamaji_api::meta::KUBECONFIG_SECRET_KEY;
use kamaji_api::names::{InternalSecret, ObjectNames};

/// One Secret mounted into the control-plane pod, as a directory of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PkiVolume {
    /// `<cluster>-ca`: the cluster CA (`tls.crt`, `tls.key`).
    Ca,
    /// `<cluster>-sa`: the service-account key pair (`tls.crt` public, `tls.key` private).
    ServiceAccount,
    /// `<cluster>-proxy`: the front-proxy CA, certificate only.
    FrontProxyCa,
    /// The kube-apiserver serving certificate.
    ApiServer,
    /// kube-apiserver's client certificate towards kubelets.
    ApiServerKubeletClient,
    /// The front-proxy client certificate.
    FrontProxyClient,
    /// `<cluster>-apiserver-etcd-client`: the datastore client certificate and the datastore CA
    /// (`ca.crt`).
    Datastore,
    /// kube-controller-manager's kubeconfig (key `value` mounted as `kubeconfig`).
    ControllerManagerKubeconfig,
    /// kube-scheduler's kubeconfig (key `value` mounted as `kubeconfig`).
    SchedulerKubeconfig,
}

impl PkiVolume {
    /// Every volume, in the order the pod lists them.
    pub const ALL: [Self; 9] = [
        Self::Ca,
        Self::ServiceAccount,
        Self::FrontProxyCa,
        Self::ApiServer,
        Self::ApiServerKubeletClient,
        Self::FrontProxyClient,
        Self::ControllerManagerKubeconfig,
        Self::SchedulerKubeconfig,
        Self::Datastore,
    ];

    /// The pod volume name (a DNS label).
    #[must_use]
    pub const fn volume_name(self) -> &'static str {
        match self {
            Self::Ca => "ca",
            Self::ServiceAccount => "sa",
            Self::FrontProxyCa => "front-proxy-ca",
            Self::ApiServer => "apiserver",
            Self::ApiServerKubeletClient => "apiserver-kubelet-client",
            Self::FrontProxyClient => "front-proxy-client",
            Self::Datastore => "datastore",
            Self::ControllerManagerKubeconfig => "controller-manager-kubeconfig",
            Self::SchedulerKubeconfig => "scheduler-kubeconfig",
        }
    }

    /// The Secret this volume mounts, for the control plane named by `names`.
    #[must_use]
    pub fn secret_name(self, names: &ObjectNames) -> String {
        match self {
            Self::Ca => names.ca_secret(),
            Self::ServiceAccount => names.service_account_secret(),
            Self::FrontProxyCa => names.front_proxy_ca_secret(),
            Self::ApiServer => names.internal_secret(InternalSecret::ApiServer),
            Self::ApiServerKubeletClient => {
                names.internal_secret(InternalSecret::ApiServerKubeletClient)
            }
            Self::FrontProxyClient => names.internal_secret(InternalSecret::FrontProxyClient),
            Self::Datastore => names.apiserver_etcd_client_secret(),
            Self::ControllerManagerKubeconfig => {
                names.internal_secret(InternalSecret::ControllerManagerKubeconfig)
            }
            Self::SchedulerKubeconfig => names.internal_secret(InternalSecret::SchedulerKubeconfig),
        }
    }

    /// The keys mounted and the file each becomes, when not every key is mounted under its
    /// own name: the front-proxy CA's key never enters the pod, kubeconfigs become files named
    /// `kubeconfig`.
    #[must_use]
    pub fn items(self) -> Option<&'static [(&'static str, &'static str)]> {
        match self {
            Self::FrontProxyCa => Some(&[("tls.crt", "tls.crt")]),
            Self::ControllerManagerKubeconfig | Self::SchedulerKubeconfig => {
                Some(&[(KUBECONFIG_SECRET_KEY, "kubeconfig")])
            }
            _ => None,
        }
    }

    /// The directory below the layout root, e.g. `pki/ca`.
    const fn dir(self) -> &'static str {
        match self {
            Self::Ca => "pki/ca",
            Self::ServiceAccount => "pki/sa",
            Self::FrontProxyCa => "pki/front-proxy-ca",
            Self::ApiServer => "pki/apiserver",
            Self::ApiServerKubeletClient => "pki/apiserver-kubelet-client",
            Self::FrontProxyClient => "pki/front-proxy-client",
            Self::Datastore => "pki/datastore",
            Self::ControllerManagerKubeconfig => "controller-manager",
            Self::SchedulerKubeconfig => "scheduler",
        }
    }
}

/// The `/etc/kubernetes` tree of the control-plane containers, or the same tree under another
/// root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: String,
}

impl Default for Layout {
    fn default() -> Self {
        Self::new(Self::KUBERNETES_DIR)
    }
}

impl Layout {
    /// kubeadm's configuration directory, the root in the containers.
    pub const KUBERNETES_DIR: &'static str = "/etc/kubernetes";

    /// The tree under `root` (no trailing `/`).
    #[must_use]
    pub fn new(root: &str) -> Self {
        Self {
            root: root.trim_end_matches('/').to_owned(),
        }
    }

    /// The directory `volume` is mounted at.
    #[must_use]
    pub fn dir(&self, volume: PkiVolume) -> String {
        format!("{}/{}", self.root, volume.dir())
    }

    /// The file of key `file` (after [`PkiVolume::items`] renaming) in `volume`.
    #[must_use]
    pub fn file(&self, volume: PkiVolume, file: &str) -> String {
        format!("{}/{file}", self.dir(volume))
    }

    /// The directory of the service-account rotation Secret (`<cluster>-sa-rotation.keys`),
    /// mounted into kube-apiserver only while a rotation runs.
    #[must_use]
    pub fn service_account_verify_dir(&self) -> String {
        format!("{}/pki/sa-rotation", self.root)
    }

    /// The other public key kube-apiserver accepts while a service-account key rotation
    /// runs (key `verify.pub` of the rotation Secret).
    #[must_use]
    pub fn service_account_verify_file(&self) -> String {
        format!("{}/verify.pub", self.service_account_verify_dir())
    }

    /// The directory of the encryption Secret (`<cluster>-encryption.config`), mounted into
    /// kube-apiserver only.
    #[must_use]
    pub fn encryption_dir(&self) -> String {
        format!("{}/encryption", self.root)
    }

    /// kube-apiserver's `--encryption-provider-config` (in [`Layout::encryption_dir`]).
    #[must_use]
    pub fn encryption_file(&self) -> String {
        format!(
            "{}/{}",
            self.encryption_dir(),
            crate::encryption::CONFIGURATION_KEY
        )
    }

    /// The directory of the CA rotation Secret's trust bundles
    /// (`<cluster>-ca-rotation.keys`), mounted into kube-apiserver and
    /// kube-controller-manager only while a CA rotation runs.
    #[must_use]
    pub fn ca_rotation_dir(&self) -> String {
        format!("{}/pki/ca-rotation", self.root)
    }

    /// A file of [`Layout::ca_rotation_dir`].
    #[must_use]
    pub fn ca_rotation_file(&self, file: &str) -> String {
        format!("{}/{file}", self.ca_rotation_dir())
    }

    /// A component's own kubeconfig file, for kube-controller-manager and kube-scheduler.
    #[must_use]
    pub fn kubeconfig(&self, component: Component) -> Option<String> {
        match component {
            Component::ControllerManager => {
                Some(self.file(PkiVolume::ControllerManagerKubeconfig, "kubeconfig"))
            }
            Component::Scheduler => Some(self.file(PkiVolume::SchedulerKubeconfig, "kubeconfig")),
            Component::ApiServer => None,
        }
    }

    /// The volumes `component` mounts (read-only), with the datastore's only when the
    /// datastore uses TLS client certificates.
    #[must_use]
    pub fn mounts(component: Component, tls_datastore: bool) -> Vec<PkiVolume> {
        match component {
            Component::ApiServer => {
                let mut m = vec![
                    PkiVolume::Ca,
                    PkiVolume::ServiceAccount,
                    PkiVolume::FrontProxyCa,
                    PkiVolume::ApiServer,
                    PkiVolume::ApiServerKubeletClient,
                    PkiVolume::FrontProxyClient,
                ];
                if tls_datastore {
                    m.push(PkiVolume::Datastore);
                }
                m
            }
            Component::ControllerManager => vec![
                PkiVolume::Ca,
                PkiVolume::ServiceAccount,
                PkiVolume::FrontProxyCa,
                PkiVolume::ControllerManagerKubeconfig,
            ],
            Component::Scheduler => vec![PkiVolume::SchedulerKubeconfig],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_kubeadm_directories() {
        let l = Layout::default();
        assert_eq!(
            l.file(PkiVolume::Ca, "tls.crt"),
            "/etc/kubernetes/pki/ca/tls.crt"
        );
        assert_eq!(
            l.kubeconfig(Component::Scheduler).as_deref(),
            Some("/etc/kubernetes/scheduler/kubeconfig")
        );
        let t = Layout::new("/tmp/x/");
        assert_eq!(t.dir(PkiVolume::Datastore), "/tmp/x/pki/datastore");
    }

    #[test]
    fn every_volume_is_mounted_by_some_component_and_names_its_secret() {
        let names = ObjectNames::new("demo", "demo");
        for v in PkiVolume::ALL {
            assert!(
                Component::ALL
                    .iter()
                    .any(|c| Layout::mounts(*c, true).contains(&v)),
                "{v:?}"
            );
            assert!(v.secret_name(&names).starts_with("demo-"));
        }
        assert!(!Layout::mounts(Component::ApiServer, false).contains(&PkiVolume::Datastore));
    }
}
