//! `make bench-sim`: the provider's own cost at scale on the simulated environment
//! ([`kamaji_e2e::sim::bench`]: a real management cluster whose control-plane pods land on
//! kwok's fake Nodes). Knobs: `TENANTS` (default 100) tenants of `REPLICAS` (default 1) pods
//! created at once on `NODES` (default 10) Nodes, `IDLE_SECONDS` (default 300) watched idle.
//! Prints the provisioning times, the manager's CPU, requests by verb and resource and peak
//! RSS, its idle CPU and writes, and what a restart costs ([`kamaji_e2e::sim::Figures`]);
//! `RESTARTS` (default 1) restarts, each measured on its own.
//!
//! `SHARDS` (default 1): with 2 or more, the tenants are split by `cluster.x-k8s.io/watch-filter`
//! label across that many values, each served by two manager replicas with leader election
//! ([`kamaji_e2e::sim::shard_bench`]): prints each leader's requests and CPU, the tenants
//! requested by more than one replica (none expected), and what happens when shard 0's leader
//! is killed (its standby takes over; time, writes). No idle or restart phase in that mode.
//!
//! Simulated pods run no process: the tenants' APIs are the tenant-API stand-in
//! ([`kamaji_e2e::tenant_api`]), so tenants become `Available` but nothing of a real tenant
//! API server is measured; `make bench` measures that with real control planes. Runs in a
//! private network namespace (root), which holds the stand-in's addresses, so the manager's
//! requests to the tenants' endpoints never leave the machine. Ctrl-C or SIGTERM stops
//! it and everything it started.

use std::time::Duration;

use anyhow::Result;
use kamaji_e2e::sim::{BenchOptions, ShardOptions, bench, shard_bench};

fn main() -> Result<()> {
    kamaji_machine::run_in_private_network(run)
}

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run() -> Result<()> {
    let options = BenchOptions {
        tenants: usize::try_from(knob("TENANTS", 100).max(2))?,
        replicas: i32::try_from(knob("REPLICAS", 1))?,
        nodes: usize::try_from(knob("NODES", 10).max(1))?,
        idle: Duration::from_secs(knob("IDLE_SECONDS", 300)),
        restarts: usize::try_from(knob("RESTARTS", 1).max(1))?,
    };
    let shards = usize::try_from(knob("SHARDS", 1))?;
    let run = async {
        if shards >= 2 {
            let sharded = ShardOptions {
                tenants: options.tenants,
                replicas: options.replicas,
                nodes: options.nodes,
                shards,
            };
            Ok::<_, anyhow::Error>(shard_bench(sharded).await?.to_string())
        } else {
            Ok(bench(options).await?.to_string())
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = run => { print!("{}", r?); Ok(()) }
        _ = tokio::signal::ctrl_c() => { println!("interrupted"); Ok(()) }
        _ = term.recv() => { println!("terminated"); Ok(()) }
    }
}
