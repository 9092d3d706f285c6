//! Reading certificates back (x509-parser) and deciding whether a leaf is still good.
//!
//! [`decide_leaf`] returns a [`LeafDecision`], which has no "replace CA" variant, and its spec
//! argument is a [`LeafSpec`], which cannot describe a CA: replacing a CA is not expressible
//! through this module (ARCHITECTURE.md §5, style pattern 11).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::PublicKeyData;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

use super::spec::{CertAndKey, LeafSpec};
use crate::error::{Error, parse_err};

/// The first PEM block of `pem` (through its `-----END …-----` line, with a final newline):
/// the leaf of a stored chain. `pem` unchanged when it holds no end marker.
#[must_use]
pub fn first_pem_block(pem: &str) -> &str {
    const END: &str = "-----END ";
    pem.find(END)
        .and_then(|start| {
            let line_end = pem[start..].find('\n').map_or(pem.len(), |i| start + i + 1);
            pem.get(..line_end)
        })
        .unwrap_or(pem)
}

/// Each `-----BEGIN CERTIFICATE-----` … `-----END CERTIFICATE-----` block of `pem`, in order, as
/// text (a bundle split into its certificates; text between blocks is dropped).
#[must_use]
pub fn certificate_blocks(pem: &str) -> Vec<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = pem;
    while let Some(start) = rest.find(BEGIN) {
        let block = &rest[start..];
        let Some(end) = block.find(END) else { break };
        out.push(&block[..end + END.len()]);
        rest = &block[end + END.len()..];
    }
    out
}

/// The DER of each `CERTIFICATE` block of `pem`, in order (x509-parser's PEM reader: text
/// around the blocks and CRLF line ends are allowed); `None` when a block does not decode.
#[must_use]
pub fn certificates_der(pem: &str) -> Option<Vec<Vec<u8>>> {
    x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .filter(|p| p.as_ref().map_or(true, |p| p.label == "CERTIFICATE"))
        .map(|p| p.ok().map(|p| p.contents))
        .collect()
}

/// Leaves are reissued when less than this is left of their validity. kubeadm renews
/// certificates on upgrade; CAPI renews the kubeconfig's client certificate at half its life.
/// kamaji-rs reissues a leaf 30 days before it expires (the pod-template hash then rolls the
/// pods onto it).
pub const RENEWAL_WINDOW: Duration = Duration::from_hours(30 * 24);

/// What a certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateInfo {
    /// Subject common name (first CN), if any.
    pub common_name: Option<String>,
    /// Subject organisations, in order.
    pub organizations: Vec<String>,
    /// DER of the subject name.
    pub subject_der: Vec<u8>,
    /// DER of the issuer name.
    pub issuer_der: Vec<u8>,
    /// DNS SANs.
    pub dns_names: BTreeSet<String>,
    /// IP SANs.
    pub ip_addresses: BTreeSet<IpAddr>,
    /// Key usage extension, if present.
    pub key_usage: Option<KeyUsageFlags>,
    /// Extended key usage: serverAuth.
    pub server_auth: bool,
    /// Extended key usage: clientAuth.
    pub client_auth: bool,
    /// Basic constraints say CA.
    pub is_ca: bool,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// DER of the SubjectPublicKeyInfo.
    pub spki_der: Vec<u8>,
}

/// The key usage bits this project cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyUsageFlags {
    /// digitalSignature
    pub digital_signature: bool,
    /// keyEncipherment
    pub key_encipherment: bool,
    /// keyCertSign
    pub key_cert_sign: bool,
}

fn to_system_time(ts: i64) -> SystemTime {
    if ts >= 0 {
        UNIX_EPOCH + Duration::from_secs(ts.unsigned_abs())
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(ts.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}

fn with_cert<T>(
    pem: &str,
    what: &str,
    f: impl FnOnce(&X509Certificate<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    let (_, pem) = parse_x509_pem(pem.as_bytes()).map_err(|e| parse_err(what, e))?;
    if pem.label != "CERTIFICATE" {
        return Err(parse_err(
            what,
            format!("PEM block is {:?}, not CERTIFICATE", pem.label),
        ));
    }
    let cert = pem.parse_x509().map_err(|e| parse_err(what, e))?;
    f(&cert)
}

impl CertificateInfo {
    /// Parses the first certificate of a PEM string.
    ///
    /// # Errors
    /// [`Error::Parse`] when there is no parseable certificate or an extension is malformed.
    pub fn from_pem(pem: &str) -> Result<Self, Error> {
        with_cert(pem, "certificate", Self::from_x509)
    }

    fn from_x509(c: &X509Certificate<'_>) -> Result<Self, Error> {
        let what = "certificate extensions";
        let mut dns_names = BTreeSet::new();
        let mut ip_addresses = BTreeSet::new();
        if let Some(san) = c
            .subject_alternative_name()
            .map_err(|e| parse_err(what, e))?
        {
            for n in &san.value.general_names {
                match n {
                    GeneralName::DNSName(d) => {
                        dns_names.insert((*d).to_owned());
                    }
                    GeneralName::IPAddress(b) => {
                        let ip = match b.len() {
                            4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                            _ => None,
                        };
                        ip_addresses.insert(ip.ok_or_else(|| parse_err(what, "bad IP SAN"))?);
                    }
                    _ => {}
                }
            }
        }
        let key_usage = c
            .key_usage()
            .map_err(|e| parse_err(what, e))?
            .map(|k| KeyUsageFlags {
                digital_signature: k.value.digital_signature(),
                key_encipherment: k.value.key_encipherment(),
                key_cert_sign: k.value.key_cert_sign(),
            });
        let (server_auth, client_auth) = c
            .extended_key_usage()
            .map_err(|e| parse_err(what, e))?
            .map_or((false, false), |e| {
                (e.value.server_auth, e.value.client_auth)
            });
        let is_ca = c
            .basic_constraints()
            .map_err(|e| parse_err(what, e))?
            .is_some_and(|b| b.value.ca);
        let attr = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| {
            it.filter_map(|a| a.as_str().ok().map(ToOwned::to_owned))
                .collect::<Vec<_>>()
        };
        Ok(Self {
            common_name: attr(&mut c.subject().iter_common_name()).into_iter().next(),
            organizations: attr(&mut c.subject().iter_organization()),
            subject_der: c.subject().as_raw().to_vec(),
            issuer_der: c.issuer().as_raw().to_vec(),
            dns_names,
            ip_addresses,
            key_usage,
            server_auth,
            client_auth,
            is_ca,
            not_before: to_system_time(c.validity().not_before.timestamp()),
            not_after: to_system_time(c.validity().not_after.timestamp()),
            spki_der: c.public_key().raw.to_vec(),
        })
    }
}

/// True when `key_pem` is the private key of the certificate in `cert_pem` (their public keys
/// are equal).
///
/// # Errors
/// [`Error::Parse`] when either does not parse.
pub fn key_matches_certificate(cert_pem: &str, key_pem: &str) -> Result<bool, Error> {
    verdicts::remembered(verdicts::Check::KeyMatches, cert_pem, key_pem, || {
        let info = CertificateInfo::from_pem(cert_pem)?;
        let key =
            super::spec::key_pair_from_pem(key_pem).map_err(|e| parse_err("private key", e))?;
        Ok(key.subject_public_key_info() == info.spki_der)
    })
}

/// True when the certificate in `cert_pem` names `ca_cert_pem`'s subject as its issuer and its
/// signature verifies with the CA's public key.
///
/// # Errors
/// [`Error::Parse`] when either certificate does not parse.
pub fn is_signed_by(cert_pem: &str, ca_cert_pem: &str) -> Result<bool, Error> {
    verdicts::remembered(verdicts::Check::SignedBy, cert_pem, ca_cert_pem, || {
        with_cert(ca_cert_pem, "CA certificate", |ca| {
            with_cert(cert_pem, "certificate", |c| {
                Ok(c.issuer().as_raw() == ca.subject().as_raw()
                    && c.verify_signature(Some(ca.public_key())).is_ok())
            })
        })
    })
}

/// Remembers what issuing a leaf makes true by construction: `key_pem` is the key of
/// `cert_pem`, and the CA of `ca_cert_pem` signed it (a [`super::CertificateAuthority`]'s key
/// always belongs to its certificate: it was generated together, or `from_pem` checked it).
/// The next pass asks both of every leaf the pass before issued, and each asked afresh is a
/// public-key operation (2.6 % of the manager's CPU at 300 new tenants, `perf`, issue 16);
/// remembered, it is a hash.
pub(crate) fn remember_issued(cert_pem: &str, key_pem: &str, ca_cert_pem: &str) {
    verdicts::remember(verdicts::Check::KeyMatches, cert_pem, key_pem, true);
    verdicts::remember(verdicts::Check::SignedBy, cert_pem, ca_cert_pem, true);
}

/// The verdicts of [`key_matches_certificate`] and [`is_signed_by`], remembered per process.
///
/// Each costs a public-key operation (deriving the public key from a private key, verifying a
/// signature: about 0.1 ms for P-256, more for RSA), and a reconcile pass asks both of every
/// stored leaf although the Secrets rarely change: at 1,000 tenants they were 15 % of the
/// manager's CPU (`perf`, issue 16). Both are pure functions of their inputs, so a verdict
/// is kept under the SHA-256 of the check and its inputs (length-prefixed), and a changed
/// Secret or CA is new input, checked afresh. Errors are not kept. At most
/// [`VERDICTS_KEPT`](verdicts::VERDICTS_KEPT) verdicts (32-byte key + 1 byte each); when full, the
/// memory is emptied and fills again.
mod verdicts {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};

    use sha2::{Digest as _, Sha256};

    use crate::error::Error;

    /// The most verdicts kept: two per leaf for 4,000 tenants of about 10 leaves.
    pub const VERDICTS_KEPT: usize = 80_000;

    /// Which check a verdict answers.
    #[derive(Clone, Copy)]
    pub enum Check {
        KeyMatches,
        SignedBy,
    }

    static VERDICTS: LazyLock<Mutex<HashMap<[u8; 32], bool>>> = LazyLock::new(Mutex::default);

    /// `check(a, b)`'s verdict, computed by `compute` unless remembered.
    pub fn remembered(
        check: Check,
        a: &str,
        b: &str,
        compute: impl FnOnce() -> Result<bool, Error>,
    ) -> Result<bool, Error> {
        let key = key(check, a, b);
        if let Some(v) = VERDICTS.lock().ok().and_then(|m| m.get(&key).copied()) {
            return Ok(v);
        }
        let verdict = compute()?;
        keep(key, verdict);
        Ok(verdict)
    }

    /// The verdict kept for `check(a, b)`, if any.
    #[cfg(test)]
    pub fn known(check: Check, a: &str, b: &str) -> Option<bool> {
        VERDICTS.lock().ok()?.get(&key(check, a, b)).copied()
    }

    /// Keeps `verdict` as `check(a, b)`'s, known without computing it.
    pub fn remember(check: Check, a: &str, b: &str, verdict: bool) {
        keep(key(check, a, b), verdict);
    }

    fn key(check: Check, a: &str, b: &str) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update([check as u8]);
        hash.update((a.len() as u64).to_be_bytes());
        hash.update(a.as_bytes());
        hash.update(b.as_bytes());
        hash.finalize().into()
    }

    fn keep(key: [u8; 32], verdict: bool) {
        if let Ok(mut m) = VERDICTS.lock() {
            if m.len() >= VERDICTS_KEPT {
                m.clear();
            }
            m.insert(key, verdict);
        }
    }
}

/// Why a leaf must be issued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReissueReason {
    /// No certificate exists yet.
    Missing,
    /// The certificate or key does not parse.
    Unparseable,
    /// The key does not belong to the certificate.
    KeyMismatch,
    /// It was not signed by the current CA (the CA changed, or it was never ours).
    IssuerChanged,
    /// Subject (CN / O) differs from what the role needs now.
    SubjectChanged,
    /// The set of DNS or IP SANs differs (endpoint, certSANs, Service IP changed).
    SansChanged,
    /// Key usages or extended key usages differ from kubeadm's for the role.
    UsageChanged,
    /// Less than the renewal window of validity left, or already expired.
    ExpiresSoon,
    /// Not valid yet at `now` (clock skew beyond the backdate, or a bogus certificate).
    NotYetValid,
}

/// The only outcomes for a leaf: there is no variant that touches a CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeafDecision {
    /// The existing certificate and key are good: keep them.
    Keep,
    /// Issue a new leaf (new key) from the current CA.
    Reissue(ReissueReason),
}

/// Decides whether an existing leaf for `desired` can be kept.
///
/// Checks in order: present → parses (certificate and key) → key matches → signed by `ca` →
/// subject (CN and O) → SAN set (order-insensitive) → key usages / EKUs → `now` within
/// validity → more than `renewal_window` left. The first failing check is the reason.
///
/// `ca` is borrowed immutably and the result is a [`LeafDecision`]: a CA is never replaced by
/// this decision, whatever the inputs.
#[must_use]
pub fn decide_leaf(
    existing: Option<&CertAndKey>,
    desired: &LeafSpec,
    issuer_cert_pem: &str,
    now: SystemTime,
    renewal_window: Duration,
) -> LeafDecision {
    use LeafDecision::{Keep, Reissue};
    let Some(existing) = existing else {
        return Reissue(ReissueReason::Missing);
    };
    let Ok(info) = CertificateInfo::from_pem(existing.cert_pem()) else {
        return Reissue(ReissueReason::Unparseable);
    };
    match key_matches_certificate(existing.cert_pem(), existing.key_pem()) {
        Err(_) => return Reissue(ReissueReason::Unparseable),
        Ok(false) => return Reissue(ReissueReason::KeyMismatch),
        Ok(true) => {}
    }
    if !is_signed_by(existing.cert_pem(), issuer_cert_pem).unwrap_or(false) {
        return Reissue(ReissueReason::IssuerChanged);
    }
    if info.common_name.as_deref() != Some(desired.common_name())
        || info.organizations != desired.organizations()
    {
        return Reissue(ReissueReason::SubjectChanged);
    }
    let want_dns: BTreeSet<String> = desired.dns_names().iter().cloned().collect();
    let want_ips: BTreeSet<IpAddr> = desired.ip_addresses().iter().copied().collect();
    if info.dns_names != want_dns || info.ip_addresses != want_ips {
        return Reissue(ReissueReason::SansChanged);
    }
    let ku_ok = info
        .key_usage
        .is_some_and(|k| k.digital_signature && k.key_encipherment && !k.key_cert_sign);
    if !ku_ok || info.is_ca || (info.server_auth, info.client_auth) != desired.usage().flags() {
        return Reissue(ReissueReason::UsageChanged);
    }
    if now < info.not_before {
        return Reissue(ReissueReason::NotYetValid);
    }
    match info.not_after.duration_since(now) {
        Ok(left) if left > renewal_window => Keep,
        _ => Reissue(ReissueReason::ExpiresSoon),
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::verdicts::{Check, known};
    use super::*;
    use crate::pki::{CertificateAuthority, KeyAlgorithm, LeafSpec};

    /// Issuing a leaf keeps both verdicts the next pass asks of it (its key matches, its CA
    /// signed it) for exactly that leaf, key and CA; another CA is still checked, and refused.
    #[test]
    fn an_issued_leaf_is_remembered_as_matching_its_key_and_signed_by_its_ca() {
        let now = SystemTime::now();
        let ca =
            CertificateAuthority::generate("kubernetes", KeyAlgorithm::EcdsaP256, now).unwrap();
        let other =
            CertificateAuthority::generate("kubernetes", KeyAlgorithm::EcdsaP256, now).unwrap();
        let leaf = ca
            .issue(&LeafSpec::admin(), KeyAlgorithm::EcdsaP256, now)
            .unwrap();
        let (cert, key) = (leaf.cert_pem(), leaf.key_pem());
        assert_eq!(known(Check::KeyMatches, cert, key), Some(true));
        assert_eq!(known(Check::SignedBy, cert, ca.cert_pem()), Some(true));
        assert_eq!(known(Check::SignedBy, cert, other.cert_pem()), None);
        assert!(is_signed_by(cert, ca.cert_pem()).unwrap());
        assert!(!is_signed_by(cert, other.cert_pem()).unwrap());
        assert!(key_matches_certificate(cert, key).unwrap());
        let stranger = other
            .issue(&LeafSpec::admin(), KeyAlgorithm::EcdsaP256, now)
            .unwrap();
        assert!(!key_matches_certificate(cert, stranger.key_pem()).unwrap());
    }
}
