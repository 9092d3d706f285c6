//! `make demo`: a local management cluster with the real CAPI core manager, a local node, a
//! shared etcd DataStore named `default` and the kamaji-rs manager; then the demo cluster of
//! `templates/cluster-template-demo.yaml`, until its control plane is Available; then the
//! endpoint, `kubectl get nodes,ns` against the tenant, and a real `kubeadm join` discovery.
//! With `KEEP=1` everything stays up until Ctrl-C.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use kamaji_api::KamajiControlPlane;
use kube::Api;

fn step(started: Instant, msg: &str) {
    println!("[{:>5.1}s] {msg}", started.elapsed().as_secs_f64());
}

#[tokio::main]
async fn main() -> Result<()> {
    let started = Instant::now();
    let keep = std::env::var("KEEP").is_ok_and(|v| v == "1");
    step(
        started,
        "starting the local management cluster (etcd, kube-apiserver, controller-manager, scheduler, CAPI), a local node, the datastore and the kamaji-rs manager",
    );
    let env = kamaji_e2e::Env::start().await?;
    step(
        started,
        &format!("management cluster up: {}", env.cluster.server_url()),
    );

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let template = std::fs::read_to_string(root.join("templates/cluster-template-demo.yaml"))?;
    let vars: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| {
            [
                "CLUSTER_NAME",
                "NAMESPACE",
                "KUBERNETES_VERSION",
                "CONTROL_PLANE_MACHINE_COUNT",
                "POD_CIDR",
            ]
            .contains(&k.as_str())
        })
        .collect();
    let manifest = kamaji_e2e::substitute(&template, &vars)?;
    let name = vars
        .get("CLUSTER_NAME")
        .cloned()
        .unwrap_or_else(|| "demo".into());
    let ns = vars
        .get("NAMESPACE")
        .cloned()
        .unwrap_or_else(|| "default".into());
    env.namespace(&ns).await?;
    env.apply_yaml(&manifest).await?;
    step(
        started,
        &format!(
            "applied templates/cluster-template-demo.yaml: Cluster {ns}/{name} + KamajiControlPlane {ns}/{name}-control-plane"
        ),
    );

    env.wait_cluster_condition(
        &ns,
        &name,
        "ControlPlaneInitialized",
        "True",
        Duration::from_mins(5),
    )
    .await?;
    step(started, "CAPI: ControlPlaneInitialized=True");
    env.wait_cluster_condition(
        &ns,
        &name,
        "ControlPlaneAvailable",
        "True",
        Duration::from_mins(5),
    )
    .await?;
    step(started, "CAPI: ControlPlaneAvailable=True");

    let kcp = Api::<KamajiControlPlane>::namespaced(env.client(), &ns)
        .get(&format!("{name}-control-plane"))
        .await?;
    let ep = kcp
        .spec
        .control_plane_endpoint
        .clone()
        .context("no endpoint")?;
    let endpoint = format!(
        "{}:{}",
        ep.host.unwrap_or_default(),
        ep.port.unwrap_or_default()
    );
    println!("\nendpoint: https://{endpoint}");

    let secret = env.secret(&ns, &format!("{name}-kubeconfig")).await?;
    let kubeconfig = env.cluster.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&kubeconfig, kamaji_e2e::secret_text(&secret, "value"))?;
    let out = Command::new(env.cluster.tools().path("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["get", "nodes,ns"])
        .output()?;
    println!(
        "\n$ kubectl --kubeconfig {} get nodes,ns",
        kubeconfig.display()
    );
    print!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    println!(
        "\n$ kubeadm join phase preflight {endpoint} --token <new token> --discovery-token-ca-cert-hash sha256:<{name}-ca>"
    );
    let text = kamaji_e2e::kubeadm_discovery(&env, &ns, &name, &endpoint).await?;
    for line in text.lines().filter(|l| {
        l.contains("discovery")
            || l.contains("pinned roots")
            || l.contains("Reading configuration")
            || l.contains("[preflight]")
    }) {
        println!("  {line}");
    }
    step(started, "kubeadm token discovery against the tenant passed");

    if keep {
        println!(
            "\nKEEP=1: everything keeps running.\n  management cluster: kubectl --kubeconfig {}\n  tenant:             kubectl --kubeconfig {}\nPress Ctrl-C to stop and clean up.",
            env.cluster.kubeconfig_path().display(),
            kubeconfig.display()
        );
        tokio::signal::ctrl_c().await?;
    }
    step(started, "stopping everything");
    drop(env);
    Ok(())
}
