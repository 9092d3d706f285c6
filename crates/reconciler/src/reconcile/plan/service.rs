//! The control-plane Service (pure): type, API server port, selector, the user's labels,
//! annotations and extra ports, and the load-balancer settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kamaji_api::kcp::ServiceType;

use super::{API_SERVER_PORT_NAME, meta};
use crate::reconcile::validate::{ValidSpec, selector_labels};

/// The port of a preset endpoint the Service also serves, when it differs from the API
/// server's (`targetPort` the API server's).
pub const ENDPOINT_PORT_NAME: &str = "endpoint";

/// The address a LoadBalancer Service asks for (`spec.loadBalancerIP`):
/// `network.serviceAddress`, else the IP of a preset endpoint (the user's, or an
/// infrastructure provider's), so that the Service answers where the endpoint says — unless
/// the `stored` Service already answers there without asking (the endpoint was taken from its
/// own address), so the request is never added or dropped after the fact.
#[must_use]
pub fn requested_address(spec: &ValidSpec, stored: Option<&Service>) -> Option<String> {
    if spec.exposure.service_type != ServiceType::LoadBalancer {
        return None;
    }
    if let Some(address) = &spec.exposure.service_address {
        return Some(address.clone());
    }
    let preset = spec.preset_endpoint.as_ref()?;
    preset.host.parse::<std::net::IpAddr>().ok()?;
    let Some(stored) = stored else {
        return Some(preset.host.clone());
    };
    let requested = stored
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_ip.as_deref())
        == Some(preset.host.as_str());
    let answers = stored
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|ingress| {
            ingress
                .iter()
                .any(|i| i.ip.as_deref() == Some(&preset.host))
        });
    (requested || !answers).then(|| preset.host.clone())
}

/// The control-plane Service; `stored` is the Service as observed (see [`requested_address`]).
#[must_use]
pub fn service(spec: &ValidSpec, owner: &OwnerReference, stored: Option<&Service>) -> Service {
    let exposure = &spec.exposure;
    let mut m = meta(spec, spec.names.service(), owner);
    let labels = m.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in &exposure.service_labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    m.annotations.clone_from(&exposure.service_annotations);
    let port = i32::from(spec.port);
    let mut ports = vec![ServicePort {
        name: Some(API_SERVER_PORT_NAME.into()),
        port,
        target_port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..ServicePort::default()
    }];
    if let Some(preset) = spec
        .preset_endpoint
        .as_ref()
        .filter(|p| p.port != spec.port && exposure.external.is_none())
    {
        ports.push(ServicePort {
            name: Some(ENDPOINT_PORT_NAME.into()),
            port: i32::from(preset.port),
            target_port: Some(IntOrString::Int(port)),
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        });
    }
    if let Some(k) = &spec.konnectivity {
        let port = i32::from(k.server.port);
        ports.push(ServicePort {
            name: Some(kamaji_bootstrap::konnectivity::SERVER_PORT_NAME.into()),
            port,
            target_port: Some(IntOrString::Int(port)),
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        });
    }
    ports.extend(exposure.additional_ports.iter().cloned());
    Service {
        metadata: m,
        spec: Some(ServiceSpec {
            type_: Some(exposure.service_type.as_str().into()),
            selector: Some(selector_labels(spec)),
            ports: Some(ports),
            load_balancer_ip: requested_address(spec, stored),
            load_balancer_source_ranges: exposure.load_balancer_source_ranges.clone(),
            load_balancer_class: exposure.load_balancer_class.clone(),
            allocate_load_balancer_node_ports: exposure.allocate_load_balancer_node_ports,
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::validate::tests::{fixture, valid};
    use crate::reconcile::validate::{EndpointSource, PresetEndpoint};

    fn with_preset(patch: serde_json::Value, host: &str, port: u16) -> ValidSpec {
        let mut spec = valid(&fixture(patch));
        spec.preset_endpoint = Some(PresetEndpoint {
            host: host.into(),
            port,
            source: EndpointSource::Infrastructure("OpenStackCluster".into()),
        });
        spec
    }

    fn stored(requested: Option<&str>, ingress: Option<&str>) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "demo"},
            "spec": {"loadBalancerIP": requested},
            "status": {"loadBalancer": {"ingress": ingress.map(|ip| vec![serde_json::json!({"ip": ip})]).unwrap_or_default()}},
        }))
        .unwrap()
    }

    #[test]
    fn a_load_balancer_asks_for_a_preset_address_it_does_not_answer_on() {
        let spec = with_preset(serde_json::json!({}), "10.9.0.8", 6443);
        // Created asking for it, and keeps asking once it got it.
        assert_eq!(requested_address(&spec, None).as_deref(), Some("10.9.0.8"));
        let asked = stored(Some("10.9.0.8"), Some("10.9.0.8"));
        assert_eq!(
            requested_address(&spec, Some(&asked)).as_deref(),
            Some("10.9.0.8")
        );
        // A Service that answers there without asking (the endpoint came from it) is left so.
        let own = stored(None, Some("10.9.0.8"));
        assert_eq!(requested_address(&spec, Some(&own)), None);
        // One that answers elsewhere is asked to move.
        let elsewhere = stored(None, Some("10.9.0.20"));
        assert_eq!(
            requested_address(&spec, Some(&elsewhere)).as_deref(),
            Some("10.9.0.8")
        );
        // A host name is not an address to ask for; serviceAddress wins; only a LoadBalancer asks.
        assert_eq!(
            requested_address(
                &with_preset(serde_json::json!({}), "api.example.com", 6443),
                None
            ),
            None
        );
        let addressed = with_preset(
            serde_json::json!({"network": {"serviceAddress": "10.9.0.30"}}),
            "10.9.0.8",
            6443,
        );
        assert_eq!(
            requested_address(&addressed, None).as_deref(),
            Some("10.9.0.30")
        );
        let cip = with_preset(
            serde_json::json!({"network": {"serviceType": "ClusterIP"}}),
            "10.9.0.8",
            6443,
        );
        assert_eq!(requested_address(&cip, None), None);
    }

    #[test]
    fn a_preset_port_is_served_too() {
        let owner = OwnerReference::default();
        let ports = |spec: &ValidSpec| {
            service(spec, &owner, None)
                .spec
                .unwrap()
                .ports
                .unwrap()
                .into_iter()
                .map(|p| (p.name.unwrap_or_default(), p.port, p.target_port))
                .collect::<Vec<_>>()
        };
        let same = with_preset(serde_json::json!({}), "10.9.0.8", 6443);
        assert_eq!(ports(&same).len(), 1);
        let other = with_preset(serde_json::json!({}), "10.9.0.8", 443);
        assert_eq!(
            ports(&other)[1],
            (
                ENDPOINT_PORT_NAME.to_owned(),
                443,
                Some(IntOrString::Int(6443))
            )
        );
    }
}
