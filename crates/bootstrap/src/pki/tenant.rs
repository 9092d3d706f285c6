//! A whole tenant PKI in one call: the roots generated once and every leaf issued from them.

use std::time::SystemTime;

use super::authority::{CertificateAuthority, DatastoreCa, LeafCertificate, ServiceAccountKeyPair};
use super::spec::{KeyAlgorithm, LeafSpec};
use super::{CA_COMMON_NAME, FRONT_PROXY_CA_COMMON_NAME};
use crate::error::Error;

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
                Some((dca, cn)) => Some(dca.issue_client(cn, alg, now, super::LEAF_VALIDITY)?),
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
