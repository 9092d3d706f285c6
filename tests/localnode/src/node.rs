//! Node objects and their leases: registered Ready, kept fresh, removed on shutdown.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const MANAGER: &str = "kamaji-localnode";

/// One registered node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Node name (also its `kubernetes.io/hostname` label).
    pub name: String,
    /// Its `topology.kubernetes.io/zone` label.
    pub zone: String,
    /// Its `InternalIP` (a loopback address; NodePorts answer there).
    pub ip: Ipv4Addr,
}

/// Creates (or takes over) the Node objects and their leases.
pub(crate) async fn register(client: &Client, nodes: &[NodeInfo], version: &str) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let pp = PatchParams::apply(MANAGER).force();
    for n in nodes {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n.name, "labels": {
                "kubernetes.io/hostname": n.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": n.zone,
                "topology.kubernetes.io/region": "local",
                "node.kamaji-rs.io/localnode": "true",
            }},
        });
        api.patch(&n.name, &pp, &Patch::Apply(&node))
            .await
            .with_context(|| format!("register node {}", n.name))?;
        heartbeat_node(&api, n, version).await?;
    }
    renew_leases(client, nodes).await
}

/// Refreshes the Ready condition (and the rest of the node status).
async fn heartbeat_node(api: &Api<Node>, n: &NodeInfo, version: &str) -> Result<()> {
    let now = Time(Timestamp::now());
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources =
        json!({"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    let status = json!({"status": {
        "conditions": [
            cond("Ready", "True", "KubeletReady", "the local node agent is running"),
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
        ],
        "addresses": [{"type": "InternalIP", "address": n.ip.to_string()},
                      {"type": "Hostname", "address": n.name}],
        "capacity": resources, "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "machineID": n.name, "systemUUID": n.name, "bootID": n.name,
            "kernelVersion": "local", "osImage": "kamaji-localnode",
            "containerRuntimeVersion": "localnode://0.1.0",
            "kubeletVersion": version, "kubeProxyVersion": version,
            "operatingSystem": "linux", "architecture": "amd64",
        },
    }});
    // Conditions merge by type, so only the heartbeat times move once the node is Ready.
    api.patch_status(&n.name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .with_context(|| format!("node {} status", n.name))?;
    Ok(())
}

async fn renew_leases(client: &Client, nodes: &[NodeInfo]) -> Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let pp = PatchParams::apply(MANAGER).force();
    for n in nodes {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": n.name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": n.name, "leaseDurationSeconds": 40,
                     "renewTime": MicroTime(Timestamp::now())},
        });
        api.patch(&n.name, &pp, &Patch::Apply(&lease))
            .await
            .with_context(|| format!("lease of node {}", n.name))?;
    }
    Ok(())
}

/// Renews leases every 10 s and the node status every 30 s, forever.
pub(crate) async fn heartbeat(client: Client, nodes: Vec<NodeInfo>, version: String) {
    let api: Api<Node> = Api::all(client.clone());
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    loop {
        tick.tick().await;
        if let Err(e) = renew_leases(&client, &nodes).await {
            tracing::warn!("renew node leases: {e:#}");
        }
        n += 1;
        if n.is_multiple_of(3) {
            for node in &nodes {
                if let Err(e) = heartbeat_node(&api, node, &version).await {
                    tracing::warn!("node heartbeat: {e:#}");
                }
            }
        }
    }
}

/// Deletes the Node objects and leases.
pub(crate) async fn deregister(client: &Client, nodes: &[NodeInfo]) {
    let api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for n in nodes {
        let _ = api.delete(&n.name, &DeleteParams::default()).await;
        let _ = leases.delete(&n.name, &DeleteParams::default()).await;
    }
}
