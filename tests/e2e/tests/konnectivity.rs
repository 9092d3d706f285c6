//! `addons.konnectivity` against the real chain (issue 14): a tenant whose API server has no
//! route to its workers' network. The konnectivity server (apiserver-network-proxy, built by
//! `make tools`) runs beside kube-apiserver in the control-plane pods on the management
//! machines; the agent runs on a real worker joined through CABPK and dials out to the
//! endpoint. `kubectl logs`, `exec`, `port-forward` and a validating webhook served by a pod
//! on the worker work through the tunnel, fail with the usual errors without it, and work
//! again after the control plane scales (its pod template unchanged) and rolls.

#![cfg(real_programs_as_root)]

use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kamaji_bootstrap::pki::{CertificateAuthority, KeyAlgorithm, LeafSpec};
use kamaji_e2e::machines::{SETTINGS_FOR_THIS_MACHINE_KIND, machine_deployment};
use kamaji_e2e::{
    Env, F0, api_server_has, condition_message, has_container, serial, wait_rolled_out,
};
use kamaji_machine::images::NETCHECK_IMAGE;
use kamaji_machine::run_in_private_network;
use kube::Client;
use kube::api::Api;
use kube::runtime::wait::await_condition;
use tokio::io::AsyncBufReadExt as _;

const MINUTE: Duration = Duration::from_mins(1);
/// The tenants' default pod network (`Cluster.spec.clusterNetwork.pods` of F0).
const TENANT_POD_CIDR: &str = "10.244.0.0/16";

/// `kubectl` with the tenant's admin kubeconfig.
struct Kubectl {
    kubeconfig: tempfile::NamedTempFile,
}

impl Kubectl {
    async fn new(env: &Env, ns: &str, name: &str) -> anyhow::Result<Self> {
        let kubeconfig = tempfile::NamedTempFile::new()?;
        let secret = env.secret(ns, &format!("{name}-kubeconfig")).await?;
        std::fs::write(kubeconfig.path(), kamaji_e2e::secret_text(&secret, "value"))?;
        Ok(Self { kubeconfig })
    }

    fn command(&self) -> tokio::process::Command {
        let mut c =
            tokio::process::Command::new(kamaji_testenv::Tools::locate().unwrap().path("kubectl"));
        c.arg(format!("--kubeconfig={}", self.kubeconfig.path().display()))
            .arg("--request-timeout=20s")
            .kill_on_drop(true);
        c
    }

    /// Runs kubectl: `Ok(stdout)` or `Err(stderr)`.
    async fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .command()
            .args(args)
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `kubectl port-forward pod/netcheck :8080`, then a GET through the forwarded port.
    async fn port_forward(&self) -> Result<String, String> {
        let mut child = self
            .command()
            .args(["port-forward", "pod/netcheck", ":8080"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(Duration::from_secs(20), async {
            while let Ok(Some(line)) = lines.next_line().await {
                // "Forwarding from 127.0.0.1:40123 -> 8080"
                if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                    return rest.split_whitespace().next().map(str::to_owned);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or_else(|| "kubectl port-forward did not start".to_owned())?;
        let get =
            tokio::process::Command::new(kamaji_testenv::Tools::locate().unwrap().path("netcheck"))
                .args(["-get", &format!("http://127.0.0.1:{port}/")])
                .output()
                .await
                .map_err(|e| e.to_string())?;
        let _ = child.kill().await;
        let stderr = match child.stderr.take() {
            Some(mut e) => {
                let mut s = String::new();
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut e, &mut s).await;
                s
            }
            None => String::new(),
        };
        let text = String::from_utf8_lossy(&get.stdout).into_owned();
        if get.status.success() {
            Ok(text)
        } else {
            Err(format!("{text} {stderr}"))
        }
    }

    /// Creates ConfigMap `name` in `default`, which the netcheck webhook reviews.
    async fn create_config_map(&self, name: &str) -> Result<String, String> {
        self.run(&["create", "configmap", name, "-n", "default"])
            .await
    }
}

/// What the API server did through its `cluster` egress: logs, exec, port-forward and a
/// webhook call, each `Ok` or the error kubectl printed.
#[derive(Debug)]
struct Reach {
    logs: Result<String, String>,
    exec: Result<String, String>,
    port_forward: Result<String, String>,
    webhook: Result<String, String>,
}

async fn reach(kubectl: &Kubectl) -> Reach {
    static ATTEMPT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let attempt = ATTEMPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let denied = kubectl.create_config_map("deny-me").await;
    let allowed_name = format!("allowed-{attempt}");
    let allowed = kubectl.create_config_map(&allowed_name).await;
    Reach {
        logs: kubectl.run(&["logs", "netcheck", "-n", "default"]).await,
        exec: kubectl
            .run(&[
                "exec",
                "netcheck",
                "-n",
                "default",
                "--",
                "/netcheck",
                "-say",
                "through",
            ])
            .await,
        port_forward: kubectl.port_forward().await,
        // The webhook answered when it denied one and allowed the other.
        webhook: match (denied, allowed) {
            (Err(e), Ok(_)) if e.contains("denied by the netcheck webhook") => Ok(e),
            (d, a) => Err(format!("deny-me: {d:?}; {allowed_name}: {a:?}")),
        },
    }
}

impl Reach {
    fn all_work(&self) -> bool {
        self.logs.as_ref().is_ok_and(|l| l.contains("serving on"))
            && self.exec.as_ref().is_ok_and(|o| o.trim() == "through")
            && self
                .port_forward
                .as_ref()
                .is_ok_and(|o| o.contains("200") && o.contains("netcheck"))
            && self.webhook.is_ok()
    }

    fn none_works(&self) -> bool {
        self.logs.is_err()
            && self.exec.is_err()
            && self.port_forward.is_err()
            && self.webhook.is_err()
    }
}

/// Retries [`reach`] until everything works three rounds in a row. With several servers each
/// request goes to a random kube-apiserver, and one reached by no agent fails it: three rounds
/// of five tunnelled requests all succeed by luck with at most a 1-in-30000 chance then.
async fn wait_all_work(kubectl: &Kubectl, what: &str) -> Reach {
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    let (mut attempt, mut in_a_row) = (0, 0);
    loop {
        attempt += 1;
        let r = reach(kubectl).await;
        if r.all_work() {
            in_a_row += 1;
            if in_a_row == 3 {
                eprintln!("{what}: everything works through the tunnel (attempt {attempt})");
                return r;
            }
            continue;
        }
        in_a_row = 0;
        assert!(tokio::time::Instant::now() < deadline, "{what}: {r:#?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Waits until the tenant holds `n` konnectivity server leases (one per server).
async fn wait_leases(tenant: &Client, n: usize) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(tenant.clone(), "kube-system");
    let lp = kube::api::ListParams::default().labels("k8s-app=konnectivity-server");
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    loop {
        let found = leases.list(&lp).await.map_or(0, |l| l.items.len());
        if found == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{found} konnectivity server leases, not {n}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The netcheck pod on `node` (HTTP on 8080, the webhook on 8443), its Service, its serving
/// certificate for `netcheck.default.svc` and a ValidatingWebhookConfiguration for ConfigMaps
/// in `default` calling it.
async fn netcheck_with_webhook(tenant: &Client, node: &str) -> anyhow::Result<()> {
    let now = SystemTime::now();
    let ca = CertificateAuthority::generate("netcheck-webhook-ca", KeyAlgorithm::default(), now)?;
    let leaf = ca.issue(
        &LeafSpec::datastore_server("netcheck", &["netcheck.default.svc".to_owned()], &[]),
        KeyAlgorithm::default(),
        now,
    )?;
    let objects = serde_json::json!([
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "netcheck-tls", "namespace": "default"},
         "stringData": {"tls.crt": leaf.cert_pem(), "tls.key": leaf.key_pem()}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "netcheck", "namespace": "default", "labels": {"app": "netcheck"}},
         "spec": {
            "nodeName": node,
            "containers": [{
                "name": "netcheck", "image": NETCHECK_IMAGE, "imagePullPolicy": "Never",
                "args": ["-serve", ":8080", "-webhook", ":8443",
                         "-cert", "/tls/tls.crt", "-key", "/tls/tls.key"],
                "volumeMounts": [{"name": "tls", "mountPath": "/tls"}],
            }],
            "volumes": [{"name": "tls", "secret": {"secretName": "netcheck-tls", "defaultMode": 0o444}}],
         }},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "netcheck", "namespace": "default"},
         "spec": {"selector": {"app": "netcheck"},
                  "ports": [{"name": "webhook", "port": 443, "targetPort": 8443}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "netcheck"},
         "webhooks": [{
            "name": "netcheck.kamaji-rs.test",
            "clientConfig": {
                "service": {"name": "netcheck", "namespace": "default", "port": 443},
                "caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca.cert_pem()),
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}},
            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 10,
            "admissionReviewVersions": ["v1"],
         }]},
    ]);
    for o in objects.as_array().unwrap() {
        kamaji_testenv::apply::apply_value(tenant, o, "kamaji-rs-e2e").await?;
    }
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
    tokio::time::timeout(
        2 * MINUTE,
        await_condition(pods, "netcheck", |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref())
                == Some("Running")
        }),
    )
    .await??;
    Ok(())
}

/// The control-plane Deployment's pod template, as JSON.
async fn deployment_template(env: &Env, ns: &str, name: &str) -> anyhow::Result<serde_json::Value> {
    let d = env.deployment(ns, name).await?;
    Ok(serde_json::to_value(d.spec.map(|s| s.template))?)
}

#[test]
fn konnectivity_carries_logs_exec_port_forward_and_webhooks_to_workers_the_api_server_cannot_reach()
{
    let _serial = serial();
    run_in_private_network(|| async {
        let env = Env::start_with_machines().await?;
        let (ns, name) = ("konnectivity", "demo");
        env.namespace(ns).await?;
        env.apply_yaml(
            &F0::new(ns, name)
                .replicas(2)
                .spec(SETTINGS_FOR_THIS_MACHINE_KIND)
                .yaml(),
        )
        .await?;
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await?;
        env.apply_yaml(&machine_deployment(ns, name, "md-0", 1))
            .await?;
        let workers = env.wait_machines_running(ns, 1, 4 * MINUTE).await?;
        let tenant = env.tenant_client(ns, name).await?;
        let nodes: Api<Node> = Api::all(tenant.clone());
        let worker = nodes.get(&workers[0]).await?;
        let worker_ip = worker
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone())
            .unwrap();

        // The topology: the management machines (where the control-plane pods run) get no
        // route to the worker or to the tenant's pod network; the worker still reaches the
        // endpoint. Shown absent: a connection to the kubelet port is refused by the route.
        for m in env.management.machines() {
            m.exec(&[
                "ip",
                "route",
                "add",
                "unreachable",
                &format!("{worker_ip}/32"),
            ])
            .await?;
            m.exec(&["ip", "route", "add", "unreachable", TENANT_POD_CIDR])
                .await?;
            let direct = m
                .exec(&[
                    "timeout",
                    "5",
                    "bash",
                    "-c",
                    &format!("exec 3<>/dev/tcp/{worker_ip}/10250"),
                ])
                .await;
            let e = direct.expect_err("the management machine still reaches the kubelet");
            assert!(e.to_string().contains("No route to host"), "{e:#}");
        }
        netcheck_with_webhook(&tenant, &workers[0]).await?;
        let kubectl = Kubectl::new(&env, ns, name).await?;

        // Without konnectivity, each command fails with the usual error.
        let without = reach(&kubectl).await;
        assert!(without.none_works(), "{without:#?}");
        let logs_error = without.logs.clone().unwrap_err();
        assert!(
            logs_error.contains(&format!("{worker_ip}:10250"))
                && logs_error.contains("no route to host"),
            "{logs_error}"
        );
        assert!(
            without
                .webhook
                .as_ref()
                .unwrap_err()
                .contains("failed calling webhook"),
            "{without:#?}"
        );

        // konnectivity on: the pods roll with the server beside kube-apiserver, the agent runs
        // on the worker, and everything goes through the tunnel.
        env.patch_kcp(
            ns,
            name,
            serde_json::json!({"spec": {"addons": {"konnectivity": {
            "agent": {"extraArgs": ["--sync-interval=1s", "--sync-interval-cap=5s"]}}}}}),
        )
        .await?;
        let kcp = env
            .wait_kcp_condition(ns, name, "KonnectivityReady", "True", 4 * MINUTE)
            .await?;
        assert_eq!(
            condition_message(&kcp, "KonnectivityReady"),
            "1 of 1 konnectivity agents connected"
        );
        let deployment = wait_rolled_out(
            &env,
            ns,
            name,
            2,
            3 * MINUTE,
            has_container("konnectivity-server", true),
        )
        .await?;
        let server = deployment
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers
            .into_iter()
            .find(|c| c.name == "konnectivity-server")
            .unwrap();
        assert_eq!(
            server.image.as_deref(),
            Some(kamaji_machine::images::konnectivity_image("proxy-server").as_str()),
            "the default image is the release of the tenant's minor"
        );
        let agents: Api<DaemonSet> = Api::namespaced(tenant.clone(), "kube-system");
        let agent = agents.get("konnectivity-agent").await?;
        assert_eq!(
            agent.spec.unwrap().template.spec.unwrap().containers[0]
                .image
                .as_deref(),
            Some(kamaji_machine::images::konnectivity_image("proxy-agent").as_str())
        );
        // One lease per server: the agents connect to both.
        wait_leases(&tenant, 2).await;
        let through = wait_all_work(&kubectl, "konnectivity on").await;
        assert!(
            through
                .webhook
                .unwrap()
                .contains("denied by the netcheck webhook")
        );

        // Scaling keeps the pod template (agents count the servers by their leases, not by a
        // flag of the replica count), and the tunnel keeps working with the servers left.
        let template = deployment_template(&env, ns, name).await?;
        env.patch_kcp(ns, name, serde_json::json!({"spec": {"replicas": 1}}))
            .await?;
        wait_rolled_out(&env, ns, name, 1, 3 * MINUTE, |_| true).await?;
        assert_eq!(
            deployment_template(&env, ns, name).await?,
            template,
            "scaling changed the pod template"
        );
        wait_leases(&tenant, 1).await;
        wait_all_work(&kubectl, "scaled to one replica").await;

        // The control plane rolls (new server pods, new server IDs): the agents reconnect.
        env.patch_kcp(
            ns,
            name,
            serde_json::json!({"spec": {"apiServer": {"extraArgs": ["--v=1"]}}}),
        )
        .await?;
        wait_rolled_out(&env, ns, name, 1, 4 * MINUTE, api_server_has("--v=1")).await?;
        wait_all_work(&kubectl, "after the control plane rolled").await;

        // konnectivity off: the agents are removed from the tenant, the condition and the
        // server's Secret go, and the commands fail again.
        env.patch_kcp(
            ns,
            name,
            serde_json::json!({"spec": {"addons": {"konnectivity": null}}}),
        )
        .await?;
        tokio::time::timeout(
            3 * MINUTE,
            await_condition(
                agents.clone(),
                "konnectivity-agent",
                |d: Option<&DaemonSet>| d.is_none(),
            ),
        )
        .await??;
        wait_rolled_out(
            &env,
            ns,
            name,
            1,
            4 * MINUTE,
            has_container("konnectivity-server", false),
        )
        .await?;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(env.client(), ns);
        let gone = tokio::time::timeout(
            2 * MINUTE,
            await_condition(
                secrets,
                "demo-konnectivity-server.kubeconfig",
                |s: Option<&k8s_openapi::api::core::v1::Secret>| s.is_none(),
            ),
        )
        .await;
        assert!(
            matches!(gone, Ok(Ok(_))),
            "the server's Secret outlived konnectivity"
        );
        let kcp = env
            .wait_kcp_condition(ns, name, "Available", "True", MINUTE)
            .await?;
        assert!(
            !kcp.status
                .unwrap()
                .conditions
                .unwrap()
                .iter()
                .any(|c| c.type_ == "KonnectivityReady"),
            "KonnectivityReady outlived konnectivity"
        );
        // The pods replaced keep serving for their pre-stop sleep (the server beside them as
        // long): the commands fail once they are gone.
        let pods: Api<Pod> = Api::namespaced(env.client(), ns);
        let deadline = tokio::time::Instant::now() + MINUTE;
        while pods
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .iter()
            .any(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.name == "konnectivity-server"))
            })
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "a pod with the server stays"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let after = reach(&kubectl).await;
        assert!(after.none_works(), "{after:#?}");
        Ok(())
    })
    .unwrap();
}
