//! The shared datastore: a TLS etcd registered as a Kamaji `DataStore`, and the views of it
//! that tests compare the tenants' key prefixes against.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Result;
use base64::Engine as _;
use kamaji_reconciler::datastore::{Credentials, Resolved};
use kamaji_testenv::pki::{CertPair, TestCa};
use kamaji_testenv::{Etcd, LocalCluster};

use crate::Env;

/// Starts the TLS etcd that plays the shared datastore, serving on loopback and on
/// `host_ip` (where the machines' pods reach it); returns it with its CA and an admin client
/// certificate.
pub(crate) async fn start_datastore(
    cluster: &LocalCluster,
    host_ip: Ipv4Addr,
) -> Result<(Etcd, CertPair, CertPair)> {
    let ca = TestCa::new("datastore-ca")?;
    let server = ca.serving(
        "etcd",
        &["localhost"],
        &[IpAddr::from([127, 0, 0, 1]), IpAddr::V4(host_ip)],
    )?;
    let etcd = Etcd::start_tls_also_on(
        cluster.tools(),
        &cluster.dir().join("datastore"),
        &server.cert_pem,
        &server.key_pem,
        &ca.cert_pem(),
        Some(IpAddr::V4(host_ip)),
    )
    .await?;
    let client = ca.client("datastore-admin", &[])?;
    Ok((etcd, ca.pair(), client))
}

impl Env {
    /// Registers a Kamaji etcd DataStore named `name` pointing at this environment's etcd.
    pub async fn create_datastore(&self, name: &str, endpoint: SocketAddr) -> Result<()> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let ds = serde_json::json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
            "metadata": {"name": name},
            "spec": {
                "driver": "etcd",
                "endpoints": [endpoint.to_string()],
                "tlsConfig": {
                    "certificateAuthority": {
                        "certificate": {"content": b64(&self.datastore_ca.cert_pem)},
                        "privateKey": {"content": b64(&self.datastore_ca.key_pem)},
                    },
                    "clientCertificate": {
                        "certificate": {"content": b64(&self.datastore_client.cert_pem)},
                        "privateKey": {"content": b64(&self.datastore_client.key_pem)},
                    },
                },
            },
        });
        self.apply_value(&ds).await
    }
}

/// The datastore as the manager resolves it, with the environment's admin client certificate.
#[must_use]
pub fn datastore_admin(env: &Env) -> (Resolved, Credentials) {
    (
        Resolved {
            name: "default".into(),
            endpoints: vec![env.datastore.url().to_owned()],
            ca_cert: env.datastore_ca.cert_pem.clone(),
            ca_key: String::new(),
        },
        Credentials {
            cert: env.datastore_client.cert_pem.clone(),
            key: env.datastore_client.key_pem.clone(),
        },
    )
}

/// The tenant's datastore prefix, as its kube-apiserver is told (`--etcd-prefix`).
pub async fn etcd_prefix(env: &Env, ns: &str, name: &str) -> String {
    env.container_args(ns, name, "kube-apiserver")
        .await
        .unwrap()
        .into_iter()
        .find_map(|a| a.strip_prefix("--etcd-prefix=").map(str::to_owned))
        .unwrap()
}
