//! Key material of one tenant: roots read back from their Secrets (never regenerated while the
//! Secret exists) and leaves kept or reissued per kamaji-bootstrap's decision.
//!
//! The roots (`<cluster>-ca`, `<cluster>-proxy`, `<cluster>-sa`) are *observed inputs*: when one
//! is missing the apply step generates it once and creates its Secret with create-if-absent
//! (a 409 means another writer won: the next pass reads theirs). Leaves are stored in Secrets
//! too and are reissued only when kamaji-bootstrap's `decide_leaf` says so (missing, SANs or
//! subject changed, issuer changed, expiring within the renewal window).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kamaji_bootstrap::inspect::{LeafDecision, decide_leaf};
use kamaji_bootstrap::kubeconfig::{self, Kubeconfig};
use kamaji_bootstrap::pki::{
    ApiServerNames, CertAndKey, CertificateAuthority, DatastoreCa, KeyAlgorithm, LeafCertificate,
    LeafSpec, ServiceAccountKeyPair, ServiceNames,
};
use kamaji_bootstrap::secrets::{self, SecretTarget};

use crate::endpoint::Endpoint;
use crate::spec::ValidSpec;

/// Leaves are reissued when less than this is left of their validity (kubeadm renews
/// certificates older than 9 months of their 1-year life on upgrade; we use 30 days).
pub const RENEWAL_WINDOW: Duration = Duration::from_hours(30 * 24);

/// Key of the kubeconfig in the component kubeconfig Secrets.
pub const KUBECONFIG_KEY: &str = "value";

/// Errors reading key material back.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A root Secret exists but does not hold a usable CA or key: it is never replaced
    /// automatically (that would cut every client off); a human must repair or delete it.
    #[error("Secret {name} exists but its key material is unusable: {reason}")]
    UnusableRoot {
        /// Secret name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Issuing or rendering failed.
    #[error(transparent)]
    Bootstrap(#[from] kamaji_bootstrap::Error),
    /// The SAN list is invalid.
    #[error("{0}")]
    Validation(#[from] kamaji_bootstrap::ValidationError),
}

/// The three roots of a tenant.
#[derive(Debug, Clone)]
pub struct Roots {
    /// Cluster CA (`<cluster>-ca`).
    pub ca: CertificateAuthority,
    /// Front-proxy CA (`<cluster>-proxy`).
    pub front_proxy_ca: CertificateAuthority,
    /// Service-account key pair (`<cluster>-sa`).
    pub service_account: ServiceAccountKeyPair,
}

/// Reads a CA from its Secret (`tls.crt`, `tls.key`).
///
/// # Errors
/// [`PkiError::UnusableRoot`] when the Secret lacks the keys or they do not parse.
pub fn ca_from_secret(secret: &Secret) -> Result<CertificateAuthority, PkiError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let (crt, key) = secrets::tls_pair_of(secret).ok_or_else(|| PkiError::UnusableRoot {
        name: name.clone(),
        reason: "tls.crt or tls.key missing".into(),
    })?;
    CertificateAuthority::from_pem(&crt, &key).map_err(|e| PkiError::UnusableRoot {
        name,
        reason: e.to_string(),
    })
}

/// Reads the service-account key pair from `<cluster>-sa` (`tls.key` = private key).
///
/// # Errors
/// [`PkiError::UnusableRoot`] when the key is missing or does not parse.
pub fn sa_from_secret(secret: &Secret) -> Result<ServiceAccountKeyPair, PkiError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let (_, key) = secrets::tls_pair_of(secret).ok_or_else(|| PkiError::UnusableRoot {
        name: name.clone(),
        reason: "tls.key missing".into(),
    })?;
    ServiceAccountKeyPair::from_private_pem(&key).map_err(|e| PkiError::UnusableRoot {
        name,
        reason: e.to_string(),
    })
}

/// Which leaf a Secret holds and how it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafKind {
    /// kube-apiserver serving certificate (`tls.crt`/`tls.key`).
    ApiServer,
    /// kube-apiserver → kubelet client (`tls.crt`/`tls.key`).
    KubeletClient,
    /// Front-proxy client (`tls.crt`/`tls.key`), issued by the front-proxy CA.
    FrontProxyClient,
    /// kube-controller-manager kubeconfig (`value`), server `https://localhost:<port>`.
    ControllerManager,
    /// kube-scheduler kubeconfig (`value`), server `https://localhost:<port>`.
    Scheduler,
    /// The provider's `system:masters` kubeconfig (`value`), server = the Service's ClusterIP.
    SuperAdmin,
    /// The CAPI `<cluster>-kubeconfig` (`value`), admin identity, server = the public endpoint.
    Admin,
}

/// Inputs of [`plan_leaves`].
#[derive(Debug, Clone, Copy)]
pub struct LeafInputs<'a> {
    /// The validated spec.
    pub spec: &'a ValidSpec,
    /// Roots.
    pub roots: &'a Roots,
    /// Public endpoint.
    pub endpoint: &'a Endpoint,
    /// The management Service's ClusterIP, if allocated.
    pub service_ip: Option<std::net::IpAddr>,
    /// The management cluster's DNS domain (for the Service DNS SANs).
    pub management_domain: &'a str,
    /// New key algorithm.
    pub algorithm: KeyAlgorithm,
    /// Now.
    pub now: SystemTime,
}

/// A leaf Secret to write (only when it changed) and its name.
#[derive(Debug, Clone)]
pub struct LeafSecret {
    /// Which leaf.
    pub kind: LeafKind,
    /// Desired Secret (full content).
    pub secret: Secret,
    /// Whether the content differs from what exists (new or reissued).
    pub changed: bool,
}

/// The secret name of each leaf.
#[must_use]
pub fn leaf_secret_name(spec: &ValidSpec, kind: LeafKind) -> String {
    let n = &spec.names;
    match kind {
        LeafKind::ApiServer => n.apiserver_certificate_secret(),
        LeafKind::KubeletClient => n.apiserver_kubelet_client_secret(),
        LeafKind::FrontProxyClient => n.front_proxy_client_secret(),
        LeafKind::ControllerManager => n.controller_manager_kubeconfig_secret(),
        LeafKind::Scheduler => n.scheduler_kubeconfig_secret(),
        LeafKind::SuperAdmin => n.super_admin_kubeconfig_secret(),
        LeafKind::Admin => n.kubeconfig_secret(),
    }
}

/// All leaf kinds in apply order.
pub const LEAVES: &[LeafKind] = &[
    LeafKind::ApiServer,
    LeafKind::KubeletClient,
    LeafKind::FrontProxyClient,
    LeafKind::ControllerManager,
    LeafKind::Scheduler,
    LeafKind::SuperAdmin,
    LeafKind::Admin,
];

/// The serving certificate's spec for the current endpoint and Service.
///
/// # Errors
/// [`PkiError::Validation`] for a SAN that is neither an IP nor a DNS name.
pub fn api_server_leaf_spec(inputs: &LeafInputs<'_>) -> Result<LeafSpec, PkiError> {
    let spec = inputs.spec;
    let names = ApiServerNames {
        endpoint_host: inputs.endpoint.host.clone(),
        service: Some(ServiceNames {
            name: spec.names.service(),
            namespace: spec.namespace.clone(),
            cluster_domain: inputs.management_domain.to_owned(),
            cluster_ip: inputs.service_ip,
        }),
        cert_sans: spec.cert_sans.clone(),
        external_hosts: spec.external.iter().map(|(h, _)| h.clone()).collect(),
    };
    Ok(LeafSpec::api_server(&names, &spec.network)?)
}

/// The server URL each kubeconfig leaf points at; `None` for certificate-only leaves.
#[must_use]
pub fn kubeconfig_server(inputs: &LeafInputs<'_>, kind: LeafKind) -> Option<String> {
    let port = inputs.spec.port;
    match kind {
        LeafKind::ControllerManager | LeafKind::Scheduler => {
            Some(kubeconfig::server_url("localhost", port))
        }
        LeafKind::SuperAdmin => Some(match inputs.service_ip {
            Some(ip) => kubeconfig::server_url(&ip.to_string(), port),
            None => inputs.endpoint.url(),
        }),
        LeafKind::Admin => Some(inputs.endpoint.url()),
        LeafKind::ApiServer | LeafKind::KubeletClient | LeafKind::FrontProxyClient => None,
    }
}

/// Keeps or reissues every leaf; returns the Secrets in [`LEAVES`] order. Randomness (new keys)
/// happens only for a leaf that must be reissued.
///
/// # Errors
/// [`PkiError`] when issuing or rendering fails.
pub fn plan_leaves(
    inputs: &LeafInputs<'_>,
    existing: &BTreeMap<String, Secret>,
) -> Result<Vec<LeafSecret>, PkiError> {
    let spec = inputs.spec;
    let cluster = &spec.cluster.name;
    let mut out = Vec::with_capacity(LEAVES.len());
    for &kind in LEAVES {
        let name = leaf_secret_name(spec, kind);
        let target = SecretTarget {
            name: &name,
            namespace: &spec.namespace,
            cluster_name: cluster,
        };
        let (leaf_spec, issuer) = match kind {
            LeafKind::ApiServer => (api_server_leaf_spec(inputs)?, &inputs.roots.ca),
            LeafKind::KubeletClient => (LeafSpec::api_server_kubelet_client(), &inputs.roots.ca),
            LeafKind::FrontProxyClient => {
                (LeafSpec::front_proxy_client(), &inputs.roots.front_proxy_ca)
            }
            LeafKind::ControllerManager => (LeafSpec::controller_manager(), &inputs.roots.ca),
            LeafKind::Scheduler => (LeafSpec::scheduler(), &inputs.roots.ca),
            LeafKind::SuperAdmin => (LeafSpec::super_admin(), &inputs.roots.ca),
            LeafKind::Admin => (LeafSpec::admin(), &inputs.roots.ca),
        };
        let server = kubeconfig_server(inputs, kind);
        let current = existing.get(&name);
        let stored = current.and_then(|s| stored_leaf(s, server.is_some()));
        let ca_data = base64::engine::general_purpose::STANDARD.encode(inputs.roots.ca.cert_pem());
        let server_ok = match (&server, current) {
            (Some(want), Some(s)) => {
                kubeconfig_of(s).is_some_and(|k| k.server == *want && k.ca_data == ca_data)
            }
            _ => true,
        };
        let decision = decide_leaf(
            stored.as_ref(),
            &leaf_spec,
            issuer,
            inputs.now,
            RENEWAL_WINDOW,
        );
        let leaf = match (decision, stored) {
            (LeafDecision::Keep, Some(pair)) => {
                LeafCertificate::from_pem(leaf_spec.role(), pair.cert_pem(), pair.key_pem())
            }
            _ => issuer.issue(&leaf_spec, inputs.algorithm, inputs.now)?,
        };
        let mut secret = match &server {
            None => secrets::leaf_secret(target, &leaf),
            Some(url) => {
                let kc = render_kubeconfig(kind, cluster, url, &inputs.roots.ca, &leaf);
                if kind == LeafKind::Admin {
                    secrets::kubeconfig_secret(target, &kc.to_yaml()?)
                } else {
                    secret_with(target, KUBECONFIG_KEY, &kc.to_yaml()?)
                }
            }
        };
        let changed = !matches!(decision, LeafDecision::Keep) || !server_ok || current.is_none();
        if !changed && let Some(cur) = current {
            // Keep the stored bytes exactly, so an unchanged leaf is byte-identical.
            secret.data.clone_from(&cur.data);
        }
        out.push(LeafSecret {
            kind,
            secret,
            changed,
        });
    }
    Ok(out)
}

fn render_kubeconfig(
    kind: LeafKind,
    cluster: &str,
    server: &str,
    ca: &CertificateAuthority,
    leaf: &LeafCertificate,
) -> Kubeconfig {
    match kind {
        LeafKind::ControllerManager => {
            kubeconfig::controller_manager_kubeconfig(cluster, server, ca, leaf)
        }
        LeafKind::Scheduler => kubeconfig::scheduler_kubeconfig(cluster, server, ca, leaf),
        LeafKind::SuperAdmin => kubeconfig::super_admin_kubeconfig(cluster, server, ca, leaf),
        _ => kubeconfig::capi_admin_kubeconfig(cluster, server, ca, leaf),
    }
}

/// A Secret of the CAPI shape with one data key.
fn secret_with(target: SecretTarget<'_>, key: &str, value: &str) -> Secret {
    let mut s = secrets::kubeconfig_secret(target, value);
    s.data = Some(BTreeMap::from([(
        key.to_owned(),
        ByteString(value.as_bytes().to_vec()),
    )]));
    s
}

/// The parts of a stored kubeconfig that decide whether it can be kept: server, CA data,
/// client certificate and key (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredKubeconfig {
    /// `clusters[0].cluster.server`.
    pub server: String,
    /// `clusters[0].cluster.certificate-authority-data` (base64).
    pub ca_data: String,
    /// The client certificate and key of `users[0]`.
    pub client: Option<CertAndKey>,
}

/// Reads the kubeconfig stored under [`KUBECONFIG_KEY`] of a Secret.
#[must_use]
pub fn kubeconfig_of(secret: &Secret) -> Option<StoredKubeconfig> {
    let raw = secret.data.as_ref()?.get(KUBECONFIG_KEY)?;
    let v: serde_yaml::Value = serde_yaml::from_slice(&raw.0).ok()?;
    let cluster = &v.get("clusters")?.get(0)?.get("cluster")?;
    let text =
        |x: Option<&serde_yaml::Value>| x.and_then(serde_yaml::Value::as_str).map(str::to_owned);
    let user = v
        .get("users")
        .and_then(|u| u.get(0))
        .and_then(|u| u.get("user"));
    let b64 = base64::engine::general_purpose::STANDARD;
    let pem = |key: &str| {
        text(user.and_then(|u| u.get(key)))
            .and_then(|d| b64.decode(d).ok())
            .and_then(|b| String::from_utf8(b).ok())
    };
    Some(StoredKubeconfig {
        server: text(cluster.get("server"))?,
        ca_data: text(cluster.get("certificate-authority-data")).unwrap_or_default(),
        client: pem("client-certificate-data")
            .zip(pem("client-key-data"))
            .map(|(c, k)| CertAndKey::new(c, k)),
    })
}

/// The certificate and key stored in a leaf Secret: `tls.crt`/`tls.key`, or the client
/// certificate of its kubeconfig.
fn stored_leaf(secret: &Secret, is_kubeconfig: bool) -> Option<CertAndKey> {
    if is_kubeconfig {
        kubeconfig_of(secret)?.client
    } else {
        let (crt, key) = secrets::tls_pair_of(secret)?;
        Some(CertAndKey::new(crt, key))
    }
}

/// The datastore client certificate for a tenant: kept while valid for `common_name` and
/// signed by the DataStore CA (`ca_cert_pem` + `ca_key_pem`), otherwise issued anew. Returns
/// the leaf and whether it is new. The DataStore CA key is only used here, in memory; it is
/// never written into a tenant Secret.
///
/// # Errors
/// [`PkiError`] when the CA does not load or issuing fails.
pub fn datastore_client(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    existing: Option<&Secret>,
    algorithm: KeyAlgorithm,
    now: SystemTime,
) -> Result<(LeafCertificate, bool), PkiError> {
    let authority = CertificateAuthority::from_pem(ca_cert_pem, ca_key_pem)?;
    let spec = LeafSpec::datastore_client(common_name);
    let stored = existing
        .and_then(secrets::tls_pair_of)
        .map(|(c, k)| CertAndKey::new(c, k));
    if let Some(pair) = &stored
        && decide_leaf(Some(pair), &spec, &authority, now, RENEWAL_WINDOW) == LeafDecision::Keep
    {
        return Ok((
            LeafCertificate::from_pem(spec.role(), pair.cert_pem(), pair.key_pem()),
            false,
        ));
    }
    let ca = DatastoreCa::from_pem(ca_cert_pem, ca_key_pem)?;
    Ok((ca.issue_client(common_name, algorithm, now)?, true))
}
