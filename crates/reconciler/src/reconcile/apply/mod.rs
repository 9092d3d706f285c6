//! The **apply** step: the only place that writes what a [`Plan`] holds, in order — the claim
//! on the datastore schema and the tenant's etcd user ([`datastore`]), the roots
//! with create-if-absent, the datastore client, the Service, the endpoint into the
//! KamajiControlPlane (once), the leaves, the Deployment, the removal of v0.1 Secrets, then the
//! tenant's kubeadm artifacts once the tenant answers, and last the endpoint into an
//! infrastructure cluster whose kind declares it (once, while empty). The Cluster's endpoint is
//! Cluster API's copy of the KamajiControlPlane's (capi-contract.md item 14), made when it reads
//! `controlPlaneInitialized`, which the endpoint precedes (item 15).
//!
//! Every management-cluster object is server-side applied with the field manager
//! `kamaji-rs` and the desired-hash annotation, and skipped when the live object carries the
//! same hash and still holds everything kamaji-rs sets ([`drift`]): a pass with nothing to
//! change writes nothing. An object controlled by another object is never written; the pass
//! stops with a condition naming both.

pub mod datastore;
pub mod drift;
pub mod machines;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kamaji_api::KamajiControlPlane;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::meta::FIELD_MANAGER;
use kamaji_bootstrap::leaves::LeafSecret;
use kamaji_bootstrap::pki::LeafRole;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::kcp::object_key;
use super::observe::Observed;
use super::plan::endpoint::Endpoint;
use super::plan::pki::Root;
use super::plan::{ControlPlane, DESIRED_HASH_ANNOTATION, Plan, TenantObjects, desired_hash};
use super::report::Report;
use super::status::{Agents, Cond, TenantSide};
use super::validate::ValidSpec;
use crate::context::Context;
use crate::error::{Error, KubeContext};
use crate::infrastructure::InfrastructureCluster;
use crate::lean::Lean;
use crate::replicas::Replicas;
use crate::tenant;

/// How long a pass waits before looking again at a state that produces no event for this
/// control plane (an object another controller owns).
pub const RECHECK: Duration = Duration::from_mins(1);

/// What the apply step tells the driver: go on with a value, or stop the pass here.
#[derive(Debug)]
pub enum Flow<T> {
    /// Go on.
    Continue(T),
    /// Stop; look again as the action says.
    Stop(Action),
    /// Run the steps again, in this pass: the step wrote what the plan was waiting for (the
    /// Service whose address the endpoint and the serving certificate need). From this
    /// round ([`super::observe::after_own_writes`]) when given, else from observe.
    Again(Option<Box<Round>>),
}

/// What a round of the apply step starts from: the observation, and what the step reads of
/// the namespace's Secrets in this round. A second round that starts from the first round's
/// observation reuses that read too ([`Flow::Again`]); one that observes anew reads it anew.
#[derive(Debug, Clone)]
pub struct Round {
    /// What the observe step read, or what the first round left
    /// ([`super::observe::after_own_writes`]).
    pub observed: Observed,
    /// The names of every Secret in the namespace, read at most once per round (on the first
    /// Secret the step writes that [`Observed::secrets`] lacks): `None` inside when they did
    /// not fit in one page.
    namespace_secrets: tokio::sync::OnceCell<Option<BTreeSet<String>>>,
}

impl Round {
    /// A round starting from `observed`, the namespace's Secrets not read yet.
    #[must_use]
    pub fn new(observed: Observed) -> Self {
        Self {
            observed,
            namespace_secrets: tokio::sync::OnceCell::new(),
        }
    }
}

/// What the apply step wrote or found.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The Deployment as stored (`None` while the endpoint is unknown).
    pub deployment: Option<Deployment>,
    /// Whether this pass changed the Deployment's pod template (a rollout begins).
    pub template_changed: bool,
    /// When to look again.
    pub requeue: Action,
}

/// What [`apply_owned`] did.
enum Outcome<K> {
    /// The object as stored: written now, or already as desired.
    Stored(K),
    /// The object exists and another object controls it; nothing was written. The message
    /// names the object and its controller.
    Conflict(String),
}

/// Writes `plan`, in numbered steps: each step's comment says why it comes where it does.
/// Stops (with a condition in `report`) at the first object another object controls, at a root
/// another writer created first (the next pass uses theirs), and while the endpoint is unknown.
/// What it did that conditions report is recorded in `report`
/// ([`super::status::AppliedRecord`]).
///
/// # Errors
/// [`Error`] when a write fails.
pub async fn apply(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &ValidSpec,
    round: &Round,
    infrastructure: Option<&InfrastructureCluster>,
    plan: Plan,
    report: &mut Report,
) -> Result<Flow<Applied>, Error> {
    let (ns, observed) = (spec.namespace.as_str(), &round.observed);
    // The Secrets this round writes before the Service, for a second round's observation.
    let mut written = Vec::new();
    // 1. The schema claim, the roots and the rotations' next steps first: nothing is written on
    //    a schema another control plane holds, and every later Secret is issued by these roots.
    if let Some(stop) = roots(ctx, ns, round, &plan, report, &mut written).await? {
        return Ok(Flow::Stop(stop));
    }
    // 2. The workers a CA rotation replaces, once step 1 has recorded that the new CA is trusted.
    roll_workers(ctx, spec, &plan.certificate_authorities).await?;
    // 3. The datastore client, the Service and its exposure: the Service gives the endpoint.
    let service = match front(ctx, ns, &plan, round, &mut written).await? {
        Ok(service) => service,
        Err((type_, msg)) => return Ok(Flow::Stop(conflict(report, type_, msg))),
    };
    // 4. The rest needs the endpoint: planned already, or given by the Service of step 3.
    let cp = match with_endpoint(spec, round, plan.control_plane, written, service, report) {
        Flow::Continue(cp) => cp,
        Flow::Stop(action) => return Ok(Flow::Stop(action)),
        Flow::Again(next) => return Ok(Flow::Again(next)),
    };
    // 5. The endpoint into the KamajiControlPlane, before anything that serves at it.
    if !set_kcp_endpoint(kcp, ctx, &cp.endpoint, report).await? {
        return Ok(Flow::Stop(Action::await_change()));
    }
    // 6. The leaves and kubeconfigs, before the Deployment whose pods mount them.
    let super_admin = match leaves(ctx, ns, round, &plan.owner, cp.leaves, report).await? {
        Ok(super_admin) => super_admin,
        Err(stop) => return Ok(Flow::Stop(stop)),
    };
    report.applied.key_material = Some(spec.names.kubeconfig_secret());
    // 7. The Deployment, then the Secrets its pods no longer mount once it has rolled out.
    let (deployment, template_changed) =
        match deployment(ctx, spec, observed, &plan.owner, cp.deployment, &cp.legacy).await? {
            Outcome::Stored(stored) => stored,
            Outcome::Conflict(msg) => return Ok(Flow::Stop(deployment_conflict(report, msg))),
        };
    // 8. The tenant's artifacts, once its API answered: written as the super-admin of step 6.
    let admin = super_admin.as_ref();
    let (side, requeue) =
        tenant_side(kcp, ctx, spec, cp.tenant.as_ref(), admin, &deployment).await?;
    report.applied.tenant = Some(side);
    // 9. Last, the endpoint into the infrastructure cluster: a provider refusing it (its
    //    admission, missing RBAC) holds up nothing of the control plane; the failure is the
    //    pass's (Reconciled=False, retried with backoff).
    set_infrastructure_endpoint(ctx, ns, infrastructure, &cp.endpoint).await?;
    // 10. When to look again: `spec.rollout.after` passing, a rotation waiting for pods to end
    //     or its overlap to pass, a leaf's renewal time; no event says so.
    let (sa, ca) = (&plan.service_account, &plan.certificate_authorities);
    let due = [sa.due, ca.due, plan.encryption_keys.due, cp.rollout_due];
    let requeue = timed_requeue(
        kcp,
        requeue,
        due.into_iter().flatten().min(),
        cp.renewal_due,
    );
    Ok(Flow::Continue(Applied {
        deployment: Some(deployment),
        template_changed,
        requeue: Action::requeue(requeue),
    }))
}

/// Sets `spec.rollout.after` on the Cluster's MachineDeployments when a CA rotation replaces
/// its workers ([`machines::roll_machine_deployments`]).
async fn roll_workers(
    ctx: &Context,
    spec: &ValidSpec,
    authorities: &super::plan::ca_rotation::CertificateAuthorities,
) -> Result<(), Error> {
    let Some(after) = authorities.roll_workers_after else {
        return Ok(());
    };
    machines::roll_machine_deployments(ctx.client(), &spec.namespace, &spec.cluster_name, after)
        .await?;
    Ok(())
}

/// The part of the plan that needs the endpoint (`planned`), or the flow of a pass without it:
/// when the Service this round created (or changed) gives what the plan waited for, the steps
/// run again in this pass ([`Flow::Again`], from this round's observation and what it
/// `written`) instead of in the pass its event wakes; otherwise the pass waits
/// (`EndpointReady=False` reported).
fn with_endpoint(
    spec: &ValidSpec,
    round: &Round,
    planned: Result<ControlPlane, Cond>,
    written: Vec<Secret>,
    service: Service,
    report: &mut Report,
) -> Flow<ControlPlane> {
    let observed = &round.observed;
    match planned {
        Ok(cp) => Flow::Continue(cp),
        Err(_) if observed.service.is_none() && super::plan::endpoint_known(spec, &service) => {
            let next = super::observe::after_own_writes(spec, observed, written, service);
            Flow::Again(next.map(|observed| {
                Box::new(Round {
                    observed: *observed,
                    namespace_secrets: round.namespace_secrets.clone(),
                })
            }))
        }
        Err(waiting) => {
            report.push(waiting);
            Flow::Stop(Action::await_change())
        }
    }
}

/// Writes the leaves and kubeconfigs in order; returns the super-admin kubeconfig as stored
/// (the provider's identity in the tenant), or stops at one another object controls.
async fn leaves(
    ctx: &Context,
    ns: &str,
    round: &Round,
    owner: &OwnerReference,
    leaves: Vec<LeafSecret>,
    report: &mut Report,
) -> Result<Result<Option<Secret>, Action>, Error> {
    let mut super_admin = None;
    for leaf in leaves {
        let role = leaf.role;
        match apply_secret(ctx, ns, leaf.secret, round, owner).await? {
            Outcome::Stored(s) if role == LeafRole::SuperAdmin => super_admin = Some(s),
            Outcome::Stored(_) => {}
            Outcome::Conflict(msg) => {
                let type_ = match role {
                    LeafRole::Admin => types::KUBECONFIG_AVAILABLE,
                    _ => types::CERTIFICATES_AVAILABLE,
                };
                return Ok(Err(conflict(report, type_, msg)));
            }
        }
    }
    Ok(Ok(super_admin))
}

/// Writes the Deployment (read by the observe step) and, once it has rolled out, deletes the
/// Secrets no pod mounts any more (`legacy`); returns it as stored and whether this pass
/// changed its pod template (a rollout begins).
async fn deployment(
    ctx: &Context,
    spec: &ValidSpec,
    observed: &Observed,
    owner: &OwnerReference,
    desired: Deployment,
    legacy: &[Secret],
) -> Result<Outcome<(Deployment, bool)>, Error> {
    let read = Known::Read(observed.deployment.as_ref());
    let deployment = match apply_known(ctx, &spec.namespace, desired, read, owner).await? {
        Outcome::Stored(d) => d,
        Outcome::Conflict(msg) => return Ok(Outcome::Conflict(msg)),
    };
    let template_changed = observed
        .deployment
        .as_ref()
        .is_some_and(|old| template_of(old) != template_of(&deployment));
    remove_legacy_secrets(ctx, spec, legacy, &deployment).await?;
    Ok(Outcome::Stored((deployment, template_changed)))
}

/// Writes the endpoint into the infrastructure cluster when there is one
/// ([`crate::infrastructure::set_endpoint`]: once, while empty).
async fn set_infrastructure_endpoint(
    ctx: &Context,
    ns: &str,
    infrastructure: Option<&InfrastructureCluster>,
    endpoint: &Endpoint,
) -> Result<(), Error> {
    let Some(infrastructure) = infrastructure else {
        return Ok(());
    };
    crate::infrastructure::set_endpoint(
        ctx.client(),
        ns,
        infrastructure,
        &endpoint.host,
        endpoint.port,
    )
    .await
}

/// The next step of a rotation: what it writes, in order (a root only after the rotation
/// Secret holds what it replaces), and the conditions it reports.
struct RotationStep<'a> {
    what: &'a str,
    writes: Vec<Secret>,
    conditions: Vec<Cond>,
}

/// Writes a rotation's next step (adding the Secrets to `written` as stored) and reports its
/// conditions; `Some(action)` stops the pass at a Secret another object controls.
async fn rotation_step(
    ctx: &Context,
    ns: &str,
    round: &Round,
    owner: &OwnerReference,
    step: RotationStep<'_>,
    report: &mut Report,
    written: &mut Vec<Secret>,
) -> Result<Option<Action>, Error> {
    for secret in step.writes {
        let name = secret.name_any();
        info!(secret = %format!("{ns}/{name}"), "{}: writing the next step", step.what);
        match apply_secret(ctx, ns, secret, round, owner).await? {
            Outcome::Stored(s) => written.push(s),
            Outcome::Conflict(msg) => {
                return Ok(Some(conflict(report, types::CERTIFICATES_AVAILABLE, msg)));
            }
        }
    }
    for cond in step.conditions {
        report.push(cond);
    }
    Ok(None)
}

/// `requeue`, or earlier when state that produces no event changes first: `spec.rollout.after`
/// passing or a service-account key rotation's next check (`rollout_due`), or the first leaf reaching its renewal time (`renewal_due`, logged
/// with the delay, so the instant can be checked).
fn timed_requeue(
    kcp: &KamajiControlPlane,
    requeue: std::time::Duration,
    rollout_due: Option<std::time::Duration>,
    renewal_due: std::time::Duration,
) -> std::time::Duration {
    let requeue = rollout_due.map_or(requeue, |due| requeue.min(due));
    let renewal_due = renewal_due.max(std::time::Duration::from_secs(1));
    if renewal_due < requeue {
        tracing::info!(
            kcp = %object_key(kcp),
            requeue_seconds = renewal_due.as_secs(),
            "looking again when the first leaf certificate reaches its renewal time"
        );
        renewal_due
    } else {
        requeue
    }
}

/// The pod template of `d` as stored.
fn template_of(d: &Deployment) -> Option<&k8s_openapi::api::core::v1::PodTemplateSpec> {
    d.spec.as_ref().map(|s| &s.template)
}

/// Writes what the endpoint needs: the datastore client Secret (added to `written` as stored),
/// the Service and the Ingress. Returns the Service as stored, or the condition type and
/// message of the first object another object controls.
async fn front(
    ctx: &Context,
    ns: &str,
    plan: &Plan,
    round: &Round,
    written: &mut Vec<Secret>,
) -> Result<Result<k8s_openapi::api::core::v1::Service, (&'static str, String)>, Error> {
    let owner = &plan.owner;
    let ds = plan.datastore_client.clone();
    match apply_secret(ctx, ns, ds, round, owner).await? {
        Outcome::Stored(stored) => written.push(stored),
        Outcome::Conflict(msg) => return Ok(Err((types::DATASTORE_READY, msg))),
    }
    let service = match apply_known(
        ctx,
        ns,
        plan.service.clone(),
        Known::Read(round.observed.service.as_ref()),
        owner,
    )
    .await?
    {
        Outcome::Stored(service) => service,
        Outcome::Conflict(msg) => return Ok(Err((types::ENDPOINT_READY, msg))),
    };
    if let Some(ingress) = plan.ingress.clone()
        && let Outcome::Conflict(msg) = apply_owned(ctx, ns, ingress, None, owner).await?
    {
        return Ok(Err((types::ENDPOINT_READY, msg)));
    }
    if let Some(route) = plan.tls_route.clone() {
        let outcome = apply_owned(ctx, ns, route, None, owner)
            .await
            .map_err(|e| match e {
                // The kind itself is missing: say which CRD the field needs.
                Error::Kube {
                    action,
                    source: kube::Error::Api(status),
                } if status.code == 404 => Error::Kube {
                    action: format!(
                        "{action} (spec.network.gateway needs the Gateway API's TLSRoute CRD, \
                         gateway.networking.k8s.io/v1, in the management cluster)"
                    ),
                    source: kube::Error::Api(status),
                },
                e => e,
            })?;
        if let Outcome::Conflict(msg) = outcome {
            return Ok(Err((types::ENDPOINT_READY, msg)));
        }
    }
    Ok(Ok(service))
}

/// [`conflict`] of the Deployment.
fn deployment_conflict(report: &mut Report, msg: String) -> Action {
    conflict(report, types::DEPLOYMENT_READY, msg)
}

/// Reports an object another object controls, and stops the pass (a recheck, since its
/// removal produces no event for this control plane).
fn conflict(report: &mut Report, type_: &'static str, msg: String) -> Action {
    report.warn(reasons::OWNED_BY_ANOTHER_OBJECT, &msg);
    report.push(Cond::no(type_, reasons::OWNED_BY_ANOTHER_OBJECT, msg));
    Action::requeue(RECHECK)
}

/// The claim on the datastore schema and the tenant's etcd user
/// ([`datastore::claim_and_grant`]), then the roots: a stored one must not
/// be controlled by another object; a new one is created if absent; then the step of a key
/// rotation. `Some(action)` stops the pass. The Secrets it writes are added to `written`, as
/// stored.
async fn roots(
    ctx: &Context,
    ns: &str,
    round: &Round,
    plan: &Plan,
    report: &mut Report,
    written: &mut Vec<Secret>,
) -> Result<Option<Action>, Error> {
    // First the schema claim: a control plane refused there writes nothing at all.
    if let Some(stop) = datastore::claim_and_grant(ctx, &plan.schema_claim, report).await? {
        return Ok(Some(stop));
    }
    if let Some(stop) = stored_roots(ctx, ns, plan, report, written).await? {
        return Ok(Some(stop));
    }
    let (owner, keys) = (&plan.owner, &plan.service_account);
    let step = RotationStep {
        what: "service-account key rotation",
        writes: keys.writes.clone(),
        conditions: keys.condition.iter().cloned().collect(),
    };
    if let Some(stop) = rotation_step(ctx, ns, round, owner, step, report, written).await? {
        return Ok(Some(stop));
    }
    let authorities = &plan.certificate_authorities;
    // Before the rotation is recorded as done: the tenant's published trust loses the old CAs
    // (a failure fails the pass, and the next one tries again).
    if let Some(trust) = &authorities.authentication_trust {
        publish_trust(ctx, ns, &round.observed, trust).await?;
    }
    let step = RotationStep {
        what: "certificate-authority rotation",
        writes: authorities.writes.clone(),
        conditions: authorities.condition.iter().cloned().collect(),
    };
    if let Some(stop) = rotation_step(ctx, ns, round, owner, step, report, written).await? {
        return Ok(Some(stop));
    }
    let encryption = &plan.encryption_keys;
    // Before the previous key is dropped: every Secret is stored anew with the one that writes.
    if !encryption.migrate.is_empty() {
        migrate_encryption(ctx, ns, &round.observed, encryption).await?;
    }
    let step = RotationStep {
        what: "encryption configuration change",
        writes: encryption.write.clone().into_iter().collect(),
        conditions: encryption.conditions.clone(),
    };
    rotation_step(ctx, ns, round, owner, step, report, written).await
}

/// Makes the tenant's `extension-apiserver-authentication` trust only the CAs `trust` names
/// (a CA rotation dropping the old ones), through the super-admin kubeconfig.
async fn publish_trust(
    ctx: &Context,
    ns: &str,
    observed: &Observed,
    trust: &super::plan::ca_rotation::AuthenticationTrust,
) -> Result<(), Error> {
    let secret = observed
        .secrets
        .get(&trust.super_admin_secret)
        .ok_or_else(|| Error::Tenant(format!("Secret {} missing", trust.super_admin_secret)))?;
    let client = ctx.tenant_clients().get(secret, false).await?;
    if tenant::set_authentication_trust(&client, &trust.client_ca, &trust.requestheader_client_ca)
        .await?
    {
        info!(
            namespace = ns,
            "certificate-authority rotation: extension-apiserver-authentication trusts only the new CAs"
        );
    }
    Ok(())
}

/// Stores every object of the resources `encryption.migrate` anew in the tenant, through the
/// kubeconfig `encryption.migrate_with`: written with the configuration that writes now.
async fn migrate_encryption(
    ctx: &Context,
    ns: &str,
    observed: &Observed,
    encryption: &super::plan::encryption_rotation::EncryptionKeys,
) -> Result<(), Error> {
    let secret = observed
        .secrets
        .get(&encryption.migrate_with)
        .ok_or_else(|| Error::Tenant(format!("Secret {} missing", encryption.migrate_with)))?;
    let client = ctx.tenant_clients().get(secret, false).await?;
    let rewritten = tenant::rewrite(&client, &encryption.migrate).await?;
    info!(
        namespace = ns,
        rewritten,
        resources = encryption.migrate.join(","),
        "encryption at rest: stored objects rewritten with the configuration that writes"
    );
    Ok(())
}

/// The roots of `plan`: a stored one must not be controlled by another object; a new one is
/// created if absent (added to `written` as stored). `Some(action)` stops the pass.
async fn stored_roots(
    ctx: &Context,
    ns: &str,
    plan: &Plan,
    report: &mut Report,
    written: &mut Vec<Secret>,
) -> Result<Option<Action>, Error> {
    let roots = &plan.roots;
    let in_order = [
        &roots.ca,
        &roots.front_proxy_ca,
        &roots.service_account,
        &roots.encryption,
    ];
    for root in in_order {
        let theirs = match root {
            Root::Stored(s) => s.clone(),
            Root::New(s) => match create_if_absent(ctx, ns, s).await? {
                Created::Now(stored) => {
                    info!(secret = %s.name_any(), "generated key material");
                    written.push(stored);
                    continue;
                }
                // Another writer won: the leaves of this plan are signed by a root that was
                // not stored. The next pass reads theirs (unless another object controls it).
                Created::Existing(theirs) if foreign_controller(&theirs, &plan.owner).is_none() => {
                    return Ok(Some(Action::requeue(Duration::from_secs(1))));
                }
                Created::Existing(theirs) => theirs,
            },
        };
        if let Some(msg) = foreign_controller(&theirs, &plan.owner) {
            return Ok(Some(conflict(report, types::CERTIFICATES_AVAILABLE, msg)));
        }
    }
    Ok(None)
}

/// What [`create_if_absent`] found.
enum Created {
    /// No Secret of its name existed: this one, as stored.
    Now(Secret),
    /// One existed: that one, as stored.
    Existing(Secret),
}

/// Creates `secret` unless a Secret of its name exists.
async fn create_if_absent(ctx: &Context, ns: &str, secret: &Secret) -> Result<Created, Error> {
    let api = Api::<Lean<Secret>>::namespaced(ctx.client().clone(), ns);
    let name = secret.name_any();
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, &Lean(secret.clone())).await {
        Ok(Lean(created)) => {
            // Its watch event wakes no pass.
            let uid = created.uid().unwrap_or_default();
            ctx.memory()
                .created(&uid, &created.resource_version().unwrap_or_default());
            Ok(Created::Now(created))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => api
            .get(&name)
            .await
            .map(|s| Created::Existing(s.0))
            .ctx(|| format!("re-read Secret {ns}/{name}")),
        Err(e) => Err(Error::Kube {
            action: format!("create Secret {ns}/{name}"),
            source: e,
        }),
    }
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

/// A namespaced kind the control plane owns and [`apply_owned`] writes: read, compared as
/// JSON and server-side applied.
trait OwnedKind:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> OwnedKind for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// Server-side applies `desired` (field manager `kamaji-rs`) unless the live object already
/// carries the same desired hash *and* still holds everything `desired` sets; then nothing is
/// written. The live object is read first when `observed` is `None`. An object controlled by
/// another object than `owner` is never written; one without a controller is adopted.
async fn apply_owned<K>(
    ctx: &Context,
    ns: &str,
    desired: K,
    observed: Option<&K>,
    owner: &OwnerReference,
) -> Result<Outcome<K>, Error>
where
    K: OwnedKind,
{
    apply_known(ctx, ns, desired, Known::Listed(observed), owner).await
}

/// How many Secrets one metadata-only list of a namespace reads for [`known_absent`]: a
/// namespace holding more (many clusters in one namespace) is not listed further, and each
/// Secret is read by name instead.
const NAMESPACE_SECRETS_PAGE: u32 = 100;

/// [`apply_owned`] for a Secret of the control plane, knowing from [`known_absent`] whether
/// one the labelled list lacks exists: a Secret of a new control plane is not read by name
/// before it is written (one list of the namespace instead of a `GET` per Secret).
async fn apply_secret(
    ctx: &Context,
    ns: &str,
    secret: Secret,
    round: &Round,
    owner: &OwnerReference,
) -> Result<Outcome<Secret>, Error> {
    let name = secret.name_any();
    let known = match round.observed.secrets.get(&name) {
        Some(listed) => Known::Listed(Some(listed)),
        None if known_absent(ctx, ns, round, &name).await? => Known::Read(None),
        None => Known::Listed(None),
    };
    apply_known(ctx, ns, secret, known, owner).await
}

/// Whether no Secret named `name` exists in `ns`, as one metadata-only list of the namespace's
/// Secrets says, read once per round ([`Round`]); `false` when the
/// namespace holds more than [`NAMESPACE_SECRETS_PAGE`] Secrets.
///
/// # Errors
/// [`Error::Kube`] when the list fails.
async fn known_absent(ctx: &Context, ns: &str, round: &Round, name: &str) -> Result<bool, Error> {
    let names = round
        .namespace_secrets
        .get_or_try_init(|| async {
            let list = Api::<Lean<kube::core::PartialObjectMeta<Secret>>>::namespaced(
                ctx.client().clone(),
                ns,
            )
            .list(&kube::api::ListParams::default().limit(NAMESPACE_SECRETS_PAGE))
            .await
            .ctx(|| format!("list the Secrets of namespace {ns}"))?;
            let whole = list.metadata.continue_.as_deref().is_none_or(str::is_empty);
            Ok::<_, Error>(whole.then(|| {
                list.items
                    .into_iter()
                    .map(|Lean(s)| s.name_any())
                    .collect::<BTreeSet<_>>()
            }))
        })
        .await?;
    Ok(names.as_ref().is_some_and(|n| !n.contains(name)))
}

/// What a pass knows of an object before [`apply_known`] writes it.
#[derive(Debug, Clone, Copy)]
enum Known<'a, K> {
    /// Found in a list by label, or not found there (it may still exist without the label,
    /// case B01: then it is read by name first).
    Listed(Option<&'a K>),
    /// Read by name earlier in the same pass (the observe step's Deployment and Service), or,
    /// for a Secret, absent from the whole namespace's list ([`known_absent`]):
    /// `None` is absent, and is not read again (an object created in between is caught by the
    /// apply: [`server_side_apply`] with `was_absent`).
    Read(Option<&'a K>),
}

/// [`apply_owned`] with what the pass knows of the object.
async fn apply_known<K>(
    ctx: &Context,
    ns: &str,
    desired: K,
    known: Known<'_, K>,
    owner: &OwnerReference,
) -> Result<Outcome<K>, Error>
where
    K: OwnedKind,
{
    let (desired, hash) = with_desired_hash(desired);
    let name = desired.name_any();
    let what = format!("{} {ns}/{name}", K::kind(&()));
    // Objects are read without `managedFields` ([`Lean`]): no step reads them.
    let api: Api<Lean<K>> = Api::namespaced(ctx.client().clone(), ns);
    let (observed, read) = match known {
        Known::Listed(o) => (o, false),
        Known::Read(o) => (o, true),
    };
    let fetched = if observed.is_none() && !read {
        api.get_opt(&name)
            .await
            .ctx(|| format!("get {what}"))?
            .map(|o| o.0)
    } else {
        None
    };
    let current = observed.or(fetched.as_ref());
    if let Some(cur) = current {
        if let Some(msg) = foreign_controller(cur, owner) {
            return Ok(Outcome::Conflict(msg));
        }
        if holds_desired(ctx, cur, &desired, &hash, &what)? {
            return Ok(Outcome::Stored(cur.clone()));
        }
    }
    let stored = match server_side_apply(ctx, &api, &desired, current.is_none(), owner).await? {
        Outcome::Stored(s) => s,
        Outcome::Conflict(msg) => return Ok(Outcome::Conflict(msg)),
    };
    remember_applied(ctx, &desired, &stored, &hash, &what)?;
    Ok(Outcome::Stored(stored))
}

/// `desired` annotated with its desired hash (of the object without that annotation), and
/// the hash.
fn with_desired_hash<K: OwnedKind>(mut desired: K) -> (K, String) {
    let hash = {
        let meta = desired.meta_mut();
        if let Some(a) = meta.annotations.as_mut() {
            a.remove(DESIRED_HASH_ANNOTATION);
        }
        desired_hash(&desired)
    };
    desired
        .meta_mut()
        .annotations
        .get_or_insert_with(Default::default)
        .insert(DESIRED_HASH_ANNOTATION.into(), hash.clone());
    (desired, hash)
}

/// Whether the live object `cur` (`what`, for the log) needs no write: it carries the desired
/// hash `hash` and still holds everything `desired` sets (remembered per version), or its
/// drift from that desired object was accepted ([`remember_applied`]).
fn holds_desired<K: OwnedKind>(
    ctx: &Context,
    cur: &K,
    desired: &K,
    hash: &str,
    what: &str,
) -> Result<bool, Error> {
    if cur
        .annotations()
        .get(DESIRED_HASH_ANNOTATION)
        .map(String::as_str)
        != Some(hash)
    {
        return Ok(false);
    }
    let uid = cur.uid().unwrap_or_default();
    let version = cur.resource_version().unwrap_or_default();
    if ctx.memory().holds_desired(&uid, &version, hash) {
        return Ok(true);
    }
    let desired_json = serde_json::to_value(desired)?;
    match drift::drifted(&desired_json, &serde_json::to_value(cur)?) {
        None => {
            ctx.memory().verified_desired(&uid, &version, hash);
            Ok(true)
        }
        Some(_) if ctx.memory().drift_settled(&uid, hash) => Ok(true),
        Some(field) => {
            info!(object = %what, field, "the live object no longer holds what kamaji-rs set: applying it again");
            ctx.metrics().drift_corrections.inc();
            Ok(false)
        }
    }
}

/// Remembers the object `stored` just applied from `desired` (hash `hash`; `what`, for the
/// log): holding the desired object at its version (the next pass reading it skips the
/// comparison, and its watch event wakes no pass), or, when what is stored differs from what
/// was applied (a mutating webhook rewrites it: applying again would only loop), its drift is
/// accepted until the desired object changes.
fn remember_applied<K: OwnedKind>(
    ctx: &Context,
    desired: &K,
    stored: &K,
    hash: &str,
    what: &str,
) -> Result<(), Error> {
    let desired_json = serde_json::to_value(desired)?;
    if let Some(field) = drift::drifted(&desired_json, &serde_json::to_value(stored)?) {
        warn!(object = %what, field, "the stored object differs from what kamaji-rs applied; not re-applying it until the desired object changes");
        ctx.memory()
            .settle_drift(&stored.uid().unwrap_or_default(), hash);
    } else {
        let uid = stored.uid().unwrap_or_default();
        let version = stored.resource_version().unwrap_or_default();
        ctx.memory().verified_desired(&uid, &version, hash);
    }
    Ok(())
}

/// Server-side applies `desired`; a field another manager holds is taken back (forced), unless
/// the object was absent when observed (`was_absent`) and appeared meanwhile under another
/// controller.
async fn server_side_apply<K>(
    ctx: &Context,
    api: &Api<Lean<K>>,
    desired: &K,
    was_absent: bool,
    owner: &OwnerReference,
) -> Result<Outcome<K>, Error>
where
    K: OwnedKind,
{
    let name = desired.name_any();
    let ns = desired.namespace().unwrap_or_default();
    let kind = K::kind(&());
    match api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(desired),
        )
        .await
    {
        Ok(Lean(o)) => Ok(Outcome::Stored(o)),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            ctx.metrics().ssa_conflicts.inc();
            if was_absent
                && let Some(Lean(now)) = api
                    .get_opt(&name)
                    .await
                    .ctx(|| format!("get {kind} {ns}/{name}"))?
                && let Some(msg) = foreign_controller(&now, owner)
            {
                return Ok(Outcome::Conflict(msg));
            }
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(desired),
            )
            .await
            .map(|Lean(o)| Outcome::Stored(o))
            .ctx(|| format!("apply {kind} {ns}/{name} (forced after a conflict)"))
        }
        Err(e) => Err(Error::Kube {
            action: format!("apply {kind} {ns}/{name}"),
            source: e,
        }),
    }
}

/// Deletes the v0.1 Secrets once the Deployment has rolled onto the new names (every replica
/// up to date), so no running pod mounts them any more.
async fn remove_legacy_secrets(
    ctx: &Context,
    spec: &ValidSpec,
    legacy: &[Secret],
    deployment: &Deployment,
) -> Result<(), Error> {
    let r = Replicas::of(Some(deployment));
    let rolled_out =
        r.observed_current && r.up_to_date == spec.replicas && r.replicas == spec.replicas;
    if legacy.is_empty() || !rolled_out {
        return Ok(());
    }
    let api = Api::<Secret>::namespaced(ctx.client().clone(), &spec.namespace);
    for old in legacy {
        let name = old.name_any();
        let precondition = DeleteParams {
            preconditions: Some(Preconditions {
                uid: old.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &precondition).await {
            Ok(_) => info!(secret = %name, "removed a Secret no pod uses any more"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                return Err(Error::Kube {
                    action: format!("delete unused Secret {}/{name}", spec.namespace),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// Reports the endpoint ready and writes it into `spec.controlPlaneEndpoint` when it differs
/// ([`super::kcp::patch_kcp`]: `Ok(false)` when the pass read a replaced version).
async fn set_kcp_endpoint(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    endpoint: &Endpoint,
    report: &mut Report,
) -> Result<bool, Error> {
    report.push(Cond::yes(
        types::ENDPOINT_READY,
        reasons::READY,
        format!("{}:{}", endpoint.host, endpoint.port),
    ));
    let current = kcp.spec.control_plane_endpoint.as_ref();
    if current.and_then(|e| e.host.as_deref()) == Some(endpoint.host.as_str())
        && current.and_then(|e| e.port) == Some(i32::from(endpoint.port))
    {
        return Ok(true);
    }
    let patch = serde_json::json!({"spec": {"controlPlaneEndpoint": {"host": endpoint.host, "port": endpoint.port}}});
    super::kcp::patch_kcp(kcp, ctx, report, patch, "set spec.controlPlaneEndpoint").await
}

/// The tenant side: once its API answered this pass, the kubeadm artifacts (`objects`) and,
/// with konnectivity (`spec`), its agents; returns how far it got and when to look again (a
/// back-off while the API does not answer or agents are not connected, since neither produces
/// an event).
async fn tenant_side(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &ValidSpec,
    objects: Option<&TenantObjects>,
    super_admin: Option<&Secret>,
    deployment: &Deployment,
) -> Result<(TenantSide, Duration), Error> {
    let key = object_key(kcp);
    let Some(objects) = objects else {
        let available = Replicas::of(Some(deployment)).available;
        // Pod readiness produces Deployment events; reachability through the endpoint does not.
        return Ok(if available == 0 {
            (TenantSide::WaitingForPods, ctx.config().resync)
        } else {
            (TenantSide::WaitingForApiServer, ctx.waiting().next(&key))
        });
    };
    ctx.waiting().reset(&key);
    let client = match bootstrap_tenant(ctx, kcp, objects, super_admin).await {
        Ok(client) => client,
        Err(e) => {
            warn!(kcp = %key, "tenant bootstrap: {e}");
            return Ok((TenantSide::Failed(e.to_string()), ctx.waiting().next(&key)));
        }
    };
    let summary = objects.summary.clone();
    let Some(k) = &spec.konnectivity else {
        let side = TenantSide::Bootstrapped {
            summary,
            agents: None,
        };
        return Ok((side, ctx.config().resync));
    };
    // Agents connecting produce no event here: look again until all are connected.
    let agents = konnectivity_agents(k, &client).await;
    let requeue = if agents.all_connected() {
        ctx.config().resync
    } else {
        ctx.waiting().next(&key)
    };
    let side = TenantSide::Bootstrapped {
        summary,
        agents: Some(agents),
    };
    Ok((side, requeue))
}

/// The konnectivity agents' workload in the tenant (an agent is ready once it holds a
/// connection to a server).
async fn konnectivity_agents(
    k: &kamaji_bootstrap::konnectivity::Konnectivity,
    client: &kube::Client,
) -> Agents {
    match tenant::konnectivity_agents(client, k.agent.mode).await {
        Ok(Some((ready, desired))) => Agents::Counted { ready, desired },
        Ok(None) => Agents::Missing,
        Err(e) => Agents::Unreadable(e.to_string()),
    }
}

/// Applies the kubeadm join artifacts to the tenant unless its cluster-info already holds the
/// kubeconfig and the artifacts hash of this set ([`TenantObjects::objects`] ends with
/// cluster-info, which carries that hash: it is applied after every other object and after the
/// objects of removed addons are deleted, so the hash is there only once the set was applied
/// completely), with the provider's super-admin identity; returns that client for the pass's
/// other reads of the tenant.
async fn bootstrap_tenant(
    ctx: &Context,
    kcp: &KamajiControlPlane,
    tenant: &TenantObjects,
    super_admin: Option<&Secret>,
) -> Result<kube::Client, Error> {
    let super_admin =
        super_admin.ok_or_else(|| Error::Tenant("super-admin kubeconfig missing".into()))?;
    let coming_up = !super::observe::is_initialized(kcp);
    let client = ctx.tenant_clients().get(super_admin, coming_up).await?;
    let applied = apply_tenant_artifacts(kcp, tenant, &client).await;
    if applied.is_err() {
        ctx.tenant_clients().forget(super_admin);
    }
    applied.map(|()| client)
}

/// [`bootstrap_tenant`]'s reads and writes through `client`.
async fn apply_tenant_artifacts(
    kcp: &KamajiControlPlane,
    tenant: &TenantObjects,
    client: &kube::Client,
) -> Result<(), Error> {
    let found = tenant::cluster_info(client).await?;
    if found.kubeconfig == tenant.cluster_info
        && found.artifacts_hash.as_deref() == Some(tenant.hash.as_str())
    {
        return Ok(());
    }
    let (cluster_info, rest) = tenant
        .objects
        .split_last()
        .ok_or_else(|| Error::Tenant("no tenant objects".into()))?;
    // Read before this apply creates the first object.
    let search = match rest.first() {
        Some(first) if !tenant.removed.is_empty() => {
            tenant::applied_before(client, &found, first).await?
        }
        _ => false,
    };
    tenant::apply(client, rest).await?;
    let removed = if search {
        tenant::remove_applied(client, &tenant.removed).await?
    } else {
        0
    };
    tenant::apply(client, std::slice::from_ref(cluster_info)).await?;
    info!(
        kcp = %object_key(kcp),
        objects = tenant.objects.len(),
        removed,
        "applied tenant artifacts"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::reconcile::plan::tests::{observed, stored_service};
    use crate::reconcile::validate::tests::{fixture, valid};

    /// A new control plane's second round starts from the first round's observation and the
    /// first round's list of the namespace's Secrets; a round that waits for an endpoint the
    /// Service does not give yet stops.
    #[test]
    fn a_second_round_reuses_the_first_rounds_list_of_the_namespace() {
        let spec = valid(&fixture(serde_json::json!({})));
        let first = Round::new(observed(BTreeMap::new(), None));
        let listed: BTreeSet<String> = std::iter::once("other".to_owned()).collect();
        first.namespace_secrets.set(Some(listed.clone())).unwrap();
        let waiting = || {
            Err(Cond::no(
                types::ENDPOINT_READY,
                reasons::WAITING_FOR_ENDPOINT,
                "",
            ))
        };
        let mut report = Report::default();
        let service = stored_service(&spec);
        let Flow::Again(Some(next)) =
            with_endpoint(&spec, &first, waiting(), Vec::new(), service, &mut report)
        else {
            panic!("a second round from the first round's observation");
        };
        assert_eq!(next.observed.service, Some(stored_service(&spec)));
        assert_eq!(next.namespace_secrets.get(), Some(&Some(listed)));
        let without_address = Service::default();
        assert!(matches!(
            with_endpoint(
                &spec,
                &first,
                waiting(),
                Vec::new(),
                without_address,
                &mut report
            ),
            Flow::Stop(_)
        ));
    }
}
