//! DataStores: resolving a Kamaji `DataStore` into what the API server needs, and removing a
//! tenant's keys when it is deleted.
//!
//! The `etcd`, `PostgreSQL` and `MySQL` drivers are implemented. An etcd DataStore (Kamaji's
//! schema) carries the CA
//! certificate and key and a client certificate; kamaji-rs issues each tenant its own client
//! certificate from that CA (the CA key is used in memory only and never copied into a tenant
//! Secret) and gives each tenant its own key prefix (`--etcd-prefix=/<dataStoreSchema>`).
//! `PostgreSQL` and `MySQL` DataStores run kine beside the tenant's kube-apiserver, on a database
//! and user of the tenant's own ([`sql`]). `NATS` is reported as `DataStoreReady=False`,
//! reason `DataStoreDriverUnsupported`.
//!
//! `spec.dataStoreOverrides` keeps resources on other etcd DataStores
//! (`--etcd-servers-overrides`). kube-apiserver reaches every etcd with the same client
//! certificate, CA file and key prefix, so an override DataStore must have the same CA
//! certificate as the control plane's ([`same_ca`]); it then trusts the tenant's client
//! certificate and its server certificate verifies against the mounted CA.
//!
//! [`auth`] turns on etcd authentication: each tenant may read and write its own prefix only.

pub mod auth;
pub mod sql;

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kamaji_api::DataStore;
use kamaji_api::datastore::{ContentRef, Driver};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt as _};

/// What is wrong with a DataStore, for the `DataStoreReady` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No DataStore of that name.
    NotFound(String),
    /// A driver kamaji-rs does not implement (`NATS`).
    DriverUnsupported(String),
    /// A referenced Secret or key is missing or unreadable.
    Invalid(String),
}

impl Problem {
    /// Human-readable message.
    #[must_use]
    pub fn message(&self) -> String {
        match self {
            Self::NotFound(name) => format!("DataStore {name} does not exist"),
            Self::DriverUnsupported(d) => {
                format!(
                    "DataStore driver {d} is not supported by kamaji-rs (etcd, PostgreSQL and \
                     MySQL are)"
                )
            }
            Self::Invalid(m) => m.clone(),
        }
    }
}

/// A DataStore with its referenced material read.
#[derive(Clone)]
pub struct Resolved {
    /// DataStore name.
    pub name: String,
    /// `spec.driver`.
    pub driver: Driver,
    /// How the provider reaches a PostgreSQL or MySQL DataStore; `None` for etcd.
    pub sql: Option<sql::SqlAccess>,
    /// Endpoints as given (`host:port`, or URLs).
    pub endpoints: Vec<String>,
    /// etcd's CA certificate PEM: one certificate, or a bundle while the DataStore's owner
    /// rotates its CA (the one `ca_key` belongs to signs; all are trusted). Empty for SQL.
    pub ca_cert: String,
    /// etcd's CA private key PEM (used to issue tenant client certificates; never stored per
    /// tenant). Empty for SQL.
    pub ca_key: String,
    /// The control plane's `spec.dataStoreOverrides` on their DataStores (filled by the
    /// observe step; empty for a DataStore resolved alone).
    pub overrides: Vec<Override>,
    /// `spec.basicAuth`: the etcd user with the `root` role the provider acts as
    /// ([`auth::session`]); `None` for `root` with a password derived from the CA key.
    pub basic_auth: Option<UserPassword>,
}

/// An etcd user name and its password (`DataStore.spec.basicAuth`).
#[derive(Clone, PartialEq, Eq)]
pub struct UserPassword {
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
}

/// Shows the user name only.
impl std::fmt::Debug for UserPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserPassword")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A resource of `spec.dataStoreOverrides` with the DataStore that keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// `group/resource` (`/events`).
    pub resource: String,
    /// The DataStore's name.
    pub datastore: String,
    /// The DataStore's server URLs.
    pub servers: Vec<String>,
    /// The DataStore's `spec.basicAuth` (its etcd administrator, [`auth::session`]).
    pub basic_auth: Option<UserPassword>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("name", &self.name)
            .field("endpoints", &self.endpoints)
            .field("overrides", &self.overrides)
            .finish_non_exhaustive()
    }
}

impl Resolved {
    /// `--etcd-servers` URLs: `https://` added to bare `host:port` endpoints of etcd; kine in the
    /// pod ([`sql::KINE_LISTEN_ADDRESS`], plain HTTP on the pod's loopback) for SQL.
    #[must_use]
    pub fn server_urls(&self) -> Vec<String> {
        if self.sql.is_some() {
            return vec![format!("http://{}", sql::KINE_LISTEN_ADDRESS)];
        }
        self.endpoints
            .iter()
            .map(|e| {
                if e.contains("://") {
                    e.clone()
                } else {
                    format!("https://{e}")
                }
            })
            .collect()
    }
}

/// Reads `r` (inline content or a Secret key).
async fn content(client: &kube::Client, r: &ContentRef, field: &str) -> Result<String, Problem> {
    if let Some(c) = &r.content {
        return String::from_utf8(c.0.clone())
            .map_err(|_| Problem::Invalid(format!("{field}.content is not UTF-8 PEM")));
    }
    let sr = r
        .secret_reference
        .as_ref()
        .ok_or_else(|| Problem::Invalid(format!("{field}: neither content nor secretReference")))?;
    let (Some(name), Some(ns)) = (&sr.name, &sr.namespace) else {
        return Err(Problem::Invalid(format!(
            "{field}.secretReference needs name and namespace"
        )));
    };
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Problem::Invalid(format!("{field}: reading Secret {ns}/{name}: {e}")))?
        .ok_or_else(|| Problem::Invalid(format!("{field}: Secret {ns}/{name} does not exist")))?;
    let data: BTreeMap<_, _> = secret.data.unwrap_or_default();
    let raw = data.get(&sr.key_path).ok_or_else(|| {
        Problem::Invalid(format!(
            "{field}: Secret {ns}/{name} has no key {}",
            sr.key_path
        ))
    })?;
    String::from_utf8(raw.0.clone()).map_err(|_| {
        Problem::Invalid(format!(
            "{field}: Secret {ns}/{name} key {} is not UTF-8",
            sr.key_path
        ))
    })
}

/// The DataStore `name`: from the controller's watch cache of DataStores (`cache`, which the
/// watch keeps current), read from the API server when the cache does not hold it (not filled
/// yet, or no controller runs).
///
/// # Errors
/// The API server's, when read from it.
async fn get(
    client: &kube::Client,
    cache: Option<&Store<DataStore>>,
    name: &str,
) -> Result<Option<DataStore>, kube::Error> {
    if let Some(d) = cache.and_then(|s| s.get(&ObjectRef::new(name))) {
        return Ok(Some(DataStore::clone(&d)));
    }
    Api::<DataStore>::all(client.clone()).get_opt(name).await
}

/// Resolves the DataStore `name` ([`get`] with `cache`).
///
/// # Errors
/// A [`Problem`] for the `DataStoreReady` condition.
pub async fn resolve(
    client: &kube::Client,
    cache: Option<&Store<DataStore>>,
    name: &str,
) -> Result<Resolved, Problem> {
    let ds = get(client, cache, name)
        .await
        .map_err(|e| Problem::Invalid(format!("reading DataStore {name}: {e}")))?
        .ok_or_else(|| Problem::NotFound(name.to_owned()))?;
    let basic_auth = match &ds.spec.basic_auth {
        Some(b) => Some(UserPassword {
            username: content(client, &b.username, "spec.basicAuth.username")
                .await?
                .trim()
                .to_owned(),
            password: content(client, &b.password, "spec.basicAuth.password")
                .await?
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
        }),
        None => None,
    };
    let dialect = match ds.spec.driver {
        Driver::Etcd => None,
        Driver::PostgreSQL => Some(sql::Dialect::PostgreSql),
        Driver::MySQL => Some(sql::Dialect::MySql),
        Driver::Nats => {
            return Err(Problem::DriverUnsupported(
                ds.spec.driver.as_str().to_owned(),
            ));
        }
    };
    if let Some(dialect) = dialect {
        return resolve_sql(client, &ds, dialect, basic_auth).await;
    }
    let tls = ds.spec.tls_config.as_ref().ok_or_else(|| {
        Problem::Invalid(format!(
            "DataStore {name}: spec.tlsConfig is required for etcd"
        ))
    })?;
    let ca_cert = content(
        client,
        &tls.certificate_authority.certificate,
        "spec.tlsConfig.certificateAuthority.certificate",
    )
    .await?;
    let key_ref = tls.certificate_authority.private_key.as_ref().ok_or_else(|| {
        Problem::Invalid(format!("DataStore {name}: spec.tlsConfig.certificateAuthority.privateKey is required to issue tenant client certificates"))
    })?;
    let ca_key = content(
        client,
        key_ref,
        "spec.tlsConfig.certificateAuthority.privateKey",
    )
    .await?;
    kamaji_bootstrap::pki::DatastoreCa::from_pem(&ca_cert, &ca_key).map_err(|e| {
        Problem::Invalid(format!(
            "DataStore {name}: spec.tlsConfig.certificateAuthority: {e}"
        ))
    })?;
    Ok(Resolved {
        name: name.to_owned(),
        driver: Driver::Etcd,
        sql: None,
        endpoints: ds.spec.endpoints.clone(),
        ca_cert,
        ca_key,
        overrides: Vec::new(),
        basic_auth,
    })
}

/// A PostgreSQL or MySQL DataStore: its administrator (`spec.basicAuth`, required), the CA
/// its servers' certificates are verified against and the client certificate, when
/// `spec.tlsConfig` is set.
async fn resolve_sql(
    client: &kube::Client,
    ds: &DataStore,
    dialect: sql::Dialect,
    basic_auth: Option<UserPassword>,
) -> Result<Resolved, Problem> {
    let name = ds.name_any();
    let admin = basic_auth.ok_or_else(|| {
        Problem::Invalid(format!(
            "DataStore {name}: spec.basicAuth is required for {}: kamaji-rs creates each \
             tenant's database and user as that administrator",
            ds.spec.driver.as_str()
        ))
    })?;
    let (ca_cert, client_cert) = match &ds.spec.tls_config {
        Some(tls) => {
            let ca = content(
                client,
                &tls.certificate_authority.certificate,
                "spec.tlsConfig.certificateAuthority.certificate",
            )
            .await?;
            let client_cert = match &tls.client_certificate {
                Some(c) => Some(Credentials {
                    cert: content(
                        client,
                        &c.certificate,
                        "spec.tlsConfig.clientCertificate.certificate",
                    )
                    .await?,
                    key: content(
                        client,
                        &c.private_key,
                        "spec.tlsConfig.clientCertificate.privateKey",
                    )
                    .await?,
                }),
                None => None,
            };
            (Some(ca), client_cert)
        }
        None => (None, None),
    };
    Ok(Resolved {
        name,
        driver: ds.spec.driver,
        sql: Some(sql::SqlAccess {
            dialect,
            admin,
            ca_cert,
            client: client_cert,
        }),
        endpoints: ds.spec.endpoints.clone(),
        ca_cert: String::new(),
        ca_key: String::new(),
        overrides: Vec::new(),
        basic_auth: None,
    })
}

/// Whether two CA certificate PEMs hold the same certificates (DER, in order), whatever their
/// line breaks or surrounding text: what an override DataStore needs to work with the control
/// plane's one client certificate and CA file.
#[must_use]
pub fn same_ca(a: &str, b: &str) -> bool {
    use kamaji_bootstrap::pki::inspect::certificates_der;
    match (certificates_der(a), certificates_der(b)) {
        (Some(a), Some(b)) => !a.is_empty() && a == b,
        _ => false,
    }
}

/// Client credentials towards the datastore (a tenant's client certificate).
#[derive(Clone)]
pub struct Credentials {
    /// Client certificate PEM.
    pub cert: String,
    /// Client key PEM.
    pub key: String,
}

/// Shows neither the certificate nor the key.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// A client of an etcd DataStore's JSON gateway: a client certificate, and while etcd
/// authentication is enabled the token of the user it acts as ([`auth::session`]).
#[derive(Clone, Debug)]
pub struct Session {
    /// The client certificate (etcd's gateway refuses one with a common name once
    /// authentication is enabled).
    pub credentials: Credentials,
    /// The token of `/v3/auth/authenticate`, sent as `Authorization`; `None` while
    /// authentication is disabled.
    pub token: Option<Token>,
    /// The HTTPS client of the session's requests, made on the first: its connections (one
    /// TLS handshake with the client certificate) serve every later request of the session.
    http: std::sync::OnceLock<reqwest::Client>,
}

/// An etcd authentication token (never shown).
#[derive(Clone)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl From<Credentials> for Session {
    fn from(credentials: Credentials) -> Self {
        Self {
            credentials,
            token: None,
            http: std::sync::OnceLock::new(),
        }
    }
}

/// POSTs `body` to `path` of etcd's gRPC JSON gateway on the first endpoint that answers.
///
/// # Errors
/// The last endpoint's failure; for an answer with an error status, the status and etcd's
/// message (e.g. `HTTP 400 Bad Request: etcdserver: role name already exists`).
async fn gateway(
    ds: &Resolved,
    session: &Session,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, String> {
    let http = if let Some(http) = session.http.get() {
        http
    } else {
        let creds = &session.credentials;
        let identity =
            reqwest::Identity::from_pem(format!("{}\n{}", creds.cert, creds.key).as_bytes())
                .map_err(|e| format!("client identity: {e}"))?;
        // Every certificate of the DataStore's CA (a bundle while it rotates).
        let ca = reqwest::Certificate::from_pem_bundle(ds.ca_cert.as_bytes())
            .map_err(|e| format!("CA: {e}"))?;
        let http = reqwest::Client::builder()
            .tls_certs_only(ca)
            .identity(identity)
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        session.http.get_or_init(|| http)
    };
    let mut last = String::from("no endpoint");
    for url in ds.server_urls() {
        let mut request = http.post(format!("{url}{path}")).json(body);
        if let Some(Token(token)) = &session.token {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        match request.send().await {
            Ok(resp) if resp.status().is_success() => {
                return resp.json().await.map_err(|e| e.to_string());
            }
            Ok(resp) => {
                let status = resp.status();
                let body: serde_json::Value = resp.json().await.unwrap_or_default();
                let message = body["message"].as_str().unwrap_or_default();
                last = format!("{url}{path}: HTTP {status}: {message}");
                // etcd refused the request itself: another member would say the same.
                if status.is_client_error() {
                    return Err(last);
                }
            }
            Err(e) => last = format!("{url}: {e}"),
        }
    }
    Err(last)
}

/// The `[key, range_end)` pair covering every key below `prefix` (base64, as the gateway wants).
fn prefix_range(prefix: &str) -> (String, String) {
    let b64 = base64::engine::general_purpose::STANDARD;
    let p = prefix.trim_end_matches('/');
    (b64.encode(format!("{p}/")), b64.encode(format!("{p}0"))) // '0' is the byte after '/'
}

/// Deletes every key under `prefix` (e.g. `/tenant_a_demo_1a2b3c4d`) through etcd's gRPC
/// gateway (`POST /v3/kv/deleterange`). Returns the number of deleted keys.
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn delete_prefix(ds: &Resolved, session: &Session, prefix: &str) -> Result<u64, String> {
    let (key, range_end) = prefix_range(prefix);
    let v = gateway(
        ds,
        session,
        "/v3/kv/deleterange",
        &serde_json::json!({"key": key, "range_end": range_end}),
    )
    .await?;
    Ok(v["deleted"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0))
}

/// Counts keys under `prefix` (`POST /v3/kv/range`, `count_only`).
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn count_prefix(ds: &Resolved, session: &Session, prefix: &str) -> Result<u64, String> {
    let (key, range_end) = prefix_range(prefix);
    let v = gateway(
        ds,
        session,
        "/v3/kv/range",
        &serde_json::json!({"key": key, "range_end": range_end, "count_only": true}),
    )
    .await?;
    Ok(v["count"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0))
}

/// The key recording which control plane holds `schema` on a datastore:
/// `/kamaji-rs/claims/<schema>`, outside every tenant's prefix (a schema has no `-`).
#[must_use]
pub fn claim_key(schema: &str) -> String {
    format!("{CLAIMS}/{schema}")
}

/// Where the claims are kept.
const CLAIMS: &str = "/kamaji-rs/claims";

/// Who holds a datastore schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Nobody has claimed it (a tenant from before claims, or none).
    Free,
    /// `holder` (`namespace/name` of a KamajiControlPlane) holds it.
    HeldBy(String),
}

/// Claims `schema` on the datastore for `holder` (`namespace/name`), in one etcd transaction:
/// the claim key is written only if it does not exist. Returns the holder afterwards: `holder`
/// itself when it claimed it now or before, another control plane's `namespace/name` when that
/// one was first. Two control planes with the same schema on one etcd would read and write
/// each other's objects, and deleting one would delete the other's keys.
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn claim_schema(
    ds: &Resolved,
    session: &Session,
    schema: &str,
    holder: &str,
) -> Result<String, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.encode(claim_key(schema));
    let v = gateway(
        ds,
        session,
        "/v3/kv/txn",
        &serde_json::json!({
            "compare": [{"result": "EQUAL", "target": "CREATE", "key": key, "create_revision": "0"}],
            "success": [{"request_put": {"key": key, "value": b64.encode(holder)}}],
            "failure": [{"request_range": {"key": key}}],
        }),
    )
    .await?;
    if v["succeeded"].as_bool().unwrap_or(false) {
        return Ok(holder.to_owned());
    }
    match first_value(&v["responses"][0]["response_range"]) {
        Some(h) => Ok(h),
        // Released between the compare and now: the next pass claims it.
        None => Err(format!(
            "the claim on {} changed while read",
            claim_key(schema)
        )),
    }
}

/// Who holds `schema` on the datastore (`POST /v3/kv/range` of [`claim_key`]).
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn schema_claim(ds: &Resolved, session: &Session, schema: &str) -> Result<Claim, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let v = gateway(
        ds,
        session,
        "/v3/kv/range",
        &serde_json::json!({"key": b64.encode(claim_key(schema))}),
    )
    .await?;
    Ok(first_value(&v).map_or(Claim::Free, Claim::HeldBy))
}

/// Removes `holder`'s claim on `schema` (a transaction that deletes the claim key only while
/// its value is `holder`): once a control plane's keys are deleted, its schema is free again.
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn release_schema(
    ds: &Resolved,
    session: &Session,
    schema: &str,
    holder: &str,
) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.encode(claim_key(schema));
    gateway(
        ds,
        session,
        "/v3/kv/txn",
        &serde_json::json!({
            "compare": [{"result": "EQUAL", "target": "VALUE", "key": key, "value": b64.encode(holder)}],
            "success": [{"request_delete_range": {"key": key}}],
        }),
    )
    .await
    .map(|_| ())
}

/// The stored value of `key`, as bytes (`POST /v3/kv/range`); `None` when absent.
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn value(ds: &Resolved, session: &Session, key: &str) -> Result<Option<Vec<u8>>, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let v = gateway(
        ds,
        session,
        "/v3/kv/range",
        &serde_json::json!({"key": b64.encode(key)}),
    )
    .await?;
    match v["kvs"][0]["value"].as_str() {
        Some(raw) => b64.decode(raw).map(Some).map_err(|e| e.to_string()),
        // A key whose value is empty carries no `value` field.
        None if v["kvs"][0].is_object() => Ok(Some(Vec::new())),
        None => Ok(None),
    }
}

/// Every key under `prefix` with its stored value (`POST /v3/kv/range`).
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn values_under(
    ds: &Resolved,
    session: &Session,
    prefix: &str,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let (key, range_end) = prefix_range(prefix);
    let v = gateway(
        ds,
        session,
        "/v3/kv/range",
        &serde_json::json!({"key": key, "range_end": range_end}),
    )
    .await?;
    Ok(v["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| {
            let key = String::from_utf8(b64.decode(kv["key"].as_str()?).ok()?).ok()?;
            let value = b64.decode(kv["value"].as_str().unwrap_or_default()).ok()?;
            Some((key, value))
        })
        .collect())
}

/// The schemas claimed on the datastore (the keys under `/kamaji-rs/claims/`).
///
/// # Errors
/// A message when no endpoint accepted the request.
pub async fn claimed_schemas(ds: &Resolved, session: &Session) -> Result<Vec<String>, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let (key, range_end) = prefix_range(CLAIMS);
    let v = gateway(
        ds,
        session,
        "/v3/kv/range",
        &serde_json::json!({"key": key, "range_end": range_end, "keys_only": true}),
    )
    .await?;
    Ok(v["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| b64.decode(kv["key"].as_str()?).ok())
        .filter_map(|k| String::from_utf8(k).ok())
        .filter_map(|k| k.strip_prefix(&format!("{CLAIMS}/")).map(str::to_owned))
        .collect())
}

/// The first value of a range response (`kvs[0].value`, base64 in the gateway's JSON), as text.
fn first_value(range: &serde_json::Value) -> Option<String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let raw = b64.decode(range["kvs"][0]["value"].as_str()?).ok()?;
    String::from_utf8(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA_A: &str =
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\nAAEC\n-----END CERTIFICATE-----\n";
    const CA_B: &str =
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIV\nAAEC\n-----END CERTIFICATE-----\n";

    /// The same certificate in another layout is the same CA; another certificate, an extra
    /// one, or no certificate at all is not.
    #[test]
    fn same_ca_compares_the_certificates_not_the_text() {
        assert!(same_ca(CA_A, CA_A));
        let relaid = format!(
            "subject=CN = datastore-ca\r\n{}",
            CA_A.replace("MIIBszCCAVmgAwIBAgIU\nAAEC", "MIIBszCCAVmgAwIBAgIUAAEC")
                .replace('\n', "\r\n")
        );
        assert!(same_ca(CA_A, &relaid));
        assert!(!same_ca(CA_A, CA_B));
        assert!(!same_ca(CA_A, &format!("{CA_A}{CA_B}")));
        assert!(!same_ca("", ""));
        assert!(!same_ca("not a pem", "not a pem"));
    }
}
