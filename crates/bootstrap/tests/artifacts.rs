//! Tenant-side kubeadm objects: snapshots for 1.36 and 1.23 (fixed fixture CA) and the
//! acceptance cases B02, B03, B05, B06, B07, B18.

// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;
use kamaji_bootstrap::kubeadm::{
    AddonImage, Addons, CgroupDriver, KubeletSpec, Tenant, TenantArtifacts, TenantSpec,
    cluster_info, config, rbac,
};
use kamaji_bootstrap::network::NetworkSpec;
use kamaji_bootstrap::pki::CertificateAuthority;
use kamaji_bootstrap::token::{BootstrapToken, jws_kubeconfig};
use serde_yaml::Value;

const CA_CRT: &str = include_str!("fixtures/ca.crt");
const CA_KEY: &str = include_str!("fixtures/ca.key");

fn f0(version: &str) -> TenantSpec {
    TenantSpec {
        cluster_name: "demo".into(),
        version: version.into(),
        endpoint_host: "10.0.0.10".into(),
        endpoint_port: 6443,
        network: NetworkSpec {
            service_cidrs: vec!["10.96.0.0/12".into()],
            pod_cidrs: vec!["10.244.0.0/16".into()],
            dns_domain: "cluster.local".into(),
            dns_service_ips: vec![],
        },
        image_registry: String::new(),
        cert_sans: vec!["demo.example.com".into()],
        etcd_endpoints: vec!["https://etcd.kamaji-system.svc:2379".into()],
        kubelet: KubeletSpec::default(),
        coredns: AddonImage::default(),
        kube_proxy: AddonImage::default(),
        kube_proxy_patches: json_patch::Patch::default(),
    }
}

fn artifacts(spec: &TenantSpec) -> (Tenant, TenantArtifacts) {
    let ca = CertificateAuthority::from_pem(CA_CRT, CA_KEY).expect("fixture CA is valid");
    let tenant = spec.validate().unwrap();
    let a = TenantArtifacts::build(&tenant, ca.cert_pem(), Addons::default()).unwrap();
    (tenant, a)
}

#[test]
fn snapshot_v1_36() {
    let (_, a) = artifacts(&f0("v1.36.3"));
    insta::assert_snapshot!("artifacts_v1_36", a.to_yaml().unwrap());
}

#[test]
fn snapshot_v1_23() {
    let (_, a) = artifacts(&f0("v1.23.17"));
    insta::assert_snapshot!("artifacts_v1_23", a.to_yaml().unwrap());
}

/// The objects the provider applies (`to_values`, no YAML round trip: issue 16 found that
/// round trip a twentieth of the manager's CPU) are the snapshot's documents, one for one and
/// in its order, for both versions and with the addons left out.
#[test]
fn the_values_applied_are_the_yaml_documents_in_order() {
    for version in ["v1.36.3", "v1.23.17"] {
        let (tenant, full) = artifacts(&f0(version));
        let ca = CertificateAuthority::from_pem(CA_CRT, CA_KEY).unwrap();
        let bare = TenantArtifacts::build(
            &tenant,
            ca.cert_pem(),
            Addons {
                coredns: false,
                kube_proxy: false,
            },
        )
        .unwrap();
        let same = |a: &TenantArtifacts| {
            let docs: Vec<serde_json::Value> =
                serde_yaml::Deserializer::from_str(&a.to_yaml().unwrap())
                    .map(|d| serde::Deserialize::deserialize(d).unwrap())
                    .collect();
            let values = a.to_values().unwrap();
            assert!(values.len() > 5, "{version}: {} objects", values.len());
            assert_eq!(values, docs, "{version}");
        };
        same(&full);
        same(&bare);
    }
}

/// The image of the first container of `template`.
fn first_image(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> &str {
    template.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref()
        .unwrap()
}

fn yaml(s: &str) -> Value {
    serde_yaml::from_str(s).unwrap()
}

#[test]
fn b02_cluster_info_has_one_cluster_with_embedded_ca_and_no_users() {
    let (_, a) = artifacts(&f0("v1.36.3"));
    let cm = &a.cluster_info;
    assert_eq!(cm.metadata.name.as_deref(), Some("cluster-info"));
    assert_eq!(cm.metadata.namespace.as_deref(), Some("kube-public"));
    let data = cm.data.as_ref().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["kubeconfig"]);
    let kc = yaml(&data["kubeconfig"]);
    let clusters = kc["clusters"].as_sequence().unwrap();
    assert_eq!(clusters.len(), 1);
    assert_eq!(clusters[0]["name"], "");
    assert_eq!(clusters[0]["cluster"]["server"], "https://10.0.0.10:6443");
    assert!(
        clusters[0]["cluster"]
            .get("certificate-authority")
            .is_none()
    );
    let ca = base64::engine::general_purpose::STANDARD
        .decode(
            clusters[0]["cluster"]["certificate-authority-data"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(ca, CA_CRT.as_bytes());
    assert!(kc["users"].is_null() && kc["contexts"].is_null());
    let role = a
        .rbac
        .roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("kubeadm:bootstrap-signer-clusterinfo"))
        .unwrap();
    assert_eq!(role.metadata.namespace.as_deref(), Some("kube-public"));
    let get_rule = &role.rules.as_ref().unwrap()[0];
    assert_eq!(get_rule.verbs, ["get"]);
    assert_eq!(
        get_rule.resource_names.as_deref().unwrap(),
        ["cluster-info"]
    );
    let rb = a
        .rbac
        .role_bindings
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some("kubeadm:bootstrap-signer-clusterinfo"))
        .unwrap();
    let s = &rb.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (s.kind.as_str(), s.name.as_str()),
        ("User", "system:anonymous")
    );
}

#[test]
fn b03_signing_covers_the_current_kubeconfig_and_drops_stale_keys() {
    let (_, a) = artifacts(&f0("v1.36.3"));
    let mut cm = a.cluster_info.clone();
    let t1 = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
    let t2 = BootstrapToken::generate().unwrap();
    cluster_info::sign(&mut cm, &[t1.clone(), t2.clone()]).unwrap();
    let data = cm.data.as_ref().unwrap();
    let kc = &data["kubeconfig"];
    assert_eq!(
        data["jws-kubeconfig-abcdef"],
        jws_kubeconfig("abcdef", "0123456789abcdef", kc)
    );
    assert!(
        data["jws-kubeconfig-abcdef"].starts_with("eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..")
    );
    assert_eq!(
        data[&t2.jws_key()],
        jws_kubeconfig(t2.id(), t2.secret(), kc)
    );
    // New kubeconfig (endpoint change): re-signing replaces every signature; a dropped token
    // loses its entry.
    let mut moved = cluster_info::config_map("https://10.0.0.11:6443", CA_CRT).unwrap();
    moved.data.as_mut().unwrap().extend(
        data.iter()
            .filter(|(k, _)| k.starts_with("jws-"))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    cluster_info::sign(&mut moved, &[t1]).unwrap();
    let md = moved.data.as_ref().unwrap();
    assert_eq!(
        md["jws-kubeconfig-abcdef"],
        jws_kubeconfig("abcdef", "0123456789abcdef", &md["kubeconfig"])
    );
    assert_ne!(md["jws-kubeconfig-abcdef"], data["jws-kubeconfig-abcdef"]);
    assert!(!md.contains_key(&t2.jws_key()));
}

#[test]
fn b05_kubeadm_config_version_and_networking() {
    for (v, api) in [
        ("v1.23.17", "kubeadm.k8s.io/v1beta3"),
        ("v1.30.2", "kubeadm.k8s.io/v1beta3"),
        ("v1.31.0", "kubeadm.k8s.io/v1beta4"),
        ("v1.33.1", "kubeadm.k8s.io/v1beta4"),
        ("v1.36.3", "kubeadm.k8s.io/v1beta4"),
    ] {
        let (_, a) = artifacts(&f0(v));
        let cm = &a.kubeadm_config;
        assert_eq!(cm.metadata.name.as_deref(), Some("kubeadm-config"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("kube-system"));
        let cc = yaml(&cm.data.as_ref().unwrap()["ClusterConfiguration"]);
        assert_eq!(cc["apiVersion"], api, "{v}");
        assert_eq!(cc["kind"], "ClusterConfiguration");
        assert_eq!(cc["kubernetesVersion"], v);
        assert_eq!(cc["clusterName"], "demo");
        assert_eq!(cc["controlPlaneEndpoint"], "10.0.0.10:6443");
        assert_eq!(cc["networking"]["serviceSubnet"], "10.96.0.0/12");
        assert_eq!(cc["networking"]["podSubnet"], "10.244.0.0/16");
        assert_eq!(cc["networking"]["dnsDomain"], "cluster.local");
        assert_eq!(
            cc.get("proxy").is_some(),
            api.ends_with("v1beta4"),
            "proxy only in v1beta4"
        );
    }
}

#[test]
fn b06_kubelet_config_name_and_body() {
    for (v, name) in [
        ("v1.23.17", "kubelet-config-1.23"),
        ("v1.30.2", "kubelet-config"),
    ] {
        let (_, a) = artifacts(&f0(v));
        let cm = &a.kubelet_config;
        assert_eq!(cm.metadata.name.as_deref(), Some(name));
        let k = yaml(&cm.data.as_ref().unwrap()["kubelet"]);
        assert_eq!(k["apiVersion"], "kubelet.config.k8s.io/v1beta1");
        assert_eq!(k["kind"], "KubeletConfiguration");
        assert_eq!(k["clusterDNS"][0], "10.96.0.10");
        assert_eq!(k["clusterDomain"], "cluster.local");
        assert_eq!(
            k["authentication"]["x509"]["clientCAFile"],
            "/etc/kubernetes/pki/ca.crt"
        );
        assert_eq!(k["authentication"]["webhook"]["enabled"], true);
        assert_eq!(k["rotateCertificates"], true);
        assert_eq!(k["cgroupDriver"], "systemd");
        // B06.4 / B07.4: the Role names exactly that ConfigMap
        let role = a
            .rbac
            .roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(&format!("kubeadm:{name}")))
            .unwrap();
        assert_eq!(
            role.rules.as_ref().unwrap()[0]
                .resource_names
                .as_deref()
                .unwrap(),
            [name]
        );
    }
}

/// The `KubeProxyConfiguration` published in the tenant's `kube-system/kube-proxy` `ConfigMap`.
fn kube_proxy_configuration(a: &TenantArtifacts) -> Value {
    let data = a
        .kube_proxy
        .as_ref()
        .unwrap()
        .config_map
        .data
        .as_ref()
        .unwrap();
    serde_yaml::from_str(&data["config.conf"]).unwrap()
}

#[test]
fn kube_proxy_json_patches_are_applied_to_the_published_configuration_and_checked() {
    let mut spec = f0("v1.36.3");
    spec.kube_proxy_patches = serde_json::from_str(
        r#"[{"op":"replace","path":"/mode","value":"nftables"},
            {"op":"add","path":"/conntrack","value":{"maxPerCore":0}}]"#,
    )
    .unwrap();
    let (tenant, a) = artifacts(&spec);
    let config = kube_proxy_configuration(&a);
    assert_eq!(config["mode"], Value::from("nftables"));
    assert_eq!(config["conntrack"]["maxPerCore"], Value::from(0));
    assert_eq!(config["clusterCIDR"], Value::from("10.244.0.0/16"));
    assert_eq!(tenant.kube_proxy_patches().0.len(), 2);
    // Without patches: kubeadm's configuration, platform-default mode.
    let (_, plain) = artifacts(&f0("v1.36.3"));
    let plain = kube_proxy_configuration(&plain);
    assert_eq!(plain["mode"], Value::from(""));
    assert!(plain.get("conntrack").is_none());
    for bad in [
        r#"[{"op":"remove","path":"/doesNotExist"}]"#,
        r#"[{"op":"replace","path":"/kind","value":"KubeletConfiguration"}]"#,
    ] {
        spec.kube_proxy_patches = serde_json::from_str(bad).unwrap();
        assert_eq!(
            spec.validate().unwrap_err().field,
            "addons.kubeProxy.configurationJSONPatches",
            "{bad}"
        );
    }
}

/// The kube-proxy `DaemonSet`'s pod template carries a hash of its `ConfigMap`: a new mode
/// (the reconciler's `replace /mode`) or patch changes it, so the pods roll onto the new
/// configuration; the same configuration, or a change elsewhere (`CoreDNS`, kubelet), keeps it.
#[test]
fn the_kube_proxy_pod_template_hashes_its_configuration() {
    use kamaji_bootstrap::kubeadm::addons::KUBE_PROXY_CONFIG_HASH_ANNOTATION;
    let hash = |spec: &TenantSpec| -> String {
        let (_, a) = artifacts(spec);
        a.kube_proxy
            .unwrap()
            .daemon_set
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()[KUBE_PROXY_CONFIG_HASH_ANNOTATION]
            .clone()
    };
    let with_mode = |mode: &str| {
        let mut spec = f0("v1.36.3");
        spec.kube_proxy_patches = serde_json::from_value(serde_json::json!(
            [{"op": "replace", "path": "/mode", "value": mode}]
        ))
        .unwrap();
        spec
    };
    let plain = hash(&f0("v1.36.3"));
    assert!(plain.starts_with("sha256:"), "{plain}");
    assert_eq!(hash(&f0("v1.36.3")), plain, "the same configuration");
    let ipvs = hash(&with_mode("ipvs"));
    assert_ne!(ipvs, plain);
    assert_ne!(hash(&with_mode("nftables")), ipvs);
    assert_eq!(hash(&with_mode("ipvs")), ipvs);
    let mut elsewhere = with_mode("ipvs");
    elsewhere.coredns.tag = Some("v9.9.9".into());
    elsewhere.kubelet.cgroup_driver = Some(CgroupDriver::Cgroupfs);
    assert_eq!(
        hash(&elsewhere),
        ipvs,
        "a change outside kube-proxy's configuration"
    );
}

#[test]
fn kubelet_json_patches_are_applied_and_checked() {
    let mut spec = f0("v1.36.3");
    spec.kubelet = KubeletSpec {
        cgroup_driver: Some(CgroupDriver::Cgroupfs),
        configuration_json_patches: serde_json::from_str(
            r#"[{"op":"add","path":"/maxPods","value":250},
                {"op":"replace","path":"/healthzPort","value":10250}]"#,
        )
        .unwrap(),
        ..KubeletSpec::default()
    };
    let (tenant, _) = artifacts(&spec);
    let k = config::kubelet_configuration(&tenant).unwrap();
    assert_eq!(k["maxPods"], 250);
    assert_eq!(k["healthzPort"], 10250);
    assert_eq!(k["cgroupDriver"], "cgroupfs");
    spec.kubelet.configuration_json_patches =
        serde_json::from_str(r#"[{"op":"remove","path":"/doesNotExist"}]"#).unwrap();
    assert_eq!(
        spec.validate().unwrap_err().field,
        "kubelet.configurationJSONPatches"
    );
    spec.kubelet.configuration_json_patches =
        serde_json::from_str(r#"[{"op":"remove","path":"/kind"}]"#).unwrap();
    assert_eq!(
        spec.validate().unwrap_err().field,
        "kubelet.configurationJSONPatches"
    );
    // Another cgroup driver is not representable: kamaji-api's `CgroupDriver` (the CRD
    // enum) has only systemd and cgroupfs.
    spec.kubelet = KubeletSpec::default();
    assert_eq!(
        spec.validate().unwrap().kubelet_preferred_address_types(),
        "InternalIP,ExternalIP,Hostname"
    );
    spec.kubelet.preferred_address_types = vec!["Hostname".into(), "InternalDNS".into()];
    assert_eq!(
        spec.validate().unwrap().kubelet_preferred_address_types(),
        "Hostname,InternalDNS"
    );
    spec.kubelet.preferred_address_types = vec!["Hostname".into(), "Hostname".into()];
    assert_eq!(
        spec.validate().unwrap_err().field,
        "kubelet.preferredAddressTypes[1]"
    );
    spec.kubelet.preferred_address_types = vec!["Public".into()];
    assert_eq!(
        spec.validate().unwrap_err().field,
        "kubelet.preferredAddressTypes[0]"
    );
}

fn crb<'a>(
    a: &'a TenantArtifacts,
    name: &str,
) -> &'a k8s_openapi::api::rbac::v1::ClusterRoleBinding {
    a.rbac
        .cluster_role_bindings
        .iter()
        .find(|b| b.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("missing ClusterRoleBinding {name}"))
}

#[test]
fn b07_join_rbac_is_complete() {
    let (_, a) = artifacts(&f0("v1.30.2"));
    let g = "system:bootstrappers:kubeadm:default-node-token";
    for (name, role, subject) in [
        ("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", g),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            g,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
        ("kubeadm:get-nodes", "kubeadm:get-nodes", g),
        (
            "kubeadm:cluster-admins",
            "cluster-admin",
            "kubeadm:cluster-admins",
        ),
    ] {
        let b = crb(&a, name);
        assert_eq!(b.role_ref.name, role);
        let s = &b.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (s.kind.as_str(), s.name.as_str()),
            ("Group", subject),
            "{name}"
        );
    }
    let get_nodes = &a.rbac.cluster_roles[0];
    assert_eq!(
        get_nodes.metadata.name.as_deref(),
        Some("kubeadm:get-nodes")
    );
    let rule = &get_nodes.rules.as_ref().unwrap()[0];
    assert_eq!(
        (rule.verbs.as_slice(), rule.resources.as_deref().unwrap()),
        (&["get".to_owned()][..], &["nodes".to_owned()][..])
    );
    for name in ["kubeadm:nodes-kubeadm-config", "kubeadm:kubelet-config"] {
        let rb = a
            .rbac
            .role_bindings
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap();
        let subjects: Vec<&str> = rb
            .subjects
            .as_ref()
            .unwrap()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert!(
            subjects.contains(&g) && subjects.contains(&"system:nodes"),
            "{name}"
        );
    }
    let kp = a.kube_proxy.as_ref().unwrap();
    assert_eq!(
        kp.role.rules.as_ref().unwrap()[0]
            .resource_names
            .as_deref()
            .unwrap(),
        ["kube-proxy"]
    );
    assert_eq!(kp.role_binding.subjects.as_ref().unwrap()[0].name, g);
    assert!(
        !a.rbac
            .cluster_role_bindings
            .iter()
            .any(|b| b.metadata.name.as_deref() == Some("kubeadm:node-certificate-approve"))
    );
    assert_eq!(
        rbac::join_rbac(&kamaji_bootstrap::version::KubernetesVersion::new(
            1, 23, 17
        ))
        .roles[1]
            .metadata
            .name
            .as_deref(),
        Some("kubeadm:kubelet-config-1.23")
    );
}

#[test]
fn b18_dns_ip_follows_the_service_range() {
    let mut spec = f0("v1.36.3");
    spec.network.service_cidrs = vec!["10.100.0.0/16".into()];
    spec.network.pod_cidrs = vec!["10.200.0.0/16".into()];
    let (_, a) = artifacts(&spec);
    let k = yaml(&a.kubelet_config.data.as_ref().unwrap()["kubelet"]);
    assert_eq!(k["clusterDNS"][0], "10.100.0.10");
    let svc = &a.coredns.as_ref().unwrap().service;
    assert_eq!(
        svc.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("10.100.0.10")
    );
    let cc = yaml(&a.kubeadm_config.data.as_ref().unwrap()["ClusterConfiguration"]);
    assert_eq!(cc["networking"]["serviceSubnet"], "10.100.0.0/16");
    assert_eq!(cc["networking"]["podSubnet"], "10.200.0.0/16");
    let kp = yaml(
        &a.kube_proxy
            .as_ref()
            .unwrap()
            .config_map
            .data
            .as_ref()
            .unwrap()["config.conf"],
    );
    assert_eq!(kp["clusterCIDR"], "10.200.0.0/16");

    spec.network.dns_service_ips = vec!["10.96.0.10".into()];
    let e = spec.validate().unwrap_err();
    assert_eq!(e.field, "addons.coreDNS.dnsServiceIPs[0]");
    spec.network.dns_service_ips = vec![];
    spec.network.pod_cidrs = vec!["10.100.0.0/16".into()];
    assert_eq!(
        spec.validate().unwrap_err().field,
        "clusterNetwork.pods.cidrBlocks[0]"
    );
}

#[test]
fn addon_images_follow_registry_and_minor() {
    let (t, _) = artifacts(&f0("v1.36.3"));
    assert_eq!(t.coredns_image(), "registry.k8s.io/coredns/coredns:v1.14.2");
    assert_eq!(t.kube_proxy_image(), "registry.k8s.io/kube-proxy:v1.36.3");
    let mut spec = f0("v1.23.17");
    spec.image_registry = "mirror.example.com/k8s/".into();
    let (t, a) = artifacts(&spec);
    assert_eq!(t.coredns_image(), "mirror.example.com/k8s/coredns:v1.8.6");
    assert_eq!(
        t.kube_proxy_image(),
        "mirror.example.com/k8s/kube-proxy:v1.23.17"
    );
    let ds = &a.kube_proxy.as_ref().unwrap().daemon_set;
    assert_eq!(
        first_image(&ds.spec.as_ref().unwrap().template),
        "mirror.example.com/k8s/kube-proxy:v1.23.17"
    );
    spec.coredns = AddonImage {
        repository: Some("my/coredns".into()),
        tag: Some("1.2.3".into()),
    };
    assert_eq!(spec.validate().unwrap().coredns_image(), "my/coredns:1.2.3");
    spec.coredns.tag = Some("bad tag".into());
    assert_eq!(
        spec.validate().unwrap_err().field,
        "addons.coreDNS.imageTag"
    );
}

type Mutation = Box<dyn Fn(&mut TenantSpec)>;

#[test]
fn spec_validation_names_fields() {
    let cases: Vec<(Mutation, &str)> = vec![
        (Box::new(|s| s.cluster_name = "Demo!".into()), "clusterName"),
        (Box::new(|s| s.version = "latest".into()), "version"),
        (
            Box::new(|s| s.endpoint_host = "a b".into()),
            "controlPlaneEndpoint.host",
        ),
        (
            Box::new(|s| s.endpoint_port = 0),
            "controlPlaneEndpoint.port",
        ),
        (
            Box::new(|s| s.image_registry = "bad registry".into()),
            "registry",
        ),
    ];
    for (mutate, field) in cases {
        let mut s = f0("v1.36.3");
        mutate(&mut s);
        assert_eq!(s.validate().unwrap_err().field, field);
    }
}

#[test]
fn ipv6_endpoint_is_bracketed() {
    let mut spec = f0("v1.36.3");
    spec.endpoint_host = "fd00::10".into();
    let (t, a) = artifacts(&spec);
    assert_eq!(t.endpoint(), "[fd00::10]:6443");
    assert_eq!(t.server_url(), "https://[fd00::10]:6443");
    let kc = yaml(&a.cluster_info.data.as_ref().unwrap()["kubeconfig"]);
    assert_eq!(
        kc["clusters"][0]["cluster"]["server"],
        "https://[fd00::10]:6443"
    );
}

/// The addon templates are parsed once per process and each build changes its own copy: a
/// tenant built between two builds of another (another version, image and DNS address)
/// leaves the other's objects as they were, and gets its own.
#[test]
fn a_build_changes_its_own_copy_of_the_addon_templates() {
    let first = artifacts(&f0("v1.36.3")).1.to_yaml().unwrap();
    let mut other = f0("v1.23.17");
    other.network.service_cidrs = vec!["10.128.0.0/16".into()];
    let (_, between) = artifacts(&other);
    let coredns = between.coredns.as_ref().unwrap();
    assert_eq!(
        coredns.service.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("10.128.0.10")
    );
    let image = |a: &TenantArtifacts| {
        let deployment = &a.coredns.as_ref().unwrap().deployment;
        first_image(&deployment.spec.as_ref().unwrap().template).to_owned()
    };
    let again = artifacts(&f0("v1.36.3")).1;
    assert_ne!(image(&between), image(&again));
    assert_eq!(again.to_yaml().unwrap(), first);
}
