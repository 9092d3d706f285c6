//! The API server's Ingress (pure), from `network.ingress`: one rule for the ingress host to
//! the control-plane Service's API server port, TLS passed through to kube-apiserver (which
//! serves the host in its certificate), as Kamaji's provider creates it.
//!
//! TLS passthrough is not part of the Ingress API; the common controllers take it from an
//! annotation, which kamaji-rs sets for ingress-nginx ([`NGINX_SSL_PASSTHROUGH`],
//! [`NGINX_BACKEND_PROTOCOL`]) and HAProxy ([`HAPROXY_SSL_PASSTHROUGH`]) unless
//! `network.ingress.extraAnnotations` sets them itself; other controllers need theirs there.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::exposure_meta;
use crate::reconcile::validate::ValidSpec;

/// ingress-nginx: hand the TLS connection to the backend unterminated.
pub const NGINX_SSL_PASSTHROUGH: &str = "nginx.ingress.kubernetes.io/ssl-passthrough";
/// ingress-nginx: the backend speaks HTTPS.
pub const NGINX_BACKEND_PROTOCOL: &str = "nginx.ingress.kubernetes.io/backend-protocol";
/// HAProxy Kubernetes Ingress Controller: TLS passthrough.
pub const HAPROXY_SSL_PASSTHROUGH: &str = "haproxy.org/ssl-passthrough";

/// The Ingress for `network.ingress`, named like the Service; `None` without one.
#[must_use]
pub fn ingress(spec: &ValidSpec, owner: &OwnerReference) -> Option<Ingress> {
    let declared = spec.exposure.ingress.as_ref()?;
    let passthrough: BTreeMap<String, String> = [
        (NGINX_SSL_PASSTHROUGH, "true"),
        (NGINX_BACKEND_PROTOCOL, "HTTPS"),
        (HAPROXY_SSL_PASSTHROUGH, "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let m = exposure_meta(
        spec,
        owner,
        declared.extra_labels.as_ref(),
        passthrough,
        declared.extra_annotations.as_ref(),
    );
    Some(Ingress {
        metadata: m,
        spec: Some(IngressSpec {
            ingress_class_name: declared.class_name.clone().filter(|c| !c.is_empty()),
            rules: Some(vec![IngressRule {
                host: Some(declared.hostname.clone()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".into()),
                        path_type: "Prefix".into(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: spec.names.service(),
                                port: Some(ServiceBackendPort {
                                    number: Some(i32::from(spec.port)),
                                    name: None,
                                }),
                            }),
                            resource: None,
                        },
                    }],
                }),
            }]),
            ..IngressSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::plan::tests::owner;
    use crate::reconcile::validate::tests::{fixture, valid};

    #[test]
    fn the_ingress_routes_its_host_to_the_api_server_port_with_tls_passed_through() {
        assert!(ingress(&valid(&fixture(serde_json::json!({}))), &owner()).is_none());
        let spec = valid(&fixture(
            serde_json::json!({"network": {"serviceType": "ClusterIP",
            "ingress": {"hostname": "api.demo.example.com", "className": "nginx",
                "extraLabels": {"team": "a"},
                "extraAnnotations": {HAPROXY_SSL_PASSTHROUGH: "false", "x/y": "z"}}}}),
        ));
        let i = ingress(&spec, &owner()).unwrap();
        assert_eq!(i.metadata.name, Some(spec.names.service()));
        assert_eq!(i.metadata.owner_references, Some(vec![owner()]));
        assert_eq!(i.metadata.labels.as_ref().unwrap()["team"], "a");
        let a = i.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[NGINX_SSL_PASSTHROUGH], "true");
        assert_eq!(a[HAPROXY_SSL_PASSTHROUGH], "false", "the user's value wins");
        assert_eq!(a["x/y"], "z");
        let s = i.spec.unwrap();
        assert_eq!(s.ingress_class_name.as_deref(), Some("nginx"));
        let rule = &s.rules.unwrap()[0];
        assert_eq!(rule.host.as_deref(), Some("api.demo.example.com"));
        let backend = rule.http.as_ref().unwrap().paths[0]
            .backend
            .service
            .clone()
            .unwrap();
        assert_eq!(backend.name, spec.names.service());
        assert_eq!(
            backend.port.unwrap().number,
            Some(i32::from(spec.port)),
            "the API server's port of the Service"
        );
    }
}
