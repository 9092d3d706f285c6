//! Minor upgrades with workers (issue 15): a tenant of the previous minor, with a worker of
//! that minor joined through CABPK on a real machine, is upgraded to the current minor one
//! replica at a time while a client polls `/readyz` through the endpoint and the worker's
//! Node is watched; then a worker of the new minor joins, and a CA rotation asked for while the
//! old minor's worker remains waits for it (issue 48).

#![cfg(real_programs_as_root)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::machines::{SETTINGS_FOR_THIS_MACHINE_KIND, machine_deployment_at};
use kamaji_e2e::{Env, F0, ReadyzProbe, control_plane_at, wait_rolled_out};
use kamaji_machine::run_in_private_network;
use kamaji_testenv::{KUBERNETES_VERSION, PREVIOUS_MINOR_KUBERNETES_VERSION};
use kube::api::{Api, ListParams, Patch, PatchParams};

const MINUTE: Duration = Duration::from_mins(1);

/// Each Node's kubelet version and whether it is Ready.
async fn nodes(tenant: &kube::Client) -> anyhow::Result<Vec<(String, String, bool)>> {
    Ok(Api::<Node>::all(tenant.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let status = n.status.unwrap_or_default();
            let kubelet = status
                .node_info
                .map(|i| i.kubelet_version)
                .unwrap_or_default();
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (name, kubelet, ready)
        })
        .collect())
}

/// Waits until `n` Nodes are Ready; returns them.
async fn wait_nodes_ready(
    tenant: &kube::Client,
    n: usize,
) -> anyhow::Result<Vec<(String, String, bool)>> {
    let deadline = tokio::time::Instant::now() + 4 * MINUTE;
    loop {
        let now = nodes(tenant).await.unwrap_or_default();
        if now.len() == n && now.iter().all(|(_, _, ready)| *ready) {
            return Ok(now);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not {n} Ready Nodes after 4 minutes: {now:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Issue 15, minor upgrade: v1.35 → v1.36 with a v1.35 worker attached. The control plane
/// rolls one replica at a time (0 failed `/readyz` polls through the endpoint); the worker's
/// Node is never seen NotReady (polled every second); `status.version` goes from the old
/// version to the new one once, only after the roll; kubeadm-config names the new version;
/// kube-proxy follows the tenant's version and runs on the old worker; CoreDNS takes the
/// new minor's version; and a worker of the new minor joins afterwards.
#[test]
fn a_minor_upgrade_keeps_the_api_and_the_old_minors_worker_and_a_new_worker_joins() {
    let _serial = kamaji_e2e::serial();
    run_in_private_network(|| async {
        let (from, to) = (PREVIOUS_MINOR_KUBERNETES_VERSION, KUBERNETES_VERSION);
        let env = Env::builder().version(from).workers(true).start().await?;
        let (ns, name) = ("minor", "demo");
        env.namespace(ns).await?;
        env.apply_yaml(
            &F0::new(ns, name)
                .replicas(2)
                .version(from)
                .spec(SETTINGS_FOR_THIS_MACHINE_KIND)
                .yaml(),
        )
        .await?;
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await?;
        env.apply_yaml(&machine_deployment_at(ns, name, "md-old", 1, from))
            .await?;
        env.wait_machines_running(ns, 1, 4 * MINUTE).await?;
        let tenant = env.tenant_client(ns, name).await?;
        let before = wait_nodes_ready(&tenant, 1).await?;
        let old_node = before[0].0.clone();
        assert_eq!(before[0].1, from, "the worker runs the old minor's kubelet");

        // Watch the old worker, the status version and the API through the endpoint.
        let stop = Arc::new(AtomicBool::new(false));
        let node_watch = {
            let (stop, tenant, old_node) = (stop.clone(), tenant.clone(), old_node.clone());
            tokio::spawn(async move {
                let mut not_ready = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(now) = nodes(&tenant).await
                        && let Some((_, kubelet, ready)) = now.iter().find(|n| n.0 == old_node)
                        && !ready
                    {
                        not_ready.push(format!("NotReady (kubelet {kubelet})"));
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                not_ready
            })
        };
        let version_watch = {
            let (stop, kcps) = (
                stop.clone(),
                Api::<KamajiControlPlane>::namespaced(env.client(), ns),
            );
            tokio::spawn(async move {
                let mut seen: Vec<String> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(k) = kcps.get(name).await
                        && let Some(v) = k.status.and_then(|s| s.version)
                        && seen.last() != Some(&v)
                    {
                        seen.push(v);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                seen
            })
        };
        let probe = ReadyzProbe::start(env.tenant_config(ns, name).await?);
        probe.answered(MINUTE).await?;

        env.patch_kcp(ns, name, serde_json::json!({"spec": {"version": to}}))
            .await?;
        wait_rolled_out(&env, ns, name, 2, 5 * MINUTE, control_plane_at(to)).await?;
        env.wait_kcp(ns, name, &format!("version {to}"), 2 * MINUTE, move |k| {
            k.status
                .as_ref()
                .is_some_and(|s| s.version.as_deref() == Some(to))
        })
        .await?;
        // kubeadm-config and kube-proxy follow; kube-proxy of the new version runs on the old
        // worker; CoreDNS takes the new minor's version.
        let deadline = tokio::time::Instant::now() + 2 * MINUTE;
        loop {
            let cm = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-system")
                .get("kubeadm-config")
                .await?;
            let cc: serde_yaml::Value = serde_yaml::from_str(
                cm.data
                    .unwrap_or_default()
                    .get("ClusterConfiguration")
                    .map_or("", |s| s),
            )?;
            let ds = Api::<DaemonSet>::namespaced(tenant.clone(), "kube-system")
                .get("kube-proxy")
                .await?;
            let image = ds
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|p| p.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let proxy_ready = ds.status.as_ref().is_some_and(|s| {
                s.updated_number_scheduled == Some(1) && s.number_available == Some(1)
            });
            if cc["kubernetesVersion"] == to && image.ends_with(&format!(":{to}")) && proxy_ready {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "kubeadm-config {:?} / kube-proxy {image} (ready on the old worker: \
                 {proxy_ready}) do not follow {to}",
                cc["kubernetesVersion"]
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let coredns = Api::<Deployment>::namespaced(tenant.clone(), "kube-system")
            .get("coredns")
            .await?;
        let coredns_image = coredns
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        assert!(
            coredns_image.ends_with(":v1.14.2"),
            "CoreDNS of v1.36 (kubeadm's constants.CoreDNSVersion), not {coredns_image}"
        );

        // A worker of the new minor joins the upgraded tenant.
        env.apply_yaml(&machine_deployment_at(ns, name, "md-new", 1, to))
            .await?;
        env.wait_machines_running(ns, 2, 4 * MINUTE).await?;
        let after = wait_nodes_ready(&tenant, 2).await?;
        stop.store(true, Ordering::Relaxed);
        let not_ready = node_watch.await?;
        let versions = version_watch.await?;
        let (ok, failed, why) = probe.stop().await;
        let kubelets: Vec<&str> = after.iter().map(|(_, k, _)| k.as_str()).collect();
        assert!(
            kubelets.contains(&from) && kubelets.contains(&to),
            "{after:?}"
        );
        assert!(
            not_ready.is_empty(),
            "the old minor's worker went NotReady: {not_ready:?}"
        );
        assert_eq!(
            versions,
            vec![from.to_owned(), to.to_owned()],
            "status.version"
        );
        assert!(ok > 10, "too few probes: {ok}");
        assert_eq!(
            failed,
            0,
            "/readyz failed {failed} times (of {}) during the minor upgrade: {why:#?}",
            ok + failed
        );
        // Then a CA rotation while the old minor's worker is still there (its kubeconfigs
        // change: the probe and watches above used the ones from before).
        let rotation =
            ca_rotation_with_a_worker_of_the_previous_minor(&env, ns, name, &old_node).await?;
        let tenant = env.tenant_client(ns, name).await?;
        let nodes = wait_nodes_ready(&tenant, 2).await?;
        assert!(
            nodes.iter().all(|(_, kubelet, _)| kubelet == to),
            "both workers replaced at {to} by the rotation: {nodes:?}"
        );
        assert!(
            rotation.held_message.contains("MachineDeployment md-old")
                && rotation.held_message.contains("KubeadmVersionSkew"),
            "ReplacingWorkers names the MachineSet Cluster API holds back and why: {}",
            rotation.held_message
        );
        assert!(
            rotation.without_ready.is_empty(),
            "during the rotation: {:?}",
            rotation.without_ready
        );
        Ok(())
    })
    .unwrap();
}

/// What [`ca_rotation_with_a_worker_of_the_previous_minor`] saw.
struct HeldRotation {
    /// The `CertificateAuthoritiesRotated` message while Cluster API held the old minor's
    /// replacement back.
    held_message: String,
    /// Each look (every second) that found no Ready Node, or the old minor's worker there but
    /// not Ready.
    without_ready: Vec<String>,
}

/// Looks at the tenant's Nodes every second until `stop`, through the kubeconfig published at
/// each look (a CA rotation replaces it): each look with no Ready Node, or, until `replacing`,
/// with `old_node` there and not Ready, is recorded.
fn watch_workers(
    env: &Env,
    (ns, name): (&str, &str),
    old_node: &str,
    stop: Arc<AtomicBool>,
    replacing: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    let (client, ns, name, old_node) = (
        env.client(),
        ns.to_owned(),
        name.to_owned(),
        old_node.to_owned(),
    );
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let listed = match kamaji_testenv::kubeconfig::config_from_secret(
                &client,
                &ns,
                &format!("{name}-kubeconfig"),
                "value",
            )
            .await
            .and_then(|c| Ok(kube::Client::try_from(c)?))
            {
                Ok(tenant) => nodes(&tenant).await.ok(),
                Err(_) => None,
            };
            // A failed look is the API's to report (the rotation keeps it up): not counted.
            if let Some(now) = listed {
                if !now.iter().any(|n| n.2) {
                    seen.push(format!("no Ready Node: {now:?}"));
                }
                if !replacing.load(Ordering::Relaxed) && now.iter().any(|n| n.0 == old_node && !n.2)
                {
                    seen.push(format!("{old_node} not Ready"));
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        seen
    })
}

/// Issue 48: a CA rotation asked for while a worker still runs the previous minor (the control
/// plane already upgraded). It runs its first phases, replaces the worker of the control
/// plane's minor, and in `ReplacingWorkers` names the MachineSet Cluster API holds back, with
/// Cluster API's reason (`KubeadmVersionSkew`) and what to do; the old worker keeps running
/// meanwhile. Once its MachineDeployment is upgraded, the replacement joins with the new CA
/// and the rotation finishes: no deadlock.
async fn ca_rotation_with_a_worker_of_the_previous_minor(
    env: &Env,
    ns: &str,
    name: &str,
    old_node: &str,
) -> anyhow::Result<HeldRotation> {
    use kamaji_api::conditions::{reasons, types};
    use kamaji_api::meta::CA_ROTATION_ANNOTATION;
    let rotated = |k: &KamajiControlPlane| {
        kamaji_e2e::condition(k, types::CERTIFICATE_AUTHORITIES_ROTATED).cloned()
    };
    let (stop, replacing) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let workers = watch_workers(env, (ns, name), old_node, stop.clone(), replacing.clone());
    env.patch_kcp(
        ns,
        name,
        serde_json::json!({"metadata": {"annotations": {CA_ROTATION_ANNOTATION: "while-md-old-lags"}}}),
    )
    .await?;
    let held = env
        .wait_kcp(
            ns,
            name,
            "the old minor's replacement held back",
            10 * MINUTE,
            move |k| {
                rotated(k).is_some_and(|c| {
                    c.reason == reasons::REPLACING_WORKERS
                        && c.message.contains("KubeadmVersionSkew")
                })
            },
        )
        .await?;
    let held_message = rotated(&held).map(|c| c.message).unwrap_or_default();
    // Cluster API holds it back for good: upgrade that MachineDeployment, as the message says
    // (its old worker is drained and removed from here on).
    replacing.store(true, Ordering::Relaxed);
    env.capi(ns, "v1beta2", "MachineDeployment")
        .patch(
            "md-old",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"template": {"spec": {"version": KUBERNETES_VERSION}}}})),
        )
        .await?;
    env.wait_kcp(ns, name, "Rotated", 10 * MINUTE, move |k| {
        rotated(k).is_some_and(|c| c.reason == reasons::ROTATED)
    })
    .await?;
    stop.store(true, Ordering::Relaxed);
    Ok(HeldRotation {
        held_message,
        without_ready: workers.await?,
    })
}
