//! kwok (`sigs.k8s.io/kwok`, built by `tests/tools/build.sh`) playing the kubelets of fake
//! Nodes: the simulated scale benchmark's management cluster keeps its real API server,
//! scheduler and controllers, but the pods bound to these Nodes become `Running` and `Ready`
//! without any process, as in Cluster API's and vcluster's scale tests. Nothing answers on a
//! simulated pod's address.
//!
//! The Nodes are created here with the annotation [`FAKE_NODE_ANNOTATION`]` = fake` and kwok
//! manages only those (`--manage-nodes-with-annotation-selector`), renewing their Leases
//! (`--node-lease-duration-seconds`) so the node lifecycle controller keeps them `Ready`.
//! The stages (kwok's `Stage` API, written here) are the smallest set that plays a kubelet's
//! visible part: a Node becomes `Ready`; a pod becomes `Running` with every container ready
//! and an address from `--cidr`; a pod being deleted is removed.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::{LocalCluster, Supervised};

/// The annotation that marks a Node as kwok's (value `fake`).
pub const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The simulated pods' addresses (kwok's `--cidr`); nothing routes them.
pub const FAKE_POD_CIDR: &str = "10.250.0.0/16";

/// kwok's stages: Node ready, pod running and ready, pod deleted.
const STAGES: &str = r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - {type: {{ .type | Quote }}, status: {{ .status | Quote }}, reason: {{ .reason | Quote }}, message: {{ .message | Quote }}, lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
      {{ end }}
      addresses:
      - {type: InternalIP, address: {{ NodeIP | Quote }}}
      - {type: Hostname, address: {{ .metadata.name | Quote }}}
      allocatable: {cpu: "1k", memory: 1Ti, pods: "10k"}
      capacity: {cpu: "1k", memory: 1Ti, pods: "10k"}
      nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: kwok, kubeProxyVersion: kwok, containerRuntimeVersion: kwok, kernelVersion: kwok, osImage: kwok, machineID: "", systemUUID: "", bootID: ""}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-running}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      {{ range list "PodScheduled" "Initialized" "ContainersReady" "Ready" }}
      - {type: {{ . }}, status: "True", lastTransitionTime: {{ $now | Quote }}}
      {{ end }}
      containerStatuses:
      {{ range .spec.containers }}
      - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, imageID: "", ready: true, started: true, restartCount: 0, state: {running: {startedAt: {{ $now | Quote }}}}}
      {{ end }}
      {{ with NodeIPsWith .spec.nodeName }}
      hostIP: {{ index . 0 | Quote }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - {ip: {{ . | Quote }}}
      {{ end }}
      {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-deleted}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: Exists}
  next:
    finalizers: {empty: true}
    delete: true
"#;

/// A running kwok and its fake Nodes. Dropping it stops kwok (the Nodes stay).
pub struct Kwok {
    process: Supervised,
}

impl Kwok {
    /// Creates `nodes` fake Nodes `kwok-0`, `kwok-1`, … (no taints, so every pod may land on
    /// them) and starts kwok for them with the cluster's admin credentials; returns once every
    /// Node is `Ready`.
    ///
    /// # Errors
    /// When kwok is missing (`make tools`), does not start, or the Nodes are not `Ready`
    /// within 60 s (the message carries the tail of kwok's log).
    pub async fn start(cluster: &LocalCluster, nodes: usize) -> Result<Self> {
        for i in 0..nodes {
            cluster
                .apply_value(&serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": format!("kwok-{i}"),
                        "annotations": {FAKE_NODE_ANNOTATION: "fake"},
                        "labels": {"type": "kwok", "kubernetes.io/hostname": format!("kwok-{i}")},
                    },
                }))
                .await?;
        }
        let stages = cluster.dir().join("kwok-stages.yaml");
        std::fs::write(&stages, STAGES)?;
        let mut cmd = Command::new(cluster.tools().path("kwok"));
        cmd.arg(format!("--config={}", stages.display()))
            .arg(format!(
                "--kubeconfig={}",
                cluster.kubeconfig_path().display()
            ))
            .arg(format!(
                "--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake"
            ))
            .arg("--manage-all-nodes=false")
            .arg(format!("--cidr={FAKE_POD_CIDR}"))
            .arg("--node-ip=10.251.0.1")
            .arg("--node-lease-duration-seconds=40")
            .arg("--server-address=127.0.0.1:0");
        let mut process = Supervised::spawn("kwok", cmd, &cluster.dir().join("kwok.log"))?;
        let api = Api::<Node>::all(cluster.client());
        let lp = ListParams::default().labels("type=kwok");
        crate::wait::poll_until(
            &format!("kwok's {nodes} Nodes Ready"),
            Duration::from_mins(1),
            Duration::from_millis(250),
            Some(&mut process),
            || {
                let (api, lp) = (api.clone(), lp.clone());
                async move {
                    api.list(&lp).await.is_ok_and(|list| {
                        list.items.len() == nodes && list.items.iter().all(node_ready)
                    })
                }
            },
        )
        .await?;
        Ok(Self { process })
    }

    /// kwok's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
