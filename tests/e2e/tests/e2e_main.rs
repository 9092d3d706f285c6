//! The main job, end to end with the real chain: CAPI core manager + kamaji-rs manager +
//! tenant kube-apiserver/controller-manager/scheduler processes + a real kubeadm discovery.

#![cfg(real_programs_as_root)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::{Env, f0};
use kube::api::{Api, LogParams, PostParams};
use kube::runtime::wait::await_condition;

const MINUTE: Duration = Duration::from_mins(1);

#[kamaji_e2e::test]
async fn cluster_becomes_available_through_capi_and_kubeadm_discovery_passes() {
    let env = Env::start().await.unwrap();
    env.namespace("tenant-a").await.unwrap();
    env.apply_yaml(&f0("tenant-a", "demo", 2)).await.unwrap();

    // CAPI itself reports the control plane initialized and available.
    env.wait_cluster_condition(
        "tenant-a",
        "demo",
        "ControlPlaneInitialized",
        "True",
        4 * MINUTE,
    )
    .await
    .unwrap();
    env.wait_cluster_condition(
        "tenant-a",
        "demo",
        "ControlPlaneAvailable",
        "True",
        2 * MINUTE,
    )
    .await
    .unwrap();

    // Cluster.spec.controlPlaneEndpoint equals the KamajiControlPlane's (Cluster API's copy).
    let cluster = env
        .wait_cluster_endpoint("tenant-a", "demo", MINUTE)
        .await
        .unwrap();
    let kcp = Api::<KamajiControlPlane>::namespaced(env.client(), "tenant-a")
        .get("demo")
        .await
        .unwrap();
    let ep = kcp.spec.control_plane_endpoint.clone().unwrap();
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["host"],
        ep.host.clone().unwrap()
    );
    assert_eq!(
        cluster.data["spec"]["controlPlaneEndpoint"]["port"],
        ep.port.unwrap()
    );
    let status = kcp.status.clone().unwrap();
    assert_eq!(status.external_managed_control_plane, Some(true));
    assert_eq!(
        status
            .initialization
            .and_then(|i| i.control_plane_initialized),
        Some(true)
    );
    assert!(status.selector.is_some());
    assert_eq!(
        status.versions.unwrap()[0].version,
        kamaji_testenv::KUBERNETES_VERSION
    );

    // Provisioning rolled nothing: the Deployment was created once with its final template.
    let d = env.deployment("tenant-a", "demo").await.unwrap();
    assert_eq!(
        d.metadata.generation,
        Some(1),
        "the control plane was rolled during provisioning"
    );

    // The tenant API answers /readyz through the endpoint with <cluster>-kubeconfig.
    let tenant = env.tenant_client("tenant-a", "demo").await.unwrap();
    let readyz = tenant
        .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(readyz.trim(), "ok");

    // A pod of the management cluster reaches the tenant through the load-balancer address too
    // (kube-proxy's VIP rule, back to a pod on the same machine: hairpin), verified against
    // <cluster>-ca, as the manager will once it runs as a pod.
    let pods: Api<Pod> = Api::namespaced(env.client(), "tenant-a");
    let url = format!(
        "https://{}:{}/readyz",
        ep.host.clone().unwrap(),
        ep.port.unwrap()
    );
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "netcheck"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "netcheck", "image": kamaji_machine::images::NETCHECK_IMAGE,
                "imagePullPolicy": "Never",
                "args": ["-get", url, "-cacert", "/ca/tls.crt"],
                "volumeMounts": [{"name": "ca", "mountPath": "/ca", "readOnly": true}],
            }],
            "volumes": [{"name": "ca", "secret": {
                "secretName": "demo-ca", "items": [{"key": "tls.crt", "path": "tls.crt"}]}}],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let done = tokio::time::timeout(
        MINUTE,
        await_condition(pods.clone(), "netcheck", |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref())
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        }),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    let log = pods.logs("netcheck", &LogParams::default()).await.unwrap();
    assert_eq!(
        done.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded"),
        "{log}"
    );
    assert!(log.contains(&format!("200 {url} ok")), "{log}");

    // A bootstrap token in the tenant, signed by the tenant's bootstrapsigner, and a real kubeadm
    // token discovery against the endpoint pinned to <cluster>-ca.
    let endpoint = format!("{}:{}", ep.host.unwrap(), ep.port.unwrap());
    let out = kamaji_e2e::kubeadm_discovery(&env, "tenant-a", "demo", &endpoint)
        .await
        .unwrap();
    assert!(out.contains("Reading configuration from the"), "{out}");
}

/// `config/default` (what `clusterctl-settings.json` points Cluster API's local-repository
/// tooling at) renders, with the kustomize inside the built kubectl, exactly the objects
/// `make release` concatenates into `control-plane-components.yaml` (issue 13): the same CRDs,
/// RBAC and manager, nothing missing or extra, variables untouched.
#[test]
fn config_default_renders_the_objects_make_release_ships() {
    let root = kamaji_testenv::workspace_root();
    let tools = kamaji_testenv::Tools::locate().unwrap();
    let out = std::process::Command::new(tools.path("kubectl"))
        .args(["kustomize", "config/default"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Numbers as values (the generated CRDs write `minimum: 1.0`, kustomize writes `1`).
    fn integral(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Number(n) => {
                if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15) {
                    #[allow(clippy::cast_possible_truncation)]
                    let whole = f as i64;
                    *v = whole.into();
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(integral),
            serde_json::Value::Object(o) => o.values_mut().for_each(integral),
            _ => {}
        }
    }
    let parse = |text: &str| {
        let mut objects: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .filter(|v: &serde_json::Value| !v.is_null())
            .map(|mut v| {
                integral(&mut v);
                v
            })
            .collect();
        objects.sort_by_key(|v| format!("{}/{}", v["kind"], v["metadata"]["name"]));
        objects
    };
    let mut shipped = String::new();
    for dir in ["config/crd/bases", "config/rbac", "config/manager"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "yaml")
                    && p.file_name().is_some_and(|n| n != "kustomization.yaml")
            })
            .collect();
        files.sort();
        for f in files {
            shipped.push_str("---\n");
            shipped.push_str(&std::fs::read_to_string(f).unwrap());
        }
    }
    let (rendered, shipped) = (
        parse(&String::from_utf8_lossy(&out.stdout)),
        parse(&shipped),
    );
    assert_eq!(rendered.len(), shipped.len());
    for (r, s) in rendered.iter().zip(&shipped) {
        assert_eq!(
            serde_json::to_string_pretty(r).unwrap(),
            serde_json::to_string_pretty(s).unwrap()
        );
    }
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("clusterctl-settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(settings["name"], kamaji_api::meta::PROVIDER_NAME);
}

/// The smoke run of the simulated scale benchmark (`make bench-sim`, issue 16), so it cannot
/// rot: 10 tenants whose pods kwok plays are all provisioned (conditions, Deployment and the
/// four Secrets, checked by the bench itself) and become `Available` through the tenant-API
/// stand-in (`/readyz` on each endpoint, with each tenant's serving certificate, and the
/// kubeadm artifacts applied); the manager, idle for 20 s, writes nothing; and after a SIGKILL
/// and a restart it reconciles every tenant again without a single write (leader-election
/// Leases aside), neither to the management cluster nor to a tenant (each tenant's cluster-info
/// names the artifact set it holds), in one session on the DataStore.
#[kamaji_e2e::test]
async fn the_simulated_scale_bench_provisions_every_tenant_and_a_resync_writes_nothing() {
    let figures = kamaji_e2e::sim::bench(kamaji_e2e::sim::BenchOptions {
        tenants: 10,
        replicas: 1,
        nodes: 2,
        idle: Duration::from_secs(20),
        restarts: 1,
    })
    .await
    .unwrap();
    println!("{figures}");
    // A new control plane's first pass goes on past its Service once the Service has its
    // address (a second round), instead of leaving the rest to another pass and status write.
    assert!(
        figures.provisioning_second_rounds >= 5.0,
        "passes with a second round: {}\n{figures}",
        figures.provisioning_second_rounds
    );
    // The Deployment controller's first status write on a new control plane (its revision,
    // `observedGeneration`, no replica yet) wakes no pass: nothing in it is new to a pass.
    assert!(
        figures.available_unchanged_deployment_events >= 1.0,
        "Deployment events dismissed: {}\n{figures}",
        figures.available_unchanged_deployment_events
    );
    // The Cluster's endpoint is Cluster API's copy of the control plane's: never written here.
    let cluster_writes: Vec<_> = kamaji_e2e::sim::writes(&figures.available_requests, true)
        .into_iter()
        .filter(|(request, _)| request.ends_with(" clusters"))
        .collect();
    assert!(
        cluster_writes.is_empty(),
        "the manager wrote to Clusters: {cluster_writes:?}\n{figures}"
    );
    // Each tenant's namespace holds only its Secrets: one list of it says which are absent,
    // and none is read by name first (8 `GET`s per tenant before).
    let secret_gets = figures
        .provisioning_requests
        .get("get secrets refused 404")
        .copied()
        .unwrap_or_default();
    assert_eq!(secret_gets, 0, "{figures}");
    let idle_writes = kamaji_e2e::sim::writes(&figures.idle_requests, true);
    assert!(
        idle_writes.is_empty(),
        "the idle manager wrote: {idle_writes:?}\n{figures}"
    );
    let restart = &figures.restarts[0];
    let restart_writes = kamaji_e2e::sim::writes(&restart.requests, false);
    assert!(
        restart_writes.is_empty(),
        "the restarted manager wrote while re-verifying: {restart_writes:?}\n{figures}"
    );
    let [connections, readyz, applies, gets, _] = figures.tenant_api_until_available.provider;
    assert!(
        connections >= 10 && readyz >= 10 && applies >= 10,
        "the tenants' APIs were not used: {figures}"
    );
    // A tenant never applied to is not searched for objects of the addons it leaves out (about
    // 20 GETs each): cluster-info and the first object of the apply are read.
    assert!(
        gets <= 4 * 10,
        "{gets} GETs of tenant objects for 10 tenants coming up: {figures}"
    );
    assert_eq!(
        restart.tenant_api.provider[2], 0,
        "the restarted manager applied tenant artifacts again: {figures}"
    );
    // Re-verifying ten tenants' claims and grants on the one DataStore takes one session
    // (opening one is a bcrypt check in etcd once authentication is on).
    assert!(
        (restart.sessions - 1.0).abs() < f64::EPSILON,
        "the restarted manager opened {} DataStore sessions: {figures}",
        restart.sessions
    );
}

/// Issue 16, Deliver 4, the smoke run of `SHARDS=2 make bench-sim`: two `--watch-filter` values
/// with two manager replicas each (a Lease per value) split 8 simulated tenants; the audit log
/// (each replica names itself in its `User-Agent`) shows every tenant's objects requested by
/// exactly one replica, the leader of its shard, and the standbys requesting nothing but their
/// Leases; when shard 0's leader is killed, its standby takes the Lease and reconciles every
/// shard-0 tenant without a write and without touching shard 1's.
#[kamaji_e2e::test]
async fn two_sharded_managers_split_the_tenants_and_a_standby_takes_over_a_dead_leaders_shard() {
    let figures = kamaji_e2e::sim::shard_bench(kamaji_e2e::sim::ShardOptions {
        tenants: 8,
        replicas: 1,
        nodes: 2,
        shards: 2,
    })
    .await
    .unwrap();
    println!("{figures}");
    assert!(
        figures.shared.is_empty(),
        "tenants requested by more than one replica or by another shard's: {:?}\n{figures}",
        figures.shared
    );
    assert_eq!(figures.standby_requests, 0, "{figures}");
    assert_eq!(figures.reverified_tenants, 4, "{figures}");
    assert!(figures.takeover_writes.is_empty(), "{figures}");
    assert!(figures.takeover_foreign.is_empty(), "{figures}");
}
