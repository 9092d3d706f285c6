//! Time to build one tenant's kubeadm artifacts (cluster-info, kubeadm-config, kubelet-config,
//! the join RBAC, kube-proxy and CoreDNS): what every reconcile pass of a control plane with
//! its tenant's objects in its plan computes.

// A benchmark harness has nowhere to report errors to: a failure must abort the run.
#![allow(clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kamaji_bootstrap::kubeadm::{AddonImage, Addons, KubeletSpec, TenantArtifacts, TenantSpec};
use kamaji_bootstrap::network::NetworkSpec;
use kamaji_bootstrap::pki::{CertificateAuthority, KeyAlgorithm};

fn tenant_artifacts(c: &mut Criterion) {
    let tenant = TenantSpec {
        cluster_name: "demo".into(),
        version: "v1.36.3".into(),
        endpoint_host: "10.0.0.10".into(),
        endpoint_port: 6443,
        network: NetworkSpec {
            service_cidrs: vec!["10.96.0.0/12".into()],
            pod_cidrs: vec!["10.244.0.0/16".into()],
            dns_domain: "cluster.local".into(),
            dns_service_ips: vec![],
        },
        image_registry: String::new(),
        cert_sans: vec![],
        etcd_endpoints: vec!["https://etcd.kamaji-system.svc:2379".into()],
        kubelet: KubeletSpec::default(),
        coredns: AddonImage::default(),
        kube_proxy: AddonImage::default(),
        kube_proxy_patches: json_patch::Patch::default(),
    }
    .validate()
    .expect("valid tenant");
    let ca = CertificateAuthority::generate(
        "kubernetes",
        KeyAlgorithm::EcdsaP256,
        std::time::SystemTime::now(),
    )
    .expect("cluster CA");
    c.bench_function("tenant_artifacts_v1_36", |b| {
        b.iter(|| {
            black_box(
                TenantArtifacts::build(&tenant, ca.cert_pem(), Addons::default())
                    .expect("artifacts"),
            )
        });
    });
}

criterion_group!(benches, tenant_artifacts);
criterion_main!(benches);
