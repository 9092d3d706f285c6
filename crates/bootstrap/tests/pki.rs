//! PKI properties: kubeadm's subjects, usages and SANs per role, chains, CA hash vs openssl,
//! the keep / reissue decision.

// Test helpers outside #[test] functions unwrap too: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use kamaji_bootstrap::network::{NetworkSpec, TenantNetwork};
use kamaji_bootstrap::pki::inspect::{
    CertificateInfo, LeafDecision, RENEWAL_WINDOW, ReissueReason, decide_leaf, is_signed_by,
    key_matches_certificate,
};
use kamaji_bootstrap::pki::{
    ApiServerNames, CA_VALIDITY, CertAndKey, CertificateAuthority, DatastoreCa, KeyAlgorithm,
    LEAF_VALIDITY, LeafCertificate, LeafRequest, LeafSpec, ServiceNames, TenantPki, ca_cert_hash,
};
use kamaji_bootstrap::secrets::{self, SecretTarget};
use proptest::prelude::*;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_hours(500_000)
}

fn f0_network() -> TenantNetwork {
    NetworkSpec {
        service_cidrs: vec!["10.96.0.0/12".into()],
        pod_cidrs: vec!["10.244.0.0/16".into()],
        dns_domain: "cluster.local".into(),
        dns_service_ips: vec![],
    }
    .validate()
    .unwrap()
}

fn f0_names() -> ApiServerNames {
    ApiServerNames {
        endpoint_host: "10.0.0.10".into(),
        service: Some(ServiceNames {
            name: "demo".into(),
            namespace: "tenant-a".into(),
            cluster_domain: "cluster.local".into(),
            cluster_ip: Some("10.128.0.7".parse().unwrap()),
        }),
        cert_sans: vec!["demo.example.com".into(), "192.0.2.1".into()],
        external_hosts: vec!["api.demo.example.com".into()],
    }
}

struct Fixture {
    pki: TenantPki,
    datastore_ca: CertificateAuthority,
    api_spec: LeafSpec,
}

fn build(alg: KeyAlgorithm) -> Fixture {
    let network = f0_network();
    let api_spec = LeafSpec::api_server(&f0_names(), &network).unwrap();
    let datastore_ca = CertificateAuthority::generate("etcd-ca", alg, now()).unwrap();
    let ds = DatastoreCa::from_pem(datastore_ca.cert_pem(), datastore_ca.key_pem()).unwrap();
    let pki = TenantPki::generate(&LeafRequest {
        algorithm: alg,
        now: now(),
        api_server: &api_spec,
        datastore: Some((&ds, "kube-apiserver-etcd-client")),
    })
    .unwrap();
    Fixture {
        pki,
        datastore_ca,
        api_spec,
    }
}

fn p256() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| build(KeyAlgorithm::EcdsaP256))
}

fn rsa() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| build(KeyAlgorithm::Rsa2048))
}

/// (leaf, issuing CA PEM, CN, O, serverAuth, clientAuth)
type Expectation<'a> = (
    &'a LeafCertificate,
    &'a str,
    &'a str,
    Vec<&'a str>,
    bool,
    bool,
);

fn leaves(f: &Fixture) -> Vec<Expectation<'_>> {
    let l = &f.pki.leaves;
    let ca = f.pki.roots.ca.cert_pem();
    let fp = f.pki.roots.front_proxy_ca.cert_pem();
    vec![
        (&l.api_server, ca, "kube-apiserver", vec![], true, false),
        (
            &l.api_server_kubelet_client,
            ca,
            "kube-apiserver-kubelet-client",
            vec![],
            false,
            true,
        ),
        (
            &l.front_proxy_client,
            fp,
            "front-proxy-client",
            vec![],
            false,
            true,
        ),
        (
            l.datastore_client.as_ref().unwrap(),
            f.datastore_ca.cert_pem(),
            "kube-apiserver-etcd-client",
            vec![],
            false,
            true,
        ),
        (
            &l.controller_manager,
            ca,
            "system:kube-controller-manager",
            vec![],
            false,
            true,
        ),
        (
            &l.scheduler,
            ca,
            "system:kube-scheduler",
            vec![],
            false,
            true,
        ),
        (
            &l.admin,
            ca,
            "kubernetes-admin",
            vec!["kubeadm:cluster-admins"],
            false,
            true,
        ),
        (
            &l.super_admin,
            ca,
            "kubernetes-super-admin",
            vec!["system:masters"],
            false,
            true,
        ),
    ]
}

fn check_leaves(f: &Fixture) {
    for (leaf, ca, cn, orgs, server, client) in leaves(f) {
        assert!(
            is_signed_by(leaf.cert_pem(), ca).unwrap(),
            "{cn} chains to its CA"
        );
        assert!(
            key_matches_certificate(leaf.cert_pem(), leaf.key_pem()).unwrap(),
            "{cn}"
        );
        let info = CertificateInfo::from_pem(leaf.cert_pem()).unwrap();
        assert_eq!(info.common_name.as_deref(), Some(cn));
        assert_eq!(info.organizations, orgs, "{cn}");
        assert_eq!(
            (info.server_auth, info.client_auth),
            (server, client),
            "{cn} EKU"
        );
        let ku = info.key_usage.unwrap();
        assert!(
            ku.digital_signature && ku.key_encipherment && !ku.key_cert_sign,
            "{cn} KU"
        );
        assert!(!info.is_ca, "{cn}");
        assert_eq!(
            info.not_before,
            now() - Duration::from_mins(5),
            "{cn} backdated 5 min"
        );
        assert_eq!(info.not_after, now() + LEAF_VALIDITY, "{cn} valid one year");
        if cn != "kube-apiserver" {
            assert!(
                info.dns_names.is_empty() && info.ip_addresses.is_empty(),
                "{cn} no SANs"
            );
        }
    }
    for ca in [&f.pki.roots.ca, &f.pki.roots.front_proxy_ca] {
        let info = CertificateInfo::from_pem(ca.cert_pem()).unwrap();
        assert!(info.is_ca);
        let ku = info.key_usage.unwrap();
        assert!(ku.key_cert_sign && ku.digital_signature && ku.key_encipherment);
        assert_eq!(info.not_after, now() + CA_VALIDITY);
        let cn = info.common_name.clone().unwrap();
        assert_eq!(
            info.dns_names,
            BTreeSet::from([cn]),
            "kubeadm puts the CN in the CA SANs"
        );
        assert!(
            is_signed_by(ca.cert_pem(), ca.cert_pem()).unwrap(),
            "self-signed"
        );
    }
    assert!(
        !is_signed_by(
            f.pki.leaves.admin.cert_pem(),
            f.pki.roots.front_proxy_ca.cert_pem()
        )
        .unwrap()
    );
}

#[test]
fn every_leaf_has_kubeadm_subject_usages_and_chain_p256() {
    check_leaves(p256());
}

#[test]
fn every_leaf_has_kubeadm_subject_usages_and_chain_rsa2048() {
    check_leaves(rsa());
    let info = CertificateInfo::from_pem(rsa().pki.roots.ca.cert_pem()).unwrap();
    // RSA SPKI (OID 1.2.840.113549.1.1.1) and a 2048-bit modulus: ~294 bytes of DER.
    assert!(info.spki_der.len() > 280, "{}", info.spki_der.len());
}

#[test]
fn b10_serving_cert_covers_every_name_clients_use() {
    let info = CertificateInfo::from_pem(p256().pki.leaves.api_server.cert_pem()).unwrap();
    for dns in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "demo",
        "demo.tenant-a",
        "demo.tenant-a.svc",
        "demo.tenant-a.svc.cluster.local",
        "demo.example.com",
        "api.demo.example.com",
        "localhost",
    ] {
        assert!(info.dns_names.contains(dns), "missing DNS SAN {dns}");
    }
    for ip in [
        "10.96.0.1",
        "10.0.0.10",
        "10.128.0.7",
        "192.0.2.1",
        "127.0.0.1",
    ] {
        assert!(
            info.ip_addresses.contains(&ip.parse::<IpAddr>().unwrap()),
            "missing IP {ip}"
        );
    }
    assert_eq!(info.dns_names.len(), 11);
    assert_eq!(info.ip_addresses.len(), 5);
}

#[test]
fn b10_variant_other_domain_and_range() {
    let network = NetworkSpec {
        service_cidrs: vec!["10.100.0.0/16".into()],
        dns_domain: "corp.internal".into(),
        ..NetworkSpec::default()
    }
    .validate()
    .unwrap();
    let names = ApiServerNames {
        endpoint_host: "10.0.0.10".into(),
        ..ApiServerNames::default()
    };
    let spec = LeafSpec::api_server(&names, &network).unwrap();
    assert!(
        spec.dns_names()
            .contains(&"kubernetes.default.svc.corp.internal".to_owned())
    );
    assert!(!spec.dns_names().iter().any(|d| d.contains("cluster.local")));
    assert!(spec.ip_addresses().contains(&"10.100.0.1".parse().unwrap()));
    // dedupe: endpoint equal to a cert SAN
    let names = ApiServerNames {
        endpoint_host: "api.example.com".into(),
        cert_sans: vec!["API.example.com".into(), "10.100.0.1".into()],
        ..ApiServerNames::default()
    };
    let spec = LeafSpec::api_server(&names, &network).unwrap();
    assert_eq!(
        spec.dns_names()
            .iter()
            .filter(|d| *d == "api.example.com")
            .count(),
        1
    );
    assert_eq!(spec.ip_addresses().len(), 2);
    for bad in ["host:6443", "bad_name", ""] {
        let names = ApiServerNames {
            cert_sans: vec![bad.into()],
            ..ApiServerNames::default()
        };
        let e = LeafSpec::api_server(&names, &network).unwrap_err();
        assert_eq!(e.field, "network.certSANs[0]", "{bad}");
    }
}

#[test]
fn ca_hash_matches_openssl() {
    for f in [p256(), rsa()] {
        let pem = f.pki.roots.ca.cert_pem();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, pem).unwrap();
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | sha256sum",
                path.display()
            ))
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hex = String::from_utf8(out.stdout).unwrap();
        let hex = hex.split_whitespace().next().unwrap();
        assert_eq!(ca_cert_hash(pem).unwrap(), format!("sha256:{hex}"));
        assert_eq!(f.pki.roots.ca.ca_hash().unwrap(), format!("sha256:{hex}"));
    }
}

#[test]
fn ca_loading_checks_the_pair() {
    let f = p256();
    let ca = &f.pki.roots.ca;
    assert_eq!(
        &CertificateAuthority::from_pem(ca.cert_pem(), ca.key_pem()).unwrap(),
        ca
    );
    let wrong_key = f.pki.roots.front_proxy_ca.key_pem();
    assert!(CertificateAuthority::from_pem(ca.cert_pem(), wrong_key).is_err());
    let leaf = &f.pki.leaves.admin;
    assert!(
        CertificateAuthority::from_pem(leaf.cert_pem(), leaf.key_pem()).is_err(),
        "not a CA"
    );
    assert!(CertificateAuthority::from_pem("garbage", "garbage").is_err());
}

#[test]
fn service_account_key_pair_round_trips() {
    let sa = &p256().pki.roots.service_account;
    assert!(sa.public_pem().starts_with("-----BEGIN PUBLIC KEY-----"));
    let again =
        kamaji_bootstrap::pki::ServiceAccountKeyPair::from_private_pem(sa.private_pem()).unwrap();
    assert_eq!(again.public_pem(), sa.public_pem());
    assert!(!format!("{sa:?}").contains(sa.private_pem()));
}

/// The key and signature verdicts are remembered per process (issue 16): asked again, and
/// asked about other inputs right after, each answer is the one computed for those inputs.
#[test]
fn remembered_verdicts_answer_for_their_own_inputs() {
    let f = p256();
    let admin = &f.pki.leaves.admin;
    let api = &f.pki.leaves.api_server;
    let (ca, proxy_ca) = (&f.pki.roots.ca, &f.pki.roots.front_proxy_ca);
    for _ in 0..2 {
        assert!(is_signed_by(admin.cert_pem(), ca.cert_pem()).unwrap());
        assert!(!is_signed_by(admin.cert_pem(), proxy_ca.cert_pem()).unwrap());
        assert!(key_matches_certificate(admin.cert_pem(), admin.key_pem()).unwrap());
        assert!(!key_matches_certificate(admin.cert_pem(), api.key_pem()).unwrap());
        assert!(key_matches_certificate(api.cert_pem(), api.key_pem()).unwrap());
        assert!(is_signed_by(admin.cert_pem(), "not a certificate").is_err());
    }
}

#[test]
fn decide_leaf_keeps_a_fresh_leaf_and_explains_each_reissue() {
    let f = p256();
    let ca = &f.pki.roots.ca;
    let api = &f.pki.leaves.api_server;
    let m = api.material();
    let d = |existing: Option<&CertAndKey>, spec: &LeafSpec, at: SystemTime| {
        decide_leaf(existing, spec, ca.cert_pem(), at, RENEWAL_WINDOW)
    };
    assert_eq!(d(Some(m), &f.api_spec, now()), LeafDecision::Keep);
    assert_eq!(
        d(None, &f.api_spec, now()),
        LeafDecision::Reissue(ReissueReason::Missing)
    );
    // SAN set changed (new certSAN)
    let mut names = f0_names();
    names.cert_sans.push("new.example.com".into());
    let changed = LeafSpec::api_server(&names, &f0_network()).unwrap();
    assert_eq!(
        d(Some(m), &changed, now()),
        LeafDecision::Reissue(ReissueReason::SansChanged)
    );
    // role / subject changed
    assert_eq!(
        d(
            Some(f.pki.leaves.admin.material()),
            &LeafSpec::super_admin(),
            now()
        ),
        LeafDecision::Reissue(ReissueReason::SubjectChanged)
    );
    // within the renewal window, and expired
    let late = now() + LEAF_VALIDITY - RENEWAL_WINDOW + Duration::from_secs(1);
    assert_eq!(
        d(Some(m), &f.api_spec, late),
        LeafDecision::Reissue(ReissueReason::ExpiresSoon)
    );
    let early = now() + LEAF_VALIDITY - RENEWAL_WINDOW - Duration::from_hours(1);
    assert_eq!(d(Some(m), &f.api_spec, early), LeafDecision::Keep);
    let expired = now() + LEAF_VALIDITY + Duration::from_secs(1);
    assert_eq!(
        d(Some(m), &f.api_spec, expired),
        LeafDecision::Reissue(ReissueReason::ExpiresSoon)
    );
    assert_eq!(
        d(Some(m), &f.api_spec, now() - Duration::from_hours(1)),
        LeafDecision::Reissue(ReissueReason::NotYetValid)
    );
    // issuer changed: a leaf from another CA
    let fp = f.pki.leaves.front_proxy_client.material();
    assert_eq!(
        d(Some(fp), &LeafSpec::front_proxy_client(), now()),
        LeafDecision::Reissue(ReissueReason::IssuerChanged)
    );
    // key mismatch, garbage
    let swapped = CertAndKey::new(m.cert_pem(), f.pki.leaves.admin.key_pem());
    assert_eq!(
        d(Some(&swapped), &f.api_spec, now()),
        LeafDecision::Reissue(ReissueReason::KeyMismatch)
    );
    let junk = CertAndKey::new("junk", "junk");
    assert_eq!(
        d(Some(&junk), &f.api_spec, now()),
        LeafDecision::Reissue(ReissueReason::Unparseable)
    );
    // the CA's own material offered as a leaf is a leaf to reissue, never a CA decision
    let as_leaf = decide_leaf(
        Some(ca.material()),
        &LeafSpec::admin(),
        ca.cert_pem(),
        now(),
        RENEWAL_WINDOW,
    );
    assert!(matches!(as_leaf, LeafDecision::Reissue(_)));
}

#[test]
fn b01_capi_secrets_have_type_label_and_keys() {
    let f = p256();
    let t = |name| SecretTarget {
        name,
        namespace: "tenant-a",
        cluster_name: "demo",
    };
    let ca = secrets::ca_secret(t("demo-ca"), &f.pki.roots.ca);
    let sa = secrets::service_account_secret(t("demo-sa"), &f.pki.roots.service_account);
    let proxy = secrets::ca_secret(t("demo-proxy"), &f.pki.roots.front_proxy_ca);
    let kc = kamaji_bootstrap::kubeconfig::capi_admin_kubeconfig(
        "demo",
        "https://10.0.0.10:6443",
        f.pki.roots.ca.cert_pem(),
        &f.pki.leaves.admin,
    )
    .to_yaml()
    .unwrap();
    let kcs = secrets::kubeconfig_secret(t("demo-kubeconfig"), &kc);
    for s in [&ca, &sa, &proxy, &kcs] {
        assert_eq!(s.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("tenant-a"));
        assert_eq!(
            s.metadata.labels.as_ref().unwrap()["cluster.x-k8s.io/cluster-name"],
            "demo"
        );
        // The shared DataStore CA key never lands in a tenant secret.
        for v in s.data.as_ref().unwrap().values() {
            let text = String::from_utf8_lossy(&v.0);
            assert!(!text.contains(f.datastore_ca.key_pem().trim()));
        }
    }
    let (crt, key) = secrets::tls_pair_of(&ca).unwrap();
    assert_eq!(
        (crt.as_str(), key.as_str()),
        (f.pki.roots.ca.cert_pem(), f.pki.roots.ca.key_pem())
    );
    assert_eq!(
        secrets::tls_pair_of(&sa).unwrap().0,
        f.pki.roots.service_account.public_pem()
    );
    let value = &kcs.data.as_ref().unwrap()["value"].0;
    let parsed: serde_yaml::Value = serde_yaml::from_slice(value).unwrap();
    assert_eq!(
        parsed["clusters"][0]["cluster"]["server"],
        "https://10.0.0.10:6443"
    );
    assert_eq!(parsed["users"][0]["name"], "demo-admin");
    assert_eq!(parsed["current-context"], "demo-admin@demo");
    let ca_data = base64::engine::general_purpose::STANDARD
        .decode(
            parsed["clusters"][0]["cluster"]["certificate-authority-data"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(
        ca_data,
        crt.as_bytes(),
        "B01: CA data equals tls.crt of demo-ca"
    );
}

#[test]
fn key_algorithm_names() {
    for a in [
        KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::Rsa2048,
        KeyAlgorithm::Rsa3072,
        KeyAlgorithm::Rsa4096,
    ] {
        assert_eq!(KeyAlgorithm::parse(a.as_kubeadm_str()).unwrap(), a);
    }
    assert_eq!(KeyAlgorithm::default(), KeyAlgorithm::EcdsaP256);
    assert_eq!(
        KeyAlgorithm::parse("DSA").unwrap_err().field,
        "encryptionAlgorithm"
    );
}

fn san_strategy() -> impl Strategy<Value = Vec<String>> {
    let dns = "[a-z][a-z0-9-]{0,10}[a-z0-9](\\.[a-z][a-z0-9]{0,8}){0,3}";
    let ip = (any::<[u8; 4]>()).prop_map(|b| IpAddr::from(b).to_string());
    let ip6 = (any::<[u16; 8]>()).prop_map(|b| IpAddr::from(b).to_string());
    prop::collection::vec(prop_oneof![dns.prop_map(|s| s), ip, ip6], 0..6)
}

fn role_strategy() -> impl Strategy<Value = LeafSpec> {
    prop_oneof![
        Just(LeafSpec::api_server_kubelet_client()),
        Just(LeafSpec::front_proxy_client()),
        Just(LeafSpec::controller_manager()),
        Just(LeafSpec::scheduler()),
        Just(LeafSpec::admin()),
        Just(LeafSpec::super_admin()),
        Just(LeafSpec::datastore_client("tenant-a-demo")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any serving certificate verifies against its CA, carries exactly the requested SANs
    /// (deduplicated) and is kept by the decision function right after issuance.
    #[test]
    fn leaf_is_signed_by_ca_with_exact_sans(sans in san_strategy(), host_octet in 1u8..250) {
        let f = p256();
        let names = ApiServerNames {
            endpoint_host: format!("10.0.0.{host_octet}"),
            cert_sans: sans,
            ..ApiServerNames::default()
        };
        let spec = LeafSpec::api_server(&names, &f0_network()).unwrap();
        let leaf = f.pki.roots.ca.issue(&spec, KeyAlgorithm::EcdsaP256, now()).unwrap();
        prop_assert!(is_signed_by(leaf.cert_pem(), f.pki.roots.ca.cert_pem()).unwrap());
        let info = CertificateInfo::from_pem(leaf.cert_pem()).unwrap();
        let want_dns: BTreeSet<String> = spec.dns_names().iter().cloned().collect();
        let want_ip: BTreeSet<IpAddr> = spec.ip_addresses().iter().copied().collect();
        prop_assert_eq!(want_dns.len(), spec.dns_names().len());
        prop_assert_eq!(want_ip.len(), spec.ip_addresses().len());
        prop_assert_eq!(info.dns_names, want_dns);
        prop_assert_eq!(info.ip_addresses, want_ip);
        prop_assert_eq!(
            decide_leaf(Some(leaf.material()), &spec, f.pki.roots.ca.cert_pem(), now(), RENEWAL_WINDOW),
            LeafDecision::Keep
        );
    }

    /// Whatever is offered as "existing" (leaves of any role, the CA itself, another CA's
    /// material, garbage), at any time and window, the decision is about the leaf only, and
    /// the CA is left exactly as it was.
    #[test]
    fn decide_leaf_never_replaces_a_ca(
        pick in 0usize..6,
        spec in role_strategy(),
        offset_days in -400i64..4000,
        window_days in 0u64..400,
    ) {
        let f = p256();
        let ca = &f.pki.roots.ca;
        let before = ca.clone();
        let garbage = CertAndKey::new("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "x");
        let options = [
            Some(f.pki.leaves.admin.material().clone()),
            Some(f.pki.leaves.front_proxy_client.material().clone()),
            Some(ca.material().clone()),
            Some(f.pki.roots.front_proxy_ca.material().clone()),
            Some(garbage),
            None,
        ];
        let at = if offset_days >= 0 {
            now() + Duration::from_secs(offset_days.unsigned_abs() * 86_400)
        } else {
            now() - Duration::from_secs(offset_days.unsigned_abs() * 86_400)
        };
        let decision = decide_leaf(
            options[pick].as_ref(),
            &spec,
            ca.cert_pem(),
            at,
            Duration::from_secs(window_days * 86_400),
        );
        prop_assert!(matches!(decision, LeafDecision::Keep | LeafDecision::Reissue(_)));
        if pick >= 2 {
            // a CA, another CA, garbage or nothing is never an acceptable leaf
            prop_assert!(matches!(decision, LeafDecision::Reissue(_)));
        }
        prop_assert_eq!(ca, &before);
        prop_assert!(CertificateAuthority::from_pem(ca.cert_pem(), ca.key_pem()).is_ok());
    }
}
