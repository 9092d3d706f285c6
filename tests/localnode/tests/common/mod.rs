//! Shared helpers for the local node tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kamaji_localnode::{LocalNode, unique_service_cidr};
use kamaji_testenv::LocalCluster;
use kube::api::Api;

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kamaji_localnode=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// A management cluster with controllers and a local node agent with fast crash back-off.
pub async fn cluster_and_node() -> (LocalCluster, LocalNode) {
    init_tracing();
    let cluster = LocalCluster::builder()
        .controllers(true)
        .capi(false)
        .kamaji_crds(false)
        .service_cidr(&unique_service_cidr())
        .start()
        .await
        .unwrap();
    let node = LocalNode::builder()
        .crash_backoff(Duration::from_secs(1), Duration::from_secs(4))
        .start(&cluster)
        .await
        .unwrap();
    (cluster, node)
}

/// Waits until pod `name` satisfies `cond`, at most `secs` seconds.
pub async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    secs: u64,
    what: &str,
    cond: impl Fn(&Pod) -> bool + Send + 'static,
) -> Pod {
    let found = kamaji_testenv::wait::await_object(api, name, Duration::from_secs(secs), cond)
        .await
        .unwrap();
    if let Some(p) = found {
        return p;
    }
    let got = api.get_opt(name).await.unwrap();
    panic!(
        "pod {name}: not {what} within {secs} s; status: {}",
        serde_json::to_string_pretty(&got.and_then(|p| p.status)).unwrap()
    )
}

pub fn container_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Asserts that nothing the agent made is left on the host.
pub fn assert_no_leftovers(tag: &str, pids: &[u32], service_cidr: &str) {
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty(), "process {pid} is still there: {stat}");
    }
    let sh = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let netns = sh(&["ip", "netns", "list"]);
    assert!(!netns.contains(tag), "network namespaces left: {netns}");
    let links = sh(&["ip", "-o", "link", "show"]);
    assert!(!links.contains(tag), "links left: {links}");
    let local = sh(&["ip", "route", "show", "table", "local"]);
    let net = service_cidr.trim_end_matches("/24");
    assert!(!local.contains(net), "service route left: {local}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(tag), "mounts left: {mounts}");
    let run_netns = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert!(
        run_netns.iter().all(|n| !n.contains(tag)),
        "netns files left: {run_netns:?}"
    );
    let ledgers = std::fs::read_dir("/run/kamaji-localnode")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let me = format!("{}-", std::process::id());
    // Other agents of this process may still run; this agent's ledger is named by its tag's
    // instance number, which the caller's tag ends with.
    let instance = u32::from_str_radix(&tag[tag.len() - 2..], 16).unwrap();
    assert!(
        !ledgers.contains(&format!("{me}{instance}.json")),
        "ledger left: {ledgers:?}"
    );
}
