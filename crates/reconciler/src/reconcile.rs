//! The reconcile pipeline of one KamajiControlPlane (shared/design/ARCHITECTURE.md §3):
//! gates → observe → validate → plan → apply → status (written once, and only when it
//! changed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kamaji_api::KamajiControlPlane;
use kamaji_api::cluster::{ClusterView, v1beta2};
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::{
    CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, FIELD_MANAGER, FINALIZER, PAUSED_ANNOTATION,
};
use kamaji_api::names::InternalSecret;
use kamaji_bootstrap::kubeadm::{AddonImage, Addons, KubeletSpec, TenantArtifacts, TenantSpec};
use kamaji_bootstrap::pki::{
    CA_COMMON_NAME, CertificateAuthority, FRONT_PROXY_CA_COMMON_NAME, KeyAlgorithm,
    ServiceAccountKeyPair,
};
use kamaji_bootstrap::secrets::{self, SecretTarget};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::context::Context;
use crate::datastore::{self, Credentials, Problem};
use crate::drift;
use crate::endpoint::{self, Endpoint};
use crate::error::{Error, KubeContext};
use crate::pki::{self, LeafInputs, LeafKind, Roots};
use crate::plan::{self, DESIRED_HASH_ANNOTATION, DatastoreWiring};
use crate::spec::{self, ValidSpec};
use crate::status::{self, Cond, Replicas, StatusInputs};
use crate::tenant;

/// What a pass observed about the owner Cluster.
struct Owner {
    view: ClusterView,
}

/// Reconciles one KamajiControlPlane.
///
/// # Errors
/// [`Error`] for failures worth a retry with backoff; invalid specs and missing inputs are
/// reported in status and wait for a change instead.
pub async fn reconcile(kcp: Arc<KamajiControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = Box::pin(run(&kcp, &ctx)).await;
    ctx.metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    let key = object_key(&kcp);
    match &result {
        Ok(_) => ctx.errors.reset(&key),
        // Error messages name objects and API responses, never Secret data.
        Err(e) => {
            let note = format!("{}: {e}", e.category());
            publish(&ctx, &kcp, EventType::Warning, "ReconcileFailed", &note).await;
        }
    }
    result
}

/// `namespace/name` of a KamajiControlPlane.
#[must_use]
pub fn object_key(kcp: &KamajiControlPlane) -> String {
    format!("{}/{}", kcp.namespace().unwrap_or_default(), kcp.name_any())
}

async fn run(kcp: &KamajiControlPlane, ctx: &Context) -> Result<Action, Error> {
    let ns = kcp.namespace().unwrap_or_default();
    let client = &ctx.client;
    let deleting = kcp.metadata.deletion_timestamp.is_some();

    // Gate 0: deleted by `clusterctl move`. The control plane lives on in the target
    // management cluster on the same datastore prefix and Secrets: release the finalizer and
    // touch nothing else (clusterctl removes finalizers itself; this covers a finalizer added
    // back in between), whether or not the Cluster is still paused or present.
    if deleting && kcp.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION) {
        info!(kcp = %object_key(kcp), "deleted for clusterctl move: keeping the tenant's datastore data and Secrets");
        return release_finalizer(kcp, ctx).await;
    }

    // Gate 1: the owner Cluster (CAPI control-plane contract: "Cluster API sets an ownerRef from
    // the Cluster on the control plane"; found by kind and group, not by position).
    let owner = match owner_cluster(kcp, ctx).await? {
        Some(o) => o,
        None if deleting => return delete(kcp, ctx, None).await,
        None => {
            let msg = "waiting for Cluster API to set an owner reference from the Cluster (is spec.controlPlaneRef of a Cluster pointing here?)";
            info!(kcp = %object_key(kcp), "{msg}");
            publish(
                ctx,
                kcp,
                EventType::Normal,
                reasons::WAITING_FOR_OWNER_CLUSTER,
                msg,
            )
            .await;
            write_conditions_only(
                kcp,
                ctx,
                vec![Cond::no(
                    types::CLUSTER_FOUND,
                    reasons::WAITING_FOR_OWNER_CLUSTER,
                    msg,
                )],
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    tracing::Span::current().record("cluster", owner.view.name.as_str());

    // Gate 2: paused (contract: Cluster.spec.paused or the cluster.x-k8s.io/paused annotation
    // stops every change but the Paused condition).
    if owner.view.paused || kcp.annotations().contains_key(PAUSED_ANNOTATION) {
        write_conditions_only(kcp, ctx, vec![
            Cond::yes(types::PAUSED, reasons::PAUSED, "reconciliation is paused (Cluster.spec.paused or the cluster.x-k8s.io/paused annotation)"),
        ])
        .await?;
        return Ok(Action::await_change());
    }

    // Gate 3: the finalizer, before anything is created.
    if !deleting && !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = kcp.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        Api::<KamajiControlPlane>::namespaced(client.clone(), &ns)
            .patch(
                &kcp.name_any(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"finalizers": finalizers}})),
            )
            .await
            .ctx(|| "add finalizer".into())?;
    }

    // Gate 4: deletion.
    if deleting {
        return delete(kcp, ctx, Some(&owner)).await;
    }

    let mut conds = Vec::new();
    let result = Box::pin(pipeline(kcp, ctx, &owner, &mut conds)).await;
    if let Err(e) = &result {
        // The status shows what this pass found before it failed, and why it failed; never a
        // condition of an older pass that every later pass contradicts.
        conds.push(Cond::no(types::RECONCILED, e.reason(), e.to_string()));
        if let Err(write) = write_conditions_only(kcp, ctx, std::mem::take(&mut conds)).await {
            warn!(kcp = %object_key(kcp), "writing the failed pass's conditions: {write}");
        }
    }
    result
}

/// The pipeline after the gates: validate → observe → plan/apply → status. `conds` collects
/// the conditions of the steps that ran (the caller writes them when the pass fails).
async fn pipeline(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    owner: &Owner,
    conds: &mut Vec<Cond>,
) -> Result<Action, Error> {
    conds.extend([
        Cond::yes(
            types::CLUSTER_FOUND,
            reasons::READY,
            format!("Cluster {}", owner.view.name),
        ),
        Cond::no(types::PAUSED, reasons::NOT_PAUSED, ""),
        Cond::no(types::DELETING, reasons::NOT_DELETING, ""),
    ]);

    // Validate (pure).
    let spec = match spec::validate(kcp, &owner.view, &ctx.config.default_datastore) {
        Ok(s) => s,
        Err(errors) => {
            let msg = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            warn!(kcp = %object_key(kcp), "invalid spec: {msg}");
            publish(ctx, kcp, EventType::Warning, reasons::INVALID_SPEC, &msg).await;
            conds.push(Cond::no(types::SPEC_VALID, reasons::INVALID_SPEC, msg));
            write_conditions_only(kcp, ctx, std::mem::take(conds)).await?;
            return Ok(Action::await_change());
        }
    };
    conds.push(Cond::yes(types::SPEC_VALID, reasons::READY, ""));

    // Observe.
    let observed = observe(&spec, ctx).await?;

    let Some(ds) = datastore_step(kcp, ctx, &spec, &observed, conds).await? else {
        return Ok(Action::await_change());
    };
    let p = match Box::pin(provision(kcp, ctx, &spec, &observed, &ds, conds)).await? {
        Ok(p) => p,
        Err(stopped) => return Ok(stopped),
    };
    let Provisioned {
        roots,
        endpoint,
        applied,
        deployment,
        service,
    } = p;
    let replicas = Replicas::of(Some(&deployment));

    // The tenant: reachable through the endpoint? Then bootstrap it.
    let mut reachable = false;
    if replicas.available > 0 {
        let admin = applied.get(&spec.names.kubeconfig_secret());
        if let Some(admin) = admin {
            let admin_client = tenant::client_from_secret(admin).await?;
            reachable = tenant::readyz(&admin_client).await;
        }
    }
    let mut requeue = ctx.config.resync;
    if reachable {
        ctx.waiting.reset(&object_key(kcp));
        set_cluster_endpoint(&owner.view, ctx, &endpoint).await?;
        let super_admin = applied.get(&pki::leaf_secret_name(&spec, LeafKind::SuperAdmin));
        match bootstrap_tenant(&spec, &endpoint, &roots, &ds, kcp, super_admin, ctx).await {
            Ok(()) => conds.push(Cond::yes(types::TENANT_BOOTSTRAPPED, reasons::READY, "cluster-info, kubeadm-config, kubelet-config, join RBAC, kube-proxy and CoreDNS are applied")),
            Err(e) => {
                warn!(kcp = %object_key(kcp), "tenant bootstrap: {e}");
                conds.push(Cond::no(types::TENANT_BOOTSTRAPPED, reasons::WAITING_FOR_API_SERVER, e.to_string()));
                requeue = ctx.waiting.next(&object_key(kcp));
            }
        }
    } else {
        let msg = if replicas.available == 0 {
            "waiting for a control-plane pod to become available"
        } else {
            "waiting for the API server to answer /readyz through the endpoint"
        };
        conds.push(Cond::no(
            types::TENANT_BOOTSTRAPPED,
            if replicas.available == 0 {
                reasons::WAITING_FOR_PODS
            } else {
                reasons::WAITING_FOR_API_SERVER
            },
            msg,
        ));
        // Pod readiness produces Deployment events; reachability through the endpoint does not.
        if replicas.available > 0 {
            requeue = ctx.waiting.next(&object_key(kcp));
        }
    }
    let observed = Observed {
        deployment: Some(deployment),
        service: Some(service),
        secrets: observed.secrets,
    };
    write_status(kcp, ctx, &spec, &observed, reachable, std::mem::take(conds)).await?;
    Ok(Action::requeue(requeue))
}

/// Resolves the DataStore; reports `DataStoreReady=False` (and waits for a change) when it is
/// missing, unsupported or invalid.
async fn datastore_step(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &ValidSpec,
    observed: &Observed,
    conds: &mut Vec<Cond>,
) -> Result<Option<datastore::Resolved>, Error> {
    // The datastore.
    let ds = match datastore::resolve(&ctx.client, &spec.datastore_name).await {
        Ok(ds) => ds,
        Err(problem) => {
            let reason = match &problem {
                Problem::NotFound(_) => reasons::DATASTORE_NOT_FOUND,
                Problem::DriverUnsupported(_) => reasons::DATASTORE_DRIVER_UNSUPPORTED,
                Problem::Invalid(_) => reasons::INVALID_SPEC,
            };
            let mut msg = problem.message();
            if kcp
                .spec
                .fields
                .data_store_name
                .as_deref()
                .unwrap_or("")
                .is_empty()
            {
                msg.push_str(
                    " (spec.dataStoreName is empty, so the manager's default DataStore is used)",
                );
            }
            conds.push(Cond::no(types::DATASTORE_READY, reason, msg));
            write_status(kcp, ctx, spec, observed, false, std::mem::take(conds)).await?;
            return Ok(None);
        }
    };
    conds.push(Cond::yes(
        types::DATASTORE_READY,
        reasons::READY,
        format!(
            "DataStore {} (etcd), prefix /{}",
            ds.name, spec.datastore_schema
        ),
    ));

    Ok(Some(ds))
}

/// What [`provision`] applied.
struct Provisioned {
    roots: Roots,
    endpoint: Endpoint,
    applied: BTreeMap<String, Secret>,
    deployment: Deployment,
    service: Service,
}

/// How long a pass waits before looking again at a state that produces no event for this
/// control plane (an object another controller owns, a root Secret restored without labels).
const RECHECK: Duration = Duration::from_mins(1);

/// Writes the status with a final `False` condition and stops the pass: the caller returns
/// the action (a recheck after [`RECHECK`]).
async fn stop_with(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &ValidSpec,
    observed: &Observed,
    conds: &mut Vec<Cond>,
    cond: Cond,
) -> Result<Action, Error> {
    warn!(kcp = %object_key(kcp), reason = cond.reason, "{}", cond.message);
    publish(ctx, kcp, EventType::Warning, cond.reason, &cond.message).await;
    conds.push(cond);
    write_status(kcp, ctx, spec, observed, false, std::mem::take(conds)).await?;
    Ok(Action::requeue(RECHECK))
}

/// Roots, the datastore client certificate, the Service and endpoint, leaves and kubeconfigs,
/// and the Deployment. `Err(action)` when the pass stops early with its status written: the
/// endpoint is not known yet, a root is missing after initialization, or an object kamaji-rs
/// would write is controlled by another object.
#[allow(clippy::too_many_lines)] // one step per block, in pipeline order; split by the reshape
async fn provision(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &ValidSpec,
    observed: &Observed,
    ds: &datastore::Resolved,
    conds: &mut Vec<Cond>,
) -> Result<Result<Provisioned, Action>, Error> {
    let owner_ref = owner_reference(kcp);
    // Roots: read back, or generate once with create-if-absent, but never again once the
    // control plane is initialized.
    let (roots, root_secrets) = match ensure_roots(
        spec,
        &observed.secrets,
        &owner_ref,
        ctx,
        is_initialized(kcp),
    )
    .await?
    {
        Ok(r) => r,
        Err(cond) => {
            return stop_with(kcp, ctx, spec, observed, conds, cond)
                .await
                .map(Err);
        }
    };
    let now = SystemTime::now();

    let (ds_secret, wiring) =
        match datastore_client_secret(ctx, spec, observed, ds, &owner_ref, now).await? {
            Ok(r) => r,
            Err(msg) => {
                let cond = Cond::no(
                    types::DATASTORE_READY,
                    reasons::OWNED_BY_ANOTHER_OBJECT,
                    msg,
                );
                return stop_with(kcp, ctx, spec, observed, conds, cond)
                    .await
                    .map(Err);
            }
        };

    // The Service, then the endpoint.
    let service = match apply_owned(
        ctx,
        &spec.namespace,
        plan::service(spec, &owner_ref),
        observed.service.as_ref(),
        &owner_ref,
    )
    .await?
    {
        Applied::Stored(s) => s,
        Applied::Conflict(msg) => {
            let cond = Cond::no(types::ENDPOINT_READY, reasons::OWNED_BY_ANOTHER_OBJECT, msg);
            return stop_with(kcp, ctx, spec, observed, conds, cond)
                .await
                .map(Err);
        }
    };
    let Some(endpoint) = endpoint::choose(spec, Some(&service)) else {
        conds.push(Cond::no(
            types::ENDPOINT_READY,
            reasons::WAITING_FOR_ENDPOINT,
            match spec.service_type {
                kamaji_api::kcp::ServiceType::NodePort => {
                    "a NodePort Service needs spec.network.serviceAddress to know the endpoint"
                        .to_owned()
                }
                _ => format!(
                    "waiting for Service {} to get an address",
                    spec.names.service()
                ),
            },
        ));
        write_status(kcp, ctx, spec, observed, false, std::mem::take(conds)).await?;
        return Ok(Err(Action::await_change()));
    };
    conds.push(Cond::yes(
        types::ENDPOINT_READY,
        reasons::READY,
        format!("{}:{}", endpoint.host, endpoint.port),
    ));
    set_kcp_endpoint(kcp, ctx, &endpoint).await?;

    // Leaves and kubeconfigs.
    let service_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse().ok());
    let inputs = LeafInputs {
        spec,
        roots: &roots,
        endpoint: &endpoint,
        service_ip,
        management_domain: &ctx.config.management_domain,
        algorithm: ctx.config.key_algorithm,
        now,
    };
    // A leaf this control plane stored under its pre-v0.2 name is kept under the new name.
    let uid = owner_ref.uid.as_str();
    let legacy = legacy_secrets(spec, &observed.secrets, uid);
    let mut existing = observed.secrets.clone();
    for (new_name, old) in &legacy {
        existing
            .entry(new_name.clone())
            .or_insert_with(|| (*old).clone());
    }
    let leaves = pki::plan_leaves(&inputs, &existing)?;
    let mut applied: BTreeMap<String, Secret> = BTreeMap::new();
    for leaf in leaves {
        let name = leaf.secret.name_any();
        match apply_owned(
            ctx,
            &spec.namespace,
            owned(leaf.secret, &owner_ref),
            observed.secrets.get(&name),
            &owner_ref,
        )
        .await?
        {
            Applied::Stored(s) => {
                applied.insert(name, s);
            }
            Applied::Conflict(msg) => {
                let type_ = if leaf.kind == LeafKind::Admin {
                    types::KUBECONFIG_AVAILABLE
                } else {
                    types::CERTIFICATES_AVAILABLE
                };
                let cond = Cond::no(type_, reasons::OWNED_BY_ANOTHER_OBJECT, msg);
                return stop_with(kcp, ctx, spec, observed, conds, cond)
                    .await
                    .map(Err);
            }
        }
    }
    conds.push(Cond::yes(
        types::CERTIFICATES_AVAILABLE,
        reasons::READY,
        "CA, service-account key, front-proxy CA and every leaf certificate are present",
    ));
    conds.push(Cond::yes(
        types::KUBECONFIG_AVAILABLE,
        reasons::READY,
        format!("Secret {}", spec.names.kubeconfig_secret()),
    ));

    // The Deployment, rolled when the mounted key material changes.
    let pki_hash = mounted_hash(spec, &applied, &ds_secret, &root_secrets);
    let deployment = match apply_owned(
        ctx,
        &spec.namespace,
        plan::deployment(spec, &owner_ref, &wiring, &pki_hash, &endpoint),
        observed.deployment.as_ref(),
        &owner_ref,
    )
    .await?
    {
        Applied::Stored(d) => d,
        Applied::Conflict(msg) => {
            let cond = Cond::no(
                types::DEPLOYMENT_READY,
                reasons::OWNED_BY_ANOTHER_OBJECT,
                msg,
            );
            return stop_with(kcp, ctx, spec, observed, conds, cond)
                .await
                .map(Err);
        }
    };
    remove_legacy_secrets(ctx, spec, &legacy, &deployment).await?;

    Ok(Ok(Provisioned {
        roots,
        endpoint,
        applied,
        deployment,
        service,
    }))
}

/// Whether the status says the control plane was initialized (either contract flavour).
fn is_initialized(kcp: &KamajiControlPlane) -> bool {
    kcp.status.as_ref().is_some_and(|s| {
        s.initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false)
            || s.initialized.unwrap_or(false)
    })
}

/// Internal Secrets this control plane stored under their pre-v0.2 names (see
/// `ObjectNames::legacy_internal_secret`), keyed by their new name: only those it controls,
/// since an old name may now be another cluster's CAPI Secret.
fn legacy_secrets<'a>(
    spec: &ValidSpec,
    secrets: &'a BTreeMap<String, Secret>,
    uid: &str,
) -> Vec<(String, &'a Secret)> {
    InternalSecret::ALL
        .iter()
        .filter_map(|which| {
            let old = spec.names.legacy_internal_secret(*which)?;
            let secret = secrets.get(&old).filter(|s| controlled_by(*s, uid))?;
            Some((spec.names.internal_secret(*which), secret))
        })
        .collect()
}

/// Deletes the pre-v0.2 Secrets once the Deployment has rolled onto the new names (every
/// replica up to date), so no running pod mounts them any more.
async fn remove_legacy_secrets(
    ctx: &Context,
    spec: &ValidSpec,
    legacy: &[(String, &Secret)],
    deployment: &Deployment,
) -> Result<(), Error> {
    let r = Replicas::of(Some(deployment));
    let rolled_out =
        r.observed_current && r.up_to_date == spec.replicas && r.replicas == spec.replicas;
    if legacy.is_empty() || !rolled_out {
        return Ok(());
    }
    let api = Api::<Secret>::namespaced(ctx.client.clone(), &spec.namespace);
    for (new_name, old) in legacy {
        let name = old.name_any();
        let precondition = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: old.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &precondition).await {
            Ok(_) => {
                info!(secret = %name, now = %new_name, "removed a Secret migrated to its new name");
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                return Err(Error::Kube {
                    action: format!("delete migrated Secret {}/{name}", spec.namespace),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// Whether `obj`'s controller owner reference points at the object with `uid`.
fn controlled_by<K: Resource>(obj: &K, uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// When `obj` is controlled by an object other than `owner`: a message naming both.
fn foreign_controller<K: Resource<DynamicType = ()>>(
    obj: &K,
    owner: &OwnerReference,
) -> Option<String> {
    let other = obj
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.uid != owner.uid)?;
    Some(format!(
        "{} {}/{} exists and is controlled by {} {} (uid {}), not by {} {}; kamaji-rs never \
         overwrites an object another controller owns: remove it, or give this cluster \
         another name",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any(),
        other.kind,
        other.name,
        other.uid,
        owner.kind,
        owner.name,
    ))
}

/// The tenant's own datastore client certificate (issued from the DataStore CA, kept while
/// valid) in `<cluster>-apiserver-etcd-client` with the DataStore CA as `ca.crt`, and the
/// API server's datastore wiring. `Err(message)` when that Secret is controlled by another
/// object.
async fn datastore_client_secret(
    ctx: &Context,
    spec: &ValidSpec,
    observed: &Observed,
    ds: &datastore::Resolved,
    owner_ref: &OwnerReference,
    now: SystemTime,
) -> Result<Result<(Secret, DatastoreWiring), String>, Error> {
    let ds_secret_name = spec.names.apiserver_etcd_client_secret();
    let (ds_leaf, _) = pki::datastore_client(
        &ds.ca_cert,
        &ds.ca_key,
        &datastore_common_name(&spec.namespace, &spec.names),
        observed.secrets.get(&ds_secret_name),
        ctx.config.key_algorithm,
        now,
    )?;
    let mut ds_secret = secrets::leaf_secret(
        SecretTarget {
            name: &ds_secret_name,
            namespace: &spec.namespace,
            cluster_name: &spec.cluster.name,
        },
        &ds_leaf,
    );
    ds_secret
        .data
        .get_or_insert_with(BTreeMap::new)
        .insert("ca.crt".into(), ByteString(ds.ca_cert.clone().into_bytes()));
    let ds_secret = match apply_owned(
        ctx,
        &spec.namespace,
        owned(ds_secret, owner_ref),
        observed.secrets.get(&ds_secret_name),
        owner_ref,
    )
    .await?
    {
        Applied::Stored(s) => s,
        Applied::Conflict(msg) => return Ok(Err(msg)),
    };
    let wiring = DatastoreWiring {
        servers: ds.server_urls(),
        prefix: kamaji_api::names::etcd_prefix(&spec.datastore_schema),
        tls_secret: Some(ds_secret_name.clone()),
    };

    Ok(Ok((ds_secret, wiring)))
}

/// Common name of the tenant's datastore client certificate (its datastore user name).
fn datastore_common_name(namespace: &str, names: &kamaji_api::names::ObjectNames) -> String {
    kamaji_api::names::datastore_username(namespace, &names.deployment())
}

/// Hash of every Secret the control-plane pods mount (roots, leaves but the two kubeconfigs
/// only the provider and users use, the datastore client), for the pod-template annotation:
/// a reissued certificate changes it and rolls the pods.
fn mounted_hash(
    spec: &ValidSpec,
    applied: &BTreeMap<String, Secret>,
    ds_secret: &Secret,
    roots: &[Secret],
) -> String {
    let unmounted = [
        pki::leaf_secret_name(spec, LeafKind::Admin),
        pki::leaf_secret_name(spec, LeafKind::SuperAdmin),
    ];
    let mounted = applied
        .iter()
        .filter(|(n, _)| !unmounted.contains(n))
        .map(|(_, s)| s)
        .chain(std::iter::once(ds_secret))
        .chain(roots.iter())
        .map(|s| (&s.metadata.name, &s.data))
        .collect::<Vec<_>>();
    plan::desired_hash(&mounted)
}

/// What the observe step read.
struct Observed {
    secrets: BTreeMap<String, Secret>,
    deployment: Option<Deployment>,
    service: Option<Service>,
}

async fn owner_cluster(kcp: &KamajiControlPlane, ctx: &Context) -> Result<Option<Owner>, Error> {
    let Some(reference) = kcp.owner_references().iter().find(|o| {
        o.kind == "Cluster" && o.api_version.split('/').next() == Some("cluster.x-k8s.io")
    }) else {
        return Ok(None);
    };
    let ns = kcp.namespace().unwrap_or_default();
    let cluster = Api::<v1beta2::Cluster>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&reference.name)
        .await
        .ctx(|| format!("get Cluster {ns}/{}", reference.name))?;
    Ok(cluster.map(|c| Owner {
        view: ClusterView::from(&c),
    }))
}

async fn observe(spec: &ValidSpec, ctx: &Context) -> Result<Observed, Error> {
    let ns = &spec.namespace;
    let secrets_api = Api::<Secret>::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{CLUSTER_NAME_LABEL}={}",
        spec.names.cluster_label_value()
    ));
    // A Secret without the label (a kubeconfig written by someone else, case B01) is not
    // listed here; the apply step reads it by name before it writes.
    let secrets: BTreeMap<String, Secret> = secrets_api
        .list(&lp)
        .await
        .ctx(|| format!("list Secrets of Cluster {ns}/{}", spec.cluster.name))?
        .items
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
    let deployment = Api::<Deployment>::namespaced(ctx.client.clone(), ns)
        .get_opt(&spec.names.deployment())
        .await
        .ctx(|| "get Deployment".into())?;
    let service = Api::<Service>::namespaced(ctx.client.clone(), ns)
        .get_opt(&spec.names.service())
        .await
        .ctx(|| "get Service".into())?;
    Ok(Observed {
        secrets,
        deployment,
        service,
    })
}

/// The controller owner reference to `kcp`.
#[must_use]
pub fn owner_reference(kcp: &KamajiControlPlane) -> OwnerReference {
    OwnerReference {
        api_version: KamajiControlPlane::api_version(&()).into_owned(),
        kind: KamajiControlPlane::kind(&()).into_owned(),
        name: kcp.name_any(),
        uid: kcp.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn owned(mut secret: Secret, owner: &OwnerReference) -> Secret {
    secret.metadata.owner_references = Some(vec![owner.clone()]);
    secret
}

/// What [`apply_owned`] did.
enum Applied<K> {
    /// The object as stored: written now, or already as desired.
    Stored(K),
    /// The object exists and another object controls it; nothing was written. The message
    /// names the object and its controller.
    Conflict(String),
}

/// Server-side applies `desired` (field manager `kamaji-rs`) unless the live object already
/// carries the same desired hash *and* still holds everything `desired` sets (see
/// [`drift`]); then nothing is written. `observed` is the object as the observe step read
/// it; when it was not read, it is fetched first. An object controlled by another object
/// than `owner` is never written ([`Applied::Conflict`]); one without a controller is adopted.
async fn apply_owned<K>(
    ctx: &Context,
    ns: &str,
    mut desired: K,
    observed: Option<&K>,
    owner: &OwnerReference,
) -> Result<Applied<K>, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let hash = {
        let meta = desired.meta_mut();
        if let Some(a) = meta.annotations.as_mut() {
            a.remove(DESIRED_HASH_ANNOTATION);
        }
        plan::desired_hash(&desired)
    };
    plan::stamp_hash(desired.meta_mut(), hash.clone());
    let name = desired.name_any();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let kind = K::kind(&());
    let fetched = if observed.is_none() {
        api.get_opt(&name)
            .await
            .ctx(|| format!("get {kind} {ns}/{name}"))?
    } else {
        None
    };
    let current = observed.or(fetched.as_ref());
    let desired_json = serde_json::to_value(&desired)?;
    if let Some(cur) = current {
        if let Some(msg) = foreign_controller(cur, owner) {
            return Ok(Applied::Conflict(msg));
        }
        if cur.annotations().get(DESIRED_HASH_ANNOTATION) == Some(&hash) {
            let uid = cur.uid().unwrap_or_default();
            match drift::drifted(&desired_json, &serde_json::to_value(cur)?) {
                None => return Ok(Applied::Stored(cur.clone())),
                Some(_) if ctx.drift_settled(&uid, &hash) => {
                    return Ok(Applied::Stored(cur.clone()));
                }
                Some(field) => {
                    info!(object = %format!("{kind} {ns}/{name}"), field, "the live object no longer holds what kamaji-rs set: applying it again");
                    ctx.metrics.drift_corrections.inc();
                }
            }
        }
    }
    let stored = match api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&desired),
        )
        .await
    {
        Ok(o) => o,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            ctx.metrics.ssa_conflicts.inc();
            // Another field manager holds a field kamaji-rs sets: take it back, unless the
            // object appeared in the meantime under another controller.
            if current.is_none()
                && let Some(now) = api
                    .get_opt(&name)
                    .await
                    .ctx(|| format!("get {kind} {ns}/{name}"))?
                && let Some(msg) = foreign_controller(&now, owner)
            {
                return Ok(Applied::Conflict(msg));
            }
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .ctx(|| format!("apply {kind} {ns}/{name} (forced after a conflict)"))?
        }
        Err(e) => {
            return Err(Error::Kube {
                action: format!("apply {kind} {ns}/{name}"),
                source: e,
            });
        }
    };
    if let Some(field) = drift::drifted(&desired_json, &serde_json::to_value(&stored)?) {
        // Something rewrites what kamaji-rs sets as it is stored (a mutating webhook):
        // applying again would only loop. Accept it until the desired object changes.
        warn!(object = %format!("{kind} {ns}/{name}"), field, "the stored object differs from what kamaji-rs applied; not re-applying it until the desired object changes");
        ctx.settle_drift(&stored.uid().unwrap_or_default(), &hash);
    }
    Ok(Applied::Stored(stored))
}

/// Makes a new root Secret: target, key algorithm, now.
type MakeRoot = fn(SecretTarget<'_>, KeyAlgorithm, SystemTime) -> Result<Secret, Error>;

/// The three roots of a tenant: Secret name, what it holds (for messages), and how a new
/// one is made.
fn root_kinds(spec: &ValidSpec) -> [(String, &'static str, MakeRoot); 3] {
    let n = &spec.names;
    [
        (n.ca_secret(), "the cluster CA", |t, alg, now| {
            let ca = CertificateAuthority::generate(CA_COMMON_NAME, alg, now)?;
            Ok(secrets::ca_secret(t, &ca))
        }),
        (
            n.front_proxy_ca_secret(),
            "the front-proxy CA",
            |t, alg, now| {
                let ca = CertificateAuthority::generate(FRONT_PROXY_CA_COMMON_NAME, alg, now)?;
                Ok(secrets::ca_secret(t, &ca))
            },
        ),
        (
            n.service_account_secret(),
            "the service-account signing key",
            |t, alg, _| {
                Ok(secrets::service_account_secret(
                    t,
                    &ServiceAccountKeyPair::generate(alg)?,
                ))
            },
        ),
    ]
}

/// Reads the CA, front-proxy CA and service-account key from their Secrets. Before the
/// control plane is initialized, each missing one is generated once and created with
/// create-if-absent (a 409 means another writer won: its material is read back and used).
/// After initialization a missing root is never generated again: every joined node, issued
/// kubeconfig and service-account token trusts the old one, so `Err` carries a
/// `CertificatesAvailable=False` condition that says how to restore it. A root Secret
/// controlled by another object is never used (`Err` too).
async fn ensure_roots(
    spec: &ValidSpec,
    secrets: &BTreeMap<String, Secret>,
    owner: &OwnerReference,
    ctx: &Context,
    initialized: bool,
) -> Result<Result<(Roots, [Secret; 3]), Cond>, Error> {
    let api = Api::<Secret>::namespaced(ctx.client.clone(), &spec.namespace);
    let ns = spec.namespace.as_str();
    let now = SystemTime::now();
    let alg = ctx.config.key_algorithm;

    let mut found: Vec<Secret> = Vec::with_capacity(3);
    let mut missing: Vec<String> = Vec::new();
    for (name, what, make) in root_kinds(spec) {
        let existing = match secrets.get(&name) {
            Some(s) => Some(s.clone()),
            // Restored without its labels? Look it up by name before calling it missing.
            None if initialized => api
                .get_opt(&name)
                .await
                .ctx(|| format!("get Secret {ns}/{name}"))?,
            None => None,
        };
        let secret = match existing {
            Some(s) => s,
            None if initialized => {
                missing.push(format!("Secret {ns}/{name} ({what})"));
                continue;
            }
            None => {
                let started = Instant::now();
                let target = SecretTarget {
                    name: &name,
                    namespace: ns,
                    cluster_name: &spec.cluster.name,
                };
                let secret = owned(make(target, alg, now)?, owner);
                ctx.metrics
                    .pki_generation
                    .observe(started.elapsed().as_secs_f64());
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match api.create(&params, &secret).await {
                    Ok(s) => {
                        info!(secret = %name, "generated key material");
                        s
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => api
                        .get(&name)
                        .await
                        .ctx(|| format!("re-read Secret {ns}/{name}"))?,
                    Err(e) => {
                        return Err(Error::Kube {
                            action: format!("create Secret {ns}/{name}"),
                            source: e,
                        });
                    }
                }
            }
        };
        if let Some(msg) = foreign_controller(&secret, owner) {
            return Ok(Err(Cond::no(
                types::CERTIFICATES_AVAILABLE,
                reasons::OWNED_BY_ANOTHER_OBJECT,
                msg,
            )));
        }
        found.push(secret);
    }
    if !missing.is_empty() {
        return Ok(Err(Cond::no(
            types::CERTIFICATES_AVAILABLE,
            reasons::ROOT_KEY_MATERIAL_MISSING,
            format!(
                "{} missing, and the control plane is initialized: kamaji-rs does not \
                 generate a new one, because every joined node, issued kubeconfig and \
                 service-account token trusts the old one. Restore it from a backup (for \
                 example `kubectl apply` of the saved Secret, keys tls.crt and tls.key) and the \
                 control plane continues unchanged; nothing is rolled until then. A rotation \
                 to new key material is not supported yet.",
                missing.join(" and "),
            ),
        )));
    }
    let [ca_secret, proxy_secret, sa_secret]: [Secret; 3] = found
        .try_into()
        .map_err(|_| Error::Tenant("internal: three root Secrets expected".into()))?;
    let roots = Roots {
        ca: pki::ca_from_secret(&ca_secret)?,
        front_proxy_ca: pki::ca_from_secret(&proxy_secret)?,
        service_account: pki::sa_from_secret(&sa_secret)?,
    };
    Ok(Ok((roots, [ca_secret, proxy_secret, sa_secret])))
}

async fn set_kcp_endpoint(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    endpoint: &Endpoint,
) -> Result<(), Error> {
    let current = kcp.spec.control_plane_endpoint.as_ref();
    if current.and_then(|e| e.host.as_deref()) == Some(endpoint.host.as_str())
        && current.and_then(|e| e.port) == Some(i32::from(endpoint.port))
    {
        return Ok(());
    }
    Api::<KamajiControlPlane>::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default())
        .patch(
            &kcp.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"controlPlaneEndpoint": {"host": endpoint.host, "port": endpoint.port}}})),
        )
        .await
        .ctx(|| "set spec.controlPlaneEndpoint".into())?;
    Ok(())
}

/// Writes the endpoint into the Cluster when it has none, together with initialization
/// (capi-contract.md item 15); CAPI core would copy it too, but only after it reads our status.
async fn set_cluster_endpoint(
    cluster: &ClusterView,
    ctx: &Context,
    endpoint: &Endpoint,
) -> Result<(), Error> {
    if cluster.control_plane_endpoint.is_some() {
        return Ok(());
    }
    Api::<v1beta2::Cluster>::namespaced(ctx.client.clone(), &cluster.namespace)
        .patch(
            &cluster.name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"controlPlaneEndpoint": {"host": endpoint.host, "port": endpoint.port}}})),
        )
        .await
        .ctx(|| format!("set Cluster {}/{} spec.controlPlaneEndpoint", cluster.namespace, cluster.name))?;
    Ok(())
}

/// Applies the kubeadm join artifacts to the tenant when they changed (or cluster-info is
/// missing or stale there).
async fn bootstrap_tenant(
    spec: &ValidSpec,
    endpoint: &Endpoint,
    roots: &Roots,
    ds: &datastore::Resolved,
    kcp: &KamajiControlPlane,
    super_admin: Option<&Secret>,
    ctx: &Context,
) -> Result<(), Error> {
    let super_admin =
        super_admin.ok_or_else(|| Error::Tenant("super-admin kubeconfig missing".into()))?;
    let f = &kcp.spec.fields;
    let addons = f.addons.clone().unwrap_or_default();
    let image = |a: Option<&kamaji_api::kcp::AddonSpec>| AddonImage {
        repository: a.and_then(|a| a.image_repository.clone()),
        tag: a.and_then(|a| a.image_tag.clone()),
    };
    let kubelet = f.kubelet.clone().unwrap_or_default();
    let patches: json_patch::Patch = serde_json::from_value(serde_json::to_value(
        kubelet
            .configuration_json_patches
            .clone()
            .unwrap_or_default(),
    )?)?;
    let tenant_spec = TenantSpec {
        cluster_name: spec.cluster.name.clone(),
        version: spec.version_tag.clone(),
        endpoint_host: endpoint.host.clone(),
        endpoint_port: endpoint.port,
        network: spec.network_spec.clone(),
        image_registry: spec.registry.clone(),
        cert_sans: spec.cert_sans.clone(),
        etcd_endpoints: ds.server_urls(),
        kubelet: KubeletSpec {
            cgroup_driver: kubelet
                .cgroupfs
                .and_then(|c| serde_json::to_value(c).ok())
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            configuration_json_patches: patches,
            preferred_address_types: spec.kubelet_address_types.clone(),
        },
        coredns: AddonImage {
            repository: addons
                .core_dns
                .as_ref()
                .and_then(|c| c.image_repository.clone()),
            tag: addons.core_dns.as_ref().and_then(|c| c.image_tag.clone()),
        },
        kube_proxy: image(addons.kube_proxy.as_ref()),
    };
    let tenant = tenant_spec
        .validate()
        .map_err(|e| Error::Tenant(format!("{}: {}", e.field, e.reason)))?;
    let artifacts = TenantArtifacts::build(&tenant, roots.ca.cert_pem(), Addons::default())?;
    let objects = tenant::objects(&artifacts)?;
    let hash = plan::desired_hash(&objects);
    let uid = kcp.uid().unwrap_or_default();
    let client = tenant::client_from_secret(super_admin).await?;
    let cached = ctx
        .bootstrapped
        .lock()
        .ok()
        .and_then(|m| m.get(&uid).cloned());
    let want_info = artifacts
        .cluster_info
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .cloned();
    if cached.as_deref() == Some(hash.as_str())
        && tenant::cluster_info_kubeconfig(&client).await? == want_info
    {
        return Ok(());
    }
    tenant::apply(&client, &objects).await?;
    info!(kcp = %object_key(kcp), objects = objects.len(), "applied tenant artifacts");
    if let Ok(mut m) = ctx.bootstrapped.lock() {
        m.insert(uid, hash);
    }
    Ok(())
}

/// Adds `Reconciled=True` unless the pass already reports how it failed.
fn with_reconciled(mut conds: Vec<Cond>) -> Vec<Cond> {
    if !conds.iter().any(|c| c.type_ == types::RECONCILED) {
        conds.push(Cond::yes(
            types::RECONCILED,
            reasons::RECONCILE_SUCCEEDED,
            "",
        ));
    }
    conds
}

async fn write_conditions_only(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    conds: Vec<Cond>,
) -> Result<(), Error> {
    let conds = with_reconciled(conds);
    let prev = kcp.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let mut next = prev.clone();
    next.conditions = Some(status::merge_conditions(
        prev.conditions.as_deref().unwrap_or_default(),
        &conds,
        kcp.metadata.generation.unwrap_or(0),
        &now,
    ));
    next.external_managed_control_plane = Some(true);
    patch_status(kcp, ctx, &prev, &next).await
}

async fn write_status(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &ValidSpec,
    observed: &Observed,
    reachable: bool,
    conds: Vec<Cond>,
) -> Result<(), Error> {
    let conds = with_reconciled(conds);
    let prev = kcp.status.clone().unwrap_or_default();
    let selector = plan::selector_labels(spec)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let inputs = StatusInputs {
        previous: &prev,
        generation: kcp.metadata.generation.unwrap_or(0),
        desired: spec.replicas,
        replicas: Replicas::of(observed.deployment.as_ref()),
        selector: Some(selector),
        version: Some(spec.version_tag.clone()),
        api_reachable: reachable,
        kubeconfig_exists: observed
            .secrets
            .contains_key(&spec.names.kubeconfig_secret())
            || reachable,
        conditions: conds,
    };
    let now = Time(Timestamp::now());
    let next = status::compute(&inputs, &now);
    let was = prev
        .initialization
        .as_ref()
        .and_then(|i| i.control_plane_initialized)
        .unwrap_or(false);
    let is = next
        .initialization
        .as_ref()
        .and_then(|i| i.control_plane_initialized)
        .unwrap_or(false);
    if !was && is {
        if let Some(created) = kcp.metadata.creation_timestamp.as_ref() {
            let secs = now.0.duration_since(created.0).as_secs_f64();
            ctx.metrics.time_to_initialized.observe(secs);
        }
        publish(
            ctx,
            kcp,
            EventType::Normal,
            reasons::INITIALIZED,
            "the tenant API server answers through the control-plane endpoint",
        )
        .await;
    }
    ctx.metrics.set_tenant(
        &object_key(kcp),
        Some(
            next.conditions
                .iter()
                .flatten()
                .map(|c| (c.type_.clone(), c.status.clone()))
                .collect(),
        ),
    );
    patch_status(kcp, ctx, &prev, &next).await
}

async fn patch_status(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    prev: &kamaji_api::KamajiControlPlaneStatus,
    next: &kamaji_api::KamajiControlPlaneStatus,
) -> Result<(), Error> {
    if prev == next {
        return Ok(());
    }
    Api::<KamajiControlPlane>::namespaced(ctx.client.clone(), &kcp.namespace().unwrap_or_default())
        .patch_status(
            &kcp.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": next})),
        )
        .await
        .ctx(|| "write status".into())?;
    Ok(())
}

async fn publish(
    ctx: &Context,
    kcp: &KamajiControlPlane,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &kcp.object_ref(&())).await {
        warn!("publishing event: {e}");
    }
}

/// The deletion branch: stop the control plane, remove the tenant's datastore prefix, remove
/// what kamaji-rs created, then release the finalizer. Completes when parts are already gone.
async fn delete(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    owner: Option<&Owner>,
) -> Result<Action, Error> {
    if !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = kcp.namespace().unwrap_or_default();
    let cluster_name = owner
        .map(|o| o.view.name.clone())
        .or_else(|| kcp.labels().get(CLUSTER_NAME_LABEL).cloned())
        .unwrap_or_else(|| kcp.name_any());
    let names = kamaji_api::names::ObjectNames::new(&cluster_name, &kcp.name_any());
    write_conditions_only(
        kcp,
        ctx,
        vec![Cond::yes(
            types::DELETING,
            reasons::WAITING_FOR_CONTROL_PLANE_DELETION,
            "stopping the control plane",
        )],
    )
    .await?;

    if !stop_control_plane(ctx, &ns, &names).await? {
        // Pod and Deployment deletions produce events on the owned Deployment only until it is
        // gone; check again shortly for the pods.
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    remove_datastore_prefix(kcp, ctx, &ns, &names).await?;
    remove_owned(kcp, ctx, &ns, &names).await?;
    // 4. Release the finalizer.
    release_finalizer(kcp, ctx).await
}

/// Removes kamaji-rs's finalizer from the KamajiControlPlane (a no-op when it is absent).
async fn release_finalizer(kcp: &KamajiControlPlane, ctx: &Context) -> Result<Action, Error> {
    if !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let ns = kcp.namespace().unwrap_or_default();
    let client = &ctx.client;
    let finalizers: Vec<String> = kcp
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    Api::<KamajiControlPlane>::namespaced(client.clone(), &ns)
        .patch(
            &kcp.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .ctx(|| "remove finalizer".into())?;
    Ok(Action::await_change())
}

/// Deletes the control-plane Deployment (foreground) and reports whether it and its pods are
/// gone, so that nothing writes to the datastore prefix any more.
async fn stop_control_plane(
    ctx: &Context,
    ns: &str,
    names: &kamaji_api::names::ObjectNames,
) -> Result<bool, Error> {
    let client = &ctx.client;
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    match deployments
        .delete(
            &names.deployment(),
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Foreground),
                ..DeleteParams::default()
            },
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            return Err(Error::Kube {
                action: "delete Deployment".into(),
                source: e,
            });
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!(
            "{}={}",
            kamaji_api::meta::KAMAJI_NAME_LABEL,
            names.pod_label_value()
        )))
        .await
        .ctx(|| "list control-plane pods".into())?;
    let deployment_left = deployments
        .get_opt(&names.deployment())
        .await
        .ctx(|| "get Deployment".into())?
        .is_some();
    Ok(pods.items.is_empty() && !deployment_left)
}

/// Removes the tenant's keys from its datastore with a short-lived client certificate the
/// manager issues itself from the DataStore CA, in memory: cleanup never depends on the
/// tenant's `<cluster>-apiserver-etcd-client` Secret, which a namespace deletion may remove
/// first. When the DataStore is gone the keys cannot be reached and a Warning event says so.
async fn remove_datastore_prefix(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    ns: &str,
    names: &kamaji_api::names::ObjectNames,
) -> Result<(), Error> {
    let schema = spec::datastore_schema(kcp);
    let ds_name = spec::datastore_name(kcp, &ctx.config.default_datastore);
    match datastore::resolve(&ctx.client, ds_name).await {
        Ok(ds) => {
            let (leaf, _) = pki::datastore_client(
                &ds.ca_cert,
                &ds.ca_key,
                &datastore_common_name(ns, names),
                None,
                ctx.config.key_algorithm,
                SystemTime::now(),
            )?;
            let credentials = Credentials {
                cert: leaf.cert_pem().to_owned(),
                key: leaf.key_pem().to_owned(),
            };
            let prefix = kamaji_api::names::etcd_prefix(&schema);
            let deleted = datastore::delete_prefix(&ds, &credentials, &prefix)
                .await
                .map_err(Error::Datastore)?;
            info!(kcp = %object_key(kcp), prefix, deleted, "removed the tenant's datastore keys");
        }
        Err(p) => {
            warn!(kcp = %object_key(kcp), "datastore prefix not removed: {}", p.message());
            publish(
                ctx,
                kcp,
                EventType::Warning,
                reasons::WAITING_FOR_DATASTORE_CLEANUP,
                &format!(
                    "the tenant's datastore keys were not removed: {}",
                    p.message()
                ),
            )
            .await;
        }
    }
    Ok(())
}

/// Deletes the Service and the Secrets this control plane owns (they would also be
/// garbage-collected through their owner references) and forgets in-memory state.
async fn remove_owned(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    ns: &str,
    names: &kamaji_api::names::ObjectNames,
) -> Result<(), Error> {
    let client = &ctx.client;
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let _ = Api::<Service>::namespaced(client.clone(), ns)
        .delete(&names.service(), &DeleteParams::default())
        .await;
    let owned_secrets = secrets
        .list(&ListParams::default().labels(&format!(
            "{CLUSTER_NAME_LABEL}={}",
            names.cluster_label_value()
        )))
        .await
        .ctx(|| "list Secrets".into())?;
    let uid = kcp.uid().unwrap_or_default();
    for s in owned_secrets
        .items
        .iter()
        .filter(|s| s.owner_references().iter().any(|o| o.uid == uid))
    {
        let _ = secrets
            .delete(&s.name_any(), &DeleteParams::default())
            .await;
    }
    if let Ok(mut m) = ctx.bootstrapped.lock() {
        m.remove(&uid);
    }
    ctx.metrics.set_tenant(&object_key(kcp), None);

    Ok(())
}
