//! Lifecycle against the real chain: rolling updates without an outage (B14), pause and
//! `clusterctl move` (B19), the CAPI quickstart sample as written, two tenants of the same name, and deletion down to
//! the datastore prefix.

#![cfg(real_programs_as_root)]

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::{
    Env, F0, ReadyzProbe, api_server_has, authentication_and_roles, claim_on, control_plane_at,
    datastore_admin, etcd_prefix, f0, keys_under, raw_value, raw_values_under, recorded_datastore,
    secret_text, serial, wait_rolled_out,
};
use kamaji_reconciler::datastore;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};

const MINUTE: Duration = Duration::from_mins(1);

/// Polls a Deployment's `status.availableReplicas` every 500 ms until stopped and keeps the
/// lowest value seen (B14: available API server pods during a rollout).
struct AvailableFloor {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<i32>,
}

impl AvailableFloor {
    fn start(env: &Env, ns: &str, name: &str) -> Self {
        let api: Api<Deployment> = Api::namespaced(env.client(), ns);
        let name = name.to_owned();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut floor = i32::MAX;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(d) = api.get(&name).await {
                    let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                    floor = floor.min(available);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            floor
        });
        Self { stop, task }
    }

    /// Stops polling; the lowest `availableReplicas` seen.
    async fn stop(self) -> i32 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

fn cluster_api(env: &Env, ns: &str, version: &str) -> Api<DynamicObject> {
    env.capi(ns, version, "Cluster")
}

#[kamaji_e2e::test(shared)]
async fn b14_an_args_change_rolls_without_ever_losing_the_api(env: &Env) {
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

    // Poll /readyz through the endpoint, and the available pods, during the whole rollout.
    let probe = ReadyzProbe::start(env.tenant_config("tenant-a", "demo").await.unwrap());
    probe.answered(MINUTE).await.unwrap();
    let floor = AvailableFloor::start(env, "tenant-a", "demo");
    env.patch_kcp(
        "tenant-a",
        "demo",
        serde_json::json!({"spec": {"apiServer": {"extraArgs": ["--max-requests-inflight=600"]}}}),
    )
    .await
    .unwrap();
    wait_rolled_out(
        env,
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
    let (ok, failed, why) = probe.stop().await;
    let lowest = floor.stop().await;
    assert!(lowest >= 2, "available API server pods fell to {lowest}");
    assert!(ok > 20, "too few probes: {ok}");
    assert_eq!(
        failed,
        0,
        "/readyz failed {failed} times (of {}) during the rollout: {why:#?}",
        ok + failed
    );

    // The probes do see an outage: a user strategy that replaces every pod at once.
    let probe = ReadyzProbe::start(env.tenant_config("tenant-a", "demo").await.unwrap());
    probe.answered(MINUTE).await.unwrap();
    let floor = AvailableFloor::start(env, "tenant-a", "demo");
    let all_at_once = serde_json::json!({"spec": {
        "apiServer": {"extraArgs": ["--max-requests-inflight=700"]},
        "deployment": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%", "maxSurge": 0}}},
    }});
    env.patch_kcp("tenant-a", "demo", all_at_once)
        .await
        .unwrap();
    wait_rolled_out(
        env,
        "tenant-a",
        "demo",
        3,
        4 * MINUTE,
        api_server_has("--max-requests-inflight=700"),
    )
    .await
    .unwrap();
    let (_, failed, _) = probe.stop().await;
    assert!(
        failed > 0,
        "an all-at-once roll must be visible to the probe"
    );
    let lowest = floor.stop().await;
    assert!(
        lowest < 2,
        "an all-at-once roll must show fewer than 2 available pods, saw {lowest}"
    );
}

#[kamaji_e2e::test]
async fn a_version_upgrade_rolls_without_ever_losing_the_api() {
    let _serial = serial();
    let env = Env::builder()
        .version(kamaji_testenv::PREVIOUS_MINOR_KUBERNETES_VERSION)
        .start()
        .await
        .unwrap();
    let (from, to) = (
        kamaji_testenv::PREVIOUS_MINOR_KUBERNETES_VERSION,
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
    probe.answered(MINUTE).await.unwrap();
    env.patch_kcp(
        "tenant-a",
        "demo",
        serde_json::json!({"spec": {"version": to}}),
    )
    .await
    .unwrap();
    wait_rolled_out(
        &env,
        "tenant-a",
        "demo",
        2,
        4 * MINUTE,
        control_plane_at(to),
    )
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
    let (ok, failed, why) = probe.stop().await;
    assert!(ok > 10, "too few probes: {ok}");
    assert_eq!(
        failed,
        0,
        "/readyz failed {failed} times (of {}) during the upgrade: {why:#?}",
        ok + failed
    );
    let versions = k.status.unwrap().versions.unwrap();
    assert_eq!(versions.last().unwrap().version, to);
    // Once the old API servers have terminated (they keep serving for a while after the roll,
    // until every kube-proxy stopped sending them connections), the API server that answers
    // a new client reports the new version, and kubeadm-config follows.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client(), "tenant-a");
    let deadline = tokio::time::Instant::now() + MINUTE;
    while pods
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|p| {
            p.spec.as_ref().is_some_and(|s| {
                s.containers.iter().any(|c| {
                    c.image
                        .as_deref()
                        .is_some_and(|i| i.ends_with(&format!(":{from}")))
                })
            })
        })
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pods of {from} still there a minute after the roll"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let info = env
        .tenant_client("tenant-a", "demo")
        .await
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();
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

#[kamaji_e2e::test(shared)]
async fn b19_paused_cluster_or_control_plane_changes_nothing_until_resumed(env: &Env) {
    env.f0_available("tenant-a", "demo", 2).await.unwrap();
    let clusters = cluster_api(env, "tenant-a", "v1beta2");
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

#[kamaji_e2e::test]
async fn quickstart_sample_as_written_reaches_available_with_secrets_named_after_the_cluster() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    let crd = kamaji_testenv::standins::openstack_cluster_crd().unwrap();
    env.cluster.apply_crds(&[crd]).await.unwrap();
    let sample = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/samples/quickstart-openstack.yaml"),
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
    env.mark_openstack_cluster_provisioned("default", "capi-quickstart")
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

/// Two tenants named `demo` in two namespaces get two prefixes, two CAs and two APIs; on the
/// shared etcd (authentication on), tenant A's datastore client certificate reads and writes
/// its own prefix and gets `permission denied` on tenant B's and on the provider's claims, as
/// etcd's own client shows.
#[kamaji_e2e::test(shared)]
async fn two_tenants_with_the_same_name_in_two_namespaces_share_nothing(env: &Env) {
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
    let (pa, pb) = (
        pa.trim_start_matches("--etcd-prefix=").to_owned(),
        pb.trim_start_matches("--etcd-prefix=").to_owned(),
    );
    // The names are recorded in status: two tenants named demo, two schemas and users.
    let (sa, sb) = (
        recorded_datastore(env, "tenant-a").await,
        recorded_datastore(env, "tenant-b").await,
    );
    assert_eq!(format!("/{}", sa.schema), pa);
    assert_eq!(format!("/{}", sb.schema), pb);
    assert_eq!((sa.name.as_str(), sb.name.as_str()), ("default", "default"));
    assert_ne!(sa.username, sb.username);
    let client_cert = secret_text(
        &env.secret("tenant-a", "demo-apiserver-etcd-client")
            .await
            .unwrap(),
        "tls.crt",
    );
    let cn = kamaji_bootstrap::pki::inspect::CertificateInfo::from_pem(&client_cert)
        .unwrap()
        .common_name;
    assert_eq!(cn.as_deref(), Some(sa.username.as_str()));
    let own = etcdctl_as(
        env,
        "tenant-a",
        &[
            "get",
            &format!("{pa}/"),
            "--prefix",
            "--keys-only",
            "--limit=1",
        ],
    )
    .await;
    assert!(
        own.0 && own.1.contains(&pa),
        "tenant A cannot read its own prefix: {}",
        own.1
    );
    for (what, args) in [
        (
            "read tenant B's prefix",
            vec![
                "get".to_owned(),
                format!("{pb}/"),
                "--prefix".into(),
                "--keys-only".into(),
            ],
        ),
        (
            "write into tenant B's prefix",
            vec![
                "put".to_owned(),
                format!("{pb}/registry/intruder"),
                "x".into(),
            ],
        ),
        (
            "read the schema claims",
            vec![
                "get".to_owned(),
                "/kamaji-rs/claims/".into(),
                "--prefix".into(),
            ],
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out) = etcdctl_as(env, "tenant-a", &args).await;
        assert!(
            !ok && out.contains("permission denied"),
            "tenant A's datastore certificate could {what}: {out}"
        );
    }
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
        Api::<Namespace>::all(a.clone())
            .get_opt("only-in-a")
            .await
            .unwrap()
            .is_some()
    );

    // Encryption at rest: what etcd holds of a tenant Secret is secretbox ciphertext under the
    // tenant's first key, and the API reads it back as written.
    let marker = "plain-text-that-must-not-reach-etcd";
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "at-rest", "namespace": "default"},
        "stringData": {"password": marker},
    }))
    .unwrap();
    let secrets = Api::<Secret>::namespaced(a, "default");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let stored = raw_value(
        &datastore_admin(env),
        &format!("{pa}/secrets/default/at-rest"),
    )
    .await
    .expect("the Secret is stored under the tenant's prefix");
    assert!(
        stored.starts_with(b"k8s:enc:secretbox:v1:key-1:"),
        "stored without encryption: {:?}",
        String::from_utf8_lossy(&stored[..stored.len().min(40)])
    );
    assert!(
        !stored.windows(marker.len()).any(|w| w == marker.as_bytes()),
        "the Secret's value is in etcd as plain text"
    );
    assert_eq!(
        secret_text(&secrets.get("at-rest").await.unwrap(), "password"),
        marker
    );

    // Key rotation: read by every API server, then writing, then every Secret rewritten and
    // the old key dropped, while a client reads the Secret on a new connection every 250 ms.
    for i in 0..3 {
        let more: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("more-{i}"), "namespace": "kube-system"},
            "stringData": {"value": format!("{i}")},
        }))
        .unwrap();
        Api::<Secret>::namespaced(
            env.tenant_client("tenant-a", "demo").await.unwrap(),
            "kube-system",
        )
        .create(&PostParams::default(), &more)
        .await
        .unwrap();
    }
    let probe = ReadyzProbe::reading(
        env.tenant_config("tenant-a", "demo").await.unwrap(),
        "/api/v1/namespaces/default/secrets/at-rest",
    );
    probe.answered(MINUTE).await.unwrap();
    env.patch_kcp(
        "tenant-a",
        "demo",
        serde_json::json!({"metadata": {"annotations": {
            kamaji_api::meta::ENCRYPTION_KEY_ROTATION_ANNOTATION: "2026-12-04"
        }}}),
    )
    .await
    .unwrap();
    env.wait_kcp_condition(
        "tenant-a",
        "demo",
        "EncryptionKeyRotated",
        "True",
        5 * MINUTE,
    )
    .await
    .unwrap();
    let (ok, failed, failures) = probe.stop().await;
    assert_eq!(
        failed,
        0,
        "{failed} of {} reads of the Secret failed during the key rotation: {failures:?}",
        ok + failed
    );
    let stored = raw_values_under(&datastore_admin(env), &format!("{pa}/secrets/")).await;
    assert!(stored.len() >= 4, "the tenant's Secrets: {}", stored.len());
    let old_key: Vec<&String> = stored
        .iter()
        .filter(|(_, v)| !v.starts_with(b"k8s:enc:secretbox:v1:key-2:"))
        .map(|(k, _)| k)
        .collect();
    assert!(old_key.is_empty(), "not rewritten with key-2: {old_key:?}");
    let config = env
        .secret("tenant-a", "demo-encryption.config")
        .await
        .unwrap();
    let keys = kamaji_bootstrap::encryption::keys_of(&secret_text(
        &config,
        kamaji_bootstrap::encryption::CONFIGURATION_KEY,
    ))
    .unwrap();
    assert_eq!(
        keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["key-2"],
        "the old key is dropped"
    );
    assert_eq!(
        secret_text(&secrets.get("at-rest").await.unwrap(), "password"),
        marker
    );

    encrypted_resources_change_without_a_failed_read(env, &pa).await;
}

/// Waits until tenant A's `EncryptionAtRestConfigured` is `True` for its current generation
/// with a message `wanted` accepts (`what` names it in the timeout).
async fn wait_configured(env: &Env, what: &str, wanted: fn(&str) -> bool) {
    env.wait_kcp(
        "tenant-a",
        "demo",
        &format!("EncryptionAtRestConfigured=True for {what}"),
        5 * MINUTE,
        move |k| {
            k.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "EncryptionAtRestConfigured"))
                .is_some_and(|c| {
                    c.status == "True"
                        && wanted(&c.message)
                        && c.observed_generation == k.metadata.generation
                })
        },
    )
    .await
    .unwrap();
}

/// The message of tenant A's `EncryptionAtRestConfigured`, when `True`.
async fn configured_message(env: &Env) -> Option<String> {
    Api::<KamajiControlPlane>::namespaced(env.client(), "tenant-a")
        .get("demo")
        .await
        .ok()?
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "EncryptionAtRestConfigured" && c.status == "True")
        .map(|c| c.message)
}

/// `spec.encryptionAtRest.resources` changed after creation: ConfigMaps, stored as plain
/// text, are added (read encrypted by every API server, then written encrypted, then every
/// one rewritten), then removed again (written as plain text, rewritten, dropped from the
/// configuration), while a client reads one on a new connection every 250 ms.
async fn encrypted_resources_change_without_a_failed_read(env: &Env, prefix: &str) {
    let marker = "configmap-text-that-must-not-stay-in-etcd";
    let config_maps = Api::<ConfigMap>::namespaced(
        env.tenant_client("tenant-a", "demo").await.unwrap(),
        "default",
    );
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "at-rest", "namespace": "default"},
        "data": {"value": marker},
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let admin = datastore_admin(env);
    let key = format!("{prefix}/configmaps/default/at-rest");
    let plain = |v: &[u8]| v.windows(marker.len()).any(|w| w == marker.as_bytes());
    assert!(
        plain(&raw_value(&admin, &key).await.unwrap()),
        "ConfigMaps start as plain text"
    );
    let probe = ReadyzProbe::reading(
        env.tenant_config("tenant-a", "demo").await.unwrap(),
        "/api/v1/namespaces/default/configmaps/at-rest",
    );
    probe.answered(MINUTE).await.unwrap();
    let resources = |list: serde_json::Value| serde_json::json!({"spec": {"encryptionAtRest": {"resources": list}}});
    assert!(
        configured_message(env)
            .await
            .is_some_and(|m| m.contains("secrets") && !m.contains("configmaps")),
        "EncryptionAtRestConfigured names what is encrypted (the Secrets) from the start"
    );
    env.patch_kcp(
        "tenant-a",
        "demo",
        resources(serde_json::json!(["configmaps"])),
    )
    .await
    .unwrap();
    wait_configured(env, "secrets, configmaps", |m| {
        m.contains("secrets, configmaps")
    })
    .await;
    let stored = raw_values_under(&admin, &format!("{prefix}/configmaps/")).await;
    assert!(
        stored.len() >= 2,
        "the tenant's ConfigMaps: {}",
        stored.len()
    );
    let plain_left: Vec<&String> = stored
        .iter()
        .filter(|(_, v)| !v.starts_with(b"k8s:enc:secretbox:v1:key-2:"))
        .map(|(k, _)| k)
        .collect();
    assert!(
        plain_left.is_empty(),
        "ConfigMaps not rewritten encrypted: {plain_left:?}"
    );
    assert!(!plain(&raw_value(&admin, &key).await.unwrap()));

    env.patch_kcp("tenant-a", "demo", resources(serde_json::Value::Null))
        .await
        .unwrap();
    wait_configured(env, "the Secrets alone", |m| !m.contains("configmaps")).await;
    let config = env
        .secret("tenant-a", "demo-encryption.config")
        .await
        .unwrap();
    let parsed = kamaji_bootstrap::encryption::Configuration::parse(&secret_text(
        &config,
        kamaji_bootstrap::encryption::CONFIGURATION_KEY,
    ))
    .unwrap();
    assert!(parsed.resources.is_empty(), "{:?}", parsed.resources);
    assert!(
        config
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.contains("encryption-key-rotation-phase")),
        "the change is over"
    );
    let (ok, failed, failures) = probe.stop().await;
    assert_eq!(
        failed,
        0,
        "{failed} of {} reads of the ConfigMap failed while its encryption changed: {failures:?}",
        ok + failed
    );
    assert!(
        plain(&raw_value(&admin, &key).await.unwrap()),
        "rewritten as plain text"
    );

    let encrypted_left = raw_values_under(&admin, &format!("{prefix}/configmaps/"))
        .await
        .into_iter()
        .filter(|(_, v)| v.starts_with(b"k8s:enc:"))
        .count();
    assert_eq!(
        encrypted_left, 0,
        "ConfigMaps left encrypted after their removal"
    );
    let cm = config_maps.get("at-rest").await.unwrap();
    assert_eq!(cm.data.unwrap()["value"], marker);
    let secret = raw_value(&admin, &format!("{prefix}/secrets/default/at-rest")).await;
    assert!(
        secret.unwrap().starts_with(b"k8s:enc:secretbox:v1:key-2:"),
        "Secrets stay encrypted"
    );
}

/// Runs etcd's own client against the shared datastore as tenant `ns`'s kube-apiserver does:
/// with its `demo-apiserver-etcd-client` certificate. Returns whether it succeeded and its
/// output.
async fn etcdctl_as(env: &Env, ns: &str, args: &[&str]) -> (bool, String) {
    let secret = env.secret(ns, "demo-apiserver-etcd-client").await.unwrap();
    let dir = env.cluster.dir().join(format!("etcdctl-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    for key in ["tls.crt", "tls.key", "ca.crt"] {
        std::fs::write(dir.join(key), secret_text(&secret, key)).unwrap();
    }
    let out = tokio::process::Command::new(env.cluster.tools().path("etcdctl"))
        .arg(format!("--endpoints={}", env.datastore.url()))
        .arg(format!("--cacert={}", dir.join("ca.crt").display()))
        .arg(format!("--cert={}", dir.join("tls.crt").display()))
        .arg(format!("--key={}", dir.join("tls.key").display()))
        .arg("--command-timeout=10s")
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Deletion removes every object and the datastore prefix, then the claim on the schema; a
/// second control plane on the tenant's schema was refused before and its deletion took
/// nothing of the tenant's.
// Not shared: its delete-for-move leaves the tenant's datastore keys, etcd user and role and
// schema claim behind on purpose, which the next test would find.
#[kamaji_e2e::test]
async fn deleting_the_cluster_removes_every_object_and_the_datastore_prefix() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    let env = &env;
    env.f0_available("tenant-a", "demo", 1).await.unwrap();
    let prefix = etcd_prefix(env, "tenant-a", "demo").await;
    let ds = datastore_admin(env);
    let keys = keys_under(&ds, &prefix).await;
    assert!(keys > 0, "the tenant stored keys");
    let schema = prefix.trim_start_matches('/').to_owned();
    let claim = || claim_on(&ds, &schema);
    assert_eq!(
        claim().await,
        datastore::Claim::HeldBy("tenant-a/demo".into())
    );
    let (authentication, roles) = authentication_and_roles(&ds).await;
    assert!(
        authentication,
        "etcd authentication is off on the DataStore"
    );
    assert!(roles.contains(&schema), "no etcd role {schema}: {roles:?}");
    second_control_plane_on_the_same_schema_is_refused(env, &schema).await;
    assert!(
        keys_under(&ds, &prefix).await >= keys,
        "deleting the refused control plane removed the holder's keys"
    );
    assert_eq!(
        claim().await,
        datastore::Claim::HeldBy("tenant-a/demo".into())
    );
    Api::<Namespace>::all(env.tenant_client("tenant-a", "demo").await.unwrap())
        .list(&ListParams::default())
        .await
        .unwrap();

    let clusters = cluster_api(env, "tenant-a", "v1beta1");
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
    assert_eq!(keys_under(&ds, &prefix).await, 0, "the prefix is empty");
    assert_eq!(
        claim().await,
        datastore::Claim::Free,
        "the claim outlived the keys"
    );
    let (_, roles) = authentication_and_roles(&ds).await;
    assert!(
        !roles.contains(&schema),
        "the etcd role {schema} outlived the tenant"
    );

    // The same name again starts from an empty prefix and comes up.
    let k = env.f0_available("tenant-a", "demo", 1).await.unwrap();
    assert!(k.status.unwrap().initialized.unwrap());

    // Deleted for `clusterctl move` (its delete-for-move annotation, the finalizer still on):
    // the control plane lives on elsewhere, so the finalizer goes and the prefix stays.
    let kcps: Api<KamajiControlPlane> = Api::namespaced(env.client(), "tenant-a");
    assert!(
        keys_under(&ds, &prefix).await > 0,
        "the new tenant stored keys"
    );
    env.patch_kcp(
        "tenant-a",
        "demo",
        serde_json::json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}}),
    )
    .await
    .unwrap();
    let uid = kcps.get("demo").await.unwrap().metadata.uid.unwrap();
    assert!(
        kcps.get("demo")
            .await
            .unwrap()
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&kamaji_api::meta::FINALIZER.to_owned())
    );
    kcps.delete("demo", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(
        MINUTE,
        await_condition(kcps, "demo", conditions::is_deleted(&uid)),
    )
    .await
    .expect("the finalizer is released for a move")
    .unwrap();
    assert!(
        keys_under(&ds, &prefix).await > 0,
        "a delete-for-move leaves the tenant's datastore keys"
    );
}

/// sha256 of each data key of the tenant's Secrets that carry its identity: the CA, the
/// ServiceAccount key pair, the front-proxy CA, the datastore client certificate, the
/// `<cluster>-kubeconfig` handed to users and the key its Secrets are encrypted with at rest.
async fn identity(env: &Env, ns: &str) -> std::collections::BTreeMap<String, String> {
    use sha2::Digest as _;
    let mut out = std::collections::BTreeMap::new();
    let names = kamaji_api::names::ObjectNames::new("demo", "demo");
    for name in [
        names.ca_secret(),
        names.service_account_secret(),
        names.front_proxy_ca_secret(),
        names.apiserver_etcd_client_secret(),
        names.kubeconfig_secret(),
        names.internal_secret(kamaji_api::names::InternalSecret::Encryption),
    ] {
        let secret = env.secret(ns, &name).await.unwrap();
        for (key, value) in secret.data.unwrap_or_default() {
            out.insert(
                format!("{name}/{key}"),
                hex::encode(sha2::Sha256::digest(&value.0)),
            );
        }
    }
    out
}

/// B19 items 3–4: `clusterctl move` (the real one) of namespace tenant-a to a second
/// management cluster that reaches the same datastore, both installed by `clusterctl init`
/// (Cluster API and the kamaji-rs manager run as pods of their images under their shipped
/// RBAC on each side: the source's manager releases the finalizer for the move, the target's
/// takes the tenant over). The dry run lists every Secret of the
/// tenant; after the move the target runs the control plane with the CA, SA key, front-proxy
/// CA, datastore client certificate and kubeconfig first created, so credentials issued before
/// the move (a client certificate, a ServiceAccount token) keep working and new joins pass.
#[kamaji_e2e::test]
async fn b19_clusterctl_move_keeps_the_tenant_identity() {
    let _serial = serial();
    let source = Env::builder()
        .installed_by_clusterctl(true)
        .start()
        .await
        .unwrap();
    // The address the load balancer hands out, and keeps for the Service after the move: one
    // of the pool on the underlay, which the managers' pods reach (a loopback address would be
    // a pod's own).
    let address = kamaji_machine::network::load_balancer_addresses()
        .unwrap()
        .last()
        .unwrap()
        .to_string();
    source.namespace("tenant-a").await.unwrap();
    source
        .apply_yaml(
            &F0::new("tenant-a", "demo")
                .network(&format!(
                    "serviceType: LoadBalancer, serviceAddress: {address}"
                ))
                .yaml(),
        )
        .await
        .unwrap();
    source
        .wait_kcp_condition("tenant-a", "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    source
        .wait_cluster_condition(
            "tenant-a",
            "demo",
            "ControlPlaneInitialized",
            "True",
            2 * MINUTE,
        )
        .await
        .unwrap();
    let endpoint = format!("{address}:6443");

    // What exists before the move: identity, a client's kubeconfig, a ServiceAccount token,
    // tenant data.
    let before = identity(&source, "tenant-a").await;
    assert!(before.len() >= 9, "identity Secrets: {:?}", before.keys());
    let kubeconfig = source.tenant_config("tenant-a", "demo").await.unwrap();
    let tenant = kube::Client::try_from(kubeconfig.clone()).unwrap();
    let marker: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "written-before-the-move"}, "data": {"k": "v"}
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(tenant.clone(), "default")
        .create(&PostParams::default(), &marker)
        .await
        .unwrap();
    let token = kamaji_e2e::default_service_account_token(&tenant).await;
    let prefix = etcd_prefix(&source, "tenant-a", "demo").await;
    let ds = datastore_admin(&source);
    let keys_before = keys_under(&ds, &prefix).await;

    let target = Env::builder()
        .installed_by_clusterctl(true)
        .start_sharing_datastore(&source)
        .await
        .unwrap();
    let to = format!(
        "--to-kubeconfig={}",
        target.cluster.kubeconfig_path().display()
    );

    // 3. The dry run lists every Secret of the tenant.
    let plan = source
        .clusterctl(&["move", "--dry-run", &to, "--namespace=tenant-a", "-v", "1"])
        .unwrap();
    let secrets = Api::<Secret>::namespaced(source.client(), "tenant-a")
        .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=demo"))
        .await
        .unwrap();
    assert!(secrets.items.len() >= 5);
    for s in &secrets {
        let name = s.metadata.name.clone().unwrap();
        assert!(
            plan.lines()
                .any(|l| l.contains("Creating") && l.contains(&format!("\"{name}\""))),
            "the dry run does not move Secret {name}:\n{plan}"
        );
    }
    assert!(
        plan.lines()
            .any(|l| l.contains("Creating") && l.contains("KamajiControlPlane")),
        "{plan}"
    );
    // Among them, by name, the identity: CA, SA key pair, front-proxy CA, datastore client
    // certificate, kubeconfig; each owned by the KamajiControlPlane (the chain clusterctl follows).
    for name in before
        .keys()
        .filter_map(|k| k.split_once('/').map(|(n, _)| n))
    {
        assert!(
            plan.contains(&format!("Secret=\"{name}\"")),
            "{name} not in the move:\n{plan}"
        );
        let s = secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name} lacks the cluster-name label"));
        assert!(
            s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "KamajiControlPlane" && o.name == "demo"),
            "{name} is not owned by KamajiControlPlane/demo"
        );
    }

    // The move itself.
    let log = source
        .clusterctl(&["move", &to, "--namespace=tenant-a", "-v", "1"])
        .unwrap();
    println!("clusterctl move:\n{log}");

    // The source keeps nothing of the tenant; its Deployment and Service go with the owner.
    assert!(
        Api::<KamajiControlPlane>::namespaced(source.client(), "tenant-a")
            .get_opt("demo")
            .await
            .unwrap()
            .is_none()
    );
    // Its Deployment and pods go with their owner (garbage collection), so the load
    // balancer's address is left to the target's Service.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(source.client(), "tenant-a");
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    while !pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
        || source.deployment("tenant-a", "demo").await.is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the source still runs the control plane 2 minutes after the move"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // 4. The target runs the control plane with the same identity.
    target
        .wait_kcp_condition("tenant-a", "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    target
        .wait_cluster_condition(
            "tenant-a",
            "demo",
            "ControlPlaneAvailable",
            "True",
            2 * MINUTE,
        )
        .await
        .unwrap();
    assert_eq!(identity(&target, "tenant-a").await, before);
    let moved = Api::<KamajiControlPlane>::namespaced(target.client(), "tenant-a")
        .get("demo")
        .await
        .unwrap();
    let ep = moved
        .spec
        .control_plane_endpoint
        .clone()
        .unwrap_or_default();
    assert_eq!(
        format!(
            "{}:{}",
            ep.host.unwrap_or_default(),
            ep.port.unwrap_or_default()
        ),
        endpoint
    );
    assert!(
        keys_under(&ds, &prefix).await >= keys_before,
        "the tenant's datastore keys survive the move"
    );

    // Credentials issued before the move keep working: the client certificate of the kubeconfig
    // (tenant data still there) and the ServiceAccount token (the same SA key verifies it).
    // The load balancer (the stand-in's) takes the address over within seconds.
    let deadline = tokio::time::Instant::now() + MINUTE;
    while !kamaji_reconciler::tenant::readyz(&kube::Client::try_from(kubeconfig.clone()).unwrap())
        .await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the endpoint does not reach the target's API servers"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let tenant = kube::Client::try_from(kubeconfig.clone()).unwrap();
    assert_eq!(
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(tenant, "default")
            .get("written-before-the-move")
            .await
            .unwrap()
            .data
            .unwrap()["k"],
        "v"
    );
    let user = whoami_with_token(kubeconfig, &token).await;
    assert_eq!(user, "system:serviceaccount:default:default");

    // New joins succeed against the moved control plane.
    kamaji_e2e::kubeadm_discovery(&target, "tenant-a", "demo", &endpoint)
        .await
        .unwrap();
    drop(target);
}

/// The user name a tenant API server gives `token` (a SelfSubjectReview through the server
/// and CA of `tenant`, with the token as the only credential).
async fn whoami_with_token(mut config: kube::Config, token: &str) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    config.auth_info = serde_json::from_value(serde_json::json!({ "token": token })).unwrap();
    let client = kube::Client::try_from(config).unwrap();
    Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .user_info
        .unwrap()
        .username
        .unwrap()
}

/// The `host:port` of a `spec.controlPlaneEndpoint` in a JSON object (empty when unset).
fn endpoint_in(v: &serde_json::Value) -> String {
    let e = &v["spec"]["controlPlaneEndpoint"];
    match (e["host"].as_str(), e["port"].as_i64()) {
        (Some(h), Some(p)) if !h.is_empty() => format!("{h}:{p}"),
        _ => String::new(),
    }
}

/// The endpoint the contract way (issue 13): an endpoint already set — by an infrastructure
/// provider that owns its address, or by the user on the KamajiControlPlane — is served as is
/// (serving certificate, the LoadBalancer asked for that address) and never overwritten; the
/// infrastructure cluster's `spec.controlPlaneEndpoint` is written for any kind whose CRD
/// carries the contract label and declares the field, only while it is empty, with a patch of
/// that field alone, which an `OpenStackCluster`-style policy (every other spec change
/// refused) accepts; a kind without the field is never written; a user's endpoint that
/// differs from the infrastructure provider's is refused naming both.
#[kamaji_e2e::test(shared)]
async fn an_endpoint_set_elsewhere_is_served_and_the_infrastructure_clusters_is_written_only_while_empty(
    env: &Env,
) {
    use kamaji_testenv::standins::{
        infrastructure_cluster_crd_yaml, openstack_cluster_crd_yaml,
        spec_immutable_but_endpoint_policy_yaml,
    };
    const INFRA: &str = "infrastructure.cluster.x-k8s.io";
    let crds = [
        openstack_cluster_crd_yaml(),
        infrastructure_cluster_crd_yaml("VipCluster", "v1beta2", &["v1beta2"], true),
        infrastructure_cluster_crd_yaml("PlainCluster", "v1beta2", &["v1beta2"], false),
    ]
    .map(|y| serde_yaml::from_str(&y).unwrap());
    env.cluster.apply_crds(&crds).await.unwrap();
    env.apply_yaml(&spec_immutable_but_endpoint_policy_yaml(
        "openstackclusters",
    ))
    .await
    .unwrap();
    let ns = "infra";
    env.namespace(ns).await.unwrap();
    let objects = |version: &str, kind: &str| -> Api<DynamicObject> {
        Api::namespaced_with(
            env.client(),
            ns,
            &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                INFRA, version, kind,
            )),
        )
    };
    let (os, vips, plains) = (
        objects("v1alpha6", "OpenStackCluster"),
        objects("v1beta2", "VipCluster"),
        objects("v1beta2", "PlainCluster"),
    );
    env.apply_yaml(&format!(
        "apiVersion: {INFRA}/v1alpha6
kind: OpenStackCluster
metadata: {{name: os, namespace: {ns}}}
spec: {{cloudName: openstack, externalNetworkId: ext, disableAPIServerFloatingIP: true, apiServerLoadBalancer: {{enabled: false}}}}
---
apiVersion: {INFRA}/v1beta2
kind: VipCluster
metadata: {{name: vip, namespace: {ns}}}
spec: {{region: one, controlPlaneEndpoint: {{host: 10.200.0.222, port: 6443}}}}
---
apiVersion: {INFRA}/v1beta2
kind: VipCluster
metadata: {{name: clash, namespace: {ns}}}
spec: {{region: one, controlPlaneEndpoint: {{host: 10.200.0.220, port: 6443}}}}
---
apiVersion: {INFRA}/v1beta2
kind: PlainCluster
metadata: {{name: plain, namespace: {ns}}}
spec: {{cloudName: plain}}
"
    ))
    .await
    .unwrap();
    // The stand-in policy is in force before anything can patch: a spec change is refused
    // (the API server compiles a new policy within seconds).
    let refused = tokio::time::timeout(MINUTE, async {
        for i in 0.. {
            let change = serde_json::json!({"spec": {"cloudName": format!("changed-{i}")}});
            match os
                .patch("os", &PatchParams::default(), &Patch::Merge(&change))
                .await
            {
                Err(kube::Error::Api(e)) if e.message.contains("immutable") => return,
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await;
    assert!(
        refused.is_ok(),
        "the OpenStackCluster policy never refused a spec change"
    );
    let os_before = os.get("os").await.unwrap().data["spec"].clone();
    let plain_before = plains.get("plain").await.unwrap().data["spec"].clone();

    let to = |version: &str, kind: &str| (format!("{INFRA}/{version}"), kind.to_owned());
    for (name, infra, own) in [
        ("os", Some(to("v1alpha6", "OpenStackCluster")), None),
        ("vip", Some(to("v1beta2", "VipCluster")), None),
        ("plain", Some(to("v1beta2", "PlainCluster")), None),
        ("user", None, Some("10.200.0.221")),
        (
            "clash",
            Some(to("v1beta2", "VipCluster")),
            Some("10.200.0.219"),
        ),
    ] {
        let mut f = F0::new(ns, name).replicas(1);
        if let Some((api_version, kind)) = &infra {
            f = f.infrastructure(api_version, kind);
        }
        if let Some(host) = own {
            f = f.spec(&format!(
                "  controlPlaneEndpoint: {{host: {host}, port: 6443}}\n"
            ));
        }
        env.apply_yaml(&f.yaml()).await.unwrap();
    }
    // Providers that need nothing from the control plane are provisioned at once; the
    // OpenStack stand-in once its endpoint is set, as CAPO with no load balancer of its own.
    for (version, kind, name) in [
        ("v1beta2", "VipCluster", "vip"),
        ("v1beta2", "PlainCluster", "plain"),
        ("v1beta2", "VipCluster", "clash"),
    ] {
        env.mark_infrastructure_provisioned(ns, version, kind, name)
            .await
            .unwrap();
    }
    let written = env
        .wait_for(
            os.clone(),
            "OpenStackCluster",
            "os",
            "spec.controlPlaneEndpoint set",
            4 * MINUTE,
            |o: &DynamicObject| !endpoint_in(&o.data).is_empty(),
            |o| o.data["spec"].to_string(),
        )
        .await
        .unwrap_or_else(|e| {
            let log = env.manager_full_log();
            let infra: Vec<_> = log
                .lines()
                .filter(|l| l.contains("infrastructure"))
                .collect();
            panic!("{e:#}\n{}", infra.join("\n"))
        });
    env.mark_openstack_cluster_provisioned(ns, "os")
        .await
        .unwrap();
    for name in ["os", "vip", "plain", "user"] {
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await
            .unwrap();
    }
    let kcps: Api<KamajiControlPlane> = Api::namespaced(env.client(), ns);
    let endpoints = async |name: &str| {
        let kcp = serde_json::to_value(kcps.get(name).await.unwrap()).unwrap();
        // Cluster API's copy, made on a reconcile of its own.
        let cluster = env.wait_cluster_endpoint(ns, name, MINUTE).await.unwrap();
        (endpoint_in(&kcp), endpoint_in(&cluster.data))
    };
    // OpenStack-shaped: the control plane's own endpoint, written there and nothing else.
    let (kcp, cluster) = endpoints("os").await;
    assert_eq!(
        (endpoint_in(&written.data), cluster.clone()),
        (kcp.clone(), kcp.clone())
    );
    let mut os_after = os.get("os").await.unwrap().data["spec"].clone();
    os_after
        .as_object_mut()
        .unwrap()
        .remove("controlPlaneEndpoint");
    assert_eq!(
        os_after, os_before,
        "OpenStackCluster spec changed beyond controlPlaneEndpoint"
    );
    // A provider that owns its address: served there, the LoadBalancer asked for it.
    assert_eq!(
        endpoints("vip").await,
        ("10.200.0.222:6443".into(), "10.200.0.222:6443".into())
    );
    let services: Api<Service> = Api::namespaced(env.client(), ns);
    let vip_service = services.get("vip").await.unwrap();
    assert_eq!(
        vip_service
            .spec
            .as_ref()
            .unwrap()
            .load_balancer_ip
            .as_deref(),
        Some("10.200.0.222")
    );
    let vip_object = vips.get("vip").await.unwrap();
    assert_eq!(endpoint_in(&vip_object.data), "10.200.0.222:6443");
    // A kind without the field is left alone.
    assert_eq!(
        plains.get("plain").await.unwrap().data["spec"],
        plain_before
    );
    // The user's endpoint: served, not overwritten, copied to the Cluster.
    assert_eq!(
        endpoints("user").await,
        ("10.200.0.221:6443".into(), "10.200.0.221:6443".into())
    );
    let tenant = env.tenant_client(ns, "user").await.unwrap();
    assert!(kamaji_reconciler::tenant::readyz(&tenant).await);
    // Two endpoints that disagree: refused naming both, nothing created.
    let clash = env
        .wait_kcp_condition(ns, "clash", "SpecValid", "False", MINUTE)
        .await
        .unwrap();
    let message = serde_json::to_string(&clash.status).unwrap();
    // (The provider's, or the Cluster's once Cluster API copied the provider's there.)
    assert!(
        message.contains("spec.controlPlaneEndpoint: 10.200.0.219:6443 differs from")
            && (message.contains("VipCluster.spec.controlPlaneEndpoint 10.200.0.220:6443")
                || message.contains("Cluster.spec.controlPlaneEndpoint 10.200.0.220:6443")),
        "{message}"
    );
    assert!(services.get_opt("clash").await.unwrap().is_none());
    // The audit log: the manager's only write to any infrastructure object is that one patch
    // of OpenStackCluster os, and its body is spec.controlPlaneEndpoint alone.
    let infra_writes: Vec<_> = env
        .manager_writes()
        .unwrap()
        .into_iter()
        .filter(|e| e.object_ref.as_ref().and_then(|o| o.api_group.as_deref()) == Some(INFRA))
        .collect();
    assert_eq!(infra_writes.len(), 1, "{infra_writes:#?}");
    let w = &infra_writes[0];
    let target = w.object_ref.as_ref().unwrap();
    assert_eq!(
        (
            w.verb.as_str(),
            target.resource.as_str(),
            target.name.as_deref(),
            target.subresource.as_deref()
        ),
        ("patch", "openstackclusters", Some("os"), None)
    );
    let (host, port) = kcp.rsplit_once(':').unwrap();
    assert_eq!(
        w.request_object,
        Some(
            serde_json::json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": port.parse::<u16>().unwrap()}}})
        )
    );
}

/// `--watch-filter` (Cluster API's label convention, issue 13) and `--namespace` (clusterctl's):
/// two managers split the tenants by the `cluster.x-k8s.io/watch-filter` label of Cluster and
/// KamajiControlPlane, a third reconciles one namespace only; each
/// reconciles only its own, a tenant without the label is touched by neither until it gets
/// one, and with leader election each value elects its own leader (a Lease per value in the
/// same namespace), so the two never wait on each other.
#[kamaji_e2e::test]
async fn managers_with_a_watch_filter_split_the_tenants_by_label() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kamaji_reconciler::controller::WATCH_FILTER_LABEL;
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    env.kill_manager();
    let lease_ns = env.manager_identity().namespace.clone();
    let mut managers = Vec::new();
    for value in ["shard-a", "shard-b"] {
        let flags = [
            "--leader-elect".to_owned(),
            format!("--leader-election-namespace={lease_ns}"),
            format!("--watch-filter={value}"),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        managers.push(
            env.spawn_manager(kamaji_testenv::free_port().unwrap(), &flags)
                .unwrap(),
        );
    }
    // A third one scoped by `--namespace` (the clusterctl contract), without a filter.
    managers.push(
        env.spawn_manager(
            kamaji_testenv::free_port().unwrap(),
            &["--namespace=scoped"],
        )
        .unwrap(),
    );
    env.namespace("scoped").await.unwrap();
    env.apply_yaml(&f0("scoped", "c", 1)).await.unwrap();
    let ns = "split";
    env.namespace(ns).await.unwrap();
    for (name, shard) in [
        ("a", Some("shard-a")),
        ("b", Some("shard-b")),
        ("none", None),
    ] {
        let mut f = F0::new(ns, name).replicas(1);
        if let Some(value) = shard {
            f = f.label(WATCH_FILTER_LABEL, value);
        }
        env.apply_yaml(&f.yaml()).await.unwrap();
    }
    for name in ["a", "b"] {
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await
            .unwrap();
    }
    // The manager's log without its colours: every pass ends with `reconciled kcp=<ref>`
    // (an owned object of another shard's tenant wakes nothing: "not found in local store").
    let log = |i: usize| {
        let text = std::fs::read_to_string(managers[i].log_path()).unwrap_or_default();
        let mut plain = String::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                chars.by_ref().find(|c| *c == 'm');
            } else {
                plain.push(c);
            }
        }
        plain
    };
    let reconciled = |i: usize, name: &str| {
        let text = log(i);
        let key = format!("/{name}.{ns}");
        text.lines()
            .any(|l| l.contains(" reconciled kcp=") && l.trim_end().ends_with(&key))
    };
    assert!(
        reconciled(0, "a") && !reconciled(0, "b"),
        "shard-a's manager (a: {}, b: {}):\n{}",
        reconciled(0, "a"),
        reconciled(0, "b"),
        log(0)
    );
    assert!(
        reconciled(1, "b") && !reconciled(1, "a"),
        "shard-b's manager:\n{}",
        log(1)
    );
    assert!(!reconciled(0, "none") && !reconciled(1, "none") && !reconciled(2, "none"));
    env.wait_kcp_condition("scoped", "c", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let scoped = log(2);
    let passes: Vec<&str> = scoped
        .lines()
        .filter(|l| l.contains(" reconciled kcp="))
        .collect();
    assert!(
        !passes.is_empty() && passes.iter().all(|l| l.trim_end().ends_with(".scoped")),
        "the --namespace=scoped manager reconciled outside its namespace:\n{scoped}"
    );
    assert!(!reconciled(0, "c") && !reconciled(1, "c"));
    let kcps: Api<KamajiControlPlane> = Api::namespaced(env.client(), ns);
    let none = kcps.get("none").await.unwrap();
    assert!(
        none.metadata.finalizers.unwrap_or_default().is_empty() && none.status.is_none(),
        "an unlabelled tenant was touched"
    );
    let leases: Api<Lease> = Api::namespaced(env.client(), &lease_ns);
    let holder = async |name: &str| {
        leases
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("Lease {name}: {e}"))
            .spec
            .and_then(|s| s.holder_identity)
    };
    let (ha, hb) = (
        holder("kamaji-rs-manager-shard-a").await,
        holder("kamaji-rs-manager-shard-b").await,
    );
    assert!(ha.is_some() && hb.is_some() && ha != hb, "{ha:?} {hb:?}");
    // Labelled later (both objects, as CAPI's convention asks), it is picked up by its shard.
    let label = serde_json::json!({"metadata": {"labels": {WATCH_FILTER_LABEL: "shard-b"}}});
    env.capi(ns, "v1beta2", "Cluster")
        .patch("none", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    kcps.patch("none", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    env.wait_kcp_condition(ns, "none", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    assert!(reconciled(1, "none") && !reconciled(0, "none"));
}

/// The contract conditions as Cluster API mirrors them onto the Cluster (issue 13):
/// `ControlPlaneAvailable=False` with kamaji-rs's reason while the tenant is not ready, then
/// `RollingOut`, `ScalingUp`, `ScalingDown` and `Deleting` each `True` on the Cluster while
/// the control plane does that. A watch on the Cluster records every condition it ever
/// carried.
#[kamaji_e2e::test(shared)]
async fn the_cluster_mirrors_available_rolling_out_scaling_and_deleting(env: &Env) {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};
    let ns = "mirror";
    env.namespace(ns).await.unwrap();
    let clusters = env.capi(ns, "v1beta2", "Cluster");
    let seen: Arc<Mutex<BTreeSet<(String, String, String)>>> = Arc::default();
    let record = seen.clone();
    let watch = tokio::spawn(
        watcher(
            clusters.clone(),
            watcher::Config::default().fields("metadata.name=demo"),
        )
        .for_each(move |event| {
            if let Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) = event {
                let conds = c.data["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut s = record.lock().unwrap();
                for cond in conds {
                    let field = |k: &str| cond[k].as_str().unwrap_or_default().to_owned();
                    s.insert((field("type"), field("status"), field("reason")));
                }
            }
            std::future::ready(())
        }),
    );
    env.apply_yaml(&f0(ns, "demo", 1)).await.unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let wait_cluster = async |type_: &str, status: &str| {
        env.wait_cluster_condition(ns, "demo", type_, status, 2 * MINUTE)
            .await
            .unwrap();
    };
    wait_cluster("ControlPlaneAvailable", "True").await;
    // Scale up, roll out (a changed argument), scale down.
    env.patch_kcp(ns, "demo", serde_json::json!({"spec": {"replicas": 2}}))
        .await
        .unwrap();
    wait_rolled_out(env, ns, "demo", 2, 3 * MINUTE, |_| true)
        .await
        .unwrap();
    wait_cluster("ScalingUp", "False").await;
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"spec": {"apiServer": {"extraArgs": ["--audit-log-maxage=7"]}}}),
    )
    .await
    .unwrap();
    wait_rolled_out(
        env,
        ns,
        "demo",
        2,
        4 * MINUTE,
        api_server_has("--audit-log-maxage=7"),
    )
    .await
    .unwrap();
    wait_cluster("RollingOut", "False").await;
    env.patch_kcp(ns, "demo", serde_json::json!({"spec": {"replicas": 1}}))
        .await
        .unwrap();
    wait_rolled_out(env, ns, "demo", 1, 3 * MINUTE, |_| true)
        .await
        .unwrap();
    wait_cluster("ScalingDown", "False").await;
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    let gone = tokio::time::timeout(3 * MINUTE, async {
        while clusters.get_opt("demo").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await;
    watch.abort();
    let seen = seen.lock().unwrap().clone();
    assert!(gone.is_ok(), "the Cluster was not deleted: {seen:#?}");
    let had = |type_: &str, status: &str| seen.iter().any(|(t, s, _)| t == type_ && s == status);
    assert!(
        seen.iter().any(|(t, s, r)| t == "ControlPlaneAvailable"
            && s == "False"
            && r == kamaji_api::conditions::reasons::NOT_AVAILABLE),
        "{seen:#?}"
    );
    // ScalingDown lasts while the removed pod terminates (its API server serves through the
    // pre-stop pause), long enough for Cluster API to mirror it.
    for type_ in ["RollingOut", "ScalingUp", "ScalingDown", "Deleting"] {
        assert!(
            had(type_, "True"),
            "{type_}=True never on the Cluster: {seen:#?}"
        );
    }
}

/// Deletes Cluster `ns/name` and waits until it and its KamajiControlPlane are gone.
async fn delete_cluster(env: &Env, ns: &str, name: &str) {
    let clusters = cluster_api(env, ns, "v1beta1");
    clusters
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    let kcps: Api<KamajiControlPlane> = Api::namespaced(env.client(), ns);
    let uid = kcps
        .get(name)
        .await
        .map(|k| k.metadata.uid.unwrap_or_default())
        .unwrap_or_default();
    tokio::time::timeout(
        3 * MINUTE,
        await_condition(kcps, name, conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "KamajiControlPlane {ns}/{name} not deleted in 3 minutes\nmanager log:\n{}",
            env.manager_log()
        )
    })
    .unwrap();
}

/// Issue 17 (colliding datastore schemas, cf. Kamaji's CVE-2026-62246): a second control plane
/// setting the `dataStoreSchema` a running one holds would run on the same etcd prefix,
/// reading the other's Secrets, and deleting it would delete the other's keys. It is refused
/// with `DataStoreReady=False` (`DataStoreSchemaInUse`, naming the field and the holder),
/// nothing of it is written, and it is deleted (the caller checks the holder's keys and
/// claim are intact). (Negative control: without the claim it gets a Deployment on the
/// holder's prefix.)
async fn second_control_plane_on_the_same_schema_is_refused(env: &Env, schema: &str) {
    env.namespace("claim-b").await.unwrap();
    env.apply_yaml(
        &F0::new("claim-b", "demo")
            .replicas(1)
            .spec(&format!("  dataStoreSchema: {schema}\n"))
            .yaml(),
    )
    .await
    .unwrap();
    let refused = env
        .wait_kcp_condition("claim-b", "demo", "DataStoreReady", "False", 2 * MINUTE)
        .await
        .unwrap();
    let condition = refused
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "DataStoreReady")
        .unwrap();
    assert_eq!(condition.reason, "DataStoreSchemaInUse");
    assert!(
        condition.message.contains("spec.dataStoreSchema")
            && condition.message.contains("tenant-a/demo"),
        "the refusal does not name the field and the holder: {}",
        condition.message
    );
    assert!(
        Api::<Deployment>::namespaced(env.client(), "claim-b")
            .get_opt("demo")
            .await
            .unwrap()
            .is_none(),
        "the refused control plane got a Deployment on the holder's prefix"
    );
    let written = Api::<Secret>::namespaced(env.client(), "claim-b")
        .list(&ListParams::default().labels("cluster.x-k8s.io/cluster-name=demo"))
        .await
        .unwrap();
    assert!(
        written.items.is_empty(),
        "the refused control plane wrote Secrets: {:?}",
        written
            .items
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    delete_cluster(env, "claim-b", "demo").await;
}
