//! kamaji-bootstrap: pure builders for the tenant PKI, kubeconfigs and kubeadm join artifacts
//! (see shared/design/ARCHITECTURE.md §3).
//!
//! Everything in this crate is a pure function of its inputs. The only randomness is key
//! generation (and, for [`token::BootstrapToken::generate`], the token itself); the current time
//! is always an explicit `now` parameter. Nothing here talks to an API server: the reconciler
//! observes existing key material, feeds it back in, and applies what these builders return.
//!
//! Modules:
//! - [`pki`]: key algorithms, certificate authorities, kubeadm-compatible leaf certificates,
//!   the whole tenant PKI in one call, and the `sha256:` CA hash used by `kubeadm join`;
//!   [`pki::inspect`] reads certificates back (x509-parser) and makes the keep / reissue
//!   decision, which by construction can never replace a CA;
//! - [`controlplane`]: the flags of kube-apiserver, kube-controller-manager and
//!   kube-scheduler, merged with the user's `extraArgs`, and the file layout of their key
//!   material;
//! - [`konnectivity`]: the konnectivity server sidecar, its egress selector configuration and
//!   the agents in the tenant;
//! - [`leaves`]: the leaves of one tenant kept or reissued, as the Secrets that hold them;
//! - [`kubeconfig`]: kubeconfig rendering (admin, super-admin, controller-manager, scheduler,
//!   cluster-info);
//! - [`secrets`]: the Cluster API Secrets (`<cluster>-kubeconfig`, `-ca`, `-sa`, `-proxy`);
//! - [`token`]: bootstrap tokens, their Secret, and the detached JWS that signs cluster-info;
//! - [`network`]: CIDR arithmetic and validation of the tenant network;
//! - [`version`]: Kubernetes version parsing and version-dependent choices;
//! - [`kubeadm`]: the tenant-side kubeadm objects (cluster-info, join RBAC, kubeadm-config,
//!   kubelet-config, kube-proxy, CoreDNS).

// Docs here are full of Kubernetes kind and field names (ConfigMap, ClusterRoleBinding,
// CoreDNS, …); backticking every one would hurt readability more than it helps.
#![allow(clippy::doc_markdown)]

pub mod controlplane;
pub mod encryption;
pub mod error;
pub mod konnectivity;
pub mod kubeadm;
pub mod kubeconfig;
pub mod leaves;
pub mod network;
pub mod pki;
pub mod secrets;
pub mod token;
pub mod version;

pub use error::{Error, ValidationError};
