//! etcd authentication on a DataStore: each tenant's API server is an etcd user whose one role
//! reads and writes the tenant's own key prefix, so one tenant's client certificate cannot read
//! or write another tenant's keys.
//!
//! - **Who a request is.** With `--client-cert-auth` and authentication enabled, etcd takes a
//!   gRPC request's user from its client certificate's common name (etcd's authentication
//!   guide, "Using TLS Common Name"). A tenant's certificate carries
//!   `CN=<its datastore user name>`; that user has no password (`UserAddOptions.no_password`)
//!   and one role, named after the schema.
//! - **What a tenant may touch.** The role `<schema>` has READWRITE on `[/<schema>/, /<schema>0)`
//!   and on the single key `compact_rev_key`: the compactor of every kube-apiserver on an etcd
//!   coordinates through that key, outside any prefix
//!   (`k8s.io/apiserver/pkg/storage/etcd3/compact.go`). Compaction itself and `Status` need no
//!   permission. kube-apiserver's health check reads `/<schema>/health`, inside the prefix.
//! - **Who the provider is.** It talks to etcd through the JSON gateway, which refuses a
//!   client certificate that has a common name once authentication is enabled (the name would
//!   not be used); so its certificate has none ([`LeafSpec::datastore_admin`]) and each request
//!   carries the token of a user with the `root` role: the DataStore's `spec.basicAuth`, else
//!   `root` with a password derived from the DataStore CA key ([`root_password`]; whoever holds
//!   that key can issue a certificate for `root` anyway, so it guards nothing more).
//! - **When authentication goes on.** Only once every schema claimed on the DataStore has its
//!   role and every control plane the manager watches on it has been granted its user, so no
//!   running tenant loses its access ([`enable`]). Until then it stays off and the tenants work
//!   as before.
//!
//! [`LeafSpec::datastore_admin`]: kamaji_bootstrap::pki::LeafSpec::datastore_admin

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use sha2::Digest as _;

use super::{Credentials, Resolved, Session, Token, gateway, prefix_range};

/// The one key outside its prefix that a tenant's kube-apiserver writes (its compactor's).
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// The etcd user the provider acts as when the DataStore has no `spec.basicAuth`.
pub const ROOT: &str = "root";

/// How long the provider's own client certificate is valid (it is issued per session).
const SESSION_CERT_VALIDITY: Duration = Duration::from_hours(1);

/// The password of etcd's `root` user on a DataStore without `spec.basicAuth`: base64 of
/// SHA-256 over a fixed context and the DataStore CA key, so every manager holding the key
/// derives the same one and nothing has to be stored.
#[must_use]
pub fn root_password(ds: &Resolved) -> String {
    let mut h = sha2::Sha256::new();
    h.update(b"kamaji-rs etcd root password\0");
    h.update(ds.ca_key.as_bytes());
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(h.finalize())
}

/// The user the provider acts as and its password.
fn admin_user(ds: &Resolved) -> (String, String) {
    match &ds.basic_auth {
        Some(b) => (b.username.clone(), b.password.clone()),
        None => (ROOT.to_owned(), root_password(ds)),
    }
}

/// Whether a gateway error is etcd's `message`.
fn says(err: &str, message: &str) -> bool {
    err.contains(message)
}

/// Opens the provider's session on `ds`: a client certificate without common name issued in
/// memory from the DataStore CA, and, when authentication is enabled, the token of the
/// administrating user (`/v3/auth/authenticate`).
///
/// # Errors
/// A message when issuing fails, no endpoint answers, or etcd refuses the password (naming the
/// DataStore's `spec.basicAuth`).
pub async fn session(ds: &Resolved) -> Result<Session, String> {
    let ca = kamaji_bootstrap::pki::DatastoreCa::from_pem(&ds.ca_cert, &ds.ca_key)
        .map_err(|e| format!("DataStore {}: {e}", ds.name))?;
    let leaf = ca
        .issue_admin(
            kamaji_bootstrap::pki::KeyAlgorithm::default(),
            SystemTime::now(),
            SESSION_CERT_VALIDITY,
        )
        .map_err(|e| format!("DataStore {}: {e}", ds.name))?;
    let mut session = Session::from(Credentials {
        cert: leaf.cert_pem().to_owned(),
        key: leaf.key_pem().to_owned(),
    });
    let (name, password) = admin_user(ds);
    match gateway(
        ds,
        &session,
        "/v3/auth/authenticate",
        &serde_json::json!({"name": name, "password": password}),
    )
    .await
    {
        Ok(v) => {
            let token = v["token"]
                .as_str()
                .ok_or_else(|| format!("DataStore {}: authenticate gave no token", ds.name))?;
            session.token = Some(Token(token.to_owned()));
            Ok(session)
        }
        Err(e) if says(&e, "authentication is not enabled") => Ok(session),
        Err(e) if says(&e, "authentication failed") => Err(format!(
            "DataStore {}: etcd refused the password of user {name}: set spec.basicAuth to a \
             user with the root role and its password ({e})",
            ds.name
        )),
        Err(e) => Err(e),
    }
}

/// How long a kept session ([`Sessions`]) serves passes before the next pass opens a new one:
/// well within its client certificate's [`SESSION_CERT_VALIDITY`].
pub const SESSION_REUSE: Duration = Duration::from_mins(10);

/// The provider's sessions on etcd DataStores, one per DataStore, kept between passes.
///
/// Opening a session costs etcd a bcrypt check of the password once authentication is on
/// (`/v3/auth/authenticate`, etcd's default cost 10: tens of milliseconds of its CPU) and the
/// provider a client certificate and a TLS handshake; a manager that opened one per pass paid
/// that for every control plane it provisioned and again for each one after a restart. A
/// kept session serves every pass on its DataStore for [`SESSION_REUSE`] while the DataStore's
/// endpoints, CA and credentials are the ones it was opened with (a changed one opens a new
/// session at once). A pass whose request etcd refuses for the session's token (expired or
/// revoked, or issued before authentication went on) opens a new one ([`claim_and_grant`]) and
/// keeps that instead ([`Sessions::keep`]).
pub struct Sessions {
    kept: tokio::sync::Mutex<std::collections::HashMap<String, Kept>>,
    opened: prometheus_client::metrics::counter::Counter,
}

/// A kept session and what it was opened for.
struct Kept {
    /// [`identity`] of the DataStore it was opened on.
    identity: [u8; 32],
    session: Session,
    opened: std::time::Instant,
}

/// A digest of what a session on `ds` depends on: its endpoints, CA certificate and key, and
/// the credentials it authenticates with (never shown or stored otherwise).
fn identity(ds: &Resolved) -> [u8; 32] {
    let mut h = sha2::Sha256::new();
    for part in ds.endpoints.iter().chain([&ds.ca_cert, &ds.ca_key]) {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let (name, password) = admin_user(ds);
    h.update(name.as_bytes());
    h.update([0]);
    h.update(password.as_bytes());
    h.finalize().into()
}

impl Sessions {
    /// No session kept yet; `opened` counts the sessions opened
    /// (`kamaji_datastore_sessions_opened_total`).
    #[must_use]
    pub fn new(opened: prometheus_client::metrics::counter::Counter) -> Self {
        Self {
            kept: tokio::sync::Mutex::default(),
            opened,
        }
    }

    /// A session on `ds`: the kept one while it is younger than [`SESSION_REUSE`] and `ds` is
    /// as it was opened for, else a new one ([`session`]), kept. Passes asking at once for the
    /// same DataStore wait for the one session being opened.
    ///
    /// # Errors
    /// As [`session`].
    pub async fn get(&self, ds: &Resolved) -> Result<Session, String> {
        let identity = identity(ds);
        let mut kept = self.kept.lock().await;
        if let Some(k) = kept.get(&ds.name)
            && k.identity == identity
            && k.opened.elapsed() < SESSION_REUSE
        {
            return Ok(k.session.clone());
        }
        let fresh = session(ds).await?;
        self.opened.inc();
        kept.insert(
            ds.name.clone(),
            Kept {
                identity,
                session: fresh.clone(),
                opened: std::time::Instant::now(),
            },
        );
        Ok(fresh)
    }

    /// Keeps `session`, which a pass opened again ([`claim_and_grant`]: the kept one's token
    /// was refused or predates authentication), as `ds`'s.
    pub async fn keep_reopened(&self, ds: &Resolved, session: &Session) {
        self.opened.inc();
        self.kept.lock().await.insert(
            ds.name.clone(),
            Kept {
                identity: identity(ds),
                session: session.clone(),
                opened: std::time::Instant::now(),
            },
        );
    }

    /// Forgets `ds`'s session: the next pass opens a new one (a request failed, or
    /// authentication went on and the kept session has no token).
    pub async fn forget(&self, ds: &Resolved) {
        self.kept.lock().await.remove(&ds.name);
    }
}

/// Whether both sessions carry the same token (or both none): a pass that ends with another
/// token than it began with opened its session again.
#[must_use]
pub fn same_token(a: &Session, b: &Session) -> bool {
    match (&a.token, &b.token) {
        (Some(Token(a)), Some(Token(b))) => a == b,
        (None, None) => true,
        _ => false,
    }
}

/// Whether a gateway error is etcd refusing the session's token: expired (a simple token
/// unused for `--auth-token-ttl`), or forgotten (etcd restarted, authentication turned off and
/// on).
#[must_use]
pub fn token_refused(err: &str) -> bool {
    says(err, "invalid auth token")
}

/// Whether a gateway error is etcd refusing a request whose authentication predates its users'
/// or roles' last change (`ErrAuthOldRevision`, "revision of auth store is old"). Every tenant
/// granted changes them: with a simple token (etcd's default) a request that arrived before a
/// grant and is applied after it is refused, and passes when sent again; a JWT carries the
/// revision it was issued at, so it needs a new one. etcd's own client answers it with a new
/// token and the same request.
#[must_use]
pub fn token_behind(err: &str) -> bool {
    says(err, "revision of auth store is old")
}

/// A request whose "already exists" (or, for removals, "not found") answer means done.
async fn idempotent(
    ds: &Resolved,
    session: &Session,
    path: &str,
    body: serde_json::Value,
    done: &str,
) -> Result<(), String> {
    match gateway(ds, session, path, &body).await {
        Ok(_) => Ok(()),
        Err(e) if says(&e, done) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives the tenant of `schema` its etcd role (READWRITE on its prefix and on
/// [`COMPACT_REV_KEY`]) and its user `user` (no password: it is its client certificate's
/// common name) holding that role. Idempotent; nothing is written when both are in place.
///
/// # Errors
/// A message when etcd refuses a request or no endpoint answers.
pub async fn grant_tenant(
    ds: &Resolved,
    session: &Session,
    schema: &str,
    user: &str,
) -> Result<(), String> {
    let (key, range_end) = prefix_range(&kamaji_api::names::etcd_prefix(schema));
    let b64 = base64::engine::general_purpose::STANDARD;
    let compact = b64.encode(COMPACT_REV_KEY);
    if granted(ds, session, schema, user, &key, &compact).await? {
        return Ok(());
    }
    idempotent(
        ds,
        session,
        "/v3/auth/role/add",
        serde_json::json!({"name": schema}),
        "role name already exists",
    )
    .await?;
    for (k, end) in [(key, Some(range_end)), (compact, None)] {
        let mut perm = serde_json::json!({"permType": "READWRITE", "key": k});
        if let Some(end) = end {
            perm["range_end"] = end.into();
        }
        gateway(
            ds,
            session,
            "/v3/auth/role/grant",
            &serde_json::json!({"name": schema, "perm": perm}),
        )
        .await?;
    }
    idempotent(
        ds,
        session,
        "/v3/auth/user/add",
        serde_json::json!({"name": user, "options": {"no_password": true}}),
        "user name already exists",
    )
    .await?;
    gateway(
        ds,
        session,
        "/v3/auth/user/grant",
        &serde_json::json!({"user": user, "role": schema}),
    )
    .await
    .map(|_| ())
}

/// Whether `err` is etcd's answer to a request without token once authentication is on
/// (`user name is empty`): another pass turned authentication on after the session was
/// opened.
#[must_use]
pub fn enabled_since_session(err: &str) -> bool {
    says(err, "user name is empty")
}

/// Claims `schema` for `holder` ([`super::claim_schema`]) and, when `holder` holds it, gives
/// it its role and user `user` ([`grant_tenant`]). Returns the schema's holder. When another
/// pass turned authentication on after `session` was opened ([`enabled_since_session`]: with
/// many control planes created at once, the first one granted enables it while the others'
/// passes are under way), or etcd refuses the session's token ([`token_refused`]: a kept
/// session's, expired; [`token_behind`]: older than the last grant, and still refused when sent
/// again), `session` is opened again, now with a valid token, and the work done once more,
/// instead of failing the pass.
///
/// # Errors
/// A message when etcd refuses a request or no endpoint answers.
pub async fn claim_and_grant(
    ds: &Resolved,
    session: &mut Session,
    schema: &str,
    holder: &str,
    user: &str,
) -> Result<String, String> {
    async fn once(
        ds: &Resolved,
        session: &Session,
        schema: &str,
        holder: &str,
        user: &str,
    ) -> Result<String, String> {
        let claimed = super::claim_schema(ds, session, schema, holder).await?;
        if claimed == holder {
            grant_tenant(ds, session, schema, user).await?;
        }
        Ok(claimed)
    }
    let first = match once(ds, session, schema, holder, user).await {
        // Sent again with the same token first (a simple token's race with a grant); a new
        // session below when it is still behind (a JWT issued before the grant).
        Err(e) if session.token.is_some() && token_behind(&e) => {
            once(ds, session, schema, holder, user).await
        }
        done => done,
    };
    match first {
        Err(e)
            if (session.token.is_none() && enabled_since_session(&e))
                || (session.token.is_some() && (token_refused(&e) || token_behind(&e))) =>
        {
            *session = self::session(ds).await?;
            once(ds, session, schema, holder, user).await
        }
        done => done,
    }
}

/// Whether the role `schema` has both permissions and `user` holds it.
async fn granted(
    ds: &Resolved,
    session: &Session,
    schema: &str,
    user: &str,
    key: &str,
    compact: &str,
) -> Result<bool, String> {
    let role = match gateway(
        ds,
        session,
        "/v3/auth/role/get",
        &serde_json::json!({"role": schema}),
    )
    .await
    {
        Ok(v) => v,
        Err(e) if says(&e, "role name not found") => return Ok(false),
        Err(e) => return Err(e),
    };
    let perms = role["perm"].as_array().cloned().unwrap_or_default();
    let has = |k: &str| perms.iter().any(|p| p["key"].as_str() == Some(k));
    if !(has(key) && has(compact)) {
        return Ok(false);
    }
    match gateway(
        ds,
        session,
        "/v3/auth/user/get",
        &serde_json::json!({"name": user}),
    )
    .await
    {
        Ok(v) => Ok(v["roles"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r.as_str() == Some(schema)))),
        Err(e) if says(&e, "user name not found") => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes the tenant's user and role (after its keys): a tenant created again under the same
/// name starts with a new certificate and a fresh grant.
///
/// # Errors
/// A message when etcd refuses a request or no endpoint answers.
pub async fn revoke_tenant(
    ds: &Resolved,
    session: &Session,
    schema: &str,
    user: &str,
) -> Result<(), String> {
    idempotent(
        ds,
        session,
        "/v3/auth/user/delete",
        serde_json::json!({"name": user}),
        "user name not found",
    )
    .await?;
    idempotent(
        ds,
        session,
        "/v3/auth/role/delete",
        serde_json::json!({"role": schema}),
        "role name not found",
    )
    .await
}

/// The etcd roles of `ds` (`/v3/auth/role/list`).
///
/// # Errors
/// A message when etcd refuses the request or no endpoint answers.
pub async fn roles(ds: &Resolved, session: &Session) -> Result<Vec<String>, String> {
    let v = gateway(ds, session, "/v3/auth/role/list", &serde_json::json!({})).await?;
    Ok(v["roles"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default())
}

/// What [`enable`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enablement {
    /// Authentication was already on.
    AlreadyEnabled,
    /// The provider turned it on now.
    Enabled,
    /// It stays off: these schemas are claimed but have no role yet.
    Waiting(Vec<String>),
}

/// Turns etcd authentication on for `ds` once every claimed schema has its role
/// ([`super::claimed_schemas`]): creates the administrating user with its password and the
/// `root` role (etcd requires a `root` user holding it), then `/v3/auth/enable`. The session
/// must be one opened before (without token while authentication is off).
///
/// # Errors
/// A message when etcd refuses a request or no endpoint answers.
pub async fn enable(ds: &Resolved, session: &Session) -> Result<Enablement, String> {
    if session.token.is_some() {
        return Ok(Enablement::AlreadyEnabled);
    }
    match enable_steps(ds, session).await {
        // Another pass (or manager) turned it on while this token-less session was open: etcd
        // refuses its requests (no user, or no permission) at whichever step it had reached.
        Err(e) if says(&e, "user name is empty") || says(&e, "permission denied") => {
            Ok(Enablement::AlreadyEnabled)
        }
        done => done,
    }
}

async fn enable_steps(ds: &Resolved, session: &Session) -> Result<Enablement, String> {
    let roles = roles(ds, session).await?;
    let waiting: Vec<String> = super::claimed_schemas(ds, session)
        .await?
        .into_iter()
        .filter(|s| !roles.contains(s))
        .collect();
    if !waiting.is_empty() {
        return Ok(Enablement::Waiting(waiting));
    }
    let (name, password) = admin_user(ds);
    idempotent(
        ds,
        session,
        "/v3/auth/user/add",
        serde_json::json!({"name": name, "password": password}),
        "user name already exists",
    )
    .await?;
    idempotent(
        ds,
        session,
        "/v3/auth/role/add",
        serde_json::json!({"name": ROOT}),
        "role name already exists",
    )
    .await?;
    gateway(
        ds,
        session,
        "/v3/auth/user/grant",
        &serde_json::json!({"user": name, "role": ROOT}),
    )
    .await?;
    gateway(ds, session, "/v3/auth/enable", &serde_json::json!({})).await?;
    Ok(Enablement::Enabled)
}
