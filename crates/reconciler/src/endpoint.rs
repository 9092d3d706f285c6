//! Choosing the control-plane endpoint (pure).
//!
//! Order (shared/reference/kamaji-api.md §8.4, capi-contract.md items 13–15):
//! 1. the Cluster's `spec.controlPlaneEndpoint`, if already valid (an infrastructure provider or
//!    the user set it, or an earlier pass of this controller did);
//! 2. the ingress or gateway host name, port 443 unless the gateway names one;
//! 3. `network.serviceAddress`, on the API server port;
//! 4. the LoadBalancer Service's first ingress IP or host name, on the API server port;
//! 5. for a ClusterIP Service, its ClusterIP (reachable inside the management cluster only).
//!
//! A NodePort Service without `serviceAddress` has no endpoint this controller can know: the
//! caller reports `WaitingForControlPlaneEndpoint`.

use k8s_openapi::api::core::v1::Service;
use kamaji_api::kcp::ServiceType;

use crate::spec::ValidSpec;

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
    if let Some((host, port)) = &spec.cluster.control_plane_endpoint
        && let Ok(port) = u16::try_from(*port)
    {
        return Some(Endpoint {
            host: host.clone(),
            port,
        });
    }
    if let Some((host, port)) = &spec.external {
        return Some(Endpoint {
            host: host.clone(),
            port: *port,
        });
    }
    if let Some(address) = &spec.service_address {
        return Some(Endpoint {
            host: address.clone(),
            port: spec.port,
        });
    }
    let svc = service?;
    match spec.service_type {
        ServiceType::LoadBalancer => {
            let ingress = svc
                .status
                .as_ref()?
                .load_balancer
                .as_ref()?
                .ingress
                .as_ref()?;
            let first = ingress.first()?;
            let host = first.ip.clone().or_else(|| first.hostname.clone())?;
            Some(Endpoint {
                host,
                port: spec.port,
            })
        }
        ServiceType::ClusterIP => {
            let ip = svc
                .spec
                .as_ref()?
                .cluster_ip
                .clone()
                .filter(|ip| ip != "None" && !ip.is_empty())?;
            Some(Endpoint {
                host: ip,
                port: spec.port,
            })
        }
        ServiceType::NodePort => None,
    }
}
