//! The leaves of one tenant, kept or reissued, as the Secrets that hold them.
//!
//! Every pass, each leaf (serving certificate, kubelet and front-proxy clients, the
//! controller-manager and scheduler kubeconfigs, the provider's super-admin kubeconfig and the
//! CAPI `<cluster>-kubeconfig`) is read back from its Secret and kept, byte for byte, unless
//! [`decide_leaf`] says it must be reissued (missing, SANs or subject changed, issuer changed,
//! expiring within the [`LeafPolicy`]'s renewal window) or its kubeconfig points elsewhere.
//! Each planned leaf says when it must be reissued next ([`LeafSecret::renew_at`]). Randomness (a new key)
//! happens only for a leaf that is reissued. The roots are inputs: nothing here can replace
//! one.

use std::collections::BTreeMap;
use std::time::SystemTime;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kamaji_api::meta::KUBECONFIG_SECRET_KEY;
use kamaji_api::names::{InternalSecret, ObjectNames};

use crate::error::Error;
use crate::kubeconfig::{self, Kubeconfig};
use crate::pki::inspect::{CertificateInfo, LeafDecision, decide_leaf, first_pem_block};
use crate::pki::{
    CertAndKey, CertificateAuthority, DatastoreCa, KeyAlgorithm, LeafCertificate, LeafPolicy,
    LeafRole, LeafSpec, TenantRoots,
};
use crate::secrets::{self, SecretTarget};

/// Every leaf a control plane stores, in apply order.
pub const LEAVES: [LeafRole; 7] = [
    LeafRole::ApiServer,
    LeafRole::ApiServerKubeletClient,
    LeafRole::FrontProxyClient,
    LeafRole::ControllerManager,
    LeafRole::Scheduler,
    LeafRole::SuperAdmin,
    LeafRole::Admin,
];

/// The Secret holding the leaf of `role` (for the roles in [`LEAVES`]; the datastore client is
/// `<cluster>-apiserver-etcd-client`).
#[must_use]
pub fn secret_name(names: &ObjectNames, role: LeafRole) -> String {
    match role {
        LeafRole::ApiServer => names.internal_secret(InternalSecret::ApiServer),
        LeafRole::ApiServerKubeletClient => {
            names.internal_secret(InternalSecret::ApiServerKubeletClient)
        }
        LeafRole::FrontProxyClient => names.internal_secret(InternalSecret::FrontProxyClient),
        LeafRole::ControllerManager => {
            names.internal_secret(InternalSecret::ControllerManagerKubeconfig)
        }
        LeafRole::Scheduler => names.internal_secret(InternalSecret::SchedulerKubeconfig),
        LeafRole::SuperAdmin => names.internal_secret(InternalSecret::SuperAdminKubeconfig),
        LeafRole::KonnectivityServer => names.internal_secret(InternalSecret::KonnectivityServer),
        LeafRole::Admin => names.kubeconfig_secret(),
        LeafRole::DatastoreClient | LeafRole::DatastoreServer => {
            names.apiserver_etcd_client_secret()
        }
    }
}

/// What [`plan`] needs besides the stored Secrets.
#[derive(Debug, Clone)]
pub struct LeafInputs<'a> {
    /// The control plane's object names.
    pub names: &'a ObjectNames,
    /// Namespace of the Secrets.
    pub namespace: &'a str,
    /// The CAPI Cluster name (label value, kubeconfig cluster name).
    pub cluster_name: &'a str,
    /// The roots that sign the leaves.
    pub roots: &'a TenantRoots,
    /// The serving certificate's spec (its SANs follow the endpoint and the Service).
    pub api_server: &'a LeafSpec,
    /// `https://localhost:<port>`: the controller-manager's and scheduler's server.
    pub local_url: String,
    /// The public endpoint URL: the CAPI kubeconfig's server.
    pub endpoint_url: String,
    /// The super-admin kubeconfig's server: the management Service, else the endpoint.
    pub super_admin_url: String,
    /// Whether konnectivity runs: its server's kubeconfig is a leaf too
    /// ([`LeafRole::KonnectivityServer`], after [`LEAVES`]), stored with the egress selector
    /// configuration.
    pub konnectivity: bool,
    /// What kubeconfigs trust (`certificate-authority-data`), PEM: `None` for the cluster CA
    /// alone; while a CA rotation runs, the bundle of the old and the new cluster CA.
    pub trust_bundle: Option<&'a str>,
    /// Certificates (PEM) served after the API server's own in its `tls.crt`: while a CA
    /// rotation's new CA signs, the new CA cross-signed by the old one
    /// ([`crate::pki::CertificateAuthority::cross_sign`]).
    pub serving_chain: Option<&'a str>,
    /// The CA that issues the API server's kubelet client certificate when it is not the
    /// cluster CA: while a CA rotation waits for workers that trust only the old CA.
    pub kubelet_client_issuer: Option<&'a CertificateAuthority>,
    /// Algorithm of new keys.
    pub algorithm: KeyAlgorithm,
    /// Validity of new leaves and when leaves are reissued.
    pub policy: LeafPolicy,
    /// Now.
    pub now: SystemTime,
}

/// A leaf Secret to store and whether its content is new.
#[derive(Debug, Clone)]
pub struct LeafSecret {
    /// Which leaf.
    pub role: LeafRole,
    /// The Secret, full content (labels; no owner reference).
    pub secret: Secret,
    /// Whether the content differs from what is stored (new or reissued).
    pub changed: bool,
    /// When this leaf must be reissued: its `notAfter` less the policy's renewal window.
    pub renew_at: SystemTime,
}

impl LeafInputs<'_> {
    /// The kubeconfig server of a kubeconfig leaf; `None` for certificate-only leaves.
    fn server(&self, role: LeafRole) -> Option<&str> {
        match role {
            LeafRole::ControllerManager | LeafRole::Scheduler | LeafRole::KonnectivityServer => {
                Some(&self.local_url)
            }
            LeafRole::SuperAdmin => Some(&self.super_admin_url),
            LeafRole::Admin => Some(&self.endpoint_url),
            _ => None,
        }
    }

    /// The spec and issuer of a leaf in [`LEAVES`].
    fn spec_and_issuer(&self, role: LeafRole) -> (LeafSpec, &CertificateAuthority) {
        let ca = &self.roots.ca;
        match role {
            LeafRole::ApiServer => (self.api_server.clone(), ca),
            LeafRole::ApiServerKubeletClient => (
                LeafSpec::api_server_kubelet_client(),
                self.kubelet_client_issuer.unwrap_or(ca),
            ),
            LeafRole::FrontProxyClient => {
                (LeafSpec::front_proxy_client(), &self.roots.front_proxy_ca)
            }
            LeafRole::ControllerManager => (LeafSpec::controller_manager(), ca),
            LeafRole::Scheduler => (LeafSpec::scheduler(), ca),
            LeafRole::SuperAdmin => (LeafSpec::super_admin(), ca),
            LeafRole::KonnectivityServer => (LeafSpec::konnectivity_server(), ca),
            _ => (LeafSpec::admin(), ca),
        }
    }
}

/// Keeps or reissues every leaf of [`LEAVES`] (and konnectivity's when it runs); `existing`
/// holds the stored Secrets by name. Returns the Secrets in [`LEAVES`] order; an unchanged one
/// carries the stored bytes exactly.
///
/// # Errors
/// [`Error`] when issuing or rendering fails.
pub fn plan(
    inputs: &LeafInputs<'_>,
    existing: &BTreeMap<String, Secret>,
) -> Result<Vec<LeafSecret>, Error> {
    let trust = inputs.trust_bundle.unwrap_or(inputs.roots.ca.cert_pem());
    let ca_data = base64::engine::general_purpose::STANDARD.encode(trust);
    let konnectivity = inputs.konnectivity.then_some(LeafRole::KonnectivityServer);
    LEAVES
        .into_iter()
        .chain(konnectivity)
        .map(|role| leaf(inputs, existing, role, (trust, &ca_data)))
        .collect()
}

/// The leaf `role` ([`plan`]): kept while its stored certificate is still good, else issued;
/// a kubeconfig rendered anew when its server or the CA data it trusts (`trust`, PEM and
/// base64) changed.
fn leaf(
    inputs: &LeafInputs<'_>,
    existing: &BTreeMap<String, Secret>,
    role: LeafRole,
    (trust, ca_data): (&str, &str),
) -> Result<LeafSecret, Error> {
    let name = secret_name(inputs.names, role);
    let (spec, issuer) = inputs.spec_and_issuer(role);
    let server = inputs.server(role);
    let current = existing.get(&name);
    let (stored, server_ok) = stored_pair(server, current, ca_data);
    let decision = decide_leaf(
        stored.as_ref(),
        &spec,
        issuer.cert_pem(),
        inputs.now,
        inputs.policy.renewal_window(),
    );
    // A stored pair comes from a stored Secret.
    let kept = matches!(decision, LeafDecision::Keep) && stored.is_some();
    let leaf = match (decision, stored) {
        (LeafDecision::Keep, Some(pair)) => LeafCertificate::from_pem(
            spec.role(),
            first_pem_block(pair.cert_pem()),
            pair.key_pem(),
        ),
        _ => issuer.issue_valid_for(
            &spec,
            inputs.algorithm,
            inputs.now,
            inputs.policy.validity(),
        )?,
    };
    let renew_at = renew_at(&leaf, inputs.policy)?;
    let stored_key = |key: &str| {
        current
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(key))
            .map(|v| v.0.as_slice())
    };
    // Konnectivity's Secret also holds the egress selector configuration.
    let egress = (role == LeafRole::KonnectivityServer)
        .then(crate::konnectivity::egress_selector_configuration);
    let egress_ok = egress.as_ref().is_none_or(|want| {
        stored_key(crate::konnectivity::EGRESS_SELECTOR_KEY) == Some(want.as_bytes())
    });
    let target = SecretTarget {
        name: &name,
        namespace: inputs.namespace,
        cluster_name: inputs.cluster_name,
    };
    let rendered = Rendered {
        role,
        leaf: &leaf,
        egress,
        unchanged_kubeconfig: kept && server_ok && egress_ok,
    };
    let mut secret = leaf_secret(inputs, target, rendered, server, trust)?;
    // The served chain follows a CA rotation.
    let chain_ok = server.is_some() || stored_key(secrets::TLS_CRT_KEY) == tls_crt(&secret);
    let changed = !matches!(decision, LeafDecision::Keep)
        || !chain_ok
        || !server_ok
        || !egress_ok
        || current.is_none();
    if !changed && let Some(cur) = current {
        // Keep the stored bytes exactly, so an unchanged leaf is byte-identical.
        secret.data.clone_from(&cur.data);
    }
    Ok(LeafSecret {
        role,
        secret,
        changed,
        renew_at,
    })
}

/// The `tls.crt` of `secret`.
fn tls_crt(secret: &Secret) -> Option<&[u8]> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(secrets::TLS_CRT_KEY))
        .map(|v| v.0.as_slice())
}

/// The stored certificate and key of a leaf (`current`), read once: a kubeconfig's client
/// pair, with whether its server is `server` and its CA data `ca_data`; a certificate leaf's
/// `tls.crt` and `tls.key` (no server to check).
fn stored_pair(
    server: Option<&str>,
    current: Option<&Secret>,
    ca_data: &str,
) -> (Option<CertAndKey>, bool) {
    match (server, current) {
        (Some(want), Some(s)) => {
            let kubeconfig = kubeconfig_of(s);
            let ok = kubeconfig
                .as_ref()
                .is_some_and(|k| k.server == want && k.ca_data == ca_data);
            (kubeconfig.and_then(|k| k.client), ok)
        }
        (None, Some(s)) => (stored_tls_pair(s), true),
        (_, None) => (None, true),
    }
}

/// What a leaf's Secret is rendered from ([`leaf_secret`]).
struct Rendered<'a> {
    role: LeafRole,
    leaf: &'a LeafCertificate,
    /// Konnectivity's egress selector configuration, for its Secret.
    egress: Option<String>,
    /// A kept kubeconfig whose server, CA data and egress configuration hold: not rendered
    /// (its stored bytes are kept by the caller).
    unchanged_kubeconfig: bool,
}

/// The Secret of a leaf: a certificate leaf's pair (the API server's with its chain), or a
/// kubeconfig for `server` trusting `trust`.
fn leaf_secret(
    inputs: &LeafInputs<'_>,
    target: SecretTarget<'_>,
    rendered: Rendered<'_>,
    server: Option<&str>,
    trust: &str,
) -> Result<Secret, Error> {
    let role = rendered.role;
    Ok(match server {
        None => serving_chain(
            role,
            secrets::leaf_secret(target, rendered.leaf),
            inputs.serving_chain,
        ),
        Some(_) if rendered.unchanged_kubeconfig => secrets::kubeconfig_secret(target, ""),
        Some(url) => {
            let kc = render_kubeconfig(role, inputs.cluster_name, url, trust, rendered.leaf);
            let mut s = secrets::kubeconfig_secret(target, &kc.to_yaml()?);
            if let Some(egress) = rendered.egress {
                s.data.get_or_insert_with(BTreeMap::new).insert(
                    crate::konnectivity::EGRESS_SELECTOR_KEY.into(),
                    k8s_openapi::ByteString(egress.into_bytes()),
                );
            }
            s
        }
    })
}

/// The API server's Secret with `chain` after its certificate in `tls.crt` (a CA rotation's
/// cross-signed CA); any other Secret unchanged.
fn serving_chain(role: LeafRole, mut secret: Secret, chain: Option<&str>) -> Secret {
    if role == LeafRole::ApiServer
        && let Some(chain) = chain
        && let Some(crt) = secret
            .data
            .as_mut()
            .and_then(|d| d.get_mut(secrets::TLS_CRT_KEY))
    {
        crt.0.extend_from_slice(chain.as_bytes());
    }
    secret
}

/// When `leaf` must be reissued under `policy` ([`LeafPolicy::renew_at`] of its `notAfter`).
///
/// # Errors
/// [`Error::Parse`] when the certificate does not parse (a kept leaf was parsed already by
/// [`decide_leaf`], a new one is ours).
pub fn renew_at(leaf: &LeafCertificate, policy: LeafPolicy) -> Result<SystemTime, Error> {
    Ok(policy.renew_at(CertificateInfo::from_pem(leaf.cert_pem())?.not_after))
}

fn render_kubeconfig(
    role: LeafRole,
    cluster: &str,
    server: &str,
    ca: &str,
    leaf: &LeafCertificate,
) -> Kubeconfig {
    match role {
        LeafRole::ControllerManager => {
            kubeconfig::controller_manager_kubeconfig(cluster, server, ca, leaf)
        }
        LeafRole::Scheduler => kubeconfig::scheduler_kubeconfig(cluster, server, ca, leaf),
        LeafRole::SuperAdmin => kubeconfig::super_admin_kubeconfig(cluster, server, ca, leaf),
        LeafRole::KonnectivityServer => kubeconfig::client_cert_kubeconfig(
            cluster,
            crate::konnectivity::SERVER_IDENTITY,
            server,
            ca,
            leaf,
        ),
        _ => kubeconfig::capi_admin_kubeconfig(cluster, server, ca, leaf),
    }
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

/// Reads the kubeconfig stored under `value` of a Secret: `None` when it is absent or is not
/// a kubeconfig with a cluster entry and its `server`.
#[must_use]
pub fn kubeconfig_of(secret: &Secret) -> Option<StoredKubeconfig> {
    // Only the fields read here, typed: a pass reads every stored kubeconfig, and a
    // `serde_yaml::Value` of the whole document cost 5 % of the manager's CPU (issue 16).
    #[derive(serde::Deserialize)]
    struct Stored {
        #[serde(default)]
        clusters: Vec<ClusterEntry>,
        #[serde(default)]
        users: Vec<UserEntry>,
    }
    #[derive(serde::Deserialize)]
    struct ClusterEntry {
        cluster: Cluster,
    }
    #[derive(serde::Deserialize)]
    struct Cluster {
        server: String,
        #[serde(rename = "certificate-authority-data", default)]
        certificate_authority_data: String,
    }
    #[derive(serde::Deserialize)]
    struct UserEntry {
        #[serde(default)]
        user: User,
    }
    #[derive(serde::Deserialize, Default)]
    struct User {
        #[serde(rename = "client-certificate-data")]
        client_certificate_data: Option<String>,
        #[serde(rename = "client-key-data")]
        client_key_data: Option<String>,
    }
    let raw = secret.data.as_ref()?.get(KUBECONFIG_SECRET_KEY)?;
    let stored: Stored = serde_yaml::from_slice(&raw.0).ok()?;
    let cluster = stored.clusters.into_iter().next()?.cluster;
    let user = stored.users.into_iter().next().map(|u| u.user);
    let b64 = base64::engine::general_purpose::STANDARD;
    let pem = |data: Option<String>| {
        data.and_then(|d| b64.decode(d).ok())
            .and_then(|b| String::from_utf8(b).ok())
    };
    let client = user.and_then(|u| {
        pem(u.client_certificate_data)
            .zip(pem(u.client_key_data))
            .map(|(c, k)| CertAndKey::new(c, k))
    });
    Some(StoredKubeconfig {
        server: cluster.server,
        ca_data: cluster.certificate_authority_data,
        client,
    })
}

/// The certificate and key stored in a leaf Secret's `tls.crt`/`tls.key`.
fn stored_tls_pair(secret: &Secret) -> Option<CertAndKey> {
    let (crt, key) = secrets::tls_pair_of(secret)?;
    Some(CertAndKey::new(crt, key))
}

/// The datastore client certificate of a tenant: kept while valid for `common_name`, signed by
/// the DataStore CA (`ca_cert_pem` + `ca_key_pem`) and outside `policy`'s renewal window,
/// otherwise issued anew for `policy`'s validity. Returns the leaf and whether it is new. The
/// DataStore CA key is only used here, in memory; it is never written into a tenant Secret.
///
/// `ca_cert_pem` may be a bundle (the DataStore's CA being rotated): the certificate
/// `ca_key_pem` belongs to is the issuer, so a leaf of the other CA is reissued from it.
///
/// # Errors
/// [`Error`] when the CA does not load or issuing fails.
pub fn datastore_client(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    existing: Option<&Secret>,
    algorithm: KeyAlgorithm,
    policy: LeafPolicy,
    now: SystemTime,
) -> Result<(LeafCertificate, bool), Error> {
    let spec = LeafSpec::datastore_client(common_name);
    let stored = existing
        .and_then(secrets::tls_pair_of)
        .map(|(c, k)| CertAndKey::new(c, k));
    let signer = DatastoreCa::signer_of(ca_cert_pem, ca_key_pem)?;
    if let Some(pair) = &stored
        && decide_leaf(Some(pair), &spec, signer, now, policy.renewal_window())
            == LeafDecision::Keep
    {
        return Ok((
            LeafCertificate::from_pem(spec.role(), pair.cert_pem(), pair.key_pem()),
            false,
        ));
    }
    let ca = DatastoreCa::from_pem(ca_cert_pem, ca_key_pem)?;
    Ok((
        ca.issue_client(common_name, algorithm, now, policy.validity())?,
        true,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkSpec;
    use crate::pki::{ApiServerNames, LeafRequest, TenantPki};

    fn inputs<'a>(
        names: &'a ObjectNames,
        roots: &'a TenantRoots,
        api: &'a LeafSpec,
        endpoint: &str,
    ) -> LeafInputs<'a> {
        LeafInputs {
            names,
            namespace: "tenant-a",
            cluster_name: "demo",
            roots,
            api_server: api,
            local_url: "https://localhost:6443".into(),
            endpoint_url: format!("https://{endpoint}:6443"),
            super_admin_url: "https://10.0.0.5:6443".into(),
            konnectivity: false,
            trust_bundle: None,
            serving_chain: None,
            kubelet_client_issuer: None,
            algorithm: KeyAlgorithm::default(),
            policy: LeafPolicy::default(),
            now: SystemTime::now(),
        }
    }

    fn setup() -> (ObjectNames, TenantRoots, LeafSpec) {
        let network = NetworkSpec {
            service_cidrs: vec!["10.96.0.0/12".into()],
            ..NetworkSpec::default()
        }
        .validate()
        .unwrap();
        let names = ApiServerNames {
            endpoint_host: "10.0.0.10".into(),
            service: None,
            cert_sans: vec![],
            external_hosts: vec![],
        };
        let api = LeafSpec::api_server(&names, &network).unwrap();
        let pki = TenantPki::generate(&LeafRequest {
            algorithm: KeyAlgorithm::default(),
            now: SystemTime::now(),
            api_server: &api,
            datastore: None,
        })
        .unwrap();
        (ObjectNames::new("demo", "demo"), pki.roots, api)
    }

    fn stored(leaves: &[LeafSecret]) -> BTreeMap<String, Secret> {
        leaves
            .iter()
            .map(|l| (l.secret.metadata.name.clone().unwrap(), l.secret.clone()))
            .collect()
    }

    /// With konnectivity, its server's kubeconfig (`CN=system:konnectivity-server`, on the
    /// local API server) is one more leaf, stored with the egress selector configuration and
    /// kept like the others.
    #[test]
    fn konnectivity_adds_its_servers_kubeconfig_with_the_egress_configuration() {
        let (names, roots, api) = setup();
        let with = LeafInputs {
            konnectivity: true,
            ..inputs(&names, &roots, &api, "10.0.0.10")
        };
        let first = plan(&with, &BTreeMap::new()).unwrap();
        let k = first.last().unwrap();
        assert_eq!(k.role, LeafRole::KonnectivityServer);
        assert_eq!(
            k.secret.metadata.name.as_deref(),
            Some("demo-konnectivity-server.kubeconfig")
        );
        let kc = kubeconfig_of(&k.secret).unwrap();
        assert_eq!(kc.server, "https://localhost:6443");
        let cert =
            crate::pki::inspect::CertificateInfo::from_pem(kc.client.unwrap().cert_pem()).unwrap();
        assert_eq!(
            cert.common_name.as_deref(),
            Some("system:konnectivity-server")
        );
        let egress = &k.secret.data.as_ref().unwrap()[crate::konnectivity::EGRESS_SELECTOR_KEY];
        assert!(String::from_utf8_lossy(&egress.0).contains("udsName:"));
        let again = plan(&with, &stored(&first)).unwrap();
        assert!(again.iter().all(|l| !l.changed));
        // Without konnectivity there is no such leaf.
        let without = plan(&inputs(&names, &roots, &api, "10.0.0.10"), &BTreeMap::new()).unwrap();
        assert_eq!(without.len(), LEAVES.len());
    }

    /// During a CA rotation: kubeconfigs trust the bundle (certificates kept), the API server's
    /// `tls.crt` carries the chain after its own certificate (kept), the kubelet client
    /// certificate comes from the other issuer; without them, everything is as before.
    #[test]
    fn a_ca_rotation_changes_the_trust_and_the_served_chain_but_keeps_the_keys() {
        let (names, roots, api) = setup();
        let base = inputs(&names, &roots, &api, "10.0.0.10");
        let first = plan(&base, &BTreeMap::new()).unwrap();
        let other = CertificateAuthority::generate(
            "kubernetes",
            KeyAlgorithm::default(),
            SystemTime::now(),
        )
        .unwrap();
        let bundle = format!("{}{}", roots.ca.cert_pem(), other.cert_pem());
        let chain = roots.ca.cross_sign(&other).unwrap();
        let rotating = LeafInputs {
            trust_bundle: Some(&bundle),
            serving_chain: Some(&chain),
            kubelet_client_issuer: Some(&other),
            ..base.clone()
        };
        let during = plan(&rotating, &stored(&first)).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        for (before, now) in first.iter().zip(&during) {
            let role = now.role;
            if let Some(k) = kubeconfig_of(&now.secret) {
                assert_eq!(k.ca_data, b64.encode(&bundle), "{role:?} trusts both");
                assert_eq!(
                    k.client,
                    kubeconfig_of(&before.secret).unwrap().client,
                    "{role:?} keeps its certificate"
                );
            }
        }
        let tls = |l: &LeafSecret| secrets::tls_pair_of(&l.secret).unwrap();
        let (crt, key) = tls(&during[0]);
        assert_eq!(during[0].role, LeafRole::ApiServer);
        assert!(during[0].changed);
        assert_eq!(
            crt,
            format!("{}{chain}", tls(&first[0]).0),
            "own certificate, then chain"
        );
        assert_eq!(key, tls(&first[0]).1, "same key");
        let kubelet = during
            .iter()
            .find(|l| l.role == LeafRole::ApiServerKubeletClient)
            .unwrap();
        assert!(crate::pki::inspect::is_signed_by(&tls(kubelet).0, other.cert_pem()).unwrap());
        // Back without the rotation: the chain goes, the serving key stays.
        let after = plan(&base, &stored(&during)).unwrap();
        assert_eq!(tls(&after[0]), tls(&first[0]));
        assert!(after[0].changed);
    }

    /// Under a short policy every leaf says it must be reissued at `notAfter − window`, is
    /// kept until then, and is reissued (with a later renewal time) right after.
    #[test]
    fn leaves_are_kept_until_their_renewal_time_and_reissued_after_it() {
        use std::time::Duration;
        let (names, roots, api) = setup();
        let policy = LeafPolicy::new(Duration::from_mins(10), Duration::from_secs(200)).unwrap();
        let t0 = SystemTime::UNIX_EPOCH
            + Duration::from_secs(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs(),
            );
        let at = |now| LeafInputs {
            policy,
            now,
            ..inputs(&names, &roots, &api, "10.0.0.10")
        };
        let first = plan(&at(t0), &BTreeMap::new()).unwrap();
        let due = t0 + Duration::from_secs(400);
        assert!(first.iter().all(|l| l.renew_at == due), "notAfter − window");
        let before = plan(&at(due - Duration::from_secs(1)), &stored(&first)).unwrap();
        assert!(
            before.iter().all(|l| !l.changed),
            "kept before the renewal time"
        );
        let after = plan(&at(due + Duration::from_secs(1)), &stored(&first)).unwrap();
        assert!(
            after.iter().all(|l| l.changed),
            "every leaf reissued after it"
        );
        assert!(
            after
                .iter()
                .all(|l| l.renew_at == due + Duration::from_secs(401)),
            "the next renewal is one policy later"
        );
        // The datastore client follows the same policy.
        let dca =
            crate::pki::CertificateAuthority::generate("etcd-ca", KeyAlgorithm::default(), t0)
                .unwrap();
        let (leaf, new) = datastore_client(
            dca.cert_pem(),
            dca.key_pem(),
            "t",
            None,
            KeyAlgorithm::default(),
            policy,
            t0,
        )
        .unwrap();
        assert!(new);
        assert_eq!(renew_at(&leaf, policy).unwrap(), due);
    }

    #[test]
    fn a_datastore_ca_bundle_issues_from_the_certificate_its_key_belongs_to() {
        use crate::pki::CertificateAuthority;
        use crate::pki::inspect::is_signed_by;
        use k8s_openapi::ByteString;
        let now = SystemTime::now();
        let (alg, policy) = (KeyAlgorithm::default(), LeafPolicy::default());
        let old = CertificateAuthority::generate("etcd-ca", alg, now).unwrap();
        let new = CertificateAuthority::generate("etcd-ca", alg, now).unwrap();
        let stored_as = |leaf: &LeafCertificate| Secret {
            data: Some(BTreeMap::from([
                (
                    "tls.crt".into(),
                    ByteString(leaf.cert_pem().as_bytes().to_vec()),
                ),
                (
                    "tls.key".into(),
                    ByteString(leaf.key_pem().as_bytes().to_vec()),
                ),
            ])),
            ..Secret::default()
        };
        let issue = |bundle: &str, key: &str, stored: Option<&Secret>| {
            datastore_client(bundle, key, "t", stored, alg, policy, now)
        };
        let (first, _) = issue(old.cert_pem(), old.key_pem(), None).unwrap();
        let first_secret = stored_as(&first);
        // Both trusted, the old key still signing: nothing to reissue.
        let both = format!("{}{}", old.cert_pem(), new.cert_pem());
        let (kept, reissued) = issue(&both, old.key_pem(), Some(&first_secret)).unwrap();
        assert!(!reissued, "a leaf of the signing CA is kept");
        assert_eq!(kept.cert_pem(), first.cert_pem());
        // The new key signs: the leaf moves to the new CA, and stays there.
        let (moved, reissued) = issue(&both, new.key_pem(), Some(&first_secret)).unwrap();
        assert!(
            reissued,
            "a leaf of the CA that no longer signs is reissued"
        );
        assert!(is_signed_by(moved.cert_pem(), new.cert_pem()).unwrap());
        let (_, again) = issue(&both, new.key_pem(), Some(&stored_as(&moved))).unwrap();
        assert!(!again, "issued once");
        let (_, after) = issue(new.cert_pem(), new.key_pem(), Some(&stored_as(&moved))).unwrap();
        assert!(!after, "dropping the old CA from the bundle keeps the leaf");
        // A key of neither certificate is refused, saying so.
        let stranger = CertificateAuthority::generate("x", alg, now).unwrap();
        let e = issue(&both, stranger.key_pem(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("none of its 2 certificates"), "{e}");
        let ds = DatastoreCa::from_pem(&both, new.key_pem()).unwrap();
        assert_eq!(ds.cert_pem(), new.cert_pem().trim_end());
        assert_eq!(ds.trust_pem(), both, "the whole bundle is trusted");
    }

    #[test]
    fn a_renewal_window_not_shorter_than_the_validity_is_refused_naming_the_flag() {
        use std::time::Duration;
        let e = LeafPolicy::new(Duration::from_mins(1), Duration::from_mins(1)).unwrap_err();
        assert_eq!(e.field, "--certificate-renewal-window-seconds");
        let e = LeafPolicy::new(Duration::ZERO, Duration::ZERO).unwrap_err();
        assert_eq!(e.field, "--leaf-certificate-validity-seconds");
        assert!(LeafPolicy::new(Duration::from_secs(61), Duration::from_mins(1)).is_ok());
    }

    #[test]
    fn stored_leaves_are_kept_byte_for_byte() {
        let (names, roots, api) = setup();
        let first = plan(&inputs(&names, &roots, &api, "10.0.0.10"), &BTreeMap::new()).unwrap();
        assert_eq!(first.iter().map(|l| l.role).collect::<Vec<_>>(), LEAVES);
        assert!(first.iter().all(|l| l.changed));
        let again = plan(&inputs(&names, &roots, &api, "10.0.0.10"), &stored(&first)).unwrap();
        for (a, b) in first.iter().zip(&again) {
            assert!(!b.changed, "{:?} reissued", b.role);
            assert_eq!(a.secret.data, b.secret.data);
        }
        assert_eq!(
            again[6].secret.metadata.name.as_deref(),
            Some("demo-kubeconfig"),
            "the admin kubeconfig is the CAPI Secret"
        );
        assert_eq!(
            again[4].secret.metadata.name.as_deref(),
            Some("demo-scheduler.kubeconfig")
        );
    }

    #[test]
    fn a_kubeconfig_pointing_elsewhere_is_rewritten_and_certificates_are_kept() {
        let (names, roots, api) = setup();
        let first = plan(&inputs(&names, &roots, &api, "10.0.0.10"), &BTreeMap::new()).unwrap();
        let moved = plan(&inputs(&names, &roots, &api, "10.0.0.11"), &stored(&first)).unwrap();
        let changed: Vec<LeafRole> = moved.iter().filter(|l| l.changed).map(|l| l.role).collect();
        assert_eq!(
            changed,
            vec![LeafRole::Admin],
            "only the kubeconfig naming the endpoint"
        );
        let kc = kubeconfig_of(&moved[6].secret).unwrap();
        assert_eq!(kc.server, "https://10.0.0.11:6443");
    }

    #[test]
    fn a_leaf_of_another_ca_is_reissued_but_never_the_ca() {
        let (names, roots, api) = setup();
        let (_, other_roots, _) = setup();
        let theirs = plan(
            &inputs(&names, &other_roots, &api, "10.0.0.10"),
            &BTreeMap::new(),
        )
        .unwrap();
        let ours = plan(&inputs(&names, &roots, &api, "10.0.0.10"), &stored(&theirs)).unwrap();
        assert!(
            ours.iter().all(|l| l.changed),
            "every leaf of the other CA is reissued"
        );
        let kc = kubeconfig_of(&ours[6].secret).unwrap();
        let ca = base64::engine::general_purpose::STANDARD.encode(roots.ca.cert_pem());
        assert_eq!(kc.ca_data, ca, "signed by and pointing to our CA");
    }
}
