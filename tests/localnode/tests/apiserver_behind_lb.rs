//! Two real kube-apiserver replicas of a Deployment run as pods on different nodes behind a
//! LoadBalancer Service; rolling them with surge is seamless, rolling them all at once is an
//! observable outage.
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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::{cluster_and_node, container_ready, running};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kamaji_testenv::wait::await_object;
use kamaji_testenv::{Etcd, KUBERNETES_VERSION};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

fn service() -> Service {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "tenant", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "tenant"},
                 "ports": [{"name": "https", "port": 6443, "targetPort": 6443}]},
    }))
    .unwrap()
}

fn deployment(etcd: SocketAddr) -> Deployment {
    let args = [
        format!("--etcd-servers=http://{etcd}"),
        "--etcd-prefix=/tenant".into(),
        "--secure-port=6443".into(),
        "--bind-address=0.0.0.0".into(),
        "--advertise-address=$(POD_IP)".into(),
        "--tls-cert-file=/etc/kubernetes/pki/tls.crt".into(),
        "--tls-private-key-file=/etc/kubernetes/pki/tls.key".into(),
        "--client-ca-file=/etc/kubernetes/pki/ca.crt".into(),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        "--service-account-key-file=/etc/kubernetes/pki/sa.pub".into(),
        "--service-account-signing-key-file=/etc/kubernetes/pki/sa.key".into(),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--authorization-mode=RBAC".into(),
        "--endpoint-reconciler-type=none".into(),
        "--profiling=false".into(),
    ];
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "tenant", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "tenant"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "tenant"}},
                "spec": {
                    "terminationGracePeriodSeconds": 10,
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "tenant"}},
                    }]}},
                    "containers": [{
                        "name": "kube-apiserver",
                        "image": format!("registry.k8s.io/kube-apiserver:{KUBERNETES_VERSION}"),
                        "command": ["kube-apiserver"],
                        "args": args,
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "https", "containerPort": 6443}],
                        "volumeMounts": [{"name": "pki", "mountPath": "/etc/kubernetes/pki", "readOnly": true}],
                        "readinessProbe": {
                            "httpGet": {"scheme": "HTTPS", "path": "/readyz", "port": "https"},
                            "periodSeconds": 1, "failureThreshold": 1,
                        },
                    }],
                    "volumes": [{"name": "pki", "secret": {"secretName": "tenant-pki", "defaultMode": 0o600}}],
                },
            },
        },
    }))
    .unwrap()
}

async fn wait_rolled_out(api: &Api<Deployment>, secs: u64) {
    let generation = api
        .get("tenant")
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let done = move |d: &Deployment| {
        d.status.as_ref().is_some_and(|s| {
            s.observed_generation.unwrap_or(0) >= generation
                && s.updated_replicas == Some(2)
                && s.ready_replicas == Some(2)
                && s.available_replicas == Some(2)
                && s.replicas == Some(2)
        })
    };
    let rolled = await_object(api, "tenant", Duration::from_secs(secs), done)
        .await
        .unwrap();
    if rolled.is_none() {
        let d = api.get("tenant").await.unwrap();
        panic!("deployment not rolled out in {secs} s: {:?}", d.status);
    }
}

/// Probes `GET /readyz` through the load balancer until stopped; counts refused
/// connections and other failures.
struct ProbeLoop {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU32>,
    refused: Arc<AtomicU32>,
    other: Arc<AtomicU32>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl ProbeLoop {
    fn start(lb: SocketAddr, ca: String) -> Self {
        let stop: Arc<AtomicBool> = Arc::default();
        let (ok, refused, other): (Arc<AtomicU32>, Arc<AtomicU32>, Arc<AtomicU32>) =
            Default::default();
        let (s, o, r, x) = (
            Arc::clone(&stop),
            Arc::clone(&ok),
            Arc::clone(&refused),
            Arc::clone(&other),
        );
        let task = tokio::spawn(async move {
            let mut errors = Vec::new();
            while !s.load(Ordering::SeqCst) {
                let got = tokio::time::timeout(
                    Duration::from_secs(3),
                    kamaji_localnode::https_get(lb, &ca, "/readyz"),
                )
                .await;
                match got {
                    Ok(Ok((200, _))) => {
                        o.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Err(e))
                        if e.chain().any(|c| {
                            c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                                io.kind() == std::io::ErrorKind::ConnectionRefused
                            })
                        }) =>
                    {
                        r.fetch_add(1, Ordering::SeqCst);
                    }
                    other => {
                        x.fetch_add(1, Ordering::SeqCst);
                        errors.push(format!("{other:?}"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            errors
        });
        Self {
            stop,
            ok,
            refused,
            other,
            task,
        }
    }

    async fn finish(self) -> (u32, u32, u32, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        let errors = self.task.await.unwrap();
        (
            self.ok.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.other.load(Ordering::SeqCst),
            errors,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_deployment_behind_load_balancer_rolls() {
    let (cluster, node) = cluster_and_node().await;
    let client = cluster.client();
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start(cluster.tools(), &dir.path().join("etcd"), None)
        .await
        .unwrap();
    let etcd_for_pods = node.expose_host_port(etcd.port()).unwrap();

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .create(&PostParams::default(), &service())
        .await
        .unwrap();
    let lb = node
        .load_balancer_address("default", "tenant", 6443, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(lb.ip().is_loopback(), "{lb}");

    let svc = services.get("tenant").await.unwrap();
    let cluster_ip: std::net::IpAddr = svc
        .spec
        .as_ref()
        .unwrap()
        .cluster_ip
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    let node_port = u16::try_from(
        svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0]
            .node_port
            .unwrap(),
    )
    .unwrap();
    let node_ip = std::net::IpAddr::V4(node.nodes()[0].ip);
    let ca = cluster.ca();
    let serving = ca
        .serving(
            "tenant-apiserver",
            &["localhost", "tenant"],
            &[lb.ip(), cluster_ip, node_ip],
        )
        .unwrap();
    let (sa_key, sa_pub) = kamaji_testenv::pki::key_pair().unwrap();
    let data: BTreeMap<String, ByteString> = [
        ("tls.crt", serving.cert_pem),
        ("tls.key", serving.key_pem),
        ("ca.crt", ca.cert_pem()),
        ("sa.key", sa_key),
        ("sa.pub", sa_pub),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
    .collect();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("tenant-pki".into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments
        .create(&PostParams::default(), &deployment(etcd_for_pods))
        .await
        .unwrap();
    wait_rolled_out(&deployments, 90).await;

    // Both replicas Running and Ready, on different nodes, each at its own pod IP.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods
        .list(&ListParams::default().labels("app=tenant"))
        .await
        .unwrap()
        .items;
    let live: Vec<&Pod> = list
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|p| running(p) && container_ready(p)));
    let nodes: Vec<_> = live
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect();
    assert_ne!(
        nodes[0], nodes[1],
        "required anti-affinity puts the replicas on different nodes"
    );
    let ips: Vec<_> = live
        .iter()
        .map(|p| p.status.as_ref().unwrap().pod_ip.clone().unwrap())
        .collect();
    assert_ne!(ips[0], ips[1]);

    // /readyz through the load balancer, verified with the Secret's CA.
    let (status, body) = kamaji_localnode::https_get(lb, &ca.cert_pem(), "/readyz")
        .await
        .unwrap();
    assert_eq!((status, body.trim()), (200, "ok"));
    // The same Service answers on its ClusterIP (local on the host while the agent runs)
    // and on its NodePort.
    for addr in [
        SocketAddr::new(cluster_ip, 6443),
        SocketAddr::new(node_ip, node_port),
    ] {
        let (status, _) = kamaji_localnode::https_get(addr, &ca.cert_pem(), "/readyz")
            .await
            .unwrap();
        assert_eq!(status, 200, "GET /readyz via {addr}");
    }

    // Roll with maxUnavailable 0 / maxSurge 1: no refused connection.
    let probe = ProbeLoop::start(lb, ca.cert_pem());
    let add_arg = |arg: &str| {
        serde_json::json!({"spec": {"template": {"spec": {"containers": [{
            "name": "kube-apiserver",
            "args": deployment(etcd_for_pods).spec.unwrap().template.spec.unwrap().containers[0]
                .args.clone().unwrap().into_iter().chain([arg.to_owned()]).collect::<Vec<_>>(),
        }]}}}})
    };
    deployments
        .patch(
            "tenant",
            &PatchParams::default(),
            &Patch::Strategic(add_arg("--v=1")),
        )
        .await
        .unwrap();
    wait_rolled_out(&deployments, 120).await;
    let (ok, refused, other, errors) = probe.finish().await;
    eprintln!("surge roll: {ok} ok, {refused} refused, {other} other {errors:?}");
    assert_eq!(refused, 0, "a connection was refused during a surge roll");
    assert!(ok > 10, "the probe loop ran ({ok} successes)");

    // Roll with maxUnavailable 100%: the outage is visible as refused connections.
    let probe = ProbeLoop::start(lb, ca.cert_pem());
    let mut patch = add_arg("--v=2");
    patch["spec"]["strategy"] =
        serde_json::json!({"rollingUpdate": {"maxUnavailable": "100%", "maxSurge": 0}});
    deployments
        .patch("tenant", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    wait_rolled_out(&deployments, 120).await;
    let (ok, refused, other, _) = probe.finish().await;
    eprintln!("all-at-once roll: {ok} ok, {refused} refused, {other} other");
    assert!(
        refused > 0,
        "an all-at-once roll showed no refused connection"
    );
    let (status, _) = kamaji_localnode::https_get(lb, &ca.cert_pem(), "/readyz")
        .await
        .unwrap();
    assert_eq!(status, 200);

    let (tag, pids, cidr) = (
        node.name_tag().to_owned(),
        node.started_pids(),
        cluster.service_cidr().to_owned(),
    );
    assert!(
        pids.len() >= 6,
        "2 + 2 + 2 processes were started: {pids:?}"
    );
    node.shutdown().await;
    common::assert_no_leftovers(&tag, &pids, &cidr);
    drop(etcd);
}
