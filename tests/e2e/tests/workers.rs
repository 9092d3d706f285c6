//! Workers join tenant clusters through Cluster API's kubeadm bootstrap data, on real
//! machines (kamaji-machine: containerd, runc, a kubelet), until their Node is Ready and the
//! kube-proxy and CoreDNS the provider installs run on them.

#![cfg(real_programs_as_root)]

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kamaji_e2e::{Env, F0};
use kamaji_machine::images::NETCHECK_IMAGE;
use kamaji_machine::run_in_private_network;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, LogParams, PostParams,
};
use kube::runtime::wait::await_condition;

const MINUTE: Duration = Duration::from_mins(1);

/// The tenant settings this machine kind needs, as a user would write them: the kubelet
/// refuses cgroup v1 unless `failCgroupV1: false` and the machines use the cgroupfs driver;
/// kube-proxy runs in nftables mode (its image carries `nft`) and leaves the kernel's conntrack
/// limit alone (`nf_conntrack_max` is read-only outside the host's network namespace).
const SETTINGS_FOR_THIS_MACHINE_KIND: &str = "  kubelet:
    cgroupfs: cgroupfs
    configurationJSONPatches:
    - {op: add, path: /failCgroupV1, value: false}
  addons:
    coreDNS: {}
    kubeProxy:
      configurationJSONPatches:
      - {op: replace, path: /mode, value: nftables}
      - {op: add, path: /conntrack, value: {maxPerCore: 0}}
";

/// A MachineDeployment of `replicas` stand-in machines bootstrapped by CABPK from the
/// quickstart's worker KubeadmConfigTemplate (`name: '{{ local_hostname }}'`).
fn machine_deployment(ns: &str, cluster: &str, name: &str, replicas: i32) -> String {
    let version = kamaji_testenv::KUBERNETES_VERSION;
    format!(
        r"
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          name: '{{{{ local_hostname }}}}'
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: StandInMachineTemplate
metadata: {{name: {name}, namespace: {ns}}}
spec:
  template:
    spec: {{}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  clusterName: {cluster}
  replicas: {replicas}
  selector: {{matchLabels: {{}}}}
  template:
    spec:
      clusterName: {cluster}
      version: {version}
      bootstrap:
        configRef:
          apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
          kind: KubeadmConfigTemplate
          name: {name}
      infrastructureRef:
        apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
        kind: StandInMachineTemplate
        name: {name}
"
    )
}

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

#[test]
fn a_worker_joins_through_cabpk_bootstrap_data_until_its_node_is_ready_and_runs_dns_and_proxy() {
    let _serial = kamaji_e2e::serial();
    run_in_private_network(|| async {
        let env = Env::start_with_machines().await?;
        let (ns, name) = ("workers", "demo");
        env.namespace(ns).await?;
        env.apply_yaml(&F0::new(ns, name).replicas(1).spec(SETTINGS_FOR_THIS_MACHINE_KIND).yaml())
            .await?;
        env.wait_kcp_condition(ns, name, "Available", "True", 4 * MINUTE)
            .await?;
        env.apply_yaml(&machine_deployment(ns, name, "md-0", 1)).await?;

        // The CAPI Machine runs with a nodeRef, through CABPK's data and a real kubeadm join.
        let machines: Api<DynamicObject> = Api::namespaced_with(
            env.client(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "cluster.x-k8s.io",
                "v1beta2",
                "Machine",
            )),
        );
        let deadline = tokio::time::Instant::now() + 4 * MINUTE;
        let machine = loop {
            let list = machines.list(&ListParams::default()).await?;
            if let Some(m) = list.items.iter().find(|m| {
                m.data["status"]["phase"] == "Running" && m.data["status"]["nodeRef"]["name"].is_string()
            }) {
                break m.clone();
            }
            if tokio::time::Instant::now() > deadline {
                let provider = env.machines.as_ref().unwrap();
                let mut logs = String::new();
                for n in provider.machine_names().await {
                    if let Some(m) = provider.machine(&n).await {
                        let _ = writeln!(logs, "kubelet on {n}:\n{}", m.kubelet_log_tail(40));
                    }
                }
                anyhow::bail!(
                    "no Machine Running with a nodeRef in 4 minutes: {:#?}\nprovider failures: {:#?}\n{logs}",
                    list.items.iter().map(|m| &m.data["status"]).collect::<Vec<_>>(),
                    provider.failures().await
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let node_name = machine.data["status"]["nodeRef"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(node_name, machine.metadata.name.clone().unwrap());

        // The Node is Ready in the tenant, with the stand-in's providerID.
        let tenant = env.tenant_client(ns, name).await?;
        let nodes: Api<Node> = Api::all(tenant.clone());
        let node = tokio::time::timeout(
            2 * MINUTE,
            await_condition(nodes.clone(), &node_name, |n: Option<&Node>| {
                n.is_some_and(node_ready)
            }),
        )
        .await??
        .unwrap();
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            Some(format!("kamaji-machine://{node_name}"))
        );

        // kube-proxy and CoreDNS, installed by the provider, run on the worker.
        let system: Api<Pod> = Api::namespaced(tenant.clone(), "kube-system");
        let deadline = tokio::time::Instant::now() + 3 * MINUTE;
        loop {
            let pods = system.list(&ListParams::default()).await?;
            let running = |prefix: &str| {
                pods.items.iter().any(|p| {
                    p.metadata.name.as_deref().unwrap_or_default().starts_with(prefix)
                        && pod_phase(p) == "Running"
                        && p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                            == Some(node_name.as_str())
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
            };
            if running("kube-proxy") && running("coredns") {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                let mut logs = String::new();
                for p in &pods.items {
                    let n = p.metadata.name.clone().unwrap_or_default();
                    let lp = LogParams { tail_lines: Some(15), ..LogParams::default() };
                    let now = system.logs(&n, &lp).await.unwrap_or_default();
                    let prev = system
                        .logs(&n, &LogParams { previous: true, ..lp })
                        .await
                        .unwrap_or_default();
                    let _ = writeln!(logs, "--- {n}:\n{prev}\n{now}");
                }
                anyhow::bail!(
                    "{logs}\nkube-proxy and CoreDNS not Ready on {node_name} in 3 minutes: {:#?}",
                    pods.items
                        .iter()
                        .map(|p| {
                            let s = p.status.clone().unwrap_or_default();
                            (
                                p.metadata.name.clone(),
                                s.phase,
                                serde_json::to_string(&s.container_statuses).unwrap_or_default(),
                            )
                        })
                        .collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }

        // A pod on the worker resolves the API through CoreDNS and gets 200 from it through
        // the `kubernetes` Service's ClusterIP (kube-proxy).
        let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "netcheck"},
            "spec": {
                "restartPolicy": "Never",
                "nodeName": node_name,
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
        Ok(())
    })
    .unwrap();
}
