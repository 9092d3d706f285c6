//! Kubeconfig rendering with serde structs (`clientcmd/api/v1` field names and order).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use crate::error::Error;
use crate::pki::LeafCertificate;

/// A kubeconfig file (`apiVersion: v1`, `kind: Config`). Fields are in kubeadm's (alphabetical)
/// order; `None` lists render as `null`, as in kubeadm's cluster-info.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Kubeconfig {
    /// Always `v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Clusters.
    pub clusters: Option<Vec<NamedCluster>>,
    /// Contexts.
    pub contexts: Option<Vec<NamedContext>>,
    /// Current context name.
    #[serde(rename = "current-context")]
    pub current_context: String,
    /// Always `Config`.
    pub kind: String,
    /// Always empty.
    pub preferences: Preferences,
    /// Users.
    pub users: Option<Vec<NamedUser>>,
}

/// `preferences: {}`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Preferences {}

/// A named cluster entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NamedCluster {
    /// Connection details.
    pub cluster: Cluster,
    /// Entry name.
    pub name: String,
}

/// Cluster connection details.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct Cluster {
    /// CA file path (used by kube-proxy's in-pod kubeconfig).
    #[serde(
        rename = "certificate-authority",
        skip_serializing_if = "Option::is_none"
    )]
    pub certificate_authority: Option<String>,
    /// Base64 of the CA PEM.
    #[serde(
        rename = "certificate-authority-data",
        skip_serializing_if = "Option::is_none"
    )]
    pub certificate_authority_data: Option<String>,
    /// `https://host:port`.
    pub server: String,
}

/// A named context entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NamedContext {
    /// Context body.
    pub context: Context,
    /// Entry name.
    pub name: String,
}

/// Context body.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Context {
    /// Cluster entry name.
    pub cluster: String,
    /// Default namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// User entry name.
    pub user: String,
}

/// A named user entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NamedUser {
    /// Entry name.
    pub name: String,
    /// Credentials.
    pub user: User,
}

/// User credentials.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct User {
    /// Base64 of the client certificate PEM.
    #[serde(
        rename = "client-certificate-data",
        skip_serializing_if = "Option::is_none"
    )]
    pub client_certificate_data: Option<String>,
    /// Base64 of the client key PEM. Secret.
    #[serde(rename = "client-key-data", skip_serializing_if = "Option::is_none")]
    pub client_key_data: Option<String>,
    /// Path of a bearer token file.
    #[serde(rename = "tokenFile", skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
}

impl Kubeconfig {
    /// Renders YAML.
    ///
    /// # Errors
    /// [`Error::Render`] (not expected for these types).
    pub fn to_yaml(&self) -> Result<String, Error> {
        serde_yaml::to_string(self).map_err(|source| Error::Render {
            what: "kubeconfig".into(),
            source,
        })
    }
}

/// The HTTPS URL of `host:port`, bracketing IPv6 literals.
#[must_use]
pub fn server_url(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    }
}

/// A kubeconfig with one cluster, one client-certificate user and one context
/// `<user>@<cluster>` (kubeadm's `CreateWithCerts` layout).
///
/// `server` is the full URL: the in-cluster Service address for controller-manager and
/// scheduler, the public endpoint for anything handed to users or CAPI. `ca_pem` is what the
/// client trusts (`certificate-authority-data`): the cluster CA's certificate, or, while a CA
/// rotation runs, the bundle of the old and the new one.
#[must_use]
pub fn client_cert_kubeconfig(
    cluster_name: &str,
    user_name: &str,
    server: &str,
    ca_pem: &str,
    client: &LeafCertificate,
) -> Kubeconfig {
    let context = format!("{user_name}@{cluster_name}");
    Kubeconfig {
        api_version: "v1".into(),
        clusters: Some(vec![NamedCluster {
            cluster: Cluster {
                certificate_authority: None,
                certificate_authority_data: Some(STANDARD.encode(ca_pem)),
                server: server.into(),
            },
            name: cluster_name.into(),
        }]),
        contexts: Some(vec![NamedContext {
            context: Context {
                cluster: cluster_name.into(),
                namespace: None,
                user: user_name.into(),
            },
            name: context.clone(),
        }]),
        current_context: context,
        kind: "Config".into(),
        preferences: Preferences {},
        users: Some(vec![NamedUser {
            name: user_name.into(),
            user: User {
                client_certificate_data: Some(STANDARD.encode(client.cert_pem())),
                client_key_data: Some(STANDARD.encode(client.key_pem())),
                token_file: None,
            },
        }]),
    }
}

/// The admin kubeconfig in Cluster API's shape (contract item 53): cluster `<cluster>`, user
/// `<cluster>-admin`, context `<cluster>-admin@<cluster>`; `server` is the public endpoint.
/// Use the [`crate::pki::LeafSpec::admin`] certificate for users, the super-admin one only
/// for the provider itself.
#[must_use]
pub fn capi_admin_kubeconfig(
    cluster_name: &str,
    server: &str,
    ca_pem: &str,
    admin: &LeafCertificate,
) -> Kubeconfig {
    client_cert_kubeconfig(
        cluster_name,
        &format!("{cluster_name}-admin"),
        server,
        ca_pem,
        admin,
    )
}

/// kube-controller-manager's kubeconfig (kubeadm: user `system:kube-controller-manager`).
#[must_use]
pub fn controller_manager_kubeconfig(
    cluster_name: &str,
    server: &str,
    ca_pem: &str,
    cert: &LeafCertificate,
) -> Kubeconfig {
    client_cert_kubeconfig(
        cluster_name,
        "system:kube-controller-manager",
        server,
        ca_pem,
        cert,
    )
}

/// kube-scheduler's kubeconfig (kubeadm: user `system:kube-scheduler`).
#[must_use]
pub fn scheduler_kubeconfig(
    cluster_name: &str,
    server: &str,
    ca_pem: &str,
    cert: &LeafCertificate,
) -> Kubeconfig {
    client_cert_kubeconfig(cluster_name, "system:kube-scheduler", server, ca_pem, cert)
}

/// The super-admin kubeconfig (kubeadm's `super-admin.conf`, user `kubernetes-super-admin`).
/// For the provider's own use; never publish it.
#[must_use]
pub fn super_admin_kubeconfig(
    cluster_name: &str,
    server: &str,
    ca_pem: &str,
    cert: &LeafCertificate,
) -> Kubeconfig {
    client_cert_kubeconfig(cluster_name, "kubernetes-super-admin", server, ca_pem, cert)
}

/// The kubeconfig stored in `kube-public/cluster-info`: exactly one cluster named `""` with
/// `certificate-authority-data` and the public `server`, `contexts: null`, `users: null`
/// (kubeadm's `CreateBootstrapConfigMapIfNotExists`).
#[must_use]
pub fn cluster_info_kubeconfig(server: &str, ca_cert_pem: &str) -> Kubeconfig {
    Kubeconfig {
        api_version: "v1".into(),
        clusters: Some(vec![NamedCluster {
            cluster: Cluster {
                certificate_authority: None,
                certificate_authority_data: Some(STANDARD.encode(ca_cert_pem)),
                server: server.into(),
            },
            name: String::new(),
        }]),
        contexts: None,
        current_context: String::new(),
        kind: "Config".into(),
        preferences: Preferences {},
        users: None,
    }
}

/// kube-proxy's in-pod kubeconfig (`kubeconfig.conf` key of the kube-proxy ConfigMap):
/// the ServiceAccount CA file and token file, `server` = the public endpoint (the in-cluster
/// `kubernetes` Service does not work before kube-proxy runs).
#[must_use]
pub fn kube_proxy_kubeconfig(server: &str) -> Kubeconfig {
    Kubeconfig {
        api_version: "v1".into(),
        clusters: Some(vec![NamedCluster {
            cluster: Cluster {
                certificate_authority: Some(
                    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt".into(),
                ),
                certificate_authority_data: None,
                server: server.into(),
            },
            name: "default".into(),
        }]),
        contexts: Some(vec![NamedContext {
            context: Context {
                cluster: "default".into(),
                namespace: Some("default".into()),
                user: "default".into(),
            },
            name: "default".into(),
        }]),
        current_context: "default".into(),
        kind: "Config".into(),
        preferences: Preferences {},
        users: Some(vec![NamedUser {
            name: "default".into(),
            user: User {
                token_file: Some("/var/run/secrets/kubernetes.io/serviceaccount/token".into()),
                ..User::default()
            },
        }]),
    }
}
