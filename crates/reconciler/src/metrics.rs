//! Prometheus metrics of the manager (text exposition on `--metrics-bind-address`). Every
//! series and what it counts is listed in `docs/configuration.md` ("Metrics"); a test keeps
//! that list equal to what [`Metrics`] registers.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Error category ([`crate::error::Error::category`]).
    pub error: String,
}

/// Label set of the tenant gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// Condition type, e.g. `Available`.
    pub condition: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// All metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Reconcile passes.
    pub reconciles: Counter,
    /// Failed passes by category.
    pub errors: Family<ErrorLabels, Counter>,
    /// Pass duration, seconds.
    pub duration: Histogram,
    /// Time to generate missing roots, seconds.
    pub pki_generation: Histogram,
    /// KCP creation to `controlPlaneInitialized`, seconds.
    pub time_to_initialized: Histogram,
    /// Tenants by condition.
    pub tenants: Family<TenantLabels, Gauge>,
    /// Server-side apply conflicts that were resolved by forcing ownership.
    pub ssa_conflicts: Counter,
    /// Objects applied again because the live object no longer held what kamaji-rs set.
    pub drift_corrections: Counter,
    /// Passes whose status was held back as a transient setback within its grace
    /// (`kamaji_status_setbacks_held_total`).
    pub setbacks_held: Counter,
    /// Status writes refused because the pass had read a version since replaced
    /// (`kamaji_status_writes_stale_total`).
    pub stale_status_writes: Counter,
    /// Passes not run because the copy of the KamajiControlPlane they were given is one this
    /// process's own write had already replaced (`kamaji_reconcile_superseded_total`).
    pub superseded_passes: Counter,
    /// Watch events of a KamajiControlPlane that woke no pass: the version a pass of this
    /// process left with its own writes and accounted for, one its own later write replaced, or
    /// one held while its pass ran (which asks for another pass at its end if another writer
    /// made it) (`kamaji_own_write_events_total`).
    pub own_result_events: Counter,
    /// Watch events of owned objects (Secrets, Deployments, Services, Ingresses) that woke no
    /// pass: a version a pass of this process wrote or read and verified, or one held while
    /// its control plane's pass ran (which asks for another pass at its end unless the pass
    /// wrote or read that version) (`kamaji_owned_own_write_events_total`).
    pub owned_own_write_events: Counter,
    /// Control-plane Deployment watch events that woke no pass because they show nothing a
    /// pass reads that its control plane's last pass did not see
    /// ([`crate::replicas::DeploymentView`]), also those held while that pass ran
    /// (`kamaji_unchanged_deployment_events_total`).
    pub unchanged_deployment_events: Counter,
    /// Sessions opened on etcd DataStores (`kamaji_datastore_sessions_opened_total`): a client
    /// certificate issued and, with authentication on, etcd's password check
    /// ([`crate::datastore::auth::Sessions`]).
    pub datastore_sessions: Counter,
    /// Passes that ran their steps a second time from observe, because their first round
    /// created the Service whose address the rest of the plan needs
    /// (`kamaji_reconcile_second_rounds_total`).
    pub second_rounds: Counter,
    /// Clients built for tenant API servers (`kamaji_tenant_clients_built_total`): each parses
    /// a kubeconfig and opens its own TLS connections ([`crate::tenant::Clients`]).
    pub tenant_clients_built: Counter,
    tenant_conditions: Mutex<HashMap<String, Vec<(String, String)>>>,
}

/// A counter registered in `registry` as `name` with `help`.
fn counter(registry: &mut Registry, name: &str, help: &str) -> Counter {
    let counter = Counter::default();
    registry.register(name, help, counter.clone());
    counter
}

/// The plain counters of [`Metrics`], in registration order: name and help.
const COUNTERS: [(&str, &str); 11] = [
    (
        "ssa_conflicts",
        "Server-side apply conflicts resolved by forcing",
    ),
    (
        "drift_corrections",
        "Objects applied again because the live object no longer held what kamaji-rs set",
    ),
    (
        "status_setbacks_held",
        "Passes whose status was held back: a passing failure of an available control plane, within its grace",
    ),
    (
        "status_writes_stale",
        "Status writes refused (409) because the pass had read a version since replaced",
    ),
    (
        "reconcile_superseded",
        "Passes not run: the copy they were given is one this process's own write replaced",
    ),
    (
        "own_write_events",
        "KamajiControlPlane watch events that woke no pass: the version a pass of this process left with its own writes",
    ),
    (
        "owned_own_write_events",
        "Watch events of owned Secrets, Deployments, Services and Ingresses that woke no pass: a version a pass of this process wrote or read and verified",
    ),
    (
        "unchanged_deployment_events",
        "Control-plane Deployment watch events that woke no pass: nothing a pass reads changed since its control plane's last pass (the Deployment controller's status writes that change no counter a pass acts on)",
    ),
    (
        "datastore_sessions_opened",
        "Sessions opened on etcd DataStores (a client certificate issued and, with authentication on, etcd's password check); kept between passes",
    ),
    (
        "reconcile_second_rounds",
        "Passes that ran their steps again from observe: the first round created the Service whose address the rest of the plan needs",
    ),
    (
        "tenant_clients_built",
        "Clients built for tenant API servers (each parses a kubeconfig and opens its own TLS connections); those of tenants coming up are kept between passes",
    ),
];

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kamaji");
        let reconciles = Counter::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let pki_generation = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        let time_to_initialized = Histogram::new(exponential_buckets(1.0, 1.5, 14));
        let tenants = Family::<TenantLabels, Gauge>::default();
        registry.register("reconcile", "Reconcile passes", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Failed reconcile passes by error category",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a reconcile pass",
            duration.clone(),
        );
        registry.register(
            "pki_generation_duration_seconds",
            "Time to generate a tenant's root key material",
            pki_generation.clone(),
        );
        registry.register(
            "time_to_initialized_seconds",
            "Time from KamajiControlPlane creation to controlPlaneInitialized",
            time_to_initialized.clone(),
        );
        registry.register("tenants", "Tenants by condition status", tenants.clone());
        let [
            ssa_conflicts,
            drift_corrections,
            setbacks_held,
            stale_status_writes,
            superseded_passes,
            own_result_events,
            owned_own_write_events,
            unchanged_deployment_events,
            datastore_sessions,
            second_rounds,
            tenant_clients_built,
        ] = COUNTERS.map(|(name, help)| counter(&mut registry, name, help));
        Self {
            registry,
            reconciles,
            errors,
            duration,
            pki_generation,
            time_to_initialized,
            tenants,
            ssa_conflicts,
            drift_corrections,
            setbacks_held,
            stale_status_writes,
            superseded_passes,
            own_result_events,
            owned_own_write_events,
            unchanged_deployment_events,
            datastore_sessions,
            second_rounds,
            tenant_clients_built,
            tenant_conditions: Mutex::new(HashMap::new()),
        }
    }
}

impl Metrics {
    /// The text exposition.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Records the conditions of tenant `key` (`None` when it is gone) and updates the tenant
    /// gauge by the difference from what was recorded for it before (a pass costs the same
    /// with 10 tenants or 1,000; a series counting no tenant stays at 0).
    pub fn set_tenant(&self, key: &str, conditions: Option<Vec<(String, String)>>) {
        let Ok(mut map) = self.tenant_conditions.lock() else {
            return;
        };
        let previous = match &conditions {
            Some(c) => map.insert(key.to_owned(), c.clone()),
            None => map.remove(key),
        };
        if previous == conditions {
            return;
        }
        let series = |(condition, status): (String, String)| TenantLabels { condition, status };
        for labels in previous.into_iter().flatten().map(series) {
            self.tenants.get_or_create(&labels).dec();
        }
        for labels in conditions.into_iter().flatten().map(series) {
            self.tenants.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(m: &Metrics, condition: &str, status: &str) -> i64 {
        m.tenants
            .get_or_create(&TenantLabels {
                condition: condition.into(),
                status: status.into(),
            })
            .get()
    }

    fn conds(available: &str) -> Vec<(String, String)> {
        vec![
            ("Available".into(), available.into()),
            ("SpecValid".into(), "True".into()),
        ]
    }

    /// The tenant gauge counts each tenant's conditions as last recorded: a change moves the
    /// tenant from one series to the other, a tenant gone leaves every series.
    #[test]
    fn the_tenant_gauge_counts_each_tenant_as_last_recorded() {
        let m = Metrics::default();
        m.set_tenant("a/demo", Some(conds("False")));
        m.set_tenant("b/demo", Some(conds("False")));
        m.set_tenant("a/demo", Some(conds("True")));
        m.set_tenant("a/demo", Some(conds("True")));
        assert_eq!(count(&m, "Available", "True"), 1);
        assert_eq!(count(&m, "Available", "False"), 1);
        assert_eq!(count(&m, "SpecValid", "True"), 2);
        m.set_tenant("b/demo", None);
        m.set_tenant("b/demo", None);
        assert_eq!(count(&m, "Available", "False"), 0);
        assert_eq!(count(&m, "SpecValid", "True"), 1);
    }
}

#[cfg(test)]
mod documented {
    /// The series `docs/configuration.md` lists are exactly those the registry exposes.
    #[test]
    fn the_documented_series_are_the_registered_ones() {
        let metrics = super::Metrics::default();
        // A family shows in the exposition once it has a series.
        metrics
            .errors
            .get_or_create(&super::ErrorLabels {
                error: "kube".into(),
            })
            .inc();
        metrics
            .tenants
            .get_or_create(&super::TenantLabels {
                condition: "Available".into(),
                status: "True".into(),
            })
            .set(1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
        let mut registered: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').unwrap();
                if kind == "counter" {
                    format!("{name}_total")
                } else {
                    name.to_owned()
                }
            })
            .collect();
        registered.sort();
        let page = include_str!("../../../docs/configuration.md");
        let mut documented: Vec<String> = page
            .lines()
            .filter_map(|l| l.strip_prefix("| `kamaji_"))
            .map(|l| {
                let name = l.split(['`', '{']).next().unwrap();
                format!("kamaji_{name}")
            })
            .collect();
        documented.sort();
        assert_eq!(
            documented, registered,
            "docs/configuration.md's metrics table"
        );
    }
}
