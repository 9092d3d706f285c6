//! The main job, end to end with the real chain: CAPI core manager + kamaji-rs manager +
//! tenant kube-apiserver/controller-manager/scheduler processes + a real kubeadm discovery.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    clippy::doc_markdown,
    clippy::large_futures,
    clippy::await_holding_lock, // support::serial() holds a std lock for the whole test on purpose
    clippy::items_after_statements,
    clippy::single_match_else,
    clippy::similar_names,
    clippy::print_stdout
)]

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kamaji_api::KamajiControlPlane;
use kamaji_bootstrap::pki::ca_cert_hash;
use kamaji_bootstrap::token::{BootstrapToken, TokenSecretOptions, bootstrap_token_secret};
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use support::{Env, f0};

const MINUTE: Duration = Duration::from_mins(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_becomes_available_through_capi_and_kubeadm_discovery_passes() {
    let env = Env::start().await.unwrap();
    env.namespace("tenant-a").await.unwrap();
    env.apply_yaml(&f0("tenant-a", "demo", 2)).await.unwrap();

    // CAPI itself reports the control plane initialized and available.
    env.wait_cluster_condition(
        "tenant-a",
        "demo",
        "ControlPlaneInitialized",
        "True",
        4 * MINUTE,
    )
    .await
    .unwrap();
    let cluster = env
        .wait_cluster_condition(
            "tenant-a",
            "demo",
            "ControlPlaneAvailable",
            "True",
            2 * MINUTE,
        )
        .await
        .unwrap();

    // Cluster.spec.controlPlaneEndpoint equals the KamajiControlPlane's.
    let kcp = Api::<KamajiControlPlane>::namespaced(env.client(), "tenant-a")
        .get("demo")
        .await
        .unwrap();
    let ep = kcp.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["host"],
        ep.host.clone().unwrap()
    );
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["port"],
        ep.port.unwrap()
    );
    let status = kcp.status.clone().unwrap();
    assert_eq!(status.external_managed_control_plane, Some(true));
    assert_eq!(
        status
            .initialization
            .and_then(|i| i.control_plane_initialized),
        Some(true)
    );
    assert!(status.selector.is_some());
    assert_eq!(
        status.versions.unwrap()[0].version,
        kamaji_testenv::KUBERNETES_VERSION
    );

    // The tenant API answers /readyz through the endpoint with <cluster>-kubeconfig.
    let tenant = env.tenant_client("tenant-a", "demo").await.unwrap();
    let readyz = tenant
        .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(readyz.trim(), "ok");

    // A bootstrap token in the tenant; the tenant's bootstrapsigner signs cluster-info for it.
    let token = BootstrapToken::generate().unwrap();
    let secret = bootstrap_token_secret(&token, &TokenSecretOptions::default()).unwrap();
    Api::<Secret>::namespaced(tenant.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let key = token.jws_key();
    let signed = move |c: Option<&ConfigMap>| {
        c.and_then(|c| c.data.as_ref())
            .is_some_and(|d: &BTreeMap<String, String>| d.contains_key(&key))
    };
    tokio::time::timeout(
        MINUTE,
        await_condition(
            Api::<ConfigMap>::namespaced(tenant.clone(), "kube-public"),
            "cluster-info",
            signed,
        ),
    )
    .await
    .expect("cluster-info not signed for the token within 60 s")
    .unwrap();

    // Real kubeadm token discovery against the endpoint, pinned to <cluster>-ca.
    let ca = Api::<Secret>::namespaced(env.client(), "tenant-a")
        .get("demo-ca")
        .await
        .unwrap();
    let ca_pem = String::from_utf8(ca.data.unwrap()["tls.crt"].0.clone()).unwrap();
    let hash = ca_cert_hash(&ca_pem).unwrap();
    let endpoint = format!("{}:{}", ep.host.unwrap(), ep.port.unwrap());
    let out = Command::new(env.cluster.tools().path("kubeadm"))
        .args(["join", "phase", "preflight", &endpoint])
        .arg(format!("--token={}", token.token()))
        .arg(format!("--discovery-token-ca-cert-hash={hash}"))
        .args([
            "--ignore-preflight-errors=all",
            "--node-name=worker-1",
            "--cri-socket=unix:///nonexistent.sock",
            "-v=1",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "kubeadm join preflight failed:\n{text}"
    );
    assert!(
        text.contains("TLS certificate validates against pinned roots"),
        "{text}"
    );
    assert!(text.contains("Reading configuration from the"), "{text}");
}
