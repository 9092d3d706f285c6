//! kamaji-e2e: the provider test environment for kamaji-rs's end-to-end tests and examples.
//!
//! [`Env::start`] brings up the real chain: a local management cluster with CAPI
//! (kamaji-testenv) whose pods run on real management machines (kamaji-machine: kubelet,
//! containerd, runc, kube-proxy, and the load-balancer stand-in), a shared TLS etcd
//! registered as the `default` DataStore, and the kamaji-rs `manager` as its own process
//! under the RBAC `make release` ships ([`manager`]). Every suite that starts one runs in a
//! private network namespace ([`test`], [`run_test`]). The modules, by concern:
//!
//! | module | what |
//! |---|---|
//! | [`env`] | the environment, its clients, objects and tenant clients |
//! | [`manager`] | the manager process and its ServiceAccount identity |
//! | [`datastore`] | the shared datastore and views of it |
//! | [`sql`] | PostgreSQL and MariaDB servers and the SQL DataStores on them |
//! | [`fixtures`] | F0 of shared/cases/ and clusterctl's variable substitution |
//! | [`probes`] | waits for conditions and roll-outs, the `/readyz` probe |
//! | [`discovery`] | a real `kubeadm join` token discovery against a tenant |
//! | [`clusterctl`] | the real `clusterctl` and `clusterctl init`'s CRD labels |
//! | [`install_guide`] | `docs/install.md`'s steps, as the `clusterctl` suite runs them |
//! | [`standins`] | what another provider would do (the quickstart's OpenStackCluster) |
//! | [`machines`] | the stand-in infrastructure provider for worker Machines |
//! | [`audit`] | the manager's writes from the audit log |
//! | [`shared`] | one environment for the tests of a suite that do not interfere |
//!
//! Generic helpers that are not about this provider (server-side apply, TLS etcd, kubeconfigs
//! and ServiceAccount tokens, kubeadm, deadline waits) live in kamaji-testenv.

pub mod audit;
pub mod clusterctl;
pub mod datastore;
pub mod discovery;
pub mod env;
pub mod fixtures;
pub mod install_guide;
pub mod machines;
pub mod manager;
pub mod probes;
pub mod shared;
pub mod sim;
pub mod sql;
pub mod standins;
pub mod tenant_api;

use k8s_openapi::api::core::v1::Secret;

pub use datastore::{
    authentication_and_roles, claim_on, datastore_admin, etcd_prefix, keys_under, raw_value,
    raw_values_under, recorded_datastore,
};
pub use discovery::kubeadm_discovery;
pub use env::{Env, EnvBuilder};
pub use fixtures::{F0, f0, substitute};
pub use kamaji_e2e_macros::test;
pub use manager::{Identity, manager_binary};
pub use probes::{
    ReadyzProbe, api_server_has, condition, condition_message, control_plane_at,
    default_service_account_token, has_container, wait_rolled_out,
};

/// Runs an end-to-end test body in the test's private network (kamaji-machine's
/// [`run_in_private_network`](kamaji_machine::run_in_private_network): a fresh network
/// namespace holding the underlay bridge and the load-balancer addresses, and a two-worker
/// tokio runtime), returning what the body returns; what `#[kamaji_e2e::test]` expands to.
///
/// # Panics
/// When the namespace cannot be set up (not root), or when the body panics (resumed here, so
/// the test fails with the body's message).
pub fn run_test<T, Fut>(body: impl FnOnce() -> Fut + Send + 'static) -> T
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T>,
{
    kamaji_machine::run_in_private_network(move || async move { Ok(body().await) })
        .expect("set up the test's private network")
}

/// Serialises the end-to-end tests of one test binary: each starts its own environment, and
/// two at once would only compete for the machine's two cores.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A Secret's data key as UTF-8.
#[must_use]
pub fn secret_text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default()
}
