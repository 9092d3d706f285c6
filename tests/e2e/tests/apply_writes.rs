//! The exact, ordered list of writes the reconcile pipeline makes for the base fixture F0 on an
//! empty management cluster (a real etcd and kube-apiserver, its audit log as the record), and
//! the empty list on the passes after: a behaviour change in what the provider writes, or in
//! its order, fails here first.

#![cfg(real_programs)]

use std::sync::Arc;

use kamaji_api::KamajiControlPlane;
use kamaji_reconciler::context::{Config, Context};
use kamaji_testenv::{AuditEvent, LocalCluster};
use kube::Api;

const MANAGER: &str = "kamaji-rs-writes";

/// `verb resource/name[/subresource]` of each write of the manager after `from`.
fn writes(cluster: &LocalCluster, from: usize) -> (Vec<String>, usize) {
    let events: Vec<AuditEvent> = cluster
        .audit_events()
        .unwrap()
        .into_iter()
        .filter(|e| e.user.username == MANAGER && e.is_write() && e.stage == "ResponseComplete")
        .collect();
    let list = events[from..]
        .iter()
        .filter_map(|e| {
            let o = e.object_ref.as_ref()?;
            // Events are notes for humans, not state.
            (o.resource != "events").then(|| {
                let sub = o
                    .subresource
                    .as_deref()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default();
                format!(
                    "{} {}/{}{sub}",
                    e.verb,
                    o.resource,
                    o.name.as_deref().unwrap_or("?")
                )
            })
        })
        .collect();
    (list, events.len())
}

/// A TLS etcd on loopback (data in `dir`) trusting client certificates of a fresh CA: the
/// DataStore; returns it with that CA (certificate and key).
async fn datastore_etcd(
    tools: &kamaji_testenv::Tools,
    dir: &std::path::Path,
) -> (kamaji_testenv::Etcd, kamaji_testenv::pki::CertPair) {
    let ca = kamaji_testenv::pki::TestCa::new("datastore-ca").unwrap();
    let serving = ca
        .serving(
            "etcd",
            &["localhost"],
            &[std::net::IpAddr::from([127, 0, 0, 1])],
        )
        .unwrap();
    let etcd = kamaji_testenv::Etcd::start_tls(
        tools,
        dir,
        &serving.cert_pem,
        &serving.key_pem,
        &ca.cert_pem(),
    )
    .await
    .unwrap();
    (etcd, ca.pair())
}

/// The `default` DataStore on `etcd`, as a pass resolves it (CA `pair`, no `spec.basicAuth`).
fn default_datastore(
    etcd: &kamaji_testenv::Etcd,
    pair: kamaji_testenv::pki::CertPair,
) -> kamaji_reconciler::datastore::Resolved {
    kamaji_reconciler::datastore::Resolved {
        name: "default".into(),
        driver: kamaji_api::datastore::Driver::Etcd,
        sql: None,
        endpoints: vec![etcd.url().to_owned()],
        ca_cert: pair.cert_pem,
        ca_key: pair.key_pem,
        overrides: Vec::new(),
        basic_auth: None,
    }
}

/// The `default` DataStore on `etcd`, trusting and presenting `ca`.
async fn apply_datastore(
    cluster: &LocalCluster,
    etcd: &kamaji_testenv::Etcd,
    ca: &kamaji_testenv::pki::CertPair,
) {
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    cluster
        .apply_value(&serde_json::json!({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
            "metadata": {"name": "default"},
            "spec": {"driver": "etcd", "endpoints": [etcd.url()], "tlsConfig": {
                "certificateAuthority": {
                    "certificate": {"content": b64(&ca.cert_pem)},
                    "privateKey": {"content": b64(&ca.key_pem)}},
                "clientCertificate": {
                    "certificate": {"content": b64(&ca.cert_pem)},
                    "privateKey": {"content": b64(&ca.key_pem)}}}},
        }))
        .await
        .unwrap();
}

/// F0 (shared/cases/README.md) in namespace `ns`, created here, with the owner reference
/// Cluster API sets.
async fn apply_f0(cluster: &LocalCluster, ns: &str) {
    cluster
        .apply_value(&serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
        .await
        .unwrap();
    cluster
        .apply_value(&serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "demo", "namespace": ns},
            "spec": {"clusterNetwork": {
                "services": {"cidrBlocks": ["10.96.0.0/12"]},
                "pods": {"cidrBlocks": ["10.244.0.0/16"]},
                "serviceDomain": "cluster.local"},
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
                    "kind": "KamajiControlPlane", "name": "demo"}},
        }))
        .await
        .unwrap();
    let clusters: Api<kamaji_api::cluster::v1beta2::Cluster> =
        Api::namespaced(cluster.client(), ns);
    let uid = clusters.get("demo").await.unwrap().metadata.uid.unwrap();
    cluster
        .apply_value(&serde_json::json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha1", "kind": "KamajiControlPlane",
            "metadata": {"name": "demo", "namespace": ns, "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "demo",
                "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"version": kamaji_testenv::KUBERNETES_VERSION, "replicas": 2,
                "dataStoreName": "default",
                "network": {"serviceType": "LoadBalancer", "serviceAddress": "10.0.0.10"}},
        }))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f0_is_written_in_this_order_and_a_pass_with_nothing_to_change_writes_nothing() {
    let cluster = LocalCluster::builder().capi(false).start().await.unwrap();
    // A real etcd as the DataStore: the manager claims the tenant's schema there first.
    let (etcd, ca) = datastore_etcd(cluster.tools(), &cluster.dir().join("datastore")).await;
    apply_datastore(&cluster, &etcd, &ca).await;
    apply_f0(&cluster, "tenant-a").await;

    let client = cluster
        .user_client(MANAGER, &["system:masters"])
        .await
        .unwrap();
    let ctx = Arc::new(Context::new(client, Config::default()));
    let kcps: Api<KamajiControlPlane> = Api::namespaced(cluster.client(), "tenant-a");
    let mut mark = 0;
    let mut passes = Vec::new();
    // The object before any pass, for a pass that reads a version since replaced (below).
    let stale = Arc::new(kcps.get("demo").await.unwrap());
    for _ in 0..4 {
        let kcp = Arc::new(kcps.get("demo").await.unwrap());
        kamaji_reconciler::reconcile::reconcile(kcp, ctx.clone())
            .await
            .unwrap();
        let (list, now) = writes(&cluster, mark);
        mark = now;
        passes.push(list);
    }
    let expected: Vec<Vec<&str>> = vec![
        // Gates, roots and the encryption key (create-if-absent), the datastore client, the
        // Service; then, once the Service has its ClusterIP (the serving certificate names
        // it), a second round of the same pass: the endpoint, every leaf and kubeconfig, the
        // Deployment; one status write.
        vec![
            "patch kamajicontrolplanes/demo",
            "create secrets/demo-ca",
            "create secrets/demo-proxy",
            "create secrets/demo-sa",
            "create secrets/demo-encryption.config",
            "patch secrets/demo-apiserver-etcd-client",
            "patch services/demo",
            "patch kamajicontrolplanes/demo",
            "patch secrets/demo-apiserver.tls",
            "patch secrets/demo-apiserver-kubelet-client.tls",
            "patch secrets/demo-front-proxy-client.tls",
            "patch secrets/demo-controller-manager.kubeconfig",
            "patch secrets/demo-scheduler.kubeconfig",
            "patch secrets/demo-super-admin.kubeconfig",
            "patch secrets/demo-kubeconfig",
            "patch deployments/demo",
            "patch kamajicontrolplanes/demo/status",
        ],
        // The endpoint write raised the generation, and the status the first pass wrote
        // already observes it: nothing to change, nothing written.
        vec![],
        vec![],
        vec![],
    ];
    assert_eq!(ctx.metrics().second_rounds.get(), 1);
    assert_eq!(passes, expected);

    // A pass handed the object as it was before the first pass (a watch not caught up yet)
    // would compute its status from that empty one. This process's own write replaced that
    // version, so the pass does not run at all: nothing is written.
    let before = kcps.get("demo").await.unwrap().status;
    kamaji_reconciler::reconcile::reconcile(stale.clone(), ctx.clone())
        .await
        .unwrap();
    assert_eq!(ctx.metrics().superseded_passes.get(), 1);
    assert_eq!(writes(&cluster, mark).0, Vec::<String>::new());
    // Another process (a restarted manager) never saw that write: its pass runs, and its
    // status write, with that version as precondition, is refused; the status stays as the
    // passes above wrote it.
    let other = Arc::new(Context::new(ctx.client().clone(), Config::default()));
    kamaji_reconciler::reconcile::reconcile(stale, other.clone())
        .await
        .unwrap();
    assert_eq!(kcps.get("demo").await.unwrap().status, before);
    assert_eq!(other.metrics().stale_status_writes.get(), 1);
    assert_eq!(other.metrics().superseded_passes.get(), 0);
}

/// Many control planes created at once on a fresh etcd DataStore (the simulated scale bench,
/// issue 16): the first one granted turns etcd authentication on while the passes of the
/// others are under way with sessions opened before, without token, which etcd then answers
/// `user name is empty`. Such a pass opens its session again and claims and grants all the
/// same, instead of failing and waiting out an error backoff. Real etcd; the stale session's
/// own failure is the negative control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datastore_session_opened_before_authentication_went_on_still_claims_and_grants() {
    use kamaji_reconciler::datastore::{self, auth};
    let tools = kamaji_testenv::Tools::locate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (etcd, pair) = datastore_etcd(&tools, dir.path()).await;
    let ds = default_datastore(&etcd, pair);
    let mut first = auth::session(&ds).await.unwrap();
    // The second pass opened its session while authentication was still off.
    let mut second = auth::session(&ds).await.unwrap();
    assert_eq!(
        auth::claim_and_grant(&ds, &mut first, "sim_0_demo", "sim-0/demo", "sim-0-demo")
            .await
            .unwrap(),
        "sim-0/demo"
    );
    assert!(matches!(
        auth::enable(&ds, &first).await.unwrap(),
        auth::Enablement::Enabled
    ));
    let stale = datastore::claim_schema(&ds, &second, "sim_1_demo", "sim-1/demo")
        .await
        .unwrap_err();
    assert!(auth::enabled_since_session(&stale), "{stale}");
    assert_eq!(
        auth::claim_and_grant(&ds, &mut second, "sim_1_demo", "sim-1/demo", "sim-1-demo")
            .await
            .unwrap(),
        "sim-1/demo"
    );
    assert!(second.token.is_some(), "the session was not opened again");
    let fresh = auth::session(&ds).await.unwrap();
    let roles = auth::roles(&ds, &fresh).await.unwrap();
    assert!(roles.contains(&"sim_1_demo".to_owned()), "{roles:?}");
}

/// The provider's session on a DataStore is kept between passes (issue 16: opening one costs
/// etcd a bcrypt check of the password once authentication is on, and a manager that opened
/// one per pass paid it for every tenant it provisioned and again for each after a restart): a
/// second pass on the same DataStore gets the same token; a DataStore changed in what the
/// session depends on gets a new one; a kept session whose token etcd refuses is opened again
/// by the claim instead of failing the pass. Real etcd; the refused token's own failure is the
/// negative control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datastore_session_is_kept_between_passes_and_opened_again_when_etcd_refuses_its_token() {
    use kamaji_reconciler::datastore::{self, Resolved, Token, auth};
    let tools = kamaji_testenv::Tools::locate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (etcd, pair) = datastore_etcd(&tools, dir.path()).await;
    let ds = default_datastore(&etcd, pair);
    let metrics = kamaji_reconciler::metrics::Metrics::default();
    let opened = || metrics.datastore_sessions.get();
    let sessions = auth::Sessions::new(metrics.datastore_sessions.clone());
    let mut off = sessions.get(&ds).await.unwrap();
    assert!(off.token.is_none());
    auth::claim_and_grant(&ds, &mut off, "sim_0_demo", "sim-0/demo", "sim-0-demo")
        .await
        .unwrap();
    assert!(matches!(
        auth::enable(&ds, &off).await.unwrap(),
        auth::Enablement::Enabled
    ));
    sessions.forget(&ds).await;
    let first = sessions.get(&ds).await.unwrap();
    let second = sessions.get(&ds).await.unwrap();
    assert!(first.token.is_some());
    assert!(
        auth::same_token(&first, &second),
        "the session was opened again"
    );
    assert_eq!(opened(), 2);
    // Another endpoint list (the same etcd twice): what the session was opened for changed.
    let changed = Resolved {
        endpoints: vec![etcd.url().to_owned(), etcd.url().to_owned()],
        ..ds.clone()
    };
    let other = sessions.get(&changed).await.unwrap();
    assert!(!auth::same_token(&other, &second));
    assert_eq!(opened(), 3);
    // etcd refuses a token it does not know (as one expired): the claim opens a new session.
    let mut refused = other.clone();
    refused.token = Some(Token("bogus.1".into()));
    let err = datastore::claim_schema(&changed, &refused, "sim_1_demo", "sim-1/demo")
        .await
        .unwrap_err();
    assert!(auth::token_refused(&err), "{err}");
    assert_eq!(
        auth::claim_and_grant(
            &changed,
            &mut refused,
            "sim_1_demo",
            "sim-1/demo",
            "sim-1-demo"
        )
        .await
        .unwrap(),
        "sim-1/demo"
    );
    assert!(
        refused
            .token
            .as_ref()
            .is_some_and(|Token(t)| t != "bogus.1"),
        "the session was not opened again"
    );
    sessions.keep_reopened(&changed, &refused).await;
    assert!(auth::same_token(
        &sessions.get(&changed).await.unwrap(),
        &refused
    ));
    assert_eq!(opened(), 4);
    // A token-less session opened before authentication went on: turning it on again is
    // reported as done, whichever step etcd refuses first.
    assert!(matches!(
        auth::enable(&ds, &off).await.unwrap(),
        auth::Enablement::AlreadyEnabled
    ));
}

/// The first bootstrap of a tenant never applied to does not look for objects of undeclared
/// addons one by one: the tenant may hold one kamaji-rs applied only when its cluster-info
/// names a kubeconfig or an applied set, or the first object of every apply (the join RBAC)
/// exists, which an apply that stopped half-way left. A real kube-apiserver plays the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_tenant_an_earlier_apply_reached_is_searched_for_objects_of_removed_addons() {
    use kamaji_reconciler::tenant::{ClusterInfo, applied_before};
    use kube::api::DynamicObject;
    let cluster = LocalCluster::builder().capi(false).start().await.unwrap();
    let client = cluster.client();
    let first: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kubeadm:get-nodes"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}))
    .unwrap();
    let never = ClusterInfo::default();
    assert!(
        !applied_before(&client, &never, &first).await.unwrap(),
        "a tenant without cluster-info and without the first object was never applied to"
    );
    let completed = ClusterInfo {
        kubeconfig: Some("apiVersion: v1\nkind: Config\n".into()),
        artifacts_hash: Some("0123".into()),
    };
    assert!(applied_before(&client, &completed, &first).await.unwrap());
    let without_hash = ClusterInfo {
        kubeconfig: Some("apiVersion: v1\nkind: Config\n".into()),
        artifacts_hash: None,
    };
    assert!(
        applied_before(&client, &without_hash, &first)
            .await
            .unwrap(),
        "a cluster-info an older kamaji-rs applied, without the set's hash"
    );
    // An apply that stopped after its first object.
    cluster
        .apply_value(&serde_json::to_value(&first).unwrap())
        .await
        .unwrap();
    assert!(
        applied_before(&client, &never, &first).await.unwrap(),
        "the first object of an apply that stopped half-way"
    );
}

/// A new control plane's Secrets are not read by name one by one before they are written
/// (issue 16: 8 `GET`s per tenant, each answered 404): when one metadata-only list of the
/// namespace holds every Secret there, a name it lacks is absent. A namespace holding more
/// Secrets than that page is read by name as before, so a Secret of one of the control plane's
/// names that another object controls is still found and never written (the field report of
/// sibling clusters), wherever it sorts. Negative control: trusting the first page of a
/// namespace that holds more makes the pass write over the other controller's Secret.
///
/// The pass's second round (issue 16) reads nothing again: it starts from the first round's
/// observation and what that round wrote, and still creates the Deployment. Negative control:
/// without the roots the first round created, the second round plans new ones, finds the
/// stored ones on create, reads them by name and stops before the Deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_control_planes_secrets_are_found_absent_by_one_list_of_a_namespace_that_fits_a_page()
{
    use k8s_openapi::api::core::v1::Secret;
    let cluster = LocalCluster::builder().capi(false).start().await.unwrap();
    let (etcd, ca) = datastore_etcd(cluster.tools(), &cluster.dir().join("datastore")).await;
    apply_datastore(&cluster, &etcd, &ca).await;
    apply_f0(&cluster, "small").await;
    apply_f0(&cluster, "crowded").await;
    // More Secrets than a page, and one of the control plane's names another object controls,
    // sorting after all of them.
    for i in 0..120 {
        cluster
            .apply_value(&serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("a-{i:03}"), "namespace": "crowded"}}))
            .await
            .unwrap();
    }
    let foreign = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "demo-scheduler.kubeconfig", "namespace": "crowded",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "other",
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true}]},
        "stringData": {"value": "someone else's"}});
    cluster.apply_value(&foreign).await.unwrap();

    let client = cluster
        .user_client(MANAGER, &["system:masters"])
        .await
        .unwrap();
    let ctx = Arc::new(Context::new(client, Config::default()));
    for ns in ["small", "crowded"] {
        let kcps: Api<KamajiControlPlane> = Api::namespaced(cluster.client(), ns);
        let kcp = Arc::new(kcps.get("demo").await.unwrap());
        kamaji_reconciler::reconcile::reconcile(kcp, ctx.clone())
            .await
            .unwrap();
    }
    let requests = |ns: &str, verb: &str, resource: &str| -> Vec<String> {
        cluster
            .audit_events()
            .unwrap()
            .into_iter()
            .filter(|e| e.user.username == MANAGER && e.stage == "ResponseComplete")
            .filter(|e| e.verb == verb)
            .filter(|e| {
                e.object_ref
                    .as_ref()
                    .is_some_and(|o| o.resource == resource && o.namespace.as_deref() == Some(ns))
            })
            .map(|e| e.request_u_r_i)
            .collect()
    };
    let reads = |ns: &str, verb: &str| requests(ns, verb, "secrets");
    // The small namespace: no Secret read by name; one list without a selector in the pass.
    // Its second round (once the Service has its address) starts from the first round's
    // observation and what that round wrote: the labelled list, the Deployment and the Service
    // are read once, the namespace listed once.
    assert_eq!(reads("small", "get"), Vec::<String>::new());
    let (labelled, unlabelled): (Vec<_>, Vec<_>) = reads("small", "list")
        .into_iter()
        .partition(|uri| uri.contains("labelSelector"));
    assert_eq!(unlabelled.len(), 1, "{unlabelled:?}");
    assert_eq!(labelled.len(), 1, "{labelled:?}");
    assert_eq!(requests("small", "get", "deployments").len(), 1);
    assert_eq!(requests("small", "get", "services").len(), 1);
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(cluster.client(), "small");
    assert!(deployments.get_opt("demo").await.unwrap().is_some());
    let small: Api<Secret> = Api::namespaced(cluster.client(), "small");
    assert!(small.get_opt("demo-kubeconfig").await.unwrap().is_some());

    // The crowded one: read by name, the other controller's Secret found and left as it was.
    assert!(!reads("crowded", "get").is_empty());
    let crowded: Api<Secret> = Api::namespaced(cluster.client(), "crowded");
    let kept = crowded.get("demo-scheduler.kubeconfig").await.unwrap();
    assert_eq!(kept.metadata.owner_references.unwrap().len(), 1);
    assert_eq!(
        kept.data.unwrap().get("value").map(|v| v.0.clone()),
        Some(b"someone else's".to_vec()),
        "the other controller's Secret was written"
    );
    let kcp = Api::<KamajiControlPlane>::namespaced(cluster.client(), "crowded")
        .get("demo")
        .await
        .unwrap();
    let conditions = kcp.status.and_then(|s| s.conditions).unwrap_or_default();
    let certificates = conditions
        .iter()
        .find(|c| c.type_ == kamaji_api::conditions::types::CERTIFICATES_AVAILABLE)
        .expect("CertificatesAvailable");
    assert_eq!(certificates.status, "False", "{certificates:?}");
    assert!(
        certificates.message.contains("controlled by"),
        "{certificates:?}"
    );
}
