//! The simulated environment of the scale benchmark (`make bench-sim`) and its smoke run: a
//! real management cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
//! the CAPI core manager), the shared TLS etcd registered as the `default` DataStore, and the
//! kamaji-rs `manager` under the shipped RBAC as in [`crate::Env`]; but the control-plane pods
//! land on fake Nodes that [`kwok`](kamaji_testenv::kwok) plays, so they become `Running` and
//! `Ready` without processes. What the provider asks of a tenant's own API (`/readyz` through
//! the endpoint, the kubeadm artifacts it server-side applies) the tenant-API stand-in
//! [`crate::tenant_api`] answers, on each tenant's `ClusterIP` with the tenant's serving
//! certificate: simulated tenants become `Available`, and the provider's steady state is the
//! one of healthy tenants. No machine is needed, so many hundreds of tenants fit on two
//! cores; the test's private network namespace (root) holds the stand-in's addresses.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kamaji_api::KamajiControlPlane;
use kamaji_reconciler::controller::WATCH_FILTER_LABEL;
use kamaji_testenv::kwok::Kwok;
use kamaji_testenv::{AuditEvent, Etcd, LocalCluster};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;

use crate::datastore::{etcd_datastore, start_datastore};
use crate::manager::{Identity, Manager};
use crate::tenant_api::{TenantApiSnapshot, TenantApis};

/// The name of every simulated tenant's Cluster and KamajiControlPlane (one per namespace).
const TENANT: &str = "demo";

/// The manager's counter of reconcile passes.
const PASSES: &str = "kamaji_reconcile_total";

/// The manager's counter of sessions opened on etcd DataStores.
const SESSIONS: &str = "kamaji_datastore_sessions_opened_total";

/// The manager's counter of passes that ran their steps a second time (the first round
/// created the Service whose address the rest of the plan needs).
const SECOND_ROUNDS: &str = "kamaji_reconcile_second_rounds_total";

/// The manager's counter of control-plane Deployment events that woke no pass because they
/// showed nothing a pass acts on that the last pass had not seen.
const UNCHANGED_DEPLOYMENT_EVENTS: &str = "kamaji_unchanged_deployment_events_total";

/// The simulated cluster's service network: room for a Service per tenant at 1,000 tenants.
pub const SIM_SERVICE_CIDR: &str = "10.0.0.0/20";

/// A running simulated environment. Drop order: manager, tenant APIs, kwok, datastore,
/// cluster.
pub struct SimEnv {
    manager: Manager,
    /// The tenant-API stand-in.
    pub tenant_apis: TenantApis,
    /// kwok and its fake Nodes.
    pub kwok: Kwok,
    /// The datastore etcd (loopback only).
    pub datastore: Etcd,
    /// The management cluster.
    pub cluster: LocalCluster,
}

impl SimEnv {
    /// Starts the management cluster, `nodes` fake Nodes under kwok, the datastore and the
    /// manager (its binary as [`crate::manager_binary`] finds it, `extra` flags).
    ///
    /// # Errors
    /// When a program is missing (`make tools`) or does not become ready.
    pub async fn start(nodes: usize) -> Result<Self> {
        let cluster = LocalCluster::builder()
            .controllers(true)
            .service_cidr(SIM_SERVICE_CIDR)
            .start()
            .await?;
        let kwok = Kwok::start(&cluster, nodes).await?;
        let (datastore, ca, client) = start_datastore(&cluster, None).await?;
        let endpoint = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), datastore.port());
        cluster
            .apply_value(&etcd_datastore("default", endpoint, &ca, &client))
            .await?;
        let identity = Identity::install(&cluster).await?;
        let tenant_apis =
            TenantApis::start(cluster.client(), SIM_SERVICE_CIDR, TENANT, TENANT).await?;
        let mut env = Self {
            manager: Manager::new(identity),
            tenant_apis,
            kwok,
            datastore,
            cluster,
        };
        env.start_manager()?;
        Ok(env)
    }

    /// An administrator's client of the management cluster.
    #[must_use]
    pub fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Starts (or restarts) the manager process.
    ///
    /// # Errors
    /// When it cannot be built or started.
    pub fn start_manager(&mut self) -> Result<()> {
        self.manager.start(self.cluster.dir())
    }

    /// Kills the manager with SIGKILL.
    pub fn kill_manager(&mut self) {
        self.manager.kill();
    }

    /// The manager's process id.
    #[must_use]
    pub fn manager_pid(&self) -> Option<u32> {
        self.manager.pid()
    }

    /// The running manager's log so far.
    #[must_use]
    pub fn manager_full_log(&self) -> String {
        self.manager.full_log()
    }

    /// A counter or gauge of the manager's `/metrics` (sum over label sets), 0 if unreachable.
    pub async fn manager_metric(&self, name: &str) -> f64 {
        self.manager.metric(name).await
    }

    /// The manager's requests in the audit log, oldest first.
    ///
    /// # Errors
    /// When the audit log cannot be read.
    pub fn manager_requests(&self) -> Result<Vec<AuditEvent>> {
        Ok(self
            .cluster
            .audit_events()?
            .into_iter()
            .filter(|e| e.user.username == self.manager.identity.user)
            .collect())
    }
}

/// The unit of `/proc`'s CPU times: `USER_HZ`, 100 per second on every Linux architecture
/// (`sysconf(_SC_CLK_TCK)`, part of the kernel's user-space ABI; proc_pid_stat(5)).
const USER_HZ: u64 = 100;

/// CPU time (user + system) and peak resident memory of process `pid`, from `/proc`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessUsage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Peak resident set size (`VmHWM`), bytes.
    pub peak_rss: u64,
}

impl ProcessUsage {
    /// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`.
    ///
    /// # Errors
    /// When the process does not exist.
    pub fn of(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("no process {pid}"))?;
        // Fields after the command's closing parenthesis; utime and stime are the 14th and
        // 15th fields of the line (proc_pid_stat(5)), in clock ticks.
        let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let cpu_ticks = ticks(11) + ticks(12);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let peak_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        Ok(Self {
            cpu: Duration::from_millis(cpu_ticks * 1000 / USER_HZ),
            peak_rss: peak_kib * 1024,
        })
    }
}

/// CPU time of the whole machine (every core, `/proc/stat`): what is neither idle nor waiting
/// for I/O.
///
/// # Errors
/// When `/proc/stat` cannot be read.
fn machine_busy() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().context("/proc/stat is empty")?;
    // cpu user nice system idle iowait irq softirq steal … (USER_HZ; proc_stat(5)).
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Ok(Duration::from_millis(busy * 1000 / USER_HZ))
}

/// Where a phase's CPU went: the machine's busy time against its capacity, and each program
/// of the simulation's share (from `/proc`).
#[derive(Debug, Clone, Default)]
pub struct CpuShares {
    /// Wall-clock time of the phase.
    pub wall: Duration,
    /// Cores online.
    pub cores: usize,
    /// Busy time of all cores together ([`machine_busy`]).
    pub machine_busy: Duration,
    /// Each program's CPU time (user + system) over the phase, largest first.
    pub programs: Vec<(String, Duration)>,
}

/// A point of a [`CpuShares`] phase: when, the machine's busy time, each program's CPU.
#[derive(Debug, Clone)]
pub struct CpuMark {
    at: Instant,
    busy: Duration,
    programs: Vec<(String, Duration)>,
}

impl CpuMark {
    /// Reads the machine's busy time and the CPU time of every program of `env`: the
    /// management cluster's (named by their command), the datastore's etcd, kwok, the manager
    /// and this process (the tenant-API stand-in and the bench's watches).
    ///
    /// # Errors
    /// When `/proc` cannot be read.
    pub fn of(env: &SimEnv) -> Result<Self> {
        let mut pids: Vec<(String, u32)> = env
            .cluster
            .pids()
            .into_iter()
            .map(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map_or_else(|_| pid.to_string(), |c| c.trim().to_owned());
                let name = if comm == "etcd" {
                    "etcd (management)".to_owned()
                } else {
                    comm
                };
                (name, pid)
            })
            .collect();
        pids.push(("etcd (datastore)".into(), env.datastore.pid()));
        pids.push(("kwok".into(), env.kwok.pid()));
        if let Some(pid) = env.manager_pid() {
            pids.push(("manager".into(), pid));
        }
        pids.push((
            "bench (tenant-API stand-in, watches)".into(),
            std::process::id(),
        ));
        Ok(Self {
            at: Instant::now(),
            busy: machine_busy()?,
            programs: pids
                .into_iter()
                .map(|(name, pid)| {
                    (
                        name,
                        ProcessUsage::of(pid).map(|u| u.cpu).unwrap_or_default(),
                    )
                })
                .collect(),
        })
    }

    /// The phase from `self` until `now` (programs matched by name; one that restarted in
    /// between counts from zero).
    #[must_use]
    pub fn until(&self, now: &Self) -> CpuShares {
        let mut programs: Vec<(String, Duration)> = now
            .programs
            .iter()
            .map(|(name, cpu)| {
                let before = self
                    .programs
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(Duration::ZERO, |(_, c)| *c);
                let spent = cpu.checked_sub(before).unwrap_or(*cpu);
                (name.clone(), spent)
            })
            .collect();
        programs.sort_by_key(|p| std::cmp::Reverse(p.1));
        CpuShares {
            wall: now.at.duration_since(self.at),
            cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            machine_busy: now.busy.saturating_sub(self.busy),
            programs,
        }
    }
}

impl std::fmt::Display for CpuShares {
    #[allow(clippy::cast_precision_loss)]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let capacity = self.wall.as_secs_f64() * self.cores as f64;
        write!(
            f,
            "machine busy {:.1} of {:.1} core-seconds ({:.0} %):",
            self.machine_busy.as_secs_f64(),
            capacity,
            self.machine_busy.as_secs_f64() * 100.0 / capacity.max(f64::EPSILON)
        )?;
        for (name, cpu) in &self.programs {
            write!(f, " {name} {:.1} s;", cpu.as_secs_f64())?;
        }
        Ok(())
    }
}

/// Marks a request the API server refused in [`requests_by_verb_and_resource`]'s keys
/// (`patch kamajicontrolplanes/status refused 409`): a refused write changed nothing, so
/// [`writes`] leaves it out.
pub const REFUSED: &str = "refused";

/// Requests counted by verb and resource (`verb resource[/subresource]`), e.g.
/// `patch kamajicontrolplanes/status`; a refused one with [`REFUSED`] and its code.
#[must_use]
pub fn requests_by_verb_and_resource(events: &[AuditEvent]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events {
        let resource = e.object_ref.as_ref().map_or_else(
            || e.request_u_r_i.clone(),
            |o| match &o.subresource {
                Some(s) if !s.is_empty() => format!("{}/{s}", o.resource),
                _ => o.resource.clone(),
            },
        );
        let key = match e.code() {
            Some(code) if e.refused() => format!("{} {resource} {REFUSED} {code}", e.verb),
            _ => format!("{} {resource}", e.verb),
        };
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

/// What [`bench`] does: `tenants` tenants of `replicas` pods on `nodes` fake Nodes, created
/// at once, then `idle` idle, then a manager restart.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Tenants created at once (at least 2).
    pub tenants: usize,
    /// `spec.replicas` of each.
    pub replicas: i32,
    /// Fake Nodes.
    pub nodes: usize,
    /// How long the manager is watched idle once every tenant is provisioned.
    pub idle: Duration,
    /// How many times the manager is then killed and started again (at least 1): each
    /// restart is measured on its own ([`Restart`]), so several give the spread of a restart's
    /// figures within one run.
    pub restarts: usize,
}

/// The provisioning conditions: all `True`, with `status.availableReplicas` at
/// `spec.replicas`, once the provider has made everything it makes for a tenant whose API is
/// not reachable (the simulated ones never are).
pub const PROVISIONED: [&str; 4] = [
    "CertificatesAvailable",
    "KubeconfigAvailable",
    "DataStoreReady",
    "ControlPlaneEndpointReady",
];

/// The figures of one [`bench`] run. Durations are wall-clock unless named CPU; request
/// counts are the manager's, from the management API server's audit log, keyed as
/// [`requests_by_verb_and_resource`] keys them.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The options of the run.
    pub options: BenchOptions,
    /// From the first creation until the last tenant's objects were created.
    pub created: Duration,
    /// From the first creation until every tenant read provisioned.
    pub all_provisioned: Duration,
    /// Per tenant, from the first creation until it read provisioned: median and maximum.
    pub provisioned_median: Duration,
    /// See [`Figures::provisioned_median`].
    pub provisioned_max: Duration,
    /// When the CAPI core manager had set the last tenant's owner reference (from the first
    /// creation): the provider's passes wait for it.
    pub last_owner_reference: Duration,
    /// Per tenant, from its owner reference until it read provisioned (the provider's own
    /// part): median and maximum.
    pub after_owner_median: Duration,
    /// See [`Figures::after_owner_median`].
    pub after_owner_max: Duration,
    /// The manager's passes until every tenant read provisioned (`kamaji_reconcile_total`).
    pub provisioning_passes: f64,
    /// Of those passes, the ones that ran a second round (`kamaji_reconcile_second_rounds_total`).
    pub provisioning_second_rounds: f64,
    /// The sessions it opened on the DataStore until then
    /// (`kamaji_datastore_sessions_opened_total`).
    pub provisioning_sessions: f64,
    /// The manager's CPU from the first creation until every tenant read provisioned.
    pub provisioning_cpu: Duration,
    /// The manager's requests until every tenant read provisioned.
    pub provisioning_requests: BTreeMap<String, usize>,
    /// The manager's peak RSS once every tenant read provisioned, bytes.
    pub provisioned_peak_rss: u64,
    /// From the first creation until every tenant read `Available` (its API, the stand-in,
    /// answering `/readyz` through the endpoint and the kubeadm artifacts applied).
    pub all_available: Duration,
    /// Per tenant, from the first creation until it read `Available`: median and maximum.
    pub available_median: Duration,
    /// See [`Figures::available_median`].
    pub available_max: Duration,
    /// The manager's CPU from the first creation until every tenant read `Available`.
    pub available_cpu: Duration,
    /// The manager's requests to the management cluster until every tenant read `Available`.
    pub available_requests: BTreeMap<String, usize>,
    /// The manager's passes until every tenant read `Available` (`kamaji_reconcile_total`).
    pub available_passes: f64,
    /// Deployment events that woke no pass until then, because they showed nothing a pass acts
    /// on that the last pass had not seen (`kamaji_unchanged_deployment_events_total`).
    pub available_unchanged_deployment_events: f64,
    /// Where the machine's CPU went from the first creation until every tenant read
    /// `Available`: the whole management cluster's cost, of which the manager's is a part.
    pub available_shares: CpuShares,
    /// The tenant-API stand-in's answers until every tenant read `Available`, as
    /// [`TenantApiCounts::snapshot`](crate::tenant_api::TenantApiCounts::snapshot).
    pub tenant_api_until_available: TenantApiSnapshot,
    /// The stand-in's answers over the idle time.
    pub idle_tenant_api: TenantApiSnapshot,
    /// The manager's CPU over [`BenchOptions::idle`].
    pub idle_cpu: Duration,
    /// Its passes meanwhile.
    pub idle_passes: f64,
    /// Its requests meanwhile.
    pub idle_requests: BTreeMap<String, usize>,
    /// Its peak RSS at the end of the idle time, bytes.
    pub idle_peak_rss: u64,
    /// Its writes meanwhile, one line each with the object and, where the audit policy logs
    /// it, the request body (for diagnosis).
    pub idle_writes: Vec<String>,
    /// The manager's own log lines on its idle status writes (`writing status`, with the
    /// fields that changed), for diagnosis.
    pub idle_status_log: Vec<String>,
    /// Each restart after the idle time, in order.
    pub restarts: Vec<Restart>,
}

/// What one restart of [`bench`] cost: the manager killed (SIGKILL) and started again, until
/// its log showed every tenant reconciled.
#[derive(Debug, Clone)]
pub struct Restart {
    /// From the restart until every tenant had been reconciled again.
    pub reverified: Duration,
    /// The restarted manager's requests until then plus 5 s.
    pub requests: BTreeMap<String, usize>,
    /// Its writes other than Leases, as [`Figures::idle_writes`].
    pub writes: Vec<String>,
    /// Its CPU until then.
    pub cpu: Duration,
    /// The sessions it opened on the DataStore until then.
    pub sessions: f64,
    /// Where the machine's CPU went from the restart until every tenant was reconciled again.
    pub shares: CpuShares,
    /// Its peak RSS, bytes.
    pub peak_rss: u64,
    /// The stand-in's answers until it had reconciled every tenant.
    pub tenant_api: TenantApiSnapshot,
}

/// The write requests of `requests` (keys starting with a write verb) the API server did not
/// refuse, optionally without the leader-election Leases.
#[must_use]
pub fn writes(requests: &BTreeMap<String, usize>, leases: bool) -> BTreeMap<String, usize> {
    requests
        .iter()
        .filter(|(k, _)| {
            let verb = k.split(' ').next().unwrap_or_default();
            matches!(
                verb,
                "create" | "update" | "patch" | "delete" | "deletecollection"
            ) && !k.contains(REFUSED)
                && (leases || !k.ends_with(" leases"))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The writes of `events` other than leader-election Leases, one line each: verb, resource,
/// object and, where the audit policy logs it, the request body.
/// `now - before`, count by count.
fn minus(now: TenantApiSnapshot, before: TenantApiSnapshot) -> TenantApiSnapshot {
    let sub = |mut out: [u64; 5], before: [u64; 5]| {
        for (o, b) in out.iter_mut().zip(before) {
            *o = o.saturating_sub(b);
        }
        out
    };
    TenantApiSnapshot {
        provider: sub(now.provider, before.provider),
        others: sub(now.others, before.others),
    }
}

/// The stand-in's counts as one line: the provider's, then the other clients'.
fn tenant_api_line(s: TenantApiSnapshot) -> String {
    let counts = |c: [u64; 5]| {
        format!(
            "{} TLS connections, {} GET /readyz, {} applies, {} GETs, {} other",
            c[0], c[1], c[2], c[3], c[4]
        )
    };
    format!(
        "the provider {}; other clients (Cluster API's cluster cache) {}",
        counts(s.provider),
        counts(s.others)
    )
}

fn write_lines(events: &[AuditEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.is_write() && !e.refused())
        .filter(|e| e.object_ref.as_ref().is_none_or(|o| o.resource != "leases"))
        .map(|e| {
            let body = e
                .request_object
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            format!("{} {} {body}", e.verb, e.request_u_r_i)
        })
        .collect()
}

fn total(requests: &BTreeMap<String, usize>) -> usize {
    requests.values().sum()
}

fn listed(requests: &BTreeMap<String, usize>) -> String {
    if requests.is_empty() {
        return "none".into();
    }
    requests
        .iter()
        .map(|(k, c)| format!("{k} {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[allow(clippy::cast_precision_loss)]
fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

impl std::fmt::Display for Figures {
    #[allow(clippy::cast_precision_loss)]
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.options;
        let n = o.tenants as f64;
        writeln!(
            f,
            "simulated: {} tenants x {} replicas on {} kwok Nodes; their APIs are the tenant-API stand-in",
            o.tenants, o.replicas, o.nodes
        )?;
        writeln!(f, "created in {:.1} s", self.created.as_secs_f64())?;
        writeln!(
            f,
            "all provisioned after {:.1} s (per tenant from the first creation: median {:.1} s, max {:.1} s)",
            self.all_provisioned.as_secs_f64(),
            self.provisioned_median.as_secs_f64(),
            self.provisioned_max.as_secs_f64()
        )?;
        writeln!(
            f,
            "CAPI set the last owner reference after {:.1} s; from its owner reference until provisioned, per tenant: median {:.1} s, max {:.1} s",
            self.last_owner_reference.as_secs_f64(),
            self.after_owner_median.as_secs_f64(),
            self.after_owner_max.as_secs_f64()
        )?;
        writeln!(
            f,
            "manager CPU until then: {:.2} s ({:.1} ms per tenant); passes {} ({:.1} per tenant, {} with a second round); DataStore sessions opened {}",
            self.provisioning_cpu.as_secs_f64(),
            self.provisioning_cpu.as_secs_f64() * 1000.0 / n,
            self.provisioning_passes,
            self.provisioning_passes / n,
            self.provisioning_second_rounds,
            self.provisioning_sessions
        )?;
        let w = total(&writes(&self.provisioning_requests, true));
        let all = total(&self.provisioning_requests);
        writeln!(
            f,
            "manager API requests: {all} ({:.1} per tenant), writes {w} ({:.1} per tenant)",
            all as f64 / n,
            w as f64 / n
        )?;
        for (key, count) in &self.provisioning_requests {
            writeln!(f, "  {key}: {count} ({:.2} per tenant)", *count as f64 / n)?;
        }
        writeln!(
            f,
            "manager peak RSS: {:.1} MiB",
            mib(self.provisioned_peak_rss)
        )?;
        let w = total(&writes(&self.available_requests, true));
        writeln!(
            f,
            "all Available after {:.1} s (per tenant: median {:.1} s, max {:.1} s); manager CPU until then {:.2} s ({:.1} ms per tenant); requests {} ({:.1} per tenant), writes {w} ({:.1} per tenant)",
            self.all_available.as_secs_f64(),
            self.available_median.as_secs_f64(),
            self.available_max.as_secs_f64(),
            self.available_cpu.as_secs_f64(),
            self.available_cpu.as_secs_f64() * 1000.0 / n,
            total(&self.available_requests),
            total(&self.available_requests) as f64 / n,
            w as f64 / n
        )?;
        writeln!(
            f,
            "  passes until then {} ({:.1} per tenant); Deployment events that woke no pass (nothing new to a pass) {}",
            self.available_passes,
            self.available_passes / n,
            self.available_unchanged_deployment_events
        )?;
        writeln!(
            f,
            "  tenant-API stand-in until then: {}",
            tenant_api_line(self.tenant_api_until_available)
        )?;
        writeln!(f, "  {}", self.available_shares)?;
        writeln!(
            f,
            "idle {} s: manager CPU {:.2} s ({:.2} % of a core), passes {}, requests {}, writes: {}; peak RSS {:.1} MiB",
            o.idle.as_secs(),
            self.idle_cpu.as_secs_f64(),
            self.idle_cpu.as_secs_f64() * 100.0 / o.idle.as_secs_f64().max(1.0),
            self.idle_passes,
            total(&self.idle_requests),
            listed(&writes(&self.idle_requests, true)),
            mib(self.idle_peak_rss)
        )?;
        writeln!(
            f,
            "  tenant-API stand-in meanwhile: {}",
            tenant_api_line(self.idle_tenant_api)
        )?;
        for w in self.idle_writes.iter().chain(&self.idle_status_log) {
            writeln!(f, "  {w}")?;
        }
        for (i, r) in self.restarts.iter().enumerate() {
            let label = if self.restarts.len() > 1 {
                format!("restart {}", i + 1)
            } else {
                "restart".to_owned()
            };
            writeln!(
                f,
                "{label}: every tenant reconciled again after {:.1} s; requests {}, writes without Leases: {}, Lease writes {}; CPU {:.2} s, peak RSS {:.1} MiB; DataStore sessions opened {}",
                r.reverified.as_secs_f64(),
                total(&r.requests),
                listed(&writes(&r.requests, false)),
                total(&writes(&r.requests, true)) - total(&writes(&r.requests, false)),
                r.cpu.as_secs_f64(),
                mib(r.peak_rss),
                r.sessions
            )?;
            writeln!(
                f,
                "  tenant-API stand-in meanwhile: {}",
                tenant_api_line(r.tenant_api)
            )?;
            writeln!(f, "  {}", r.shares)?;
            for w in &r.writes {
                writeln!(f, "  {w}")?;
            }
        }
        Ok(())
    }
}

/// Condition `Available` is `True`.
fn is_available(k: &KamajiControlPlane) -> bool {
    k.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == kamaji_api::conditions::types::AVAILABLE && c.status == "True")
        })
}

fn provisioned(k: &KamajiControlPlane) -> bool {
    let conds = k.status.as_ref().and_then(|s| s.conditions.as_ref());
    let available = k.status.as_ref().and_then(|s| s.available_replicas);
    available.is_some()
        && available == k.spec.replicas
        && PROVISIONED
            .iter()
            .all(|t| conds.is_some_and(|c| c.iter().any(|c| c.type_ == *t && c.status == "True")))
}

/// Creates the namespaces `names`, 16 at a time.
async fn create_namespaces(cluster: &LocalCluster, names: &[String]) -> Result<()> {
    futures::stream::iter(names.iter().map(|ns| async move {
        cluster
            .apply_value(&serde_json::json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
            }))
            .await
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Creates a tenant `demo` (F0, `serviceType: ClusterIP`, `replicas` pods) in each namespace
/// of `names`, 16 at a time; `watch_filter(i)` is the `cluster.x-k8s.io/watch-filter` label of
/// the `i`-th tenant's Cluster and KamajiControlPlane, if any.
async fn create_tenants(
    cluster: &LocalCluster,
    names: &[String],
    replicas: i32,
    watch_filter: impl Fn(usize) -> Option<String>,
) -> Result<()> {
    futures::stream::iter(names.iter().enumerate().map(|(i, ns)| {
        let mut f0 = crate::F0::new(ns, TENANT)
            .replicas(replicas)
            .network("serviceType: ClusterIP");
        if let Some(value) = watch_filter(i) {
            f0 = f0.label(WATCH_FILTER_LABEL, &value);
        }
        async move { cluster.apply_yaml(&f0.yaml()).await }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// When each tenant was first seen provisioned ([`PROVISIONED`], every replica available),
/// from a watch of every KamajiControlPlane; the watch stops when this is dropped.
struct Provisioned {
    seen: Arc<Mutex<HashMap<String, Duration>>>,
    /// When each tenant was first seen with its owner reference from the Cluster (set by the
    /// CAPI core manager; the provider's passes wait for it, as CAPI's contract has it).
    owned: Arc<Mutex<HashMap<String, Duration>>>,
    /// When each tenant was first seen `Available` (its API answering through the endpoint:
    /// here the tenant-API stand-in).
    available: Arc<Mutex<HashMap<String, Duration>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Provisioned {
    /// Starts the watch; times count from `start`.
    fn watch(client: &Client, start: Instant) -> Self {
        let seen: Arc<Mutex<HashMap<String, Duration>>> = Arc::default();
        let owned: Arc<Mutex<HashMap<String, Duration>>> = Arc::default();
        let available: Arc<Mutex<HashMap<String, Duration>>> = Arc::default();
        let api = Api::<KamajiControlPlane>::all(client.clone());
        let watch = tokio::spawn({
            let (seen, owned, available) = (
                Arc::clone(&seen),
                Arc::clone(&owned),
                Arc::clone(&available),
            );
            async move {
                let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Some(Ok(event)) = events.next().await {
                    let (watcher::Event::Apply(k) | watcher::Event::InitApply(k)) = event else {
                        continue;
                    };
                    let key = format!(
                        "{}/{}",
                        k.metadata.namespace.as_deref().unwrap_or_default(),
                        k.metadata.name.as_deref().unwrap_or_default()
                    );
                    let now = start.elapsed();
                    if k.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "Cluster")
                    {
                        owned
                            .lock()
                            .expect("lock")
                            .entry(key.clone())
                            .or_insert(now);
                    }
                    if is_available(&k) {
                        available
                            .lock()
                            .expect("lock")
                            .entry(key.clone())
                            .or_insert(now);
                    }
                    if provisioned(&k) {
                        seen.lock().expect("lock").entry(key).or_insert(now);
                    }
                }
            }
        });
        Self {
            seen,
            owned,
            available,
            watch,
        }
    }

    /// Per tenant, from its owner reference until it read provisioned (the provider's own
    /// part), shortest first; and when the last owner reference was seen.
    fn after_owner(&self) -> (Vec<Duration>, Duration) {
        let seen = self.seen.lock().expect("lock");
        let owned = self.owned.lock().expect("lock");
        let mut times: Vec<Duration> = seen
            .iter()
            .filter_map(|(k, t)| Some(t.saturating_sub(*owned.get(k)?)))
            .collect();
        times.sort();
        (times, owned.values().max().copied().unwrap_or_default())
    }

    /// Waits until `tenants` tenants were seen provisioned.
    ///
    /// # Errors
    /// After 30 minutes, with `log_tail()` (the managers' last lines) in the message.
    async fn wait(&self, tenants: usize, log_tail: impl Fn() -> String) -> Result<()> {
        Self::wait_for(&self.seen, "provisioned", tenants, log_tail).await
    }

    /// Waits until `tenants` tenants were seen `Available`.
    ///
    /// # Errors
    /// As [`Provisioned::wait`].
    async fn wait_available(&self, tenants: usize, log_tail: impl Fn() -> String) -> Result<()> {
        Self::wait_for(&self.available, "Available", tenants, log_tail).await
    }

    async fn wait_for(
        seen: &Mutex<HashMap<String, Duration>>,
        what: &str,
        tenants: usize,
        log_tail: impl Fn() -> String,
    ) -> Result<()> {
        let deadline = Instant::now() + Duration::from_mins(30);
        loop {
            let n = seen.lock().expect("lock").len();
            if n >= tenants {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "only {n} of {tenants} tenants {what} in 30 min; manager log:\n{}",
                    log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The times seen provisioned, shortest first.
    fn sorted(&self) -> Vec<Duration> {
        sorted(&self.seen)
    }

    /// The times seen `Available`, shortest first.
    fn sorted_available(&self) -> Vec<Duration> {
        sorted(&self.available)
    }
}

fn sorted(times: &Mutex<HashMap<String, Duration>>) -> Vec<Duration> {
    let mut times: Vec<Duration> = times.lock().expect("lock").values().copied().collect();
    times.sort();
    times
}

impl Drop for Provisioned {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

/// What the conditions claim, checked: a Deployment and the `-kubeconfig`, `-ca`, `-sa` and
/// `-proxy` Secrets of tenant `demo` in each namespace of `names`.
async fn check_made(client: &Client, names: &[String]) -> Result<()> {
    let deployments = Api::<Deployment>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    let secrets = Api::<Secret>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    let key = |m: &kube::core::ObjectMeta| {
        (
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        )
    };
    let secrets: HashSet<_> = secrets.items.iter().map(|s| key(&s.metadata)).collect();
    let deployed: HashSet<_> = deployments
        .items
        .iter()
        .map(|d| key(&d.metadata).0)
        .collect();
    for ns in names {
        for secret in ["demo-kubeconfig", "demo-ca", "demo-sa", "demo-proxy"] {
            if !secrets.contains(&(ns.clone(), secret.to_owned())) {
                bail!("{ns}: Secret {secret} missing although the tenant reads provisioned");
            }
        }
        if !deployed.contains(ns) {
            bail!("{ns}: no Deployment although the tenant reads provisioned");
        }
    }
    Ok(())
}

/// The control planes a manager's `log` shows reconciled: every pass ends with
/// `… reconciled kcp=KamajiControlPlane.<version>.<group>/<name>.<namespace>`, the object
/// reference last on the line (between colour codes: the last word).
fn reconciled(log: &str) -> HashSet<&str> {
    log.lines()
        .filter(|l| l.contains(" reconciled "))
        .filter_map(|l| l.split_whitespace().last())
        .collect()
}

/// Runs the simulated scale benchmark on a fresh [`SimEnv`]: creates the tenants (a Cluster
/// and a KamajiControlPlane each, F0 with `serviceType: ClusterIP`, in namespaces `sim-<i>`)
/// 16 at a time, waits until every one reads provisioned ([`PROVISIONED`], every replica
/// available) and checks that
/// its Deployment and its `-kubeconfig`, `-ca`, `-sa` and `-proxy` Secrets exist, waits until
/// every one reads `Available` (through the tenant-API stand-in), watches the manager idle,
/// then kills it, starts it again and waits until its log shows every tenant reconciled.
///
/// # Errors
/// When the environment does not start, a tenant is not provisioned or not `Available` within
/// 30 minutes (or lacks an object it reads as made), or the restarted manager does not
/// reconcile every tenant within 10 minutes.
#[allow(clippy::too_many_lines)]
pub async fn bench(options: BenchOptions) -> Result<Figures> {
    let BenchOptions {
        tenants,
        replicas,
        nodes,
        idle,
        restarts,
    } = options;
    let mut env = SimEnv::start(nodes).await?;
    let client = env.client();
    let names: Vec<String> = (0..tenants).map(|i| format!("sim-{i}")).collect();
    create_namespaces(&env.cluster, &names).await?;
    // The manager has started and listed the empty cluster: what follows is the tenants' cost.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = env.manager_pid().context("no manager")?;
    let before = ProcessUsage::of(pid)?;
    let passes_before = env.manager_metric(PASSES).await;
    let mark = env.manager_requests()?.len();

    let start = Instant::now();
    let cpu_start = CpuMark::of(&env)?;
    let seen = Provisioned::watch(&client, start);
    create_tenants(&env.cluster, &names, replicas, |_| None).await?;
    let created = start.elapsed();
    seen.wait(tenants, || env.manager.log_tail(40)).await?;
    let all_provisioned = start.elapsed();
    let after = ProcessUsage::of(pid)?;
    let provisioning_passes = env.manager_metric(PASSES).await - passes_before;
    let provisioning_sessions = env.manager_metric(SESSIONS).await;
    let provisioning_second_rounds = env.manager_metric(SECOND_ROUNDS).await;
    let requests = env.manager_requests()?;
    let provisioning_requests = requests_by_verb_and_resource(&requests[mark..]);

    check_made(&client, &names).await?;
    seen.wait_available(tenants, || env.manager.log_tail(40))
        .await?;
    let all_available = start.elapsed();
    let available_shares = cpu_start.until(&CpuMark::of(&env)?);
    let available_usage = ProcessUsage::of(pid)?;
    let available_requests = requests_by_verb_and_resource(&env.manager_requests()?[mark..]);
    let available_passes = env.manager_metric(PASSES).await - passes_before;
    let available_unchanged_deployment_events =
        env.manager_metric(UNCHANGED_DEPLOYMENT_EVENTS).await;
    let tenant_api_until_available = env.tenant_apis.counts.snapshot();
    let per_tenant = seen.sorted();
    let available = seen.sorted_available();
    let (after_owner, last_owner_reference) = seen.after_owner();
    drop(seen);

    // Idle.
    let idle_tenant_api_before = env.tenant_apis.counts.snapshot();
    let idle_before = ProcessUsage::of(pid)?;
    let idle_passes_before = env.manager_metric(PASSES).await;
    let idle_mark = env.manager_requests()?.len();
    let idle_log_mark = env.manager_full_log().len();
    tokio::time::sleep(idle).await;
    let log = env.manager_full_log();
    let idle_status_log: Vec<String> = log
        .get(idle_log_mark..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("writing status"))
        .map(str::to_owned)
        .collect();
    let idle_after = ProcessUsage::of(pid)?;
    let idle_tenant_api = minus(env.tenant_apis.counts.snapshot(), idle_tenant_api_before);
    let idle_passes = env.manager_metric(PASSES).await - idle_passes_before;
    let idle_events = env.manager_requests()?.split_off(idle_mark);
    let idle_requests = requests_by_verb_and_resource(&idle_events);
    if !writes(&idle_requests, false).is_empty() {
        // Kept for diagnosis: the environment's folder goes with it.
        let kept = std::env::temp_dir().join("kamaji-sim-idle-writes-manager.log");
        std::fs::write(&kept, &log)?;
        eprintln!(
            "the idle manager wrote; its log is kept in {}",
            kept.display()
        );
    }

    let mut measured = Vec::with_capacity(restarts.max(1));
    for _ in 0..restarts.max(1) {
        measured.push(restart(&mut env, tenants).await?);
    }
    Ok(Figures {
        options,
        created,
        all_provisioned,
        provisioned_median: per_tenant[tenants / 2],
        provisioned_max: per_tenant[tenants - 1],
        last_owner_reference,
        after_owner_median: after_owner.get(tenants / 2).copied().unwrap_or_default(),
        after_owner_max: after_owner.last().copied().unwrap_or_default(),
        provisioning_passes,
        provisioning_second_rounds,
        provisioning_sessions,
        provisioning_cpu: after.cpu.saturating_sub(before.cpu),
        provisioning_requests,
        provisioned_peak_rss: after.peak_rss,
        all_available,
        available_median: available[tenants / 2],
        available_max: available[tenants - 1],
        available_cpu: available_usage.cpu.saturating_sub(before.cpu),
        available_requests,
        available_passes,
        available_unchanged_deployment_events,
        available_shares,
        tenant_api_until_available,
        idle_tenant_api,
        idle_cpu: idle_after.cpu.saturating_sub(idle_before.cpu),
        idle_passes,
        idle_requests,
        idle_peak_rss: idle_after.peak_rss,
        idle_writes: write_lines(&idle_events),
        idle_status_log,
        restarts: measured,
    })
}

/// Kills the manager (SIGKILL), starts it again and waits until its log shows every one of
/// `tenants` tenants reconciled, then 5 s more for the audit log to show any write it made.
///
/// # Errors
/// When it does not start, or does not reconcile every tenant within 10 minutes.
async fn restart(env: &mut SimEnv, tenants: usize) -> Result<Restart> {
    env.kill_manager();
    let mark = env.manager_requests()?.len();
    let tenant_api_before = env.tenant_apis.counts.snapshot();
    let restarted = Instant::now();
    let cpu_mark = CpuMark::of(env)?;
    env.start_manager()?;
    let deadline = Instant::now() + Duration::from_mins(10);
    let reverified = loop {
        let log = env.manager_full_log();
        let keys = reconciled(&log);
        if keys.len() >= tenants {
            break restarted.elapsed();
        }
        if Instant::now() > deadline {
            bail!(
                "after the restart only {} of {tenants} tenants were reconciled in 10 min",
                keys.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let pid = env.manager_pid().context("no manager")?;
    let usage = ProcessUsage::of(pid)?;
    let sessions = env.manager_metric(SESSIONS).await;
    let shares = cpu_mark.until(&CpuMark::of(env)?);
    // A write a pass of the restart makes reaches the audit log within this margin.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let tenant_api = minus(env.tenant_apis.counts.snapshot(), tenant_api_before);
    let events = env.manager_requests()?.split_off(mark);
    let requests = requests_by_verb_and_resource(&events);
    Ok(Restart {
        reverified,
        writes: write_lines(&events),
        requests,
        cpu: usage.cpu,
        sessions,
        shares,
        peak_rss: usage.peak_rss,
        tenant_api,
    })
}

/// What [`shard_bench`] does: `tenants` tenants of `replicas` pods on `nodes` fake Nodes,
/// split by `cluster.x-k8s.io/watch-filter` label across `shards` values, each value served by
/// two manager replicas (`--leader-elect`, one Lease per value).
#[derive(Debug, Clone, Copy)]
pub struct ShardOptions {
    /// Tenants created at once; tenant `i` gets the label `shard-<i mod shards>`.
    pub tenants: usize,
    /// `spec.replicas` of each.
    pub replicas: i32,
    /// Fake Nodes.
    pub nodes: usize,
    /// Label values (at least 2).
    pub shards: usize,
}

/// One manager process of [`shard_bench`].
struct Replica {
    shard: usize,
    process: kamaji_testenv::Supervised,
    /// `manager-<pid>`: its leader-election identity and in its `User-Agent`.
    identity: String,
}

/// The figures of one [`shard_bench`] run. Requests are the managers' (one audit user, told
/// apart by `User-Agent`), from the management API server's audit log.
#[derive(Debug, Clone)]
pub struct ShardFigures {
    /// The options of the run.
    pub options: ShardOptions,
    /// From the first creation until every tenant read provisioned.
    pub all_provisioned: Duration,
    /// Per shard: the leader's requests until then, and its CPU, as (requests, writes, CPU).
    pub per_shard: Vec<(usize, usize, Duration)>,
    /// Requests the standby replicas made meanwhile other than to their Leases.
    pub standby_requests: usize,
    /// Tenants (namespaces) whose objects were requested by more than one manager replica,
    /// or by one not leading their shard: must be empty.
    pub shared: Vec<String>,
    /// From SIGKILL of shard 0's leader until its standby led.
    pub takeover: Duration,
    /// From SIGKILL of shard 0's leader until its standby had reconciled every shard-0 tenant.
    pub reverified: Duration,
    /// Tenants of shard 0 that the new leader reconciled.
    pub reverified_tenants: usize,
    /// The new leader's writes other than Leases until then plus 5 s (must be none).
    pub takeover_writes: Vec<String>,
    /// Tenants of other shards the new leader requested objects of (must be none).
    pub takeover_foreign: Vec<String>,
}

impl std::fmt::Display for ShardFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "sharded: {} tenants x {} replicas on {} kwok Nodes, {} watch-filter values x 2 manager replicas (leader election per value)",
            o.tenants, o.replicas, o.nodes, o.shards
        )?;
        writeln!(
            f,
            "all provisioned after {:.1} s",
            self.all_provisioned.as_secs_f64()
        )?;
        for (shard, (requests, writes, cpu)) in self.per_shard.iter().enumerate() {
            writeln!(
                f,
                "  shard-{shard} leader: {requests} requests, {writes} writes, CPU {:.2} s",
                cpu.as_secs_f64()
            )?;
        }
        writeln!(
            f,
            "standby replicas' requests other than their Leases: {}",
            self.standby_requests
        )?;
        writeln!(
            f,
            "tenants requested by more than one replica or by another shard's: {} {}",
            self.shared.len(),
            self.shared.join(" ")
        )?;
        writeln!(
            f,
            "shard-0 leader killed: standby led after {:.1} s, had reconciled all {} of its tenants after {:.1} s; writes without Leases: {}; other shards' tenants touched: {}",
            self.takeover.as_secs_f64(),
            self.reverified_tenants,
            self.reverified.as_secs_f64(),
            self.takeover_writes.len(),
            self.takeover_foreign.len()
        )?;
        for w in &self.takeover_writes {
            writeln!(f, "  {w}")?;
        }
        Ok(())
    }
}

/// The tenant namespace (`sim-<i>`) a request of `e` is about, if any.
fn tenant_of(e: &AuditEvent) -> Option<&str> {
    e.object_ref
        .as_ref()
        .and_then(|o| o.namespace.as_deref())
        .filter(|ns| ns.starts_with("sim-"))
}

/// Runs the sharded benchmark on a fresh [`SimEnv`]: the environment's own manager is
/// stopped and `2 × shards` replicas start, two per `--watch-filter=shard-<k>` value with
/// `--leader-elect`; the tenants (as [`bench`] makes them, labelled `shard-<i mod shards>`)
/// are created at once and waited for; the audit log must show every tenant's objects
/// requested by exactly one replica, the leader of its shard; then shard 0's leader is killed
/// (SIGKILL) and its standby must take over and reconcile every shard-0 tenant, with no write
/// and without touching another shard's tenants.
///
/// # Errors
/// When the environment does not start, a tenant is not provisioned within 30 minutes, the
/// audit log has no request of a leader, or the takeover does not complete in 5 minutes.
#[allow(clippy::too_many_lines)]
pub async fn shard_bench(options: ShardOptions) -> Result<ShardFigures> {
    use k8s_openapi::api::coordination::v1::Lease;
    let ShardOptions {
        tenants,
        replicas,
        nodes,
        shards,
    } = options;
    let mut env = SimEnv::start(nodes).await?;
    env.kill_manager();
    let client = env.client();
    let lease_ns = env.manager.identity.namespace.clone();
    let mut managers = Vec::new();
    for shard in 0..shards {
        for _ in 0..2 {
            let flags = [
                "--leader-elect".to_owned(),
                format!("--leader-election-namespace={lease_ns}"),
                format!("--watch-filter=shard-{shard}"),
            ];
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let process =
                env.manager
                    .spawn(env.cluster.dir(), kamaji_testenv::free_port()?, &flags)?;
            let identity = format!("manager-{}", process.pid());
            managers.push(Replica {
                shard,
                process,
                identity,
            });
        }
    }
    let names: Vec<String> = (0..tenants).map(|i| format!("sim-{i}")).collect();
    create_namespaces(&env.cluster, &names).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &lease_ns);
    let leader_of = async |shard: usize| -> Result<Option<String>> {
        Ok(leases
            .get_opt(&kamaji_reconciler::leader::lease_name(Some(&format!(
                "shard-{shard}"
            ))))
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity))
    };
    // Every shard has its leader before the tenants come.
    let deadline = Instant::now() + Duration::from_mins(2);
    for shard in 0..shards {
        while leader_of(shard).await?.is_none() {
            if Instant::now() > deadline {
                bail!("shard-{shard} elected no leader in 2 min");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let mut leaders = Vec::new();
    for shard in 0..shards {
        let holder = leader_of(shard).await?.unwrap_or_default();
        let index = managers
            .iter()
            .position(|m| m.identity == holder && m.shard == shard)
            .with_context(|| format!("shard-{shard}'s Lease is held by {holder}, no replica"))?;
        leaders.push(index);
    }
    let cpu_before: Vec<Duration> = leaders
        .iter()
        .map(|&i| ProcessUsage::of(managers[i].process.pid()).map(|u| u.cpu))
        .collect::<Result<_>>()?;
    let mark = env.manager_requests()?.len();
    let start = Instant::now();
    let seen = Provisioned::watch(&client, start);
    create_tenants(&env.cluster, &names, replicas, |i| {
        Some(format!("shard-{}", i % shards))
    })
    .await?;
    let tail = || {
        managers
            .iter()
            .map(|m| m.process.log_tail(10))
            .collect::<Vec<_>>()
            .join("\n")
    };
    seen.wait(tenants, tail).await?;
    let all_provisioned = start.elapsed();
    drop(seen);
    check_made(&client, &names).await?;
    let events = env.manager_requests()?.split_off(mark);
    // Which replica made a request: its identity in the User-Agent.
    // `(<identity>; watch-filter=shard-<k>)`: the identity whole, `manager-12` is not `manager-123`.
    let agents: Vec<String> = managers
        .iter()
        .map(|m| format!("({};", m.identity))
        .collect();
    let replica_of = |e: &AuditEvent| agents.iter().position(|a| e.user_agent.contains(a));
    let mut per_shard = Vec::new();
    for (shard, &leader) in leaders.iter().enumerate() {
        let mine: Vec<&AuditEvent> = events
            .iter()
            .filter(|e| replica_of(e) == Some(leader))
            .collect();
        let cpu = ProcessUsage::of(managers[leader].process.pid())?.cpu;
        per_shard.push((
            mine.len(),
            mine.iter().filter(|e| e.is_write() && !e.refused()).count(),
            cpu.saturating_sub(cpu_before[shard]),
        ));
    }
    if per_shard.iter().any(|(requests, _, _)| *requests == 0) {
        bail!("a leader made no request the audit log names it by (User-Agent)");
    }
    let standby_requests = events
        .iter()
        .filter(|e| replica_of(e).is_some_and(|r| !leaders.contains(&r)))
        .filter(|e| e.object_ref.as_ref().is_none_or(|o| o.resource != "leases"))
        .count();
    let mut by_tenant: BTreeMap<&str, HashSet<Option<usize>>> = BTreeMap::new();
    for e in &events {
        if let Some(ns) = tenant_of(e) {
            by_tenant.entry(ns).or_default().insert(replica_of(e));
        }
    }
    let shared: Vec<String> = names
        .iter()
        .enumerate()
        .filter(|(i, ns)| {
            let expected: HashSet<Option<usize>> = [Some(leaders[i % shards])].into();
            by_tenant.get(ns.as_str()) != Some(&expected)
        })
        .map(|(_, ns)| ns.clone())
        .collect();

    // Failover: shard 0's leader dies; the other replica of shard 0 must take over.
    let victim = leaders[0];
    let standby = (0..managers.len())
        .find(|&i| managers[i].shard == 0 && i != victim)
        .context("no standby of shard 0")?;
    let takeover_mark = env.manager_requests()?.len();
    let killed = Instant::now();
    managers[victim].process.kill();
    let deadline = killed + Duration::from_mins(5);
    let standby_identity = managers[standby].identity.clone();
    let takeover = loop {
        if leader_of(0).await?.as_deref() == Some(standby_identity.as_str()) {
            break killed.elapsed();
        }
        if Instant::now() > deadline {
            bail!("shard-0's standby did not take the Lease in 5 min");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let shard0 = names.iter().step_by(shards).count();
    let (reverified, reverified_tenants) = loop {
        let log = std::fs::read_to_string(managers[standby].process.log_path())?;
        let n = reconciled(&log).len();
        if n >= shard0 {
            break (killed.elapsed(), n);
        }
        if Instant::now() > deadline {
            bail!("shard-0's new leader reconciled {n} of its {shard0} tenants in 5 min");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // A write a pass of the takeover makes reaches the audit log within this margin.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<AuditEvent> = env
        .manager_requests()?
        .split_off(takeover_mark)
        .into_iter()
        .filter(|e| replica_of(e) == Some(standby))
        .collect();
    let takeover_writes = write_lines(&after);
    // Each foreign tenant once, however many requests touched it.
    let takeover_foreign: Vec<String> = after
        .iter()
        .filter_map(tenant_of)
        .filter(|ns| {
            ns.strip_prefix("sim-")
                .and_then(|i| i.parse::<usize>().ok())
                .is_some_and(|i| i % shards != 0)
        })
        .collect::<std::collections::BTreeSet<&str>>()
        .into_iter()
        .map(str::to_owned)
        .collect();
    Ok(ShardFigures {
        options,
        all_provisioned,
        per_shard,
        standby_requests,
        shared,
        takeover,
        reverified,
        reverified_tenants,
        takeover_writes,
        takeover_foreign,
    })
}
