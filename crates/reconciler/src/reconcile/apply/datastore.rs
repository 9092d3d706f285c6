//! The first writes of a pass, on the datastore itself: the claim on the schema, the tenant's
//! etcd user and role, and etcd authentication once every tenant on the DataStore has its user
//! ([`crate::datastore::auth`]).

use kamaji_api::conditions::{reasons, types};
use kube::ResourceExt as _;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::RECHECK;
use crate::context::Context;
use crate::datastore::{self, Resolved, auth, sql};
use crate::error::Error;
use crate::reconcile::kcp::object_key;
use crate::reconcile::plan::SchemaClaim;
use crate::reconcile::report::Report;
use crate::reconcile::status::Cond;
use crate::reconcile::validate::{datastore_names, datastore_schema};

/// Claims the control plane's datastore schema on each of its DataStores and grants its etcd
/// user and role there, once per manager process and DataStore (remembered:
/// [`crate::memory::Memory::claimed`]), in the DataStore's kept session ([`auth::Sessions`]);
/// then turns etcd authentication on where every control plane is granted ([`enable_when_granted`]). `Some(action)` stops the pass when another control
/// plane holds the schema (`DataStoreReady=False`, reason `DataStoreSchemaInUse`, naming it):
/// nothing is written for this one, whose API server would otherwise share the other's keys.
/// It looks again after [`RECHECK`]: the holder's deletion is no event of this control plane.
///
/// # Errors
/// [`Error::Datastore`] when etcd refuses a request or cannot be reached (the pass is retried).
pub async fn claim_and_grant(
    ctx: &Context,
    claim: &SchemaClaim,
    report: &mut Report,
) -> Result<Option<Action>, Error> {
    for ds in &claim.datastores {
        let remembered = (ds.name.clone(), claim.schema.clone(), claim.holder.clone());
        if ctx.memory().claimed(&remembered) {
            continue;
        }
        if let Some(access) = &ds.sql {
            if let Some(stop) = provision_sql(ctx, ds, access, claim, report).await? {
                return Ok(Some(stop));
            }
            continue;
        }
        let sessions = &ctx.datastore_sessions();
        let mut session = sessions.get(ds).await.map_err(Error::Datastore)?;
        let began = session.clone();
        let holder = match auth::claim_and_grant(
            ds,
            &mut session,
            &claim.schema,
            &claim.holder,
            &claim.user,
        )
        .await
        {
            Ok(holder) => holder,
            Err(e) => {
                // The next pass opens a new session: this one may be what failed.
                sessions.forget(ds).await;
                return Err(Error::Datastore(e));
            }
        };
        if !auth::same_token(&began, &session) {
            sessions.keep_reopened(ds, &session).await;
        }
        if holder != claim.holder {
            let msg = format!(
                "spec.dataStoreSchema: {} on DataStore {} belongs to KamajiControlPlane {holder}, \
                 which claimed it first; two control planes on one schema would share their \
                 objects: recreate this one with another dataStoreSchema",
                claim.schema, ds.name
            );
            return Ok(Some(refuse_schema(report, msg)));
        }
        info!(holder = %claim.holder, datastore = %ds.name, schema = %claim.schema, user = %claim.user, "datastore schema claimed, etcd user and role granted");
        ctx.memory().remember_claim(remembered);
        enable_when_granted(ctx, ds, &session).await?;
    }
    Ok(None)
}

/// The SQL counterpart of the etcd claim and grant ([`sql::provision`]): claims the tenant's
/// database and user and creates them, once per manager process, DataStore and tenant
/// password (a changed administrator password gives the tenant a new one, set on the next
/// pass). `Some(action)` when another control plane holds the database or the user
/// (`DataStoreReady=False`, reason `DataStoreSchemaInUse`, naming the field and the holder).
async fn provision_sql(
    ctx: &Context,
    ds: &Resolved,
    access: &sql::SqlAccess,
    claim: &SchemaClaim,
    report: &mut Report,
) -> Result<Option<Action>, Error> {
    let tenant = sql::TenantDatabase {
        database: &claim.schema,
        user: &claim.user,
        holder: &claim.holder,
    };
    let password = sql::tenant_password(access, &ds.name, &tenant, &claim.password_salt);
    // The memo's DataStore part carries the password's first digits: a new password is set
    // again.
    let remembered = (
        format!("{}#{}", ds.name, &password[..16]),
        claim.schema.clone(),
        claim.holder.clone(),
    );
    if ctx.memory().claimed(&remembered) {
        return Ok(None);
    }
    match sql::provision(access, &ds.endpoints, &tenant, &password)
        .await
        .map_err(|e| Error::Datastore(format!("DataStore {}: {e}", ds.name)))?
    {
        sql::Provisioned::Foreign { field, name } => {
            let msg = format!(
                "{field}: {name} already exists on DataStore {} and was not created by kamaji-rs \
                 for a control plane (another application's, or built in): it is never taken \
                 over; recreate this control plane with another {}",
                ds.name,
                field.trim_start_matches("spec.")
            );
            Ok(Some(refuse_schema(report, msg)))
        }
        sql::Provisioned::Ready => {
            info!(holder = %claim.holder, datastore = %ds.name, database = %claim.schema, user = %claim.user, "datastore database and user claimed and created");
            ctx.memory().remember_claim(remembered);
            Ok(None)
        }
        sql::Provisioned::HeldBy {
            field,
            name,
            holder,
        } => {
            let msg = format!(
                "{field}: {name} on DataStore {} belongs to KamajiControlPlane {holder}, which \
                 claimed it first; two control planes on one database or user would share \
                 their objects: recreate this one with another {}",
                ds.name,
                field.trim_start_matches("spec.")
            );
            Ok(Some(refuse_schema(report, msg)))
        }
    }
}

/// Reports that another control plane holds the schema or user, or that it exists unclaimed
/// (`DataStoreReady=False`, reason `DataStoreSchemaInUse`, and a Warning event), and looks
/// again after [`RECHECK`]: the holder's deletion is no event of this control plane.
fn refuse_schema(report: &mut Report, msg: String) -> Action {
    report.warn(reasons::DATASTORE_SCHEMA_IN_USE, &msg);
    report.push(Cond::no(
        types::DATASTORE_READY,
        reasons::DATASTORE_SCHEMA_IN_USE,
        msg,
    ));
    Action::requeue(RECHECK)
}

/// Turns etcd authentication on for `ds` ([`auth::enable`]) unless an initialized control plane
/// the controller watches on it has not been granted its user by this process yet (it ran an
/// API server before claims and users existed, and would lose its access): that one's own pass
/// grants it and tries again.
async fn enable_when_granted(
    ctx: &Context,
    ds: &Resolved,
    session: &datastore::Session,
) -> Result<(), Error> {
    if session.token.is_some() {
        return Ok(());
    }
    if let Some(store) = ctx.control_planes() {
        if store.wait_until_ready().await.is_err() {
            return Ok(());
        }
        let granted = ctx.memory().claims();
        let ungranted: Vec<String> = store
            .state()
            .iter()
            .filter(|k| k.metadata.deletion_timestamp.is_none())
            .filter(|k| k.status.as_ref().and_then(|s| s.initialized) == Some(true))
            .filter(|k| {
                datastore_names(k, &ctx.config().default_datastore).contains(&ds.name.as_str())
            })
            .filter(|k| {
                !granted.contains(&(ds.name.clone(), datastore_schema(k), object_key(k.as_ref())))
            })
            .map(|k| format!("{}/{}", k.namespace().unwrap_or_default(), k.name_any()))
            .collect();
        if !ungranted.is_empty() {
            info!(datastore = %ds.name, waiting_for = ?ungranted, "etcd authentication stays off until these control planes have their users");
            return Ok(());
        }
    }
    match auth::enable(ds, session).await.map_err(Error::Datastore)? {
        auth::Enablement::Enabled => {
            info!(datastore = %ds.name, "etcd authentication enabled: each tenant reads and writes its own prefix only");
            // The kept session has no token: etcd now refuses it.
            ctx.datastore_sessions().forget(ds).await;
        }
        auth::Enablement::AlreadyEnabled => ctx.datastore_sessions().forget(ds).await,
        auth::Enablement::Waiting(schemas) => {
            warn!(datastore = %ds.name, waiting_for = ?schemas, "etcd authentication stays off: claimed schemas without a role");
        }
    }
    Ok(())
}
