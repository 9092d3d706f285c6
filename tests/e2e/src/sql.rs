//! SQL DataStores (drivers `PostgreSQL` and `MySQL`, through kine): a real PostgreSQL 15 and
//! `MariaDB` 10.11 (kamaji-testenv's [`sql`](kamaji_testenv::sql)) serving TLS on loopback and
//! on the underlay gateway, where the management machines' pods reach them, and the Kamaji
//! DataStores that point at them.
//!
//! ```no_run
//! # async fn demo(env: &kamaji_e2e::Env) -> anyhow::Result<()> {
//! let sql = env.start_sql_servers().await?;
//! env.create_sql_datastore_for("postgres", &sql.postgres, &sql.ca_pem()).await?;
//! let (user, password) = sql.mariadb.admin();
//! env.create_sql_datastore("mariadb", "MySQL", sql.mariadb_for_pods(), (user, password), &sql.ca_pem())
//!     .await?;
//! # Ok(()) }
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use anyhow::Result;
use base64::Engine as _;
use kamaji_machine::network::UNDERLAY_GATEWAY;
use kamaji_testenv::pki::{CertPair, TestCa};
use kamaji_testenv::sql::{MariaDb, Postgres, ServerTls, SqlServer};

use crate::Env;

/// A PostgreSQL and a `MariaDB` server sharing one CA; stopped when dropped.
#[derive(Debug)]
pub struct SqlServers {
    /// PostgreSQL 15 (driver `PostgreSQL`).
    pub postgres: Postgres,
    /// `MariaDB` 10.11 (driver `MySQL`).
    pub mariadb: MariaDb,
    /// The CA that issued both servers' certificate (the DataStores' `tlsConfig`); its key is
    /// not needed by SQL DataStores.
    pub ca: CertPair,
}

impl SqlServers {
    /// Where pods reach the PostgreSQL server ([`for_pods`]).
    #[must_use]
    pub fn postgres_for_pods(&self) -> SocketAddr {
        for_pods(&self.postgres)
    }

    /// Where pods reach the MariaDB server ([`for_pods`]).
    #[must_use]
    pub fn mariadb_for_pods(&self) -> SocketAddr {
        for_pods(&self.mariadb)
    }

    /// The CA certificate (PEM) both servers' certificate chains to.
    #[must_use]
    pub fn ca_pem(&self) -> String {
        self.ca.cert_pem.clone()
    }
}

/// Where pods reach `server`: the underlay gateway and its port.
#[must_use]
pub fn for_pods(server: &SqlServer) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(UNDERLAY_GATEWAY), server.port())
}

/// Starts both servers with their data under `dir` (`dir/postgres/`, `dir/mariadb/`), a fresh
/// CA (`sql-ca`) and one serving certificate for 127.0.0.1, `localhost` and `host_ip`, each
/// listening on 127.0.0.1 and `host_ip` (which must be an address of this network namespace,
/// such as the underlay gateway inside a test's private network).
///
/// # Errors
/// As [`Postgres::start`] and [`MariaDb::start`].
pub async fn start_sql_servers(dir: &Path, host_ip: Ipv4Addr) -> Result<SqlServers> {
    let ca = TestCa::new("sql-ca")?;
    let listen = [IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(host_ip)];
    let serving = ca.serving("sql", &["localhost"], &listen)?;
    let ca_pem = ca.cert_pem();
    let tls = ServerTls {
        cert_pem: &serving.cert_pem,
        key_pem: &serving.key_pem,
        ca_pem: &ca_pem,
    };
    let (postgres, mariadb) = tokio::join!(
        Postgres::start(dir, tls, &listen),
        MariaDb::start(dir, tls, &listen)
    );
    Ok(SqlServers {
        postgres: postgres?,
        mariadb: mariadb?,
        ca: ca.pair(),
    })
}

impl Env {
    /// Starts a PostgreSQL and a `MariaDB` server for this environment's pods
    /// ([`start_sql_servers`] under the cluster's folder `sql/`, on 127.0.0.1 and the underlay
    /// gateway). [`for_pods`] gives a server's DataStore endpoint.
    ///
    /// # Errors
    /// As [`start_sql_servers`].
    pub async fn start_sql_servers(&self) -> Result<SqlServers> {
        start_sql_servers(&self.cluster.dir().join("sql"), UNDERLAY_GATEWAY).await
    }

    /// Registers a Kamaji DataStore named `name` with `driver` (`PostgreSQL` or `MySQL`), the
    /// one endpoint `endpoint` (`ip:port`, as pods reach the server), `basicAuth` from `admin`
    /// (user, password) and `tlsConfig.certificateAuthority.certificate` from `ca_pem` (no CA
    /// key, no client certificate), all as inline base64 `content`.
    ///
    /// # Errors
    /// When the API server refuses the object.
    pub async fn create_sql_datastore(
        &self,
        name: &str,
        driver: &str,
        endpoint: SocketAddr,
        admin: (&str, &str),
        ca_pem: &str,
    ) -> Result<()> {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let ds = serde_json::json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "endpoints": [endpoint.to_string()],
                "basicAuth": {
                    "username": {"content": b64(admin.0)},
                    "password": {"content": b64(admin.1)},
                },
                "tlsConfig": {
                    "certificateAuthority": {
                        "certificate": {"content": b64(ca_pem)},
                    },
                },
            },
        });
        self.apply_value(&ds).await
    }

    /// Registers `server` as the DataStore `name`: [`Env::create_sql_datastore`] with its
    /// driver, its address for pods ([`for_pods`]) and its administrator.
    ///
    /// # Errors
    /// As [`Env::create_sql_datastore`].
    pub async fn create_sql_datastore_for(
        &self,
        name: &str,
        server: &SqlServer,
        ca_pem: &str,
    ) -> Result<()> {
        self.create_sql_datastore(
            name,
            server.driver(),
            for_pods(server),
            server.admin(),
            ca_pem,
        )
        .await
    }
}
