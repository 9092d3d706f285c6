//! One environment for the tests of a suite that do not interfere with each other
//! (`#[kamaji_e2e::test(shared)]`): the first such test of the test binary starts it (as
//! [`Env::start`] does: one management machine, the `default` DataStore, the manager), every
//! later one runs in its network, one test at a time ([`crate::serial`]), and it stops when
//! the test binary exits.
//!
//! What a test leaves behind, the next one could see; so after each test, passed or failed,
//! [`leave_as_found`] puts the environment back as the test found it, and fails the test if
//! it cannot (as that test found it, not as the first one did: what an earlier failed test left
//! fails that test only):
//!
//! - the test's namespaces: their Clusters and KamajiControlPlanes deleted and waited for (the
//!   manager's finalizer removes the tenant's datastore keys), their pods deleted without their
//!   grace period (a tenant's API server would sit out its `preStop` sleep), then the
//!   namespaces, waited for;
//! - the DataStores, CRDs and ValidatingAdmissionPolicies (and bindings) it added, deleted;
//! - then checked: no KamajiControlPlane or Cluster but those there before, the same
//!   DataStores, CRDs and policies, no more datastore keys than before, the provider's CRDs'
//!   specs unchanged, the manager running.
//!
//! The audit log is read from the test's start ([`Env::manager_writes`]). A test that stops or
//! restarts part of the environment (the manager, the datastore, the API server), needs worker
//! machines or other options, or counts something cluster-wide that the others add to keeps
//! an environment of its own.
//!
//! Suites that need only an API server (admission) share one the same way, side by side, each
//! test in namespaces of its own ([`api_server`]).
//!
//! What it saves (BENCHMARKS.md, 2026-12-07): wall time alone, 11–15 %; not CPU. A test of its
//! own ended by killing its environment's processes; here its tenants and namespaces are
//! deleted through the API (8–15 s, most of it the namespace controller), which costs about
//! the CPU a management cluster's start did.

use std::collections::BTreeSet;
use std::future::Future;
use std::io::Write as _;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use futures::FutureExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kamaji_api::{DataStore, KamajiControlPlane};
use kamaji_testenv::LocalCluster;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};

use crate::Env;

/// How long the deletion of a test's namespaces may take.
const CLEAN_UP_TIMEOUT: Duration = Duration::from_mins(3);

/// What the environment held when a test started.
struct Found {
    namespaces: BTreeSet<String>,
    datastores: BTreeSet<String>,
    /// The names of every CRD, ValidatingAdmissionPolicy and binding (cluster-scoped objects
    /// tests add: an infrastructure provider's CRD, a policy standing in for its webhook).
    cluster_scoped: BTreeSet<String>,
    /// `kind ns/name` of every KamajiControlPlane and Cluster.
    tenants: BTreeSet<String>,
    datastore_keys: u64,
    crds: Vec<(String, serde_json::Value)>,
}

/// The running shared environment of this test binary.
struct Shared {
    /// The environment's thread holds the only lasting reference, so that the environment is
    /// dropped (its processes stopped, its machines cleaned up) when that thread is told to stop.
    env: Weak<Env>,
    network: std::fs::File,
}

/// The environment (or why it did not start), once the first shared test asked for it.
static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
/// Tells each thread of [`keep_until_exit`] to stop, and hears when it has (taken at exit).
static STOPS: Mutex<Vec<(mpsc::Sender<()>, mpsc::Receiver<()>)>> = Mutex::new(Vec::new());

/// Runs one `#[kamaji_e2e::test(shared)]` body: with the shared environment (started by the
/// first), in its network, one test at a time; then [`leave_as_found`]. A panic of the body
/// fails the test after the clean-up.
///
/// # Panics
/// When the environment did not start, the body panics, or the environment cannot be put
/// back as it was.
pub fn run_shared_test<Fut>(body: impl FnOnce(Arc<Env>) -> Fut + Send + 'static)
where
    Fut: Future<Output = ()>,
{
    // libtest names the test's thread after the test.
    let test = std::thread::current()
        .name()
        .unwrap_or("a shared test")
        .to_owned();
    let _serial = crate::serial();
    let shared = match SHARED.get_or_init(start) {
        Ok(shared) => shared,
        Err(e) => panic!("the suite's shared environment did not start: {e}"),
    };
    let network = shared
        .network
        .try_clone()
        .expect("duplicate the shared network's descriptor");
    let env = shared
        .env
        .upgrade()
        .expect("the shared environment runs until the binary exits");
    kamaji_machine::run_in_network(network, move || async move {
        env.mark_test_start();
        let found = found(&env).await?;
        let started = std::time::Instant::now();
        let outcome = std::panic::AssertUnwindSafe(body(Arc::clone(&env)))
            .catch_unwind()
            .await;
        let ran = started.elapsed();
        let cleaned = leave_as_found(&env, &found).await;
        // On the process's stderr, not libtest's captured output: shown for every test.
        let _ = writeln!(
            std::io::stderr(),
            "shared environment: {test} ran {:.1} s, putting the environment back {:.1} s",
            ran.as_secs_f64(),
            started.elapsed().saturating_sub(ran).as_secs_f64()
        );
        if let Err(panic) = outcome {
            if let Err(e) = cleaned {
                eprintln!("shared environment: after the failure, {e:#}");
            }
            std::panic::resume_unwind(panic);
        }
        cleaned.context("the test left the shared environment changed")
    })
    .unwrap();
}

/// Starts the environment on a thread of its own in a private network, which it keeps until
/// the binary exits ([`keep_until_exit`]).
fn start() -> Result<Shared, String> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Shared, String>>();
    keep_until_exit("shared-env", move |stop| {
        let ran = kamaji_machine::run_in_private_network(move || async move {
            let mut env = None;
            let started = async {
                let started = Arc::new(Env::start().await?);
                let shared = Shared {
                    env: Arc::downgrade(&started),
                    network: kamaji_machine::current_network()?,
                };
                env = Some(started);
                anyhow::Ok(shared)
            }
            .await;
            let _ = ready_tx.send(started.map_err(|e| format!("{e:#}")));
            // Until the binary exits; the runtime keeps serving the environment's clients
            // and stand-ins meanwhile.
            let _ = tokio::task::spawn_blocking(move || stop.recv()).await;
            drop(env);
            Ok(())
        });
        if let Err(e) = ran {
            eprintln!("shared environment: {e:#}");
        }
    })?;
    ready_rx
        .recv()
        .map_err(|_| "the environment's thread ended".to_owned())?
}

/// One API server (etcd, kube-apiserver and the provider's CRDs: a
/// `LocalCluster::builder().capi(false)`, no Cluster API, no machine, no manager) for the tests
/// of a binary that only need admission: started by the first caller on a thread of its own,
/// on 127.0.0.1 as a test's own would be, and stopped when the binary exits. Its tests run side
/// by side, each in namespaces of its own, and create nothing cluster-wide that another reads.
/// Each makes its own client (`LocalCluster::new_client`): the cluster's own pools connections
/// on the runtime of the test that opened them, which ends with that test.
///
/// # Errors
/// When it did not start (every caller gets the first start's error).
pub fn api_server() -> Result<Arc<LocalCluster>> {
    static SERVER: OnceLock<Result<Weak<LocalCluster>, String>> = OnceLock::new();
    let server = SERVER.get_or_init(|| {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Weak<LocalCluster>, String>>();
        keep_until_exit("api-server", move |stop| {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("a tokio runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let started = LocalCluster::builder()
                    .capi(false)
                    .start()
                    .await
                    .map(Arc::new);
                let _ = ready_tx.send(
                    started
                        .as_ref()
                        .map(Arc::downgrade)
                        .map_err(|e| format!("{e:#}")),
                );
                // Until the binary exits, serving the clients made on this runtime.
                let _ = tokio::task::spawn_blocking(move || stop.recv()).await;
                drop(started);
            });
        })?;
        ready_rx
            .recv()
            .map_err(|_| "the API server's thread ended".to_owned())?
    });
    match server {
        Ok(server) => server
            .upgrade()
            .context("the shared API server runs until the binary exits"),
        Err(e) => bail!("the shared API server did not start: {e}"),
    }
}

/// Runs `keep` on a thread of its own (named `name`): it starts what it keeps, hands it out,
/// and keeps it until the receiver it is given hears the binary exit ([`stop_at_exit`]).
fn keep_until_exit(
    name: &str,
    keep: impl FnOnce(mpsc::Receiver<()>) + Send + 'static,
) -> Result<(), String> {
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (stopped_tx, stopped_rx) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            keep(stop_rx);
            let _ = stopped_tx.send(());
        })
        .map_err(|e| e.to_string())?;
    STOPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((stop_tx, stopped_rx));
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(register_stop_at_exit);
    Ok(())
}

/// Stops what [`keep_until_exit`] keeps (registered with `atexit`, so it runs when libtest's
/// `main` returns or exits): each thread drops what it keeps and says so, or two minutes pass.
extern "C" fn stop_at_exit() {
    let stops = std::mem::take(
        &mut *STOPS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for (stop, _) in &stops {
        let _ = stop.send(());
    }
    for (_, stopped) in stops {
        let _ = stopped.recv_timeout(Duration::from_mins(2));
    }
}

fn register_stop_at_exit() {
    // SAFETY: `atexit` only records the function pointer; `stop_at_exit` is an `extern "C"`
    // function that takes no arguments and does not unwind (it neither panics nor lets a
    // panic out: every step is fallible and ignored).
    #[allow(unsafe_code)] // the only way to run the environment's clean-up when libtest exits
    let registered = unsafe { libc::atexit(stop_at_exit) };
    if registered != 0 {
        eprintln!("shared environment: atexit refused the stop hook; machines may be left");
    }
}

async fn found(env: &Env) -> Result<Found> {
    Ok(Found {
        namespaces: namespaces(env).await?,
        datastores: datastores(env).await?,
        cluster_scoped: cluster_scoped(env).await?,
        tenants: tenants(env).await?,
        datastore_keys: crate::keys_under(&crate::datastore_admin(env), "/").await,
        crds: provider_crds(env).await?,
    })
}

async fn namespaces(env: &Env) -> Result<BTreeSet<String>> {
    names_of::<Namespace>(env).await
}

async fn datastores(env: &Env) -> Result<BTreeSet<String>> {
    names_of::<DataStore>(env).await
}

/// The names of every object of the cluster-scoped kind `K`.
async fn names_of<K>(env: &Env) -> Result<BTreeSet<String>>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Ok(Api::<K>::all(env.client())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect())
}

/// `kind ns/name` of every KamajiControlPlane and Cluster.
async fn tenants(env: &Env) -> Result<BTreeSet<String>> {
    let mut names: BTreeSet<String> = Api::<KamajiControlPlane>::all(env.client())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|k| {
            let ns = k.metadata.namespace.unwrap_or_default();
            format!(
                "KamajiControlPlane {ns}/{}",
                k.metadata.name.unwrap_or_default()
            )
        })
        .collect();
    let clusters = Api::<DynamicObject>::all_with(env.client(), &cluster_resource());
    for c in clusters.list(&ListParams::default()).await? {
        let ns = c.metadata.namespace.unwrap_or_default();
        names.insert(format!(
            "Cluster {ns}/{}",
            c.metadata.name.unwrap_or_default()
        ));
    }
    Ok(names)
}

fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
    ))
}

/// `kind/name` of every CRD, ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding.
async fn cluster_scoped(env: &Env) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for (kind, api) in cluster_scoped_apis(env) {
        for o in api.list(&ListParams::default()).await? {
            names.insert(format!("{kind}/{}", o.metadata.name.unwrap_or_default()));
        }
    }
    Ok(names)
}

fn cluster_scoped_apis(env: &Env) -> [(&'static str, Api<DynamicObject>); 3] {
    let api = |group: &str, version: &str, kind: &str| {
        Api::<DynamicObject>::all_with(
            env.client(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
        )
    };
    [
        (
            "CustomResourceDefinition",
            api("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        ),
        (
            "ValidatingAdmissionPolicy",
            api(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicy",
            ),
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            api(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicyBinding",
            ),
        ),
    ]
}

/// Deletes the CRDs and admission policies the test added (after its namespaces: no object
/// of a deleted CRD is left behind in one).
async fn delete_cluster_scoped_added(env: &Env, found: &Found) -> Result<()> {
    let added = added(cluster_scoped(env).await?, &found.cluster_scoped);
    for (kind, api) in cluster_scoped_apis(env) {
        for name in added
            .iter()
            .filter_map(|n| n.strip_prefix(&format!("{kind}/")))
        {
            api.delete(name, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

/// What `now` has that `before` had not.
fn added(now: BTreeSet<String>, before: &BTreeSet<String>) -> Vec<String> {
    now.into_iter().filter(|n| !before.contains(n)).collect()
}

/// The provider's CRDs (`kamaji.clastix.io` and the KamajiControlPlane's), name and spec.
async fn provider_crds(env: &Env) -> Result<Vec<(String, serde_json::Value)>> {
    let mut crds: Vec<_> = Api::<CustomResourceDefinition>::all(env.client())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|c| c.spec.group == "kamaji.clastix.io" || c.spec.names.kind.starts_with("Kamaji"))
        .map(|c| {
            let spec = serde_json::to_value(&c.spec).unwrap_or_default();
            (c.metadata.name.unwrap_or_default(), spec)
        })
        .collect();
    crds.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(crds)
}

/// Deletes what the test made and checks that the environment is as the test found it (see
/// the module docs).
async fn leave_as_found(env: &Env, found: &Found) -> Result<()> {
    let made = added(namespaces(env).await?, &found.namespaces);
    let deadline = tokio::time::Instant::now() + CLEAN_UP_TIMEOUT;
    // The tenants first, then their namespaces: a namespace whose tenants are gone is deleted
    // in one pass of the namespace controller instead of several spaced by its back-off.
    delete_tenants(env, &made, deadline).await?;
    let ns_api = Api::<Namespace>::all(env.client());
    loop {
        let now = namespaces(env).await?;
        let left: Vec<&String> = made.iter().filter(|n| now.contains(*n)).collect();
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("namespaces {left:?} still exist {CLEAN_UP_TIMEOUT:?} after their deletion");
        }
        for ns in left {
            force_delete_pods(env, ns).await;
            let _ = ns_api.delete(ns, &DeleteParams::default()).await;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let datastore_api = Api::<DataStore>::all(env.client());
    for name in datastores(env).await?.difference(&found.datastores) {
        datastore_api.delete(name, &DeleteParams::default()).await?;
    }
    delete_cluster_scoped_added(env, found).await?;
    check_as_found(env, found).await
}

/// Deletes the Clusters and KamajiControlPlanes in `namespaces` and waits until the manager
/// has released every KamajiControlPlane (its datastore keys removed).
async fn delete_tenants(
    env: &Env,
    namespaces: &[String],
    deadline: tokio::time::Instant,
) -> Result<()> {
    let cluster_resource = cluster_resource();
    loop {
        let mut left = 0;
        for ns in namespaces {
            let clusters =
                Api::<DynamicObject>::namespaced_with(env.client(), ns, &cluster_resource);
            let kcps = Api::<KamajiControlPlane>::namespaced(env.client(), ns);
            let found = kcps.list(&ListParams::default()).await?.items.len();
            if found == 0 {
                continue;
            }
            left += found;
            let all = ListParams::default();
            let _ = clusters
                .delete_collection(&DeleteParams::default(), &all)
                .await;
            let _ = kcps.delete_collection(&DeleteParams::default(), &all).await;
            force_delete_pods(env, ns).await;
        }
        if left == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "{left} KamajiControlPlanes still exist {CLEAN_UP_TIMEOUT:?} after their deletion"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Deletes the pods of `ns` without their grace period: a tenant's API server would sit out
/// its `preStop` sleep, and what the test checked is done.
async fn force_delete_pods(env: &Env, ns: &str) {
    let _ = Api::<Pod>::namespaced(env.client(), ns)
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
}

/// Fails naming what differs from what the test found (see the module docs).
async fn check_as_found(env: &Env, found: &Found) -> Result<()> {
    let now = tenants(env).await?;
    let left: Vec<&String> = now.difference(&found.tenants).collect();
    if !left.is_empty() {
        bail!("{left:?} left");
    }
    // Deleted objects may wait on a finalizer a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    while tokio::time::Instant::now() < deadline {
        if datastores(env).await? == found.datastores
            && cluster_scoped(env).await? == found.cluster_scoped
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now = datastores(env).await?;
    if now != found.datastores {
        bail!("DataStores {now:?} instead of {:?}", found.datastores);
    }
    let now = cluster_scoped(env).await?;
    if now != found.cluster_scoped {
        bail!(
            "left: {:?}; gone: {:?}",
            now.difference(&found.cluster_scoped).collect::<Vec<_>>(),
            found.cluster_scoped.difference(&now).collect::<Vec<_>>()
        );
    }
    let keys = crate::keys_under(&crate::datastore_admin(env), "/").await;
    // At most as many: a tenant an earlier failed test left may still be going.
    if keys > found.datastore_keys {
        bail!(
            "the datastore holds {keys} keys, {} before the test",
            found.datastore_keys
        );
    }
    if provider_crds(env).await? != found.crds {
        bail!("the provider's CRDs differ from what the first test found");
    }
    if !manager_running(env) {
        bail!("the manager exited: {}", env.manager_log());
    }
    Ok(())
}

/// Whether the manager process is alive (not exited, nor a zombie awaiting its reaping).
fn manager_running(env: &Env) -> bool {
    env.manager_pid().is_some_and(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // `pid (comm) state …`: the state follows the last `)`.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    })
}
