//! Workers join tenant clusters through Cluster API's kubeadm bootstrap data, on real
//! machines (kamaji-machine: containerd, runc, a kubelet), until their Node is Ready and the
//! kube-proxy and CoreDNS the provider installs run on them.

#![cfg(real_programs_as_root)]

use std::fmt::Write as _;
use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Pod};
use kamaji_e2e::machines::{SETTINGS_FOR_THIS_MACHINE_KIND, machine_deployment};
use kamaji_e2e::{Env, F0, wait_rolled_out};
use kamaji_machine::images::NETCHECK_IMAGE;
use kamaji_machine::run_in_private_network;
use kube::api::{Api, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;

const MINUTE: Duration = Duration::from_mins(1);

fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// The CAPI Machines of `ns`.
fn capi_machines(env: &Env, ns: &str) -> Api<DynamicObject> {
    env.capi(ns, "v1beta2", "Machine")
}

/// Waits until kube-proxy is Running and Ready on every one of `nodes` and every CoreDNS
/// replica is Running and Ready on one of them.
async fn wait_addons_on(
    system: &Api<Pod>,
    nodes: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let pods = system.list(&ListParams::default()).await?;
        let ready_on = |p: &Pod| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            pod_phase(p) == "Running"
                && nodes.contains(&node)
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        };
        let named = |prefix: &'static str| {
            pods.items.iter().filter(move |p| {
                p.metadata
                    .name
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with(prefix)
            })
        };
        let proxies_ok = nodes.iter().all(|n| {
            named("kube-proxy").any(|p| {
                ready_on(p)
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n.as_str())
            })
        });
        let dns_ok = named("coredns").count() > 0 && named("coredns").all(ready_on);
        if proxies_ok && dns_ok {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            let mut logs = String::new();
            for p in &pods.items {
                let n = p.metadata.name.clone().unwrap_or_default();
                let lp = LogParams {
                    tail_lines: Some(15),
                    ..LogParams::default()
                };
                let now = system.logs(&n, &lp).await.unwrap_or_default();
                let _ = writeln!(logs, "--- {n} ({}):\n{now}", pod_phase(p));
            }
            anyhow::bail!("kube-proxy and CoreDNS not Ready on {nodes:?} in {timeout:?}:\n{logs}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Each Node's Ready condition as `(status, lastTransitionTime)`.
async fn ready_transitions(
    nodes: &Api<Node>,
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let c = n
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            Some((name, (c.status, format!("{:?}", c.last_transition_time))))
        })
        .collect())
}

#[test]
fn two_workers_join_through_cabpk_run_dns_and_proxy_stay_ready_across_control_plane_changes_and_scale_down_drains()
 {
    let _serial = kamaji_e2e::serial();
    run_in_private_network(|| async {
        let env = Env::start_with_machines().await?;
        let (ns, name) = ("workers", "demo");
        env.namespace(ns).await?;
        env.apply_yaml(&F0::new(ns, name).replicas(2).spec(SETTINGS_FOR_THIS_MACHINE_KIND).yaml())
            .await?;
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await?;
        let joined_at = std::time::Instant::now();
        env.apply_yaml(&machine_deployment(ns, name, "md-0", 2)).await?;

        // Both CAPI Machines run with a nodeRef, through CABPK's data and a real kubeadm join.
        let workers = env.wait_machines_running(ns, 2, 4 * MINUTE).await?;
        eprintln!("2 workers joined and Running {:?} after the MachineDeployment", joined_at.elapsed());
        for w in &workers {
            assert!(w.starts_with("md-0-"), "{w}");
        }

        // Both Nodes are Ready in the tenant, with the stand-in's providerID.
        let tenant = env.tenant_client(ns, name).await?;
        let nodes: Api<Node> = Api::all(tenant.clone());
        for w in &workers {
            let node = tokio::time::timeout(
                2 * MINUTE,
                await_condition(nodes.clone(), w, |n: Option<&Node>| n.is_some_and(node_ready)),
            )
            .await??
            .unwrap();
            assert_eq!(
                node.spec.as_ref().and_then(|s| s.provider_id.clone()),
                Some(format!("kamaji-machine://{w}"))
            );
        }

        // The kubelets' TLS bootstrap as kubeadm documents it: each client CSR from a
        // bootstrap token, approved by the controller manager (kubeadm's auto-approval
        // bindings); the serving certificate is self-signed (serverTLSBootstrap off), so no
        // kubelet-serving CSR waits for an approver.
        let csrs: Api<CertificateSigningRequest> = Api::all(tenant.clone());
        let csrs = csrs.list(&ListParams::default()).await?.items;
        let approved_client = csrs
            .iter()
            .filter(|c| c.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet")
            .filter(|c| c.spec.username.as_deref().is_some_and(|u| u.starts_with("system:bootstrap:")))
            .filter(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Approved" && c.status == "True"))
            })
            .count();
        assert_eq!(approved_client, 2, "{csrs:#?}");
        assert!(
            !csrs.iter().any(|c| c.spec.signer_name == "kubernetes.io/kubelet-serving"),
            "{csrs:#?}"
        );

        // kube-proxy and CoreDNS, installed by the provider, run on the workers.
        let system: Api<Pod> = Api::namespaced(tenant.clone(), "kube-system");
        wait_addons_on(&system, &workers, 3 * MINUTE).await?;

        // A pod on a worker resolves the API through CoreDNS and gets 200 from it through the
        // `kubernetes` Service's ClusterIP (kube-proxy); its log comes through the tenant API
        // from the kubelet.
        let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "netcheck"},
            "spec": {
                "restartPolicy": "Never",
                "nodeName": workers[0],
                "containers": [{
                    "name": "netcheck", "image": NETCHECK_IMAGE, "imagePullPolicy": "Never",
                    "args": [
                        "-resolve", "kubernetes.default.svc.cluster.local",
                        "-get", "https://kubernetes.default.svc.cluster.local/readyz",
                        "-cacert", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
                        "-token", "/var/run/secrets/kubernetes.io/serviceaccount/token",
                    ],
                }],
            },
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
        let done = tokio::time::timeout(
            2 * MINUTE,
            await_condition(pods.clone(), "netcheck", |p: Option<&Pod>| {
                p.is_some_and(|p| matches!(pod_phase(p), "Succeeded" | "Failed"))
            }),
        )
        .await??
        .unwrap();
        let log = pods.logs("netcheck", &LogParams::default()).await?;
        assert_eq!(pod_phase(&done), "Succeeded", "netcheck failed: {log}");
        assert!(log.contains("resolved kubernetes.default.svc.cluster.local 10.96.0.1"), "{log}");
        assert!(log.contains("200 https://kubernetes.default.svc.cluster.local/readyz ok"), "{log}");

        // `kubectl logs` and `kubectl exec` from the tenant reach a worker's pod.
        let kubeconfig = tempfile::NamedTempFile::new()?;
        let secret = env.secret(ns, &format!("{name}-kubeconfig")).await?;
        std::fs::write(kubeconfig.path(), kamaji_e2e::secret_text(&secret, "value"))?;
        let kubectl = |args: &[&str]| {
            let out = std::process::Command::new(kamaji_testenv::Tools::locate().unwrap().path("kubectl"))
                .arg(format!("--kubeconfig={}", kubeconfig.path().display()))
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert!(kubectl(&["logs", "netcheck"]).contains("200 https://"));
        let proxy = system
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|p| {
                p.metadata.name.as_deref().unwrap_or_default().starts_with("kube-proxy")
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(workers[1].as_str())
            })
            .and_then(|p| p.metadata.name)
            .unwrap();
        let version = kubectl(&["exec", "-n", "kube-system", &proxy, "--", "/usr/local/bin/kube-proxy", "--version"]);
        assert!(version.contains(kamaji_testenv::KUBERNETES_VERSION), "{version}");

        // The workers stay Ready, without a Ready transition, across an extraArgs roll of the
        // control plane and `kubectl scale` of the KamajiControlPlane 2 → 3 → 1.
        let before = ready_transitions(&nodes).await?;
        let provider = env.machines.as_ref().unwrap();
        let mut log_marks = BTreeMap::new();
        for w in &workers {
            let lines = provider.machine(w).await.unwrap().kubelet_log_tail(1_000_000).lines().count();
            log_marks.insert(w.clone(), lines);
        }
        assert_eq!(before.len(), 2, "{before:?}");
        env.patch_kcp(ns, name, serde_json::json!({"spec": {"apiServer": {"extraArgs": ["--max-mutating-requests-inflight=400"]}}}))
            .await?;
        wait_rolled_out(&env, ns, name, 2, 4 * MINUTE, |d: &Deployment| {
            d.spec.as_ref().and_then(|s| s.template.spec.as_ref()).is_some_and(|p| {
                p.containers.iter().any(|c| {
                    c.args.as_ref().is_some_and(|a| a.iter().any(|a| a == "--max-mutating-requests-inflight=400"))
                })
            })
        })
        .await?;
        for replicas in [3, 1] {
            env.patch_kcp(ns, name, serde_json::json!({"spec": {"replicas": replicas}})).await?;
            wait_rolled_out(&env, ns, name, replicas, 4 * MINUTE, |_| true).await?;
        }
        // Give the kubelets one status update after the last change.
        tokio::time::sleep(Duration::from_secs(15)).await;
        let after = ready_transitions(&nodes).await?;
        assert_eq!(before, after, "a worker's Ready condition changed");
        for w in &workers {
            let log = provider.machine(w).await.unwrap().kubelet_log_tail(1_000_000);
            let errors: Vec<&str> = log
                .lines()
                .skip(log_marks[w])
                .filter(|l| l.contains("Error updating node status"))
                .collect();
            assert!(errors.is_empty(), "kubelet on {w}:\n{}", errors.join("\n"));
        }

        // Scaling the MachineDeployment down drains the Node (cordoned through the tenant API)
        // and removes it; its machine stops.
        let cordoned = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let seen = std::sync::Arc::clone(&cordoned);
        let watch_nodes = nodes.clone();
        let watching = tokio::spawn(async move {
            use futures::StreamExt as _;
            let mut events = kube::runtime::watcher(watch_nodes, kube::runtime::watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                if let Ok(
                    kube::runtime::watcher::Event::Apply(n)
                    | kube::runtime::watcher::Event::InitApply(n),
                ) = event
                    && n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                {
                    seen.lock()
                        .unwrap()
                        .insert(n.metadata.name.clone().unwrap_or_default());
                }
            }
        });
        let mds = env.capi(ns, "v1beta2", "MachineDeployment");
        mds.patch("md-0", &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})))
            .await?;
        let remaining = env.wait_machines_running(ns, 1, 4 * MINUTE).await?;
        let removed: Vec<&String> = workers.iter().filter(|w| !remaining.contains(w)).collect();
        assert_eq!(removed.len(), 1);
        let removed = removed[0].clone();
        let deadline = tokio::time::Instant::now() + 2 * MINUTE;
        while nodes.get_opt(&removed).await?.is_some() || provider.machine(&removed).await.is_some() {
            assert!(tokio::time::Instant::now() < deadline, "Node or machine {removed} still there");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        watching.abort();
        assert!(cordoned.lock().unwrap().contains(&removed), "{removed} was not drained (cordoned) before removal");
        assert!(nodes.get_opt(&remaining[0]).await?.as_ref().is_some_and(node_ready));
        Ok(())
    })
    .unwrap();
}

/// Waits until some CAPI Machine of `ns` not in `except` is `Running` with a `nodeRef`.
async fn wait_new_machine_running(
    env: &Env,
    ns: &str,
    except: &[&str],
    timeout: Duration,
) -> anyhow::Result<String> {
    let machines = capi_machines(env, ns);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let list = machines.list(&ListParams::default()).await?;
        if let Some(name) = list.items.iter().find_map(|m| {
            (m.data["status"]["phase"] == "Running"
                && !except.contains(&m.metadata.name.as_deref().unwrap_or_default()))
            .then(|| {
                m.data["status"]["nodeRef"]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten()
        }) {
            return Ok(name);
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!(
                "no new Machine Running in {timeout:?}; provider failures: {:#?}",
                env.machines.as_ref().unwrap().failures().await
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[test]
fn an_expired_bootstrap_token_fails_the_join_with_kubeadms_message_and_a_rollout_to_the_users_template_joins_once_its_removed_kubelet_flag_is_dropped()
 {
    let _serial = kamaji_e2e::serial();
    run_in_private_network(|| async {
        let env = Env::start_with_machines().await?;
        let (ns, name) = ("tokens", "demo");
        env.namespace(ns).await?;
        env.apply_yaml(
            &F0::new(ns, name)
                .replicas(1)
                .spec(SETTINGS_FOR_THIS_MACHINE_KIND)
                .yaml(),
        )
        .await?;
        let kcp = env
            .wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await?;
        let endpoint = kcp.spec.control_plane_endpoint.clone().unwrap();
        let provider = env.machines.as_ref().unwrap();

        // The first Machine's boot is delayed past its token's life: the token Secret is gone
        // (what the token cleaner does at expiry) before its machine runs `kubeadm join`.
        provider.hold(true).await;
        // kubeadm gives up discovery after 30 s instead of 5 minutes (CABPK v1beta2's field).
        let md = machine_deployment(ns, name, "md-1", 1)
            .replacen(
                "apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\nkind: KubeadmConfigTemplate",
                "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfigTemplate",
                1,
            )
            .replace(
                "      joinConfiguration:\n",
                "      joinConfiguration:\n        timeouts: {discoverySeconds: 30}\n",
            );
        env.apply_yaml(&md).await?;
        let machines = capi_machines(&env, ns);
        let deadline = tokio::time::Instant::now() + 2 * MINUTE;
        let (first, data_secret) = loop {
            let list = machines.list(&ListParams::default()).await?;
            if let Some(found) = list.items.iter().find_map(|m| {
                let secret = m.data["spec"]["bootstrap"]["dataSecretName"].as_str()?;
                Some((m.metadata.name.clone()?, secret.to_owned()))
            }) {
                break found;
            }
            assert!(tokio::time::Instant::now() < deadline, "no bootstrap data");
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let data = kamaji_e2e::secret_text(&env.secret(ns, &data_secret).await?, "value");
        let token = data
            .lines()
            .find_map(|l| l.trim().strip_prefix("token: "))
            .map(|t| t.trim_matches(|c| c == '"' || c == '\''))
            .expect("a bootstrap token in the join configuration");
        let token_id = token.split('.').next().unwrap();
        let tenant = env.tenant_client(ns, name).await?;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(tenant.clone(), "kube-system");
        secrets
            .delete(
                &format!("bootstrap-token-{token_id}"),
                &kube::api::DeleteParams::default(),
            )
            .await?;
        provider.hold(false).await;
        let deadline = tokio::time::Instant::now() + 3 * MINUTE;
        let failure = loop {
            if let Some(f) = provider.failures().await.get(&first) {
                break f.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the join did not fail; machines {:?}; bootstrap data:\n{data}",
                provider.machine_names().await
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        assert!(
            failure.contains(&format!(
                "couldn't validate the identity of the API Server: could not find a JWS \
                 signature in the cluster-info ConfigMap for token ID \"{token_id}\""
            )),
            "{failure}"
        );

        // The users' worker template as written (shared/samples: files written before the
        // join, `cloud-provider: external`, an explicit discovery endpoint) passes
        // `cloud-config` to the kubelet, a flag kubelet v1.34 removed (kubernetes#130161): the
        // machine's kubelet exits with its message.
        // Its copy in tests/samples (byte for byte, as admission.rs keeps the others), so a
        // clone without the shared folder beside it runs this too.
        let sample = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/samples/kubeadmconfigtemplate-cloud-provider-v1beta1.yaml"),
        )?;
        use base64::Engine as _;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cloud_conf = "[Global]\nauth-url = https://keystone.example.com:5000/v3\n";
        let vars = std::collections::HashMap::from([
            ("CLOUD_CONF".to_owned(), b64(cloud_conf)),
            (
                "CA_CERT".to_owned(),
                b64("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
            ),
            ("MASTER_VIP".to_owned(), endpoint.host.clone().unwrap()),
        ]);
        let mut template: serde_json::Value =
            serde_yaml::from_str(&kamaji_e2e::substitute(&sample, &vars)?)?;
        template["metadata"]["namespace"] = ns.into();
        env.apply_value(&template).await?;
        let mds = env.capi(ns, "v1beta1", "MachineDeployment");
        let roll_to = |config: &'static str| {
            let mds = mds.clone();
            async move {
                mds.patch(
                    "md-1",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"template": {"spec": {
                        "bootstrap": {"configRef": {"name": config}}}}}})),
                )
                .await
            }
        };
        roll_to("prow-md-0").await?;
        let message = "unknown flag: --cloud-config";
        let deadline = tokio::time::Instant::now() + 3 * MINUTE;
        let stale = 'found: loop {
            for m in provider.machine_names().await {
                if m != first
                    && let Some(machine) = provider.machine(&m).await
                    && machine.kubelet_log_tail(200).contains(message)
                {
                    break 'found m;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no kubelet said {message:?}; machines {:?}",
                provider.machine_names().await
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        };

        // The same template without that argument (the change upstream providers made to
        // theirs for kubelet v1.34) joins again, with a fresh token whose cluster-info
        // signature the bootstrap signer adds.
        let mut fixed = template.clone();
        fixed["metadata"]["name"] = "prow-md-1".into();
        fixed["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"]
            ["kubeletExtraArgs"]
            .as_object_mut()
            .unwrap()
            .remove("cloud-config");
        env.apply_value(&fixed).await?;
        roll_to("prow-md-1").await?;
        let joined =
            wait_new_machine_running(&env, ns, &[first.as_str(), stale.as_str()], 5 * MINUTE)
                .await?;
        let machine = provider.machine(&joined).await.unwrap();
        assert_eq!(
            String::from_utf8(machine.read_file("/etc/kubernetes/cloud.conf")?)?,
            cloud_conf
        );
        assert!(machine.read_file("/etc/certs/cacert").is_ok());
        let flags = String::from_utf8(machine.read_file("/var/lib/kubelet/kubeadm-flags.env")?)?;
        assert!(flags.contains("--cloud-provider=external"), "{flags}");
        let nodes: Api<Node> = Api::all(tenant.clone());
        let node = tokio::time::timeout(
            2 * MINUTE,
            await_condition(nodes.clone(), &joined, |n: Option<&Node>| {
                n.is_some_and(|n| {
                    node_ready(n)
                        && !n
                            .spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|t| {
                                t.iter()
                                    .any(|t| t.key == kamaji_e2e::machines::UNINITIALIZED_TAINT)
                            })
                })
            }),
        )
        .await??
        .unwrap();
        assert_eq!(
            node.spec.and_then(|s| s.provider_id),
            Some(format!("kamaji-machine://{joined}"))
        );
        Ok(())
    })
    .unwrap();
}
