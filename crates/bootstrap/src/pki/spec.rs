//! What certificates must contain: key algorithms, leaf roles and their kubeadm subjects and
//! usages, and the serving certificate's SANs (pure data; no keys are made here).

use std::fmt;
use std::net::IpAddr;

use rcgen::{ExtendedKeyUsagePurpose, KeyPair};

use super::{CLUSTER_ADMINS_GROUP, SYSTEM_MASTERS_GROUP};
use crate::error::{Error, ValidationError, gen_err};
use crate::network::{TenantNetwork, is_dns_subdomain};

/// Key algorithm of generated keys; kubeadm's `encryptionAlgorithm` options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    /// ECDSA on P-256 with SHA-256 (default: fast, small).
    #[default]
    EcdsaP256,
    /// RSA 2048 bits, PKCS#1 v1.5 with SHA-256 (kubeadm's historical default).
    Rsa2048,
    /// RSA 3072 bits.
    Rsa3072,
    /// RSA 4096 bits.
    Rsa4096,
}

impl KeyAlgorithm {
    /// Parses kubeadm's spelling: `ECDSA-P256`, `RSA-2048`, `RSA-3072`, `RSA-4096`.
    ///
    /// # Errors
    /// A [`ValidationError`] on field `encryptionAlgorithm` for any other value.
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        match text {
            "ECDSA-P256" => Ok(Self::EcdsaP256),
            "RSA-2048" => Ok(Self::Rsa2048),
            "RSA-3072" => Ok(Self::Rsa3072),
            "RSA-4096" => Ok(Self::Rsa4096),
            other => Err(ValidationError::new(
                "encryptionAlgorithm",
                format!("{other:?} is not one of ECDSA-P256, RSA-2048, RSA-3072, RSA-4096"),
            )),
        }
    }

    /// kubeadm's spelling of this algorithm.
    #[must_use]
    pub fn as_kubeadm_str(self) -> &'static str {
        match self {
            Self::EcdsaP256 => "ECDSA-P256",
            Self::Rsa2048 => "RSA-2048",
            Self::Rsa3072 => "RSA-3072",
            Self::Rsa4096 => "RSA-4096",
        }
    }

    /// Whether generating a key takes long enough to stall an async runtime's thread: an RSA
    /// key takes tens of milliseconds (2048 bits) to seconds (4096 bits); an ECDSA P-256 key
    /// about a hundred microseconds.
    #[must_use]
    pub fn generates_slowly(self) -> bool {
        !matches!(self, Self::EcdsaP256)
    }

    /// Generates a fresh key pair (the crate's only source of randomness besides tokens).
    pub(crate) fn generate(self, what: &str) -> Result<KeyPair, Error> {
        let size = match self {
            Self::EcdsaP256 => {
                return KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
                    .map_err(gen_err(what));
            }
            Self::Rsa2048 => rcgen::RsaKeySize::_2048,
            Self::Rsa3072 => rcgen::RsaKeySize::_3072,
            Self::Rsa4096 => rcgen::RsaKeySize::_4096,
        };
        KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, size).map_err(gen_err(what))
    }
}

/// Parses a PEM private key (PKCS#8, SEC1 or PKCS#1) as [`KeyPair::from_pem`] does, trying
/// ECDSA P-256 (the default [`KeyAlgorithm`]) first.
///
/// rcgen's detection tries Ed25519 first, and with aws-lc that attempt parses a P-256 key in
/// full (its public point included) before refusing it, so each P-256 key was parsed twice:
/// 1.4 % of the manager's CPU at 300 tenants (`perf`, issue 16). Any other key falls back to
/// rcgen's detection, with the same result as before.
///
/// # Errors
/// rcgen's, when the PEM holds no private key it supports.
pub(crate) fn key_pair_from_pem(pem: &str) -> Result<KeyPair, rcgen::Error> {
    KeyPair::from_pem_and_sign_algo(pem, &rcgen::PKCS_ECDSA_P256_SHA256)
        .or_else(|_| KeyPair::from_pem(pem))
}

/// A PEM certificate with its PEM (PKCS#8) private key. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct CertAndKey {
    cert_pem: String,
    key_pem: String,
}

impl CertAndKey {
    /// Wraps PEM strings without checking them (see [`inspect`] for checks).
    #[must_use]
    pub fn new(cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        Self {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
        }
    }
    /// The certificate, PEM.
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }
    /// The private key, PEM. Secret: never log it.
    #[must_use]
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

impl fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The role of a leaf certificate. There is no CA role: a leaf decision can never be about a CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeafRole {
    /// kube-apiserver serving certificate (`apiserver.crt`).
    ApiServer,
    /// kube-apiserver → kubelet client certificate (`apiserver-kubelet-client.crt`).
    ApiServerKubeletClient,
    /// kube-apiserver → aggregated API servers (`front-proxy-client.crt`).
    FrontProxyClient,
    /// kube-apiserver → datastore client certificate (`apiserver-etcd-client.crt`).
    DatastoreClient,
    /// A datastore (etcd) server certificate, as kubeadm's `etcd-server` (serverAuth and
    /// clientAuth). Used for datastores this project runs itself, e.g. in tests.
    DatastoreServer,
    /// kube-controller-manager client certificate (in `controller-manager.conf`).
    ControllerManager,
    /// kube-scheduler client certificate (in `scheduler.conf`).
    Scheduler,
    /// The admin identity handed to users (`admin.conf`, `<cluster>-kubeconfig`).
    Admin,
    /// The `system:masters` identity for the provider's own bootstrap work; never published.
    SuperAdmin,
    /// The konnectivity server's identity towards kube-apiserver (TokenReviews of agents).
    KonnectivityServer,
}

/// Extended key usage of a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// TLS server only.
    ServerAuth,
    /// TLS client only.
    ClientAuth,
    /// Both (etcd server certificates, as kubeadm issues them).
    ServerAndClientAuth,
}

impl Usage {
    pub(crate) fn purposes(self) -> Vec<ExtendedKeyUsagePurpose> {
        match self {
            Self::ServerAuth => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Self::ClientAuth => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Self::ServerAndClientAuth => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        }
    }
    /// (serverAuth, clientAuth) flags.
    #[must_use]
    pub fn flags(self) -> (bool, bool) {
        match self {
            Self::ServerAuth => (true, false),
            Self::ClientAuth => (false, true),
            Self::ServerAndClientAuth => (true, true),
        }
    }
}

/// What a leaf certificate must contain. Only the role constructors build one, so the subject
/// and usages are always kubeadm's for that role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafSpec {
    role: LeafRole,
    common_name: String,
    organizations: Vec<String>,
    dns_names: Vec<String>,
    ip_addresses: Vec<IpAddr>,
    usage: Usage,
}

impl LeafSpec {
    fn client(role: LeafRole, cn: &str, orgs: &[&str]) -> Self {
        Self {
            role,
            common_name: cn.to_owned(),
            organizations: orgs.iter().map(|o| (*o).to_owned()).collect(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            usage: Usage::ClientAuth,
        }
    }

    /// The kube-apiserver serving certificate: `CN=kube-apiserver`, serverAuth, SANs from
    /// [`ApiServerNames::san_lists`].
    ///
    /// # Errors
    /// A [`ValidationError`] naming the offending `certSANs` / host entry.
    pub fn api_server(
        names: &ApiServerNames,
        network: &TenantNetwork,
    ) -> Result<Self, ValidationError> {
        let (dns_names, ip_addresses) = names.san_lists(network)?;
        Ok(Self {
            role: LeafRole::ApiServer,
            common_name: "kube-apiserver".into(),
            organizations: Vec::new(),
            dns_names,
            ip_addresses,
            usage: Usage::ServerAuth,
        })
    }
    /// `CN=kube-apiserver-kubelet-client`, clientAuth, no organisation (kubeadm ≥ 1.36.1).
    #[must_use]
    pub fn api_server_kubelet_client() -> Self {
        Self::client(
            LeafRole::ApiServerKubeletClient,
            "kube-apiserver-kubelet-client",
            &[],
        )
    }
    /// `CN=front-proxy-client`, clientAuth; signed by the front-proxy CA.
    #[must_use]
    pub fn front_proxy_client() -> Self {
        Self::client(LeafRole::FrontProxyClient, "front-proxy-client", &[])
    }
    /// The datastore client certificate with `CN=<common_name>` (kubeadm:
    /// [`DATASTORE_CLIENT_COMMON_NAME`]; a datastore with per-tenant users may want the tenant's
    /// name), clientAuth; signed by the DataStore CA.
    #[must_use]
    pub fn datastore_client(common_name: &str) -> Self {
        Self::client(LeafRole::DatastoreClient, common_name, &[])
    }
    /// The provider's client certificate towards an etcd DataStore: no common name (etcd's
    /// JSON gateway refuses a certificate with one once authentication is enabled, because it
    /// would not authenticate the request), `O=kamaji-rs`, clientAuth; signed by the DataStore
    /// CA. The etcd user is then the one of the password token sent with each request.
    #[must_use]
    pub fn datastore_admin() -> Self {
        Self::client(LeafRole::DatastoreClient, "", &["kamaji-rs"])
    }
    /// A datastore server certificate like kubeadm's `etcd-server`: `CN=<common_name>`,
    /// serverAuth + clientAuth, DNS names `localhost` + `dns_names`, IPs `127.0.0.1`, `::1` +
    /// `ips`.
    #[must_use]
    pub fn datastore_server(common_name: &str, dns_names: &[String], ips: &[IpAddr]) -> Self {
        let mut dns = vec!["localhost".to_owned()];
        dns.extend(dns_names.iter().cloned());
        let mut ip = vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ];
        ip.extend(ips.iter().copied());
        Self {
            role: LeafRole::DatastoreServer,
            common_name: common_name.to_owned(),
            organizations: Vec::new(),
            dns_names: dedupe(dns),
            ip_addresses: dedupe(ip),
            usage: Usage::ServerAndClientAuth,
        }
    }
    /// `CN=system:kube-controller-manager`, clientAuth.
    #[must_use]
    pub fn controller_manager() -> Self {
        Self::client(
            LeafRole::ControllerManager,
            "system:kube-controller-manager",
            &[],
        )
    }
    /// `CN=system:kube-scheduler`, clientAuth.
    #[must_use]
    pub fn scheduler() -> Self {
        Self::client(LeafRole::Scheduler, "system:kube-scheduler", &[])
    }
    /// `CN=system:konnectivity-server`, clientAuth (the upstream konnectivity setup's
    /// identity of the server, bound to `system:auth-delegator` in the tenant).
    #[must_use]
    pub fn konnectivity_server() -> Self {
        Self::client(
            LeafRole::KonnectivityServer,
            crate::konnectivity::SERVER_IDENTITY,
            &[],
        )
    }
    /// `CN=kubernetes-admin, O=kubeadm:cluster-admins`, clientAuth (kubeadm ≥ 1.29 admin.conf).
    #[must_use]
    pub fn admin() -> Self {
        Self::client(LeafRole::Admin, "kubernetes-admin", &[CLUSTER_ADMINS_GROUP])
    }
    /// `CN=kubernetes-super-admin, O=system:masters`, clientAuth (kubeadm's super-admin.conf).
    #[must_use]
    pub fn super_admin() -> Self {
        Self::client(
            LeafRole::SuperAdmin,
            "kubernetes-super-admin",
            &[SYSTEM_MASTERS_GROUP],
        )
    }
    /// The role.
    #[must_use]
    pub fn role(&self) -> LeafRole {
        self.role
    }
    /// Subject common name.
    #[must_use]
    pub fn common_name(&self) -> &str {
        &self.common_name
    }
    /// Subject organisations (groups).
    #[must_use]
    pub fn organizations(&self) -> &[String] {
        &self.organizations
    }
    /// DNS SANs, deduplicated, in issuance order.
    #[must_use]
    pub fn dns_names(&self) -> &[String] {
        &self.dns_names
    }
    /// IP SANs, deduplicated, in issuance order.
    #[must_use]
    pub fn ip_addresses(&self) -> &[IpAddr] {
        &self.ip_addresses
    }
    /// Extended key usage.
    #[must_use]
    pub fn usage(&self) -> Usage {
        self.usage
    }
}

/// Where the tenant API server is reachable, for its serving certificate's SANs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiServerNames {
    /// Host of the public endpoint (`Cluster.spec.controlPlaneEndpoint.host`): IP or DNS name.
    pub endpoint_host: String,
    /// The management-cluster Service fronting the API server, if any.
    pub service: Option<ServiceNames>,
    /// User `network.certSANs` (IPs or DNS names, wildcards allowed; `host:port` is rejected).
    pub cert_sans: Vec<String>,
    /// Ingress / gateway host names (`network.ingress.hostname`, `network.gateway.hostname`).
    pub external_hosts: Vec<String>,
}

/// The management-cluster Service of a tenant API server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceNames {
    /// Service name.
    pub name: String,
    /// Service namespace.
    pub namespace: String,
    /// DNS domain of the **management** cluster (usually `cluster.local`).
    pub cluster_domain: String,
    /// The Service's ClusterIP, once allocated.
    pub cluster_ip: Option<IpAddr>,
}

impl ApiServerNames {
    /// The SAN lists of the serving certificate, in this order, deduplicated, IPs as IP SANs
    /// and names as DNS SANs:
    ///
    /// - DNS: `localhost`, `kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
    ///   `kubernetes.default.svc.<tenant domain>` (kubeadm's names), the Service's
    ///   `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.<management domain>`, the
    ///   endpoint host if it is a name, the ingress/gateway hosts, the DNS `certSANs`;
    /// - IP: `127.0.0.1`, the first address of the primary service CIDR (kubeadm's
    ///   `GetAPIServerVirtualIP`), the Service ClusterIP, the endpoint host if it is an IP, the
    ///   IP `certSANs`.
    ///
    /// Loopback stands in for kubeadm's node name and advertise address: the controller-manager
    /// and scheduler run in the same pod and may reach the API server on localhost.
    ///
    /// # Errors
    /// A [`ValidationError`] naming `controlPlaneEndpoint.host`, `network.certSANs[i]` or
    /// `network.ingress.hostname` for an entry that is neither an IP nor a DNS name
    /// (including `host:port`).
    pub fn san_lists(
        &self,
        network: &TenantNetwork,
    ) -> Result<(Vec<String>, Vec<IpAddr>), ValidationError> {
        let mut dns = vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            format!("kubernetes.default.svc.{}", network.dns_domain()),
        ];
        let mut ips = vec![
            IpAddr::from([127, 0, 0, 1]),
            network.api_server_service_ip(),
        ];
        if let Some(svc) = &self.service {
            let (n, ns) = (&svc.name, &svc.namespace);
            dns.push(n.clone());
            dns.push(format!("{n}.{ns}"));
            dns.push(format!("{n}.{ns}.svc"));
            if !svc.cluster_domain.is_empty() {
                dns.push(format!("{n}.{ns}.svc.{}", svc.cluster_domain));
            }
            ips.extend(svc.cluster_ip);
        }
        let mut push = |value: &str, field: String| -> Result<(), ValidationError> {
            match classify_host(value) {
                Some(Host::Ip(ip)) => ips.push(ip),
                Some(Host::Name(n)) => dns.push(n),
                None => {
                    return Err(ValidationError::new(
                        field,
                        format!("{value:?} is neither an IP address nor a DNS name (no ports)"),
                    ));
                }
            }
            Ok(())
        };
        if !self.endpoint_host.is_empty() {
            push(&self.endpoint_host, "controlPlaneEndpoint.host".into())?;
        }
        for (i, h) in self.external_hosts.iter().enumerate() {
            push(h, format!("network.ingress.hostname[{i}]"))?;
        }
        for (i, h) in self.cert_sans.iter().enumerate() {
            push(h, format!("network.certSANs[{i}]"))?;
        }
        Ok((dedupe(dns), dedupe(ips)))
    }
}

enum Host {
    Ip(IpAddr),
    Name(String),
}

fn classify_host(value: &str) -> Option<Host> {
    let v = value.trim();
    let unbracketed = v
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(v);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        return Some(Host::Ip(ip));
    }
    let lower = v.to_ascii_lowercase();
    let rest = lower.strip_prefix("*.").unwrap_or(&lower);
    is_dns_subdomain(rest).then_some(Host::Name(lower))
}

fn dedupe<T: PartialEq>(items: Vec<T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(items.len());
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod key_tests {
    use super::*;

    /// P-256 first, and any other key as rcgen detects it: the same algorithm and public key
    /// as [`KeyPair::from_pem`] for every key kind the manager meets.
    #[test]
    fn key_pair_from_pem_reads_each_key_as_rcgen_does() {
        let keys = [
            KeyAlgorithm::EcdsaP256.generate("p256").unwrap(),
            KeyAlgorithm::Rsa2048.generate("rsa").unwrap(),
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap(),
            KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        ];
        for key in keys {
            let pem = key.serialize_pem();
            let ours = key_pair_from_pem(&pem).unwrap();
            let theirs = KeyPair::from_pem(&pem).unwrap();
            assert_eq!(ours.algorithm(), theirs.algorithm(), "{pem}");
            assert_eq!(ours.public_key_pem(), theirs.public_key_pem());
        }
        assert!(
            key_pair_from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
                .is_err()
        );
    }
}
