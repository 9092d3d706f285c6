//! Time to build one tenant's full PKI (cluster CA, front-proxy CA, service-account key and the
//! eight leaves including the datastore client) with ECDSA P-256 and with RSA-2048; and with
//! ECDSA P-256, that plus what the next reconcile pass asks of each new leaf (its key matches
//! its certificate, its CA signed it: answered from what issuing it remembered) and loading the
//! service-account key again.

// A benchmark harness has nowhere to report errors to: a failure must abort the run.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use kamaji_bootstrap::network::NetworkSpec;
use kamaji_bootstrap::pki::inspect::{is_signed_by, key_matches_certificate};
use kamaji_bootstrap::pki::{
    ApiServerNames, CertificateAuthority, DatastoreCa, KeyAlgorithm, LeafRequest, LeafSpec,
    ServiceAccountKeyPair, TenantPki,
};

fn full_pki(c: &mut Criterion) {
    let now = SystemTime::now();
    let network = NetworkSpec {
        service_cidrs: vec!["10.96.0.0/12".into()],
        pod_cidrs: vec!["10.244.0.0/16".into()],
        ..NetworkSpec::default()
    }
    .validate()
    .expect("valid network");
    let names = ApiServerNames {
        endpoint_host: "10.0.0.10".into(),
        cert_sans: vec!["demo.example.com".into()],
        ..ApiServerNames::default()
    };
    let api = LeafSpec::api_server(&names, &network).expect("valid names");
    let ds = CertificateAuthority::generate("etcd-ca", KeyAlgorithm::EcdsaP256, now)
        .expect("datastore CA");
    let ds = DatastoreCa::from_pem(ds.cert_pem(), ds.key_pem()).expect("datastore CA");
    let mut group = c.benchmark_group("pki");
    for (name, alg) in [
        ("full_tenant_ecdsa_p256", KeyAlgorithm::EcdsaP256),
        ("full_tenant_rsa_2048", KeyAlgorithm::Rsa2048),
    ] {
        if alg != KeyAlgorithm::EcdsaP256 {
            group.sample_size(10);
            group.measurement_time(Duration::from_secs(10));
        }
        let req = LeafRequest {
            algorithm: alg,
            now,
            api_server: &api,
            datastore: Some((&ds, "kube-apiserver-etcd-client")),
        };
        group.bench_function(name, |b| {
            b.iter(|| black_box(TenantPki::generate(black_box(&req)).expect("pki")));
        });
    }
    let req = LeafRequest {
        algorithm: KeyAlgorithm::EcdsaP256,
        now,
        api_server: &api,
        datastore: Some((&ds, "kube-apiserver-etcd-client")),
    };
    group.sample_size(100);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("full_tenant_ecdsa_p256_then_checked", |b| {
        b.iter(|| {
            let pki = TenantPki::generate(black_box(&req)).expect("pki");
            let l = &pki.leaves;
            let (ca, front) = (pki.roots.ca.cert_pem(), pki.roots.front_proxy_ca.cert_pem());
            for (leaf, by) in [
                (&l.api_server, ca),
                (&l.api_server_kubelet_client, ca),
                (&l.front_proxy_client, front),
                (&l.controller_manager, ca),
                (&l.scheduler, ca),
                (&l.admin, ca),
                (&l.super_admin, ca),
            ] {
                assert!(key_matches_certificate(leaf.cert_pem(), leaf.key_pem()).expect("key"));
                assert!(is_signed_by(leaf.cert_pem(), by).expect("signature"));
            }
            black_box(
                ServiceAccountKeyPair::from_private_pem(pki.roots.service_account.private_pem())
                    .expect("service-account key"),
            )
        });
    });
    group.finish();
}

criterion_group!(benches, full_pki);
criterion_main!(benches);
