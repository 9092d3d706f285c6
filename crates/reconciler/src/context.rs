//! Shared state of the controller: the client, the manager's settings, metrics, per-object
//! backoff, the event recorder, the watch caches, the kept clients and sessions of the I/O
//! edges, and the per-process [`Memory`]. Every field is private: the pipeline reaches them
//! through methods.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use kamaji_api::cluster::v1beta2::Cluster;
use kamaji_api::{DataStore, KamajiControlPlane};
use kamaji_bootstrap::pki::KeyAlgorithm;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use crate::memory::Memory;
use crate::metrics::Metrics;

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
    /// API call (the status step's `transient_setback`) is reported once it has
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
    client: Client,
    /// Settings.
    config: Config,
    /// Metrics.
    metrics: Metrics,
    /// Backoff for failing passes.
    errors: Backoff,
    /// Backoff while waiting for an unreachable tenant API.
    waiting: Backoff,
    /// Event recorder (`reportingController: kamaji-rs`).
    recorder: Recorder,
    /// What this process wrote, verified, holds and published ([`Memory`]).
    memory: Memory,
    /// Infrastructure kinds resolved through discovery and their CRDs, trusted for
    /// [`Config::resync`] ([`crate::infrastructure`]).
    infrastructure_kinds: crate::infrastructure::Kinds,
    /// The provider's sessions on etcd DataStores, kept between passes.
    datastore_sessions: crate::datastore::auth::Sessions,
    /// The control planes the controller watches (set when it starts): etcd authentication
    /// goes on for a DataStore only once each initialized one on it has its etcd user.
    control_planes: OnceLock<Store<KamajiControlPlane>>,
    /// The watch cache of Clusters (set when the controller starts); [`Context::cluster`].
    clusters: OnceLock<Store<Cluster>>,
    /// The watch cache of DataStores (set when the controller starts).
    datastores: OnceLock<Store<DataStore>>,
    /// Tenant clients kept between passes.
    tenant_clients: crate::tenant::Clients,
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
            memory: Memory::new(&metrics, config.resync, config.transient_grace),
            infrastructure_kinds: crate::infrastructure::Kinds::new(config.resync),
            config,
            metrics,
            datastore_sessions,
            control_planes: OnceLock::new(),
            clusters: OnceLock::new(),
            datastores: OnceLock::new(),
            tenant_clients,
        }
    }

    /// The management-cluster client.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The manager's settings.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The metrics.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The backoff of failing passes.
    #[must_use]
    pub fn errors(&self) -> &Backoff {
        &self.errors
    }

    /// The backoff while a tenant API does not answer.
    #[must_use]
    pub fn waiting(&self) -> &Backoff {
        &self.waiting
    }

    /// The event recorder.
    #[must_use]
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// What this process remembers between passes.
    #[must_use]
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// The cache of infrastructure kinds.
    #[must_use]
    pub fn infrastructure_kinds(&self) -> &crate::infrastructure::Kinds {
        &self.infrastructure_kinds
    }

    /// The kept sessions on etcd DataStores.
    #[must_use]
    pub fn datastore_sessions(&self) -> &crate::datastore::auth::Sessions {
        &self.datastore_sessions
    }

    /// The kept tenant clients.
    #[must_use]
    pub fn tenant_clients(&self) -> &crate::tenant::Clients {
        &self.tenant_clients
    }

    /// The watch cache of control planes, once the controller runs.
    #[must_use]
    pub fn control_planes(&self) -> Option<&Store<KamajiControlPlane>> {
        self.control_planes.get()
    }

    /// The watch cache of Clusters, once the controller runs.
    #[must_use]
    pub fn clusters(&self) -> Option<&Store<Cluster>> {
        self.clusters.get()
    }

    /// The watch cache of DataStores, once the controller runs.
    #[must_use]
    pub fn datastores(&self) -> Option<&Store<DataStore>> {
        self.datastores.get()
    }

    /// Sets the watch caches the controller fills (once; later calls change nothing).
    pub fn set_caches(
        &self,
        control_planes: Store<KamajiControlPlane>,
        clusters: Store<Cluster>,
        datastores: Store<DataStore>,
    ) {
        let _ = self.control_planes.set(control_planes);
        let _ = self.clusters.set(clusters);
        let _ = self.datastores.set(datastores);
    }

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
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
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
