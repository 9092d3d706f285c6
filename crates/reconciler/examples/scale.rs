//! `make bench`: provisions 20 tenants at once on the local management cluster and prints the
//! median and maximum seconds from KamajiControlPlane creation to `Available=True`, and the
//! manager's peak resident memory (VmHWM). A benchmark, not a test: it asserts nothing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::doc_markdown,
    clippy::large_futures,
    clippy::cast_precision_loss
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use anyhow::Result;
use kamaji_api::KamajiControlPlane;
use kube::Api;

const TENANTS: usize = 20;

#[tokio::main]
async fn main() -> Result<()> {
    let env = support::Env::start().await?;
    for i in 0..TENANTS {
        let ns = format!("scale-{i}");
        env.namespace(&ns).await?;
    }
    for i in 0..TENANTS {
        env.apply_yaml(&support::f0(&format!("scale-{i}"), "demo", 2))
            .await?;
    }
    let mut seconds = Vec::with_capacity(TENANTS);
    for i in 0..TENANTS {
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
    let median = f64::midpoint(seconds[TENANTS / 2 - 1], seconds[TENANTS / 2]);
    let max = seconds[TENANTS - 1];
    let hwm = env
        .manager_pid()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let all: Vec<_> = Api::<KamajiControlPlane>::all(env.client())
        .list(&kube::api::ListParams::default())
        .await?
        .items;
    println!("tenants: {} (2 replicas each)", all.len());
    println!("creation -> Available: median {median:.1} s, max {max:.1} s");
    println!(
        "manager peak RSS: {}",
        hwm.trim_start_matches("VmHWM:").trim()
    );
    println!(
        "reconciles: {}",
        env.manager_metric("kamaji_reconcile_total").await
    );
    Ok(())
}
