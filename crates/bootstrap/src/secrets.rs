//! The Cluster API Secrets of a tenant (contract items 51 and 56).
//!
//! All carry `type: cluster.x-k8s.io/secret` and the label
//! `cluster.x-k8s.io/cluster-name: <cluster>` (without it the CAPI managers' caches do not see
//! them). Names are passed in: the naming function lives in kamaji-api. Owner references are
//! the reconciler's business.
//!
//! There is no builder for a `<cluster>-etcd` Secret: a shared DataStore's CA key belongs to
//! every tenant on it and is never copied into a tenant's Secrets ([`crate::pki::DatastoreCa`]
//! does not even expose it).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kamaji_api::meta::{CLUSTER_NAME_LABEL, CLUSTER_SECRET_TYPE, KUBECONFIG_SECRET_KEY};

use crate::pki::{CertificateAuthority, LeafCertificate, ServiceAccountKeyPair};
/// Certificate key of the certificate Secrets.
pub const TLS_CRT_KEY: &str = "tls.crt";
/// Private key key of the certificate Secrets.
pub const TLS_KEY_KEY: &str = "tls.key";

/// Where a Secret goes and which cluster it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct SecretTarget<'a> {
    /// Secret name (from kamaji-api's naming, e.g. `<cluster>-ca`).
    pub name: &'a str,
    /// Namespace: the Cluster's namespace.
    pub namespace: &'a str,
    /// The CAPI Cluster name (label value).
    pub cluster_name: &'a str,
}

fn capi_secret(target: SecretTarget<'_>, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(target.name.into()),
            namespace: Some(target.namespace.into()),
            labels: Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_owned(),
                target.cluster_name.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(CLUSTER_SECRET_TYPE.into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn pair(crt: &str, key: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (TLS_CRT_KEY.to_owned(), ByteString(crt.as_bytes().to_vec())),
        (TLS_KEY_KEY.to_owned(), ByteString(key.as_bytes().to_vec())),
    ])
}

/// `<cluster>-kubeconfig`: data key `value` = the rendered kubeconfig (public endpoint, admin
/// identity).
#[must_use]
pub fn kubeconfig_secret(target: SecretTarget<'_>, kubeconfig_yaml: &str) -> Secret {
    capi_secret(
        target,
        BTreeMap::from([(
            KUBECONFIG_SECRET_KEY.to_owned(),
            ByteString(kubeconfig_yaml.as_bytes().to_vec()),
        )]),
    )
}

/// A CA Secret (`<cluster>-ca` for the cluster CA, `<cluster>-proxy` for the front-proxy CA):
/// `tls.crt` / `tls.key` PEM.
#[must_use]
pub fn ca_secret(target: SecretTarget<'_>, ca: &CertificateAuthority) -> Secret {
    capi_secret(target, pair(ca.cert_pem(), ca.key_pem()))
}

/// `<cluster>-sa`: `tls.crt` = public key PEM, `tls.key` = private key PEM (contract item 56).
#[must_use]
pub fn service_account_secret(target: SecretTarget<'_>, sa: &ServiceAccountKeyPair) -> Secret {
    capi_secret(target, pair(sa.public_pem(), sa.private_pem()))
}

/// A Secret of the cluster holding `data` as is (type `cluster.x-k8s.io/secret`, the cluster
/// label), for state kamaji-rs keeps in its own Secrets.
#[must_use]
pub fn data_secret(target: SecretTarget<'_>, data: BTreeMap<String, ByteString>) -> Secret {
    capi_secret(target, data)
}

/// A leaf certificate Secret (`tls.crt` / `tls.key`), for leaves the reconciler stores
/// (e.g. `<cluster>-apiserver-etcd-client`).
#[must_use]
pub fn leaf_secret(target: SecretTarget<'_>, leaf: &LeafCertificate) -> Secret {
    capi_secret(target, pair(leaf.cert_pem(), leaf.key_pem()))
}

/// Reads `tls.crt` / `tls.key` of a Secret as UTF-8 PEM, if both are present.
#[must_use]
pub fn tls_pair_of(secret: &Secret) -> Option<(String, String)> {
    let data = secret.data.as_ref()?;
    let get = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Some((get(TLS_CRT_KEY)?, get(TLS_KEY_KEY)?))
}

/// Whether the object of UID `uid` is `secret`'s controller (an owner reference with
/// `controller: true`).
#[must_use]
pub fn controlled_by(secret: &Secret, uid: &str) -> bool {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}
