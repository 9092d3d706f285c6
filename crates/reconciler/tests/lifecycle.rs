//! Lifecycle against the real chain: rolling updates without an outage (B14), pause (B19),
//! the CAPI quickstart sample as written, two tenants of the same name, and deletion down to
//! the datastore prefix.

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

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kamaji_api::KamajiControlPlane;
use kamaji_reconciler::datastore::{self, Credentials, Resolved};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::wait::{await_condition, conditions};
use support::{Env, F0, ReadyzProbe, f0, secret_text, serial, wait_rolled_out};

const MINUTE: Duration = Duration::from_mins(1);

/// Whether the kube-apiserver container of a Deployment has argument `arg`.
fn api_server_has(arg: &'static str) -> impl Fn(&Deployment) -> bool + Send + 'static {
    move |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|c| c.name == "kube-apiserver"))
            .and_then(|c| c.args.as_ref())
            .is_some_and(|args| args.iter().any(|a| a == arg))
    }
}

fn cluster_api(env: &Env, ns: &str, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "cluster.x-k8s.io",
        version,
        "Cluster",
    ));
    Api::namespaced_with(env.client(), ns, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_an_args_change_rolls_without_ever_losing_the_api() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    env.f0_available("tenant-a", "demo", 3).await.unwrap();
    env.wait_kcp("tenant-a", "demo", "3 available", 2 * MINUTE, |k| {
        k.status
            .as_ref()
            .is_some_and(|s| s.available_replicas == Some(3))
    })
    .await
    .unwrap();
    let d = env.deployment("tenant-a", "demo").await.unwrap();
    let strategy = d.spec.as_ref().unwrap().strategy.clone().unwrap();
    assert_eq!(
        strategy.rolling_update.unwrap().max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    let api = &d.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(
        api.readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .as_deref(),
        Some("/readyz")
    );

    // Poll /readyz through the endpoint during the whole rollout.
    let probe = ReadyzProbe::start(env.tenant_config("tenant-a", "demo").await.unwrap());
    env.patch_kcp(
        "tenant-a",
        "demo",
        serde_json::json!({"spec": {"apiServer": {"extraArgs": ["--max-requests-inflight=600"]}}}),
    )
    .await
    .unwrap();
    wait_rolled_out(
        &env,
        "tenant-a",
        "demo",
        3,
        4 * MINUTE,
        api_server_has("--max-requests-inflight=600"),
    )
    .await
    .unwrap();
    let k = env
        .wait_kcp("tenant-a", "demo", "3 up to date", MINUTE, |k| {
            k.status.as_ref().is_some_and(|s| {
                s.up_to_date_replicas == Some(3) && s.unavailable_replicas == Some(0)
            })
        })
        .await
        .unwrap();
    assert_eq!(k.status.unwrap().updated_replicas, Some(3));
    let (ok, failed) = probe.stop().await;
    assert!(ok > 20, "too few probes: {ok}");
    assert_eq!(
        failed,
        0,
        "/readyz failed {failed} times (of {}) during the rollout",
        ok + failed
    );

    // The probe does see an outage: a user strategy that replaces every pod at once.
    let probe = ReadyzProbe::start(env.tenant_config("tenant-a", "demo").await.unwrap());
    let all_at_once = serde_json::json!({"spec": {
        "apiServer": {"extraArgs": ["--max-requests-inflight=700"]},
        "deployment": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%", "maxSurge": 0}}},
    }});
    env.patch_kcp("tenant-a", "demo", all_at_once)
        .await
        .unwrap();
    wait_rolled_out(
        &env,
        "tenant-a",
        "demo",
        3,
        4 * MINUTE,
        api_server_has("--max-requests-inflight=700"),
    )
    .await
    .unwrap();
    let (_, failed) = probe.stop().await;
    assert!(
        failed > 0,
        "an all-at-once roll must be visible to the probe"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_upgrade_rolls_without_ever_losing_the_api() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    let (from, to) = (
        kamaji_testenv::PREVIOUS_KUBERNETES_VERSION,
        kamaji_testenv::KUBERNETES_VERSION,
    );
    env.namespace("tenant-a").await.unwrap();
    env.apply_yaml(&F0::new("tenant-a", "demo").version(from).yaml())
        .await
        .unwrap();
    env.wait_kcp(
        "tenant-a",
        "demo",
        &format!("2 available at {from}"),
        4 * MINUTE,
        move |k| {
            k.status.as_ref().is_some_and(|s| {
                s.available_replicas == Some(2) && s.version.as_deref() == Some(from)
            })
        },
    )
    .await
    .unwrap();
    let tenant = env.tenant_client("tenant-a", "demo").await.unwrap();
    let probe = ReadyzProbe::start(env.tenant_config("tenant-a", "demo").await.unwrap());
    env.patch_kcp(
        "tenant-a",
        "demo",
        serde_json::json!({"spec": {"version": to}}),
    )
    .await
    .unwrap();
    let new_image = move |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| {
                p.containers.iter().take(3).all(|c| {
                    c.image
                        .as_deref()
                        .is_some_and(|i| i.ends_with(&format!(":{to}")))
                })
            })
    };
    wait_rolled_out(&env, "tenant-a", "demo", 2, 4 * MINUTE, new_image)
        .await
        .unwrap();
    let k = env
        .wait_kcp(
            "tenant-a",
            "demo",
            &format!("version {to}"),
            2 * MINUTE,
            move |k| {
                k.status.as_ref().is_some_and(|s| {
                    s.version.as_deref() == Some(to) && s.up_to_date_replicas == Some(2)
                })
            },
        )
        .await
        .unwrap();
    let (ok, failed) = probe.stop().await;
    assert!(ok > 10, "too few probes: {ok}");
    assert_eq!(
        failed,
        0,
        "/readyz failed {failed} times (of {}) during the upgrade",
        ok + failed
    );
    let versions = k.status.unwrap().versions.unwrap();
    assert_eq!(versions.last().unwrap().version, to);
    // The API server that answers reports the new version, and kubeadm-config follows.
    let info = tenant.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, to);
    let cc = tokio::time::timeout(MINUTE, async {
        loop {
            let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                tenant.clone(),
                "kube-system",
            )
            .get("kubeadm-config")
            .await
            .unwrap();
            let cc: serde_yaml::Value =
                serde_yaml::from_str(&cm.data.unwrap()["ClusterConfiguration"]).unwrap();
            if cc["kubernetesVersion"] == to {
                return cc;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("kubeadm-config not rewritten for the new version");
    assert_eq!(cc["apiVersion"], "kubeadm.k8s.io/v1beta4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b19_paused_cluster_or_control_plane_changes_nothing_until_resumed() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    env.f0_available("tenant-a", "demo", 2).await.unwrap();
    let clusters = cluster_api(&env, "tenant-a", "v1beta2");
    for (pause, resume, replicas) in [
        (
            serde_json::json!({"spec": {"paused": true}}),
            serde_json::json!({"spec": {"paused": false}}),
            3,
        ),
        (
            serde_json::json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": ""}}}),
            serde_json::json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
            1,
        ),
    ] {
        if pause.get("spec").is_some() {
            clusters
                .patch("demo", &PatchParams::default(), &Patch::Merge(&pause))
                .await
                .unwrap();
        } else {
            env.patch_kcp("tenant-a", "demo", pause.clone())
                .await
                .unwrap();
        }
        env.wait_kcp_condition("tenant-a", "demo", "Paused", "True", MINUTE)
            .await
            .unwrap();
        let writes_before = env.manager_writes().unwrap().len();
        let status_before = Api::<KamajiControlPlane>::namespaced(env.client(), "tenant-a")
            .get("demo")
            .await
            .unwrap()
            .status
            .unwrap();
        let deployment_before = env.deployment("tenant-a", "demo").await.unwrap();
        env.patch_kcp(
            "tenant-a",
            "demo",
            serde_json::json!({"spec": {"replicas": replicas}}),
        )
        .await
        .unwrap();
        // Several reconciles happen in this window (the spec change, status echoes); none may
        // write anything but the Paused condition.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let d = env.deployment("tenant-a", "demo").await.unwrap();
        assert_eq!(
            d.spec.unwrap().replicas,
            deployment_before.spec.unwrap().replicas
        );
        assert_eq!(
            d.metadata.generation, deployment_before.metadata.generation,
            "Deployment spec untouched while paused"
        );
        // The only writes allowed: the KamajiControlPlane's status, changing nothing but the
        // Paused condition (its observedGeneration follows the spec change).
        let writes: Vec<_> = env
            .manager_writes()
            .unwrap()
            .into_iter()
            .skip(writes_before)
            .collect();
        assert!(
            writes
                .iter()
                .all(|w| w.request_u_r_i.contains("/kamajicontrolplanes/demo/status")),
            "writes while paused: {:?}",
            writes.iter().map(|w| &w.request_u_r_i).collect::<Vec<_>>()
        );
        let status_now = Api::<KamajiControlPlane>::namespaced(env.client(), "tenant-a")
            .get("demo")
            .await
            .unwrap()
            .status
            .unwrap();
        let without_paused = |s: &kamaji_api::KamajiControlPlaneStatus| {
            let mut s = s.clone();
            s.conditions = s
                .conditions
                .map(|c| c.into_iter().filter(|c| c.type_ != "Paused").collect());
            s
        };
        assert_eq!(
            without_paused(&status_now),
            without_paused(&status_before),
            "status churn while paused"
        );
        if resume.get("spec").is_some() {
            clusters
                .patch("demo", &PatchParams::default(), &Patch::Merge(&resume))
                .await
                .unwrap();
        } else {
            env.patch_kcp("tenant-a", "demo", resume.clone())
                .await
                .unwrap();
        }
        let want = Some(replicas);
        let scaled = move |d: Option<&Deployment>| {
            d.and_then(|d| d.spec.as_ref())
                .is_some_and(|s| s.replicas == want)
        };
        tokio::time::timeout(
            MINUTE,
            await_condition(
                Api::<Deployment>::namespaced(env.client(), "tenant-a"),
                "demo",
                scaled,
            ),
        )
        .await
        .expect("not scaled after resuming")
        .unwrap();
        env.wait_kcp_condition("tenant-a", "demo", "Paused", "False", MINUTE)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_sample_as_written_reaches_available_with_secrets_named_after_the_cluster() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    let crd = kamaji_testenv::standins::openstack_cluster_crd().unwrap();
    env.cluster.apply_crds(&[crd]).await.unwrap();
    let sample = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../api/tests/samples/quickstart-openstack.yaml"),
    )
    .unwrap();
    for doc in serde_yaml::Deserializer::from_str(&sample) {
        let mut v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        if !["Cluster", "KamajiControlPlane", "OpenStackCluster"].contains(&kind.as_str()) {
            continue; // machines need the OpenStack provider
        }
        if kind == "KamajiControlPlane" {
            // As written, in the namespace the Cluster uses, at the version the tools build.
            v["metadata"]["namespace"] = "default".into();
            v["spec"]["version"] = kamaji_testenv::KUBERNETES_VERSION.into();
        }
        env.apply_value(&v).await.unwrap();
    }
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "infrastructure.cluster.x-k8s.io",
        "v1alpha6",
        "OpenStackCluster",
    ));
    let infra: Api<DynamicObject> = Api::namespaced_with(env.client(), "default", &ar);
    infra
        .patch_status("capi-quickstart", &PatchParams::default(), &Patch::Merge(serde_json::json!({"status": {"ready": true, "initialization": {"provisioned": true}}})))
        .await
        .unwrap();
    env.wait_kcp_condition("default", "capo-cp-test", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    env.wait_cluster_condition(
        "default",
        "capi-quickstart",
        "ControlPlaneAvailable",
        "True",
        2 * MINUTE,
    )
    .await
    .unwrap();
    for name in [
        "capi-quickstart-kubeconfig",
        "capi-quickstart-ca",
        "capi-quickstart-sa",
        "capi-quickstart-proxy",
    ] {
        env.secret("default", name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let tenant = env
        .tenant_client("default", "capi-quickstart")
        .await
        .unwrap();
    assert!(kamaji_reconciler::tenant::readyz(&tenant).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_with_the_same_name_in_two_namespaces_share_nothing() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    env.namespace("tenant-a").await.unwrap();
    env.namespace("tenant-b").await.unwrap();
    env.apply_yaml(&f0("tenant-a", "demo", 1)).await.unwrap();
    env.apply_yaml(&f0("tenant-b", "demo", 1)).await.unwrap();
    env.wait_kcp_condition("tenant-a", "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    env.wait_kcp_condition("tenant-b", "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let prefix = |args: Vec<String>| {
        args.into_iter()
            .find(|a| a.starts_with("--etcd-prefix="))
            .unwrap()
    };
    let (pa, pb) = (
        prefix(
            env.container_args("tenant-a", "demo", "kube-apiserver")
                .await
                .unwrap(),
        ),
        prefix(
            env.container_args("tenant-b", "demo", "kube-apiserver")
                .await
                .unwrap(),
        ),
    );
    assert_ne!(pa, pb, "datastore prefixes must differ");
    let (ca, cb) = (
        env.secret("tenant-a", "demo-ca").await.unwrap(),
        env.secret("tenant-b", "demo-ca").await.unwrap(),
    );
    assert_ne!(secret_text(&ca, "tls.crt"), secret_text(&cb, "tls.crt"));
    let (a, b) = (
        env.tenant_client("tenant-a", "demo").await.unwrap(),
        env.tenant_client("tenant-b", "demo").await.unwrap(),
    );
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "only-in-a"}})).unwrap();
    Api::<Namespace>::all(a.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert!(
        Api::<Namespace>::all(b)
            .get_opt("only-in-a")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<Namespace>::all(a)
            .get_opt("only-in-a")
            .await
            .unwrap()
            .is_some()
    );
}

fn resolved(env: &Env) -> (Resolved, Credentials) {
    let ds = Resolved {
        name: "default".into(),
        endpoints: vec![env.datastore.url().to_owned()],
        ca_cert: env.datastore_ca.cert_pem.clone(),
        ca_key: String::new(),
    };
    (
        ds,
        Credentials {
            cert: env.datastore_client.cert_pem.clone(),
            key: env.datastore_client.key_pem.clone(),
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_cluster_removes_every_object_and_the_datastore_prefix() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    env.f0_available("tenant-a", "demo", 1).await.unwrap();
    let prefix = env
        .container_args("tenant-a", "demo", "kube-apiserver")
        .await
        .unwrap()
        .into_iter()
        .find_map(|a| a.strip_prefix("--etcd-prefix=").map(str::to_owned))
        .unwrap();
    let (ds, creds) = resolved(&env);
    assert!(
        datastore::count_prefix(&ds, &creds, &prefix).await.unwrap() > 0,
        "the tenant stored keys"
    );

    let clusters = cluster_api(&env, "tenant-a", "v1beta1");
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    let uid = clusters
        .get("demo")
        .await
        .map(|c| c.metadata.uid.unwrap_or_default())
        .unwrap_or_default();
    tokio::time::timeout(
        3 * MINUTE,
        await_condition(clusters.clone(), "demo", conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "Cluster not deleted in 3 minutes\nmanager log:\n{}",
            env.manager_log()
        )
    })
    .unwrap();
    assert!(
        Api::<KamajiControlPlane>::namespaced(env.client(), "tenant-a")
            .get_opt("demo")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<Deployment>::namespaced(env.client(), "tenant-a")
            .get_opt("demo")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<Service>::namespaced(env.client(), "tenant-a")
            .get_opt("demo")
            .await
            .unwrap()
            .is_none()
    );
    let left = Api::<Secret>::namespaced(env.client(), "tenant-a")
        .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=demo"))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "Secrets left: {:?}",
        left.items
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        datastore::count_prefix(&ds, &creds, &prefix).await.unwrap(),
        0,
        "the prefix is empty"
    );

    // The same name again starts from an empty prefix and comes up.
    let k = env.f0_available("tenant-a", "demo", 1).await.unwrap();
    assert!(k.status.unwrap().initialized.unwrap());
}
