//! Controller wiring: watch KamajiControlPlanes and what they own, map Clusters and DataStores
//! to the control planes they concern, reconcile with per-object backoff.
//!
//! Watches, not polling (style.md pattern 6): owned Secrets, Deployments and Services wake
//! their KamajiControlPlane; a Cluster wakes the control plane its `controlPlaneRef` names; a
//! DataStore wakes every control plane that uses it (as its own or in `dataStoreOverrides`).
//! A timed requeue is used only for state that produces no event (a tenant API server
//! becoming reachable through its endpoint, and a long resync for drift inside tenants).

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kamaji_api::cluster::{ClusterView, v1beta2};
use kamaji_api::meta::{CLUSTER_NAME_LABEL, KAMAJI_NAME_LABEL};
use kamaji_api::{DataStore, KamajiControlPlane};
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, reflector, watcher};
use tracing::{info, warn};

use crate::context::Context;
use crate::error::Error;
use crate::lean::{self, Lean};
use crate::reconcile::gates::control_plane_of;
use crate::reconcile::kcp::object_key;
use crate::reconcile::{self, validate};
use crate::replicas::DeploymentView;

/// The label Cluster API's `--watch-filter` convention selects on: a manager started with
/// `--watch-filter=<value>` reconciles only Clusters and KamajiControlPlanes labelled
/// `cluster.x-k8s.io/watch-filter: <value>`.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// Which control planes the controller watches: `--namespace` (clusterctl contract) and
/// `--watch-filter` (Cluster API's label convention).
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// One namespace, or all when `None`.
    pub namespace: Option<String>,
    /// Only objects with [`WATCH_FILTER_LABEL`] set to this value, or all when `None`.
    pub watch_filter: Option<String>,
}

impl Scope {
    fn api<K>(&self, client: &kube::Client) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }

    /// The watch of the filtered kinds (KamajiControlPlanes and Clusters).
    fn filtered(&self) -> watcher::Config {
        match &self.watch_filter {
            Some(value) => {
                watcher::Config::default().labels(&format!("{WATCH_FILTER_LABEL}={value}"))
            }
            None => watcher::Config::default(),
        }
    }
}

/// The watch of `api` filling the cache `writer` writes, its objects parsed without
/// `metadata.managedFields` ([`Lean`]: passes never read them, and with them a cached object
/// is about twice the size and each list page parses into a tree of maps per object): the
/// objects applied, for a controller's trigger.
fn cached<K>(
    writer: reflector::store::Writer<K>,
    api: Api<Lean<K>>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<K, watcher::Error>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let watch = watcher(api, config).map_ok(lean::event).default_backoff();
    reflector(writer, watch).applied_objects()
}

/// The watch of the objects of kind `K` that control planes own, their metadata only (owner
/// references are all it needs: neither the initial list nor an event carries a Secret's data
/// or a Deployment's spec into this process) and that without `managedFields` ([`Lean`]),
/// for the controller's `owns_stream`. A change event of a version a pass of this process
/// wrote, or read and verified, wakes no pass, and one arriving while its control plane's pass
/// runs is held for that pass to decide ([`crate::memory::Memory::owned_event_skipped`]);
/// deletions and the initial list always wake their owner.
fn owned<K>(
    ctx: Arc<Context>,
    api: Api<Lean<PartialObjectMeta<K>>>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    PartialObjectMeta<K>: serde::de::DeserializeOwned,
{
    watcher(api, config)
        .map_ok(lean::event)
        .filter(move |event| {
            let skip = matches!(event, Ok(watcher::Event::Apply(o)) if ctx.memory().owned_event_skipped(&o.metadata));
            futures::future::ready(!skip)
        })
        .touched_objects()
}

/// A control-plane Deployment as the controller's watch parses it: its metadata (without
/// `managedFields`, [`Lean`]), `spec.replicas` and status, what [`DeploymentView`] needs. The
/// parser skips the rest of the spec (the pod template, most of the object) without building
/// it.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct WatchedDeployment {
    /// `metadata`.
    pub metadata: ObjectMeta,
    /// `spec.replicas`.
    #[serde(default)]
    pub spec: Option<WatchedDeploymentSpec>,
    /// `status`.
    #[serde(default)]
    pub status: Option<k8s_openapi::api::apps::v1::DeploymentStatus>,
}

/// The part of a Deployment's spec [`WatchedDeployment`] keeps.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct WatchedDeploymentSpec {
    /// `spec.replicas`.
    #[serde(default)]
    pub replicas: Option<i32>,
}

impl WatchedDeployment {
    /// What a pass reads of this Deployment.
    #[must_use]
    pub fn view(&self) -> DeploymentView {
        DeploymentView::of_parts(
            &self.metadata,
            self.spec.as_ref().and_then(|s| s.replicas),
            self.status.as_ref(),
        )
    }
}

impl kube::Resource for WatchedDeployment {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind((): &()) -> std::borrow::Cow<'_, str> {
        <Deployment as kube::Resource>::kind(&())
    }

    fn group((): &()) -> std::borrow::Cow<'_, str> {
        <Deployment as kube::Resource>::group(&())
    }

    fn version((): &()) -> std::borrow::Cow<'_, str> {
        <Deployment as kube::Resource>::version(&())
    }

    fn plural((): &()) -> std::borrow::Cow<'_, str> {
        <Deployment as kube::Resource>::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// How many Deployments one page of the Deployment watch's initial list holds. Each arrives
/// whole (the pod template and the managed fields too, about 17 KiB), and a page is read in
/// full before it is parsed: at kube-runtime's 500 a restarted manager's peak RSS at 1,000
/// tenants rose by about 10 MiB.
const DEPLOYMENT_LIST_PAGE: u32 = 50;

/// The watch of control-plane Deployments ([`WatchedDeployment`]) for the controller's
/// `owns_stream`: as [`owned`], and a change event showing nothing a pass reads that its
/// control plane's last pass did not see wakes no pass either (the Deployment controller's
/// status writes that change no counter a pass acts on;
/// [`crate::memory::Memory::deployment_event_skipped`]).
fn owned_deployments(
    ctx: Arc<Context>,
    api: Api<Lean<WatchedDeployment>>,
    config: watcher::Config,
) -> impl futures::Stream<Item = Result<WatchedDeployment, watcher::Error>> {
    watcher(api, config)
        .map_ok(lean::event)
        .filter(move |event| {
            let skip = match event {
                Ok(watcher::Event::Apply(d)) => unchanged_deployment(&ctx, d),
                _ => false,
            };
            futures::future::ready(!skip)
        })
        .touched_objects()
}

/// Whether the change event of the control-plane Deployment `d` needs no pass now: a version
/// this process wrote or verified, one held while its owner's pass runs, or one showing
/// nothing the owner's last pass did not see.
fn unchanged_deployment(ctx: &Context, d: &WatchedDeployment) -> bool {
    ctx.memory()
        .deployment_event_skipped(&d.metadata, &d.view())
}

/// A hash of what a pass of the control plane reads of `cluster` ([`ClusterView`], and whether
/// it is being deleted): the Cluster watch wakes a control plane only when it changes.
///
/// `own` is the control plane's `spec.controlPlaneEndpoint` (host, port) when it has one. A
/// Cluster endpoint equal to it hashes as no endpoint: Cluster API copying the endpoint a
/// pass wrote on the control plane into the Cluster leaves the preset endpoint a pass reads
/// (host and port) as it was, so it wakes no pass.
#[allow(clippy::unnecessary_wraps)] // the shape of a kube-runtime predicate
fn cluster_inputs(cluster: &v1beta2::Cluster, own: Option<&(String, i32)>) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut view = ClusterView::from(cluster);
    if view.control_plane_endpoint.as_ref() == own {
        view.control_plane_endpoint = None;
    }
    view.hash(&mut hasher);
    cluster
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// The `spec.controlPlaneEndpoint` (host, port) of the control plane `cluster` names, from the
/// control planes' watch cache, when set.
fn own_endpoint(
    store: &Store<KamajiControlPlane>,
    cluster: &v1beta2::Cluster,
) -> Option<(String, i32)> {
    let kcp = store.get(&control_plane_of(cluster)?)?;
    let e = kcp.spec.control_plane_endpoint.as_ref()?;
    Some((
        e.host.clone().filter(|h| !h.is_empty())?,
        e.port.filter(|p| *p != 0)?,
    ))
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime's Controller::run expects
fn error_policy(kcp: Arc<KamajiControlPlane>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics()
        .errors
        .get_or_create(&crate::metrics::ErrorLabels {
            error: error.category().into(),
        })
        .inc();
    let delay = ctx.errors().next(&object_key(&kcp));
    warn!(kcp = %object_key(&kcp), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// The control planes that use DataStore `name` (by `dataStoreName`, or the default, or in
/// `dataStoreOverrides`).
fn users_of(
    store: &Store<KamajiControlPlane>,
    name: &str,
    default: &str,
) -> Vec<ObjectRef<KamajiControlPlane>> {
    store
        .state()
        .iter()
        .filter(|k| validate::datastore_names(k, default).contains(&name))
        .map(|k| ObjectRef::from_obj(k.as_ref()))
        .collect()
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // Owned objects and DataStores wake only control planes in the store, so filtering the
    // control planes (and the Clusters that map to them) is the whole split.
    let (store, kcp_writer) = reflector::store();
    let controller = Controller::for_stream(triggers(&ctx, &scope, kcp_writer), store.clone());
    // Clusters and DataStores are read by every pass: from these watch caches (the watches
    // that wake their control planes fill them), not from the API server each time.
    let (clusters, cluster_writer) = reflector::store();
    let (datastores, datastore_writer) = reflector::store();
    ctx.set_caches(store.clone(), clusters, datastores);
    let controller = watch_owned(controller, &ctx, &scope);
    let controller = watch_clusters(controller, &ctx, &scope, store.clone(), cluster_writer);
    watch_datastores(controller, &ctx, store, datastore_writer)
        .with_config(
            controller::Config::default()
                .concurrency(ctx.config().concurrency)
                .debounce(ctx.config().debounce),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(kcp = %obj, "reconciled"),
                Err(e) => tracing::debug!("controller: {e}"),
            }
        })
        .await;
    info!("controller stopped");
}

/// The controller's trigger: the watch of the control planes in `scope` filling the cache
/// `writer` writes. A version a pass of this process left with its own writes, and accounted
/// for, or one its own later write replaced, wakes no pass (the cache still takes it); every
/// other input of that pass has events of its own.
fn triggers(
    ctx: &Arc<Context>,
    scope: &Scope,
    writer: reflector::store::Writer<KamajiControlPlane>,
) -> impl futures::Stream<Item = Result<KamajiControlPlane, watcher::Error>> + use<> {
    let kcps: Api<Lean<KamajiControlPlane>> = scope.api(ctx.client());
    let own = Arc::clone(ctx);
    cached(writer, kcps, scope.filtered()).filter(move |event| {
        let skip = matches!(event, Ok(kcp) if own.memory().control_plane_event_skipped(kcp));
        futures::future::ready(!skip)
    })
}

/// `controller` watching what control planes own (Secrets, Deployments, Services, Ingresses):
/// each wakes only its owner, and not with the versions its passes wrote.
fn watch_owned(
    controller: Controller<KamajiControlPlane>,
    ctx: &Arc<Context>,
    scope: &Scope,
) -> Controller<KamajiControlPlane> {
    let client = ctx.client();
    let labelled = watcher::Config::default().labels(KAMAJI_NAME_LABEL);
    let secrets_cfg = watcher::Config::default().labels(CLUSTER_NAME_LABEL);
    controller
        .owns_stream(owned::<Secret>(
            Arc::clone(ctx),
            scope.api(client),
            secrets_cfg,
        ))
        .owns_stream(owned_deployments(
            Arc::clone(ctx),
            scope.api(client),
            labelled.clone().page_size(DEPLOYMENT_LIST_PAGE),
        ))
        .owns_stream(owned::<Service>(
            Arc::clone(ctx),
            scope.api(client),
            labelled.clone(),
        ))
        .owns_stream(owned::<Ingress>(
            Arc::clone(ctx),
            scope.api(client),
            labelled,
        ))
}

/// `controller` watching the Clusters in `scope` (filling the cache `writer` writes), each
/// waking the control plane its `controlPlaneRef` names (`store`: the control planes' cache).
/// CAPI writes a Cluster many times while it provisions (its status mirrors the control
/// plane's): only a change of what a pass reads wakes the control plane.
fn watch_clusters(
    controller: Controller<KamajiControlPlane>,
    ctx: &Context,
    scope: &Scope,
    store: Store<KamajiControlPlane>,
    writer: reflector::store::Writer<v1beta2::Cluster>,
) -> Controller<KamajiControlPlane> {
    let clusters = cached(
        writer,
        scope.api::<Lean<v1beta2::Cluster>>(ctx.client()),
        scope.filtered(),
    )
    .predicate_filter(
        move |cluster: &v1beta2::Cluster| {
            cluster_inputs(cluster, own_endpoint(&store, cluster).as_ref())
        },
        PredicateConfig::default(),
    );
    controller.watches_stream(clusters, |cluster: v1beta2::Cluster| {
        control_plane_of(&cluster)
    })
}

/// `controller` watching the DataStores (filling the cache `writer` writes), each waking the
/// control planes that use it (`store`: the control planes' cache).
fn watch_datastores(
    controller: Controller<KamajiControlPlane>,
    ctx: &Context,
    store: Store<KamajiControlPlane>,
    writer: reflector::store::Writer<DataStore>,
) -> Controller<KamajiControlPlane> {
    let default_ds = ctx.config().default_datastore.clone();
    let datastores = cached(
        writer,
        Api::<Lean<DataStore>>::all(ctx.client().clone()),
        watcher::Config::default(),
    );
    controller.watches_stream(datastores, move |ds: DataStore| {
        users_of(
            &store,
            ds.metadata.name.as_deref().unwrap_or_default(),
            &default_ds,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(yaml: &str) -> v1beta2::Cluster {
        serde_yaml::from_str(yaml).expect("cluster")
    }

    const CLUSTER: &str = "
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo, namespace: a, resourceVersion: '1'}
spec:
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: KamajiControlPlane, name: demo}
";

    /// The versions a pass's own writes account for wake no pass: the one its last write left,
    /// and the ones a later write of its own replaced (a finalizer or endpoint patch before the
    /// status write); any other version does.
    #[tokio::test]
    async fn only_versions_other_than_the_own_writes_wake_a_pass() {
        let ctx = Context::unconnected();
        let at = |version: &str| -> KamajiControlPlane {
            serde_yaml::from_str(&format!(
                "apiVersion: controlplane.cluster.x-k8s.io/v1alpha2\nkind: KamajiControlPlane\nmetadata: {{name: demo, namespace: a, uid: u1, resourceVersion: '{version}'}}\nspec: {{version: v1.36.3}}\n"
            ))
            .expect("kcp")
        };
        // A pass read 10, patched the finalizer (11) and the endpoint (12), wrote status (13).
        for replaced in ["10", "11", "12"] {
            ctx.memory().supersede("u1", replaced);
        }
        ctx.memory().own_result("u1", "13");
        for own in ["11", "12", "13"] {
            assert!(ctx.memory().accounts_for(&at(own)), "{own}");
        }
        // Another writer's version after them.
        assert!(!ctx.memory().accounts_for(&at("14")));
    }

    /// An owned object's change event wakes no pass at a version a pass wrote or verified; one
    /// arriving while its owner's pass runs is held, and at the pass's end asks for another
    /// only when the pass neither wrote nor read that version; any other wakes its owner.
    #[tokio::test]
    async fn owned_objects_wake_their_owner_only_with_versions_no_pass_accounted_for() {
        let ctx = Context::unconnected();
        let secret = |version: &str| -> ObjectMeta {
            serde_yaml::from_str(&format!(
                "{{name: demo-kubeconfig, namespace: a, uid: s1, resourceVersion: '{version}', ownerReferences: [{{apiVersion: controlplane.cluster.x-k8s.io/v1alpha2, kind: KamajiControlPlane, name: demo, uid: k1, controller: true}}]}}"
            ))
            .expect("meta")
        };
        ctx.memory().verified_desired("s1", "5", "h");
        assert!(
            ctx.memory().own_owned(&secret("5"), None),
            "the pass's own write"
        );
        assert!(
            !ctx.memory().own_owned(&secret("6"), None),
            "another writer's, no pass running"
        );
        ctx.memory().begin_pass("k1");
        assert!(
            ctx.memory().own_owned(&secret("7"), None),
            "held while the owner's pass runs"
        );
        assert!(
            ctx.memory().end_pass("k1"),
            "the pass did not write 7: another pass"
        );
        ctx.memory().begin_pass("k1");
        assert!(ctx.memory().own_owned(&secret("8"), None));
        ctx.memory().verified_desired("s1", "8", "h");
        assert!(!ctx.memory().end_pass("k1"), "the pass wrote 8");
    }

    /// A control-plane Deployment as the watch parses it.
    fn watched(version: &str, status: &str) -> WatchedDeployment {
        serde_yaml::from_str(&format!(
            "metadata: {{name: demo, namespace: a, uid: d1, generation: 1, resourceVersion: '{version}', ownerReferences: [{{apiVersion: controlplane.cluster.x-k8s.io/v1alpha2, kind: KamajiControlPlane, name: demo, uid: k1, controller: true}}]}}\nspec: {{replicas: 1}}\nstatus: {status}\n"
        ))
        .expect("deployment")
    }

    const AVAILABLE: &str = "{observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1}";

    /// A control-plane Deployment's change event wakes its owner unless it shows nothing a pass
    /// acts on that the owner's last pass did not see; one arriving while that pass runs is
    /// decided at its end by what it saw; after a pass that saw none (it failed), every event
    /// wakes.
    #[tokio::test]
    async fn a_deployment_event_showing_a_pass_nothing_new_wakes_no_pass() {
        let ctx = Context::unconnected();
        assert!(
            !unchanged_deployment(&ctx, &watched("5", "{}")),
            "no pass saw it"
        );
        ctx.memory()
            .saw_deployment("k1", Some(watched("5", "{}").view()));
        assert!(
            unchanged_deployment(&ctx, &watched("6", "{observedGeneration: 1}")),
            "the Deployment controller's first status write"
        );
        assert!(!unchanged_deployment(&ctx, &watched("7", AVAILABLE)));

        ctx.memory().begin_pass("k1");
        assert!(
            unchanged_deployment(&ctx, &watched("8", "{observedGeneration: 1}")),
            "held"
        );
        ctx.memory()
            .saw_deployment("k1", Some(watched("5", "{}").view()));
        assert!(!ctx.memory().end_pass("k1"), "nothing the pass did not see");
        ctx.memory().begin_pass("k1");
        assert!(unchanged_deployment(&ctx, &watched("9", AVAILABLE)), "held");
        ctx.memory()
            .saw_deployment("k1", Some(watched("5", "{}").view()));
        assert!(
            ctx.memory().end_pass("k1"),
            "available after the pass read it"
        );

        ctx.memory().saw_deployment("k1", None);
        assert!(!unchanged_deployment(
            &ctx,
            &watched("10", "{observedGeneration: 1}")
        ));
    }

    /// The watch's parse of a Deployment (without its pod template) shows what the pass's
    /// full parse shows.
    #[test]
    fn the_watched_deployment_views_as_the_full_one() {
        let full: Deployment = serde_yaml::from_str(
            "metadata: {name: demo, namespace: a, uid: d1, generation: 3, resourceVersion: '9', labels: {a: b}, annotations: {x: y}, managedFields: [{manager: m, operation: Apply, fieldsType: FieldsV1, fieldsV1: {f:spec: {}}}], ownerReferences: [{apiVersion: controlplane.cluster.x-k8s.io/v1alpha2, kind: KamajiControlPlane, name: demo, uid: k1, controller: true}]}\nspec: {replicas: 3, selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: kube-apiserver, image: i, args: [--a, --b]}]}}}\nstatus: {observedGeneration: 2, replicas: 3, updatedReplicas: 1, readyReplicas: 2, availableReplicas: 2, terminatingReplicas: 1}\n",
        )
        .expect("deployment");
        let json = serde_json::to_string(&full).expect("json");
        let Lean(watched): Lean<WatchedDeployment> = serde_json::from_str(&json).expect("parse");
        assert_eq!(watched.view(), DeploymentView::of(&full));
        assert_eq!(watched.metadata.managed_fields, None);
    }

    /// The Cluster watch wakes a control plane when what its pass reads changes (paused, the
    /// network, the infrastructure provisioned, an endpoint other than the control plane's
    /// own, deletion), not when CAPI only writes its own status or metadata, or copies the
    /// control plane's endpoint into the Cluster.
    #[test]
    fn only_a_change_a_pass_reads_of_the_cluster_wakes_the_control_plane() {
        let own = ("10.0.0.7".to_owned(), 6443);
        let base = cluster_inputs(&cluster(CLUSTER), Some(&own));
        let mirrored = cluster(&format!(
            "{CLUSTER}status:\n  phase: Provisioning\n  conditions: [{{type: Available, status: 'False', reason: X, lastTransitionTime: '2026-12-06T00:00:00Z'}}]\n"
        ));
        let mut relabelled = mirrored.clone();
        relabelled.metadata.resource_version = Some("2".into());
        relabelled.metadata.finalizers = Some(vec!["cluster.cluster.x-k8s.io".into()]);
        let copied = cluster(&format!(
            "{CLUSTER}  controlPlaneEndpoint: {{host: 10.0.0.7, port: 6443}}\n"
        ));
        assert_eq!(cluster_inputs(&mirrored, Some(&own)), base);
        assert_eq!(cluster_inputs(&relabelled, Some(&own)), base);
        assert_eq!(
            cluster_inputs(&copied, Some(&own)),
            base,
            "the own endpoint copied"
        );
        assert_ne!(
            cluster_inputs(&copied, None),
            cluster_inputs(&cluster(CLUSTER), None),
            "an endpoint the control plane does not have"
        );
        let changed = [
            format!("{CLUSTER}  paused: true\n"),
            format!("{CLUSTER}  clusterNetwork: {{apiServerPort: 7443}}\n"),
            format!("{CLUSTER}status: {{initialization: {{infrastructureProvisioned: true}}}}\n"),
            format!("{CLUSTER}  controlPlaneEndpoint: {{host: 10.0.0.7, port: 443}}\n"),
            format!("{CLUSTER}  controlPlaneEndpoint: {{host: 10.0.0.8, port: 6443}}\n"),
        ];
        for yaml in &changed {
            assert_ne!(cluster_inputs(&cluster(yaml), Some(&own)), base, "{yaml}");
        }
        let mut deleting = cluster(CLUSTER);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert_ne!(cluster_inputs(&deleting, Some(&own)), base);
    }

    /// The own endpoint is the named control plane's, from the watch cache, when it has a
    /// valid one.
    #[test]
    fn the_own_endpoint_is_the_named_control_planes_when_set() {
        let (store, mut writer) = reflector::store::<KamajiControlPlane>();
        let kcp = |endpoint: &str| -> KamajiControlPlane {
            serde_yaml::from_str(&format!(
                "apiVersion: controlplane.cluster.x-k8s.io/v1alpha2\nkind: KamajiControlPlane\nmetadata: {{name: demo, namespace: a}}\nspec: {{version: v1.36.3{endpoint}}}\n"
            ))
            .expect("kcp")
        };
        assert_eq!(own_endpoint(&store, &cluster(CLUSTER)), None, "not cached");
        writer.apply_watcher_event(&watcher::Event::Apply(kcp("")));
        assert_eq!(own_endpoint(&store, &cluster(CLUSTER)), None, "none set");
        writer.apply_watcher_event(&watcher::Event::Apply(kcp(
            ", controlPlaneEndpoint: {host: 10.0.0.7, port: 6443}",
        )));
        assert_eq!(
            own_endpoint(&store, &cluster(CLUSTER)),
            Some(("10.0.0.7".to_owned(), 6443))
        );
        writer.apply_watcher_event(&watcher::Event::Apply(kcp(
            ", controlPlaneEndpoint: {host: '', port: 0}",
        )));
        assert_eq!(own_endpoint(&store, &cluster(CLUSTER)), None, "not valid");
    }
}
