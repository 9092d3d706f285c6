//! The main job, end to end with the real chain: CAPI core manager + kamaji-rs manager +
//! tenant kube-apiserver/controller-manager/scheduler processes + a real kubeadm discovery.

#![cfg(real_programs_as_root)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::{Env, f0};
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::wait::await_condition;

const MINUTE: Duration = Duration::from_mins(1);

#[kamaji_e2e::test]
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

    // Provisioning rolled nothing: the Deployment was created once with its final template.
    let d = env.deployment("tenant-a", "demo").await.unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(1),
        "the control plane was rolled during provisioning"
    );

    // The tenant API answers /readyz through the endpoint with <cluster>-kubeconfig.
    let tenant = env.tenant_client("tenant-a", "demo").await.unwrap();
    let readyz = tenant
        .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(readyz.trim(), "ok");

    // A pod of the management cluster reaches the tenant through the load-balancer address too
    // (kube-proxy's VIP rule, back to a pod on the same machine: hairpin), verified against
    // <cluster>-ca, as the manager will once it runs as a pod.
    let pods: Api<Pod> = Api::namespaced(env.client(), "tenant-a");
    let url = format!(
        "https://{}:{}/readyz",
        ep.host.clone().unwrap(),
        ep.port.unwrap()
    );
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "netcheck"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "netcheck", "image": kamaji_machine::images::NETCHECK_IMAGE,
                "imagePullPolicy": "Never",
                "args": ["-get", url, "-cacert", "/ca/tls.crt"],
                "volumeMounts": [{"name": "ca", "mountPath": "/ca", "readOnly": true}],
            }],
            "volumes": [{"name": "ca", "secret": {
                "secretName": "demo-ca", "items": [{"key": "tls.crt", "path": "tls.crt"}]}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let done = tokio::time::timeout(
        MINUTE,
        await_condition(pods.clone(), "netcheck", |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    let log = pods.logs("netcheck", &LogParams::default()).await.unwrap();
    assert_eq!(
        done.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded"),
        "{log}"
    );
    assert!(log.contains(&format!("200 {url} ok")), "{log}");

    // A bootstrap token in the tenant, signed by the tenant's bootstrapsigner, and a real kubeadm
    // token discovery against the endpoint pinned to <cluster>-ca.
    let endpoint = format!("{}:{}", ep.host.unwrap(), ep.port.unwrap());
    let out = kamaji_e2e::kubeadm_discovery(&env, "tenant-a", "demo", &endpoint)
        .await
        .unwrap();
    assert!(out.contains("Reading configuration from the"), "{out}");
}
