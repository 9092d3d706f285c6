//! The local management cluster runs the real programs: the CAPI core manager reconciles a
//! Cluster through its webhooks, kube-controller-manager signs cluster-info, the audit log
//! counts requests, and every process is gone after a panicking test.
#![cfg(real_programs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kamaji_testenv::LocalCluster;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::wait::await_condition;

fn cluster_v1beta2() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta2",
        "Cluster",
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capi_manager_adds_its_finalizer_to_a_v1beta2_cluster() {
    let cluster = LocalCluster::builder()
        .kamaji_crds(false)
        .start()
        .await
        .unwrap();
    // A stand-in control-plane kind carrying the contract label, so that core can resolve
    // the reference's version (capi-contract.md items 4-5) when converting to v1beta1.
    let stand_in: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "standincontrolplanes.controlplane.cluster.x-k8s.io",
                     "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1"}},
        "spec": {"group": "controlplane.cluster.x-k8s.io", "scope": "Namespaced",
                 "names": {"kind": "StandInControlPlane", "plural": "standincontrolplanes",
                           "singular": "standincontrolplane", "listKind": "StandInControlPlaneList"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                          "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    cluster.apply_crds(&[stand_in]).await.unwrap();
    let ar = cluster_v1beta2();
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client(), "default", &ar);
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
            // No infrastructureRef; the webhook wants one of controlPlaneRef,
            // infrastructureRef or topology.
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "StandInControlPlane", "name": "demo"},
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let has_finalizer = |o: Option<&DynamicObject>| {
        o.and_then(|o| o.metadata.finalizers.as_ref())
            .is_some_and(|f| f.iter().any(|f| f == "cluster.cluster.x-k8s.io"))
    };
    tokio::time::timeout(
        Duration::from_mins(1),
        await_condition(api.clone(), "demo", has_finalizer),
    )
    .await
    .expect("the CAPI core manager did not add its finalizer within 60 s")
    .unwrap();

    // The conversion webhook serves the v1beta1 view of the same object.
    let v1beta1 = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        "v1beta1",
        "Cluster",
    ));
    let old: Api<DynamicObject> = Api::namespaced_with(cluster.client(), "default", &v1beta1);
    let got = old.get("demo").await.unwrap();
    assert_eq!(got.types.unwrap().api_version, "cluster.x-k8s.io/v1beta1");
    assert_eq!(
        got.data["spec"]["clusterNetwork"]["pods"]["cidrBlocks"][0],
        "192.168.0.0/16"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_manager_signs_cluster_info_for_a_bootstrap_token() {
    let cluster = LocalCluster::builder()
        .capi(false)
        .controllers(true)
        .start()
        .await
        .unwrap();
    let client = cluster.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    server: {}\n",
        cluster.server_url()
    );
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("cluster-info".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("kubeconfig".to_owned(), kubeconfig)])),
        ..Default::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client, "kube-system");
    let token: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef",
                       "usage-bootstrap-signing": "true", "usage-bootstrap-authentication": "true"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    let signed = |o: Option<&ConfigMap>| {
        o.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d.contains_key("jws-kubeconfig-abcdef"))
    };
    tokio::time::timeout(
        Duration::from_mins(1),
        await_condition(cms, "cluster-info", signed),
    )
    .await
    .expect("bootstrapsigner did not sign cluster-info within 60 s")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_log_counts_writes_by_user() {
    let cluster = LocalCluster::builder().capi(false).start().await.unwrap();
    let as_tester = cluster
        .user_client("tester", &["system:masters"])
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(as_tester, "default");
    for i in 0..3 {
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("c{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    cms.get("c0").await.unwrap();
    let events = cluster.audit_events().unwrap();
    let mine: Vec<_> = events
        .iter()
        .filter(|e| e.user.username == "tester")
        .collect();
    assert_eq!(mine.iter().filter(|e| e.is_write()).count(), 3);
    assert!(mine.iter().any(|e| e.verb == "get"));
}

#[test]
fn every_process_is_stopped_when_a_test_panics() {
    let pids = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&pids);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async move {
            let cluster = LocalCluster::builder()
                .controllers(true)
                .start()
                .await
                .unwrap();
            seen.lock().unwrap().extend(cluster.pids());
            panic!("a test failing half-way");
        });
    }));
    assert!(outcome.is_err(), "the inner test was meant to panic");
    let pids = pids.lock().unwrap().clone();
    // etcd, kube-apiserver, kube-controller-manager, kube-scheduler, capi-manager.
    assert_eq!(pids.len(), 5, "expected five processes, got {pids:?}");
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is still running after the panic"
        );
    }
}
