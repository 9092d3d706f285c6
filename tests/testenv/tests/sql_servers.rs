//! The real SQL servers of the PostgreSQL and MySQL DataStores (kamaji-testenv's `sql`):
//! PostgreSQL 15 and MariaDB 10.11 with TLS and password authentication, a tenant database
//! and user made by the administrator, what the tenant may and may not reach, every statement
//! in the server's log, and kine (the tenants' etcd API) running on each with only the
//! tenant's credentials and the CA, and refusing a server its CA did not issue.
// The allow comes first: under `make check` the cfg below empties the file, and the module
// doc comment above is still linted.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::doc_markdown
)]
#![cfg(real_programs)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kamaji_testenv::pki::TestCa;
use kamaji_testenv::sql::{Flavor, MariaDb, Postgres, ServerTls, SqlServer};
use kamaji_testenv::wait::poll_until;
use kamaji_testenv::{Supervised, Tools, free_port};

/// The statements the manager is to run as the DataStore's administrator for a tenant whose
/// database and user are both `name`: the database owned by (PostgreSQL) or granted to
/// (MariaDB) the user, and nothing for anyone else. kine needs no more.
fn provision(server: &SqlServer, name: &str, password: &str) -> String {
    match server.flavor() {
        Flavor::Postgres => format!(
            "CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'; \
             CREATE DATABASE \"{name}\" OWNER \"{name}\"; \
             REVOKE ALL ON DATABASE \"{name}\" FROM PUBLIC;"
        ),
        Flavor::MariaDb => format!(
            "CREATE DATABASE `{name}`; \
             CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'; \
             GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX ON `{name}`.* TO '{name}'@'%';"
        ),
    }
}

async fn start_both(dir: &Path) -> (Postgres, MariaDb, String) {
    let ca = TestCa::new("sql-ca").unwrap();
    let listen = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let serving = ca.serving("sql", &["localhost"], &listen).unwrap();
    let ca_pem = ca.cert_pem();
    let tls = ServerTls {
        cert_pem: &serving.cert_pem,
        key_pem: &serving.key_pem,
        ca_pem: &ca_pem,
    };
    let (pg, my) = tokio::join!(
        Postgres::start(dir, tls, &listen),
        MariaDb::start(dir, tls, &listen)
    );
    (pg.unwrap(), my.unwrap(), ca_pem)
}

fn tenant_isolation(server: &SqlServer) {
    let driver = server.driver();
    server
        .query_as_admin(&provision(server, "tenant_a", "secret-a"))
        .unwrap();
    server
        .query_as_admin(&provision(server, "tenant_b", "secret-b"))
        .unwrap();
    let (databases, users) = match server.flavor() {
        Flavor::Postgres => (
            "SELECT datname FROM pg_database",
            "SELECT rolname FROM pg_roles",
        ),
        Flavor::MariaDb => ("SHOW DATABASES", "SELECT user FROM mysql.user"),
    };
    let listed = server.query_as_admin(databases).unwrap();
    assert!(
        listed.lines().any(|l| l == "tenant_a"),
        "{driver}: {listed}"
    );
    let listed = server.query_as_admin(users).unwrap();
    assert!(
        listed.lines().any(|l| l == "tenant_a"),
        "{driver}: {listed}"
    );

    // The tenant writes and reads its own database, over TLS with its password.
    let read = server
        .query_as(
            "tenant_a",
            "secret-a",
            "tenant_a",
            "CREATE TABLE t (v VARCHAR(16)); INSERT INTO t VALUES ('hello'); SELECT v FROM t;",
        )
        .unwrap();
    assert_eq!(read.trim(), "hello", "{driver}");
    // Another tenant cannot even open it; a wrong password is refused.
    let refused = server
        .query_as("tenant_b", "secret-b", "tenant_a", "SELECT v FROM t")
        .unwrap_err()
        .to_string();
    let expected = match server.flavor() {
        Flavor::Postgres => "permission denied for database \"tenant_a\"",
        Flavor::MariaDb => "Access denied for user 'tenant_b'@'%' to database 'tenant_a'",
    };
    assert!(refused.contains(expected), "{driver}: {refused}");
    let refused = server
        .query_as("tenant_a", "wrong", "tenant_a", "SELECT 1")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("password authentication failed") || refused.contains("Access denied"),
        "{driver}: {refused}"
    );

    let log = server.statement_log().unwrap();
    let created = match server.flavor() {
        Flavor::Postgres => "CREATE DATABASE \"tenant_a\" OWNER \"tenant_a\"",
        Flavor::MariaDb => "CREATE DATABASE `tenant_a`",
    };
    assert!(log.contains(created), "{driver}: no {created} in\n{log}");
    assert!(log.contains("INSERT INTO t VALUES ('hello')"), "{driver}");
    assert!(!log.contains("never-sent"), "{driver}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reaches_only_its_own_database_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (pg, my, _) = start_both(dir.path()).await;
    tenant_isolation(&pg);
    tenant_isolation(&my);
}

/// kine with the tenant's endpoint, `--ca-file`, listening on `port`, without metrics.
fn kine_command(tools: &Tools, server: &SqlServer, ca_file: &Path, port: u16) -> Command {
    let endpoint = match server.flavor() {
        Flavor::Postgres => format!(
            "postgres://kine_t:kine-pw@127.0.0.1:{}/kine_t",
            server.port()
        ),
        Flavor::MariaDb => format!(
            "mysql://kine_t:kine-pw@tcp(127.0.0.1:{})/kine_t",
            server.port()
        ),
    };
    let mut cmd = Command::new(tools.path("kine"));
    cmd.arg(format!("--endpoint={endpoint}"))
        .arg(format!("--ca-file={}", ca_file.display()))
        .arg(format!("--listen-address=127.0.0.1:{port}"))
        .arg("--metrics-bind-address=0");
    cmd
}

/// kine given a CA that did not issue the server's certificate refuses the server, naming
/// why, and never serves (it retries every second; the drop stops it).
async fn kine_refuses_a_server_of_another_ca(
    tools: &Tools,
    dir: &Path,
    server: &SqlServer,
    other_ca_file: &Path,
) {
    let driver = server.driver();
    let port = free_port().unwrap();
    let kine = Supervised::spawn(
        "kine",
        kine_command(tools, server, other_ca_file, port),
        &dir.join(format!("kine-{driver}-other-ca.log")),
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !kine
        .log_tail(5)
        .contains("certificate signed by unknown authority")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{driver}: kine did not refuse the server:\n{}",
            kine.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "{driver}: kine serves without its database"
    );
}

/// kine with the endpoint and flags the manager is to give its sidecar: the tenant's user,
/// password and database, and `--ca-file` (kine then verifies the server: PostgreSQL
/// `sslmode=verify-full`, MySQL a TLS config with the CA).
async fn kine_put_get(tools: &Tools, dir: &Path, server: &SqlServer, ca_file: &Path) {
    let driver = server.driver();
    server
        .query_as_admin(&provision(server, "kine_t", "kine-pw"))
        .unwrap();
    let port = free_port().unwrap();
    let mut kine = Supervised::spawn(
        "kine",
        kine_command(tools, server, ca_file, port),
        &dir.join(format!("kine-{driver}.log")),
    )
    .unwrap();
    poll_until(
        &format!("kine on {driver} did not listen"),
        Duration::from_secs(30),
        Duration::from_millis(50),
        Some(&mut kine),
        || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        },
    )
    .await
    .unwrap();
    let etcdctl = |args: &[&str]| {
        let out = Command::new(tools.path("etcdctl"))
            .arg(format!("--endpoints=http://127.0.0.1:{port}"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{driver}: etcdctl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            kine.log_tail(20)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    etcdctl(&["put", "/registry/a", "value-a"]);
    assert_eq!(
        etcdctl(&["get", "--print-value-only", "/registry/a"]).trim(),
        "value-a"
    );
    // Stored in the tenant's own database, in kine's table.
    let rows = server
        .query_as(
            "kine_t",
            "kine-pw",
            "kine_t",
            "SELECT name FROM kine WHERE name = '/registry/a'",
        )
        .unwrap();
    assert_eq!(rows.trim(), "/registry/a", "{driver}");
    // The connections were made with TLS.
    let log = server.statement_log().unwrap();
    let tls = match server.flavor() {
        Flavor::Postgres => "user=kine_t database=kine_t SSL enabled",
        Flavor::MariaDb => "kine_t@127.0.0.1 on kine_t using SSL/TLS",
    };
    assert!(log.contains(tls), "{driver}: no {tls:?} in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kine_serves_the_etcd_api_from_a_tenant_database() {
    let tools = Tools::locate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (pg, my, ca_pem) = start_both(dir.path()).await;
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca_pem).unwrap();
    kine_put_get(&tools, dir.path(), &pg, &ca_file).await;
    kine_put_get(&tools, dir.path(), &my, &ca_file).await;
    let other_ca = dir.path().join("other-ca.crt");
    std::fs::write(&other_ca, TestCa::new("other").unwrap().cert_pem()).unwrap();
    kine_refuses_a_server_of_another_ca(&tools, dir.path(), &pg, &other_ca).await;
    kine_refuses_a_server_of_another_ca(&tools, dir.path(), &my, &other_ca).await;
}
