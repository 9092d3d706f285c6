//! Choosing the control-plane endpoint (pure).
//!
//! Order (shared/reference/kamaji-api.md §8.4, capi-contract.md items 13–15):
//! 1. an endpoint set before: the Cluster's `spec.controlPlaneEndpoint` (an infrastructure
//!    provider or the user set it, or an earlier pass of this controller did), else the
//!    KamajiControlPlane's own (the user's, or an earlier pass's), else the infrastructure
//!    cluster's (a provider that owns the address) — [`crate::reconcile::validate::PresetEndpoint`];
//! 2. the ingress or gateway host name, port 443 unless the gateway names one;
//! 3. `network.serviceAddress`, on the API server port;
//! 4. the LoadBalancer Service's first ingress IP or host name, on the API server port;
//! 5. for a ClusterIP Service, its ClusterIP (reachable inside the management cluster only).
//!
//! A NodePort Service without `serviceAddress` has no endpoint this controller can know: the
//! plan reports `WaitingForControlPlaneEndpoint`.

use k8s_openapi::api::core::v1::Service;
use kamaji_api::kcp::ServiceType;

use crate::reconcile::validate::ValidSpec;

/// A control-plane endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address (no brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Endpoint {
    /// `https://host:port` (IPv6 bracketed).
    #[must_use]
    pub fn url(&self) -> String {
        kamaji_bootstrap::kubeconfig::server_url(&self.host, self.port)
    }
}

/// The endpoint for `spec`, given the observed control-plane Service.
#[must_use]
pub fn choose(spec: &ValidSpec, service: Option<&Service>) -> Option<Endpoint> {
    let at = |host: &str, port: u16| {
        Some(Endpoint {
            host: host.to_owned(),
            port,
        })
    };
    let exposure = &spec.exposure;
    if let Some(preset) = &spec.preset_endpoint {
        return at(&preset.host, preset.port);
    }
    if let Some((host, port)) = &exposure.external {
        return at(host, *port);
    }
    if let Some(address) = &exposure.service_address {
        return at(address, spec.port);
    }
    let svc = service?;
    match exposure.service_type {
        ServiceType::LoadBalancer => {
            let first = svc
                .status
                .as_ref()?
                .load_balancer
                .as_ref()?
                .ingress
                .as_ref()?
                .first()?;
            let host = first.ip.clone().or_else(|| first.hostname.clone())?;
            at(&host, spec.port)
        }
        ServiceType::ClusterIP => {
            let ip = cluster_ip(svc)?;
            at(&ip.to_string(), spec.port)
        }
        ServiceType::NodePort => None,
    }
}

/// The Service's ClusterIP, once allocated.
#[must_use]
pub fn cluster_ip(service: &Service) -> Option<std::net::IpAddr> {
    service
        .spec
        .as_ref()?
        .cluster_ip
        .as_deref()
        .filter(|ip| *ip != "None" && !ip.is_empty())?
        .parse()
        .ok()
}

/// Why no endpoint is known yet (the `ControlPlaneEndpointReady=False` message).
#[must_use]
pub fn waiting_message(spec: &ValidSpec) -> String {
    match spec.exposure.service_type {
        ServiceType::NodePort => {
            "a NodePort Service needs spec.network.serviceAddress to know the endpoint".to_owned()
        }
        _ => format!(
            "waiting for Service {} to get an address",
            spec.names.service()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::validate::tests::{fixture, valid};

    fn service(cluster_ip: &str, lb: Option<&str>) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "demo"},
            "spec": {"clusterIP": cluster_ip},
            "status": {"loadBalancer": {"ingress": lb.map(|ip| vec![serde_json::json!({"ip": ip})]).unwrap_or_default()}},
        }))
        .unwrap()
    }

    fn host(spec: &ValidSpec, svc: Option<&Service>) -> Option<(String, u16)> {
        choose(spec, svc).map(|e| (e.host, e.port))
    }

    #[test]
    fn the_order_of_the_sources() {
        let svc = service("10.0.0.5", Some("10.0.0.10"));
        // A LoadBalancer's address, once it has one.
        let f0 = valid(&fixture(serde_json::json!({})));
        assert_eq!(host(&f0, None), None);
        assert_eq!(host(&f0, Some(&service("10.0.0.5", None))), None);
        assert_eq!(host(&f0, Some(&svc)), Some(("10.0.0.10".into(), 6443)));
        // serviceAddress before the Service.
        let addressed = valid(&fixture(
            serde_json::json!({"network": {"serviceAddress": "10.0.0.20"}}),
        ));
        assert_eq!(host(&addressed, None), Some(("10.0.0.20".into(), 6443)));
        // An ingress host before that, on 443.
        let ingress = valid(&fixture(serde_json::json!({"network": {
            "serviceAddress": "10.0.0.20", "ingress": {"hostname": "api.demo.example.com"}}})));
        assert_eq!(
            host(&ingress, None),
            Some(("api.demo.example.com".into(), 443))
        );
        // A gateway's own port.
        let gateway = valid(&fixture(serde_json::json!({"network": {
            "gateway": {"name": "g", "namespace": "n", "hostname": "api.demo.example.com", "port": 8443}}})));
        assert_eq!(
            host(&gateway, None),
            Some(("api.demo.example.com".into(), 8443))
        );
        // The Cluster's endpoint before everything.
        let mut preset = ingress.clone();
        preset.preset_endpoint = Some(crate::reconcile::validate::PresetEndpoint {
            host: "10.1.1.1".into(),
            port: 7443,
            source: crate::reconcile::validate::EndpointSource::Cluster,
        });
        assert_eq!(host(&preset, Some(&svc)), Some(("10.1.1.1".into(), 7443)));
    }

    #[test]
    fn cluster_ip_and_node_port() {
        let svc = service("10.0.0.5", None);
        let cip = valid(&fixture(
            serde_json::json!({"network": {"serviceType": "ClusterIP"}}),
        ));
        assert_eq!(host(&cip, Some(&svc)), Some(("10.0.0.5".into(), 6443)));
        assert_eq!(host(&cip, Some(&service("None", None))), None);
        let np = valid(&fixture(
            serde_json::json!({"network": {"serviceType": "NodePort"}}),
        ));
        assert_eq!(host(&np, Some(&svc)), None);
        assert!(waiting_message(&np).contains("serviceAddress"));
    }
}
