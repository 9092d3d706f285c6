//! PostgreSQL and MySQL DataStores: each tenant gets its own database and a user that owns
//! it (PostgreSQL) or holds every privilege on it and nothing else (MySQL), created with the
//! DataStore's administrator (`spec.basicAuth`) over TLS when `spec.tlsConfig` is set. kine
//! runs beside the tenant's kube-apiserver and serves the etcd API from that database.
//!
//! **Names.** The database is the control plane's datastore schema and the user its
//! datastore user name (`spec.dataStoreSchema` / `spec.dataStoreUsername`, else derived from
//! its namespace and name). Both match `^[a-z_][a-z0-9_]*$` (at most 63 characters), checked
//! at admission and again here before any statement is built ([`identifier`]); they are then
//! quoted as identifiers (`"name"`, `` `name` ``). Values (claims, lookups) are bound
//! parameters. No text a user controls reaches a statement otherwise.
//!
//! **Claims.** Two control planes on one database or one user would share their objects, and
//! deleting one would drop the other's. So, as on etcd, each control plane claims its
//! database and its user first, in the table `kamaji_rs.claims` on the server (one row per
//! claimed name, `INSERT` that keeps an existing row), and the holder's `namespace/name` is
//! what a second one is told.
//!
//! **Password.** The tenant's password is derived: SHA-256 of a fixed context, the
//! administrator's name and password, the DataStore's name, the database, the user and a
//! random salt made when the control plane is created and kept in its `<cluster>-kine.config`
//! ([`tenant_password`]). A tenant cannot derive another's; `clusterctl move` carries the salt
//! with the Secret; a control plane deleted and created again under the same name gets a new
//! salt, so a new password (a new identity: what leaked of the old one opens nothing);
//! changing the administrator's password gives every tenant a new one on the next pass, which
//! rolls its pods (the kine Secret changes). PostgreSQL is sent only its `SCRAM-SHA-256`
//! verifier, so a server that logs statements logs no tenant password; MySQL is sent the
//! password itself (`IDENTIFIED BY`, the form MySQL 8 and MariaDB share).

use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use super::{Credentials, UserPassword};

/// The SQL dialect of a DataStore driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (driver `PostgreSQL`).
    PostgreSql,
    /// MySQL or MariaDB (driver `MySQL`).
    MySql,
}

/// How the provider reaches a PostgreSQL or MySQL DataStore.
#[derive(Clone)]
pub struct SqlAccess {
    /// The server's dialect.
    pub dialect: Dialect,
    /// `spec.basicAuth`: an administrator that may create databases and users.
    pub admin: UserPassword,
    /// `spec.tlsConfig.certificateAuthority.certificate`: the CA the server's certificate is
    /// verified against (TLS on when set; the host name or IP of the endpoint must be in
    /// the certificate).
    pub ca_cert: Option<String>,
    /// `spec.tlsConfig.clientCertificate`, when the server asks clients for one.
    pub client: Option<Credentials>,
}

impl std::fmt::Debug for SqlAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlAccess")
            .field("dialect", &self.dialect)
            .field("admin", &self.admin)
            .field("tls", &self.ca_cert.is_some())
            .finish_non_exhaustive()
    }
}

/// A tenant's database on a SQL DataStore.
#[derive(Debug, Clone, Copy)]
pub struct TenantDatabase<'a> {
    /// The database (the datastore schema).
    pub database: &'a str,
    /// The user that owns it (the datastore user name).
    pub user: &'a str,
    /// `namespace/name` of the control plane.
    pub holder: &'a str,
}

/// What claiming and creating a tenant's database found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provisioned {
    /// The database and user exist, the user has the tenant's password and privileges on that
    /// database only.
    Ready,
    /// The database (`field` = `spec.dataStoreSchema`) or the user (`spec.dataStoreUsername`)
    /// exists on the server but no control plane claimed it (another application's, a built-in
    /// one): never taken over; nothing was created.
    Foreign {
        /// The field of the name.
        field: &'static str,
        /// The name.
        name: String,
    },
    /// Another control plane holds the database (`field` = `spec.dataStoreSchema`) or the user
    /// (`spec.dataStoreUsername`); nothing was created.
    HeldBy {
        /// The field of the name.
        field: &'static str,
        /// The name.
        name: String,
        /// `namespace/name` of the control plane that claimed it first.
        holder: String,
    },
}

/// Where kine listens in the control-plane pod (loopback of the pod's own network
/// namespace): kube-apiserver's `--etcd-servers`.
pub const KINE_LISTEN_ADDRESS: &str = "127.0.0.1:2379";

/// Whether `name` may be used as a database or user name: `^[a-z_][a-z0-9_]*$`, at most 63
/// characters (the admission rule of `spec.dataStoreSchema` and `spec.dataStoreUsername`).
#[must_use]
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 63
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `name` quoted as an identifier of `dialect`, after checking it is one ([`is_identifier`]).
///
/// # Errors
/// When `name` is not a plain identifier (then no statement is built with it).
pub fn identifier(dialect: Dialect, name: &str) -> Result<String, String> {
    if !is_identifier(name) {
        return Err(format!(
            "{name:?} is not a plain identifier (^[a-z_][a-z0-9_]*$, at most 63 characters)"
        ));
    }
    Ok(match dialect {
        Dialect::PostgreSql => format!("\"{name}\""),
        Dialect::MySql => format!("`{name}`"),
    })
}

/// The tenant's user on a SQL DataStore: `explicit` (`spec.dataStoreUsername`) when set, else
/// `derived` (kamaji-api's derived user name); on PostgreSQL, which reserves role names
/// beginning with `pg_`, a derived name beginning so gets `k_` in front (its readable part
/// shortened to keep 63 characters; the hash at its end keeps it unique). An explicit `pg_`
/// name is refused before ([`crate::reconcile::validate::against_datastore`]).
#[must_use]
pub fn tenant_user(access: &SqlAccess, explicit: Option<&str>, derived: &str) -> String {
    if let Some(user) = explicit {
        return user.to_owned();
    }
    if access.dialect == Dialect::PostgreSql && derived.starts_with("pg_") {
        let name = format!("k_{derived}");
        if name.len() <= 63 {
            return name;
        }
        // `<head>_<hash>`: shorten the head.
        let (head, tail) = derived.split_at(derived.rfind('_').unwrap_or(derived.len()));
        let keep = 63usize.saturating_sub(2 + tail.len()).min(head.len());
        return format!("k_{}{tail}", &head[..keep]);
    }
    derived.to_owned()
}

/// The tenant's password on the DataStore `datastore` (see the module docs): 64 hex digits.
/// `salt` is the control plane's (empty for one created before salts, whose password stays).
#[must_use]
pub fn tenant_password(
    access: &SqlAccess,
    datastore: &str,
    tenant: &TenantDatabase,
    salt: &str,
) -> String {
    let mut h = Sha256::new();
    for part in [
        "kamaji-rs tenant datastore password v1",
        &access.admin.username,
        &access.admin.password,
        datastore,
        tenant.database,
        tenant.user,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    if !salt.is_empty() {
        h.update(salt.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// kine's `--endpoint` for the tenant: `postgres://user:password@host:port,…/database` (with
/// `sslmode=verify-full` under TLS, `disable` without) or
/// `mysql://user:password@tcp(host:port)/database`. kine adds TLS for MySQL itself from its
/// `--ca-file`.
#[must_use]
pub fn kine_endpoint(
    access: &SqlAccess,
    endpoints: &[String],
    tenant: &TenantDatabase,
    password: &str,
) -> String {
    match access.dialect {
        Dialect::PostgreSql => {
            let mode = if access.ca_cert.is_some() {
                "verify-full"
            } else {
                "disable"
            };
            format!(
                "postgres://{}:{password}@{}/{}?sslmode={mode}",
                tenant.user,
                endpoints.join(","),
                tenant.database
            )
        }
        Dialect::MySql => format!(
            "mysql://{}:{password}@tcp({})/{}",
            tenant.user,
            endpoints.first().map_or("", String::as_str),
            tenant.database
        ),
    }
}

/// `host:port` split (IPv6 in brackets).
fn host_port(endpoint: &str, default_port: u16) -> (String, u16) {
    if let Some((host, port)) = endpoint.rsplit_once(':')
        && let Ok(port) = port.parse()
        && (!host.contains(':') || host.starts_with('['))
    {
        return (host.trim_matches(['[', ']']).to_owned(), port);
    }
    (endpoint.trim_matches(['[', ']']).to_owned(), default_port)
}

/// The rustls client configuration for `access`: its CA only, its client certificate if any.
fn tls_config(access: &SqlAccess, ca_pem: &str) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for der in kamaji_bootstrap::pki::inspect::certificates_der(ca_pem).unwrap_or_default() {
        roots
            .add(CertificateDer::from(der))
            .map_err(|e| format!("spec.tlsConfig.certificateAuthority.certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(
            "spec.tlsConfig.certificateAuthority.certificate holds no certificate".to_owned(),
        );
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    match &access.client {
        Some(c) => {
            let chain = CertificateDer::pem_slice_iter(c.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("spec.tlsConfig.clientCertificate.certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(c.key.as_bytes())
                .map_err(|e| format!("spec.tlsConfig.clientCertificate.privateKey: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("spec.tlsConfig.clientCertificate: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// An administrator's connection to one of the DataStore's servers.
enum Admin {
    Postgres(tokio_postgres::Client),
    MySql(mysql_async::Conn),
}

/// Connects as the administrator to the first of `endpoints` that answers.
async fn connect(access: &SqlAccess, endpoints: &[String]) -> Result<Admin, String> {
    let mut last = String::from("the DataStore has no endpoint");
    for endpoint in endpoints {
        let result = match access.dialect {
            Dialect::PostgreSql => connect_postgres(access, endpoint)
                .await
                .map(Admin::Postgres),
            Dialect::MySql => connect_mysql(access, endpoint).await.map(Admin::MySql),
        };
        match result {
            Ok(admin) => return Ok(admin),
            Err(e) => last = format!("{endpoint}: {e}"),
        }
    }
    Err(last)
}

async fn connect_postgres(
    access: &SqlAccess,
    endpoint: &str,
) -> Result<tokio_postgres::Client, String> {
    let (host, port) = host_port(endpoint, 5432);
    let mut config = tokio_postgres::Config::new();
    config
        .host(&host)
        .port(port)
        .user(&access.admin.username)
        .password(&access.admin.password)
        .dbname("postgres")
        .application_name("kamaji-rs")
        .connect_timeout(std::time::Duration::from_secs(10));
    let client = if let Some(ca) = &access.ca_cert {
        config.ssl_mode(tokio_postgres::config::SslMode::Require);
        let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(access, ca)?);
        let (client, connection) = config.connect(tls).await.map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        client
    } else {
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        client
    };
    Ok(client)
}

async fn connect_mysql(access: &SqlAccess, endpoint: &str) -> Result<mysql_async::Conn, String> {
    let (host, port) = host_port(endpoint, 3306);
    let mut opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(host)
        .tcp_port(port)
        .user(Some(access.admin.username.clone()))
        .pass(Some(access.admin.password.clone()))
        .prefer_socket(false);
    if let Some(ca) = &access.ca_cert {
        let mut ssl =
            mysql_async::SslOpts::default().with_root_certs(vec![ca.clone().into_bytes().into()]);
        if let Some(c) = &access.client {
            ssl = ssl.with_client_identity(Some(mysql_async::ClientIdentity::new(
                c.cert.clone().into_bytes().into(),
                c.key.clone().into_bytes().into(),
            )));
        }
        opts = opts.ssl_opts(ssl);
    }
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        mysql_async::Conn::new(opts),
    )
    .await
    .map_err(|_| "no answer in 10 s".to_owned())?
    .map_err(|e| e.to_string())
}

impl Admin {
    async fn run(&mut self, statement: &str) -> Result<(), String> {
        match self {
            Self::Postgres(c) => c
                .batch_execute(statement)
                .await
                .map_err(|e| postgres_error(&e)),
            Self::MySql(c) => {
                use mysql_async::prelude::Queryable as _;
                c.query_drop(statement).await.map_err(|e| e.to_string())
            }
        }
    }

    /// Whether the query with one text parameter returns a row.
    async fn exists(&mut self, query: &str, value: &str) -> Result<bool, String> {
        match self {
            Self::Postgres(c) => c
                .query_opt(query, &[&value])
                .await
                .map(|r| r.is_some())
                .map_err(|e| postgres_error(&e)),
            Self::MySql(c) => {
                use mysql_async::prelude::Queryable as _;
                c.exec_first::<i64, _, _>(query.replace("$1", "?"), (value,))
                    .await
                    .map(|r| r.is_some())
                    .map_err(|e| e.to_string())
            }
        }
    }

    fn dialect(&self) -> Dialect {
        match self {
            Self::Postgres(_) => Dialect::PostgreSql,
            Self::MySql(_) => Dialect::MySql,
        }
    }

    /// Creates the claim table `kamaji_rs.claims` if absent (in the administrator's database
    /// `postgres` on PostgreSQL, in a database of its own on MySQL).
    async fn claims_table(&mut self) -> Result<(), String> {
        let statements: &[&str] = match self.dialect() {
            Dialect::PostgreSql => &[
                "CREATE SCHEMA IF NOT EXISTS kamaji_rs",
                "CREATE TABLE IF NOT EXISTS kamaji_rs.claims (kind text NOT NULL, name text NOT NULL, holder text NOT NULL, PRIMARY KEY (kind, name))",
            ],
            Dialect::MySql => &[
                "CREATE DATABASE IF NOT EXISTS kamaji_rs",
                "CREATE TABLE IF NOT EXISTS kamaji_rs.claims (kind varchar(16) NOT NULL, name varchar(64) NOT NULL, holder varchar(320) NOT NULL, PRIMARY KEY (kind, name))",
            ],
        };
        for s in statements {
            self.run(s).await?;
        }
        Ok(())
    }

    /// Claims `name` of `kind` (`database`, `user`) for `holder`; returns the holder afterwards
    /// and whether this call made the claim.
    async fn claim(
        &mut self,
        kind: &str,
        name: &str,
        holder: &str,
    ) -> Result<(String, bool), String> {
        match self {
            Self::Postgres(c) => {
                let inserted = c.execute(
                    "INSERT INTO kamaji_rs.claims (kind, name, holder) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&kind, &name, &holder],
                )
                .await
                .map_err(|e| postgres_error(&e))?;
                let row = c
                    .query_one(
                        "SELECT holder FROM kamaji_rs.claims WHERE kind = $1 AND name = $2",
                        &[&kind, &name],
                    )
                    .await
                    .map_err(|e| postgres_error(&e))?;
                Ok((row.get(0), inserted == 1))
            }
            Self::MySql(c) => {
                use mysql_async::prelude::Queryable as _;
                c.exec_drop(
                    "INSERT IGNORE INTO kamaji_rs.claims (kind, name, holder) VALUES (?, ?, ?)",
                    (kind, name, holder),
                )
                .await
                .map_err(|e| e.to_string())?;
                let inserted = c.affected_rows() == 1;
                let holder = c
                    .exec_first::<String, _, _>(
                        "SELECT holder FROM kamaji_rs.claims WHERE kind = ? AND name = ?",
                        (kind, name),
                    )
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("the claim on {kind} {name} vanished while read"))?;
                Ok((holder, inserted))
            }
        }
    }

    /// Whether the database or user (`kind`) `name` exists on the server.
    async fn object_exists(&mut self, kind: &str, name: &str) -> Result<bool, String> {
        let query = match (self.dialect(), kind) {
            (Dialect::PostgreSql, "database") => "SELECT 1 FROM pg_database WHERE datname = $1",
            (Dialect::PostgreSql, _) => "SELECT 1 FROM pg_roles WHERE rolname = $1",
            (Dialect::MySql, "database") => {
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = $1"
            }
            (Dialect::MySql, _) => "SELECT 1 FROM mysql.user WHERE user = $1",
        };
        self.exists(query, name).await
    }

    /// The holder of `name` of `kind`, if claimed.
    async fn holder(&mut self, kind: &str, name: &str) -> Result<Option<String>, String> {
        match self {
            Self::Postgres(c) => c
                .query_opt(
                    "SELECT holder FROM kamaji_rs.claims WHERE kind = $1 AND name = $2",
                    &[&kind, &name],
                )
                .await
                .map(|r| r.map(|r| r.get(0)))
                .map_err(|e| postgres_error(&e)),
            Self::MySql(c) => {
                use mysql_async::prelude::Queryable as _;
                c.exec_first::<String, _, _>(
                    "SELECT holder FROM kamaji_rs.claims WHERE kind = ? AND name = ?",
                    (kind, name),
                )
                .await
                .map_err(|e| e.to_string())
            }
        }
    }

    /// Releases `holder`'s claims on `names` (kind, name).
    async fn release(&mut self, names: &[(&str, &str)], holder: &str) -> Result<(), String> {
        for (kind, name) in names {
            match self {
                Self::Postgres(c) => {
                    c.execute(
                        "DELETE FROM kamaji_rs.claims WHERE kind = $1 AND name = $2 AND holder = $3",
                        &[kind, name, &holder],
                    )
                    .await
                    .map_err(|e| postgres_error(&e))?;
                }
                Self::MySql(c) => {
                    use mysql_async::prelude::Queryable as _;
                    c.exec_drop(
                        "DELETE FROM kamaji_rs.claims WHERE kind = ? AND name = ? AND holder = ?",
                        (*kind, *name, holder),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    async fn close(self) {
        match self {
            Self::Postgres(c) => drop(c),
            Self::MySql(c) => {
                let _ = c.disconnect().await;
            }
        }
    }
}

/// A PostgreSQL error with the server's message (tokio-postgres shows only "db error").
fn postgres_error(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map_or_else(
        || e.to_string(),
        |db| format!("{}: {}", db.code().code(), db.message()),
    )
}

/// What the server is told of the tenant's password, as a SQL string literal: on PostgreSQL
/// its `SCRAM-SHA-256` verifier (the server stores that as given, and never sees the
/// password), on MySQL the password ([`tenant_password`] is hex, checked again here).
fn password_literal(dialect: Dialect, password: &str) -> Result<String, String> {
    if password.is_empty() || !password.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err("the tenant password is not alphanumeric".to_owned());
    }
    let told = match dialect {
        Dialect::PostgreSql => postgres_protocol::password::scram_sha_256(password.as_bytes()),
        Dialect::MySql => password.to_owned(),
    };
    // `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, base64 parts.
    if !told
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '$' | ':' | '-'))
    {
        return Err("the tenant password's verifier is not plain base64".to_owned());
    }
    Ok(format!("'{told}'"))
}

/// Claims the tenant's database and user for `tenant.holder`, then creates them if absent and
/// (again) gives the user `password` and privileges on that database only:
///
/// - PostgreSQL: `CREATE ROLE … LOGIN PASSWORD …` (or `ALTER ROLE`), membership of the
///   administrator in it (so that a non-superuser with `CREATEROLE` and `CREATEDB` may give it
///   the database), `CREATE DATABASE … OWNER …`, `REVOKE ALL ON DATABASE … FROM PUBLIC`;
/// - MySQL: `CREATE USER IF NOT EXISTS '…'@'%' IDENTIFIED BY …`, `ALTER USER`,
///   `CREATE DATABASE IF NOT EXISTS`, `GRANT ALL PRIVILEGES ON \`db\`.* TO '…'@'%'`.
///
/// # Errors
/// A message naming the endpoint when no server can be reached or one refuses a statement (its
/// message included), or when a name is not a plain identifier.
pub async fn provision(
    access: &SqlAccess,
    endpoints: &[String],
    tenant: &TenantDatabase<'_>,
    password: &str,
) -> Result<Provisioned, String> {
    let database = identifier(access.dialect, tenant.database)?;
    let user = identifier(access.dialect, tenant.user)?;
    let secret = password_literal(access.dialect, password)?;
    let mut admin = connect(access, endpoints).await?;
    admin.claims_table().await?;
    if let Some(refused) = claim_names(&mut admin, tenant).await? {
        admin.close().await;
        return Ok(refused);
    }
    match access.dialect {
        Dialect::PostgreSql => {
            create_postgres(&mut admin, tenant, &user, &database, &secret).await?;
        }
        Dialect::MySql => create_mysql(&mut admin, tenant, &database, &secret).await?,
    }
    admin.close().await;
    Ok(Provisioned::Ready)
}

/// Claims the tenant's database and user for `tenant.holder` ([`provision`]); what refuses
/// them when another holds one, or when one claimed just now is already on the server.
async fn claim_names(
    admin: &mut Admin,
    tenant: &TenantDatabase<'_>,
) -> Result<Option<Provisioned>, String> {
    for (field, kind, name) in [
        ("spec.dataStoreSchema", "database", tenant.database),
        ("spec.dataStoreUsername", "user", tenant.user),
    ] {
        let (holder, newly) = admin.claim(kind, name, tenant.holder).await?;
        if holder != tenant.holder {
            return Ok(Some(Provisioned::HeldBy {
                field,
                name: name.to_owned(),
                holder,
            }));
        }
        // Claimed just now, yet already on the server: not made by kamaji-rs for this control
        // plane (another application's database, a built-in account). Never taken over.
        if newly && admin.object_exists(kind, name).await? {
            admin.release(&[(kind, name)], tenant.holder).await?;
            return Ok(Some(Provisioned::Foreign {
                field,
                name: name.to_owned(),
            }));
        }
    }
    Ok(None)
}

/// PostgreSQL's part of [`provision`]: the role with its password, the administrator's
/// membership in it, the database it owns, and no access for `PUBLIC`. `user`, `database`
/// and `secret` are quoted already.
async fn create_postgres(
    admin: &mut Admin,
    tenant: &TenantDatabase<'_>,
    user: &str,
    database: &str,
    secret: &str,
) -> Result<(), String> {
    if admin
        .exists("SELECT 1 FROM pg_roles WHERE rolname = $1", tenant.user)
        .await?
    {
        admin
            .run(&format!("ALTER ROLE {user} WITH LOGIN PASSWORD {secret}"))
            .await?;
    } else {
        admin
            .run(&format!("CREATE ROLE {user} WITH LOGIN PASSWORD {secret}"))
            .await?;
    }
    if !admin
        .exists(
            "SELECT 1 FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid \
             JOIN pg_roles a ON a.oid = m.member \
             WHERE r.rolname = $1 AND a.rolname = current_user",
            tenant.user,
        )
        .await?
    {
        admin.run(&format!("GRANT {user} TO CURRENT_USER")).await?;
    }
    if !admin
        .exists(
            "SELECT 1 FROM pg_database WHERE datname = $1",
            tenant.database,
        )
        .await?
    {
        admin
            .run(&format!("CREATE DATABASE {database} OWNER {user}"))
            .await?;
    }
    admin
        .run(&format!("REVOKE ALL ON DATABASE {database} FROM PUBLIC"))
        .await
}

/// MySQL's part of [`provision`]: the user with its password, the database, and every
/// privilege on it. `database` and `secret` are quoted already.
async fn create_mysql(
    admin: &mut Admin,
    tenant: &TenantDatabase<'_>,
    database: &str,
    secret: &str,
) -> Result<(), String> {
    let account = format!("'{}'@'%'", tenant.user);
    admin
        .run(&format!(
            "CREATE USER IF NOT EXISTS {account} IDENTIFIED BY {secret}"
        ))
        .await?;
    admin
        .run(&format!("ALTER USER {account} IDENTIFIED BY {secret}"))
        .await?;
    admin
        .run(&format!("CREATE DATABASE IF NOT EXISTS {database}"))
        .await?;
    // In a database-level grant `_` is a wildcard: escaped, it names this database only.
    let pattern = format!("`{}`", tenant.database.replace('_', "\\_"));
    admin
        .run(&format!("GRANT ALL PRIVILEGES ON {pattern}.* TO {account}"))
        .await
}

/// What removing a tenant's database found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deprovisioned {
    /// The database and user are gone (or were never created) and the claims released.
    Removed,
    /// Another control plane holds the database: this one was refused and never wrote there.
    HeldBy(String),
}

/// Drops the tenant's database (PostgreSQL: `WITH (FORCE)`, ending kine's sessions) and its
/// user, each only when this control plane holds its claim, then releases its claims. What
/// another control plane holds, or nobody claimed, is left alone.
///
/// # Errors
/// As [`provision`].
pub async fn deprovision(
    access: &SqlAccess,
    endpoints: &[String],
    tenant: &TenantDatabase<'_>,
) -> Result<Deprovisioned, String> {
    let database = identifier(access.dialect, tenant.database)?;
    let user = identifier(access.dialect, tenant.user)?;
    let mut admin = connect(access, endpoints).await?;
    admin.claims_table().await?;
    let database_holder = admin.holder("database", tenant.database).await?;
    if let Some(other) = &database_holder
        && other != tenant.holder
    {
        admin.close().await;
        return Ok(Deprovisioned::HeldBy(other.clone()));
    }
    // Only what this control plane claimed was made by it: an unclaimed database or user (a
    // control plane refused before provisioning, another application's) stays.
    let ours = |h: Option<&str>| h == Some(tenant.holder);
    let user_ours = ours(admin.holder("user", tenant.user).await?.as_deref());
    if ours(database_holder.as_deref()) {
        let drop = match access.dialect {
            Dialect::PostgreSql => format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
            Dialect::MySql => format!("DROP DATABASE IF EXISTS {database}"),
        };
        admin.run(&drop).await?;
    }
    if user_ours {
        let drop = match access.dialect {
            Dialect::PostgreSql => format!("DROP ROLE IF EXISTS {user}"),
            Dialect::MySql => format!("DROP USER IF EXISTS '{}'@'%'", tenant.user),
        };
        admin.run(&drop).await?;
    }
    admin
        .release(
            &[("database", tenant.database), ("user", tenant.user)],
            tenant.holder,
        )
        .await?;
    admin.close().await;
    Ok(Deprovisioned::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile names never become identifiers; plain ones are quoted for their dialect.
    #[test]
    fn only_plain_identifiers_are_quoted() {
        for hostile in [
            "",
            "a\"b",
            "a`b",
            "a'b",
            "a;drop database x",
            "a--",
            "a/*",
            "A",
            "1a",
            "a b",
            "ä",
            "a-b",
            &"a".repeat(64),
        ] {
            assert!(
                identifier(Dialect::PostgreSql, hostile).is_err(),
                "{hostile:?}"
            );
            assert!(identifier(Dialect::MySql, hostile).is_err(), "{hostile:?}");
        }
        assert_eq!(
            identifier(Dialect::PostgreSql, "tenant_a_demo_1").unwrap(),
            "\"tenant_a_demo_1\""
        );
        assert_eq!(identifier(Dialect::MySql, "_x9").unwrap(), "`_x9`");
        assert!(password_literal(Dialect::MySql, "ab'c").is_err());
        assert!(password_literal(Dialect::PostgreSql, "ab'c").is_err());
        assert_eq!(password_literal(Dialect::MySql, "ab12").unwrap(), "'ab12'");
        // PostgreSQL is told a SCRAM verifier, never the password.
        let told = password_literal(Dialect::PostgreSql, "ab12cd34").unwrap();
        assert!(told.starts_with("'SCRAM-SHA-256$4096:"), "{told}");
        assert!(!told.contains("ab12cd34"));
    }

    fn access(dialect: Dialect) -> SqlAccess {
        SqlAccess {
            dialect,
            admin: UserPassword {
                username: "admin".into(),
                password: "pw".into(),
            },
            ca_cert: Some("ca".into()),
            client: None,
        }
    }

    /// The password depends on every input, is hex, and kine's endpoint carries it.
    #[test]
    fn the_password_is_derived_and_the_endpoint_names_the_database() {
        let t = TenantDatabase {
            database: "db_a",
            user: "user_a",
            holder: "ns/a",
        };
        let a = access(Dialect::PostgreSql);
        let p = tenant_password(&a, "pg", &t, "");
        assert_eq!(p.len(), 64);
        assert!(p.chars().all(|c| c.is_ascii_hexdigit()));
        let other = TenantDatabase {
            database: "db_b",
            ..t
        };
        assert_ne!(p, tenant_password(&a, "pg", &other, ""));
        assert_ne!(p, tenant_password(&a, "pg2", &t, ""));
        // A control plane created again under the same name has a new salt: a new password.
        let salted = tenant_password(&a, "pg", &t, "0123abcd");
        assert_ne!(p, salted);
        assert_ne!(salted, tenant_password(&a, "pg", &t, "0123abce"));
        assert_eq!(salted, tenant_password(&a, "pg", &t, "0123abcd"));
        let mut rotated = a.clone();
        rotated.admin.password = "pw2".into();
        assert_ne!(p, tenant_password(&rotated, "pg", &t, ""));
        assert_eq!(
            kine_endpoint(
                &a,
                &["10.0.0.1:5432".into(), "10.0.0.2:5432".into()],
                &t,
                "x"
            ),
            "postgres://user_a:x@10.0.0.1:5432,10.0.0.2:5432/db_a?sslmode=verify-full"
        );
        assert_eq!(
            kine_endpoint(&access(Dialect::MySql), &["10.0.0.1:3306".into()], &t, "x"),
            "mysql://user_a:x@tcp(10.0.0.1:3306)/db_a"
        );
        assert_eq!(host_port("[::1]:5432", 1), ("::1".into(), 5432));
        // PostgreSQL reserves `pg_` role names: a derived one gets `k_`, within 63.
        let pg = access(Dialect::PostgreSql);
        assert_eq!(
            tenant_user(&pg, None, "pg_a_demo_1a2b3c4d"),
            "k_pg_a_demo_1a2b3c4d"
        );
        let long = format!("pg_{}_1a2b3c4d", "x".repeat(51));
        assert_eq!(long.len(), 63);
        let user = tenant_user(&pg, None, &long);
        assert!(
            user.len() == 63 && user.starts_with("k_pg_x") && user.ends_with("x_1a2b3c4d"),
            "{user}"
        );
        assert!(is_identifier(&user));
        assert_eq!(
            tenant_user(&access(Dialect::MySql), None, "pg_a_1"),
            "pg_a_1"
        );
        assert_eq!(tenant_user(&pg, Some("own"), "pg_a_1"), "own");
        assert_eq!(host_port("db.example", 5432), ("db.example".into(), 5432));
    }
}
