//! The CRDs of kamaji-rs against a real kube-apiserver (kamaji-testenv): the user samples
//! apply unchanged and read back equal in both versions, invalid input is rejected at
//! admission with a message naming the field and nothing is created, and the scale
//! subresource and `kubectl explain` work.
//!
//! The samples test starts a management cluster of its own (Cluster API's CRDs included); the
//! others share one API server (`kamaji_e2e::shared::api_server`), each in namespaces of its own.

#![cfg(real_programs)]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use kamaji_testenv::LocalCluster;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const GROUP: &str = "controlplane.cluster.x-k8s.io";

/// Copies of shared/samples (the user manifests, byte for byte), kept in the repository so the
/// test does not depend on shared/ being next to the clone.
fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/samples")
}

fn kubectl(cluster: &LocalCluster, args: &[&str]) -> Result<String> {
    let out = Command::new(cluster.tools().path("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            cluster.kubeconfig_path().display()
        ))
        .args(args)
        .output()
        .context("run kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl explain`, retried while the API server has not yet published the
/// CRD's OpenAPI v3 document: the CRD is Established before its schema is
/// aggregated into `/openapi/v3`, and explain then answers "couldn't find
/// resource" (seen in CI). Any other error, or the same one after 60 s, fails.
fn kubectl_explain(cluster: &LocalCluster, args: &[&str]) -> Result<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    loop {
        match kubectl(cluster, args) {
            Err(e)
                if e.to_string().contains("couldn't find resource")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

fn kubectl_apply_yaml(cluster: &LocalCluster, namespace: &str, yaml: &str) -> Result<String> {
    let dir = tempfile_dir()?;
    let path = dir.join(format!("manifest-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml)?;
    let out = kubectl(
        cluster,
        &["apply", "-n", namespace, "-f", &path.display().to_string()],
    );
    std::fs::remove_file(&path)?;
    out
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join("kamaji-api-tests");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn api(client: &Client, namespace: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, version, kind));
    Api::namespaced_with(client.clone(), namespace, &ar)
}

fn create_namespace(cluster: &LocalCluster, name: &str) -> Result<()> {
    kubectl(cluster, &["create", "namespace", name]).map(|_| ())
}

/// Every leaf of `input` is present with the same value in `output` (which may hold more:
/// schema defaults). Numbers compare as numbers.
fn contains(output: &Value, input: &Value, path: &str) -> Result<()> {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let Some(ov) = o.get(k) else {
                    bail!("{path}.{k} was dropped (pruned or not in the schema)");
                };
                contains(ov, v, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(i), Value::Array(o)) => {
            ensure!(
                i.len() == o.len(),
                "{path}: {} items written, {} read",
                i.len(),
                o.len()
            );
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                contains(ov, iv, &format!("{path}[{n}]"))?;
            }
            Ok(())
        }
        (Value::Number(i), Value::Number(o)) => {
            ensure!(i.as_f64() == o.as_f64(), "{path}: wrote {i}, read {o}");
            Ok(())
        }
        (i, o) => {
            ensure!(i == o, "{path}: wrote {i}, read {o}");
            Ok(())
        }
    }
}

fn yaml_docs(path: &Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Reads `kcp/name` as v1alpha1 and as v1alpha2, checks both specs are equal, contain what
/// was written, and deserialize into the Rust type.
async fn read_back_both_versions(
    cluster: &LocalCluster,
    namespace: &str,
    name: &str,
    written_spec: &Value,
) -> Result<()> {
    // The samples test's own cluster: its client is this test's.
    let client = &cluster.client();
    let v1 = api(client, namespace, "v1alpha1", "KamajiControlPlane")
        .get(name)
        .await?;
    let v2 = api(client, namespace, "v1alpha2", "KamajiControlPlane")
        .get(name)
        .await?;
    ensure!(
        v1.data["spec"] == v2.data["spec"],
        "{name}: spec differs between versions"
    );
    contains(&v2.data["spec"], written_spec, "spec")
        .with_context(|| format!("{namespace}/{name}"))?;
    let typed: kamaji_api::KamajiControlPlane = serde_json::from_value(serde_json::to_value(&v2)?)
        .with_context(|| format!("{name} as Rust type"))?;
    ensure!(typed.spec.replicas.is_some(), "replicas defaulted");
    // The same object through kubectl, by fully qualified resource and version.
    for version in ["v1alpha1", "v1alpha2"] {
        let out = kubectl(
            cluster,
            &[
                "get",
                "-n",
                namespace,
                &format!("kamajicontrolplanes.{version}.{GROUP}/{name}"),
                "-o",
                "json",
            ],
        )?;
        let obj: Value = serde_json::from_str(&out)?;
        ensure!(
            obj["apiVersion"] == format!("{GROUP}/{version}"),
            "kubectl returned {}",
            obj["apiVersion"]
        );
        ensure!(
            obj["spec"] == v2.data["spec"],
            "kubectl {version} spec differs"
        );
    }
    Ok(())
}

/// Applies the sample at `path` (its first document `doc`) into `ns`. The full sample lists
/// all 37 admission plugins at version 1.27.0, three of which that version no longer has
/// (`DenyEscalatingExec` and `DenyExecOnPrivileged`, removed in v1.21, `PodSecurityPolicy`,
/// v1.25): kube-apiserver 1.27 would exit at start with them, so admission refuses it as
/// written, naming the field, each plugin and the version (issue 48), and it applies once those
/// three are taken out. Returns how many admission plugins the applied object lists (`None`
/// for a sample without them).
fn full_sample_plugins(
    cluster: &LocalCluster,
    ns: &str,
    path: &Path,
    doc: &mut Value,
) -> Result<Option<usize>> {
    let as_written = kubectl(
        cluster,
        &["apply", "-n", ns, "-f", &path.display().to_string()],
    );
    let Some(plugins) = doc["spec"]["admissionControllers"].as_array_mut() else {
        as_written?;
        return Ok(None);
    };
    ensure!(plugins.len() == 37, "the full sample lists 37 plugins");
    let refused = as_written
        .err()
        .context("the full sample applied as written")?;
    for (plugin, minor) in [
        ("DenyEscalatingExec", 21),
        ("DenyExecOnPrivileged", 21),
        ("PodSecurityPolicy", 25),
    ] {
        let text = format!(
            "admission plugin {plugin} was removed in v1.{minor}; version 1.27.0 would not start with it"
        );
        ensure!(
            refused.to_string().contains(&text)
                && refused.to_string().contains("spec.admissionControllers"),
            "the refusal does not say {text:?}: {refused}"
        );
    }
    plugins.retain(|p| {
        ![
            "DenyEscalatingExec",
            "DenyExecOnPrivileged",
            "PodSecurityPolicy",
        ]
        .contains(&p.as_str().unwrap_or_default())
    });
    let kept = plugins.len();
    kubectl_apply_yaml(cluster, ns, &serde_yaml::to_string(doc)?)?;
    Ok(Some(kept))
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario over every sample, in order
async fn samples_apply_unchanged_and_read_back_equal_in_both_versions() -> Result<()> {
    let cluster = LocalCluster::start().await?;
    let client = cluster.client();

    // The two v1alpha1 KamajiControlPlane samples share a name: one namespace each.
    for (ns, file) in [
        ("full", "kamajicontrolplane-full-v1alpha1.yaml"),
        ("cloud", "kamajicontrolplane-cloud-config-v1alpha1.yaml"),
    ] {
        create_namespace(&cluster, ns)?;
        let path = samples_dir().join(file);
        let mut doc = yaml_docs(&path)?.remove(0);
        let plugins = full_sample_plugins(&cluster, ns, &path, &mut doc)?;
        read_back_both_versions(&cluster, ns, "kamajicontrolplane-sample", &doc["spec"]).await?;
        let back = api(&client, ns, "v1alpha1", "KamajiControlPlane")
            .get("kamajicontrolplane-sample")
            .await?;
        ensure!(
            back.data["spec"]["version"] == "1.27.0",
            "version kept as written"
        );
        ensure!(
            back.data["spec"]["admissionControllers"]
                .as_array()
                .map(Vec::len)
                == plugins,
            "the admission plugins kept"
        );
    }

    // The quickstart: its Cluster (v1beta1) and KamajiControlPlane, exactly as written. The
    // OpenStack, MachineDeployment and KubeadmConfigTemplate objects need other providers.
    create_namespace(&cluster, "quickstart")?;
    // The v1beta1 -> v1beta2 Cluster conversion resolves the infrastructureRef's CRD, so the
    // OpenStack kinds need a stand-in CRD (shared/samples/README.md).
    kubectl_apply_yaml(
        &cluster,
        "default",
        &kamaji_testenv::standins::openstack_cluster_crd_yaml(),
    )?;
    kubectl(
        &cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/openstackclusters.infrastructure.cluster.x-k8s.io",
        ],
    )?;
    let docs = yaml_docs(&samples_dir().join("quickstart-openstack.yaml"))?;
    let mut applied = 0;
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        if kind == "Cluster" || kind == "KamajiControlPlane" {
            let mut doc = doc.clone();
            if let Some(meta) = doc["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            kubectl_apply_yaml(&cluster, "quickstart", &serde_yaml::to_string(&doc)?)?;
            applied += 1;
        }
    }
    ensure!(
        applied == 2,
        "quickstart holds a Cluster and a KamajiControlPlane"
    );
    let kcp = docs
        .iter()
        .find(|d| d["kind"] == "KamajiControlPlane")
        .context("kcp in quickstart")?;
    read_back_both_versions(&cluster, "quickstart", "capo-cp-test", &kcp["spec"]).await?;
    let defaults = api(&client, "quickstart", "v1alpha2", "KamajiControlPlane")
        .get("capo-cp-test")
        .await?;
    ensure!(
        defaults.data["spec"]["registry"] == "registry.k8s.io",
        "registry default"
    );
    ensure!(
        defaults.data["spec"]["network"] == json!({"serviceType": "LoadBalancer"}),
        "network default"
    );
    ensure!(
        defaults.data["spec"]["kubelet"]
            == json!({"preferredAddressTypes": ["InternalIP", "ExternalIP", "Hostname"], "cgroupfs": "systemd"}),
        "kubelet default"
    );
    let cluster_view: kamaji_api::cluster::v1beta2::Cluster = serde_json::from_str(&kubectl(
        &cluster,
        &[
            "get",
            "-n",
            "quickstart",
            "clusters.v1beta2.cluster.x-k8s.io/capi-quickstart",
            "-o",
            "json",
        ],
    )?)?;
    let view = kamaji_api::cluster::ClusterView::from(&cluster_view);
    ensure!(
        view.pod_cidrs == vec!["192.168.0.0/16".to_owned()],
        "pod CIDR read through the v1beta2 view"
    );
    ensure!(
        view.control_plane_ref.map(|r| r.name) == Some("capo-cp-test".to_owned()),
        "controlPlaneRef"
    );

    // A v1alpha2 object as the provider ships today, with the newer fields.
    create_namespace(&cluster, "v2")?;
    let v2 = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1alpha2
kind: KamajiControlPlane
metadata:
  name: demo
spec:
  version: v1.36.3
  replicas: 3
  dataStoreName: default
  dataStoreSchema: tenant_v2_demo
  dataStoreUsername: tenant_v2_demo
  dataStoreOverrides:
    - {resource: /events, dataStore: events}
  encryptionAtRest:
    resources: [configmaps, "*.apps", widgets.example.com, events, "*.batch"]
  addons:
    coreDNS: {imageTag: v1.12.0, dnsServiceIPs: [10.96.0.10]}
    kubeProxy: {imageRepository: registry.k8s.io}
    konnectivity:
      server: {port: 8132, extraArgs: ["--keepalive-time=1m"], resources: {requests: {cpu: 100m}}}
      agent: {mode: Deployment, replicas: 2, hostNetwork: false}
  admissionControllers: [NodeRestriction, ValidatingAdmissionPolicy]
  apiServer:
    extraArgs: ["--max-requests-inflight=800", "--service-account-issuer=https://issuer-new.example.com", "--service-account-issuer=https://kubernetes.default.svc.cluster.local"]
    probes: {liveness: {failureThreshold: 8, periodSeconds: 10}}
  controllerManager: {extraArgs: ["--allocate-node-cidrs=false"]}
  kine: {extraArgs: ["--metrics-bind-address=:9091"]}
  kubelet:
    preferredAddressTypes: [InternalIP]
    cgroupfs: systemd
    configurationJSONPatches:
      - {op: replace, path: /maxPods, value: 150}
      - {op: add, path: /featureGates, value: {NodeSwap: true}}
  network:
    serviceType: LoadBalancer
    serviceAddress: 10.0.0.10
    advertiseAddress: 192.168.1.10
    serviceLabels: {a: b}
    serviceAnnotations: {c: d}
    additionalServicePorts:
      - {name: csr-signer, port: 9443, targetPort: 9443}
    certSANs: [api.example.com, "*.tenants.example.com", 10.0.0.10, "fd00::10"]
    dnsServiceIPs: [10.96.0.10]
    loadBalancerConfig:
      loadBalancerSourceRanges: [10.0.0.0/8, "fd00::/64"]
      loadBalancerClass: example.com/lb
    gateway: {name: gw, namespace: gateways, hostname: api.example.com, sectionName: tls, port: 443}
  deployment:
    serviceAccountName: tenant
    additionalMetadata: {labels: {tier: gold}}
    podAdditionalMetadata: {annotations: {p: q}}
    probes: {readiness: {periodSeconds: 5}, startup: {failureThreshold: 30}}
    extraContainers:
      - name: csr-signer
        image: example.com/signer:v1
        ports: [{containerPort: 9443}]
"#;
    kubectl_apply_yaml(&cluster, "v2", v2)?;
    let v2_doc: Value = serde_yaml::from_str(v2)?;
    read_back_both_versions(&cluster, "v2", "demo", &v2_doc["spec"]).await?;

    // A KamajiControlPlaneTemplate used by a ClusterClass.
    create_namespace(&cluster, "classes")?;
    let class = r"
apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
kind: KamajiControlPlaneTemplate
metadata:
  name: kamaji
spec:
  template:
    metadata:
      labels: {tier: gold}
    spec:
      dataStoreName: default
      addons: {coreDNS: {}, kubeProxy: {}}
      network: {serviceType: LoadBalancer}
      deployment:
        strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 100%}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata:
  name: kamaji
spec:
  controlPlane:
    templateRef:
      apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
      kind: KamajiControlPlaneTemplate
      name: kamaji
  infrastructure:
    templateRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
      kind: DockerClusterTemplate
      name: kamaji
";
    kubectl_apply_yaml(&cluster, "classes", class)?;
    let t1 = api(&client, "classes", "v1alpha1", "KamajiControlPlaneTemplate")
        .get("kamaji")
        .await?;
    let t2 = api(&client, "classes", "v1alpha2", "KamajiControlPlaneTemplate")
        .get("kamaji")
        .await?;
    ensure!(
        t1.data["spec"] == t2.data["spec"],
        "template spec differs between versions"
    );
    let typed: kamaji_api::KamajiControlPlaneTemplate =
        serde_json::from_value(serde_json::to_value(&t2)?)?;
    ensure!(
        typed.spec.template.spec.data_store_name.as_deref() == Some("default"),
        "template field"
    );
    kubectl(
        &cluster,
        &[
            "get",
            "-n",
            "classes",
            "clusterclasses.cluster.x-k8s.io/kamaji",
        ],
    )?;

    // Kamaji DataStores as Kamaji users write them.
    let datastores = r"
apiVersion: kamaji.clastix.io/v1alpha1
kind: DataStore
metadata:
  name: default
spec:
  driver: etcd
  endpoints:
  - etcd-0.etcd.kamaji-system.svc:2379
  - etcd-1.etcd.kamaji-system.svc:2379
  tlsConfig:
    certificateAuthority:
      certificate:
        secretReference: {keyPath: tls.crt, name: etcd-ca-tls, namespace: kamaji-system}
      privateKey:
        secretReference: {keyPath: tls.key, name: etcd-ca-tls, namespace: kamaji-system}
    clientCertificate:
      certificate:
        secretReference: {keyPath: tls.crt, name: etcd-client-tls, namespace: kamaji-system}
      privateKey:
        secretReference: {keyPath: tls.key, name: etcd-client-tls, namespace: kamaji-system}
---
apiVersion: kamaji.clastix.io/v1alpha1
kind: DataStore
metadata:
  name: postgresql-bronze
spec:
  driver: PostgreSQL
  endpoints: [postgres-bronze-rw.postgres-system.svc:5432]
  basicAuth:
    username: {content: cm9vdA==}
    password:
      secretReference: {name: postgres-bronze-superuser, namespace: postgres-system, keyPath: password}
  tlsConfig:
    certificateAuthority:
      certificate:
        secretReference: {name: postgres-bronze-ca, namespace: postgres-system, keyPath: ca.crt}
";
    kubectl_apply_yaml(&cluster, "default", datastores)?;
    let ds: Api<kamaji_api::DataStore> = Api::all(client.clone());
    let etcd = ds.get("default").await?;
    ensure!(
        etcd.spec.driver == kamaji_api::datastore::Driver::Etcd,
        "etcd driver"
    );
    ensure!(etcd.spec.endpoints.len() == 2, "endpoints");
    let pg = ds.get("postgresql-bronze").await?;
    ensure!(
        pg.spec
            .basic_auth
            .as_ref()
            .and_then(|b| b.username.content.as_ref())
            .map(|c| c.0.clone())
            == Some(b"root".to_vec()),
        "inline content decoded"
    );
    Ok(())
}

/// Base of the invalid cases: a valid v1alpha1 spec.
fn base_spec() -> Value {
    json!({"version": "v1.30.2", "replicas": 2, "dataStoreName": "default"})
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn kcp_object(name: &str, spec: &Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "KamajiControlPlane",
        "metadata": {"name": name},
        "spec": spec,
    }))?)
}

/// Sets `status.version` through the status subresource, as the controller does.
async fn set_status_version(kcps: &Api<DynamicObject>, name: &str, version: &Value) -> Result<()> {
    kcps.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"version": version}})),
    )
    .await
    .with_context(|| format!("{name}: set status.version {version}"))?;
    Ok(())
}

/// Merge-patches `spec` of the KamajiControlPlane `name` with `patch`.
async fn patch_spec(
    kcps: &Api<DynamicObject>,
    name: &str,
    patch: &Value,
) -> kube::Result<DynamicObject> {
    kcps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": patch })),
    )
    .await
}

fn rejection(err: &kube::Error) -> Option<String> {
    match err {
        kube::Error::Api(status) if status.code == 422 => Some(status.message.clone()),
        _ => None,
    }
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one table of cases
async fn invalid_inputs_are_rejected_with_the_field_named_and_nothing_created() -> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "bad")?;
    let kcps = api(&client, "bad", "v1alpha1", "KamajiControlPlane");

    // (case, spec patch on create, text the message must contain)
    let create_cases: Vec<(&str, Value, &str)> = vec![
        (
            "version-no-patch",
            json!({"version": "1.30"}),
            "spec.version",
        ),
        ("version-word", json!({"version": "latest"}), "spec.version"),
        (
            "version-four-parts",
            json!({"version": "v1.30.2.1"}),
            "spec.version",
        ),
        ("version-empty", json!({"version": ""}), "spec.version"),
        ("version-missing", json!({"version": null}), "spec.version"),
        (
            "replicas-negative",
            json!({"replicas": -1}),
            "spec.replicas",
        ),
        (
            "service-type",
            json!({"network": {"serviceType": "ExternalName"}}),
            "spec.network.serviceType",
        ),
        (
            "lb-ranges-clusterip",
            json!({"network": {"serviceType": "ClusterIP", "loadBalancerConfig": {"loadBalancerSourceRanges": ["10.0.0.0/8"]}}}),
            "loadBalancerSourceRanges",
        ),
        (
            "lb-class-nodeport",
            json!({"network": {"serviceType": "NodePort", "loadBalancerConfig": {"loadBalancerClass": "x/lb"}}}),
            "loadBalancerClass",
        ),
        (
            "lb-nodeports-clusterip",
            json!({"network": {"serviceType": "ClusterIP", "allocateLoadBalancerNodePorts": false}}),
            "allocateLoadBalancerNodePorts",
        ),
        (
            "san-host-port",
            json!({"network": {"certSANs": ["api.example.com:6443"]}}),
            "certSANs",
        ),
        (
            "san-url",
            json!({"network": {"certSANs": ["https://api.example.com"]}}),
            "certSANs",
        ),
        (
            "ingress-and-gateway",
            json!({"network": {"ingress": {"hostname": "a.example.com"}, "gateway": {"name": "g", "namespace": "n", "hostname": "a.example.com"}}}),
            "network.ingress and network.gateway",
        ),
        (
            "ingress-no-hostname",
            json!({"network": {"ingress": {"className": "nginx"}}}),
            "spec.network.ingress.hostname",
        ),
        (
            "gateway-port",
            json!({"network": {"gateway": {"name": "g", "namespace": "n", "hostname": "a.example.com", "port": 70000}}}),
            "spec.network.gateway.port",
        ),
        (
            "admission-plugin",
            json!({"admissionControllers": ["NamespaceLifecycle", "NotAPlugin"]}),
            "spec.admissionControllers",
        ),
        (
            "lb-range-cidr",
            json!({"network": {"loadBalancerConfig": {"loadBalancerSourceRanges": ["10.0.0.0/33"]}}}),
            "loadBalancerSourceRanges",
        ),
        (
            "service-address",
            json!({"network": {"serviceAddress": "10.0.0.300"}}),
            "serviceAddress",
        ),
        (
            "advertise-address",
            json!({"network": {"advertiseAddress": "api.example.com"}}),
            "advertiseAddress",
        ),
        (
            "network-dns-ip",
            json!({"network": {"dnsServiceIPs": ["10.96.0.0/12"]}}),
            "dnsServiceIPs",
        ),
        (
            "coredns-dns-ip",
            json!({"addons": {"coreDNS": {"dnsServiceIPs": ["kube-dns"]}}}),
            "dnsServiceIPs",
        ),
        (
            "extra-arg-bare-word",
            json!({"apiServer": {"extraArgs": ["max-requests-inflight"]}}),
            "spec.apiServer.extraArgs",
        ),
        (
            "extra-arg-encryption-config",
            json!({"apiServer": {"extraArgs": ["--encryption-provider-config=/etc/mine.yaml"]}}),
            "apiServer.extraArgs",
        ),
        (
            "encrypted-resource-star",
            json!({"encryptionAtRest": {"resources": ["*"]}}),
            "encryptionAtRest.resources",
        ),
        (
            "encrypted-resource-capitals",
            json!({"encryptionAtRest": {"resources": ["ConfigMaps"]}}),
            "encryptionAtRest.resources",
        ),
        (
            "encrypted-resource-events-group",
            json!({"encryptionAtRest": {"resources": ["events.events.k8s.io"]}}),
            "encrypt core 'events' instead",
        ),
        (
            "encrypted-resource-overlap",
            json!({"encryptionAtRest": {"resources": ["configmaps", "*."]}}),
            "none that another entry covers",
        ),
        (
            "encrypted-resource-twice",
            json!({"encryptionAtRest": {"resources": ["configmaps", "configmaps"]}}),
            "encryptionAtRest.resources",
        ),
        (
            "extra-arg-reserved",
            json!({"apiServer": {"extraArgs": ["--etcd-servers=https://x:2379"]}}),
            "apiServer.extraArgs",
        ),
        (
            "extra-arg-reserved-kcm",
            json!({"controllerManager": {"extraArgs": ["--kubeconfig=/x"]}}),
            "controllerManager.extraArgs",
        ),
        (
            "extra-arg-reserved-scheduler",
            json!({"scheduler": {"extraArgs": ["-authentication-kubeconfig=/x"]}}),
            "scheduler.extraArgs",
        ),
        (
            "kubelet-address-type",
            json!({"kubelet": {"preferredAddressTypes": ["Foo"]}}),
            "spec.kubelet.preferredAddressTypes",
        ),
        (
            "kubelet-cgroupfs",
            json!({"kubelet": {"cgroupfs": "runc"}}),
            "spec.kubelet.cgroupfs",
        ),
        (
            "datastore-override",
            json!({"dataStoreOverrides": [{"resource": "/events"}]}),
            "spec.dataStoreOverrides[0].dataStore",
        ),
        (
            "datastore-override-resource",
            json!({"dataStoreOverrides": [{"resource": "events", "dataStore": "e"}]}),
            "spec.dataStoreOverrides[0].resource",
        ),
        (
            "datastore-override-keyspace",
            json!({"dataStoreOverrides": [{"resource": "/", "dataStore": "e"}]}),
            "spec.dataStoreOverrides[0].resource",
        ),
        (
            "datastore-override-twice",
            json!({"dataStoreOverrides": [{"resource": "/events", "dataStore": "a"},
                {"resource": "/events", "dataStore": "b"}]}),
            "dataStoreOverrides must name each resource at most once",
        ),
        (
            "endpoint-port",
            json!({"controlPlaneEndpoint": {"host": "a", "port": 70000}}),
            "spec.controlPlaneEndpoint.port",
        ),
        (
            "konnectivity-mode",
            json!({"addons": {"konnectivity": {"agent": {"mode": "StatefulSet"}}}}),
            "spec.addons.konnectivity.agent.mode",
        ),
    ];
    let mut checked = 0;
    for (case, patch, field) in &create_cases {
        let mut spec = base_spec();
        merge(&mut spec, patch);
        let name = format!("create-{case}");
        let err = kcps
            .create(&PostParams::default(), &kcp_object(&name, &spec)?)
            .await
            .err()
            .with_context(|| format!("{case}: accepted"))?;
        let message =
            rejection(&err).with_context(|| format!("{case}: not a 422 rejection: {err}"))?;
        ensure!(
            message.contains(field),
            "{case}: message does not name {field}: {message}"
        );
        ensure!(
            kcps.get_opt(&name).await?.is_none(),
            "{case}: object created anyway"
        );
        checked += 1;
    }

    // (case, valid spec patch on create, spec patch on update, text the message must contain)
    let update_cases: Vec<(&str, Value, Value, &str)> = vec![
        (
            "downgrade",
            json!({}),
            json!({"version": "v1.29.9"}),
            "spec.version cannot be downgraded",
        ),
        (
            "patch-downgrade",
            json!({}),
            json!({"version": "1.30.1"}),
            "spec.version cannot be downgraded",
        ),
        (
            "minor-skip",
            json!({}),
            json!({"version": "v1.32.0"}),
            "spec.version cannot skip a minor version",
        ),
        (
            "major-change",
            json!({}),
            json!({"version": "v2.0.0"}),
            "spec.version cannot change the major version",
        ),
        (
            "datastore-name-change",
            json!({}),
            json!({"dataStoreName": "other"}),
            "spec.dataStoreName is immutable",
        ),
        (
            "datastore-name-unset",
            json!({}),
            json!({"dataStoreName": null}),
            "spec.dataStoreName is immutable",
        ),
        (
            "datastore-schema-change",
            json!({"dataStoreSchema": "a"}),
            json!({"dataStoreSchema": "b"}),
            "spec.dataStoreSchema is immutable",
        ),
        (
            "datastore-username-change",
            json!({"dataStoreUsername": "a"}),
            json!({"dataStoreUsername": "b"}),
            "spec.dataStoreUsername is immutable",
        ),
        (
            "datastore-overrides-added",
            json!({}),
            json!({"dataStoreOverrides": [{"resource": "/events", "dataStore": "events"}]}),
            "spec.dataStoreOverrides is immutable",
        ),
        (
            "datastore-overrides-changed",
            json!({"dataStoreOverrides": [{"resource": "/events", "dataStore": "events"}]}),
            json!({"dataStoreOverrides": [{"resource": "apps/deployments", "dataStore": "events"}]}),
            "spec.dataStoreOverrides is immutable",
        ),
        (
            "datastore-overrides-removed",
            json!({"dataStoreOverrides": [{"resource": "/events", "dataStore": "events"}]}),
            json!({"dataStoreOverrides": null}),
            "spec.dataStoreOverrides is immutable",
        ),
        (
            "lb-class-set-later",
            json!({}),
            json!({"network": {"loadBalancerConfig": {"loadBalancerClass": "x/lb"}}}),
            "loadBalancerClass cannot be set or unset",
        ),
        (
            "lb-class-change",
            json!({"network": {"loadBalancerConfig": {"loadBalancerClass": "x/lb"}}}),
            json!({"network": {"loadBalancerConfig": {"loadBalancerClass": "y/lb"}}}),
            "loadBalancerClass is immutable",
        ),
        (
            "lb-class-unset",
            json!({"network": {"loadBalancerConfig": {"loadBalancerClass": "x/lb"}}}),
            json!({"network": {"loadBalancerConfig": {"loadBalancerClass": null}}}),
            "loadBalancerClass cannot be set or unset",
        ),
    ];
    for (case, initial, patch, text) in &update_cases {
        let mut spec = base_spec();
        merge(&mut spec, initial);
        let name = format!("update-{case}");
        let created = kcps
            .create(&PostParams::default(), &kcp_object(&name, &spec)?)
            .await?;
        // As the controller reports it once every replica runs spec.version.
        set_status_version(&kcps, &name, &spec["version"]).await?;
        let err = patch_spec(&kcps, &name, patch)
            .await
            .err()
            .with_context(|| format!("{case}: update accepted"))?;
        let message =
            rejection(&err).with_context(|| format!("{case}: not a 422 rejection: {err}"))?;
        ensure!(
            message.contains(text),
            "{case}: message does not say {text}: {message}"
        );
        let now = kcps.get(&name).await?;
        ensure!(
            now.data["spec"] == created.data["spec"],
            "{case}: spec changed anyway"
        );
        checked += 1;
    }

    // Allowed updates: one minor up, a patch release, setting an unset datastore field.
    let name = "update-allowed";
    kcps.create(&PostParams::default(), &kcp_object(name, &base_spec())?)
        .await?;
    for patch in [
        json!({"version": "v1.30.5"}),
        json!({"version": "1.31.0"}),
        json!({"dataStoreSchema": "s"}),
    ] {
        patch_spec(&kcps, name, &patch)
            .await
            .with_context(|| format!("allowed update {patch} rejected"))?;
    }

    // A datastore field left empty may be set later only to the name in use
    // (status.dataStore), never to another: nothing stored would move.
    let name = "update-datastore-in-use";
    let mut spec = base_spec();
    merge(&mut spec, &json!({"dataStoreName": null}));
    kcps.create(&PostParams::default(), &kcp_object(name, &spec)?)
        .await?;
    kcps.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"dataStore": {
            "name": "default", "schema": "in_use", "username": "in_use"}}})),
    )
    .await
    .context("set status.dataStore")?;
    for (field, key) in [
        ("dataStoreName", "name"),
        ("dataStoreSchema", "schema"),
        ("dataStoreUsername", "username"),
    ] {
        let err = patch_spec(&kcps, name, &json!({ field: "other" }))
            .await
            .err()
            .with_context(|| format!("{field} set to a name not in use accepted"))?;
        let message = rejection(&err).with_context(|| format!("{field}: not a 422: {err}"))?;
        let text = format!("spec.{field} may only be set to status.dataStore.{key}");
        ensure!(
            message.contains(&text),
            "{field}: message does not say {text}: {message}"
        );
        checked += 1;
    }
    for patch in [
        json!({"dataStoreName": "default"}),
        json!({"dataStoreSchema": "in_use", "dataStoreUsername": "in_use"}),
    ] {
        patch_spec(&kcps, name, &patch)
            .await
            .with_context(|| format!("setting the names in use {patch} rejected"))?;
    }

    // The template rejects reserved flags too; DataStore rules.
    let templates = api(&client, "bad", "v1alpha1", "KamajiControlPlaneTemplate");
    let template: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "KamajiControlPlaneTemplate",
        "metadata": {"name": "reserved"},
        "spec": {"template": {"spec": {"apiServer": {"extraArgs": ["--tls-cert-file=/x"]}}}},
    }))?;
    let err = templates
        .create(&PostParams::default(), &template)
        .await
        .err()
        .context("template accepted")?;
    let message = rejection(&err).context("template: not a 422")?;
    ensure!(
        message.contains("spec.template.spec.apiServer.extraArgs"),
        "template message: {message}"
    );
    checked += 1;

    let datastores: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "kamaji.clastix.io",
            "v1alpha1",
            "DataStore",
        )),
    );
    for (case, spec, text) in [
        (
            "driver",
            json!({"driver": "Redis", "endpoints": ["x:1"], "basicAuth": {"username": {"content": "eA=="}, "password": {"content": "eA=="}}}),
            "spec.driver",
        ),
        (
            "etcd-without-tls",
            json!({"driver": "etcd", "endpoints": ["x:2379"]}),
            "spec.tlsConfig.clientCertificate is required",
        ),
        (
            "no-endpoints",
            json!({"driver": "etcd", "endpoints": []}),
            "spec.endpoints",
        ),
        (
            "empty-content-ref",
            json!({"driver": "MySQL", "endpoints": ["x:3306"], "basicAuth": {"username": {}, "password": {"content": "eA=="}}}),
            "either content or secretReference",
        ),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
            "metadata": {"name": format!("bad-{case}")}, "spec": spec,
        }))?;
        let err = datastores
            .create(&PostParams::default(), &obj)
            .await
            .err()
            .with_context(|| format!("datastore {case} accepted"))?;
        let message =
            rejection(&err).with_context(|| format!("datastore {case}: not a 422: {err}"))?;
        ensure!(message.contains(text), "datastore {case}: {message}");
        ensure!(
            datastores.get_opt(&format!("bad-{case}")).await?.is_none(),
            "datastore {case} created"
        );
        checked += 1;
    }
    ensure!(checked >= 25, "only {checked} invalid inputs checked");
    Ok(())
}

#[tokio::test]
async fn scale_subresource_and_explain() -> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "scale")?;
    let kcps = api(&client, "scale", "v1alpha1", "KamajiControlPlane");
    kcps.create(&PostParams::default(), &kcp_object("x", &base_spec())?)
        .await?;
    // `ktcp` is the short name (upstream's); `kcp` belongs to CAPI's KubeadmControlPlane.
    kubectl(
        &cluster,
        &["scale", "-n", "scale", "ktcp/x", "--replicas=3"],
    )?;
    let scaled = kcps.get("x").await?;
    ensure!(
        scaled.data["spec"]["replicas"] == 3,
        "spec.replicas after scale: {}",
        scaled.data["spec"]["replicas"]
    );
    kubectl(
        &cluster,
        &["scale", "-n", "scale", "ktcp/x", "--replicas=0"],
    )?;
    ensure!(
        kcps.get("x").await?.data["spec"]["replicas"] == 0,
        "scaled to zero"
    );

    let explain = kubectl_explain(&cluster, &["explain", "ktcp.spec.network"])?;
    for text in [
        "How the control plane is exposed",
        "serviceType",
        "certSANs",
        "loadBalancerConfig",
    ] {
        ensure!(
            explain.contains(text),
            "kubectl explain ktcp.spec.network lacks {text:?}:\n{explain}"
        );
    }
    let explain_v1 = kubectl_explain(
        &cluster,
        &[
            "explain",
            "kamajicontrolplanes.spec.version",
            "--api-version=controlplane.cluster.x-k8s.io/v1alpha1",
        ],
    )?;
    ensure!(
        explain_v1.contains("semver"),
        "explain v1alpha1 spec.version:\n{explain_v1}"
    );

    let columns = kubectl(&cluster, &["get", "-n", "scale", "ktcp"])?;
    for column in [
        "CLUSTER",
        "ENDPOINT",
        "VERSION",
        "INITIALIZED",
        "AVAILABLE",
        "REPLICAS",
        "AGE",
    ] {
        ensure!(
            columns.contains(column),
            "printer column {column} missing:\n{columns}"
        );
    }
    kubectl(&cluster, &["get", "cluster-api"])?;
    Ok(())
}

/// Creates `name` from `base_spec()` merged with `patch`, which must be accepted.
async fn create_kcp(kcps: &Api<DynamicObject>, name: &str, patch: &Value) -> Result<DynamicObject> {
    let mut spec = base_spec();
    merge(&mut spec, patch);
    kcps.create(&PostParams::default(), &kcp_object(name, &spec)?)
        .await
        .with_context(|| format!("{name}: create {spec} refused"))
}

/// Creates `create-<case>` from `base_spec()` merged with `patch`, which must be refused with
/// a message containing every one of `texts`, creating nothing.
async fn create_refused(
    kcps: &Api<DynamicObject>,
    case: &str,
    patch: &Value,
    texts: &[&str],
) -> Result<()> {
    let mut spec = base_spec();
    merge(&mut spec, patch);
    let name = format!("create-{case}");
    let err = kcps
        .create(&PostParams::default(), &kcp_object(&name, &spec)?)
        .await
        .err()
        .with_context(|| format!("{case}: {spec} accepted"))?;
    let message = rejection(&err).with_context(|| format!("{case}: not a 422 rejection: {err}"))?;
    for text in texts {
        ensure!(
            message.contains(text),
            "{case}: message does not say {text:?}: {message}"
        );
    }
    ensure!(
        kcps.get_opt(&name).await?.is_none(),
        "{case}: object created anyway"
    );
    Ok(())
}

/// Applies `spec` as a merge patch, which must be accepted.
async fn update_accepted(kcps: &Api<DynamicObject>, name: &str, spec: Value) -> Result<()> {
    kcps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec.clone()})),
    )
    .await
    .with_context(|| format!("{name}: update {spec} refused"))?;
    Ok(())
}

/// Applies `spec` as a merge patch, which must be refused with a message containing every one
/// of `texts`, leaving the spec as it was.
async fn update_refused(
    kcps: &Api<DynamicObject>,
    name: &str,
    spec: Value,
    texts: &[&str],
) -> Result<()> {
    let before = kcps.get(name).await?;
    let err = kcps
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec.clone()})),
        )
        .await
        .err()
        .with_context(|| format!("{name}: update {spec} accepted"))?;
    let message =
        rejection(&err).with_context(|| format!("{name}: {spec}: not a 422 rejection: {err}"))?;
    for text in texts {
        ensure!(
            message.contains(text),
            "{name}: {spec}: message does not say {text:?}: {message}"
        );
    }
    ensure!(
        kcps.get(name).await?.data["spec"] == before.data["spec"],
        "{name}: {spec}: spec changed anyway"
    );
    Ok(())
}

/// Issue 10 item 8: a flag the object's own `spec.version` no longer has is refused at
/// admission, in every form `extraArgs` accepts, with the controller's message; also when an
/// upgrade reaches the version that removed a flag in use.
#[tokio::test]
#[allow(clippy::too_many_lines)] // one table of cases
async fn flags_removed_at_spec_version_are_refused_at_admission() -> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "flags")?;
    let kcps = api(&client, "flags", "v1alpha1", "KamajiControlPlane");
    // (case, spec patch, texts the message must contain; the first names the field)
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "removed-flag",
            json!({"apiServer": {"extraArgs": ["--max-requests-inflight=800", "--insecure-port=0"]}}),
            vec![
                "spec.apiServer.extraArgs",
                "--insecure-port was removed from kube-apiserver in v1.24; version v1.30.2 would not start with it",
            ],
        ),
        (
            "removed-flag-bare",
            json!({"apiServer": {"extraArgs": ["--insecure-port"]}}),
            vec![
                "spec.apiServer.extraArgs",
                "--insecure-port was removed from kube-apiserver in v1.24",
            ],
        ),
        (
            "removed-flag-one-dash",
            json!({"apiServer": {"extraArgs": ["-insecure-bind-address=0.0.0.0"]}}),
            vec![
                "spec.apiServer.extraArgs",
                "--insecure-bind-address was removed from kube-apiserver in v1.24",
            ],
        ),
        (
            "removed-flag-no-dash",
            json!({"apiServer": {"extraArgs": ["insecure-port=0"]}}),
            vec![
                "spec.apiServer.extraArgs",
                "--insecure-port was removed from kube-apiserver in v1.24",
            ],
        ),
        (
            "removed-flag-version",
            json!({"version": "v1.36.3", "apiServer": {"extraArgs": ["--cloud-provider=external"]}}),
            vec![
                "spec.apiServer.extraArgs",
                "--cloud-provider was removed from kube-apiserver in v1.33; version v1.36.3 would not start with it",
            ],
        ),
        (
            "removed-flag-kcm",
            json!({"controllerManager": {"extraArgs": ["--pod-eviction-timeout=5m"]}}),
            vec![
                "spec.controllerManager.extraArgs",
                "--pod-eviction-timeout was removed from kube-controller-manager in v1.27; version v1.30.2 would not start with it",
            ],
        ),
        (
            "removed-flag-scheduler",
            json!({"scheduler": {"extraArgs": ["--policy-config-file=/etc/policy.json"]}}),
            vec![
                "spec.scheduler.extraArgs",
                "--policy-config-file was removed from kube-scheduler in v1.23; version v1.30.2 would not start with it",
            ],
        ),
    ];
    for (case, patch, texts) in &cases {
        create_refused(&kcps, case, patch, texts).await?;
    }
    // A flag before the version that removed it is accepted; the upgrade to that version is not.
    let name = "upgrade-removes-flag";
    create_kcp(
        &kcps,
        name,
        &json!({"version": "v1.32.4", "apiServer": {"extraArgs": ["--cloud-provider=external"]}}),
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"version": "v1.33.0"}),
        &[
            "spec.apiServer.extraArgs",
            "--cloud-provider was removed from kube-apiserver in v1.33; version v1.33.0 would not start with it",
        ],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"controllerManager": {"extraArgs": ["--enable-taint-manager=false"]}}),
        &[
            "spec.controllerManager.extraArgs",
            "--enable-taint-manager was removed from kube-controller-manager in v1.29",
        ],
    )
    .await?;
    update_accepted(
        &kcps,
        name,
        json!({"controllerManager": {"extraArgs": ["--node-monitor-grace-period=50s"]}}),
    )
    .await?;
    removed_admission_plugins_are_refused(&kcps).await
}

/// Issue 48 item 3: an admission plugin the object's own `spec.version` no longer has is
/// refused at admission, on create and on the update that reaches the version that removed
/// it, with the controller's message naming the field and the version.
async fn removed_admission_plugins_are_refused(kcps: &Api<DynamicObject>) -> Result<()> {
    create_refused(
        kcps,
        "removed-plugin",
        &json!({"version": "v1.36.3", "admissionControllers": ["PodSecurityPolicy"]}),
        &[
            "spec.admissionControllers",
            "admission plugin PodSecurityPolicy was removed in v1.25; version v1.36.3 would not start with it",
        ],
    )
    .await?;
    create_refused(
        kcps,
        "removed-plugin-among-others",
        &json!({"version": "v1.30.2", "admissionControllers": ["NodeRestriction", "SecurityContextDeny", "LimitRanger"]}),
        &[
            "spec.admissionControllers",
            "admission plugin SecurityContextDeny was removed in v1.30; version v1.30.2 would not start with it",
        ],
    )
    .await?;
    let name = "upgrade-removes-plugin";
    create_kcp(
        kcps,
        name,
        &json!({"version": "v1.24.17", "admissionControllers": ["NodeRestriction", "PodSecurityPolicy"]}),
    )
    .await?;
    update_refused(
        kcps,
        name,
        json!({"version": "v1.25.16"}),
        &[
            "spec.admissionControllers",
            "admission plugin PodSecurityPolicy was removed in v1.25; version v1.25.16 would not start with it",
        ],
    )
    .await?;
    update_accepted(
        kcps,
        name,
        json!({"version": "v1.25.16", "admissionControllers": ["NodeRestriction"]}),
    )
    .await
}

/// Issue 10 item 3: a stuck upgrade can be backed out to `status.version` (the last fully
/// rolled-out version) but no further; without `status.version` any version may be set;
/// versions outside the supported range are refused on create and update.
#[tokio::test]
async fn a_stuck_upgrade_goes_back_to_status_version_and_unsupported_versions_are_refused()
-> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "versions")?;
    let kcps = api(&client, "versions", "v1alpha1", "KamajiControlPlane");
    let unsupported = "spec.version must be a Kubernetes version from v1.23.0 to v1.36.x (the versions kamaji-rs supports)";
    for (case, version) in [
        ("too-new", "v1.99.0"),
        ("too-old", "1.22.17"),
        ("major-2", "v2.30.0"),
    ] {
        create_refused(
            &kcps,
            case,
            &json!({"version": version}),
            &["spec.version", unsupported],
        )
        .await?;
    }
    create_kcp(&kcps, "oldest", &json!({"version": "v1.23.0"})).await?;
    create_kcp(&kcps, "newest", &json!({"version": "1.36.99"})).await?;

    let downgrade = [
        "spec.version",
        "spec.version cannot be downgraded below status.version (the last fully rolled-out version)",
    ];
    let name = "rollback";
    create_kcp(&kcps, name, &json!({"version": "v1.30.2"})).await?;
    set_status_version(&kcps, name, &json!("v1.30.2")).await?;
    update_accepted(&kcps, name, json!({"version": "v1.31.0"})).await?;
    // The upgrade never reaches every replica: status.version stays v1.30.2.
    update_accepted(&kcps, name, json!({"version": "v1.30.2"})).await?;
    update_accepted(&kcps, name, json!({"version": "v1.31.0"})).await?;
    update_accepted(&kcps, name, json!({"version": "1.30.2"})).await?;
    update_refused(&kcps, name, json!({"version": "v1.30.1"}), &downgrade).await?;
    update_refused(&kcps, name, json!({"version": "v1.29.9"}), &downgrade).await?;
    // Nor can the stuck upgrade be pushed on past the next minor of status.version.
    update_accepted(&kcps, name, json!({"version": "v1.31.0"})).await?;
    update_refused(
        &kcps,
        name,
        json!({"version": "v1.32.0"}),
        &["spec.version cannot be more than one minor version above status.version"],
    )
    .await?;

    // A real downgrade: status.version equals the old spec.version.
    let name = "real-downgrade";
    create_kcp(&kcps, name, &json!({"version": "v1.31.4"})).await?;
    set_status_version(&kcps, name, &json!("v1.31.4")).await?;
    update_refused(&kcps, name, json!({"version": "v1.31.3"}), &downgrade).await?;
    update_refused(&kcps, name, json!({"version": "v1.30.9"}), &downgrade).await?;
    // The major and minor rules still hold; the range holds on update too.
    update_refused(
        &kcps,
        name,
        json!({"version": "v1.33.0"}),
        &["spec.version cannot skip a minor version"],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"version": "v2.0.0"}),
        &["spec.version cannot change the major version", unsupported],
    )
    .await?;
    update_accepted(&kcps, name, json!({"version": "v1.32.0"})).await?;

    // Nothing ever fully rolled out (no status.version): any version in range may be set.
    let name = "never-rolled-out";
    create_kcp(&kcps, name, &json!({"version": "v1.31.0"})).await?;
    update_accepted(&kcps, name, json!({"version": "v1.30.0"})).await?;
    update_refused(
        &kcps,
        name,
        json!({"version": "v1.37.0"}),
        &["spec.version", unsupported],
    )
    .await?;
    no_minor_upgrade_during_a_ca_rotation(&kcps).await
}

/// Issue 48, the refused pair of `kamaji_api::lifecycle` (CA rotation, minor upgrade): while the
/// status shows a CA rotation in one of its phases, `spec.version` keeps its minor (a patch
/// release is admitted); once `CertificateAuthoritiesRotated` is True the minor upgrade is
/// admitted.
async fn no_minor_upgrade_during_a_ca_rotation(kcps: &Api<DynamicObject>) -> Result<()> {
    let name = "upgrade-during-ca-rotation";
    create_kcp(kcps, name, &json!({"version": "v1.35.2"})).await?;
    let rotation = |status: &str, reason: &str| {
        json!({"status": {"version": "v1.35.2", "conditions": [{
            "type": "CertificateAuthoritiesRotated", "status": status, "reason": reason,
            "message": "rotation \"r1\"", "lastTransitionTime": "2026-12-07T16:00:00Z"}]}})
    };
    for phase in kamaji_api::validation::CA_ROTATION_PHASE_REASONS {
        kcps.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(rotation("False", phase)),
        )
        .await?;
        update_refused(
            kcps,
            name,
            json!({"version": "v1.36.3"}),
            &[
                "spec.version",
                kamaji_api::validation::MINOR_UPGRADE_DURING_CA_ROTATION,
            ],
        )
        .await
        .with_context(|| format!("phase {phase}"))?;
    }
    update_accepted(kcps, name, json!({"version": "v1.35.4"})).await?;
    kcps.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(rotation("True", "Rotated")),
    )
    .await?;
    update_accepted(kcps, name, json!({"version": "v1.36.3"})).await
}

/// The endpoint host the controller writes with a merge patch touching only this field.
fn endpoint(host: &str, port: u16) -> Value {
    json!({"controlPlaneEndpoint": {"host": host, "port": port}})
}

const ENDPOINT_IMMUTABLE: &str = "once spec.controlPlaneEndpoint is set: Cluster API treats the control-plane endpoint as immutable";

/// Issue 10 item 5: host names that become the endpoint host are DNS names (no `host:port`,
/// URL, wildcard or IP address), and `controlPlaneEndpoint.host` is an IP address or a DNS
/// name, on the `KamajiControlPlane` and its template.
#[tokio::test]
async fn endpoint_host_names_are_dns_names_without_port_or_scheme() -> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "hosts")?;
    let kcps = api(&client, "hosts", "v1alpha1", "KamajiControlPlane");
    let ingress = "network.ingress.hostname must be a lowercase DNS name";
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "ingress-host-port",
            json!({"network": {"ingress": {"hostname": "api.demo.example.com:443"}}}),
            vec!["spec.network.ingress.hostname", ingress],
        ),
        (
            "ingress-url",
            json!({"network": {"ingress": {"hostname": "https://api.demo.example.com"}}}),
            vec!["spec.network.ingress.hostname", ingress],
        ),
        (
            "ingress-wildcard",
            json!({"network": {"ingress": {"hostname": "*.demo.example.com"}}}),
            vec!["spec.network.ingress.hostname", ingress],
        ),
        (
            "ingress-ip",
            json!({"network": {"ingress": {"hostname": "10.0.0.10"}}}),
            vec!["spec.network.ingress.hostname", ingress],
        ),
        (
            "gateway-host-port",
            json!({"network": {"gateway": {"name": "g", "namespace": "n", "hostname": "api.demo.example.com:8443"}}}),
            vec![
                "spec.network.gateway.hostname",
                "network.gateway.hostname must be a lowercase DNS name",
            ],
        ),
        (
            "endpoint-host-port",
            endpoint("api.demo.example.com:6443", 6443),
            vec![
                "spec.controlPlaneEndpoint.host",
                "controlPlaneEndpoint.host must be an IP address or a DNS name",
            ],
        ),
        (
            "endpoint-host-url",
            endpoint("https://10.0.0.10", 6443),
            vec![
                "spec.controlPlaneEndpoint.host",
                "controlPlaneEndpoint.host must be an IP address or a DNS name",
            ],
        ),
    ];
    for (case, patch, texts) in &cases {
        create_refused(&kcps, case, patch, texts).await?;
    }
    for (case, patch) in [
        (
            "ingress-dns",
            json!({"network": {"ingress": {"hostname": "api.demo.example.com"}}}),
        ),
        ("endpoint-ipv6", endpoint("fd00::10", 6443)),
        ("endpoint-dns", endpoint("API.demo.example.com", 443)),
        ("endpoint-empty", endpoint("", 0)),
    ] {
        create_kcp(&kcps, case, &patch).await?;
    }
    update_refused(
        &kcps,
        "ingress-dns",
        json!({"network": {"ingress": {"hostname": "api.demo.example.com:443"}}}),
        &["spec.network.ingress.hostname", ingress],
    )
    .await?;

    let templates = api(&client, "hosts", "v1alpha1", "KamajiControlPlaneTemplate");
    let template: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "KamajiControlPlaneTemplate",
        "metadata": {"name": "host-port"},
        "spec": {"template": {"spec": {"network": {"ingress": {"hostname": "api.demo.example.com:443"}}}}},
    }))?;
    let err = templates
        .create(&PostParams::default(), &template)
        .await
        .err()
        .context("template with host:port accepted")?;
    let message = rejection(&err).context("template: not a 422")?;
    ensure!(
        message.contains("spec.template.spec.network.ingress.hostname"),
        "template message: {message}"
    );
    Ok(())
}

/// Issue 10 item 4: once `spec.controlPlaneEndpoint` is set, the fields that decide it cannot
/// change; before, they can; the controller's merge patch of the endpoint alone passes, also
/// when the same update sets the fields.
#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario per exposure
async fn endpoint_fields_are_frozen_once_the_endpoint_is_set() -> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "endpoint")?;
    let kcps = api(&client, "endpoint", "v1alpha1", "KamajiControlPlane");

    // An ingress: free while no endpoint is set, frozen once it is.
    let name = "ingress";
    create_kcp(
        &kcps,
        name,
        &json!({"network": {"serviceType": "ClusterIP", "ingress": {"hostname": "a.demo.example.com"}}}),
    )
    .await?;
    update_accepted(
        &kcps,
        name,
        json!({"network": {"ingress": {"hostname": "b.demo.example.com"}}}),
    )
    .await?;
    update_accepted(
        &kcps,
        name,
        json!({"network": {"serviceAddress": "10.0.0.11"}}),
    )
    .await?;
    update_accepted(&kcps, name, json!({"network": {"serviceAddress": null}})).await?;
    // The controller's merge patch of spec.controlPlaneEndpoint alone, first and again.
    update_accepted(&kcps, name, endpoint("b.demo.example.com", 443)).await?;
    update_accepted(&kcps, name, endpoint("b.demo.example.com", 443)).await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"ingress": {"hostname": "c.demo.example.com"}}}),
        &[
            "spec.network.ingress.hostname",
            &format!("spec.network.ingress.hostname cannot change {ENDPOINT_IMMUTABLE}"),
        ],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"ingress": null}}),
        &[&format!(
            "spec.network.ingress cannot be added or removed {ENDPOINT_IMMUTABLE}"
        )],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"serviceAddress": "10.0.0.12"}}),
        &[
            "spec.network.serviceAddress",
            &format!("spec.network.serviceAddress cannot change {ENDPOINT_IMMUTABLE}"),
        ],
    )
    .await?;
    // Behind the ingress, the Service type does not decide the endpoint; other ingress fields
    // are free.
    update_accepted(&kcps, name, json!({"network": {"serviceType": "NodePort"}})).await?;
    update_accepted(
        &kcps,
        name,
        json!({"network": {"ingress": {"className": "nginx"}}}),
    )
    .await?;

    // A LoadBalancer address: the address and the endpoint set in one update, then frozen.
    let name = "service-address";
    create_kcp(&kcps, name, &json!({})).await?;
    update_accepted(
        &kcps,
        name,
        json!({"network": {"serviceAddress": "10.0.0.10"}, "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443}}),
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"serviceType": "NodePort"}}),
        &[
            "spec.network.serviceType",
            &format!("spec.network.serviceType cannot change {ENDPOINT_IMMUTABLE}"),
        ],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"serviceAddress": null}}),
        &["spec.network.serviceAddress", ENDPOINT_IMMUTABLE],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"ingress": {"hostname": "a.demo.example.com"}}}),
        &[&format!(
            "spec.network.ingress cannot be added or removed {ENDPOINT_IMMUTABLE}"
        )],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"gateway": {"name": "g", "namespace": "n", "hostname": "a.demo.example.com"}}}),
        &[&format!(
            "spec.network.gateway cannot be added or removed {ENDPOINT_IMMUTABLE}"
        )],
    )
    .await?;
    update_accepted(
        &kcps,
        name,
        json!({"network": {"serviceLabels": {"a": "b"}}, "replicas": 3}),
    )
    .await?;

    // A gateway: hostname and port frozen once the endpoint is set (an unset port is 443).
    let name = "gateway";
    create_kcp(
        &kcps,
        name,
        &json!({"network": {"serviceType": "ClusterIP", "gateway": {"name": "g", "namespace": "n", "hostname": "a.demo.example.com"}}}),
    )
    .await?;
    update_accepted(&kcps, name, json!({"network": {"gateway": {"port": 8443}}})).await?;
    update_accepted(&kcps, name, json!({"network": {"gateway": {"port": null}}})).await?;
    update_accepted(&kcps, name, endpoint("a.demo.example.com", 443)).await?;
    update_accepted(
        &kcps,
        name,
        json!({"network": {"gateway": {"port": 443, "sectionName": "tls"}}}),
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"gateway": {"port": 8443}}}),
        &[
            "spec.network.gateway.port",
            &format!("spec.network.gateway.port cannot change {ENDPOINT_IMMUTABLE}"),
        ],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"gateway": {"hostname": "b.demo.example.com"}}}),
        &[
            "spec.network.gateway.hostname",
            &format!("spec.network.gateway.hostname cannot change {ENDPOINT_IMMUTABLE}"),
        ],
    )
    .await?;
    update_refused(
        &kcps,
        name,
        json!({"network": {"gateway": null}}),
        &[&format!(
            "spec.network.gateway cannot be added or removed {ENDPOINT_IMMUTABLE}"
        )],
    )
    .await?;
    Ok(())
}

/// Issue 17 (hostile datastore identifiers): `dataStoreSchema` and `dataStoreUsername` become
/// an etcd key prefix and SQL database and user names, so anything but a plain identifier is
/// refused at admission, naming the field, in both versions and in the template: a `/` that
/// would reach another tenant's prefix, quotes, `;`, comment markers, spaces, upper case,
/// Unicode, over-long names. Identifiers, the derived form (`k_…`) included, are accepted.
#[tokio::test]
async fn datastore_identifiers_that_are_not_plain_identifiers_are_refused() -> Result<()> {
    let cluster = kamaji_e2e::shared::api_server()?;
    let client = cluster.new_client().await?;
    create_namespace(&cluster, "idents")?;
    let long = "a".repeat(64);
    let hostile = [
        "a'; DROP DATABASE postgres; --",
        "a\"b",
        "a;b",
        "a--b",
        "a/*b*/",
        "tenant_b/../x",
        "/tenant_b",
        "a b",
        "Tenant",
        "schéma",
        "1abc",
        "a-b",
        long.as_str(),
    ];
    let kcps = api(&client, "idents", "v1alpha1", "KamajiControlPlane");
    for field in ["dataStoreSchema", "dataStoreUsername"] {
        for (i, value) in hostile.iter().enumerate() {
            create_refused(
                &kcps,
                &format!("{}-{i}", field.to_lowercase()),
                &json!({ field: value }),
                &[&format!("spec.{field}")],
            )
            .await?;
        }
    }
    let fits = "a".repeat(63);
    for (i, value) in ["tenant_v2_demo", "k_1abc_9f8e7d6c", "_x", fits.as_str()]
        .iter()
        .enumerate()
    {
        create_kcp(
            &kcps,
            &format!("ok-{i}"),
            &json!({"dataStoreSchema": value}),
        )
        .await?;
    }
    // The other served version and the template carry the same rule.
    let mut spec = base_spec();
    merge(&mut spec, &json!({"dataStoreSchema": "a;b"}));
    let others = [
        (
            "v1alpha2",
            "KamajiControlPlane",
            spec,
            "spec.dataStoreSchema",
        ),
        (
            "v1alpha1",
            "KamajiControlPlaneTemplate",
            json!({"template": {"spec": {"dataStoreSchema": "a;b"}}}),
            "spec.template.spec.dataStoreSchema",
        ),
    ];
    for (version, kind, spec, field) in others {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/{version}"),
            "kind": kind,
            "metadata": {"name": "hostile"},
            "spec": spec,
        }))?;
        let err = api(&client, "idents", version, kind)
            .create(&PostParams::default(), &object)
            .await
            .err()
            .with_context(|| format!("a {version} {kind} with dataStoreSchema a;b accepted"))?;
        let message = rejection(&err).with_context(|| format!("not a 422 rejection: {err}"))?;
        ensure!(
            message.contains(field),
            "the {version} {kind} refusal does not name {field}: {message}"
        );
    }
    Ok(())
}
