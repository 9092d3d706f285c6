//! Waiting for and watching what the chain does: conditions of KamajiControlPlanes and
//! Clusters, Deployment roll-outs, and a tenant's `/readyz` during a roll.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use kamaji_api::KamajiControlPlane;
use kamaji_testenv::wait::await_object;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};

use crate::Env;

impl Env {
    /// Waits until the KamajiControlPlane has condition `type_` with `status`.
    pub async fn wait_kcp_condition(
        &self,
        ns: &str,
        name: &str,
        type_: &str,
        status: &str,
        timeout: Duration,
    ) -> Result<KamajiControlPlane> {
        let (t, st) = (type_.to_owned(), status.to_owned());
        self.wait_kcp(ns, name, &format!("{type_}={status}"), timeout, move |k| {
            k.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == st))
        })
        .await
    }

    /// Waits until the Cluster (read as v1beta2) has condition `type_` = `status`.
    pub async fn wait_cluster_condition(
        &self,
        ns: &str,
        name: &str,
        type_: &str,
        status: &str,
        timeout: Duration,
    ) -> Result<DynamicObject> {
        let api = self.capi(ns, "v1beta2", "Cluster");
        let (t, st) = (type_.to_owned(), status.to_owned());
        let ok = move |c: &DynamicObject| {
            c.data["status"]["conditions"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|c| c["type"] == t.as_str() && c["status"] == st.as_str())
            })
        };
        self.wait_for(
            api,
            &format!("Cluster {ns}/{name}"),
            name,
            &format!("{type_}={status}"),
            timeout,
            ok,
            |c| serde_yaml::to_string(&c.data["status"]).unwrap_or_default(),
        )
        .await
    }

    /// Waits until the Cluster (read as v1beta2) has a `spec.controlPlaneEndpoint`: Cluster API
    /// copies the control plane's (or the infrastructure cluster's) into it on a reconcile of
    /// its own, after it has read the control plane initialized (capi-contract.md item 14).
    pub async fn wait_cluster_endpoint(
        &self,
        ns: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<DynamicObject> {
        self.wait_for(
            self.capi(ns, "v1beta2", "Cluster"),
            &format!("Cluster {ns}/{name}"),
            name,
            "spec.controlPlaneEndpoint set",
            timeout,
            |c: &DynamicObject| {
                c.data["spec"]["controlPlaneEndpoint"]["host"]
                    .as_str()
                    .is_some_and(|h| !h.is_empty())
            },
            |c| c.data["spec"].to_string(),
        )
        .await
    }

    /// Waits until `ok` holds for object `name` of `api`; on time-out the error carries the
    /// object's status (rendered by `status`) and the manager's log.
    #[allow(clippy::too_many_arguments)]
    pub async fn wait_for<K>(
        &self,
        api: Api<K>,
        label: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&K) -> bool + Send + 'static,
        status: impl Fn(&K) -> String,
    ) -> Result<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        if let Some(found) = await_object(&api, name, timeout, ok).await? {
            return Ok(found);
        }
        let found = api.get_opt(name).await?;
        let now = found.as_ref().map(&status).unwrap_or_default();
        let pods = match found.as_ref().and_then(|k| k.meta().namespace.clone()) {
            Some(ns) => self.pods_report(&ns).await,
            None => String::new(),
        };
        bail!(
            "{label}: {what} not reached in {timeout:?}\nstatus:\n{now}\n{pods}manager log:\n{}",
            self.manager_log()
        )
    }

    /// The pods of `ns` (phase, node, each container's state, restarts and last termination)
    /// and the namespace's last events, for failure messages.
    pub async fn pods_report(&self, ns: &str) -> String {
        use std::fmt::Write as _;
        let mut out = format!("pods of {ns}:\n");
        let pods: Api<Pod> = Api::namespaced(self.client(), ns);
        for p in pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let status = p.status.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "- {} {} on {} (deleting: {})",
                p.metadata.name.clone().unwrap_or_default(),
                status.phase.clone().unwrap_or_default(),
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
                p.metadata.deletion_timestamp.is_some()
            );
            for c in status.container_statuses.unwrap_or_default() {
                let _ = writeln!(
                    out,
                    "    {} ready={} restarts={} state={} last={}",
                    c.name,
                    c.ready,
                    c.restart_count,
                    serde_json::to_string(&c.state).unwrap_or_default(),
                    serde_json::to_string(&c.last_state).unwrap_or_default()
                );
            }
        }
        let events: Api<Event> = Api::namespaced(self.client(), ns);
        let mut list = events
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.sort_by_key(|e| e.last_timestamp.clone().map(|t| t.0));
        let _ = writeln!(out, "last events of {ns}:");
        for e in list.iter().rev().take(25).rev() {
            let _ = writeln!(
                out,
                "- {} {} {}/{} x{}: {}",
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
                e.involved_object.kind.clone().unwrap_or_default(),
                e.involved_object.name.clone().unwrap_or_default(),
                e.count.unwrap_or(1),
                e.message.clone().unwrap_or_default()
            );
        }
        out
    }

    /// Waits until `ready` holds for the KamajiControlPlane `ns/name`.
    pub async fn wait_kcp(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&KamajiControlPlane) -> bool + Send + 'static,
    ) -> Result<KamajiControlPlane> {
        let api: Api<KamajiControlPlane> = Api::namespaced(self.client(), ns);
        self.wait_for(
            api,
            &format!("KamajiControlPlane {ns}/{name}"),
            name,
            what,
            timeout,
            ready,
            |k| serde_yaml::to_string(&k.status).unwrap_or_default(),
        )
        .await
    }
}

/// The message of condition `type_` of a KamajiControlPlane (empty when absent).
#[must_use]
pub fn condition_message(kcp: &KamajiControlPlane, type_: &str) -> String {
    condition(kcp, type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The condition `type_` of `kcp`'s status, if set.
#[must_use]
pub fn condition<'a>(
    kcp: &'a KamajiControlPlane,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    kcp.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Polls `/readyz` of a tenant every 250 ms until stopped, counting answers and failures (a
/// refused connection, a timeout or anything but `ok`) from its first answer on: the API can
/// only be lost once it was reached through this path, and a test waits for that
/// ([`ReadyzProbe::answered`]) before it changes anything. Every poll opens a new connection,
/// as a fresh client behind a load balancer would: a kept-alive connection would stay pinned
/// to one API server, and a terminating API server fails `/readyz` on purpose.
pub struct ReadyzProbe {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU32>,
    failed: Arc<AtomicU32>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

/// How many failures [`ReadyzProbe`] describes (the first ones).
const DESCRIBED_FAILURES: usize = 5;

impl ReadyzProbe {
    /// Starts probing `GET /readyz` with `tenant` (a new client, so a new connection, per
    /// poll).
    pub fn start(tenant: kube::Config) -> Self {
        Self::start_get(tenant, "/readyz?verbose", readyz_passed)
    }

    /// Starts probing `GET path` with `tenant` (a new client per poll): an answer is good
    /// when it is a success status (e.g. a read of one object).
    pub fn reading(tenant: kube::Config, path: &'static str) -> Self {
        Self::start_get(tenant, path, |_| true)
    }

    fn start_get(tenant: kube::Config, path: &'static str, good: fn(&str) -> bool) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU32::new(0));
        let failed = Arc::new(AtomicU32::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = {
            let (stop, ok, failed, failures) =
                (stop.clone(), ok.clone(), failed.clone(), failures.clone());
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    match answer(&tenant, path, good).await {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(why) => {
                            let counted = ok.load(Ordering::Relaxed) > 0;
                            if counted {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                            let mut f = failures
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            if f.len() < DESCRIBED_FAILURES {
                                let when = started.elapsed().as_secs_f64();
                                let note = if counted {
                                    ""
                                } else {
                                    " (before the first answer, not counted)"
                                };
                                f.push(format!("at {when:.1} s{note}: {why}"));
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        Self {
            stop,
            ok,
            failed,
            failures,
            task,
        }
    }

    /// Waits until the probe has had its first answer, so that what follows is measured
    /// against an API that was reachable through this path.
    ///
    /// # Errors
    /// When no answer came within `timeout` (the message holds the failures seen).
    pub async fn answered(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.ok.load(Ordering::Relaxed) == 0 {
            if tokio::time::Instant::now() >= deadline {
                let seen = self
                    .failures
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone();
                bail!("/readyz did not answer through the endpoint within {timeout:?}: {seen:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Stops probing; returns `(answers ok, failures, the first failures described)`, each
    /// description with its time since the start and the error or the checks that failed.
    pub async fn stop(self) -> (u32, u32, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            failures,
        )
    }
}

/// Whether a `/readyz?verbose` body says every check passed.
fn readyz_passed(body: &str) -> bool {
    body.lines()
        .last()
        .is_some_and(|l| l.trim() == "readyz check passed")
}

/// One `GET path` on a new connection: `Ok` for a success status whose body is `good`, else
/// the error or the body.
async fn answer(tenant: &kube::Config, path: &str, good: fn(&str) -> bool) -> Result<(), String> {
    let client = Client::try_from(tenant.clone()).map_err(|e| format!("client: {e}"))?;
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(req).await {
        Ok(body) if good(&body) => Ok(()),
        Ok(body) => Err(format!("answered {body:?}")),
        // The whole chain (anyhow's alternate form): hyper's "client error (Connect)" alone
        // hides whether TCP or TLS failed, and why.
        Err(e) => Err(format!("{:#}", anyhow::Error::new(e))),
    }
}

/// A [`wait_rolled_out`] predicate: the pod template's kube-apiserver has argument `arg`.
pub fn api_server_has(arg: &'static str) -> impl Fn(&Deployment) -> bool + Send + 'static {
    move |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|c| c.name == "kube-apiserver"))
            .and_then(|c| c.args.as_ref())
            .is_some_and(|args| args.iter().any(|a| a == arg))
    }
}

/// A [`wait_rolled_out`] predicate: the pod template's three control-plane containers run
/// images of `version` (`…:<version>`).
pub fn control_plane_at(version: &'static str) -> impl Fn(&Deployment) -> bool + Send + 'static {
    move |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| {
                p.containers.iter().take(3).all(|c| {
                    c.image
                        .as_deref()
                        .is_some_and(|i| i.ends_with(&format!(":{version}")))
                })
            })
    }
}

/// A ServiceAccount token (TokenRequest, 1 hour) for `default/default` of a tenant, once the
/// ServiceAccount controller has created it.
pub async fn default_service_account_token(tenant: &Client) -> String {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let api: Api<ServiceAccount> = Api::namespaced(tenant.clone(), "default");
    kamaji_testenv::wait::await_object(&api, "default", Duration::from_mins(1), |_| true)
        .await
        .unwrap()
        .expect("default ServiceAccount");
    kamaji_testenv::kubeconfig::service_account_token(tenant, "default", "default", 3600)
        .await
        .unwrap()
}

/// A [`wait_rolled_out`] predicate: the pod template has (`present`) or lacks a container
/// named `name`.
pub fn has_container(
    name: &'static str,
    present: bool,
) -> impl Fn(&Deployment) -> bool + Send + 'static {
    move |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| p.containers.iter().any(|c| c.name == name) == present)
    }
}

/// Waits until Deployment `ns/name` has rolled out completely: the controller saw the current
/// spec, `replicas` pods exist, all are updated and available, and `done` holds for its spec.
pub async fn wait_rolled_out(
    env: &Env,
    ns: &str,
    name: &str,
    replicas: i32,
    timeout: Duration,
    done: impl Fn(&Deployment) -> bool + Send + 'static,
) -> Result<Deployment> {
    let api: Api<Deployment> = Api::namespaced(env.client(), ns);
    let label = format!("Deployment {ns}/{name}");
    let want = Some(replicas);
    let ok = move |d: &Deployment| {
        let s = d.status.clone().unwrap_or_default();
        done(d)
            && s.observed_generation == d.metadata.generation
            && s.updated_replicas == want
            && s.available_replicas == want
            && s.replicas == want
    };
    env.wait_for(api, &label, name, "rolled out", timeout, ok, |d| {
        serde_yaml::to_string(&d.status).unwrap_or_default()
    })
    .await
}
