//! The **deletion** branch: stop the control plane, remove the tenant's datastore prefix (from
//! its DataStore and those of its `dataStoreOverrides`), remove what kamaji-rs created, then
//! release the finalizer. Completes when parts are already gone; a control plane deleted by
//! `clusterctl move` only has its finalizer released.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kamaji_api::KamajiControlPlane;
use kamaji_api::cluster::ClusterView;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::{CLUSTER_NAME_LABEL, FINALIZER, KAMAJI_NAME_LABEL};
use kamaji_api::names::ObjectNames;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PropagationPolicy};
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::kcp::object_key;
use super::plan::pki::datastore_common_name;
use super::report::Report;
use super::status::Cond;
use super::validate::{datastore_names, datastore_schema};
use crate::context::Context;
use crate::datastore::{self, sql};
use crate::error::{Error, KubeContext};

/// Deletes the control plane of `kcp` (see the module docs). `Ok(None)` once the finalizer is
/// released (the object is about to go; no status to write), else when to look again.
///
/// # Errors
/// [`Error`] when a deletion or the datastore cleanup fails (retried with backoff).
pub async fn delete(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    owner: Option<&ClusterView>,
    report: &mut Report,
) -> Result<Option<Action>, Error> {
    if !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Some(Action::await_change()));
    }
    let ns = kcp.namespace().unwrap_or_default();
    let cluster_name = owner
        .map(|o| o.name.clone())
        .or_else(|| kcp.labels().get(CLUSTER_NAME_LABEL).cloned())
        .unwrap_or_else(|| kcp.name_any());
    let names = ObjectNames::new(&cluster_name, &kcp.name_any());
    report.push(Cond::yes(
        types::DELETING,
        reasons::WAITING_FOR_CONTROL_PLANE_DELETION,
        "stopping the control plane",
    ));
    if !stop_control_plane(ctx, &ns, &names).await? {
        // Pod and Deployment deletions produce events on the owned Deployment only until it is
        // gone; check again shortly for the pods.
        return Ok(Some(Action::requeue(Duration::from_secs(2))));
    }
    remove_datastore_prefix(kcp, ctx, &ns, &names, report).await?;
    remove_owned(kcp, ctx, &ns, &names).await?;
    release_finalizer(kcp, ctx).await?;
    Ok(None)
}

/// Removes kamaji-rs's finalizer from the KamajiControlPlane (a no-op when it is absent).
///
/// # Errors
/// [`Error::Kube`] when the patch fails.
pub async fn release_finalizer(kcp: &KamajiControlPlane, ctx: &Context) -> Result<(), Error> {
    if !kcp.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let finalizers: Vec<String> = kcp
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    Api::<KamajiControlPlane>::namespaced(
        ctx.client().clone(),
        &kcp.namespace().unwrap_or_default(),
    )
    .patch(
        &kcp.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": finalizers}})),
    )
    .await
    .ctx(|| "remove finalizer".into())?;
    Ok(())
}

/// Deletes the control-plane Deployment (foreground) and reports whether it and its pods are
/// gone, so that nothing writes to the datastore prefix any more.
async fn stop_control_plane(ctx: &Context, ns: &str, names: &ObjectNames) -> Result<bool, Error> {
    let deployments = Api::<Deployment>::namespaced(ctx.client().clone(), ns);
    let foreground = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    match deployments.delete(&names.deployment(), &foreground).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            return Err(Error::Kube {
                action: "delete Deployment".into(),
                source: e,
            });
        }
    }
    let pods = Api::<Pod>::namespaced(ctx.client().clone(), ns)
        .list(
            &ListParams::default()
                .labels(&format!("{KAMAJI_NAME_LABEL}={}", names.pod_label_value())),
        )
        .await
        .ctx(|| "list control-plane pods".into())?;
    let deployment_left = deployments
        .get_opt(&names.deployment())
        .await
        .ctx(|| "get Deployment".into())?
        .is_some();
    Ok(pods.items.is_empty() && !deployment_left)
}

/// Removes the tenant's keys from its datastore, and from the DataStores of its
/// `spec.dataStoreOverrides` (the same prefix), then its etcd user and role, each in the
/// manager's own session ([`datastore::auth::session`], a client certificate issued in memory
/// from that DataStore's CA): cleanup never depends on the tenant's
/// `<cluster>-apiserver-etcd-client` Secret, which a namespace deletion may remove first. When a DataStore is gone its keys cannot be reached and a Warning event says so. An
/// override DataStore with another CA than the control plane's was refused
/// (`DataStoreReady=False`), so the API server never wrote there: it is left alone. So are the
/// keys of a schema another control plane holds ([`datastore::claim_schema`]): this one was
/// refused and never wrote there. Once the keys are gone the claim is released.
async fn remove_datastore_prefix(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    ns: &str,
    names: &ObjectNames,
    report: &mut Report,
) -> Result<(), Error> {
    let schema = datastore_schema(kcp);
    let prefix = kamaji_api::names::etcd_prefix(&schema);
    let holder = object_key(kcp);
    let mut primary_ca: Option<String> = None;
    for (i, ds_name) in datastore_names(kcp, &ctx.config().default_datastore)
        .into_iter()
        .enumerate()
    {
        let ds = match datastore::resolve(ctx.client(), ctx.datastores(), ds_name).await {
            Ok(ds) => ds,
            Err(p) => {
                warn!(kcp = %object_key(kcp), datastore = ds_name, "datastore prefix not removed: {}", p.message());
                report.warn(
                    reasons::WAITING_FOR_DATASTORE_CLEANUP,
                    &format!(
                        "the tenant's datastore keys were not removed: {}",
                        p.message()
                    ),
                );
                continue;
            }
        };
        if let Some(access) = &ds.sql {
            // Overrides are refused on SQL DataStores: only the control plane's own.
            if i == 0 {
                remove_sql_database(kcp, ctx, &ds, access, &schema, &holder, names).await?;
            }
            continue;
        }
        if i == 0 {
            primary_ca = Some(ds.ca_cert.clone());
        } else if primary_ca
            .as_deref()
            .is_some_and(|ca| !datastore::same_ca(ca, &ds.ca_cert))
        {
            info!(kcp = %object_key(kcp), datastore = ds_name, "not the control plane's CA: the API server never wrote there");
            continue;
        }
        let session = datastore::auth::session(&ds)
            .await
            .map_err(Error::Datastore)?;
        // Another control plane holds the schema: this one was refused and never wrote there.
        if let datastore::Claim::HeldBy(other) = datastore::schema_claim(&ds, &session, &schema)
            .await
            .map_err(Error::Datastore)?
            && other != holder
        {
            info!(kcp = %object_key(kcp), datastore = ds_name, prefix, holder = %other, "the datastore schema belongs to another control plane: its keys stay");
            continue;
        }
        let deleted = datastore::delete_prefix(&ds, &session, &prefix)
            .await
            .map_err(Error::Datastore)?;
        datastore::auth::revoke_tenant(&ds, &session, &schema, &datastore_common_name(ns, names))
            .await
            .map_err(Error::Datastore)?;
        datastore::release_schema(&ds, &session, &schema, &holder)
            .await
            .map_err(Error::Datastore)?;
        info!(kcp = %object_key(kcp), datastore = ds_name, prefix, deleted, "removed the tenant's datastore keys, its etcd user and role, and released its schema");
        let released = (ds_name.to_owned(), schema.clone(), holder.clone());
        ctx.memory().forget_claims(|c| *c != released);
    }
    Ok(())
}

/// Drops the tenant's database and user on a PostgreSQL or MySQL DataStore and releases its
/// claims ([`sql::deprovision`]); a database another control plane holds stays.
async fn remove_sql_database(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    ds: &datastore::Resolved,
    access: &sql::SqlAccess,
    schema: &str,
    holder: &str,
    names: &ObjectNames,
) -> Result<(), Error> {
    let ns = kcp.metadata.namespace.as_deref().unwrap_or_default();
    let user = sql::tenant_user(
        access,
        kcp.spec
            .fields
            .data_store_username
            .as_deref()
            .filter(|u| !u.is_empty()),
        &datastore_common_name(ns, names),
    );
    let tenant = sql::TenantDatabase {
        database: schema,
        user: &user,
        holder,
    };
    match sql::deprovision(access, &ds.endpoints, &tenant)
        .await
        .map_err(|e| Error::Datastore(format!("DataStore {}: {e}", ds.name)))?
    {
        sql::Deprovisioned::Removed => {
            info!(kcp = %object_key(kcp), datastore = %ds.name, database = schema, user, "dropped the tenant's database and user and released their claims");
        }
        sql::Deprovisioned::HeldBy(other) => {
            info!(kcp = %object_key(kcp), datastore = %ds.name, database = schema, holder = %other, "the database belongs to another control plane: it stays");
        }
    }
    ctx.memory().forget_claims(|(d, s, h)| {
        !(d.starts_with(&format!("{}#", ds.name)) && s == schema && h == holder)
    });
    Ok(())
}

/// Deletes the Service and the Secrets this control plane owns (they would also be
/// garbage-collected through their owner references) and forgets in-memory state.
async fn remove_owned(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    ns: &str,
    names: &ObjectNames,
) -> Result<(), Error> {
    let secrets = Api::<Secret>::namespaced(ctx.client().clone(), ns);
    let _ = Api::<Service>::namespaced(ctx.client().clone(), ns)
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
    ctx.memory().forget(&uid);
    ctx.metrics().set_tenant(&object_key(kcp), None);
    Ok(())
}
