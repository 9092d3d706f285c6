//! kamaji-testenv: a real, local Kubernetes management cluster for kamaji-rs tests.
//!
//! No container engine runs on the development machines, so instead of kind this crate
//! starts the real programs as local processes on loopback, the way controller-runtime's
//! envtest does, but with every binary built here by `tests/tools/build.sh`
//! (`make tools`): etcd, kube-apiserver, optionally kube-controller-manager,
//! kube-scheduler and the Cluster API core manager (with its webhooks served on loopback).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let cluster = kamaji_testenv::LocalCluster::start().await?;
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(cluster.client());
//! # Ok(()) }
//! ```
//!
//! Every process is stopped when the [`LocalCluster`] is dropped, also while a test
//! unwinds from a panic. The API server writes an audit log (all requests at `Metadata`
//! level) that [`LocalCluster::audit_events`] parses, so tests can count requests per user.
//!
//! [`sql`] starts the real SQL servers (`PostgreSQL` 15, `MariaDB` 10.11) behind the SQL data
//! stores: TLS, password authentication, every statement logged.

mod apiserver;
pub mod apply;
mod audit;
mod capi;
pub mod cert_manager;
mod cluster;
mod etcd;
pub mod kubeadm;
pub mod kubeconfig;
pub mod kwok;
pub mod pki;
pub mod process;
pub mod sql;
pub mod standins;
mod tools;
pub mod wait;

pub use audit::AuditEvent;
pub use cert_manager::CertManagerStandIn;
pub use cluster::{Builder, LocalCluster, readyz};
pub use etcd::{Etcd, EtcdTls};
pub use kubeconfig::client_from_kubeconfig;
pub use process::{Supervised, free_port};
pub use sql::{MariaDb, Postgres, ServerTls, SqlServer};
pub use tools::{Tools, workspace_root};

/// Kubernetes version of the binaries that `tests/tools` builds (the tenant version under test).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// Cluster API version of the core manager, CABPK and clusterctl that `tests/tools` builds, and
/// of the provider components it renders for a local clusterctl repository
/// ([`Tools::clusterctl_repository`]).
pub const CAPI_VERSION: &str = "v1.14.2";

/// The previous minor release, whose control-plane programs, kubeadm, kubelet and kube-proxy
/// `tests/tools` also builds (under `versions/<tag>/`), for upgrade tests (a minor upgrade
/// with workers of both minors, a topology upgrade, a stuck upgrade backed out).
pub const PREVIOUS_MINOR_KUBERNETES_VERSION: &str = "v1.35.4";
