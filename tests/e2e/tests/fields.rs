//! Every accepted field does what it says (issue 14), against the real chain: each test
//! changes a field of a running control plane and reads what it must have changed, in the
//! management cluster or in the tenant.

#![cfg(real_programs_as_root)]

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::Role;
use kamaji_e2e::{Env, F0, condition_message, serial};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, Resource, ResourceExt as _};

const MINUTE: Duration = Duration::from_mins(1);

/// Waits until `present(obj)` holds for `kube-system/name` in the tenant (`None`: absent).
async fn wait_tenant<K>(
    tenant: &Client,
    name: &str,
    what: &str,
    cond: impl Fn(Option<&K>) -> bool + Send + 'static,
) where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(tenant.clone(), "kube-system");
    let ok = tokio::time::timeout(2 * MINUTE, await_condition(api.clone(), name, cond)).await;
    assert!(
        matches!(ok, Ok(Ok(_))),
        "kube-system {} {name}: {what} not reached; now {:?}",
        K::kind(&()),
        api.get_opt(name)
            .await
            .ok()
            .flatten()
            .map(|o| o.meta().clone())
    );
}

/// Waits until `kube-system/name` is absent from the tenant.
async fn absent<K>(tenant: &Client, name: &str, what: &str)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    wait_tenant::<K>(tenant, name, what, |o| o.is_none()).await;
}

/// Waits until `demo` of `api` exists and returns it.
async fn created<K>(env: &Env, api: Api<K>, kind: &str) -> K
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    env.wait_for(
        api,
        kind,
        "demo",
        "created",
        2 * MINUTE,
        |_| true,
        |k: &K| format!("{k:?}"),
    )
    .await
    .unwrap()
}

/// The metadata an exposure object (Ingress, TLSRoute) carries for `extraLabels: {team: a}`
/// and `extraAnnotations: {example.com/owner: team-a}`: those, and the KamajiControlPlane as
/// its controller.
fn assert_exposure_metadata(meta: &kube::api::ObjectMeta) {
    let labels = meta.labels.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        annotations.get("example.com/owner").map(String::as_str),
        Some("team-a")
    );
    let owner = &meta.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("KamajiControlPlane", Some(true))
    );
}

/// Deletes the Cluster `ns/demo` and waits until `demo` of `api` is gone with it.
async fn removed_with_the_tenant<K>(env: &Env, ns: &str, api: Api<K>, kind: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    env.capi(ns, "v1beta2", "Cluster")
        .delete("demo", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let gone = tokio::time::timeout(
        3 * MINUTE,
        await_condition(api, "demo", |k: Option<&K>| k.is_none()),
    )
    .await;
    assert!(matches!(gone, Ok(Ok(_))), "the {kind} outlived its tenant");
}

/// `spec.addons` as declared: a tenant without addons has neither kube-proxy nor CoreDNS;
/// declaring kube-proxy with an image override installs it with that image; a new
/// `kubeProxy.mode` changes the DaemonSet's pod template (its configuration hash); removing the
/// declaration removes every object kamaji-rs applied for it, and keeps an object of the same
/// kind and name space a user created for an addon kamaji-rs never installed.
#[kamaji_e2e::test(shared)]
async fn addons_are_installed_as_declared_and_removed_with_their_declaration(env: &Env) {
    let ns = "addons";
    env.namespace(ns).await.unwrap();
    env.apply_yaml(&F0::new(ns, "demo").replicas(1).yaml())
        .await
        .unwrap();
    let kcp = env
        .wait_kcp_condition(ns, "demo", "TenantBootstrapped", "True", 4 * MINUTE)
        .await
        .unwrap();
    let message = condition_message(&kcp, "TenantBootstrapped");
    assert!(
        !message.contains("kube-proxy") && !message.contains("CoreDNS"),
        "{message}"
    );
    let tenant = env.tenant_client(ns, "demo").await.unwrap();
    absent::<DaemonSet>(&tenant, "kube-proxy", "absent").await;
    absent::<ConfigMap>(&tenant, "kube-proxy", "absent").await;
    absent::<Deployment>(&tenant, "coredns", "absent").await;
    absent::<Service>(&tenant, "kube-dns", "absent").await;

    // A user's own CoreDNS configuration, with the name kubeadm's would have.
    let users: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "coredns", "namespace": "kube-system"},
        "data": {"Corefile": ".:53 { forward . 192.0.2.53 }"},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(tenant.clone(), "kube-system")
        .create(&PostParams::default(), &users)
        .await
        .unwrap();

    // Declared, with an image override: installed with that image.
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"spec": {"addons": {"kubeProxy": {
            "imageRepository": "mirror.example.com/kube-proxy", "imageTag": "v1.36.3-mirror"}}}}),
    )
    .await
    .unwrap();
    wait_tenant::<DaemonSet>(&tenant, "kube-proxy", "installed with the override", |d| {
        d.and_then(|d| d.spec.as_ref())
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|p| {
                p.containers[0].image.as_deref()
                    == Some("mirror.example.com/kube-proxy:v1.36.3-mirror")
            })
    })
    .await;
    wait_tenant::<ConfigMap>(&tenant, "kube-proxy", "present", |c| c.is_some()).await;
    wait_tenant::<Role>(&tenant, "kube-proxy", "present", |r| r.is_some()).await;
    // A new mode rolls the DaemonSet: its pod template's configuration hash changes.
    let config_hash = |d: &DaemonSet| -> Option<String> {
        let template = &d.spec.as_ref()?.template;
        let annotations = template.metadata.as_ref()?.annotations.as_ref()?;
        annotations
            .get(kamaji_bootstrap::kubeadm::addons::KUBE_PROXY_CONFIG_HASH_ANNOTATION)
            .cloned()
    };
    let before = config_hash(
        &Api::<DaemonSet>::namespaced(tenant.clone(), "kube-system")
            .get("kube-proxy")
            .await
            .unwrap(),
    )
    .expect("the kube-proxy pod template carries its configuration hash");
    env.patch_kcp(
        ns,
        "demo",
        serde_json::json!({"spec": {"addons": {"kubeProxy": {"mode": "ipvs"}}}}),
    )
    .await
    .unwrap();
    wait_tenant::<DaemonSet>(
        &tenant,
        "kube-proxy",
        "a new configuration hash",
        move |d| d.and_then(config_hash).is_some_and(|h| h != before),
    )
    .await;
    wait_tenant::<ConfigMap>(&tenant, "kube-proxy", "mode ipvs", |c| {
        c.and_then(|c| c.data.as_ref())
            .is_some_and(|d| d["config.conf"].contains("mode: ipvs"))
    })
    .await;
    // CoreDNS is still not declared: nothing of it.
    absent::<Deployment>(&tenant, "coredns", "absent").await;

    // An object as an earlier kamaji-rs applied it (without the installed annotation, when
    // kube-proxy was installed whatever spec.addons said): a manager upgrade must not delete it.
    let accounts = Api::<ServiceAccount>::namespaced(tenant.clone(), "kube-system");
    accounts
        .patch(
            "kube-proxy",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                kamaji_api::meta::TENANT_INSTALLED_ANNOTATION: null}}})),
        )
        .await
        .unwrap();

    // The declaration removed: what kamaji-rs applied for kube-proxy goes, the user's stays.
    env.patch_kcp(ns, "demo", serde_json::json!({"spec": {"addons": null}}))
        .await
        .unwrap();
    absent::<DaemonSet>(&tenant, "kube-proxy", "removed").await;
    absent::<ConfigMap>(&tenant, "kube-proxy", "removed").await;
    absent::<Role>(&tenant, "kube-proxy", "removed").await;
    let kept = Api::<ConfigMap>::namespaced(tenant.clone(), "kube-system")
        .get("coredns")
        .await
        .unwrap();
    assert_eq!(kept.data, users.data, "the user's ConfigMap was changed");
    assert!(
        accounts.get_opt("kube-proxy").await.unwrap().is_some(),
        "an object applied without the installed annotation was deleted"
    );
    // The status of the pass that removed it (not the one before) says so.
    env.wait_kcp(ns, "demo", "bootstrapped without kube-proxy", MINUTE, |k| {
        k.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "TenantBootstrapped"))
            .is_some_and(|c| c.status == "True" && !c.message.contains("kube-proxy"))
    })
    .await
    .unwrap();
}

/// `network.advertiseAddress`: kube-apiserver advertises it (`--advertise-address`), so the
/// tenant's `kubernetes` Service endpoints carry it, and the serving certificate names it.
#[kamaji_e2e::test(shared)]
async fn network_advertise_address_is_what_the_api_server_advertises(env: &Env) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kamaji_bootstrap::pki::inspect::CertificateInfo;
    let ns = "advertise";
    let advertised = "192.0.2.44";
    env.namespace(ns).await.unwrap();
    let yaml = F0::new(ns, "demo")
        .replicas(1)
        .network(&format!(
            "serviceType: LoadBalancer, advertiseAddress: {advertised}"
        ))
        .yaml();
    env.apply_yaml(&yaml).await.unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let args = env
        .container_args(ns, "demo", "kube-apiserver")
        .await
        .unwrap();
    assert!(
        args.contains(&format!("--advertise-address={advertised}")),
        "{args:?}"
    );
    let tenant = env.tenant_client(ns, "demo").await.unwrap();
    let slice = tokio::time::timeout(
        MINUTE,
        await_condition(
            Api::<EndpointSlice>::namespaced(tenant, "default"),
            "kubernetes",
            move |s: Option<&EndpointSlice>| {
                s.is_some_and(|s| {
                    s.endpoints
                        .iter()
                        .any(|e| e.addresses.iter().any(|a| a == advertised))
                })
            },
        ),
    )
    .await;
    assert!(
        matches!(slice, Ok(Ok(_))),
        "the kubernetes EndpointSlice never carried {advertised}"
    );
    let cert = CertificateInfo::from_pem(&kamaji_e2e::secret_text(
        &env.secret(ns, "demo-apiserver.tls").await.unwrap(),
        "tls.crt",
    ))
    .unwrap();
    assert!(
        cert.ip_addresses
            .contains(&advertised.parse::<std::net::IpAddr>().unwrap()),
        "{:?}",
        cert.ip_addresses
    );
}

/// `network.ingress`: an Ingress named like the Service, of the given class, with the extra
/// labels and annotations and TLS passthrough, routing the host to the API server port; the
/// host (port 443) is the endpoint; deleting the cluster removes the Ingress. (B04 routes a
/// node's traffic through it.)
#[kamaji_e2e::test(shared)]
async fn network_ingress_becomes_an_ingress_of_the_control_plane(env: &Env) {
    use k8s_openapi::api::networking::v1::Ingress;
    let ns = "ingress";
    let host = "api.ingress.example.com";
    env.namespace(ns).await.unwrap();
    let yaml = F0::new(ns, "demo")
        .replicas(1)
        .network(&format!(
            "serviceType: ClusterIP, ingress: {{hostname: {host}, className: nginx, \
             extraLabels: {{team: a}}, extraAnnotations: {{example.com/owner: team-a}}}}"
        ))
        .yaml();
    env.apply_yaml(&yaml).await.unwrap();
    let ingresses: Api<Ingress> = Api::namespaced(env.client(), ns);
    let ingress = created(env, ingresses.clone(), "Ingress").await;
    assert_exposure_metadata(&ingress.metadata);
    assert_eq!(
        ingress
            .annotations()
            .get("nginx.ingress.kubernetes.io/ssl-passthrough")
            .map(String::as_str),
        Some("true")
    );
    let spec = ingress.spec.clone().unwrap();
    assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
    let rule = &spec.rules.unwrap()[0];
    assert_eq!(rule.host.as_deref(), Some(host));
    let backend = rule.http.clone().unwrap().paths[0]
        .backend
        .service
        .clone()
        .unwrap();
    assert!(
        Api::<Service>::namespaced(env.client(), ns)
            .get_opt(&backend.name)
            .await
            .unwrap()
            .is_some(),
        "the backend is the control plane's Service"
    );
    assert_eq!(backend.port.unwrap().number, Some(6443));
    let kcp = env
        .wait_for(
            Api::<kamaji_api::KamajiControlPlane>::namespaced(env.client(), ns),
            "KamajiControlPlane",
            "demo",
            "the endpoint written",
            MINUTE,
            |k| k.spec.control_plane_endpoint.is_some(),
            |k| format!("{:?}", k.spec.control_plane_endpoint),
        )
        .await
        .unwrap();
    let ep = kcp.spec.control_plane_endpoint.unwrap();
    assert_eq!((ep.host.as_deref(), ep.port), (Some(host), Some(443)));
    removed_with_the_tenant(env, ns, ingresses, "Ingress").await;
}

/// What the schema accepts but kamaji-rs cannot do as asked is refused by name, with nothing
/// created: a konnectivity server port the API server already has, then (once the DataStore is
/// read) `kine` on an etcd DataStore. Removing the fields lets the same control plane come up.
#[kamaji_e2e::test(shared)]
async fn fields_not_supported_yet_are_refused_by_name_and_nothing_is_created(env: &Env) {
    let ns = "refused";
    env.namespace(ns).await.unwrap();
    let yaml = F0::new(ns, "demo")
        .replicas(1)
        .spec("  addons: {konnectivity: {server: {port: 6443}}}\n  kine: {extraArgs: [--debug]}\n")
        .yaml();
    env.apply_yaml(&yaml).await.unwrap();
    let kcp = env
        .wait_kcp_condition(ns, "demo", "SpecValid", "False", 2 * MINUTE)
        .await
        .unwrap();
    let message = condition_message(&kcp, "SpecValid");
    assert!(
        message.contains("spec.addons.konnectivity.server.port"),
        "the port not named: {message}"
    );
    // `kine` is refused once the DataStore is read: it is etcd.
    env.patch_kcp(ns, "demo", serde_json::json!({"spec": {"addons": null}}))
        .await
        .unwrap();
    let kcp = env
        .wait_kcp(
            ns,
            "demo",
            "SpecValid=False naming spec.kine",
            2 * MINUTE,
            |k| {
                let m = condition_message(k, "SpecValid");
                m.contains("spec.kine") && m.contains("is etcd")
            },
        )
        .await
        .unwrap();
    let message = condition_message(&kcp, "SpecValid");
    assert!(!message.contains("konnectivity"), "{message}");
    for (kind, found) in [
        (
            "Deployment",
            Api::<Deployment>::namespaced(env.client(), ns)
                .list(&kube::api::ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
        ),
        (
            "Service",
            Api::<Service>::namespaced(env.client(), ns)
                .list(&kube::api::ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
        ),
    ] {
        assert_eq!(found, 0, "a {kind} was created for a refused spec");
    }
    // The fields removed: it comes up.
    env.patch_kcp(ns, "demo", serde_json::json!({"spec": {"kine": null}}))
        .await
        .unwrap();
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
}

/// `network.gateway`: a TLSRoute named like the Service, owned by the control plane,
/// attached to the Gateway's listener, matching the host, to the API server port of the
/// Service, with the extra labels and annotations; the host (port 443) is the endpoint. A
/// stand-in plays the Gateway's data path as the route says, and the tenant becomes Available
/// through it; deleting the cluster removes the route.
#[kamaji_e2e::test]
async fn network_gateway_becomes_a_tls_route_of_the_control_plane() {
    use kamaji_reconciler::gateway_api::TlsRoute;
    let _serial = serial();
    let mut env = Env::builder().gateway_api(true).start().await.unwrap();
    let ns = "gateway";
    let host = "api.gateway.example.com";
    let gateway_ip: std::net::IpAddr = format!("127.56.{}.1", std::process::id() % 250)
        .parse()
        .unwrap();
    env.resolve_for_manager(host, gateway_ip).unwrap();
    env.namespace(ns).await.unwrap();
    let yaml = F0::new(ns, "demo")
        .replicas(1)
        .network(&format!(
            "serviceType: ClusterIP, gateway: {{name: gw, namespace: gateways, \
             hostname: {host}, sectionName: tls, extraLabels: {{team: a}}, \
             extraAnnotations: {{example.com/owner: team-a}}}}"
        ))
        .yaml();
    env.apply_yaml(&yaml).await.unwrap();
    let routes: Api<TlsRoute> = Api::namespaced(env.client(), ns);
    let route = created(&env, routes.clone(), "TLSRoute").await;
    assert_exposure_metadata(&route.metadata);
    assert_eq!(route.spec.hostnames, vec![host.to_owned()]);
    let parent = &route.spec.parent_refs.clone().unwrap()[0];
    assert_eq!(
        (
            parent.name.as_str(),
            parent.namespace.as_deref(),
            parent.section_name.as_deref()
        ),
        ("gw", Some("gateways"), Some("tls"))
    );
    // The Gateway's data path, as the route says.
    let backend = route.spec.rules[0].backend_refs[0].clone();
    let services: Api<Service> = Api::namespaced(env.client(), ns);
    let service = env
        .wait_for(
            services,
            "Service",
            &backend.name,
            "a ClusterIP",
            MINUTE,
            |s: &Service| {
                s.spec
                    .as_ref()
                    .and_then(|s| s.cluster_ip.as_ref())
                    .is_some()
            },
            |s: &Service| format!("{:?}", s.spec),
        )
        .await
        .unwrap();
    let cluster_ip: std::net::IpAddr = service.spec.unwrap().cluster_ip.unwrap().parse().unwrap();
    let port = u16::try_from(backend.port.unwrap()).unwrap();
    let _gateway =
        kamaji_e2e::standins::tls_passthrough((gateway_ip, 443).into(), (cluster_ip, port).into());
    let kcp = env
        .wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let ep = kcp.spec.control_plane_endpoint.unwrap();
    assert_eq!((ep.host.as_deref(), ep.port), (Some(host), Some(443)));
    removed_with_the_tenant(&env, ns, routes, "TLSRoute").await;
}

/// `network.gateway` where the Gateway API is not installed: the pass fails with a message
/// that names the field and the CRD it needs (`Reconciled=False`), and nothing is served.
#[kamaji_e2e::test(shared)]
async fn network_gateway_without_the_gateway_api_says_which_crd_is_missing(env: &Env) {
    let ns = "no-gateway-api";
    env.namespace(ns).await.unwrap();
    let yaml = F0::new(ns, "demo")
        .replicas(1)
        .network(
            "serviceType: ClusterIP, gateway: {name: gw, namespace: gateways, \
             hostname: api.nogw.example.com}",
        )
        .yaml();
    env.apply_yaml(&yaml).await.unwrap();
    let kcp = env
        .wait_kcp_condition(ns, "demo", "Reconciled", "False", 2 * MINUTE)
        .await
        .unwrap();
    let message = condition_message(&kcp, "Reconciled");
    assert!(
        message.contains("spec.network.gateway") && message.contains("TLSRoute CRD"),
        "{message}"
    );
}

/// The number of keys below `prefix` in the etcd `ds` (read with its admin certificate).
async fn keys(ds: &kamaji_reconciler::datastore::Resolved, prefix: &str) -> u64 {
    kamaji_e2e::datastore::keys_under(ds, prefix).await
}

/// `dataStoreOverrides`: `/events` kept in a second etcd (its server certificate from the same
/// CA) becomes kube-apiserver's `--etcd-servers-overrides`; an Event created through the tenant
/// API lands there under the tenant's prefix and not in the control plane's DataStore, which
/// keeps everything else. A DataStore with another CA is refused naming the entry
/// (`DataStoreReady=False`, nothing created) until it is fixed, which wakes the control plane
/// through the DataStore watch. Deleting the tenant empties its prefix in both etcds.
#[kamaji_e2e::test(shared)]
#[allow(clippy::too_many_lines)] // one story: override, refusal, fix, deletion
async fn data_store_overrides_keep_events_in_another_etcd_with_the_same_ca(env: &Env) {
    use k8s_openapi::api::core::v1::{Event, Namespace};
    use kamaji_api::KamajiControlPlane;
    use kamaji_e2e::datastore::{datastore_admin, datastore_admin_at, etcd_prefix};
    let (events_etcd, events_for_pods) = env
        .start_datastore_sharing_the_ca("datastore-events")
        .await
        .unwrap();
    env.create_datastore("events", events_for_pods)
        .await
        .unwrap();
    // The same etcd, registered with another CA: kube-apiserver could not use it.
    let other = kamaji_testenv::pki::TestCa::new("other-ca").unwrap();
    let other_client = other.client("datastore-admin", &[]).unwrap();
    env.create_datastore_with_ca("other-ca", events_for_pods, &other.pair(), &other_client)
        .await
        .unwrap();
    let (ns, refused_ns) = ("overrides", "overrides-refused");
    for (namespace, datastore) in [(ns, "events"), (refused_ns, "other-ca")] {
        env.namespace(namespace).await.unwrap();
        let yaml = F0::new(namespace, "demo")
            .replicas(1)
            .spec(&format!(
                "  dataStoreOverrides: [{{resource: /events, dataStore: {datastore}}}]\n"
            ))
            .yaml();
        env.apply_yaml(&yaml).await.unwrap();
    }

    // Another CA: refused by name, nothing created.
    let kcp = env
        .wait_kcp_condition(refused_ns, "demo", "DataStoreReady", "False", 2 * MINUTE)
        .await
        .unwrap();
    let message = condition_message(&kcp, "DataStoreReady");
    for text in [
        "spec.dataStoreOverrides[0].dataStore",
        "DataStore other-ca",
        "same CA certificate",
    ] {
        assert!(message.contains(text), "{text} not said: {message}");
    }
    assert!(
        Api::<Deployment>::namespaced(env.client(), refused_ns)
            .get_opt("demo")
            .await
            .unwrap()
            .is_none(),
        "a Deployment was created for a refused override"
    );

    // The same CA: the flag, and the events in the second etcd only.
    env.wait_kcp_condition(ns, "demo", "Available", "True", 4 * MINUTE)
        .await
        .unwrap();
    let args = env
        .container_args(ns, "demo", "kube-apiserver")
        .await
        .unwrap();
    let flag = format!("--etcd-servers-overrides=/events#https://{events_for_pods}");
    assert!(args.contains(&flag), "{flag} not in {args:?}");
    let tenant = env.tenant_client(ns, "demo").await.unwrap();
    let probe = "override-probe";
    Api::<Namespace>::all(tenant.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": probe}})).unwrap(),
        )
        .await
        .unwrap();
    let event: Event = serde_json::from_value(serde_json::json!({
        "metadata": {"name": probe, "namespace": probe},
        "involvedObject": {"apiVersion": "v1", "kind": "ServiceAccount", "name": "default",
            "namespace": probe},
        "reason": "Probe", "message": "kept by DataStore events", "type": "Normal",
    }))
    .unwrap();
    Api::<Event>::namespaced(tenant.clone(), probe)
        .create(&PostParams::default(), &event)
        .await
        .unwrap();
    let prefix = etcd_prefix(env, ns, "demo").await;
    let primary = datastore_admin(env);
    let events = datastore_admin_at(env, events_etcd.url());
    assert_eq!(
        keys(&events, &format!("{prefix}/events/{probe}")).await,
        1,
        "the Event is not in the events etcd"
    );
    assert_eq!(
        keys(&primary, &format!("{prefix}/events")).await,
        0,
        "events in the control plane's DataStore"
    );
    // Everything else stays in the control plane's DataStore.
    assert!(keys(&primary, &format!("{prefix}/namespaces")).await > 0);
    assert_eq!(
        keys(&events, &format!("{prefix}/namespaces")).await,
        0,
        "namespaces in the events etcd"
    );

    // The DataStore fixed: its watch wakes the refused control plane.
    env.create_datastore("other-ca", events_for_pods)
        .await
        .unwrap();
    env.wait_kcp_condition(refused_ns, "demo", "DataStoreReady", "True", 2 * MINUTE)
        .await
        .unwrap();
    env.capi(refused_ns, "v1beta2", "Cluster")
        .delete("demo", &kube::api::DeleteParams::default())
        .await
        .unwrap();

    // Deletion forgets: the prefix is empty in both etcds.
    removed_with_the_tenant(
        env,
        ns,
        Api::<KamajiControlPlane>::namespaced(env.client(), ns),
        "KamajiControlPlane",
    )
    .await;
    assert_eq!(
        keys(&events, &prefix).await,
        0,
        "keys left in the events etcd"
    );
    assert_eq!(
        keys(&primary, &prefix).await,
        0,
        "keys left in the control plane's etcd"
    );
    // The refused tenant's deletion, done while the events etcd (this test's) still runs.
    let refused = Api::<KamajiControlPlane>::namespaced(env.client(), refused_ns);
    let deadline = tokio::time::Instant::now() + 2 * MINUTE;
    while refused.get_opt("demo").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refused tenant is not deleted"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
