//! `make demo`: a local management cluster with the real CAPI core manager and CABPK, its
//! pods on a real management machine (kubelet, containerd, kube-proxy), a shared etcd
//! DataStore named `default` and the kamaji-rs manager; then the demo cluster of
//! `templates/cluster-template-demo.yaml`, until its control plane is Available; the endpoint
//! and a real `kubeadm join` discovery; then a MachineDeployment of one worker, bootstrapped
//! by CABPK on a real machine (the stand-in infrastructure provider), until its Node is Ready
//! with kube-proxy and CoreDNS running on it, shown by `kubectl get nodes,pods` through
//! `<cluster>-kubeconfig`. Everything runs in a private network namespace; with `KEEP=1` it
//! stays up until Ctrl-C.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use kamaji_api::KamajiControlPlane;
use kube::Api;

fn step(started: Instant, msg: &str) {
    println!("[{:>5.1}s] {msg}", started.elapsed().as_secs_f64());
}

fn main() -> Result<()> {
    kamaji_machine::run_in_private_network(demo)
}

/// Runs `kubectl` with `kubeconfig`, printing the command and its output.
fn kubectl(
    tools: &kamaji_testenv::Tools,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> Result<()> {
    let out = Command::new(tools.path("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()?;
    println!(
        "\n$ kubectl --kubeconfig {} {}",
        kubeconfig.display(),
        args.join(" ")
    );
    print!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn demo() -> Result<()> {
    let started = Instant::now();
    let keep = std::env::var("KEEP").is_ok_and(|v| v == "1");
    step(
        started,
        "starting the local management cluster (etcd, kube-apiserver, controller-manager, scheduler, CAPI core, CABPK), a management machine (kubelet, containerd, kube-proxy), the datastore and the kamaji-rs manager",
    );
    // Without the images only tests run (kine, konnectivity, netcheck): `make demo` builds
    // only the programs the demo runs (tests/tools/build.sh --demo).
    let env = kamaji_e2e::Env::builder()
        .workers(true)
        .test_images(false)
        .start()
        .await?;
    step(
        started,
        &format!("management cluster up: {}", env.cluster.server_url()),
    );

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let template = std::fs::read_to_string(root.join("templates/cluster-template-demo.yaml"))?;
    let mut vars: HashMap<String, String> = std::env::vars()
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
    // Two control-plane pods, where the template's default is clusterctl's 1.
    vars.entry("CONTROL_PLANE_MACHINE_COUNT".into())
        .or_insert_with(|| "2".into());
    let manifest = kamaji_e2e::machines::with_machine_kind_settings(&kamaji_e2e::substitute(
        &template, &vars,
    )?)?;
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
            "applied templates/cluster-template-demo.yaml: Cluster {ns}/{name} + KamajiControlPlane {ns}/{name}-control-plane (with this machine kind's kubelet and kube-proxy settings: cgroup v1, nftables)"
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
    let tools = env.cluster.tools().clone();
    kubectl(
        &tools,
        env.cluster.kubeconfig_path(),
        &["get", "nodes,pods", "-A", "-o", "wide"],
    )?;

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

    env.apply_yaml(&kamaji_e2e::machines::machine_deployment(
        &ns, &name, "md-0", 1,
    ))
    .await?;
    step(
        started,
        "applied a MachineDeployment of 1 worker (CABPK bootstrap data, a stand-in infrastructure provider booting a real machine)",
    );
    let worker = wait_worker(&env, &ns).await?;
    step(
        started,
        &format!("worker {worker}: Machine Running, Node Ready"),
    );
    let tenant = env.tenant_client(&ns, &name).await?;
    wait_addons(&tenant, &worker).await?;
    step(started, "kube-proxy and CoreDNS Running on the worker");
    kubectl(&tools, &kubeconfig, &["get", "nodes", "-o", "wide"])?;
    kubectl(&tools, &kubeconfig, &["get", "pods", "-A", "-o", "wide"])?;

    if keep {
        // The network namespace is this thread's; a shell enters it with nsenter.
        let enter = format!(
            "nsenter --net=/proc/{}/task/{}/ns/net",
            std::process::id(),
            nix_gettid()
        );
        println!(
            "\nKEEP=1: everything keeps running, in a private network namespace.\n  management cluster: {enter} {} --kubeconfig {}\n  tenant:             {enter} {} --kubeconfig {}\nPress Ctrl-C to stop and clean up.",
            tools.path("kubectl").display(),
            env.cluster.kubeconfig_path().display(),
            tools.path("kubectl").display(),
            kubeconfig.display()
        );
        tokio::signal::ctrl_c().await?;
    }
    step(started, "stopping everything");
    drop(env);
    Ok(())
}

/// The calling thread's id (the private network namespace belongs to this thread).
fn nix_gettid() -> i32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or_default()
}

/// Waits until a CAPI Machine is Running with a nodeRef and its Node is Ready; its name.
async fn wait_worker(env: &kamaji_e2e::Env, ns: &str) -> Result<String> {
    let machines = env.capi(ns, "v1beta2", "Machine");
    let deadline = Instant::now() + Duration::from_mins(5);
    loop {
        for m in machines
            .list(&kube::api::ListParams::default())
            .await?
            .items
        {
            if m.data["status"]["phase"] == "Running"
                && let Some(node) = m.data["status"]["nodeRef"]["name"].as_str()
            {
                return Ok(node.to_owned());
            }
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "no worker Machine Running in 5 minutes; provider failures: {:?}",
                env.machines.as_ref().context("workers")?.failures().await
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until kube-proxy and CoreDNS pods are Running and Ready on `node`.
async fn wait_addons(tenant: &kube::Client, node: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "kube-system");
    let deadline = Instant::now() + Duration::from_mins(3);
    loop {
        let list = pods.list(&kube::api::ListParams::default()).await?.items;
        let ready = |prefix: &str| {
            list.iter().any(|p| {
                p.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(prefix))
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        };
        if ready("kube-proxy") && ready("coredns") {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("kube-proxy and CoreDNS not Ready on {node} in 3 minutes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
