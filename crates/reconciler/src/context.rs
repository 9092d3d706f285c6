//! Shared state of the controller: the client, the manager's settings, metrics, per-object
//! backoff and the event recorder.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kamaji_api::cluster::v1beta2::Cluster;
use kamaji_api::{DataStore, KamajiControlPlane};
use kamaji_bootstrap::pki::KeyAlgorithm;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use crate::metrics::Metrics;
use crate::reconcile::status::DeploymentView;

/// Settings of the manager (from the command line).
#[derive(Debug, Clone)]
pub struct Config {
    /// DataStore used by control planes without `dataStoreName` (`--default-datastore`).
    pub default_datastore: String,
    /// Algorithm of new keys (`--key-algorithm`).
    pub key_algorithm: KeyAlgorithm,
    /// DNS domain of the management cluster (`--cluster-domain`), for Service SANs.
    pub management_domain: String,
    /// How long to wait before checking again on state that produces no event (a tenant API
    /// server that is not answering yet): the first delay; it doubles per attempt.
    pub unreachable_requeue: Duration,
    /// Resync of healthy control planes, to notice tenant-side drift (deleted cluster-info,
    /// changed RBAC), which produces no event in the management cluster.
    pub resync: Duration,
    /// How long an available control plane's status keeps saying so through a passing failure
    /// (`--transient-failure-grace-seconds`): a lost `/readyz`, tenant write or management
    /// API call ([`crate::reconcile::status::transient_setback`]) is reported once it has
    /// lasted this long, and looked at again every [`Config::unreachable_requeue`] meanwhile.
    pub transient_grace: Duration,
    /// Validity of new leaves and how long before expiry they are reissued
    /// (`--leaf-certificate-validity-seconds`, `--certificate-renewal-window-seconds`).
    pub leaf_policy: kamaji_bootstrap::pki::LeafPolicy,
    /// How long a rotated-out service-account public key keeps verifying tokens after the
    /// new key signs (`--service-account-key-overlap-seconds`).
    pub service_account_overlap: Duration,
    /// The kine image of control planes on PostgreSQL and MySQL DataStores (`--kine-image`).
    pub kine_image: String,
    /// How many control planes are reconciled at once (`--kamajicontrolplane-concurrency`,
    /// as Cluster API's `--kubeadmcontrolplane-concurrency`): bounds the memory and API
    /// load of a manager that starts with, or is handed, many control planes at once.
    pub concurrency: u16,
    /// How long a control plane's pass waits after the last event that asked for it
    /// (`--reconcile-debounce-milliseconds`; kube-runtime's trailing-edge debounce): events in
    /// quick succession (a new Deployment's status written twice by its controller, Cluster
    /// API's writes of the Cluster) wake one pass instead of one each. Every pass, requeues
    /// and retries included, starts this much later.
    pub debounce: Duration,
    /// The `User-Agent` of the provider's requests to tenant API servers (the management
    /// client's own), so a tenant's audit log names the provider; none when empty.
    pub user_agent: String,
}

/// The default of `--kamajicontrolplane-concurrency` (Cluster API's default for its
/// `KubeadmControlPlane` controller).
pub const DEFAULT_CONCURRENCY: u16 = 10;

/// The default of `--reconcile-debounce-milliseconds`.
pub const DEFAULT_DEBOUNCE_MILLISECONDS: u64 = 500;

/// The default of `--kine-image`: kine v0.17.5 under the name its project publishes it.
pub const DEFAULT_KINE_IMAGE: &str = "docker.io/rancher/kine:v0.17.5";

impl Default for Config {
    fn default() -> Self {
        Self {
            default_datastore: "default".into(),
            key_algorithm: KeyAlgorithm::default(),
            management_domain: "cluster.local".into(),
            unreachable_requeue: Duration::from_secs(2),
            resync: Duration::from_mins(10),
            transient_grace: Duration::from_secs(30),
            leaf_policy: kamaji_bootstrap::pki::LeafPolicy::default(),
            service_account_overlap: Duration::from_hours(25),
            kine_image: DEFAULT_KINE_IMAGE.into(),
            concurrency: DEFAULT_CONCURRENCY,
            debounce: Duration::from_millis(DEFAULT_DEBOUNCE_MILLISECONDS),
            user_agent: String::new(),
        }
    }
}

/// Per-object exponential backoff: `base * 2^n`, capped at `max`.
#[derive(Debug)]
pub struct Backoff {
    attempts: Mutex<HashMap<String, u32>>,
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff from `base` to `max`.
    #[must_use]
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            attempts: Mutex::new(HashMap::new()),
            base,
            max,
        }
    }

    /// The next delay for `key`, counting this attempt.
    pub fn next(&self, key: &str) -> Duration {
        let n = self.attempts.lock().map_or(0, |mut m| {
            let e = m.entry(key.to_owned()).or_insert(0);
            *e = e.saturating_add(1);
            *e - 1
        });
        self.base
            .saturating_mul(2u32.saturating_pow(n.min(16)))
            .min(self.max)
    }

    /// Forgets `key` after a success.
    pub fn reset(&self, key: &str) {
        if let Ok(mut m) = self.attempts.lock() {
            m.remove(key);
        }
    }
}

/// Everything a reconcile pass needs.
pub struct Context {
    /// Management-cluster client.
    pub client: Client,
    /// Settings.
    pub config: Config,
    /// Metrics.
    pub metrics: Metrics,
    /// Backoff for failing passes.
    pub errors: Backoff,
    /// Backoff while waiting for an unreachable tenant API.
    pub waiting: Backoff,
    /// Event recorder (`reportingController: kamaji-rs`).
    pub recorder: Recorder,
    /// Objects (by UID) whose stored form still differed from the desired object right after
    /// kamaji-rs applied it (a mutating admission webhook rewrote a field), with the desired
    /// hash of that write: their drift is accepted until the desired object changes, so a
    /// rewrite never turns into a write loop.
    pub settled_drift: Mutex<HashMap<String, String>>,
    /// Owned objects (by UID) found holding the desired object, or written so by this process:
    /// the `resourceVersion` read or written and the desired hash it holds. Both are immutable
    /// for that pair, so a pass reading the same version for the same desired object skips the
    /// comparison (two JSON serializations per object per pass; issue 16), and the watch event
    /// of that version wakes no pass ([`Context::known_version`]). A root Secret this process
    /// created is recorded with an empty hash (it is never compared). At most
    /// [`VERIFIED_KEPT`], emptied when full.
    pub verified: Mutex<HashMap<String, (String, String)>>,
    /// Per KamajiControlPlane UID, the `resourceVersion`s this process's own successful writes
    /// to it replaced, newest last (at most [`SUPERSEDED_KEPT`]): a pass handed one of them by
    /// the watch cache (its event raced the write's) would compute from an older status and
    /// its writes would be refused; the replacing version's own event brings the pass.
    pub superseded: Mutex<HashMap<String, Vec<String>>>,
    /// Per KamajiControlPlane UID, the `resourceVersion` the last pass that ended without error
    /// left with its own writes to it (its status write, preconditioned on the version the pass
    /// read or wrote, or its last spec or metadata write): that version's watch event carries
    /// nothing the pass did not account for, so it wakes no pass ([`Context::is_own_result`]).
    pub own_results: Mutex<HashMap<String, String>>,
    /// Per KamajiControlPlane UID whose pass is running, the versions watch events brought
    /// meanwhile, of it ([`Context::hold_event`]) and of the objects it owns
    /// ([`Context::hold_owned_event`]): the pass's own writes are only known as such once it
    /// ends ([`Context::end_pass`]).
    pub running: Mutex<HashMap<String, Vec<Held>>>,
    /// Per KamajiControlPlane UID and event reason, the note last published and when: a pass
    /// repeating it within [`Config::resync`] publishes nothing ([`Context::repeats_event`]).
    pub published: Mutex<HashMap<(String, String), (String, Instant)>>,
    /// Infrastructure kinds resolved through discovery and their CRDs, by group and kind, with
    /// when they were read; trusted for [`Config::resync`] ([`crate::infrastructure`]).
    pub infrastructure_kinds:
        Mutex<HashMap<(String, String), (Instant, crate::infrastructure::InfrastructureKind)>>,
    /// When each control plane (by `namespace/name`) first met the transient setback its
    /// status is being held back for ([`Config::transient_grace`]).
    pub setbacks: Mutex<HashMap<String, Instant>>,
    /// Datastore schemas this process has claimed (or found claimed) for their control plane
    /// and whose etcd user and role it has granted, as (DataStore, schema, `namespace/name`),
    /// so both are checked once per process.
    pub schema_claims: Mutex<std::collections::HashSet<(String, String, String)>>,
    /// The provider's sessions on etcd DataStores, kept between passes.
    pub datastore_sessions: crate::datastore::auth::Sessions,
    /// The control planes the controller watches (set when it starts): etcd authentication
    /// goes on for a DataStore only once each initialized one on it has its etcd user.
    pub control_planes: std::sync::OnceLock<Store<KamajiControlPlane>>,
    /// The watch cache of Clusters (set when the controller starts); [`Context::cluster`].
    pub clusters: std::sync::OnceLock<Store<Cluster>>,
    /// The watch cache of DataStores (set when the controller starts); [`Context::datastore`].
    pub datastores: std::sync::OnceLock<Store<DataStore>>,
    /// Tenant clients kept between passes.
    pub tenant_clients: crate::tenant::Clients,
    /// Per KamajiControlPlane UID, its Deployment as the last pass that ended without error saw
    /// it: a Deployment event showing nothing else a pass reads wakes no pass
    /// ([`Context::deployment_wakes`]).
    pub deployments_seen: Mutex<HashMap<String, DeploymentView>>,
}

/// A watch event held while a control plane's pass runs ([`Context::running`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// A `resourceVersion` of the KamajiControlPlane itself.
    ControlPlane(String),
    /// A `resourceVersion` of an object it owns, with that object's UID.
    Owned {
        /// The owned object's UID.
        uid: String,
        /// Its `resourceVersion`.
        version: String,
        /// For the control-plane Deployment, what a pass reads of that version.
        deployment: Option<DeploymentView>,
    },
}

/// How many objects [`Context::verified`] holds at most (about fifteen per tenant; a full map
/// is emptied).
pub const VERIFIED_KEPT: usize = 100_000;

/// How many replaced versions [`Context::superseded`] keeps per control plane: the writes of
/// a few passes, more than a watch event can lag behind.
pub const SUPERSEDED_KEPT: usize = 8;

impl Context {
    /// Whether the transient setback of `key` (first met now, or earlier) is still within
    /// [`Config::transient_grace`]; once it is not, it is forgotten (the status reports it).
    pub fn hold_setback(&self, key: &str) -> bool {
        let now = Instant::now();
        let Ok(mut m) = self.setbacks.lock() else {
            return false;
        };
        let first = *m.entry(key.to_owned()).or_insert(now);
        let held = now.duration_since(first) < self.config.transient_grace;
        if !held {
            m.remove(key);
        }
        held
    }

    /// Forgets a setback of `key` (the pass found none).
    pub fn end_setback(&self, key: &str) {
        if let Ok(mut m) = self.setbacks.lock() {
            m.remove(key);
        }
    }

    /// Whether drift of the object `uid` from the desired object with `hash` was accepted.
    #[must_use]
    pub fn drift_settled(&self, uid: &str, hash: &str) -> bool {
        self.settled_drift
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|h| h == hash))
    }

    /// Records that this process's write replaced version `version` of the control plane
    /// `uid` ([`Context::superseded`]).
    pub fn supersede(&self, uid: &str, version: &str) {
        if let Ok(mut m) = self.superseded.lock() {
            let versions = m.entry(uid.to_owned()).or_default();
            if versions.len() == SUPERSEDED_KEPT {
                versions.remove(0);
            }
            versions.push(version.to_owned());
        }
    }

    /// Whether version `version` of the control plane `uid` is one this process's own write
    /// replaced ([`Context::superseded`]).
    #[must_use]
    pub fn is_superseded(&self, uid: &str, version: &str) -> bool {
        self.superseded
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|v| v.iter().any(|s| s == version)))
    }

    /// Records that a pass of the control plane `uid` ended without error and that its own
    /// writes left it at version `version` ([`Context::own_results`]).
    pub fn own_result(&self, uid: &str, version: &str) {
        if let Ok(mut m) = self.own_results.lock() {
            m.insert(uid.to_owned(), version.to_owned());
        }
    }

    /// Whether version `version` of the control plane `uid` is the one the last pass that
    /// ended without error left with its own writes ([`Context::own_results`]): its watch
    /// event needs no pass.
    #[must_use]
    pub fn is_own_result(&self, uid: &str, version: &str) -> bool {
        self.own_results
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|v| v == version))
    }

    /// Records that a pass of the control plane `uid` begins.
    pub fn begin_pass(&self, uid: &str) {
        if let Ok(mut m) = self.running.lock() {
            m.insert(uid.to_owned(), Vec::new());
        }
    }

    /// Holds the watch event of version `version` of the control plane `uid` when its pass is
    /// running (`true`): the event of the pass's own write can arrive before the pass has
    /// recorded it ([`Context::own_result`]), and would wake one more pass for nothing.
    /// [`Context::end_pass`] decides about it.
    pub fn hold_event(&self, uid: &str, version: &str) -> bool {
        self.hold(uid, Held::ControlPlane(version.to_owned()))
    }

    /// Holds the watch event of version `version` of the object `uid` that the control plane
    /// `owner` owns, when the control plane's pass is running (`true`): an object the pass
    /// writes can bring its event before the pass has recorded the write
    /// ([`Context::verified_desired`], [`Context::created`]). [`Context::end_pass`] decides.
    /// `deployment` is what a pass reads of that version, for the control-plane Deployment.
    pub fn hold_owned_event(
        &self,
        owner: &str,
        uid: &str,
        version: &str,
        deployment: Option<&DeploymentView>,
    ) -> bool {
        let held = Held::Owned {
            uid: uid.to_owned(),
            version: version.to_owned(),
            deployment: deployment.cloned(),
        };
        self.hold(owner, held)
    }

    fn hold(&self, owner: &str, held: Held) -> bool {
        self.running
            .lock()
            .is_ok_and(|mut m| match m.get_mut(owner) {
                Some(events) => {
                    events.push(held);
                    true
                }
                None => false,
            })
    }

    /// Records that the pass of the control plane `uid` ended (after [`Context::own_result`]),
    /// and returns whether an event held meanwhile brought a version its own writes and reads
    /// do not account for (another writer's): that one needs a pass.
    pub fn end_pass(&self, uid: &str) -> bool {
        let held = self
            .running
            .lock()
            .ok()
            .and_then(|mut m| m.remove(uid))
            .unwrap_or_default();
        // Every held event is looked at (no short cut), so each dismissed Deployment event is
        // counted.
        let mut wakes = false;
        for h in &held {
            wakes |= match h {
                Held::ControlPlane(v) => !self.is_own_result(uid, v) && !self.is_superseded(uid, v),
                Held::Owned {
                    uid: object,
                    version,
                    deployment,
                } => self.held_owned_wakes(uid, object, version, deployment.as_ref()),
            };
        }
        wakes
    }

    /// Whether the event of version `version` of the object `object` that the control plane
    /// `owner` owns, held while its pass ran, needs another pass now that it has ended: not a
    /// version the pass wrote or verified, nor (`deployment`, for its Deployment) one showing
    /// nothing the pass did not see.
    fn held_owned_wakes(
        &self,
        owner: &str,
        object: &str,
        version: &str,
        deployment: Option<&DeploymentView>,
    ) -> bool {
        if self.known_version(object, version) {
            return false;
        }
        let unchanged = deployment.is_some_and(|d| !self.deployment_wakes(owner, d));
        if unchanged {
            self.metrics.unchanged_deployment_events.inc();
        }
        !unchanged
    }

    /// Records what the pass of the control plane `uid` that just ended without error saw of
    /// its Deployment (`None`: none, or the pass did not get that far).
    pub fn saw_deployment(&self, uid: &str, deployment: Option<DeploymentView>) {
        if let Ok(mut m) = self.deployments_seen.lock() {
            match deployment {
                Some(d) => m.insert(uid.to_owned(), d),
                None => m.remove(uid),
            };
        }
    }

    /// Whether the control plane `uid`'s Deployment as `deployment` shows a pass anything the
    /// last pass did not see ([`DeploymentView::wakes`]); `true` when no pass recorded one.
    #[must_use]
    pub fn deployment_wakes(&self, uid: &str, deployment: &DeploymentView) -> bool {
        self.deployments_seen.lock().map_or(true, |m| {
            m.get(uid).is_none_or(|seen| deployment.wakes(seen))
        })
    }

    /// Forgets the version recorded by [`Context::own_result`] for the control plane `uid`: a
    /// pass handed a version that write replaced waits for the write's own event.
    pub fn forget_own_result(&self, uid: &str) {
        if let Ok(mut m) = self.own_results.lock() {
            m.remove(uid);
        }
    }

    /// Forgets what was recorded in memory about the control plane `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.superseded.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.own_results.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.deployments_seen.lock() {
            m.remove(uid);
        }
        if let Ok(mut m) = self.published.lock() {
            m.retain(|(u, _), _| u != uid);
        }
    }

    /// Whether an event with `reason` and `note` about the control plane `uid` repeats the one
    /// this process published last for that reason, within [`Config::resync`]; when it does
    /// not, it is recorded as published. Every pass of a control plane waiting for something
    /// reports the same event, and each would be one more write (the recorder patches the
    /// event's series count); a new note, or the same after a resync period, is published.
    pub fn repeats_event(&self, uid: &str, reason: &str, note: &str) -> bool {
        let Ok(mut m) = self.published.lock() else {
            return false;
        };
        let now = Instant::now();
        let key = (uid.to_owned(), reason.to_owned());
        if let Some((last, at)) = m.get(&key)
            && last == note
            && now.duration_since(*at) < self.config.resync
        {
            return true;
        }
        m.insert(key, (note.to_owned(), now));
        false
    }

    /// Accepts drift of the object `uid` from the desired object with `hash`.
    pub fn settle_drift(&self, uid: &str, hash: &str) {
        if let Ok(mut m) = self.settled_drift.lock() {
            m.insert(uid.to_owned(), hash.to_owned());
        }
    }

    /// Whether the object `uid` at version `version` was found holding the desired object of
    /// hash `hash` ([`Context::verified`]).
    #[must_use]
    pub fn holds_desired(&self, uid: &str, version: &str, hash: &str) -> bool {
        self.verified
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|(v, h)| v == version && h == hash))
    }

    /// Records that the object `uid` at version `version` holds the desired object of hash
    /// `hash` ([`Context::verified`]).
    pub fn verified_desired(&self, uid: &str, version: &str, hash: &str) {
        if uid.is_empty() || version.is_empty() {
            return;
        }
        if let Ok(mut m) = self.verified.lock() {
            if m.len() >= VERIFIED_KEPT {
                m.clear();
            }
            m.insert(uid.to_owned(), (version.to_owned(), hash.to_owned()));
        }
    }

    /// Records that this process created the object `uid` at version `version` (a root
    /// Secret, never compared with a desired object): its watch event wakes no pass.
    pub fn created(&self, uid: &str, version: &str) {
        self.verified_desired(uid, version, "");
    }

    /// Whether a pass of this process wrote the object `uid` at version `version`, or read it
    /// at that version and found it holding the desired object ([`Context::verified`]): the
    /// watch event of that version brings nothing the pass did not account for.
    #[must_use]
    pub fn known_version(&self, uid: &str, version: &str) -> bool {
        self.verified
            .lock()
            .is_ok_and(|m| m.get(uid).is_some_and(|(v, _)| v == version))
    }
}

impl Context {
    /// The Cluster `namespace/name`: from the controller's watch cache of Clusters, which the
    /// watch keeps current (each change wakes the control plane it concerns); read from the API
    /// server when the cache does not hold it (not filled yet, or no controller runs).
    ///
    /// # Errors
    /// The API server's, when read from it.
    pub async fn cluster(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Cluster>, kube::Error> {
        let key = ObjectRef::new(name).within(namespace);
        if let Some(c) = self.clusters.get().and_then(|s| s.get(&key)) {
            return Ok(Some(Cluster::clone(&c)));
        }
        Api::<Cluster>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    /// Whether a Cluster in the watch cache points at `kcp` and Cluster API will set its owner
    /// reference ([`crate::reconcile::gates::awaits`]); `false` without the cache.
    #[must_use]
    pub fn awaited_by_cluster(&self, kcp: &kamaji_api::KamajiControlPlane) -> bool {
        self.clusters.get().is_some_and(|store| {
            store
                .state()
                .iter()
                .any(|c| crate::reconcile::gates::awaits(c, kcp))
        })
    }

    /// The DataStore `name`, as [`Context::cluster`] reads Clusters.
    ///
    /// # Errors
    /// The API server's, when read from it.
    pub async fn datastore(&self, name: &str) -> Result<Option<DataStore>, kube::Error> {
        if let Some(d) = self
            .datastores
            .get()
            .and_then(|s| s.get(&ObjectRef::new(name)))
        {
            return Ok(Some(DataStore::clone(&d)));
        }
        Api::<DataStore>::all(self.client.clone())
            .get_opt(name)
            .await
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context for `client`.
    #[must_use]
    pub fn new(client: Client, config: Config) -> Self {
        let reporter = Reporter {
            controller: "kamaji-rs".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let metrics = Metrics::default();
        let tenant_clients = crate::tenant::Clients::new(
            http::HeaderValue::from_str(&config.user_agent).ok(),
            metrics.tenant_clients_built.clone(),
        );
        let datastore_sessions =
            crate::datastore::auth::Sessions::new(metrics.datastore_sessions.clone());
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            errors: Backoff::new(Duration::from_secs(1), Duration::from_mins(5)),
            waiting: Backoff::new(config.unreachable_requeue, Duration::from_mins(1)),
            config,
            metrics,
            settled_drift: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            superseded: Mutex::new(HashMap::new()),
            own_results: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            published: Mutex::new(HashMap::new()),
            infrastructure_kinds: Mutex::new(HashMap::new()),
            setbacks: Mutex::new(HashMap::new()),
            schema_claims: Mutex::new(std::collections::HashSet::new()),
            datastore_sessions,
            control_planes: std::sync::OnceLock::new(),
            clusters: std::sync::OnceLock::new(),
            datastores: std::sync::OnceLock::new(),
            tenant_clients,
            deployments_seen: Mutex::new(HashMap::new()),
        }
    }
}

#[cfg(test)]
impl Context {
    /// A context with the default settings whose client is never used (nothing listens on
    /// port 9), for unit tests of the in-memory bookkeeping.
    pub(crate) fn unconnected() -> Self {
        let config = kube::Config::new("https://127.0.0.1:9".parse().expect("url"));
        Self::new(Client::try_from(config).expect("client"), Config::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context::unconnected()
    }

    /// Every pass of a control plane waiting for something reports the same event: it is
    /// published once per resync period, a new note at once, another control plane's apart.
    #[tokio::test]
    async fn an_event_repeated_by_a_later_pass_is_not_published_again() {
        let ctx = context();
        assert!(!ctx.repeats_event("a", "WaitingForOwnerCluster", "waiting"));
        assert!(ctx.repeats_event("a", "WaitingForOwnerCluster", "waiting"));
        assert!(!ctx.repeats_event("b", "WaitingForOwnerCluster", "waiting"));
        assert!(!ctx.repeats_event("a", "WaitingForOwnerCluster", "still waiting"));
        assert!(!ctx.repeats_event("a", "InvalidSpec", "waiting"));
        ctx.forget("a");
        assert!(!ctx.repeats_event("a", "InvalidSpec", "waiting"));
        assert!(ctx.repeats_event("b", "WaitingForOwnerCluster", "waiting"));
    }

    /// The versions this process's writes replaced are recognised, per control plane, and
    /// only the last [`SUPERSEDED_KEPT`] are kept.
    #[tokio::test]
    async fn versions_replaced_by_own_writes_are_recognised_per_control_plane() {
        let ctx = context();
        ctx.supersede("a", "1");
        assert!(ctx.is_superseded("a", "1"));
        assert!(!ctx.is_superseded("a", "2"));
        assert!(!ctx.is_superseded("b", "1"));
        for v in 2..=SUPERSEDED_KEPT + 1 {
            ctx.supersede("a", &v.to_string());
        }
        assert!(!ctx.is_superseded("a", "1"));
        assert!(ctx.is_superseded("a", "2"));
        ctx.forget("a");
        assert!(!ctx.is_superseded("a", "2"));
    }

    /// Events of a control plane whose pass runs are held; at its end only a version its own
    /// writes do not account for asks for another pass; no pass running, nothing is held.
    #[tokio::test]
    async fn events_held_during_a_pass_ask_for_another_only_when_another_writer_made_them() {
        let ctx = context();
        assert!(!ctx.hold_event("a", "1"), "no pass running");
        ctx.begin_pass("a");
        assert!(ctx.hold_event("a", "2"));
        assert!(
            !ctx.hold_event("b", "2"),
            "another control plane's pass is not running"
        );
        assert!(ctx.hold_event("a", "3"));
        ctx.supersede("a", "2");
        ctx.own_result("a", "3");
        assert!(!ctx.end_pass("a"), "2 and 3 are the pass's own writes");
        assert!(!ctx.hold_event("a", "4"), "the pass ended");
        ctx.begin_pass("a");
        assert!(ctx.hold_event("a", "3"));
        assert!(ctx.hold_event("a", "5"));
        assert!(ctx.end_pass("a"), "5 is another writer's");
    }

    /// An object found holding the desired object is remembered for that version and that
    /// desired hash only.
    #[tokio::test]
    async fn an_object_verified_is_remembered_for_its_version_and_desired_hash_only() {
        let ctx = context();
        ctx.verified_desired("u", "3", "h1");
        assert!(ctx.holds_desired("u", "3", "h1"));
        assert!(!ctx.holds_desired("u", "4", "h1"));
        assert!(!ctx.holds_desired("u", "3", "h2"));
        assert!(!ctx.holds_desired("v", "3", "h1"));
        ctx.verified_desired("u", "4", "h1");
        assert!(!ctx.holds_desired("u", "3", "h1"));
        assert!(ctx.known_version("u", "4"));
        assert!(!ctx.known_version("u", "3"));
        ctx.created("r", "9");
        assert!(ctx.known_version("r", "9"));
    }

    /// Events of objects a control plane owns, while its pass runs, are held; at its end only a
    /// version the pass neither wrote nor verified asks for another pass.
    #[tokio::test]
    async fn owned_events_held_during_a_pass_ask_for_another_only_for_versions_it_did_not_write() {
        let ctx = context();
        assert!(
            !ctx.hold_owned_event("a", "s1", "1", None),
            "no pass running"
        );
        ctx.begin_pass("a");
        assert!(ctx.hold_owned_event("a", "s1", "2", None));
        assert!(ctx.hold_owned_event("a", "d1", "3", None));
        ctx.verified_desired("s1", "2", "h");
        ctx.created("d1", "3");
        assert!(!ctx.end_pass("a"), "both are the pass's own writes");
        ctx.begin_pass("a");
        assert!(ctx.hold_owned_event("a", "d1", "4", None));
        assert!(
            ctx.end_pass("a"),
            "4 is another writer's (the Deployment's status)"
        );
    }

    /// The version a pass's own writes left is recognised for its control plane only, and
    /// only the last one; it is forgotten on request (a pass handed an older version waits for
    /// its event) and with the control plane.
    #[tokio::test]
    async fn the_version_a_pass_left_is_recognised_until_forgotten() {
        let ctx = context();
        ctx.own_result("a", "5");
        assert!(ctx.is_own_result("a", "5"));
        assert!(!ctx.is_own_result("a", "6"));
        assert!(!ctx.is_own_result("b", "5"));
        ctx.own_result("a", "7");
        assert!(!ctx.is_own_result("a", "5"));
        assert!(ctx.is_own_result("a", "7"));
        ctx.forget_own_result("a");
        assert!(!ctx.is_own_result("a", "7"));
        ctx.own_result("a", "8");
        ctx.forget("a");
        assert!(!ctx.is_own_result("a", "8"));
    }
}
