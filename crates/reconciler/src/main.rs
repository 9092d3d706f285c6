//! `manager`: the kamaji-rs controller process (clusterctl contract: container `manager`,
//! `--namespace` to watch one namespace, `--watch-filter` to split tenants by label, leader
//! election, metrics and health probes).

/// jemalloc instead of glibc's allocator: at 1,000 simulated tenants the manager spent about
/// a fifth of its CPU in glibc's `malloc` and `free`; with jemalloc it used 15 % less CPU per
/// tenant at the same peak RSS (`make bench-sim`, BENCHMARKS.md).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kamaji_bootstrap::pki::{KeyAlgorithm, LeafPolicy};
use kamaji_reconciler::context::{Config, Context};
use kamaji_reconciler::controller::{self, Scope};
use kamaji_reconciler::{leader, server};
use kube::{Api, Client};
use tracing::{error, info, warn};

/// Command-line flags; each also reads the environment variable of the same name.
#[derive(Debug, Parser)]
#[command(
    name = "manager",
    version,
    about = "kamaji-rs: a Cluster API control-plane provider running tenant control planes as pods"
)]
struct Args {
    /// Watch only this namespace (empty or `""`: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "", value_parser = unquoted)]
    namespace: String,
    /// Reconcile only Clusters and control planes labelled
    /// `cluster.x-k8s.io/watch-filter=<value>` (Cluster API's convention; empty: all), so that
    /// several managers split the tenants; each value elects its own leader. Empty or `""`: all.
    #[arg(long, env = "WATCH_FILTER", default_value = "", value_parser = unquoted)]
    watch_filter: String,
    /// Use a Lease so that only one replica reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Address of the Prometheus `/metrics` endpoint.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    health_probe_bind_address: SocketAddr,
    /// `DataStore` used by control planes without `spec.dataStoreName`.
    #[arg(long, env = "DEFAULT_DATASTORE", default_value = "default")]
    default_datastore: String,
    /// Algorithm of new keys: `ECDSA-P256`, `RSA-2048`, `RSA-3072` or `RSA-4096`.
    #[arg(long, env = "KEY_ALGORITHM", default_value = "ECDSA-P256")]
    key_algorithm: String,
    /// DNS domain of the management cluster (for the Service names in serving certificates).
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,
    /// The kine image run beside kube-apiserver for control planes on a `PostgreSQL` or
    /// `MySQL` `DataStore` (its program at `/bin/kine`).
    #[arg(long, env = "KINE_IMAGE", default_value = kamaji_reconciler::context::DEFAULT_KINE_IMAGE)]
    kine_image: String,
    /// How many control planes are reconciled at once (at least 1).
    #[arg(long, env = "KAMAJICONTROLPLANE_CONCURRENCY",
        default_value_t = kamaji_reconciler::context::DEFAULT_CONCURRENCY,
        value_parser = clap::value_parser!(u16).range(1..))]
    kamajicontrolplane_concurrency: u16,
    /// Milliseconds a control plane's pass waits after the last event that asked for it, so
    /// events in quick succession wake one pass; 0 runs a pass at each event.
    #[arg(long, env = "RECONCILE_DEBOUNCE_MILLISECONDS",
        default_value_t = kamaji_reconciler::context::DEFAULT_DEBOUNCE_MILLISECONDS)]
    reconcile_debounce_milliseconds: u64,
    /// Seconds between drift checks of healthy control planes.
    #[arg(long, env = "RESYNC_SECONDS", default_value_t = 600)]
    resync_seconds: u64,
    /// Seconds an available control plane's status keeps saying so through a passing failure
    /// (a lost `/readyz` through the endpoint, a failed tenant or management API call); a
    /// failure that lasts longer is reported.
    #[arg(long, env = "TRANSIENT_FAILURE_GRACE_SECONDS", default_value_t = 30)]
    transient_failure_grace_seconds: u64,
    /// How long new leaf certificates (serving, client, kubeconfigs, the datastore client)
    /// are valid, in seconds; default one year, as kubeadm and Cluster API.
    #[arg(long, env = "LEAF_CERTIFICATE_VALIDITY_SECONDS", default_value_t = 365 * 24 * 3600)]
    leaf_certificate_validity_seconds: u64,
    /// A leaf with less than this many seconds of validity left is reissued (the control
    /// plane rolls onto it); the manager looks again at the earliest such instant. Must be
    /// shorter than the validity. Default 30 days.
    #[arg(long, env = "CERTIFICATE_RENEWAL_WINDOW_SECONDS", default_value_t = 30 * 24 * 3600)]
    certificate_renewal_window_seconds: u64,
    /// After a service-account key rotation's new key signs, how many seconds the old public
    /// key keeps verifying tokens it signed. Default 25 h: kubelets replace a pod's projected
    /// token after 80 % of its life or 24 h at the latest.
    #[arg(long, env = "SERVICE_ACCOUNT_KEY_OVERLAP_SECONDS", default_value_t = 25 * 3600)]
    service_account_key_overlap_seconds: u64,
    /// Log format: `text` or `json`.
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    log_format: String,
    /// Worker threads of the async runtime, which run the watches, the requests and the
    /// passes' I/O beside the main thread, which runs the controller (at least 1). One is
    /// enough for 1,000 tenants (about 20 ms of CPU per tenant provisioned): more add wakeups
    /// between threads, a few percent of the CPU at scale (BENCHMARKS.md). RSA key
    /// generation leaves its worker either way, so it holds up no other work.
    #[arg(long, env = "WORKER_THREADS", default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: u16,
}

/// A flag value with one pair of surrounding double quotes removed: `""` is the empty string.
/// clusterctl refuses a variable whose default is empty (`${VAR:=}` counts as unset), so the
/// shipped manifest writes an optional value as `${VAR:=""}`, which clusterctl substitutes
/// verbatim: `--watch-filter=""`.
#[allow(clippy::unnecessary_wraps)] // clap's value_parser signature
fn unquoted(value: &str) -> Result<String, std::convert::Infallible> {
    Ok(value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
        .to_owned())
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Waits until kamaji-rs's and Cluster API's CRDs exist, saying clearly which is missing.
async fn wait_for_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let needed = [
        "kamajicontrolplanes.controlplane.cluster.x-k8s.io",
        "datastores.kamaji.clastix.io",
        "clusters.cluster.x-k8s.io",
    ];
    loop {
        let mut missing = Vec::new();
        for name in needed {
            match crds.get_opt(name).await {
                Ok(Some(_)) => {}
                Ok(None) => missing.push(name),
                Err(e) => {
                    warn!("cannot read CRD {name}: {e}");
                    missing.push(name);
                }
            }
        }
        if missing.is_empty() {
            return;
        }
        error!(missing = ?missing, "required CRDs are not installed (install Cluster API and kamaji-rs's config/crd); waiting");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.worker_threads))
        .enable_all()
        .build()
        .context("start the async runtime")?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    init_logging(&args.log_format);
    // This replica's name: its leader-election identity and, in its User-Agent, what tells
    // replicas and shards apart in the management cluster's audit log.
    let identity =
        std::env::var("POD_NAME").unwrap_or_else(|_| format!("manager-{}", std::process::id()));
    let agent = user_agent(&identity, &args.watch_filter);
    // The flags first: a wrong one fails before the management cluster is reached.
    let config = config(&args, agent.clone())?;
    let client = management_client(&agent).await?;
    let ctx = Arc::new(Context::new(client.clone(), config));
    let ready = Arc::new(AtomicBool::new(false));
    let metrics = tokio::spawn(server::metrics(args.metrics_bind_address, ctx.clone()));
    let health = tokio::spawn(server::health(
        args.health_probe_bind_address,
        ready.clone(),
    ));

    wait_for_crds(&client).await;

    let lost = leadership(&args, &client, &identity).await?;
    ready.store(true, Ordering::Relaxed);
    let scope = Scope {
        namespace: Some(args.namespace.clone()).filter(|n| !n.is_empty()),
        watch_filter: Some(args.watch_filter.clone()).filter(|f| !f.is_empty()),
    };
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => info!("interrupted"),
            () = sigterm() => info!("terminated"),
            () = lost => error!("lost leadership"),
        }
    };
    controller::run(ctx, scope, shutdown).await;
    metrics.abort();
    health.abort();
    Ok(())
}

/// The client of the management cluster (kubeconfig or in-cluster), with `agent` as its
/// `User-Agent`.
async fn management_client(agent: &str) -> Result<Client> {
    let mut kube_config = kube::Config::infer()
        .await
        .context("connect to the management cluster")?;
    kube_config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(agent)
            .context("POD_NAME or --watch-filter is not a valid User-Agent")?,
    ));
    Client::try_from(kube_config).context("connect to the management cluster")
}

/// The manager's settings from its flags; `agent` is its `User-Agent`.
fn config(args: &Args, agent: String) -> Result<Config> {
    let key_algorithm = KeyAlgorithm::parse(&args.key_algorithm)
        .map_err(|e| anyhow::anyhow!("--key-algorithm: {}", e.reason))?;
    let leaf_policy = LeafPolicy::new(
        Duration::from_secs(args.leaf_certificate_validity_seconds),
        Duration::from_secs(args.certificate_renewal_window_seconds),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Config {
        default_datastore: args.default_datastore.clone(),
        key_algorithm,
        management_domain: args.cluster_domain.clone(),
        resync: Duration::from_secs(args.resync_seconds),
        concurrency: args.kamajicontrolplane_concurrency,
        debounce: Duration::from_millis(args.reconcile_debounce_milliseconds),
        transient_grace: Duration::from_secs(args.transient_failure_grace_seconds),
        leaf_policy,
        service_account_overlap: Duration::from_secs(args.service_account_key_overlap_seconds),
        kine_image: args.kine_image.clone(),
        user_agent: agent,
        ..Config::default()
    })
}

/// With `--leader-elect`, leadership acquired (this waits for it): the future that resolves
/// when it is lost; without, one that never resolves.
async fn leadership(
    args: &Args,
    client: &Client,
    identity: &str,
) -> Result<impl std::future::Future<Output = ()> + use<>> {
    let lost = if args.leader_elect {
        let ns = args
            .leader_election_namespace
            .clone()
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
            })
            .unwrap_or_else(|| "default".into());
        let lease = leader::lease_name(Some(args.watch_filter.as_str()).filter(|f| !f.is_empty()));
        Some(leader::acquire(client.clone(), &ns, &lease, identity.to_owned()).await?)
    } else {
        None
    };
    Ok(async move {
        match lost {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending::<()>().await,
        }
    })
}

/// The manager's `User-Agent`: `kamaji-rs-manager/<version> (<identity>[; watch-filter=<value>])`,
/// where the identity is `POD_NAME` (else `manager-<pid>`), after the `name/version (comment)`
/// form of RFC 9110 §10.1.5 that Kubernetes clients use.
fn user_agent(identity: &str, watch_filter: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    if watch_filter.is_empty() {
        format!("kamaji-rs-manager/{version} ({identity})")
    } else {
        format!("kamaji-rs-manager/{version} ({identity}; watch-filter={watch_filter})")
    }
}

async fn sigterm() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    /// The flags table of `docs/configuration.md`: each row whose first cell is a flag, as
    /// (flag, environment variable cell, default cell).
    fn documented_flags(page: &str) -> Vec<(String, String, String)> {
        page.lines()
            .filter(|line| line.starts_with("| `--"))
            .map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let cell = |i: usize| cells.get(i).copied().unwrap_or_default().to_owned();
                (cell(1).trim_matches('`').to_owned(), cell(2), cell(3))
            })
            .collect()
    }

    /// Every flag of `manager --help` has a row in `docs/configuration.md` naming it as
    /// `--flag`, with its environment variable and its default, and every row names a flag the
    /// manager has: the page cannot fall behind the flags.
    #[test]
    fn every_manager_flag_is_documented_in_docs_configuration() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let page = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        let rows = documented_flags(&page);
        let command = Args::command();
        let mut problems = Vec::new();
        let mut flags = Vec::new();
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let flag = format!("--{long}");
            flags.push(flag.clone());
            let Some((_, env_cell, default_cell)) = rows.iter().find(|(f, _, _)| *f == flag) else {
                problems.push(format!("{flag} has no row in the flags table"));
                continue;
            };
            if let Some(env) = arg.get_env() {
                let env = format!("`{}`", env.to_string_lossy());
                if !env_cell.contains(&env) {
                    problems.push(format!(
                        "{flag}: its environment variable {env} is not in its row"
                    ));
                }
            }
            for default in arg.get_default_values() {
                let default = default.to_string_lossy();
                let shown = if default.is_empty() {
                    "`\"\"`".to_owned()
                } else {
                    format!("`{default}`")
                };
                if !default_cell.contains(&shown) {
                    problems.push(format!("{flag}: its default {shown} is not in its row"));
                }
            }
        }
        for (flag, _, _) in &rows {
            if !flags.contains(flag) {
                problems.push(format!("{flag} is documented but manager has no such flag"));
            }
        }
        assert!(
            problems.is_empty(),
            "docs/configuration.md is out of date:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn an_optional_flag_left_at_clusterctls_empty_default_means_none() {
        let args = Args::parse_from(["manager", "--watch-filter=\"\"", "--namespace=\"\""]);
        assert_eq!(
            (args.watch_filter.as_str(), args.namespace.as_str()),
            ("", "")
        );
        let args = Args::parse_from(["manager", "--watch-filter=shard-a", "--namespace=ns"]);
        assert_eq!(
            (args.watch_filter.as_str(), args.namespace.as_str()),
            ("shard-a", "ns")
        );
    }

    #[test]
    fn the_transient_failure_grace_defaults_to_30_seconds_and_is_set_by_its_flag() {
        let args = Args::parse_from(["manager"]);
        assert_eq!(args.transient_failure_grace_seconds, 30);
        let args = Args::parse_from(["manager", "--transient-failure-grace-seconds=5"]);
        assert_eq!(args.transient_failure_grace_seconds, 5);
        assert!(Args::try_parse_from(["manager", "--transient-failure-grace-seconds=-1"]).is_err());
    }

    #[test]
    fn the_runtime_has_one_worker_thread_unless_its_flag_says_more() {
        assert_eq!(Args::parse_from(["manager"]).worker_threads, 1);
        let args = Args::parse_from(["manager", "--worker-threads=4"]);
        assert_eq!(args.worker_threads, 4);
        assert!(Args::try_parse_from(["manager", "--worker-threads=0"]).is_err());
    }

    #[test]
    fn the_reconcile_debounce_defaults_to_500_milliseconds_and_is_set_by_its_flag() {
        let args = Args::parse_from(["manager"]);
        assert_eq!(args.reconcile_debounce_milliseconds, 500);
        let args = Args::parse_from(["manager", "--reconcile-debounce-milliseconds=0"]);
        assert_eq!(args.reconcile_debounce_milliseconds, 0);
        assert!(Args::try_parse_from(["manager", "--reconcile-debounce-milliseconds=-1"]).is_err());
    }
}
