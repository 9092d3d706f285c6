//! Lifecycle of key material without an outage (issue 15): leaves renewed at their renewal
//! time before they expire, and the service-account signing key rotated with overlap, each
//! while clients poll the tenant through the endpoint.

#![cfg(real_programs_as_root)]

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::{Env, ReadyzProbe, api_server_has, f0, secret_text, serial, wait_rolled_out};
use kube::api::{Api, PostParams};

const MINUTE: Duration = Duration::from_mins(1);

/// The pod template's hash of the mounted key material (it changes when a certificate the
/// pods mount changes, which rolls them).
fn pki_hash(d: &Deployment) -> Option<String> {
    d.spec.as_ref().and_then(|s| {
        s.template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("controlplane.cluster.x-k8s.io/kamaji-rs-pki-hash"))
            .cloned()
    })
}

/// The certificate of every leaf Secret of `ns/demo` (the seven of
/// `kamaji_bootstrap::leaves::LEAVES` and the datastore client), PEM, by Secret name.
async fn leaf_certificates(env: &Env, ns: &str) -> std::collections::BTreeMap<String, String> {
    use kamaji_bootstrap::leaves::{LEAVES, kubeconfig_of, secret_name};
    let names = kamaji_api::names::ObjectNames::new("demo", "demo");
    let mut out = std::collections::BTreeMap::new();
    let secrets = LEAVES
        .iter()
        .map(|r| secret_name(&names, *r))
        .chain(std::iter::once(names.apiserver_etcd_client_secret()));
    for name in secrets {
        let s = env.secret(ns, &name).await.unwrap();
        let pem = match kubeconfig_of(&s).and_then(|k| k.client) {
            Some(client) => client.cert_pem().to_owned(),
            None => secret_text(&s, "tls.crt"),
        };
        out.insert(name, pem);
    }
    out
}

/// Issue 15 (certificate renewal): with leaves made short-lived by the manager's flags
/// (valid 420 s, reissued with 240 s left: 3 minutes for the tenant to become available under
/// load), every leaf and kubeconfig is reissued at its renewal time, before it expires, with
/// nothing but the clock to trigger it: the manager
/// logs that it will look again exactly then. The pods roll onto the new material while a
/// client polls `/readyz` through the endpoint with the kubeconfig read before, and not one
/// poll fails. (Negative control: without the renewal requeue, the next pass is the
/// 10-minute resync and the wait below times out.)
#[kamaji_e2e::test]
async fn leaves_are_renewed_at_their_renewal_time_before_they_expire_without_losing_the_api() {
    use k8s_openapi::jiff::Timestamp;
    use kamaji_bootstrap::pki::inspect::CertificateInfo;
    use std::time::SystemTime;
    const VALIDITY: u64 = 420;
    const WINDOW: u64 = 240;
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    env.kill_manager();
    let manager = env
        .spawn_manager(
            kamaji_testenv::free_port().unwrap(),
            &[
                &format!("--leaf-certificate-validity-seconds={VALIDITY}"),
                &format!("--certificate-renewal-window-seconds={WINDOW}"),
                "--log-format=json",
            ],
        )
        .unwrap();
    let ns = "renewal";
    env.namespace(ns).await.unwrap();
    env.apply_yaml(&f0(ns, "demo", 2)).await.unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let probe = ReadyzProbe::start(env.tenant_config(ns, "demo").await.unwrap());
    probe.answered(MINUTE).await.unwrap();
    let before = leaf_certificates(&env, ns).await;
    let info = |pem: &str| CertificateInfo::from_pem(pem).unwrap();
    let renew_at = |pem: &str| info(pem).not_after - Duration::from_secs(WINDOW);
    let first_due = before.values().map(|p| renew_at(p)).min().unwrap();
    let last_expiry = before.values().map(|p| info(p).not_after).max().unwrap();
    assert!(
        SystemTime::now() < first_due,
        "the tenant took too long: the first leaf is due before the test could watch"
    );
    let old_hash = pki_hash(&env.deployment(ns, "demo").await.unwrap());
    // Each Secret's certificate must change between its renewal time and its expiry.
    let mut renewed = std::collections::BTreeMap::new();
    while renewed.len() < before.len() {
        let now = SystemTime::now();
        assert!(
            now < last_expiry,
            "leaves not renewed before they expired; renewed so far: {:?}",
            renewed.keys().collect::<Vec<_>>()
        );
        for (name, pem) in leaf_certificates(&env, ns).await {
            if pem != before[&name] && !renewed.contains_key(&name) {
                let old = &before[&name];
                assert!(
                    now + Duration::from_secs(2) >= renew_at(old),
                    "{name} reissued before its renewal time"
                );
                assert!(
                    now < info(old).not_after,
                    "{name} reissued after it expired"
                );
                renewed.insert(name, now);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rolled = wait_rolled_out(&env, ns, "demo", 2, 4 * MINUTE, move |d| {
        pki_hash(d) != old_hash
    })
    .await
    .unwrap();
    assert!(pki_hash(&rolled).is_some());
    let (ok, failed, why) = probe.stop().await;
    assert!(ok > 10, "too few probes: {ok}");
    assert_eq!(
        failed,
        0,
        "/readyz failed {failed} times (of {}) through the renewal: {why:#?}",
        ok + failed
    );
    // The manager said when it would look again, and that is the first renewal time.
    let log = std::fs::read_to_string(manager.log_path()).unwrap();
    let planned: Vec<SystemTime> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("renewal time"))
        })
        .filter_map(|v| {
            let at: Timestamp = v["timestamp"].as_str()?.parse().ok()?;
            let after = v["fields"]["requeue_seconds"].as_u64()?;
            Some(SystemTime::from(at) + Duration::from_secs(after))
        })
        .filter(|t| *t <= first_due + Duration::from_secs(2))
        .collect();
    let last = planned
        .last()
        .copied()
        .expect("no requeue for the renewal logged");
    let gap = last
        .duration_since(first_due)
        .unwrap_or_else(|e| e.duration());
    assert!(
        gap <= Duration::from_secs(2),
        "the logged requeue ({last:?}) is not the first renewal time ({first_due:?})"
    );
}

/// The answer of a tenant API server to `token`: the user name, or the error (status code
/// first when the server answered).
async fn review_token(mut config: kube::Config, token: &str) -> Result<String, String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    config.auth_info = serde_json::from_value(serde_json::json!({ "token": token })).unwrap();
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    match Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(r) => Ok(r
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .unwrap_or_default()),
        Err(kube::Error::Api(s)) => Err(format!("{} {}", s.code, s.message)),
        Err(e) => Err(format!("{e:#}")),
    }
}

/// Issue 15 (service-account key rotation with overlap): with the rotation annotation set,
/// the API servers first roll to trust a new key, then the new key signs while the old one
/// still verifies, and the old one is dropped after the overlap (60 s here). Throughout, a
/// token issued before the rotation and a fresh token requested every second (as a kubelet
/// refreshes a pod's projected token; it may be signed by either key, by any API server) are
/// accepted by whichever API server answers through the endpoint (a new connection per
/// request, so every API server signs and verifies some): 0 refusals. Afterwards
/// the old token is refused (401), `<cluster>-sa` holds the new pair in CAPI's format, and
/// the same annotation value rotates nothing again. (Negative control: with the trust phase
/// skipped, promoting at once, the fresh tokens signed by the new key are refused by API
/// servers that do not know it yet.)
#[kamaji_e2e::test]
async fn a_service_account_key_rotation_refuses_no_token_until_the_overlap_ends() {
    use kamaji_api::conditions::{reasons, types};
    use kamaji_api::meta::SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    env.kill_manager();
    let _manager = env
        .spawn_manager(
            kamaji_testenv::free_port().unwrap(),
            &["--service-account-key-overlap-seconds=60"],
        )
        .unwrap();
    let ns = "sa-rotation";
    env.namespace(ns).await.unwrap();
    env.apply_yaml(&f0(ns, "demo", 2)).await.unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let tenant = env.tenant_client(ns, "demo").await.unwrap();
    let config = env.tenant_config(ns, "demo").await.unwrap();
    let old_token = kamaji_e2e::default_service_account_token(&tenant).await;
    let sa_before = env.secret(ns, "demo-sa").await.unwrap();
    assert_eq!(
        review_token(config.clone(), &old_token).await.as_deref(),
        Ok("system:serviceaccount:default:default")
    );
    // Two pollers: the old token every 200 ms, a fresh token every second.
    // Every refusal is kept with its time and which token it was.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(
        std::time::SystemTime,
        bool,
        String,
    )>::new()));
    let poll = |fresh: bool| {
        let (stop, ok, seen) = (stop.clone(), ok.clone(), seen.clone());
        let (config, old) = (config.clone(), old_token.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let token = if fresh {
                    // A new connection per request, so that every API server signs some.
                    let admin = kube::Client::try_from(config.clone()).unwrap();
                    match kamaji_testenv::kubeconfig::service_account_token(
                        &admin, "default", "default", 3600,
                    )
                    .await
                    {
                        Ok(t) => t,
                        Err(e) => {
                            let now = std::time::SystemTime::now();
                            seen.lock()
                                .unwrap()
                                .push((now, true, format!("request: {e:#}")));
                            continue;
                        }
                    }
                } else {
                    old.clone()
                };
                match review_token(config.clone(), &token).await {
                    Ok(_) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        let when = started.elapsed().as_secs_f64();
                        let now = std::time::SystemTime::now();
                        seen.lock()
                            .unwrap()
                            .push((now, fresh, format!("at {when:.1} s: {e}")));
                    }
                }
                let pause = if fresh { 1000 } else { 200 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        })
    };
    let pollers = [poll(false), poll(true)];
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"metadata": {"annotations": {SERVICE_ACCOUNT_KEY_ROTATION_ANNOTATION: "r1"}}}),
    )
    .await
    .unwrap();
    let reason_is = |want: &'static str| {
        move |k: &KamajiControlPlane| {
            k.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.type_ == types::SERVICE_ACCOUNT_KEY_ROTATED)
                })
                .is_some_and(|c| c.reason == want)
        }
    };
    env.wait_kcp(
        ns,
        "demo",
        "trusting the new key",
        MINUTE,
        reason_is(reasons::TRUSTING_NEW_KEY),
    )
    .await
    .unwrap();
    env.wait_kcp(
        ns,
        "demo",
        "the new key signing",
        4 * MINUTE,
        reason_is(reasons::VERIFYING_PREVIOUS_KEY),
    )
    .await
    .unwrap();
    let sa_after = env.secret(ns, "demo-sa").await.unwrap();
    let until: std::time::SystemTime = env
        .secret(ns, "demo-sa-rotation.keys")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default()
        .get("controlplane.cluster.x-k8s.io/verify-previous-key-until")
        .expect("the end of the overlap")
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .into();
    assert_ne!(
        sa_after.data, sa_before.data,
        "<cluster>-sa holds the new key"
    );
    // During the overlap the old token is still accepted (the pollers count it).
    env.wait_kcp(
        ns,
        "demo",
        "rotation done",
        5 * MINUTE,
        reason_is(reasons::ROTATED),
    )
    .await
    .unwrap();
    wait_rolled_out(&env, ns, "demo", 2, 4 * MINUTE, |d| {
        !api_server_has("--service-account-key-file=/etc/kubernetes/pki/sa-rotation/verify.pub")(d)
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    for p in pollers {
        p.await.unwrap();
    }
    let ok = ok.load(Ordering::Relaxed);
    assert!(ok > 100, "too few reviews: {ok}");
    // Fresh tokens are never refused; the old one only once the overlap has ended.
    let seen = seen.lock().unwrap().clone();
    let early: Vec<&(std::time::SystemTime, bool, String)> = seen
        .iter()
        .filter(|(at, fresh, _)| *fresh || *at < until)
        .collect();
    assert!(
        early.is_empty(),
        "tokens refused before the overlap ended ({ok} accepted): {early:#?}"
    );
    // The overlap is over and the old pods are gone: the old key no longer verifies.
    let deadline = tokio::time::Instant::now() + MINUTE;
    loop {
        match review_token(config.clone(), &old_token).await {
            Err(e) if e.starts_with("401") => break,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the old key's token is still answered: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let fresh =
        kamaji_testenv::kubeconfig::service_account_token(&tenant, "default", "default", 600)
            .await
            .unwrap();
    assert_eq!(
        review_token(config.clone(), &fresh).await.as_deref(),
        Ok("system:serviceaccount:default:default")
    );
    // `<cluster>-sa` in CAPI's format: tls.crt the public key of tls.key.
    let (public, private) = kamaji_bootstrap::secrets::tls_pair_of(&sa_after).unwrap();
    let pair = kamaji_bootstrap::pki::ServiceAccountKeyPair::from_private_pem(&private).unwrap();
    assert_eq!(pair.public_pem(), public);
    // The same value again rotates nothing.
    let rotation = env.secret(ns, "demo-sa-rotation.keys").await.unwrap();
    assert!(
        rotation.data.unwrap_or_default().is_empty(),
        "no key kept after the rotation"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(env.secret(ns, "demo-sa").await.unwrap().data, sa_after.data);
}

/// The DataStore's CA rotated by the datastore's owner, with overlap (docs/pki-and-rotations.md, "DataStore CA rotation"):
/// the etcd already trusts client certificates of the old and the new CA; the DataStore's
/// `certificateAuthority.certificate` becomes the bundle of both with the new private key.
/// The tenant's datastore client certificate is reissued from the new CA, its `ca.crt` (the
/// API server's `--etcd-cafile`) becomes the bundle, so the API servers still verify the
/// etcd's certificate of the old CA, and the pods roll onto it with 0 failed `/readyz` polls
/// (which check etcd) and a write through the tenant afterwards. A key that belongs to
/// neither certificate is refused naming the field.
#[kamaji_e2e::test]
#[allow(clippy::too_many_lines)] // one story: before, rotation, refusal
async fn a_datastore_ca_rotated_by_its_owner_moves_each_tenant_without_a_failed_request() {
    use k8s_openapi::api::core::v1::Namespace;
    use kamaji_bootstrap::pki::inspect::is_signed_by;
    use kamaji_e2e::{F0, condition_message};
    use kamaji_machine::network::UNDERLAY_GATEWAY;
    use kamaji_testenv::pki::{CertPair, TestCa};
    use std::net::IpAddr;
    let _serial = serial();
    let env = Env::start().await.unwrap();
    let old = TestCa::new("etcd-ca").unwrap();
    let new = TestCa::new("etcd-ca").unwrap();
    let bundle = format!("{}{}", old.cert_pem(), new.cert_pem());
    // The owner's first step: the etcd trusts client certificates of both CAs; it keeps
    // serving its certificate of the old one.
    let serving = old
        .serving(
            "etcd-rotating",
            &["localhost"],
            &[IpAddr::from([127, 0, 0, 1]), IpAddr::V4(UNDERLAY_GATEWAY)],
        )
        .unwrap();
    let (_etcd, for_pods) = env
        .start_etcd_for_pods("datastore-rotating", &serving, &bundle)
        .await
        .unwrap();
    let admin = old.client("datastore-admin", &[]).unwrap();
    env.create_datastore_with_ca("rotating", for_pods, &old.pair(), &admin)
        .await
        .unwrap();
    let ns = "datastore-ca";
    env.namespace(ns).await.unwrap();
    env.apply_yaml(&F0::new(ns, "demo").replicas(2).datastore("rotating").yaml())
        .await
        .unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let client_secret = "demo-apiserver-etcd-client";
    let before = env.secret(ns, client_secret).await.unwrap();
    assert!(is_signed_by(&secret_text(&before, "tls.crt"), &old.cert_pem()).unwrap());
    let old_hash = pki_hash(&env.deployment(ns, "demo").await.unwrap());
    let probe = ReadyzProbe::start(env.tenant_config(ns, "demo").await.unwrap());
    probe.answered(MINUTE).await.unwrap();

    // The owner's second step: the new CA signs, both are trusted.
    env.create_datastore_with_ca(
        "rotating",
        for_pods,
        &CertPair {
            cert_pem: bundle.clone(),
            key_pem: new.pair().key_pem,
        },
        &admin,
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    let after = loop {
        let s = env.secret(ns, client_secret).await.unwrap();
        if is_signed_by(&secret_text(&s, "tls.crt"), &new.cert_pem()).unwrap() {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the datastore client certificate was not reissued from the new CA"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(
        secret_text(&after, "ca.crt"),
        bundle,
        "--etcd-cafile trusts both CAs"
    );
    wait_rolled_out(&env, ns, "demo", 2, 4 * MINUTE, move |d| {
        pki_hash(d) != old_hash
    })
    .await
    .unwrap();
    let tenant = env.tenant_client(ns, "demo").await.unwrap();
    Api::<Namespace>::all(tenant.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "after-rotation"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    Api::<Namespace>::all(tenant)
        .get("after-rotation")
        .await
        .unwrap();
    let (ok, failed, why) = probe.stop().await;
    assert!(ok > 10, "too few polls: {ok}");
    assert_eq!(
        failed,
        0,
        "/readyz failed {failed} times (of {}) while the DataStore CA rotated: {why:#?}",
        ok + failed
    );

    // A private key of neither certificate: refused naming the field.
    let stranger = TestCa::new("stranger").unwrap();
    env.create_datastore_with_ca(
        "rotating",
        for_pods,
        &CertPair {
            cert_pem: bundle.clone(),
            key_pem: stranger.pair().key_pem,
        },
        &admin,
    )
    .await
    .unwrap();
    let kcp = env
        .wait_kcp_condition(ns, "demo", "DataStoreReady", "False", 2 * MINUTE)
        .await
        .unwrap();
    let message = condition_message(&kcp, "DataStoreReady");
    for text in [
        "DataStore rotating",
        "spec.tlsConfig.certificateAuthority",
        "none of its 2 certificates",
    ] {
        assert!(message.contains(text), "{text} not said: {message}");
    }
}
