//! What trying kamaji-rs as a user found (issue "Fix what trying it as a user would found"),
//! each against the real chain: sibling clusters whose names share a prefix, a deleted CA,
//! a stuck upgrade backed out, endpoint fields after the endpoint is set, a failing pass
//! behind a stale status, namespace deletion and the datastore, drift of the Deployment,
//! and the move of internal Secrets to their new names on upgrade.

#![cfg(real_programs_as_root)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kamaji_api::KamajiControlPlane;
use kamaji_api::names::{InternalSecret, ObjectNames};
use kamaji_e2e::{
    Env, F0, datastore_admin, etcd_prefix, f0, keys_under, secret_text, serial, wait_rolled_out,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};

const MINUTE: Duration = Duration::from_mins(1);

/// Condition `type_` of a KamajiControlPlane.
fn condition(kcp: &KamajiControlPlane, type_: &str) -> Option<Condition> {
    kcp.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_).cloned())
}

/// Whether the KamajiControlPlane has condition `type_` with `status` and `reason`.
fn has(kcp: &KamajiControlPlane, type_: &str, status: &str, reason: &str) -> bool {
    condition(kcp, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

/// The rejection message of a refused write (HTTP 422), or a panic naming what was accepted.
fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 422 => s.message,
        other => panic!("{what}: expected a 422 rejection, got {other:?}"),
    }
}

/// The groups the tenant gives the user of `client` (a SelfSubjectReview).
async fn groups(client: Client) -> Vec<String> {
    Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap()
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.groups)
        .unwrap_or_default()
}

/// Every Secret name the control plane of cluster `name` may write: its CAPI Secrets and its
/// internal ones.
fn secret_names(name: &str) -> BTreeSet<String> {
    let n = ObjectNames::new(name, name);
    n.capi_secret_space()
        .into_iter()
        .chain(InternalSecret::ALL.iter().map(|s| n.internal_secret(*s)))
        .collect()
}

/// Clusters `x`, `x-scheduler`, `x-admin` and `x-super-admin` in one namespace (with v0.1's
/// names, `x`'s scheduler kubeconfig was `x-scheduler`'s CAPI kubeconfig), plus `w`, one of
/// whose Secret names is taken by a Secret another object controls.
#[kamaji_e2e::test(shared)]
async fn sibling_clusters_sharing_a_name_prefix_never_write_each_others_secrets(env: &Env) {
    let ns = "tenant-a";
    env.namespace(ns).await.unwrap();

    // A Secret at one of w's names, controlled by an object that is not w's control plane.
    let owner: ConfigMap = Api::namespaced(env.client(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "someone-else"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let taken = ObjectNames::new("w", "w").scheduler_kubeconfig_secret();
    let secrets: Api<Secret> = Api::namespaced(env.client(), ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": taken, "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "someone-else",
                    "uid": owner.uid().unwrap(), "controller": true,
                }]},
                "stringData": {"value": "not kamaji-rs's"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    let clusters = ["x", "x-scheduler", "x-admin", "x-super-admin", "w"];
    for c in clusters {
        env.apply_yaml(&f0(ns, c, 1)).await.unwrap();
    }
    let w = env
        .wait_kcp(
            ns,
            "w",
            "CertificatesAvailable=False (OwnedByAnotherObject)",
            3 * MINUTE,
            |k| has(k, "CertificatesAvailable", "False", "OwnedByAnotherObject"),
        )
        .await
        .unwrap();
    let message = condition(&w, "CertificatesAvailable").unwrap().message;
    assert!(
        message.contains(&format!("Secret {ns}/{taken}"))
            && message.contains("ConfigMap someone-else"),
        "the condition names the Secret and its controller: {message}"
    );
    for c in &clusters[..4] {
        env.wait_kcp_condition(ns, c, "Available", "True", 4 * MINUTE)
            .await
            .unwrap();
    }
    assert_eq!(
        secret_text(&secrets.get(&taken).await.unwrap(), "value"),
        "not kamaji-rs's",
        "a Secret another object controls is never overwritten"
    );
    let wrote_taken = env.manager_writes().unwrap().into_iter().any(|e| {
        e.object_ref
            .as_ref()
            .is_some_and(|o| o.resource == "secrets" && o.name.as_deref() == Some(taken.as_str()))
    });
    assert!(!wrote_taken, "the manager wrote {taken}");

    // Once it is gone, w comes up without anybody touching w.
    secrets
        .delete(&taken, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_kcp_condition(ns, "w", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();

    // The clusters' Secret names are disjoint, every Secret the manager wrote is one
    // cluster's, and each is controlled by that cluster's control plane.
    let sets: BTreeMap<&str, BTreeSet<String>> =
        clusters.iter().map(|c| (*c, secret_names(c))).collect();
    for (a, sa) in &sets {
        for (b, sb) in &sets {
            if a < b {
                let shared: Vec<_> = sa.intersection(sb).collect();
                assert!(shared.is_empty(), "{a} and {b} share {shared:?}");
            }
        }
    }
    let kcps: Api<KamajiControlPlane> = Api::namespaced(env.client(), ns);
    let mut uids = BTreeMap::new();
    for c in clusters {
        uids.insert(kcps.get(c).await.unwrap().uid().unwrap(), c);
    }
    let mut written = BTreeSet::new();
    for e in env.manager_writes().unwrap() {
        let Some(o) = e.object_ref.filter(|o| o.resource == "secrets") else {
            continue;
        };
        let name = o.name.unwrap_or_default();
        let owners: Vec<_> = sets.iter().filter(|(_, s)| s.contains(&name)).collect();
        assert_eq!(
            owners.len(),
            1,
            "Secret {name} written by the manager belongs to {owners:?}"
        );
        written.insert(name);
    }
    for name in &written {
        let Some(s) = secrets.get_opt(name).await.unwrap() else {
            continue;
        };
        let controller = s
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| uids.get(&o.uid).copied());
        let cluster = sets
            .iter()
            .find(|(_, set)| set.contains(name))
            .map(|(c, _)| *c);
        assert_eq!(
            controller,
            Some(cluster),
            "Secret {name} is controlled by its own cluster's control plane"
        );
    }

    // Each `<cluster>-kubeconfig` is the CAPI admin of its own tenant, and of no other.
    for c in clusters {
        let tenant = env.tenant_client(ns, c).await.unwrap();
        assert!(
            groups(tenant.clone())
                .await
                .contains(&"kubeadm:cluster-admins".to_owned()),
            "{c}-kubeconfig is the kubeadm cluster admin"
        );
        Api::<ConfigMap>::namespaced(tenant, "default")
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    serde_json::json!({"metadata": {"name": format!("tenant-{c}")}}),
                )
                .unwrap(),
            )
            .await
            .unwrap();
    }
    for c in clusters {
        let tenant = env.tenant_client(ns, c).await.unwrap();
        let markers: Vec<String> = Api::<ConfigMap>::namespaced(tenant, "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n.starts_with("tenant-"))
            .collect();
        assert_eq!(
            markers,
            vec![format!("tenant-{c}")],
            "{c}-kubeconfig reaches {c}'s tenant"
        );
    }
}

/// After initialization, a deleted `<cluster>-ca` (and `<cluster>-sa`) is reported, never
/// generated again, and nothing rolls; restoring the saved Secrets resumes the control plane
/// unchanged. The same for the key the tenant's Secrets are encrypted with at rest
/// (`EncryptionKeyMissing`).
#[kamaji_e2e::test(shared)]
async fn a_ca_deleted_after_initialization_is_never_reminted_and_nothing_rolls(env: &Env) {
    let ns = "tenant-a";
    env.f0_available(ns, "demo", 1).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(env.client(), ns);
    let saved: Vec<Secret> = vec![
        secrets.get("demo-ca").await.unwrap(),
        secrets.get("demo-sa").await.unwrap(),
    ];
    let ca_pem = secret_text(&saved[0], "tls.crt");
    let old_kubeconfig = env.tenant_config(ns, "demo").await.unwrap();
    let kubeconfig_before = secret_text(&secrets.get("demo-kubeconfig").await.unwrap(), "value");
    let deployment = env.deployment(ns, "demo").await.unwrap();
    let generation = deployment.metadata.generation;
    let template = serde_json::to_value(&deployment.spec.as_ref().unwrap().template).unwrap();

    for s in &saved {
        secrets
            .delete(&s.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    }
    let kcp = env
        .wait_kcp(
            ns,
            "demo",
            "CertificatesAvailable=False (RootKeyMaterialMissing)",
            MINUTE,
            |k| {
                has(
                    k,
                    "CertificatesAvailable",
                    "False",
                    "RootKeyMaterialMissing",
                )
            },
        )
        .await
        .unwrap();
    let message = condition(&kcp, "CertificatesAvailable").unwrap().message;
    assert!(
        message.contains("Secret tenant-a/demo-ca (the cluster CA)")
            && message.contains("Secret tenant-a/demo-sa")
            && message.contains("Restore it from a backup"),
        "the condition says what is missing and how to restore it: {message}"
    );
    let events = Api::<Event>::namespaced(env.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RootKeyMaterialMissing")
                && e.involved_object.name.as_deref() == Some("demo")),
        "a Warning event says so"
    );

    // Two minutes later: still no new CA, the tenant serves the old one, nothing rolled.
    tokio::time::sleep(2 * MINUTE).await;
    for s in &saved {
        assert!(
            secrets.get_opt(&s.name_any()).await.unwrap().is_none(),
            "{} was generated again",
            s.name_any()
        );
    }
    let old_client = Client::try_from(old_kubeconfig.clone()).unwrap();
    assert!(
        kamaji_reconciler::tenant::readyz(&old_client).await,
        "the tenant still serves a certificate of the old CA (a kubeconfig pinned to it works)"
    );
    let root_ca = Api::<ConfigMap>::namespaced(old_client.clone(), "default")
        .get("kube-root-ca.crt")
        .await
        .unwrap();
    assert_eq!(
        root_ca
            .data
            .unwrap()
            .get("ca.crt")
            .map(|c| c.trim().to_owned()),
        Some(ca_pem.trim().to_owned()),
        "the tenant's own CA is the old one"
    );
    let after = env.deployment(ns, "demo").await.unwrap();
    assert_eq!(
        after.metadata.generation, generation,
        "the Deployment was not changed"
    );
    assert_eq!(
        serde_json::to_value(&after.spec.unwrap().template).unwrap(),
        template,
        "the pod template was not changed"
    );
    assert_eq!(
        secret_text(&secrets.get("demo-kubeconfig").await.unwrap(), "value"),
        kubeconfig_before,
        "the kubeconfig was not reissued"
    );
    let kcp = Api::<KamajiControlPlane>::namespaced(env.client(), ns)
        .get("demo")
        .await
        .unwrap();
    assert!(has(
        &kcp,
        "CertificatesAvailable",
        "False",
        "RootKeyMaterialMissing"
    ));

    // Restoring the saved Secrets resumes the control plane as it was.
    for s in &saved {
        restore(&secrets, s).await;
    }
    env.wait_kcp(
        ns,
        "demo",
        "CertificatesAvailable=True and Available=True",
        2 * MINUTE,
        |k| {
            has(k, "CertificatesAvailable", "True", "Ready")
                && has(k, "Available", "True", "Available")
        },
    )
    .await
    .unwrap();
    assert_eq!(
        env.deployment(ns, "demo")
            .await
            .unwrap()
            .metadata
            .generation,
        generation,
        "restoring the CA rolls nothing"
    );

    // The key the tenant's Secrets are encrypted with: the same, reported on its own.
    let key = secrets.get("demo-encryption.config").await.unwrap();
    secrets
        .delete("demo-encryption.config", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_kcp(
        ns,
        "demo",
        "CertificatesAvailable=False (EncryptionKeyMissing)",
        MINUTE,
        |k| has(k, "CertificatesAvailable", "False", "EncryptionKeyMissing"),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        secrets
            .get_opt("demo-encryption.config")
            .await
            .unwrap()
            .is_none(),
        "the encryption key was generated again"
    );
    restore(&secrets, &key).await;
    env.wait_kcp(ns, "demo", "CertificatesAvailable=True", MINUTE, |k| {
        has(k, "CertificatesAvailable", "True", "Ready")
    })
    .await
    .unwrap();
    assert_eq!(
        env.deployment(ns, "demo")
            .await
            .unwrap()
            .metadata
            .generation,
        generation,
        "restoring the encryption key rolls nothing"
    );
}

/// Creates `saved` again as a user restoring it from a backup would: its data with its name,
/// labels and owner, nothing of the stored object's bookkeeping.
async fn restore(secrets: &Api<Secret>, saved: &Secret) {
    let mut restored = saved.clone();
    restored.metadata = kube::api::ObjectMeta {
        name: saved.metadata.name.clone(),
        namespace: saved.metadata.namespace.clone(),
        labels: saved.metadata.labels.clone(),
        owner_references: saved.metadata.owner_references.clone(),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &restored)
        .await
        .unwrap();
}

/// An upgrade whose new version cannot start (its image cannot be pulled) is backed out by
/// setting `spec.version` back to `status.version`; a real downgrade stays refused.
#[kamaji_e2e::test]
async fn a_stuck_upgrade_is_backed_out_to_the_last_rolled_out_version() {
    let _serial = serial();
    let env = Env::builder()
        .version(kamaji_testenv::PREVIOUS_MINOR_KUBERNETES_VERSION)
        .start()
        .await
        .unwrap();
    let ns = "tenant-a";
    let from = kamaji_testenv::PREVIOUS_MINOR_KUBERNETES_VERSION;
    env.namespace(ns).await.unwrap();
    env.apply_yaml(&F0::new(ns, "demo").replicas(1).version(from).yaml())
        .await
        .unwrap();
    let kcp = env
        .wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    assert_eq!(kcp.status.unwrap().version.as_deref(), Some(from));

    // A version nobody can pull: the new pod never starts, the old one keeps serving.
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"spec": {"version": "v1.36.9"}}),
    )
    .await
    .unwrap();
    let image_is = |tag: &'static str| {
        move |d: &Deployment| {
            d.spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|p| {
                    p.containers
                        .iter()
                        .all(|c| c.image.as_deref().is_some_and(|i| i.ends_with(tag)))
                })
        }
    };
    let api: Api<Deployment> = Api::namespaced(env.client(), ns);
    let stuck = image_is(":v1.36.9");
    env.wait_for(
        api,
        "Deployment tenant-a/demo",
        "demo",
        "the v1.36.9 template",
        MINUTE,
        move |d| stuck(d),
        |d| serde_yaml::to_string(&d.status).unwrap_or_default(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let kcp = env
        .wait_kcp_condition(ns, "demo", "RollingOut", "True", MINUTE)
        .await
        .unwrap();
    assert_eq!(
        kcp.status.unwrap().version.as_deref(),
        Some(from),
        "status.version stays at the last fully rolled-out version"
    );

    // Back to status.version: accepted (it was refused as a downgrade before).
    env.patch_kcp(ns, "demo", serde_json::json!({"spec": {"version": from}}))
        .await
        .expect("going back to status.version is allowed while the new version never rolled out");
    wait_rolled_out(&env, ns, "demo", 1, 2 * MINUTE, image_is(":v1.35.4"))
        .await
        .unwrap();
    let kcp = env
        .wait_kcp(
            ns,
            "demo",
            "RollingOut=False and Available=True",
            2 * MINUTE,
            |k| {
                has(k, "RollingOut", "False", "NotRollingOut")
                    && has(k, "Available", "True", "Available")
            },
        )
        .await
        .unwrap();
    assert_eq!(kcp.status.unwrap().version.as_deref(), Some(from));

    // A real downgrade stays refused.
    let message = refused(
        Api::<KamajiControlPlane>::namespaced(env.client(), ns)
            .patch(
                "demo",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"version": "v1.35.0"}})),
            )
            .await,
        "a downgrade below status.version",
    );
    assert!(message.contains("spec.version"), "{message}");
}

/// Once the endpoint is set, the fields that decide it are refused at admission, so the
/// endpoint is never half-changed; the Cluster, the KamajiControlPlane and the kubeconfig keep
/// one endpoint.
#[kamaji_e2e::test(shared)]
async fn endpoint_fields_are_refused_once_the_endpoint_is_set(env: &Env) {
    let ns = "tenant-a";
    let kcp = env.f0_available(ns, "demo", 1).await.unwrap();
    let endpoint = kcp.spec.control_plane_endpoint.clone().unwrap();
    env.apply_yaml(
        &F0::new(ns, "ing")
            .replicas(1)
            .network("serviceType: ClusterIP, ingress: {hostname: api.ing.example.com}")
            .yaml(),
    )
    .await
    .unwrap();
    env.wait_kcp(ns, "ing", "the ingress host as endpoint", 2 * MINUTE, |k| {
        k.spec
            .control_plane_endpoint
            .as_ref()
            .and_then(|e| e.host.as_deref())
            == Some("api.ing.example.com")
    })
    .await
    .unwrap();

    let kcps: Api<KamajiControlPlane> = Api::namespaced(env.client(), ns);
    for (name, network, field) in [
        (
            "demo",
            serde_json::json!({"serviceType": "NodePort"}),
            "spec.network.serviceType",
        ),
        (
            "demo",
            serde_json::json!({"serviceAddress": "127.0.0.9"}),
            "spec.network.serviceAddress",
        ),
        (
            "demo",
            serde_json::json!({"ingress": {"hostname": "api.demo.example.com"}}),
            "spec.network.ingress",
        ),
        (
            "ing",
            serde_json::json!({"ingress": {"hostname": "api2.ing.example.com"}}),
            "spec.network.ingress",
        ),
    ] {
        let message = refused(
            kcps.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"network": network}})),
            )
            .await,
            &format!("{name}: {network}"),
        );
        assert!(
            message.contains(field) && message.contains("controlPlaneEndpoint"),
            "{name}: the message names {field} and the endpoint: {message}"
        );
    }
    // A field that does not decide the endpoint still changes.
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"spec": {"network": {"certSANs": ["extra.example.com"]}}}),
    )
    .await
    .unwrap();
    let kcp = kcps.get("demo").await.unwrap();
    assert_eq!(kcp.spec.control_plane_endpoint, Some(endpoint.clone()));
    let server = env
        .tenant_config(ns, "demo")
        .await
        .unwrap()
        .cluster_url
        .to_string();
    assert!(
        server.contains(endpoint.host.as_deref().unwrap()),
        "the kubeconfig keeps the endpoint: {server}"
    );
}

/// A pass that fails writes `Reconciled=False` with the failure, next to what it found
/// before failing, instead of leaving an older pass's conditions in place.
#[kamaji_e2e::test(shared)]
async fn a_failing_pass_replaces_stale_conditions_with_its_reason(env: &Env) {
    let ns = "quota";
    env.namespace(ns).await.unwrap();
    // No Secret may be created in this namespace: every pass fails at the first root Secret.
    env.apply_value(&serde_json::json!({
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "no-secrets", "namespace": ns},
        "spec": {"hard": {"secrets": "0"}},
    }))
    .await
    .unwrap();
    // The control plane first, alone: waiting for its Cluster.
    let yaml = f0(ns, "demo", 1);
    let (cluster, kcp) = yaml.split_once("---").unwrap();
    env.apply_yaml(kcp).await.unwrap();
    env.wait_kcp(ns, "demo", "ClusterFound=False", MINUTE, |k| {
        has(k, "ClusterFound", "False", "WaitingForOwnerCluster")
    })
    .await
    .unwrap();
    env.apply_yaml(cluster).await.unwrap();
    let k = env
        .wait_kcp(
            ns,
            "demo",
            "Reconciled=False (KubeAPIError)",
            2 * MINUTE,
            |k| has(k, "Reconciled", "False", "KubeAPIError"),
        )
        .await
        .unwrap();
    let message = condition(&k, "Reconciled").unwrap().message;
    assert!(
        message.contains("create Secret quota/demo-ca") && message.contains("exceeded quota"),
        "the condition says which step failed and why: {message}"
    );
    assert!(
        has(&k, "ClusterFound", "True", "Ready"),
        "the stale ClusterFound=False is replaced: {:?}",
        condition(&k, "ClusterFound")
    );

    Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(env.client(), ns)
        .delete("no-secrets", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_kcp(
        ns,
        "demo",
        "Available=True and Reconciled=True",
        4 * MINUTE,
        |k| {
            has(k, "Available", "True", "Available")
                && has(k, "Reconciled", "True", "ReconcileSucceeded")
        },
    )
    .await
    .unwrap();
}

/// Deleting a tenant's namespace removes its datastore keys, whatever the namespace
/// controller deletes first: ten tenants in ten namespaces, deleted at once.
#[kamaji_e2e::test(shared)]
async fn deleting_the_namespace_removes_the_tenant_keys_in_ten_runs_out_of_ten(env: &Env) {
    let runs: Vec<String> = (0..10).map(|i| format!("gone-{i}")).collect();
    for ns in &runs {
        env.namespace(ns).await.unwrap();
        env.apply_yaml(&f0(ns, "demo", 1)).await.unwrap();
    }
    let ds = datastore_admin(env);
    let mut prefixes = Vec::new();
    for ns in &runs {
        env.wait_kcp_condition(ns, "demo", "Available", "True", 6 * MINUTE)
            .await
            .unwrap();
        let prefix = etcd_prefix(env, ns, "demo").await;
        let keys = keys_under(&ds, &prefix).await;
        assert!(keys > 0, "{ns}: the tenant stored keys");
        prefixes.push(prefix);
    }
    let namespaces: Api<Namespace> = Api::all(env.client());
    for ns in &runs {
        namespaces
            .delete(ns, &DeleteParams::default())
            .await
            .unwrap();
    }
    for ns in &runs {
        tokio::time::timeout(
            5 * MINUTE,
            await_condition(namespaces.clone(), ns, |n: Option<&Namespace>| n.is_none()),
        )
        .await
        .unwrap_or_else(|_| {
            panic!(
                "namespace {ns} not deleted\nmanager log:\n{}",
                env.manager_log()
            )
        })
        .unwrap();
    }
    let mut left = Vec::new();
    for (ns, prefix) in runs.iter().zip(&prefixes) {
        let keys = keys_under(&ds, prefix).await;
        if keys > 0 {
            left.push(format!("{ns}: {keys} keys under {prefix}"));
        }
    }
    assert!(left.is_empty(), "keys left behind: {left:?}");
}

/// A Deployment scaled to zero or with an argument removed by hand is restored by the next
/// pass (its own watch event); a pass with nothing to restore writes nothing.
#[kamaji_e2e::test(shared)]
async fn a_deployment_changed_by_hand_is_restored_and_a_noop_pass_writes_nothing(env: &Env) {
    let ns = "tenant-a";
    // The environment is shared: corrections of earlier tests are not this one's.
    let corrections_before = env.manager_metric("kamaji_drift_corrections_total").await;
    env.f0_available(ns, "demo", 2).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(env.client(), ns);
    let args_before = env
        .container_args(ns, "demo", "kube-apiserver")
        .await
        .unwrap();

    deployments
        .patch_scale(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    env.wait_for(
        deployments.clone(),
        "Deployment tenant-a/demo",
        "demo",
        "replicas 2 again",
        MINUTE,
        |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas) == Some(2),
        |d| serde_yaml::to_string(&d.spec.as_ref().map(|s| s.replicas)).unwrap_or_default(),
    )
    .await
    .unwrap();

    let removed = args_before
        .iter()
        .position(|a| a.starts_with("--enable-admission-plugins="))
        .unwrap();
    deployments
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(serde_json::json!([{
                    "op": "remove",
                    "path": format!("/spec/template/spec/containers/0/args/{removed}"),
                }]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let want = args_before.clone();
    wait_rolled_out(env, ns, "demo", 2, 3 * MINUTE, move |d| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|c| c.name == "kube-apiserver"))
            .and_then(|c| c.args.clone())
            == Some(want.clone())
    })
    .await
    .unwrap();
    assert!(env.manager_metric("kamaji_drift_corrections_total").await - corrections_before >= 2.0);
    env.wait_kcp_condition(ns, "demo", "Available", "True", 2 * MINUTE)
        .await
        .unwrap();

    // A pass with nothing to restore: no write at all.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = env.manager_writes().unwrap().len();
    let passes = env.manager_metric("kamaji_reconcile_total").await;
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"metadata": {"annotations": {"test/poke": "1"}}}),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + MINUTE;
    while env.manager_metric("kamaji_reconcile_total").await <= passes {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pass after the poke"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes: Vec<String> = env.manager_writes().unwrap()[before..]
        .iter()
        .map(|e| format!("{} {}", e.verb, e.request_u_r_i))
        .collect();
    assert!(writes.is_empty(), "a no-op pass wrote: {writes:?}");
}

/// A control plane provisioned by v0.1 (internal Secrets under the old names, which fall
/// into sibling clusters' CAPI names) is moved to the new names by the next manager: the key
/// material is carried over, the pods roll onto the new Secrets, the old ones are removed.
#[kamaji_e2e::test]
async fn an_upgrade_moves_internal_secrets_to_their_new_names_keeping_their_keys() {
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    let ns = "tenant-a";
    env.f0_available(ns, "demo", 1).await.unwrap();
    env.kill_manager();

    // Recreate what v0.1 left: the same Secrets under the old names, mounted from there.
    let names = ObjectNames::new("demo", "demo");
    let secrets: Api<Secret> = Api::namespaced(env.client(), ns);
    let mut moved = BTreeMap::new();
    for which in InternalSecret::ALL {
        let (Some(old), new) = (
            names.legacy_internal_secret(which),
            names.internal_secret(which),
        ) else {
            continue;
        };
        let Some(current) = secrets.get_opt(&new).await.unwrap() else {
            continue;
        };
        let mut legacy = current.clone();
        legacy.metadata = kube::api::ObjectMeta {
            name: Some(old.clone()),
            labels: current.metadata.labels.clone(),
            owner_references: current.metadata.owner_references.clone(),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &legacy)
            .await
            .unwrap();
        secrets
            .delete(&new, &DeleteParams::default())
            .await
            .unwrap();
        moved.insert(new, (old, current.data.clone()));
    }
    assert_eq!(moved.len(), 6, "every v0.1 Secret");
    let deployments: Api<Deployment> = Api::namespaced(env.client(), ns);
    let mut d = deployments.get("demo").await.unwrap();
    let pod = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    for v in pod.volumes.iter_mut().flatten() {
        if let Some(s) = v.secret.as_mut()
            && let Some((old, _)) = s.secret_name.as_ref().and_then(|n| moved.get(n))
        {
            s.secret_name = Some(old.clone());
        }
    }
    d.metadata.managed_fields = None;
    deployments
        .replace("demo", &PostParams::default(), &d)
        .await
        .unwrap();
    wait_rolled_out(&env, ns, "demo", 1, 2 * MINUTE, |_| true)
        .await
        .unwrap();

    env.start_manager().unwrap();
    // Every moved Secret but the provider's own super-admin kubeconfig is mounted.
    let mounted_now: BTreeSet<String> = moved
        .keys()
        .filter(|n| **n != names.super_admin_kubeconfig_secret())
        .cloned()
        .collect();
    wait_rolled_out(&env, ns, "demo", 1, 3 * MINUTE, move |d| {
        let mounted: BTreeSet<String> = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref().and_then(|s| s.secret_name.clone()))
            .collect();
        mounted.is_superset(&mounted_now)
    })
    .await
    .unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 2 * MINUTE)
        .await
        .unwrap();
    for (new, (old, data)) in &moved {
        let s = secrets.get(new).await.unwrap();
        assert_eq!(&s.data, data, "{new} carries {old}'s key material");
        let deadline = tokio::time::Instant::now() + MINUTE;
        while secrets.get_opt(old).await.unwrap().is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{old} was not removed"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
