//! The manager under stress against the real chain: a resync of healthy control planes writes
//! nothing, a passing outage of an endpoint is held back while a lasting one is reported, and
//! a manager killed at random points during provisioning neither loses nor
//! regenerates key material.

#![cfg(real_programs_as_root)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kamaji_api::KamajiControlPlane;
use kamaji_e2e::{Env, f0, secret_text, serial};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

const MINUTE: Duration = Duration::from_mins(1);

/// Waits until the manager has reconciled at least `n` times and then been quiet for 3 s.
async fn settle(env: &Env, n: f64) {
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    let mut last = -1.0;
    loop {
        let now = env.manager_metric("kamaji_reconcile_total").await;
        if now >= n && (now - last).abs() < f64::EPSILON {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the manager did not settle: {now} reconciles"
        );
        last = now;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

#[kamaji_e2e::test]
async fn a_resync_of_ten_available_control_planes_makes_no_write() {
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    for i in 0..10 {
        let ns = format!("noop-{i}");
        env.namespace(&ns).await.unwrap();
        env.apply_yaml(&f0(&ns, "demo", 1)).await.unwrap();
    }
    for i in 0..10 {
        env.wait_kcp_condition(
            &format!("noop-{i}"),
            "demo",
            "Available",
            "True",
            5 * MINUTE,
        )
        .await
        .unwrap();
    }
    settle(&env, 10.0).await;
    // A forced resync of every control plane: a new manager lists and reconciles them all.
    env.kill_manager();
    let before = env.manager_writes().unwrap().len();
    env.start_manager().unwrap();
    settle(&env, 10.0).await;
    let writes = writes_since(&env, before);
    assert!(
        writes.is_empty(),
        "a no-op resync wrote {} times: {writes:?}",
        writes.len()
    );
}

/// The manager's writes after the first `before` of the audit log, each as `verb URI body`
/// (the body where the audit policy keeps it).
fn writes_since(env: &Env, before: usize) -> Vec<String> {
    env.manager_writes()
        .unwrap()
        .into_iter()
        .skip(before)
        .map(|w| {
            let body = w.request_object.as_ref().map(ToString::to_string);
            format!(
                "{} {} {}",
                w.verb,
                w.request_u_r_i,
                body.unwrap_or_default()
            )
        })
        .collect()
}

#[kamaji_e2e::test]
async fn a_passing_outage_of_the_endpoint_is_held_back_and_a_lasting_one_reported() {
    let _serial = serial();
    let env = Env::start().await.unwrap();
    env.f0_available("blip", "demo", 1).await.unwrap();
    settle(&env, 1.0).await;
    // The load balancer in front of the endpoint closes new connections for 20 s while a pass
    // runs (an annotation starts one). The pods stay available, so the pass holds its
    // setback back: no write, and the status still says Available.
    let held = env
        .manager_metric("kamaji_status_setbacks_held_total")
        .await;
    let before = env.manager_writes().unwrap().len();
    let lb = env.management.load_balancer();
    lb.outage("blip", "demo", Duration::from_secs(20)).unwrap();
    let poke =
        |n: &str| serde_json::json!({"metadata": {"annotations": {"kamaji-rs.test/poke": n}}});
    env.patch_kcp("blip", "demo", poke("1")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(22)).await;
    settle(&env, 0.0).await;
    let writes = writes_since(&env, before);
    assert!(
        writes.is_empty(),
        "a passing outage was written: {writes:?}"
    );
    assert!(
        env.manager_metric("kamaji_status_setbacks_held_total")
            .await
            > held,
        "no pass met the outage"
    );
    let kcp = Api::<KamajiControlPlane>::namespaced(env.client(), "blip")
        .get("demo")
        .await
        .unwrap();
    assert_eq!(kcp.status.and_then(|s| s.ready), Some(true));

    // An outage that outlasts the grace (30 s) is reported, and so is its end.
    lb.outage("blip", "demo", MINUTE).unwrap();
    let started = tokio::time::Instant::now();
    env.patch_kcp("blip", "demo", poke("2")).await.unwrap();
    env.wait_kcp_condition("blip", "demo", "Available", "False", MINUTE)
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(28),
        "reported before the grace ran out: {:?}",
        started.elapsed()
    );
    env.wait_kcp_condition("blip", "demo", "Available", "True", 2 * MINUTE)
        .await
        .unwrap();
}

#[kamaji_e2e::test]
async fn a_manager_killed_at_twenty_points_provisions_five_tenants_with_their_first_keys() {
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    // Every root Secret as first seen: it must never change.
    let first: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let changed: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = {
        let (first, changed) = (first.clone(), changed.clone());
        let secrets: Api<Secret> = Api::all(env.client());
        tokio::spawn(async move {
            let stream = watcher(
                secrets,
                watcher::Config::default().labels("cluster.x-k8s.io/cluster-name"),
            )
            .applied_objects();
            futures::pin_mut!(stream);
            while let Some(Ok(s)) = stream.next().await {
                let name = format!(
                    "{}/{}",
                    s.metadata.namespace.clone().unwrap_or_default(),
                    s.metadata.name.clone().unwrap_or_default()
                );
                if !(name.ends_with("-ca") || name.ends_with("-sa") || name.ends_with("-proxy")) {
                    continue;
                }
                let material = format!(
                    "{}{}",
                    secret_text(&s, "tls.crt"),
                    secret_text(&s, "tls.key")
                );
                let mut f = first.lock().unwrap();
                match f.get(&name) {
                    Some(m) if *m != material => changed.lock().unwrap().push(name),
                    Some(_) => {}
                    None => {
                        f.insert(name, material);
                    }
                }
            }
        })
    };
    for i in 0..5 {
        let ns = format!("crash-{i}");
        env.namespace(&ns).await.unwrap();
        env.apply_yaml(&f0(&ns, "demo", 1)).await.unwrap();
    }
    // Pseudo-random kill points between 0.2 s and 2.5 s apart (seeded from the clock; the seed
    // is printed so a failing run can be told apart).
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        | 1;
    println!("kill-point seed {seed}");
    for _ in 0..20 {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        tokio::time::sleep(Duration::from_millis(200 + u64::from(seed % 2300))).await;
        env.kill_manager();
        env.start_manager().unwrap();
    }
    for i in 0..5 {
        env.wait_kcp_condition(
            &format!("crash-{i}"),
            "demo",
            "Available",
            "True",
            5 * MINUTE,
        )
        .await
        .unwrap();
    }
    recorder.abort();
    assert!(
        changed.lock().unwrap().is_empty(),
        "key material changed: {:?}",
        changed.lock().unwrap()
    );
    let seen = first.lock().unwrap().clone();
    for i in 0..5 {
        for suffix in ["ca", "sa", "proxy"] {
            let name = format!("crash-{i}/demo-{suffix}");
            let now = env
                .secret(&format!("crash-{i}"), &format!("demo-{suffix}"))
                .await
                .unwrap();
            assert_eq!(
                seen.get(&name),
                Some(&format!(
                    "{}{}",
                    secret_text(&now, "tls.crt"),
                    secret_text(&now, "tls.key")
                )),
                "{name}"
            );
        }
    }
}

#[kamaji_e2e::test]
async fn with_leader_election_one_manager_reconciles_and_another_takes_over() {
    let _serial = serial();
    let mut env = Env::start().await.unwrap();
    env.kill_manager();
    // The Lease lives in the provider namespace, where the shipped Role allows it.
    let lease_ns = format!(
        "--leader-election-namespace={}",
        env.manager_identity().namespace
    );
    let flags = ["--leader-elect", lease_ns.as_str()];
    let mut a = Some(
        env.spawn_manager(kamaji_testenv::free_port().unwrap(), &flags)
            .unwrap(),
    );
    let mut b = Some(
        env.spawn_manager(kamaji_testenv::free_port().unwrap(), &flags)
            .unwrap(),
    );
    env.namespace("le-1").await.unwrap();
    env.apply_yaml(&f0("le-1", "demo", 1)).await.unwrap();
    env.wait_kcp_condition("le-1", "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let leads = |m: &Option<kamaji_testenv::Supervised>| {
        m.as_ref().is_some_and(|m| {
            std::fs::read_to_string(m.log_path())
                .unwrap_or_default()
                .contains("became leader")
        })
    };
    assert!(leads(&a) ^ leads(&b), "exactly one manager leads");
    // The leader crashes; the other one takes the Lease over and provisions the next tenant.
    let leader = if leads(&a) { &mut a } else { &mut b };
    leader.take().unwrap().kill();
    env.namespace("le-2").await.unwrap();
    env.apply_yaml(&f0("le-2", "demo", 1)).await.unwrap();
    env.wait_kcp_condition("le-2", "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    assert!(leads(&a) || leads(&b), "the standby became leader");
}
