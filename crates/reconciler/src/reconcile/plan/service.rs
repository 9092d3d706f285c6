//! The control-plane Service (pure): type, API server port, selector, the user's labels,
//! annotations and extra ports, and the load-balancer settings.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kamaji_api::kcp::ServiceType;

use super::{API_SERVER_PORT_NAME, meta, selector_labels};
use crate::reconcile::validate::ValidSpec;

/// The control-plane Service.
#[must_use]
pub fn service(spec: &ValidSpec, owner: &OwnerReference) -> Service {
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
    ports.extend(exposure.additional_ports.iter().cloned());
    let lb = exposure.service_type == ServiceType::LoadBalancer;
    Service {
        metadata: m,
        spec: Some(ServiceSpec {
            type_: Some(exposure.service_type.as_str().into()),
            selector: Some(selector_labels(spec)),
            ports: Some(ports),
            load_balancer_ip: exposure.service_address.clone().filter(|_| lb),
            load_balancer_source_ranges: exposure.load_balancer_source_ranges.clone(),
            load_balancer_class: exposure.load_balancer_class.clone(),
            allocate_load_balancer_node_ports: exposure.allocate_load_balancer_node_ports,
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
