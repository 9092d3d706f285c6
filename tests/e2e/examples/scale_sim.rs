//! `make bench-sim`: the provider's own cost at scale on the simulated environment
//! ([`kamaji_e2e::sim::bench`]: a real management cluster whose control-plane pods land on
//! kwok's fake Nodes). Knobs: `TENANTS` (default 100) tenants of `REPLICAS` (default 1) pods
//! created at once on `NODES` (default 10) Nodes, `IDLE_SECONDS` (default 300) watched idle.
//! Prints the provisioning times, the manager's CPU, requests by verb and resource and peak
//! RSS, its idle CPU and writes, and what a restart costs ([`kamaji_e2e::sim::Figures`]).
//!
//! Simulated pods run no process, so no tenant becomes `Available`; `make bench` measures
//! that with real control planes. Runs in a private network namespace (root), so the
//! manager's probes of the tenants' endpoints never leave the machine. Ctrl-C or SIGTERM stops
//! it and everything it started.

use std::time::Duration;

use anyhow::Result;
use kamaji_e2e::sim::{BenchOptions, bench};

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
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = bench(options) => { print!("{}", r?); Ok(()) }
        _ = tokio::signal::ctrl_c() => { println!("interrupted"); Ok(()) }
        _ = term.recv() => { println!("terminated"); Ok(()) }
    }
}
