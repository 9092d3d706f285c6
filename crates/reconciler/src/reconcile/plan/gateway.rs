//! The API server's `TLSRoute` (pure), from `network.gateway`: attached to the named Gateway
//! (and listener `sectionName`/`port` when given), matching the gateway host by SNI, to the
//! control-plane Service's API server port. TLS is passed through, as a TLSRoute does: the
//! Gateway's listener must use `protocol: TLS` with `tls.mode: Passthrough`, and allow routes
//! from the control plane's namespace.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::exposure_meta;
use crate::gateway_api::{
    TlsRoute, TlsRouteParentRefs, TlsRouteRules, TlsRouteRulesBackendRefs, TlsRouteSpec,
};
use crate::reconcile::validate::ValidSpec;

/// The TLSRoute for `network.gateway`, named like the Service; `None` without one.
#[must_use]
pub fn tls_route(spec: &ValidSpec, owner: &OwnerReference) -> Option<TlsRoute> {
    let declared = spec.exposure.gateway.as_ref()?;
    let m = exposure_meta(
        spec,
        owner,
        declared.extra_labels.as_ref(),
        BTreeMap::new(),
        declared.extra_annotations.as_ref(),
    );
    Some(TlsRoute {
        metadata: m,
        spec: TlsRouteSpec {
            hostnames: vec![declared.hostname.clone()],
            parent_refs: Some(vec![TlsRouteParentRefs {
                name: declared.name.clone(),
                namespace: Some(declared.namespace.clone()),
                section_name: declared.section_name.clone(),
                port: declared.port,
                ..TlsRouteParentRefs::default()
            }]),
            rules: vec![TlsRouteRules {
                backend_refs: vec![TlsRouteRulesBackendRefs {
                    name: spec.names.service(),
                    port: Some(i32::from(spec.port)),
                    ..TlsRouteRulesBackendRefs::default()
                }],
                name: None,
            }],
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::plan::tests::owner;
    use crate::reconcile::validate::tests::{fixture, valid};

    #[test]
    fn the_route_attaches_to_the_gateway_and_sends_its_host_to_the_api_server_port() {
        let spec = valid(&fixture(serde_json::json!({"network": {
            "serviceType": "ClusterIP",
            "gateway": {"name": "gw", "namespace": "gateways", "hostname": "api.demo.example.com",
                "sectionName": "tls", "port": 8443, "extraLabels": {"team": "a"},
                "extraAnnotations": {"x/y": "z"}}}})));
        let r = tls_route(&spec, &owner()).unwrap();
        assert_eq!(r.metadata.name, Some(spec.names.service()));
        assert_eq!(r.metadata.owner_references, Some(vec![owner()]));
        assert_eq!(r.metadata.labels.as_ref().unwrap()["team"], "a");
        assert_eq!(r.metadata.annotations.as_ref().unwrap()["x/y"], "z");
        assert_eq!(r.spec.hostnames, vec!["api.demo.example.com".to_owned()]);
        let parent = &r.spec.parent_refs.as_ref().unwrap()[0];
        assert_eq!(
            (
                parent.name.as_str(),
                parent.namespace.as_deref(),
                parent.section_name.as_deref(),
                parent.port
            ),
            ("gw", Some("gateways"), Some("tls"), Some(8443))
        );
        let backend = &r.spec.rules[0].backend_refs[0];
        assert_eq!(backend.name, spec.names.service());
        assert_eq!(backend.port, Some(i32::from(spec.port)));
    }
}
