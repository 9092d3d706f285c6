//! Real SQL servers for the `PostgreSQL` and `MySQL` DataStores (kine's backends): PostgreSQL
//! 15 and MariaDB 10.11 from the Debian packages (`tests/tools/sql-servers.sh`, run by `make
//! tools`, installs them when absent), each started as a local process with a fresh data
//! directory under the test's folder, TLS on, password authentication, every statement
//! logged, and stopped when dropped.
//!
//! ```no_run
//! # async fn demo(dir: &std::path::Path, tls: kamaji_testenv::sql::ServerTls<'_>) -> anyhow::Result<()> {
//! use kamaji_testenv::sql::Postgres;
//! let pg = Postgres::start(dir, tls, &["127.0.0.1".parse()?]).await?;
//! let databases = pg.query_as_admin("SELECT datname FROM pg_database")?;
//! # Ok(()) }
//! ```
//!
//! PostgreSQL refuses to run as root: when the test runs as root, both servers run as their
//! package's system user (`postgres`, `mysql`; `mariadbd` is started as root with `--user`
//! so that it can raise its open-files limit, then drops to it), which owns the server's
//! directory, and the test folder and its ancestors get the search bit for others (`o+x`, no
//! listing) so that user can reach it. As another user, both run as that user.

#![allow(
    clippy::doc_markdown,
    reason = "product names (PostgreSQL, MariaDB, DataStore) read as prose"
)]

use std::fmt::Write as FmtWrite;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Deref;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::process::{Supervised, free_port};
use crate::wait::poll_until;

/// The name of the administrator both servers are set up with.
pub const ADMIN_USER: &str = "kamaji_admin";

/// How long a server may take to accept its administrator's first query.
const START_TIMEOUT: Duration = Duration::from_mins(1);

/// The TLS material of a server, all PEM: its certificate (which must cover every address it
/// listens on, and 127.0.0.1, where [`SqlServer::query_as`] connects), its key, and the CA
/// that issued the certificate (what clients verify it with).
#[derive(Debug, Clone, Copy)]
pub struct ServerTls<'a> {
    /// The server certificate, PEM.
    pub cert_pem: &'a str,
    /// Its private key, PEM (PKCS#8 or SEC1).
    pub key_pem: &'a str,
    /// The CA certificate that issued it, PEM.
    pub ca_pem: &'a str,
}

/// Which server a [`SqlServer`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// PostgreSQL (DataStore driver `PostgreSQL`).
    Postgres,
    /// MariaDB (DataStore driver `MySQL`).
    MariaDb,
}

/// A running SQL server; what [`Postgres`] and [`MariaDb`] share. Stopped (and waited for)
/// on drop: PostgreSQL with a fast shutdown (SIGINT, which ends open sessions), MariaDB with
/// SIGTERM; SIGKILL after 10 s.
#[derive(Debug)]
pub struct SqlServer {
    flavor: Flavor,
    process: Supervised,
    port: u16,
    host: IpAddr,
    admin_password: String,
    ca_file: PathBuf,
    statement_log: PathBuf,
    client: PathBuf,
}

/// A PostgreSQL 15 server (see the [module docs](self)).
#[derive(Debug)]
pub struct Postgres(SqlServer);

/// A MariaDB 10.11 server (see the [module docs](self)).
#[derive(Debug)]
pub struct MariaDb(SqlServer);

impl Deref for Postgres {
    type Target = SqlServer;
    fn deref(&self) -> &SqlServer {
        &self.0
    }
}

impl Deref for MariaDb {
    type Target = SqlServer;
    fn deref(&self) -> &SqlServer {
        &self.0
    }
}

impl Postgres {
    /// Starts PostgreSQL with a fresh cluster (`initdb`) in `dir/postgres/` (created; `dir` is
    /// the test's folder), on a free port ([`free_port`]) of every address of `listen`, and
    /// returns once the administrator ([`ADMIN_USER`], a superuser with a random password) can
    /// query it. Set-up: `ssl=on` with `tls`; `pg_hba.conf` holds only `hostssl … scram-sha-256`
    /// lines, so every client (loopback too) must use TLS and a password; no Unix socket;
    /// `log_statement = 'all'` and `log_connections` to `dir/postgres/postgres.log`
    /// ([`SqlServer::statement_log`]); `fsync`, `synchronous_commit` and `full_page_writes`
    /// off (test data); `max_connections` 300.
    ///
    /// # Errors
    /// When PostgreSQL is not installed (the message names `tests/tools/sql-servers.sh`), the
    /// `postgres` system user is missing while running as root, `initdb` fails (its output in
    /// the message), or the server does not answer within 60 s (its log tail).
    pub async fn start(dir: &Path, tls: ServerTls<'_>, listen: &[IpAddr]) -> Result<Self> {
        let bin = postgres_bin()?;
        let root = dir.join("postgres");
        let owner = prepare_root(dir, &root, "postgres")?;
        let files = write_tls(&root, tls, owner)?;
        let password = random_password()?;
        let pwfile = root.join("admin-password");
        write_owned(&pwfile, &password, 0o600, owner)?;
        let data = root.join("data");
        let mut initdb = tokio::process::Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", ADMIN_USER, "--auth=scram-sha-256", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync", "--no-instructions"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .env("LC_ALL", "C");
        if let Some((uid, gid)) = owner {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().await.context("run initdb")?;
        std::fs::write(
            root.join("initdb.log"),
            [&out.stdout[..], &out.stderr].concat(),
        )?;
        if !out.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        std::fs::remove_file(&pwfile)?;
        // TLS and a password for everyone, loopback included.
        write_owned(
            &data.join("pg_hba.conf"),
            "hostssl all all 0.0.0.0/0 scram-sha-256\nhostssl all all ::/0 scram-sha-256\n",
            0o600,
            owner,
        )?;
        let port = free_port()?;
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string());
        for setting in [
            format!("listen_addresses={}", join_addresses(listen)),
            "unix_socket_directories=".to_owned(),
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", files.cert.display()),
            format!("ssl_key_file={}", files.key.display()),
            "password_encryption=scram-sha-256".to_owned(),
            "log_statement=all".to_owned(),
            "log_connections=on".to_owned(),
            "log_line_prefix=%m [%p] %q%u@%d ".to_owned(),
            "fsync=off".to_owned(),
            "synchronous_commit=off".to_owned(),
            "full_page_writes=off".to_owned(),
            "max_connections=300".to_owned(),
        ] {
            cmd.arg("-c").arg(setting);
        }
        cmd.env("LC_ALL", "C");
        if let Some((uid, gid)) = owner {
            cmd.uid(uid).gid(gid);
        }
        let log = root.join("postgres.log");
        let process = Supervised::spawn("postgres", cmd, &log)?;
        let server = SqlServer {
            flavor: Flavor::Postgres,
            process,
            port,
            host: client_host(listen)?,
            admin_password: password,
            ca_file: files.ca,
            statement_log: log,
            client: bin.join("psql"),
        };
        Ok(Self(server.ready().await?))
    }
}

impl MariaDb {
    /// Starts MariaDB with a fresh data directory (`mariadb-install-db`) in `dir/mariadb/`
    /// (created; `dir` is the test's folder; its own `tmpdir` there), on a free port
    /// ([`free_port`]) of every address of `listen`, and returns once the administrator
    /// ([`ADMIN_USER`]`@'%'`, random password,
    /// `ALL PRIVILEGES ON *.* WITH GRANT OPTION`, created by an `--init-file`) can query it.
    /// Set-up: `ssl-cert`/`ssl-key` from `tls` and `require_secure_transport=ON` (every TCP
    /// client must use TLS); passwords `mysql_native_password` (the server's default for
    /// `CREATE USER … IDENTIFIED BY`); `general_log` to `dir/mariadb/general.log`
    /// ([`SqlServer::statement_log`]); the server's own log to `dir/mariadb/mariadbd.log`;
    /// `max_connections` 500; `innodb_flush_log_at_trx_commit=0`, no binary log.
    ///
    /// # Errors
    /// When MariaDB is not installed (the message names `tests/tools/sql-servers.sh`), the
    /// `mysql` system user is missing while running as root, `mariadb-install-db` fails (its
    /// output in the message), or the server does not answer within 60 s (its log tail).
    pub async fn start(dir: &Path, tls: ServerTls<'_>, listen: &[IpAddr]) -> Result<Self> {
        let (mariadbd, install_db, client) = mariadb_programs()?;
        let root = dir.join("mariadb");
        let owner = prepare_root(dir, &root, "mysql")?;
        let files = write_tls(&root, tls, owner)?;
        let password = random_password()?;
        let data = root.join("data");
        let tmp = root.join("tmp");
        std::fs::create_dir_all(&tmp)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&tmp, Some(uid), Some(gid))?;
        }
        let mut install = tokio::process::Command::new(install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db"])
            // Passed on to the bootstrap server: two servers bootstrapping at once in the
            // shared /tmp once lost each other's temporary tables.
            .arg(format!("--tmpdir={}", tmp.display()));
        if let Some((uid, gid)) = owner {
            install.uid(uid).gid(gid);
        }
        let out = install.output().await.context("run mariadb-install-db")?;
        std::fs::write(
            root.join("install-db.log"),
            [&out.stdout[..], &out.stderr].concat(),
        )?;
        if !out.status.success() {
            bail!(
                "mariadb-install-db failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        // The random password is hex: nothing to escape.
        let init = root.join("init.sql");
        write_owned(
            &init,
            &format!(
                "CREATE USER '{ADMIN_USER}'@'%' IDENTIFIED BY '{password}';\n\
                 GRANT ALL PRIVILEGES ON *.* TO '{ADMIN_USER}'@'%' WITH GRANT OPTION;\n"
            ),
            0o600,
            owner,
        )?;
        let port = free_port()?;
        let general_log = root.join("general.log");
        let mut cmd = Command::new(mariadbd);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={port}"))
            .arg(format!("--bind-address={}", join_addresses(listen)))
            .arg(format!("--socket={}", root.join("mariadbd.sock").display()))
            .arg(format!(
                "--pid-file={}",
                root.join("mariadbd.pid").display()
            ))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--ssl-cert={}", files.cert.display()))
            .arg(format!("--ssl-key={}", files.key.display()))
            .arg("--require-secure-transport=ON")
            .arg("--general-log=ON")
            .arg(format!("--general-log-file={}", general_log.display()))
            .arg(format!("--init-file={}", init.display()))
            .args([
                "--skip-name-resolve",
                "--skip-log-bin",
                "--max-connections=500",
            ])
            .args(["--open-files-limit=4096", "--innodb-buffer-pool-size=64M"])
            .args([
                "--innodb-flush-log-at-trx-commit=0",
                "--character-set-server=utf8mb4",
            ]);
        if owner.is_some() {
            cmd.arg("--user=mysql");
        }
        let process = Supervised::spawn("mariadbd", cmd, &root.join("mariadbd.log"))?;
        let server = SqlServer {
            flavor: Flavor::MariaDb,
            process,
            port,
            host: client_host(listen)?,
            admin_password: password,
            ca_file: files.ca,
            statement_log: general_log,
            client,
        };
        Ok(Self(server.ready().await?))
    }
}

impl SqlServer {
    /// Waits until the port accepts connections and the administrator's `SELECT 1` answers.
    async fn ready(mut self) -> Result<Self> {
        let (host, port, name) = (self.host, self.port, self.process.name().to_owned());
        poll_until(
            &format!("{name} did not listen on {host}:{port}"),
            START_TIMEOUT,
            Duration::from_millis(50),
            Some(&mut self.process),
            || async move { tokio::net::TcpStream::connect((host, port)).await.is_ok() },
        )
        .await?;
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            match self.query_as_admin("SELECT 1") {
                Ok(_) => return Ok(self),
                Err(e) if tokio::time::Instant::now() > deadline => {
                    bail!(
                        "{name} did not answer its administrator: {e:#}\n{}",
                        self.process.log_tail(30)
                    );
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Which server this is.
    #[must_use]
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The Kamaji DataStore driver this server backs: `PostgreSQL` or `MySQL`.
    #[must_use]
    pub fn driver(&self) -> &'static str {
        match self.flavor {
            Flavor::Postgres => "PostgreSQL",
            Flavor::MariaDb => "MySQL",
        }
    }

    /// The TCP port, the same on every listen address.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The administrator as (user, password), borrowed: [`ADMIN_USER`] and a random 32-hex-digit
    /// password. It may create databases and users (PostgreSQL: a superuser; MariaDB: all
    /// privileges with grant option).
    #[must_use]
    pub fn admin(&self) -> (&str, &str) {
        (ADMIN_USER, &self.admin_password)
    }

    /// The server process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Everything the server logged of its statements so far: PostgreSQL's log
    /// (`log_statement = 'all'`, one `LOG:  statement: …` or `execute …` line per statement, with
    /// connections), MariaDB's general query log (one `Query` line per statement, `Connect`
    /// lines). For asserting that a name never reached the server.
    ///
    /// # Errors
    /// When the log cannot be read.
    pub fn statement_log(&self) -> Result<String> {
        let bytes = std::fs::read(&self.statement_log)
            .with_context(|| format!("read {}", self.statement_log.display()))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Runs `sql` as the administrator: [`SqlServer::query_as`] with [`SqlServer::admin`], on
    /// the database `postgres` (PostgreSQL) or none (MariaDB).
    ///
    /// # Errors
    /// As [`SqlServer::query_as`].
    pub fn query_as_admin(&self, sql: &str) -> Result<String> {
        self.query_as(ADMIN_USER, &self.admin_password, "", sql)
    }

    /// Runs `sql` as the administrator on `database` (empty: as [`SqlServer::query_as_admin`]),
    /// e.g. to look into a tenant's database.
    ///
    /// # Errors
    /// As [`SqlServer::query_as`].
    pub fn query_as_admin_in(&self, database: &str, sql: &str) -> Result<String> {
        self.query_as(ADMIN_USER, &self.admin_password, database, sql)
    }

    /// Runs `sql` (one or more statements) with the server's own client over TCP and TLS,
    /// verifying the server certificate against the CA (`psql` `sslmode=verify-full`;
    /// `mariadb --ssl-verify-server-cert`), as `user` with `password`, on `database` (empty:
    /// `postgres` for PostgreSQL, none for MariaDB). Returns the client's standard output:
    /// unaligned, tuples only, no command tags (`psql -q -At`, `|` between columns) or batch without column names
    /// (`mariadb -N -B`, tabs between columns), one row a line.
    ///
    /// # Errors
    /// When the client cannot start or fails (connection refused, authentication, a failing
    /// statement): the message carries its standard error.
    pub fn query_as(
        &self,
        user: &str,
        password: &str,
        database: &str,
        sql: &str,
    ) -> Result<String> {
        let mut cmd = Command::new(&self.client);
        match self.flavor {
            Flavor::Postgres => {
                let database = if database.is_empty() {
                    "postgres"
                } else {
                    database
                };
                let conninfo = format!(
                    "host={} port={} user={} dbname={} sslmode=verify-full sslrootcert={} connect_timeout=10",
                    self.host,
                    self.port,
                    conninfo_value(user),
                    conninfo_value(database),
                    conninfo_value(&self.ca_file.to_string_lossy()),
                );
                // Read from standard input, each statement is its own transaction (`-c` would
                // run them all in one, where CREATE DATABASE is refused).
                cmd.args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-f", "-"])
                    .arg(conninfo)
                    .env("PGPASSWORD", password);
            }
            Flavor::MariaDb => {
                cmd.args(["--no-defaults", "--protocol=TCP", "-N", "-B"])
                    .arg(format!("--host={}", self.host))
                    .arg(format!("--port={}", self.port))
                    .arg(format!("--user={user}"))
                    .arg(format!("--ssl-ca={}", self.ca_file.display()))
                    .args(["--ssl-verify-server-cert", "--connect-timeout=10"])
                    .env("MYSQL_PWD", password);
                if !database.is_empty() {
                    cmd.arg(format!("--database={database}"));
                }
                cmd.arg("-e").arg(sql);
            }
        }
        let stdin = match self.flavor {
            Flavor::Postgres => Stdio::piped(),
            Flavor::MariaDb => Stdio::null(),
        };
        let mut child = cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("run {}", self.client.display()))?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(sql.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "{} as {user} on {:?}: {}",
                self.client.display(),
                database,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for SqlServer {
    fn drop(&mut self) {
        let signal = match self.flavor {
            // SIGTERM is PostgreSQL's "smart" shutdown, which waits for every session to end.
            Flavor::Postgres => Signal::SIGINT,
            Flavor::MariaDb => Signal::SIGTERM,
        };
        if self.process.exited().is_none()
            && let Ok(pid) = i32::try_from(self.process.pid())
        {
            let _ = kill(Pid::from_raw(pid), signal);
        }
        // Supervised's drop then waits; SIGKILL after the grace.
        self.process.stop(Duration::from_secs(10));
    }
}

/// The directory of PostgreSQL 15's programs (`/usr/lib/postgresql/15/bin`), else of the
/// newest PostgreSQL installed there.
fn postgres_bin() -> Result<PathBuf> {
    let complete = |d: &Path| {
        ["postgres", "initdb", "psql"]
            .iter()
            .all(|p| d.join(p).is_file())
    };
    let preferred = Path::new("/usr/lib/postgresql/15/bin");
    if complete(preferred) {
        return Ok(preferred.to_owned());
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse().ok()?;
            let bin = e.path().join("bin");
            complete(&bin).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).context(
        "PostgreSQL is not installed (no postgres, initdb and psql under /usr/lib/postgresql/*/bin): \
         run `make tools` or tests/tools/sql-servers.sh as root",
    )
}

/// `mariadbd`, `mariadb-install-db` and `mariadb`.
fn mariadb_programs() -> Result<(PathBuf, PathBuf, PathBuf)> {
    let find = |name: &str, dirs: &[&str]| {
        dirs.iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
            .with_context(|| {
                format!(
                    "MariaDB is not installed (no {name}): run `make tools` or \
                     tests/tools/sql-servers.sh as root"
                )
            })
    };
    let dirs = ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"];
    Ok((
        find("mariadbd", &dirs)?,
        find("mariadb-install-db", &dirs)?,
        find("mariadb", &dirs)?,
    ))
}

/// The address the clients of [`SqlServer::query_as`] connect to: 127.0.0.1 when listened on,
/// else the first listen address.
fn client_host(listen: &[IpAddr]) -> Result<IpAddr> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    if listen.contains(&loopback) {
        return Ok(loopback);
    }
    listen.first().copied().context("no listen address")
}

fn join_addresses(listen: &[IpAddr]) -> String {
    listen
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A libpq connection-string value, single-quoted with `\` and `'` escaped.
fn conninfo_value(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// 16 random bytes as 32 hex digits.
fn random_password() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    }))
}

/// Creates `root` (a fresh directory); when running as root, returns the uid and gid of
/// system user `user`, which then owns `root`, and makes `dir` and its ancestors searchable by
/// others so that user reaches it.
fn prepare_root(dir: &Path, root: &Path, user: &str) -> Result<Option<(u32, u32)>> {
    std::fs::create_dir_all(root).with_context(|| format!("create {}", root.display()))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self")?) != 0 {
        return Ok(None);
    }
    let ids = system_user(user)?;
    std::os::unix::fs::chown(root, Some(ids.0), Some(ids.1))
        .with_context(|| format!("chown {} to {user}", root.display()))?;
    let dir = dir.canonicalize()?;
    for ancestor in dir.ancestors() {
        let mode = std::fs::metadata(ancestor)?.permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(ancestor, std::fs::Permissions::from_mode(mode | 0o001))
                .with_context(|| format!("make {} searchable", ancestor.display()))?;
        }
    }
    Ok(Some(ids))
}

/// The uid and gid of `user` from `/etc/passwd`.
fn system_user(user: &str) -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 3 && fields[0] == user)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
        .with_context(|| {
            format!(
                "no system user {user} (the Debian package creates it): run `make tools` or \
                 tests/tools/sql-servers.sh as root"
            )
        })
}

fn write_owned(path: &Path, text: &str, mode: u32, owner: Option<(u32, u32)>) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// Writes `tls` to `root/tls/` (the key 0600), owned by `owner`.
fn write_tls(root: &Path, tls: ServerTls<'_>, owner: Option<(u32, u32)>) -> Result<TlsFiles> {
    let dir = root.join("tls");
    std::fs::create_dir_all(&dir)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    }
    let files = TlsFiles {
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
        ca: dir.join("ca.crt"),
    };
    write_owned(&files.cert, tls.cert_pem, 0o644, owner)?;
    write_owned(&files.key, tls.key_pem, 0o600, owner)?;
    write_owned(&files.ca, tls.ca_pem, 0o644, owner)?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_values_are_quoted() {
        assert_eq!(conninfo_value("a b"), "'a b'");
        assert_eq!(conninfo_value(r"x'\y"), r"'x\'\\y'");
    }

    #[test]
    fn passwords_are_32_hex_digits_and_differ() {
        let (a, b) = (random_password().unwrap(), random_password().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn clients_prefer_loopback() {
        let gw: IpAddr = "10.200.0.1".parse().unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(client_host(&[gw, lo]).unwrap(), lo);
        assert_eq!(client_host(&[gw]).unwrap(), gw);
        assert!(client_host(&[]).is_err());
    }
}
