//! The one place that derives child object names from the KamajiControlPlane and Cluster
//! names (case B16).
//!
//! Rules:
//! - The CAPI contract Secrets (`<cluster>-kubeconfig`, `-ca`, `-sa`, `-proxy`, `-etcd`,
//!   `-apiserver-etcd-client`) are named exactly as CAPI expects and never shortened: a Secret
//!   name may have 253 characters and a CAPI Cluster name at most 63.
//! - Other names are fitted to their kind's limit: 63 for DNS labels (Deployment, label
//!   values), DNS-1035 labels for Services (must start with a letter), 253 for DNS subdomains
//!   (Secrets, ConfigMaps, Ingresses).
//! - When a name must change to fit (too long, a character not allowed, a Service name starting
//!   with a digit), it is truncated and gets `-` plus an 8-hex-digit hash of the *full
//!   original* input, so two long names sharing a prefix still map to different objects, and
//!   the same input always maps to the same name.
//!
//! Control-plane workload objects (Deployment, Service, Ingress/route) are named after the
//! KamajiControlPlane, like upstream's TenantControlPlane; Secrets after the Cluster, like the
//! CAPI contract.

use sha2::{Digest, Sha256};

/// Maximum length of a DNS-1123/1035 label (Service names, label values, Deployment names as
/// used by kamaji-rs).
pub const DNS_LABEL_MAX: usize = 63;
/// Maximum length of a DNS-1123 subdomain (Secret, ConfigMap, Ingress names).
pub const DNS_SUBDOMAIN_MAX: usize = 253;
/// Maximum length of a datastore schema (database / key prefix) or user name. 63 is the
/// PostgreSQL identifier limit.
pub const DATASTORE_IDENTIFIER_MAX: usize = 63;
/// Hex digits of the disambiguating hash.
pub const HASH_LEN: usize = 8;

/// First [`HASH_LEN`] hex digits of the SHA-256 of `input`.
#[must_use]
pub fn short_hash(input: &str) -> String {
    let digest = Sha256::digest(input.as_bytes());
    let mut hex = hex::encode(digest);
    hex.truncate(HASH_LEN);
    hex
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Syntax {
    /// `[a-z0-9-]`, alphanumeric at both ends.
    Label1123,
    /// As `Label1123`, starting with a letter.
    Label1035,
    /// `[a-z0-9.-]`, alphanumeric at both ends.
    Subdomain,
}

impl Syntax {
    fn allowed(self, c: char) -> bool {
        match self {
            Self::Label1123 | Self::Label1035 => {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
            }
            Self::Subdomain => c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.',
        }
    }

    fn valid_start(self, s: &str) -> bool {
        match self {
            Self::Label1035 => s.starts_with(|c: char| c.is_ascii_lowercase()),
            Self::Label1123 | Self::Subdomain => {
                s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            }
        }
    }

    /// Prefix that makes a name starting with a digit valid.
    fn start_prefix(self) -> &'static str {
        match self {
            Self::Label1035 => "k-",
            Self::Label1123 | Self::Subdomain => "",
        }
    }
}

/// Fit `base` followed by `suffix` into `max` characters of `syntax`. `suffix` must already
/// be valid and end with an alphanumeric character (callers pass constants).
fn fit(base: &str, suffix: &str, max: usize, syntax: Syntax) -> String {
    let raw = format!("{base}{suffix}");
    let sanitized: String = base
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if syntax.allowed(c) { c } else { '-' }
        })
        .collect();
    let candidate = format!("{sanitized}{suffix}");
    let unchanged = candidate == raw;
    if unchanged
        && candidate.len() <= max
        && syntax.valid_start(&candidate)
        && candidate.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        return candidate;
    }
    // Needs shortening or repair: truncate, then `-<hash of the raw input>` and the suffix.
    let hash = short_hash(&raw);
    let mut prefix = String::new();
    if !syntax.valid_start(&sanitized) {
        prefix.push_str(syntax.start_prefix());
    }
    let budget = max.saturating_sub(prefix.len() + 1 + HASH_LEN + suffix.len());
    let mut head: String = sanitized.chars().take(budget).collect();
    while head.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        head.pop();
    }
    let mut name = prefix;
    if !head.is_empty() {
        name.push_str(&head);
        name.push('-');
    }
    if name.is_empty() && syntax == Syntax::Label1035 {
        // Nothing of the base is left and the hash may start with a digit.
        name.push_str(syntax.start_prefix());
    }
    name.push_str(&hash);
    name.push_str(suffix);
    name
}

/// A DNS-1123 label (≤ 63, `[a-z0-9-]`) made of `base` and `suffix`, shortened with a hash
/// when needed.
#[must_use]
pub fn dns_label(base: &str, suffix: &str) -> String {
    fit(base, suffix, DNS_LABEL_MAX, Syntax::Label1123)
}

/// A DNS-1035 label (≤ 63, starts with a letter): valid as a Service name.
#[must_use]
pub fn dns1035_label(base: &str, suffix: &str) -> String {
    fit(base, suffix, DNS_LABEL_MAX, Syntax::Label1035)
}

/// A DNS-1123 subdomain (≤ 253): valid as a Secret, ConfigMap or Ingress name.
#[must_use]
pub fn dns_subdomain(base: &str, suffix: &str) -> String {
    fit(base, suffix, DNS_SUBDOMAIN_MAX, Syntax::Subdomain)
}

/// A label value (≤ 63) for `value`, which is usually an object name.
#[must_use]
pub fn label_value(value: &str) -> String {
    dns_label(value, "")
}

/// Default `dataStoreSchema` (database name, or etcd key prefix without slashes) of a
/// control plane: `<namespace>_<name>_<hash>` with every non-alphanumeric character as `_`,
/// truncated so the whole fits 63 characters, prefixed `k_` if it would start with a digit.
/// The hash (of `namespace/name`) keeps `a-b/c` and `a/b-c` apart. Independent of the
/// object's UID, so it survives `clusterctl move` and provider upgrades.
#[must_use]
pub fn datastore_schema(namespace: &str, name: &str) -> String {
    let hash = short_hash(&format!("{namespace}/{name}"));
    let head: String = format!("{namespace}_{name}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let prefix = if head.starts_with(|c: char| c.is_ascii_lowercase()) {
        ""
    } else {
        "k_"
    };
    let budget = DATASTORE_IDENTIFIER_MAX - prefix.len() - 1 - HASH_LEN;
    let head: String = head.chars().take(budget).collect();
    format!("{prefix}{}_{hash}", head.trim_end_matches('_'))
}

/// Default `dataStoreUsername` of a control plane (same derivation as the schema).
#[must_use]
pub fn datastore_username(namespace: &str, name: &str) -> String {
    datastore_schema(namespace, name)
}

/// etcd key prefix (kube-apiserver `--etcd-prefix`) of a control plane using `schema`.
#[must_use]
pub fn etcd_prefix(schema: &str) -> String {
    format!("/{schema}")
}

/// The suffixes of the Secret names Cluster API gives meaning to: the `Purpose` constants of
/// `sigs.k8s.io/cluster-api/util/secret` (v1.14), plus `user-kubeconfig`, which managed
/// control-plane providers (CAPA's EKS) write beside `kubeconfig`. A Secret
/// `<cluster>-<suffix>` is read by CAPI, CABPK or clusterctl as cluster `<cluster>`'s.
pub const CAPI_SECRET_SUFFIXES: &[&str] = &[
    "kubeconfig",
    "ca",
    "etcd",
    "sa",
    "proxy",
    "apiserver-etcd-client",
    "user-kubeconfig",
];

/// kamaji-rs' own Secrets of a control plane, beside the CAPI contract ones.
///
/// Their names are `<cluster>-<role>.<kind>`: the part after the last `-` always holds a
/// dot, which no CAPI Secret suffix (a DNS label) has, so an internal name can never be
/// another cluster's `<cluster>-<suffix>` Secret, whatever the clusters are called; and no
/// role is a `-`-separated tail of another, so two clusters' internal names never meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InternalSecret {
    /// kube-apiserver serving certificate.
    ApiServer,
    /// kube-apiserver's client certificate towards kubelets.
    ApiServerKubeletClient,
    /// Front-proxy client certificate.
    FrontProxyClient,
    /// kube-controller-manager kubeconfig.
    ControllerManagerKubeconfig,
    /// kube-scheduler kubeconfig.
    SchedulerKubeconfig,
    /// The provider's own `system:masters` kubeconfig.
    SuperAdminKubeconfig,
    /// The konnectivity server's kubeconfig and kube-apiserver's egress selector
    /// configuration.
    KonnectivityServer,
    /// The state of a service-account key rotation: the next key pair while API servers
    /// learn to trust it, then the previous public key while its tokens are still accepted.
    ServiceAccountRotation,
    /// The state of a certificate-authority rotation: the next cluster and front-proxy CAs,
    /// the trust bundles the components mount, the previous CAs and the new cluster CA
    /// cross-signed by the previous one.
    CaRotation,
    /// kube-apiserver's `EncryptionConfiguration` with the keys the tenant's Secrets are
    /// encrypted with at rest (never regenerated: without it they cannot be read).
    Encryption,
    /// kine's connection to a PostgreSQL or MySQL DataStore: its `--endpoint` (with the
    /// tenant's password) and the DataStore's CA and client certificate.
    Kine,
}

impl InternalSecret {
    /// Every internal Secret.
    pub const ALL: [Self; 11] = [
        Self::ApiServer,
        Self::ApiServerKubeletClient,
        Self::FrontProxyClient,
        Self::ControllerManagerKubeconfig,
        Self::SchedulerKubeconfig,
        Self::SuperAdminKubeconfig,
        Self::KonnectivityServer,
        Self::ServiceAccountRotation,
        Self::CaRotation,
        Self::Encryption,
        Self::Kine,
    ];

    /// The name suffix after the cluster name, leading `-` included.
    #[must_use]
    pub const fn suffix(self) -> &'static str {
        match self {
            Self::ApiServer => "-apiserver.tls",
            Self::ApiServerKubeletClient => "-apiserver-kubelet-client.tls",
            Self::FrontProxyClient => "-front-proxy-client.tls",
            Self::ControllerManagerKubeconfig => "-controller-manager.kubeconfig",
            Self::SchedulerKubeconfig => "-scheduler.kubeconfig",
            Self::SuperAdminKubeconfig => "-super-admin.kubeconfig",
            Self::KonnectivityServer => "-konnectivity-server.kubeconfig",
            Self::ServiceAccountRotation => "-sa-rotation.keys",
            Self::CaRotation => "-ca-rotation.keys",
            Self::Encryption => "-encryption.config",
            Self::Kine => "-kine.config",
        }
    }

    /// The suffix kamaji-rs v0.1 used (migrated on upgrade), if the Secret existed then.
    #[must_use]
    pub const fn legacy_suffix(self) -> Option<&'static str> {
        match self {
            Self::ApiServer => Some("-apiserver-serving"),
            Self::ApiServerKubeletClient => Some("-apiserver-kubelet-client"),
            Self::FrontProxyClient => Some("-front-proxy-client"),
            Self::ControllerManagerKubeconfig => Some("-controller-manager-kubeconfig"),
            Self::SchedulerKubeconfig => Some("-scheduler-kubeconfig"),
            Self::SuperAdminKubeconfig => Some("-super-admin-kubeconfig"),
            Self::KonnectivityServer
            | Self::ServiceAccountRotation
            | Self::CaRotation
            | Self::Encryption
            | Self::Kine => None,
        }
    }
}

/// Every name kamaji-rs derives for one control plane. Build it once per reconcile with
/// [`ObjectNames::new`] and take names from it; nothing else formats child names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectNames {
    cluster: String,
    kcp: String,
}

impl ObjectNames {
    /// Names for the KamajiControlPlane `kcp` of the Cluster `cluster` (same namespace).
    #[must_use]
    pub fn new(cluster: &str, kcp: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            kcp: kcp.to_owned(),
        }
    }

    fn capi_secret(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.cluster)
    }

    /// `<cluster>-kubeconfig` (CAPI contract; key `value`).
    #[must_use]
    pub fn kubeconfig_secret(&self) -> String {
        self.capi_secret("kubeconfig")
    }

    /// `<cluster>-ca`: the cluster CA (CAPI contract; `tls.crt`, `tls.key`).
    #[must_use]
    pub fn ca_secret(&self) -> String {
        self.capi_secret("ca")
    }

    /// `<cluster>-sa`: the service-account signing key pair (CAPI contract).
    #[must_use]
    pub fn service_account_secret(&self) -> String {
        self.capi_secret("sa")
    }

    /// `<cluster>-proxy`: the front-proxy CA (CAPI contract).
    #[must_use]
    pub fn front_proxy_ca_secret(&self) -> String {
        self.capi_secret("proxy")
    }

    /// `<cluster>-etcd`: the etcd CA (CAPI contract).
    #[must_use]
    pub fn etcd_ca_secret(&self) -> String {
        self.capi_secret("etcd")
    }

    /// `<cluster>-apiserver-etcd-client`: the API server's datastore client certificate
    /// (CAPI contract name for external etcd).
    #[must_use]
    pub fn apiserver_etcd_client_secret(&self) -> String {
        self.capi_secret("apiserver-etcd-client")
    }

    /// Secret of the API server serving certificate: `<cluster>-apiserver.tls`.
    #[must_use]
    pub fn apiserver_certificate_secret(&self) -> String {
        self.internal_secret(InternalSecret::ApiServer)
    }

    /// Secret of the API server's client certificate towards kubelets:
    /// `<cluster>-apiserver-kubelet-client.tls`.
    #[must_use]
    pub fn apiserver_kubelet_client_secret(&self) -> String {
        self.internal_secret(InternalSecret::ApiServerKubeletClient)
    }

    /// Secret of the front-proxy client certificate (aggregation layer):
    /// `<cluster>-front-proxy-client.tls`.
    #[must_use]
    pub fn front_proxy_client_secret(&self) -> String {
        self.internal_secret(InternalSecret::FrontProxyClient)
    }

    /// Secret of kube-controller-manager's kubeconfig: `<cluster>-controller-manager.kubeconfig`.
    #[must_use]
    pub fn controller_manager_kubeconfig_secret(&self) -> String {
        self.internal_secret(InternalSecret::ControllerManagerKubeconfig)
    }

    /// Secret of the provider's own `system:masters` kubeconfig for the tenant (server: the
    /// management Service), `<cluster>-super-admin.kubeconfig`. Never handed to users.
    #[must_use]
    pub fn super_admin_kubeconfig_secret(&self) -> String {
        self.internal_secret(InternalSecret::SuperAdminKubeconfig)
    }

    /// Secret of kube-scheduler's kubeconfig: `<cluster>-scheduler.kubeconfig`.
    #[must_use]
    pub fn scheduler_kubeconfig_secret(&self) -> String {
        self.internal_secret(InternalSecret::SchedulerKubeconfig)
    }

    /// Secret of the konnectivity server's kubeconfig and kube-apiserver's egress selector
    /// configuration: `<cluster>-konnectivity-server.kubeconfig`.
    #[must_use]
    pub fn konnectivity_secret(&self) -> String {
        self.internal_secret(InternalSecret::KonnectivityServer)
    }

    /// The name of one of kamaji-rs' internal Secrets (see [`InternalSecret`]).
    #[must_use]
    pub fn internal_secret(&self, which: InternalSecret) -> String {
        dns_subdomain(&self.cluster, which.suffix())
    }

    /// The name the provider used for `which` before v0.2 (`<cluster>-scheduler-kubeconfig`
    /// and the like), when it has one. Those names fall into other clusters' CAPI names (the
    /// scheduler kubeconfig of cluster `x` is the CAPI kubeconfig of cluster `x-scheduler`);
    /// they are read only to migrate a Secret this control plane owns to its new name.
    #[must_use]
    pub fn legacy_internal_secret(&self, which: InternalSecret) -> Option<String> {
        which
            .legacy_suffix()
            .map(|suffix| dns_subdomain(&self.cluster, suffix))
    }

    /// ConfigMap of the control-plane configuration files (egress selector, admission
    /// configuration, ...).
    #[must_use]
    pub fn config_map(&self) -> String {
        dns_subdomain(&self.cluster, "-control-plane-config")
    }

    /// The KamajiControlPlane's name.
    #[must_use]
    pub fn kcp(&self) -> &str {
        &self.kcp
    }

    /// The control-plane Deployment (a DNS label, so pod names derived from it stay valid).
    #[must_use]
    pub fn deployment(&self) -> String {
        dns_label(&self.kcp, "")
    }

    /// The control-plane Service (a DNS-1035 label).
    #[must_use]
    pub fn service(&self) -> String {
        dns1035_label(&self.kcp, "")
    }

    /// The Ingress or Gateway API route exposing the API server.
    #[must_use]
    pub fn ingress(&self) -> String {
        dns_subdomain(&self.kcp, "")
    }

    /// Value of the `kamaji.clastix.io/name` label selecting the control-plane pods.
    #[must_use]
    pub fn pod_label_value(&self) -> String {
        label_value(&self.kcp)
    }

    /// Value of the `cluster.x-k8s.io/cluster-name` label.
    #[must_use]
    pub fn cluster_label_value(&self) -> String {
        label_value(&self.cluster)
    }

    /// Every CAPI contract Secret name of this cluster, one per [`CAPI_SECRET_SUFFIXES`]
    /// entry (the names another provider or CAPI itself may use for this cluster).
    #[must_use]
    pub fn capi_secret_space(&self) -> Vec<String> {
        CAPI_SECRET_SUFFIXES
            .iter()
            .map(|s| self.capi_secret(s))
            .collect()
    }

    /// Every derived name that is not a CAPI contract Secret, with the limit it must meet.
    #[must_use]
    pub fn all_fitted(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = InternalSecret::ALL
            .iter()
            .map(|s| (self.internal_secret(*s), DNS_SUBDOMAIN_MAX))
            .collect();
        out.extend([
            (self.config_map(), DNS_SUBDOMAIN_MAX),
            (self.deployment(), DNS_LABEL_MAX),
            (self.service(), DNS_LABEL_MAX),
            (self.ingress(), DNS_SUBDOMAIN_MAX),
            (self.pod_label_value(), DNS_LABEL_MAX),
            (self.cluster_label_value(), DNS_LABEL_MAX),
        ]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LONG: &str = "aabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijab";

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    }

    fn is_dns1035_label(s: &str) -> bool {
        is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
    }

    /// `IsDNS1123Subdomain`: dot-separated parts of `[a-z0-9-]` with alphanumeric ends, at
    /// most 253 in total (no per-part limit).
    fn is_subdomain(s: &str) -> bool {
        s.len() <= 253
            && s.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && part.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && part.ends_with(|c: char| c.is_ascii_alphanumeric())
            })
    }

    fn is_identifier(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    }

    #[test]
    fn short_names_are_kept() {
        let n = ObjectNames::new("demo", "demo");
        assert_eq!(n.kubeconfig_secret(), "demo-kubeconfig");
        assert_eq!(n.ca_secret(), "demo-ca");
        assert_eq!(n.service_account_secret(), "demo-sa");
        assert_eq!(n.front_proxy_ca_secret(), "demo-proxy");
        assert_eq!(n.etcd_ca_secret(), "demo-etcd");
        assert_eq!(n.deployment(), "demo");
        assert_eq!(n.service(), "demo");
        assert_eq!(n.apiserver_certificate_secret(), "demo-apiserver.tls");
        assert_eq!(n.scheduler_kubeconfig_secret(), "demo-scheduler.kubeconfig");
        assert_eq!(
            n.legacy_internal_secret(InternalSecret::SchedulerKubeconfig)
                .as_deref(),
            Some("demo-scheduler-kubeconfig")
        );
        assert!(datastore_schema("tenant-a", "demo").starts_with("tenant_a_demo_"));
        assert_eq!(etcd_prefix("tenant_a_demo_1"), "/tenant_a_demo_1");
        assert_ne!(datastore_schema("a-b", "c"), datastore_schema("a", "b-c"));
    }

    #[test]
    fn b16_63_character_names_fit() {
        assert_eq!(LONG.len(), 63);
        let n = ObjectNames::new(LONG, LONG);
        // CAPI contract names are not shortened.
        assert_eq!(n.kubeconfig_secret(), format!("{LONG}-kubeconfig"));
        assert_eq!(n.ca_secret(), format!("{LONG}-ca"));
        for (name, max) in n.all_fitted() {
            assert!(name.len() <= max, "{name} longer than {max}");
            if max == DNS_LABEL_MAX {
                assert!(is_dns_label(&name), "{name}");
            } else {
                assert!(is_subdomain(&name), "{name}");
            }
        }
        assert!(is_dns1035_label(&n.service()));
        let ns = "tenant-with-a-fairly-long-namespace-name-for-testing-0000000001";
        let schema = datastore_schema(ns, LONG);
        assert!(is_identifier(&schema), "{schema}");
    }

    #[test]
    fn b16_digit_leading_name_gives_valid_service() {
        let n = ObjectNames::new("1demo", "1demo");
        let svc = n.service();
        assert!(is_dns1035_label(&svc), "{svc}");
        assert!(svc.starts_with("k-1demo-"), "{svc}");
        assert_eq!(n.deployment(), "1demo");
        assert!(is_identifier(&datastore_schema("tenant-a", "1demo")));
        assert!(is_identifier(&datastore_schema("1ns", "1demo")));
    }

    #[test]
    fn b16_long_names_sharing_a_prefix_stay_distinct() {
        let a = format!("{}x", &LONG[..62]);
        let b = format!("{}y", &LONG[..62]);
        let (na, nb) = (ObjectNames::new(&a, &a), ObjectNames::new(&b, &b));
        for ((x, _), (y, _)) in na.all_fitted().into_iter().zip(nb.all_fitted()) {
            assert_ne!(x, y);
        }
        assert_ne!(datastore_schema("ns", &a), datastore_schema("ns", &b));
    }

    #[test]
    fn dots_are_repaired_with_a_hash() {
        let dotted = ObjectNames::new("a.b", "a.b");
        let dashed = ObjectNames::new("a-b", "a-b");
        assert_ne!(dotted.service(), dashed.service());
        assert_ne!(dotted.deployment(), dashed.deployment());
        assert_eq!(dotted.ingress(), "a.b");
        assert_ne!(datastore_schema("ns", "a.b"), datastore_schema("ns", "a-b"));
        assert!(is_identifier(&datastore_schema("ns", "a.b")));
    }

    fn internal_names(n: &ObjectNames) -> Vec<String> {
        InternalSecret::ALL
            .iter()
            .map(|s| n.internal_secret(*s))
            .collect()
    }

    /// The pairs of cluster names the issue reported (`x` and `x-scheduler`, `x-admin`,
    /// `x-super-admin`) and every sibling made of a role word: no internal Secret of one is a
    /// CAPI or internal Secret of the other.
    #[test]
    fn internal_names_never_fall_into_a_sibling_clusters_capi_names() {
        let words = [
            "scheduler",
            "controller-manager",
            "super-admin",
            "admin",
            "apiserver",
            "apiserver-kubelet",
            "front-proxy",
            "konnectivity",
            "kubeconfig",
            "apiserver-etcd",
        ];
        for base in ["x", "demo", LONG] {
            let a = ObjectNames::new(base, base);
            for w in words {
                let sibling = format!("{base}-{w}");
                let b = ObjectNames::new(&sibling, &sibling);
                let theirs: Vec<String> = b
                    .capi_secret_space()
                    .into_iter()
                    .chain(internal_names(&b))
                    .collect();
                for name in internal_names(&a) {
                    assert!(
                        !theirs.contains(&name),
                        "{name} of {base} is also {sibling}'s"
                    );
                }
                for name in internal_names(&b) {
                    assert!(
                        !a.capi_secret_space().contains(&name),
                        "{name} of {sibling} is also {base}'s"
                    );
                }
            }
            // Old names did collide: the reason for the rename.
            let old = a
                .legacy_internal_secret(InternalSecret::SchedulerKubeconfig)
                .unwrap_or_default();
            let sibling = ObjectNames::new(&format!("{base}-scheduler"), "s");
            assert_eq!(old, sibling.kubeconfig_secret());
        }
    }

    /// The structural reason: after the last `-` of every internal name comes a `.`, which no
    /// CAPI suffix has.
    #[test]
    fn internal_names_end_in_a_dotted_segment() {
        for suffix in CAPI_SECRET_SUFFIXES {
            assert!(!suffix.contains('.'), "{suffix}");
        }
        for n in [ObjectNames::new("x", "x"), ObjectNames::new(LONG, LONG)] {
            for name in internal_names(&n) {
                let tail = name.rsplit('-').next().unwrap_or_default();
                assert!(tail.contains('.'), "{name}");
            }
        }
    }

    fn k8s_name() -> impl Strategy<Value = String> {
        // DNS-1123 subdomains up to 253 characters: labels joined by dots.
        prop::collection::vec("[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", 1..5)
            .prop_map(|labels| {
                let mut s = labels.join(".");
                s.truncate(253);
                s.trim_end_matches(['.', '-']).to_owned()
            })
            .prop_filter("non-empty", |s| !s.is_empty())
    }

    proptest! {
        #[test]
        fn derived_names_are_valid_and_stable(cluster in k8s_name(), kcp in k8s_name(), ns in "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?") {
            let n = ObjectNames::new(&cluster, &kcp);
            for (name, max) in n.all_fitted() {
                prop_assert!(name.len() <= max);
                if max == DNS_LABEL_MAX { prop_assert!(is_dns_label(&name), "{}", name); }
                else { prop_assert!(is_subdomain(&name), "{}", name); }
            }
            prop_assert!(is_dns1035_label(&n.service()));
            prop_assert_eq!(n.all_fitted(), ObjectNames::new(&cluster, &kcp).all_fitted());
            let schema = datastore_schema(&ns, &kcp);
            prop_assert!(is_identifier(&schema), "{}", schema);
            prop_assert_eq!(schema, datastore_schema(&ns, &kcp));
        }

        #[test]
        fn no_two_clusters_share_a_secret_name(a in k8s_name(), tail in "[a-z0-9.-]{0,30}", roles in 0usize..InternalSecret::ALL.len()) {
            // b is a, a dash and something shaped like a role or a CAPI suffix.
            let word = InternalSecret::ALL[roles].suffix().trim_start_matches('-');
            let b = format!("{a}-{tail}{word}");
            let b = b.trim_end_matches(['.', '-']).to_owned();
            prop_assume!(b.len() <= 253 && b != a);
            let (na, nb) = (ObjectNames::new(&a, &a), ObjectNames::new(&b, &b));
            let theirs: Vec<String> = nb.capi_secret_space().into_iter().chain(internal_names(&nb)).collect();
            for name in internal_names(&na) {
                prop_assert!(!theirs.contains(&name), "{} of {} is also {}'s", name, a, b);
            }
            let ours = na.capi_secret_space();
            for name in internal_names(&nb) {
                prop_assert!(!ours.contains(&name), "{} of {} is also {}'s", name, b, a);
            }
        }

        #[test]
        fn distinct_inputs_give_distinct_names(a in k8s_name(), b in k8s_name()) {
            prop_assume!(a != b);
            let (na, nb) = (ObjectNames::new(&a, &a), ObjectNames::new(&b, &b));
            prop_assert_ne!(na.service(), nb.service());
            prop_assert_ne!(na.deployment(), nb.deployment());
            prop_assert_ne!(na.apiserver_certificate_secret(), nb.apiserver_certificate_secret());
            prop_assert_ne!(datastore_schema("ns", &a), datastore_schema("ns", &b));
        }
    }
}
