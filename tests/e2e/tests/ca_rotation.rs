//! Certificate-authority rotation with overlap (issue 15): the cluster and front-proxy CAs of
//! a tenant with a worker joined through CABPK are rotated while clients poll `/readyz`
//! through the endpoint and the worker's Node is watched; then no artifact carries the old
//! CA and a fresh `kubeadm join` works. The tenant runs the previous minor release, so that a
//! minor upgrade asked for during the rotation is refused at admission (issue 48).

#![cfg(real_programs_as_root)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kamaji_api::KamajiControlPlane;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::{CA_ROTATION_ANNOTATION, CLUSTER_NAME_LABEL};
use kamaji_bootstrap::pki::inspect::{certificates_der, is_signed_by};
use kamaji_e2e::machines::{SETTINGS_FOR_THIS_MACHINE_KIND, machine_deployment_at};
use kamaji_e2e::{Env, F0, ReadyzProbe, secret_text};
use kamaji_machine::run_in_private_network;
use kamaji_testenv::{KUBERNETES_VERSION, PREVIOUS_MINOR_KUBERNETES_VERSION};
use kube::api::{Api, ListParams, Patch, PatchParams};

const MINUTE: Duration = Duration::from_mins(1);

/// Ready Nodes by name.
async fn ready_nodes(tenant: &kube::Client) -> anyhow::Result<Vec<String>> {
    Ok(Api::<Node>::all(tenant.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|n| n.metadata.name)
        .collect())
}

/// The reason of `CertificateAuthoritiesRotated`, if set.
fn rotation_reason(k: &KamajiControlPlane) -> Option<String> {
    kamaji_e2e::condition(k, types::CERTIFICATE_AUTHORITIES_ROTATED).map(|c| c.reason.clone())
}

/// The PEM certificates `text` holds that carry the DER of `ca` (the old CA itself) or are
/// signed by it, as short descriptions.
fn traces_of(ca_pem: &str, what: &str, text: &str) -> Vec<String> {
    let ca_der = certificates_der(ca_pem).unwrap_or_default();
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let block = &rest[start..];
        let end = block
            .find("-----END CERTIFICATE-----")
            .map_or(block.len(), |i| i + "-----END CERTIFICATE-----".len());
        let pem = &block[..end];
        let der = certificates_der(pem).unwrap_or_default();
        if der.iter().any(|d| ca_der.contains(d)) {
            out.push(format!("{what}: the old CA itself"));
        } else if is_signed_by(pem, ca_pem).unwrap_or(false) {
            out.push(format!("{what}: a certificate the old CA signed"));
        }
        rest = &block[end..];
    }
    out
}

/// Base64-decoded `certificate-authority-data` and client certificates of a kubeconfig, as
/// PEM text.
fn kubeconfig_pems(yaml: &str) -> String {
    use base64::Engine as _;
    let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap_or_default();
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = String::new();
    for path in [
        ("clusters", "cluster", "certificate-authority-data"),
        ("users", "user", "client-certificate-data"),
    ] {
        for entry in v[path.0].as_sequence().into_iter().flatten() {
            if let Some(data) = entry[path.1][path.2].as_str()
                && let Ok(bytes) = b64.decode(data)
            {
                out.push_str(&String::from_utf8_lossy(&bytes));
            }
        }
    }
    out
}

/// The certificates the endpoint serves (the whole chain), PEM, read with `openssl s_client`.
fn served_chain(host: &str, port: u16) -> anyhow::Result<String> {
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-showcerts",
            "-connect",
            &format!("{host}:{port}"),
        ])
        .stdin(std::process::Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        text.contains("BEGIN CERTIFICATE"),
        "openssl s_client read no certificate from {host}:{port}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(text)
}

/// Issue 15, CA rotation: requested with the annotation, the rotation goes through its
/// phases in order (trusting the new CAs, issuing from them, replacing the workers, dropping
/// the old ones). A client with the kubeconfig read before the rotation (old CA only, client
/// certificate of the old CA) polls `/readyz` through the endpoint without one failure until
/// the old CA is dropped, and is refused afterwards; a client with the kubeconfig published
/// once the new CA signs polls through to the end without one failure. The worker that
/// joined before is replaced by its MachineDeployment (CAPI) and a Ready Node is there at
/// every look. Afterwards no Secret of the cluster, no kubeconfig, neither cluster-info nor
/// kube-root-ca.crt nor the front-proxy trust the API server publishes, and nothing the
/// endpoint serves is the old CA or signed by it; a fresh `kubeadm join` (the
/// MachineDeployment scaled up) works. Issue 48: the control plane and the worker run the
/// previous minor release; `spec.version` raised to the next minor while the rotation runs is
/// refused at admission naming the rotation (the replacement workers would be refused by
/// Cluster API's `KubeadmVersionSkew`), and admitted once it is done.
#[test]
#[allow(clippy::too_many_lines)] // one rotation, watched from start to end
fn a_ca_rotation_keeps_every_client_and_worker_and_leaves_no_trace_of_the_old_ca() {
    let _serial = kamaji_e2e::serial();
    run_in_private_network(|| async {
        let version = PREVIOUS_MINOR_KUBERNETES_VERSION;
        let env = Env::builder()
            .version(version)
            .workers(true)
            .start()
            .await?;
        let (ns, name) = ("carot", "demo");
        env.namespace(ns).await?;
        env.apply_yaml(
            &F0::new(ns, name)
                .replicas(2)
                .version(version)
                .spec(SETTINGS_FOR_THIS_MACHINE_KIND)
                .yaml(),
        )
        .await?;
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await?;
        env.apply_yaml(&machine_deployment_at(ns, name, "md-0", 1, version))
            .await?;
        env.wait_machines_running(ns, 1, 4 * MINUTE).await?;
        let tenant = env.tenant_client(ns, name).await?;
        let deadline = tokio::time::Instant::now() + 4 * MINUTE;
        let old_node = loop {
            if let Some(n) = ready_nodes(&tenant).await?.pop() {
                break n;
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "no Ready Node");
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let old_ca = secret_text(&env.secret(ns, "demo-ca").await?, "tls.crt");
        let old_proxy = secret_text(&env.secret(ns, "demo-proxy").await?, "tls.crt");
        let old_config = env.tenant_config(ns, name).await?;
        let old_probe = ReadyzProbe::start(old_config.clone());
        old_probe.answered(MINUTE).await?;

        // Watch the phases and the workers.
        let stop = Arc::new(AtomicBool::new(false));
        let phase_watch = {
            let (stop, kcps) = (
                stop.clone(),
                Api::<KamajiControlPlane>::namespaced(env.client(), ns),
            );
            tokio::spawn(async move {
                let mut seen: Vec<String> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(k) = kcps.get(name).await
                        && let Some(r) = rotation_reason(&k)
                        && seen.last() != Some(&r)
                    {
                        seen.push(r);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                seen
            })
        };
        let node_watch = {
            let (stop, mut tenant, secrets) = (
                stop.clone(),
                tenant.clone(),
                Api::<Secret>::namespaced(env.client(), ns),
            );
            tokio::spawn(async move {
                let mut without_ready = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match ready_nodes(&tenant).await {
                        Ok(n) if n.is_empty() => without_ready.push("no Ready Node".to_owned()),
                        Ok(_) => {}
                        // The API is polled by the probes; a failed list is theirs to count.
                        // Once the old CA is dropped, a client of the old kubeconfig cannot
                        // connect: take the one the rotation published.
                        Err(_) => {
                            if let Ok(s) = secrets.get(&format!("{name}-kubeconfig")).await
                                && let Ok(c) = kamaji_testenv::kubeconfig::config_from_kubeconfig(
                                    secret_text(&s, "value").as_bytes(),
                                )
                                .await
                                && let Ok(c) = kube::Client::try_from(c)
                            {
                                tenant = c;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                without_ready
            })
        };

        env.patch_kcp(
            ns,
            name,
            serde_json::json!({
                "metadata": {"annotations": {CA_ROTATION_ANNOTATION: "2026-12-03"}}
            }),
        )
        .await?;
        // Once the new CA signs, the published kubeconfig is what a user fetches.
        env.wait_kcp(ns, name, "ReplacingWorkers", 8 * MINUTE, |k| {
            rotation_reason(k).as_deref() == Some(reasons::REPLACING_WORKERS)
        })
        .await?;
        let new_probe = ReadyzProbe::start(env.tenant_config(ns, name).await?);
        new_probe.answered(MINUTE).await?;
        // A minor upgrade now would leave the worker's replacement unable to join.
        let refused = env
            .patch_kcp(
                ns,
                name,
                serde_json::json!({"spec": {"version": KUBERNETES_VERSION}}),
            )
            .await
            .expect_err("a minor upgrade during the CA rotation is refused at admission")
            .to_string();
        anyhow::ensure!(
            refused.contains(kamaji_api::validation::MINOR_UPGRADE_DURING_CA_ROTATION)
                && refused.contains("spec.version"),
            "{refused}"
        );
        env.wait_kcp(ns, name, "DroppingPreviousCA", 8 * MINUTE, |k| {
            rotation_reason(k).as_deref() == Some(reasons::DROPPING_PREVIOUS_CA)
        })
        .await?;
        let (old_ok, old_failed, old_why) = old_probe.stop().await;
        env.wait_kcp(ns, name, "Rotated", 5 * MINUTE, |k| {
            rotation_reason(k).as_deref() == Some(reasons::ROTATED)
        })
        .await?;

        // A fresh kubeadm join with the new CA.
        env.capi(ns, "v1beta2", "MachineDeployment")
            .patch(
                "md-0",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
            )
            .await?;
        env.wait_machines_running(ns, 2, 4 * MINUTE).await?;
        // The client made before the rotation trusts the old CA only: from here on, the
        // kubeconfig the rotation published.
        let tenant = env.tenant_client(ns, name).await?;
        let deadline = tokio::time::Instant::now() + 4 * MINUTE;
        let nodes = loop {
            let listed = ready_nodes(&tenant).await;
            if let Ok(n) = &listed
                && n.len() == 2
                && !n.contains(&old_node)
            {
                break n.clone();
            }
            let all = Api::<Node>::all(tenant.clone())
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .map(|n| {
                            let c = n.status.and_then(|s| s.conditions).unwrap_or_default();
                            (
                                n.metadata.name,
                                c.into_iter()
                                    .map(|c| (c.type_, c.status, c.message))
                                    .collect::<Vec<_>>(),
                            )
                        })
                        .collect::<Vec<_>>()
                });
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "not 2 new Ready Nodes after the rotation: {listed:?}; every Node: {all:#?}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        stop.store(true, Ordering::Relaxed);
        let phases = phase_watch.await?;
        let without_ready = node_watch.await?;
        let (new_ok, new_failed, new_why) = new_probe.stop().await;

        // The old kubeconfig is refused now: its CA no longer verifies the API server.
        let old_client = kube::Client::try_from(old_config)?;
        let refused = old_client.apiserver_version().await;

        // No trace of the old CAs.
        let mut traces = Vec::new();
        let secrets = Api::<Secret>::namespaced(env.client(), ns)
            .list(&ListParams::default().labels(&format!("{CLUSTER_NAME_LABEL}={name}")))
            .await?;
        for s in &secrets.items {
            let sname = s.metadata.name.clone().unwrap_or_default();
            for (key, value) in s.data.iter().flatten() {
                let text = String::from_utf8_lossy(&value.0).into_owned();
                let text = if key == "value" || key == "kubeconfig" {
                    kubeconfig_pems(&text)
                } else {
                    text
                };
                let what = format!("Secret {sname} key {key}");
                traces.extend(traces_of(&old_ca, &what, &text));
                traces.extend(traces_of(&old_proxy, &what, &text));
            }
        }
        let cluster_info = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-public")
            .get("cluster-info")
            .await?;
        let ci = cluster_info.data.unwrap_or_default();
        traces.extend(traces_of(
            &old_ca,
            "cluster-info",
            &kubeconfig_pems(ci.get("kubeconfig").map_or("", String::as_str)),
        ));
        let root_ca = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-system")
            .get("kube-root-ca.crt")
            .await?;
        traces.extend(traces_of(
            &old_ca,
            "kube-root-ca.crt",
            root_ca
                .data
                .unwrap_or_default()
                .get("ca.crt")
                .map_or("", String::as_str),
        ));
        let auth = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-system")
            .get("extension-apiserver-authentication")
            .await?;
        for (key, value) in auth.data.unwrap_or_default() {
            let what = format!("extension-apiserver-authentication {key}");
            traces.extend(traces_of(&old_ca, &what, &value));
            traces.extend(traces_of(&old_proxy, &what, &value));
        }
        let url = env.tenant_config(ns, name).await?.cluster_url;
        let served = served_chain(
            url.host().unwrap_or_default(),
            url.port_u16().unwrap_or(443),
        )?;
        traces.extend(traces_of(&old_ca, "the served chain", &served));

        assert_eq!(
            phases,
            [
                reasons::TRUSTING_NEW_CA,
                reasons::ISSUING_FROM_NEW_CA,
                reasons::REPLACING_WORKERS,
                reasons::DROPPING_PREVIOUS_CA,
                reasons::ROTATED
            ],
            "phases in order"
        );
        assert!(
            old_ok > 20,
            "too few polls with the old kubeconfig: {old_ok}"
        );
        assert_eq!(
            old_failed,
            0,
            "/readyz with the kubeconfig read before the rotation failed {old_failed} times \
             (of {}) before the old CA was dropped: {old_why:#?}",
            old_ok + old_failed
        );
        assert!(
            new_ok > 10,
            "too few polls with the new kubeconfig: {new_ok}"
        );
        assert_eq!(
            new_failed,
            0,
            "/readyz with the kubeconfig published by the rotation failed {new_failed} times \
             (of {}): {new_why:#?}",
            new_ok + new_failed
        );
        assert!(
            without_ready.is_empty(),
            "the cluster was without a Ready worker {} times",
            without_ready.len()
        );
        assert!(!nodes.contains(&old_node));
        assert!(
            refused.is_err(),
            "the kubeconfig of the old CA still works after the rotation"
        );
        assert!(
            traces.is_empty(),
            "the old CAs are still there: {traces:#?}"
        );
        // Rotated: the minor upgrade is admitted now.
        env.patch_kcp(
            ns,
            name,
            serde_json::json!({"spec": {"version": KUBERNETES_VERSION}}),
        )
        .await?;
        Ok(())
    })
    .unwrap();
}
