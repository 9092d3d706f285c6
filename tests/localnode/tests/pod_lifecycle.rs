//! Probes, restarts and crash loops of real processes; nothing is left afterwards.
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

use std::time::{Duration, Instant};

use common::{assert_no_leftovers, cluster_and_node, container_ready, running, wait_pod};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};

const ETCD_IMAGE: &str = "registry.k8s.io/etcd:3.6.16-0";

fn etcd_pod(name: &str, extra_args: &[&str], ready_path: &str) -> Pod {
    let mut args = vec![
        "--name=$(POD_NAME)".to_owned(),
        "--data-dir=/var/lib/etcd/data".to_owned(),
        "--listen-client-urls=http://0.0.0.0:2379".to_owned(),
        "--advertise-client-urls=http://$(POD_IP):2379".to_owned(),
        "--listen-peer-urls=http://127.0.0.1:2380".to_owned(),
        "--initial-advertise-peer-urls=http://127.0.0.1:2380".to_owned(),
        "--initial-cluster=$(POD_NAME)=http://127.0.0.1:2380".to_owned(),
        "--listen-metrics-urls=".to_owned(),
        "--unsafe-no-fsync=true".to_owned(),
        "--log-level=warn".to_owned(),
    ];
    args.extend(extra_args.iter().map(|s| (*s).to_owned()));
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "etcd", "image": ETCD_IMAGE,
                "command": ["etcd"], "args": args,
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "ports": [{"name": "client", "containerPort": 2379}],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                "readinessProbe": {"httpGet": {"path": ready_path, "port": "client"}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 2379}, "periodSeconds": 2, "failureThreshold": 3},
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_readiness_kill_restart_crash_loop_and_bad_image() {
    let (cluster, node) = cluster_and_node().await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let pp = PostParams::default();
    pods.create(&pp, &etcd_pod("never-ready", &[], "/no-such-path"))
        .await
        .unwrap();
    pods.create(&pp, &etcd_pod("crasher", &["--no-such-flag"], "/health"))
        .await
        .unwrap();
    let mut bad = etcd_pod("bad-image", &[], "/health");
    bad.spec.as_mut().unwrap().containers[0].image = Some("registry.k8s.io/etcd:3.4.0-0".into());
    pods.create(&pp, &bad).await.unwrap();
    // Ready only once a mounted ConfigMap says so (an exec probe reads the mounted file).
    let gate: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gate", "namespace": "default"},
        "data": {"ready": "no"},
    }))
    .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    config_maps.create(&pp, &gate).await.unwrap();
    let mut gated = etcd_pod("gated", &[], "/health");
    let c = &mut gated.spec.as_mut().unwrap().containers[0];
    c.readiness_probe = Some(
        serde_json::from_value(serde_json::json!({
            "exec": {"command": ["/bin/sh", "-c", "grep -qx yes /etc/localnode-test/gate/ready"]},
            "periodSeconds": 1,
        }))
        .unwrap(),
    );
    c.volume_mounts.as_mut().unwrap().push(
        serde_json::from_value(serde_json::json!({
            "name": "gate", "mountPath": "/etc/localnode-test/gate",
        }))
        .unwrap(),
    );
    gated.spec.as_mut().unwrap().volumes.as_mut().unwrap().push(
        serde_json::from_value(serde_json::json!({
            "name": "gate", "configMap": {"name": "gate", "defaultMode": 0o640},
        }))
        .unwrap(),
    );
    pods.create(&pp, &gated).await.unwrap();

    // Running (the process is up and the liveness probe passes) but never Ready.
    let p = wait_pod(&pods, "never-ready", 60, "Running", running).await;
    let ip = p.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(ip.starts_with("10.213."), "pod IP {ip}");
    let observe_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < observe_until {
        let p = pods.get("never-ready").await.unwrap();
        assert!(
            !container_ready(&p),
            "a pod whose readiness probe fails became Ready"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The process really runs in the pod's network namespace at the pod IP.
    let pid = node
        .container_pid("default", "never-ready", "etcd")
        .expect("a pid");
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        cmdline.contains(&format!("--advertise-client-urls=http://{ip}:2379")),
        "{cmdline}"
    );

    // Killing the process is seen as a restart.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let p = wait_pod(&pods, "never-ready", 30, "restarted", |p| {
        let cs = &p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        cs.restart_count >= 1 && cs.state.as_ref().is_some_and(|s| s.running.is_some())
    })
    .await;
    let cs = &p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 137, "SIGKILL is exit code 137");
    assert!(!container_ready(&p));
    assert_ne!(
        node.container_pid("default", "never-ready", "etcd"),
        Some(pid)
    );

    // A process that exits is restarted with back-off and reported as CrashLoopBackOff.
    let p = wait_pod(&pods, "crasher", 40, "in CrashLoopBackOff", |p| {
        let cs = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first());
        cs.is_some_and(|cs| {
            cs.restart_count >= 1
                && cs
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    == Some("CrashLoopBackOff")
        })
    })
    .await;
    let cs = &p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 2, "etcd exits 2 on a bad flag: {last:?}");
    assert!(
        last.message.as_deref().unwrap_or_default().contains("etcd"),
        "the log tail is the message: {last:?}"
    );

    // An image of another version is not pulled.
    let p = wait_pod(&pods, "bad-image", 20, "ErrImagePull", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .is_some_and(|cs| {
                cs.state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    == Some("ErrImagePull")
            })
    })
    .await;
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));

    // The gated pod runs but is not Ready until the ConfigMap changes; the update reaches
    // the mounted file. The host's /etc is untouched (the mount point is private).
    wait_pod(&pods, "gated", 30, "Running", running).await;
    assert!(!container_ready(&pods.get("gated").await.unwrap()));
    assert!(
        !std::path::Path::new("/etc/localnode-test").exists(),
        "the host's /etc was modified"
    );
    config_maps
        .patch(
            "gate",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"ready": "yes"}})),
        )
        .await
        .unwrap();
    wait_pod(
        &pods,
        "gated",
        30,
        "Ready after the ConfigMap update",
        container_ready,
    )
    .await;

    // Deletion stops the process and removes the pod object.
    let pid = node
        .container_pid("default", "never-ready", "etcd")
        .unwrap();
    let uid = pods.get("never-ready").await.unwrap().metadata.uid.unwrap();
    pods.delete("never-ready", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        kube::runtime::wait::await_condition(
            pods.clone(),
            "never-ready",
            kube::runtime::wait::conditions::is_deleted(&uid),
        ),
    )
    .await
    .expect("the pod object was not removed within 20 s")
    .unwrap();
    assert!(
        pods.get_opt("never-ready").await.unwrap().is_none(),
        "the pod object was not removed"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process {pid} survived pod deletion"
    );

    let tag = node.name_tag().to_owned();
    let pids = node.started_pids();
    let cidr = cluster.service_cidr().to_owned();
    node.shutdown().await;
    assert_no_leftovers(&tag, &pids, &cidr);
}
