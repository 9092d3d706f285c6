//! The cert-manager stand-in against a real API server: clusterctl's check resources, a CA
//! issuer chain, CA injection into webhooks and a conversion CRD, and no regeneration.
#![cfg(real_programs)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kamaji_testenv::wait::await_object;
use kamaji_testenv::{CertManagerStandIn, LocalCluster};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use x509_parser::extensions::GeneralName;

const WAIT: Duration = Duration::from_secs(30);

/// cmd/clusterctl/client/cluster/assets/cert-manager-test-resources.yaml of CAPI v1.14.2.
const CLUSTERCTL_TEST_RESOURCES: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: cert-manager-test
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: test-selfsigned
  namespace: cert-manager-test
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: selfsigned-cert
  namespace: cert-manager-test
spec:
  dnsNames:
  - example.com
  secretName: selfsigned-cert-tls
  issuerRef:
    name: test-selfsigned
";

const CHAIN: &str = "apiVersion: v1
kind: Namespace
metadata: {name: ns}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned, namespace: ns}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: ca, namespace: ns}
spec: {isCA: true, commonName: test-ca, secretName: ca-tls, issuerRef: {name: selfsigned, kind: Issuer}}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: ca, namespace: ns}
spec: {ca: {secretName: ca-tls}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: serving, namespace: ns}
spec: {dnsNames: [svc.ns.svc], secretName: serving-tls, issuerRef: {name: ca}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: widgets
  annotations: {cert-manager.io/inject-ca-from: ns/serving}
webhooks:
- name: a.widgets.example.com
  clientConfig: {service: {namespace: ns, name: svc, path: /validate-a}}
  rules: [{apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [widgets]}]
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: [v1]
- name: b.widgets.example.com
  clientConfig: {service: {namespace: ns, name: svc, path: /validate-b}}
  rules: [{apiGroups: [example.com], apiVersions: [v1], operations: [CREATE], resources: [widgets]}]
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  annotations: {cert-manager.io/inject-ca-from: ns/serving}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  conversion:
    strategy: Webhook
    webhook:
      clientConfig: {service: {namespace: ns, name: svc, path: /convert}}
      conversionReviewVersions: [v1]
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
";

async fn start() -> (LocalCluster, CertManagerStandIn) {
    let cluster = LocalCluster::builder().capi(false).start().await.unwrap();
    let stand_in = CertManagerStandIn::start(cluster.client()).await.unwrap();
    (cluster, stand_in)
}

/// A Secret's value as text (PEM here), empty when missing.
fn data(secret: &Secret, key: &str) -> String {
    let value = secret.data.as_ref().and_then(|d| d.get(key));
    String::from_utf8_lossy(value.map(|b| b.0.as_slice()).unwrap_or_default()).into_owned()
}

/// Waits until Secret `ns/name` holds a `tls.crt` for which `cond` holds.
async fn issued(client: &Client, ns: &str, name: &str, cond: fn(&[u8]) -> bool) -> Secret {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    await_object(&api, name, WAIT, move |s| {
        cond(data(s, "tls.crt").as_bytes())
    })
    .await
    .unwrap()
    .unwrap_or_else(|| panic!("Secret {ns}/{name} not issued within 30 s"))
}

fn dns_names(pem: &[u8]) -> Vec<String> {
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(pem) else {
        return Vec::new();
    };
    let x = pem.parse_x509().unwrap();
    let san = x.subject_alternative_name().unwrap();
    san.map(|s| {
        s.value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some((*d).to_owned()),
                _ => None,
            })
            .collect()
    })
    .unwrap_or_default()
}

fn ready(o: &DynamicObject) -> bool {
    o.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True" && c["reason"] == "Issued")
    })
}

fn certificates(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_check_resources_get_a_self_signed_certificate() {
    let (cluster, _stand_in) = start().await;
    let client = cluster.client();
    cluster.apply_yaml(CLUSTERCTL_TEST_RESOURCES).await.unwrap();
    let secret = issued(&client, "cert-manager-test", "selfsigned-cert-tls", |c| {
        dns_names(c) == ["example.com"]
    })
    .await;
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(
        data(&secret, "ca.crt"),
        data(&secret, "tls.crt"),
        "self-signed"
    );
    assert!(!data(&secret, "tls.key").is_empty());
    let anns = secret.metadata.annotations.unwrap();
    assert_eq!(anns["cert-manager.io/certificate-name"], "selfsigned-cert");
    assert_eq!(anns["cert-manager.io/issuer-name"], "test-selfsigned");
    assert_eq!(anns["cert-manager.io/issuer-kind"], "Issuer");
    let certs = certificates(&client, "cert-manager-test");
    let cert = await_object(&certs, "selfsigned-cert", WAIT, ready)
        .await
        .unwrap();
    assert!(cert.expect("Certificate not Ready").data["status"]["notAfter"].is_string());
    // clusterctl then deletes them again.
    certs
        .delete("selfsigned-cert", &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_issuer_signs_a_leaf_that_is_injected_and_never_regenerated() {
    let (cluster, _stand_in) = start().await;
    let client = cluster.client();
    cluster.apply_yaml(CHAIN).await.unwrap();
    let ca = issued(&client, "ns", "ca-tls", |c| !c.is_empty()).await;
    let leaf = issued(&client, "ns", "serving-tls", |c| {
        dns_names(c) == ["svc.ns.svc"]
    })
    .await;
    let ca_crt = data(&leaf, "ca.crt");
    assert_eq!(
        ca_crt,
        data(&ca, "tls.crt"),
        "the leaf's ca.crt is the CA certificate"
    );
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca_crt.as_bytes()).unwrap();
    let leaf_crt = data(&leaf, "tls.crt");
    let (_, leaf_pem) = x509_parser::pem::parse_x509_pem(leaf_crt.as_bytes()).unwrap();
    let (ca_x, leaf_x) = (ca_pem.parse_x509().unwrap(), leaf_pem.parse_x509().unwrap());
    assert!(ca_x.is_ca());
    leaf_x
        .verify_signature(Some(ca_x.public_key()))
        .expect("the leaf chains to the CA");

    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let bundles = |v: &ValidatingWebhookConfiguration| -> Vec<String> {
        let hooks = v.webhooks.iter().flatten();
        let bundles = hooks.map(|w| w.client_config.ca_bundle.clone().unwrap_or_default());
        bundles
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .collect()
    };
    let want = ca_crt.clone();
    let injected =
        move |v: &ValidatingWebhookConfiguration| bundles(v) == [want.clone(), want.clone()];
    let found = await_object(&vwcs, "widgets", WAIT, injected.clone())
        .await
        .unwrap();
    let vwc = found.expect("caBundle not injected into both webhooks within 30 s");
    assert_eq!(
        vwc.webhooks.unwrap()[0].failure_policy.as_deref(),
        Some("Ignore")
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let want = ca_crt.clone();
    let crd_injected = move |c: &CustomResourceDefinition| {
        let conversion = c.spec.conversion.as_ref().and_then(|c| c.webhook.as_ref());
        let bundle = conversion.and_then(|w| w.client_config.as_ref()?.ca_bundle.as_ref());
        bundle.is_some_and(|b| b.0 == want.as_bytes())
    };
    let found = await_object(&crds, "widgets.example.com", WAIT, crd_injected)
        .await
        .unwrap();
    assert!(
        found.is_some(),
        "caBundle not injected into the CRD's conversion within 30 s"
    );

    // Touching the Certificate's labels does not regenerate its Secret. A sync pass that
    // re-injects the tampered caBundle afterwards has seen the touched Certificate.
    let certs = certificates(&client, "ns");
    let labels = serde_json::json!({"metadata": {"labels": {"touched": "yes"}}});
    certs
        .patch("serving", &PatchParams::default(), &Patch::Merge(labels))
        .await
        .unwrap();
    let other = cluster.ca_pem();
    let tamper = serde_json::json!({"webhooks": [{"name": "a.widgets.example.com",
        "clientConfig": {"caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, other)}}]});
    vwcs.patch(
        "widgets",
        &PatchParams::default(),
        &Patch::Strategic(tamper),
    )
    .await
    .unwrap();
    assert_ne!(
        bundles(&vwcs.get("widgets").await.unwrap())[0],
        ca_crt,
        "tampered"
    );
    let found = await_object(&vwcs, "widgets", WAIT, injected)
        .await
        .unwrap();
    assert!(
        found.is_some(),
        "tampered caBundle not re-injected within 30 s"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "ns");
    let again = secrets.get("serving-tls").await.unwrap();
    assert_eq!(
        data(&again, "tls.crt"),
        leaf_crt,
        "the Secret was regenerated"
    );
    assert!(data(&again, "tls.key") == data(&leaf, "tls.key"), "new key");

    // A change of names does re-issue it, from the same CA.
    let names = serde_json::json!({"spec": {"dnsNames": ["svc.ns.svc", "svc.ns"]}});
    certs
        .patch("serving", &PatchParams::default(), &Patch::Merge(names))
        .await
        .unwrap();
    let reissued = issued(&client, "ns", "serving-tls", |c| dns_names(c).len() == 2).await;
    assert_ne!(data(&reissued, "tls.crt"), leaf_crt);
    assert_eq!(data(&reissued, "ca.crt"), ca_crt);
}
