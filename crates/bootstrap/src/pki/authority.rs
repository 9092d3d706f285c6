//! Making and loading keys and certificates: certificate authorities, leaves issued by them,
//! the DataStore CA and the service-account key pair.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::inspect;
use super::spec::{CertAndKey, KeyAlgorithm, LeafRole, LeafSpec, key_pair_from_pem};
use super::{BACKDATE, CA_VALIDITY, LEAF_VALIDITY};
use crate::error::{Error, gen_err, parse_err};

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

    /// `successor`'s certificate issued by this CA (a cross-signed certificate, PEM): the
    /// subject (`CN` only, as [`Self::generate`] makes it), key, key identifier, key usages and
    /// `CA:TRUE` of `successor`, valid from its start until the
    /// earlier of the two CAs' ends, with an authority key identifier naming this CA. Served
    /// after a leaf `successor` issued, it lets a client that trusts only this CA verify the
    /// leaf (leaf → cross-signed successor → this CA) during a CA rotation, while a client
    /// that trusts `successor` verifies the leaf directly (RFC 4158 cross-certification).
    ///
    /// # Errors
    /// [`Error::Parse`] when either CA's material does not load; [`Error::Generate`] when
    /// signing fails.
    pub fn cross_sign(&self, successor: &Self) -> Result<String, Error> {
        let what = "cross-signed CA certificate";
        let own_key = key_pair_from_pem(self.key_pem()).map_err(|e| parse_err("CA key", e))?;
        let issuer = Issuer::from_ca_cert_pem(self.cert_pem(), &own_key)
            .map_err(|e| parse_err("CA certificate", e))?;
        let successor_key =
            key_pair_from_pem(successor.key_pem()).map_err(|e| parse_err("CA key", e))?;
        let own_end = inspect::CertificateInfo::from_pem(self.cert_pem())?.not_after;
        let info = inspect::CertificateInfo::from_pem(successor.cert_pem())?;
        let common_name = info.common_name.clone().unwrap_or_default();
        // As `generate` made the successor (the same subject and, from the same key, the same
        // subject key identifier), under a serial of its own: the issuer's name may equal
        // the successor's, and two certificates must not share issuer and serial.
        let mut params = CertificateParams::default();
        params.not_before = to_offset(info.not_before);
        params.not_after = to_offset(info.not_after.min(own_end));
        params.distinguished_name = distinguished_name(&common_name, &[]);
        params.subject_alt_names = vec![SanType::DnsName(
            common_name.as_str().try_into().map_err(gen_err(what))?,
        )];
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyCertSign,
        ];
        params.serial_number = Some(serial(
            &successor_key,
            &format!("{common_name} cross-signed"),
            info.not_before,
        ));
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&successor_key, &issuer)
            .map_err(gen_err(what))?;
        Ok(cert.pem())
    }

    /// Issues a leaf certificate for `spec` with a fresh key of `algorithm`, valid from
    /// `now − 5 min` to `now + 1 year` ([`LEAF_VALIDITY`]), with the key usages of
    /// [`LeafSpec`].
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
        self.issue_valid_for(spec, algorithm, now, LEAF_VALIDITY)
    }

    /// As [`CertificateAuthority::issue`], valid until `now + validity`
    /// ([`super::LeafPolicy::validity`]).
    ///
    /// # Errors
    /// As [`CertificateAuthority::issue`].
    pub fn issue_valid_for(
        &self,
        spec: &LeafSpec,
        algorithm: KeyAlgorithm,
        now: SystemTime,
        validity: Duration,
    ) -> Result<LeafCertificate, Error> {
        let what = spec.common_name();
        let ca_key = key_pair_from_pem(self.key_pem()).map_err(|e| parse_err("CA key", e))?;
        let issuer = Issuer::from_ca_cert_pem(self.cert_pem(), &ca_key)
            .map_err(|e| parse_err("CA certificate", e))?;
        let key = algorithm.generate(what)?;
        let mut params = CertificateParams::default();
        set_validity(&mut params, now, validity);
        params.distinguished_name = distinguished_name(spec.common_name(), spec.organizations());
        let mut sans = Vec::new();
        for d in spec.dns_names() {
            sans.push(SanType::DnsName(
                d.as_str().try_into().map_err(gen_err(what))?,
            ));
        }
        sans.extend(spec.ip_addresses().iter().map(|ip| SanType::IpAddress(*ip)));
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = spec.usage().purposes();
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(serial(&key, spec.common_name(), now));
        let cert = params.signed_by(&key, &issuer).map_err(gen_err(what))?;
        let material = CertAndKey::new(cert.pem(), key.serialize_pem());
        inspect::remember_issued(material.cert_pem(), material.key_pem(), self.cert_pem());
        Ok(LeafCertificate {
            role: spec.role(),
            material,
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
/// certificates: there is deliberately no way to get its private key back out of this type, so
/// a tenant's Secrets (built from [`CertificateAuthority`] / [`LeafCertificate`]) can never
/// contain it. Every tenant on the datastore shares this key.
///
/// The DataStore's `tlsConfig.certificateAuthority.certificate` may be a bundle while the
/// datastore's owner rotates its CA: the certificate the private key belongs to signs
/// ([`DatastoreCa::cert_pem`]), and the whole bundle is what the API server trusts for the
/// datastore's serving certificate ([`DatastoreCa::trust_pem`], `--etcd-cafile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatastoreCa {
    signer: CertificateAuthority,
    trust: String,
}

impl DatastoreCa {
    /// Loads the DataStore's CA: `cert_pem` is one CA certificate or a bundle of them (PEM),
    /// `key_pem` the private key of one of them.
    ///
    /// # Errors
    /// As [`CertificateAuthority::from_pem`] for a single certificate; for a bundle,
    /// [`Error::KeyMaterial`] when the key belongs to none of its certificates, and as
    /// [`CertificateAuthority::from_pem`] for the one it belongs to.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, Error> {
        let signer = Self::signer_of(cert_pem, key_pem)?;
        Ok(Self {
            signer: CertificateAuthority::from_pem(signer, key_pem)?,
            trust: cert_pem.to_owned(),
        })
    }

    /// The certificate of `bundle` that `key_pem` belongs to (the bundle itself when it holds
    /// one certificate: [`CertificateAuthority::from_pem`] then says what is wrong with it).
    ///
    /// # Errors
    /// [`Error::Parse`] when the key or a certificate does not parse; [`Error::KeyMaterial`]
    /// when the key belongs to none of several certificates.
    pub fn signer_of<'a>(bundle: &'a str, key_pem: &str) -> Result<&'a str, Error> {
        let blocks = inspect::certificate_blocks(bundle);
        if blocks.len() < 2 {
            return Ok(bundle);
        }
        for block in &blocks {
            if inspect::key_matches_certificate(block, key_pem)? {
                return Ok(block);
            }
        }
        Err(Error::KeyMaterial {
            what: "CA certificate bundle".into(),
            reason: format!(
                "the private key belongs to none of its {} certificates",
                blocks.len()
            ),
        })
    }

    /// The DataStore CA certificate that signs, PEM.
    #[must_use]
    pub fn cert_pem(&self) -> &str {
        self.signer.cert_pem()
    }

    /// Every CA certificate of the DataStore as given (one, or a bundle while it rotates), PEM:
    /// the API server's `--etcd-cafile`.
    #[must_use]
    pub fn trust_pem(&self) -> &str {
        &self.trust
    }

    /// Issues the API server's datastore client certificate ([`LeafSpec::datastore_client`]),
    /// valid until `now + validity`.
    ///
    /// # Errors
    /// As [`CertificateAuthority::issue`].
    pub fn issue_client(
        &self,
        common_name: &str,
        algorithm: KeyAlgorithm,
        now: SystemTime,
        validity: Duration,
    ) -> Result<LeafCertificate, Error> {
        self.signer.issue_valid_for(
            &LeafSpec::datastore_client(common_name),
            algorithm,
            now,
            validity,
        )
    }

    /// Issues the provider's own client certificate ([`LeafSpec::datastore_admin`]), valid
    /// until `now + validity`; kept in memory only.
    ///
    /// # Errors
    /// As [`CertificateAuthority::issue`].
    pub fn issue_admin(
        &self,
        algorithm: KeyAlgorithm,
        now: SystemTime,
        validity: Duration,
    ) -> Result<LeafCertificate, Error> {
        self.signer
            .issue_valid_for(&LeafSpec::datastore_admin(), algorithm, now, validity)
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
        let key = key_pair_from_pem(private_pem)
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

fn distinguished_name(cn: &str, orgs: &[String]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in orgs {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    if !cn.is_empty() {
        dn.push(DnType::CommonName, cn);
    }
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
