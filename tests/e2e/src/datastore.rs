//! The shared datastore: a TLS etcd registered as a Kamaji `DataStore`, and the views of it
//! that tests compare the tenants' key prefixes against.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::SystemTime;

use anyhow::Result;
use base64::Engine as _;
use kamaji_bootstrap::pki::{CertificateAuthority, KeyAlgorithm, LeafSpec};
use kamaji_machine::network::UNDERLAY_GATEWAY;
use kamaji_reconciler::datastore::{self, Resolved};
use kamaji_testenv::pki::{CertPair, TestCa};
use kamaji_testenv::{Etcd, LocalCluster};

use crate::Env;

/// Starts the TLS etcd that plays the shared datastore, serving on loopback and, when given,
/// on `host_ip` (where the machines' pods reach it); returns it with its CA and an admin
/// client certificate.
pub(crate) async fn start_datastore(
    cluster: &LocalCluster,
    host_ip: Option<Ipv4Addr>,
) -> Result<(Etcd, CertPair, CertPair)> {
    let ca = TestCa::new("datastore-ca")?;
    let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
    ips.extend(host_ip.map(IpAddr::V4));
    let server = ca.serving("etcd", &["localhost"], &ips)?;
    let etcd = Etcd::start_tls_also_on(
        cluster.tools(),
        &cluster.dir().join("datastore"),
        &server.cert_pem,
        &server.key_pem,
        &ca.cert_pem(),
        host_ip.map(IpAddr::V4),
    )
    .await?;
    let client = ca.client("datastore-admin", &[])?;
    Ok((etcd, ca.pair(), client))
}

impl Env {
    /// Registers a Kamaji etcd DataStore named `name` pointing at `endpoint`, with this
    /// environment's datastore CA and admin client certificate.
    pub async fn create_datastore(&self, name: &str, endpoint: SocketAddr) -> Result<()> {
        self.create_datastore_with_ca(name, endpoint, &self.datastore_ca, &self.datastore_client)
            .await
    }

    /// Registers a Kamaji etcd DataStore named `name` pointing at `endpoint` with the CA `ca`
    /// (certificate and key) and the client certificate `client`.
    pub async fn create_datastore_with_ca(
        &self,
        name: &str,
        endpoint: SocketAddr,
        ca: &CertPair,
        client: &CertPair,
    ) -> Result<()> {
        self.apply_value(&etcd_datastore(name, endpoint, ca, client))
            .await
    }

    /// Starts a second TLS etcd (data under the cluster's `dir_name`) whose server certificate
    /// this environment's datastore CA issues and which trusts client certificates of that CA:
    /// another etcd a tenant's API server can reach with its one client certificate. Returns it
    /// with its address as pods reach it (the underlay gateway).
    pub async fn start_datastore_sharing_the_ca(
        &self,
        dir_name: &str,
    ) -> Result<(Etcd, SocketAddr)> {
        let ca = CertificateAuthority::from_pem(
            &self.datastore_ca.cert_pem,
            &self.datastore_ca.key_pem,
        )?;
        let server = ca.issue(
            &LeafSpec::datastore_server(dir_name, &[], &[IpAddr::V4(UNDERLAY_GATEWAY)]),
            KeyAlgorithm::default(),
            SystemTime::now(),
        )?;
        self.start_etcd_for_pods(
            dir_name,
            &CertPair {
                cert_pem: server.cert_pem().to_owned(),
                key_pem: server.key_pem().to_owned(),
            },
            ca.cert_pem(),
        )
        .await
    }

    /// Starts a TLS etcd (data under the cluster's `dir_name`) serving `serving` (which must
    /// cover 127.0.0.1 and the underlay gateway) and trusting client certificates of
    /// `client_ca_pem` (one CA or a bundle). Returns it with its address as pods reach it.
    pub async fn start_etcd_for_pods(
        &self,
        dir_name: &str,
        serving: &CertPair,
        client_ca_pem: &str,
    ) -> Result<(Etcd, SocketAddr)> {
        let etcd = Etcd::start_tls_also_on(
            self.cluster.tools(),
            &self.cluster.dir().join(dir_name),
            &serving.cert_pem,
            &serving.key_pem,
            client_ca_pem,
            Some(IpAddr::V4(UNDERLAY_GATEWAY)),
        )
        .await?;
        let for_pods = SocketAddr::new(UNDERLAY_GATEWAY.into(), etcd.port());
        Ok((etcd, for_pods))
    }
}

/// The datastore as the manager resolves it (with the CA key, from which
/// [`datastore::auth::session`] issues the manager's own identity).
#[must_use]
pub fn datastore_admin(env: &Env) -> Resolved {
    datastore_admin_at(env, env.datastore.url())
}

/// An etcd at `url` that shares the environment's datastore CA (the `default` DataStore's, or
/// one of [`Env::start_datastore_sharing_the_ca`]), as the manager resolves it.
#[must_use]
pub fn datastore_admin_at(env: &Env, url: &str) -> Resolved {
    Resolved {
        name: "default".into(),
        driver: kamaji_api::datastore::Driver::Etcd,
        sql: None,
        endpoints: vec![url.to_owned()],
        ca_cert: env.datastore_ca.cert_pem.clone(),
        ca_key: env.datastore_ca.key_pem.clone(),
        overrides: Vec::new(),
        basic_auth: None,
    }
}

/// The number of keys under `prefix` on `ds`, read in a session of the manager's
/// ([`datastore::auth::session`]; etcd authentication may be on).
pub async fn keys_under(ds: &Resolved, prefix: &str) -> u64 {
    let session = datastore::auth::session(ds).await.unwrap();
    datastore::count_prefix(ds, &session, prefix).await.unwrap()
}

/// Whether etcd authentication is on for `ds` and the etcd roles it has.
pub async fn authentication_and_roles(ds: &Resolved) -> (bool, Vec<String>) {
    let session = datastore::auth::session(ds).await.unwrap();
    let roles = datastore::auth::roles(ds, &session).await.unwrap();
    (session.token.is_some(), roles)
}

/// The stored bytes of `key` on `ds` (what etcd holds, encrypted or not).
pub async fn raw_value(ds: &Resolved, key: &str) -> Option<Vec<u8>> {
    let session = datastore::auth::session(ds).await.unwrap();
    datastore::value(ds, &session, key).await.unwrap()
}

/// Every key under `prefix` on `ds` with its stored bytes.
pub async fn raw_values_under(ds: &Resolved, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let session = datastore::auth::session(ds).await.unwrap();
    datastore::values_under(ds, &session, prefix).await.unwrap()
}

/// Who holds `schema` on `ds` ([`datastore::schema_claim`]).
pub async fn claim_on(ds: &Resolved, schema: &str) -> datastore::Claim {
    let session = datastore::auth::session(ds).await.unwrap();
    datastore::schema_claim(ds, &session, schema).await.unwrap()
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

/// The `status.dataStore` recorded on KamajiControlPlane `ns/demo` (panics when absent).
pub async fn recorded_datastore(env: &Env, ns: &str) -> kamaji_api::StatusDataStore {
    kube::Api::<kamaji_api::KamajiControlPlane>::namespaced(env.client(), ns)
        .get("demo")
        .await
        .unwrap()
        .status
        .and_then(|s| s.data_store)
        .unwrap_or_else(|| panic!("{ns}: no status.dataStore"))
}

/// A Kamaji etcd `DataStore` named `name` at `endpoint` with the CA `ca` (certificate and
/// key) and the client certificate `client`, inline.
pub(crate) fn etcd_datastore(
    name: &str,
    endpoint: SocketAddr,
    ca: &CertPair,
    client: &CertPair,
) -> serde_json::Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    serde_json::json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
        "metadata": {"name": name},
        "spec": {
            "driver": "etcd",
            "endpoints": [endpoint.to_string()],
            "tlsConfig": {
                "certificateAuthority": {
                    "certificate": {"content": b64(&ca.cert_pem)},
                    "privateKey": {"content": b64(&ca.key_pem)},
                },
                "clientCertificate": {
                    "certificate": {"content": b64(&client.cert_pem)},
                    "privateKey": {"content": b64(&client.key_pem)},
                },
            },
        },
    })
}
