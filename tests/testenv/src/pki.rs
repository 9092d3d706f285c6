//! The management cluster's own small PKI (a test CA, serving and client certificates).
//!
//! This is test-harness PKI for the local management cluster only; the tenant PKI is
//! kamaji-bootstrap's job.

use std::net::IpAddr;

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct CertPair {
    /// PEM `CERTIFICATE`.
    pub cert_pem: String,
    /// PEM `PRIVATE KEY` (PKCS#8).
    pub key_pem: String,
}

/// A self-signed ECDSA P-256 certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    key_pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// Generates a CA with common name `cn`.
    ///
    /// # Errors
    /// On key generation or signing failure.
    pub fn new(cn: &str) -> Result<Self> {
        let key = KeyPair::generate()?;
        let key_pem = key.serialize_pem();
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, key)?;
        Ok(Self { issuer, key_pem })
    }

    /// The CA certificate and key.
    #[must_use]
    pub fn pair(&self) -> CertPair {
        CertPair {
            cert_pem: self.issuer.pem(),
            key_pem: self.key_pem.clone(),
        }
    }

    /// The CA certificate, PEM.
    #[must_use]
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// Issues a serving certificate for `dns` names and `ips`. It also allows client
    /// authentication, as etcd needs for its gRPC gateway's loopback connection.
    ///
    /// # Errors
    /// On key generation or signing failure.
    pub fn serving(&self, cn: &str, dns: &[&str], ips: &[IpAddr]) -> Result<CertPair> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.subject_alt_names = dns
            .iter()
            .map(|d| Ok(SanType::DnsName((*d).try_into()?)))
            .chain(ips.iter().map(|ip| Ok(SanType::IpAddress(*ip))))
            .collect::<Result<_>>()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.sign(&params)
    }

    /// Issues a client certificate for user `cn` in `groups` (subject O).
    ///
    /// # Errors
    /// On key generation or signing failure.
    pub fn client(&self, cn: &str, groups: &[&str]) -> Result<CertPair> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(&params)
    }

    fn sign(&self, params: &CertificateParams) -> Result<CertPair> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA P-256 key pair as (private PKCS#8 PEM, public SPKI PEM), e.g. for
/// service-account token signing.
///
/// # Errors
/// On key generation failure.
pub fn key_pair() -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// Renders a kubeconfig for `server` trusting `ca_pem`, authenticating with `client`.
#[must_use]
pub fn kubeconfig(server: &str, ca_pem: &str, user: &str, client: &CertPair) -> String {
    render_kubeconfig(
        server,
        ca_pem,
        user,
        &serde_json::json!({"client-certificate-data": b64(&client.cert_pem), "client-key-data": b64(&client.key_pem)}),
    )
}

/// Renders a kubeconfig for `server` trusting `ca_pem`, authenticating with bearer `token`
/// (e.g. a `ServiceAccount` token) as its only credential.
#[must_use]
pub fn token_kubeconfig(server: &str, ca_pem: &str, user: &str, token: &str) -> String {
    render_kubeconfig(server, ca_pem, user, &serde_json::json!({"token": token}))
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn render_kubeconfig(
    server: &str,
    ca_pem: &str,
    user: &str,
    credential: &serde_json::Value,
) -> String {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": credential}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    });
    serde_yaml::to_string(&doc).unwrap_or_default()
}
