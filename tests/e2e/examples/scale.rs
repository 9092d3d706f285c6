//! `make bench`: provisions `TENANTS` (default 20) tenants of `REPLICAS` (default 2) pods at
//! once on the local management cluster (`MACHINES`, default 1, management machines running
//! the control-plane containers) and prints the median and maximum seconds from
//! KamajiControlPlane creation to `Available=True`, and the manager's peak resident memory
//! (VmHWM). `DATASTORE=postgres` or `DATASTORE=mariadb` puts every tenant on a real PostgreSQL
//! 15 or MariaDB 10.11 (local processes with TLS, kine beside each API server) instead of the
//! shared etcd (`etcd`, the default). A benchmark, not a test: it asserts nothing. On 2 cores, 20 tenants of 2 replicas
//! (120 control-plane processes) overload the machine; `REPLICAS=1` fits. Ctrl-C or SIGTERM
//! stops it and removes every process and network namespace it started.

use std::time::Duration;

use anyhow::Result;
use kamaji_api::KamajiControlPlane;
use kube::Api;

fn main() -> Result<()> {
    kamaji_machine::run_in_private_network(bench)
}

async fn bench() -> Result<()> {
    let count = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (tenants, replicas) = (count("TENANTS", 20).max(2), count("REPLICAS", 2));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // Dropping the run on a signal drops its environment, which stops everything it started.
    tokio::select! {
        r = run(tenants, replicas) => r,
        _ = tokio::signal::ctrl_c() => { println!("interrupted"); Ok(()) }
        _ = term.recv() => { println!("terminated"); Ok(()) }
    }
}

async fn run(tenants: usize, replicas: usize) -> Result<()> {
    let machines = std::env::var("MACHINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let env = kamaji_e2e::Env::builder()
        .management_machines(machines)
        .start()
        .await?;
    let datastore = std::env::var("DATASTORE").unwrap_or_else(|_| "etcd".into());
    // Kept until the end: dropping them stops the servers.
    let servers = match datastore.as_str() {
        "etcd" => None,
        "postgres" | "mariadb" => {
            let servers = env.start_sql_servers().await?;
            let server = if datastore == "postgres" {
                &*servers.postgres
            } else {
                &*servers.mariadb
            };
            env.create_sql_datastore_for(&datastore, server, &servers.ca.cert_pem)
                .await?;
            Some(servers)
        }
        other => anyhow::bail!("DATASTORE={other}: expected etcd, postgres or mariadb"),
    };
    for i in 0..tenants {
        let ns = format!("scale-{i}");
        env.namespace(&ns).await?;
    }
    for i in 0..tenants {
        let mut f0 =
            kamaji_e2e::F0::new(&format!("scale-{i}"), "demo").replicas(i32::try_from(replicas)?);
        if servers.is_some() {
            f0 = f0.spec(&format!("  dataStoreName: {datastore}\n"));
        }
        env.apply_yaml(&f0.yaml()).await?;
    }
    let mut seconds = Vec::with_capacity(tenants);
    for i in 0..tenants {
        let ns = format!("scale-{i}");
        let k = env
            .wait_kcp_condition(&ns, "demo", "Available", "True", Duration::from_mins(15))
            .await?;
        let created = k
            .metadata
            .creation_timestamp
            .clone()
            .map(|t| t.0)
            .unwrap_or_default();
        let available = k
            .status
            .and_then(|s| s.conditions)
            .and_then(|c| c.into_iter().find(|c| c.type_ == "Available"))
            .map(|c| c.last_transition_time.0)
            .unwrap_or_default();
        seconds.push(available.duration_since(created).as_secs_f64());
    }
    seconds.sort_by(f64::total_cmp);
    let median = f64::midpoint(seconds[tenants / 2 - 1], seconds[tenants / 2]);
    let max = seconds[tenants - 1];
    let peak_rss = env
        .manager_pid()
        .and_then(|pid| kamaji_e2e::sim::ProcessUsage::of(pid).ok())
        .map_or(0, |u| u.peak_rss);
    let all: Vec<_> = Api::<KamajiControlPlane>::all(env.client())
        .list(&kube::api::ListParams::default())
        .await?
        .items;
    println!(
        "tenants: {} ({replicas} replicas each) on {datastore}",
        all.len()
    );
    println!("creation -> Available: median {median:.1} s, max {max:.1} s");
    println!("manager peak RSS: {} kB", peak_rss / 1024);
    println!(
        "reconciles: {}",
        env.manager_metric("kamaji_reconcile_total").await
    );
    Ok(())
}
