//! kamaji-rs installed and used the Cluster API way (issue 13): a bare management cluster of
//! real machines, `clusterctl init --core cluster-api --bootstrap kubeadm --control-plane
//! kamaji` from a local repository (Cluster API's components rendered from its module,
//! kamaji-rs's from `make components`; every provider a pod of its image under its shipped
//! RBAC; cert-manager played by the test environment's stand-in), then `clusterctl generate
//! cluster` from `templates/`, applied, until `clusterctl describe cluster` shows the control
//! plane Available and a worker Ready.

#![cfg(real_programs_as_root)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kamaji_e2e::machines::with_machine_kind_settings;
use kamaji_e2e::{Env, serial};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};

const MINUTE: Duration = Duration::from_mins(1);

/// The Deployments `clusterctl init` installed, by namespace: each available, each running as
/// its own ServiceAccount.
const PROVIDERS: [(&str, &str, &str); 3] = [
    ("capi-system", "capi-controller-manager", "capi-manager"),
    (
        "capi-kubeadm-bootstrap-system",
        "capi-kubeadm-bootstrap-controller-manager",
        "capi-kubeadm-bootstrap-manager",
    ),
    ("kamaji-rs-system", "kamaji-rs-manager", "kamaji-rs-manager"),
];

#[kamaji_e2e::test]
async fn clusterctl_installs_the_providers_as_pods_then_generated_plain_and_clusterclass_clusters_work_through_upgrade_and_delete()
 {
    let _serial = serial();
    let env = Env::builder()
        .installed_by_clusterctl(true)
        .default_datastore(false)
        .workers(true)
        .version(kamaji_testenv::PREVIOUS_MINOR_KUBERNETES_VERSION)
        .start()
        .await
        .unwrap();
    let client = env.client();

    // What clusterctl installed: its inventory, and each provider a pod of its image under
    // its own ServiceAccount (the manager's: leader election, probes, metrics port as shipped).
    let inventory: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "clusterctl.cluster.x-k8s.io",
            "v1alpha3",
            "Provider",
        )),
    );
    let mut installed: Vec<String> = inventory
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            format!(
                "{}:{}",
                p.metadata.name.as_deref().unwrap_or_default(),
                p.data["version"].as_str().unwrap_or_default()
            )
        })
        .collect();
    installed.sort();
    assert_eq!(
        installed,
        [
            format!("bootstrap-kubeadm:{}", kamaji_testenv::CAPI_VERSION),
            format!("cluster-api:{}", kamaji_testenv::CAPI_VERSION),
            format!(
                "control-plane-kamaji:{}",
                kamaji_e2e::clusterctl::provider_version()
            ),
        ]
    );
    for (ns, deployment, account) in PROVIDERS {
        let d = Api::<Deployment>::namespaced(client.clone(), ns)
            .get(deployment)
            .await
            .unwrap();
        assert!(
            d.status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                >= 1,
            "{ns}/{deployment} is not available: {:?}",
            d.status
        );
        let pods = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap();
        assert!(
            pods.items.iter().any(|p| {
                let spec = p.spec.as_ref().unwrap();
                spec.service_account_name.as_deref() == Some(account) && spec.node_name.is_some()
            }),
            "no pod of {ns}/{deployment} runs as {account} on a machine"
        );
    }
    let manager_pods = Api::<Pod>::namespaced(client.clone(), "kamaji-rs-system")
        .list(&ListParams::default().labels("app.kubernetes.io/component=manager"))
        .await
        .unwrap();
    let holder = Api::<Lease>::namespaced(client.clone(), "kamaji-rs-system")
        .get("kamaji-rs-manager")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        manager_pods
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(holder.as_str())),
        "the Lease is held by {holder:?}, not by a manager pod"
    );
    let security = manager_pods.items[0].spec.as_ref().unwrap().containers[0]
        .security_context
        .clone()
        .unwrap_or_default();
    assert_eq!(security.read_only_root_filesystem, Some(true));

    // The install guide from `clusterctl init` on, its own commands and files (issue 48),
    // until the control plane of the generated cluster is Available.
    let (ns, name) = ("tenants", "demo");
    follow_the_install_guide(&env, ns, name).await;
    // clusterctl describe shows the control plane, Available.
    describe_shows_true(
        &env,
        ns,
        name,
        &[(
            &format!("KamajiControlPlane {ns}/{name}-control-plane"),
            "Available",
        )],
    );

    // A ClusterClass topology from templates/, with a worker, upgraded through
    // spec.topology.version.
    let class_ns = "classes";
    topology_upgrades_the_control_plane_before_the_workers(&env, class_ns, "topo").await;

    // clusterctl upgrade apply to a newer version: the manager is replaced, and no tenant
    // control plane rolls (its Deployments' templates and its Secrets stay as they were).
    let before = tenant_objects(&env, &[ns, class_ns]).await;
    let next = kamaji_e2e::clusterctl::next_provider_version();
    kamaji_e2e::clusterctl::write_provider_version(
        &kamaji_e2e::clusterctl::repository(&env.cluster),
        &next,
    )
    .unwrap();
    let image = kamaji_e2e::clusterctl::manager_image_for(&next);
    kamaji_e2e::clusterctl::import_manager_image(&env.management, &image)
        .await
        .unwrap();
    env.clusterctl(&[
        "upgrade",
        "apply",
        "--control-plane",
        &format!("kamaji-rs-system/kamaji:{next}"),
    ])
    .unwrap();
    let ip = wait_manager_serving(&env, &image).await;
    wait_reconciled(&ip).await;
    assert_eq!(
        before,
        tenant_objects(&env, &[ns, class_ns]).await,
        "the upgrade changed the tenants' objects"
    );
    let upgraded = inventory
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("control-plane-kamaji"))
        .expect("control-plane-kamaji in clusterctl's inventory");
    assert_eq!(upgraded.data["version"], next.as_str());

    // clusterctl delete --control-plane kamaji: the provider goes, the tenants stay (CRDs and
    // objects are kept unless --include-crd, as clusterctl documents it) and keep serving.
    env.clusterctl(&["delete", "--control-plane", "kamaji"])
        .unwrap();
    assert!(
        Api::<Deployment>::namespaced(client.clone(), "kamaji-rs-system")
            .get_opt("kamaji-rs-manager")
            .await
            .unwrap()
            .is_none(),
        "clusterctl delete left the manager"
    );
    assert!(
        env.capi(ns, "v1beta2", "Cluster")
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
    );
    let tenant = env.tenant_client(ns, name).await.unwrap();
    assert_eq!(
        tenant
            .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
            .await
            .unwrap(),
        "ok"
    );
    assert_eq!(before, tenant_objects(&env, &[ns, class_ns]).await);
    // Every write of the manager was its ServiceAccount's (the audit log's user) under the
    // shipped RBAC, and none was refused.
    let writes = env.manager_writes().unwrap();
    assert!(!writes.is_empty());
    assert!(
        writes
            .iter()
            .all(|w| w.response_status.as_ref().is_none_or(|s| s.code != 403)),
        "a write of the manager was forbidden"
    );
}

/// Issue 48: `docs/install.md` followed as written after `clusterctl init` (which the
/// environment ran from the guide's step `init`, [`kamaji_e2e::clusterctl::init`]): the
/// namespace, `clusterctl generate cluster` from the demo template, `kubectl apply`, the
/// etcd DataStore of `examples/datastore-etcd.yaml` with its placeholders filled in (the
/// environment's etcd), and `kubectl wait` until the control plane is Available. The
/// DataStore step runs after the cluster is applied, as by a user who skipped it: the control
/// plane first says which DataStore to create and where the guide shows how, and applying the
/// step is all it takes.
async fn follow_the_install_guide(env: &Env, ns: &str, name: &str) {
    use kamaji_e2e::install_guide::{applied_file, command, datastore_documents};
    let kubectl = |step: &str| {
        let (words, _) = command(step).unwrap();
        assert_eq!(words[0], "kubectl", "step {step}");
        let out = std::process::Command::new(env.cluster.tools().path("kubectl"))
            .args(&words[1..])
            .arg(format!(
                "--kubeconfig={}",
                env.cluster.kubeconfig_path().display()
            ))
            .current_dir(kamaji_testenv::workspace_root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "step {step}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl("namespace");
    // The demo template's variables, as clusterctl lists them; then the guide's command.
    lists_variables(
        env,
        &template_path("cluster-template-demo.yaml"),
        name,
        &[
            "CLUSTER_NAME",
            "CONTROL_PLANE_MACHINE_COUNT",
            "KUBERNETES_VERSION",
            "NAMESPACE",
            "POD_CIDR",
        ],
    );
    let (words, output) = command("generate").unwrap();
    assert_eq!(&words[..3], ["clusterctl", "generate", "cluster"]);
    let args: Vec<String> = words[1..]
        .iter()
        .map(|w| {
            w.strip_prefix("templates/")
                .map_or_else(|| w.clone(), template_path)
        })
        .collect();
    let manifest = env
        .clusterctl(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap();
    let output = output.expect("step generate writes a file");
    assert_eq!(
        applied_file("apply").unwrap(),
        output,
        "step apply applies what generate wrote"
    );
    env.apply_yaml(&manifest)
        .await
        .unwrap_or_else(|e| panic!("step apply: {e}"));
    let kcp = format!("{name}-control-plane");
    let waiting = env
        .wait_kcp_condition(ns, &kcp, "DataStoreReady", "False", 2 * MINUTE)
        .await
        .unwrap();
    let message = kamaji_e2e::condition_message(&waiting, "DataStoreReady");
    for text in [
        "DataStore default does not exist",
        "docs/install.md",
        "examples/datastore-etcd.yaml",
    ] {
        assert!(
            message.contains(text),
            "DataStoreReady does not say {text:?}: {message}"
        );
    }
    let docs = datastore_documents(
        &env.datastore_for_pods.to_string(),
        (&env.datastore_ca.cert_pem, &env.datastore_ca.key_pem),
        (
            &env.datastore_client.cert_pem,
            &env.datastore_client.key_pem,
        ),
    )
    .unwrap();
    for doc in &docs {
        env.apply_value(doc).await.unwrap();
    }
    tokio::task::block_in_place(|| kubectl("wait"));
    env.wait_cluster_condition(ns, name, "ControlPlaneAvailable", "True", 5 * MINUTE)
        .await
        .unwrap();
}

/// `templates/<file>` of the repository.
fn template_path(file: &str) -> String {
    kamaji_testenv::workspace_root()
        .join("templates")
        .join(file)
        .display()
        .to_string()
}

/// The tenant namespaces' control-plane Deployments (generation and pod template) and Secrets
/// (resource version and data), by namespace and name.
async fn tenant_objects(env: &Env, namespaces: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for ns in namespaces {
        tenant_objects_of(env, ns, &mut out).await;
    }
    out
}

async fn tenant_objects_of(env: &Env, ns: &str, out: &mut BTreeMap<String, String>) {
    for d in Api::<Deployment>::namespaced(env.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.insert(
            format!(
                "{ns}/Deployment/{}",
                d.metadata.name.clone().unwrap_or_default()
            ),
            format!(
                "{:?} {}",
                d.metadata.generation,
                serde_json::to_string(&d.spec.map(|s| s.template)).unwrap()
            ),
        );
    }
    for secret in Api::<Secret>::namespaced(env.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.insert(
            format!(
                "Secret/{}",
                secret.metadata.name.clone().unwrap_or_default()
            ),
            format!(
                "{:?} {}",
                secret.metadata.resource_version,
                serde_json::to_string(&secret.data).unwrap()
            ),
        );
    }
}

/// Waits until the manager Deployment runs `image` on all its replicas and one of its pods is
/// Ready and holds the Lease; that pod's IP.
async fn wait_manager_serving(env: &Env, image: &str) -> String {
    let deployments = Api::<Deployment>::namespaced(env.client(), "kamaji-rs-system");
    let pods = Api::<Pod>::namespaced(env.client(), "kamaji-rs-system");
    let leases = Api::<Lease>::namespaced(env.client(), "kamaji-rs-system");
    let deadline = tokio::time::Instant::now() + 3 * MINUTE;
    loop {
        let d = deployments.get("kamaji-rs-manager").await.unwrap();
        let runs = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|s| s.containers[0].image.as_deref() == Some(image));
        let holder = leases
            .get_opt("kamaji-rs-manager")
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default();
        if runs
            && !holder.is_empty()
            && let Some(pod) = pods.get_opt(&holder).await.unwrap()
        {
            let spec_image = pod.spec.as_ref().map(|s| s.containers[0].image.clone());
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if spec_image == Some(Some(image.to_owned())) && ready {
                return pod.status.and_then(|s| s.pod_ip).unwrap();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the manager did not come up with {image} holding the Lease ({holder}):\n{}",
            env.pods_report("kamaji-rs-system").await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until the manager at pod IP `ip` has finished a reconcile pass (its
/// `kamaji_reconcile_total` counter on the shipped metrics port).
async fn wait_reconciled(ip: &str) {
    let url = format!("http://{ip}:8080/metrics");
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    while kamaji_e2e::manager::metric_at(&url, "kamaji_reconcile_total").await < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new manager at {url} made no reconcile pass"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The topology flavour's infrastructure, as a provider's templates would be created beside it.
const STANDIN_INFRASTRUCTURE: &str = "
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: StandInClusterTemplate
metadata: {name: standin}
spec: {template: {spec: {}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: StandInMachineTemplate
metadata: {name: standin}
spec: {template: {spec: {}}}
";

/// Whether every Deployment of `api` runs images of `version` on all its replicas, rolled out
/// and available.
async fn rolled_to(api: &Api<Deployment>, version: &str) -> bool {
    let list = api.list(&ListParams::default()).await.unwrap().items;
    !list.is_empty()
        && list.iter().all(|d| {
            let images_of_version = d
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|p| {
                    p.containers.iter().any(|c| {
                        c.image
                            .as_deref()
                            .is_some_and(|i| i.ends_with(&format!(":{version}")))
                    })
                });
            let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let status = d.status.clone().unwrap_or_default();
            images_of_version
                && status.observed_generation == d.metadata.generation
                && status.updated_replicas == Some(replicas)
                && status.available_replicas == Some(replicas)
                && status.replicas == Some(replicas)
        })
}

/// When each step of a topology version upgrade was first seen (seconds since the patch).
#[derive(Debug, Default)]
struct UpgradeOrder {
    control_plane_spec: Option<f64>,
    /// Every control-plane pod of the tenant's Deployment runs the new version's images.
    control_plane_rolled: Option<f64>,
    control_plane_status: Option<f64>,
    workers_spec: Option<f64>,
}

/// A cluster of `templates/cluster-template-topology.yaml` at the previous release with one
/// worker, on the stand-in infrastructure, until Available; then `spec.topology.version` to the
/// tools' release: Cluster API must change the workers' version only after the
/// KamajiControlPlane's `status.version` reports it; the rolled worker joins, and `clusterctl
/// describe` shows the control plane Available and the worker Ready.
async fn topology_upgrades_the_control_plane_before_the_workers(env: &Env, ns: &str, name: &str) {
    let (from, to) = (
        kamaji_testenv::PREVIOUS_MINOR_KUBERNETES_VERSION,
        kamaji_testenv::KUBERNETES_VERSION,
    );
    env.namespace(ns).await.unwrap();
    let mut standins = String::new();
    for doc in STANDIN_INFRASTRUCTURE.split("---") {
        let mut v: serde_json::Value = serde_yaml::from_str(doc).unwrap();
        v["metadata"]["namespace"] = ns.into();
        standins.push_str(&serde_yaml::to_string(&v).unwrap());
        standins.push_str("---\n");
    }
    env.apply_yaml(&standins).await.unwrap();

    let generated = generate(
        env,
        "cluster-template-topology.yaml",
        (ns, name),
        from,
        1,
        &[
            "INFRASTRUCTURE_API_VERSION",
            "INFRASTRUCTURE_CLUSTER_TEMPLATE_KIND",
            "INFRASTRUCTURE_MACHINE_TEMPLATE_NAME",
            "WORKER_MACHINE_COUNT",
        ],
        &[
            (
                "INFRASTRUCTURE_API_VERSION",
                "infrastructure.cluster.x-k8s.io/v1alpha1",
            ),
            (
                "INFRASTRUCTURE_CLUSTER_TEMPLATE_KIND",
                "StandInClusterTemplate",
            ),
            ("INFRASTRUCTURE_CLUSTER_TEMPLATE_NAME", "standin"),
            (
                "INFRASTRUCTURE_MACHINE_TEMPLATE_KIND",
                "StandInMachineTemplate",
            ),
            ("INFRASTRUCTURE_MACHINE_TEMPLATE_NAME", "standin"),
        ],
    );
    env.apply_yaml(&with_machine_kind_settings(&generated).unwrap())
        .await
        .unwrap();
    env.wait_cluster_condition(ns, name, "Available", "True", 6 * MINUTE)
        .await
        .unwrap();
    let workers = env.wait_machines_running(ns, 1, 2 * MINUTE).await.unwrap();
    println!("{from}: Cluster Available, worker {workers:?}");

    // spec.topology.version: the control plane first, the workers once its status says so.
    let kcps = Api::<DynamicObject>::namespaced_with(
        env.client(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "controlplane.cluster.x-k8s.io",
            "v1alpha2",
            "KamajiControlPlane",
        )),
    );
    let deployments = env.capi(ns, "v1beta2", "MachineDeployment");
    // Cluster API's webhook refuses a version change while a MachineDeployment is still
    // completing its roll-out; a user waits for it as this does.
    env.wait_cluster_condition(ns, name, "WorkersAvailable", "True", 2 * MINUTE)
        .await
        .unwrap();
    let patch = serde_json::json!({"spec": {"topology": {"version": to}}});
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    while let Err(e) = env
        .capi(ns, "v1beta2", "Cluster")
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        assert!(
            e.to_string().contains("completing a previous upgrade")
                && tokio::time::Instant::now() < deadline,
            "{e}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let started = tokio::time::Instant::now();
    let mut order = UpgradeOrder::default();
    loop {
        let at = started.elapsed().as_secs_f64();
        let kcp = &kcps.list(&ListParams::default()).await.unwrap().items[0];
        let md = &deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items[0];
        if order.control_plane_spec.is_none() && kcp.data["spec"]["version"] == to {
            order.control_plane_spec = Some(at);
        }
        if order.control_plane_rolled.is_none()
            && rolled_to(&Api::<Deployment>::namespaced(env.client(), ns), to).await
        {
            order.control_plane_rolled = Some(at);
        }
        if order.control_plane_status.is_none() && kcp.data["status"]["version"] == to {
            order.control_plane_status = Some(at);
        }
        if order.workers_spec.is_none() && md.data["spec"]["template"]["spec"]["version"] == to {
            order.workers_spec = Some(at);
        }
        if order.workers_spec.is_some() {
            break;
        }
        assert!(
            at < 360.0,
            "the upgrade did not reach the workers: {order:?}\n{}",
            env.pods_report(ns).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("upgrade order (s after the patch): {order:?}");
    let (Some(cp), Some(rolled), Some(status), Some(workers_at)) = (
        order.control_plane_spec,
        order.control_plane_rolled,
        order.control_plane_status,
        order.workers_spec,
    ) else {
        panic!(
            "Cluster API changed the workers' version before the control plane ran {to} \
             (a step not seen by then): {order:?}"
        );
    };
    assert!(
        cp <= rolled && rolled <= status,
        "status.version reported {to} before the control plane ran it: {order:?}"
    );
    assert!(
        status <= workers_at,
        "Cluster API touched the workers before the control plane ran {to}: {order:?}"
    );
    // The rolled worker joins the upgraded control plane.
    let machines = env.capi(ns, "v1beta2", "Machine");
    let deadline = tokio::time::Instant::now() + 5 * MINUTE;
    loop {
        let list = machines.list(&ListParams::default()).await.unwrap().items;
        if list.len() == 1
            && list[0].data["spec"]["version"] == to
            && list[0].data["status"]["phase"] == "Running"
            && list[0].data["status"]["nodeRef"]["name"].is_string()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no worker Machine of {to} Running alone: {:?}",
            list.iter()
                .map(|m| (
                    &m.metadata.name,
                    &m.data["spec"]["version"],
                    &m.data["status"]["phase"]
                ))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    env.wait_cluster_condition(ns, name, "Available", "True", 2 * MINUTE)
        .await
        .unwrap();
    describe_shows_true(
        env,
        ns,
        name,
        &[
            ("KamajiControlPlane ", "Available"),
            (&format!("Machine {ns}/{name}-md-0-"), "Ready"),
        ],
    );
    rollout_after_through_the_topology(env, ns, name).await;
}

/// `Cluster.spec.topology.controlPlane.rollout.after` (the contract's `spec.rollout.after`):
/// topology copies it onto the KamajiControlPlane; no control-plane pod is replaced before the
/// time, every one is after it (the manager wakes up for it: no other event comes), and the
/// worker stays as it was.
async fn rollout_after_through_the_topology(env: &Env, ns: &str, name: &str) {
    use kamaji_reconciler::reconcile::plan::deployment::ROLLOUT_AFTER_ANNOTATION;
    let second = |t: k8s_openapi::jiff::Timestamp| {
        k8s_openapi::jiff::Timestamp::from_second(t.as_second()).unwrap()
    };
    let after = second(k8s_openapi::jiff::Timestamp::now()) + Duration::from_secs(30);
    let machines_before = machine_names(env, ns).await;
    env.capi(ns, "v1beta2", "Cluster")
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"topology": {
                "controlPlane": {"rollout": {"after": after.to_string()}}}}})),
        )
        .await
        .unwrap();
    let kcps = Api::<kamaji_api::KamajiControlPlane>::namespaced(env.client(), ns);
    let deployments = Api::<Deployment>::namespaced(env.client(), ns);
    let pods = Api::<Pod>::namespaced(env.client(), ns);
    let rollout_annotation = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref()?.annotations.as_ref())
            .and_then(|a| a.get(ROLLOUT_AFTER_ANNOTATION).cloned())
    };
    // Before the time: topology has copied it, and the pods are as they were.
    let before = pods.list(&ListParams::default()).await.unwrap().items;
    let copied = tokio::time::Instant::now() + 20 * Duration::from_secs(1);
    loop {
        let kcp = &kcps.list(&ListParams::default()).await.unwrap().items[0];
        let spec_after = kcp.spec.rollout.as_ref().and_then(|r| r.after.clone());
        if spec_after.map(|t| t.0) == Some(after) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < copied,
            "topology did not copy rollout.after onto the KamajiControlPlane"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    while k8s_openapi::jiff::Timestamp::now() + Duration::from_secs(2) < after {
        for d in deployments.list(&ListParams::default()).await.unwrap() {
            assert_eq!(
                rollout_annotation(&d),
                None,
                "the control plane rolled before spec.rollout.after"
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // After it: every pod replaced by one created at or after the time.
    let deadline = tokio::time::Instant::now() + 4 * MINUTE;
    loop {
        let list = deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let annotated = list
            .iter()
            .all(|d| rollout_annotation(d) == Some(after.to_string()));
        let live: Vec<Pod> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let replaced = live.iter().all(|p| {
            p.metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|c| c.0 >= after)
        }) && before
            .iter()
            .all(|old| live.iter().all(|p| p.metadata.name != old.metadata.name));
        if annotated
            && replaced
            && rolled_to(&deployments, kamaji_testenv::KUBERNETES_VERSION).await
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the control plane was not replaced after spec.rollout.after {after}:\n{}",
            env.pods_report(ns).await
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    env.wait_cluster_condition(ns, name, "Available", "True", 2 * MINUTE)
        .await
        .unwrap();
    assert_eq!(
        machine_names(env, ns).await,
        machines_before,
        "a control-plane rollout replaced a worker"
    );
}

async fn machine_names(env: &Env, ns: &str) -> Vec<String> {
    let mut names: Vec<String> = env
        .capi(ns, "v1beta2", "Machine")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    names.sort();
    names
}

/// `clusterctl describe cluster ns/name` (every condition, no grouping) shows, for each
/// `(object, condition)`, the first `condition` line under the first object line containing
/// `object` as `True`.
fn describe_shows_true(env: &Env, ns: &str, name: &str, expected: &[(&str, &str)]) {
    let described = env
        .clusterctl(&[
            "describe",
            "cluster",
            name,
            "--namespace",
            ns,
            "--show-conditions",
            "all",
            "--grouping=false",
        ])
        .unwrap();
    println!("{described}");
    for (object, condition) in expected {
        let mut lines = described.lines().skip_while(|l| !l.contains(object));
        assert!(lines.next().is_some(), "no {object} in:\n{described}");
        let line = lines
            .find(|l| l.contains(&format!("─{condition} ")))
            .unwrap_or_else(|| panic!("no {condition} under {object}:\n{described}"));
        assert!(
            line.contains("True"),
            "{object}: {condition} is not True:\n{described}"
        );
    }
}

/// `clusterctl generate cluster` from `templates/<file>`, as a user runs it: first
/// `--list-variables` must list each of `variables`; then the cluster `(ns, name)` at `version`
/// with one control-plane replica and `workers` workers, `vars` exported.
fn generate(
    env: &Env,
    file: &str,
    (ns, name): (&str, &str),
    version: &str,
    workers: u32,
    variables: &[&str],
    vars: &[(&str, &str)],
) -> String {
    let template = kamaji_testenv::workspace_root()
        .join("templates")
        .join(file);
    let template = template.display().to_string();
    lists_variables(env, &template, name, variables);
    let workers = workers.to_string();
    env.clusterctl_with(
        &[
            "generate",
            "cluster",
            name,
            "--from",
            &template,
            "--target-namespace",
            ns,
            "--control-plane-machine-count",
            "1",
            "--worker-machine-count",
            &workers,
            "--kubernetes-version",
            version,
        ],
        vars,
    )
    .unwrap()
}

/// `clusterctl generate cluster <name> --from <template> --list-variables` names every one of
/// `variables`.
fn lists_variables(env: &Env, template: &str, name: &str, variables: &[&str]) {
    let listed = env
        .clusterctl(&[
            "generate",
            "cluster",
            name,
            "--from",
            template,
            "--list-variables",
        ])
        .unwrap();
    for variable in variables {
        assert!(
            listed.contains(variable),
            "{variable} not listed:\n{listed}"
        );
    }
}
