//! The reconcile pipeline of one KamajiControlPlane (shared/design/ARCHITECTURE.md §3), one
//! file per step: [`gates`] → [`validate`] → [`observe`] → [`plan`] → [`apply`] →
//! [`status`], and [`delete`] for the deletion branch; beside them [`report`] (what a pass
//! reports) and [`kcp`] (the pass's own KamajiControlPlane). The steps' layers, lower than this
//! driver, are in docs/development/reconcile-pipeline.md ("Layers").
//!
//! This driver runs the steps and is the only place that writes the status: once per pass,
//! from the conditions the steps reported (also when a step failed: `Reconciled=False` with
//! the failure), and not at all when nothing changed.

pub mod apply;
pub mod delete;
pub mod gates;
pub mod kcp;
pub mod observe;
pub mod plan;
pub mod report;
pub mod status;
pub mod validate;

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kamaji_api::conditions::{reasons, types};
use kamaji_api::{KamajiControlPlane, KamajiControlPlaneStatus};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::{debug, warn};

use self::apply::Flow;
use self::gates::Gate;
use self::kcp::{known_version, object_key, owner_reference, patch_at_version};
use self::report::{Facts, Report};
use self::status::{Cond, StatusInputs};
use crate::context::Context;
use crate::error::Error;
use crate::replicas::Replicas;

/// The facts of `spec` and `observed` the status is computed from.
fn facts_of(spec: &validate::ValidSpec, observed: &observe::Observed) -> Facts {
    let selector = validate::selector_labels(spec)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    Facts {
        data_store: kamaji_api::StatusDataStore {
            name: spec.datastore_name.clone(),
            schema: spec.datastore_schema.clone(),
            username: plan::pki::datastore_common_name(&spec.namespace, &spec.names),
        },
        desired: spec.replicas,
        version: spec.version_tag.clone(),
        selector,
        deployment: observed.deployment.clone(),
        template_changed: false,
        reachable: observed.reachable,
        kubeconfig_exists: observed.reachable
            || observed
                .secrets
                .contains_key(&spec.names.kubeconfig_secret()),
        retired: if spec.konnectivity.is_none() {
            vec![kamaji_api::conditions::types::KONNECTIVITY_READY]
        } else {
            Vec::new()
        },
    }
}

/// Reconciles one KamajiControlPlane.
///
/// # Errors
/// [`Error`] for failures worth a retry with backoff; invalid specs and missing inputs are
/// reported in status and wait for a change instead.
pub async fn reconcile(kcp: Arc<KamajiControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(uid) = kcp.metadata.uid.clone() else {
        return pass(kcp, ctx).await;
    };
    // Events of this control plane while its pass runs are held, and looked at once the pass
    // has recorded what its own writes left: another writer's version runs the next pass at
    // once, the pass's own versions none.
    let running = Running::begin(Arc::clone(&ctx), uid);
    let result = pass(kcp, ctx).await;
    let missed = running.end();
    match result {
        Ok(_) if missed => Ok(Action::requeue(std::time::Duration::ZERO)),
        result => result,
    }
}

/// A running pass of the control plane `uid` ([`crate::memory::Memory::begin_pass`]). Dropped
/// before [`Running::end`] (the controller shutting down half-way), it ends all the same, so no
/// event of that control plane is held afterwards.
struct Running {
    ctx: Arc<Context>,
    uid: String,
}

impl Running {
    fn begin(ctx: Arc<Context>, uid: String) -> Self {
        ctx.memory().begin_pass(&uid);
        Self { ctx, uid }
    }

    /// Ends the pass: whether an event held meanwhile needs another
    /// ([`crate::memory::Memory::end_pass`]).
    fn end(self) -> bool {
        self.ctx.memory().end_pass(&self.uid)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A no-op after `end`, which removed the entry.
        self.ctx.memory().end_pass(&self.uid);
    }
}

/// One pass over `kcp` ([`reconcile`]).
async fn pass(kcp: Arc<KamajiControlPlane>, ctx: Arc<Context>) -> Result<Action, Error> {
    // In kube-runtime's span of the pass, which names what woke it (`object.reason`).
    debug!(kcp = %object_key(&kcp), version = kcp.resource_version().unwrap_or_default(), "pass");
    if let (Some(uid), Some(rv)) = (kcp.metadata.uid.as_deref(), kcp.resource_version())
        && ctx.memory().is_superseded(uid, &rv)
    {
        // The watch cache has not caught up with this process's own write: its event brings
        // the pass, which computes from the status written instead of the one it replaced.
        debug!(kcp = %object_key(&kcp), "a version this process replaced: waiting for its successor");
        ctx.metrics().superseded_passes.inc();
        // The successor is this process's own write: its event must wake a pass now. The
        // watch stores a version before its event is filtered, so once forgotten, either the
        // store already holds the successor (look again at once) or its event will wake one.
        ctx.memory().forget_own_result(uid);
        let latest = ctx
            .control_planes()
            .and_then(|store| store.get(&kube::runtime::reflector::ObjectRef::from_obj(&*kcp)))
            .and_then(|k| k.resource_version());
        if latest.is_some_and(|latest| latest != rv && !ctx.memory().is_superseded(uid, &latest)) {
            return Ok(Action::requeue(std::time::Duration::ZERO));
        }
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    ctx.metrics().reconciles.inc();
    let mut report = Report::default();
    let result = Box::pin(steps(&kcp, &ctx, &mut report)).await;
    let seen = report
        .facts
        .as_ref()
        .and_then(|f| f.deployment.as_ref())
        .map(crate::replicas::DeploymentView::of);
    let write = match &result {
        Ok(None) => Ok(Written::Done(None)), // finalizer released: the object is going away
        Ok(Some(_)) => finish(&kcp, &ctx, report).await,
        Err(e) => {
            // The status shows what this pass found before it failed, and why it failed;
            // never a condition of an older pass that every later pass contradicts.
            report.push(Cond::no(types::RECONCILED, e.reason(), e.to_string()));
            report.warn("ReconcileFailed", &format!("{}: {e}", e.category()));
            finish(&kcp, &ctx, report).await
        }
    };
    ctx.metrics()
        .duration
        .observe(started.elapsed().as_secs_f64());
    if let Some(uid) = kcp.metadata.uid.as_deref() {
        // Only a pass that ended as it computed has seen its Deployment for later events: after
        // a failure or a held status every Deployment event wakes a pass.
        let ended = result.is_ok() && matches!(write, Ok(Written::Done(_)));
        ctx.memory().saw_deployment(uid, seen.filter(|_| ended));
    }
    let action = result?;
    ctx.errors().reset(&object_key(&kcp));
    match write? {
        // A held setback produces no event when it passes or lasts: look again soon.
        Written::Held => return Ok(Action::requeue(ctx.config().unreachable_requeue)),
        Written::Done(Some(version)) => {
            if let Some(uid) = kcp.metadata.uid.as_deref() {
                ctx.memory().own_result(uid, &version);
            }
        }
        Written::Done(None) => {}
    }
    Ok(action.unwrap_or_else(Action::await_change))
}

/// What [`finish`] did with the pass's status.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Written {
    /// Written, or nothing to write; with the `resourceVersion` the pass's own writes to the
    /// KamajiControlPlane left, if it made any and none was refused as stale.
    Done(Option<String>),
    /// Held back: a transient setback within its grace ([`status::transient_setback`]).
    Held,
}

/// The steps; `Ok(None)` when the object is about to go (no status to write).
async fn steps(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    report: &mut Report,
) -> Result<Option<Action>, Error> {
    let cluster = match gates::check(kcp, ctx, report).await? {
        Gate::Pipeline(cluster) => cluster,
        Gate::Stop(action) => return Ok(Some(action)),
        Gate::Delete(owner) => return delete::delete(kcp, ctx, owner.as_ref(), report).await,
        Gate::ReleaseForMove => return delete::release_finalizer(kcp, ctx).await.map(|()| None),
    };
    let infrastructure =
        crate::infrastructure::observe(ctx.client(), ctx.infrastructure_kinds(), &cluster).await?;
    let infrastructure_endpoint = infrastructure
        .as_ref()
        .and_then(|i| Some((i.kind.as_str(), i.endpoint.as_ref()?)));
    let spec = match validate::validate(
        kcp,
        &cluster,
        infrastructure_endpoint,
        &ctx.config().default_datastore,
    ) {
        Ok(spec) => spec,
        Err(errors) => {
            let refused = validate::refusal(&errors);
            warn!(kcp = %object_key(kcp), "invalid spec: {}", refused.message);
            report.warn(reasons::INVALID_SPEC, &refused.message);
            report.push(refused);
            return Ok(Some(Action::await_change()));
        }
    };
    report.push(Cond::yes(types::SPEC_VALID, reasons::READY, ""));
    // A new control plane's first round creates its Service and then has what the rest of the
    // plan waits for: the second round, in the same pass, writes that rest (one status write
    // and one pass fewer than leaving it to the pass the Service's event wakes).
    let mut rounds = 0;
    let mut prior = None;
    loop {
        rounds += 1;
        let infrastructure = infrastructure.as_ref();
        match Box::pin(round(kcp, ctx, &spec, infrastructure, prior, report)).await? {
            Flow::Continue(action) | Flow::Stop(action) => return Ok(Some(action)),
            Flow::Again(next) if rounds < 2 => {
                ctx.metrics().second_rounds.inc();
                prior = next;
            }
            // The Service went away in between: its event wakes the next pass.
            Flow::Again(_) => return Ok(Some(Action::await_change())),
        }
    }
}

/// One round of the steps after validation: observe (unless the first round gave what it
/// would read: `prior`), the DataStore, plan, apply.
async fn round(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &validate::ValidSpec,
    infrastructure: Option<&crate::infrastructure::InfrastructureCluster>,
    prior: Option<Box<apply::Round>>,
    report: &mut Report,
) -> Result<Flow<Action>, Error> {
    let round = match prior {
        Some(round) => *round,
        None => apply::Round::new(observe::observe(kcp, spec, ctx).await?),
    };
    report.facts = Some(facts_of(spec, &round.observed));
    let Some(datastore) = datastore(kcp, ctx, spec, report).await else {
        return Ok(Flow::Stop(Action::await_change()));
    };
    let plan = match planned(kcp, ctx, spec, &round.observed, &datastore)? {
        Ok(plan) => plan,
        Err(missing) => {
            report.warn(missing.reason, &missing.message);
            report.push(missing);
            return Ok(Flow::Stop(Action::requeue(apply::RECHECK)));
        }
    };
    let applied = apply::apply(kcp, ctx, spec, &round, infrastructure, plan, report);
    match Box::pin(applied).await? {
        Flow::Continue(applied) => {
            if let Some(facts) = report.facts.as_mut() {
                facts.deployment = applied.deployment;
                facts.template_changed = applied.template_changed;
            }
            Ok(Flow::Continue(applied.requeue))
        }
        Flow::Stop(action) => Ok(Flow::Stop(action)),
        Flow::Again(next) => Ok(Flow::Again(next)),
    }
}

/// The control plane's DataStore ([`observe::datastore`]) when it is ready and the spec asks
/// nothing of it its driver cannot give; else `None`, with the condition (and for an invalid
/// spec its Warning event) in `report`.
async fn datastore(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &validate::ValidSpec,
    report: &mut Report,
) -> Option<crate::datastore::Resolved> {
    let datastore = match observe::datastore(spec, ctx).await {
        Ok((ds, ready)) => {
            report.push(ready);
            ds
        }
        Err(cond) => {
            report.push(cond);
            return None;
        }
    };
    let errors = validate::against_datastore(spec, &datastore);
    if !errors.is_empty() {
        let refused = validate::refusal(&errors);
        warn!(kcp = %object_key(kcp), "invalid spec: {}", refused.message);
        report.warn(reasons::INVALID_SPEC, &refused.message);
        report.push(refused);
        return None;
    }
    if let Some(facts) = report.facts.as_mut() {
        facts.data_store.username = plan::datastore_user(spec, &datastore);
    }
    Some(datastore)
}

/// The plan ([`plan::plan`]) with the manager's settings, off the runtime's worker when it
/// generates keys slowly; the time it took to generate roots is measured.
fn planned(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    spec: &validate::ValidSpec,
    observed: &observe::Observed,
    datastore: &crate::datastore::Resolved,
) -> Result<Result<plan::Plan, Cond>, Error> {
    let config = ctx.config();
    let settings = plan::Settings {
        algorithm: config.key_algorithm,
        management_domain: config.management_domain.clone(),
        leaf_policy: config.leaf_policy,
        service_account_overlap: config.service_account_overlap,
        kine_image: config.kine_image.clone(),
        now: SystemTime::now(),
    };
    let started = Instant::now();
    let planned = off_the_worker(settings.algorithm.generates_slowly(), || {
        plan::plan(spec, observed, datastore, owner_reference(kcp), &settings)
    })?;
    if planned.as_ref().is_ok_and(plan::Plan::generates_roots) {
        let took = started.elapsed().as_secs_f64();
        ctx.metrics().pki_generation.observe(took);
    }
    Ok(planned)
}

/// Publishes the pass's events and writes its status: the only status write. A transient
/// setback of an available control plane ([`status::transient_setback`]) is held back, events
/// included, until it has lasted [`crate::context::Config::transient_grace`].
async fn finish(
    kcp: &KamajiControlPlane,
    ctx: &Context,
    mut report: Report,
) -> Result<Written, Error> {
    if report.silent {
        return Ok(Written::Done(None));
    }
    // 1. Every condition of the pass: the steps' own, then what apply did, then the outcome.
    conclude(&mut report);
    // 2. The status computed from the stored one and what the pass found.
    let prev = kcp.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let (next, settled) = next_status(kcp, &report, &prev, &now);
    // 3. Before anything is published: a transient setback within its grace is held back.
    if holds_back(ctx, kcp, &report, &prev, &next) {
        return Ok(Written::Held);
    }
    // 4. The events, and the tenant gauge, of the status about to be written.
    publish_events(ctx, kcp, &mut report, &prev, &next, &now).await;
    if report.facts.is_some() {
        ctx.metrics()
            .set_tenant(&object_key(kcp), Some(condition_states(&next)));
    }
    // 5. The one status write, preconditioned on the version the pass knows.
    let version = known_version(report.resource_version.as_ref(), kcp);
    let written = write_status(kcp, version, ctx, &prev, &next).await?;
    Ok(Written::Done(match written {
        _ if !settled => None,
        StatusWrite::Unchanged => report.resource_version,
        StatusWrite::Written(version) => version,
        StatusWrite::Refused => None,
    }))
}

/// Completes the pass's conditions: those of what the apply step did
/// ([`status::applied_conditions`]), then `Reconciled=True` unless a step reported otherwise
/// or the pass is paused (a paused pass reconciles nothing: it changes only `Paused`).
fn conclude(report: &mut Report) {
    for cond in status::applied_conditions(&report.applied) {
        report.push(cond);
    }
    let has = |type_: &str, status: Option<&str>| {
        report
            .conditions
            .iter()
            .any(|c| c.type_ == type_ && status.is_none_or(|s| c.status == s))
    };
    if !has(types::PAUSED, Some("True")) && !has(types::RECONCILED, None) {
        report.push(Cond::yes(
            types::RECONCILED,
            reasons::RECONCILE_SUCCEEDED,
            "",
        ));
    }
}

/// The status of `kcp` after the pass `report` describes, from the stored one `prev`, and
/// whether it is settled: a status that a pass finding the same would change again (one
/// computed from the one before) is not the pass's last word, and the event of its write must
/// wake the next pass.
fn next_status(
    kcp: &KamajiControlPlane,
    report: &Report,
    prev: &KamajiControlPlaneStatus,
    now: &Time,
) -> (KamajiControlPlaneStatus, bool) {
    let generation = report.generation.or(kcp.metadata.generation).unwrap_or(0);
    let status_from = |previous: &KamajiControlPlaneStatus| match &report.facts {
        Some(f) => status::compute(
            &StatusInputs {
                previous,
                generation,
                desired: f.desired,
                replicas: Replicas::of(f.deployment.as_ref()),
                selector: Some(f.selector.clone()),
                version: Some(f.version.clone()),
                api_reachable: f.reachable,
                kubeconfig_exists: f.kubeconfig_exists,
                template_changed: f.template_changed,
                retired: f.retired.clone(),
                conditions: report.conditions.clone(),
                data_store: Some(f.data_store.clone()),
            },
            now,
        ),
        None => status::conditions_only(previous, &report.conditions, generation, now),
    };
    let next = status_from(prev);
    let settled = *prev == next || status_from(&next) == next;
    (next, settled)
}

/// Whether `next` is a transient setback of an available control plane
/// ([`status::transient_setback`]) still within its grace
/// ([`crate::context::Config::transient_grace`]): then nothing of the pass is written.
fn holds_back(
    ctx: &Context,
    kcp: &KamajiControlPlane,
    report: &Report,
    prev: &KamajiControlPlaneStatus,
    next: &KamajiControlPlaneStatus,
) -> bool {
    let key = object_key(kcp);
    if report.facts.is_none() || !status::transient_setback(prev, next) {
        ctx.memory().end_setback(&key);
        return false;
    }
    if !ctx.memory().hold_setback(&key) {
        return false;
    }
    debug!(kcp = %key, "holding back a transient setback of the status");
    ctx.metrics().setbacks_held.inc();
    true
}

/// Publishes the pass's events, and `Initialized` when `next` is the first status that says so
/// (with the time it took, `kamaji_time_to_initialized_seconds`).
async fn publish_events(
    ctx: &Context,
    kcp: &KamajiControlPlane,
    report: &mut Report,
    prev: &KamajiControlPlaneStatus,
    next: &KamajiControlPlaneStatus,
    now: &Time,
) {
    for (type_, reason, note) in std::mem::take(&mut report.events) {
        publish(ctx, kcp, type_, reason, &note).await;
    }
    if !status::newly_initialized(prev, next) {
        return;
    }
    if let Some(created) = kcp.metadata.creation_timestamp.as_ref() {
        ctx.metrics()
            .time_to_initialized
            .observe(now.0.duration_since(created.0).as_secs_f64());
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

/// The (type, status) of each condition of `status`, for the tenant gauge.
fn condition_states(status: &KamajiControlPlaneStatus) -> Vec<(String, String)> {
    status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect()
}

/// What [`write_status`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StatusWrite {
    /// The status computed is the status read: nothing written.
    Unchanged,
    /// Written; the `resourceVersion` the write returned.
    Written(Option<String>),
    /// Not written: the object is gone, or the version the pass knew was replaced.
    Refused,
}

/// Writes `next` as the status when it differs from `prev`, the status of the object the pass
/// read, with `version` as precondition: that object's `resourceVersion`, or the one the pass's
/// own writes to it left. A pass that read a version the watch had not yet replaced (a previous
/// pass's status write not back yet, say) computed `next` from an older status, and writing it
/// would undo the newer one (conditions' transition times moved back, a write for nothing).
/// Such a write gets `409 Conflict` and is dropped: the newer version's watch event brings a
/// pass of its own.
async fn write_status(
    kcp: &KamajiControlPlane,
    version: Option<&String>,
    ctx: &Context,
    prev: &KamajiControlPlaneStatus,
    next: &KamajiControlPlaneStatus,
) -> Result<StatusWrite, Error> {
    if prev == next {
        return Ok(StatusWrite::Unchanged);
    }
    debug!(kcp = %object_key(kcp), changed = ?status_changes(prev, next), "writing status");
    let patch = serde_json::json!({"status": next});
    match patch_at_version(kcp, ctx, version, patch, true).await {
        Ok(written) => Ok(StatusWrite::Written(written.metadata.resource_version)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(StatusWrite::Refused),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            debug!(kcp = %object_key(kcp), "status computed from a replaced version: not written");
            ctx.metrics().stale_status_writes.inc();
            Ok(StatusWrite::Refused)
        }
        Err(source) => Err(Error::Kube {
            action: "write status".into(),
            source,
        }),
    }
}

/// The names of what differs between two statuses, for the log: top-level fields by name,
/// conditions by type (`conditions[Available]`).
fn status_changes(prev: &KamajiControlPlaneStatus, next: &KamajiControlPlaneStatus) -> Vec<String> {
    type Fields = std::collections::BTreeMap<String, serde_json::Value>;
    let fields = |s: &KamajiControlPlaneStatus| -> Fields {
        match serde_json::to_value(s) {
            Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
            _ => Fields::new(),
        }
    };
    let conditions = |f: &Fields| -> Fields {
        f.get("conditions")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| (c["type"].as_str().unwrap_or_default().to_owned(), c.clone()))
            .collect()
    };
    let (a, b) = (fields(prev), fields(next));
    differing(&a, &b)
        .into_iter()
        .flat_map(|key| match key.as_str() {
            "conditions" => differing(&conditions(&a), &conditions(&b))
                .into_iter()
                .map(|t| format!("conditions[{t}]"))
                .collect(),
            _ => vec![key],
        })
        .collect()
}

/// The keys whose values differ between `a` and `b` (present in one only included), in order.
fn differing(
    a: &std::collections::BTreeMap<String, serde_json::Value>,
    b: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Vec<String> {
    a.keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

async fn publish(
    ctx: &Context,
    kcp: &KamajiControlPlane,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    if ctx.memory().repeats_event(
        kcp.metadata.uid.as_deref().unwrap_or_default(),
        reason,
        note,
    ) {
        return;
    }
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder().publish(&ev, &kcp.object_ref(&())).await {
        warn!("publishing event: {e}");
    }
}

/// Runs `work`; when it is `slow` (RSA key generation takes up to seconds per key), the
/// runtime's worker thread running it is handed to another thread meanwhile
/// ([`tokio::task::block_in_place`]), so other passes, watches and leader election go on
/// while it computes, even when as many passes as the runtime has workers (two on two cores)
/// generate keys at once. On a current-thread runtime (unit tests) `work` just runs.
fn off_the_worker<T>(slow: bool, work: impl FnOnce() -> T) -> T {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if slow && multi_threaded {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A condition reported twice in a pass is written once, as last reported (the API server
    /// refuses a status with a type twice: `Duplicate value`).
    #[test]
    fn a_condition_reported_twice_is_written_once_as_last_reported() {
        let mut report = Report::default();
        report.push(Cond::yes(types::DATASTORE_READY, reasons::READY, "etcd"));
        report.push(Cond::yes(types::SPEC_VALID, reasons::READY, ""));
        report.push(Cond::no(
            types::DATASTORE_READY,
            reasons::DATASTORE_SCHEMA_IN_USE,
            "held",
        ));
        let of: Vec<_> = report
            .conditions
            .iter()
            .map(|c| (c.type_, c.status))
            .collect();
        assert_eq!(
            of,
            [
                (types::DATASTORE_READY, "False"),
                (types::SPEC_VALID, "True")
            ]
        );
    }

    /// On a runtime whose workers are all busy (here its one worker), slow work (RSA key
    /// generation) leaves its worker: another task's timer keeps firing meanwhile. Run as
    /// ECDSA work (not slow), the same work holds the worker and the timer stalls.
    #[test]
    fn slow_work_leaves_the_one_worker_so_other_tasks_go_on() {
        let ticks_during = |slow: bool| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                tokio::spawn(async move {
                    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
                    let counting = std::sync::Arc::clone(&ticks);
                    let ticker = tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            counting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    });
                    // Let the ticker start.
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    let before = ticks.load(std::sync::atomic::Ordering::Relaxed);
                    off_the_worker(slow, || std::thread::sleep(Duration::from_millis(300)));
                    let during = ticks.load(std::sync::atomic::Ordering::Relaxed) - before;
                    ticker.abort();
                    during
                })
                .await
                .expect("task")
            })
        };
        assert!(ticks_during(true) >= 10, "slow work held the worker");
        assert_eq!(ticks_during(false), 0, "fast work runs in place");
    }
}
