//! The tenant PKI, kubeadm-compatible.
//!
//! What kubeadm issues (`cmd/kubeadm/app/phases/certs/certlist.go`,
//! `cmd/kubeadm/app/phases/kubeconfig/kubeconfig.go`, `cmd/kubeadm/app/util/pkiutil`, v1.36):
//!
//! | Role | Signed by | Subject | Key usage | Extended key usage | SANs |
//! |---|---|---|---|---|---|
//! | cluster CA | self | `CN=kubernetes` | digitalSignature, keyEncipherment, keyCertSign | — | DNS `kubernetes` |
//! | front-proxy CA | self | `CN=front-proxy-ca` | same | — | DNS `front-proxy-ca` |
//! | kube-apiserver | CA | `CN=kube-apiserver` | digitalSignature, keyEncipherment | serverAuth | see [`ApiServerNames`] |
//! | apiserver-kubelet-client | CA | `CN=kube-apiserver-kubelet-client` | same | clientAuth | — |
//! | front-proxy-client | front-proxy CA | `CN=front-proxy-client` | same | clientAuth | — |
//! | datastore (etcd) client | DataStore CA | `CN=kube-apiserver-etcd-client` (or the caller's name) | same | clientAuth | — |
//! | controller-manager | CA | `CN=system:kube-controller-manager` | same | clientAuth | — |
//! | scheduler | CA | `CN=system:kube-scheduler` | same | clientAuth | — |
//! | admin | CA | `CN=kubernetes-admin, O=kubeadm:cluster-admins` | same | clientAuth | — |
//! | super-admin | CA | `CN=kubernetes-super-admin, O=system:masters` | same | clientAuth | — |
//!
//! Since kubeadm 1.36.1 the apiserver-kubelet-client certificate carries no organisation (it
//! used to be `O=system:masters`); its rights come from the ClusterRoleBinding
//! `kubeadm:apiserver-kubelet-client` → `system:kubelet-api-admin`, which
//! [`crate::kubeadm::rbac`] renders for every tenant version. CAs get basic constraints
//! `CA:TRUE` (critical), leaves `CA:FALSE`; leaves carry an authority key identifier matching the
//! CA's subject key identifier. Validity: `notBefore = now − 5 min` (kubeadm's backdate),
//! `notAfter = now + 10 years` for CAs and `now + 1 year` for leaves. Serial numbers are derived
//! from the new public key and the issuance time, so everything except the keys (and ECDSA
//! signatures) is a deterministic function of the inputs.

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::error::{Error, ValidationError, gen_err, parse_err};
use crate::inspect;
use crate::network::{TenantNetwork, is_dns_subdomain};

/// kubeadm's `CertificateBackdate`: `notBefore` is this much before `now`.
pub const BACKDATE: Duration = Duration::from_mins(5);
/// kubeadm's `CACertificateValidityPeriod` (10 years of 365 days).
pub const CA_VALIDITY: Duration = Duration::from_hours(10 * 365 * 24);
/// kubeadm's `CertificateValidityPeriod` (365 days), also CAPI's `DefaultCertDuration`.
pub const LEAF_VALIDITY: Duration = Duration::from_hours(365 * 24);

/// Common name of the cluster CA.
pub const CA_COMMON_NAME: &str = "kubernetes";
/// Common name of the front-proxy CA.
pub const FRONT_PROXY_CA_COMMON_NAME: &str = "front-proxy-ca";
/// The group of the admin identity handed to users (bound to `cluster-admin` in the tenant).
pub const CLUSTER_ADMINS_GROUP: &str = "kubeadm:cluster-admins";
/// The built-in superuser group; only the never-published super-admin identity carries it.
pub const SYSTEM_MASTERS_GROUP: &str = "system:masters";
/// kubeadm's common name for the API server's etcd client certificate.
pub const DATASTORE_CLIENT_COMMON_NAME: &str = "kube-apiserver-etcd-client";

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

/// A certificate authority whose certificate and key were checked to belong together.
///
/// Built once by [`CertificateAuthority::generate`] and afterwards only loaded from the
/// observed Secret with [`CertificateAuthority::from_pem`]. Nothing in this crate decides to
/// replace one: [`inspect::decide_leaf`] can only return leaf decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateAuthority {
    material: CertAndKey,
}

impl CertificateAuthority {
    /// Generates a self-signed CA the way kubeadm does (`NewSelfSignedCACert`): subject
    /// `CN=<common_name>`, DNS SAN `<common_name>`, key usages digitalSignature,
    /// keyEncipherment and keyCertSign, `CA:TRUE`, valid from `now − 5 min` for 10 years.
    ///
    /// # Errors
    /// [`Error::Generate`] if key generation or signing fails.
    pub fn generate(
        common_name: &str,
        algorithm: KeyAlgorithm,
        now: SystemTime,
    ) -> Result<Self, Error> {
        let what = format!("CA {common_name}");
        let key = algorithm.generate(&what)?;
        let mut params = CertificateParams::default();
        set_validity(&mut params, now, CA_VALIDITY);
        params.distinguished_name = distinguished_name(common_name, &[]);
        params.subject_alt_names = vec![SanType::DnsName(
            common_name.try_into().map_err(gen_err(&what))?,
        )];
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyCertSign,
        ];
        params.serial_number = Some(serial(&key, common_name, now));
        let cert = params.self_signed(&key).map_err(gen_err(&what))?;
        Ok(Self {
            material: CertAndKey::new(cert.pem(), key.serialize_pem()),
        })
    }

    /// Loads an existing CA (e.g. from the `<cluster>-ca` Secret's `tls.crt` / `tls.key`).
    ///
    /// # Errors
    /// [`Error::Parse`] if either PEM does not parse; [`Error::KeyMaterial`] if the certificate
    /// is not a CA (basic constraints) or the key does not belong to it.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let info = inspect::CertificateInfo::from_pem(cert_pem)?;
        if !info.is_ca {
            return Err(Error::KeyMaterial {
                what: "CA certificate".into(),
                reason: "basic constraints do not mark it as a CA".into(),
            });
        }
        if !inspect::key_matches_certificate(cert_pem, key_pem)? {
            return Err(Error::KeyMaterial {
                what: "CA certificate".into(),
                reason: "the private key does not belong to the certificate".into(),
            });
        }
        Ok(Self {
            material: CertAndKey::new(cert_pem, key_pem),
        })
    }

    /// The CA certificate, PEM (what goes into `ca.crt`, `certificate-authority-data`).
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        self.material.cert_pem()
    }

    /// The CA private key, PEM. Secret.
    #[must_use]
    pub fn key_pem(&self) -> &str {
        self.material.key_pem()
    }

    /// The certificate and key together.
    #[must_use]
    pub fn material(&self) -> &CertAndKey {
        &self.material
    }

    /// `sha256:<hex>` of this CA's SubjectPublicKeyInfo, for `--discovery-token-ca-cert-hash`.
    ///
    /// # Errors
    /// [`Error::Parse`] (cannot happen for a CA built by this type).
    pub fn ca_hash(&self) -> Result<String, Error> {
        ca_cert_hash(self.cert_pem())
    }

    /// Issues a leaf certificate for `spec` with a fresh key of `algorithm`, valid from
    /// `now − 5 min` to `now + 1 year`, with the key usages of [`LeafSpec`].
    ///
    /// # Errors
    /// [`Error::Generate`] if key generation or signing fails; [`Error::Parse`] if the stored
    /// CA material cannot be read back.
    pub fn issue(
        &self,
        spec: &LeafSpec,
        algorithm: KeyAlgorithm,
        now: SystemTime,
    ) -> Result<LeafCertificate, Error> {
        let what = spec.common_name.as_str();
        let ca_key = KeyPair::from_pem(self.key_pem()).map_err(|e| parse_err("CA key", e))?;
        let issuer = Issuer::from_ca_cert_pem(self.cert_pem(), &ca_key)
            .map_err(|e| parse_err("CA certificate", e))?;
        let key = algorithm.generate(what)?;
        let mut params = CertificateParams::default();
        set_validity(&mut params, now, LEAF_VALIDITY);
        params.distinguished_name = distinguished_name(&spec.common_name, &spec.organizations);
        let mut sans = Vec::new();
        for d in &spec.dns_names {
            sans.push(SanType::DnsName(
                d.as_str().try_into().map_err(gen_err(what))?,
            ));
        }
        sans.extend(spec.ip_addresses.iter().map(|ip| SanType::IpAddress(*ip)));
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = spec.usage.purposes();
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(serial(&key, &spec.common_name, now));
        let cert = params.signed_by(&key, &issuer).map_err(gen_err(what))?;
        Ok(LeafCertificate {
            role: spec.role,
            material: CertAndKey::new(cert.pem(), key.serialize_pem()),
        })
    }
}

/// A leaf certificate and its key, tagged with the role it was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafCertificate {
    role: LeafRole,
    material: CertAndKey,
}

impl LeafCertificate {
    /// Wraps observed material (e.g. from a Secret) for `role`; check it with
    /// [`inspect::decide_leaf`] before use.
    #[must_use]
    pub fn from_pem(role: LeafRole, cert_pem: &str, key_pem: &str) -> Self {
        Self {
            role,
            material: CertAndKey::new(cert_pem, key_pem),
        }
    }
    /// The role this certificate serves.
    #[must_use]
    pub fn role(&self) -> LeafRole {
        self.role
    }
    /// The certificate, PEM.
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        self.material.cert_pem()
    }
    /// The private key, PEM. Secret.
    #[must_use]
    pub fn key_pem(&self) -> &str {
        self.material.key_pem()
    }
    /// The certificate and key together.
    #[must_use]
    pub fn material(&self) -> &CertAndKey {
        &self.material
    }
}

/// The CA of a shared DataStore. It can only sign datastore client certificates and show its
/// certificate: there is deliberately no way to get its private key back out of this type, so a
/// tenant's Secrets (built from [`CertificateAuthority`] / [`LeafCertificate`]) can never contain
/// it. Every tenant on the datastore shares this key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatastoreCa(CertificateAuthority);

impl DatastoreCa {
    /// Loads the DataStore's CA certificate and key (both PEM).
    ///
    /// # Errors
    /// As [`CertificateAuthority::from_pem`].
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        CertificateAuthority::from_pem(cert_pem, key_pem).map(Self)
    }
    /// The DataStore CA certificate, PEM (the API server's `--etcd-cafile`).
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        self.0.cert_pem()
    }
    /// Issues the API server's datastore client certificate ([`LeafSpec::datastore_client`]).
    ///
    /// # Errors
    /// As [`CertificateAuthority::issue`].
    pub fn issue_client(
        &self,
        common_name: &str,
        algorithm: KeyAlgorithm,
        now: SystemTime,
    ) -> Result<LeafCertificate, Error> {
        self.0
            .issue(&LeafSpec::datastore_client(common_name), algorithm, now)
    }
}

/// The service-account token signing key pair (`sa.key` / `sa.pub`).
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountKeyPair {
    public_pem: String,
    private_pem: String,
}

impl ServiceAccountKeyPair {
    /// Generates a key pair of `algorithm` (kubeadm uses the cluster's encryption algorithm).
    ///
    /// # Errors
    /// [`Error::Generate`] if key generation fails.
    pub fn generate(algorithm: KeyAlgorithm) -> Result<Self, Error> {
        let key = algorithm.generate("service-account key")?;
        Ok(Self {
            public_pem: key.public_key_pem(),
            private_pem: key.serialize_pem(),
        })
    }
    /// Loads a private key (PEM: PKCS#8, PKCS#1 or SEC1) and derives its public key.
    ///
    /// # Errors
    /// [`Error::Parse`] if the key does not parse.
    pub fn from_private_pem(private_pem: &str) -> Result<Self, Error> {
        let key = KeyPair::from_pem(private_pem)
            .map_err(|e| parse_err("service-account private key", e))?;
        Ok(Self {
            public_pem: key.public_key_pem(),
            private_pem: private_pem.to_owned(),
        })
    }
    /// The public key, PEM `PUBLIC KEY` (`--service-account-key-file`; `tls.crt` of `-sa`).
    #[must_use]
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }
    /// The private key, PEM (`--service-account-signing-key-file`; `tls.key` of `-sa`). Secret.
    #[must_use]
    pub fn private_pem(&self) -> &str {
        &self.private_pem
    }
}

impl fmt::Debug for ServiceAccountKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKeyPair")
            .field("public_pem", &self.public_pem)
            .field("private_pem", &"<redacted>")
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
    fn purposes(self) -> Vec<ExtendedKeyUsagePurpose> {
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

fn distinguished_name(cn: &str, orgs: &[String]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn to_offset(t: SystemTime) -> OffsetDateTime {
    // Certificates carry whole seconds.
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    OffsetDateTime::from_unix_timestamp(secs).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn set_validity(params: &mut CertificateParams, now: SystemTime, validity: Duration) {
    let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
    let not_after = now.checked_add(validity).unwrap_or(now);
    params.not_before = to_offset(not_before);
    params.not_after = to_offset(not_after);
}

fn serial(key: &KeyPair, cn: &str, now: SystemTime) -> SerialNumber {
    let mut h = Sha256::new();
    h.update(key.subject_public_key_info());
    h.update(cn.as_bytes());
    h.update(to_offset(now).unix_timestamp().to_be_bytes());
    let mut bytes = h.finalize()[..16].to_vec();
    bytes[0] &= 0x7f; // positive
    bytes[0] |= 0x01; // non-zero, fixed length
    SerialNumber::from_slice(&bytes)
}

/// `sha256:<lower-case hex>` of the DER SubjectPublicKeyInfo of the (first) certificate in
/// `cert_pem`: the value `kubeadm join --discovery-token-ca-cert-hash` and CABPK's
/// `caCertHashes` expect.
///
/// # Errors
/// [`Error::Parse`] if `cert_pem` holds no parseable certificate.
pub fn ca_cert_hash(cert_pem: &str) -> Result<String, Error> {
    let info = inspect::CertificateInfo::from_pem(cert_pem)?;
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(&info.spki_der))
    ))
}

/// The CAs and key pair that are generated once per tenant and never regenerated while their
/// Secret exists (`<cluster>-ca`, `<cluster>-proxy`, `<cluster>-sa`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRoots {
    /// The cluster CA (`CN=kubernetes`).
    pub ca: CertificateAuthority,
    /// The front-proxy CA (`CN=front-proxy-ca`).
    pub front_proxy_ca: CertificateAuthority,
    /// The service-account signing key pair.
    pub service_account: ServiceAccountKeyPair,
}

impl TenantRoots {
    /// Generates all three. The reconciler calls this only when none exist; each existing one
    /// is loaded with [`CertificateAuthority::from_pem`] /
    /// [`ServiceAccountKeyPair::from_private_pem`] instead.
    ///
    /// # Errors
    /// [`Error::Generate`].
    pub fn generate(algorithm: KeyAlgorithm, now: SystemTime) -> Result<Self, Error> {
        Ok(Self {
            ca: CertificateAuthority::generate(CA_COMMON_NAME, algorithm, now)?,
            front_proxy_ca: CertificateAuthority::generate(
                FRONT_PROXY_CA_COMMON_NAME,
                algorithm,
                now,
            )?,
            service_account: ServiceAccountKeyPair::generate(algorithm)?,
        })
    }
}

/// Every leaf certificate a tenant control plane uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantLeaves {
    /// kube-apiserver serving certificate.
    pub api_server: LeafCertificate,
    /// kube-apiserver → kubelet client.
    pub api_server_kubelet_client: LeafCertificate,
    /// kube-apiserver → aggregated APIs (front proxy).
    pub front_proxy_client: LeafCertificate,
    /// kube-apiserver → datastore client, when the datastore uses TLS client certificates.
    pub datastore_client: Option<LeafCertificate>,
    /// kube-controller-manager identity.
    pub controller_manager: LeafCertificate,
    /// kube-scheduler identity.
    pub scheduler: LeafCertificate,
    /// User admin identity (`kubeadm:cluster-admins`).
    pub admin: LeafCertificate,
    /// Provider-only `system:masters` identity.
    pub super_admin: LeafCertificate,
}

/// What [`TenantLeaves::issue`] needs besides the roots.
#[derive(Debug, Clone, Copy)]
pub struct LeafRequest<'a> {
    /// Algorithm of the new leaf keys.
    pub algorithm: KeyAlgorithm,
    /// Issuance time.
    pub now: SystemTime,
    /// The serving certificate spec ([`LeafSpec::api_server`]).
    pub api_server: &'a LeafSpec,
    /// The DataStore CA and the client common name, if the datastore uses client certificates.
    pub datastore: Option<(&'a DatastoreCa, &'a str)>,
}

impl TenantLeaves {
    /// Issues every leaf from `roots` (and the DataStore CA).
    ///
    /// # Errors
    /// As [`CertificateAuthority::issue`].
    pub fn issue(roots: &TenantRoots, req: &LeafRequest<'_>) -> Result<Self, Error> {
        let (alg, now) = (req.algorithm, req.now);
        let ca = &roots.ca;
        Ok(Self {
            api_server: ca.issue(req.api_server, alg, now)?,
            api_server_kubelet_client: ca.issue(
                &LeafSpec::api_server_kubelet_client(),
                alg,
                now,
            )?,
            front_proxy_client: roots.front_proxy_ca.issue(
                &LeafSpec::front_proxy_client(),
                alg,
                now,
            )?,
            datastore_client: match req.datastore {
                Some((dca, cn)) => Some(dca.issue_client(cn, alg, now)?),
                None => None,
            },
            controller_manager: ca.issue(&LeafSpec::controller_manager(), alg, now)?,
            scheduler: ca.issue(&LeafSpec::scheduler(), alg, now)?,
            admin: ca.issue(&LeafSpec::admin(), alg, now)?,
            super_admin: ca.issue(&LeafSpec::super_admin(), alg, now)?,
        })
    }
}

/// A complete tenant PKI: roots and leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPki {
    /// CAs and the service-account key pair.
    pub roots: TenantRoots,
    /// Leaf certificates.
    pub leaves: TenantLeaves,
}

impl TenantPki {
    /// Generates a whole tenant PKI from nothing (first reconcile of a new tenant, benches,
    /// tests).
    ///
    /// # Errors
    /// [`Error::Generate`].
    pub fn generate(req: &LeafRequest<'_>) -> Result<Self, Error> {
        let roots = TenantRoots::generate(req.algorithm, req.now)?;
        let leaves = TenantLeaves::issue(&roots, req)?;
        Ok(Self { roots, leaves })
    }
}
