//! `DataStore` (`kamaji.clastix.io/v1alpha1`, cluster-scoped): a datastore shared by many
//! control planes, each under its own key prefix or database. Field-compatible with Kamaji's
//! (`clastix/kamaji:api/v1alpha1/datastore_types.go`), so existing Kamaji manifests apply.
//!
//! kamaji-rs implements the `etcd`, `PostgreSQL` and `MySQL` drivers (the last two through
//! kine); `NATS` is accepted by the schema and reported as unsupported in the
//! KamajiControlPlane's `DataStoreReady` condition.

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a `DataStore`.
// `kube(printcolumn(...))` repeats `type_`/`json_path` per column by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kamaji.clastix.io",
    version = "v1alpha1",
    kind = "DataStore",
    plural = "datastores",
    status = "DataStoreStatus",
    derive = "PartialEq",
    category = "kamaji",
    doc = "A datastore (etcd, or PostgreSQL/MySQL/NATS through kine) shared by control planes; each control plane gets its own key prefix or database.",
    printcolumn(
        name = "Driver",
        type_ = "string",
        json_path = ".spec.driver",
        description = "Datastore driver"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.driver != 'etcd' || (has(self.tlsConfig) && has(self.tlsConfig.clientCertificate))", "message": "spec.tlsConfig.clientCertificate is required when spec.driver is etcd"},
    {"rule": "self.driver != 'etcd' || (has(self.tlsConfig) && has(self.tlsConfig.certificateAuthority.privateKey))", "message": "spec.tlsConfig.certificateAuthority.privateKey is required when spec.driver is etcd"},
    {"rule": "self.driver == 'etcd' || has(self.tlsConfig) || has(self.basicAuth)", "message": "spec.tlsConfig or spec.basicAuth is required when spec.driver is not etcd"},
    {"rule": "!(self.driver in ['PostgreSQL', 'MySQL']) || has(self.basicAuth)", "message": "spec.basicAuth is required when spec.driver is PostgreSQL or MySQL: kamaji-rs creates each tenant's database and user as that administrator"}
]))]
pub struct DataStoreSpec {
    /// Datastore implementation: `etcd`, `PostgreSQL`, `MySQL` or `NATS`.
    pub driver: Driver,
    /// Endpoints as `host:port`, without scheme.
    #[schemars(length(min = 1, max = 16))]
    #[schemars(extend("items" = {"type": "string", "minLength": 1, "maxLength": 512}))]
    pub endpoints: Vec<String>,
    /// User name and password: on etcd the user with the `root` role kamaji-rs acts as; on
    /// PostgreSQL and MySQL the administrator that creates each tenant's database and user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// TLS settings: the CA (with its private key for etcd, to issue per-tenant client
    /// certificates) and the client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_config: Option<TlsConfig>,
}

/// Datastore implementation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Driver {
    /// etcd v3 (implemented by kamaji-rs).
    #[serde(rename = "etcd")]
    Etcd,
    /// PostgreSQL through kine.
    PostgreSQL,
    /// MySQL through kine.
    MySQL,
    /// NATS through kine.
    #[serde(rename = "NATS")]
    Nats,
}

impl Driver {
    /// The value as written in `spec.driver`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Etcd => "etcd",
            Self::PostgreSQL => "PostgreSQL",
            Self::MySQL => "MySQL",
            Self::Nats => "NATS",
        }
    }
}

/// User name and password of a datastore.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The user name.
    pub username: ContentRef,
    /// The password.
    pub password: ContentRef,
}

/// TLS settings of a datastore.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    /// CA certificate of the datastore, and for etcd its private key.
    pub certificate_authority: CertKeyPair,
    /// Client certificate and key presented to the datastore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
}

/// A certificate with an optional private key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertKeyPair {
    /// PEM certificate.
    pub certificate: ContentRef,
    /// PEM private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<ContentRef>,
}

/// A client certificate and its private key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientCertificate {
    /// PEM certificate.
    pub certificate: ContentRef,
    /// PEM private key.
    pub private_key: ContentRef,
}

/// A value given inline (`content`, base64) or by reference to a Secret key
/// (`secretReference`). `content` wins when both are set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.content) || has(self.secretReference)", "message": "either content or secretReference must be set"}
]))]
pub struct ContentRef {
    /// The value itself, base64-encoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::base64_bytes")]
    pub content: Option<ByteString>,
    /// The Secret key holding the value.
    #[serde(
        rename = "secretReference",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub secret_reference: Option<SecretKeyReference>,
}

/// A key of a Secret in any namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Secret name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub name: Option<String>,
    /// Secret namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
    /// Key in the Secret's data.
    #[schemars(length(min = 1, max = 253))]
    pub key_path: String,
}

/// Observed state of a `DataStore`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataStoreStatus {
    /// Control planes using this DataStore, as `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<Vec<String>>,
    /// Conditions, for example whether the driver is supported and the endpoints answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}
