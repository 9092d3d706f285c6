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

mod authority;
pub mod inspect;
mod spec;
mod tenant;

use std::time::{Duration, SystemTime};

use crate::error::ValidationError;

pub use authority::{
    CertificateAuthority, DatastoreCa, LeafCertificate, ServiceAccountKeyPair, ca_cert_hash,
};
pub use spec::{ApiServerNames, CertAndKey, KeyAlgorithm, LeafRole, LeafSpec, ServiceNames, Usage};
pub use tenant::{LeafRequest, TenantLeaves, TenantPki, TenantRoots};

/// kubeadm's `CertificateBackdate`: `notBefore` is this much before `now`.
pub const BACKDATE: Duration = Duration::from_mins(5);
/// kubeadm's `CACertificateValidityPeriod` (10 years of 365 days).
pub const CA_VALIDITY: Duration = Duration::from_hours(10 * 365 * 24);
/// kubeadm's `CertificateValidityPeriod` (365 days), also CAPI's `DefaultCertDuration`.
pub const LEAF_VALIDITY: Duration = Duration::from_hours(365 * 24);

/// How long leaves are issued for and how early they are reissued, one policy for every leaf
/// of every tenant (the manager's `--leaf-certificate-validity-seconds` and
/// `--certificate-renewal-window-seconds`).
///
/// The default follows kubeadm and CAPI for the validity ([`LEAF_VALIDITY`], one year) and
/// reissues [`inspect::RENEWAL_WINDOW`] (30 days) before a leaf expires. A leaf is kept while
/// more than `renewal_window` of it is left, so the earliest instant any leaf of a tenant must be
/// reissued is `min(notAfter) − renewal_window` ([`LeafPolicy::renew_at`]); the reconciler looks
/// again at that instant, since nothing else produces an event then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafPolicy {
    validity: Duration,
    renewal_window: Duration,
}

impl Default for LeafPolicy {
    fn default() -> Self {
        Self {
            validity: LEAF_VALIDITY,
            renewal_window: inspect::RENEWAL_WINDOW,
        }
    }
}

impl LeafPolicy {
    /// A policy issuing leaves valid for `validity` (from issuance; `notBefore` is backdated
    /// by [`BACKDATE`] on top) and reissuing them once less than `renewal_window` is left.
    ///
    /// # Errors
    /// [`ValidationError`] naming the flag when `validity` is zero or `renewal_window` is not
    /// shorter than `validity` (every leaf would be reissued on every pass).
    pub fn new(validity: Duration, renewal_window: Duration) -> Result<Self, ValidationError> {
        if validity.is_zero() {
            return Err(ValidationError::new(
                "--leaf-certificate-validity-seconds",
                "must be more than 0",
            ));
        }
        if renewal_window >= validity {
            return Err(ValidationError::new(
                "--certificate-renewal-window-seconds",
                format!(
                    "{} s is not shorter than the leaf validity of {} s: every leaf would be \
                     reissued on every pass",
                    renewal_window.as_secs(),
                    validity.as_secs()
                ),
            ));
        }
        Ok(Self {
            validity,
            renewal_window,
        })
    }
    /// How long a new leaf is valid from its issuance.
    #[must_use]
    pub fn validity(&self) -> Duration {
        self.validity
    }
    /// A leaf with less than this left is reissued.
    #[must_use]
    pub fn renewal_window(&self) -> Duration {
        self.renewal_window
    }
    /// When a leaf whose validity ends at `not_after` must be reissued: `not_after −
    /// renewal_window` (the epoch if that lies before it).
    #[must_use]
    pub fn renew_at(&self, not_after: SystemTime) -> SystemTime {
        not_after
            .checked_sub(self.renewal_window)
            .unwrap_or(std::time::UNIX_EPOCH)
    }
}

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
