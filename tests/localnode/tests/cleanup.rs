//! A test that panics while pods run leaves no process, mount, network namespace, link,
//! route or ledger behind; a ledger left by a killed run is undone by the next agent.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    clippy::doc_markdown,
    clippy::many_single_char_names,
    clippy::similar_names,
    clippy::type_complexity
)]
#![cfg(real_programs_as_root)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{assert_no_leftovers, cluster_and_node, running, wait_pod};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

#[test]
fn a_panicking_test_leaves_nothing_behind() {
    // A ledger as a SIGKILLed agent leaves it: a network namespace with a process in it,
    // recorded under a pid that no longer exists.
    let stale_ns = format!("klstale{}", std::process::id() % 10_000);
    let sh = |args: &[&str]| {
        std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap()
    };
    assert!(sh(&["ip", "netns", "add", &stale_ns]).success());
    let sleeper = std::process::Command::new("ip")
        .args(["netns", "exec", &stale_ns, "sleep", "300"])
        .spawn()
        .unwrap();
    let dead_pid = 4_194_000 + std::process::id() % 100;
    std::fs::create_dir_all("/run/kamaji-localnode").unwrap();
    std::fs::write(
        format!("/run/kamaji-localnode/{dead_pid}-0.json"),
        format!("[{{\"Netns\":\"{stale_ns}\"}}]"),
    )
    .unwrap();

    let seen: Arc<Mutex<Option<(String, Vec<u32>, String)>>> = Arc::default();
    let record = Arc::clone(&seen);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async move {
            let (cluster, node) = cluster_and_node().await;
            let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "sched", "namespace": "default"},
                "spec": {"containers": [{
                    "name": "kube-scheduler",
                    "image": format!("registry.k8s.io/kube-scheduler:{}", kamaji_testenv::KUBERNETES_VERSION),
                    "command": ["kube-scheduler", "--kubeconfig=/no/such/file"],
                }, {
                    "name": "etcd", "image": "registry.k8s.io/etcd:3.6.16-0",
                    "command": ["etcd", "--data-dir=/var/lib/etcd/data", "--listen-metrics-urls="],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                }],
                "volumes": [{"name": "data", "emptyDir": {}}]},
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
            wait_pod(&pods, "sched", 60, "Running", running).await;
            // The agent undid the stale ledger when it started.
            let netns = String::from_utf8(std::process::Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap();
            assert!(!netns.contains("klstale"), "the stale namespace is still there: {netns}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            *record.lock().unwrap() =
                Some((node.name_tag().to_owned(), node.started_pids(), cluster.service_cidr().to_owned()));
            panic!("a test failing half-way");
        });
    }));
    let mut sleeper = sleeper;
    let _ = sleeper.wait();
    assert!(outcome.is_err(), "the inner test was meant to panic");
    let (tag, pids, cidr) = seen
        .lock()
        .unwrap()
        .clone()
        .expect("the inner test got as far as the panic");
    assert!(pids.len() >= 2, "both containers were started: {pids:?}");
    assert_no_leftovers(&tag, &pids, &cidr);
}
