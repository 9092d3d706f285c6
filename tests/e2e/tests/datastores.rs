//! Issue 17: PostgreSQL and MySQL DataStores through kine, on real servers (PostgreSQL 15 and
//! MariaDB 10.11 as local processes with TLS, `kamaji_testenv::sql`), checked with the servers'
//! own clients.
#![cfg(real_programs_as_root)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::{Env, F0, recorded_datastore, secret_text, serial};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};

const MINUTE: Duration = Duration::from_mins(1);

/// Deletes Cluster `ns/demo` and waits until it is gone.
async fn delete_cluster(env: &Env, ns: &str) {
    let clusters = env.capi(ns, "v1beta1", "Cluster");
    let uid = clusters
        .get("demo")
        .await
        .map(|c| c.metadata.uid.unwrap_or_default())
        .unwrap_or_default();
    clusters
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::timeout(
        3 * MINUTE,
        await_condition(clusters, "demo", conditions::is_deleted(&uid)),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "{ns}: Cluster not deleted in 3 minutes\nmanager log:\n{}",
            env.manager_log()
        )
    })
    .unwrap();
}

/// Two tenants named `demo` on one PostgreSQL and one on MariaDB reach Available, each on its
/// own database and user (different, recorded in status, stable across a manager restart, with
/// `dataStoreUsername` and `kine` honoured); an object written through one tenant is in its
/// database only, and a tenant's user cannot open another's database; hostile names are
/// refused at admission and never reach a server; deleting each tenant drops its database and
/// user (the servers' own clients show it) and leaves the others working.
#[kamaji_e2e::test]
async fn sql_datastores_give_each_tenant_its_own_database_and_user_and_drop_them_on_deletion() {
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    let servers = env.start_sql_servers().await.unwrap();
    env.create_sql_datastore_for("postgres", &servers.postgres, &servers.ca.cert_pem)
        .await
        .unwrap();
    env.create_sql_datastore_for("mariadb", &servers.mariadb, &servers.ca.cert_pem)
        .await
        .unwrap();
    for ns in ["pg-a", "pg-b", "maria"] {
        env.namespace(ns).await.unwrap();
    }
    // Hostile names are refused by the API server: nothing reaches a database.
    for hostile in ["x'; DROP DATABASE postgres; --", "x`; DROP USER root; #"] {
        let yaml = F0::new("pg-a", "hostile")
            .replicas(1)
            .spec(&format!(
                "  dataStoreName: postgres\n  dataStoreSchema: \"{}\"\n",
                hostile.replace('"', "\\\"")
            ))
            .yaml();
        assert!(
            env.apply_yaml(&yaml).await.is_err(),
            "{hostile:?} was admitted"
        );
    }
    env.apply_yaml(
        &F0::new("pg-a", "demo")
            .replicas(1)
            .spec("  dataStoreName: postgres\n")
            .yaml(),
    )
    .await
    .unwrap();
    env.apply_yaml(
        &F0::new("pg-b", "demo")
            .replicas(1)
            .spec(
                "  dataStoreName: postgres\n  dataStoreUsername: tenant_b_owner\n  \
                 kine: {extraArgs: [\"--metrics-bind-address=127.0.0.1:2381\"], \
                 resources: {requests: {memory: 32Mi}}}\n",
            )
            .yaml(),
    )
    .await
    .unwrap();
    env.apply_yaml(
        &F0::new("maria", "demo")
            .replicas(1)
            .spec("  dataStoreName: mariadb\n")
            .yaml(),
    )
    .await
    .unwrap();
    for ns in ["pg-a", "pg-b", "maria"] {
        env.wait_kcp_condition(ns, "demo", "Available", "True", 5 * MINUTE)
            .await
            .unwrap_or_else(|e| panic!("{ns}: {e}\nmanager log:\n{}", env.manager_log()));
    }
    let (a, b, m) = (
        recorded_datastore(&env, "pg-a").await,
        recorded_datastore(&env, "pg-b").await,
        recorded_datastore(&env, "maria").await,
    );
    assert_eq!(
        (a.name.as_str(), b.name.as_str(), m.name.as_str()),
        ("postgres", "postgres", "mariadb")
    );
    assert_ne!(a.schema, b.schema, "two demos, two databases");
    assert_ne!(a.username, b.username, "two demos, two users");
    assert_eq!(b.username, "tenant_b_owner");
    let pg = &servers.postgres;
    let databases = pg
        .query_as_admin("SELECT datname FROM pg_database")
        .unwrap();
    let roles = pg.query_as_admin("SELECT rolname FROM pg_roles").unwrap();
    for name in [&a.schema, &b.schema] {
        assert!(
            databases.lines().any(|l| l == name),
            "{name} not in {databases}"
        );
    }
    for name in [&a.username, &b.username] {
        assert!(roles.lines().any(|l| l == name), "{name} not in {roles}");
    }
    let maria = &servers.mariadb;
    assert!(
        maria
            .query_as_admin("SHOW DATABASES")
            .unwrap()
            .lines()
            .any(|l| l == m.schema)
    );
    assert!(
        maria
            .query_as_admin("SELECT user FROM mysql.user")
            .unwrap()
            .lines()
            .any(|l| l == m.username)
    );
    // kine beside the API server, with spec.kine's flag and resources.
    let kine = env.container_args("pg-b", "demo", "kine").await.unwrap();
    assert!(
        kine.contains(&"--metrics-bind-address=127.0.0.1:2381".to_owned()),
        "{kine:?}"
    );
    let api = env
        .container_args("pg-a", "demo", "kube-apiserver")
        .await
        .unwrap();
    assert!(
        api.contains(&"--etcd-servers=http://127.0.0.1:2379".to_owned()),
        "{api:?}"
    );

    // An object written through tenant A is stored in A's database only.
    let tenant_a = env.tenant_client("pg-a", "demo").await.unwrap();
    Api::<ConfigMap>::namespaced(tenant_a, "default")
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "written-through-tenant-a"},
                "data": {"k": "v"},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let (admin, admin_password) = pg.admin();
    let count = |db: &str| {
        pg.query_as(
            admin,
            admin_password,
            db,
            "SELECT count(*) FROM kine WHERE name LIKE '%written-through-tenant-a%'",
        )
        .unwrap()
        .trim()
        .to_owned()
    };
    assert_ne!(count(&a.schema), "0", "not in tenant A's database");
    assert_eq!(count(&b.schema), "0", "in tenant B's database");
    let tenant_b = env.tenant_client("pg-b", "demo").await.unwrap();
    assert!(
        Api::<ConfigMap>::namespaced(tenant_b, "default")
            .get_opt("written-through-tenant-a")
            .await
            .unwrap()
            .is_none()
    );
    // Tenant A's user, with its own password (from its kine Secret), cannot open B's database.
    let endpoint_a = secret_text(
        &env.secret("pg-a", "demo-kine.config").await.unwrap(),
        "endpoint",
    );
    let password_a = endpoint_a
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, p)| p.to_owned())
        .unwrap();
    assert!(
        pg.query_as(&a.username, &password_a, &a.schema, "SELECT 1")
            .is_ok()
    );
    let refused = pg
        .query_as(&a.username, &password_a, &b.schema, "SELECT 1")
        .unwrap_err()
        .to_string();
    assert!(refused.contains("permission denied"), "{refused}");
    // PostgreSQL was told only a SCRAM verifier: its statement log holds no tenant password.
    assert!(
        !pg.statement_log().unwrap().contains(&password_a),
        "tenant A's password is in PostgreSQL's statement log"
    );

    // The names and the pods are stable across a manager restart.
    let generation = |d: k8s_openapi::api::apps::v1::Deployment| d.metadata.generation;
    let before = generation(env.deployment("pg-a", "demo").await.unwrap());
    env.kill_manager();
    env.start_manager().unwrap();
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(recorded_datastore(&env, "pg-a").await, a);
    assert_eq!(recorded_datastore(&env, "pg-b").await, b);
    assert_eq!(
        generation(env.deployment("pg-a", "demo").await.unwrap()),
        before,
        "the Deployment changed after the restart"
    );

    for hostile in ["DROP DATABASE postgres", "DROP USER root"] {
        assert!(
            !pg.statement_log().unwrap().contains(hostile)
                && !maria.statement_log().unwrap().contains(hostile),
            "{hostile} reached a server"
        );
    }

    // A database that exists on the server but no control plane claimed (an application's) is
    // never taken over, and deleting the refused control plane leaves it alone.
    servers
        .postgres
        .query_as_admin("CREATE DATABASE app_db")
        .unwrap();
    env.apply_yaml(
        &F0::new("pg-a", "intruder")
            .replicas(1)
            .spec("  dataStoreName: postgres\n  dataStoreSchema: app_db\n")
            .yaml(),
    )
    .await
    .unwrap();
    env.wait_kcp(
        "pg-a",
        "intruder",
        "refused: app_db exists",
        2 * MINUTE,
        |k| kamaji_e2e::condition_message(k, "DataStoreReady").contains("already exists"),
    )
    .await
    .unwrap();
    env.capi("pg-a", "v1beta1", "Cluster")
        .delete("intruder", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::timeout(3 * MINUTE, async {
        while Api::<KamajiControlPlane>::namespaced(env.client(), "pg-a")
            .get_opt("intruder")
            .await
            .unwrap()
            .is_some()
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("the refused control plane was not deleted");
    assert!(
        pg.query_as_admin("SELECT datname FROM pg_database")
            .unwrap()
            .lines()
            .any(|l| l == "app_db"),
        "the application's database was dropped"
    );

    // Deletion drops each tenant's database and user; the others keep working.
    delete_cluster(&env, "pg-a").await;
    let databases = pg
        .query_as_admin("SELECT datname FROM pg_database")
        .unwrap();
    let roles = pg.query_as_admin("SELECT rolname FROM pg_roles").unwrap();
    assert!(!databases.lines().any(|l| l == a.schema), "{databases}");
    assert!(!roles.lines().any(|l| l == a.username), "{roles}");
    assert!(databases.lines().any(|l| l == b.schema), "{databases}");
    env.wait_kcp_condition("pg-b", "demo", "Available", "True", MINUTE)
        .await
        .unwrap();
    delete_cluster(&env, "maria").await;
    assert!(
        !maria
            .query_as_admin("SHOW DATABASES")
            .unwrap()
            .lines()
            .any(|l| l == m.schema)
    );
    assert!(
        !maria
            .query_as_admin("SELECT user FROM mysql.user")
            .unwrap()
            .lines()
            .any(|l| l == m.username)
    );
}
