//! Stand-ins for what another provider would do: the infrastructure provider marking the CAPI
//! quickstart's `OpenStackCluster` provisioned (its CRD is kamaji-testenv's stand-in,
//! [`kamaji_testenv::standins::openstack_cluster_crd_yaml`]), and the data path of an ingress
//! or Gateway controller with TLS passthrough ([`tls_passthrough`]).

use anyhow::Result;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

use crate::Env;

impl Env {
    /// Marks the stand-in OpenStackCluster `ns/name` provisioned (`status.ready` and
    /// `status.initialization.provisioned`), as the infrastructure provider would; returns the
    /// API of OpenStackClusters in `ns`.
    pub async fn mark_openstack_cluster_provisioned(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Api<DynamicObject>> {
        self.mark_infrastructure_provisioned(ns, "v1alpha6", "OpenStackCluster", name)
            .await
    }

    /// Marks the stand-in infrastructure cluster `ns/name` of `kind` (at
    /// `infrastructure.cluster.x-k8s.io/<version>`) provisioned, as its provider would; returns
    /// the API of that kind in `ns`.
    pub async fn mark_infrastructure_provisioned(
        &self,
        ns: &str,
        version: &str,
        kind: &str,
        name: &str,
    ) -> Result<Api<DynamicObject>> {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            version,
            kind,
        ));
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, &ar);
        let status =
            serde_json::json!({"status": {"ready": true, "initialization": {"provisioned": true}}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
        Ok(api)
    }
}

/// The data path of an ingress or Gateway controller with TLS passthrough (a stand-in: no such
/// controller is built here): every TCP connection to `listen` is relayed unterminated to
/// `backend`, which the test reads from the Ingress or TLSRoute kamaji-rs wrote. Stops when the
/// handle is dropped or aborted.
///
/// # Panics
/// When `listen` cannot be bound.
#[must_use]
pub fn tls_passthrough(
    listen: std::net::SocketAddr,
    backend: std::net::SocketAddr,
) -> tokio::task::JoinHandle<()> {
    let listener = std::net::TcpListener::bind(listen).unwrap();
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}
