//! Real programs, nothing but kamaji-bootstrap's PKI, flags and artifacts: an etcd with TLS
//! whose CA it made, a kube-apiserver started with the product's own flags and key-material
//! layout (`controlplane`) and only its certificates and keys, kubectl
//! with the generated kubeconfigs, and a real `kubeadm join phase preflight` doing token
//! discovery against the artifacts (and failing on a wrong CA pin or an unsigned token).

#![cfg(real_programs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use kamaji_bootstrap::controlplane::{
    Component, ControlPlaneSpec, DatastoreWiring, Layout, PkiVolume, component_args,
};
use kamaji_bootstrap::kubeadm::{Addons, TenantArtifacts, TenantSpec, cluster_info};
use kamaji_bootstrap::kubeconfig::{capi_admin_kubeconfig, server_url, super_admin_kubeconfig};
use kamaji_bootstrap::network::{NetworkSpec, TenantNetwork};
use kamaji_bootstrap::pki::{
    ApiServerNames, CertificateAuthority, DatastoreCa, KeyAlgorithm, LeafRequest, LeafSpec,
    TenantPki,
};
use kamaji_bootstrap::token::{BootstrapToken, TokenSecretOptions, bootstrap_token_secret};
use kamaji_testenv::kubeadm::{self, Discovery};
use kamaji_testenv::wait::poll_until;
use kamaji_testenv::{Etcd, Supervised, Tools, free_port};

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(tools: &Tools, dir: &Path, name: &str, kubeconfig: &str) -> Self {
        Self {
            bin: tools.path("kubectl"),
            kubeconfig: write(dir, name, kubeconfig),
        }
    }
    fn run(&self, args: &[&str]) -> Output {
        run(Command::new(&self.bin)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args))
    }
    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "kubectl {args:?} failed: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

async fn wait_ready(kubectl: &Kubectl, apiserver: &mut Supervised) -> Result<()> {
    poll_until(
        "kube-apiserver not ready",
        Duration::from_mins(2),
        Duration::from_millis(500),
        Some(apiserver),
        || async {
            let o = kubectl.run(&["get", "--raw", "/readyz"]);
            o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "ok"
        },
    )
    .await
}

/// kube-apiserver as the product runs it: the key material of `pki` written into the
/// product's layout (kamaji-bootstrap's `controlplane::Layout`, rooted in `dir` instead of
/// `/etc/kubernetes`) and the product's own flags for that layout
/// (`controlplane::component_args`), with one `extraArgs` entry: listen on loopback only.
fn apiserver_command(
    tools: &Tools,
    dir: &Path,
    port: u16,
    pki: &TenantPki,
    datastore_ca: &DatastoreCa,
    etcd_url: &str,
    network: &TenantNetwork,
) -> Command {
    let (r, l) = (&pki.roots, &pki.leaves);
    let etcd_client = l.datastore_client.as_ref().unwrap();
    let layout = Layout::new(&dir.join("kubernetes").display().to_string());
    let files: Vec<(PkiVolume, &str, &str)> = vec![
        (PkiVolume::Ca, "tls.crt", r.ca.cert_pem()),
        (PkiVolume::Ca, "tls.key", r.ca.key_pem()),
        (
            PkiVolume::ServiceAccount,
            "tls.crt",
            r.service_account.public_pem(),
        ),
        (
            PkiVolume::ServiceAccount,
            "tls.key",
            r.service_account.private_pem(),
        ),
        (
            PkiVolume::FrontProxyCa,
            "tls.crt",
            r.front_proxy_ca.cert_pem(),
        ),
        (PkiVolume::ApiServer, "tls.crt", l.api_server.cert_pem()),
        (PkiVolume::ApiServer, "tls.key", l.api_server.key_pem()),
        (
            PkiVolume::ApiServerKubeletClient,
            "tls.crt",
            l.api_server_kubelet_client.cert_pem(),
        ),
        (
            PkiVolume::ApiServerKubeletClient,
            "tls.key",
            l.api_server_kubelet_client.key_pem(),
        ),
        (
            PkiVolume::FrontProxyClient,
            "tls.crt",
            l.front_proxy_client.cert_pem(),
        ),
        (
            PkiVolume::FrontProxyClient,
            "tls.key",
            l.front_proxy_client.key_pem(),
        ),
        (PkiVolume::Datastore, "ca.crt", datastore_ca.cert_pem()),
        (PkiVolume::Datastore, "tls.crt", etcd_client.cert_pem()),
        (PkiVolume::Datastore, "tls.key", etcd_client.key_pem()),
    ];
    for (volume, file, content) in files {
        std::fs::create_dir_all(layout.dir(volume)).unwrap();
        std::fs::write(layout.file(volume, file), content).unwrap();
    }
    let spec = ControlPlaneSpec {
        cluster_name: "demo".into(),
        port,
        network: network.clone(),
        admission_plugins: vec!["NodeRestriction".into()],
        kubelet_address_types: vec!["InternalIP".into(), "ExternalIP".into(), "Hostname".into()],
        advertise_address: Some([127, 0, 0, 1].into()),
        datastore: DatastoreWiring {
            servers: vec![etcd_url.to_owned()],
            prefix: "/tenants/demo".into(),
            tls: true,
            overrides: Vec::new(),
        },
        egress_selector_config: None,
        encryption_provider_config: None,
        service_account_verify_file: None,
        ca_bundle_file: None,
        front_proxy_ca_bundle_file: None,
        layout,
    };
    let mut cmd = Command::new(tools.path("kube-apiserver"));
    cmd.args(component_args(
        &spec,
        Component::ApiServer,
        &["--bind-address=127.0.0.1".to_owned()],
    ));
    cmd
}

/// Signs cluster-info for a fresh token and runs the real `kubeadm join phase preflight`:
/// passes with the right pin, fails with a wrong pin and with an unsigned token.
fn kubeadm_join_discovery(
    tools: &Tools,
    dir: &Path,
    super_admin: &Kubectl,
    cluster_info_map: &k8s_openapi::api::core::v1::ConfigMap,
    port: u16,
    hash: &str,
) -> Result<()> {
    // A bootstrap token, and cluster-info signed for it (no bootstrapsigner runs here).
    let token = BootstrapToken::generate()?;
    let secret = bootstrap_token_secret(&token, &TokenSecretOptions::default())?;
    let secret_file = write(dir, "token.yaml", &serde_yaml::to_string(&secret)?);
    super_admin.ok(&["apply", "-f", &secret_file.display().to_string()]);
    let mut signed = cluster_info_map.clone();
    cluster_info::sign(&mut signed, std::slice::from_ref(&token))?;
    let signed_file = write(dir, "cluster-info.yaml", &serde_yaml::to_string(&signed)?);
    super_admin.ok(&["apply", "-f", &signed_file.display().to_string()]);

    let endpoint = format!("127.0.0.1:{port}");
    let kubeadm = |token: &str, hash: &str| -> Result<Discovery> {
        kubeadm::join_preflight(tools, &endpoint, token, hash)
    };

    // The real join discovery passes: JWS, CA pin, second TLS-verified read, then
    // kubeadm-config and kubelet-config read with the token identity.
    let good = kubeadm(&token.token(), hash)?;
    let out = &good.output;
    assert!(good.success, "kubeadm join preflight failed:\n{out}");
    assert!(good.validated_pin(), "{out}");
    assert!(out.contains("Reading configuration from the"), "{out}");
    assert!(!out.contains("[dryrun]"), "{out}");

    // A wrong CA pin fails.
    let wrong_hash = format!("sha256:{}", "0".repeat(64));
    let bad = kubeadm(&token.token(), &wrong_hash)?;
    assert!(!bad.success, "a wrong CA hash must fail:\n{}", bad.output);
    assert!(
        bad.output.contains("none of the public keys"),
        "{}",
        bad.output
    );

    // A token whose Secret exists but for which cluster-info carries no signature fails
    // discovery (a short discovery timeout through a JoinConfiguration).
    let unsigned = BootstrapToken::generate()?;
    let unsigned_secret = bootstrap_token_secret(&unsigned, &TokenSecretOptions::default())?;
    let unsigned_file = write(
        dir,
        "unsigned.yaml",
        &serde_yaml::to_string(&unsigned_secret)?,
    );
    super_admin.ok(&["apply", "-f", &unsigned_file.display().to_string()]);
    let join_config = write(
        dir,
        "join.yaml",
        &format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: \"{endpoint}\"\n    token: \"{}\"\n    caCertHashes: [\"{hash}\"]\n  tlsBootstrapToken: \"{}\"\ntimeouts:\n  discovery: 8s\nnodeRegistration:\n  name: t1\n  criSocket: unix:///nonexistent.sock\n  ignorePreflightErrors: [all]\n",
            unsigned.token(),
            unsigned.token()
        ),
    );
    let unsigned_run = kubeadm::join_preflight_config(tools, &join_config)?;
    let out = &unsigned_run.output;
    assert!(!unsigned_run.success, "an unsigned token must fail:\n{out}");
    assert!(out.contains("could not find a JWS signature"), "{out}");

    Ok(())
}

/// B07: the bootstrap token identity may do what join needs.
fn bootstrap_token_may_join(super_admin: &Kubectl) {
    for what in [
        vec!["get", "nodes"],
        vec!["get", "configmap/kubeadm-config", "-n", "kube-system"],
        vec!["get", "configmap/kubelet-config", "-n", "kube-system"],
        vec!["create", "certificatesigningrequests"],
    ] {
        let mut args = vec!["auth", "can-i"];
        args.extend(what.iter().copied());
        args.extend([
            "--as=system:bootstrap:abcdef",
            "--as-group=system:bootstrappers:kubeadm:default-node-token",
        ]);
        assert_eq!(super_admin.ok(&args).trim(), "yes", "{what:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn real_apiserver_kubectl_and_kubeadm_join_discovery() -> Result<()> {
    let tools = Tools::locate().context("the real programs (make tools)")?;
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let now = SystemTime::now();
    let alg = KeyAlgorithm::EcdsaP256;

    // The DataStore: its CA and server certificate come from this crate.
    let etcd_ca = CertificateAuthority::generate("etcd-ca", alg, now)?;
    let etcd_server = etcd_ca.issue(&LeafSpec::datastore_server("etcd", &[], &[]), alg, now)?;
    let etcd = Etcd::start_tls(
        &tools,
        &dir.join("etcd"),
        etcd_server.cert_pem(),
        etcd_server.key_pem(),
        etcd_ca.cert_pem(),
    )
    .await?;
    let datastore_ca = DatastoreCa::from_pem(etcd_ca.cert_pem(), etcd_ca.key_pem())?;

    // The tenant, exactly as the reconciler would describe it.
    let port = free_port()?;
    let spec = TenantSpec {
        cluster_name: "demo".into(),
        version: kamaji_testenv::KUBERNETES_VERSION.into(),
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: port,
        network: NetworkSpec {
            service_cidrs: vec!["10.96.0.0/12".into()],
            pod_cidrs: vec!["10.244.0.0/16".into()],
            ..NetworkSpec::default()
        },
        etcd_endpoints: vec![etcd.url().to_owned()],
        ..TenantSpec::default()
    };
    let tenant = spec.validate()?;
    let names = ApiServerNames {
        endpoint_host: "127.0.0.1".into(),
        ..ApiServerNames::default()
    };
    let api_spec = LeafSpec::api_server(&names, tenant.network())?;
    let pki = TenantPki::generate(&LeafRequest {
        algorithm: alg,
        now,
        api_server: &api_spec,
        datastore: Some((&datastore_ca, "kube-apiserver-etcd-client")),
    })?;
    let cmd = apiserver_command(
        &tools,
        dir,
        port,
        &pki,
        &datastore_ca,
        etcd.url(),
        tenant.network(),
    );
    let (r, l) = (&pki.roots, &pki.leaves);
    std::fs::create_dir_all(dir.join("etcd"))?;
    let mut apiserver = Supervised::spawn("kube-apiserver", cmd, &dir.join("kube-apiserver.log"))?;

    // Users get the kubeadm:cluster-admins identity on the public endpoint; the provider keeps
    // the super-admin for itself.
    let server = server_url("127.0.0.1", port);
    let admin = Kubectl::new(
        &tools,
        dir,
        "admin.conf",
        &capi_admin_kubeconfig("demo", &server, r.ca.cert_pem(), &l.admin).to_yaml()?,
    );
    let super_admin = Kubectl::new(
        &tools,
        dir,
        "super-admin.conf",
        &super_admin_kubeconfig("demo", &server, r.ca.cert_pem(), &l.super_admin).to_yaml()?,
    );
    wait_ready(&admin, &mut apiserver).await?;

    // Before the cluster-admins binding exists the admin identity has no rights (kubeadm's
    // split); afterwards it lists namespaces.
    let denied = admin.run(&["get", "namespaces"]);
    assert!(
        !denied.status.success(),
        "admin must need the kubeadm:cluster-admins binding"
    );
    assert!(text(&denied).contains("forbidden"), "{}", text(&denied));

    let artifacts = TenantArtifacts::build(&tenant, r.ca.cert_pem(), Addons::default())?;
    let manifest = write(dir, "artifacts.yaml", &artifacts.to_yaml()?);
    super_admin.ok(&["apply", "-f", &manifest.display().to_string()]);
    let namespaces = admin.ok(&["get", "namespaces", "-o", "name"]);
    assert!(namespaces.contains("namespace/kube-system"), "{namespaces}");
    assert!(namespaces.contains("namespace/kube-public"), "{namespaces}");
    let dns_ip = super_admin.ok(&[
        "get",
        "svc",
        "-n",
        "kube-system",
        "kube-dns",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    assert_eq!(dns_ip, "10.96.0.10");

    bootstrap_token_may_join(&super_admin);

    kubeadm_join_discovery(
        &tools,
        dir,
        &super_admin,
        &artifacts.cluster_info,
        port,
        &r.ca.ca_hash()?,
    )?;

    drop(apiserver);
    drop(etcd);
    Ok(())
}
