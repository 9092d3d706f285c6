//! Time to build one tenant's full PKI (cluster CA, front-proxy CA, service-account key and the
//! eight leaves including the datastore client) with ECDSA P-256 and with RSA-2048.

// A benchmark harness has nowhere to report errors to: a failure must abort the run.
#![allow(clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use kamaji_bootstrap::network::NetworkSpec;
use kamaji_bootstrap::pki::{
    ApiServerNames, CertificateAuthority, DatastoreCa, KeyAlgorithm, LeafRequest, LeafSpec,
    TenantPki,
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
    group.finish();
}

criterion_group!(benches, full_pki);
criterion_main!(benches);
